/*
 * peer_test: what a C handler knows of its call (docs/c-domains.md,
 * "Peers and metadata"): the calling domain (chanos_conn_peer) and the
 * call's metadata (chanos_conn_meta). The Go tests in tests/interop run
 * it against a real monitor:
 *
 *   peer_test serve NAME    exports pingpong under NAME, prints "serving
 *                           NAME", and serves one connection with the
 *                           generated dispatch until it ends:
 *                           echo(V) answers V plus the metadata "add"
 *                           (a decimal number; 0 without it), and bounce
 *                           answers "domain=D pid=P uid=U program=PROG
 *                           trace=T" of the client and the metadata
 *                           "trace-id" ("-" without it), its reply
 *                           carrying the metadata served-by=c
 *                           (chanos_conn_set_reply_meta)
 *   peer_test call NAME     connects to NAME, and calls bounce with the
 *                           metadata trace-id=c-trace (set on the
 *                           connection: chanos_conn_set_meta), then
 *                           without it, printing each reply and the
 *                           reply's metadata "echoed" ("-" without it):
 *                           "with X echoed=E" and "without Y echoed=E"
 *
 * The monitor directory comes from $CHANOS_DIR as usual. Exit status 0 on
 * success; on failure 1, with the reason on stderr.
 */
#include <chanos.h>

#include "pingpong.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc)
{
    fprintf(stderr, "peer_test: %s: %s (%d)\n", what, chanos_strerror(rc), rc);
    return 1;
}

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    struct chanos_str add;
    char num[24];

    (void)ctx;
    out->result = in->val;
    if (chanos_conn_meta(c, "add", &add) == 0 && add.len < sizeof num) {
        memcpy(num, add.ptr, add.len);
        num[add.len] = '\0';
        out->result += strtoull(num, NULL, 10);
    }
    return 0;
}

static char who[512];
static const struct chanos_meta served_by[] = { { "served-by", "c" } };

static int on_bounce(void *ctx, chanos_conn *c,
                     const struct pingpong_bounce_call *in,
                     struct pingpong_bounce_reply *out)
{
    struct chanos_peer p;
    struct chanos_str trace = { "-", 1 };
    int rc, n;

    (void)ctx;
    (void)in;
    rc = chanos_conn_peer(c, &p);
    if (rc != 0)
        return CHANOS_CODE_INTERNAL;
    (void)chanos_conn_meta(c, "trace-id", &trace);
    n = snprintf(who, sizeof who,
                 "domain=%" PRIu64 " pid=%" PRId32 " uid=%" PRIu32
                 " program=%s trace=%.*s",
                 p.domain, p.pid, p.uid, p.program, (int)trace.len, trace.ptr);
    out->reply.ptr = (const uint8_t *)who;
    out->reply.len = n < 0 ? 0 : (uint32_t)n;
    if (chanos_conn_set_reply_meta(c, served_by, 1) != 0)
        return CHANOS_CODE_INTERNAL;
    return 0;
}

static const struct pingpong_server_ops ops = {
    .echo = on_echo, .bounce = on_bounce,
};

/* call calls bounce on NAME with metadata, then without. */
static int call(chanos_domain *d, const char *name)
{
    static const struct chanos_meta md[] = { { "trace-id", "c-trace" } };
    struct pingpong_bounce_call in = { { NULL, 0 } };
    struct pingpong_bounce_reply out;
    const struct chanos_str dash = { "-", 1 };
    struct chanos_str echoed;
    chanos_conn *c;
    int rc;

    rc = chanos_connect_iface(d, name, &pingpong_interface, 10000, &c);
    if (rc != 0)
        return fail("connect", rc);
    if ((rc = chanos_conn_set_meta(c, md, 1)) != 0)
        return fail("set metadata", rc);
    if ((rc = pingpong_bounce(c, &in, &out, 10000)) != 0)
        return fail("bounce with metadata", rc);
    echoed = dash;
    (void)chanos_conn_meta(c, "echoed", &echoed);
    printf("with %.*s echoed=%.*s\n", (int)out.reply.len, (const char *)out.reply.ptr,
           (int)echoed.len, echoed.ptr);
    if ((rc = chanos_conn_set_meta(c, NULL, 0)) != 0)
        return fail("clear metadata", rc);
    if ((rc = pingpong_bounce(c, &in, &out, 10000)) != 0)
        return fail("bounce without metadata", rc);
    echoed = dash;
    (void)chanos_conn_meta(c, "echoed", &echoed);
    printf("without %.*s echoed=%.*s\n", (int)out.reply.len, (const char *)out.reply.ptr,
           (int)echoed.len, echoed.ptr);
    chanos_conn_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    chanos_domain *d;
    chanos_listener *l;
    chanos_conn *c;
    int rc;

    if (argc != 3 || (strcmp(argv[1], "serve") != 0 && strcmp(argv[1], "call") != 0)) {
        fprintf(stderr, "usage: peer_test serve|call NAME\n");
        return 2;
    }
    rc = chanos_join(&d, NULL);
    if (rc != 0)
        return fail("join", rc);
    if (strcmp(argv[1], "call") == 0) {
        rc = call(d, argv[2]);
        chanos_domain_close(d);
        return rc;
    }
    rc = chanos_export(d, argv[2], "pingpong", PINGPONG_MAX_FRAME_SIZE, &l);
    if (rc != 0)
        return fail("export", rc);
    printf("serving %s\n", argv[2]);
    fflush(stdout);
    if ((rc = chanos_accept(l, 20000, &c)) != 0)
        return fail("accept", rc);
    rc = pingpong_serve(c, &ops, NULL, 20000);
    chanos_conn_close(c);
    chanos_listener_close(l);
    chanos_domain_close(d);
    return rc == 0 ? 0 : fail("serve", rc);
}
