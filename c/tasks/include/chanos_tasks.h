/*
 * chanos_tasks.h: the one public header of libchanos_tasks, a work-stealing
 * task runtime (docs/tasks.md).
 *
 * A runtime runs tasks on N worker threads. A task spawns children
 * (chanos_task_spawn), waits for them (chanos_task_sync), and waits for
 * messages, events and timers without holding its worker
 * (chanos_task_ump_recv, chanos_task_conn_recv, chanos_task_event_wait,
 * chanos_task_sleep): its worker runs other tasks meanwhile, and the task
 * resumes, possibly on another worker, once what it waits for is there.
 * Every task syncs its children before it returns, as in Cilk.
 *
 * Ownership. The caller owns every chanos_task: its storage must stay valid
 * until the sync that waits for it (put it in the frame of the task that
 * spawns it, which the implicit sync at return then covers). The runtime
 * owns its workers, stacks and poller, freed by chanos_tasks_stop.
 */
#ifndef CHANOS_TASKS_H
#define CHANOS_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <chanos.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chanos_tasks chanos_tasks; /* a runtime; opaque */

/* The argument and the result of a task. */
typedef union chanos_task_val {
    void *p;
    int64_t i;
    uint64_t u;
    double d;
} chanos_task_val;

/* The function of a task, in its general form. */
typedef chanos_task_val (*chanos_task_fn)(chanos_task_val arg);

/*
 * A task: caller-owned storage. Fill it with chanos_task_init (or let
 * chanos_spawn do it); read the result with chanos_task_result after the
 * sync that waited for it. The fields ending in _ belong to the runtime.
 */
typedef struct chanos_task {
    union {
        chanos_task_fn val;
        int64_t (*i64)(int64_t);
        void *(*ptr)(void *);
        double (*f64)(double);
    } fn_;
    unsigned kind_;
    chanos_task_val arg_;
    chanos_task_val result_;
    void *frame_;               /* the spawning task's frame */
    struct chanos_task *next_;  /* the runtime's queues */
    void *root_;                /* a root task's completion */
} chanos_task;

/* The kinds of task function (chanos_task.kind_). */
#define CHANOS_TASK_VAL 0
#define CHANOS_TASK_I64 1
#define CHANOS_TASK_PTR 2
#define CHANOS_TASK_F64 3

/* Options of chanos_tasks_start; NULL or a zeroed struct: the defaults. */
struct chanos_tasks_opts {
    /* Workers to start; 0: the CPUs this process may use
     * (sched_getaffinity). */
    unsigned workers;
    /* The most workers chanos_tasks_set_workers may reach; 0: 256. */
    unsigned max_workers;
    /* Bytes of stack of each task stack (a guard page is added below);
     * 0: 256 KiB (1 MiB under AddressSanitizer). */
    size_t stack_size;
    /* Do not pin workers to CPUs. By default, a runtime with at least as
     * many workers as CPUs in its affinity set pins worker i to the i-th
     * of them (modulo their count); one with fewer leaves the placement
     * to the kernel. $CHANOS_TASKS_NO_PIN set to anything but "" or "0"
     * turns pinning off too. */
    bool no_pin;
};

/*
 * chanos_tasks_start starts a runtime and returns it in *out, which the
 * caller owns: free it with chanos_tasks_stop. 0, -EINVAL, or -errno.
 */
int chanos_tasks_start(chanos_tasks **out, const struct chanos_tasks_opts *o);

/*
 * chanos_tasks_stop stops the workers and the poller and frees the
 * runtime. Every chanos_tasks_run must have returned, and no task may be
 * left waiting. NULL is allowed.
 */
void chanos_tasks_stop(chanos_tasks *rt);

/*
 * chanos_tasks_run runs t (filled by chanos_task_init) as a root task and
 * waits until it and all its descendants have finished; the result is then
 * in chanos_task_result(t). Call it from any thread that is not a worker;
 * several threads may run roots at once. 0, or -EINVAL.
 */
int chanos_tasks_run(chanos_tasks *rt, chanos_task *t);

