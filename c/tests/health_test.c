/*
 * health_test.c: libchanos's health statuses (chanos_health_*,
 * docs/health.md): the table and its bounds, then chanos_health_serve
 * over a real monitor (`chanos monitor`, CHANOS_CMD) to clients of
 * another domain of this process, which call it through the generated
 * code of health.if built into libchanos (<chanos/health.h>): check,
 * watch and its changes, statuses set from another thread while it
 * serves, a watcher that does not read, and the bound of services a
 * connection watches; then a service of its own (c/tests/ctest.if), its
 * health and its reflection served by one chanos_server on one thread. The Makefile
 * runs it under AddressSanitizer and UndefinedBehaviorSanitizer (make
 * test-c) and ThreadSanitizer (make test-tasks-tsan).
 */
#include "check.h"
#include "monitor_child.h"

#include <chanos/health.h>
#include <chanos/reflection.h>

#include "ctest.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifndef CHANOS_CMD
#error "CHANOS_CMD must name the chanos command (c/tests/CMakeLists.txt)"
#endif

#define MS 10000 /* the bound of every wait: a failure, not a timing */

static char dir[] = "/tmp/chanos-health-XXXXXX";
static char logpath[sizeof dir + 8];
static pid_t monitor_pid = -1;

static void stop_monitor(void)
{
    monitor_stop(monitor_pid);
    monitor_clean_up(dir, logpath, failures);
}

/* require ends the test at a failure the rest would trip over. */
static void require(int ok)
{
    if (ok)
        return;
    fprintf(stderr, "health_test: cannot go on\n");
    failures++;
    stop_monitor();
    exit(1);
}

static int status_of(chanos_health *h, const char *service)
{
    int st = -1;

    CHECK_EQ(chanos_health_status(h, service, &st), 0);
    return st;
}

/* The table alone: the domain serving from the start, each status as
 * set, the bounds of a name, a status and the table, and shutdown. */
static void test_table(void)
{
    char longest[CHANOS_HEALTH_SERVICE_MAX + 2];
    chanos_health *h;
    int st;

    CHECK_EQ(chanos_health_new(3, &h), 0);
    require(h != NULL);
    CHECK_EQ(status_of(h, ""), CHANOS_HEALTH_SERVING);
    CHECK_EQ(chanos_health_status(h, "kv", &st), CHANOS_ERR_NOT_FOUND);
    CHECK_EQ(chanos_health_set(h, "kv", CHANOS_HEALTH_NOT_SERVING), 0);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_NOT_SERVING);
    CHECK_EQ(chanos_health_set(h, "kv", 4), CHANOS_ERR_ENUM);
    CHECK_EQ(chanos_health_set(h, "kv", -1), CHANOS_ERR_ENUM);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_NOT_SERVING);

    memset(longest, 'a', sizeof longest);
    longest[CHANOS_HEALTH_SERVICE_MAX + 1] = '\0';
    CHECK_EQ(chanos_health_set(h, longest, CHANOS_HEALTH_SERVING), CHANOS_ERR_BOUND);
    longest[CHANOS_HEALTH_SERVICE_MAX] = '\0';
    CHECK_EQ(chanos_health_set(h, longest, CHANOS_HEALTH_SERVING), 0);

    /* "", kv and the longest fill the three places: a fourth service is
     * refused, and those in the table still change */
    CHECK_EQ(chanos_health_set(h, "more", CHANOS_HEALTH_SERVING), CHANOS_ERR_HEALTH_FULL);
    CHECK_EQ(chanos_health_status(h, "more", &st), CHANOS_ERR_NOT_FOUND);
    CHECK_EQ(chanos_health_set(h, "kv", CHANOS_HEALTH_SERVING), 0);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_SERVING);
    CHECK(strstr(chanos_strerror(CHANOS_ERR_HEALTH_FULL), "full") != NULL);

    chanos_health_shutdown(h);
    CHECK_EQ(status_of(h, ""), CHANOS_HEALTH_NOT_SERVING);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_NOT_SERVING);
    CHECK_EQ(status_of(h, longest), CHANOS_HEALTH_NOT_SERVING);
    CHECK_EQ(chanos_health_set(h, "kv", CHANOS_HEALTH_SERVING), 0); /* ignored */
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_NOT_SERVING);
    chanos_health_resume(h);
    CHECK_EQ(status_of(h, ""), CHANOS_HEALTH_SERVING);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_SERVING);
    CHECK_EQ(chanos_health_set(h, "kv", CHANOS_HEALTH_UNKNOWN), 0);
    CHECK_EQ(status_of(h, "kv"), CHANOS_HEALTH_UNKNOWN);
    chanos_health_free(h);

    CHECK_EQ(chanos_health_new(0, &h), 0); /* the default bound */
    for (int i = 1; i < CHANOS_HEALTH_SERVICES_DEFAULT; i++) {
        char name[16];

        snprintf(name, sizeof name, "s%d", i);
        CHECK_EQ(chanos_health_set(h, name, CHANOS_HEALTH_SERVING), 0);
    }
    CHECK_EQ(chanos_health_set(h, "one-more", CHANOS_HEALTH_SERVING), CHANOS_ERR_HEALTH_FULL);
    chanos_health_free(h);
}

