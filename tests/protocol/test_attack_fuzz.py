"""Generated streams of commands, well-formed and not, fed in random pieces:
the parser against the byte-at-a-time reference model; a role filter whose
roles allow every command it is sent against the engine itself; a filter
with narrow roles that must leave every other tube's jobs as they were; and
a --strict server against beanstalkd 1.12 over real sockets.

FUZZ_STREAMS streams (50,000 in CI) go through the parser and the filters;
`make fuzz` (FASTBEAN_FUZZ=20) runs 1,000,000. Each test generates its
streams with hypothesis, a batch of STREAMS_PER_EXAMPLE per example, so that
a failing stream is shrunk like any example.
"""
import random
import re
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastbean.engine.core import Core
from fastbean.engine.parser import Parser
from fastbean.server.rolefilter import RoleFilter
from fastbean.server.roles import parse_roles
from tests.protocol.test_conformance import normalize
from tests.support.refparser import RefParser
from tests.support.servers import FUZZ, HOST, Server

pytestmark = pytest.mark.timeout(300 * FUZZ)

STREAMS_PER_EXAMPLE = 25
FUZZ_STREAMS = 50000 * FUZZ
MAX_JOB = 64
IDS = [b"1", b"2", b"3", b"5", b"8", b"12", b"0", b"18446744073709551615", b"18446744073709551616"]
TUBES = [b"a", b"b", b"default", b"c.d", b"secret", b"-x", b"a" * 201, b"(q)"]
NUMBERS = [b"0", b"1", b"5", b"1024", b"4294967295", b"4294967296", b"-1", b"+3", b"1x", b"x",
           b"0.5", b"2.1"]
# numbers that, read as a delay, a TTR or a timeout, change nothing while a run lasts
LASTING = [b"0", b"3600000", b"4294967295", b"4294967296", b"-1", b"+0", b"1x", b"x", b"0.5"]
OTHER_PIECES = IDS + TUBES + [b" ", b"  ", b"\t", b"\r", b"\n", b"\0", b".", b"!", b"*", b"?",
                              b"ready", b"buried", b"delayed", b"reserved", b"default", b"idp:k",
                              b"idp:k:5", b"idp:"]
BODIES = [b"", b"x", b"hello", b"peek-ready\r\nuse a", b"\r\n", b"a" * 64, b"b" * 65, b"\0\xff"]
ADMIN_BODY = b"kick 1\r\nstats"       # read as commands after a put refused before its body

# verbs a token with every role but admin may send
ALLOWED_VERBS = [b"peek", b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve-job", b"delete",
                 b"release", b"bury", b"touch", b"stats-tube", b"use", b"watch", b"ignore", b"list-tubes",
                 b"list-tube-used", b"list-tubes-watched", b"list-tube", b"reserve-batch", b"nonsense",
                 b"PUT", b"", b"auth"]
BLOCKING_VERBS = [b"reserve-with-timeout"]
ADMIN_VERBS = [b"kick", b"kick-job", b"pause-tube", b"flush-tube", b"flush-buried", b"fastbean-stats",
               b"delete-batch", b"delete-each", b"retry-limit"]
# answers that tell the time or the process: two servers never give the same bytes
TIMED_VERBS = [b"stats", b"stats-job"]


