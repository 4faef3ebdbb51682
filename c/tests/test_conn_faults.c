/*
 * test_conn_faults.c: what a broken or hostile peer, or a failed step of
 * the caller's own, must not do to a libchanos connection: leave
 * descriptors open, close one the caller still owns, let an abandoned
 * call's reply through, or tell the caller its arguments were wrong when
 * the server's reply was.
 */
#include "ump_testutil.h"

#include <errno.h>
#include <fcntl.h>

#define MSG_ECHO 4

static void conn_pair(chanos_conn **srv, chanos_conn **cli)
{
    struct chanos_ump_options o = { 0 };
    chanos_ump *ua, *ub;

    o.max_msg = 4096;
    pair(&o, &ua, &ub);
    CHECK_EQ(chanos_conn_new(ua, srv), 0);
    CHECK_EQ(chanos_conn_new(ub, cli), 0);
}

/* raw_frame writes a header of kind, with ncaps and call_id, and an
 * 8-byte body. */
static size_t raw_frame(uint8_t *buf, unsigned kind, uint8_t ncaps, uint32_t call_id)
{
    struct chanos_hdr h = { CHANOS_HEADER_SIZE + 8, MSG_ECHO, (uint8_t)kind, ncaps, call_id, 0 };

    chanos_hdr_put(buf, &h);
    memset(buf + CHANOS_HEADER_SIZE, 0, 8);
    return CHANOS_HEADER_SIZE + 8;
}

static int open_null(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    CHECK(fd >= 0);
    return fd;
}

static int is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static int dispatched;

static int count_dispatch(chanos_conn *c, const struct chanos_frame *f, const void *ops, void *ctx)
{
    (void)c;
    (void)ops;
    (void)ctx;
    dispatched++;
    chanos_frame_close_fds(f);
    return 0;
}

/* A cancel carries no descriptors; those a peer sends with one anyway are
 * closed by the serve loop, not kept until the process runs out. */
static void test_cancel_with_fds(void)
{
    chanos_conn *srv, *cli;
    uint8_t buf[64];
    int before = count_fds();

    conn_pair(&srv, &cli);
    for (int i = 0; i < 10; i++) {
        int fds[3] = { open_null(), open_null(), open_null() };
        size_t n = raw_frame(buf, CHANOS_KIND_CANCEL, 3, 7);

        CHECK_EQ(chanos_ump_send_fds(chanos_conn_ump(cli), buf, n, fds, 3, 1000), 0);
        for (int k = 0; k < 3; k++)
            close(fds[k]);
    }
    chanos_conn_close(cli);
    dispatched = 0;
    CHECK_EQ(chanos_serve(srv, count_dispatch, NULL, NULL, 1000), 0);
    CHECK_EQ(dispatched, 0);
    chanos_conn_close(srv);
    CHECK_EQ(count_fds(), before);
}

/* An encode that fails after a give_away_cap leaves the buffer as it was:
 * the next frame's plain cap in that place is not closed by its send. */
static void test_failed_encode_gives_nothing_away(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_buf b;
    struct chanos_enc e;
    uint8_t data[CHANOS_HEADER_SIZE + 8];
    int fds[4], mine = open_null(), given = open_null();

    conn_pair(&srv, &cli);
    chanos_buf_init(&b, data, sizeof data, fds, 4);
    chanos_enc_begin(&e, &b, MSG_ECHO, CHANOS_KIND_MESSAGE);
    chanos_enc_give_away_cap(&e, NULL, given);
    chanos_enc_u64(&e, 1);
    chanos_enc_u64(&e, 2); /* past the buffer */
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NOSPACE);
    CHECK_EQ(b.len, 0);
    CHECK_EQ(b.nfds, 0);

    chanos_enc_begin(&e, &b, MSG_ECHO, CHANOS_KIND_MESSAGE);
    chanos_enc_cap(&e, NULL, mine);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(chanos_conn_send_buf(cli, &b, 1000), 0);
    CHECK(is_open(mine));  /* a plain cap: the caller's still */
    CHECK(is_open(given)); /* never sent */
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.nfds, 1);
    chanos_frame_close_fds(&f);
    close(mine);
    close(given);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

