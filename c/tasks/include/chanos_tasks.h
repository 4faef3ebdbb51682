/*
 * chanos_tasks.h: the one public header of libchanos_tasks, a work-stealing
 * task runtime (docs/tasks.md).
 *
 * A runtime runs tasks on N worker threads. A task spawns children
 * (chanos_task_spawn), waits for them (chanos_task_sync), and waits for
 * messages, events and timers without holding its worker
 * (chanos_task_ump_recv, chanos_conn_recv and the generated stubs,
 * chanos_task_event_wait, chanos_task_sleep): its worker runs other tasks
 * meanwhile, and the task resumes, possibly on another worker, once what
 * it waits for is there.
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
 * The owner's end of a worker's deque (src/deque.h), which the inline
 * chanos_fspawn and chanos_fsync read and write on the worker that owns it
 * and nowhere else. The runtime's: no field is for the program.
 */
struct chanos_deq_own_ {
    int64_t head;              /* entries [pub, head) are private */
    int64_t pub;               /* the owner's copy of bottom */
    int64_t top_low;           /* a lower bound of top */
    struct chanos_task **slot; /* the current array (atomic slots) */
    int64_t mask;              /* its size - 1 */
    int64_t limit;             /* a spawn at a lower index needs no check:
                                * top_low + size, or INT64_MIN once someone
                                * asked for a publish (atomic) */
};

/*
 * A task context: what the fast path (chanos_fspawn, chanos_fsync) passes
 * down instead of reading a thread-local. The runtime hands one to every
 * function of the fast form, int64_t f(chanos_ctx *, int64_t) and the
 * like; it belongs to the task stack, not to the worker, so it stays
 * right when the task resumes on another worker. Opaque to the program.
 */
typedef struct chanos_ctx {
    struct chanos_deq_own_ *q_; /* the deque of the worker now running
                                 * this stack */
    uint64_t moves_;            /* bumped when the stack is switched to,
                                 * and when its worker publishes: a spawn
                                 * and its sync see the same count only if
                                 * the task stayed private on one worker */
    uintptr_t lo_;              /* a chanos_fspawn whose stack pointer is
                                 * at or above this records its task; a
                                 * deeper one runs it at once */
    uintptr_t top_;             /* lo_ of the task itself: the record
                                 * depth below where the stack took it up */
    uintptr_t climb_;           /* nonzero after a publish below top_:
                                 * each recorded spawn raises lo_ to
                                 * itself, up to top_ */
} chanos_ctx;

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
        chanos_task_val (*cval)(chanos_ctx *, chanos_task_val);
        int64_t (*ci64)(chanos_ctx *, int64_t);
        void *(*cptr)(chanos_ctx *, void *);
        double (*cf64)(chanos_ctx *, double);
    } fn_;
    unsigned kind_;
    chanos_task_val arg_;
    chanos_task_val result_;
    union {
        void *frame_;           /* the spawning task's frame */
        int64_t idx_;           /* chanos_fspawn: its deque index */
    };
    struct chanos_task *next_;  /* the runtime's queues */
    union {
        void *root_;            /* a root task's completion */
        void *join_;            /* chanos_fspawn: NULL, the waiter, or done */
    };
    uint64_t moves_;            /* chanos_fspawn: the context's moves_ */
} chanos_task;

/* The kinds of task function (chanos_task.kind_): the low bits; the
 * CTX kinds take a chanos_ctx * first. CHANOS_TASK_FAST_ marks a task
 * spawned by chanos_fspawn (joined through join_, not a frame). */
