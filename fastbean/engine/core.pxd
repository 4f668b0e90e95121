# The queue engine's structures: jobs, tubes, connections and the engine
# itself. Read this first; every field says what it holds, in what unit, and
# who owns it. The code lives in core.pyx (the Python-facing API) and the
# files it includes, one concern each, in dependency order: each uses only
# the files above it (one exception: conn.pxi's conn_release uses queue.pxi).
# Each opens with what it offers and which files it uses;
# tests/test_sourcecode.py checks all of that. The structures, which use no
# policy file:
#
#   clock.pxi   the clocks (monotonic and wall ns) and the test clock's offset
#   hooks.pxi   every call into Python, and the debug build's no-re-entry check
#   vec.pxi     growable arrays and the intrusive job list
#   heap.pxi    binary min-heap with positions kept in the elements
#   table.pxi   id -> job table with incremental resizing
#   mem.pxi     memory accounting, and giving memory back after a backlog
#   wal.pxi     binlog records: beanstalkd's format version 7, encoding and reading back
#   tube.pxi    tubes: the registry, references, the orders of their heaps, timers, the eligible set
#   job.pxi     job allocation, lookup and freeing
#
# The policy:
#
#   walg.pxi    binlog space, moving on to the spare file, which file holds which job (and
#               which the extensions' state), migration
#   keys.pxi    idempotency keys of puts (idp:KEY), and those cooling down after a delete
#   retry.pxi   retry limits of tubes (retry-limit, --retry-limit)
#   stats.pxi   the YAML of stats, stats-job, stats-tube, list-tubes, fastbean-stats
#   metrics.pxi reply latency per command family, and tube rows for the metrics endpoint
#   conn.pxi    a connection's output, watch list, waiting, TTR margin, release
#   queue.pxi   job state moves and deletes, matching jobs with waiting connections, due timers
#   held.pxi    replies held until their binlog records are durable
#   replay.pxi  binlog records replayed, then the jobs put where they belong
#   testing.pxi the test-only commands (fastbean-reset, fastbean-clock-advance)
#   flush.pxi   flush-tube and flush-buried, a slice per loop turn
#   list.pxi    list-tube's pages, gathered a slice per loop turn
#   cmds.pxi    one function per command, and dispatch
#   check.pxi   the invariants debug builds check after every command
#   run.pxi     running a connection's buffered commands; the end of each piece of work
#   turn.pxi    fair turns: which connection runs a read now, which at the end of the loop turn
#   probes.pxi  the heap and the id table on their own, for tests
#
# Sans-IO: the engine never touches a socket or a file. A connection hands it
# bytes (Conn.feed), it runs every complete command in compiled code and
# writes the replies through the transport callables the connection gave it.
# Binlog records go into an in-memory buffer that the Python layer (binlog.py)
# takes once per loop turn.
#
# Time is CLOCK_MONOTONIC nanoseconds for every deadline ("mono ns"), and
# CLOCK_REALTIME nanoseconds only where beanstalkd shows or stores wall time
# (job creation, binlog deadlines).

cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t
from cpython.object cimport PyObject

from fastbean.engine.parser cimport Parser


# Reply latency is kept per command family (metrics.py names them; see
# metrics.pxi for which command is in which).
cdef enum:
    LAT_PUT = 0
    LAT_RESERVE = 1
    LAT_DELETE = 2
    LAT_JOB = 3               # release, bury, touch, kick, kick-job, move-job, reprioritize-job
    LAT_PEEK = 4
    LAT_TUBE = 5              # use, watch, ignore, list-tube-used, pause-tube
    LAT_STATS = 6             # stats*, list-tubes*, fastbean-stats
    LAT_OTHER = 7             # unknown commands, bad format
    LAT_FAMILIES = 8
    LAT_NONE = 8              # not timed: a put line (its body is), quit
    LAT_BUCKETS = 21          # include/hist.h's FB_LATENCY_BOUNDS + the +Inf bucket


cdef enum JobState:
    JOB_INVALID = 0           # values are the binlog's (reference §4.2)
    JOB_READY = 1
    JOB_RESERVED = 2
    JOB_BURIED = 3
    JOB_DELAYED = 4


cdef enum:
    JOB_KEYED = 1             # put with an idempotency key: core.job_keys has it (keys.pxi)
    JOB_ORIGIN = 2            # a dead letter: core.origins has the tube it came from (retry.pxi)


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
ctypedef struct Job

