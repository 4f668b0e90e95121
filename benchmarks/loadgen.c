/* loadgen: a beanstalk load generator that should never be the bottleneck.
 *
 * One process, one thread, epoll, non-blocking sockets: every connection keeps
 * DEPTH transactions in flight, each with exactly one command outstanding, and
 * all commands that become due on a wake-up leave in one write per socket.
 * A transaction is the unit of work of a workload (a put; a reserve and its
 * delete; a put, reserve and delete); its latency runs from its first command's
 * write to its last reply. The result is one JSON object on stdout.
 *
 * With -r it speaks RESP to a Redis server instead, the same workloads on the
 * two queue patterns Redis users build (the put, take and ack of each are in
 * usage() below); a transaction and DEPTH mean the same there.
 *
 * Built by benchmarks/harness.py (build_tool) with the system C compiler; not part of the
 * installed package.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { W_PUT, W_RESERVE, W_ROUNDTRIP, W_MIXED, W_PROBE };
enum { ST_PUT, ST_RESERVE, ST_DELETE,       /* the command a transaction waits on */
       ST_ACK,                                /* stream: the XACK before the XDEL */
       ST_DISCARD };                          /* stream: the XDEL of a failed XACK */
enum { P_BEANSTALK, P_LIST, P_STREAM };
enum { ROLE_PRODUCER, ROLE_CONSUMER };

/* Latency histogram: 1 us resolution below 1 ms, then 64 sub-buckets per
 * power of two, up to about 70 s. Percentiles are exact to within 1.6 %. */
#define LIN 1024
#define SUB 64
#define NOCT 27
static uint64_t hist[LIN + NOCT * SUB];
static uint64_t lat_max_ns;

static void hist_add(uint64_t ns)
{
    uint64_t us = ns / 1000;
    if (ns > lat_max_ns) lat_max_ns = ns;
    if (us < LIN) { hist[us]++; return; }
    int oct = 63 - __builtin_clzll(us) - 10;          /* us in [1024<<oct, 2048<<oct) */
    if (oct >= NOCT) oct = NOCT - 1;
    uint64_t sub = (us >> (oct + 4)) & (SUB - 1);
    hist[LIN + oct * SUB + sub]++;
}

static double hist_pct(double q, uint64_t total)
{
    uint64_t want = (uint64_t)(q * total), seen = 0;
    if (want >= total) want = total - 1;
    for (int i = 0; i < LIN + NOCT * SUB; i++) {
        seen += hist[i];
        if (seen > want) {
            if (i < LIN) return i + 0.5;
            int oct = (i - LIN) / SUB, sub = (i - LIN) % SUB;
            double lo = (double)(1024ull << oct) + (double)sub * (16ull << oct);
            return lo + (8ull << oct);
        }
    }
    return 0;
}

typedef struct {
    int fd, role;
    char *in; size_t inlen, incap;
    char *out; size_t outlen, outoff, outcap;
    /* the transactions in flight, in the order their pending replies will come */
    uint32_t *fifo; uint64_t *fifo_t0; int *fifo_st;
    int qhead, qlen, qcap;
    int active;                 /* transactions in flight */
    int done;                   /* no more transactions (drained or limit) */
    int want_out;               /* EPOLLOUT armed */
    uint64_t next_at;           /* probe pacing: earliest start of the next transaction */
    int index;                  /* RESP: names the stream consumer */
    char *key;                  /* RESP: the list or stream (per connection for roundtrips) */
    char *put_cmd; size_t put_cmd_len;      /* RESP: built once per connection */
    char *take_cmd; size_t take_cmd_len;
} Conn;

