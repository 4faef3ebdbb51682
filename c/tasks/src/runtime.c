/*
 * runtime.c: workers, spawn and sync, task stacks, and the worker set.
 *
 * Scheduling is help-first (child stealing): chanos_task_spawn pushes the
 * child on the worker's Chase-Lev deque (deque.h) and the parent goes on.
 * At sync the parent takes its children back from the bottom of its deque
 * and runs them on its own stack, as plain calls; only the children that a
 * thief took are waited for. A library cannot steal a C continuation
 * without one stack per spawn, which is what made seed 003's spawns
 * expensive; child stealing needs a stack only when a task must wait.
 *
 * Every worker runs its scheduling loop on a fiber, a stack of its own.
 * Tasks run on that stack. A task that must wait (stolen children still
 * running at sync, a message, a timer) suspends the whole fiber, and the
 * worker carries on with another fiber: a ready one, or a fresh one from
 * the pool that starts a new scheduling loop. A suspended fiber resumes on
 * whichever worker takes it from the ready queue.
 */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef CHANOS_TASKS_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef CHANOS_TASKS_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* How many rounds an idle worker looks for work before it sleeps, and how
 * long a sync spins for stolen children before it suspends. */
#define IDLE_ROUNDS 2048
#define SYNC_SPIN   256

/* The default of chanos_tasks_opts.record_depth: about ten levels of a
 * small recursive function. Their spawns hold the large subtrees that a
 * thief should take; the many small ones below cost a call each instead
 * of a record. */
#define RECORD_DEPTH 1024

/* The default of chanos_tasks_opts.max_stacks: 2 GiB of address space
 * with the default stacks, and 16,384 of the 65,530 mappings a process
 * may have by default (vm.max_map_count). */
#define MAX_STACKS 8192

static _Thread_local struct worker *tls_worker;

/* tasks_worker_ reads the worker of the running thread. A task can resume
 * on another thread, so the compiler must not keep the thread-local's
 * address across a switch: the function is opaque to it. */
__attribute__((noinline)) struct worker *tasks_worker_(void)
{
    struct worker *w = tls_worker;

    __asm__ volatile("" : "+r"(w) : : "memory");
    return w;
}

int64_t tasks_now_ns_(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(atomic_uint *a, unsigned v)
{
    syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *a, int n)
{
    syscall(SYS_futex, a, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void wake(chanos_tasks *rt, int n)
{
    atomic_fetch_add(&rt->epoch, 1);
    futex_wake(&rt->epoch, n);
}

/* wake_for_queue wakes a sleeper after work was put in a shared queue: the
 * fence pairs with the one in worker_sleep, so either the sleeper sees the
 * work or we see the sleeper. */
static void wake_for_queue(chanos_tasks *rt)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rt->sleepers, memory_order_relaxed) > 0)
        wake(rt, 1);
}

/* ---- context switches ---- */

static void ctx_switch(struct ctx *from, struct ctx *to, int from_dies)
{
#ifdef CHANOS_TASKS_ASAN
    __sanitizer_start_switch_fiber(from_dies ? NULL : &from->fake_stack,
                                   to->stack_lo, to->stack_size);
#else
    (void)from_dies;
#endif
#ifdef CHANOS_TASKS_TSAN
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
    chanos_tasks_ctx_switch_(&from->sp, to->sp);
#ifdef CHANOS_TASKS_ASAN
    __sanitizer_finish_switch_fiber(from->fake_stack, NULL, NULL);
#endif
}

/* ---- fibers ---- */

static void fiber_entry(void *arg);

/* fiber_bind makes w the worker running f, and f's context point at w's
 * deque: whatever runs on f next reads it there. */
static inline void fiber_bind(struct fiber *f, struct worker *w)
{
    f->w = w;
    f->cctx.q_ = &w->dq.o;
    f->cctx.moves_++;
}

/* record_floor: the fast path's lo_ for a stack that takes up a task
 * here: its spawns within the record depth below are recorded. */
static inline uintptr_t record_floor(const chanos_tasks *rt)
{
    uintptr_t sp = chanos_sp_();

    return sp > rt->record_depth ? sp - rt->record_depth : 0;
}

static inline struct fiber *fiber_of(chanos_ctx *c)
{
    return (struct fiber *)(void *)((char *)c - offsetof(struct fiber, cctx));
}

/* fiber_new makes a fiber, or returns NULL when the runtime has made
 * max_stacks of them or the system refuses the memory: its callers then
 * do without (see switch_from). */
static struct fiber *fiber_new(chanos_tasks *rt)
{
    struct fiber *f = calloc(1, sizeof(*f));
    size_t size = rt->stack_size + rt->page;
    void *m;

    if (f == NULL)
        return NULL;
    m = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) {
        free(f);
        return NULL;
    }
    if (mprotect(m, rt->page, PROT_NONE) != 0) /* the guard page */
        goto fail;
    f->map = m;
    f->map_size = size;
    f->rt = rt;
    f->ctx.stack_lo = (char *)m + rt->page;
    f->ctx.stack_size = rt->stack_size;
    pthread_mutex_lock(&rt->pool_lock);
    if (rt->nall >= rt->max_stacks) {
        pthread_mutex_unlock(&rt->pool_lock);
        goto fail;
    }
    if (rt->nall == rt->capall) {
        size_t cap = rt->capall ? rt->capall * 2 : 64;
        struct fiber **all = realloc(rt->all, cap * sizeof(*all));

        if (all == NULL) {
            pthread_mutex_unlock(&rt->pool_lock);
            goto fail;
        }
        rt->all = all;
        rt->capall = cap;
    }
    rt->all[rt->nall++] = f;
    pthread_mutex_unlock(&rt->pool_lock);
    return f;
