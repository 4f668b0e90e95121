"""The test-only commands of --testing: fastbean-clock-advance moves the server's
time (delays, TTRs, DEADLINE_SOON, pauses, reserve timeouts and ages follow it,
with no sleeping) and fastbean-reset empties the server; without the flag both
are unknown commands, as they are to beanstalkd."""
import os
import signal
import time

import pytest

from tests.support.servers import BEANSTALKD, Server

pytestmark = pytest.mark.timeout(60)

HOUR = 3600


@pytest.fixture(scope="module")
def srv():
    s = Server("fastbean", "--testing").start()
    yield s
    s.stop()


@pytest.fixture
def c(srv):
    # each test starts from an empty server (which fastbean-reset must give)
    with srv.client() as r:
        assert r.cmd(b"fastbean-reset") == b"RESET"
    with srv.client() as client:
        yield client


def wait_stat(client, key, value, timeout=5.0):
    # another connection's command reaches the server in its own time
    deadline = time.monotonic() + timeout
    while client.stats()[key] != value:
        assert time.monotonic() < deadline, "%s never became %s" % (key, value)
        time.sleep(0.005)


def advance(client, seconds):
    reply = client.cmd(b"fastbean-clock-advance %s" % str(seconds).encode())
    assert reply.startswith(b"ADVANCED "), reply
    return int(reply.split()[1])


TEST_LINES = [b"fastbean-reset", b"fastbean-reset now", b"fastbean-clock-advance 5",
              b"fastbean-clock-advance", b"fastbean-clock-advance x"]


@pytest.mark.parametrize("kind", ["fastbean", "beanstalkd"])
def test_refused_without_the_flag(kind):
    if kind == "beanstalkd" and not os.path.exists(BEANSTALKD):
        pytest.fail("beanstalkd is required for this differential test")
    s = Server(kind).start()
    try:
        with s.client() as c:
            j = c.put(b"kept", delay=HOUR)
            for line in TEST_LINES:
                assert c.cmd(line) == b"UNKNOWN_COMMAND", line
            # nothing moved, nothing was deleted, the connection still works
            st = c.stats_job(j)
            assert st["state"] == "delayed" and st["time-left"] >= HOUR - 5
            assert c.stats()["current-jobs-delayed"] == 1
    finally:
        s.stop()


def test_bad_arguments_with_the_flag(c):
    # as with "put", the bare word without its argument is not the command
    assert c.cmd(b"fastbean-clock-advance") == b"UNKNOWN_COMMAND"
    for line in [b"fastbean-reset now", b"fastbean-clock-advance -1",
                 b"fastbean-clock-advance 1.", b"fastbean-clock-advance 1.0000000001",
                 b"fastbean-clock-advance 4294967296", b"fastbean-clock-advance 5 s"]:
        assert c.cmd(line) == b"BAD_FORMAT", line
    # the clock stops short of overflowing deadlines (about 73 years in all)
    assert c.cmd(b"fastbean-clock-advance 4294967295") == b"BAD_FORMAT"
    advance(c, 2_000_000_000)
    assert c.cmd(b"fastbean-clock-advance 400000000") == b"BAD_FORMAT"
    assert advance(c, 300_000_000) == 2_300_000_000 * 10**9
    assert c.cmd(b"list-tube-used") == b"USING default"


def test_delay_follows_the_clock(c):
    j = c.put(b"later", delay=HOUR)
    assert advance(c, HOUR - 1) == (HOUR - 1) * 10**9
    st = c.stats_job(j)
    assert st["state"] == "delayed" and st["time-left"] in (0, 1)
    assert c.cmd(b"reserve-with-timeout 0") == b"TIMED_OUT"
    # what came due has happened by the time the next command runs, even
    # one sent in the same write
    c.send(b"fastbean-clock-advance 1\r\nreserve-with-timeout 0\r\n")
    assert c.line() == b"ADVANCED %d" % (HOUR * 10**9)
    assert c.line() == b"RESERVED %d 5" % j and c.body(5) == b"later"


def test_advance_wakes_a_waiting_reserve_with_a_delayed_job(srv, c):
    with srv.client() as w:
        j = c.put(b"x", delay=600)
        w.send(b"reserve\r\n")
        wait_stat(c, "current-waiting", 1)
        advance(c, 600)
        assert w.line() == b"RESERVED %d 1" % j and w.body(1) == b"x"


def test_ttr_follows_the_clock(srv, c):
    with srv.client() as w:
        j = c.put(b"work", ttr=30)
        assert w.job(b"reserve") == (j, b"work")
        advance(c, 29)
        st = c.stats_job(j)
        assert st["state"] == "reserved" and st["time-left"] in (0, 1)
        advance(c, 1)
        st = c.stats_job(j)
        assert st["state"] == "ready" and st["timeouts"] == 1
        assert c.stats()["job-timeouts"] == 1
        assert w.cmd(b"release %d 0 0" % j) == b"NOT_FOUND"     # no longer its job


def test_deadline_soon_follows_the_clock(srv, c):
    j = c.put(b"x", ttr=10)
    assert c.job(b"reserve") == (j, b"x")
    c.send(b"reserve-with-timeout 100\r\n")
    with srv.client() as o:
        wait_stat(o, "current-waiting", 1)
        advance(o, 8)
        assert o.stats()["current-waiting"] == 1            # not yet inside the last second
        advance(o, 1)
    assert c.line() == b"DEADLINE_SOON"
    # and at once for a new reserve while inside the margin
    assert c.cmd(b"reserve-with-timeout 100") == b"DEADLINE_SOON"
    assert c.cmd(b"touch %d" % j) == b"TOUCHED"


