"""A NATS client of the test's own (nats-py on an event loop in a thread):
a foreign writer of the lease key, and questions about the stream."""
import asyncio
import threading
import time

LEASE_KEY = "primary"


class NatsClient:
    """One nats-py connection to `urls` (a list or a comma-separated string),
    driven from blocking code: call(coroutine function, *args)."""

    def __init__(self, urls, timeout=30.0):
        if isinstance(urls, str):
            urls = urls.split(",")
        self.urls = list(urls)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="faultkit-nats", daemon=True)
        self._thread.start()
        self.nc = self.call(self._connect, timeout=timeout)
        self.js = self.nc.jetstream(timeout=5.0)

    async def _connect(self):
        import nats

        async def quiet(*_):
            pass
        return await nats.connect(servers=self.urls, connect_timeout=2, reconnect_time_wait=0.25,
                                  max_reconnect_attempts=-1, error_cb=quiet)

    def call(self, fn, *args, timeout=30.0):
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop).result(timeout)

    def close(self):
        try:
            self.call(self.nc.close, timeout=10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stream_info(self, stream):
        """(the stream leader's server name, its state)."""
        async def ask():
            info = await self.js.stream_info(stream)
            return info.cluster.leader, info.state
        return self.call(ask)

    def healthy(self, stream):
        """True when `stream` has a leader and every other replica is online and
        current: then it can lose any one server and keep a quorum."""
        async def ask():
            cluster = (await self.js.stream_info(stream)).cluster
            return bool(cluster.leader) and all(p.current and not p.offline for p in cluster.replicas or ())
        try:
            return self.call(ask, timeout=5.0)
        except Exception:
            return False


class Lease(NatsClient):
    """The lease key of `stream`'s bucket (<stream>-lease), read as the cluster
    sees it: holder() is its value, holder_name() the node name in it."""

    def __init__(self, urls, stream="fastbean"):
        super().__init__(urls)
        self.bucket = stream + "-lease"
        self.kv = None              # bound once the nodes have made the bucket

    async def _kv(self, timeout):
        if self.kv is None:
            self.kv = await asyncio.wait_for(self.js.key_value(self.bucket), timeout)
        return self.kv

    def holder(self, timeout=5.0):
        """The lease's value, or None when no one holds it (or NATS did not answer)."""
        async def get():
            try:
                kv = await self._kv(timeout)
                return (await asyncio.wait_for(kv.get(LEASE_KEY), timeout)).value
            except Exception:
                return None
        return self.call(get, timeout=timeout + 5)

    def holder_name(self):
        """The name of the node that holds the lease (a node's value is "NAME UUID"), or None."""
        value = self.holder()
        return value.split()[0].decode() if value and b" " in value else None


class LeaseThief(Lease):
    """Overwrites the lease key as a foreign writer would: kv.put, with no
    revision check."""

    def __init__(self, urls, stream="fastbean", value=b"thief"):
        super().__init__(urls, stream)
        self.value = value
        self.thefts = 0

    def steal(self):
        """Overwrite the key once; its new revision (None if NATS did not take it)."""
        async def put():
            try:
                kv = await self._kv(5)
                return await asyncio.wait_for(kv.put(LEASE_KEY, self.value), 5)
            except Exception:
                return None
        rev = self.call(put)
        if rev is not None:
            self.thefts += 1
        return rev

    def run(self, seconds, every=0.3):
        """For `seconds`, every `every` s: overwrite the key whenever a node
        holds it (its value is not ours). The thefts made."""
        made = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.holder()
            if value is not None and value != self.value and self.steal() is not None:
                made += 1
            time.sleep(every)
        return made
