# list-tube (docs/protocol-extensions.md): one page of the used tube's jobs
# in one state, in the order they leave it: ready by (priority, id) as reserve
# takes them, delayed and reserved by (deadline, id), buried in kick order.
# A page starts after a cursor, the (key, id) of the last job of the page
# before. The heaps are not sorted, so a page of ready, delayed or reserved
# jobs is gathered by looking at every entry, LIST_SCAN entries per loop
# turn (like kick), keeping the smallest keys past the cursor; buried jobs
# are a list, and a page of them is read from the cursor's job on.
#
# Offers: LIST_SCAN, cmd_list, list_more, list_key_cmp, list_key_of.
# Uses: clock, tube, job, conn.

cdef enum:
    LIST_SCAN = 16384                 # heap entries one listing looks at per loop turn


cdef int list_key_cmp(const void *a, const void *b) noexcept nogil:
    cdef const ListKey *x = <const ListKey *>a
    cdef const ListKey *y = <const ListKey *>b
    if x.key != y.key:
        return -1 if x.key < y.key else 1
    return (x.id > y.id) - (x.id < y.id)


cdef inline uint64_t list_key_of(Job *j, int state) noexcept:
    # deadlines are mono ns since boot: positive
    return j.pri if state == JOB_READY else <uint64_t>j.deadline


cdef inline bytes _whole_seconds(int64_t ns):
    return b"%d" % (ns // SEC if ns >= 0 else -((-ns) // SEC))


cdef bytes _job_row(Job *j, int64_t now, int64_t wall):
    # "<id> <pri> <age> <time-left> <bytes>", as stats-job counts them
    cdef int64_t left = 0
    if j.state == JOB_RESERVED or j.state == JOB_DELAYED:
        left = j.deadline - now
    return b"%d %d %s %s %d\r\n" % (j.id, j.pri, _whole_seconds(wall - j.created_wall),
                                    _whole_seconds(left), j.body_size - 2)


cdef int _reply(Conn c, list rows, uint64_t key, uint64_t id) except -1:
    # LISTED <n> <cursor>, then a row per job; cursor 0: nothing after these
    out_text(c, MSG_LISTED)
    out_bytes(c, b" %d %s\r\n" % (len(rows), b"%d.%d" % (key, id) if id else b"0"))
    for row in rows:
        out_bytes(c, row)
    return 0


cdef int cmd_list(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t = c.use
    core.list_tube_ct += 1
    if cmd.list_state == JOB_BURIED:
        return _list_buried(core, c, t, cmd)
    c.list_keys = <ListKey *>malloc(2 * cmd.bound * sizeof(ListKey))
    if c.list_keys == NULL:
        raise MemoryError()
    tube_incref(t)                  # the connection's, until the page is out
    c.list_tube = t
    c.list_state = cmd.list_state
    c.list_count = cmd.bound
    c.list_after.key, c.list_after.id = cmd.after_key, cmd.after_id
    c.list_nkeys = c.list_pos = 0
    c.list_more = False
    return list_more(core, c)


cdef int _list_buried(Core core, Conn c, Tube *t, Cmd *cmd) except -1:
    # kick order is the list's: the page goes on from the cursor's job, which
    # must still be buried in the tube (else NOT_FOUND: start again from 0)
    cdef Job *j = t.buried.head
    cdef int64_t now = mono_ns(), wall = wall_ns()
    cdef Job *last = NULL
    if cmd.after_id:
        j = job_find(core, cmd.after_id)
        if j == NULL or j.state != JOB_BURIED or j.tube != t:
            return out_text(c, MSG_NOT_FOUND)
        j = j.link[LINK_STATE].next
    rows = []
    while j != NULL and len(rows) < cmd.bound:
        rows.append(_job_row(j, now, wall))
        last = j
        j = j.link[LINK_STATE].next
    if j == NULL:
        return _reply(c, rows, 0, 0)
    return _reply(c, rows, 0, last.id)


cdef Heap *_heap_listed(Core core, Conn c) noexcept:
    if c.list_state == JOB_READY:
        return &c.list_tube.ready
    if c.list_state == JOB_DELAYED:
        return &c.list_tube.delay
    return &core.ttr_heap              # every reserved job: the tube's are picked out


cdef void _keep_smallest(Conn c) noexcept:
    # candidates sorted, the first list_count kept; any beyond means a next page
    qsort(c.list_keys, c.list_nkeys, sizeof(ListKey), list_key_cmp)
    if c.list_nkeys > c.list_count:
        c.list_nkeys = c.list_count
        c.list_more = True


cdef int list_more(Core core, Conn c) except -1:
    # LIST_SCAN heap entries per loop turn; the reply waits for the rest, and
    # so do the connection's later commands, but nobody else does.
    cdef Heap *h = _heap_listed(core, c)
    cdef Py_ssize_t i, end = min(h.len, c.list_pos + LIST_SCAN)
    cdef Job *j
    cdef ListKey k
    cdef int64_t now, wall
    for i in range(c.list_pos, end):
        j = <Job *>h.items[i]
        if j.tube != c.list_tube:
            continue
        k.key, k.id = list_key_of(j, c.list_state), j.id
        if list_key_cmp(&k, &c.list_after) <= 0:
            continue
        c.list_keys[c.list_nkeys] = k
        c.list_nkeys += 1
        if c.list_nkeys == 2 * c.list_count:
            _keep_smallest(c)
    c.list_pos = end
    if c.list_pos < h.len:
        c.wait = WAIT_LIST
        ask_again(c)
        return 0
    c.wait = WAIT_NONE
    _keep_smallest(c)
    # the jobs noted on earlier turns may have moved or gone since: each is
    # shown as it is now, if it is still in the tube and state listed
    now, wall = mono_ns(), wall_ns()
    rows = []
    for i in range(c.list_nkeys):
        j = job_find(core, c.list_keys[i].id)
        if j != NULL and j.tube == c.list_tube and j.state == c.list_state:
            rows.append(_job_row(j, now, wall))
    k = c.list_keys[c.list_nkeys - 1] if c.list_more else c.list_after
    list_forget(core, c)
    if not c.list_more:
        return _reply(c, rows, 0, 0)
    return _reply(c, rows, k.key, k.id)
