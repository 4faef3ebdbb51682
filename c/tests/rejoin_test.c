/*
 * rejoin_test.c: a C domain that outlives its monitor (docs/c-domains.md,
 * "Monitor loss and restart"). Real monitors (`chanos monitor`,
 * CHANOS_CMD) are killed with -9 and started again in the same directory;
 * where a monitor must stall, answer late, or say what only a monitor in
 * a cluster says (an incoming connection from another machine), a fake
 * one answers instead: a thread of this program listening on the
 * directory's socket, with a fake net binder beside it. Every domain and
 * connection runs over real sockets.
 */
#include "ump_testutil.h"
#include "monitor_child.h"
#include "monitor.h" /* libchanos's generated monitor protocol */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#ifndef CHANOS_CMD
#error "CHANOS_CMD must name the chanos command (c/tests/CMakeLists.txt)"
#endif

#define IFACE "rejoin"
#define MAX_FRAME 4096
/* how long a call that is not to wait may take, with the sanitizers'
 * slowness and a shared machine's scheduling */
#define NO_WAIT_MS 300

static char dir[] = "/tmp/chanos-rejoin-XXXXXX";
static char sockpath[sizeof dir + 16];
static char logpath[sizeof dir + 8];
static pid_t monitor_pid = -1;

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

    nanosleep(&ts, NULL);
}

static void stop_monitor(void);
static void clean_up(void);

/* require ends the test at a failure the rest would trip over. */
static void require_(int ok, const char *what, int line)
{
    if (ok)
        return;
    fprintf(stderr, "rejoin_test:%d: cannot go on: %s\n", line, what);
    failures++;
    stop_monitor();
    clean_up();
    exit(1);
}
#define require(ok) require_((ok), #ok, __LINE__)

/* ---- the real monitor ---- */

/* start_monitor runs `chanos monitor` in dir, in place of any before it
 * (whose socket file is removed: the new one's says that it listens), and
 * returns once it listens. Its log is appended beside the directory. */
static void start_monitor(void)
{
    unlink(sockpath);
    monitor_pid = monitor_start(dir, sockpath, logpath);
    require(monitor_pid > 0);
}

/* kill_monitor kills the monitor with -9, as a crash would. */
static void kill_monitor(void)
{
    require(monitor_pid > 0);
    kill(monitor_pid, SIGKILL);
    waitpid(monitor_pid, NULL, 0);
    monitor_pid = -1;
}

static void stop_monitor(void)
{
    monitor_stop(monitor_pid);
    monitor_pid = -1;
}

/* ---- domains ---- */

/* What on_monitor heard. Written by whichever thread calls into the
 * domain, read by the test's. */
struct events {
    atomic_int lost, rejoined, err;
};

static void on_monitor(void *arg, int event, int err)
{
    struct events *e = arg;

    if (event == CHANOS_MONITOR_LOST) {
        atomic_fetch_add(&e->lost, 1);
    } else if (event == CHANOS_MONITOR_REJOINED) {
        atomic_store(&e->err, err);
        atomic_fetch_add(&e->rejoined, 1);
    }
}

static chanos_domain *join_with(int timeout_ms, struct events *ev,
                                const struct chanos_net_binder *net)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d = NULL;
    int rc;

    o.dir = dir;
    o.program = "rejoin_test";
    o.timeout_ms = timeout_ms;
    o.on_monitor = ev != NULL ? on_monitor : NULL;
    o.on_monitor_arg = ev;
    o.net = net;
    rc = chanos_join(&d, &o);
    CHECK_EQ(rc, 0);
    require(d != NULL);
    return d;
}

static chanos_domain *join(struct events *ev)
{
    return join_with(5000, ev, NULL);
}

static chanos_listener *export(chanos_domain *d, const char *name)
{
    chanos_listener *l = NULL;

    CHECK_EQ(chanos_export(d, name, IFACE, MAX_FRAME, &l), 0);
    require(l != NULL);
    return l;
}

static uint64_t export_id(const chanos_listener *l)
{
    struct chanos_iref r;

    chanos_listener_ref(l, &r);
    return r.export_id;
}

/* await_loss makes calls on d until it has heard that its monitor died,
 * n times in all. */
static void await_loss(chanos_domain *d, struct events *ev, int n)
{
    int64_t end = mono_ms() + 5000;

    while (atomic_load(&ev->lost) < n && mono_ms() < end)
        (void)chanos_domain_poll(d, 100);
    require(atomic_load(&ev->lost) == n);
}

/* await_rejoin drives d as a poll loop does, with calls that do not wait
 * (poll(2) on chanos_domain_fd, then chanos_domain_poll(d, 0)), until it
 * has rejoined a new monitor n times in all. Each call must return at
 * once: a rejoin must not make a call that is not to wait block. */