class Grammar:
    """What a stream may hold. admin: commands only an admin may run (else
    an admin's verbs come only in lines no reader takes); timed: commands
    whose answers tell the time; lasting: no delay, TTR or timeout that
    could end while a run lasts, and no command that blocks."""

    def __init__(self, admin, timed, lasting=False):
        self.admin, self.timed, self.lasting = admin, timed, lasting
        numbers = LASTING if lasting else NUMBERS
        self.pieces = numbers + OTHER_PIECES
        self.verbs = ALLOWED_VERBS + (ADMIN_VERBS if admin else []) + (TIMED_VERBS if timed else []) + (
            [] if lasting else BLOCKING_VERBS)
        self.delays = [b"0", b"0", b"3600000"] if lasting else [b"0", b"0", b"5"]
        self.ttrs = [b"60", b"0"]
        self.bodies = BODIES + ([ADMIN_BODY] if admin and timed else [])

    def well_formed(self, rnd):
        """A command line (and body) that most likely does something."""
        i, t, n = choose(rnd, IDS[:6]), choose(rnd, TUBES[:5]), choose(rnd, [b"0", b"1", b"5", b"1024"])
        if rnd.random() < 0.3:
            body = choose(rnd, self.bodies)
            size = len(body) + choose(rnd, [0, 0, 0, 0, 1, -1, 30])
            tag = choose(rnd, [b"", b"", b"", b" idp:k", b" idp:k:5", b" junk"])
            return b"put %s %s %s %d%s\r\n%s\r\n" % (choose(rnd, [b"0", b"1024"]), choose(rnd, self.delays),
                                                      choose(rnd, self.ttrs), max(size, 0), tag, body)
        lines = [b"peek " + i, b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve-with-timeout 0",
                 b"reserve-job " + i, b"delete " + i, b"release %s %s %s" % (i, n, choose(rnd, self.delays)),
                 b"bury %s %s" % (i, n), b"touch " + i, b"stats-tube " + t, b"use " + t, b"watch " + t,
                 b"ignore " + t, b"list-tubes-watched", b"list-tube-used", b"list-tubes", b"retry-limit",
                 b"list-tube %s 0 %s" % (choose(rnd, [b"ready", b"buried", b"delayed", b"reserved"]),
                                         choose(rnd, [b"1", b"5", b"1000"])),
                 b"reserve-batch %s 0" % choose(rnd, [b"1", b"3"])]
        if self.admin:
            lines += [b"kick " + n, b"kick-job " + i, b"pause-tube %s 0" % t, b"flush-tube " + t,
                      b"flush-buried " + t, b"fastbean-stats", b"delete-batch %s %s" % (i, choose(rnd, IDS[:6])),
                      b"delete-each " + i, b"retry-limit 1 dead", b"retry-limit default"]
        if self.timed:
            lines += [b"stats", b"stats-job " + i]
        return choose(rnd, lines) + b"\r\n"

    def mangled(self, rnd):
        """A verb with pieces after it: mostly lines that cannot be read."""
        words = b"".join(choose(rnd, self.pieces) for _ in range(rnd.randrange(5)))
        return choose(rnd, self.verbs) + (b" " if rnd.random() < 0.8 else b"") + words + choose(
            rnd, [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r", b""])

    def stream(self, rnd):
        """One stream of commands: its bytes."""
        parts = []
        for _ in range(rnd.randrange(1, 25)):
            r = rnd.random()
            if r < 0.55:
                parts.append(self.well_formed(rnd))
            elif r < 0.8:
                parts.append(self.mangled(rnd))
            elif r < 0.88:
                parts.append(unreadable_admin(rnd))
            elif r < 0.95:
                parts.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))))
            else:
                parts.append(b"x" * rnd.randrange(200, 300) + b"\r\n")
        return b"".join(parts)


def choose(rnd, items):
    return items[rnd.randrange(len(items))]


def unreadable_admin(rnd):
    # an admin's verb with nothing any reader takes after it: BAD_FORMAT, or
    # UNKNOWN_COMMAND to the glued form (not "kick 1 !": beanstalkd reads
    # kick's count and ignores what follows it)
    return choose(rnd, ADMIN_VERBS) + choose(rnd, [b" !", b"!", b" !1"]) + b"\r\n"


EVERYTHING = Grammar(admin=True, timed=True)
NOT_ADMIN = Grammar(admin=False, timed=False)           # and nothing that tells the time
ON_THE_WIRE = Grammar(admin=True, timed=False, lasting=True)


