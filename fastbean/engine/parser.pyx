# cython: language_level=3
"""Incremental parser of the beanstalk protocol (see parser.pxd)."""

from libc.string cimport memchr, memcpy, memcmp, strlen
from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t, UINT32_MAX, UINT64_MAX
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_GET_SIZE

from fastbean.engine.wire cimport (
    Cmd, LINE_MAX, name_byte, name_ok,
    OP_PUT, OP_PEEK, OP_PEEK_READY, OP_PEEK_DELAYED, OP_PEEK_BURIED, OP_RESERVE,
    OP_RESERVE_TIMEOUT, OP_DELETE, OP_RELEASE, OP_USE, OP_WATCH, OP_IGNORE, OP_BURY, OP_KICK,
    OP_TOUCH, OP_STATS, OP_STATS_JOB, OP_STATS_TUBE, OP_LIST_TUBES, OP_LIST_TUBE_USED,
    OP_LIST_TUBES_WATCHED, OP_PAUSE_TUBE, OP_RESERVE_JOB, OP_KICK_JOB, OP_QUIT, OP_PUT_BODY,
    OP_SKIPPED, OP_UNKNOWN, OP_BAD_FORMAT, OP_EXT, OP_TEST_RESET, OP_TEST_ADVANCE,
    OP_FLUSH_TUBE, OP_FLUSH_BURIED, OP_LIST_TUBE, LIST_MAX, OP_RESERVE_BATCH, BATCH_MAX,
    OP_DELETE_BATCH, OP_RETRY_LIMIT, OP_DELETE_EACH, OP_MOVE_JOB, OP_REPRIORITIZE_JOB,
    OP_SCHEDULE, OP_UNSCHEDULE, OP_LIST_SCHEDULES, OP_FIRE_SCHEDULE, OP_PAUSE_SCHEDULE,
    OP_RESUME_SCHEDULE,
    LIST_READY, LIST_RESERVED, LIST_BURIED, LIST_DELAYED, RETRY_SHOW, RETRY_SET, RETRY_DEFAULT,
    ERR_NONE, ERR_BAD_FORMAT, ERR_EXPECTED_CRLF, ERR_JOB_TOO_BIG, ERR_OUT_OF_MEMORY, ERR_DRAINING,
)

cdef enum:
    S_LINE = 0        # reading command lines
    S_DECIDE = 1      # a put header was returned; waiting for accept_body/reject_body
    S_BODY = 2        # filling a put body
    S_DISCARD = 3     # swallowing a rejected body
    S_QUIT = 4        # after quit: nothing more is read
    S_LONG = 5        # gathering a long batch line (long_lines)
    S_LONG_SKIP = 6   # dropping one longer still, up to its CRLF
    # the longest batch line: "delete-batch" and 1000 ids of 20 digits
    LONG_LINE_MAX = 12 + 1000 * 21

cdef inline bint _is_space(char c) noexcept:
    # C isspace() in the "C" locale, as strtol/strtoul skip.
    return c == c' ' or c == c'\t' or c == c'\n' or c == c'\v' or c == c'\f' or c == c'\r'


cdef const char *_read_uint(const char *p, const char *end, uint64_t limit,
                            uint64_t *out) noexcept:
    # beanstalkd's strict number reader: spaces, then a digit, then decimal
    # digits no larger than limit. Returns the first byte after the digits, or
    # NULL on a format error. The caller decides what may follow.
    cdef uint64_t v = 0
    cdef unsigned int d
    while p < end and p[0] == c' ':
        p += 1
    if p >= end or p[0] < c'0' or p[0] > c'9':
        return NULL
    while p < end and c'0' <= p[0] <= c'9':
        d = p[0] - c'0'
        if v > (UINT64_MAX - d) // 10:
            return NULL
        v = v * 10 + d
        p += 1
    if v > limit:
        return NULL
    out[0] = v
    return p


cdef const char *_read_u32(const char *p, const char *end, uint32_t *out) noexcept:
    cdef uint64_t v
    p = _read_uint(p, end, UINT32_MAX, &v)
    if p != NULL:
        out[0] = <uint32_t>v
    return p


cdef bint _last_u32(const char *p, const char *end, uint32_t *out) noexcept:
    p = _read_u32(p, end, out)
    return p != NULL and p == end


cdef bint _last_u64(const char *p, const char *end, uint64_t *out) noexcept:
    p = _read_uint(p, end, UINT64_MAX, out)
    return p != NULL and p == end


cdef int _c_strtoul(const char *p, const char *end, uint64_t *out, bint *neg) noexcept:
    # Like C strtoul/strtol in base 10 on a bounded string: leading white
    # space, an optional sign, digits, anything after them ignored.
    # Returns -1 when no digits were found, -2 on 64-bit overflow, else 0,
    # with the magnitude in out and the sign in neg.
    cdef uint64_t v = 0
    cdef unsigned int d
    neg[0] = False
    while p < end and _is_space(p[0]):
        p += 1
    if p < end and (p[0] == c'+' or p[0] == c'-'):
        neg[0] = p[0] == c'-'
        p += 1
    if p >= end or p[0] < c'0' or p[0] > c'9':
        return -1
    while p < end and c'0' <= p[0] <= c'9':
        d = p[0] - c'0'
        if v > (UINT64_MAX - d) // 10:
            return -2
        v = v * 10 + d
        p += 1
    out[0] = v
    return 0


