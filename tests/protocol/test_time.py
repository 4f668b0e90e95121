"""Time-based behaviour with short real waits: delays, TTRs, DEADLINE_SOON,
reserve timeouts and pauses. Semantics only; no speed is asserted."""
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.timeout(120)


def wait_until(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in %s s" % timeout
        time.sleep(0.02)


def test_delayed_job_becomes_ready(server):
    with server.client() as c:
        j = c.put(b"later", delay=1)
        st = c.stats_job(j)
        assert st["state"] == "delayed" and st["delay"] == 1 and st["time-left"] in (0, 1)
        assert c.stats()["current-jobs-delayed"] == 1
        assert c.cmd(b"reserve-with-timeout 0") == b"TIMED_OUT"
        t0 = time.monotonic()
        assert c.job(b"reserve-with-timeout 5") == (j, b"later")
        assert time.monotonic() - t0 > 0.3          # it was not handed out early
        assert c.stats()["total-jobs"] == 1


def test_ttr_expiry_returns_the_job(server):
    with server.client() as c, server.client() as w:
        j = c.put(b"work", ttr=1)
        assert w.job(b"reserve") == (j, b"work")
        time.sleep(1.2)
        # beanstalkd can miss this expiry until the owner speaks again
        # (reference notes §3.9); the poke is harmless to fastbean, and
        # test_ttr_expiry_is_never_lost checks fastbean without it.
        w.cmd(b"list-tube-used")
        wait_until(lambda: c.stats_job(j)["state"] == "ready", timeout=4)
        st = c.stats_job(j)
        assert st["timeouts"] == 1 and st["reserves"] == 1
        assert c.stats()["job-timeouts"] == 1
        assert w.cmd(b"release %d 0 0" % j) == b"NOT_FOUND"     # no longer its job


def test_deadline_soon(server):
    with server.client() as c:
        j = c.put(b"x", ttr=2)
        k = c.put(b"y", ttr=100)
        assert c.job(b"reserve") == (j, b"x")
        # a ready job exists: reserve proceeds
        assert c.job(b"reserve") == (k, b"y")
        time.sleep(1.1)
        # inside the 1 s margin and nothing ready: DEADLINE_SOON at once
        assert c.cmd(b"reserve-with-timeout 5") == b"DEADLINE_SOON"
        assert c.stats_job(j)["state"] == "reserved"
        assert c.cmd(b"release %d 0 0" % j) == b"RELEASED"


def test_waiting_reserve_is_woken_with_deadline_soon(server):
    with server.client() as c:
        j = c.put(b"x", ttr=3)
        assert c.job(b"reserve") == (j, b"x")
        t0 = time.monotonic()
        assert c.cmd(b"reserve") == b"DEADLINE_SOON"
        assert 1.0 < time.monotonic() - t0 < 3.0


def test_reserve_with_timeout(server):
    with server.client() as c, server.client() as other:
        other.watch("default")
        assert c.cmd(b"reserve-with-timeout 0") == b"TIMED_OUT"
        t0 = time.monotonic()
        assert c.cmd(b"reserve-with-timeout 1") == b"TIMED_OUT"
        assert time.monotonic() - t0 >= 0.9


def test_put_wakes_a_reserve_on_another_connection(server):
    with server.client() as w, server.client() as p:
        w.send(b"reserve\r\n")
        time.sleep(0.2)
        assert p.stats()["current-waiting"] == 1
        j = p.put(b"hi")
        assert w.line() == b"RESERVED %d 2" % j and w.body(2) == b"hi"


def test_pause_tube(server):
    with server.client() as c, server.client() as w:
        c.cmd(b"pause-tube default 1", b"PAUSED")
        j = c.put(b"p")
        assert w.cmd(b"reserve-with-timeout 0") == b"TIMED_OUT"
        st = c.yaml(b"stats-tube default")
        assert st["pause"] == 1 and st["cmd-pause-tube"] == 1
        t0 = time.monotonic()
        assert w.job(b"reserve-with-timeout 5") == (j, b"p")
        assert time.monotonic() - t0 > 0.3
        assert c.yaml(b"stats-tube default")["pause"] == 0


def test_unpause_serves_a_blocked_reserve(server):
    with server.client() as c, server.client() as w:
        c.cmd(b"pause-tube default 86400", b"PAUSED")
        j = c.put(b"p")
        w.send(b"reserve\r\n")
        time.sleep(0.2)
        c.cmd(b"pause-tube default 0", b"PAUSED")
        assert w.line() == b"RESERVED %d 1" % j and w.body(1) == b"p"


@pytest.mark.parametrize("how", [b"quit\r\n", None])
def test_closing_releases_reserved_jobs_at_once(server, how):
    with server.client() as c:
        j = c.put(b"r", ttr=100)
        w = server.client()
        assert w.job(b"reserve") == (j, b"r")
        if how:
            w.send(how)
        w.close()
        with server.client() as w2:
            assert w2.job(b"reserve-with-timeout 2") == (j, b"r")


def test_half_close_times_out_a_blocked_reserve(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(b"reserve\r\n")
    time.sleep(0.2)
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(100)
        if not chunk:
            break
        data += chunk
    assert data == b"TIMED_OUT\r\n"
    s.close()


def test_ttr_expiry_is_never_lost(fastbean_server):
    # beanstalkd 1.12 sometimes misses a TTR expiry when its timer fires
    # exactly at the deadline while another client keeps it busy (reference
    # notes §3.9); fastbean must not.
    stop = threading.Event()

    def poll():
        with fastbean_server.client() as p:
            while not stop.is_set():
                p.stats()
                time.sleep(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        with fastbean_server.client() as c, fastbean_server.client() as w:
            j = c.put(b"x", ttr=1)
            for round in range(5):
                assert w.job(b"reserve-job %d" % j) == (j, b"x")
                deadline = time.monotonic() + 2.5
                while c.stats_job(j)["state"] != "ready":
                    assert time.monotonic() < deadline, "TTR expiry lost in round %d" % round
                    time.sleep(0.02)
            assert c.stats_job(j)["timeouts"] == 5
    finally:
        stop.set()
        poller.join()
