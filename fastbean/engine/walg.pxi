# The binlog as the engine keeps it: records appended for binlog.py to
# write, the space of the current file (it always keeps room for a delete
# record of every live job, so a full disk refuses puts but never deletes),
# moving on to the spare file binlog.py keeps ready when the current one is
# full, and which file holds each job's latest full record (a file goes once
# it and every older one hold none; migration moves the stragglers forward).
#
# Offers: wal_marker, wal_record, wal_room, wal_switch, wal_links_on,
#   wal_take, wal_own, wal_disown, wal_file_add, wal_collect, wal_migrate, ext_put,
#   ext_append, ext_own, ext_disown.
# Uses: clock, hooks, vec, wal, job.


cdef int wal_begin(Core core, Py_ssize_t n) except -1:
    # A record of n bytes follows: with a piece limit, one that would not fit
    # in the current piece starts the next one (take_wal keeps them apart).
    cdef Py_ssize_t have = PyByteArray_GET_SIZE(core.wba)
    if core.wal_piece and have and have + n > core.wal_piece:
        core.wsegs.append((core.wfiles[core.nwfiles - 1].seq, core.wba))
        core.wba = bytearray()
    return 0


cdef int wal_put(Core core, const char *p, Py_ssize_t n) except -1:
    cdef Py_ssize_t have = PyByteArray_GET_SIZE(core.wba)
    PyByteArray_Resize(core.wba, have + n)
    memcpy(PyByteArray_AS_STRING(core.wba) + have, p, n)
    core.wal_used += n
    if not core.commit_asked:
        core.commit_asked = True
        if core.commit_soon is not None:
            hook0(core, core.commit_soon)
    return 0


cdef int wal_marker(Core core) except -1:
    # The first record of a new file: the highest id handed out, unless a
    # live job has it (its own records keep it).
    cdef Jobrec rec
    cdef int32_t namelen = 0
    cdef uint64_t max_id = core.next_id - 1
    if max_id == 0 or job_find(core, max_id) != NULL:
        return 0
    rec_fill_marker(&rec, max_id, wall_ns())
    wal_begin(core, WAL_SHORT)
    wal_put(core, <char *>&namelen, 4)
    return wal_put(core, <char *>&rec, sizeof(Jobrec))


cdef inline Py_ssize_t wal_key_size(Core core, Job *j) noexcept:
    # The bytes of the extension records before each full record of j: a
    # keyed job's EXT_KEY, a dead letter's EXT_ORIGIN.
    cdef Py_ssize_t n = 0
    if not j.flags:
        return 0
    if j.flags & JOB_KEYED:
        n += 4 + PyBytes_GET_SIZE(<bytes>(<tuple>core.job_keys[j.id])[0]) + sizeof(Jobrec)
    if j.flags & JOB_ORIGIN:
        n += 4 + PyBytes_GET_SIZE(<bytes>core.origins[j.id]) + sizeof(Jobrec)
    return n


cdef int wal_record(Core core, Job *j, bint full, bytes pre=None) except -1:
    # Append j's record: full (put, migration) or short (every update).
    # The caller has made sure the current file has room (wal_room) for it,
    # and for a keyed job's key record and a dead letter's origin record
    # (wal_key_size), which go first, or the records `pre` to go right
    # before those (a schedule's EXT_FIRE).
    cdef Jobrec rec
    cdef int32_t namelen = 0
    cdef bytes name
    cdef bytes key
    rec_fill(j, &rec, mono_ns(), wall_ns())
    if full:
        name = <bytes>j.tube.name
        namelen = <int32_t>PyBytes_GET_SIZE(name)
        if j.flags:
            key = b""
            if j.flags & JOB_ORIGIN:
                key = ext_rec(EXT_ORIGIN, <bytes>core.origins[j.id], <int64_t>j.id, 0, 0, 0)
            if j.flags & JOB_KEYED:
                k = <tuple>core.job_keys[j.id]
                key += ext_rec(EXT_KEY, <bytes>k[0], <int64_t>j.id, <int64_t>k[1], 0, 0)
            pre = key if pre is None else pre + key
        if pre is not None:
            wal_begin(core, PyBytes_GET_SIZE(pre) + wal_full_size(j))
            wal_put(core, PyBytes_AS_STRING(pre), PyBytes_GET_SIZE(pre))
        else:
            wal_begin(core, wal_full_size(j))
        wal_put(core, <char *>&namelen, 4)
        wal_put(core, PyBytes_AS_STRING(name), namelen)
        wal_put(core, <char *>&rec, sizeof(Jobrec))
        wal_put(core, j.body, rec.body_size)
        wal_disown(core, j)
        wal_own(core, j)
    else:
        wal_begin(core, WAL_SHORT)
        wal_put(core, <char *>&namelen, 4)
        wal_put(core, <char *>&rec, sizeof(Jobrec))
    core.wal_written += 1
    core.wal_seq += 1
    j.tube.wal_seq = core.wal_seq
    return 0


