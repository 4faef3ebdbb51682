/*
 * test_auth.c: the authenticated-only mode of libchanos_net (docs/net.md,
 * "Without encryption"; chanos_net_tls.auth_only). The record tags against
 * the vectors of net.md; then two links of this process over loopback,
 * through a relay (a real TCP proxy, in a thread): frames both ways,
 * small and past the read buffer, in the clear on the wire (and not with
 * encryption); exactly once and in order across hundreds of resets; a bit
 * flipped in a clear record on every TCP connection, each flip caught by
 * a tag, the TCP connection broken and resumed, nothing lost; a mode
 * mismatch each way refused with CHANOS_ERR_MODE before admission; the
 * refusals of TLS in this mode; and TLS data after a hello, a protocol
 * violation.
 */
#include "check.h"

#include <stdint.h>
#include <stddef.h>

/* The filler of frame i of a stream: a frame every 16th is past the 64
 * KiB the link reads at once. */
static size_t frame_fill(uint64_t i)
{
    return i % 16 == 5 ? 100000 + (size_t)(i % 7) * 1000
                       : (size_t)((i * 7919) % 3000);
}

#define FRAME_FILL(i) frame_fill(i)
#define FRAME_MAX     (CHANOS_HEADER_SIZE + 8 + 110000)
#include "net_testutil.h"

#include <chanos_net.h>

#include "../src/internal.h"

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
#include <unistd.h>

/* ---- the tags ---- */

static void unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

/* The example of docs/net.md: key 00 01 ... 1f, two records of one
 * direction; then every change a tag must catch. */
