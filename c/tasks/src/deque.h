/*
 * deque.h: the per-worker work-stealing deque of chanos_tasks.
 *
 * A split deque: a private part that only its owner touches, below a
 * Chase-Lev deque that thieves steal from.
 *
 * The public part is the Chase-Lev deque (Chase and Lev, "Dynamic Circular
 * Work-Stealing Deque", SPAA'05) in C11 atomics, with the memory orders of
 * the version proven correct by N. M. Le, A. Pop, A. Cohen and F. Zappa
 * Nardelli, "Correct and Efficient Work-Stealing for Weak Memory Models",
 * PPoPP'13 (their Figure 1). Thieves steal at top with exactly that
 * algorithm.
 *
 * The split follows Wool's private tasks (K.-F. Faxen, "Efficient Work
 * Stealing for Fine Grained Parallelism", ICPP 2010) and Lace's split
 * deque (T. van Dijk and J. van de Pol, "Lace: Non-blocking Split Deque
 * for Work-Stealing", Euro-Par 2014 workshops): the entries [top, bottom)
 * are public, and [bottom, head) are private. Thieves see bottom only, so
 * the owner pushes and pops private entries with plain owner-only
 * accesses: no fence, no read-modify-write, no access to a line a thief
 * writes except the want flag, which it only reads. A thief that finds the
 * public part empty sets want (as does a worker about to sleep); the
 * owner, at its next spawn or pop, publishes every private entry at once
 * with the Chase-Lev push's release fence and bottom store. Once the
 * private part is empty, the owner pops with the Chase-Lev take and its
 * sequentially consistent fence. So only an entry a thief could see costs
 * synchronisation.
 *
 * Why this is Chase-Lev for the thieves. Thieves read only top, bottom,
 * array and the slots in [top, bottom). The owner writes a private entry
 * only at index head >= bottom, with head - top < size (grow otherwise),
 * so never a slot a thief may still take; a thief holding a stale top
 * fails its CAS on top, as in Chase-Lev. Publishing k entries is k
 * Chase-Lev pushes of which thieves do not see the intermediate bottoms:
 * the slot stores come before the release fence, and the bottom store
 * after it. A private entry is a Chase-Lev push that has written its slot
 * but not yet bottom, and a private pop undoes that push. No thief can
 * take it: a steal of index t succeeds only after the thief read, past its
 * seq_cst fence, a bottom above t; bottom covered the index only before a
 * take lowered it (the take's bottom store, then its fence), and a thief
 * whose top read shows t came after that fence in the seq_cst order, so
 * it reads the lowered bottom or a later one (C11 [atomics.order], the
 * fence rules that Le et al.'s proof uses for the take); if top was t
 * already at that fence, the take found the last entry and its CAS moved
 * top past t, so a steal from t fails. The owner keeps
 * private copies of the
 * values only it writes (bottom, array) and a lower bound of top (top only
 * grows), and reloads top only when the bound says the array may be full.
 *
 * The inline fast path of chanos_tasks.h (chanos_fspawn) reads neither
 * want nor top: it compares head with o.limit, which is top_low + size
 * (the array may be full at or above it) or CL_LIMIT_ASK, written by
 * whoever asks for a publish (cl_ask_limit, after want), so that one
 * compare covers both. docs/tasks.md, "Why it is safe against thieves",
 * has the argument.
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
    /* What thieves read: the public end, the array, and the request to
     * publish (set by thieves, cleared by the owner). */
    _Alignas(64) _Atomic int64_t bottom;
    _Atomic(struct cl_array *) array;
    atomic_int want;
    /* The owner's: the private end, its copies of bottom and of the
     * array (its slots and mask too, for the inline fast path of
     * chanos_tasks.h), a lower bound of top, and the fast path's limit,
     * which requesters also write (cl_ask_limit). */
    _Alignas(64) struct chanos_deq_own_ o;
    struct cl_array *arr;
    /* After a growth that failed (no memory), how many more times a full
     * array is taken as full without trying again: a failing malloc
     * costs system calls, and the spawns meanwhile go elsewhere. */
    int grow_wait;
};

/* How many full pushes a failed growth skips before the next try. */
#define CL_GROW_WAIT 4096

/* The owner's limit once someone asked for a publish: every spawn of the
 * fast path then takes its slow path. */
#define CL_LIMIT_ASK INT64_MIN

/* What cl_steal returns when it lost a race: try again or elsewhere. */
#define CL_ABORT ((chanos_task *)(uintptr_t)1)

/* cl_array_new returns an array of size slots, or NULL if malloc
 * refuses it. */
static inline struct cl_array *cl_array_new(int64_t size)
{
    struct cl_array *a = malloc(sizeof(*a) + (size_t)size * sizeof(a->slot[0]));

    if (a == NULL)
        return NULL;
    a->size = size;
    a->prev = NULL;
    for (int64_t i = 0; i < size; i++)
        atomic_init(&a->slot[i], NULL);
    return a;
}

