/*
 * conn.c: rpc over a ump connection (docs/c-domains.md): call ids and
 * deadlines patched into encoded calls, replies matched by call id, error
 * replies and cancels (docs/wire.md). The generated code encodes and
 * decodes the bodies.
 *
 * Threads: one sender and one receiver at a time, enforced with two atomic
 * flags; a second concurrent sender (or receiver) gets CHANOS_ERR_BUSY.
 */
#include <chanos.h>

#include "internal.h"
#include "spin.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A frame kept in a connection's inbox: its descriptors and its bytes
 * (the metadata trailer's entries included) follow it, in one
 * allocation, and f points into them. */
struct kept {
    struct kept *next;
    struct chanos_frame f;
    size_t size; /* the bytes, as counted against CHANOS_CONN_INBOX_BYTES */
    int64_t deadline; /* a call's, from its arrival (see handling); -1: none */
    int fds[];
};

struct chanos_conn {
    chanos_ump *u;
    /* or another link (chanos_conn_new_link), u being NULL */
    const struct chanos_link_ops *ops;
    void *link;
    atomic_flag sending;
    atomic_flag receiving;
    uint32_t next_call; /* touched by the sender only */
    bool wrapped;       /* next_call has wrapped around; the sender's too */
    /*
     * The ids of abandoned calls (timed out or cancelled), whose late
     * replies the receive side drops: a ring of CHANOS_CONN_ABANDONED_MAX
     * slots, 0 when free (no call has id 0), the oldest overwritten when
     * it is full. The sender adds (chanos_conn_cancel) while the receiver
     * takes, so the ring is guarded by a spin lock held for a few
     * instructions; nabandoned lets the receiver skip it when empty.
     */
    atomic_flag abandon_lock;
    atomic_uint nabandoned;
    unsigned abandon_next;
    uint32_t abandoned[CHANOS_CONN_ABANDONED_MAX];
    uint8_t *scratch; /* chanos_conn_buf's, of scratch_len bytes */
    size_t scratch_len;
    /* room for the descriptors of a frame being encoded (chanos_conn_buf)
     * and of the frame received last */
    int sfds[CHANOS_UMP_MAX_FDS];
    int rfds[CHANOS_UMP_MAX_FDS];
    /* the metadata of the frame received last (chanos_conn_meta) */
    const uint8_t *meta;
    size_t meta_len;
    /* the trailer every call carries (chanos_conn_set_meta), entries and
     * length, and the buffer a call is copied into to append it */
    uint8_t *out_meta;
    size_t out_meta_len;
    uint8_t *meta_frame;
    size_t meta_frame_cap;
    /* the trailer the next reply or error reply carries
     * (chanos_conn_set_reply_meta), taken by that reply's send */
    uint8_t *reply_meta;
    size_t reply_meta_len;
    struct chanos_peer *peer; /* chanos_accept's client, or NULL */
    /* the key of the domain whose connection between machines this is
     * (chanos_conn_set_domain_), which binds the endpoints it receives;
     * 0: none */
    uint64_t dkey;
    chanos_export_endpoint_fn_ export_endpoint; /* the domain's; NULL: none */
    /* the status of the error reply that ended the last call
     * (chanos_conn_status): its code (0: the last call did not end in
     * one) and a copy of its detail, whose buffer is allocated at the
     * first error reply; it outlives the ring slot the reply came in */
    uint64_t status_code;
    char *status_detail;
    size_t status_len;
    /* the detail a handler gives the error reply it is about to return
     * (chanos_conn_set_detail), sent and cleared by the dispatch */
    char *reply_detail;
    bool has_reply_detail;
    /* the wire fault that ended the last stub call or dispatch
     * (chanos_conn_fault), code 0 if none: the generated code encodes
     * through chanos_conn_buf, whose buffer points here, and decodes
     * into it; and the connection's own refusals of a frame or an
     * argument are described here (refuse). It is written only when a
     * call fails, by the thread that made it. */
    struct chanos_wire_fault fault;
    /*
     * The inbox: the frames a call read past on its way to its reply
     * (chanos_conn_call without other), oldest first, which the receives
     * return before they read the link; nkept and kept_bytes bound it
     * (CHANOS_CONN_INBOX_MAX, CHANOS_CONN_INBOX_BYTES). given is the
     * frame the last receive took from it, whose bytes live until the
     * next receive, as a frame of the ring does. Only the receiving side
     * touches them.
     */
    struct kept *kept_head, *kept_tail, *given;
    unsigned nkept;
    size_t kept_bytes;
    /* The call a handler is serving, the frame the receives gave last if
     * it is one: its id (0: that frame is no call), its deadline
     * (CLOCK_MONOTONIC ns: the call's timeout_us from its arrival; -1:
     * none), and whether its cancel has been seen. The receiving side's. */
    uint32_t cur_call;
    int64_t cur_deadline;
    bool cur_cancelled;
};

/* An error reply: header, code (u64), detail (u32 length and bytes). */
#define STATUS_FRAME_MAX (CHANOS_HEADER_SIZE + 12 + CHANOS_STATUS_DETAIL_MAX)

int chanos_conn_new(chanos_ump *u, chanos_conn **out)
{
    struct chanos_conn *c;

    *out = NULL;
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        chanos_ump_close(u);
        return -ENOMEM;
    }
    c->u = u;
    atomic_flag_clear(&c->sending);
    atomic_flag_clear(&c->receiving);
    atomic_flag_clear(&c->abandon_lock);
    atomic_init(&c->nabandoned, 0);
    *out = c;
    return 0;
}

void chanos_conn_close(chanos_conn *c)
{
    if (c == NULL)
        return;
    free(c->given); /* its descriptors went to whoever received it */
    while (c->kept_head != NULL) {
        struct kept *k = c->kept_head;

        c->kept_head = k->next;
        chanos_frame_close_fds(&k->f); /* never received: still ours */
        free(k);
    }
    if (c->ops != NULL)
        c->ops->close(c->link);
    else
        chanos_ump_close(c->u);
    free(c->scratch);
    free(c->peer);
    free(c->out_meta);
    free(c->meta_frame);
    free(c->reply_meta);
    free(c->status_detail);
    free(c->reply_detail);
    free(c);
}

int chanos_conn_buf(chanos_conn *c, struct chanos_buf *b, size_t size)
{
    if (size > c->scratch_len) {
        uint8_t *p = realloc(c->scratch, size);

        if (p == NULL)
            return -ENOMEM;
        c->scratch = p;
        c->scratch_len = size;
    }
    chanos_buf_init(b, c->scratch, c->scratch_len, c->sfds, CHANOS_UMP_MAX_FDS);
    /* a stub's call or a dispatch's reply starts here: an earlier fault
     * is not this one's */
    c->fault.code = 0;
    b->fault = &c->fault;
    return 0;
}

const struct chanos_wire_fault *chanos_conn_fault(const chanos_conn *c)
{
    return c->fault.code != 0 ? &c->fault : NULL;
}

struct chanos_wire_fault *chanos_conn_fault_(chanos_conn *c)
{
    if (c == NULL) /* a dispatch run outside a connection: nowhere */
        return NULL;
    c->fault.code = 0;
    return &c->fault;
}

/* Offsets of the header's fields (docs/wire.md, "Frame header"). */
enum { OFF_FLAGS = 6, OFF_NCAPS = 7 };

/* refuse(c, err, off, field, fmt, ...) describes why the connection c
 * refuses a frame or an argument in its fault record, and returns err. */
#define refuse(c, ...) chanos_conn_refuse_(&(c)->fault, __VA_ARGS__)

/* not_kind refuses frame[0..len), given to be sent as a frame of kind
 * (what, "a call", "a reply"), with HEADER. */