# A job's place in a JobList. A job has two: one for the list its state puts
# it in, one for the binlog file that holds its latest full record.
cdef enum:
    LINK_STATE = 0            # a tube's buried list, a connection's reserved list, replay order
    LINK_WAL = 1              # its binlog file's jobs

ctypedef struct Link:
    Job *prev
    Job *next

# A doubly linked list threaded through the jobs themselves (Job.link[k]).
ctypedef struct JobList:
    Job *head
    Job *tail

# Laid out to be small: a million jobs of 100 bytes cost less than in
# beanstalkd (docs/benchmarks.md). Scalars first, packed; the binlog's list
# link last, because an engine that never logs allocates its jobs without it
# (JOB_SIZE_NO_WAL in job.pxi): that tail is touched only for jobs a binlog
# file owns (wal_file != 0). The body follows the struct in the same block
# (job_alloc), so a job costs one allocation and no object header.
ctypedef struct Job:
    uint64_t id
    Job *ht_next              # chain in the id table (beside the id: a lookup reads one cache line)
    int64_t delay_ns          # the delay of the last put/release, as stats-job shows it
    int64_t ttr_ns            # >= 1 s
    int64_t created_wall      # wall ns; stats-job age and the binlog
    int64_t deadline          # mono ns: end of the delay (delayed) or of the TTR (reserved)
    uint32_t pri
    int32_t heap_index        # in tube.ready, tube.delay or core.ttr_heap, by state
    uint32_t reserve_ct
    uint32_t timeout_ct
    uint32_t release_ct
    uint32_t bury_ct
    uint32_t kick_ct
    int32_t wal_file          # binlog file holding the job's latest full record; 0 if none
    uint8_t state             # JobState
    uint8_t flags             # JOB_KEYED, JOB_ORIGIN (in padding: a job costs no more for them)
    int32_t body_size         # bytes of the body, CRLF included
    Tube *tube                # holds a reference (tube.refs)
    PyObject *owner           # the reserving Conn while reserved (borrowed; it outlives the job's reservation)
    char *body                # the body and its CRLF: right after the struct, in the same block
    Link link[2]              # LINK_STATE, LINK_WAL (last: see above)


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
    JobList jobs              # through LINK_WAL
    Py_ssize_t nitems         # extension state whose latest records it holds (core.ext_items)


# A job's place in list-tube's order (list.pxi): (priority or deadline, id).
ctypedef struct ListKey:
    uint64_t key
    uint64_t id


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
    JobList buried            # oldest first, through LINK_STATE
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
    # The last binlog record (core.wal_seq numbering) about a job in it, or
    # one that left it; a new tube starts at core.tube_gone_seq. A reply that
    # shows the tube waits until that record is durable (conn.pxi flush).
    uint64_t wal_seq


