/*
 * pingpong_server: a C domain that exports the pingpong interface under a
 * name and serves it, as the Go examples/pingpong/server does: it answers
 * each ping with a pong, echo with its argument and bounce with its
 * payload. One thread serves every connection with ppoll(2).
 *
 *   pingpong_server [-name NAME] [-no-reply-to V]
 *
 * With -no-reply-to V an echo of V is never answered (for tests of a
 * server killed in the middle of a call). The monitor directory comes from
 * $CHANOS_DIR as usual. It prints "serving NAME" once exported, and stops
 * on SIGINT or SIGTERM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* ppoll */
#endif

#include <chanos.h>

#include "pingpong.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONNS 64

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

/* reply buffer: large enough for a bounce reply */
static uint8_t out[PINGPONG_BOUNCE_REPLY_MAX_FRAME_SIZE];

static bool have_no_reply;
static uint64_t no_reply_to;

/* serve_frame handles one frame; a negative result ends the connection. */
static int serve_frame(chanos_conn *c, const struct chanos_frame *f)
{
    struct pingpong_msg m;
    struct chanos_buf b;
    int rc;

    if (f->kind == CHANOS_KIND_CANCEL)
        return 0; /* every call is answered at once: nothing to stop */
    rc = pingpong_decode(&m, f->data, f->len, NULL, 0);
    if (rc != 0) {
        if (f->kind == CHANOS_KIND_CALL)
            return chanos_conn_reply_error(c, f, 1, chanos_strerror(rc), -1);
        return rc;
    }
    chanos_buf_init(&b, out, sizeof out, NULL, 0);
    switch (m.msg) {
    case PINGPONG_MSG_PING: {
        struct pingpong_pong p = { m.u.ping.client_id, m.u.ping.msg_id };

        rc = pingpong_pong_encode(&p, &b);
        return rc != 0 ? rc : chanos_conn_send(c, b.data, b.len, -1);
    }
    case PINGPONG_MSG_DATA:
        return 0; /* a sink for streaming */
    case PINGPONG_MSG_ECHO: {
        struct pingpong_echo_reply r = { m.u.echo_call.val };

        if (have_no_reply && m.u.echo_call.val == no_reply_to)
            return 0;
        rc = pingpong_echo_reply_encode(&r, &b);
        return rc != 0 ? rc : chanos_conn_reply(c, f, b.data, b.len, -1);
    }
    case PINGPONG_MSG_BOUNCE: {
        /* the payload view points into the ring: encode before the next
         * receive */
        struct pingpong_bounce_reply r = { m.u.bounce_call.payload };

        rc = pingpong_bounce_reply_encode(&r, &b);
        return rc != 0 ? rc : chanos_conn_reply(c, f, b.data, b.len, -1);
    }
    }
    if (f->kind == CHANOS_KIND_CALL)
        return chanos_conn_reply_error(c, f, 1, "unsupported", -1);
    return 0;
}

int main(int argc, char **argv)
{
    const char *name = "pingsvc";
    chanos_conn *conns[MAX_CONNS];
    struct pollfd pfd[MAX_CONNS + 1];
    size_t nconns = 0;
    chanos_domain *d;
    chanos_listener *l;
    struct chanos_join_opts jo = { 0 };
    struct sigaction sa;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "-no-reply-to") == 0 && i + 1 < argc) {
            have_no_reply = true;
            no_reply_to = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [-name NAME] [-no-reply-to V]\n",
                    argv[0]);
            return 2;
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* The signals are blocked except while ppoll waits, so one that comes
     * while a connection is being served still ends the wait that
     * follows, rather than being missed until the next message. */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &waitmask);

    jo.program = "pingpong_server (C)";
    rc = chanos_join(&d, &jo);
    if (rc != 0) {
        fprintf(stderr, "pingpong_server: join: %s\n", chanos_strerror(rc));
        return 1;
    }
    rc = chanos_export(d, name, "pingpong", PINGPONG_MAX_FRAME_SIZE, &l);
    if (rc != 0) {
        fprintf(stderr, "pingpong_server: export %s: %s\n", name,
                chanos_strerror(rc));
        chanos_domain_close(d);
        return 1;
    }
    printf("serving %s (domain %" PRIu64 ")\n", name, chanos_domain_id(d));
    fflush(stdout);

    while (!stopping) {
        /* New connections first, whether or not the monitor's socket is
         * readable: one may have arrived while export waited for its
         * reply, and libchanos holds it for chanos_accept. */
        chanos_conn *nc;

        while ((rc = chanos_accept(l, 0, &nc)) == 0) {
            if (nconns == MAX_CONNS) {
                chanos_conn_close(nc);
                continue;
            }
            conns[nconns++] = nc;
        }
        if (rc != CHANOS_ERR_TIMEDOUT) {
            fprintf(stderr, "pingpong_server: accept: %s\n",
                    chanos_strerror(rc));
            break;
        }
        /* every connection, drained without waiting */
        for (size_t i = 0; i < nconns;) {
            struct chanos_frame f;

            while ((rc = chanos_conn_recv(conns[i], 0, &f)) == 0) {
                rc = serve_frame(conns[i], &f);
                if (rc != 0)
                    break;
            }
            if (rc == CHANOS_ERR_AGAIN) {
                i++;
                continue;
            }
            if (rc != CHANOS_ERR_CLOSED)
                fprintf(stderr, "pingpong_server: connection ended: %s\n",
                        chanos_strerror(rc));
            chanos_conn_close(conns[i]);
            conns[i] = conns[--nconns];
        }
        /* Every connection is now announced as sleeping (its receive
         * returned AGAIN), so its fd wakes us for the next message. */
        pfd[0].fd = chanos_domain_fd(d);
        pfd[0].events = POLLIN;
        for (size_t i = 0; i < nconns; i++) {
            pfd[i + 1].fd = chanos_ump_fd(chanos_conn_ump(conns[i]));
            pfd[i + 1].events = POLLIN;
        }
        if (ppoll(pfd, nconns + 1, NULL, &waitmask) < 0 && errno != EINTR) {
            perror("pingpong_server: ppoll");
            break;
        }
    }
    for (size_t i = 0; i < nconns; i++)
        chanos_conn_close(conns[i]);
    rc = chanos_listener_close(l);
    if (rc != 0)
        fprintf(stderr, "pingpong_server: withdraw: %s\n", chanos_strerror(rc));
    chanos_domain_close(d);
    return 0;
}
