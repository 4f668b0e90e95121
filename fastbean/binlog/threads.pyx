# cython: language_level=3
"""The binlog's two disk workers, native threads: SyncThread and ZeroFill.

SyncThread runs fdatasync for the binlog. binlog.py decides when to sync
(the -f policy); this is only the worker. It is native rather than a Python
thread so that a finished sync is reported at once: a Python thread would
first have to win the GIL back from the busy event loop.

The loop says which file is current (file()) and how far its records are
written and due for a sync (request(seq)). A request is one atomic store:
no system call, unless a sync thread sleeps and has to be woken. Up to
`threads` fdatasyncs run at once, so records written while one runs start
their own at once instead of waiting a whole sync for it (the disk overlaps
them: two on this kind of disk take about 1.3 times one). A sync makes
durable everything written before it started, but syncs are reported in the
order they started, so a finished file (finish()) is always on disk before
a later file's records count. A finished sync signals an eventfd the loop
watches, once until the loop collects (collect() says how far the files are
synced).

Descriptors. A sync needs no new descriptor, so a process out of them
(EMFILE) still syncs: each thread owns the open file of its slot, file()
only stages the next one, which the thread takes in (closing its old one
itself) when it takes new work, and finish() takes the finished file's
descriptor over. An fdatasync that fails for want of memory says nothing
about the disk: it is tried again, backing off, while the replies wait.

Errors. The kernel reports a failed write-back once per open file
description, to the first fsync through it that looks. So each thread
syncs through a description of its own (file() opens the file once per
thread): two syncs running at once both see an error, and one thread's
success never hides a failure the other's range had. The first failed sync
ends the count: nothing started after it is reported synced, ever (the
binlog stops using the files; see binlog.py).
"""

