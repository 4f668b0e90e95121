"""The fsync policy (-f, -F) over records written to the binlog's files.

Records are numbered as the engine numbers them (take_wal). After each
write the binlog says how far records are written and where they end
(written()); this says when they are durable (on_durable(seq)):

- -F: at once (they are in the page cache; a power loss can take them);
- -f MS: at once as well, and a sync thread fdatasyncs them within MS ms,
  so a power loss can take about the last MS ms;
- -f 0: once a sync thread's fdatasync that began after their write has
  returned. That is the group commit: every record written by then shares
  the fsync, while the loop goes on.

It also keeps where the last record known to be on disk ends (`good`): a
failed fsync may have cost any page written since the last good one, and
the kernel says so only once, so the binlog is cut back there (binlog/).

An error that says nothing about the disk (exhausted(): no descriptor, no
memory) is no disk fault: nothing is cut back and no one fail-stops. What
failed is tried again (the sync threads' fdatasync by themselves; here the
descriptors of a new file, every EXHAUSTED_RETRY seconds), and the records
it concerns are not durable meanwhile, so the replies waiting on them wait.
"""
import collections
import errno
import logging
import os
import time
from typing import Deque, Optional, Tuple

from fastbean.binlog.threads import SyncThread
from fastbean.config import EXHAUSTED_RETRY, FSYNC_THREADS
from fastbean.logs import event

# errnos that say the process or the kernel is short of something, not that the disk failed
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN})


def exhausted(err) -> bool:
    """err (an errno) says the process or the kernel ran short of descriptors
    or memory: the operation may succeed when tried again, and nothing was
    lost on the disk."""
    return err in EXHAUSTED


def say_exhausted(what, err) -> None:
    """Log, once per shortage, that `what` failed for want of something other
    than the disk and is being tried again."""
    event(logging.ERROR, "binlog-exhausted", "%(what)s failed: %(error)s; not a disk fault: tried "
          "again every %(retry)g s, and the replies that wait on these records wait meanwhile",
          what=what, error=os.strerror(err), retry=EXHAUSTED_RETRY)


class Stall:
    """Records a write left unwritten for want of memory (no disk fault,
    nothing lost): they are written, in order before any later ones, when
    retry() runs EXHAUSTED_RETRY seconds later; the replies waiting on them
    wait meanwhile. The shortage is said once, until writes go through."""

    def __init__(self, loop, retry):
        self.loop = loop
        self.retry = retry
        self.segments = None        # [(file, data), ...] held back, oldest first
        self._timer = None
        self._said = False

    def hold(self, segments, err: int, what: str) -> None:
        """segments could not be written (what failed, errno err)."""
        if not self._said:
            self._said = True
            say_exhausted(what, err)
        self.segments = segments
        self._timer = self.loop.call_later(EXHAUSTED_RETRY, self._retry)

    def take(self, segments):
        """The held records, then segments: all to be written now."""
        if self.segments is None:
            return segments
        held, self.segments = self.segments, None
        self.cancel()
        return held + list(segments)

    def resumed(self) -> None:
        """A retry wrote everything held."""
        if self._said and self.segments is None:
            self._said = False
            event(logging.WARNING, "binlog-resumed", "binlog writes go through again")

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _retry(self) -> None:
        self._timer = None
        if self.segments is not None:
            self.retry()


class Failure:
    """A write, fsync or file operation that failed for good, said once.
    Records past the last good fsync may not be on disk, so nothing more is
    written (the owner checks `op`), and on_failure(op) is called from a
    loop callback for the server to stop serving from what the disk may not
    hold. `then` says, in the event, what follows."""

    def __init__(self, loop, on_failure, then: str):
        self.loop = loop
        self.on_failure = on_failure
        self.then = then
        self.op: Optional[str] = None   # what failed, until clear()
        self.count = 0                  # failures so far, cleared or not

    def happen(self, op: str, text: str, **fields) -> bool:
        """op failed (text, a %-format of fields, says how). False when
        something failed already: only the first is said and acted on."""
        if self.op is not None:
            return False
        self.op = op
        self.count += 1
        event(logging.ERROR, "binlog-error", text + "; " + self.then, op=op, **fields)
        if self.on_failure is not None and self.loop is not None:
            self.loop.call_soon(self.on_failure, op)
        return True

    def clear(self) -> None:
        """The files were rebuilt: writing goes on."""
        self.op = None


