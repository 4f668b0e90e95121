# cython: language_level=3
"""The queue engine (see core.pxd): Core and Conn, the API the Python layer calls."""

cimport cython
import collections
import os

from fastbean.config import BATCH_LIMIT, DEFAULT_BINLOG_SIZE, DEFAULT_MAX_JOB_SIZE

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t, INT64_MAX
from libc.stdlib cimport malloc, calloc, free, qsort
from libc.string cimport memcmp, memcpy, memset, memmove
from libc.stdio cimport snprintf
from libc.errno cimport errno, EAGAIN, EINTR
from posix.resource cimport getrusage, rusage, RUSAGE_SELF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.pyport cimport PY_SSIZE_T_MAX

from fastbean.engine.parser cimport Parser
from fastbean.engine.wire cimport (
    Cmd, NAME_MAX, name_ok, is_extension, rejected_by_beanstalkd_as_bad_format, Text, err_text,
    MSG_BAD_FORMAT, MSG_DRAINING, MSG_OUT_OF_MEMORY, MSG_INTERNAL_ERROR, MSG_UNKNOWN_COMMAND,
    MSG_NOT_FOUND, MSG_DELETED, MSG_RELEASED, MSG_BURIED, MSG_TOUCHED, MSG_KICKED, MSG_PAUSED,
    MSG_NOT_IGNORED, MSG_DEADLINE_SOON, MSG_TIMED_OUT, MSG_CRLF, MSG_INSERTED, MSG_WATCHING,
    MSG_KICKED_N, MSG_RESERVED, MSG_FOUND, MSG_USING, MSG_RESET, MSG_ADVANCED, MSG_FLUSHED,
    MSG_LISTED, MSG_RESERVED_BATCH, MSG_DELETED_BATCH, MSG_MOVED, MSG_REPRIORITIZED,
    OP_PUT, OP_PEEK, OP_PEEK_READY, OP_PEEK_DELAYED, OP_PEEK_BURIED,
    OP_RESERVE, OP_RESERVE_TIMEOUT, OP_DELETE, OP_RELEASE, OP_USE, OP_WATCH, OP_IGNORE,
    OP_BURY, OP_KICK, OP_TOUCH, OP_STATS, OP_STATS_JOB, OP_STATS_TUBE, OP_LIST_TUBES,
    OP_LIST_TUBE_USED, OP_LIST_TUBES_WATCHED, OP_PAUSE_TUBE, OP_RESERVE_JOB, OP_KICK_JOB,
    OP_QUIT, OP_PUT_BODY, OP_SKIPPED, OP_BAD_FORMAT, OP_EXT, OP_COUNT, OP_TEST_RESET,
    OP_TEST_ADVANCE, OP_FLUSH_TUBE, OP_FLUSH_BURIED, OP_LIST_TUBE, OP_RESERVE_BATCH,
    OP_DELETE_BATCH, OP_RETRY_LIMIT, OP_DELETE_EACH, OP_MOVE_JOB, OP_REPRIORITIZE_JOB,
    RETRY_SHOW, RETRY_DEFAULT,
    OP_SCHEDULE, OP_UNSCHEDULE, OP_LIST_SCHEDULES, OP_FIRE_SCHEDULE, OP_PAUSE_SCHEDULE,
    OP_RESUME_SCHEDULE, MSG_SCHEDULED, MSG_REPLACED, MSG_UNSCHEDULED, MSG_RESUMED, MSG_FIRED,
    ERR_NONE, ERR_BAD_FORMAT, ERR_JOB_TOO_BIG, ERR_OUT_OF_MEMORY,
)


# The engine's files in dependency order, so this is a reading order: each
# uses only the files above it, but for conn.pxi's conn_release, which hands
# reserved jobs back through queue.pxi. Each opens with what it offers and
# the files it uses (tests/test_sourcecode.py checks all of it). First the
# structures, which use no policy file:
include "clock.pxi"
include "hooks.pxi"
include "vec.pxi"
include "heap.pxi"
include "table.pxi"
include "mem.pxi"
include "wal.pxi"
include "tube.pxi"
include "job.pxi"

