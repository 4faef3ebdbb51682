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

    conn_pair_of(4096, &srv, &cli);
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

    conn_pair_of(4096, &srv, &cli);
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

    conn_pair_of(4096, &srv, &cli);
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

    conn_pair_of(4096, &srv, &cli);
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

    conn_pair_of(4096, &srv, &cli);
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

/* fault_text describes the fault c recorded, or says there is none. */
static const char *fault_text(const chanos_conn *c)
{
    static char buf[CHANOS_WIRE_FAULT_TEXT_MAX];

    if (chanos_conn_fault(c) == NULL)
        return "(no fault)";
    chanos_wire_fault_describe(chanos_conn_fault(c), buf, sizeof buf);
    return buf;
}

/* meta_frame writes a frame of kind with META, call id 1 and an 8-byte
 * body, then the entries e[0..n) and their length, as a trailer. */
static size_t meta_frame(uint8_t *buf, unsigned kind, const void *e, size_t n)
{
    size_t len = raw_frame(buf, kind | CHANOS_FLAG_META, 0, 1);

    if (n > 0)
        memcpy(buf + len, e, n);
    len += n;
    chanos_store_u16(buf + len, (uint16_t)n);
    len += 2;
    chanos_store_u32(buf, (uint32_t)len);
    return len;
}

/* refused sends frame[0..n) from cli's side of the ring as it is, and
 * checks that srv's receive refuses it with code, describing why as text.
 * The connection goes on. */
static void refused(chanos_conn *srv, chanos_conn *cli, const uint8_t *frame,
                    size_t n, int code, const char *text)
{
    struct chanos_frame f;

    check_context = text;
    CHECK_EQ(chanos_ump_send(chanos_conn_ump(cli), frame, n, 1000), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), code);
    CHECK_STR(fault_text(srv), text);
    check_context = NULL;
}

/* Frames the connection refuses on receipt say why, as Go's wire.Error
 * says it for the same frame (the texts are Go's, but for a clause
 * about what keys may hold, which C leaves out of a fault's detail): a
 * header whose size is not the frame's, flags of no kind, a message
 * with a call id, a reply with a deadline, and metadata trailers that
 * break the rules of docs/wire.md, "Metadata". */
static void test_refused_frames_say_why(void)
{
    static const uint8_t upper[] = { 2, 'A', 'b', 1, 0, 'v' };
    static const uint8_t unsorted[] = { 1, 'b', 0, 0, 1, 'a', 0, 0 };
    static const uint8_t nul[] = { 1, 'k', 2, 0, 'x', 0 };
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[64];
    size_t n;

    conn_pair_of(4096, &srv, &cli);
    CHECK(chanos_conn_fault(srv) == NULL);

    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 0, 0);
    chanos_store_u32(buf, 99);
    refused(srv, cli, buf, n, CHANOS_ERR_SIZE,
            "wire: header size 99 differs from frame length 24 at offset 0");
    n = raw_frame(buf, 0x40, 0, 0);
    refused(srv, cli, buf, n, CHANOS_ERR_HEADER, "wire: invalid flags 0x40 at offset 6");
    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 0, 5);
    refused(srv, cli, buf, n, CHANOS_ERR_HEADER, "wire: message with nonzero call_id at offset 8");
    n = raw_frame(buf, CHANOS_KIND_REPLY, 0, 1);
    chanos_store_u32(buf + 12, 9);
    refused(srv, cli, buf, n, CHANOS_ERR_HEADER, "wire: reply with nonzero timeout_us at offset 12");

    n = meta_frame(buf, CHANOS_KIND_CALL, upper, sizeof upper);
    refused(srv, cli, buf, n, CHANOS_ERR_HEADER,
            "wire: metadata key \"Ab\" has byte 0x41 at offset 25");
    n = meta_frame(buf, CHANOS_KIND_CALL, NULL, 0);
    chanos_store_u16(buf + n - 2, 300);
    refused(srv, cli, buf, n, CHANOS_ERR_BOUND,
            "wire: metadata trailer of 300 bytes in a frame of 26 (at most 8192) at offset 24");
    n = meta_frame(buf, CHANOS_KIND_REPLY, unsorted, sizeof unsorted);
    refused(srv, cli, buf, n, CHANOS_ERR_BOUND,
            "wire: metadata key \"a\" after \"b\": keys are sorted, each once at offset 29");
    n = meta_frame(buf, CHANOS_KIND_REPLY, nul, sizeof nul);
    refused(srv, cli, buf, n, CHANOS_ERR_NUL,
            "wire: metadata \"k\": value holds a NUL byte at offset 28");

    /* the connection goes on after each refusal */
    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 0, 0);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 1000), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* A call whose reply the connection refuses, and a serve loop that ends
 * at a frame it refuses, leave the fault for their caller to read. */
