/*
 * tasks_bench: the figures of the task runtime, one JSON object per line in
 * the bench contract (suite=tasks; case fib, mergesort, nqueens, msg-rtt,
 * remove-worker; runtime chanos, chanos-general (fib: the general form
 * beside the fast path), chanos-one-rt, serial, serial-copies (fib: one
 * and two copies of serial fib at once), openmp, tbb or ump-raw; workers;
 * time_s, or rtt_ns_p50 and rtt_ns_p99 for msg-rtt). Times are medians of
 * --reps runs (fib's C rows: of three times as many rounds, fib_rounds).
 * Baselines run in the same process run.
 *
 *   tasks_bench [--case all|fib|mergesort|nqueens|msg-rtt|remove-worker]
 *               [--workers 1,2] [--reps 5] [--fib 35] [--msort 100000000]
 *               [--nqueens 12] [--rtt-iters 20000] [--no-openmp] [--no-tbb]
 *               [--no-pin]
 */
#include "../tests/workloads.h"
#include "omp_bench.h"
#include "tbb_bench.h"

#include <chanos_tasks.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TASKS_BENCH_OPENMP
#define TASKS_BENCH_OPENMP 0
#endif
#ifndef TASKS_BENCH_TBB
#define TASKS_BENCH_TBB 0
#endif

static int reps = 5;
static int64_t fib_n = 35;
static size_t msort_n = 100000000;
static int nq_n = 12;
static int rtt_iters = 20000;
static int use_omp = TASKS_BENCH_OPENMP;
static int use_tbb = TASKS_BENCH_TBB;
static int no_pin;
static unsigned workers_list[16] = { 1, 2 };
static int nworkers_list = 2;

void omp_bench_msort_serial(int32_t *a, int32_t *tmp, size_t lo, size_t hi)
{
    msort_serial(a, tmp, lo, hi);
}

void omp_bench_merge(int32_t *a, int32_t *tmp, size_t lo, size_t mid, size_t hi)
{
    merge(a, tmp, lo, mid, hi);
}

size_t omp_bench_pmerge_cutoff(void) { return PMERGE_CUTOFF; }

void omp_bench_merge_runs(const int32_t *a, int32_t *out, const size_t m[5])
{
    merge_runs(a, m[0], m[1], m[2], m[3], out, m[4]);
}

void omp_bench_merge_split(const int32_t *a, int32_t *out, const size_t m[5],
                           size_t l[5], size_t r[5])
{
    struct pmerge_arg pm = { a, out, m[0], m[1], m[2], m[3], m[4] }, pl, pr;

    merge_split(&pm, &pl, &pr);
    l[0] = pl.lo1, l[1] = pl.hi1, l[2] = pl.lo2, l[3] = pl.hi2, l[4] = pl.k;
    r[0] = pr.lo1, r[1] = pr.hi1, r[2] = pr.lo2, r[3] = pr.hi2, r[4] = pr.k;
}

int64_t omp_bench_nq_serial(int n, int row, uint32_t cols, uint32_t d1, uint32_t d2)
{
    return nq_serial_(n, row, cols, d1, d2);
}

#if !TASKS_BENCH_TBB
int64_t tbb_fib(int64_t n, int threads)
{
    (void)n;
    (void)threads;
    return -1;
}

void tbb_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads)
{
    (void)a;
    (void)tmp;
    (void)n;
    (void)cutoff;
    (void)threads;
}

int64_t tbb_nqueens(int n, int spawn_rows, int threads)
{
    (void)n;
    (void)spawn_rows;
    (void)threads;
    return -1;
}
#endif

#if !TASKS_BENCH_OPENMP
int64_t omp_fib(int64_t n, int threads)
{
    (void)n;
    (void)threads;
    return -1;
}
void omp_msort(int32_t *a, int32_t *tmp, size_t n, size_t cutoff, int threads)
{
    (void)a, (void)tmp, (void)n, (void)cutoff, (void)threads;
}
int64_t omp_nqueens(int n, int spawn_rows, int threads)
{
    (void)n, (void)spawn_rows, (void)threads;
    return -1;
}
#endif

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* emit_n prints a row whose time is the median of n runs. */
static void emit_n(const char *c, const char *runtime, unsigned workers, double t,
                   int n, const char *extra)
{
    printf("{\"suite\":\"tasks\",\"case\":\"%s\",\"runtime\":\"%s\",\"workers\":%u,"
           "\"time_s\":%.9g,\"reps\":%d%s}\n",
           c, runtime, workers, t, n, extra);
    fflush(stdout);
}

