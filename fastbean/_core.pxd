# The queue engine: jobs, tubes, reservations, timers and counters.
#
# Sans-IO: it never touches a socket or a file. A connection hands it bytes
# (Conn.feed), it runs every complete command in compiled code and writes the
# replies through the transport callables the connection gave it. Binlog
# records go into an in-memory buffer that the Python layer drains once per
# loop turn (binlog.py).
#
# Time is CLOCK_MONOTONIC nanoseconds for every deadline ("mono ns"), and
# CLOCK_REALTIME nanoseconds only where beanstalkd shows or stores wall time
# (job creation, binlog deadlines).

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t
from cpython.object cimport PyObject

from fastbean._parser cimport Parser, Cmd


# Reply latency is kept per command family (metrics.py names them; see
# _metrics.pxi for which command is in which).
cdef enum:
    LAT_PUT = 0
    LAT_RESERVE = 1
    LAT_DELETE = 2
    LAT_JOB = 3               # release, bury, touch, kick, kick-job
    LAT_PEEK = 4
    LAT_TUBE = 5              # use, watch, ignore, list-tube-used, pause-tube
    LAT_STATS = 6             # stats*, list-tubes*, fastbean-stats
    LAT_OTHER = 7             # unknown commands, bad format
    LAT_FAMILIES = 8
    LAT_NONE = 8              # not timed: a put line (its body is), quit
    LAT_BUCKETS = 21          # _hist.h's FB_LATENCY_BOUNDS + the +Inf bucket


cdef enum JobState:
    JOB_INVALID = 0           # values are the binlog's (reference §4.2)
    JOB_READY = 1
    JOB_RESERVED = 2
    JOB_BURIED = 3
    JOB_DELAYED = 4


# A binary min-heap of pointers. Each element records its own index through
# setpos, so removal from the middle is O(log n).
ctypedef bint (*heap_less_fn)(void *a, void *b) noexcept nogil
ctypedef void (*heap_setpos_fn)(void *a, Py_ssize_t i) noexcept nogil

ctypedef struct Heap:
    void **items
    Py_ssize_t len
    Py_ssize_t cap
    heap_less_fn less
    heap_setpos_fn setpos


ctypedef struct Tube

ctypedef struct Job:
    uint64_t id
    uint32_t pri
    uint8_t state             # JobState
    Py_ssize_t heap_index     # in tube.ready, tube.delay or core.ttr_heap, by state
    int64_t delay_ns          # the delay of the last put/release, as stats-job shows it
    int64_t ttr_ns            # >= 1 s
    int64_t created_wall      # wall ns; stats-job age and the binlog
    int64_t deadline          # mono ns: end of the delay (delayed) or of the TTR (reserved)
    uint32_t reserve_ct
    uint32_t timeout_ct
    uint32_t release_ct
    uint32_t bury_ct
    uint32_t kick_ct
    Job *prev                 # links in the tube's buried list or the owner's reserved list
    Job *next
    Job *ht_next              # chain in the id table
    Tube *tube                # holds a reference (tube.refs)
    PyObject *owner           # the reserving Conn while reserved (borrowed; it outlives the job's reservation)
    PyObject *body            # owned bytes: the body followed by CRLF
    int64_t wal_file          # binlog file holding the job's latest full record; 0 if none
    Job *wal_prev             # links in that file's list of owned jobs
    Job *wal_next


# Id -> Job. Chained buckets with incremental resizing: while a resize is
# in progress both tables are live and every operation moves a few buckets,
# so no single call ever rehashes the whole table (beanstalkd's stall).
ctypedef struct JobTable:
    Job **t0
    Py_ssize_t mask0          # size - 1 (power of two)
    Job **t1                  # the table being grown into, or NULL
    Py_ssize_t mask1
    Py_ssize_t moved          # buckets of t0 already moved to t1
    Py_ssize_t count


# A waiting connection's entry in a tube's waiting array, and the matching
# watch entry in the connection: each records the other's index, so leaving
# every watched tube's waiting set is O(watched).
ctypedef struct Waiter:
    PyObject *conn            # borrowed Conn
    Py_ssize_t slot           # index of this tube in conn.watch

ctypedef struct Watch:
    Tube *tube
    Py_ssize_t wpos           # index in tube.waiting while the conn waits


