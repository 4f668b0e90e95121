"""High availability on NATS JetStream: real nats-server clusters and fastbean
nodes on loopback, primaries killed and paused, NATS servers killed."""
import os
import random
import signal
import subprocess
import threading
import time

import pytest

from tests.support.hanodes import Haproxy, Node, find_primary
from tests.support.natscluster import NatsCluster
from tests.support.servers import Server, client, fastbean_cmd, parse_dict

# `make ha-soak` sets this to 50.
KILLS = int(os.environ.get("FASTBEAN_HA_KILLS", "3"))
TTL = "2"               # a short lease: takeovers within a few seconds


@pytest.fixture
def cluster(tmp_path):
    c = NatsCluster(tmp_path / "nats")
    yield c
    c.stop()


@pytest.fixture
def nodes(tmp_path):
    started = []
    yield started
    for n in started:
        n.stop()


def total_jobs(client):
    stats = client.stats()
    return sum(stats["current-jobs-" + s] for s in ("ready", "delayed", "buried", "reserved"))


def job_info(client, ids):
    """{id: (tube, pri, state, body)} for each id that exists (pipelined)."""
    ids = list(ids)
    client.send(b"".join(b"stats-job %d\r\npeek %d\r\n" % (i, i) for i in ids))
    out = {}
    for i in ids:
        reply = client.line()
        if reply == b"NOT_FOUND":
            assert client.line() == b"NOT_FOUND"
            continue
        assert reply.startswith(b"OK "), reply
        fields = parse_dict(client.body(int(reply.split()[1])))
        found = client.line()
        assert found.startswith(b"FOUND %d " % i), found
        body = client.body(int(found.split()[2]))
        out[i] = (fields["tube"], fields["pri"], fields["state"], body)
    return out


