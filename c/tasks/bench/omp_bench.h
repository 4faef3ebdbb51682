/* omp_bench.h: the OpenMP baselines of tasks_bench (omp_bench.c), and the
 * serial pieces they share with it (tasks_bench.c). */
#ifndef CHANOS_TASKS_OMP_BENCH_H
#define CHANOS_TASKS_OMP_BENCH_H

#include <stddef.h>
#include <stdint.h>

int64_t omp_fib(int64_t n, int threads);
void omp_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads);
int64_t omp_nqueens(int n, int spawn_rows, int threads);

void omp_bench_msort_serial(int32_t *a, int32_t *tmp, size_t lo, size_t hi);
void omp_bench_merge(int32_t *a, int32_t *tmp, size_t lo, size_t mid, size_t hi);

/* The parallel merge of tests/workloads.h, for the baselines. A merge is
 * m = { lo1, hi1, lo2, hi2, k }: a[lo1, hi1) and a[lo2, hi2) into
 * out[k, ...). One of at most omp_bench_pmerge_cutoff() elements runs
 * whole (omp_bench_merge_runs); a larger one is split in two
 * (omp_bench_merge_split), which run as two tasks. The copy back into a
 * is split the same way. */
size_t omp_bench_pmerge_cutoff(void);
void omp_bench_merge_runs(const int32_t *a, int32_t *out, const size_t m[5]);
void omp_bench_merge_split(const int32_t *a, int32_t *out, const size_t m[5],
                           size_t l[5], size_t r[5]);
int64_t omp_bench_nq_serial(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2);

#endif
