/*
 * health.c: the statuses of a domain's services and the health service
 * that serves them (docs/health.md), the C counterpart of Go's
 * health.Statuses, over the code chanosc generates for
 * interfaces/health.if (<chanos/health.h>, built into libchanos).
 *
 * One mutex guards the table and every serving loop's watchers. A status
 * set on any thread marks the watchers of its service and wakes their
 * loop through an eventfd; the loop, on its own thread, sends them the
 * latest status (the turn of its chanos_server_add_hooked_ hooks),
 * without waiting for ring space: a watcher whose ring is full stays marked and is sent to
 * once its ring has room, so that no watcher holds up the setter, the
 * loop or the other watchers.
 */
#include "chanos.h"
#include "chanos/health.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

_Static_assert(CHANOS_HEALTH_UNKNOWN == HEALTH_SERVING_STATUS_UNKNOWN &&
                   CHANOS_HEALTH_SERVING == HEALTH_SERVING_STATUS_SERVING &&
                   CHANOS_HEALTH_NOT_SERVING ==
                       HEALTH_SERVING_STATUS_NOT_SERVING &&
                   CHANOS_HEALTH_SERVICE_UNKNOWN ==
                       HEALTH_SERVING_STATUS_SERVICE_UNKNOWN,
               "chanos.h's statuses are health.if's");
_Static_assert(CHANOS_HEALTH_SERVICE_MAX == HEALTH_CHECK_SERVICE_MAX &&
                   CHANOS_HEALTH_SERVICE_MAX == HEALTH_WATCH_SERVICE_MAX &&
                   CHANOS_HEALTH_SERVICE_MAX == HEALTH_CHANGED_SERVICE_MAX,
               "chanos.h's bound of a service is health.if's");

/* A loop that has a watcher stuck on a link that does not say when it has
 * room again (a connection between machines) tries again this often. */
#define RETRY_MS 10

/* A service's name: at most CHANOS_HEALTH_SERVICE_MAX bytes, not
 * NUL-terminated. */
struct name {
    uint16_t len;
    char bytes[CHANOS_HEALTH_SERVICE_MAX];
};

struct entry {
    struct name name;
    int status;
};

/* One service a connection watches, and whether its latest status has yet
 * to be sent. */
struct watched {
    struct name name;
    bool dirty;
};

/* What one connection watches. */
struct watcher {
    chanos_conn *c;
    struct watched *w;
    unsigned n, cap;
    unsigned ndirty;   /* of w[0..n) */
    bool failed;       /* a send failed for good: the loop ends it */
    struct watcher *next;
};

/* One export of the table served by a chanos_server
 * (chanos_server_add_health): its watchers and what wakes its loop. */
struct loop {
    chanos_health *h;
    int efd;             /* written when pending is set from another thread */
    atomic_int pending;  /* a watcher of this loop was marked */
    bool stalled;        /* a send found a ring full; the loop's own */
    bool stalled_link;   /* ... on a link that says nothing of room */
    struct watcher *watchers; /* under h->mu */
    struct loop *next;
};

struct chanos_health {
    pthread_mutex_t mu;
    struct entry *e; /* the table: e[0..n), room for cap */
    unsigned n, cap, max;
    bool shutdown;
    struct loop *loops;
};

/* A decoded empty string may be a NULL view: no memcmp or memcpy of
 * NULL, even for no bytes. */
static bool name_is(const struct name *n, const char *s, size_t len)
{
    return n->len == len && (len == 0 || memcmp(n->bytes, s, len) == 0);
}

static void name_set(struct name *n, const char *s, size_t len)
{
    n->len = (uint16_t)len;
    if (len != 0)
        memcpy(n->bytes, s, len);
}

/* find returns the table's entry of service s[0..len), or NULL. A table
 * holds few services: a look through all of them is as quick as any. */
static struct entry *find(chanos_health *h, const char *s, size_t len)
{
    for (unsigned i = 0; i < h->n; i++)
        if (name_is(&h->e[i].name, s, len))
            return &h->e[i];
    return NULL;
}

/* notify marks the watchers of service s[0..len), and wakes the loops
 * that serve them. h->mu is held. */