cimport cython
import os
from libc.errno cimport errno, EAGAIN, EINTR, EIO, EMFILE, ENFILE, ENOBUFS, ENOMEM
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from posix.types cimport off_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from posix.fcntl cimport open as c_open, O_RDONLY, O_CLOEXEC
from posix.unistd cimport close, read, usleep, write

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
    int pthread_cond_broadcast(pthread_cond_t *)

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
    /* Sequentially consistent: a sleeper announces itself, then looks at the
     * work; a producer publishes the work, then looks for sleepers. One of
     * the two always sees the other, so no wake-up is lost. */
    #define fb_load(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
    #define fb_store(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
    #define fb_add(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
    #define fb_flag(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
    """
    int64_t fb_load(int64_t *p) nogil
    void fb_store(int64_t *p, int64_t v) nogil
    int64_t fb_add(int64_t *p, int64_t v) nogil
    bint fb_flag(bint *p) nogil

cdef extern from "hist.h" nogil:
    int FB_FSYNC_BOUNDS
    int FB_GROUP_BOUNDS
    const int64_t fb_fsync_bounds[]
    const int64_t fb_group_bounds[]
    int fb_bucket(const int64_t *bounds, int n, int64_t v)

cdef enum:
    HIST_SLOTS = 17       # include/hist.h's FB_FSYNC_BOUNDS and FB_GROUP_BOUNDS, + Inf
    MAX_THREADS = 4
    RETRY_FIRST_US = 1000     # an fdatasync short of memory is tried again after this,
    RETRY_MAX_US = 100000     # doubling up to this

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK
    int EFD_CLOEXEC


ctypedef void *(*thread_main)(void *) noexcept nogil


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec * 1000000000 + t.tv_nsec


cdef class Worker:
    """Native threads that wait on a condition under a mutex. Both live in
    the subclass's state; stop() sets its `stopping` flag, and each thread
    returns once the work it was given is done."""
    cdef pthread_t tids[MAX_THREADS]
    cdef int nthreads
    cdef pthread_mutex_t *mu
    cdef pthread_cond_t *wake
    cdef bint *stopping

    cdef int _start(self, thread_main main, void *state, pthread_mutex_t *mu,
                    pthread_cond_t *wake, bint *stopping, str what, int count) except -1:
        cdef int rc
        self.mu, self.wake, self.stopping = mu, wake, stopping
        while self.nthreads < count:
            rc = pthread_create(&self.tids[self.nthreads], NULL, main, state)
            if rc != 0:
                self._join()
                raise OSError(rc, "cannot start the binlog's %s thread" % what)
            self.nthreads += 1
        return 0

    def stop(self):
        """Finish the work given, then end the threads."""
        self._join()

    cdef void _join(self) noexcept:
        cdef int i
        if self.nthreads == 0:
            return
        pthread_mutex_lock(self.mu)
        self.stopping[0] = True
        pthread_cond_broadcast(self.wake)
        pthread_mutex_unlock(self.mu)
        with nogil:
            for i in range(self.nthreads):
                pthread_join(self.tids[i], NULL)
        self.nthreads = 0


cdef struct State:
    pthread_mutex_t mu
    pthread_cond_t wake
    int fds[MAX_THREADS]  # the file each thread syncs, its own open description; -1 before file()
    int staged[MAX_THREADS]   # file()'s next one, which the thread takes in; -1 if none
    bint has_file
    int nslots            # threads that took their slot (their index into fds)
    int64_t want          # records written and due for a sync (the loop's, atomic)
    int64_t started       # records covered by the syncs started
    int64_t done          # records on disk
    int64_t idle          # threads waiting for work (atomic)
    int busy              # syncs running
    int threads
    int *fin              # finished files (their descriptors, owned) to sync first, oldest first
    int nfin, capfin
    # syncs are reported in the order they started: ticket t's covered
    # records and whether it has finished, in slot t % MAX_THREADS
    uint64_t next_ticket, oldest_ticket
    int64_t ticket_seq[MAX_THREADS]
    bint ticket_over[MAX_THREADS]
    int ticket_err[MAX_THREADS]
    int error             # errno of the first failed sync, 0 if none: done stops before it
    int efd               # eventfd the loop watches
    bint notified         # efd signalled since the last collect()
    bint stopping
    # for the metrics endpoint: per-bucket counts of each sync's duration and
    # of the records it made durable (the group commit), and their sums
    uint64_t sync_hist[HIST_SLOTS]
    int64_t sync_ns
    uint64_t group_hist[HIST_SLOTS]
    uint64_t group_records
    int64_t retries       # fdatasyncs tried again for want of memory (atomic)


cdef inline bint exhausted(int err) noexcept nogil:
    # an errno that says the process or the kernel is short of something, not the disk
    return err == EMFILE or err == ENFILE or err == ENOMEM or err == ENOBUFS or err == EAGAIN


cdef int _sync(State *s, int fd) noexcept nogil:
    # fdatasync; the errno of a failed one, else 0. A failure for want of
    # memory is tried again, backing off (until the threads stop).
    cdef int err
    cdef unsigned int wait = RETRY_FIRST_US
    while True:
        if fdatasync(fd) == 0:
            return 0
        err = errno
        if err == EINTR:
            continue
        if not exhausted(err) or fb_flag(&s.stopping):
            return err
        fb_add(&s.retries, 1)
        usleep(wait)
        wait = wait * 2 if wait < RETRY_MAX_US // 2 else RETRY_MAX_US


cdef int _sync_close(State *s, int fd) noexcept nogil:
    # fdatasync then close; the errno of a failed sync, else 0
    cdef int err = _sync(s, fd)
    close(fd)
    return err


cdef inline bint _due(State *s) noexcept nogil:
    # Work for an idle thread. A ticket's slot is free again only once it is
    # reported, so a fast thread never laps one that is still syncing.
    if s.next_ticket - s.oldest_ticket >= MAX_THREADS:
        return False
    return s.nfin > 0 or (s.has_file and fb_load(&s.want) > s.started and s.busy < s.threads)


cdef void _report(State *s) noexcept nogil:
    # Under s.mu: publish the finished syncs, in the order they started.
    cdef uint64_t one = 1
    cdef int k
    cdef int64_t seq, group
    cdef bint moved = False
    while s.oldest_ticket < s.next_ticket:
        k = s.oldest_ticket % MAX_THREADS
        if not s.ticket_over[k]:
            break
        if s.ticket_err[k] and not s.error:
            s.error = s.ticket_err[k]
            moved = True            # the loop must hear of it
        seq = s.ticket_seq[k]
        if seq > s.done and not s.error:
            group = seq - s.done
            s.group_hist[fb_bucket(fb_group_bounds, FB_GROUP_BOUNDS, group)] += 1
            s.group_records += group
            s.done = seq
            moved = True
        s.oldest_ticket += 1
    if moved and not s.notified:
        s.notified = True
        write(s.efd, &one, sizeof(one))


cdef void *sync_main(void *arg) noexcept nogil:
    cdef State *s = <State *>arg
    cdef int fd, old, err, e, i, nfin, k, slot
    cdef int *fin
    cdef int64_t seq, t0, took
    cdef uint64_t ticket
    pthread_mutex_lock(&s.mu)
    slot = s.nslots
    s.nslots += 1
    while True:
        fb_add(&s.idle, 1)
        while not s.stopping and not _due(s):
            pthread_cond_wait(&s.wake, &s.mu)
        fb_add(&s.idle, -1)
        if not _due(s):
            break                       # stopping, and nothing is left to sync
        fd = old = -1
        seq = s.started
        if s.staged[slot] >= 0:
            # file() named the next file: this thread's own description of
            # it from now on (file() touches only staged, so the one this
            # thread syncs through is never closed under it)
            old = s.fds[slot]
            s.fds[slot] = s.staged[slot]
            s.staged[slot] = -1
        if s.has_file and fb_load(&s.want) > s.started:
            seq = s.started = fb_load(&s.want)
            fd = s.fds[slot]
        fin, nfin = s.fin, s.nfin
        s.fin = NULL
        s.nfin = s.capfin = 0
        ticket = s.next_ticket
        s.next_ticket += 1
        k = ticket % MAX_THREADS
        s.ticket_seq[k] = seq
        s.ticket_over[k] = False
        s.busy += 1
        pthread_mutex_unlock(&s.mu)
        if old >= 0:
            close(old)                  # its file was finished (finish() syncs it) or is unused
        err = 0
        for i in range(nfin):
            e = _sync_close(s, fin[i])
            if e and not err:
                err = e
        free(fin)
        took = -1
        if fd >= 0:
            t0 = now_ns()
            e = _sync(s, fd)
            took = now_ns() - t0
            if e and not err:
                err = e
        pthread_mutex_lock(&s.mu)
        s.busy -= 1
        s.ticket_err[k] = err
        if took >= 0:
            s.sync_hist[fb_bucket(fb_fsync_bounds, FB_FSYNC_BOUNDS, took)] += 1
            s.sync_ns += took
        s.ticket_over[k] = True
        _report(s)
        if s.nfin > 0 or fb_load(&s.want) > s.started:
            pthread_cond_signal(&s.wake)    # more came meanwhile: an idle thread takes it
    pthread_mutex_unlock(&s.mu)
    return NULL


@cython.final
cdef class SyncThread(Worker):
    cdef State s

    def __cinit__(self, int threads=1):
        # Everything __dealloc__ releases is valid before anything can raise.
        cdef int i
        for i in range(MAX_THREADS):
            self.s.fds[i] = self.s.staged[i] = -1
        self.s.efd = -1
        pthread_mutex_init(&self.s.mu, NULL)
        pthread_cond_init(&self.s.wake, NULL)
        if not 1 <= threads <= MAX_THREADS:
            raise ValueError("threads must be 1 to %d" % MAX_THREADS)
        self.s.threads = threads
        self.s.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.s.efd < 0:
            raise OSError(errno, "eventfd failed")
        self._start(sync_main, &self.s, &self.s.mu, &self.s.wake, &self.s.stopping, "fsync",
                    threads)

    def fileno(self):
        """The eventfd that becomes readable when a sync has finished."""
        return self.s.efd

    def file(self, path):
        """Later requests are for records in the file at `path` (the current
        binlog file), opened here once per thread (each thread takes its own
        in when it next takes work, and closes its old one). Raises OSError,
        and then the earlier file stays the one synced."""
        cdef bytes p = os.fsencode(path)
        cdef int fds[MAX_THREADS]
        cdef int i, k
        for i in range(self.s.threads):
            fds[i] = c_open(p, O_RDONLY | O_CLOEXEC)
            if fds[i] < 0:
                e = errno
                for k in range(i):
                    close(fds[k])
                raise OSError(e, "cannot open %s for its fsyncs" % path)
        pthread_mutex_lock(&self.s.mu)
        for i in range(self.s.threads):
            fds[i], self.s.staged[i] = self.s.staged[i], fds[i]     # an untaken one comes back
        self.s.has_file = True
        pthread_mutex_unlock(&self.s.mu)
        for i in range(self.s.threads):
            if fds[i] >= 0:
                close(fds[i])

    def request(self, int64_t seq):
        """Records up to number seq are written (to the current file or to a
        finished one): sync them."""
        if seq <= fb_load(&self.s.want):
            return
        fb_store(&self.s.want, seq)
        if fb_load(&self.s.idle) > 0:
            pthread_mutex_lock(&self.s.mu)
            pthread_cond_signal(&self.s.wake)
            pthread_mutex_unlock(&self.s.mu)

    def finish(self, int fd):
        """fd's file is finished: sync it before any record requested later
        counts as synced. The thread takes fd over (and closes it once
        synced), unless this raises (MemoryError: fd is still the caller's).
        Its errors come back through collect() like any sync's."""
        cdef int d = fd
        cdef int *fin
        pthread_mutex_lock(&self.s.mu)
        if self.s.nfin == self.s.capfin:
            fin = <int *>realloc(self.s.fin, (self.s.capfin * 2 + 4) * sizeof(int))
            if fin == NULL:
                pthread_mutex_unlock(&self.s.mu)
                raise MemoryError()
            self.s.fin = fin
            self.s.capfin = self.s.capfin * 2 + 4
        self.s.fin[self.s.nfin] = d
        self.s.nfin += 1
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def collect(self):
        """After the eventfd fired: (records synced, errno of the first failed
        sync or 0). Once a sync has failed, the count stays where it was
        before that sync, and the errno is reported on every call."""
        cdef uint64_t n
        cdef int err
        pthread_mutex_lock(&self.s.mu)
        while read(self.s.efd, &n, sizeof(n)) < 0 and errno == EINTR:
            pass
        self.s.notified = False
        n = self.s.done
        err = self.s.error
        pthread_mutex_unlock(&self.s.mu)
        return n, err

    def retries(self):
        """fdatasyncs tried again because the kernel was short of memory."""
        return fb_load(&self.s.retries)

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
        for i in range(MAX_THREADS):
            if self.s.fds[i] >= 0:
                close(self.s.fds[i])
            if self.s.staged[i] >= 0:
                close(self.s.staged[i])
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
# on ext4 and XFS an fdatasync then waits for a journal commit (240-300 us
# here against 100-150 us for an overwrite, which caps -f 0). beanstalkd
# avoids that by writing its files full of zeros before use, stalling its
# loop for each new file. ZeroFill does the same in a thread, a bounded
# distance ahead of the records (FILL_AHEAD: filling further gains nothing
# measurable and costs a second write of every byte of a file the records
# may never reach): it overwrites the reserved space with zeros a chunk at a
# time, each chunk written back before the next so that a group commit
# never has to flush more than one chunk of them. It works through an open
# file of its own, so that the write-back errors it sees are not taken from
# the group commit's fdatasync. Once the current file's records have reached
# half of it, it also fills the start of the spare file the binlog keeps
# ready, so that file is fast from its first record too.
#
# The loop writes records at increasing offsets and says where they end
# (claim()). The filler only ever writes at or above `pos`, which only grows,
# and writes each chunk under the lock. A record that ends at or below pos
# therefore needs no coordination; one that reaches above it (the filler fell
# behind) takes the lock and moves the filler past itself first. Nothing
# writes to the spare until it becomes the current file (promote()).
#
# The filler writes a chunk back (sync_file_range) outside the lock, through
# the file's own descriptor, not a dup (no new descriptor, even at EMFILE): a
# file replaced meanwhile is closed by the filler once it is done with it.

cdef enum:
    CHUNK = 65536
    FILL_AHEAD = 16 * CHUNK

# for tests: how far ahead of the records the filler writes zeros, and its unit
FILL_AHEAD_BYTES = FILL_AHEAD
FILL_CHUNK_BYTES = CHUNK


cdef struct FillFile:
    int fd                # the filler's own open file; -1 when none
    int64_t pos           # the filler writes only at or above this (atomic)
    int64_t head          # the loop's records end here (atomic)
    int64_t end           # the file's allocated size

cdef struct FillState:
    pthread_mutex_t mu
    pthread_cond_t wake
    FillFile cur          # the current file
    FillFile nxt          # the spare, filled once cur's records reach half of it
    bint nxt_due
    int64_t asleep        # the filler waits for the records to move on (atomic)
    char *zeros
    int error             # errno of the last failed fill, 0 if none
    int busy              # the descriptor the filler writes back through, unlocked; -1 if none
    bint close_busy       # it was replaced meanwhile: the filler closes it when done
    bint stopping


cdef inline bint _fill_due(FillFile *f) noexcept nogil:
    return f.fd >= 0 and f.pos < f.end and f.pos < fb_load(&f.head) + FILL_AHEAD


cdef void _fill_close(FillState *s, int fd) noexcept nogil:
    # Under s.mu: fd is replaced; closed now, or by the filler once done with it.
    if fd < 0:
        return
    if fd == s.busy:
        s.close_busy = True
    else:
        close(fd)


cdef void _fill_set(FillState *s, FillFile *f, int fd, int64_t used, int64_t end) noexcept nogil:
    # Records end at `used`: filling starts at the chunk after the one they
    # are being written in.
    _fill_close(s, f.fd)
    f.fd = fd
    f.end = end
    fb_store(&f.head, used)
    fb_store(&f.pos, (used // CHUNK + 1) * CHUNK)


cdef inline bint _filler_due(FillState *s) noexcept nogil:
    return _fill_due(&s.cur) or (s.nxt_due and _fill_due(&s.nxt))


cdef void *fill_main(void *arg) noexcept nogil:
    cdef FillState *s = <FillState *>arg
    cdef FillFile *f
    cdef int64_t start, stop, pos, head
    cdef ssize_t n
    cdef int fd
    cdef bint last
    setpriority(PRIO_PROCESS, <unsigned int>syscall(SYS_gettid), 19)   # best effort
    pthread_mutex_lock(&s.mu)
    while True:
        fb_store(&s.asleep, 1)
        while not s.stopping and not _filler_due(s):
            pthread_cond_wait(&s.wake, &s.mu)
        fb_store(&s.asleep, 0)
        if s.stopping:
            break
        f = &s.cur if _fill_due(&s.cur) else &s.nxt
        head = fb_load(&f.head)
        start = f.pos if f.pos > head else head
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
        fd = s.busy = f.fd
        pthread_mutex_unlock(&s.mu)
        if pos > start:
            sync_file_range(fd, start, pos - start, SYNC_FILE_RANGE_WAIT_BEFORE |
                            SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
        if last:
            fdatasync(fd)       # commit the extent changes: later syncs need no journal commit
        pthread_mutex_lock(&s.mu)
        s.busy = -1
        if s.close_busy:
            s.close_busy = False
            close(fd)
    pthread_mutex_unlock(&s.mu)
    return NULL


@cython.final
cdef class ZeroFill(Worker):
    """Overwrites the current binlog file's reserved space with zeros, ahead of
    its records, and then the start of the spare's."""
    cdef FillState s

    def __cinit__(self):
        self.s.cur.fd = self.s.nxt.fd = self.s.busy = -1
        pthread_mutex_init(&self.s.mu, NULL)
        pthread_cond_init(&self.s.wake, NULL)
        self.s.zeros = <char *>calloc(1, CHUNK)
        if self.s.zeros == NULL:
            raise MemoryError()
        self._start(fill_main, &self.s, &self.s.mu, &self.s.wake, &self.s.stopping, "zero-fill", 1)

    def file(self, int fd, int64_t used, int64_t end):
        """Fill the new current file, open as fd (its own open file, which the
        filler takes over and closes): records end at `used`, `end` bytes are
        allocated. Once this returns, nothing more is written to the
        previous file."""
        pthread_mutex_lock(&self.s.mu)
        _fill_set(&self.s, &self.s.cur, fd, used, end)
        self.s.nxt_due = False
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def spare(self, int fd, int64_t used, int64_t end):
        """Fill the start of this file (taken over as with file()) once the
        current one's records reach half of it; it replaces an earlier spare.
        fd -1: no spare any more."""
        pthread_mutex_lock(&self.s.mu)
        _fill_set(&self.s, &self.s.nxt, fd, used, end)
        self.s.nxt_due = fb_load(&self.s.cur.head) * 2 >= self.s.cur.end
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def promote(self):
        """The spare is the current file now, and the loop writes records to it
        from its `used` on; nothing more is written to the previous file."""
        pthread_mutex_lock(&self.s.mu)
        _fill_close(&self.s, self.s.cur.fd)
        self.s.cur.fd = self.s.nxt.fd
        self.s.cur.end = self.s.nxt.end
        fb_store(&self.s.cur.head, fb_load(&self.s.nxt.head))
        fb_store(&self.s.cur.pos, fb_load(&self.s.nxt.pos))
        self.s.nxt.fd = -1
        self.s.nxt_due = False
        pthread_cond_signal(&self.s.wake)
        pthread_mutex_unlock(&self.s.mu)

    def claim(self, int64_t end):
        """The loop is about to write records up to offset `end` of the current file."""
        cdef int64_t pos = fb_load(&self.s.cur.pos)
        cdef bint half = not self.s.nxt_due and end * 2 >= self.s.cur.end and self.s.nxt.fd >= 0
        fb_store(&self.s.cur.head, end)
        if end <= pos and not half and not (fb_load(&self.s.asleep)
                                            and pos < end + FILL_AHEAD // 2):
            return
        # The filler is behind (it must skip past the record), or has fallen
        # to half its lead and sleeps, or the spare's turn has come.
        with nogil:
            pthread_mutex_lock(&self.s.mu)
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