static chanos_conn *busy;
static int busy_rc, busy_given;

/* call_while_busy makes a call with a given-away descriptor on busy,
 * whose receive side the call in progress holds. */
static void call_while_busy(void *arg, const struct chanos_frame *f)
{
    struct chanos_frame r;
    struct chanos_buf b;
    struct chanos_enc e;
    uint8_t data[64];
    int fds[1];

    (void)arg;
    chanos_frame_close_fds(f);
    chanos_buf_init(&b, data, sizeof data, fds, 1);
    chanos_enc_begin(&e, &b, MSG_ECHO, CHANOS_KIND_CALL);
    chanos_enc_give_away_cap(&e, NULL, busy_given);
    chanos_enc_u64(&e, 1);
    CHECK_EQ(chanos_enc_end(&e), 0);
    busy_rc = chanos_conn_call_buf(busy, &b, 1000, &r, NULL, NULL);
}

/* A call refused before it is sent (another call holds the receive side)
 * leaves its given-away descriptors with the caller. */
static void test_refused_call_keeps_fds(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[64];
    size_t n;

    conn_pair(&srv, &cli);
    busy = cli;
    busy_given = open_null();
    /* a message, which the call below hands to call_while_busy; the
     * server never answers the call itself */
    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 0, 0);
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    n = raw_frame(buf, CHANOS_KIND_CALL, 0, 0);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 100, &f, call_while_busy, NULL), CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(busy_rc, CHANOS_ERR_BUSY);
    CHECK(is_open(busy_given));
    close(busy_given);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* A reply with call id 0, which answers no call, does not use up the
 * record of an abandoned call: that call's late reply is still dropped. */
static void test_call_id_zero_is_not_late(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f, call;
    uint8_t buf[64];
    size_t n;
    uint32_t id;

    conn_pair(&srv, &cli);
    n = raw_frame(buf, CHANOS_KIND_CALL, 0, 0);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
    n = raw_frame(buf, CHANOS_KIND_REPLY, 0, 0);
    CHECK_EQ(chanos_ump_send(chanos_conn_ump(srv), buf, n, 1000), 0);
    memset(&call, 0, sizeof call);
    call.hdr.msg = MSG_ECHO;
    call.hdr.call_id = id;
    n = raw_frame(buf, CHANOS_KIND_REPLY, 0, 0);
    CHECK_EQ(chanos_conn_reply(srv, &call, buf, n, 0), 0);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0); /* the one to no call */
    CHECK_EQ(f.hdr.call_id, 0);
    CHECK_EQ(chanos_conn_recv(cli, 20, &f), CHANOS_ERR_TIMEDOUT);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* A reply the handler made but that does not encode is answered with
 * "internal" (docs/wire.md), not "invalid argument", which would blame
 * the caller. */
static void test_reply_that_does_not_encode(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f, r;
    struct chanos_status st;
    uint8_t buf[64];
    size_t n;
    uint32_t id;

    conn_pair(&srv, &cli);
    n = raw_frame(buf, CHANOS_KIND_CALL, 0, 0);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(chanos_serve_reply_(srv, &f, CHANOS_ERR_BOUND, NULL), 0);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &r), 0);
    CHECK_EQ(r.kind, CHANOS_KIND_ERROR);
    CHECK_EQ(chanos_frame_status(&r, &st), 0);
    CHECK_EQ(st.code, CHANOS_CODE_INTERNAL);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

int main(void)
{
    test_cancel_with_fds();
    test_failed_encode_gives_nothing_away();
    test_refused_call_keeps_fds();
    test_call_id_zero_is_not_late();
    test_reply_that_does_not_encode();
    return check_done("test_conn_faults");
}
