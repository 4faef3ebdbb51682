/* test_wakeup: sleeping workers are woken for all the work there is, not
 * one of them per batch (docs/tasks.md, "Passing a wake-up on").
 *
 * Two batches get one wake-up each: a publish of several entries, for the
 * sleepers that asked for them, and the deque that a leaving worker hands
 * to the shared queue. The sleeper woken must, once it has found work,
 * wake the next while work is left for it.
 *
 * - batch: one worker spawns three children that block; two workers
 *   added then sleep; the parent's sync publishes all three at once. All
 *   three must then run at the same time, one per worker; with a single
 *   wake-up the third worker sleeps while the third child waits in a deque
 *   it could steal from.
 * - leave: a worker holding six private children is removed; it hands
 *   them to the shared queue, and the workers left, all asleep, must take
 *   them until either the queue is empty or none sleeps.
 *
 * The tests read the runtime's counts of sleepers, searchers and queued
 * tasks (internal.h) to know when the others sleep and what is left;
 * everything else goes through the public API. */
#include "../../tests/check.h"
#include "../src/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define CHILDREN 3
/* A woken worker whose first look picks other victims than the parent's
 * (they are drawn at random) searches, and would pass the wake-up on even
 * without counting as a searcher when woken: rounds enough that a missing
 * hand-over shows in one. */
#define ROUNDS   4

static atomic_int spawned, go, started, gate;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A child that holds its worker until the gate opens, so that children
 * that run at once run on different workers. */
static int64_t blocked_child(int64_t i)
{
    atomic_fetch_add(&started, 1);
    while (!atomic_load(&gate))
        usleep(100);
    return i;
}

/* The parent spawns its children while it is the only worker, so that they
 * stay private, then waits, holding its worker, until the test says the
 * others sleep; its sync then publishes all of them for the sleepers'
 * requests. */
static int64_t batch_parent(int64_t unused)
{
    chanos_task c[CHILDREN];

    (void)unused;
    for (int i = 0; i < CHILDREN; i++)
        chanos_spawn(&c[i], blocked_child, i);
    atomic_store(&spawned, 1);
    while (!atomic_load(&go))
        usleep(100);
    chanos_task_sync();
    return 0;
}

static void *run_root(void *arg)
{
    chanos_tasks *rt = arg;
    chanos_task t;

    chanos_task_set(&t, batch_parent, 0);
    return (void *)(intptr_t)chanos_tasks_run(rt, &t);
}

/* One round: 1 when every child ran at once within the bound. */
static int batch_round(void)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;
    pthread_t th;
    void *ret;
    int64_t deadline;
    int all;

    atomic_store(&spawned, 0);
    atomic_store(&go, 0);
    atomic_store(&started, 0);
    atomic_store(&gate, 0);
    o.workers = 1;
    o.max_workers = CHILDREN;
    o.no_pin = 1;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    CHECK_EQ(pthread_create(&th, NULL, run_root, rt), 0);
    while (!atomic_load(&spawned))
        usleep(100);
    CHECK_EQ(chanos_tasks_set_workers(rt, CHILDREN), 0);
    /* The added workers find nothing public, ask the parent's worker to
     * publish, and sleep. */
    deadline = now_ms() + 10000;
    while (atomic_load(&rt->sleepers) < CHILDREN - 1 && now_ms() < deadline)
        usleep(100);
    CHECK_EQ(atomic_load(&rt->sleepers), CHILDREN - 1);
    atomic_store(&go, 1);
    /* A wake-up takes microseconds; the bound is for loaded machines and
     * sanitizers. */
    deadline = now_ms() + 500;
    while (atomic_load(&started) < CHILDREN && now_ms() < deadline)
        usleep(100);
    all = atomic_load(&started) == CHILDREN;
    if (!all)
        fprintf(stderr, "batch: %d of %d children running after 500 ms, %d workers asleep\n",
                atomic_load(&started), CHILDREN, atomic_load(&rt->sleepers));
    atomic_store(&gate, 1);
    pthread_join(th, &ret);
    CHECK(ret == NULL);
    chanos_tasks_stop(rt);
    return all;
}

static void test_batch(void)
{
    int ok = 0;

    for (int r = 0; r < ROUNDS; r++)
        ok += batch_round();
    CHECK_EQ(ok, ROUNDS);
}

#define LEAVE_WORKERS  8
#define LEAVE_FROM     4 /* the parent's worker is one of those removed */
#define LEAVE_CHILDREN 6

static atomic_int parent_slot, busy_mask;

static int64_t blocked_child_mark(int64_t i)
{
    atomic_fetch_or(&busy_mask, 1 << chanos_task_worker());
    return blocked_child(i);
}

