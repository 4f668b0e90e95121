"""Replication: each group commit published to a NATS JetStream stream,
standbys that apply the stream as it grows, and a lease that makes one
node the primary.

The stream holds the binlog records the engine writes (beanstalkd's
format), one message per group commit, in parts that play the role of
binlog files (parts.py). A reply that confirms a change waits until
JetStream has stored its records on a quorum (publisher.py), and with -b
until the local mirror has them by -f too (binlog/mirror.py).

A node is in one of four roles:

    STARTING -> STANDBY -> PRIMARY <-> SUSPENDED
                   ^                       |
                   +------- rebuild -------+

- STANDBY: applies the stream (follower.py); takes the lease when it is
  free and the node has applied everything, then appends the first message
  of a new part expecting the stream to end where its replay does (the
  fence). Success makes it PRIMARY.
- PRIMARY: serves clients, publishes, renews the lease (lease.py).
- SUSPENDED: the primary could not make a change durable within
  --replicate-timeout, or could not renew its lease in time. It closes
  every client and answers none, keeps its queue and goes on publishing;
  once everything it logged is stored and its lease is renewed, it fences
  again and serves (PRIMARY).
- Rebuild: another writer appended (the fence failed), another node holds
  the lease, or the local mirror failed: the queue and the mirror are
  rebuilt from the stream, as a STANDBY.

Every role change that replaces the engine bumps `gen`; every task checks
it after each wait, so none acts on an engine that is gone.
"""
import asyncio
import enum
import logging
import socket
import time
import uuid
from typing import Optional

from fastbean.client import tls_context
from fastbean.engine.core import FULL_RECORD_OVERHEAD
from fastbean.errors import EXIT_CONFIG, BinlogError, ReplicationError
from fastbean.logs import counted, event
from fastbean.replication.follower import Follower
from fastbean.replication.lease import AGAIN, LOST, Keeper, Lease
from fastbean.replication.link import Deposed, Link, Quiet, Unavailable, nats_auth
from fastbean.replication.log import StreamLog
from fastbean.replication.status import StatusWriter, console_url
from fastbean.wal import Host

POLL = 0.25                 # seconds between a standby's looks at the stream and the lease
HEADROOM = 1024             # bytes of a message's headers, at most
RELEASE_TIMEOUT = 2.0       # seconds to hand the lease on at shutdown


class Role(enum.Enum):
    STARTING = "starting"
    STANDBY = "standby"
    PRIMARY = "primary"
    SUSPENDED = "suspended"


def nats_tls(config):
    """The TLS context for NATS from --replicate-ca/-cert/-key, or None (nats-py
    then makes its own for tls:// URLs, trusting the system's CAs)."""
    if config.replicate_ca is None and config.replicate_cert is None:
        return None
    return tls_context(config.replicate_ca, config.replicate_cert, config.replicate_key)


def message_room(link, max_job_size):
    """Bytes of records a message may carry on the connected link; raises
    ReplicationError when the largest job (-z) would not fit in one."""
    room = link.max_payload - HEADROOM
    if max_job_size + FULL_RECORD_OVERHEAD > room:
        raise ReplicationError("-z %d does not fit in a NATS message (max_payload %d)"
                               % (max_job_size, link.max_payload))
    return room


