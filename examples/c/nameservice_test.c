/*
 * nameservice_test: a C domain that calls the monitor's nameservice
 * (docs/c-domains.md, "The nameservice") with the C code chanosc generates
 * for interfaces/nameservice.if (<chanos/nameservice.h>, built into
 * libchanos) over chanos_nameservice_connect. The Go tests in
 * tests/interop run it against a real monitor:
 *
 *   nameservice_test check PREFIX   set, get, list, get_count, remove,
 *                                   watch and the errors (exists,
 *                                   not_found, invalid, not_owner, a
 *                                   wait_for that times out) on names
 *                                   under PREFIX, checking that no
 *                                   answer shows a token; then a private
 *                                   export, bound by its iref only;
 *                                   prints "ok" at the end
 *   nameservice_test set NAME       sets NAME to an iref made up from the
 *                                   domain's machine id, prints
 *                                   "set NAME REF" and holds the name until
 *                                   its stdin closes
 *   nameservice_test wait NAME MS   sends wait_for(NAME) with a deadline of
 *                                   MS, prints "waiting", then
 *                                   "found NAME REF after N ms"
 *
 * REF is machine:export:token in hex (chanos_iref_format); the irefs the
 * nameservice gives carry no token (zeros). The monitor directory comes from
 * $CHANOS_DIR as usual. Exit status 0 on success; on failure 1, with the
 * reason on stderr.
 */
#include <chanos.h>
#include <chanos/nameservice.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALL_MS 5000

/* The nameservice connection, and a buffer for any call (list's is the
 * largest). */
static chanos_conn *ns;
static uint8_t callbuf[NAMESERVICE_LIST_CALL_MAX_FRAME_SIZE];

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "nameservice_test: %s: %s (%d)\n", what,
            chanos_strerror(rc), rc);
    return 1;
}

static void print_ref(FILE *out, const struct chanos_iref *r)
{
    fprintf(out, "%016" PRIx64 ":%016" PRIx64 ":", r->machine, r->export_id);
    for (size_t i = 0; i < sizeof r->token; i++)
        fprintf(out, "%02x", r->token[i]);
}

static bool iref_equal(const struct chanos_iref *a, const struct chanos_iref *b)
{
    return a->machine == b->machine && a->export_id == b->export_id &&
           memcmp(a->token, b->token, sizeof a->token) == 0;
}

/* without_token returns r with its token zeroed: what the nameservice
 * gives for r. */
static struct chanos_iref without_token(struct chanos_iref r)
{
    memset(r.token, 0, sizeof r.token);
    return r;
}

static bool has_token(const struct chanos_iref *r)
{
    static const uint8_t zero[sizeof r->token];

    return memcmp(r->token, zero, sizeof zero) != 0;
}

/* ---- changed messages that arrive during a call ---- */

static struct {
    int n;           /* changed messages seen */
    char name[257];  /* the last one's name */
    bool removed;
    bool token;      /* a changed message showed a token */
} changes;

static void on_changed(const struct chanos_frame *f)
{
    struct nameservice_changed m;

    if (f->kind != CHANOS_KIND_MESSAGE || f->hdr.msg != NAMESERVICE_MSG_CHANGED ||
        nameservice_changed_decode(&m, f->data, f->len, NULL, 0) != 0)
        return;
    changes.n++;
    /* the view points into the ring: copy it out */
    memcpy(changes.name, m.name.ptr, m.name.len);
    changes.name[m.name.len] = '\0';
    changes.removed = m.removed;
    changes.token = changes.token || has_token(&m.ref);
}

static void other(void *arg, const struct chanos_frame *f)
{
    (void)arg;
    on_changed(f);
}

/*
 * call sends the call encoded in b and waits for its reply in *f; an error
 * reply (get_count, list) becomes its nameservice code's result.
 */
static int call(struct chanos_buf *b, int ms, struct chanos_frame *f)
{
    int rc = chanos_conn_call(ns, b->data, b->len, ms, f, other, NULL);

    if (rc == CHANOS_ERR_REMOTE) {
        struct chanos_status st;

        if (chanos_frame_status(f, &st) == 0)
            rc = chanos_nameservice_error(st.code);
    }
    return rc;
}

