"""Microbenchmarks of the compiled parser and queue engine, in-process (no sockets).

The parser is driven through its Python test API (Parser().parse, which also
builds a tuple per command, so its numbers include that), the engine
through Conn.feed with a fake transport that keeps the reply chunks by
reference, and whose again() callback is honoured by calling Conn.again() until
the engine stops asking (batches over batch_limit, kicks over KICK_BATCH).
Every benchmark checks its replies, so a broken engine cannot post a fast time.

Run from the repository root (not collected by the normal test run, which is
limited to tests/):

    python -m pytest benchmarks/test_micro.py --benchmark-only -q
"""
import random
import re
import time

import pytest

from benchmarks.parsers import BATCH, BODY, GARBAGE, PUT, PUTS, SHORT
from fastbean.engine.core import FILE_HEADER, Core, tune_malloc
from fastbean.engine.parser import Parser
from tests.support.servers import EngineClient as Client

tune_malloc()                               # as the server does at start-up


# -- helpers -------------------------------------------------------------------

def filled(n, put=PUT):
    """A core whose default tube holds n ready jobs (ids 1..n), and a client."""
    core = Core()
    c = Client(core)
    for k in range(0, n, BATCH):
        c.send(put * min(BATCH, n - k))
    assert c.take().count(b"INSERTED") == n
    return core, c


def inserted(first, n):
    return b"".join(b"INSERTED %d\r\n" % i for i in range(first, first + n))


def yaml_ok(reply):
    """Check an `OK <n>` reply's framing; return its YAML document."""
    m = re.match(rb"OK (\d+)\r\n", reply)
    assert m, reply[:40]
    doc = reply[m.end():]
    assert len(doc) == int(m.group(1)) + 2 and doc.endswith(b"\r\n")
    return doc


# -- parser --------------------------------------------------------------------

# the inputs are benchmarks/parsers.py's, which times builds against each other


def parse_whole(data):
    return Parser().parse(data)


def parse_chunks(chunks):
    p = Parser()
    out = []
    for c in chunks:
        out += p.parse(c)
    return out


def random_chunks(data, seed=1, lo=1, hi=64):
    rnd = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rnd.randint(lo, hi)
        out.append(data[i:i + n])
        i += n
    return out


def test_parser_puts_one_chunk(benchmark):
    out = benchmark(parse_whole, PUTS)
    assert len(out) == 2 * BATCH
    assert out[0] == ("put", None, 0, 0, 60, 100, b"")     # no tag
    assert out[-1] == ("body", None, BODY + b"\r\n")


def test_parser_puts_random_chunks(benchmark):
    chunks = random_chunks(PUTS)
    benchmark.extra_info["chunks"] = len(chunks)
    out = benchmark(parse_chunks, chunks)
    assert out == parse_whole(PUTS)


def test_parser_short_commands(benchmark):
    out = benchmark(parse_whole, SHORT)
    assert len(out) == 1000
    assert out[:4] == [("reserve-with-timeout", None, 0), ("delete", None, 123),
                       ("stats-job", None, 5), ("use", None, b"tubename")]


def test_parser_overlong_lines_resync(benchmark):
    out = benchmark(parse_whole, GARBAGE)
    assert out == [("BAD_FORMAT", None), ("stats", None), ("UNKNOWN_COMMAND", None)] * 100


# -- engine --------------------------------------------------------------------

def test_engine_put_batch(benchmark):
    want = inserted(1, BATCH)

    def setup():
        return (Client(Core()),), {}

    def run(c):
        return c.call(PUTS)

    out = benchmark.pedantic(run, setup=setup, rounds=300)
    assert out == want


CALLS = (1, 200_000, 200_001)     # of a pedantic 100 x 2000 (see below)