static void test_vectors(void)
{
    check_context = "vectors";
    uint8_t key[GMAC_KEY], other[GMAC_KEY];
    for (int i = 0; i < GMAC_KEY; i++) {
        key[i] = (uint8_t)i;
        other[i] = (uint8_t)(i + 1);
    }
    uint8_t data[40], ack[24], tag0[16], tag1[16], got[16];
    unhex("01000000100000000100000000000000000000000000000010111213141516171"
          "8191a1b1c1d1e1f",
          data, sizeof data);
    unhex("020000000000000000000000000000000700000000000000", ack, sizeof ack);
    unhex("cf66b36147ee972191a8dc3344b110b8", tag0, 16);
    unhex("d8f00a1ecde5924c86110e5ebf3f8783", tag1, 16);

    struct gmac m;
    CHECK_EQ(gmac_init(&m, key), 0);
    CHECK_EQ(gmac_tag(&m, data, sizeof data, NULL, 0, got), 0);
    CHECK(memcmp(got, tag0, 16) == 0);
    /* The header and the payload apart, as the reader passes them. */
    CHECK_EQ(gmac_tag(&m, ack, 12, ack + 12, 12, got), 0);
    CHECK(memcmp(got, tag1, 16) == 0);
    gmac_free(&m);

    /* In order, each checks. */
    CHECK_EQ(gmac_init(&m, key), 0);
    CHECK(gmac_check(&m, data, REC_HDR, data + REC_HDR, 16, tag0));
    CHECK(gmac_check(&m, ack, sizeof ack, NULL, 0, tag1));
    gmac_free(&m);

    /* A changed bit, anywhere in the header or the payload. */
    for (size_t bit = 0; bit < 8 * sizeof data; bit += 7) {
        uint8_t d[40];
        memcpy(d, data, sizeof d);
        d[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK_EQ(gmac_init(&m, key), 0);
        CHECK(!gmac_check(&m, d, sizeof d, NULL, 0, tag0));
        gmac_free(&m);
    }
    /* A dropped record (the second where the first was due), a replayed
     * one (the first again, second), the other key. */
    CHECK_EQ(gmac_init(&m, key), 0);
    CHECK(!gmac_check(&m, ack, sizeof ack, NULL, 0, tag1));
    CHECK(!gmac_check(&m, data, sizeof data, NULL, 0, tag0));
    gmac_free(&m);
    CHECK_EQ(gmac_init(&m, other), 0);
    CHECK(!gmac_check(&m, data, sizeof data, NULL, 0, tag0));
    gmac_free(&m);
    /* A changed tag. */
    CHECK_EQ(gmac_init(&m, key), 0);
    uint8_t t[16];
    memcpy(t, tag0, 16);
    t[15] ^= 0x80;
    CHECK(!gmac_check(&m, data, sizeof data, NULL, 0, t));
    gmac_free(&m);
}

/* ---- the relay ---- */

struct relay {
    int lfd;
    int port;
    int target;
    /* Each TCP connection is reset after [cut_lo, cut_hi) bytes (cut_lo
     * < 0: never), and has one bit flipped after [flip_lo, flip_hi) bytes
     * of one direction, the dialing side's on even connections, the
     * accepting side's on odd ones (flip_lo < 0: never). */
    long cut_lo, cut_hi, flip_lo, flip_hi;
    atomic_bool stop;
    atomic_int cuts, flips, pairs;
    /* Runs of bytes that each follow the one before by 1, as a frame's
     * filler does: a run of 64 is a frame in the clear. */
    atomic_bool clear;
    unsigned seed;
    pthread_t thr;
};

static long draw(struct relay *r, long lo, long hi)
{
    if (lo < 0)
        return -1;
    return lo + (long)(rand_r(&r->seed) % (unsigned)(hi - lo));
}

/* pump relays one pair until either side ends or the cut comes. */
static void pump(struct relay *r, int a, int b, int n)
{
    long budget = draw(r, r->cut_lo, r->cut_hi);
    long flip_at = draw(r, r->flip_lo, r->flip_hi);
    int flip_dir = n % 2; /* 0: a (the dialing side) to b */
    long seen[2] = {0, 0};
    int run = 0;
    uint8_t prev = 0;
    uint8_t buf[16384];
    for (;;) {
        if (atomic_load(&r->stop))
            break;
        struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
        if (poll(p, 2, 20) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int src = i ? b : a, dst = i ? a : b;
            ssize_t n = read(src, buf, sizeof buf);
            if (n <= 0)
                goto done;
            if (flip_at >= 0 && i == flip_dir && seen[i] <= flip_at &&
                flip_at < seen[i] + n) {
                buf[flip_at - seen[i]] ^= (uint8_t)(1u << (flip_at % 8));
                atomic_fetch_add(&r->flips, 1);
                flip_at = -1;
            }
            seen[i] += n;
            if (i == 0) {
                for (ssize_t k = 0; k < n; k++) {
                    run = buf[k] == (uint8_t)(prev + 1) ? run + 1 : 0;
                    prev = buf[k];
                    if (run >= 64)
                        atomic_store(&r->clear, true);
                }
            }
            if (budget >= 0 && n >= budget) {
                if (send(dst, buf, (size_t)budget, MSG_NOSIGNAL) < 0) {
                    /* cut anyway */
                }
                atomic_fetch_add(&r->cuts, 1);
                goto done;
            }
            if (budget >= 0)
                budget -= n;
            for (ssize_t off = 0; off < n;) {
                /* A side that found a bad tag closes at once: no
                 * SIGPIPE for writing to it. */
                ssize_t w = send(dst, buf + off, (size_t)(n - off),
                                 MSG_NOSIGNAL);
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
        int b = tcp_dial(r->target);
        if (b < 0) {
            rst(a);
            continue;
        }
        int one = 1;
        setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pump(r, a, b, atomic_fetch_add(&r->pairs, 1));
    }
    return NULL;
}

static void relay_start(struct relay *r, int target, long cut_lo,
                        long cut_hi, long flip_lo, long flip_hi)
{
    memset(r, 0, sizeof *r);
    r->target = target;
    r->cut_lo = cut_lo;
    r->cut_hi = cut_hi;
    r->flip_lo = flip_lo;
    r->flip_hi = flip_hi;
    r->seed = 4242;
    r->lfd = tcp_listen(&r->port);
    pthread_create(&r->thr, NULL, relay_main, r);
}

static void relay_stop(struct relay *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thr, NULL);
    close(r->lfd);
}

/* ---- identities ---- */

static chanos_net_identity *server_id, *client_id;
static uint8_t server_fp[32], client_fp[32];
static atomic_int admits; /* how many times admit was asked */

static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "auth") == 0 ? server_id : NULL;
}

