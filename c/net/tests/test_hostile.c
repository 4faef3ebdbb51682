/*
 * test_hostile.c: a C listener against a raw TCP peer that breaks the
 * protocol (docs/net.md): bad hellos are answered with REJECT 2, a resume
 * of an unknown connection with REJECT 1, and each broken record (a
 * sequence gap, a window overrun, an acknowledgement of what was not
 * sent, a frame with capabilities but not their irefs after it, flags,
 * an unknown type) ends that one link with CHANOS_ERR_PROTOCOL while the
 * listener goes on.
 */
#include "check.h"
#include "raw_peer.h"

#include <chanos_net.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int port;

static void put_hello(uint8_t *b, bool resume, uint8_t idbyte, uint64_t received)
{
    put_header(b, 4, 36, 0, received);
    uint8_t *p = b + 24;
    memcpy(p, "chnt", 4);
    chanos_store_u16(p + 4, 1);
    chanos_store_u16(p + 6, resume ? 1 : 0);
    memset(p + 8, idbyte, 16);
    chanos_store_u32(p + 24, 65536);
    chanos_store_u32(p + 28, 64);
    chanos_store_u32(p + 32, 1 << 20);
}

/* rejected sends what, and returns the code of the REJECT that answers
 * it, or -1. */
static int rejected(const uint8_t *what, size_t n)
{
    int fd = raw_dial(port);
    if (fd < 0)
        return -1;
    int code = -1;
    uint8_t r[28];
    if (write(fd, what, n) == (ssize_t)n && read_full(fd, r, 28) && r[0] == 5)
        code = (int)chanos_load_u32(r + 24);
    close(fd);
    return code;
}

static void test_hellos(void)
{
    check_context = "hellos";
    uint8_t h[60];
    put_header(h, 9, 36, 0, 0);
    CHECK_EQ(rejected(h, 60), 2);
    put_hello(h, false, 1, 0);
    memcpy(h + 24, "xxxx", 4);
    CHECK_EQ(rejected(h, 60), 2); /* magic */
    put_hello(h, false, 1, 0);
    chanos_store_u16(h + 28, 2);
    CHECK_EQ(rejected(h, 60), 2); /* version */
    put_hello(h, false, 1, 0);
    chanos_store_u16(h + 30, 4);
    CHECK_EQ(rejected(h, 60), 2); /* flags */
    put_hello(h, false, 1, 0);
    chanos_store_u32(h + 24 + 28, 0);
    CHECK_EQ(rejected(h, 60), 2); /* window */
    put_hello(h, false, 1, 3);
    CHECK_EQ(rejected(h, 60), 2); /* a new connection that received */
    put_hello(h, true, 1, 0);
    CHECK_EQ(rejected(h, 60), 1); /* resume of an unknown one */
}

/* opened makes a connection from a raw peer, and returns its socket and
 * the accepted link. */