def test_reserve_timeout_follows_the_clock(srv, c):
    with srv.client() as w:
        w.send(b"reserve-with-timeout 60\r\n")
        wait_stat(c, "current-waiting", 1)
        advance(c, 59)
        assert c.stats()["current-waiting"] == 1
        advance(c, 1)
        assert w.line() == b"TIMED_OUT"
        assert c.stats()["current-waiting"] == 0


def test_pause_follows_the_clock(srv, c):
    with srv.client() as w:
        j = c.put(b"p")
        assert c.cmd(b"pause-tube default %d" % HOUR) == b"PAUSED"
        w.send(b"reserve\r\n")
        wait_stat(c, "current-waiting", 1)
        advance(c, HOUR - 10)
        st = c.yaml(b"stats-tube default")
        assert st["pause"] == HOUR and st["pause-time-left"] in (9, 10)
        assert st["current-waiting"] == 1
        advance(c, 10)
        assert w.line() == b"RESERVED %d 1" % j and w.body(1) == b"p"
        assert c.yaml(b"stats-tube default")["pause"] == 0


def test_ages_and_uptime_follow_the_clock(c):
    up = c.stats()["uptime"]
    j = c.put(b"old")
    advance(c, 7 * 86400)
    assert c.stats_job(j)["age"] >= 7 * 86400
    assert c.stats()["uptime"] >= up + 7 * 86400


def test_fractions_add_up(c):
    assert advance(c, "0.25") == 250_000_000
    assert advance(c, "0.75") == 10**9
    assert advance(c, 0) == 10**9


def test_reset_empties_the_server(srv, c):
    with srv.client() as other, srv.client() as waiter:
        other.use("jobs")
        ready = other.put(b"r")
        other.put(b"d", delay=HOUR)
        held = other.put(b"held")
        buried = other.put(b"b")
        assert other.cmd(b"reserve-job %d" % held).startswith(b"RESERVED")
        assert other.body(4) == b"held"
        assert other.cmd(b"reserve-job %d" % buried).startswith(b"RESERVED")
        other.body(1)
        assert other.cmd(b"bury %d 0" % buried) == b"BURIED"
        assert other.cmd(b"pause-tube jobs 600") == b"PAUSED"
        assert c.cmd(b"pause-tube default 600") == b"PAUSED"
        waiter.watch("elsewhere")
        waiter.send(b"reserve\r\n")
        wait_stat(c, "current-waiting", 1)
        mine = c.put(b"mine")
        assert c.job(b"reserve-job %d" % mine) == (mine, b"mine")
        advance(c, 10)
        st = c.stats()
        assert (st["current-jobs-ready"], st["current-jobs-reserved"], st["current-jobs-delayed"],
                st["current-jobs-buried"]) == (1, 2, 1, 1)
        os.kill(srv.pid, signal.SIGUSR1)                    # drain mode, too
        wait_stat(c, "draining", True)

        assert c.cmd(b"fastbean-reset") == b"RESET"
        with pytest.raises(ConnectionError):
            c.line()                                        # it closes the resetting connection
        for gone in (other, waiter):                        # and every other one
            with pytest.raises((ConnectionError, OSError)):
                gone.cmd(b"list-tube-used")
                gone.line()

    with srv.client() as fresh:
        st = fresh.stats()
        for key, value in st.items():
            if key.startswith(("cmd-", "current-jobs-", "job-timeouts", "total-jobs",
                               "current-producers", "current-workers", "current-waiting",
                               "binlog-records")):
                assert value == (1 if key == "cmd-stats" else 0), key      # this stats counts
        assert st["current-connections"] == 1 and st["total-connections"] == 1
        assert st["current-tubes"] == 1 and st["draining"] is False
        assert fresh.cmd(b"list-tubes") == b"OK 14" and fresh.body(14) == b"---\n- default\n"
        tube = fresh.yaml(b"stats-tube default")
        assert tube["pause"] == 0 and tube["total-jobs"] == 0 and tube["cmd-pause-tube"] == 0
        for j in (ready, held, buried, mine):
            assert fresh.cmd(b"peek %d" % j) == b"NOT_FOUND"
        assert advance(fresh, 0) == 0                       # the clock is back to real time
        j = fresh.put(b"new")                               # ids go on: none is reused
        assert j > mine
        assert fresh.job(b"reserve-with-timeout 0") == (j, b"new")


def test_reset_deletes_jobs_from_the_binlog(tmp_path):
    s = Server("fastbean", "--testing", "-b", tmp_path).start()
    try:
        with s.client() as c:
            c.put(b"a")
            c.put(b"b", delay=HOUR)
            c.put(b"kept until reset")
            assert c.cmd(b"fastbean-reset") == b"RESET"
    finally:
        assert s.stop() == 0
    s = Server("fastbean", "-b", tmp_path).start()
    try:
        with s.client() as c:
            st = c.stats()
            assert st["current-jobs-ready"] == 0 and st["current-jobs-delayed"] == 0
    finally:
        s.stop()
