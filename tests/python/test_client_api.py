"""fastbean.client's commands, blocking and asyncio, against real fastbean and
beanstalkd processes: every command and its errors, TLS with a client
certificate and a token, reconnecting, HA groups, and the pool's routing."""
import asyncio
import random
import signal
import socket
import threading
import time

import pytest

from fastbean.client import (
    ERROR_CLASSES,
    AsyncClient,
    AsyncPool,
    Backoff,
    BadFormat,
    Buried,
    Client,
    ConnectError,
    ConnectionLost,
    DeadlineSoon,
    Draining,
    JobTooBig,
    NoPrimary,
    NotAuthenticated,
    NotFound,
    NotIgnored,
    Pool,
    ServerError,
    TimedOut,
    UnknownCommand,
    node_key,
    owner,
    tls_context,
)
from tests.security.test_auth import tokens_file
from tests.security.test_tls import tls_server
from tests.support.certs import Pki
from tests.support.servers import HOST, Server

pytestmark = pytest.mark.timeout(120)

QUICK = Backoff(0.01, 2.0, 0.2)


class Synced:
    """An AsyncClient driven from a test's thread: each method runs to its end
    on a loop of its own, so one scenario checks both clients."""

    def __init__(self, client):
        self._client = client
        self._loop = asyncio.new_event_loop()

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if not callable(method):
            return method
        return lambda *a, **kw: self._loop.run_until_complete(method(*a, **kw))

    def close(self):
        self._loop.run_until_complete(self._client.close())
        self._loop.close()


def connect(kind, address, **kw):
    if kind == "blocking":
        return Client(address, **kw)
    return Synced(AsyncClient(address, **kw))


@pytest.fixture(scope="module", params=["fastbean", "beanstalkd"])
def node(request):
    s = Server(request.param, "-z", "100").start()
    yield s
    s.stop()


@pytest.fixture(params=["blocking", "async"])
def kind(request):
    return request.param


@pytest.fixture
def c(node, kind):
    client = connect(kind, node.address)
    yield client
    client.close()


def fresh(prefix="t"):
    return "%s%d" % (prefix, random.randrange(1 << 40))


def test_standard_commands(c, node):
    tube = fresh()
    assert c.list_tube_used() == "default"
    c.use(tube)
    assert c.list_tube_used() == tube
    jid = c.put(b"hello")
    assert c.stats_job(jid)["pri"] == 1024           # fastbean-ctl's default
    assert c.stats_job(jid)["tube"] == tube
    assert c.peek(jid) == b"hello"
    assert c.peek_ready() == (jid, b"hello")
    assert c.watch(tube) == 2
    assert c.ignore("default") == 1
    assert c.list_tubes_watched() == [tube]
    with pytest.raises(NotIgnored):
        c.ignore(tube)
    job = c.reserve()
    assert (job.id, job.body) == (jid, b"hello")
    c.touch(jid)
    c.release(jid, 5, 0)
    assert c.stats_job(jid)["pri"] == 5
    job = c.reserve_with_timeout(0)
    c.bury(job.id, 7)
    assert c.peek_buried().id == jid
    assert c.kick(10) == 1
    job = c.reserve(timeout=1)
    c.release(job.id, 1024, 3600)
    assert c.peek_delayed().id == jid
    c.kick_job(jid)
    assert c.reserve_job(jid).id == jid
    c.delete(jid)
    with pytest.raises(NotFound):
        c.delete(jid)
    with pytest.raises(NotFound):
        c.peek_ready()
    with pytest.raises(TimedOut):
        c.reserve(timeout=0)
    assert c.stats_tube(tube)["cmd-delete"] == 1
    assert tube in c.stats_tubes([tube, fresh("gone")])
    assert tube in c.list_tubes()
    assert c.stats()["pid"] == node.pid
    c.pause_tube(tube, 1)
    assert c.stats_tube(tube)["pause"] == 1
    with pytest.raises(JobTooBig):
        c.put(b"x" * 200)
    with pytest.raises(BadFormat):
        c.use("-bad")
    with pytest.raises(NotFound) as e:
        c.stats_job(1 << 60)
    assert isinstance(e.value, ServerError) and e.value.reply == b"NOT_FOUND"
    c.quit()


