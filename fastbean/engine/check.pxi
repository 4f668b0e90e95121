# Debug checks. The invariants: every structure walked and cross-checked;
# tests call it (Core.check), debug builds (FASTBEAN_DEBUG=1) run it after
# every command. And the rule that keeps the engine simple to reason about:
# no hook calls back into the engine before it returns. Every hook call
# goes through hook0/1/2; in debug builds, every entry point (enter())
# asserts that no hook is running.

cdef extern from *:
    """
    #ifndef FASTBEAN_DEBUG
    #define FASTBEAN_DEBUG 0
    #endif
    """
    bint DEBUG_BUILD "FASTBEAN_DEBUG"    # setup.py: FASTBEAN_DEBUG=1 checks every structure after every command


DEBUG = bool(DEBUG_BUILD)


cdef object _guarded(Core core, object fn, tuple args):
    core.in_hook += 1
    try:
        return fn(*args)
    finally:
        core.in_hook -= 1


cdef inline object hook0(Core core, object fn):
    if DEBUG_BUILD:
        return _guarded(core, fn, ())
    return fn()


cdef inline object hook1(Core core, object fn, object a):
    if DEBUG_BUILD:
        return _guarded(core, fn, (a,))
    return fn(a)


cdef inline object hook2(Core core, object fn, object a, object b):
    if DEBUG_BUILD:
        return _guarded(core, fn, (a, b))
    return fn(a, b)


cdef inline int enter(Core core) except -1:
    # at every entry point of the Python-facing API
    if DEBUG_BUILD and core.in_hook:
        raise AssertionError("a hook called back into the engine before it returned")
    return 0


cdef void debug_check(Core core) except *:
    # every command while the structures are small; past that, a sample,
    # so big tests stay linear rather than quadratic
    core.debug_cmds += 1
    if core.jobs.count < 4096 or core.debug_cmds % 1024 == 0:
        core_check(core)