@cython.final
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

    # Tubes that have both ready jobs and waiting connections and are not paused.
    cdef Tube **eligible
    cdef Py_ssize_t neligible, capeligible

    # Connections with output produced outside their own run, to flush.
    cdef list dirty

    # Counters behind stats.
    cdef uint64_t cmd_ct[32]
    cdef uint64_t job_timeouts
    cdef uint64_t total_jobs
    cdef Py_ssize_t ready_ct, urgent_ct, reserved_ct, delayed_ct, buried_ct
    cdef Py_ssize_t conn_ct, producer_ct, worker_ct, waiting_ct
    cdef uint64_t total_conns

    # Limits and modes.
    cdef Py_ssize_t max_job_size
    cdef bint drain_mode                   # SIGUSR1: put answers DRAINING
    cdef readonly Py_ssize_t max_memory    # bytes of jobs; 0 = no cap
    cdef readonly Py_ssize_t mem_used      # bytes of jobs held now
    cdef Py_ssize_t mem_peak               # most job bytes held since the last malloc_trim
    cdef bint trim_due                     # a backlog drained: trim on the next tick
    cdef int64_t idle_at                   # mono ns to look whether the server is idle (mem.pxi); INT64_MAX: not armed
    cdef uint64_t idle_reads               # nreads when that look was armed
    cdef int batch_limit                   # commands per connection per run
    cdef readonly uint64_t mem_refused     # puts refused at the memory cap (metrics)
    # flush-tube and flush-buried commands run, and the jobs they deleted
    # (fastbean-stats, metrics; never stats)
    cdef readonly uint64_t flush_tube_ct, flush_buried_ct, jobs_flushed
    cdef readonly uint64_t list_tube_ct    # list-tube commands run (fastbean-stats, metrics)
    cdef readonly uint64_t reserve_batch_ct, jobs_batch_reserved   # reserve-batch commands, their jobs
    cdef readonly uint64_t delete_batch_ct, jobs_batch_deleted     # delete-batch commands, their jobs
    cdef readonly uint64_t retry_limit_ct  # retry-limit commands run
    cdef readonly uint64_t retry_buried, dead_lettered   # jobs whose retry limit buried or moved them
    cdef readonly uint64_t key_hits        # puts answered with the live (or cooling) job of their key
    cdef readonly uint64_t move_job_ct     # move-job commands run
    cdef readonly uint64_t reprioritize_job_ct   # reprioritize-job commands run

    # The extensions' state. Idempotency keys (keys.pxi): the live jobs' and
    # the deleted ones' still cooling down, per tube; retry limits (retry.pxi).
    cdef dict keys                    # tube name -> {key: id of the live job put with it}
    cdef dict job_keys                # id -> (key, cooldown ns) of each keyed job
    cdef dict gone                    # (tube name, key) -> (id, cooldown end in wall ns)
    cdef dict policies                # tube name -> (limit, dead-letter tube or None); limit 0: none
    cdef tuple default_policy         # --retry-limit and --dead-letter-tube, or None
    # id -> the tube (bytes) a retry limit last moved the job from to its
    # dead-letter tube (JOB_ORIGIN); forgotten at its delete or a move-job.
    # In the binlog an EXT_ORIGIN record goes before each of its full records.
    cdef dict origins
    # Which binlog file holds the latest records of each piece of that state
    # (walg.pxi): ("key", tube, key) or ("policy", tube) -> (file number, records).
    cdef dict ext_items
    cdef object replay_tube           # the tube of the last EXT_TUBE record replayed
    cdef object replay_key            # (id, key, cooldown ns) of the last EXT_KEY replayed, or None
    cdef object replay_origin         # (id, tube) of the last EXT_ORIGIN replayed, or None

    # Schedules (sched.pxi): recurring jobs the engine puts itself, from its
    # timer. The definitions and the last occurrence each fired are extension
    # state too: ("sched", name) and ("fired", name) in ext_items.
    cdef dict schedules               # name (bytes) -> Sched
    cdef int64_t sched_at             # mono ns the soonest occurrence is due (tick); INT64_MAX: none
    cdef uint32_t sched_gen           # the latest definition's number (one per define or replace)
    cdef dict sched_fired             # replay: name -> (gen, occurrence wall ns, fires) of the latest fired
    cdef list replay_parts            # replay: [spec, body chunks] of the definition being read, or None
    cdef object replay_fire           # replay: (id, name, gen, occurrence, fires) of the EXT_FIRE before a job, or None
    cdef readonly uint64_t sched_fires, sched_runs   # occurrences fired; fire-schedule's extra jobs
    cdef readonly uint64_t sched_misfires            # occurrences skipped or folded into one after an outage
    # on_fire(name, tube, id, occurrence wall ns, lag ns, manual): a schedule
    # made job id (server.py: log event and metrics)
    cdef object on_fire

    cdef readonly bint testing             # --testing: the test-only commands run (testing.pxi)
    cdef readonly bint strict              # --strict: protocol extensions answer UNKNOWN_COMMAND

    # Metrics (metrics.pxi): reply latency per family as histogram bucket
    # counts (not cumulative) and sums.
    cdef uint64_t lat_hist[LAT_FAMILIES][LAT_BUCKETS]
    cdef int64_t lat_sum_ns[LAT_FAMILIES]

    # Identity for stats.
    cdef int64_t started_mono
    cdef bytes instance_id
    cdef bytes hostname, os_version, machine, version

    # Binlog (walg.pxi). Python (binlog.py) owns the files; the engine
    # encodes records into wba, keeps the space accounting and knows which
    # file holds what. binlog.py keeps the next file ready (the spare), so
    # the engine moves on to it in the middle of a command by itself.
    cdef bint wal_on
    cdef bint wal_links               # jobs are made with their LINK_WAL tail (replay or wal_start came)
    cdef bytearray wba                # records for the current file not yet handed to binlog.py
    cdef list wsegs                   # (file number, records) of files left since, for binlog.py
    cdef uint64_t wal_seq             # records appended so far
    cdef uint64_t durable_seq         # records binlog.py has made durable (per -f)
    cdef bint commit_asked            # commit_soon() called since the last take_wal()
    cdef list held                    # connections whose replies wait for durability (held.pxi)
    cdef uint64_t tube_gone_seq       # the highest Tube.wal_seq of a tube that is gone
    cdef uint64_t drop_seq            # the last delete record: a job looked up by id and not found waits for it
    cdef Py_ssize_t binlog_max_size   # -s, shown in stats even without -b
    cdef int64_t wal_cap              # bytes the current file can hold
    cdef int64_t wal_used             # bytes of it used (written or in wba)
    cdef int64_t spare_seq            # the spare file's number; 0 when there is none
    cdef int64_t spare_cap, spare_used   # its bytes allocated, and written (its header)
    cdef int64_t wal_resv             # bytes promised to live jobs' future delete records
    cdef int64_t wal_live             # bytes of the live jobs' latest full records
    cdef uint64_t wal_written, wal_migrated
    cdef WalFile *wfiles              # oldest first; the last is the current file
    cdef Py_ssize_t nwfiles, capwfiles
    cdef JobList replayed             # jobs read by replay (replay.pxi), in order of first appearance
    cdef uint64_t replay_max_id
    # take_wal() hands records over in pieces of at most this many bytes (a
    # record bigger than that alone), cut at record boundaries as they are
    # appended: a replication message has a size limit. 0: no limit.
    cdef Py_ssize_t wal_piece

    # The primary's lease (replication.py): a replicated node may answer only
    # while no other node can have taken over. Past lease_end (real mono ns)
    # no command runs and lease_over() is called, once.
    cdef int64_t lease_end            # INT64_MAX: no lease to keep (not replicated)
    cdef bint lease_told              # lease_over() called for this lease_end

    # Fair turns (turn.pxi): a read from a connection served in the last
    # loop turn waits for the end of this one (Core.end_turn).
    cdef list turn                    # connections held back this turn
    cdef bint turn_asked              # end_turn_soon() called; end_turn() not yet
    cdef uint64_t nreads              # reads fed so far (the busy poller's looks compare it)
    cdef bint wake_armed              # call on_wake at the next read
    cdef uint64_t served              # runs so far: each run stamps its connection
    cdef uint64_t turn_start, last_turn_start   # served when this turn and the last began

    # Hooks, given once at construction. None of them calls back into the
    # engine before it returns (debug builds check: hooks.pxi).
    cdef object arm                   # arm(delay_seconds): re-arm the loop timer
    # end_turn_soon(): have end_turn() called once this loop turn's reads
    # are in (server.py, or busypoll.py while it polls)
    cdef object end_turn_soon
    # ext_stats() -> bytes: more fastbean-stats lines (busypoll.py, replication.py)
    cdef object ext_stats
    # on_wake(reads) -> bool: a read came while the busy poller let the loop
    # sleep; True to be told of the next read too (busypoll.py)
    cdef object on_wake
    cdef object commit_soon           # commit_soon(): records wait; take_wal() them soon (binlog.py)
    # next_file(need, replace) -> (seq, cap, used) or None: a file made
    # now, when the spare is gone or too small (binlog.py)
    cdef object next_file
    # drop_others(conn) -> the other Conns, their transports closed
    # (fastbean-reset, --testing only; server.py)
    cdef object drop_others
    # lease_over(): a command came after lease_end; the node must stop
    # serving (replication.py, through server.py)
    cdef object lease_over

    # Debug builds.
    cdef uint64_t debug_cmds          # commands run: the structures are checked as they go (check.pxi)
    cdef int in_hook                  # a hook is running: nothing may call into the engine (hooks.pxi)


