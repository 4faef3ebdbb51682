/*
 * domain.c: a C domain's session with its monitor (docs/c-domains.md,
 * docs/monitor-protocol.md). The monitor's frames are those of
 * interfaces/monitor.if, encoded and decoded by the C code chanosc
 * generates for it (built into libchanos as monitor.h / monitor.c). The
 * nameservice's code (chanos/nameservice.h) is built in too, for
 * applications; chanos_nameservice_connect binds it.
 *
 * libchanos starts no thread: the monitor socket is read by whichever call
 * needs a frame from it. Frames that concern someone else (an incoming
 * connection while a call waits for its reply) are queued.
 */
#include <chanos.h>

#include "internal.h"
#include "monitor.h"
#include "chanos/nameservice.h" /* NAMESERVICE_MAX_FRAME_SIZE */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROTOCOL_VERSION 4
/* hello's feature bits (monitor.FeatureNet, FeatureNetAccept) */
#define FEATURE_NET 1u
#define FEATURE_NET_ACCEPT 2u
/* The bound of a call to the monitor given none of its own (hello, export,
 * withdraw, and binds given -1): chanos_join_opts.timeout_ms, else this.
 * The Go library's DefaultCallTimeout. */
#define DEFAULT_CALL_TIMEOUT_MS 10000
/* Incoming connections held for chanos_accept (all exports together). */
#define INCOMING_LIMIT 128
/* Calls to the monitor are small: the largest, export, is at most 2533
 * bytes (with its allow-lists full); the monitor takes up to 4096. */
#define CALL_BUF 4096
_Static_assert(MONITOR_EXPORT_CALL_MAX_FRAME_SIZE <= CALL_BUF &&
                   MONITOR_BIND_CALL_MAX_FRAME_SIZE <= CALL_BUF,
               "a call to the monitor outgrows CALL_BUF");
/* How much longer than a bind's deadline to wait for the monitor's answer:
 * the monitor answers not_found at the deadline, so only a monitor that
 * says nothing past the grace is taken for stopped (CHANOS_ERR_TIMEDOUT). */
#define BIND_GRACE_MS 1000
/* The waits between attempts to rejoin a new monitor: the first, and the
 * longest as the wait doubles (as the Go library's). */
#define REJOIN_FIRST_MS 10
#define REJOIN_MAX_MS 250

/* The descriptors of a ump connection from the monitor, in a bind reply
 * or an incoming message, in this order: the memfd, this side's data,
 * space and caps sockets, its liveness socket (docs/monitor-protocol.md). */
#define UMP_NFDS 5

/* A connection waiting for chanos_accept: the descriptors of an incoming
 * message, or (local) the server side of a pair made in this process by a
 * bind to the domain's own export, already open. */
struct pending_in {
    uint64_t export_id;
    uint8_t token[16];
    uint32_t max_frame;
    int fds[UMP_NFDS];
    chanos_conn *local;
    struct chanos_peer peer; /* the client */
};

struct chanos_domain {
    int sock;
    uint64_t id, machine;
    uint32_t next_call;
    int err; /* why the session ended, or 0 */
    int call_timeout_ms; /* bound of calls given none; -1: none */
    atomic_flag busy;
    int64_t spin_ns; /* chanos_join_opts.spin_ns, for every connection */
    char program[MONITOR_HELLO_PROGRAM_MAX + 1]; /* as hello gave it */
    uint8_t *rbuf; /* MONITOR_MAX_FRAME_SIZE bytes */
    struct pending_in in[INCOMING_LIMIT];
    size_t nin;
    struct chanos_listener *listeners; /* list of open listeners */
    /* the detail of the monitor's last error reply (chanos_domain_error) */
    char detail[CHANOS_DOMAIN_ERROR_MAX + 1];
    /* Rejoining (chanos_domain_poll's comment): the socket's path, the
     * hello call to say again, and while lost, sock is a timerfd armed
     * for the next attempt, retry_ms after the last. An attempt waits for
     * no one (join_begin): while joining, sock is the new session, whose
     * answer to call join_call (the hello, or join_l's export again) is
     * due by join_deadline (-1: no bound), and join_first is the first
     * name that could not be exported again. */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint8_t *hello;
    size_t hello_len;
    int rejoin, lost, retry_ms;
    int joining, join_first;
    uint32_t join_call;
    struct chanos_listener *join_l;
    int64_t join_deadline;
    /* an export or adopt call is waiting for its reply: a connection the
     * monitor announces meanwhile may be for it, though no listener has
     * its iref yet */
    int exporting;
    void (*on_monitor)(void *arg, int event, int err);
    void *on_monitor_arg;
    const struct chanos_net_binder *net; /* chanos_join_opts.net */
    /* The binder's state; and, if it accepts, its wait descriptor and the
     * epoll descriptor chanos_domain_fd gives, of it and the socket. */
    void *netst;
    int net_wait, epfd;
    /* the domain's key (chanos_domain_key_), and the next domain of the
     * process's list of them */
    uint64_t key;
    struct chanos_domain *next_domain;
};

/* The process's domains, by key, for the endpoints from other machines
 * that name them (endpoint.c). */
static pthread_mutex_t domains_mu = PTHREAD_MUTEX_INITIALIZER;
static struct chanos_domain *domains;
static uint64_t domains_next_key = 1;

uint64_t chanos_domain_key_(const chanos_domain *d) { return d->key; }

chanos_domain *chanos_domain_by_key_(uint64_t key)
{
    struct chanos_domain *d;

    pthread_mutex_lock(&domains_mu);
    for (d = domains; d != NULL && d->key != key; d = d->next_domain)
        ;
    pthread_mutex_unlock(&domains_mu);
    return d;
}

/* monitor_dir writes into dir the monitor's directory, that of the socket
 * join dialled: 0, or -1 if the path has no directory. */
