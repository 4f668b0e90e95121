# The beanstalk protocol as the compiled modules see it: opcodes, the
# parsed command, line and name limits, the tube-name rule, and every fixed
# reply text. The parser (parser.pyx) fills Cmd structs; the engine
# (core.pyx) runs them and answers with the texts below. Header only.

from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t

cdef enum:
    LINE_MAX = 224          # bytes, CRLF included (11 + 201 + 12: the longest pause-tube)
    NAME_MAX = 200          # bytes of a tube name
    LIST_MAX = 1000         # jobs in one page of list-tube
    BATCH_MAX = 1000        # jobs one reserve-batch takes, ids one delete-batch names, as tuber's

# The states list-tube names: the same numbers as the engine's JobState.
cdef enum ListState:
    LIST_READY = 1
    LIST_RESERVED = 2
    LIST_BURIED = 3
    LIST_DELAYED = 4

# What a retry-limit line asks (Cmd.list_state).
cdef enum RetryAsk:
    RETRY_SHOW = 0          # the tube in use's limit
    RETRY_SET = 1           # set it: bound, and name (a dead-letter tube) or none (bury)
    RETRY_DEFAULT = 2       # back to the server's default (--retry-limit)

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
    # test-only commands, refused with UNKNOWN_COMMAND unless --testing (testing.pxi)
    OP_TEST_RESET = 30        # fastbean-reset
    OP_TEST_ADVANCE = 31      # fastbean-clock-advance SECONDS[.FRACTION]
    # Protocol extensions (docs/protocol-extensions.md), from OP_EXT on:
    # --strict answers them all UNKNOWN_COMMAND, as beanstalkd does.
    OP_EXT = 32               # fastbean-stats
    OP_FLUSH_TUBE = 33        # flush-tube <tube> (flush.pxi)
    OP_FLUSH_BURIED = 34      # flush-buried <tube>
    OP_LIST_TUBE = 35         # list-tube <state> <cursor> <count> (list.pxi)
    OP_RESERVE_BATCH = 36     # reserve-batch <count> [<timeout>] (queue.pxi)
    OP_DELETE_BATCH = 37      # delete-batch <id>... (cmds.pxi)
    OP_RETRY_LIMIT = 38       # retry-limit [<count> [<tube>] | default] (retry.pxi)
    OP_DELETE_EACH = 39       # delete-each <id>... (cmds.pxi)
    OP_MOVE_JOB = 40          # move-job <id> <tube> (cmds.pxi, queue.pxi's job_move)
    OP_REPRIORITIZE_JOB = 41  # reprioritize-job <id> <pri> (cmds.pxi)
    # schedules (sched.pxi): schedule <name> <pri> <ttr> <misfire> <bytes> <spec>
    # (its body follows as a put's), and the others on a schedule's name
    OP_SCHEDULE = 42
    OP_UNSCHEDULE = 43        # unschedule <name>
    OP_LIST_SCHEDULES = 44    # list-schedules
    OP_FIRE_SCHEDULE = 45     # fire-schedule <name>
    OP_PAUSE_SCHEDULE = 46    # pause-schedule <name>
    OP_RESUME_SCHEDULE = 47   # resume-schedule <name>
    OP_COUNT = 48


cdef inline bint is_extension(int op) noexcept nogil:
    return OP_EXT <= op < OP_COUNT


cdef inline bint rejected_by_beanstalkd_as_bad_format(int op) noexcept nogil:
    # beanstalkd reads every line that starts with "reserve" but is not a
    # reserve as a bad one: --strict answers reserve-batch so too
    return op == OP_RESERVE_BATCH


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
    uint32_t pri              # put, release, bury, reprioritize-job
    uint32_t delay            # seconds (put, release, pause-tube; reserve-batch's timeout)
    uint32_t ttr              # seconds
    uint32_t nbytes           # declared body size of a put
    int32_t timeout           # reserve-with-timeout, as 1.12's signed int; <0 waits forever
    uint32_t bound            # kick; list-tube's and reserve-batch's count
    int list_state            # list-tube: a ListState
    uint64_t after_key        # list-tube's cursor: the page starts after (key, id); (0, 0) first
    uint64_t after_id
    int64_t advance_ns        # fastbean-clock-advance
    # put: bytes after the size field (name/name_len: those bytes); schedule:
    # no size could be read, so no body follows
    bint garbage
    # tube name (delete-batch: its ids; move-job: the new tube; schedule: all
    # its words), borrowed until the next Parser call
    const char *name
    Py_ssize_t name_len
    const char *body          # OP_PUT_BODY: the body, where accept_body() was told; NULL without its CRLF


# Tube names (protocol.txt "Names"): 1 to NAME_MAX of these bytes, not
# starting with '-'. The parser checks names on the wire, replay in binlog files.
cdef inline bint name_byte(char c) noexcept nogil:
    return ((c'a' <= c <= c'z') or (c'A' <= c <= c'Z') or (c'0' <= c <= c'9')
            or c == c'-' or c == c'+' or c == c'/' or c == c';' or c == c'.'
            or c == c'$' or c == c'_' or c == c'(' or c == c')')


