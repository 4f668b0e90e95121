/* delayproxy: TCP on loopback with a round trip added, for what this machine
 * lacks (its kernel has no netem): each byte a proxied connection carries is
 * held DELAY microseconds before it is passed on, in each direction, so a
 * request and its answer take 2 x DELAY longer.
 *
 *     delayproxy -d DELAY_US LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]
 *
 * One process, one thread, epoll. Every listening port accepts on 127.0.0.1
 * and connects each client to 127.0.0.1:TARGET_PORT; what one side sends is
 * queued with the time it arrived and written to the other side once DELAY
 * has passed, in order. A side that closes or fails closes both at once
 * (bytes still held are dropped: enough for NATS, whose clients close only
 * to leave). Nothing bounds what is held: the targets here read as fast as
 * they are written to. It prints "ready" once every port listens, and runs
 * until killed.
 *
 * tests/support/faultkit/proxy.py cuts connections for the fault tests; this
 * one delays them, in C, so that it takes little of the CPU it is measuring.
 *
 * Built by benchmarks/harness.py (build_tool); not part of the installed package.
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define CHUNK 65536

struct chunk {
    struct chunk *next;
    int64_t due;            /* monotonic µs when it may leave */
    size_t len, off;
    char data[];
};

struct side;

/* one direction: bytes read from `from`, waiting to be written to `to` */
struct pipe_ {
    struct side *from, *to;
    struct chunk *head, *tail;
};

struct side {
    int fd;
    int listener;           /* -1 for a connection, else index of the port it listens on */
    struct side *peer;
    struct pipe_ *out;      /* what this side receives and the peer will get */
    struct pipe_ *in;       /* what the peer received, to write to this side */
    int want_write;
};

static int64_t delay_us;
static int epfd;
static int targets[MAX_PORTS];

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void watch(struct side *s, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | (s->want_write ? EPOLLOUT : 0), .data.ptr = s};
    if (epoll_ctl(epfd, op, s->fd, &ev) < 0)
        die("epoll_ctl");
}

static void free_pipe(struct pipe_ *p)
{
    while (p->head) {
        struct chunk *c = p->head;
        p->head = c->next;
        free(c);
    }
    free(p);
}

/* every live connection pair, to find due chunks without a timer per chunk */
static struct pipe_ **pipes;
static size_t npipes, cap_pipes;

static void add_pipe(struct pipe_ *p)
{
    if (npipes == cap_pipes) {
        cap_pipes = cap_pipes ? 2 * cap_pipes : 64;
        pipes = realloc(pipes, cap_pipes * sizeof *pipes);
        if (!pipes)
            die("realloc");
    }
    pipes[npipes++] = p;
}

static void drop_pipe(struct pipe_ *p)
{
    for (size_t i = 0; i < npipes; i++)
        if (pipes[i] == p) {
            pipes[i] = pipes[--npipes];
            break;
        }
    free_pipe(p);
}

static void close_pair(struct side *s)
{
    struct side *t = s->peer;
    drop_pipe(s->out);
    drop_pipe(t->out);
    close(s->fd);
    close(t->fd);
    free(s);
    free(t);
}

/* write what is due on p; -1 if the receiving side failed */
static int flush(struct pipe_ *p, int64_t now)
{
    struct side *to = p->to;
    while (p->head && p->head->due <= now) {
        struct chunk *c = p->head;
        ssize_t n = write(to->fd, c->data + c->off, c->len - c->off);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!to->want_write) {
                    to->want_write = 1;
                    watch(to, EPOLL_CTL_MOD);
                }
                return 0;
            }
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->off += (size_t)n;
        if (c->off < c->len)
            continue;
        p->head = c->next;
        if (!p->head)
            p->tail = NULL;
        free(c);
    }
    if (to->want_write) {
        to->want_write = 0;
        watch(to, EPOLL_CTL_MOD);
    }
    return 0;
}

