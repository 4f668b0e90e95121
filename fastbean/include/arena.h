/* Memory faulted in ahead of demand, on a helper thread.
 *
 * Small jobs (struct and body in one block) live in pymalloc arenas (1 MiB
 * each on 64-bit); blocks over 512 bytes come from malloc's heap. Fresh
 * memory costs its first writer a page fault and a page clear per 4 KiB;
 * under a put-heavy load that is the largest single cost on the event-loop
 * thread. So a helper thread does it:
 *
 * - it keeps a few pymalloc arenas mapped and written ahead of demand, and the
 *   loop takes arenas whose pages are already there. Freed arenas refill the
 *   pool first; past it they are unmapped, so memory still goes back to the
 *   OS after a backlog drains. Idle, the pool holds FB_ARENA_POOL arenas.
 * - malloc's heap grows FB_HEAP_PAD at a time (M_TOP_PAD); when the loop sees
 *   it has grown (fb_heap_check), the helper populates the new part with
 *   MADV_POPULATE_WRITE, which maps pages without writing to them, so it is
 *   safe while the loop already uses the start of it.
 *
 * When the server goes idle, the loop asks the helper to give memory back
 * (fb_giveback): it unmaps the pooled arenas, stops refilling the pool until
 * an arena is taken again, and has malloc return its free pages (malloc_trim,
 * whose time grows with the heap, so it is not run on the loop).
 *
 * The helper runs at nice 19. On a machine whose cores are all busy (the loop
 * on one, clients on the others) it would otherwise take whole slices from
 * the loop or from a client, stalling them for the few hundred microseconds
 * an arena takes to fault in, which showed as the slowest 1% of replies.
 * At nice 19 it mostly runs in time other threads leave idle. (SCHED_IDLE
 * went too far: starved on the loop's own core, the helper fell behind and
 * pipelined puts lost a fifth of their speed.) For the same reason the loop
 * never waits for the helper's lock: when the helper holds it (perhaps
 * preempted), the loop maps a cold arena, unmaps a freed one itself, or
 * looks at the heap again on a later allocation.
 */
#ifndef FASTBEAN_ARENA_H
#define FASTBEAN_ARENA_H

#include <Python.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#ifndef __GLIBC__
/* musl (musllinux wheels) has no malloc tuning calls: the padding and
 * trimming this file and the engine ask glibc for do nothing there. */
#define M_TOP_PAD (-2)
#define M_MMAP_THRESHOLD (-3)
static inline int mallopt(int param, int value) { (void)param; (void)value; return 0; }
static inline int malloc_trim(size_t pad) { (void)pad; return 0; }
#endif

#define FB_ARENA_POOL 8

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    void *pool[FB_ARENA_POOL];
    int count;
    size_t size;                 /* the arena size pymalloc asks for; 0 until it asks */
    int installed;
    PyObjectArenaAllocator orig;
    /* malloc's heap: the break last seen by the loop, and how far it is populated */
    char *heap_brk;
    char *heap_done;
    /* idle: the pool is not refilled until an arena is taken; giveback: asked to give back */
    int idle, giveback;
    /* counters, read by arena_stats() */
    unsigned long long taken_warm, taken_cold, prefaulted, givebacks;
} fb_arenas_t;

static fb_arenas_t fb_arenas = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* pymalloc carves an arena into 16 KiB pools and skips a whole pool when the
 * arena does not start on a pool boundary (1/64 of its memory); mmap only
 * promises page alignment, so arenas are mapped a little larger and trimmed. */
#define FB_POOL_ALIGN ((size_t)16 << 10)

static void *fb_map(size_t size)
{
    size_t span = size + FB_POOL_ALIGN;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *start = (char *)(((uintptr_t)p + FB_POOL_ALIGN - 1) & ~(uintptr_t)(FB_POOL_ALIGN - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    if (start + size < p + span)
        munmap(start + size, (size_t)(p + span - (start + size)));
    return start;
}

static void fb_populate(void *p, size_t size)
{
    /* One call on kernels that have it (5.14+), else a write per page. */
    if (madvise(p, size, MADV_POPULATE_WRITE) != 0) {
        long page = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < size; off += (size_t)page)
            ((volatile char *)p)[off] = 0;
    }
}

static void fb_heap_populate_locked(void)
{
    /* Populate what the heap grew by since last time. The loop may already be
     * using the start of it: populating only maps pages, it never writes them. */
    while (fb_arenas.heap_done < fb_arenas.heap_brk) {
        char *from = fb_arenas.heap_done;
        size_t n = (size_t)(fb_arenas.heap_brk - from);
        if (n > (1 << 20))
            n = 1 << 20;
        fb_arenas.heap_done = from + n;
        pthread_mutex_unlock(&fb_arenas.mu);
        madvise(from, n, MADV_POPULATE_WRITE);
        pthread_mutex_lock(&fb_arenas.mu);
    }
}

static void fb_giveback_locked(void)
{
    /* Unmap the pooled arenas and trim malloc's heap, outside the lock. */
    void *pool[FB_ARENA_POOL];
    int n = fb_arenas.count;
    size_t size = fb_arenas.size;
    memcpy(pool, fb_arenas.pool, sizeof(void *) * (size_t)n);
    fb_arenas.count = 0;
    fb_arenas.giveback = 0;
    pthread_mutex_unlock(&fb_arenas.mu);
    for (int i = 0; i < n; i++)
        munmap(pool[i], size);
    malloc_trim(0);
    char *cur = (char *)sbrk(0);
    pthread_mutex_lock(&fb_arenas.mu);
    /* nothing above the new break to populate (fb_heap_check sees it moved) */
    fb_arenas.heap_done = fb_arenas.heap_brk = cur;
    fb_arenas.givebacks++;
}

static int fb_refill_wanted(void)
{
    return fb_arenas.size != 0 && fb_arenas.count < FB_ARENA_POOL && !fb_arenas.idle;
}

static void *fb_prefault_main(void *unused)
{
    (void)unused;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);    /* this thread only; best effort */
    pthread_mutex_lock(&fb_arenas.mu);
    for (;;) {
        while (!fb_refill_wanted() && !fb_arenas.giveback
               && fb_arenas.heap_done >= fb_arenas.heap_brk)
            pthread_cond_wait(&fb_arenas.wake, &fb_arenas.mu);
        if (fb_arenas.giveback) {
            fb_giveback_locked();
            continue;
        }
        fb_heap_populate_locked();
        if (!fb_refill_wanted())
            continue;
        size_t size = fb_arenas.size;
        pthread_mutex_unlock(&fb_arenas.mu);
        void *p = fb_map(size);
        if (p != NULL)
            fb_populate(p, size);
        pthread_mutex_lock(&fb_arenas.mu);
        if (p == NULL) {
            /* Out of address space or memory: stop trying until an arena is
             * taken again; pymalloc's own fallback reports the failure. */
            pthread_cond_wait(&fb_arenas.wake, &fb_arenas.mu);
            continue;
        }
        if (fb_arenas.count >= FB_ARENA_POOL || fb_arenas.idle) {
            /* freed arenas filled the pool while this one was being faulted,
             * or the server went idle */
            pthread_mutex_unlock(&fb_arenas.mu);
            munmap(p, size);
            pthread_mutex_lock(&fb_arenas.mu);
            continue;
        }
        fb_arenas.pool[fb_arenas.count++] = p;
        fb_arenas.prefaulted++;
    }
    return NULL;
}

