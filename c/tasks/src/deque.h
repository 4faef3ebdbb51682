/*
 * deque.h: the per-worker work-stealing deque of chanos_tasks.
 *
 * The Chase-Lev deque (Chase and Lev, "Dynamic Circular Work-Stealing
 * Deque", SPAA'05) in C11 atomics, with the memory orders of the version
 * proven correct by N. M. Lê, A. Pop, A. Cohen and F. Zappa Nardelli,
 * "Correct and Efficient Work-Stealing for Weak Memory Models", PPoPP'13
 * (their Figure 1). The owner pushes and takes at the bottom; thieves steal
 * at the top. Nothing takes a lock.
 *
 * ThreadSanitizer does not model stand-alone fences, so under it the slot
 * and bottom accesses that the fences order are made release/acquire
 * themselves (a stronger ordering; the algorithm is unchanged).
 *
 * Arrays replaced by a grow stay allocated until the deque is destroyed: a
 * thief may still read from one (the paper leaves them too).
 */
#ifndef CHANOS_TASKS_DEQUE_H
#define CHANOS_TASKS_DEQUE_H

#include <chanos_tasks.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__SANITIZE_THREAD__)
#define CL_SLOT_STORE memory_order_release
#define CL_SLOT_LOAD  memory_order_acquire
#define CL_BOT_STORE  memory_order_release
#else
#define CL_SLOT_STORE memory_order_relaxed
#define CL_SLOT_LOAD  memory_order_relaxed
#define CL_BOT_STORE  memory_order_relaxed
#endif

struct cl_array {
    int64_t size; /* a power of two */
    struct cl_array *prev; /* the arrays it replaced, freed at destroy */
    _Atomic(chanos_task *) slot[];
};

struct cl_deque {
    _Alignas(64) _Atomic int64_t top;
    _Alignas(64) _Atomic int64_t bottom;
    _Atomic(struct cl_array *) array;
    char pad_[64 - sizeof(void *)];
};

/* What cl_steal returns when it lost a race: try again or elsewhere. */
#define CL_ABORT ((chanos_task *)(uintptr_t)1)

static inline struct cl_array *cl_array_new(int64_t size)
{
    struct cl_array *a = malloc(sizeof(*a) + (size_t)size * sizeof(a->slot[0]));

    if (a == NULL)
        abort(); /* a task cannot be refused once spawned */
    a->size = size;
    a->prev = NULL;
    for (int64_t i = 0; i < size; i++)
        atomic_init(&a->slot[i], NULL);
    return a;
}

static inline void cl_init(struct cl_deque *q, int64_t size)
{
    atomic_init(&q->top, 0);
    atomic_init(&q->bottom, 0);
    atomic_init(&q->array, cl_array_new(size));
}

static inline void cl_destroy(struct cl_deque *q)
{
    struct cl_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);

    while (a != NULL) {
        struct cl_array *p = a->prev;
        free(a);
        a = p;
    }
    atomic_store_explicit(&q->array, NULL, memory_order_relaxed);
}

/* cl_grow doubles the owner's array, copying the live entries [t, b). */
static inline struct cl_array *cl_grow(struct cl_deque *q, struct cl_array *a,
                                       int64_t t, int64_t b)
{
    struct cl_array *n = cl_array_new(a->size * 2);

    for (int64_t i = t; i < b; i++)
        atomic_store_explicit(&n->slot[i & (n->size - 1)],
                              atomic_load_explicit(&a->slot[i & (a->size - 1)],
                                                   memory_order_relaxed),
                              memory_order_relaxed);
    n->prev = a;
    atomic_store_explicit(&q->array, n, memory_order_release);
    return n;
}

/* cl_push: owner only. */
static inline void cl_push(struct cl_deque *q, chanos_task *x)
{
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    struct cl_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);

    if (b - t > a->size - 1)
        a = cl_grow(q, a, t, b);
    atomic_store_explicit(&a->slot[b & (a->size - 1)], x, CL_SLOT_STORE);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&q->bottom, b + 1, CL_BOT_STORE);
}

/* cl_take: owner only; NULL when empty. */
static inline chanos_task *cl_take(struct cl_deque *q)
{
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed) - 1;
    struct cl_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);
    int64_t t;
    chanos_task *x;

    atomic_store_explicit(&q->bottom, b, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    t = atomic_load_explicit(&q->top, memory_order_relaxed);
    if (t <= b) {
        x = atomic_load_explicit(&a->slot[b & (a->size - 1)], CL_SLOT_LOAD);
        if (t == b) {
            /* The last entry: race the thieves for it. */
            if (!atomic_compare_exchange_strong_explicit(
                    &q->top, &t, t + 1, memory_order_seq_cst,
                    memory_order_relaxed))
                x = NULL;
            atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
        }
        return x;
    }
    atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
    return NULL;
}

/* cl_steal: any thread; NULL when empty, CL_ABORT when it lost a race. */
static inline chanos_task *cl_steal(struct cl_deque *q)
{
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    int64_t b;

    atomic_thread_fence(memory_order_seq_cst);
    b = atomic_load_explicit(&q->bottom, memory_order_acquire);
    if (t < b) {
        /* The paper loads the array with consume; acquire is what
         * compilers implement consume as. */
        struct cl_array *a = atomic_load_explicit(&q->array, memory_order_acquire);
        chanos_task *x = atomic_load_explicit(&a->slot[t & (a->size - 1)], CL_SLOT_LOAD);

        if (!atomic_compare_exchange_strong_explicit(
                &q->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
            return CL_ABORT;
        return x;
    }
    return NULL;
}

/* cl_nonempty: a hint, from any thread. */
static inline int cl_nonempty(struct cl_deque *q)
{
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_acquire);

    return t < b;
}

#endif
