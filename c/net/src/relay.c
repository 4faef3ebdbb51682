/*
 * relay.c: channel endpoints sent to other machines (docs/capabilities.md,
 * "Between machines"), the binder's export_endpoint. A descriptor cannot
 * cross machines, so the sending process keeps the endpoint's end (far, a
 * ump connection to the endpoint's maker), exports it privately under no
 * name, and the iref of that export travels in its place; the one
 * connection that binds it is joined to far, frame for frame, both ways.
 *
 * Threads rather than the domain's poll loop: a libchanos domain is used
 * by one thread at a time and reads its monitor only within the
 * application's calls on it, while an application that has sent an
 * endpoint owes its domain no further call (it may be busy in rpcs on the
 * endpoint's other end, which is the point). So each exported endpoint has
 * a monitor session of its own (a domain that only its thread uses), whose
 * thread accepts the bind, keeps the session answering (pings, peer_gone)
 * and, with one thread per direction, relays until either side ends: a
 * direction blocked on a full ring or window never holds up the other.
 * The cost is a monitor session per endpoint in flight.
 */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* How long an export waits for its bind (the Go library's
 * endpointExportTTL), and how often blocked threads look at stop. */
#define EXPORT_TTL_MS 60000
#define TICK_MS 200

struct relay {
    chanos_domain *d;    /* the session of this endpoint's export */
    chanos_listener *l;  /* the export, until it is bound */
    chanos_ump *far;     /* the endpoint's end */
    chanos_conn *near;   /* the connection that bound the export */
    chanos_net_link *link; /* near's link */
    atomic_bool stop;
    atomic_int refs; /* the control thread's, and the handle's until sent */
};

/* The relays of this process not yet ended (chanos_net_endpoints_wait). */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static int live;

