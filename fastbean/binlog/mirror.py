"""With --replicate -b DIR the directory mirrors the replication stream:
binlog.N holds the records of the stream's part N as this node published or
applied them, a beanstalkd binlog of its queue at all times.

The stream is the truth: at start, and whenever the node rebuilds its queue
from the stream, the files of before go. A directory holding files that are
not this stream's mirror (DIR/replicated names the stream) is refused,
never emptied. Replication drives the files (replication/); a primary's
replies wait for the local fsync policy as well as for the stream.
"""
import logging
import os

from fastbean.binlog.durability import Durability
from fastbean.binlog.files import BLOCK, Directory
from fastbean.config import DEFAULT_FSYNC_MS
from fastbean.errors import EXIT_BINLOG_DIR, BinlogError
from fastbean.logs import event

MARK = "replicated"     # names the stream a replicated node's directory mirrors


class Mirror:
    def __init__(self, loop, directory, stream, fsync=True, fsync_ms=DEFAULT_FSYNC_MS,
                 on_durable=None, on_failure=None):
        """on_durable(seq): the primary's records up to seq are as durable as
        -f makes them here. on_failure(op): a write or fsync failed (called
        from a loop callback, once until reset())."""
        self.loop = loop
        self.dir = Directory(directory)
        self.stream = stream
        self.fsync = fsync
        self.fsync_ms = fsync_ms
        self.on_durable = on_durable
        self.on_failure = on_failure
        self.errors = 0
        self.cur = None
        self.sizes = {}
        self.closed_bytes = 0
        self.failed = None
        self._durability = None

    @property
    def failing(self):
        return self.failed is not None

    @property
    def synced(self):
        """The primary's records known to be on this disk (for reclaiming)."""
        return 0 if self._durability is None else self._durability.synced_seq

    def open(self):
        """Lock the directory and take it over as this stream's mirror."""
        self.dir.lock()
        mark = os.path.join(self.dir.path, MARK)
        try:
            with open(mark) as f:
                owner = f.read().strip()
        except FileNotFoundError:
            owner = None
        if self.dir.existing() and owner != self.stream:
            raise BinlogError("%s holds a binlog that is not a mirror of stream %s; "
                              "--replicate starts from the stream: give it an empty directory"
                              % (self.dir.path, self.stream), EXIT_BINLOG_DIR)
        try:
            with open(mark, "w") as f:
                f.write(self.stream + "\n")
        except OSError as e:
            raise BinlogError("cannot write %s: %s" % (mark, e.strerror), EXIT_BINLOG_DIR) from None
        self.reset()

    def reset(self):
        """The node rebuilds its queue from the stream: so does the directory."""
        if self._durability is not None:
            self._durability.stop()         # a sync in flight covered the old queue's records
        if self.cur is not None:
            self.cur.close()
            self.cur = None
        try:
            self.dir.remove_all()
        except OSError as e:
            raise BinlogError("cannot empty %s to mirror the stream again: %s"
                              % (self.dir.path, e.strerror)) from None
        self.sizes.clear()
        self.closed_bytes = 0
        self.failed = None
        self._durability = Durability(self.loop, self.fsync, self.fsync_ms, self._durable,
                                      self._sync_failed)

    def part(self, seq, cap):
        """Part `seq` of the stream starts: binlog.<seq>, cap bytes allocated, is
        the current file from now on."""
        if self.failed is not None:
            return
        try:
            f = self.dir.make(seq, max(cap, BLOCK), fill=False)
        except OSError as e:
            self._fail("allocate", "cannot make binlog.%(file)d: %(error)s", file=seq, error=e.strerror)
            return
        if self.cur is not None:
            self._finish()
        if self._durability.good is None:
            self._durability.start((seq, f.used))
        self.cur = f
        self._durability.file(self.dir.file_path(seq))

    def write(self, data):
        """Records of the current part: a standby's as it applies them (synced
        when the part ends), a primary's before written()."""
        f = self.cur
        if self.failed is not None or f is None or not data:
            return
        view = memoryview(data)
        while view:
            try:
                n = os.pwrite(f.fd, view, f.used)
            except InterruptedError:
                continue
            except OSError as e:
                self._fail("write", "binlog write to binlog.%(file)d failed: %(error)s",
                           file=f.seq, error=e.strerror)
                return
            f.used += n
            view = view[n:]

    def written(self, seq):
        """A primary's records up to the engine's record seq are written: sync
        them as -f says (on_durable follows)."""
        if self.failed is None and self.cur is not None:
            self._durability.written(seq, (self.cur.seq, self.cur.used))

    def remove(self, parts):
        """Parts of the stream no live job needs: their files go."""
        for seq in parts:
            self.closed_bytes -= self.sizes.pop(seq, 0)
        self.dir.remove(parts)

    def close(self):
        if self._durability is not None:
            self._durability.stop()
        if self.cur is not None and self.failed is None:
            try:
                os.ftruncate(self.cur.fd, self.cur.used)
                if self.fsync:
                    os.fsync(self.cur.fd)
            except OSError as e:
                self._fail("close", "closing binlog.%(file)d: %(error)s", file=self.cur.seq,
                           error=e.strerror)
        if self.cur is not None:
            self.cur.close()
            self.cur = None
        self.dir.unlock()

    def _finish(self):
        f = self.cur
        try:
            os.ftruncate(f.fd, f.used)
            if self._durability.finish(f.fd):
                f.fd = -1               # the sync thread's now: it closes it once synced
        except OSError as e:
            self._fail("finish", "finishing binlog.%(file)d: %(error)s", file=f.seq, error=e.strerror)
        f.close()
        self.cur = None
        self.sizes[f.seq] = f.used
        self.closed_bytes += f.used

    def _durable(self, seq):
        if self.on_durable is not None:
            self.on_durable(seq)

    def _sync_failed(self, err):
        self._fail("fsync", "fsync of the mirror in %(directory)s failed: %(error)s",
                   directory=self.dir.path, error=os.strerror(err))

    def _fail(self, op, text, **fields):
        if self.failed is not None:
            return
        self.failed = op
        self.errors += 1
        event(logging.ERROR, "binlog-error", text + "; the node rebuilds its queue and this "
              "directory from the stream", op=op, **fields)
        if self.on_failure is not None:
            self.loop.call_soon(self.on_failure, op)

    # -- health and metrics -------------------------------------------------------

    @property
    def files(self):
        return sorted(self.sizes) + ([self.cur.seq] if self.cur is not None else [])

    @property
    def disk_bytes(self):
        return self.closed_bytes + (self.cur.cap if self.cur is not None else 0)

    def histograms(self):
        return None if self._durability is None else self._durability.histograms()
