/*
 * serve_export.c: chanos_serve_export, every connection of an export
 * served on one thread, and the same loop with the hooks of a server
 * inside libchanos (chanos_serve_export_hooked_, for chanos_health_serve).
 * It is apart from serve.c, which the generated code links with, because
 * it needs the domain (src/domain.c) as well.
 */
#include "chanos.h"
#include "internal.h"
#include "spin.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

/* Frames served from one connection before the others get their turn. */
#define BATCH 64
/* While busy: how often to accept and to take signals (1 ms). */
#define CHORES_NS 1000000

struct server {
    chanos_domain *d;
    chanos_listener *l;
    chanos_dispatch_fn dispatch;
    const void *ops;
    void *ctx;
    chanos_conn **conns;
    /* room for the monitor, every connection and the hooks' fd */
    struct pollfd *pfd;
    size_t nconns, cap;
    int lost; /* the last accept found the monitor lost */
    const struct chanos_serve_hooks_ *hk; /* NULL: none */
    int bound_ms; /* the hooks' last bound on a sleep; -1: none */
};

/* turn gives the hooks their turn after a round (woke: after a sleep, or
 * at the chores). */
static void turn(struct server *s, bool woke)
{
    if (s->hk != NULL)
        s->bound_ms = s->hk->turn(s->hk->arg, woke);
}

/* drop closes connection i, which ended, and forgets it. */
static void drop(struct server *s, size_t i)
{
    if (s->hk != NULL)
        s->hk->closing(s->hk->arg, s->conns[i]);
    chanos_conn_close(s->conns[i]);
    s->conns[i] = s->conns[--s->nconns];
}

/* accept_all takes every connection the monitor has handed over: 0, or
 * why the listener failed. Called before every sleep, whether or not the
 * monitor's socket is readable: one may have arrived while export waited
 * for its reply, and libchanos holds it for chanos_accept. */
static int accept_all(struct server *s)
{
    chanos_conn *nc;
    int rc;

    while ((rc = chanos_accept(s->l, 0, &nc)) == 0) {
        if (s->nconns == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            chanos_conn **conns = realloc(s->conns, cap * sizeof *conns);
            struct pollfd *pfd;

            if (conns == NULL) {
                chanos_conn_close(nc);
                return -ENOMEM;
            }
            s->conns = conns;
            pfd = realloc(s->pfd, (cap + 2) * sizeof *pfd);
            if (pfd == NULL) {
                chanos_conn_close(nc);
                return -ENOMEM;
            }
            s->pfd = pfd;
            s->cap = cap;
        }
        s->conns[s->nconns++] = nc;
    }
    /* A lost monitor is said once; a domain that rejoins then answers
     * CHANOS_ERR_TIMEDOUT until it has, and its connections go on
     * meanwhile. Said twice in a row, it is for good (the domain joined
     * with CHANOS_JOIN_NO_REJOIN), and serving ends. */
    if (rc == CHANOS_ERR_MONITOR_LOST && !s->lost) {
        s->lost = 1;
        return 0;
    }
    if (rc == CHANOS_ERR_TIMEDOUT) {
        s->lost = 0;
        return 0;
    }
    return rc;
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
            rc = chanos_serve_frame(c, &f, s->dispatch, s->ops, s->ctx);
        } while (rc == 0 && ++n < BATCH);
        if (rc == 0 || rc == CHANOS_ERR_AGAIN) {
            i++;
            continue;
        }
        drop(s, i);
    }
    return served;
}

int chanos_serve_export(chanos_domain *d, chanos_listener *l,
                        chanos_dispatch_fn dispatch, const void *ops,
                        void *ctx, const struct chanos_serve_opts *o)
{
    return chanos_serve_export_hooked_(d, l, dispatch, ops, ctx, o, NULL);
}

/* sleep_ms is the shorter of two bounds on a sleep in milliseconds, -1
 * being none. */