static int monitor_dir(const struct chanos_domain *d,
                       char dir[sizeof(((struct sockaddr_un *)0)->sun_path)])
{
    char *slash;

    memcpy(dir, d->path, sizeof d->path);
    dir[sizeof d->path - 1] = '\0';
    slash = strrchr(dir, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    return 0;
}

int chanos_domain_export_endpoint_(uint64_t key, int ep,
                                   struct chanos_iref *ref, void **handle,
                                   const struct chanos_net_binder **net)
{
    char name[CHANOS_UMP_MAX_LABEL + 1];
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct chanos_interface iface;
    struct chanos_domain *d = chanos_domain_by_key_(key);
    chanos_ump *u;
    int rc, e;

    if (d == NULL || d->net == NULL || d->net->export_endpoint == NULL ||
        d->net->endpoint_sent == NULL)
        return CHANOS_ERR_CAP;
    if (monitor_dir(d, dir) != 0)
        return CHANOS_ERR_CAP;
    e = fcntl(ep, F_DUPFD_CLOEXEC, 0);
    if (e < 0)
        return -errno;
    rc = chanos_endpoint_take_(e, &u, &iface, name);
    if (rc != 0)
        return rc;
    rc = d->net->export_endpoint(dir, d->program, u, &iface, ref, handle);
    if (rc == 0)
        *net = d->net;
    return rc;
}

static void domain_register(struct chanos_domain *d)
{
    pthread_mutex_lock(&domains_mu);
    d->key = domains_next_key++;
    d->next_domain = domains;
    domains = d;
    pthread_mutex_unlock(&domains_mu);
}

static void domain_unregister(struct chanos_domain *d)
{
    struct chanos_domain **at;

    pthread_mutex_lock(&domains_mu);
    for (at = &domains; *at != NULL && *at != d; at = &(*at)->next_domain)
        ;
    if (*at != NULL)
        *at = d->next_domain;
    pthread_mutex_unlock(&domains_mu);
}

_Static_assert(sizeof(struct pending_in) <= CHANOS_NET_GRANT_TAG_MAX,
               "a pending connection outgrows a grant's tag");

struct chanos_listener {
    struct chanos_domain *d;
    struct chanos_listener *next;
    struct chanos_iref ref;
    uint32_t max_frame;
    char *name;
    uint8_t *call; /* the export call, to make again on a rejoin */
    size_t call_len;
    int err; /* the name could not be exported again, or was handed over:
              * accept fails */
    int handed; /* handed over: neither exported again nor withdrawn */
    int rejoin_pending; /* to be exported again by the attempt under way */
    /* the interface's definition (struct chanos_interface's), for a
     * reflection service; NULL: none */
    const char *const *definition;
};

/* A frame received from the monitor, in d->rbuf. */
struct mframe {
    size_t len;
    int fds[CHANOS_MAX_CAPS];
    uint32_t nfds;
};

static void close_fds(int *fds, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

/* drop_pending closes a connection that will not be accepted. A local one
 * closes in order, so its client's receive ends with CHANOS_ERR_CLOSED. */
static void drop_pending(struct pending_in *p)
{
    chanos_conn_close(p->local);
    p->local = NULL;
    close_fds(p->fds, UMP_NFDS);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* remaining returns the milliseconds left until deadline (-1: none). */
static int remaining(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = deadline - now_ms();
    if (left < 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* connect_within connects s to the monitor's socket sa, waiting at most
 * timeout_ms (-1: no bound) while the monitor's queue of connections is
 * full, as a stopped or wedged monitor's is: a blocking connect would then
 * wait for good, whatever the caller's timeout. A socket of the monitor's
 * kind never connects in part: the connect is done or refused at once. */
static int connect_within(int s, const struct sockaddr_un *sa, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    int fl = fcntl(s, F_GETFL);
    int rc;

    if (fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    for (;;) {
        if (connect(s, (const struct sockaddr *)sa, sizeof *sa) == 0) {
            rc = 0;
            break;
        }
        if (errno != EAGAIN && errno != EINTR) {
            rc = -errno;
            break;
        }
        if (deadline >= 0 && now_ms() >= deadline) {
            rc = CHANOS_ERR_TIMEDOUT;
            break;
        }
        struct timespec ts = { 0, 5 * 1000000 };
        nanosleep(&ts, NULL);
    }
    if (fcntl(s, F_SETFL, fl) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

static int64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

static int rejoin_due(struct chanos_domain *d, int wait_ms);

/* enter takes the domain for one call, and first begins a rejoin attempt
 * that is due (without waiting for the monitor's answers), so that any
 * call finds a new monitor. */
static int enter(struct chanos_domain *d)
{
    if (atomic_flag_test_and_set(&d->busy))
        return CHANOS_ERR_BUSY;
    if (d->lost)
        (void)rejoin_due(d, 0);
    return 0;
}

static void leave(struct chanos_domain *d)
{
    atomic_flag_clear(&d->busy);
}

/* ---- the directory (internal/rundir) ---- */

/* spin_from_env reads CHANOS_SPIN_WINDOW, as Go's chanos.Join does: a
 * duration of one number and a unit (ns, us, µs, ms, s; "0" alone) up to
 * 1000 s, or -1 to sleep at once. Unset or empty leaves *out alone;
 * anything else is -EINVAL. */
static int spin_from_env(int64_t *out)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = { { "ns", 1 }, { "us", 1e3 }, { "\xc2\xb5s", 1e3 }, { "ms", 1e6 }, { "s", 1e9 } };
    const char *v = getenv("CHANOS_SPIN_WINDOW");
    char *end;
    double x;

    if (v == NULL || v[0] == '\0')
        return 0;
    if (strcmp(v, "-1") == 0) {
        *out = -1;
        return 0;
    }
    errno = 0;
    x = strtod(v, &end);
    if (end == v || errno != 0 || !(x >= 0)) /* NaN too */
        return -EINVAL;
    if (*end == '\0') {
        if (x != 0)
            return -EINVAL; /* as Go: only 0 goes without a unit */
        return 0;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double ns = x * units[i].ns;

            if (ns > 1e12) /* over 1000 s: surely a mistake */
                return -EINVAL;
            *out = (int64_t)ns;
            return 0;
        }
    }
    return -EINVAL;
}

static int resolve_dir(char *out, size_t n, const char *dir)
{
    const char *x;
    int w;

    if (dir == NULL || dir[0] == '\0')
        dir = getenv("CHANOS_DIR");
    if (dir != NULL && dir[0] != '\0') {
        w = snprintf(out, n, "%s", dir);
    } else if ((x = getenv("XDG_RUNTIME_DIR")) != NULL && x[0] != '\0') {
        w = snprintf(out, n, "%s/chanos", x);
    } else {
        x = getenv("TMPDIR");
        if (x == NULL || x[0] == '\0')
            x = "/tmp";
        w = snprintf(out, n, "%s/chanos-%u", x, (unsigned)getuid());
    }
    if (w < 0 || (size_t)w >= n)
        return -ENAMETOOLONG;
    return 0;
}

/* check_dir applies the monitor's rule: a real directory of this user that
 * no one else may enter. A missing directory means no monitor. */
static int check_dir(const char *dir)
{
    struct stat st;

    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? CHANOS_ERR_NO_MONITOR : -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 0077) != 0)
        return CHANOS_ERR_UNSAFE_DIR;
    return 0;
}

/* monitor_is_ours checks that the process listening on the monitor's
 * socket, which s is connected to, runs as this user, as the kernel
 * recorded it (SO_PEERCRED): the monitor holds every token and hands out
 * every ring, and one of another user, whatever the directory's
 * permissions let happen, gets neither this domain's exports nor its
 * connections. */
static int monitor_is_ours(int s)
{
    struct ucred cr;
    socklen_t n = sizeof cr;

    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &n) != 0)
        return -errno;
    return cr.uid == getuid() ? 0 : CHANOS_ERR_UNSAFE_DIR;
}

/* ---- frames on the monitor socket ---- */

static void start_rejoin(struct chanos_domain *d, int tell);
static void join_fail(struct chanos_domain *d);
static int open_net(struct chanos_domain *d,
                    const struct chanos_net_binder *net);
static void close_net(struct chanos_domain *d);

/* fail_session ends the session: later calls fail with err, until a
 * rejoin (start_rejoin) if the domain rejoins. The session of a rejoin
 * attempt under way only fails that attempt: the loss was told already. */
static int fail_session(struct chanos_domain *d, int err)
{
    if (d->joining) {
        join_fail(d);
        return d->err;
    }
    if (d->err == 0) {
        d->err = err;
        if (err == CHANOS_ERR_MONITOR_LOST && d->rejoin && !d->lost)
            start_rejoin(d, 1);
    }
    return d->err;
}

/*
 * mon_send sends one frame, waiting until deadline (-1: forever) for room
 * in the monitor's receive queue: a stopped monitor stops reading, and a
 * send must not wait for it past the call's bound (CHANOS_ERR_TIMEDOUT).
 */
static int mon_send(struct chanos_domain *d, const uint8_t *frame, size_t len,
                    int64_t deadline)
{
    struct pollfd p = { d->sock, POLLOUT, 0 };
    ssize_t n;
    int rc;

    for (;;) {
        n = send(d->sock, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0 || (errno != EINTR && errno != EAGAIN))
            break;
        if (errno == EINTR)
            continue;
        rc = poll(&p, 1, remaining(deadline));
        if (rc < 0 && errno != EINTR)
            return -errno;
        if (rc == 0)
            return CHANOS_ERR_TIMEDOUT;
    }
    if (n < 0) {
        if (errno == EPIPE || errno == ECONNRESET)
            return fail_session(d, CHANOS_ERR_MONITOR_LOST);
        return -errno;
    }
    if ((size_t)n != len)
        return fail_session(d, CHANOS_ERR_MONITOR_LOST);
    return 0;
}

/*
 * mon_recv waits until deadline for one packet and reads it into d->rbuf
 * with its descriptors. 0, CHANOS_ERR_TIMEDOUT, or the session's end.
 */
static int mon_recv(struct chanos_domain *d, int64_t deadline,
                    struct mframe *f)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * CHANOS_MAX_CAPS)];
    } cbuf;
    struct iovec iov = { d->rbuf, MONITOR_MAX_FRAME_SIZE };
    struct msghdr mh;
    struct pollfd p = { d->sock, POLLIN, 0 };
    ssize_t n;
    int rc;

    bool ended = false;

    if (d->err != 0)
        return d->err;
    for (;;) {
        rc = poll(&p, 1, remaining(deadline));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -errno;
        if (rc == 0)
            return CHANOS_ERR_TIMEDOUT;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.b;
        mh.msg_controllen = sizeof cbuf.b;
        n = recvmsg(d->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        /*
         * The kernel may report the monitor's end before a packet it sent
         * just before it: a non-blocking read looks at the queue, then at
         * the end, and the packet and the close may come between the two
         * looks; and the reset of a monitor that closed with packets of
         * ours unread comes before the packets it sent. The end stays, and
         * nothing more can come: one more read finds what it sent.
         */
        if (!ended && ((n == 0 && mh.msg_controllen == 0) ||
                       (n < 0 && errno == ECONNRESET))) {
            ended = true;
            continue;
        }
        break;
    }
    if (n < 0)
        return fail_session(d, CHANOS_ERR_MONITOR_LOST);
    f->len = (size_t)n;
    f->nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL;
         c = CMSG_NXTHDR(&mh, c)) {
        size_t k;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (f->nfds < CHANOS_MAX_CAPS)
                f->fds[f->nfds++] = fd;
            else
                close(fd);
        }
    }
    if (n == 0) {
        close_fds(f->fds, f->nfds);
        return fail_session(d, CHANOS_ERR_MONITOR_LOST);
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        /* a frame over the protocol's bound, or descriptors lost */
        close_fds(f->fds, f->nfds);
        return fail_session(d, CHANOS_ERR_MONITOR_LOST);
    }
    return 0;
}

/* listener_of returns the open listener of the export of id and token,
 * or NULL. */
static struct chanos_listener *listener_of(struct chanos_domain *d,
                                           uint64_t id, const uint8_t *token)
{
    struct chanos_listener *l;

    for (l = d->listeners; l != NULL; l = l->next) {
        if (l->ref.export_id == id &&
            memcmp(l->ref.token, token, sizeof l->ref.token) == 0)
            break;
    }
    return l;
}

/* unclaimed tells whether a connection to the export of id and token can
 * never be accepted: no listener has that iref (it was closed, or the
 * connection reached it after its close), and no export waits for its
 * reply, whose iref it may be. Such a connection is closed at once, so
 * that its client sees it end rather than wait until the domain closes. */
static int unclaimed(struct chanos_domain *d, uint64_t id,
                     const uint8_t *token)
{
    return listener_of(d, id, token) == NULL && !d->exporting &&
           !(d->joining && d->join_l != NULL);
}

/* drop_unclaimed closes the queued connections that are unclaimed, once
 * an export has its reply. */
static void drop_unclaimed(struct chanos_domain *d)
{
    size_t j = 0;

    for (size_t i = 0; i < d->nin; i++) {
        if (unclaimed(d, d->in[i].export_id, d->in[i].token))
            drop_pending(&d->in[i]);
        else
            d->in[j++] = d->in[i];
    }
    d->nin = j;
}

/* grant_net hands the binder a connection from another machine that the
 * monitor announced, and the TCP listener that came with it, if any; the
 * client's handshake then finds it admitted, and take_net queues it. A
 * domain that does not accept drops it, and so does one whose listener
 * for it is gone: the client's dial fails. */
static int grant_net(struct chanos_domain *d, struct monitor_incoming *in)
{
    char name[MONITOR_INCOMING_NET_NAME_MAX + 1];
    struct chanos_net_grant g = { 0 };
    struct pending_in p = { 0 };
    uint32_t i = 0;

    if (d->epfd < 0) {
        close_fds(in->fds, in->nfds);
        return 0;
    }
    /* the TCP listener is the domain's, for all its exports */
    for (; i < in->nfds; i++)
        (void)d->net->listen(d->netst, in->fds[i], in->max_frame);
    if (unclaimed(d, in->ref.export_id, in->ref.token))
        return 0;
    p.export_id = in->ref.export_id;
    memcpy(p.token, in->ref.token, sizeof p.token);
    p.max_frame = in->max_frame;
    for (i = 0; i < UMP_NFDS; i++)
        p.fds[i] = -1;
    p.peer.domain = in->client;
    p.peer.machine = in->client_machine;
    p.peer.pid = in->client_pid;
    p.peer.uid = in->client_uid;
    snprintf(p.peer.program, sizeof p.peer.program, "%.*s",
             (int)in->client_program.len, in->client_program.ptr);
    snprintf(name, sizeof name, "%.*s", (int)in->net_name.len,
             in->net_name.ptr);
    g.server_name = name;
    g.peer = in->net_peer;
    g.cert = in->net_cert.ptr;
    g.cert_len = in->net_cert.len;
    g.key = in->net_key.ptr;
    g.key_len = in->net_key.len;
    g.auth_only = in->net_auth_only;
    g.conn_id = in->conn_id;
    g.tag = &p;
    g.tag_len = sizeof p;
    (void)d->net->grant(d->netst, &g); /* refused: the client's dial fails */
    return 0;
}

