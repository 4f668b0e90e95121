"""A deliberately simple reference parser of the beanstalk protocol, for tests.

It models beanstalkd 1.12's reading the way beanstalkd does it, with a
224-byte line buffer filled one byte at a time, rather than the way
fastbean's parser does it (zero-copy scanning of chunks). Both must produce
the same commands for the same byte stream, however it is split.
"""
import re

LINE_MAX = 224
NAME_CHARS = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")
U32 = 2**32 - 1
U64 = 2**64 - 1


def _uint(s, limit):
    # strict reader: spaces, a digit, digits; returns (value, rest) or None
    s = s.lstrip(b" ")
    digits = b""
    while s[:1].isdigit():
        digits += s[:1]
        s = s[1:]
    if not digits or int(digits) > limit:
        return None
    return int(digits), s


def _last(s, limit):
    r = _uint(s, limit)
    return r[0] if r is not None and r[1] == b"" else None


def _strtol(s):
    # C strtol/strtoul in base 10: (negative, magnitude) or "none" / "overflow"
    s = s.lstrip(b" \t\n\v\f\r")
    neg = False
    if s[:1] in (b"+", b"-"):
        neg = s[:1] == b"-"
        s = s[1:]
    digits = b""
    while s[:1].isdigit():
        digits += s[:1]
        s = s[1:]
    if not digits:
        return "none"
    v = int(digits)
    if v > U64:
        return "overflow"
    return neg, v


def _seconds_ns(s):
    # "SECONDS[.FRACTION]", at most nine fraction digits -> nanoseconds, or None
    r = _uint(s, U32)
    if r is None:
        return None
    whole, rest = r
    frac = b""
    if rest[:1] == b".":
        frac, rest = rest[1:], b""
        if not (1 <= len(frac) <= 9 and all(48 <= c <= 57 for c in frac)):
            return None
    if rest:
        return None
    return whole * 10**9 + int(frac.ljust(9, b"0") or b"0")


def _batch_args(rest):
    """reserve-batch's " <count>[ <timeout>]" -> (count, timeout) or None."""
    parts = rest.split(b" ")
    if parts[0] != b"" or len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[1:]):
        return None
    count, timeout = int(parts[1]), int(parts[2]) if len(parts) == 3 else 0
    if not 1 <= count <= 1000 or timeout >= 2**32:
        return None
    return (count, timeout)


LIST_STATES = {b"ready": 1, b"reserved": 2, b"buried": 3, b"delayed": 4}


def _list_args(rest):
    """list-tube's "<state> <cursor> <count>" -> (state, key, id, count) or None."""
    parts = rest.split(b" ")
    if len(parts) != 3:
        return None
    state, cursor, count = parts
    if state not in LIST_STATES:
        return None
    key, dot, id_ = cursor.partition(b".")
    if not key.isdigit() or int(key) >= 2**64 or (not dot and int(key) != 0):
        return None
    if dot and (not id_.isdigit() or not 0 < int(id_) < 2**64):
        return None
    if not count.isdigit() or not 1 <= int(count) <= 1000:
        return None
    return (LIST_STATES[state], int(key), int(id_ or 0), int(count))


def _name_ok(n):
    return 1 <= len(n) <= 200 and n[:1] != b"-" and all(c in NAME_CHARS for c in n)


def _retry_limit(rest):
    # "", " default", " <count>" or " <count> <tube>": (ask, count, tube)
    if rest == b"":
        return ("retry-limit", None, 0, 0, None)
    if rest == b" default":
        return ("retry-limit", None, 2, 0, None)
    m = re.fullmatch(rb" ([0-9]+)(?: (.*))?", rest, re.S)
    if m is None or int(m.group(1)) > U32 or (m.group(2) is not None and not _name_ok(m.group(2))):
        return ("retry-limit", "BAD_FORMAT")
    return ("retry-limit", None, 1, int(m.group(1)), m.group(2))


def _schedule(rest):
    # the size (None: unreadable, no body follows) and the words after the verb
    if not rest.startswith(b" "):
        return ("schedule", "BAD_FORMAT", None, b"")
    words = rest[1:].split(b" ")
    if len(words) < 5 or not all(words[:5]) or not words[4].isdigit() or int(words[4]) > U32:
        return ("schedule", "BAD_FORMAT", None, rest[1:])
    ok = len(words) > 5 and words[5] != b""
    return ("schedule", None if ok else "BAD_FORMAT", int(words[4]), rest[1:])


