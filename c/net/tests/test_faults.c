/*
 * test_faults.c: rules of docs/net.md that are easy to miss, each against
 * the C link as Go's link_faults_test.go checks them against Go's: a
 * DATA or a second CLOSE after the peer's CLOSE is a protocol violation;
 * a client refused as busy spends no admission; a record that takes
 * longer than dead_after to cross a slow network arrives, in each mode; a
 * record whose length promises more than ever comes (bytes trickling in,
 * no record ending) breaks the TCP connection within dead_after and its
 * length at min_record_rate; a
 * listener's close waits about one linger, not one per connection it
 * held; a peer that keeps the socket readable does not hold up a close; a
 * quarter of the window in bytes is acknowledged at once; a resume under
 * another server name than the opening one is refused; a binder's
 * listens at once never hold more listeners than it has room for; a
 * dialer takes a reply with header flags set for a protocol violation; a
 * close reads the TCP connection to the peer's end before it closes it,
 * within its linger; and a dialer whose CLOSE was acknowledged does not
 * take the peer's end for a break to resume.
 */
#include "check.h"
#include "raw_peer.h"

#include <chanos_net.h>

#include "../src/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    return net_now() / 1000000;
}

static bool want(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

/* ---- a raw peer speaking the records by hand ---- */

static void put_hello(uint8_t *b, uint8_t idbyte)
{
    struct hello h = {.max_frame = 65536, .win_frames = 64,
                      .win_bytes = 1 << 20};
    memset(h.id, idbyte, sizeof h.id);
    net_hello_encode(&h, b);
}

/* raw_open opens a connection (id idbyte) from a raw peer: its socket,
 * and the accepted link in *out; -1 on failure. */
static int raw_open(chanos_net_listener *L, uint8_t idbyte,
                    chanos_net_link **out)
{
    int fd = raw_dial(chanos_net_listener_port(L));
    uint8_t h[REC_HDR + HELLO_SIZE];
    put_hello(h, idbyte);
    *out = NULL;
    if (fd < 0 || !write_full(fd, h, sizeof h) || !read_full(fd, h, sizeof h) ||
        h[0] != REC_HELLO || chanos_net_accept(L, 5000, out) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* err_within waits up to ms for link c to end: its error, or 0. */
static int err_within(chanos_net_link *c, int ms)
{
    int64_t end = now_ms() + ms;
    int e;
    while ((e = chanos_net_err(c)) == 0 && now_ms() < end)
        usleep(5000);
    return e;
}

/* After the peer's CLOSE (docs/net.md, "Close"): a DATA, or a second
 * CLOSE, ends the link with a protocol violation, and no frame reaches a
 * receiver that was told "closed". */
static void test_after_close(void)
{
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", NULL, &L), 0);
    for (int second_close = 0; second_close < 2; second_close++) {
        check_context = second_close ? "a second CLOSE after the peer's CLOSE"
                                     : "a DATA after the peer's CLOSE";
        chanos_net_link *l;
        int fd = raw_open(L, (uint8_t)(1 + second_close), &l);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        uint8_t rec[REC_HDR + 16];
        put_header(rec, REC_CLOSE, 0, 1, 0);
        CHECK(write_full(fd, rec, REC_HDR));
        const void *f;
        size_t len;
        CHECK_EQ(chanos_net_recv(l, &f, &len, 5000), CHANOS_ERR_CLOSED);
        if (second_close) {
            put_header(rec, REC_CLOSE, 0, 2, 0);
            CHECK(write_full(fd, rec, REC_HDR));
        } else {
            put_header(rec, REC_DATA, 16, 2, 0);
            struct chanos_hdr h = {.size = 16, .msg = 1};
            chanos_hdr_put(rec + REC_HDR, &h);
            CHECK(write_full(fd, rec, sizeof rec));
        }
        CHECK_EQ(err_within(l, 5000), CHANOS_ERR_PROTOCOL);
        CHECK_EQ(chanos_net_recv(l, &f, &len, 0), CHANOS_ERR_PROTOCOL);
        close(fd);
        chanos_net_close(l);
    }
    chanos_net_listener_close(L);
}

/* ---- TLS ---- */

static chanos_net_identity *server_id, *client_id, *other_id;
static uint8_t server_fp[CHANOS_NET_FP_SIZE], client_fp[CHANOS_NET_FP_SIZE],
    other_fp[CHANOS_NET_FP_SIZE];

/* The server's certificate under the names "a" and "b". */
static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "a") == 0 || strcmp(name, "b") == 0 ? server_id : NULL;
}

static bool admit_all(void *arg, const char *name,
                      const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    (void)arg;
    (void)name;
    (void)fp;
    return true;
}

/* Admits each certificate once, as a grant does. */
static pthread_mutex_t admit_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t admitted[8][CHANOS_NET_FP_SIZE];
static int nadmitted;

static bool admit_once(void *arg, const char *name,
                       const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    (void)arg;
    (void)name;
    pthread_mutex_lock(&admit_mu);
    bool ok = nadmitted < 8;
    for (int i = 0; i < nadmitted && ok; i++)
        ok = memcmp(admitted[i], fp, CHANOS_NET_FP_SIZE) != 0;
    if (ok)
        memcpy(admitted[nadmitted++], fp, CHANOS_NET_FP_SIZE);
    pthread_mutex_unlock(&admit_mu);
    return ok;
}

/* A client refused as busy (REJECT 3) has spent no admission: once there
 * is room, it opens (docs/net.md, "Handshake"). */
static void test_busy_admission(void)
{
    check_context = "busy before admission";
    struct chanos_net_tls st = {.identity_for = identity_for,
                                .admit = admit_once};
    struct chanos_net_options so = {.tls = &st, .backlog = 1,
                                    .linger_ms = 500};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &so, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    struct chanos_net_tls ta = {.identity = client_id, .server_name = "a"};
    struct chanos_net_tls tb = {.identity = other_id, .server_name = "a"};
    memcpy(ta.peer, server_fp, CHANOS_NET_FP_SIZE);
    memcpy(tb.peer, server_fp, CHANOS_NET_FP_SIZE);
    struct chanos_net_options oa = {.tls = &ta, .linger_ms = 500};
    struct chanos_net_options ob = {.tls = &tb, .linger_ms = 500};
    chanos_net_link *a = NULL, *b = NULL, *acc = NULL, *acc2 = NULL;
    CHECK_EQ(chanos_net_dial(addr, &oa, &a), 0);
    /* The backlog (1) is full. */
    CHECK_EQ(chanos_net_dial(addr, &ob, &b), CHANOS_ERR_REFUSED);
    CHECK_EQ(chanos_net_accept(L, 5000, &acc), 0);
    CHECK_EQ(chanos_net_dial(addr, &ob, &b), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &acc2), 0);
    chanos_net_close(b);
    chanos_net_close(acc2);
    chanos_net_close(a);
    chanos_net_close(acc);
    chanos_net_listener_close(L);
}