/* ---- one function per rpc: encode, call, decode, map the errval ---- */

static int ns_set(const char *name, const struct chanos_iref *ref)
{
    struct nameservice_set_call c = { chanos_cstr(name), *ref };
    struct nameservice_set_reply r;
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
    if ((rc = nameservice_set_call_encode(&c, &b)) != 0 ||
        (rc = call(&b, CALL_MS, &f)) != 0 ||
        (rc = nameservice_set_reply_decode(&r, f.data, f.len, NULL, 0)) != 0)
        return rc;
    return chanos_nameservice_error(r.err);
}

/* ns_get (wait false) or ns_wait_for (wait true, deadline ms). */
static int ns_lookup(bool wait, const char *name, int ms,
                     struct chanos_iref *ref)
{
    struct nameservice_get_reply r; /* same layout as wait_for's */
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
    if (wait) {
        struct nameservice_wait_for_call c = { chanos_cstr(name) };

        rc = nameservice_wait_for_call_encode(&c, &b);
    } else {
        struct nameservice_get_call c = { chanos_cstr(name) };

        rc = nameservice_get_call_encode(&c, &b);
    }
    if (rc != 0 || (rc = call(&b, ms, &f)) != 0)
        return rc;
    if (wait) {
        struct nameservice_wait_for_reply w;

        rc = nameservice_wait_for_reply_decode(&w, f.data, f.len, NULL, 0);
        r.ref = w.ref;
        r.err = w.err;
    } else {
        rc = nameservice_get_reply_decode(&r, f.data, f.len, NULL, 0);
    }
    if (rc != 0)
        return rc;
    *ref = r.ref;
    return chanos_nameservice_error(r.err);
}

static int ns_count(const char *class, uint64_t *n)
{
    struct nameservice_get_count_call c = { chanos_cstr(class) };
    struct nameservice_get_count_reply r;
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
    if ((rc = nameservice_get_count_call_encode(&c, &b)) != 0 ||
        (rc = call(&b, CALL_MS, &f)) != 0 ||
        (rc = nameservice_get_count_reply_decode(&r, f.data, f.len, NULL,
                                                 0)) != 0)
        return rc;
    *n = r.count;
    return 0;
}

static int ns_remove(const char *name)
{
    struct nameservice_remove_call c = { chanos_cstr(name) };
    struct nameservice_remove_reply r;
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
    if ((rc = nameservice_remove_call_encode(&c, &b)) != 0 ||
        (rc = call(&b, CALL_MS, &f)) != 0 ||
        (rc = nameservice_remove_reply_decode(&r, f.data, f.len, NULL, 0)) !=
            0)
        return rc;
    return chanos_nameservice_error(r.err);
}

/*
 * ns_list lists every name starting with prefix, page by page (after: the
 * last name received), into out as "a,b,c" (at most cap bytes).
 */
static int ns_list(const char *prefix, char *out, size_t cap)
{
    char after[NAMESERVICE_LIST_AFTER_MAX + 1] = "";
    size_t used = 0;

    out[0] = '\0';
    for (;;) {
        struct nameservice_list_call c = { chanos_cstr(prefix),
                                           chanos_cstr(after) };
        struct nameservice_list_reply r;
        struct chanos_frame f;
        struct chanos_buf b;
        size_t last;
        int rc;

        chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
        if ((rc = nameservice_list_call_encode(&c, &b)) != 0 ||
            (rc = call(&b, CALL_MS, &f)) != 0 ||
            (rc = nameservice_list_reply_decode(&r, f.data, f.len, NULL,
                                                0)) != 0)
            return rc;
        /* the names, joined by '\n', point into the ring: copy them */
        if (r.names.len > 0) {
            if (used + r.names.len + 2 > cap)
                return CHANOS_ERR_NOSPACE;
            if (used > 0)
                out[used++] = ',';
            for (uint32_t i = 0; i < r.names.len; i++)
                out[used + i] = r.names.ptr[i] == '\n' ? ',' : (char)r.names.ptr[i];
            last = r.names.len;
            while (last > 0 && r.names.ptr[last - 1] != '\n')
                last--;
            if (r.names.len - last > NAMESERVICE_LIST_AFTER_MAX)
                return CHANOS_ERR_BOUND;
            memcpy(after, r.names.ptr + last, r.names.len - last);
            after[r.names.len - last] = '\0';
            used += r.names.len;
            out[used] = '\0';
        }
        if (!r.more)
            return 0;
        if (r.names.len == 0)
            return CHANOS_ERR_PROTOCOL; /* more to come after an empty page */
    }
}

