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
 * 20 µs, as a connection's own receive; 0: sleep at once). The monitor
 * directory comes from $CHANOS_DIR as usual. It prints "serving NAME"
 * once exported, and stops on SIGINT or SIGTERM.
 *
 * Who may bind (docs/security.md): -private refuses binds by name, so only
 * a holder of the export's iref binds (chanos_connect_ref); -allow-program
 * and -allow-uid (each up to 8 times) admit only the domains of those
 * programs or uids. -print-ref prints "iref REF" (chanos_iref_format)
 * after the serving line: the capability, for a test to hand on.
 *
 * Waiting, as chanos_ump_recv does for one connection: after the last
 * frame served, every connection is polled with chanos_conn_spin_recv,
 * which costs no system call and does not ask the peers to wake us, for
 * the spin window; a ping that comes within it is answered without a
 * wake-up (a round trip of well under a microsecond, rather than ten or
 * more through an eventfd). Then each connection is armed with
 * chanos_conn_recv(c, 0, ...) and the thread sleeps in ppoll until a
 * connection, the monitor's socket or a signal wakes it: idle, it uses no
 * CPU. While frames keep coming the window never ends, so new connections,
 * signals and clients that died without closing are also looked at every
 * CHORES_NS.
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
#include <time.h>

#define MAX_CONNS 64
/* Frames served from one connection before the others get their turn. */
#define BATCH 64
/* While busy: how often to accept and to take signals (1 ms). */
#define CHORES_NS 1000000

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

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* cpu_relax eases a spin loop (PAUSE on x86, YIELD on arm64). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

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

        if (have_no_reply && m.u.echo_call.val == no_reply_to) {
            printf("unanswered echo %" PRIu64 "\n", no_reply_to);
            fflush(stdout);
            return 0;
        }
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

/* The server's connections: one thread serves them all. */
struct server {
    chanos_listener *l;
    chanos_conn *conns[MAX_CONNS];
    size_t nconns;
};

/* accept_all takes every connection the monitor has handed over (false if
 * the listener failed). Called before every sleep, whether or not the
 * monitor's socket is readable: one may have arrived while export waited
 * for its reply, and libchanos holds it for chanos_accept. */
static bool accept_all(struct server *s)
{
    chanos_conn *nc;
    int rc;

    while ((rc = chanos_accept(s->l, 0, &nc)) == 0) {
        if (s->nconns == MAX_CONNS) {
            chanos_conn_close(nc);
            continue;
        }
        s->conns[s->nconns++] = nc;
    }
    /* A lost monitor is said once (on_monitor): the domain rejoins a new
     * one by itself, and the connections go on meanwhile. */
    if (rc != CHANOS_ERR_TIMEDOUT && rc != CHANOS_ERR_MONITOR_LOST) {
        fprintf(stderr, "pingpong_server: accept: %s\n", chanos_strerror(rc));
        return false;
    }
    return true;
}

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

/*
 * serve_round gives every connection a turn of up to BATCH frames and
 * returns how many it served. Spinning (arm false), it receives with
 * chanos_conn_spin_recv. Before a sleep (arm true), with
 * chanos_conn_recv(c, 0, ...): a connection that returns AGAIN is then
 * armed, and its fd will wake ppoll for the next frame; if any frame came
 * meanwhile (a result above 0), the caller must not sleep. A connection
 * that ended is closed.
 */
static long serve_round(struct server *s, bool arm)
{
    long served = 0;

    for (size_t i = 0; i < s->nconns;) {
        chanos_conn *c = s->conns[i];
        struct chanos_frame f;
        int rc, n = 0;

        do {
            rc = arm ? chanos_conn_recv(c, 0, &f) : chanos_conn_spin_recv(c, &f);
            if (rc != 0)
                break;
            served++;
            rc = serve_frame(c, &f);
        } while (rc == 0 && ++n < BATCH);
        if (rc == 0 || rc == CHANOS_ERR_AGAIN) {
            i++;
            continue;
        }
        if (rc != CHANOS_ERR_CLOSED)
            fprintf(stderr, "pingpong_server: connection ended: %s\n",
                    chanos_strerror(rc));
        chanos_conn_close(c);
        s->conns[i] = s->conns[--s->nconns];
    }
    return served;
}

int main(int argc, char **argv)
{
    const char *name = "pingsvc";
    int64_t spin_ns = CHANOS_UMP_DEFAULT_SPIN_NS;
    const char *programs[8];
    uint32_t uids[8];
    struct chanos_export_opts eo = { 0, uids, 0, programs, 0 };
    bool print_ref = false;
    struct pollfd pfd[MAX_CONNS + 1];
    struct server s = { 0 };
    chanos_domain *d;
    struct chanos_join_opts jo = { 0 };
    struct sigaction sa;
    int64_t last, chores;
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
    /* The signals are blocked except while ppoll waits (or looks, every
     * CHORES_NS while busy), so one that comes while a connection is
     * being served still ends the wait that follows, rather than being
     * missed until the next message. */
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
    rc = chanos_export_with(d, name, "pingpong", PINGPONG_MAX_FRAME_SIZE, &eo,
                            &s.l);
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

        chanos_listener_ref(s.l, &ref);
        chanos_iref_format(&ref, text, sizeof text);
        printf("iref %s\n", text);
    }
    fflush(stdout);

    /* last: when a frame was last served (or the thread woke); the spin
     * window runs from there. chores: when to accept and take signals
     * next while busy. */
    last = now_ns();
    chores = last;
    while (!stopping) {
        int64_t t;

        if (serve_round(&s, false) > 0) {
            last = now_ns();
            t = last;
        } else {
            t = now_ns();
        }
        if (t >= chores) {
            /* a zero wait with the signals unblocked runs the handler of
             * any pending one */
            struct timespec zero = { 0, 0 };

            chores = t + CHORES_NS;
            (void)ppoll(NULL, 0, &zero, &waitmask);
            if (stopping || !accept_all(&s))
                break;
            /* an arming round notices clients that died without closing
             * (spin_recv does not look); the next spin round disarms */
            if (serve_round(&s, true) > 0)
                last = now_ns();
        }
        if (t - last < spin_ns) {
            cpu_relax();
            continue;
        }
        /* The window is over: accept, arm every connection (a frame that
         * came meanwhile is served, and then there is no sleep), then
         * sleep until a connection, the monitor or a signal wakes us. */
        if (!accept_all(&s))
            break;
        if (serve_round(&s, true) > 0) {
            last = now_ns();
            continue;
        }
        pfd[0].fd = chanos_domain_fd(d);
        pfd[0].events = POLLIN;
        for (size_t i = 0; i < s.nconns; i++) {
            pfd[i + 1].fd = chanos_ump_fd(chanos_conn_ump(s.conns[i]));
            pfd[i + 1].events = POLLIN;
        }
        if (ppoll(pfd, s.nconns + 1, NULL, &waitmask) < 0 && errno != EINTR) {
            perror("pingpong_server: ppoll");
            break;
        }
        last = now_ns();
    }
    for (size_t i = 0; i < s.nconns; i++)
        chanos_conn_close(s.conns[i]);
    rc = chanos_listener_close(s.l);
    if (rc != 0)
        fprintf(stderr, "pingpong_server: withdraw: %s\n", chanos_strerror(rc));
    chanos_domain_close(d);
    return 0;
}