def pieces(rnd, data):
    if len(data) < 2 or rnd.random() < 0.3:
        return [data]
    cuts = sorted(set(rnd.randrange(1, len(data)) for _ in range(rnd.randrange(1, 8))))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def generated(streams):
    """A test of `streams` generated streams: STREAMS_PER_EXAMPLE to each
    hypothesis example, made from its seed."""
    return lambda test: settings(max_examples=streams // STREAMS_PER_EXAMPLE, deadline=None,
                                 suppress_health_check=list(HealthCheck))(
        given(seed=st.integers(0, 2**63))(test))


# -- the parser ---------------------------------------------------------------------------

def accept(n):
    return n <= MAX_JOB


@generated(FUZZ_STREAMS)
def test_the_parser_reads_generated_streams_as_beanstalkd(seed):
    rnd = random.Random(seed)
    for _ in range(STREAMS_PER_EXAMPLE):
        data = EVERYTHING.stream(rnd)
        reference = RefParser(accept).feed(data)
        compiled = Parser()
        got = []
        for piece in pieces(rnd, data):
            got += compiled.parse(piece, accept)
        assert got == reference, data


# -- role filters ---------------------------------------------------------------------------

class Loop:
    """call_soon for a filter in-process: run by drain()."""

    def __init__(self):
        self.ready = []

    def call_soon(self, fn):
        self.ready.append(fn)

    def drain(self):
        while self.ready:
            self.ready.pop(0)()


class Transport:
    def __init__(self):
        self.written = []
        self.closing = False
        self.reading = True

    def write(self, data):
        self.written.append(bytes(data))

    def writelines(self, chunks):
        self.written.append(b"".join(chunks))

    def is_closing(self):
        return self.closing

    def close(self):
        self.closing = True

    def abort(self):
        self.closing = True

    def get_write_buffer_size(self):
        return 0


class Session:
    """One connection to an in-process engine, straight or through a role filter."""

    def __init__(self, core, roles=None):
        self.loop = Loop()
        self.transport = t = Transport()
        self.again = False
        self.conn = core.connect(self._reading, self._again)
        if roles is None:
            self.reader = self.conn.feed
            self.conn.attach(t.write, t.writelines, t.close)
        else:
            flt = RoleFilter(parse_roles(roles.split()), "fuzz", "127.0.0.1", core, MAX_JOB,
                             self.loop.call_soon, self._held)
            self.reader = flt.feed
            self.conn.attach(*flt.writers(self.conn, t.write, t), t.close)

    def _reading(self, on):
        pass

    def _held(self, hold):
        pass

    def _again(self):
        self.again = True

    def send(self, data):
        if not self.transport.closing:
            self.reader(data)
        self.settle()

    def send_all(self, split):
        for piece in split:
            self.send(piece)
        return self

    def settle(self):
        while self.again or self.loop.ready:
            if self.again:
                self.again = False
                self.conn.again()
            self.loop.drain()

    def take(self):
        out = b"".join(self.transport.written)
        self.transport.written.clear()
        return out


LISTED = re.compile(rb"LISTED (\d+) [0-9.]+\r\n")
ROW = re.compile(rb"(\d+) (\d+) \d+ \d+ (\d+)\r\n")


def timeless(out):
    """The replies with list-tube's times masked (its cursor and each row's
    age and time left), which no two engines give alike."""
    parts, pos = [], 0
    while True:
        m = LISTED.search(out, pos)
        if m is None:
            return b"".join(parts) + out[pos:]
        parts.append(out[pos:m.start()] + b"LISTED %s T\r\n" % m.group(1))
        pos = m.end()
        for _ in range(int(m.group(1))):
            row = ROW.match(out, pos)
            parts.append(b"%s %s T T %s\r\n" % row.groups())
            pos = row.end()


SETUP = (b"use a\r\nput 0 0 60 1\r\nA\r\nuse b\r\nput 0 0 60 1\r\nB\r\nuse secret\r\nput 0 0 60 1\r\nS\r\n"
         b"put 0 3600 60 1\r\nD\r\nuse default\r\nput 0 0 60 1\r\nZ\r\n")


def engine():
    core = Core(version=b"fuzz", max_job_size=MAX_JOB)
    setup = Session(core)
    setup.send(SETUP)
    assert setup.take().count(b"INSERTED") == 5
    return core, setup