/*
 * chanos_tasks_set_workers sets the number of workers to n (1 to
 * max_workers) while tasks run. New workers start stealing at once. A
 * removed worker leaves at its next sync or when it is between tasks: it
 * hands the tasks of its deque to the runtime's queue and its current task
 * (the stack it runs on) to the ready queue, where other workers take them
 * up; nothing is lost or run twice. Returns once the removed workers have
 * left: 0, -EINVAL, or -errno (from pthread_create). Call it from a thread
 * that is not a worker; calls are serialized.
 */
int chanos_tasks_set_workers(chanos_tasks *rt, unsigned n);

/* chanos_tasks_workers returns the number of workers. */
unsigned chanos_tasks_workers(chanos_tasks *rt);

/* ---- tasks ---- */

/* chanos_task_init fills t to run fn(arg). It sets only what the task
 * runs: spawn, call and run set the runtime's fields themselves, and the
 * run sets the result. */
static inline void chanos_task_init(chanos_task *t, chanos_task_fn fn,
                                    chanos_task_val arg)
{
    t->fn_.val = fn;
    t->kind_ = CHANOS_TASK_VAL;
    t->arg_ = arg;
}

/*
 * chanos_task_spawn makes t (filled by chanos_task_init) a child of the
 * calling task and lets any worker run it. Takes no lock. Called from a
 * thread that is not a worker, it runs t at once.
 */
void chanos_task_spawn(chanos_task *t);

/*
 * chanos_task_sync waits until every child the calling task spawned has
 * finished. A child that no one stole runs here, on this stack; while a
 * stolen one runs, this task is suspended and its worker runs others.
 */
void chanos_task_sync(void);

/*
 * chanos_task_call runs t (filled by chanos_task_init) now, on the calling
 * task's stack, as a task of its own: a sync inside it waits for its own
 * children only, and it syncs them before it returns. The Cilk pattern
 * "x = spawn f(a); y = f(b); sync" is chanos_spawn then chanos_call: the
 * second half costs no deque operation.
 */
void chanos_task_call(chanos_task *t);

/* chanos_task_result returns t's result (after the sync that waited for
 * it). */
static inline chanos_task_val chanos_task_result(const chanos_task *t)
{
    return t->result_;
}

/* chanos_task_worker returns the index of the worker running the caller,
 * or -1 outside the runtime's workers. */
int chanos_task_worker(void);

/*
 * Typed helpers, so that the common cases need no casts:
 *
 *   int64_t fib(int64_t n);
 *   chanos_task a, b;
 *   chanos_spawn(&a, fib, n - 1);
 *   chanos_call(&b, fib, n - 2);
 *   chanos_task_sync();
 *   return chanos_result_i64(&a) + chanos_result_i64(&b);
 *
 * fn may be int64_t (*)(int64_t), void *(*)(void *), double (*)(double) or
 * chanos_task_fn; the argument is converted to fn's parameter type.
 */
static inline void chanos_task_init_i64_(chanos_task *t, int64_t (*fn)(int64_t),
                                         int64_t a)
{
    chanos_task_init(t, NULL, (chanos_task_val){ .i = a });
    t->fn_.i64 = fn;
    t->kind_ = CHANOS_TASK_I64;
}

static inline void chanos_task_init_ptr_(chanos_task *t, void *(*fn)(void *),
                                         void *a)
{
    chanos_task_init(t, NULL, (chanos_task_val){ .p = a });
    t->fn_.ptr = fn;
    t->kind_ = CHANOS_TASK_PTR;
}

static inline void chanos_task_init_f64_(chanos_task *t, double (*fn)(double),
                                         double a)
{
    chanos_task_init(t, NULL, (chanos_task_val){ .d = a });
    t->fn_.f64 = fn;
    t->kind_ = CHANOS_TASK_F64;
}

static inline void chanos_task_init_val_(chanos_task *t, chanos_task_fn fn,
                                         chanos_task_val a)
{
    chanos_task_init(t, fn, a);
}

#define chanos_task_set(t, fn, arg)                             \
    _Generic((fn),                                              \
        int64_t (*)(int64_t): chanos_task_init_i64_,            \
        void *(*)(void *): chanos_task_init_ptr_,               \
        double (*)(double): chanos_task_init_f64_,              \
        chanos_task_fn: chanos_task_init_val_)((t), (fn), (arg))

#define chanos_spawn(t, fn, arg)                                \
    (chanos_task_set((t), (fn), (arg)), chanos_task_spawn(t))

