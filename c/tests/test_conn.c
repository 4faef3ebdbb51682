/*
 * test_conn.c: the rpc layer of libchanos domains (src/conn.c) over a ring
 * pair opened in this process, and the errors of chanos_join that need no
 * monitor. The monitor paths are tested end to end, with real processes,
 * by the Go tests in tests/interop.
 */
#include "ump_testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG_ECHO 4

/* call_frame encodes an rpc call of MSG_ECHO carrying v. */
static size_t call_frame(uint8_t *buf, size_t cap, unsigned kind, uint64_t v)
{
    struct chanos_buf b;
    struct chanos_enc e;

    chanos_buf_init(&b, buf, cap, NULL, 0);
    chanos_enc_begin(&e, &b, MSG_ECHO, kind);
    chanos_enc_u64(&e, v);
    CHECK_EQ(chanos_enc_end(&e), 0);
    return b.len;
}

static int others;
static chanos_conn *busy_conn;

static void on_other(void *arg, const struct chanos_frame *f)
{
    struct chanos_frame g;

    (void)arg;
    CHECK_EQ(f->kind, CHANOS_KIND_MESSAGE);
    /* the call holds the receive side: a second receiver is refused */
    CHECK_EQ(chanos_conn_recv(busy_conn, 0, &g), CHANOS_ERR_BUSY);
    others++;
}

static void test_rpc(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_status st;
    uint8_t buf[256];
    size_t n;
    uint32_t id = 0;

    conn_pair_of(4096, &srv, &cli);

    /* asynchronous: send_call, the server sees the id and deadline */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 7);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 2000, &id), 0);
    CHECK_EQ(id, 1);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.hdr.call_id, 1);
    CHECK_EQ(f.hdr.timeout_us, 2000000);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_REPLY, 8);
    CHECK_EQ(chanos_conn_reply(srv, &f, buf, n, 1000), 0);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
    CHECK_EQ(f.hdr.call_id, 1);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 8);

    /* synchronous: a message and a stale reply come first */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 1);
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_REPLY, 99);
    chanos_hdr_set_call(buf, 77, 0);
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    chanos_hdr_set_call(buf, 2, 0); /* the next call's id */
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 9);
    busy_conn = cli;
    CHECK_EQ(chanos_conn_call(cli, buf, n, 1000, &f, on_other, NULL), 0);
    CHECK_EQ(others, 1);
    CHECK_EQ(f.hdr.call_id, 2);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 99);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0); /* the call itself */
    CHECK_EQ(f.hdr.call_id, 2);

    /* an error reply */
    CHECK_EQ(chanos_conn_reply_error(srv, &(struct chanos_frame){
                                              .hdr = { .msg = MSG_ECHO,
                                                       .call_id = 3 } },
                                     5, "nope", 0),
             0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 10);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 1000, &f, NULL, NULL),
             CHANOS_ERR_REMOTE);
    CHECK_EQ(chanos_frame_status(&f, &st), 0);
    CHECK_EQ(st.code, 5);
    CHECK(st.detail.len == 4 && memcmp(st.detail.ptr, "nope", 4) == 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);

    /* no answer: the call times out and is cancelled */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 11);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 50, &f, NULL, NULL),
             CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.hdr.call_id, 4);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CANCEL);
    CHECK_EQ(f.hdr.call_id, 4);
    CHECK_EQ(chanos_conn_recv(srv, 0, &f), CHANOS_ERR_AGAIN);

    /* what ump cannot carry, and frames that are not frames */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 1);
    buf[7] = 1; /* ncaps */
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_conn_send(cli, buf, 3, 0), CHANOS_ERR_TRUNCATED);
    CHECK_EQ(chanos_conn_reply_error(srv, &f, 0, "zero", 0),
             CHANOS_ERR_HEADER);

    /* the peer closes */
    chanos_conn_close(srv);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), CHANOS_ERR_CLOSED);
    chanos_conn_close(cli);
}

/* reply_to sends srv's reply (an error reply if err) to call id of MSG_ECHO,
 * carrying v. */
static void reply_to(chanos_conn *srv, uint32_t id, bool err, uint64_t v)
{
    struct chanos_frame call = { .hdr = { .msg = MSG_ECHO, .call_id = id } };
    uint8_t buf[64];
    size_t n;

    if (err) {
        CHECK_EQ(chanos_conn_reply_error(srv, &call, CHANOS_CODE_NOT_FOUND,
                                         "late", 0),
                 0);
        return;
    }
    n = call_frame(buf, sizeof buf, CHANOS_KIND_REPLY, v);
    CHECK_EQ(chanos_conn_reply(srv, &call, buf, n, 0), 0);
}