static int ns_watch(const char *prefix)
{
    uint8_t mem[NAMESERVICE_WATCH_MAX_FRAME_SIZE];
    struct nameservice_watch w = { chanos_cstr(prefix) };
    struct chanos_buf b;
    int rc;

    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    if ((rc = nameservice_watch_encode(&w, &b)) != 0)
        return rc;
    return chanos_conn_send(ns, b.data, b.len, CALL_MS);
}

/* ---- the modes ---- */

/* expect fails unless rc is want. */
#define EXPECT(what, rc, want)                                                 \
    do {                                                                       \
        int rc_ = (rc);                                                        \
        if (rc_ != (want)) {                                                   \
            fprintf(stderr, "nameservice_test: %s: got %s (%d), want %s\n",    \
                    what, chanos_strerror(rc_), rc_, chanos_strerror(want));   \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static struct chanos_iref make_ref(chanos_domain *d, uint64_t export_id)
{
    struct chanos_iref r = { chanos_domain_machine(d), export_id, { 0 } };

    for (size_t i = 0; i < sizeof r.token; i++)
        r.token[i] = (uint8_t)(0xa0 + i + export_id);
    return r;
}

/*
 * check_private exports PREFIX.private privately: the nameservice shows
 * its iref without the token; a bind by name is denied, and so is a bind
 * by that token-less iref; a bind by the listener's iref connects (in this
 * domain: a local pair); once withdrawn, its iref binds nothing.
 */
static int check_private(chanos_domain *d, const char *prefix)
{
    struct chanos_export_opts eo = { CHANOS_EXPORT_PRIVATE, NULL, 0, NULL, 0 };
    struct chanos_iref full, got, back;
    char name[300], text[CHANOS_IREF_TEXT_LEN + 1];
    chanos_listener *l;
    chanos_conn *c, *s;

    snprintf(name, sizeof name, "%s.private", prefix);
    EXPECT("export private", chanos_export_with(d, name, "x", 4096, &eo, &l), 0);
    chanos_listener_ref(l, &full);
    EXPECT("get private", ns_lookup(false, name, CALL_MS, &got), 0);
    if (!has_token(&full) || has_token(&got) || got.machine != full.machine ||
        got.export_id != full.export_id) {
        fprintf(stderr, "nameservice_test: private: the export's iref has %s token, "
                        "the nameservice's %s\n",
                has_token(&full) ? "a" : "no", has_token(&got) ? "one" : "none");
        return 1;
    }
    EXPECT("connect to the private export by name",
           chanos_connect(d, name, "x", 4096, CALL_MS, &c), CHANOS_ERR_DENIED);
    EXPECT("connect by the nameservice's iref",
           chanos_connect_ref(d, &got, "x", 4096, CALL_MS, &c), CHANOS_ERR_DENIED);
    /* the iref survives its text form */
    if (chanos_iref_format(&full, text, sizeof text) != CHANOS_IREF_TEXT_LEN ||
        chanos_iref_parse(text, &back) != 0 || !iref_equal(&back, &full)) {
        fprintf(stderr, "nameservice_test: the iref's text form %s does not read back\n",
                text);
        return 1;
    }
    EXPECT("connect by the listener's iref",
           chanos_connect_ref(d, &back, "x", 4096, CALL_MS, &c), 0);
    EXPECT("accept the connection by iref", chanos_accept(l, CALL_MS, &s), 0);
    chanos_conn_close(c);
    chanos_conn_close(s);
    EXPECT("withdraw private", chanos_listener_close(l), 0);
    EXPECT("connect by the iref of a withdrawn export",
           chanos_connect_ref(d, &full, "x", 4096, CALL_MS, &c),
           CHANOS_ERR_NOT_FOUND);
    full.machine ^= 1;
    EXPECT("connect by the iref of an export on another machine",
           chanos_connect_ref(d, &full, "x", 4096, CALL_MS, &c),
           CHANOS_ERR_NO_ROUTE);
    printf("private %s: by name denied, by the nameservice's iref denied, "
           "by the listener's iref connected, another machine's: no route\n", name);
    return 0;
}

static int check(chanos_domain *d, const char *prefix)
{
    char n0[300], n1[300], other[300], cls[300], missing[300], watched[300];
    char under[300];
    char want[1024], got[2048];
    struct chanos_iref r0 = make_ref(d, 100), r1 = make_ref(d, 101), r;
    struct chanos_iref want_ref;
    uint64_t n;
    int64_t t0, took;
    int rc;

    snprintf(n0, sizeof n0, "%s.svc.0", prefix);
    snprintf(n1, sizeof n1, "%s.svc.1", prefix);
    snprintf(other, sizeof other, "%s.other", prefix);
    snprintf(cls, sizeof cls, "%s.svc", prefix);
    snprintf(missing, sizeof missing, "%s.missing", prefix);
    snprintf(watched, sizeof watched, "%s.watched", prefix);
    snprintf(under, sizeof under, "%s.", prefix); /* list and watch these */

    /* set, and a second set of a taken name */
    EXPECT("set svc.0", ns_set(n0, &r0), 0);
    EXPECT("set svc.1", ns_set(n1, &r1), 0);
    EXPECT("set other", ns_set(other, &r1), 0);
    EXPECT("set svc.0 again", ns_set(n0, &r1), CHANOS_ERR_EXISTS);
    EXPECT("set a bad name", ns_set("bad name", &r0), CHANOS_ERR_INVALID);
    printf("set: %s %s %s\n", n0, n1, other);

    /* get: the iref without its token */
    EXPECT("get svc.0", ns_lookup(false, n0, CALL_MS, &r), 0);
    want_ref = without_token(r0);
    if (!iref_equal(&r, &want_ref)) {
        fprintf(stderr, "nameservice_test: get svc.0 returned ");
        print_ref(stderr, &r);
        fprintf(stderr, "\n");
        return 1;
    }
    printf("get %s: ", n0);
    print_ref(stdout, &r);
    printf("\n");
    EXPECT("get missing", ns_lookup(false, missing, CALL_MS, &r),
           CHANOS_ERR_NOT_FOUND);

    /* list by prefix, sorted */
    snprintf(want, sizeof want, "%s,%s,%s", other, n0, n1);
    rc = ns_list(under, got, sizeof got);
    if (rc != 0)
        return fail("list", rc);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "nameservice_test: list %s = %s, want %s\n", under,
                got, want);
        return 1;
    }
    printf("list %s: %s\n", under, got);

    /* count a class */
    EXPECT("get_count", ns_count(cls, &n), 0);
    if (n != 2) {
        fprintf(stderr, "nameservice_test: get_count %s = %" PRIu64 ", want 2\n",
                cls, n);
        return 1;
    }
    printf("get_count %s: %" PRIu64 "\n", cls, n);

    /* remove; then the name is gone and the class smaller */
    EXPECT("remove svc.0", ns_remove(n0), 0);
    EXPECT("get removed svc.0", ns_lookup(false, n0, CALL_MS, &r),
           CHANOS_ERR_NOT_FOUND);
    EXPECT("remove svc.0 again", ns_remove(n0), CHANOS_ERR_NOT_FOUND);
    EXPECT("get_count after remove", ns_count(cls, &n), 0);
    if (n != 1) {
        fprintf(stderr, "nameservice_test: get_count %s after remove = %" PRIu64
                        ", want 1\n", cls, n);
        return 1;
    }
    /* the monitor owns "nameservice" */
    EXPECT("remove nameservice", ns_remove(CHANOS_NAMESERVICE_NAME),
           CHANOS_ERR_NOT_OWNER);
    printf("remove %s: count now %" PRIu64 "\n", n0, n);

    /* watch: a changed message for a set; the get after the watch makes
     * sure it is in place (docs/nameservice.md) */
    EXPECT("watch", ns_watch(under), 0);
    EXPECT("get after watch", ns_lookup(false, n1, CALL_MS, &r), 0);
    EXPECT("set watched", ns_set(watched, &r0), 0);
    if (changes.n == 0) {
        struct chanos_frame f;

        rc = chanos_conn_recv(ns, CALL_MS, &f);
        if (rc != 0)
            return fail("receive changed", rc);
        on_changed(&f);
    }
    if (changes.n != 1 || strcmp(changes.name, watched) != 0 ||
        changes.removed || changes.token) {
        fprintf(stderr, "nameservice_test: watch: %d changes, last %s%s%s\n",
                changes.n, changes.name, changes.removed ? " (removed)" : "",
                changes.token ? " (with a token)" : "");
        return 1;
    }
    printf("watch %s: changed %s\n", under, changes.name);

    /* wait_for a name nobody sets: its deadline passes */
    t0 = now_ms();
    rc = ns_lookup(true, missing, 300, &r);
    took = now_ms() - t0;
    if (rc != CHANOS_ERR_TIMEDOUT || took < 250) {
        fprintf(stderr, "nameservice_test: wait_for %s: %s after %" PRId64
                        " ms, want a timeout after 300 ms\n",
                missing, chanos_strerror(rc), took);
        return 1;
    }
    printf("wait_for %s: %s after %" PRId64 " ms\n", missing,
           chanos_strerror(rc), took);
    /* the connection still works after the cancelled call */
    EXPECT("get after the timeout", ns_lookup(false, n1, CALL_MS, &r), 0);
    if (check_private(d, prefix) != 0)
        return 1;
    printf("ok\n");
    return 0;
}

