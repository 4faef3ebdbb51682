/*
 * domain_self_test.c: a C domain connecting to its own export
 * (docs/c-domains.md). The monitor answers such a bind with via = local and
 * libchanos pairs the two ends inside the process; the server side is
 * queued for chanos_accept. Unlike the other tests here it needs a real
 * monitor: it runs `chanos monitor` (CHANOS_CMD, built by CMake with go)
 * in a private directory of its own. Frames are those of ctest.if.
 */
#include "ump_testutil.h"
#include "ctest.h"
#include "monitor_child.h"

#include <errno.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#ifndef CHANOS_CMD
#error "CHANOS_CMD must name the chanos command (c/tests/CMakeLists.txt)"
#endif

/* The accept queue's bound in domain.c (INCOMING_LIMIT), which
 * docs/c-domains.md states. */
#define QUEUE_LIMIT 128

/*
 * Each test exports names of its own: the monitor releases a closed
 * domain's names once it has seen the session end, which may be after the
 * next test's export.
 */

static char dir[] = "/tmp/chanos-self-XXXXXX";
static char logpath[sizeof dir + 8];
static pid_t monitor_pid = -1;

/* start_monitor runs the monitor in a fresh private directory and returns
 * once its socket is there; its log goes beside the directory. */
static int start_monitor(void)
{
    char sock[sizeof dir + 16];

    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(logpath, sizeof logpath, "%s.log", dir);
    snprintf(sock, sizeof sock, "%s/monitor.sock", dir);
    monitor_pid = monitor_start(dir, sock, logpath);
    return monitor_pid > 0 ? 0 : -1;
}

/* stop_monitor stops the monitor, shows its log if a check failed, and
 * removes its directory. */
static void stop_monitor(void)
{
    monitor_stop(monitor_pid);
    monitor_clean_up(dir, logpath, failures);
}

static void stop_monitor(void);

/* require ends the test at a failure the rest would trip over (a NULL
 * connection), stopping the monitor first. */
static void require(int ok)
{
    if (ok)
        return;
    fprintf(stderr, "domain_self_test: cannot go on\n");
    failures++;
    stop_monitor();
    exit(1);
}

static chanos_domain *join_spin(int64_t spin_ns)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d = NULL;

    o.dir = dir;
    o.program = "domain_self_test";
    o.spin_ns = spin_ns;
    CHECK_EQ(chanos_join(&d, &o), 0);
    require(d != NULL);
    return d;
}

static chanos_domain *join(void) { return join_spin(0); }

static chanos_listener *export(chanos_domain *d, const char *name)
{
    chanos_listener *l = NULL;

    CHECK_EQ(chanos_export(d, name, "ctest", CTEST_MAX_FRAME_SIZE, &l), 0);
    require(l != NULL);
    return l;
}

/* connect_self binds the domain's own export under name. */
static chanos_conn *connect_self(chanos_domain *d, const char *name)
{
    chanos_conn *c = NULL;

    CHECK_EQ(chanos_connect(d, name, "ctest", CTEST_MAX_FRAME_SIZE, 1000, &c),
             0);
    require(c != NULL);
    return c;
}

static chanos_conn *accept1(chanos_listener *l)
{
    chanos_conn *c = NULL;

    CHECK_EQ(chanos_accept(l, 0, &c), 0);
    require(c != NULL);
    return c;
}

/* no_more checks that nothing else waits for l. */
static void no_more(chanos_listener *l)
{
    chanos_conn *c = NULL;

    CHECK_EQ(chanos_accept(l, 0, &c), CHANOS_ERR_TIMEDOUT);
    CHECK(c == NULL);
}

/* The frames of ctest.if, encoded into a caller's buffer. */
struct out {
    uint8_t mem[CTEST_MAX_FRAME_SIZE];
    struct chanos_buf b;
};

static void send_texts(chanos_conn *c, const char *name)
{
    struct out o;
    struct ctest_texts m = { chanos_cstr(name), { (const uint8_t *)"\1\2", 2 },
                             { (const uint8_t *)"ab", 2 } };

    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_texts_encode(&m, &o.b), 0);
    CHECK_EQ(chanos_conn_send(c, o.b.data, o.b.len, 1000), 0);
}

