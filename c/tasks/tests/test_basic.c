/* test_basic: spawn and sync, checked against serial runs: fib, merge
 * sort, N-Queens, parallel_for, the typed helpers, implicit sync, roots from
 * several threads, a private child published to an idle worker, and seed
 * 003's 2^24-task stress test; and the same through the fast path
 * (chanos_fspawn, chanos_fsync), with its other types, a deque that grows,
 * tasks that move between workers between spawn and sync, and the fast
 * and general forms mixed. */
#include "../../tests/check.h"
#include "workloads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static chanos_tasks *rt;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return (x > y) - (x < y);
}

static void test_fib(void)
{
    for (int64_t n = 0; n <= 25; n += 5) {
        chanos_task t;

        chanos_task_set(&t, fib_task, n);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), fib_serial(n));
    }
}

/* check_msort sorts 2^20 numbers drawn from seed with the merge sort
 * task, on the fast path (chanos_fspawn) or not, and checks the result
 * against qsort. With dups, every fifth number is one of eight values:
 * runs of equal values, which the parallel merge's split must keep on one
 * side or the other. */
static void check_msort(uint32_t seed, bool fast, bool dups)
{
    size_t n = 1u << 20;
    int32_t *a = malloc(n * sizeof(*a)), *b = malloc(n * sizeof(*b)),
            *tmp = malloc(n * sizeof(*tmp));
    uint32_t s = seed;
    struct msort_arg m = { a, tmp, 0, n };
    chanos_task t;

    CHECK(a != NULL && b != NULL && tmp != NULL);
    for (size_t i = 0; i < n; i++) {
        a[i] = b[i] = (int32_t)xorshift32(&s);
        if (dups && i % 5 == 0)
            a[i] = b[i] = a[i] & 7;
    }
    if (fast)
        chanos_task_set(&t, msort_fast, (void *)&m);
    else
        chanos_task_set(&t, msort_task, (void *)&m);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    qsort(b, n, sizeof(*b), cmp_i32);
    CHECK(memcmp(a, b, n * sizeof(*a)) == 0);
    free(a);
    free(b);
    free(tmp);
}

static void test_msort(void)
{
    check_msort(12345, false, false);
    check_msort(777, false, true);
}

static void test_nqueens(void)
{
    for (int n = 4; n <= 10; n++) {
        struct nq_arg q = { n, 0, 0, 0, 0 };
        chanos_task t;

        chanos_task_set(&t, nq_task, (void *)&q);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ((int64_t)(intptr_t)chanos_result_ptr(&t), nqueens_serial(n));
    }
}

/* parallel_for marks every index once. */
static void pf_body(int64_t lo, int64_t hi, void *arg)
{
    atomic_int *hits = arg;

    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add_explicit(&hits[i], 1, memory_order_relaxed);
}

struct pf_case {
    int64_t n, grain;
    atomic_int *hits;
};

static void *pf_root(void *arg)
{
    struct pf_case *c = arg;

    chanos_parallel_for(0, c->n, c->grain, pf_body, c->hits);
    return NULL;
}

static void test_parallel_for(void)
{
    int64_t sizes[] = { 0, 1, 7, 1000, 100003 };
    int64_t grains[] = { 0, 1, 3, 64, 100000 };

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t j = 0; j < sizeof(grains) / sizeof(grains[0]); j++) {
            struct pf_case c = { sizes[i], grains[j], NULL };
            chanos_task t;
            int64_t bad = 0;

            c.hits = calloc((size_t)c.n + 1, sizeof(atomic_int));
            CHECK(c.hits != NULL);
            chanos_task_set(&t, pf_root, (void *)&c);
            CHECK_EQ(chanos_tasks_run(rt, &t), 0);
            for (int64_t k = 0; k < c.n; k++)
                if (atomic_load(&c.hits[k]) != 1)
                    bad++;
            CHECK_EQ(bad, 0);
            free(c.hits);
        }
    /* From outside the workers it runs on the caller. */
    {
        atomic_int hits[10] = { 0 };
        int bad = 0;

        chanos_parallel_for(0, 10, 3, pf_body, hits);
        for (int k = 0; k < 10; k++)
            bad += atomic_load(&hits[k]) != 1;
        CHECK_EQ(bad, 0);
    }
}

