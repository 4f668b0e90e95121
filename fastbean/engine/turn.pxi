# Fair turns: which connection runs a read now and which waits for the end
# of the loop turn. epoll lists the sockets it reported in the last turn
# first, so running reads in the order they come would serve a few clients
# again and again while the others wait.
#
# Offers: conn_feed, turn_finish.
# Uses: hooks, metrics, conn, run.

ctypedef struct TurnSlot:
    uint64_t served
    PyObject *conn


cdef int _slot_cmp(const void *a, const void *b) noexcept nogil:
    cdef uint64_t x = (<const TurnSlot *>a).served
    cdef uint64_t y = (<const TurnSlot *>b).served
    return (x > y) - (x < y)


cdef int conn_feed(Core core, Conn c, object data) except -1:
    # Bytes from one read. A connection served in the last loop turn, which
    # served others too, waits for the end of this one (end_turn), so the
    # ones that waited longer go first; otherwise it runs now. One whose
    # last put was big always waits (feed_after_big_put, conn.pxi). Without
    # end_turn_soon (in-process tests) the caller calls end_turn itself.
    cdef bint wait = c.big_puts
    lat_read(c)
    core.nreads += 1
    if core.wake_armed:
        # the busy poller let the loop sleep: it is told of every read until
        # it polls again
        core.wake_armed = hook1(core, core.on_wake, core.nreads)
    if wait:
        feed_after_big_put(c, data if type(data) is bytes else bytes(data))
    else:
        c.parser.feed(data)
    if not core.turn_asked:
        core.turn_asked = True
        if core.end_turn_soon is not None:
            hook0(core, core.end_turn_soon)
    if wait or c.in_turn or (c.served > core.last_turn_start
                             and core.turn_start - core.last_turn_start > 1):
        if not c.in_turn:
            c.in_turn = True
            core.turn.append(c)
        return 0
    conn_run(core, c)
    return settle(core)


cdef int turn_finish(Core core) except -1:
    # The end of a loop turn: the held-back connections run, the one served
    # longest ago first.
    cdef list turn = core.turn      # keeps the connections alive meanwhile
    cdef Py_ssize_t i, n = len(turn)
    cdef TurnSlot *order
    cdef Conn c
    core.turn = []
    core.turn_asked = False
    order = <TurnSlot *>malloc(n * sizeof(TurnSlot)) if n else NULL
    if n and order == NULL:
        raise MemoryError()
    for i in range(n):
        c = <Conn>turn[i]
        order[i].served = c.served
        order[i].conn = <PyObject *>c
    if n > 1:
        qsort(order, n, sizeof(TurnSlot), _slot_cmp)
    try:
        for i in range(n):
            c = <Conn>order[i].conn
            if not conn_released(c):
                conn_run(core, c)
    finally:
        for i in range(n):          # if a run raised, the rest wait for their next read
            (<Conn>order[i].conn).in_turn = False
        free(order)
    core.last_turn_start = core.turn_start
    core.turn_start = core.served
    return 0