class Workload:
    """Producers on the primary: put (some delayed), delete and bury, remembering
    every acknowledged change and every change whose answer never came."""

    def __init__(self, nodes, threads=4):
        self.nodes = nodes
        self.lock = threading.Lock()
        self.live = {}          # id -> (tube, pri, state, body) as acknowledged
        self.deleted = set()    # acknowledged deletes
        self.unsure = set()     # a delete or bury sent, no answer: state unknown
        self.unsure_puts = 0    # puts sent with no answer
        self.errors = []
        self.drops = 0          # connections that closed under a producer
        self.max_id = 0
        self.threads = threads
        self._stop = threading.Event()
        self._running = []

    def start(self):
        self._stop.clear()
        self._running = [threading.Thread(target=self._produce, args=(k,), daemon=True)
                         for k in range(self.threads)]
        for t in self._running:
            t.start()

    def stop(self):
        self._stop.set()
        for t in self._running:
            t.join(60)
            assert not t.is_alive()

    def _produce(self, k):
        rng = random.Random(k * 7919 + len(self.live))
        while not self._stop.is_set():
            try:
                node = find_primary(self.nodes, timeout=60)
            except AssertionError:
                continue
            try:
                with node.client(30) as c:
                    self._session(c, k, rng)
            except (OSError, ConnectionError):
                self.drops += 1
                time.sleep(0.02)

    def _session(self, c, k, rng):
        tube = "t%d" % k
        c.use(tube)
        mine = []
        last = 0
        while not self._stop.is_set():
            op = rng.random()
            if op < 0.6 or not mine:
                pri = rng.randrange(0, 2 ** 32)
                delay = rng.choice((0, 0, 0, 3600))
                body = os.urandom(rng.randrange(1, 300)).hex().encode()
                line = b"put %d %d 120 %d\r\n%s" % (pri, delay, len(body), body)
                with self.lock:
                    self.unsure_puts += 1
                reply = c.cmd(line)
                if not reply.startswith(b"INSERTED "):
                    self.errors.append(reply)
                    continue
                jid = int(reply.split()[1])
                assert jid > last
                last = jid
                with self.lock:
                    self.unsure_puts -= 1
                    self.live[jid] = (tube, pri, "delayed" if delay else "ready", body)
                    self.max_id = max(self.max_id, jid)
                mine.append(jid)
            elif op < 0.85:
                jid = mine.pop(rng.randrange(len(mine)))
                with self.lock:
                    self.unsure.add(jid)
                reply = c.cmd(b"delete %d" % jid)
                if reply != b"DELETED":
                    self.errors.append(reply)
                    continue
                with self.lock:
                    self.unsure.discard(jid)
                    del self.live[jid]
                    self.deleted.add(jid)
            else:
                jid = rng.choice(mine)
                if self.live[jid][2] != "ready":
                    continue
                r = c.cmd(b"reserve-job %d" % jid)
                if not r.startswith(b"RESERVED "):
                    self.errors.append(r)
                    continue
                c.body(int(r.split()[2]))
                pri = rng.randrange(0, 2 ** 32)
                with self.lock:
                    self.unsure.add(jid)
                reply = c.cmd(b"bury %d %d" % (jid, pri))
                if reply != b"BURIED":
                    self.errors.append(reply)
                    continue
                with self.lock:
                    self.unsure.discard(jid)
                    tube_, _, _, body = self.live[jid]
                    self.live[jid] = (tube_, pri, "buried", body)
                mine.remove(jid)

    def verify(self, node, since):
        """Every acknowledged change is on `node`; jobs with no answer are there
        at most once. Returns the id a new put got there."""
        with node.client(30) as c:
            with self.lock:
                live, deleted, unsure = dict(self.live), set(self.deleted), set(self.unsure)
            found = job_info(c, live)
            for jid, want in live.items():
                if jid in unsure:
                    continue
                assert found.get(jid) == want, (jid, found.get(jid), want)
            assert not job_info(c, deleted), "deleted jobs came back"
            probe = c.put(b"probe")
            assert probe > self.max_id, "ids went back: %d after %d" % (probe, self.max_id)
            c.cmd(b"delete %d" % probe, b"DELETED")
            # jobs the producers never heard about: at most the puts with no answer
            others = job_info(c, (i for i in range(since + 1, probe)
                                  if i not in live and i not in deleted))
            assert len(others) <= self.unsure_puts, (others.keys(), self.unsure_puts)
            total = total_jobs(c)
            unsure_found = job_info(c, unsure)
            assert total == len(found) + len(others) + len(set(unsure_found) - set(found))
        with self.lock:     # what the server says settles the doubtful ones
            for jid in unsure:
                if jid in unsure_found:
                    self.live[jid] = unsure_found[jid]
                else:
                    self.live.pop(jid, None)
                    self.deleted.add(jid)
            self.live.update(others)
            self.unsure.clear()
            self.unsure_puts = 0
            self.max_id = probe
        return probe


