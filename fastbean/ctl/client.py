"""A small blocking client of the beanstalk protocol (standard commands only), for fastbean-ctl."""
import socket

from fastbean.ctl.defaults import PIPELINE
from fastbean.errors import FastbeanError

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
}
BODY_REPLIES = {b"OK": 2, b"FOUND": 3, b"RESERVED": 3}     # word -> words in the line
# stats values that are text even when they look like numbers
TEXT_KEYS = frozenset({"name", "tube", "state", "version", "hostname", "os", "platform"})


class ClientError(FastbeanError):
    """Talking to the server failed; the message is one line for an operator."""


class ConnectError(ClientError):
    """No connection could be made (refused, no such socket, unknown host, timeout)."""


class ProtocolError(ClientError):
    """The conversation broke: the peer closed or went quiet mid-reply, or does not
    speak the beanstalk protocol."""


class ServerError(ClientError):
    """The server answered a command with one of the protocol's error replies."""

    def __init__(self, message, reply):
        super().__init__(message)
        self.reply = reply


class NotFound(ServerError):
    """The server answered NOT_FOUND: no such job or tube, or nothing to peek."""


def check_tube(name):
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


def describe(addr, port):
    """The server's address as messages show it."""
    if addr.startswith("unix:"):
        return addr
    return "%s:%s" % ("[%s]" % addr if ":" in addr and not addr.startswith("[") else addr, port)


def _shown(data, limit=60):
    """Bytes from the peer, safe to print on one line."""
    text = data[:limit].decode("ascii", "backslashreplace")
    text = "".join(c if c.isprintable() else "\\x%02x" % ord(c) for c in text)
    return repr(text + ("..." if len(data) > limit else ""))


def parse_dict(body, text_keys=TEXT_KEYS):
    """A stats document (YAML `key: value` lines) -> dict with numbers as int/float."""
    out = {}
    for line in body.decode("utf-8", "replace").split("\n")[1:]:
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            raise ProtocolError("cannot read this stats line: %s" % _shown(line.encode()))
        out[key] = value.strip('"') if key in text_keys else _value(value)
    return out


def _value(text):
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_list(body):
    """A YAML list document (list-tubes) -> list of names."""
    return [line[2:] for line in body.decode("utf-8", "replace").split("\n")[1:]
            if line.startswith("- ")]


class Client:
    """One connection to a beanstalk-protocol server; every failure is a ClientError."""

    def __init__(self, addr, port, timeout):
        self.where = describe(addr, port)
        self.timeout = timeout
        self._buf = b""
        self._used = b"default"
        try:
            if addr.startswith("unix:"):
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock.settimeout(timeout)
                try:
                    self._sock.connect(addr[5:])
                except OSError:
                    self._sock.close()
                    raise
            else:
                host = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
                self._sock = socket.create_connection((host, port), timeout)
        except (OSError, UnicodeError, ValueError) as e:     # the last two: unusable names
            raise ConnectError("cannot connect to %s: %s" % (self.where, _reason(e))) from None

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- bytes on the wire

    def _send(self, data):
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise ProtocolError("lost the connection to %s: %s" % (self.where, _reason(e))) from None

    def _fill(self, mid_reply):
        try:
            data = self._sock.recv(1 << 16)
        except socket.timeout:
            raise ProtocolError("no reply from %s after waiting %gs" % (
                self.where, self.timeout)) from None
        except OSError as e:
            raise ProtocolError("lost the connection to %s: %s" % (self.where, _reason(e))) from None
        if not data:
            raise ProtocolError("%s closed the connection %s" % (
                self.where, "in the middle of a reply" if mid_reply else "without replying"))
        self._buf += data

    def _line(self):
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                line, self._buf = self._buf[:end], self._buf[end + 2:]
                return line
            if len(self._buf) > MAX_REPLY_LINE:
                raise self._alien(self._buf)
            self._fill(bool(self._buf))

    def _body(self, n):
        while len(self._buf) < n + 2:
            self._fill(True)
        body, end, self._buf = self._buf[:n], self._buf[n:n + 2], self._buf[n + 2:]
        if end != b"\r\n":
            raise ProtocolError("%s sent a reply body without its closing CRLF" % self.where)
        return body

    def _alien(self, line):
        return ProtocolError("%s does not speak the beanstalk protocol (it sent %s)" % (
            self.where, _shown(line)))

    def _reply(self, command, ok):
        """Read one reply to `command`; return (words, body) if its first word is in `ok`."""
        line = self._line()
        words = line.split()
        word = words[0] if words else b""
        body = None
        if word in BODY_REPLIES:
            if len(words) != BODY_REPLIES[word] or not words[-1].isdigit() \
                    or int(words[-1]) > MAX_BODY:
                raise self._alien(line)
            body = self._body(int(words[-1]))
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

    def _call(self, line, *ok):
        self._send(line + b"\r\n")
        return self._reply(line.split(b" ", 1)[0].decode(), ok)

    def _int(self, words):
        if len(words) != 2 or not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1])

    # -- commands

    def stats(self):
        return parse_dict(self._call(b"stats", b"OK")[1], TEXT_KEYS | {"id"})

    def list_tubes(self):
        names = parse_list(self._call(b"list-tubes", b"OK")[1])
        for name in names:
            try:
                check_tube(name)
            except ValueError:
                raise ProtocolError("%s listed a tube named %s, which the protocol does not "
                                    "allow" % (self.where, _shown(name.encode()))) from None
        return names

    def stats_tube(self, tube):
        return parse_dict(self._call(b"stats-tube " + tube, b"OK")[1])

    def stats_tubes(self, tubes):
        """stats-tube for many tubes, pipelined; a tube gone meanwhile is left out."""
        out = {}
        tubes = [t.encode("ascii") for t in tubes]
        for start in range(0, len(tubes), PIPELINE):
            batch = tubes[start:start + PIPELINE]
            self._send(b"".join(b"stats-tube %s\r\n" % t for t in batch))
            for tube in batch:
                try:
                    doc = self._reply("stats-tube", (b"OK",))[1]
                except NotFound:
                    continue
                out[tube.decode("ascii")] = parse_dict(doc)
        return out

    def stats_job(self, job_id):
        return parse_dict(self._call(b"stats-job %d" % job_id, b"OK")[1])

    def use(self, tube):
        if tube != self._used:
            self._call(b"use " + tube, b"USING")
            self._used = tube

    def put(self, body, pri, delay, ttr):
        words, _ = self._call(b"put %d %d %d %d\r\n%s" % (pri, delay, ttr, len(body), body),
                              b"INSERTED")
        return self._int(words)

    def peek(self, state):
        """The next job in `state` of the used tube: (id, body); NotFound if none."""
        return self._job(*self._call(b"peek-" + state.encode(), b"FOUND"))

    def _job(self, words, body):
        if not words[1].isdigit():
            raise self._alien(b" ".join(words))
        return int(words[1]), body

    def delete(self, job_id):
        self._call(b"delete %d" % job_id, b"DELETED")

    def delete_and_peek(self, job_id, state):
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

    def kick(self, bound):
        words, _ = self._call(b"kick %d" % bound, b"KICKED")
        return self._int(words)

    def pause_tube(self, tube, seconds):
        self._call(b"pause-tube %s %d" % (tube, seconds), b"PAUSED")


def _reason(err):
    if isinstance(err, socket.timeout):
        return "timed out"
    if not isinstance(err, OSError):
        return "not a usable address (%s)" % err
    return err.strerror or str(err)