# Binlog record layout, version 7 on x86-64 (reference notes §4.2): natural
# alignment gives exactly beanstalkd's 80 bytes.
ctypedef struct Jobrec:
    uint64_t id
    uint32_t pri
    uint32_t pad0
    int64_t delay             # ns
    int64_t ttr               # ns
    int32_t body_size         # body + CRLF
    int32_t pad1
    int64_t created_at        # wall ns
    int64_t deadline_at       # wall ns
    uint32_t reserve_ct
    uint32_t timeout_ct
    uint32_t release_ct
    uint32_t bury_ct
    uint32_t kick_ct
    uint8_t state
    uint8_t pad2[3]


# One binlog file as the engine sees it: which live jobs it holds the latest
# full record of. A file can be deleted once it and every older file hold none.
ctypedef struct WalFile:
    int64_t seq
    Py_ssize_t njobs
    Job *head


# A waiting connection's place in core.conn_timers (embedded in Conn).
ctypedef struct ConnTimer:
    int64_t at                # mono ns: reserve timeout or start of the DEADLINE_SOON margin
    Py_ssize_t index          # in core.conn_timers, or -1
    PyObject *conn            # the Conn that embeds this (borrowed)


ctypedef struct Tube:
    PyObject *name            # owned bytes
    Py_ssize_t refs           # jobs + users + watchers (+1 for default)
    Py_ssize_t list_index     # position in core.tubes (list-tubes order)
    Heap ready                # jobs by (pri, id)
    Heap delay                # jobs by (deadline, id)
    Job *buried_head          # oldest buried first
    Job *buried_tail
    Py_ssize_t buried_ct
    Py_ssize_t reserved_ct
    Py_ssize_t urgent_ct      # ready jobs with pri < 1024
    uint64_t total_jobs
    uint64_t cmd_delete
    uint64_t cmd_pause
    Py_ssize_t using_ct
    Py_ssize_t watching_ct
    Waiter *waiting           # connections blocked in reserve that watch this tube
    Py_ssize_t nwaiting
    Py_ssize_t capwaiting
    Py_ssize_t wrot           # beanstalkd's rotating pick index (reference §3.5)
    int64_t pause_ns          # configured pause; 0 when not paused
    int64_t unpause_at        # mono ns
    Py_ssize_t timer_index    # in core.tube_timers, or -1
    int64_t timer_at          # mono ns: next delayed job due or pause end
    Py_ssize_t elig_index     # in core.eligible, or -1


