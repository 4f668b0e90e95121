"""A blocking client of the beanstalk protocol, for any beanstalkd or fastbean server.

fastbean-ctl talks through it, fastbean.testing.Server.client() hands one out, and the
project's tests use it. A leaf: it imports nothing of fastbean but its errors.
"""
from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from typing import Any, Dict, Tuple, Union

from fastbean.errors import FastbeanError

__all__ = ["Client", "ClientError", "ConnectError", "ProtocolError", "ConnectionLost", "NoReply",
           "ServerError", "NotFound", "UnexpectedReply", "parse_dict", "parse_list", "check_tube",
           "tls_context", "Address", "Stats"]

TIMEOUT = 5.0                   # seconds for connecting, and then for each reply
PIPELINE = 64                   # commands in flight when asking about many tubes
NAME_MAX = 200                  # bytes of a tube name, as in beanstalkd
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")
MAX_REPLY_LINE = 1024           # beanstalkd's reply lines are short: longer means another protocol
MAX_BODY = (1 << 30) + 2        # beanstalkd caps -z at 1 GiB
PEEK_STATES = ("ready", "delayed", "buried")

# Every error line the protocol defines, and what it means to an operator.
ERROR_REPLIES = {
    b"NOT_FOUND": "not found",
    b"OUT_OF_MEMORY": "the server is out of memory",
    b"INTERNAL_ERROR": "the server hit an internal error",
    b"BAD_FORMAT": "the server could not parse the command",
    b"UNKNOWN_COMMAND": "the server does not know the command",
    b"EXPECTED_CRLF": "the server expected CRLF after the job body",
    b"JOB_TOO_BIG": "the job body is larger than the server's max-job-size",
    b"DRAINING": "the server is draining and takes no new jobs",
    b"NOT_IGNORED": "the last watched tube cannot be ignored",
    b"DEADLINE_SOON": "a reserved job's deadline is near",
    b"TIMED_OUT": "timed out",
    b"NOT_AUTHENTICATED": "the server wants a valid token first (auth)",
    b"NOT_PERMITTED": "the token's roles do not allow this command here",
}
BODY_REPLIES = {b"OK": 2, b"FOUND": 3, b"RESERVED": 3}     # word -> words in the line
# stats values that are text even when they look like numbers
TEXT_KEYS = frozenset({"name", "tube", "state", "version", "hostname", "os", "platform",
                       "replication-node"})
STATS_TEXT_KEYS = TEXT_KEYS | {"id"}        # in `stats`, id is the server's random id

# Where a server listens: (host, port), or the path of a UNIX socket; what
# greenstalk.Client and fastbean.testing.Server.address take too.
Address = Union[Tuple[str, int], str]
# A stats document: numbers as int or float, true/false as bool, the rest as str.
Stats = Dict[str, Any]


class ClientError(FastbeanError):
    """Talking to the server failed; the message is one line for an operator."""


class ConnectError(ClientError, ConnectionError):
    """No connection could be made (refused, no such socket, unknown host, timeout)."""


class ProtocolError(ClientError):
    """The conversation broke: the peer closed or went quiet mid-reply, or does not
    speak the beanstalk protocol."""


class ConnectionLost(ProtocolError, ConnectionError):
    """The connection closed, failed, or went quiet before a reply was complete;
    it cannot be used any more."""


class NoReply(ConnectionLost, TimeoutError):
    """No reply within the timeout. A late reply would answer the wrong command,
    so the connection cannot be used any more either."""


class ServerError(ClientError):
    """The server answered a command with one of the protocol's error replies."""

    def __init__(self, message: str, reply: bytes) -> None:
        super().__init__(message)
        self.reply = reply


class NotFound(ServerError):
    """The server answered NOT_FOUND: no such job or tube, or nothing to peek."""


class UnexpectedReply(ClientError):
    """Client.cmd(line, expect): the server answered something other than expect."""

    def __init__(self, message: str, reply: bytes, expected: bytes) -> None:
        super().__init__(message)
        self.reply, self.expected = reply, expected


def check_tube(name: str) -> bytes:
    """A tube name as the protocol accepts it (bytes); ValueError with the reason if not."""
    if not name:
        raise ValueError("a tube name cannot be empty")
    if name.startswith("-"):
        raise ValueError("a tube name cannot start with '-': %r" % name)
    bad = sorted(set(name) - NAME_CHARS)
    if bad:
        raise ValueError("%r: a tube name may hold only letters, digits and - + / ; . $ _ ( ), "
                         "not %s" % (name, ", ".join(repr(c) for c in bad)))
    if len(name) > NAME_MAX:
        raise ValueError("a tube name has at most %d characters, not %d" % (NAME_MAX, len(name)))
    return name.encode("ascii")


