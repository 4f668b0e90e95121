# The invariants: every structure walked and cross-checked. Tests call it
# (Core.check); debug builds (FASTBEAN_DEBUG=1) run it after every command.
#
# Offers: debug_check, core_check.
# Uses: table, job, queue.


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
    # every keyed job is in both key tables, and nothing else is
    assert len(core.job_keys) == sum(len(d) for d in core.keys.values()), "key tables"
    for tube, keys in core.keys.items():
        assert keys, "an empty tube of keys"
        for key, id in keys.items():
            j = job_find(core, id)
            assert j != NULL and j.flags & JOB_KEYED and <bytes>j.tube.name == tube, "a key's job"
            assert (<tuple>core.job_keys[id])[0] == key, "a key's job has another key"
    # every dead letter's origin is its job's, and flagged
    for id in core.origins:
        j = job_find(core, id)
        assert j != NULL and j.flags & JOB_ORIGIN, "an origin's job"
    return 0
