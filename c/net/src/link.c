/*
 * link.c: one end of a net connection (docs/net.md). Sends copy frames
 * into the send window under the link's mutex and wake the link's I/O
 * thread, which alone touches the socket: it writes what the peer has not
 * received, reads records, applies acknowledgements, writes delayed
 * acknowledgements and keepalives, takes a silent connection for broken,
 * and resumes: the dialing side redials with backoff, the accepting side
 * waits for the listener to hand it the peer's redial, both until the
 * grace period ends.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* One record kept for (re)transmission, or one frame received. */
struct rec {
    uint64_t seq;
    uint8_t type;
    uint32_t len;
    uint8_t *buf;
};

/* A growable ring of records. */
struct deque {
    struct rec *v;
    size_t cap, head, n;
};

static struct rec *dq_at(struct deque *d, size_t i)
{
    return &d->v[(d->head + i) & (d->cap - 1)];
}

static int dq_push(struct deque *d, struct rec r)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 64;
        struct rec *v = malloc(nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < d->n; i++)
            v[i] = *dq_at(d, i);
        free(d->v);
        d->v = v;
        d->cap = nc;
        d->head = 0;
    }
    *dq_at(d, d->n++) = r;
    return 0;
}

static struct rec dq_pop(struct deque *d)
{
    struct rec r = *dq_at(d, 0);
    d->head = (d->head + 1) & (d->cap - 1);
    d->n--;
    return r;
}

static void dq_free(struct deque *d)
{
    while (d->n)
        free(dq_pop(d).buf);
    free(d->v);
    d->v = NULL;
}

/* A TCP connection handed to the link's thread to attach: the first, or
 * a resume the listener accepted. */
struct pending {
    bool set;
    struct tconn t;
    struct hello h;
    bool reply; /* the accepting side answers with its own hello */
};

#define RBUF 65536
#define OUT_BATCH (256u << 10)
/* At most so many reads of RBUF per turn of the I/O thread: a peer that
 * keeps the socket readable must not keep it from writing, nor from
 * seeing that the link stops. */
#define READS_PER_TURN 16

/* What a TLS record may hold besides the record in progress: the next
 * record's header, read with the rest of it (record_deadline). */
#define TLS_SLACK (16384 + 256)

/* A result of reading only: a record failed its tag in the
 * authenticated-only mode. The TCP connection is broken, not the link:
 * whoever can change bytes on the path can reset the connection anyway. */
#define NET_BAD_TAG (-4591)

struct chanos_net_link {
    struct net_opts o;
    uint8_t id[16];
    bool dialer;
    char *addr;
    char *server_name;
    SSL_CTX *cctx;
    struct registry *reg;
    bool has_fp;
    uint8_t peer_fp[CHANOS_NET_FP_SIZE];
    int wakefd;
    int readyfd; /* readable while a receive would not wait */
    /* under mu: someone polls readyfd (chanos_net_fd), so it is kept; and
     * it is readable now. A link nobody polls writes it never. */
    bool fd_wanted, ready_set;
    pthread_t thr;
    bool thr_started;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on any change waiters look at */
    /* under mu */
    uint32_t peer_max, peer_win_frames, peer_win_bytes;
    uint64_t next_seq, peer_acked, written, close_seq, received, consumed,
        ack_sent, gen;
    /* what the socket has taken, written to the end: the last sequence
     * number and the acknowledgement (close waits on them) */
    uint64_t flushed_seq, flushed_ack;
    struct deque unacked;
    size_t unacked_bytes, unacked_data;
    struct deque inbox;
    size_t inbox_bytes;
    /* frames taken since the last acknowledgement written, and their
     * bytes: a quarter of the window in either is acknowledged at once */
    uint32_t since_ack;
    uint64_t since_ack_bytes;
    int64_t ack_due; /* when a delayed acknowledgement is due; 0: none */
    bool force_ack, closing, peer_closed, stop, connected;
    int end_err;
    bool end_now;
    int dial_rc; /* 1 while the first dial runs */
    int close_rc; /* what queueing this side's CLOSE met (close_begin) */
    /* set by an orderly close: until when the I/O thread, once stopped,
     * lingers on the TCP connection (linger_close); 0: it closes at once */
    int64_t linger_until;
    uint64_t auth_failures; /* records whose tag failed */
    struct pending pend;
    uint8_t *cur;

    /* the I/O thread's own */
    struct tconn t;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    uint64_t out_seq, out_ack; /* what out carries, once written */
    short rd_want; /* what the last read waits for (TLS may need to write) */
    uint8_t rbuf[RBUF];
    uint8_t hdr[REC_HDR];
    size_t hdr_have;
    uint8_t tag[GMAC_TAG];
    size_t tag_have;
    uint8_t *pay;
    uint32_t pay_len;
    size_t pay_have;
    int64_t last_read, last_write;
    /* when a whole record was last read and accepted (or the connection
     * started), and the bytes after its header of the record in progress,
     * as its header said (0 between records): record_deadline */
    int64_t last_record;
    uint64_t need;
    bool rec_done; /* a record was accepted since last_record was set */
    bool more_in; /* the last turn left bytes to read (READS_PER_TURN) */
};

/* ready makes readyfd readable, if it is polled and is not already: a
 * receive would not wait. mu held. */
static void ready(chanos_net_link *c)
{
    if (!c->fd_wanted || c->ready_set)
        return;
    uint64_t one = 1;
    if (write(c->readyfd, &one, sizeof one) < 0) {
        /* the counter is full: it is readable anyway */
    }
    c->ready_set = true;
}

static void wake(chanos_net_link *c)
{
    uint64_t one = 1;
    if (write(c->wakefd, &one, sizeof one) < 0) {
        /* the counter is full: the thread is being woken anyway */
    }
}

/* end_locked ends the link with err, the first reason winning; now says
 * whether receives stop at once rather than after what arrived. */
static void end_locked(chanos_net_link *c, int err, bool now)
{
    if (c->end_err)
        return;
    c->end_err = err;
    c->end_now = now;
    pthread_cond_broadcast(&c->cv);
    wake(c);
    ready(c);
}

static void end_link(chanos_net_link *c, int err, bool now)
{
    pthread_mutex_lock(&c->mu);
    end_locked(c, err, now);
    pthread_mutex_unlock(&c->mu);
}

static uint64_t ack_value_locked(const chanos_net_link *c)
{
    return c->peer_closed ? c->received : c->consumed;
}

/* ack_quarter_locked says whether the frames taken since the last
 * acknowledgement are a quarter of this side's window, in frames or in
 * bytes (docs/net.md, "Sequence and acknowledgement"). */
static bool ack_quarter_locked(const chanos_net_link *c)
{
    uint32_t quarter = c->o.win_frames / 4 ? c->o.win_frames / 4 : 1;
    return c->since_ack >= quarter ||
           c->since_ack_bytes >= c->o.win_bytes / 4;
}

