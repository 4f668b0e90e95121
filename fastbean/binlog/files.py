"""The binlog directory: its lock, and its binlog.N files (beanstalkd 1.12's
names and format), made ahead of use, finished, removed, and cut back to
what is durable after a failure."""
import errno
import fcntl
import logging
import os
import pwd
import stat

from fastbean.engine.core import FILE_HEADER
from fastbean.errors import EXIT_BINLOG_DIR, BinlogError, BinlogLockedError
from fastbean.logs import event

BLOCK = 4096                # files are allocated in whole blocks


def user() -> str:
    """The effective user, as `name (uid N)`."""
    uid = os.geteuid()
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def blocks(n: int) -> int:
    """n rounded up to whole blocks."""
    return (n + BLOCK - 1) // BLOCK * BLOCK


class File:
    """One open binlog file: made ahead of use (the spare), or being written."""

    __slots__ = ("seq", "fd", "fill_fd", "cap", "used")

    def __init__(self, seq, fd, fill_fd, cap, used):
        self.seq, self.fd, self.fill_fd, self.cap, self.used = seq, fd, fill_fd, cap, used

    def append(self, data) -> None:
        """data after the records. Raises OSError: the space was
        preallocated, so a failure is the device's."""
        view = memoryview(data)
        while view:
            try:
                n = os.pwrite(self.fd, view, self.used)
            except InterruptedError:
                continue
            self.used += n
            view = view[n:]

    def finish(self, sync) -> None:
        """No more records: the unused preallocation is cut, and sync(fd) has
        the file synced (its last records get no other fsync), taking the
        descriptor over when it returns True. Closed either way; raises
        OSError."""
        try:
            os.ftruncate(self.fd, self.used)
            if sync(self.fd):
                self.fd = -1            # the sync thread's now: it closes it once synced
        finally:
            self.close()

    def seal(self, fsync: bool) -> None:
        """A clean stop: the file is cut to its records, and synced if fsync.
        Raises OSError; the file stays open."""
        os.ftruncate(self.fd, self.used)
        if fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        for fd in (self.fd, self.fill_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.fill_fd = -1


class Directory:
    """The files of one directory. Failures raise OSError; what they mean is
    the caller's to say."""

    def __init__(self, path: str):
        self.path = path
        self._lock_fd = -1

    def file_path(self, seq: int) -> str:
        return os.path.join(self.path, "binlog.%d" % seq)

    def lock(self) -> None:
        """Take DIR/lock, as beanstalkd does: one server per directory. A
        directory that cannot be used (missing, a file, not writable, on a
        read-only mount, locked) raises a BinlogError of status 10, as
        beanstalkd exits then."""
        if self._lock_fd >= 0:
            return
        try:
            fd = os.open(os.path.join(self.path, "lock"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise BinlogError(self._unusable(e.errno or 0, e.strerror or str(e)), EXIT_BINLOG_DIR) from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise BinlogLockedError("failed to lock binlog dir %s: %s (is another server using it?)"
                                    % (self.path, e.strerror)) from None
        # The lock file may be there already while the directory takes no
        # new file (another user's, or a read-only mount): say so now, not
        # once the replay is done.
        if not os.access(self.path, os.W_OK | os.X_OK, effective_ids=True):
            os.close(fd)
            err = errno.EROFS if os.statvfs(self.path).f_flag & os.ST_RDONLY else errno.EACCES
            raise BinlogError(self._unusable(err, os.strerror(err)), EXIT_BINLOG_DIR)
        self._lock_fd = fd

    def _unusable(self, err: int, strerror: str) -> str:
        """Why the directory cannot be used, for the one line the server logs."""
        path = self.path
        if err == errno.ENOENT:
            if os.path.isdir(path):     # /proc: there, but no file can be made in it
                return "binlog directory %s takes no new files: %s" % (path, strerror)
            return "binlog directory %s does not exist" % path
        if err == errno.ENOTDIR:
            if os.path.exists(path) and not os.path.isdir(path):
                return "binlog directory %s is not a directory" % path
            return "binlog directory %s: part of the path is not a directory" % path
        if err == errno.EROFS:
            return "binlog directory %s is on a read-only file system" % path
        if err in (errno.EACCES, errno.EPERM):
            return "binlog directory %s is not writable by user %s: %s" % (path, user(), strerror)
        return "cannot use binlog directory %s: %s" % (path, strerror)

    def check(self) -> None:
        """Before the listeners open: a path that is no directory at all
        raises the BinlogError lock() would raise, so the server does not
        say it listens first. Rights are left to lock(), under -u's user."""
        try:
            if stat.S_ISDIR(os.stat(self.path).st_mode):
                return
            err = errno.ENOTDIR
        except OSError as e:
            err = e.errno or errno.ENOENT
        raise BinlogError(self._unusable(err, os.strerror(err)), EXIT_BINLOG_DIR)

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def existing(self) -> list:
        """The numbers of the binlog files here, oldest first."""
        return sorted(int(name[7:]) for name in os.listdir(self.path)
                      if name.startswith("binlog.") and name[7:].isdigit())

    def make(self, seq: int, cap: int, fill: bool) -> File:
        """binlog.<seq>, cap bytes allocated, its header written. fill: a second
        open file for the zero-filler (the kernel reports a failed write-back
        once per open file, and that report belongs to the group commit)."""
        path = self.file_path(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        fill_fd = -1
        try:
            if fill:
                fill_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            os.fchmod(fd, 0o400)            # as beanstalkd creates them
            os.posix_fallocate(fd, 0, cap)
            os.pwrite(fd, FILE_HEADER, 0)
        except OSError:
            os.close(fd)
            if fill_fd >= 0:
                os.close(fill_fd)
            os.unlink(path)
            raise
        return File(seq, fd, fill_fd, cap, len(FILE_HEADER))

    def discard(self, f: File) -> None:
        """A made file nothing was written to: gone again."""
        f.close()
        os.unlink(self.file_path(f.seq))

    def remove(self, seqs) -> None:
        """Files no live job needs: they go (a failure is logged, not raised:
        the file is only disk space)."""
        for seq in seqs:
            try:
                os.unlink(self.file_path(seq))
            except FileNotFoundError:
                pass
            except OSError as e:
                event(logging.ERROR, "binlog-remove-failed", "cannot remove binlog.%(file)d: "
                      "%(error)s", file=seq, error=e.strerror)

    def remove_all(self) -> None:
        for seq in self.existing():
            os.unlink(self.file_path(seq))

    def cut_back(self, seq: int, end: int, tail: bytes = b"") -> list:
        """After a failed write or fsync: binlog.<seq> ends at `end` (what is
        known durable), then `tail`, and every later file goes; the file and
        the directory are synced. Returns the files removed. Raises OSError
        when the disk will not take even that."""
        path = self.file_path(seq)
        later = [s for s in self.existing() if s > seq]
        if os.path.exists(path):
            mode = os.stat(path).st_mode & 0o777
            os.chmod(path, 0o600)           # binlog files are read-only, as beanstalkd's
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, end)
                    if tail:
                        os.pwrite(fd, tail, end)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                os.chmod(path, mode)
        for s in later:
            os.unlink(self.file_path(s))
        self.sync()
        return later

    def sync(self) -> None:
        """fsync the directory itself: new and removed names are durable."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno != errno.EINVAL:     # a file system that cannot sync a directory
                raise
        finally:
            os.close(fd)