cdef bint _read_seconds(const char *p, const char *end, int64_t *ns) noexcept:
    # "SECONDS[.FRACTION]" to the end of the line: at most 2^32-1 seconds and
    # nine fraction digits, as nanoseconds.
    cdef uint64_t whole
    cdef int64_t frac = 0, scale = 100000000
    p = _read_uint(p, end, UINT32_MAX, &whole)
    if p == NULL:
        return False
    if p < end and p[0] == c'.':
        p += 1
        if p == end:
            return False
        while p < end and c'0' <= p[0] <= c'9' and scale:
            frac += (p[0] - c'0') * scale
            scale //= 10
            p += 1
    if p != end:
        return False
    ns[0] = <int64_t>whole * 1000000000 + frac
    return True


cdef void _set_name(Cmd *cmd, const char *p, const char *end, int op) noexcept:
    if name_ok(p, end - p):
        cmd.op = op
        cmd.name = p
        cmd.name_len = end - p
    else:
        cmd.op = OP_BAD_FORMAT


cdef void _ext_name(Cmd *cmd, const char *p, const char *end, int op) noexcept:
    # An extension's "<verb> <tube>": the op is kept when the rest is bad, with
    # BAD_FORMAT attached, so that --strict can answer UNKNOWN_COMMAND.
    cmd.op = op
    if p < end and p[0] == c' ' and name_ok(p + 1, end - p - 1):
        cmd.name = p + 1
        cmd.name_len = end - p - 1
    else:
        cmd.err = ERR_BAD_FORMAT


cdef const char *_word(const char *p, const char *end, const char *word, Py_ssize_t n) noexcept:
    # p past `word` and the space after it, or NULL
    if end - p > n and memcmp(p, word, n) == 0 and p[n] == c' ':
        return p + n + 1
    return NULL


cdef bint _list_args(Cmd *cmd, const char *q, const char *end) noexcept:
    # list-tube's "<state> <cursor> <count>", about the tube in use as peek
    # and kick are (a tube name would not fit a 224-byte line beside a
    # cursor); the cursor is 0 or "<key>.<id>", as a page's reply gives it.
    cdef const char *r
    cdef uint64_t key = 0, id = 0
    r = _word(q, end, b"ready", 5)
    cmd.list_state = LIST_READY
    if r == NULL:
        r = _word(q, end, b"delayed", 7)
        cmd.list_state = LIST_DELAYED
    if r == NULL:
        r = _word(q, end, b"buried", 6)
        cmd.list_state = LIST_BURIED
    if r == NULL:
        r = _word(q, end, b"reserved", 8)
        cmd.list_state = LIST_RESERVED
    if r == NULL or r == end or r[0] == c' ':
        return False
    r = _read_uint(r, end, UINT64_MAX, &key)
    if r != NULL and r + 1 < end and r[0] == c'.' and c'0' <= r[1] <= c'9':
        r = _read_uint(r + 1, end, UINT64_MAX, &id)
        if r != NULL and id == 0:
            return False
    elif key != 0:
        return False                # a cursor other than 0 has its id
    if r == NULL or r == end or r[0] != c' ' or r + 1 == end or r[1] == c' ':
        return False
    cmd.after_key, cmd.after_id = key, id
    return _last_u32(r + 1, end, &cmd.bound) and 1 <= cmd.bound <= LIST_MAX


cdef bint _batch_args(Cmd *cmd, const char *p, const char *end) noexcept:
    # reserve-batch's " <count>[ <timeout>]": count 1 to BATCH_MAX, timeout in
    # seconds (none or 0: do not wait)
    cmd.delay = 0
    if p == end or p[0] != c' ' or p + 1 == end or p[1] == c' ':
        return False
    p = _read_u32(p + 1, end, &cmd.bound)
    if p == NULL or cmd.bound < 1 or cmd.bound > BATCH_MAX:
        return False
    if p == end:
        return True
    if p[0] != c' ' or p + 1 == end or p[1] == c' ':
        return False
    return _last_u32(p + 1, end, &cmd.delay)


cdef bint _retry_args(Cmd *cmd, const char *p, const char *end) noexcept:
    # retry-limit's "", " default", " <count>" or " <count> <tube>", about
    # the tube in use: list_state says which (RETRY_*), bound the count,
    # name the dead-letter tube (name_len 0: bury).
    cmd.bound = 0
    cmd.name_len = 0
    if p == end:
        cmd.list_state = RETRY_SHOW
        return True
    if p[0] != c' ' or p + 1 == end or p[1] == c' ':
        return False
    if end - p == 8 and memcmp(p + 1, b"default", 7) == 0:
        cmd.list_state = RETRY_DEFAULT
        return True
    cmd.list_state = RETRY_SET
    p = _read_u32(p + 1, end, &cmd.bound)
    if p == NULL:
        return False
    if p == end:
        return True
    if p[0] != c' ' or not name_ok(p + 1, end - p - 1):
        return False
    cmd.name, cmd.name_len = p + 1, end - p - 1
    return True


cdef const char *_id_word(Cmd *cmd, const char *p, const char *end) noexcept:
    # " <id> " of move-job and reprioritize-job: p past the second space,
    # or NULL (one space each, no sign, below 2^64)
    if p == end or p[0] != c' ' or p + 1 == end or p[1] == c' ':
        return NULL
    p = _read_uint(p + 1, end, UINT64_MAX, &cmd.id)
    if p == NULL or p == end or p[0] != c' ' or p + 1 == end or p[1] == c' ':
        return NULL
    return p + 1


