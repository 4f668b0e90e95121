# Commands: one function per command of the protocol (protocol.txt), and
# dispatch. Each answers through c's output; the run loop (run.pxi) flushes.
#
# Offers: dispatch, kick_more.
# Uses: clock, heap, mem, wal, tube, job, walg, keys, retry, stats, metrics, conn,
#   queue, sched, testing, flush, list.


cdef inline void _count_producer(Core core, Conn c) noexcept:
    if not c.producer:
        c.producer = True
        core.producer_ct += 1


cdef inline void _count_worker(Core core, Conn c) noexcept:
    if not c.worker:
        c.worker = True
        core.worker_ct += 1


cdef inline bint _owns(Conn c, Job *j) noexcept:
    return j != NULL and j.state == JOB_RESERVED and j.owner == <PyObject *>c


cdef int cmd_put(Core core, Conn c, Cmd *cmd) except -1:
    # The put line: take the body that follows, or swallow it with an error.
    cdef Py_ssize_t cost
    if cmd.nbytes > <uint64_t>core.max_job_size:
        c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_JOB_TOO_BIG)
        return 0
    c.put_key = None
    if cmd.garbage:
        # beanstalkd answers BAD_FORMAT to anything after the size; an
        # idempotency tag (keys.pxi) is the extension's
        if not core.strict:
            c.put_key = key_parse(cmd.name, cmd.name_len)
        if c.put_key is None:
            c.parser.no_body()
            return out_text(c, MSG_BAD_FORMAT)
    _count_producer(core, c)
    c.big_puts = cmd.nbytes + 2 >= BIG_PUT
    cost = <Py_ssize_t>cmd.nbytes + 2 + JOB_OVERHEAD
    if core.max_memory and core.mem_used + cost > core.max_memory:
        core.mem_refused += 1
        c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_OUT_OF_MEMORY)
        return 0
    try:
        c.put_job = job_alloc(core, <Py_ssize_t>cmd.nbytes + 2)
    except MemoryError:
        c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_OUT_OF_MEMORY)
        return 0
    c.parser.accept_body(c.put_job.body, <Py_ssize_t>cmd.nbytes + 2)
    mem_charge(core, cost)
    c.put_cost = cost
    c.put_id = core.next_id
    core.next_id += 1
    c.put_pri = cmd.pri
    c.put_delay = cmd.delay
    c.put_ttr = cmd.ttr if cmd.ttr > 0 else 1
    return 0


cdef int cmd_put_body(Core core, Conn c, Cmd *cmd) except -1:
    # The body has come: the job exists from here on.
    cdef Py_ssize_t cost = c.put_cost
    cdef Job *j = c.put_job
    cdef object key = c.put_key
    cdef Py_ssize_t key_bytes = 0, cool_bytes = 0
    c.put_cost = 0
    c.put_job = NULL
    c.put_key = None
    if cmd.err != ERR_NONE or core.drain_mode:
        mem_refund(core, cost)
        job_discard(j)
        return out_text(c, MSG_DRAINING) if cmd.err == ERR_NONE else out_text(c, err_text(cmd.err))
    if key is not None:
        found = key_find(core, <bytes>c.use.name, <bytes>(<tuple>key)[0])
        if found is not None:
            mem_refund(core, cost)      # the id stays burned, as for a failed put
            job_discard(j)
            return _put_found(core, c, found)
        key_bytes = 4 + PyBytes_GET_SIZE(<bytes>(<tuple>key)[0]) + sizeof(Jobrec)
        if (<tuple>key)[1]:
            cool_bytes = gone_size(<bytes>c.use.name, <bytes>(<tuple>key)[0])
    if core.wal_on and not wal_room(
            core, 4 + PyBytes_GET_SIZE(<bytes>c.use.name) + sizeof(Jobrec) + j.body_size + key_bytes,
            WAL_SHORT + cool_bytes):
        mem_refund(core, cost)          # no room on disk: the id stays burned
        job_discard(j)
        return out_text(c, MSG_OUT_OF_MEMORY)
    job_init(core, j, c.put_id, c.put_pri, <int64_t>c.put_delay * SEC,
             <int64_t>c.put_ttr * SEC, c.use)
    if key is not None:
        key_bind(core, j, <bytes>(<tuple>key)[0], <int64_t>(<tuple>key)[1])
    core.total_jobs += 1
    c.use.total_jobs += 1
    if c.put_delay:
        job_make_delayed(core, j, mono_ns() + <int64_t>c.put_delay * SEC)
    else:
        j.state = JOB_READY
    if core.wal_on:
        wal_record(core, j, True)
        core.wal_resv += WAL_SHORT + cool_bytes
    if not c.put_delay:
        job_make_ready(core, j)
    return out_u64(c, MSG_INSERTED, j.id)


