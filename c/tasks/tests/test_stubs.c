/* test_stubs: the generated C stubs in tasks. On a single worker, a task's
 * rpc through a generated stub (pingpong_echo) and its one-way sends
 * (pingpong_ping_send) into a full ring suspend the task, not the worker:
 * the server, in another process, answers each call, and starts to drain
 * the ring, only once a second task on that worker has written it a
 * byte, which it can do only while the first is suspended. A stub that
 * blocked the worker would end in its timeout. Over a ump ring pair, and
 * (argument "net") the calls over a libchanos_net link. */
#include "../../tests/check.h"

#include "connpair.h"
#include <chanos_tasks.h>
#include <pingpong.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NCALLS 200
#define NPINGS 20000 /* far more than a ring holds */
#define WAIT_MS 20000

static chanos_conn *conn;
static int over_net; /* the "net" argument */

/* ---- the server: a plain thread in the child process ---- */

struct served {
    int go;         /* the read end of the go bytes */
    uint64_t calls; /* echo calls answered */
    uint64_t pings; /* pings taken, in order */
    int bad;
};

static int take_go(struct served *s)
{
    char b;

    for (;;) {
        ssize_t n = read(s->go, &b, 1);

        if (n == 1)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return -1;
    }
}

static int on_echo(void *ctx, chanos_conn *c, const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    struct served *s = ctx;

    (void)c;
    if (take_go(s) != 0)
        return -1;
    out->result = in->val * 3;
    s->calls++;
    return 0;
}

static int on_ping(void *ctx, chanos_conn *c, const struct pingpong_ping *m)
{
    struct served *s = ctx;

    (void)c;
    /* the first ping waits for its byte: meanwhile the client fills the ring */
    if (s->pings == 0 && take_go(s) != 0)
        return -1;
    if (m->msg_id != s->pings)
        s->bad = 1;
    s->pings++;
    return 0;
}

static int child(int sock, int go)
{
    static const struct pingpong_server_ops ops = { .ping = on_ping, .echo = on_echo };
    struct served s = { .go = go };
    int rc;

    alarm(120);
    if (connpair_child(sock, over_net, WAIT_MS, &conn) != 0)
        return 2;
    rc = pingpong_serve(conn, &ops, &s, WAIT_MS);
    chanos_conn_close(conn);
    if (rc != 0) {
        fprintf(stderr, "server: %s\n", chanos_strerror(rc));
        return 3;
    }
    if (s.calls != NCALLS || s.bad || s.pings != (over_net ? 0 : NPINGS)) {
        fprintf(stderr, "server: %llu calls, %llu pings, out of order %d\n",
                (unsigned long long)s.calls, (unsigned long long)s.pings, s.bad);
        return 4;
    }
    return 0;
}

/* ---- the client: two tasks on one worker ---- */

static int go_w;               /* the write end of the go bytes */
static chanos_event *answered; /* the caller has its reply */
static atomic_int phase;       /* 1: the calls; 2: the pings */

static void give_go(void)
{
    char b = 'g';

    CHECK(write(go_w, &b, 1) == 1);
}

/* helper writes the server's go bytes: one per call, once the caller
 * waits for it, then one for the pings, 50 ms after the sender began,
 * when it has filled the ring and waits for room. */
static void *helper(void *arg)
{
    (void)arg;
    for (int i = 0; i < NCALLS; i++) {
        give_go();
        CHECK_EQ(chanos_task_event_wait(answered, WAIT_MS), 0);
    }
    if (!over_net) {
        while (atomic_load(&phase) != 2)
            chanos_task_yield();
        chanos_task_sleep(50);
        give_go();
    }
    return NULL;
}

static void *client_root(void *arg)
{
    chanos_task h;

    (void)arg;
    chanos_task_set(&h, helper, NULL);
    chanos_task_spawn(&h);
    atomic_store(&phase, 1);
    for (uint64_t i = 0; i < NCALLS; i++) {
        struct pingpong_echo_call in = { .val = i };
        struct pingpong_echo_reply out = { 0 };
        int rc = pingpong_echo(conn, &in, &out, WAIT_MS);

        if (rc != 0) {
            fprintf(stderr, "call %llu: %s\n", (unsigned long long)i, chanos_strerror(rc));
            CHECK_EQ(rc, 0);
            break;
        }
        CHECK_EQ(out.result, i * 3);
        CHECK_EQ(chanos_event_set(answered), 0);
    }
    if (!over_net) {
        atomic_store(&phase, 2);
        for (uint32_t i = 0; i < NPINGS; i++) {
            struct pingpong_ping m = { .client_id = 1, .msg_id = i };
            int rc = pingpong_ping_send(conn, &m, WAIT_MS);

            if (rc != 0) {
                fprintf(stderr, "ping %u: %s\n", i, chanos_strerror(rc));
                CHECK_EQ(rc, 0);
                break;
            }
        }
    }
    chanos_task_sync();
    return NULL;
}

int main(int argc, char **argv)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    chanos_task t;
    int sv[2], gp[2];
    pid_t pid;
    int status = -1;

    over_net = argc > 1 && strcmp(argv[1], "net") == 0;
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(pipe2(gp, O_CLOEXEC) == 0);
    /* forked before any thread (the net link's) starts */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        close(gp[1]);
        _exit(child(sv[1], gp[0]));
    }
    close(sv[1]);
    close(gp[0]);
    go_w = gp[1];
    CHECK_EQ(connpair_parent(sv[0], over_net, &conn), 0);
    CHECK_EQ(chanos_event_new(&answered), 0);
    if (failures == 0) {
        o.workers = 1; /* the two tasks share one worker */
        CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
        chanos_task_set(&t, client_root, NULL);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        chanos_tasks_stop(rt);
    }
    chanos_conn_close(conn); /* the server's serve loop ends */
    if (failures != 0)
        kill(pid, SIGKILL);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    close(go_w);
    chanos_event_free(answered);
    return check_done(over_net ? "tasks_stubs net" : "tasks_stubs");
}
