# What the web console reads of the queue, straight from the structures:
# a job, a tube, the counters, a connection, and two reads that may cover
# millions of jobs and so run in slices the caller spaces out over loop
# turns (Listing, a tube's jobs in one state in the order they leave it, as
# list-tube gathers them; Scan, every job of the id table, filtered). Every
# call here is read-only: nothing is logged, no reply is held, and no
# command counter moves, so what a beanstalk client sees stays the same.
#
# Offers: inspect_job, inspect_body, inspect_tube_of, inspect_origin,
#   inspect_counters, inspect_tube, inspect_conn, Listing, Scan.
# Python: Listing, Scan.
# Uses: clock, tube, job, stats, list.

from libc.string cimport memchr

cdef enum:
    BODY_HEAD = 64                  # bytes of a body a Listing row carries

cdef dict STATE_OF_NAME = {"ready": JOB_READY, "reserved": JOB_RESERVED, "buried": JOB_BURIED,
                           "delayed": JOB_DELAYED}


cdef inline int64_t _time_left(Job *j, int64_t now) noexcept:
    if j.state == JOB_RESERVED or j.state == JOB_DELAYED:
        return j.deadline - now
    return 0


cdef inline int64_t _whole(int64_t ns) noexcept:
    # whole seconds, truncated toward zero as stats-job shows them
    return ns // SEC if ns >= 0 else -((-ns) // SEC)


cdef inline object _holder(Job *j):
    if j.state == JOB_RESERVED and j.owner != NULL:
        return <object>j.owner
    return None


cdef dict inspect_job(Core core, uint64_t id):
    # stats-job's fields, with the same numbers, and what the console adds
    cdef Job *j = job_find(core, id)
    cdef int64_t now = mono_ns()
    if j == NULL or j.state == JOB_INVALID:
        return None
    return {
        "id": j.id, "tube": (<bytes>j.tube.name).decode("latin-1"),
        "state": STATE_NAMES[j.state].decode(), "pri": j.pri,
        "age": _whole(wall_ns() - j.created_wall), "delay": _whole(j.delay_ns),
        "ttr": _whole(j.ttr_ns), "time-left": _whole(_time_left(j, now)),
        "file": j.wal_file, "reserves": j.reserve_ct, "timeouts": j.timeout_ct,
        "releases": j.release_ct, "buries": j.bury_ct, "kicks": j.kick_ct,
        "size": j.body_size - 2, "holder": _holder(j),
    }


cdef bytes inspect_body(Core core, uint64_t id, Py_ssize_t limit):
    cdef Job *j = job_find(core, id)
    cdef Py_ssize_t n
    if j == NULL or j.state == JOB_INVALID:
        return None
    n = j.body_size - 2
    if 0 <= limit < n:
        n = limit
    return PyBytes_FromStringAndSize(j.body, n)


cdef object inspect_tube_of(Core core, uint64_t id):
    # the name of the tube job id is in, or None
    cdef Job *j = job_find(core, id)
    if j == NULL or j.state == JOB_INVALID:
        return None
    return <bytes>j.tube.name


cdef object inspect_origin(Core core, uint64_t id):
    # the tube a retry limit moved job id from (core.origins, retry.pxi), or None
    cdef Job *j = job_find(core, id)
    if j == NULL or not j.flags & JOB_ORIGIN:
        return None
    return core.origins[id]


cdef dict inspect_counters(Core core):
    # stats' numbers by stats' names (no YAML to parse): the console samples
    # them every second
    cdef int i
    cdef dict d = {
        "current-jobs-urgent": core.urgent_ct, "current-jobs-ready": core.ready_ct,
        "current-jobs-reserved": core.reserved_ct, "current-jobs-delayed": core.delayed_ct,
        "current-jobs-buried": core.buried_ct,
    }
    for i in range(22):
        d[CMD_KEYS[i].decode()] = core.cmd_ct[i + 1]
    d.update({
        "job-timeouts": core.job_timeouts, "total-jobs": core.total_jobs,
        "max-job-size": core.max_job_size, "current-tubes": core.ntubes,
        "current-connections": core.conn_ct, "current-producers": core.producer_ct,
        "current-workers": core.worker_ct, "current-waiting": core.waiting_ct,
        "total-connections": core.total_conns,
        "uptime": (mono_ns() - core.started_mono) // SEC,
        "binlog-oldest-index": core.wfiles[0].seq if core.nwfiles else 0,
        "binlog-current-index": core.wfiles[core.nwfiles - 1].seq if core.nwfiles else 0,
        "binlog-records-migrated": core.wal_migrated,
        "binlog-records-written": core.wal_written,
        "binlog-max-size": core.binlog_max_size,
        "draining": bool(core.drain_mode),
        "max-memory": core.max_memory, "memory-used": core.mem_used,
        "current-jobs": core.jobs.count,
    })
    return d