static void emit(const char *c, const char *runtime, unsigned workers, double t,
                 const char *extra)
{
    emit_n(c, runtime, workers, t, reps, extra);
}

/* emit_rounds is emit of the median of the n times in v, with each time
 * in the order the rounds ran (run_figures), so that rows timed in the
 * same rounds can be paired round by round. */
static void emit_rounds(const char *c, const char *runtime, unsigned workers, const double *v,
                        int n, const char *extra)
{
    double sorted[64];
    char runs[64 * 24 + 32];
    size_t len;

    memcpy(sorted, v, (size_t)n * sizeof(*v));
    len = (size_t)snprintf(runs, sizeof(runs), "%s,\"run_figures\":[", extra);
    for (int i = 0; i < n && len < sizeof(runs); i++)
        len += (size_t)snprintf(runs + len, sizeof(runs) - len, "%s%.9g", i ? "," : "", v[i]);
    if (len < sizeof(runs))
        snprintf(runs + len, sizeof(runs) - len, "]");
    emit_n(c, runtime, workers, median(sorted, n), n, runs);
}

/* fib_rounds: how many rounds fib's C rows are timed in, three times
 * --reps (at most 64). A round of them takes about half a second, and the
 * host's load here comes in spells that slow a thread to half its speed
 * for a round or two (the serial fib's rounds give 0.013 or 0.025 s):
 * with five rounds, a median could fall in such a spell. */
static int fib_rounds(void)
{
    return reps > 21 ? 64 : 3 * reps;
}

static chanos_tasks *start(unsigned workers)
{
    struct chanos_tasks_opts o = { 0 };
    chanos_tasks *rt;

    o.workers = workers;
    o.no_pin = no_pin != 0;
    if (chanos_tasks_start(&rt, &o) != 0) {
        fprintf(stderr, "tasks_bench: chanos_tasks_start failed\n");
        exit(1);
    }
    return rt;
}

/* ---- fib ---- */

/* fib_root_time runs fib(fib_n) as a root on rt, through the fast path
 * (general 0: fib_fast) or the general form (general 1: fib_task), and
 * returns its wall time; a wrong result ends the bench. */
static double fib_root_time(chanos_tasks *rt, int general, int64_t want)
{
    chanos_task task;
    double t0 = now_s();

    if (general)
        chanos_task_set(&task, fib_task, fib_n);
    else
        chanos_task_set(&task, fib_fast, fib_n);
    chanos_tasks_run(rt, &task);
    if (chanos_result_i64(&task) != want) {
        fprintf(stderr, "tasks_bench: fib wrong\n");
        exit(1);
    }
    return now_s() - t0;
}

/* A copy of serial fib on a thread of its own, pinned to cpu unless
 * cpu < 0. */
struct fib_copy {
    pthread_t th;
    int cpu;
    int64_t result;
};