static void await_rejoin(chanos_domain *d, struct events *ev, int n)
{
    int64_t end = mono_ms() + 10000, worst = 0;

    while (atomic_load(&ev->rejoined) < n && mono_ms() < end) {
        struct pollfd p = { chanos_domain_fd(d), POLLIN, 0 };
        int64_t t0;
        int rc;

        (void)poll(&p, 1, 50);
        t0 = mono_ms();
        rc = chanos_domain_poll(d, 0);
        if (mono_ms() - t0 > worst)
            worst = mono_ms() - t0;
        CHECK(rc == 0 || rc == CHANOS_ERR_MONITOR_LOST);
    }
    CHECK(worst < NO_WAIT_MS);
    require(atomic_load(&ev->rejoined) >= n);
}

/* send_byte and recv_byte pass a message of one byte over a connection. */
static void send_byte(chanos_conn *c, uint8_t v)
{
    uint8_t m[CHANOS_HEADER_SIZE + 1];
    struct chanos_hdr h = { sizeof m, 1, CHANOS_KIND_MESSAGE, 0, 0, 0 };

    chanos_hdr_put(m, &h);
    m[CHANOS_HEADER_SIZE] = v;
    CHECK_EQ(chanos_conn_send(c, m, sizeof m, 1000), 0);
}

static void recv_byte(chanos_conn *c, uint8_t v)
{
    struct chanos_frame f;

    CHECK_EQ(chanos_conn_recv(c, 2000, &f), 0);
    CHECK(f.len == CHANOS_HEADER_SIZE + 1 && f.data[CHANOS_HEADER_SIZE] == v);
}

/* gone waits up to ms for c's peer to have closed or died. */
static int gone(chanos_conn *c, int ms)
{
    int64_t end = mono_ms() + ms;

    for (;;) {
        if (chanos_conn_peer_gone(c) != 0)
            return 1;
        if (mono_ms() >= end)
            return 0;
        sleep_ms(5);
    }
}

/* ---- the fake monitor ---- */

enum fake_mode {
    FAKE_ANSWER,      /* answers hello, export and withdraw at once */
    FAKE_STALL_HELLO, /* reads every call and answers none */
    FAKE_LATE_EXPORT, /* answers hello at once and export late_ms late */
};

#define FAKE_MACHINE 0x77
#define FAKE_MAX_EXPORTS 256

struct fake {
    pthread_t th;
    pthread_mutex_t mu;
    int lfd;
    int sfd; /* the session being served, or -1 */
    enum fake_mode mode;
    int late_ms;
    int drop; /* end the session being served */
    int stop;
    /* counts, and when each export call came */
    int sessions, hellos, exports;
    int64_t export_at[FAKE_MAX_EXPORTS];
    uint64_t next_id;
    /* a late export reply to send at late_at */
    int64_t late_at;
    uint32_t late_call;
};

static struct fake fk;

static void fake_token(uint64_t id, uint8_t *token)
{
    for (int i = 0; i < 16; i++)
        token[i] = (uint8_t)(id * 13 + (uint64_t)i + 1);
}

/* fake_send sends a frame and its descriptors (closed here) on the
 * session; the caller holds fk.mu. */
static int fake_send(struct chanos_buf *b)
{
    union {
        struct cmsghdr h;
        char c[CMSG_SPACE(sizeof(int) * 8)];
    } cb;
    struct iovec iov = { b->data, b->len };
    struct msghdr mh = { 0 };
    ssize_t n;

    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (b->nfds > 0) {
        struct cmsghdr *c;

        memset(&cb, 0, sizeof cb);
        mh.msg_control = cb.c;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * b->nfds);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * b->nfds);
        memcpy(CMSG_DATA(c), b->fds, sizeof(int) * b->nfds);
    }
    n = fk.sfd >= 0 ? sendmsg(fk.sfd, &mh, MSG_NOSIGNAL) : -1;
    for (uint32_t i = 0; i < b->nfds; i++)
        close(b->fds[i]);
    return n == (ssize_t)b->len ? 0 : -1;
}

static void fake_export_reply(uint32_t call)
{
    uint8_t mem[256];
    struct chanos_buf b;
    struct monitor_export_reply r = { 0 };

    r.ref.machine = FAKE_MACHINE;
    r.ref.export_id = ++fk.next_id;
    fake_token(r.ref.export_id, r.ref.token);
    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    if (monitor_export_reply_encode(&r, &b) == 0) {
        chanos_hdr_set_call(b.data, call, 0);
        (void)fake_send(&b);
    }
}

