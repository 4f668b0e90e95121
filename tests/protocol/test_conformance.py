"""Differential tests: the same sessions sent to the real beanstalkd and to
fastbean, replies compared byte for byte.

Only values that must differ are masked (pid, version, rusage, uptime, id,
hostname, os, platform; a job's age and time-left, a tube's pause-time-left),
and with them the byte count of the YAML document that holds them.
"""
import os
import random
import re
import signal
import socket
import time

import pytest

from tests.support.servers import BEANSTALKD, FUZZ, Server

pytestmark = pytest.mark.timeout(300)

if not os.path.exists(BEANSTALKD):
    if os.environ.get("CI"):
        raise RuntimeError("the real beanstalkd is required in CI: apt-get install -y beanstalkd")
    pytest.skip("beanstalkd is not installed", allow_module_level=True)

DYNAMIC = re.compile(rb"^(pid|version|rusage-utime|rusage-stime|uptime|id|hostname|os|platform"
                     rb"|age|time-left|pause-time-left): .*$", re.M)
SENTINEL = b"list-tube-used\r\n"


def normalize(data):
    """Mask dynamic YAML values and recompute the OK byte counts."""
    out, pos = [], 0
    for m in re.finditer(rb"OK (\d+)\r\n", data):
        if m.start() < pos:
            continue
        n = int(m.group(1))
        doc = data[m.end():m.end() + n]
        if not doc.startswith(b"---\n"):
            continue
        doc = DYNAMIC.sub(lambda d: d.group(1) + b": *", doc)
        out.append(data[pos:m.start()])
        out.append(b"OK * \r\n" + doc)
        pos = m.end() + n
    out.append(data[pos:])
    return b"".join(out)


class Session:
    """Connections to one server; each step's replies read up to a sentinel."""

    def __init__(self, port):
        self.port = port
        self.conns = {}
        self.transcript = []

    def conn(self, k):
        if k not in self.conns:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            self.conns[k] = [s, b""]
        return self.conns[k]

    def step(self, k, data, sentinel=True, wait=None):
        c = self.conn(k)
        s = c[0]
        s.sendall(data + (SENTINEL if sentinel else b""))
        # replies may arrive piecemeal: the sentinel's USING is the last of
        # as many USING lines as the step has use/list-tube-used commands, plus one
        lines = data.split(b"\r\n")
        want = 1 + sum(1 for x in lines if x == b"list-tube-used" or
                       (x.startswith(b"use ") and x[4:] and x[4:5] != b"-" and b" " not in x[4:]))
        got = b""
        deadline = time.monotonic() + (wait if wait is not None else 2.0)
        while time.monotonic() < deadline:
            left = deadline - time.monotonic()
            if got and wait is None:
                left = min(left, 0.25)        # the sentinel was swallowed: stop at silence
            s.settimeout(max(0.01, left))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                got += b"<closed>"
                s.close()
                del self.conns[k]
                break
            got += chunk
            if (sentinel and wait is None and got.endswith(b"\r\n")
                    and len(re.findall(rb"(?:(?<=\r\n)|^)USING [^\r\n]*\r\n", got)) >= want
                    and re.search(rb"USING [^\r\n]*\r\n$", got)):
                break
        self.transcript.append((k, data, normalize(got)))
        return got

    def close(self):
        for s, _ in self.conns.values():
            s.close()


def run_both(script, args=()):
    results = []
    for kind in ("beanstalkd", "fastbean"):
        srv = Server(kind, *args).start()
        sess = Session(srv.port)
        try:
            for step in script:
                sess.step(*step)
        finally:
            sess.close()
            srv.stop()
        results.append(sess.transcript)
    return results


def assert_same(script, args=()):
    ref, got = run_both(script, args)
    for (k, data, a), (_, _, b) in zip(ref, got):
        assert b == a, "conn %s sent %r\n beanstalkd: %r\n fastbean:   %r" % (k, data[:80], a, b)


# -- scripted sessions -------------------------------------------------------------

def put(body, pri=0, delay=0, ttr=60):
    return b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body)