/* A resume presents the server name that opened the connection, as its
 * certificate (docs/net.md, "Security"): one under another name, even
 * with the same certificate, is answered as an unknown connection. */
static void test_resume_name(void)
{
    check_context = "a resume under another server name";
    struct chanos_net_tls st = {.identity_for = identity_for,
                                .admit = admit_all};
    struct chanos_net_options so = {.tls = &st, .linger_ms = 500};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &so, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    struct chanos_net_tls ct = {.identity = client_id, .server_name = "a"};
    memcpy(ct.peer, server_fp, CHANOS_NET_FP_SIZE);
    struct chanos_net_options co = {.tls = &ct, .linger_ms = 500};
    chanos_net_link *c = NULL, *s = NULL;
    CHECK_EQ(chanos_net_dial(addr, &co, &c), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &s), 0);
    if (!s) {
        chanos_net_close(c);
        chanos_net_listener_close(L);
        return;
    }
    /* The same certificate, the connection's id, the name "b". */
    int64_t deadline = net_now() + 5000000000;
    SSL_CTX *ctx = net_tls_client_ctx(&ct);
    CHECK(ctx != NULL);
    struct tconn t = TCONN_NONE;
    t.fd = net_connect(addr, -1, deadline, NULL, NULL);
    CHECK(t.fd >= 0);
    int type = -1, code = -1;
    if (ctx && t.fd >= 0 &&
        net_tls_client(ctx, false, server_fp, "b", &t, -1, deadline, NULL,
                       NULL) == 0) {
        struct hello h = {.resume = true, .max_frame = 65536,
                          .win_frames = 64, .win_bytes = 1 << 20};
        memcpy(h.id, net_link_id(s), sizeof h.id);
        uint8_t b[REC_HDR + HELLO_SIZE];
        net_hello_encode(&h, b);
        CHECK_EQ(tconn_write_all(&t, b, sizeof b, -1, deadline, NULL, NULL),
                 0);
        if (tconn_read_all(&t, b, REC_HDR, -1, deadline, NULL, NULL) == 0) {
            type = b[0];
            if (type == REC_REJECT &&
                tconn_read_all(&t, b, 4, -1, deadline, NULL, NULL) == 0)
                code = (int)chanos_load_u32(b);
        }
    }
    CHECK_EQ(type, REC_REJECT);
    CHECK_EQ(code, REJECT_UNKNOWN);
    tconn_close(&t);
    SSL_CTX_free(ctx);
    /* The connection is not the hijacker's: it goes on. */
    uint8_t fr[CHANOS_HEADER_SIZE];
    struct chanos_hdr hd = {.size = sizeof fr, .msg = 1};
    chanos_hdr_put(fr, &hd);
    const void *f;
    size_t len;
    CHECK_EQ(chanos_net_send(c, fr, sizeof fr, 5000), 0);
    CHECK_EQ(chanos_net_recv(s, &f, &len, 5000), 0);
    chanos_net_close(c);
    chanos_net_close(s);
    chanos_net_listener_close(L);
}