fail:
    munmap(m, size);
    free(f);
    return NULL;
}

/* fiber_get returns a fiber that starts a scheduling loop when switched
 * to, or NULL if the pool has none and none can be made. */
static struct fiber *fiber_get(chanos_tasks *rt)
{
    struct fiber *f;

    pthread_mutex_lock(&rt->pool_lock);
    f = rt->pool;
    if (f != NULL)
        rt->pool = f->next;
    pthread_mutex_unlock(&rt->pool_lock);
    if (f == NULL && (f = fiber_new(rt)) == NULL)
        return NULL;
    f->next = NULL;
    f->frame = NULL;
#ifdef CHANOS_TASKS_ASAN
    /* The stack was left with frames on it; their poisoning goes. */
    __asan_unpoison_memory_region(f->ctx.stack_lo, f->ctx.stack_size);
#endif
#ifdef CHANOS_TASKS_TSAN
    if (f->ctx.tsan_fiber != NULL)
        __tsan_destroy_fiber(f->ctx.tsan_fiber);
    f->ctx.tsan_fiber = __tsan_create_fiber(0);
#endif
    f->ctx.sp = ctx_init((char *)f->ctx.stack_lo + f->ctx.stack_size,
                         fiber_entry, f);
    return f;
}

static void fiber_put(chanos_tasks *rt, struct fiber *f)
{
    pthread_mutex_lock(&rt->pool_lock);
    f->next = rt->pool;
    rt->pool = f;
    pthread_mutex_unlock(&rt->pool_lock);
}

/* ---- shared queues ---- */

static struct fiber *ready_pop(chanos_tasks *rt)
{
    struct fiber *f;

