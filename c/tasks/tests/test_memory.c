/* test_memory: the runtime when the system refuses it memory. Each case
 * runs in a child process whose address space is limited (RLIMIT_AS) a
 * few MiB above what it holds once the runtime has started:
 *
 *  - a million spawns with no sync between them, in the general and the
 *    fast form, fill the worker's deque past what it can grow to: the
 *    general tasks go to the shared queue, the fast ones run at once, and
 *    every result is right;
 *  - sleepers that would each suspend on a stack of their own, when the
 *    system refuses more stacks: they wait holding their worker, and all
 *    wake.
 *
 * Under AddressSanitizer and ThreadSanitizer, which reserve terabytes of
 * address space, the limit cannot be set: the test then says so and
 * checks nothing. */
#include "../../tests/check.h"

#include <chanos_tasks.h>

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#define WIDE (1 << 20)

static chanos_task *ts;

static int64_t id(int64_t v)
{
    return v;
}

static int64_t fast_id(chanos_ctx *c, int64_t v)
{
    (void)c;
    return v;
}

/* The general form: WIDE children, then one sync. */
static int64_t wide(int64_t n)
{
    int64_t sum = 0;

    for (int64_t i = 0; i < n; i++)
        chanos_spawn(&ts[i], id, i);
    chanos_task_sync();
    for (int64_t i = 0; i < n; i++)
        sum += chanos_result_i64(&ts[i]);
    return sum;
}

/* The fast form: WIDE spawns at one depth, all recorded, then their
 * syncs in the reverse order. */
static int64_t wide_fast(chanos_ctx *c, int64_t n)
{
    int64_t sum = 0;

    for (int64_t i = 0; i < n; i++)
        chanos_fspawn(c, &ts[i], fast_id, i);
    for (int64_t i = n - 1; i >= 0; i--)
        sum += chanos_fsync(c, &ts[i], fast_id);
    return sum;
}

static int64_t sleeper(int64_t ms)
{
    chanos_task_sleep(ms);
    return 1;
}

static int64_t sleepers(int64_t n)
{
    chanos_task t[64];
    int64_t woke = 0;

    for (int64_t i = 0; i < n; i++)
        chanos_spawn(&t[i], sleeper, 10);
    chanos_task_sync();
    for (int64_t i = 0; i < n; i++)
        woke += chanos_result_i64(&t[i]);
    return woke;
}

/* vm_bytes returns the process's address space, from /proc. */
static long long vm_bytes(void)
{
    char line[256];
    long long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* limit_to caps the address space at what it is now plus extra. */
static int limit_to(long long extra)
{
    long long now = vm_bytes();
    struct rlimit rl;

    if (now < 0)
        return -1;
    rl.rlim_cur = rl.rlim_max = (rlim_t)(now + extra);
    return setrlimit(RLIMIT_AS, &rl);
}

/* in_child runs fn in a child process and checks that it exited 0. */
static void in_child(const char *what, void (*fn)(void))
{
    pid_t pid;
    int status = 0;

    fflush(NULL);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* Every large allocation a fresh mapping, in one arena: memory
         * that an arena reserved before the limit would otherwise give
         * the deque room the limit does not count. */
        mallopt(M_ARENA_MAX, 1);
        mallopt(M_MMAP_THRESHOLD, 64 << 10);
        fn();
        fflush(NULL);
        _exit(failures == 0 ? 0 : 1);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "test_memory: %s: the child %s %d\n", what,
                WIFSIGNALED(status) ? "died of signal" : "exited",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void deque_case(void)
{
    struct chanos_tasks_opts o = { 0 };
    struct chanos_tasks_stats st;
    chanos_task t;
    chanos_tasks *rt;
    const int64_t want = (int64_t)WIDE * (WIDE - 1) / 2;

    ts = calloc(WIDE, sizeof(*ts));
    CHECK(ts != NULL);
    o.workers = 1;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    /* The deque may grow to a few hundred thousand entries, not to a
     * million (8 MiB, and the arrays before it). */
    CHECK_EQ(limit_to(6 << 20), 0);
    chanos_task_set(&t, wide, WIDE);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), want);
    chanos_task_set(&t, wide_fast, WIDE);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), want);
    chanos_tasks_get_stats(rt, &st);
    CHECK(st.deque_full > 0);
    chanos_tasks_stop(rt);
}

static void stacks_case(void)
{
    struct chanos_tasks_opts o = { 0 };
    struct chanos_tasks_stats st;
    chanos_task t;
    chanos_tasks *rt;

    o.workers = 2;
    CHECK_EQ(chanos_tasks_start(&rt, &o), 0);
    /* Room for a few more stacks (256 KiB each), not for forty. */
    CHECK_EQ(limit_to(1 << 20), 0);
    chanos_task_set(&t, sleepers, 40);
    CHECK_EQ(chanos_tasks_run(rt, &t), 0);
    CHECK_EQ(chanos_result_i64(&t), 40);
    chanos_tasks_get_stats(rt, &st);
    CHECK(st.waits_in_place > 0);
    CHECK(st.stacks < 40);
    chanos_tasks_stop(rt);
}

int main(void)
{
#ifdef SANITIZED
    const int sanitized = 1;
#else
    const int sanitized = 0;
#endif
    if (sanitized) {
        printf("tasks_memory: skipped: the sanitizers' shadow memory leaves no address-space limit to set\n");
        return 0;
    }
    in_child("a deque that cannot grow", deque_case);
    in_child("stacks the system refuses", stacks_case);
    return check_done("tasks_memory");
}
