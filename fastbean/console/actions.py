"""Actions: what the console changes, run as a client would run it.

Each action is a few protocol commands fed to an engine connection of its
own, so it is counted, logged to the binlog, replicated and answered as a
client's would be: the reply comes once the change is durable. A token short
of admin goes through the same role filter (server/rolefilter.py) as its
protocol connections, so the console can do no more than the token could.
Every action is logged as a `console-action` event with the signed-in name.
"""
import asyncio
import logging

from fastbean.logs import event
from fastbean.server.rolefilter import RoleFilter

TIMEOUT = 30.0              # seconds an action may wait for its replies (a flush of millions, a slow disk)
NOT_PERMITTED = b"NOT_PERMITTED"


class ActionError(Exception):
    """An action the engine did not do: the reply that says why."""


class _Transport:
    # what the role filter asks of a transport
    def __init__(self):
        self.closing = False

    def is_closing(self):
        return self.closing

    def get_write_buffer_size(self):
        return 0

    def abort(self):
        self.closing = True

    close = abort


class Client:
    """One engine connection for one action: feed commands, get their reply lines."""

    def __init__(self, server, session, address):
        self._loop = loop = server.loop
        self._buf = b""
        self._lines = []
        self._want = 0
        self._done = None
        self._transport = _Transport()
        conn = self._conn = server.core.connect(self._set_reading, self._again)
        if session.roles.admin:
            conn.attach(self._write, self._writelines, self._transport.close)
            self._feed = conn.feed
        else:
            filt = RoleFilter(session.roles, session.name, address, server.core, server.config.max_job_size,
                              loop.call_soon, self._set_reading)
            conn.attach(*filt.writers(conn, self._write, self._transport), self._transport.close)
            self._feed = filt.feed

    def _set_reading(self, on):
        pass

    def _again(self):
        self._loop.call_soon(self._run_again)

    def _run_again(self):
        if not self._conn.is_closed:
            self._conn.again()

    def _writelines(self, chunks):
        self._write(b"".join(chunks))

    def _write(self, data):
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n")
            if end < 0:
                break
            self._lines.append(self._buf[:end])
            self._buf = self._buf[end + 2:]
        if self._done is not None and len(self._lines) >= self._want and not self._done.done():
            self._done.set_result(None)

    async def run(self, data, replies):
        """Feed data (commands, one reply line each); their `replies` lines."""
        self._want = len(self._lines) + replies
        self._done = self._loop.create_future()
        self._feed(data)
        if len(self._lines) < self._want:
            try:
                await asyncio.wait_for(self._done, TIMEOUT)
            except asyncio.TimeoutError:
                raise ActionError("no reply within %gs" % TIMEOUT) from None
        got = self._lines[self._want - replies:self._want]
        return [line.decode("utf-8", "replace") for line in got]

    def close(self):
        self._transport.closing = True
        self._conn.gone()


def _expect(reply, word):
    if not reply.startswith(word):
        raise ActionError("refused: your token may not do this" if reply == NOT_PERMITTED.decode() else reply)
    return reply


async def perform(server, session, address, action, tube=None, job=None, **args):
    """Run action (a name of ACTIONS) for session; the engine's reply as text.
    Raises ActionError with the engine's refusal."""
    if not server.serving:
        # a standby's engine follows the stream: a change made here would fork it
        raise ActionError("this node is not the primary: act on the primary's console")
    client = Client(server, session, address)
    reply = None
    try:
        reply = await ACTIONS[action](client, tube=tube, job=job, **args)
        return reply
    except ActionError as e:
        reply = "refused: %s" % e
        raise
    finally:
        client.close()
        event(logging.INFO, "console-action", "%(client)s (%(address)s) %(action)s"
              + (" tube %(tube)s" if tube is not None else "") + (" job %(job)d" if job is not None else "")
              + ": %(reply)s", client=session.name, address=address, action=action,
              tube=tube.decode("ascii", "replace") if tube is not None else None, job=job,
              reply=reply, **{k: v for k, v in args.items() if isinstance(v, (int, str)) or v is None})


async def _one(client, line, word):
    (reply,) = await client.run(line, 1)
    return _expect(reply, word)


async def _used(client, tube, line, word):
    use, reply = await client.run(b"use %s\r\n%s" % (tube, line), 2)
    _expect(use, "USING")
    return _expect(reply, word)


async def pause(client, tube, job, seconds):
    return await _one(client, b"pause-tube %s %d\r\n" % (tube, seconds), "PAUSED")


async def kick(client, tube, job, count):
    return await _used(client, tube, b"kick %d\r\n" % count, "KICKED")


async def flush_buried(client, tube, job):
    return await _one(client, b"flush-buried %s\r\n" % tube, "FLUSHED")


async def flush_tube(client, tube, job):
    return await _one(client, b"flush-tube %s\r\n" % tube, "FLUSHED")


async def retry_limit(client, tube, job, count, dead=None):
    if count is None:
        line = b"retry-limit default\r\n"
    else:
        line = b"retry-limit %d%s\r\n" % (count, b" " + dead if dead else b"")
    return await _used(client, tube, line, "RETRY_LIMIT")


async def delete(client, tube, job):
    return await _one(client, b"delete %d\r\n" % job, "DELETED")


async def kick_job(client, tube, job):
    return await _one(client, b"kick-job %d\r\n" % job, "KICKED")


async def move(client, tube, job):
    return await _one(client, b"move-job %d %s\r\n" % (job, tube), "MOVED")


async def reprioritize(client, tube, job, pri):
    return await _one(client, b"reprioritize-job %d %d\r\n" % (job, pri), "REPRIORITIZED")


async def copy(client, tube, job, pri, delay, ttr, body):
    return await _used(client, tube, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body),
                       "INSERTED")


async def requeue(client, tube, job, moves):
    """Dead letters back to their tubes: moves is [(id, tube)]; all in one
    pipeline, so a thousand wait for one binlog commit, not a thousand."""
    replies = await client.run(b"".join(b"move-job %d %s\r\n" % move for move in moves), len(moves))
    if NOT_PERMITTED.decode() in replies:
        raise ActionError("refused: your token may not do this")
    moved = sum(reply == "MOVED" for reply in replies)
    return "MOVED %d of %d" % (moved, len(moves))


ACTIONS = {"pause": pause, "kick": kick, "flush-buried": flush_buried, "flush-tube": flush_tube,
           "retry-limit": retry_limit, "delete": delete, "kick-job": kick_job, "move": move,
           "reprioritize": reprioritize, "copy": copy, "requeue": requeue}