/* take_net queues for chanos_accept the connections from other machines
 * that the binder has admitted: how many. One whose listener closed
 * between its grant and now is closed. */
static int take_net(struct chanos_domain *d)
{
    int n = 0;

    if (d->epfd < 0)
        return 0;
    for (;;) {
        union {
            struct pending_in p;
            uint8_t b[CHANOS_NET_GRANT_TAG_MAX];
        } tag;
        size_t len = sizeof tag;
        chanos_conn *c;

        if (d->net->accept(d->netst, &c, &tag, &len) != 0)
            return n;
        if (len != sizeof tag.p || d->nin == INCOMING_LIMIT ||
            unclaimed(d, tag.p.export_id, tag.p.token)) {
            chanos_conn_close(c);
            continue;
        }
        chanos_conn_set_domain_(c, d->key, chanos_domain_export_endpoint_);
        d->in[d->nin] = tag.p;
        d->in[d->nin++].local = c;
        n++;
    }
}

/* queue_incoming decodes an incoming message and holds it for accept. */
static int queue_incoming(struct chanos_domain *d, struct mframe *f)
{
    struct monitor_incoming in;
    struct pending_in *p;
    int rc = monitor_incoming_decode(&in, d->rbuf, f->len, f->fds, f->nfds);

    if (rc != 0)
        return rc;
    /* the descriptors beyond those decoded are not the message's */
    for (uint32_t i = in.nfds; i < f->nfds; i++)
        close(f->fds[i]);
    if (in.via == MONITOR_INTERCONNECT_NET)
        return grant_net(d, &in);
    if (in.via != MONITOR_INTERCONNECT_UMP || in.nfds != UMP_NFDS ||
        d->nin == INCOMING_LIMIT ||
        unclaimed(d, in.ref.export_id, in.ref.token)) {
        /* the client sees the connection close */
        close_fds(in.fds, in.nfds);
        return 0;
    }
    p = &d->in[d->nin++];
    p->export_id = in.ref.export_id;
    memcpy(p->token, in.ref.token, sizeof p->token);
    p->max_frame = in.max_frame;
    memcpy(p->fds, in.fds, sizeof p->fds);
    p->local = NULL;
    p->peer.domain = in.client;
    p->peer.machine = d->machine;
    p->peer.pid = in.client_pid;
    p->peer.uid = in.client_uid;
    snprintf(p->peer.program, sizeof p->peer.program, "%.*s",
             (int)in.client_program.len, in.client_program.ptr);
    return 0;
}

static int join_reply(struct chanos_domain *d, struct mframe *f);

/*
 * dispatch handles one frame from the monitor. If it is the reply to call
 * id want, it returns 1 and leaves the frame and its fds in f; anything
 * else is consumed (0: a reply to a rejoin attempt's call takes it a step
 * further) or breaks the protocol (the session ends).
 */
static int dispatch(struct chanos_domain *d, struct mframe *f, uint32_t want)
{
    struct chanos_hdr h;
    int kind, rc = chanos_hdr_parse(&h, d->rbuf, f->len);

    if (rc == 0) {
        kind = chanos_hdr_kind(&h);
        if (kind < 0) {
            rc = kind;
        } else if (kind == CHANOS_KIND_REPLY || kind == CHANOS_KIND_ERROR) {
            if (want != 0 && h.call_id == want)
                return 1;
            if (d->joining && h.call_id == d->join_call)
                return join_reply(d, f);
            close_fds(f->fds, f->nfds); /* a call given up */
            return 0;
        } else if (kind == CHANOS_KIND_MESSAGE &&
                   h.msg == MONITOR_MSG_INCOMING) {
            rc = queue_incoming(d, f);
            if (rc == 0)
                return 0;
        } else if (kind == CHANOS_KIND_MESSAGE &&
                   h.msg == MONITOR_MSG_PEER_GONE) {
            /* A net connection's peer has gone: the binder ends it at
             * once, where its link would learn it only from a refused
             * resume or the end of its grace period. */
            struct monitor_peer_gone g;

            rc = monitor_peer_gone_decode(&g, d->rbuf, f->len, f->fds, f->nfds);
            if (rc == 0) {
                close_fds(f->fds, f->nfds);
                if (d->net != NULL && d->net->peer_gone != NULL)
                    d->net->peer_gone(d->netst, g.conn_id, g.network_lost);
                return 0;
            }
        } else if (kind == CHANOS_KIND_MESSAGE && h.msg == MONITOR_MSG_PING) {
            /* The monitor sees from its socket that we read it: reading is
             * the answer (docs/quotas.md, "Idle sessions"). */
            struct monitor_ping ping;

            rc = monitor_ping_decode(&ping, d->rbuf, f->len, f->fds, f->nfds);
            if (rc == 0) {
                close_fds(f->fds, f->nfds);
                return 0;
            }
        } else {
            rc = CHANOS_ERR_HEADER;
        }
    }
    close_fds(f->fds, f->nfds);
    (void)rc;
    return fail_session(d, CHANOS_ERR_MONITOR_LOST);
}

static int status_error(uint64_t code)
{
    switch (code) {
    case MONITOR_STATUS_INVALID:
        return CHANOS_ERR_INVALID;
    case MONITOR_STATUS_EXISTS:
        return CHANOS_ERR_EXISTS;
    case MONITOR_STATUS_NOT_FOUND:
        return CHANOS_ERR_NOT_FOUND;
    case MONITOR_STATUS_MISMATCH:
        return CHANOS_ERR_MISMATCH;
    case MONITOR_STATUS_LIMIT:
        return CHANOS_ERR_LIMIT;
    case MONITOR_STATUS_DENIED:
        return CHANOS_ERR_DENIED;
    case MONITOR_STATUS_NO_ROUTE:
        return CHANOS_ERR_NO_ROUTE;
    }
    return CHANOS_ERR_MONITOR;
}

/* error_reply reads the error reply in d->rbuf, closing f's
 * descriptors: its CHANOS_ERR_* code, its detail kept for
 * chanos_domain_error. */
static int error_reply(struct chanos_domain *d, struct mframe *f)
{
    struct chanos_frame fr;
    struct chanos_status st;
    size_t n;

    close_fds(f->fds, f->nfds);
    fr.data = d->rbuf;
    fr.len = f->len;
    chanos_hdr_load(&fr.hdr, d->rbuf);
    fr.kind = CHANOS_KIND_ERROR;
    if (chanos_frame_status(&fr, &st) != 0)
        return fail_session(d, CHANOS_ERR_MONITOR_LOST);
    n = st.detail.len < CHANOS_DOMAIN_ERROR_MAX ? st.detail.len
                                                : CHANOS_DOMAIN_ERROR_MAX;
    memcpy(d->detail, st.detail.ptr, n);
    d->detail[n] = '\0';
    return status_error(st.code);
}

/* set_call gives the call in frame a fresh call id and timeout_us from
 * timeout_ms (none if not above 0): the id. */
static uint32_t set_call(struct chanos_domain *d, uint8_t *frame,
                         int timeout_ms)
{
    uint32_t id, tus = 0;

    id = ++d->next_call;
    if (id == 0)
        id = ++d->next_call;
    if (timeout_ms > 0)
        tus = (uint64_t)timeout_ms * 1000 >= UINT32_MAX
                  ? UINT32_MAX
                  : (uint32_t)timeout_ms * 1000;
    chanos_hdr_set_call(frame, id, tus);
    return id;
}

static int settle(struct chanos_domain *d, int64_t deadline);

/*
 * mon_call sends the call encoded in b (fresh call id; timeout_us from
 * timeout_ms) and waits for its reply for wait_ms (-1: forever). On
 * success the reply is in d->rbuf and f (the caller owns f's fds). An
 * error reply becomes its CHANOS_ERR_* code. A call that times out is
 * cancelled. A rejoin attempt under way is waited for first, within the
 * same wait_ms: a call needs the session that the attempt makes.
 */
static int mon_call(struct chanos_domain *d, struct chanos_buf *b,
                    uint16_t msg, int timeout_ms, int wait_ms,
                    struct mframe *f)
{
    int64_t deadline = deadline_of(wait_ms);
    uint32_t id;
    int rc;

    rc = settle(d, deadline);
    if (rc != 0)
        return rc;
    d->detail[0] = '\0';
    id = set_call(d, b->data, timeout_ms);
    rc = mon_send(d, b->data, b->len, deadline);
    if (rc != 0)
        return rc;
    for (;;) {
        rc = mon_recv(d, deadline, f);
        if (rc == CHANOS_ERR_TIMEDOUT) {
            uint8_t cancel[CHANOS_HEADER_SIZE];
            struct chanos_hdr h = { CHANOS_HEADER_SIZE, msg,
                                    CHANOS_KIND_CANCEL, 0, id, 0 };

            chanos_hdr_put(cancel, &h);
            /* best effort, without waiting: the call is given up */
            (void)mon_send(d, cancel, sizeof cancel, now_ms());
            return CHANOS_ERR_TIMEDOUT;
        }
        if (rc != 0)
            return rc;
        rc = dispatch(d, f, id);
        if (rc < 0)
            return rc;
        if (rc == 1)
            break;
    }
    if (d->rbuf[6] == CHANOS_KIND_ERROR)
        return error_reply(d, f);
    return 0;
}

/* mon_rpc makes the call in b, bounded by the domain's call timeout,
 * whose reply carries no descriptors, and leaves the reply in d->rbuf,
 * *len bytes long. */
static int mon_rpc(struct chanos_domain *d, struct chanos_buf *b,
                   uint16_t msg, size_t *len)
{
    struct mframe f;
    int rc = mon_call(d, b, msg, d->call_timeout_ms, d->call_timeout_ms, &f);

    if (rc != 0)
        return rc;
    close_fds(f.fds, f.nfds);
    *len = f.len;
    return 0;
}

/* ---- monitor loss and rejoin ---- */

static void tell(struct chanos_domain *d, int event, int err)
{
    if (d->on_monitor != NULL)
        d->on_monitor(d->on_monitor_arg, event, err);
}