SCRIPTS = {
    "basics": [
        (1, put(b"hello")), (1, b"peek 1\r\n"), (1, b"peek-ready\r\n"), (2, b"reserve\r\n"),
        (1, b"stats-job 1\r\n"), (2, b"release 1 10 0\r\n"), (1, b"stats-job 1\r\n"),
        (2, b"reserve-with-timeout 0\r\nbury 1 7\r\n"), (1, b"peek-buried\r\nkick 5\r\n"),
        (1, b"stats-tube default\r\nstats\r\n"), (2, b"delete 1\r\ndelete 1\r\n"),
    ],
    "put_edge_cases": [
        (1, b"put 0 0 10 5\r\nhelloXX\r\n"),               # EXPECTED_CRLF, then a stray line
        (1, b"put 1 2 3 4x\r\n"), (1, b"put 0 0 10 65536\r\n" + b"x" * 65538),
        (1, b"put 0 0 10 65535\r\n" + b"y" * 65535 + b"\r\n"), (1, b"put 0 0 0 0\r\n\r\n"),
        (1, b"stats-job 4\r\n"), (1, b"put 0 0 10 3\r\na\r\n\r\n"), (1, b"put 4294967295 0 1 0\r\n\r\n"),
        (1, b"put 4294967296 0 1 0\r\n"), (1, b"put -1 0 1 0\r\n"), (1, b"put  0  0 10 1\r\nz\r\n"),
        (1, b"put 0 0 10 1 \r\n"), (1, b"put 0 0 10\r\n"), (1, b"put\r\n"), (1, b"put \r\n"),
        (1, put(b"bin\0ary\r\nbody")), (1, b"peek 9\r\nstats\r\n"),
    ],
    "framing": [
        (1, b"x" * 500 + b"\r\n"), (1, b"a" * 222 + b"\r\n"), (1, b"use a\0b\r\n"),
        (1, b"PUT 0 0 1 1\r\n"), (1, b"\r\n"), (1, b" stats\r\n"), (1, b"kick\t1\r\n"),
        (1, b"stats-job\r\n"), (1, b"stats-tubes x\r\n"), (1, b"statsx\r\n"), (1, b"stats \r\n"),
        (1, b"reservex\r\n"), (1, b"reserve \r\n"), (1, b"peek-readyx\r\n"), (1, b"list-tubes \r\n"),
        (1, b"peek\r\n"), (1, b"delete\r\n"), (1, b"use\r\n"), (1, b"touch\r\n"),
        (1, b"pause-tubedefault 5\r\n"), (1, b"pause-tube   default    0\r\n"), (1, b"pause-tube -x 1\r\n"),
        (1, b"stats\r\n"), (1, b"quitx\r\n", False),
    ],
    "numbers": [
        (1, put(b"a")), (1, b"peek 18446744073709551615\r\npeek 18446744073709551616\r\n"),
        (1, b"peek 00001\r\npeek +1\r\npeek -1\r\npeek 1 \r\npeek  1\r\n"),
        (1, b"kick -1\r\nkick +1\r\nkick 1abc\r\nkick 0x5\r\nkick 4294967297\r\nkick \r\nkick abc\r\n"),
        (1, b"kick 99999999999999999999\r\nkick  3\r\n"),
        (1, b"reserve-with-timeout 4294967296\r\nreserve-with-timeout abc\r\n"),
        (1, b"release 1  2  3\r\nbury 1\r\nbury 1 x\r\nrelease 1 2\r\ntouch 1x\r\n"),
        (1, b"stats-job 111ABC\r\nstats-job 111 222\r\nkick-job x\r\nreserve-job -1\r\n"),
        (1, b"stats\r\n"),
    ],
    "tubes": [
        (1, b"use foo\r\nwatch bar\r\nwatch baz\r\nlist-tubes\r\nlist-tubes-watched\r\n"),
        (1, b"ignore default\r\nignore bar\r\nlist-tubes-watched\r\nlist-tubes\r\n"),
        (1, b"ignore baz\r\nignore nope\r\nignore -x\r\n"), (1, b"use " + b"a" * 200 + b"\r\n"),
        (1, b"use " + b"a" * 201 + b"\r\n"), (1, b"use x_y\r\nuse a-\r\nuse -a\r\nuse  a\r\nuse a b\r\n"),
        (1, b"use ..\r\nuse $(;+/)\r\nlist-tubes\r\n"), (2, b"use a\r\nput 0 0 1 1\r\nx\r\n"),
        (2, b"use b\r\nlist-tubes\r\n"), (1, b"use a\r\nuse c\r\nlist-tubes\r\n"),
        (2, b"delete 1\r\nlist-tubes\r\nstats-tube a\r\nstats-tube default\r\n"),
        (1, b"stats-tube nope\r\nstats-tube -x\r\npause-tube nope 1\r\nstats\r\n"),
    ],
    "states": [
        (1, put(b"d1", delay=100) + put(b"d2", delay=50) + put(b"r1", pri=5) + put(b"r2", pri=5)),
        (1, b"peek-delayed\r\npeek-ready\r\nstats-job 1\r\n"), (2, b"reserve-job 2\r\n"),
        (2, b"stats-job 2\r\nrelease 2 3 0\r\n"), (1, b"reserve-job 4\r\nreserve-job 4\r\nbury 4 9\r\n"),
        (2, b"bury 4 1\r\ndelete 4\r\n"), (1, b"kick-job 4\r\nkick-job 4\r\nkick-job 1\r\n"),
        (1, b"reserve-job 1\r\nrelease 1 1 0\r\n"), (2, b"reserve-with-timeout 0\r\ntouch 3\r\n"),
        (1, b"touch 3\r\ndelete 3\r\npeek 3\r\n"), (2, b"bury 3 0\r\nkick 1\r\nkick 1\r\n"),
        (1, b"stats\r\nlist-tubes\r\n"),
    ],
    # a pause of 0 is over at once: a reserve behind it in the same read, and
    # a waiter, get the tube's jobs
    "pause_zero_ends_a_pause": [
        (1, b"pause-tube default 3600\r\n" + put(b"p") + b"reserve-with-timeout 0\r\n"),
        (2, b"reserve\r\n", False, 0.1),
        (1, b"pause-tube default 0\r\nstats-tube default\r\n" + put(b"q")
         + b"reserve-with-timeout 0\r\n"),
        (2, b"", False, 0.1), (1, b"pause-tube default 0\r\n" + put(b"r") + b"reserve-with-timeout 0\r\n"),
    ],
    "multi_tube_priority": [
        (1, b"use x\r\n" + put(b"low", pri=999999) + b"use y\r\n" + put(b"high", pri=99)),
        (2, b"watch x\r\nwatch y\r\nreserve\r\n"), (2, b"reserve-with-timeout 0\r\nreserve-with-timeout 0\r\n"),
    ],
    "waiter_order": [                                   # beanstalkd's rotating pick (§3.5)
        (k, b"reserve\r\n", False, 0.1) for k in (1, 2, 3, 4)
    ] + [(5, put(b"job%d" % i), True) for i in range(4)] + [
        (k, b"", False, 0.1) for k in (1, 2, 3, 4)
    ],
    "drain_counters": [
        (1, b"watch t\r\nreserve-with-timeout 0\r\n"), (2, b"use t\r\n" + put(b"x")),
        (1, b"reserve-with-timeout 0\r\n"), (1, b"stats\r\n"), (3, b"quit\r\n", False),
        (2, b"stats\r\n"), (1, b"quit\r\n", False), (2, b"stats\r\nstats-tube t\r\n"),
    ],
    # A closing connection gives its reservations back oldest first, each one
    # offered to the waiters at once (beanstalkd's enqueue_reserved_jobs).
    "close_releases_oldest_first": [
        (1, put(b"p9", pri=9) + put(b"p5", pri=5) + put(b"p1", pri=1) + put(b"p7", pri=7)),
        (2, b"reserve\r\nreserve\r\nreserve\r\n"),
        (3, b"reserve\r\n", False, 0.1), (4, b"reserve\r\n", False, 0.1),
        (2, b"quit\r\n", False), (3, b"", False, 0.2), (4, b"", False, 0.2),
        (1, b"peek-ready\r\nstats-tube default\r\nstats\r\n"),
    ],
    # A job released and reserved again goes to the end of the list.
    "close_releases_rereserved_last": [
        (1, put(b"a") + put(b"b") + put(b"c") + put(b"d")),
        (2, b"reserve\r\nreserve\r\nreserve\r\nrelease 2 0 0\r\nrelease 1 0 0\r\n"),
        (2, b"reserve\r\nreserve\r\n"),
        (3, b"reserve\r\n", False, 0.1), (4, b"reserve\r\n", False, 0.1),
        (5, b"reserve\r\n", False, 0.1),
        (2, b"quit\r\n", False), (3, b"", False, 0.2), (4, b"", False, 0.2), (5, b"", False, 0.2),
        (1, b"peek-ready\r\n"),
    ],
    # The waiters watch other tubes than the closing holder reserved from.
    "close_releases_across_tubes": [
        (1, b"use x\r\n" + put(b"x1", pri=3) + put(b"x2", pri=1) + b"use y\r\n" + put(b"y1", pri=2)),
        (2, b"watch x\r\nwatch y\r\nreserve\r\nreserve\r\nreserve\r\n"),
        (3, b"watch y\r\nignore default\r\nreserve\r\n", False, 0.1),
        (4, b"watch x\r\nreserve\r\n", False, 0.1),
        (2, b"quit\r\n", False), (3, b"", False, 0.2), (4, b"", False, 0.2),
        (1, b"list-tubes\r\nstats-tube x\r\nstats-tube y\r\npeek-ready\r\n"),
    ],
    # Tubes that die with a connection leave the tube list in the order
    # beanstalkd destroys them: watch entry 0 removed with swap-with-last, over
    # and over, then the used tube; each removal from the list swaps too.
    "close_collects_tubes_in_order": [
        (1, b"watch w1\r\nwatch w2\r\n"), (2, b"watch k1\r\nwatch k2\r\n"), (1, b"use w3\r\n"),
        (2, b"use k3\r\nlist-tubes\r\n"), (1, b"quit\r\n", False), (2, b"list-tubes\r\n"),
        (1, b"watch w1\r\n"), (2, b"watch k1\r\n"), (1, b"watch w2\r\nwatch w3\r\n"),
        (2, b"use k2\r\n"), (1, b"use w4\r\nwatch w5\r\n"), (2, b"watch k3\r\n"),
        (1, b"watch w6\r\nignore w2\r\n"), (2, b"list-tubes\r\n"),
        (1, b"quit\r\n", False), (2, b"list-tubes\r\nlist-tubes-watched\r\n"),
        (3, b"watch a\r\nwatch b\r\nwatch c\r\nuse d\r\n"), (2, b"watch b\r\n"),
        (3, b"quit\r\n", False), (2, b"list-tubes\r\n"),
    ],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripted_session(name):
    assert_same(SCRIPTS[name])


def test_small_max_job_size():
    assert_same([(1, b"put 0 0 10 11\r\n" + b"z" * 11 + b"\r\n"), (1, b"put 0 0 10 10\r\n" + b"z" * 10 + b"\r\n"),
                 (1, b"put 0 0 10 11 garbage\r\n1234567890123"), (1, b"stats\r\n")], args=("-z", "10"))


# -- randomized sessions -------------------------------------------------------------

TUBES = [b"default", b"a", b"b", b"c.d", b"-bad", b"e f", b""]


def random_command(rnd, max_id):
    jid = rnd.choice([rnd.randint(1, max_id + 2), 0, 18446744073709551615])
    tube = rnd.choice(TUBES)
    pri = rnd.choice([0, 1, 1023, 1024, 4294967295, 4294967296])
    r = rnd.random()
    if r < 0.2:
        body = rnd.choice([b"", b"x", b"hello world", bytes(rnd.randrange(256) for _ in range(rnd.randrange(40)))])
        if pri > 4294967295:
            # the body of a refused put is read as commands; keep it readable
            body = rnd.choice([b"stats", b"hello world", b"peek-ready"])
        delay = rnd.choice([0, 0, 0, 500])
        n = len(body) if rnd.random() < 0.9 else len(body) + rnd.choice([-1, 1])
        if n < 0:
            n = 0
        return b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, rnd.choice([100, 1000]), n, body)
    return rnd.choice([
        b"reserve-with-timeout 0\r\n", b"reserve-job %d\r\n" % jid, b"delete %d\r\n" % jid,
        b"release %d %d %d\r\n" % (jid, pri, rnd.choice([0, 0, 800])), b"bury %d %d\r\n" % (jid, pri),
        b"touch %d\r\n" % jid, b"kick %d\r\n" % rnd.choice([0, 1, 3, 100]), b"kick-job %d\r\n" % jid,
        b"peek %d\r\n" % jid, b"peek-ready\r\n", b"peek-delayed\r\n", b"peek-buried\r\n",
        b"stats-job %d\r\n" % jid, b"stats-tube %s\r\n" % tube, b"stats\r\n",
        b"use %s\r\n" % tube, b"watch %s\r\n" % tube, b"ignore %s\r\n" % tube,
        b"list-tubes\r\n", b"list-tubes-watched\r\n", b"list-tube-used\r\n",
        b"pause-tube %s %d\r\n" % (tube, rnd.choice([600, 900])),
        b"%s\r\n" % bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz -0123456789") for _ in range(rnd.randrange(30))),
        b"x" * rnd.randrange(230, 400) + b"\r\n",
    ])


