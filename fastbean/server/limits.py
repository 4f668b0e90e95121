"""The server's limits under overload: its client connections, admitted up
to --max-connections, and of those not yet in (a TLS handshake or `auth`
to go) up to --max-unauthenticated-per-address from one address; and the
memory cap (--max-memory), which the engine counts on its hot path and this
watches once a STATUS_INTERVAL. Each cap is logged once when it is reached
and once when it clears."""
import asyncio
import logging

from fastbean.logs import counted, event


class Connections:
    """The open client connections (their protocols), each from its accept."""

    def __init__(self, limit, per_address=None):
        self.limit = limit          # --max-connections; None: as many as fds allow
        self.per_address = per_address  # --max-unauthenticated-per-address; None: no cap
        self.refused = 0            # connections refused at the limit
        self.refused_unauthenticated = 0    # refused at the per-address cap
        self._open = set()
        self._unauthenticated = {}  # protocol -> its address, while it is not in yet
        self._by_address = {}       # address -> its connections not in yet
        self._capped = False
        self._capped_addresses = set()  # addresses at the per-address cap (each said once)
        self._closing = None        # set once every connection is gone, after close_all()

    def __len__(self):
        return len(self._open)

    def __iter__(self):
        return iter(list(self._open))

    def __contains__(self, proto):
        return proto in self._open

    @property
    def unauthenticated(self):
        """Connections not in yet (a TLS handshake or `auth` to go)."""
        return len(self._unauthenticated)

    def admit(self, proto, address=None):
        """A new connection, just accepted: False when it must be refused
        (closing, at the limit, or, when it has to come in yet (address
        given), its address has --max-unauthenticated-per-address such)."""
        if self._closing is not None:
            return False
        if self.limit is not None and len(self._open) >= self.limit:
            self.refused += 1
            if not self._capped:
                self._capped = True
                event(logging.WARNING, "connection-cap-reached", "connection limit (%(limit)d) "
                      "reached: refusing new connections", limit=self.limit)
            return False
        if address is not None:
            n = self._by_address.get(address, 0)
            if self.per_address is not None and n >= self.per_address:
                self.refused_unauthenticated += 1
                if address not in self._capped_addresses:
                    self._capped_addresses.add(address)
                    event(logging.WARNING, "unauthenticated-cap-reached", "%(address)s has "
                          + counted(n, "connection") + " not yet in (TLS handshake or auth): "
                          "refusing more from it", address=address, limit=self.per_address)
                return False
            self._by_address[address] = n + 1
            self._unauthenticated[proto] = address
        self._open.add(proto)
        return True

    def authenticated(self, proto):
        """proto's client is in (its handshake done, its token accepted)."""
        address = self._unauthenticated.pop(proto, None)
        if address is None:
            return
        n = self._by_address[address] - 1
        if n:
            self._by_address[address] = n
        else:
            del self._by_address[address]
        if address in self._capped_addresses and n < self.per_address:
            self._capped_addresses.discard(address)
            event(logging.INFO, "unauthenticated-cap-cleared", "%(address)s is below the cap of "
                  "connections not yet in (%(limit)d) again", address=address, limit=self.per_address)

    def forget(self, proto):
        """A connection is gone (saying it again is harmless)."""
        if proto not in self._open:
            return
        self.authenticated(proto)
        self._open.discard(proto)
        if self._closing is not None and not self._open:
            self._closing.set()
        elif self._capped and len(self._open) < self.limit:
            self._capped = False
            event(logging.INFO, "connection-cap-cleared", "connections below the limit "
                  "(%(limit)d) again: accepting new connections", limit=self.limit, refused=self.refused)

    def close(self):
        """Close every connection (each finishes writing what it has queued)."""
        for proto in list(self._open):
            proto.close()

    def refuse_new(self):
        """Shutdown has begun: admit no more connections."""
        if self._closing is None:
            self._closing = asyncio.Event()

    async def close_all(self, grace):
        """Shutdown: close every connection and wait up to `grace` s for them
        to go; False when some were still open."""
        self.refuse_new()
        self.close()
        if self._open:
            try:
                await asyncio.wait_for(self._closing.wait(), grace)
            except asyncio.TimeoutError:
                return False
        return True

    def drop_others(self, keep):
        """fastbean-reset (--testing): every other connection closed at once;
        their engine sides."""
        dropped = [proto.drop(keep) for proto in self._open]
        return [conn for conn in dropped if conn is not None]


class MemoryCap:
    """--max-memory: the engine refuses puts beyond it and counts them; this
    says when the cap is reached and when it clears."""

    def __init__(self, cap, max_job_size):
        self.cap = cap
        self.max_job_size = max_job_size
        self._hit = False
        self._refused_seen = 0

    def check(self, core):
        refused = core.mem_refused
        if refused > self._refused_seen:
            if not self._hit:
                self._hit = True
                event(logging.WARNING, "memory-cap-reached", "memory cap reached: %(memory_used)d "
                      "of " + counted(self.cap, "byte") + " held; put answers OUT_OF_MEMORY",
                      memory_used=core.mem_used, max_memory=self.cap)
        elif self._hit:
            # Cleared: a second without a refusal, and room again for a job of
            # the largest size (or a tenth of the cap, if that is less).
            room = min(self.max_job_size + 2 + 256, self.cap // 10)
            if core.mem_used + room <= self.cap:
                self._hit = False
                event(logging.INFO, "memory-cap-cleared", "memory below the cap again: "
                      "%(memory_used)d of " + counted(self.cap, "byte") + " held; "
                      + counted(refused, "put") + (" was" if refused == 1 else " were") + " refused",
                      memory_used=core.mem_used, max_memory=self.cap, refused=refused)
        self._refused_seen = refused