static int not_kind(chanos_conn *c, const uint8_t *frame, size_t len,
                    const char *what)
{
    if (len < CHANOS_HEADER_SIZE)
        return refuse(c, CHANOS_ERR_HEADER, 0, NULL,
                      "frame of %zu bytes is shorter than the %d-byte header, "
                      "not %s",
                      len, CHANOS_HEADER_SIZE, what);
    return refuse(c, CHANOS_ERR_HEADER, OFF_FLAGS, NULL,
                  "flags 0x%02x, not those of %s", (unsigned)frame[OFF_FLAGS],
                  what);
}

chanos_ump *chanos_conn_ump(chanos_conn *c) { return c->u; }

void *chanos_conn_link(chanos_conn *c) { return c->link; }

int chanos_conn_fd(chanos_conn *c)
{
    if (c->ops != NULL)
        return c->ops->fd != NULL ? c->ops->fd(c->link) : -1;
    return chanos_ump_fd(c->u);
}

int chanos_conn_new_link(const struct chanos_link_ops *ops, void *link,
                         chanos_conn **out)
{
    int rc;

    if (ops == NULL || link == NULL || out == NULL) {
        if (ops != NULL && link != NULL)
            ops->close(link);
        return -EINVAL;
    }
    /* chanos_conn_new without a ump sets up the rest. */
    rc = chanos_conn_new(NULL, out);
    if (rc != 0) {
        ops->close(link);
        return rc;
    }
    (*out)->ops = ops;
    (*out)->link = link;
    return 0;
}

void chanos_conn_set_domain_(chanos_conn *c, uint64_t key,
                             chanos_export_endpoint_fn_ export_endpoint)
{
    c->dkey = key;
    c->export_endpoint = export_endpoint;
}

int chanos_conn_peer_gone(chanos_conn *c)
{
    if (c->ops != NULL)
        return c->ops->peer_gone(c->link);
    return chanos_ump_peer_gone(c->u);
}

/*
 * send_refs sends a frame with capabilities on a link between machines
 * (docs/capabilities.md, "Between machines"): only channel endpoints
 * cross, as the irefs that re-bind them. An endpoint that came from
 * another machine passes on as it came; anything else is refused with
 * CHANOS_ERR_CAP, and the connection goes on.
 */
static int send_refs(chanos_conn *c, const void *frame, size_t len,
                     const int *fds, uint32_t nfds, int timeout_ms)
{
    uint8_t refs[CHANOS_UMP_MAX_FDS * CHANOS_IREF_WIRE_SIZE];
    void *made[CHANOS_UMP_MAX_FDS];
    const struct chanos_net_binder *net = NULL;
    uint32_t nmade = 0, i;
    int rc = 0;

    if (c->ops->send_refs == NULL)
        return refuse(c, CHANOS_ERR_CAP, OFF_NCAPS, NULL,
                      "%u capabilities on a link that carries none",
                      (unsigned)nfds);
    for (i = 0; i < nfds && rc == 0; i++) {
        struct chanos_iref r;
        uint8_t *b = refs + (size_t)i * CHANOS_IREF_WIRE_SIZE;

        /* An endpoint of this machine is exported for the other one to
         * bind, and relayed by the binder; one that came from another
         * machine passes on as it came. */
        if (chanos_endpoint_ref(fds[i], &r) != 0) {
            rc = c->export_endpoint == NULL
                     ? CHANOS_ERR_CAP
                     : c->export_endpoint(c->dkey, fds[i], &r, &made[nmade],
                                          &net);
            if (rc == CHANOS_ERR_CAP)
                refuse(c, rc, -1, NULL,
                       "capability %u is not a channel endpoint that can "
                       "cross machines",
                       (unsigned)i);
            if (rc != 0)
                break;
            nmade++;
        }
        chanos_store_u64(b, r.machine);
        chanos_store_u64(b + 8, r.export_id);
        memcpy(b + 16, r.token, sizeof r.token);
    }
    if (rc == 0)
        rc = c->ops->send_refs(c->link, frame, len, refs, nfds, timeout_ms);
    for (i = 0; i < nmade; i++)
        net->endpoint_sent(made[i], rc == 0);
    return rc;
}

/* recv_refs turns the n irefs refs of a frame received between machines
 * into endpoints (chanos_endpoint_open binds them) in c->rfds. */
static int recv_refs(chanos_conn *c, const uint8_t *refs, uint32_t n)
{
    if (n > CHANOS_UMP_MAX_FDS) /* more than a frame on one machine holds */
        return refuse(c, CHANOS_ERR_CAP, OFF_NCAPS, NULL,
                      "header ncaps %u exceeds the %u capabilities of a frame",
                      (unsigned)n, (unsigned)CHANOS_UMP_MAX_FDS);
    for (uint32_t i = 0; i < n; i++) {
        int rc = chanos_endpoint_remote_(
            c->dkey, refs + (size_t)i * CHANOS_IREF_WIRE_SIZE, &c->rfds[i]);

        if (rc != 0) {
            while (i > 0)
                close(c->rfds[--i]);
            return rc;
        }
    }
    return 0;
}

/* ---- waiting through the thread's waiter (chanos_set_waiter) ---- */

static _Thread_local const struct chanos_waiter *tls_waiter;

void chanos_set_waiter(const struct chanos_waiter *w)
{
    tls_waiter = w;
}

/* thread_waiter reads the waiter of the running thread. A task can
 * resume on another thread after a wait, so the compiler must not keep
 * the thread-local's address across one: the function is opaque to it. */
__attribute__((noinline)) static const struct chanos_waiter *thread_waiter(void)
{
    const struct chanos_waiter *w = tls_waiter;

    __asm__ volatile("" : "+r"(w) : : "memory");
    return w;
}

static int64_t deadline_ns(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ns() + (int64_t)timeout_ms * 1000000;
}

/* left_ms is the timeout left until deadline (-1: none), for a wait that
 * blocks the thread after all. */
