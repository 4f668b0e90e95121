# Job table: id -> Job*, chained through Job.ht_next (declared in core.pxd).
#
# Offers: table_init, table_free, table_find, table_idle_shrink, table_insert,
#   table_remove, table_buckets.
# Uses: nothing.
#
# Resizing is incremental: a grow or shrink allocates the new bucket array and
# then every insert and remove moves TABLE_STEP buckets across, so the cost of
# a resize is spread over the operations that caused it. Ids are handed out in
# sequence, so the low bits alone spread them evenly, and two jobs per bucket
# cost a lookup little while halving the table's share of a job's memory.
#
# Sizes keep far apart, so a queue that holds steady never resizes back and
# forth: the table doubles past two jobs a bucket, halves under one job in
# eight buckets, and when the server is idle (table_idle_shrink, from the
# tick) it shrinks to one bucket a job once under one job in four.

from libc.stdlib cimport calloc, free

cdef enum:
    TABLE_MIN = 4096
    TABLE_STEP = 8
    TABLE_LOAD = 2            # jobs per bucket before the table doubles


cdef int table_init(JobTable *t) except -1:
    t.t0 = <Job **>calloc(TABLE_MIN, sizeof(Job *))
    if t.t0 == NULL:
        raise MemoryError()
    t.mask0 = TABLE_MIN - 1
    t.t1 = NULL
    t.mask1 = 0
    t.moved = 0
    t.count = 0
    return 0


cdef void table_free(JobTable *t) noexcept:
    free(t.t0)
    free(t.t1)
    t.t0 = t.t1 = NULL


cdef inline Job **_table_bucket(JobTable *t, uint64_t id) noexcept:
    cdef Py_ssize_t b = <Py_ssize_t>(id & <uint64_t>t.mask0)
    if t.t1 != NULL and b < t.moved:
        return &t.t1[id & <uint64_t>t.mask1]
    return &t.t0[b]


cdef Job *table_find(JobTable *t, uint64_t id) noexcept:
    cdef Job *j = _table_bucket(t, id)[0]
    while j != NULL and j.id != id:
        j = j.ht_next
    return j


cdef void _table_step(JobTable *t, Py_ssize_t step) noexcept:
    # Move up to `step` buckets of t0 into t1; swap tables when done.
    cdef Py_ssize_t n = 0
    cdef Job *j
    cdef Job *nxt
    cdef Job **dst
    while n < step and t.moved <= t.mask0:
        j = t.t0[t.moved]
        t.t0[t.moved] = NULL
        while j != NULL:
            nxt = j.ht_next
            dst = &t.t1[j.id & <uint64_t>t.mask1]
            j.ht_next = dst[0]
            dst[0] = j
            j = nxt
        t.moved += 1
        n += 1
    if t.moved > t.mask0:
        free(t.t0)
        t.t0 = t.t1
        t.mask0 = t.mask1
        t.t1 = NULL
        t.mask1 = 0
        t.moved = 0


cdef void _table_maybe_resize(JobTable *t) noexcept:
    cdef Py_ssize_t size = t.mask0 + 1
    cdef Py_ssize_t want = 0
    if t.t1 != NULL:
        _table_step(t, TABLE_STEP)
        return
    if t.count > size * TABLE_LOAD:
        want = size * 2
    elif size > TABLE_MIN and t.count < size // 8:
        want = size // 2
    if want and _table_start(t, want):
        _table_step(t, TABLE_STEP)


cdef bint _table_start(JobTable *t, Py_ssize_t want) noexcept:
    # Begin moving into a table of `want` buckets; False when there is no
    # memory for it (the old table stays, and a later call tries again).
    t.t1 = <Job **>calloc(want, sizeof(Job *))
    if t.t1 == NULL:
        return False
    t.mask1 = want - 1
    t.moved = 0
    return True


cdef bint table_idle_shrink(JobTable *t, Py_ssize_t step) noexcept:
    # Part of shrinking a table much bigger than its jobs need while the
    # server is idle: at most `step` buckets moved. True while there is
    # more to do.
    cdef Py_ssize_t size = t.mask0 + 1
    cdef Py_ssize_t want = TABLE_MIN
    if t.t1 == NULL:
        if size <= TABLE_MIN or t.count >= size // 4:
            return False
        while want < t.count:
            want *= 2
        if not _table_start(t, want):
            return False
    _table_step(t, step)
    return t.t1 != NULL


cdef void table_insert(JobTable *t, Job *j) noexcept:
    cdef Job **b = _table_bucket(t, j.id)
    j.ht_next = b[0]
    b[0] = j
    t.count += 1
    _table_maybe_resize(t)


cdef void table_remove(JobTable *t, Job *j) noexcept:
    cdef Job **p = _table_bucket(t, j.id)
    while p[0] != NULL:
        if p[0] == j:
            p[0] = j.ht_next
            j.ht_next = NULL
            t.count -= 1
            break
        p = &p[0].ht_next
    _table_maybe_resize(t)


cdef Py_ssize_t table_buckets(JobTable *t) noexcept:
    return t.mask0 + 1 + (t.mask1 + 1 if t.t1 != NULL else 0)
