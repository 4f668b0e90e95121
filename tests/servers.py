"""Real server processes for tests: start on a free loopback port, wait until
they accept, stop by PID; and a small blocking client that speaks the protocol."""
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BEANSTALKD = shutil.which("beanstalkd") or "/usr/bin/beanstalkd"

# `make fuzz` (FASTBEAN_FUZZ=N) multiplies the examples of the randomized tests.
FUZZ = max(1, int(os.environ.get("FASTBEAN_FUZZ", "1")))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fastbean_cmd():
    # FASTBEAN_CMD lets a run wrap the server (valgrind, an ASan preload, ...)
    return shlex.split(os.environ.get("FASTBEAN_CMD", "")) or [sys.executable, "-m", "fastbean"]


class Server:
    """One server process on 127.0.0.1:port."""

    def __init__(self, kind, proc, port, log):
        self.kind, self.proc, self.port, self._log = kind, proc, port, log

    @property
    def pid(self):
        return self.proc.pid

    @classmethod
    def start(cls, kind, *args, port=None, timeout=10.0):
        port = port or free_port()
        base = [BEANSTALKD] if kind == "beanstalkd" else fastbean_cmd()
        # stderr goes to a file: a pipe nobody reads could fill up and stall the server
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen(base + ["-l", "127.0.0.1", "-p", str(port), *map(str, args)],
                                stdout=subprocess.DEVNULL, stderr=log)
        server = cls(kind, proc, port, log)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return server
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("%s exited with %s: %s" % (
                        kind, proc.returncode, server.log.decode(errors="replace")))
                if time.monotonic() > deadline:
                    server.kill()
                    raise RuntimeError("%s did not accept connections on port %d" % (kind, port))
                time.sleep(0.01)

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signal the process (by PID) and wait for it; returns its exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    @property
    def log(self):
        """Everything the server wrote to stderr so far."""
        self._log.seek(0)
        return self._log.read()

    def kill(self):
        return self.stop(signal.SIGKILL)

    def wait(self, timeout=10.0):
        return self.proc.wait(timeout)


class Client:
    """Blocking protocol client over one socket."""

    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def body(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n + 2:]
        return body

    def cmd(self, line, expect=None):
        """Send one command line (and body, if included); return the reply line."""
        self.send(line + b"\r\n")
        reply = self.line()
        if expect is not None:
            assert reply == expect, (line, reply, expect)
        return reply

    def put(self, body, pri=0, delay=0, ttr=60):
        reply = self.cmd(b"put %d %d %d %d\r\n%s" % (pri, delay, ttr, len(body), body))
        assert reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def use(self, tube):
        self.cmd(b"use " + tube.encode(), b"USING " + tube.encode())

    def watch(self, tube):
        assert self.cmd(b"watch " + tube.encode()).startswith(b"WATCHING ")

    def job(self, line):
        """A command answered with RESERVED/FOUND + body: (id, body) or None."""
        reply = self.cmd(line)
        if not reply.startswith((b"RESERVED ", b"FOUND ")):
            return None
        _, jid, n = reply.split()
        return int(jid), self.body(int(n))

    def reserve_job(self, jid):
        return self.job(b"reserve-job %d" % jid)

    def peek(self, jid):
        r = self.job(b"peek %d" % jid)
        return None if r is None else r[1]

    def yaml(self, line):
        reply = self.cmd(line)
        if not reply.startswith(b"OK "):
            return None
        doc = self.body(int(reply.split()[1])).decode()
        out = {}
        for entry in doc.split("\n")[1:]:
            if ": " in entry:
                k, v = entry.split(": ", 1)
                out[k] = int(v) if v.lstrip("-").isdigit() else v
        return out

    def stats(self):
        return self.yaml(b"stats")

    def stats_job(self, jid):
        return self.yaml(b"stats-job %d" % jid)
