/* workloads.h: fib, merge sort and N-Queens as tasks and serially, shared
 * by the tests and the benchmark. */
#ifndef CHANOS_TASKS_WORKLOADS_H
#define CHANOS_TASKS_WORKLOADS_H

#include <chanos_tasks.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* fib, without a cutoff: every call but the leaves spawns one half and
 * calls the other (Cilk's fib). */
static inline int64_t fib_task(int64_t n)
{
    chanos_task a, b;

    if (n < 2)
        return n;
    chanos_spawn(&a, fib_task, n - 1);
    chanos_call(&b, fib_task, n - 2);
    chanos_task_sync();
    return chanos_result_i64(&a) + chanos_result_i64(&b);
}

/* fib on the fast path (chanos_fspawn, chanos_fsync): the same tree,
 * spawn and sync inline. */
static inline int64_t fib_fast(chanos_ctx *c, int64_t n)
{
    chanos_task t;
    int64_t b;

    if (n < 2)
        return n;
    chanos_fspawn(c, &t, fib_fast, n - 1);
    b = fib_fast(c, n - 2);
    return chanos_fsync(c, &t, fib_fast) + b;
}

static inline int64_t fib_serial(int64_t n)
{
    return n < 2 ? n : fib_serial(n - 1) + fib_serial(n - 2);
}

/* Merge sort of a[lo, hi) with the scratch array tmp; below the cutoff the
 * halves are sorted serially. */
#define MSORT_CUTOFF 2048

static inline void merge(int32_t *a, int32_t *tmp, size_t lo, size_t mid, size_t hi)
{
    size_t i = lo, j = mid, k = lo;

    while (i < mid && j < hi)
        tmp[k++] = a[j] < a[i] ? a[j++] : a[i++];
    while (i < mid)
        tmp[k++] = a[i++];
    while (j < hi)
        tmp[k++] = a[j++];
    memcpy(a + lo, tmp + lo, (hi - lo) * sizeof(*a));
}

static inline void msort_serial(int32_t *a, int32_t *tmp, size_t lo, size_t hi)
{
    size_t mid;

    if (hi - lo < 2)
        return;
    if (hi - lo <= 16) {
        for (size_t i = lo + 1; i < hi; i++) {
            int32_t v = a[i];
            size_t j = i;

            while (j > lo && a[j - 1] > v) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    mid = lo + (hi - lo) / 2;
    msort_serial(a, tmp, lo, mid);
    msort_serial(a, tmp, mid, hi);
    merge(a, tmp, lo, mid, hi);
}

struct msort_arg {
    int32_t *a, *tmp;
    size_t lo, hi;
};

static inline void *msort_task(void *p)
{
    struct msort_arg *m = p;
    struct msort_arg l = *m, r = *m;
    chanos_task tl, tr;
    size_t mid;

    if (m->hi - m->lo <= MSORT_CUTOFF) {
        msort_serial(m->a, m->tmp, m->lo, m->hi);
        return NULL;
    }
    mid = m->lo + (m->hi - m->lo) / 2;
    l.hi = mid;
    r.lo = mid;
    chanos_spawn(&tl, msort_task, (void *)&l);
    chanos_call(&tr, msort_task, (void *)&r);
    chanos_task_sync();
    merge(m->a, m->tmp, m->lo, mid, m->hi);
    return NULL;
}

/* Merge sort on the fast path. */
static inline void *msort_fast(chanos_ctx *c, void *p)
{
    struct msort_arg *m = p;
    struct msort_arg l = *m, r = *m;
    chanos_task tl;
    size_t mid;

    if (m->hi - m->lo <= MSORT_CUTOFF) {
        msort_serial(m->a, m->tmp, m->lo, m->hi);
        return NULL;
    }
    mid = m->lo + (m->hi - m->lo) / 2;
    l.hi = mid;
    r.lo = mid;
    chanos_fspawn(c, &tl, msort_fast, (void *)&l);
    msort_fast(c, &r);
    chanos_fsync(c, &tl, msort_fast);
    merge(m->a, m->tmp, m->lo, mid, m->hi);
    return NULL;
}

/* N-Queens: the number of solutions, spawning one task per column of the
 * first rows. */
struct nq_arg {
    int n, row;
    uint32_t cols, d1, d2;
};

static inline int64_t nq_serial_(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2)
{
    uint32_t all = (1u << n) - 1, free_ = all & ~(cols | d1 | d2);
    int64_t count = 0;

    if (row == n)
        return 1;
    while (free_) {
        uint32_t bit = free_ & -free_;

        free_ ^= bit;
        count += nq_serial_(n, row + 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
    }
    return count;
}

static inline int64_t nqueens_serial(int n)
{
    return nq_serial_(n, 0, 0, 0, 0);
}

#define NQ_SPAWN_ROWS 4

static inline void *nq_task(void *p)
{
    struct nq_arg *q = p;
    uint32_t all = (1u << q->n) - 1, free_ = all & ~(q->cols | q->d1 | q->d2);
    struct nq_arg sub[32];
    chanos_task t[32];
    int k = 0;
    int64_t count = 0;

    if (q->row >= NQ_SPAWN_ROWS)
        return (void *)(intptr_t)nq_serial_(q->n, q->row, q->cols, q->d1, q->d2);
    if (q->row == q->n)
        return (void *)(intptr_t)1;
    while (free_) {
        uint32_t bit = free_ & -free_;

        free_ ^= bit;
        sub[k] = (struct nq_arg){ q->n, q->row + 1, q->cols | bit, (q->d1 | bit) << 1, (q->d2 | bit) >> 1 };
        chanos_spawn(&t[k], nq_task, (void *)&sub[k]);
        k++;
    }
    chanos_task_sync();
    for (int i = 0; i < k; i++)
        count += (int64_t)(intptr_t)chanos_result_ptr(&t[i]);
    return (void *)(intptr_t)count;
}

/* stress: 2^n leaf tasks, each level spawning two and syncing (seed 003's
 * stress test); returns the number of leaves. */
static inline int64_t stress_task(int64_t n)
{
    chanos_task a, b;

    if (n == 0)
        return 1;
    chanos_spawn(&a, stress_task, n - 1);
    chanos_spawn(&b, stress_task, n - 1);
    chanos_task_sync();
    return chanos_result_i64(&a) + chanos_result_i64(&b);
}

/* stress on the fast path: two spawns, synced in reverse order. */
static inline int64_t stress_fast(chanos_ctx *c, int64_t n)
{
    chanos_task a, b;
    int64_t x;

    if (n == 0)
        return 1;
    chanos_fspawn(c, &a, stress_fast, n - 1);
    chanos_fspawn(c, &b, stress_fast, n - 1);
    x = chanos_fsync(c, &b, stress_fast);
    return x + chanos_fsync(c, &a, stress_fast);
}

static inline uint32_t xorshift32(uint32_t *s)
{
    uint32_t x = *s;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

#endif