/* read what s has; -1 once it closed or failed */
static int take(struct side *s, int64_t now)
{
    for (;;) {
        struct chunk *c = malloc(sizeof *c + CHUNK);
        if (!c)
            die("malloc");
        ssize_t n = read(s->fd, c->data, CHUNK);
        if (n <= 0) {
            free(c);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return 0;
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        c->next = NULL;
        c->due = now + delay_us;
        c->len = (size_t)n;
        c->off = 0;
        if (s->out->tail)
            s->out->tail->next = c;
        else
            s->out->head = c;
        s->out->tail = c;
        if (n < CHUNK)
            return 0;
    }
}

static struct side *new_side(int fd)
{
    struct side *s = calloc(1, sizeof *s);
    if (!s)
        die("calloc");
    s->fd = fd;
    s->listener = -1;
    return s;
}

static void accept_one(struct side *l)
{
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)targets[l->listener]),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* connect blocking: on loopback it is immediate, or refused */
    if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof a) < 0) {
        if (up >= 0)
            close(up);
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (fcntl(up, F_SETFL, O_NONBLOCK) < 0)
        die("fcntl");
    struct side *c = new_side(fd), *t = new_side(up);
    c->peer = t;
    t->peer = c;
    c->out = calloc(1, sizeof *c->out);
    t->out = calloc(1, sizeof *t->out);
    if (!c->out || !t->out)
        die("calloc");
    c->out->from = c;
    c->out->to = t;
    t->out->from = t;
    t->out->to = c;
    c->in = t->out;
    t->in = c->out;
    add_pipe(c->out);
    add_pipe(t->out);
    watch(c, EPOLL_CTL_ADD);
    watch(t, EPOLL_CTL_ADD);
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "delayproxy: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        exit(1);
    }
    return fd;
}

static void usage(void)
{
    fprintf(stderr, "usage: delayproxy -d DELAY_US LISTEN_PORT:TARGET_PORT [...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int opt, nports = 0;
    char *end;
    delay_us = -1;
    while ((opt = getopt(argc, argv, "d:")) != -1) {
        if (opt != 'd')
            usage();
        delay_us = strtoll(optarg, &end, 10);
        if (*end || delay_us < 0)
            usage();
    }
    if (delay_us < 0 || optind == argc || argc - optind > MAX_PORTS)
        usage();
    signal(SIGPIPE, SIG_IGN);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        die("epoll_create1");
    for (int i = optind; i < argc; i++, nports++) {
        int lport, tport;
        char tail;
        if (sscanf(argv[i], "%d:%d%c", &lport, &tport, &tail) != 2 || lport <= 0 || lport > 65535
            || tport <= 0 || tport > 65535)
            usage();
        targets[nports] = tport;
        struct side *l = new_side(listen_on(lport));
        l->listener = nports;
        watch(l, EPOLL_CTL_ADD);
    }
    printf("ready\n");
    fflush(stdout);

    struct epoll_event evs[256];
    for (;;) {
        /* sleep until the first chunk falls due (or an event) */
        int64_t now = now_us(), first = -1;
        for (size_t i = 0; i < npipes; i++)
            if (pipes[i]->head && !pipes[i]->to->want_write && (first < 0 || pipes[i]->head->due < first))
                first = pipes[i]->head->due;
        struct timespec wait = {0, 0}, *timeout = NULL;
        if (first >= 0) {
            int64_t left = first > now ? first - now : 0;
            wait.tv_sec = left / 1000000;
            wait.tv_nsec = (left % 1000000) * 1000;
            timeout = &wait;
        }
        int n = epoll_pwait2(epfd, evs, 256, timeout, NULL);
        if (n < 0 && errno != EINTR)
            die("epoll_pwait2");
        now = now_us();
        for (int i = 0; i < n; i++) {
            struct side *s = evs[i].data.ptr;
            if (s == NULL)
                continue;           /* its pair was closed earlier in this batch */
            if (s->listener >= 0) {
                accept_one(s);
                continue;
            }
            if (((evs[i].events & EPOLLOUT) && flush(s->in, now) < 0)
                || ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && take(s, now) < 0)) {
                struct side *peer = s->peer;
                close_pair(s);
                for (int j = i + 1; j < n; j++)
                    if (evs[j].data.ptr == s || evs[j].data.ptr == peer)
                        evs[j].data.ptr = NULL;
            }
        }
        /* pass on what is due; a receiver that failed closes its pair */
        for (size_t i = 0; i < npipes;) {
            struct pipe_ *p = pipes[i];
            if (flush(p, now) < 0) {
                close_pair(p->to);
                continue;       /* pipes[i] now holds another pipe */
            }
            i++;
        }
    }
}