# The policy:
include "walg.pxi"
include "keys.pxi"
include "retry.pxi"
include "stats.pxi"
include "metrics.pxi"
include "conn.pxi"
include "queue.pxi"
include "held.pxi"
include "sched.pxi"
include "replay.pxi"
include "testing.pxi"
include "flush.pxi"
include "list.pxi"
include "inspect.pxi"
include "cmds.pxi"
include "check.pxi"
include "run.pxi"
include "turn.pxi"
include "probes.pxi"


# The bytes of a job's struct (the body follows it; JOB_SIZE_NO_WAL without a
# binlog): tests hold it down, so that no feature makes every job bigger.
JOB_STRUCT_BYTES = sizeof(Job)
# What --max-memory counts for a job beside its body (metrics' help text says it).
JOB_OVERHEAD_BYTES = JOB_OVERHEAD
# The most bytes a job's full record adds to its body in a binlog file or a
# replicated message: the tube name's length and a 200-byte name, the
# record, the body's CRLF.
FULL_RECORD_OVERHEAD = 4 + NAME_MAX + sizeof(Jobrec) + 2
# core.wal_status(): live = bytes of the live jobs' full records, reserved =
# bytes promised for their deletes, used and capacity of the current file, files.
WalStatus = collections.namedtuple("WalStatus", "live reserved used capacity files", module=__name__)