static void live_add(int n)
{
    pthread_mutex_lock(&live_mu);
    live += n;
    if (live == 0)
        pthread_cond_broadcast(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

int chanos_net_endpoints_wait(int timeout_ms)
{
    struct timespec ts;
    int rc = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (timeout_ms > 0) {
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
    }
    pthread_mutex_lock(&live_mu);
    while (live > 0 && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&live_cv, &live_mu);
        else if (timeout_ms == 0 ||
                 pthread_cond_timedwait(&live_cv, &live_mu, &ts) == ETIMEDOUT)
            rc = CHANOS_ERR_TIMEDOUT;
    }
    pthread_mutex_unlock(&live_mu);
    return rc;
}

static void relay_put(struct relay *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        free(r);
}

/* out_pump copies frames from the endpoint's maker to the other machine. */
static void *out_pump(void *arg)
{
    struct relay *r = arg;
    while (!atomic_load(&r->stop)) {
        const void *p;
        size_t len;
        int rc = chanos_ump_recv(r->far, &p, &len, TICK_MS);
        if (rc == CHANOS_ERR_TIMEDOUT)
            continue;
        if (rc != 0)
            break;
        struct chanos_hdr h = {0};
        if (chanos_hdr_parse(&h, p, len) != 0 || h.ncaps != 0) {
            /* descriptors do not cross machines: take them off the caps
             * socket, close them, and end the relay */
            int fds[CHANOS_UMP_MAX_FDS];
            if (h.ncaps != 0 && chanos_ump_recv_fds(r->far, fds, h.ncaps) == 0)
                for (uint32_t i = 0; i < h.ncaps; i++)
                    close(fds[i]);
            break;
        }
        do
            rc = chanos_net_send(r->link, p, len, TICK_MS);
        while (rc == CHANOS_ERR_TIMEDOUT && !atomic_load(&r->stop));
        if (rc != 0)
            break;
    }
    atomic_store(&r->stop, true);
    return NULL;
}

/* in_pump copies frames from the other machine to the endpoint's maker. */
static void *in_pump(void *arg)
{
    struct relay *r = arg;
    while (!atomic_load(&r->stop)) {
        const void *p;
        const uint8_t *refs;
        size_t len;
        int rc = chanos_net_recv_refs(r->link, &p, &len, &refs, TICK_MS);
        if (rc == CHANOS_ERR_TIMEDOUT)
            continue;
        if (rc != 0 || refs != NULL) /* endpoints in a relayed frame: end */
            break;
        do
            rc = chanos_ump_send(r->far, p, len, TICK_MS);
        while (rc == CHANOS_ERR_TIMEDOUT && !atomic_load(&r->stop));
        if (rc != 0)
            break;
    }
    atomic_store(&r->stop, true);
    return NULL;
}

/* control accepts the export's one bind, withdraws the export, relays
 * until either side ends, and ends it all: far's close tells the
 * endpoint's maker its peer is gone, as on one machine. */
static void *control(void *arg)
{
    struct relay *r = arg;
    int64_t deadline = net_now() + (int64_t)EXPORT_TTL_MS * 1000000;
    int rc = CHANOS_ERR_TIMEDOUT;
    while (!atomic_load(&r->stop) && net_now() < deadline) {
        rc = chanos_accept(r->l, TICK_MS, &r->near);
        if (rc != CHANOS_ERR_TIMEDOUT)
            break;
    }
    chanos_listener_close(r->l);
    r->l = NULL;
    if (rc == 0 && !atomic_load(&r->stop) &&
        (r->link = net_bconn_link(chanos_conn_link(r->near))) != NULL) {
        pthread_t out, in;
        sigset_t old;
        net_block_signals(&old);
        bool o = pthread_create(&out, NULL, out_pump, r) == 0;
        bool i = o && pthread_create(&in, NULL, in_pump, r) == 0;
        net_restore_signals(&old);
        if (!i)
            atomic_store(&r->stop, true);
        /* keep the session answering, and take the monitor's word that
         * the other side has gone (peer_gone ends the link) */
        while (!atomic_load(&r->stop)) {
            /* a session that ended does not end the relay, as it ends
             * no connection */
            if (chanos_domain_poll(r->d, TICK_MS) != 0)
                usleep(TICK_MS * 1000);
        }
        if (o)
            pthread_join(out, NULL);
        if (i)
            pthread_join(in, NULL);
    }
    /* far last: its maker, told its peer has gone, may well exit */
    chanos_conn_close(r->near);
    chanos_domain_close(r->d);
    chanos_ump_close(r->far);
    relay_put(r);
    /* This thread's OpenSSL state (its error queue, from the grant's
     * credential it parsed) goes now, not at its exit, which a process
     * that waited for its relays may not let it reach. */
    OPENSSL_thread_stop();
    live_add(-1);
    return NULL;
}

int net_export_endpoint(const char *dir, const char *program, chanos_ump *far,
                        const struct chanos_interface *iface,
                        struct chanos_iref *ref, void **handle)
{
    struct chanos_join_opts jo = {.dir = dir, .program = program,
                                  .flags = CHANOS_JOIN_NO_REJOIN,
                                  .net = chanos_net_binder()};
    struct chanos_export_opts eo = {.flags = CHANOS_EXPORT_PRIVATE};
    struct relay *r = calloc(1, sizeof *r);
    int rc;

    *handle = NULL;
    if (!r) {
        chanos_ump_close(far);
        return -ENOMEM;
    }
    r->far = far;
    atomic_init(&r->stop, false);
    atomic_init(&r->refs, 2);
    rc = chanos_join(&r->d, &jo);
    if (rc == 0)
        rc = chanos_export_iface(r->d, "", iface, &eo, &r->l);
    if (rc == 0) {
        chanos_listener_ref(r->l, ref);
        pthread_attr_t a;
        pthread_t t;
        sigset_t old;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        live_add(1);
        net_block_signals(&old);
        rc = pthread_create(&t, &a, control, r) == 0 ? 0 : -EAGAIN;
        net_restore_signals(&old);
        if (rc != 0)
            live_add(-1);
        pthread_attr_destroy(&a);
    }
    if (rc != 0) {
        chanos_listener_close(r->l);
        chanos_domain_close(r->d);
        chanos_ump_close(far);
        free(r);
        return rc;
    }
    *handle = r;
    return 0;
}

void net_endpoint_sent(void *handle, int sent)
{
    struct relay *r = handle;
    if (!sent)
        atomic_store(&r->stop, true);
    relay_put(r);
}
