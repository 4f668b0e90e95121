"""The binlog's files as the engine uses them: replayed at start, the one
being written (cur), the spare made ahead for when it is full, the older
ones on disk (their sizes, which compaction counts), and with -f 0 the
zero-filler that keeps the bytes just ahead of the records written
(binlog/threads.pyx).

Every file is preallocated (beanstalkd's rule: a full disk refuses a put
but never a delete). A file the disk cannot give is said once, until the
disk gives one again (`failing` meanwhile).
"""
import errno
import logging
import os
import time
from typing import Dict

from fastbean.binlog.durability import exhausted
from fastbean.binlog.files import Directory, File, blocks, user
from fastbean.binlog.threads import ZeroFill
from fastbean.engine.core import FILE_FIRST_RECORD, FILE_HEADER
from fastbean.errors import EXIT_BINLOG_DIR, BinlogError
from fastbean.logs import counted, event


class FileSet:
    def __init__(self, directory: Directory, max_size: int, zero_fill: bool):
        self.dir = directory
        self.max_size = max_size
        self.cur = None             # the File being written
        self.sizes: Dict[int, int] = {}     # seq -> bytes on disk, older files only
        self.closed_bytes = 0       # bytes of the older files the engine still needs
        self.leaving_bytes = 0      # bytes of those it no longer needs, still on disk (Reclaim)
        self.next_seq = 1           # the number the next new file gets
        self.failing = False        # the last attempt to make a file failed (said once)
        self.errors = 0
        self._ready: Dict[int, File] = {}   # seq -> File made, not yet current (the spare and later ones)
        self._spare = 0             # the file the engine has as its spare; 0 if none
        self._fill_spare = 0        # the file the zero-filler fills next; 0 if none
        # Group commits wait on every fdatasync with -f 0: keep them to overwrites.
        self._filler = ZeroFill() if zero_fill else None

    def replay(self, core):
        """Replay every file into core, oldest first, yielding (files done,
        files) after each; returns (files, jobs, seconds, bytes dropped)."""
        seqs = self.dir.existing()
        t0 = time.monotonic()
        dropped = missing = 0
        for seq in range(seqs[0], seqs[-1] + 1) if seqs else ():
            try:
                with open(self.dir.file_path(seq), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                event(logging.WARNING, "binlog-missing", "binlog.%(file)d is missing; continuing",
                      file=seq)
                missing += 1
                data = b""
            except PermissionError as e:
                # say, files copied from beanstalkd's directory, still its user's
                raise BinlogError("cannot read %s as user %s: %s" % (self.dir.file_path(seq), user(), e.strerror),
                                  EXIT_BINLOG_DIR) from None
            except OSError as e:
                raise BinlogError("cannot read binlog.%d: %s" % (seq, e.strerror)) from None
            records, end, reason = core.replay(data, seq)
            if reason is not None:
                dropped += len(data) - end
                event(logging.WARNING, "replay-dropped",
                      "binlog.%(file)d: %(reason)s: " + counted(len(data) - end, "byte") + " after record %(records)d "
                      "not replayed; you may be missing data",
                      file=seq, reason=reason, bytes=len(data) - end, records=records)
            # Count the records, not the file: a file left by a crash is still
            # its full preallocated size, and taking those zeros for dead
            # records would re-log every replayed job at once (beanstalkd
            # does not, and binlog-records-written would show it).
            self.sizes[seq] = end
            self.closed_bytes += end
            self.next_seq = seq + 1
            yield seq - seqs[0] + 1, seqs[-1] - seqs[0] + 1
        jobs = core.replay_finish()
        seconds = time.monotonic() - t0
        if seqs:
            event(logging.INFO, "replay",
                  "replayed " + counted(jobs, "job") + " from " + counted(len(seqs), "binlog file")
                  + " in %(seconds).3f s"
                  + (", " + counted(dropped, "byte") + " dropped" if dropped else "")
                  + (", " + counted(missing, "file") + " missing" if missing else ""),
                  jobs=jobs, files=len(seqs), seconds=round(seconds, 3), dropped_bytes=dropped,
                  missing_files=missing, directory=self.dir.path)
        return len(seqs), jobs, seconds, dropped

    def make(self, need, cap=0, first=False):
        """A new preallocated file, binlog.<next_seq>, with its header: room for
        -s bytes of new records beyond `need` (the room kept for the live
        jobs' deletes), or cap bytes. None when the disk cannot give one;
        for the first file at start-up, a BinlogError (the server cannot start)."""
        seq = self.next_seq
        cap = blocks(cap or self.max_size + need + len(FILE_HEADER))
        try:
            f = self.dir.make(seq, cap, fill=self._filler is not None)
        except OSError as e:
            if first:
                # beanstalkd exits with 1 here too; a full disk may have room after a restart
                status = EXIT_BINLOG_DIR if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else 1
                raise BinlogError("cannot create %s (%d bytes): %s"
                                  % (self.dir.file_path(seq), cap, e.strerror), status) from None
            if not self.failing:        # a full disk fails every attempt: say it once
                self.failing = True
                self.errors += 1
                if exhausted(e.errno):
                    event(logging.ERROR, "binlog-exhausted", "cannot make %(path)s: %(error)s; "
                          "not a disk fault: changes are refused until it can be made",
                          op="allocate", path=self.dir.file_path(seq), error=e.strerror)
                else:
                    event(logging.ERROR, "binlog-error", "cannot create or allocate %(bytes)d bytes "
                          "for %(path)s: %(error)s; changes are refused until there is room",
                          op="allocate", bytes=cap, path=self.dir.file_path(seq), error=e.strerror)
            return None
        if self.failing:
            self.failing = False
            event(logging.WARNING, "binlog-recovered", "binlog files can be made again "
                  "(" + counted(self.errors, "error") + " so far)", errors=self.errors)
        self._ready[seq] = f
        self.next_seq += 1
        return f

    def spare_made(self, f):
        """f (made now, for the engine's next_file) is the engine's spare."""
        self._spare = f.seq

    def discard(self, seq):
        """A made file nothing was written to, the newest one: gone again."""
        f = self._ready.pop(seq)
        if seq == self._fill_spare:
            self._filler.spare(-1, 0, 0)
            self._fill_spare = 0
        self.dir.discard(f)
        if seq == self._spare:
            self._spare = 0
        self.next_seq = seq

    def offer_spare(self, core, resv):
        """Keep a spare ready, big enough for -s bytes beyond the deletes the
        engine keeps room for (resv), with an eighth to spare for their growth."""
        need = resv + resv // 8 + FILE_FIRST_RECORD
        if self._spare:
            f = self._ready[self._spare]
            if f.cap - f.used >= self.max_size + resv + FILE_FIRST_RECORD:
                return
            self.discard(self._spare)       # the backlog outgrew it
        f = self.make(need)
        if f is None:
            return                          # the engine asks again when it needs one
        self._spare = f.seq
        if self._filler is not None:
            self._filler.spare(f.fill_fd, f.used, f.cap)
            f.fill_fd = -1
            self._fill_spare = f.seq
        core.wal_spare(f.seq, f.cap, f.used)

    def make_current(self, seq):
        """binlog.<seq>, made ahead, is where records go from now on."""
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
        return f

    def finish(self, sync):
        """The current file stops being current: File.finish(sync). Raises
        OSError; the file counts as an older one either way."""
        f, self.cur = self.cur, None
        try:
            f.finish(sync)
        finally:
            self.sizes[f.seq] = f.used
            self.closed_bytes += f.used

    def write(self, data):
        """Append records to the current file. Raises OSError (the space was
        preallocated, so that is a device error)."""
        if self._filler is not None:
            self._filler.claim(self.cur.used + len(data))
        self.cur.append(data)

    def part(self, seq, cap):
        """binlog.<seq>, of cap bytes (whole blocks), made now and current at
        once: a file whose number the caller gives (a replication stream's
        part), not one made ahead. Raises OSError."""
        f = self.dir.make(seq, blocks(max(cap, 1)), fill=False)
        self.next_seq = max(self.next_seq, seq + 1)
        self.cur = f
        return f

    def collect(self, core):
        """Files the engine no longer needs: they stop counting for compaction
        at once, and leave the disk when remove() is called."""
        gone = core.wal_collect()
        for seq in gone:
            size = self.sizes.get(seq, 0)
            self.closed_bytes -= size
            self.leaving_bytes += size
        return gone

    def remove(self, seqs):
        """Files collect() gave: they leave the disk."""
        for seq in seqs:
            self.leaving_bytes -= self.sizes.pop(seq, 0)
        self.dir.remove(seqs)

    def drop(self, seqs):
        """Older files no one needs any more: gone from the count and the disk at once."""
        for seq in seqs:
            self.closed_bytes -= self.sizes.pop(seq, 0)
        self.dir.remove(seqs)

    def close_spares(self):
        """A clean stop: the files made ahead go."""
        for seq in sorted(self._ready, reverse=True):
            self.discard(seq)
        self.stop_filler()

    def stop_filler(self):
        if self._filler is not None:
            self._filler.stop()
            self._filler = None

    def abandon(self):
        """After a failure: the zero-filler stopped and every open file closed,
        nothing written."""
        self.stop_filler()
        for f in list(self._ready.values()) + [self.cur]:
            if f is not None:
                f.close()

    @property
    def files(self):
        return sorted(self.sizes) + ([self.cur.seq] if self.cur is not None else [])

    def disk_bytes(self, current_cap):
        """Bytes the files take: the older ones as written, the current one
        (current_cap, as allocated) and the ones made ahead of use."""
        return (self.closed_bytes + self.leaving_bytes + (current_cap if self.cur is not None else 0)
                + sum(f.cap for f in self._ready.values()))
