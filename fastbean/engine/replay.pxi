# Replay: binlog records applied to an engine before it serves (the files
# at start-up, a standby's parts as they come), then every job put where its
# last record says (wal_replay_finish).
#
# Offers: wal_replay, wal_replay_finish.
# Uses: clock, vec, mem, wal, tube, job, walg, keys, retry, queue, sched.


cdef tuple wal_replay(Core core, object data, int64_t seq):
    # Apply the records of binlog.<seq>: (records applied, where they end,
    # reason or None). A zero-filled tail is unused preallocation, not loss.
    # A replicated part comes in several calls: they add to one file.
    cdef const char *p
    cdef Py_ssize_t n, pos, k
    cdef Py_ssize_t size = 0
    cdef int32_t namelen = 0
    cdef Jobrec rec
    cdef Py_ssize_t count = 0
    cdef const char *name = NULL
    cdef const char *body = NULL
    cdef int signed = -1
    if not isinstance(data, bytes):
        data = bytes(data)
    p = PyBytes_AS_STRING(data)
    n = PyBytes_GET_SIZE(data)
    if core.nwfiles == 0 or core.wfiles[core.nwfiles - 1].seq != seq:
        wal_file_add(core, seq, 0, 0)
    reason = header_check(p, n)
    if reason is not None or n < WAL_HEADER:
        return (0, 0, reason)
    pos = WAL_HEADER
    while pos + 4 <= n:
        reason = rec_read(p, n, pos, &signed, &rec, &name, &namelen, &body, &size)
        if reason is not None or size == 0:
            break
        reason = _replay_apply(core, &rec, name, namelen, body)
        if reason is not None:
            break
        count += 1
        pos += size
    if reason is None:
        # whatever follows the last record must be preallocated zeros
        for k in range(pos, n):
            if p[k] != 0:
                reason = "garbage after the last record"
                break
    return (count, pos, reason)


cdef object _replay_ext(Core core, Jobrec *rec, const char *name, int32_t namelen):
    # An extension record (wal.pxi): the state it carries, kept in the file
    # being replayed as when it was written.
    cdef uint32_t kind = rec.pri
    nm = PyBytes_FromStringAndSize(name, namelen)
    if kind == EXT_TUBE:
        if not name_ok(name, namelen):
            return "bad tube name in an extension record"
        core.replay_tube = nm
    elif kind == EXT_KEY:
        if key_parse(PyBytes_AS_STRING(b" idp:" + nm), namelen + 5) is None:
            return "bad key in an extension record"
        core.replay_key = (<uint64_t>rec.delay, nm, rec.deadline_at)
    elif kind == EXT_ORIGIN:
        if not name_ok(name, namelen):
            return "bad tube name in an extension record"
        core.replay_origin = (<uint64_t>rec.delay, nm)
    elif kind == EXT_GONE or kind == EXT_POLICY:
        if core.replay_tube is None:
            return "extension record without its tube"
        if kind == EXT_GONE:
            if key_parse(PyBytes_AS_STRING(b" idp:" + nm), namelen + 5) is None:
                return "bad key in an extension record"
            if rec.deadline_at > wall_ns():
                gone_set(core, core.replay_tube, nm, <uint64_t>rec.delay, rec.deadline_at, False)
        else:
            if namelen and not name_ok(name, namelen):
                return "bad tube name in an extension record"
            policy_set(core, core.replay_tube, rec.reserve_ct, nm if namelen else None,
                       rec.kick_ct == 1, False)
        core.replay_tube = None
    elif EXT_SPEC <= kind <= EXT_LAST:
        return sched_replay_ext(core, kind, rec, nm)
    else:
        return "unknown extension record %d" % kind
    return None