cdef dict inspect_tube(Core core, bytes name):
    # stats-tube's fields, and the tube's retry limit
    cdef Tube *t = tube_get(core, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name), False)
    cdef int64_t left = 0
    if t == NULL:
        return None
    if t.pause_ns:
        left = t.unpause_at - mono_ns()
    limit, dead_letter = core.policies.get(name, (0, None))
    return {
        "name": name.decode("latin-1"),
        "current-jobs-urgent": t.urgent_ct, "current-jobs-ready": t.ready.len,
        "current-jobs-reserved": t.reserved_ct, "current-jobs-delayed": t.delay.len,
        "current-jobs-buried": t.buried_ct, "total-jobs": t.total_jobs,
        "current-using": t.using_ct, "current-watching": t.watching_ct,
        "current-waiting": t.nwaiting, "cmd-delete": t.cmd_delete,
        "cmd-pause-tube": t.cmd_pause, "pause": _whole(t.pause_ns),
        "pause-time-left": _whole(left),
        "retry-limit": limit, "dead-letter-tube": dead_letter,
    }


cdef dict inspect_conn(Conn c):
    cdef int64_t now = mono_ns()
    cdef Py_ssize_t i
    cdef Job *j = c.reserved.head
    reserved = []
    wait_left = None
    if c.wait == WAIT_JOB and c.timeout_at >= 0:
        wait_left = (c.timeout_at - now) / 1e9
    while j != NULL:
        reserved.append((j.id, (j.deadline - now) / 1e9))
        j = j.link[LINK_STATE].next
    return {
        "use": <bytes>c.use.name,
        "watch": [<bytes>c.watch[i].tube.name for i in range(c.nwatch)],
        "reserved": reserved,
        "waiting": c.wait == WAIT_JOB,
        "wait_left": wait_left,
        "producer": bool(c.producer), "worker": bool(c.worker),
    }


cdef tuple _row(Job *j, int64_t now, int64_t wall):
    cdef Py_ssize_t n = j.body_size - 2
    return (j.id, j.pri, _whole(wall - j.created_wall), _whole(_time_left(j, now)),
            j.reserve_ct, j.release_ct, j.timeout_ct, j.bury_ct, j.kick_ct, n,
            PyBytes_FromStringAndSize(j.body, min(n, <Py_ssize_t>BODY_HEAD)), _holder(j))


cdef class Listing:
    """One page of a tube's jobs in one state, in the order they leave it
    (docs/protocol-extensions.md, list-tube): ready by (priority, id),
    delayed and reserved by (deadline, id), buried in kick order. step()
    looks at `budget` heap entries; call it, a loop turn apart, until it
    returns True, then read rows, after (the cursor of the next page, or
    None) and total (the jobs in that state when the listing began).

    Like list-tube's, a listing is not a snapshot: a job that changes while
    the page is gathered may be missed, and each row shows its job as it is
    when the page completes."""

    cdef Core core
    cdef bytes tube_name
    cdef int state
    cdef Py_ssize_t count, pos, nkeys
    cdef ListKey start
    cdef ListKey *keys
    cdef bint more
    cdef readonly bint done
    cdef readonly list rows
    cdef readonly object after
    cdef readonly Py_ssize_t total

    def __cinit__(self, Core core, bytes tube, str state, after=None, Py_ssize_t count=50):
        cdef Tube *t
        if state not in STATE_OF_NAME:
            raise ValueError("no such state: %r" % state)
        if not 1 <= count <= 10000:
            raise ValueError("count must be 1 to 10000")
        self.core, self.tube_name, self.state, self.count = core, tube, STATE_OF_NAME[state], count
        self.start.key, self.start.id = after if after is not None else (0, 0)
        self.keys = <ListKey *>malloc(2 * count * sizeof(ListKey))
        if self.keys == NULL:
            raise MemoryError()
        self.rows = []
        t = self._tube()
        if t == NULL:
            self.done = True
            return
        self.total = (t.ready.len if self.state == JOB_READY else t.delay.len
                      if self.state == JOB_DELAYED else t.reserved_ct
                      if self.state == JOB_RESERVED else t.buried_ct)

    def __dealloc__(self):
        free(self.keys)

    cdef Tube *_tube(self) except? NULL:
        return tube_get(self.core, PyBytes_AS_STRING(self.tube_name),
                        PyBytes_GET_SIZE(self.tube_name), False)

    def step(self, Py_ssize_t budget=LIST_SCAN):
        """Look at up to budget more entries; True once the page is complete."""
        cdef Tube *t
        cdef Heap *h
        cdef Py_ssize_t i, end
        cdef Job *j
        cdef ListKey k
        if self.done:
            return True
        t = self._tube()
        if t == NULL:                   # the tube went (its last job and user left)
            self.done = True
            return True
        if self.state == JOB_BURIED:
            self._buried(t)
            return True
        h = &t.ready if self.state == JOB_READY else &t.delay \
            if self.state == JOB_DELAYED else &self.core.ttr_heap
        end = min(h.len, self.pos + budget)
        for i in range(self.pos, end):
            j = <Job *>h.items[i]
            if j.tube != t:
                continue
            k.key, k.id = list_key_of(j, self.state), j.id
            if list_key_cmp(&k, &self.start) <= 0:
                continue
            self.keys[self.nkeys] = k
            self.nkeys += 1
            if self.nkeys == 2 * self.count:
                self._keep()
        self.pos = end
        if self.pos < h.len:
            return False
        self._keep()
        self._finish(t)
        return True

    cdef void _keep(self) noexcept:
        qsort(self.keys, self.nkeys, sizeof(ListKey), list_key_cmp)
        if self.nkeys > self.count:
            self.nkeys = self.count
            self.more = True

    cdef _finish(self, Tube *t):
        cdef int64_t now = mono_ns(), wall = wall_ns()
        cdef Py_ssize_t i
        cdef Job *j
        for i in range(self.nkeys):
            j = job_find(self.core, self.keys[i].id)
            if j != NULL and j.tube == t and j.state == self.state:
                self.rows.append(_row(j, now, wall))
        if self.more:
            self.after = (self.keys[self.nkeys - 1].key, self.keys[self.nkeys - 1].id)
        self.done = True

    cdef _buried(self, Tube *t):
        # kick order is the list's: go on after the cursor's job, or from the
        # head if it is no longer buried here
        cdef Job *j = t.buried.head
        cdef Job *last = NULL
        cdef int64_t now = mono_ns(), wall = wall_ns()
        if self.start.id:
            j = job_find(self.core, self.start.id)
            if j == NULL or j.state != JOB_BURIED or j.tube != t:
                j = t.buried.head
            else:
                j = j.link[LINK_STATE].next
        while j != NULL and len(self.rows) < self.count:
            self.rows.append(_row(j, now, wall))
            last = j
            j = j.link[LINK_STATE].next
        if j != NULL and last != NULL:
            self.after = (0, last.id)
        self.done = True


