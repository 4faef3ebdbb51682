/* test_workers: workers added and removed at random while tasks compute
 * and message heavily. Two threads run roots (fib, merge sort, and pairs
 * of tasks that exchange numbered messages over in-process ump rings and
 * events) while the main thread sets the worker count between 1 and 5;
 * every result and every message is checked: none lost, none twice, in
 * order. */
#include "../../tests/ump_testutil.h"
#include "workloads.h"

#include <chanos_tasks.h>

#include <errno.h>
#include <pthread.h>
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
    return check_done("tasks_workers");
}
