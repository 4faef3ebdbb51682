/*
 * serve_export.c: chanos_server, the exports of one domain served on one
 * thread, each through its own dispatch (or the hooks of a server inside
 * libchanos, chanos_server_add_hooked_: chanos_server_add_health's), and
 * chanos_serve_export, one export served so. It is apart from serve.c,
 * which the generated code links with, because it needs the domain
 * (src/domain.c) as well.
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

/* One export a server serves. */
struct export {
    chanos_listener *l;
    chanos_dispatch_fn dispatch;
    const void *ops;
    void *ctx;
    struct chanos_serve_hooks_ hk; /* hk.turn NULL: none */
};

/* A connection and the export it came through. */
struct served {
    chanos_conn *c;
    size_t ex;
};

struct chanos_server {
    chanos_domain *d;
    struct export *ex;
    size_t nex, excap;
    struct served *conns;
    size_t nconns, cap;
    /* room for the monitor, every connection and each export's hooks' fd */
    struct pollfd *pfd;
    size_t npfd;
    int lost; /* the last accept found the monitor lost */
    int bound_ms; /* the hooks' last bound on a sleep; -1: none */
    bool running;
};

int chanos_server_new(chanos_domain *d, chanos_server **out)
{
    chanos_server *s;

    *out = NULL;
    if (d == NULL)
        return -EINVAL;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->d = d;
    s->bound_ms = -1;
    *out = s;
    return 0;
}

void chanos_server_free(chanos_server *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nex; i++)
        if (s->ex[i].hk.release != NULL)
            s->ex[i].hk.release(s->ex[i].hk.arg);
    free(s->ex);
    free(s->conns);
    free(s->pfd);
    free(s);
}

int chanos_server_add_hooked_(chanos_server *s, chanos_listener *l,
                              chanos_dispatch_fn dispatch, const void *ops,
                              void *ctx, const struct chanos_serve_hooks_ *hk)
{
    struct export *e;

    if (s == NULL || l == NULL || dispatch == NULL ||
        chanos_listener_domain_(l) != s->d)
        return -EINVAL;
    if (s->running)
        return CHANOS_ERR_BUSY;
    for (size_t i = 0; i < s->nex; i++)
        if (s->ex[i].l == l)
            return -EEXIST;
    if (s->nex == s->excap) {
        size_t cap = s->excap ? 2 * s->excap : 4;

        e = realloc(s->ex, cap * sizeof *e);
        if (e == NULL)
            return -ENOMEM;
        s->ex = e;
        s->excap = cap;
    }
    e = &s->ex[s->nex++];
    e->l = l;
    e->dispatch = dispatch;
    e->ops = ops;
    e->ctx = ctx;
    if (hk != NULL)
        e->hk = *hk;
    else
        e->hk = (struct chanos_serve_hooks_){ -1, NULL, NULL, NULL, NULL };
    return 0;
}

int chanos_server_add(chanos_server *s, chanos_listener *l,
                      chanos_dispatch_fn dispatch, const void *ops, void *ctx)
{
    return chanos_server_add_hooked_(s, l, dispatch, ops, ctx, NULL);
}

/* sleep_ms is the shorter of two bounds on a sleep in milliseconds, -1
 * being none. */
static int sleep_ms(int a, int b)
{
    if (a < 0)
        return b;
    return b < 0 || a < b ? a : b;
}

/* turn gives every export's hooks their turn after a round (woke: after
 * a sleep, or at the chores), and keeps the shortest bound they set. */
static void turn(chanos_server *s, bool woke)
{
    int bound = -1;

    for (size_t i = 0; i < s->nex; i++)
        if (s->ex[i].hk.turn != NULL)
            bound = sleep_ms(bound, s->ex[i].hk.turn(s->ex[i].hk.arg, woke));
    s->bound_ms = bound;
}

/* drop closes connection i, which ended, and forgets it. */
static void drop(chanos_server *s, size_t i)
{
    const struct export *e = &s->ex[s->conns[i].ex];

    if (e->hk.closing != NULL)
        e->hk.closing(e->hk.arg, s->conns[i].c);
    chanos_conn_close(s->conns[i].c);
    s->conns[i] = s->conns[--s->nconns];
}

