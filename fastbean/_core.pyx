# cython: language_level=3
"""The queue engine (see _core.pxd): every command of the beanstalk protocol."""

import os

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t, INT64_MAX
from libc.stdlib cimport malloc, calloc, realloc, free, qsort
from libc.string cimport memcpy, memcmp, memset, memmove
from libc.stdio cimport snprintf
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME
from posix.resource cimport getrusage, rusage, RUSAGE_SELF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.pyport cimport PY_SSIZE_T_MAX

from fastbean._parser cimport (
    Parser, Cmd, OP_NONE, OP_PUT, OP_PEEK, OP_PEEK_READY, OP_PEEK_DELAYED, OP_PEEK_BURIED,
    OP_RESERVE, OP_RESERVE_TIMEOUT, OP_DELETE, OP_RELEASE, OP_USE, OP_WATCH, OP_IGNORE,
    OP_BURY, OP_KICK, OP_TOUCH, OP_STATS, OP_STATS_JOB, OP_STATS_TUBE, OP_LIST_TUBES,
    OP_LIST_TUBE_USED, OP_LIST_TUBES_WATCHED, OP_PAUSE_TUBE, OP_RESERVE_JOB, OP_KICK_JOB,
    OP_QUIT, OP_PUT_BODY, OP_SKIPPED, OP_UNKNOWN, OP_BAD_FORMAT, OP_EXT,
    ERR_NONE, ERR_BAD_FORMAT, ERR_EXPECTED_CRLF, ERR_JOB_TOO_BIG, ERR_OUT_OF_MEMORY,
    ERR_DRAINING, OP_COUNT, OP_TEST_RESET, OP_TEST_ADVANCE,
)

include "_heap.pxi"
include "_table.pxi"
include "_wal.pxi"
include "_metrics.pxi"
include "_testing.pxi"

cdef extern from *:
    """
    #ifndef FASTBEAN_DEBUG
    #define FASTBEAN_DEBUG 0
    #endif
    """
    bint DEBUG_BUILD "FASTBEAN_DEBUG"    # setup.py: FASTBEAN_DEBUG=1 checks every structure after every command

cdef extern from "_arena.h":
    int fb_arena_install()
    void fb_heap_check() nogil
    size_t HEAP_PAD "FB_HEAP_PAD"
    ctypedef struct ArenaPool "fb_arenas_t":
        int count
        size_t size
        int installed
        unsigned long long taken_warm, taken_cold, prefaulted
    ArenaPool fb_arenas


def prefault_arenas():
    """Have a helper thread fault in pymalloc's next arenas ahead of demand
    (see _arena.h). The server calls this once at start-up; True if it runs."""
    return fb_arena_install() == 0


def arena_stats():
    """The prefault pool's counters (read without its lock: a snapshot for tests and logs)."""
    return {"installed": bool(fb_arenas.installed), "arena_size": fb_arenas.size,
            "pooled": fb_arenas.count, "prefaulted": fb_arenas.prefaulted,
            "taken_warm": fb_arenas.taken_warm, "taken_cold": fb_arenas.taken_cold}


cdef extern from "malloc.h":
    int malloc_trim(size_t pad)
    int mallopt(int param, int value)
    int M_MMAP_THRESHOLD

cdef enum:
    URGENT_PRI = 1024                 # pri below this counts as urgent
    KICK_BATCH = 4096                 # jobs one kick moves per loop turn
    TRIM_AFTER = 64 << 20             # a backlog this big that drains gives its memory back
    READ_HIGH = 1 << 20               # stop reading a blocked connection past this many bytes
    READ_LOW = 1 << 18
    JOB_OVERHEAD = 256                # bytes charged per job beyond its body (struct, bytes header, slots)
    # Bytes of put bodies one connection may add per run; the rest waits a
    # turn. Otherwise a producer pipelining big bodies outruns its consumers
    # by the depth of its pipeline every turn, and the queue (and RSS)
    # balloons under a load beanstalkd keeps balanced.
    BODY_BUDGET = 65536

cdef int64_t SEC = 1000000000
cdef int64_t MARGIN = 1000000000      # DEADLINE_SOON window before a TTR ends


# How far fastbean-clock-advance has moved the engine's clock (_testing.pxi);
# always 0 without --testing.
cdef int64_t clock_offset = 0


cdef inline int64_t real_mono_ns() noexcept nogil:
    # Elapsed time that a test clock must not move (reply latency).
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline int64_t mono_ns() noexcept nogil:
    return real_mono_ns() + clock_offset


cdef inline int64_t wall_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec + clock_offset


# -- heap orders ---------------------------------------------------------------

cdef bint _ready_less(void *a, void *b) noexcept nogil:
    cdef Job *x = <Job *>a
    cdef Job *y = <Job *>b
    return x.pri < y.pri or (x.pri == y.pri and x.id < y.id)


cdef bint _deadline_less(void *a, void *b) noexcept nogil:
    cdef Job *x = <Job *>a
    cdef Job *y = <Job *>b
    return x.deadline < y.deadline or (x.deadline == y.deadline and x.id < y.id)


cdef void _job_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<Job *>a).heap_index = i


cdef bint _tube_less(void *a, void *b) noexcept nogil:
    return (<Tube *>a).timer_at < (<Tube *>b).timer_at


cdef void _tube_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<Tube *>a).timer_index = i


cdef bint _timer_less(void *a, void *b) noexcept nogil:
    return (<ConnTimer *>a).at < (<ConnTimer *>b).at


cdef void _timer_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<ConnTimer *>a).index = i


# -- replies -------------------------------------------------------------------

cdef const char *_err_text(int err) noexcept:
    if err == ERR_BAD_FORMAT:
        return b"BAD_FORMAT\r\n"
    if err == ERR_EXPECTED_CRLF:
        return b"EXPECTED_CRLF\r\n"
    if err == ERR_JOB_TOO_BIG:
        return b"JOB_TOO_BIG\r\n"
    if err == ERR_OUT_OF_MEMORY:
        return b"OUT_OF_MEMORY\r\n"
    if err == ERR_DRAINING:
        return b"DRAINING\r\n"
    return b"INTERNAL_ERROR\r\n"

STATE_NAMES = {JOB_READY: b"ready", JOB_RESERVED: b"reserved", JOB_BURIED: b"buried",
               JOB_DELAYED: b"delayed", JOB_INVALID: b"invalid"}

# stats keys for the command counters, in beanstalkd's order (op 1..22).
CMD_KEYS = [b"cmd-put", b"cmd-peek", b"cmd-peek-ready", b"cmd-peek-delayed",
            b"cmd-peek-buried", b"cmd-reserve", b"cmd-reserve-with-timeout", b"cmd-delete",
            b"cmd-release", b"cmd-use", b"cmd-watch", b"cmd-ignore", b"cmd-bury", b"cmd-kick",
            b"cmd-touch", b"cmd-stats", b"cmd-stats-job", b"cmd-stats-tube", b"cmd-list-tubes",
            b"cmd-list-tube-used", b"cmd-list-tubes-watched", b"cmd-pause-tube"]


cdef inline bint _name_byte(char c) noexcept:
    return ((c'a' <= c <= c'z') or (c'A' <= c <= c'Z') or (c'0' <= c <= c'9')
            or c == c'-' or c == c'+' or c == c'/' or c == c';' or c == c'.'
            or c == c'$' or c == c'_' or c == c'(' or c == c')')


cdef inline bytes _sec(int64_t ns):
    # whole seconds, truncated toward zero as C division does
    cdef int64_t s = ns // SEC if ns >= 0 else -((-ns) // SEC)
    return b"%d" % s


ctypedef struct TurnSlot:
    uint64_t served
    PyObject *conn


cdef int _slot_cmp(const void *a, const void *b) noexcept nogil:
    cdef uint64_t x = (<const TurnSlot *>a).served
    cdef uint64_t y = (<const TurnSlot *>b).served
    return (x > y) - (x < y)


