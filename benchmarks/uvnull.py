"""uvnull: nullserver.c's job on uvloop, as a floor for any server built on it.

    python -m benchmarks.uvnull PORT

Answers each `put` with "INSERTED 1" and `use` with "USING", keeps nothing,
parses nothing beyond counting the puts a read holds: enough for the load
generator's puts at depth 1, where each read is one whole command (not a
beanstalk server: a put split across reads would be answered twice or not
at all). What it costs per put beyond nullserver.c is what uvloop and CPython
cost a request (a callback with the GIL, a bytes object for the read, a
Python call, transport.write); what fastbean costs beyond it is fastbean's
own work. benchmarks/perrequest.py runs it beside the other servers.
"""
import asyncio
import sys

import uvloop

INSERTED = b"INSERTED 1\r\n"


class Null(asyncio.Protocol):
    __slots__ = ("write",)

    def connection_made(self, transport):
        self.write = transport.write

    def data_received(self, data):
        n = data.count(b"put ")
        if n:
            self.write(INSERTED * n)
        elif data.startswith(b"use "):
            self.write(b"USING " + data[4:].split(b"\r\n", 1)[0] + b"\r\n")
        else:
            self.write(b"UNKNOWN_COMMAND\r\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        sys.exit("usage: python -m benchmarks.uvnull PORT")
    loop = uvloop.new_event_loop()
    loop.run_until_complete(loop.create_server(Null, "127.0.0.1", int(argv[0]), backlog=1024))
    loop.run_forever()


if __name__ == "__main__":
    main()