static void *fib_copy_run(void *arg)
{
    struct fib_copy *c = arg;

    if (c->cpu >= 0) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(c->cpu, &set);
        (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    c->result = fib_serial(fib_n);
    return NULL;
}

/* fib_copies_time runs n copies of serial fib at once, each on a thread
 * pinned to a CPU of its own (unless --no-pin), and returns the time
 * until the last ends, the threads' start, move and join included (85 to
 * 160 us for two here, about 1 % of fib(35)): runtime=serial-copies. Two
 * copies against one measure what this machine gives two threads that
 * share nothing (on a virtual machine, less than twice one when the host
 * is busy), the bound of any speed-up of the same work at that moment. */
static double fib_copies_time(int n, int64_t want)
{
    struct fib_copy c[2];
    int cpus[2] = { -1, -1 };
    cpu_set_t mine;
    double t0;

    if (!no_pin && sched_getaffinity(0, sizeof(mine), &mine) == 0) {
        for (int cpu = 0, k = 0; cpu < CPU_SETSIZE && k < 2; cpu++)
            if (CPU_ISSET(cpu, &mine))
                cpus[k++] = cpu;
    }
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        c[i].cpu = cpus[i];
        if (pthread_create(&c[i].th, NULL, fib_copy_run, &c[i]) != 0) {
            fprintf(stderr, "tasks_bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(c[i].th, NULL);
    t0 = now_s() - t0;
    for (int i = 0; i < n; i++)
        if (c[i].result != want) {
            fprintf(stderr, "tasks_bench: fib wrong\n");
            exit(1);
        }
    return t0;
}

/* bench_fib_one_runtime times the fast path's fib on one and on two
 * workers of the same runtime, alternately (chanos_tasks_set_workers):
 * runtime=chanos-one-rt. Where a stack's context and a worker's deque lie
 * in memory moves a fib node's cost a little (docs/tasks.md, "The fast
 * path", Code alignment), and each runtime has its own; one runtime for
 * both keeps that out of their ratio. Only when the worker list has 1
 * and 2. */
static void bench_fib_one_runtime(int64_t want, const char *extra)
{
    double t1[64], t2[64];
    int have1 = 0, have2 = 0, rounds = fib_rounds();
    chanos_tasks *rt;

    for (int k = 0; k < nworkers_list; k++) {
        have1 |= workers_list[k] == 1;
        have2 |= workers_list[k] == 2;
    }
    if (!have1 || !have2)
        return;
    rt = start(2);
    for (int r = 0; r < rounds; r++) {
        for (unsigned n = 1; n <= 2; n++) {
            if (chanos_tasks_set_workers(rt, n) != 0) {
                fprintf(stderr, "tasks_bench: set_workers failed\n");
                exit(1);
            }
            chanos_tasks_wait_removed(rt);
            (n == 1 ? t1 : t2)[r] = fib_root_time(rt, 0, want);
        }
    }
    chanos_tasks_stop(rt);
    emit_rounds("fib", "chanos-one-rt", 1, t1, rounds, extra);
    emit_rounds("fib", "chanos-one-rt", 2, t2, rounds, extra);
}

static void bench_fib(void)
{
    double t[64], ts[64], c1[64], c2[64], tf[16][64], tg[16][64];
    chanos_tasks *rts[16];
    int64_t want = fib_serial(fib_n);
    int rounds = fib_rounds();
    char extra[64];

    snprintf(extra, sizeof(extra), ",\"n\":%lld", (long long)fib_n);
    for (int k = 0; k < nworkers_list; k++)
        rts[k] = start(workers_list[k]);
    /* In rounds: the serial fib; one and two copies of it at once
     * (fib_copies_time: the machine's speed-up for two threads in this
     * round); the fast path (runtime=chanos: chanos_fspawn, chanos_fsync)
     * on each runtime; the general form (runtime=chanos-general:
     * chanos_spawn, chanos_call, chanos_task_sync), same tree, on each.
     * So every row meets the same spells of the host's load, and the
     * ratios can be taken round by round (run_figures). */
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        volatile int64_t v = fib_serial(fib_n);

        ts[r] = now_s() - t0;
        (void)v;
        c1[r] = fib_copies_time(1, want);
        c2[r] = fib_copies_time(2, want);
        for (int k = 0; k < nworkers_list; k++)
            tf[k][r] = fib_root_time(rts[k], 0, want);
        for (int k = 0; k < nworkers_list; k++)
            tg[k][r] = fib_root_time(rts[k], 1, want);
    }
    emit_rounds("fib", "serial", 1, ts, rounds, extra);
    emit_rounds("fib", "serial-copies", 1, c1, rounds, extra);
    emit_rounds("fib", "serial-copies", 2, c2, rounds, extra);
    for (int k = 0; k < nworkers_list; k++) {
        chanos_tasks_stop(rts[k]);
        emit_rounds("fib", "chanos", workers_list[k], tf[k], rounds, extra);
        emit_rounds("fib", "chanos-general", workers_list[k], tg[k], rounds, extra);
    }
    for (int k = 0; k < nworkers_list; k++) {
        unsigned w = workers_list[k];

        if (use_omp) {
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                int64_t v = omp_fib(fib_n, (int)w);

                t[r] = now_s() - t0;
                if (v != want) {
                    fprintf(stderr, "tasks_bench: omp fib wrong\n");
                    exit(1);
                }
            }
            emit("fib", "openmp", w, median(t, reps), extra);
        }
        if (use_tbb) {
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                int64_t v = tbb_fib(fib_n, (int)w);

                t[r] = now_s() - t0;
                if (v != want) {
                    fprintf(stderr, "tasks_bench: tbb fib wrong\n");
                    exit(1);
                }
            }
            emit("fib", "tbb", w, median(t, reps), extra);
        }
    }
    bench_fib_one_runtime(want, extra);
}