cdef int core_check(Core core) except -1:
    # Raise AssertionError on any inconsistency.
    cdef Py_ssize_t i, k, ready = 0, urgent = 0, delayed = 0, buried = 0, reserved = 0
    cdef Py_ssize_t nb, nelig = 0
    cdef Tube *t
    cdef Job *j
    cdef Heap *h
    cdef Conn c
    assert core.ntubes == len(core.tube_by_name)
    for i in range(core.ntubes):
        t = core.tubes[i]
        assert t.list_index == i
        assert <size_t>core.tube_by_name[<bytes>t.name] == <size_t>t
        assert t.refs > 0, "a dead tube is still listed"
        for nb in range(2):
            h = &t.ready if nb == 0 else &t.delay
            for k in range(h.len):
                j = <Job *>h.items[k]
                assert j.heap_index == k and j.tube == t
                assert k == 0 or not h.less(h.items[k], h.items[(k - 1) // 2]), "heap order"
                assert table_find(&core.jobs, j.id) == j
        for k in range(t.ready.len):
            j = <Job *>t.ready.items[k]
            assert j.state == JOB_READY
            urgent += j.pri < URGENT_PRI
        for k in range(t.delay.len):
            assert (<Job *>t.delay.items[k]).state == JOB_DELAYED
        ready += t.ready.len
        delayed += t.delay.len
        nb = 0
        j = t.buried.head
        while j != NULL:
            assert j.state == JOB_BURIED and j.tube == t
            assert (j.link[LINK_STATE].prev == NULL) == (j == t.buried.head)
            assert (j.link[LINK_STATE].next == NULL) == (j == t.buried.tail)
            nb += 1
            j = j.link[LINK_STATE].next
        assert nb == t.buried_ct
        buried += nb
        for k in range(t.nwaiting):
            c = <Conn>t.waiting[k].conn
            assert c.wait == WAIT_JOB and c.watch[t.waiting[k].slot].tube == t
            assert c.watch[t.waiting[k].slot].wpos == k
        elig = t.nwaiting > 0 and t.ready.len > 0 and t.pause_ns == 0
        assert elig == (t.elig_index >= 0), "eligible set"
        nelig += elig
        if t.delay.len or t.pause_ns:
            assert t.timer_index >= 0, "a tube with a timer due is not in the timer heap"
    assert nelig == core.neligible
    for k in range(core.ttr_heap.len):
        j = <Job *>core.ttr_heap.items[k]
        assert j.state == JOB_RESERVED and j.heap_index == k and j.owner != NULL
        c = <Conn>j.owner
        assert (j.link[LINK_STATE].prev == NULL) == (j == c.reserved.head), "reserved list head"
        assert (j.link[LINK_STATE].next == NULL) == (j == c.reserved.tail), "reserved list tail"
        reserved += 1
    assert ready == core.ready_ct and urgent == core.urgent_ct
    assert delayed == core.delayed_ct and buried == core.buried_ct
    assert reserved == core.reserved_ct
    assert ready + delayed + buried + reserved == core.jobs.count, "a job is in no structure"
    return 0


# -- entry points for the containers' own tests (tests/test_containers.py) ---------

ctypedef struct ProbeItem:
    int64_t key
    Py_ssize_t pos


cdef bint _probe_less(void *a, void *b) noexcept nogil:
    return (<ProbeItem *>a).key < (<ProbeItem *>b).key


cdef void _probe_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<ProbeItem *>a).pos = i


@cython.final
cdef class HeapProbe:
    """A Heap (heap.pxi) of integer keys, for tests. push() returns a handle
    that remove() and change() take; pop() returns the handle of the least key."""
    cdef Heap h
    cdef ProbeItem **items
    cdef Py_ssize_t n, cap

    def __cinit__(self):
        heap_init(&self.h, _probe_less, _probe_setpos)

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.n):
            free(self.items[i])
        free(self.items)
        heap_free(&self.h)

    def push(self, int64_t key):
        cdef ProbeItem *it = <ProbeItem *>malloc(sizeof(ProbeItem))
        if it == NULL or vec_grow(<void **>&self.items, &self.cap, self.n + 1, sizeof(void *)) < 0:
            free(it)
            raise MemoryError()
        it.key = key
        it.pos = -1
        self.items[self.n] = it
        self.n += 1
        heap_insert(&self.h, it)
        return self.n - 1

    def remove(self, Py_ssize_t handle):
        heap_remove(&self.h, self.items[handle].pos)

    def change(self, Py_ssize_t handle, int64_t key):
        self.items[handle].key = key
        heap_fix(&self.h, self.items[handle].pos)

    def pop(self):
        cdef ProbeItem *it = <ProbeItem *>heap_remove(&self.h, 0)
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.items[i] == it:
                return i

    def key(self, Py_ssize_t handle):
        return self.items[handle].key

    def in_heap(self, Py_ssize_t handle):
        return self.items[handle].pos >= 0

    def __len__(self):
        return self.h.len

    @property
    def capacity(self):
        return self.h.cap

    def check(self):
        """AssertionError unless every element is in heap order and knows its index."""
        cdef Py_ssize_t k
        for k in range(self.h.len):
            assert (<ProbeItem *>self.h.items[k]).pos == k, "position"
            assert k == 0 or not _probe_less(self.h.items[k], self.h.items[(k - 1) // 2]), "order"
        return True


@cython.final
cdef class TableProbe:
    """A JobTable (table.pxi) of bare jobs, for tests."""
    cdef JobTable t

    def __cinit__(self):
        table_init(&self.t)

    def __dealloc__(self):
        jobs_destroy(&self.t)

    def insert(self, uint64_t id):
        cdef Job *j = <Job *>PyMem_Malloc(sizeof(Job))
        if j == NULL:
            raise MemoryError()
        memset(j, 0, sizeof(Job))
        j.id = id
        table_insert(&self.t, j)

    def remove(self, uint64_t id):
        """True if it was there."""
        cdef Job *j = table_find(&self.t, id)
        if j == NULL:
            return False
        table_remove(&self.t, j)
        PyMem_Free(j)
        return True

    def __contains__(self, uint64_t id):
        return table_find(&self.t, id) != NULL

    def __len__(self):
        return self.t.count

    @property
    def buckets(self):
        """Buckets allocated, both tables' while a resize is under way."""
        return table_buckets(&self.t)

    @property
    def resizing(self):
        return self.t.t1 != NULL
