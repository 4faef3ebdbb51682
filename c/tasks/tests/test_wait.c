/* test_wait: tasks that wait on events, descriptors and timers without
 * holding their worker. With one worker, a task that waits for something
 * only a later task can do deadlocks unless the wait suspends the task. */
#include "../../tests/check.h"

#include <chanos_tasks.h>

#include "workloads.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static chanos_tasks *rt;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One worker: the waiter is spawned first; the setter runs only if the
 * waiter's wait lets the worker go. */
static chanos_event *ev;

static void *waiter(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)chanos_task_event_wait(ev, 10000);
}

static void *setter(void *arg)
{
    (void)arg;
    chanos_task_sleep(5);
    return (void *)(intptr_t)chanos_event_set(ev);
}

static void *event_root(void *arg)
{
    chanos_task a, b;

    (void)arg;
    chanos_spawn(&a, waiter, NULL);
    chanos_spawn(&b, setter, NULL);
    chanos_task_sync();
    CHECK_EQ((intptr_t)chanos_result_ptr(&a), 0);
    CHECK_EQ((intptr_t)chanos_result_ptr(&b), 0);
    /* Not set: the wait times out, and takes about its timeout. */
    {
        int64_t t0 = now_ms();

        CHECK_EQ(chanos_task_event_wait(ev, 20), CHANOS_ERR_TIMEDOUT);
        CHECK(now_ms() - t0 >= 20);
    }
    return NULL;
}

/* Many sleepers on one worker, and a pipe reader woken by a writer. */
static atomic_int woke;

static int64_t sleeper(int64_t ms)
{
    int64_t t0 = now_ms();

    chanos_task_sleep(ms);
    atomic_fetch_add(&woke, 1);
    return now_ms() - t0 >= ms;
}

static int pfd[2];

static int64_t pipe_reader(int64_t unused)
{
    char c = 0;
    int rc;

    (void)unused;
    rc = chanos_task_wait_fd(pfd[0], EPOLLIN, 10000);
    if (rc < 0 || !(rc & EPOLLIN))
        return -1;
    if (read(pfd[0], &c, 1) != 1)
        return -2;
    return c;
}

static int64_t pipe_writer(int64_t v)
{
    char c = (char)v;

    chanos_task_sleep(10);
    return write(pfd[1], &c, 1);
}

static void *sleep_root(void *arg)
{
    chanos_task t[100], r, w;
    int64_t ok = 0;

    (void)arg;
    for (int i = 0; i < 100; i++)
        chanos_spawn(&t[i], sleeper, (int64_t)(i % 10) * 3);
    chanos_spawn(&r, pipe_reader, 0);
    chanos_spawn(&w, pipe_writer, 42);
    chanos_task_sync();
    for (int i = 0; i < 100; i++)
        ok += chanos_result_i64(&t[i]);
    CHECK_EQ(ok, 100);
    CHECK_EQ(atomic_load(&woke), 100);
    CHECK_EQ(chanos_result_i64(&r), 42);
    CHECK_EQ(chanos_result_i64(&w), 1);
    /* A descriptor that never polls: timed out. */
    CHECK_EQ(chanos_task_wait_fd(pfd[0], EPOLLIN, 15), CHANOS_ERR_TIMEDOUT);
    /* Yield comes back. */
    chanos_task_yield();
    return NULL;
}

/* Ping-pong between two tasks over two events, many rounds: every wake is
 * a resume, on either worker. */
static chanos_event *ping, *pong;

static int64_t pinger(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (chanos_event_set(ping) != 0 || chanos_task_event_wait(pong, 10000) != 0)
            return i;
    }
    return n;
}

static int64_t ponger(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (chanos_task_event_wait(ping, 10000) != 0 || chanos_event_set(pong) != 0)
            return i;
    }
    return n;
}

static void *pingpong_root(void *arg)
{
    chanos_task a, b;

    (void)arg;
    chanos_spawn(&a, pinger, 2000);
    chanos_spawn(&b, ponger, 2000);
    chanos_task_sync();
    CHECK_EQ(chanos_result_i64(&a), 2000);
    CHECK_EQ(chanos_result_i64(&b), 2000);
    return NULL;
}

static void run_root(void *(*fn)(void *))
{
    chanos_task t;

    chanos_task_set(&t, fn, NULL);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
}