@generated(FUZZ_STREAMS)
def test_a_filter_that_allows_everything_sent_answers_as_the_engine(seed):
    rnd = random.Random(seed)
    for _ in range(STREAMS_PER_EXAMPLE):
        data = NOT_ADMIN.stream(rnd)
        split = pieces(rnd, data)
        straight = Session(engine()[0]).send_all(split)
        filtered = Session(engine()[0], "producer worker monitor").send_all(split)
        assert timeless(filtered.take()) == timeless(straight.take()), data


NARROW = "producer:a worker:a monitor:a,b"
UNTOUCHABLE_JOBS = (2, 3, 4, 5)         # in b (a monitor's only), secret, secret (delayed), default
UNTOUCHABLE_TUBES = (b"b", b"secret", b"default", b"c.d")
MOVING = ("age", "time-left")


def holdings(core):
    """What an admin sees of the jobs and tubes that NARROW may not touch."""
    look = Session(core)
    seen = []
    for job in UNTOUCHABLE_JOBS:
        look.send(b"stats-job %d\r\n" % job)
        seen.append(b"\n".join(line for line in look.take().split(b"\n")
                               if line.split(b":")[0].decode("latin-1") not in MOVING))
    for tube in UNTOUCHABLE_TUBES:
        look.send(b"stats-tube %s\r\n" % tube)
        seen.append(look.take())
    look.send(b"quit\r\n")
    return seen


@generated(FUZZ_STREAMS)
def test_a_narrow_filter_leaves_every_other_tube_as_it_was(seed):
    # every command, an admin's too, from a client whose roles reach tube a
    # alone (and b to look at): nothing else changes, whatever it sends
    rnd = random.Random(seed)
    for _ in range(STREAMS_PER_EXAMPLE):
        data = EVERYTHING.stream(rnd)
        core, _ = engine()
        before = holdings(core)
        narrow = Session(core, NARROW).send_all(pieces(rnd, data))
        narrow.conn.gone()          # as if it hung up: what it reserved goes back
        assert holdings(core) == before, data


# -- --strict against beanstalkd, on the wire -------------------------------------------------

WIRE_STREAMS = 25000 * FUZZ
PAD = b"\r\n" * 160             # ends a line or a body the stream left open: a bare CR hides CRLFs up to 224 bytes
END = b"use fuzz-end\r\n"


def transcript(port, data):
    """What a server answers to data on a new connection, then to the end
    marker, then to quit (or, if data quits, up to the close)."""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(data + PAD + END)
        got = b""
        while not got.endswith(b"USING fuzz-end\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                return got + b"<closed>"
            got += chunk
        sock.sendall(b"quit\r\n")
        while sock.recv(65536):
            pass
        return got


@pytest.fixture(scope="module")
def strict_pair():
    reference = Server("beanstalkd", "-z", str(MAX_JOB)).start()
    strict = Server("fastbean", "--strict", "-z", str(MAX_JOB)).start()
    yield reference, strict
    reference.stop()
    strict.stop()


@generated(WIRE_STREAMS)
def test_strict_answers_generated_streams_as_beanstalkd(strict_pair, seed):
    # one stream after another on each server, so that both hold the same jobs
    reference, strict = strict_pair
    rnd = random.Random(seed)
    for _ in range(STREAMS_PER_EXAMPLE):
        data = ON_THE_WIRE.stream(rnd)
        # a stats document can be had from lines like watch\nfastbean-stats: its
        # pid, version, rusage and such are masked, as in test_conformance
        ours, theirs = normalize(transcript(strict.port, data)), normalize(transcript(reference.port, data))
        assert ours == theirs, first_difference(data, ours, theirs)


def first_difference(data, ours, theirs):
    ours, theirs = ours.split(b"\r\n"), theirs.split(b"\r\n")
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return "stream %r: reply line %d is %r here, %r from beanstalkd" % (
        data, at, ours[at - 2:at + 2], theirs[at - 2:at + 2])