def test_kill_primary_loses_no_acknowledged_job(cluster, nodes, tmp_path):
    for name in ("a", "b", "c"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    work = Workload(nodes)
    since = 0
    rng = random.Random(5)
    counts = []
    for _kill in range(KILLS):
        work.start()
        time.sleep(rng.uniform(0.5, 1.5))
        before = len(work.live) + len(work.deleted)
        primary.kill()
        t0 = time.monotonic()
        new = find_primary(nodes, exclude=(primary,))
        failover = time.monotonic() - t0
        work.stop()
        assert not work.errors, work.errors[:5]
        since = work.verify(new, since)
        counts.append((before, len(work.live), len(work.deleted), round(failover, 2)))
        primary.start()             # back as a standby
        primary = new
    print("\nkills: %d; acknowledged jobs live %d, deleted %d; (acked before kill, live, deleted, "
          "failover s) per kill: %s" % (KILLS, len(work.live), len(work.deleted), counts))
    assert len(work.live) + len(work.deleted) > 100 * KILLS


def test_puts_from_many_clients_are_published_in_a_window(cluster, nodes, tmp_path):
    # Several messages in flight at once (replication/publisher.py), each
    # client answered once its own records are stored; the standby applies
    # them in order and, after a kill -9, serves every acknowledged job.
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    standby = next(n for n in nodes if n is not primary)
    acked = {}
    lock = threading.Lock()

    def produce(k):
        with primary.client(30) as c:
            c.use("w")
            for batch in range(20):
                bodies = [b"%d-%d-%d" % (k, batch, n) for n in range(16)]
                c.send(b"".join(b"put 0 0 120 %d\r\n%s\r\n" % (len(b), b) for b in bodies))
                for body in bodies:
                    reply = c.line()
                    assert reply.startswith(b"INSERTED "), reply
                    with lock:
                        acked[int(reply.split()[1])] = body

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(acked) == 8 * 20 * 16
    stats = primary.ext_stats()
    assert 2 <= stats["replication-most-in-flight"] <= 8, stats
    mine = primary.metrics()
    assert mine["fastbean_replication_primary"] == 1 and mine["fastbean_replication_in_flight"] == 0
    assert mine["fastbean_replication_stream_sequence"] == stats["replication-stream-seq"]
    assert mine["fastbean_replication_publishes_total"] == stats["replication-publishes"]
    assert mine["fastbean_replication_takeovers_total"] == 1
    # the standby applies every message (it follows them as they are stored)
    deadline = time.monotonic() + 30
    while (theirs := standby.metrics())["fastbean_replication_stream_sequence"] < stats["replication-stream-seq"]:
        assert time.monotonic() < deadline, theirs
        time.sleep(0.05)
    assert theirs["fastbean_replication_stream_sequence"] == stats["replication-stream-seq"]
    assert theirs["fastbean_replication_primary"] == 0 and theirs["fastbean_replication_publishes_total"] == 0
    assert theirs["fastbean_replication_pending_messages"] == 0 == theirs["fastbean_replication_lag_seconds"]
    primary.kill()
    assert find_primary([standby]) is standby
    with standby.client(30) as c:
        found = job_info(c, sorted(acked))
    assert {i: info[3] for i, info in found.items()} == acked
    assert all(info[0] == "w" and info[2] == "ready" for info in found.values())


def test_paused_primary_is_fenced(cluster, nodes, tmp_path):
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    old = find_primary(nodes)
    with old.client() as c:
        kept = c.put(b"before the pause")
        gone = c.put(b"deleted after the takeover")
    busy = old.client()     # will send a put after the takeover
    idle = old.client()     # sends nothing: it must be disconnected too
    reader = old.client()   # asks for a job the new primary deleted
    busy.use("paused")
    old.signal(signal.SIGSTOP)
    try:
        new = find_primary(nodes, exclude=(old,))
        with new.client() as c:
            assert c.peek(kept) == b"before the pause"
            c.cmd(b"delete %d" % gone, b"DELETED")
            c.put(b"after the takeover")
            jobs = total_jobs(c)
        # read while it is paused: when it runs again, its lease is long over,
        # and it must not answer from its stale queue (FOUND) before it notices
        reader.send(b"peek %d\r\n" % gone)
        time.sleep(0.2)
    finally:
        old.signal(signal.SIGCONT)
    reader.sock.settimeout(20)
    with pytest.raises((ConnectionError, OSError)):
        reader.line()
    with pytest.raises((ConnectionError, OSError)):
        # the deposed primary's publish fails: no INSERTED, the connection closes
        busy.cmd(b"put 0 0 60 3\r\nold")
    idle.sock.settimeout(20)
    with pytest.raises((ConnectionError, OSError)):
        idle.line()
    deadline = time.monotonic() + 20
    while old.is_primary():
        assert time.monotonic() < deadline, "the deposed primary still takes clients"
        time.sleep(0.1)
    with new.client() as c:
        assert total_jobs(c) == jobs
        assert c.stats_job(kept)["state"] == "ready"
    # it stopped answering when its lease ran out, then found another node
    # holding it and rebuilt its queue from the stream
    deadline = time.monotonic() + 30
    while "rebuilding the queue from the stream" not in old.log[-4000:]:
        assert time.monotonic() < deadline, old.log[-4000:]
        time.sleep(0.1)
    assert "stops serving: its lease was not renewed in time" in old.log[-4000:]


def stream_info(cluster, name):
    """(stream leader's server name, stream state) of a JetStream stream."""
    import asyncio

    import nats

    async def ask():
        nc = await nats.connect(servers=[s.url for s in cluster.servers if s.running])
        try:
            info = await nc.jetstream().stream_info(name)
            return info.cluster.leader, info.state
        finally:
            await nc.close()
    return asyncio.run(ask())


def append_foreign(cluster, part, body=b"", **headers):
    """Append a message to the stream as another writer would."""
    import asyncio

    import nats

    async def publish():
        nc = await nats.connect(servers=cluster.urls.split(","))
        try:
            await nc.jetstream().publish("fastbean.records", body, headers={"Fb-Part": str(part), **headers})
        finally:
            await nc.close()
    asyncio.run(publish())


def test_fenced_by_another_writer(cluster, nodes, tmp_path):
    # A publish expects the stream to end where the primary left it: once
    # anyone else appended, the primary answers nothing more, drops its
    # clients and rebuilds its queue from the stream (then, still holding the
    # lease, takes over again).
    nodes.append(Node("a", cluster.urls, tmp_path, "--lease-ttl", "30"))
    primary = find_primary(nodes)
    with primary.client() as c:
        kept = c.put(b"kept")
        part = primary.ext_stats()["replication-part"]
        append_foreign(cluster, part)
        with pytest.raises((ConnectionError, OSError)):
            c.cmd(b"put 0 0 60 4\r\nlost")
    find_primary(nodes)
    with primary.client() as c:
        assert c.peek(kept) == b"kept"
        assert total_jobs(c) == 1
    stats = primary.ext_stats()
    assert stats["replication-resyncs"] == 1 and stats["replication-takeovers"] == 2
    assert "another node appended to the stream" in primary.log[-4000:]


def test_a_deposed_writers_late_message_is_skipped(cluster, nodes, tmp_path):
    # A message that does not follow the chain's last one (a deposed
    # primary's, stored late: publisher.py) is an orphan: the primary goes on
    # past it, the standby skips it, and after a takeover the queue is what
    # the clients were told.
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    standby = next(n for n in nodes if n is not primary)
    with primary.client() as c:
        before = [c.put(b"before-%d" % i) for i in range(20)]
        part = primary.ext_stats()["replication-part"]
        append_foreign(cluster, part, b"not records", **{"Fb-After": "a-message-not-in-the-chain"})
        after = [c.put(b"after-%d" % i) for i in range(20)]
        c.delete(before[0])
    stats = primary.ext_stats()
    assert stats["replication-takeovers"] == 1 and stats["replication-resyncs"] == 0, stats
    assert "does not follow the last one applied" in standby.log[-20000:]
    assert standby.metrics()["fastbean_replication_orphans_total"] == 1
    primary.kill()
    assert find_primary([standby]) is standby
    with standby.client(30) as c:
        found = job_info(c, range(1, max(after) + 10))
    assert {i: info[3] for i, info in found.items()} == {
        **{i: b"before-%d" % k for k, i in enumerate(before) if k}, **{i: b"after-%d" % k for k, i in enumerate(after)}}


class Timed(Workload):
    """The workload, timing each command that changes something."""

    def __init__(self, nodes, threads=2):
        super().__init__(nodes, threads)
        self.slowest = 0.0

    def _session(self, c, k, rng):
        cmd = c.cmd

        def timed(line, expect=None):
            t0 = time.monotonic()
            try:
                return cmd(line, expect)
            finally:
                self.slowest = max(self.slowest, time.monotonic() - t0)
        c.cmd = timed
        super()._session(c, k, rng)


def test_one_nats_server_lost(cluster, nodes, tmp_path):
    # The stream's leader, then the lease bucket's: JetStream elects new
    # leaders; puts wait meanwhile, nothing is lost, no client sees an error,
    # and the lease outlives the elections (no takeover).
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path))
    primary = find_primary(nodes)
    work = Timed(nodes)
    work.start()
    stalls = []
    for stream in ("fastbean", "KV_fastbean-lease"):
        time.sleep(1)
        victim = cluster.by_name(stream_info(cluster, stream)[0])
        work.slowest = 0.0
        victim.kill()
        time.sleep(10)
        stalls.append(round(work.slowest, 2))
        victim.start()
        time.sleep(2)
    work.stop()
    assert not work.errors, work.errors[:5]
    assert work.drops == 0, "clients were disconnected"
    assert primary.is_primary() and primary.ext_stats()["replication-takeovers"] == 1
    work.verify(primary, 0)
    print("\nlongest put while a NATS server was lost (stream leader, lease leader): %s s; "
          "%d jobs acknowledged" % (stalls, len(work.live) + len(work.deleted)))