/* ---- merge sort ---- */

static int32_t *msort_input(void)
{
    int32_t *a = malloc(msort_n * sizeof(*a));
    uint32_t s = 2024;

    if (a == NULL)
        exit(1);
    for (size_t i = 0; i < msort_n; i++)
        a[i] = (int32_t)xorshift32(&s);
    return a;
}

static void msort_check(const int32_t *a)
{
    for (size_t i = 1; i < msort_n; i++)
        if (a[i - 1] > a[i]) {
            fprintf(stderr, "tasks_bench: not sorted\n");
            exit(1);
        }
}

static void bench_msort(void)
{
    int32_t *in = msort_input();
    int32_t *a = malloc(msort_n * sizeof(*a)), *tmp = malloc(msort_n * sizeof(*tmp));
    double t[64];
    char extra[64];

    if (a == NULL || tmp == NULL)
        exit(1);
    snprintf(extra, sizeof(extra), ",\"n\":%zu", msort_n);
    for (int r = 0; r < reps; r++) {
        double t0;

        memcpy(a, in, msort_n * sizeof(*a));
        t0 = now_s();
        msort_serial(a, tmp, 0, msort_n);
        t[r] = now_s() - t0;
        msort_check(a);
    }
    emit("mergesort", "serial", 1, median(t, reps), extra);
    for (int k = 0; k < nworkers_list; k++) {
        unsigned w = workers_list[k];
        chanos_tasks *rt = start(w);

        for (int r = 0; r < reps; r++) {
            struct msort_arg m = { a, tmp, 0, msort_n };
            chanos_task task;
            double t0;

            memcpy(a, in, msort_n * sizeof(*a));
            t0 = now_s();
            chanos_task_set(&task, msort_task, (void *)&m);
            chanos_tasks_run(rt, &task);
            t[r] = now_s() - t0;
            msort_check(a);
        }
        chanos_tasks_stop(rt);
        emit("mergesort", "chanos", w, median(t, reps), extra);
        if (use_omp) {
            for (int r = 0; r < reps; r++) {
                double t0;

                memcpy(a, in, msort_n * sizeof(*a));
                t0 = now_s();
                omp_msort(a, tmp, msort_n, MSORT_CUTOFF, (int)w);
                t[r] = now_s() - t0;
                msort_check(a);
            }
            emit("mergesort", "openmp", w, median(t, reps), extra);
        }
        if (use_tbb) {
            for (int r = 0; r < reps; r++) {
                double t0;

                memcpy(a, in, msort_n * sizeof(*a));
                t0 = now_s();
                tbb_msort(a, tmp, msort_n, MSORT_CUTOFF, (int)w);
                t[r] = now_s() - t0;
                msort_check(a);
            }
            emit("mergesort", "tbb", w, median(t, reps), extra);
        }
    }
    free(in);
    free(a);
    free(tmp);
}

/* ---- N-Queens ---- */

static void bench_nqueens(void)
{
    int64_t want = nqueens_serial(nq_n);
    double t[64];
    char extra[64];

    snprintf(extra, sizeof(extra), ",\"n\":%d", nq_n);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        volatile int64_t v = nqueens_serial(nq_n);

        t[r] = now_s() - t0;
        (void)v;
    }
    emit("nqueens", "serial", 1, median(t, reps), extra);
    for (int k = 0; k < nworkers_list; k++) {
        unsigned w = workers_list[k];
        chanos_tasks *rt = start(w);

        for (int r = 0; r < reps; r++) {
            struct nq_arg q = { nq_n, 0, 0, 0, 0 };
            chanos_task task;
            double t0 = now_s();

            chanos_task_set(&task, nq_task, (void *)&q);
            chanos_tasks_run(rt, &task);
            t[r] = now_s() - t0;
            if ((int64_t)(intptr_t)chanos_result_ptr(&task) != want) {
                fprintf(stderr, "tasks_bench: nqueens wrong\n");
                exit(1);
            }
        }
        chanos_tasks_stop(rt);
        emit("nqueens", "chanos", w, median(t, reps), extra);
        if (use_omp) {
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                int64_t v = omp_nqueens(nq_n, NQ_SPAWN_ROWS, (int)w);

                t[r] = now_s() - t0;
                if (v != want) {
                    fprintf(stderr, "tasks_bench: omp nqueens wrong\n");
                    exit(1);
                }
            }
            emit("nqueens", "openmp", w, median(t, reps), extra);
        }
        if (use_tbb) {
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                int64_t v = tbb_nqueens(nq_n, NQ_SPAWN_ROWS, (int)w);

                t[r] = now_s() - t0;
                if (v != want) {
                    fprintf(stderr, "tasks_bench: tbb nqueens wrong\n");
                    exit(1);
                }
            }
            emit("nqueens", "tbb", w, median(t, reps), extra);
        }
    }
}

