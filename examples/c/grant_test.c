/*
 * grant_test: irefs passed as capabilities between C and Go domains
 * (docs/security.md), over the grant interface (interfaces/grant.if). The
 * Go tests in tests/interop run it against a real monitor:
 *
 *   grant_test inbox NAME        exports grant under NAME (public),
 *                                prints "inbox NAME", takes one give
 *                                message on the first connection, prints
 *                                "given WHAT"; then binds WHAT (pingpong)
 *                                by name ("by name: ..." with the
 *                                result), by the iref without its token
 *                                ("by token-less iref: ...") and by the
 *                                iref given ("by iref: echo 41 -> V")
 *   grant_test give INBOX NAME   exports pingpong under NAME privately,
 *                                connects to the grant service INBOX and
 *                                gives it NAME's iref, prints "gave NAME";
 *                                then answers the echo calls of the
 *                                connections to NAME (v+1) until its stdin
 *                                closes
 *   grant_test adopt INBOX       listeners as capabilities: exports grant
 *                                under INBOX, takes one give message,
 *                                adopts the export whose hand-over grant
 *                                it carries (pingpong), prints "adopted
 *                                WHAT as NAME", tries the grant again
 *                                ("again: ..."), then answers the echo
 *                                calls of the adopted export's
 *                                connections (v+1) until stdin closes
 *   grant_test handover INBOX NAME
 *                                exports pingpong under NAME, hands it
 *                                over, gives the grant to the grant
 *                                service INBOX, prints "handed over
 *                                NAME" and what its own accept then says
 *                                ("accept: ..."), and waits for stdin to
 *                                close
 *
 * The monitor directory comes from $CHANOS_DIR as usual. Exit status 0 on
 * success; on failure 1, with the reason on stderr.
 */
#include <chanos.h>

#include "grant.h"
#include "pingpong.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALL_MS 10000

static uint8_t buf[GRANT_MAX_FRAME_SIZE + PINGPONG_ECHO_CALL_MAX_FRAME_SIZE];
static struct pollfd in = { STDIN_FILENO, POLLIN, 0 };

/* stdin_closed reports whether stdin has reached its end (give's cue to
 * stop). */
static bool stdin_closed(void)
{
    return poll(&in, 1, 0) > 0;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "grant_test: %s: %s (%d)\n", what, chanos_strerror(rc),
            rc);
    return 1;
}

/* echo calls echo(v) on c and stores the answer in *out. */
static int echo(chanos_conn *c, uint64_t v, uint64_t *out)
{
    struct pingpong_echo_call call = { v };
    struct pingpong_echo_reply r;
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, buf, sizeof buf, NULL, 0);
    if ((rc = pingpong_echo_call_encode(&call, &b)) != 0 ||
        (rc = chanos_conn_call(c, b.data, b.len, CALL_MS, &f, NULL, NULL)) != 0 ||
        (rc = pingpong_echo_reply_decode(&r, f.data, f.len, NULL, 0)) != 0)
        return rc;
    *out = r.result;
    return 0;
}

/* receive_give takes one give message on the first connection to l. */
static int receive_give(chanos_listener *l, char *what, struct chanos_iref *ref)
{
    struct grant_give g;
    chanos_conn *from;
    struct chanos_frame f;
    int rc;

    if ((rc = chanos_accept(l, 20000, &from)) != 0)
        return rc;
    rc = chanos_conn_recv(from, 20000, &f);
    if (rc == 0 && (f.kind != CHANOS_KIND_MESSAGE || f.hdr.msg != GRANT_MSG_GIVE))
        rc = CHANOS_ERR_UNKNOWN_MESSAGE;
    if (rc == 0)
        rc = grant_give_decode(&g, f.data, f.len, NULL, 0);
    if (rc == 0) {
        /* the views point into the ring: copy them out */
        memcpy(what, g.what.ptr, g.what.len);
        what[g.what.len] = '\0';
        *ref = g.ref;
    }
    chanos_conn_close(from);
    return rc;
}

