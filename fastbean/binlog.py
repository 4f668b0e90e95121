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
"""
import fcntl
import logging
import os
import time

from fastbean._core import FILE_FIRST_RECORD, FILE_HEADER
from fastbean._sync import SyncThread, ZeroFill
from fastbean.config import DEFAULT_FSYNC_MS
from fastbean.errors import BinlogError, BinlogLockedError

log = logging.getLogger("fastbean")

BLOCK = 4096                # files are allocated in whole blocks
MIGRATE_BATCH = 2048        # jobs re-logged per commit while compacting


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
        # Commit right after the turn's reads have run: one write per turn.
        # Only -f 0 holds back while a sync is in flight (see _start_sync).
        self._eager = True
        self._written_seq = 0       # records written to the files
        self._synced_seq = 0        # records fsynced
        self._last_sync = 0.0
        self._sync_timer = None     # -f MS: the fsync due at most MS after a write
        self._asked_seq = 0         # records the sync thread has been asked to sync
        self._syncer = None         # SyncThread, started with the first sync
        self._filler = None         # ZeroFill, with -f 0 (see _sync.pyx)

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
        self.core = core
        self.lock()
        seqs = self.existing()
        t0 = time.monotonic()
        if seqs:
            for seq in range(seqs[0], seqs[-1] + 1):
                try:
                    with open(self.path(seq), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    log.warning("binlog.%d is missing; continuing", seq)
                    data = b""
                records, dropped, reason = core.replay(data, seq)
                if reason is not None:
                    log.warning("binlog.%d: %s: %d bytes after record %d not replayed; "
                                "you may be missing data", seq, reason, dropped, records)
                self.sizes[seq] = len(data)
                self.closed_bytes += len(data)
            self.seq = self._next_seq = seqs[-1]
            self._next_seq += 1
        jobs = core.replay_finish()
        if seqs:
            log.info("replayed %d jobs from %d binlog files in %.3f s",
                     jobs, len(seqs), time.monotonic() - t0)
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
        self._offer_spare()
        self._collect()
        return jobs

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

    def _make(self, need):
        # A new preallocated file, binlog.<_next_seq>, with its header: room
        # for -s bytes of new records beyond `need` (the room kept for the
        # live jobs' deletes). None when the disk cannot give one.
        seq = self._next_seq
        cap = (self.max_size + need + len(FILE_HEADER) + BLOCK - 1) // BLOCK * BLOCK
        path = self.path(seq)
        fill_fd = -1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self._alloc_error("cannot create %s: %s", path, e.strerror)
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
            self._alloc_error("cannot allocate %d bytes for %s: %s", cap, path, e.strerror)
            os.close(fd)
            if fill_fd >= 0:
                os.close(fill_fd)
            os.unlink(path)
            return None
        self._alloc_failed = False
        f = self._ready[seq] = _File(fd, fill_fd, cap, len(FILE_HEADER))
        self._next_seq += 1
        return f

    def _alloc_error(self, fmt, *args):
        # A full disk fails every attempt until space comes back: say it once.
        if not self._alloc_failed:
            log.error(fmt, *args)
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

    def _offer_spare(self):
        # Keep a spare ready, big enough for -s bytes beyond the deletes the
        # engine keeps room for, with an eighth to spare for their growth.
        live, resv, used, cap, nfiles = self.core.wal_status()
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
        if self._filler is not None:
            if seq == self._fill_spare:
                self._filler.promote()
                self._fill_spare = 0
            else:
                err = self._filler.take_error()
                if err:
                    log.warning("writing zeros ahead of the records of binlog.%d failed: %s; "
                                "its fsyncs stay slower", seq - 1, os.strerror(err))
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
            log.error("finishing binlog.%d: %s", seq, e.strerror)
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
                log.error("binlog write to binlog.%d failed: %s; %d bytes of records not on disk; "
                          "closing the connections waiting on them", self.seq, e.strerror, len(view))
                return False
            self.used += n
            view = view[n:]
        return True

    # -- syncs ------------------------------------------------------------------

    def _sync_thread(self):
        if self._syncer is None:
            self._syncer = SyncThread()
            self.loop.add_reader(self._syncer.fileno(), self._sync_done)
        return self._syncer

    def _timed_sync(self):
        self._sync_timer = None
        self._start_sync()

    def _start_sync(self):
        # The sync thread covers every record written so far, while the loop
        # goes on running commands. With -f 0 their replies wait for it: that
        # is the group commit.
        if self._asked_seq >= self._written_seq:
            return
        self._last_sync = time.monotonic()
        self._asked_seq = self._written_seq
        if self.fsync_ms == 0:
            self._eager = False
        self._sync_thread().request(self.fd, self._written_seq)

    def _sync_done(self):
        seq, err = self._syncer.collect()
        if err:
            # A failed writeback can take a page that also holds records
            # written after this sync was asked for, and the kernel reports
            # it only once: fail everything written so far.
            seq = self._written_seq
            log.error("fsync of binlog.%d failed: %s%s", self.seq, os.strerror(err),
                      "; closing the connections waiting on it" if self.fsync_ms == 0 else "")
        self._synced_seq = max(self._synced_seq, seq)
        if self.fsync_ms == 0:
            # The sync thread is idle again: the next turn's records start a
            # sync as soon as they have run instead of on the loop turn after,
            # so one group syncs while the next gathers.
            self._eager = self._asked_seq <= self._synced_seq
            if err:
                self.core.set_failed(seq)
            else:
                self.core.set_durable(seq)
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
        """The loop turn's reads have run: commit now, unless -f 0 waits for a sync."""
        if self._commit_pending and self._eager:
            self.commit()

    def commit(self):
        """Write this turn's records with one write per file, then sync as -f
        says and let out the replies that were waiting for them."""
        self._commit_pending = False
        self._write_segments(*self.core.take_wal())
        if not self.fsync:
            self.core.set_durable(self._written_seq)
        elif self.fsync_ms == 0:
            self._start_sync()
        else:
            # Written records survive a crash of the process; -f bounds what a
            # power loss can take to about the last MS ms.
            self.core.set_durable(self._written_seq)
            self._arm_sync()
        self._offer_spare()
        self._maintain()

    def _collect(self):
        for seq in self.core.wal_collect():
            size = self.sizes.pop(seq, 0)
            self.closed_bytes -= size
            try:
                os.unlink(self.path(seq))
            except FileNotFoundError:
                pass
            except OSError as e:
                log.error("cannot remove binlog.%d: %s", seq, e.strerror)

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
        if self.fd >= 0:
            self._write_segments(*self.core.take_wal())
        if self._syncer is not None:
            self.loop.remove_reader(self._syncer.fileno())
            self._syncer.stop()             # after the syncs it was given
            seq, err = self._syncer.collect()
            if err:
                log.error("fsync of a finished binlog file failed: %s", os.strerror(err))
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
                log.error("closing binlog.%d: %s", self.seq, e.strerror)
                self.core.set_failed(self._written_seq)
            else:
                self.core.set_durable(self._written_seq)
            os.close(self.fd)
            self.fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