/* ---- msg-rtt: a round trip between two processes over ump, through the
 * runtime (a task at each end), against the plain C ring in the same run
 * (ump-raw: chanos_ump_send and chanos_ump_recv on the threads). ---- */

static chanos_ump *rtt_conn;
static double *rtt_samples;

static int64_t echo_task(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const void *p;
        size_t len;
        uint64_t v;

        if (chanos_task_ump_recv(rtt_conn, &p, &len, -1) != 0)
            return -1;
        memcpy(&v, p, sizeof(v));
        if (chanos_task_ump_send(rtt_conn, &v, sizeof(v), -1) != 0)
            return -1;
    }
    return n;
}

static int64_t ping_task(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const void *p;
        size_t len;
        uint64_t v = (uint64_t)i;
        double t0 = now_s();

        if (chanos_task_ump_send(rtt_conn, &v, sizeof(v), -1) != 0 ||
            chanos_task_ump_recv(rtt_conn, &p, &len, -1) != 0)
            return -1;
        rtt_samples[i] = now_s() - t0;
    }
    return n;
}

static int raw_echo(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const void *p;
        size_t len;
        uint64_t v;

        if (chanos_ump_recv(rtt_conn, &p, &len, -1) != 0)
            return -1;
        memcpy(&v, p, sizeof(v));
        if (chanos_ump_send(rtt_conn, &v, sizeof(v), -1) != 0)
            return -1;
    }
    return 0;
}

static void rtt_emit(const char *runtime, int n)
{
    char extra[160];
    double p50, p99;

    qsort(rtt_samples, (size_t)n, sizeof(double), cmp_d);
    p50 = rtt_samples[n / 2];
    p99 = rtt_samples[(int)((double)n * 0.99)];
    snprintf(extra, sizeof(extra), ",\"iters\":%d,\"rtt_ns_p50\":%.0f,\"rtt_ns_p99\":%.0f",
             n, p50 * 1e9, p99 * 1e9);
    emit("msg-rtt", runtime, 1, p50, extra);
}

static void bench_rtt(void)
{
    for (int mode = 0; mode < 2; mode++) { /* 0: ump-raw, 1: chanos */
        int sv[2];
        pid_t pid;
        int status;

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            exit(1);
        pid = fork();
        if (pid < 0)
            exit(1);
        if (pid == 0) {
            int rc = 0;

            close(sv[0]);
            alarm(300);
            if (chanos_ump_attach(sv[1], NULL, 10000, &rtt_conn) != 0)
                _exit(2);
            if (mode == 0) {
                rc = raw_echo(rtt_iters);
            } else {
                chanos_tasks *rt = start(1);
                chanos_task task;

                chanos_task_set(&task, echo_task, (int64_t)rtt_iters);
                chanos_tasks_run(rt, &task);
                rc = chanos_result_i64(&task) == rtt_iters ? 0 : 1;
                chanos_tasks_stop(rt);
            }
            chanos_ump_close(rtt_conn);
            _exit(rc);
        }
        close(sv[1]);
        if (chanos_ump_create(sv[0], NULL, 10000, &rtt_conn) != 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            exit(1);
        }
        rtt_samples = calloc((size_t)rtt_iters, sizeof(double));
        if (mode == 0) {
            for (int i = 0; i < rtt_iters; i++) {
                const void *p;
                size_t len;
                uint64_t v = (uint64_t)i;
                double t0 = now_s();

                if (chanos_ump_send(rtt_conn, &v, sizeof(v), -1) != 0 ||
                    chanos_ump_recv(rtt_conn, &p, &len, -1) != 0)
                    exit(1);
                rtt_samples[i] = now_s() - t0;
            }
            rtt_emit("ump-raw", rtt_iters);
        } else {
            chanos_tasks *rt = start(1);
            chanos_task task;

            chanos_task_set(&task, ping_task, (int64_t)rtt_iters);
            chanos_tasks_run(rt, &task);
            chanos_tasks_stop(rt);
            if (chanos_result_i64(&task) != rtt_iters)
                exit(1);
            rtt_emit("chanos", rtt_iters);
        }
        free(rtt_samples);
        waitpid(pid, &status, 0);
        chanos_ump_close(rtt_conn);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "tasks_bench: msg-rtt peer failed\n");
            exit(1);
        }
    }
}