static int left_ms(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = (deadline - now_ns() + 999999) / 1000000;
    return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* await_fd waits through the thread's waiter w until fd polls readable
 * or deadline passes; then try runs once more. It returns try's result,
 * CHANOS_ERR_TIMEDOUT, or the waiter's error. try must arm fd when it
 * finds nothing (CHANOS_ERR_AGAIN). block is the thread's own wait, for
 * a task that resumes on a thread without a waiter. */
static int await_fd(const struct chanos_waiter *w, int fd, int64_t deadline,
                    int (*try)(void *a, void *b), int (*block)(void *a, void *b, int timeout_ms),
                    void *a, void *b)
{
    for (;;) {
        int rc = try(a, b);

        if (rc != CHANOS_ERR_AGAIN)
            return rc;
        rc = w->wait(w->arg, fd, deadline);
        if (rc == CHANOS_ERR_TIMEDOUT) {
            rc = try(a, b);
            return rc == CHANOS_ERR_AGAIN ? CHANOS_ERR_TIMEDOUT : rc;
        }
        if (rc < 0)
            return rc;
        if ((w = thread_waiter()) == NULL)
            return block(a, b, left_ms(deadline));
    }
}

/* A ump send waiting for ring space through the thread's waiter. */
struct ump_send {
    chanos_ump *u;
    const void *frame;
    size_t len;
    const int *fds;
    uint32_t nfds;
};

static int try_ump_send(void *a, void *unused)
{
    struct ump_send *s = a;

    (void)unused;
    /* a send that finds no room arms the descriptor for it */
    return chanos_ump_try_send_fds(s->u, s->frame, s->len, s->fds, s->nfds);
}

static int block_ump_send(void *a, void *unused, int timeout_ms)
{
    struct ump_send *s = a;

    (void)unused;
    return chanos_ump_send_fds(s->u, s->frame, s->len, s->fds, s->nfds, timeout_ms);
}

/* carries_meta reports whether flags are those of a call or reply with a
 * metadata trailer (docs/wire.md, "Metadata"). */
static bool carries_meta(uint8_t flags)
{
    return flags == (CHANOS_KIND_CALL | CHANOS_FLAG_META) ||
           flags == (CHANOS_KIND_REPLY | CHANOS_FLAG_META) ||
           flags == (CHANOS_KIND_ERROR | CHANOS_FLAG_META);
}

/* with_trailer copies frame[0..len) and the trailer t[0..n) into the
 * connection's meta_frame, META set and the size patched, and points
 * *frame and *len at it; the caller holds sending. The caller's buffer
 * has no room to spare for the trailer. */
static int with_trailer(chanos_conn *c, const uint8_t **frame, size_t *len,
                        const uint8_t *t, size_t n)
{
    size_t total = *len + n;

    if (total > c->meta_frame_cap) {
        uint8_t *p = realloc(c->meta_frame, total);

        if (p == NULL)
            return -ENOMEM;
        c->meta_frame = p;
        c->meta_frame_cap = total;
    }
    memcpy(c->meta_frame, *frame, *len);
    memcpy(c->meta_frame + *len, t, n);
    c->meta_frame[6] |= CHANOS_FLAG_META;
    chanos_store_u32(c->meta_frame, (uint32_t)total);
    *frame = c->meta_frame;
    *len = total;
    return 0;
}

/* send_link sends a checked frame over the connection's link or ring,
 * waiting for room at most timeout_ms. */
static int send_link(chanos_conn *c, const void *frame, size_t len,
                     const int *fds, uint32_t nfds, int timeout_ms)
{
    const struct chanos_waiter *w;

    if (c->ops != NULL) {
        if (nfds == 0)
            return c->ops->send(c->link, frame, len, timeout_ms);
        return send_refs(c, frame, len, fds, nfds, timeout_ms);
    }
    if (timeout_ms == 0)
        return chanos_ump_try_send_fds(c->u, frame, len, fds, nfds);
    if ((w = thread_waiter()) != NULL) {
        struct ump_send s = {c->u, frame, len, fds, nfds};

        return await_fd(w, chanos_ump_fd(c->u), deadline_ns(timeout_ms),
                        try_ump_send, block_ump_send, &s, NULL);
    }
    return chanos_ump_send_fds(c->u, frame, len, fds, nfds, timeout_ms);
}

static int send_locked(chanos_conn *c, const void *frame, size_t len,
                       const int *fds, uint32_t nfds, int timeout_ms)
{
    struct chanos_hdr h;
    int rc = chanos_hdr_parse(&h, frame, len);

    if (rc != 0)
        return chanos_frame_fault_(frame, len, NULL, &h, &c->fault);
    /* a call or reply may carry metadata, which only decoders refuse */
    h.flags &= (uint8_t)(carries_meta(h.flags) ? ~CHANOS_FLAG_META : 0xff);
    if (chanos_hdr_kind(&h) < 0)
        return chanos_kind_fault_(&h, NULL, &c->fault);
    if (nfds > CHANOS_UMP_MAX_FDS)
        return refuse(c, CHANOS_ERR_CAP, -1, NULL,
                      "%u capabilities exceed the %u of a frame",
                      (unsigned)nfds, (unsigned)CHANOS_UMP_MAX_FDS);
    if (h.ncaps != nfds)
        return refuse(c, CHANOS_ERR_CAP, OFF_NCAPS, NULL,
                      "header ncaps %u differs from the %u capabilities given",
                      (unsigned)h.ncaps, (unsigned)nfds);
    rc = send_link(c, frame, len, fds, nfds, timeout_ms);
    /* A timeout alone leaves the sender without a clue: Go's words
     * (the engine's sendFull) say what usually holds the peer. */
    if (rc == CHANOS_ERR_TIMEDOUT)
        refuse(c, rc, -1, NULL,
               "the peer took no frame while this one waited for room: a "
               "peer that is itself waiting to send to this side takes none "
               "until this side receives what it sends (chanos_conn_recv, "
               "or a serve loop)");
    return rc;
}

/* send_fds is chanos_conn_send with descriptors. */
static int send_fds(chanos_conn *c, const void *frame, size_t len,
                    const int *fds, uint32_t nfds, int timeout_ms)
{
    const uint8_t *f = frame;
    int rc = 0;

    if (atomic_flag_test_and_set(&c->sending))
        return CHANOS_ERR_BUSY;
    if (c->reply_meta_len != 0 && len >= CHANOS_HEADER_SIZE &&
        (f[6] == CHANOS_KIND_REPLY || f[6] == CHANOS_KIND_ERROR)) {
        /* one reply takes the metadata set for it, sent or not */
        rc = with_trailer(c, &f, &len, c->reply_meta, c->reply_meta_len);
        c->reply_meta_len = 0;
    }
    if (rc == 0)
        rc = send_locked(c, f, len, fds, nfds, timeout_ms);
    atomic_flag_clear(&c->sending);
    return rc;
}

int chanos_conn_send(chanos_conn *c, const void *frame, size_t len,
                     int timeout_ms)
{
    return send_fds(c, frame, len, NULL, 0, timeout_ms);
}

/* close_given closes the give_away_caps of b, which has been sent. */
static void close_given(const struct chanos_buf *b)
{
    for (uint32_t i = 0; i < b->nfds && i < 256; i++)
        if (b->give[i / 64] & (uint64_t)1 << (i % 64))
            close(b->fds[i]);
}

int chanos_conn_send_buf(chanos_conn *c, const struct chanos_buf *b,
                         int timeout_ms)
{
    int rc = send_fds(c, b->data, b->len, b->fds, b->nfds, timeout_ms);

    if (rc == 0)
        close_given(b);
    return rc;
}

void chanos_frame_close_fds(const struct chanos_frame *f)
{
    for (uint32_t i = 0; i < f->nfds; i++)
        if (f->fds[i] >= 0)
            close(f->fds[i]);
}

static uint32_t timeout_us_of(int timeout_ms)
{
    if (timeout_ms <= 0)
        return 0;
    if ((uint64_t)timeout_ms * 1000 >= UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)timeout_ms * 1000;
}

/* send_call is chanos_conn_send_call with descriptors. */
static bool late_id(chanos_conn *c, uint32_t id);

static int send_call(chanos_conn *c, uint8_t *frame, size_t len,
                     const int *fds, uint32_t nfds, int timeout_ms,
                     uint32_t *call_id)
{
    uint32_t id;
    int rc;

    if (len < CHANOS_HEADER_SIZE || (frame[6] & ~CHANOS_FLAG_META) != CHANOS_KIND_CALL)
        return not_kind(c, frame, len, "a call");
    if (atomic_flag_test_and_set(&c->sending))
        return CHANOS_ERR_BUSY;
    if (c->out_meta_len != 0 && frame[6] == CHANOS_KIND_CALL) {
        const uint8_t *f = frame;

        if (with_trailer(c, &f, &len, c->out_meta, c->out_meta_len) != 0) {
            atomic_flag_clear(&c->sending);
            return -ENOMEM;
        }
        frame = c->meta_frame; /* the copy: the call id goes there */
    }
    id = ++c->next_call;
    if (id == 0) {
        id = ++c->next_call;
        c->wrapped = true;
    }
    /* once the ids have wrapped, an abandoned call of 2^32 calls ago whose
     * reply never came must not take the new call's reply for its own */
    if (c->wrapped)
        (void)late_id(c, id);
    chanos_hdr_set_call(frame, id, timeout_us_of(timeout_ms));
    /* a call waits for ring space within its own deadline */
    rc = send_locked(c, frame, len, fds, nfds, timeout_ms);
    atomic_flag_clear(&c->sending);
    if (rc == 0 && call_id != NULL)
        *call_id = id;
    return rc;
}

int chanos_conn_send_call(chanos_conn *c, uint8_t *frame, size_t len,
                          int timeout_ms, uint32_t *call_id)
{
    return send_call(c, frame, len, NULL, 0, timeout_ms, call_id);
}

static void abandon_lock(chanos_conn *c)
{
    while (atomic_flag_test_and_set_explicit(&c->abandon_lock,
                                             memory_order_acquire))
        ;
}

static void abandon_unlock(chanos_conn *c)
{
    atomic_flag_clear_explicit(&c->abandon_lock, memory_order_release);
}

/* abandon remembers call id, whose reply, should it come, is dropped. */
static void abandon(chanos_conn *c, uint32_t id)
{
    uint32_t *slot;

    if (id == 0)
        return;
    abandon_lock(c);
    slot = &c->abandoned[c->abandon_next];
    if (*slot == 0)
        atomic_fetch_add_explicit(&c->nabandoned, 1, memory_order_relaxed);
    *slot = id; /* full: the oldest is forgotten */
    c->abandon_next = (c->abandon_next + 1) % CHANOS_CONN_ABANDONED_MAX;
    abandon_unlock(c);
}

/* late_id reports whether call id was abandoned, and forgets it. Call id
 * 0 is no call's (ids are issued from 1), and marks the free entries of
 * the abandoned ring: it never matches one. */
static bool late_id(chanos_conn *c, uint32_t id)
{
    bool found = false;

    if (id == 0 || atomic_load_explicit(&c->nabandoned, memory_order_relaxed) == 0)
        return false;
    abandon_lock(c);
    for (unsigned i = 0; i < CHANOS_CONN_ABANDONED_MAX; i++) {
        if (c->abandoned[i] == id) {
            c->abandoned[i] = 0;
            atomic_fetch_sub_explicit(&c->nabandoned, 1, memory_order_relaxed);
            found = true;
            break;
        }
    }
    abandon_unlock(c);
    return found;
}

/* late reports whether f is the reply to an abandoned call, which it then
 * forgets: each call has one reply. */
static bool late(chanos_conn *c, const struct chanos_frame *f)
{
    if (f->kind != CHANOS_KIND_REPLY && f->kind != CHANOS_KIND_ERROR)
        return false;
    return late_id(c, f->hdr.call_id);
}

int chanos_conn_cancel(chanos_conn *c, uint16_t msg, uint32_t call_id)
{
    uint8_t f[CHANOS_HEADER_SIZE];
    struct chanos_hdr h = { CHANOS_HEADER_SIZE, msg, CHANOS_KIND_CANCEL, 0,
                            call_id, 0 };

    /* before the cancel goes: its reply may be on its way already */
    abandon(c, call_id);
    chanos_hdr_put(f, &h);
    return chanos_conn_send(c, f, sizeof f, 0);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* key_byte reports whether ch may be a byte of a metadata key:
 * lower-case letters, digits, '-', '_' and '.' (docs/wire.md,
 * "Metadata"). */
static bool key_byte(uint8_t ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.';
}

/* bad_key_byte returns the index of the first byte of k[0..n) that no
 * metadata key may hold, or n. */
static size_t bad_key_byte(const uint8_t *k, size_t n)
{
    size_t i = 0;

    while (i < n && key_byte(k[i]))
        i++;
    return i;
}

/* The room chanos_quote_ needs for a key cut to KEY_SHOWN bytes: each byte as
 * \xNN at worst, the quotes, "..." and the NUL. */
#define KEY_SHOWN 40
#define QUOTED_MAX CHANOS_QUOTED_SIZE_(KEY_SHOWN)
/* Two keys in one fault are cut shorter, so that the whole of Go's words
 * fits beside them. */
#define PAIR_SHOWN 16

/* chanos_quote_ (internal.h): metadata faults show keys as Go's do, cut
 * as Go's ValidMetadataKey cuts them, so that the text fits a fault's
 * detail. */
const char *chanos_quote_(char *out, const void *s, size_t n, size_t max)
{
    const uint8_t *b = s;
    size_t o = 0, shown = n > max ? max : n;

    out[o++] = '"';
    for (size_t i = 0; i < shown; i++) {
        /* the letters of Go's escapes of bytes 7 (\a) to 13 (\r) */
        static const char letters[] = "abtnvfr";

        if (b[i] == '"' || b[i] == '\\') {
            out[o++] = '\\';
            out[o++] = (char)b[i];
        } else if (b[i] >= '\a' && b[i] <= '\r') {
            out[o++] = '\\';
            out[o++] = letters[b[i] - '\a'];
        } else if (b[i] < 0x20 || b[i] >= 0x7f) {
            snprintf(out + o, 5, "\\x%02x", b[i]);
            o += 4;
        } else {
            out[o++] = (char)b[i];
        }
    }
    if (shown < n) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

/* check_key refuses k[0..n) as a metadata key given to be sent, in *f
 * (NULL: nowhere), as Go's ValidMetadataKey does: BOUND for its length,
 * HEADER for a byte; else 0. */
static int check_key(const uint8_t *k, size_t n, struct chanos_wire_fault *f)
{
    char q[QUOTED_MAX];
    size_t i;

    if (n == 0 || n > CHANOS_META_KEY_MAX)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, -1, NULL,
                                   "metadata key %s is %zu bytes; keys are 1 "
                                   "to %d",
                                   chanos_quote_(q, k, n, KEY_SHOWN), n,
                                   CHANOS_META_KEY_MAX);
    if ((i = bad_key_byte(k, n)) < n)
        return chanos_conn_refuse_(f, CHANOS_ERR_HEADER, -1, NULL,
                                   "metadata key %s has byte 0x%02x at %zu",
                                   chanos_quote_(q, k, n, KEY_SHOWN), k[i], i);
    return 0;
}

/* key_cmp orders keys byte by byte, a key before its extensions, as Go
 * compares strings: the order of a trailer's entries. */
static int key_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);

    if (c != 0)
        return c;
    return na < nb ? -1 : na > nb;
}