static int opened(chanos_net_listener *L, uint8_t idbyte, chanos_net_link **out)
{
    int fd = raw_dial(port);
    uint8_t h[60];
    put_hello(h, false, idbyte, 0);
    *out = NULL;
    if (fd < 0 || write(fd, h, 60) != 60 || !read_full(fd, h, 60) || h[0] != 4 ||
        chanos_net_accept(L, 5000, out) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static uint8_t frame[16] = {16, 0, 0, 0, 1};

/* broken sends records to a fresh link and returns what its receive
 * says. */
static int broken(chanos_net_listener *L, uint8_t idbyte, const uint8_t *recs,
                  size_t n)
{
    chanos_net_link *l;
    int fd = opened(L, idbyte, &l);
    if (fd < 0)
        return 0;
    int r = 0;
    if (write(fd, recs, n) == (ssize_t)n) {
        const void *f;
        size_t len;
        do
            r = chanos_net_recv(l, &f, &len, 5000);
        while (r == 0);
    }
    close(fd);
    chanos_net_close(l);
    return r;
}

static void test_records(chanos_net_listener *L)
{
    check_context = "records";
    uint8_t b[4 * 40];
    /* a sequence gap */
    put_header(b, 1, 16, 2, 0);
    memcpy(b + 24, frame, 16);
    CHECK_EQ(broken(L, 10, b, 40), CHANOS_ERR_PROTOCOL);
    /* a frame with capabilities */
    put_header(b, 1, 16, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24 + 7] = 1;
    CHECK_EQ(broken(L, 11, b, 40), CHANOS_ERR_PROTOCOL);
    /* irefs after a frame (docs/net.md, "Records"): a null one; fewer
     * than its ncaps; more; and a frame whose size leaves no room */
    put_header(b, 1, 48, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24 + 7] = 1;
    memset(b + 40, 0, 32);
    CHECK_EQ(broken(L, 20, b, 72), CHANOS_ERR_PROTOCOL);
    put_header(b, 1, 48, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24 + 7] = 2;
    memset(b + 40, 7, 32);
    CHECK_EQ(broken(L, 21, b, 72), CHANOS_ERR_PROTOCOL);
    put_header(b, 1, 80, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24 + 7] = 1;
    memset(b + 40, 7, 64);
    CHECK_EQ(broken(L, 22, b, 104), CHANOS_ERR_PROTOCOL);
    put_header(b, 1, 48, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24] = 40;
    b[24 + 7] = 1;
    memset(b + 40, 7, 32);
    CHECK_EQ(broken(L, 23, b, 72), CHANOS_ERR_PROTOCOL);
    /* a frame whose size is not its length */
    put_header(b, 1, 16, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24] = 17;
    CHECK_EQ(broken(L, 12, b, 40), CHANOS_ERR_PROTOCOL);
    /* an acknowledgement of what was not sent */
    put_header(b, 2, 0, 0, 5);
    CHECK_EQ(broken(L, 13, b, 24), CHANOS_ERR_PROTOCOL);
    /* flags */
    put_header(b, 2, 0, 0, 0);
    b[1] = 1;
    CHECK_EQ(broken(L, 14, b, 24), CHANOS_ERR_PROTOCOL);
    /* an unknown type, and a hello after the handshake */
    put_header(b, 7, 0, 0, 0);
    CHECK_EQ(broken(L, 15, b, 24), CHANOS_ERR_PROTOCOL);
    put_hello(b, false, 16, 0);
    CHECK_EQ(broken(L, 16, b, 60), CHANOS_ERR_PROTOCOL);
    /* a frame over the maximum */
    put_header(b, 1, 70000, 1, 0);
    CHECK_EQ(broken(L, 17, b, 24), CHANOS_ERR_PROTOCOL);
    /* a window overrun: the listener's window is 2 frames */
    for (int i = 0; i < 3; i++) {
        put_header(b + 40 * i, 1, 16, (uint64_t)i + 1, 0);
        memcpy(b + 40 * i + 24, frame, 16);
    }
    CHECK_EQ(broken(L, 18, b, 120), CHANOS_ERR_PROTOCOL);
    /* A well-behaved frame and close are taken as such. */
    put_header(b, 1, 16, 1, 0);
    memcpy(b + 24, frame, 16);
    put_header(b + 40, 3, 0, 2, 0);
    chanos_net_link *l;
    int fd = opened(L, 19, &l);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, b, 64) == 64);
        const void *f;
        size_t len;
        CHECK_EQ(chanos_net_recv(l, &f, &len, 5000), 0);
        CHECK_EQ(len, 16);
        CHECK_EQ(chanos_net_recv(l, &f, &len, 5000), CHANOS_ERR_CLOSED);
        /* the close is acknowledged at once: an ACK of 2 */
        uint8_t a[24];
        bool acked = false;
        while (!acked && read_full(fd, a, 24))
            acked = a[0] == 2 && chanos_load_u64(a + 16) == 2;
        CHECK(acked);
        close(fd);
        chanos_net_close(l);
    }
    /* A frame with an iref after it is taken as such. */
    put_header(b, 1, 48, 1, 0);
    memcpy(b + 24, frame, 16);
    b[24 + 7] = 1;
    memset(b + 40, 7, 32);
    fd = opened(L, 24, &l);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, b, 72) == 72);
        const void *f;
        const uint8_t *refs;
        size_t len;
        CHECK_EQ(chanos_net_recv_refs(l, &f, &len, &refs, 5000), 0);
        CHECK_EQ(len, 16);
        CHECK(refs != NULL && refs[0] == 7 && refs[31] == 7);
        close(fd);
        chanos_net_close(l);
    }
}

