"""--busy-poll: the loop polls after reads while clients answer quickly, and sleeps otherwise."""
import os
import subprocess
import sys
import threading
import time

import pytest

from fastbean.server import busypoll
from tests.support.servers import Server, fastbean_cmd

pytestmark = pytest.mark.timeout(60)


def ping_pong(server, n):
    with server.client() as c:
        for i in range(n):
            c.put(b"job %d" % i)
        return c.yaml(b"fastbean-stats")


def test_polls_for_quick_clients_then_sleeps():
    # 5 ms: far longer than a loopback round trip, so the window must open.
    server = Server("fastbean", "--busy-poll", "5000").start()
    try:
        stats = ping_pong(server, 2000)
        assert stats["busy-poll-max-us"] == 5000
        assert stats["busy-poll-idle-seconds"] > 0
        # still polling at the end, unless another process took turns on the
        # loop's core meanwhile (test_a_shared_core_pauses_the_polling)
        if stats["busy-poll-backoffs"] == 0:
            assert 0 < stats["busy-poll-window-us"] <= 5000
        # Once the client has gone, the server stops polling: a server that
        # kept spinning would burn about one CPU second per second here.
        time.sleep(0.2)
        before = server.cpu()
        time.sleep(1.0)
        assert server.cpu() - before < 0.3
        assert ping_pong(server, 0)["busy-poll-idle-seconds"] <= (
            stats["busy-poll-idle-seconds"] + 0.3)
    finally:
        assert server.stop() == 0


def run_delay_ns(pid):
    """How long the thread pid (a process's main thread) has waited to run, in ns."""
    with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
        return int(f.read().split()[1])


def test_a_shared_core_pauses_the_polling():
    # A process that wants the loop's core all the time (pinned beside it):
    # each microsecond of polling would be taken from it, so the poller,
    # which sees its thread wait to run, pauses. Once the core is free again
    # it polls again; pauses double while the core stays shared, up to 5.12 s.
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("this kernel has no schedstat: the poller cannot tell (docs/limits.md)")
    core = min(os.sched_getaffinity(0))
    server = Server("fastbean", "--busy-poll", "5000").start()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(server.pid, {core})     # the loop's thread (its tid is the pid)
        os.sched_setaffinity(hog.pid, {core})
        stats = ping_pong(server, 3000)
        assert stats["busy-poll-backoffs"] >= 1, stats
        hog.kill()
        hog.wait()
        # The poller polls again at the end of its pause (5.12 s at most)
        # once it finds the core its own. Other processes of the machine
        # may still share the core: count only the time the loop's thread
        # did not wait to run (its run delay, as the poller reads it) under
        # busypoll.SHARED of the time, and wait for 3 longest pauses of it.
        free_s, started = 0.0, time.monotonic()
        while True:
            t0, delay0 = time.monotonic(), run_delay_ns(server.pid)
            polling = ping_pong(server, 500)
            if polling["busy-poll-window-us"] > 0:
                break
            time.sleep(0.5)
            took = time.monotonic() - t0
            if run_delay_ns(server.pid) - delay0 <= busypoll.SHARED * took * 1e9:
                free_s += took
            assert free_s < 3 * busypoll.BACKOFF_MAX_NS / 1e9, ("no polling after %.1f s of a free core"
                                                                 % free_s, polling)
            assert time.monotonic() - started < 600, "the core was never free for long in 600 s"
    finally:
        hog.kill()
        hog.wait()
        assert server.stop() == 0


def test_busy_poll_zero_never_polls():
    server = Server("fastbean", "--busy-poll", "0").start()
    try:
        stats = ping_pong(server, 500)
        assert stats["busy-poll-max-us"] == 0
        assert stats["busy-poll-window-us"] == 0
        assert stats["busy-poll-idle-seconds"] == 0
        assert stats["busy-poll-backoffs"] == 0
    finally:
        assert server.stop() == 0