/* ---- a slow network ---- */

/* A relay on loopback that carries the dialing side's bytes chunk at a
 * time, one chunk every interval_us (512 bytes every 20 ms is about
 * 25 KB/s), and the other way as they come. */
#define SLOW_CHUNK_MAX 4096
struct slow {
    int lfd, port, target;
    size_t chunk;
    int interval_us;
    pthread_t thr;
    atomic_bool stop;
};

static void *slow_pump(struct slow *r, int a, int b)
{
    uint8_t buf[SLOW_CHUNK_MAX];
    struct pollfd pf[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (!atomic_load(&r->stop)) {
        if (poll(pf, 2, 100) < 0)
            break;
        if (pf[0].revents) {
            ssize_t n = read(a, buf, r->chunk);
            if (n <= 0 || !write_full(b, buf, (size_t)n))
                break;
            usleep((useconds_t)r->interval_us);
        }
        if (pf[1].revents) {
            ssize_t n = read(b, buf, sizeof buf);
            if (n <= 0 || !write_full(a, buf, (size_t)n))
                break;
        }
    }
    return NULL;
}

/* slow_main serves one TCP connection at a time, which is all a link
 * that does not resume needs. */
static void *slow_main(void *arg)
{
    struct slow *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd p = {r->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int a = accept(r->lfd, NULL, NULL);
        if (a < 0)
            continue;
        int b = raw_dial(r->target);
        if (b >= 0) {
            slow_pump(r, a, b);
            close(b);
        }
        close(a);
    }
    return NULL;
}

static void slow_start(struct slow *r, int target, size_t chunk,
                       int interval_us)
{
    r->target = target;
    r->chunk = chunk < SLOW_CHUNK_MAX ? chunk : SLOW_CHUNK_MAX;
    r->interval_us = interval_us;
    atomic_store(&r->stop, false);
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    CHECK(bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          listen(r->lfd, 16) == 0 &&
          getsockname(r->lfd, (struct sockaddr *)&sa, &sl) == 0);
    r->port = ntohs(sa.sin_port);
    pthread_create(&r->thr, NULL, slow_main, r);
}

static void slow_stop(struct slow *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thr, NULL);
    close(r->lfd);
}

/* Any byte read is a sign of life (docs/net.md, "Sequence and
 * acknowledgement"), with TLS the bytes of a TLS record as they arrive:
 * a frame of 20 KiB that takes about 0.8 s to cross (25 KB/s), with
 * dead_after 300 ms, arrives, plain, encrypted and authenticated only,
 * under a min_record_rate below the network's (16 KiB/s: the record is
 * due 300 ms + 36 KiB / 16 KiB/s after the last). And the default
 * min_record_rate (64 KiB/s) lets a record slower than dead_after through
 * a network faster than itself: a frame of 160 KiB at 128 KiB/s (about
 * 1.25 s; due 500 ms + 176 KiB / 64 KiB/s, about 3.25 s, after the last)
 * with dead_after 500 ms. */