def test_quorum_lost_and_back(cluster, nodes, tmp_path):
    # Two of three NATS servers gone: a change waits --replicate-timeout, then
    # the primary suspends. Its memory holds a change the stream may never
    # store, and any reply could reveal it (a peek's NOT_FOUND after a delete
    # with no answer), so it answers nothing: every client is disconnected,
    # new ones are closed at once, /readyz says 503. With the servers back,
    # its changes are stored and it serves again by itself.
    nodes.append(Node("a", cluster.urls, tmp_path, "--replicate-timeout", "3"))
    primary = find_primary(nodes)
    wait_readyz(primary, 200)
    with primary.client() as c:
        kept = c.put(b"kept")
        doomed = c.put(b"doomed")
    idle = primary.client(30)
    lost = [s for s in cluster.servers][:2]
    for s in lost:
        s.kill()
    with primary.client(30) as c:
        t0 = time.monotonic()
        with pytest.raises((ConnectionError, OSError)):
            c.cmd(b"delete %d" % doomed)        # no answer
        waited = time.monotonic() - t0
    assert waited >= 2.5
    with pytest.raises((ConnectionError, OSError)):
        idle.line()                             # disconnected too, with nothing said
    assert not primary.is_primary()             # a new connection is closed at once
    wait_readyz(primary, 503)
    for s in lost:
        s.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            with find_primary(nodes).client(30) as c:
                if c.cmd(b"put 0 0 60 4\r\nback").startswith(b"INSERTED"):
                    break
        except (ConnectionError, OSError):
            pass
        assert time.monotonic() < deadline, primary.log[-4000:]
        time.sleep(0.5)
    recovered = time.monotonic() - t0
    with primary.client() as c:
        assert c.peek(kept) == b"kept"
    stats = primary.ext_stats()
    assert stats["replication-suspensions"] >= 1 and stats["replication-takeovers"] == 1
    print("\nquorum lost: a delete waited %.1f s before the primary suspended; it served again "
          "%.1f s after the loss" % (waited, recovered))


