# Queue moves: a job between ready, delayed, buried and reserved, and out
# (deleted), the counters each state keeps, matching ready jobs with waiting
# connections, and the work that comes due on the timer, which it arms
# (beanstalkd's enqueue and prottick).
#
# Offers: URGENT_PRI, KICK_BATCH, job_unlink, job_make_ready, job_make_delayed,
#   job_bury, job_reserve, process_queue, batch_answer, kick_one, job_delete, job_drop,
#   job_retry, job_retry_over, job_move, job_set_pri, queue_tick, next_deadline, rearm.
# Uses: clock, hooks, vec, heap, mem, wal, tube, job, walg, keys, retry, conn.

cdef enum:
    URGENT_PRI = 1024                 # pri below this counts as urgent
    KICK_BATCH = 4096                 # jobs one kick moves per loop turn


cdef int job_unlink(Core core, Job *j) except -1:
    # Take j out of whatever holds it in its current state.
    cdef Tube *t = j.tube
    cdef Conn c
    if j.state == JOB_READY:
        heap_remove(&t.ready, j.heap_index)
        core.ready_ct -= 1
        if j.pri < URGENT_PRI:
            core.urgent_ct -= 1
            t.urgent_ct -= 1
        tube_update(core, t)
    elif j.state == JOB_DELAYED:
        heap_remove(&t.delay, j.heap_index)
        core.delayed_ct -= 1
        tube_retime(core, t)
    elif j.state == JOB_BURIED:
        list_remove(&t.buried, j, LINK_STATE)
        t.buried_ct -= 1
        core.buried_ct -= 1
    elif j.state == JOB_RESERVED:
        c = <Conn>j.owner
        list_remove(&c.reserved, j, LINK_STATE)
        c.nreserved -= 1
        if c.soonest == j:
            c.soonest = NULL
        heap_remove(&core.ttr_heap, j.heap_index)
        j.owner = NULL
        t.reserved_ct -= 1
        core.reserved_ct -= 1
    j.heap_index = -1
    j.state = JOB_INVALID
    return 0


cdef int job_make_ready(Core core, Job *j) except -1:
    cdef Tube *t = j.tube
    j.state = JOB_READY
    heap_insert(&t.ready, j)
    core.ready_ct += 1
    if j.pri < URGENT_PRI:
        core.urgent_ct += 1
        t.urgent_ct += 1
    tube_update(core, t)
    # Serve waiters job by job, as beanstalkd does: with several waiters,
    # which one gets which job depends on it.
    if core.neligible:
        process_queue(core)
    return 0


cdef int job_make_delayed(Core core, Job *j, int64_t deadline) except -1:
    cdef Tube *t = j.tube
    j.state = JOB_DELAYED
    j.deadline = deadline
    heap_insert(&t.delay, j)
    core.delayed_ct += 1
    if j.heap_index == 0:
        tube_retime(core, t)
    return 0


cdef void job_bury(Core core, Job *j) noexcept:
    cdef Tube *t = j.tube
    j.state = JOB_BURIED
    j.bury_ct += 1
    list_push_back(&t.buried, j, LINK_STATE)
    t.buried_ct += 1
    core.buried_ct += 1


cdef int job_reserve(Core core, Conn c, Job *j, int64_t now) except -1:
    j.state = JOB_RESERVED
    j.deadline = now + j.ttr_ns
    j.reserve_ct += 1
    j.owner = <PyObject *>c
    list_push_back(&c.reserved, j, LINK_STATE)
    c.nreserved += 1
    if c.nreserved == 1 or (c.soonest != NULL and j.deadline < c.soonest.deadline):
        c.soonest = j
    heap_insert(&core.ttr_heap, j)
    j.tube.reserved_ct += 1
    core.reserved_ct += 1
    return 0


