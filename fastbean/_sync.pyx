# cython: language_level=3
"""The binlog's two disk workers, native threads: SyncThread and ZeroFill.

SyncThread runs fdatasync for the binlog, back to back. binlog.py decides
when to sync (the -f policy); this is only the worker. It
is native rather than a Python thread so that a finished sync is reported at
once: a Python thread would first have to win the GIL back from the busy
event loop. The loop asks for "everything written up to record N" with
request(); the thread syncs and signals an eventfd that the loop watches;
collect() then says how far the files are synced. If more was requested
meanwhile, the next sync starts at once, without waiting for the loop.
A file the binlog has finished with is handed over with finish(): the
thread syncs it before the next request's file, so no fsync of a finished
file runs on the loop.
"""

cimport cython
from libc.errno cimport errno, EINTR, EIO
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from posix.types cimport off_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
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
    ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset)
    long syscall(long number, ...)

cdef extern from "<sys/syscall.h>" nogil:
    long SYS_gettid

cdef extern from "<sys/resource.h>" nogil:
    int setpriority(int which, unsigned int who, int prio)
    int PRIO_PROCESS

cdef extern from "<fcntl.h>" nogil:
    int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags)
    unsigned int SYNC_FILE_RANGE_WAIT_BEFORE
    unsigned int SYNC_FILE_RANGE_WRITE
    unsigned int SYNC_FILE_RANGE_WAIT_AFTER

cdef extern from *:
    """
    #define fb_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
    #define fb_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
    """
    int64_t fb_load(int64_t *p) nogil
    void fb_store(int64_t *p, int64_t v) nogil

cdef extern from "_hist.h" nogil:
    int FB_FSYNC_BOUNDS
    int FB_GROUP_BOUNDS
    const int64_t fb_fsync_bounds[]
    const int64_t fb_group_bounds[]
    int fb_bucket(const int64_t *bounds, int n, int64_t v)

cdef enum:
    HIST_SLOTS = 17       # _hist.h's FB_FSYNC_BOUNDS and FB_GROUP_BOUNDS, + Inf

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK
    int EFD_CLOEXEC


ctypedef void *(*thread_main)(void *) noexcept nogil


cdef class Worker:
    """One native thread that waits on a condition under a mutex. Both live
    in the subclass's state; stop() sets its `stopping` flag, and the thread
    returns once the job in hand is done."""
    cdef pthread_t tid
    cdef bint running
    cdef pthread_mutex_t *mu
    cdef pthread_cond_t *wake
    cdef bint *stopping

    cdef int _start(self, thread_main main, void *state, pthread_mutex_t *mu,
                    pthread_cond_t *wake, bint *stopping, str what) except -1:
        self.mu, self.wake, self.stopping = mu, wake, stopping
        cdef int rc = pthread_create(&self.tid, NULL, main, state)
        if rc != 0:
            raise OSError(rc, "cannot start the binlog's %s thread" % what)
        self.running = True
        return 0

    def stop(self):
        """Finish the job in hand, then end the thread."""
        self._join()

    cdef void _join(self) noexcept:
        if not self.running:
            return
        pthread_mutex_lock(self.mu)
        self.stopping[0] = True
        pthread_cond_signal(self.wake)
        pthread_mutex_unlock(self.mu)
        with nogil:
            pthread_join(self.tid, NULL)
        self.running = False


cdef struct State:
    pthread_mutex_t mu
    pthread_cond_t wake
    int want_fd           # dup of the file to sync next; -1 when nothing is asked
    uint64_t want_seq     # records covered by that sync
    int *fin              # dups of finished files to sync first, oldest first
    int nfin, capfin
    uint64_t done_seq     # records on disk
    int error             # first errno since the last collect(), 0 if none
    int efd               # eventfd the loop watches
    bint stopping
    # for the metrics endpoint: per-bucket counts of each sync's duration and
    # of the records it made durable (the group commit), and their sums
    uint64_t sync_hist[HIST_SLOTS]
    int64_t sync_ns
    uint64_t group_hist[HIST_SLOTS]
    uint64_t group_records