def test_a_reply_waits_only_for_the_records_it_shows(cluster, nodes, tmp_path):
    # Issue 35, defect 5, with --replicate: while the stream cannot store a
    # change (two NATS servers of three gone), replies about another tube
    # are answered, and one that would show the change (a NOT_FOUND after
    # the delete) waits with the delete's own reply, which never comes: the
    # primary suspends and hangs up on both.
    nodes.append(Node("a", cluster.urls, tmp_path, "--replicate-timeout", "5"))
    primary = find_primary(nodes)
    wait_readyz(primary, 200)
    with primary.client() as c:
        c.use("other")
        c.put(b"kept")
        c.use("t")
        doomed = c.put(b"doomed")
    changer, shows, other = primary.client(30), primary.client(30), primary.client(30)
    other.use("other")
    for s in cluster.servers[:2]:
        s.kill()
    changer.send(b"delete %d\r\n" % doomed)
    for _ in range(20):         # by the last of these the delete has run
        assert other.stats_tube("other")["current-jobs-ready"] == 1
    assert other.job(b"peek-ready")[1] == b"kept"
    shows.send(b"peek %d\r\n" % doomed)
    for c in (changer, shows):
        with pytest.raises((ConnectionError, OSError)):
            c.line()
    for c in (changer, shows, other):
        c.close()


def wait_readyz(node, status, timeout=30.0):
    deadline = time.monotonic() + timeout
    while node.readyz() != status:
        assert time.monotonic() < deadline, "%s: /readyz is %s, not %s" % (
            node.name, node.readyz(), status)
        time.sleep(0.05)