/* apply_ack_locked applies the peer's cumulative acknowledgement a. */
static int apply_ack_locked(chanos_net_link *c, uint64_t a)
{
    if (a <= c->peer_acked)
        return 0;
    if (a > c->written)
        return CHANOS_ERR_PROTOCOL;
    while (c->unacked.n && dq_at(&c->unacked, 0)->seq <= a) {
        struct rec r = dq_pop(&c->unacked);
        if (r.type == REC_DATA) {
            c->unacked_bytes -= r.len;
            c->unacked_data--;
        }
        free(r.buf);
    }
    c->peer_acked = a;
    pthread_cond_broadcast(&c->cv);
    return 0;
}

/* ---- the I/O thread ---- */

static int out_reserve(chanos_net_link *c, size_t more)
{
    if (c->out_len + more <= c->out_cap)
        return 0;
    size_t nc = c->out_cap ? c->out_cap : 4096;
    while (nc < c->out_len + more)
        nc *= 2;
    uint8_t *b = realloc(c->out, nc);
    if (!b)
        return -ENOMEM;
    c->out = b;
    c->out_cap = nc;
    return 0;
}

/* out_tag appends, in the authenticated-only mode, the tag of the record
 * that begins at out[at] and ends the output buffer. */
static int out_tag(chanos_net_link *c, size_t at)
{
    if (!c->t.auth)
        return 0;
    int r = gmac_tag(&c->t.auth->out, c->out + at, c->out_len - at, NULL, 0,
                     c->out + c->out_len);
    if (r == 0)
        c->out_len += GMAC_TAG;
    return r;
}

/* fill_out_locked puts into the output buffer, which is empty, the
 * records the peer has not received, or an acknowledgement that is due:
 * 0, or a failure to tag them (the TCP connection is then dropped). */
static int fill_out_locked(chanos_net_link *c, int64_t now)
{
    uint64_t ack = ack_value_locked(c);
    size_t tag = c->t.auth ? GMAC_TAG : 0;
    c->out_len = c->out_off = 0;
    size_t i = (size_t)(c->written - c->peer_acked);
    for (; i < c->unacked.n && c->out_len < OUT_BATCH; i++) {
        struct rec *r = dq_at(&c->unacked, i);
        if (out_reserve(c, REC_HDR + r->len + tag) < 0)
            break;
        size_t at = c->out_len;
        net_put_header(c->out + at, r->type, r->len, r->seq, ack);
        if (r->len)
            memcpy(c->out + at + REC_HDR, r->buf, r->len);
        c->out_len += REC_HDR + r->len;
        if (out_tag(c, at) < 0)
            return CHANOS_ERR_TLS;
        /* Counted as written before the write: the peer may acknowledge
         * a record as soon as its bytes leave. */
        c->written = r->seq;
    }
    if (c->out_len == 0) {
        bool due = c->force_ack ||
                   (ack != c->ack_sent &&
                    (ack_quarter_locked(c) || (c->ack_due && now >= c->ack_due))) ||
                   now - c->last_write >= c->o.keepalive;
        if (!due || out_reserve(c, REC_HDR + tag) < 0)
            return 0;
        net_put_header(c->out, REC_ACK, 0, 0, ack);
        c->out_len = REC_HDR;
        if (out_tag(c, 0) < 0)
            return CHANOS_ERR_TLS;
    }
    c->ack_sent = ack;
    c->since_ack = 0;
    c->since_ack_bytes = 0;
    c->ack_due = 0;
    c->force_ack = false;
    c->out_seq = c->written;
    c->out_ack = ack;
    return 0;
}