/* ---- remove-worker: while fib runs on 2 workers, remove one; the time
 * from the request until the worker has left (its thread exited), its
 * deque and stack handed to the shared queues, for the other to take.
 * set_workers itself returns at once. ---- */

struct fib_run {
    chanos_tasks *rt;
    chanos_task t;
};

static void *fib_thread(void *arg)
{
    struct fib_run *f = arg;

    chanos_tasks_run(f->rt, &f->t);
    return NULL;
}

static void bench_remove(void)
{
    double t[64];
    char extra[64];
    int64_t n = fib_n > 30 ? 30 : fib_n;
    int64_t want = fib_serial(n);

    snprintf(extra, sizeof(extra), ",\"n\":%lld", (long long)n);
    for (int r = 0; r < reps; r++) {
        struct fib_run f;
        pthread_t th;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        double t0;

        f.rt = start(2);
        chanos_task_set(&f.t, fib_task, n);
        pthread_create(&th, NULL, fib_thread, &f);
        nanosleep(&ts, NULL);
        t0 = now_s();
        chanos_tasks_set_workers(f.rt, 1);
        chanos_tasks_wait_removed(f.rt);
        t[r] = now_s() - t0;
        pthread_join(th, NULL);
        chanos_tasks_stop(f.rt);
        if (chanos_result_i64(&f.t) != want) {
            fprintf(stderr, "tasks_bench: remove-worker lost work\n");
            exit(1);
        }
    }
    emit("remove-worker", "chanos", 2, median(t, reps), extra);
}

static void parse_workers(const char *s)
{
    nworkers_list = 0;
    while (*s && nworkers_list < 16) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);

        if (end == s || v == 0)
            break;
        workers_list[nworkers_list++] = (unsigned)v;
        s = *end == ',' ? end + 1 : end;
    }
}

int main(int argc, char **argv)
{
    const char *which = "all";

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--no-openmp") == 0) {
            use_omp = 0;
            continue;
        }
        if (strcmp(a, "--no-tbb") == 0) {
            use_tbb = 0;
            continue;
        }
        if (strcmp(a, "--no-pin") == 0) {
            no_pin = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "tasks_bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--case") == 0)
            which = v;
        else if (strcmp(a, "--workers") == 0)
            parse_workers(v);
        else if (strcmp(a, "--reps") == 0)
            reps = atoi(v) < 1 ? 1 : atoi(v) > 64 ? 64 : atoi(v);
        else if (strcmp(a, "--fib") == 0)
            fib_n = atoll(v);
        else if (strcmp(a, "--msort") == 0)
            msort_n = (size_t)atoll(v);
        else if (strcmp(a, "--nqueens") == 0)
            nq_n = atoi(v);
        else if (strcmp(a, "--rtt-iters") == 0)
            rtt_iters = atoi(v) < 1 ? 1 : atoi(v);
        else {
            fprintf(stderr, "tasks_bench: unknown flag %s\n", a);
            return 2;
        }
    }
    if (strcmp(which, "all") == 0 || strcmp(which, "fib") == 0)
        bench_fib();
    if (strcmp(which, "all") == 0 || strcmp(which, "mergesort") == 0)
        bench_msort();
    if (strcmp(which, "all") == 0 || strcmp(which, "nqueens") == 0)
        bench_nqueens();
    if (strcmp(which, "all") == 0 || strcmp(which, "msg-rtt") == 0)
        bench_rtt();
    if (strcmp(which, "all") == 0 || strcmp(which, "remove-worker") == 0)
        bench_remove();
    return 0;
}