/* next_entry reads the metadata entry at *off (< n) of the entries
 * m[0..n), whose previous key, if *off is past the first, is
 * prev[0..nprev): 0 and its key and value, or the code of its first
 * fault in the order of docs/wire.md, "Metadata", described in *f (NULL:
 * nowhere) as Go's wire.SplitMetadata says it, at its byte of the frame,
 * whose entries start at byte base. */
static int next_entry(const uint8_t *m, size_t n, size_t *off,
                      const uint8_t *prev, size_t nprev,
                      struct chanos_str *key, struct chanos_str *value,
                      struct chanos_wire_fault *f, size_t base)
{
    size_t o = *off, klen = m[o], vlen, i;
    int64_t at = (int64_t)(base + o);
    char q[QUOTED_MAX], p[QUOTED_MAX];

    if (klen == 0 || klen > CHANOS_META_KEY_MAX)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, at, NULL,
                                   "metadata key of %zu bytes; keys are 1 to "
                                   "%d",
                                   klen, CHANOS_META_KEY_MAX);
    if (o + 1 + klen + 2 > n)
        return chanos_conn_refuse_(f, CHANOS_ERR_TRUNCATED, at, NULL,
                                   "metadata key cut short");
    if ((i = bad_key_byte(m + o + 1, klen)) < klen)
        return chanos_conn_refuse_(f, CHANOS_ERR_HEADER, at + 1 + (int64_t)i,
                                   NULL, "metadata key %s has byte 0x%02x",
                                   chanos_quote_(q, m + o + 1, klen, KEY_SHOWN),
                                   m[o + 1 + i]);
    /* strictly increasing: one encoding per metadata, and a key given
     * twice is out of order too */
    if (o > 0 && key_cmp(prev, nprev, m + o + 1, klen) >= 0)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, at + 1, NULL,
                                   "metadata key %s after %s: keys are "
                                   "sorted, each once",
                                   chanos_quote_(q, m + o + 1, klen,
                                                 PAIR_SHOWN),
                                   chanos_quote_(p, prev, nprev, PAIR_SHOWN));
    vlen = chanos_load_u16(m + o + 1 + klen);
    if (vlen > CHANOS_META_VALUE_MAX || o + 3 + klen + vlen > n)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, at + 1 + (int64_t)klen,
                                   NULL, "metadata %s: value of %zu bytes",
                                   chanos_quote_(q, m + o + 1, klen,
                                                 KEY_SHOWN),
                                   vlen);
    if (memchr(m + o + 3 + klen, 0, vlen) != NULL)
        return chanos_conn_refuse_(f, CHANOS_ERR_NUL, at + 3 + (int64_t)klen,
                                   NULL, "metadata %s: value holds a NUL byte",
                                   chanos_quote_(q, m + o + 1, klen,
                                                 KEY_SHOWN));
    key->ptr = (const char *)m + o + 1;
    key->len = (uint32_t)klen;
    value->ptr = (const char *)m + o + 3 + klen;
    value->len = (uint32_t)vlen;
    *off = o + 3 + klen + vlen;
    return 0;
}