static bool admit(void *arg, const char *name, const uint8_t fp[32])
{
    (void)arg;
    atomic_fetch_add(&admits, 1);
    return strcmp(name, "auth") == 0 && memcmp(fp, client_fp, 32) == 0;
}

/* A pair of links through a relay: the listener (auth_only lauth), the
 * dialing side (auth_only dauth, pinning pin). */
struct pair {
    struct chanos_net_tls st, ct;
    struct chanos_net_options so, co;
    chanos_net_listener *L;
    struct relay r;
    char addr[64];
    chanos_net_link *a, *b;
};

static void pair_listen(struct pair *p, bool lauth, bool dauth,
                        const uint8_t pin[32])
{
    memset(p, 0, sizeof *p);
    p->st = (struct chanos_net_tls){
        .identity_for = identity_for, .admit = admit, .auth_only = lauth};
    p->ct = (struct chanos_net_tls){
        .identity = client_id, .server_name = "auth", .auth_only = dauth};
    memcpy(p->ct.peer, pin, 32);
    p->so.tls = &p->st;
    p->co.tls = &p->ct;
    p->co.redial_max_ms = 50;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &p->so, &p->L), 0);
}

static void pair_relay(struct pair *p, long cut_lo, long cut_hi,
                       long flip_lo, long flip_hi)
{
    relay_start(&p->r, chanos_net_listener_port(p->L), cut_lo, cut_hi,
                flip_lo, flip_hi);
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", p->r.port);
}

/* pair_open dials through the relay (again while the relay cuts the
 * first dial) and accepts. */
static bool pair_open(struct pair *p)
{
    int rc = -1;
    for (int i = 0; i < 50; i++)
        if ((rc = chanos_net_dial(p->addr, &p->co, &p->a)) == 0)
            break;
    CHECK_EQ(rc, 0);
    CHECK_EQ(chanos_net_accept(p->L, 10000, &p->b), 0);
    return p->a && p->b;
}

static void pair_close(struct pair *p)
{
    p->r.cut_lo = p->r.flip_lo = -1; /* read at the relay's next pair */
    CHECK_EQ(chanos_net_close(p->a), 0);
    CHECK_EQ(chanos_net_close(p->b), 0);
    relay_stop(&p->r);
    chanos_net_listener_close(p->L);
}

/* Frames both ways, 100 KB ones among them; in the clear on the wire in
 * this mode and not with encryption; an orderly close. */
static void test_stream(bool auth)
{
    check_context = auth ? "stream, auth only" : "stream, encrypted";
    struct pair p;
    pair_listen(&p, auth, auth, server_fp);
    pair_relay(&p, -1, 0, -1, 0);
    if (pair_open(&p)) {
        stream(p.a, p.b, 600);
        CHECK_EQ(chanos_net_resumes(p.a), 0);
        CHECK_EQ(chanos_net_auth_failures(p.a), 0);
        CHECK_EQ(chanos_net_auth_failures(p.b), 0);
        uint8_t fp[32];
        CHECK_EQ(chanos_net_peer_fingerprint(p.b, fp), 0);
        CHECK(memcmp(fp, client_fp, 32) == 0);
        CHECK_EQ(atomic_load(&p.r.clear), auth);
    }
    pair_close(&p);
}

/* Exactly once and in order through resets at random points: in the TLS
 * handshakes, in the hellos, at the switch and among the clear records. */