static int workload = W_PUT, nconns = 1, depth = 1, body_len = 100, proto = P_BEANSTALK;
static const char *stream_group = "g";
static double seconds = 2.0, warmup = 0.0;
static long long total_limit = -1;            /* transactions to start in all; -1 = none */
static long long started_txn;
static uint32_t put_delay, put_ttr = 60, put_pri = 1024;
static const char *tube = "bench";
static const char *host = "127.0.0.1";
static int port = 11300;
static uint64_t interval_ns;                  /* probe: gap between transactions */
static char *put_line; static size_t put_line_len;
static char *body;                            /* RESP puts carry it as an argument */
static Conn *conns;
static int epfd;
static uint64_t t_start, t_end, t_warm;
static uint64_t n_txn, n_cmds, n_errors, n_timeouts;
static char first_error[128];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p) die("realloc");
    return p;
}

static void out_add(Conn *c, const char *s, size_t n)
{
    if (c->outlen + n > c->outcap) {
        while (c->outlen + n > c->outcap) c->outcap = c->outcap ? c->outcap * 2 : 4096;
        c->out = xrealloc(c->out, c->outcap);
    }
    memcpy(c->out + c->outlen, s, n);
    c->outlen += n;
}

/* One RESP command, an array of bulk strings, as clients send them. */
static void out_resp(Conn *c, int argc, const char *const *argv, const size_t *lens)
{
    char num[32];
    int n = snprintf(num, sizeof num, "*%d\r\n", argc);
    out_add(c, num, n);
    for (int i = 0; i < argc; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        n = snprintf(num, sizeof num, "$%zu\r\n", len);
        out_add(c, num, n);
        out_add(c, argv[i], len);
        out_add(c, "\r\n", 2);
    }
}

/* The same command into a buffer of its own: the ones every transaction repeats. */
static char *resp_once(Conn *scratch, size_t *len, int argc, const char *const *argv, const size_t *lens)
{
    scratch->outlen = 0;
    out_resp(scratch, argc, argv, lens);
    char *copy = malloc(scratch->outlen);
    if (!copy) die("malloc");
    memcpy(copy, scratch->out, scratch->outlen);
    *len = scratch->outlen;
    return copy;
}

static void fifo_push(Conn *c, uint32_t txn, uint64_t t0, int st)
{
    if (c->qlen == c->qcap) {
        int ncap = c->qcap ? c->qcap * 2 : 64;
        uint32_t *f = malloc(ncap * sizeof *f);
        uint64_t *t = malloc(ncap * sizeof *t);
        int *s = malloc(ncap * sizeof *s);
        if (!f || !t || !s) die("malloc");
        for (int i = 0; i < c->qlen; i++) {
            int k = (c->qhead + i) % (c->qcap ? c->qcap : 1);
            f[i] = c->fifo[k]; t[i] = c->fifo_t0[k]; s[i] = c->fifo_st[k];
        }
        free(c->fifo); free(c->fifo_t0); free(c->fifo_st);
        c->fifo = f; c->fifo_t0 = t; c->fifo_st = s;
        c->qhead = 0; c->qcap = ncap;
    }
    int k = (c->qhead + c->qlen) % c->qcap;
    c->fifo[k] = txn; c->fifo_t0[k] = t0; c->fifo_st[k] = st;
    c->qlen++;
}

static void send_put(Conn *c, uint64_t t0)
{
    if (proto == P_BEANSTALK)
        out_add(c, put_line, put_line_len);
    else
        out_add(c, c->put_cmd, c->put_cmd_len);
    fifo_push(c, 0, t0, ST_PUT);
}

static void send_reserve(Conn *c, uint64_t t0)
{
    if (proto != P_BEANSTALK) {
        out_add(c, c->take_cmd, c->take_cmd_len);
        fifo_push(c, 0, t0, ST_RESERVE);
        return;
    }
    /* consumers in the mixed workload block; the others must not wait on an empty tube */
    if (workload == W_MIXED)
        out_add(c, "reserve\r\n", 9);
    else
        out_add(c, "reserve-with-timeout 0\r\n", 24);
    fifo_push(c, 0, t0, ST_RESERVE);
}

