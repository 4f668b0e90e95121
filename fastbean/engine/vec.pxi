# Small containers, written once (declared in core.pxd): the growable array
# every variable-size array of the engine uses, and the intrusive list of jobs.
#
# Offers: vec_grow, vec_shrink, list_push_back, list_push_front, list_remove.
# Uses: nothing.

from libc.stdlib cimport realloc

cdef enum:
    VEC_FIRST_BYTES = 256     # the first allocation of an array: this many bytes' worth


cdef inline int vec_grow(void **items, Py_ssize_t *cap, Py_ssize_t need, size_t size) noexcept nogil:
    # Make room for `need` elements of `size` bytes: at least double, so n
    # appends cost O(n). 0, or -1 when there is no memory (the array is unchanged).
    if need <= cap[0]:
        return 0
    return _vec_realloc(items, cap, need, size)


cdef int _vec_realloc(void **items, Py_ssize_t *cap, Py_ssize_t need, size_t size) noexcept nogil:
    cdef Py_ssize_t n = cap[0] * 2
    cdef void *p
    if n < <Py_ssize_t>(VEC_FIRST_BYTES // size):
        n = VEC_FIRST_BYTES // size
    if n < need:
        n = need
    p = realloc(items[0], n * size)
    if p == NULL:
        return -1
    items[0] = p
    cap[0] = n
    return 0


cdef inline void vec_shrink(void **items, Py_ssize_t *cap, Py_ssize_t len, size_t size) noexcept nogil:
    # Halve an array that is three quarters empty, so memory follows a
    # backlog down again after it drains.
    if len < cap[0] // 4 and cap[0] * <Py_ssize_t>size > VEC_FIRST_BYTES:
        _vec_halve(items, cap, size)


cdef void _vec_halve(void **items, Py_ssize_t *cap, size_t size) noexcept nogil:
    cdef void *p = realloc(items[0], (cap[0] // 2) * size)
    if p != NULL:
        items[0] = p
        cap[0] //= 2


cdef inline void list_push_back(JobList *l, Job *j, int k) noexcept nogil:
    j.link[k].next = NULL
    j.link[k].prev = l.tail
    if l.tail != NULL:
        l.tail.link[k].next = j
    else:
        l.head = j
    l.tail = j


cdef inline void list_push_front(JobList *l, Job *j, int k) noexcept nogil:
    j.link[k].prev = NULL
    j.link[k].next = l.head
    if l.head != NULL:
        l.head.link[k].prev = j
    else:
        l.tail = j
    l.head = j


cdef inline void list_remove(JobList *l, Job *j, int k) noexcept nogil:
    if j.link[k].prev != NULL:
        j.link[k].prev.link[k].next = j.link[k].next
    else:
        l.head = j.link[k].next
    if j.link[k].next != NULL:
        j.link[k].next.link[k].prev = j.link[k].prev
    else:
        l.tail = j.link[k].prev
    j.link[k].prev = j.link[k].next = NULL
