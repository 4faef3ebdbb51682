/*
 * binder.c: chanos_net_binder, libchanos's way to the net interconnect
 * (docs/net.md, "Binding between machines"). A domain's state dials the
 * exports of other machines with the credentials the monitors made, and
 * accepts the connections its monitor announces (grants) on the TCP
 * listeners its monitor handed it: each client is admitted once, by the
 * certificate its monitor pinned, and presented the certificate made for
 * it, chosen by the server name it asks for. The state also knows each
 * connection by the monitor's id, so that the monitor's peer_gone ends it
 * at once.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* Bounds of what announcements can make a domain hold, as in the Go
 * library: a grant not used within GRANT_TTL_MS goes, and beyond
 * MAX_GRANTS the oldest unused one does. A handshake whose grant has not
 * been announced yet (the domain reads its monitor only when called)
 * waits for it SELECT_WAIT_MS. */
#define GRANT_TTL_MS   30000
#define MAX_GRANTS     1024
#define SELECT_WAIT_MS 2000
/* The TCP listeners a domain is handed: one per monitor session. */
#define MAX_LISTENERS 16
/* The longest server name a monitor makes (monitor.if's net_name). */
#define SERVER_NAME_MAX 64

struct grant {
    struct grant *next;
    char name[SERVER_NAME_MAX + 1];
    uint8_t fp[CHANOS_NET_FP_SIZE]; /* the client's certificate */
    chanos_net_identity *id;        /* this side's */
    uint64_t conn_id;
    bool auth_only;  /* authenticated only, not encrypted */
    int64_t expires; /* net_now's clock; unused grants only */
    bool admitted;   /* its one new connection has been let in */
    bool taken;      /* accepted: kept for the link's resumes */
    unsigned holds;  /* identities identity_for lent, not yet done */
    uint8_t tag[CHANOS_NET_GRANT_TAG_MAX];
    size_t tag_len;
};

struct state;

/* A connection the binder made: the link, and what ends it early. */
struct bconn {
    struct bconn *next, *prev;
    chanos_net_link *link;
    struct state *st;
    uint64_t conn_id;
    struct grant *g; /* accepting side: the grant its resumes present */
};

struct state {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* grants announced, or closed */
    int refs;          /* the domain's, and one per bconn */
    bool closed;
    int epfd; /* the listeners' ready descriptors */
    chanos_net_listener *ls[MAX_LISTENERS];
    size_t nls;
    struct grant *grants; /* newest first */
    size_t ngrants;
    struct grant *dead; /* dropped while a handshake held their identity */
    struct bconn *conns;
    struct chanos_net_tls tls; /* the listeners' callbacks, arg this */
};

static void state_put(struct state *st)
{
    pthread_mutex_lock(&st->mu);
    bool last = --st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (!last)
        return;
    struct grant *lists[2] = {st->grants, st->dead};
    for (int i = 0; i < 2; i++) {
        while (lists[i]) {
            struct grant *g = lists[i];
            lists[i] = g->next;
            chanos_net_identity_free(g->id);
            free(g);
        }
    }
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* drop_locked unlinks the grant at *at and frees it, unless a handshake
 * holds its identity: then the last identity_done does. */
static void drop_locked(struct state *st, struct grant **at)
{
    struct grant *g = *at;
    *at = g->next;
    st->ngrants--;
    if (g->holds) {
        g->next = st->dead;
        st->dead = g;
        return;
    }
    chanos_net_identity_free(g->id);
    free(g);
}

/* sweep_locked drops unused grants past their time. */
static void sweep_locked(struct state *st, int64_t now)
{
    for (struct grant **at = &st->grants; *at;) {
        if (!(*at)->taken && (*at)->expires <= now)
            drop_locked(st, at);
        else
            at = &(*at)->next;
    }
}

static struct grant **find_locked(struct state *st, const char *name)
{
    struct grant **at = &st->grants;
    while (*at && strcmp((*at)->name, name) != 0)
        at = &(*at)->next;
    return at;
}

/* ---- the listeners' callbacks ---- */

static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    struct state *st = arg;
    int64_t deadline = net_now() + SELECT_WAIT_MS * 1000000LL;
    const chanos_net_identity *id = NULL;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        int64_t now = net_now();
        sweep_locked(st, now);
        struct grant *g = *find_locked(st, name);
        if (g) {
            g->holds++;
            id = g->id;
            break;
        }
        if (st->closed || now >= deadline)
            break;
        struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
        pthread_cond_timedwait(&st->cv, &st->mu, &ts);
    }
    pthread_mutex_unlock(&st->mu);
    return id;
}

