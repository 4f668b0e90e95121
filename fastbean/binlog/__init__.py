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
"""
import logging
import os
import time

from fastbean.binlog.durability import Durability
from fastbean.binlog.files import Directory, blocks
from fastbean.binlog.threads import ZeroFill
from fastbean.config import DEFAULT_FSYNC_MS
from fastbean.engine.core import FILE_FIRST_RECORD, FILE_HEADER, id_marker
from fastbean.errors import BinlogError
from fastbean.logs import event
from fastbean.wal import MIGRATE_BATCH, Reclaim, TurnCommit, compaction_due


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
        self.errors = 0             # failures so far
        self.replayed = None        # (files, jobs, seconds, bytes dropped) once open
        self._reset()

    def _reset(self):
        self.core = None
        self.cur = None             # the File being written
        self.sizes = {}             # seq -> bytes on disk, older files only
        self.closed_bytes = 0       # bytes of the older files the engine still needs
        self.leaving_bytes = 0      # bytes of those it no longer needs, still on disk (Reclaim)
        self._ready = {}            # seq -> File made, not yet current (the spare and later ones)
        self._spare = 0             # the number of the file the engine has as its spare; 0 if none
        self._fill_spare = 0        # the number of the file the zero-filler fills next; 0 if none
        self._next_seq = 1          # the number the next new file gets
        self._alloc_failed = False  # the last attempt to make a file failed (logged once)
        self.failing = False        # the disk refuses new files, or a write or fsync failed
        self.failed = None          # what failed for good (write, fsync, finish): nothing more is written
        self._turn = TurnCommit(self.loop, self.commit)
        self._reclaim = Reclaim(self._remove)
        self._durability = Durability(self.loop, self.fsync and self.loop is not None, self.fsync_ms,
                                      self._durable, self._sync_failed)
        self._filler = None         # ZeroFill, with -f 0 (see binlog/threads.pyx)

    @property
    def path(self):
        return self.dir.path

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
        self._durability.detach()

    def repair(self):
        """Stop the threads and cut the files back to what is on disk. It waits
        for the disk: run it off the loop. Raises BinlogError when the disk
        will not even take the cut."""
        self._cut_back()

    def reopen(self, core):
        """Replay the repaired files into core (a new engine), as a restart
        would, and go on writing after them; yields as opening() does."""
        self._reset()
        yield from self._replay(core)

    def _cut_back(self):
        # Records past the last good fsync may not be on disk (for -F: past
        # the last whole commit), but the page cache would still show them to
        # a replay: the files end there, on disk too.
        self._abandon()
        seq, end = self._durability.good
        try:
            # ids go on after every id handed out, even one whose record the
            # cut takes back (-f MS): no id is acknowledged twice. The marker
            # names the next id, one no job can have: a marker is a delete
            # record to replay, and the newest job may well be on disk.
            removed = self.dir.cut_back(seq, end, id_marker(self.core.max_id + 1))
        except OSError as e:
            raise BinlogError("cannot cut binlog.%d back to its %d bytes on disk: %s"
                              % (seq, end, e.strerror)) from None
        event(logging.WARNING, "binlog-cut-back", "binlog.%(file)d cut back to %(bytes)d bytes, "
              "what is known to be on disk; %(removed)d later files removed",
              file=seq, bytes=end, removed=len(removed))

    def _replay(self, core):
        self.core = core
        seqs = self.dir.existing()
        t0 = time.monotonic()
        dropped = missing = 0
        if seqs:
            total = seqs[-1] - seqs[0] + 1
            for seq in range(seqs[0], seqs[-1] + 1):
                try:
                    with open(self.dir.file_path(seq), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    event(logging.WARNING, "binlog-missing", "binlog.%(file)d is missing; continuing",
                          file=seq)
                    missing += 1
                    data = b""
                except OSError as e:
                    raise BinlogError("cannot read binlog.%d: %s" % (seq, e.strerror)) from None
                records, end, reason = core.replay(data, seq)
                if reason is not None:
                    lost = len(data) - end
                    dropped += lost
                    event(logging.WARNING, "replay-dropped",
                          "binlog.%(file)d: %(reason)s: %(bytes)d bytes after record %(records)d "
                          "not replayed; you may be missing data",
                          file=seq, reason=reason, bytes=lost, records=records)
                # Count the records, not the file: a file left by a crash is still
                # its full preallocated size, and taking those zeros for dead
                # records would re-log every replayed job at once (beanstalkd
                # does not, and binlog-records-written would show it).
                self.sizes[seq] = end
                self.closed_bytes += end
                yield seq - seqs[0] + 1, total
            self._next_seq = seqs[-1] + 1
        jobs = core.replay_finish()
        seconds = time.monotonic() - t0
        self.replayed = (len(seqs), jobs, seconds, dropped)
        if seqs:
            event(logging.INFO, "replay",
                  "replayed %(jobs)d jobs from %(files)d binlog files in %(seconds).3f s"
                  + (", %(dropped_bytes)d bytes dropped" if dropped else "")
                  + (", %(missing_files)d files missing" if missing else ""),
                  jobs=jobs, files=len(seqs), seconds=round(seconds, 3), dropped_bytes=dropped,
                  missing_files=missing, directory=self.path)
        if self.fsync and self.fsync_ms == 0 and self.loop is not None:
            # Group commits wait on every fdatasync: keep them to overwrites.
            self._filler = ZeroFill()
        live, resv, used, cap, nfiles = core.wal_status()
        first = self._make(resv + FILE_FIRST_RECORD)
        if first is None:
            raise BinlogError("cannot create a binlog file in %s" % self.path)
        core.wal_start(first.seq, first.cap, first.used)
        self._make_current(first.seq)
        self._durability.start((first.seq, first.used))
        self._durability.file(self.dir.file_path(first.seq))
        # The engine's first record (the highest id so far) is on disk before
        # older files can go.
        self._write_segments(*core.take_wal())
        self._offer_spare(core.wal_status()[1])
        self._reclaim.add(self._collect(), core.logged)

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
            self._discard(replace)
        f = self._make(need)
        if f is None:
            return None
        self._spare = f.seq
        return f.seq, f.cap, f.used

    def commit(self):
        """Write this turn's records with one write per file, then sync as -f
        says and let out the replies that were waiting for them."""
        if self.failed is not None:
            return
        self._write_segments(*self.core.take_wal())
        if self.failed is not None:
            return
        live, resv, used, cap, nfiles = self.core.wal_status()
        self._offer_spare(resv)
        if nfiles > 1:                  # with one file there is nothing to reclaim
            self._maintain()
        self._reclaim.durable(self._durability.synced_seq)

    # -- files ------------------------------------------------------------------

    def _make(self, need, cap=0):
        # A new preallocated file, binlog.<_next_seq>, with its header: room
        # for -s bytes of new records beyond `need` (the room kept for the
        # live jobs' deletes), or cap bytes. None when the disk cannot give one.
        seq = self._next_seq
        cap = blocks(cap or self.max_size + need + len(FILE_HEADER))
        try:
            f = self.dir.make(seq, cap, fill=self._filler is not None)
        except OSError as e:
            if not self._alloc_failed:      # a full disk fails every attempt: say it once
                self._alloc_failed = self.failing = True
                self.errors += 1
                event(logging.ERROR, "binlog-error", "cannot create or allocate %(bytes)d bytes "
                      "for %(path)s: %(error)s; changes are refused until there is room",
                      op="allocate", bytes=cap, path=self.dir.file_path(seq), error=e.strerror)
            return None
        if self._alloc_failed:
            self._alloc_failed = self.failing = False
            event(logging.WARNING, "binlog-recovered", "binlog files can be made again "
                  "(%(errors)d errors so far)", errors=self.errors)
        self._ready[seq] = f
        self._next_seq += 1
        return f

    def _discard(self, seq):
        # A made file nothing was written to, the newest one: gone again.
        f = self._ready.pop(seq)
        if seq == self._fill_spare:
            self._filler.spare(-1, 0, 0)
            self._fill_spare = 0
        self.dir.discard(f)
        if seq == self._spare:
            self._spare = 0
        self._next_seq = seq

    def _offer_spare(self, resv):
        # Keep a spare ready, big enough for -s bytes beyond the deletes the
        # engine keeps room for (resv), with an eighth to spare for their growth.
        need = resv + resv // 8 + FILE_FIRST_RECORD
        if self._spare:
            f = self._ready[self._spare]
            if f.cap - f.used >= self.max_size + resv + FILE_FIRST_RECORD:
                return
            self._discard(self._spare)      # the backlog outgrew it
        f = self._make(need)
        if f is None:
            return                          # the engine asks again when it needs one
        self._spare = f.seq
        if self._filler is not None:
            self._filler.spare(f.fill_fd, f.used, f.cap)
            f.fill_fd = -1
            self._fill_spare = f.seq
        self.core.wal_spare(f.seq, f.cap, f.used)

    def _make_current(self, seq):
        f = self.cur = self._ready.pop(seq)
        if self._filler is not None:
            if seq == self._fill_spare:
                self._filler.promote()
                self._fill_spare = 0
            else:
                err = self._filler.take_error()
                if err:
                    event(logging.WARNING, "binlog-zero-fill-failed",
                          "writing zeros ahead of the records of binlog.%(file)d failed: "
                          "%(error)s; its fsyncs stay slower", file=seq - 1, error=os.strerror(err))
                self._filler.file(f.fill_fd, f.used, f.cap)
            f.fill_fd = -1
        if seq == self._spare:
            self._spare = 0

    def _finish(self):
        # The current file stops being current: cut the unused preallocation,
        # have it synced (on a sync thread: its last records get no other
        # fsync). Its records are all written.
        f = self.cur
        try:
            os.ftruncate(f.fd, f.used)
            self._durability.finish(f.fd)
        except OSError as e:
            self._fail("finish", "finishing binlog.%(file)d: %(error)s", file=f.seq, error=e.strerror)
        f.close()
        self.cur = None
        self.sizes[f.seq] = f.used
        self.closed_bytes += f.used

    def _write_segments(self, segments, seq):
        # Each segment to its file, moving on to the next file where the
        # engine did; then the records up to seq are written.
        for file_seq, data in segments:
            if file_seq != self.cur.seq:
                self._finish()
                if self.failed is not None:
                    return
                self._make_current(file_seq)
                self._durability.file(self.dir.file_path(file_seq))
            if data and not self._write(data):
                return
        self._durability.written(seq, (self.cur.seq, self.cur.used))

    def _write(self, data):
        f = self.cur
        if self._filler is not None:
            self._filler.claim(f.used + len(data))
        view = memoryview(data)
        while view:
            try:
                n = os.pwrite(f.fd, view, f.used)
            except InterruptedError:
                continue
            except OSError as e:
                # The space was preallocated, so this is a device error.
                self._fail("write", "binlog write to binlog.%(file)d failed: %(error)s",
                           file=f.seq, error=e.strerror)
                return False
            f.used += n
            view = view[n:]
        return True

    # -- durability and failure -------------------------------------------------------

    def _durable(self, seq):
        self.core.set_durable(seq)
        # Files go once what made them unneeded is on disk, whatever -f lets
        # the replies do: a power loss must not take both.
        self._reclaim.durable(self._durability.synced_seq)

    def _sync_failed(self, err):
        f = self.cur
        self._fail("fsync", "fsync of binlog.%(file)d failed: %(error)s",
                   file=f.seq if f is not None else 0, error=os.strerror(err))

    def _fail(self, op, text, **fields):
        # Records past the last good fsync may not be on disk, and the
        # engine holds them: write nothing more, and have the server stop
        # serving from it and rebuild() (once).
        if self.failed is not None:
            return
        self.failed = op
        self.failing = True
        self.errors += 1
        self._turn.cancel()
        event(logging.ERROR, "binlog-error", text + "; no more records are written",
              op=op, **fields)
        if self.on_failure is not None and self.loop is not None:
            self.loop.call_soon(self.on_failure, op)

    def _abandon(self):
        # Stop using the files, writing nothing: the threads, the open files.
        self._durability.stop()
        if self._filler is not None:
            self._filler.stop()
            self._filler = None
        for f in list(self._ready.values()) + [self.cur]:
            if f is not None:
                f.close()

    # -- reclaiming -----------------------------------------------------------

    def _maintain(self):
        # Reclaim files no live job needs; when most of the disk is dead
        # records, re-log the oldest file's jobs forward, a batch per turn.
        core = self.core
        gone = self._collect()
        live, resv, used, cap, nfiles = core.wal_status()
        if compaction_due(self.closed_bytes, used, live, resv, self.max_size, nfiles):
            if core.wal_migrate(MIGRATE_BATCH):
                gone += self._collect()
        self._reclaim.add(gone, core.logged)

    def _collect(self):
        # Files the engine no longer needs: they stop counting for compaction
        # at once, and leave the disk when Reclaim says.
        gone = self.core.wal_collect()
        for seq in gone:
            size = self.sizes.get(seq, 0)
            self.closed_bytes -= size
            self.leaving_bytes += size
        return gone

    def _remove(self, seqs):
        for seq in seqs:
            self.leaving_bytes -= self.sizes.pop(seq, 0)
        self.dir.remove(seqs)

    # -- shutdown ---------------------------------------------------------------

    def close(self):
        """Clean shutdown: everything on disk, the current file cut to size, no
        spare left. After a failure the files are cut back to what is on disk
        instead, so that the next start replays nothing the disk may not hold."""
        self._turn.cancel()
        if self.failed is None and self.cur is not None:
            self._write_segments(*self.core.take_wal())
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
        for seq in sorted(self._ready, reverse=True):
            self._discard(seq)
        if self._filler is not None:
            self._filler.stop()
            self._filler = None
        f = self.cur
        if f is None:
            return
        try:
            os.ftruncate(f.fd, f.used)
            if self.fsync:
                os.fsync(f.fd)
        except OSError as e:
            self._fail("close", "closing binlog.%(file)d: %(error)s", file=f.seq, error=e.strerror)
            return
        self._durable(self._durability.written_seq)
        f.close()
        self.cur = None

    # -- health and metrics -------------------------------------------------------

    @property
    def files(self):
        return sorted(self.sizes) + ([self.cur.seq] if self.cur is not None else [])

    @property
    def disk_bytes(self):
        """Bytes the files take: the older ones as written, the current one and
        the ones made ahead of use (the spare) as allocated."""
        current = self.core.wal_status()[3] if self.cur is not None else 0
        return (self.closed_bytes + self.leaving_bytes + current
                + sum(f.cap for f in self._ready.values()))

    def histograms(self):
        """The sync threads' fsync-latency and group-commit histograms, or None
        without an fsync policy (see SyncThread.histograms)."""
        return self._durability.histograms()