static void test_refusals_in_calls_and_serving(void)
{
    static const uint8_t upper[] = { 2, 'A', 'b', 1, 0, 'v' };
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[64], call[64];
    size_t n;

    conn_pair_of(4096, &srv, &cli);
    /* the reply to the connection's first call, id 1, waits in the ring */
    n = meta_frame(buf, CHANOS_KIND_REPLY, upper, sizeof upper);
    CHECK_EQ(chanos_ump_send(chanos_conn_ump(srv), buf, n, 1000), 0);
    n = raw_frame(call, CHANOS_KIND_CALL, 0, 0);
    CHECK_EQ(chanos_conn_call(cli, call, n, 1000, &f, NULL, NULL), CHANOS_ERR_HEADER);
    CHECK_STR(fault_text(cli), "wire: metadata key \"Ab\" has byte 0x41 at offset 25");

    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0); /* the call */
    n = raw_frame(buf, 0x40, 0, 0);
    CHECK_EQ(chanos_ump_send(chanos_conn_ump(cli), buf, n, 1000), 0);
    dispatched = 0;
    CHECK_EQ(chanos_serve(srv, count_dispatch, NULL, NULL, 1000), CHANOS_ERR_HEADER);
    CHECK_EQ(dispatched, 0);
    CHECK_STR(fault_text(srv), "wire: invalid flags 0x40 at offset 6");
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* What the caller gives the connection to send, and it refuses, says why
 * too: a header that announces capabilities not given, a reply that is
 * not one, an error reply of code 0, metadata that breaks its rules. */
static void test_refused_sends_say_why(void)
{
    const struct chanos_meta bad_key = { "Bad", "v" };
    struct chanos_meta long_value = { "trace", NULL };
    char value[CHANOS_META_VALUE_MAX + 2];
    struct chanos_frame call;
    chanos_conn *srv, *cli;
    uint8_t buf[64];
    size_t n;

    conn_pair_of(4096, &srv, &cli);
    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 1, 0);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 1000), CHANOS_ERR_CAP);
    CHECK_STR(fault_text(cli), "wire: header ncaps 1 differs from the 0 capabilities given at offset 7");

    memset(&call, 0, sizeof call);
    call.hdr.msg = MSG_ECHO;
    call.hdr.call_id = 1;
    n = raw_frame(buf, CHANOS_KIND_MESSAGE, 0, 0);
    CHECK_EQ(chanos_conn_reply(srv, &call, buf, n, 1000), CHANOS_ERR_HEADER);
    CHECK_STR(fault_text(srv), "wire: flags 0x00, not those of a reply at offset 6");
    CHECK_EQ(chanos_conn_reply_error(srv, &call, 0, "none", 1000), CHANOS_ERR_HEADER);
    CHECK_STR(fault_text(srv),
              "wire: field code: status code 0 (an error reply needs a nonzero code) at offset 16");

    CHECK_EQ(chanos_conn_set_meta(cli, &bad_key, 1), CHANOS_ERR_HEADER);
    CHECK_STR(fault_text(cli), "wire: metadata key \"Bad\" has byte 0x42 at 0");
    memset(value, 'v', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    long_value.value = value;
    CHECK_EQ(chanos_conn_set_reply_meta(srv, &long_value, 1), CHANOS_ERR_BOUND);
    CHECK_STR(fault_text(srv), "wire: metadata \"trace\": value of 1025 bytes; at most 1024");
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
    test_refused_frames_say_why();
    test_refusals_in_calls_and_serving();
    test_refused_sends_say_why();
    return check_done("test_conn_faults");
}