/* The typed helpers: double and the general form. */
static double halve(double x)
{
    chanos_task t;

    if (x < 1.0)
        return x;
    chanos_spawn(&t, halve, x / 2);
    chanos_task_sync();
    return chanos_result_f64(&t);
}

static chanos_task_val square(chanos_task_val v)
{
    return (chanos_task_val){ .i = v.i * v.i };
}

static void test_typed(void)
{
    chanos_task t;

    chanos_task_set(&t, halve, 100.0);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK(chanos_result_f64(&t) == 100.0 / 128);
    chanos_task_set(&t, square, ((chanos_task_val){ .i = 12 }));
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_task_result(&t).i, 144);
    /* Outside the runtime, spawn runs at once. */
    chanos_spawn(&t, fib_task, 10);
    chanos_task_sync();
    CHECK_EQ(chanos_result_i64(&t), 55);
}

/* Implicit sync: a task that returns without syncing still waits for its
 * children, so the parent sees all their writes after its own sync. */
static atomic_long leaves;

static int64_t nosync(int64_t n)
{
    chanos_task *t;

    if (n == 0) {
        atomic_fetch_add(&leaves, 1);
        return 0;
    }
    /* The children's storage must outlive the implicit sync at return:
     * a heap block, which the root frees. */
    t = malloc(2 * sizeof(*t));
    if (t == NULL)
        abort();
    chanos_spawn(&t[0], nosync, n - 1);
    chanos_spawn(&t[1], nosync, n - 1);
    /* No sync: the runtime syncs when this returns. */
    return (int64_t)(intptr_t)t;
}

static int64_t nosync_root(int64_t n)
{
    chanos_task t;
    int64_t blocks = 0;

    chanos_spawn(&t, nosync, n);
    chanos_task_sync();
    /* Every nosync task's children have finished; free the blocks. The
     * results are the block pointers, a tree of them. */
    {
        int64_t stack[64];
        int sp = 0;

        stack[sp++] = chanos_result_i64(&t);
        while (sp > 0) {
            chanos_task *b = (chanos_task *)(intptr_t)stack[--sp];

            if (b == NULL)
                continue;
            blocks++;
            stack[sp++] = chanos_result_i64(&b[0]);
            stack[sp++] = chanos_result_i64(&b[1]);
            free(b);
        }
    }
    return blocks;
}

static void test_implicit_sync(void)
{
    chanos_task t;

    atomic_store(&leaves, 0);
    chanos_task_set(&t, nosync_root, 12);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(atomic_load(&leaves), 1 << 12);
    CHECK_EQ(chanos_result_i64(&t), (1 << 12) - 1);
}

/* Roots from several threads at once. */
static void *root_thread(void *arg)
{
    int64_t n = (int64_t)(intptr_t)arg;
    chanos_task t;

    for (int i = 0; i < 20; i++) {
        chanos_task_set(&t, fib_task, n);
        if (chanos_tasks_run(rt, &t) != 0 || chanos_result_i64(&t) != fib_serial(n))
            return (void *)1;
    }
    return NULL;
}

static void test_roots(void)
{
    pthread_t th[4];

    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, root_thread, (void *)(intptr_t)(12 + i)), 0);
    for (int i = 0; i < 4; i++) {
        void *r;

        pthread_join(th[i], &r);
        CHECK(r == NULL);
    }
}

/*
 * A child that its parent keeps private while the parent works on is
 * published, and stolen, once an idle worker asks for it: the parent
 * spawns one child, then keeps running bursts of spawns of its own
 * (each in a task of its own, so that their syncs leave the child alone)
 * until the child has run. The child must run before the parent's sync,
 * so on another worker; the deadline only turns a hang into a failure.
 */
static atomic_int marked_on = -1;

static int64_t mark_task(int64_t unused)
{
    (void)unused;
    atomic_store(&marked_on, chanos_task_worker());
    return 0;
}

static int64_t noop_task(int64_t x)
{
    return x;
}

static int64_t burst_task(int64_t n)
{
    chanos_task d[16];

    for (int i = 0; i < 16; i++)
        chanos_spawn(&d[i], noop_task, n + i);
    chanos_task_sync();
    return 0;
}

static int64_t now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