static void test_slow(void)
{
    static const struct {
        const char *name;
        size_t frame, chunk;
        int interval_us, dead_after_ms, min_record_rate;
    } cases[] = {
        {"20 KiB at 25 KB/s", 20 << 10, 512, 20000, 300, 16 << 10},
        {"160 KiB at 128 KiB/s", 160 << 10, 4096, 31250, 500, 0},
    };
    const char *modes[] = {"plain", "TLS", "auth only"};
    char ctx[128];
    for (int k = 0; k < 6; k++) {
        int m = k % 3;
        int cs = k / 3;
        snprintf(ctx, sizeof ctx, "slow network, %s, %s", cases[cs].name,
                 modes[m]);
        check_context = ctx;
        struct chanos_net_tls st = {.identity_for = identity_for,
                                    .admit = admit_all,
                                    .auth_only = m == 2};
        struct chanos_net_tls ct = {.identity = client_id,
                                    .server_name = "a",
                                    .auth_only = m == 2};
        memcpy(ct.peer, server_fp, CHANOS_NET_FP_SIZE);
        struct chanos_net_options o = {
            .keepalive_ms = 60,
            .dead_after_ms = cases[cs].dead_after_ms,
            .min_record_rate = cases[cs].min_record_rate,
            .grace_ms = 30000,
            .linger_ms = 500};
        struct chanos_net_options so = o, co = o;
        if (m) {
            so.tls = &st;
            co.tls = &ct;
        }
        chanos_net_listener *L;
        CHECK_EQ(chanos_net_listen("127.0.0.1:0", &so, &L), 0);
        struct slow r;
        slow_start(&r, chanos_net_listener_port(L), cases[cs].chunk,
                   cases[cs].interval_us);
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", r.port);
        chanos_net_link *c = NULL, *s = NULL;
        CHECK_EQ(chanos_net_dial(addr, &co, &c), 0);
        CHECK_EQ(chanos_net_accept(L, 5000, &s), 0);
        if (c && s) {
            size_t n = cases[cs].frame;
            uint8_t *fr = calloc(1, n);
            struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1};
            chanos_hdr_put(fr, &h);
            for (size_t i = CHANOS_HEADER_SIZE; i < n; i++)
                fr[i] = (uint8_t)i;
            CHECK_EQ(chanos_net_send(c, fr, n, 5000), 0);
            const void *f;
            size_t len = 0;
            /* Generous: the frame crosses in about a second; without
             * the rule it never does, each resume starting it over. */
            int64_t t0 = now_ms();
            int rc = chanos_net_recv(s, &f, &len, 12000);
            fprintf(stderr, "test_faults: %s: the frame crossed in %lld ms\n",
                    ctx, (long long)(now_ms() - t0));
            CHECK_EQ(rc, 0);
            CHECK(rc == 0 && len == n && memcmp(f, fr, n) == 0);
            free(fr);
        }
        chanos_net_close(c);
        chanos_net_close(s);
        slow_stop(&r);
        chanos_net_listener_close(L);
    }
}

/* ---- a record that never ends ---- */

/* trickle writes 8 bytes to fd every 50 ms for up to ms, and reads and
 * drops what the link sends: true, and the time it took in *took, once
 * the link closes the connection (its end of stream, a reset, or a write
 * that fails). */
static bool trickle(int fd, int ms, int64_t *took)
{
    int64_t t0 = now_ms(), end = t0 + ms;
    static const uint8_t junk[8] = {0};
    uint8_t buf[4096];
    while (now_ms() < end) {
        if (!write_full(fd, junk, sizeof junk))
            goto closed;
        int64_t next = now_ms() + 50, left;
        while ((left = next - now_ms()) > 0) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, (int)left) <= 0)
                continue;
            ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                           errno != EINTR))
                goto closed;
        }
    }
    return false;
closed:
    *took = now_ms() - t0;
    return true;
}

/* A record's length, changed on the path (or by a hostile peer) to
 * 512 KiB within max_frame, makes the link read that many bytes before
 * the record can end; the peer's keepalives then trickle in as its body,
 * a sign of life that keeps dead_after from ever firing. With
 * min_record_rate 1 MiB/s the record is due 300 ms + (512 KiB + 16.25 KiB)
 * / 1 MiB/s (about 0.8 s) after the last one, and the link takes the
 * connection for broken: it closes it, to wait for a resume. With
 * min_record_rate negative it waits on (the stall the rule ends). */
