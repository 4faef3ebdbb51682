/*
 * test_link.c: libchanos_net between two links of this process over
 * loopback TCP: frames both ways, plain and with TLS (server names,
 * pinned fingerprints, admission), orderly close, the window (a full one
 * blocks, try_send reports no room), frames refused at send, and the
 * authentication failures.
 */
#include "check.h"

#include <chanos_net.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* frame_make writes frame i of a stream: a message whose payload is i,
 * then (i * 7919) % 3000 bytes of filler that depend on i. */
static size_t frame_make(uint8_t *buf, uint64_t i)
{
    size_t fill = (size_t)((i * 7919) % 3000);
    size_t n = CHANOS_HEADER_SIZE + 8 + fill;
    struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1};
    chanos_hdr_put(buf, &h);
    chanos_store_u64(buf + CHANOS_HEADER_SIZE, i);
    for (size_t k = 0; k < fill; k++)
        buf[CHANOS_HEADER_SIZE + 8 + k] = (uint8_t)(i + k);
    return n;
}

/* frame_check says whether f[0..n) is frame i of a stream. */
static bool frame_check(const uint8_t *f, size_t n, uint64_t i)
{
    uint8_t want[CHANOS_HEADER_SIZE + 8 + 3000];
    size_t wn = frame_make(want, i);
    return n == wn && memcmp(f, want, n) == 0;
}

struct sender {
    chanos_net_link *c;
    uint64_t n;
    int rc;
};

static void *send_all(void *arg)
{
    struct sender *s = arg;
    uint8_t buf[CHANOS_HEADER_SIZE + 8 + 3000];
    for (uint64_t i = 0; i < s->n; i++) {
        size_t len = frame_make(buf, i);
        s->rc = chanos_net_send(s->c, buf, len, 30000);
        if (s->rc != 0)
            break;
    }
    return NULL;
}

/* recv_all receives n frames of a stream in order: how many arrived
 * right. */
static uint64_t recv_all(chanos_net_link *c, uint64_t n)
{
    uint64_t i = 0;
    for (; i < n; i++) {
        const void *f;
        size_t len;
        int r = chanos_net_recv(c, &f, &len, 30000);
        if (r != 0) {
            fprintf(stderr, "recv %llu: %s\n", (unsigned long long)i,
                    chanos_net_strerror(r));
            break;
        }
        if (!frame_check(f, len, i)) {
            fprintf(stderr, "frame %llu is wrong\n", (unsigned long long)i);
            break;
        }
    }
    return i;
}

/* exchange streams n frames each way between a and b at once, then
 * closes both: b sees a's close after everything. */
static void exchange(chanos_net_link *a, chanos_net_link *b, uint64_t n)
{
    struct sender sa = {a, n, 0}, sb = {b, n, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, send_all, &sa);
    pthread_create(&tb, NULL, send_all, &sb);
    CHECK_EQ(recv_all(b, n), n);
    CHECK_EQ(recv_all(a, n), n);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_EQ(sa.rc, 0);
    CHECK_EQ(sb.rc, 0);
}

static void test_plain(void)
{
    check_context = "plain";
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", NULL, &L), 0);
    struct {
        char addr[64];
        chanos_net_link *c;
    } d = {0};
    snprintf(d.addr, sizeof d.addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    CHECK_EQ(chanos_net_dial(d.addr, NULL, &d.c), 0);
    chanos_net_link *b = NULL;
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (!d.c || !b)
        return;
    uint8_t fp[CHANOS_NET_FP_SIZE];
    CHECK_EQ(chanos_net_peer_fingerprint(b, fp), -EINVAL);
    exchange(d.c, b, 3000);
    CHECK_EQ(chanos_net_resumes(d.c), 0);
    /* Close: the peer takes what was sent, then CLOSED. */
    uint8_t buf[64];
    size_t len = frame_make(buf, 0);
    CHECK_EQ(chanos_net_send(d.c, buf, len, 1000), 0);
    CHECK_EQ(chanos_net_close(d.c), 0);
    const void *f;
    size_t n;
    CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
    CHECK(frame_check(f, n, 0));
    CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_net_send(b, buf, len, 1000), CHANOS_ERR_CLOSED);
    CHECK(chanos_net_peer_closed(b));
    CHECK_EQ(chanos_net_close(b), 0);
    CHECK_EQ(chanos_net_accept(L, 0, &b), CHANOS_ERR_TIMEDOUT);
    chanos_net_listener_close(L);
}

/* The window: a receiver that takes nothing stops its sender after its
 * window; frames refused at send leave the link open. */
