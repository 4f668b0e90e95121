"""Binlog: the binlog.N files of one directory, in beanstalkd 1.12's format.

The engine encodes the records (the format is engine/wal.pxi's) and keeps the
space accounting; this package owns the files: the directory (files.py),
the fsync policy (durability.py), the mirror of a replication stream
(mirror.py), and here the binlog itself: replay at start-up, one commit
per loop turn, the spare file kept ready for when the current one is full,
reclaiming old files, and what happens when the disk fails.

Space: every file is preallocated, and the current file always keeps room
for a delete record of every live job, so a full disk can refuse a put but
never a delete. The engine moves on to the spare by itself, in the middle
of a command; this module learns of it at the next commit (take_wal() then
has a segment for the spare), finishes the old file there (its fsync on a
sync thread) and makes the next spare.

Failures. A full disk refuses changes until space comes back. A failed
write or fsync is different: the records since the last good fsync may be
lost, and the kernel says so only once. The binlog then writes nothing more
and calls on_failure(op): the server stops serving from its engine, whose
memory holds changes the disk may not (server.py), and rebuild() cuts the
files back to what is on disk and replays them into a new engine, as a
restart would. Nothing is ever written after a gap.

A write that fails for want of memory, or a new file that cannot be had
for want of descriptors (durability.exhausted()), is no disk fault: the
records not yet written wait, and are written (in order, before any later
ones) on a retry EXHAUSTED_RETRY seconds later; the replies waiting on them
wait too.
"""
import logging
import os
import time

from fastbean.binlog.durability import Durability, Failure, Stall, exhausted, say_exhausted
from fastbean.binlog.files import Directory
from fastbean.binlog.fileset import FileSet
from fastbean.config import DEFAULT_FSYNC_MS, EXHAUSTED_RETRY
from fastbean.engine.core import FILE_FIRST_RECORD, id_marker
from fastbean.errors import BinlogError
from fastbean.logs import counted, event
from fastbean.wal import MIGRATE_BATCH, Reclaim, TurnCommit, compaction_due

# A cut-back short of descriptors waits for one this many times EXHAUSTED_RETRY
# (it runs off the loop while the server rebuilds) before the server gives up.
CUT_BACK_TRIES = 100


def cut_back(directory, seq, end, marker):
    """Directory.cut_back, waiting for a descriptor when the process is out
    of them (a flood of connections, not the disk); it runs off the loop
    while the server rebuilds. The files removed; raises BinlogError."""
    tries = 1
    while True:
        try:
            return directory.cut_back(seq, end, marker)
        except OSError as e:
            if not exhausted(e.errno) or tries == CUT_BACK_TRIES:
                raise BinlogError("cannot cut binlog.%d back to its %d bytes on disk: %s"
                                  % (seq, end, e.strerror)) from None
            if tries == 1:
                say_exhausted("cutting binlog.%d back" % seq, e.errno)
            tries += 1
            time.sleep(EXHAUSTED_RETRY)