static void recv_texts(chanos_conn *c, const char *name)
{
    struct chanos_frame f;
    struct ctest_texts m;

    CHECK_EQ(chanos_conn_recv(c, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
    CHECK_EQ(f.hdr.msg, CTEST_MSG_TEXTS);
    CHECK_EQ(ctest_texts_decode(&m, f.data, f.len, NULL, 0), 0);
    CHECK(m.name.len == strlen(name) &&
          memcmp(m.name.ptr, name, m.name.len) == 0);
    CHECK(m.data.len == 2 && m.data.ptr[0] == 1 && m.data.ptr[1] == 2);
    CHECK(m.chars.len == 2 && memcmp(m.chars.ptr, "ab", 2) == 0);
}

/* put_then_get: an asynchronous rpc put(h) from a to b, answered by b,
 * then get from b to a, answered with h: both directions, both roles. */
static void put_then_get(chanos_conn *a, chanos_conn *b, uint32_t h)
{
    struct out o;
    struct chanos_frame f;
    struct ctest_put_call pc = { h };
    struct ctest_put_reply pr = { 0 };
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr;
    uint32_t id = 0;

    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_put_call_encode(&pc, &o.b), 0);
    CHECK_EQ(chanos_conn_send_call(a, o.b.data, o.b.len, 1000, &id), 0);
    CHECK_EQ(chanos_conn_recv(b, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.hdr.msg, CTEST_MSG_PUT);
    CHECK_EQ(f.hdr.call_id, id);
    pc.h = 0;
    CHECK_EQ(ctest_put_call_decode(&pc, f.data, f.len, NULL, 0), 0);
    CHECK_EQ(pc.h, h);
    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_put_reply_encode(&pr, &o.b), 0);
    CHECK_EQ(chanos_conn_reply(b, &f, o.b.data, o.b.len, 1000), 0);
    CHECK_EQ(chanos_conn_recv(a, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
    CHECK_EQ(f.hdr.call_id, id);

    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_get_call_encode(&gc, &o.b), 0);
    CHECK_EQ(chanos_conn_send_call(b, o.b.data, o.b.len, 1000, &id), 0);
    CHECK_EQ(chanos_conn_recv(a, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.hdr.msg, CTEST_MSG_GET);
    gr.h = h;
    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_get_reply_encode(&gr, &o.b), 0);
    CHECK_EQ(chanos_conn_reply(a, &f, o.b.data, o.b.len, 1000), 0);
    CHECK_EQ(chanos_conn_recv(b, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
    CHECK_EQ(f.hdr.call_id, id);
    gr.h = 0;
    CHECK_EQ(ctest_get_reply_decode(&gr, f.data, f.len, NULL, 0), 0);
    CHECK_EQ(gr.h, h);
}

/* recv_closed checks that c's peer closed in order: receives and sends
 * end with CHANOS_ERR_CLOSED. */
static void recv_closed(chanos_conn *c)
{
    struct chanos_frame f;
    struct out o;
    struct ctest_empty m = { 0 };

    CHECK_EQ(chanos_conn_recv(c, 1000, &f), CHANOS_ERR_CLOSED);
    chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
    CHECK_EQ(ctest_empty_encode(&m, &o.b), 0);
    CHECK_EQ(chanos_conn_send(c, o.b.data, o.b.len, 1000), CHANOS_ERR_CLOSED);
}

#define SERVED_CALLS 200

/* serve answers put and get on a server side from another thread, so that
 * the client's synchronous chanos_conn_call sleeps and is woken. */
static void *serve(void *arg)
{
    chanos_conn *c = arg;
    uint32_t h = 0;

    for (int i = 0; i < 2 * SERVED_CALLS; i++) {
        struct chanos_frame f;
        struct out o;
        struct ctest_put_call pc;
        struct ctest_put_reply pr = { 0 };
        struct ctest_get_reply gr;

        int rc = chanos_conn_recv(c, 5000, &f);

        if (rc != 0) {
            CHECK_EQ(rc, 0);
            break;
        }
        chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
        if (f.hdr.msg == CTEST_MSG_PUT) {
            CHECK_EQ(ctest_put_call_decode(&pc, f.data, f.len, NULL, 0), 0);
            h = pc.h;
            CHECK_EQ(ctest_put_reply_encode(&pr, &o.b), 0);
        } else {
            CHECK_EQ(f.hdr.msg, CTEST_MSG_GET);
            gr.h = h;
            CHECK_EQ(ctest_get_reply_encode(&gr, &o.b), 0);
        }
        CHECK_EQ(chanos_conn_reply(c, &f, o.b.data, o.b.len, 1000), 0);
    }
    return NULL;
}

static void calls(chanos_conn *cli, chanos_conn *srv)
{
    pthread_t t;

    CHECK(pthread_create(&t, NULL, serve, srv) == 0);
    for (uint32_t i = 0; i < SERVED_CALLS; i++) {
        struct out o;
        struct chanos_frame f;
        struct ctest_put_call pc = { i * 7 };
        struct ctest_get_call gc = { 0 };
        struct ctest_get_reply gr = { 0 };

        chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
        CHECK_EQ(ctest_put_call_encode(&pc, &o.b), 0);
        CHECK_EQ(chanos_conn_call(cli, o.b.data, o.b.len, 5000, &f, NULL, NULL),
                 0);
        chanos_buf_init(&o.b, o.mem, sizeof o.mem, NULL, 0);
        CHECK_EQ(ctest_get_call_encode(&gc, &o.b), 0);
        CHECK_EQ(chanos_conn_call(cli, o.b.data, o.b.len, 5000, &f, NULL, NULL),
                 0);
        CHECK_EQ(ctest_get_reply_decode(&gr, f.data, f.len, NULL, 0), 0);
        CHECK_EQ(gr.h, i * 7);
    }
    CHECK(pthread_join(t, NULL) == 0);
}

/* A connection to the domain's own export works as any other, and its
 * two ends see each other close. */
static void test_exchange(void)
{
    const char *name = "self.exchange";
    int n0 = count_fds();
    chanos_domain *d = join();
    chanos_listener *l = export(d, name), *other = export(d, "self.other");
    chanos_conn *cli, *srv;

    no_more(l);
    cli = connect_self(d, name);
    no_more(other); /* queued for its own listener only */
    srv = accept1(l);
    no_more(l);

    send_texts(cli, "from the client");
    recv_texts(srv, "from the client");
    send_texts(srv, "from the server");
    recv_texts(cli, "from the server");
    put_then_get(cli, srv, 42);
    put_then_get(srv, cli, 43);
    calls(cli, srv);

    /* the client closes: the server sees it, after what was sent */
    send_texts(cli, "last");
    chanos_conn_close(cli);
    recv_texts(srv, "last");
    recv_closed(srv);
    chanos_conn_close(srv);

    /* the server closes: the client sees it */
    cli = connect_self(d, name);
    srv = accept1(l);
    put_then_get(cli, srv, 1);
    send_texts(srv, "bye");
    chanos_conn_close(srv);
    recv_texts(cli, "bye");
    recv_closed(cli);
    chanos_conn_close(cli);

    /* two at once, each with its own rings */
    cli = connect_self(d, name);
    {
        chanos_conn *cli2 = connect_self(d, name);
        chanos_conn *srv2;

        srv = accept1(l);
        srv2 = accept1(l);
        send_texts(cli, "one");
        send_texts(cli2, "two");
        recv_texts(srv2, "two");
        recv_texts(srv, "one");
        chanos_conn_close(cli2);
        recv_closed(srv2);
        chanos_conn_close(srv2);
    }
    put_then_get(srv, cli, 2);
    chanos_conn_close(srv);
    chanos_conn_close(cli);

    CHECK_EQ(chanos_listener_close(other), 0);
    CHECK_EQ(chanos_listener_close(l), 0);
    chanos_domain_close(d);
    CHECK_EQ(count_fds(), n0);
}

/* Without a listener there is nothing to connect to, and nothing is left
 * open by trying. A connection not accepted yet is closed with the
 * listener, in order. */
static void test_not_found(void)
{
    const char *name = "self.not-found";
    int n0 = count_fds(), n1;
    chanos_domain *d = join();
    chanos_listener *l = export(d, name);
    chanos_conn *cli = connect_self(d, name), *c = NULL;

    CHECK_EQ(chanos_listener_close(l), 0);
    recv_closed(cli);
    chanos_conn_close(cli);

    n1 = count_fds();
    CHECK_EQ(chanos_connect(d, name, "ctest", CTEST_MAX_FRAME_SIZE, 100, &c),
             CHANOS_ERR_NOT_FOUND);
    CHECK(c == NULL);
    CHECK_EQ(count_fds(), n1);

    /* exported again, it is a new export: connecting works again */
    l = export(d, name);
    cli = connect_self(d, name);
    c = accept1(l);
    put_then_get(cli, c, 3);
    chanos_conn_close(c);
    chanos_conn_close(cli);
    CHECK_EQ(chanos_listener_close(l), 0);
    chanos_domain_close(d);
    CHECK_EQ(count_fds(), n0);
}

/* The checks of a bind over ump apply: frame sizes and interfaces. */
static void test_mismatch(void)
{
    const char *name = "self.mismatch";
    int n0 = count_fds(), n1;
    chanos_domain *d = join();
    chanos_listener *l = export(d, name);
    chanos_conn *c = NULL;

    n1 = count_fds();
    /* rings sized beyond the client's frames are refused */
    CHECK_EQ(chanos_connect(d, name, "ctest", CTEST_MAX_FRAME_SIZE - 1, 1000,
                            &c),
             CHANOS_ERR_MISMATCH);
    CHECK(c == NULL);
    /* the monitor checks the interface */
    CHECK_EQ(chanos_connect(d, name, "other", 0, 1000, &c),
             CHANOS_ERR_MISMATCH);
    CHECK_EQ(count_fds(), n1);
    no_more(l);
    /* 0 takes the export's size; a larger bound is fine */
    CHECK_EQ(chanos_connect(d, name, "ctest", 0, 1000, &c), 0);
    chanos_conn_close(c);
    CHECK_EQ(chanos_connect(d, name, "ctest", 2 * CTEST_MAX_FRAME_SIZE, 1000,
                            &c),
             0);
    chanos_conn_close(c);
    c = accept1(l);
    recv_closed(c);
    chanos_conn_close(c);
    c = accept1(l);
    recv_closed(c);
    chanos_conn_close(c);
    no_more(l);

    CHECK_EQ(chanos_listener_close(l), 0);
    chanos_domain_close(d);
    CHECK_EQ(count_fds(), n0);
}

/* The accept queue's bound holds for local connections too: one more is
 * refused with CHANOS_ERR_LIMIT, and nothing is left open by it. */
static void test_limit(void)
{
    const char *name = "self.limit";
    int n0 = count_fds(), n1;
    chanos_domain *d = join();
    chanos_listener *l = export(d, name);
    chanos_conn *c = NULL;

    for (int i = 0; i < QUEUE_LIMIT; i++) {
        c = connect_self(d, name);
        chanos_conn_close(c); /* the server side stays queued */
    }
    n1 = count_fds();
    CHECK_EQ(chanos_connect(d, name, "ctest", CTEST_MAX_FRAME_SIZE, 1000, &c),
             CHANOS_ERR_LIMIT);
    CHECK(c == NULL);
    CHECK_EQ(count_fds(), n1);

    for (int i = 0; i < QUEUE_LIMIT; i++) {
        c = accept1(l);
        if (c == NULL)
            break;
        recv_closed(c);
        chanos_conn_close(c);
    }
    no_more(l);
    /* there is room again */
    c = connect_self(d, name);
    chanos_conn_close(c);

    chanos_domain_close(d); /* frees l, closes what it queued */
    CHECK_EQ(count_fds(), n0);
}

/* Closing the domain closes the connections it has not handed out yet;
 * those accepted are the caller's and keep working. */
static void test_domain_close(void)
{
    const char *name = "self.domain-close";
    int n0 = count_fds();
    chanos_domain *d = join();
    chanos_listener *l = export(d, name);
    chanos_conn *cli1 = connect_self(d, name);
    chanos_conn *cli2 = connect_self(d, name);
    chanos_conn *srv1 = accept1(l); /* first come, first accepted */

    chanos_domain_close(d);
    recv_closed(cli2);
    chanos_conn_close(cli2);
    put_then_get(cli1, srv1, 4);
    chanos_conn_close(srv1);
    recv_closed(cli1);
    chanos_conn_close(cli1);
    CHECK_EQ(count_fds(), n0);
}

/* test_spin checks that chanos_join_opts.spin_ns reaches both ends of a
 * connection between two domains (bound through the monitor: the incoming
 * and bind paths) and of one to the domain's own export (the local pair),
 * and that zero keeps the default. */
static void test_spin(void)
{
    static const struct {
        int64_t opt, want;
    } cases[] = {
        { 75000, 75000 },
        { -1, 0 },
        { 0, CHANOS_UMP_DEFAULT_SPIN_NS },
    };
    const char *name = "self.spin";
    int n0 = count_fds();

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        chanos_domain *srvd = join_spin(cases[i].opt);
        chanos_domain *clid = join_spin(cases[i].opt);
        chanos_listener *l = export(srvd, name);
        chanos_conn *cli = NULL, *srv = NULL, *self, *selfsrv;

        CHECK_EQ(chanos_connect(clid, name, "ctest", CTEST_MAX_FRAME_SIZE, 1000,
                                &cli), 0);
        require(cli != NULL);
        /* the server's end comes through the monitor a moment later */
        CHECK_EQ(chanos_accept(l, 5000, &srv), 0);
        require(srv != NULL);
        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(cli)), cases[i].want);
        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(srv)), cases[i].want);
        self = connect_self(srvd, name);
        selfsrv = accept1(l);
        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(self)), cases[i].want);
        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(selfsrv)), cases[i].want);
        put_then_get(cli, srv, 5);
        chanos_conn_close(self);
        chanos_conn_close(selfsrv);
        chanos_conn_close(cli);
        chanos_conn_close(srv);
        chanos_listener_close(l);
        chanos_domain_close(clid);
        chanos_domain_close(srvd);
    }
    CHECK_EQ(count_fds(), n0);
}