def test_engine_puts_one_per_read(benchmark):
    """A depth-1 producer's reads, each one put, then the loop turn's end: the
    queue's own work per put (parse, store, answer). Set beside
    test_uvnull_handler_puts_one_per_read, it is what fastbean adds to the
    least a server on uvloop costs a request (docs/benchmarks.md)."""
    core = Core()
    conn = core.connect(lambda on: None, lambda: None)
    replies = []
    conn.attach(replies.append, replies.extend, lambda: None)
    feed, end_turn = conn.feed, core.end_turn

    def read():
        feed(PUT)
        end_turn()

    benchmark.pedantic(read, rounds=100, iterations=2000)
    # pytest-benchmark 5 makes one call of its own before the rounds, 4 does
    # not, and --benchmark-disable makes only that one: each call is one put
    n = len(replies)
    assert n in CALLS and core.current_jobs == n
    assert bytes(replies[-1]) == b"INSERTED %d\r\n" % n


def test_uvnull_handler_puts_one_per_read(benchmark):
    """The same reads through benchmarks/uvnull.py's data_received (which keeps nothing)."""
    from benchmarks.uvnull import Null

    null = Null()
    replies = []
    null.write = replies.append

    benchmark.pedantic(null.data_received, args=(PUT,), rounds=100, iterations=2000)
    assert len(replies) in CALLS and set(replies) == {b"INSERTED 1\r\n"}


def test_engine_reserve_delete_prefilled(benchmark):
    n = 10 * BATCH
    feeds = [b"".join(b"reserve-with-timeout 0\r\ndelete %d\r\n" % i for i in range(k, k + BATCH))
             for k in range(1, n + 1, BATCH)]
    want = b"".join(b"RESERVED %d 100\r\n%s\r\nDELETED\r\n" % (i, BODY) for i in range(1, n + 1))

    def setup():
        return filled(n), {}

    def run(core, c):
        for f in feeds:
            c.send(f)
        return c.take()

    out = benchmark.pedantic(run, setup=setup, rounds=10)
    assert out == want


def test_engine_round_trip(benchmark):
    """put, reserve, delete: one feed each, as a client waiting on each reply."""
    core = Core()
    c = Client(core)
    ids = iter(range(1, 1 << 62))

    def trip():
        i = next(ids)
        assert c.call(PUT) == b"INSERTED %d\r\n" % i
        assert c.call(b"reserve-with-timeout 0\r\n") == b"RESERVED %d 100\r\n%s\r\n" % (i, BODY)
        assert c.call(b"delete %d\r\n" % i) == b"DELETED\r\n"

    benchmark(trip)
    assert core.current_jobs == 0


def test_engine_bury_kick(benchmark):
    """Reserve and bury 1,000 jobs, then kick them all back (the state repeats)."""
    core, c = filled(BATCH)
    bury = b"".join(b"reserve-with-timeout 0\r\nbury %d 0\r\n" % i for i in range(1, BATCH + 1))
    want = b"".join(b"RESERVED %d 100\r\n%s\r\nBURIED\r\n" % (i, BODY) for i in range(1, BATCH + 1))

    def cycle():
        assert c.call(bury) == want
        assert c.call(b"kick 1000\r\n") == b"KICKED 1000\r\n"

    benchmark(cycle)
    core.check()


def test_engine_kick_100k_buried(benchmark):
    n = 100_000
    bury = [b"".join(b"reserve-with-timeout 0\r\nbury %d 0\r\n" % i for i in range(k, k + BATCH))
            for k in range(1, n + 1, BATCH)]

    def setup():
        core, c = filled(n, b"put 0 0 60 1\r\nx\r\n")
        for f in bury:
            c.send(f)
        assert c.take().count(b"BURIED") == n
        return (core, c), {}

    def run(core, c):
        return c.call(b"kick 100000\r\n")

    out = benchmark.pedantic(run, setup=setup, rounds=3)
    assert out == b"KICKED 100000\r\n"


@pytest.mark.parametrize("cmd", [b"peek", b"stats-job"])
def test_engine_peek_stats_job(benchmark, cmd):
    core, c = filled(BATCH)
    feed = b"".join(b"%s %d\r\n" % (cmd, i) for i in range(1, BATCH + 1))

    def run():
        return c.call(feed)

    out = benchmark(run)
    if cmd == b"peek":
        assert out == b"".join(b"FOUND %d 100\r\n%s\r\n" % (i, BODY) for i in range(1, BATCH + 1))
    else:
        docs = out.split(b"OK ")[1:]
        assert len(docs) == BATCH
        assert b"\nid: 1000\ntube: default\nstate: ready\n" in docs[-1]