class Durability:
    def __init__(self, loop, fsync: bool, fsync_ms: int, on_durable, on_error):
        """on_durable(seq): records up to seq are as durable as the policy
        makes them. on_error(errno): an fsync failed; nothing is reported
        durable from then on."""
        self.loop = loop
        self.fsync = fsync
        self.fsync_ms = fsync_ms
        self._on_durable = on_durable
        self._on_error = on_error
        self.written_seq = 0        # records written to the files
        self.synced_seq = 0         # records known on disk
        self.good: Optional[Tuple[int, int]] = None    # (file, offset) where the records on disk end
        self._asked_seq = 0         # records the sync threads have been asked to sync
        self._asked: Deque[Tuple[int, Tuple[int, int]]] = collections.deque()   # (seq, (file, offset)) asked
        self._last_sync = 0.0
        self._timer = None          # -f MS: the fsync due at most MS after a write
        self._syncer: Optional[SyncThread] = None
        self._pending_file: Optional[str] = None   # a file whose descriptors could not be had yet
        self._retry = None          # the timer that tries it again
        self._retries = 0           # fdatasyncs the threads tried again, as last said
        self._detached = False
        self.failed = False
        self.last_error = 0         # errno of the failed fsync

    def start(self, good) -> None:
        """Records start after `good` (file, offset), which is on disk."""
        self.good = good
        if self.fsync:
            self._syncer = SyncThread(FSYNC_THREADS if self.fsync_ms == 0 else 1)
            self.loop.add_reader(self._syncer.fileno(), self._sync_done)

    def file(self, path: str) -> None:
        """Records from now on go to the file at path. Raises OSError when the
        file cannot be opened for a reason that is the disk's; short of
        descriptors, it is tried again until it can (no sync is asked for
        meanwhile: one would cover the earlier file only)."""
        if self._syncer is None:
            return
        self._cancel_retry()
        self._pending_file = path
        self._open_pending(first=True)

    def _open_pending(self, first=False) -> None:
        self._retry = None
        path = self._pending_file
        if path is None or self._syncer is None or self._detached:
            return
        try:
            self._syncer.file(path)
        except OSError as e:
            if not exhausted(e.errno):
                self._pending_file = None
                raise
            if first:
                say_exhausted("opening %s for its fsyncs" % path, e.errno)
            self._retry = self.loop.call_later(EXHAUSTED_RETRY, self._retry_file)
            return
        self._pending_file = None
        if not first:
            event(logging.WARNING, "binlog-resumed", "%(path)s opened for its fsyncs: syncing "
                  "again", path=path)
            if self.fsync_ms == 0:
                self._start_sync()
            else:
                self._arm()

    def _retry_file(self) -> None:
        try:
            self._open_pending()
        except OSError as e:
            self._fail(e.errno or errno.EIO)

    def finish(self, fd: int) -> bool:
        """fd's file is finished: it is synced before any later record counts.
        True when a sync thread took fd over (it closes it), False when fd is
        still the caller's. Raises OSError when a sync done here failed."""
        if self._syncer is None:
            return False
        try:
            self._syncer.finish(fd)
        except MemoryError:
            os.fdatasync(fd)            # no room to queue it: synced here, before anything later
            return False
        return True

    def written(self, seq: int, where) -> None:
        """Records up to seq are written, and end at `where` (file, offset)."""
        if self.failed or seq <= self.written_seq:
            return
        self.written_seq = seq
        if not self.fsync:
            self.good = where
            self.synced_seq = seq
            self._on_durable(seq)
            return
        self._asked.append((seq, where))
        if self.fsync_ms == 0:
            self._start_sync()
        else:
            # Written records survive a crash of the process; -f bounds what a
            # power loss can take to about the last MS ms.
            self._on_durable(seq)
            self._arm()

    def _start_sync(self) -> None:
        # A sync thread covers every record written so far while the loop
        # goes on; with -f 0 their replies wait for it. A thread free by
        # then starts at once, else the first to finish takes these with
        # whatever else has come.
        if self._asked_seq >= self.written_seq or self._pending_file is not None:
            return
        if self.fsync_ms:
            self._last_sync = time.monotonic()
        self._asked_seq = self.written_seq
        assert self._syncer is not None
        self._syncer.request(self.written_seq)

    def _timed_sync(self) -> None:
        self._timer = None
        self._start_sync()

    def _arm(self) -> None:
        # -f MS: sync at most MS ms after the last one, if anything is unsynced.
        if self._timer is not None or self._asked_seq > self.synced_seq:
            return
        if self.written_seq <= self.synced_seq:
            return
        wait = self._last_sync + self.fsync_ms / 1000.0 - time.monotonic()
        if wait <= 0:
            self._start_sync()
        else:
            self._timer = self.loop.call_later(wait, self._timed_sync)

    def _sync_done(self) -> None:
        assert self._syncer is not None
        seq, err = self._syncer.collect()
        self._synced(seq)
        retries = self._syncer.retries()
        if retries > self._retries:
            event(logging.WARNING, "binlog-exhausted", "fdatasync short of memory: tried again "
                  "%(retries)d times so far, not a disk fault; synced again", retries=retries)
            self._retries = retries
        if err:
            self._fail(err)
            return
        if self.fsync_ms == 0:
            self._on_durable(seq)
        else:
            self._arm()

    def _fail(self, err: int) -> None:
        if not self.failed:
            self.failed = True
            self.last_error = err
            self._cancel_timer()
            self._cancel_retry()
            self._on_error(err)

    def _synced(self, seq: int) -> None:
        while self._asked and self._asked[0][0] <= seq:
            self.good = self._asked.popleft()[1]
        self.synced_seq = max(self.synced_seq, seq)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def detach(self) -> None:
        """Hear nothing more from the sync threads (on the loop's thread)."""
        self._cancel_timer()
        self._cancel_retry()
        if self._syncer is not None and not self._detached:
            self._detached = True
            self.loop.remove_reader(self._syncer.fileno())

    def stop(self) -> int:
        """Finish the syncs asked for and stop the threads, telling no one
        (good and synced_seq say where they got to); the errno of a failed
        sync, 0 when none failed. After detach(), any thread may call it."""
        self.detach()
        if self._syncer is None:
            return self.last_error
        self._syncer.stop()             # after the syncs it was given
        seq, err = self._syncer.collect()
        self._synced(seq)
        self._syncer = None
        if err and not self.failed:
            self.failed = True
            self.last_error = err
        return self.last_error

    def histograms(self):
        """The sync threads' fsync-latency and group-commit histograms, or None
        without an fsync policy (see SyncThread.histograms)."""
        return None if self._syncer is None else self._syncer.histograms()