/* test_mutations sends 130 links corrupted copies of a valid stream (two
 * frames, an acknowledgement, a frame with an iref, a close): bytes
 * flipped or set to values that matter to the parser, the stream cut
 * short. Each link delivers frames, waits for more, or ends with an error,
 * and closes; under the sanitizers, nothing is read out of bounds. The
 * mutations are the same on every run (check_rnd). */
static void test_mutations(chanos_net_listener *L)
{
    check_context = "mutations";
    uint8_t valid[40 + 40 + 24 + 72 + 24];
    size_t n = 0;
    put_header(valid + n, 1, 16, 1, 0);
    memcpy(valid + n + 24, frame, 16);
    n += 40;
    put_header(valid + n, 1, 16, 2, 0);
    memcpy(valid + n + 24, frame, 16);
    n += 40;
    put_header(valid + n, 2, 0, 0, 0);
    n += 24;
    put_header(valid + n, 1, 48, 3, 0);
    memcpy(valid + n + 24, frame, 16);
    valid[n + 24 + 7] = 1;
    memset(valid + n + 40, 7, 32);
    n += 72;
    put_header(valid + n, 3, 0, 4, 0);
    n += 24;

    int ended = 0;
    for (int i = 0; i < 130; i++) {
        uint8_t b[sizeof valid];
        memcpy(b, valid, n);
        size_t len = n;
        for (int k = 0; k < 1 + i % 4; k++) {
            static const uint8_t vals[] = {0, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff};
            size_t at = (size_t)(check_rnd() % n);
            b[at] = check_rnd() & 1 ? (uint8_t)check_rnd() : vals[check_rnd() % sizeof vals];
        }
        if (i % 5 == 0)
            len = (size_t)(check_rnd() % n);
        chanos_net_link *l;
        int fd = opened(L, (uint8_t)(100 + i), &l);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        int r = 0;
        if (write(fd, b, len) == (ssize_t)len) {
            const void *f;
            const uint8_t *refs;
            size_t flen;
            /* what the stream holds is there within a moment: a receive
             * that times out waits for more, which is right too */
            do
                r = chanos_net_recv_refs(l, &f, &flen, &refs, 20);
            while (r == 0);
        }
        CHECK(r < 0 && chanos_strerror(r) != NULL);
        if (r == CHANOS_ERR_PROTOCOL || r == CHANOS_ERR_CLOSED)
            ended++;
        close(fd);
        chanos_net_close(l);
    }
    /* Most corruptions are caught: the parser is not merely waiting. */
    CHECK(ended > 30);
}

int main(void)
{
    struct chanos_net_options o = {.window_frames = 2, .max_frame = 65536,
                                   .linger_ms = 100};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &o, &L), 0);
    port = chanos_net_listener_port(L);
    test_hellos();
    test_records(L);
    test_mutations(L);
    /* The listener went on through all of it. */
    check_context = "after";
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    CHECK_EQ(chanos_net_send(a, frame, 16, 5000), 0);
    const void *f;
    size_t len;
    CHECK_EQ(chanos_net_recv(b, &f, &len, 5000), 0);
    chanos_net_close(a);
    chanos_net_close(b);
    chanos_net_listener_close(L);
    return check_done("test_hostile");
}