/* arm sets the timer at d->sock to fire in ms milliseconds. */
static void arm(struct chanos_domain *d, int ms)
{
    struct itimerspec it = { { 0, 0 }, { ms / 1000, (long)(ms % 1000) * 1000000 } };

    (void)timerfd_settime(d->sock, 0, &it, NULL);
}

/* watch_sock has the domain's epoll descriptor watch what d->sock now is:
 * the file a dup3 put at its number is a new one to epoll. */
static void watch_sock(struct chanos_domain *d)
{
    struct epoll_event ev = { .events = EPOLLIN };

    if (d->epfd < 0)
        return;
    ev.data.fd = d->sock;
    (void)epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->sock, &ev); /* EEXIST: same file */
}

/* start_rejoin puts a timer in the place of the dead socket, at its
 * number, so that a program that polls chanos_domain_fd wakes when a
 * rejoin attempt is due; tell: say that the session was lost. */
static void start_rejoin(struct chanos_domain *d, int tell_lost)
{
    int t = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);

    if (t >= 0) {
        if (dup3(t, d->sock, O_CLOEXEC) < 0) {
            close(d->sock); /* a dead socket: polls of it say so at once */
            d->sock = t;
        } else {
            close(t);
        }
        watch_sock(d);
    }
    d->lost = 1;
    if (tell_lost)
        d->retry_ms = REJOIN_FIRST_MS;
    arm(d, d->retry_ms);
    if (tell_lost)
        tell(d, CHANOS_MONITOR_LOST, CHANOS_ERR_MONITOR_LOST);
}

/* back_off arms the next rejoin attempt, after a wait twice the last
 * (up to REJOIN_MAX_MS). */
static void back_off(struct chanos_domain *d)
{
    d->retry_ms = d->retry_ms * 2 > REJOIN_MAX_MS ? REJOIN_MAX_MS
                                                  : d->retry_ms * 2;
    start_rejoin(d, 0);
}

/* join_fail ends a rejoin attempt that failed (no answer in time, an
 * error to hello, the new session broken): its session is closed, so that
 * the monitor withdraws what it exported again, and the next attempt is
 * armed. Connections that were queued for an export whose reply will not
 * come now are closed. */
static void join_fail(struct chanos_domain *d)
{
    d->joining = 0;
    d->join_l = NULL;
    d->join_deadline = -1;
    d->err = CHANOS_ERR_MONITOR_LOST;
    back_off(d);
    drop_unclaimed(d);
}

/* join_send sends call (len bytes) as the attempt's next step: the hello
 * (l NULL) or l's export again. It does not wait: a new session's socket
 * has room for one small call. 0, or CHANOS_ERR_MONITOR_LOST: the attempt
 * failed. */
static int join_send(struct chanos_domain *d, const uint8_t *call,
                     size_t len, struct chanos_listener *l)
{
    uint8_t cb[CALL_BUF];
    uint32_t id;

    memcpy(cb, call, len);
    id = set_call(d, cb, d->call_timeout_ms);
    if (mon_send(d, cb, len, now_ms()) != 0) {
        if (d->joining)
            join_fail(d);
        return CHANOS_ERR_MONITOR_LOST;
    }
    d->join_call = id;
    d->join_l = l;
    d->join_deadline = deadline_of(d->call_timeout_ms);
    return 0;
}

/* join_next exports again the next listener that waits for it, or, with
 * none left, ends the attempt: the domain has rejoined. */
static int join_next(struct chanos_domain *d)
{
    struct chanos_listener *l;

    for (l = d->listeners; l != NULL && !l->rejoin_pending; l = l->next)
        ;
    if (l != NULL)
        return join_send(d, l->call, l->call_len, l);
    d->joining = 0;
    d->join_l = NULL;
    d->join_deadline = -1;
    drop_unclaimed(d);
    tell(d, CHANOS_MONITOR_REJOINED, d->join_first);
    return 0;
}

/* join_reply takes the monitor's answer to the attempt's call, in
 * d->rbuf and f: the hello's, then each listener's export again, one at a
 * time. 0, or CHANOS_ERR_MONITOR_LOST if it failed the attempt. */
static int join_reply(struct chanos_domain *d, struct mframe *f)
{
    struct chanos_listener *l = d->join_l;
    int rc = 0;

    if (d->rbuf[6] == CHANOS_KIND_ERROR) {
        rc = error_reply(d, f);
        if (!d->joining)
            return CHANOS_ERR_MONITOR_LOST; /* it did not decode */
    }
    if (l == NULL) {
        struct monitor_hello_reply reply;

        if (rc == 0) {
            rc = monitor_hello_reply_decode(&reply, d->rbuf, f->len, f->fds,
                                            f->nfds);
            close_fds(f->fds, f->nfds);
            if (rc == 0 && reply.monitor_version != PROTOCOL_VERSION)
                rc = CHANOS_ERR_MONITOR_LOST;
        }
        if (rc != 0) {
            /* a monitor that will not have the domain yet (full, say) is
             * asked again at the next attempt */
            join_fail(d);
            return CHANOS_ERR_MONITOR_LOST;
        }
        d->id = reply.domain_id;
        d->machine = reply.machine_id;
        for (l = d->listeners; l != NULL; l = l->next)
            l->rejoin_pending = !l->handed;
        return join_next(d);
    }
    if (rc == 0) {
        struct monitor_export_reply reply;
        uint64_t old = l->ref.export_id;

        rc = monitor_export_reply_decode(&reply, d->rbuf, f->len, f->fds,
                                         f->nfds);
        close_fds(f->fds, f->nfds);
        if (rc != 0) {
            join_fail(d);
            return CHANOS_ERR_MONITOR_LOST;
        }
        /* connections of the old monitor not yet accepted stay l's */
        for (size_t i = 0; i < d->nin; i++) {
            if (d->in[i].export_id == old &&
                memcmp(d->in[i].token, l->ref.token, sizeof l->ref.token) == 0) {
                d->in[i].export_id = reply.ref.export_id;
                memcpy(d->in[i].token, reply.ref.token, sizeof reply.ref.token);
            }
        }
        l->ref = reply.ref;
        l->err = 0; /* exported again: an earlier attempt's failure is over */
    } else {
        /* the monitor's answer (the name is taken): accept fails with it */
        l->err = rc;
        if (d->join_first == 0)
            d->join_first = rc;
    }
    l->rejoin_pending = 0;
    return join_next(d);
}

/* join_begin begins a rejoin attempt and waits for nothing: it dials the
 * directory's socket (once: a monitor whose queue of connections is full
 * is dialled again at the next attempt) and sends hello; the monitor's
 * answers take the attempt on (join_reply) in whichever call reads the
 * socket. 0, or CHANOS_ERR_MONITOR_LOST with the next attempt armed. */
static int join_begin(struct chanos_domain *d)
{
    struct sockaddr_un sa = { 0 };
    char dir[sizeof sa.sun_path];
    int s;

    /* checked at every attempt, as at join: the directory may have gone
     * with the monitor, and been made again by someone else */
    if (monitor_dir(d, dir) != 0 || check_dir(dir) == CHANOS_ERR_UNSAFE_DIR) {
        back_off(d);
        return CHANOS_ERR_MONITOR_LOST;
    }
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, d->path, sizeof sa.sun_path);
    s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect_within(s, &sa, 0) != 0 || monitor_is_ours(s) != 0 ||
        dup3(s, d->sock, O_CLOEXEC) < 0) {
        if (s >= 0)
            close(s);
        back_off(d);
        return CHANOS_ERR_MONITOR_LOST;
    }
    close(s);
    watch_sock(d);
    d->err = 0;
    d->lost = 0;
    d->joining = 1;
    d->join_first = 0;
    for (struct chanos_listener *l = d->listeners; l != NULL; l = l->next)
        l->rejoin_pending = 0;
    return join_send(d, d->hello, d->hello_len, NULL);
}

/* rejoin_due waits up to wait_ms (-1: as long as it takes) for the next
 * rejoin attempt to be due, and begins it: 0 if it began,
 * CHANOS_ERR_TIMEDOUT if none was due, CHANOS_ERR_MONITOR_LOST if it
 * failed at once. */
static int rejoin_due(struct chanos_domain *d, int wait_ms)
{
    struct pollfd p = { d->sock, POLLIN, 0 };
    uint64_t ticks;
    int rc;

    do
        rc = poll(&p, 1, wait_ms);
    while (rc < 0 && errno == EINTR);
    if (rc <= 0)
        return CHANOS_ERR_TIMEDOUT;
    (void)!read(d->sock, &ticks, sizeof ticks);
    return join_begin(d);
}

/* settle waits until deadline (-1: as long as it takes) for the rejoin
 * attempt under way to end, beginning first one that is due: 0 once the
 * domain has a session, CHANOS_ERR_MONITOR_LOST while it has none, or
 * CHANOS_ERR_TIMEDOUT if the attempt is still unanswered at deadline. */
static int settle(struct chanos_domain *d, int64_t deadline)
{
    struct mframe f;
    int rc;

    if (d->lost)
        (void)rejoin_due(d, 0);
    while (d->joining) {
        int64_t until = d->join_deadline;

        if (until >= 0 && now_ms() >= until) {
            join_fail(d);
            break;
        }
        if (until < 0 || (deadline >= 0 && deadline < until))
            until = deadline;
        rc = mon_recv(d, until, &f);
        if (rc == CHANOS_ERR_TIMEDOUT) {
            if (until == deadline)
                return rc;
            continue;
        }
        if (rc == 0)
            (void)dispatch(d, &f, 0);
        else if (d->joining)
            return rc; /* the socket could not be read */
    }
    return d->err;
}

int chanos_domain_wait_ms_(const chanos_domain *d)
{
    return d->joining ? remaining(d->join_deadline) : -1;
}

/* ---- the session ---- */

static const char *program_name(void)
{
    static char buf[257];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    const char *slash;

    if (n <= 0)
        return "c-domain";
    buf[n] = '\0';
    slash = strrchr(buf, '/');
    return slash != NULL ? slash + 1 : buf;
}

