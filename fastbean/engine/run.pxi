# Running a connection: its buffered commands, until it blocks, runs dry or
# uses up its share of the turn, then its replies in one write. And what
# follows every piece of work (settle): connections that got output
# meanwhile are flushed, the timer is re-armed.
#
# Offers: lease_lost, conn_run, flush_dirty, settle.
# Uses: clock, hooks, conn, queue, flush, list, cmds, check.

cdef enum:
    # Bytes of put bodies one connection may add per run; the rest waits a
    # turn. Otherwise a producer pipelining big bodies outruns its consumers
    # by the depth of its pipeline every turn, and the queue (and RSS)
    # balloons under a load beanstalkd keeps balanced.
    BODY_BUDGET = 65536


cdef bint lease_lost(Core core) except -1:
    # A replicated primary past its lease: another node may be serving, so
    # this one must not answer anything (it is told once, and closes).
    if core.lease_end == INT64_MAX or real_mono_ns() < core.lease_end:
        return False
    if not core.lease_told:
        core.lease_told = True
        hook0(core, core.lease_over)
    return True


cdef int conn_run(Core core, Conn c) except -1:
    # Execute c's buffered commands until it blocks, runs dry or uses
    # up its batch; then write everything it has to say in one call.
    cdef Cmd cmd
    cdef int n = 0
    cdef Py_ssize_t body_bytes = 0
    if c.in_run or lease_lost(core):
        return 0
    c.in_run = True
    try:
        if c.lost and not conn_released(c):
            c.state = CONN_QUIT             # a write failed: the peer is gone
        elif c.wait == WAIT_KICK and not conn_released(c):
            kick_more(core, c)
            c.careful = c.wait == WAIT_NONE
        elif c.wait == WAIT_FLUSH and not conn_released(c):
            flush_more(core, c)
            c.careful = c.wait == WAIT_NONE
        elif c.wait == WAIT_LIST and not conn_released(c):
            list_more(core, c)
            c.careful = c.wait == WAIT_NONE
        while c.wait == WAIT_NONE and c.state < CONN_QUIT and c.writable:
            if ((c.state == CONN_EOF or (c.careful and type(c.write) is SockWriter and c.parser.buffered()))
                    and (c.closing or c.olen or c.chunks or c.held)):
                # After the peer's FIN, or behind a wait, a command runs
                # once the reply before it is written, as in beanstalkd: if
                # the peer has closed its socket, the first write draws a
                # reset and the next one fails, and then nothing more runs.
                # (Behind a wait, only where a failed write is known at once:
                # a plain socket's SockWriter.) A closing transport (TLS) can
                # write nothing back: nothing starts, though a flush or kick
                # under way ends first (above).
                if c.closing:
                    c.state = CONN_QUIT
                    break
                flush(c)
                if c.lost:
                    c.state = CONN_QUIT
                    break
                if c.held:
                    break               # release_held runs it again
            if n >= core.batch_limit or body_bytes >= BODY_BUDGET:
                ask_again(c)
                break
            if not c.parser.next(&cmd):
                c.careful = False
                if c.state == CONN_EOF:
                    c.state = CONN_QUIT
                break
            if cmd.op == OP_PUT_BODY and cmd.body != NULL and c.put_job != NULL:
                body_bytes += c.put_job.body_size
            dispatch(core, c, &cmd)
            n += 1
            if DEBUG_BUILD:
                debug_check(core)
    finally:
        c.in_run = False
    core.served += 1
    c.served = core.served
    flush(c)
    if c.lost and c.state < CONN_QUIT:
        c.state = CONN_QUIT
    if c.state == CONN_QUIT:
        conn_release(core, c)
        settle(core)        # its reserved jobs may have gone to waiting connections
        if c.held:
            c.state = CONN_CLOSING        # after the binlog commit lets its replies out
        else:
            hook0(core, c.close_cb)
    elif not conn_released(c):
        update_reading(c)
    return 0


cdef int flush_dirty(Core core) except -1:
    cdef Conn c
    while core.dirty:
        c = core.dirty.pop()
        c.dirty = False
        conn_run(core, c)
    return 0


cdef int settle(Core core) except -1:
    # The end of every piece of work (a read, a timer, a turn): run the
    # connections it gave output to, then make sure the timer will fire
    # for whatever it scheduled.
    if core.dirty:
        flush_dirty(core)
    return rearm(core)
