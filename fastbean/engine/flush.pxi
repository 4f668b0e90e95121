# flush-tube and flush-buried (docs/protocol-extensions.md, tuber's syntax):
# a tube's jobs deleted FLUSH_BATCH per loop turn, like kick, so a flush of
# a million jobs leaves every other client served meanwhile. Each job goes
# as a delete goes and is logged as a delete record, so beanstalkd reads
# the binlog and replication ships the flush with no record of its own;
# the FLUSHED reply waits for those records like any reply (flush, conn.pxi).
#
# Offers: cmd_flush, flush_more.
# Uses: clock, tube, job, conn, queue.

cdef enum:
    FLUSH_BATCH = 4096                # jobs one flush deletes per loop turn


cdef int _note_reserved(Core core, Conn c, Tube *t) except -1:
    # Reserved jobs are listed by connection, not by tube: the ids of the
    # tube's ones are noted in one read-only pass over the TTR heap, then
    # deleted by id in slices (the heap reorders between turns).
    cdef Py_ssize_t i
    cdef Job *j
    if t.reserved_ct == 0:
        return 0
    c.flush_ids = <uint64_t *>malloc(t.reserved_ct * sizeof(uint64_t))
    if c.flush_ids == NULL:
        raise MemoryError()
    for i in range(core.ttr_heap.len):
        j = <Job *>core.ttr_heap.items[i]
        if j.tube == t and c.flush_nids < t.reserved_ct:
            c.flush_ids[c.flush_nids] = j.id
            c.flush_nids += 1
    return 0


cdef int cmd_flush(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t = tube_get(core, cmd.name, cmd.name_len, False)
    c.flush_all = cmd.op == OP_FLUSH_TUBE
    if c.flush_all:
        core.flush_tube_ct += 1
    else:
        core.flush_buried_ct += 1
    c.flush_done = 0
    if t == NULL:
        # as tuber: a tube that does not exist holds nothing to delete
        return out_u64(c, MSG_FLUSHED, 0)
    tube_incref(t)              # it could die with its last job otherwise
    c.flush_tube = t
    # At most what the tube holds now, so a flush ends even while producers
    # fill the tube faster than it empties.
    c.flush_left = <uint64_t>t.buried_ct
    if c.flush_all:
        _note_reserved(core, c, t)
        c.flush_left += <uint64_t>(t.ready.len + t.delay.len + c.flush_nids)
    return flush_more(core, c)


cdef Job *_next_victim(Core core, Conn c) noexcept:
    # Buried jobs first (all flush-buried wants), then delayed, ready and the
    # noted reserved ones. The heaps give their last item: it leaves with no
    # sifting.
    cdef Tube *t = c.flush_tube
    cdef Job *j
    if t.buried.head != NULL:
        return t.buried.head
    if not c.flush_all:
        return NULL
    if t.delay.len:
        return <Job *>t.delay.items[t.delay.len - 1]
    if t.ready.len:
        return <Job *>t.ready.items[t.ready.len - 1]
    while c.flush_pos < c.flush_nids:
        j = job_find(core, c.flush_ids[c.flush_pos])
        c.flush_pos += 1
        if j != NULL and j.state == JOB_RESERVED and j.tube == t:
            return j
    return NULL


cdef int _drop(Core core, Job *j) except -1:
    # A reserved job's owner may be blocked in a reserve with a timer set
    # for that job's DEADLINE_SOON: it is set again, as after a TTR runs out.
    cdef Conn owner = <Conn>j.owner if j.state == JOB_RESERVED else None
    job_drop(core, j)
    if owner is not None and owner.wait == WAIT_JOB:
        conn_retime(core, owner, mono_ns())
    return 0


cdef int flush_more(Core core, Conn c) except -1:
    # At most FLUSH_BATCH jobs per loop turn; the reply waits for the rest,
    # and so do the connection's later commands, but nobody else does.
    cdef Job *j
    cdef int n = 0
    while c.flush_left and n < FLUSH_BATCH:
        j = _next_victim(core, c)
        if j == NULL:
            c.flush_left = 0
            break
        _drop(core, j)
        c.flush_left -= 1
        c.flush_done += 1
        n += 1
    core.jobs_flushed += <uint64_t>n
    if c.flush_left:
        c.wait = WAIT_FLUSH
        ask_again(c)
        return 0
    c.wait = WAIT_NONE
    flush_forget(core, c)
    return out_u64(c, MSG_FLUSHED, c.flush_done)