/* ---- served ---- */

static chanos_health *served;
static chanos_domain *srv_domain;
static chanos_listener *srv_listener;
static pthread_t srv_thread;
static volatile sig_atomic_t stopping;
static int serve_rc = -1;

/* on_stop runs on the serving thread, the one thread where SIGUSR1 is
 * not blocked, and only while it sleeps (or does its chores). */
static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

/* serving_opts sets *o up for a serving thread: it sleeps at once (a
 * test on a shared machine) with SIGUSR1 unblocked in *mask, and stops
 * once stopping is set. */
static void serving_opts(struct chanos_serve_opts *o, sigset_t *mask)
{
    pthread_sigmask(SIG_SETMASK, NULL, mask);
    sigdelset(mask, SIGUSR1);
    o->spin_ns = 0;
    o->stop = (const volatile int *)&stopping;
    o->sigmask = mask;
}

static void *serve_thread(void *arg)
{
    struct chanos_serve_opts o;
    sigset_t mask;

    (void)arg;
    serving_opts(&o, &mask);
    serve_rc = chanos_health_serve(served, srv_domain, srv_listener, &o);
    return NULL;
}

static chanos_domain *join(void)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d = NULL;

    o.dir = dir;
    o.program = "health_test";
    CHECK_EQ(chanos_join(&d, &o), 0);
    require(d != NULL);
    return d;
}

/* start_serving exports svc.health in a domain of its own and serves it
 * on a thread of its own. */
static void start_serving(void)
{
    struct sigaction sa;
    sigset_t block;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &block, NULL); /* the thread inherits it */
    CHECK_EQ(chanos_health_new(0, &served), 0);
    require(served != NULL);
    srv_domain = join();
    CHECK_EQ(chanos_health_export(srv_domain, "svc", &srv_listener), 0);
    require(srv_listener != NULL);
    CHECK_STR(chanos_listener_name(srv_listener), "svc.health");
    require(pthread_create(&srv_thread, NULL, serve_thread, NULL) == 0);
}

static void stop_serving(void)
{
    pthread_kill(srv_thread, SIGUSR1);
    pthread_join(srv_thread, NULL);
    CHECK_EQ(serve_rc, 0);
    CHECK_EQ(chanos_listener_close(srv_listener), 0);
    chanos_domain_close(srv_domain);
    chanos_health_free(served);
}

static chanos_conn *connect_health(chanos_domain *d)
{
    chanos_conn *c = NULL;

    CHECK_EQ(chanos_connect_iface(d, "svc.health", &health_interface, MS, &c), 0);
    require(c != NULL);
    return c;
}

/* check calls check(service) on c: its status, or -1 and the error
 * reply's code in *code. */