static void test_cuts(void)
{
    check_context = "cuts, auth only";
    struct pair p;
    pair_listen(&p, true, true, server_fp);
    pair_relay(&p, 1, 400000, -1, 0);
    if (pair_open(&p)) {
        stream(p.a, p.b, 1500 / STREAM_DIVISOR);
        fprintf(stderr, "%s: %d cuts, %llu resumes\n", check_context,
                atomic_load(&p.r.cuts),
                (unsigned long long)chanos_net_resumes(p.a));
        CHECK(atomic_load(&p.r.cuts) >= 20);
        CHECK(chanos_net_resumes(p.a) >= 20);
        /* An honest path: no record fails. */
        CHECK_EQ(chanos_net_auth_failures(p.a), 0);
        CHECK_EQ(chanos_net_auth_failures(p.b), 0);
        CHECK_EQ(chanos_net_err(p.a), 0);
        CHECK_EQ(chanos_net_err(p.b), 0);
    }
    pair_close(&p);
}

/* A bit flipped in a clear record, on every TCP connection, each
 * direction in turn: every flip is caught by a tag, breaks that TCP
 * connection (not the link), and the link resumes with every frame once,
 * in order, intact. The flips come after the TLS handshake and the hellos
 * (under 3 KB each way). */
static void test_flips(void)
{
    check_context = "flips, auth only";
    struct pair p;
    pair_listen(&p, true, true, server_fp);
    pair_relay(&p, -1, 0, 4000, 50000);
    if (pair_open(&p)) {
        /* Streams until the relay has flipped 20 bits (how many bytes a
         * TCP connection carries before its flip is caught depends on the
         * windows in flight). */
        for (int i = 0; i < 100 && atomic_load(&p.r.flips) < 20; i++)
            stream(p.a, p.b, 300);
        uint64_t fa = chanos_net_auth_failures(p.a);
        uint64_t fb = chanos_net_auth_failures(p.b);
        int flips = atomic_load(&p.r.flips);
        fprintf(stderr,
                "%s: %d flips (%d pairs), %llu + %llu failed tags, "
                "%llu resumes\n",
                check_context, flips, atomic_load(&p.r.pairs),
                (unsigned long long)fa, (unsigned long long)fb,
                (unsigned long long)chanos_net_resumes(p.a));
        CHECK(flips >= 20);
        /* Both directions are caught; a flip counts once at most (one in
         * a record's length may leave the connection waiting for bytes
         * that never come, until the stream ends it otherwise). */
        CHECK(fa >= 5);
        CHECK(fb >= 5);
        CHECK(fa + fb <= (uint64_t)flips);
        CHECK(fa + fb + 2 >= (uint64_t)flips);
        CHECK(chanos_net_resumes(p.a) >= fa + fb);
        CHECK_EQ(chanos_net_err(p.a), 0);
        CHECK_EQ(chanos_net_err(p.b), 0);
    }
    pair_close(&p);
}

/* One side authenticated only, the other encrypting: the dial fails with
 * CHANOS_ERR_MODE, and the listener is not asked to admit. */
static void test_mismatch(void)
{
    for (int lauth = 0; lauth < 2; lauth++) {
        check_context = lauth ? "mismatch, listener auth only"
                              : "mismatch, dialer auth only";
        struct pair p;
        pair_listen(&p, lauth, !lauth, server_fp);
        snprintf(p.addr, sizeof p.addr, "127.0.0.1:%d",
                 chanos_net_listener_port(p.L));
        atomic_store(&admits, 0);
        CHECK_EQ(chanos_net_dial(p.addr, &p.co, &p.a), CHANOS_ERR_MODE);
        CHECK(p.a == NULL);
        CHECK_EQ(atomic_load(&admits), 0);
        CHECK(strstr(chanos_net_strerror(CHANOS_ERR_MODE), "encryption"));
        /* The listener goes on: a dial of its mode opens. */
        p.ct.auth_only = lauth;
        CHECK_EQ(chanos_net_dial(p.addr, &p.co, &p.a), 0);
        CHECK_EQ(chanos_net_accept(p.L, 5000, &p.b), 0);
        CHECK_EQ(chanos_net_close(p.a), 0);
        CHECK_EQ(chanos_net_close(p.b), 0);
        chanos_net_listener_close(p.L);
    }
}

