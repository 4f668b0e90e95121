# Connections: how their reads are fed, the output buffer and how it is
# written, the watch list and the used tube, waiting in reserve (the tubes'
# waiting sets and the connection's timer), the soonest TTR among its
# reservations, reading back-pressure and runs put off to the next loop
# turn, and release when it goes.
#
# Offers: BIG_PUT, timer_less, timer_setpos, conn_new, conn_released,
#   feed_after_big_put, out_text, out_bytes, out_u64, out_job, out_yaml,
#   out_drop, conn_need, flush, conn_touched, ask_again, update_reading, use_tube,
#   add_watch, watches, drop_watch, deadline_soon, any_ready, waiting_add,
#   waiting_remove, waiter_take, conn_retime, flush_forget, list_forget,
#   conn_release, SockWriter.
# Python: SockWriter.
# Uses: hooks, vec, heap, mem, tube, job, metrics, queue.
#
# queue.pxi, included next, answers waiting connections through this file;
# conn_release is the one use the other way: a leaving connection's reserved
# jobs go back to ready (job_unlink, job_make_ready), as in beanstalkd's
# connclose. tests/test_sourcecode.py allows that one.

cdef enum:
    BIG_PUT = 4096                    # after a put this big, reads are taken apart (feed_after_big_put)
    SMALL_CHUNK = 512 - 33            # the most a bytes object from pymalloc holds
    READ_HIGH = 1 << 20               # stop reading a blocked connection past this many bytes
    READ_LOW = 1 << 18
    OBUF_KEEP = 65536                 # an output buffer bigger than this is freed once flushed
    OUT_INLINE = 4096                 # a reply's body up to this size is copied into the output buffer

cdef int64_t MARGIN = 1000000000      # DEADLINE_SOON window before a TTR ends


cdef bint timer_less(void *a, void *b) noexcept nogil:
    return (<ConnTimer *>a).at < (<ConnTimer *>b).at


cdef void timer_setpos(void *a, Py_ssize_t i) noexcept nogil:
    (<ConnTimer *>a).index = i


cdef Conn conn_new(Core core, object set_reading, object again):
    cdef Conn c = Conn.__new__(Conn)
    c.core = core
    c.parser = Parser()
    c.parser.long_lines = not core.strict     # batch lines of tuber's length
    c.reading_cb = set_reading
    c.again_cb = again
    c.chunks = []
    c.writable = True
    c.timeout_at = -1
    c.timer.index = -1
    c.timer.conn = <PyObject *>c
    c.use = core.default_tube
    tube_incref(c.use)
    c.use.using_ct += 1
    add_watch(c, core.default_tube)
    core.conn_ct += 1
    core.total_conns += 1
    return c


cdef inline bint conn_released(Conn c) noexcept:
    return c.state >= CONN_CLOSING


# -- input ------------------------------------------------------------------------
#
# Each read is a bytes object in malloc's heap, alive until the engine has
# seen it. A connection whose last put was big must not allocate its next
# big jobs while that read is alive: freed, the read would leave a hole
# the jobs cannot reuse (a heap of 16 KiB bodies filled by pipelining
# clients lost about 90 bytes a job to such holes). So its reads are taken
# apart at once: the body in progress gets its bytes straight away, the
# rest is cut into chunks small enough for pymalloc, and the connection
# runs at the end of the loop turn, after the read is gone.

cdef void feed_after_big_put(Conn c, bytes data) except *:
    cdef const char *p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef char *dest
    cdef Py_ssize_t k = c.parser.body_room(&dest)
    if k > n:
        k = n
    if k:
        memcpy(dest, p, k)
        c.parser.body_filled(k)
        p += k
        n -= k
    while n > 0:
        k = n if n < SMALL_CHUNK else SMALL_CHUNK
        c.parser.feed(PyBytes_FromStringAndSize(p, k))
        p += k
        n -= k


# -- output -----------------------------------------------------------------------

