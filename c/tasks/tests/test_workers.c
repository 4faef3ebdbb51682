/* test_workers: workers added and removed at random while tasks compute
 * and message heavily. Two threads run roots (fib, merge sort, and pairs
 * of tasks that exchange numbered messages over in-process ump rings and
 * events) while the main thread sets the worker count between 1 and 5;
 * every result and every message is checked: none lost, none twice, in
 * order. Then: removing a worker that runs a long task returns without
 * waiting for the task, and growing back takes the removal back. */
#include "../../tests/ump_testutil.h"
#include "workloads.h"

#include <chanos_tasks.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define NPAIRS 4
#define NMSG   400

static chanos_tasks *rt;
static atomic_int stop;
static atomic_long bad;
static atomic_long rounds;

struct pair_ {
    chanos_ump *a, *b;
    chanos_event *ev;
    atomic_long got; /* event sets seen */
};

static struct pair_ pairs[NPAIRS];

static void *sender(void *arg)
{
    struct pair_ *p = arg;

    for (uint32_t k = 0; k < NMSG; k++) {
        if (chanos_task_ump_send(p->a, &k, sizeof(k), 20000) != 0)
            return (void *)1;
        if (k % 50 == 0 && chanos_event_set(p->ev) != 0)
            return (void *)2;
    }
    return NULL;
}

static void *receiver(void *arg)
{
    struct pair_ *p = arg;

    for (uint32_t k = 0; k < NMSG; k++) {
        const void *m;
        size_t len;
        uint32_t v;

        if (chanos_task_ump_recv(p->b, &m, &len, 20000) != 0 || len != sizeof(v))
            return (void *)3;
        memcpy(&v, m, sizeof(v));
        if (v != k)
            return (void *)4; /* lost, duplicated or reordered */
        if (k % 100 == 0)
            chanos_task_sync(); /* a sync point, where a worker may leave */
    }
    /* At least one event set was seen for each batch sent; the wait
     * consumes merged sets. */
    if (chanos_task_event_wait(p->ev, 20000) != 0)
        return (void *)5;
    return NULL;
}

static void *messaging_root(void *arg)
{
    chanos_task s[NPAIRS], r[NPAIRS];
    intptr_t errs = 0;

    (void)arg;
    for (int i = 0; i < NPAIRS; i++) {
        chanos_spawn(&r[i], receiver, (void *)&pairs[i]);
        chanos_spawn(&s[i], sender, (void *)&pairs[i]);
    }
    chanos_task_sync();
    for (int i = 0; i < NPAIRS; i++)
        errs += (intptr_t)chanos_result_ptr(&s[i]) != 0 || (intptr_t)chanos_result_ptr(&r[i]) != 0;
    return (void *)errs;
}

static void *load_thread(void *arg)
{
    int which = (int)(intptr_t)arg;
    uint32_t seed = 777u + (uint32_t)which;

    while (!atomic_load(&stop)) {
        chanos_task t;

        if (which == 0) {
            chanos_task_set(&t, messaging_root, NULL);
            chanos_tasks_run(rt, &t);
            if (chanos_result_ptr(&t) != NULL)
                atomic_fetch_add(&bad, 1);
            /* Drain the merged event sets left over, for the next round. */
            for (int i = 0; i < NPAIRS; i++)
                while (chanos_task_event_wait(pairs[i].ev, 0) == 0) {
                }
        } else if ((xorshift32(&seed) & 1) == 0) {
            int64_t n = 18 + (int64_t)(xorshift32(&seed) % 4);

            /* The general form, or the fast path, whose spawns leave
             * at a publish request and whose syncs find their tasks moved. */
            if (xorshift32(&seed) & 1)
                chanos_task_set(&t, fib_task, n);
            else
                chanos_task_set(&t, fib_fast, n);
            chanos_tasks_run(rt, &t);
            if (chanos_result_i64(&t) != fib_serial(n))
                atomic_fetch_add(&bad, 1);
        } else {
            size_t n = 100000;
            int32_t *a = malloc(n * sizeof(*a)), *tmp = malloc(n * sizeof(*tmp));
            struct msort_arg m = { a, tmp, 0, n };
            int sorted = 1;

            if (a == NULL || tmp == NULL)
                abort();
            for (size_t i = 0; i < n; i++)
                a[i] = (int32_t)xorshift32(&seed);
            if (xorshift32(&seed) & 1)
                chanos_task_set(&t, msort_task, (void *)&m);
            else
                chanos_task_set(&t, msort_fast, (void *)&m);
            chanos_tasks_run(rt, &t);
            for (size_t i = 1; i < n; i++)
                sorted &= a[i - 1] <= a[i];
            if (!sorted)
                atomic_fetch_add(&bad, 1);
            free(a);
            free(tmp);
        }
        atomic_fetch_add(&rounds, 1);
    }
    return NULL;
}

/* ---- a shrink does not wait for a long task ---- */

