# What the engine keeps for the metrics endpoint (metrics.py): reply latency
# per command family, and the rows of stats-tube a scrape publishes. The
# inline lat_* calls are all the hot path pays: one clock read per read that
# starts a batch and one per write that ends it.
#
# Offers: lat_read, lat_run, lat_blocked, lat_written, lat_lost.
# Python: LATENCY_FAMILIES, TUBE_KEYS, TUBE_SUMMED, latency_histograms,
#   stats_text, tube_rows.
# Uses: clock, stats.

cdef extern from "hist.h":
    int FB_LATENCY_BOUNDS
    const int64_t fb_latency_bounds[]
    int fb_bucket(const int64_t *bounds, int n, int64_t v) noexcept nogil

LATENCY_FAMILIES = ("put", "reserve", "delete", "job", "peek", "tube", "stats", "other")

# stats-tube's numeric keys in its order: tube_rows() gives them in this order.
TUBE_KEYS = ("current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
             "current-jobs-delayed", "current-jobs-buried", "total-jobs", "current-using",
             "current-watching", "current-waiting", "cmd-delete", "cmd-pause-tube", "pause",
             "pause-time-left")
TUBE_SUMMED = 11      # the keys that add up across tubes (all but the pause times)

cdef uint8_t LAT_OF_OP[OP_COUNT]


cdef _lat_families():
    cdef int op
    for op in range(<int>OP_COUNT):
        LAT_OF_OP[op] = LAT_OTHER
    for family, ops in (
            (LAT_NONE, (OP_PUT, OP_QUIT)),    # a put is timed at its body (or its skipped body)
            (LAT_PUT, (OP_PUT_BODY, OP_SKIPPED)),
            (LAT_RESERVE, (OP_RESERVE, OP_RESERVE_TIMEOUT, OP_RESERVE_JOB, OP_RESERVE_BATCH)),
            (LAT_DELETE, (OP_DELETE, OP_DELETE_BATCH, OP_DELETE_EACH)),
            (LAT_JOB, (OP_RELEASE, OP_BURY, OP_TOUCH, OP_KICK, OP_KICK_JOB, OP_MOVE_JOB,
                       OP_REPRIORITIZE_JOB)),
            (LAT_PEEK, (OP_PEEK, OP_PEEK_READY, OP_PEEK_DELAYED, OP_PEEK_BURIED)),
            (LAT_TUBE, (OP_USE, OP_WATCH, OP_IGNORE, OP_LIST_TUBE_USED, OP_PAUSE_TUBE)),
            (LAT_STATS, (OP_STATS, OP_STATS_JOB, OP_STATS_TUBE, OP_LIST_TUBES,
                         OP_LIST_TUBES_WATCHED, OP_EXT))):
        for op in ops:
            LAT_OF_OP[op] = family

_lat_families()


cdef inline void lat_read(Conn c) noexcept:
    # Replies still owed for earlier reads keep the older start.
    if c.lat_npend == 0:
        c.read_ns = real_mono_ns()


cdef inline void lat_run(Conn c, int op) noexcept:
    cdef uint8_t f = LAT_OF_OP[op]
    if f != LAT_NONE:
        c.lat_pend[f] += 1
        c.lat_npend += 1


cdef inline void lat_blocked(Conn c) noexcept:
    # A reserve that waits for a job: the wait is the queue's, not the server's.
    c.lat_pend[LAT_RESERVE] -= 1
    c.lat_npend -= 1


cdef void lat_written(Core core, Conn c) noexcept:
    # The replies of every pending command leave now, in this write.
    cdef int64_t dt = real_mono_ns() - c.read_ns
    cdef int b = fb_bucket(fb_latency_bounds, FB_LATENCY_BOUNDS, dt)
    cdef int f
    for f in range(LAT_FAMILIES):
        if c.lat_pend[f]:
            core.lat_hist[f][b] += c.lat_pend[f]
            core.lat_sum_ns[f] += dt * c.lat_pend[f]
            c.lat_pend[f] = 0
    c.lat_npend = 0


cdef inline void lat_lost(Conn c) noexcept:
    memset(c.lat_pend, 0, sizeof(c.lat_pend))
    c.lat_npend = 0


# -- cold: one call each per scrape ------------------------------------------------