/*
 * A reply that comes after its call was abandoned (timed out in
 * chanos_conn_call, or cancelled) is dropped by call id: the next receive
 * gets the next real frame, never the stale reply.
 */
static void test_late_replies(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[256];
    size_t n;
    uint32_t id, first = 0;

    conn_pair_of(4096, &srv, &cli);

    /* a call times out; the server answers late, then sends a message */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 1);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 20, &f, NULL, NULL),
             CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    id = f.hdr.call_id;
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CANCEL);
    reply_to(srv, id, false, 1);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 5);
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 5);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);

    /* a late error reply to a cancelled call, then the reply to a call
     * still outstanding, which is the caller's to match */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 2);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
    reply_to(srv, id, true, 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 3);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    reply_to(srv, id, false, 3);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
    CHECK_EQ(f.hdr.call_id, id);
    /* a late reply alone: the receive times out rather than return it,
     * and the spinning and non-blocking receives find nothing */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 4);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
    reply_to(srv, id, false, 4);
    CHECK_EQ(chanos_conn_recv(cli, 20, &f), CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_conn_spin_recv(cli, &f), CHANOS_ERR_AGAIN);
    /* a synchronous call passes over a late reply to its own */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 5);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
    reply_to(srv, id, false, 5);
    reply_to(srv, id + 1, false, 6); /* the next call's id */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 6);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 1000, &f, NULL, NULL), 0);
    CHECK_EQ(f.hdr.call_id, id + 1);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 6);
    while (chanos_conn_recv(srv, 0, &f) == 0)
        ; /* the calls and cancels so far */

    /* the quota: one more abandoned call than remembered forgets the
     * oldest, whose late reply is received as any unmatched reply */
    for (int i = 0; i <= CHANOS_CONN_ABANDONED_MAX; i++) {
        n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 7);
        CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
        CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
        if (i == 0)
            first = id;
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    }
    for (uint32_t i = first; i <= id; i++)
        reply_to(srv, i, false, i);
    CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
    CHECK_EQ(f.hdr.call_id, first);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);

    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

static void test_code_str(void)
{
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_OK), "ok") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_CANCELED), "canceled") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_UNKNOWN), "unknown") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_NOT_FOUND), "not found") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_DEADLINE_EXCEEDED),
                 "deadline exceeded") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_UNAVAILABLE),
                 "unavailable") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_UNAUTHENTICATED),
                 "unauthenticated") == 0);
    for (uint64_t c = 0; c <= CHANOS_CODE_UNAUTHENTICATED; c++) {
        const char *s = chanos_code_str(c);

        CHECK(s != NULL && s[0] != '\0' && strcmp(s, "reserved code") != 0);
    }
    CHECK(strcmp(chanos_code_str(17), "reserved code") == 0);
    CHECK(strcmp(chanos_code_str(999), "reserved code") == 0);
    CHECK(strcmp(chanos_code_str(CHANOS_CODE_APPLICATION),
                 "application code") == 0);
    CHECK(strcmp(chanos_code_str(UINT64_MAX), "application code") == 0);
}

/* readable reports whether fd polls readable now. */
static bool readable(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };

    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/*
 * chanos_conn_spin_recv receives like chanos_conn_recv(c, 0, ...) but does
 * not arm the fd: the peer's send does not signal it, and it withdraws an
 * arming left by a try receive.
 */
static void test_spin_recv(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[256];
    size_t n;
    int fd;

    conn_pair_of(4096, &srv, &cli);
    fd = chanos_ump_fd(chanos_conn_ump(srv));
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 1);

    /* spinning: nothing there, and a send does not wake the fd */
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK(!readable(fd));
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 1);

    /* armed by a try receive, then disarmed by spin_recv: no wake-up */
    CHECK_EQ(chanos_conn_recv(srv, 0, &f), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK(!readable(fd));
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), 0);

    /* armed and left armed (as before a sleep): the send wakes the fd */
    CHECK_EQ(chanos_conn_recv(srv, 0, &f), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK(readable(fd));
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), 0);
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), CHANOS_ERR_AGAIN);

    /* the peer's close: what it sent, then CLOSED */
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    chanos_conn_close(cli);
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), 0);
    CHECK_EQ(chanos_conn_spin_recv(srv, &f), CHANOS_ERR_CLOSED);
    chanos_conn_close(srv);
}

