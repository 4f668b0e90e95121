/* nullserver: the least a beanstalk server can do per command, as a ceiling.
 *
 * One thread, epoll, non-blocking sockets on 127.0.0.1:PORT. Every `put`
 * line is answered "INSERTED <n>" once its body has arrived, and the body is
 * dropped: nothing is kept. `use TUBE` (which the load generator sends first)
 * gets "USING TUBE"; any other line gets UNKNOWN_COMMAND. All replies
 * to one read leave in one write, as a real server's would, so a command
 * costs one read and one write shared with the commands that came with it.
 * benchmarks/ceiling.py compares the servers with this one.
 *
 * With -b DIR -f 0 it is also the least a server can do to make each put
 * durable before answering it, as a ceiling for group commit: every put
 * appends a record of its body's size plus a header to a file in DIR,
 * zero-filled and synced before the first client, so each fdatasync is
 * an overwrite; the records a loop turn read go out in one write at its end;
 * sync threads (-k, default 1) run fdatasync back to back, each covering
 * every record written when it starts; a reply waits until its record is
 * covered, and leaves as soon as the finished sync is seen. No queue, no
 * parsing beyond put, nothing in Python: whatever a real server adds costs
 * it more than this.
 *
 *     nullserver PORT [-b DIR -f 0 [-k THREADS]]
 *
 * Built by benchmarks/harness.py (build_tool) with the system C compiler; not
 * part of the installed package.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINE_MAX_BYTES 224          /* beanstalkd's longest command line */

typedef struct {
    int fd;
    char *in;                       /* bytes read, not yet parsed */
    size_t inlen, incap;
    char *out;                      /* replies not yet written */
    size_t outlen, outcap;
    uint64_t skip;                  /* body bytes (and CRLF) still to drop */
    int want_out;                   /* EPOLLOUT registered */
    uint64_t need;                  /* -f: the replies wait for this many records on disk */
    int held;                       /* -f: in the held list */
} Conn;

static int epfd;
static uint64_t next_id = 1;

/* -f DIR: the group commit */
#define LOG_SIZE (64L << 20)
#define RECORD_HEADER 64            /* about a beanstalkd record's header and tube name */
static int logfd = -1;
static off_t log_off;
static size_t turn_bytes;           /* record bytes read this loop turn, written at its end */
static uint64_t records;            /* records read so far */
static uint64_t want, done, started;/* written and due / on disk / covered by started syncs */
static int idle_threads, nthreads = 1, busy;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int efd;
static Conn **held;
static size_t nheld, capheld;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void *grow(void *p, size_t *cap, size_t need)
{
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    if (n == *cap)
        return p;
    p = realloc(p, n);
    if (!p)
        die("realloc");
    *cap = n;
    return p;
}

static void reply(Conn *c, const char *s, size_t n)
{
    c->out = grow(c->out, &c->outcap, c->outlen + n);
    memcpy(c->out + c->outlen, s, n);
    c->outlen += n;
}