static int64_t publish_root(int64_t unused)
{
    chanos_task c, b;
    int64_t deadline = now_s() + 30;
    int64_t bursts = 0;
    int64_t ran;

    (void)unused;
    chanos_spawn(&c, mark_task, 0);
    while (atomic_load(&marked_on) < 0 && now_s() < deadline) {
        chanos_call(&b, burst_task, bursts);
        bursts++;
    }
    /* 1: the child ran before its parent's sync, so some other worker
     * took it (by a steal, or after a burst's sync moved this task). */
    ran = atomic_load(&marked_on) >= 0;
    chanos_task_sync();
    return ran;
}

static void test_published(void)
{
    for (int round = 0; round < 20; round++) {
        chanos_task t;

        atomic_store(&marked_on, -1);
        chanos_task_set(&t, publish_root, 0);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), 1);
        CHECK(atomic_load(&marked_on) >= 0);
    }
}

static void test_stress(void)
{
    chanos_task t;
    int64_t n = 24;
    const char *env = getenv("CHANOS_TASKS_STRESS_N");

    if (env != NULL)
        n = atoi(env);
    chanos_task_set(&t, stress_task, n);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), (int64_t)1 << n);
}

/* ---- the fast path ---- */

static void test_fast_fib(void)
{
    /* CHANOS_FAST_ALIGN took effect with this compiler and its flags. */
    CHECK_EQ((uintptr_t)fib_fast % 64, 0);
    for (int64_t n = 0; n <= 27; n++) {
        chanos_task t;

        chanos_task_set(&t, fib_fast, n);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), fib_serial(n));
    }
}

static void test_fast_msort(void)
{
    check_msort(54321, true, false);
    check_msort(888, true, true);
}

/* The other types, and 3000 spawns outstanding at once, more than the
 * deque's first array holds: a grow under the fast path, with thieves. */
static double fhalf(chanos_ctx *c, double x)
{
    chanos_task t;

    if (x < 1.0)
        return x;
    chanos_fspawn(c, &t, fhalf, x / 2);
    return chanos_fsync(c, &t, fhalf);
}

static chanos_task_val fsquare(chanos_ctx *c, chanos_task_val v)
{
    (void)c;
    return (chanos_task_val){ .i = v.i * v.i };
}

static void *fident(chanos_ctx *c, void *p)
{
    (void)c;
    return p;
}

#define FAN 3000

static int64_t fan_root(chanos_ctx *c, int64_t n)
{
    chanos_task *t = malloc(FAN * sizeof(*t));
    int64_t sum = 0;

    if (t == NULL)
        abort();
    for (int64_t i = 0; i < n; i++) {
        if (i % 3 == 0)
            chanos_fspawn(c, &t[i], fib_fast, i % 15);
        else if (i % 3 == 1)
            chanos_fspawn(c, &t[i], fsquare, ((chanos_task_val){ .i = i }));
        else
            chanos_fspawn(c, &t[i], fident, (void *)(intptr_t)i);
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        if (i % 3 == 0)
            sum += chanos_fsync(c, &t[i], fib_fast) - fib_serial(i % 15);
        else if (i % 3 == 1)
            sum += chanos_fsync(c, &t[i], fsquare).i - i * i;
        else
            sum += (intptr_t)chanos_fsync(c, &t[i], fident) - i;
    }
    free(t);
    return sum;
}

static void test_fast_types(void)
{
    chanos_task t;

    chanos_task_set(&t, fhalf, 100.0);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK(chanos_result_f64(&t) == 100.0 / 128);
    chanos_task_set(&t, fsquare, ((chanos_task_val){ .i = 12 }));
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_task_result(&t).i, 144);
    for (int round = 0; round < 20; round++) {
        chanos_task_set(&t, fan_root, FAN);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), 0);
    }
}

/* Tasks whose stack moves to another worker between a spawn and its sync:
 * a yield (or a sleep) suspends the stack, and another worker may resume
 * it, while the spawned task is left behind in the first worker's deque. */
static int64_t fmove(chanos_ctx *c, int64_t n)
{
    chanos_task a, b;
    int64_t x;

    if (n < 2)
        return n;
    chanos_fspawn(c, &a, fmove, n - 1);
    chanos_fspawn(c, &b, fib_fast, n - 2);
    if (n % 4 == 0)
        chanos_task_yield();
    else if (n == 9)
        chanos_task_sleep(1);
    x = chanos_fsync(c, &b, fib_fast);
    return x + chanos_fsync(c, &a, fmove);
}

