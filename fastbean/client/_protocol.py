"""The beanstalk protocol without I/O: errors, reply parsing and one table of commands.

Each command is a Call: the line (and body) to send, whether sending it twice
is harmless, and a reader. A reader is a generator that yields what it needs
next (LINE for a reply line, or n for n bytes of body and their CRLF) and
returns the command's result or raises the error its reply names. The
blocking Client and the AsyncClient only move bytes and drive readers, so
both parse every reply the same way.
"""
from __future__ import annotations

import random
import ssl
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, Dict, Generic, List, NamedTuple, Optional, Tuple, TypeVar, Union

from fastbean.errors import FastbeanError

T = TypeVar("T")

TIMEOUT = 5.0                   # seconds for connecting, and then for each reply
PIPELINE = 64                   # commands in flight when asking about many tubes
NAME_MAX = 200                  # bytes of a tube name, as in beanstalkd
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")
MAX_REPLY_LINE = 1024           # beanstalkd's reply lines are short: longer means another protocol
MAX_BODY = (1 << 30) + 2        # beanstalkd caps -z at 1 GiB
PEEK_STATES = ("ready", "delayed", "buried")
DEFAULT_PRI = 1024              # fastbean-ctl's and most libraries' default priority
DEFAULT_TTR = 60
LINE = -1                       # a reader yields it for the next reply line
FOREVER = float("inf")          # Call.wait: the reply may take any time (reserve)

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
# One row of list-tube: (id, pri, age, time_left, bytes)
ListedJob = Tuple[int, int, int, int, int]
Reader = Generator[int, bytes, T]


class Job(NamedTuple):
    """A job a command handed out: its id and body (a tuple, as (id, body))."""
    id: int
    body: bytes


# -- errors

class ClientError(FastbeanError):
    """Talking to the server failed; the message is one line for an operator."""


class ConnectError(ClientError, ConnectionError):
    """No connection could be made (refused, no such socket, unknown host, timeout)."""


class NoPrimary(ConnectError):
    """No address of an HA group is a primary: each refused, failed, or closed the
    connection at once as a standby does. `tried` holds (address, what happened)."""

    def __init__(self, message: str, tried: List[Tuple[str, str]]) -> None:
        super().__init__(message)
        self.tried = tried


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
    """The server answered a command with one of the protocol's error replies;
    `reply` is its first word (b"NOT_FOUND"...). Each reply has its subclass."""

    def __init__(self, message: str, reply: bytes) -> None:
        super().__init__(message)
        self.reply = reply


class NotFound(ServerError):
    """NOT_FOUND: no such job (or not reserved by this client), tube, or nothing to peek."""


class BadFormat(ServerError):
    """BAD_FORMAT: the server could not parse the command (or lacks the extension)."""


class UnknownCommand(ServerError):
    """UNKNOWN_COMMAND: the server does not have this command (an extension, on beanstalkd)."""


class OutOfMemory(ServerError):
    """OUT_OF_MEMORY: the server could not make the job."""


class InternalError(ServerError):
    """INTERNAL_ERROR: the server hit a bug."""


class ExpectedCrlf(ServerError):
    """EXPECTED_CRLF: the job body was not followed by CRLF."""


class JobTooBig(ServerError):
    """JOB_TOO_BIG: the body is larger than the server's max-job-size (-z)."""


class Draining(ServerError):
    """DRAINING: the server is in drain mode and takes no new job."""


class NotIgnored(ServerError):
    """NOT_IGNORED: the last watched tube cannot be ignored."""


class DeadlineSoon(ServerError):
    """DEADLINE_SOON: a job this client holds is within a second of its TTR (reserve)."""


class TimedOut(ServerError):
    """TIMED_OUT: reserve-with-timeout found no job in time."""


class NotAuthenticated(ServerError):
    """NOT_AUTHENTICATED: the server wants a valid token first (auth)."""


class NotPermitted(ServerError):
    """NOT_PERMITTED: the token's roles do not allow this command on this tube."""