int chanos_join(chanos_domain **out, const struct chanos_join_opts *opts)
{
    struct chanos_join_opts o = { 0 };
    struct sockaddr_un sa = { 0 };
    char dir[sizeof sa.sun_path];
    struct chanos_domain *d;
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    struct monitor_hello_call call = { 0 };
    struct monitor_hello_reply reply;
    struct mframe f;
    size_t plen;
    int rc;

    *out = NULL;
    if (opts != NULL)
        o = *opts;
    if (o.timeout_ms == 0)
        o.timeout_ms = DEFAULT_CALL_TIMEOUT_MS;
    if (o.timeout_ms < 0)
        o.timeout_ms = -1;
    if (o.program == NULL)
        o.program = program_name();
    if (o.spin_ns == 0 && (rc = spin_from_env(&o.spin_ns)) != 0)
        return rc;
    rc = resolve_dir(dir, sizeof dir - sizeof "/monitor.sock", o.dir);
    if (rc != 0)
        return rc;
    rc = check_dir(dir);
    if (rc != 0)
        return rc;
    sa.sun_family = AF_UNIX;
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/monitor.sock",
                         dir) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;

    d = calloc(1, sizeof *d);
    if (d == NULL)
        return -ENOMEM;
    d->net_wait = d->epfd = -1;
    atomic_flag_clear(&d->busy);
    d->spin_ns = o.spin_ns;
    d->call_timeout_ms = o.timeout_ms;
    d->rbuf = malloc(MONITOR_MAX_FRAME_SIZE);
    if (d->rbuf == NULL) {
        free(d);
        return -ENOMEM;
    }
    d->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (d->sock < 0) {
        rc = -errno;
        goto fail;
    }
    rc = connect_within(d->sock, &sa, o.timeout_ms);
    if (rc != 0) {
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            rc = CHANOS_ERR_NO_MONITOR;
        goto fail;
    }
    rc = monitor_is_ours(d->sock);
    if (rc != 0)
        goto fail;

    plen = strlen(o.program);
    if (plen > MONITOR_HELLO_PROGRAM_MAX)
        plen = MONITOR_HELLO_PROGRAM_MAX;
    call.version = PROTOCOL_VERSION;
    /* FEATURE_NET: binds to other machines, through the binder given;
     * FEATURE_NET_ACCEPT: connections from them, if it accepts. */
    call.features = o.net != NULL && o.net->dial != NULL ? FEATURE_NET : 0;
    rc = open_net(d, o.net);
    if (rc != 0)
        goto fail;
    if (d->epfd >= 0)
        call.features |= FEATURE_NET_ACCEPT;
    /* The spawn service's proof of which program it started this one as
     * (docs/spawn.md); one over hello's bound is not sent. */
    {
        const char *tok = getenv("CHANOS_SPAWN_TOKEN");
        if (tok != NULL && strlen(tok) <= MONITOR_HELLO_SPAWN_TOKEN_MAX)
            call.spawn_token = chanos_cstr(tok);
    }
    call.program.ptr = o.program;
    call.program.len = (uint32_t)plen;
    memcpy(d->program, o.program, plen);
    d->program[plen] = '\0';
    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    rc = monitor_hello_call_encode(&call, &b);
    if (rc != 0)
        goto fail;
    d->hello = malloc(b.len);
    if (d->hello == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    memcpy(d->hello, b.data, b.len);
    d->hello_len = b.len;
    memcpy(d->path, sa.sun_path, sizeof d->path);
    rc = mon_call(d, &b, MONITOR_MSG_HELLO, o.timeout_ms, o.timeout_ms, &f);
    if (rc == CHANOS_ERR_LIMIT)
        rc = CHANOS_ERR_MONITOR_FULL; /* "monitor full: N of N sessions" */
    if (rc != 0)
        goto fail;
    rc = monitor_hello_reply_decode(&reply, d->rbuf, f.len, f.fds, f.nfds);
    close_fds(f.fds, f.nfds);
    if (rc != 0 || reply.monitor_version != PROTOCOL_VERSION) {
        rc = CHANOS_ERR_MONITOR_LOST;
        goto fail;
    }
    d->id = reply.domain_id;
    d->machine = reply.machine_id;
    d->rejoin = (o.flags & CHANOS_JOIN_NO_REJOIN) == 0;
    d->on_monitor = o.on_monitor;
    d->on_monitor_arg = o.on_monitor_arg;
    domain_register(d);
    *out = d;
    return 0;
fail:
    close_net(d);
    if (d->sock >= 0)
        close(d->sock);
    free(d->hello);
    free(d->rbuf);
    free(d);
    return rc;
}

/* open_net opens the binder's state for the domain and, if it accepts,
 * the epoll descriptor of the monitor's socket and the binder's. */
static int open_net(struct chanos_domain *d, const struct chanos_net_binder *net)
{
    struct epoll_event ev = { .events = EPOLLIN };
    int rc;

    d->net = net;
    if (net == NULL || net->open == NULL)
        return 0;
    rc = net->open(&d->netst, &d->net_wait);
    if (rc != 0) {
        d->net = NULL;
        return rc;
    }
    if (d->net_wait < 0 || net->listen == NULL || net->grant == NULL ||
        net->accept == NULL)
        return 0;
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0)
        return -errno;
    ev.data.fd = d->net_wait;
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->net_wait, &ev) != 0)
        return -errno;
    watch_sock(d);
    return 0;
}

/* close_net closes the binder's state; connections it made go on. */
static void close_net(struct chanos_domain *d)
{
    if (d->epfd >= 0)
        close(d->epfd);
    d->epfd = -1;
    if (d->net != NULL && d->net->close != NULL && d->netst != NULL)
        d->net->close(d->netst);
    d->netst = NULL;
}

static void free_listener(struct chanos_listener *l)
{
    struct chanos_domain *d = l->d;
    size_t j = 0;

    /* unlink it, and close the connections it did not accept */
    for (struct chanos_listener **p = &d->listeners; *p != NULL;
         p = &(*p)->next) {
        if (*p == l) {
            *p = l->next;
            break;
        }
    }
    for (size_t i = 0; i < d->nin; i++) {
        if (d->in[i].export_id == l->ref.export_id &&
            memcmp(d->in[i].token, l->ref.token, sizeof l->ref.token) == 0)
            drop_pending(&d->in[i]);
        else
            d->in[j++] = d->in[i];
    }
    d->nin = j;
    free(l->call);
    free(l->name);
    free(l);
}

void chanos_domain_close(chanos_domain *d)
{
    if (d == NULL)
        return;
    domain_unregister(d);
    d->joining = 0;
    d->join_l = NULL;
    while (d->listeners != NULL)
        free_listener(d->listeners);
    for (size_t i = 0; i < d->nin; i++)
        drop_pending(&d->in[i]);
    close_net(d);
    close(d->sock);
    free(d->hello);
    free(d->rbuf);
    free(d);
}

uint64_t chanos_domain_id(const chanos_domain *d) { return d->id; }

uint64_t chanos_domain_machine(const chanos_domain *d) { return d->machine; }

int chanos_domain_fd(const chanos_domain *d)
{
    return d->epfd >= 0 ? d->epfd : d->sock;
}

/* wait_net waits until deadline for the monitor's socket or a connection
 * from another machine: 1 when the socket is readable (and nothing else
 * was), 0 when connections were queued for accept, or
 * CHANOS_ERR_TIMEDOUT. */
static int wait_net(struct chanos_domain *d, int64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = { { d->sock, POLLIN, 0 },
                               { d->net_wait, POLLIN, 0 } };
        int rc;

        if (take_net(d) > 0)
            return 0;
        rc = poll(p, 2, remaining(deadline));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -errno;
        if (rc == 0)
            return CHANOS_ERR_TIMEDOUT;
        if (p[0].revents != 0)
            return 1;
        /* only the binder's: take what it has, or wait on if it was a
         * connection that failed between admission and accept */
    }
}

/*
 * pump reads frames until deadline or the first frame (any): 0 once one
 * came. While the domain is lost, it waits for the next rejoin attempt
 * and begins it; while an attempt is under way, the monitor's answers
 * take it on, and one not answered by the attempt's deadline fails. A
 * failed attempt is no news to the caller (the loss was told): pump waits
 * on for the next.
 */
static int pump(struct chanos_domain *d, int64_t deadline)
{
    struct mframe f;
    int joining, rc;

    for (;;) {
        int64_t until = deadline;

        if (d->lost) {
            rc = rejoin_due(d, remaining(deadline));
            if (rc == CHANOS_ERR_TIMEDOUT)
                return rc;
            continue; /* begun, or failed and armed again */
        }
        if (d->joining && d->join_deadline >= 0) {
            if (now_ms() >= d->join_deadline) {
                join_fail(d);
                continue;
            }
            if (deadline < 0 || d->join_deadline < deadline)
                until = d->join_deadline;
        }
        joining = d->joining;
        if (d->epfd >= 0) {
            rc = wait_net(d, until);
            if (rc == CHANOS_ERR_TIMEDOUT && until != deadline)
                continue;
            if (rc != 1)
                return rc;
        }
        rc = mon_recv(d, until, &f);
        if (rc == CHANOS_ERR_TIMEDOUT && until != deadline)
            continue;
        if (rc == 0)
            rc = dispatch(d, &f, 0);
        if (rc < 0 && joining && d->lost)
            continue;
        return rc < 0 ? rc : 0;
    }
}

int chanos_domain_poll(chanos_domain *d, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);
    int rc = enter(d);

    if (rc != 0)
        return rc;
    do {
        rc = pump(d, deadline);
        /* after the first frame, take only what is there already */
        deadline = now_ms();
    } while (rc == 0);
    leave(d);
    return rc == CHANOS_ERR_TIMEDOUT ? 0 : rc;
}

/* export_fp makes the export call; fingerprint 0 declares none, and
 * definition NULL gives a reflection service none. */
static int export_fp(chanos_domain *d, const char *name, const char *iface,
                     uint32_t max_frame, uint64_t fingerprint,
                     const char *const *definition,
                     const struct chanos_export_opts *opts,
                     chanos_listener **out);

int chanos_export(chanos_domain *d, const char *name, const char *iface,
                  uint32_t max_frame, chanos_listener **out)
{
    return export_fp(d, name, iface, max_frame, 0, NULL, NULL, out);
}

int chanos_export_with(chanos_domain *d, const char *name, const char *iface,
                       uint32_t max_frame, const struct chanos_export_opts *opts,
                       chanos_listener **out)
{
    return export_fp(d, name, iface, max_frame, 0, NULL, opts, out);
}

int chanos_export_iface(chanos_domain *d, const char *name,
                        const struct chanos_interface *iface,
                        const struct chanos_export_opts *opts,
                        chanos_listener **out)
{
    if (iface == NULL) {
        *out = NULL;
        return -EINVAL;
    }
    return export_fp(d, name, iface->name, iface->max_frame,
                     iface->fingerprint, iface->definition, opts, out);
}