cdef bint wal_room(Core core, int64_t now_bytes, int64_t extra_resv) except -1:
    # Room in the current file for now_bytes more, while still keeping
    # every live job's delete record (wal_resv) plus extra_resv. When the
    # current file is full, the records go on in the spare file. False when
    # there is no room anywhere (the caller answers with an error).
    cdef int64_t need = now_bytes + extra_resv + core.wal_resv
    if core.wal_cap - core.wal_used >= need:
        return True
    if core.spare_cap - core.spare_used - WAL_SHORT < need and not _spare_now(core, need):
        return False
    _switch_to_spare(core)
    return core.wal_cap - core.wal_used >= need


cdef bint _spare_now(Core core, int64_t need) except -1:
    # No spare, or one too small for this record: binlog.py makes a file
    # right away (it only creates and allocates it; it calls nothing here).
    # Only a loop turn that fills more than a whole file, or a record bigger
    # than one, gets here.
    cdef object made
    if core.next_file is None:
        return False
    made = hook2(core, core.next_file, need + WAL_SHORT, core.spare_seq)
    core.spare_seq = core.spare_cap = core.spare_used = 0
    if made is None:
        return False
    core.spare_seq, core.spare_cap, core.spare_used = made
    return core.spare_cap - core.spare_used - WAL_SHORT >= need


cdef int _switch_to_spare(Core core) except -1:
    # The current file is full: the spare is the current file from here on.
    wal_switch(core, core.spare_seq, core.spare_cap, core.spare_used)
    core.spare_seq = core.spare_cap = core.spare_used = 0
    return 0


cdef int wal_switch(Core core, int64_t seq, int64_t cap, int64_t used) except -1:
    # The records so far go to binlog.py as the current file's segment, and
    # binlog.<seq> is the current file from here on, its first record the marker.
    wal_need_file(core)
    core.wsegs.append((core.wfiles[core.nwfiles - 1].seq, core.wba))
    core.wba = bytearray()
    wal_file_add(core, seq, cap, used)
    return wal_marker(core)


cdef int wal_need_file(Core core) except -1:
    # An engine that never logged (a standby's, or one just replaced) has no
    # current file: asking it for records is a caller's bug, not a crash.
    if core.nwfiles == 0 or not core.wal_on:
        raise RuntimeError("this engine does not log: wal_start() was never called")
    return 0


cdef int wal_links_on(Core core) except -1:
    # The first binlog call (replay or the start of logging): from now on
    # jobs carry their binlog link. One made before it has none, and no
    # binlog file could ever own it, so that order is refused.
    if not core.wal_links:
        if core.jobs.count:
            raise RuntimeError("the binlog must start before the first job is made")
        core.wal_links = True
    return 0


cdef tuple wal_take(Core core):
    # What binlog.py writes next: [(file number, records), ...] in order
    # (more than one after a move to the spare or past a piece limit), and
    # the last record's number.
    wal_need_file(core)
    segs = core.wsegs
    segs.append((core.wfiles[core.nwfiles - 1].seq, core.wba))
    core.wsegs = []
    core.wba = bytearray()
    core.commit_asked = False
    return segs, core.wal_seq


cdef void wal_own(Core core, Job *j) noexcept:
    # j's latest full record is now in the current file.
    cdef WalFile *f = &core.wfiles[core.nwfiles - 1]
    j.wal_file = f.seq
    list_push_front(&f.jobs, j, LINK_WAL)
    f.njobs += 1
    core.wal_live += wal_full_size(j)


cdef void wal_disown(Core core, Job *j) noexcept:
    cdef WalFile *f
    if j.wal_file == 0:
        return
    f = &core.wfiles[j.wal_file - core.wfiles[0].seq]
    list_remove(&f.jobs, j, LINK_WAL)
    f.njobs -= 1
    core.wal_live -= wal_full_size(j)
    j.wal_file = 0


