"""Binlog: the binlog.N files of one directory, in beanstalkd 1.12's format.

The engine encodes the records and keeps the space accounting; this module
owns the files: the directory lock, preallocation and rotation, the commit of
each loop turn's records (one write, and one fsync with -f 0), the fsync
policy, reclaiming old files, and replay at start-up.

Space: every file is preallocated, and the current file always keeps room for
a delete record of every live job, so a full disk can refuse a put but never
a delete.
"""
import fcntl
import logging
import os
import struct
import time

from fastbean._sync import SyncThread, ZeroFill
from fastbean.errors import BinlogError, BinlogLockedError
from fastbean.logs import event

VERSION = 7
HEADER = struct.pack("<i", VERSION)
SHORT = 84                  # bytes of a short record
BLOCK = 4096                # files are allocated in whole blocks
MIGRATE_BATCH = 2048        # jobs re-logged per commit while compacting
MIRROR_MARK = "replicated"  # names the stream a replicated node's directory mirrors


def marker(max_id):
    # A short "deleted" record of the highest id handed out. Replay (ours and
    # beanstalkd's) ignores it as a record of an unknown job but still counts
    # its id, so ids continue after a restart even when every job is gone.
    now = time.time_ns()
    rec = struct.pack("<QI4xqqi4xqqIIIIIB3s", max_id, 0, 0, 10**9, 2, now, 0, 0, 0, 0, 0, 0, 0,
                      b"fb\x01")       # signed like every record fastbean writes (see _wal.pxi)
    return struct.pack("<i", 0) + rec


