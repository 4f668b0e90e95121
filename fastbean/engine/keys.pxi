# Unique jobs: tuber's idempotency keys. A put tagged "idp:KEY" (or
# "idp:KEY:SECONDS") makes a job only if its tube has no live job put with
# that key, and, with SECONDS, none deleted less than SECONDS ago; else it
# answers with that job's id and state.
#
# A key is kept in dicts beside the jobs (core.keys, core.job_keys), so a
# job put without one costs nothing more (a flag bit in its padding). In the
# binlog, an EXT_KEY record goes right before each full record of a keyed
# job (walg.pxi), so the key lives in whichever file holds the job; a
# deleted key cooling down is an EXT_TUBE + EXT_GONE pair, kept in a file as
# the other extension state is (ext_put).
#
# Offers: key_parse, key_bind, key_unbind, key_release, key_find, gone_set,
#   gone_size.
# Uses: clock, wal, walg.

cdef enum:
    KEY_MAX = 200                 # bytes of a key, as of a tube name
    IDP_TTL_MAX = 4294967295      # seconds of a cooldown


cdef object key_parse(const char *p, Py_ssize_t n):
    # A put's tag, from the space after its size: " idp:KEY" or
    # " idp:KEY:SECONDS", KEY 1 to KEY_MAX printable bytes (not a space).
    # (key, cooldown ns), or None: not a tag we know (BAD_FORMAT).
    cdef Py_ssize_t i, colon = -1
    cdef uint64_t ttl = 0
    if n < 6 or memcmp(p, b" idp:", 5) != 0:
        return None
    p += 5
    n -= 5
    for i in range(n):
        if p[i] <= c' ' or p[i] > c'~':
            return None
        if p[i] == c':':
            colon = i
    if colon >= 0:
        if colon == n - 1:
            return None
        for i in range(colon + 1, n):
            if not c'0' <= p[i] <= c'9':
                return None
            ttl = ttl * 10 + <uint64_t>(p[i] - c'0')
            if ttl > IDP_TTL_MAX:
                return None
        n = colon
    if n < 1 or n > KEY_MAX:
        return None
    return (PyBytes_FromStringAndSize(p, n), <int64_t>ttl * 1000000000)


cdef int key_bind(Core core, Job *j, bytes key, int64_t cool) except -1:
    # j (just made, or replayed) was put with key; the EXT_KEY record goes
    # before each of its full records from now on.
    cdef object jid = j.id                # one int object for both tables
    cdef dict tube_keys = core.keys.get(<bytes>j.tube.name)
    if tube_keys is None:
        tube_keys = core.keys[<bytes>j.tube.name] = {}
    tube_keys[key] = jid
    core.job_keys[jid] = (key, cool)
    j.flags |= JOB_KEYED
    return 0


cdef tuple key_unbind(Core core, Job *j):
    # j keeps no key any more: (key, cooldown ns) it had.
    cdef tuple k = <tuple>core.job_keys.pop(j.id)
    cdef dict tube_keys = core.keys.get(<bytes>j.tube.name)
    if tube_keys is not None and tube_keys.get(k[0]) == j.id:
        del tube_keys[k[0]]
        if not tube_keys:
            del core.keys[<bytes>j.tube.name]
    j.flags &= ~JOB_KEYED
    return k


cdef inline Py_ssize_t gone_size(bytes tube, bytes key) noexcept:
    # the records of a key cooling down: EXT_TUBE, EXT_GONE
    return 2 * (4 + sizeof(Jobrec)) + PyBytes_GET_SIZE(tube) + PyBytes_GET_SIZE(key)


cdef int gone_set(Core core, bytes tube, bytes key, uint64_t id, int64_t until, bint log) except -1:
    # The key's job is deleted; the key answers for it until `until` (wall
    # ns). log: write it (its room was kept at put time: wal_resv).
    core.gone[(tube, key)] = (id, until)
    if log:
        ext_put(core, ("key", tube, key),
                ext_rec(EXT_TUBE, tube, 0, 0, 0, 0)
                + ext_rec(EXT_GONE, key, <int64_t>id, until, 0, 0))
    elif core.wal_links:
        ext_own(core, ("key", tube, key),
                ext_rec(EXT_TUBE, tube, 0, 0, 0, 0)
                + ext_rec(EXT_GONE, key, <int64_t>id, until, 0, 0))
    return 0


cdef int key_release(Core core, Job *j) except -1:
    # j is being deleted: its key goes, or cools down for the time the put
    # asked. The room kept for the cooldown's records is spent either way.
    cdef bytes tube = <bytes>j.tube.name
    key, cool = key_unbind(core, j)
    if cool:
        if core.wal_on:
            core.wal_resv -= gone_size(tube, key)
        gone_set(core, tube, key, j.id, wall_ns() + cool, core.wal_on)
    return 0


cdef object key_find(Core core, bytes tube, bytes key):
    # The job id a put with key in tube gets instead of a new job: (id,
    # True) for a live job, (id, False) for a deleted one still cooling
    # down; None when the put makes a job.
    tube_keys = core.keys.get(tube)
    id = None if tube_keys is None else (<dict>tube_keys).get(key)
    if id is not None:
        return (id, True)
    name = (tube, key)
    g = core.gone.get(name)
    if g is None:
        return None
    if (<tuple>g)[1] > wall_ns():
        return ((<tuple>g)[0], False)
    del core.gone[name]
    if core.wal_links:
        ext_disown(core, ("key", tube, key))
    return None