static void test_fast_move(void)
{
    for (int64_t n = 10; n <= 16; n++) {
        chanos_task t;

        chanos_task_set(&t, fmove, n);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), fib_serial(n));
    }
}

/* The forms mixed: a task of the general form calls the fast form through
 * chanos_task_ctx and spawns it with chanos_spawn; a fast task spawns
 * general-form children (scoped to the task that runs it). */
static int64_t fmixed(chanos_ctx *c, int64_t n)
{
    chanos_task g, f;
    int64_t x;

    if (n < 2)
        return n;
    chanos_fspawn(c, &f, fib_fast, n - 1);
    chanos_spawn(&g, fib_task, n - 2);
    chanos_task_sync();
    x = chanos_result_i64(&g);
    return x + chanos_fsync(c, &f, fib_fast);
}

static int64_t gmixed(int64_t n)
{
    chanos_task a, b;
    chanos_ctx *c = chanos_task_ctx();
    int64_t x;

    CHECK(c != NULL);
    chanos_spawn(&a, fmixed, n);
    chanos_spawn(&b, fib_fast, n - 1);
    x = fmixed(c, n - 2);
    chanos_task_sync();
    return x + chanos_result_i64(&a) + chanos_result_i64(&b);
}

static void test_fast_mixed(void)
{
    for (int64_t n = 2; n <= 22; n += 4) {
        chanos_task t;

        chanos_task_set(&t, gmixed, n);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), fib_serial(n) + fib_serial(n - 1) + fib_serial(n - 2));
    }
    CHECK(chanos_task_ctx() == NULL);
}

/* A child the fast path keeps private is published once an idle worker
 * asks: as test_published, with chanos_fspawn. */
static int64_t fmark(chanos_ctx *c, int64_t unused)
{
    (void)c;
    return mark_task(unused);
}

static int64_t fsquare_i64(chanos_ctx *c, int64_t x)
{
    (void)c;
    return x * x;
}

static int64_t fburst(chanos_ctx *c, int64_t n)
{
    chanos_task d[16];
    int64_t s = 0;

    for (int i = 0; i < 16; i++)
        chanos_fspawn(c, &d[i], fsquare_i64, n + i);
    for (int i = 15; i >= 0; i--)
        s += chanos_fsync(c, &d[i], fsquare_i64);
    return s;
}

static int64_t fpublish_root(chanos_ctx *c, int64_t unused)
{
    chanos_task m;
    int64_t deadline = now_s() + 30;
    int64_t bursts = 0;
    int64_t ran;

    (void)unused;
    chanos_fspawn(c, &m, fmark, 0);
    while (atomic_load(&marked_on) < 0 && now_s() < deadline)
        (void)fburst(c, bursts++);
    ran = atomic_load(&marked_on) >= 0;
    (void)chanos_fsync(c, &m, fmark);
    return ran;
}

static void test_fast_published(void)
{
    for (int round = 0; round < 20; round++) {
        chanos_task t;

        atomic_store(&marked_on, -1);
        chanos_task_set(&t, fpublish_root, 0);
        CHECK_EQ(chanos_tasks_run(rt, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), 1);
    }
}

/* A task that fast-spawns children and syncs them, spawning nothing more,
 * still answers the requests of idle workers: its syncs publish what is
 * left private. Eight leaves that each sleep 100 ms, synced newest first:
 * kept private, the spawning worker would run seven of them itself. A
 * leaf lasts long enough for the idle workers to wake and ask, even on a
 * loaded machine. */
enum { SPREAD_LEAVES = 8 };
static atomic_int leaf_on[SPREAD_LEAVES];

static int64_t fsleep_leaf(chanos_ctx *c, int64_t i)
{
    struct timespec ts = { 0, 100 * 1000 * 1000 };

    (void)c;
    atomic_store(&leaf_on[i], chanos_task_worker());
    nanosleep(&ts, NULL);
    return i;
}

static int64_t fspread_root(chanos_ctx *c, int64_t unused)
{
    chanos_task d[SPREAD_LEAVES];
    int64_t s = 0;

    (void)unused;
    for (int i = 0; i < SPREAD_LEAVES; i++)
        chanos_fspawn(c, &d[i], fsleep_leaf, i);
    for (int i = SPREAD_LEAVES - 1; i >= 0; i--)
        s += chanos_fsync(c, &d[i], fsleep_leaf);
    return s;
}