    if (atomic_load_explicit(&rt->ready_n, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&rt->q_lock);
    f = rt->ready_head;
    if (f != NULL) {
        rt->ready_head = f->next;
        if (rt->ready_head == NULL)
            rt->ready_tail = NULL;
        atomic_fetch_sub_explicit(&rt->ready_n, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&rt->q_lock);
    return f;
}

void tasks_make_ready_(chanos_tasks *rt, struct fiber *f)
{
    f->next = NULL;
    pthread_mutex_lock(&rt->q_lock);
    if (rt->ready_tail != NULL)
        rt->ready_tail->next = f;
    else
        rt->ready_head = f;
    rt->ready_tail = f;
    atomic_fetch_add_explicit(&rt->ready_n, 1, memory_order_relaxed);
    pthread_mutex_unlock(&rt->q_lock);
    wake_for_queue(rt);
}

static void inject_push(chanos_tasks *rt, chanos_task *t)
{
    t->next_ = NULL;
    pthread_mutex_lock(&rt->q_lock);
    if (rt->inj_tail != NULL)
        rt->inj_tail->next_ = t;
    else
        rt->inj_head = t;
    rt->inj_tail = t;
    atomic_fetch_add_explicit(&rt->inj_n, 1, memory_order_relaxed);
    pthread_mutex_unlock(&rt->q_lock);
}

static chanos_task *inject_pop(chanos_tasks *rt)
{
    chanos_task *t;

    if (atomic_load_explicit(&rt->inj_n, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&rt->q_lock);
    t = rt->inj_head;
    if (t != NULL) {
        rt->inj_head = t->next_;
        if (rt->inj_head == NULL)
            rt->inj_tail = NULL;
        atomic_fetch_sub_explicit(&rt->inj_n, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&rt->q_lock);
    return t;
}

int tasks_has_other_work_(struct worker *w)
{
    chanos_tasks *rt = w->rt;

    return cl_owner_nonempty(&w->dq) ||
           atomic_load_explicit(&rt->ready_n, memory_order_relaxed) > 0 ||
           atomic_load_explicit(&rt->inj_n, memory_order_relaxed) > 0;
}

/* ---- suspending and resuming ---- */

void tasks_release_(chanos_tasks *rt, struct waitpoint *wp)
{
    if (atomic_fetch_sub_explicit(&wp->count, 1, memory_order_acq_rel) == 1)
        tasks_make_ready_(rt, wp->fiber);
}

/* run_after does what the worker left to do once off the old stack. */
static void run_after(struct worker *w)
{
    enum after a = w->after;

    w->after = AFTER_NONE;
    switch (a) {
    case AFTER_NONE:
        break;
    case AFTER_RECYCLE:
        fiber_put(w->rt, w->after_fiber);
        break;
    case AFTER_READY:
        tasks_make_ready_(w->rt, w->after_fiber);
        break;
    case AFTER_RELEASE:
        tasks_release_(w->rt, w->after_wp);
        break;
    }
}

/* switch_from leaves the running fiber self for a ready fiber, or else a
 * fresh scheduling loop, with after to be done on the new stack, and
 * returns 0 when self is resumed; or, with neither to be had (no stack
 * left: fiber_get), returns -ENOMEM at once, having left nothing. */
static int switch_from(struct worker *w, struct fiber *self, enum after after,
                       struct waitpoint *wp)
{
    struct fiber *next = ready_pop(w->rt);

    if (next == NULL && (next = fiber_get(w->rt)) == NULL)
        return -ENOMEM;
    w->after = after;
    w->after_fiber = self;
    w->after_wp = wp;
    w->cur = next;
    fiber_bind(next, w);
    ctx_switch(&self->ctx, &next->ctx, 0);
    run_after(tasks_worker_());
    return 0;
}

/* wait_in_place is tasks_suspend_ without a stack to switch to: the task
 * keeps its worker until wp's events have all come (the count down to
 * the worker's token), spinning a moment, then yielding the CPU, then
 * sleeping a little longer each time, up to a millisecond. */
static void wait_in_place(chanos_tasks *rt, struct waitpoint *wp)
{
    struct timespec nap = { 0, 1000 };

    atomic_fetch_add_explicit(&rt->waits_in_place, 1, memory_order_relaxed);
    for (int i = 0; atomic_load_explicit(&wp->count, memory_order_acquire) != 1;) {
        if (i < 64) {
            tasks_relax_();
            i++;
        } else if (i < 128) {
            sched_yield();
            i++;
        } else {
            nanosleep(&nap, NULL);
            if (nap.tv_nsec < 1000000)
                nap.tv_nsec *= 2;
        }
    }
    atomic_store_explicit(&wp->count, 0, memory_order_relaxed); /* the token */
}

void tasks_suspend_(struct worker *w, struct waitpoint *wp)
{
    struct fiber *self = w->cur;

    wp->fiber = self;
    if (switch_from(w, self, AFTER_RELEASE, wp) != 0)
        wait_in_place(w->rt, wp);
}

/* leave_claim: whether the worker was asked to leave (leave 1), and, if
 * so, claims the leaving (leave 2), which set_workers can no longer take
 * back; a set_workers that grows again first takes back a request not yet
 * claimed (1 to 0), and keeps the thread. */
static int leave_claim(struct worker *w)
{
    int one = 1;

    return atomic_load_explicit(&w->leave, memory_order_relaxed) == 1 &&
           atomic_compare_exchange_strong(&w->leave, &one, 2);
}

/* worker_leave hands the worker's deque to the shared queue and returns
 * to the thread's own stack, leaving self to after (AFTER_RECYCLE: self
 * is done with; AFTER_READY: self goes on elsewhere, and this returns
 * there). */
static void worker_leave(struct worker *w, struct fiber *self, enum after after)
{
    chanos_tasks *rt = w->rt;
    chanos_task *t;
    int moved = 0;

    while ((t = cl_take(&w->dq)) != NULL) {
        inject_push(rt, t);
        moved = 1;
    }
    if (moved)
        wake_for_queue(rt);
    w->after = after;
    w->after_fiber = self;
    w->cur = NULL;
    ctx_switch(&self->ctx, &w->home, after == AFTER_RECYCLE);
    run_after(tasks_worker_());
}

/* ---- running tasks ---- */

/* publish makes the worker's private deque entries stealable, because a
 * thief or a sleeper asked (deque.h) or because a worker sleeps, and wakes
 * a sleeper if no worker is searching: a searcher finds the entries and
 * passes the wake-up on (stop_searching). One wake-up for however many
 * entries: the sleeper it wakes searches, and wakes the next. With
 * nothing private to publish, the request stays, so that the next spawn
 * publishes. A sleeper asks after it added itself to sleepers, so
 * cl_publish's acquire, reading its request, makes that count visible
 * here. */
static __attribute__((noinline)) void publish(struct worker *w, uintptr_t sp)
{
    chanos_tasks *rt = w->rt;

    if (!cl_publish(&w->dq))
        return;
    /* Entries of the running stack went public: its fast syncs must not
     * take them as private (chanos_fpop_). Someone wants work: if the
     * running task is below the part of it that the fast path records,
     * the spawns from sp back up to that part are recorded, one a level
     * (chanos_frun_now_), for the next request. */
    if (w->cur != NULL) {
        chanos_ctx *c = &w->cur->cctx;

        c->moves_++;
        if (sp < c->top_) {
            c->lo_ = sp;
            c->climb_ = 1;
        }
    }
    /* The bottom store before the loads below: a worker about to sleep
     * counts itself, fences, then looks at every bottom (worker_sleep),
     * and a searcher that stops does the same with searching
     * (stop_searching); with a fence on both sides, either it sees the
     * entries or we see it. Without one the loads may pass the store,
     * and a sleeper whose request cl_publish did not read then sleeps
     * beside entries that no later publish (none is left private) wakes
     * it for. Publishes come only on request, so it costs no spawn. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rt->sleepers, memory_order_relaxed) > 0 &&
        atomic_load_explicit(&rt->searching, memory_order_relaxed) == 0)
        wake(rt, 1);
}

/* call_task runs t's function; f is the fiber it runs on, NULL outside
 * the workers. */
static void call_task(struct fiber *f, chanos_task *t)
{
    unsigned kind = t->kind_ & CHANOS_TASK_KIND_MASK_;

    if (kind >= CHANOS_TASK_CVAL && f == NULL)
        abort(); /* the fast form runs on workers only (chanos_tasks.h) */
    switch (kind) {
    case CHANOS_TASK_I64:
        t->result_.i = t->fn_.i64(t->arg_.i);
        break;
    case CHANOS_TASK_PTR:
        t->result_.p = t->fn_.ptr(t->arg_.p);
        break;
    case CHANOS_TASK_F64:
        t->result_.d = t->fn_.f64(t->arg_.d);
        break;
    case CHANOS_TASK_CI64:
        t->result_.i = t->fn_.ci64(&f->cctx, t->arg_.i);
        break;
    case CHANOS_TASK_CPTR:
        t->result_.p = t->fn_.cptr(&f->cctx, t->arg_.p);
        break;
    case CHANOS_TASK_CF64:
        t->result_.d = t->fn_.cf64(&f->cctx, t->arg_.d);
        break;
    case CHANOS_TASK_CVAL:
        t->result_ = t->fn_.cval(&f->cctx, t->arg_);
        break;
    default:
        t->result_ = t->fn_.val(t->arg_);
        break;
    }
}

static void sync_frame(struct fiber *f, struct frame *fr);

/* exec_task runs t on the current fiber in a frame of its own, and syncs
 * its children before it returns. */
static void exec_task(struct fiber *f, chanos_task *t)
{
    struct frame fr;
    struct frame *outer = f->frame;

    fr.spawned = 0;
    atomic_init(&fr.wp.count, 0); /* wp.fiber is set by a suspension */
    f->frame = &fr;
    call_task(f, t);
    if (fr.spawned > 0)
        sync_frame(f, &fr);
    f->frame = outer;
}

static void sync_frame(struct fiber *f, struct frame *fr)
{
    struct worker *w = f->w;
    int k;

    if (leave_claim(w)) {
        worker_leave(w, f, AFTER_READY);
        w = f->w;
    }
    /* Our children not stolen are the newest entries of our deque, unless
     * the task moved to another worker since it spawned them. */
    while (fr->spawned > 0) {
        chanos_task *t;

        if (__builtin_expect(cl_wanted(&w->dq), 0))
            publish(w, chanos_sp_());
        t = cl_take(&w->dq);

        if (t == NULL)
            break;
        if ((t->kind_ & CHANOS_TASK_FAST_) || t->frame_ != fr) {
            (void)cl_push(&w->dq, t); /* where the take made room */
            break;
        }
        fr->spawned--;
        exec_task(f, t);
        w = f->w; /* the task may have moved while t ran */
    }
    if (fr->spawned == 0)
        return;
    /* The rest run elsewhere, and each drops one from wp.count when done:
     * add them, and our token. */
    k = (int)fr->spawned;
    fr->spawned = 0;
    if (atomic_fetch_add_explicit(&fr->wp.count, k + 1, memory_order_acq_rel) + k + 1 == 1) {
        atomic_store_explicit(&fr->wp.count, 0, memory_order_relaxed);
        return;
    }
    for (int i = 0; i < SYNC_SPIN; i++) {
        if (atomic_load_explicit(&fr->wp.count, memory_order_acquire) == 1) {
            atomic_store_explicit(&fr->wp.count, 0, memory_order_relaxed);
            return;
        }
        tasks_relax_();
    }
    tasks_suspend_(w, &fr->wp);
    atomic_store_explicit(&fr->wp.count, 0, memory_order_relaxed);
}

struct root {
    atomic_uint done;
};

/* A chanos_fspawn'd task's join_: NULL while it may run, JOIN_DONE once it
 * ran elsewhere, or the waitpoint of its owner waiting for it. */
#define JOIN_DONE ((void *)(uintptr_t)1)

/* fast_done: t, spawned by chanos_fspawn, ran on a worker other than its
 * owner's sync (a thief, or the scheduling loop after its owner's stack
 * left the worker). The exchange's release publishes t's result to the
 * owner's acquire; if the owner already waits, wake it. */
static void fast_done(chanos_tasks *rt, chanos_task *t)
{
    void *old = __atomic_exchange_n(&t->join_, JOIN_DONE, __ATOMIC_ACQ_REL);

    if (old != NULL)
        tasks_release_(rt, old);
}

/* run_top runs a task taken by the scheduling loop (not by its parent's
 * sync) and tells whoever waits for it. */
static void run_top(struct fiber *f, chanos_task *t)
{
    struct frame *parent;
    struct root *root;

    f->cctx.top_ = record_floor(f->rt);
    f->cctx.lo_ = f->cctx.top_;
    f->cctx.climb_ = 0;
    exec_task(f, t);
    if (t->kind_ & CHANOS_TASK_FAST_) {
        fast_done(f->rt, t);
        return;
    }
    parent = t->frame_;
    if (parent != NULL) {
        tasks_release_(f->rt, &parent->wp);
    } else if ((root = t->root_) != NULL) {
        atomic_store_explicit(&root->done, 1, memory_order_release);
        futex_wake(&root->done, 1);
    }
}

static chanos_task *steal(struct worker *w)
{
    chanos_tasks *rt = w->rt;
    unsigned n = atomic_load_explicit(&rt->nslots, memory_order_acquire);

    for (unsigned i = 0; i < 2 * n; i++) {
        unsigned v;
        chanos_task *t;

        w->rng ^= w->rng << 13;
        w->rng ^= w->rng >> 7;
        w->rng ^= w->rng << 17;
        v = (unsigned)(w->rng % n);
        if (v == w->id)
            continue;
        t = cl_steal(&rt->w[v].dq);
        if (t != NULL && t != CL_ABORT)
            return t;
        if (t == NULL) /* its private entries, if any: ask for them */
            cl_ask(&rt->w[v].dq);
    }
    return NULL;
}

static int work_visible(chanos_tasks *rt)
{
    unsigned n = atomic_load_explicit(&rt->nslots, memory_order_acquire);

    if (atomic_load_explicit(&rt->ready_n, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&rt->inj_n, memory_order_relaxed) > 0)
        return 1;
    for (unsigned i = 0; i < n; i++)
        if (cl_nonempty(&rt->w[i].dq))
            return 1;
    return 0;
}

/* stop_searching: a searching worker stops, to run what it found (a task,
 * a ready fiber) or to leave. A publish that saw it searching left the
 * wake-up to it, and a wake-up for several entries (a publish, a leaving
 * worker's deque) woke one sleeper: so the last searcher to stop wakes a
 * sleeper if more may be there. After a steal, always: the victim may
 * hold private entries that a sleeper asked for in a request the publish
 * consumed without waking it. Otherwise only if work is visible, so that
 * a worker woken for one ready fiber does not wake another for nothing;
 * the fence pairs with publish's (either we see its entries or it sees
 * us searching no more). */
static void stop_searching(chanos_tasks *rt, int stole)
{
    if (atomic_fetch_sub(&rt->searching, 1) != 1)
        return;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rt->sleepers, memory_order_relaxed) > 0 &&
        (stole || work_visible(rt)))
        wake(rt, 1);
}

static void worker_sleep(struct worker *w)
{
    chanos_tasks *rt = w->rt;
    unsigned e = atomic_load(&rt->epoch);
    unsigned n = atomic_load_explicit(&rt->nslots, memory_order_acquire);

    atomic_fetch_add(&rt->sleepers, 1);
    /* Every worker's private entries are invisible here: ask each owner
     * to publish them at its next spawn or pop, where it will see our
     * count in sleepers (cl_ask_sleeper's release, cl_publish's
     * acquire) and wake a sleeper. */
    for (unsigned i = 0; i < n; i++)
        if (i != w->id)
            cl_ask_sleeper(&rt->w[i].dq);
    atomic_thread_fence(memory_order_seq_cst);
    if (!work_visible(rt) && !atomic_load(&w->leave))
        futex_wait(&rt->epoch, e);
    atomic_fetch_sub(&rt->sleepers, 1);
}

/* sched_loop is the scheduling loop that every fiber starts with. */
static void sched_loop(struct fiber *self)
{
    chanos_tasks *rt = self->rt;
    unsigned idle = 0;
    int searching = 0;

    for (;;) {
        struct worker *w = self->w;
        chanos_task *t;
        struct fiber *f;
        int stole = 0;

        if (leave_claim(w)) {
            if (searching)
                stop_searching(rt, 0);
            worker_leave(w, self, AFTER_RECYCLE);
            abort(); /* a recycled fiber is never resumed */
        }
        if (cl_wanted(&w->dq))
            publish(w, chanos_sp_());
        t = cl_take(&w->dq);
        if (t == NULL) {
            f = ready_pop(rt);
            if (f != NULL) {
                if (searching)
                    stop_searching(rt, 0);
                w->after = AFTER_RECYCLE;
                w->after_fiber = self;
                w->cur = f;
                fiber_bind(f, w);
                ctx_switch(&self->ctx, &f->ctx, 1);
                abort();
            }
            t = inject_pop(rt);
            if (t == NULL) {
                t = steal(w);
                stole = 1;
            }
        }
        if (t != NULL) {
            if (searching) {
                searching = 0;
                stop_searching(rt, stole);
            }
            idle = 0;
            run_top(self, t);
            continue;
        }
        if (!searching) {
            searching = 1;
            atomic_fetch_add(&rt->searching, 1);
        }
        if (++idle < IDLE_ROUNDS) {
            tasks_relax_();
            continue;
        }
        idle = 0;
        searching = 0;
        atomic_fetch_sub(&rt->searching, 1);
        worker_sleep(w);
        /* Woken, or work came before it slept: it searches, and counts
         * as searching from now on. A wake-up is for one worker, so one
         * that finds work at its first look must pass the rest on, as any
         * searcher does (stop_searching): else a batch of entries woke
         * one sleeper only, and the others slept beside it. */
        searching = 1;
        atomic_fetch_add(&rt->searching, 1);
    }
}

static void fiber_entry(void *arg)
{
    struct fiber *f = arg;

#ifdef CHANOS_TASKS_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    run_after(tasks_worker_());
    sched_loop(f);
    abort();
}

/* ---- the public task calls ---- */

/* spawn_push_slow pushes when the array may be full (cl_push reloads top
 * and grows it), then publishes as chanos_task_spawn does. Apart, so that
 * the fast path saves no registers. A deque that cannot grow (no memory)
 * does not refuse the task: it goes to the shared queue, which links
 * tasks through themselves, and any worker runs it from there; its
 * parent's sync counts it as run elsewhere, as a stolen one. */
static __attribute__((noinline)) void spawn_push_slow(struct worker *w, chanos_task *t)
{
    if (!cl_push(&w->dq, t)) {
        atomic_fetch_add_explicit(&w->rt->deque_full, 1, memory_order_relaxed);
        inject_push(w->rt, t);
        wake_for_queue(w->rt);
        return;
    }
    if (cl_wanted(&w->dq))
        publish(w, chanos_sp_());
}

/*
 * The three calls below read the thread-local worker directly, not through
 * tasks_worker_: each reads it once, on entry, before anything can switch
 * stacks, and noinline keeps a caller in this file from merging that read
 * with one of its own across a switch.
 */
__attribute__((noinline)) void chanos_task_spawn(chanos_task *t)
{
    struct worker *w = tls_worker;
    struct fiber *f;
    struct frame *fr;

    if (w == NULL || (f = w->cur) == NULL || (fr = f->frame) == NULL) {
        call_task(w != NULL ? w->cur : NULL, t);
        return;
    }
    t->frame_ = fr;
    fr->spawned++;
    /* The push is private: no fence and no store to a shared line.
     * Thieves see the task once we publish, when one asked; a worker
     * about to sleep asks too (worker_sleep), so a sleeper is woken by
     * the first spawn after it slept. Publishing whenever a worker
     * sleeps, unasked, would wake it at every spawn until it runs: a
     * futex call each, for as long as a loaded machine gives it no CPU. */
    if (__builtin_expect(!cl_push_fast(&w->dq, t), 0)) {
        spawn_push_slow(w, t);
        return;
    }
    if (__builtin_expect(cl_wanted(&w->dq), 0))
        publish(w, chanos_sp_());
}

__attribute__((noinline)) void chanos_task_sync(void)
{
    struct worker *w = tls_worker;
    struct fiber *f;
    struct frame *fr;
    struct cl_deque *q;

    if (w == NULL || (f = w->cur) == NULL || (fr = f->frame) == NULL)
        return;
    /* The common case, without sync_frame's loop: one child left, the
     * newest private entry (so no thief can have it), and no request to
     * publish or to leave. */
    q = &w->dq;
    if (fr->spawned == 1 && q->o.head > q->o.pub && !cl_wanted(q) &&
        !atomic_load_explicit(&w->leave, memory_order_relaxed)) {
        chanos_task *t = cl_peek_private(q);

        if (!(t->kind_ & CHANOS_TASK_FAST_) && t->frame_ == fr) {
            q->o.head--;
            fr->spawned = 0;
            exec_task(f, t);
            return;
        }
    }
    sync_frame(f, fr);
}

/* ---- the fast path's out-of-line halves (chanos_tasks.h) ----
 *
 * chanos_fspawn and chanos_fsync run inline in the program, on the deque
 * of the worker that c->q_ names. They call in here only when the array
 * may be full, when someone asked this worker to publish (a thief, a
 * sleeper, or set_workers asking it to leave), and at a sync whose task is
 * not the newest private entry: a thief took it, or it went public, or the
 * task's stack moved to another worker since the spawn. */

/* fast_want: someone asked for a publish, at a fast-path spawn whose stack
 * pointer is sp. Publish, then leave if asked:
 * cl_publish's acquire exchange of the flag pairs with set_workers'
 * release store of it, after its store of leave. */
static void fast_want(chanos_ctx *c, uintptr_t sp)
{
    struct fiber *f = fiber_of(c);
    struct worker *w = f->w;

    publish(w, sp);
    if (leave_claim(w))
        worker_leave(w, f, AFTER_READY);
}

/* chanos_fpush_slow_: the spawn's index reached the limit: the array may
 * be full (cl_push reloads top, grows it if so, and raises the limit), or
 * someone asked for a publish. sp: the spawner's stack pointer. A deque
 * that cannot grow (no memory) does not refuse the task: it runs at once,
 * as a spawn below the record depth does, and its sync finds it done. */
void chanos_fpush_slow_(chanos_ctx *c, chanos_task *t, uintptr_t sp)
{
    struct fiber *f = fiber_of(c);
    struct cl_deque *q = &f->w->dq;

    if (!cl_push(q, t)) {
        atomic_fetch_add_explicit(&f->rt->deque_full, 1, memory_order_relaxed);
        call_task(f, t);
        t->idx_ = CHANOS_FRAN_;
        return;
    }
    if (__atomic_load_n(&q->o.limit, __ATOMIC_RELAXED) == CL_LIMIT_ASK ||
        cl_wanted(q))
        fast_want(c, sp);
}

/* chanos_fsync_slow_: t was not the newest private entry. Take the newest
 * entry, public or private, with cl_take (the Chase-Lev take when it is
 * public): if it is t, the caller runs it. Otherwise t ran, or runs,
 * elsewhere (stolen, handed over by a worker that left, or taken by the
 * scheduling loop of the worker this stack left): wait for its join_.
 * sp: the syncing function's stack pointer. */
int chanos_fsync_slow_(chanos_ctx *c, chanos_task *t, uintptr_t sp)
{
    struct fiber *f = fiber_of(c);
    struct worker *w = f->w;
    struct waitpoint wp;
    void *expect = NULL;
    chanos_task *x;

    if (leave_claim(w)) {
        worker_leave(w, f, AFTER_READY);
        w = f->w;
    }
    if (cl_wanted(&w->dq))
        publish(w, sp);
    x = cl_take(&w->dq);
    if (x == t)
        return 1;
    if (x != NULL) /* another stack's entry, left on this worker */
        (void)cl_push(&w->dq, x); /* where the take made room */
    for (int i = 0; i < SYNC_SPIN; i++) {
        if (__atomic_load_n(&t->join_, __ATOMIC_ACQUIRE) == JOIN_DONE)
            return 0;
        tasks_relax_();
    }
    /* Two to come: fast_done's release, and our token, dropped once this
     * stack is left. The CAS fails only if t is done meanwhile. */
    atomic_init(&wp.count, 2);
    if (!__atomic_compare_exchange_n(&t->join_, &expect, (void *)&wp, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    tasks_suspend_(w, &wp);
    return 0;
}

chanos_ctx *chanos_task_ctx(void)
{
    struct worker *w = tasks_worker_();

    if (w == NULL || w->cur == NULL)
        return NULL;
    return &w->cur->cctx;
}

void chanos_tasks_get_stats(chanos_tasks *rt, struct chanos_tasks_stats *st)
{
    pthread_mutex_lock(&rt->pool_lock);
    st->stacks = rt->nall;
    pthread_mutex_unlock(&rt->pool_lock);
    st->waits_in_place = atomic_load_explicit(&rt->waits_in_place, memory_order_relaxed);
    st->deque_full = atomic_load_explicit(&rt->deque_full, memory_order_relaxed);
}

int chanos_task_worker(void)
{
    struct worker *w = tasks_worker_();

    return w != NULL ? (int)w->id : -1;
}

void chanos_task_yield(void)
{
    struct worker *w = tasks_worker_();

    if (w == NULL || w->cur == NULL) {
        sched_yield();
        return;
    }
    if (switch_from(w, w->cur, AFTER_READY, NULL) != 0)
        sched_yield(); /* no stack for another scheduling loop */
}

__attribute__((noinline)) void chanos_task_call(chanos_task *t)
{
    struct worker *w = tls_worker;

    if (w == NULL || w->cur == NULL) {
        call_task(NULL, t);
        return;
    }
    exec_task(w->cur, t);
}

struct pfor {
    int64_t lo, hi, grain;
    void (*body)(int64_t, int64_t, void *);
    void *arg;
};

static void *pfor_task(void *arg)
{
    struct pfor *p = arg;
    struct pfor l = *p, r = *p;
    chanos_task tl, tr;
    int64_t mid;

    /* unsigned: a range wider than INT64_MAX must not wrap negative */
    uint64_t width = p->hi > p->lo ? (uint64_t)p->hi - (uint64_t)p->lo : 0;

    if (width <= (uint64_t)p->grain) {
        if (width > 0)
            p->body(p->lo, p->hi, p->arg);
        return NULL;
    }
    mid = (int64_t)((uint64_t)p->lo + width / 2);
    l.hi = mid;
    r.lo = mid;
    chanos_spawn(&tr, pfor_task, (void *)&r);
    chanos_task_set(&tl, pfor_task, (void *)&l);
    chanos_task_call(&tl);
    chanos_task_sync();
    return NULL;
}

void chanos_parallel_for(int64_t lo, int64_t hi, int64_t grain,
                         void (*body)(int64_t lo, int64_t hi, void *arg),
                         void *arg)
{
    struct pfor p = { lo, hi, grain > 0 ? grain : 1, body, arg };
    chanos_task t;

    if (hi <= lo)
        return;
    chanos_task_set(&t, pfor_task, (void *)&p);
    chanos_task_call(&t);
}

/* ---- workers ---- */

/* workers_changed tells chanos_tasks_wait_removed to look again. */
static void workers_changed(chanos_tasks *rt)
{
    atomic_fetch_add(&rt->wver, 1);
    futex_wake(&rt->wver, INT32_MAX);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    chanos_tasks *rt = w->rt;
    struct fiber *f;
    pthread_attr_t attr;

    tls_worker = w;
    /* libchanos's connection waits suspend the task, not this thread */
    chanos_set_waiter(&tasks_waiter_);
    /* Pin only a runtime that has a worker for every CPU it may use: one
     * with fewer leaves the placement to the kernel, so that processes
     * that each run a few workers (both ends of a connection) do not all
     * land on the first CPUs. */
    if (rt->pin && rt->ncpus > 0 && atomic_load(&rt->target) >= rt->ncpus) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(rt->cpus[w->id % rt->ncpus], &set);
        (void)sched_setaffinity(0, sizeof(set), &set); /* best effort */
    }
    memset(&w->home, 0, sizeof(w->home));
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        (void)pthread_attr_getstack(&attr, &w->home.stack_lo, &w->home.stack_size);
        pthread_attr_destroy(&attr);
    }
#ifdef CHANOS_TASKS_TSAN
    w->home.tsan_fiber = __tsan_get_current_fiber();
#endif
    f = w->first;
    w->first = NULL;
    w->cur = f;
    fiber_bind(f, w);
    w->after = AFTER_NONE;
    ctx_switch(&w->home, &f->ctx, 0);
    /* The worker left (worker_leave): what it left to do with the fiber. */
    run_after(w);
    chanos_set_waiter(NULL);
    tls_worker = NULL;
    atomic_fetch_sub(&rt->nthreads, 1);
    workers_changed(rt);
    return NULL;
}

static int worker_start(chanos_tasks *rt, unsigned i)
{
    struct worker *w = &rt->w[i];
    int err;

    w->rt = rt;
    w->id = i;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)tasks_now_ns_();
    if (w->rng == 0)
        w->rng = 1;
    atomic_store(&w->leave, 0);
    w->cur = NULL;
    w->after = AFTER_NONE;
    /* Its first stack is made here, so that a runtime out of stacks
     * refuses the worker rather than start a thread with none. */
    if ((w->first = fiber_get(rt)) == NULL)
        return -ENOMEM;
    atomic_fetch_add(&rt->nthreads, 1);
    err = pthread_create(&w->thread, NULL, worker_main, w);
    if (err != 0) {
        atomic_fetch_sub(&rt->nthreads, 1);
        fiber_put(rt, w->first);
        w->first = NULL;
        return -err;
    }
    w->running = 1;
    return 0;
}

/* workers_ask_leave asks the workers of slots [from, to) to leave, and
 * returns without waiting: each leaves at its next spawn that checks
 * (the fast path's), sync, or between tasks. The request flag too: the
 * fast path reads only that. Stored, not asked (cl_ask), so that the
 * owner's clearing of an earlier request cannot hide this one; the
 * release orders leave before it. */
static void workers_ask_leave(chanos_tasks *rt, unsigned from, unsigned to)
{
    for (unsigned i = from; i < to; i++) {
        int zero = 0;

        if (!rt->w[i].running)
            continue;
        (void)atomic_compare_exchange_strong(&rt->w[i].leave, &zero, 1);
        atomic_store_explicit(&rt->w[i].dq.want, 1, memory_order_release);
        cl_ask_limit(&rt->w[i].dq);
    }
    wake(rt, INT32_MAX);
}

/* worker_join waits for the thread of slot i, which claimed its leave. */
static void worker_join(chanos_tasks *rt, unsigned i)
{
    pthread_join(rt->w[i].thread, NULL);
    rt->w[i].running = 0;
}

int chanos_tasks_set_workers(chanos_tasks *rt, unsigned n)
{
    unsigned cur;
    int err = 0;

    if (rt == NULL || n < 1 || n > rt->max_workers || tasks_worker_() != NULL)
        return -EINVAL;
    pthread_mutex_lock(&rt->set_lock);
    cur = atomic_load(&rt->nworkers);
    atomic_store(&rt->target, n);
    if (n > cur) {
        if (atomic_load(&rt->nslots) < n)
            atomic_store_explicit(&rt->nslots, n, memory_order_release);
        for (unsigned i = cur; i < n; i++) {
            if (rt->w[i].running) {
                /* Removed earlier and not gone yet: take the request
                 * back if the worker has not claimed it, else wait for
                 * it, which is on its way out. */
                int one = 1;

                if (atomic_compare_exchange_strong(&rt->w[i].leave, &one, 0))
                    continue;
                worker_join(rt, i);
            }
            err = worker_start(rt, i);
            if (err != 0) {
                n = i;
                break;
            }
        }
    } else if (n < cur) {
        workers_ask_leave(rt, n, cur);
    }
    atomic_store(&rt->nworkers, n);
    pthread_mutex_unlock(&rt->set_lock);
    workers_changed(rt);
    return err;
}

unsigned chanos_tasks_workers(chanos_tasks *rt)
{
    return atomic_load(&rt->nworkers);
}

unsigned chanos_tasks_threads(chanos_tasks *rt)
{
    return atomic_load(&rt->nthreads);
}

void chanos_tasks_wait_removed(chanos_tasks *rt)
{
    for (;;) {
        unsigned e = atomic_load(&rt->wver);

        if (atomic_load(&rt->nthreads) <= atomic_load(&rt->nworkers))
            return;
        futex_wait(&rt->wver, e);
    }
}

int chanos_tasks_run(chanos_tasks *rt, chanos_task *t)
{
    struct root r;

    if (rt == NULL || t == NULL)
        return -EINVAL;
    if (tasks_worker_() != NULL) {
        /* From a task: a child, waited for at once. */
        chanos_task_spawn(t);
        chanos_task_sync();
        return 0;
    }
    atomic_init(&r.done, 0);
    t->frame_ = NULL;
    t->root_ = &r;
    inject_push(rt, t);
    wake_for_queue(rt);
    while (atomic_load_explicit(&r.done, memory_order_acquire) == 0)
        futex_wait(&r.done, 0);
    return 0;
}

int chanos_tasks_start(chanos_tasks **out, const struct chanos_tasks_opts *o)
{
    struct chanos_tasks_opts def = { 0 };
    chanos_tasks *rt;
    cpu_set_t set;
    unsigned n;
    int err;

    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (o == NULL)
        o = &def;
    rt = aligned_alloc(64, (sizeof(*rt) + 63) & ~(size_t)63);
    if (rt == NULL)
        return -ENOMEM;
    memset(rt, 0, sizeof(*rt));
    rt->page = (size_t)sysconf(_SC_PAGESIZE);
    rt->max_workers = o->max_workers ? o->max_workers : 256;
    rt->pin = !o->no_pin;
    {
        const char *env = getenv("CHANOS_TASKS_NO_PIN");

        if (env != NULL && env[0] != '\0' && strcmp(env, "0") != 0)
            rt->pin = 0;
    }
#ifdef CHANOS_TASKS_ASAN
    rt->stack_size = o->stack_size ? o->stack_size : 1024 * 1024;
#else
    rt->stack_size = o->stack_size ? o->stack_size : 256 * 1024;
#endif
    /* a stack the address space cannot hold, guard page included, is
     * refused here rather than rounded around to 0 */
    if (rt->stack_size > SIZE_MAX / 2) {
        free(rt);
        return -EINVAL;
    }
    rt->stack_size = (rt->stack_size + rt->page - 1) & ~(rt->page - 1);
    rt->record_depth = o->record_depth ? o->record_depth : RECORD_DEPTH;
    rt->max_stacks = o->max_stacks ? o->max_stacks : MAX_STACKS;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
        rt->cpus = calloc((size_t)CPU_COUNT(&set), sizeof(int));
        if (rt->cpus == NULL) {
            free(rt);
            return -ENOMEM;
        }
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                rt->cpus[rt->ncpus++] = c;
    }
    n = o->workers ? o->workers : (rt->ncpus ? rt->ncpus : 1);
    if (n > rt->max_workers) {
        free(rt->cpus);
        free(rt);
        return -EINVAL;
    }
    rt->w = aligned_alloc(64, ((size_t)rt->max_workers * sizeof(struct worker) + 63) & ~(size_t)63);
    if (rt->w == NULL) {
        free(rt->cpus);
        free(rt);
        return -ENOMEM;
    }
    memset(rt->w, 0, (size_t)rt->max_workers * sizeof(struct worker));
    for (unsigned i = 0; i < rt->max_workers; i++) {
        if (cl_init(&rt->w[i].dq, 256) != 0) {
            for (unsigned j = 0; j < i; j++)
                cl_destroy(&rt->w[j].dq);
            free(rt->w);
            free(rt->cpus);
            free(rt);
            return -ENOMEM;
        }
    }
    pthread_mutex_init(&rt->set_lock, NULL);
    pthread_mutex_init(&rt->q_lock, NULL);
    pthread_mutex_init(&rt->pool_lock, NULL);
    err = poller_start_(rt);
    if (err == 0)
        err = chanos_tasks_set_workers(rt, n);
    if (err != 0) {
        chanos_tasks_stop(rt);
        return err;
    }
    *out = rt;
    return 0;
}

void chanos_tasks_stop(chanos_tasks *rt)
{
    if (rt == NULL)
        return;
    pthread_mutex_lock(&rt->set_lock);
    workers_ask_leave(rt, 0, rt->max_workers);
    for (unsigned i = 0; i < rt->max_workers; i++)
        if (rt->w[i].running)
            worker_join(rt, i);
    atomic_store(&rt->nworkers, 0);
    pthread_mutex_unlock(&rt->set_lock);
    poller_stop_(rt);
    for (size_t i = 0; i < rt->nall; i++) {
#ifdef CHANOS_TASKS_TSAN
        if (rt->all[i]->ctx.tsan_fiber != NULL)
            __tsan_destroy_fiber(rt->all[i]->ctx.tsan_fiber);
#endif
        munmap(rt->all[i]->map, rt->all[i]->map_size);
        free(rt->all[i]);
    }
    free(rt->all);
    for (unsigned i = 0; i < rt->max_workers; i++)
        cl_destroy(&rt->w[i].dq);
    pthread_mutex_destroy(&rt->set_lock);
    pthread_mutex_destroy(&rt->q_lock);
    pthread_mutex_destroy(&rt->pool_lock);
    free(rt->w);
    free(rt->cpus);
    free(rt);
}