cdef bint _move_args(Cmd *cmd, const char *p, const char *end) noexcept:
    # move-job's " <id> <tube>"
    p = _id_word(cmd, p, end)
    if p == NULL or not name_ok(p, end - p):
        return False
    cmd.name, cmd.name_len = p, end - p
    return True


cdef bint _repri_args(Cmd *cmd, const char *p, const char *end) noexcept:
    # reprioritize-job's " <id> <pri>", pri as put's (at most 2^32 - 1)
    p = _id_word(cmd, p, end)
    return p != NULL and _last_u32(p, end, &cmd.pri)


cdef bint _ids(Cmd *cmd, const char *p, const char *end) noexcept:
    # delete-batch's (and delete-each's) " <id>[ <id>...]", 1 to BATCH_MAX
    # ids: the engine reads them from the text kept in name/name_len, each
    # checked here as a 64-bit number
    cdef uint64_t id
    cdef int count = 0
    if p == end:
        return False
    cmd.name, cmd.name_len = p + 1, end - p - 1
    while p < end:
        if p[0] != c' ' or p + 1 == end or p[1] == c' ' or count == BATCH_MAX:
            return False
        p = _read_uint(p + 1, end, UINT64_MAX, &id)
        if p == NULL:
            return False
        count += 1
    return True


cdef void _sched_args(Cmd *cmd, const char *p, const char *end) noexcept:
    # schedule's " <name> <pri> <ttr> <misfire> <bytes> <spec>": the engine
    # reads the words (name/name_len: all of them); here only the size, so
    # that a body follows (garbage False) whenever the fifth word is one,
    # even when the rest is bad (the body is then swallowed, BAD_FORMAT).
    cdef const char *w = NULL
    cdef int words = 0
    cdef uint64_t v
    cmd.op = OP_SCHEDULE
    cmd.err = ERR_BAD_FORMAT
    cmd.garbage = True
    cmd.nbytes = 0
    cmd.name, cmd.name_len = p, 0
    if p == end or p[0] != c' ':
        return
    cmd.name, cmd.name_len = p + 1, end - p - 1
    while words < 5:
        if p == end or p[0] != c' ':
            return
        words += 1
        p += 1
        w = p
        while p < end and p[0] != c' ':
            p += 1
        if p == w:
            return
    if _read_uint(w, p, UINT32_MAX, &v) != p:
        return
    cmd.nbytes = <uint32_t>v
    cmd.garbage = False
    if p + 1 < end and p[1] != c' ':
        cmd.err = ERR_NONE


# -- the verbs -----------------------------------------------------------------------
#
# Each verb: its text (with the space that must follow, where one must), the
# op it gives, and how the rest of the line is read (A_*). A line is matched
# against the verbs of its first byte as prefixes, in beanstalkd's order, so
# e.g. "stats-job" (no space) lands on "stats" and is then a BAD_FORMAT. A
# new command is a line here and, if its arguments are new, a case in
# _read_args.

cdef enum:
    A_OP            # the op, whatever follows (quit)
    A_EXACT         # the op if nothing follows, else BAD_FORMAT
    A_EXT_EXACT     # an extension's: the op, with BAD_FORMAT attached if anything follows
    A_ID            # a job id, to the end of the line
    A_NAME          # a tube name, to the end of the line
    A_EXT_NAME      # an extension's " <tube>" (_ext_name)
    A_PUT
    A_RELEASE
    A_BURY
    A_KICK
    A_PAUSE_TUBE
    A_RESERVE
    A_RESERVE_TIMEOUT
    A_RESERVE_BATCH
    A_RETRY_LIMIT
    A_REPRIORITIZE
    A_MOVE
    A_IDS           # delete-batch, delete-each
    A_LIST_TUBE
    A_SCHEDULE
    A_ADVANCE
    MAX_VERBS = 64


cdef struct Verb:
    const char *word
    Py_ssize_t len
    uint64_t head          # its first 8 bytes (fewer: zeros after), as _head8 reads a line's
    uint64_t mask          # the bits of head that count
    int op
    int args


cdef Verb _verbs[MAX_VERBS]
cdef int _nverbs = 0
cdef int _first[257]        # the verbs of first byte c are _verbs[_first[c]:_first[c + 1]]


cdef inline uint64_t _head8(const char *s, Py_ssize_t n) noexcept:
    # s's first 8 bytes (its n, zeros after, if it has fewer) in one word, so
    # that a verb's first 8 bytes are one compare, not a call to memcmp
    cdef uint64_t h = 0
    cdef Py_ssize_t i
    if n >= 8:
        memcpy(&h, s, 8)
    else:
        for i in range(n):
            (<unsigned char *>&h)[i] = <unsigned char>s[i]
    return h


cdef int _verb(const char *word, int op, int args) except -1:
    global _nverbs
    if _nverbs == MAX_VERBS:
        raise RuntimeError("parser.pyx: more verbs than MAX_VERBS")
    _verbs[_nverbs].word = word
    _verbs[_nverbs].len = strlen(word)
    _verbs[_nverbs].head = _head8(word, _verbs[_nverbs].len)
    _verbs[_nverbs].mask = _head8(b"\xff\xff\xff\xff\xff\xff\xff\xff", _verbs[_nverbs].len)
    _verbs[_nverbs].op = op
    _verbs[_nverbs].args = args
    _nverbs += 1
    return 0