cdef object _replay_apply(Core core, Jobrec *rec, const char *name, int32_t namelen,
                          const char *body):
    cdef Job *j
    cdef Tube *t
    if rec.id == EXT_ID:
        return _replay_ext(core, rec, name, namelen)
    fire = core.replay_fire             # an EXT_FIRE counts only if this is its job's full record
    core.replay_fire = None
    j = job_find(core, rec.id)
    if rec.id > core.replay_max_id:
        core.replay_max_id = rec.id
    if j == NULL:
        if namelen == 0 or rec.state == JOB_INVALID:
            return None             # its full record was in a file already gone
        t = tube_get(core, name, namelen, True)
        j = job_alloc(core, rec.body_size)
        memcpy(j.body, body, rec.body_size)
        job_init(core, j, rec.id, rec.pri, rec.delay, rec.ttr, t)
        mem_charge(core, rec.body_size + JOB_OVERHEAD)
        list_push_back(&core.replayed, j, LINK_STATE)
    elif rec.state == JOB_INVALID:
        list_remove(&core.replayed, j, LINK_STATE)
        if j.flags & JOB_KEYED:
            key_unbind(core, j)         # its cooldown, if any, came just before
        origin_forget(core, j)
        wal_disown(core, j)
        job_free(core, j)
        return None
    elif namelen:
        if j.body_size != rec.body_size:
            return "job %d changed size" % rec.id
        memcpy(j.body, body, rec.body_size)
    j.pri = rec.pri
    j.delay_ns = rec.delay
    j.ttr_ns = rec.ttr
    j.created_wall = rec.created_at
    j.deadline = rec.deadline_at          # wall ns until replay_finish
    j.reserve_ct = rec.reserve_ct
    j.timeout_ct = rec.timeout_ct
    j.release_ct = rec.release_ct
    j.bury_ct = rec.bury_ct
    j.kick_ct = rec.kick_ct
    j.state = rec.state
    if namelen:
        wal_disown(core, j)
        wal_own(core, j)
        if core.replay_key is not None:
            if (<tuple>core.replay_key)[0] == j.id:
                if j.flags & JOB_KEYED:
                    key_unbind(core, j)
                key_bind(core, j, (<tuple>core.replay_key)[1], (<tuple>core.replay_key)[2])
            core.replay_key = None
        # a dead letter's full records each come after its origin's; one
        # without it was moved by move-job
        if core.replay_origin is not None and (<tuple>core.replay_origin)[0] == j.id:
            origin_set(core, j, (<tuple>core.replay_origin)[1])
        else:
            origin_forget(core, j)
        core.replay_origin = None
        if fire is not None and (<tuple>fire)[0] == j.id:
            sched_replay_fired(core, (<tuple>fire)[1], (<tuple>fire)[2], (<tuple>fire)[3], (<tuple>fire)[4])
    return None


cdef Py_ssize_t wal_replay_finish(Core core) except -1:
    # Put the replayed jobs where their states say, in order of first
    # appearance; reserved ones come back ready.
    cdef int64_t mono = mono_ns()
    cdef int64_t wall = wall_ns()
    cdef Job *j
    cdef Py_ssize_t count = 0
    cdef uint8_t state
    while core.replayed.head != NULL:
        j = core.replayed.head
        list_remove(&core.replayed, j, LINK_STATE)
        state = j.state
        j.state = JOB_INVALID
        if state == JOB_DELAYED and j.deadline > wall:
            job_make_delayed(core, j, j.deadline - wall + mono)
        elif state == JOB_BURIED:
            job_bury(core, j)
            j.bury_ct -= 1              # a restart is not a bury
        else:
            job_make_ready(core, j)
        count += 1
    core.wal_resv = WAL_SHORT * core.jobs.count
    for id, k in core.job_keys.items():
        if (<tuple>k)[1]:               # room for its cooldown's records
            core.wal_resv += gone_size(<bytes>job_find(core, id).tube.name, <bytes>(<tuple>k)[0])
    core.replay_tube = core.replay_key = core.replay_origin = None
    sched_replay_finish(core)
    if core.replay_max_id >= core.next_id:
        core.next_id = core.replay_max_id + 1
    return count