class Buried(ServerError):
    """BURIED: put or release could not grow the ready queue (out of memory) and
    buried the job instead; `id` is the job's id when the reply gave it."""

    def __init__(self, message: str, reply: bytes, id: Optional[int] = None) -> None:
        super().__init__(message, reply)
        self.id = id


class UnexpectedReply(ClientError):
    """Client.cmd(line, expect): the server answered something other than expect."""

    def __init__(self, message: str, reply: bytes, expected: bytes) -> None:
        super().__init__(message)
        self.reply, self.expected = reply, expected


ERROR_CLASSES: Dict[bytes, type[ServerError]] = {
    b"NOT_FOUND": NotFound, b"BAD_FORMAT": BadFormat, b"UNKNOWN_COMMAND": UnknownCommand,
    b"OUT_OF_MEMORY": OutOfMemory, b"INTERNAL_ERROR": InternalError,
    b"EXPECTED_CRLF": ExpectedCrlf, b"JOB_TOO_BIG": JobTooBig, b"DRAINING": Draining,
    b"NOT_IGNORED": NotIgnored, b"DEADLINE_SOON": DeadlineSoon, b"TIMED_OUT": TimedOut,
    b"NOT_AUTHENTICATED": NotAuthenticated, b"NOT_PERMITTED": NotPermitted,
}


# -- names, addresses, documents

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


def parse_address(text: str, port: int = 11300) -> Address:
    """"host:port", "[v6]:port", "host" (the default port) or "unix:PATH" -> an Address."""
    if text.startswith("unix:"):
        return text[5:]
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else port
    host, sep, num = text.rpartition(":")
    if sep and num.isdigit() and ":" not in host:
        return host, int(num)
    return text, port


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


def shown(data: bytes, limit: int = 60) -> str:
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
            raise ProtocolError("cannot read this stats line: %s" % shown(line.encode()))
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


def parse_list(body: bytes) -> list[str]:
    """A YAML list document (list-tubes) -> list of names."""
    return [line[2:] for line in body.decode("utf-8", "replace").split("\n")[1:]
            if line.startswith("- ")]


def tube_bytes(name: str | bytes) -> bytes:
    return name.encode() if isinstance(name, str) else name


def key_tag(key: str | bytes, cooldown: int = 0) -> bytes:
    """put's idp:KEY[:SECONDS] tag; ValueError for a key the server would refuse."""
    k = key.encode() if isinstance(key, str) else key
    if not 1 <= len(k) <= 200 or any(c <= 32 or c > 126 for c in k):
        raise ValueError("a key is 1 to 200 printable ASCII bytes without spaces")
    if b":" in k:
        # the server reads `:DIGITS` at the end as the cooldown and refuses any other colon
        raise ValueError("a key cannot hold ':' (give the cooldown as cooldown=)")
    return b"idp:" + k + (b":%d" % cooldown if cooldown else b"")


def _uint(value: int, what: str) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError("%s must be a whole number of 0 or more, not %r" % (what, value))
    return value


# -- readers

def alien(where: str, line: bytes) -> ProtocolError:
    return ProtocolError("%s does not speak the beanstalk protocol (it sent %s)" % (where, shown(line)))


def server_error(command: str, where: str, word: bytes) -> ServerError:
    return ERROR_CLASSES.get(word, ServerError)("%s: %s answered %s (%s)" % (
        command, where, word.decode(), ERROR_REPLIES[word]), word)


def read_reply(command: str, where: str, ok: Tuple[bytes, ...]) -> Reader[Tuple[List[bytes], Optional[bytes]]]:
    """One reply to `command`: (words, body) if its first word is in `ok`, else the
    error it names raised."""
    line = yield LINE
    words = line.split()
    word = words[0] if words else b""
    body = None
    if word in BODY_REPLIES:
        if len(words) != BODY_REPLIES[word] or not words[-1].isdigit() or int(words[-1]) > MAX_BODY:
            raise alien(where, line)
        body = yield int(words[-1])
    if word in ok:
        return words, body
    if word in ERROR_REPLIES and len(words) == 1:
        raise server_error(command, where, word)
    if word == b"BURIED" and command in ("put", "release") and len(words) <= 2:
        jid = int(words[1]) if len(words) == 2 and words[1].isdigit() else None
        raise Buried("%s: %s answered %s (out of memory growing the ready queue; the job was "
                     "buried)" % (command, where, line.decode()), word, jid)
    raise alien(where, line)