/* fake_frame answers one frame from the domain; the caller holds fk.mu. */
static void fake_frame(const uint8_t *p, size_t len)
{
    uint8_t mem[256];
    struct chanos_buf b;
    struct chanos_hdr h;

    if (chanos_hdr_parse(&h, p, len) != 0 || h.flags != CHANOS_KIND_CALL)
        return; /* cancels of calls given up: nothing to do */
    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    switch (h.msg) {
    case MONITOR_MSG_HELLO: {
        struct monitor_hello_reply r = { 4, 1000 + (uint64_t)fk.sessions,
                                         FAKE_MACHINE };

        fk.hellos++;
        if (fk.mode == FAKE_STALL_HELLO)
            return;
        if (monitor_hello_reply_encode(&r, &b) != 0)
            return;
        break;
    }
    case MONITOR_MSG_EXPORT:
        if (fk.exports < FAKE_MAX_EXPORTS)
            fk.export_at[fk.exports] = mono_ms();
        fk.exports++;
        if (fk.mode == FAKE_STALL_HELLO)
            return;
        if (fk.mode == FAKE_LATE_EXPORT) {
            fk.late_at = mono_ms() + fk.late_ms;
            fk.late_call = h.call_id;
            return;
        }
        fake_export_reply(h.call_id);
        return;
    case MONITOR_MSG_WITHDRAW: {
        struct monitor_withdraw_reply r = { 0 };

        if (fk.mode == FAKE_STALL_HELLO ||
            monitor_withdraw_reply_encode(&r, &b) != 0)
            return;
        break;
    }
    default:
        return;
    }
    chanos_hdr_set_call(b.data, h.call_id, 0);
    (void)fake_send(&b);
}

static void fake_end_session(void)
{
    if (fk.sfd >= 0)
        close(fk.sfd);
    fk.sfd = -1;
    fk.late_at = 0;
}

static void *fake_run(void *arg)
{
    static uint8_t buf[MONITOR_MAX_FRAME_SIZE];

    (void)arg;
    pthread_mutex_lock(&fk.mu);
    while (!fk.stop) {
        struct pollfd p;
        int fd = fk.sfd >= 0 ? fk.sfd : fk.lfd;

        if (fk.sfd >= 0 && fk.drop) {
            fk.drop = 0;
            fake_end_session();
            continue;
        }
        if (fk.sfd >= 0 && fk.late_at != 0 && mono_ms() >= fk.late_at) {
            fk.late_at = 0;
            fake_export_reply(fk.late_call);
        }
        pthread_mutex_unlock(&fk.mu);
        p.fd = fd;
        p.events = POLLIN;
        p.revents = 0;
        (void)poll(&p, 1, 5);
        pthread_mutex_lock(&fk.mu);
        if (p.revents == 0)
            continue;
        if (fk.sfd < 0) {
            fk.sfd = accept4(fk.lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fk.sfd >= 0)
                fk.sessions++;
            continue;
        }
        if (fd != fk.sfd)
            continue;
        {
            ssize_t n = recv(fk.sfd, buf, sizeof buf, MSG_DONTWAIT);

            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n <= 0) { /* the domain left this session */
                fake_end_session();
                continue;
            }
            fake_frame(buf, (size_t)n);
        }
    }
    fake_end_session();
    pthread_mutex_unlock(&fk.mu);
    return NULL;
}

