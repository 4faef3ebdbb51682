/* workloads.h: fib, merge sort and N-Queens as tasks and serially, shared
 * by the tests and the benchmark. */
#ifndef CHANOS_TASKS_WORKLOADS_H
#define CHANOS_TASKS_WORKLOADS_H

#include <chanos_tasks.h>

#include <stdbool.h>
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
 * spawn and sync inline. Aligned as chanos_tasks.h advises, and so is the
 * serial fib it is measured against. */
CHANOS_FAST_ALIGN static inline int64_t fib_fast(chanos_ctx *c, int64_t n)
{
    chanos_task t;
    int64_t b;

    if (n < 2)
        return n;
    chanos_fspawn(c, &t, fib_fast, n - 1);
    b = fib_fast(c, n - 2);
    return chanos_fsync(c, &t, fib_fast) + b;
}

CHANOS_FAST_ALIGN static inline int64_t fib_serial(int64_t n)
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

/* A merge of more elements than this is split between two tasks: the
 * parallel merge that keeps both workers busy in the top levels of the
 * sort, where there are fewer merges than workers (with one merge at the
 * top, 1 / log2(n / MSORT_CUTOFF) of the work would otherwise run alone). */
#define PMERGE_CUTOFF (1u << 16)

/* merge_runs merges the sorted runs a[i, iend) and a[j, jend) into
 * out[k, ...). */
static inline void merge_runs(const int32_t *a, size_t i, size_t iend, size_t j,
                              size_t jend, int32_t *out, size_t k)
{
    while (i < iend && j < jend)
        out[k++] = a[j] < a[i] ? a[j++] : a[i++];
    while (i < iend)
        out[k++] = a[i++];
    while (j < jend)
        out[k++] = a[j++];
}

/* A merge of a[lo1, hi1) and a[lo2, hi2) into out[k, ...). */
struct pmerge_arg {
    const int32_t *a;
    int32_t *out;
    size_t lo1, hi1, lo2, hi2, k;
};

/* merge_split cuts the merge m in two independent merges, l and r: the
 * middle element of the larger run goes where it belongs in out, and the
 * elements of the other run below it (found by binary search) go to l's
 * side with those of its own run below it. */
static inline void merge_split(const struct pmerge_arg *m, struct pmerge_arg *l,
                               struct pmerge_arg *r)
{
    struct pmerge_arg x = *m;

    if (x.hi1 - x.lo1 < x.hi2 - x.lo2) { /* the larger run first */
        size_t lo = x.lo1, hi = x.hi1;

        x.lo1 = x.lo2;
        x.hi1 = x.hi2;
        x.lo2 = lo;
        x.hi2 = hi;
    }
    size_t m1 = x.lo1 + (x.hi1 - x.lo1) / 2, lo = x.lo2, hi = x.hi2;
    int32_t v = x.a[m1];

    while (lo < hi) { /* the first of the other run not below v */
        size_t mid = lo + (hi - lo) / 2;

        if (x.a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t k2 = x.k + (m1 - x.lo1) + (lo - x.lo2);

    x.out[k2] = v;
    *l = x;
    l->hi1 = m1;
    l->hi2 = lo;
    *r = x;
    r->lo1 = m1 + 1;
    r->lo2 = lo;
    r->k = k2 + 1;
}

/* merge_step runs the merge m whole if it is of at most PMERGE_CUTOFF
 * elements (false), else splits it into l and r (true), for two tasks. */
static inline bool merge_step(const struct pmerge_arg *m, struct pmerge_arg *l,
                              struct pmerge_arg *r)
{
    if ((m->hi1 - m->lo1) + (m->hi2 - m->lo2) <= PMERGE_CUTOFF) {
        merge_runs(m->a, m->lo1, m->hi1, m->lo2, m->hi2, m->out, m->k);
        return false;
    }
    merge_split(m, l, r);
    return true;
}

/* pmerge_task runs the merge p, a struct pmerge_arg, split in tasks down
 * to PMERGE_CUTOFF elements; pmerge_fast is the same on the fast path. */
static inline void *pmerge_task(void *p)
{
    struct pmerge_arg l, r;
    chanos_task tl, tr;

    if (merge_step(p, &l, &r)) {
        chanos_spawn(&tl, pmerge_task, (void *)&l);
        chanos_call(&tr, pmerge_task, (void *)&r);
        chanos_task_sync();
    }
    return NULL;
}

static inline void *pmerge_fast(chanos_ctx *c, void *p)
{
    struct pmerge_arg l, r;
    chanos_task tl;

    if (merge_step(p, &l, &r)) {
        chanos_fspawn(c, &tl, pmerge_fast, (void *)&l);
        pmerge_fast(c, &r);
        chanos_fsync(c, &tl, pmerge_fast);
    }
    return NULL;
}

/* A copy of n elements from src to dst, split in tasks as the merge is. */
struct pcopy_arg {
    int32_t *dst;
    const int32_t *src;
    size_t n;
};

/* copy_step copies m whole if it is of at most PMERGE_CUTOFF elements
 * (false), else splits it into halves l and r (true). */
static inline bool copy_step(const struct pcopy_arg *m, struct pcopy_arg *l,
                             struct pcopy_arg *r)
{
    if (m->n <= PMERGE_CUTOFF) {
        memcpy(m->dst, m->src, m->n * sizeof(*m->dst));
        return false;
    }
    *l = *r = *m;
    l->n = m->n / 2;
    r->dst += l->n;
    r->src += l->n;
    r->n -= l->n;
    return true;
}

static inline void *pcopy_task(void *p)
{
    struct pcopy_arg l, r;
    chanos_task tl, tr;

    if (copy_step(p, &l, &r)) {
        chanos_spawn(&tl, pcopy_task, (void *)&l);
        chanos_call(&tr, pcopy_task, (void *)&r);
        chanos_task_sync();
    }
    return NULL;
}

static inline void *pcopy_fast(chanos_ctx *c, void *p)
{
    struct pcopy_arg l, r;
    chanos_task tl;

    if (copy_step(p, &l, &r)) {
        chanos_fspawn(c, &tl, pcopy_fast, (void *)&l);
        pcopy_fast(c, &r);
        chanos_fsync(c, &tl, pcopy_fast);
    }
    return NULL;
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
    if (m->hi - m->lo <= PMERGE_CUTOFF) {
        merge(m->a, m->tmp, m->lo, mid, m->hi);
        return NULL;
    }
    struct pmerge_arg pm = { m->a, m->tmp, m->lo, mid, mid, m->hi, m->lo };
    struct pcopy_arg pc = { m->a + m->lo, m->tmp + m->lo, m->hi - m->lo };

    chanos_call(&tl, pmerge_task, (void *)&pm);
    chanos_call(&tl, pcopy_task, (void *)&pc);
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
    if (m->hi - m->lo <= PMERGE_CUTOFF) {
        merge(m->a, m->tmp, m->lo, mid, m->hi);
        return NULL;
    }
    struct pmerge_arg pm = { m->a, m->tmp, m->lo, mid, mid, m->hi, m->lo };
    struct pcopy_arg pc = { m->a + m->lo, m->tmp + m->lo, m->hi - m->lo };

    pmerge_fast(c, &pm);
    pcopy_fast(c, &pc);
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