class Binlog:
    def __init__(self, core, loop, directory, max_size, fsync=True, fsync_ms=50):
        self.core = core
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
        # Where durability goes: the engine, or replication.py, which lets a
        # reply out once the stream has its records too.
        self.durable = core.set_durable
        self.mirror = False         # replication.py drives the files (mirror_open)

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

    def open(self):
        """Lock the directory, replay every file, start a new one. Returns the job count."""
        for _ in self.opening():
            pass
        return self.replayed[1]

    def opening(self):
        """open(), one file at a time: yields (files replayed, files) after each
        file, so that the caller's loop can serve (say, /readyz) meanwhile."""
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
                records, end, reason = self.core.replay(data, seq)
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
            self.seq = seqs[-1]
        jobs = self.core.replay_finish()
        seconds = time.monotonic() - t0
        self.replayed = (len(seqs), jobs, seconds, dropped)
        if seqs:
            event(logging.INFO, "replay",
                  "replayed %(jobs)d jobs from %(files)d binlog files in %(seconds).3f s"
                  + (", %(dropped_bytes)d bytes dropped" if dropped else "")
                  + (", %(missing_files)d files missing" if missing else ""),
                  jobs=jobs, files=len(seqs), seconds=round(seconds, 3), dropped_bytes=dropped,
                  missing_files=missing, directory=self.dir)
        self.core.wal_enable(self)
        # Commit right after the turn's reads have run: one write per turn.
        # Only -f 0 holds back while a sync is in flight (see _start_sync).
        self.core.commit_eager = True
        if self.fsync and self.fsync_ms == 0:
            # Group commits wait on every fdatasync: keep them to overwrites.
            self._filler = ZeroFill()
        live, resv, used, cap, nfiles = self.core.wal_status()
        if not self._new_file(resv):
            raise BinlogError("cannot create a binlog file in %s" % self.dir)
        if self.fsync and self.loop is not None:
            self._start_syncer()
        self._collect()

    # -- called by the engine ---------------------------------------------------

    def schedule(self):
        """Records are waiting: commit them once this loop turn's work is done."""
        if not self._commit_pending:
            self._commit_pending = True
            self.loop.call_soon(self._scheduled_commit)

    def _scheduled_commit(self):
        if self._commit_pending:        # else the end of the turn committed already
            self.commit()

    def rotate(self, need):
        """The current file is full: start a new one with room for `need` bytes.

        Returns the new file's capacity, or 0 when the disk cannot give one (the
        engine then answers the command with an error and stays on this file).
        """
        self._write(*self.core.take_wal())
        if not self._new_file(need):
            return 0
        return self.core.wal_status()[3]

    # -- files ------------------------------------------------------------------

    def _new_file(self, need):
        head = HEADER
        if self.core.max_id and not self.core.has_job(self.core.max_id):
            head += marker(self.core.max_id)
        # -s bytes of new records, beyond the room kept for live jobs' deletes
        cap = self.max_size + need + len(head)
        cap = (cap + BLOCK - 1) // BLOCK * BLOCK
        if not self._create(self.seq + 1, cap, head):
            return False
        self.core.wal_new_file(self.seq, cap, len(head))
        return True

    def _create(self, seq, cap, head):
        # binlog.<seq>, cap bytes allocated, head written: the current file
        path = self.path(seq)
        fill_fd = -1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self._failed("create", "cannot create %(path)s: %(error)s", path=path, error=e.strerror)
            return False
        try:
            if self._filler is not None:
                # Its own open file: the kernel reports a failed writeback once
                # per open file, and that report belongs to the group commit.
                fill_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            os.fchmod(fd, 0o400)            # as beanstalkd creates them
            os.posix_fallocate(fd, 0, cap)
            os.pwrite(fd, head, 0)
        except OSError as e:
            self._failed("allocate", "cannot allocate %(bytes)d bytes for %(path)s: %(error)s",
                         bytes=cap, path=path, error=e.strerror)
            os.close(fd)
            if fill_fd >= 0:
                os.close(fill_fd)
            os.unlink(path)
            return False
        old = (self.fd, self.seq, self.used)
        self.fd, self.seq, self.used = fd, seq, len(head)
        if self._fail_op in ("create", "allocate"):
            self._recovered()
        if self._filler is not None:
            err = self._filler.take_error()
            if err:
                event(logging.WARNING, "binlog-zero-fill-failed",
                      "writing zeros ahead of the records of binlog.%(file)d failed: %(error)s; "
                      "its fsyncs stay slower", file=seq - 1, error=os.strerror(err))
            self._filler.file(fill_fd, len(head), cap)
        if old[0] >= 0:     # after the filler has let go of it
            self._finish(*old)
        return True

    def _finish(self, fd, seq, used):
        # A file stops being current: cut the unused preallocation, make it
        # durable. This fsync is the only one its last records get.
        try:
            os.ftruncate(fd, used)
            if self.fsync:
                os.fsync(fd)
        except OSError as e:
            self._failed("finish", "finishing binlog.%(file)d: %(error)s", file=seq, error=e.strerror)
            self.core.set_failed(self._written_seq)
        os.close(fd)
        self.sizes[seq] = used
        self.closed_bytes += used

    def _write(self, data, seq):
        self._written_seq = seq
        if not self._put(data):
            self.core.set_failed(seq)
            return False
        return True

    def _put(self, data):
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
        if self._syncer is None:
            self._start_syncer()
        self._asked_seq = self._written_seq
        if self.fsync_ms == 0 and not self.mirror:
            self.core.commit_eager = False
        self._syncer.request(self.fd, self._written_seq)

    def _start_syncer(self):
        self._syncer = SyncThread()
        self.loop.add_reader(self._syncer.fileno(), self._sync_done)

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
            # The sync thread is idle again: the next turn's records start a
            # sync as soon as they have run instead of on the loop turn after,
            # so one group syncs while the next gathers.
            if not self.mirror:
                self.core.commit_eager = self._asked_seq <= self._synced_seq
            if err:
                self.core.set_failed(seq)
            else:
                self.durable(seq)
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

    def commit(self):
        """Write this turn's records with one write, then sync as -f says and
        let out the replies that were waiting for them."""
        self._commit_pending = False
        self.append(*self.core.take_wal())
        self._maintain()

    def append(self, data, seq):
        """Write records up to the engine's record seq, then sync as -f says."""
        if data:
            self._write(data, seq)
        if not self.fsync:
            self.durable(self._written_seq)
        elif self.fsync_ms == 0:
            self._start_sync()
        else:
            # Written records survive a crash of the process; -f bounds what a
            # power loss can take to about the last MS ms.
            self.durable(self._written_seq)
            self._arm_sync()

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

    def _stop_syncing(self):
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self._syncer is not None:
            self.loop.remove_reader(self._syncer.fileno())
            self._syncer.stop()
            self._syncer = None

    def close(self):
        """Clean shutdown: everything on disk, the current file cut to size."""
        self._stop_syncing()
        if self._filler is not None:
            self._filler.stop()
            self._filler = None
        if self.fd >= 0:
            if not self.mirror:     # replication.py takes the records, and publishes them first
                self._write(*self.core.take_wal())
            try:
                os.ftruncate(self.fd, self.used)
                if self.fsync:
                    os.fsync(self.fd)
            except OSError as e:
                self._failed("close", "closing binlog.%(file)d: %(error)s", file=self.seq,
                             error=e.strerror)
                self.core.set_failed(self._written_seq)
            else:
                self.durable(self._written_seq)
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
        self._stop_syncing()        # a sync in flight covered the old queue's records
        self._written_seq = self._synced_seq = self._asked_seq = 0
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

    def mirror_part(self, seq, cap, head):
        """Part `seq` of the stream starts: binlog.<seq>, with `head` in it."""
        cap = max(cap, BLOCK)
        if not self._create(seq, cap, HEADER + head):
            self.core.set_failed(self._written_seq)

    def mirror_write(self, data):
        """A standby's records, as it applies them (synced when the file ends)."""
        if self.fd >= 0:
            self._put(data)

    def remove(self, seqs):
        """Parts of the stream no live job needs: their files go too."""
        for seq in seqs:
            self.closed_bytes -= self.sizes.pop(seq, 0)
            try:
                os.unlink(self.path(seq))
            except FileNotFoundError:
                pass
            except OSError as e:
                event(logging.ERROR, "binlog-remove-failed", "cannot remove binlog.%(file)d: "
                      "%(error)s", file=seq, error=e.strerror)

    # -- stats ------------------------------------------------------------------

    @property
    def files(self):
        return sorted(self.sizes) + [self.seq]

    @property
    def disk_bytes(self):
        """Bytes the files take: the older ones as written, the current one as allocated."""
        return self.closed_bytes + (self.core.wal_status()[3] if self.fd >= 0 else 0)

    def histograms(self):
        """The sync thread's fsync-latency and group-commit histograms, or None
        without an fsync policy (see SyncThread.histograms)."""
        return None if self._syncer is None else self._syncer.histograms()
