/* internal.h: what the sources of libchanos_tasks share. */
#ifndef CHANOS_TASKS_INTERNAL_H
#define CHANOS_TASKS_INTERNAL_H

#include <chanos_tasks.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "deque.h"

/* ---- context switch (ctx.c) ---- */
void chanos_tasks_ctx_switch_(void **save, void *to);
void chanos_tasks_ctx_start_(void);
/* ctx_init prepares a new context on the stack that ends at stack_top and
 * returns its stack pointer: switching to it calls entry(arg). */
void *ctx_init(void *stack_top, void (*entry)(void *), void *arg);

#if defined(__SANITIZE_ADDRESS__)
#define CHANOS_TASKS_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define CHANOS_TASKS_TSAN 1
#endif

/* A context: a task stack (a fiber) or a worker thread's own stack. */
struct ctx {
    void *sp;
    void *stack_lo; /* lowest usable byte, for the sanitizers */
    size_t stack_size;
#ifdef CHANOS_TASKS_ASAN
    void *fake_stack;
#endif
#ifdef CHANOS_TASKS_TSAN
    void *tsan_fiber;
#endif
};

struct frame;

/* A fiber: a stack on which a worker runs its scheduling loop and the
 * tasks it takes, and which can be suspended with all the tasks on it. */
struct fiber {
    struct ctx ctx;
    void *map;          /* the mapping: guard page, then the stack */
    size_t map_size;
    struct frame *frame; /* the innermost task running on it; NULL: none */
    struct fiber *next;  /* pool and ready queue */
    chanos_tasks *rt;
    struct worker *w;    /* the worker running it, set at each switch to it */
    chanos_ctx cctx;     /* the fast path's context: cctx.q_ is w's deque */
};

/* A suspended task's wake-up: count is the number of events still to
 * come plus one, the worker's token, dropped once the task's stack is left;
 * whoever drops it to zero makes fiber ready. */
struct waitpoint {
    atomic_int count;
    struct fiber *fiber;
};

/* The record of a running task: its children, and who waits for them. */
struct frame {
    unsigned spawned;    /* children pushed and not yet accounted for */
    struct waitpoint wp; /* count: children run elsewhere, minus those done */
};

/* What a worker does right after a switch, on the new stack: what had to
 * wait until the old stack was left. */
enum after {
    AFTER_NONE,
    AFTER_RECYCLE, /* after_fiber's stack is free: back to the pool */
    AFTER_READY,   /* after_fiber yielded: to the ready queue */
    AFTER_RELEASE, /* after_fiber is suspended: drop the token of after_wp */
};

struct worker {
    struct cl_deque dq;
    chanos_tasks *rt;
    unsigned id;
    pthread_t thread;
    int running;      /* a thread runs this slot, or has left it and
                       * waits to be joined (set_workers' lock) */
    atomic_int leave; /* 0; 1: asked to leave by set_workers or stop;
                       * 2: leaving (claimed by the worker) */
    struct ctx home;  /* the thread's own stack */
    struct fiber *cur;
    struct fiber *first; /* the stack its thread starts on, made before */
    enum after after;
    struct fiber *after_fiber;
    struct waitpoint *after_wp;
    uint64_t rng;
    int cpu;
};

struct chanos_tasks {
    unsigned max_workers;
    size_t stack_size;
    size_t record_depth;
    size_t page;
    int pin;
    int *cpus;
    unsigned ncpus;

    struct worker *w;            /* max_workers slots */
    _Alignas(64) atomic_uint nslots; /* slots that ever ran: the victims */
    atomic_uint nworkers;
    atomic_uint target;          /* what set_workers is making nworkers */
    atomic_uint nthreads;        /* worker threads not yet exited */
    atomic_uint wver;            /* bumped at each change of the two
                                  * (a futex word) */
    pthread_mutex_t set_lock;    /* serializes set_workers and stop */

    /* Idle workers sleep on epoch (a futex word). */
    _Alignas(64) atomic_uint epoch;
    atomic_int sleepers;
    atomic_int searching;

    /* The queue of root tasks and of tasks handed over by leaving
     * workers; and the queue of resumed fibers. */
    _Alignas(64) pthread_mutex_t q_lock;
    chanos_task *inj_head, *inj_tail;
    atomic_int inj_n;
    struct fiber *ready_head, *ready_tail;
    atomic_int ready_n;

    /* Free fibers. */
    pthread_mutex_t pool_lock;
    struct fiber *pool;
    struct fiber **all; /* every fiber made, freed at stop */
    size_t nall, capall;
    size_t max_stacks;  /* the most fibers made (nall) */
    atomic_ullong waits_in_place;
    atomic_ullong deque_full;

    struct poller *poller;
};

/* runtime.c */
struct worker *tasks_worker_(void);
void tasks_make_ready_(chanos_tasks *rt, struct fiber *f);
/* tasks_suspend_ suspends the running task until wp->count, which the
 * caller set to the number of events to wait for plus one, drops to zero:
 * one per event (tasks_release_), the last by the worker once the task's
 * stack is left. Returns on whichever worker resumes it. */
void tasks_suspend_(struct worker *w, struct waitpoint *wp);
void tasks_release_(chanos_tasks *rt, struct waitpoint *wp);
int tasks_has_other_work_(struct worker *w);

/* tasks_waiter_ is libchanos's waiter on the workers' threads
 * (chanos_set_waiter): a connection's wait suspends the task. */
extern const struct chanos_waiter tasks_waiter_;
int64_t tasks_now_ns_(void);
static inline void tasks_relax_(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* wait.c: the poller */
int poller_start_(chanos_tasks *rt);
void poller_stop_(chanos_tasks *rt);

#endif