/* fake_start listens on the directory's socket in place of a monitor. */
static void fake_start(enum fake_mode mode)
{
    struct sockaddr_un sa = { 0 };

    memset(&fk, 0, sizeof fk);
    pthread_mutex_init(&fk.mu, NULL);
    fk.sfd = -1;
    fk.mode = mode;
    unlink(sockpath);
    fk.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    require(fk.lfd >= 0);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sockpath);
    require(bind(fk.lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    require(listen(fk.lfd, 16) == 0);
    require(pthread_create(&fk.th, NULL, fake_run, NULL) == 0);
}

static void fake_stop(void)
{
    pthread_mutex_lock(&fk.mu);
    fk.stop = 1;
    pthread_mutex_unlock(&fk.mu);
    pthread_join(fk.th, NULL);
    close(fk.lfd);
    unlink(sockpath);
    pthread_mutex_destroy(&fk.mu);
}

static void fake_set(enum fake_mode mode, int drop)
{
    pthread_mutex_lock(&fk.mu);
    fk.mode = mode;
    if (drop)
        fk.drop = 1;
    pthread_mutex_unlock(&fk.mu);
}

static int fake_count(const int *what)
{
    int n;

    pthread_mutex_lock(&fk.mu);
    n = *what;
    pthread_mutex_unlock(&fk.mu);
    return n;
}

/* fake_incoming tells the domain of a connection to the export of id
 * (the fake's token), over net (nfds 0) or ump (the five descriptors of
 * fds, taken). */
static void fake_incoming(uint64_t id, enum monitor_interconnect via,
                          const int *fds, uint32_t nfds)
{
    static uint64_t conn_id;
    uint8_t mem[MONITOR_INCOMING_MAX_FRAME_SIZE];
    int bfds[8];
    struct chanos_buf b;
    struct monitor_incoming in = { 0 };

    in.ref.machine = FAKE_MACHINE;
    in.ref.export_id = id;
    fake_token(id, in.ref.token);
    in.conn_id = ++conn_id;
    in.client = 42;
    in.via = via;
    in.max_frame = MAX_FRAME;
    in.nfds = nfds;
    for (uint32_t i = 0; i < nfds; i++)
        in.fds[i] = fds[i];
    in.client_pid = (int32_t)getpid();
    in.client_uid = (uint32_t)getuid();
    in.client_program = chanos_cstr("rejoin_test");
    in.client_machine = via == MONITOR_INTERCONNECT_NET ? 99 : FAKE_MACHINE;
    in.net_name = chanos_cstr(via == MONITOR_INTERCONNECT_NET ? "n" : "");
    chanos_buf_init(&b, mem, sizeof mem, bfds, 8);
    CHECK_EQ(monitor_incoming_encode(&in, &b), 0);
    pthread_mutex_lock(&fk.mu);
    CHECK_EQ(fake_send(&b), 0);
    pthread_mutex_unlock(&fk.mu);
}

/* ---- tests ---- */

/*
 * test_zero_timeout: while a rejoin is under way against a monitor that
 * does not answer, chanos_accept(l, 0) and chanos_domain_poll(d, 0) return
 * at once, though the domain's call timeout is long; the attempt goes on
 * without them waiting, and once the monitor answers, calls that never
 * wait complete the rejoin.
 */
static void test_zero_timeout(void)
{
    struct events ev = { 0 };
    chanos_domain *d;
    chanos_listener *l;
    chanos_conn *c = NULL;
    int64_t end, worst = 0, t0;
    int rc, hellos;

    fake_start(FAKE_ANSWER);
    d = join_with(1500, &ev, NULL);
    l = export(d, "zero.a");
    hellos = fake_count(&fk.hellos);
    fake_set(FAKE_STALL_HELLO, 1);
    end = mono_ms() + 800;
    while (mono_ms() < end) {
        t0 = mono_ms();
        rc = chanos_accept(l, 0, &c);
        if (mono_ms() - t0 > worst)
            worst = mono_ms() - t0;
        CHECK(rc == CHANOS_ERR_TIMEDOUT || rc == CHANOS_ERR_MONITOR_LOST);
        CHECK(c == NULL);
        t0 = mono_ms();
        rc = chanos_domain_poll(d, 0);
        if (mono_ms() - t0 > worst)
            worst = mono_ms() - t0;
        CHECK(rc == 0 || rc == CHANOS_ERR_MONITOR_LOST);
        sleep_ms(5);
    }
    printf("rejoin_test: zero timeout: the longest call took %lld ms\n",
           (long long)worst);
    CHECK(worst < NO_WAIT_MS);
    CHECK_EQ(atomic_load(&ev.lost), 1);
    /* the attempt was made: the stalling monitor read its hello */
    CHECK(fake_count(&fk.hellos) > hellos);
    CHECK_EQ(atomic_load(&ev.rejoined), 0);

    fake_set(FAKE_ANSWER, 0);
    await_rejoin(d, &ev, 1);
    CHECK_EQ(atomic_load(&ev.err), 0);
    t0 = mono_ms();
    CHECK_EQ(chanos_accept(l, 0, &c), CHANOS_ERR_TIMEDOUT);
    CHECK(mono_ms() - t0 < NO_WAIT_MS);
    CHECK_EQ(chanos_listener_close(l), 0);
    chanos_domain_close(d);
    fake_stop();
}

/* serve_export's thread: the dispatch is never called (no client). */
static int no_dispatch(chanos_conn *c, const struct chanos_frame *f,
                       const void *ops, void *ctx)
{
    (void)c, (void)f, (void)ops, (void)ctx;
    return 0;
}

struct serving {
    chanos_domain *d;
    chanos_listener *l;
    volatile int stop;
    sigset_t mask;
    int rc;
};

static void *serve_thread(void *arg)
{
    struct serving *s = arg;
    struct chanos_serve_opts o = { 0, &s->stop, &s->mask };

    s->rc = chanos_serve_export(s->d, s->l, no_dispatch, NULL, NULL, &o);
    return NULL;
}

static void on_usr1(int sig) { (void)sig; }

static int64_t thread_cpu_ms(pthread_t th)
{
    clockid_t cid;
    struct timespec ts;

    if (pthread_getcpuclockid(th, &cid) != 0 || clock_gettime(cid, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define SERVE_CALL_MS 200

/*
 * test_serve_backoff: chanos_serve_export on a domain whose new monitor
 * answers its re-export only after the call timeout, every time. The
 * serving thread must sleep between attempts (little CPU, not a busy
 * loop), keep making attempts at a bounded interval, take the export up
 * again once the monitor answers in time, and stop when told.
 */
static void test_serve_backoff(void)
{
    struct events ev = { 0 };
    struct serving s = { 0 };
    struct sigaction sa = { 0 };
    sigset_t usr1;
    pthread_t th;
    int64_t t0, cpu0, cpu1, wall, gap = 0;
    int first, last, rc;

    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);

    fake_start(FAKE_ANSWER);
    s.d = join_with(SERVE_CALL_MS, &ev, NULL);
    s.l = export(s.d, "serve.a");
    sigemptyset(&s.mask); /* SIGUSR1 wakes its ppoll */
    require(pthread_create(&th, NULL, serve_thread, &s) == 0);
    sleep_ms(100);

    pthread_mutex_lock(&fk.mu);
    fk.late_ms = SERVE_CALL_MS + 100;
    first = fk.exports;
    pthread_mutex_unlock(&fk.mu);
    fake_set(FAKE_LATE_EXPORT, 1);
    /* the first re-export, then its late reply */
    t0 = mono_ms();
    while (fake_count(&fk.exports) == first && mono_ms() - t0 < 5000)
        sleep_ms(5);
    CHECK(fake_count(&fk.exports) > first);
    sleep_ms(SERVE_CALL_MS + 200);

    cpu0 = thread_cpu_ms(th);
    t0 = mono_ms();
    first = fake_count(&fk.exports);
    sleep_ms(2000);
    cpu1 = thread_cpu_ms(th);
    wall = mono_ms() - t0;
    pthread_mutex_lock(&fk.mu);
    last = fk.exports;
    for (int i = first; i < last && i < FAKE_MAX_EXPORTS; i++) {
        int64_t at = i > 0 ? fk.export_at[i] - fk.export_at[i - 1] : 0;

        if (at > gap)
            gap = at;
    }
    pthread_mutex_unlock(&fk.mu);
    printf("rejoin_test: serve_export: %lld ms of CPU in %lld ms; %d "
           "re-exports, at most %lld ms apart\n",
           (long long)(cpu1 - cpu0), (long long)wall, last - first,
           (long long)gap);
    require(cpu0 >= 0 && cpu1 >= 0);
    /* asleep between attempts, not spinning */
    CHECK(cpu1 - cpu0 < wall / 10);
    /* attempts go on, at most the call timeout and the longest wait
     * between attempts (250 ms) apart */
    CHECK(last - first >= 3);
    CHECK(gap < SERVE_CALL_MS + 250 + 500);
    CHECK_EQ(atomic_load(&ev.rejoined), 0);

    /* a monitor that answers in time: the export is taken up again */
    fake_set(FAKE_ANSWER, 0);
    t0 = mono_ms();
    while (atomic_load(&ev.rejoined) == 0 && mono_ms() - t0 < 5000)
        sleep_ms(10);
    CHECK_EQ(atomic_load(&ev.rejoined), 1);
    CHECK_EQ(atomic_load(&ev.err), 0);

    /* told to stop, it stops at once */
    s.stop = 1;
    t0 = mono_ms();
    pthread_kill(th, SIGUSR1);
    {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        rc = pthread_timedjoin_np(th, NULL, &ts);
    }
    require(rc == 0);
    CHECK(mono_ms() - t0 < 500);
    CHECK_EQ(s.rc, 0);
    CHECK_EQ(chanos_listener_close(s.l), 0);
    chanos_domain_close(s.d);
    fake_stop();
    pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
}

/*
 * test_close_failed_reexport: a listener whose name another domain took
 * while the monitor was away fails its accept with CHANOS_ERR_EXISTS
 * after the rejoin, and closes cleanly (it has nothing to withdraw); the
 * other domain's export of the name goes on.
 */
static void test_close_failed_reexport(void)
{
    struct events ev = { 0 };
    chanos_domain *a, *b, *cli;
    chanos_listener *la, *lb;
    chanos_conn *c = NULL, *s = NULL;

    start_monitor();
    a = join(&ev);
    la = export(a, "close.a");
    kill_monitor();
    await_loss(a, &ev, 1);
    start_monitor();
    b = join(NULL);
    lb = export(b, "close.a");
    await_rejoin(a, &ev, 1);
    CHECK_EQ(atomic_load(&ev.err), CHANOS_ERR_EXISTS);
    CHECK_EQ(chanos_accept(la, 0, &c), CHANOS_ERR_EXISTS);
    CHECK_EQ(chanos_listener_close(la), 0);
    /* the name is still b's */
    cli = join(NULL);
    CHECK_EQ(chanos_connect(cli, "close.a", IFACE, MAX_FRAME, 2000, &c), 0);
    require(c != NULL);
    CHECK_EQ(chanos_accept(lb, 2000, &s), 0);
    require(s != NULL);
    send_byte(c, 7);
    recv_byte(s, 7);
    chanos_conn_close(c);
    chanos_conn_close(s);
    chanos_domain_close(cli);
    CHECK_EQ(chanos_listener_close(lb), 0);
    chanos_domain_close(b);
    chanos_domain_close(a);
    stop_monitor();
}

/*
 * test_id_clash: after a restart, the new monitor gives one of a domain's
 * listeners (b) the export id that another of its listeners (a), whose
 * re-export failed, still holds. Connections to b, queued before they are
 * accepted, stay b's: a's accept does not take them, nor does a's close
 * drop them.
 */
static void test_id_clash(void)
{
    struct events ev = { 0 };
    chanos_domain *a, *b, *cli;
    chanos_listener *fill[4], *la, *lb, *other;
    chanos_conn *c1 = NULL, *c2 = NULL, *s = NULL;
    struct chanos_iref ra, rb;
    char name[32];
    uint64_t ja;

    start_monitor();
    a = join(&ev);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "clash.fill%d", i);
        fill[i] = export(a, name);
    }
    la = export(a, "clash.a");
    lb = export(a, "clash.b"); /* re-exported first: the newest */
    ja = export_id(la);
    kill_monitor();
    await_loss(a, &ev, 1);
    start_monitor();
    /* b takes clash.a with id ja - 1, so that a's first re-export, of
     * clash.b, gets ja */
    b = join(NULL);
    for (int i = 0;; i++) {
        chanos_listener *l;

        snprintf(name, sizeof name, "clash.other%d", i);
        l = export(b, name);
        require(export_id(l) <= ja - 2);
        if (export_id(l) == ja - 2)
            break;
    }
    other = export(b, "clash.a");
    require(export_id(other) == ja - 1);
    await_rejoin(a, &ev, 1);
    CHECK_EQ(atomic_load(&ev.err), CHANOS_ERR_EXISTS);
    chanos_listener_ref(la, &ra);
    chanos_listener_ref(lb, &rb);
    require(rb.export_id == ja && ra.export_id == ja);
    CHECK(memcmp(ra.token, rb.token, sizeof ra.token) != 0);

    /* two clients of clash.b, queued in a before anyone accepts */
    cli = join(NULL);
    CHECK_EQ(chanos_connect(cli, "clash.b", IFACE, MAX_FRAME, 2000, &c1), 0);
    CHECK_EQ(chanos_connect(cli, "clash.b", IFACE, MAX_FRAME, 2000, &c2), 0);
    require(c1 != NULL && c2 != NULL);
    CHECK_EQ(chanos_domain_poll(a, 500), 0);
    CHECK_EQ(chanos_accept(la, 0, &s), CHANOS_ERR_EXISTS);
    CHECK(s == NULL);
    chanos_conn_close(s);
    CHECK_EQ(chanos_listener_close(la), 0);
    for (int i = 0; i < 2; i++) {
        s = NULL;
        CHECK_EQ(chanos_accept(lb, 0, &s), 0);
        if (s == NULL)
            continue;
        send_byte(i == 0 ? c1 : c2, (uint8_t)(10 + i));
        recv_byte(s, (uint8_t)(10 + i));
        chanos_conn_close(s);
    }
    chanos_conn_close(c1);
    chanos_conn_close(c2);
    chanos_domain_close(cli);
    chanos_domain_close(b);
    for (int i = 0; i < 4; i++)
        chanos_listener_close(fill[i]);
    chanos_listener_close(lb);
    chanos_domain_close(a);
    stop_monitor();
}

/*
 * test_failure_forgotten: a listener whose re-export failed (its name was
 * taken) and that is exported again by a later rejoin (the name was free
 * by then) accepts again.
 */
static void test_failure_forgotten(void)
{
    struct events ev = { 0 };
    chanos_domain *a, *b, *cli;
    chanos_listener *la;
    chanos_conn *c = NULL, *s = NULL;

    start_monitor();
    a = join(&ev);
    la = export(a, "forget.a");
    kill_monitor();
    await_loss(a, &ev, 1);
    start_monitor();
    b = join(NULL);
    (void)export(b, "forget.a");
    await_rejoin(a, &ev, 1);
    CHECK_EQ(atomic_load(&ev.err), CHANOS_ERR_EXISTS);
    CHECK_EQ(chanos_accept(la, 0, &s), CHANOS_ERR_EXISTS);
    chanos_domain_close(b); /* frees the name, and its listener */

    kill_monitor();
    await_loss(a, &ev, 2);
    start_monitor();
    /* a poll loop that only accepts, on the failed listener: its accept
     * reads the monitor's answers, and the rejoin completes */
    {
        int64_t end = mono_ms() + 10000;

        while (atomic_load(&ev.rejoined) < 2 && mono_ms() < end) {
            struct pollfd p = { chanos_domain_fd(a), POLLIN, 0 };
            int rc;

            (void)poll(&p, 1, 50);
            rc = chanos_accept(la, 0, &s);
            CHECK(rc == CHANOS_ERR_EXISTS || rc == CHANOS_ERR_TIMEDOUT);
            CHECK(s == NULL);
        }
    }
    CHECK_EQ(atomic_load(&ev.rejoined), 2);
    CHECK_EQ(atomic_load(&ev.err), 0);
    CHECK_EQ(chanos_accept(la, 0, &s), CHANOS_ERR_TIMEDOUT);
    cli = join(NULL);
    CHECK_EQ(chanos_connect(cli, "forget.a", IFACE, MAX_FRAME, 2000, &c), 0);
    require(c != NULL);
    CHECK_EQ(chanos_accept(la, 2000, &s), 0);
    require(s != NULL);
    send_byte(c, 3);
    recv_byte(s, 3);
    chanos_conn_close(c);
    chanos_conn_close(s);
    chanos_domain_close(cli);
    CHECK_EQ(chanos_listener_close(la), 0);
    chanos_domain_close(a);
    stop_monitor();
}

/* ---- a fake net binder ---- */

/* It admits what libchanos grants and hands out, as a connection from
 * another machine, the server side of a ring pair made here (ready),
 * with the tag of the last grant. */
struct binder {
    int efd;
    int grants;
    uint8_t tag[CHANOS_NET_GRANT_TAG_MAX];
    size_t tag_len;
    chanos_conn *ready;
};

static struct binder bd;

static int bd_open(void **state, int *wait_fd)
{
    bd.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    *state = &bd;
    *wait_fd = bd.efd;
    return bd.efd >= 0 ? 0 : -errno;
}

static int bd_dial(void *state, const struct chanos_net_bind *b,
                   chanos_conn **out)
{
    (void)state, (void)b;
    *out = NULL;
    return CHANOS_ERR_NO_ROUTE;
}

static int bd_listen(void *state, int fd, uint32_t max_frame)
{
    (void)state, (void)max_frame;
    close(fd);
    return 0;
}

static int bd_grant(void *state, const struct chanos_net_grant *g)
{
    (void)state;
    if (g->tag_len > sizeof bd.tag)
        return -EINVAL;
    memcpy(bd.tag, g->tag, g->tag_len);
    bd.tag_len = g->tag_len;
    bd.grants++;
    return 0;
}

static int bd_accept(void *state, chanos_conn **out, void *tag,
                     size_t *tag_len)
{
    uint64_t v;

    (void)state;
    (void)!read(bd.efd, &v, sizeof v);
    if (bd.ready == NULL || *tag_len < bd.tag_len)
        return CHANOS_ERR_AGAIN;
    *out = bd.ready;
    bd.ready = NULL;
    memcpy(tag, bd.tag, bd.tag_len);
    *tag_len = bd.tag_len;
    return 0;
}

static void bd_peer_gone(void *state, uint64_t conn_id, int network_lost)
{
    (void)state, (void)conn_id, (void)network_lost;
}

static void bd_close(void *state)
{
    (void)state;
    close(bd.efd);
    chanos_conn_close(bd.ready);
    bd.ready = NULL;
}

static const struct chanos_net_binder fake_binder = {
    bd_open, bd_dial, bd_listen, bd_grant, bd_accept, bd_peer_gone, bd_close,
    NULL, NULL,
};

/* conn_pair makes a connected pair of connections in this process. */
static void conn_pair(chanos_conn **srv, chanos_conn **cli)
{
    struct chanos_ump_options o = { 0 };
    chanos_ump *a, *b;

    o.max_msg = MAX_FRAME;
    pair(&o, &a, &b);
    require(a != NULL && b != NULL);
    CHECK_EQ(chanos_conn_new(a, srv), 0);
    CHECK_EQ(chanos_conn_new(b, cli), 0);
    require(*srv != NULL && *cli != NULL);
}

/* bd_connect makes a connection from another machine ready for accept. */
static chanos_conn *bd_connect(void)
{
    chanos_conn *srv, *cli;
    uint64_t one = 1;

    conn_pair(&srv, &cli);
    require(bd.ready == NULL);
    bd.ready = srv;
    CHECK_EQ(write(bd.efd, &one, sizeof one), (ssize_t)sizeof one);
    return cli;
}

/* ump_incoming has the fake monitor announce a ump connection to the
 * export of id, and returns the client's side. */
static chanos_conn *ump_incoming(uint64_t id)
{
    struct chanos_ump_options o = { 0 };
    struct chanos_ump_files f, g;
    chanos_ump *u = NULL;
    chanos_conn *c = NULL;
    int sv[2], fds[5];

    o.max_msg = MAX_FRAME;
    require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    require(chanos_ump_files_create(&o, &f) == 0);
    require(split_files(&f, &g) == 0);
    fds[0] = f.mem;
    fds[1] = f.wake[CHANOS_UMP_CREATOR][0];
    fds[2] = f.wake[CHANOS_UMP_CREATOR][1];
    fds[3] = f.caps[CHANOS_UMP_CREATOR];
    fds[4] = sv[0];
    fake_incoming(id, MONITOR_INTERCONNECT_UMP, fds, 5);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_ATTACHER, &g, sv[1], &o, &u), 0);
    require(u != NULL);
    CHECK_EQ(chanos_conn_new(u, &c), 0);
    require(c != NULL);
    return c;
}