/* The nameservice's codes (docs/nameservice.md) as results. */
static void test_nameservice_error(void)
{
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_OK), 0);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_EXISTS), CHANOS_ERR_EXISTS);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_NOT_FOUND),
             CHANOS_ERR_NOT_FOUND);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_INVALID_NAME),
             CHANOS_ERR_INVALID);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_NOT_OWNER),
             CHANOS_ERR_NOT_OWNER);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_TIMEOUT), CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_LIMIT), CHANOS_ERR_LIMIT);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_INVALID_REF),
             CHANOS_ERR_INVALID);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_UNAVAILABLE),
             CHANOS_ERR_MONITOR);
    CHECK_EQ(chanos_nameservice_error(CHANOS_NS_QUOTA), CHANOS_ERR_LIMIT);
    CHECK_EQ(chanos_nameservice_error(10), CHANOS_ERR_MONITOR);
    CHECK_EQ(chanos_nameservice_error(UINT64_MAX), CHANOS_ERR_MONITOR);
}

static void test_join_errors(void)
{
    char tmpl[] = "/tmp/chanos-test-conn-XXXXXX";
    char path[256];
    struct chanos_join_opts o = { 0 };
    chanos_domain *d = NULL;
    const int codes[] = { CHANOS_ERR_NO_MONITOR, CHANOS_ERR_MONITOR_LOST,
                          CHANOS_ERR_INVALID,    CHANOS_ERR_EXISTS,
                          CHANOS_ERR_NOT_FOUND,  CHANOS_ERR_MISMATCH,
                          CHANOS_ERR_LIMIT,      CHANOS_ERR_DENIED,
                          CHANOS_ERR_MONITOR,    CHANOS_ERR_UNSAFE_DIR,
                          CHANOS_ERR_BUSY,       CHANOS_ERR_REMOTE,
                          CHANOS_ERR_NOT_OWNER,  CHANOS_ERR_TIMEDOUT,
                          CHANOS_ERR_PEER_DIED,  CHANOS_ERR_MONITOR_FULL,
                          CHANOS_ERR_NO_ROUTE };

    CHECK(mkdtemp(tmpl) != NULL);
    /* a missing directory: no monitor */
    snprintf(path, sizeof path, "%s/none", tmpl);
    o.dir = path;
    CHECK_EQ(chanos_join(&d, &o), CHANOS_ERR_NO_MONITOR);
    CHECK(d == NULL);
    /* a private directory without a socket: no monitor */
    o.dir = tmpl;
    CHECK_EQ(chanos_join(&d, &o), CHANOS_ERR_NO_MONITOR);
    /* a directory others may enter is refused */
    CHECK(chmod(tmpl, 0755) == 0);
    CHECK_EQ(chanos_join(&d, &o), CHANOS_ERR_UNSAFE_DIR);
    CHECK(chmod(tmpl, 0700) == 0);

    /* a socket listened on by another user, in a directory of ours: the
     * kernel's record of the listener (SO_PEERCRED) is checked, not the
     * file system alone; it takes root to listen as nobody */
    if (getuid() == 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int ready[2], ls;
        pid_t pid;
        char b;

        snprintf(sa.sun_path, sizeof sa.sun_path, "%s/monitor.sock", tmpl);
        CHECK(pipe(ready) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            ls = socket(AF_UNIX, SOCK_SEQPACKET, 0);
            if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 ||
                setgid(65534) != 0 || setuid(65534) != 0 || listen(ls, 8) != 0)
                _exit(1);
            (void)!write(ready[1], "r", 1);
            pause();
            _exit(0);
        }
        close(ready[1]);
        CHECK(read(ready[0], &b, 1) == 1);
        close(ready[0]);
        o.timeout_ms = 1000;
        CHECK_EQ(chanos_join(&d, &o), CHANOS_ERR_UNSAFE_DIR);
        CHECK(d == NULL);
        o.timeout_ms = 0;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        unlink(sa.sun_path);
    }
    rmdir(tmpl);

    /* a stopped monitor, whose queue of connections is full: the join
     * keeps its timeout rather than wait in connect for good */
    {
        char dir[] = "/tmp/chanos-test-stopped-XXXXXX";
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int ls, filler;
        struct timespec t0, t1;

        CHECK(mkdtemp(dir) != NULL);
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s/monitor.sock", dir);
        ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHECK(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 0) == 0);
        filler = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        CHECK(filler >= 0 && connect(filler, (struct sockaddr *)&sa, sizeof sa) == 0);
        o.dir = dir;
        o.timeout_ms = 200;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK_EQ(chanos_join(&d, &o), CHANOS_ERR_TIMEDOUT);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK(t1.tv_sec - t0.tv_sec < 10);
        CHECK(d == NULL);
        o.timeout_ms = 0;
        close(filler);
        close(ls);
        unlink(sa.sun_path);
        rmdir(dir);
    }

    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        CHECK(strcmp(chanos_strerror(codes[i]), "unknown chanos error") != 0);
    CHECK(strcmp(chanos_strerror(-4399), "unknown chanos error") == 0);
}

