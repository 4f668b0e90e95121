"""Replication: each group commit published to a NATS JetStream stream, standbys
that apply the stream as it grows, and the lease that makes one node primary.

The stream holds the binlog records the engine writes (beanstalkd's format),
one message per group commit, in parts that play the role of binlog files:
the engine's space accounting decides when a part is full, which live jobs
have their latest full record in which part, when jobs are re-logged forward
(wal_migrate) and which old parts nothing needs (wal_collect); the stream is
then purged up to the first message of the oldest part still needed.

Safety rests on JetStream, not on clocks: every publish carries the stream
sequence its sender saw last (Nats-Expected-Last-Sequence), so only a node
whose engine holds exactly the stream's contents can append, and a node that
takes over appends first (its fence). A reply that confirms a change waits
for JetStream's acknowledgement of the records (a quorum of three holds them).
The lease, a key in a JetStream key-value bucket that expires unless renewed,
decides which standby tries to take over, and when.
"""
import asyncio
import collections
import logging
import socket
import struct
import time
import uuid

from fastbean._core import FILE_FIRST_RECORD
from fastbean._core import FILE_HEADER as HEADER
from fastbean.binlog import BLOCK, MIGRATE_BATCH
from fastbean.config import STREAM_REPLICAS
from fastbean.errors import ReplicationError
from fastbean.logs import event

PART = "Fb-Part"             # header: the part a message belongs to
LEASE_KEY = "primary"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code: another node appended first
PUBLISH_TIMEOUT = 1.0        # seconds before a publish is retried (same message id)
RETRY_PAUSE = 0.05
POLL = 0.25                  # seconds between a standby's looks at the lease
STUCK = 3.0                  # a follower this long behind with no progress resubscribes
DEDUPE_WINDOW = 120.0        # seconds JetStream remembers message ids
JOBREC = 80                  # bytes of a record after its tube name
BODY_SIZE_AT = 32            # offset of body_size in a record
HEADROOM = 1024              # bytes of a message's headers, at most


class Deposed(Exception):
    """Another node appended to the stream: this one's state is not the stream's."""


def split_records(data, limit):
    """Cut a group commit's records into pieces of whole records of at most
    `limit` bytes each (NATS's max_payload)."""
    pieces = []
    start = pos = 0
    view = memoryview(data)
    while pos < len(data):
        namelen, = struct.unpack_from("<i", data, pos)
        size = 4 + namelen + JOBREC
        if namelen:
            size += struct.unpack_from("<i", data, pos + 4 + namelen + BODY_SIZE_AT)[0]
        if pos > start and pos + size - start > limit:
            pieces.append(bytes(view[start:pos]))
            start = pos
        pos += size
    pieces.append(bytes(view[start:]))
    return pieces


