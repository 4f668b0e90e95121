# Incremental beanstalk command parser: bytes in, Cmd structs out.
#
# One Parser per connection. feed() hands it whatever one read returned; the
# engine then pulls commands with next() until it returns 0 (need more bytes).
# Client mistakes come back as opcodes (OP_BAD_FORMAT, ...), never as Python
# exceptions. The framing rules are beanstalkd 1.12's (reference notes §1.1):
# a line is complete at the first CR if an LF follows it, and a line with no
# usable CRLF in its first 224 bytes is dropped up to the next CRLF, which is
# then answered with a single BAD_FORMAT.

from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t
from cpython.object cimport PyObject

cdef enum:
    LINE_MAX = 224          # bytes, CRLF included (11 + 201 + 12: the longest pause-tube)
    NAME_MAX = 200          # bytes of a tube name

# Opcodes. The order of the command ops is the order of beanstalkd's stats
# counters, so cmd_ct[op] can be printed by walking a range.
cdef enum Op:
    OP_NONE = 0
    OP_PUT = 1
    OP_PEEK = 2               # peek <id>
    OP_PEEK_READY = 3
    OP_PEEK_DELAYED = 4
    OP_PEEK_BURIED = 5
    OP_RESERVE = 6
    OP_RESERVE_TIMEOUT = 7
    OP_DELETE = 8
    OP_RELEASE = 9
    OP_USE = 10
    OP_WATCH = 11
    OP_IGNORE = 12
    OP_BURY = 13
    OP_KICK = 14
    OP_TOUCH = 15
    OP_STATS = 16
    OP_STATS_JOB = 17
    OP_STATS_TUBE = 18
    OP_LIST_TUBES = 19
    OP_LIST_TUBE_USED = 20
    OP_LIST_TUBES_WATCHED = 21
    OP_PAUSE_TUBE = 22
    # commands with no stats counter
    OP_RESERVE_JOB = 23
    OP_KICK_JOB = 24
    OP_QUIT = 25
    # parser events
    OP_PUT_BODY = 26          # a put body is complete (cmd.body) or lacked its CRLF (cmd.err)
    OP_SKIPPED = 27           # a rejected body was swallowed; reply cmd.err now
    OP_UNKNOWN = 28           # UNKNOWN_COMMAND
    OP_BAD_FORMAT = 29        # BAD_FORMAT that counts for no command
    OP_EXT = 30               # fastbean's own extension command (see ext_* fields)
    # test-only commands, refused with UNKNOWN_COMMAND unless --testing (_testing.pxi)
    OP_TEST_RESET = 31        # fastbean-reset
    OP_TEST_ADVANCE = 32      # fastbean-clock-advance SECONDS[.FRACTION]
    OP_COUNT = 33

# Errors attached to a recognised command (the command's counter still moves).
cdef enum Err:
    ERR_NONE = 0
    ERR_BAD_FORMAT = 1
    ERR_EXPECTED_CRLF = 2
    ERR_JOB_TOO_BIG = 3
    ERR_OUT_OF_MEMORY = 4
    ERR_DRAINING = 5

ctypedef struct Cmd:
    int op
    int err
    uint64_t id               # job id (peek, delete, release, bury, touch, kick-job, ...)
    uint32_t pri
    uint32_t delay            # seconds (put, release, pause-tube)
    uint32_t ttr              # seconds
    uint32_t nbytes           # declared body size of a put
    int32_t timeout           # reserve-with-timeout, as 1.12's signed int; <0 waits forever
    uint32_t bound            # kick
    int64_t advance_ns        # fastbean-clock-advance
    bint garbage              # put: bytes after the size field
    const char *name          # tube name, borrowed until the next Parser call
    Py_ssize_t name_len
    PyObject *body            # OP_PUT_BODY: a new reference the caller must take or drop


cdef class Parser:
    # Input not yet parsed: the chunk being read, then further chunks.
    cdef object cur               # bytes being parsed (owned)
    cdef const char *cbuf         # its data
    cdef Py_ssize_t cpos, cend
    cdef list queue               # later chunks, oldest first
    cdef Py_ssize_t qhead
    cdef Py_ssize_t queued        # bytes held in queue[qhead:]

    # The current line when it straddles chunks (at most LINE_MAX bytes).
    cdef char lbuf[LINE_MAX]
    cdef Py_ssize_t llen

    cdef int state
    cdef bint skipping_line       # dropping an over-long line up to its CRLF

    # Body of a put in progress, or bytes being swallowed.
    cdef object body              # bytes of nbytes + 2, filled in place
    cdef Py_ssize_t need          # bytes still to come into body / to discard
    cdef Py_ssize_t filled
    cdef int skip_err

    cpdef feed(self, data)
    cdef Py_ssize_t buffered(self) noexcept
    cdef int next(self, Cmd *cmd) except -1
    cdef int accept_body(self, Py_ssize_t n) except -1
    cdef void reject_body(self, Py_ssize_t n, int err) noexcept
    cdef void no_body(self) noexcept
    cdef void discard_input(self) noexcept
    cdef int _advance(self) except -1
