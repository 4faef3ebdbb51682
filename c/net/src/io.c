/*
 * io.c: the record format, options, and the transport: TCP sockets, plain
 * or under TLS, read and written without blocking, and the blocking helpers
 * with deadlines that the handshakes use.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>

static const uint8_t hello_magic[4] = {'c', 'h', 'n', 't'};

void net_put_header(uint8_t *b, uint8_t type, uint32_t len, uint64_t seq,
                    uint64_t ack)
{
    b[0] = type;
    b[1] = b[2] = b[3] = 0;
    chanos_store_u32(b + 4, len);
    chanos_store_u64(b + 8, seq);
    chanos_store_u64(b + 16, ack);
}

void net_hello_encode(const struct hello *h, uint8_t out[REC_HDR + HELLO_SIZE])
{
    net_put_header(out, REC_HELLO, HELLO_SIZE, 0, h->received);
    uint8_t *p = out + REC_HDR;
    memcpy(p, hello_magic, 4);
    chanos_store_u16(p + 4, PROTO_VERSION);
    chanos_store_u16(p + 6, h->resume ? HELLO_RESUME : 0);
    memcpy(p + 8, h->id, 16);
    chanos_store_u32(p + 24, h->max_frame);
    chanos_store_u32(p + 28, h->win_frames);
    chanos_store_u32(p + 32, h->win_bytes);
}

int net_hello_parse(const uint8_t hdr[REC_HDR], const uint8_t *p,
                    struct hello *h)
{
    if (hdr[0] != REC_HELLO || hdr[1] || hdr[2] || hdr[3] ||
        chanos_load_u32(hdr + 4) != HELLO_SIZE || chanos_load_u64(hdr + 8))
        return CHANOS_ERR_PROTOCOL;
    if (memcmp(p, hello_magic, 4) != 0 ||
        chanos_load_u16(p + 4) != PROTO_VERSION)
        return CHANOS_ERR_PROTOCOL;
    uint16_t fl = chanos_load_u16(p + 6);
    if (fl & ~HELLO_RESUME)
        return CHANOS_ERR_PROTOCOL;
    h->resume = fl & HELLO_RESUME;
    memcpy(h->id, p + 8, 16);
    h->max_frame = chanos_load_u32(p + 24);
    h->win_frames = chanos_load_u32(p + 28);
    h->win_bytes = chanos_load_u32(p + 32);
    h->received = chanos_load_u64(hdr + 16);
    if (h->max_frame < CHANOS_HEADER_SIZE || h->win_frames == 0 ||
        h->win_bytes < h->max_frame)
        return CHANOS_ERR_PROTOCOL;
    return 0;
}

static int64_t ms_or(int v, int64_t def)
{
    return v > 0 ? (int64_t)v * 1000000 : def;
}

/* rate_or: v bytes per second if positive, def if 0, 0 (off) if negative. */
static int64_t rate_or(int v, int64_t def)
{
    return v > 0 ? (int64_t)v : v < 0 ? 0 : def;
}

void net_opts_resolve(const struct chanos_net_options *o, struct net_opts *r)
{
    struct chanos_net_options z = {0};
    if (!o)
        o = &z;
    memset(r, 0, sizeof *r);
    r->max_frame = o->max_frame ? o->max_frame : NET_DEFAULT_MAX_FRAME;
    if (r->max_frame < CHANOS_HEADER_SIZE)
        r->max_frame = CHANOS_HEADER_SIZE;
    r->win_frames = o->window_frames ? o->window_frames : 1024;
    r->win_bytes = o->window_bytes ? o->window_bytes : 4u << 20;
    if (r->win_bytes < r->max_frame)
        r->win_bytes = r->max_frame;
    const int64_t ms = 1000000;
    r->grace = ms_or(o->grace_ms, 10000 * ms);
    r->keepalive = ms_or(o->keepalive_ms, 1000 * ms);
    r->dead_after = ms_or(o->dead_after_ms, 4 * r->keepalive);
    r->min_record_rate = rate_or(o->min_record_rate, 64 << 10);
    r->ack_delay = ms_or(o->ack_delay_ms, 1 * ms);
    r->redial_min = ms_or(o->redial_min_ms, 10 * ms);
    r->redial_max = ms_or(o->redial_max_ms, 500 * ms);
    r->handshake = ms_or(o->handshake_ms, 5000 * ms);
    r->linger = ms_or(o->linger_ms, r->grace);
    r->backlog = o->backlog > 0 ? o->backlog : 64;
    r->max_handshakes = o->max_handshakes > 0 ? o->max_handshakes : 64;
    if (o->tls) {
        r->tls = true;
        r->t = *o->tls;
        r->auth = o->tls->auth_only;
    }
}

