/* test_ump: tasks in two processes talk over real ump rings. The child
 * serves NCONN connections with one task each on a single worker, beside a
 * ticking timer task: every server waits for its next message without
 * holding the worker, or the others and the timer would starve. The
 * parent's client tasks check every reply, in order. */
#include "../../tests/check.h"

#include <chanos_tasks.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NCONN 6
#define NMSG  3000

static chanos_ump *conn[NCONN];
static atomic_int ticks;
static atomic_int serving;

struct msg {
    uint32_t conn, seq, stop;
    uint8_t pad[100]; /* two slots */
};

static int64_t server(int64_t i)
{
    for (;;) {
        const void *p;
        size_t len;
        struct msg m;
        int rc = chanos_task_ump_recv(conn[i], &p, &len, 20000);

        if (rc != 0 || len != sizeof(m))
            return rc != 0 ? rc : -1;
        memcpy(&m, p, sizeof(m));
        if (m.stop)
            break;
        m.seq = m.seq * 2 + 1;
        rc = chanos_task_ump_send(conn[i], &m, sizeof(m), 20000);
        if (rc != 0)
            return rc;
    }
    atomic_fetch_sub(&serving, 1);
    return 0;
}

static int64_t ticker(int64_t unused)
{
    (void)unused;
    while (atomic_load(&serving) > 0) {
        chanos_task_sleep(1);
        atomic_fetch_add(&ticks, 1);
    }
    return 0;
}

static void *child_root(void *arg)
{
    chanos_task s[NCONN], t;
    int64_t bad = 0;

    (void)arg;
    atomic_store(&serving, NCONN);
    for (int i = 0; i < NCONN; i++)
        chanos_spawn(&s[i], server, i);
    chanos_spawn(&t, ticker, 0);
    chanos_task_sync();
    for (int i = 0; i < NCONN; i++)
        bad += chanos_result_i64(&s[i]) != 0;
    return (void *)(intptr_t)bad;
}

static int child(int *socks)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    chanos_task t;
    int bad = 0;

    alarm(120); /* never outlive a broken parent */
    for (int i = 0; i < NCONN; i++)
        if (chanos_ump_attach(socks[i], NULL, 10000, &conn[i]) != 0)
            return 2;
    o.workers = 1;
    if (chanos_tasks_start(&rt, &o) != 0)
        return 3;
    chanos_task_set(&t, child_root, NULL);
    chanos_tasks_run(rt, &t);
    bad = (int)(intptr_t)chanos_result_ptr(&t);
    chanos_tasks_stop(rt);
    for (int i = 0; i < NCONN; i++)
        chanos_ump_close(conn[i]);
    if (bad != 0)
        return 4;
    if (atomic_load(&ticks) == 0)
        return 5; /* the timer never ran: a server held the worker */
    return 0;
}

static int64_t client(int64_t i)
{
    struct msg m;

    memset(&m, 0, sizeof(m));
    m.conn = (uint32_t)i;
    for (uint32_t k = 0; k < NMSG; k++) {
        const void *p;
        size_t len;
        struct msg r;

        m.seq = k;
        if (chanos_task_ump_send(conn[i], &m, sizeof(m), 20000) != 0)
            return -1;
        if (chanos_task_ump_recv(conn[i], &p, &len, 20000) != 0 || len != sizeof(r))
            return -2;
        memcpy(&r, p, sizeof(r));
        if (r.conn != (uint32_t)i || r.seq != k * 2 + 1)
            return -3;
    }
    m.stop = 1;
    if (chanos_task_ump_send(conn[i], &m, sizeof(m), 20000) != 0)
        return -4;
    return NMSG;
}

static void *parent_root(void *arg)
{
    chanos_task c[NCONN];

    (void)arg;
    for (int i = 0; i < NCONN; i++)
        chanos_spawn(&c[i], client, i);
    chanos_task_sync();
    for (int i = 0; i < NCONN; i++)
        CHECK_EQ(chanos_result_i64(&c[i]), NMSG);
    return NULL;
}

int main(void)
{
    int sv[NCONN][2], theirs[NCONN];
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    chanos_task t;
    pid_t pid;
    int status = -1;

    for (int i = 0; i < NCONN; i++) {
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]) == 0);
        theirs[i] = sv[i][1];
    }
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < NCONN; i++)
            close(sv[i][0]);
        _exit(child(theirs));
    }
    for (int i = 0; i < NCONN; i++) {
        close(sv[i][1]);
        CHECK_EQ(chanos_ump_create(sv[i][0], NULL, 10000, &conn[i]), 0);
    }
    if (failures == 0) {
        o.workers = 2;
        CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
        chanos_task_set(&t, parent_root, NULL);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        chanos_tasks_stop(rt);
    } else {
        kill(pid, SIGKILL);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    for (int i = 0; i < NCONN; i++)
        chanos_ump_close(conn[i]);
    return check_done("tasks_ump");
}