/* cl_set_arr: owner only; makes a the owner's array, with the copies
 * the inline fast path reads. The slots are _Atomic(chanos_task *), which
 * chanos_tasks.h reads and writes with __atomic builtins as plain
 * pointers: the same representation. */
static inline void cl_set_arr(struct cl_deque *q, struct cl_array *a)
{
    q->arr = a;
    q->o.slot = (chanos_task **)a->slot;
    q->o.mask = a->size - 1;
}

/* cl_limit: owner only; raises the fast path's limit after top_low or the
 * array grew, unless a request lowered it (then the CAS fails, or is not
 * tried, and the request stays for the next spawn). A stale limit is only
 * lower than it could be: top_low and the size only grow. */
static inline void cl_limit(struct cl_deque *q)
{
    int64_t old = __atomic_load_n(&q->o.limit, __ATOMIC_RELAXED);

    if (old != CL_LIMIT_ASK)
        (void)__atomic_compare_exchange_n(&q->o.limit, &old,
                                          q->o.top_low + q->arr->size, 0,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* cl_init makes q empty with an array of size slots: 0, or -1 if there
 * is no memory for it. */
static inline int cl_init(struct cl_deque *q, int64_t size)
{
    struct cl_array *a = cl_array_new(size);

    if (a == NULL)
        return -1;
    atomic_init(&q->top, 0);
    atomic_init(&q->bottom, 0);
    atomic_init(&q->want, 0);
    cl_set_arr(q, a);
    atomic_init(&q->array, q->arr);
    q->o.head = 0;
    q->o.pub = 0;
    q->o.top_low = 0;
    q->o.limit = size;
    q->grow_wait = 0;
    return 0;
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
    q->arr = NULL;
    q->o.slot = NULL;
}

/* cl_grow doubles the owner's array, copying the entries [t, h), public
 * and private. Thieves that loaded the old array still find the public
 * entries there; the release store orders the copy before the array, and
 * the array before any later bottom store (publish), so a thief that sees
 * the later bottom sees this array. NULL, and the deque as it was, if
 * there is no memory for the new array. */
static __attribute__((unused)) struct cl_array *cl_grow(struct cl_deque *q, struct cl_array *a,
                                int64_t t, int64_t h)
{
    struct cl_array *n = cl_array_new(a->size * 2);

    if (n == NULL)
        return NULL;
    for (int64_t i = t; i < h; i++)
        atomic_store_explicit(&n->slot[i & (n->size - 1)],
                              atomic_load_explicit(&a->slot[i & (a->size - 1)],
                                                   memory_order_relaxed),
                              memory_order_relaxed);
    n->prev = a;
    atomic_store_explicit(&q->array, n, memory_order_release);
    cl_set_arr(q, n);
    return n;
}

/* cl_full_slow: owner only. The array may be full: reload top, and grow
 * if it is; NULL if it is full and cannot grow. */
static __attribute__((noinline, unused)) struct cl_array *cl_full_slow(struct cl_deque *q)
{
    struct cl_array *a = q->arr;

    q->o.top_low = atomic_load_explicit(&q->top, memory_order_acquire);
    if (q->o.head - q->o.top_low > a->size - 1) {
        if (q->grow_wait > 0) {
            q->grow_wait--;
            a = NULL;
        } else if ((a = cl_grow(q, a, q->o.top_low, q->o.head)) == NULL) {
            q->grow_wait = CL_GROW_WAIT;
        }
    }
    cl_limit(q);
    return a;
}

/* cl_push: owner only. Pushes x on the private part: no thief can see it
 * until cl_publish. 1, or 0 (and nothing pushed) when the array is full
 * and there is no memory to grow it. */
static inline int cl_push(struct cl_deque *q, chanos_task *x)
{
    int64_t h = q->o.head;
    struct cl_array *a = q->arr;

    if (__builtin_expect(h - q->o.top_low > a->size - 1, 0) && (a = cl_full_slow(q)) == NULL)
        return 0;
    atomic_store_explicit(&a->slot[h & (a->size - 1)], x, CL_SLOT_STORE);
    q->o.head = h + 1;
    return 1;
}

/* cl_push_fast: owner only. cl_push when the owner's bound of top shows
 * room; 0 (and nothing pushed) when cl_push must check. */
static inline int cl_push_fast(struct cl_deque *q, chanos_task *x)
{
    int64_t h = q->o.head;
    struct cl_array *a = q->arr;

    if (h - q->o.top_low > a->size - 1)
        return 0;
    atomic_store_explicit(&a->slot[h & (a->size - 1)], x, CL_SLOT_STORE);
    q->o.head = h + 1;
    return 1;
}

/* cl_wanted: owner only; whether a thief or a sleeper asked the owner to
 * publish. A hint: a relaxed load of a line that thieves only read while
 * they find work. */
static inline int cl_wanted(struct cl_deque *q)
{
    return atomic_load_explicit(&q->want, memory_order_relaxed) != 0;
}

/* cl_publish: owner only. Makes every private entry public: the Chase-Lev
 * push's release fence and bottom store, once for all of them. The
 * exchanges clear the request, the limit first: a request whose limit
 * store the first misses (it comes later) leaves the limit lowered for
 * the next spawn; one whose limit store it reads (acquire), the second
 * reads its want too. The acquire of want pairs with the release store of
 * the request, so that the owner then sees what the requester did before
 * it asked (a sleeper's count in rt->sleepers). With nothing private, the
 * request stays for the next spawn; 0 then, else 1. */
static inline int cl_publish(struct cl_deque *q)
{
    if (q->o.head == q->o.pub)
        return 0;
    (void)__atomic_exchange_n(&q->o.limit, q->o.top_low + q->arr->size,
                              __ATOMIC_ACQUIRE);
    (void)atomic_exchange_explicit(&q->want, 0, memory_order_acquire);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&q->bottom, q->o.head, CL_BOT_STORE);
    q->o.pub = q->o.head;
    return 1;
}

/* cl_take_public: owner only, with no private entry (head == pub ==
 * bottom): the Chase-Lev take. */
static __attribute__((noinline, unused)) chanos_task *cl_take_public(struct cl_deque *q)
{
    int64_t b = q->o.pub - 1;
    struct cl_array *a = q->arr;
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
            q->o.head = q->o.pub = b + 1;
            q->o.top_low = b + 1;
            cl_limit(q);
            return x;
        }
        q->o.head = q->o.pub = b;
        q->o.top_low = t;
        cl_limit(q);
        return x;
    }
    atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
    q->o.head = q->o.pub = b + 1;
    q->o.top_low = t;
    cl_limit(q);
    return NULL;
}