# A connection's lifecycle. Released = its reservations, watches and use are
# undone (conn_release); it runs no more commands.
cdef enum ConnState:
    CONN_OPEN = 0             # reads and runs commands
    CONN_EOF = 1              # the peer sent its last bytes: runs what is buffered, then quits
    CONN_QUIT = 2             # quit or the end of its input: released when this run ends
    CONN_CLOSING = 3          # released; the transport closes once its held replies are out
    CONN_CLOSED = 4           # released; its transport is closed or closing

# What a connection waits for before it runs its next command.
cdef enum ConnWait:
    WAIT_NONE = 0
    WAIT_JOB = 1              # a blocked reserve: in its watched tubes' waiting sets
    WAIT_KICK = 2             # its kick to finish, KICK_BATCH jobs per loop turn
    WAIT_FLUSH = 3            # its flush to finish, FLUSH_BATCH jobs per loop turn
    WAIT_LIST = 4             # its list-tube page to be gathered, LIST_SCAN entries per loop turn


@cython.final
cdef class Conn:
    cdef Core core
    cdef Parser parser
    cdef object write                 # transport.write
    cdef object writelines            # transport.writelines
    cdef object close_cb              # closes the transport once output is flushed
    cdef object reading_cb            # reading_cb(bool): pause/resume reading
    cdef object again_cb              # again_cb(): have Conn.again() called next loop turn

    cdef ConnState state
    cdef ConnWait wait
    cdef bint lost                    # the transport failed or is gone: output goes nowhere
    cdef bint closing                 # the peer's stream ended and its transport closes (TLS): no command starts
    # A wait (reserve, kick, flush, list-tube) just ended: the commands
    # buffered behind it run one at a time, each once the reply before it is
    # written, until none is left (run.pxi), as in beanstalkd.
    cdef bint careful

    cdef Tube *use
    cdef Watch *watch
    cdef Py_ssize_t nwatch, capwatch

    # reserved jobs, oldest reservation first, through LINK_STATE (beanstalkd
    # releases them in this order when the connection closes)
    cdef JobList reserved
    cdef Py_ssize_t nreserved
    cdef Job *soonest                 # cached soonest TTR among them, or NULL if unknown

    cdef bint producer, worker        # has put / reserved (stats count them once)
    cdef bint in_run, dirty
    cdef bint held                    # output waits in core.held until durable_seq >= wal_need
    # The records its output confirms or reveals: none goes out before
    # durable_seq reaches it. A command whose reply shows only some of the
    # state (cmds.pxi reveal) raises it to the records of what it shows, and
    # sets exact while it runs; any other output (need_all) waits for every
    # record appended before it is written.
    cdef uint64_t wal_need
    cdef bint exact                   # the command running has its need worked out (cmds.pxi)
    cdef bint need_all                # output not exact since the last flush
    cdef bint writable                # False while the transport's buffer is over its high mark
    cdef bint reading_paused, again_pending
    cdef bint in_turn                 # in core.turn
    cdef uint64_t served              # core.served when it last ran
    cdef int64_t timeout_at           # mono ns end of a reserve-with-timeout; -1 none
    cdef uint32_t batch_count         # a reserve-batch's count while it waits (WAIT_JOB); 0: a reserve
    cdef ConnTimer timer
    cdef Py_ssize_t put_cost          # bytes charged to core.mem_used for the put in progress
    cdef Job *put_job                 # the put in progress, its body being read (in no structure yet)

    # Reply latency (metrics.pxi): commands run whose replies are not on
    # the wire yet, per family, and when the oldest read among them arrived.
    cdef int64_t read_ns              # mono ns, never moved by a test clock
    cdef uint32_t lat_pend[LAT_FAMILIES]
    cdef uint32_t lat_npend

    # kick in progress over several loop turns (wait == WAIT_KICK)
    cdef bint kick_buried
    cdef uint32_t kick_left, kick_done

    # flush-tube / flush-buried in progress over several loop turns
    # (wait == WAIT_FLUSH, flush.pxi)
    cdef Tube *flush_tube             # the tube, referenced (tube.refs) while it runs
    cdef bint flush_all               # flush-tube: every state; flush-buried: buried only
    cdef uint64_t flush_left          # jobs it may still delete (the tube's count when it began)
    cdef uint64_t flush_done
    cdef uint64_t *flush_ids          # the tube's reserved jobs when it began (flush-tube)
    cdef Py_ssize_t flush_nids, flush_pos

    # list-tube page being gathered over several loop turns (wait == WAIT_LIST, list.pxi)
    cdef Tube *list_tube              # referenced (tube.refs) while it runs
    cdef int list_state               # JOB_READY, JOB_DELAYED or JOB_RESERVED
    cdef uint32_t list_count          # jobs asked for
    cdef ListKey list_after           # the cursor: the page starts after it
    cdef ListKey *list_keys           # candidates so far, up to 2 * list_count
    cdef Py_ssize_t list_nkeys, list_pos   # how many; heap entries looked at
    cdef bint list_more               # candidates beyond the page were dropped

    cdef object put_key               # (key, cooldown ns) of the put in progress, or None
    cdef tuple sched_def              # schedule in progress, its body being read (sched.pxi), or None
    cdef bint big_puts                # its last put was big: reads are taken apart (feed_after_big_put)

    # put in progress (between the put line and its body)
    cdef uint64_t put_id
    cdef uint32_t put_pri, put_delay, put_ttr

    # Output: replies gather in obuf; a body over OUT_INLINE gets a chunk of its own.
    cdef char *obuf
    cdef Py_ssize_t olen, ocap
    cdef list chunks