static void notify(chanos_health *h, const char *s, size_t len)
{
    for (struct loop *l = h->loops; l != NULL; l = l->next) {
        bool marked = false;

        for (struct watcher *w = l->watchers; w != NULL; w = w->next) {
            for (unsigned i = 0; i < w->n; i++) {
                if (w->w[i].dirty || !name_is(&w->w[i].name, s, len))
                    continue;
                w->w[i].dirty = true;
                w->ndirty++;
                marked = true;
            }
        }
        if (marked) {
            atomic_store(&l->pending, 1);
            /* a full counter wakes the loop as well as one more would */
            (void)eventfd_write(l->efd, 1);
        }
    }
}

/* put sets the status of entry e and tells its watchers if it changed.
 * h->mu is held. */
static void put(chanos_health *h, struct entry *e, int status)
{
    if (e->status == status)
        return;
    e->status = status;
    notify(h, e->name.bytes, e->name.len);
}

/* add adds service s[0..len) to the table with status: 0,
 * CHANOS_ERR_HEALTH_FULL or -ENOMEM. h->mu is held. */
static int add(chanos_health *h, const char *s, size_t len, int status)
{
    struct entry *e;

    if (h->n == h->max)
        return CHANOS_ERR_HEALTH_FULL;
    if (h->n == h->cap) {
        unsigned cap = h->cap * 2 < h->max ? h->cap * 2 : h->max;

        e = realloc(h->e, (size_t)cap * sizeof *e);
        if (e == NULL)
            return -ENOMEM;
        h->e = e;
        h->cap = cap;
    }
    e = &h->e[h->n++];
    name_set(&e->name, s, len);
    e->status = status;
    notify(h, s, len);
    return 0;
}

int chanos_health_new(unsigned max_services, chanos_health **out)
{
    chanos_health *h;

    *out = NULL;
    h = calloc(1, sizeof *h);
    if (h == NULL)
        return -ENOMEM;
    h->max = max_services != 0 ? max_services : CHANOS_HEALTH_SERVICES_DEFAULT;
    h->cap = h->max < 8 ? h->max : 8;
    h->e = malloc((size_t)h->cap * sizeof *h->e);
    if (h->e == NULL || pthread_mutex_init(&h->mu, NULL) != 0) {
        free(h->e);
        free(h);
        return -ENOMEM;
    }
    /* the domain as a whole, serving from the start */
    h->e[0].name.len = 0;
    h->e[0].status = CHANOS_HEALTH_SERVING;
    h->n = 1;
    *out = h;
    return 0;
}

void chanos_health_free(chanos_health *h)
{
    if (h == NULL)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h->e);
    free(h);
}