cdef class Core:
    """All queue state of one server."""

    def __cinit__(self):
        table_init(&self.jobs)
        heap_init(&self.tube_timers, _tube_less, _tube_setpos)
        heap_init(&self.ttr_heap, _deadline_less, _job_setpos)
        heap_init(&self.conn_timers, _timer_less, _timer_setpos)
        self.tubes = NULL
        self.eligible = NULL
        self.default_tube = NULL

    def __init__(self, *, max_job_size=65535, max_memory=0, version=b"0.0",
                 batch_limit=1024, binlog_max_size=10485760, arm=None):
        self.binlog_max_size = binlog_max_size
        self.next_id = 1
        self.tube_by_name = {}
        self.dirty = []
        self.max_job_size = max_job_size
        self.max_memory = max_memory or 0
        self.batch_limit = batch_limit
        self.draining = False
        self.armed_at = INT64_MAX
        self.arm = arm
        self.started_mono = mono_ns()
        # A fixed threshold keeps big arrays (heaps, the id table) in their own
        # mappings, which free() unmaps; glibc's sliding threshold would move
        # them onto the heap after the first large free.
        mallopt(M_MMAP_THRESHOLD, 256 * 1024)
        self.instance_id = os.urandom(8).hex().encode()
        u = os.uname()
        self.hostname = u.nodename.encode()
        self.os_version = u.version.encode()
        self.machine = u.machine.encode()
        self.version = version if isinstance(version, bytes) else version.encode()
        self.wal_on = False
        self.wba = bytearray()
        self.held = []
        self.binlog = None
        self.ext_stats = None
        self.sleeping = False      # until a poller sets it: nothing to wake
        self.turn = []
        self.default_tube = self.tube_get(b"default", 7, True)
        self.tube_incref(self.default_tube)        # default is never freed

    def __dealloc__(self):
        # Process exit normally frees everything; this matters for tests that
        # make many engines. Jobs are freed with their tubes' structures.
        cdef Job *j
        cdef Job *nxt
        cdef Py_ssize_t b, i
        cdef JobTable *t = &self.jobs
        if t.t0 != NULL:
            for b in range(t.mask0 + 1):
                j = t.t0[b]
                while j != NULL:
                    Py_XDECREF(j.body)
                    nxt = j.ht_next
                    PyMem_Free(j)
                    j = nxt
        if t.t1 != NULL:
            for b in range(t.mask1 + 1):
                j = t.t1[b]
                while j != NULL:
                    Py_XDECREF(j.body)
                    nxt = j.ht_next
                    PyMem_Free(j)
                    j = nxt
        table_free(t)
        heap_free(&self.tube_timers)
        heap_free(&self.ttr_heap)
        heap_free(&self.conn_timers)
        for i in range(self.ntubes):
            heap_free(&self.tubes[i].ready)
            heap_free(&self.tubes[i].delay)
            free(self.tubes[i].waiting)
            Py_XDECREF(self.tubes[i].name)
            free(self.tubes[i])
        free(self.tubes)
        free(self.eligible)

    # -- tubes -----------------------------------------------------------------

    cdef Tube *tube_get(self, const char *name, Py_ssize_t n, bint create) except? NULL:
        cdef Tube *t
        cdef Tube **tubes
        key = PyBytes_FromStringAndSize(name, n)
        addr = self.tube_by_name.get(key)
        if addr is not None:
            return <Tube *><size_t>addr
        if not create:
            return NULL
        t = <Tube *>calloc(1, sizeof(Tube))
        if t == NULL:
            raise MemoryError()
        if self.ntubes == self.captubes:
            tubes = <Tube **>realloc(self.tubes, (self.captubes * 2 + 8) * sizeof(Tube *))
            if tubes == NULL:
                free(t)
                raise MemoryError()
            self.tubes = tubes
            self.captubes = self.captubes * 2 + 8
        t.name = <PyObject *>key
        Py_INCREF(key)
        heap_init(&t.ready, _ready_less, _job_setpos)
        heap_init(&t.delay, _deadline_less, _job_setpos)
        t.timer_index = -1
        t.elig_index = -1
        t.list_index = self.ntubes
        self.tubes[self.ntubes] = t
        self.ntubes += 1
        self.tube_by_name[key] = <size_t>t
        return t

    cdef void tube_incref(self, Tube *t) noexcept:
        t.refs += 1

    cdef void tube_decref(self, Tube *t):
        cdef Tube *last
        t.refs -= 1
        if t.refs > 0:
            return
        # Unused and empty: forget it, pause and counters included (reference §3.8).
        del self.tube_by_name[<object>t.name]
        last = self.tubes[self.ntubes - 1]
        self.tubes[t.list_index] = last
        last.list_index = t.list_index
        self.ntubes -= 1
        if t.timer_index >= 0:
            heap_remove(&self.tube_timers, t.timer_index)
        if t.elig_index >= 0:
            self._elig_remove(t)
        heap_free(&t.ready)
        heap_free(&t.delay)
        free(t.waiting)
        Py_DECREF(<object>t.name)
        free(t)

    cdef void _elig_remove(self, Tube *t) noexcept:
        cdef Tube *last = self.eligible[self.neligible - 1]
        self.eligible[t.elig_index] = last
        last.elig_index = t.elig_index
        self.neligible -= 1
        t.elig_index = -1

    cdef void tube_update(self, Tube *t) noexcept:
        # Keep core.eligible = tubes a reservation could be made from now.
        cdef bint elig = t.nwaiting > 0 and t.ready.len > 0 and t.pause_ns == 0
        cdef Tube **arr
        if elig and t.elig_index < 0:
            if self.neligible == self.capeligible:
                arr = <Tube **>realloc(self.eligible, (self.capeligible * 2 + 8) * sizeof(Tube *))
                if arr == NULL:
                    return      # process_queue will simply not see it until the next change
                self.eligible = arr
                self.capeligible = self.capeligible * 2 + 8
            t.elig_index = self.neligible
            self.eligible[self.neligible] = t
            self.neligible += 1
        elif not elig and t.elig_index >= 0:
            self._elig_remove(t)

    cdef int tube_retime(self, Tube *t) except -1:
        # The tube's timer: its soonest delayed job, or the end of its pause.
        cdef int64_t at = INT64_MAX
        if t.delay.len:
            at = (<Job *>t.delay.items[0]).deadline
        if t.pause_ns and t.unpause_at < at:
            at = t.unpause_at
        if at == INT64_MAX:
            if t.timer_index >= 0:
                heap_remove(&self.tube_timers, t.timer_index)
            return 0
        t.timer_at = at
        if t.timer_index >= 0:
            heap_fix(&self.tube_timers, t.timer_index)
        else:
            heap_insert(&self.tube_timers, t)
        return 0

    # -- jobs ------------------------------------------------------------------

    cdef Job *job_new(self, uint64_t id, uint32_t pri, int64_t delay_ns, int64_t ttr_ns,
                      Tube *t, object body) except NULL:
        # Jobs come from Python's small-object allocator: its arenas go back
        # to the OS once empty, so memory follows a backlog down again.
        cdef Job *j = <Job *>PyMem_Malloc(sizeof(Job))
        if j == NULL:
            raise MemoryError()
        memset(j, 0, sizeof(Job))
        j.id = id
        j.pri = pri
        j.delay_ns = delay_ns
        j.ttr_ns = ttr_ns
        j.created_wall = wall_ns()
        j.tube = t
        j.heap_index = -1
        j.body = <PyObject *>body
        Py_INCREF(body)
        self.tube_incref(t)
        table_insert(&self.jobs, j)
        if PyBytes_GET_SIZE(body) > 512:
            fb_heap_check()             # big bodies come from malloc's heap: see _arena.h
        return j

    cdef void mem_charge(self, Py_ssize_t n) noexcept:
        # bytes of a job now held; the peak decides when a drain gives memory back
        self.mem_used += n
        if self.mem_used > self.mem_peak:
            self.mem_peak = self.mem_used

    cdef void job_free(self, Job *j):
        table_remove(&self.jobs, j)
        self.mem_used -= PyBytes_GET_SIZE(<object>j.body) + JOB_OVERHEAD
        if self.mem_peak > TRIM_AFTER and self.mem_used * 8 < self.mem_peak and not self.trim_due:
            self.trim_due = True        # tick() trims; rearm() after this command arms it
        Py_DECREF(<object>j.body)
        self.tube_decref(j.tube)
        PyMem_Free(j)

    cdef int job_unlink(self, Job *j) except -1:
        # Take j out of whatever holds it in its current state.
        cdef Tube *t = j.tube
        cdef Conn c
        if j.state == JOB_READY:
            heap_remove(&t.ready, j.heap_index)
            self.ready_ct -= 1
            if j.pri < URGENT_PRI:
                self.urgent_ct -= 1
                t.urgent_ct -= 1
            self.tube_update(t)
        elif j.state == JOB_DELAYED:
            heap_remove(&t.delay, j.heap_index)
            self.delayed_ct -= 1
            self.tube_retime(t)
        elif j.state == JOB_BURIED:
            if j.prev != NULL:
                j.prev.next = j.next
            else:
                t.buried_head = j.next
            if j.next != NULL:
                j.next.prev = j.prev
            else:
                t.buried_tail = j.prev
            t.buried_ct -= 1
            self.buried_ct -= 1
        elif j.state == JOB_RESERVED:
            c = <Conn>j.owner
            if j.prev != NULL:
                j.prev.next = j.next
            else:
                c.res_head = j.next
            if j.next != NULL:
                j.next.prev = j.prev
            else:
                c.res_tail = j.prev
            c.nreserved -= 1
            if c.soonest == j:
                c.soonest = NULL
            heap_remove(&self.ttr_heap, j.heap_index)
            j.owner = NULL
            t.reserved_ct -= 1
            self.reserved_ct -= 1
        j.prev = j.next = NULL
        j.heap_index = -1
        j.state = JOB_INVALID
        return 0

    cdef int job_delete(self, Job *j) except -1:
        self.job_unlink(j)
        j.tube.cmd_delete += 1
        if self.wal_on and j.wal_file:
            # spends the space reserved at put time; cannot fail for room
            self.wal_record(j, False)
            self.wal_resv -= WAL_SHORT
            self.wal_disown(j)
        self.job_free(j)
        return 0

    cdef int job_make_ready(self, Job *j) except -1:
        cdef Tube *t = j.tube
        j.state = JOB_READY
        heap_insert(&t.ready, j)
        self.ready_ct += 1
        if j.pri < URGENT_PRI:
            self.urgent_ct += 1
            t.urgent_ct += 1
        self.tube_update(t)
        # Serve waiters job by job, as beanstalkd does: with several waiters,
        # which one gets which job depends on it.
        if self.neligible:
            self.process_queue()
        return 0

    cdef int job_make_delayed(self, Job *j, int64_t deadline) except -1:
        cdef Tube *t = j.tube
        j.state = JOB_DELAYED
        j.deadline = deadline
        heap_insert(&t.delay, j)
        self.delayed_ct += 1
        if j.heap_index == 0:
            self.tube_retime(t)
        return 0

    cdef int job_bury(self, Job *j) except -1:
        cdef Tube *t = j.tube
        j.state = JOB_BURIED
        j.bury_ct += 1
        j.next = NULL
        j.prev = t.buried_tail
        if t.buried_tail != NULL:
            t.buried_tail.next = j
        else:
            t.buried_head = j
        t.buried_tail = j
        t.buried_ct += 1
        self.buried_ct += 1
        return 0

    cdef int job_reserve(self, Conn c, Job *j, int64_t now) except -1:
        j.state = JOB_RESERVED
        j.deadline = now + j.ttr_ns
        j.reserve_ct += 1
        j.owner = <PyObject *>c
        j.next = NULL
        j.prev = c.res_tail
        if c.res_tail != NULL:
            c.res_tail.next = j
        else:
            c.res_head = j
        c.res_tail = j
        c.nreserved += 1
        if c.nreserved == 1 or (c.soonest != NULL and j.deadline < c.soonest.deadline):
            c.soonest = j
        heap_insert(&self.ttr_heap, j)
        j.tube.reserved_ct += 1
        self.reserved_ct += 1
        return 0

    # -- reservations ----------------------------------------------------------

    cdef Job *conn_soonest(self, Conn c) noexcept:
        cdef Job *j
        if c.nreserved == 0:
            return NULL
        if c.soonest == NULL:
            j = c.res_head
            c.soonest = j
            while j != NULL:
                if j.deadline < c.soonest.deadline:
                    c.soonest = j
                j = j.next
        return c.soonest

    cdef bint _deadline_soon(self, Conn c, int64_t now) noexcept:
        cdef Job *j = self.conn_soonest(c)
        return j != NULL and now >= j.deadline - MARGIN

    cdef bint _conn_ready(self, Conn c) noexcept:
        # Any watched tube with a ready job, paused or not (as beanstalkd).
        cdef Py_ssize_t i
        for i in range(c.nwatch):
            if c.watch[i].tube.ready.len:
                return True
        return False

    cdef int waiting_add(self, Conn c) except -1:
        cdef Py_ssize_t i
        cdef Tube *t
        cdef Waiter *w
        for i in range(c.nwatch):
            t = c.watch[i].tube
            if t.nwaiting == t.capwaiting:
                w = <Waiter *>realloc(t.waiting, (t.capwaiting * 2 + 4) * sizeof(Waiter))
                if w == NULL:
                    raise MemoryError()
                t.waiting = w
                t.capwaiting = t.capwaiting * 2 + 4
        c.waiting = True
        self.waiting_ct += 1
        for i in range(c.nwatch):
            t = c.watch[i].tube
            t.waiting[t.nwaiting].conn = <PyObject *>c
            t.waiting[t.nwaiting].slot = i
            c.watch[i].wpos = t.nwaiting
            t.nwaiting += 1
            self.tube_update(t)
        return 0

    cdef void _waiter_drop(self, Tube *t, Py_ssize_t k) noexcept:
        # Remove entry k of t.waiting by moving the last entry into its place.
        cdef Waiter *last
        cdef Conn moved
        t.nwaiting -= 1
        if k != t.nwaiting:
            last = &t.waiting[t.nwaiting]
            t.waiting[k] = last[0]
            moved = <Conn>t.waiting[k].conn
            moved.watch[t.waiting[k].slot].wpos = k
        self.tube_update(t)

    cdef void waiting_remove(self, Conn c) noexcept:
        cdef Py_ssize_t i
        if not c.waiting:
            return
        c.waiting = False
        self.waiting_ct -= 1
        c.timeout_at = -1
        for i in range(c.nwatch):
            if c.watch[i].wpos >= 0:
                self._waiter_drop(c.watch[i].tube, c.watch[i].wpos)
                c.watch[i].wpos = -1
        if c.timer.index >= 0:
            heap_remove(&self.conn_timers, c.timer.index)

    cdef Conn _waiter_take(self, Tube *t):
        # beanstalkd's pick: a rotating index into an array with swap-removal.
        cdef Py_ssize_t k
        cdef Conn c
        t.wrot = t.wrot % t.nwaiting
        k = t.wrot
        c = <Conn>t.waiting[k].conn
        c.watch[t.waiting[k].slot].wpos = -1
        self._waiter_drop(t, k)
        t.wrot += 1
        self.waiting_remove(c)
        return c

    cdef int process_queue(self) except -1:
        # Match ready jobs with waiting connections until no tube has both.
        cdef Py_ssize_t i
        cdef Tube *best
        cdef Tube *t
        cdef Job *j
        cdef Conn c
        cdef int64_t now = 0
        while self.neligible:
            best = self.eligible[0]
            for i in range(1, self.neligible):
                t = self.eligible[i]
                if _ready_less(t.ready.items[0], best.ready.items[0]):
                    best = t
            j = <Job *>best.ready.items[0]
            self.job_unlink(j)
            c = self._waiter_take(best)
            if now == 0:
                now = mono_ns()
            self.job_reserve(c, j, now)
            c.out_job(b"RESERVED", 8, j)
            self._touched(c)
        return 0

    cdef inline void _touched(self, Conn c):
        # c got output outside its own run(): flush it (and run what it has
        # buffered) once the current work is done.
        if not c.in_run and not c.dirty:
            c.dirty = True
            self.dirty.append(c)

    cdef int conn_retime(self, Conn c, int64_t now) except -1:
        # A waiting connection's timer: its reserve timeout, or the start of
        # the DEADLINE_SOON margin of its soonest reserved job.
        cdef int64_t at = INT64_MAX
        cdef Job *j
        if c.waiting:
            if c.timeout_at >= 0:
                at = c.timeout_at
            j = self.conn_soonest(c)
            if j != NULL and j.deadline - MARGIN < at:
                at = j.deadline - MARGIN
        if at == INT64_MAX:
            if c.timer.index >= 0:
                heap_remove(&self.conn_timers, c.timer.index)
            return 0
        c.timer.at = at
        if c.timer.index >= 0:
            heap_fix(&self.conn_timers, c.timer.index)
        else:
            heap_insert(&self.conn_timers, &c.timer)
        return 0

    # -- timers ----------------------------------------------------------------

    cdef int64_t _next_deadline(self) noexcept:
        cdef int64_t at = INT64_MAX
        cdef int64_t x
        if self.trim_due:
            return 0
        if self.tube_timers.len:
            at = (<Tube *>self.tube_timers.items[0]).timer_at
        if self.ttr_heap.len:
            x = (<Job *>self.ttr_heap.items[0]).deadline
            if x < at:
                at = x
        if self.conn_timers.len:
            x = (<ConnTimer *>self.conn_timers.items[0]).at
            if x < at:
                at = x
        return at

    cdef int rearm(self) except -1:
        # Ask the Python layer for an earlier wake-up if something new is due
        # before the one already armed.
        cdef int64_t at = self._next_deadline()
        cdef int64_t now
        if at < self.armed_at:
            self.armed_at = at
            if self.arm is not None:
                now = mono_ns()
                self.arm(0.0 if at <= now else (at - now) / 1e9)
        return 0

    def tick(self, Py_ssize_t budget=10000):
        """Do what is due: delays, pauses, TTRs, reserve timeouts.

        At most `budget` jobs or connections are handled; returns the delay in
        seconds until the next call is needed (0.0 when work is left over), or
        None when nothing is scheduled.
        """
        cdef int64_t now = mono_ns()
        cdef Tube *t
        cdef Job *j
        cdef ConnTimer *ct
        cdef Conn c
        cdef Py_ssize_t done = 0
        while self.tube_timers.len and done < budget:
            t = <Tube *>self.tube_timers.items[0]
            if t.timer_at > now:
                break
            while t.delay.len and done < budget:
                j = <Job *>t.delay.items[0]
                if j.deadline > now:
                    break
                self.job_unlink(j)
                self.job_make_ready(j)
                done += 1
            if t.pause_ns and t.unpause_at <= now:
                t.pause_ns = 0
                self.tube_update(t)
                if self.neligible:
                    self.process_queue()
            self.tube_retime(t)
        while self.ttr_heap.len and done < budget:
            j = <Job *>self.ttr_heap.items[0]
            if j.deadline > now:
                break
            c = <Conn>j.owner
            self.job_unlink(j)
            j.timeout_ct += 1
            self.job_timeouts += 1
            self.job_make_ready(j)
            if c.waiting:
                self.conn_retime(c, now)
            done += 1
        while self.conn_timers.len and done < budget:
            ct = <ConnTimer *>self.conn_timers.items[0]
            if ct.at > now:
                break
            c = <Conn>ct.conn
            heap_remove(&self.conn_timers, 0)
            done += 1
            if not c.waiting:
                continue
            if self._deadline_soon(c, now):
                self.waiting_remove(c)
                c.out(b"DEADLINE_SOON\r\n", 15)
                self._touched(c)
            elif c.timeout_at >= 0 and now >= c.timeout_at:
                self.waiting_remove(c)
                c.out(b"TIMED_OUT\r\n", 11)
                self._touched(c)
            else:
                self.conn_retime(c, now)
        self.flush_dirty()
        # Give freed memory back once a big backlog has drained (small bodies
        # go back with pymalloc's arenas by themselves; big ones live in
        # malloc's heap, where live blocks near its top keep the rest). Not
        # under a steady churn: the next puts would fault the same pages in.
        if self.trim_due:
            self.trim_due = False
            self.mem_peak = self.mem_used
            malloc_trim(HEAP_PAD)
        if done >= budget:
            self.armed_at = now
            return 0.0
        self.armed_at = self._next_deadline()
        if self.armed_at == INT64_MAX:
            return None
        now = mono_ns()
        return 0.0 if self.armed_at <= now else (self.armed_at - now) / 1e9

    # -- connections -----------------------------------------------------------

    def connect(self, set_reading, later):
        """A new client: set_reading(bool) pauses or resumes reading its socket,
        later() calls its run_later() on the next loop turn. Conn.attach()
        gives it the transport before any bytes arrive."""
        cdef Conn c = Conn.__new__(Conn)
        c.core = self
        c.parser = Parser()
        c.reading_cb = set_reading
        c.later_cb = later
        c.chunks = []
        c.writable = True
        c.timeout_at = -1
        c.timer.index = -1
        c.timer.conn = <PyObject *>c
        c.use = self.default_tube
        self.tube_incref(c.use)
        c.use.using_ct += 1
        c.watch = <Watch *>malloc(4 * sizeof(Watch))
        if c.watch == NULL:
            raise MemoryError()
        c.capwatch = 4
        c.watch[0].tube = self.default_tube
        c.watch[0].wpos = -1
        c.nwatch = 1
        self.tube_incref(self.default_tube)
        self.default_tube.watching_ct += 1
        self.conn_ct += 1
        self.total_conns += 1
        return c

    def run_turn(self):
        """The end of a loop turn that read something. epoll lists the sockets
        it reported last time first, ahead of sockets that became readable
        since, so running reads in the order they come would serve a few
        clients again and again while the others wait, and latency spreads
        out. feed() therefore holds back the connections served in the last
        turn; they run here, the one served longest ago first. Then one
        binlog commit and one timer update for the whole turn."""
        cdef list turn = self.turn      # keeps the connections alive meanwhile
        cdef Py_ssize_t i, n = len(turn)
        cdef TurnSlot *order
        cdef Conn c
        if not self.turn_asked:         # the poller ran it already
            return
        self.turn = []
        self.turn_asked = False
        order = <TurnSlot *>malloc(n * sizeof(TurnSlot)) if n else NULL
        if n and order == NULL:
            raise MemoryError()
        for i in range(n):
            c = <Conn>turn[i]
            order[i].served = c.served
            order[i].conn = <PyObject *>c
        if n > 1:
            qsort(order, n, sizeof(TurnSlot), _slot_cmp)
        try:
            for i in range(n):
                c = <Conn>order[i].conn
                if not c.closed:
                    self.run(c)
        finally:
            for i in range(n):          # if a run raised, the rest wait for their next read
                (<Conn>order[i].conn).in_turn = False
            free(order)
        self.last_turn_start = self.turn_start
        self.turn_start = self.served
        if self.commit_asked and self.commit_eager:
            self.binlog.commit()
        if self.dirty:
            self.flush_dirty()
        self.rearm()

    cdef int conn_release(self, Conn c) except -1:
        # The connection is gone (closed, quit, lost): undo everything it holds.
        cdef Job *j
        cdef Tube *t
        if c.closed:
            return 0
        c.closed = True
        self.waiting_remove(c)
        if c.timer.index >= 0:
            heap_remove(&self.conn_timers, c.timer.index)
        while c.res_head != NULL:
            j = c.res_head
            self.job_unlink(j)
            self.job_make_ready(j)
        if c.put_cost:
            self.mem_used -= c.put_cost
            c.put_cost = 0
        # beanstalkd empties the watch list by removing entry 0 with swap-with-last,
        # then drops the used tube; tubes that die here leave the tube list (itself
        # swap-with-last) in that order, which list-tubes shows.
        while c.nwatch:
            t = c.watch[0].tube
            c.nwatch -= 1
            c.watch[0] = c.watch[c.nwatch]
            t.watching_ct -= 1
            self.tube_decref(t)
        c.use.using_ct -= 1
        self.tube_decref(c.use)
        c.use = NULL
        if c.producer:
            self.producer_ct -= 1
        if c.worker:
            self.worker_ct -= 1
        self.conn_ct -= 1
        c.parser.discard_input()
        self.flush_dirty()
        self.rearm()
        return 0

    cdef int run(self, Conn c) except -1:
        # Execute c's buffered commands until it blocks, runs dry or uses
        # up its batch; then write everything it has to say in one call.
        cdef Cmd cmd
        cdef int n = 0
        cdef Py_ssize_t body_bytes = 0
        if c.in_run:
            return 0
        c.in_run = True
        try:
            if c.kicking and not c.closed:
                self.kick_more(c)
            while not c.waiting and not c.closed and c.writable and not c.kicking:
                if n >= self.batch_limit or body_bytes >= BODY_BUDGET:
                    if not c.later_pending:
                        c.later_pending = True
                        c.later_cb()
                    break
                if not c.parser.next(&cmd):
                    if c.eof:
                        c.quitting = True
                    break
                if cmd.op == OP_PUT_BODY and cmd.body != NULL:
                    body_bytes += PyBytes_GET_SIZE(<bytes>cmd.body)
                self.dispatch(c, &cmd)
                n += 1
                if DEBUG_BUILD:
                    # every command while the structures are small; past that,
                    # a sample, so big tests stay linear rather than quadratic
                    self.debug_cmds += 1
                    if self.jobs.count < 4096 or self.debug_cmds % 1024 == 0:
                        self.check()
        finally:
            c.in_run = False
        self.served += 1
        c.served = self.served
        c.flush()
        if c.quitting and not c.closed:
            self.conn_release(c)
            if c.held:
                c.close_after = True      # after the binlog commit lets its replies out
            else:
                c.close_cb()
        elif not c.closed:
            c.update_reading()
        return 0

    cdef int flush_dirty(self) except -1:
        cdef Conn c
        while self.dirty:
            c = self.dirty.pop()
            c.dirty = False
            self.run(c)
        return 0

    # -- commands --------------------------------------------------------------

    cdef int dispatch(self, Conn c, Cmd *cmd) except -1:
        cdef int op = cmd.op
        cdef Job *j
        cdef Tube *t
        cdef int64_t now
        cdef Py_ssize_t i, cost
        cdef uint32_t k
        if op <= OP_PAUSE_TUBE:
            self.cmd_ct[op] += 1
        lat_run(c, op)

        if op == OP_PUT:
            if cmd.nbytes > <uint64_t>self.max_job_size:
                c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_JOB_TOO_BIG)
                return 0
            if cmd.garbage:
                c.parser.no_body()
                return c.out(b"BAD_FORMAT\r\n", 12)
            if not c.producer:
                c.producer = True
                self.producer_ct += 1
            cost = <Py_ssize_t>cmd.nbytes + 2 + JOB_OVERHEAD
            if self.max_memory and self.mem_used + cost > self.max_memory:
                self.mem_refused += 1
                c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_OUT_OF_MEMORY)
                return 0
            try:
                c.parser.accept_body(<Py_ssize_t>cmd.nbytes + 2)
            except MemoryError:
                c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_OUT_OF_MEMORY)
                return 0
            self.mem_charge(cost)
            c.put_cost = cost
            c.put_id = self.next_id
            self.next_id += 1
            c.put_pri = cmd.pri
            c.put_delay = cmd.delay
            c.put_ttr = cmd.ttr if cmd.ttr > 0 else 1
            return 0

        if op == OP_PUT_BODY:
            cost = c.put_cost
            c.put_cost = 0
            if cmd.err != ERR_NONE or self.draining:
                self.mem_used -= cost
                if cmd.body != NULL:
                    Py_DECREF(<object>cmd.body)
                return c.out(b"DRAINING\r\n", 10) if cmd.err == ERR_NONE else c.out_err(cmd.err)
            body = <object>cmd.body
            Py_DECREF(body)             # <object> took its own reference
            if self.wal_on and not self.wal_room(
                    4 + PyBytes_GET_SIZE(<bytes>c.use.name) + sizeof(Jobrec) + PyBytes_GET_SIZE(body),
                    WAL_SHORT):
                self.mem_used -= cost         # no room on disk: the id stays burned
                return c.out(b"OUT_OF_MEMORY\r\n", 15)
            j = self.job_new(c.put_id, c.put_pri, <int64_t>c.put_delay * SEC,
                             <int64_t>c.put_ttr * SEC, c.use, body)
            self.total_jobs += 1
            c.use.total_jobs += 1
            if c.put_delay:
                self.job_make_delayed(j, mono_ns() + <int64_t>c.put_delay * SEC)
            else:
                j.state = JOB_READY
            if self.wal_on:
                self.wal_record(j, True)
                self.wal_resv += WAL_SHORT
            if not c.put_delay:
                self.job_make_ready(j)
            return c.out_u64(b"INSERTED", 8, j.id)

        if op == OP_SKIPPED:
            return c.out_err(cmd.err)

        if op == OP_RESERVE or op == OP_RESERVE_TIMEOUT:
            if not c.worker:
                c.worker = True
                self.worker_ct += 1
            now = mono_ns()
            if self._deadline_soon(c, now) and not self._conn_ready(c):
                return c.out(b"DEADLINE_SOON\r\n", 15)
            c.timeout_at = now + <int64_t>cmd.timeout * SEC if cmd.timeout >= 0 else -1
            self.waiting_add(c)
            self.process_queue()
            if c.waiting:
                if c.eof or cmd.timeout == 0:
                    # beanstalkd answers these on its next loop pass
                    self.waiting_remove(c)
                    if self._deadline_soon(c, now):
                        return c.out(b"DEADLINE_SOON\r\n", 15)
                    return c.out(b"TIMED_OUT\r\n", 11)
                lat_blocked(c)
                self.conn_retime(c, now)
            return 0

        if op == OP_DELETE:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or j.state == JOB_INVALID or (
                    j.state == JOB_RESERVED and j.owner != <PyObject *>c):
                return c.out(b"NOT_FOUND\r\n", 11)
            self.job_delete(j)
            return c.out(b"DELETED\r\n", 9)

        if op == OP_RELEASE:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or j.state != JOB_RESERVED or j.owner != <PyObject *>c:
                return c.out(b"NOT_FOUND\r\n", 11)
            if cmd.delay and self.wal_on and not self.wal_room(WAL_SHORT, 0):
                return c.out(b"OUT_OF_MEMORY\r\n", 15)
            self.job_unlink(j)
            j.pri = cmd.pri
            j.delay_ns = <int64_t>cmd.delay * SEC
            j.release_ct += 1
            if cmd.delay:
                self.job_make_delayed(j, mono_ns() + j.delay_ns)
                if self.wal_on:
                    self.wal_record(j, False)
            else:
                self.job_make_ready(j)
            return c.out(b"RELEASED\r\n", 10)

        if op == OP_BURY:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or j.state != JOB_RESERVED or j.owner != <PyObject *>c:
                return c.out(b"NOT_FOUND\r\n", 11)
            if self.wal_on and not self.wal_room(WAL_SHORT, 0):
                return c.out(b"INTERNAL_ERROR\r\n", 16)
            self.job_unlink(j)
            j.pri = cmd.pri
            self.job_bury(j)
            if self.wal_on:
                self.wal_record(j, False)
            return c.out(b"BURIED\r\n", 8)

        if op == OP_TOUCH:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or j.state != JOB_RESERVED or j.owner != <PyObject *>c:
                return c.out(b"NOT_FOUND\r\n", 11)
            j.deadline = mono_ns() + j.ttr_ns
            heap_fix(&self.ttr_heap, j.heap_index)
            c.soonest = NULL
            return c.out(b"TOUCHED\r\n", 9)

        if op == OP_PEEK:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL:
                return c.out(b"NOT_FOUND\r\n", 11)
            return c.out_job(b"FOUND", 5, j)

        if op == OP_PEEK_READY or op == OP_PEEK_DELAYED or op == OP_PEEK_BURIED:
            t = c.use
            j = NULL
            if op == OP_PEEK_READY and t.ready.len:
                j = <Job *>t.ready.items[0]
            elif op == OP_PEEK_DELAYED and t.delay.len:
                j = <Job *>t.delay.items[0]
            elif op == OP_PEEK_BURIED:
                j = t.buried_head
            if j == NULL:
                return c.out(b"NOT_FOUND\r\n", 11)
            return c.out_job(b"FOUND", 5, j)

        if op == OP_RESERVE_JOB:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or j.state == JOB_RESERVED or j.state == JOB_INVALID:
                return c.out(b"NOT_FOUND\r\n", 11)
            self.job_unlink(j)
            if not c.worker:
                c.worker = True
                self.worker_ct += 1
            self.job_reserve(c, j, mono_ns())
            return c.out_job(b"RESERVED", 8, j)

        if op == OP_KICK:
            return self._kick(c, cmd.bound)

        if op == OP_KICK_JOB:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL or (j.state != JOB_BURIED and j.state != JOB_DELAYED):
                return c.out(b"NOT_FOUND\r\n", 11)
            if not self._kick_one(j):
                return c.out(b"NOT_FOUND\r\n", 11)
            return c.out(b"KICKED\r\n", 8)

        if op == OP_USE:
            t = self.tube_get(cmd.name, cmd.name_len, True)
            self.tube_incref(t)
            c.use.using_ct -= 1
            self.tube_decref(c.use)
            c.use = t
            t.using_ct += 1
            c.out(b"USING ", 6)
            c.out_str(<bytes>t.name)
            return c.out(b"\r\n", 2)

        if op == OP_WATCH:
            t = self.tube_get(cmd.name, cmd.name_len, True)
            for i in range(c.nwatch):
                if c.watch[i].tube == t:
                    break
            else:
                c.add_watch(t)
            return c.out_u64(b"WATCHING", 8, c.nwatch)

        if op == OP_IGNORE:
            t = self.tube_get(cmd.name, cmd.name_len, False)
            for i in range(c.nwatch):
                if t != NULL and c.watch[i].tube == t:
                    if c.nwatch < 2:
                        return c.out(b"NOT_IGNORED\r\n", 13)
                    c.nwatch -= 1
                    c.watch[i] = c.watch[c.nwatch]
                    t.watching_ct -= 1
                    self.tube_decref(t)
                    break
            return c.out_u64(b"WATCHING", 8, c.nwatch)

        if op == OP_PAUSE_TUBE:
            if cmd.err != ERR_NONE:
                return c.out_err(cmd.err)
            t = self.tube_get(cmd.name, cmd.name_len, False)
            if t == NULL:
                return c.out(b"NOT_FOUND\r\n", 11)
            # A pause of 0 is 1 ns, so waiters are still woken by the timer.
            t.pause_ns = <int64_t>cmd.delay * SEC if cmd.delay else 1
            t.unpause_at = mono_ns() + t.pause_ns
            t.cmd_pause += 1
            self.tube_update(t)
            self.tube_retime(t)
            return c.out(b"PAUSED\r\n", 8)

        if op == OP_STATS:
            return c.out_yaml(self._stats_yaml())
        if op == OP_STATS_JOB:
            j = table_find(&self.jobs, cmd.id)
            if j == NULL:
                return c.out(b"NOT_FOUND\r\n", 11)
            return c.out_yaml(self._job_yaml(j))
        if op == OP_STATS_TUBE:
            t = self.tube_get(cmd.name, cmd.name_len, False)
            if t == NULL:
                return c.out(b"NOT_FOUND\r\n", 11)
            return c.out_yaml(self._tube_yaml(t))
        if op == OP_LIST_TUBES:
            return c.out_yaml(b"---\n" + b"".join(
                [b"- " + <bytes>self.tubes[i].name + b"\n" for i in range(self.ntubes)]))
        if op == OP_LIST_TUBE_USED:
            c.out(b"USING ", 6)
            c.out_str(<bytes>c.use.name)
            return c.out(b"\r\n", 2)
        if op == OP_LIST_TUBES_WATCHED:
            return c.out_yaml(b"---\n" + b"".join(
                [b"- " + <bytes>c.watch[i].tube.name + b"\n" for i in range(c.nwatch)]))
        if op == OP_QUIT:
            c.quitting = True
            return 0
        if op == OP_EXT:
            return c.out_yaml(self._ext_yaml())
        if op == OP_TEST_RESET or op == OP_TEST_ADVANCE:
            return test_command(self, c, cmd)
        if op == OP_BAD_FORMAT:
            return c.out(b"BAD_FORMAT\r\n", 12)
        return c.out(b"UNKNOWN_COMMAND\r\n", 17)

    cdef int _kick_one(self, Job *j) except -1:
        # 1 if kicked; 0 if the binlog had no room, and the job stays put.
        if self.wal_on and not self.wal_room(WAL_SHORT, 0):
            return 0
        self.job_unlink(j)
        j.kick_ct += 1
        if self.wal_on:
            j.state = JOB_READY
            self.wal_record(j, False)
        self.job_make_ready(j)
        return 1

    cdef int _kick(self, Conn c, uint32_t bound) except -1:
        # Buried jobs first, oldest first; only if there are none, delayed
        # jobs, soonest first. All in the used tube.
        c.kick_buried = c.use.buried_ct > 0
        c.kick_left = bound
        c.kick_done = 0
        return self.kick_more(c)

    cdef int kick_more(self, Conn c) except -1:
        # At most KICK_BATCH jobs per loop turn; the reply waits for the rest,
        # and so do the connection's later commands, but nobody else does.
        cdef Tube *t = c.use
        cdef Job *j
        cdef int n = 0
        while c.kick_left and n < KICK_BATCH:
            if c.kick_buried:
                j = t.buried_head
            else:
                j = <Job *>t.delay.items[0] if t.delay.len else NULL
            if j == NULL or not self._kick_one(j):
                c.kick_left = 0
                break
            c.kick_left -= 1
            c.kick_done += 1
            n += 1
        if c.kick_left:
            c.kicking = True
            if not c.later_pending:
                c.later_pending = True
                c.later_cb()
            return 0
        c.kicking = False
        return c.out_u64(b"KICKED", 6, c.kick_done)

    # -- YAML --------------------------------------------------------------------

    cdef bytes _stats_yaml(self):
        cdef rusage ru
        cdef int i
        getrusage(RUSAGE_SELF, &ru)
        lines = [
            b"---",
            b"current-jobs-urgent: %d" % self.urgent_ct,
            b"current-jobs-ready: %d" % self.ready_ct,
            b"current-jobs-reserved: %d" % self.reserved_ct,
            b"current-jobs-delayed: %d" % self.delayed_ct,
            b"current-jobs-buried: %d" % self.buried_ct,
        ]
        for i in range(22):
            lines.append(b"%s: %d" % (CMD_KEYS[i], self.cmd_ct[i + 1]))
        lines += [
            b"job-timeouts: %d" % self.job_timeouts,
            b"total-jobs: %d" % self.total_jobs,
            b"max-job-size: %d" % self.max_job_size,
            b"current-tubes: %d" % self.ntubes,
            b"current-connections: %d" % self.conn_ct,
            b"current-producers: %d" % self.producer_ct,
            b"current-workers: %d" % self.worker_ct,
            b"current-waiting: %d" % self.waiting_ct,
            b"total-connections: %d" % self.total_conns,
            b"pid: %d" % os.getpid(),
            b'version: "%s"' % self.version,
            b"rusage-utime: %d.%06d" % (ru.ru_utime.tv_sec, ru.ru_utime.tv_usec),
            b"rusage-stime: %d.%06d" % (ru.ru_stime.tv_sec, ru.ru_stime.tv_usec),
            b"uptime: %d" % ((mono_ns() - self.started_mono) // SEC),
            b"binlog-oldest-index: %d" % (self.wfiles[0].seq if self.nwfiles else 0),
            b"binlog-current-index: %d" % (self.wfiles[self.nwfiles - 1].seq if self.nwfiles else 0),
            b"binlog-records-migrated: %d" % self.wal_migrated,
            b"binlog-records-written: %d" % self.wal_written,
            b"binlog-max-size: %d" % self.binlog_max_size,
            b"draining: %s" % (b"true" if self.draining else b"false"),
            b"id: %s" % self.instance_id,
            b"hostname: %s" % self.hostname,
            b"os: %s" % self.os_version,
            b"platform: %s" % self.machine,
        ]
        lines.append(b"")
        return b"\n".join(lines)

    cdef bytes _job_yaml(self, Job *j):
        cdef int64_t now = mono_ns()
        cdef int64_t left = 0
        if j.state == JOB_RESERVED or j.state == JOB_DELAYED:
            left = j.deadline - now
        return b"".join([
            b"---\nid: %d\ntube: " % j.id, <bytes>j.tube.name,
            b"\nstate: ", STATE_NAMES[j.state],
            b"\npri: %d\nage: " % j.pri, _sec(wall_ns() - j.created_wall),
            b"\ndelay: ", _sec(j.delay_ns),
            b"\nttr: ", _sec(j.ttr_ns),
            b"\ntime-left: ", _sec(left),
            b"\nfile: %d\nreserves: %d\ntimeouts: %d\nreleases: %d\nburies: %d\nkicks: %d\n" % (
                j.wal_file, j.reserve_ct, j.timeout_ct, j.release_ct, j.bury_ct, j.kick_ct),
        ])

    cdef bytes _tube_yaml(self, Tube *t):
        cdef int64_t left = 0
        if t.pause_ns:
            left = t.unpause_at - mono_ns()
        return b"".join([
            b"---\nname: ", <bytes>t.name,
            b"\ncurrent-jobs-urgent: %d\ncurrent-jobs-ready: %d\ncurrent-jobs-reserved: %d\n"
            b"current-jobs-delayed: %d\ncurrent-jobs-buried: %d\ntotal-jobs: %d\n"
            b"current-using: %d\ncurrent-watching: %d\ncurrent-waiting: %d\n"
            b"cmd-delete: %d\ncmd-pause-tube: %d\npause: " % (
                t.urgent_ct, t.ready.len, t.reserved_ct, t.delay.len, t.buried_ct,
                t.total_jobs, t.using_ct, t.watching_ct, t.nwaiting, t.cmd_delete,
                t.cmd_pause),
            _sec(t.pause_ns), b"\npause-time-left: ", _sec(left), b"\n",
        ])

    cdef bytes _ext_yaml(self):
        return b"".join([
            b"---\n",
            b"max-memory: %d\n" % self.max_memory,
            b"memory-used: %d\n" % self.mem_used,
            b"current-jobs: %d\n" % self.jobs.count,
            b"job-table-buckets: %d\n" % table_buckets(&self.jobs),
            b"busy-poll-max-us: %d\n" % (self.poll_max_ns // 1000),
            b"busy-poll-window-us: %d\n" % (self.poll_window_ns // 1000),
            b"busy-poll-idle-seconds: %d.%06d\n" % (self.poll_idle_ns // SEC,
                                                     self.poll_idle_ns % SEC // 1000),
            self.ext_stats() if self.ext_stats is not None else b"",
        ])

    # -- binlog ------------------------------------------------------------------

    cdef int wal_put(self, char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t have = PyByteArray_GET_SIZE(self.wba)
        PyByteArray_Resize(self.wba, have + n)
        memcpy(PyByteArray_AS_STRING(self.wba) + have, p, n)
        self.wal_used += n
        if not self.commit_asked:
            self.commit_asked = True
            self.binlog.schedule()
        return 0

    cdef int wal_record(self, Job *j, bint full) except -1:
        # Append j's record: full (put, migration) or short (every update).
        # The caller has made sure the current file has room (wal_room).
        cdef Jobrec rec
        cdef int32_t namelen = 0
        cdef bytes name
        wal_fill(j, &rec, mono_ns(), wall_ns())
        if full:
            name = <bytes>j.tube.name
            namelen = <int32_t>PyBytes_GET_SIZE(name)
            self.wal_put(<char *>&namelen, 4)
            self.wal_put(PyBytes_AS_STRING(name), namelen)
            self.wal_put(<char *>&rec, sizeof(Jobrec))
            self.wal_put(PyBytes_AS_STRING(<bytes>j.body), rec.body_size)
            self.wal_disown(j)
            self.wal_own(j)
        else:
            self.wal_put(<char *>&namelen, 4)
            self.wal_put(<char *>&rec, sizeof(Jobrec))
        self.wal_written += 1
        self.wal_seq += 1
        return 0

    cdef bint wal_room(self, int64_t now_bytes, int64_t extra_resv) except -1:
        # Room in the current file for now_bytes more, while still keeping
        # every live job's delete record (wal_resv) plus extra_resv. If there
        # is none, binlog.py starts a new preallocated file; False when the
        # disk cannot give one (the caller answers with an error).
        cdef int64_t cap
        if self.wal_cap - self.wal_used - now_bytes >= self.wal_resv + extra_resv:
            return True
        cap = self.binlog.rotate(now_bytes + extra_resv + self.wal_resv)
        if cap <= 0:
            return False
        return self.wal_cap - self.wal_used - now_bytes >= self.wal_resv + extra_resv

    cdef int wal_own(self, Job *j) except -1:
        # j's latest full record is now in the current file.
        cdef WalFile *f = &self.wfiles[self.nwfiles - 1]
        j.wal_file = f.seq
        j.wal_prev = NULL
        j.wal_next = f.head
        if f.head != NULL:
            f.head.wal_prev = j
        f.head = j
        f.njobs += 1
        self.wal_live += wal_full_size(j)
        return 0

    cdef void wal_disown(self, Job *j) noexcept:
        cdef WalFile *f
        if j.wal_file == 0:
            return
        f = &self.wfiles[j.wal_file - self.wfiles[0].seq]
        if j.wal_prev != NULL:
            j.wal_prev.wal_next = j.wal_next
        else:
            f.head = j.wal_next
        if j.wal_next != NULL:
            j.wal_next.wal_prev = j.wal_prev
        j.wal_prev = j.wal_next = NULL
        f.njobs -= 1
        self.wal_live -= wal_full_size(j)
        j.wal_file = 0

    # -- Python API (cold) -------------------------------------------------------

    def set_draining(self):
        self.draining = True

    def check(self):
        """Walk every structure and raise AssertionError on any inconsistency.

        Cold: for tests and the FASTBEAN_DEBUG build, which runs it after
        every command.
        """
        cdef Py_ssize_t i, k, ready = 0, urgent = 0, delayed = 0, buried = 0, reserved = 0
        cdef Py_ssize_t nb, nelig = 0
        cdef Tube *t
        cdef Job *j
        cdef Heap *h
        cdef Conn c
        assert self.ntubes == len(self.tube_by_name)
        for i in range(self.ntubes):
            t = self.tubes[i]
            assert t.list_index == i
            assert <size_t>self.tube_by_name[<bytes>t.name] == <size_t>t
            assert t.refs > 0, "a dead tube is still listed"
            for nb in range(2):
                h = &t.ready if nb == 0 else &t.delay
                for k in range(h.len):
                    j = <Job *>h.items[k]
                    assert j.heap_index == k and j.tube == t
                    assert k == 0 or not h.less(h.items[k], h.items[(k - 1) // 2]), "heap order"
                    assert table_find(&self.jobs, j.id) == j
            for k in range(t.ready.len):
                j = <Job *>t.ready.items[k]
                assert j.state == JOB_READY
                urgent += j.pri < URGENT_PRI
            for k in range(t.delay.len):
                assert (<Job *>t.delay.items[k]).state == JOB_DELAYED
            ready += t.ready.len
            delayed += t.delay.len
            nb = 0
            j = t.buried_head
            while j != NULL:
                assert j.state == JOB_BURIED and j.tube == t
                assert (j.prev == NULL) == (j == t.buried_head)
                assert (j.next == NULL) == (j == t.buried_tail)
                nb += 1
                j = j.next
            assert nb == t.buried_ct
            buried += nb
            for k in range(t.nwaiting):
                c = <Conn>t.waiting[k].conn
                assert c.waiting and c.watch[t.waiting[k].slot].tube == t
                assert c.watch[t.waiting[k].slot].wpos == k
            elig = t.nwaiting > 0 and t.ready.len > 0 and t.pause_ns == 0
            assert elig == (t.elig_index >= 0), "eligible set"
            nelig += elig
            if t.delay.len or t.pause_ns:
                assert t.timer_index >= 0, "a tube with a timer due is not in the timer heap"
        assert nelig == self.neligible
        for k in range(self.ttr_heap.len):
            j = <Job *>self.ttr_heap.items[k]
            assert j.state == JOB_RESERVED and j.heap_index == k and j.owner != NULL
            c = <Conn>j.owner
            assert (j.prev == NULL) == (j == c.res_head), "reserved list head"
            assert (j.next == NULL) == (j == c.res_tail), "reserved list tail"
            reserved += 1
        assert ready == self.ready_ct and urgent == self.urgent_ct
        assert delayed == self.delayed_ct and buried == self.buried_ct
        assert reserved == self.reserved_ct
        assert ready + delayed + buried + reserved == self.jobs.count, "a job is in no structure"
        return True

    # -- binlog API (binlog.py) ----------------------------------------------------

    def wal_enable(self, binlog):
        """Log from now on; binlog provides rotate(need) and schedule()."""
        self.binlog = binlog
        self.wal_on = True

    def take_wal(self):
        """(records appended since the last call as one bytearray, the
        sequence number of the last of them)."""
        ba = self.wba
        self.wba = bytearray()
        self.commit_asked = False
        return ba, self.wal_seq

    cdef int release_held_c(self) except -1:
        # Let out the replies whose records are now durable, in order per connection.
        cdef Conn c
        if not self.held:
            return 0
        held = self.held
        self.held = []
        for c in held:
            if c.wal_need > self.durable_seq:
                self.held.append(c)
                continue
            c.held = False
            c.flush()
            if c.close_after:
                c.close_after = False
                c.close_cb()
        return 0

    def set_failed(self, uint64_t seq):
        """Records up to seq may not be on disk: a binlog write or fsync failed.

        The connections whose replies wait on them are closed without those
        replies, so no client is told that a change is logged when it may
        not be. The changes stay in memory; the clients see a hang-up.
        """
        cdef Conn c
        held = self.held
        self.held = []
        for c in held:
            if c.wal_need > seq:
                self.held.append(c)
                continue
            c.held = False
            c.lost = True               # this output and any later goes nowhere
            c.olen = 0
            c.chunks = []
            c.close_after = False
            c.close_cb()
        if seq > self.durable_seq:
            self.durable_seq = seq

    def set_durable(self, uint64_t seq):
        """Records up to seq are as durable as -f asks: their replies may go."""
        if seq > self.durable_seq:
            self.durable_seq = seq
        self.release_held_c()

    def wal_new_file(self, int64_t seq, int64_t cap, int64_t used):
        """binlog.py made binlog.<seq> current: cap bytes allocated, used written."""
        cdef WalFile *f
        if self.nwfiles == self.capwfiles:
            f = <WalFile *>realloc(self.wfiles, (self.capwfiles * 2 + 8) * sizeof(WalFile))
            if f == NULL:
                raise MemoryError()
            self.wfiles = f
            self.capwfiles = self.capwfiles * 2 + 8
        f = &self.wfiles[self.nwfiles]
        f.seq = seq
        f.njobs = 0
        f.head = NULL
        self.nwfiles += 1
        self.wal_cap = cap
        self.wal_used = used

    def wal_collect(self):
        """Drop the oldest files that no live job needs; return their numbers."""
        gone = []
        while self.nwfiles > 1 and self.wfiles[0].njobs == 0:
            gone.append(self.wfiles[0].seq)
            memmove(self.wfiles, self.wfiles + 1, (self.nwfiles - 1) * sizeof(WalFile))
            self.nwfiles -= 1
        return gone

    def wal_migrate(self, Py_ssize_t limit):
        """Re-log up to `limit` jobs of the oldest file into the current one, so
        the oldest file can go. Returns how many moved."""
        cdef Py_ssize_t n = 0
        cdef Job *j
        while n < limit and self.nwfiles > 1 and self.wfiles[0].head != NULL:
            j = self.wfiles[0].head
            if not self.wal_room(wal_full_size(j), 0):
                break
            self.wal_record(j, True)
            self.wal_migrated += 1
            n += 1
        return n

    def wal_status(self):
        """(live, reserved, used, capacity, files): live = bytes of the live jobs'
        full records; reserved = bytes promised for their deletes."""
        return (self.wal_live, self.wal_resv, self.wal_used, self.wal_cap, self.nwfiles)

    @property
    def max_id(self):
        # replay_max_id: a standby's jobs stay in replay until it takes over
        return max(self.next_id - 1, self.replay_max_id)

    def has_job(self, uint64_t id):
        return table_find(&self.jobs, id) != NULL

    def replay(self, data, int64_t seq):
        """Apply the records of binlog.<seq> (its whole contents).

        Returns (records applied, where they end, reason or None). Bytes past
        the end are a torn or corrupt tail when there is a reason, else the
        zero-filled unused part of a preallocated file.
        """
        cdef const char *p
        cdef Py_ssize_t n, pos, size, k
        cdef int32_t version, namelen
        cdef Jobrec rec
        cdef Py_ssize_t count = 0
        cdef const char *name
        cdef const char *body
        if not isinstance(data, bytes):
            data = bytes(data)
        p = PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        if self.nwfiles == 0 or self.wfiles[self.nwfiles - 1].seq != seq:
            self.wal_new_file(seq, 0, 0)    # a replicated part comes in several calls
        if n < WAL_HEADER:
            return (0, 0, "no version header" if n else None)
        memcpy(&version, p, 4)
        if version != WAL_VERSION:
            return (0, 0, "unknown version %d" % version)
        pos = WAL_HEADER
        reason = None
        signed = -1             # unknown until the first record: 1 = written by fastbean
        while pos + 4 <= n:
            memcpy(&namelen, p + pos, 4)
            if namelen < 0 or namelen > WAL_NAME_MAX:
                reason = "bad name length %d" % namelen
                break
            size = 4 + namelen + sizeof(Jobrec)
            if pos + size > n:
                reason = "truncated record"
                break
            memcpy(&rec, p + pos + 4 + namelen, sizeof(Jobrec))
            if rec.id == 0 and namelen == 0:
                break                       # end of the records written
            if not wal_rec_ok(&rec):
                reason = "corrupt record"
                break
            if signed < 0:
                signed = wal_signed(&rec)
            elif signed and not wal_signed(&rec):
                reason = "torn record"
                break
            name = p + pos + 4
            body = NULL
            if namelen:
                size += rec.body_size
                if pos + size > n:
                    reason = "truncated record"
                    break
                body = p + pos + 4 + namelen + sizeof(Jobrec)
                if body[rec.body_size - 2] != c'\r' or body[rec.body_size - 1] != c'\n':
                    reason = "corrupt job body"
                    break
                for k in range(namelen):
                    if not _name_byte(name[k]):
                        break
                else:
                    k = namelen
                if k != namelen or name[0] == c'-':
                    reason = "bad tube name"
                    break
            r = self._replay_one(&rec, name, namelen, body)
            if r is not None:
                reason = r
                break
            count += 1
            pos += size
        if reason is None:
            # whatever follows the last record must be preallocated zeros
            for k in range(pos, n):
                if p[k] != 0:
                    reason = "garbage after the last record"
                    break
        return (count, pos, reason)

    cdef object _replay_one(self, Jobrec *rec, const char *name, int32_t namelen,
                            const char *body):
        cdef Job *j = table_find(&self.jobs, rec.id)
        cdef Tube *t
        if rec.id > self.replay_max_id:
            self.replay_max_id = rec.id
        if j == NULL:
            if namelen == 0 or rec.state == JOB_INVALID:
                return None             # its full record was in a file already gone
            t = self.tube_get(name, namelen, True)
            j = self.job_new(rec.id, rec.pri, rec.delay, rec.ttr, t,
                             PyBytes_FromStringAndSize(body, rec.body_size))
            self.mem_charge(rec.body_size + JOB_OVERHEAD)
            j.prev = self.replay_tail
            j.next = NULL
            if self.replay_tail != NULL:
                self.replay_tail.next = j
            else:
                self.replay_head = j
            self.replay_tail = j
        elif rec.state == JOB_INVALID:
            if j.prev != NULL:
                j.prev.next = j.next
            else:
                self.replay_head = j.next
            if j.next != NULL:
                j.next.prev = j.prev
            else:
                self.replay_tail = j.prev
            self.wal_disown(j)
            self.job_free(j)
            return None
        elif namelen:
            if PyBytes_GET_SIZE(<object>j.body) != rec.body_size:
                return "job %d changed size" % rec.id
            body_obj = PyBytes_FromStringAndSize(body, rec.body_size)
            Py_DECREF(<object>j.body)
            j.body = <PyObject *>body_obj
            Py_INCREF(body_obj)
        j.pri = rec.pri
        j.delay_ns = rec.delay
        j.ttr_ns = rec.ttr
        j.created_wall = rec.created_at
        j.deadline = rec.deadline_at          # wall ns until replay_finish
        j.reserve_ct = rec.reserve_ct
        j.timeout_ct = rec.timeout_ct
        j.release_ct = rec.release_ct
        j.bury_ct = rec.bury_ct
        j.kick_ct = rec.kick_ct
        j.state = rec.state
        if namelen:
            self.wal_disown(j)
            self.wal_own(j)
        return None

    def replay_finish(self):
        """Put the replayed jobs where their states say, in order of first
        appearance; reserved ones come back ready. Returns the job count."""
        cdef int64_t mono = mono_ns()
        cdef int64_t wall = wall_ns()
        cdef Job *j
        cdef Job *nxt
        cdef Py_ssize_t count = 0
        cdef uint8_t state
        j = self.replay_head
        self.replay_head = self.replay_tail = NULL
        while j != NULL:
            nxt = j.next
            j.prev = j.next = NULL
            state = j.state
            j.state = JOB_INVALID
            if state == JOB_DELAYED and j.deadline > wall:
                self.job_make_delayed(j, j.deadline - wall + mono)
            elif state == JOB_BURIED:
                self.job_bury(j)
                j.bury_ct -= 1              # a restart is not a bury
            else:
                self.job_make_ready(j)
            count += 1
            j = nxt
        self.wal_resv = WAL_SHORT * self.jobs.count
        if self.replay_max_id >= self.next_id:
            self.next_id = self.replay_max_id + 1
        return count

    @property
    def current_jobs(self):
        return self.jobs.count

    @property
    def current_connections(self):
        return self.conn_ct

    def next_deadline(self):
        """Seconds until the next timer is due, or None."""
        cdef int64_t at = self._next_deadline()
        if at == INT64_MAX:
            return None
        return max(0.0, (at - mono_ns()) / 1e9)


cdef class Conn:
    """One client connection's engine state."""

    def __dealloc__(self):
        free(self.watch)
        free(self.obuf)

    # -- output --------------------------------------------------------------

    cdef int out(self, const char *s, Py_ssize_t n) except -1:
        cdef char *buf
        cdef Py_ssize_t cap
        if self.olen + n > self.ocap:
            cap = self.ocap * 2 if self.ocap else 256
            while cap < self.olen + n:
                cap *= 2
            buf = <char *>realloc(self.obuf, cap)
            if buf == NULL:
                raise MemoryError()
            self.obuf = buf
            self.ocap = cap
        memcpy(self.obuf + self.olen, s, n)
        self.olen += n
        return 0

    cdef int out_str(self, bytes s) except -1:
        return self.out(PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))

    cdef int out_err(self, int err) except -1:
        cdef const char *s = _err_text(err)
        cdef Py_ssize_t n = 0
        while s[n]:
            n += 1
        return self.out(s, n)

    cdef int out_u64(self, const char *word, Py_ssize_t wn, uint64_t v) except -1:
        cdef char num[32]
        cdef int n = snprintf(num, sizeof(num), " %llu\r\n", <unsigned long long>v)
        self.out(word, wn)
        return self.out(num, n)

    cdef int out_job(self, const char *word, Py_ssize_t wn, Job *j) except -1:
        # "<word> <id> <bytes>\r\n" then the stored body, which ends in CRLF.
        cdef char num[64]
        cdef object body = <object>j.body
        cdef int n = snprintf(num, sizeof(num), " %llu %lld\r\n", <unsigned long long>j.id,
                              <long long>(PyBytes_GET_SIZE(body) - 2))
        self.out(word, wn)
        self.out(num, n)
        self.chunks.append(PyBytes_FromStringAndSize(self.obuf, self.olen))
        self.olen = 0
        self.chunks.append(body)
        return 0

    cdef int out_yaml(self, bytes doc) except -1:
        cdef char num[32]
        cdef int n = snprintf(num, sizeof(num), "OK %lld\r\n", <long long>PyBytes_GET_SIZE(doc))
        self.out(num, n)
        self.out_str(doc)
        return self.out(b"\r\n", 2)

    cdef int flush(self) except -1:
        if self.lost:
            lat_lost(self)
            self.olen = 0
            self.chunks = []
            return 0
        if self.held:
            if self.core.wal_seq > self.core.durable_seq:
                self.wal_need = self.core.wal_seq
            return 0
        if self.core.wal_seq > self.core.durable_seq and (self.olen or self.chunks):
            # These replies may confirm records not yet durable: they wait.
            self.wal_need = self.core.wal_seq
            self.held = True
            self.core.held.append(self)
            return 0
        if self.lat_npend and (self.chunks or self.olen):
            lat_written(self.core, self)
        if self.chunks:
            if self.olen:
                self.chunks.append(PyBytes_FromStringAndSize(self.obuf, self.olen))
                self.olen = 0
            chunks = self.chunks
            self.chunks = []
            self.writelines(chunks)
        elif self.olen:
            data = PyBytes_FromStringAndSize(self.obuf, self.olen)
            self.olen = 0
            self.write(data)
        if self.ocap > 65536:
            # a burst of big replies: give the memory back
            free(self.obuf)
            self.obuf = NULL
            self.ocap = 0
        return 0

    cdef int add_watch(self, Tube *t) except -1:
        cdef Watch *w
        if self.nwatch == self.capwatch:
            w = <Watch *>realloc(self.watch, self.capwatch * 2 * sizeof(Watch))
            if w == NULL:
                raise MemoryError()
            self.watch = w
            self.capwatch *= 2
        self.watch[self.nwatch].tube = t
        self.watch[self.nwatch].wpos = -1
        self.nwatch += 1
        t.watching_ct += 1
        self.core.tube_incref(t)
        return 0

    cdef void update_reading(self):
        # Read while there is room: stop when commands pile up unprocessed
        # (blocked reserve, slow reader, batch left over), resume when they drain.
        cdef Py_ssize_t buffered = self.parser.buffered()
        cdef bint want
        if self.reading_paused:
            want = buffered < READ_LOW and self.writable and not self.later_pending
        else:
            want = buffered < READ_HIGH and self.writable and not self.later_pending
        if want == self.reading_paused:
            self.reading_paused = not want
            self.reading_cb(want)

    # -- Python API (called by the protocol) ------------------------------------

    def attach(self, write, writelines, close):
        """The transport's write(bytes), writelines(list) and close()."""
        self.write = write
        self.writelines = writelines
        self.close_cb = close

    def feed(self, data):
        """Bytes from one read: run every complete command, write the replies."""
        cdef Core core = self.core
        if self.closed:
            return
        core.reads += 1
        lat_read(self)
        if core.sleeping:
            core.sleeping = False
            core.on_wake()
        self.parser.feed(data)
        if not core.turn_asked:
            core.turn_asked = True
            if not core.polling and core.turn_soon is not None:
                core.turn_soon()            # (else the poller's next look runs it)
        if self.in_turn or (self.served > core.last_turn_start
                            and core.turn_start - core.last_turn_start > 1):
            # Served in the last turn (or this one), which served others
            # too, yet listed first: wait for the end of the turn so the
            # ones that waited longer go first. Alone, it just runs.
            if not self.in_turn:
                self.in_turn = True
                core.turn.append(self)
            return
        core.run(self)
        if core.dirty:
            core.flush_dirty()
        core.rearm()

    def run_later(self):
        """The batch left over from an earlier turn."""
        cdef Core core = self.core
        self.later_pending = False
        if self.closed:
            return
        core.run(self)
        if core.dirty:
            core.flush_dirty()
        core.rearm()

    def set_writable(self, bint writable):
        """The transport's buffer crossed its high (False) or low (True) mark."""
        cdef Core core = self.core
        self.writable = writable
        if self.closed:
            return
        if writable:
            core.run(self)
            if core.dirty:
                core.flush_dirty()
            core.rearm()
        else:
            self.update_reading()

    def got_eof(self):
        """The peer shut down its sending side."""
        cdef Core core = self.core
        if self.closed:
            return
        self.eof = True
        if self.waiting:
            # beanstalkd answers a blocked reserve with TIMED_OUT on hang-up
            core.waiting_remove(self)
            self.out(b"TIMED_OUT\r\n", 11)
        core.run(self)
        if core.dirty:
            core.flush_dirty()
        core.rearm()

    def gone(self):
        """The connection is gone: its reserved jobs go back to ready."""
        self.lost = True
        self.core.conn_release(self)

    @property
    def is_closed(self):
        return self.closed
