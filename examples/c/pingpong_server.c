/*
 * pingpong_server: a C domain that exports the pingpong interface under a
 * name and serves it, as the Go examples/pingpong/server does: it answers
 * each ping with a pong, echo with its argument and bounce with its
 * payload. One thread serves every connection: it spins over them for a
 * while after the last frame, then sleeps in ppoll(2).
 *
 *   pingpong_server [-name NAME] [-no-reply-to V] [-spin-us US]
 *                   [-private] [-allow-program P]... [-allow-uid U]...
 *                   [-print-ref]
 *
 * With -no-reply-to V an echo of V is never answered (for tests of a
 * server killed in the middle of a call); it prints "unanswered echo V"
 * when one arrives, so that such a test knows the call has reached it.
 * -spin-us sets the spin window (default CHANOS_UMP_DEFAULT_SPIN_NS,
 * 40 µs, as a connection's own receive; 0: sleep at once). The monitor
 * directory comes from $CHANOS_DIR as usual. It prints "serving NAME"
 * once exported, and stops on SIGINT or SIGTERM.
 *
 * Who may bind (docs/security.md): -private refuses binds by name, so only
 * a holder of the export's iref binds (chanos_connect_ref); -allow-program
 * and -allow-uid (each up to 8 times) admit only the domains of those
 * programs or uids. -print-ref prints "iref REF" (chanos_iref_format)
 * after the serving line: the capability, for a test to hand on.
 *
 * It serves every connection on one thread with chanos_serve_export,
 * which spins over them for the spin window after the last frame (a ping
 * that comes within it is answered without a wake-up), then sleeps in
 * ppoll(2) until a connection, the monitor's socket or a signal wakes it.
 * The signals are blocked except while it waits, so one that comes while
 * a frame is served still ends the wait that follows.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* sigaction, sigprocmask */
#endif

#include <chanos.h>

#include "pingpong.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static bool have_no_reply;
static uint64_t no_reply_to;

/* The handlers, which pingpong_dispatch calls (generated from
 * pingpong.if): each ping is answered by a pong, echo and bounce return
 * their argument. */
static int on_ping(void *ctx, chanos_conn *c, const struct pingpong_ping *m)
{
    struct pingpong_pong p = { m->client_id, m->msg_id };

    (void)ctx;
    return pingpong_pong_send(c, &p, -1);
}

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx;
    (void)c;
    if (have_no_reply && in->val == no_reply_to) {
        printf("unanswered echo %" PRIu64 "\n", no_reply_to);
        fflush(stdout);
        return CHANOS_SERVE_DEFER;
    }
    out->result = in->val;
    return 0;
}

/* the payload is a view into the ring: the reply is encoded before the
 * next receive */
static int on_bounce(void *ctx, chanos_conn *c,
                     const struct pingpong_bounce_call *in,
                     struct pingpong_bounce_reply *out)
{
    (void)ctx;
    (void)c;
    out->reply = in->payload;
    return 0;
}

/* data has no handler: the server is a sink for streaming */
static const struct pingpong_server_ops ops = {
    .ping = on_ping, .echo = on_echo, .bounce = on_bounce,
};

/* on_monitor reports the loss of the monitor and the rejoin. */
static void on_monitor(void *arg, int event, int err)
{
    chanos_domain **d = arg;

    if (event == CHANOS_MONITOR_LOST)
        printf("lost the monitor; waiting for a new one\n");
    else if (err != 0)
        printf("rejoined the monitor (domain %" PRIu64 "), but: %s\n",
               chanos_domain_id(*d), chanos_strerror(err));
    else
        printf("rejoined the monitor (domain %" PRIu64 ")\n",
               chanos_domain_id(*d));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *name = "pingsvc";
    int64_t spin_ns = CHANOS_UMP_DEFAULT_SPIN_NS;
    const char *programs[8];
    uint32_t uids[8];
    struct chanos_export_opts eo = { 0, uids, 0, programs, 0 };
    bool print_ref = false;
    struct chanos_serve_opts so;
    chanos_listener *l;
    chanos_domain *d;
    struct chanos_join_opts jo = { 0 };
    struct sigaction sa;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "-no-reply-to") == 0 && i + 1 < argc) {
            have_no_reply = true;
            no_reply_to = strtoull(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "-spin-us") == 0 && i + 1 < argc) {
            long us = strtol(argv[++i], NULL, 10);

            spin_ns = us <= 0 ? 0 : us > 1000000 ? 1000000000 : us * 1000;
        } else if (strcmp(argv[i], "-private") == 0) {
            eo.flags |= CHANOS_EXPORT_PRIVATE;
        } else if (strcmp(argv[i], "-allow-program") == 0 && i + 1 < argc &&
                   eo.nprograms < 8) {
            programs[eo.nprograms++] = argv[++i];
        } else if (strcmp(argv[i], "-allow-uid") == 0 && i + 1 < argc &&
                   eo.nuids < 8) {
            uids[eo.nuids++] = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-print-ref") == 0) {
            print_ref = true;
        } else {
            fprintf(stderr,
                    "usage: %s [-name NAME] [-no-reply-to V] [-spin-us US] "
                    "[-private] [-allow-program P]... [-allow-uid U]... "
                    "[-print-ref]\n",
                    argv[0]);
            return 2;
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* The signals are blocked except while chanos_serve_export waits (or
     * looks, every millisecond while busy), so one that comes while a
     * frame is served still ends the wait that follows, rather than being
     * missed until the next frame. */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &waitmask);

    jo.program = "pingpong_server (C)";
    jo.on_monitor = on_monitor;
    jo.on_monitor_arg = &d;
    rc = chanos_join(&d, &jo);
    if (rc != 0) {
        fprintf(stderr, "pingpong_server: join: %s\n", chanos_strerror(rc));
        return 1;
    }
    rc = chanos_export_iface(d, name, &pingpong_interface, &eo, &l);
    if (rc != 0) {
        fprintf(stderr, "pingpong_server: export %s: %s\n", name,
                chanos_strerror(rc));
        chanos_domain_close(d);
        return 1;
    }
    printf("serving %s (domain %" PRIu64 ")\n", name, chanos_domain_id(d));
    if (print_ref) {
        struct chanos_iref ref;
        char text[CHANOS_IREF_TEXT_LEN + 1];

        chanos_listener_ref(l, &ref);
        chanos_iref_format(&ref, text, sizeof text);
        printf("iref %s\n", text);
    }
    fflush(stdout);

    so.spin_ns = spin_ns;
    so.stop = &stopping;
    so.sigmask = &waitmask;
    rc = chanos_serve_export(d, l, pingpong_dispatch, &ops, NULL, &so);
    if (rc != 0)
        fprintf(stderr, "pingpong_server: serve: %s\n", chanos_strerror(rc));
    rc = chanos_listener_close(l);
    if (rc != 0)
        fprintf(stderr, "pingpong_server: withdraw: %s\n", chanos_strerror(rc));
    chanos_domain_close(d);
    return 0;
}