def put_tag(bytes rest):
    """What follows a put's size, if it is an idempotency tag (" idp:KEY" or
    " idp:KEY:SECONDS"): (key, cooldown seconds); else None."""
    t = key_parse(PyBytes_AS_STRING(rest), PyBytes_GET_SIZE(rest))
    return None if t is None else (t[0], t[1] // 1000000000)


cdef int _start_empty(Core core) except -1:
    # Core.__init__'s state beyond what the caller gives: no job, no tube but
    # default, nothing logged, nothing due, and what stats says of the host.
    core.next_id = 1
    core.tube_by_name = {}
    core.dirty = []
    core.drain_mode = False
    core.armed_at = INT64_MAX
    core.lease_end = INT64_MAX
    core.started_mono = mono_ns()
    core.instance_id = os.urandom(8).hex().encode()
    u = os.uname()
    core.hostname = u.nodename.encode()
    core.os_version = u.version.encode()
    core.machine = u.machine.encode()
    core.keys = {}
    core.job_keys = {}
    core.gone = {}
    core.policies = {}
    core.origins = {}
    core.ext_items = {}
    core.schedules = {}
    core.sched_fired = {}
    core.sched_at = INT64_MAX
    core.wal_on = False
    core.wba = bytearray()
    core.wsegs = []
    core.held = []
    core.turn = []
    core.default_tube = tube_get(core, b"default", 7, True)
    tube_incref(core.default_tube)        # default is never freed
    # A new server gives back what start-up left once it has been idle
    # for a moment, as after every busy spell (mem.pxi).
    core.idle_reads = core.nreads
    core.idle_at = mono_ns() + IDLE_WAIT
    rearm(core)
    return 0


cdef object _tick(Core core, Py_ssize_t budget):
    # Core.tick
    cdef int64_t now = mono_ns()
    cdef Py_ssize_t done
    if lease_lost(core):
        # a reserve timing out or a job coming due could reveal a stale
        # queue too; set_lease() arms the timer again
        core.armed_at = INT64_MAX
        return None
    done = queue_tick(core, now, budget)
    done += sched_tick(core, budget - done if done < budget else 0, False)
    flush_dirty(core)
    mem_trim(core)
    mem_idle(core, now)
    if done >= budget:
        core.armed_at = now
        return 0.0
    core.armed_at = next_deadline(core)
    if core.armed_at == INT64_MAX:
        return None
    now = mono_ns()
    return 0.0 if core.armed_at <= now else (core.armed_at - now) / 1e9


cdef class Core:
    """All queue state of one server."""

    def __cinit__(self):
        table_init(&self.jobs)
        heap_init(&self.tube_timers, tube_less, tube_setpos)
        heap_init(&self.ttr_heap, deadline_less, job_setpos)
        heap_init(&self.conn_timers, timer_less, timer_setpos)

    def __init__(self, *, max_job_size=DEFAULT_MAX_JOB_SIZE, max_memory=0, version=b"0.0",
                 batch_limit=BATCH_LIMIT, binlog_max_size=DEFAULT_BINLOG_SIZE,
                 arm=None, end_turn_soon=None, on_wake=None, ext_stats=None, commit_soon=None,
                 next_file=None, testing=False, strict=False, drop_others=None,
                 lease_over=None, retry_limit=0, dead_letter_tube=None, on_fire=None):
        """Limits as the command line sets them, and the hooks core.pxd
        documents, none of which may call into the engine before it returns.
        testing=True runs the test-only commands (testing.pxi); strict=True
        answers every protocol extension UNKNOWN_COMMAND, as beanstalkd 1.12
        does; retry_limit (and dead_letter_tube, bytes) applies to every tube
        without a retry-limit of its own (retry.pxi). Without hooks
        (in-process tests) the caller calls tick(), end_turn() and take_wal()."""
        self.binlog_max_size = binlog_max_size
        self.max_job_size = max_job_size
        self.max_memory = max_memory or 0
        self.batch_limit = batch_limit
        self.arm = arm
        self.end_turn_soon = end_turn_soon
        self.on_wake = on_wake
        self.wake_armed = on_wake is not None
        self.ext_stats = ext_stats
        self.commit_soon = commit_soon
        self.next_file = next_file
        self.testing = testing
        self.strict = strict
        self.drop_others = drop_others
        self.lease_over = lease_over
        self.version = version if isinstance(version, bytes) else version.encode()
        self.default_policy = (int(retry_limit), dead_letter_tube or None) if retry_limit else None
        self.on_fire = on_fire
        _start_empty(self)

    def __dealloc__(self):
        # Process exit normally frees everything; this matters for tests that
        # make many engines.
        jobs_destroy(&self.jobs)
        heap_free(&self.tube_timers)
        heap_free(&self.ttr_heap)
        heap_free(&self.conn_timers)
        tubes_destroy(self)
        free(self.wfiles)

    # -- connections and turns --------------------------------------------------

    def connect(self, set_reading, again):
        """A new client: set_reading(bool) pauses or resumes reading its socket,
        again() has its again() called on the next loop turn. Conn.attach()
        gives it the transport before any bytes arrive."""
        enter(self)
        return conn_new(self, set_reading, again)

    def end_turn(self):
        """The end of a loop turn that read something: the connections held
        back for fairness run (see turn.pxi), then one timer update for the
        whole turn (the server then commits the binlog once)."""
        enter(self)
        if not self.turn_asked:         # ended already
            return
        turn_finish(self)
        settle(self)

    @property
    def reads(self):
        """Reads fed so far."""
        return self.nreads

    @property
    def holding(self):
        """True while replies wait for their binlog records to be durable."""
        return bool(self.held)

    def wake_on_read(self):
        """The busy poller lets the loop sleep: call on_wake at the next read."""
        enter(self)
        self.wake_armed = self.on_wake is not None

    # -- timers -------------------------------------------------------------------

    def tick(self, Py_ssize_t budget=10000):
        """Do what is due: delays, pauses, TTRs, reserve timeouts.

        At most `budget` jobs or connections are handled; returns the delay in
        seconds until the next call is needed (0.0 when work is left over), or
        None when nothing is scheduled.
        """
        enter(self)
        return _tick(self, budget)

    # -- state ---------------------------------------------------------------------

    def set_draining(self, bint on=True):
        """SIGUSR1: from now on put answers DRAINING; SIGUSR2 (on=False): no more."""
        enter(self)
        self.drain_mode = on

    @property
    def reserved_jobs(self):
        """Jobs reserved now (a drain is complete once none is)."""
        return self.reserved_ct

    @property
    def draining(self):
        return self.drain_mode

    def check(self):
        """Walk every structure and raise AssertionError on any inconsistency.

        Cold: for tests and the FASTBEAN_DEBUG build, which runs it after
        every command.
        """
        enter(self)
        core_check(self)
        return True

    @property
    def current_jobs(self):
        return self.jobs.count

    @property
    def max_id(self):
        # replay_max_id: a standby's jobs stay in replay until it takes over
        return max(self.next_id - 1, self.replay_max_id)

    @property
    def current_keys(self):
        """Idempotency keys held by live jobs."""
        return len(self.job_keys)

    @property
    def cooling_keys(self):
        """Idempotency keys of deleted jobs in their cooldown (some may have ended)."""
        return len(self.gone)

    def has_job(self, uint64_t id):
        return job_find(self, id) != NULL

    def job_origin(self, uint64_t id):
        """The tube (bytes) a retry limit moved job id from to its dead-letter
        tube, or None: no such job, not a dead letter, or moved since by
        move-job (retry.pxi). The console requeues a dead letter there."""
        return inspect_origin(self, id)

    def job_tube(self, uint64_t id):
        """The name of the tube job id is in, or None if there is no such job
        (roles: a restricted client may touch only jobs of its tubes)."""
        return inspect_tube_of(self, id)

    # -- what the console reads (inspect.pxi) --------------------------------------

    def job_info(self, uint64_t id):
        """stats-job's fields of job id as numbers (and state and tube as
        text), its body's size, and holder: the Conn reserving it, or None.
        None if there is no such job."""
        return inspect_job(self, id)

    def job_body(self, uint64_t id, Py_ssize_t limit=-1):
        """The body of job id (its first limit bytes, if limit >= 0), or None."""
        return inspect_body(self, id, limit)

    def schedule_info(self):
        """Every schedule (sched.pxi), by name: dicts of name, tube, spec and
        body (bytes), zone, pri, ttr, misfire ("fire" or "skip"), paused,
        next and last (wall ns, or None), fires, runs and gen."""
        return sched_info(self)

    def counters(self):
        """stats' numbers by their names, and the memory and job counts."""
        return inspect_counters(self)

    def tube_names(self):
        """Every tube's name, in list-tubes order."""
        cdef Py_ssize_t i
        return [<bytes>self.tubes[i].name for i in range(self.ntubes)]

    def tube_info(self, bytes name):
        """stats-tube's fields of the tube, and its retry limit, or None."""
        return inspect_tube(self, name)

    def listing(self, bytes tube, str state, after=None, Py_ssize_t count=50):
        """A page of the tube's jobs in state, gathered by Listing.step()."""
        return Listing(self, tube, state, after, count)

    def scan(self, bytes tube=None, states=None, bytes needle=None, bint bodies=False):
        """A search over every job, a slice per Scan.step()."""
        return Scan(self, tube, states, needle, bodies)

    # -- binlog (binlog.py) ---------------------------------------------------------

    def wal_start(self, int64_t seq, int64_t cap, int64_t used):
        """Log from now on (replay is over), into binlog.<seq>: cap bytes
        allocated, used written (its header)."""
        enter(self)
        wal_links_on(self)
        wal_file_add(self, seq, cap, used)
        self.wal_on = True
        wal_marker(self)
        if self.schedules:
            sched_due(self)              # they fire once there is a log for their records

    def wal_spare(self, int64_t seq, int64_t cap, int64_t used):
        """binlog.<seq> is ready for when the current file is full (it replaces
        a spare the engine has not used)."""
        enter(self)
        self.spare_seq, self.spare_cap, self.spare_used = seq, cap, used

    def wal_switch(self, int64_t seq, int64_t cap, int64_t used):
        """binlog.<seq> (a replicated part) is the current file from now on,
        cap bytes allocated, used written; the records so far stay the
        current one's segment in take_wal(). (A refusing part: cap 0.)"""
        enter(self)
        wal_switch(self, seq, cap, used)

    def set_wal_piece(self, Py_ssize_t limit):
        """From now on take_wal() cuts its segments at record boundaries into
        pieces of at most `limit` bytes (a single bigger record stays whole);
        0: no limit."""
        enter(self)
        self.wal_piece = limit

    def set_lease(self, end):
        """A replicated primary answers nothing once time.monotonic() reaches
        `end` (seconds); lease_over() is then called once. None: no limit."""
        enter(self)
        self.lease_end = INT64_MAX if end is None else <int64_t>(end * 1e9)
        self.lease_told = False
        rearm(self)

    def take_wal(self):
        """What to write next: ([(file number, records as a bytearray), ...],
        the sequence number of the last record). More than one file when the
        engine moved on to the spare meanwhile; each segment goes to its file."""
        enter(self)
        return wal_take(self)

    def set_durable(self, uint64_t seq):
        """Records up to seq are as durable as -f asks: their replies may go."""
        enter(self)
        if seq > self.durable_seq:
            self.durable_seq = seq
        release_held(self)
        settle(self)

    def set_failed(self, uint64_t seq):
        """Records up to seq will never be known durable (a binlog write or
        fsync failed, the replication stream was lost).

        The connections whose replies wait on them are closed without those
        replies, so no client is told that a change is logged when it may
        not be. The records do not count as durable: every later reply keeps
        waiting behind them, and the caller stops serving from this engine.
        """
        enter(self)
        fail_held(self, seq)

    def wal_collect(self):
        """Drop the oldest files that no live job needs; return their numbers."""
        enter(self)
        return wal_collect(self)

    def wal_migrate(self, Py_ssize_t limit):
        """Re-log up to `limit` jobs of the oldest file into the current one, so
        the oldest file can go. Returns how many moved."""
        enter(self)
        return wal_migrate(self, limit)

    @property
    def logged(self):
        """Records appended to the log so far, in take_wal()'s numbering."""
        return self.wal_seq

    def wal_status(self):
        """The binlog's sizes, a WalStatus."""
        return WalStatus(self.wal_live, self.wal_resv, self.wal_used, self.wal_cap, self.nwfiles)

    def replay(self, data, int64_t seq):
        """Apply the records of binlog.<seq> (its whole contents).

        Returns (records applied, where they end, reason or None). Bytes past
        the end are a torn or corrupt tail when there is a reason, else the
        zero-filled unused part of a preallocated file. A replicated part
        comes in several calls with the same seq: they add to one file.
        """
        enter(self)
        wal_links_on(self)
        return wal_replay(self, data, seq)

    def replay_finish(self):
        """Put the replayed jobs where their states say, in order of first
        appearance; reserved ones come back ready. Returns the job count."""
        enter(self)
        return wal_replay_finish(self)


cdef class Conn:
    """One client connection's engine state."""

    def __dealloc__(self):
        free(self.watch)
        free(self.obuf)
        free(self.flush_ids)
        free(self.list_keys)
        PyMem_Free(self.put_job)        # a body still coming (only if never released)

    def attach(self, write, writelines, close):
        """The transport's write(bytes), writelines(list) and close()."""
        self.write = write
        self.writelines = writelines
        self.close_cb = close

    def feed(self, data):
        """Bytes from one read: run every complete command, write the replies."""
        enter(self.core)
        if conn_released(self):
            return
        conn_feed(self.core, self, data)

    def again(self):
        """Run the commands left over from an earlier turn (its batch was used up)."""
        enter(self.core)
        self.again_pending = False
        if conn_released(self):
            return
        conn_run(self.core, self)
        settle(self.core)

    def set_writable(self, bint writable):
        """The transport's buffer crossed its high (False) or low (True) mark.
        False may come from inside a write the engine makes (the one call
        allowed back in: it only notes it and pauses reading)."""
        self.writable = writable
        if conn_released(self):
            return
        if writable:
            enter(self.core)
            conn_run(self.core, self)
            settle(self.core)
        else:
            update_reading(self)

    def got_eof(self, bint closing=False):
        """The peer shut down its sending side. Its buffered commands run one
        at a time, each once the reply before it is written, until a write
        fails. closing: the transport closes now (TLS), so nothing can be
        written back: the peer is gone, and no command starts (a flush,
        kick or list-tube under way still ends)."""
        enter(self.core)
        if conn_released(self):
            return
        self.state = CONN_EOF
        if self.wait == WAIT_JOB:
            # beanstalkd answers a blocked reserve with TIMED_OUT on hang-up
            waiting_remove(self.core, self)
            out_text(self, MSG_TIMED_OUT)
        self.closing = closing
        conn_run(self.core, self)
        settle(self.core)

    def gone(self):
        """The connection is gone: its reserved jobs go back to ready."""
        enter(self.core)
        self.lost = True
        if conn_released(self):
            return
        conn_release(self.core, self)
        settle(self.core)

    @property
    def is_closed(self):
        return conn_released(self)

    def info(self):
        """The tube it uses, those it watches, the jobs it holds (id, seconds
        left of each TTR), whether it waits in reserve (and the seconds left
        of its timeout), and whether it has put or reserved."""
        return inspect_conn(self)

    @property
    def caught_up(self):
        """Every command fed has run, and none is still running (a reserve
        waiting, a kick or flush in slices): a role filter judges a command
        by the tube a job is in only then."""
        return (self.wait == WAIT_NONE and not self.in_turn and not self.again_pending
                and self.parser.buffered() == 0)