def _int(where: str, words: List[bytes]) -> int:
    if len(words) != 2 or not words[1].isdigit():
        raise alien(where, b" ".join(words))
    return int(words[1])


def _job(where: str, words: List[bytes], body: Optional[bytes]) -> Job:
    if len(words) < 2 or not words[1].isdigit():
        raise alien(where, b" ".join(words))
    return Job(int(words[1]), body or b"")


class Call(Generic[T]):
    """One command: the bytes to send, how to read its reply, and what a
    reconnect may do with it.

    idempotent: sending it again after a lost reply cannot do anything twice,
    so a client that reconnects re-sends it. wait: seconds the server may take
    besides the reply timeout (a reserve's own timeout; FOREVER for reserve)."""

    __slots__ = ("name", "data", "read", "idempotent", "wait")

    def __init__(self, name: str, data: bytes, read: Callable[[str], Reader[T]],
                 idempotent: bool = False, wait: float = 0.0) -> None:
        self.name = name
        self.data = data
        self.read = read
        self.idempotent = idempotent
        self.wait = wait


def _simple(name: str, line: bytes, ok: bytes, convert: Callable[[str, List[bytes], Optional[bytes]], T],
            idempotent: bool = False, wait: float = 0.0) -> Call[T]:
    def read(where: str) -> Reader[T]:
        words, body = yield from read_reply(name, where, (ok,))
        return convert(where, words, body)
    return Call(name, line + b"\r\n", read, idempotent, wait)


def _none(where: str, words: List[bytes], body: Optional[bytes]) -> None:
    return None


def _count(where: str, words: List[bytes], body: Optional[bytes]) -> int:
    return _int(where, words)


def _stats(where: str, words: List[bytes], body: Optional[bytes]) -> Stats:
    return parse_dict(body or b"")


def _server_stats(where: str, words: List[bytes], body: Optional[bytes]) -> Stats:
    return parse_dict(body or b"", STATS_TEXT_KEYS)


def _names(where: str, words: List[bytes], body: Optional[bytes]) -> List[str]:
    names = parse_list(body or b"")
    for name in names:
        try:
            check_tube(name)
        except ValueError:
            raise ProtocolError("%s listed a tube named %s, which the protocol does not allow"
                                % (where, shown(name.encode()))) from None
    return names


def _a_job(where: str, words: List[bytes], body: Optional[bytes]) -> Job:
    return _job(where, words, body)


def _body(where: str, words: List[bytes], body: Optional[bytes]) -> bytes:
    return _job(where, words, body).body


def _word(where: str, words: List[bytes], body: Optional[bytes]) -> str:
    if len(words) != 2:
        raise alien(where, b" ".join(words))
    return words[1].decode()


# -- the command table: every command of beanstalkd 1.12 and fastbean's extensions

def put(body: bytes, pri: int, delay: int, ttr: int) -> Call[int]:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("a job body is bytes, not %s (encode it first)" % type(body).__name__)
    _uint(pri, "pri"), _uint(delay, "delay"), _uint(ttr, "ttr")

    def read(where: str) -> Reader[int]:
        words, _ = yield from read_reply("put", where, (b"INSERTED",))
        return _int(where, words)
    return Call("put", b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body), read)


