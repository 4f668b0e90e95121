"""Binlog: the binlog.N files of one directory, in beanstalkd 1.12's format.

The engine encodes the records (the format is _wal.pxi's) and keeps the
space accounting; this module owns the files: the directory lock,
preallocation, the spare file kept ready for when the current one is full,
the commit of each loop turn's records (one write, and one fsync with -f 0),
the fsync policy, reclaiming old files, and replay at start-up.

Space: every file is preallocated, and the current file always keeps room for
a delete record of every live job, so a full disk can refuse a put but never
a delete. The engine moves on to the spare by itself, in the middle of a
command; this module learns of it at the next commit (take_wal() then has a
segment for the spare), finishes the old file there (its fsync on the sync
thread) and makes the next spare.

With --replicate, replication.py drives the files instead (mirror_*): the
directory mirrors the stream's parts, and the engine's records come here
through append().
"""
import fcntl
import logging
import os
import time

from fastbean._core import FILE_FIRST_RECORD, FILE_HEADER
from fastbean._sync import SyncThread, ZeroFill
from fastbean.config import DEFAULT_FSYNC_MS, FSYNC_THREADS
from fastbean.errors import BinlogError, BinlogLockedError
from fastbean.logs import event

BLOCK = 4096                # files are allocated in whole blocks
MIGRATE_BATCH = 2048        # jobs re-logged per commit while compacting
MIRROR_MARK = "replicated"  # names the stream a replicated node's directory mirrors


class _File:
    """A file made ahead of use: the spare, or one made in the middle of a turn."""

    __slots__ = ("fd", "fill_fd", "cap", "used")

    def __init__(self, fd, fill_fd, cap, used):
        self.fd, self.fill_fd, self.cap, self.used = fd, fill_fd, cap, used


