# Jobs: allocation, lookup by id, freeing. A job's state and the structures
# it is in are queue.pxi's business.
#
# Offers: job_alloc, job_init, job_discard, job_find, job_free, jobs_destroy.
# Uses: clock, table, mem, tube.


# A job of an engine without a binlog ends before its LINK_WAL link.
cdef size_t JOB_SIZE_NO_WAL = sizeof(Job) - sizeof(Link)


cdef Job *job_alloc(Core core, Py_ssize_t body_size) except NULL:
    # A job and its body in one block, the body right after the struct: one
    # allocation, no object header. Small ones come from Python's
    # small-object allocator, whose arenas go back to the OS once empty, so
    # memory follows a backlog down again. The caller fills the body, then
    # calls job_init (or job_discard if the put fails).
    cdef size_t head = sizeof(Job) if core.wal_links else JOB_SIZE_NO_WAL
    cdef Job *j = <Job *>PyMem_Malloc(head + body_size)
    if j == NULL:
        raise MemoryError()
    memset(j, 0, head)
    j.body = <char *>j + head
    j.body_size = <int32_t>body_size
    j.heap_index = -1
    mem_new_job(head + body_size)
    return j


cdef void job_init(Core core, Job *j, uint64_t id, uint32_t pri, int64_t delay_ns,
                   int64_t ttr_ns, Tube *t) noexcept:
    # The body is in: the job exists from here on (findable by id, in no queue yet).
    j.id = id
    j.pri = pri
    j.delay_ns = delay_ns
    j.ttr_ns = ttr_ns
    j.created_wall = wall_ns()
    j.tube = t
    tube_incref(t)
    table_insert(&core.jobs, j)


cdef inline void job_discard(Job *j) noexcept:
    # a put whose body never made a job (job_alloc without job_init)
    PyMem_Free(j)


cdef inline Job *job_find(Core core, uint64_t id) noexcept:
    return table_find(&core.jobs, id)


cdef void job_free(Core core, Job *j):
    # j is in no structure any more (JOB_INVALID)
    table_remove(&core.jobs, j)
    mem_release(core, j.body_size + JOB_OVERHEAD)
    tube_decref(core, j.tube)
    PyMem_Free(j)


cdef void jobs_destroy(JobTable *t) noexcept:
    # Free every job of a dying engine; the tubes go separately.
    cdef Job *j
    cdef Job *nxt
    cdef Py_ssize_t b, mask
    cdef Job **buckets
    cdef int k
    for k in range(2):
        buckets = t.t0 if k == 0 else t.t1
        mask = t.mask0 if k == 0 else t.mask1
        if buckets == NULL:
            continue
        for b in range(mask + 1):
            j = buckets[b]
            while j != NULL:
                nxt = j.ht_next
                PyMem_Free(j)
                j = nxt
    table_free(t)