static void test_record_stall(void)
{
    for (int off = 0; off < 2; off++) {
        check_context = off ? "a record that never ends, min_record_rate off"
                            : "a record that never ends";
        struct chanos_net_options o = {.keepalive_ms = 100,
                                       .dead_after_ms = 300,
                                       .min_record_rate = off ? -1 : 1 << 20,
                                       .grace_ms = 30000,
                                       .linger_ms = 100};
        chanos_net_listener *L;
        CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
        chanos_net_link *l;
        int fd = raw_open(L, (uint8_t)(40 + off), &l);
        CHECK(fd >= 0);
        if (fd >= 0) {
            uint8_t h[REC_HDR];
            put_header(h, REC_DATA, 512u << 10, 1, 0);
            CHECK(write_full(fd, h, sizeof h));
            int64_t took = -1;
            bool dropped = trickle(fd, off ? 2000 : 5000, &took);
            if (off) {
                CHECK(!dropped);
            } else {
                CHECK(dropped);
                if (dropped)
                    fprintf(stderr,
                            "test_faults: a record that never ends: the "
                            "link closed its connection after %lld ms\n",
                            (long long)took);
            }
            /* Broken or not, the connection is the link's to resume: the
             * link has not ended. */
            CHECK_EQ(chanos_net_err(l), 0);
            close(fd);
            chanos_net_close(l);
        }
        chanos_net_listener_close(L);
    }
}

/* ---- closing ---- */

/* A listener's close closes the connections Accept has not returned all
 * at once: with eight peers that never acknowledge, it waits about one
 * linger (500 ms), not eight (docs/net.md, "Close"). */
