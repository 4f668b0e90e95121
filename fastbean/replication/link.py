"""The link to NATS: the only module that imports nats (nats-py, the `ha`
extra). It connects, sets up the stream and the lease bucket, publishes
with a fence, follows the stream, purges it, and reads and writes the
lease key; every failure comes out as one of three exceptions:

- Deposed: another writer appended to the stream (the fence held);
- Conflict: the lease key is not at the revision this node expected;
- Unavailable: no answer, no quorum, no connection: try again later.
"""
import asyncio
import logging
import time

import nats
from nats.errors import Error as NatsError
from nats.errors import NoServersError, StaleConnectionError, UnexpectedEOF
from nats.js.api import ConsumerConfig, DeliverPolicy, KeyValueConfig, StorageType, StreamConfig
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError, ServiceUnavailableError

from fastbean.config import STREAM_REPLICAS
from fastbean.errors import ReplicationError
from fastbean.logs import event

WRONG_LAST_SEQUENCE = 10071  # JetStream: Nats-Expected-Last-(Subject-)Sequence did not hold
NOT_CLUSTERED = 10074        # JetStream: replicas > 1 not supported in non-clustered mode
NO_PLACEMENT = (10005, 10023)    # JetStream: too few servers (up) for the replicas asked
PING_INTERVAL = 1            # seconds between the client's pings: a paused server is left
MAX_OUTSTANDING_PINGS = 3    # after about this many of them
RECONNECT_WAIT = 0.25
CONNECT_TIMEOUT = 2
REQUEST_TIMEOUT = 1.0        # a JetStream request's answer; a publish is then retried
DEDUPE_WINDOW = 120.0        # seconds JetStream remembers message ids
LOG_AGAIN = 60.0             # a failure that repeats is logged again after this long
KV_OPERATION = "KV-Operation"
PART_HEADER = "Fb-Part"      # the part (binlog file) a message's records belong to
AFTER_HEADER = "Fb-After"    # the Nats-Msg-Id of the message before it in the chain (publisher.py)
NO_MESSAGE = 10037           # JetStream: no message at that sequence


class Deposed(Exception):
    """Another writer appended to the stream: this node's queue is not the
    stream's. (Link.publish raises it when the expected last sequence did
    not hold, which the publisher then looks into.)"""


class Conflict(Exception):
    """The lease key was not at the expected revision."""


class Unavailable(Exception):
    """NATS did not answer, or has no quorum: try again."""


def why(e):
    return str(e) or type(e).__name__


class Quiet:
    """Logs a failure that repeats once, then at most once a LOG_AGAIN, with how
    often it happened meanwhile; a failure with another `error` is said at
    once (once a LOG_AGAIN too), so the reason that lasts is not hidden
    behind the first one."""

    def __init__(self, name, text):
        self.name, self.text = name, text
        self.count = 0
        self._window = -LOG_AGAIN   # when the errors in _said were first said
        self._said = set()

    def failed(self, level=logging.WARNING, **fields):
        self.count += 1
        now = time.monotonic()
        if now - self._window >= LOG_AGAIN:
            self._window, self._said = now, set()
        error = fields.get("error")
        if error not in self._said:
            self._said.add(error)
            event(level, self.name, self.text + (" (%(times)d times so far)" if self.count > 1 else ""),
                  times=self.count, **fields)

    def ok(self):
        self.count = 0
        self._window, self._said = -LOG_AGAIN, set()


def _unavailable(e):
    # A JetStream answer that a later try can change.
    if isinstance(e, APIError) and e.err_code == WRONG_LAST_SEQUENCE:
        return False
    return isinstance(e, (NatsError, APIError, asyncio.TimeoutError, OSError))


def _without_credentials(url):
    scheme, sep, rest = url.rpartition("://")
    return scheme + sep + rest.rpartition("@")[2]


def nats_auth(path):
    """nats.connect's credentials from the file of --replicate-auth-file: its first
    line, USER:PASSWORD or a token. OSError or ValueError if there are none."""
    with open(path, encoding="utf-8") as f:
        line = f.readline().strip()
    if not line:
        raise ValueError("no USER:PASSWORD or token on its first line")
    user, sep, password = line.partition(":")
    return {"user": user, "password": password} if sep else {"token": line}