int chanos_export_suffixed_(chanos_domain *d, const char *name,
                            const char *suffix,
                            const struct chanos_interface *iface,
                            chanos_listener **out)
{
    size_t n = strlen(name), k = strlen(suffix) + 1;
    char *full = malloc(n + k);
    int rc;

    *out = NULL;
    if (full == NULL)
        return -ENOMEM;
    memcpy(full, name, n);
    memcpy(full + n, suffix, k);
    rc = chanos_export_iface(d, full, iface, NULL, out);
    free(full);
    return rc;
}

const char *chanos_domain_error(const chanos_domain *d)
{
    return d->detail;
}

/* join_programs writes the allowed programs of o into buf, '\n' between
 * two, as the export call carries them: the number of bytes, or
 * CHANOS_ERR_INVALID for a program that is empty, over hello's bound or
 * holds a newline, or for a list over the call's bound. */
static int join_programs(const struct chanos_export_opts *o, char *buf,
                         size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < o->nprograms; i++) {
        const char *p = o->programs[i];
        size_t len = p != NULL ? strlen(p) : 0;

        if (len == 0 || len > MONITOR_HELLO_PROGRAM_MAX ||
            memchr(p, '\n', len) != NULL)
            return CHANOS_ERR_INVALID;
        if (n + (i > 0) + len > cap)
            return CHANOS_ERR_INVALID;
        if (i > 0)
            buf[n++] = '\n';
        memcpy(buf + n, p, len);
        n += len;
    }
    return (int)n;
}

/* new_listener makes the listener of name, keeping its export call to
 * make again on a rejoin; not yet linked to a domain. */
static int new_listener(const char *name, const struct monitor_export_call *call,
                        struct chanos_listener **out)
{
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    struct chanos_listener *l;
    int rc;

    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    rc = monitor_export_call_encode(call, &b);
    if (rc == CHANOS_ERR_BOUND || rc == CHANOS_ERR_NUL)
        return CHANOS_ERR_INVALID;
    if (rc != 0)
        return rc;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return -ENOMEM;
    l->name = strdup(name);
    l->call = malloc(b.len);
    if (l->name == NULL || l->call == NULL) {
        free(l->name);
        free(l->call);
        free(l);
        return -ENOMEM;
    }
    memcpy(l->call, b.data, b.len);
    l->call_len = b.len;
    l->max_frame = call->max_frame;
    *out = l;
    return 0;
}

static int export_fp(chanos_domain *d, const char *name, const char *iface,
                     uint32_t max_frame, uint64_t fingerprint,
                     const char *const *definition,
                     const struct chanos_export_opts *opts,
                     chanos_listener **out)
{
    static const struct chanos_export_opts none = { 0 };
    struct monitor_export_call call = { 0 };
    struct monitor_export_reply reply;
    struct chanos_listener *l;
    char programs[MONITOR_EXPORT_PROGRAMS_MAX];
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    size_t n;
    int rc;

    *out = NULL;
    if (name == NULL || iface == NULL)
        return -EINVAL;
    if (opts == NULL)
        opts = &none;
    if ((opts->flags & ~(unsigned)CHANOS_EXPORT_PRIVATE) != 0 ||
        opts->nuids > MONITOR_EXPORT_UIDS_MAX ||
        (opts->nuids > 0 && opts->uids == NULL) ||
        (opts->nprograms > 0 && opts->programs == NULL))
        return CHANOS_ERR_INVALID;
    rc = join_programs(opts, programs, sizeof programs);
    if (rc < 0)
        return rc;
    call.name = chanos_cstr(name);
    call.iface = chanos_cstr(iface);
    call.max_frame = max_frame;
    call.fingerprint = fingerprint;
    call.private_ = (opts->flags & CHANOS_EXPORT_PRIVATE) != 0;
    call.nuids = (uint32_t)opts->nuids;
    if (opts->nuids > 0)
        memcpy(call.uids, opts->uids, opts->nuids * sizeof opts->uids[0]);
    call.programs.ptr = (const uint8_t *)programs;
    call.programs.len = (uint32_t)rc;
    rc = new_listener(name, &call, &l);
    if (rc != 0)
        return rc;
    l->definition = definition;
    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    memcpy(cb, l->call, l->call_len);
    b.len = l->call_len;
    rc = enter(d);
    if (rc != 0)
        goto fail;
    d->exporting = 1;
    rc = mon_rpc(d, &b, MONITOR_MSG_EXPORT, &n);
    if (rc == 0 && monitor_export_reply_decode(&reply, d->rbuf, n, NULL, 0) != 0)
        rc = fail_session(d, CHANOS_ERR_MONITOR_LOST);
    if (rc == 0) {
        l->d = d;
        l->ref = reply.ref;
        l->max_frame = max_frame;
        l->next = d->listeners;
        d->listeners = l;
    }
    d->exporting = 0;
    drop_unclaimed(d);
    leave(d);
    if (rc != 0)
        goto fail;
    *out = l;
    return 0;
fail:
    free(l->call);
    free(l->name);
    free(l);
    return rc;
}

int chanos_listener_hand_over(chanos_listener *l, struct chanos_iref *grant)
{
    struct chanos_domain *d = l->d;
    struct monitor_hand_over_call call = { l->ref.export_id };
    struct monitor_hand_over_reply reply;
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    size_t n;
    int rc;

    memset(grant, 0, sizeof *grant);
    if (l->handed)
        return CHANOS_ERR_HANDED_OVER;
    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    rc = monitor_hand_over_call_encode(&call, &b);
    if (rc != 0)
        return rc;
    rc = enter(d);
    if (rc != 0)
        return rc;
    rc = mon_rpc(d, &b, MONITOR_MSG_HAND_OVER, &n);
    if (rc == 0 && monitor_hand_over_reply_decode(&reply, d->rbuf, n, NULL, 0) != 0)
        rc = fail_session(d, CHANOS_ERR_MONITOR_LOST);
    if (rc == 0) {
        *grant = reply.grant;
        l->handed = 1;
        l->err = CHANOS_ERR_HANDED_OVER;
    }
    leave(d);
    return rc;
}

int chanos_adopt(chanos_domain *d, const struct chanos_iref *grant,
                 const struct chanos_interface *iface, chanos_listener **out)
{
    struct monitor_adopt_call call = { 0 };
    struct monitor_adopt_reply reply;
    struct monitor_export_call ex = { 0 };
    char name[MONITOR_ADOPT_NAME_MAX + 1];
    struct chanos_listener *l = NULL;
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    size_t n;
    int rc;

    *out = NULL;
    if (grant == NULL || iface == NULL)
        return -EINVAL;
    call.grant = *grant;
    call.iface = chanos_cstr(iface->name);
    call.fingerprint = iface->fingerprint;
    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    rc = monitor_adopt_call_encode(&call, &b);
    if (rc == CHANOS_ERR_BOUND || rc == CHANOS_ERR_NUL)
        return CHANOS_ERR_INVALID;
    if (rc != 0)
        return rc;
    rc = enter(d);
    if (rc != 0)
        return rc;
    d->exporting = 1;
    rc = mon_rpc(d, &b, MONITOR_MSG_ADOPT, &n);
    if (rc == 0 && monitor_adopt_reply_decode(&reply, d->rbuf, n, NULL, 0) != 0)
        rc = fail_session(d, CHANOS_ERR_MONITOR_LOST);
    if (rc == 0) {
        /* exported again under its name and policy if the monitor
         * restarts; the allow-lists, which the monitor keeps, are not */
        memcpy(name, reply.name.ptr, reply.name.len);
        name[reply.name.len] = '\0';
        ex.name = chanos_cstr(name);
        ex.iface = chanos_cstr(iface->name);
        ex.max_frame = reply.max_frame;
        ex.fingerprint = iface->fingerprint;
        ex.private_ = reply.private_;
        rc = new_listener(name, &ex, &l);
    }
    if (rc == 0) {
        l->d = d;
        l->ref = reply.ref;
        l->definition = iface->definition;
        l->next = d->listeners;
        d->listeners = l;
        *out = l;
    }
    d->exporting = 0;
    drop_unclaimed(d);
    leave(d);
    return rc;
}

const char *chanos_listener_name(const chanos_listener *l) { return l->name; }

chanos_domain *chanos_listener_domain_(const chanos_listener *l) { return l->d; }

int chanos_domain_exported_(chanos_domain *d, const char *name, size_t len,
                            struct chanos_exported_ *out)
{
    struct monitor_export_call call;
    int rc = enter(d);

    if (rc != 0)
        return rc;
    rc = CHANOS_ERR_NOT_FOUND;
    for (struct chanos_listener *l = d->listeners; l != NULL; l = l->next) {
        /* an export handed over, or not exported again after a rejoin,
         * is not this domain's; a private one binds by iref only, and
         * whoever holds that was handed the interface with it */
        if (l->err != 0 || strlen(l->name) != len ||
            memcmp(l->name, name, len) != 0)
            continue;
        if (monitor_export_call_decode(&call, l->call, l->call_len, NULL, 0) == 0 &&
            !call.private_) {
            out->iface = call.iface; /* a view into l->call */
            out->fingerprint = call.fingerprint;
            out->definition = l->definition;
            rc = 0;
        }
        break;
    }
    leave(d);
    return rc;
}

void chanos_listener_ref(const chanos_listener *l, struct chanos_iref *out)
{
    *out = l->ref;
}

/* take_incoming opens the first queued connection for l, if any: 1 and
 * *out on success, 0 if none is queued, or an error. A connection that
 * fails to open is dropped (the client sees it close) and the next is
 * tried. */