cdef int _index() except -1:
    # verbs are listed in order of their first byte; a verb out of order
    # would never be matched
    cdef int c, i = 0
    for c in range(256):
        _first[c] = i
        while i < _nverbs and <unsigned char>_verbs[i].word[0] == c:
            i += 1
    _first[256] = i
    if i != _nverbs:
        raise RuntimeError("parser.pyx: verb %r is out of order" % <bytes>_verbs[i].word)
    return 0


# beanstalkd's verbs and fastbean's (which 1.12 answers UNKNOWN_COMMAND, and
# --strict too), by first byte; within one, in the order they are tried: a
# verb before any verb it is a prefix of, the frequent ones first
_verb(b"bury ", OP_BURY, A_BURY)
_verb(b"delete ", OP_DELETE, A_ID)
_verb(b"delete-batch", OP_DELETE_BATCH, A_IDS)
_verb(b"delete-each", OP_DELETE_EACH, A_IDS)            # delete-batch, the ids not found in the reply
_verb(b"fastbean-stats", OP_EXT, A_EXT_EXACT)
_verb(b"fastbean-reset", OP_TEST_RESET, A_EXT_EXACT)    # --testing's: UNKNOWN_COMMAND without it
_verb(b"fastbean-clock-advance ", OP_TEST_ADVANCE, A_ADVANCE)
_verb(b"flush-tube", OP_FLUSH_TUBE, A_EXT_NAME)
_verb(b"flush-buried", OP_FLUSH_BURIED, A_EXT_NAME)
_verb(b"fire-schedule", OP_FIRE_SCHEDULE, A_EXT_NAME)
_verb(b"ignore ", OP_IGNORE, A_NAME)
_verb(b"kick ", OP_KICK, A_KICK)
_verb(b"kick-job ", OP_KICK_JOB, A_ID)
_verb(b"list-tubes-watched", OP_LIST_TUBES_WATCHED, A_EXACT)
_verb(b"list-tube-used", OP_LIST_TUBE_USED, A_EXACT)
_verb(b"list-tubes", OP_LIST_TUBES, A_EXACT)
_verb(b"list-tube ", OP_LIST_TUBE, A_LIST_TUBE)         # the standard ones above take every other list-tube line
_verb(b"list-schedules", OP_LIST_SCHEDULES, A_EXT_EXACT)
_verb(b"move-job", OP_MOVE_JOB, A_MOVE)
_verb(b"put ", OP_PUT, A_PUT)
_verb(b"peek ", OP_PEEK, A_ID)
_verb(b"peek-ready", OP_PEEK_READY, A_EXACT)
_verb(b"peek-delayed", OP_PEEK_DELAYED, A_EXACT)
_verb(b"peek-buried", OP_PEEK_BURIED, A_EXACT)
_verb(b"pause-tube", OP_PAUSE_TUBE, A_PAUSE_TUBE)
_verb(b"pause-schedule", OP_PAUSE_SCHEDULE, A_EXT_NAME)
_verb(b"quit", OP_QUIT, A_OP)
_verb(b"reserve-with-timeout ", OP_RESERVE_TIMEOUT, A_RESERVE_TIMEOUT)
_verb(b"reserve-job ", OP_RESERVE_JOB, A_ID)
_verb(b"reserve-batch", OP_RESERVE_BATCH, A_RESERVE_BATCH)     # beanstalkd reads it as a bad reserve
_verb(b"reserve", OP_RESERVE, A_RESERVE)
_verb(b"release ", OP_RELEASE, A_RELEASE)
_verb(b"resume-schedule", OP_RESUME_SCHEDULE, A_EXT_NAME)
_verb(b"retry-limit", OP_RETRY_LIMIT, A_RETRY_LIMIT)
_verb(b"reprioritize-job", OP_REPRIORITIZE_JOB, A_REPRIORITIZE)
_verb(b"stats-job ", OP_STATS_JOB, A_ID)
_verb(b"stats-tube ", OP_STATS_TUBE, A_NAME)
_verb(b"stats", OP_STATS, A_EXACT)
_verb(b"schedule", OP_SCHEDULE, A_SCHEDULE)
_verb(b"touch ", OP_TOUCH, A_ID)
_verb(b"use ", OP_USE, A_NAME)
_verb(b"unschedule", OP_UNSCHEDULE, A_EXT_NAME)
_verb(b"watch ", OP_WATCH, A_NAME)
_index()


cdef inline void _parse_line(const char *s, Py_ssize_t n, Cmd *cmd) noexcept:
    # s[0:n] is one command line without its CRLF
    cdef const Verb *v
    cdef int i, last
    cdef uint64_t head
    cmd.op = OP_UNKNOWN
    cmd.err = ERR_NONE
    if memchr(s, 0, n) != NULL:
        cmd.op = OP_BAD_FORMAT
        return
    if n == 0:
        return
    i = _first[<unsigned char>s[0]]
    last = _first[<unsigned char>s[0] + 1]
    head = _head8(s, n)
    while i < last:
        v = &_verbs[i]
        if (n >= v.len and (head & v.mask) == v.head
                and (v.len <= 8 or memcmp(s + 8, v.word + 8, v.len - 8) == 0)):
            _read_args(v, s + v.len, s + n, cmd)
            return
        i += 1


