"""Fail-stop after a failed binlog write or fsync (binlog/): the engine then
holds changes the disk may not, so the server serves nothing more from it,
closes every connection, and rebuilds its queue from what the disk holds,
as a restart would. When that keeps failing, or the disk will not take the
repair, it exits with EXIT_DISK_FAILED for its supervisor."""
import asyncio
import logging
import time

from fastbean.config import EXIT_DISK_FAILED, FAILSTOP_LIMIT, FAILSTOP_WINDOW
from fastbean.errors import BinlogError
from fastbean.logs import counted, event


class Recovery:
    def __init__(self, server):
        self.server = server
        self.count = 0              # fail-stops so far
        self._times = []            # when the binlog failed, lately

    def binlog_failed(self, op):
        # A write or fsync failed: the engine holds changes the disk may not.
        # Fail-stop: serve nothing more from it, and rebuild it from what the
        # disk holds (Binlog.repair, reopen), unless that keeps failing.
        if self.server.stopping:
            return                  # shutting down: Binlog.close() cuts the files back
        self.count += 1
        now = time.monotonic()
        self._times = [t for t in self._times if now - t < FAILSTOP_WINDOW] + [now]
        if len(self._times) > FAILSTOP_LIMIT:
            event(logging.ERROR, "fail-stop", "the binlog failed " + counted(len(self._times), "time")
                  + " in %(window)d s: "
                  "exiting with status %(status)d, for a supervisor to restart the server",
                  failures=len(self._times), window=FAILSTOP_WINDOW, status=EXIT_DISK_FAILED)
            self.server.set_serving(False)
            self.server.fatal("the binlog keeps failing", EXIT_DISK_FAILED)
            return
        event(logging.ERROR, "fail-stop", "the binlog %(op)s failed: the server stops serving from "
              "memory, which may hold changes the disk does not, closes every connection and "
              "rebuilds its queue from the binlog on disk", op=op)
        self.server.phase = "recovering"
        self.server.set_serving(False)
        self.server.loop.create_task(self._rebuild())

    async def _rebuild(self):
        try:
            self.server.binlog.detach()
            # the repair waits for a disk that just failed: off the loop, which
            # goes on answering /readyz and the watchdog
            await self.server.loop.run_in_executor(None, self.server.binlog.repair)
            self.server.reset_core()
            for done, total in self.server.binlog.reopen(self.server.core):
                self.server.notifier.status("rebuilding from the binlog: file %d of %d" % (done, total))
                await asyncio.sleep(0)
        except BinlogError as e:
            event(logging.ERROR, "fail-stop", "%(error)s: exiting with status %(status)d, for a "
                  "supervisor to restart the server", error=str(e), status=EXIT_DISK_FAILED)
            self.server.fatal(str(e), EXIT_DISK_FAILED)
            return
        if self.server.stopping:
            return
        self.server.phase = "serving"
        self.server.set_serving(True)
        event(logging.WARNING, "rebuilt", "rebuilt " + counted(self.server.core.current_jobs, "job")
              + " from the binlog on disk; serving again",
              jobs=self.server.core.current_jobs)