class Binlog:
    """The local binlog: a Sink (fastbean.wal) the server builds with what it needs."""

    def __init__(self, loop, directory, max_size, fsync=True, fsync_ms=DEFAULT_FSYNC_MS,
                 on_failure=None):
        """on_failure(op) is called (from a loop callback) once a write or fsync
        has failed; op names it."""
        self.loop = loop
        self.dir = Directory(directory)
        self.max_size = max(int(max_size), 1)
        self.fsync = fsync
        self.fsync_ms = fsync_ms
        self.on_failure = on_failure
        self.replayed = None        # (files, jobs, seconds, bytes dropped) once open
        self._failure = Failure(loop, on_failure, "no more records are written")
        self._file_errors = 0       # files the disk would not give, before the last rebuild
        self._reset()

    def _reset(self):
        self.core = None
        self._stall = Stall(self.loop, self._retry_stalled)
        self._failure.clear()
        self.fileset = FileSet(self.dir, self.max_size,
                              zero_fill=self.fsync and self.fsync_ms == 0 and self.loop is not None)
        self._turn = TurnCommit(self.loop, self.commit)
        self._reclaim = Reclaim(self.fileset.remove)
        self._durability = Durability(self.loop, self.fsync and self.loop is not None, self.fsync_ms,
                                      self._durable, self._sync_failed)

    @property
    def path(self):
        return self.dir.path

    @property
    def failed(self):
        """What failed for good (write, fsync, finish...): nothing more is
        written until the files are rebuilt. None while all is well."""
        return self._failure.op

    @property
    def failing(self):
        """The disk refuses new files, or a write or fsync failed (not yet rebuilt)."""
        return self.failed is not None or self.fileset.failing

    @property
    def errors(self):
        return self._failure.count + self._file_errors + self.fileset.errors

    # -- start-up ---------------------------------------------------------------

    def open(self, core):
        """Lock the directory, replay every file into core, start a new file and
        a spare. Returns the job count."""
        for _ in self.opening(core):
            pass
        return self.replayed[1]

    def opening(self, core):
        """open(), one file at a time: yields (files replayed, files) after each
        file, so that the caller's loop can serve (say, /readyz) meanwhile."""
        self.dir.lock()
        yield from self._replay(core)

    def detach(self):
        """After on_failure, on the loop's thread: hear nothing more from the
        sync threads. repair() and reopen() follow."""
        self._turn.cancel()
        self._stall.cancel()
        self._durability.detach()

    def repair(self):
        """Stop the threads and cut the files back to what is on disk. It waits
        for the disk: run it off the loop. Raises BinlogError when the disk
        will not even take the cut."""
        self._cut_back()

    def reopen(self, core):
        """Replay the repaired files into core (a new engine), as a restart
        would, and go on writing after them; yields as opening() does."""
        self._file_errors += self.fileset.errors
        self._reset()
        yield from self._replay(core)

    def _cut_back(self):
        # Records past the last good fsync may not be on disk (for -F: past
        # the last whole commit), but the page cache would still show them to
        # a replay: the files end there, on disk too. ids go on after every
        # id handed out, even one whose record the cut takes back (-f MS): no
        # id is acknowledged twice. The marker names the next id, one no job
        # can have: a marker is a delete record to replay, and the newest job
        # may well be on disk.
        self._durability.stop()
        self.fileset.abandon()
        seq, end = self._durability.good
        removed = cut_back(self.dir, seq, end, id_marker(self.core.max_id + 1))
        event(logging.WARNING, "binlog-cut-back", "binlog.%(file)d cut back to " + counted(end, "byte")
              + ", what is known to be on disk; " + counted(len(removed), "later file") + " removed",
              file=seq, bytes=end, removed=len(removed))

    def _replay(self, core):
        self.core = core
        self.replayed = yield from self.fileset.replay(core)
        first = self.fileset.make(core.wal_status().reserved + FILE_FIRST_RECORD, first=True)
        core.wal_start(first.seq, first.cap, first.used)
        self.fileset.make_current(first.seq)
        self._durability.start((first.seq, first.used))
        self._durability.file(self.dir.file_path(first.seq))
        # The engine's first record (the highest id so far) is on disk before
        # older files can go.
        self._write_segments(*core.take_wal())
        self.fileset.offer_spare(core, core.wal_status().reserved)
        self._reclaim.add(self.fileset.collect(core), core.logged)

    # -- the Sink the engine's hooks reach (they never call into it) ---------------

    def schedule(self):
        """Records are waiting: commit them once this loop turn's work is done."""
        if self.failed is None:
            self._turn.schedule()

    def end_of_turn(self):
        """The loop turn's reads have run: commit their records now."""
        self._turn.end_of_turn()

    def next_file(self, need, replace):
        """The engine's spare is used up, or too small (replace: its number):
        a file with room for `need` bytes of records, made now. Returns (seq,
        capacity, bytes used) or None when the disk cannot give one."""
        if self.failed is not None:
            return None
        if replace:
            self.fileset.discard(replace)
        f = self.fileset.make(need)
        if f is None:
            return None
        self.fileset.spare_made(f)
        return f.seq, f.cap, f.used

    def commit(self):
        """Write this turn's records with one write per file, then sync as -f
        says and let out the replies that were waiting for them."""
        if self.failed is not None:
            return
        self._write_segments(*self._take())
        if self.failed is not None:
            return
        wal = self.core.wal_status()
        self.fileset.offer_spare(self.core, wal.reserved)
        if wal.files > 1:                  # with one file there is nothing to reclaim
            self._maintain()
        self._reclaim.durable(self._durability.synced_seq)

    def _take(self):
        # The engine's new records, after those a write short of memory left
        segments, seq = self.core.take_wal()
        return self._stall.take(segments), seq

    def _retry_stalled(self):
        self.commit()
        if self.failed is None:
            self._stall.resumed()

    def _write_segments(self, segments, seq):
        # Each segment to its file, moving on to the next file where the
        # engine did; then the records up to seq are written.
        files = self.fileset
        for i, (file_seq, data) in enumerate(segments):
            if file_seq != files.cur.seq:
                done = files.cur.seq
                try:
                    files.finish(self._durability.finish)
                except OSError as e:
                    self._fail("finish", "finishing binlog.%(file)d: %(error)s", file=done, error=e.strerror)
                    return
                files.make_current(file_seq)
                try:
                    self._durability.file(self.dir.file_path(file_seq))
                except OSError as e:
                    self._fail("open", "opening binlog.%(file)d for its fsyncs: %(error)s",
                               file=file_seq, error=e.strerror)
                    return
            if data:
                start = files.cur.used
                try:
                    files.write(data)
                except OSError as e:
                    if not exhausted(e.errno):
                        self._fail("write", "binlog write to binlog.%(file)d failed: %(error)s",
                                   file=file_seq, error=e.strerror)
                        return
                    # nothing lost: the rest is written on a retry, before anything later
                    rest = memoryview(data)[files.cur.used - start:]
                    self._stall.hold([(file_seq, bytes(rest))] + list(segments[i + 1:]), e.errno,
                                     "a write to binlog.%d" % file_seq)
                    return
        self._durability.written(seq, (files.cur.seq, files.cur.used))

    # -- durability and failure -------------------------------------------------------

    def _durable(self, seq):
        self.core.set_durable(seq)
        # Files go once what made them unneeded is on disk, whatever -f lets
        # the replies do: a power loss must not take both.
        self._reclaim.durable(self._durability.synced_seq)

    def _sync_failed(self, err):
        f = self.fileset.cur
        self._fail("fsync", "fsync of binlog.%(file)d failed: %(error)s",
                   file=f.seq if f is not None else 0, error=os.strerror(err))

    def _fail(self, op, text, **fields):
        # Records past the last good fsync may not be on disk, and the
        # engine holds them: write nothing more, and have the server stop
        # serving from it and rebuild() (once).
        if self._failure.happen(op, text, **fields):
            self._turn.cancel()

    # -- reclaiming -----------------------------------------------------------

    def _maintain(self):
        # Reclaim files no live job needs; when most of the disk is dead
        # records, re-log the oldest file's jobs forward, a batch per turn.
        core, files = self.core, self.fileset
        gone = files.collect(core)
        wal = core.wal_status()
        if compaction_due(files.closed_bytes, wal.used, wal.live, wal.reserved, self.max_size, wal.files):
            if core.wal_migrate(MIGRATE_BATCH):
                gone += files.collect(core)
        self._reclaim.add(gone, core.logged)

    # -- shutdown ---------------------------------------------------------------

    def close(self):
        """Clean shutdown: everything on disk, the current file cut to size, no
        spare left. After a failure the files are cut back to what is on disk
        instead, so that the next start replays nothing the disk may not hold."""
        self._turn.cancel()
        self._stall.cancel()
        if self.failed is None and self.fileset.cur is not None:
            self._write_segments(*self._take())
            if self._stall.segments is not None:
                self._fail("write", "binlog write to binlog.%(file)d failed at shutdown: short of "
                           "memory", file=self._stall.segments[0][0])
        if self.failed is None and self._durability.stop():
            self._sync_failed(self._durability.last_error)
        if self.failed is None:
            self._close_files()
        if self.failed is not None:
            try:
                self._durability.detach()
                self._cut_back()
            except BinlogError as e:
                event(logging.ERROR, "binlog-error", "%(error)s", op="cut", error=str(e))
        self.dir.unlock()

    def _close_files(self):
        self.fileset.close_spares()
        f = self.fileset.cur
        if f is None:
            return
        try:
            f.seal(self.fsync)
        except OSError as e:
            self._fail("close", "closing binlog.%(file)d: %(error)s", file=f.seq, error=e.strerror)
            return
        self._durable(self._durability.written_seq)
        f.close()
        self.fileset.cur = None

    # -- health and metrics (the DiskLog, fastbean.wal) -------------------------------

    @property
    def disk(self):
        return self

    @property
    def files(self):
        return self.fileset.files

    @property
    def disk_bytes(self):
        """Bytes the files take: the older ones as written, the current one and
        the ones made ahead of use (the spare) as allocated."""
        return self.fileset.disk_bytes(self.core.wal_status().capacity if self.core is not None else 0)

    def histograms(self):
        """The sync threads' fsync-latency and group-commit histograms, or None
        without an fsync policy (see SyncThread.histograms)."""
        return self._durability.histograms()