def put_unique(body: bytes, key: str | bytes, cooldown: int, pri: int, delay: int,
               ttr: int) -> Call[Tuple[int, Optional[str]]]:
    tag = key_tag(key, cooldown)
    _uint(pri, "pri"), _uint(delay, "delay"), _uint(ttr, "ttr")

    def read(where: str) -> Reader[Tuple[int, Optional[str]]]:
        words, _ = yield from read_reply("put", where, (b"INSERTED",))
        if len(words) < 2 or len(words) > 4 or not words[1].isdigit():
            raise alien(where, b" ".join(words))
        return int(words[1]), words[2].decode().lower() if len(words) > 2 else None
    # a keyed put is idempotent: sent again, it finds the job the first one made
    return Call("put", b"put %d %d %d %d %s\r\n%s\r\n" % (pri, delay, ttr, len(body), tag, body),
                read, idempotent=True)


def put_in(tube: str | bytes, body: bytes, pri: int, delay: int, ttr: int,
           key: str | bytes | None = None, cooldown: int = 0) -> Call[Tuple[int, Optional[str]]]:
    """use and put (put_unique with key) in one write: nothing can come between
    them, even from another task sharing the connection."""
    inner = put_unique(body, key, cooldown, pri, delay, ttr) if key is not None else put(body, pri, delay, ttr)

    def read(where: str) -> Reader[Tuple[int, Optional[str]]]:
        failure: Optional[ServerError] = None
        try:
            yield from read_reply("use", where, (b"USING",))
        except ServerError as e:
            failure = e         # the put's reply comes all the same: read it first
        words, _ = yield from read_reply("put", where, (b"INSERTED",))
        if failure is not None:
            raise failure
        if len(words) < 2 or len(words) > 4 or not words[1].isdigit():
            raise alien(where, b" ".join(words))
        return int(words[1]), words[2].decode().lower() if len(words) > 2 else None
    return Call("put", b"use " + tube_bytes(tube) + b"\r\n" + inner.data, read, inner.idempotent)


def use(tube: str | bytes) -> Call[None]:
    return _simple("use", b"use " + tube_bytes(tube), b"USING", _none, True)


def reserve() -> Call[Job]:
    # a reservation is the connection's: lost with it, the server gives the job back
    return _simple("reserve", b"reserve", b"RESERVED", _a_job, True, FOREVER)


def reserve_with_timeout(seconds: int) -> Call[Job]:
    return _simple("reserve-with-timeout", b"reserve-with-timeout %d" % _uint(seconds, "seconds"),
                   b"RESERVED", _a_job, True, seconds)


def reserve_job(job_id: int) -> Call[Job]:
    return _simple("reserve-job", b"reserve-job %d" % job_id, b"RESERVED", _a_job)


def reserve_batch(count: int, timeout: Optional[int]) -> Call[List[Job]]:
    line = b"reserve-batch %d" % count + (b" %d" % timeout if timeout else b"")

    def read(where: str) -> Reader[List[Job]]:
        words, _ = yield from read_reply("reserve-batch", where, (b"RESERVED_BATCH",))
        jobs = []
        for _ in range(_int(where, words)):
            w, body = yield from read_reply("reserve-batch", where, (b"RESERVED",))
            jobs.append(_job(where, w, body))
        return jobs
    return Call("reserve-batch", line + b"\r\n", read, True, float(timeout or 0))


def delete(job_id: int) -> Call[None]:
    return _simple("delete", b"delete %d" % job_id, b"DELETED", _none)


def release(job_id: int, pri: int, delay: int) -> Call[None]:
    return _simple("release", b"release %d %d %d" % (job_id, _uint(pri, "pri"), _uint(delay, "delay")),
                   b"RELEASED", _none)


def bury(job_id: int, pri: int) -> Call[None]:
    return _simple("bury", b"bury %d %d" % (job_id, _uint(pri, "pri")), b"BURIED", _none)


def touch(job_id: int) -> Call[None]:
    return _simple("touch", b"touch %d" % job_id, b"TOUCHED", _none)


def watch(tube: str | bytes) -> Call[int]:
    return _simple("watch", b"watch " + tube_bytes(tube), b"WATCHING", _count, True)


def ignore(tube: str | bytes) -> Call[int]:
    return _simple("ignore", b"ignore " + tube_bytes(tube), b"WATCHING", _count, True)


def peek(job_id: int) -> Call[bytes]:
    return _simple("peek", b"peek %d" % job_id, b"FOUND", _body, True)


