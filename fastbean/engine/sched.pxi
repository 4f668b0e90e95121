# Schedules: recurring jobs the engine puts by itself, each occurrence of a
# schedule one ordinary job in its tube (docs/protocol-extensions.md,
# "Schedules"). The times are fastbean.cron's: a cron expression with an
# optional zone, or a fixed interval, on the wall clock.
#
# A definition is extension state, ("sched", name): EXT_TUBE, EXT_SPEC, its
# EXT_BODY pieces and EXT_SCHED, kept in a file as the other state is
# (ext_put). Each occurrence fired is an EXT_FIRE record right before the
# job's full record, in the same piece, and replay applies it only when
# that record follows: a torn tail loses both or neither, so an occurrence
# is fired once or, if lost, fired again on restart. The last one fired is
# extension state too, ("fired", name), written forward as EXT_LAST. Each
# definition has a number (gen): records of a replaced one are ignored.
#
# Firing happens on the engine's timer (sched_tick): every occurrence due
# while the server serves, in order; those that fell while no node served
# (found after replay) fire once (misfire "fire") or not at all ("skip").
#
# Python: Sched.
# Offers: sched_due, sched_cmd, sched_body, sched_tick, sched_replay_ext,
#   sched_replay_fired, sched_replay_finish, sched_reset, sched_info.
# Uses: clock, hooks, mem, wal, tube, job, walg, conn, queue.

from fastbean.cron import parse as cron_parse, SpecError

cdef enum:
    SCHED_SKIP = 1                # EXT_SCHED kick_ct: misfire policy "skip"
    SCHED_PAUSED = 2              # EXT_SCHED kick_ct: paused

# The timer looks at the wall clock at least this often while a schedule
# waits (the wall clock may be set meanwhile); a firing refused for memory or
# disk space is tried again after SCHED_RETRY.
cdef int64_t SCHED_RECHECK = 30 * SEC
cdef int64_t SCHED_RETRY = SEC
# An occurrence this far behind the timer was not missed by a busy loop (the
# timer looks every SCHED_RECHECK at most) but by a wall clock set forward
# or a process stopped: it is treated as an outage, by the misfire policy.
cdef int64_t SCHED_STALL = 120 * SEC
cdef int64_t NEVER = INT64_MAX


@cython.final
@cython.auto_pickle(False)
cdef class Sched:
    """One schedule, as list-schedules shows it."""
    cdef readonly bytes name, tube, spec, body     # body with its CRLF
    cdef readonly uint32_t pri, ttr, gen
    cdef readonly bint skip, paused
    cdef readonly int64_t since       # wall ns it was defined, or last resumed
    cdef readonly int64_t last        # wall ns of the last occurrence fired; 0: none
    cdef readonly uint64_t fires      # occurrences fired
    cdef readonly uint64_t runs       # extra jobs of fire-schedule
    cdef readonly int64_t next_at     # wall ns of the next occurrence; -1: to work out after replay; NEVER
    cdef int64_t retry_at             # wall ns before which a refused firing is not tried again
    cdef object cron                  # its fastbean.cron.Spec

    @property
    def zone(self):
        return self.cron.zone


cdef object _words(bytes words):
    # (name, pri, ttr, skip, spec, Spec) of schedule's words, or None: BAD_FORMAT
    parts = words.split(b" ", 5)
    if len(parts) != 6:
        return None
    name, pri, ttr, misfire, size, spec = parts
    if not name_ok(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)):
        return None
    for n in (pri, ttr):
        if not n.isdigit() or len(n) > 10 or int(n) > 4294967295:
            return None
    if misfire != b"fire" and misfire != b"skip":
        return None
    try:
        cs = cron_parse(spec)
    except SpecError:
        return None
    return (name, int(pri), int(ttr), misfire == b"skip", spec, cs)


cdef Sched _new(bytes name, bytes tube, uint32_t pri, uint32_t ttr, bint skip, bytes spec,
                object cs, bytes body, uint32_t gen, int64_t since):
    cdef Sched s = Sched.__new__(Sched)
    s.name, s.tube, s.spec, s.body, s.cron = name, tube, spec, body, cs
    s.pri, s.ttr, s.skip, s.gen, s.since = pri, ttr, skip, gen, since
    s.next_at = -1
    return s