int chanos_health_set(chanos_health *h, const char *service, int status)
{
    size_t len;
    struct entry *e;
    int rc = 0;

    if (h == NULL || service == NULL)
        return -EINVAL;
    len = strlen(service);
    if (len > CHANOS_HEALTH_SERVICE_MAX)
        return CHANOS_ERR_BOUND;
    if (status < CHANOS_HEALTH_UNKNOWN || status > CHANOS_HEALTH_SERVICE_UNKNOWN)
        return CHANOS_ERR_ENUM;
    pthread_mutex_lock(&h->mu);
    if (!h->shutdown) {
        e = find(h, service, len);
        if (e != NULL)
            put(h, e, status);
        else
            rc = add(h, service, len, status);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int chanos_health_status(chanos_health *h, const char *service, int *status)
{
    struct entry *e;
    int rc = CHANOS_ERR_NOT_FOUND;

    if (h == NULL || service == NULL || status == NULL)
        return -EINVAL;
    pthread_mutex_lock(&h->mu);
    e = find(h, service, strlen(service));
    if (e != NULL) {
        *status = e->status;
        rc = 0;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* set_all sets every service's status and the shutdown mode. */
static void set_all(chanos_health *h, int status, bool shutdown)
{
    pthread_mutex_lock(&h->mu);
    h->shutdown = shutdown;
    for (unsigned i = 0; i < h->n; i++)
        put(h, &h->e[i], status);
    pthread_mutex_unlock(&h->mu);
}

void chanos_health_shutdown(chanos_health *h)
{
    set_all(h, CHANOS_HEALTH_NOT_SERVING, true);
}

void chanos_health_resume(chanos_health *h)
{
    set_all(h, CHANOS_HEALTH_SERVING, false);
}

int chanos_health_export(chanos_domain *d, const char *name,
                         chanos_listener **out)
{
    return chanos_export_suffixed_(d, name, CHANOS_HEALTH_SUFFIX,
                                   &health_interface, out);
}

/* ---- serving ---- */

static int on_check(void *ctx, chanos_conn *c, const struct health_check_call *in,
                    struct health_check_reply *out)
{
    struct loop *l = ctx;
    struct entry *e;
    int status = -1;

    pthread_mutex_lock(&l->h->mu);
    e = find(l->h, in->service.ptr, in->service.len);
    if (e != NULL)
        status = e->status;
    pthread_mutex_unlock(&l->h->mu);
    if (status < 0) {
        /* Go's words (health.Statuses.Check), so that a client hears
         * the same from either */
        chanos_conn_set_detail(c, "no status for service \"%.*s\"",
                               (int)in->service.len, in->service.ptr);
        return CHANOS_CODE_NOT_FOUND;
    }
    out->status = (enum health_serving_status)status;
    return 0;
}

/* watcher_of returns the watcher of c in l, or NULL. h->mu is held. */
static struct watcher *watcher_of(struct loop *l, chanos_conn *c)
{
    for (struct watcher *w = l->watchers; w != NULL; w = w->next)
        if (w->c == c)
            return w;
    return NULL;
}

/* watch adds service s[0..len) to what w watches, marked to be sent:
 * 0, CHANOS_ERR_PROTOCOL past CHANOS_HEALTH_WATCHED_MAX, or -ENOMEM.
 * h->mu is held. */
static int watch(struct watcher *w, const char *s, size_t len)
{
    struct watched *x = NULL;

    for (unsigned i = 0; i < w->n && x == NULL; i++)
        if (name_is(&w->w[i].name, s, len))
            x = &w->w[i];
    if (x == NULL) {
        if (w->n == CHANOS_HEALTH_WATCHED_MAX)
            return CHANOS_ERR_PROTOCOL;
        if (w->n == w->cap) {
            unsigned cap = w->cap == 0 ? 4 : w->cap * 2;
            struct watched *p;

            if (cap > CHANOS_HEALTH_WATCHED_MAX)
                cap = CHANOS_HEALTH_WATCHED_MAX;
            p = realloc(w->w, (size_t)cap * sizeof *p);
            if (p == NULL)
                return -ENOMEM;
            w->w = p;
            w->cap = cap;
        }
        x = &w->w[w->n++];
        name_set(&x->name, s, len);
        x->dirty = false;
    }
    /* watched already: sent again, as Go's Watch does */
    if (!x->dirty) {
        x->dirty = true;
        w->ndirty++;
    }
    return 0;
}

static int on_watch(void *ctx, chanos_conn *c, const struct health_watch *m)
{
    struct loop *l = ctx;
    struct watcher *w;
    int rc;

    pthread_mutex_lock(&l->h->mu);
    w = watcher_of(l, c);
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w == NULL) {
            pthread_mutex_unlock(&l->h->mu);
            return -ENOMEM;
        }
        w->c = c;
        w->next = l->watchers;
        l->watchers = w;
    }
    rc = watch(w, m->service.ptr, m->service.len);
    pthread_mutex_unlock(&l->h->mu);
    /* this thread flushes it in the loop's next turn: no wake-up needed */
    if (rc == 0)
        atomic_store(&l->pending, 1);
    return rc;
}

static const struct health_server_ops ops = {
    .check = on_check,
    .watch = on_watch,
    .changed = NULL, /* a server's message: dropped if a client sends it */
};

/* send_changes sends w what it has yet to be sent: false if a ring was
 * full (w stays marked where it was not sent). h->mu is held; no send
 * waits. */
static bool send_changes(chanos_health *h, struct watcher *w)
{
    uint8_t mem[HEALTH_CHANGED_MAX_FRAME_SIZE];

    for (unsigned i = 0; i < w->n && w->ndirty > 0 && !w->failed; i++) {
        struct watched *x = &w->w[i];
        struct entry *e;
        struct health_changed m;
        struct chanos_buf b;
        int rc;

        if (!x->dirty)
            continue;
        e = find(h, x->name.bytes, x->name.len);
        m.service.ptr = x->name.bytes;
        m.service.len = x->name.len;
        m.status = e != NULL ? (enum health_serving_status)e->status
                             : HEALTH_SERVING_STATUS_SERVICE_UNKNOWN;
        chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
        rc = health_changed_encode(&m, &b);
        if (rc == 0)
            rc = chanos_conn_send(w->c, b.data, b.len, 0);
        if (rc == CHANOS_ERR_AGAIN)
            return false;
        /* Anything else is for good (the peer gone, say): the loop's next
         * receive on the connection ends it, and nothing more is sent. */
        if (rc != 0)
            w->failed = true;
        x->dirty = false;
        w->ndirty--;
    }
    return true;
}

static int loop_turn(void *arg, bool woke)
{
    struct loop *l = arg;
    eventfd_t n;

    if (woke)
        (void)eventfd_read(l->efd, &n); /* non-blocking: drained or empty */
    if (!atomic_exchange(&l->pending, 0) && !(woke && l->stalled))
        return l->stalled_link ? RETRY_MS : -1;
    l->stalled = l->stalled_link = false;
    pthread_mutex_lock(&l->h->mu);
    for (struct watcher *w = l->watchers; w != NULL; w = w->next) {
        if (w->ndirty == 0 || send_changes(l->h, w))
            continue;
        /* a ump connection's descriptor wakes the loop once its ring
         * has room (the failed send armed it); another link's may not */
        l->stalled = true;
        if (chanos_conn_ump(w->c) == NULL)
            l->stalled_link = true;
    }
    pthread_mutex_unlock(&l->h->mu);
    return l->stalled_link ? RETRY_MS : -1;
}

static void free_watcher(struct watcher *w)
{
    free(w->w);
    free(w);
}

static void loop_closing(void *arg, chanos_conn *c)
{
    struct loop *l = arg;
    struct watcher **p, *w = NULL;

    pthread_mutex_lock(&l->h->mu);
    for (p = &l->watchers; *p != NULL; p = &(*p)->next) {
        if ((*p)->c == c) {
            w = *p;
            *p = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&l->h->mu);
    if (w != NULL)
        free_watcher(w);
}

/* loop_release ends a loop, whose server is being freed: its
 * connections are closed already, and their watchers with them. */
static void loop_release(void *arg)
{
    struct loop *lp = arg;
    struct loop **p;

    pthread_mutex_lock(&lp->h->mu);
    for (p = &lp->h->loops; *p != lp; p = &(*p)->next)
        ;
    *p = lp->next;
    pthread_mutex_unlock(&lp->h->mu);
    close(lp->efd);
    free(lp);
}

int chanos_server_add_health(chanos_server *s, chanos_health *h,
                             chanos_listener *l)
{
    struct chanos_serve_hooks_ hk;
    struct loop *lp;
    int rc;

    if (s == NULL || h == NULL || l == NULL)
        return -EINVAL;
    lp = calloc(1, sizeof *lp);
    if (lp == NULL)
        return -ENOMEM;
    lp->h = h;
    atomic_init(&lp->pending, 0);
    lp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (lp->efd < 0) {
        rc = -errno;
        free(lp);
        return rc;
    }
    pthread_mutex_lock(&h->mu);
    lp->next = h->loops;
    h->loops = lp;
    pthread_mutex_unlock(&h->mu);
    hk.fd = lp->efd;
    hk.turn = loop_turn;
    hk.closing = loop_closing;
    hk.release = loop_release;
    hk.arg = lp;
    rc = chanos_server_add_hooked_(s, l, health_dispatch, &ops, lp, &hk);
    if (rc != 0)
        loop_release(lp);
    return rc;
}

int chanos_health_serve(chanos_health *h, chanos_domain *d,
                        chanos_listener *l, const struct chanos_serve_opts *o)
{
    chanos_server *s;
    int rc;

    if (h == NULL || d == NULL || l == NULL)
        return -EINVAL;
    rc = chanos_server_new(d, &s);
    if (rc == 0)
        rc = chanos_server_add_health(s, h, l);
    if (rc == 0)
        rc = chanos_server_run(s, o);
    chanos_server_free(s);
    return rc;
}
