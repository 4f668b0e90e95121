"""The lease: which node may be the primary, and until when.

The lease is a key in a JetStream key-value bucket whose messages expire
after the TTL. The primary writes it again every RENEW_EVERY seconds, each
write conditional on the revision it wrote last; a standby writes it only
where it finds no key (conditional too, so one standby wins).

Serving within the lease: a write sent at t is stored at or after t, so
the key it makes cannot expire before t + TTL, and no standby can take the
lease before then. The primary counts itself the primary until t + TTL -
MARGIN (valid_until) for the last write it sent that was confirmed, and
answers no client past that (the engine checks it before every command:
Core.set_lease). The margin covers the NATS servers' clocks, which expire
the key, against this node's. So a primary cut off from NATS, or paused,
stops answering before another node can start.

A write whose answer was lost may still have been stored: a conditional
write that then fails looks at the key before giving up. If the key holds
this node's own value, the lease was never lost.
"""
import asyncio
import logging
import time

from fastbean.logs import event
from fastbean.replication.link import Conflict, Quiet, Unavailable

RENEWED = "renewed"         # the primary's write went in
RETAKEN = "retaken"         # the key had lapsed and this node created it again: fence first
AGAIN = "again"             # a lost answer's write had gone in: write again, at once
LOST = "lost"               # another node (or writer) holds the key
LEASE_RETRY = 0.25          # seconds between tries to renew a lease NATS did not answer for


class Lease:
    def __init__(self, link, ttl, value):
        self.link = link
        self.value = value          # "<node> <random>": unique to this process
        self.revision = 0
        self.valid_until = 0.0      # time.monotonic() until which this node may serve
        self.set_ttl(ttl)

    def set_ttl(self, ttl):
        self.ttl = ttl
        self.margin = min(1.0, ttl / 4)
        self.renew_every = min(1.0, ttl / 8)

    @property
    def held(self):
        return time.monotonic() < self.valid_until

    def forget(self):
        self.revision = 0
        self.valid_until = 0.0

    async def holder(self):
        """None when no node holds the lease, True when this node's value is
        there (its revision noted), False when another's is."""
        revision, value = await self.link.lease_read()
        if value is None:
            return None
        if value == self.value:
            self.revision = revision
            return True
        return False

    async def take(self):
        """Create the lease where there is none: True when this node got it."""
        sent = time.monotonic()
        revision, value = await self.link.lease_read()
        if value is not None:
            return False
        try:
            self.revision = await self.link.lease_write(self.value, revision)
        except Conflict:
            return False
        self.valid_until = sent + self.ttl - self.margin
        return True

    async def renew(self):
        """Write the lease again; RENEWED, RETAKEN, AGAIN or LOST. Raises
        Unavailable when NATS does not answer."""
        sent = time.monotonic()
        try:
            self.revision = await self.link.lease_write(self.value, self.revision)
        except Conflict:
            mine = await self.holder()
            if mine:
                return AGAIN
            if mine is None and await self.take():
                return RETAKEN
            self.valid_until = 0.0
            return LOST
        self.valid_until = sent + self.ttl - self.margin
        return RENEWED

    async def hand_on(self, timeout):
        """A clean shutdown: the key goes, so the standbys need not wait for it
        to expire (a failure is only logged: then they wait)."""
        if not self.revision:
            return
        try:
            await asyncio.wait_for(self.link.lease_write(b"", self.revision, delete=True), timeout)
        except (Unavailable, Conflict, asyncio.TimeoutError) as e:
            event(logging.WARNING, "lease-release-failed", "replication: could not release the lease: "
                  "%(error)s", error=str(e) or type(e).__name__)
        self.forget()


class Keeper:
    """The primary's side of the lease: renewed every renew_every seconds,
    and the engine told how long it may answer (set_lease), with a timer
    that wakes the primary's loop when that time is up."""

    def __init__(self, loop, lease, node, set_lease, wake, lost, lapsed):
        """set_lease(t): the engine answers nothing past monotonic time t;
        wake(): the primary's loop looks at its state again; lost(why): the
        node must rebuild from the stream; lapsed(): the key had lapsed and
        this node made it again (someone may have led meanwhile)."""
        self.loop = loop
        self.lease = lease
        self.node = node
        self._set_lease = set_lease
        self._wake = wake
        self._lost = lost
        self._lapsed = lapsed
        self._deadline = None
        self._errors = Quiet("lease-renew-failed", "replication: renewing the lease failed "
                             "(valid for %(left).1f s more): %(error)s")

    def renewed(self):
        self._set_lease(self.lease.valid_until)
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(max(0.0, self.lease.valid_until - time.monotonic()),
                                              self._wake)
        self._wake()

    def stop(self):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    async def keep(self, current):
        """Renew until current() is False (the node's role changed)."""
        while current():
            try:
                result = await self.lease.renew()
            except Unavailable as e:
                if not current():
                    return
                self._errors.failed(left=self.lease.valid_until - time.monotonic(), error=str(e))
                await asyncio.sleep(LEASE_RETRY)
                continue
            except Exception as e:          # no retry mends it: start again from the stream
                event(logging.ERROR, "lease-failed", "replication: renewing the lease failed: %(error)s",
                      error=str(e) or type(e).__name__, exc_info=True)
                self._lost("renewing the lease failed")
                return
            if not current():
                return
            self._errors.ok()
            if result == LOST:
                event(logging.ERROR, "lease-lost", "replication: %(node)s lost the lease", node=self.node)
                self._lost("another node holds the lease")
                return
            if result == AGAIN:
                continue
            if result == RETAKEN:
                self._lapsed()
            self.renewed()
            await asyncio.sleep(self.lease.renew_every)
