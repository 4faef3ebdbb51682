/*
 * chanos-ump-bench: the C peer of `chanos bench ump` (bench/ump.go).
 *
 *   chanos-ump-bench --role client|server --case rtt|stream
 *                    --transport ump|raw-spin|raw-pair|uds|shm-memcpy --size N --iters N
 *                    --warmup N [--spin-ns N] [--max-msg N]
 *
 * The connected Unix socket is descriptor 3. The client creates the
 * connection, measures, and prints one JSON object on standard output
 * (iters, rtt_ns_p50, rtt_ns_p99, rtt_ns_mean and rtt_ns_window_p50 for
 * rtt; msgs_per_s and bytes_per_s for stream); the server attaches and
 * answers. Both sides must be given the same arguments but --role. An rtt
 * client times iters round trips one by one, then iters more in windows
 * of RTT_WINDOW timed whole (see rtt_client).
 *
 *   rtt/ump       ping-pong of size-byte messages over a ump connection
 *   rtt/raw-spin  ping-pong of a counter on one shared cache line (the floor)
 *   rtt/raw-pair  the same on two lines, one per direction (a ring pair's floor)
 *   rtt/uds       ping-pong of size bytes over the Unix socket itself
 *   stream/ump    the client sends iters messages, the server acknowledges
 *   stream/shm-memcpy  the client copies into shared buffers, the server
 *                 out of them: the bandwidth ceiling of any copying transport
 *   path/ump      the client alone, no socket: one thread holds both ends
 *                 of a ring pair and bounces a message (send, receive, send
 *                 back, receive), so what is timed is the code of a round
 *                 trip with no waiting and no cache line leaving the core
 *                 (rtt_ns_mean and rtt_ns_window_p50, per round trip)
 */
#include "chanos.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SOCK_FD 3