cdef int process_queue(Core core) except -1:
    # Match ready jobs with waiting connections until no tube has both.
    cdef Py_ssize_t i
    cdef Tube *best
    cdef Tube *t
    cdef Job *j
    cdef Conn c
    cdef int64_t now = 0
    while core.neligible:
        best = core.eligible[0]
        for i in range(1, core.neligible):
            t = core.eligible[i]
            if ready_less(t.ready.items[0], best.ready.items[0]):
                best = t
        j = <Job *>best.ready.items[0]
        job_unlink(core, j)
        c = waiter_take(core, best)
        if now == 0:
            now = mono_ns()
        job_reserve(core, c, j, now)
        if c.batch_count:
            batch_answer(core, c, j, now)
        else:
            out_job(c, MSG_RESERVED, j)
        conn_touched(core, c)
    return 0


cdef Job *_batch_next(Conn c) noexcept:
    # The job a reserve would take now from c's watched tubes, or NULL.
    cdef Py_ssize_t i
    cdef Tube *t
    cdef Job *best = NULL
    for i in range(c.nwatch):
        t = c.watch[i].tube
        if t.ready.len and t.pause_ns == 0 and (
                best == NULL or ready_less(t.ready.items[0], best)):
            best = <Job *>t.ready.items[0]
    return best


cdef int batch_answer(Core core, Conn c, Job *first, int64_t now) except -1:
    # reserve-batch (tuber's): after `first` (NULL: none), up to the count in
    # all reserved one by one as reserve takes them, then RESERVED_BATCH <n>
    # and a RESERVED block per job.
    cdef uint32_t count = c.batch_count
    cdef Job *j
    cdef Py_ssize_t i
    jobs = []
    c.batch_count = 0
    if first != NULL:
        jobs.append(<size_t>first)
    while <uint32_t>len(jobs) < count:
        j = _batch_next(c)
        if j == NULL:
            break
        job_unlink(core, j)
        job_reserve(core, c, j, now)
        jobs.append(<size_t>j)
    core.jobs_batch_reserved += len(jobs)
    out_text(c, MSG_RESERVED_BATCH)
    out_bytes(c, b" %d\r\n" % len(jobs))
    for i in range(len(jobs)):
        out_job(c, MSG_RESERVED, <Job *><size_t>jobs[i])
    return 0


cdef int kick_one(Core core, Job *j) except -1:
    # 1 if kicked; 0 if the binlog had no room, and the job stays put.
    if core.wal_on and not wal_room(core, WAL_SHORT, 0):
        return 0
    job_unlink(core, j)
    j.kick_ct += 1
    if core.wal_on:
        j.state = JOB_READY
        wal_record(core, j, False)
    job_make_ready(core, j)
    return 1


cdef int job_delete(Core core, Job *j) except -1:
    # delete, and fastbean-reset (testing.pxi)
    j.tube.cmd_delete += 1
    return job_drop(core, j)


cdef int job_drop(Core core, Job *j) except -1:
    # Out for good, logged as a delete; stats-tube's cmd-delete counts only
    # delete commands, so flush-tube (flush.pxi) comes here directly.
    job_unlink(core, j)
    if j.flags:
        if j.flags & JOB_KEYED:
            key_release(core, j)        # its cooldown's records go before the delete
        origin_forget(core, j)
    if core.wal_on and j.wal_file:
        # spends the space reserved at put time; cannot fail for room
        wal_record(core, j, False)
        core.drop_seq = core.wal_seq
        core.wal_resv -= WAL_SHORT
        wal_disown(core, j)
    job_free(core, j)
    return 0


cdef int job_retry(Core core, Job *j) except -1:
    # j (unlinked) was released without a delay or timed out: back to ready,
    # unless its tube's retry limit says it has had its attempts. Under a
    # limit, each attempt is logged, so that the counts survive a restart.
    p = retry_policy(core, j.tube)
    if p is not None and retry_applies(core, j, p) and job_retry_over(core, j, p):
        return 0
    job_make_ready(core, j)
    if p is not None and core.wal_on and wal_room(core, WAL_SHORT, 0):
        wal_record(core, j, False)
    return 0


