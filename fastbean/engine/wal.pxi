# Binlog records, beanstalkd's format version 7 (reference notes §4.2-4.3):
# encoding a job's record and reading records back. The files are
# binlog.py's business, the space and ownership walg.pxi's.
#
# Offers: WAL_SHORT, WAL_HEADER, EXT_ID, EXT_TUBE, EXT_KEY, EXT_GONE, EXT_POLICY, EXT_ORIGIN,
#   EXT_SPEC, EXT_BODY, EXT_SCHED, EXT_UNSCHED, EXT_FIRE, EXT_LAST,
#   wal_full_size, rec_fill, rec_fill_marker, ext_rec, header_check, rec_read.
# Python: FILE_HEADER, FILE_FIRST_RECORD, id_marker.
# Uses: clock.
#
# A file is an int32 version, then records: int32 name length, the tube name,
# a Jobrec, and the body when the name length is not 0 (a full record: put,
# migration); a name length of 0 is a short record (every later change).

cdef enum:
    # fastbean signs the three trailing pad bytes of every record it writes
    # ("fb", 1). beanstalkd ignores padding; replay uses the signature to tell
    # a record of ours torn by a crash (its tail zero-filled) from a real one.
    WAL_SIG0 = 0x66
    WAL_SIG1 = 0x62
    WAL_SIG2 = 0x01
    WAL_VERSION = 7
    WAL_SHORT = 84            # int32 0 + Jobrec
    WAL_HEADER = 4            # int32 version

# The extension records: Jobrec.pri says which, the name and the numbers
# what (ext_rec). Each is one record of job EXT_ID.
#   EXT_TUBE    name: the tube the next EXT_GONE or EXT_POLICY is about
#   EXT_KEY     name: the key of job `delay`, whose full record comes next;
#               deadline_at: its cooldown, ns (0: none)
#   EXT_GONE    name: a key deleted with a cooldown; delay: its job's id;
#               deadline_at: the cooldown's end, wall ns
#   EXT_POLICY  name: the dead-letter tube, or empty (bury); reserve_ct: the
#               retry limit; kick_ct: 1 = back to the server's default
#   EXT_ORIGIN  name: the tube job `delay` was dead-lettered from, whose full
#               record comes next
#   EXT_SPEC    name: the spec of the EXT_SCHED that follows
#   EXT_BODY    name: up to NAME_MAX bytes of its body (none for an empty one)
#   EXT_SCHED   name: a schedule, defined after EXT_TUBE, EXT_SPEC and its
#               EXT_BODY records; delay: since when (wall ns); reserve_ct: its
#               number (gen); timeout_ct: pri; release_ct: ttr seconds;
#               bury_ct: body bytes; kick_ct: 1 = misfire skip, 2 = paused
#   EXT_UNSCHED name: a schedule removed; reserve_ct: its gen
#   EXT_FIRE    name: a schedule; delay: the job made, whose full record comes
#               next; deadline_at: the occurrence (wall ns); reserve_ct: gen;
#               timeout_ct: occurrences fired so far
#   EXT_LAST    the same, with no job: the latest EXT_FIRE written forward
cdef uint64_t EXT_ID = 0xffffffffffffffff
cdef enum:
    EXT_TUBE = 1
    EXT_KEY = 2
    EXT_GONE = 3
    EXT_POLICY = 4
    EXT_ORIGIN = 5
    EXT_SPEC = 6
    EXT_BODY = 7
    EXT_SCHED = 8
    EXT_UNSCHED = 9
    EXT_FIRE = 10
    EXT_LAST = 11


cdef int32_t _version = WAL_VERSION
# The first bytes of every binlog file (binlog.py writes them when it makes one),
# and the most the engine writes into a new file before its first job record
# (walg.pxi's marker), which binlog.py sizes files for.
FILE_HEADER = PyBytes_FromStringAndSize(<char *>&_version, WAL_HEADER)
FILE_FIRST_RECORD = WAL_SHORT


cdef inline Py_ssize_t wal_full_size(Job *j) noexcept:
    return 4 + PyBytes_GET_SIZE(<object>j.tube.name) + sizeof(Jobrec) + j.body_size


cdef void rec_fill(Job *j, Jobrec *r, int64_t mono, int64_t wall) noexcept:
    memset(r, 0, sizeof(Jobrec))
    r.id = j.id
    r.pri = j.pri
    r.delay = j.delay_ns
    r.ttr = j.ttr_ns
    r.body_size = j.body_size
    r.created_at = j.created_wall
    if j.state == JOB_DELAYED or j.state == JOB_RESERVED:
        r.deadline_at = j.deadline - mono + wall     # monotonic -> wall clock
    r.reserve_ct = j.reserve_ct
    r.timeout_ct = j.timeout_ct
    r.release_ct = j.release_ct
    r.bury_ct = j.bury_ct
    r.kick_ct = j.kick_ct
    r.state = j.state
    r.pad2[0] = WAL_SIG0
    r.pad2[1] = WAL_SIG1
    r.pad2[2] = WAL_SIG2