static void close_conn(Conn *c)
{
    for (size_t i = 0; i < nheld; i++)
        if (held[i] == c)
            held[i] = held[--nheld];
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

/* Answer every complete line in c->in, dropping put bodies. */
static void parse(Conn *c)
{
    size_t pos = 0;
    while (pos < c->inlen) {
        if (c->skip) {
            size_t take = c->inlen - pos < c->skip ? c->inlen - pos : c->skip;
            pos += take;
            c->skip -= take;
            continue;
        }
        char *line = c->in + pos;
        char *nl = memchr(line, '\n', c->inlen - pos);
        if (!nl) {
            if (c->inlen - pos > LINE_MAX_BYTES)    /* no line end in sight: drop it */
                pos = c->inlen;
            break;
        }
        size_t n = nl - line + 1;
        unsigned pri, delay, ttr;
        unsigned long bytes;
        if (n > 4 && memcmp(line, "put ", 4) == 0 &&
            sscanf(line + 4, "%u %u %u %lu", &pri, &delay, &ttr, &bytes) == 4) {
            char buf[40];
            int k = snprintf(buf, sizeof buf, "INSERTED %llu\r\n", (unsigned long long)next_id++);
            reply(c, buf, (size_t)k);
            c->skip = bytes + 2;
            if (logfd >= 0) {
                turn_bytes += RECORD_HEADER + bytes + 2;
                c->need = ++records;
            }
        } else if (n > 6 && memcmp(line, "use ", 4) == 0 && line[n - 2] == '\r') {
            reply(c, "USING ", 6);
            reply(c, line + 4, n - 4);
        } else {
            reply(c, "UNKNOWN_COMMAND\r\n", 17);
        }
        pos += n;
    }
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
}

static void set_out_interest(Conn *c, int want)
{
    if (want == c->want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl");
    c->want_out = want;
}

/* One read or write, again after EINTR: the bytes moved, 0 when it would
 * block, -1 when the connection is gone (a read of 0 is the peer's end). */
static ssize_t io(int fd, char *buf, size_t n, int writing)
{
    for (;;) {
        ssize_t k = writing ? write(fd, buf, n) : read(fd, buf, n);
        if (k > 0)
            return k;
        if (k < 0 && errno == EINTR)
            continue;
        return k < 0 && errno == EAGAIN ? 0 : -1;
    }
}

/* Write what is pending; 0 when the connection is gone. */
static int flush_out(Conn *c)
{
    if (logfd >= 0 && c->need > __atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        if (!c->held) {
            held = grow(held, &capheld, (nheld + 1) * sizeof *held);
            held[nheld++] = c;
            c->held = 1;
        }
        return 1;
    }
    while (c->outlen) {
        ssize_t n = io(c->fd, c->out, c->outlen, 1);
        if (n < 0)
            return 0;
        if (n == 0)
            break;
        memmove(c->out, c->out + n, c->outlen - (size_t)n);
        c->outlen -= (size_t)n;
    }
    set_out_interest(c, c->outlen > 0);
    return 1;
}

/* Read what has arrived and answer it; 0 when the connection is gone. */
static int on_readable(Conn *c)
{
    for (;;) {
        c->in = grow(c->in, &c->incap, c->inlen + 65536);
        ssize_t n = io(c->fd, c->in + c->inlen, c->incap - c->inlen, 0);
        if (n < 0)
            return 0;
        if (n == 0)
            break;
        c->inlen += (size_t)n;
        if ((size_t)n < 65536)
            break;
    }
    parse(c);
    return flush_out(c);
}

/* A sync thread: fdatasync back to back while records are due. */
static void *syncer(void *arg)
{
    (void)arg;
    uint64_t one = 1;
    pthread_mutex_lock(&mu);
    for (;;) {
        idle_threads++;
        while (!(__atomic_load_n(&want, __ATOMIC_SEQ_CST) > started && busy < nthreads))
            pthread_cond_wait(&wake, &mu);
        idle_threads--;
        uint64_t seq = started = want;
        busy++;
        pthread_mutex_unlock(&mu);
        if (fdatasync(logfd) < 0)
            die("fdatasync");
        pthread_mutex_lock(&mu);
        busy--;
        if (seq > done) {
            __atomic_store_n(&done, seq, __ATOMIC_RELEASE);
            if (write(efd, &one, sizeof one) < 0)
                die("eventfd write");
        }
    }
    return NULL;
}

/* The end of a loop turn: its records in one write, and a sync asked for. */
static void log_turn(void)
{
    static char *zeros;
    static size_t zcap;
    if (!turn_bytes)
        return;
    if (turn_bytes > zcap) {
        free(zeros);
        zcap = turn_bytes * 2;
        zeros = calloc(1, zcap);
        if (!zeros)
            die("calloc");
    }
    if (log_off + (off_t)turn_bytes > LOG_SIZE)
        log_off = 0;                        /* wrap: the file is only a ceiling's stand-in */
    if (pwrite(logfd, zeros, turn_bytes, log_off) != (ssize_t)turn_bytes)
        die("pwrite");
    log_off += turn_bytes;
    turn_bytes = 0;
    __atomic_store_n(&want, records, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&mu);
    if (idle_threads)
        pthread_cond_signal(&wake);
    pthread_mutex_unlock(&mu);
}

/* A sync finished: let out the replies it covered. */
static void on_synced(void)
{
    uint64_t n;
    if (read(efd, &n, sizeof n) < 0 && errno != EAGAIN)
        die("eventfd read");
    uint64_t upto = __atomic_load_n(&done, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < nheld;) {
        Conn *c = held[i];
        if (c->need > upto) {
            i++;
            continue;
        }
        held[i] = held[--nheld];
        c->held = 0;
        if (!flush_out(c))
            close_conn(c);
    }
}

static void open_log(const char *dir, int threads)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/nullserver.log", dir);
    logfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (logfd < 0)
        die(path);
    unlink(path);
    char *z = calloc(1, 1 << 20);
    if (!z)
        die("calloc");
    for (off_t off = 0; off < LOG_SIZE; off += 1 << 20)
        if (pwrite(logfd, z, 1 << 20, off) != 1 << 20)
            die("zero-fill");
    free(z);
    if (fsync(logfd) < 0)
        die("fsync");
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
        die("eventfd");
    nthreads = threads;
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, syncer, NULL) != 0)
            die("pthread_create");
    }
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int threads = 1, fsync_every = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-b") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "-f") == 0 && i + 1 < argc && strcmp(argv[i + 1], "0") == 0)
            fsync_every = 1, i++;
        else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else
            argc = 0;
    }
    if (argc < 2 || threads < 1 || !dir != !fsync_every) {
        fprintf(stderr, "use: nullserver PORT [-b DIR -f 0 [-k THREADS]]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (dir)
        open_log(dir, threads);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0)
        die("bind");
    if (listen(lfd, 1024) < 0)
        die("listen");
    epfd = epoll_create1(0);
    if (epfd < 0)
        die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) < 0)
        die("epoll_ctl");
    static Conn sync_mark;                  /* the eventfd's epoll tag */
    if (dir) {
        struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &sync_mark};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &sev) < 0)
            die("epoll_ctl");
    }

    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(epfd, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            Conn *c = evs[i].data.ptr;
            if (c == &sync_mark) {
                on_synced();
                continue;
            }
            if (c == NULL) {                  /* the listener: accept everything waiting */
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = calloc(1, sizeof *c);
                    if (!c)
                        die("calloc");
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev) < 0)
                        die("epoll_ctl");
                }
                continue;
            }
            int alive = 1;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                alive = on_readable(c);
            if (alive && (evs[i].events & EPOLLOUT))
                alive = flush_out(c);
            if (!alive)
                close_conn(c);
        }
        if (logfd >= 0)
            log_turn();
    }
}
