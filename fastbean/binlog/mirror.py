"""With --replicate -b DIR the directory mirrors the replication stream:
binlog.N holds the records of the stream's part N as this node published or
applied them, a beanstalkd binlog of its queue at all times.

The stream is the truth: at start, and whenever the node rebuilds its queue
from the stream, the files of before go. A directory holding files that are
not this stream's mirror (DIR/replicated names the stream) is refused,
never emptied. Replication drives the files (replication/); a primary's
replies wait for the local fsync policy as well as for the stream.
"""
import os

from fastbean.binlog.durability import Durability, Failure
from fastbean.binlog.files import Directory
from fastbean.binlog.fileset import FileSet
from fastbean.config import DEFAULT_FSYNC_MS
from fastbean.errors import EXIT_BINLOG_DIR, BinlogError

MARK = "replicated"     # names the stream a replicated node's directory mirrors


class Mirror:
    """The local binlog's files (a FileSet, with no spare and no zero-fill:
    the stream numbers the files), their fsync policy and failure."""

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
        self._failure = Failure(loop, on_failure,
                                "the node rebuilds its queue and this directory from the stream")
        self.fileset = FileSet(self.dir, 0, zero_fill=False)
        self._durability = None

    @property
    def failed(self):
        return self._failure.op

    @property
    def failing(self):
        return self._failure.op is not None

    @property
    def errors(self):
        return self._failure.count

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
        self.fileset.abandon()
        try:
            self.dir.remove_all()
        except OSError as e:
            raise BinlogError("cannot empty %s to mirror the stream again: %s"
                              % (self.dir.path, e.strerror)) from None
        self.fileset = FileSet(self.dir, 0, zero_fill=False)
        self._failure.clear()
        self._durability = Durability(self.loop, self.fsync, self.fsync_ms, self._durable,
                                      self._sync_failed)

    def part(self, seq, cap):
        """Part `seq` of the stream starts: binlog.<seq>, cap bytes allocated, is
        the current file from now on."""
        if self.failed is not None:
            return
        files = self.fileset
        if files.cur is not None:
            done = files.cur.seq
            try:
                files.finish(self._durability.finish)
            except OSError as e:
                self._failure.happen("finish", "finishing binlog.%(file)d: %(error)s", file=done,
                                     error=e.strerror)
                return
        try:
            f = files.part(seq, cap)
        except OSError as e:
            self._failure.happen("allocate", "cannot make binlog.%(file)d: %(error)s", file=seq,
                                 error=e.strerror)
            return
        if self._durability.good is None:
            self._durability.start((seq, f.used))
        try:
            self._durability.file(self.dir.file_path(seq))
        except OSError as e:
            self._failure.happen("open", "opening binlog.%(file)d for its fsyncs: %(error)s",
                                 file=seq, error=e.strerror)

    def write(self, data):
        """Records of the current part: a standby's as it applies them (synced
        when the part ends), a primary's before written()."""
        if self.failed is not None or self.fileset.cur is None or not data:
            return
        try:
            self.fileset.write(data)
        except OSError as e:
            self._failure.happen("write", "binlog write to binlog.%(file)d failed: %(error)s",
                                 file=self.fileset.cur.seq, error=e.strerror)

    def written(self, seq):
        """A primary's records up to the engine's record seq are written: sync
        them as -f says (on_durable follows)."""
        f = self.fileset.cur
        if self.failed is None and f is not None:
            self._durability.written(seq, (f.seq, f.used))

    def remove(self, parts):
        """Parts of the stream no live job needs: their files go."""
        self.fileset.drop(parts)

    def close(self):
        if self._durability is not None:
            self._durability.stop()
        f = self.fileset.cur
        if f is not None and self.failed is None:
            try:
                f.seal(self.fsync)
            except OSError as e:
                self._failure.happen("close", "closing binlog.%(file)d: %(error)s", file=f.seq,
                                     error=e.strerror)
        self.fileset.abandon()
        self.fileset.cur = None
        self.dir.unlock()

    def _durable(self, seq):
        if self.on_durable is not None:
            self.on_durable(seq)

    def _sync_failed(self, err):
        self._failure.happen("fsync", "fsync of the mirror in %(directory)s failed: %(error)s",
                             directory=self.dir.path, error=os.strerror(err))

    # -- health and metrics -------------------------------------------------------

    @property
    def files(self):
        return self.fileset.files

    @property
    def disk_bytes(self):
        f = self.fileset.cur
        return self.fileset.disk_bytes(f.cap if f is not None else 0)

    def histograms(self):
        return None if self._durability is None else self._durability.histograms()