cdef inline bint name_ok(const char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if n < 1 or n > NAME_MAX or p[0] == c'-':
        return False
    for i in range(n):
        if not name_byte(p[i]):
            return False
    return True


# Reply texts. Each is a Text: the bytes and their length, which the C
# compiler counts (sizeof of the literal), so no length is written by hand.
cdef extern from *:
    """
    typedef struct { const char *s; Py_ssize_t n; } fb_text;
    #define FB_TEXT(lit) ((fb_text){(lit), (Py_ssize_t)(sizeof(lit) - 1)})
    #define MSG_BAD_FORMAT      FB_TEXT("BAD_FORMAT\\r\\n")
    #define MSG_EXPECTED_CRLF   FB_TEXT("EXPECTED_CRLF\\r\\n")
    #define MSG_JOB_TOO_BIG     FB_TEXT("JOB_TOO_BIG\\r\\n")
    #define MSG_OUT_OF_MEMORY   FB_TEXT("OUT_OF_MEMORY\\r\\n")
    #define MSG_DRAINING        FB_TEXT("DRAINING\\r\\n")
    #define MSG_INTERNAL_ERROR  FB_TEXT("INTERNAL_ERROR\\r\\n")
    #define MSG_UNKNOWN_COMMAND FB_TEXT("UNKNOWN_COMMAND\\r\\n")
    #define MSG_RESET           FB_TEXT("RESET\\r\\n")
    #define MSG_SCHEDULED       FB_TEXT("SCHEDULED\\r\\n")
    #define MSG_REPLACED        FB_TEXT("REPLACED\\r\\n")
    #define MSG_UNSCHEDULED     FB_TEXT("UNSCHEDULED\\r\\n")
    #define MSG_RESUMED         FB_TEXT("RESUMED\\r\\n")
    #define MSG_NOT_FOUND       FB_TEXT("NOT_FOUND\\r\\n")
    #define MSG_DELETED         FB_TEXT("DELETED\\r\\n")
    #define MSG_RELEASED        FB_TEXT("RELEASED\\r\\n")
    #define MSG_BURIED          FB_TEXT("BURIED\\r\\n")
    #define MSG_TOUCHED         FB_TEXT("TOUCHED\\r\\n")
    #define MSG_KICKED          FB_TEXT("KICKED\\r\\n")
    #define MSG_MOVED           FB_TEXT("MOVED\\r\\n")
    #define MSG_REPRIORITIZED   FB_TEXT("REPRIORITIZED\\r\\n")
    #define MSG_PAUSED          FB_TEXT("PAUSED\\r\\n")
    #define MSG_NOT_IGNORED     FB_TEXT("NOT_IGNORED\\r\\n")
    #define MSG_DEADLINE_SOON   FB_TEXT("DEADLINE_SOON\\r\\n")
    #define MSG_TIMED_OUT       FB_TEXT("TIMED_OUT\\r\\n")
    #define MSG_CRLF            FB_TEXT("\\r\\n")
    /* the words before a number, a job or a name */
    #define MSG_INSERTED        FB_TEXT("INSERTED")
    #define MSG_WATCHING        FB_TEXT("WATCHING")
    #define MSG_KICKED_N        FB_TEXT("KICKED")
    #define MSG_RESERVED        FB_TEXT("RESERVED")
    #define MSG_FOUND           FB_TEXT("FOUND")
    #define MSG_USING           FB_TEXT("USING ")
    #define MSG_ADVANCED        FB_TEXT("ADVANCED")
    #define MSG_FLUSHED         FB_TEXT("FLUSHED")
    #define MSG_LISTED          FB_TEXT("LISTED")
    #define MSG_RESERVED_BATCH  FB_TEXT("RESERVED_BATCH")
    #define MSG_DELETED_BATCH   FB_TEXT("DELETED_BATCH")
    #define MSG_FIRED           FB_TEXT("FIRED")
    """
    ctypedef struct Text "fb_text":
        const char *s
        Py_ssize_t n
    Text MSG_BAD_FORMAT, MSG_EXPECTED_CRLF, MSG_JOB_TOO_BIG, MSG_OUT_OF_MEMORY, MSG_DRAINING
    Text MSG_INTERNAL_ERROR, MSG_UNKNOWN_COMMAND, MSG_NOT_FOUND, MSG_DELETED, MSG_RELEASED
    Text MSG_BURIED, MSG_TOUCHED, MSG_KICKED, MSG_PAUSED, MSG_NOT_IGNORED, MSG_DEADLINE_SOON
    Text MSG_TIMED_OUT, MSG_CRLF, MSG_RESET, MSG_MOVED, MSG_REPRIORITIZED
    Text MSG_SCHEDULED, MSG_REPLACED, MSG_UNSCHEDULED, MSG_RESUMED, MSG_FIRED
    Text MSG_INSERTED, MSG_WATCHING, MSG_KICKED_N, MSG_RESERVED, MSG_FOUND, MSG_USING, MSG_ADVANCED
    Text MSG_FLUSHED, MSG_LISTED, MSG_RESERVED_BATCH, MSG_DELETED_BATCH


cdef inline Text err_text(int err) noexcept nogil:
    # the reply to a command that carries a parser or engine error
    if err == ERR_BAD_FORMAT:
        return MSG_BAD_FORMAT
    if err == ERR_EXPECTED_CRLF:
        return MSG_EXPECTED_CRLF
    if err == ERR_JOB_TOO_BIG:
        return MSG_JOB_TOO_BIG
    if err == ERR_OUT_OF_MEMORY:
        return MSG_OUT_OF_MEMORY
    if err == ERR_DRAINING:
        return MSG_DRAINING
    return MSG_INTERNAL_ERROR