#define chanos_call(t, fn, arg)                                 \
    (chanos_task_set((t), (fn), (arg)), chanos_task_call(t))

static inline int64_t chanos_result_i64(const chanos_task *t)
{
    return t->result_.i;
}

static inline void *chanos_result_ptr(const chanos_task *t)
{
    return t->result_.p;
}

static inline double chanos_result_f64(const chanos_task *t)
{
    return t->result_.d;
}

/*
 * chanos_parallel_for calls body(lo', hi', arg) over [lo, hi) in pieces of
 * at most grain iterations (grain 0: 1), split in halves as tasks, and
 * returns when all have run. From outside the workers it runs the pieces
 * in turn on the calling thread.
 */
void chanos_parallel_for(int64_t lo, int64_t hi, int64_t grain,
                         void (*body)(int64_t lo, int64_t hi, void *arg),
                         void *arg);

/* ---- waiting without holding the worker ----
 *
 * These suspend the calling task, not its worker: the worker runs other
 * tasks, and the task resumes on whichever worker is free once the wait
 * ends. The runtime's one poller thread (epoll) watches the descriptors and
 * the timers. Called outside a worker, they block the calling thread.
 * timeout_ms: -1 forever, 0 do not wait.
 */

/*
 * chanos_task_wait_fd waits until fd polls for any of events (EPOLLIN,
 * EPOLLOUT, ...) and returns the events seen (> 0), or CHANOS_ERR_TIMEDOUT,
 * or -errno. fd stays the caller's.
 */
int chanos_task_wait_fd(int fd, uint32_t events, int timeout_ms);

/* chanos_task_sleep suspends the task for ms milliseconds. */
void chanos_task_sleep(int64_t ms);

/*
 * chanos_task_yield lets the worker run its other ready work first; the
 * task resumes soon after, possibly on another worker.
 */
void chanos_task_yield(void);

/*
 * An event: an eventfd, which any thread or process that holds its
 * descriptor can set. chanos_task_event_wait returns once the event was
 * set, and resets it (each set wakes at least one wait; sets that come
 * before a wait are merged into one).
 */
typedef struct chanos_event chanos_event;
int chanos_event_new(chanos_event **out);
void chanos_event_free(chanos_event *e); /* NULL allowed */
int chanos_event_set(chanos_event *e);
int chanos_event_fd(const chanos_event *e); /* owned by the event */
int chanos_task_event_wait(chanos_event *e, int timeout_ms);

/*
 * chanos_task_ump_recv and chanos_task_ump_send are chanos_ump_recv and
 * chanos_ump_send for a task: they spin for the ring's spin window while
 * the worker has nothing else to run, then suspend the task until the
 * ring's descriptor polls (chanos_ump_fd). Same results and ownership as
 * chanos_ump_recv and chanos_ump_send. One task at a time may receive, and
 * one send, on a ring, as for threads.
 */
int chanos_task_ump_recv(chanos_ump *u, const void **msg, size_t *len,
                         int timeout_ms);
int chanos_task_ump_send(chanos_ump *u, const void *msg, size_t len,
                         int timeout_ms);

/*
 * chanos_task_conn_recv is chanos_conn_recv for a task: the next frame of
 * c, typed by the generated decoders, with the same results. It waits as
 * chanos_task_ump_recv does.
 */
int chanos_task_conn_recv(chanos_conn *c, int timeout_ms,
                          struct chanos_frame *f);

/*
 * chanos_task_conn_call is chanos_conn_call for a task: it sends the
 * encoded call in frame[0..len) and suspends the task until its reply (in
 * *reply, valid until the next receive), with the same results, the same
 * handling of other frames (passed to other(arg, f), or dropped) and the
 * same cancel on CHANOS_ERR_TIMEDOUT. The generated stubs call
 * chanos_conn_call; a task encodes with the generated encoder and calls
 * this instead.
 */
int chanos_task_conn_call(chanos_conn *c, uint8_t *frame, size_t len,
                          int timeout_ms, struct chanos_frame *reply,
                          void (*other)(void *arg, const struct chanos_frame *f),
                          void *arg);

#ifdef __cplusplus
}
#endif

#endif /* CHANOS_TASKS_H */
