# The test-only commands, which only a server started with --testing runs
# (fastbean.testing and the pytest plugin use them). Included by _core.pyx.
#
#   fastbean-clock-advance SECONDS[.FRACTION]  -> ADVANCED <offset ns>
#       moves the engine's clock (clock_offset) forward, then runs every timer
#       now due before it answers;
#   fastbean-reset  -> RESET, then the connection is closed
#       drops every other connection, deletes every job, forgets every tube,
#       pause and counter, leaves drain mode and sets the clock back.

# The clock moves at most this far in all (~73 years), so that deadlines
# stay far from int64 overflow.
cdef int64_t MAX_CLOCK_OFFSET = 1 << 61


cdef int test_command(Core core, Conn c, Cmd *cmd) except -1:
    if not core.testing:
        return c.out(b"UNKNOWN_COMMAND\r\n", 17)
    if cmd.err != ERR_NONE:
        return c.out(b"BAD_FORMAT\r\n", 12)
    if cmd.op == OP_TEST_ADVANCE:
        return _advance(core, c, cmd.advance_ns)
    return _reset(core, c)


cdef int _advance(Core core, Conn c, int64_t ns) except -1:
    global clock_offset
    if ns > MAX_CLOCK_OFFSET - clock_offset:
        return c.out(b"BAD_FORMAT\r\n", 12)
    clock_offset += ns
    core.tick(PY_SSIZE_T_MAX)       # all that is now due, before the reply
    core.armed_at = INT64_MAX       # the Python timer's delay was in the old time
    core.rearm()
    return c.out_u64(b"ADVANCED", 8, <uint64_t>clock_offset)


cdef int _reset(Core core, Conn c) except -1:
    global clock_offset
    cdef Conn o
    cdef Tube *t
    cdef Py_ssize_t i
    # Other connections go as if they had hung up, all at once, so the jobs
    # they held are not handed from one to the next.
    others = core.drop_others(c) if core.drop_others is not None else ()
    for o in others:
        o.lost = True
        core.waiting_remove(o)
    for o in others:
        core.conn_release(o)
    while c.res_head != NULL:
        core.job_delete(c.res_head)
    i = core.ntubes - 1
    while i >= 0:
        # An emptied tube is freed and the last one moves into its slot,
        # which was emptied before: walking down visits each once.
        t = core.tubes[i]
        core.tube_incref(t)
        while t.ready.len:
            core.job_delete(<Job *>t.ready.items[0])
        while t.delay.len:
            core.job_delete(<Job *>t.delay.items[0])
        while t.buried_head != NULL:
            core.job_delete(t.buried_head)
        t.pause_ns = 0
        t.total_jobs = t.cmd_delete = t.cmd_pause = 0
        core.tube_update(t)
        core.tube_retime(t)
        core.tube_decref(t)
        i -= 1
    memset(core.cmd_ct, 0, sizeof(core.cmd_ct))
    core.job_timeouts = core.total_jobs = core.total_conns = 0
    core.wal_written = core.wal_migrated = 0
    core.draining = False
    # No job, pause or waiting connection is left to time: the clock can go back.
    clock_offset = 0
    core.armed_at = INT64_MAX
    c.quitting = True
    c.parser.discard_input()
    return c.out(b"RESET\r\n", 7)