def peek_state(state: str) -> Call[Job]:
    if state not in PEEK_STATES:
        raise ValueError("a peek state is ready, delayed or buried, not %r" % state)
    return _simple("peek-" + state, b"peek-" + state.encode(), b"FOUND", _a_job, True)


def kick(bound: int) -> Call[int]:
    return _simple("kick", b"kick %d" % _uint(bound, "bound"), b"KICKED", _count)


def kick_job(job_id: int) -> Call[None]:
    return _simple("kick-job", b"kick-job %d" % job_id, b"KICKED", _none)


def stats_job(job_id: int) -> Call[Stats]:
    return _simple("stats-job", b"stats-job %d" % job_id, b"OK", _stats, True)


def stats_tube(tube: str | bytes) -> Call[Stats]:
    return _simple("stats-tube", b"stats-tube " + tube_bytes(tube), b"OK", _stats, True)


def stats() -> Call[Stats]:
    return _simple("stats", b"stats", b"OK", _server_stats, True)


def fastbean_stats() -> Call[Stats]:
    return _simple("fastbean-stats", b"fastbean-stats", b"OK", _stats, True)


def list_tubes() -> Call[List[str]]:
    return _simple("list-tubes", b"list-tubes", b"OK", _names, True)


def list_tube_used() -> Call[str]:
    return _simple("list-tube-used", b"list-tube-used", b"USING", _word, True)


def list_tubes_watched() -> Call[List[str]]:
    return _simple("list-tubes-watched", b"list-tubes-watched", b"OK", _names, True)


def pause_tube(tube: str | bytes, seconds: int) -> Call[None]:
    return _simple("pause-tube", b"pause-tube %s %d" % (tube_bytes(tube), _uint(seconds, "seconds")),
                   b"PAUSED", _none, True)


def auth(token: str | bytes) -> Call[None]:
    data = token.encode() if isinstance(token, str) else token
    if not data or any(c in data for c in b" \r\n"):
        raise ValueError("a token is one word without spaces or line breaks")
    return _simple("auth", b"auth " + data, b"AUTHENTICATED", _none, True)


def flush_tube(tube: str | bytes) -> Call[int]:
    return _simple("flush-tube", b"flush-tube " + tube_bytes(tube), b"FLUSHED", _count)


def flush_buried(tube: str | bytes) -> Call[int]:
    return _simple("flush-buried", b"flush-buried " + tube_bytes(tube), b"FLUSHED", _count)


def retry_limit(limit: Optional[int], dead_letter: str | bytes | None,
                default: bool) -> Call[Tuple[int, Optional[str]]]:
    if default:
        line = b"retry-limit default"
    elif limit is None:
        line = b"retry-limit"
    else:
        line = b"retry-limit %d" % limit + (b" " + tube_bytes(dead_letter) if dead_letter else b"")

    def convert(where: str, words: List[bytes], body: Optional[bytes]) -> Tuple[int, Optional[str]]:
        if len(words) not in (2, 3) or not words[1].isdigit():
            raise alien(where, b" ".join(words))
        return int(words[1]), words[2].decode() if len(words) == 3 else None
    return _simple("retry-limit", line, b"RETRY_LIMIT", convert, True)


def _ids(ids: Iterable[int]) -> bytes:
    return b" ".join(b"%d" % i for i in ids)


def delete_batch(ids: Iterable[int]) -> Call[Tuple[int, int]]:
    def convert(where: str, words: List[bytes], body: Optional[bytes]) -> Tuple[int, int]:
        if len(words) != 3 or not words[1].isdigit() or not words[2].isdigit():
            raise alien(where, b" ".join(words))
        return int(words[1]), int(words[2])
    return _simple("delete-batch", b"delete-batch " + _ids(ids), b"DELETED_BATCH", convert)