/*
 * test_closed_listener_conns: connections that reach a domain for a
 * listener it has closed are not kept for an accept that cannot come:
 * one from another machine granted before the close and admitted after
 * it, one announced over ump after it, and one from another machine
 * announced after it (not admitted at all). Their clients see them end.
 * A connection for a listener still open is accepted as usual.
 */
static void test_closed_listener_conns(void)
{
    chanos_domain *d;
    chanos_listener *l;
    chanos_conn *cli, *s = NULL;
    uint64_t id;
    int grants;

    memset(&bd, 0, sizeof bd);
    fake_start(FAKE_ANSWER);
    d = join_with(2000, NULL, &fake_binder);
    l = export(d, "net.a");
    id = export_id(l);

    /* open: granted, admitted, accepted */
    fake_incoming(id, MONITOR_INTERCONNECT_NET, NULL, 0);
    CHECK_EQ(chanos_domain_poll(d, 1000), 0);
    CHECK_EQ(bd.grants, 1);
    cli = bd_connect();
    CHECK_EQ(chanos_accept(l, 1000, &s), 0);
    require(s != NULL);
    send_byte(cli, 1);
    recv_byte(s, 1);
    chanos_conn_close(s);
    chanos_conn_close(cli);

    /* granted, then the listener closes, then the client arrives */
    fake_incoming(id, MONITOR_INTERCONNECT_NET, NULL, 0);
    CHECK_EQ(chanos_domain_poll(d, 1000), 0);
    CHECK_EQ(bd.grants, 2);
    CHECK_EQ(chanos_listener_close(l), 0);
    cli = bd_connect();
    CHECK_EQ(chanos_domain_poll(d, 0), 0);
    CHECK(bd.ready == NULL); /* libchanos took it */
    CHECK(gone(cli, 1000));
    chanos_conn_close(cli);

    /* over ump, after the close */
    cli = ump_incoming(id);
    CHECK_EQ(chanos_domain_poll(d, 1000), 0);
    CHECK(gone(cli, 1000));
    chanos_conn_close(cli);

    /* from another machine, after the close: not admitted */
    grants = bd.grants;
    fake_incoming(id, MONITOR_INTERCONNECT_NET, NULL, 0);
    CHECK_EQ(chanos_domain_poll(d, 1000), 0);
    CHECK_EQ(bd.grants, grants);

    chanos_domain_close(d);
    fake_stop();
}

