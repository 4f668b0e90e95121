/* faultkit's disk fault shim (LD_PRELOAD): a disk whose writeback fails.
 *
 * Only files under $FAULTKIT_DIR are touched (an fd's path: readlink of
 * /proc/self/fd/N). For each such file (by device and inode) the shim keeps
 * the byte ranges written (pwrite, pwrite64, write) since its last
 * successful fdatasync/fsync, through any descriptor.
 *
 * While the file named by $FAULTKIT_SYNC_TRIGGER exists, the next
 * fdatasync/fsync of such a file fails with EIO and consumes the trigger
 * (unlinks it; a count N > 1 in it is written back as N - 1). As Linux may
 * after a failed writeback, the bytes written since the last good sync do not
 * survive: the shim overwrites them with zeros (a real pwrite through a file
 * of its own), and forgets them (the pages are clean now).
 *
 * As Linux does (errseq), the failure is then reported once to every open
 * file description of the file: the next fdatasync/fsync through each
 * other descriptor fails with EIO too, without a log line of its own, and
 * so does one that was in flight. Descriptors are followed from their
 * open (open, open64, openat, openat64), the error count of their file
 * noted then; one the shim did not see opened counts from its sync's start.
 * Without that, a sync through another descriptor would report durable
 * what the failure has just zeroed.
 *
 * While the file named by $FAULTKIT_WRITE_TRIGGER exists, the next pwrite or
 * write to such a file fails with EIO, writes nothing, and consumes it.
 *
 * A trigger may name another errno after its count ("N ERRNO"): a failure
 * that says nothing about the disk (ENOMEM, say). The call fails with it and
 * does nothing else: a sync forgets no range, and no byte becomes zeros.
 *
 * While the file named by $FAULTKIT_POWER_TRIGGER exists, the next pwrite,
 * write or sync of such a file is a power loss: every byte written since
 * its file's last good sync (in every file still there) becomes zeros, and
 * the process is killed with SIGKILL. Unlinks count as done: the worst
 * case for a server that removes a file before what replaced it is synced.
 *
 * Each injected fault is a line in $FAULTKIT_LOG. Thread-safe (one mutex;
 * the server's sync and fill threads are pthreads), no Python, no malloc in
 * the write path but for the range table's growth. sync_file_range passes
 * through, and so does everything outside $FAULTKIT_DIR.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*sync_fn)(int);

static pwrite_fn real_pwrite, real_pwrite64;
static write_fn real_write;
static sync_fn real_fdatasync, real_fsync;
static const char *dir, *sync_trigger, *write_trigger, *power_trigger, *logpath;
static size_t dirlen;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct range { off_t start, end; uint64_t epoch; };
struct file {
    dev_t dev; ino_t ino;
    char path[4096];            /* where it was last written, for a power loss */
    uint64_t epoch;             /* bumped by each sync as it starts */
    uint64_t failures;          /* EIO faults injected so far */
    struct range *r; size_t n, cap;
};
#define MAXFILES 256
static struct file files[MAXFILES];
static size_t nfiles;

/* For each descriptor opened on a watched file: the file, and its failures
 * this descriptor has been told of (errseq's per-description cursor). */
#define MAXFDS 65536
struct desc { dev_t dev; ino_t ino; uint64_t seen; int valid; };
static struct desc descs[MAXFDS];

static void init(void)
{
    real_pwrite = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    real_write = (write_fn)dlsym(RTLD_NEXT, "write");
    real_fdatasync = (sync_fn)dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = (sync_fn)dlsym(RTLD_NEXT, "fsync");
    dir = getenv("FAULTKIT_DIR");
    dirlen = dir ? strlen(dir) : 0;
    sync_trigger = getenv("FAULTKIT_SYNC_TRIGGER");
    write_trigger = getenv("FAULTKIT_WRITE_TRIGGER");
    power_trigger = getenv("FAULTKIT_POWER_TRIGGER");
    logpath = getenv("FAULTKIT_LOG");
}

/* The fd's path if it is a file under $FAULTKIT_DIR, else 0. */
static int watched(int fd, char *path, size_t size)
{
    char link[64];
    pthread_once(&once, init);
    if (!dirlen)
        return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n <= 0)
        return 0;
    path[n] = 0;
    return (size_t)n > dirlen && strncmp(path, dir, dirlen) == 0 && path[dirlen] == '/';
}