static void drop_conn(chanos_net_link *c)
{
    tconn_close(&c->t);
    c->out_len = c->out_off = 0;
    c->hdr_have = 0;
    c->tag_have = 0;
    c->need = 0;
    c->rec_done = false;
    c->rd_want = POLLIN;
    c->more_in = false;
    free(c->pay);
    c->pay = NULL;
    pthread_mutex_lock(&c->mu);
    c->connected = false;
    /* A close waiting for the socket to take its last records waits no
     * more: there is no socket. */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* check_locked checks a record's header h against the protocol: 0 or
 * CHANOS_ERR_PROTOCOL. After its CLOSE a peer sends acknowledgements
 * only: a DATA or another CLOSE then breaks the protocol, and nothing of
 * it reaches a receiver that was told "closed". */
static int check_locked(chanos_net_link *c, const uint8_t *h)
{
    uint32_t len = chanos_load_u32(h + 4);
    uint64_t seq = chanos_load_u64(h + 8);
    if (h[1] || h[2] || h[3])
        return CHANOS_ERR_PROTOCOL;
    if (c->peer_closed && h[0] != REC_ACK)
        return CHANOS_ERR_PROTOCOL;
    switch (h[0]) {
    case REC_DATA:
        if (len < CHANOS_HEADER_SIZE || len > c->o.max_frame ||
            seq != c->received + 1 || c->inbox.n >= c->o.win_frames ||
            c->inbox_bytes + len > c->o.win_bytes)
            return CHANOS_ERR_PROTOCOL;
        return 0;
    case REC_ACK:
        return len != 0 || seq != 0 ? CHANOS_ERR_PROTOCOL : 0;
    case REC_CLOSE:
        return len != 0 || seq != c->received + 1 ? CHANOS_ERR_PROTOCOL : 0;
    default:
        return CHANOS_ERR_PROTOCOL;
    }
}

/* apply_locked acts on a record that check_locked passed, whose payload
 * (DATA's frame, which it takes) is pay: 0 or the link's end. *got: a
 * frame or the close arrived. */
static int apply_locked(chanos_net_link *c, const uint8_t *h, uint8_t *pay,
                        bool *got)
{
    uint32_t len = chanos_load_u32(h + 4);
    uint64_t seq = chanos_load_u64(h + 8), ack = chanos_load_u64(h + 16);
    switch (h[0]) {
    case REC_DATA: {
        struct rec r = {seq, REC_DATA, len, pay};
        if (dq_push(&c->inbox, r) < 0) {
            free(pay);
            return -ENOMEM;
        }
        c->inbox_bytes += len;
        c->received = seq;
        *got = true;
        break;
    }
    case REC_CLOSE:
        c->received = seq;
        c->peer_closed = true;
        c->force_ack = true;
        *got = true;
        break;
    }
    return apply_ack_locked(c, ack);
}

/* take copies into dst, which holds *have of its want bytes, as many of
 * the rest as the *n bytes at *b hold, and moves *b and *n past them:
 * true once dst holds all want. */
static bool take(uint8_t *dst, size_t *have, size_t want, const uint8_t **b,
                 size_t *n)
{
    size_t k = want - *have;
    if (k > *n)
        k = *n;
    memcpy(dst + *have, *b, k);
    *have += k;
    *b += k;
    *n -= k;
    return *have == want;
}

/* settle_locked ends a batch of records read: receivers are woken if
 * got (a frame or the peer's close came), and the link ends if err. */
static void settle_locked(chanos_net_link *c, bool got, int err)
{
    if (got) {
        pthread_cond_broadcast(&c->cv);
        ready(c);
    }
    if (err)
        end_locked(c, err, true);
}

/* process handles n bytes read, record by record: 0, or the link's end. */
static int process(chanos_net_link *c, const uint8_t *b, size_t n)
{
    int err = 0;
    bool got = false;
    pthread_mutex_lock(&c->mu);
    while (n > 0 && !err) {
        if (c->pay) {
            if (!take(c->pay, &c->pay_have, c->pay_len, &b, &n))
                break;
            uint8_t *pay = c->pay;
            c->pay = NULL;
            err = apply_locked(c, c->hdr, pay, &got);
            c->need = 0;
            c->rec_done = true;
            continue;
        }
        if (!take(c->hdr, &c->hdr_have, REC_HDR, &b, &n))
            break;
        c->hdr_have = 0;
        err = check_locked(c, c->hdr);
        if (err)
            break;
        if (c->hdr[0] != REC_DATA) {
            err = apply_locked(c, c->hdr, NULL, &got);
            c->rec_done = true;
            continue;
        }
        /* A frame: its payload follows. */
        c->pay_len = chanos_load_u32(c->hdr + 4);
        c->need = c->pay_len;
        c->pay_have = 0;
        c->pay = malloc(c->pay_len);
        if (!c->pay)
            err = -ENOMEM;
    }
    settle_locked(c, got, err);
    pthread_mutex_unlock(&c->mu);
    return err;
}

/* bad_tag counts a record that failed its authentication. */
static int bad_tag(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    c->auth_failures++;
    pthread_mutex_unlock(&c->mu);
    return NET_BAD_TAG;
}

/*
 * process_auth handles n bytes read in the authenticated-only mode: each
 * record, its header, payload and tag, is read whole and acted on only
 * once its tag checks, so that nothing a changed byte says is believed.
 * 0; NET_BAD_TAG (a record failed: the TCP connection is broken); or the
 * link's end.
 */
static int process_auth(chanos_net_link *c, const uint8_t *b, size_t n)
{
    while (n > 0) {
        if (c->hdr_have < REC_HDR) {
            if (!take(c->hdr, &c->hdr_have, REC_HDR, &b, &n))
                break;
            /* Only the length is used before the tag checks, and only to
             * know how much to read: within the maximum frame size. */
            uint32_t len = chanos_load_u32(c->hdr + 4);
            if (len > c->o.max_frame)
                return bad_tag(c);
            c->pay_len = len;
            c->need = (uint64_t)len + GMAC_TAG;
            c->pay_have = 0;
            c->tag_have = 0;
            if (len && !(c->pay = malloc(len))) {
                end_link(c, -ENOMEM, true);
                return -ENOMEM;
            }
            continue;
        }
        if (c->pay_have < c->pay_len) {
            take(c->pay, &c->pay_have, c->pay_len, &b, &n);
            continue;
        }
        if (!take(c->tag, &c->tag_have, GMAC_TAG, &b, &n))
            break;
        c->hdr_have = 0;
        uint8_t *pay = c->pay;
        c->pay = NULL;
        if (!gmac_check(&c->t.auth->in, c->hdr, REC_HDR, pay, c->pay_len,
                        c->tag)) {
            free(pay);
            return bad_tag(c);
        }
        /* Authentic: from here every rule of the protocol applies. */
        bool got = false;
        pthread_mutex_lock(&c->mu);
        int err = check_locked(c, c->hdr);
        if (err)
            free(pay);
        else
            err = apply_locked(c, c->hdr, pay, &got);
        settle_locked(c, got, err);
        pthread_mutex_unlock(&c->mu);
        if (err)
            return err;
        c->need = 0;
        c->rec_done = true;
    }
    return 0;
}

/* my_hello is this side's hello: its limits and, last received, what it
 * has received (final: this thread alone reads). */
static void my_hello(chanos_net_link *c, bool resume, uint64_t received,
                     uint8_t out[REC_HDR + HELLO_SIZE])
{
    struct hello mine = {.resume = resume,
                         .max_frame = c->o.max_frame,
                         .win_frames = c->o.win_frames,
                         .win_bytes = c->o.win_bytes,
                         .received = received};
    memcpy(mine.id, c->id, 16);
    net_hello_encode(&mine, out);
}

/* auth_reply answers the peer's hello in TLS, in the authenticated-only
 * mode, then turns the TCP connection to clear records: the accepting
 * side's records after its hello are clear. */
static int auth_reply(chanos_net_link *c, struct pending *p, uint64_t received)
{
    uint8_t hb[REC_HDR + HELLO_SIZE];
    my_hello(c, false, received, hb);
    int r = tconn_write_all(&p->t, hb, sizeof hb, c->wakefd,
                            net_now() + c->o.handshake, &c->stop, &c->mu);
    return r == 0 ? net_auth_switch(&p->t, false) : r;
}

/* attach makes p's connection the link's, after a hello exchange. */
static int attach(chanos_net_link *c, struct pending *p)
{
    pthread_mutex_lock(&c->mu);
    int e = c->end_err;
    if (!e && (p->h.received < c->peer_acked || p->h.received >= c->next_seq)) {
        e = CHANOS_ERR_PROTOCOL;
        end_locked(c, e, true);
    }
    uint64_t received = c->received;
    pthread_mutex_unlock(&c->mu);
    if (e == 0 && c->o.auth && p->reply) {
        /* Before the connection is the link's: a failure leaves the link
         * as it was, without a connection, to be resumed. The peer's
         * acknowledgements and this side's last received cannot change
         * meanwhile: only this thread reads. */
        e = auth_reply(c, p, received);
        if (e == CHANOS_ERR_PROTOCOL)
            end_link(c, e, true);
    }
    if (e) {
        tconn_close(&p->t);
        return e;
    }
    pthread_mutex_lock(&c->mu);
    if (c->end_err) {
        e = c->end_err;
        pthread_mutex_unlock(&c->mu);
        tconn_close(&p->t);
        return e;
    }
    if (c->gen == 0 && c->peer_max == 0) {
        c->peer_max = p->h.max_frame;
        c->peer_win_frames = p->h.win_frames;
        c->peer_win_bytes = p->h.win_bytes;
    }
    c->gen++;
    c->written = p->h.received;
    /* Acknowledgements written on the broken connection may be lost. */
    c->force_ack = true;
    c->connected = true;
    c->out_len = c->out_off = 0;
    if (p->reply && !c->o.auth) {
        if (out_reserve(c, REC_HDR + HELLO_SIZE) == 0) {
            my_hello(c, false, c->received, c->out);
            c->out_len = REC_HDR + HELLO_SIZE;
            c->out_seq = c->written;
            c->out_ack = c->flushed_ack;
        }
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    c->t = p->t;
    p->t = TCONN_NONE;
    c->last_read = c->last_write = c->last_record = net_now();
    c->need = 0;
    c->rec_done = false;
    return 0;
}

/* handshake dials the peer and exchanges hellos (the dialing side). */
static int handshake(chanos_net_link *c, bool resume, int64_t deadline,
                     struct pending *p)
{
    int fd = net_connect(c->addr, c->wakefd, deadline, &c->stop, &c->mu);
    if (fd < 0)
        return fd;
    p->t = (struct tconn){.fd = fd};
    int r = 0;
    if (c->cctx)
        r = net_tls_client(c->cctx, c->o.auth, c->o.t.peer, c->server_name,
                           &p->t, c->wakefd, deadline, &c->stop, &c->mu);
    pthread_mutex_lock(&c->mu);
    uint64_t received = c->received;
    pthread_mutex_unlock(&c->mu);
    uint8_t hb[REC_HDR + HELLO_SIZE];
    my_hello(c, resume, received, hb);
    if (r == 0)
        r = tconn_write_all(&p->t, hb, sizeof hb, c->wakefd, deadline,
                            &c->stop, &c->mu);
    if (r == 0)
        r = tconn_read_all(&p->t, hb, REC_HDR, c->wakefd, deadline, &c->stop,
                           &c->mu);
    /* Flags and reserved bytes are 0 in every record, a refusal's too
     * (docs/net.md, "Records"): a reply that sets them is not understood,
     * whatever its type says. */
    if (r == 0 && (hb[1] || hb[2] || hb[3]))
        r = CHANOS_ERR_PROTOCOL;
    if (r == 0 && hb[0] == REC_REJECT) {
        uint8_t code[4] = {0};
        r = tconn_read_all(&p->t, code, 4, c->wakefd, deadline, &c->stop,
                           &c->mu);
        if (r == 0)
            switch (chanos_load_u32(code)) {
            case REJECT_UNKNOWN:
                r = NET_REJECTED_UNKNOWN;
                break;
            case REJECT_AUTH:
                r = CHANOS_ERR_AUTH;
                break;
            case REJECT_MODE:
                r = CHANOS_ERR_MODE;
                break;
            default:
                r = CHANOS_ERR_REFUSED;
            }
    } else if (r == 0) {
        if (chanos_load_u32(hb + 4) != HELLO_SIZE)
            r = CHANOS_ERR_PROTOCOL;
        if (r == 0)
            r = tconn_read_all(&p->t, hb + REC_HDR, HELLO_SIZE, c->wakefd,
                               deadline, &c->stop, &c->mu);
        if (r == 0)
            r = net_hello_parse(hb, hb + REC_HDR, &p->h);
        if (r == 0 && memcmp(p->h.id, c->id, 16) != 0)
            r = CHANOS_ERR_PROTOCOL;
        /* The dialing side's records after the accepting side's hello
         * are clear. */
        if (r == 0 && c->o.auth)
            r = net_auth_switch(&p->t, true);
    }
    if (r != 0) {
        tconn_close(&p->t);
        return r;
    }
    p->reply = false;
    return 0;
}

/* redial resumes the connection from the dialing side, with backoff,
 * until it succeeds, the grace period passes or the peer refuses. */
static void redial(chanos_net_link *c)
{
    int64_t deadline = net_now() + c->o.grace;
    int64_t delay = c->o.redial_min;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool stop = c->stop || c->end_err;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return;
        int64_t now = net_now();
        if (now >= deadline) {
            end_link(c, CHANOS_ERR_NETWORK_LOST, false);
            return;
        }
        int64_t hd = now + c->o.handshake < deadline ? now + c->o.handshake
                                                      : deadline;
        struct pending p = {0};
        int r = handshake(c, true, hd, &p);
        if (r == 0) {
            attach(c, &p);
            return;
        }
        if (r == NET_REJECTED_UNKNOWN) {
            end_link(c, CHANOS_ERR_PEER_DIED, false);
            return;
        }
        if (r == CHANOS_ERR_PROTOCOL) {
            end_link(c, CHANOS_ERR_PROTOCOL, true);
            return;
        }
        if (r == CHANOS_ERR_CLOSED)
            return; /* stopped by close */
        int64_t until = net_now() + delay;
        if (until > deadline)
            until = deadline;
        while (net_wait(-1, 0, c->wakefd, until) == 1) {
            pthread_mutex_lock(&c->mu);
            stop = c->stop || c->end_err;
            pthread_mutex_unlock(&c->mu);
            if (stop)
                return;
        }
        delay = 2 * delay < c->o.redial_max ? 2 * delay : c->o.redial_max;
    }
}

static int poll_ms(int64_t d)
{
    if (d <= 0)
        return 0;
    int64_t ms = (d + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : (int)ms;
}

static void drain_wake(chanos_net_link *c)
{
    uint64_t v;
    if (read(c->wakefd, &v, sizeof v) < 0) {
        /* nothing to drain */
    }
}

/*
 * record_deadline is when the connection is taken for broken for want of
 * progress (min_record_rate; INT64_MAX if off): dead_after, plus the time
 * the record in progress (need bytes after its header) and a TLS record
 * around it take at the minimum rate, after the last record was whole.
 * Any byte read keeps last_read fresh, so without this a length changed
 * on the path (read before the tag or MAC can check it) would have the
 * link wait for that many bytes while the peer's keepalives trickle in.
 */
static int64_t record_deadline(const chanos_net_link *c)
{
    uint64_t rate = (uint64_t)c->o.min_record_rate;
    if (rate == 0)
        return INT64_MAX;
    /* need < 2^33 and rate < 2^31: neither product overflows. */
    uint64_t bytes = c->need + TLS_SLACK;
    uint64_t ns = bytes / rate * 1000000000u + bytes % rate * 1000000000u / rate;
    int64_t base = c->last_record + c->o.dead_after;
    if (ns > (uint64_t)(INT64_MAX - base))
        return INT64_MAX;
    return base + (int64_t)ns;
}

/* run_connected runs one round of a connected link: write, wait, read. */
static void run_connected(chanos_net_link *c)
{
    int64_t now = net_now();
    pthread_mutex_lock(&c->mu);
    if (c->out_off == c->out_len && fill_out_locked(c, now) != 0) {
        pthread_mutex_unlock(&c->mu);
        drop_conn(c);
        return;
    }
    int64_t next = c->last_write + c->o.keepalive;
    if (c->ack_due && c->ack_due < next && ack_value_locked(c) != c->ack_sent)
        next = c->ack_due;
    if (c->last_read + c->o.dead_after < next)
        next = c->last_read + c->o.dead_after;
    int64_t rec_due = record_deadline(c);
    if (rec_due < next)
        next = rec_due;
    /* The last turn stopped reading before the socket ran dry: on at
     * once (TLS may hold some of it where poll cannot see it). */
    if (c->more_in)
        next = now;
    pthread_mutex_unlock(&c->mu);

    short want_w = 0, want_r = POLLIN;
    while (c->out_off < c->out_len) {
        ssize_t w = tconn_write(&c->t, c->out + c->out_off,
                                c->out_len - c->out_off, &want_w);
        if (w < 0) {
            drop_conn(c);
            return;
        }
        if (w == 0)
            break;
        c->out_off += (size_t)w;
        c->last_write = net_now();
        want_w = 0;
    }
    if (c->out_off == c->out_len) {
        want_w = 0;
        /* More may be ready to go at once. */
        pthread_mutex_lock(&c->mu);
        if (c->out_len && (c->out_seq > c->flushed_seq ||
                           c->out_ack > c->flushed_ack)) {
            if (c->out_seq > c->flushed_seq)
                c->flushed_seq = c->out_seq;
            if (c->out_ack > c->flushed_ack)
                c->flushed_ack = c->out_ack;
            pthread_cond_broadcast(&c->cv);
        }
        bool more = c->written - c->peer_acked < c->unacked.n || c->force_ack;
        pthread_mutex_unlock(&c->mu);
        if (more)
            next = now;
    }
    if (c->rd_want == POLLOUT)
        want_w = POLLOUT;
    struct pollfd pf[2] = {{c->t.fd, (short)(want_r | want_w), 0},
                           {c->wakefd, POLLIN, 0}};
    int pr = poll(pf, 2, poll_ms(next - net_now()));
    if (pr < 0 && errno != EINTR) {
        drop_conn(c);
        return;
    }
    if (pf[1].revents & POLLIN)
        drain_wake(c);
    c->more_in = false;
    for (int reads = 0;; reads++) {
        if (reads == READS_PER_TURN) {
            c->more_in = true;
            break;
        }
        short want;
        uint64_t raw = c->t.raw_in;
        ssize_t r = tconn_read(&c->t, c->rbuf, sizeof c->rbuf, &want);
        /* Any byte the socket gives is a sign of life, in the middle of a
         * record too (of a TLS record, or a tagged one): a record that
         * takes longer than dead_after to cross a slow network keeps its
         * connection while its bytes come. */
        int64_t t = net_now();
        if (c->t.raw_in != raw)
            c->last_read = t;
        if (r < 0) {
            drop_conn(c);
            return;
        }
        c->rd_want = r == 0 ? want : POLLIN;
        if (r == 0)
            break;
        if ((c->t.auth ? process_auth(c, c->rbuf, (size_t)r)
                       : process(c, c->rbuf, (size_t)r)) != 0) {
            drop_conn(c);
            return;
        }
        /* Progress is whole records: a record whose length was changed
         * on the path takes bytes as they come, and never ends. */
        if (c->rec_done) {
            c->last_record = t;
            c->rec_done = false;
        }
    }
    int64_t now2 = net_now();
    if (now2 - c->last_read > c->o.dead_after)
        drop_conn(c); /* a cut cable resets nothing */
    else if (now2 > record_deadline(c))
        drop_conn(c); /* bytes come, records do not (min_record_rate) */
}

/* exchange_over_locked says whether the close exchange has ended what the
 * two sides have to say to each other: the peer's CLOSE has arrived, or
 * the peer has acknowledged this side's (after which it sends only
 * acknowledgements, its frames before having come ahead of it). Nothing
 * is then left to resume: a peer that had read this side's CLOSE before
 * it closed sends none of its own, and closes its TCP connection and
 * forgets the connection once it has acknowledged this side's, so that a
 * resume would be refused as a death. mu held. */
static bool exchange_over_locked(const chanos_net_link *c)
{
    return c->peer_closed || (c->close_seq && c->peer_acked >= c->close_seq);
}

/* linger_close closes the TCP connection after an orderly close
 * (docs/net.md, "Close"): it shuts down the socket's writing, so that the
 * peer reads this side's last records and then the end of the stream,
 * and reads and drops what the peer still sends until the peer closes its
 * side too, the deadline `until` passes, or more comes than an honest
 * peer sends after this side's CLOSE (a window of frames it sent before
 * reading it, and acknowledgements: the window's bytes twice over, room
 * for headers, tags and TLS, and 64 KiB). A socket closed with bytes
 * unread in it sends a reset rather than an orderly end, and the reset
 * drops what it overtakes, this side's CLOSE among them. Under TLS the
 * socket itself is shut down and read: what is left of the stream is of
 * no use, and close_notify is not needed after the protocol's CLOSE (nor
 * sent in the authenticated-only mode). */
static void linger_close(chanos_net_link *c, int64_t until)
{
    uint64_t limit = 2 * (uint64_t)c->o.win_bytes +
                     64 * (uint64_t)c->o.win_frames + (64u << 10);
    if (c->t.fd >= 0 && net_now() < until && shutdown(c->t.fd, SHUT_WR) == 0) {
        for (uint64_t got = 0; got < limit;) {
            ssize_t r = recv(c->t.fd, c->rbuf, sizeof c->rbuf, 0);
            if (r > 0) {
                got += (uint64_t)r;
                continue;
            }
            if (r == 0)
                break; /* the peer's end */
            if (errno == EINTR)
                continue;
            if ((errno != EAGAIN && errno != EWOULDBLOCK) ||
                net_wait(c->t.fd, POLLIN, -1, until) != 0)
                break;
        }
    }
    tconn_close(&c->t);
}

static void *io_main(void *arg)
{
    chanos_net_link *c = arg;
    if (c->dialer) {
        pthread_mutex_lock(&c->mu);
        bool first = c->dial_rc == 1;
        pthread_mutex_unlock(&c->mu);
        if (first) {
            struct pending p = {0};
            int r = handshake(c, false, net_now() + c->o.handshake, &p);
            if (r == NET_REJECTED_UNKNOWN)
                r = CHANOS_ERR_REFUSED;
            if (r == 0)
                r = attach(c, &p);
            pthread_mutex_lock(&c->mu);
            c->dial_rc = r;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            if (r != 0)
                return NULL;
        }
    }
    int64_t grace_end = 0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        if (c->stop || c->end_err) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        struct pending p = {0};
        if (c->pend.set) {
            p = c->pend;
            c->pend = (struct pending){0};
            c->pend.t = TCONN_NONE;
        }
        bool over = exchange_over_locked(c);
        pthread_mutex_unlock(&c->mu);
        if (p.set) {
            /* The peer redialed, perhaps before this side saw the break:
             * what was read on the old connection is final, this thread
             * being its only reader. */
            if (c->t.fd >= 0)
                drop_conn(c);
            if (attach(c, &p) == 0)
                grace_end = 0;
            continue;
        }
        if (c->t.fd >= 0) {
            run_connected(c);
            continue;
        }
        if (over) {
            /* Nothing is left to resume. */
            net_wait(-1, 0, c->wakefd, net_now() + 3600 * (int64_t)1000000000);
            continue;
        }
        if (c->dialer) {
            redial(c);
            continue;
        }
        if (!grace_end)
            grace_end = net_now() + c->o.grace;
        if (net_wait(-1, 0, c->wakefd, grace_end) == CHANOS_ERR_TIMEDOUT)
            end_link(c, CHANOS_ERR_NETWORK_LOST, false);
    }
    pthread_mutex_lock(&c->mu);
    int64_t until = c->linger_until;
    pthread_mutex_unlock(&c->mu);
    linger_close(c, until);
    pthread_mutex_lock(&c->mu);
    c->connected = false;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- making and freeing links ---- */

static chanos_net_link *link_new(const struct net_opts *o, bool dialer)
{
    chanos_net_link *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->o = *o;
    c->dialer = dialer;
    c->next_seq = 1;
    c->t = TCONN_NONE;
    c->pend.t = TCONN_NONE;
    c->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->readyfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wakefd < 0 || c->readyfd < 0) {
        if (c->wakefd >= 0)
            close(c->wakefd);
        if (c->readyfd >= 0)
            close(c->readyfd);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    return c;
}

static void link_free(chanos_net_link *c)
{
    tconn_close(&c->t);
    if (c->pend.set)
        tconn_close(&c->pend.t);
    dq_free(&c->unacked);
    dq_free(&c->inbox);
    free(c->cur);
    free(c->pay);
    free(c->out);
    free(c->addr);
    free(c->server_name);
    SSL_CTX_free(c->cctx);
    close(c->wakefd);
    close(c->readyfd);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    OPENSSL_cleanse(c->id, sizeof c->id);
    free(c);
}

static int start_thread(chanos_net_link *c)
{
    sigset_t old;
    net_block_signals(&old);
    int r = pthread_create(&c->thr, NULL, io_main, c);
    net_restore_signals(&old);
    if (r != 0)
        return -r;
    c->thr_started = true;
    return 0;
}

static int64_t deadline_of(int timeout_ms)
{
    return net_now() + (int64_t)timeout_ms * 1000000;
}

static void timespec_of(int64_t t, struct timespec *ts)
{
    ts->tv_sec = t / 1000000000;
    ts->tv_nsec = t % 1000000000;
}

/* wait_locked waits on c->cv until deadline (-1: none): false on
 * timeout. */
static bool wait_locked(chanos_net_link *c, int64_t deadline)
{
    if (deadline < 0) {
        pthread_cond_wait(&c->cv, &c->mu);
        return true;
    }
    struct timespec ts;
    timespec_of(deadline, &ts);
    return pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT ||
           net_now() < deadline;
}

int chanos_net_dial(const char *addr, const struct chanos_net_options *opts,
                    chanos_net_link **out)
{
    if (!addr || !out)
        return -EINVAL;
    *out = NULL;
    struct net_opts o;
    net_opts_resolve(opts, &o);
    chanos_net_link *c = link_new(&o, true);
    if (!c)
        return -ENOMEM;
    c->addr = strdup(addr);
    if (o.tls) {
        c->server_name = strdup(o.t.server_name ? o.t.server_name
                                                 : CHANOS_NET_DEFAULT_SERVER_NAME);
        c->cctx = net_tls_client_ctx(&o.t);
        c->has_fp = true;
        memcpy(c->peer_fp, o.t.peer, CHANOS_NET_FP_SIZE);
        if (!c->cctx) {
            link_free(c);
            return o.t.identity ? CHANOS_ERR_TLS : -EINVAL;
        }
    }
    /* Only the dialing side keeps the TLS options, and not the pointers
     * it was given: the identity is in cctx now. */
    c->o.t.identity = NULL;
    c->o.t.server_name = NULL;
    if (!c->addr || (o.tls && !c->server_name) ||
        getrandom(c->id, sizeof c->id, 0) != (ssize_t)sizeof c->id) {
        link_free(c);
        return -ENOMEM;
    }
    c->dial_rc = 1;
    int r = start_thread(c);
    if (r < 0) {
        link_free(c);
        return r;
    }
    pthread_mutex_lock(&c->mu);
    while (c->dial_rc == 1)
        pthread_cond_wait(&c->cv, &c->mu);
    r = c->dial_rc;
    pthread_mutex_unlock(&c->mu);
    if (r != 0) {
        pthread_join(c->thr, NULL);
        link_free(c);
        return r;
    }
    *out = c;
    return 0;
}

chanos_net_link *net_link_accepted(const struct net_opts *o,
                                   struct registry *reg, struct tconn t,
                                   const struct hello *h,
                                   const uint8_t fp[CHANOS_NET_FP_SIZE],
                                   const char *name)
{
    chanos_net_link *c = link_new(o, false);
    if (!c)
        return NULL;
    memset(&c->o.t, 0, sizeof c->o.t);
    memcpy(c->id, h->id, 16);
    if (o->tls) {
        c->has_fp = true;
        memcpy(c->peer_fp, fp, CHANOS_NET_FP_SIZE);
        /* The name it was opened under, which its resumes present. */
        if (!(c->server_name = strdup(name))) {
            link_free(c);
            return NULL;
        }
    }
    if (reg->n == reg->cap) {
        size_t nc = reg->cap ? 2 * reg->cap : 16;
        chanos_net_link **v = realloc(reg->links, nc * sizeof *v);
        if (!v) {
            link_free(c);
            return NULL;
        }
        reg->links = v;
        reg->cap = nc;
    }
    /* Set before the link is returned: limits are fixed from here on. */
    c->peer_max = h->max_frame;
    c->peer_win_frames = h->win_frames;
    c->peer_win_bytes = h->win_bytes;
    c->pend = (struct pending){.set = true, .t = t, .h = *h, .reply = true};
    if (start_thread(c) < 0) {
        c->pend.set = false;
        link_free(c);
        return NULL;
    }
    reg->links[reg->n++] = c;
    reg->refs++;
    c->reg = reg;
    return c;
}

bool net_link_resume(chanos_net_link *c, struct tconn t, const struct hello *h,
                     const uint8_t fp[CHANOS_NET_FP_SIZE], const char *name)
{
    pthread_mutex_lock(&c->mu);
    /* A resume after the peer's close is taken: the peer may still wait
     * for the acknowledgement of its close. With TLS a resume presents
     * the certificate and the server name that opened the connection. */
    if (c->end_err || c->stop ||
        (c->has_fp && (memcmp(fp, c->peer_fp, CHANOS_NET_FP_SIZE) != 0 ||
                       strcmp(name, c->server_name) != 0))) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    if (c->pend.set)
        tconn_close(&c->pend.t);
    c->pend = (struct pending){.set = true, .t = t, .h = *h, .reply = true};
    wake(c);
    pthread_mutex_unlock(&c->mu);
    return true;
}

void net_link_end(chanos_net_link *c, int err)
{
    end_link(c, err, false);
}

const uint8_t *net_link_id(const chanos_net_link *c)
{
    return c->id;
}

/* ---- the API ---- */

/* ref_null says whether the iref encoded at b is the null iref, which no
 * frame may carry (docs/net.md, "Records"). */
static bool ref_null(const uint8_t *b)
{
    for (int i = 0; i < CHANOS_NET_REF_SIZE; i++)
        if (b[i])
            return false;
    return true;
}

/* send_frame sends frame[0..len) followed by its nrefs irefs, refs (each
 * CHANOS_NET_REF_SIZE bytes), in one DATA record: the frame's ncaps must
 * be nrefs; the record counts against the maximum frame and the window. */
static int send_frame(chanos_net_link *c, const void *frame, size_t len,
                      const uint8_t *refs, uint32_t nrefs, int timeout_ms)
{
    if (!c || (!frame && len) || (nrefs && !refs))
        return -EINVAL;
    struct chanos_hdr h;
    int r = chanos_hdr_parse(&h, frame, len);
    if (r < 0)
        return r;
    /* descriptors do not cross machines; irefs, the trailer, do */
    if (h.ncaps != nrefs)
        return CHANOS_ERR_CAP;
    for (uint32_t i = 0; i < nrefs; i++)
        if (ref_null(refs + (size_t)i * CHANOS_NET_REF_SIZE))
            return CHANOS_ERR_CAP;
    size_t rlen = (size_t)nrefs * CHANOS_NET_REF_SIZE;
    pthread_mutex_lock(&c->mu);
    if (len + rlen > c->peer_max || len + rlen > c->o.max_frame) {
        pthread_mutex_unlock(&c->mu);
        return CHANOS_ERR_TOO_LARGE;
    }
    len += rlen;
    int64_t deadline = timeout_ms < 0 ? -1 : deadline_of(timeout_ms);
    for (;;) {
        if (c->end_err) {
            r = c->end_err;
            goto out;
        }
        if (c->closing || c->peer_closed) {
            r = CHANOS_ERR_CLOSED;
            goto out;
        }
        if (c->unacked_data < c->peer_win_frames &&
            c->unacked_bytes + len <= c->peer_win_bytes)
            break;
        if (timeout_ms == 0) {
            r = CHANOS_ERR_AGAIN;
            goto out;
        }
        if (!wait_locked(c, deadline)) {
            r = CHANOS_ERR_TIMEDOUT;
            goto out;
        }
    }
    uint8_t *buf = malloc(len);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    memcpy(buf, frame, len - rlen);
    if (rlen)
        memcpy(buf + len - rlen, refs, rlen);
    struct rec rec = {c->next_seq, REC_DATA, (uint32_t)len, buf};
    if (dq_push(&c->unacked, rec) < 0) {
        free(buf);
        r = -ENOMEM;
        goto out;
    }
    c->next_seq++;
    c->unacked_bytes += len;
    c->unacked_data++;
    r = 0;
    if (c->connected)
        wake(c);
out:
    pthread_mutex_unlock(&c->mu);
    return r;
}

int chanos_net_send(chanos_net_link *c, const void *frame, size_t len,
                    int timeout_ms)
{
    int r = send_frame(c, frame, len, NULL, 0, timeout_ms);
    return r == CHANOS_ERR_AGAIN ? CHANOS_ERR_TIMEDOUT : r;
}

int chanos_net_try_send(chanos_net_link *c, const void *frame, size_t len)
{
    return send_frame(c, frame, len, NULL, 0, 0);
}

int chanos_net_send_refs(chanos_net_link *c, const void *frame, size_t len,
                         const uint8_t *refs, uint32_t nrefs, int timeout_ms)
{
    int r = send_frame(c, frame, len, refs, nrefs, timeout_ms);
    return r == CHANOS_ERR_AGAIN && timeout_ms != 0 ? CHANOS_ERR_TIMEDOUT : r;
}

/* split_refs checks a DATA record's payload p[0..n) as a frame and the
 * irefs after it (docs/net.md, "Records"): a frame whose header says
 * ncaps = N > 0 is followed by exactly N irefs, none of them null. 0 and
 * the frame's size in *size, or CHANOS_ERR_PROTOCOL. */
static int split_refs(const uint8_t *p, size_t n, size_t *size)
{
    struct chanos_hdr h;
    size_t sz = n, ncaps = n >= CHANOS_HEADER_SIZE ? p[7] : 0;
    if (ncaps) {
        sz = chanos_load_u32(p);
        if (sz < CHANOS_HEADER_SIZE || sz > n ||
            n - sz != ncaps * CHANOS_NET_REF_SIZE)
            return CHANOS_ERR_PROTOCOL;
        for (size_t i = 0; i < ncaps; i++)
            if (ref_null(p + sz + i * CHANOS_NET_REF_SIZE))
                return CHANOS_ERR_PROTOCOL;
    }
    if (chanos_hdr_parse(&h, p, sz) < 0)
        return CHANOS_ERR_PROTOCOL;
    *size = sz;
    return 0;
}

int chanos_net_recv(chanos_net_link *c, const void **frame, size_t *len,
                    int timeout_ms)
{
    return chanos_net_recv_refs(c, frame, len, NULL, timeout_ms);
}

int chanos_net_recv_refs(chanos_net_link *c, const void **frame, size_t *len,
                         const uint8_t **refs, int timeout_ms)
{
    if (!c || !frame || !len)
        return -EINVAL;
    if (refs)
        *refs = NULL;
    pthread_mutex_lock(&c->mu);
    free(c->cur);
    c->cur = NULL;
    int64_t deadline = timeout_ms < 0 ? -1 : deadline_of(timeout_ms);
    int r;
    while (c->inbox.n == 0 || (c->end_err && c->end_now)) {
        if (c->end_err) {
            r = c->end_err;
            goto out;
        }
        if (c->peer_closed) {
            r = CHANOS_ERR_CLOSED;
            goto out;
        }
        if (timeout_ms == 0) {
            r = CHANOS_ERR_AGAIN;
            goto out;
        }
        if (!wait_locked(c, deadline)) {
            r = CHANOS_ERR_TIMEDOUT;
            goto out;
        }
    }
    struct rec f = dq_pop(&c->inbox);
    c->inbox_bytes -= f.len;
    c->consumed = f.seq;
    c->cur = f.buf;
    c->since_ack++;
    c->since_ack_bytes += f.len;
    if (ack_quarter_locked(c)) {
        wake(c);
    } else if (!c->ack_due) {
        c->ack_due = net_now() + c->o.ack_delay;
        wake(c);
    }
    size_t size;
    if (split_refs(f.buf, f.len, &size) != 0) {
        end_locked(c, CHANOS_ERR_PROTOCOL, true);
        r = CHANOS_ERR_PROTOCOL;
        goto out;
    }
    *frame = f.buf;
    *len = size;
    if (refs && size < f.len)
        *refs = f.buf + size;
    r = 0;
out:
    if (c->ready_set && c->inbox.n == 0 && !c->end_err && !c->peer_closed) {
        uint64_t n;
        if (read(c->readyfd, &n, sizeof n) < 0) {
            /* EAGAIN: it was not readable */
        }
        c->ready_set = false;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

int chanos_net_fd(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    c->fd_wanted = true;
    if (c->inbox.n || c->end_err || c->peer_closed)
        ready(c);
    pthread_mutex_unlock(&c->mu);
    return c->readyfd;
}

int chanos_net_err(chanos_net_link *c)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int e = c->end_err;
    pthread_mutex_unlock(&c->mu);
    return e;
}

bool chanos_net_peer_closed(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    bool pc = c->peer_closed;
    pthread_mutex_unlock(&c->mu);
    return pc;
}

uint64_t chanos_net_auth_failures(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = c->auth_failures;
    pthread_mutex_unlock(&c->mu);
    return n;
}

uint64_t chanos_net_resumes(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t g = c->gen ? c->gen - 1 : 0;
    pthread_mutex_unlock(&c->mu);
    return g;
}

size_t chanos_net_max_frame(const chanos_net_link *c)
{
    /* Both are fixed once the link is returned. */
    return c->peer_max < c->o.max_frame ? c->peer_max : c->o.max_frame;
}

int chanos_net_peer_fingerprint(const chanos_net_link *c,
                                uint8_t fp[CHANOS_NET_FP_SIZE])
{
    if (!c || !c->has_fp)
        return -EINVAL;
    memcpy(fp, c->peer_fp, CHANOS_NET_FP_SIZE);
    return 0;
}

/* close_begin queues this side's CLOSE (docs/net.md, "Close"), once; what
 * it meets is close_rc. */
static void close_begin(chanos_net_link *c)
{
    pthread_mutex_lock(&c->mu);
    c->closing = true;
    pthread_cond_broadcast(&c->cv);
    if (!c->end_err && !c->peer_closed && !c->close_seq && !c->close_rc) {
        struct rec r = {c->next_seq, REC_CLOSE, 0, NULL};
        if (dq_push(&c->unacked, r) == 0) {
            c->close_seq = c->next_seq++;
            wake(c);
        } else {
            c->close_rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* close_end waits until deadline for the acknowledgement of the CLOSE
 * close_begin queued, then until flush_deadline (-1: linger from then)
 * for the socket to take the last records, ends the link and frees it. */
static int close_end(chanos_net_link *c, int64_t deadline,
                     int64_t flush_deadline)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->close_rc;
    while (rc == 0 && c->close_seq && c->peer_acked < c->close_seq &&
           !c->end_err && !c->peer_closed) {
        if (!wait_locked(c, deadline)) {
            rc = CHANOS_ERR_TIMEDOUT;
            break;
        }
    }
    /* Before the connection goes: the socket has taken this side's close
     * and the acknowledgement of the peer's, which the peer waits for. */
    if (flush_deadline < 0)
        flush_deadline = net_now() + c->o.linger;
    while (!c->end_err && c->connected &&
           ((c->close_seq && c->flushed_seq < c->close_seq) ||
            (c->peer_closed && c->flushed_ack < c->received))) {
        if (!wait_locked(c, flush_deadline))
            break;
    }
    /* A close sent succeeds once the peer acknowledged every frame before
     * it: then even a peer that no longer knows the connection when the
     * close ends otherwise (their closes crossed, and the acknowledgement
     * of this side's was lost) took everything. */
    if (rc == 0 && c->end_err && !c->peer_closed &&
        (!c->close_seq || c->peer_acked < c->close_seq - 1))
        rc = c->end_err;
    /* An orderly end lingers on the TCP connection, within the close's
     * deadline; a link that ended otherwise has nothing more to say. */
    if (!c->end_err)
        c->linger_until = deadline;
    end_locked(c, CHANOS_ERR_CLOSED, true);
    c->stop = true;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    if (c->reg) {
        struct registry *reg = c->reg;
        pthread_mutex_lock(&reg->mu);
        for (size_t i = 0; i < reg->n; i++) {
            if (reg->links[i] == c) {
                reg->links[i] = reg->links[--reg->n];
                break;
            }
        }
        pthread_mutex_unlock(&reg->mu);
        registry_put(reg);
    }
    if (c->thr_started)
        pthread_join(c->thr, NULL);
    link_free(c);
    return rc;
}

int chanos_net_close(chanos_net_link *c)
{
    if (!c)
        return 0;
    close_begin(c);
    return close_end(c, net_now() + c->o.linger, -1);
}

void net_links_close(chanos_net_link **v, size_t n, int64_t deadline)
{
    for (size_t i = 0; i < n; i++)
        close_begin(v[i]);
    for (size_t i = 0; i < n; i++)
        close_end(v[i], deadline, deadline);
}

/* ---- under a chanos connection ---- */

static int op_send(void *link, const void *frame, size_t len, int timeout_ms)
{
    if (timeout_ms == 0)
        return chanos_net_try_send(link, frame, len);
    return chanos_net_send(link, frame, len, timeout_ms);
}

static int op_recv(void *link, const void **frame, size_t *len,
                   int timeout_ms)
{
    return chanos_net_recv(link, frame, len, timeout_ms);
}

static int op_send_refs(void *link, const void *frame, size_t len,
                        const uint8_t *refs, uint32_t nrefs, int timeout_ms)
{
    return chanos_net_send_refs(link, frame, len, refs, nrefs, timeout_ms);
}

static int op_recv_refs(void *link, const void **frame, size_t *len,
                        const uint8_t **refs, int timeout_ms)
{
    return chanos_net_recv_refs(link, frame, len, refs, timeout_ms);
}

static int op_peer_gone(void *link)
{
    chanos_net_link *c = link;
    pthread_mutex_lock(&c->mu);
    int r = c->peer_closed ? CHANOS_ERR_CLOSED : c->end_err;
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void op_close(void *link)
{
    chanos_net_close(link);
}

static int op_fd(void *link)
{
    return chanos_net_fd(link);
}

static const struct chanos_link_ops net_ops = {
    .send = op_send,
    .recv = op_recv,
    .peer_gone = op_peer_gone,
    .close = op_close,
    .fd = op_fd,
    .send_refs = op_send_refs,
    .recv_refs = op_recv_refs,
};

int chanos_net_conn_new(chanos_net_link *c, chanos_conn **out)
{
    if (!c) {
        if (out)
            *out = NULL;
        return -EINVAL;
    }
    return chanos_conn_new_link(&net_ops, c, out);
}

const char *chanos_net_strerror(int err)
{
    switch (err) {
    case CHANOS_ERR_NETWORK_LOST:
        return "network lost: no resume within the grace period";
    case CHANOS_ERR_AUTH:
        return "peer not authenticated: its certificate is not the pinned "
               "one, or this side's was not admitted";
    case CHANOS_ERR_TLS:
        return "the TLS handshake failed";
    case CHANOS_ERR_REFUSED:
        return "the listener refused the connection (a bad hello, or busy)";
    case CHANOS_ERR_MODE:
        return "the peers disagree on encryption: one side is authenticated "
               "only (auth_only), the other encrypts";
    case CHANOS_ERR_PROTOCOL:
        return "the peer broke the net protocol";
    case CHANOS_ERR_PEER_DIED:
        return "peer died: it no longer holds the connection";
    case CHANOS_ERR_CAP:
        return "a frame with capabilities: descriptors do not cross machines "
               "(channel endpoints can)";
    }
    return chanos_strerror(err);
}
