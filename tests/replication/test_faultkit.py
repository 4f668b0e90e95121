"""The fault toolkit itself (tests/support/faultkit): the disk shim fails and zeroes
what it should, the proxy cuts NATS off, the audit catches what it must."""
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.support.faultkit import Conn, DiskFaults, FastbeanProcess, NatsClient, NatsProxy, Watchdog, Workload
from tests.support.hanodes import Node, find_primary
from tests.support.natscluster import NatsCluster

WRITER = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
def step(what, fn):
    try:
        fn()
        print(what, "ok", flush=True)
    except OSError as e:
        print(what, e.strerror, flush=True)
step("pwrite-a", lambda: os.pwrite(fd, b"a" * 100, 0))
step("sync-1", lambda: os.fdatasync(fd))
step("pwrite-b", lambda: os.pwrite(fd, b"b" * 100, 100))
dup = os.dup(fd)
ro = os.open(path, os.O_RDONLY)
input()                                     # the test arms the sync fault
step("sync-2", lambda: os.fdatasync(ro))    # fails: the b's become zeros
step("pwrite-c", lambda: os.pwrite(dup, b"c" * 100, 200))
step("sync-3", lambda: os.fsync(fd))        # fails: fd's open file is told of sync-2's failure once
step("sync-3b", lambda: os.fsync(fd))
input()                                     # the test arms the write fault
step("pwrite-d", lambda: os.pwrite(fd, b"d" * 100, 300))
step("write-e", lambda: os.write(fd, b"e" * 10))
step("sync-4", lambda: os.fdatasync(fd))
other = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT, 0o644)
input()                                     # armed again: a file outside the directory is left alone
step("outside-write", lambda: os.pwrite(other, b"x" * 10, 0))
step("outside-sync", lambda: os.fdatasync(other))
"""


def test_disk_shim_fails_syncs_and_writes_and_zeroes_unsynced_bytes(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    disk = DiskFaults(tmp_path, data)
    target, outside = data / "f", tmp_path / "outside"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(outside)], env=disk.env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def lines(n):
        return [proc.stdout.readline().strip() for _ in range(n)]
    assert lines(3) == ["pwrite-a ok", "sync-1 ok", "pwrite-b ok"]
    disk.fail_sync()
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert lines(4) == ["sync-2 Input/output error", "pwrite-c ok", "sync-3 Input/output error", "sync-3b ok"]
    assert not disk.pending()
    assert target.read_bytes() == b"a" * 100 + b"\0" * 100 + b"c" * 100
    disk.fail_write(2)
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert lines(3) == ["pwrite-d Input/output error", "write-e Input/output error", "sync-4 ok"]
    assert target.read_bytes() == b"a" * 100 + b"\0" * 100 + b"c" * 100
    disk.fail_sync()
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert lines(2) == ["outside-write ok", "outside-sync ok"]
    assert disk.pending()
    proc.stdin.close()
    assert proc.wait(10) == 0
    events = disk.events()
    assert [e["what"] for e in events] == ["sync-eio", "write-eio", "write-eio"]
    assert events[0]["bytes"] == 100 and events[0]["path"] == str(target)


INFLIGHT = r"""
import os, sys, threading
path, trigger = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
ro = os.open(path, os.O_RDONLY)
FDATASYNC = "75 "                           # x86-64's syscall number, in /proc/.../syscall


def syncing(t):
    with open("/proc/self/task/%d/syscall" % t.native_id) as f:
        return f.read().startswith(FDATASYNC)


size = 32 << 20
while size <= 1 << 30:
    os.pwrite(fd, b"r" * size, 0)
    out = {}

    def run():
        try:
            os.fdatasync(fd)
            out["a"] = "ok"
        except OSError as e:
            out["a"] = e.strerror
    a = threading.Thread(target=run)
    a.start()
    while a.native_id is None or (a.is_alive() and not syncing(a)):
        pass
    if a.is_alive():
        with open(trigger + ".tmp", "w") as f:
            f.write("1\n")
        os.rename(trigger + ".tmp", trigger)
        try:
            os.fdatasync(ro)
            b = "ok"
        except OSError as e:
            b = e.strerror
        overlapped = a.is_alive() and syncing(a)
        a.join()
        if overlapped:
            print(size, b, out["a"], sep="|", flush=True)
            break
    a.join()
    size *= 2
else:
    print("no overlap", flush=True)
"""


def test_a_sync_in_flight_when_its_bytes_fail_fails_too(tmp_path):
    # Two fdatasyncs of one file at once (the binlog's two sync threads): when
    # the second fails and the shim zeroes the unsynced bytes, the first,
    # still writing those bytes back, must fail as well. Linux reports a
    # failed writeback to every fsync that waited on it; a shim that let the
    # first succeed would make the server acknowledge what it then zeroes.
    data = tmp_path / "data"
    data.mkdir()
    disk = DiskFaults(tmp_path, data)
    target = data / "f"
    p = subprocess.run([sys.executable, "-c", INFLIGHT, str(target), disk.sync_trigger], env=disk.env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    size, second, first = p.stdout.strip().split("|")
    assert (second, first) == ("Input/output error", "Input/output error"), p.stdout
    assert [e["what"] for e in disk.events()] == ["sync-eio"]
    with open(target, "rb") as f:
        assert f.read(65536) == b"\0" * 65536      # the first sync's bytes were zeroed


@pytest.fixture
def cluster(tmp_path):
    c = NatsCluster(tmp_path / "nats")
    yield c
    c.stop()


def test_nats_behind_proxies_learns_no_other_server(cluster):
    # no_advertise: a client given one proxy's URL knows no other way to NATS
    proxy = NatsProxy(cluster.servers[0].port)
    try:
        with NatsClient([proxy.url]) as nc:
            assert nc.nc.connected_url.port == proxy.port
            assert nc.nc.discovered_servers == []
            assert [s.uri.port for s in nc.nc._server_pool] == [proxy.port]
            assert proxy.connections == 1
    finally:
        proxy.close()


def answers(nc, within):
    """NATS answers a JetStream request through nc within `within` s (retrying)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            nc.call(nc.js.account_info, timeout=2)
            return True
        except Exception:
            time.sleep(0.1)
    return False