static void send_delete(Conn *c, uint64_t id, uint64_t t0)
{
    char buf[48];
    int n = snprintf(buf, sizeof buf, "delete %llu\r\n", (unsigned long long)id);
    out_add(c, buf, n);
    fifo_push(c, 0, t0, ST_DELETE);
}

/* RESP: the ack of what a take returned, the list's body or the stream entry's id. */
static void send_ack(Conn *c, const char *what, size_t len, uint64_t t0)
{
    char processing[256];
    if (proto == P_LIST) {
        snprintf(processing, sizeof processing, "%s:processing", c->key);
        const char *argv[] = { "LREM", processing, "1", what };
        size_t lens[] = { 4, strlen(processing), 1, len };
        out_resp(c, 4, argv, lens);
        fifo_push(c, 0, t0, ST_DELETE);
        return;
    }
    /* beanstalk's delete forgets the job: XACK takes it off the pending list, XDEL
     * out of the stream; both leave in one write, the transaction ends with XDEL's reply */
    const char *ack[] = { "XACK", c->key, stream_group, what };
    size_t ack_lens[] = { 4, strlen(c->key), strlen(stream_group), len };
    out_resp(c, 4, ack, ack_lens);
    fifo_push(c, 0, t0, ST_ACK);
    const char *del[] = { "XDEL", c->key, what };
    size_t del_lens[] = { 4, strlen(c->key), len };
    out_resp(c, 3, del, del_lens);
    fifo_push(c, 0, t0, ST_DELETE);
}

/* Start transactions until DEPTH are in flight (or pacing / the limit says wait). */
static void top_up(Conn *c, uint64_t now)
{
    while (!c->done && c->active < depth) {
        if (total_limit >= 0 && started_txn >= total_limit) { c->done = 1; break; }
        if (interval_ns) {
            if (now < c->next_at) break;
            c->next_at = now + interval_ns;
        }
        started_txn++;
        c->active++;
        if (workload == W_RESERVE || (workload == W_MIXED && c->role == ROLE_CONSUMER))
            send_reserve(c, now);
        else
            send_put(c, now);
    }
}

static void finish_txn(Conn *c, uint64_t t0, uint64_t now)
{
    c->active--;
    if (now >= t_warm && now <= t_end) {
        n_txn++;
        hist_add(now - t0);
    }
}

static void error_reply(const char *line, size_t n)
{
    n_errors++;
    if (!first_error[0]) {
        if (n > sizeof first_error - 1) n = sizeof first_error - 1;
        memcpy(first_error, line, n);
        for (size_t i = 0; i < n; i++)
            if (first_error[i] == '"' || first_error[i] == '\\' || (unsigned char)first_error[i] < 32)
                first_error[i] = '?';
    }
}

/* What a RESP reply holds that the workloads look at. */
typedef struct {
    char type;                      /* of the outer reply: + - : $ * */
    int is_null;                    /* $-1 or *-1: a take found nothing */
    long long integer;
    const char *error; size_t error_len;            /* the first error, nested or not */
    const char *bulk[2]; size_t bulk_len[2]; int nbulk;   /* the first two bulk strings */
} Reply;

/* The length of the one complete reply at p, 0 if it is not all here yet, -1 if it
 * is not RESP. Arrays nest (an XREADGROUP reply is four deep); their bulk strings
 * are collected in the order they come. */