cdef inline void _read_args(const Verb *v, const char *p, const char *end, Cmd *cmd) noexcept:
    # the rest of the line, p to end, as verb v takes it
    cdef uint64_t u
    cdef bint neg
    cdef int r
    cdef int args = v.args
    cdef int op = v.op
    if args == A_PUT:
        p = _read_u32(p, end, &cmd.pri)
        if p != NULL:
            p = _read_u32(p, end, &cmd.delay)
        if p != NULL:
            p = _read_u32(p, end, &cmd.ttr)
        if p != NULL:
            p = _read_u32(p, end, &cmd.nbytes)
        if p == NULL:
            cmd.op = OP_BAD_FORMAT
        else:
            cmd.op = op
            cmd.garbage = p != end
            cmd.name, cmd.name_len = p, end - p     # a tag (idp:KEY) is the engine's to read
    elif args == A_ID:
        cmd.op = op if _last_u64(p, end, &cmd.id) else OP_BAD_FORMAT
    elif args == A_EXACT:
        cmd.op = op if p == end else OP_BAD_FORMAT
    elif args == A_NAME:
        _set_name(cmd, p, end, op)
    elif args == A_RESERVE:
        cmd.op = op if p == end else OP_BAD_FORMAT
        cmd.timeout = -1
    elif args == A_RESERVE_TIMEOUT:
        # 1.12 reads this with strtol into an int: no checks beyond
        # overflow of a long, trailing bytes ignored, value truncated.
        r = _c_strtoul(p, end, &u, &neg)
        if r == -2 or (r == 0 and ((not neg and u > <uint64_t>9223372036854775807) or
                                   (neg and u > <uint64_t>9223372036854775808))):
            cmd.op = OP_BAD_FORMAT
        else:
            cmd.op = op
            if r == -1:
                u = 0
            if neg:
                u = (~u) + 1
            cmd.timeout = <int32_t><uint32_t>u     # the low 32 bits, in C (no Python int)
    elif args == A_RELEASE:
        p = _read_uint(p, end, UINT64_MAX, &cmd.id)
        if p != NULL:
            p = _read_u32(p, end, &cmd.pri)
        cmd.op = op if p != NULL and _last_u32(p, end, &cmd.delay) else OP_BAD_FORMAT
    elif args == A_BURY:
        p = _read_uint(p, end, UINT64_MAX, &cmd.id)
        cmd.op = op if p != NULL and _last_u32(p, end, &cmd.pri) else OP_BAD_FORMAT
    elif args == A_KICK:
        # strtoul with no checks: sign, white space and trailing bytes
        # pass; the count is then an unsigned int.
        r = _c_strtoul(p, end, &u, &neg)
        if r < 0:
            cmd.op = OP_BAD_FORMAT
        else:
            if neg:
                u = (~u) + 1
            cmd.op = op
            cmd.bound = <uint32_t>u
    elif args == A_PAUSE_TUBE:
        # The name is the longest run of name bytes after any spaces;
        # validity (leading '-', length) is checked after the counter moves.
        while p < end and p[0] == c' ':
            p += 1
        cmd.name = p
        while p < end and name_byte(p[0]):
            p += 1
        cmd.name_len = p - cmd.name
        if cmd.name_len == 0 or not _last_u32(p, end, &cmd.delay):
            cmd.op = OP_BAD_FORMAT
        else:
            cmd.op = op
            if not name_ok(cmd.name, cmd.name_len):
                cmd.err = ERR_BAD_FORMAT
    elif args == A_OP:
        cmd.op = op
    elif args == A_SCHEDULE:
        _sched_args(cmd, p, end)
    elif args == A_EXT_NAME:
        _ext_name(cmd, p, end, op)
    else:
        # fastbean's own commands, which beanstalkd answers UNKNOWN_COMMAND:
        # a malformed one keeps its op, with err set, so that --strict (and,
        # for the test-only ones, a server without --testing) can answer
        # UNKNOWN_COMMAND to it as to any unknown line
        cmd.op = op
        if not _ext_args(args, p, end, cmd):
            cmd.err = ERR_BAD_FORMAT


cdef inline bint _ext_args(int args, const char *p, const char *end, Cmd *cmd) noexcept:
    if args == A_EXT_EXACT:
        return p == end
    if args == A_RESERVE_BATCH:
        return _batch_args(cmd, p, end)
    if args == A_IDS:
        return _ids(cmd, p, end)
    if args == A_LIST_TUBE:
        return _list_args(cmd, p, end)
    if args == A_RETRY_LIMIT:
        return _retry_args(cmd, p, end)
    if args == A_REPRIORITIZE:
        return _repri_args(cmd, p, end)
    if args == A_MOVE:
        return _move_args(cmd, p, end)
    if args == A_ADVANCE:
        return _read_seconds(p, end, &cmd.advance_ns)
    return False


cdef inline bint _long_start(const char *p) noexcept:
    # an over-long window (LINE_MAX bytes) that starts a batch line
    return memcmp(p, b"delete-batch ", 13) == 0 or memcmp(p, b"delete-each ", 12) == 0


cdef inline int _scan(const char *p, Py_ssize_t avail, Py_ssize_t *linelen) noexcept:
    # beanstalkd's framing over a window of at most LINE_MAX bytes that starts
    # at a line start: the first CR among the first (window - 1) bytes ends the
    # line if an LF follows, and otherwise nothing in the window ever will.
    # 1: line of linelen bytes (CRLF included); 0: need more; -1: over-long.
    cdef Py_ssize_t size = avail if avail < LINE_MAX else LINE_MAX
    cdef const char *cr
    if size < 2:
        return 0
    cr = <const char *>memchr(p, c'\r', size - 1)
    if cr != NULL and cr[1] == c'\n':
        linelen[0] = cr - p + 2
        return 1
    return -1 if avail >= LINE_MAX else 0


