"""--busy-poll: the loop polls after reads while clients answer quickly, and sleeps otherwise."""
import subprocess
import threading
import time

import pytest

from tests.servers import Server, fastbean_cmd

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
        assert 0 < stats["busy-poll-window-us"] <= 5000
        assert stats["busy-poll-idle-seconds"] > 0
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


def test_busy_poll_zero_never_polls():
    server = Server("fastbean", "--busy-poll", "0").start()
    try:
        stats = ping_pong(server, 500)
        assert stats["busy-poll-max-us"] == 0
        assert stats["busy-poll-window-us"] == 0
        assert stats["busy-poll-idle-seconds"] == 0
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