async def _cancel(task):
    """Cancel task and wait until it has ended. On Python 3.11 a cancel that lands
    just as an inner wait_for (nats-py's requests) completes is swallowed, and the
    task would run on: ask again until it ends."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled():
        task.exception()        # retrieved: its end was the shutdown's doing


class Replicator:
    """This node's role: when it follows, takes over, serves, suspends or
    rebuilds. The records themselves go through `log` (log.py), which is
    the server's Sink."""

    def __init__(self, host: Host, config) -> None:
        """host: what replication may ask of the server (fastbean.wal.Host)."""
        self.host = host
        self.loop = host.loop
        self.name = config.node_name or "%s-%s" % (socket.gethostname(), config.port)
        self.timeout = config.replicate_timeout
        self.max_job_size = config.max_job_size
        self.link = Link(config.replicate, self.name, config.replicate_stream, config.lease_ttl,
                         tls=nats_tls(config),
                         auth=nats_auth(config.replicate_auth_file) if config.replicate_auth_file else None)
        self.lease = Lease(self.link, config.lease_ttl, ("%s %s" % (self.name, uuid.uuid4().hex)).encode())
        self.keeper = Keeper(self.loop, self.lease, self.name, lambda t: host.core.set_lease(t),
                             self._wake_up, self._must_rebuild, self._lapsed)
        self.log = StreamLog(host, self.link, config, self._deposed_by_writer, self._wake_up,
                             self._local_failed, self._must_rebuild)
        self.publisher = self.log.publisher
        self.follower = Follower(self.link, self.log.apply)
        self.role = Role.STARTING
        self.gen = 0
        self._why_not = None        # why the primary stopped serving
        self._rebuild_why = None    # why it must rebuild from the stream
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._standby_errors = Quiet("standby-error", "replication: standby: %(error)s")
        self._status_task: Optional[asyncio.Task] = None
        self._status_writer = StatusWriter(self.link, self.status)
        self.console_url = console_url(config)      # for the other nodes' cluster pages
        # fastbean-stats
        self.takeovers = self.resyncs = self.suspensions = 0

    # -- start, stop ----------------------------------------------------------

    def start(self):
        if self.log.mirror is not None:
            self.log.mirror.open()
        self._task = self.loop.create_task(self._run())
        self._status_task = self.loop.create_task(self._status_writer.run())

    def status(self):
        """What this node tells the others (the consoles' cluster pages)."""
        return {"node": self.name, "role": self.role.value, "applied": self.log.applied,
                "part": self.log.parts.current, "publishes": self.publisher.published,
                "retries": self.publisher.retries, "takeovers": self.takeovers,
                "resyncs": self.resyncs, "suspensions": self.suspensions,
                "stalled": bool(self.publisher.stalled), "why": self._why_not,
                "lease_left": max(self.lease.valid_until - time.monotonic(), 0.0)
                if self.role is Role.PRIMARY else None,
                "console": self.console_url, "at": time.time()}

    async def finish(self, grace):
        """Shutdown: publish what is queued (up to `grace` s), hand the lease on."""
        if self.role is Role.PRIMARY:
            self.log.commit()
            deadline = time.monotonic() + grace
            while self.publisher.busy and time.monotonic() < deadline and self.role is Role.PRIMARY:
                await asyncio.sleep(0.01)
        was_primary = self.role is Role.PRIMARY and not self.publisher.busy
        self.gen += 1
        if self._status_task is not None:
            await _cancel(self._status_task)
        if self._task is not None:
            await _cancel(self._task)
        self.publisher.stop()
        await self.follower.stop()
        if was_primary:
            await self.lease.hand_on(RELEASE_TIMEOUT)
        await self.link.close()

    async def _run(self):
        try:
            ttl = await self.link.connect()
            self.publisher.max_payload = message_room(self.link, self.max_job_size)
            if ttl and abs(ttl - self.lease.ttl) > 0.001:
                event(logging.WARNING, "lease-ttl-differs", "replication: the lease bucket %(bucket)s "
                      "has a TTL of %(ttl).1f s, not %(asked).1f s; the bucket's applies",
                      bucket=self.link.bucket, ttl=ttl, asked=self.lease.ttl)
                self.lease.set_ttl(ttl)
            self.role = Role.STANDBY
            event(logging.WARNING, "standby", "replication: node %(node)s on stream %(stream)s, "
                  "as a standby", node=self.name, stream=self.link.stream)
            while True:
                await self._standby()
                if await self._take_over():
                    self._rebuild(await self._lead())
        except asyncio.CancelledError:
            raise
        except ReplicationError as e:
            self.host.fatal(str(e), EXIT_CONFIG)
        except BinlogError as e:
            self.host.fatal(str(e), e.status)
        except Exception:
            event(logging.ERROR, "replication-crashed", "replication stopped", exc_info=True)
            self.host.fatal("replication failed")

    # -- standby ----------------------------------------------------------------

    async def _standby(self):
        """Apply the stream as it grows, until this node has applied all of it
        and holds the lease."""
        self.role = Role.STANDBY
        try:
            while True:
                if self.follower.gap:
                    await self.follower.stop()
                    self._rebuild("the stream does not go on from where this node got to")
                if not self.follower.following:
                    await self.follower.start(self.log.applied)
                await asyncio.sleep(POLL)
                try:
                    if await self._ready_to_lead():
                        return
                    self._standby_errors.ok()
                except Unavailable as e:
                    self._standby_errors.failed(logging.INFO, error=str(e))
        finally:
            await self.follower.stop()

    async def _ready_to_lead(self):
        first, last, messages = await self.link.last_seq()
        if messages == 0 and self.log.applied < last:
            # purged to the end: nothing to apply, and the chain starts again
            self.log.applied = self.follower.applied = last
            self.log.last_id, self.log.chained = None, False
        if self.log.applied < last:
            if self.follower.stuck():
                event(logging.WARNING, "follower-stuck", "replication: follower stuck at %(applied)d "
                      "of %(last)d; following again", applied=self.log.applied, last=last)
                await self.follower.stop()
            return False
        self.follower.progress = time.monotonic()
        holder = await self.lease.holder()
        if holder is None:
            if not await self.lease.take():
                return False        # another standby took it first
            event(logging.WARNING, "lease-taken", "replication: %(node)s holds the lease", node=self.name)
            return True
        # still this node's after a rebuild: renewed, its time starts now
        return bool(holder) and await self.lease.renew() not in (LOST, AGAIN)

    # -- takeover, leading ------------------------------------------------------------

    async def _take_over(self):
        """The fence: the first message of a new part. Success makes this node
        the primary."""
        gen = self.gen
        part = self.log.parts.current + 1
        try:
            placed = await self.publisher.fence(part, give_up=self.timeout)
        except Deposed:
            event(logging.WARNING, "takeover-lost", "replication: another node appended first; following on")
            return False
        if placed is None or gen != self.gen:
            return False
        t0 = time.monotonic()
        jobs = self.log.begin(part, *placed)
        self.takeovers += 1
        event(logging.WARNING, "primary", "replication: %(node)s is the primary: " + counted(jobs, "job")
              + ", stream at %(seq)d (placing the jobs took %(seconds).3f s)", node=self.name, jobs=jobs,
              seq=self.log.applied, seconds=time.monotonic() - t0)
        return True

    async def _lead(self):
        """Serve while the lease and the stream allow; returns why this node
        must rebuild its queue from the stream."""
        gen = self.gen
        self.role = Role.PRIMARY
        self._rebuild_why = None
        self.keeper.renewed()
        self.host.set_serving(True)
        keeper = self.loop.create_task(self.keeper.keep(lambda: gen == self.gen))
        try:
            while self._rebuild_why is None:
                self._wake.clear()
                if self.role is Role.PRIMARY:
                    if self.publisher.stalled:
                        self._suspend("no NATS quorum has stored its changes for %.0f s" % self.timeout)
                    elif not self.lease.held:
                        self._suspend("its lease was not renewed in time")
                elif not self.publisher.busy and not self.publisher.stalled and self.lease.held:
                    await self._resume(gen)
                    continue
                await self._wake.wait()
            return self._rebuild_why
        finally:
            keeper.cancel()
            self.keeper.stop()

    def _suspend(self, why):
        self.role = Role.SUSPENDED
        self.suspensions += 1
        self._why_not = why
        event(logging.ERROR, "suspended", "replication: %(node)s stops serving: %(why)s; its clients "
              "are disconnected, and it serves again once its changes are stored and its lease renewed",
              node=self.name, why=why)
        self.host.set_serving(False)

    async def _resume(self, gen):
        # Everything logged is stored and the lease is renewed: fence in the
        # current part (nobody appended meanwhile), then serve again.
        try:
            placed = await self.publisher.fence(self.log.parts.current, give_up=self.timeout)
        except Deposed:
            self._deposed_by_writer()
            return
        if placed is None or gen != self.gen or self.role is not Role.SUSPENDED:
            return
        self.log.fenced(*placed)
        self.role = Role.PRIMARY
        self._why_not = None
        event(logging.WARNING, "resumed", "replication: %(node)s serves again", node=self.name)
        self.host.set_serving(True)

    def _lapsed(self):
        if self.role is Role.PRIMARY:
            self._suspend("its lease had lapsed")   # someone may have led meanwhile: fence first

    def lease_over(self):
        """The engine's hook: a command came past the lease (the loop ran late)."""
        self._wake_up()

    def _wake_up(self):
        self._wake.set()

    def _deposed_by_writer(self):
        event(logging.ERROR, "fenced", "replication: another node appended to the stream: %(node)s "
              "steps down", node=self.name)
        self._must_rebuild("another node appended to the stream")

    def _must_rebuild(self, why):
        if self._rebuild_why is None:
            self._rebuild_why = why
        self._wake_up()

    def _local_failed(self, op):
        if self.role in (Role.PRIMARY, Role.SUSPENDED):
            self._must_rebuild("the local mirror failed (%s)" % op)
        else:
            self.follower.gap = True        # the standby rebuilds, and its mirror with it

    def _rebuild(self, why):
        """Start again from the stream: a new engine, an empty mirror."""
        self.gen += 1
        self.host.set_serving(False)
        self.role = Role.STANDBY
        self.resyncs += 1
        event(logging.WARNING, "resync", "replication: %(why)s: rebuilding the queue from the stream",
              why=why)
        self.host.reset_core()
        self.log.reset()
        self.follower.applied = 0

    # -- health and fastbean-stats -------------------------------------------------------

    def readiness(self):
        """(serving, why not) for /readyz."""
        if self.role is Role.PRIMARY:
            return True, "ready"
        if self.role is Role.SUSPENDED:
            return False, "suspended: " + (self._why_not or "")
        if self.role is Role.STARTING:
            return False, "starting: waiting for NATS at " + self.link.servers
        return False, self.role.value

    def stats(self):
        return (b"replication-role: %s\nreplication-node: %s\nreplication-stream-seq: %d\n"
                b"replication-part: %d\nreplication-publishes: %d\nreplication-retries: %d\n"
                b"replication-takeovers: %d\nreplication-resyncs: %d\nreplication-stalled: %d\n"
                b"replication-suspensions: %d\nreplication-most-in-flight: %d\n"
                % (self.role.value.encode(), self.name.encode(), self.log.applied, self.log.parts.current,
                   self.publisher.published, self.publisher.retries, self.takeovers, self.resyncs,
                   self.publisher.stalled, self.suspensions, self.publisher.most_in_flight))