/* with_meta appends to the call frame buf[0..n) a metadata trailer of the
 * entries kv (key, value, ..., NULL), as a Go caller writes it, and
 * returns the frame's new length. */
static size_t with_meta(uint8_t *buf, size_t n, const char *const *kv)
{
    size_t start = n;

    for (; kv[0] != NULL; kv += 2) {
        size_t kl = strlen(kv[0]), vl = strlen(kv[1]);

        buf[n++] = (uint8_t)kl;
        memcpy(buf + n, kv[0], kl);
        n += kl;
        chanos_store_u16(buf + n, (uint16_t)vl);
        memcpy(buf + n + 2, kv[1], vl);
        n += 2 + vl;
    }
    chanos_store_u16(buf + n, (uint16_t)(n - start));
    n += 2;
    buf[6] |= CHANOS_FLAG_META;
    chanos_store_u32(buf, (uint32_t)n);
    return n;
}

/*
 * A synchronous call without other keeps the frames that come before its
 * reply for the receives to come, in order: a message, and the peer's own
 * call, whose metadata stays readable; a reply to another call (one sent
 * with chanos_conn_send_call) is dropped, as it is with other (test_rpc),
 * so that late replies cannot fill the inbox of a client that only calls.
 */
static void test_call_keeps(void)
{
    static const char *const kv[] = { "trace-id", "t-9", NULL };
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_str v;
    uint8_t buf[256];
    size_t n;
    uint32_t id;

    conn_pair_of(4096, &srv, &cli);

    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 1);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
    reply_to(srv, id, false, 10);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 11);
    CHECK_EQ(chanos_conn_send(srv, buf, n, 0), 0);
    n = with_meta(buf, call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 12), kv);
    CHECK_EQ(chanos_conn_send_call(srv, buf, n, 1000, NULL), 0);
    reply_to(srv, id + 1, false, 13); /* the next call's */

    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 2);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 1000, &f, NULL, NULL), 0);
    CHECK_EQ(f.hdr.call_id, id + 1);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 13);
    /* the reply to the call sent before was dropped: another call's */
    CHECK_EQ(chanos_conn_spin_recv(cli, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 11);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.len, CHANOS_HEADER_SIZE + 8);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 12);
    CHECK_EQ(chanos_frame_meta(&f, "trace-id", &v), 0);
    CHECK(v.len == 3 && memcmp(v.ptr, "t-9", 3) == 0);
    CHECK_EQ(chanos_conn_meta(cli, "trace-id", &v), 0);
    CHECK(v.len == 3 && memcmp(v.ptr, "t-9", 3) == 0);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* long_frame encodes a message of MSG_ECHO of n bytes (n >= 16). */
static size_t long_frame(uint8_t *buf, size_t n)
{
    struct chanos_buf b;
    struct chanos_enc e;

    chanos_buf_init(&b, buf, n, NULL, 0);
    chanos_enc_begin(&e, &b, MSG_ECHO, CHANOS_KIND_MESSAGE);
    memset(buf + CHANOS_HEADER_SIZE, 0xab, n - CHANOS_HEADER_SIZE);
    chanos_enc_raw(&e, buf + CHANOS_HEADER_SIZE, n - CHANOS_HEADER_SIZE);
    CHECK_EQ(chanos_enc_end(&e), 0);
    return b.len;
}

/* expect_kind receives the next frame of c, which must be of kind and
 * call id id. */
static void expect_kind(chanos_conn *c, int kind, uint32_t id)
{
    struct chanos_frame f;

    CHECK_EQ(chanos_conn_recv(c, 1000, &f), 0);
    CHECK_EQ(f.kind, kind);
    CHECK_EQ(f.hdr.call_id, id);
}