static int check(chanos_conn *c, const char *service, uint64_t *code)
{
    struct health_check_call in = { chanos_cstr(service) };
    struct health_check_reply out;
    struct chanos_status st;
    int rc = health_check(c, &in, &out, MS);

    if (rc == CHANOS_ERR_REMOTE) {
        CHECK_EQ(chanos_conn_status(c, &st), 0);
        *code = st.code;
        return -1;
    }
    CHECK_EQ(rc, 0);
    return rc == 0 ? (int)out.status : -2;
}

static void watch(chanos_conn *c, const char *service)
{
    struct health_watch m = { chanos_cstr(service) };

    CHECK_EQ(health_watch_send(c, &m, MS), 0);
}

/* next receives the next changed on c, its service copied into name (of
 * CHANOS_HEALTH_SERVICE_MAX + 1 bytes): its status, or -1. */
static int next(chanos_conn *c, char *name)
{
    struct chanos_frame f;
    struct health_changed m;
    int rc = chanos_conn_recv(c, MS, &f);

    CHECK_EQ(rc, 0);
    if (rc != 0)
        return -1;
    CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
    CHECK_EQ(health_changed_decode(&m, f.data, f.len, f.fds, f.nfds), 0);
    memcpy(name, m.service.ptr, m.service.len);
    name[m.service.len] = '\0';
    return (int)m.status;
}

static void expect(chanos_conn *c, const char *service, int status)
{
    char name[CHANOS_HEALTH_SERVICE_MAX + 1];

    CHECK_EQ(next(c, name), status);
    CHECK_STR(name, service);
}

/* check and watch as a Go client sees them (interfaces/health): the
 * domain serving, a service with no status not found (in Go's words),
 * a watch answered at once and at each change, shutdown and resume. */
static void test_check_and_watch(void)
{
    chanos_domain *d = join();
    chanos_conn *c = connect_health(d);
    struct chanos_status st;
    uint64_t code = 0;

    CHECK_EQ(check(c, "", &code), CHANOS_HEALTH_SERVING);
    CHECK_EQ(check(c, "kv", &code), -1);
    CHECK_EQ(code, CHANOS_CODE_NOT_FOUND);
    CHECK_EQ(chanos_conn_status(c, &st), 0);
    CHECK(st.detail.len == strlen("no status for service \"kv\"") &&
          memcmp(st.detail.ptr, "no status for service \"kv\"", st.detail.len) == 0);

    watch(c, "kv");
    expect(c, "kv", CHANOS_HEALTH_SERVICE_UNKNOWN);
    CHECK_EQ(chanos_health_set(served, "kv", CHANOS_HEALTH_SERVING), 0);
    expect(c, "kv", CHANOS_HEALTH_SERVING);
    CHECK_EQ(check(c, "kv", &code), CHANOS_HEALTH_SERVING);
    /* no change, no message: the next one is the next change's */
    CHECK_EQ(chanos_health_set(served, "kv", CHANOS_HEALTH_SERVING), 0);
    CHECK_EQ(chanos_health_set(served, "other", CHANOS_HEALTH_NOT_SERVING), 0);
    CHECK_EQ(chanos_health_set(served, "kv", CHANOS_HEALTH_NOT_SERVING), 0);
    expect(c, "kv", CHANOS_HEALTH_NOT_SERVING);

    watch(c, "");
    expect(c, "", CHANOS_HEALTH_SERVING);
    CHECK_EQ(chanos_health_set(served, "kv", CHANOS_HEALTH_SERVING), 0);
    expect(c, "kv", CHANOS_HEALTH_SERVING);
    chanos_health_shutdown(served);
    /* the two changes, in either order */
    {
        char a[CHANOS_HEALTH_SERVICE_MAX + 1], b[CHANOS_HEALTH_SERVICE_MAX + 1];

        CHECK_EQ(next(c, a), CHANOS_HEALTH_NOT_SERVING);
        CHECK_EQ(next(c, b), CHANOS_HEALTH_NOT_SERVING);
        CHECK((strcmp(a, "") == 0 && strcmp(b, "kv") == 0) ||
              (strcmp(a, "kv") == 0 && strcmp(b, "") == 0));
    }
    CHECK_EQ(check(c, "", &code), CHANOS_HEALTH_NOT_SERVING);
    chanos_health_resume(served);
    CHECK_EQ(check(c, "", &code), CHANOS_HEALTH_SERVING);
    chanos_conn_close(c);
    chanos_domain_close(d);
}