def describe(address: Address) -> str:
    """The server's address as messages show it: host:port, [IPv6]:port or unix:PATH."""
    if isinstance(address, str):
        return "unix:" + address
    host, port = address
    return "%s:%s" % ("[%s]" % host if ":" in host and not host.startswith("[") else host, port)


def tls_context(ca: str | None = None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A client's TLS settings, for Client(tls=...): the server's certificate is
    checked against the CA certificates in the file ca (default: the system's)
    and must name the host connected to; TLS 1.2 at least. cert and key: the
    client certificate a server with mutual TLS (--tls-ca) asks for (key
    default: in the cert file). Raises OSError or ssl.SSLError for files that
    cannot be used."""
    context = ssl.create_default_context(cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def _shown(data: bytes, limit: int = 60) -> str:
    """Bytes from the peer, safe to print on one line."""
    text = data[:limit].decode("ascii", "backslashreplace")
    text = "".join(c if c.isprintable() else "\\x%02x" % ord(c) for c in text)
    return repr(text + ("..." if len(data) > limit else ""))


def parse_dict(body: bytes, text_keys: frozenset[str] = TEXT_KEYS) -> Stats:
    """A stats document (YAML `key: value` lines after `---`) -> dict: numbers as int or
    float, true and false as bool, the rest (and the values of text_keys) as str."""
    out: Stats = {}
    for line in body.decode("utf-8", "replace").split("\n")[1:]:
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            raise ProtocolError("cannot read this stats line: %s" % _shown(line.encode()))
        out[key] = value.strip('"') if key in text_keys else _value(value)
    return out


def _value(text: str) -> int | float | bool | str:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


SCHEDULE_TEXT_KEYS = frozenset({"name", "tube", "spec", "zone", "misfire"})


def parse_records(body: bytes, text_keys: frozenset[str]) -> list[Stats]:
    """A YAML list of flat records (list-schedules) -> list of dicts, values
    as parse_dict reads them."""
    out: list[Stats] = []
    for line in body.decode("utf-8", "replace").split("\n")[1:]:
        if not line.strip() or line.strip() == "[]":
            continue
        if line.startswith("- "):
            out.append({})
            line = line[2:]
        elif line.startswith("  ") and out:
            line = line[2:]
        else:
            raise ProtocolError("cannot read this list line: %s" % _shown(line.encode()))
        key, sep, value = line.partition(": ")
        if not sep:
            raise ProtocolError("cannot read this list line: %s" % _shown(line.encode()))
        out[-1][key] = value.strip('"') if key in text_keys else _value(value)
    return out


def parse_list(body: bytes) -> list[str]:
    """A YAML list document (list-tubes) -> list of names."""
    return [line[2:] for line in body.decode("utf-8", "replace").split("\n")[1:]
            if line.startswith("- ")]


def _tube(name: str | bytes) -> bytes:
    return name.encode() if isinstance(name, str) else name


class Client:
    """One connection to a beanstalk-protocol server (fastbean or any beanstalkd).

    address: (host, port), or the path of a UNIX socket. timeout: seconds for
    connecting and then for each reply (None: wait for ever). tls: an
    ssl.SSLContext (tls_context() makes one) to speak TLS, as to a fastbean
    --tls-listen; server_hostname: the name the server's certificate must
    have (default: the host connected to; needed for a UNIX socket). token:
    authenticate with it at once (auth(), for a server with --auth-tokens).

    Two levels share the connection:
    - commands (put, use, watch, peek, reserve_job, delete, kick, stats...) check
      the reply and return what it carries; an error reply raises ServerError
      (NotFound for NOT_FOUND);
    - the wire (send, line, body, cmd, job, yaml) sends any bytes and hands back
      the replies as they come, for tests that check a server byte for byte.

    Every failure is a ClientError. The ones about the connection itself are also
    OSErrors: ConnectError and ConnectionLost are ConnectionErrors, and NoReply (no
    reply within the timeout) is a ConnectionLost and a TimeoutError.
    """

    def __init__(self, address: Address, timeout: float | None = TIMEOUT, *,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 token: str | bytes | None = None) -> None:
        self.address = address
        self.where = describe(address)
        self.timeout = timeout
        self._buf = b""
        self._used: bytes | None = b"default"   # the tube in use, if known
        try:
            if isinstance(address, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(address)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(address, timeout)
        except (OSError, UnicodeError, ValueError) as e:     # the last two: unusable names
            raise ConnectError("cannot connect to %s: %s" % (self.where, _reason(e))) from None
        if tls is not None:
            name = server_hostname or (None if isinstance(address, str) else address[0])
            try:
                sock = tls.wrap_socket(sock, server_hostname=name)     # the handshake, within timeout
            except (OSError, ValueError) as e:    # ValueError: no name to check the certificate against
                sock.close()
                why = _reason(e) if isinstance(e, OSError) else str(e)
                raise ConnectError("cannot connect to %s over TLS: %s" % (self.where, why)) from None
        self.sock = sock        # for tests that watch the connection itself
        if token is not None:
            try:
                self.auth(token)
            except BaseException:
                sock.close()
                raise

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
                raise self._alien(self._buf)
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
                _shown(line.split(b"\r\n", 1)[0]), self.where, reply, expect), reply, expect)
        return reply

    def job(self, line: bytes) -> tuple[int, bytes] | None:
        """Send a command that may answer with a job (RESERVED or FOUND, and its
        body): (id, body), or None for any other reply."""
        reply = self.cmd(line)
        words = reply.split()
        if not words or words[0] not in (b"RESERVED", b"FOUND"):
            return None
        if len(words) != 3 or not words[1].isdigit() or not words[2].isdigit():
            raise self._alien(reply)
        return int(words[1]), self.body(int(words[2]))

    def yaml(self, line: bytes) -> Stats:
        """Send a command answered by OK and a stats document (stats, stats-tube,
        stats-job, fastbean-stats...): the document as parse_dict reads it."""
        body = self._call(line, b"OK")[1]
        return parse_dict(body, STATS_TEXT_KEYS if line == b"stats" else TEXT_KEYS)

    # -- commands

    def stats(self) -> Stats:
        return parse_dict(self._call(b"stats", b"OK")[1], STATS_TEXT_KEYS)

    def list_tubes(self) -> list[str]:
        names = parse_list(self._call(b"list-tubes", b"OK")[1])
        for name in names:
            try:
                check_tube(name)
            except ValueError:
                raise ProtocolError("%s listed a tube named %s, which the protocol does not "
                                    "allow" % (self.where, _shown(name.encode()))) from None
        return names

    def stats_tube(self, tube: str | bytes) -> Stats:
        return parse_dict(self._call(b"stats-tube " + _tube(tube), b"OK")[1])

    def stats_tubes(self, tubes: Iterable[str]) -> dict[str, Stats]:
        """stats-tube for many tubes, pipelined; a tube gone meanwhile is left out."""
        out = {}
        names = [t.encode("ascii") for t in tubes]
        for start in range(0, len(names), PIPELINE):
            batch = names[start:start + PIPELINE]
            self._send(b"".join(b"stats-tube %s\r\n" % t for t in batch))
            for tube in batch:
                try:
                    doc = self._reply("stats-tube", (b"OK",))[1]
                except NotFound:
                    continue
                out[tube.decode("ascii")] = parse_dict(doc or b"")
        return out

    def stats_job(self, job_id: int) -> Stats:
        return parse_dict(self._call(b"stats-job %d" % job_id, b"OK")[1])

    def use(self, tube: str | bytes) -> None:
        """Put new jobs into this tube (sent only when another one is in use)."""
        name = _tube(tube)
        if name != self._used:
            self._used = None
            self._call(b"use " + name, b"USING")
            self._used = name

    def watch(self, tube: str | bytes) -> int:
        """Reserve from this tube too; returns how many tubes are watched."""
        return self._int(self._call(b"watch " + _tube(tube), b"WATCHING")[0])

    def put(self, body: bytes, pri: int = 0, delay: int = 0, ttr: int = 60) -> int:
        """A new job in the tube in use; its id."""
        words, _ = self._call(b"put %d %d %d %d\r\n%s" % (pri, delay, ttr, len(body), body),
                              b"INSERTED")
        return self._int(words)

    def put_unique(self, body: bytes, key: str | bytes, cooldown: int = 0, pri: int = 0,
                   delay: int = 0, ttr: int = 60) -> tuple[int, str | None]:
        """A new job in the tube in use unless one put with this idempotency key
        (tuber's idp:KEY, a fastbean extension) is live there, or was deleted
        less than `cooldown` seconds ago: (id, None) for a new job, else
        (that job's id, its state: "ready", "reserved", "delayed", "buried"
        or "deleted"). A more urgent `pri` is given to the live job.
        BAD_FORMAT from a server without it."""
        k = key.encode() if isinstance(key, str) else key
        if not 1 <= len(k) <= 200 or any(c <= 32 or c > 126 for c in k):
            raise ValueError("a key is 1 to 200 printable ASCII bytes without spaces")
        tag = b"idp:" + k + (b":%d" % cooldown if cooldown else b"")
        words, _ = self._call(b"put %d %d %d %d %s\r\n%s" % (pri, delay, ttr, len(body), tag, body),
                              b"INSERTED")
        if len(words) < 2 or len(words) > 4 or not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1]), words[2].decode().lower() if len(words) > 2 else None

    def retry_limit(self, limit: int | None = None, dead_letter: str | bytes | None = None,
                    default: bool = False) -> tuple[int, str | None]:
        """The retry limit of the tube in use (a fastbean extension): with
        `limit`, set it (0: none), burying jobs that reach it or moving them to
        `dead_letter`; with default=True, go back to the server's default.
        Returns the limit in force, (0, None) for none, and its dead-letter
        tube or None. ServerError UNKNOWN_COMMAND from a server without it."""
        if default:
            line = b"retry-limit default"
        elif limit is None:
            line = b"retry-limit"
        else:
            line = b"retry-limit %d" % limit + (b" " + _tube(dead_letter) if dead_letter else b"")
        words, _ = self._call(line, b"RETRY_LIMIT")
        if len(words) not in (2, 3) or not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1]), words[2].decode() if len(words) == 3 else None

    def peek(self, job_id: int) -> bytes:
        """The body of a job; NotFound if there is no such job."""
        return self._job(*self._call(b"peek %d" % job_id, b"FOUND"))[1]

    def peek_state(self, state: str) -> tuple[int, bytes]:
        """The next job in `state` (ready, delayed, buried) of the tube in use:
        (id, body); NotFound if none."""
        return self._job(*self._call(b"peek-" + state.encode(), b"FOUND"))

    def reserve_job(self, job_id: int) -> tuple[int, bytes]:
        """Reserve this job, whatever tubes are watched: (id, body); NotFound if
        it is not ready, delayed or buried."""
        return self._job(*self._call(b"reserve-job %d" % job_id, b"RESERVED"))

    def delete(self, job_id: int) -> None:
        self._call(b"delete %d" % job_id, b"DELETED")

    def delete_and_peek(self, job_id: int, state: str) -> tuple[bool, tuple[int, bytes] | None]:
        """Delete a job and peek the next in `state` in one round trip:
        (deleted, (id, body) or None)."""
        self._send(b"delete %d\r\npeek-%s\r\n" % (job_id, state.encode()))
        try:
            self._reply("delete", (b"DELETED",))
            deleted = True
        except NotFound:
            deleted = False
        try:
            return deleted, self._job(*self._reply("peek-" + state, (b"FOUND",)))
        except NotFound:
            return deleted, None

    def kick(self, bound: int) -> int:
        """Kick up to `bound` jobs of the tube in use; how many were."""
        words, _ = self._call(b"kick %d" % bound, b"KICKED")
        return self._int(words)

    def auth(self, token: str | bytes) -> None:
        """Authenticate with token (a fastbean with --auth-tokens asks for it on
        its TLS listeners); ServerError (NOT_AUTHENTICATED) if it is refused."""
        data = token.encode() if isinstance(token, str) else token
        if not data or any(c in data for c in b" \r\n"):
            raise ValueError("a token is one word without spaces or line breaks")
        self._call(b"auth " + data, b"AUTHENTICATED")

    def flush_tube(self, tube: str | bytes) -> int:
        """Delete every job of a tube, reserved ones too (a fastbean and tuber
        extension); how many were. ServerError UNKNOWN_COMMAND from a server
        without it (beanstalkd, fastbean --strict)."""
        words, _ = self._call(b"flush-tube %s" % _tube(tube), b"FLUSHED")
        return self._int(words)

    def flush_buried(self, tube: str | bytes) -> int:
        """Delete the buried jobs of a tube (an extension, as flush_tube); how many were."""
        words, _ = self._call(b"flush-buried %s" % _tube(tube), b"FLUSHED")
        return self._int(words)

    def reserve_batch(self, count: int, timeout: int | None = None) -> list[tuple[int, bytes]]:
        """Reserve up to `count` jobs at once (reserve-batch, a fastbean and tuber
        extension): [(id, body)] in reserve order, maybe empty. Without a
        timeout it takes what is ready now; with one (seconds) it waits that
        long for a first job. ServerError on DEADLINE_SOON, and BAD_FORMAT from
        a server without it (beanstalkd reads the line as a bad reserve)."""
        line = b"reserve-batch %d" % count + (b" %d" % timeout if timeout else b"")
        words, _ = self._call(line, b"RESERVED_BATCH")
        n = self._int(words)
        return [self._job(*self._reply("reserve-batch", (b"RESERVED",))) for _ in range(n)]

    def delete_batch(self, ids: Iterable[int]) -> tuple[int, int]:
        """Delete up to 1000 jobs by id in one command (delete-batch, a fastbean
        and tuber extension): (deleted, not found). ServerError
        UNKNOWN_COMMAND from a server without it."""
        words, _ = self._call(b"delete-batch " + b" ".join(b"%d" % i for i in ids),
                              b"DELETED_BATCH")
        if len(words) != 3 or not words[1].isdigit() or not words[2].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1]), int(words[2])

    def delete_each(self, ids: Iterable[int]) -> list[int]:
        """Delete up to 1000 jobs by id in one command (delete-each, a fastbean
        extension): the ids that were not found (or are reserved by another
        client), in the order given; every other id was deleted. ServerError
        UNKNOWN_COMMAND from a server without it."""
        words, _ = self._call(b"delete-each " + b" ".join(b"%d" % i for i in ids),
                              b"DELETED_EACH")
        if len(words) < 3 or not all(w.isdigit() for w in words[1:]) or \
                int(words[2]) != len(words) - 3:
            raise self._alien(b" ".join(words))
        return [int(w) for w in words[3:]]

    def list_tube(self, state: str, cursor: str = "0",
                  count: int = 1000) -> tuple[list[tuple[int, int, int, int, int]], str]:
        """One page of the used tube's jobs in `state` (ready, delayed, buried or
        reserved), in the order they leave it (list-tube, a fastbean extension):
        ([(id, pri, age, time_left, bytes)], the next page's cursor, "0" after the
        last page)."""
        words, _ = self._call(b"list-tube %s %s %d" % (state.encode(), cursor.encode(), count),
                              b"LISTED")
        if len(words) != 3 or not words[1].isdigit():
            raise self._alien(b" ".join(words))
        rows = []
        for _ in range(int(words[1])):
            line = self.line()
            fields = line.split()
            if len(fields) != 5 or not all(f.isdigit() for f in fields):
                raise self._alien(line)
            id_, pri, age, left, size = (int(f) for f in fields)
            rows.append((id_, pri, age, left, size))
        return rows, words[2].decode()

    def move_job(self, job_id: int, tube: str | bytes) -> None:
        """Move a ready, delayed or buried job to another tube, keeping its id,
        state, priority and counts (move-job, a fastbean extension). NotFound
        if there is no such job or it is reserved; ServerError
        UNKNOWN_COMMAND from a server without it (beanstalkd, fastbean
        --strict)."""
        words, _ = self._call(b"move-job %d %s" % (job_id, _tube(tube)), b"MOVED")
        if len(words) != 1:
            raise self._alien(b" ".join(words))

    def reprioritize_job(self, job_id: int, pri: int) -> None:
        """Give a job a new priority, whatever its state (reprioritize-job, a
        fastbean extension): a ready job takes its place in the reserve order at
        once. NotFound if there is no such job; ServerError UNKNOWN_COMMAND
        from a server without it."""
        if not 0 <= pri <= 0xFFFFFFFF:
            raise ValueError("a priority is 0 to 4294967295")
        words, _ = self._call(b"reprioritize-job %d %d" % (job_id, pri), b"REPRIORITIZED")
        if len(words) != 1:
            raise self._alien(b" ".join(words))

    def pause_tube(self, tube: str | bytes, seconds: int) -> None:
        self._call(b"pause-tube %s %d" % (_tube(tube), seconds), b"PAUSED")

    # -- schedules: recurring jobs the server puts itself (a fastbean extension;
    # docs/protocol-extensions.md "Schedules"). ServerError UNKNOWN_COMMAND
    # from a server without them, BAD_FORMAT for a bad name or spec.

    def schedule(self, name: str | bytes, body: bytes, spec: str | bytes, pri: int = 0, ttr: int = 60,
                 misfire: str = "fire") -> bool:
        """Define schedule `name` in the tube in use, or replace the one of
        that name: a job of `body` at each time of `spec` (a five-field cron
        expression with an optional IANA zone, or "every SECONDS"). misfire:
        "fire" (an occurrence missed while no server ran fires once when one
        is back) or "skip". True if it is new, False if it replaced one."""
        line = b"schedule %s %d %d %s %d %s" % (
            _tube(name), pri, ttr, misfire.encode(), len(body), _tube(spec))
        self._send(line + b"\r\n" + body + b"\r\n")
        words, _ = self._reply("schedule", (b"SCHEDULED", b"REPLACED"))
        return words[0] == b"SCHEDULED"

    def unschedule(self, name: str | bytes) -> None:
        """Remove a schedule (its jobs stay); NotFound if there is none."""
        self._call(b"unschedule " + _tube(name), b"UNSCHEDULED")

    def list_schedules(self) -> list[Stats]:
        """Every schedule of the server: dicts of name, tube, spec, zone, pri,
        ttr, misfire, paused, next and last (Unix seconds; 0: none), fires,
        runs and body-bytes."""
        return parse_records(self._call(b"list-schedules", b"OK")[1], SCHEDULE_TEXT_KEYS)

    def fire_schedule(self, name: str | bytes) -> int:
        """Put one job of the schedule now, beside its occurrences: its id."""
        return self._int(self._call(b"fire-schedule " + _tube(name), b"FIRED")[0])

    def pause_schedule(self, name: str | bytes) -> None:
        """Stop firing the schedule until resume_schedule()."""
        self._call(b"pause-schedule " + _tube(name), b"PAUSED")

    def resume_schedule(self, name: str | bytes) -> None:
        """Fire it again, from its next occurrence on (those passed while it
        was paused do not fire)."""
        self._call(b"resume-schedule " + _tube(name), b"RESUMED")

    # -- inside

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

    def _alien(self, line: bytes) -> ProtocolError:
        return ProtocolError("%s does not speak the beanstalk protocol (it sent %s)" % (
            self.where, _shown(line)))

    def _reply(self, command: str, ok: tuple[bytes, ...]) -> tuple[list[bytes], bytes | None]:
        """Read one reply to `command`; return (words, body) if its first word is in `ok`."""
        line = self.line()
        words = line.split()
        word = words[0] if words else b""
        body = None
        if word in BODY_REPLIES:
            if len(words) != BODY_REPLIES[word] or not words[-1].isdigit() \
                    or int(words[-1]) > MAX_BODY:
                raise self._alien(line)
            body = self.body(int(words[-1]))
        if word in ok:
            return words, body
        if word in ERROR_REPLIES and len(words) == 1:
            kind = NotFound if word == b"NOT_FOUND" else ServerError
            raise kind("%s: %s answered %s (%s)" % (
                command, self.where, word.decode(), ERROR_REPLIES[word]), word)
        if word == b"BURIED" and command == "put" and len(words) == 2:
            raise ServerError("put: %s answered %s (out of memory growing the ready queue; "
                              "the job was buried)" % (self.where, line.decode()), word)
        raise self._alien(line)

    def _call(self, line: bytes, ok: bytes) -> tuple[list[bytes], bytes]:
        """Send one command; (words, body) of a reply whose first word is `ok`
        (body b"" if it has none)."""
        self._send(line + b"\r\n")
        words, body = self._reply(line.split(b" ", 1)[0].decode(), (ok,))
        return words, body or b""

    def _int(self, words: list[bytes]) -> int:
        if len(words) != 2 or not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1])

    def _job(self, words: list[bytes], body: bytes | None) -> tuple[int, bytes]:
        if not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1]), body or b""


def _reason(err: BaseException) -> str:
    if isinstance(err, socket.timeout):
        return "timed out"
    if isinstance(err, ssl.SSLCertVerificationError):
        return "the server's certificate is not trusted: %s" % err.verify_message
    if isinstance(err, ssl.SSLError):
        return "TLS: " + (err.reason.lower().replace("_", " ") if err.reason else str(err))
    if not isinstance(err, OSError):
        return "not a usable address (%s)" % err
    return err.strerror or str(err)