/* clean_up shows the monitors' log if a check failed, and removes the
 * directory and the log. */
static void clean_up(void)
{
    monitor_clean_up(dir, logpath, failures);
}

/*
 * test_untrusted_dir: a rejoin checks the directory as a join does. While
 * the lost monitor's directory is open to others, whatever listens on its
 * socket gets no connection from the domain; once it is private again,
 * the domain connects.
 */
static void test_untrusted_dir(void)
{
    struct events ev = { 0 };
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    chanos_domain *d;
    int ls, c = -1;
    int64_t end;

    start_monitor();
    d = join(&ev);
    kill_monitor();
    await_loss(d, &ev, 1);
    CHECK(chmod(dir, 0755) == 0);
    unlink(sockpath);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sockpath);
    ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    require(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            listen(ls, 8) == 0);
    /* a second at least: several attempts, at most 250 ms apart */
    end = mono_ms() + 1000;
    while (mono_ms() < end) {
        (void)chanos_domain_poll(d, 50);
        c = accept(ls, NULL, NULL);
        if (c >= 0)
            break;
    }
    CHECK(c < 0);
    if (c >= 0)
        close(c);
    CHECK(chmod(dir, 0700) == 0);
    end = mono_ms() + 5000;
    while ((c = accept(ls, NULL, NULL)) < 0 && mono_ms() < end)
        (void)chanos_domain_poll(d, 50);
    CHECK(c >= 0);
    if (c >= 0)
        close(c);
    chanos_domain_close(d);
    close(ls);
    unlink(sockpath);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(sockpath, sizeof sockpath, "%s/monitor.sock", dir);
    snprintf(logpath, sizeof logpath, "%s.log", dir);

    test_zero_timeout();
    test_serve_backoff();
    test_close_failed_reexport();
    test_id_clash();
    test_failure_forgotten();
    test_closed_listener_conns();
    test_untrusted_dir();

    stop_monitor();
    clean_up();
    return check_done("rejoin_test");
}