#define FLIPS 2000

/* flipper sets busy FLIPS times, then to a status it never had: the
 * last change, which must arrive. It counts the sets that failed in
 * *arg, for the main thread to check (the checks' counts are its own). */
static void *flipper(void *arg)
{
    int *failed = arg;

    for (int i = 0; i < FLIPS; i++)
        if (chanos_health_set(served, "busy", i % 2 ? CHANOS_HEALTH_SERVING
                                                    : CHANOS_HEALTH_NOT_SERVING) != 0)
            (*failed)++;
    if (chanos_health_set(served, "busy", CHANOS_HEALTH_UNKNOWN) != 0)
        (*failed)++;
    return NULL;
}

/* Statuses set on one thread while another serves: every change a
 * watcher is sent is one that was set, and the latest arrives. */
static void test_set_while_serving(void)
{
    chanos_domain *d = join();
    chanos_conn *c = connect_health(d);
    char name[CHANOS_HEALTH_SERVICE_MAX + 1];
    pthread_t t;
    int st, n = 0, failed = 0;

    CHECK_EQ(chanos_health_set(served, "busy", CHANOS_HEALTH_SERVING), 0);
    watch(c, "busy");
    expect(c, "busy", CHANOS_HEALTH_SERVING);
    require(pthread_create(&t, NULL, flipper, &failed) == 0);
    do {
        st = next(c, name);
        CHECK_STR(name, "busy");
        n++;
    } while (st == CHANOS_HEALTH_SERVING || st == CHANOS_HEALTH_NOT_SERVING);
    CHECK_EQ(st, CHANOS_HEALTH_UNKNOWN);
    CHECK(n <= FLIPS + 1);
    pthread_join(t, NULL);
    CHECK_EQ(failed, 0);
    chanos_conn_close(c);
    chanos_domain_close(d);
}

#define WATCHED CHANOS_HEALTH_WATCHED_MAX
#define ROUNDS 100

/* A watcher that does not read holds up neither the setter nor the other
 * connections: its ring fills, and the changes made meanwhile go as one,
 * the latest status of each service, once it reads again. */
static void test_slow_watcher(void)
{
    chanos_domain *d = join();
    chanos_conn *slow = connect_health(d), *other = connect_health(d);
    char name[CHANOS_HEALTH_SERVICE_MAX + 1];
    int last[WATCHED], done = 0, received = 0;
    uint64_t code;

    for (int i = 0; i < WATCHED; i++) {
        snprintf(name, sizeof name, "w%d", i);
        CHECK_EQ(chanos_health_set(served, name, CHANOS_HEALTH_SERVING), 0);
        watch(slow, name);
        last[i] = -1;
    }
    /* Each round changes every watched service; the other connection's
     * second check is served after the loop has sent what the round
     * changed, so that without a full ring nothing would go as one. */
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < WATCHED; i++) {
            snprintf(name, sizeof name, "w%d", i);
            CHECK_EQ(chanos_health_set(served, name, r % 2 ? CHANOS_HEALTH_SERVING
                                                           : CHANOS_HEALTH_NOT_SERVING),
                     0);
        }
        CHECK_EQ(check(other, "", &code), CHANOS_HEALTH_SERVING);
        CHECK_EQ(check(other, "", &code), CHANOS_HEALTH_SERVING);
    }
    for (int i = 0; i < WATCHED; i++) {
        snprintf(name, sizeof name, "w%d", i);
        CHECK_EQ(chanos_health_set(served, name, CHANOS_HEALTH_UNKNOWN), 0);
    }
    while (done < WATCHED && failures == 0) {
        int st = next(slow, name), i = atoi(name + 1);

        received++;
        CHECK(name[0] == 'w' && i >= 0 && i < WATCHED);
        if (i < 0 || i >= WATCHED)
            break;
        CHECK(last[i] != CHANOS_HEALTH_UNKNOWN); /* nothing after the last */
        if (st == CHANOS_HEALTH_UNKNOWN)
            done++;
        last[i] = st;
    }
    CHECK_EQ(done, WATCHED);
    /* the first answers, one per round, and the last: fewer, so some
     * went as one */
    CHECK(received < WATCHED * (ROUNDS + 2));
    chanos_conn_close(slow);
    chanos_conn_close(other);
    chanos_domain_close(d);
}