#define CHANOS_TASK_VAL 0
#define CHANOS_TASK_I64 1
#define CHANOS_TASK_PTR 2
#define CHANOS_TASK_F64 3
#define CHANOS_TASK_CVAL 4
#define CHANOS_TASK_CI64 5
#define CHANOS_TASK_CPTR 6
#define CHANOS_TASK_CF64 7
#define CHANOS_TASK_KIND_MASK_ 7u
#define CHANOS_TASK_FAST_ 8u

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
    /* Bytes of stack below where a task began within which
     * chanos_fspawn records its task for thieves; a deeper spawn runs its
     * task at once, as a call, unless an idle worker asked for work (and
     * after such a request, the spawns as the stack climbs back are
     * recorded). 0: 1 KiB; SIZE_MAX: every spawn is recorded, and no
     * fast-spawned task runs before its chanos_fspawn returns.
     * docs/tasks.md, "Spawns that run at once". */
    size_t record_depth;
    /* Do not pin workers to CPUs. By default, a runtime with at least as
     * many workers as CPUs in its affinity set pins worker i to the i-th
     * of them (modulo their count); one with fewer leaves the placement
     * to the kernel. $CHANOS_TASKS_NO_PIN set to anything but "" or "0"
     * turns pinning off too. */
    bool no_pin;
    /* The most task stacks the runtime makes (each its stack_size and a
     * guard page of address space, two mappings): one for each worker,
     * and one for each task suspended while it waits (a sync of a stolen
     * child, the waits below, a connection call). Beyond it, and when the
     * system refuses a stack, a task that would suspend waits holding its
     * worker instead, as a blocking call would, until what it waits for
     * comes; chanos_tasks_get_stats counts those waits. Each worker needs
     * one, so that a start with fewer fails (-ENOMEM). 0: 8192. */
    size_t max_stacks;
};

/* What chanos_tasks_get_stats reports of a runtime. */
struct chanos_tasks_stats {
    size_t stacks;           /* task stacks made, at most max_stacks */
    uint64_t waits_in_place; /* waits that held their worker, no stack
                              * being left for their task to suspend */
    uint64_t deque_full;     /* spawns whose worker's deque was full and
                              * could not grow (no memory): the task went
                              * to the shared queue, or a fast-form task
                              * ran at once */
};

/* chanos_tasks_get_stats fills *st with rt's counts. Any thread. */
void chanos_tasks_get_stats(chanos_tasks *rt, struct chanos_tasks_stats *st);

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
 * removed worker is asked to leave, and leaves at its next sync, its next
 * chanos_fspawn after the request, or when it is between tasks: it hands
 * the tasks of its deque to the runtime's queue and its current task (the
 * stack it runs on) to the ready queue, where other workers take them up;
 * nothing is lost or run twice. Shrinking returns at once, without waiting
 * for the removed workers to leave (one running a long task without syncs
 * leaves when the task gets there); chanos_tasks_threads tells whether they
 * have, and chanos_tasks_wait_removed waits for them. Growing again takes
 * back a request that a worker has not yet acted on, and keeps that thread.
 * 0, -EINVAL, or -errno (from pthread_create). Call it from a thread that
 * is not a worker; calls are serialized.
 */
int chanos_tasks_set_workers(chanos_tasks *rt, unsigned n);

/* chanos_tasks_workers returns the number of workers set (by start or
 * set_workers). */
unsigned chanos_tasks_workers(chanos_tasks *rt);

/* chanos_tasks_threads returns the number of worker threads still
 * running: the workers set, plus the removed ones that have not left. */
unsigned chanos_tasks_threads(chanos_tasks *rt);

/* chanos_tasks_wait_removed blocks until every removed worker has left,
 * or been taken back by a set_workers that grew again:
 * chanos_tasks_threads down to chanos_tasks_workers. Call it from a
 * thread that is not a worker. */
void chanos_tasks_wait_removed(chanos_tasks *rt);

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

static inline void chanos_task_init_ci64_(chanos_task *t,
                                          int64_t (*fn)(chanos_ctx *, int64_t),
                                          int64_t a)
{
    t->fn_.ci64 = fn;
    t->kind_ = CHANOS_TASK_CI64;
    t->arg_.i = a;
}

static inline void chanos_task_init_cptr_(chanos_task *t,
                                          void *(*fn)(chanos_ctx *, void *),
                                          void *a)
{
    t->fn_.cptr = fn;
    t->kind_ = CHANOS_TASK_CPTR;
    t->arg_.p = a;
}