static int64_t cpu_us(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
           ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static int64_t one(int64_t v)
{
    return v;
}

/* An idle runtime sleeps: its workers on the futex, its poller in
 * epoll_wait. Over 500 ms idle the process uses a small fraction of one
 * CPU (the bound is loose: it only catches workers that keep spinning). */
static void test_idle(void)
{
    struct chanos_tasks_opts o = { 0 };
    struct timespec settle = { 0, 50 * 1000000 }, idle = { 0, 500 * 1000000 };
    chanos_task t;
    int64_t before;

    o.workers = 2;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    chanos_task_set(&t, one, 1);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    nanosleep(&settle, NULL); /* the idle spins end */
    before = cpu_us();
    nanosleep(&idle, NULL);
    CHECK(cpu_us() - before < 50000);
    chanos_tasks_stop(rt);
}

/* Arguments at the edges of their types: a parallel_for over a range
 * wider than INT64_MAX still comes in pieces of at most grain; a stack
 * too large to round is refused; a wait on a descriptor that is not open
 * says so off a worker as on one. */
static _Atomic int64_t pieces, widest;

static void piece(int64_t lo, int64_t hi, void *arg)
{
    (void)arg;
    atomic_fetch_add(&pieces, 1);
    int64_t w = (int64_t)((uint64_t)hi - (uint64_t)lo);
    int64_t cur = atomic_load(&widest);
    while (w > cur && !atomic_compare_exchange_weak(&widest, &cur, w)) {
    }
}

static void test_limits(void)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *big;
    int64_t grain = INT64_MAX / 4;

    chanos_parallel_for(-(INT64_C(1) << 62) - 1, (INT64_C(1) << 62) + 1, grain, piece, NULL);
    CHECK(atomic_load(&pieces) >= 2);
    CHECK(atomic_load(&widest) <= grain);
    o.workers = 1;
    o.stack_size = SIZE_MAX;
    CHECK_EQ(chanos_tasks_start(&big, &o), -EINVAL);
    CHECK_EQ(chanos_task_wait_fd(1000, EPOLLIN, 100), -EBADF);
    CHECK_EQ(chanos_task_wait_fd(1000, EPOLLIN, 0), -EBADF);
}

/* A runtime out of stacks: a task that would suspend waits holding its
 * worker instead, and everything still completes. Two workers and three
 * stacks leave one for a suspended task: twenty sleepers, each holding
 * what it takes for 5 ms, cannot all have one; a sync, general and fast,
 * waits for stolen children the same way. Fewer stacks than workers:
 * the start is refused. */
static void *sleepers_root(void *arg)
{
    chanos_task t[20];
    int64_t ok = 0;

    (void)arg;
    for (int i = 0; i < 20; i++)
        chanos_spawn(&t[i], sleeper, 5);
    chanos_task_sync();
    for (int i = 0; i < 20; i++)
        ok += chanos_result_i64(&t[i]);
    CHECK_EQ(ok, 20);
    return NULL;
}

static int64_t fib_root(int64_t n)
{
    chanos_ctx *c = chanos_task_ctx();

    return fib_task(n) + (c != NULL ? fib_fast(c, n) : -1);
}

static void test_stack_limit(void)
{
    struct chanos_tasks_opts o = { 0 };
    struct chanos_tasks_stats st;
    chanos_task t;

    o.workers = 2;
    o.max_stacks = 3;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    run_root(sleepers_root);
    chanos_task_set(&t, fib_root, 22);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), 2 * 17711);
    chanos_tasks_get_stats(rt, &st);
    CHECK(st.stacks <= 3);
    CHECK(st.waits_in_place >= 1);
    chanos_tasks_stop(rt);

    o.workers = 4;
    CHECK_EQ(chanos_tasks_start(&rt, &o), -ENOMEM);
}

int main(void)
{
    struct chanos_tasks_opts o = { 0 };

    CHECK_EQ(chanos_event_new(&ev), 0);
    CHECK_EQ(chanos_event_new(&ping), 0);
    CHECK_EQ(chanos_event_new(&pong), 0);
    CHECK(pipe(pfd) == 0);
    for (unsigned workers = 1; workers <= 3; workers += 2) {
        o.workers = workers;
        CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
        atomic_store(&woke, 0);
        run_root(event_root);
        run_root(sleep_root);
        run_root(pingpong_root);
        chanos_tasks_stop(rt);
    }
    test_idle();
    test_limits();
    test_stack_limit();
    /* Outside a runtime the same calls block the thread. */
    CHECK_EQ(chanos_event_set(ev), 0);
    CHECK_EQ(chanos_task_event_wait(ev, 1000), 0);
    CHECK_EQ(chanos_task_event_wait(ev, 5), CHANOS_ERR_TIMEDOUT);
    chanos_event_free(ev);
    chanos_event_free(ping);
    chanos_event_free(pong);
    close(pfd[0]);
    close(pfd[1]);
    return check_done("tasks_wait");
}