static long resp_parse(const char *p, size_t avail, Reply *r, int nesting)
{
    if (avail < 3) return 0;
    const char *nl = memmem(p, avail, "\r\n", 2);
    if (!nl) return 0;
    size_t head = nl - p + 2;
    char *end;
    switch (p[0]) {
    case '+':
        return head;
    case '-':
        if (!r->error) { r->error = p + 1; r->error_len = nl - p - 1; }
        return head;
    case ':':
        r->integer = strtoll(p + 1, &end, 10);
        return end == nl ? (long)head : -1;
    case '$': case '*': {
        long long n = strtoll(p + 1, &end, 10);
        if (end != nl || nesting > 8) return -1;
        if (n < 0) {
            if (nesting == 0) r->is_null = 1;
            return head;
        }
        if (p[0] == '$') {
            if (avail < head + n + 2) return 0;
            if (r->nbulk < 2) { r->bulk[r->nbulk] = p + head; r->bulk_len[r->nbulk++] = n; }
            return head + n + 2;
        }
        size_t pos = head;
        for (long long i = 0; i < n; i++) {
            long got = resp_parse(p + pos, avail - pos, r, nesting + 1);
            if (got <= 0) return got;
            pos += got;
        }
        return pos;
    }
    default:
        return -1;
    }
}

/* A reply that is not what the command should get: its text, or its type. */
static void resp_error(const Reply *r, const char *p)
{
    if (r->error)
        error_reply(r->error, r->error_len);
    else {
        char what[48];
        int n = snprintf(what, sizeof what, "unexpected reply '%c'", p[0]);
        error_reply(what, n);
    }
}

static int on_resp_replies(Conn *c, uint64_t now)
{
    size_t pos = 0;
    while (pos < c->inlen) {
        char *p = c->in + pos;
        Reply r = { .type = p[0] };
        long got = resp_parse(p, c->inlen - pos, &r, 0);
        if (got == 0) break;
        if (got < 0 || c->qlen == 0) {
            const char *cr = memchr(p, '\r', c->inlen - pos);
            error_reply(p, cr ? (size_t)(cr - p) : c->inlen - pos);
            return -1;
        }
        int k = c->qhead;
        uint64_t t0 = c->fifo_t0[k];
        int st = c->fifo_st[k];
        c->qhead = (c->qhead + 1) % c->qcap; c->qlen--;
        if (now >= t_warm && now <= t_end) n_cmds++;
        int failed = r.type == '-';
        if (st == ST_PUT) {
            /* RPUSH answers the list's length, XADD the new entry's id */
            failed = failed || r.type != (proto == P_LIST ? ':' : '$') || r.is_null;
            if (failed) {
                resp_error(&r, p);
                c->active--;
            } else if (workload == W_ROUNDTRIP || workload == W_PROBE) {
                send_reserve(c, t0);
            } else {
                finish_txn(c, t0, now);
            }
        } else if (st == ST_RESERVE) {
            if (!failed && r.is_null) {             /* nothing to take: the queue is empty */
                c->active--;
                n_timeouts++;
                if (workload == W_RESERVE) c->done = 1;
            } else if (!failed && proto == P_LIST && r.type == '$' && r.nbulk == 1) {
                send_ack(c, r.bulk[0], r.bulk_len[0], t0);
            } else if (!failed && proto == P_STREAM && r.type == '*' && r.nbulk == 2) {
                send_ack(c, r.bulk[1], r.bulk_len[1], t0);      /* [[stream, [[id, fields]]]] */
            } else {
                resp_error(&r, p);
                c->active--;
            }
        } else if (st == ST_ACK) {
            if (failed || r.type != ':' || r.integer != 1) {
                resp_error(&r, p);
                if (c->qlen > 0) c->fifo_st[c->qhead] = ST_DISCARD;     /* its XDEL, written with it */
            }
        } else if (st == ST_DISCARD) {
            c->active--;
        } else {
            /* LREM and XDEL answer how many they removed */
            if (!failed && r.type == ':' && r.integer == 1)
                finish_txn(c, t0, now);
            else {
                resp_error(&r, p);
                c->active--;
            }
        }
        pos += got;
    }
    if (pos) {
        memmove(c->in, c->in + pos, c->inlen - pos);
        c->inlen -= pos;
    }
    return 0;
}