static void test_listener_close(void)
{
    check_context = "a listener's close";
    struct chanos_net_options o = {.linger_ms = 500};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    int port = chanos_net_listener_port(L);
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = raw_dial(port);
        uint8_t h[REC_HDR + HELLO_SIZE];
        put_hello(h, (uint8_t)(0x40 + i));
        CHECK(fds[i] >= 0 && write_full(fds[i], h, sizeof h) &&
              read_full(fds[i], h, sizeof h) && h[0] == REC_HELLO);
    }
    int64_t t0 = now_ms();
    chanos_net_listener_close(L);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "%s: %lld ms for 8 connections\n", check_context,
            (long long)took);
    /* One linger is 500 ms, eight 4 s: generous for a loaded machine. */
    CHECK(took < 2500);
    for (int i = 0; i < 8; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

struct flood {
    int fd;
    uint64_t ack; /* what the records acknowledge */
    atomic_bool stop;
};

/* flood_main writes valid ACK records as fast as the socket takes them,
 * for at most 8 s. */
static void *flood_main(void *arg)
{
    struct flood *fl = arg;
    size_t n = (1 << 20) / REC_HDR * REC_HDR;
    uint8_t *b = malloc(n);
    for (size_t off = 0; b && off < n; off += REC_HDR)
        put_header(b + off, REC_ACK, 0, 0, fl->ack);
    int64_t end = now_ms() + 8000;
    while (b && !atomic_load(&fl->stop) && now_ms() < end)
        if (!write_full(fl->fd, b, n))
            break;
    free(b);
    return NULL;
}

/* A peer that keeps the socket readable holds up no close: the link's
 * thread reads a bounded amount per turn and sees that it stops. */
static void test_flood_close(void)
{
    check_context = "close under a flood";
    struct chanos_net_options o = {.linger_ms = 200};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    chanos_net_link *l;
    struct flood fl = {.fd = raw_open(L, 9, &l)};
    CHECK(fl.fd >= 0);
    if (fl.fd >= 0) {
        atomic_store(&fl.stop, false);
        pthread_t t;
        pthread_create(&t, NULL, flood_main, &fl);
        usleep(300000);
        int64_t t0 = now_ms();
        chanos_net_close(l);
        int64_t took = now_ms() - t0;
        atomic_store(&fl.stop, true);
        /* Two lingers are 400 ms; the flood lasts 8 s. */
        CHECK(took < 4000);
        shutdown(fl.fd, SHUT_RDWR);
        pthread_join(t, NULL);
        close(fl.fd);
    }
    chanos_net_listener_close(L);
}

/* read_record reads the next record from a raw peer's socket, past any
 * ACK records: 1 and its type and sequence number, 0 at the end of the
 * stream, -1 if the read failed (errno). */
static int read_record(int fd, uint8_t *type, uint64_t *seq)
{
    uint8_t h[REC_HDR];
    for (;;) {
        for (size_t off = 0; off < sizeof h;) {
            ssize_t r = read(fd, h + off, sizeof h - off);
            if (r <= 0)
                return r == 0 && off == 0 ? 0 : -1;
            off += (size_t)r;
        }
        uint8_t skip[256];
        for (uint32_t left = chanos_load_u32(h + 4); left > 0;) {
            ssize_t r = read(fd, skip, left < sizeof skip ? left : sizeof skip);
            if (r <= 0)
                return -1;
            left -= (uint32_t)r;
        }
        if (h[0] != REC_ACK) {
            *type = h[0];
            *seq = chanos_load_u64(h + 8);
            return 1;
        }
    }
}

struct dialing {
    const char *addr;
    const struct chanos_net_options *o;
    chanos_net_link *l;
    int rc;
};

static void *dial_thread(void *arg)
{
    struct dialing *d = arg;
    d->rc = chanos_net_dial(d->addr, d->o, &d->l);
    return NULL;
}

struct closing {
    chanos_net_link *l;
    int rc;
    int64_t took_ms;
    atomic_bool done;
};

static void *close_thread(void *arg)
{
    struct closing *cl = arg;
    int64_t t0 = now_ms();
    cl->rc = chanos_net_close(cl->l);
    cl->took_ms = now_ms() - t0;
    atomic_store(&cl->done, true);
    return NULL;
}

/* A close, its CLOSE acknowledged, shuts down the socket's writing and
 * reads until the peer closes its side too (docs/net.md, "Close"): the
 * peer reads the CLOSE and then the end of the stream, never a reset,
 * although its own records may lie unread on the link's side. A peer
 * that never closes holds the close for its linger, no longer; one that
 * floods it with records, not even that long. */
static void test_close_linger(void)
{
    const int linger = 1500;
    struct chanos_net_options o = {.linger_ms = linger};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    static const char *const peers[] = {"closes", "stays", "floods"};
    for (int k = 0; k < 3; k++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "a close lingering, the peer %s", peers[k]);
        check_context = ctx;
        struct closing cl = {0};
        int fd = raw_open(L, (uint8_t)(0x60 + k), &cl.l);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        atomic_store(&cl.done, false);
        pthread_t t;
        pthread_create(&t, NULL, close_thread, &cl);
        uint8_t type = 0;
        uint64_t seq = 0;
        CHECK_EQ(read_record(fd, &type, &seq), 1);
        CHECK_EQ(type, REC_CLOSE);
        uint8_t acks[100 * REC_HDR];
        for (int i = 0; i < 100; i++)
            put_header(acks + i * REC_HDR, REC_ACK, 0, 0, seq);
        CHECK(write_full(fd, acks, sizeof acks));
        if (k == 0) {
            /* The end of the link's stream, not a reset; the close goes
             * on reading until this side's end. */
            errno = 0;
            int r = read_record(fd, &type, &seq);
            if (r != 0)
                fprintf(stderr, "%s: after the CLOSE: %d (%s)\n", ctx, r,
                        r < 0 ? strerror(errno) : "a record");
            CHECK_EQ(r, 0);
            usleep(200000);
            CHECK(!atomic_load(&cl.done));
            write_full(fd, acks, sizeof acks); /* read and dropped */
            close(fd);
            pthread_join(t, NULL);
            CHECK(cl.took_ms < linger / 2);
        } else if (k == 1) {
            pthread_join(t, NULL);
            close(fd);
            CHECK(cl.took_ms >= linger / 2 && cl.took_ms < linger + 1000);
        } else {
            struct flood fl = {.fd = fd, .ack = seq};
            atomic_store(&fl.stop, false);
            pthread_t ft;
            pthread_create(&ft, NULL, flood_main, &fl);
            pthread_join(t, NULL);
            atomic_store(&fl.stop, true);
            shutdown(fd, SHUT_RDWR);
            pthread_join(ft, NULL);
            close(fd);
            CHECK(cl.took_ms < linger / 2);
        }
        fprintf(stderr, "%s: the close took %lld ms\n", ctx,
                (long long)cl.took_ms);
        CHECK_EQ(cl.rc, 0);
    }
    chanos_net_listener_close(L);
}

/* A peer that had read the dialer's CLOSE before it closed sends no CLOSE
 * of its own: it acknowledges the dialer's, ends the TCP connection and
 * forgets the connection. The dialer takes that end for the end of the
 * exchange, not for a break: it does not redial (the peer would refuse
 * the resume). */