def latency_histograms(Core core):
    """Reply latency: (bucket bounds in seconds, [(family, per-bucket counts with
    +Inf last, sum in seconds)]). Counts are per bucket, not cumulative."""
    cdef int f, b
    bounds = [fb_latency_bounds[b] / 1e9 for b in range(FB_LATENCY_BOUNDS)]
    rows = []
    for f in range(LAT_FAMILIES):
        rows.append((LATENCY_FAMILIES[f], [core.lat_hist[f][b] for b in range(LAT_BUCKETS)],
                     core.lat_sum_ns[f] / 1e9))
    return bounds, rows


def stats_text(Core core):
    """The document `stats` answers."""
    return stats_yaml(core)


ctypedef struct TubeRank:
    Py_ssize_t jobs
    Py_ssize_t index


cdef inline bint _ranks_below(TubeRank *a, TubeRank *b) noexcept:
    # fewer jobs, or as many and later in list-tubes order
    return a.jobs < b.jobs or (a.jobs == b.jobs and a.index > b.index)


cdef void _rank_sift(TubeRank *h, Py_ssize_t n, Py_ssize_t i) noexcept:
    cdef Py_ssize_t k
    cdef TubeRank tmp
    while True:
        k = 2 * i + 1
        if k >= n:
            return
        if k + 1 < n and _ranks_below(&h[k + 1], &h[k]):
            k += 1
        if not _ranks_below(&h[k], &h[i]):
            return
        tmp = h[i]
        h[i] = h[k]
        h[k] = tmp
        i = k


cdef int _index_cmp(const void *a, const void *b) noexcept nogil:
    cdef Py_ssize_t x = (<const TubeRank *>a).index
    cdef Py_ssize_t y = (<const TubeRank *>b).index
    return (x > y) - (x < y)


cdef inline int64_t _whole_sec(int64_t ns) noexcept:
    return ns // SEC if ns >= 0 else -((-ns) // SEC)


def tube_rows(Core core, Py_ssize_t limit):
    """stats-tube's numbers (TUBE_KEYS order) for the `limit` tubes holding the
    most jobs, in list-tubes order, as (name, values...); then the sums of the
    first TUBE_SUMMED values over all other tubes, preceded by their count.

    Cost: one pass over the tubes and a heap of `limit` entries, so a scrape
    of 10,000 tubes costs the loop about 80 microseconds."""
    cdef Py_ssize_t i, n = 0, k
    cdef Tube *t
    cdef TubeRank r
    cdef TubeRank *top
    cdef int64_t now = mono_ns()
    cdef uint64_t tot[11]
    if limit < 0:
        limit = 0
    if limit > core.ntubes:
        limit = core.ntubes
    top = <TubeRank *>malloc((limit + 1) * sizeof(TubeRank))
    if top == NULL:
        raise MemoryError()
    memset(tot, 0, sizeof(tot))
    try:
        for i in range(core.ntubes):
            t = core.tubes[i]
            tot[0] += t.urgent_ct
            tot[1] += t.ready.len
            tot[2] += t.reserved_ct
            tot[3] += t.delay.len
            tot[4] += t.buried_ct
            tot[5] += t.total_jobs
            tot[6] += t.using_ct
            tot[7] += t.watching_ct
            tot[8] += t.nwaiting
            tot[9] += t.cmd_delete
            tot[10] += t.cmd_pause
            if limit == 0:
                continue
            r.jobs = t.ready.len + t.delay.len + t.buried_ct + t.reserved_ct
            r.index = i
            if n < limit:
                # grow the min-heap: sift the new entry up
                k = n
                top[k] = r
                n += 1
                while k > 0 and _ranks_below(&top[k], &top[(k - 1) // 2]):
                    r = top[k]
                    top[k] = top[(k - 1) // 2]
                    top[(k - 1) // 2] = r
                    k = (k - 1) // 2
            elif _ranks_below(&top[0], &r):
                top[0] = r
                _rank_sift(top, n, 0)
        qsort(top, n, sizeof(TubeRank), _index_cmp)
        rows = []
        for k in range(n):
            t = core.tubes[top[k].index]
            row = (<bytes>t.name, t.urgent_ct, t.ready.len, t.reserved_ct, t.delay.len,
                   t.buried_ct, t.total_jobs, t.using_ct, t.watching_ct, t.nwaiting,
                   t.cmd_delete, t.cmd_pause, _whole_sec(t.pause_ns),
                   _whole_sec(t.unpause_at - now) if t.pause_ns else 0)
            rows.append(row)
            for i in range(TUBE_SUMMED):
                tot[i] -= <uint64_t>row[i + 1]
        rest = (core.ntubes - n,) + tuple([tot[i] for i in range(TUBE_SUMMED)])
    finally:
        free(top)
    return rows, rest