cdef class Parser:

    def __cinit__(self):
        self.cur = b""
        self.cbuf = PyBytes_AS_STRING(self.cur)
        self.cpos = 0
        self.cend = 0
        self.queue = []
        self.qhead = 0
        self.queued = 0
        self.llen = 0
        self.state = S_LINE
        self.skipping_line = False
        self.long_lines = False
        self.body = NULL

    cpdef feed(self, data):
        """Queue bytes from one read. Nothing is parsed until next()."""
        if type(data) is not bytes:
            data = bytes(data)
        if PyBytes_GET_SIZE(data) == 0 or self.state == S_QUIT:
            return
        if self.cpos == self.cend and self.queued == 0:
            self.cur = data
            self.cbuf = PyBytes_AS_STRING(data)
            self.cpos = 0
            self.cend = PyBytes_GET_SIZE(data)
        else:
            self.queue.append(data)
            self.queued += PyBytes_GET_SIZE(data)

    cdef Py_ssize_t buffered(self) noexcept:
        return (self.cend - self.cpos) + self.queued + self.llen + (
            0 if self.long is None else PyByteArray_GET_SIZE(self.long))

    cdef void discard_input(self) noexcept:
        # After quit: nothing more from this connection is looked at.
        self.cur = b""
        self.cbuf = PyBytes_AS_STRING(self.cur)
        self.cpos = self.cend = 0
        self.queue = []
        self.qhead = 0
        self.queued = 0
        self.llen = 0
        self.long = None
        self.body = NULL
        self.need = 0
        self.state = S_QUIT

    cdef bint _long_line(self, Cmd *cmd) except -1:
        # S_LONG: gather the line up to its CRLF, at most LONG_LINE_MAX bytes
        # before it; True with cmd filled once it is whole.
        cdef Py_ssize_t have, take, at
        while self._advance():
            have = PyByteArray_GET_SIZE(self.long)
            take = self.cend - self.cpos
            if take > LONG_LINE_MAX + 2 - have:
                take = LONG_LINE_MAX + 2 - have
            self.long += self.cbuf[self.cpos:self.cpos + take]
            self.cpos += take
            at = self.long.find(b"\r\n", have - 1 if have else 0)
            if at >= 0:
                # bytes past the line came from this chunk: give them back
                self.cpos -= PyByteArray_GET_SIZE(self.long) - at - 2
                self.long_line = bytes(self.long[:at])
                self.long = None
                self.state = S_LINE
                _parse_line(PyBytes_AS_STRING(self.long_line), at, cmd)
                return True
            if PyByteArray_GET_SIZE(self.long) >= LONG_LINE_MAX + 2:
                self.skip_cr = self.long[-1] == 13
                self.long = None
                self.state = S_LONG_SKIP
                return False
        return False

    cdef int _advance(self) except -1:
        # Move to the next queued chunk when the current one is used up.
        if self.cpos < self.cend:
            return True
        if self.queued == 0:
            return False
        data = self.queue[self.qhead]
        self.queue[self.qhead] = None
        self.qhead += 1
        if self.qhead == len(self.queue):
            self.queue = []
            self.qhead = 0
        self.cur = data
        self.cbuf = PyBytes_AS_STRING(data)
        self.cpos = 0
        self.cend = PyBytes_GET_SIZE(data)
        self.queued -= self.cend
        return True

    cdef int next(self, Cmd *cmd) except -1:
        """Fill cmd with the next command; 1 if one is ready, 0 if more bytes are needed."""
        cdef Py_ssize_t n, linelen, take
        cdef int r
        cdef const char *line
        while True:
            if self.state == S_LINE:
                if not self._advance():
                    return 0
                if self.llen == 0:
                    # Fast path: the line lies whole inside the current chunk.
                    n = self.cend - self.cpos
                    r = _scan(self.cbuf + self.cpos, n, &linelen)
                    if r == 1:
                        line = self.cbuf + self.cpos
                        self.cpos += linelen
                    elif r == -1:
                        if self.long_lines and not self.skipping_line and _long_start(self.cbuf + self.cpos):
                            self.long = bytearray(self.cbuf[self.cpos:self.cpos + LINE_MAX])
                            self.state = S_LONG
                        else:
                            self.skipping_line = True
                        self.cpos += LINE_MAX
                        continue
                    else:
                        memcpy(self.lbuf, self.cbuf + self.cpos, n)
                        self.llen = n
                        self.cpos = self.cend
                        continue
                else:
                    # The line straddles chunks: top the window up from this one.
                    take = self.cend - self.cpos
                    if take > LINE_MAX - self.llen:
                        take = LINE_MAX - self.llen
                    memcpy(self.lbuf + self.llen, self.cbuf + self.cpos, take)
                    self.cpos += take
                    self.llen += take
                    r = _scan(self.lbuf, self.llen, &linelen)
                    if r == 1:
                        # Bytes past the line came from this chunk: give them back.
                        self.cpos -= self.llen - linelen
                        self.llen = 0
                        line = self.lbuf
                    elif r == -1:
                        if self.long_lines and not self.skipping_line and _long_start(self.lbuf):
                            self.long = bytearray(self.lbuf[:LINE_MAX])
                            self.state = S_LONG
                        else:
                            self.skipping_line = True
                        self.llen = 0
                        continue
                    else:
                        continue
                if self.skipping_line:
                    self.skipping_line = False
                    cmd.op = OP_BAD_FORMAT
                    cmd.err = ERR_NONE
                    return 1
                _parse_line(line, linelen - 2, cmd)
                if cmd.op == OP_PUT or (cmd.op == OP_SCHEDULE and not cmd.garbage):
                    self.state = S_DECIDE
                elif cmd.op == OP_QUIT:
                    self.discard_input()
                    self.state = S_QUIT
                return 1
            elif self.state == S_BODY:
                # the body may also have come straight into place (body_room)
                while self.need and self._advance():
                    take = self.cend - self.cpos
                    if take > self.need:
                        take = self.need
                    memcpy(self.body + self.filled, self.cbuf + self.cpos, take)
                    self.cpos += take
                    self.filled += take
                    self.need -= take
                if self.need:
                    return 0
                self.state = S_LINE
                cmd.op = OP_PUT_BODY
                line = self.body + self.filled - 2
                if line[0] == c'\r' and line[1] == c'\n':
                    cmd.err = ERR_NONE
                    cmd.body = self.body
                else:
                    cmd.err = ERR_EXPECTED_CRLF
                    cmd.body = NULL
                self.body = NULL
                return 1
            elif self.state == S_DISCARD:
                while self.need and self._advance():
                    take = self.cend - self.cpos
                    if take > self.need:
                        take = self.need
                    self.cpos += take
                    self.need -= take
                if self.need:
                    return 0
                self.state = S_LINE
                cmd.op = OP_SKIPPED
                cmd.err = self.skip_err
                return 1
            elif self.state == S_LONG:
                if self._long_line(cmd):
                    return 1
                if self.state == S_LONG:
                    return 0
            elif self.state == S_LONG_SKIP:
                while self._advance():
                    line = <const char *>memchr(self.cbuf + self.cpos, c'\n', self.cend - self.cpos)
                    if line == NULL:
                        self.skip_cr = self.cbuf[self.cend - 1] == c'\r'
                        self.cpos = self.cend
                        continue
                    take = line - (self.cbuf + self.cpos)
                    if (take == 0 and self.skip_cr) or (take > 0 and line[-1] == c'\r'):
                        self.cpos += take + 1
                        self.state = S_LINE
                        cmd.op = OP_BAD_FORMAT
                        cmd.err = ERR_NONE
                        return 1
                    self.skip_cr = False
                    self.cpos += take + 1
                return 0
            elif self.state == S_QUIT:
                return 0
            else:
                raise RuntimeError("Parser.next() called before a put was accepted or rejected")

    cdef void accept_body(self, char *dest, Py_ssize_t n) noexcept:
        """Read the next n bytes (body + CRLF) of the put just returned into
        dest, which the caller owns and keeps until the body is complete or
        discard_input() is called."""
        self.body = dest
        self.need = n
        self.filled = 0
        self.state = S_BODY

    cdef void reject_body(self, Py_ssize_t n, int err) noexcept:
        """Swallow the next n bytes, then report err (OP_SKIPPED)."""
        self.need = n
        self.skip_err = err
        self.state = S_DISCARD

    cdef Py_ssize_t body_room(self, char **dest) noexcept:
        """Where the rest of the body in progress goes and how many bytes it
        still needs, when those are the very next bytes of the stream (no
        unparsed input is waiting); otherwise 0. A read can go straight there
        (body_filled), with no chunk in between."""
        if self.state != S_BODY or self.cpos != self.cend or self.queued or self.llen:
            return 0
        dest[0] = self.body + self.filled
        return self.need

    cdef void body_filled(self, Py_ssize_t n) noexcept:
        """n bytes were read straight into body_room()'s place."""
        self.filled += n
        self.need -= n

    cdef void no_body(self) noexcept:
        """The put was refused outright: what follows its line is commands again."""
        self.state = S_LINE

    # -- cold API for tests and tools -----------------------------------------

    def parse(self, data, accept=None, tagged=None, schedules=True):
        """Feed data and return the commands now complete as tuples.

        Put bodies are accepted when accept(nbytes) is true (default: always),
        otherwise swallowed and reported as ('SKIPPED', 'JOB_TOO_BIG'). A put
        with bytes after its size has no body (beanstalkd's BAD_FORMAT),
        unless tagged(those bytes) is true (an extension's tag, idp:KEY).
        A schedule line's body is read as a put's, unless schedules is false
        (--strict: beanstalkd reads it as a command).
        """
        cdef Cmd cmd
        out = []
        self.feed(data)
        while self.next(&cmd):
            if cmd.op == OP_PUT_BODY:
                out.append(("body", ERR_NAMES[cmd.err], None if cmd.body == NULL else self.owner))
                self.owner = None
            else:
                out.append(_cmd_tuple(&cmd))
            if self.state == S_DECIDE:
                if cmd.op == OP_SCHEDULE and not schedules:
                    self.no_body()
                elif accept is not None and not accept(cmd.nbytes):
                    self.reject_body(<Py_ssize_t>cmd.nbytes + 2, ERR_JOB_TOO_BIG)
                elif cmd.garbage and (tagged is None or not tagged(cmd.name[:cmd.name_len])):
                    self.no_body()
                else:
                    self.owner = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>cmd.nbytes + 2)
                    self.accept_body(PyBytes_AS_STRING(self.owner), <Py_ssize_t>cmd.nbytes + 2)
        return out