static int sleep_ms(int a, int b)
{
    if (a < 0)
        return b;
    return b < 0 || a < b ? a : b;
}

int chanos_serve_export_hooked_(chanos_domain *d, chanos_listener *l,
                                chanos_dispatch_fn dispatch, const void *ops,
                                void *ctx, const struct chanos_serve_opts *o,
                                const struct chanos_serve_hooks_ *hk)
{
    static const struct chanos_serve_opts defaults = { -1, NULL, NULL };
    struct server s = { d, l, dispatch, ops, ctx, NULL, NULL, 0, 0, 0, hk, -1 };
    const sigset_t *mask;
    int64_t spin_ns, last, chores;
    int rc = 0;

    if (o == NULL)
        o = &defaults;
    spin_ns = o->spin_ns < 0 ? CHANOS_UMP_DEFAULT_SPIN_NS : o->spin_ns;
    mask = o->sigmask;
    /* last: when a frame was last served (or the thread woke); the spin
     * window runs from there. chores: when to accept and take signals
     * next while busy. */
    last = now_ns();
    chores = last;
    while (o->stop == NULL || !*o->stop) {
        int64_t t;

        if (serve_round(&s, false) > 0) {
            last = now_ns();
            t = last;
        } else {
            t = now_ns();
        }
        turn(&s, false);
        if (t >= chores) {
            /* a zero wait with the signals unblocked runs the handler of
             * any pending one */
            struct timespec zero = { 0, 0 };

            chores = t + CHORES_NS;
            if (mask != NULL)
                (void)ppoll(NULL, 0, &zero, mask);
            if ((o->stop != NULL && *o->stop) || (rc = accept_all(&s)) != 0)
                break;
            /* an arming round notices clients that died without closing
             * (spin_recv does not look); the next spin round disarms */
            if (serve_round(&s, true) > 0)
                last = now_ns();
            turn(&s, true);
        }
        if (t - last < spin_ns) {
            cpu_relax();
            continue;
        }
        /* The window is over: accept, arm every connection (a frame that
         * came meanwhile is served, and then there is no sleep), then
         * sleep until a connection, the monitor or a signal wakes us. */
        if ((rc = accept_all(&s)) != 0)
            break;
        if (serve_round(&s, true) > 0) {
            last = now_ns();
            continue;
        }
        if (s.pfd == NULL && (s.pfd = malloc(2 * sizeof *s.pfd)) == NULL) {
            rc = -ENOMEM;
            break;
        }
        s.pfd[0].fd = chanos_domain_fd(d);
        s.pfd[0].events = POLLIN;
        for (size_t i = 0; i < s.nconns; i++) {
            s.pfd[i + 1].fd = chanos_conn_fd(s.conns[i]);
            s.pfd[i + 1].events = POLLIN;
        }
        /* a negative fd is skipped by ppoll: no hooks, no slot */
        s.pfd[s.nconns + 1].fd = hk != NULL ? hk->fd : -1;
        s.pfd[s.nconns + 1].events = POLLIN;
        /* A rejoin attempt that the new monitor leaves unanswered fails at
         * its deadline, in the next call on the domain, and the next
         * attempt waits on the domain's timer (a wait that doubles): wake
         * for the deadline, since the socket may never say a thing. */
        {
            int wait_ms = sleep_ms(chanos_domain_wait_ms_(d), s.bound_ms);
            struct timespec ts, *tp = NULL;

            if (wait_ms >= 0) {
                ts.tv_sec = wait_ms / 1000;
                ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
                tp = &ts;
            }
            if (ppoll(s.pfd, s.nconns + 2, tp, mask) < 0 && errno != EINTR) {
                rc = -errno;
                break;
            }
        }
        last = now_ns();
        turn(&s, true);
    }
    while (s.nconns > 0)
        drop(&s, s.nconns - 1);
    free(s.conns);
    free(s.pfd);
    return rc;
}