/*
 * What a handler knows of the call it serves, the frame the receives gave
 * last: the time left before its deadline, counted from its arrival (-1
 * without one, or for a frame that is no call), and whether its caller
 * has cancelled it, seen behind other frames in the ring (a message of
 * several slots and one in the bulk region among them) and in the inbox,
 * without receiving them: the call's frame stays as it was, and the
 * frames behind it are received after, the cancel included.
 */
static void test_handler_call(void)
{
    struct timespec ms5 = { 0, 5000000 };
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[1024], big[1024];
    int64_t left;
    size_t n;
    uint32_t id, x;

    conn_pair_of(4096, &srv, &cli);
    CHECK_EQ(chanos_conn_call_left_ns(srv), -1);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 0);

    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 1);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 2000, &id), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    left = chanos_conn_call_left_ns(srv);
    CHECK(left > 0 && left <= 2000000000);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 7);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK_EQ(chanos_conn_send(cli, big, long_frame(big, 200), 0), 0);
    CHECK_EQ(chanos_conn_send(cli, big, long_frame(big, 1000), 0), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id + 100), 0); /* another's */
    CHECK_EQ(chanos_conn_call_cancelled(srv), 0);
    CHECK_EQ(chanos_conn_cancel(cli, MSG_ECHO, id), 0);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 1);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 1);
    CHECK_EQ(f.hdr.call_id, id);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 1);
    CHECK(chanos_conn_call_left_ns(srv) > 0);
    /* a call the handler makes on the connection leaves the one it
     * serves as it was (and keeps what comes before its reply) */
    reply_to(cli, 1, false, 9);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 8);
    CHECK_EQ(chanos_conn_call(srv, buf, n, 1000, &f, NULL, NULL), 0);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 9);
    CHECK(chanos_conn_call_left_ns(srv) > 0);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 1);

    expect_kind(srv, CHANOS_KIND_MESSAGE, 0);
    CHECK_EQ(chanos_conn_call_left_ns(srv), -1);
    CHECK_EQ(chanos_conn_call_cancelled(srv), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.len, 200);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.len, 1000);
    expect_kind(srv, CHANOS_KIND_CANCEL, id + 100);
    expect_kind(srv, CHANOS_KIND_CANCEL, id);

    /* no deadline; one that passes while the handler works */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 2);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, -1, &id), 0);
    expect_kind(srv, CHANOS_KIND_CALL, id);
    CHECK_EQ(chanos_conn_call_left_ns(srv), -1);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 3);
    CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1, &id), 0);
    expect_kind(srv, CHANOS_KIND_CALL, id);
    nanosleep(&ms5, NULL);
    CHECK_EQ(chanos_conn_call_left_ns(srv), 0);

    /* the peer's call, and its cancel, kept in the inbox by a call of
     * this side's: the deadline counts from its arrival there */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 4);
    CHECK_EQ(chanos_conn_send_call(srv, buf, n, 2000, &x), 0);
    CHECK_EQ(chanos_conn_cancel(srv, MSG_ECHO, x), 0);
    reply_to(srv, id + 1, false, 5); /* cli's next call */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 5);
    /* srv's call, answered above, first */
    expect_kind(cli, CHANOS_KIND_CALL, 1);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 1000, &f, NULL, NULL), 0);
    expect_kind(cli, CHANOS_KIND_CALL, x);
    left = chanos_conn_call_left_ns(cli);
    CHECK(left > 0 && left <= 2000000000);
    CHECK_EQ(chanos_conn_call_cancelled(cli), 1);
    expect_kind(cli, CHANOS_KIND_CANCEL, x);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/*
 * A send that times out waiting for room says why, in Go's words: the
 * peer took no frame meanwhile. A send that does not wait says nothing
 * (CHANOS_ERR_AGAIN is no failure to explain), nor does a call whose
 * reply does not come in time; the connection goes on once the peer
 * receives.
 */
