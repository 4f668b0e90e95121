"""The stream of a client whose token has roles short of admin.

Its reads are parsed here first, by a parser of the engine's own (so the
framing of lines and put bodies is the engine's), and each command is
judged (roles.py): one allowed goes on to the engine, written out again
from what was parsed; one refused is answered here. Plain connections and
admins never come here, so the engine's path is the same whether roles are
used or not.

Replies keep the order of the commands: the engine's replies are counted
as they are written, and an answer given here waits for the engine's
replies to the commands before it (a blocked reserve, say).

A command on a job given by id is judged by the tube the job is in when the
command runs: if the engine has not run every command before it (a reserve
waits, a turn is deferred), it and everything after it are held until the
engine has, and reading stops while they are.
"""
import collections
import logging
import time

from fastbean.engine.core import put_tag
from fastbean.engine.parser import Parser
from fastbean.logs import event
from fastbean.server.roles import ALLOW, BY_ID, DENY, HIDE, PEEK_USED

NOT_PERMITTED = b"NOT_PERMITTED\r\n"
NOT_FOUND = b"NOT_FOUND\r\n"
MAX_WAITING = 1024          # answers given here waiting behind the engine's; beyond, the client is closed
MAX_UNREAD = 1 << 20        # bytes of answers a client leaves unread before it is closed
MAX_HELD = 1 << 20          # bytes read behind a held command before reading stops (the engine's READ_HIGH)
LOG_EVERY = 10.0            # seconds between permission-denied events of one token
# replies of the engine followed by a body: the word, then its length last on the line
BODY_REPLIES = (b"RESERVED ", b"FOUND ", b"OK ")
# replies whose count of parts follows: a job each (reserve-batch), a line each (list-tube)
PARTED_REPLIES = (b"RESERVED_BATCH ", b"LISTED ")
WAIT_ENGINE = None          # in the queue of answers: the engine's reply to a command it was given


class DenialLog:
    """permission-denied events, at most one per token and command every
    LOG_EVERY seconds: the next one says how many were left out meanwhile."""

    def __init__(self):
        self._last = {}     # (token name, command) -> (time of its last event, refusals not logged since)

    def refused(self, client, address, command, tube, job=None):
        now = time.monotonic()
        key = (client, command)
        last, quiet = self._last.get(key, (None, 0))
        if last is not None and now - last < LOG_EVERY:
            self._last[key] = (last, quiet + 1)
            return
        self._last[key] = (now, 0)
        event(logging.WARNING, "permission-denied", "%(client)s (%(address)s) may not %(command)s"
              + (" job %(job)d" if job is not None else "") + (" on tube %(tube)s" if tube else "")
              + (" (and %(more)d more refused)" if quiet else ""),
              client=client, address=address, command=command, tube=tube, job=job, more=quiet)


DENIALS = DenialLog()


# list-tube's states as the parser numbers them (engine/wire.pxd)
LIST_STATES = {1: b"ready", 2: b"reserved", 3: b"buried", 4: b"delayed"}
# what a retry-limit line asks, as the parser numbers it (engine/wire.pxd)
RETRY_SHOW, RETRY_SET, RETRY_DEFAULT = 0, 1, 2


def malformed_line(verb):
    """A line the engine reads as the extension `verb` with BAD_FORMAT: what a
    line of it that cannot be read is handed on as, so that the engine
    answers it as it would anyone's (--strict and --testing included)."""
    return verb.encode() + b" !\r\n"


def _line(item):
    # a parsed command written out again: the engine parses it as it parsed the original
    if item[0] == "list-tube":
        state, key, job, count = item[2:]
        cursor = b"%d.%d" % (key, job) if job else b"0"
        return b"list-tube %s %s %d\r\n" % (LIST_STATES[state], cursor, count)
    if item[0] == "retry-limit":
        ask, limit, dead = item[2:]
        if ask == RETRY_SHOW:
            return b"retry-limit\r\n"
        if ask == RETRY_DEFAULT:
            return b"retry-limit default\r\n"
        return b"retry-limit %d%s\r\n" % (limit, b" " + dead if dead else b"")
    words = [item[0].encode()]
    for arg in item[2:]:
        words.append(arg if isinstance(arg, bytes) else b"%d" % arg)
    return b" ".join(words) + b"\r\n"