int64_t net_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void net_block_signals(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

void net_restore_signals(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

void tconn_close(struct tconn *t)
{
    if (t->ssl) {
        /* No close_notify: a connection taken for broken is closed at
         * once, as Go's link does (its peer may no longer read). */
        SSL_free(t->ssl);
        t->ssl = NULL;
    }
    if (t->auth) {
        gmac_free(&t->auth->out);
        gmac_free(&t->auth->in);
        free(t->auth);
        t->auth = NULL;
    }
    if (t->fd >= 0) {
        close(t->fd);
        t->fd = -1;
    }
}

static ssize_t ssl_result(struct tconn *t, int r, short *want)
{
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return 0;
    default:
        ERR_clear_error();
        return -EPIPE;
    }
}

ssize_t tconn_read(struct tconn *t, void *buf, size_t n, short *want)
{
    *want = POLLIN;
    if (t->ssl) {
        /* SSL_read_ex returns nothing until a TLS record is whole; the
         * socket BIO counts the bytes of the record as they arrive. */
        BIO *rb = SSL_get_rbio(t->ssl);
        uint64_t before = rb ? BIO_number_read(rb) : 0;
        size_t got = 0;
        int r = SSL_read_ex(t->ssl, buf, n, &got);
        if (rb)
            t->raw_in += BIO_number_read(rb) - before;
        if (r == 1)
            return (ssize_t)got;
        return ssl_result(t, 0, want);
    }
    for (;;) {
        ssize_t r = recv(t->fd, buf, n, 0);
        if (r > 0) {
            t->raw_in += (uint64_t)r;
            return r;
        }
        if (r == 0)
            return -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -errno;
    }
}

ssize_t tconn_write(struct tconn *t, const void *buf, size_t n, short *want)
{
    *want = POLLOUT;
    if (t->ssl) {
        size_t put = 0;
        int r = SSL_write_ex(t->ssl, buf, n, &put);
        if (r == 1)
            return (ssize_t)put;
        return ssl_result(t, 0, want);
    }
    for (;;) {
        ssize_t r = send(t->fd, buf, n, MSG_NOSIGNAL);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -errno;
    }
}

static int stopped(const bool *stop, pthread_mutex_t *mu)
{
    if (!stop)
        return 0;
    pthread_mutex_lock(mu);
    bool s = *stop;
    pthread_mutex_unlock(mu);
    return s;
}

int net_wait(int fd, short events, int wakefd, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - net_now();
        if (left <= 0)
            return CHANOS_ERR_TIMEDOUT;
        struct pollfd p[2] = {{fd, events, 0}, {wakefd, POLLIN, 0}};
        int ms = (int)((left + 999999) / 1000000);
        int r = poll(p, wakefd >= 0 ? 2 : 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (wakefd >= 0 && (p[1].revents & POLLIN)) {
            uint64_t v;
            if (read(wakefd, &v, sizeof v) < 0) {
                /* drained by another wait meanwhile */
            }
            return 1;
        }
        if (p[0].revents)
            return 0;
    }
}

static int io_all(struct tconn *t, void *buf, size_t n, bool wr, int wakefd,
                  int64_t deadline, const bool *stop, pthread_mutex_t *mu)
{
    size_t off = 0;
    while (off < n) {
        short want;
        ssize_t r = wr ? tconn_write(t, (uint8_t *)buf + off, n - off, &want)
                       : tconn_read(t, (uint8_t *)buf + off, n - off, &want);
        if (r < 0)
            return (int)r;
        if (r > 0) {
            off += (size_t)r;
            continue;
        }
        int w = net_wait(t->fd, want, wakefd, deadline);
        if (w < 0)
            return w;
        if (w == 1 && stopped(stop, mu))
            return CHANOS_ERR_CLOSED;
    }
    return 0;
}

int tconn_write_all(struct tconn *t, const void *buf, size_t n, int wakefd,
                    int64_t deadline, const bool *stop, pthread_mutex_t *mu)
{
    return io_all(t, (void *)buf, n, true, wakefd, deadline, stop, mu);
}

int tconn_read_all(struct tconn *t, void *buf, size_t n, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu)
{
    return io_all(t, buf, n, false, wakefd, deadline, stop, mu);
}

void net_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* split_addr splits "host:port" or "[host]:port". */
static int split_addr(const char *addr, char *host, size_t hcap, char *port,
                      size_t pcap)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return -EINVAL;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (h[0] == '[') {
        if (hl < 2 || h[hl - 1] != ']')
            return -EINVAL;
        h++;
        hl -= 2;
    }
    size_t pl = strlen(colon + 1);
    if (hl >= hcap || pl == 0 || pl >= pcap)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    memcpy(port, colon + 1, pl + 1);
    return 0;
}

int net_connect(const char *addr, int wakefd, int64_t deadline,
                const bool *stop, pthread_mutex_t *mu)
{
    char host[256], port[32];
    int r = split_addr(addr, host, sizeof host, port, sizeof port);
    if (r < 0)
        return r;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host[0] ? host : NULL, port, &hints, &res) != 0 || !res)
        return -EHOSTUNREACH;
    int err = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family,
                        ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        ai->ai_protocol);
        if (fd < 0) {
            err = -errno;
            continue;
        }
        net_tune(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(res);
            return fd;
        }
        if (errno != EINPROGRESS) {
            err = -errno;
            close(fd);
            continue;
        }
        for (;;) {
            int w = net_wait(fd, POLLOUT, wakefd, deadline);
            if (w == 1) {
                if (stopped(stop, mu)) {
                    err = CHANOS_ERR_CLOSED;
                    break;
                }
                continue;
            }
            if (w < 0) {
                err = w;
                break;
            }
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr == 0) {
                freeaddrinfo(res);
                return fd;
            }
            err = -soerr;
            break;
        }
        close(fd);
        if (err == CHANOS_ERR_CLOSED || err == CHANOS_ERR_TIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    return err;
}