def test_engine_stats(benchmark):
    core, c = filled(BATCH)
    c.call(b"use other\r\nwatch other\r\n")
    out = benchmark(c.call, b"stats\r\n")
    doc = yaml_ok(out)
    assert b"\ncurrent-jobs-ready: 1000\n" in doc and b"\ncurrent-tubes: 2\n" in doc


def test_engine_tick_delayed(benchmark):
    """tick() moving 50,000 due delayed jobs to ready (default budget, so
    several calls). Delays are whole seconds on the monotonic clock the engine
    reads itself, so the cores are filled up front and slept past once."""
    n, rounds = 50_000, 5
    cores = [filled(n, b"put 0 1 60 1\r\nx\r\n") for _ in range(rounds)]
    time.sleep(1.05)

    def setup():
        return cores.pop(), {}

    def run(core, c):
        calls = 1
        while core.tick() == 0.0:
            calls += 1
        return core, c, calls

    core, c, calls = benchmark.pedantic(run, setup=setup, rounds=rounds)
    assert calls == n // 10000 + 1
    doc = yaml_ok(c.call(b"stats-tube default\r\n"))
    assert b"\ncurrent-jobs-ready: %d\ncurrent-jobs-reserved: 0\ncurrent-jobs-delayed: 0\n" % n in doc


def no_next_file(need, replace):
    raise AssertionError("one huge file was promised")


def test_engine_replay(benchmark):
    """Replay a binlog file of 50,000 puts and 10,000 deletes into a new core."""
    n, dels = 50_000, 10_000
    core = Core(next_file=no_next_file)
    core.wal_start(1, 1 << 40, len(FILE_HEADER))
    c = Client(core)
    for _ in range(0, n, BATCH):
        c.send(PUT * BATCH)
    for k in range(1, dels + 1, BATCH):
        c.send(b"".join(b"delete %d\r\n" % i for i in range(k, k + BATCH)))
    segments, seq = core.take_wal()
    assert seq == n + dels and [s for s, _ in segments] == [1]
    data = FILE_HEADER + bytes(segments[0][1])
    benchmark.extra_info["bytes"] = len(data)

    def setup():
        return (Core(),), {}

    def run(fresh):
        return fresh, fresh.replay(data, 1), fresh.replay_finish()

    fresh, result, jobs = benchmark.pedantic(run, setup=setup, rounds=5)
    assert result == (n + dels, len(data), None)       # every record applied, to the file's end
    assert jobs == n - dels == fresh.current_jobs
    assert not fresh.has_job(dels) and fresh.has_job(dels + 1) and fresh.max_id == n
    assert fresh.check()


def test_engine_fill_1m(benchmark):
    """1,000,000 puts through the id table's growth; per-feed times (1,000 puts
    each) go to extra_info, so a resize stall or a creeping per-op cost shows."""
    n = 1_000_000
    feed = b"put 0 0 60 1\r\nx\r\n" * BATCH
    want_last = inserted(n - BATCH + 1, BATCH)
    clock = time.perf_counter_ns

    def setup():
        return (Client(Core()),), {}

    def run(c):
        times = []
        for _ in range(n // BATCH):
            t0 = clock()
            c.send(feed)
            times.append(clock() - t0)
            last = c.take()
        return last, times, c.conn.is_closed   # not c: each round's core dies at the next setup

    last, times, closed = benchmark.pedantic(run, setup=setup, rounds=3)
    assert last == want_last and not closed
    tenth = len(times) // 10
    per_op = [sum(times[k:k + tenth]) / (tenth * BATCH) for k in range(0, len(times), tenth)]
    srt = sorted(times)
    benchmark.extra_info.update({
        "ns_per_put_by_decile": [round(x) for x in per_op],
        "feed_us_p50": srt[len(srt) // 2] / 1e3,
        "feed_us_p99": srt[len(srt) * 99 // 100] / 1e3,
        "feed_us_max": srt[-1] / 1e3,
    })