OP_NAMES = {
    OP_PUT: "put", OP_PEEK: "peek", OP_PEEK_READY: "peek-ready",
    OP_PEEK_DELAYED: "peek-delayed", OP_PEEK_BURIED: "peek-buried",
    OP_RESERVE: "reserve", OP_RESERVE_TIMEOUT: "reserve-with-timeout",
    OP_DELETE: "delete", OP_RELEASE: "release", OP_USE: "use", OP_WATCH: "watch",
    OP_IGNORE: "ignore", OP_BURY: "bury", OP_KICK: "kick", OP_TOUCH: "touch",
    OP_STATS: "stats", OP_STATS_JOB: "stats-job", OP_STATS_TUBE: "stats-tube",
    OP_LIST_TUBES: "list-tubes", OP_LIST_TUBE_USED: "list-tube-used",
    OP_LIST_TUBES_WATCHED: "list-tubes-watched", OP_PAUSE_TUBE: "pause-tube",
    OP_RESERVE_JOB: "reserve-job", OP_KICK_JOB: "kick-job", OP_QUIT: "quit",
    OP_PUT_BODY: "body", OP_SKIPPED: "skipped", OP_UNKNOWN: "UNKNOWN_COMMAND",
    OP_BAD_FORMAT: "BAD_FORMAT", OP_EXT: "fastbean-stats", OP_TEST_RESET: "fastbean-reset",
    OP_TEST_ADVANCE: "fastbean-clock-advance", OP_FLUSH_TUBE: "flush-tube",
    OP_FLUSH_BURIED: "flush-buried", OP_LIST_TUBE: "list-tube", OP_RESERVE_BATCH: "reserve-batch",
    OP_DELETE_BATCH: "delete-batch", OP_RETRY_LIMIT: "retry-limit", OP_DELETE_EACH: "delete-each",
    OP_MOVE_JOB: "move-job", OP_REPRIORITIZE_JOB: "reprioritize-job",
    OP_SCHEDULE: "schedule", OP_UNSCHEDULE: "unschedule", OP_LIST_SCHEDULES: "list-schedules",
    OP_FIRE_SCHEDULE: "fire-schedule", OP_PAUSE_SCHEDULE: "pause-schedule",
    OP_RESUME_SCHEDULE: "resume-schedule",
}
ERR_NAMES = {ERR_NONE: None, ERR_BAD_FORMAT: "BAD_FORMAT", ERR_EXPECTED_CRLF: "EXPECTED_CRLF",
             ERR_JOB_TOO_BIG: "JOB_TOO_BIG", ERR_OUT_OF_MEMORY: "OUT_OF_MEMORY",
             ERR_DRAINING: "DRAINING"}