cdef int wal_file_add(Core core, int64_t seq, int64_t cap, int64_t used) except -1:
    # binlog.<seq> is the current file now: cap bytes allocated, used written.
    cdef WalFile *f
    if vec_grow(<void **>&core.wfiles, &core.capwfiles, core.nwfiles + 1, sizeof(WalFile)) < 0:
        raise MemoryError()
    f = &core.wfiles[core.nwfiles]
    f.seq = seq
    f.njobs = 0
    f.nitems = 0
    f.jobs.head = f.jobs.tail = NULL
    core.nwfiles += 1
    core.wal_cap = cap
    core.wal_used = used
    return 0


cdef list wal_collect(Core core):
    # Forget the oldest files no live job needs; their numbers.
    gone = []
    while core.nwfiles > 1 and core.wfiles[0].njobs == 0 and core.wfiles[0].nitems == 0:
        gone.append(core.wfiles[0].seq)
        memmove(core.wfiles, core.wfiles + 1, (core.nwfiles - 1) * sizeof(WalFile))
        core.nwfiles -= 1
    return gone


cdef Py_ssize_t wal_migrate(Core core, Py_ssize_t limit) except -1:
    # Re-log up to `limit` jobs of the oldest file into the current one.
    cdef Py_ssize_t n = 0
    cdef Job *j
    while n < limit and core.nwfiles > 1 and core.wfiles[0].jobs.head != NULL:
        j = core.wfiles[0].jobs.head
        if not wal_room(core, wal_full_size(j) + wal_key_size(core, j), 0):
            break
        wal_record(core, j, True)
        core.wal_migrated += 1
        n += 1
    if n < limit and core.nwfiles > 1 and core.wfiles[0].nitems:
        n += _ext_migrate(core, core.wfiles[0].seq, limit - n)
    return n


# The extensions' state that belongs to no job (keys cooling down after
# their job's delete, retry limits) is written as extension records
# (wal.pxi) whenever it changes. Its latest records keep their file, as a
# job's latest full record does, and migration re-writes them forward.

cdef int ext_put(Core core, object what, bytes recs) except -1:
    # Append the records of `what` (a key of core.ext_items; the caller has
    # checked the room): the current file holds them from here on, and
    # those of it before are dead.
    wal_begin(core, PyBytes_GET_SIZE(recs))
    wal_put(core, PyBytes_AS_STRING(recs), PyBytes_GET_SIZE(recs))
    core.wal_written += 1
    core.wal_seq += 1
    ext_own(core, what, recs)
    return 0


cdef int ext_append(Core core, bytes recs) except -1:
    # Append records no state keeps (a removal: the state it ends is
    # disowned, so the older files that held it go before this one does).
    wal_begin(core, PyBytes_GET_SIZE(recs))
    wal_put(core, PyBytes_AS_STRING(recs), PyBytes_GET_SIZE(recs))
    core.wal_written += 1
    core.wal_seq += 1
    return 0


cdef int ext_own(Core core, object what, bytes recs) except -1:
    # The current file holds the latest records of `what` (also for replay).
    cdef WalFile *f = &core.wfiles[core.nwfiles - 1]
    ext_disown(core, what)
    f.nitems += 1
    core.wal_live += PyBytes_GET_SIZE(recs)
    core.ext_items[what] = (f.seq, recs)
    return 0


cdef int ext_disown(Core core, object what) except -1:
    # `what` needs no records any more (or is about to get newer ones).
    cdef WalFile *f
    old = core.ext_items.pop(what, None)
    if old is None:
        return 0
    f = &core.wfiles[<int64_t>old[0] - core.wfiles[0].seq]
    f.nitems -= 1
    core.wal_live -= PyBytes_GET_SIZE(<bytes>old[1])
    return 0


cdef Py_ssize_t _ext_migrate(Core core, int64_t seq, Py_ssize_t limit) except -1:
    # Re-write up to `limit` pieces of state whose records are in file seq,
    # dropping the cooldowns that have ended instead.
    cdef Py_ssize_t n = 0
    cdef int64_t now = wall_ns()
    for what, (at, recs) in list(core.ext_items.items()):
        if n >= limit:
            break
        if at != seq:
            continue
        if what[0] == "key" and (<tuple>core.gone[what[1:]])[1] <= now:
            del core.gone[what[1:]]
            ext_disown(core, what)
        elif wal_room(core, PyBytes_GET_SIZE(recs), 0):
            ext_put(core, what, recs)
            core.wal_migrated += 1
        else:
            break
        n += 1
    return n