/* meta_split is chanos_meta_split that describes a fault in *f (NULL:
 * nowhere) as Go's wire.SplitMetadata does. */
static int meta_split(const uint8_t *frame, size_t len, size_t *call_len,
                      struct chanos_wire_fault *f)
{
    size_t block, start, off = 0, keys = 0;
    struct chanos_str k = { NULL, 0 }, v;
    const uint8_t *m;
    int rc;

    if (len < CHANOS_HEADER_SIZE || !carries_meta(frame[6]) ||
        chanos_load_u32(frame) != len)
        return chanos_conn_refuse_(f, CHANOS_ERR_HEADER, OFF_FLAGS, NULL,
                                   "not a call or reply frame with metadata");
    if (len < CHANOS_HEADER_SIZE + 2)
        return chanos_conn_refuse_(f, CHANOS_ERR_TRUNCATED, (int64_t)len, NULL,
                                   "frame with metadata ends before the "
                                   "trailer's length");
    block = chanos_load_u16(frame + len - 2);
    if (block > CHANOS_META_MAX || block > len - 2 - CHANOS_HEADER_SIZE)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, (int64_t)len - 2, NULL,
                                   "metadata trailer of %zu bytes in a frame "
                                   "of %zu (at most %d)",
                                   block, len, CHANOS_META_MAX);
    start = len - 2 - block;
    m = frame + start;
    while (off < block) {
        if (keys++ == CHANOS_META_KEYS_MAX)
            return chanos_conn_refuse_(f, CHANOS_ERR_BOUND,
                                       (int64_t)(start + off), NULL,
                                       "more than %d metadata keys",
                                       CHANOS_META_KEYS_MAX);
        rc = next_entry(m, block, &off, (const uint8_t *)k.ptr, k.len, &k, &v,
                        f, start);
        if (rc != 0)
            return rc;
    }
    *call_len = start;
    return 0;
}

int chanos_meta_split(const uint8_t *frame, size_t len, size_t *call_len)
{
    return meta_split(frame, len, call_len, NULL);
}

/*
 * split_meta checks the metadata trailer of the call or reply f and takes
 * it off: the frame becomes what it would have been without it, for the
 * decoders, and f->meta its entries. The bytes are the connection's own
 * copy of the message (chanos_ump copies each one out of the ring), so
 * the header is patched where it lies.
 */
static int split_meta(chanos_conn *c, struct chanos_frame *f)
{
    uint8_t *d = (uint8_t *)(uintptr_t)f->data;
    size_t start;
    int rc = meta_split(d, f->len, &start, &c->fault);

    if (rc != 0)
        return rc;
    d[6] &= (uint8_t)~CHANOS_FLAG_META;
    chanos_store_u32(d, (uint32_t)start);
    f->hdr.flags &= (uint8_t)~CHANOS_FLAG_META;
    f->hdr.size = (uint32_t)start;
    f->meta = d + start;
    f->meta_len = f->len - 2 - start;
    f->len = start;
    return 0;
}

/* find_meta looks key up in entries m[0..n) that chanos_meta_split
 * accepted. */
static int find_meta(const uint8_t *m, size_t n, const char *key,
                     struct chanos_str *value)
{
    size_t klen = strlen(key), off = 0;
    struct chanos_str k = { NULL, 0 }, v;

    while (off < n && next_entry(m, n, &off, (const uint8_t *)k.ptr, k.len,
                                 &k, &v, NULL, 0) == 0) {
        if (k.len == klen && memcmp(k.ptr, key, klen) == 0) {
            *value = v;
            return 0;
        }
    }
    return CHANOS_ERR_NOT_FOUND;
}

static int key_order(const void *a, const void *b)
{
    return strcmp(((const struct chanos_meta *)a)->key,
                  ((const struct chanos_meta *)b)->key);
}

/* meta_encode is chanos_meta_encode that describes a refusal of the
 * metadata in *f (NULL: nowhere) as Go's wire.AppendMetadata does; NOSPACE
 * is the caller's buffer, and no refusal. */
static int meta_encode(const struct chanos_meta *kv, unsigned n, uint8_t *out,
                       size_t cap, size_t *len, struct chanos_wire_fault *f)
{
    struct chanos_meta sorted[CHANOS_META_KEYS_MAX];
    size_t total = 0, off = 0;
    char q[QUOTED_MAX];
    int rc;

    if (n > CHANOS_META_KEYS_MAX)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, -1, NULL,
                                   "metadata of %u keys; at most %d", n,
                                   CHANOS_META_KEYS_MAX);
    for (unsigned i = 0; i < n; i++) {
        size_t kl = strlen(kv[i].key), vl = strlen(kv[i].value);

        rc = check_key((const uint8_t *)kv[i].key, kl, f);
        if (rc != 0)
            return rc;
        if (vl > CHANOS_META_VALUE_MAX)
            return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, -1, NULL,
                                       "metadata %s: value of %zu bytes; at "
                                       "most %d",
                                       chanos_quote_(q, kv[i].key, kl,
                                                     KEY_SHOWN),
                                       vl,
                                       CHANOS_META_VALUE_MAX);
        for (unsigned j = 0; j < i; j++)
            if (strcmp(kv[j].key, kv[i].key) == 0)
                return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, -1, NULL,
                                           "metadata key %s given twice",
                                           chanos_quote_(q, kv[i].key, kl,
                                                         KEY_SHOWN));
        total += 3 + kl + vl;
        sorted[i] = kv[i];
    }
    if (total > CHANOS_META_MAX)
        return chanos_conn_refuse_(f, CHANOS_ERR_BOUND, -1, NULL,
                                   "metadata of %zu bytes; at most %d", total,
                                   CHANOS_META_MAX);
    if (n == 0) {
        *len = 0;
        return 0;
    }
    *len = total + 2;
    if (cap < total + 2)
        return CHANOS_ERR_NOSPACE;
    /* sorted by key, as a receiver requires: the same metadata makes the
     * same bytes */
    qsort(sorted, n, sizeof sorted[0], key_order);
    for (unsigned i = 0; i < n; i++) {
        size_t kl = strlen(sorted[i].key), vl = strlen(sorted[i].value);

        out[off] = (uint8_t)kl;
        memcpy(out + off + 1, sorted[i].key, kl);
        chanos_store_u16(out + off + 1 + kl, (uint16_t)vl);
        memcpy(out + off + 3 + kl, sorted[i].value, vl);
        off += 3 + kl + vl;
    }
    chanos_store_u16(out + off, (uint16_t)total);
    return 0;
}

int chanos_meta_encode(const struct chanos_meta *kv, unsigned n,
                       uint8_t *out, size_t cap, size_t *len)
{
    return meta_encode(kv, n, out, cap, len, NULL);
}