static int set_and_hold(chanos_domain *d, const char *name)
{
    struct chanos_iref r = make_ref(d, 7);
    char line[64];
    int rc = ns_set(name, &r);

    if (rc != 0)
        return fail("set", rc);
    printf("set %s ", name);
    print_ref(stdout, &r);
    printf("\n");
    fflush(stdout);
    /* hold the lease until stdin closes */
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
    return 0;
}

static int wait_name(const char *name, int ms)
{
    struct nameservice_wait_for_call c = { chanos_cstr(name) };
    struct nameservice_wait_for_reply r;
    struct chanos_frame f;
    struct chanos_buf b;
    uint32_t id;
    int64_t t0 = now_ms();
    int rc;

    /* send the call, say so, then receive its reply */
    chanos_buf_init(&b, callbuf, sizeof callbuf, NULL, 0);
    if ((rc = nameservice_wait_for_call_encode(&c, &b)) != 0 ||
        (rc = chanos_conn_send_call(ns, b.data, b.len, ms, &id)) != 0)
        return fail("send wait_for", rc);
    printf("waiting for %s\n", name);
    fflush(stdout);
    for (;;) {
        rc = chanos_conn_recv(ns, ms + 1000, &f);
        if (rc != 0)
            return fail("receive the wait_for reply", rc);
        if (f.kind == CHANOS_KIND_REPLY && f.hdr.call_id == id)
            break;
    }
    if ((rc = nameservice_wait_for_reply_decode(&r, f.data, f.len, NULL, 0)) !=
            0 ||
        (rc = chanos_nameservice_error(r.err)) != 0)
        return fail("wait_for", rc);
    printf("found %s ", name);
    print_ref(stdout, &r.ref);
    printf(" after %" PRId64 " ms\n", now_ms() - t0);
    return 0;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts jo = { 0 };
    chanos_domain *d;
    int rc, status;

    if (argc < 3 || (strcmp(argv[1], "check") != 0 &&
                     strcmp(argv[1], "set") != 0 &&
                     (strcmp(argv[1], "wait") != 0 || argc < 4))) {
        fprintf(stderr, "usage: %s check PREFIX | set NAME | wait NAME MS\n",
                argv[0]);
        return 2;
    }
    jo.program = "nameservice_test (C)";
    rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    rc = chanos_nameservice_connect(d, CALL_MS, &ns);
    if (rc != 0) {
        chanos_domain_close(d);
        return fail("connect to the nameservice", rc);
    }
    if (strcmp(argv[1], "check") == 0)
        status = check(d, argv[2]);
    else if (strcmp(argv[1], "set") == 0)
        status = set_and_hold(d, argv[2]);
    else
        status = wait_name(argv[2], atoi(argv[3]));
    fflush(stdout);
    chanos_conn_close(ns);
    chanos_domain_close(d);
    return status;
}
