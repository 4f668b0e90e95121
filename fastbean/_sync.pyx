# cython: language_level=3
"""SyncThread: a native thread that runs fdatasync for the binlog, back to back.

binlog.py decides when to sync (the -f policy); this is only the worker. It
is native rather than a Python thread so that a finished sync is reported at
once: a Python thread would first have to win the GIL back from the busy
event loop. The loop asks for "everything written up to record N" with
request(); the thread syncs and signals an eventfd that the loop watches;
collect() then says how far the files are synced. If more was requested
meanwhile, the next sync starts at once, without waiting for the loop.
"""

from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport uint64_t
from posix.unistd cimport close, dup, read, write

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *, void *, void *(*)(void *) noexcept nogil, void *)
    int pthread_join(pthread_t, void **)
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_cond_init(pthread_cond_t *, void *)
    int pthread_cond_destroy(pthread_cond_t *)
    int pthread_cond_wait(pthread_cond_t *, pthread_mutex_t *)
    int pthread_cond_signal(pthread_cond_t *)

cdef extern from "<unistd.h>" nogil:
    int fdatasync(int fd)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK
    int EFD_CLOEXEC


cdef struct State:
    pthread_mutex_t mu
    pthread_cond_t wake
    int want_fd           # dup of the file to sync next; -1 when nothing is asked
    uint64_t want_seq     # records covered by that sync
    uint64_t done_seq     # records on disk
    int error             # first errno since the last collect(), 0 if none
    int efd               # eventfd the loop watches
    bint stopping


cdef void *run(void *arg) noexcept nogil:
    cdef State *s = <State *>arg
    cdef int fd, rc, err
    cdef uint64_t seq, one = 1
    pthread_mutex_lock(&s.mu)
    while True:
        while s.want_fd < 0 and not s.stopping:
            pthread_cond_wait(&s.wake, &s.mu)
        if s.want_fd < 0:
            break
        fd = s.want_fd
        seq = s.want_seq
        s.want_fd = -1
        pthread_mutex_unlock(&s.mu)
        rc = fdatasync(fd)
        err = errno if rc != 0 else 0
        close(fd)
        pthread_mutex_lock(&s.mu)
        if err and not s.error:
            s.error = err
        if seq > s.done_seq:
            s.done_seq = seq
        write(s.efd, &one, sizeof(one))
    pthread_mutex_unlock(&s.mu)
    return NULL


cdef class SyncThread:
    cdef State s
    cdef pthread_t tid
    cdef bint running

    def __cinit__(self):
        self.s.want_fd = -1
        self.s.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.s.efd < 0:
            raise OSError(errno, "eventfd failed")
        pthread_mutex_init(&self.s.mu, NULL)
        pthread_cond_init(&self.s.wake, NULL)
        cdef int rc = pthread_create(&self.tid, NULL, run, &self.s)
        if rc != 0:
            close(self.s.efd)
            self.s.efd = -1
            raise OSError(rc, "cannot start the fsync thread")
        self.running = True

    def fileno(self):
        """The eventfd that becomes readable when a sync has finished."""
        return self.s.efd

    def request(self, int fd, uint64_t seq):
        """Sync fd (a dup is taken, so the caller may close it) to cover record seq."""
        cdef int d = dup(fd)
        cdef int old
        if d < 0:
            raise OSError(errno, "dup failed")
        pthread_mutex_lock(&self.s.mu)
        old = self.s.want_fd           # superseded before it started: the new one covers it
        self.s.want_fd = d
        self.s.want_seq = seq
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)
        if old >= 0:
            close(old)

    def collect(self):
        """After the eventfd fired: (records synced, errno of a failed sync or 0)."""
        cdef uint64_t n
        cdef int err
        while read(self.s.efd, &n, sizeof(n)) < 0 and errno == EINTR:
            pass
        pthread_mutex_lock(&self.s.mu)
        n = self.s.done_seq
        err = self.s.error
        self.s.error = 0
        pthread_mutex_unlock(&self.s.mu)
        return n, err

    def stop(self):
        """Finish the sync asked for, then end the thread."""
        self._join()

    cdef void _join(self) noexcept:
        if not self.running:
            return
        pthread_mutex_lock(&self.s.mu)
        self.s.stopping = True
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)
        with nogil:
            pthread_join(self.tid, NULL)
        self.running = False

    def __dealloc__(self):
        self._join()
        if self.s.want_fd >= 0:
            close(self.s.want_fd)
        if self.s.efd >= 0:
            close(self.s.efd)
        pthread_mutex_destroy(&self.s.mu)
        pthread_cond_destroy(&self.s.wake)