class RoleFilter:
    """One restricted connection: its commands judged, its replies in order."""

    __slots__ = ("_roles", "_client", "_address", "_core", "_conn", "_write", "_parser", "_transport",
                 "_max_job_size", "_used", "_watched", "_put", "_queue", "_waiting", "_reply", "_body",
                 "_parts", "_call_soon", "_hold_reading", "_held", "_held_bytes", "_reading_held",
                 "_release_asked")

    def __init__(self, roles, client, address, core, max_job_size, call_soon, hold_reading):
        """call_soon(fn): the loop's; hold_reading(bool): stop reading the
        client (True) or let the engine decide again (False)."""
        self._roles = roles
        self._client = client
        self._address = address
        self._core = core
        self._max_job_size = max_job_size
        self._call_soon = call_soon
        self._hold_reading = hold_reading
        self._held = None                   # parsed commands not judged yet, while the engine catches up
        self._held_bytes = 0                # bytes read since
        self._reading_held = False          # past MAX_HELD of them: reading stopped
        self._release_asked = False
        self._conn = self._write = self._transport = None
        self._parser = Parser()
        self._parser.long_lines = not core.strict       # as the engine's own parser
        self._used = b"default"             # the connection's tubes, as the engine has them
        self._watched = [b"default"]
        self._put = None                    # the put line whose body is awaited, and its verdict
        self._queue = collections.deque()   # WAIT_ENGINE or an answer, in command order
        self._waiting = 0                   # answers in the queue
        self._reply = b""                   # the engine's reply being written, up to its line's end
        self._body = 0                      # bytes of a reply's body still to pass
        self._parts = 0                     # parts of a parted reply still to pass

    def writers(self, conn, write, transport):
        """The engine's writers for conn: its replies pass through here on
        their way to write (transport's)."""
        self._conn, self._write, self._transport = conn, write, transport
        return self._engine_write, self._engine_writelines

    # -- reads ----------------------------------------------------------------------

    def feed(self, data):
        items = self._parser.parse(data, self._fits, self._tagged, not self._core.strict)
        if self._held is not None:
            self._held.extend(items)
            self._held_bytes += len(data)
            if self._held_bytes > MAX_HELD and not self._reading_held:
                self._reading_held = True
                self._hold_reading(True)
            return
        self._run(items)

    def _run(self, items):
        forward = []
        conn = self._conn
        for i, item in enumerate(items):
            if self._transport.is_closing():
                return
            if item[0] in BY_ID and item[1] is None:
                # the commands before it may make, move or end the job it
                # names: the engine runs them first, and it is judged once
                # they have run, by the tube the job is in then
                if forward:
                    conn.feed(b"".join(forward))
                    forward = []
                if not conn.caught_up:
                    self._held = items[i:]
                    self._held_bytes = 0
                    return
            line = self._judge(item)
            if line:
                forward.append(line)
        if forward:
            conn.feed(b"".join(forward))

    def _release(self):
        # the engine wrote a reply while commands were held: go on if it has
        # run everything it was given
        self._release_asked = False
        if self._held is None or self._transport.is_closing() or not self._conn.caught_up:
            return
        items, self._held = self._held, None
        self._held_bytes = 0
        if self._reading_held:
            self._reading_held = False
            self._hold_reading(False)
        self._run(items)

    def _fits(self, nbytes):
        return nbytes <= self._max_job_size

    def _tagged(self, rest):
        # a put's idempotency tag: its body follows, as the engine reads it
        return not self._core.strict and put_tag(rest) is not None

    def _judge(self, item):
        """The bytes to give the engine for a parsed command, or None when it
        is answered here."""
        command = item[0]
        if command == "put":
            return self._put_line(item)
        if command == "body" or command == "skipped":
            return self._put_end(item)
        if command == "UNKNOWN_COMMAND" or command == "BAD_FORMAT":
            return self._answer(command.encode() + b"\r\n")
        if command == "schedule":
            return self._schedule_line(item)
        if item[1] is not None:
            # an extension's line that cannot be read: the engine answers it
            # as it answers anyone (BAD_FORMAT; UNKNOWN_COMMAND with --strict)
            self._queue.append(WAIT_ENGINE)
            return malformed_line(command)
        arg = item[2] if len(item) > 2 else None
        verdict = self._roles.verdict(command, arg, self._used, self._watched, self._core.job_tube)
        if verdict == DENY:
            return self._refuse(command, self._tube_of(command, arg))
        if verdict == HIDE:
            tube = self._core.job_tube(arg)
            if tube is not None:                # there is such a job, in another's tube
                DENIALS.refused(self._client, self._address, command, tube.decode(), arg)
            return self._answer(NOT_FOUND)
        if command == "use":
            self._used = arg
        elif command == "watch" and arg not in self._watched:
            self._watched.append(arg)
        elif command == "ignore" and arg in self._watched and len(self._watched) > 1:
            self._watched.remove(arg)
        if command != "quit":
            self._queue.append(WAIT_ENGINE)
        return _line(item)

    def _tube_of(self, command, arg):
        # the tube a refused command was about, for the log
        if isinstance(arg, bytes):
            return arg
        if command in ("put", "list-tube", "retry-limit") or command in PEEK_USED:
            return self._used
        if command in ("reserve", "reserve-with-timeout", "reserve-batch"):
            return b",".join(self._watched)
        return None

    def _put_line(self, item):
        pri, delay, ttr, nbytes, rest = item[2:]
        allowed = self._roles.verdict("put", None, self._used, self._watched, None) == ALLOW
        if rest and not self._tagged(rest) and nbytes <= self._max_job_size:
            # no body follows this line (the engine's rule)
            return self._answer(b"BAD_FORMAT\r\n") if allowed else self._refuse("put", self._used)
        self._put = (b"put %d %d %d %d%s\r\n" % (pri, delay, ttr, nbytes, rest), nbytes, allowed)
        return None

    def _schedule_line(self, item):
        # a schedule line; its body (if a size could be read) comes as a put's
        nbytes, words = item[2:]
        if nbytes is None or self._core.strict:
            # no body follows: the engine answers it as anyone's (BAD_FORMAT, or
            # UNKNOWN_COMMAND with --strict, which reads the body as commands)
            self._queue.append(WAIT_ENGINE)
            return malformed_line("schedule")
        allowed = self._roles.verdict("schedule", None, self._used, self._watched, None) == ALLOW
        self._put = (b"schedule %s\r\n" % words, nbytes, allowed)
        return None

    def _put_end(self, item):
        line, nbytes, allowed = self._put
        self._put = None
        if not allowed:
            return self._refuse(line.split(b" ", 1)[0].decode(), self._used)
        if item[0] == "skipped":
            return self._answer(b"JOB_TOO_BIG\r\n")
        self._queue.append(WAIT_ENGINE)
        # a body without its CRLF: bytes that lack it too, for the engine to answer EXPECTED_CRLF
        return line + (item[2] if item[2] is not None else bytes(nbytes + 2))

    def _refuse(self, command, tube):
        DENIALS.refused(self._client, self._address, command,
                        tube.decode("ascii", "replace") if tube else None)
        return self._answer(NOT_PERMITTED)

    def _answer(self, reply):
        if not self._queue:
            self._write(reply)
            if self._transport.get_write_buffer_size() > MAX_UNREAD:
                self._flooded("left %(count)d bytes of refusals unread" % {"count": MAX_UNREAD})
        elif self._waiting >= MAX_WAITING:
            self._flooded("piled up %d refused commands behind a waiting one" % MAX_WAITING)
        else:
            self._queue.append(reply)
            self._waiting += 1
        return None

    def _flooded(self, what):
        # a client that sends refused commands without reading their answers
        # must not fill the server's memory with them
        event(logging.WARNING, "permission-flood", "%(client)s (%(address)s) %(what)s: closed",
              client=self._client, address=self._address, what=what)
        self._queue.clear()
        self._waiting = 0
        self._transport.abort()

    # -- replies ----------------------------------------------------------------------

    def _engine_writelines(self, chunks):
        self._engine_write(b"".join(chunks))

    def _engine_write(self, data):
        # beanstalk replies are framed as commands are: a line, and after some
        # a body whose length ends the line
        buf = self._reply + data if self._reply else data
        skip = len(self._reply)             # buf[skip:] is data; the rest was written before
        self._reply = b""
        out = []
        passed = 0                          # data[:passed] is in out
        start, n = 0, len(buf)              # a line in progress starts at buf[0]
        while start < n:
            if self._body:
                step = min(self._body, n - start)
                self._body -= step
                start += step
                if self._body:
                    break
            else:
                end = buf.find(b"\r\n", start)
                if end < 0:
                    self._reply = buf[start:]
                    break
                line, start = buf[start:end], end + 2
                if line.startswith(PARTED_REPLIES):
                    self._parts = int(line.split(b" ", 2)[1])
                    if self._parts:
                        continue
                elif line.startswith(BODY_REPLIES):
                    self._body = int(line.rpartition(b" ")[2]) + 2
                    continue
            if self._parts:
                # one part of a parted reply: the reply is complete with its last
                self._parts -= 1
                if self._parts:
                    continue
            passed = self._replied(data, passed, start - skip, out)
        out.append(data[passed:])
        self._write(b"".join(out) if len(out) > 1 else data)
        if self._held is not None and not self._release_asked:
            # not from inside the engine's own write: on the loop's next turn
            self._release_asked = True
            self._call_soon(self._release)

    def _replied(self, data, passed, end, out):
        """The engine's reply ending at data[end] is complete: the answers
        given here behind it follow it. Returns how much of data is in out."""
        queue = self._queue
        if queue and queue[0] is WAIT_ENGINE:
            queue.popleft()
        if not queue or queue[0] is WAIT_ENGINE:
            return passed
        out.append(data[passed:end])
        while queue and queue[0] is not WAIT_ENGINE:
            out.append(queue.popleft())
            self._waiting -= 1
        return end