static int take_incoming(struct chanos_listener *l, chanos_conn **out)
{
    struct chanos_domain *d = l->d;

    for (size_t i = 0; i < d->nin;) {
        struct pending_in p = d->in[i];
        struct chanos_ump_options uo = { 0 };
        struct chanos_ump_files files;
        chanos_ump *u;
        int rc;

        /* id and token: after a monitor restart, a listener that could
         * not be exported again keeps an id the new monitor may have
         * given another listener, whose connections these are */
        if (p.export_id != l->ref.export_id ||
            memcmp(p.token, l->ref.token, sizeof p.token) != 0) {
            i++;
            continue;
        }
        memmove(&d->in[i], &d->in[i + 1], (d->nin - i - 1) * sizeof d->in[0]);
        d->nin--;
        if (p.local != NULL) {
            rc = chanos_conn_set_peer_(p.local, &p.peer);
            if (rc != 0) {
                chanos_conn_close(p.local);
                return rc;
            }
            *out = p.local;
            return 1;
        }
        files.mem = p.fds[0];
        files.wake[CHANOS_UMP_CREATOR][0] = p.fds[1];
        files.wake[CHANOS_UMP_CREATOR][1] = p.fds[2];
        files.caps[CHANOS_UMP_CREATOR] = p.fds[3];
        files.wake[CHANOS_UMP_ATTACHER][0] = files.wake[CHANOS_UMP_ATTACHER][1] = -1;
        files.caps[CHANOS_UMP_ATTACHER] = -1;
        uo.max_msg = l->max_frame;
        uo.spin_ns = d->spin_ns;
        rc = chanos_ump_open(CHANOS_UMP_CREATOR, &files, p.fds[4], &uo, &u);
        if (rc != 0)
            continue;
        rc = chanos_conn_new(u, out);
        if (rc != 0)
            return rc;
        rc = chanos_conn_set_peer_(*out, &p.peer);
        if (rc != 0) {
            chanos_conn_close(*out);
            *out = NULL;
            return rc;
        }
        return 1;
    }
    return 0;
}

int chanos_accept(chanos_listener *l, int timeout_ms, chanos_conn **out)
{
    struct chanos_domain *d = l->d;
    int64_t deadline = deadline_of(timeout_ms);
    int rc, drained = 0;

    *out = NULL;
    rc = enter(d);
    if (rc != 0)
        return rc;
    for (;;) {
        /* those it holds first, even once it has failed */
        rc = take_incoming(l, out);
        if (rc != 0)
            break;
        rc = l->err;
        if (rc != 0) {
            int prc;

            /* Failed, it still reads what the monitor sent, without
             * waiting: a rejoin under way may export l again, and a poll
             * loop that accepts when the domain's fd is readable must not
             * find it readable for ever. */
            if (drained)
                break;
            drained = 1;
            while ((prc = pump(d, now_ms())) == 0)
                ;
            if (prc != CHANOS_ERR_TIMEDOUT) {
                rc = prc;
                break;
            }
            continue;
        }
        rc = pump(d, deadline);
        if (rc != 0)
            break;
    }
    leave(d);
    return rc == 1 ? 0 : rc;
}

int chanos_listener_close(chanos_listener *l)
{
    struct chanos_domain *d;
    struct monitor_withdraw_call call;
    char anon[24];
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    struct mframe f;
    int rc;

    if (l == NULL)
        return 0;
    d = l->d;
    rc = enter(d);
    if (rc != 0)
        return rc;
    /* whether l is exported, and so is to be withdrawn, is known once a
     * rejoin under way has exported it again, or failed to */
    rc = settle(d, deadline_of(d->call_timeout_ms));
    if (rc == CHANOS_ERR_TIMEDOUT) {
        /* the new monitor does not answer: the attempt fails, and its
         * session takes l's export, if made, away with it */
        join_fail(d);
    } else if (rc == 0 && !l->handed && l->err == 0) {
        /* an export without a name is withdrawn by "#ID" */
        snprintf(anon, sizeof anon, "#%" PRIu64, l->ref.export_id);
        call.name = chanos_cstr(l->name[0] != '\0' ? l->name : anon);
        chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
        rc = monitor_withdraw_call_encode(&call, &b);
        if (rc == 0)
            rc = mon_call(d, &b, MONITOR_MSG_WITHDRAW, d->call_timeout_ms,
                          d->call_timeout_ms, &f);
        if (rc == 0)
            close_fds(f.fds, f.nfds);
    }
    if (rc == CHANOS_ERR_MONITOR_LOST)
        rc = 0; /* the monitor withdrew it with the session */
    free_listener(l);
    leave(d);
    return rc;
}

/* split_files gives the attacher of an in-process pair its descriptors,
 * taken from f: a duplicate of the memfd, and its own ends of the wake-up
 * sockets, moved, not duplicated, so that each side holds only its own.
 * On failure f is left whole. */
static int split_files(struct chanos_ump_files *f, struct chanos_ump_files *g)
{
    g->mem = fcntl(f->mem, F_DUPFD_CLOEXEC, 0);
    if (g->mem < 0)
        return -errno;
    g->wake[CHANOS_UMP_CREATOR][0] = g->wake[CHANOS_UMP_CREATOR][1] = -1;
    g->caps[CHANOS_UMP_CREATOR] = -1;
    for (int k = 0; k < 2; k++) {
        g->wake[CHANOS_UMP_ATTACHER][k] = f->wake[CHANOS_UMP_ATTACHER][k];
        f->wake[CHANOS_UMP_ATTACHER][k] = -1;
    }
    g->caps[CHANOS_UMP_ATTACHER] = f->caps[CHANOS_UMP_ATTACHER];
    f->caps[CHANOS_UMP_ATTACHER] = -1;
    return 0;
}

/*
 * local_pair makes a ring pair inside the process out of what the monitor
 * makes for two domains (a sealed memfd, two wake-up socket pairs, a caps
 * socket pair, a liveness socket pair), for frames of up to max_frame bytes, and opens
 * both sides: the
 * server's (creator) in *srv, the client's (attacher) in *cli. On failure
 * nothing is left open.
 */
static int local_pair(uint32_t max_frame, int64_t spin_ns, chanos_conn **srv,
                      chanos_conn **cli)
{
    struct chanos_ump_options uo = { 0 };
    struct chanos_ump_files fa, fb;
    chanos_ump *us, *uc;
    int sv[2], rc;

    *srv = *cli = NULL;
    uo.max_msg = max_frame;
    uo.spin_ns = spin_ns;
    rc = chanos_ump_files_create(&uo, &fa);
    if (rc != 0)
        return rc;
    rc = split_files(&fa, &fb);
    if (rc != 0) {
        chanos_ump_files_close(&fa);
        return rc;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        rc = -errno;
        chanos_ump_files_close(&fa);
        chanos_ump_files_close(&fb);
        return rc;
    }
    /* chanos_ump_open and chanos_conn_new own what they are given, on
     * failure too */
    rc = chanos_ump_open(CHANOS_UMP_CREATOR, &fa, sv[0], &uo, &us);
    if (rc != 0) {
        chanos_ump_files_close(&fb);
        close(sv[1]);
        return rc;
    }
    rc = chanos_ump_open(CHANOS_UMP_ATTACHER, &fb, sv[1], &uo, &uc);
    if (rc != 0) {
        chanos_ump_close(us);
        return rc;
    }
    rc = chanos_conn_new(us, srv);
    if (rc != 0) {
        chanos_ump_close(uc);
        return rc;
    }
    rc = chanos_conn_new(uc, cli);
    if (rc != 0) {
        chanos_conn_close(*srv);
        *srv = NULL;
    }
    return rc;
}

/*
 * bind_local answers a bind that the monitor resolved to this domain's own
 * export (via local: no descriptors, no incoming), as the Go library does:
 * it pairs the client with the export's listener in this process. The
 * server side waits in the accept queue like an incoming connection; the
 * client side goes to *out. Called between enter and leave, as it changes
 * the queue.
 */
static int bind_local(struct chanos_domain *d,
                      const struct monitor_bind_reply *reply,
                      uint32_t max_frame, chanos_conn **out)
{
    struct chanos_listener *l;
    struct pending_in *p;
    chanos_conn *srv;
    int rc;

    /* the reply's iref carries no token: its machine and export id name
     * the export, which is this domain's own, as Go matches it */
    for (l = d->listeners; l != NULL; l = l->next) {
        if (l->ref.machine == reply->ref.machine &&
            l->ref.export_id == reply->ref.export_id)
            break;
    }
    /* closed although the monitor still had the export (a withdraw that
     * failed): as Go, the export is gone */
    if (l == NULL)
        return CHANOS_ERR_NOT_FOUND;
    if (max_frame != 0 && l->max_frame > max_frame)
        return CHANOS_ERR_MISMATCH;
    /* the queue an incoming connection would wait in, with its bound;
     * refused here rather than handed to the client already closed */
    if (d->nin == INCOMING_LIMIT)
        return CHANOS_ERR_LIMIT;
    rc = local_pair(l->max_frame, d->spin_ns, &srv, out);
    if (rc != 0)
        return rc;
    p = &d->in[d->nin++];
    p->export_id = l->ref.export_id;
    memcpy(p->token, l->ref.token, sizeof p->token);
    p->max_frame = l->max_frame;
    for (int i = 0; i < UMP_NFDS; i++)
        p->fds[i] = -1;
    p->local = srv;
    p->peer.domain = d->id;
    p->peer.machine = d->machine;
    p->peer.pid = (int32_t)getpid();
    p->peer.uid = (uint32_t)getuid();
    memcpy(p->peer.program, d->program, sizeof p->peer.program);
    return 0;
}

/*
 * bind_export binds to the export under name (waiting for the name if wait is
 * set; see chanos_connect) or, with name NULL, to the export ref names (a
 * bind by ref), and opens the client side of its ring pair, or makes the
 * pair itself for an export of this domain (bind_local). timeout_ms -1 is
 * the domain's call timeout; 0 does not wait for the name. The monitor
 * answers not_found when the name did not appear in time; no answer within
 * BIND_GRACE_MS more is CHANOS_ERR_TIMEDOUT.
 */

/* bind_net dials the export of another machine that reply names, with the
 * domain's net dialer (chanos_join_opts.net). */
static int bind_net(chanos_domain *d, const struct monitor_bind_reply *reply,
                    uint32_t max_frame, chanos_conn **out)
{
    char addr[MONITOR_BIND_NET_ADDR_MAX + 1];
    char name[MONITOR_BIND_NET_NAME_MAX + 1];
    struct chanos_net_bind b;
    int rc;

    if (d->net == NULL || d->net->dial == NULL)
        return CHANOS_ERR_NO_ROUTE;
    if (max_frame != 0 && reply->max_frame > max_frame)
        return CHANOS_ERR_MISMATCH;
    if (reply->net_addr.len > MONITOR_BIND_NET_ADDR_MAX ||
        reply->net_name.len > MONITOR_BIND_NET_NAME_MAX)
        return CHANOS_ERR_BOUND;
    memcpy(addr, reply->net_addr.ptr, reply->net_addr.len);
    addr[reply->net_addr.len] = '\0';
    memcpy(name, reply->net_name.ptr, reply->net_name.len);
    name[reply->net_name.len] = '\0';
    b.addr = addr;
    b.server_name = name;
    b.peer = reply->net_peer;
    b.cert = reply->net_cert.ptr;
    b.cert_len = reply->net_cert.len;
    b.key = reply->net_key.ptr;
    b.key_len = reply->net_key.len;
    b.auth_only = reply->net_auth_only;
    b.max_frame = reply->max_frame;
    b.conn_id = reply->conn_id;
    rc = d->net->dial(d->netst, &b, out);
    if (rc == 0)
        chanos_conn_set_domain_(*out, d->key, chanos_domain_export_endpoint_);
    return rc;
}