def test_readyz_is_200_on_the_primary_only(cluster, nodes, tmp_path):
    # What a load balancer's HTTP check or a readiness probe looks at.
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    standby = next(n for n in nodes if n is not primary)
    wait_readyz(primary, 200)
    wait_readyz(standby, 503)
    primary.kill()
    assert find_primary(nodes, exclude=(primary,)) is standby
    wait_readyz(standby, 200)


def test_clients_through_haproxy_follow_the_primary(cluster, nodes, tmp_path):
    # contrib/haproxy/haproxy.cfg: an HTTP check of /readyz, which only the primary passes.
    for name in ("a", "b", "c"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    proxy = Haproxy(nodes, tmp_path)
    try:
        proxy.settle()
        first = proxy.put_until_accepted(b"one")
        worker = client(proxy.port, 30)
        worker.cmd(b"watch default")
        primary.kill()
        t0 = time.monotonic()
        with pytest.raises((ConnectionError, OSError)):
            worker.cmd(b"reserve")          # HAProxy closes the session to the dead node
        second = proxy.put_until_accepted(b"two")
        elapsed = time.monotonic() - t0
        assert second > first
        with client(proxy.port) as c:
            assert c.peek(first) == b"one" and c.peek(second) == b"two"
            # the proxy leads to the new primary
            assert c.cmd(b"delete %d" % first) == b"DELETED"
        assert find_primary(nodes, exclude=(primary,)).is_primary()
    finally:
        proxy.stop()
    print("\nkill -> first put accepted through HAProxy: %.2f s" % elapsed)


def test_stream_is_compacted_and_binlog_mirrors_it(cluster, nodes, tmp_path):
    # Small parts (-s): deleted jobs' parts are collected, live jobs re-logged
    # forward, and the stream purged below the oldest part still needed. A
    # standby that joins afterwards rebuilds the queue from what is left; the
    # -b directory of a killed primary is a binlog a lone server can start from.
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    nodes.append(Node("a", cluster.urls, tmp_path, "--lease-ttl", TTL, "-s", "20000",
                      "-b", mirror, "-f", "0"))
    primary = find_primary(nodes)
    kept = {}
    with primary.client() as c:
        for round_ in range(6):
            ids = [c.put(b"%d-%d" % (round_, i), pri=i) for i in range(500)]
            for i, jid in enumerate(ids):
                if i % 50:
                    c.cmd(b"delete %d" % jid, b"DELETED")
                else:
                    kept[jid] = b"%d-%d" % (round_, i)
        last = max(ids)
    state = stream_info(cluster, "fastbean")[1]
    assert state.first_seq > 1 and state.messages < state.last_seq / 4, state
    assert primary.ext_stats()["replication-part"] > 3
    nodes.append(Node("b", cluster.urls, tmp_path, "--lease-ttl", TTL))
    time.sleep(1)
    primary.kill()
    new = find_primary(nodes, exclude=(primary,))
    with new.client() as c:
        assert job_info(c, kept) == {j: ("default", int(b.split(b"-")[1]), "ready", b)
                                     for j, b in kept.items()}
        assert total_jobs(c) == len(kept)
        assert c.put(b"next") > last
    lone = Server("fastbean", "-b", mirror).start()
    try:
        with lone.client() as c:
            assert {j: c.peek(j) for j in kept} == kept and total_jobs(c) == len(kept)
            assert c.put(b"next") > last
    finally:
        lone.stop()


def test_a_flush_survives_a_failover(cluster, nodes, tmp_path):
    # flush-tube, flush-buried and delete-batch are delete records to the replication log:
    # the node that takes over has neither the flushed jobs nor lost others.
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    with primary.client() as c:
        c.use("gone")
        gone = [c.put(b"g%d" % i) for i in range(5000)]
        c.use("kept")
        c.watch("kept")
        kept = {c.put(b"k%d" % i, pri=i): b"k%d" % i for i in range(300)}
        buried = list(kept)[:30]
        for jid in buried:
            c.reserve_job(jid)
            c.cmd(b"bury %d 0" % jid, b"BURIED")
            del kept[jid]
        c.cmd(b"flush-tube gone", b"FLUSHED 5000")
        c.cmd(b"flush-buried kept", b"FLUSHED 30")
        batch = list(kept)[:10]
        assert c.delete_batch(batch) == (10, 0)
        for jid in batch:
            del kept[jid]
    primary.kill()                  # a reply waits for the quorum: nothing more to wait for
    new = find_primary(nodes, exclude=(primary,))
    with new.client() as c:
        assert job_info(c, gone + buried + batch) == {}
        assert job_info(c, kept) == {j: ("kept", int(b[1:]), "ready", b) for j, b in kept.items()}
        assert total_jobs(c) == len(kept)


def test_keys_and_retry_limits_survive_a_failover(cluster, nodes, tmp_path):
    # their records ride in the replication log as in a binlog: the node
    # that takes over answers keyed puts and applies limits as the old one did
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    with primary.client() as c:
        c.use("t")
        c.watch("t")
        live, _ = c.put_unique(b"live", "live", pri=9)
        gone, _ = c.put_unique(b"gone", "gone", cooldown=3600)
        c.delete(gone)
        assert c.retry_limit(2, "dead") == (2, "dead")
        tried = c.put(b"tried")
        c.reserve_job(tried)
        c.cmd(b"release %d 0 0" % tried, b"RELEASED")
        moved = c.put(b"moved")
        for _ in range(2):
            c.reserve_job(moved)
            c.cmd(b"release %d 0 0" % moved, b"RELEASED")
    primary.kill()
    new = find_primary(nodes, exclude=(primary,))
    with new.client() as c:
        c.use("t")
        assert c.put_unique(b"x", "live", pri=3) == (live, "ready")
        assert c.stats_job(live)["pri"] == 3
        assert c.cmd(b"put 0 0 60 1 idp:gone\r\nx") == b"INSERTED %d DELETED" % gone
        assert c.retry_limit() == (2, "dead")
        assert job_info(c, [moved])[moved][:3] == ("dead", 0, "ready")
        assert c.stats_job(tried)["releases"] == 1
        c.reserve_job(tried)
        c.cmd(b"release %d 0 0" % tried, b"RELEASED")
        assert c.stats_job(tried)["tube"] == "dead"


def test_moves_priorities_and_origins_survive_a_failover(cluster, nodes, tmp_path):
    # move-job and reprioritize-job ride in the replication log as in a
    # binlog, and so does a dead letter's origin: the node that takes over has
    # each job where, and as urgent as, the old primary had it
    for name in ("a", "b"):
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL))
    primary = find_primary(nodes)
    with primary.client() as c:
        c.use("t")
        ready, delayed, buried = c.put(b"r", pri=9), c.put(b"d", delay=3600), c.put(b"b")
        c.reserve_job(buried)
        c.cmd(b"bury %d 0" % buried, b"BURIED")
        keyed, _ = c.put_unique(b"k", "key", pri=0)
        for jid in (ready, delayed, buried, keyed):
            c.move_job(jid, "u")
        c.reprioritize_job(ready, 4)
        c.reprioritize_job(delayed, 5)
        c.reprioritize_job(buried, 6)
        assert c.retry_limit(1, "dead") == (1, "dead")
        dead = c.put(b"dead", pri=0)
        c.reserve_job(dead)
        c.cmd(b"release %d 0 0" % dead, b"RELEASED")
        assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 1
    primary.kill()
    new = find_primary(nodes, exclude=(primary,))
    with new.client() as c:
        assert job_info(c, [ready, delayed, buried, keyed, dead]) == {
            ready: ("u", 4, "ready", b"r"), delayed: ("u", 5, "delayed", b"d"),
            buried: ("u", 6, "buried", b"b"), keyed: ("u", 0, "ready", b"k"),
            dead: ("dead", 0, "ready", b"dead")}
        c.use("u")
        assert c.put_unique(b"again", "key") == (keyed, "ready")
        assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 1
        c.move_job(dead, "t")                           # the console's requeue
        assert c.yaml(b"fastbean-stats")["dead-letter-origins"] == 0