class Link:
    def __init__(self, urls, name, stream, lease_ttl, callbacks=None, tls=None, auth=None):
        self.urls = list(urls)
        self.tls = tls              # an ssl.SSLContext for NATS servers that speak TLS, or None
        self.auth = auth or {}      # nats.connect's user and password, or token (--replicate-auth-file)
        self.name = name
        self.stream = stream
        self.subject = stream + ".records"
        self.bucket = stream + "-lease"
        self.lease_stream = "KV_" + self.bucket
        self.lease_subject = "$KV.%s.primary" % self.bucket
        self.lease_ttl = lease_ttl
        self.nc = None
        self.js = None
        self.max_payload = 1 << 20
        self._unreachable = Quiet("nats-unreachable", "replication: cannot reach NATS at "
                                  "%(servers)s: %(error)s; serving no client until it can, retrying")
        self._reconnecting = Quiet("nats-unreachable", "replication: cannot reach NATS at "
                                   "%(servers)s again: %(error)s; retrying")
        self._errors = Quiet("nats-error", "replication: NATS: %(error)s")
        self._closing = False
        self._not_ready = Quiet("jetstream-not-ready", "replication: JetStream at %(servers)s is not "
                                "ready (%(error)s); serving no client until it is, retrying")

    @property
    def servers(self):
        """The URLs as the log shows them: without the credentials they may hold."""
        return ",".join(_without_credentials(url) for url in self.urls)

    # -- connecting --------------------------------------------------------------

    async def connect(self):
        """Connect (trying until NATS answers), then make sure the stream and the
        lease bucket exist. Returns the lease TTL the bucket has."""
        connected = False

        async def on_error(e):
            # The client tries a server every RECONNECT_WAIT s, and says so
            # here each time: once, then once a LOG_AGAIN.
            if isinstance(e, (OSError, asyncio.TimeoutError, NoServersError, UnexpectedEOF,
                              StaleConnectionError)):
                quiet = self._reconnecting if connected else self._unreachable
                quiet.failed(servers=self.servers, error=why(e))
            elif not self._closing:
                self._errors.failed(logging.INFO, error=why(e))

        async def on_disconnect():
            if not self._closing:
                event(logging.WARNING, "nats-disconnected", "replication: disconnected from NATS; "
                      "reconnecting to %(servers)s", servers=self.servers)

        async def on_reconnect():
            self._reconnecting.ok()
            event(logging.WARNING, "nats-reconnected", "replication: connected to NATS at %(server)s",
                  server=self.nc.connected_url.netloc.rpartition("@")[2])

        while True:
            try:
                self.nc = await nats.connect(
                    servers=self.urls, name="fastbean " + self.name, connect_timeout=CONNECT_TIMEOUT,
                    reconnect_time_wait=RECONNECT_WAIT, max_reconnect_attempts=-1,
                    ping_interval=PING_INTERVAL, max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                    error_cb=on_error, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
                    **({"tls": self.tls} if self.tls is not None else {}), **self.auth)
                break
            except (NatsError, OSError, asyncio.TimeoutError) as e:
                self._unreachable.failed(servers=self.servers, error=why(e))
                await asyncio.sleep(1.0)
        connected = True
        self._unreachable.ok()
        event(logging.INFO, "nats-connected", "replication: connected to NATS at %(server)s",
              server=self.nc.connected_url.netloc.rpartition("@")[2])
        self.max_payload = self.nc.max_payload
        self.js = self.nc.jetstream(timeout=REQUEST_TIMEOUT)
        while True:
            try:
                return await self._setup()
            except ReplicationError:
                raise
            except Exception as e:
                if not _unavailable(e):
                    raise
                self._not_ready.failed(servers=self.servers, error=self._js_why(e))
                await asyncio.sleep(1.0)

    def _js_why(self, e):
        # no JetStream answered: say why, if the server said (its INFO names JetStream when on)
        if isinstance(e, ServiceUnavailableError):
            if not getattr(self.nc, "_server_info", {}).get("jetstream"):
                return ("JetStream is off on the NATS server at %s: run nats-server with -js, or "
                        "a jetstream block in its configuration" % self.nc.connected_url.netloc)
            return "no JetStream server answered"
        if isinstance(e, APIError) and e.err_code in NO_PLACEMENT:
            return ("JetStream cannot place %d copies of the stream (%s): the cluster needs %d "
                    "JetStream servers up" % (STREAM_REPLICAS, e.description, STREAM_REPLICAS))
        return why(e)

    async def _setup(self):
        try:
            await self.js.stream_info(self.stream)
        except NotFoundError:
            try:
                await self.js.add_stream(StreamConfig(
                    name=self.stream, subjects=[self.subject], storage=StorageType.FILE,
                    num_replicas=STREAM_REPLICAS, duplicate_window=DEDUPE_WINDOW))
            except APIError as e:
                if e.err_code == NOT_CLUSTERED:
                    raise ReplicationError(
                        "NATS at %s is a single server: --replicate needs a JetStream cluster of "
                        "at least %d servers to keep %d copies of the stream"
                        % (self.servers, STREAM_REPLICAS, STREAM_REPLICAS)) from None
                raise
        try:
            kv = await self.js.key_value(self.bucket)
        except BucketNotFoundError:
            kv = await self.js.create_key_value(KeyValueConfig(
                bucket=self.bucket, ttl=self.lease_ttl, history=1, replicas=STREAM_REPLICAS,
                storage=StorageType.FILE))
        self._not_ready.ok()
        return (await kv.status()).ttl

    async def close(self):
        self._closing = True
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.close(), 2.0)
            except Exception:
                pass

    # -- the stream ----------------------------------------------------------------

    async def publish(self, data, headers):
        """Store one message; its stream sequence. Raises Deposed or Unavailable."""
        try:
            ack = await self.js.publish(self.subject, data, timeout=REQUEST_TIMEOUT,
                                        stream=self.stream, headers=headers)
        except Exception as e:
            if isinstance(e, APIError) and e.err_code == WRONG_LAST_SEQUENCE:
                raise Deposed() from None
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise
        return ack.seq

    async def message(self, seq):
        """(message id, the id it names as its predecessor) of the stream's
        message seq; None if the stream does not hold it. Raises Unavailable."""
        try:
            msg = await self.js.get_msg(self.stream, seq=seq)
        except Exception as e:
            if isinstance(e, APIError) and e.err_code == NO_MESSAGE:
                return None
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise
        headers = msg.headers or {}
        return headers.get("Nats-Msg-Id"), headers.get(AFTER_HEADER)

    async def last_seq(self):
        """(first, last) sequence of the stream's messages, and how many there are."""
        try:
            state = (await self.js.stream_info(self.stream)).state
        except Exception as e:
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise
        return state.first_seq, state.last_seq, state.messages

    async def follow(self, after, callback):
        """Deliver the stream's messages from after + 1 on, in order, to
        callback(seq, part, data, msg_id, after, pending, stored_at): its
        id, the id it names as its predecessor (None: none named), the
        messages the stream held after it when it was sent, and when it was
        stored (a time.time() of the stream leader's clock). The
        subscription, or None if JetStream does not take it now."""
        async def on_message(msg):
            meta = msg.metadata
            headers = msg.headers or {}
            await callback(meta.sequence.stream, int(headers.get(PART_HEADER, 0)), msg.data,
                           headers.get("Nats-Msg-Id"), headers.get(AFTER_HEADER), meta.num_pending,
                           meta.timestamp.timestamp())
        if after:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        try:
            return await self.js.subscribe(self.subject, stream=self.stream, cb=on_message,
                                           ordered_consumer=True, idle_heartbeat=1.0, config=config)
        except Exception as e:
            if _unavailable(e):
                event(logging.INFO, "follow-failed", "replication: cannot follow the stream yet: "
                      "%(error)s", error=why(e))
                return None
            raise

    @staticmethod
    async def unfollow(sub):
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:
                pass

    async def purge(self, below):
        """Drop the stream's messages below sequence `below`."""
        try:
            await self.js.purge_stream(self.stream, seq=below)
        except Exception as e:
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise

    # -- the nodes' status keys ------------------------------------------------------
    #
    # Each node writes what it is doing under node.<name> in the lease bucket,
    # whose TTL drops a node that stopped writing; any node's console reads
    # every node's from there. Nothing else reads these keys.

    async def status_write(self, value):
        """This node's status (a JSON document)."""
        await self.js.publish("$KV.%s.node.%s" % (self.bucket, self.name), value,
                              timeout=REQUEST_TIMEOUT, stream=self.lease_stream)

    async def status_read(self):
        """{node name: its last status document} of every node that wrote one
        within the bucket's TTL."""
        prefix = "$KV.%s.node." % self.bucket
        info = await self.js.stream_info(self.lease_stream, subjects_filter=prefix + ">")
        found = {}
        for subject in sorted(info.state.subjects or {}):
            try:
                msg = await self.js.get_last_msg(self.lease_stream, subject, direct=False)
            except NotFoundError:       # expired meanwhile
                continue
            if not (msg.headers and msg.headers.get(KV_OPERATION) in ("DEL", "PURGE")):
                found[subject[len(prefix):]] = msg.data
        return found

    # -- the lease key ----------------------------------------------------------------

    async def lease_read(self):
        """(revision, value) of the lease key's last message: value None when
        the key is deleted, revision 0 when it has no message (it never had
        one, or it expired). Read through the bucket's leader, not a replica
        that may lag."""
        try:
            msg = await self.js.get_last_msg(self.lease_stream, self.lease_subject, direct=False)
        except NotFoundError:
            return 0, None
        except Exception as e:
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise
        if msg.headers and msg.headers.get(KV_OPERATION) in ("DEL", "PURGE"):
            return msg.seq, None
        return msg.seq, msg.data

    async def lease_write(self, value, last, delete=False):
        """Write the lease (or delete it) if the key's last message is revision
        `last` (0: it never had one); the new revision. Raises Conflict or
        Unavailable."""
        headers = {"Nats-Expected-Last-Subject-Sequence": str(last)}
        if delete:
            headers[KV_OPERATION] = "DEL"
        try:
            ack = await self.js.publish(self.lease_subject, value, timeout=REQUEST_TIMEOUT,
                                        stream=self.lease_stream, headers=headers)
        except Exception as e:
            if isinstance(e, APIError) and e.err_code == WRONG_LAST_SEQUENCE:
                raise Conflict() from None
            if _unavailable(e):
                raise Unavailable(why(e)) from None
            raise
        return ack.seq
