/*
 * status_test: rpc status codes between C and Go domains (docs/wire.md,
 * "Status codes"), over the pingpong interface's echo rpc. The Go tests in
 * tests/interop run it against a real monitor:
 *
 *   status_test serve NAME        exports pingpong under NAME, prints
 *                                 "serving NAME", and answers the echo
 *                                 calls of one connection until it ends:
 *                                 echo(0) with 0, echo(V) with an error
 *                                 reply of code V and detail "c detail V"
 *   status_test call NAME V...    connects to NAME and calls echo(V) for
 *                                 each V, printing "V: ok R" for a reply
 *                                 and "V: code C (NAME): DETAIL" for an
 *                                 error reply, NAME from chanos_code_str
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

#define CALL_MS 10000

static uint8_t buf[PINGPONG_ECHO_CALL_MAX_FRAME_SIZE +
                   PINGPONG_ECHO_REPLY_MAX_FRAME_SIZE];

static int fail(const char *what, int rc)
{
    fprintf(stderr, "status_test: %s: %s (%d)\n", what, chanos_strerror(rc),
            rc);
    return 1;
}

/* answer answers the echo call f on c. */
static int answer(chanos_conn *c, const struct chanos_frame *f)
{
    struct pingpong_echo_call call;
    struct pingpong_echo_reply r = { 0 };
    struct chanos_buf b;
    char detail[64];
    int rc;

    if (f->kind != CHANOS_KIND_CALL || f->hdr.msg != PINGPONG_MSG_ECHO)
        return chanos_conn_reply_error(c, f, CHANOS_CODE_UNIMPLEMENTED,
                                       "only echo", CALL_MS);
    rc = pingpong_echo_call_decode(&call, f->data, f->len, NULL, 0);
    if (rc != 0)
        return chanos_conn_reply_error(c, f, CHANOS_CODE_INVALID_ARGUMENT,
                                       chanos_strerror(rc), CALL_MS);
    if (call.val != 0) {
        snprintf(detail, sizeof detail, "c detail %" PRIu64, call.val);
        return chanos_conn_reply_error(c, f, call.val, detail, CALL_MS);
    }
    chanos_buf_init(&b, buf, sizeof buf, NULL, 0);
    rc = pingpong_echo_reply_encode(&r, &b);
    return rc != 0 ? rc : chanos_conn_reply(c, f, b.data, b.len, CALL_MS);
}

static int serve(chanos_domain *d, const char *name)
{
    chanos_listener *l;
    chanos_conn *c;
    struct chanos_frame f;
    int rc;

    rc = chanos_export(d, name, "pingpong", PINGPONG_MAX_FRAME_SIZE, &l);
    if (rc != 0)
        return fail("export", rc);
    printf("serving %s\n", name);
    fflush(stdout);
    if ((rc = chanos_accept(l, 20000, &c)) != 0)
        return fail("accept", rc);
    while ((rc = chanos_conn_recv(c, 20000, &f)) == 0) {
        if (f.kind == CHANOS_KIND_CANCEL)
            continue;
        if ((rc = answer(c, &f)) != 0)
            break;
    }
    chanos_conn_close(c);
    chanos_listener_close(l);
    return rc == CHANOS_ERR_CLOSED ? 0 : fail("serve", rc);
}

static int call(chanos_domain *d, const char *name, int n, char **vals)
{
    chanos_conn *c;
    int rc;

    rc = chanos_connect(d, name, "pingpong", PINGPONG_MAX_FRAME_SIZE, CALL_MS,
                        &c);
    if (rc != 0)
        return fail("connect", rc);
    for (int i = 0; i < n; i++) {
        struct pingpong_echo_call in = { strtoull(vals[i], NULL, 0) };
        struct pingpong_echo_reply r;
        struct chanos_status st;
        struct chanos_frame f;
        struct chanos_buf b;

        chanos_buf_init(&b, buf, sizeof buf, NULL, 0);
        if ((rc = pingpong_echo_call_encode(&in, &b)) != 0)
            break;
        rc = chanos_conn_call(c, b.data, b.len, CALL_MS, &f, NULL, NULL);
        if (rc == CHANOS_ERR_REMOTE) {
            if ((rc = chanos_frame_status(&f, &st)) != 0)
                break;
            printf("%" PRIu64 ": code %" PRIu64 " (%s): %.*s\n", in.val,
                   st.code, chanos_code_str(st.code), (int)st.detail.len,
                   st.detail.ptr);
            continue;
        }
        if (rc != 0 ||
            (rc = pingpong_echo_reply_decode(&r, f.data, f.len, NULL, 0)) != 0)
            break;
        printf("%" PRIu64 ": ok %" PRIu64 "\n", in.val, r.result);
    }
    chanos_conn_close(c);
    return rc == 0 ? 0 : fail("echo", rc);
}

int main(int argc, char **argv)
{
    chanos_domain *d;
    int rc;

    if (argc < 3 || (strcmp(argv[1], "serve") != 0 &&
                     strcmp(argv[1], "call") != 0)) {
        fprintf(stderr, "usage: status_test serve NAME | call NAME V...\n");
        return 2;
    }
    if ((rc = chanos_join(&d, NULL)) != 0)
        return fail("join", rc);
    if (strcmp(argv[1], "serve") == 0)
        rc = serve(d, argv[2]);
    else
        rc = call(d, argv[2], argc - 3, argv + 3);
    chanos_domain_close(d);
    return rc;
}