def test_proxy_modes(cluster):
    proxy = NatsProxy(cluster.servers[0].port)
    try:
        with NatsClient([proxy.url]) as nc:
            assert answers(nc, 10)
            proxy.blackhole()           # the connection stays, nothing goes through
            assert not answers(nc, 2)
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5) as s:
                with pytest.raises(socket.timeout):
                    s.recv(100)         # accepted, but no INFO
            assert proxy.connections == 2 and nc.nc.stats["reconnects"] == 0
            proxy.restore()             # what waited goes through
            assert answers(nc, 10)
            proxy.drop()                # closed, and new connections too
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
                assert s.recv(100) == b""
            assert not answers(nc, 2)
            assert proxy.connections == 0
            proxy.restore()
            assert answers(nc, 10) and nc.nc.stats["reconnects"] >= 1
    finally:
        proxy.close()


def test_proxies_cut_a_node_off_nats(cluster, tmp_path):
    # A node that reaches NATS only through proxies loses its lease when they
    # blackhole, then when they drop: a node with direct URLs takes over.
    proxies = [NatsProxy(s.port) for s in cluster.servers]
    behind = ",".join(p.url for p in proxies)
    watchdog = Watchdog(restart=False)
    try:
        a = watchdog.watch(Node("a", behind, tmp_path, "--lease-ttl", "2"))
        assert find_primary([a]) is a
        b = watchdog.watch(Node("b", cluster.urls, tmp_path, "--lease-ttl", "2"))
        for cut in ("blackhole", "drop"):
            for p in proxies:
                getattr(p, cut)()
            assert find_primary([b], timeout=30) is b       # a could not renew its lease
            with Conn(b.port) as c:
                reply = c.put(cut.encode())
                assert reply.startswith(b"INSERTED "), reply
                jid = int(reply.split()[1])
            for p in proxies:
                p.restore()
            # through the restored proxies a fresh node follows the stream and takes over
            watchdog.stop(a)
            watchdog.start(a)
            watchdog.kill(b)
            assert find_primary([a], timeout=60) is a
            with Conn(a.port) as c:
                assert c.peek_many([jid]) == {jid: cut.encode()}
            watchdog.start(b)
        assert not watchdog.crashes(), watchdog.crashes()
    finally:
        watchdog.close()
        for p in proxies:
            p.close()


def test_audit_catches_lost_jobs_and_passes_an_intact_server(tmp_path):
    # The same load twice: through a server that keeps everything, the audit
    # passes; through one restarted without a binlog, it reports every job lost.
    watchdog = Watchdog(restart=False)
    try:
        server = watchdog.watch(FastbeanProcess("lone", tmp_path))
        work = Workload(server, producers=2, deleters=1, readers=1, seed=1).start()
        work.wait_for(puts=300, deletes=50)
        deadline = time.monotonic() + 60      # the reader has something to check too
        while not work.reads and time.monotonic() < deadline:
            time.sleep(0.02)
        work.stop()
        audit = work.audit(watchdog=watchdog).assert_ok()
        assert audit.counts["acked_puts"] >= 300 and audit.counts["reads"] > 0
        with Conn(server.port) as c:     # one job with a body no client sent
            assert c.put(b"stray").startswith(b"INSERTED ")
        failures = work.audit().failures
        assert len(failures) == 1 and "1 jobs no put made" in failures[0], failures
        watchdog.kill(server)
        watchdog.start(server)
        audit = work.audit(watchdog=watchdog)
        assert any(f.startswith("lost %d acknowledged jobs" % (audit.counts["acked_puts"]
                                                                - audit.counts["deleted"]))
                   for f in audit.failures), audit
        assert any(f.startswith("ids went back") for f in audit.failures), audit
        os.kill(server.pid, 11)          # a crash the test did not cause
        server.proc.wait(10)
        time.sleep(0.3)
        assert any("signal 11" in c for c in watchdog.crashes()), watchdog.crashes()
    finally:
        watchdog.close()


def test_a_nats_cluster_starts_though_a_port_is_taken_meanwhile(tmp_path, monkeypatch):
    # free_port() hands out a port that is free when it looks; another process
    # may bind it before nats-server does. The cluster starts again on other
    # ports, and leaves no server of the failed start behind.
    from tests.support import natscluster
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    # client ports first, then route ports: n2 listens for clients, then
    # finds its route port taken and exits, after n0 and n1 have started
    ports = iter([None] * 5 + [taken.getsockname()[1]])
    real = natscluster.free_port
    monkeypatch.setattr(natscluster, "free_port", lambda: next(ports, None) or real())
    store = tmp_path / "nats"
    try:
        cluster = NatsCluster(store)
    finally:
        taken.close()
    try:
        assert all(s.running for s in cluster.servers)
        running = subprocess.run(["pgrep", "-f", str(store)], capture_output=True, text=True).stdout.split()
        assert len(running) == 3, running
    finally:
        cluster.stop()