static void test_window(void)
{
    check_context = "window";
    struct chanos_net_options lo = {.window_frames = 8, .max_frame = 4096,
                                    .window_bytes = 4096 * 4};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &lo, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (!a || !b)
        return;
    CHECK_EQ(chanos_net_max_frame(a), 4096);
    uint8_t buf[8192];
    size_t len = frame_make(buf, 1);
    int sent = 0;
    while (sent < 100 && chanos_net_try_send(a, buf, len) == 0)
        sent++;
    CHECK_EQ(sent, 8);
    CHECK_EQ(chanos_net_try_send(a, buf, len), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_net_send(a, buf, len, 50), CHANOS_ERR_TIMEDOUT);
    /* Refused at send, the link going on. */
    struct chanos_hdr h = {.size = 5000};
    memset(buf, 0, sizeof buf);
    chanos_hdr_put(buf, &h);
    CHECK_EQ(chanos_net_try_send(a, buf, 5000), CHANOS_ERR_TOO_LARGE);
    h = (struct chanos_hdr){.size = 16, .ncaps = 1};
    chanos_hdr_put(buf, &h);
    CHECK_EQ(chanos_net_try_send(a, buf, 16), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_net_try_send(a, buf, 17), CHANOS_ERR_SIZE);
    /* Taking frames frees room. */
    const void *f;
    size_t n;
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
        CHECK(frame_check(f, n, 1));
    }
    len = frame_make(buf, 2);
    CHECK_EQ(chanos_net_send(a, buf, len, 5000), 0);
    CHECK_EQ(chanos_net_recv(b, &f, &n, 5000), 0);
    CHECK(frame_check(f, n, 2));
    CHECK_EQ(chanos_net_recv(b, &f, &n, 0), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_net_err(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    CHECK_EQ(chanos_net_recv(a, &f, &n, 5000), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_net_close(a), 0);
    chanos_net_listener_close(L);
}

/* The accepting side of the TLS tests: one certificate per server name,
 * and one client fingerprint admitted once per name. */
struct server {
    const char *names[2];
    chanos_net_identity *ids[2];
    uint8_t fps[2][CHANOS_NET_FP_SIZE];
    uint8_t admit[2][CHANOS_NET_FP_SIZE];
    bool used[2];
    int asked;
};

static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    struct server *s = arg;
    for (int i = 0; i < 2; i++)
        if (strcmp(name, s->names[i]) == 0)
            return s->ids[i];
    return NULL;
}

static bool admit(void *arg, const char *name,
                  const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    struct server *s = arg;
    s->asked++;
    for (int i = 0; i < 2; i++) {
        if (strcmp(name, s->names[i]) == 0 && !s->used[i] &&
            memcmp(fp, s->admit[i], CHANOS_NET_FP_SIZE) == 0) {
            s->used[i] = true;
            return true;
        }
    }
    return false;
}

static void test_tls(void)
{
    check_context = "tls";
    struct server s = {.names = {"bind-1", "bind-2"}};
    for (int i = 0; i < 2; i++)
        CHECK_EQ(chanos_net_identity_new(&s.ids[i], s.fps[i]), 0);
    chanos_net_identity *c1, *c2, *other;
    uint8_t fp1[32], fp2[32], fpo[32];
    CHECK_EQ(chanos_net_identity_new(&c1, fp1), 0);
    CHECK_EQ(chanos_net_identity_new(&c2, fp2), 0);
    CHECK_EQ(chanos_net_identity_new(&other, fpo), 0);
    CHECK(memcmp(fp1, fp2, 32) != 0);
    memcpy(s.admit[0], fp1, 32);
    memcpy(s.admit[1], fp2, 32);
    struct chanos_net_tls st = {.identity_for = identity_for, .admit = admit,
                                .arg = &s};
    struct chanos_net_options so = {.tls = &st};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &so, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));

    /* A wrong pin: the server's certificate for bind-1 is not bind-2's. */
    struct chanos_net_tls ct = {.identity = c1, .server_name = "bind-1"};
    memcpy(ct.peer, s.fps[1], 32);
    struct chanos_net_options co = {.tls = &ct};
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, &co, &a), CHANOS_ERR_AUTH);
    /* A name the server has no certificate for. */
    ct.server_name = "bind-9";
    CHECK_EQ(chanos_net_dial(addr, &co, &a), CHANOS_ERR_TLS);
    /* A client certificate not admitted. */
    ct.identity = other;
    ct.server_name = "bind-1";
    memcpy(ct.peer, s.fps[0], 32);
    CHECK_EQ(chanos_net_dial(addr, &co, &a), CHANOS_ERR_AUTH);
    /* The right ones. */
    ct.identity = c1;
    CHECK_EQ(chanos_net_dial(addr, &co, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    /* Admission is once. */
    chanos_net_link *again = NULL;
    CHECK_EQ(chanos_net_dial(addr, &co, &again), CHANOS_ERR_AUTH);
    /* The second name, its own certificate. */
    struct chanos_net_tls ct2 = {.identity = c2, .server_name = "bind-2"};
    memcpy(ct2.peer, s.fps[1], 32);
    struct chanos_net_options co2 = {.tls = &ct2};
    chanos_net_link *a2 = NULL, *b2 = NULL;
    CHECK_EQ(chanos_net_dial(addr, &co2, &a2), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b2), 0);
    if (a && b && a2 && b2) {
        uint8_t fp[32];
        CHECK_EQ(chanos_net_peer_fingerprint(b, fp), 0);
        CHECK(memcmp(fp, fp1, 32) == 0);
        CHECK_EQ(chanos_net_peer_fingerprint(b2, fp), 0);
        CHECK(memcmp(fp, fp2, 32) == 0);
        exchange(a, b, 1000);
        exchange(b2, a2, 500);
    }
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    CHECK_EQ(chanos_net_close(a2), 0);
    CHECK_EQ(chanos_net_close(b2), 0);
    chanos_net_listener_close(L);
    for (int i = 0; i < 2; i++)
        chanos_net_identity_free(s.ids[i]);
    chanos_net_identity_free(c1);
    chanos_net_identity_free(c2);
    chanos_net_identity_free(other);
}