cdef int _sync_close(int fd) noexcept nogil:
    # fdatasync then close; the errno of a failed sync, else 0
    cdef int err = errno if fdatasync(fd) != 0 else 0
    close(fd)
    return err


cdef void *sync_main(void *arg) noexcept nogil:
    cdef State *s = <State *>arg
    cdef int fd, err, e, i, nfin
    cdef int *fin
    cdef uint64_t seq, one = 1
    cdef timespec t0, t1
    cdef int64_t took, group
    pthread_mutex_lock(&s.mu)
    while True:
        while s.want_fd < 0 and s.nfin == 0 and not s.stopping:
            pthread_cond_wait(&s.wake, &s.mu)
        if s.want_fd < 0 and s.nfin == 0:
            break
        fd = s.want_fd
        seq = s.want_seq
        s.want_fd = -1
        fin, nfin = s.fin, s.nfin
        s.fin = NULL
        s.nfin = s.capfin = 0
        pthread_mutex_unlock(&s.mu)
        err = 0
        for i in range(nfin):
            e = _sync_close(fin[i])
            if e and not err:
                err = e
        free(fin)
        took = 0
        if fd >= 0:
            clock_gettime(CLOCK_MONOTONIC, &t0)
            e = _sync_close(fd)
            clock_gettime(CLOCK_MONOTONIC, &t1)
            took = (t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec)
            if e and not err:
                err = e
        pthread_mutex_lock(&s.mu)
        if err and not s.error:
            s.error = err
        if fd >= 0:
            # the request's sync: its time, and the records it made durable
            group = <int64_t>(seq - s.done_seq) if seq > s.done_seq else 0
            s.sync_hist[fb_bucket(fb_fsync_bounds, FB_FSYNC_BOUNDS, took)] += 1
            s.sync_ns += took
            s.group_hist[fb_bucket(fb_group_bounds, FB_GROUP_BOUNDS, group)] += 1
            s.group_records += group
        if fd >= 0 and seq > s.done_seq:
            s.done_seq = seq
        write(s.efd, &one, sizeof(one))
    pthread_mutex_unlock(&s.mu)
    return NULL


@cython.final
cdef class SyncThread(Worker):
    cdef State s

    def __cinit__(self):
        self.s.want_fd = -1
        self.s.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.s.efd < 0:
            raise OSError(errno, "eventfd failed")
        pthread_mutex_init(&self.s.mu, NULL)
        pthread_cond_init(&self.s.wake, NULL)
        self._start(sync_main, &self.s, &self.s.mu, &self.s.wake, &self.s.stopping, "fsync")

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

    def finish(self, int fd):
        """fd's file is finished: sync it (a dup is taken) before the next
        requested one. Its errors come back through collect() like any sync's."""
        cdef int d = dup(fd)
        cdef int *fin
        if d < 0:
            raise OSError(errno, "dup failed")
        pthread_mutex_lock(&self.s.mu)
        if self.s.nfin == self.s.capfin:
            fin = <int *>realloc(self.s.fin, (self.s.capfin * 2 + 4) * sizeof(int))
            if fin == NULL:
                pthread_mutex_unlock(&self.s.mu)
                close(d)
                raise MemoryError()
            self.s.fin = fin
            self.s.capfin = self.s.capfin * 2 + 4
        self.s.fin[self.s.nfin] = d
        self.s.nfin += 1
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

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

    def histograms(self):
        """For the metrics endpoint: {"fsync": (bounds in seconds, per-bucket
        counts with +Inf last, sum of seconds), "group": (bounds in records,
        counts, sum of records)} over every sync so far."""
        cdef int i
        pthread_mutex_lock(&self.s.mu)
        sync = [self.s.sync_hist[i] for i in range(FB_FSYNC_BOUNDS + 1)]
        group = [self.s.group_hist[i] for i in range(FB_GROUP_BOUNDS + 1)]
        sync_ns, records = self.s.sync_ns, self.s.group_records
        pthread_mutex_unlock(&self.s.mu)
        return {"fsync": ([fb_fsync_bounds[i] / 1e9 for i in range(FB_FSYNC_BOUNDS)], sync,
                          sync_ns / 1e9),
                "group": ([fb_group_bounds[i] for i in range(FB_GROUP_BOUNDS)], group, records)}

    def __dealloc__(self):
        cdef int i
        self._join()
        if self.s.want_fd >= 0:
            close(self.s.want_fd)
        for i in range(self.s.nfin):
            close(self.s.fin[i])
        free(self.s.fin)
        if self.s.efd >= 0:
            close(self.s.efd)
        pthread_mutex_destroy(&self.s.mu)
        pthread_cond_destroy(&self.s.wake)