cdef bint job_retry_over(Core core, Job *j, tuple p) except -1:
    # j (unlinked) has reached its tube's retry limit: bury it, or move it,
    # ready, to the dead-letter tube, keeping its id and counts. False when
    # the binlog has no room for that (j is left to the caller).
    cdef bytes dlq = p[1]
    cdef Tube *old
    if dlq is None or dlq == <bytes>j.tube.name:
        if core.wal_on and not wal_room(core, WAL_SHORT, 0):
            return False
        job_bury(core, j)
        if core.wal_on:
            wal_record(core, j, False)
        core.retry_buried += 1
        return True
    # beanstalkd's binlog has no move: the job is deleted and put again
    # under the same id, a delete record then a full one in the new tube
    # (and before it, the origin's record).
    if core.wal_on and not wal_room(
            core, WAL_SHORT + 4 + PyBytes_GET_SIZE(dlq) + sizeof(Jobrec) + j.body_size
            + origin_size(<bytes>j.tube.name), 0):
        return False
    if j.flags & JOB_KEYED:
        # the key was the old tube's: it goes with no cooldown
        k = key_unbind(core, j)
        if k[1] and core.wal_on:
            core.wal_resv -= gone_size(<bytes>j.tube.name, <bytes>k[0])
    if core.wal_on:
        wal_record(core, j, False)      # state JOB_INVALID: the delete record
        wal_disown(core, j)             # its full record's size is the old tube's
    old = j.tube
    origin_set(core, j, <bytes>old.name)
    j.tube = tube_get(core, PyBytes_AS_STRING(dlq), PyBytes_GET_SIZE(dlq), True)
    tube_incref(j.tube)
    tube_decref(core, old)
    j.tube.total_jobs += 1
    if core.wal_on:
        j.state = JOB_READY
        wal_record(core, j, True)
    core.dead_lettered += 1
    job_make_ready(core, j)
    return True


cdef bint job_move(Core core, Job *j, bytes name) except -1:
    # move-job: j (ready, delayed or buried) into tube `name` in the same
    # state, with its id, priority, counts and a delay's time left (a buried
    # job goes to the end of the new tube's buried list). Logged as the
    # dead-letter move is: its delete, then its full record in the new tube.
    # Its key goes with it unless a live job of the new tube has that key
    # (then it is dropped, with no cooldown); a dead letter's origin is
    # forgotten. False when the binlog has no room (nothing is changed).
    cdef uint8_t state = j.state
    cdef Tube *old = j.tube
    cdef Tube *t
    cdef object key = None
    cdef int64_t cool = 0
    cdef Py_ssize_t key_bytes = 0, resv_more = 0
    if j.flags & JOB_KEYED:
        k = <tuple>core.job_keys[j.id]
        tube_keys = core.keys.get(name)
        if tube_keys is None or k[0] not in <dict>tube_keys:
            key, cool = k
            key_bytes = 4 + PyBytes_GET_SIZE(<bytes>key) + sizeof(Jobrec)
            if cool:
                resv_more = gone_size(name, key) - gone_size(<bytes>old.name, key)
    if core.wal_on and not wal_room(
            core, WAL_SHORT + 4 + PyBytes_GET_SIZE(name) + sizeof(Jobrec) + j.body_size + key_bytes,
            resv_more if resv_more > 0 else 0):
        return False
    job_unlink(core, j)
    if j.flags:
        if j.flags & JOB_KEYED:
            k = key_unbind(core, j)
            if k[1] and core.wal_on:
                core.wal_resv -= gone_size(<bytes>old.name, <bytes>k[0])
        origin_forget(core, j)
    if core.wal_on:
        wal_record(core, j, False)      # state JOB_INVALID: the delete record
        wal_disown(core, j)
    t = tube_get(core, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name), True)
    tube_incref(t)
    j.tube = t
    tube_decref(core, old)
    t.total_jobs += 1
    if key is not None:
        key_bind(core, j, key, cool)
        if cool and core.wal_on:
            core.wal_resv += gone_size(name, key)
    j.state = state
    if core.wal_on:
        wal_record(core, j, True)
    if state == JOB_READY:
        job_make_ready(core, j)         # a reserve waiting on t gets it, as after a put
    elif state == JOB_DELAYED:
        job_make_delayed(core, j, j.deadline)
    else:
        list_push_back(&t.buried, j, LINK_STATE)
        t.buried_ct += 1
        core.buried_ct += 1
    return True