static inline void chanos_task_init_cf64_(chanos_task *t,
                                          double (*fn)(chanos_ctx *, double),
                                          double a)
{
    t->fn_.cf64 = fn;
    t->kind_ = CHANOS_TASK_CF64;
    t->arg_.d = a;
}

static inline void chanos_task_init_cval_(chanos_task *t,
                                          chanos_task_val (*fn)(chanos_ctx *, chanos_task_val),
                                          chanos_task_val a)
{
    t->fn_.cval = fn;
    t->kind_ = CHANOS_TASK_CVAL;
    t->arg_ = a;
}

/* fn may also be of the fast form, with a chanos_ctx * first: the runtime
 * passes the context when it runs the task. */
#define chanos_task_set(t, fn, arg)                                       \
    _Generic((fn),                                                        \
        int64_t (*)(int64_t): chanos_task_init_i64_,                      \
        void *(*)(void *): chanos_task_init_ptr_,                         \
        double (*)(double): chanos_task_init_f64_,                        \
        chanos_task_fn: chanos_task_init_val_,                            \
        int64_t (*)(chanos_ctx *, int64_t): chanos_task_init_ci64_,       \
        void *(*)(chanos_ctx *, void *): chanos_task_init_cptr_,          \
        double (*)(chanos_ctx *, double): chanos_task_init_cf64_,         \
        chanos_task_val (*)(chanos_ctx *, chanos_task_val):               \
            chanos_task_init_cval_)((t), (fn), (arg))

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

/* ---- the fast path: spawn and sync inline, with a context ----
 *
 * For fine-grained recursion (docs/tasks.md, "The fast path"). A function
 * of the fast form takes the context the runtime gives it and passes it
 * down:
 *
 *   CHANOS_FAST_ALIGN static inline int64_t fib(chanos_ctx *c, int64_t n)
 *   {
 *       chanos_task t;
 *       int64_t b;
 *
 *       if (n < 2)
 *           return n;
 *       chanos_fspawn(c, &t, fib, n - 1);
 *       b = fib(c, n - 2);                 // a plain call
 *       return chanos_fsync(c, &t, fib) + b;
 *   }
 *
 *   chanos_task root;
 *   chanos_task_set(&root, fib, 35);       // any worker runs it with a context
 *   chanos_tasks_run(rt, &root);
 *
 * Declared inline, such a function is inlined into itself by the
 * compiler, a few levels of the recursion in one call, as a serial
 * recursion is; without inline, GCC 12 at -O2 leaves it two calls a node.
 *
 * chanos_fspawn(c, &t, fn, arg) makes t stealable; chanos_fsync(c, &t, fn)
 * returns fn's result for t: it calls fn itself if no thief took t, or
 * waits for the thief (suspending the task, not the worker). The rules:
 *
 *  - every chanos_fspawn is matched by one chanos_fsync, with the same fn,
 *    in the same function, and the syncs come in the reverse order of the
 *    spawns (the last spawned is synced first);
 *  - there is no implicit sync for these: a function returns only after
 *    it synced what it spawned this way;
 *  - c is the context the runtime passed in, passed down unchanged;
 *  - the functions of the fast form run only on workers: run them with
 *    chanos_tasks_run, chanos_spawn or chanos_call (never from outside a
 *    worker, where they have no context);
 *  - a fast-spawned task may run at once, before chanos_fspawn returns
 *    (below), so it must not wait for anything its parent does between
 *    the spawn and the sync, such as a message: the program must be right
 *    in the serial order. Tasks that talk to each other are spawned with
 *    chanos_spawn, whose children run alongside their parent or after it.
 *
 * A spawn deeper in the stack than the runtime's record depth
 * (chanos_tasks_opts.record_depth below where the task began; after an
 * idle worker asked for work, below the last recorded spawn) runs fn at
 * once, as a plain call, unless an idle worker asked for work: the
 * serial order, and no deque entry. A task spawned higher up that nobody
 * stole costs no call into the library, no fence and no
 * read-modify-write: the spawn writes the record and one deque slot, the
 * sync compares t's index and move count with the deque's head and the
 * context's count, and calls fn directly (both in functions this header
 * defines out of line, in the program's own code).
 */