static void *fb_arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = NULL;
    if (pthread_mutex_trylock(&fb_arenas.mu) != 0)
        return fb_map(size);
    if (fb_arenas.size == 0)
        fb_arenas.size = size;   /* pymalloc's arena size, learnt from its first request */
    fb_arenas.idle = 0;          /* demand again: refill the pool */
    if (size == fb_arenas.size && fb_arenas.count > 0) {
        p = fb_arenas.pool[--fb_arenas.count];
        fb_arenas.taken_warm++;
    } else {
        fb_arenas.taken_cold++;
    }
    pthread_cond_signal(&fb_arenas.wake);
    pthread_mutex_unlock(&fb_arenas.mu);
    return p != NULL ? p : fb_map(size);
}

static void fb_arena_free(void *ctx, void *p, size_t size)
{
    (void)ctx;
    if (pthread_mutex_trylock(&fb_arenas.mu) == 0) {
        if (size == fb_arenas.size && fb_arenas.count < FB_ARENA_POOL && !fb_arenas.idle) {
            fb_arenas.pool[fb_arenas.count++] = p;
            p = NULL;
        }
        pthread_mutex_unlock(&fb_arenas.mu);
    }
    if (p != NULL)
        munmap(p, size);
}

/* The loop calls this after allocating a large job: when malloc's heap has
 * grown (it grows FB_HEAP_PAD at a time), the helper populates the new part.
 * sbrk(0) only reads the current break. */
#define FB_HEAP_PAD (8 << 20)
static char *fb_heap_seen;

static inline void fb_heap_check(void)
{
    char *cur = (char *)sbrk(0);
    if (cur == fb_heap_seen || !fb_arenas.installed)
        return;
    if (pthread_mutex_trylock(&fb_arenas.mu) != 0)
        return;                        /* seen again on a later big job */
    fb_heap_seen = cur;
    if (cur < fb_arenas.heap_done || fb_arenas.heap_done == NULL)
        fb_arenas.heap_done = cur;     /* trimmed (or first look): nothing new above */
    fb_arenas.heap_brk = cur;
    pthread_cond_signal(&fb_arenas.wake);
    pthread_mutex_unlock(&fb_arenas.mu);
}

/* The server is idle: give back the pool and malloc's free pages, on the
 * helper. 0 when asked (or done here, without a helper), -1 when the helper
 * holds the lock: the loop never waits for it, so it asks again later. */
static int fb_giveback(void)
{
    if (!fb_arenas.installed) {
        malloc_trim(0);
        return 0;
    }
    if (pthread_mutex_trylock(&fb_arenas.mu) != 0)
        return -1;
    fb_arenas.idle = 1;
    fb_arenas.giveback = 1;
    pthread_cond_signal(&fb_arenas.wake);
    pthread_mutex_unlock(&fb_arenas.mu);
    return 0;
}

/* Install the pool as pymalloc's arena allocator; 0 on success (or when
 * already installed), -1 if the helper thread could not be started. */
static int fb_arena_install(void)
{
    pthread_t tid;
    pthread_attr_t attr;
    PyObjectArenaAllocator mine = {NULL, fb_arena_alloc, fb_arena_free};

    if (fb_arenas.installed)
        return 0;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int err = pthread_create(&tid, &attr, fb_prefault_main, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0)
        return -1;
    mallopt(M_TOP_PAD, FB_HEAP_PAD);
    PyObject_GetArenaAllocator(&fb_arenas.orig);
    PyObject_SetArenaAllocator(&mine);
    fb_arenas.installed = 1;
    return 0;
}

#endif