/* cl_take: owner only; NULL when empty. A private entry costs no
 * synchronisation; a public one costs the Chase-Lev take. */
static inline chanos_task *cl_take(struct cl_deque *q)
{
    int64_t h = q->o.head;

    if (h > q->o.pub) {
        struct cl_array *a = q->arr;

        q->o.head = --h;
        return atomic_load_explicit(&a->slot[h & (a->size - 1)],
                                    memory_order_relaxed);
    }
    /* top only grows: pub <= top_low means the public part is empty too. */
    if (q->o.pub <= q->o.top_low)
        return NULL;
    return cl_take_public(q);
}

/* cl_peek_private: owner only, with a private entry (head > pub); the
 * newest entry, left in place. */
static inline chanos_task *cl_peek_private(struct cl_deque *q)
{
    struct cl_array *a = q->arr;

    return atomic_load_explicit(&a->slot[(q->o.head - 1) & (a->size - 1)],
                                memory_order_relaxed);
}

/* cl_owner_nonempty: owner only; whether a take could find an entry. */
static inline int cl_owner_nonempty(struct cl_deque *q)
{
    return q->o.head > q->o.pub ||
           atomic_load_explicit(&q->top, memory_order_acquire) < q->o.pub;
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

/* cl_ask_limit: any thread; lowers the owner's limit so that its next
 * fast-path spawn takes the slow path and publishes. After the store of
 * want, with release: cl_publish's acquire exchange of the limit, reading
 * it, then reads want set. Written only when want was clear, so that
 * idle thieves do not write the owner's line over and over. */
static inline void cl_ask_limit(struct cl_deque *q)
{
    __atomic_store_n(&q->o.limit, CL_LIMIT_ASK, __ATOMIC_RELEASE);
}

/* cl_ask: any thread but the owner; asks the owner to publish its private
 * entries at its next spawn or pop. The release pairs with cl_publish's
 * acquire. The load first keeps idle thieves from writing the line over
 * and over. */
static inline void cl_ask(struct cl_deque *q)
{
    if (atomic_load_explicit(&q->want, memory_order_relaxed) == 0) {
        atomic_store_explicit(&q->want, 1, memory_order_release);
        cl_ask_limit(q);
    }
}

/* cl_ask_sleeper: cl_ask for a worker about to sleep, which added itself
 * to sleepers first: it stores the request even when one is pending, so
 * that the owner's acquire exchange in cl_publish reads this store (and
 * then sees the count) or a later one (then the request stays for the
 * owner's next spawn). A pending thief's request, written before the
 * count, would not carry it. Once per sleep. */
static inline void cl_ask_sleeper(struct cl_deque *q)
{
    atomic_store_explicit(&q->want, 1, memory_order_release);
    cl_ask_limit(q);
}

/* cl_nonempty: a hint, from any thread; the public part only. */
static inline int cl_nonempty(struct cl_deque *q)
{
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_acquire);

    return t < b;
}

#endif