@pytest.mark.parametrize("seed", range(30))
def test_random_session(seed):
    rnd = random.Random(seed)
    script = []
    for _ in range(120):
        conn = rnd.randint(1, 3)
        script.append((conn, random_command(rnd, 12)))
    assert_same(script)


def random_close_session(rnd):
    """Holders reserve from several tubes, waiters block on others, holders
    close; then the tubes, ready jobs and tube stats are compared. Everyone
    also watches tubes of its own, created interleaved, so that tubes die with
    their connections and the survivors' order in list-tubes shows."""
    tubes = [b"t%d" % i for i in range(4)]
    script = []
    for _ in range(rnd.randint(4, 12)):
        script.append((9, b"use %s\r\n" % rnd.choice(tubes) +
                       put(b"j", pri=rnd.choice([0, 1, 5, 1024]), delay=rnd.choice([0, 0, 0, 1]))))
    holders = rnd.sample([1, 2, 3], rnd.randint(1, 3))
    waiters = rnd.sample([4, 5, 6, 7], rnd.randint(1, 4))
    setup = []
    for k in holders + waiters:
        names = rnd.sample(tubes, rnd.randint(1, 3)) + [b"c%d.%d" % (k, i) for i in range(rnd.randint(0, 3))]
        setup += [(k, b"watch %s\r\n" % t) for t in names]
        if rnd.random() < 0.4:
            setup.append((k, b"use c%d.u\r\n" % k))
        if rnd.random() < 0.3:
            setup.append((k, b"ignore %s\r\n" % rnd.choice(names + [b"default"])))
    rnd.shuffle(setup)
    script += setup
    for h in holders:
        for _ in range(rnd.randint(1, 5)):
            script.append((h, rnd.choice([b"reserve-with-timeout 0\r\n"] * 4 + [
                b"release %d %d 0\r\n" % (rnd.randint(1, 12), rnd.choice([0, 7]))])))
    for w in waiters:
        script.append((w, b"reserve\r\n", False, 0.05))
    for h in rnd.sample(holders, len(holders)):
        script.append((h, b"quit\r\n", False))
    for w in waiters:
        script.append((w, b"", False, 0.1))
    script.append((8, b"list-tubes\r\n"))
    for t in tubes:
        script.append((8, b"use %s\r\npeek-ready\r\nstats-tube %s\r\n" % (t, t)))
    script.append((8, b"stats\r\n"))
    return script


