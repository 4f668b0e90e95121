# The test-only commands, which only a server started with --testing runs
# (fastbean.testing and the pytest plugin use them; Core(testing=True)).
#
# Offers: test_command.
# Uses: clock, hooks, tube, walg, conn, queue, sched.
#
#   fastbean-clock-advance SECONDS[.FRACTION]  -> ADVANCED <offset ns>
#       moves the engine's clock (clock_offset) forward, then runs every timer
#       now due before it answers;
#   fastbean-reset  -> RESET, then the connection is closed
#       drops every other connection, deletes every job, forgets every tube,
#       pause, counter, cooling key, retry limit and schedule, leaves drain mode and
#       sets the clock back.

# The clock moves at most this far in all (~73 years), so that deadlines
# stay far from int64 overflow.
cdef int64_t MAX_CLOCK_OFFSET = 1 << 61


cdef int test_command(Core core, Conn c, Cmd *cmd) except -1:
    if not core.testing:
        return out_text(c, MSG_UNKNOWN_COMMAND)
    if cmd.err != ERR_NONE:
        return out_text(c, MSG_BAD_FORMAT)
    if cmd.op == OP_TEST_ADVANCE:
        return _advance(core, c, cmd.advance_ns)
    return _reset(core, c)


cdef int _advance(Core core, Conn c, int64_t ns) except -1:
    global clock_offset
    if ns > MAX_CLOCK_OFFSET - clock_offset:
        return out_text(c, MSG_BAD_FORMAT)
    clock_offset += ns
    queue_tick(core, mono_ns(), PY_SSIZE_T_MAX)   # all that is now due, before the reply
    sched_tick(core, PY_SSIZE_T_MAX, True)                # every occurrence passed, each schedule's in order
    core.armed_at = INT64_MAX       # the Python timer's delay was in the old time
    rearm(core)
    return out_u64(c, MSG_ADVANCED, <uint64_t>clock_offset)


cdef int _reset(Core core, Conn c) except -1:
    global clock_offset
    cdef Conn o
    cdef Tube *t
    cdef Py_ssize_t i
    # Other connections go as if they had hung up, all at once, so the jobs
    # they held are not handed from one to the next. drop_others(c) closes
    # their transports and returns their Conns.
    others = hook1(core, core.drop_others, c) if core.drop_others is not None else ()
    for o in others:
        o.lost = True
        waiting_remove(core, o)
    for o in others:
        conn_release(core, o)       # settled once the command is done, as every command is
    while c.reserved.head != NULL:
        job_delete(core, c.reserved.head)
    i = core.ntubes - 1
    while i >= 0:
        # An emptied tube is freed and the last one moves into its slot,
        # which was emptied before: walking down visits each once.
        t = core.tubes[i]
        tube_incref(t)
        while t.ready.len:
            job_delete(core, <Job *>t.ready.items[0])
        while t.delay.len:
            job_delete(core, <Job *>t.delay.items[0])
        while t.buried.head != NULL:
            job_delete(core, t.buried.head)
        t.pause_ns = 0
        t.total_jobs = t.cmd_delete = t.cmd_pause = 0
        tube_update(core, t)
        tube_retime(core, t)
        tube_decref(core, t)
        i -= 1
    # the extensions' state that outlives jobs: cooling keys, retry limits
    for what in list(core.ext_items):
        ext_disown(core, what)
    core.gone = {}
    core.policies = {}
    core.origins = {}
    sched_reset(core)
    memset(core.cmd_ct, 0, sizeof(core.cmd_ct))
    core.job_timeouts = core.total_jobs = core.total_conns = 0
    core.wal_written = core.wal_migrated = 0
    core.drain_mode = False
    # No job, pause or waiting connection is left to time: the clock can go back.
    clock_offset = 0
    core.armed_at = INT64_MAX
    c.state = CONN_QUIT
    c.parser.discard_input()
    return out_text(c, MSG_RESET)