def test_deadline_soon(c):
    tube = fresh()
    c.use(tube)
    c.watch(tube)
    c.put(b"short", ttr=1)
    c.reserve()
    with pytest.raises(DeadlineSoon):
        c.reserve(timeout=5)


def test_draining(node, kind):
    node.signal(signal.SIGUSR1)
    try:
        client = connect(kind, node.address)
        deadline = time.monotonic() + 30
        while client.stats()["draining"] is not True:       # the signal is taken in its own time
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(Draining):
            client.put(b"refused")
        client.close()
    finally:
        node.stop()
        node.start()


def test_extensions(c, node):
    tube = fresh()
    c.use(tube)
    c.watch(tube)
    if node.kind == "beanstalkd":
        with pytest.raises(BadFormat):
            c.reserve_batch(2)
        with pytest.raises(UnknownCommand):
            c.flush_tube(tube)
        with pytest.raises(UnknownCommand):
            c.fastbean_stats()
        with pytest.raises(BadFormat):
            c.put_unique(b"x", "k")
        # beanstalkd then reads the body as a command: the client drops the connection
        with pytest.raises(ConnectionLost):
            c.stats()
        return
    with pytest.raises(ValueError, match="':'"):
        c.put_unique(b"x", "a:b")
    ids = [c.put(b"j%d" % k, pri=0) for k in range(4)]
    assert c.put_unique(b"u", "key", cooldown=60) [1] is None
    uid, state = c.put_unique(b"u2", "key")
    assert state == "ready"
    rows, cursor = c.list_tube("ready", "0", 2)
    assert [r[0] for r in rows] == ids[:2] and cursor != "0"
    assert [j.id for j in c.reserve_batch(2)] == ids[:2]
    assert c.delete_batch(ids[:2]) == (2, 0)
    assert c.delete_each([ids[2], 1 << 50]) == [1 << 50]
    assert c.delete_and_peek(ids[3], "ready") == (True, (uid, b"u"))
    assert c.retry_limit(3, "dead") == (3, "dead")
    assert c.retry_limit() == (3, "dead")
    assert c.retry_limit(default=True) == (0, None)
    job = c.reserve()
    c.bury(job.id)
    assert c.flush_buried(tube) == 1
    c.put(b"left")
    assert c.flush_tube(tube) == 1
    assert c.fastbean_stats()["cmd-flush-tube"] >= 1


def test_schedules(c, node):
    name = fresh("s")
    if node.kind == "beanstalkd":
        with pytest.raises(UnknownCommand):
            c.list_schedules()
        with pytest.raises(UnknownCommand):
            c.schedule(name, b"x", "every 60")
        # beanstalkd then reads the body as a command: the client drops the connection
        with pytest.raises(ConnectionLost):
            c.stats()
        return
    tube = fresh()
    c.use(tube)
    with pytest.raises(BadFormat):
        c.schedule(name, b"x", "every 0")
    assert c.schedule(name, b"x", "every 3600", pri=3, ttr=9) is True
    assert c.schedule(name, b"x", "every 3600", pri=3, ttr=9) is False
    mine = [s for s in c.list_schedules() if s["name"] == name]
    assert mine and mine[0]["tube"] == tube and mine[0]["pri"] == 3 and mine[0]["misfire"] == "fire"
    jid = c.fire_schedule(name)
    assert c.peek(jid) == b"x"
    c.pause_schedule(name)
    c.resume_schedule(name)
    c.unschedule(name)
    with pytest.raises(NotFound):
        c.unschedule(name)
    c.delete(jid)


def test_async_only_commands_reach_the_server(node):
    async def main():
        async with AsyncClient(node.address) as a:
            jid = await a.put(b"x")
            # another branch adds move-job and reprioritize-job to the server
            for call in (a.move_job(jid, "elsewhere"), a.reprioritize_job(jid, 3)):
                try:
                    await call
                except (UnknownCommand, BadFormat):
                    pass
            await a.delete(jid)
    asyncio.run(main())