static void test_send_full(void)
{
    static const char why[] =
        "timed out (the peer took no frame while this one waited for room: "
        "a peer that is itself waiting to send to this side takes none "
        "until this side receives what it sends (chanos_conn_recv, or a "
        "serve loop))";
    char text[CHANOS_WIRE_FAULT_TEXT_MAX];
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    uint8_t buf[256];
    size_t n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 1);
    int sent = 0, rc;

    conn_pair_of(4096, &srv, &cli);
    while ((rc = chanos_conn_send(cli, buf, n, 0)) == 0)
        sent++;
    CHECK_EQ(rc, CHANOS_ERR_AGAIN);
    CHECK(chanos_conn_fault(cli) == NULL);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 20), CHANOS_ERR_TIMEDOUT);
    CHECK(chanos_conn_fault(cli) != NULL);
    chanos_wire_fault_describe(chanos_conn_fault(cli), text, sizeof text);
    CHECK_STR(text, why);
    /* a call's send waits for room too */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 2);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 20, &f, NULL, NULL), CHANOS_ERR_TIMEDOUT);
    chanos_wire_fault_describe(chanos_conn_fault(cli), text, sizeof text);
    CHECK_STR(text, why);

    for (int i = 0; i < sent; i++)
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(chanos_conn_recv(srv, 0, &f), CHANOS_ERR_AGAIN);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 3);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 20), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 4);
    CHECK_EQ(chanos_conn_call(cli, buf, n, 20, &f, NULL, NULL), CHANOS_ERR_TIMEDOUT);
    CHECK(chanos_conn_fault(cli) == NULL);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* A call's metadata is taken off the frame, which decodes as the call
 * would without it, and is read by key; a malformed trailer is refused
 * with the code of what is wrong. */
static void test_metadata(void)
{
    struct chanos_ump_options o = { 0 };
    chanos_ump *ua, *ub;
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_str v;
    uint8_t buf[512];
    size_t n, plain;
    static const char *const good[] = { "add", "40", "trace-id", "t-1", NULL };
    static const struct {
        const char *const kv[5];
        int mangle; /* 1: trailer longer than the frame */
        int want;
    } bad[] = {
        { { "Add", "1", NULL }, 0, CHANOS_ERR_HEADER },
        { { "a", "x", "a", "y", NULL }, 0, CHANOS_ERR_BOUND },
        { { "k", "v", NULL }, 1, CHANOS_ERR_BOUND },
    };

    conn_pair_of(4096, &srv, &cli);

    plain = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 2);
    n = with_meta(buf, plain, good);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.kind, CHANOS_KIND_CALL);
    CHECK_EQ(f.len, plain);
    CHECK_EQ(f.hdr.size, plain);
    CHECK_EQ(f.hdr.flags, CHANOS_KIND_CALL);
    CHECK_EQ(chanos_load_u32(f.data), plain);
    CHECK_EQ(f.data[6], CHANOS_KIND_CALL);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 2);
    CHECK_EQ(chanos_frame_meta(&f, "add", &v), 0);
    CHECK(v.len == 2 && memcmp(v.ptr, "40", 2) == 0);
    CHECK_EQ(chanos_conn_meta(srv, "trace-id", &v), 0);
    CHECK(v.len == 3 && memcmp(v.ptr, "t-1", 3) == 0);
    CHECK_EQ(chanos_frame_meta(&f, "missing", &v), CHANOS_ERR_NOT_FOUND);

    /* a connection's own metadata rides on each call it sends */
    {
        static const struct chanos_meta md[] = { { "zeta", "1" }, { "alpha", "2" } };
        static const struct chanos_meta bad_key[] = { { "Alpha", "x" } };
        static const struct chanos_meta twice[] = { { "a", "x" }, { "a", "y" } };
        char big[CHANOS_META_VALUE_MAX + 2];
        struct chanos_meta too_long[] = { { "a", big } };
        uint32_t id;

        memset(big, 'v', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        CHECK_EQ(chanos_conn_set_meta(cli, bad_key, 1), CHANOS_ERR_HEADER);
        CHECK_EQ(chanos_conn_set_meta(cli, twice, 2), CHANOS_ERR_BOUND);
        CHECK_EQ(chanos_conn_set_meta(cli, too_long, 1), CHANOS_ERR_BOUND);
        CHECK_EQ(chanos_conn_set_meta(cli, md, 2), 0);
        n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 5);
        CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
        CHECK_EQ(f.len, n);
        CHECK_EQ(chanos_frame_meta(&f, "alpha", &v), 0);
        CHECK(v.len == 1 && v.ptr[0] == '2');
        CHECK_EQ(chanos_frame_meta(&f, "zeta", &v), 0);
        CHECK(v.len == 1 && v.ptr[0] == '1');
        CHECK_EQ(chanos_conn_set_meta(cli, NULL, 0), 0);
    }

    /* the next call, without metadata, has none */
    n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 3);
    CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(chanos_frame_meta(&f, "add", &v), CHANOS_ERR_NOT_FOUND);
    CHECK_EQ(chanos_conn_meta(srv, "add", &v), CHANOS_ERR_NOT_FOUND);
    chanos_conn_close(srv);
    chanos_conn_close(cli);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pair(&o, &ua, &ub);
        CHECK_EQ(chanos_conn_new(ua, &srv), 0);
        CHECK_EQ(chanos_conn_new(ub, &cli), 0);
        n = with_meta(buf, call_frame(buf, sizeof buf, CHANOS_KIND_CALL, 1),
                      bad[i].kv);
        if (bad[i].mangle)
            chanos_store_u16(buf + n - 2, 0xfff0);
        CHECK_EQ(chanos_conn_send(cli, buf, n, 0), 0);
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), bad[i].want);
        chanos_conn_close(srv);
        chanos_conn_close(cli);
    }
}