cdef void rec_fill_marker(Jobrec *r, uint64_t max_id, int64_t wall) noexcept:
    # A short "deleted" record of the highest id handed out, first in a new
    # file. Replay (ours and beanstalkd's) ignores it as a record of an
    # unknown job but still counts its id, so ids continue after a restart
    # even when every job, and every older file, is gone.
    memset(r, 0, sizeof(Jobrec))
    r.id = max_id
    r.ttr = 1000000000
    r.body_size = 2
    r.created_at = wall
    r.pad2[0] = WAL_SIG0
    r.pad2[1] = WAL_SIG1
    r.pad2[2] = WAL_SIG2


cdef bytes ext_rec(uint32_t kind, bytes name, int64_t a, int64_t b, uint32_t n, uint32_t flag,
                   uint32_t n2=0, uint32_t n3=0, uint32_t n4=0):
    # One extension record: int32 name length, the name, a Jobrec of job
    # EXT_ID in state "deleted" (no body follows), signed like every record.
    # a: delay, b: deadline_at, n..n4: reserve_ct, timeout_ct, release_ct,
    # bury_ct; flag: kick_ct.
    cdef Jobrec r
    cdef int32_t namelen = <int32_t>PyBytes_GET_SIZE(name)
    memset(&r, 0, sizeof(Jobrec))
    r.id = EXT_ID
    r.pri = kind
    r.delay = a
    r.ttr = 1000000000
    r.body_size = 2
    r.created_at = wall_ns()
    r.deadline_at = b
    r.reserve_ct = n
    r.timeout_ct = n2
    r.release_ct = n3
    r.bury_ct = n4
    r.kick_ct = flag
    r.state = JOB_INVALID
    r.pad2[0] = WAL_SIG0
    r.pad2[1] = WAL_SIG1
    r.pad2[2] = WAL_SIG2
    return (PyBytes_FromStringAndSize(<char *>&namelen, 4) + name
            + PyBytes_FromStringAndSize(<char *>&r, sizeof(Jobrec)))


def id_marker(uint64_t max_id):
    """The record that keeps ids going on after max_id when no job's record
    says so (the marker a new file starts with), for a file cut back. It is
    a delete record of job max_id: replay drops that job if it has it."""
    cdef char buf[WAL_SHORT]
    cdef int32_t namelen = 0
    memcpy(buf, &namelen, 4)
    rec_fill_marker(<Jobrec *>(buf + 4), max_id, wall_ns())
    return PyBytes_FromStringAndSize(buf, WAL_SHORT)


cdef inline bint rec_signed(Jobrec *r) noexcept:
    return r.pad2[0] == WAL_SIG0 and r.pad2[1] == WAL_SIG1 and r.pad2[2] == WAL_SIG2


cdef bint rec_ok(Jobrec *r) noexcept:
    # Plausibility of a record read back. Every record beanstalkd or fastbean
    # writes has a TTR of at least 1 s and a body of at least its CRLF, so a
    # record torn by a crash inside zero-filled preallocated space fails here
    # instead of being applied (a zero state byte would read as "deleted").
    return (r.id != 0 and r.ttr >= 1000000000 and r.body_size >= 2
            and r.state <= JOB_DELAYED
            and 946684800000000000 < r.created_at < 4102444800000000000)   # 2000..2100


cdef object header_check(const char *p, Py_ssize_t n):
    # None if p[:n] starts with a version header we read, else why not.
    cdef int32_t version = 0
    if n < WAL_HEADER:
        return "no version header" if n else None
    memcpy(&version, p, 4)
    if version != WAL_VERSION:
        return "unknown version %d" % version
    return None


cdef object rec_read(const char *p, Py_ssize_t n, Py_ssize_t pos, int *signed, Jobrec *rec,
                     const char **name, int32_t *namelen, const char **body, Py_ssize_t *size):
    # Read the record at p[pos:n]. None when it is sound, with its parts and
    # its size (0: the zero-filled end of the records); else why it is not.
    # signed: -1 until the first record, then whether the file is fastbean's.
    cdef Py_ssize_t need
    size[0] = 0
    memcpy(namelen, p + pos, 4)
    if namelen[0] < 0 or namelen[0] > NAME_MAX:
        return "bad name length %d" % namelen[0]
    need = 4 + namelen[0] + sizeof(Jobrec)
    if pos + need > n:
        return "truncated record"
    memcpy(rec, p + pos + 4 + namelen[0], sizeof(Jobrec))
    if rec.id == 0 and namelen[0] == 0:
        return None                     # end of the records written
    if not rec_ok(rec):
        return "corrupt record"
    if signed[0] < 0:
        signed[0] = rec_signed(rec)
    elif signed[0] and not rec_signed(rec):
        return "torn record"
    name[0] = p + pos + 4
    body[0] = NULL
    if rec.id == EXT_ID:
        if rec.state != JOB_INVALID:
            return "corrupt record"
        size[0] = need                  # an extension record: its reader checks the name
        return None
    if namelen[0] and rec.state != JOB_INVALID:
        # a full record; as in beanstalkd, a deleted one has no body
        need += rec.body_size
        if pos + need > n:
            return "truncated record"
        body[0] = p + pos + 4 + namelen[0] + sizeof(Jobrec)
        if body[0][rec.body_size - 2] != c'\r' or body[0][rec.body_size - 1] != c'\n':
            return "corrupt job body"
        if not name_ok(name[0], namelen[0]):
            return "bad tube name"
    size[0] = need
    return None
