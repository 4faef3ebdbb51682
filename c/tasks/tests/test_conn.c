/* test_conn: rpc between tasks in two processes over a chanos connection
 * (a ump ring pair wrapped by chanos_conn_new; with the argument "net", a
 * libchanos_net link over loopback TCP, wrapped by chanos_net_conn_new):
 * the client task's calls and the server task's receives suspend the
 * tasks, not the workers, so a computation shares each single worker
 * meanwhile. Every reply is checked; a call the server never answers
 * times out and is cancelled, and calls after it still get their own
 * replies. */
#include "../../tests/check.h"
#include "workloads.h"

#include "connpair.h"
#include <chanos_tasks.h>

#include <stdio.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG_TRIPLE 1 /* rpc: u64 -> u64 * 3 */
#define MSG_IGNORE 2 /* rpc the server never answers */
#define MSG_STOP   3 /* message: the server ends */
#define NCALLS     2000

static chanos_conn *conn;
static int over_net; /* the "net" argument */

static size_t encode(uint8_t *buf, size_t cap, uint16_t msg, unsigned kind, uint64_t v)
{
    struct chanos_buf b;
    struct chanos_enc e;

    chanos_buf_init(&b, buf, cap, NULL, 0);
    chanos_enc_begin(&e, &b, msg, kind);
    chanos_enc_u64(&e, v);
    return chanos_enc_end(&e) == 0 ? b.len : 0;
}

static uint64_t body_u64(const struct chanos_frame *f)
{
    return f->len == CHANOS_HEADER_SIZE + 8 ? chanos_load_u64(f->data + CHANOS_HEADER_SIZE) : 0;
}

static int64_t server(int64_t unused)
{
    int64_t served = 0;

    (void)unused;
    for (;;) {
        struct chanos_frame f;
        uint8_t out[64];
        size_t n;
        int rc = chanos_task_conn_recv(conn, 20000, &f);

        if (rc != 0)
            return -1;
        if (f.kind == CHANOS_KIND_MESSAGE && f.hdr.msg == MSG_STOP)
            return served;
        if (f.kind == CHANOS_KIND_CANCEL)
            continue; /* the client gave up on MSG_IGNORE */
        if (f.kind != CHANOS_KIND_CALL)
            return -2;
        if (f.hdr.msg == MSG_IGNORE)
            continue;
        n = encode(out, sizeof(out), MSG_TRIPLE, CHANOS_KIND_REPLY, body_u64(&f) * 3);
        if (n == 0 || chanos_conn_reply(conn, &f, out, n, 20000) != 0)
            return -3;
        served++;
    }
}

static void *side_root(void *arg)
{
    chanos_task s, w;
    int is_server = arg != NULL;
    int64_t fibs = 0;

    if (is_server)
        chanos_spawn(&s, server, 0);
    /* A computation beside it, on the same single worker. */
    chanos_spawn(&w, fib_task, 20);
    chanos_task_sync();
    fibs = chanos_result_i64(&w) == fib_serial(20);
    if (is_server)
        return (void *)(intptr_t)(fibs && chanos_result_i64(&s) == NCALLS + 1 ? 0 : 1);
    return (void *)(intptr_t)(fibs ? 0 : 1);
}

static int child(int sock)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    chanos_task t;
    int bad;

    alarm(120);
    if (connpair_child(sock, over_net, 20000, &conn) != 0)
        return 2;
    o.workers = 1;
    if (chanos_tasks_start(&rt, &o) != 0)
        return 3;
    chanos_task_set(&t, side_root, (void *)1);
    chanos_tasks_run(rt, &t);
    bad = (int)(intptr_t)chanos_result_ptr(&t);
    chanos_tasks_stop(rt);
    chanos_conn_close(conn);
    return bad ? 4 : 0;
}

static void *client_root(void *arg)
{
    chanos_task side;
    uint8_t buf[64];
    struct chanos_frame r;
    int64_t ok = 0;
    size_t n;

    (void)arg;
    chanos_spawn(&side, side_root, NULL);
    for (uint64_t i = 0; i < NCALLS; i++) {
        n = encode(buf, sizeof(buf), MSG_TRIPLE, CHANOS_KIND_CALL, i);
        if (n != 0 && chanos_task_conn_call(conn, buf, n, 20000, &r, NULL, NULL) == 0 &&
            body_u64(&r) == i * 3)
            ok++;
        if (i == NCALLS / 2) {
            n = encode(buf, sizeof(buf), MSG_IGNORE, CHANOS_KIND_CALL, i);
            CHECK_EQ(chanos_task_conn_call(conn, buf, n, 30, &r, NULL, NULL), CHANOS_ERR_TIMEDOUT);
        }
    }
    CHECK_EQ(ok, NCALLS);
    /* One more, then stop the server. */
    n = encode(buf, sizeof(buf), MSG_TRIPLE, CHANOS_KIND_CALL, 7);
    CHECK_EQ(chanos_task_conn_call(conn, buf, n, 20000, &r, NULL, NULL), 0);
    CHECK_EQ(body_u64(&r), 21);
    n = encode(buf, sizeof(buf), MSG_STOP, CHANOS_KIND_MESSAGE, 0);
    CHECK_EQ(chanos_conn_send(conn, buf, n, 20000), 0);
    chanos_task_sync();
    CHECK(chanos_result_ptr(&side) == NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    chanos_task t;
    int sv[2];
    pid_t pid;
    int status = -1;

    over_net = argc > 1 && strcmp(argv[1], "net") == 0;
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    /* forked before any thread (the net link's) starts */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(child(sv[1]));
    }
    close(sv[1]);
    CHECK_EQ(connpair_parent(sv[0], over_net, &conn), 0);
    if (failures == 0) {
        o.workers = 1;
        CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
        chanos_task_set(&t, client_root, NULL);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        chanos_tasks_stop(rt);
    } else {
        kill(pid, SIGKILL);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    chanos_conn_close(conn);
    return check_done(over_net ? "tasks_conn net" : "tasks_conn");
}
