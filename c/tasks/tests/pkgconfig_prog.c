/* pkgconfig_prog: a program built out of tree against the installed
 * libchanos_tasks (pkgconfig_test.sh). */
#include <chanos_tasks.h>

#include <stdio.h>

static int64_t fib(int64_t n)
{
    chanos_task a, b;

    if (n < 2)
        return n;
    chanos_spawn(&a, fib, n - 1);
    chanos_spawn(&b, fib, n - 2);
    chanos_task_sync();
    return chanos_result_i64(&a) + chanos_result_i64(&b);
}

int main(void)
{
    chanos_tasks *rt;
    chanos_task t;
    int rc = chanos_tasks_start(&rt, NULL);

    if (rc != 0) {
        fprintf(stderr, "chanos_tasks_start: %d\n", rc);
        return 1;
    }
    chanos_task_set(&t, fib, 20);
    chanos_tasks_run(rt, &t);
    chanos_tasks_stop(rt);
    if (chanos_result_i64(&t) != 6765) {
        fprintf(stderr, "fib(20) = %lld\n", (long long)chanos_result_i64(&t));
        return 1;
    }
    printf("pkgconfig_prog: fib(20) = 6765, ok\n");
    return 0;
}
