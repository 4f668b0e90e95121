"""Memory that follows the queue: the id table shrinks and pools go back once the
server is idle, jobs survive the resizes, and a steady queue never resizes.

Each test talks to a real server over a socket. Idleness is the engine's own
(no read for a second); the tests wait for its effects with generous deadlines
and look at them through fastbean-stats' job-table-buckets and /proc RSS,
never at how long they took."""
import os
import time

import pytest

from tests.support.servers import Server

TABLE_MIN = 4096            # the id table's smallest size (engine/table.pxi)
QUIET = 1.5                 # s between looks: longer than the engine's idle wait (1 s)
DEADLINE = 40.0


def put_many(c, n, body=b"x" * 100, batch=2000):
    """Put n jobs pipelined; return their ids."""
    ids = []
    while len(ids) < n:
        k = min(batch, n - len(ids))
        c.send(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body) for _ in range(k)))
        for _ in range(k):
            reply = c.line()
            assert reply.startswith(b"INSERTED "), reply
            ids.append(int(reply.split()[1]))
    return ids


def delete_many(c, ids, batch=2000):
    for i in range(0, len(ids), batch):
        part = ids[i:i + batch]
        c.send(b"".join(b"delete %d\r\n" % jid for jid in part))
        for _ in part:
            assert c.line() == b"DELETED"


def buckets(c):
    return c.yaml(b"fastbean-stats")["job-table-buckets"]


def wait_idle_until(c, done):
    """Look every QUIET seconds (each look is the only traffic) until done(c)."""
    deadline = time.monotonic() + DEADLINE
    while not done(c):
        assert time.monotonic() < deadline, "the idle server did not get there"
        time.sleep(QUIET)


def test_id_table_shrinks_when_idle(fastbean_server):
    with fastbean_server.client(60) as c:
        ids = put_many(c, 100_000)
        grown = buckets(c)
        assert grown >= 32768
        delete_many(c, ids)
        # removes alone shrink it only part of the way (a halving per
        # eighth of the table emptied); what is left is the idle tick's
        assert buckets(c) > TABLE_MIN
        wait_idle_until(c, lambda c: buckets(c) == TABLE_MIN)
        assert c.stats()["current-jobs-ready"] == 0


def test_jobs_survive_shrink_and_grow_cycles(fastbean_server):
    with fastbean_server.client(60) as c:
        kept = {}
        gone = []
        for cycle in range(2):
            ids = put_many(c, 60_000, body=b"cycle %d" % cycle)
            keep = ids[::97]
            kept.update((jid, b"cycle %d" % cycle) for jid in keep)
            drop = [jid for jid in ids if jid not in set(keep)]
            delete_many(c, drop)
            gone += drop
            big = buckets(c)
            wait_idle_until(c, lambda c, big=big: buckets(c) < big)
            wait_idle_until(c, lambda c: buckets(c) == TABLE_MIN)
            for jid, body in kept.items():
                assert c.peek(jid) == body
            for jid in gone[::101]:
                assert c.cmd(b"peek %d" % jid) == b"NOT_FOUND"
                assert c.cmd(b"delete %d" % jid) == b"NOT_FOUND"
            st = c.stats_job(keep[0])
            assert st["id"] == keep[0] and st["state"] == "ready"
        assert c.stats()["current-jobs-ready"] == len(kept)
        delete_many(c, list(kept))
        assert c.stats()["current-jobs-ready"] == 0


def test_steady_churn_does_not_resize(fastbean_server):
    with fastbean_server.client(60) as c:
        put_many(c, 50_000)
        before = buckets(c)
        for _ in range(20):
            new = put_many(c, 1000)
            c.send(b"reserve-with-timeout 0\r\n" * 1000)
            old = []
            for _ in range(1000):
                reply = c.line()
                assert reply.startswith(b"RESERVED "), reply
                old.append(int(reply.split()[1]))
                c.body(int(reply.split()[2]))
            delete_many(c, old)
            assert buckets(c) == before
            assert new
        # idle at a steady size: the table fits its jobs, nothing to give back
        time.sleep(QUIET * 2)
        assert buckets(c) == before
        assert c.stats()["current-jobs-ready"] == 50_000


@pytest.mark.skipif(bool(os.environ.get("FASTBEAN_SANITIZED")),
                    reason="under ASan (make asan) memory comes from ASan's allocator, "
                           "which keeps freed blocks in quarantine")
def test_rss_comes_back_after_a_drain():
    with Server("fastbean").start(30) as s:
        with s.client(60) as c:
            c.cmd(b"list-tube-used")
            time.sleep(QUIET * 2)
            empty = s.rss()
            ids = put_many(c, 200_000, body=b"y" * 200)
            assert s.rss() > empty + (40 << 20)        # the jobs really took memory
            delete_many(c, ids)
        # no traffic from here on: the server gives it back by itself
        deadline = time.monotonic() + DEADLINE
        while s.rss() > empty + (10 << 20):
            assert time.monotonic() < deadline, (s.rss() - empty) >> 20
            time.sleep(0.2)