/* Parse every complete reply in c->in; returns 0, or -1 if the connection must go. */
static int on_replies(Conn *c, uint64_t now)
{
    if (proto != P_BEANSTALK) return on_resp_replies(c, now);
    size_t pos = 0;
    for (;;) {
        char *p = c->in + pos;
        size_t avail = c->inlen - pos;
        char *nl = memmem(p, avail, "\r\n", 2);
        if (!nl) break;
        size_t linelen = nl - p;
        size_t consumed = linelen + 2;
        if (c->qlen == 0) { error_reply(p, linelen); return -1; }
        int k = c->qhead;
        uint64_t t0 = c->fifo_t0[k];
        int st = c->fifo_st[k];
        if (st == ST_RESERVE && linelen > 9 && memcmp(p, "RESERVED ", 9) == 0) {
            unsigned long long id; size_t blen;
            if (sscanf(p + 9, "%llu %zu", &id, &blen) != 2) { error_reply(p, linelen); return -1; }
            if (avail < consumed + blen + 2) break;          /* body not all here yet */
            consumed += blen + 2;
            c->qhead = (c->qhead + 1) % c->qcap; c->qlen--;
            if (now >= t_warm && now <= t_end) n_cmds++;
            send_delete(c, id, t0);
        } else {
            c->qhead = (c->qhead + 1) % c->qcap; c->qlen--;
            if (now >= t_warm && now <= t_end) n_cmds++;
            if (st == ST_PUT) {
                if (linelen < 9 || memcmp(p, "INSERTED ", 9) != 0) {
                    error_reply(p, linelen);
                    c->active--;
                } else if (workload == W_ROUNDTRIP || workload == W_PROBE) {
                    send_reserve(c, t0);
                } else {
                    finish_txn(c, t0, now);
                }
            } else if (st == ST_RESERVE) {
                c->active--;
                if (linelen == 9 && memcmp(p, "TIMED_OUT", 9) == 0) {
                    n_timeouts++;
                    if (workload == W_RESERVE) c->done = 1;  /* the tube is drained */
                } else {
                    error_reply(p, linelen);
                }
            } else {
                if (linelen == 7 && memcmp(p, "DELETED", 7) == 0)
                    finish_txn(c, t0, now);
                else {
                    error_reply(p, linelen);
                    c->active--;
                }
            }
        }
        pos += consumed;
    }
    if (pos) {
        memmove(c->in, c->in + pos, c->inlen - pos);
        c->inlen -= pos;
    }
    return 0;
}

static void set_out_interest(Conn *c, int want)
{
    if (want == c->want_out) return;
    struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
    c->want_out = want;
}

static int flush_out(Conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
        if (n < 0) {
            if (errno == EAGAIN) { set_out_interest(c, 1); return 0; }
            if (errno == EINTR) continue;
            return -1;
        }
        c->outoff += n;
    }
    c->outoff = c->outlen = 0;
    set_out_interest(c, 0);
    return 0;
}

static int on_readable(Conn *c, uint64_t now)
{
    for (;;) {
        if (c->incap - c->inlen < 65536) {
            c->incap = c->incap * 2 > c->inlen + 65536 ? c->incap * 2 : c->inlen + 65536;
            c->in = xrealloc(c->in, c->incap);
        }
        ssize_t n = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
        if (n < 0) {
            if (errno == EAGAIN) break;
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) return -1;
        c->inlen += n;
        if ((size_t)n < c->incap - c->inlen + n) break;   /* short read: socket drained */
    }
    return on_replies(c, now);
}

/* Blocking exchange during set-up: send a command, read one reply line into buf. */
static void setup_exchange(int fd, const char *cmd, size_t n, char *buf, size_t size)
{
    size_t got = 0;
    if (write(fd, cmd, n) != (ssize_t)n) die("setup write");
    while (got < 2 || memcmp(buf + got - 2, "\r\n", 2) != 0) {
        ssize_t r = read(fd, buf + got, size - 1 - got);
        if (r <= 0) die("setup read");
        got += r;
        if (got >= size - 1) break;
    }
    buf[got] = 0;
}