@pytest.mark.parametrize("seed", range(12 * FUZZ))
def test_random_close_session(seed):
    assert_same(random_close_session(random.Random(seed)))


# Commands queued behind a blocked reserve when the client hangs up (issue
# 35, defect 4). beanstalkd answers the reserve TIMED_OUT when it sees the
# hang-up and runs each later command once the reply before it is written:
# after a full close the first write succeeds, the peer answers it with a
# reset, and the next write fails and ends the connection; after
# shutdown(SHUT_WR) every write succeeds and everything runs.
BEHIND_RESERVE = {
    "use-put": b"use zz\r\nput 0 0 60 1\r\nx\r\n",
    "put-use-put": b"put 0 0 60 1\r\na\r\nuse zz\r\nput 0 0 60 1\r\nb\r\n",
    "use-three-puts": b"use zz\r\n" + b"put 0 0 60 1\r\nx\r\n" * 3,
    "stats-then-puts": b"stats-tube default\r\nuse zz\r\nput 0 0 60 1\r\nx\r\nput 0 0 60 1\r\ny\r\n",
    "peek-pause-put": b"peek-ready\r\npause-tube default 0\r\nuse zz\r\nput 0 0 60 1\r\nx\r\n",
    "reserve-again": b"reserve-with-timeout 0\r\nuse zz\r\nput 0 0 60 1\r\nx\r\n",
}