/* A connection watches at most CHANOS_HEALTH_WATCHED_MAX services: one
 * more ends it, and the others go on. */
static void test_watch_bound(void)
{
    chanos_domain *d = join();
    chanos_conn *c = connect_health(d), *other = connect_health(d);
    char name[CHANOS_HEALTH_SERVICE_MAX + 1];
    struct chanos_frame f;
    uint64_t code;

    for (int i = 0; i < WATCHED; i++) {
        snprintf(name, sizeof name, "q%d", i);
        watch(c, name);
    }
    for (int i = 0; i < WATCHED; i++)
        CHECK_EQ(next(c, name), CHANOS_HEALTH_SERVICE_UNKNOWN);
    watch(c, "q0"); /* watched already: answered again */
    expect(c, "q0", CHANOS_HEALTH_SERVICE_UNKNOWN);
    watch(c, "q-one-more");
    CHECK_EQ(chanos_conn_recv(c, MS, &f), CHANOS_ERR_CLOSED);
    CHECK_EQ(check(other, "", &code), CHANOS_HEALTH_SERVING);
    chanos_conn_close(c);
    chanos_conn_close(other);
    chanos_domain_close(d);
}

/* ---- several exports on one thread ---- */

/* The time left of the last put's call, as its handler saw it; atomic,
 * as the ring that orders it is mapped twice in this process, where
 * ThreadSanitizer sees no order. */
static _Atomic int64_t put_left;

/* The service's handlers: put keeps a handle, get returns it. */
static int on_put(void *ctx, chanos_conn *c, const struct ctest_put_call *in,
                  struct ctest_put_reply *out)
{
    (void)out;
    *(ctest_handle *)ctx = in->h;
    atomic_store(&put_left, chanos_conn_call_left_ns(c));
    return 0;
}

static int on_get(void *ctx, chanos_conn *c, const struct ctest_get_call *in,
                  struct ctest_get_reply *out)
{
    (void)c, (void)in;
    out->h = *(const ctest_handle *)ctx;
    return 0;
}

static const struct ctest_server_ops store_ops = { .put = on_put, .get = on_get };

static chanos_server *multi;
static int multi_rc = -1;

/* describe asks the reflection service c for name: 0 and *out, or the
 * error reply's code, its detail in detail (CHANOS_STATUS_DETAIL_MAX + 1
 * bytes). */
static uint64_t describe(chanos_conn *c, const char *name,
                         struct reflection_describe_reply *out, char *detail)
{
    struct reflection_describe_call in = { chanos_cstr(name) };
    struct chanos_status st;
    int rc = reflection_describe(c, &in, out, MS);

    detail[0] = '\0';
    if (rc != CHANOS_ERR_REMOTE) {
        CHECK_EQ(rc, 0);
        return 0;
    }
    CHECK_EQ(chanos_conn_status(c, &st), 0);
    memcpy(detail, st.detail.ptr, st.detail.len);
    detail[st.detail.len] = '\0';
    return st.code;
}

/* is_definition reports whether v is the definition that pieces join
 * into. */
static bool is_definition(struct chanos_str v, const char *const *pieces)
{
    size_t off = 0;

    for (; *pieces != NULL; pieces++) {
        size_t k = strlen(*pieces);

        if (off + k > v.len || memcmp(v.ptr + off, *pieces, k) != 0)
            return false;
        off += k;
    }
    return off == v.len;
}

/* A definition over describe's bound: 70 pieces of 4000 bytes. */
static char big_piece[4001];
static const char *big_pieces[71];

/*
 * The reflection service of the server's domain: each export named is
 * described with its interface's name, fingerprint and definition, the
 * reflection export itself included; a name not exported, or exported
 * privately, is not found, an export without a definition unimplemented,
 * and one over the bound resource exhausted, in Go's words.
 */