int chanos_conn_set_meta(chanos_conn *c, const struct chanos_meta *kv,
                         unsigned n)
{
    uint8_t *t = NULL;
    size_t len;
    int rc = meta_encode(kv, n, NULL, 0, &len, &c->fault);

    if (rc == CHANOS_ERR_NOSPACE) { /* checked, and len is its size */
        t = malloc(len);
        if (t == NULL)
            return -ENOMEM;
        rc = chanos_meta_encode(kv, n, t, len, &len);
    }
    if (rc != 0) {
        free(t);
        return rc;
    }
    free(c->out_meta);
    c->out_meta = t;
    c->out_meta_len = t != NULL ? len : 0;
    return 0;
}

int chanos_conn_set_reply_meta(chanos_conn *c, const struct chanos_meta *kv,
                               unsigned n)
{
    size_t len;
    int rc = meta_encode(kv, n, NULL, 0, &len, &c->fault);

    if (rc == CHANOS_ERR_NOSPACE) { /* checked, and len is its size */
        uint8_t *t = realloc(c->reply_meta, len);

        if (t == NULL)
            return -ENOMEM;
        c->reply_meta = t;
        rc = chanos_meta_encode(kv, n, t, len, &len);
    }
    if (rc != 0)
        return rc;
    c->reply_meta_len = len;
    return 0;
}

int chanos_frame_meta(const struct chanos_frame *f, const char *key,
                      struct chanos_str *value)
{
    if (f->meta == NULL)
        return CHANOS_ERR_NOT_FOUND;
    return find_meta(f->meta, f->meta_len, key, value);
}

int chanos_conn_meta(const chanos_conn *c, const char *key,
                     struct chanos_str *value)
{
    if (c->meta == NULL)
        return CHANOS_ERR_NOT_FOUND;
    return find_meta(c->meta, c->meta_len, key, value);
}

int chanos_conn_peer(const chanos_conn *c, struct chanos_peer *out)
{
    if (c->peer == NULL)
        return CHANOS_ERR_NOT_FOUND;
    *out = *c->peer;
    return 0;
}

int chanos_conn_set_peer_(chanos_conn *c, const struct chanos_peer *p)
{
    struct chanos_peer *q = malloc(sizeof *q);

    if (q == NULL)
        return -ENOMEM;
    *q = *p;
    free(c->peer);
    c->peer = q;
    return 0;
}

/* recv_one receives one frame; spin: without waiting or arming the fd
 * (chanos_ump_spin_recv), else as chanos_conn_recv. */
static int recv_one(chanos_conn *c, int timeout_ms, bool spin,
                    struct chanos_frame *f)
{
    const uint8_t *refs = NULL;
    const void *p;
    size_t len;
    int rc;

    if (c->ops != NULL && c->ops->recv_refs != NULL)
        rc = c->ops->recv_refs(c->link, &p, &len, &refs, spin ? 0 : timeout_ms);
    else if (c->ops != NULL)
        rc = c->ops->recv(c->link, &p, &len, spin ? 0 : timeout_ms);
    else if (spin)
        rc = chanos_ump_spin_recv(c->u, &p, &len);
    else if (timeout_ms == 0)
        rc = chanos_ump_try_recv(c->u, &p, &len);
    else
        rc = chanos_ump_recv(c->u, &p, &len, timeout_ms);
    if (rc != 0)
        return rc;
    f->data = p;
    f->len = len;
    rc = chanos_hdr_parse(&f->hdr, f->data, len);
    if (rc != 0)
        return chanos_frame_fault_(f->data, len, NULL, &f->hdr, &c->fault);
    f->meta = NULL;
    f->meta_len = 0;
    f->fds = NULL;
    f->nfds = 0;
    /* the descriptors first: whatever is wrong with the frame, those it
     * announced leave the caps socket with it, and are closed */
    if (f->hdr.ncaps != 0 && c->ops != NULL) {
        /* a link carries irefs, or no capabilities at all */
        rc = refs != NULL ? recv_refs(c, refs, f->hdr.ncaps)
                          : refuse(c, CHANOS_ERR_CAP, OFF_NCAPS, NULL,
                                   "header ncaps %u on a link that carries "
                                   "no capabilities",
                                   (unsigned)f->hdr.ncaps);
        if (rc != 0)
            return rc;
        f->fds = c->rfds;
        f->nfds = f->hdr.ncaps;
    } else if (f->hdr.ncaps != 0) {
        rc = chanos_ump_recv_fds(c->u, c->rfds, f->hdr.ncaps);
        if (rc != 0)
            return rc;
        f->fds = c->rfds;
        f->nfds = f->hdr.ncaps;
    }
    if (carries_meta(f->hdr.flags) && (rc = split_meta(c, f)) != 0) {
        chanos_frame_close_fds(f);
        return rc;
    }
    c->meta = f->meta;
    c->meta_len = f->meta_len;
    f->kind = chanos_hdr_kind(&f->hdr);
    if (f->kind < 0) {
        chanos_frame_close_fds(f);
        return chanos_kind_fault_(&f->hdr, NULL, &c->fault);
    }
    return 0;
}

static int try_recv(void *c, void *f)
{
    return recv_one(c, 0, false, f);
}

static int block_recv(void *c, void *f, int timeout_ms)
{
    return recv_one(c, timeout_ms, false, f);
}

/*
 * waited_recv is recv_one with timeout_ms != 0 on a thread with the
 * waiter w: it spins over the ring within its window while w allows, then
 * waits through w on c's descriptor (fd), which a receive that finds no
 * frame arms.
 */
static int waited_recv(chanos_conn *c, const struct chanos_waiter *w, int fd,
                       int timeout_ms, struct chanos_frame *f)
{
    int64_t deadline = deadline_ns(timeout_ms);
    /* a link's frames come from another thread's read: no spinning */
    int64_t spin = c->ops == NULL ? chanos_ump_spin_ns(c->u) : 0;
    int rc;

    if (spin > 0) {
        int64_t end = now_ns() + spin;

        for (unsigned i = 1;; i++) {
            rc = recv_one(c, 0, true, f);
            if (rc != CHANOS_ERR_AGAIN)
                return rc;
            if ((i & 31) == 0 &&
                ((w->spin != NULL && !w->spin(w->arg)) || now_ns() >= end))
                break;
            cpu_relax();
        }
    }
    return await_fd(w, fd, deadline, try_recv, block_recv, c, f);
}

/* recv_wait is recv_one, through the thread's waiter where it has one. */
static int recv_wait(chanos_conn *c, int timeout_ms, bool spin,
                     struct chanos_frame *f)
{
    const struct chanos_waiter *w;
    int fd;

    if (timeout_ms == 0 || spin || (w = thread_waiter()) == NULL ||
        (fd = chanos_conn_fd(c)) < 0)
        return recv_one(c, timeout_ms, spin, f);
    return waited_recv(c, w, fd, timeout_ms, f);
}

/*
 * recv_ring is recv_one, without the late replies to abandoned calls:
 * it drops them and waits on for a frame within timeout_ms. The clock is
 * read only when some call is abandoned, so as to cost nothing otherwise.
 */
static int recv_ring(chanos_conn *c, int timeout_ms, bool spin,
                     struct chanos_frame *f)
{
    int64_t start = -1;
    int wait = timeout_ms;
    int rc;

    if (timeout_ms > 0 &&
        atomic_load_explicit(&c->nabandoned, memory_order_relaxed) != 0)
        start = now_ms();
    for (;;) {
        rc = recv_wait(c, wait, spin, f);
        if (rc != 0 || !late(c, f))
            return rc;
        chanos_frame_close_fds(f);
        if (timeout_ms > 0) {
            int64_t left;

            if (start < 0) /* abandoned while we waited */
                start = now_ms();
            left = start + timeout_ms - now_ms();
            if (left <= 0)
                return CHANOS_ERR_TIMEDOUT;
            wait = (int)left;
        }
    }
}

/* arrival_deadline is the deadline of f, just arrived, if it is a call
 * that has one (its timeout_us from its arrival, docs/wire.md), else -1.
 * seen is when the receive looked, if its caller read the clock then
 * (a serve loop: chanos_conn_serve_recv_); -1: now. */