static void test_close_acked(void)
{
    check_context = "a close acknowledged, then the peer's end";
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          listen(lfd, 4) == 0 &&
          getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    struct chanos_net_options o = {.linger_ms = 3000, .redial_min_ms = 1};
    for (int i = 0; i < 20; i++) {
        struct closing cl = {0};
        atomic_store(&cl.done, false);
        struct dialing d = {addr, &o, NULL, 0};
        pthread_t t;
        pthread_create(&t, NULL, dial_thread, &d);
        int fd = accept(lfd, NULL, NULL);
        uint8_t h[REC_HDR + HELLO_SIZE];
        struct hello ph;
        bool ok = fd >= 0 && read_full(fd, h, sizeof h) &&
                  net_hello_parse(h, h + REC_HDR, &ph) == 0;
        if (ok) {
            struct hello mine = {.max_frame = 65536, .win_frames = 64,
                                 .win_bytes = 1 << 20};
            memcpy(mine.id, ph.id, sizeof mine.id);
            net_hello_encode(&mine, h);
            ok = write_full(fd, h, sizeof h);
        }
        pthread_join(t, NULL);
        CHECK(ok);
        CHECK_EQ(d.rc, 0);
        if (!ok || d.rc != 0) {
            if (fd >= 0)
                close(fd);
            break;
        }
        cl.l = d.l;
        pthread_create(&t, NULL, close_thread, &cl);
        uint8_t type = 0;
        uint64_t seq = 0;
        CHECK_EQ(read_record(fd, &type, &seq), 1);
        CHECK_EQ(type, REC_CLOSE);
        uint8_t ack[REC_HDR];
        put_header(ack, REC_ACK, 0, 0, seq);
        write_full(fd, ack, sizeof ack);
        close(fd);
        pthread_join(t, NULL);
        CHECK_EQ(cl.rc, 0);
        struct pollfd pf = {lfd, POLLIN, 0};
        int redialed = poll(&pf, 1, 20);
        if (redialed > 0)
            fprintf(stderr, "%s: round %d: the link redialed\n",
                    check_context, i);
        CHECK_EQ(redialed, 0);
        if (redialed > 0)
            break;
    }
    close(lfd);
}

/* ---- acknowledgements ---- */

static chanos_net_link *ack_sender;

static void *ack_send(void *arg)
{
    (void)arg;
    size_t n = 64 << 10;
    uint8_t *fr = calloc(1, n);
    struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1};
    chanos_hdr_put(fr, &h);
    for (int i = 0; fr && i < 16; i++)
        if (chanos_net_send(ack_sender, fr, n, 30000) != 0)
            break;
    free(fr);
    return NULL;
}

/* A receiver acknowledges once it has taken a quarter of its window in
 * bytes, not only in frames (docs/net.md, "Sequence and
 * acknowledgement"): frames of 64 KiB through a window of 256 KiB (and
 * 1024 frames) flow without waiting for ack_delay or the keepalive, both
 * 10 s here. */
static void test_ack_bytes(void)
{
    check_context = "a quarter of the window in bytes";
    struct chanos_net_options o = {.max_frame = 64 << 10,
                                   .window_bytes = 256 << 10,
                                   .ack_delay_ms = 10000,
                                   .keepalive_ms = 10000,
                                   .linger_ms = 500};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    chanos_net_link *s = NULL;
    ack_sender = NULL;
    CHECK_EQ(chanos_net_dial(addr, &o, &ack_sender), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &s), 0);
    if (ack_sender && s) {
        pthread_t t;
        pthread_create(&t, NULL, ack_send, NULL);
        int got = 0;
        for (; got < 16; got++) {
            const void *f;
            size_t len;
            /* Generous, and still short of the 10 s an acknowledgement
             * waits without the rule. */
            if (chanos_net_recv(s, &f, &len, 5000) != 0)
                break;
        }
        CHECK_EQ(got, 16);
        chanos_net_close(s);
        s = NULL;
        pthread_join(t, NULL);
    }
    chanos_net_close(ack_sender);
    chanos_net_close(s);
    chanos_net_listener_close(L);
}

/* ---- the binder ---- */

#define LISTENS 32

struct listen_arg {
    void *state;
    pthread_barrier_t *go;
    int rc;
};

static void *do_listen(void *arg)
{
    struct listen_arg *a = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 4) != 0)
        a->rc = -1;
    pthread_barrier_wait(a->go);
    if (a->rc == 0)
        a->rc = chanos_net_binder()->listen(a->state, fd, 0);
    else
        close(fd);
    return NULL;
}

