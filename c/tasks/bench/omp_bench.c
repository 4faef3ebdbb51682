/* omp_bench.c: the OpenMP-tasks baselines of tasks_bench, the same
 * algorithms as tests/workloads.h (built with -fopenmp). */
#include "omp_bench.h"

#include <omp.h>
#include <string.h>

static int64_t fib_omp(int64_t n)
{
    int64_t x, y;

    if (n < 2)
        return n;
#pragma omp task shared(x)
    x = fib_omp(n - 1);
    y = fib_omp(n - 2);
#pragma omp taskwait
    return x + y;
}

int64_t omp_fib(int64_t n, int threads)
{
    int64_t r = 0;

    omp_set_num_threads(threads);
#pragma omp parallel
#pragma omp single
    r = fib_omp(n);
    return r;
}

static void pmerge_omp(const int32_t *a, int32_t *out, const size_t m[5])
{
    size_t l[5], r[5];

    if ((m[1] - m[0]) + (m[3] - m[2]) <= omp_bench_pmerge_cutoff()) {
        omp_bench_merge_runs(a, out, m);
        return;
    }
    omp_bench_merge_split(a, out, m, l, r);
#pragma omp task
    pmerge_omp(a, out, l);
    pmerge_omp(a, out, r);
#pragma omp taskwait
}

static void pcopy_omp(int32_t *dst, const int32_t *src, size_t n)
{
    if (n <= omp_bench_pmerge_cutoff()) {
        memcpy(dst, src, n * sizeof(*dst));
        return;
    }
#pragma omp task
    pcopy_omp(dst, src, n / 2);
    pcopy_omp(dst + n / 2, src + n / 2, n - n / 2);
#pragma omp taskwait
}

static void msort_omp(int32_t *a, int32_t *tmp, size_t lo, size_t hi, size_t cutoff)
{
    size_t mid;

    if (hi - lo <= cutoff) {
        omp_bench_msort_serial(a, tmp, lo, hi);
        return;
    }
    mid = lo + (hi - lo) / 2;
#pragma omp task
    msort_omp(a, tmp, lo, mid, cutoff);
    msort_omp(a, tmp, mid, hi, cutoff);
#pragma omp taskwait
    if (hi - lo <= omp_bench_pmerge_cutoff()) {
        omp_bench_merge(a, tmp, lo, mid, hi);
        return;
    }
    size_t m[5] = { lo, mid, mid, hi, lo };

    pmerge_omp(a, tmp, m);
    pcopy_omp(a + lo, tmp + lo, hi - lo);
}

void omp_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads)
{
    omp_set_num_threads(threads);
#pragma omp parallel
#pragma omp single
    msort_omp(a, tmp, 0, n, cutoff);
}

static int64_t nq_omp(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2, int spawn_rows)
{
    uint32_t all = (1u << n) - 1, free_ = all & ~(cols | d1 | d2);
    int64_t counts[32];
    int k = 0;
    int64_t total = 0;

    if (row >= spawn_rows)
        return omp_bench_nq_serial(n, row, cols, d1, d2);
    while (free_) {
        uint32_t bit = free_ & -free_;
        int i = k++;

        free_ ^= bit;
#pragma omp task shared(counts) firstprivate(i, bit)
        counts[i] = nq_omp(n, row + 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1, spawn_rows);
    }
#pragma omp taskwait
    for (int i = 0; i < k; i++)
        total += counts[i];
    return total;
}

int64_t omp_nqueens(int n, int spawn_rows, int threads)
{
    int64_t r = 0;

    omp_set_num_threads(threads);
#pragma omp parallel
#pragma omp single
    r = nq_omp(n, 0, 0, 0, 0, spawn_rows);
    return r;
}