def delete_each(ids: Iterable[int]) -> Call[List[int]]:
    def convert(where: str, words: List[bytes], body: Optional[bytes]) -> List[int]:
        if len(words) < 3 or not all(w.isdigit() for w in words[1:]) or int(words[2]) != len(words) - 3:
            raise alien(where, b" ".join(words))
        return [int(w) for w in words[3:]]
    return _simple("delete-each", b"delete-each " + _ids(ids), b"DELETED_EACH", convert)


def list_tube(state: str, cursor: str, count: int) -> Call[Tuple[List[ListedJob], str]]:
    def read(where: str) -> Reader[Tuple[List[ListedJob], str]]:
        words, _ = yield from read_reply("list-tube", where, (b"LISTED",))
        if len(words) != 3 or not words[1].isdigit():
            raise alien(where, b" ".join(words))
        rows: List[ListedJob] = []
        for _ in range(int(words[1])):
            line = yield LINE
            fields = line.split()
            if len(fields) != 5 or not all(f.isdigit() for f in fields):
                raise alien(where, line)
            id_, pri, age, left, size = (int(f) for f in fields)
            rows.append((id_, pri, age, left, size))
        return rows, words[2].decode()
    return Call("list-tube", b"list-tube %s %s %d\r\n" % (state.encode(), cursor.encode(), count), read, True)


def move_job(job_id: int, tube: str | bytes) -> Call[None]:
    return _simple("move-job", b"move-job %d %s" % (job_id, tube_bytes(tube)), b"MOVED", _none)


def reprioritize_job(job_id: int, pri: int) -> Call[None]:
    return _simple("reprioritize-job", b"reprioritize-job %d %d" % (job_id, _uint(pri, "pri")),
                   b"REPRIORITIZED", _none, True)


# -- schedules: recurring jobs the server puts itself (a fastbean extension;
# docs/protocol-extensions.md "Schedules")

SCHEDULE_TEXT_KEYS = frozenset({"name", "tube", "spec", "zone", "misfire"})


def parse_records(body: bytes, text_keys: frozenset[str] = SCHEDULE_TEXT_KEYS) -> List[Stats]:
    """A YAML list of flat records (list-schedules) -> list of dicts, values
    as parse_dict reads them."""
    out: List[Stats] = []
    for line in body.decode("utf-8", "replace").split("\n")[1:]:
        if not line.strip():
            continue
        if line.startswith("- "):
            out.append({})
            line = line[2:]
        elif line.startswith("  ") and out:
            line = line[2:]
        else:
            raise ProtocolError("cannot read this list line: %s" % shown(line.encode()))
        key, sep, value = line.partition(": ")
        if not sep:
            raise ProtocolError("cannot read this list line: %s" % shown(line.encode()))
        out[-1][key] = value.strip('"') if key in text_keys else _value(value)
    return out


def schedule(name: str | bytes, body: bytes, spec: str | bytes, pri: int, ttr: int,
             misfire: str) -> Call[bool]:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("a job body is bytes, not %s (encode it first)" % type(body).__name__)
    if misfire not in ("fire", "skip"):
        raise ValueError("misfire is 'fire' or 'skip'")
    line = b"schedule %s %d %d %s %d %s" % (tube_bytes(name), _uint(pri, "pri"), _uint(ttr, "ttr"),
                                            misfire.encode(), len(body), tube_bytes(spec))

    def read(where: str) -> Reader[bool]:
        words, _ = yield from read_reply("schedule", where, (b"SCHEDULED", b"REPLACED"))
        return words[0] == b"SCHEDULED"
    # a second send replaces it with the same: REPLACED, nothing changes
    return Call("schedule", line + b"\r\n" + bytes(body) + b"\r\n", read, True)


def unschedule(name: str | bytes) -> Call[None]:
    return _simple("unschedule", b"unschedule " + tube_bytes(name), b"UNSCHEDULED", _none)


def list_schedules() -> Call[List[Stats]]:
    return _simple("list-schedules", b"list-schedules", b"OK",
                   lambda where, words, body: parse_records(body or b""), True)


def fire_schedule(name: str | bytes) -> Call[int]:
    return _simple("fire-schedule", b"fire-schedule " + tube_bytes(name), b"FIRED", _count)


