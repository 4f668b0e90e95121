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
 *     nullserver PORT
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
#include <sys/epoll.h>
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
} Conn;

static int epfd;
static uint64_t next_id = 1;

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

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "use: nullserver PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
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
    }
}