class Binlog:
    def __init__(self, loop, directory, max_size, fsync=True, fsync_ms=DEFAULT_FSYNC_MS):
        self.core = None            # the engine, from open() on
        self.loop = loop
        self.dir = directory
        self.max_size = max(int(max_size), 1)
        self.fsync = fsync
        self.fsync_ms = fsync_ms
        self.seq = 0                # number of the current file
        self.fd = -1
        self.used = 0               # bytes written to the current file
        self.closed_bytes = 0       # bytes on disk in the older files
        self.sizes = {}             # seq -> bytes on disk, older files only
        self._ready = {}            # seq -> _File made, not yet current (the spare and later ones)
        self._spare = 0             # the number of the file the engine has as its spare; 0 if none
        self._fill_spare = 0        # the number of the file the zero-filler fills next; 0 if none
        self._next_seq = 1          # the number the next new file gets
        self._alloc_failed = False  # the last attempt to make a spare failed (logged once)
        self._lock_fd = -1
        self._commit_pending = False
        self._written_seq = 0       # records written to the files
        self._synced_seq = 0        # records fsynced
        self._last_sync = 0.0
        self._sync_timer = None     # -f MS: the fsync due at most MS after a write
        self._asked_seq = 0         # records the sync thread has been asked to sync
        self._syncer = None         # SyncThread, with an fsync policy
        self._filler = None         # ZeroFill, with -f 0 (see _sync.pyx)
        self.failing = False        # the last write, fsync or new file failed
        self._failed_seq = 0        # records written when it failed
        self.errors = 0             # failures so far
        self.replayed = None        # (files, jobs, seconds, bytes dropped) once open
        self._fail_op = None        # what failed: write, fsync, create, allocate, finish, close
        # Where durability goes: the engine (None), or replication.py, which
        # lets a reply out once the stream has its records too.
        self.durable = None
        self.mirror = False         # replication.py drives the files (mirror_open)
        self._write_failed = False  # mirror: a write failed since the last written()

    # -- start-up ---------------------------------------------------------------

    def path(self, seq):
        return os.path.join(self.dir, "binlog.%d" % seq)

    def lock(self):
        if not os.path.isdir(self.dir):
            raise BinlogError("binlog directory %s does not exist" % self.dir)
        fd = os.open(os.path.join(self.dir, "lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise BinlogLockedError("failed to lock binlog dir %s: %s (is another server using it?)"
                                    % (self.dir, e.strerror)) from None
        self._lock_fd = fd

    def existing(self):
        seqs = []
        for name in os.listdir(self.dir):
            if name.startswith("binlog.") and name[7:].isdigit():
                seqs.append(int(name[7:]))
        return sorted(seqs)

    def open(self, core):
        """Lock the directory, replay every file into core, start a new file and
        a spare. Returns the job count."""
        for _ in self.opening(core):
            pass
        return self.replayed[1]

    def opening(self, core):
        """open(), one file at a time: yields (files replayed, files) after each
        file, so that the caller's loop can serve (say, /readyz) meanwhile."""
        self.core = core
        self.lock()
        seqs = self.existing()
        t0 = time.monotonic()
        dropped = missing = 0
        if seqs:
            total = seqs[-1] - seqs[0] + 1
            for seq in range(seqs[0], seqs[-1] + 1):
                try:
                    with open(self.path(seq), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    event(logging.WARNING, "binlog-missing", "binlog.%(file)d is missing; continuing",
                          file=seq)
                    missing += 1
                    data = b""
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
            self.seq = self._next_seq = seqs[-1]
            self._next_seq += 1
        jobs = core.replay_finish()
        seconds = time.monotonic() - t0
        self.replayed = (len(seqs), jobs, seconds, dropped)
        if seqs:
            event(logging.INFO, "replay",
                  "replayed %(jobs)d jobs from %(files)d binlog files in %(seconds).3f s"
                  + (", %(dropped_bytes)d bytes dropped" if dropped else "")
                  + (", %(missing_files)d files missing" if missing else ""),
                  jobs=jobs, files=len(seqs), seconds=round(seconds, 3), dropped_bytes=dropped,
                  missing_files=missing, directory=self.dir)
        if self.fsync and self.fsync_ms == 0:
            # Group commits wait on every fdatasync: keep them to overwrites.
            self._filler = ZeroFill()
        live, resv, used, cap, nfiles = core.wal_status()
        first = self._make(resv + FILE_FIRST_RECORD)
        if first is None:
            raise BinlogError("cannot create a binlog file in %s" % self.dir)
        core.wal_start(self._next_seq - 1, first.cap, first.used)
        self._make_current(self._next_seq - 1)
        # The engine's first record (the highest id so far) is on disk before
        # older files can go.
        self._write_segments(*core.take_wal())
        self._offer_spare(core.wal_status()[1])
        if self.fsync and self.loop is not None:
            self._sync_thread()
        self._collect()

    # -- hooks for the engine (they never call into it) ---------------------------

    def schedule(self):
        """Records are waiting: commit them once this loop turn's work is done."""
        if not self._commit_pending:
            self._commit_pending = True
            self.loop.call_soon(self._scheduled_commit)

    def next_file(self, need, replace):
        """The engine's spare is used up, or too small (replace: its number):
        a file with room for `need` bytes of records, made now. Returns (seq,
        capacity, bytes used) or None when the disk cannot give one."""
        if replace:
            self._discard(replace)
        f = self._make(need)
        if f is None:
            return None
        self._spare = self._next_seq - 1
        return self._spare, f.cap, f.used

    # -- files ------------------------------------------------------------------

    def _make(self, need, cap=0):
        # A new preallocated file, binlog.<_next_seq>, with its header: room
        # for -s bytes of new records beyond `need` (the room kept for the
        # live jobs' deletes), or cap bytes. None when the disk cannot give one.
        seq = self._next_seq
        if not cap:
            cap = self.max_size + need + len(FILE_HEADER)
        cap = (cap + BLOCK - 1) // BLOCK * BLOCK
        path = self.path(seq)
        fill_fd = -1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self._alloc_error("create", "cannot create %(path)s: %(error)s", path=path,
                              error=e.strerror)
            return None
        try:
            if self._filler is not None:
                # Its own open file: the kernel reports a failed writeback once
                # per open file, and that report belongs to the group commit.
                fill_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            os.fchmod(fd, 0o400)            # as beanstalkd creates them
            os.posix_fallocate(fd, 0, cap)
            os.pwrite(fd, FILE_HEADER, 0)
        except OSError as e:
            self._alloc_error("allocate", "cannot allocate %(bytes)d bytes for %(path)s: "
                              "%(error)s", bytes=cap, path=path, error=e.strerror)
            os.close(fd)
            if fill_fd >= 0:
                os.close(fill_fd)
            os.unlink(path)
            return None
        self._alloc_failed = False
        if self._fail_op in ("create", "allocate"):
            self._recovered()
        f = self._ready[seq] = _File(fd, fill_fd, cap, len(FILE_HEADER))
        self._next_seq += 1
        return f

    def _alloc_error(self, op, text, **fields):
        # A full disk fails every attempt until space comes back: say it once.
        if not self._alloc_failed:
            self._failed(op, text, **fields)
            self._alloc_failed = True

    def _discard(self, seq):
        # A made file nothing was written to, the newest one: gone again.
        f = self._ready.pop(seq)
        os.close(f.fd)
        if f.fill_fd >= 0:
            os.close(f.fill_fd)
        if seq == self._fill_spare:
            self._filler.spare(-1, 0, 0)
            self._fill_spare = 0
        os.unlink(self.path(seq))
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
        self._spare = self._next_seq - 1
        if self._filler is not None:
            self._filler.spare(f.fill_fd, f.used, f.cap)
            f.fill_fd = -1
            self._fill_spare = self._spare
        self.core.wal_spare(self._spare, f.cap, f.used)

    def _make_current(self, seq):
        f = self._ready.pop(seq)
        self.fd, self.seq, self.used = f.fd, seq, f.used
        if self._syncer is not None:
            self._syncer.file(self.fd)
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
        if seq == self._spare:
            self._spare = 0

    def _finish(self):
        # The current file stops being current: cut the unused preallocation,
        # have it synced (on the sync thread: its last records get no other
        # fsync). Its records are all written.
        fd, seq, used = self.fd, self.seq, self.used
        try:
            os.ftruncate(fd, used)
            if self.fsync:
                self._sync_thread().finish(fd)
        except OSError as e:
            self._failed("finish", "finishing binlog.%(file)d: %(error)s", file=seq,
                         error=e.strerror)
            self.core.set_failed(self._written_seq)
        os.close(fd)
        self.fd = -1
        self.sizes[seq] = used
        self.closed_bytes += used

    def _write_segments(self, segments, seq):
        # Each segment to its file, moving on to the next file where the
        # engine did. Written up to record seq, or the connections waiting
        # on them are told it failed.
        ok = True
        self._written_seq = seq
        for file_seq, data in segments:
            if file_seq != self.seq:
                self._finish()
                self._make_current(file_seq)
            if data and ok:
                ok = self._write(data)
        if not ok:
            self.core.set_failed(seq)

    def _write(self, data):
        if self._filler is not None:
            self._filler.claim(self.used + len(data))
        view = memoryview(data)
        while view:
            try:
                n = os.pwrite(self.fd, view, self.used)
            except InterruptedError:
                continue
            except OSError as e:
                # The space was preallocated, so this is a device error. The
                # jobs are still in memory; say so loudly and keep serving.
                self._failed("write", "binlog write to binlog.%(file)d failed: %(error)s; %(bytes)d "
                             "bytes of records not on disk; closing the connections waiting on them",
                             file=self.seq, error=e.strerror, bytes=len(view))
                return False
            self.used += n
            view = view[n:]
        if not self.fsync and self.failing:
            self._recovered()
        return True

    # -- syncs ------------------------------------------------------------------

    def _sync_thread(self):
        if self._syncer is None:
            self._syncer = SyncThread(FSYNC_THREADS if self.fsync_ms == 0 else 1)
            if self.fd >= 0:
                self._syncer.file(self.fd)
            self.loop.add_reader(self._syncer.fileno(), self._sync_done)
        return self._syncer

    def _timed_sync(self):
        self._sync_timer = None
        self._start_sync()

    def _start_sync(self):
        # A sync thread covers every record written so far, while the loop
        # goes on running commands. With -f 0 their replies wait for it: that
        # is the group commit. Each turn's records ask at once; a thread
        # free by then starts on them, else the first to finish takes them
        # with whatever else has come.
        if self._asked_seq >= self._written_seq:
            return
        if self.fsync_ms:
            self._last_sync = time.monotonic()
        self._asked_seq = self._written_seq
        self._sync_thread().request(self._written_seq)

    def _sync_done(self):
        seq, err = self._syncer.collect()
        if err:
            # A failed writeback can take a page that also holds records
            # written after this sync was asked for, and the kernel reports
            # it only once: fail everything written so far.
            seq = self._written_seq
            self._failed("fsync", "fsync of binlog.%(file)d failed: %(error)s"
                         + ("; closing the connections waiting on it" if self.fsync_ms == 0 else ""),
                         file=self.seq, error=os.strerror(err))
        elif self.failing and seq > self._failed_seq:
            self._recovered()
        self._synced_seq = max(self._synced_seq, seq)
        if self.fsync_ms == 0:
            if err:
                self.core.set_failed(seq)
            else:
                self._durable(seq)
        else:
            self._arm_sync()

    def _arm_sync(self):
        # -f MS: sync at most MS ms after the last one, if anything is unsynced.
        if self._sync_timer is not None or self._asked_seq > self._synced_seq:
            return
        if self._written_seq <= self._synced_seq:
            return
        wait = self._last_sync + self.fsync_ms / 1000.0 - time.monotonic()
        if wait <= 0:
            self._start_sync()
        else:
            self._sync_timer = self.loop.call_later(wait, self._timed_sync)

    # -- commits ----------------------------------------------------------------

    def _scheduled_commit(self):
        if self._commit_pending:        # else the end of the turn committed already
            self.commit()

    def end_of_turn(self):
        """The loop turn's reads have run: commit their records now."""
        if self._commit_pending:
            self.commit()

    def commit(self):
        """Write this turn's records with one write per file, then sync as -f
        says and let out the replies that were waiting for them."""
        self._commit_pending = False
        self._write_segments(*self.core.take_wal())
        self._synced()
        live, resv, used, cap, nfiles = self.core.wal_status()
        self._offer_spare(resv)
        if nfiles > 1:                  # with one file there is nothing to reclaim
            self._maintain()

    def _synced(self):
        # The records written so far: sync them as -f says.
        if not self.fsync:
            self._durable(self._written_seq)
        elif self.fsync_ms == 0:
            self._start_sync()
        else:
            # Written records survive a crash of the process; -f bounds what a
            # power loss can take to about the last MS ms.
            self._durable(self._written_seq)
            self._arm_sync()

    def _durable(self, seq):
        if self.durable is not None:
            self.durable(seq)
        else:
            self.core.set_durable(seq)

    def _collect(self):
        self.remove(self.core.wal_collect())

    def _maintain(self):
        # Reclaim files no live job needs; when most of the disk is dead
        # records, re-log the oldest file's jobs forward, a batch per turn.
        self._collect()
        live, resv, used, cap, nfiles = self.core.wal_status()
        if nfiles > 1 and self.closed_bytes + used > 2 * (live + resv) + self.max_size:
            if self.core.wal_migrate(MIGRATE_BATCH):
                self._collect()

    def close(self):
        """Clean shutdown: everything on disk, the current file cut to size, no spare left."""
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self.fd >= 0 and not self.mirror:    # replication.py takes the records, and publishes them first
            self._write_segments(*self.core.take_wal())
        if self._syncer is not None:
            self.loop.remove_reader(self._syncer.fileno())
            self._syncer.stop()             # after the syncs it was given
            seq, err = self._syncer.collect()
            if err:
                self._failed("fsync", "fsync of a finished binlog file failed: %(error)s",
                             error=os.strerror(err))
                self.core.set_failed(self._written_seq)
            self._syncer = None
        for seq in sorted(self._ready, reverse=True):
            self._discard(seq)
        if self._filler is not None:
            self._filler.stop()
            self._filler = None
        if self.fd >= 0:
            try:
                os.ftruncate(self.fd, self.used)
                if self.fsync:
                    os.fsync(self.fd)
            except OSError as e:
                self._failed("close", "closing binlog.%(file)d: %(error)s", file=self.seq,
                             error=e.strerror)
                self.core.set_failed(self._written_seq)
            else:
                self._durable(self._written_seq)
            os.close(self.fd)
            self.fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- health and metrics -------------------------------------------------------

    def _failed(self, op, text, **fields):
        self.errors += 1
        self.failing = True
        self._fail_op = op
        self._failed_seq = self._written_seq
        event(logging.ERROR, "binlog-error", text, op=op, **fields)

    def _recovered(self):
        self.failing = False
        self._fail_op = None
        event(logging.WARNING, "binlog-recovered",
              "binlog.%(file)d: %(what)s succeed again (%(errors)d errors so far)",
              file=self.seq, what="writes and fsyncs" if self.fsync else "writes", errors=self.errors)

    @property
    def files(self):
        return sorted(self.sizes) + [self.seq]

    @property
    def disk_bytes(self):
        """Bytes the files take: the older ones as written, the current one and
        the ones made ahead of use (the spare) as allocated."""
        current = self.core.wal_status()[3] if self.fd >= 0 else 0
        return self.closed_bytes + current + sum(f.cap for f in self._ready.values())

    def histograms(self):
        """The sync thread's fsync-latency and group-commit histograms, or None
        without an fsync policy (see SyncThread.histograms)."""
        return None if self._syncer is None else self._syncer.histograms()

    # -- replication (replication.py drives the files) ---------------------------

    def mirror_open(self, stream):
        """With --replicate the directory mirrors the stream: binlog.N holds the
        records of the stream's part N, as this node applied or published them.
        The stream is the truth, so the files of an earlier run go; a directory
        with files of anything else is refused rather than emptied."""
        self.lock()
        self.mirror = True
        mark = os.path.join(self.dir, MIRROR_MARK)
        try:
            with open(mark) as f:
                owner = f.read().strip()
        except FileNotFoundError:
            owner = None
        if self.existing() and owner != stream:
            raise BinlogError("%s holds a binlog that is not a mirror of stream %s; "
                              "--replicate starts from the stream: give it an empty directory"
                              % (self.dir, stream))
        with open(mark, "w") as f:
            f.write(stream + "\n")
        self.mirror_reset()

    def mirror_reset(self):
        """The node rebuilds its queue from the stream: so does the directory."""
        # a sync in flight covered the old queue's records
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self._syncer is not None:
            self.loop.remove_reader(self._syncer.fileno())
            self._syncer.stop()
            self._syncer = None
        self._written_seq = self._synced_seq = self._asked_seq = 0
        self._write_failed = False
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for seq in self.existing():
            try:
                os.unlink(self.path(seq))
            except OSError as e:
                raise BinlogError("cannot remove binlog.%d: %s" % (seq, e.strerror)) from None
        self.sizes.clear()
        self.closed_bytes = 0
        self.seq = 0

    def mirror_part(self, seq, cap):
        """Part `seq` of the stream starts: binlog.<seq>, cap bytes allocated,
        is the current file from now on."""
        self._next_seq = seq
        if self._make(0, max(cap, BLOCK)) is None:
            self.core.set_failed(self._written_seq)
            return
        if self.fd >= 0:
            self._finish()
        self._make_current(seq)

    def mirror_write(self, data):
        """Records of the current part: a standby's as it applies them (synced
        when the file ends), a primary's before written()."""
        if self.fd >= 0 and data and not self._write(data):
            self._write_failed = True

    def written(self, seq):
        """A primary's records up to the engine's record seq are written:
        sync them as -f says."""
        self._written_seq = seq
        if self._write_failed:
            self._write_failed = False
            self.core.set_failed(seq)
        self._synced()

    def remove(self, seqs):
        """Files (or parts of the stream) no live job needs: they go."""
        for seq in seqs:
            self.closed_bytes -= self.sizes.pop(seq, 0)
            try:
                os.unlink(self.path(seq))
            except FileNotFoundError:
                pass
            except OSError as e:
                event(logging.ERROR, "binlog-remove-failed", "cannot remove binlog.%(file)d: "
                      "%(error)s", file=seq, error=e.strerror)