# -- ZeroFill ---------------------------------------------------------------------
#
# posix_fallocate reserves a binlog file's space but leaves it "unwritten":
# the first write to each block must also change the file's extent map, so
# on ext4 and XFS every fdatasync then waits for a journal commit (about
# 240 us here against 145 us for an overwrite, which caps -f 0). beanstalkd
# avoids that by writing its files full of zeros before use, stalling its
# loop for each new file. ZeroFill does the same ahead of the write position,
# in a thread: it overwrites the reserved space with zeros a chunk at a
# time, each chunk written back before the next so that a group commit never
# has to flush more than one chunk of them, and syncs once at the end. It
# works through an open file of its own, so that the write-back errors it
# sees are not taken from the group commit's fdatasync. Once the current
# file is done and its records have reached half of it, it fills the spare
# file the binlog keeps ready, so that file is fast from its first record
# too (not sooner: a run of the server that never gets there should not pay
# for writing a second file).
#
# The loop writes records at increasing offsets. The filler only ever writes
# at or above `pos`, which only grows, and writes each chunk under the lock.
# A record that ends at or below pos therefore needs no coordination; one
# that reaches above it (the filler fell behind) takes the lock and moves
# the filler past itself first (claim()). Nothing writes to the spare until
# it becomes the current file (promote()).

cdef enum:
    CHUNK = 65536

cdef struct FillFile:
    int fd                # the filler's own open file; -1 when none
    int64_t pos           # the filler writes only at or above this (atomic for the current file)
    int64_t head          # the loop's records end here, as far as claimed
    int64_t end           # the file's allocated size

cdef struct FillState:
    pthread_mutex_t mu
    pthread_cond_t wake
    FillFile cur          # the current file
    FillFile nxt          # the spare, filled once cur is done and nxt_due
    int64_t written       # where the loop's records in cur end (the loop's own)
    bint nxt_due          # cur's records have reached half of it
    char *zeros
    int error             # errno of the last failed fill, 0 if none
    bint stopping


cdef inline bint _fill_due(FillFile *f) noexcept nogil:
    return f.fd >= 0 and f.pos < f.end