/* Listens at once each see room, but no more listeners are kept than the
 * binder has room for (16): the others are refused, and close frees
 * them all (the sanitizers check). */
static void test_binder_listens(void)
{
    check_context = "a binder's listens at once";
    const struct chanos_net_binder *B = chanos_net_binder();
    void *state = NULL;
    int wfd;
    CHECK_EQ(B->open(&state, &wfd), 0);
    if (!state)
        return;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, LISTENS);
    struct listen_arg a[LISTENS];
    pthread_t t[LISTENS];
    for (int i = 0; i < LISTENS; i++) {
        a[i] = (struct listen_arg){.state = state, .go = &go};
        pthread_create(&t[i], NULL, do_listen, &a[i]);
    }
    int ok = 0, limit = 0;
    for (int i = 0; i < LISTENS; i++) {
        pthread_join(t[i], NULL);
        ok += a[i].rc == 0;
        limit += a[i].rc == CHANOS_ERR_LIMIT;
    }
    pthread_barrier_destroy(&go);
    CHECK_EQ(ok, 16);
    CHECK_EQ(limit, LISTENS - 16);
    B->close(state);
}

/* ---- a refusal whose header sets a reserved byte ---- */

struct bad_acceptor {
    int lfd;
    uint8_t byte; /* which header byte to set: 1, 2 or 3 */
};

/* bad_accept answers one hello with a REJECT 1 whose header sets a byte
 * that must be 0. */
static void *bad_accept(void *arg)
{
    struct bad_acceptor *a = arg;
    int fd = accept(a->lfd, NULL, NULL);
    uint8_t h[REC_HDR + HELLO_SIZE], rej[REC_HDR + 4];

    if (fd < 0)
        return NULL;
    if (read_full(fd, h, sizeof h)) {
        put_header(rej, REC_REJECT, 4, 0, 0);
        rej[a->byte] = 0x80;
        chanos_store_u32(rej + REC_HDR, REJECT_UNKNOWN);
        write_full(fd, rej, sizeof rej);
    }
    usleep(100000);
    close(fd);
    return NULL;
}

/* A dialer takes a reply with flags or reserved bytes set for the
 * protocol violation it is, not for the refusal its type names. */
static void test_reject_flags(void)
{
    for (uint8_t byte = 1; byte <= 3; byte++) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t sl = sizeof sa;
        struct bad_acceptor a = {.byte = byte};
        chanos_net_link *l = NULL;
        pthread_t t;
        char addr[64];

        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(a.lfd >= 0 && bind(a.lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              listen(a.lfd, 1) == 0 && getsockname(a.lfd, (struct sockaddr *)&sa, &sl) == 0);
        snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
        CHECK_EQ(pthread_create(&t, NULL, bad_accept, &a), 0);
        CHECK_EQ(chanos_net_dial(addr, NULL, &l), CHANOS_ERR_PROTOCOL);
        CHECK(l == NULL);
        pthread_join(t, NULL);
        close(a.lfd);
    }
}

int main(int argc, char **argv)
{
    CHECK_EQ(chanos_net_identity_new(&server_id, server_fp), 0);
    CHECK_EQ(chanos_net_identity_new(&client_id, client_fp), 0);
    CHECK_EQ(chanos_net_identity_new(&other_id, other_fp), 0);
    if (want(argc, argv, "after-close"))
        test_after_close();
    if (want(argc, argv, "busy-admission"))
        test_busy_admission();
    if (want(argc, argv, "resume-name"))
        test_resume_name();
    if (want(argc, argv, "slow"))
        test_slow();
    if (want(argc, argv, "record-stall"))
        test_record_stall();
    if (want(argc, argv, "listener-close"))
        test_listener_close();
    if (want(argc, argv, "flood-close"))
        test_flood_close();
    if (want(argc, argv, "close-linger"))
        test_close_linger();
    if (want(argc, argv, "close-acked"))
        test_close_acked();
    if (want(argc, argv, "ack-bytes"))
        test_ack_bytes();
    if (want(argc, argv, "binder-listens"))
        test_binder_listens();
    if (want(argc, argv, "reject-flags"))
        test_reject_flags();
    chanos_net_identity_free(server_id);
    chanos_net_identity_free(client_id);
    chanos_net_identity_free(other_id);
    return check_done("test_faults");
}