def pause_schedule(name: str | bytes) -> Call[None]:
    return _simple("pause-schedule", b"pause-schedule " + tube_bytes(name), b"PAUSED", _none, True)


def resume_schedule(name: str | bytes) -> Call[None]:
    return _simple("resume-schedule", b"resume-schedule " + tube_bytes(name), b"RESUMED", _none, True)


def delete_and_peek(job_id: int, state: str) -> Call[Tuple[bool, Optional[Job]]]:
    """delete and peek-STATE in one round trip."""
    def read(where: str) -> Reader[Tuple[bool, Optional[Job]]]:
        try:
            yield from read_reply("delete", where, (b"DELETED",))
            deleted = True
        except NotFound:
            deleted = False
        try:
            words, body = yield from read_reply("peek-" + state, where, (b"FOUND",))
        except NotFound:
            return deleted, None
        return deleted, _job(where, words, body)
    return Call("delete", b"delete %d\r\npeek-%s\r\n" % (job_id, state.encode()), read)


def stats_tubes(names: List[bytes]) -> Call[Dict[str, Stats]]:
    """stats-tube for each name in one write; a tube gone meanwhile is left out."""
    def read(where: str) -> Reader[Dict[str, Stats]]:
        out: Dict[str, Stats] = {}
        for tube in names:
            try:
                _, doc = yield from read_reply("stats-tube", where, (b"OK",))
            except NotFound:
                continue
            out[tube.decode("ascii")] = parse_dict(doc or b"")
        return out
    return Call("stats-tube", b"".join(b"stats-tube %s\r\n" % t for t in names), read, True)


def quit() -> Call[None]:
    def read(where: str) -> Reader[None]:
        return None
        yield LINE     # a generator that reads nothing: the server just closes
    return Call("quit", b"quit\r\n", read, True)


class Backoff:
    """Waits that grow: attempt n (from 0) waits a random time between 0 and
    min(max, base * factor ** n) seconds ("full jitter", so that many clients
    cut off together do not come back together). tries: how many attempts in
    all (None: no end)."""

    __slots__ = ("base", "factor", "max", "tries")

    def __init__(self, base: float = 0.05, factor: float = 2.0, max: float = 5.0,
                 tries: Optional[int] = None) -> None:
        if base < 0 or factor < 1 or max < 0:
            raise ValueError("a backoff needs base >= 0, factor >= 1 and max >= 0")
        self.base, self.factor, self.max, self.tries = base, factor, max, tries

    def cap(self, attempt: int) -> float:
        """The longest wait after `attempt` failures (from 0)."""
        try:
            return float(min(self.max, self.base * self.factor ** attempt))
        except OverflowError:
            return float(self.max)

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, self.cap(attempt))

    def __repr__(self) -> str:
        return "Backoff(base=%g, factor=%g, max=%g, tries=%r)" % (self.base, self.factor, self.max, self.tries)


def backoff_of(value: "Backoff | bool | None") -> Optional[Backoff]:
    """reconnect=True -> the default Backoff; False or None -> no reconnect."""
    if value is True:
        return Backoff()
    return value or None


def addresses_of(address: "Address | Sequence[Address]") -> List[Address]:
    """One address, or several (an HA group), as a list."""
    if isinstance(address, str):
        return [address]
    if isinstance(address, tuple) and len(address) == 2 and isinstance(address[0], str) \
            and isinstance(address[1], int):
        return [(address[0], address[1])]
    out = list(address)
    if not out:
        raise ValueError("no address given")
    for a in out:
        if not (isinstance(a, str) or (isinstance(a, tuple) and len(a) == 2)):
            raise ValueError("not an address: %r ((host, port) or a UNIX socket's path)" % (a,))
    return out


def no_primary(tried: List[Tuple[str, str]]) -> NoPrimary:
    return NoPrimary("no primary among %d addresses: %s" % (
        len(tried), "; ".join("%s %s" % t for t in tried)), tried)


STANDBY = "closed the connection at once (a standby, or not serving)"