def _state_after_hang_up(kind, how, tail, log=False):
    # What the client read after its hang-up (SHUT_WR only: a closed socket
    # reads nothing) and what the server holds once it has let go. log: with
    # a binlog fsynced before every reply (fastbean holds each reply until
    # its records are durable, so it is written later).
    srv = Server(kind, *(("-f", "0") if log else ()), binlog=log).start()
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"watch emptyq\r\nignore default\r\nreserve\r\n" + tail)
        got = b""
        while got.count(b"\r\n") < 2:           # WATCHING 2, WATCHING 1; the reserve blocks
            got += s.recv(4096)
        assert got == b"WATCHING 2\r\nWATCHING 1\r\n"
        after = b""
        if how == "close":
            s.close()
        else:
            s.shutdown(socket.SHUT_WR)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                after += chunk
            s.close()
        with srv.client() as c:
            wait_for_the_hang_up(c)
            shown = []
            for line in (b"list-tubes", b"stats", b"stats-tube default", b"stats-tube zz", b"peek-ready"):
                c.send(line + b"\r\n")
                reply = c.line() + b"\r\n"
                if reply.startswith((b"OK ", b"FOUND ")):
                    reply += c.body(int(reply.split()[-1])) + b"\r\n"
                # the stats polls above are counted too, as many as it took
                shown.append(re.sub(rb"cmd-stats: \d+", b"cmd-stats: *", normalize(reply)))
        return normalize(after), shown
    finally:
        srv.stop()


