/*
 * test_resume.c: libchanos_net across broken TCP connections. A relay
 * (a real TCP proxy, in a thread) between the two links resets each TCP
 * connection (RST) after a random number of bytes; streams both ways must
 * arrive exactly once and in order, plain and with TLS. A stall is noticed
 * by the keepalives and resumed. Then a partition
 * longer than the grace period ends both sides with "network lost", and a
 * listener that no longer holds the connection ends it with "peer died".
 */
#include "check.h"

#define FRAME_FILL(i) ((size_t)(((i) * 7919) % 3000))
#define FRAME_MAX     (CHANOS_HEADER_SIZE + 8 + 3000)
#include "net_testutil.h"

#include <chanos_net.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the relay ---- */

struct relay {
    int lfd;
    int port;
    int target;
    long lo, hi; /* each connection is reset after [lo, hi) bytes; lo < 0: never */
    atomic_bool stop;
    atomic_bool parted; /* reset every connection at once */
    atomic_bool stalled; /* relay nothing, close nothing: a black hole */
    atomic_int cuts;
    atomic_bool active; /* a pair is being relayed */
    unsigned seed;
    pthread_t thr;
};

/* pump relays one pair until either side ends or the budget is spent. */
static void pump(struct relay *r, int a, int b)
{
    long budget = r->lo < 0 ? -1 : r->lo + (long)(rand_r(&r->seed) % (unsigned)(r->hi - r->lo));
    uint8_t buf[16384];
    for (;;) {
        if (atomic_load(&r->stop) || atomic_load(&r->parted))
            break;
        if (atomic_load(&r->stalled)) {
            usleep(1000);
            continue;
        }
        struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
        if (poll(p, 2, 20) <= 0 || atomic_load(&r->stalled))
            continue;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int src = i ? b : a, dst = i ? a : b;
            ssize_t n = read(src, buf, sizeof buf);
            if (n <= 0)
                goto done;
            if (budget >= 0 && n >= budget) {
                if (write(dst, buf, (size_t)budget) < 0) {
                    /* cut anyway */
                }
                atomic_fetch_add(&r->cuts, 1);
                goto done;
            }
            if (budget >= 0)
                budget -= n;
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(dst, buf + off, (size_t)(n - off));
                if (w <= 0)
                    goto done;
                off += w;
            }
        }
    }
done:
    rst(a);
    rst(b);
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd p = {r->lfd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int a = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (a < 0)
            continue;
        if (atomic_load(&r->parted)) {
            rst(a);
            continue;
        }
        int b = tcp_dial(r->target);
        if (b < 0) {
            rst(a);
            continue;
        }
        /* As Go's sockets: no Nagle delay on small records. */
        int one = 1;
        setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        atomic_store(&r->active, true);
        pump(r, a, b);
        atomic_store(&r->active, false);
    }
    return NULL;
}

static void relay_start(struct relay *r, int target, long lo, long hi)
{
    memset(r, 0, sizeof *r);
    r->target = target;
    r->lo = lo;
    r->hi = hi;
    r->seed = 12345;
    r->lfd = tcp_listen(&r->port);
    pthread_create(&r->thr, NULL, relay_main, r);
}

/* relay_part resets every connection, present and future, and returns
 * once the present one is gone. */
static void relay_part(struct relay *r)
{
    atomic_store(&r->parted, true);
    while (atomic_load(&r->active))
        usleep(1000);
}

static void relay_stop(struct relay *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thr, NULL);
    close(r->lfd);
}

/* ---- streams ---- */

/* ---- TLS ---- */

static chanos_net_identity *server_id, *client_id;
static uint8_t server_fp[32], client_fp[32];

static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "resume") == 0 ? server_id : NULL;
}

static bool admit(void *arg, const char *name, const uint8_t fp[32])
{
    (void)arg;
    return strcmp(name, "resume") == 0 && memcmp(fp, client_fp, 32) == 0;
}

static void test_cuts(bool tls)
{
    check_context = tls ? "cuts, tls" : "cuts, plain";
    struct chanos_net_tls st = {.identity_for = identity_for, .admit = admit};
    struct chanos_net_tls ct = {.identity = client_id, .server_name = "resume"};
    memcpy(ct.peer, server_fp, 32);
    struct chanos_net_options so = {.tls = tls ? &st : NULL};
    struct chanos_net_options co = {.tls = tls ? &ct : NULL};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &so, &L), 0);
    struct relay r;
    /* The TLS handshake alone is about 1.5 KB: cuts come after it. */
    relay_start(&r, chanos_net_listener_port(L), tls ? 3000 : 1, 40000);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", r.port);
    chanos_net_link *a = NULL, *b = NULL;
    int rc;
    /* The first dial may be cut too: dial until one goes through. */
    for (int i = 0; i < 50 && (rc = chanos_net_dial(addr, &co, &a)) != 0; i++)
        ;
    CHECK_EQ(rc, 0);
    CHECK_EQ(chanos_net_accept(L, 10000, &b), 0);
    if (a && b) {
        stream(a, b, (tls ? 2000 : 4000) / STREAM_DIVISOR);
        fprintf(stderr, "%s: %d cuts, %llu resumes\n", check_context,
                atomic_load(&r.cuts), (unsigned long long)chanos_net_resumes(a));
        CHECK(atomic_load(&r.cuts) >= 20);
        CHECK(chanos_net_resumes(a) >= 20);
    }
    r.lo = -1; /* no more cuts (the relay reads it at its next pair) */
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    relay_stop(&r);
    chanos_net_listener_close(L);
}