struct args {
    const char *role, *kase, *transport;
    size_t size;
    long iters, warmup;
    int64_t spin_ns;
    uint32_t max_msg;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static void fatal(const char *what, int err)
{
    fprintf(stderr, "chanos-ump-bench: %s: %s\n", what, chanos_ump_strerror(err));
    exit(1);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* RTT_WINDOW is bench/peer.go's RTTWindow: the window figure is the
 * median, over windows of RTT_WINDOW consecutive round trips timed whole
 * (one clock read per window), of each window's time per round trip. */
#define RTT_WINDOW 100

/* window_median returns the median of n window times, each of RTT_WINDOW
 * round trips, per round trip; it sorts win. */
static double window_median(int64_t *win, long n)
{
    qsort(win, (size_t)n, sizeof *win, cmp_i64);
    return (double)win[n / 2] / RTT_WINDOW;
}

/* rtt_timing holds what an rtt client measures: iters round trips timed
 * one by one (s, total ns in all), then nwin windows of RTT_WINDOW round
 * trips timed whole (win): bench/peer.go's rttClient, whose comment says
 * why. */
struct rtt_timing {
    long iters, nwin;
    int64_t *s, *win, total;
};

/* rtt_windows returns the number of windows rtt_client times after iters
 * round trips one by one. */
static long rtt_windows(long iters)
{
    return iters / RTT_WINDOW > 0 ? iters / RTT_WINDOW : 1;
}

/* rtt_client_trips returns the number of round trips rtt_client makes:
 * what a server must answer. */
static long rtt_client_trips(const struct args *a)
{
    return a->warmup + a->iters + rtt_windows(a->iters) * RTT_WINDOW;
}

/* time_windows runs trip(arg, i) nwin times RTT_WINDOW times, i counting
 * from 0, and stores the time each window of RTT_WINDOW took in win: one
 * clock read per window. It returns the time of all of them. Always
 * inlined, so that trip is a direct call. */
static inline __attribute__((always_inline)) int64_t time_windows(int64_t *win, long nwin,
                                                                  void (*trip)(void *arg, long i), void *arg)
{
    int64_t t0 = now_ns(), prev = t0;
    for (long w = 0; w < nwin; w++) {
        for (long i = w * RTT_WINDOW; i < (w + 1) * RTT_WINDOW; i++)
            trip(arg, i);
        int64_t now = now_ns();
        win[w] = now - prev;
        prev = now;
    }
    return prev - t0;
}

/* report_rtt prints the round-trip statistics of t and frees it. */
static void report_rtt(struct rtt_timing *t)
{
    double w = window_median(t->win, t->nwin);
    long n = t->iters;
    qsort(t->s, (size_t)n, sizeof *t->s, cmp_i64);
    printf("{\"iters\":%ld,\"rtt_ns_p50\":%lld,\"rtt_ns_p99\":%lld,\"rtt_ns_mean\":%.1f,"
           "\"rtt_ns_window_p50\":%.2f}\n",
           n, (long long)t->s[n / 2], (long long)t->s[(n * 99) / 100], (double)t->total / (double)n, w);
    free(t->s);
    free(t->win);
}

/* rtt_client runs trip(arg, i), one round trip, as bench/peer.go's
 * rttClient does: a->warmup times, then a->iters times timed one by one,
 * then in windows timed whole; and prints the figures. Always inlined, so
 * that the round trip is a direct call, as in Go. */
static inline __attribute__((always_inline)) void rtt_client(const struct args *a,
                                                             void (*trip)(void *arg, long i), void *arg)
{
    for (long i = 0; i < a->warmup; i++)
        trip(arg, i);
    struct rtt_timing t = {.iters = a->iters, .nwin = rtt_windows(a->iters)};
    t.s = malloc((size_t)t.iters * sizeof *t.s);
    t.win = malloc((size_t)t.nwin * sizeof *t.win);
    if (!t.s || !t.win)
        fatal("malloc", -ENOMEM);
    int64_t t0 = now_ns(), prev = t0;
    for (long i = 0; i < t.iters; i++) {
        trip(arg, i);
        int64_t now = now_ns();
        t.s[i] = now - prev;
        prev = now;
    }
    t.total = prev - t0;
    time_windows(t.win, t.nwin, trip, arg);
    report_rtt(&t);
}

/* ---- ump ---- */

/* ump_trip is one round trip of an rtt client over ump: the message
 * carries i, and the echo must match. Inlined, as bench/peer.go's trip
 * is. */
struct ump_trip {
    const struct args *a;
    chanos_ump *c;
    uint8_t *msg;
};

static inline __attribute__((always_inline)) void ump_trip(void *arg, long i)
{
    struct ump_trip *u = arg;
    size_t size = u->a->size, n;
    const void *m;
    memcpy(u->msg, &i, size < sizeof i ? size : sizeof i);
    int err = chanos_ump_send(u->c, u->msg, size, -1);
    if (err == 0)
        err = chanos_ump_recv(u->c, &m, &n, -1);
    if (err < 0)
        fatal("round trip", err);
    if (n != size || memcmp(m, u->msg, n) != 0)
        fatal("round trip: the echo differs", -EPROTO);
}

static void ump_rtt_client(const struct args *a, chanos_ump *c)
{
    struct ump_trip u = {.a = a, .c = c, .msg = calloc(1, a->size ? a->size : 1)};
    if (!u.msg)
        fatal("calloc", -ENOMEM);
    rtt_client(a, ump_trip, &u);
    free(u.msg);
}

static void ump_stream_client(const struct args *a, chanos_ump *c)
{
    uint8_t *msg = calloc(1, a->size ? a->size : 1);
    if (!msg)
        fatal("calloc", -ENOMEM);
    const void *m;
    size_t n;
    int64_t t0 = 0;
    for (int round = 0; round < 2; round++) {
        long count = round ? a->iters : a->warmup;
        t0 = now_ns();
        for (long i = 0; i < count; i++) {
            int err = chanos_ump_send(c, msg, a->size, -1);
            if (err < 0)
                fatal("send", err);
        }
        int err = chanos_ump_recv(c, &m, &n, -1);
        if (err < 0)
            fatal("acknowledgement", err);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    printf("{\"iters\":%ld,\"msgs_per_s\":%.0f,\"bytes_per_s\":%.0f}\n", a->iters,
           (double)a->iters / secs, (double)a->iters * (double)a->size / secs);
    free(msg);
}

static void ump_server(const struct args *a, chanos_ump *c)
{
    int stream = strcmp(a->kase, "stream") == 0;
    for (int round = 0; stream && round < 2; round++) {
        long count = round ? a->iters : a->warmup;
        for (long i = 0; i < count; i++) {
            const void *m;
            size_t n;
            int err = chanos_ump_recv(c, &m, &n, -1);
            if (err < 0)
                fatal("receive", err);
        }
        int err = chanos_ump_send(c, "ack", 3, -1);
        if (err < 0)
            fatal("send", err);
    }
    for (;;) {
        const void *m;
        size_t n;
        int err = chanos_ump_recv(c, &m, &n, -1);
        if (err == CHANOS_ERR_CLOSED)
            return;
        if (err < 0)
            fatal("receive", err);
        if ((err = chanos_ump_send(c, m, n, -1)) < 0)
            fatal("send", err);
    }
}

static void run_ump(const struct args *a, int client)
{
    struct chanos_ump_options o = {.max_msg = a->max_msg, .spin_ns = a->spin_ns};
    chanos_ump *c;
    int err = client ? chanos_ump_create(SOCK_FD, &o, 10000, &c)
                     : chanos_ump_attach(SOCK_FD, &o, 10000, &c);
    if (err < 0)
        fatal("connect", err);
    if (!client)
        ump_server(a, c);
    else if (strcmp(a->kase, "stream") == 0)
        ump_stream_client(a, c);
    else
        ump_rtt_client(a, c);
    chanos_ump_close(c);
}

/* ---- the code path of a round trip, in one thread ---- */

/* open_pair opens both ends of a new ring pair in this process. */
static void open_pair(const struct chanos_ump_options *o, chanos_ump **x, chanos_ump **y)
{
    struct chanos_ump_files f, g;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        fatal("socketpair", -errno);
    int err = chanos_ump_files_create(o, &f);
    if (err < 0)
        fatal("create ring pair", err);
    /* The attacher gets a duplicate of the memfd and its own ends of the
     * wake-up and caps sockets, which the creator's open would otherwise
     * close. */
    g.mem = fcntl(f.mem, F_DUPFD_CLOEXEC, 0);
    if (g.mem < 0)
        fatal("dup", -errno);
    for (int k = 0; k < 2; k++) {
        g.wake[CHANOS_UMP_CREATOR][k] = -1;
        g.wake[CHANOS_UMP_ATTACHER][k] = f.wake[CHANOS_UMP_ATTACHER][k];
        f.wake[CHANOS_UMP_ATTACHER][k] = -1;
    }
    g.caps[CHANOS_UMP_CREATOR] = -1;
    g.caps[CHANOS_UMP_ATTACHER] = f.caps[CHANOS_UMP_ATTACHER];
    f.caps[CHANOS_UMP_ATTACHER] = -1;
    if ((err = chanos_ump_open(CHANOS_UMP_CREATOR, &f, sv[0], o, x)) < 0)
        fatal("open", err);
    if ((err = chanos_ump_open(CHANOS_UMP_ATTACHER, &g, sv[1], o, y)) < 0)
        fatal("open", err);
}

/* path_bounce is one bounce of the path case: msg from x to y and back. */
struct path_bounce {
    chanos_ump *x, *y;
    const uint8_t *msg;
    size_t size;
};

static inline __attribute__((always_inline)) void bounce(void *arg, long i)
{
    (void)i;
    struct path_bounce *b = arg;
    const void *m;
    size_t n;
    int err;
    if ((err = chanos_ump_send(b->x, b->msg, b->size, -1)) < 0 ||
        (err = chanos_ump_recv(b->y, &m, &n, -1)) < 0 || (err = chanos_ump_send(b->y, m, n, -1)) < 0 ||
        (err = chanos_ump_recv(b->x, &m, &n, -1)) < 0)
        fatal("bounce", err);
    if (n != b->size)
        fatal("bounce", CHANOS_ERR_PROTOCOL);
}

/* run_path times windows of RTT_WINDOW bounces, as bench/peer.go's
 * pathClient does: a clock read per bounce would cost about as much as
 * the bounce. */
static void run_path(const struct args *a)
{
    struct chanos_ump_options o = {.max_msg = a->max_msg, .spin_ns = a->spin_ns};
    struct path_bounce b = {.size = a->size};
    open_pair(&o, &b.x, &b.y);
    uint8_t *msg = calloc(1, a->size ? a->size : 1);
    long windows = rtt_windows(a->iters);
    int64_t *win = malloc((size_t)windows * sizeof *win);
    if (!msg || !win)
        fatal("malloc", -ENOMEM);
    b.msg = msg;
    for (long i = 0; i < a->warmup; i++)
        bounce(&b, i);
    int64_t total = time_windows(win, windows, bounce, &b);
    printf("{\"iters\":%ld,\"rtt_ns_mean\":%.2f,\"rtt_ns_window_p50\":%.2f}\n", windows * RTT_WINDOW,
           (double)total / (double)(windows * RTT_WINDOW), window_median(win, windows));
    free(win);
    free(msg);
    chanos_ump_close(b.x);
    chanos_ump_close(b.y);
}

/* ---- raw spin on one cache line ---- */

/* share_memfd gives the server a memfd of size bytes made by the client
 * and returns the mapping. */
static void *share_memfd(int client, size_t size)
{
    int fd = -1;
    if (client) {
        fd = memfd_create("chanos-bench-shm", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
            fatal("memfd", -errno);
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof u);
        char b = 'x';
        struct iovec iov = {.iov_base = &b, .iov_len = 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        if (sendmsg(SOCK_FD, &m, 0) != 1)
            fatal("sendmsg", -errno);
    } else {
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        char b;
        struct iovec iov = {.iov_base = &b, .iov_len = 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        if (recvmsg(SOCK_FD, &m, MSG_CMSG_CLOEXEC) != 1)
            fatal("recvmsg", -errno);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        if (!cm || cm->cmsg_type != SCM_RIGHTS)
            fatal("recvmsg", -EPROTO);
        memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        fatal("mmap", -errno);
    close(fd);
    return p;
}

/* raw_trip is one round trip on raw cache lines: the client writes an odd
 * number into ping, the server answers with the next even one in pong.
 * raw-spin: ping and pong are one word, one cache line bounced both ways
 * (the floor of any shared-memory round trip); raw-pair: two lines, one
 * per direction, as a ring pair has (the floor of any channel made of two
 * one-way rings, ump's among them). */
struct raw_trip {
    _Atomic uint64_t *ping, *pong;
    uint64_t k; /* round trips so far */
};

static inline __attribute__((always_inline)) void raw_trip(void *arg, long i)
{
    (void)i;
    struct raw_trip *r = arg;
    uint64_t k = r->k++;
    atomic_store_explicit(r->ping, 2 * k + 1, memory_order_release);
    while (atomic_load_explicit(r->pong, memory_order_acquire) != 2 * k + 2)
        cpu_relax();
}

static void run_raw(const struct args *a, int client, int pair)
{
    uint8_t *mem = share_memfd(client, 4096);
    /* 2 KiB apart: lines the hardware prefetchers do not fetch together. */
    struct raw_trip r = {.ping = (_Atomic uint64_t *)(void *)mem,
                         .pong = (_Atomic uint64_t *)(void *)(mem + (pair ? 2048 : 0))};
    if (client) {
        rtt_client(a, raw_trip, &r);
    } else {
        long total = rtt_client_trips(a);
        for (uint64_t k = 0; k < (uint64_t)total; k++) {
            while (atomic_load_explicit(r.ping, memory_order_acquire) != 2 * k + 1)
                cpu_relax();
            atomic_store_explicit(r.pong, 2 * k + 2, memory_order_release);
        }
    }
    munmap(mem, 4096);
}

/* ---- the bandwidth ceiling: two memcpys through shared memory ---- */

/*
 * The client copies each message into one of a few shared buffers and
 * raises the buffer's flag; the server copies it out and lowers the flag.
 * No framing, no validation: what any shared-memory transport that copies
 * in and out could at best achieve between these two processes.
 */
static void run_shm_memcpy(const struct args *a, int client)
{
    size_t n = a->size ? a->size : 1, nb = n <= (256u << 10) ? 4 : 2;
    uint8_t *shm = share_memfd(client, 4096 + nb * n);
    uint8_t *local = calloc(1, n);
    if (!local)
        fatal("calloc", -ENOMEM);
    long total = a->warmup + a->iters;
    int64_t t0 = 0;
    for (long i = 0; i < total; i++) {
        size_t k = (size_t)i % nb;
        _Atomic uint64_t *flag = (_Atomic uint64_t *)(void *)(shm + k * 128);
        uint8_t *buf = shm + 4096 + k * n;
        if (client) {
            if (i == a->warmup)
                t0 = now_ns();
            while (atomic_load_explicit(flag, memory_order_acquire) != 0)
                cpu_relax();
            memcpy(buf, local, n);
            atomic_store_explicit(flag, (uint64_t)i + 1, memory_order_release);
        } else {
            while (atomic_load_explicit(flag, memory_order_acquire) != (uint64_t)i + 1)
                cpu_relax();
            memcpy(local, buf, n);
            atomic_store_explicit(flag, 0, memory_order_release);
        }
    }
    if (client) {
        for (size_t k = 0; k < nb; k++)
            while (atomic_load_explicit((_Atomic uint64_t *)(void *)(shm + k * 128), memory_order_acquire))
                cpu_relax();
        double secs = (double)(now_ns() - t0) / 1e9;
        printf("{\"iters\":%ld,\"msgs_per_s\":%.0f,\"bytes_per_s\":%.0f}\n", a->iters,
               (double)a->iters / secs, (double)a->iters * (double)n / secs);
    }
    munmap(shm, 4096 + nb * n);
    free(local);
}

/* ---- Unix socket ping-pong ---- */

static void xfer(int write_side, uint8_t *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write_side ? write(SOCK_FD, buf + done, n - done)
                               : read(SOCK_FD, buf + done, n - done);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            if (r == 0 && !write_side)
                exit(0); /* the client finished */
            fatal(write_side ? "write" : "read", r < 0 ? -errno : -EPIPE);
        }
        done += (size_t)r;
    }
}

/* uds_trip is one round trip over the socket. */
struct uds_trip {
    uint8_t *buf;
    size_t n;
};

static void uds_trip(void *arg, long i)
{
    (void)i;
    struct uds_trip *u = arg;
    xfer(1, u->buf, u->n);
    xfer(0, u->buf, u->n);
}

static void run_uds(const struct args *a, int client)
{
    struct uds_trip u = {.n = a->size ? a->size : 1};
    u.buf = calloc(1, u.n);
    if (!u.buf)
        fatal("calloc", -ENOMEM);
    if (!client) {
        for (;;) {
            xfer(0, u.buf, u.n);
            xfer(1, u.buf, u.n);
        }
    }
    rtt_client(a, uds_trip, &u);
    free(u.buf);
}

int main(int argc, char **argv)
{
    struct args a = {.role = "", .kase = "rtt", .transport = "ump", .size = 8,
                     .iters = 100000, .warmup = 1000};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--role"))
            a.role = v;
        else if (!strcmp(k, "--case"))
            a.kase = v;
        else if (!strcmp(k, "--transport"))
            a.transport = v;
        else if (!strcmp(k, "--size"))
            a.size = strtoull(v, NULL, 0);
        else if (!strcmp(k, "--iters"))
            a.iters = strtol(v, NULL, 0);
        else if (!strcmp(k, "--warmup"))
            a.warmup = strtol(v, NULL, 0);
        else if (!strcmp(k, "--spin-ns"))
            a.spin_ns = strtoll(v, NULL, 0);
        else if (!strcmp(k, "--max-msg"))
            a.max_msg = (uint32_t)strtoul(v, NULL, 0);
        else {
            fprintf(stderr, "chanos-ump-bench: unknown flag %s\n", k);
            return 2;
        }
    }
    int client = !strcmp(a.role, "client");
    if ((!client && strcmp(a.role, "server")) || a.iters <= 0 || a.warmup < 0) {
        fprintf(stderr, "usage: chanos-ump-bench --role client|server [--case rtt|stream|path] "
                        "[--transport ump|raw-spin|raw-pair|uds] [--size N] [--iters N] [--warmup N] "
                        "[--spin-ns N] [--max-msg N]\n");
        return 2;
    }
    if (!strcmp(a.kase, "path") && !strcmp(a.transport, "ump") && client)
        run_path(&a);
    else if (!strcmp(a.transport, "ump"))
        run_ump(&a, client);
    else if (!strcmp(a.transport, "raw-spin") || !strcmp(a.transport, "raw-pair"))
        run_raw(&a, client, !strcmp(a.transport, "raw-pair"));
    else if (!strcmp(a.transport, "uds"))
        run_uds(&a, client);
    else if (!strcmp(a.transport, "shm-memcpy"))
        run_shm_memcpy(&a, client);
    else {
        fprintf(stderr, "chanos-ump-bench: unknown transport %s\n", a.transport);
        return 2;
    }
    return 0;
}