def wait_for_the_hang_up(c):
    """Until c, the server's only other client, is alone there."""
    deadline = time.monotonic() + 10
    while c.stats()["current-connections"] != 1:
        assert time.monotonic() < deadline, "the hung-up connection stays"
        time.sleep(0.01)


def _state_after_kick_and_hang_up(kind, how):
    # A kick of 10,000 delayed jobs (fastbean moves 4096 a loop turn), then
    # commands behind it, and the client hangs up at once: beanstalkd writes
    # KICKED, runs one command more and fails its reply (a full close), or
    # runs and answers everything (SHUT_WR). fastbean keeps reading while
    # the kick runs, so it sees the hang-up as beanstalkd does. The server
    # is stopped while the client sends and hangs up, so that both find the
    # commands and the hang-up waiting, whatever the scheduler does.
    n = 10000
    srv = Server(kind).start()
    try:
        with srv.client(60) as c:
            c.send(b"put 0 3600 60 1\r\nx\r\n" * n)
            for _ in range(n):
                c.line()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        os.kill(srv.pid, signal.SIGSTOP)
        try:
            s.sendall(b"kick %d\r\nuse zz\r\nput 0 0 60 1\r\nx\r\nput 0 0 60 1\r\ny\r\n" % n)
            if how == "close":
                s.close()
            else:
                s.shutdown(socket.SHUT_WR)
        finally:
            os.kill(srv.pid, signal.SIGCONT)
        after = b""
        if how != "close":
            while chunk := s.recv(65536):
                after += chunk
            s.close()
        with srv.client() as c:
            wait_for_the_hang_up(c)
            st = c.stats()
            shown = (st["current-jobs-ready"], st["current-jobs-delayed"], st["total-jobs"],
                     c.cmd(b"stats-tube zz"))
        return after, shown
    finally:
        srv.stop()


@pytest.mark.parametrize("how", ["close", "shut-wr"])
def test_commands_behind_a_long_kick_at_hang_up(how):
    assert _state_after_kick_and_hang_up("fastbean", how) == _state_after_kick_and_hang_up("beanstalkd", how)


@pytest.mark.parametrize("log", [False, True], ids=["memory", "binlog"])
@pytest.mark.parametrize("how", ["close", "shut-wr"])
@pytest.mark.parametrize("name", sorted(BEHIND_RESERVE))
def test_commands_behind_a_blocked_reserve_at_hang_up(name, how, log):
    ref = _state_after_hang_up("beanstalkd", how, BEHIND_RESERVE[name], log)
    got = _state_after_hang_up("fastbean", how, BEHIND_RESERVE[name], log)
    assert got == ref