class Replicator:
    """This node's side of replication. While primary it is the engine's binlog
    (schedule, rotate, commit); while standby it feeds the stream to replay."""

    def __init__(self, server, config):
        self.server = server
        self.loop = server.loop
        self.urls = list(config.replicate)
        self.stream = config.replicate_stream
        self.subject = self.stream + ".records"
        self.bucket = self.stream + "-lease"
        self.name = config.node_name or "%s-%s" % (socket.gethostname(), config.port)
        self.lease_value = ("%s %s" % (self.name, uuid.uuid4().hex)).encode()
        self.msg_prefix = uuid.uuid4().hex + "-"     # message ids: unique per process
        self.ttl = config.lease_ttl
        self.timeout = config.replicate_timeout
        self.part_size = max(config.binlog_size, 1)
        self.max_job_size = config.max_job_size
        self.nc = self.js = self.kv = None
        self.binlog = server.binlog     # -b: a local mirror of the stream (binlog.py)
        self.local_seq = 0          # engine records the local binlog has made durable
        self.remote_seq = 0         # engine records JetStream has acknowledged
        self.role = "standby"
        self.applied = 0            # stream sequence of the last message applied or acknowledged
        self.part = 0               # the current part
        self.engine_part = 0        # the newest part the engine has (next_file gave it)
        self.part_caps = {}         # part -> bytes the engine may fill, until it starts
        self.part_first = {}        # part -> stream sequence of its first message
        self.part_bytes = {}        # part -> bytes of its messages
        self.closed_bytes = 0       # bytes in parts older than the current one
        self.purged = 0             # the stream holds no message below this sequence
        self.resync = False         # a follower saw a gap: start again from the stream's start
        self.progress = time.monotonic()
        # primary
        self.queue = collections.deque()     # [part, bytes, wal seq] not yet published
        self.taken_seq = 0          # the engine's records taken so far
        self.msgs = 0               # messages this process has published
        self.sender = None          # the task publishing the queue
        self.stalled = False        # no quorum for longer than the timeout
        self.lease_rev = 0
        self.deposed = None         # set when this primary must step down
        self._commit_pending = False
        self._task = None
        self._purging = None
        self.max_payload = 1 << 20
        # fastbean-stats
        self.published = self.retries = self.takeovers = self.resyncs = 0

    # -- start, stop ----------------------------------------------------------

    def start(self):
        if self.binlog is not None:
            self.binlog.mirror_open(self.stream)
            self.binlog.durable = self._local_durable
        self._task = self.loop.create_task(self._run())

    async def finish(self, grace):
        """Shutdown: publish what is queued (up to `grace` s), hand the lease on."""
        if self.role == "primary":
            self._take()
            self._send()
            deadline = time.monotonic() + grace
            while (self.queue or self.sender) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self.role == "primary" and not self.queue and self.kv is not None:
            try:           # the standbys need not wait for the lease to expire
                await asyncio.wait_for(self.kv.delete(LEASE_KEY, last=self.lease_rev), 2.0)
            except Exception as e:
                event(logging.WARNING, "lease-release-failed",
                      "replication: could not release the lease: %(error)s", error=_why(e))
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.close(), 2.0)
            except Exception:
                pass

    async def _run(self):
        try:
            await self._connect()
            while True:
                if await self._follow():
                    await self._lead()
                    self._step_down()
        except asyncio.CancelledError:
            raise
        except ReplicationError as e:
            self.server.fatal(str(e))
        except Exception:
            event(logging.ERROR, "replication-crashed", "replication stopped", exc_info=True)
            self.server.fatal("replication failed")

    async def _connect(self):
        import nats
        from nats.js.api import KeyValueConfig, StorageType, StreamConfig
        from nats.js.errors import BucketNotFoundError, NotFoundError

        async def on_error(e):
            event(logging.INFO, "nats-error", "replication: NATS: %(error)s", error=_why(e))

        async def on_disconnect():
            if self._task is not None:
                event(logging.WARNING, "nats-disconnected",
                      "replication: disconnected from NATS; reconnecting")

        async def on_reconnect():
            event(logging.WARNING, "nats-reconnected",
                  "replication: connected to NATS at %(server)s",
                  server=self.nc.connected_url.netloc)

        while True:
            try:
                self.nc = await nats.connect(
                    servers=self.urls, name="fastbean " + self.name, connect_timeout=2,
                    reconnect_time_wait=0.25, max_reconnect_attempts=-1,
                    error_cb=on_error, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect)
                break
            except Exception as e:
                event(logging.WARNING, "nats-unreachable",
                      "replication: cannot reach NATS at %(servers)s: "
                      "%(error)s; retrying", servers=",".join(self.urls), error=_why(e))
                await asyncio.sleep(1.0)
        # headers count against max_payload too
        self.max_payload = self.nc.max_payload - HEADROOM
        if self.max_job_size + 2 + 4 + 200 + JOBREC > self.max_payload:
            raise ReplicationError("-z %d does not fit in a NATS message (max_payload %d)"
                                   % (self.max_job_size, self.max_payload))
        self.js = self.nc.jetstream(timeout=5.0)
        while True:
            try:
                try:
                    await self.js.stream_info(self.stream)
                except NotFoundError:
                    await self.js.add_stream(StreamConfig(
                        name=self.stream, subjects=[self.subject], storage=StorageType.FILE,
                        num_replicas=STREAM_REPLICAS, duplicate_window=DEDUPE_WINDOW))
                try:
                    self.kv = await self.js.key_value(self.bucket)
                except BucketNotFoundError:
                    self.kv = await self.js.create_key_value(KeyValueConfig(
                        bucket=self.bucket, ttl=self.ttl, history=1, replicas=STREAM_REPLICAS,
                        storage=StorageType.FILE))
                ttl = (await self.kv.status()).ttl
                if ttl and abs(ttl - self.ttl) > 0.001:
                    event(logging.WARNING, "lease-ttl-differs",
                          "replication: the lease bucket %(bucket)s "
                          "has a TTL of %(ttl).1f s, not %(asked).1f s; the bucket's applies",
                          bucket=self.bucket, ttl=ttl, asked=self.ttl)
                    self.ttl = ttl
                break
            except Exception as e:
                event(logging.WARNING, "jetstream-not-ready",
                      "replication: JetStream not ready (%(error)s); "
                      "retrying", error=_why(e))
                await asyncio.sleep(1.0)
        event(logging.WARNING, "standby",
              "replication: node %(node)s on stream %(stream)s, as a standby",
              node=self.name, stream=self.stream)

    # -- standby ----------------------------------------------------------------

    async def _follow(self):
        """Apply the stream as it grows until this node holds the lease, has applied
        every message and its first publish went in; then return True."""
        from nats.js.errors import KeyWrongLastSequenceError, NotFoundError
        self.role = "standby"
        sub = None
        try:
            while True:
                if self.resync:
                    sub = await _unsubscribe(sub)
                    self._reset("the stream does not go on from where this node got to")
                if sub is None:
                    sub = await self._subscribe()
                await asyncio.sleep(POLL)
                try:
                    state = (await self.js.stream_info(self.stream)).state
                    if state.messages == 0 and self.applied < state.last_seq:
                        self.applied = state.last_seq      # nothing left to apply
                    if self.applied < state.last_seq:
                        if time.monotonic() - self.progress > STUCK:
                            event(logging.WARNING, "follower-stuck",
                                  "replication: follower stuck at "
                                  "%(applied)d of %(last)d; resubscribing",
                                  applied=self.applied, last=state.last_seq)
                            sub = await _unsubscribe(sub)
                        continue
                    self.progress = time.monotonic()
                    try:
                        entry = await self.kv.get(LEASE_KEY)
                    except NotFoundError:
                        self.lease_rev = await self.kv.create(LEASE_KEY, self.lease_value)
                        event(logging.WARNING, "lease-taken",
                              "replication: %(node)s holds the lease", node=self.name)
                    else:
                        if entry.value != self.lease_value:
                            continue
                        self.lease_rev = entry.revision
                    sub = await _unsubscribe(sub)
                    if await self._fence():
                        return True
                except KeyWrongLastSequenceError:
                    pass                # another standby took the lease first
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    event(logging.INFO, "standby-error",
                          "replication: standby: %(error)s", error=_why(e))
        finally:
            await _unsubscribe(sub)

    async def _subscribe(self):
        from nats.js.api import ConsumerConfig, DeliverPolicy
        if self.applied:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                    opt_start_seq=self.applied + 1)
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        self.progress = time.monotonic()
        try:
            return await self.js.subscribe(self.subject, stream=self.stream, cb=self._on_message,
                                           ordered_consumer=True, idle_heartbeat=1.0,
                                           config=config)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            event(logging.INFO, "follow-failed",
                  "replication: cannot follow the stream yet: %(error)s",
                  error=_why(e))
            return None

    async def _on_message(self, msg):
        if self.resync or self.role != "standby":
            return
        seq = msg.metadata.sequence.stream
        if seq <= self.applied:
            return              # delivered again after a consumer reset
        if self.applied and seq != self.applied + 1:
            self.resync = True
            return
        self.apply(int(msg.headers[PART]), seq, msg.data)

    def apply(self, part, seq, data):
        """Apply one stream message to the engine (replay; jobs stay there until
        takeover)."""
        core = self.server.core
        if part != self.part:
            if part < self.part:
                event(logging.ERROR, "stream-part-back",
                      "replication: message %(seq)d goes back to "
                      "part %(part)d from %(current)d", seq=seq, part=part, current=self.part)
                self.resync = True
                return
            # parts are numbered on; one without messages was empty
            for empty in range(self.part + 1 if self.part else part, part):
                core.replay(HEADER, empty)
                self._mirror_part(empty, 0)
            self._new_part(part)
            self.part_first[part] = seq
            self._mirror_part(part, 0)
        if self.binlog is not None:
            self.binlog.mirror_write(data)
        count, end, reason = core.replay(HEADER + data, part)
        if reason is not None:
            event(logging.ERROR, "stream-records-dropped",
                  "replication: message %(seq)d: %(reason)s: "
                  "%(bytes)d bytes after record %(records)d not applied", seq=seq, reason=reason,
                  bytes=len(data) + len(HEADER) - end, records=count)
        self.part_bytes[part] += len(data)
        self.applied = seq
        self.progress = time.monotonic()
        self._forget(core.wal_collect())

    def _new_part(self, part):
        if self.part in self.part_bytes:
            self.closed_bytes += self.part_bytes[self.part]
        self.part = part
        self.part_bytes[part] = 0

    def _forget(self, parts):
        for part in parts:
            self.closed_bytes -= self.part_bytes.pop(part, 0)
            self.part_first.pop(part, None)
        if parts and self.binlog is not None:
            self.binlog.remove(parts)

    def _mirror_part(self, part, cap):
        if self.binlog is not None:
            self.binlog.mirror_part(part, cap)

    def _local_durable(self, seq):
        self.local_seq = max(self.local_seq, seq)
        self._release()

    def _release(self):
        # a reply goes once its records are in the stream (and on the local disk, with -b)
        seq = self.remote_seq if self.binlog is None else min(self.remote_seq, self.local_seq)
        if self.role == "primary" and seq:
            self.server.core.set_durable(seq)

    def _reset(self, why):
        event(logging.WARNING, "resync",
              "replication: %(why)s: rebuilding the queue from the stream",
              why=why)
        self.resyncs += 1
        self.server.reset_core()
        if self.binlog is not None:
            self.binlog.mirror_reset()
        self.applied = self.part = self.engine_part = self.closed_bytes = 0
        self.part_caps.clear()
        self.local_seq = self.remote_seq = self.taken_seq = 0
        self.part_first.clear()
        self.part_bytes.clear()
        self.resync = False

    # -- takeover -----------------------------------------------------------------

    async def _fence(self):
        """Publish the first message of a new part, expecting the stream to end
        where this node's replay does. Success makes the node primary. The
        message is empty: the engine's first records in the part follow it
        (the highest id handed out, when that job is gone)."""
        core = self.server.core
        head = b""
        part = self.part + 1
        try:
            ack = await self._publish(part, head, give_up=True)
        except Deposed:
            event(logging.WARNING, "takeover-lost",
                  "replication: another node appended first; following on")
            return False
        if ack is None:
            return False
        t0 = time.monotonic()
        jobs = core.replay_finish()
        finish = time.monotonic() - t0
        self._new_part(part)
        self._acked(part, head, ack)
        live, resv, used, cap, nparts = core.wal_status()
        cap = self._capacity(resv)
        self.engine_part = part
        self._mirror_part(part, cap)
        core.wal_start(part, cap, 0)
        self.takeovers += 1
        event(logging.WARNING, "primary",
              "replication: %(node)s is the primary: %(jobs)d jobs, stream "
              "at %(seq)d (placing the jobs took %(seconds).3f s)", node=self.name, jobs=jobs,
              seq=self.applied, seconds=finish)
        return True

    def _capacity(self, need):
        # -s bytes of new records beyond `need`, and the engine's first record
        cap = self.part_size + need + FILE_FIRST_RECORD
        return (cap + BLOCK - 1) // BLOCK * BLOCK

    # -- primary ------------------------------------------------------------------

    async def _lead(self):
        from nats.js.errors import KeyWrongLastSequenceError, NotFoundError
        self.role = "primary"
        self.deposed = asyncio.Event()
        self.server.set_serving(True)
        renewed = time.monotonic()
        every = self.ttl / 8
        while not self.deposed.is_set():
            try:
                await asyncio.wait_for(self.deposed.wait(), every)
                break
            except asyncio.TimeoutError:
                pass
            sent = time.monotonic()
            try:
                self.lease_rev = await self.kv.update(LEASE_KEY, self.lease_value,
                                                      last=self.lease_rev)
                renewed = sent
            except (KeyWrongLastSequenceError, NotFoundError):
                event(logging.ERROR, "lease-lost",
                      "replication: %(node)s lost the lease", node=self.name)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                event(logging.WARNING, "lease-renew-failed",
                      "replication: renewing the lease failed "
                      "(renewed %(ago).1f s ago): %(error)s", ago=sent - renewed, error=_why(e))
        event(logging.ERROR, "fenced", "replication: another node appended to the stream: %(node)s "
              "steps down", node=self.name)

    def _step_down(self):
        self.role = "standby"
        if self.sender is not None:
            self.sender.cancel()
            self.sender = None
        self.queue.clear()
        self.stalled = False
        self.server.set_serving(False)
        self._reset("no longer the primary")

    # the engine's hooks, while this node replicates (server.py passes them on)

    def schedule(self):
        if not self._commit_pending:
            self._commit_pending = True
            self.loop.call_soon(self._scheduled_commit)

    def _scheduled_commit(self):
        if self._commit_pending:
            self.commit()

    def end_of_turn(self):
        """The loop turn's reads have run: publish what they logged."""
        if self._commit_pending:
            self.commit()

    def commit(self):
        """The turn's records: published by the sender, now or once the publish
        in flight is acknowledged (then with everything gathered meanwhile)."""
        self._commit_pending = False
        if self.role == "primary" and (self.sender is None or self.stalled):
            self._take()        # stalled: taking them fails their connections at once
            self._send()

    def next_file(self, need, replace):
        """The current part is full: the next part for the engine to go on in,
        as (part, room, bytes used); its records start there in take_wal().
        None while there is no quorum. (No spare is ever offered: replace is 0.)"""
        if self.stalled or self.role != "primary":
            return None
        self.engine_part += 1
        cap = self.part_caps[self.engine_part] = self._capacity(need)
        return self.engine_part, cap, 0

    def _take(self):
        # The engine's records, part by part: a part the engine went on to
        # starts here (and its mirror file with -b).
        core = self.server.core
        segments, seq = core.take_wal()
        taken = False
        for part, data in segments:
            if part != self.part:
                self._new_part(part)
                self._mirror_part(part, self.part_caps.pop(part, 0))
            if not data:
                continue
            taken = True
            if self.binlog is not None:
                self.binlog.mirror_write(data)
            if len(data) > self.max_payload:
                for piece in split_records(data, self.max_payload):
                    self.queue.append([part, piece, 0])
            else:
                self.queue.append([part, bytes(data), 0])
        if taken:
            self.queue[-1][2] = seq
            self.taken_seq = seq
            if self.binlog is not None:
                self.binlog.written(seq)
            if self.stalled:    # no waiting: the connections go at once
                core.set_failed(seq)

    def _send(self):
        if self.sender is None and self.queue:
            self.sender = self.loop.create_task(self._send_queue())

    def _next_message(self):
        # the queue's first messages of one part, as one publish
        part, data, seq = self.queue.popleft()
        if self.queue and self.queue[0][0] == part:
            pieces = [data]
            size = len(data)
            while self.queue and self.queue[0][0] == part and size + len(self.queue[0][1]) <= self.max_payload:
                _, more, more_seq = self.queue.popleft()
                pieces.append(more)
                size += len(more)
                seq = max(seq, more_seq)
            data = b"".join(pieces)
        return part, data, seq

    async def _send_queue(self):
        try:
            while self.queue:
                part, data, seq = self._next_message()
                ack = await self._publish(part, data)
                self._acked(part, data, ack)
                if seq:
                    self.remote_seq = seq
                    self._release()
                if not self.queue:
                    self._take()
                self._maintain()
        except Deposed:
            self.deposed.set()
        finally:
            self.sender = None

    async def _publish(self, part, data, give_up=False):
        """Publish one message until JetStream stores it: the same message id on
        every try, so a try whose answer was lost is not stored twice."""
        self.msgs += 1
        headers = {"Nats-Msg-Id": self.msg_prefix + str(self.msgs),
                   "Nats-Expected-Last-Sequence": str(self.applied), PART: str(part)}
        t0 = time.monotonic()
        while True:
            try:
                ack = await self.js.publish(self.subject, data, timeout=PUBLISH_TIMEOUT,
                                            stream=self.stream, headers=headers)
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if getattr(e, "err_code", None) == WRONG_LAST_SEQUENCE:
                    raise Deposed() from None
                waited = time.monotonic() - t0
                self.retries += 1
                if self.retries % 20 == 1:
                    event(logging.WARNING, "publish-waiting",
                          "replication: publish waiting %(seconds).1f s: "
                          "%(error)s", seconds=waited, error=_why(e))
                if waited > self.timeout:
                    if give_up:
                        return None
                    if not self.stalled:
                        self._stall(waited)
                await asyncio.sleep(RETRY_PAUSE)
        if self.stalled:
            self.stalled = False
            event(logging.WARNING, "quorum-back",
                  "replication: the stream takes records again after "
                  "%(seconds).1f s", seconds=time.monotonic() - t0)
        self.published += 1
        return ack

    def _stall(self, waited):
        # No quorum for longer than the timeout: the replies waiting go (their
        # connections close, as on a failed binlog fsync), changes are refused
        # (a part without room: put answers OUT_OF_MEMORY), reads go on.
        event(logging.ERROR, "quorum-lost",
              "replication: no quorum for %(seconds).1f s: closing the "
              "connections waiting on changes and refusing changes until the stream takes "
              "records again", seconds=waited)
        self.stalled = True
        core = self.server.core
        self._take()
        core.set_failed(self.taken_seq)
        self.engine_part += 1
        core.wal_switch(self.engine_part, 0, 0)

    def _acked(self, part, data, ack):
        self.applied = ack.seq
        self.part_first.setdefault(part, ack.seq)
        self.part_bytes[part] = self.part_bytes.get(part, 0) + len(data)
        if part != self.part:       # queued before the part it belongs to ended
            self.closed_bytes += len(data)

    def _maintain(self):
        # As binlog.py does with files: drop the parts no live job needs, and
        # when most of the stream is dead records, re-log the oldest part's
        # jobs forward, a batch per commit.
        core = self.server.core
        gone = core.wal_collect()
        live, resv, used, cap, nparts = core.wal_status()
        if nparts > 1 and self.closed_bytes + used > 2 * (live + resv) + self.part_size:
            if core.wal_migrate(MIGRATE_BATCH):
                gone += core.wal_collect()
        if gone:
            self._forget(gone)
            self._purge()

    def _purge(self):
        keep = min(self.part_first.values(), default=0)
        if keep > self.purged and self._purging is None:
            self._purging = self.loop.create_task(self._purge_to(keep))

    async def _purge_to(self, keep):
        try:
            await self.js.purge_stream(self.stream, seq=keep)
            self.purged = keep
        except asyncio.CancelledError:
            raise
        except Exception as e:
            event(logging.WARNING, "purge-failed", "replication: purging the stream below %(seq)d: "
                  "%(error)s", seq=keep, error=_why(e))
        finally:
            self._purging = None

    # -- fastbean-stats -------------------------------------------------------------

    def stats(self):
        return (b"replication-role: %s\nreplication-node: %s\nreplication-stream-seq: %d\n"
                b"replication-part: %d\nreplication-publishes: %d\nreplication-retries: %d\n"
                b"replication-takeovers: %d\nreplication-resyncs: %d\nreplication-stalled: %d\n"
                % (self.role.encode(), self.name.encode(), self.applied, self.part,
                   self.published, self.retries, self.takeovers, self.resyncs, self.stalled))


async def _unsubscribe(sub):
    if sub is not None:
        try:
            await sub.unsubscribe()
        except Exception:
            pass
    return None


def _why(e):
    return str(e) or type(e).__name__
