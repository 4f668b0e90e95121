"""The blocking client: one socket, every command of the table in _protocol."""
from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from typing import List, Tuple, TypeVar

from fastbean.client import _protocol as P
from fastbean.client._protocol import (
    DEFAULT_PRI,
    DEFAULT_TTR,
    FOREVER,
    LINE,
    MAX_REPLY_LINE,
    PIPELINE,
    STANDBY,
    STATS_TEXT_KEYS,
    TEXT_KEYS,
    TIMEOUT,
    Address,
    Backoff,
    BadFormat,
    Call,
    ConnectError,
    ConnectionLost,
    Job,
    ListedJob,
    NoReply,
    ProtocolError,
    Reader,
    Stats,
    UnexpectedReply,
    UnknownCommand,
    addresses_of,
    alien,
    backoff_of,
    describe,
    no_primary,
    parse_dict,
    shown,
)

T = TypeVar("T")


class Client:
    """One connection to a beanstalk-protocol server (fastbean or any beanstalkd).

    address: (host, port), the path of a UNIX socket, or a list of them: the
    nodes of an HA group, tried in turn until one serves (a standby closes the
    connection at once; NoPrimary lists what each address did). timeout:
    seconds for connecting and then for each reply (None: wait for ever). tls:
    an ssl.SSLContext (tls_context() makes one) to speak TLS, as to a fastbean
    --tls-listen; server_hostname: the name the server's certificate must
    have (default: the host connected to; needed for a UNIX socket). token:
    authenticate with it at once, and after every reconnect (auth(), for a
    server with --auth-tokens). reconnect: a Backoff (True: the default one)
    to connect again when the connection is lost; the tube in use and the
    watched tubes are restored, and the command that was cut off is sent again
    only if doing so is harmless (see docs/python.md); otherwise it raises
    ConnectionLost and the next command reconnects. None (the default): a lost
    connection stays lost.

    Two levels share the connection:
    - commands (put, reserve, delete, release, bury, touch, watch, peek, kick,
      stats...) check the reply and return what it carries; an error reply
      raises the ServerError subclass named after it (NotFound, TimedOut...);
    - the wire (send, line, body, cmd, job, yaml) sends any bytes and hands back
      the replies as they come, for tests that check a server byte for byte.

    Every failure is a ClientError. The ones about the connection itself are also
    OSErrors: ConnectError and ConnectionLost are ConnectionErrors, and NoReply (no
    reply within the timeout) is a ConnectionLost and a TimeoutError.
    """

    def __init__(self, address: Address | Sequence[Address], timeout: float | None = TIMEOUT, *,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 token: str | bytes | None = None, reconnect: Backoff | bool | None = None) -> None:
        self.addresses = addresses_of(address)
        self.address: Address = self.addresses[0]
        self.where = describe(self.address)
        self.timeout = timeout
        self.tls = tls
        self.server_hostname = server_hostname
        self.token = token
        self.reconnect = backoff_of(reconnect)
        self.reconnects = 0                     # connections made after the first
        self._buf = b""
        self._used: bytes | None = b"default"   # the tube in use on this connection, if known
        self._want_used = b"default"            # what a reconnect restores
        self._watched: List[bytes] = [b"default"]
        self._lost = False
        self.sock: socket.socket = self._connect()

    # -- connecting

    def _open(self, address: Address) -> socket.socket:
        where = describe(address)
        try:
            if isinstance(address, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(address)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(address, self.timeout)
        except (OSError, UnicodeError, ValueError) as e:     # the last two: unusable names
            raise ConnectError("cannot connect to %s: %s" % (where, _reason(e))) from None
        if self.tls is not None:
            name = self.server_hostname or (None if isinstance(address, str) else address[0])
            try:
                sock = self.tls.wrap_socket(sock, server_hostname=name)     # the handshake, within timeout
            except (OSError, ValueError) as e:    # ValueError: no name to check the certificate against
                sock.close()
                why = _reason(e) if isinstance(e, OSError) else str(e)
                raise ConnectError("cannot connect to %s over TLS: %s" % (where, why)) from None
        return sock

    def _connect(self) -> socket.socket:
        """Connect to the first address that serves; restore the session there."""
        tried: List[Tuple[str, str]] = []
        group = len(self.addresses) > 1
        for address in self.addresses:
            where = describe(address)
            try:
                sock = self._open(address)
            except ConnectError as e:
                if not group:
                    raise
                tried.append((where, str(e).replace("cannot connect to %s" % where, "could not connect", 1)))
                continue
            self.sock, self.address, self.where, self._buf, self._lost = sock, address, where, b"", False
            try:
                self._restore(probe=group)
            except ConnectionLost as e:
                sock.close()
                if not group:
                    raise
                tried.append((where, "did not answer in time" if isinstance(e, NoReply) else STANDBY))
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise no_primary(tried)

    def _restore(self, probe: bool) -> None:
        """auth, use and watch as before the connection was lost; with probe, make
        sure the server answers (a standby closes the connection at once)."""
        self._used = b"default"
        sent = False
        if self.token is not None:
            self._exec(P.auth(self.token))
            sent = True
        if self._want_used != b"default":
            self._exec(P.use(self._want_used))
            self._used = self._want_used
            sent = True
        for tube in self._watched:
            if tube != b"default":
                self._exec(P.watch(tube))
                sent = True
        if b"default" not in self._watched:
            self._exec(P.ignore(b"default"))
            sent = True
        if probe and not sent:
            self._exec(P.list_tube_used())

    def _reconnect(self) -> None:
        backoff = self.reconnect
        assert backoff is not None
        attempt = 0
        while True:
            try:
                self.sock = self._connect()
                self.reconnects += 1
                return
            except ConnectError:
                attempt += 1
                if backoff.tries is not None and attempt >= backoff.tries:
                    raise
            time.sleep(backoff.delay(attempt - 1))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<%s.%s to %s>" % (type(self).__module__, type(self).__qualname__, self.where)

    # -- the wire: bytes as they are

    def send(self, data: bytes) -> None:
        """Send bytes as they are: any number of commands, or part of one."""
        self._used = None       # they may hold a use
        self._send(data)

    def line(self) -> bytes:
        """The next reply line, without its CRLF."""
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                line, self._buf = self._buf[:end], self._buf[end + 2:]
                return line
            if len(self._buf) > MAX_REPLY_LINE:
                raise alien(self.where, self._buf)
            self._fill(bool(self._buf))

    def body(self, n: int) -> bytes:
        """The next n bytes, which must be followed by CRLF (a reply's body)."""
        while len(self._buf) < n + 2:
            self._fill(True)
        body, end, self._buf = self._buf[:n], self._buf[n:n + 2], self._buf[n + 2:]
        if end != b"\r\n":
            raise ProtocolError("%s sent a reply body without its closing CRLF" % self.where)
        return body

    def cmd(self, line: bytes, expect: bytes | None = None) -> bytes:
        """Send one command line (and its body, if line holds one) and return the reply
        line as it came. expect: the reply it must be, else UnexpectedReply."""
        self.send(line + b"\r\n")
        reply = self.line()
        if expect is not None and reply != expect:
            raise UnexpectedReply("%s: %s answered %r, not %r" % (
                shown(line.split(b"\r\n", 1)[0]), self.where, reply, expect), reply, expect)
        return reply

    def job(self, line: bytes) -> tuple[int, bytes] | None:
        """Send a command that may answer with a job (RESERVED or FOUND, and its
        body): (id, body), or None for any other reply."""
        reply = self.cmd(line)
        words = reply.split()
        if not words or words[0] not in (b"RESERVED", b"FOUND"):
            return None
        if len(words) != 3 or not words[1].isdigit() or not words[2].isdigit():
            raise alien(self.where, reply)
        return int(words[1]), self.body(int(words[2]))

    def yaml(self, line: bytes) -> Stats:
        """Send a command answered by OK and a stats document (stats, stats-tube,
        stats-job, fastbean-stats...): the document as parse_dict reads it."""
        def read(where: str) -> Reader[Stats]:
            _, body = yield from P.read_reply(line.split(b" ", 1)[0].decode(), where, (b"OK",))
            return parse_dict(body or b"", STATS_TEXT_KEYS if line == b"stats" else TEXT_KEYS)
        return self._run(Call("yaml", line + b"\r\n", read))

    # -- producing

    def use(self, tube: str | bytes) -> None:
        """Put new jobs into this tube (sent only when another one is in use)."""
        name = P.tube_bytes(tube)
        if name != self._used:
            self._used = None
            self._run(P.use(name))
            self._used = self._want_used = name

    def put(self, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0, ttr: int = DEFAULT_TTR) -> int:
        """A new job in the tube in use; its id. pri: 0 is the most urgent
        (default 1024, as fastbean-ctl's). delay: seconds before it is ready.
        ttr: seconds a worker may hold it before it is given to another."""
        return self._run(P.put(body, pri, delay, ttr))

    def put_unique(self, body: bytes, key: str | bytes, cooldown: int = 0, pri: int = DEFAULT_PRI,
                   delay: int = 0, ttr: int = DEFAULT_TTR) -> tuple[int, str | None]:
        """A new job in the tube in use unless one put with this idempotency key
        (tuber's idp:KEY, a fastbean extension) is live there, or was deleted
        less than `cooldown` seconds ago: (id, None) for a new job, else
        (that job's id, its state: "ready", "reserved", "delayed", "buried"
        or "deleted"). A more urgent `pri` is given to the live job.
        BadFormat from a server without it. Safe to send again after a lost
        reply, so a reconnecting client does."""
        return self._run(P.put_unique(body, key, cooldown, pri, delay, ttr))

    def put_in(self, tube: str | bytes, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0,
               ttr: int = DEFAULT_TTR, key: str | bytes | None = None,
               cooldown: int = 0) -> tuple[int, str | None]:
        """use(tube) and put (put_unique with a key) in one write, so that no
        other task sharing the connection can slip a use in between: (id,
        None), or with a key (id, state) as put_unique returns."""
        name = P.tube_bytes(tube)
        self._used = None
        result = self._run(P.put_in(name, body, pri, delay, ttr, key, cooldown))
        self._used = self._want_used = name
        return result

    # -- consuming

    def watch(self, tube: str | bytes) -> int:
        """Reserve from this tube too; returns how many tubes are watched."""
        name = P.tube_bytes(tube)
        n = self._run(P.watch(name))
        if name not in self._watched:
            self._watched.append(name)
        return n

    def ignore(self, tube: str | bytes) -> int:
        """Stop reserving from this tube; how many are still watched. NotIgnored
        for the last one."""
        name = P.tube_bytes(tube)
        n = self._run(P.ignore(name))
        if name in self._watched:
            self._watched.remove(name)
        return n

    def reserve(self, timeout: int | None = None) -> Job:
        """The next job of the watched tubes, waiting for one (with timeout:
        at most that many seconds, then TimedOut). DeadlineSoon when a job this
        client holds is within a second of its TTR."""
        return self._run(P.reserve() if timeout is None else P.reserve_with_timeout(timeout))

    def reserve_with_timeout(self, seconds: int) -> Job:
        """reserve-with-timeout: a job, or TimedOut after `seconds` (0: only a ready one)."""
        return self._run(P.reserve_with_timeout(seconds))

    def reserve_job(self, job_id: int) -> Job:
        """Reserve this job, whatever tubes are watched: (id, body); NotFound if
        it is not ready, delayed or buried."""
        return self._run(P.reserve_job(job_id))

    def reserve_batch(self, count: int, timeout: int | None = None) -> list[Job]:
        """Reserve up to `count` jobs at once (reserve-batch, a fastbean and tuber
        extension): [(id, body)] in reserve order, maybe empty. Without a
        timeout it takes what is ready now; with one (seconds) it waits that
        long for a first job. DeadlineSoon while it waits, and BadFormat from
        a server without it (beanstalkd reads the line as a bad reserve)."""
        return self._run(P.reserve_batch(count, timeout))

    def delete(self, job_id: int) -> None:
        """Delete a job (reserved by this client, or ready, delayed or buried)."""
        self._run(P.delete(job_id))

    def release(self, job_id: int, pri: int = DEFAULT_PRI, delay: int = 0) -> None:
        """Give a reserved job back, ready (or delayed `delay` seconds), with priority pri."""
        self._run(P.release(job_id, pri, delay))

    def bury(self, job_id: int, pri: int = DEFAULT_PRI) -> None:
        """Put a reserved job aside until it is kicked."""
        self._run(P.bury(job_id, pri))

    def touch(self, job_id: int) -> None:
        """Start a reserved job's TTR again."""
        self._run(P.touch(job_id))

    # -- looking

    def peek(self, job_id: int) -> bytes:
        """The body of a job; NotFound if there is no such job."""
        return self._run(P.peek(job_id))

    def peek_state(self, state: str) -> Job:
        """The next job in `state` (ready, delayed, buried) of the tube in use:
        (id, body); NotFound if none."""
        return self._run(P.peek_state(state))

    def peek_ready(self) -> Job:
        return self._run(P.peek_state("ready"))

    def peek_delayed(self) -> Job:
        return self._run(P.peek_state("delayed"))

    def peek_buried(self) -> Job:
        return self._run(P.peek_state("buried"))

    def stats(self) -> Stats:
        return self._run(P.stats())

    def stats_job(self, job_id: int) -> Stats:
        return self._run(P.stats_job(job_id))

    def stats_tube(self, tube: str | bytes) -> Stats:
        return self._run(P.stats_tube(tube))

    def stats_tubes(self, tubes: Iterable[str]) -> dict[str, Stats]:
        """stats-tube for many tubes, pipelined; a tube gone meanwhile is left out."""
        out: dict[str, Stats] = {}
        names = [t.encode("ascii") for t in tubes]
        for start in range(0, len(names), PIPELINE):
            part: dict[str, Stats] = self._run(P.stats_tubes(names[start:start + PIPELINE]))
            out.update(part)
        return out

    def fastbean_stats(self) -> Stats:
        """fastbean's own counters (fastbean-stats, an extension)."""
        return self._run(P.fastbean_stats())

    def list_tubes(self) -> list[str]:
        return self._run(P.list_tubes())

    def list_tube_used(self) -> str:
        return self._run(P.list_tube_used())

    def list_tubes_watched(self) -> list[str]:
        return self._run(P.list_tubes_watched())

    def list_tube(self, state: str, cursor: str = "0", count: int = 1000) -> tuple[list[ListedJob], str]:
        """One page of the used tube's jobs in `state` (ready, delayed, buried or
        reserved), in the order they leave it (list-tube, a fastbean extension):
        ([(id, pri, age, time_left, bytes)], the next page's cursor, "0" after the
        last page)."""
        return self._run(P.list_tube(state, cursor, count))

    # -- managing

    def kick(self, bound: int) -> int:
        """Kick up to `bound` jobs of the tube in use; how many were."""
        return self._run(P.kick(bound))

    def kick_job(self, job_id: int) -> None:
        """Kick one buried or delayed job; NotFound otherwise."""
        self._run(P.kick_job(job_id))

    def pause_tube(self, tube: str | bytes, seconds: int) -> None:
        self._run(P.pause_tube(tube, seconds))

    def move_job(self, job_id: int, tube: str | bytes) -> None:
        """Move a ready, delayed or buried job to another tube, keeping its id,
        state, priority and counts (move-job, a fastbean extension). NotFound
        if there is no such job or it is reserved; UnknownCommand from a
        server without it (beanstalkd, fastbean --strict)."""
        self._run(P.move_job(job_id, tube))

    def reprioritize_job(self, job_id: int, pri: int) -> None:
        """Give a job a new priority, whatever its state (reprioritize-job, a
        fastbean extension): a ready job takes its place in the reserve order
        at once. NotFound if there is no such job; UnknownCommand from a
        server without it."""
        self._run(P.reprioritize_job(job_id, pri))

    def auth(self, token: str | bytes) -> None:
        """Authenticate with token (a fastbean with --auth-tokens asks for it on
        its TLS listeners); NotAuthenticated if it is refused. A reconnect sends
        it again."""
        self._run(P.auth(token))
        self.token = token

    def flush_tube(self, tube: str | bytes) -> int:
        """Delete every job of a tube, reserved ones too (a fastbean and tuber
        extension); how many were. UnknownCommand from a server without it
        (beanstalkd, fastbean --strict)."""
        return self._run(P.flush_tube(tube))

    def flush_buried(self, tube: str | bytes) -> int:
        """Delete the buried jobs of a tube (an extension, as flush_tube); how many were."""
        return self._run(P.flush_buried(tube))

    def retry_limit(self, limit: int | None = None, dead_letter: str | bytes | None = None,
                    default: bool = False) -> tuple[int, str | None]:
        """The retry limit of the tube in use (a fastbean extension): with
        `limit`, set it (0: none), burying jobs that reach it or moving them to
        `dead_letter`; with default=True, go back to the server's default.
        Returns the limit in force, (0, None) for none, and its dead-letter
        tube or None. UnknownCommand from a server without it."""
        return self._run(P.retry_limit(limit, dead_letter, default))

    # -- schedules: recurring jobs the server puts itself (a fastbean extension;
    # docs/protocol-extensions.md "Schedules"). UnknownCommand from a server
    # without them, BadFormat for a bad name or spec.

    def schedule(self, name: str | bytes, body: bytes, spec: str | bytes, pri: int = 0, ttr: int = DEFAULT_TTR,
                 misfire: str = "fire") -> bool:
        """Define schedule `name` in the tube in use, or replace the one of
        that name: a job of `body` at each time of `spec` (a five-field cron
        expression with an optional IANA zone, or "every SECONDS"). misfire:
        "fire" (an occurrence missed while no server ran fires once when one
        is back) or "skip". True if it is new, False if it replaced one."""
        return self._run(P.schedule(name, body, spec, pri, ttr, misfire))

    def unschedule(self, name: str | bytes) -> None:
        """Remove a schedule (its jobs stay); NotFound if there is none."""
        self._run(P.unschedule(name))

    def list_schedules(self) -> list[Stats]:
        """Every schedule of the server: dicts of name, tube, spec, zone, pri,
        ttr, misfire, paused, next and last (Unix seconds; 0: none), fires,
        runs and body-bytes."""
        return self._run(P.list_schedules())

    def fire_schedule(self, name: str | bytes) -> int:
        """Put one job of the schedule now, beside its occurrences: its id."""
        return self._run(P.fire_schedule(name))

    def pause_schedule(self, name: str | bytes) -> None:
        """Stop firing the schedule until resume_schedule()."""
        self._run(P.pause_schedule(name))

    def resume_schedule(self, name: str | bytes) -> None:
        """Fire it again, from its next occurrence on (those passed while it
        was paused do not fire)."""
        self._run(P.resume_schedule(name))

    def delete_batch(self, ids: Iterable[int]) -> tuple[int, int]:
        """Delete up to 1000 jobs by id in one command (delete-batch, a fastbean
        and tuber extension): (deleted, not found). UnknownCommand from a
        server without it."""
        return self._run(P.delete_batch(ids))

    def delete_each(self, ids: Iterable[int]) -> list[int]:
        """Delete up to 1000 jobs by id in one command (delete-each, a fastbean
        extension): the ids that were not found (or are reserved by another
        client), in the order given; every other id was deleted."""
        return self._run(P.delete_each(ids))

    def delete_and_peek(self, job_id: int, state: str) -> tuple[bool, Job | None]:
        """Delete a job and peek the next in `state` in one round trip:
        (deleted, (id, body) or None)."""
        return self._run(P.delete_and_peek(job_id, state))

    def quit(self) -> None:
        """Say goodbye and close the connection."""
        try:
            self._send(b"quit\r\n")
        finally:
            self.close()

    # -- inside

    def _run(self, call: Call[T]) -> T:
        """Send a command and read its reply, reconnecting as self.reconnect says."""
        while True:
            if self._lost and self.reconnect is not None:
                self._reconnect()
            try:
                return self._exec(call)
            except ConnectionLost:
                if self.reconnect is None:
                    raise
                self._lost = True
                self.sock.close()
                if not call.idempotent:
                    raise

    def _exec(self, call: Call[T]) -> T:
        extra = call.wait
        if extra:
            before = self.sock.gettimeout()
            self.sock.settimeout(None if before is None or extra == FOREVER else before + extra)
        try:
            self._send(call.data)
            return self._drive(call.read(self.where))
        except BadFormat:
            if call.name == "put":
                # the server reads the body that follows as a command, and answers it:
                # the replies no longer match the commands
                self._lost = True
                self.sock.close()
            raise
        except UnknownCommand:
            if call.name == "schedule":
                # a server without schedules reads the body as a command, as above
                self._lost = True
                self.sock.close()
            raise
        finally:
            if extra:
                self.sock.settimeout(before)

    def _drive(self, reader: Reader[T]) -> T:
        try:
            need = next(reader)
            while True:
                need = reader.send(self.line() if need == LINE else self.body(need))
        except StopIteration as stop:
            result: T = stop.value
            return result

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ConnectionLost("lost the connection to %s: %s" % (self.where, _reason(e))) from None

    def _fill(self, mid_reply: bool) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            raise NoReply("no reply from %s after waiting %gs" % (
                self.where, self.sock.gettimeout() or 0)) from None
        except OSError as e:
            raise ConnectionLost("lost the connection to %s: %s" % (self.where, _reason(e))) from None
        if not data:
            raise ConnectionLost("%s closed the connection %s" % (
                self.where, "in the middle of a reply" if mid_reply else "without replying"))
        self._buf += data


def _reason(err: BaseException) -> str:
    if isinstance(err, socket.timeout):
        return "timed out"
    if isinstance(err, ssl.SSLCertVerificationError):
        return "the server's certificate is not trusted: %s" % err.verify_message
    if isinstance(err, ssl.SSLError):
        return "TLS: " + (err.reason.lower().replace("_", " ") if err.reason else str(err))
    if isinstance(err, RuntimeError):
        return "the connection was closed"     # uvloop, writing to a transport it closed
    if not isinstance(err, OSError):
        return "not a usable address (%s)" % err
    return err.strerror or str(err)


__all__ = ["Client"]