def test_async_clients_share_one_connection_between_tasks(node):
    async def main():
        async with AsyncClient(node.address) as a:
            tube = fresh()
            await a.use(tube)
            ids = await asyncio.gather(*(a.put(b"%d" % k) for k in range(50)))
            assert sorted(ids) == sorted(set(ids))
            assert (await a.stats_tube(tube))["current-jobs-ready"] == 50
    asyncio.run(main())


@pytest.mark.parametrize("word", sorted(ERROR_CLASSES))
def test_every_error_reply_has_its_exception(word):
    from fastbean.client import _protocol as P
    reader = P.stats().read("here")
    next(reader)
    with pytest.raises(ERROR_CLASSES[word]) as e:
        reader.send(word)
    assert isinstance(e.value, ServerError) and e.value.reply == word
    assert type(e.value).__name__.upper() == word.decode().replace("_", "")


def test_put_on_buried_reply_names_the_job():
    from fastbean.client import _protocol as P
    reader = P.put(b"x", 0, 0, 60).read("here")
    assert next(reader) == P.LINE
    with pytest.raises(Buried) as e:
        reader.send(b"BURIED 42")
    assert e.value.id == 42 and isinstance(e.value, ServerError)


# -- TLS, client certificates and tokens

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def test_tls_with_client_certificate_and_token(pki, tmp_path, kind):
    token = "w-0123456789abcdef0123456789abcdef"
    s = tls_server(pki.server, "--auth-tokens", tokens_file(tmp_path / "tokens", {"w": token}),
                   ca=pki.ca.cert)
    try:
        ctx = tls_context(pki.ca.cert, *pki.client)
        client = connect(kind, (HOST, s.tls_port), tls=ctx, server_hostname="localhost", token=token)
        client.use("secure")
        assert client.stats_job(client.put(b"over tls"))["tube"] == "secure"
        client.close()
        with pytest.raises(NotAuthenticated):     # (the AsyncClient connects at its first command)
            connect(kind, (HOST, s.tls_port), tls=ctx, server_hostname="localhost", token="wrong").stats()
        with pytest.raises(ConnectionError):    # no client certificate: the handshake (or the next read) fails
            bad = connect(kind, (HOST, s.tls_port), tls=tls_context(pki.ca.cert),
                          server_hostname="localhost", token=token)
            bad.stats()
    finally:
        s.stop()


# -- reconnecting

def test_reconnect_restores_the_session_and_resends_only_what_is_safe(kind):
    with Server("fastbean") as s:
        s.start()
        client = connect(kind, s.address, reconnect=QUICK)
        client.use("used")
        client.watch("watched")
        client.ignore("default")
        client.put(b"before")
        s.stop()
        s.start()
        # idempotent: sent again on a new connection, whose tubes are restored
        assert client.list_tube_used() == "used"
        assert client.list_tubes_watched() == ["watched"]
        assert client.reconnects == 1
        s.stop()
        s.start()
        # a put's reply was lost: not sent again (it could run twice)...
        with pytest.raises(ConnectionLost):
            client.put(b"lost")
        # ...and the next command reconnects
        jid = client.put(b"after")
        assert client.stats_tube("used")["current-jobs-ready"] == 1
        assert client.peek(jid) == b"after"
        # a keyed put is safe to send again
        s.stop()
        s.start()
        assert client.put_unique(b"k", "once")[1] is None
        client.close()


def test_without_reconnect_a_lost_connection_stays_lost(kind):
    with Server("fastbean") as s:
        s.start()
        client = connect(kind, s.address)
        client.stats()
        s.stop()
        s.start()
        with pytest.raises(ConnectionLost):
            client.stats()
        client.close()


def test_reconnect_gives_up_after_its_tries(kind):
    with Server("fastbean") as s:
        s.start()
        client = connect(kind, s.address, reconnect=Backoff(0.01, 2, 0.05, tries=3))
        s.stop()
        with pytest.raises((ConnectError, ConnectionLost)):
            client.stats()
        with pytest.raises(ConnectError):
            client.stats()
        client.close()


# -- HA groups

class Standby:
    """A listener that accepts each connection and closes it at once, as an
    HA standby does."""

    def __init__(self):
        self.sock = socket.create_server((HOST, 0))
        self.sock.settimeout(0.05)      # so that close() is seen soon
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.close()

    def close(self):
        self.closed = True
        self.sock.close()
        self.thread.join(5)