def _id_then(rest):
    # " <id> <rest>" of move-job and reprioritize-job: (id, rest) or None
    m = re.fullmatch(rb" ([0-9]+) ([^ ].*)", rest, re.S)
    if m is None or int(m.group(1)) > U64:
        return None
    return int(m.group(1)), m.group(2)


def _move_job(rest):
    r = _id_then(rest)
    if r is None or not _name_ok(r[1]):
        return ("move-job", "BAD_FORMAT")
    return ("move-job", None, r[0], r[1])


def _reprioritize_job(rest):
    r = _id_then(rest)
    if r is None or not r[1].isdigit() or int(r[1]) > U32:
        return ("reprioritize-job", "BAD_FORMAT")
    return ("reprioritize-job", None, r[0], int(r[1]))


def parse_line(line):
    """One line without CRLF -> a command tuple like fastbean's Parser.parse()."""
    if b"\0" in line:
        return ("BAD_FORMAT", None)
    B = ("BAD_FORMAT", None)
    if line.startswith(b"put "):
        rest = line[4:]
        vals = []
        for _ in range(4):
            r = _uint(rest, U32)
            if r is None:
                return B
            vals.append(r[0])
            rest = r[1]
        return ("put", None, *vals, rest)
    for word, op in ((b"peek ", "peek"),):
        if line.startswith(word):
            v = _last(line[len(word):], U64)
            return B if v is None else (op, None, v)
    for word in (b"peek-ready", b"peek-delayed", b"peek-buried"):
        if line.startswith(word):
            return (word.decode(), None) if line == word else B
    if line.startswith(b"reserve-with-timeout "):
        r = _strtol(line[21:])
        if r == "overflow":
            return B
        if r == "none":
            return ("reserve-with-timeout", None, 0)
        neg, v = r
        if (not neg and v > 2**63 - 1) or (neg and v > 2**63):
            return B
        v = (-v if neg else v) & 0xFFFFFFFF
        return ("reserve-with-timeout", None, v - 2**32 if v >= 2**31 else v)
    if line.startswith(b"reserve-job "):
        v = _last(line[12:], U64)
        return B if v is None else ("reserve-job", None, v)
    if line.startswith(b"reserve-batch"):
        args = _batch_args(line[13:])
        return ("reserve-batch", None) + args if args else ("reserve-batch", "BAD_FORMAT")
    if line.startswith(b"reserve"):
        return ("reserve", None) if line == b"reserve" else B
    if line.startswith(b"resume-schedule"):
        n = line[16:]
        if line[15:16] == b" " and _name_ok(n):
            return ("resume-schedule", None, n)
        return ("resume-schedule", "BAD_FORMAT")
    if line.startswith(b"retry-limit"):
        return _retry_limit(line[11:])
    if line.startswith(b"reprioritize-job"):
        return _reprioritize_job(line[16:])
    if line.startswith(b"move-job"):
        return _move_job(line[8:])
    if line.startswith(b"delete "):
        v = _last(line[7:], U64)
        return B if v is None else ("delete", None, v)
    for verb in (b"delete-batch", b"delete-each"):
        if line.startswith(verb):
            words = line[len(verb):].split(b" ")
            if len(words) < 2 or words[0] != b"" or not all(
                    w.isdigit() and int(w) < 2**64 for w in words[1:]):
                return (verb.decode(), "BAD_FORMAT")
            return (verb.decode(), None, tuple(int(w) for w in words[1:]))
    if line.startswith(b"release "):
        a = _uint(line[8:], U64)
        b = a and _uint(a[1], U32)
        c = b and _last(b[1], U32)
        return B if c is None or not b else ("release", None, a[0], b[0], c)
    if line.startswith(b"bury "):
        a = _uint(line[5:], U64)
        b = a and _last(a[1], U32)
        return B if b is None or not a else ("bury", None, a[0], b)
    if line.startswith(b"kick "):
        r = _strtol(line[5:])
        if r in ("none", "overflow"):
            return B
        neg, v = r
        return ("kick", None, ((-v if neg else v) & U64) & 0xFFFFFFFF)
    for word, op in ((b"kick-job ", "kick-job"), (b"touch ", "touch"), (b"stats-job ", "stats-job")):
        if line.startswith(word):
            v = _last(line[len(word):], U64)
            return B if v is None else (op, None, v)
    if line.startswith(b"stats-tube "):
        n = line[11:]
        return ("stats-tube", None, n) if _name_ok(n) else B
    if line.startswith(b"stats"):
        return ("stats", None) if line == b"stats" else B
    if line.startswith(b"schedule"):
        return _schedule(line[8:])
    for word, op in ((b"use ", "use"), (b"watch ", "watch"), (b"ignore ", "ignore")):
        if line.startswith(word):
            n = line[len(word):]
            return (op, None, n) if _name_ok(n) else B
    for word in (b"list-tubes-watched", b"list-tube-used", b"list-tubes"):
        if line.startswith(word):
            return (word.decode(), None) if line == word else B
    if line.startswith(b"quit"):
        return ("quit", None)
    if line.startswith(b"pause-tube"):
        rest = line[10:].lstrip(b" ")
        i = 0
        while i < len(rest) and rest[i] in NAME_CHARS:
            i += 1
        name, rest = rest[:i], rest[i:]
        v = _last(rest, U32)
        if not name or v is None:
            return B
        return ("pause-tube", None if _name_ok(name) else "BAD_FORMAT", name, v)
    if line.startswith(b"fastbean-stats"):
        return ("fastbean-stats", None if line == b"fastbean-stats" else "BAD_FORMAT")
    if line.startswith(b"fastbean-reset"):
        return ("fastbean-reset", None if line == b"fastbean-reset" else "BAD_FORMAT")
    if line.startswith(b"list-tube "):
        args = _list_args(line[10:])
        return ("list-tube", None) + args if args else ("list-tube", "BAD_FORMAT")
    if line.startswith(b"list-schedules"):
        return ("list-schedules", None if line == b"list-schedules" else "BAD_FORMAT")
    for word in (b"flush-tube", b"flush-buried", b"unschedule", b"fire-schedule", b"pause-schedule"):
        if line.startswith(word):
            n = line[len(word) + 1:]
            if line[len(word):len(word) + 1] == b" " and _name_ok(n):
                return (word.decode(), None, n)
            return (word.decode(), "BAD_FORMAT")
    if line.startswith(b"fastbean-clock-advance "):
        ns = _seconds_ns(line[23:])
        return ("fastbean-clock-advance", "BAD_FORMAT") if ns is None else (
            "fastbean-clock-advance", None, ns)
    return ("UNKNOWN_COMMAND", None)