static int inbox(chanos_domain *d, const char *name)
{
    struct chanos_iref ref, stripped;
    char what[GRANT_GIVE_WHAT_MAX + 1];
    chanos_listener *l;
    chanos_conn *c;
    uint64_t v;
    int rc;

    rc = chanos_export(d, name, "grant", GRANT_MAX_FRAME_SIZE, &l);
    if (rc != 0)
        return fail("export the inbox", rc);
    printf("inbox %s\n", name);
    fflush(stdout);
    if ((rc = receive_give(l, what, &ref)) != 0)
        return fail("receive give", rc);
    printf("given %s\n", what);

    rc = chanos_connect(d, what, "pingpong", PINGPONG_MAX_FRAME_SIZE, CALL_MS, &c);
    if (rc == 0)
        chanos_conn_close(c);
    printf("by name: %s\n", rc == 0 ? "connected" : chanos_strerror(rc));
    stripped = ref;
    memset(stripped.token, 0, sizeof stripped.token);
    rc = chanos_connect_ref(d, &stripped, "pingpong", PINGPONG_MAX_FRAME_SIZE,
                            CALL_MS, &c);
    if (rc == 0)
        chanos_conn_close(c);
    printf("by token-less iref: %s\n",
           rc == 0 ? "connected" : chanos_strerror(rc));
    rc = chanos_connect_ref(d, &ref, "pingpong", PINGPONG_MAX_FRAME_SIZE,
                            CALL_MS, &c);
    if (rc != 0)
        return fail("connect by the iref given", rc);
    rc = echo(c, 41, &v);
    chanos_conn_close(c);
    if (rc != 0)
        return fail("echo", rc);
    printf("by iref: echo 41 -> %" PRIu64 "\n", v);
    return chanos_listener_close(l) == 0 ? 0 : 1;
}

/* serve_echo answers the echo calls on c until it ends, or stdin does. */
static void serve_echo(chanos_conn *c)
{
    struct pingpong_echo_call call;
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    for (;;) {
        struct pingpong_echo_reply r;

        rc = chanos_conn_recv(c, 100, &f);
        if (rc == CHANOS_ERR_TIMEDOUT && !stdin_closed())
            continue;
        if (rc != 0)
            return;

        if (f.kind != CHANOS_KIND_CALL || f.hdr.msg != PINGPONG_MSG_ECHO ||
            pingpong_echo_call_decode(&call, f.data, f.len, NULL, 0) != 0)
            continue;
        r.result = call.val + 1;
        chanos_buf_init(&b, buf, sizeof buf, NULL, 0);
        if (pingpong_echo_reply_encode(&r, &b) != 0 ||
            chanos_conn_reply(c, &f, b.data, b.len, CALL_MS) != 0)
            return;
    }
}

/* serve_until_stdin answers the echo calls of l's connections until
 * stdin closes (POLLHUP). */
static int serve_until_stdin(chanos_listener *l)
{
    for (;;) {
        chanos_conn *s;
        int rc = chanos_accept(l, 50, &s);

        if (rc == 0) {
            serve_echo(s);
            chanos_conn_close(s);
        } else if (rc != CHANOS_ERR_TIMEDOUT) {
            return fail("accept", rc);
        }
        if (stdin_closed())
            return 0;
    }
}

/* send_give connects to the grant service to and gives it ref as what. */
static int send_give(chanos_domain *d, const char *to, const char *what,
                     const struct chanos_iref *ref)
{
    struct grant_give g = { .what = chanos_cstr(what), .ref = *ref };
    chanos_conn *c;
    struct chanos_buf b;
    int rc = chanos_connect(d, to, "grant", GRANT_MAX_FRAME_SIZE, CALL_MS, &c);

    if (rc != 0)
        return fail("connect to the inbox", rc);
    chanos_buf_init(&b, buf, sizeof buf, NULL, 0);
    if ((rc = grant_give_encode(&g, &b)) == 0)
        rc = chanos_conn_send(c, b.data, b.len, CALL_MS);
    chanos_conn_close(c);
    return rc != 0 ? fail("give", rc) : 0;
}