def dead_address():
    s = socket.create_server((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return HOST, port


def test_ha_group_finds_the_primary(kind):
    standby = Standby()
    dead = dead_address()
    try:
        with Server("fastbean") as s:
            s.start()
            client = connect(kind, [dead, (HOST, standby.port), s.address])
            assert client.stats()["pid"] == s.pid
            assert client.where == "%s:%d" % s.address
            client.close()
        with pytest.raises(NoPrimary) as e:
            connect(kind, [dead, (HOST, standby.port)]).stats()
        message = str(e.value)
        assert "%s:%d could not connect" % dead in message
        assert "%s:%d closed the connection at once" % (HOST, standby.port) in message
        assert [w for w, _ in e.value.tried] == ["%s:%d" % dead, "%s:%d" % (HOST, standby.port)]
        assert isinstance(e.value, ConnectError)
    finally:
        standby.close()


def test_ha_group_names_a_node_that_does_not_answer(kind):
    silent = socket.create_server((HOST, 0))        # accepts (the kernel does), never answers
    standby = Standby()
    try:
        addresses = [silent.getsockname()[:2], (HOST, standby.port)]
        with pytest.raises(NoPrimary) as e:
            connect(kind, addresses, timeout=0.3).stats()
        assert e.value.tried == [("%s:%d" % addresses[0], "did not answer in time"),
                                 ("%s:%d" % addresses[1], "closed the connection at once (a standby, or "
                                  "not serving)")]
    finally:
        silent.close()
        standby.close()


def test_ha_group_fails_over_with_reconnect(kind):
    standby = Standby()
    try:
        with Server("fastbean") as first:
            first.start()
            client = connect(kind, [first.address, (HOST, standby.port)], reconnect=QUICK)
            client.use("kept")
            assert client.stats()["pid"] == first.pid
            first.stop()
            standby.close()         # the standby takes over, on its own address
            with Server("fastbean", port=standby.port) as second:
                second.start()
                assert client.stats()["pid"] == second.pid
                assert client.list_tube_used() == "kept"
            client.close()
    finally:
        standby.close()


# -- the pool

@pytest.fixture(scope="module")
def three():
    nodes = [Server("fastbean").start() for _ in range(3)]
    yield nodes
    for n in nodes:
        n.stop()


def test_pool_routes_each_tube_to_its_node(three):
    addresses = [n.address for n in three]
    tubes = [fresh("pool") for _ in range(30)]
    with Pool(addresses) as pool:
        for t in tubes:
            pool.put(t, t.encode())
        owners = {t: pool.node_of(t) for t in tubes}
        assert len(set(owners.values())) == 3           # 30 tubes land on every node
        for i, n in enumerate(three):
            with n.client() as direct:
                have = set(direct.list_tubes())
            assert {t for t in tubes if owners[t] == i} <= have
            assert not {t for t in tubes if owners[t] != i} & have
        for t in tubes[:5]:
            job = pool.reserve(t, timeout=0)
            assert job.node == owners[t] and job.body == t.encode()
            assert pool.stats_job(job)["tube"] == t
            pool.delete(job)
            assert pool.stats_tube(t)["total-jobs"] == 1
        assert set(tubes[5:]) <= set(pool.list_tubes())      # the emptied ones are gone


def test_pool_hashing_is_stable():
    nodes = [("10.0.0.%d" % i, 11300) for i in range(1, 6)]
    keys = [node_key(n) for n in nodes]
    tubes = ["tube-%d" % i for i in range(2000)]
    placed = {t: keys[owner(t, keys)] for t in tubes}
    shuffled = keys[::-1]
    assert all(shuffled[owner(t, shuffled)] == placed[t] for t in tubes)       # order does not matter
    fewer = [k for k in keys if k != keys[2]]
    moved = [t for t in tubes if fewer[owner(t, fewer)] != placed[t]]
    assert moved and all(placed[t] == keys[2] for t in moved)                   # only the lost node's move
    counts = [sum(1 for t in tubes if placed[t] == k) for k in keys]
    assert min(counts) > 2000 / 5 / 2                                           # spread


def test_async_pool_routes_like_the_pool(three):
    addresses = [n.address for n in three]

    async def main():
        async with AsyncPool(addresses) as pool:
            t = fresh("apool")
            job = await pool.put(t, b"x")
            assert job.node == Pool(addresses).node_of(t)
            assert await pool.peek(job) == b"x"
            await pool.delete(job)
    asyncio.run(main())


def test_put_in_keeps_concurrent_tasks_apart(node):
    # use + put from many tasks on one AsyncClient: each job lands in its own tube
    async def main():
        async with AsyncClient(node.address) as a:
            tubes = [fresh("apart") for _ in range(8)]
            ids = await asyncio.gather(*(a.put_in(t, t.encode()) for t in tubes * 5))
            for (jid, state), t in zip(ids, tubes * 5):
                assert state is None and (await a.stats_job(jid))["tube"] == t
            assert await a.list_tube_used() == tubes[-1]
            if node.kind == "fastbean":
                first = await a.put_in(tubes[0], b"k", key="k1", cooldown=5)
                again = await a.put_in(tubes[0], b"k", key="k1")
                assert first[1] is None and again == (first[0], "ready")
    asyncio.run(main())
    with Client(node.address) as c:
        jid, _ = c.put_in("blocking-in", b"x")
        assert c.stats_job(jid)["tube"] == "blocking-in" and c.list_tube_used() == "blocking-in"


def test_a_reservation_stays_with_its_connection():
    # the worker's delete of a job goes only on the connection that reserved it:
    # after a reconnect the server has given the job out again, maybe to this client
    from fastbean.client import _protocol as P

    async def main(s):
        async with AsyncClient(s.address, reconnect=QUICK) as a:
            await a.use("held")
            await a.watch("held")
            await a.put(b"x")
            job = await a.reserve()
            reserved_on = a.generation
            s.stop()
            s.start()
            assert (await a.stats())["pid"] == s.pid        # reconnected
            with pytest.raises(ConnectionLost, match="reserved the job is gone"):
                await a.call(P.delete(job.id), reserved_on)
            assert (await a.stats_job(job.id))["state"] == "ready"
    with Server("fastbean", binlog=True) as s:
        s.start()
        asyncio.run(main(s))


def test_pipelined_commands_each_get_their_own_reply(node):
    async def main():
        async with AsyncClient(node.address) as a:
            tube = fresh("pipe")
            await a.use(tube)
            ids = await asyncio.gather(*(a.put(b"body-%d" % k) for k in range(100)))

            async def check(k):
                if k % 3 == 0:
                    with pytest.raises(NotFound):
                        await a.peek(1 << 50)
                elif k % 3 == 1:
                    assert await a.peek(ids[k]) == b"body-%d" % k
                else:
                    assert (await a.stats_job(ids[k]))["id"] == ids[k]
            await asyncio.gather(*(check(k) for k in range(100)))
            # a command cancelled before its reply closes the connection: no reply is misread
            await a.watch(fresh("empty"))
            await a.ignore("default")
            slow = asyncio.ensure_future(a.reserve_with_timeout(2))
            await asyncio.sleep(0.05)
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            assert not a.connected
    asyncio.run(main())


def test_a_connection_reset_between_commands_does_not_stall_the_next(node):
    # uvloop raises RuntimeError, not OSError, writing to a transport the peer
    # reset and the loop closed: the command must say the connection is lost,
    # and the commands after it must not wait for its turn (a worker whose
    # server was killed -9 stalled on this).
    import uvloop

    async def main():
        async with AsyncClient(node.address, reconnect=QUICK) as a:
            tube = fresh("reset")
            await a.use(tube)
            await a.put(b"x")
            a._writer.transport.close()     # what the loop does once the peer resets
            await asyncio.sleep(0)
            with pytest.raises(ConnectionLost, match="the connection was closed"):
                await a.put(b"y")           # not idempotent: not sent again
            assert (await asyncio.wait_for(a.stats_tube(tube), 10))["current-jobs-ready"] == 1
    loop = uvloop.new_event_loop()      # the loop fastbean's worker runs on
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
