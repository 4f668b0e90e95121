"""The server's limits under overload: its client connections, admitted up
to --max-connections, and the memory cap (--max-memory), which the engine
counts on its hot path and this watches once a STATUS_INTERVAL. Each cap
is logged once when it is reached and once when it clears."""
import asyncio
import logging

from fastbean.logs import counted, event


class Connections:
    """The open client connections (their protocols)."""

    def __init__(self, limit):
        self.limit = limit          # --max-connections; None: as many as fds allow
        self.refused = 0            # connections refused at the limit
        self._open = set()
        self._capped = False
        self._closing = None        # set once every connection is gone, after close_all()

    def __len__(self):
        return len(self._open)

    def __iter__(self):
        return iter(list(self._open))

    def admit(self, proto):
        """A new connection: False when it must be refused (closing, or at the limit)."""
        if self._closing is not None:
            return False
        if self.limit is not None and len(self._open) >= self.limit:
            self.refused += 1
            if not self._capped:
                self._capped = True
                event(logging.WARNING, "connection-cap-reached", "connection limit (%(limit)d) "
                      "reached: refusing new connections", limit=self.limit)
            return False
        self._open.add(proto)
        return True

    def forget(self, proto):
        """A connection is gone."""
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