def test_replicated_binlog_directory_must_be_a_mirror(cluster, tmp_path):
    # A directory with a binlog of a lone server is not emptied by --replicate.
    lone = Server("fastbean", "-b", tmp_path).start()
    with lone.client() as c:
        c.put(b"precious")
    lone.stop()
    proc = subprocess.run(fastbean_cmd() + ["-p", "0", "-l", "127.0.0.1", "--replicate",
                                            cluster.urls, "-b", str(tmp_path)],
                          capture_output=True, timeout=30)
    assert proc.returncode == 10        # the binlog directory cannot be used, as beanstalkd's status says
    assert b"not a mirror of stream fastbean" in proc.stderr
    lone = Server("fastbean", "-b", tmp_path).start()
    with lone.client() as c:
        assert c.peek(1) == b"precious"
    lone.stop()


@pytest.mark.parametrize("args, message", [
    (["--replicate", ""], b"no NATS server URL"),
    (["--replicate", "http://127.0.0.1:4222"], b"not a nats:// URL"),
    (["--replicate", "nats://127.0.0.1:4222", "--lease-ttl", "0"], b"--lease-ttl: between"),
    (["--replicate", "nats://127.0.0.1:4222", "--replicate-timeout", "x"],
     b"invalid --replicate-timeout"),
    (["--replicate", "nats://127.0.0.1:4222", "--replicate-stream", "a.b"],
     b"letters, digits"),
    (["--node-name"], b"--node-name requires an argument"),
])
def test_replication_flags_are_checked(args, message):
    proc = subprocess.run(fastbean_cmd() + args, capture_output=True, timeout=30)
    assert proc.returncode == 5 and message in proc.stderr, proc.stderr