cdef bint job_set_pri(Core core, Job *j, uint32_t pri) except -1:
    # j's priority is pri now, in any state: a ready job takes its new place
    # in the reserve order; logged as a short record of the job (beanstalkd
    # copies it over its job). False when the binlog has no room.
    if pri == j.pri:
        return True
    if core.wal_on and not wal_room(core, WAL_SHORT, 0):
        return False
    if j.state == JOB_READY:
        job_unlink(core, j)
        j.pri = pri
        j.state = JOB_READY
        if core.wal_on:
            wal_record(core, j, False)
        job_make_ready(core, j)
    else:
        j.pri = pri
        if core.wal_on:
            wal_record(core, j, False)
    return True


cdef Py_ssize_t queue_tick(Core core, int64_t now, Py_ssize_t budget) except -1:
    # Do what is due at `now`: delays end, pauses end, TTRs run out, reserve
    # timeouts and DEADLINE_SOON margins arrive. At most `budget` jobs or
    # connections; returns how many were handled.
    cdef Tube *t
    cdef Job *j
    cdef ConnTimer *ct
    cdef Conn c
    cdef Py_ssize_t done = 0
    while core.tube_timers.len and done < budget:
        t = <Tube *>core.tube_timers.items[0]
        if t.timer_at > now:
            break
        while t.delay.len and done < budget:
            j = <Job *>t.delay.items[0]
            if j.deadline > now:
                break
            job_unlink(core, j)
            job_make_ready(core, j)
            done += 1
        if t.pause_ns and t.unpause_at <= now:
            t.pause_ns = 0
            tube_update(core, t)
            if core.neligible:
                process_queue(core)
        tube_retime(core, t)
    while core.ttr_heap.len and done < budget:
        j = <Job *>core.ttr_heap.items[0]
        if j.deadline > now:
            break
        c = <Conn>j.owner
        job_unlink(core, j)
        j.timeout_ct += 1
        core.job_timeouts += 1
        job_retry(core, j)
        if c.wait == WAIT_JOB:
            conn_retime(core, c, now)
        done += 1
    while core.conn_timers.len and done < budget:
        ct = <ConnTimer *>core.conn_timers.items[0]
        if ct.at > now:
            break
        c = <Conn>ct.conn
        heap_remove(&core.conn_timers, 0)
        done += 1
        if c.wait != WAIT_JOB:
            continue
        if deadline_soon(c, now):
            waiting_remove(core, c)
            c.batch_count = 0
            out_text(c, MSG_DEADLINE_SOON)
            conn_touched(core, c)
        elif c.timeout_at >= 0 and now >= c.timeout_at:
            waiting_remove(core, c)
            if c.batch_count:
                batch_answer(core, c, NULL, now)    # RESERVED_BATCH 0, never TIMED_OUT
            else:
                out_text(c, MSG_TIMED_OUT)
            conn_touched(core, c)
        else:
            conn_retime(core, c, now)
    return done


cdef int64_t next_deadline(Core core) noexcept:
    # mono ns of the soonest timer (0: now, to trim memory), INT64_MAX if none
    cdef int64_t at = core.idle_at
    cdef int64_t x
    if core.trim_due:
        return 0
    if core.tube_timers.len:
        at = (<Tube *>core.tube_timers.items[0]).timer_at
    if core.ttr_heap.len:
        x = (<Job *>core.ttr_heap.items[0]).deadline
        if x < at:
            at = x
    if core.conn_timers.len:
        x = (<ConnTimer *>core.conn_timers.items[0]).at
        if x < at:
            at = x
    if core.sched_at < at:
        at = core.sched_at            # sched.pxi
    return at


cdef int rearm(Core core) except -1:
    # Ask the Python layer for an earlier wake-up if something new is due
    # before the one already armed.
    cdef int64_t at
    cdef int64_t now
    mem_idle_arm(core)
    at = next_deadline(core)
    if at < core.armed_at:
        core.armed_at = at
        if core.arm is not None:
            now = mono_ns()
            hook1(core, core.arm, 0.0 if at <= now else (at - now) / 1e9)
    return 0