/*
 * CHANOS_FAST_ALIGN starts a function's code on a 64-byte boundary. Put
 * it before a recursive function of the fast form:
 *
 *   CHANOS_FAST_ALIGN static inline int64_t fib(chanos_ctx *c, int64_t n) { ... }
 *
 * Such a function is mostly calls and branches, and on some processors
 * where its code starts within a 64-byte line moves its cost: on the AMD
 * EPYC that chanos is measured on, fib(35) on one worker took 0.024 s
 * with its code at offset 0 of a line, 0.025 to 0.030 s at offsets 16
 * and 32, and 0.032 s at 48, the program otherwise the same
 * (docs/tasks.md, "Code alignment"). It costs at most 63 bytes of
 * padding per function.
 */
#if defined(__GNUC__)
#define CHANOS_FAST_ALIGN __attribute__((aligned(64)))
#else
#define CHANOS_FAST_ALIGN
#endif

/* The out-of-line halves of the fast path (src/runtime.c). */
void chanos_fpush_slow_(chanos_ctx *c, chanos_task *t, uintptr_t sp);
int chanos_fsync_slow_(chanos_ctx *c, chanos_task *t, uintptr_t sp);

/* Slot accesses are atomic (a thief may read a slot the owner writes);
 * relaxed is a plain mov. ThreadSanitizer does not model the fences that
 * order them, so under it the store releases, as src/deque.h does. */
#if defined(__SANITIZE_THREAD__)
#define CHANOS_SLOT_STORE_ __ATOMIC_RELEASE
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHANOS_SLOT_STORE_ __ATOMIC_RELEASE
#endif
#endif
#ifndef CHANOS_SLOT_STORE_
#define CHANOS_SLOT_STORE_ __ATOMIC_RELAXED
#endif

/* What chanos_fspawn leaves in t->idx_ when it ran the task at once. */
#define CHANOS_FRAN_ (-1)

/* chanos_sp_ reads the stack pointer (the frame address where the
 * architecture is not one we name). */