/* check_spread runs root, which spawns the eight sleeping leaves and
 * syncs them one by one, and checks that the workers shared them. */
static void check_spread(int64_t (*root)(chanos_ctx *, int64_t), int64_t arg)
{
    chanos_task t;
    int per[64] = { 0 };
    int most = 0;

    chanos_task_set(&t, root, arg);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), SPREAD_LEAVES * (SPREAD_LEAVES - 1) / 2);
    for (int i = 0; i < SPREAD_LEAVES; i++) {
        int w = atomic_load(&leaf_on[i]);

        CHECK(w >= 0 && w < 64);
        if (w >= 0 && w < 64 && ++per[w] > most)
            most = per[w];
    }
    /* Four workers share eight leaves, two each when the others wake at
     * once; one running six or more means its syncs kept them from the
     * others (seven), not that they woke late. */
    CHECK(most <= 5);
}

static void test_fast_sync_publishes(void)
{
    check_spread(fspread_root, 0);
}

/* Spawns below the record depth run at once: the child has run when
 * chanos_fspawn returns (the serial order); above it, the child waits in
 * the deque for its sync or a thief. One worker, so that no idle worker
 * asks for work and changes that. */
static atomic_int child_ran;

static int64_t fflag(chanos_ctx *c, int64_t x)
{
    (void)c;
    atomic_store(&child_ran, 1);
    return x;
}

static int64_t fran_at_once(chanos_ctx *c, int64_t x)
{
    chanos_task t;
    int64_t at_once;

    atomic_store(&child_ran, 0);
    chanos_fspawn(c, &t, fflag, x);
    at_once = atomic_load(&child_ran);
    if (chanos_fsync(c, &t, fflag) != x || !atomic_load(&child_ran))
        return -1;
    return at_once;
}

/* deep_then calls fn(c, arg) levels KiB deeper in the stack. */
static __attribute__((noinline)) int64_t deep_then(chanos_ctx *c, int64_t levels,
                                                   int64_t (*fn)(chanos_ctx *, int64_t),
                                                   int64_t arg)
{
    volatile char pad[1024];

    pad[0] = (char)levels;
    if (levels == 0)
        return fn(c, arg);
    return deep_then(c, levels - 1, fn, arg) + pad[0] - (char)levels;
}

/* fdeep_ran: fran_at_once, levels KiB deeper in the stack. */
static int64_t fdeep_ran(chanos_ctx *c, int64_t levels)
{
    return deep_then(c, levels, fran_at_once, 7);
}

static void test_fast_at_once(void)
{
    /* record_depth, then whether a spawn at the task's top and one 16
     * KiB below it run at once (-1: not checked, the top's depth being
     * the build's: the default 1 KiB may or may not cover it). SIZE_MAX
     * records every spawn: the way to keep children from running before
     * their spawn returns. */
    static const struct {
        size_t depth;
        int top, deep;
    } cases[] = {
        { 1, 1, 1 },
        { 0, -1, 1 },
        { 1 << 20, 0, 0 },
        { SIZE_MAX, 0, 0 },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct chanos_tasks_opts o = { 0 };
        chanos_tasks *one;
        chanos_task t;

        o.workers = 1;
        o.record_depth = cases[i].depth;
        CHECK_EQ(chanos_tasks_start(&one, &o), 0);
        chanos_task_set(&t, fran_at_once, 7);
        CHECK_EQ(chanos_tasks_run(one, &t), 0);
        if (cases[i].top >= 0)
            CHECK_EQ(chanos_result_i64(&t), cases[i].top);
        chanos_task_set(&t, fdeep_ran, 16);
        CHECK_EQ(chanos_tasks_run(one, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), cases[i].deep);
        /* Every type's spawn, run at once and recorded. */
        chanos_task_set(&t, fhalf, 100.0);
        CHECK_EQ(chanos_tasks_run(one, &t), 0);
        CHECK(chanos_result_f64(&t) == 100.0 / 128);
        chanos_task_set(&t, fan_root, FAN);
        CHECK_EQ(chanos_tasks_run(one, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), 0);
        chanos_task_set(&t, fib_fast, 20);
        CHECK_EQ(chanos_tasks_run(one, &t), 0);
        CHECK_EQ(chanos_result_i64(&t), fib_serial(20));
        chanos_tasks_stop(one);
    }
}

