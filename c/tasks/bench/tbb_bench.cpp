// tbb_bench.cpp: the oneTBB baselines of tasks_bench: fib, merge sort and
// N-Queens with tbb::task_group, each arena limited to the workers asked
// for (tbb::task_arena), the serial pieces shared with the C runtime's
// (omp_bench.h).
#include "tbb_bench.h"

extern "C" {
#include "omp_bench.h"
}

#include <cstring>

#include <tbb/task_arena.h>
#include <tbb/task_group.h>

namespace {

int64_t fib(int64_t n)
{
    if (n < 2)
        return n;
    int64_t x = 0, y;
    tbb::task_group g;
    g.run([&] { x = fib(n - 1); });
    y = fib(n - 2);
    g.wait();
    return x + y;
}

void pmerge(const int32_t *a, int32_t *out, const size_t m[5])
{
    if ((m[1] - m[0]) + (m[3] - m[2]) <= omp_bench_pmerge_cutoff()) {
        omp_bench_merge_runs(a, out, m);
        return;
    }
    size_t l[5], r[5];
    omp_bench_merge_split(a, out, m, l, r);
    tbb::task_group g;
    g.run([&] { pmerge(a, out, l); });
    pmerge(a, out, r);
    g.wait();
}

void pcopy(int32_t *dst, const int32_t *src, size_t n)
{
    if (n <= omp_bench_pmerge_cutoff()) {
        memcpy(dst, src, n * sizeof(*dst));
        return;
    }
    tbb::task_group g;
    g.run([&] { pcopy(dst, src, n / 2); });
    pcopy(dst + n / 2, src + n / 2, n - n / 2);
    g.wait();
}

void msort(int32_t *a, int32_t *tmp, size_t lo, size_t hi, size_t cutoff)
{
    if (hi - lo <= cutoff) {
        omp_bench_msort_serial(a, tmp, lo, hi);
        return;
    }
    size_t mid = lo + (hi - lo) / 2;
    tbb::task_group g;
    g.run([&] { msort(a, tmp, lo, mid, cutoff); });
    msort(a, tmp, mid, hi, cutoff);
    g.wait();
    if (hi - lo <= omp_bench_pmerge_cutoff()) {
        omp_bench_merge(a, tmp, lo, mid, hi);
        return;
    }
    size_t m[5] = {lo, mid, mid, hi, lo};
    pmerge(a, tmp, m);
    pcopy(a + lo, tmp + lo, hi - lo);
}

int64_t nq(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2, int spawn_rows)
{
    if (row >= spawn_rows)
        return omp_bench_nq_serial(n, row, cols, d1, d2);
    if (row == n)
        return 1;
    uint32_t all = (1u << n) - 1, free_ = all & ~(cols | d1 | d2);
    int64_t counts[32] = {};
    int k = 0;
    tbb::task_group g;
    while (free_) {
        uint32_t bit = free_ & -free_;
        free_ ^= bit;
        int64_t *slot = &counts[k++];
        g.run([=] { *slot = nq(n, row + 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1, spawn_rows); });
    }
    g.wait();
    int64_t sum = 0;
    for (int i = 0; i < k; i++)
        sum += counts[i];
    return sum;
}

} // namespace

extern "C" int64_t tbb_fib(int64_t n, int threads)
{
    tbb::task_arena arena(threads);
    int64_t r = 0;
    arena.execute([&] { r = fib(n); });
    return r;
}

extern "C" void tbb_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads)
{
    tbb::task_arena arena(threads);
    arena.execute([&] { msort(a, tmp, 0, n, cutoff); });
}

extern "C" int64_t tbb_nqueens(int n, int spawn_rows, int threads)
{
    tbb::task_arena arena(threads);
    int64_t r = 0;
    arena.execute([&] { r = nq(n, 0, 0, 0, 0, spawn_rows); });
    return r;
}