static void identity_done(void *arg, const chanos_net_identity *id)
{
    struct state *st = arg;
    pthread_mutex_lock(&st->mu);
    struct grant *g = st->grants;
    while (g && g->id != id)
        g = g->next;
    if (g) {
        g->holds--;
    } else {
        struct grant **at = &st->dead;
        while (*at && (*at)->id != id)
            at = &(*at)->next;
        g = *at;
        if (g && --g->holds == 0) {
            *at = g->next;
            chanos_net_identity_free(g->id);
            free(g);
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* auth_only_for is the mode of the connection granted under name: each
 * bind's, as the two machines' monitors agreed it. */
static bool auth_only_for(void *arg, const char *name)
{
    struct state *st = arg;
    pthread_mutex_lock(&st->mu);
    struct grant *g = *find_locked(st, name);
    bool a = g && g->auth_only;
    pthread_mutex_unlock(&st->mu);
    return a;
}

static bool admit(void *arg, const char *name,
                  const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    struct state *st = arg;
    pthread_mutex_lock(&st->mu);
    sweep_locked(st, net_now());
    struct grant *g = *find_locked(st, name);
    bool ok = g && !g->admitted && !st->closed &&
              memcmp(g->fp, fp, CHANOS_NET_FP_SIZE) == 0;
    if (ok)
        g->admitted = true;
    pthread_mutex_unlock(&st->mu);
    return ok;
}

/* ---- connections ---- */

static int op_send(void *link, const void *frame, size_t len, int timeout_ms)
{
    struct bconn *bc = link;
    if (timeout_ms == 0)
        return chanos_net_try_send(bc->link, frame, len);
    return chanos_net_send(bc->link, frame, len, timeout_ms);
}

static int op_recv(void *link, const void **frame, size_t *len,
                   int timeout_ms)
{
    struct bconn *bc = link;
    return chanos_net_recv(bc->link, frame, len, timeout_ms);
}

static int op_send_refs(void *link, const void *frame, size_t len,
                        const uint8_t *refs, uint32_t nrefs, int timeout_ms)
{
    struct bconn *bc = link;
    return chanos_net_send_refs(bc->link, frame, len, refs, nrefs,
                                timeout_ms);
}

static int op_recv_refs(void *link, const void **frame, size_t *len,
                        const uint8_t **refs, int timeout_ms)
{
    struct bconn *bc = link;
    return chanos_net_recv_refs(bc->link, frame, len, refs, timeout_ms);
}

static int op_peer_gone(void *link)
{
    struct bconn *bc = link;
    if (chanos_net_peer_closed(bc->link))
        return CHANOS_ERR_CLOSED;
    return chanos_net_err(bc->link);
}

/* op_close forgets the connection (and the grant its resumes presented)
 * before closing it, so that peer_gone never reaches a closed link. */
static void op_close(void *link)
{
    struct bconn *bc = link;
    struct state *st = bc->st;
    pthread_mutex_lock(&st->mu);
    if (bc->prev)
        bc->prev->next = bc->next;
    else
        st->conns = bc->next;
    if (bc->next)
        bc->next->prev = bc->prev;
    if (bc->g) {
        struct grant **at = &st->grants;
        while (*at && *at != bc->g)
            at = &(*at)->next;
        if (*at)
            drop_locked(st, at);
    }
    pthread_mutex_unlock(&st->mu);
    chanos_net_close(bc->link);
    free(bc);
    state_put(st);
}

static int op_fd(void *link)
{
    struct bconn *bc = link;
    return chanos_net_fd(bc->link);
}

/* the connections of chanos_accept on a domain of this binder are wrap's */
chanos_net_link *net_bconn_link(void *link)
{
    return link ? ((struct bconn *)link)->link : NULL;
}

static const struct chanos_link_ops bconn_ops = {
    .send = op_send,
    .recv = op_recv,
    .peer_gone = op_peer_gone,
    .close = op_close,
    .fd = op_fd,
    .send_refs = op_send_refs,
    .recv_refs = op_recv_refs,
};

/* wrap makes link a chanos connection the state knows as conn_id (g: the
 * grant it was accepted by). It takes link (closed on failure too). */
static int wrap(struct state *st, chanos_net_link *link, uint64_t conn_id,
                struct grant *g, chanos_conn **out)
{
    struct bconn *bc = calloc(1, sizeof *bc);
    if (!bc) {
        chanos_net_close(link);
        return -ENOMEM;
    }
    bc->link = link;
    bc->st = st;
    bc->conn_id = conn_id;
    bc->g = g;
    pthread_mutex_lock(&st->mu);
    st->refs++;
    bc->next = st->conns;
    if (st->conns)
        st->conns->prev = bc;
    st->conns = bc;
    pthread_mutex_unlock(&st->mu);
    /* on failure chanos_conn_new_link closes bc through op_close */
    return chanos_conn_new_link(&bconn_ops, bc, out);
}

/* ---- the binder ---- */

static int b_open(void **state, int *wait_fd)
{
    struct state *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (st->epfd < 0) {
        int r = -errno;
        free(st);
        return r;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);
    st->refs = 1;
    st->tls.identity_for = identity_for;
    st->tls.admit = admit;
    st->tls.identity_done = identity_done;
    st->tls.auth_only_for = auth_only_for;
    st->tls.arg = st;
    *state = st;
    *wait_fd = st->epfd;
    return 0;
}

static int b_dial(void *state, const struct chanos_net_bind *b,
                  chanos_conn **out)
{
    chanos_net_identity *id = NULL;
    chanos_net_link *link = NULL;

    *out = NULL;
    int rc = chanos_net_identity_from_der(b->cert, b->cert_len, b->key,
                                          b->key_len, &id);
    if (rc != 0)
        return rc;
    struct chanos_net_tls t = {.identity = id,
                               .server_name = b->server_name,
                               .auth_only = b->auth_only != 0};
    memcpy(t.peer, b->peer, CHANOS_NET_FP_SIZE);
    struct chanos_net_options o = {.max_frame = b->max_frame, .tls = &t};
    rc = chanos_net_dial(b->addr, &o, &link);
    chanos_net_identity_free(id); /* the link's TLS context keeps a copy */
    if (rc != 0)
        return rc;
    if (!state)
        return chanos_net_conn_new(link, out);
    return wrap(state, link, b->conn_id, NULL, out);
}

static int b_listen(void *state, int fd, uint32_t max_frame)
{
    struct state *st = state;
    chanos_net_listener *L = NULL;
    pthread_mutex_lock(&st->mu);
    bool full = st->nls == MAX_LISTENERS || st->closed;
    pthread_mutex_unlock(&st->mu);
    if (full) {
        close(fd);
        return CHANOS_ERR_LIMIT;
    }
    /* One listener serves all the domain's exports: it takes frames as
     * large as the first export's, and at least the default. */
    struct chanos_net_options o = {.tls = &st->tls};
    if (max_frame > NET_DEFAULT_MAX_FRAME)
        o.max_frame = max_frame;
    int rc = chanos_net_listen_fd(fd, &o, &L);
    if (rc != 0)
        return rc;
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.ptr = L;
    if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, chanos_net_listener_fd(L), &ev) != 0) {
        rc = -errno;
        chanos_net_listener_close(L);
        return rc;
    }
    /* Checked again where the listener is added, in the same hold of the
     * lock: listens may run at once, and each saw room above. */
    pthread_mutex_lock(&st->mu);
    full = st->nls == MAX_LISTENERS || st->closed;
    if (!full)
        st->ls[st->nls++] = L;
    pthread_mutex_unlock(&st->mu);
    if (full) {
        epoll_ctl(st->epfd, EPOLL_CTL_DEL, chanos_net_listener_fd(L), NULL);
        chanos_net_listener_close(L);
        return CHANOS_ERR_LIMIT;
    }
    return 0;
}

static int b_grant(void *state, const struct chanos_net_grant *gr)
{
    struct state *st = state;
    if (!gr->server_name || strlen(gr->server_name) > SERVER_NAME_MAX ||
        gr->tag_len > CHANOS_NET_GRANT_TAG_MAX)
        return -EINVAL;
    struct grant *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    int rc = chanos_net_identity_from_der(gr->cert, gr->cert_len, gr->key,
                                          gr->key_len, &g->id);
    if (rc != 0) {
        free(g);
        return rc;
    }
    strcpy(g->name, gr->server_name);
    memcpy(g->fp, gr->peer, CHANOS_NET_FP_SIZE);
    g->conn_id = gr->conn_id;
    g->auth_only = gr->auth_only != 0;
    memcpy(g->tag, gr->tag, gr->tag_len);
    g->tag_len = gr->tag_len;
    pthread_mutex_lock(&st->mu);
    int64_t now = net_now();
    g->expires = now + GRANT_TTL_MS * 1000000LL;
    sweep_locked(st, now);
    if (st->closed || *find_locked(st, g->name)) {
        pthread_mutex_unlock(&st->mu);
        chanos_net_identity_free(g->id);
        free(g);
        return st->closed ? CHANOS_ERR_CLOSED : CHANOS_ERR_EXISTS;
    }
    if (st->ngrants >= MAX_GRANTS) {
        /* the oldest unused one goes */
        struct grant **oldest = NULL;
        for (struct grant **at = &st->grants; *at; at = &(*at)->next)
            if (!(*at)->taken)
                oldest = at;
        if (!oldest) {
            pthread_mutex_unlock(&st->mu);
            chanos_net_identity_free(g->id);
            free(g);
            return CHANOS_ERR_LIMIT;
        }
        drop_locked(st, oldest);
    }
    g->next = st->grants;
    st->grants = g;
    st->ngrants++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* take_locked finds the admitted grant of the connection whose client
 * presented fp, and marks it taken. */
static struct grant *take_locked(struct state *st,
                                 const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    for (struct grant *g = st->grants; g; g = g->next) {
        if (g->admitted && !g->taken &&
            memcmp(g->fp, fp, CHANOS_NET_FP_SIZE) == 0) {
            g->taken = true;
            return g;
        }
    }
    return NULL;
}

static int b_accept(void *state, chanos_conn **out, void *tag,
                    size_t *tag_len)
{
    struct state *st = state;
    *out = NULL;
    pthread_mutex_lock(&st->mu);
    size_t nls = st->nls;
    pthread_mutex_unlock(&st->mu);
    /* the listeners are added, never removed, before close */
    for (size_t i = 0; i < nls; i++) {
        chanos_net_link *link;
        while (chanos_net_accept(st->ls[i], 0, &link) == 0) {
            uint8_t fp[CHANOS_NET_FP_SIZE];
            struct grant *g = NULL;
            if (chanos_net_peer_fingerprint(link, fp) == 0) {
                pthread_mutex_lock(&st->mu);
                g = take_locked(st, fp);
                pthread_mutex_unlock(&st->mu);
            }
            if (!g || g->tag_len > *tag_len) {
                /* its grant went between admission and here */
                chanos_net_close(link);
                continue;
            }
            memcpy(tag, g->tag, g->tag_len);
            *tag_len = g->tag_len;
            int rc = wrap(st, link, g->conn_id, g, out);
            if (rc != 0)
                continue;
            return 0;
        }
    }
    return CHANOS_ERR_AGAIN;
}

static void b_peer_gone(void *state, uint64_t conn_id, int network_lost)
{
    struct state *st = state;
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    for (struct bconn *bc = st->conns; bc; bc = bc->next) {
        if (bc->conn_id == conn_id) {
            net_link_end(bc->link, network_lost ? CHANOS_ERR_NETWORK_LOST
                                                : CHANOS_ERR_PEER_DIED);
            break;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* b_close stops the listeners (connections accepted go on, without
 * resumes) and drops the domain's reference. */
static void b_close(void *state)
{
    struct state *st = state;
    pthread_mutex_lock(&st->mu);
    st->closed = true;
    pthread_cond_broadcast(&st->cv);
    size_t nls = st->nls;
    st->nls = 0;
    pthread_mutex_unlock(&st->mu);
    for (size_t i = 0; i < nls; i++)
        chanos_net_listener_close(st->ls[i]);
    close(st->epfd);
    pthread_mutex_lock(&st->mu);
    for (struct grant **at = &st->grants; *at;) {
        if (!(*at)->taken)
            drop_locked(st, at);
        else
            at = &(*at)->next;
    }
    pthread_mutex_unlock(&st->mu);
    state_put(st);
}

static const struct chanos_net_binder binder = {
    .open = b_open,
    .dial = b_dial,
    .listen = b_listen,
    .grant = b_grant,
    .accept = b_accept,
    .peer_gone = b_peer_gone,
    .close = b_close,
    .export_endpoint = net_export_endpoint,
    .endpoint_sent = net_endpoint_sent,
};

const struct chanos_net_binder *chanos_net_binder(void) { return &binder; }