/* Spawns that would run at once still answer idle workers: the first
 * spawn after a request records its task and publishes. The sleeping
 * leaves of test_fast_sync_publishes, spawned 16 KiB deeper than the
 * record depth: if the spawns ignored requests, the worker that spawns
 * them would run them itself, one after the other. */
static int64_t fdeep(chanos_ctx *c, int64_t levels)
{
    return deep_then(c, levels, fspread_root, 0);
}

static void test_fast_deep_spreads(void)
{
    check_spread(fdeep, 16);
}

/* The general form never runs a child at once, however deep in the stack
 * its parent is (docs/tasks.md, the fast path's "Rules"): a child that
 * waits for a step its parent takes after the spawn gets it. Run at once,
 * the child would wait with its parent suspended under it, until its
 * deadline. */
static atomic_int parent_step;

static int64_t wait_parent(int64_t unused)
{
    int64_t deadline = now_s() + 3;

    (void)unused;
    while (atomic_load(&parent_step) == 0 && now_s() < deadline)
        chanos_task_yield();
    return atomic_load(&parent_step);
}

static __attribute__((noinline)) int64_t gdeep(int64_t levels)
{
    volatile char pad[1024];

    pad[0] = (char)levels;
    if (levels == 0) {
        chanos_task t;

        atomic_store(&parent_step, 0);
        chanos_spawn(&t, wait_parent, 0);
        atomic_store(&parent_step, 1);
        chanos_task_sync();
        return chanos_result_i64(&t);
    }
    return gdeep(levels - 1) + pad[0] - (char)levels;
}

static void test_general_never_at_once(void)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *one;
    chanos_task t;

    /* One worker: no idle worker's request makes the spawn record. */
    o.workers = 1;
    CHECK_EQ(chanos_tasks_start(&one, &o), 0);
    chanos_task_set(&t, gdeep, 16);
    CHECK_EQ(chanos_tasks_run(one, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), 1);
    chanos_tasks_stop(one);
}

static void *fast_root_thread(void *arg)
{
    int64_t n = (int64_t)(intptr_t)arg;
    chanos_task t;

    for (int i = 0; i < 20; i++) {
        chanos_task_set(&t, fib_fast, n);
        if (chanos_tasks_run(rt, &t) != 0 || chanos_result_i64(&t) != fib_serial(n))
            return (void *)1;
    }
    return NULL;
}

static void test_fast_roots(void)
{
    pthread_t th[4];

    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, fast_root_thread, (void *)(intptr_t)(14 + i)), 0);
    for (int i = 0; i < 4; i++) {
        void *r;

        pthread_join(th[i], &r);
        CHECK(r == NULL);
    }
}

static void test_fast_stress(void)
{
    chanos_task t;
    int64_t n = 24;
    const char *env = getenv("CHANOS_TASKS_STRESS_N");

    if (env != NULL)
        n = atoi(env);
    chanos_task_set(&t, stress_fast, n);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), (int64_t)1 << n);
}

int main(void)
{
    struct chanos_tasks_opts o = { 0 };

    /* More workers than this machine's CPUs on purpose: stealing, stolen
     * children and suspended syncs all happen. */
    o.workers = 4;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    CHECK_EQ(chanos_tasks_workers(rt), 4);
    test_fib();
    test_msort();
    test_nqueens();
    test_parallel_for();
    test_typed();
    test_implicit_sync();
    test_roots();
    test_published();
    test_stress();
    test_fast_fib();
    test_fast_msort();
    test_fast_types();
    test_fast_move();
    test_fast_mixed();
    test_fast_published();
    test_fast_sync_publishes();
    test_fast_deep_spreads();
    test_fast_roots();
    test_fast_stress();
    chanos_tasks_stop(rt);
    test_fast_at_once();
    test_general_never_at_once();
    /* A default runtime: as many workers as CPUs the process may use. */
    CHECK_EQ(chanos_tasks_start(&rt, NULL), 0);
    CHECK(chanos_tasks_workers(rt) >= 1);
    test_fib();
    test_fast_fib();
    chanos_tasks_stop(rt);
    return check_done("tasks_basic");
}