cdef int _put_found(Core core, Conn c, tuple found) except -1:
    # tuber's answer to a put whose key has a job: "INSERTED <id> <STATE>",
    # and " <pri>" when the put's more urgent priority was given to the job
    # (it never goes the other way); DELETED while a deleted key cools down.
    cdef Job *j
    cdef uint32_t pri = c.put_pri
    cdef bint ratchet
    core.key_hits += 1
    if not found[1]:
        return out_bytes(c, b"INSERTED %d DELETED\r\n" % found[0])
    j = job_find(core, <uint64_t>found[0])
    ratchet = pri < j.pri
    if ratchet and not job_set_pri(core, j, pri):
        return out_text(c, MSG_OUT_OF_MEMORY)
    state = _STATE_WORDS[j.state]
    if ratchet:
        return out_bytes(c, b"INSERTED %d %s %d\r\n" % (j.id, state, pri))
    return out_bytes(c, b"INSERTED %d %s\r\n" % (j.id, state))


_STATE_WORDS = {JOB_READY: b"READY", JOB_RESERVED: b"RESERVED", JOB_BURIED: b"BURIED",
                JOB_DELAYED: b"DELAYED"}


cdef int cmd_reserve(Core core, Conn c, Cmd *cmd) except -1:
    cdef int64_t now = mono_ns()
    _count_worker(core, c)
    if deadline_soon(c, now) and not any_ready(c):
        return out_text(c, MSG_DEADLINE_SOON)
    c.timeout_at = now + <int64_t>cmd.timeout * SEC if cmd.timeout >= 0 else -1
    waiting_add(core, c)
    process_queue(core)
    if c.wait == WAIT_JOB:
        if c.state == CONN_EOF or cmd.timeout == 0:
            # beanstalkd answers these on its next loop pass
            waiting_remove(core, c)
            if deadline_soon(c, now):
                return out_text(c, MSG_DEADLINE_SOON)
            return out_text(c, MSG_TIMED_OUT)
        lat_blocked(c)
        conn_retime(core, c, now)
    return 0


cdef int cmd_reserve_batch(Core core, Conn c, Cmd *cmd) except -1:
    # tuber's reserve-batch: what is ready now, up to the count; with a
    # timeout and nothing ready, wait as reserve-with-timeout does, then take
    # what is ready when the first job comes (batch_answer, queue.pxi).
    cdef int64_t now = mono_ns()
    _count_worker(core, c)
    core.reserve_batch_ct += 1
    c.batch_count = cmd.bound
    if _batch_any(c) or cmd.delay == 0 or c.state == CONN_EOF:
        return batch_answer(core, c, NULL, now)
    c.batch_count = 0
    if deadline_soon(c, now):
        return out_text(c, MSG_DEADLINE_SOON)
    c.batch_count = cmd.bound
    c.timeout_at = now + <int64_t>cmd.delay * SEC
    waiting_add(core, c)
    lat_blocked(c)
    conn_retime(core, c, now)
    return 0


cdef inline bint _batch_any(Conn c) noexcept:
    # a ready job in a watched tube that is not paused
    cdef Py_ssize_t i
    for i in range(c.nwatch):
        if c.watch[i].tube.ready.len and c.watch[i].tube.pause_ns == 0:
            return True
    return False