cdef bytes _recs(Sched s):
    # the records of s's definition
    cdef Py_ssize_t i
    cdef bytes b = s.body[:-2]
    recs = [ext_rec(EXT_TUBE, s.tube, 0, 0, 0, 0), ext_rec(EXT_SPEC, s.spec, 0, 0, 0, 0)]
    for i in range(0, PyBytes_GET_SIZE(b), NAME_MAX):
        recs.append(ext_rec(EXT_BODY, b[i:i + NAME_MAX], 0, 0, 0, 0))
    recs.append(ext_rec(EXT_SCHED, s.name, s.since, 0, s.gen,
                        (SCHED_SKIP if s.skip else 0) | (SCHED_PAUSED if s.paused else 0),
                        s.pri, s.ttr, <uint32_t>PyBytes_GET_SIZE(b)))
    return b"".join(recs)


cdef inline bytes _last_rec(Sched s):
    return ext_rec(EXT_LAST, s.name, 0, s.last, s.gen, 0, <uint32_t>(s.fires & 0xffffffff))


cdef int64_t _next(Sched s, int64_t after):
    n = s.cron.next_after(after, s.since)
    return NEVER if n is None else <int64_t>n


cdef int sched_due(Core core) except -1:
    # the schedules changed: the timer works out the next occurrence at once
    core.sched_at = mono_ns()
    rearm(core)
    return 0


# -- commands ---------------------------------------------------------------------------

cdef int sched_cmd(Core core, Conn c, Cmd *cmd) except -1:
    # Every schedule command. schedule's line: take its body (sched_body)
    # or swallow it with an error.
    cdef int op = cmd.op
    cdef Sched s
    cdef uint64_t jid
    if core.strict:
        if op == OP_SCHEDULE and not cmd.garbage:
            c.parser.no_body()          # beanstalkd reads the body as a command
        return out_text(c, MSG_UNKNOWN_COMMAND)
    if op == OP_SCHEDULE:
        if cmd.garbage:
            return out_text(c, MSG_BAD_FORMAT)
        if cmd.nbytes > <uint64_t>core.max_job_size:
            c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_JOB_TOO_BIG)
            return 0
        d = None if cmd.err != ERR_NONE else _words(PyBytes_FromStringAndSize(cmd.name, cmd.name_len))
        if d is None:
            c.parser.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_BAD_FORMAT)
            return 0
        body = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>cmd.nbytes + 2)
        c.parser.accept_body(PyBytes_AS_STRING(body), <Py_ssize_t>cmd.nbytes + 2)
        c.sched_def = d + (body,)
        return 0
    if cmd.err != ERR_NONE:
        return out_text(c, err_text(cmd.err))
    if op == OP_LIST_SCHEDULES:
        return out_yaml(c, _list_yaml(core))
    name = PyBytes_FromStringAndSize(cmd.name, cmd.name_len)
    s = core.schedules.get(name)
    if s is None:
        return out_text(c, MSG_NOT_FOUND)
    if op == OP_UNSCHEDULE:
        rec = ext_rec(EXT_UNSCHED, name, 0, 0, s.gen, 0)
        if core.wal_on and not wal_room(core, PyBytes_GET_SIZE(rec), 0):
            return out_text(c, MSG_OUT_OF_MEMORY)
        del core.schedules[name]
        if core.wal_on:
            ext_append(core, rec)
            ext_disown(core, ("sched", name))
            ext_disown(core, ("fired", name))
        sched_due(core)
        return out_text(c, MSG_UNSCHEDULED)
    if op == OP_FIRE_SCHEDULE:
        if core.drain_mode:
            return out_text(c, MSG_DRAINING)
        jid = _fire(core, s, wall_ns(), True)
        if jid == 0:
            return out_text(c, MSG_OUT_OF_MEMORY)
        return out_u64(c, MSG_FIRED, jid)
    # pause-schedule, resume-schedule
    if s.paused == (op == OP_PAUSE_SCHEDULE):
        return out_text(c, MSG_PAUSED if s.paused else MSG_RESUMED)
    s.paused = not s.paused
    old_since = s.since
    if not s.paused:
        s.since = wall_ns()             # what fell while paused does not fire
    recs = _recs(s)
    if core.wal_on and not wal_room(core, PyBytes_GET_SIZE(recs), 0):
        s.paused = not s.paused
        s.since = old_since
        return out_text(c, MSG_OUT_OF_MEMORY)
    if core.wal_on:
        ext_put(core, ("sched", name), recs)
    s.next_at = NEVER if s.paused else _next(s, s.since)
    sched_due(core)
    return out_text(c, MSG_PAUSED if s.paused else MSG_RESUMED)