/* add_conn serves nc, accepted through export ex, from now on: 0, or
 * -ENOMEM (nc closed). */
static int add_conn(chanos_server *s, chanos_conn *nc, size_t ex)
{
    if (s->nconns == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct served *conns = realloc(s->conns, cap * sizeof *conns);

        if (conns == NULL) {
            chanos_conn_close(nc);
            return -ENOMEM;
        }
        s->conns = conns;
        s->cap = cap;
    }
    s->conns[s->nconns].c = nc;
    s->conns[s->nconns++].ex = ex;
    return 0;
}

/* accept_all takes every connection the monitor has handed over, for
 * every export: 0, or why a listener failed. Called before every sleep,
 * whether or not the monitor's socket is readable: one may have arrived
 * while export waited for its reply, and libchanos holds it for
 * chanos_accept. */
static int accept_all(chanos_server *s)
{
    for (size_t i = 0; i < s->nex; i++) {
        chanos_conn *nc;
        int rc;

        while ((rc = chanos_accept(s->ex[i].l, 0, &nc)) == 0)
            if ((rc = add_conn(s, nc, i)) != 0)
                return rc;
        /* A lost monitor is said once, to whichever listener asks
         * first; a domain that rejoins then answers CHANOS_ERR_TIMEDOUT
         * until it has, and its connections go on meanwhile. Said twice
         * in a row, it is for good (the domain joined with
         * CHANOS_JOIN_NO_REJOIN), and serving ends. */
        if (rc == CHANOS_ERR_MONITOR_LOST && !s->lost) {
            s->lost = 1;
            continue;
        }
        if (rc == CHANOS_ERR_TIMEDOUT) {
            s->lost = 0;
            continue;
        }
        return rc;
    }
    return 0;
}

/*
 * serve_round gives every connection a turn of up to BATCH frames, each
 * through its export's dispatch, and returns how many it served.
 * Spinning (arm false), it receives as chanos_conn_spin_recv does. Before
 * a sleep (arm true), as chanos_conn_recv(c, 0, ...) does: a connection
 * that returns AGAIN is then armed, and its fd will wake ppoll for the
 * next frame; if any frame came meanwhile (a result above 0), the caller
 * must not sleep. A connection that ended is closed. seen is the loop's
 * last reading of the clock, before the round: a call's deadline counts
 * from it (chanos_conn_serve_recv_), early by at most the time the
 * round took to reach the call, as the call may have waited that long.
 */
static long serve_round(chanos_server *s, bool arm, int64_t seen)
{
    long served = 0;

    for (size_t i = 0; i < s->nconns;) {
        chanos_conn *c = s->conns[i].c;
        const struct export *e = &s->ex[s->conns[i].ex];
        struct chanos_frame f;
        int rc, n = 0;

        do {
            rc = chanos_conn_serve_recv_(c, !arm, seen, &f);
            if (rc != 0)
                break;
            served++;
            rc = chanos_serve_frame(c, &f, e->dispatch, e->ops, e->ctx);
        } while (rc == 0 && ++n < BATCH);
        if (rc == 0 || rc == CHANOS_ERR_AGAIN) {
            i++;
            continue;
        }
        drop(s, i);
    }
    return served;
}

/* wait_events waits in ppoll for a connection, the monitor, an export's hooks
 * or a signal (mask): 0, or -errno. */