static inline uintptr_t chanos_sp_(void)
{
    uintptr_t sp;

#if defined(__x86_64__)
    __asm__("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
    __asm__("mov %0, sp" : "=r"(sp));
#else
    sp = (uintptr_t)__builtin_frame_address(0);
#endif
    return sp;
}

/* chanos_frun_now_: whether a spawn at stack pointer sp runs its task at
 * once, as a plain call on the caller's stack, instead of recording it:
 * when sp is below the context's lo_ and nobody asked for a publish
 * (limit's sign). docs/tasks.md, "Spawns that run at once": lo_ is the
 * record depth below where the stack took up its task, so the top of a
 * recursion is recorded, which is what thieves take; a request below
 * that makes the next spawn record and publish, and lowers lo_ to it;
 * from then on the spawns that are not below the last recorded one are
 * recorded, one a level as the stack climbs back (the largest pieces of
 * work left), until lo_ is back at the task's own. */
static inline int chanos_frun_now_(const chanos_ctx *c, uintptr_t sp)
{
    return __builtin_expect(sp < c->lo_, 1) &&
           __builtin_expect(__atomic_load_n(&c->q_->limit, __ATOMIC_RELAXED) >= 0, 1);
}

/* chanos_fpush_ pushes t on the private end of the running worker's
 * deque: owner-only fields and one slot store. One compare covers both
 * rare cases: the array may be full, or someone asked for a publish (the
 * asker lowers limit to INT64_MIN). */
static inline void chanos_fpush_(chanos_ctx *c, chanos_task *t, uintptr_t sp)
{
    struct chanos_deq_own_ *q = c->q_;
    int64_t h = q->head;

    t->idx_ = h;
    t->moves_ = c->moves_;
    if (__builtin_expect(h >= __atomic_load_n(&q->limit, __ATOMIC_RELAXED), 0)) {
        chanos_fpush_slow_(c, t, sp);
        return;
    }
    __atomic_store_n(&q->slot[h & q->mask], t, CHANOS_SLOT_STORE_);
    q->head = h + 1;
    if (__builtin_expect(c->climb_ != 0, 0)) {
        if (sp < c->top_) {
            c->lo_ = sp;
        } else {
            c->lo_ = c->top_;
            c->climb_ = 0;
        }
    }
}

/* chanos_fpop_ returns 1 when t is back in the caller's hands (the caller
 * runs it), 0 when a thief ran it (its result is in t). The common case:
 * since the spawn, the stack never left its worker and the worker did not
 * publish (same moves_), so t is still a private entry of that worker's
 * deque, at index idx_, and the newest (head == idx_ + 1), and nobody
 * asked for a publish (limit, otherwise top_low + size, is not INT64_MIN:
 * its sign says so, without a 64-bit constant): a task that syncs its
 * children one by one, spawning no more, must still hand the rest to idle
 * workers. Plain loads of t, of the context, of head and of limit, and
 * one store. */
static inline int chanos_fpop_(chanos_ctx *c, chanos_task *t)
{
    struct chanos_deq_own_ *q = c->q_;
    int64_t h = t->idx_;

    if (__builtin_expect(t->moves_ == c->moves_, 1) &&
        __builtin_expect(q->head == h + 1, 1) &&
        __builtin_expect(__atomic_load_n(&q->limit, __ATOMIC_RELAXED) >= 0, 1)) {
        q->head = h;
        return 1;
    }
    return chanos_fsync_slow_(c, t, chanos_sp_());
}

/*
 * CHANOS_FAST_FORM_ defines the spawn and the sync of the fast form for
 * one kind of task function: suffix, its argument and result type, the
 * chanos_task_val member that holds them (empty: the whole union), and
 * the kind's constant.
 *
 * Only the spawn that runs its task at once and the sync that finds it
 * ran are inline; recording the task (chanos_frec_*) and taking it back
 * (chanos_fsync_rest_*) are separate functions, kept out of line. That
 * keeps a recursive function of the fast form as small as its serial
 * elision plus a few compares, so that the compiler inlines it into
 * itself, as it does the serial one, when the function is declared
 * inline. Written inline, they make fib too large for GCC 12 at -O2 to
 * inline into itself: two calls a node, and fib(35) on one worker in
 * 1.87 times the serial fib's time, against 1.38 this way
 * (docs/tasks.md, "The fast path").
 * They are static, one copy per translation unit, so that the compiler
 * may specialise each for the one function it records.
 */
#define CHANOS_FAST_FORM_(sfx, type, mem, kind)                              \
    __attribute__((noinline, unused)) static void chanos_frec_##sfx##_(      \
        chanos_ctx *c, chanos_task *t, type (*fn)(chanos_ctx *, type),       \
        type a, uintptr_t sp)                                                \
    {                                                                        \
        t->fn_.c##sfx = fn;                                                  \
        t->kind_ = (kind) | CHANOS_TASK_FAST_;                               \
        t->arg_ mem = a;                                                     \
        t->join_ = NULL;                                                     \
        chanos_fpush_(c, t, sp);                                             \
    }                                                                        \
                                                                             \
    static inline void chanos_fspawn_##sfx##_(                               \
        chanos_ctx *c, chanos_task *t, type (*fn)(chanos_ctx *, type), type a) \
    {                                                                        \
        uintptr_t sp = chanos_sp_();                                         \
                                                                             \
        if (chanos_frun_now_(c, sp)) {                                       \
            t->idx_ = CHANOS_FRAN_;                                          \
            t->result_ mem = fn(c, a);                                       \
            return;                                                          \
        }                                                                    \
        chanos_frec_##sfx##_(c, t, fn, a, sp);                               \
    }                                                                        \
                                                                             \
    __attribute__((noinline, unused)) static type chanos_fsync_rest_##sfx##_( \
        chanos_ctx *c, chanos_task *t, type (*fn)(chanos_ctx *, type))       \
    {                                                                        \
        if (chanos_fpop_(c, t))                                              \
            return fn(c, t->arg_ mem);                                       \
        return t->result_ mem;                                               \
    }                                                                        \
                                                                             \
    static inline type chanos_fsync_##sfx##_(chanos_ctx *c, chanos_task *t,  \
                                             type (*fn)(chanos_ctx *, type)) \
    {                                                                        \
        if (__builtin_expect(t->idx_ == CHANOS_FRAN_, 1))                    \
            return t->result_ mem;                                           \
        return chanos_fsync_rest_##sfx##_(c, t, fn);                         \
    }