cdef class Core:
    cdef JobTable jobs
    cdef uint64_t next_id
    cdef dict tube_by_name        # bytes -> address of a Tube
    cdef Tube **tubes             # list-tubes order
    cdef Py_ssize_t ntubes, captubes
    cdef Tube *default_tube

    # Timers: tubes by their next event, reserved jobs by TTR end, waiting
    # connections by reserve timeout / DEADLINE_SOON.
    cdef Heap tube_timers
    cdef Heap ttr_heap
    cdef Heap conn_timers
    cdef int64_t armed_at         # mono ns the Python timer is armed for; INT64_MAX if none
    cdef object arm               # arm(delay_seconds) re-arms the Python timer

    # Tubes that have both ready jobs and waiting connections and are not paused.
    cdef Tube **eligible
    cdef Py_ssize_t neligible, capeligible

    # Connections with output produced outside their own feed(), to flush.
    cdef list dirty

    # Counters behind stats.
    cdef uint64_t cmd_ct[32]
    cdef uint64_t job_timeouts
    cdef uint64_t total_jobs
    cdef Py_ssize_t ready_ct, urgent_ct, reserved_ct, delayed_ct, buried_ct
    cdef Py_ssize_t conn_ct, producer_ct, worker_ct, waiting_ct
    cdef uint64_t total_conns

    # Limits and modes.
    cdef public Py_ssize_t max_job_size
    cdef public bint draining
    cdef public Py_ssize_t max_memory      # bytes of jobs; 0 = no cap
    cdef public Py_ssize_t mem_used        # bytes of jobs held now
    cdef Py_ssize_t mem_peak               # most job bytes held since the last malloc_trim
    cdef bint trim_due                     # a backlog drained: trim on the next tick
    cdef public int batch_limit            # commands per connection per feed

    # () -> bytes of "name: value\n" lines that fastbean-stats appends (replication.py)
    cdef public object ext_stats

    # Identity for stats.
    cdef int64_t started_mono
    cdef bytes instance_id
    cdef bytes hostname, os_version, machine, version

    # Binlog. Python (binlog.py) owns the files; the engine encodes records
    # into wbuf, keeps the space accounting and knows which file holds what.
    cdef public bint wal_on
    cdef bytearray wba                # records not yet handed to binlog.py
    cdef uint64_t wal_seq             # records appended so far
    cdef uint64_t durable_seq         # records binlog.py has made durable (per -f)
    cdef bint commit_asked            # binlog.schedule() called since the last take_wal()
    cdef public bint commit_eager     # binlog.py: commit as soon as the turn's reads have run
    cdef uint64_t debug_cmds          # commands run (debug builds check structures as they go)
    cdef list held                    # connections whose replies wait for durability
    cdef public object binlog         # rotate(need) -> capacity, schedule(), oldest_index, current_index
    cdef public Py_ssize_t binlog_max_size   # -s, shown in stats even without -b
    cdef int64_t wal_cap              # bytes the current file can hold
    cdef int64_t wal_used             # bytes of it used (written or in wbuf)
    cdef int64_t wal_resv             # bytes promised to live jobs' future delete records
    cdef int64_t wal_live             # bytes of the live jobs' latest full records
    cdef uint64_t wal_written, wal_migrated
    cdef WalFile *wfiles              # oldest first; the last is the current file
    cdef Py_ssize_t nwfiles, capwfiles
    cdef Job *replay_head             # jobs read by replay, in order of first appearance
    cdef Job *replay_tail
    cdef uint64_t replay_max_id

    # Busy polling: busypoll.py keeps its state here (fastbean-stats shows it).
    # reads counts feeds; the first read after the poller let the loop sleep
    # calls on_wake.
    cdef public uint64_t reads
    cdef public bint sleeping
    cdef public object on_wake
    cdef public int64_t poll_max_ns, poll_window_ns, poll_idle_ns
    cdef public bint polling          # a poller's look is queued: it ends the turn too

    # Metrics (_metrics.pxi): reply latency per family as histogram bucket
    # counts (not cumulative) and sums; puts refused at the memory cap.
    cdef uint64_t lat_hist[LAT_FAMILIES][LAT_BUCKETS]
    cdef int64_t lat_sum_ns[LAT_FAMILIES]
    cdef public uint64_t mem_refused

    # --testing: the test-only commands run (_testing.pxi); drop_others(conn)
    # closes every other connection and returns their Conns.
    cdef public bint testing
    cdef public object drop_others

    # Fair turns (run_turn): a read from a connection served in the last
    # loop turn waits for the end of this one. turn_soon() asks the loop for
    # that call; without a loop (in-process tests) the caller makes it.
    cdef list turn                    # connections held back this turn
    cdef public bint turn_asked       # the turn's end is due (busypoll.py may run it)
    cdef public object turn_soon
    cdef uint64_t served              # runs so far: each run stamps its connection
    cdef uint64_t turn_start, last_turn_start   # served when this turn and the last began

    # -- internals shared between the included files --
    cdef Tube *tube_get(self, const char *name, Py_ssize_t n, bint create) except? NULL
    cdef void tube_incref(self, Tube *t) noexcept
    cdef void tube_decref(self, Tube *t)
    cdef void tube_update(self, Tube *t) noexcept
    cdef int tube_retime(self, Tube *t) except -1

    cdef void mem_charge(self, Py_ssize_t n) noexcept
    cdef Job *job_new(self, uint64_t id, uint32_t pri, int64_t delay_ns, int64_t ttr_ns,
                      Tube *t, object body) except NULL
    cdef void job_free(self, Job *j)
    cdef int job_delete(self, Job *j) except -1
    cdef int job_make_ready(self, Job *j) except -1
    cdef int job_make_delayed(self, Job *j, int64_t deadline) except -1
    cdef int job_bury(self, Job *j) except -1
    cdef int job_unlink(self, Job *j) except -1
    cdef int job_reserve(self, Conn c, Job *j, int64_t now) except -1

    cdef int process_queue(self) except -1
    cdef int waiting_add(self, Conn c) except -1
    cdef void waiting_remove(self, Conn c) noexcept
    cdef int conn_retime(self, Conn c, int64_t now) except -1
    cdef Job *conn_soonest(self, Conn c) noexcept

    cdef int dispatch(self, Conn c, Cmd *cmd) except -1
    cdef int run(self, Conn c) except -1
    cdef int flush_dirty(self) except -1
    cdef int rearm(self) except -1

    cdef int wal_record(self, Job *j, bint full) except -1
    cdef bint wal_room(self, int64_t now_bytes, int64_t extra_resv) except -1
    cdef int wal_own(self, Job *j) except -1
    cdef void wal_disown(self, Job *j) noexcept
    cdef int wal_put(self, char *p, Py_ssize_t n) except -1
    cdef int release_held_c(self) except -1
    cdef object _replay_one(self, Jobrec *rec, const char *name, int32_t namelen,
                            const char *body)

    cdef void _elig_remove(self, Tube *t) noexcept
    cdef bint _deadline_soon(self, Conn c, int64_t now) noexcept
    cdef bint _conn_ready(self, Conn c) noexcept
    cdef void _waiter_drop(self, Tube *t, Py_ssize_t k) noexcept
    cdef Conn _waiter_take(self, Tube *t)
    cdef void _touched(self, Conn c)
    cdef int64_t _next_deadline(self) noexcept
    cdef int conn_release(self, Conn c) except -1
    cdef int _kick_one(self, Job *j) except -1
    cdef int _kick(self, Conn c, uint32_t bound) except -1
    cdef int kick_more(self, Conn c) except -1
    cdef bytes _stats_yaml(self)
    cdef bytes _job_yaml(self, Job *j)
    cdef bytes _tube_yaml(self, Tube *t)
    cdef bytes _ext_yaml(self)


