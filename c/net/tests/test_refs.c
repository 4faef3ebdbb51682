/*
 * test_refs.c: channel endpoints between machines as the net link and a
 * chanos connection over it carry them (docs/net.md, "Records";
 * docs/capabilities.md, "Between machines"), over loopback and without
 * monitors: irefs after a frame both ways at the link (sizes, the checks
 * at send), an iref received on a connection as an endpoint descriptor
 * (chanos_endpoint_ref reads it back, chanos_endpoint_open without a
 * domain refuses it with CHANOS_ERR_NO_ROUTE and closes it), sent on as it
 * came, and a descriptor that is not such an endpoint refused at send
 * (CHANOS_ERR_CAP) while the connection goes on. The binds through the
 * monitors run in tests/cluster (TestCEndpointAcrossMachines).
 */
#include "check.h"

#include <chanos_net.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* message msg 1 with ncaps caps (each an index, u32), then a u64 */
static size_t frame_with(uint8_t *b, uint8_t ncaps)
{
    size_t n = CHANOS_HEADER_SIZE + 4u * ncaps + 8;
    struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1, .ncaps = ncaps};
    chanos_hdr_put(b, &h);
    for (uint8_t i = 0; i < ncaps; i++)
        chanos_store_u32(b + CHANOS_HEADER_SIZE + 4u * i, i);
    chanos_store_u64(b + n - 8, 42);
    return n;
}

static void ref_bytes(uint8_t *b, const struct chanos_iref *r)
{
    chanos_store_u64(b, r->machine);
    chanos_store_u64(b + 8, r->export_id);
    memcpy(b + 16, r->token, 16);
}

#define NET_TEST_BIG ((1u << 20) + (64u << 10))