cdef int out(Conn c, const char *s, Py_ssize_t n) except -1:
    if not c.exact:
        c.need_all = True
    if vec_grow(<void **>&c.obuf, &c.ocap, c.olen + n, 1) < 0:
        raise MemoryError()
    memcpy(c.obuf + c.olen, s, n)
    c.olen += n
    return 0


cdef inline int out_text(Conn c, Text t) except -1:
    return out(c, t.s, t.n)


cdef inline int out_bytes(Conn c, bytes s) except -1:
    return out(c, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef inline int _put_u64(char *p, uint64_t v) noexcept nogil:
    # v in decimal at p (at most 20 digits); how many. snprintf costs a
    # reply more than the rest of its formatting.
    cdef char tmp[20]
    cdef int n = 0, i
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return n


cdef int out_u64(Conn c, Text word, uint64_t v) except -1:
    # "<word> <v>\r\n"
    cdef char num[32]
    cdef int n = 1
    num[0] = 32
    n += _put_u64(num + n, v)
    num[n] = 13
    num[n + 1] = 10
    out_text(c, word)
    return out(c, num, n + 2)


cdef int out_job(Conn c, Text word, Job *j) except -1:
    # "<word> <id> <bytes>\r\n" then the stored body, which ends in CRLF.
    # The reply copies the body: the job may be gone before the bytes are
    # written. A small one joins the buffer; a big one gets a chunk of its own.
    cdef char num[64]
    cdef int n = 1
    num[0] = 32
    n += _put_u64(num + n, j.id)
    num[n] = 32
    n += 1
    n += _put_u64(num + n, <uint64_t>(j.body_size - 2))
    num[n] = 13
    num[n + 1] = 10
    out_text(c, word)
    out(c, num, n + 2)
    if j.body_size <= OUT_INLINE:
        return out(c, j.body, j.body_size)
    c.chunks.append(PyBytes_FromStringAndSize(c.obuf, c.olen))
    c.olen = 0
    c.chunks.append(PyBytes_FromStringAndSize(j.body, j.body_size))
    return 0


cdef int out_yaml(Conn c, bytes doc) except -1:
    # "OK <bytes>\r\n<doc>\r\n"
    cdef char num[32]
    cdef int n = snprintf(num, sizeof(num), "OK %lld\r\n", <long long>PyBytes_GET_SIZE(doc))
    out(c, num, n)
    out_bytes(c, doc)
    return out_text(c, MSG_CRLF)


cdef inline void out_drop(Conn c):
    c.olen = 0
    c.chunks = []


cdef extern from "<sys/socket.h>" nogil:
    ssize_t sock_send "send"(int fd, const void *buf, size_t n, int flags)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL

cdef extern from "<errno.h>" nogil:
    int EWOULDBLOCK


@cython.auto_pickle(False)
cdef class SockWriter:
    """A plain socket's transport.write and writelines, with a shortcut for
    the engine: while the transport has nothing queued, a reply goes
    straight from the connection's output buffer to the socket, in one
    send(2), the system call the transport would make, without a bytes
    object and a trip through the transport's write path. What the socket
    does not take at once goes to the transport, which writes in order
    from then on, until it has nothing queued. A send that fails for good
    (EPIPE, ECONNRESET: the peer is gone) hands nothing on: send says so,
    and the engine runs nothing more for that peer. A closing transport
    gets everything: its descriptor may be closed, and its number reused."""

    cdef int fd
    cdef bint queued                  # the transport may hold unsent bytes
    cdef object t_write, t_writelines, is_closing, queued_size

    def __init__(self, transport, int fd):
        self.fd = fd
        self.t_write = transport.write
        self.t_writelines = transport.writelines
        self.is_closing = transport.is_closing
        self.queued_size = transport.get_write_buffer_size
        self.queued = False

    def __call__(self, data):
        """transport.write(data)."""
        self.queued = True
        self.t_write(data)

    def writelines(self, chunks):
        """transport.writelines(chunks)."""
        self.queued = True
        self.t_writelines(chunks)

    cdef int send(self, const char *p, Py_ssize_t n) except -1:
        # 1 if the peer is gone (the send failed for good), else 0
        cdef ssize_t k
        if self.queued:
            if self.queued_size():
                self.t_write(PyBytes_FromStringAndSize(p, n))
                return 0
            self.queued = False
        if self.is_closing():
            self.t_write(PyBytes_FromStringAndSize(p, n))
            return 0
        k = sock_send(self.fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL)
        if k == n:
            return 0
        if k < 0:
            if errno != EAGAIN and errno != EWOULDBLOCK and errno != EINTR:
                return 1
            k = 0
        self.queued = True
        self.t_write(PyBytes_FromStringAndSize(p + k, n - k))
        return 0


cdef inline void conn_need(Conn c, uint64_t seq) noexcept:
    # c's output reveals or confirms the records up to seq
    if seq > c.wal_need:
        c.wal_need = seq


cdef int flush(Conn c) except -1:
    # Hand what c has to say to its transport, unless it confirms or
    # reveals binlog records that are not durable yet: then it waits in
    # core.held. Records appended since, which it shows nothing of, do not
    # hold it up (a flush of another tube, say).
    cdef Core core = c.core
    cdef Py_ssize_t n
    cdef SockWriter writer
    if c.lost:
        out_drop(c)
        lat_lost(c)
        return 0
    if c.need_all:
        c.need_all = False
        conn_need(c, core.wal_seq)
    if c.held:
        return 0
    if c.wal_need > core.durable_seq and (c.olen or c.chunks):
        c.held = True
        core.held.append(c)
        return 0
    if c.lat_npend and (c.chunks or c.olen):
        lat_written(core, c)
    if c.chunks:
        if c.olen:
            c.chunks.append(PyBytes_FromStringAndSize(c.obuf, c.olen))
            c.olen = 0
        chunks = c.chunks
        c.chunks = []
        hook1(core, c.writelines, chunks)
    elif c.olen:
        n = c.olen
        c.olen = 0
        if type(c.write) is SockWriter:
            writer = <SockWriter>c.write
            if core.wal_on and c.state != CONN_EOF and not (c.careful and c.parser.buffered()):
                # with a binlog, replies keep the transport's path, which
                # sends them at the end of the loop turn, as before: sending
                # them at once is measured without a binlog only
                writer.queued = True
                writer.t_write(PyBytes_FromStringAndSize(c.obuf, n))
            elif writer.send(c.obuf, n):
                c.lost = True       # the peer is gone: conn_run quits
        else:
            hook1(core, c.write, PyBytes_FromStringAndSize(c.obuf, n))
    if c.ocap > OBUF_KEEP:
        # a burst of big replies: give the memory back
        free(c.obuf)
        c.obuf = NULL
        c.ocap = 0
    return 0


cdef inline void conn_touched(Core core, Conn c):
    # c got output outside its own run: flush it (and run what it has
    # buffered) once the current work is done.
    if not c.in_run and not c.dirty:
        c.dirty = True
        core.dirty.append(c)


cdef inline void ask_again(Conn c):
    # ask the loop to run c again on its next turn (once)
    if not c.again_pending:
        c.again_pending = True
        hook0(c.core, c.again_cb)


cdef void update_reading(Conn c):
    # Read while there is room: stop when commands pile up unprocessed
    # (blocked reserve, slow reader, batch left over), resume when they drain.
    # A kick, flush or list-tube under way reads on, as a blocked reserve
    # does, so that a hang-up is seen before the commands behind it run.
    cdef Py_ssize_t buffered = c.parser.buffered()
    cdef bint idle = c.wait != WAIT_NONE or not c.again_pending
    cdef bint want
    if c.reading_paused:
        want = buffered < READ_LOW and c.writable and idle
    else:
        want = buffered < READ_HIGH and c.writable and idle
    if want == c.reading_paused:
        c.reading_paused = not want
        hook1(c.core, c.reading_cb, want)


# -- tubes used and watched --------------------------------------------------------

cdef int use_tube(Core core, Conn c, Tube *t) except -1:
    tube_incref(t)
    c.use.using_ct -= 1
    tube_decref(core, c.use)
    c.use = t
    t.using_ct += 1
    return 0


cdef int add_watch(Conn c, Tube *t) except -1:
    if vec_grow(<void **>&c.watch, &c.capwatch, c.nwatch + 1, sizeof(Watch)) < 0:
        raise MemoryError()
    c.watch[c.nwatch].tube = t
    c.watch[c.nwatch].wpos = -1
    c.nwatch += 1
    t.watching_ct += 1
    tube_incref(t)
    return 0


cdef bint watches(Conn c, Tube *t) noexcept:
    cdef Py_ssize_t i
    for i in range(c.nwatch):
        if c.watch[i].tube == t:
            return True
    return False


cdef int drop_watch(Core core, Conn c, Tube *t) except -1:
    # Stop watching t (which c watches, and not as its only tube).
    cdef Py_ssize_t i
    for i in range(c.nwatch):
        if c.watch[i].tube == t:
            c.nwatch -= 1
            c.watch[i] = c.watch[c.nwatch]
            t.watching_ct -= 1
            tube_decref(core, t)
            break
    return 0


# -- waiting in reserve ---------------------------------------------------------------

cdef Job *conn_soonest(Conn c) noexcept:
    # the reserved job whose TTR ends first
    cdef Job *j
    if c.nreserved == 0:
        return NULL
    if c.soonest == NULL:
        j = c.reserved.head
        c.soonest = j
        while j != NULL:
            if j.deadline < c.soonest.deadline:
                c.soonest = j
            j = j.link[LINK_STATE].next
    return c.soonest


cdef inline bint deadline_soon(Conn c, int64_t now) noexcept:
    cdef Job *j = conn_soonest(c)
    return j != NULL and now >= j.deadline - MARGIN


cdef bint any_ready(Conn c) noexcept:
    # Any watched tube with a ready job, paused or not (as beanstalkd).
    cdef Py_ssize_t i
    for i in range(c.nwatch):
        if c.watch[i].tube.ready.len:
            return True
    return False


cdef int waiting_add(Core core, Conn c) except -1:
    cdef Py_ssize_t i
    cdef Tube *t
    for i in range(c.nwatch):
        t = c.watch[i].tube
        if vec_grow(<void **>&t.waiting, &t.capwaiting, t.nwaiting + 1, sizeof(Waiter)) < 0:
            raise MemoryError()
    c.wait = WAIT_JOB
    core.waiting_ct += 1
    for i in range(c.nwatch):
        t = c.watch[i].tube
        t.waiting[t.nwaiting].conn = <PyObject *>c
        t.waiting[t.nwaiting].slot = i
        c.watch[i].wpos = t.nwaiting
        t.nwaiting += 1
        tube_update(core, t)
    return 0


cdef void _waiter_drop(Core core, Tube *t, Py_ssize_t k) noexcept:
    # Remove entry k of t.waiting by moving the last entry into its place.
    cdef Conn moved
    t.nwaiting -= 1
    if k != t.nwaiting:
        t.waiting[k] = t.waiting[t.nwaiting]
        moved = <Conn>t.waiting[k].conn
        moved.watch[t.waiting[k].slot].wpos = k
    tube_update(core, t)


cdef void waiting_remove(Core core, Conn c) noexcept:
    cdef Py_ssize_t i
    if c.wait != WAIT_JOB:
        return
    c.wait = WAIT_NONE
    c.careful = True
    core.waiting_ct -= 1
    c.timeout_at = -1
    for i in range(c.nwatch):
        if c.watch[i].wpos >= 0:
            _waiter_drop(core, c.watch[i].tube, c.watch[i].wpos)
            c.watch[i].wpos = -1
    if c.timer.index >= 0:
        heap_remove(&core.conn_timers, c.timer.index)


cdef Conn waiter_take(Core core, Tube *t):
    # beanstalkd's pick: a rotating index into an array with swap-removal.
    cdef Py_ssize_t k
    cdef Conn c
    t.wrot = t.wrot % t.nwaiting
    k = t.wrot
    c = <Conn>t.waiting[k].conn
    c.watch[t.waiting[k].slot].wpos = -1
    _waiter_drop(core, t, k)
    t.wrot += 1
    waiting_remove(core, c)
    return c


cdef int conn_retime(Core core, Conn c, int64_t now) except -1:
    # A waiting connection's timer: its reserve timeout, or the start of
    # the DEADLINE_SOON margin of its soonest reserved job.
    cdef int64_t at = INT64_MAX
    cdef Job *j
    if c.wait == WAIT_JOB:
        if c.timeout_at >= 0:
            at = c.timeout_at
        j = conn_soonest(c)
        if j != NULL and j.deadline - MARGIN < at:
            at = j.deadline - MARGIN
    if at == INT64_MAX:
        if c.timer.index >= 0:
            heap_remove(&core.conn_timers, c.timer.index)
        return 0
    c.timer.at = at
    if c.timer.index >= 0:
        heap_fix(&core.conn_timers, c.timer.index)
    else:
        heap_insert(&core.conn_timers, &c.timer)
    return 0


# -- the end --------------------------------------------------------------------------

cdef int flush_forget(Core core, Conn c) except -1:
    # A flush (flush.pxi) is over or its connection is gone: let go of what
    # it holds. Here, because conn_release needs it too.
    if c.flush_tube != NULL:
        tube_decref(core, c.flush_tube)
        c.flush_tube = NULL
    free(c.flush_ids)
    c.flush_ids = NULL
    c.flush_nids = c.flush_pos = 0
    return 0


cdef int list_forget(Core core, Conn c) except -1:
    # A list-tube page (list.pxi) is out or its connection is gone.
    if c.list_tube != NULL:
        tube_decref(core, c.list_tube)
        c.list_tube = NULL
    free(c.list_keys)
    c.list_keys = NULL
    c.list_nkeys = c.list_pos = 0
    return 0


cdef int conn_release(Core core, Conn c) except -1:
    # The connection is gone (quit, hung up, lost): undo everything it holds.
    # Its reserved jobs may go to waiting connections: the caller settles.
    cdef Job *j
    cdef Tube *t
    if conn_released(c):
        return 0
    c.state = CONN_CLOSED
    waiting_remove(core, c)
    if c.timer.index >= 0:
        heap_remove(&core.conn_timers, c.timer.index)
    while c.reserved.head != NULL:
        j = c.reserved.head
        job_unlink(core, j)
        job_make_ready(core, j)
    if c.put_cost:
        mem_refund(core, c.put_cost)
        c.put_cost = 0
    flush_forget(core, c)
    list_forget(core, c)
    c.parser.discard_input()            # before the body it was reading into goes
    if c.put_job != NULL:
        job_discard(c.put_job)
        c.put_job = NULL
    # beanstalkd empties the watch list by removing entry 0 with swap-with-last,
    # then drops the used tube; tubes that die here leave the tube list (itself
    # swap-with-last) in that order, which list-tubes shows.
    while c.nwatch:
        t = c.watch[0].tube
        c.nwatch -= 1
        c.watch[0] = c.watch[c.nwatch]
        t.watching_ct -= 1
        tube_decref(core, t)
    c.use.using_ct -= 1
    tube_decref(core, c.use)
    c.use = NULL
    if c.producer:
        core.producer_ct -= 1
    if c.worker:
        core.worker_ct -= 1
    core.conn_ct -= 1
    return 0
