/* tbb_bench.h: the oneTBB baselines of tasks_bench (tbb_bench.cpp, built
 * where oneTBB is installed), the same algorithms as tests/workloads.h
 * with tbb::task_group. */
#ifndef CHANOS_TASKS_TBB_BENCH_H
#define CHANOS_TASKS_TBB_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int64_t tbb_fib(int64_t n, int threads);
void tbb_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads);
int64_t tbb_nqueens(int n, int spawn_rows, int threads);

#ifdef __cplusplus
}
#endif

#endif