static int64_t arrival_deadline(const struct chanos_frame *f, int64_t seen)
{
    if (f->kind != CHANOS_KIND_CALL || f->hdr.timeout_us == 0)
        return -1;
    return (seen >= 0 ? seen : now_ns()) + (int64_t)f->hdr.timeout_us * 1000;
}

/* handling notes that f, whose deadline is deadline, is the frame the
 * receives gave last: the one a handler serves. */
static void handling(chanos_conn *c, const struct chanos_frame *f,
                     int64_t deadline)
{
    c->cur_call = f->kind == CHANOS_KIND_CALL ? f->hdr.call_id : 0;
    c->cur_deadline = deadline;
    c->cur_cancelled = false;
}

/* drop_given frees the frame the last receive took from the inbox: the
 * receive after it has come. Its descriptors are the receiver's. */
static void drop_given(chanos_conn *c)
{
    free(c->given);
    c->given = NULL;
}

/*
 * take_kept drops the frame the last receive took from the inbox and
 * takes the next one into *f: 0, or CHANOS_ERR_AGAIN when the inbox is
 * empty. A reply to a call abandoned since it was kept is dropped, as
 * recv_ring drops it.
 */
static int take_kept(chanos_conn *c, struct chanos_frame *f)
{
    struct kept *k;

    drop_given(c);
    while ((k = c->kept_head) != NULL) {
        c->kept_head = k->next;
        if (c->kept_head == NULL)
            c->kept_tail = NULL;
        c->nkept--;
        c->kept_bytes -= k->size;
        if (late(c, &k->f)) {
            chanos_frame_close_fds(&k->f);
            free(k);
            continue;
        }
        c->given = k;
        *f = k->f;
        c->meta = f->meta;
        c->meta_len = f->meta_len;
        handling(c, f, k->deadline);
        return 0;
    }
    return CHANOS_ERR_AGAIN;
}

/* recv_locked is recv_ring after the inbox: the frames a call kept come
 * first. An inbox that was never used costs one test. seen is as
 * arrival_deadline's. */
static int recv_locked(chanos_conn *c, int timeout_ms, bool spin,
                       int64_t seen, struct chanos_frame *f)
{
    int rc;

    if ((c->kept_head != NULL || c->given != NULL) && take_kept(c, f) == 0)
        return 0;
    rc = recv_ring(c, timeout_ms, spin, f);
    if (rc == 0)
        handling(c, f, arrival_deadline(f, seen));
    return rc;
}

/*
 * keep copies the frame f, received by a call on its way to its reply,
 * into the inbox, with its descriptors, which the inbox then owns: 0, or
 * -ENOMEM (f's descriptors are then closed, and the frame is lost).
 */
static int keep(chanos_conn *c, const struct chanos_frame *f)
{
    /* the metadata's entries follow the body (split_meta) */
    size_t size = f->len + f->meta_len;
    size_t fdb = (size_t)f->nfds * sizeof(int);
    struct kept *k = malloc(sizeof *k + fdb + size);
    uint8_t *data;

    if (k == NULL) {
        chanos_frame_close_fds(f);
        return -ENOMEM;
    }
    data = (uint8_t *)k->fds + fdb;
    memcpy(data, f->data, size);
    if (f->nfds > 0)
        memcpy(k->fds, f->fds, fdb);
    k->next = NULL;
    k->size = size;
    k->deadline = arrival_deadline(f, -1);
    k->f = *f;
    k->f.data = data;
    k->f.fds = f->nfds > 0 ? k->fds : NULL;
    k->f.meta = f->meta != NULL ? data + f->len : NULL;
    if (c->kept_tail != NULL)
        c->kept_tail->next = k;
    else
        c->kept_head = k;
    c->kept_tail = k;
    c->nkept++;
    c->kept_bytes += size;
    return 0;
}

/* inbox_full reports whether the inbox holds as much as it may, as Go's
 * engine counts it: CHANOS_CONN_INBOX_MAX frames, or
 * CHANOS_CONN_INBOX_BYTES bytes. */
static bool inbox_full(const chanos_conn *c)
{
    return c->nkept >= CHANOS_CONN_INBOX_MAX ||
           c->kept_bytes >= CHANOS_CONN_INBOX_BYTES;
}

int64_t chanos_conn_call_left_ns(const chanos_conn *c)
{
    int64_t left;

    if (c->cur_call == 0 || c->cur_deadline < 0)
        return -1;
    left = c->cur_deadline - now_ns();
    return left > 0 ? left : 0;
}

int chanos_conn_call_cancelled(chanos_conn *c)
{
    if (c->cur_call == 0)
        return 0;
    if (atomic_flag_test_and_set(&c->receiving))
        return CHANOS_ERR_BUSY;
    /* a call the handler made may have kept the cancel; else it is in
     * the ring, unread, or has not come */
    for (const struct kept *k = c->kept_head; k != NULL && !c->cur_cancelled;
         k = k->next)
        c->cur_cancelled = k->f.kind == CHANOS_KIND_CANCEL &&
                           k->f.hdr.call_id == c->cur_call;
    if (!c->cur_cancelled && c->u != NULL)
        c->cur_cancelled = chanos_ump_peek_cancel_(c->u, c->cur_call) == 1;
    atomic_flag_clear(&c->receiving);
    return c->cur_cancelled;
}

int chanos_conn_recv(chanos_conn *c, int timeout_ms, struct chanos_frame *f)
{
    int rc;

    if (atomic_flag_test_and_set(&c->receiving))
        return CHANOS_ERR_BUSY;
    rc = recv_locked(c, timeout_ms, false, -1, f);
    atomic_flag_clear(&c->receiving);
    return rc;
}

int chanos_conn_spin_recv(chanos_conn *c, struct chanos_frame *f)
{
    int rc;

    if (atomic_flag_test_and_set(&c->receiving))
        return CHANOS_ERR_BUSY;
    rc = recv_locked(c, 0, true, -1, f);
    atomic_flag_clear(&c->receiving);
    return rc;
}

int chanos_conn_serve_recv_(chanos_conn *c, bool spin, int64_t seen_ns,
                            struct chanos_frame *f)
{
    int rc;

    if (atomic_flag_test_and_set(&c->receiving))
        return CHANOS_ERR_BUSY;
    rc = recv_locked(c, 0, spin, seen_ns, f);
    atomic_flag_clear(&c->receiving);
    return rc;
}

/* keep_status copies the status of the error reply f, which ended a call,
 * for chanos_conn_status: the frame's slot in the ring is reused by the
 * next receive. One that does not decode is kept as CHANOS_CODE_UNKNOWN,
 * saying so. */
static void keep_status(chanos_conn *c, const struct chanos_frame *f)
{
    static const char bad[] = "the error reply does not decode";
    struct chanos_status st;
    const void *detail = bad;
    size_t len = sizeof bad - 1;

    if (chanos_frame_status(f, &st) == 0) {
        detail = st.detail.ptr;
        len = st.detail.len;
    } else {
        st.code = CHANOS_CODE_UNKNOWN;
    }
    c->status_code = st.code;
    c->status_len = 0;
    if (len == 0)
        return;
    if (c->status_detail == NULL)
        c->status_detail = malloc(CHANOS_STATUS_DETAIL_MAX);
    if (c->status_detail == NULL)
        return; /* the code alone, then */
    memcpy(c->status_detail, detail, len);
    c->status_len = len;
}

int chanos_conn_status(const chanos_conn *c, struct chanos_status *st)
{
    if (c->status_code == 0)
        return CHANOS_ERR_NOT_FOUND;
    st->code = c->status_code;
    st->detail.ptr = c->status_detail;
    st->detail.len = c->status_len;
    return 0;
}