static void setup_cmd(int fd, const char *line, const char *expect_prefix)
{
    char buf[512];
    size_t n = strlen(line);
    setup_exchange(fd, line, n, buf, sizeof buf);
    if (strncmp(buf, expect_prefix, strlen(expect_prefix)) != 0) {
        fprintf(stderr, "loadgen: set-up '%.*s' got '%s'\n", (int)n - 2, line, buf);
        exit(2);
    }
}

/* RESP set-up of one connection: its key, the put and take it repeats, the
 * stream's consumer group (from the stream's start, so a prefill is seen). */
static void setup_resp(Conn *c, const char *key)
{
    Conn scratch = { 0 };
    c->key = strdup(key);
    char processing[256], consumer[32];
    snprintf(processing, sizeof processing, "%s:processing", key);
    snprintf(consumer, sizeof consumer, "c-%d", c->index);
    size_t blen = body_len;
    /* the mixed workload's consumers block, as beanstalk's reserve does; the others must not */
    int blocking = workload == W_MIXED;
    if (proto == P_LIST) {
        const char *put[] = { "RPUSH", key, body };
        size_t put_lens[] = { 5, strlen(key), blen };
        c->put_cmd = resp_once(&scratch, &c->put_cmd_len, 3, put, put_lens);
        const char *take[] = { blocking ? "BLMOVE" : "LMOVE", key, processing, "LEFT", "RIGHT", "0" };
        c->take_cmd = resp_once(&scratch, &c->take_cmd_len, blocking ? 6 : 5, take, NULL);
    } else {
        const char *put[] = { "XADD", key, "*", "b", body };
        size_t put_lens[] = { 4, strlen(key), 1, 1, blen };
        c->put_cmd = resp_once(&scratch, &c->put_cmd_len, 5, put, put_lens);
        const char *take[] = { "XREADGROUP", "GROUP", stream_group, consumer, "COUNT", "1",
                               "STREAMS", key, ">" };
        const char *take_blocking[] = { "XREADGROUP", "GROUP", stream_group, consumer, "COUNT", "1",
                                        "BLOCK", "0", "STREAMS", key, ">" };
        c->take_cmd = blocking ? resp_once(&scratch, &c->take_cmd_len, 11, take_blocking, NULL)
                               : resp_once(&scratch, &c->take_cmd_len, 9, take, NULL);
        if (workload != W_PUT) {
            const char *create[] = { "XGROUP", "CREATE", key, stream_group, "0", "MKSTREAM" };
            char buf[512];
            scratch.outlen = 0;
            out_resp(&scratch, 6, create, NULL);
            setup_exchange(c->fd, scratch.out, scratch.outlen, buf, sizeof buf);
            if (strncmp(buf, "+OK", 3) != 0 && strncmp(buf, "-BUSYGROUP", 10) != 0) {
                fprintf(stderr, "loadgen: set-up XGROUP CREATE %s got '%s'\n", key, buf);
                exit(2);
            }
        }
    }
    free(scratch.out);
}

static int connect_one(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) { fprintf(stderr, "loadgen: bad host\n"); exit(2); }
    for (int attempt = 0; ; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        /* a burst of 1000 connects can overflow a small accept backlog */
        if ((errno == ECONNREFUSED || errno == EAGAIN || errno == ETIMEDOUT) && attempt < 50) {
            close(fd);
            usleep(20000);
            continue;
        }
        die("connect");
    }
}