static int give(chanos_domain *d, const char *to, const char *name)
{
    struct chanos_export_opts eo = { CHANOS_EXPORT_PRIVATE, NULL, 0, NULL, 0 };
    struct chanos_iref ref;
    chanos_listener *l;
    int rc;

    rc = chanos_export_with(d, name, "pingpong", PINGPONG_MAX_FRAME_SIZE, &eo,
                            &l);
    if (rc != 0)
        return fail("export privately", rc);
    chanos_listener_ref(l, &ref);
    if (send_give(d, to, name, &ref) != 0)
        return 1;
    printf("gave %s\n", name);
    fflush(stdout);
    rc = serve_until_stdin(l);
    return chanos_listener_close(l) == 0 ? rc : 1;
}

static int adopt(chanos_domain *d, const char *name)
{
    char what[GRANT_GIVE_WHAT_MAX + 1];
    struct chanos_iref ref;
    chanos_listener *l, *adopted, *again;
    int rc, status;

    rc = chanos_export(d, name, "grant", GRANT_MAX_FRAME_SIZE, &l);
    if (rc != 0)
        return fail("export the inbox", rc);
    printf("inbox %s\n", name);
    fflush(stdout);
    if ((rc = receive_give(l, what, &ref)) != 0)
        return fail("receive give", rc);
    chanos_listener_close(l);
    rc = chanos_adopt(d, &ref, &pingpong_interface, &adopted);
    if (rc != 0)
        return fail("adopt", rc);
    printf("adopted %s as %s\n", what, chanos_listener_name(adopted));
    rc = chanos_adopt(d, &ref, &pingpong_interface, &again);
    if (rc == 0)
        chanos_listener_close(again);
    printf("again: %s\n", rc == 0 ? "adopted" : chanos_strerror(rc));
    fflush(stdout);
    status = serve_until_stdin(adopted);
    return chanos_listener_close(adopted) == 0 ? status : 1;
}

static int handover(chanos_domain *d, const char *to, const char *name)
{
    struct chanos_iref grant;
    chanos_listener *l;
    chanos_conn *c;
    int rc;

    rc = chanos_export_iface(d, name, &pingpong_interface, NULL, &l);
    if (rc != 0)
        return fail("export", rc);
    rc = chanos_listener_hand_over(l, &grant);
    if (rc != 0)
        return fail("hand over", rc);
    if (send_give(d, to, name, &grant) != 0)
        return 1;
    printf("handed over %s\n", name);
    rc = chanos_accept(l, 0, &c);
    if (rc == 0)
        chanos_conn_close(c);
    printf("accept: %s\n", rc == 0 ? "a connection" : chanos_strerror(rc));
    fflush(stdout);
    while (!stdin_closed())
        (void)chanos_domain_poll(d, 50);
    return chanos_listener_close(l) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts jo = { 0 };
    chanos_domain *d;
    int rc, status;

    if (argc < 3 ||
        (strcmp(argv[1], "inbox") != 0 && strcmp(argv[1], "adopt") != 0 &&
         ((strcmp(argv[1], "give") != 0 && strcmp(argv[1], "handover") != 0) ||
          argc < 4))) {
        fprintf(stderr,
                "usage: %s inbox NAME | give INBOX NAME | adopt INBOX | "
                "handover INBOX NAME\n",
                argv[0]);
        return 2;
    }
    jo.program = "grant_test (C)";
    rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    if (strcmp(argv[1], "inbox") == 0)
        status = inbox(d, argv[2]);
    else if (strcmp(argv[1], "adopt") == 0)
        status = adopt(d, argv[2]);
    else if (strcmp(argv[1], "handover") == 0)
        status = handover(d, argv[2], argv[3]);
    else
        status = give(d, argv[2], argv[3]);
    fflush(stdout);
    chanos_domain_close(d);
    return status;
}
