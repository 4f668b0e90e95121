# Binlog record encoding and decoding, beanstalkd's format version 7
# (reference notes §4.2-4.3). Included by _core.pyx; the files themselves are
# binlog.py's business.

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


cdef inline Py_ssize_t wal_full_size(Job *j) noexcept:
    return 4 + PyBytes_GET_SIZE(<object>j.tube.name) + sizeof(Jobrec) + PyBytes_GET_SIZE(<object>j.body)


cdef void wal_fill(Job *j, Jobrec *r, int64_t mono, int64_t wall) noexcept:
    memset(r, 0, sizeof(Jobrec))
    r.id = j.id
    r.pri = j.pri
    r.delay = j.delay_ns
    r.ttr = j.ttr_ns
    r.body_size = <int32_t>PyBytes_GET_SIZE(<object>j.body)
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


cdef inline bint wal_signed(Jobrec *r) noexcept:
    return r.pad2[0] == WAL_SIG0 and r.pad2[1] == WAL_SIG1 and r.pad2[2] == WAL_SIG2


cdef bint wal_rec_ok(Jobrec *r) noexcept:
    # Plausibility of a record read back. Every record beanstalkd or fastbean
    # writes has a TTR of at least 1 s and a body of at least its CRLF, so a
    # record torn by a crash inside zero-filled preallocated space fails here
    # instead of being applied (a zero state byte would read as "deleted").
    return (r.id != 0 and r.ttr >= 1000000000 and r.body_size >= 2
            and r.state <= JOB_DELAYED
            and 946684800000000000 < r.created_at < 4102444800000000000)   # 2000..2100