/* The parent runs on a worker of slot LEAVE_FROM or above (or gives up at
 * once, and the test tries again), spawns its children, and waits; its
 * sync is where the removed worker leaves, handing over its deque. */
static int64_t leave_parent(int64_t unused)
{
    chanos_task c[LEAVE_CHILDREN];
    int slot = chanos_task_worker();

    (void)unused;
    if (slot < LEAVE_FROM)
        return -1;
    atomic_fetch_or(&busy_mask, 1 << slot);
    for (int i = 0; i < LEAVE_CHILDREN; i++)
        chanos_spawn(&c[i], blocked_child_mark, i);
    atomic_store(&parent_slot, slot);
    while (!atomic_load(&go))
        usleep(100);
    chanos_task_sync();
    return 0;
}

struct leave_run {
    chanos_tasks *rt;
    int64_t result;
};

static void *run_leave_root(void *arg)
{
    struct leave_run *r = arg;
    chanos_task t;

    chanos_task_set(&t, leave_parent, 0);
    if (chanos_tasks_run(r->rt, &t) != 0)
        return (void *)1;
    r->result = chanos_result_i64(&t);
    return NULL;
}

/* wait_asleep waits until every worker of slots [0, n) that runs neither
 * the parent nor a child sleeps, and none searches. */
static void wait_asleep(chanos_tasks *rt, int n)
{
    int64_t deadline = now_ms() + 10000;
    int want = 0;

    while (now_ms() < deadline) {
        int mask = atomic_load(&busy_mask);

        want = 0;
        for (int i = 0; i < n; i++)
            want += !(mask & (1 << i));
        if (atomic_load(&rt->sleepers) == want && atomic_load(&rt->searching) == 0)
            return;
        usleep(100);
    }
    CHECK_EQ(atomic_load(&rt->sleepers), want);
}

static void test_leave(void)
{
    struct chanos_tasks_opts o = { 0 };
    struct leave_run run = { 0 };
    pthread_t th;
    void *ret;
    int64_t deadline;
    int tries = 0;
    int from;

    atomic_store(&go, 0);
    atomic_store(&started, 0);
    atomic_store(&gate, 0);
    atomic_store(&parent_slot, -1);
    atomic_store(&busy_mask, 0);
    o.workers = LEAVE_WORKERS;
    o.no_pin = 1;
    CHECK_EQ(chanos_tasks_start(&run.rt, &o), 0);
    /* A root goes to whichever worker takes it first; try until one of
     * those to be removed does. */
    for (;;) {
        CHECK_EQ(pthread_create(&th, NULL, run_leave_root, &run), 0);
        while (atomic_load(&parent_slot) < 0 && pthread_tryjoin_np(th, &ret) != 0)
            usleep(100);
        if (atomic_load(&parent_slot) >= 0)
            break;
        CHECK(ret == NULL);
        if (++tries == 1000) {
            CHECK(0); /* never on a slot to be removed */
            chanos_tasks_stop(run.rt);
            return;
        }
    }
    from = atomic_load(&parent_slot);
    /* Everyone else sleeps (or runs a child published meanwhile); then
     * the parent's worker and those above are removed, and the workers
     * left, woken by the removal, sleep again. */
    wait_asleep(run.rt, LEAVE_WORKERS);
    CHECK_EQ(chanos_tasks_set_workers(run.rt, (unsigned)from), 0);
    usleep(20000);
    wait_asleep(run.rt, from);
    /* The parent syncs, and its worker leaves: its children go to the
     * shared queue (each child is then queued or started). */
    atomic_store(&go, 1);
    deadline = now_ms() + 10000;
    while (atomic_load(&started) + atomic_load(&run.rt->inj_n) < LEAVE_CHILDREN &&
           now_ms() < deadline)
        usleep(100);
    deadline = now_ms() + 500;
    while (atomic_load(&run.rt->inj_n) > 0 && atomic_load(&run.rt->sleepers) > 0 &&
           now_ms() < deadline)
        usleep(100);
    if (atomic_load(&run.rt->inj_n) > 0 && atomic_load(&run.rt->sleepers) > 0)
        fprintf(stderr, "leave: %d tasks queued and %d workers asleep after 500 ms\n",
                atomic_load(&run.rt->inj_n), atomic_load(&run.rt->sleepers));
    CHECK(atomic_load(&run.rt->inj_n) == 0 || atomic_load(&run.rt->sleepers) == 0);
    atomic_store(&gate, 1);
    pthread_join(th, &ret);
    CHECK(ret == NULL);
    CHECK_EQ(run.result, 0);
    chanos_tasks_stop(run.rt);
}

int main(void)
{
    test_batch();
    test_leave();
    return check_done("tasks_wakeup");
}