static int bind_export(chanos_domain *d, const char *name,
                       const struct chanos_iref *ref, const char *iface,
                       uint64_t fingerprint, bool wait, uint32_t max_frame,
                       int timeout_ms, chanos_conn **out)
{
    struct monitor_bind_call call = { 0 };
    struct monitor_bind_reply reply;
    struct chanos_ump_options uo = { 0 };
    struct chanos_ump_files files;
    uint8_t cb[CALL_BUF];
    struct chanos_buf b;
    struct mframe f;
    chanos_ump *u;
    int rc;

    *out = NULL;
    if ((name == NULL) == (ref == NULL) || iface == NULL)
        return -EINVAL;
    if (timeout_ms < 0)
        timeout_ms = d->call_timeout_ms; /* may be -1: no bound */
    if (name != NULL) {
        if (name[0] == '\0')
            return CHANOS_ERR_INVALID; /* an empty name asks for a ref */
        call.name = chanos_cstr(name);
    } else {
        call.target = *ref;
    }
    call.iface = chanos_cstr(iface);
    call.fingerprint = fingerprint;
    call.wait = wait && timeout_ms != 0;
    chanos_buf_init(&b, cb, sizeof cb, NULL, 0);
    rc = monitor_bind_call_encode(&call, &b);
    if (rc == CHANOS_ERR_BOUND || rc == CHANOS_ERR_NUL)
        return CHANOS_ERR_INVALID;
    if (rc != 0)
        return rc;
    rc = enter(d);
    if (rc != 0)
        return rc;
    /* the monitor answers not_found at the deadline; wait a little longer
     * for that answer before cancelling the bind ourselves */
    rc = mon_call(d, &b, MONITOR_MSG_BIND, timeout_ms,
                  timeout_ms < 0                          ? -1
                  : timeout_ms > INT_MAX - BIND_GRACE_MS ? INT_MAX
                                                          : timeout_ms + BIND_GRACE_MS,
                  &f);
    if (rc == 0) {
        rc = monitor_bind_reply_decode(&reply, d->rbuf, f.len, f.fds, f.nfds);
        if (rc != 0) {
            close_fds(f.fds, f.nfds);
            rc = fail_session(d, CHANOS_ERR_MONITOR_LOST);
        } else {
            for (uint32_t i = reply.nfds; i < f.nfds; i++)
                close(f.fds[i]);
        }
    }
    if (rc == 0 && reply.via == MONITOR_INTERCONNECT_LOCAL) {
        close_fds(reply.fds, reply.nfds); /* it carries none */
        rc = bind_local(d, &reply, max_frame, out);
        leave(d);
        return rc;
    }
    leave(d);
    if (rc == 0 && reply.via == MONITOR_INTERCONNECT_NET) {
        close_fds(reply.fds, reply.nfds); /* it carries none */
        return bind_net(d, &reply, max_frame, out);
    }
    /* CHANOS_ERR_TIMEDOUT: the monitor did not answer, not even its
     * not_found at the deadline */
    if (rc != 0)
        return rc;
    if (reply.via != MONITOR_INTERCONNECT_UMP || reply.nfds != UMP_NFDS) {
        /* an interconnect we do not know, or a ump pair without its
         * descriptors */
        close_fds(reply.fds, reply.nfds);
        return CHANOS_ERR_MISMATCH;
    }
    if (max_frame != 0 && reply.max_frame > max_frame) {
        close_fds(reply.fds, reply.nfds);
        return CHANOS_ERR_MISMATCH;
    }
    files.mem = reply.fds[0];
    files.wake[CHANOS_UMP_CREATOR][0] = files.wake[CHANOS_UMP_CREATOR][1] = -1;
    files.caps[CHANOS_UMP_CREATOR] = -1;
    files.wake[CHANOS_UMP_ATTACHER][0] = reply.fds[1];
    files.wake[CHANOS_UMP_ATTACHER][1] = reply.fds[2];
    files.caps[CHANOS_UMP_ATTACHER] = reply.fds[3];
    uo.max_msg = max_frame;
    uo.spin_ns = d->spin_ns;
    rc = chanos_ump_open(CHANOS_UMP_ATTACHER, &files, reply.fds[4], &uo, &u);
    if (rc != 0)
        return rc;
    return chanos_conn_new(u, out);
}

static int connect_ref_fp(chanos_domain *d, const struct chanos_iref *ref,
                          const char *iface, uint64_t fingerprint,
                          uint32_t max_frame, int timeout_ms,
                          chanos_conn **out);

int chanos_connect(chanos_domain *d, const char *name, const char *iface,
                   uint32_t max_frame, int timeout_ms, chanos_conn **out)
{
    if (name == NULL) {
        *out = NULL;
        return -EINVAL;
    }
    return bind_export(d, name, NULL, iface, 0, true, max_frame, timeout_ms,
                       out);
}

int chanos_connect_iface(chanos_domain *d, const char *name,
                         const struct chanos_interface *iface, int timeout_ms,
                         chanos_conn **out)
{
    if (name == NULL || iface == NULL) {
        *out = NULL;
        return -EINVAL;
    }
    return bind_export(d, name, NULL, iface->name, iface->fingerprint, true,
                       iface->max_frame, timeout_ms, out);
}

int chanos_connect_ref_iface(chanos_domain *d, const struct chanos_iref *ref,
                             const struct chanos_interface *iface,
                             int timeout_ms, chanos_conn **out)
{
    if (iface == NULL) {
        *out = NULL;
        return -EINVAL;
    }
    return connect_ref_fp(d, ref, iface->name, iface->fingerprint,
                          iface->max_frame, timeout_ms, out);
}

int chanos_connect_ref(chanos_domain *d, const struct chanos_iref *ref,
                       const char *iface, uint32_t max_frame, int timeout_ms,
                       chanos_conn **out)
{
    return connect_ref_fp(d, ref, iface, 0, max_frame, timeout_ms, out);
}

static int connect_ref_fp(chanos_domain *d, const struct chanos_iref *ref,
                          const char *iface, uint64_t fingerprint,
                          uint32_t max_frame, int timeout_ms,
                          chanos_conn **out)
{
    static const struct chanos_iref null_ref = { 0 };

    if (ref == NULL) {
        *out = NULL;
        return -EINVAL;
    }
    if (memcmp(ref, &null_ref, sizeof *ref) == 0) {
        *out = NULL;
        return CHANOS_ERR_INVALID;
    }
    return bind_export(d, NULL, ref, iface, fingerprint, false, max_frame,
                       timeout_ms, out);
}

/* ---- irefs as text ---- */

int chanos_iref_format(const struct chanos_iref *ref, char *buf, size_t n)
{
    int w = snprintf(buf, n, "%016" PRIx64 ":%016" PRIx64 ":", ref->machine,
                     ref->export_id);

    if (w < 0 || (size_t)w >= n)
        return -ENOSPC;
    for (size_t i = 0; i < sizeof ref->token; i++) {
        if ((size_t)w + 2 >= n)
            return -ENOSPC;
        w += snprintf(buf + w, n - (size_t)w, "%02x", ref->token[i]);
    }
    return w;
}

/* hex_digits reads exactly n hex digits at s into *v; 0 or -EINVAL. */
static int hex_digits(const char *s, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int x;

        if (c >= '0' && c <= '9')
            x = c - '0';
        else if (c >= 'a' && c <= 'f')
            x = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            x = c - 'A' + 10;
        else
            return -EINVAL;
        *v = *v << 4 | (uint64_t)x;
    }
    return 0;
}

int chanos_iref_parse(const char *s, struct chanos_iref *out)
{
    struct chanos_iref r;
    uint64_t v;

    if (s == NULL || strlen(s) != CHANOS_IREF_TEXT_LEN || s[16] != ':' ||
        s[33] != ':' || hex_digits(s, 16, &r.machine) != 0 ||
        hex_digits(s + 17, 16, &r.export_id) != 0)
        return -EINVAL;
    for (size_t i = 0; i < sizeof r.token; i++) {
        if (hex_digits(s + 34 + 2 * i, 2, &v) != 0)
            return -EINVAL;
        r.token[i] = (uint8_t)v;
    }
    *out = r;
    return 0;
}

/* ---- the nameservice ---- */

int chanos_nameservice_connect(chanos_domain *d, int timeout_ms,
                               chanos_conn **out)
{
    /* as monitor.Client.Nameservice: the monitor always serves it, so the
     * bind does not wait for the name (also the interface's name) */
    return bind_export(d, CHANOS_NAMESERVICE_NAME, NULL,
                       CHANOS_NAMESERVICE_NAME, NAMESERVICE_FINGERPRINT, false,
                       NAMESERVICE_MAX_FRAME_SIZE, timeout_ms, out);
}

int chanos_nameservice_error(uint64_t code)
{
    switch (code) {
    case CHANOS_NS_OK:
        return 0;
    case CHANOS_NS_EXISTS:
        return CHANOS_ERR_EXISTS;
    case CHANOS_NS_NOT_FOUND:
        return CHANOS_ERR_NOT_FOUND;
    case CHANOS_NS_INVALID_NAME:
    case CHANOS_NS_INVALID_REF:
        return CHANOS_ERR_INVALID;
    case CHANOS_NS_NOT_OWNER:
        return CHANOS_ERR_NOT_OWNER;
    case CHANOS_NS_TIMEOUT:
        return CHANOS_ERR_TIMEDOUT;
    case CHANOS_NS_LIMIT:
    case CHANOS_NS_QUOTA:
        return CHANOS_ERR_LIMIT;
    }
    return CHANOS_ERR_MONITOR; /* unavailable, or a code we do not know */
}