/* The pins and the admission work as with encryption. */
static void test_refusals(void)
{
    check_context = "refusals, auth only";
    struct pair p;
    pair_listen(&p, true, true, client_fp); /* a wrong pin */
    snprintf(p.addr, sizeof p.addr, "127.0.0.1:%d",
             chanos_net_listener_port(p.L));
    atomic_store(&admits, 0);
    CHECK_EQ(chanos_net_dial(p.addr, &p.co, &p.a), CHANOS_ERR_AUTH);
    CHECK_EQ(atomic_load(&admits), 0);
    /* The client presents the server's certificate: not admitted. */
    memcpy(p.ct.peer, server_fp, 32);
    p.ct.identity = server_id;
    CHECK_EQ(chanos_net_dial(p.addr, &p.co, &p.a), CHANOS_ERR_AUTH);
    CHECK_EQ(atomic_load(&admits), 1);
    chanos_net_listener_close(p.L);
}

/* A client that sends TLS data after its hello (an ACK in the hello's own
 * TLS record) breaks the protocol: nothing but the hellos travels in TLS,
 * and the accepting side's clear records begin after its own. */
static void test_tls_after_hello(void)
{
    check_context = "TLS data after the hello";
    struct pair p;
    pair_listen(&p, true, true, server_fp);
    snprintf(p.addr, sizeof p.addr, "127.0.0.1:%d",
             chanos_net_listener_port(p.L));
    int64_t deadline = net_now() + 5000000000;
    SSL_CTX *ctx = net_tls_client_ctx(&p.ct);
    CHECK(ctx != NULL);
    struct tconn t = TCONN_NONE;
    t.fd = net_connect(p.addr, -1, deadline, NULL, NULL);
    CHECK(t.fd >= 0);
    if (ctx && t.fd >= 0) {
        CHECK_EQ(net_tls_client(ctx, true, server_fp, "auth", &t, -1,
                                deadline, NULL, NULL),
                 0);
        struct hello h = {.max_frame = 1 << 20, .win_frames = 64,
                          .win_bytes = 1 << 20};
        memset(h.id, 0x5a, sizeof h.id);
        uint8_t b[REC_HDR + HELLO_SIZE + REC_HDR];
        net_hello_encode(&h, b);
        net_put_header(b + REC_HDR + HELLO_SIZE, REC_ACK, 0, 0, 0);
        CHECK_EQ(tconn_write_all(&t, b, sizeof b, -1, deadline, NULL, NULL), 0);
        CHECK_EQ(chanos_net_accept(p.L, 5000, &p.b), 0);
        const void *f;
        size_t n;
        if (p.b)
            CHECK_EQ(chanos_net_recv(p.b, &f, &n, 5000), CHANOS_ERR_PROTOCOL);
    }
    tconn_close(&t);
    SSL_CTX_free(ctx);
    chanos_net_close(p.b);
    chanos_net_listener_close(p.L);
}

int main(int argc, char **argv)
{
    CHECK_EQ(chanos_net_identity_new(&server_id, server_fp), 0);
    CHECK_EQ(chanos_net_identity_new(&client_id, client_fp), 0);
    if (want(argc, argv, "vectors"))
        test_vectors();
    if (want(argc, argv, "stream")) {
        test_stream(true);
        test_stream(false);
    }
    if (want(argc, argv, "cuts"))
        test_cuts();
    if (want(argc, argv, "flips"))
        test_flips();
    if (want(argc, argv, "mismatch"))
        test_mismatch();
    if (want(argc, argv, "refusals"))
        test_refusals();
    if (want(argc, argv, "tls-after-hello"))
        test_tls_after_hello();
    chanos_net_identity_free(server_id);
    chanos_net_identity_free(client_id);
    return check_done("test_auth");
}