cdef tuple _cmd_tuple(Cmd *cmd):
    # A plain description of a command, for tests: (op, err, args...).
    cdef int op = cmd.op
    name = OP_NAMES[op]
    err = ERR_NAMES[cmd.err]
    if op == OP_PUT:
        # the bytes after the size last: b"" unless it is garbage (or a tag)
        return (name, err, cmd.pri, cmd.delay, cmd.ttr, cmd.nbytes, cmd.name[:cmd.name_len])
    if op in (OP_PEEK, OP_DELETE, OP_RESERVE_JOB, OP_KICK_JOB, OP_TOUCH, OP_STATS_JOB):
        return (name, err, cmd.id)
    if op == OP_RELEASE:
        return (name, err, cmd.id, cmd.pri, cmd.delay)
    if op == OP_BURY:
        return (name, err, cmd.id, cmd.pri)
    if op == OP_KICK:
        return (name, err, cmd.bound)
    if op == OP_RESERVE_TIMEOUT:
        return (name, err, cmd.timeout)
    if (op == OP_DELETE_BATCH or op == OP_DELETE_EACH) and err is None:
        return (name, err, tuple(int(w) for w in cmd.name[:cmd.name_len].split(b" ")))
    if op == OP_RETRY_LIMIT and err is None:
        return (name, err, cmd.list_state, cmd.bound, cmd.name[:cmd.name_len] if cmd.name_len else None)
    if op == OP_MOVE_JOB and err is None:
        return (name, err, cmd.id, cmd.name[:cmd.name_len])
    if op == OP_REPRIORITIZE_JOB and err is None:
        return (name, err, cmd.id, cmd.pri)
    if op == OP_RESERVE_BATCH and err is None:
        return (name, err, cmd.bound, cmd.delay)
    if op == OP_LIST_TUBE and err is None:
        return (name, err, cmd.list_state, cmd.after_key, cmd.after_id, cmd.bound)
    if op == OP_SCHEDULE:
        # the size (None: no body follows), then the words for the engine
        return (name, err, None if cmd.garbage else cmd.nbytes, cmd.name[:cmd.name_len])
    if op in (OP_FLUSH_TUBE, OP_FLUSH_BURIED, OP_UNSCHEDULE, OP_FIRE_SCHEDULE, OP_PAUSE_SCHEDULE,
              OP_RESUME_SCHEDULE) and err is None:
        return (name, err, cmd.name[:cmd.name_len])
    if op in (OP_USE, OP_WATCH, OP_IGNORE, OP_STATS_TUBE):
        return (name, err, cmd.name[:cmd.name_len])
    if op == OP_PAUSE_TUBE:
        return (name, err, cmd.name[:cmd.name_len], cmd.delay)
    if op == OP_TEST_ADVANCE and err is None:
        return (name, err, cmd.advance_ns)
    return (name, err)