static void test_reflection(chanos_domain *cd)
{
    struct reflection_describe_reply r;
    char detail[CHANOS_STATUS_DETAIL_MAX + 1];
    chanos_conn *c = NULL;

    CHECK_EQ(chanos_connect_iface(cd, "multi.reflection", &reflection_interface, MS, &c), 0);
    require(c != NULL);
    CHECK_EQ(describe(c, "multi", &r, detail), 0);
    CHECK(r.iface.len == 5 && memcmp(r.iface.ptr, "ctest", 5) == 0);
    CHECK(r.fingerprint == CTEST_FINGERPRINT);
    CHECK(is_definition(r.definition, ctest_interface.definition));
    CHECK_EQ(describe(c, "multi.health", &r, detail), 0);
    CHECK(r.fingerprint == HEALTH_FINGERPRINT);
    CHECK(is_definition(r.definition, health_interface.definition));
    CHECK_EQ(describe(c, "multi.reflection", &r, detail), 0);
    CHECK(is_definition(r.definition, reflection_interface.definition));
    CHECK_EQ(describe(c, "secret", &r, detail), CHANOS_CODE_NOT_FOUND);
    CHECK_STR(detail, "this domain exports no \"secret\"");
    CHECK_EQ(describe(c, "nowhere", &r, detail), CHANOS_CODE_NOT_FOUND);
    /* a client's name puts no control byte into the detail: Go's %q */
    CHECK_EQ(describe(c, "a\nb\"\x01\xc3", &r, detail), CHANOS_CODE_NOT_FOUND);
    CHECK_STR(detail, "this domain exports no \"a\\nb\\\"\\x01\\xc3\"");
    CHECK_EQ(describe(c, "bare", &r, detail), CHANOS_CODE_UNIMPLEMENTED);
    CHECK_STR(detail, "the interface ctest of \"bare\" carries no definition");
    CHECK_EQ(describe(c, "huge", &r, detail), CHANOS_CODE_RESOURCE_EXHAUSTED);
    CHECK_STR(detail, "the definition of ctest takes 280000 bytes, more than "
                      "describe carries (262144)");
    chanos_conn_close(c);
}

static void *multi_thread(void *arg)
{
    struct chanos_serve_opts o;
    sigset_t mask;

    (void)arg;
    serving_opts(&o, &mask);
    multi_rc = chanos_server_run(multi, &o);
    return NULL;
}

/*
 * One domain serves its service, "multi" (ctest), its health,
 * "multi.health", and its reflection, "multi.reflection", on one thread,
 * in one chanos_server: a client calls the one while it watches the
 * other, whose status is set from another thread meanwhile, and asks the
 * third about the domain's exports. A server takes only its domain's
 * exports, each once, and not while it runs.
 */