/* A handler's reply metadata rides on the next reply or error reply it
 * sends, once: the caller reads it with chanos_conn_meta after the reply
 * came, and the frame decodes as the reply would without it. Metadata
 * that breaks a rule is refused and leaves what was set. */
static void test_reply_metadata(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_str v;
    struct chanos_status st;
    uint8_t buf[256];
    size_t n;
    uint32_t id;
    static const struct chanos_meta md[] = { { "retry-after", "2" }, { "load", "0.5" } };
    static const struct chanos_meta bad[] = { { "Retry", "x" } };

    conn_pair_of(4096, &srv, &cli);

    for (int round = 0; round < 3; round++) {
        n = call_frame(buf, sizeof buf, CHANOS_KIND_CALL, (uint64_t)round);
        CHECK_EQ(chanos_conn_send_call(cli, buf, n, 1000, &id), 0);
        CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
        if (round == 0) {
            CHECK_EQ(chanos_conn_set_reply_meta(srv, md, 2), 0);
            CHECK_EQ(chanos_conn_set_reply_meta(srv, bad, 1), CHANOS_ERR_HEADER);
            n = call_frame(buf, sizeof buf, CHANOS_KIND_REPLY, 7);
            CHECK_EQ(chanos_conn_reply(srv, &f, buf, n, 1000), 0);
        } else if (round == 1) { /* taken by the last reply: none */
            n = call_frame(buf, sizeof buf, CHANOS_KIND_REPLY, 8);
            CHECK_EQ(chanos_conn_reply(srv, &f, buf, n, 1000), 0);
        } else {
            CHECK_EQ(chanos_conn_set_reply_meta(srv, md, 1), 0);
            CHECK_EQ(chanos_conn_reply_error(srv, &f, CHANOS_CODE_UNAVAILABLE, "busy", 1000), 0);
        }
        CHECK_EQ(chanos_conn_recv(cli, 1000, &f), 0);
        CHECK_EQ(f.hdr.call_id, id);
        switch (round) {
        case 0:
            CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
            CHECK_EQ(f.len, n);
            CHECK_EQ(f.hdr.flags, CHANOS_KIND_REPLY);
            CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 7);
            CHECK_EQ(chanos_conn_meta(cli, "retry-after", &v), 0);
            CHECK(v.len == 1 && v.ptr[0] == '2');
            CHECK_EQ(chanos_frame_meta(&f, "load", &v), 0);
            CHECK(v.len == 3 && memcmp(v.ptr, "0.5", 3) == 0);
            break;
        case 1:
            CHECK_EQ(f.kind, CHANOS_KIND_REPLY);
            CHECK_EQ(chanos_conn_meta(cli, "retry-after", &v), CHANOS_ERR_NOT_FOUND);
            break;
        default:
            CHECK_EQ(f.kind, CHANOS_KIND_ERROR);
            CHECK_EQ(chanos_frame_status(&f, &st), 0);
            CHECK_EQ(st.code, CHANOS_CODE_UNAVAILABLE);
            CHECK(st.detail.len == 4 && memcmp(st.detail.ptr, "busy", 4) == 0);
            CHECK_EQ(chanos_conn_meta(cli, "retry-after", &v), 0);
            CHECK(v.len == 1 && v.ptr[0] == '2');
            CHECK_EQ(chanos_conn_meta(cli, "load", &v), CHANOS_ERR_NOT_FOUND);
        }
    }
    chanos_conn_close(srv);
    chanos_conn_close(cli);
}

/* Descriptors travel with frames: a cap is copied, a give_away_cap is
 * closed on the sending side once sent; the receiver gets its own; a frame
 * that announces descriptors it did not send ends the connection. */