cdef int sched_body(Core core, Conn c, Cmd *cmd) except -1:
    # A schedule's body has come: define it, or replace the one of that name.
    cdef Sched s, old
    d = c.sched_def
    c.sched_def = None
    if cmd.err != ERR_NONE:
        return out_text(c, err_text(cmd.err))
    name, pri, ttr, skip, spec, cs, body = d
    tube = <bytes>c.use.name
    old = core.schedules.get(name)
    if (old is not None and old.tube == tube and old.spec == spec and old.pri == pri
            and old.ttr == ttr and old.skip == skip and old.body == body):
        return out_text(c, MSG_REPLACED)     # the same definition: nothing changes
    s = _new(name, tube, pri, ttr, skip, spec, cs, body, core.sched_gen + 1, wall_ns())
    recs = _recs(s)
    if core.wal_on and not wal_room(core, PyBytes_GET_SIZE(recs), 0):
        return out_text(c, MSG_OUT_OF_MEMORY)
    core.sched_gen = s.gen
    core.schedules[name] = s
    if core.wal_on:
        ext_disown(core, ("fired", name))   # the replaced one's
        ext_put(core, ("sched", name), recs)
    s.next_at = _next(s, s.since)
    sched_due(core)
    return out_text(c, MSG_SCHEDULED if old is None else MSG_REPLACED)