static void test_one_thread(void)
{
    static const struct chanos_export_opts private_ = { CHANOS_EXPORT_PRIVATE, NULL, 0, NULL, 0 };
    struct chanos_interface huge = ctest_interface;
    chanos_domain *sd = join(), *cd = join();
    chanos_listener *svc = NULL, *hl = NULL, *rl = NULL, *foreign = NULL;
    chanos_listener *secret = NULL, *bare = NULL, *big = NULL;
    chanos_health *h = NULL;
    chanos_conn *c = NULL, *hc = NULL;
    ctest_handle store = 0;
    struct ctest_put_call put = { 42 };
    struct ctest_put_reply pr;
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr = { 0 };
    pthread_t t;
    uint64_t code = 0;

    stopping = 0;
    CHECK_EQ(chanos_health_new(0, &h), 0);
    CHECK_EQ(chanos_export_iface(sd, "multi", &ctest_interface, NULL, &svc), 0);
    CHECK_EQ(chanos_health_export(sd, "multi", &hl), 0);
    CHECK_EQ(chanos_health_export(cd, "foreign", &foreign), 0);
    require(h != NULL && svc != NULL && hl != NULL && foreign != NULL);
    CHECK_EQ(chanos_server_new(sd, &multi), 0);
    require(multi != NULL);
    CHECK_EQ(chanos_server_add(multi, svc, ctest_dispatch, &store_ops, &store), 0);
    CHECK_EQ(chanos_server_add(multi, svc, ctest_dispatch, &store_ops, &store), -EEXIST);
    CHECK_EQ(chanos_server_add_health(multi, h, foreign), -EINVAL);
    CHECK_EQ(chanos_server_add_health(multi, h, hl), 0);
    CHECK_EQ(chanos_reflection_export(sd, "multi", &rl), 0);
    require(rl != NULL);
    CHECK_STR(chanos_listener_name(rl), "multi.reflection");
    CHECK_EQ(chanos_server_add_reflection(multi, rl), 0);
    memset(big_piece, 'x', sizeof big_piece - 1);
    for (int i = 0; i < 70; i++)
        big_pieces[i] = big_piece;
    huge.definition = big_pieces;
    CHECK_EQ(chanos_export_iface(sd, "secret", &ctest_interface, &private_, &secret), 0);
    CHECK_EQ(chanos_export(sd, "bare", "ctest", CTEST_MAX_FRAME_SIZE, &bare), 0);
    CHECK_EQ(chanos_export_iface(sd, "huge", &huge, NULL, &big), 0);
    require(pthread_create(&t, NULL, multi_thread, NULL) == 0);

    CHECK_EQ(chanos_connect_iface(cd, "multi", &ctest_interface, MS, &c), 0);
    CHECK_EQ(chanos_connect_iface(cd, "multi.health", &health_interface, MS, &hc), 0);
    require(c != NULL && hc != NULL);
    CHECK_EQ(check(hc, "", &code), CHANOS_HEALTH_SERVING);
    watch(hc, "multi");
    expect(hc, "multi", CHANOS_HEALTH_SERVICE_UNKNOWN);
    CHECK_EQ(ctest_put(c, &put, &pr, MS), 0);
    /* the server's loop counts the call's deadline from its look */
    CHECK(atomic_load(&put_left) > 0 &&
          atomic_load(&put_left) <= (int64_t)MS * 1000000);
    CHECK_EQ(chanos_health_set(h, "multi", CHANOS_HEALTH_SERVING), 0);
    expect(hc, "multi", CHANOS_HEALTH_SERVING);
    CHECK_EQ(ctest_get(c, &gc, &gr, MS), 0);
    CHECK_EQ(gr.h, 42);
    CHECK_EQ(check(hc, "multi", &code), CHANOS_HEALTH_SERVING);
    test_reflection(cd);

    pthread_kill(t, SIGUSR1);
    pthread_join(t, NULL);
    CHECK_EQ(multi_rc, 0);
    /* the run closed its connections */
    CHECK_EQ(ctest_get(c, &gc, &gr, MS), CHANOS_ERR_CLOSED);
    chanos_conn_close(c);
    chanos_conn_close(hc);
    chanos_server_free(multi);
    chanos_server_free(NULL);
    CHECK_EQ(chanos_listener_close(svc), 0);
    CHECK_EQ(chanos_listener_close(hl), 0);
    CHECK_EQ(chanos_listener_close(rl), 0);
    CHECK_EQ(chanos_listener_close(secret), 0);
    CHECK_EQ(chanos_listener_close(bare), 0);
    CHECK_EQ(chanos_listener_close(big), 0);
    CHECK_EQ(chanos_listener_close(foreign), 0);
    chanos_health_free(h);
    chanos_domain_close(cd);
    chanos_domain_close(sd);
}

int main(void)
{
    char sock[sizeof dir + 16];

    test_table();
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(logpath, sizeof logpath, "%s.log", dir);
    snprintf(sock, sizeof sock, "%s/monitor.sock", dir);
    monitor_pid = monitor_start(dir, sock, logpath);
    if (monitor_pid <= 0) {
        failures++;
    } else {
        start_serving();
        test_check_and_watch();
        test_set_while_serving();
        test_slow_watcher();
        test_watch_bound();
        stop_serving();
        test_one_thread();
    }
    stop_monitor();
    return check_done("health_test");
}