/* test_spin_env: CHANOS_SPIN_WINDOW sets the window of a domain that
 * leaves spin_ns 0, not of one that sets it; a value that does not parse
 * fails the join. */
static void test_spin_env(void)
{
    static const struct {
        const char *env;
        int64_t opt, want;
    } cases[] = {
        { "160us", 0, 160000 },
        { "0.5ms", 0, 500000 },
        { "-1", 0, 0 },
        { "0", 0, CHANOS_UMP_DEFAULT_SPIN_NS },
        { "160us", 75000, 75000 },
    };
    static const char *const bad[] = { "fast", "160", "10 us", "1h", "-5us", "nanms", "infus" };
    const char *name = "self.spinenv";

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("CHANOS_SPIN_WINDOW", cases[i].env, 1);
        chanos_domain *d = join_spin(cases[i].opt);
        chanos_listener *l = export(d, name);
        chanos_conn *self = connect_self(d, name);
        chanos_conn *srv = accept1(l);

        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(self)), cases[i].want);
        CHECK_EQ(chanos_ump_spin_ns(chanos_conn_ump(srv)), cases[i].want);
        chanos_conn_close(self);
        chanos_conn_close(srv);
        chanos_listener_close(l);
        chanos_domain_close(d);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct chanos_join_opts o = { .dir = dir };
        chanos_domain *d = NULL;

        setenv("CHANOS_SPIN_WINDOW", bad[i], 1);
        CHECK_EQ(chanos_join(&d, &o), -EINVAL);
        require(d == NULL);
    }
    unsetenv("CHANOS_SPIN_WINDOW");
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The call timeouts of test_stopped_monitor's domains. */
#define CALL_MS 200
#define FAST_MS 5