cdef bytes _list_yaml(Core core):
    cdef Sched s
    if not core.schedules:
        return b"--- []\n"
    lines = [b"---\n"]
    for s in sorted(core.schedules.values(), key=lambda x: x.name):
        nxt = 0 if s.paused or s.next_at < 0 or s.next_at == NEVER else s.next_at // SEC
        lines.append(
            b"- name: %s\n  tube: %s\n  spec: \"%s\"\n  zone: %s\n  pri: %d\n  ttr: %d\n"
            b"  misfire: %s\n  paused: %s\n  next: %d\n  last: %d\n  fires: %d\n"
            b"  runs: %d\n  body-bytes: %d\n" % (
                s.name, s.tube, s.spec, (s.cron.zone or "-").encode(), s.pri, s.ttr,
                b"skip" if s.skip else b"fire", b"true" if s.paused else b"false",
                nxt, s.last // SEC, s.fires, s.runs, PyBytes_GET_SIZE(s.body) - 2))
    return b"".join(lines)


cdef list sched_info(Core core):
    # every schedule as a dict, for the console, metrics and tests
    cdef Sched s
    return [dict(name=s.name, tube=s.tube, spec=s.spec, zone=s.cron.zone, pri=s.pri, ttr=s.ttr,
                 misfire="skip" if s.skip else "fire", paused=s.paused,
                 next=None if s.paused or s.next_at < 0 or s.next_at == NEVER else s.next_at,
                 last=s.last or None, fires=s.fires, runs=s.runs, body=s.body[:-2], gen=s.gen)
            for s in sorted(core.schedules.values(), key=lambda x: x.name)]


# -- firing -------------------------------------------------------------------------------

cdef uint64_t _fire(Core core, Sched s, int64_t occ, bint manual) except? 0:
    # One job of s, for occurrence occ (wall ns), or fire-schedule's extra
    # one (manual): its id, or 0 when memory or disk space refuse it.
    cdef Py_ssize_t bsize = PyBytes_GET_SIZE(s.body)
    cdef Py_ssize_t cost = bsize + JOB_OVERHEAD
    cdef Py_ssize_t pre_size = 0
    cdef bytes pre = None
    cdef uint64_t id
    cdef Tube *t
    cdef Job *j
    cdef int64_t now = wall_ns()
    if core.max_memory and core.mem_used + cost > core.max_memory:
        core.mem_refused += 1
        return 0
    if not manual:
        pre_size = 4 + PyBytes_GET_SIZE(s.name) + sizeof(Jobrec)
    if core.wal_on and not wal_room(
            core, 4 + PyBytes_GET_SIZE(s.tube) + sizeof(Jobrec) + bsize + pre_size, WAL_SHORT):
        return 0
    t = tube_get(core, PyBytes_AS_STRING(s.tube), PyBytes_GET_SIZE(s.tube), True)
    j = job_alloc(core, bsize)
    memcpy(j.body, PyBytes_AS_STRING(s.body), bsize)
    id = core.next_id
    core.next_id += 1
    job_init(core, j, id, s.pri, 0, <int64_t>(s.ttr if s.ttr > 0 else 1) * SEC, t)
    mem_charge(core, cost)
    core.total_jobs += 1
    t.total_jobs += 1
    j.state = JOB_READY
    if manual:
        s.runs += 1
        core.sched_runs += 1
    else:
        s.last = occ
        s.fires += 1
        core.sched_fires += 1
        pre = ext_rec(EXT_FIRE, s.name, <int64_t>id, occ, s.gen, 0, <uint32_t>(s.fires & 0xffffffff))
    if core.wal_on:
        wal_record(core, j, True, pre)
        core.wal_resv += WAL_SHORT
        if not manual:
            ext_own(core, ("fired", s.name), _last_rec(s))
    job_make_ready(core, j)
    if core.on_fire is not None:
        hook1(core, core.on_fire, (s.name, s.tube, id, occ, now - occ, manual))
    return id


cdef int _restore(Core core, Sched s, int64_t now) except -1:
    # s came from the binlog (a restart, a takeover), or its next occurrence
    # is SCHED_STALL behind: occurrences that fell while no node served fire
    # once (the latest of them), or not at all.
    cdef int64_t base = s.last if s.last > s.since else s.since
    s.next_at = _next(s, base)
    if s.next_at == NEVER or s.next_at > now:
        return 0
    latest, count = s.cron.latest_until(now, s.since, base)
    if s.skip:
        core.sched_misfires += count
        s.next_at = _next(s, now)
    else:
        core.sched_misfires += count - 1
        s.next_at = latest
    return 0


cdef Py_ssize_t sched_tick(Core core, Py_ssize_t budget, bint every) except -1:
    # Fire what is due, at most `budget` jobs, each schedule's in order; set
    # core.sched_at. Returns the jobs made. A standby (replaying, not
    # logging) fires nothing: its schedules start when it takes over.
    # every: fire each occurrence passed however far behind (the test clock).
    cdef Sched s
    cdef Py_ssize_t done = 0
    cdef int64_t now, at
    cdef int64_t soonest = NEVER
    core.sched_at = NEVER
    if not core.schedules or (core.wal_links and not core.wal_on):
        return 0
    now = wall_ns()
    for s in list(core.schedules.values()):
        if s.paused:
            continue
        if s.next_at < 0 or (not every and s.next_at < now - SCHED_STALL):
            _restore(core, s, now)
        while s.next_at <= now and s.retry_at <= now:
            if done >= budget:
                break
            if core.drain_mode or _fire(core, s, s.next_at, False) == 0:
                s.retry_at = now + SCHED_RETRY
                break
            done += 1
            s.next_at = _next(s, s.last)
        at = s.next_at if s.next_at > s.retry_at else s.retry_at
        if at < soonest:
            soonest = at
    if soonest != NEVER:
        at = soonest - now
        core.sched_at = mono_ns() + (0 if at < 0 else (at if at < SCHED_RECHECK else SCHED_RECHECK))
    return done


# -- replay -------------------------------------------------------------------------------

cdef object sched_replay_ext(Core core, uint32_t kind, Jobrec *rec, bytes nm):
    # A schedule's extension record (wal.pxi); None, or why it is bad.
    cdef Sched s
    if kind == EXT_SPEC:
        core.replay_parts = [nm, []]
    elif kind == EXT_BODY:
        if core.replay_parts is None:
            return "schedule body record without its spec"
        core.replay_parts[1].append(nm)
    elif kind == EXT_SCHED:
        tube, parts = core.replay_tube, core.replay_parts
        core.replay_tube = core.replay_parts = None
        if tube is None or parts is None:
            return "schedule record without its tube or spec"
        if not name_ok(PyBytes_AS_STRING(nm), PyBytes_GET_SIZE(nm)):
            return "bad schedule name in an extension record"
        body = b"".join(parts[1])
        if PyBytes_GET_SIZE(body) != rec.bury_ct:
            return "schedule record with a torn body"
        try:
            cs = cron_parse(parts[0])
        except SpecError:
            return "bad spec in a schedule record"
        s = _new(nm, tube, rec.timeout_ct, rec.release_ct, rec.kick_ct & SCHED_SKIP, parts[0], cs,
                 body + b"\r\n", rec.reserve_ct, rec.delay)
        s.paused = (rec.kick_ct & SCHED_PAUSED) != 0
        f = core.sched_fired.get(nm)
        if f is not None and (<tuple>f)[0] == s.gen:
            s.last, s.fires = (<tuple>f)[1], (<tuple>f)[2]
        elif f is not None and (<tuple>f)[0] < s.gen:
            del core.sched_fired[nm]            # a replaced definition's
            ext_disown(core, ("fired", nm))
        core.schedules[nm] = s
        if s.gen > core.sched_gen:
            core.sched_gen = s.gen
        ext_own(core, ("sched", nm), _recs(s))
    elif kind == EXT_UNSCHED:
        s = core.schedules.get(nm)
        if s is not None and s.gen == rec.reserve_ct:
            del core.schedules[nm]
            core.sched_fired.pop(nm, None)
            ext_disown(core, ("sched", nm))
            ext_disown(core, ("fired", nm))
        if rec.reserve_ct > core.sched_gen:
            core.sched_gen = rec.reserve_ct
    elif kind == EXT_FIRE:
        core.replay_fire = (<uint64_t>rec.delay, nm, rec.reserve_ct, rec.deadline_at, rec.timeout_ct)
    elif kind == EXT_LAST:
        sched_replay_fired(core, nm, rec.reserve_ct, rec.deadline_at, rec.timeout_ct)
    else:
        return "unknown extension record %d" % kind
    return None


cdef int sched_replay_fired(Core core, bytes nm, uint32_t gen, int64_t occ, uint64_t fires) except -1:
    # Occurrence occ of definition gen of schedule nm fired (an EXT_FIRE
    # whose job followed, or an EXT_LAST).
    cdef Sched s = core.schedules.get(nm)
    if s is not None and s.gen > gen:
        return 0                        # a replaced definition's
    f = core.sched_fired.get(nm)
    if f is None or (gen, occ) >= ((<tuple>f)[0], (<tuple>f)[1]):
        core.sched_fired[nm] = (gen, occ, fires)
    if s is not None and s.gen == gen and occ >= s.last:
        s.last, s.fires = occ, fires
    if gen > core.sched_gen:
        core.sched_gen = gen
    ext_own(core, ("fired", nm), ext_rec(EXT_LAST, nm, 0, occ, gen, 0, <uint32_t>(fires & 0xffffffff)))
    return 0


cdef int sched_replay_finish(Core core) except -1:
    # Replay is over: the schedules start on the timer (once logging starts).
    core.replay_parts = None
    core.replay_fire = None
    core.sched_fired = {}
    if core.schedules:
        sched_due(core)
    return 0


cdef int sched_reset(Core core) except -1:
    # fastbean-reset: no schedule is left (their records are disowned with
    # the rest of the extension state)
    core.schedules = {}
    core.sched_fired = {}
    core.sched_fires = core.sched_runs = core.sched_misfires = 0
    core.sched_at = NEVER
    return 0
