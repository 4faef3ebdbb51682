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
int64_t omp_bench_nq_serial(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2);

#endif