static void test_fds(void)
{
    chanos_conn *srv, *cli;
    struct chanos_frame f;
    struct chanos_buf b;
    struct chanos_enc e;
    uint8_t buf[256];
    int p[2], q[2];
    char got[4];

    conn_pair_of(4096, &srv, &cli);
    CHECK(pipe(p) == 0 && pipe(q) == 0);

    /* a frame with two descriptors: q[1] copied, p[1] given away */
    CHECK_EQ(chanos_conn_buf(cli, &b, 256), 0);
    chanos_enc_begin(&e, &b, MSG_ECHO, CHANOS_KIND_MESSAGE);
    chanos_enc_cap(&e, NULL, q[1]);
    chanos_enc_give_away_cap(&e, NULL, p[1]);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(b.nfds, 2);
    CHECK_EQ(chanos_conn_send_buf(cli, &b, 1000), 0);
    CHECK(fcntl(p[1], F_GETFD) < 0 && errno == EBADF); /* given away */
    CHECK(fcntl(q[1], F_GETFD) >= 0);                   /* copied */
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), 0);
    CHECK_EQ(f.nfds, 2);
    CHECK(write(f.fds[0], "q", 1) == 1 && write(f.fds[1], "p", 1) == 1);
    chanos_frame_close_fds(&f);
    CHECK(read(q[0], got, 1) == 1 && got[0] == 'q');
    CHECK(read(p[0], got, 1) == 1 && got[0] == 'p');
    CHECK(read(p[0], got, 1) == 0); /* every write end is closed */

    /* a frame whose header announces a descriptor that never came */
    call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 1);
    buf[7] = 1;
    CHECK_EQ(chanos_ump_send(chanos_conn_ump(cli), buf, CHANOS_HEADER_SIZE + 8, 1000), 0);
    CHECK_EQ(chanos_conn_recv(srv, 1000, &f), CHANOS_ERR_PROTOCOL);
    /* and chanos_conn_send refuses to send such a frame */
    CHECK_EQ(chanos_conn_send(cli, buf, CHANOS_HEADER_SIZE + 8, 0), CHANOS_ERR_CAP);
    chanos_conn_close(srv);
    chanos_conn_close(cli);
    close(p[0]);
    close(q[0]);
    close(q[1]);
}

/* A fresh connection's endpoint opens into a connection of its
 * interface, once; another interface is refused, and so is a socket that
 * is not an endpoint. */
static void test_endpoints(void)
{
    static const struct chanos_interface a = { .name = "a", .max_frame = 4096, .fingerprint = 1 },
                                        b = { .name = "b", .max_frame = 4096, .fingerprint = 2 };
    chanos_conn *mine, *theirs;
    struct chanos_frame f;
    uint8_t buf[64];
    int ep, sv[2];
    size_t n;

    CHECK_EQ(chanos_endpoint_new(&a, &mine, &ep), 0);
    n = call_frame(buf, sizeof buf, CHANOS_KIND_MESSAGE, 9);
    CHECK_EQ(chanos_conn_send(mine, buf, n, 1000), 0); /* waits in the ring */
    CHECK_EQ(chanos_endpoint_open(ep, &a, &theirs), 0);
    CHECK_EQ(chanos_conn_recv(theirs, 1000, &f), 0);
    CHECK_EQ(chanos_load_u64(f.data + CHANOS_HEADER_SIZE), 9);
    chanos_conn_close(theirs);
    CHECK_EQ(chanos_conn_recv(mine, 1000, &f), CHANOS_ERR_CLOSED);
    chanos_conn_close(mine);

    CHECK_EQ(chanos_endpoint_new(&a, &mine, &ep), 0);
    CHECK_EQ(chanos_endpoint_open(ep, &b, &theirs), CHANOS_ERR_MISMATCH);
    CHECK(theirs == NULL);
    CHECK(chanos_conn_recv(mine, 1000, &f) < 0); /* its peer went */
    chanos_conn_close(mine);

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_EQ(chanos_endpoint_open(sv[0], &a, &theirs), CHANOS_ERR_PROTOCOL);
    close(sv[1]);
}

int main(void)
{
    test_rpc();
    test_late_replies();
    test_call_keeps();
    test_handler_call();
    test_send_full();
    test_code_str();
    test_spin_recv();
    test_nameservice_error();
    test_join_errors();
    test_metadata();
    test_reply_metadata();
    test_fds();
    test_endpoints();
    return check_done("test_conn");
}
