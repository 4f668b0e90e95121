# Entry points for the containers' own tests (tests/test_containers.py):
# a Heap and a JobTable on their own, without an engine.
#
# Offers: nothing.
# Python: HeapProbe, TableProbe.
# Uses: vec, heap, table, job.

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