static const struct chanos_iref ref1 = {
    0x1111222233334444u, 77, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
static const struct chanos_iref ref2 = {
    0x5555666677778888u, 78, {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}};

static bool same_ref(const struct chanos_iref *a, const struct chanos_iref *b)
{
    return a->machine == b->machine && a->export_id == b->export_id &&
           memcmp(a->token, b->token, 16) == 0;
}

static bool closed_fd(int fd)
{
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

static void test_link(chanos_net_link *a, chanos_net_link *b)
{
    check_context = "link";
    uint8_t f[128], refs[64];
    ref_bytes(refs, &ref1);
    ref_bytes(refs + 32, &ref2);
    size_t n = frame_with(f, 2);
    /* the checks at send: ncaps and the irefs given must agree, no null
     * iref, and a plain send carries no capabilities */
    CHECK_EQ(chanos_net_send(a, f, n, 1000), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_net_send_refs(a, f, n, refs, 1, 1000), CHANOS_ERR_CAP);
    uint8_t nul[64] = {0};
    memcpy(nul, refs, 32);
    CHECK_EQ(chanos_net_send_refs(a, f, n, nul, 2, 1000), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_net_send_refs(a, f, n, refs, 2, 1000), 0);
    const void *got;
    const uint8_t *grefs;
    size_t len;
    CHECK_EQ(chanos_net_recv_refs(b, &got, &len, &grefs, 5000), 0);
    CHECK_EQ(len, n);
    CHECK(memcmp(got, f, n) == 0);
    CHECK(grefs != NULL && memcmp(grefs, refs, 64) == 0);
    /* a frame without: no irefs */
    n = frame_with(f, 0);
    CHECK_EQ(chanos_net_send_refs(a, f, n, NULL, 0, 0), 0);
    CHECK_EQ(chanos_net_recv_refs(b, &got, &len, &grefs, 5000), 0);
    CHECK_EQ(len, n);
    CHECK(grefs == NULL);
    /* the irefs count against the maximum frame: a frame that fits alone
     * does not with them */
    size_t max = chanos_net_max_frame(a);
    static uint8_t big[NET_TEST_BIG];
    struct chanos_hdr h = {.size = (uint32_t)(max - 16), .msg = 1, .ncaps = 1};
    CHECK(max - 16 <= sizeof big);
    if (max - 16 <= sizeof big) {
        chanos_hdr_put(big, &h);
        CHECK_EQ(chanos_net_send_refs(a, big, max - 16, refs, 1, 1000),
                 CHANOS_ERR_TOO_LARGE);
    }
}

static void test_conn(chanos_net_link *a, chanos_conn *cb)
{
    check_context = "conn";
    uint8_t f[128], refs[64];
    ref_bytes(refs, &ref1);
    ref_bytes(refs + 32, &ref2);
    size_t n = frame_with(f, 2);
    CHECK_EQ(chanos_net_send_refs(a, f, n, refs, 2, 1000), 0);
    struct chanos_frame fr;
    CHECK_EQ(chanos_conn_recv(cb, 5000, &fr), 0);
    CHECK_EQ(fr.nfds, 2);
    CHECK_EQ(fr.len, n);
    if (fr.nfds != 2)
        return;
    int e1 = fr.fds[0], e2 = fr.fds[1];
    struct chanos_iref r;
    CHECK_EQ(chanos_endpoint_ref(e1, &r), 0);
    CHECK(same_ref(&r, &ref1));
    CHECK_EQ(chanos_endpoint_ref(e2, &r), 0);
    CHECK(same_ref(&r, &ref2));

    /* Sent on as it came: the same iref. */
    uint8_t out[128];
    int fds[2];
    struct chanos_buf b;
    struct chanos_enc e;
    chanos_buf_init(&b, out, sizeof out, fds, 2);
    chanos_enc_begin(&e, &b, 1, CHANOS_KIND_MESSAGE);
    chanos_enc_give_away_cap(&e, NULL, e2);
    chanos_enc_u64(&e, 43);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(chanos_conn_send_buf(cb, &b, 1000), 0);
    CHECK(closed_fd(e2)); /* given away */
    const void *got;
    const uint8_t *grefs;
    size_t len;
    CHECK_EQ(chanos_net_recv_refs(a, &got, &len, &grefs, 5000), 0);
    CHECK_EQ(len, b.len);
    CHECK(grefs != NULL && memcmp(grefs, refs + 32, 32) == 0);

    /* Anything else is refused at send, and the connection goes on. */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    chanos_buf_init(&b, out, sizeof out, fds, 2);
    chanos_enc_begin(&e, &b, 1, CHANOS_KIND_MESSAGE);
    chanos_enc_give_away_cap(&e, NULL, p[0]);
    chanos_enc_u64(&e, 44);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(chanos_conn_send_buf(cb, &b, 1000), CHANOS_ERR_CAP);
    CHECK(!closed_fd(p[0])); /* not sent: still the caller's */
    CHECK_EQ(chanos_endpoint_ref(p[0], &r), -EINVAL);
    close(p[0]);
    close(p[1]);
    chanos_conn *mine;
    int ep;
    CHECK_EQ(chanos_endpoint_new(&(struct chanos_interface){.name = "pingpong", .max_frame = 1024},
                                 &mine, &ep), 0);
    CHECK_EQ(chanos_endpoint_ref(ep, &r), -EINVAL); /* of this machine */
    chanos_buf_init(&b, out, sizeof out, fds, 2);
    chanos_enc_begin(&e, &b, 1, CHANOS_KIND_MESSAGE);
    chanos_enc_give_away_cap(&e, NULL, ep);
    chanos_enc_u64(&e, 45);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(chanos_conn_send_buf(cb, &b, 1000), CHANOS_ERR_CAP);
    close(ep);
    chanos_conn_close(mine);
    n = frame_with(f, 0);
    CHECK_EQ(chanos_conn_send(cb, f, n, 1000), 0);
    CHECK_EQ(chanos_net_recv_refs(a, &got, &len, &grefs, 5000), 0);
    CHECK_EQ(len, n);

    /* Without a domain there is nobody to bind it: refused, and closed. */
    chanos_conn *oc = NULL;
    CHECK_EQ(chanos_endpoint_open(e1, &(struct chanos_interface){.name = "pingpong", .max_frame = 1024},
                                  &oc),
             CHANOS_ERR_NO_ROUTE);
    CHECK(oc == NULL);
    CHECK(closed_fd(e1));

    /* An iref the header does not announce is a protocol violation, at
     * the link; see test_hostile. Frames of more capabilities than one
     * frame on a machine holds are refused at receive. */
}

int main(void)
{
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", NULL, &L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    chanos_net_link *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    if (a && b)
        test_link(a, b);
    chanos_net_close(a);
    chanos_net_close(b);
    CHECK_EQ(chanos_net_dial(addr, NULL, &c), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &d), 0);
    chanos_conn *cd = NULL;
    CHECK_EQ(chanos_net_conn_new(d, &cd), 0);
    if (c && cd)
        test_conn(c, cd);
    chanos_net_close(c);
    chanos_conn_close(cd);
    chanos_net_listener_close(L);
    return check_done("test_refs");
}
