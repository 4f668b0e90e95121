"""Drain: SIGUSR1 stops new work (put answers DRAINING, as beanstalkd's
drain mode), and the drain is complete once no job is reserved. That moment
is logged, and /readyz, systemd's STATUS line and fastbean-stats say it, so
that a deploy knows when stopping loses no work in progress. SIGUSR2 (not
with --strict) ends a drain: beanstalkd has no way out of one but a restart."""
import logging

from fastbean.config import DRAIN_CHECK_INTERVAL
from fastbean.logs import counted, event


class Drain:
    def __init__(self, loop, core, changed, stopping):
        """core(): the engine now (a rebuild makes a new one); changed(): what
        readiness says has changed; stopping(): the server is shutting down."""
        self.loop = loop
        self._core = core
        self._changed = changed
        self._stopping = stopping
        self._drained = None        # no job reserved at the last look; None before one

    def start(self):
        """SIGUSR1."""
        core = self._core()
        if core.draining:
            return
        event(logging.WARNING, "drain", "entering drain mode")
        core.set_draining()
        self._drained = None
        self._watch()

    def end(self):
        """SIGUSR2: put is accepted again."""
        core = self._core()
        if not core.draining:
            return
        core.set_draining(False)
        event(logging.WARNING, "drain-ended", "drain mode ended: put is accepted again")
        self._changed()

    def state(self):
        """What readiness says while draining."""
        reserved = self._core().reserved_jobs
        if reserved:
            return "draining: %s reserved" % counted(reserved, "job")
        return "drained: no job reserved"

    def _watch(self):
        # the drain's end is told once each time the last reservation goes
        core = self._core()
        if not core.draining or self._stopping():
            return
        drained = core.reserved_jobs == 0
        if drained and self._drained is not True:
            event(logging.WARNING, "drained", "drain complete: no job is reserved",
                  jobs=core.current_jobs)
        if drained != self._drained:
            self._drained = drained
            self._changed()
        self.loop.call_later(DRAIN_CHECK_INTERVAL, self._watch)
