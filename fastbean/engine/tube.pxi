# Tubes: the registry by name (in list-tubes order), reference counts, the
# orders of the heaps that hold their jobs, each tube's timer (its soonest
# delayed job or the end of its pause), and the eligible set: tubes a
# reservation could be made from right now.
#
# Offers: ready_less, deadline_less, job_setpos, tube_less, tube_setpos,
#   tube_get, tube_incref, tube_decref, tubes_destroy, tube_update, tube_retime.
# Uses: vec, heap.


# ready jobs: by priority, then id; delayed and reserved jobs: by deadline, then id
cdef bint ready_less(void *a, void *b) noexcept nogil:
    cdef Job *x = <Job *>a
    cdef Job *y = <Job *>b
    return x.pri < y.pri or (x.pri == y.pri and x.id < y.id)


cdef bint deadline_less(void *a, void *b) noexcept nogil:
    cdef Job *x = <Job *>a
    cdef Job *y = <Job *>b
    return x.deadline < y.deadline or (x.deadline == y.deadline and x.id < y.id)


cdef void job_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<Job *>a).heap_index = i


cdef bint tube_less(void *a, void *b) noexcept nogil:
    return (<Tube *>a).timer_at < (<Tube *>b).timer_at


cdef void tube_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<Tube *>a).timer_index = i


cdef Tube *tube_get(Core core, const char *name, Py_ssize_t n, bint create) except? NULL:
    # The tube of that name; NULL if there is none and create is false.
    cdef Tube *t
    key = PyBytes_FromStringAndSize(name, n)
    addr = core.tube_by_name.get(key)
    if addr is not None:
        return <Tube *><size_t>addr
    if not create:
        return NULL
    t = <Tube *>calloc(1, sizeof(Tube))
    if t == NULL:
        raise MemoryError()
    t.wal_seq = core.tube_gone_seq      # an empty tube may show what a gone one's records took away
    if vec_grow(<void **>&core.tubes, &core.captubes, core.ntubes + 1, sizeof(Tube *)) < 0:
        free(t)
        raise MemoryError()
    t.name = <PyObject *>key
    Py_INCREF(key)
    heap_init(&t.ready, ready_less, job_setpos)
    heap_init(&t.delay, deadline_less, job_setpos)
    t.timer_index = -1
    t.elig_index = -1
    t.list_index = core.ntubes
    core.tubes[core.ntubes] = t
    core.ntubes += 1
    core.tube_by_name[key] = <size_t>t
    return t


cdef inline void tube_incref(Tube *t) noexcept:
    t.refs += 1


cdef void _tube_free(Tube *t) noexcept:
    heap_free(&t.ready)
    heap_free(&t.delay)
    free(t.waiting)
    Py_XDECREF(t.name)
    free(t)


cdef void tube_decref(Core core, Tube *t):
    cdef Tube *last
    t.refs -= 1
    if t.refs > 0:
        return
    # Unused and empty: forget it, pause and counters included (reference §3.8).
    if t.wal_seq > core.tube_gone_seq:
        core.tube_gone_seq = t.wal_seq
    del core.tube_by_name[<object>t.name]
    last = core.tubes[core.ntubes - 1]
    core.tubes[t.list_index] = last
    last.list_index = t.list_index
    core.ntubes -= 1
    if t.timer_index >= 0:
        heap_remove(&core.tube_timers, t.timer_index)
    if t.elig_index >= 0:
        _elig_remove(core, t)
    _tube_free(t)


cdef void tubes_destroy(Core core) noexcept:
    # Free every tube of a dying engine.
    cdef Py_ssize_t i
    for i in range(core.ntubes):
        _tube_free(core.tubes[i])
    free(core.tubes)
    core.tubes = NULL
    core.ntubes = 0
    free(core.eligible)
    core.eligible = NULL


cdef void _elig_remove(Core core, Tube *t) noexcept:
    cdef Tube *last = core.eligible[core.neligible - 1]
    core.eligible[t.elig_index] = last
    last.elig_index = t.elig_index
    core.neligible -= 1
    t.elig_index = -1


cdef void tube_update(Core core, Tube *t) noexcept:
    # Keep core.eligible = tubes a reservation could be made from now.
    cdef bint elig = t.nwaiting > 0 and t.ready.len > 0 and t.pause_ns == 0
    if elig and t.elig_index < 0:
        if vec_grow(<void **>&core.eligible, &core.capeligible, core.neligible + 1,
                    sizeof(Tube *)) < 0:
            return      # process_queue will simply not see it until the next change
        t.elig_index = core.neligible
        core.eligible[core.neligible] = t
        core.neligible += 1
    elif not elig and t.elig_index >= 0:
        _elig_remove(core, t)


cdef int tube_retime(Core core, Tube *t) except -1:
    # The tube's timer: its soonest delayed job, or the end of its pause.
    cdef int64_t at = INT64_MAX
    if t.delay.len:
        at = (<Job *>t.delay.items[0]).deadline
    if t.pause_ns and t.unpause_at < at:
        at = t.unpause_at
    if at == INT64_MAX:
        if t.timer_index >= 0:
            heap_remove(&core.tube_timers, t.timer_index)
        return 0
    t.timer_at = at
    if t.timer_index >= 0:
        heap_fix(&core.tube_timers, t.timer_index)
    else:
        heap_insert(&core.tube_timers, t)
    return 0