/* A partition longer than the grace period: network lost on both sides,
 * after what had arrived. */
static void test_partition(void)
{
    check_context = "partition";
    struct chanos_net_options o = {.grace_ms = 500, .keepalive_ms = 50};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    struct relay r;
    relay_start(&r, chanos_net_listener_port(L), -1, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", r.port);
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, &o, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (a && b) {
        uint8_t buf[64];
        size_t len = frame_make(buf, 0);
        CHECK_EQ(chanos_net_send(a, buf, len, 1000), 0);
        const void *f;
        size_t n;
        CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
        atomic_store(&r.parted, true);
        CHECK_EQ(chanos_net_recv(b, &f, &n, 10000), CHANOS_ERR_NETWORK_LOST);
        CHECK_EQ(chanos_net_recv(a, &f, &n, 10000), CHANOS_ERR_NETWORK_LOST);
        CHECK_EQ(chanos_net_send(a, buf, len, 1000), CHANOS_ERR_NETWORK_LOST);
    }
    CHECK_EQ(chanos_net_close(a), CHANOS_ERR_NETWORK_LOST);
    CHECK_EQ(chanos_net_close(b), CHANOS_ERR_NETWORK_LOST);
    relay_stop(&r);
    chanos_net_listener_close(L);
}

/* A stall (a black hole: nothing relayed, nothing closed) is noticed by
 * the keepalives: each side takes the connection for broken after
 * dead_after, the dialing side redials, and the stream goes on. */
static void test_stall(void)
{
    check_context = "stall";
    struct chanos_net_options o = {.keepalive_ms = 50, .dead_after_ms = 200};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    struct relay r;
    relay_start(&r, chanos_net_listener_port(L), -1, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", r.port);
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, &o, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (a && b) {
        uint8_t buf[64];
        size_t len = frame_make(buf, 0);
        const void *f;
        size_t n;
        CHECK_EQ(chanos_net_send(a, buf, len, 1000), 0);
        CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
        atomic_store(&r.stalled, true);
        CHECK_EQ(chanos_net_send(a, buf, len, 1000), 0);
        /* Nothing crosses a black hole, for longer than dead_after. */
        CHECK_EQ(chanos_net_recv(b, &f, &n, 600), CHANOS_ERR_TIMEDOUT);
        atomic_store(&r.stalled, false);
        CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
        CHECK(chanos_net_resumes(a) >= 1);
        CHECK_EQ(chanos_net_err(a), 0);
        CHECK_EQ(chanos_net_err(b), 0);
    }
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    relay_stop(&r);
    chanos_net_listener_close(L);
}

/* The peer's process restarted: a new listener on the relay's target
 * does not know the connection, and the resume ends it with peer died. */
static void test_peer_died(void)
{
    check_context = "peer died";
    chanos_net_listener *L;
    struct chanos_net_options lo = {.linger_ms = 100};
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &lo, &L), 0);
    int port = chanos_net_listener_port(L);
    struct relay r;
    relay_start(&r, port, -1, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", r.port);
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    /* b's side ends without a close reaching a: its link, then its
     * listener, go. */
    relay_part(&r);
    chanos_net_listener_close(L);
    chanos_net_close(b);
    char again[64];
    snprintf(again, sizeof again, "127.0.0.1:%d", port);
    CHECK_EQ(chanos_net_listen(again, NULL, &L), 0);
    atomic_store(&r.parted, false);
    const void *f;
    size_t n;
    CHECK_EQ(chanos_net_recv(a, &f, &n, 10000), CHANOS_ERR_PEER_DIED);
    CHECK_EQ(chanos_net_close(a), CHANOS_ERR_PEER_DIED);
    relay_stop(&r);
    chanos_net_listener_close(L);
}

int main(int argc, char **argv)
{
    CHECK_EQ(chanos_net_identity_new(&server_id, server_fp), 0);
    CHECK_EQ(chanos_net_identity_new(&client_id, client_fp), 0);
    if (want(argc, argv, "plain"))
        test_cuts(false);
    if (want(argc, argv, "tls"))
        test_cuts(true);
    if (want(argc, argv, "stall"))
        test_stall();
    if (want(argc, argv, "partition"))
        test_partition();
    if (want(argc, argv, "peer-died"))
        test_peer_died();
    chanos_net_identity_free(server_id);
    chanos_net_identity_free(client_id);
    return check_done("test_resume");
}