int chanos_conn_set_detail(chanos_conn *c, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (c->reply_detail == NULL)
        c->reply_detail = malloc(CHANOS_STATUS_DETAIL_MAX + 1);
    if (c->reply_detail == NULL)
        return -ENOMEM;
    va_start(ap, fmt);
    n = vsnprintf(c->reply_detail, CHANOS_STATUS_DETAIL_MAX + 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    c->has_reply_detail = true; /* cut to the bound if longer */
    return 0;
}

const char *chanos_conn_take_detail_(chanos_conn *c)
{
    if (!c->has_reply_detail)
        return NULL;
    c->has_reply_detail = false;
    return c->reply_detail;
}

/* abandon_call gives up on call id of rpc msg, for which c holds
 * receiving, and returns rc: the peer is told, and the reply dropped
 * should it come. */
static int abandon_call(chanos_conn *c, uint16_t msg, uint32_t id, int rc)
{
    atomic_flag_clear(&c->receiving);
    (void)chanos_conn_cancel(c, msg, id);
    return rc;
}

/* call is chanos_conn_call with descriptors. */
static int call(chanos_conn *c, uint8_t *frame, size_t len, const int *fds,
                uint32_t nfds, int timeout_ms, struct chanos_frame *reply,
                void (*other)(void *arg, const struct chanos_frame *f),
                void *arg, bool *sent)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    uint16_t msg;
    uint32_t id;
    int rc;

    *sent = false;
    if (len < CHANOS_HEADER_SIZE)
        return chanos_frame_fault_(frame, len, NULL, &(struct chanos_hdr){ 0 },
                                   &c->fault);
    msg = chanos_load_u16(frame + 4);
    if (atomic_flag_test_and_set(&c->receiving))
        return CHANOS_ERR_BUSY;
    /* a call is a receive: the frame the last one took from the inbox
     * lives until now */
    if (c->given != NULL)
        drop_given(c);
    c->status_code = 0; /* the receive side's, as keep_status */
    rc = send_call(c, frame, len, fds, nfds, timeout_ms, &id);
    *sent = rc == 0;
    while (rc == 0) {
        int wait = -1;

        if (deadline >= 0) {
            int64_t left = deadline - now_ms();

            wait = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
        }
        /* Nobody else may receive while the call does: an inbox that is
         * full stays full until the call has failed. */
        if (other == NULL && inbox_full(c))
            return abandon_call(
                c, msg, id,
                refuse(c, CHANOS_ERR_INBOX_FULL, -1, NULL,
                       "the reply waits behind %u unread messages from the "
                       "peer, %zu bytes, that fill this connection's inbox: "
                       "receive them, with chanos_conn_recv or a serve loop",
                       c->nkept, c->kept_bytes));
        rc = recv_ring(c, wait, false, reply);
        if (rc == CHANOS_ERR_TIMEDOUT || rc == CHANOS_ERR_AGAIN) {
            /* the peer took the call, and did not answer in time: no
             * send's timeout, which the record may hold, explains it */
            c->fault.code = 0;
            return abandon_call(c, msg, id, CHANOS_ERR_TIMEDOUT);
        }
        if (rc != 0)
            break;
        if (reply->kind == CHANOS_KIND_REPLY ||
            reply->kind == CHANOS_KIND_ERROR) {
            if (reply->hdr.call_id == id && reply->hdr.msg == msg) {
                if (reply->kind == CHANOS_KIND_ERROR) {
                    chanos_frame_close_fds(reply);
                    keep_status(c, reply);
                    rc = CHANOS_ERR_REMOTE;
                }
                break;
            }
            /* Another call's reply is dropped, as one that says it is
             * this call's but of another message: it may answer a call
             * abandoned longer ago than the connection remembers, and a
             * client that only calls, never receiving, would otherwise
             * fill its inbox with such replies under a slow server. */
            chanos_frame_close_fds(reply);
            continue;
        } else if (other != NULL) {
            other(arg, reply);
            continue;
        }
        if ((rc = keep(c, reply)) != 0)
            return abandon_call(c, msg, id, rc);
    }
    atomic_flag_clear(&c->receiving);
    return rc;
}

int chanos_conn_call(chanos_conn *c, uint8_t *frame, size_t len,
                     int timeout_ms, struct chanos_frame *reply,
                     void (*other)(void *arg, const struct chanos_frame *f),
                     void *arg)
{
    bool sent;

    return call(c, frame, len, NULL, 0, timeout_ms, reply, other, arg, &sent);
}

int chanos_conn_call_buf(chanos_conn *c, const struct chanos_buf *b,
                         int timeout_ms, struct chanos_frame *reply,
                         void (*other)(void *arg, const struct chanos_frame *f),
                         void *arg)
{
    bool sent;
    int rc = call(c, b->data, b->len, b->fds, b->nfds, timeout_ms, reply,
                  other, arg, &sent);

    if (sent) /* whatever became of the call, its descriptors went */
        close_given(b);
    return rc;
}

int chanos_conn_reply(chanos_conn *c, const struct chanos_frame *call,
                      uint8_t *frame, size_t len, int timeout_ms)
{
    if (len < CHANOS_HEADER_SIZE || frame[6] != CHANOS_KIND_REPLY)
        return not_kind(c, frame, len, "a reply");
    chanos_hdr_set_call(frame, call->hdr.call_id, 0);
    return chanos_conn_send(c, frame, len, timeout_ms);
}

int chanos_conn_reply_buf(chanos_conn *c, const struct chanos_frame *call,
                          const struct chanos_buf *b, int timeout_ms)
{
    int rc;

    if (b->len < CHANOS_HEADER_SIZE || b->data[6] != CHANOS_KIND_REPLY)
        return not_kind(c, b->data, b->len, "a reply");
    chanos_hdr_set_call(b->data, call->hdr.call_id, 0);
    rc = send_fds(c, b->data, b->len, b->fds, b->nfds, timeout_ms);
    if (rc == 0)
        close_given(b);
    return rc;
}

int chanos_conn_reply_error(chanos_conn *c, const struct chanos_frame *call,
                            uint64_t code, const char *detail, int timeout_ms)
{
    uint8_t f[STATUS_FRAME_MAX];
    struct chanos_buf b;
    struct chanos_enc e;
    struct chanos_str ds;
    int rc;

    if (code == 0) /* Go's words (wire.StatusEncoder) */
        return refuse(c, CHANOS_ERR_HEADER, CHANOS_HEADER_SIZE, "code",
                      "status code 0 (an error reply needs a nonzero code)");
    chanos_buf_init(&b, f, sizeof f, NULL, 0);
    b.fault = &c->fault;
    chanos_enc_begin(&e, &b, call->hdr.msg, CHANOS_KIND_ERROR);
    chanos_enc_u64(&e, code);
    ds = detail != NULL ? chanos_cstr(detail) : CHANOS_STR("");
    if (ds.len > CHANOS_STATUS_DETAIL_MAX)
        ds.len = CHANOS_STATUS_DETAIL_MAX; /* cut, as the bound demands */
    chanos_enc_str(&e, "detail", ds, CHANOS_STATUS_DETAIL_MAX);
    rc = chanos_enc_end(&e);
    if (rc != 0)
        return rc;
    chanos_hdr_set_call(f, call->hdr.call_id, 0);
    return chanos_conn_send(c, f, b.len, timeout_ms);
}

int chanos_frame_status(const struct chanos_frame *f, struct chanos_status *st)
{
    struct chanos_dec d;
    int rc = chanos_dec_begin_msg(&d, f->data, f->len, NULL, 0, f->hdr.msg,
                                  CHANOS_KIND_ERROR);

    if (rc != 0)
        return rc;
    st->code = chanos_dec_u64(&d, "code");
    if (st->code == 0 && d.err == 0)
        d.err = CHANOS_ERR_HEADER;
    st->detail = chanos_dec_str(&d, "detail", CHANOS_STATUS_DETAIL_MAX);
    return chanos_dec_end(&d);
}