static int wait_events(chanos_server *s, const sigset_t *mask)
{
    size_t need = 1 + s->nconns + s->nex, k = 0;
    int wait_ms;
    struct timespec ts, *tp = NULL;

    if (need > s->npfd) {
        struct pollfd *pfd = realloc(s->pfd, need * sizeof *pfd);

        if (pfd == NULL)
            return -ENOMEM;
        s->pfd = pfd;
        s->npfd = need;
    }
    s->pfd[k].fd = chanos_domain_fd(s->d);
    s->pfd[k++].events = POLLIN;
    for (size_t i = 0; i < s->nconns; i++) {
        s->pfd[k].fd = chanos_conn_fd(s->conns[i].c);
        s->pfd[k++].events = POLLIN;
    }
    for (size_t i = 0; i < s->nex; i++) {
        /* a negative fd is skipped by ppoll: an export without hooks */
        s->pfd[k].fd = s->ex[i].hk.fd;
        s->pfd[k++].events = POLLIN;
    }
    /* A rejoin attempt that the new monitor leaves unanswered fails at
     * its deadline, in the next call on the domain, and the next attempt
     * waits on the domain's timer (a wait that doubles): wake for the
     * deadline, since the socket may never say a thing. */
    wait_ms = sleep_ms(chanos_domain_wait_ms_(s->d), s->bound_ms);
    if (wait_ms >= 0) {
        ts.tv_sec = wait_ms / 1000;
        ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
        tp = &ts;
    }
    if (ppoll(s->pfd, k, tp, mask) < 0 && errno != EINTR)
        return -errno;
    return 0;
}

/* run is chanos_server_run on s, which is marked running. */
static int run(chanos_server *s, const struct chanos_serve_opts *o)
{
    const sigset_t *mask = o->sigmask;
    int64_t spin_ns, last, chores, seen;
    int rc = 0;

    spin_ns = o->spin_ns < 0 ? CHANOS_UMP_DEFAULT_SPIN_NS : o->spin_ns;
    /* last: when a frame was last served (or the thread woke); the spin
     * window runs from there. chores: when to accept and take signals
     * next while busy. seen: the last reading of the clock, which the
     * next round's calls count their deadlines from. */
    last = now_ns();
    chores = last;
    seen = last;
    while (o->stop == NULL || !*o->stop) {
        int64_t t;

        if (serve_round(s, false, seen) > 0) {
            last = now_ns();
            t = last;
        } else {
            t = now_ns();
        }
        seen = t;
        turn(s, false);
        if (t >= chores) {
            /* a zero wait with the signals unblocked runs the handler of
             * any pending one */
            struct timespec zero = { 0, 0 };

            chores = t + CHORES_NS;
            if (mask != NULL)
                (void)ppoll(NULL, 0, &zero, mask);
            if ((o->stop != NULL && *o->stop) || (rc = accept_all(s)) != 0)
                break;
            /* an arming round notices clients that died without closing
             * (spin_recv does not look); the next spin round disarms */
            if (serve_round(s, true, seen) > 0)
                seen = last = now_ns();
            turn(s, true);
        }
        if (t - last < spin_ns) {
            cpu_relax();
            continue;
        }
        /* The window is over: accept, arm every connection (a frame that
         * came meanwhile is served, and then there is no sleep), then
         * sleep until a connection, the monitor or a signal wakes us. */
        if ((rc = accept_all(s)) != 0)
            break;
        if (serve_round(s, true, seen) > 0) {
            seen = last = now_ns();
            continue;
        }
        if ((rc = wait_events(s, mask)) != 0)
            break;
        seen = last = now_ns();
        turn(s, true);
    }
    while (s->nconns > 0)
        drop(s, s->nconns - 1);
    return rc;
}

int chanos_server_run(chanos_server *s, const struct chanos_serve_opts *o)
{
    static const struct chanos_serve_opts defaults = { -1, NULL, NULL };
    int rc;

    if (s == NULL)
        return -EINVAL;
    if (s->running)
        return CHANOS_ERR_BUSY;
    s->running = true;
    rc = run(s, o != NULL ? o : &defaults);
    s->running = false;
    return rc;
}

int chanos_serve_export(chanos_domain *d, chanos_listener *l,
                        chanos_dispatch_fn dispatch, const void *ops,
                        void *ctx, const struct chanos_serve_opts *o)
{
    chanos_server *s;
    int rc = chanos_server_new(d, &s);

    if (rc == 0)
        rc = chanos_server_add(s, l, dispatch, ops, ctx);
    if (rc == 0)
        rc = chanos_server_run(s, o);
    chanos_server_free(s);
    return rc;
}