static struct file *file_of(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return NULL;
    for (size_t i = 0; i < nfiles; i++)
        if (files[i].dev == st.st_dev && files[i].ino == st.st_ino)
            return &files[i];
    if (nfiles == MAXFILES) {       /* forget the oldest: it was reclaimed long ago */
        free(files[0].r);
        memmove(files, files + 1, sizeof files[0] * (MAXFILES - 1));
        nfiles--;
    }
    struct file *f = &files[nfiles++];
    memset(f, 0, sizeof *f);
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    return f;
}

static void note(struct file *f, off_t start, off_t end)
{
    if (!f || end <= start)
        return;
    if (f->n && f->r[f->n - 1].epoch == f->epoch && f->r[f->n - 1].end == start) {
        f->r[f->n - 1].end = end;   /* the usual case: appending */
        return;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct range *r = realloc(f->r, cap * sizeof *r);
        if (!r)
            return;
        f->r = r;
        f->cap = cap;
    }
    f->r[f->n++] = (struct range){start, end, f->epoch};
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static pthread_once_t open_once = PTHREAD_ONCE_INIT;

static void open_init(void)
{
    real_open = (open_fn)dlsym(RTLD_NEXT, "open");
    real_open64 = (open_fn)dlsym(RTLD_NEXT, "open64");
    real_openat = (openat_fn)dlsym(RTLD_NEXT, "openat");
    real_openat64 = (openat_fn)dlsym(RTLD_NEXT, "openat64");
}

/* The shim's own opens (its log, the triggers, zeroing): not followed. */
static int raw_open(const char *path, int flags, mode_t mode)
{
    pthread_once(&open_once, open_init);
    return real_open(path, flags, mode);
}

static void logline(const char *what, int fd, const char *path, long long bytes, size_t ranges)
{
    char line[4608];
    if (!logpath)
        return;
    int n = snprintf(line, sizeof line, "%s pid=%d tid=%ld fd=%d bytes=%lld ranges=%zu path=%s\n",
                     what, getpid(), (long)syscall(SYS_gettid), fd, bytes, ranges, path);
    int out = raw_open(logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (out >= 0) {
        real_write(out, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
        close(out);
    }
}

/* Consume a trigger file: the errno of the fault due (EIO unless the file
 * names another), 0 if none is. */
static int take(const char *trigger)
{
    char buf[32], *end;
    if (!trigger)
        return 0;
    int fd = raw_open(trigger, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long count = n > 0 ? (buf[n] = 0, strtol(buf, &end, 10)) : 0;
    long err = n > 0 ? strtol(end, NULL, 10) : 0;
    if (err <= 0)
        err = EIO;
    if (count > 1) {
        int len = snprintf(buf, sizeof buf, "%ld %ld\n", count - 1, err);
        if (ftruncate(fd, 0) == 0)
            real_pwrite(fd, buf, (size_t)len, 0);
        close(fd);
    } else {
        close(fd);
        unlink(trigger);
    }
    return (int)err;
}

/* Overwrite f's unsynced ranges with zeros; the bytes zeroed. */
static long long drop_unsynced(struct file *f, const char *path)
{
    static const char zeros[65536];
    long long bytes = 0;
    int out = raw_open(path, O_WRONLY | O_CLOEXEC, 0);
    for (size_t i = 0; out >= 0 && i < f->n; i++) {
        for (off_t pos = f->r[i].start; pos < f->r[i].end;) {
            size_t len = f->r[i].end - pos < (off_t)sizeof zeros ? (size_t)(f->r[i].end - pos)
                                                                 : sizeof zeros;
            ssize_t w = real_pwrite(out, zeros, len, pos);
            if (w <= 0)
                break;
            pos += w;
            bytes += w;
        }
    }
    if (out >= 0)
        close(out);
    f->n = 0;
    return bytes;
}

/* Under mu: a power loss if one is armed (then this never returns). */
static void power(int fd, const char *path)
{
    long long bytes = 0;
    size_t ranges = 0;
    if (!take(power_trigger))
        return;
    for (size_t i = 0; i < nfiles; i++) {
        struct stat st;
        if (files[i].n && files[i].path[0] && stat(files[i].path, &st) == 0
                && st.st_dev == files[i].dev && st.st_ino == files[i].ino) {
            ranges += files[i].n;
            bytes += drop_unsynced(&files[i], files[i].path);
        }
    }
    logline("power-loss", fd, path, bytes, ranges);
    kill(getpid(), SIGKILL);
    for (;;)
        pause();
}

static ssize_t do_write(int fd, const void *buf, size_t n, off_t off, int positional, pwrite_fn fn)
{
    char path[4096];
    if (!watched(fd, path, sizeof path))
        return positional ? fn(fd, buf, n, off) : real_write(fd, buf, n);
    pthread_mutex_lock(&mu);
    power(fd, path);
    int err = take(write_trigger);
    if (err) {
        logline(err == EIO ? "write-eio" : "write-shortage", fd, path, (long long)n, 0);
        pthread_mutex_unlock(&mu);
        errno = err;
        return -1;
    }
    off_t start = positional ? off : lseek(fd, 0, SEEK_CUR);
    ssize_t done = positional ? fn(fd, buf, n, off) : real_write(fd, buf, n);
    int saved = errno;
    if (done > 0 && start >= 0) {
        struct file *f = file_of(fd);
        note(f, start, start + done);
        if (f)
            snprintf(f->path, sizeof f->path, "%s", path);
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
    return done;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    pthread_once(&once, init);
    return do_write(fd, buf, n, off, 1, real_pwrite);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    pthread_once(&once, init);
    return do_write(fd, buf, n, off, 1, real_pwrite64);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    pthread_once(&once, init);
    return do_write(fd, buf, n, 0, 0, NULL);
}

/* A descriptor just opened: if its file is watched, it is told of the
 * failures from now on only. */
static int opened(int fd)
{
    char path[4096];
    int saved = errno;
    if (fd >= 0 && fd < MAXFDS && watched(fd, path, sizeof path)) {
        pthread_mutex_lock(&mu);
        struct file *f = file_of(fd);
        if (f)
            descs[fd] = (struct desc){f->dev, f->ino, f->failures, 1};
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
    return fd;
}

static mode_t mode_of(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    pthread_once(&open_once, open_init);
    return opened(real_open(path, flags, mode));
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    pthread_once(&open_once, open_init);
    return opened((real_open64 ? real_open64 : real_open)(path, flags, mode));
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    pthread_once(&open_once, open_init);
    return opened(real_openat(dirfd, path, flags, mode));
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    pthread_once(&open_once, open_init);
    return opened((real_openat64 ? real_openat64 : real_openat)(dirfd, path, flags, mode));
}

/* Under mu: the failures of f that fd has not been told of yet (from
 * `since`, the count at its sync's start, if the shim did not see it
 * opened); fd is told of them now. */
static uint64_t untold(int fd, struct file *f, uint64_t since)
{
    uint64_t seen = since;
    if (fd >= 0 && fd < MAXFDS && descs[fd].valid && descs[fd].dev == f->dev && descs[fd].ino == f->ino) {
        seen = descs[fd].seen;
        descs[fd].seen = f->failures;
    }
    return f->failures > seen ? f->failures - seen : 0;
}

static int do_sync(int fd, sync_fn fn)
{
    char path[4096];
    if (!watched(fd, path, sizeof path))
        return fn(fd);
    pthread_mutex_lock(&mu);
    power(fd, path);
    struct file *f = file_of(fd);
    int err = f ? take(sync_trigger) : 0;
    if (err) {
        size_t ranges = f->n;
        long long bytes = err == EIO ? drop_unsynced(f, path) : 0;
        if (err == EIO) {
            f->failures++;
            untold(fd, f, f->failures);         /* this descriptor is told now */
        }
        logline(err == EIO ? "sync-eio" : "sync-shortage", fd, path, bytes, ranges);
        pthread_mutex_unlock(&mu);
        errno = err;
        return -1;
    }
    uint64_t started = f ? ++f->epoch : 0;     /* writes from now on are not covered */
    uint64_t failures = f ? f->failures : 0;
    pthread_mutex_unlock(&mu);
    int rc = fn(fd);
    int saved = errno;
    if (rc == 0 && started) {
        pthread_mutex_lock(&mu);
        f = file_of(fd);        /* the table may have moved meanwhile */
        if (f && untold(fd, f, failures)) {
            /* a failure since this descriptor last looked: the bytes this
             * sync was to write back may be among the zeroed ones */
            pthread_mutex_unlock(&mu);
            errno = EIO;
            return -1;
        }
        if (f) {
            size_t k = 0;
            for (size_t i = 0; i < f->n; i++)
                if (f->r[i].epoch >= started)
                    f->r[k++] = f->r[i];
            f->n = k;
        }
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
    return rc;
}

int fdatasync(int fd)
{
    pthread_once(&once, init);
    return do_sync(fd, real_fdatasync);
}

int fsync(int fd)
{
    pthread_once(&once, init);
    return do_sync(fd, real_fsync);
}