CHANOS_FAST_FORM_(i64, int64_t, .i, CHANOS_TASK_CI64)
CHANOS_FAST_FORM_(ptr, void *, .p, CHANOS_TASK_CPTR)
CHANOS_FAST_FORM_(f64, double, .d, CHANOS_TASK_CF64)
CHANOS_FAST_FORM_(val, chanos_task_val, , CHANOS_TASK_CVAL)

/* chanos_fspawn(c, t, fn, arg): t (caller-owned, as for chanos_spawn) runs
 * fn(c', arg) at once (below the record depth), or on this worker at the
 * matching chanos_fsync, or on a thief. */
#define chanos_fspawn(c, t, fn, arg)                                      \
    _Generic((fn),                                                        \
        int64_t (*)(chanos_ctx *, int64_t): chanos_fspawn_i64_,           \
        void *(*)(chanos_ctx *, void *): chanos_fspawn_ptr_,              \
        double (*)(chanos_ctx *, double): chanos_fspawn_f64_,             \
        chanos_task_val (*)(chanos_ctx *, chanos_task_val):               \
            chanos_fspawn_val_)((c), (t), (fn), (arg))

/* chanos_fsync(c, t, fn): fn's result for t, of fn's result type. */
#define chanos_fsync(c, t, fn)                                            \
    _Generic((fn),                                                        \
        int64_t (*)(chanos_ctx *, int64_t): chanos_fsync_i64_,            \
        void *(*)(chanos_ctx *, void *): chanos_fsync_ptr_,               \
        double (*)(chanos_ctx *, double): chanos_fsync_f64_,              \
        chanos_task_val (*)(chanos_ctx *, chanos_task_val):               \
            chanos_fsync_val_)((c), (t), (fn))

/* chanos_task_ctx returns the context of the running task, for a task of
 * the general form that calls a function of the fast form; NULL outside
 * the workers. */
chanos_ctx *chanos_task_ctx(void);

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
 * Connections. On a worker, libchanos's own connection calls wait for a
 * task, not for the worker: chanos_conn_recv and chanos_conn_call, and so
 * the generated stubs (IFACE_echo, IFACE_serve, ...), spin for the ring's
 * spin window while the worker has nothing else to run, then suspend the
 * task until the connection's descriptor (chanos_conn_fd) polls; a send
 * on a ump connection waits for ring space the same way. The runtime sets
 * libchanos's waiter on each worker thread for this (chanos_set_waiter).
 * A link with no descriptor blocks the worker, and so does a send over a
 * link other than ump (libchanos_net's, when its window is full).
 *
 * chanos_task_conn_recv and chanos_task_conn_call are chanos_conn_recv and
 * chanos_conn_call, under the names of the task API.
 */
int chanos_task_conn_recv(chanos_conn *c, int timeout_ms,
                          struct chanos_frame *f);
int chanos_task_conn_call(chanos_conn *c, uint8_t *frame, size_t len,
                          int timeout_ms, struct chanos_frame *reply,
                          void (*other)(void *arg, const struct chanos_frame *f),
                          void *arg);

#ifdef __cplusplus
}
#endif

#endif /* CHANOS_TASKS_H */