cdef inline bint _holds(Job *j, const char *needle, Py_ssize_t n) noexcept:
    # the body (its CRLF left out) holds needle
    cdef const char *p = j.body
    cdef const char *end = j.body + j.body_size - 2 - n + 1
    if n == 0:
        return True
    while p < end:
        p = <const char *>memchr(p, needle[0], end - p)
        if p == NULL:
            return False
        if memcmp(p, needle, n) == 0:
            return True
        p += 1
    return False


cdef class Scan:
    """Every job of the id table, bucket by bucket, a slice per step():
    those in tube (bytes, or None for any), in one of states (names, or
    None for any) and whose body holds needle (bytes, or None) are returned
    as ids, or as (id, body) pairs with bodies=True (for a regular
    expression the caller matches). A job put, moved or deleted while the
    scan runs may be missed, and one the id table moves while it grows or
    shrinks may come twice: the caller keeps the ids it has shown."""

    cdef Core core
    cdef bytes tube_name, needle
    cdef int states                     # bit per JobState
    cdef bint bodies
    cdef Py_ssize_t table, bucket       # where the next step starts: t0, then t1
    cdef readonly bint done
    cdef readonly Py_ssize_t scanned, total

    def __cinit__(self, Core core, bytes tube=None, states=None, bytes needle=None,
                  bint bodies=False):
        self.core, self.tube_name, self.needle, self.bodies = core, tube, needle, bodies
        self.states = 0
        for name in (STATE_OF_NAME if states is None else states):
            if name not in STATE_OF_NAME:
                raise ValueError("no such state: %r" % name)
            self.states |= 1 << <int>STATE_OF_NAME[name]
        self.total = core.jobs.count

    def step(self, Py_ssize_t budget=LIST_SCAN):
        """Look at about budget more jobs (and buckets); the matches among them."""
        cdef JobTable *tab = &self.core.jobs
        cdef Tube *t = NULL
        cdef Job **buckets
        cdef Py_ssize_t size, work = 0
        cdef Job *j
        cdef const char *needle = NULL
        cdef Py_ssize_t nlen = 0
        found = []
        if self.done:
            return found
        if self.tube_name is not None:
            t = tube_get(self.core, PyBytes_AS_STRING(self.tube_name),
                         PyBytes_GET_SIZE(self.tube_name), False)
            if t == NULL:
                self.done = True
                return found
        if self.needle is not None:
            needle, nlen = PyBytes_AS_STRING(self.needle), PyBytes_GET_SIZE(self.needle)
        while work < budget:
            buckets = tab.t0 if self.table == 0 else tab.t1
            size = (tab.mask0 if self.table == 0 else tab.mask1) + 1
            if buckets == NULL or self.bucket >= size:
                if self.table == 1 or tab.t1 == NULL:
                    self.done = True
                    break
                self.table, self.bucket = 1, 0
                continue
            j = buckets[self.bucket]
            self.bucket += 1
            work += 1
            while j != NULL:
                work += 1
                self.scanned += 1
                if ((t == NULL or j.tube == t) and (self.states >> j.state) & 1
                        and (needle == NULL or _holds(j, needle, nlen))):
                    if self.bodies:
                        found.append((j.id, PyBytes_FromStringAndSize(j.body, j.body_size - 2)))
                    else:
                        found.append(j.id)
                j = j.ht_next
        return found