static atomic_int long_started, long_release;

static int64_t now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

/* long_task runs until released, with no spawn and no sync; 1 if it was
 * released, 0 if the deadline (which only turns a hang into a failure)
 * ended it. */
static int64_t long_task(int64_t unused)
{
    int64_t deadline = now_s() + 30;

    (void)unused;
    atomic_fetch_add(&long_started, 1);
    while (!atomic_load(&long_release))
        if (now_s() > deadline)
            return 0;
    return 1;
}

static void *long_root(void *arg)
{
    chanos_task *t = arg;

    chanos_task_set(t, long_task, 0);
    chanos_tasks_run(rt, t);
    return NULL;
}

static atomic_int waited;

static void *wait_removed_thread(void *arg)
{
    (void)arg;
    chanos_tasks_wait_removed(rt);
    atomic_store(&waited, 1);
    return NULL;
}

/* Two roots, one per worker, each a long task; set_workers(1) must return
 * while both still run (the release comes after it), and both finish. */
static void test_shrink_long(void)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_task t[2];
    pthread_t th[2];

    o.workers = 2;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    atomic_store(&long_started, 0);
    atomic_store(&long_release, 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, long_root, &t[i]), 0);
    while (atomic_load(&long_started) < 2)
        sched_yield();
    CHECK_EQ(chanos_tasks_set_workers(rt, 1), 0);
    CHECK_EQ(chanos_tasks_workers(rt), 1);
    /* Both long tasks still run: the removed worker has not left. */
    CHECK_EQ(chanos_tasks_threads(rt), 2);
    /* A waiter for the removal; growing back takes the request back
     * (the worker, in its long task, has not acted on it), which must
     * end the wait too. */
    {
        pthread_t wt;
        int64_t deadline = now_s() + 30;

        atomic_store(&waited, 0);
        CHECK_EQ(pthread_create(&wt, NULL, wait_removed_thread, NULL), 0);
        CHECK_EQ(chanos_tasks_set_workers(rt, 2), 0);
        while (!atomic_load(&waited) && now_s() < deadline)
            sched_yield();
        CHECK_EQ(atomic_load(&waited), 1);
        pthread_join(wt, NULL);
        CHECK_EQ(chanos_tasks_threads(rt), 2);
    }
    CHECK_EQ(chanos_tasks_set_workers(rt, 1), 0);
    atomic_store(&long_release, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(chanos_result_i64(&t[0]), 1);
    CHECK_EQ(chanos_result_i64(&t[1]), 1);
    chanos_tasks_wait_removed(rt);
    CHECK_EQ(chanos_tasks_threads(rt), 1);
    /* Shrink and grow back before the removed worker could act: the
     * request is taken back or the thread joined; either way two run. */
    CHECK_EQ(chanos_tasks_set_workers(rt, 2), 0);
    CHECK_EQ(chanos_tasks_set_workers(rt, 1), 0);
    CHECK_EQ(chanos_tasks_set_workers(rt, 2), 0);
    CHECK_EQ(chanos_tasks_workers(rt), 2);
    {
        chanos_task f;

        chanos_task_set(&f, fib_fast, 20);
        CHECK_EQ(chanos_tasks_run(rt, &f), 0);
        CHECK_EQ(chanos_result_i64(&f), fib_serial(20));
    }
    chanos_tasks_stop(rt);
}

int main(void)
{
    struct chanos_tasks_opts o = { 0 };
    pthread_t th[3];
    uint32_t seed = 4242;
    int changes = 0;

    for (int i = 0; i < NPAIRS; i++) {
        pair(NULL, &pairs[i].a, &pairs[i].b);
        CHECK_EQ(chanos_event_new(&pairs[i].ev), 0);
    }
    o.workers = 2;
    o.max_workers = 8;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    CHECK_EQ(chanos_tasks_set_workers(rt, 0), -EINVAL);
    CHECK_EQ(chanos_tasks_set_workers(rt, 9), -EINVAL);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, load_thread, (void *)(intptr_t)i), 0);
    /* Change the worker count until each load thread made rounds. */
    while (changes < 200 || atomic_load(&rounds) < 30) {
        unsigned n = 1 + xorshift32(&seed) % 5;
        struct timespec ts = { 0, (long)(xorshift32(&seed) % 3000) * 1000 };

        CHECK_EQ(chanos_tasks_set_workers(rt, n), 0);
        CHECK_EQ(chanos_tasks_workers(rt), n);
        nanosleep(&ts, NULL);
        changes++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(atomic_load(&bad), 0);
    CHECK(atomic_load(&rounds) >= 30);
    chanos_tasks_stop(rt);
    for (int i = 0; i < NPAIRS; i++) {
        chanos_ump_close(pairs[i].a);
        chanos_ump_close(pairs[i].b);
        chanos_event_free(pairs[i].ev);
    }
    test_shrink_long();
    return check_done("tasks_workers");
}