static void usage(void)
{
    fprintf(stderr,
        "usage: loadgen -p PORT [-H HOST] -w put|reserve|roundtrip|mixed|probe\n"
        "               [-c CONNS] [-d DEPTH] [-b BODY] [-t SECONDS] [-W WARMUP]\n"
        "               [-n TRANSACTIONS] [-T TUBE] [-D DELAY] [-R TTR] [-P PRI] [-i INTERVAL_US]\n"
        "               [-r list|stream]\n"
        "  put        each connection puts into TUBE\n"
        "  reserve    reserve-with-timeout 0 + delete from TUBE until it is empty\n"
        "  roundtrip  put, reserve, delete, each connection in a tube of its own\n"
        "  mixed      half the connections put into TUBE, half reserve + delete from it\n"
        "  probe      roundtrips paced by -i, for worst-case latency under a storm\n"
        "Without -t (or with -t 0) the run ends when -n transactions are done or the tube is empty.\n"
        "-r: a Redis server, TUBE the key (roundtrips: one per connection), no -D -R -P\n"
        "  list    put RPUSH TUBE body; take LMOVE TUBE TUBE:processing LEFT RIGHT\n"
        "          (BLMOVE ... 0 for mixed consumers); ack LREM TUBE:processing 1 body\n"
        "  stream  put XADD TUBE * b body; take XREADGROUP GROUP g c-N COUNT 1 STREAMS TUBE >\n"
        "          (BLOCK 0 for mixed consumers); ack XACK TUBE g id and XDEL TUBE id, one write\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int opt, beanstalk_only = 0;
    while ((opt = getopt(argc, argv, "p:H:w:c:d:b:t:W:n:T:D:R:P:i:r:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'H': host = optarg; break;
        case 'w':
            if (!strcmp(optarg, "put")) workload = W_PUT;
            else if (!strcmp(optarg, "reserve")) workload = W_RESERVE;
            else if (!strcmp(optarg, "roundtrip")) workload = W_ROUNDTRIP;
            else if (!strcmp(optarg, "mixed")) workload = W_MIXED;
            else if (!strcmp(optarg, "probe")) workload = W_PROBE;
            else usage();
            break;
        case 'c': nconns = atoi(optarg); break;
        case 'd': depth = atoi(optarg); break;
        case 'b': body_len = atoi(optarg); break;
        case 't': seconds = atof(optarg); break;
        case 'W': warmup = atof(optarg); break;
        case 'n': total_limit = atoll(optarg); break;
        case 'T': tube = optarg; break;
        case 'D': put_delay = strtoul(optarg, NULL, 10); beanstalk_only = 1; break;
        case 'R': put_ttr = strtoul(optarg, NULL, 10); beanstalk_only = 1; break;
        case 'P': put_pri = strtoul(optarg, NULL, 10); beanstalk_only = 1; break;
        case 'i': interval_ns = strtoull(optarg, NULL, 10) * 1000ull; break;
        case 'r':
            if (!strcmp(optarg, "list")) proto = P_LIST;
            else if (!strcmp(optarg, "stream")) proto = P_STREAM;
            else usage();
            break;
        default: usage();
        }
    }
    if (nconns < 1 || depth < 1 || body_len < 0 || (workload == W_MIXED && nconns < 2)) usage();
    if (proto != P_BEANSTALK && beanstalk_only) usage();       /* Redis has no delay, TTR or priority */
    if (workload == W_PROBE && !interval_ns) interval_ns = 1000000;
    signal(SIGPIPE, SIG_IGN);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* the put command with its body, built once */
    char head[96];
    int hl = snprintf(head, sizeof head, "put %u %u %u %d\r\n", put_pri, put_delay, put_ttr, body_len);
    put_line_len = hl + body_len + 2;
    put_line = malloc(put_line_len);
    memcpy(put_line, head, hl);
    for (int i = 0; i < body_len; i++) put_line[hl + i] = 'a' + i % 26;
    memcpy(put_line + hl + body_len, "\r\n", 2);
    body = put_line + hl;

    conns = calloc(nconns, sizeof *conns);
    epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1");
    char line[300];
    for (int i = 0; i < nconns; i++) {
        Conn *c = &conns[i];
        c->fd = connect_one();
        c->role = (workload == W_MIXED && i % 2) ? ROLE_CONSUMER : ROLE_PRODUCER;
        c->index = i;
        const char *t = tube;
        char own[220];
        if (workload == W_ROUNDTRIP || workload == W_PROBE) {
            snprintf(own, sizeof own, "%s.%d.%d", tube, (int)getpid(), i);
            t = own;
        }
        if (proto != P_BEANSTALK) {
            setup_resp(c, t);
        } else {
            snprintf(line, sizeof line, "use %s\r\n", t);
            setup_cmd(c->fd, line, "USING ");
        }
        if (proto == P_BEANSTALK && workload != W_PUT) {
            snprintf(line, sizeof line, "watch %s\r\n", t);
            setup_cmd(c->fd, line, "WATCHING ");
            setup_cmd(c->fd, "ignore default\r\n", "WATCHING ");
        }
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }

    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    t_start = now_ns();
    t_warm = t_start + (uint64_t)(warmup * 1e9);
    t_end = seconds > 0 ? t_warm + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    for (int i = 0; i < nconns; i++) {
        top_up(&conns[i], t_start);
        if (flush_out(&conns[i]) < 0) die("write");
    }

    struct epoll_event evs[1024];
    int alive = nconns;
    uint64_t last_check = t_start;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= t_end || alive == 0) break;
        if (now - last_check > 10000000) {          /* is any connection still working? */
            int busy = 0;
            last_check = now;
            for (int i = 0; i < nconns && !busy; i++)
                if (conns[i].fd >= 0 && (!conns[i].done || conns[i].active > 0)) busy = 1;
            if (!busy) break;
        }
        int timeout = 100;
        if (interval_ns) timeout = 1;
        int n = epoll_wait(epfd, evs, 1024, timeout);
        if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
        now = now_ns();
        for (int k = 0; k < n; k++) {
            Conn *c = evs[k].data.ptr;
            if (c->fd < 0) continue;
            int bad = 0;
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                bad = on_readable(c, now) < 0;
            if (!bad) {
                top_up(c, now);
                bad = flush_out(c) < 0;
            }
            if (bad) {
                if (!first_error[0]) snprintf(first_error, sizeof first_error, "connection lost");
                n_errors++;
                epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = -1;
                alive--;
            }
        }
        if (interval_ns) {
            for (int i = 0; i < nconns; i++) {
                Conn *c = &conns[i];
                if (c->fd >= 0 && c->active < depth && !c->done) {
                    top_up(c, now);
                    if (flush_out(c) < 0) die("write");
                }
            }
        }
    }
    uint64_t t_stop = now_ns();
    if (t_stop > t_end) t_stop = t_end;
    getrusage(RUSAGE_SELF, &ru1);
    double cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec)
               + ((ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) + (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / 1e6;
    double elapsed = (t_stop - (t_warm < t_stop ? t_warm : t_stop)) / 1e9;
    uint64_t total = n_txn;
    printf("{\"transactions\": %llu, \"commands\": %llu, \"seconds\": %.6f, \"ops_per_sec\": %.1f, "
           "\"cmds_per_sec\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, "
           "\"client_cpu_sec\": %.4f, \"errors\": %llu, \"timeouts\": %llu, \"first_error\": \"%s\"}\n",
           (unsigned long long)total, (unsigned long long)n_cmds, elapsed,
           elapsed > 0 ? total / elapsed : 0.0, elapsed > 0 ? n_cmds / elapsed : 0.0,
           total ? hist_pct(0.50, total) : 0.0, total ? hist_pct(0.99, total) : 0.0,
           lat_max_ns / 1000.0, cpu, (unsigned long long)n_errors, (unsigned long long)n_timeouts,
           first_error);
    for (int i = 0; i < nconns; i++)
        if (conns[i].fd >= 0) close(conns[i].fd);
    return 0;
}