cdef void _fill_set(FillFile *f, int fd, int64_t used, int64_t end) noexcept nogil:
    # Records end at `used`: filling starts at the chunk after the one they
    # are being written in.
    if f.fd >= 0:
        close(f.fd)
    f.fd = fd
    f.head = used
    f.end = end
    fb_store(&f.pos, (used // CHUNK + 1) * CHUNK)


cdef void *fill_main(void *arg) noexcept nogil:
    cdef FillState *s = <FillState *>arg
    cdef FillFile *f
    cdef int64_t start, stop, pos
    cdef ssize_t n
    cdef int fd
    cdef bint last
    setpriority(PRIO_PROCESS, <unsigned int>syscall(SYS_gettid), 19)   # best effort
    pthread_mutex_lock(&s.mu)
    while True:
        while not s.stopping and not _fill_due(&s.cur) and not (s.nxt_due and _fill_due(&s.nxt)):
            pthread_cond_wait(&s.wake, &s.mu)
        if s.stopping:
            break
        f = &s.cur if _fill_due(&s.cur) else &s.nxt
        start = f.pos if f.pos > f.head else f.head
        stop = (start // CHUNK + 1) * CHUNK
        if stop > f.end:
            stop = f.end
        pos = start
        while pos < stop:
            n = pwrite(f.fd, s.zeros, stop - pos, pos)
            if n < 0 and errno == EINTR:
                continue
            if n <= 0:
                # Only the fsync speed-up is lost: the space stays reserved.
                s.error = errno if n < 0 else EIO
                stop = f.end
                break
            pos += n
        fb_store(&f.pos, stop)
        last = stop >= f.end
        fd = dup(f.fd)
        pthread_mutex_unlock(&s.mu)
        if fd >= 0:
            if pos > start:
                sync_file_range(fd, start, pos - start, SYNC_FILE_RANGE_WAIT_BEFORE |
                                SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
            if last:
                fdatasync(fd)   # commit the extent changes: later syncs need no journal commit
            close(fd)
        pthread_mutex_lock(&s.mu)
    pthread_mutex_unlock(&s.mu)
    return NULL


@cython.final
cdef class ZeroFill(Worker):
    """Overwrites the current binlog file's reserved space with zeros, ahead of
    its records, and then the spare's."""
    cdef FillState s

    def __cinit__(self):
        self.s.cur.fd = self.s.nxt.fd = -1
        self.s.zeros = <char *>calloc(1, CHUNK)
        if self.s.zeros == NULL:
            raise MemoryError()
        pthread_mutex_init(&self.s.mu, NULL)
        pthread_cond_init(&self.s.wake, NULL)
        self._start(fill_main, &self.s, &self.s.mu, &self.s.wake, &self.s.stopping, "zero-fill")

    def file(self, int fd, int64_t used, int64_t end):
        """Fill the new current file, open as fd (its own open file, which the
        filler takes over and closes): records end at `used`, `end` bytes are
        allocated. Once this returns, nothing more is written to the
        previous file."""
        pthread_mutex_lock(&self.s.mu)
        _fill_set(&self.s.cur, fd, used, end)
        self.s.written = used
        self.s.nxt_due = False
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def spare(self, int fd, int64_t used, int64_t end):
        """Fill this file (taken over as with file()) once the current one is
        done; it replaces an earlier spare. fd -1: no spare any more."""
        pthread_mutex_lock(&self.s.mu)
        _fill_set(&self.s.nxt, fd, used, end)
        self.s.nxt_due = self.s.written * 2 >= self.s.cur.end
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def promote(self):
        """The spare is the current file now, and the loop writes records to it
        from its `used` on; nothing more is written to the previous file."""
        pthread_mutex_lock(&self.s.mu)
        if self.s.cur.fd >= 0:
            close(self.s.cur.fd)
        self.s.cur = self.s.nxt
        fb_store(&self.s.cur.pos, self.s.nxt.pos)
        self.s.nxt.fd = -1
        self.s.written = self.s.cur.head
        self.s.nxt_due = False
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def claim(self, int64_t end):
        """The loop is about to write records up to offset `end` of the current file."""
        cdef bint half = not self.s.nxt_due and end * 2 >= self.s.cur.end and self.s.nxt.fd >= 0
        self.s.written = end
        if end <= fb_load(&self.s.cur.pos) and not half:
            return
        with nogil:
            pthread_mutex_lock(&self.s.mu)
            if end > self.s.cur.head:
                self.s.cur.head = end
            if half:
                self.s.nxt_due = True
                pthread_cond_signal(&self.s.wake)
            pthread_mutex_unlock(&self.s.mu)

    def take_error(self):
        """errno of a fill that failed since the last call (0 if none)."""
        cdef int err
        pthread_mutex_lock(&self.s.mu)
        err = self.s.error
        self.s.error = 0
        pthread_mutex_unlock(&self.s.mu)
        return err

    def __dealloc__(self):
        self._join()
        if self.s.cur.fd >= 0:
            close(self.s.cur.fd)
        if self.s.nxt.fd >= 0:
            close(self.s.nxt.fd)
        free(self.s.zeros)
        pthread_mutex_destroy(&self.s.mu)
        pthread_cond_destroy(&self.s.wake)