def test_kill_primary_fires_each_schedule_occurrence_once(cluster, nodes, tmp_path):
    # A schedule's records ride in the stream: the node that takes over goes
    # on from the last occurrence the stream holds. Audit on the final
    # primary's mirror: each job one occurrence, none twice, gaps only where
    # no node served (a takeover), fired once after it.
    from tests.protocol.test_schedules import by_name, fired_in_binlog, tube_jobs
    mirrors = {}
    for name in ("a", "b", "c"):
        mirrors[name] = tmp_path / ("mirror-" + name)
        mirrors[name].mkdir()
        nodes.append(Node(name, cluster.urls, tmp_path, "--lease-ttl", TTL, "-b", mirrors[name], "-f", "0"))
    primary = find_primary(nodes)
    with primary.client() as c:
        c.use("t")
        c.schedule("tick", b"tick", "every 1")
    rng = random.Random(38)
    kills = max(KILLS, 3)           # make ha-soak: FASTBEAN_HA_KILLS
    for _ in range(kills):
        time.sleep(rng.uniform(2.0, 4.0))
        primary.kill()
        new = find_primary(nodes, exclude=(primary,))
        primary.start()             # back as a standby
        primary = new
    time.sleep(2.5)
    with primary.client() as c:
        c.pause_schedule("tick")    # no occurrence after this audit's reads, while the nodes stop
        fires = by_name(c)["tick"]["fires"]
        jobs = tube_jobs(c, "t")
        ids = list(job_info(c, range(1, fires + 100)))
    final = primary.name
    for n in nodes:
        n.stop()
    fired = fired_in_binlog(str(mirrors[final]))
    occ = [t for _, t, _ in fired]
    assert len(set(occ)) == len(occ) and occ == sorted(occ), "an occurrence fired twice"
    assert sorted(ids) == sorted(j for _, _, j in fired)
    assert jobs == fires == len(fired)
    gaps = sum(1 for a, b in zip(occ, occ[1:]) if b - a > 10**9)
    assert gaps <= kills
    print("\ntakeover audit: %d takeovers, %d occurrences fired, %d jobs, %d gaps, 0 doubles, "
          "0 lost" % (kills, len(fired), jobs, gaps))