cdef class Conn:
    cdef Core core
    cdef Parser parser
    cdef object write                 # transport.write
    cdef object writelines            # transport.writelines
    cdef object close_cb              # closes the transport once output is flushed
    cdef object reading_cb            # reading_cb(bool): pause/resume reading
    cdef object later_cb              # later_cb(): run this connection again next loop turn

    cdef Tube *use
    cdef Watch *watch
    cdef Py_ssize_t nwatch, capwatch

    cdef Job *res_head                # reserved jobs, oldest reservation first (beanstalkd
    cdef Job *res_tail                # releases them in this order when the conn closes)
    cdef Py_ssize_t nreserved
    cdef Job *soonest                 # cached soonest TTR among them, or NULL if unknown

    cdef bint producer, worker, waiting, closed, eof, quitting, in_run, dirty
    cdef bint held                    # output waits in core.held until durable_seq >= wal_need
    cdef uint64_t wal_need            # the records its held output confirms
    cdef bint lost                    # the transport is gone: output goes nowhere
    cdef bint close_after             # close the transport once held output is out
    cdef bint writable                # False while the transport's buffer is over its high mark
    cdef bint reading_paused, later_pending
    cdef bint in_turn                 # in core.turn
    cdef uint64_t served              # core.served when it last ran
    cdef int64_t timeout_at           # mono ns end of a reserve-with-timeout; -1 none
    cdef ConnTimer timer
    cdef Py_ssize_t put_cost          # bytes charged to core.mem_used for the put in progress

    # Reply latency (_metrics.pxi): commands run whose replies are not on
    # the wire yet, per family, and when the oldest read among them arrived.
    cdef int64_t read_ns              # mono ns, never moved by a test clock
    cdef uint32_t lat_pend[LAT_FAMILIES]
    cdef uint32_t lat_npend

    # kick in progress over several loop turns
    cdef bint kicking, kick_buried
    cdef uint32_t kick_left, kick_done

    # put in progress (between the put line and its body)
    cdef uint64_t put_id
    cdef uint32_t put_pri, put_delay, put_ttr

    # Output: small replies gather in obuf; bodies go by reference in chunks.
    cdef char *obuf
    cdef Py_ssize_t olen, ocap
    cdef list chunks

    cdef int out(self, const char *s, Py_ssize_t n) except -1
    cdef int out_str(self, bytes s) except -1
    cdef int out_u64(self, const char *word, Py_ssize_t wn, uint64_t v) except -1
    cdef int out_job(self, const char *word, Py_ssize_t wn, Job *j) except -1
    cdef int out_yaml(self, bytes doc) except -1
    cdef int out_err(self, int err) except -1
    cdef int flush(self) except -1
    cdef int add_watch(self, Tube *t) except -1
    cdef void update_reading(self)