cdef int cmd_reserve_job(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if j == NULL or j.state == JOB_RESERVED or j.state == JOB_INVALID:
        return out_text(c, MSG_NOT_FOUND)
    job_unlink(core, j)
    _count_worker(core, c)
    job_reserve(core, c, j, mono_ns())
    return out_job(c, MSG_RESERVED, j)


cdef int cmd_delete(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if j == NULL or j.state == JOB_INVALID or (
            j.state == JOB_RESERVED and j.owner != <PyObject *>c):
        return out_text(c, MSG_NOT_FOUND)
    job_delete(core, j)
    return out_text(c, MSG_DELETED)


cdef int cmd_delete_batch(Core core, Conn c, Cmd *cmd) except -1:
    # tuber's delete-batch: each id as delete would take it (a job reserved
    # by another connection is not found), then DELETED_BATCH <deleted>
    # <not found>. Each is logged as a delete; as for flush-tube, stats-tube's
    # cmd-delete counts delete commands only.
    # delete-each is the same with the ids not found in its reply
    # (DELETED_EACH <deleted> <not found> <id>...).
    cdef const char *p = cmd.name
    cdef const char *end = cmd.name + cmd.name_len
    cdef uint64_t id, deleted = 0, missing = 0
    cdef Job *j
    cdef bint each = cmd.op == OP_DELETE_EACH
    cdef list absent = [] if each else None
    core.delete_batch_ct += 1
    while p < end:
        id = 0
        while p < end and p[0] != c' ':
            id = id * 10 + <uint64_t>(p[0] - c'0')      # the parser checked the digits
            p += 1
        p += 1
        j = job_find(core, id)
        if j == NULL or j.state == JOB_INVALID or (
                j.state == JOB_RESERVED and j.owner != <PyObject *>c):
            missing += 1
            if each:
                absent.append(b"%d" % id)
        else:
            job_drop(core, j)
            deleted += 1
    core.jobs_batch_deleted += deleted
    if each:
        return out_bytes(c, b"DELETED_EACH %d %d%s\r\n" % (
            deleted, missing, b"".join([b" " + a for a in absent])))
    out_text(c, MSG_DELETED_BATCH)
    return out_bytes(c, b" %d %d\r\n" % (deleted, missing))


cdef int cmd_release(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if not _owns(c, j):
        return out_text(c, MSG_NOT_FOUND)
    if cmd.delay and core.wal_on and not wal_room(core, WAL_SHORT, 0):
        return out_text(c, MSG_OUT_OF_MEMORY)
    job_unlink(core, j)
    j.pri = cmd.pri
    j.delay_ns = <int64_t>cmd.delay * SEC
    j.release_ct += 1
    if not cmd.delay:
        job_retry(core, j)              # ready, or buried or moved by a retry limit
        return out_text(c, MSG_RELEASED)
    p = retry_policy(core, j.tube)
    if p is not None and retry_applies(core, j, p) and job_retry_over(core, j, p):
        return out_text(c, MSG_RELEASED)
    job_make_delayed(core, j, mono_ns() + j.delay_ns)
    if core.wal_on:
        wal_record(core, j, False)
    return out_text(c, MSG_RELEASED)


cdef int cmd_retry_limit(Core core, Conn c, Cmd *cmd) except -1:
    # retry-limit: show, set or clear the tube in use's retry limit
    # (retry.pxi); the reply is the limit in force afterwards.
    cdef bytes tube = <bytes>c.use.name
    cdef object dlq = None
    core.retry_limit_ct += 1
    if cmd.list_state != RETRY_SHOW:
        if cmd.name_len:
            dlq = PyBytes_FromStringAndSize(cmd.name, cmd.name_len)
        if core.wal_on and not wal_room(core, policy_size(tube, dlq), 0):
            return out_text(c, MSG_OUT_OF_MEMORY)
        policy_set(core, tube, cmd.bound, dlq, cmd.list_state == RETRY_DEFAULT, core.wal_on)
    p = core.policies.get(tube, core.default_policy)
    if p is None or not (<tuple>p)[0]:
        return out_bytes(c, b"RETRY_LIMIT 0\r\n")
    if (<tuple>p)[1] is None:
        return out_bytes(c, b"RETRY_LIMIT %d\r\n" % (<tuple>p)[0])
    return out_bytes(c, b"RETRY_LIMIT %d %s\r\n" % p)


cdef int cmd_move_job(Core core, Conn c, Cmd *cmd) except -1:
    # move-job: a ready, delayed or buried job into another tube, as it is
    # (queue.pxi's job_move); a reserved one is its worker's: not found.
    cdef Job *j = job_find(core, cmd.id)
    core.move_job_ct += 1
    if j == NULL or j.state == JOB_RESERVED or j.state == JOB_INVALID:
        return out_text(c, MSG_NOT_FOUND)
    name = PyBytes_FromStringAndSize(cmd.name, cmd.name_len)
    if name == <bytes>j.tube.name:
        return out_text(c, MSG_MOVED)
    if not job_move(core, j, name):
        return out_text(c, MSG_OUT_OF_MEMORY)
    return out_text(c, MSG_MOVED)


cdef int cmd_reprioritize_job(Core core, Conn c, Cmd *cmd) except -1:
    # reprioritize-job: a job's priority, in any state, whoever holds it (a
    # reserved job keeps it until its worker's release or bury names one)
    cdef Job *j = job_find(core, cmd.id)
    core.reprioritize_job_ct += 1
    if j == NULL or j.state == JOB_INVALID:
        return out_text(c, MSG_NOT_FOUND)
    if not job_set_pri(core, j, cmd.pri):
        return out_text(c, MSG_OUT_OF_MEMORY)
    return out_text(c, MSG_REPRIORITIZED)


cdef int cmd_bury(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if not _owns(c, j):
        return out_text(c, MSG_NOT_FOUND)
    if core.wal_on and not wal_room(core, WAL_SHORT, 0):
        return out_text(c, MSG_INTERNAL_ERROR)
    job_unlink(core, j)
    j.pri = cmd.pri
    job_bury(core, j)
    if core.wal_on:
        wal_record(core, j, False)
    return out_text(c, MSG_BURIED)


cdef int cmd_touch(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if not _owns(c, j):
        return out_text(c, MSG_NOT_FOUND)
    j.deadline = mono_ns() + j.ttr_ns
    heap_fix(&core.ttr_heap, j.heap_index)
    c.soonest = NULL
    return out_text(c, MSG_TOUCHED)


cdef int cmd_peek(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = NULL
    cdef Tube *t = c.use
    if cmd.op == OP_PEEK:
        j = job_find(core, cmd.id)
    elif cmd.op == OP_PEEK_READY:
        if t.ready.len:
            j = <Job *>t.ready.items[0]
    elif cmd.op == OP_PEEK_DELAYED:
        if t.delay.len:
            j = <Job *>t.delay.items[0]
    else:
        j = t.buried.head
    if j == NULL:
        return out_text(c, MSG_NOT_FOUND)
    return out_job(c, MSG_FOUND, j)


cdef int cmd_kick(Core core, Conn c, Cmd *cmd) except -1:
    # Buried jobs first, oldest first; only if there are none, delayed
    # jobs, soonest first. All in the used tube.
    c.kick_buried = c.use.buried_ct > 0
    c.kick_left = cmd.bound
    c.kick_done = 0
    return kick_more(core, c)


cdef int kick_more(Core core, Conn c) except -1:
    # At most KICK_BATCH jobs per loop turn; the reply waits for the rest,
    # and so do the connection's later commands, but nobody else does.
    cdef Tube *t = c.use
    cdef Job *j
    cdef int n = 0
    while c.kick_left and n < KICK_BATCH:
        if c.kick_buried:
            j = t.buried.head
        else:
            j = <Job *>t.delay.items[0] if t.delay.len else NULL
        if j == NULL or not kick_one(core, j):
            c.kick_left = 0
            break
        c.kick_left -= 1
        c.kick_done += 1
        n += 1
    if c.kick_left:
        c.wait = WAIT_KICK
        ask_again(c)
        return 0
    c.wait = WAIT_NONE
    return out_u64(c, MSG_KICKED_N, c.kick_done)


cdef int cmd_kick_job(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if j == NULL or (j.state != JOB_BURIED and j.state != JOB_DELAYED):
        return out_text(c, MSG_NOT_FOUND)
    if not kick_one(core, j):
        return out_text(c, MSG_NOT_FOUND)
    return out_text(c, MSG_KICKED)


cdef int cmd_use(Core core, Conn c, Cmd *cmd) except -1:
    use_tube(core, c, tube_get(core, cmd.name, cmd.name_len, True))
    return cmd_list_tube_used(core, c)


cdef int cmd_list_tube_used(Core core, Conn c) except -1:
    out_text(c, MSG_USING)
    out_bytes(c, <bytes>c.use.name)
    return out_text(c, MSG_CRLF)


cdef int cmd_watch(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t = tube_get(core, cmd.name, cmd.name_len, True)
    if not watches(c, t):
        add_watch(c, t)
    return out_u64(c, MSG_WATCHING, c.nwatch)


cdef int cmd_ignore(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t = tube_get(core, cmd.name, cmd.name_len, False)
    if t != NULL and watches(c, t):
        if c.nwatch < 2:
            return out_text(c, MSG_NOT_IGNORED)
        drop_watch(core, c, t)
    return out_u64(c, MSG_WATCHING, c.nwatch)


cdef int cmd_pause_tube(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t
    if cmd.err != ERR_NONE:
        return out_text(c, err_text(cmd.err))
    t = tube_get(core, cmd.name, cmd.name_len, False)
    if t == NULL:
        return out_text(c, MSG_NOT_FOUND)
    t.cmd_pause += 1
    if cmd.delay == 0:
        # beanstalkd pauses for 1 ns, over before it looks at the tube again:
        # a reserve right behind it (even in the same read) finds its jobs,
        # and its waiters are served at once
        t.pause_ns = 0
        t.unpause_at = 0
        tube_update(core, t)
        tube_retime(core, t)
        if core.neligible:
            process_queue(core)
        return out_text(c, MSG_PAUSED)
    t.pause_ns = <int64_t>cmd.delay * SEC
    t.unpause_at = mono_ns() + t.pause_ns
    tube_update(core, t)
    tube_retime(core, t)
    return out_text(c, MSG_PAUSED)


cdef int cmd_stats_job(Core core, Conn c, Cmd *cmd) except -1:
    cdef Job *j = job_find(core, cmd.id)
    if j == NULL:
        return out_text(c, MSG_NOT_FOUND)
    return out_yaml(c, job_yaml(j))


cdef int cmd_stats_tube(Core core, Conn c, Cmd *cmd) except -1:
    cdef Tube *t = tube_get(core, cmd.name, cmd.name_len, False)
    if t == NULL:
        return out_text(c, MSG_NOT_FOUND)
    return out_yaml(c, tube_yaml(t))


# What a reply shows of the state binlog records hold, and so which records
# must be durable before it goes (conn.pxi flush; -f 0 and --replicate
# hold replies until then): its own records (a change it confirms), and the
# last record about what it shows. A reply that shows a tube or a job needs
# only that tube's last record; a flush of another tube holds it up no more.
cdef enum:
    SHOWS_ALL = 0             # anything (stats, list-tubes, kick, the extensions): every record so far
    SHOWS_NOTHING = 1         # nothing records hold (use, watch, a put's INSERTED, errors)
    SHOWS_TUBE = 2            # the tube it names (stats-tube, pause-tube)
    SHOWS_USED = 3            # the used tube (peek-ready, peek-delayed, peek-buried)
    SHOWS_JOB = 4             # the job it names by id, or that it is gone
    SHOWS_WATCHED = 5         # the watched tubes (a reserve answered at once)


cdef int _shows(Conn c, int op) noexcept:
    if (op == OP_PUT or op == OP_USE or op == OP_WATCH or op == OP_IGNORE or op == OP_LIST_TUBE_USED
            or op == OP_LIST_TUBES_WATCHED or op == OP_QUIT or op == OP_SKIPPED
            or op == OP_BAD_FORMAT):
        return SHOWS_NOTHING
    if op == OP_PUT_BODY:
        # a put with a key may answer with the key's job, or its cooldown;
        # a schedule's body, with the schedule it replaces
        return SHOWS_NOTHING if c.put_key is None and c.sched_def is None else SHOWS_ALL
    if op == OP_STATS_TUBE or op == OP_PAUSE_TUBE:
        return SHOWS_TUBE
    if op == OP_PEEK_READY or op == OP_PEEK_DELAYED or op == OP_PEEK_BURIED:
        return SHOWS_USED
    if (op == OP_PEEK or op == OP_STATS_JOB or op == OP_DELETE or op == OP_RELEASE or op == OP_BURY
            or op == OP_TOUCH or op == OP_KICK_JOB or op == OP_RESERVE_JOB):
        return SHOWS_JOB
    if op == OP_RESERVE or op == OP_RESERVE_TIMEOUT:
        return SHOWS_WATCHED
    return SHOWS_ALL


cdef int dispatch(Core core, Conn c, Cmd *cmd) except -1:
    # Run one command, then raise c's need (conn.pxi) to the records its
    # reply confirms or shows.
    cdef uint64_t before = core.wal_seq
    cdef int shows = _shows(c, cmd.op)
    cdef Tube *t
    cdef Job *j
    cdef Py_ssize_t i
    c.exact = shows != SHOWS_ALL
    try:
        _dispatch(core, c, cmd)
    finally:
        c.exact = False
    if core.wal_seq > before:
        conn_need(c, core.wal_seq)      # it confirms records of its own (the latest)
    elif shows == SHOWS_TUBE:
        t = tube_get(core, cmd.name, cmd.name_len, False)
        conn_need(c, t.wal_seq if t != NULL else core.tube_gone_seq)
    elif shows == SHOWS_USED:
        conn_need(c, c.use.wal_seq)
    elif shows == SHOWS_JOB:
        j = job_find(core, cmd.id)
        if j != NULL:
            conn_need(c, j.tube.wal_seq)
        elif cmd.id < core.next_id:
            conn_need(c, core.drop_seq)     # not found: it may have been deleted
    elif shows == SHOWS_WATCHED and c.wait != WAIT_JOB:
        # the job it got is from one of them; TIMED_OUT shows them all empty
        for i in range(c.nwatch):
            conn_need(c, c.watch[i].tube.wal_seq)
    return 0


cdef int _dispatch(Core core, Conn c, Cmd *cmd) except -1:
    cdef int op = cmd.op
    if op <= OP_PAUSE_TUBE:
        core.cmd_ct[op] += 1
    lat_run(c, op)
    if OP_SCHEDULE <= op <= OP_RESUME_SCHEDULE:
        return sched_cmd(core, c, cmd)      # --strict too: a schedule line's body
    if is_extension(op):
        if core.strict:
            if rejected_by_beanstalkd_as_bad_format(op):
                return out_text(c, MSG_BAD_FORMAT)
            return out_text(c, MSG_UNKNOWN_COMMAND)
        if cmd.err != ERR_NONE:
            return out_text(c, err_text(cmd.err))
    if op == OP_PUT:
        return cmd_put(core, c, cmd)
    elif op == OP_PUT_BODY:
        if c.sched_def is not None:
            return sched_body(core, c, cmd)
        return cmd_put_body(core, c, cmd)
    elif op == OP_SKIPPED:
        return out_text(c, err_text(cmd.err))
    elif op == OP_RESERVE or op == OP_RESERVE_TIMEOUT:
        return cmd_reserve(core, c, cmd)
    elif op == OP_DELETE:
        return cmd_delete(core, c, cmd)
    elif op == OP_RELEASE:
        return cmd_release(core, c, cmd)
    elif op == OP_BURY:
        return cmd_bury(core, c, cmd)
    elif op == OP_TOUCH:
        return cmd_touch(core, c, cmd)
    elif op == OP_PEEK or op == OP_PEEK_READY or op == OP_PEEK_DELAYED or op == OP_PEEK_BURIED:
        return cmd_peek(core, c, cmd)
    elif op == OP_RESERVE_JOB:
        return cmd_reserve_job(core, c, cmd)
    elif op == OP_KICK:
        return cmd_kick(core, c, cmd)
    elif op == OP_KICK_JOB:
        return cmd_kick_job(core, c, cmd)
    elif op == OP_USE:
        return cmd_use(core, c, cmd)
    elif op == OP_WATCH:
        return cmd_watch(core, c, cmd)
    elif op == OP_IGNORE:
        return cmd_ignore(core, c, cmd)
    elif op == OP_PAUSE_TUBE:
        return cmd_pause_tube(core, c, cmd)
    elif op == OP_STATS:
        return out_yaml(c, stats_yaml(core))
    elif op == OP_STATS_JOB:
        return cmd_stats_job(core, c, cmd)
    elif op == OP_STATS_TUBE:
        return cmd_stats_tube(core, c, cmd)
    elif op == OP_LIST_TUBES:
        return out_yaml(c, list_tubes_yaml(core))
    elif op == OP_LIST_TUBE_USED:
        return cmd_list_tube_used(core, c)
    elif op == OP_LIST_TUBES_WATCHED:
        return out_yaml(c, list_watched_yaml(c))
    elif op == OP_QUIT:
        c.state = CONN_QUIT
        return 0
    elif op == OP_FLUSH_TUBE or op == OP_FLUSH_BURIED:
        return cmd_flush(core, c, cmd)
    elif op == OP_LIST_TUBE:
        return cmd_list(core, c, cmd)
    elif op == OP_RESERVE_BATCH:
        return cmd_reserve_batch(core, c, cmd)
    elif op == OP_DELETE_BATCH or op == OP_DELETE_EACH:
        return cmd_delete_batch(core, c, cmd)
    elif op == OP_RETRY_LIMIT:
        return cmd_retry_limit(core, c, cmd)
    elif op == OP_MOVE_JOB:
        return cmd_move_job(core, c, cmd)
    elif op == OP_REPRIORITIZE_JOB:
        return cmd_reprioritize_job(core, c, cmd)
    elif op == OP_EXT:
        return out_yaml(c, ext_yaml(core))
    elif op == OP_TEST_RESET or op == OP_TEST_ADVANCE:
        return test_command(core, c, cmd)
    elif op == OP_BAD_FORMAT:
        return out_text(c, MSG_BAD_FORMAT)
    return out_text(c, MSG_UNKNOWN_COMMAND)
