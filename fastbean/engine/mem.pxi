# Memory: what the jobs hold (core.mem_used, which --max-memory caps), and
# giving memory back to the OS once a big backlog has drained or the server
# has gone quiet. The pages themselves are faulted in ahead of demand by
# include/arena.h's helper thread.
#
# Offers: JOB_OVERHEAD, IDLE_WAIT, mem_charge, mem_refund, mem_release,
#   mem_new_job, mem_trim, mem_idle_arm, mem_idle.
# Python: tune_malloc, prefault_arenas, arena_stats.
# Uses: clock, table.
#
# Idle give-back: after any read, the tick looks again IDLE_WAIT later. If
# no read came meanwhile, the server is idle: the id table shrinks to fit
# its jobs (IDLE_TABLE_STEP buckets a loop turn), then the helper thread
# unmaps its arena pool and trims malloc's heap. A steady load never gets
# there, so it never pays for it.

cdef extern from "arena.h":
    int fb_arena_install()
    int fb_giveback() nogil
    void fb_heap_check() nogil
    size_t HEAP_PAD "FB_HEAP_PAD"
    ctypedef struct ArenaPool "fb_arenas_t":
        int count
        size_t size
        int installed
        int idle
        unsigned long long taken_warm, taken_cold, prefaulted, givebacks
    ArenaPool fb_arenas

cdef extern from "malloc.h":
    int malloc_trim(size_t pad)
    int mallopt(int param, int value)
    int M_MMAP_THRESHOLD

cdef enum:
    # Bytes charged per job beyond its body: the struct (144, or 128 without
    # a binlog) with the body after it in the same block, the block's
    # rounding (up to 15), an id-table bucket and a heap slot (8 each, up to
    # twice that just after they double).
    JOB_OVERHEAD = 192
    TRIM_AFTER = 64 << 20             # a backlog this big that drains gives its memory back
    BIG_JOB = 512                     # jobs bigger than this (struct and body) come from malloc's heap
    IDLE_WAIT = 1000000000            # ns without a read before the server counts as idle
    IDLE_TABLE_STEP = 16384           # id-table buckets moved per loop turn while idle


cdef inline void mem_charge(Core core, Py_ssize_t n) noexcept:
    # bytes of a job now held; the peak decides when a drain gives memory back
    core.mem_used += n
    if core.mem_used > core.mem_peak:
        core.mem_peak = core.mem_used


cdef inline void mem_refund(Core core, Py_ssize_t n) noexcept:
    # a charge for a job that was never made (a refused or abandoned put)
    core.mem_used -= n


cdef inline void mem_release(Core core, Py_ssize_t n) noexcept:
    # a job's bytes are gone; after a big backlog drains, the next tick trims
    core.mem_used -= n
    if core.mem_peak > TRIM_AFTER and core.mem_used * 8 < core.mem_peak and not core.trim_due:
        core.trim_due = True            # rearm() after this command arms the tick


cdef inline void mem_new_job(Py_ssize_t size) noexcept:
    if size > BIG_JOB:
        fb_heap_check()                 # big jobs come from malloc's heap: see include/arena.h


cdef void mem_trim(Core core) noexcept:
    # Give freed memory back once a big backlog has drained (small jobs
    # go back with pymalloc's arenas by themselves; big ones live in
    # malloc's heap, where live blocks near its top keep the rest). Not
    # under a steady churn: the next puts would fault the same pages in.
    if core.trim_due:
        core.trim_due = False
        core.mem_peak = core.mem_used
        malloc_trim(HEAP_PAD)


cdef inline void mem_idle_arm(Core core) noexcept:
    # Something was read since the last look: look again IDLE_WAIT from now.
    if core.idle_at == INT64_MAX and core.nreads != core.idle_reads:
        core.idle_reads = core.nreads
        core.idle_at = mono_ns() + IDLE_WAIT


cdef void mem_idle(Core core, int64_t now) noexcept:
    # The tick: if nothing was read for IDLE_WAIT, give memory back, a
    # bounded part per loop turn (idle_at = now: the tick comes again at once).
    if now < core.idle_at:
        return
    if core.nreads != core.idle_reads:
        core.idle_reads = core.nreads
        core.idle_at = now + IDLE_WAIT
    elif table_idle_shrink(&core.jobs, IDLE_TABLE_STEP) or fb_giveback() != 0:
        core.idle_at = now
    else:
        core.idle_at = INT64_MAX


def tune_malloc():
    """Process-wide malloc settings for a server (called once at start-up).

    A fixed mmap threshold keeps big arrays (heaps, the id table) in their
    own mappings, which free() unmaps; glibc's sliding threshold would move
    them onto the heap after the first large free."""
    mallopt(M_MMAP_THRESHOLD, 256 * 1024)


def prefault_arenas():
    """Have a helper thread fault in pymalloc's next arenas ahead of demand
    (see include/arena.h). The server calls this once at start-up; True if it runs."""
    return fb_arena_install() == 0


def arena_stats():
    """The prefault pool's counters (read without its lock: a snapshot for tests and logs)."""
    return {"installed": bool(fb_arenas.installed), "arena_size": fb_arenas.size,
            "pooled": fb_arenas.count, "prefaulted": fb_arenas.prefaulted,
            "taken_warm": fb_arenas.taken_warm, "taken_cold": fb_arenas.taken_cold,
            "idle": bool(fb_arenas.idle), "givebacks": fb_arenas.givebacks}