/*
 * test_stopped_monitor: every call to the monitor is bounded. A monitor
 * that runs answers a bind for a name nobody exports with not_found once
 * the call timeout (chanos_connect given -1) has passed; a stopped one
 * (SIGSTOP) answers nothing, and the bind, an export, a withdraw and the
 * nameservice's bind fail with CHANOS_ERR_TIMEDOUT instead of hanging,
 * however many calls go unanswered (their frames fill the monitor's
 * queue). After SIGCONT the monitor serves again.
 */
static void test_stopped_monitor(void)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d = NULL, *d2 = NULL, *fast = NULL;
    chanos_listener *l = NULL, *l2 = NULL;
    chanos_conn *c = NULL;
    int64_t t0, took;
    int rc;

    o.dir = dir;
    o.program = "domain_self_test";
    o.timeout_ms = CALL_MS;
    CHECK_EQ(chanos_join(&d, &o), 0);
    require(d != NULL);

    /* running: the monitor's own not_found, at the call timeout */
    t0 = mono_ms();
    CHECK_EQ(chanos_connect(d, "self.nobody", "ctest", CTEST_MAX_FRAME_SIZE,
                            -1, &c),
             CHANOS_ERR_NOT_FOUND);
    took = mono_ms() - t0;
    CHECK(took >= CALL_MS - 5 && took < CALL_MS + 1000);
    /* 0: no wait for the name */
    t0 = mono_ms();
    CHECK_EQ(chanos_connect(d, "self.nobody", "ctest", CTEST_MAX_FRAME_SIZE,
                            0, &c),
             CHANOS_ERR_NOT_FOUND);
    CHECK(mono_ms() - t0 < CALL_MS);
    l = export(d, "self.frozen-1");
    /* a domain whose calls give up after FAST_MS (joined while the
     * monitor answers: a few tries, as the hello must come in time) */
    o.timeout_ms = FAST_MS;
    for (int i = 0; i < 50 && fast == NULL; i++)
        (void)chanos_join(&fast, &o);
    require(fast != NULL);
    o.timeout_ms = CALL_MS;

    require(kill(monitor_pid, SIGSTOP) == 0);
    {
        /* kill returns before every thread has stopped: wait for that */
        int status;

        require(waitpid(monitor_pid, &status, WUNTRACED) == monitor_pid &&
                WIFSTOPPED(status));
    }
    t0 = mono_ms();
    CHECK_EQ(chanos_connect(d, "self.frozen-1", "ctest", CTEST_MAX_FRAME_SIZE,
                            -1, &c),
             CHANOS_ERR_TIMEDOUT);
    took = mono_ms() - t0;
    CHECK(took >= CALL_MS + 1000 - 5 && took < CALL_MS + 1000 + 2000);
    CHECK(c == NULL);
    CHECK_EQ(chanos_nameservice_connect(d, -1, &c), CHANOS_ERR_TIMEDOUT);
    CHECK(c == NULL);
    t0 = mono_ms();
    CHECK_EQ(chanos_export(d, "self.frozen-2", "ctest", CTEST_MAX_FRAME_SIZE,
                           &l2),
             CHANOS_ERR_TIMEDOUT);
    took = mono_ms() - t0;
    CHECK(l2 == NULL);
    CHECK(took >= CALL_MS - 5 && took < CALL_MS + 1000);
    CHECK_EQ(chanos_listener_close(l), CHANOS_ERR_TIMEDOUT);
    /* more unanswered calls than the monitor's queue holds, from a domain
     * with a short call timeout: once the socket's send buffer is full
     * (SIOCOUTQ, what the receiver has not taken, has reached SO_SNDBUF:
     * a blocking send would wait for the stopped monitor), a call's send
     * waits within the bound too */
    {
        int fd = chanos_domain_fd(fast), i, extra = 0, outq = 0, sndbuf = 0;
        socklen_t sl = sizeof sndbuf;

        CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
        for (i = 0; i < 20000 && extra < 3; i++) {
            t0 = mono_ms();
            rc = chanos_export(fast, "self.frozen-3", "ctest",
                               CTEST_MAX_FRAME_SIZE, &l2);
            took = mono_ms() - t0;
            if (rc != CHANOS_ERR_TIMEDOUT || took > FAST_MS + 500) {
                CHECK_EQ(rc, CHANOS_ERR_TIMEDOUT);
                CHECK(took <= FAST_MS + 500);
                break;
            }
            CHECK_EQ(ioctl(fd, SIOCOUTQ, &outq), 0);
            if (outq >= sndbuf)
                extra++; /* sends no longer fit: a few more calls */
        }
        CHECK_EQ(extra, 3);
        printf("domain_self_test: the stopped monitor's socket was full "
               "after %d unanswered exports\n", i - 3);
    }
    chanos_domain_close(fast);
    /* join too: the hello is bounded by the same timeout */
    CHECK_EQ(chanos_join(&d2, &o), CHANOS_ERR_TIMEDOUT);
    CHECK(d2 == NULL);
    require(kill(monitor_pid, SIGCONT) == 0);

    /* running again: a new domain works (the stopped calls' late replies
     * are dropped by the old one, which then leaves) */
    chanos_domain_close(d);
    d = join();
    l = export(d, "self.thawed");
    c = connect_self(d, "self.thawed");
    chanos_conn_close(c);
    CHECK_EQ(chanos_listener_close(l), 0);
    chanos_domain_close(d);
}

int main(void)
{
    struct rlimit rl;

    /* the queue test holds 128 server sides of six descriptors each */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 &&
        rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (start_monitor() != 0) {
        failures++;
    } else {
        test_exchange();
        test_not_found();
        test_mismatch();
        test_limit();
        test_domain_close();
        test_spin();
        test_spin_env();
        test_stopped_monitor();
    }
    stop_monitor();
    if (failures) {
        fprintf(stderr, "domain_self_test: %d failures\n", failures);
        return 1;
    }
    printf("domain_self_test: ok\n");
    return 0;
}
