# Binary min-heap over pointers (declared in core.pxd). Its array grows and
# shrinks with the vec.pxi rules, so memory follows the backlog down again.
#
# Offers: heap_init, heap_free, heap_insert, heap_fix, heap_remove.
# Uses: vec.


cdef void heap_init(Heap *h, heap_less_fn less, heap_setpos_fn setpos) noexcept:
    h.items = NULL
    h.len = 0
    h.cap = 0
    h.less = less
    h.setpos = setpos


cdef void heap_free(Heap *h) noexcept:
    free(h.items)
    h.items = NULL
    h.len = h.cap = 0


cdef inline void _heap_set(Heap *h, Py_ssize_t i, void *x) noexcept:
    h.items[i] = x
    h.setpos(x, i)


cdef void _heap_up(Heap *h, Py_ssize_t i) noexcept:
    cdef void *x = h.items[i]
    cdef Py_ssize_t parent
    while i > 0:
        parent = (i - 1) >> 1
        if not h.less(x, h.items[parent]):
            break
        _heap_set(h, i, h.items[parent])
        i = parent
    _heap_set(h, i, x)


cdef void _heap_down(Heap *h, Py_ssize_t i) noexcept:
    cdef void *x = h.items[i]
    cdef Py_ssize_t child
    while True:
        child = 2 * i + 1
        if child >= h.len:
            break
        if child + 1 < h.len and h.less(h.items[child + 1], h.items[child]):
            child += 1
        if not h.less(h.items[child], x):
            break
        _heap_set(h, i, h.items[child])
        i = child
    _heap_set(h, i, x)


cdef int heap_insert(Heap *h, void *x) except -1:
    if vec_grow(<void **>&h.items, &h.cap, h.len + 1, sizeof(void *)) < 0:
        raise MemoryError()
    h.items[h.len] = x
    h.len += 1
    _heap_up(h, h.len - 1)
    return 0


cdef void heap_fix(Heap *h, Py_ssize_t i) noexcept:
    # The element at i may now be out of place in either direction.
    if i > 0 and h.less(h.items[i], h.items[(i - 1) >> 1]):
        _heap_up(h, i)
    else:
        _heap_down(h, i)


cdef void *heap_remove(Heap *h, Py_ssize_t i) noexcept:
    cdef void *x = h.items[i]
    h.setpos(x, -1)
    h.len -= 1
    if i != h.len:
        _heap_set(h, i, h.items[h.len])
        heap_fix(h, i)
    vec_shrink(<void **>&h.items, &h.cap, h.len, sizeof(void *))
    return x