/* A link whose listener is gone is not resumed: peer died. A listener
 * that is closed with a connection not yet accepted closes it. */
static void test_listener_gone(void)
{
    check_context = "listener gone";
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", NULL, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    chanos_net_link *a = NULL;
    struct chanos_net_options o = {.grace_ms = 2000};
    CHECK_EQ(chanos_net_dial(addr, &o, &a), 0);
    chanos_net_listener_close(L);
    const void *f;
    size_t n;
    CHECK_EQ(chanos_net_recv(a, &f, &n, 10000), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), -ECONNREFUSED);
}

/* IPv6 addresses, where the host has ::1. */
static void test_ipv6(void)
{
    check_context = "ipv6";
    chanos_net_listener *L;
    if (chanos_net_listen("[::1]:0", NULL, &L) != 0) {
        fprintf(stderr, "ipv6: no ::1 here, skipped\n");
        return;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "[::1]:%d", chanos_net_listener_port(L));
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (a && b)
        exchange(a, b, 10);
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    chanos_net_listener_close(L);
    CHECK_EQ(chanos_net_listen("[::1", NULL, &L), -EINVAL);
    CHECK_EQ(chanos_net_dial("nocolon", NULL, &a), -EINVAL);
}

static void *close_main(void *arg)
{
    chanos_net_link *c = arg;
    return (void *)(intptr_t)chanos_net_close(c);
}

/* Both sides close at once, many times: their closes cross, and each
 * returns 0 (the peer took everything), the listener's thread resuming
 * nothing. */
static void test_crossing_closes(void)
{
    check_context = "crossing closes";
    struct chanos_net_options o = {.linger_ms = 5000};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    for (int i = 0; i < 50; i++) {
        chanos_net_link *a = NULL, *b = NULL;
        CHECK_EQ(chanos_net_dial(addr, &o, &a), 0);
        CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
        if (!a || !b)
            break;
        exchange(a, b, 20);
        pthread_t ta, tb;
        void *ra, *rb;
        pthread_create(&ta, NULL, close_main, a);
        pthread_create(&tb, NULL, close_main, b);
        pthread_join(ta, &ra);
        pthread_join(tb, &rb);
        CHECK_EQ((intptr_t)ra, 0);
        CHECK_EQ((intptr_t)rb, 0);
    }
    chanos_net_listener_close(L);
}

/* A listener on a socket the caller made (chanos_net_listen_fd). */
static void test_listen_fd(void)
{
    check_context = "listen fd";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(fd, 8), 0);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen_fd(fd, NULL, &L), 0);
    CHECK_EQ(chanos_net_listener_port(L), ntohs(sa.sin_port));
    char addr[64];
    snprintf(addr, sizeof addr, "localhost:%d", ntohs(sa.sin_port));
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (a && b)
        exchange(a, b, 10);
    CHECK_EQ(chanos_net_close(a), 0);
    CHECK_EQ(chanos_net_close(b), 0);
    chanos_net_listener_close(L);
}

int main(void)
{
    test_plain();
    test_window();
    test_tls();
    test_listener_gone();
    test_listen_fd();
    test_crossing_closes();
    test_ipv6();
    return check_done("test_link");
}