class RefParser:
    """Byte-at-a-time model of beanstalkd's connection reading."""

    def __init__(self, accept=lambda n: True):
        self.accept = accept
        self.buf = b""          # the 224-byte command buffer
        self.skipping = False
        self.body = None        # bytes still expected for a body / discard
        self.body_left = 0
        self.discard = False
        self.quit = False
        self.out = []

    def feed(self, data):
        for b in data:
            if self.quit:
                break
            self._byte(bytes([b]))
        out, self.out = self.out, []
        return out

    def _byte(self, b):
        if self.body_left:
            self.body_left -= 1
            if not self.discard:
                self.body += b
            if self.body_left == 0:
                if self.discard:
                    self.out.append(("skipped", "JOB_TOO_BIG"))
                elif self.body.endswith(b"\r\n"):
                    self.out.append(("body", None, self.body))
                else:
                    self.out.append(("body", "EXPECTED_CRLF", None))
                self.body = None
            return
        self.buf += b
        n = len(self.buf)
        # beanstalkd scans the first n-1 buffered bytes for a CR
        cr = self.buf.find(b"\r", 0, n - 1)
        if cr >= 0 and self.buf[cr + 1:cr + 2] == b"\n":
            line, self.buf = self.buf[:cr], b""
            if self.skipping:
                self.skipping = False
                self.out.append(("BAD_FORMAT", None))
                return
            cmd = parse_line(line)
            self.out.append(cmd)
            if cmd[0] == "put":
                nbytes, garbage = cmd[5], cmd[6]
                if not self.accept(nbytes):
                    self.discard, self.body_left = True, nbytes + 2
                elif not garbage:
                    self.discard, self.body_left, self.body = False, nbytes + 2, b""
            elif cmd[0] == "schedule" and cmd[2] is not None:
                if not self.accept(cmd[2]):
                    self.discard, self.body_left = True, cmd[2] + 2
                else:
                    self.discard, self.body_left, self.body = False, cmd[2] + 2, b""
            elif cmd[0] == "quit":
                self.quit = True
            return
        if n == LINE_MAX:
            self.buf = b""
            self.skipping = True