def test_default_is_100_microseconds():
    server = Server("fastbean").start()
    try:
        assert ping_pong(server, 10)["busy-poll-max-us"] == 100
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("value", ["-1", "abc", "1000001", ""])
def test_bad_values_are_usage_errors(value):
    p = subprocess.run(fastbean_cmd() + ["--busy-poll", value], capture_output=True, timeout=30)
    assert p.returncode == 5
    assert b"--busy-poll" in p.stderr


@pytest.mark.parametrize("poll", ["100", "0"])
def test_many_quick_clients_all_get_their_turns(poll):
    # Fair turns hold back a connection served in the last turn until the
    # turn ends: by the poller's callback while it polls, by a loop callback
    # of the engine's own otherwise. If either failed to end a turn, a
    # held-back client would never be answered and this would time out.
    server = Server("fastbean", "--busy-poll", poll).start()
    done = []
    try:
        def worker(k):
            with server.client() as c:
                ids = [c.put(b"w%d-%d" % (k, i)) for i in range(300)]
                done.append(len(set(ids)))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert done == [300] * 8
        with server.client() as c:
            assert c.yaml(b"stats")["current-jobs-ready"] == 2400
    finally:
        assert server.stop() == 0


def test_no_polling_while_replies_wait_for_the_disk(tmp_path, gated_fsync, monkeypatch):
    # With -f 0 a client hears nothing until its record is on disk, so after
    # its put there is nothing to poll for: the loop sleeps until the fsync
    # returns. Here each fsync takes 2 ms more and the window may reach 10 ms;
    # a poller that spun through the waits would report about 0.4 s of idle
    # polling for 200 puts.
    gated_fsync().unlink()                      # no gate: only the slow disk
    monkeypatch.setenv("FASTBEAN_TEST_GATE_DELAY_US", "2000")
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = Server("fastbean", "-b", binlog, "-f", "0", "--busy-poll", "10000").start()
    try:
        stats = ping_pong(server, 200)
        assert stats["busy-poll-window-us"] > 0     # the poller is at work between the waits
        assert stats["busy-poll-idle-seconds"] < 0.05, stats
    finally:
        server.stop()


class FakeDelay:
    """A run delay the test sets: the ns the loop's thread has waited so far."""

    def __init__(self):
        self.ns = 0

    def __bool__(self):
        return True

    def read(self):
        return self.ns


def test_backoff_needs_checks_in_a_row_doubles_and_starts_over():
    from fastbean.server import busypoll

    delay = FakeDelay()
    poller = busypoll.BusyPoll(loop=None, max_us=100, end_turn=None, run_delay=delay)
    ms = 1_000_000
    now = 1000 * ms
    assert not poller._shared(now)                   # the first look is a baseline

    def check(waited_ms):
        nonlocal now
        now += 10 * ms
        delay.ns += waited_ms * ms
        return poller._shared(now)

    assert not check(5)         # one check past the share is not enough...
    assert not check(1)         # ...and a quiet one in between starts the count over
    assert not check(5)
    assert check(5)             # two in a row: pause
    assert poller.backoffs == 1 and poller.window_ns == 0
    assert poller._backoff_until == now + 20 * ms
    pauses = []
    for _ in range(10):         # the core stays shared: each pause twice the last, up to 5.12 s
        now = poller._backoff_until
        assert not poller._shared(now)               # after a pause: a new baseline
        assert not check(5)
        assert check(5)
        pauses.append((poller._backoff_until - now) // ms)
    assert pauses == [40, 80, 160, 320, 640, 1280, 2560, 5120, 5120, 5120]
    now = poller._backoff_until
    poller._shared(now)
    assert not check(0)         # the core is the loop's again: the next pause is the first
    assert not check(5)
    assert check(5)
    assert poller._backoff_until == now + 20 * ms


def test_run_delay_reads_this_thread_or_nothing(tmp_path):
    from fastbean.server.busypoll import RunDelay

    mine = RunDelay()
    if os.path.exists("/proc/thread-self/schedstat"):
        assert mine and mine.read() >= 0
    missing = RunDelay(str(tmp_path / "no-such-file"))
    assert not missing
