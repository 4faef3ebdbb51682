/*
 * ump.c: shared-memory connections between processes (docs/ump.md).
 *
 * The layout and protocol are those of the Go package interconnect/ump;
 * the two must change together. The reader trusts nothing in shared memory:
 * it loads each word once into a local, validates the local, and bounds
 * every length and index before using it.
 */
#include "chanos.h"
#include "internal.h"
#include "spin.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ump ring layout is little-endian; this host is not supported"
#endif

/* Layout: see docs/ump.md, "Ring format". */
#define MAGIC        0x4d55534f4e414843ull /* "CHANOSUM" */
#define SLOT         CHANOS_UMP_SLOT_SIZE
#define PAYLOAD      CHANOS_UMP_SLOT_PAYLOAD
#define CTRL_OFF     56
#define HEADER_SIZE  4096
#define BLOCK        128
#define OFF_MAGIC    0
#define OFF_VERSION  8
#define OFF_SLOTSIZE 12
#define OFF_SLOTS    16
#define OFF_MAXMSG   20
#define OFF_HDRSIZE  24
#define OFF_BULK     28
#define OFF_TOTAL    32
#define OFF_CLOSED0  (1 * BLOCK)
#define OFF_RING0    (4 * BLOCK)
#define RING_CTL     (4 * BLOCK)
#define OFF_PRODWAIT (0 * BLOCK)
#define OFF_HEAD     (1 * BLOCK)
#define OFF_BULKHEAD (OFF_HEAD + 8) /* same line as head: one writer */
#define OFF_CONSWAIT (2 * BLOCK)
#define INFO_FIRST   0x80000000u
#define INFO_CAPS    0x40000000u
#define INFO_BULK    0x20000000u /* the message's bytes are in the bulk region */
#define INFO_LEN     0x1fffffffu
#define BULK_MIN     CHANOS_UMP_BULK_MIN /* longer messages go bulk, if B > 0 */
#define CLOSED_BIT   (1ull << 63)
#define MIN_SLOTS    2u

#define HELLO_MAGIC 0x314f4c4c45484d55ull /* "UMHELLO1" */
#define ACK_MAGIC   0x314b4341504d55ull   /* "UMPACK1\0" */
#define HELLO_SIZE  16
/* The hello's descriptors: the memfd, then the attacher's data socket and
 * space socket (docs/ump.md, "Setup"). */
#define NFDS        4
/* A descriptor record: the message's sequence number, its count. */
#define CAPS_RECORD 8
/* A drain reads at most DRAIN_READS times DRAIN_BUF bytes: a legitimate
 * peer sends one byte per announcement, and a hostile one that keeps the
 * socket full gets a bounded read per wait, never a loop. */
#define DRAIN_BUF   64
#define DRAIN_READS 16

typedef _Atomic uint64_t aword;

struct chanos_ump {
    uint8_t *mem;
    size_t mem_size;
    uint64_t n, mask; /* slots per ring */
    uint64_t nb, bmask; /* bulk region bytes per ring (0: none), nb - 1 */
    uint32_t max_msg;
    int64_t spin_ns;
    int64_t tx_spin, rx_spin;     /* the adapted windows: see spin_lost */
    unsigned tx_misses, rx_misses; /* waits that ended in sleep since one did not */
    unsigned tx_yields, rx_yields; /* waits left that may yield: YIELD_WAITS */
    int sock, epfd;
    /* Our ends of the two wake-up socket pairs (docs/ump.md): we wait on
     * data for "the peer's ring has data" and send on it after writing
     * ours; we wait on space for "our ring has space" and send on it after
     * publishing our position in the peer's ring. */
    int data, space;
    /* Our end of the caps socket (docs/ump.md, "Descriptors"), and the
     * records of descriptors sent (by the only sender) and received (by
     * the only receiver). */
    int caps;
    uint32_t caps_out, caps_in;
    aword *my_closed, *peer_closed;
    _Atomic int err;      /* why the connection ended, 0 while open */
    _Atomic int peer_end; /* set once the peer's socket reached EOF */

    /* sending side */
    uint8_t *tx_slots;
    uint64_t tx_tail, tx_head;
    aword *tx_headp, *tx_waitp, *tx_peer_waitp;
    int tx_announced;
    uint64_t tx_epoch, tx_signaled; /* our last announcement; the peer's last signalled */
    uint8_t *tx_bulk;          /* our bulk region; NULL if none */
    uint64_t tx_btail;         /* bulk bytes written so far */
    uint64_t tx_bhead;         /* bulk bytes consumed, as last read and validated */
    aword *tx_bheadp;          /* consumer-written: its bulk position */

    /* receiving side */
    uint8_t *rx_slots;
    uint64_t rx_pos, rx_pub, rx_batch;
    aword *rx_headp, *rx_waitp, *rx_peer_waitp;
    int rx_announced;
    uint64_t rx_epoch, rx_signaled;
    uint8_t *rx_bulk;          /* the peer's bulk region; NULL if none */
    uint64_t rx_bpos, rx_bpub; /* bulk bytes copied out; as last published */
    uint64_t rx_bbatch;        /* publish at least every rx_bbatch bulk bytes */
    aword *rx_bheadp;          /* ours: our bulk position */
    uint8_t *buf;
    size_t buf_cap;
    int64_t msg_len; /* message in progress, -1 if none */
    size_t got;
    uint32_t frag;
    int rx_gone_polled;
    uint64_t rx_retry;
};

/* ---- small helpers ---- */

/*
 * spin_pause waits between two polls of a word the peer is about to write.
 * One PAUSE measured best: more pauses
 * between polls helped streaming a little, within the noise, and cost
 * round-trip latency (docs/ump.md, "Waiting").
 */
#define SPIN_PAUSES 1

/* TIGHT_POLLS is how many times a waiting receiver polls back to back, with
 * no PAUSE, before it spins with spin_pause: the Go side's tightPolls (see
 * there for why and what it measured). */
#define TIGHT_POLLS 512

/* YIELD_AFTER is how many polls a spinning waiter makes before it gives its
 * CPU away (sched_yield), once per wait, at its next check: with more busy
 * processes than cores, the peer it waits for may be runnable on its own
 * CPU, and spinning only keeps it off. A yield with nothing else runnable
 * returns at once; the first polls, in which a round trip between running
 * sides usually completes, never yield. Once per wait: every yield that
 * does switch costs the waiter a time slice (docs/ump.md, "Waiting").
 * Only within YIELD_WAITS waits of one that slept, as the Go side's
 * spinBudget decides (see there): between two sides that each have a core
 * no wait sleeps, and a yield would only hand the CPU to whatever else is
 * runnable on it. */
#define YIELD_AFTER 256
#define YIELD_WAITS 64
static inline void spin_pause(void)
{
    for (int i = 0; i < SPIN_PAUSES; i++)
        cpu_relax();
}

/* copy_payload is memcpy with the 8-byte case, the commonest small
 * message, spelled out so that it compiles to one load and one store: the
 * Go side's copy8 (see there). */
static inline void copy_payload(void *dst, const void *src, size_t n)
{
    if (n == 8)
        memcpy(dst, src, 8);
    else
        memcpy(dst, src, n);
}

static inline aword *word(uint8_t *mem, size_t off)
{
    return (aword *)(void *)(mem + off);
}

/*
 * spin_lost returns the spin window after a wait that spinning did not
 * serve: half the last, down to MIN_SPIN_NS (or the configured window if
 * smaller). A wait that spinning served restores the configured window.
 * This is the Go side's spinBudget (docs/ump.md, "Waiting"): with more
 * busy processes than cores, spinning the whole window only keeps the
 * process that would answer off the CPU.
 */
#define MIN_SPIN_NS 2000
static int64_t spin_lost(int64_t cur, int64_t max)
{
    int64_t floor = max < MIN_SPIN_NS ? max : MIN_SPIN_NS;
    return cur / 2 > floor ? cur / 2 : floor;
}

/* spin_window returns how long the next wait spins: every PROBE_EVERY-th
 * wait after a sleep spins the full window again, or waits a little longer
 * than the reduced window would sleep, and pay a wake-up, forever. */
#define PROBE_EVERY 8
static int64_t spin_window(int64_t cur, int64_t max, unsigned misses)
{
    return misses % PROBE_EVERY == PROBE_EVERY - 1 ? max : cur;
}

/* deadline_of turns a timeout in ms into an absolute time; -1: none. */
static int64_t deadline_of(int timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    return now_ns() + (int64_t)timeout_ms * 1000000;
}

/* poll_timeout returns the poll(2) timeout left until deadline. */
static int poll_timeout(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : (int)ms;
}


/*
 * wake_signal sends the peer one wake-up byte on our end of a wake-up
 * socket. MSG_DONTWAIT holds for this call whatever the descriptor's flags
 * (which a peer holding the same open file description could change), so
 * it never blocks. Every error is ignored: EAGAIN means the peer's buffer
 * is full, so a wake-up is pending already; EPIPE and ECONNRESET mean the
 * peer is gone, which the waits notice.
 */
static void wake_signal(int fd)
{
    static const char one = 1;
    ssize_t r = send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)r;
}

/* next_epoch numbers a new sleep announcement; never 0, which means awake. */
static uint64_t next_epoch(uint64_t *e)
{
    if (++*e == 0)
        *e = 1;
    return *e;
}

/* should_signal reports whether the peer's wait word w asks for a signal
 * not sent yet: a sleeping peer is signalled once per announcement, however
 * many messages follow (docs/ump.md, "Waiting"). */
static int should_signal(uint64_t w, uint64_t *signaled)
{
    if (w == 0 || w == *signaled)
        return 0;
    *signaled = w;
    return 1;
}

static size_t slots_for(size_t n)
{
    return n <= PAYLOAD ? 1 : (n + PAYLOAD - 1) / PAYLOAD;
}

static size_t total_size(uint32_t slots, uint32_t bulk)
{
    return HEADER_SIZE + 2 * (size_t)slots * SLOT + 2 * (size_t)bulk;
}

/* config_ok checks a configuration, from options or from a peer's header,
 * as the Go config.check does: every message up to the maximum must fit,
 * the longest one that takes slots (max, or at most BULK_MIN with a bulk
 * region) in the slot ring, a bulk one in the bulk region. */
static int config_ok(uint32_t slots, uint32_t max_msg, uint32_t bulk)
{
    if (max_msg == 0 || max_msg > CHANOS_UMP_MAX_MSG_LIMIT)
        return 0;
    if (slots < MIN_SLOTS || slots > CHANOS_UMP_MAX_SLOTS || (slots & (slots - 1)) != 0)
        return 0;
    if (bulk != 0 && (bulk < CHANOS_UMP_MIN_BULK || bulk > CHANOS_UMP_MAX_BULK ||
                      (bulk & (bulk - 1)) != 0 || bulk < max_msg))
        return 0;
    uint32_t longest = bulk != 0 && max_msg > BULK_MIN ? BULK_MIN : max_msg;
    return slots_for(longest) <= slots;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static int fail(chanos_ump *c, int err)
{
    int zero = 0;
    atomic_compare_exchange_strong(&c->err, &zero, err);
    return atomic_load(&c->err);
}

/* ---- options and files ---- */

static uint32_t opt_max_msg(const struct chanos_ump_options *o)
{
    return o && o->max_msg ? o->max_msg : CHANOS_UMP_DEFAULT_MAX_MSG;
}

static int64_t opt_spin(const struct chanos_ump_options *o)
{
    if (!o || o->spin_ns == 0)
        return CHANOS_UMP_DEFAULT_SPIN_NS;
    return o->spin_ns < 0 ? 0 : o->spin_ns;
}

/* default_slots: room for two maximum messages, at least 1024 slots; with
 * a bulk region, where no message takes more than 8 slots, 4096. */
static uint32_t default_slots(uint32_t max_msg, int bulk)
{
    uint64_t want = bulk ? 4096 : 2 * (uint64_t)slots_for(max_msg);
    uint32_t n = 1024;
    while (n < want && n < CHANOS_UMP_MAX_SLOTS)
        n <<= 1;
    return n;
}

/* default_bulk: room for two maximum messages and at least 4 MiB, so that
 * the sender runs well ahead while the receiver copies out, which then
 * reads from the shared cache rather than from the sender's core (the
 * measurements are in docs/results/); none if no message is
 * longer than BULK_MIN. */
#define DEFAULT_BULK_MIN (4u << 20)
static uint32_t default_bulk(uint32_t max_msg)
{
    if (max_msg <= BULK_MIN)
        return 0;
    uint64_t want = 2 * (uint64_t)max_msg;
    if (want < DEFAULT_BULK_MIN)
        want = DEFAULT_BULK_MIN;
    uint32_t n = CHANOS_UMP_MIN_BULK;
    while (n < want && n < CHANOS_UMP_MAX_BULK)
        n <<= 1;
    return n;
}

void chanos_ump_files_close(struct chanos_ump_files *f)
{
    if (!f)
        return;
    close_fd(&f->mem);
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < 2; k++)
            close_fd(&f->wake[s][k]);
        close_fd(&f->caps[s]);
    }
}

int chanos_ump_files_create(const struct chanos_ump_options *opts,
                            struct chanos_ump_files *out)
{
    if (!out)
        return -EINVAL;
    out->mem = -1;
    for (int s = 0; s < 2; s++)
        out->wake[s][0] = out->wake[s][1] = out->caps[s] = -1;
    uint32_t max_msg = opt_max_msg(opts);
    if (max_msg > CHANOS_UMP_MAX_MSG_LIMIT)
        return -EINVAL;
    int32_t want_bulk = opts ? opts->bulk_size : 0;
    uint32_t bulk = want_bulk == 0 ? default_bulk(max_msg)
                    : want_bulk < 0 ? 0 : (uint32_t)want_bulk;
    uint32_t slots = opts && opts->ring_slots ? opts->ring_slots
                                              : default_slots(max_msg, bulk != 0);
    if (!config_ok(slots, max_msg, bulk))
        return -EINVAL;

    int err;
    out->mem = memfd_create("chanos-ump", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (out->mem < 0)
        return -errno;
    size_t size = total_size(slots, bulk);
    if (ftruncate(out->mem, (off_t)size) < 0 ||
        fcntl(out->mem, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        goto fail_errno;
    /* Written, not mapped: unmapping a page of a process with threads on
     * other CPUs costs an interrupt to each (a TLB shootdown). The rest of
     * the header page is zero, as a fresh memfd's bytes are. */
    uint8_t h[OFF_TOTAL + 8] = { 0 };
    chanos_store_u64(h + OFF_MAGIC, MAGIC);
    chanos_store_u32(h + OFF_VERSION, CHANOS_UMP_VERSION);
    chanos_store_u32(h + OFF_SLOTSIZE, SLOT);
    chanos_store_u32(h + OFF_SLOTS, slots);
    chanos_store_u32(h + OFF_MAXMSG, max_msg);
    chanos_store_u32(h + OFF_HDRSIZE, HEADER_SIZE);
    chanos_store_u32(h + OFF_BULK, bulk);
    chanos_store_u64(h + OFF_TOTAL, size);
    ssize_t wrote = pwrite(out->mem, h, sizeof h, 0);
    if (wrote != (ssize_t)sizeof h) {
        if (wrote >= 0)
            errno = EIO;
        goto fail_errno;
    }
    /* The data pair, then the space pair: side s holds end s of each. */
    for (int k = 0; k < 2; k++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            goto fail_errno;
        out->wake[0][k] = sv[0];
        out->wake[1][k] = sv[1];
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, out->caps) < 0)
        goto fail_errno;
    return 0;
fail_errno:
    err = -errno;
    chanos_ump_files_close(out);
    return err;
}

/* check_unix_socket makes sure fd, which may come from a hostile peer, is a
 * Unix socket of the given type, and stats it. */
static int check_unix_socket(int fd, int want_type, struct stat *st)
{
    int type, domain;
    socklen_t n = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &n) < 0 || n != sizeof type)
        return errno == ENOTSOCK ? CHANOS_ERR_PROTOCOL : -errno;
    n = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &n) < 0 || n != sizeof domain)
        return -errno;
    if (type != want_type || domain != AF_UNIX)
        return CHANOS_ERR_PROTOCOL;
    if (fstat(fd, st) < 0)
        return -errno;
    return 0;
}

/* check_wake makes sure a wake-up descriptor, which may come from a
 * hostile peer, is a Unix stream socket: the MSG_DONTWAIT of our sends and
 * receives holds on sockets only, and a pipe or an eventfd in its place
 * could block them. It is made non-blocking too, though nothing relies on
 * that: whoever shares its open file description can clear the flag. */
static int check_wake(int fd, struct stat *st)
{
    int err = check_unix_socket(fd, SOCK_STREAM, st);
    if (err < 0)
        return err;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* check_caps makes sure the caps descriptor is a Unix seqpacket socket,
 * whose records keep their boundaries and their descriptors. */
static int check_caps(int fd, struct stat *st)
{
    return check_unix_socket(fd, SOCK_SEQPACKET, st);
}

/* check_wakes checks side's two wake-up sockets and its caps socket: the
 * first two Unix stream sockets, the third a Unix seqpacket socket, and
 * four different sockets with the liveness socket sock. The same socket
 * twice would take our own wake-ups for the peer's. */
static int check_wakes(const int wake[2], int caps, int sock)
{
    struct stat data, space, cp, live;
    int err;
    if ((err = check_wake(wake[0], &data)) < 0 || (err = check_wake(wake[1], &space)) < 0 ||
        (err = check_caps(caps, &cp)) < 0)
        return err;
    if (fstat(sock, &live) < 0)
        return -errno;
    if (same_file(&data, &space) || same_file(&data, &live) || same_file(&space, &live) ||
        same_file(&cp, &data) || same_file(&cp, &space) || same_file(&cp, &live))
        return CHANOS_ERR_PROTOCOL;
    return 0;
}

/* check_memfd returns the size of the peer's memfd after checking that it
 * is sealed against shrinking (which would turn our reads into SIGBUS). */
static int check_memfd(int fd, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return CHANOS_ERR_PROTOCOL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL))
        return CHANOS_ERR_PROTOCOL;
    if (st.st_size < HEADER_SIZE ||
        (uint64_t)st.st_size > total_size(CHANOS_UMP_MAX_SLOTS, CHANOS_UMP_MAX_BULK))
        return CHANOS_ERR_PROTOCOL;
    *size = (size_t)st.st_size;
    return 0;
}

/* read_header copies the static header out and validates it. */
static int read_header(const uint8_t *mem, size_t size, uint32_t *slots,
                       uint32_t *max_msg, uint32_t *bulk)
{
    uint8_t h[64];
    memcpy(h, mem, sizeof h);
    uint32_t s = chanos_load_u32(h + OFF_SLOTS), m = chanos_load_u32(h + OFF_MAXMSG);
    uint32_t b = chanos_load_u32(h + OFF_BULK);
    if (chanos_load_u64(h + OFF_MAGIC) != MAGIC ||
        chanos_load_u32(h + OFF_VERSION) != CHANOS_UMP_VERSION ||
        chanos_load_u32(h + OFF_SLOTSIZE) != SLOT ||
        chanos_load_u32(h + OFF_HDRSIZE) != HEADER_SIZE)
        return CHANOS_ERR_PROTOCOL;
    if (!config_ok(s, m, b))
        return CHANOS_ERR_PROTOCOL;
    if (chanos_load_u64(h + OFF_TOTAL) != total_size(s, b) || size < total_size(s, b))
        return CHANOS_ERR_PROTOCOL;
    *slots = s;
    *max_msg = m;
    *bulk = b;
    return 0;
}

int chanos_ump_open(int side, struct chanos_ump_files *f, int sock,
                    const struct chanos_ump_options *opts, chanos_ump **out)
{
    int err = 0;
    chanos_ump *c = NULL;
    uint8_t *mem = MAP_FAILED;
    size_t size = 0;
    uint32_t slots, max_msg, bulk;

    if (!f || !out || (side != CHANOS_UMP_CREATOR && side != CHANOS_UMP_ATTACHER)) {
        err = -EINVAL;
        goto fail;
    }
    *out = NULL;
    if ((err = check_memfd(f->mem, &size)) < 0)
        goto fail;
    if ((err = check_wakes(f->wake[side], f->caps[side], sock)) < 0)
        goto fail;
    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f->mem, 0);
    if (mem == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    close_fd(&f->mem);
    if ((err = read_header(mem, size, &slots, &max_msg, &bulk)) < 0)
        goto fail;
    if (opts && opts->max_msg && max_msg > opts->max_msg) {
        err = CHANOS_ERR_TOO_LARGE;
        goto fail;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        err = -ENOMEM;
        goto fail;
    }
    c->epfd = -1;
    c->data = c->space = c->caps = -1;
    int s = side, peer = 1 - side;
    c->mem = mem;
    c->mem_size = size;
    c->n = slots;
    c->mask = slots - 1;
    c->nb = bulk;
    c->bmask = (uint64_t)bulk - 1; /* unused without a bulk region */
    c->max_msg = max_msg;
    c->spin_ns = opt_spin(opts);
    c->tx_spin = c->rx_spin = c->spin_ns;
    c->sock = sock;
    c->my_closed = word(mem, OFF_CLOSED0 + (size_t)s * BLOCK);
    c->peer_closed = word(mem, OFF_CLOSED0 + (size_t)peer * BLOCK);

    size_t ring_bytes = (size_t)slots * SLOT;
    c->tx_slots = mem + HEADER_SIZE + (size_t)s * ring_bytes;
    c->tx_headp = word(mem, OFF_RING0 + (size_t)s * RING_CTL + OFF_HEAD);
    c->tx_waitp = word(mem, OFF_RING0 + (size_t)s * RING_CTL + OFF_PRODWAIT);
    c->tx_peer_waitp = word(mem, OFF_RING0 + (size_t)s * RING_CTL + OFF_CONSWAIT);
    uint8_t *bulk_base = mem + HEADER_SIZE + 2 * ring_bytes; /* ring 0's, then ring 1's */
    c->tx_bulk = bulk ? bulk_base + (size_t)s * bulk : NULL;
    c->tx_bheadp = word(mem, OFF_RING0 + (size_t)s * RING_CTL + OFF_BULKHEAD);

    c->rx_slots = mem + HEADER_SIZE + (size_t)peer * ring_bytes;
    c->rx_headp = word(mem, OFF_RING0 + (size_t)peer * RING_CTL + OFF_HEAD);
    c->rx_waitp = word(mem, OFF_RING0 + (size_t)peer * RING_CTL + OFF_CONSWAIT);
    c->rx_peer_waitp = word(mem, OFF_RING0 + (size_t)peer * RING_CTL + OFF_PRODWAIT);
    c->rx_batch = slots / 8 ? slots / 8 : 1;
    c->rx_bulk = bulk ? bulk_base + (size_t)peer * bulk : NULL;
    c->rx_bheadp = word(mem, OFF_RING0 + (size_t)peer * RING_CTL + OFF_BULKHEAD);
    c->rx_bbatch = bulk ? bulk / 8 : UINT64_MAX; /* no bulk region: nothing to publish */
    c->msg_len = -1;
    c->data = f->wake[s][0];
    c->space = f->wake[s][1];
    c->caps = f->caps[s];
    f->wake[s][0] = f->wake[s][1] = f->caps[s] = -1;
    chanos_ump_files_close(f); /* the peer's ends, if we were given them */
    mem = MAP_FAILED;
    sock = -1;

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        err = -errno;
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    int fds[3] = {c->data, c->space, c->sock};
    for (int i = 0; i < 3; i++) {
        ev.data.fd = fds[i];
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            err = -errno;
            goto fail;
        }
    }
    *out = c;
    return 0;

fail:
    if (c)
        chanos_ump_close(c); /* the peer, if any, sees an orderly close */
    if (mem != MAP_FAILED)
        munmap(mem, size);
    chanos_ump_files_close(f);
    if (sock >= 0)
        close(sock);
    return err;
}

/* ---- handshake ---- */

/* sock_wait waits until sock is ready for events, up to deadline. */
static int sock_wait(int sock, short events, int64_t deadline)
{
    struct pollfd p = {.fd = sock, .events = events};
    for (;;) {
        int r = poll(&p, 1, poll_timeout(deadline));
        if (r > 0)
            return 0;
        if (r == 0)
            return CHANOS_ERR_TIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int read_full(int sock, uint8_t *b, size_t n, int64_t deadline)
{
    size_t got = 0;
    while (got < n) {
        int err = sock_wait(sock, POLLIN, deadline);
        if (err < 0)
            return err;
        ssize_t r = recv(sock, b + got, n - got, MSG_DONTWAIT);
        if (r == 0)
            return CHANOS_ERR_PEER_DIED;
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)r;
    }
    return 0;
}

static int send_ack(int sock, uint32_t status)
{
    uint8_t ack[HELLO_SIZE] = {0};
    chanos_store_u64(ack, ACK_MAGIC);
    chanos_store_u32(ack + 8, status);
    ssize_t r = send(sock, ack, sizeof ack, MSG_NOSIGNAL);
    return r == (ssize_t)sizeof ack ? 0 : (r < 0 ? -errno : -EIO);
}

int chanos_ump_create(int sock, const struct chanos_ump_options *opts,
                      int timeout_ms, chanos_ump **out)
{
    struct chanos_ump_files f;
    int64_t deadline = deadline_of(timeout_ms);
    int fds[NFDS] = {-1, -1, -1, -1};
    if (!out) {
        close(sock);
        return -EINVAL;
    }
    *out = NULL;
    int err = chanos_ump_files_create(opts, &f);
    if (err < 0) {
        close(sock);
        return err;
    }
    /* Map and check our side before the peer can touch the memory. The
     * hello carries a duplicate of the memfd, as chanos_ump_open takes f,
     * and the attacher's ends of the wake-up sockets themselves: taken out
     * of f, so that chanos_ump_open does not close them, and closed here
     * once sent, so that only the attacher holds them. */
    fds[1] = f.wake[CHANOS_UMP_ATTACHER][0];
    fds[2] = f.wake[CHANOS_UMP_ATTACHER][1];
    fds[3] = f.caps[CHANOS_UMP_ATTACHER];
    f.wake[CHANOS_UMP_ATTACHER][0] = f.wake[CHANOS_UMP_ATTACHER][1] = -1;
    f.caps[CHANOS_UMP_ATTACHER] = -1;
    if ((fds[0] = fcntl(f.mem, F_DUPFD_CLOEXEC, 0)) < 0) {
        err = -errno;
        chanos_ump_files_close(&f);
        close(sock);
        goto done;
    }
    chanos_ump *c;
    if ((err = chanos_ump_open(CHANOS_UMP_CREATOR, &f, sock, opts, &c)) < 0)
        goto done;
    uint8_t hello[HELLO_SIZE];
    chanos_store_u64(hello, HELLO_MAGIC);
    chanos_store_u32(hello + 8, CHANOS_UMP_VERSION);
    chanos_store_u32(hello + 12, NFDS);
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    uint8_t ack[HELLO_SIZE];
    if ((err = sock_wait(sock, POLLOUT, deadline)) < 0)
        goto fail;
    if (sendmsg(sock, &m, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
        err = -errno;
        goto fail;
    }
    if ((err = read_full(sock, ack, sizeof ack, deadline)) < 0)
        goto fail;
    if (chanos_load_u64(ack) != ACK_MAGIC || chanos_load_u32(ack + 8) != 0) {
        err = CHANOS_ERR_PROTOCOL;
        goto fail;
    }
    *out = c;
    goto done;
fail:
    chanos_ump_close(c); /* closes sock */
done:
    for (int i = 0; i < NFDS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return err;
}

/* hello_fds takes the descriptors a received hello (m) brought: into f,
 * as the attacher's, if they are the NFDS expected, else closed, however
 * many came. It returns how many came. */
static int hello_fds(struct msghdr *m, struct chanos_ump_files *f)
{
    int got[NFDS], n = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++, n++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (n < NFDS)
                got[n] = fd;
            else
                close(fd);
        }
    }
    if (n == NFDS) {
        f->mem = got[0];
        f->wake[CHANOS_UMP_ATTACHER][0] = got[1];
        f->wake[CHANOS_UMP_ATTACHER][1] = got[2];
        f->caps[CHANOS_UMP_ATTACHER] = got[3];
    } else {
        for (int i = 0; i < n && i < NFDS; i++)
            close(got[i]);
    }
    return n;
}

int chanos_ump_attach(int sock, const struct chanos_ump_options *opts,
                      int timeout_ms, chanos_ump **out)
{
    int64_t deadline = deadline_of(timeout_ms);
    struct chanos_ump_files f = {.mem = -1, .wake = {{-1, -1}, {-1, -1}}, .caps = {-1, -1}};
    uint8_t hello[HELLO_SIZE];
    union {
        char buf[CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    int err = sock_wait(sock, POLLIN, deadline);
    if (err < 0)
        goto fail;
    ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
        err = -errno;
        goto fail;
    }
    int ngot = hello_fds(&m, &f);
    if (n == 0) {
        err = CHANOS_ERR_PEER_DIED;
        goto fail;
    }
    if ((m.msg_flags & MSG_CTRUNC) || ngot != NFDS) {
        err = CHANOS_ERR_PROTOCOL;
        goto refuse;
    }
    if ((size_t)n < sizeof hello &&
        (err = read_full(sock, hello + n, sizeof hello - (size_t)n, deadline)) < 0)
        goto fail;
    if (chanos_load_u64(hello) != HELLO_MAGIC ||
        chanos_load_u32(hello + 8) != CHANOS_UMP_VERSION ||
        chanos_load_u32(hello + 12) != NFDS) {
        err = CHANOS_ERR_PROTOCOL;
        goto refuse;
    }
    /* Open before acknowledging, on a duplicate of the socket so that a
     * refusal can still be sent if it fails. */
    int dup_sock = fcntl(sock, F_DUPFD_CLOEXEC, 0);
    if (dup_sock < 0) {
        err = -errno;
        goto fail;
    }
    err = chanos_ump_open(CHANOS_UMP_ATTACHER, &f, dup_sock, opts, out);
    if (err < 0)
        goto refuse;
    err = send_ack(sock, 0);
    close(sock);
    if (err < 0) {
        chanos_ump_close(*out);
        *out = NULL;
    }
    return err;
refuse:
    send_ack(sock, 1);
fail:
    chanos_ump_files_close(&f);
    close(sock);
    return err;
}

/* ---- endpoints (docs/ump.md, "Endpoints") ---- */

int chanos_ump_endpoint_new(const struct chanos_ump_options *opts,
                            const void *label, size_t len, chanos_ump **mine,
                            int *ep)
{
    struct chanos_ump_files f;
    uint8_t msg[HELLO_SIZE + 4 + CHANOS_UMP_MAX_LABEL];
    int fds[NFDS], sv[2], err;
    union {
        char buf[CMSG_SPACE(NFDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = msg, .iov_len = HELLO_SIZE + 4 + len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm;

    if (!mine || !ep || len > CHANOS_UMP_MAX_LABEL || (len && !label))
        return -EINVAL;
    *mine = NULL;
    *ep = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    if ((err = chanos_ump_files_create(opts, &f)) < 0) {
        close(sv[0]);
        close(sv[1]);
        return err;
    }
    /* the attacher's part leaves f (sent, then closed: only the endpoint
     * holds it); chanos_ump_open takes the rest, and sv[0] */
    fds[0] = fcntl(f.mem, F_DUPFD_CLOEXEC, 0);
    fds[1] = f.wake[CHANOS_UMP_ATTACHER][0];
    fds[2] = f.wake[CHANOS_UMP_ATTACHER][1];
    fds[3] = f.caps[CHANOS_UMP_ATTACHER];
    f.wake[CHANOS_UMP_ATTACHER][0] = f.wake[CHANOS_UMP_ATTACHER][1] = -1;
    f.caps[CHANOS_UMP_ATTACHER] = -1;
    if (fds[0] < 0) {
        err = -errno;
        chanos_ump_files_close(&f);
        close(sv[0]);
        goto done;
    }
    if ((err = chanos_ump_open(CHANOS_UMP_CREATOR, &f, sv[0], opts, mine)) < 0)
        goto done;
    chanos_store_u64(msg, HELLO_MAGIC);
    chanos_store_u32(msg + 8, CHANOS_UMP_VERSION);
    chanos_store_u32(msg + 12, NFDS);
    chanos_store_u32(msg + HELLO_SIZE, (uint32_t)len);
    if (len)
        memcpy(msg + HELLO_SIZE + 4, label, len);
    memset(&u, 0, sizeof u);
    cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    /* a fresh socket pair's buffer is empty: this never waits */
    if (sendmsg((*mine)->sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)iov.iov_len) {
        err = -errno;
        chanos_ump_close(*mine);
        *mine = NULL;
        goto done;
    }
    *ep = sv[1];
    sv[1] = -1;
done:
    for (int i = 0; i < NFDS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (sv[1] >= 0)
        close(sv[1]);
    return err;
}

int chanos_ump_endpoint_open(int ep, const struct chanos_ump_options *opts,
                             void *label, size_t cap, size_t *len,
                             chanos_ump **out)
{
    struct chanos_ump_files f = {.mem = -1, .wake = {{-1, -1}, {-1, -1}}, .caps = {-1, -1}};
    uint8_t msg[HELLO_SIZE + 4 + CHANOS_UMP_MAX_LABEL + 1];
    union {
        char buf[CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    int ngot = 0, err = CHANOS_ERR_PROTOCOL;
    ssize_t n;
    uint32_t ln;

    if (!out || !len || (cap && !label)) {
        close(ep);
        return -EINVAL;
    }
    *out = NULL;
    /* the creator queued everything in one message before the endpoint
     * left it: one receive that never waits takes it, or it is not an
     * endpoint (or one already opened) */
    do
        n = recvmsg(ep, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        ngot = hello_fds(&m, &f);
    if (n < HELLO_SIZE + 4 || (m.msg_flags & MSG_CTRUNC) || ngot != NFDS ||
        chanos_load_u64(msg) != HELLO_MAGIC ||
        chanos_load_u32(msg + 8) != CHANOS_UMP_VERSION ||
        chanos_load_u32(msg + 12) != NFDS)
        goto fail;
    ln = chanos_load_u32(msg + HELLO_SIZE);
    if (ln > CHANOS_UMP_MAX_LABEL || (size_t)n != HELLO_SIZE + 4 + ln)
        goto fail;
    if (ln > cap) {
        err = CHANOS_ERR_TOO_LARGE;
        goto fail;
    }
    if (ln)
        memcpy(label, msg + HELLO_SIZE + 4, ln);
    *len = ln;
    return chanos_ump_open(CHANOS_UMP_ATTACHER, &f, ep, opts, out);
fail:
    chanos_ump_files_close(&f);
    close(ep);
    return err;
}

/* ---- sending ---- */

/* tx_refresh re-reads the consumer's positions (head, then bulk_head,
 * which it publishes first); one that moves backwards or past what was
 * written is a violation. */
static int tx_refresh(chanos_ump *c)
{
    uint64_t h = atomic_load_explicit(c->tx_headp, memory_order_acquire);
    if (h < c->tx_head || h > c->tx_tail)
        return fail(c, CHANOS_ERR_PROTOCOL);
    c->tx_head = h;
    if (c->tx_bulk) {
        uint64_t b = atomic_load_explicit(c->tx_bheadp, memory_order_acquire);
        if (b < c->tx_bhead || b > c->tx_btail)
            return fail(c, CHANOS_ERR_PROTOCOL);
        c->tx_bhead = b;
    }
    return 0;
}

/* tx_free reports whether need slots, and nbulk bytes of the bulk region,
 * are free according to the cached positions. */
static int tx_free(const chanos_ump *c, uint64_t need, uint64_t nbulk)
{
    return c->tx_tail - c->tx_head + need <= c->n &&
           c->tx_btail - c->tx_bhead + nbulk <= c->nb;
}

/* tx_uses_bulk: the rule of docs/ump.md, "Bulk region", which both sides'
 * producers follow and both consumers enforce. */
static int tx_uses_bulk(const chanos_ump *c, size_t len)
{
    return c->nb != 0 && len > BULK_MIN;
}

/* tx_need returns the slots a message of len bytes takes, and in *nbulk
 * the bytes of the bulk region: a bulk message takes one slot, its
 * descriptor. */
static uint64_t tx_need(const chanos_ump *c, size_t len, uint64_t *nbulk)
{
    if (tx_uses_bulk(c, len)) {
        *nbulk = len;
        return 1;
    }
    *nbulk = 0;
    return slots_for(len);
}

/* peer_gone records how the peer ended, once one of its sockets reached
 * end of file (or failed): closed, if it wrote its close word, which it
 * does before closing its sockets, else died. */
static void peer_gone(chanos_ump *c)
{
    int end = atomic_load_explicit(c->peer_closed, memory_order_acquire)
                  ? CHANOS_ERR_CLOSED : CHANOS_ERR_PEER_DIED;
    int zero = 0;
    atomic_compare_exchange_strong(&c->peer_end, &zero, end);
}

/* check_socket looks, without blocking, whether the peer's end of the
 * socket closed, and records how the peer ended. */
static void check_socket(chanos_ump *c)
{
    if (atomic_load_explicit(&c->peer_end, memory_order_relaxed))
        return;
    char b;
    ssize_t r = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0) {
        fail(c, CHANOS_ERR_PROTOCOL); /* nothing travels on it yet */
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    peer_gone(c);
}

/*
 * wake_drain empties our end fd of a wake-up socket before an announcement
 * (see tx_announce), without blocking whatever the descriptor's flags: at
 * most DRAIN_READS reads, while each fills the buffer. End of file means
 * the peer's end closed: the peer closed or died, as when the liveness
 * socket reports it. So does any error but EAGAIN and EINTR: ECONNRESET
 * comes once, before the end of file, when the peer closed with a wake-up
 * of ours unread, and a socket that is not connected (which a hostile peer
 * can hand us) fails with EINVAL while poll reports it ready, for good.
 */
static void wake_drain(chanos_ump *c, int fd)
{
    char buf[DRAIN_BUF];
    for (int i = 0; i < DRAIN_READS; i++) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == (ssize_t)sizeof buf)
            continue;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            peer_gone(c);
        return;
    }
}

/* tx_ended returns why sending is pointless now, or 0. */
static int tx_ended(chanos_ump *c)
{
    int e = atomic_load_explicit(&c->err, memory_order_relaxed);
    if (e)
        return e;
    uint64_t w = atomic_load_explicit(c->peer_closed, memory_order_acquire);
    if (w) {
        /* The receiving side checks the word fully; this side checks what
         * it can, so that garbage is not taken for an orderly close: the
         * flag, and a position at or after ours as last published (which
         * trails ours by less than a ring). */
        uint64_t cp = w & ~CLOSED_BIT;
        uint64_t h = atomic_load_explicit(c->rx_headp, memory_order_relaxed);
        if (!(w & CLOSED_BIT) || cp < h || cp - h > 2 * c->n)
            return fail(c, CHANOS_ERR_PROTOCOL);
        return CHANOS_ERR_CLOSED;
    }
    return atomic_load_explicit(&c->peer_end, memory_order_relaxed);
}

/* tx_write_bulk copies msg into the bulk region at tx_btail, which must
 * have room for it (two memcpy at most: it wraps around), then writes its
 * descriptor, one slot holding the bulk position. */
static void tx_write_bulk(chanos_ump *c, const uint8_t *msg, size_t len)
{
    uint64_t at = c->tx_btail & c->bmask;
    size_t k = c->nb - at < len ? (size_t)(c->nb - at) : len;
    memcpy(c->tx_bulk + at, msg, k);
    if (k < len)
        memcpy(c->tx_bulk, msg + k, len - k); /* the part that wraps around */
    uint64_t p = c->tx_tail;
    uint8_t *slot = c->tx_slots + (p & c->mask) * SLOT;
    atomic_store_explicit(word(slot, 0), c->tx_btail, memory_order_relaxed);
    uint64_t w = (uint64_t)(uint32_t)(p + 1) |
                 (uint64_t)(INFO_FIRST | INFO_BULK | (uint32_t)len) << 32;
    /* Sequentially consistent: orders the bytes above before the
     * descriptor, and the descriptor before our load of the consumer's
     * wait flag. */
    atomic_store_explicit(word(slot, CTRL_OFF), w, memory_order_seq_cst);
    c->tx_btail += len;
    c->tx_tail = p + 1;
}

/* tx_write_slots copies msg into the slots at tx_tail, which must have
 * room for it. */
static void tx_write_slots(chanos_ump *c, const uint8_t *msg, size_t len)
{
    uint64_t p = c->tx_tail;
    uint32_t info = INFO_FIRST | (uint32_t)len;
    for (size_t k = 0;; k++) {
        uint8_t *slot = c->tx_slots + (p & c->mask) * SLOT;
        size_t lo = k * PAYLOAD, hi = lo + PAYLOAD < len ? lo + PAYLOAD : len;
        if (lo < hi)
            copy_payload(slot, msg + lo, hi - lo);
        uint64_t w = (uint64_t)(uint32_t)(p + 1) | (uint64_t)info << 32;
        p++;
        if (hi >= len) {
            /* Sequentially consistent: orders the store before our load
             * of the consumer's wait flag (docs/ump.md, "Waiting"). */
            atomic_store_explicit(word(slot, CTRL_OFF), w, memory_order_seq_cst);
            break;
        }
        atomic_store_explicit(word(slot, CTRL_OFF), w, memory_order_release);
        info = (uint32_t)(k + 1);
    }
    c->tx_tail = p;
}

/* tx_write writes msg, for which there is room, and signals a consumer
 * that announced it sleeps. */
static void tx_write(chanos_ump *c, const uint8_t *msg, size_t len)
{
    if (tx_uses_bulk(c, len))
        tx_write_bulk(c, msg, len);
    else
        tx_write_slots(c, msg, len);
    if (should_signal(atomic_load_explicit(c->tx_peer_waitp, memory_order_relaxed), &c->tx_signaled))
        wake_signal(c->data);
}

static int tx_prepare(chanos_ump *c, const void *msg, size_t len)
{
    if (!c || (!msg && len))
        return -EINVAL;
    if (len > c->max_msg)
        return CHANOS_ERR_TOO_LARGE;
    return tx_ended(c);
}

/* tx_announce says we sleep waiting for space, then looks again. Returns
 * 1 if there is room now, 0 if the caller may sleep, or an error. The
 * space socket is drained before the announcement, never after: a signal of
 * this announcement may come at any time after it is stored, even one a
 * late peer sends for what we have already seen, and draining it would
 * lose the wake-up (docs/ump.md, "Waiting"). */
static int tx_announce(chanos_ump *c, uint64_t need, uint64_t nbulk)
{
    wake_drain(c, c->space);
    atomic_store_explicit(c->tx_waitp, next_epoch(&c->tx_epoch), memory_order_seq_cst);
    c->tx_announced = 1;
    int err = tx_refresh(c);
    if (err < 0)
        return err;
    if (tx_free(c, need, nbulk))
        return 1;
    check_socket(c);
    err = tx_ended(c);
    return err < 0 ? err : 0;
}

static void tx_unannounce(chanos_ump *c)
{
    if (c->tx_announced) {
        atomic_store_explicit(c->tx_waitp, 0, memory_order_release);
        c->tx_announced = 0;
    }
}

int chanos_ump_try_send(chanos_ump *c, const void *msg, size_t len)
{
    return chanos_ump_try_send_fds(c, msg, len, NULL, 0);
}

/* send_fds sends the record of the next message with descriptors, fds
 * attached (docs/ump.md, "Descriptors"), waiting while the peer's queue is
 * full until deadline (-1: forever), or not at all if wait is 0. */
static int send_fds(chanos_ump *c, const int *fds, unsigned nfds, int wait,
                    int64_t deadline)
{
    uint8_t rec[CAPS_RECORD];
    union {
        char buf[CMSG_SPACE(CHANOS_UMP_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = rec, .iov_len = sizeof rec};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *cm;

    memset(&u, 0, sizeof u);
    cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    chanos_store_u32(rec, c->caps_out + 1);
    chanos_store_u32(rec + 4, nfds);
    for (;;) {
        int err;
        if (sendmsg(c->caps, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof rec) {
            c->caps_out++;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET) {
            err = tx_ended(c);
            return err < 0 ? err : CHANOS_ERR_PEER_DIED;
        }
        if (errno != EAGAIN)
            return -errno;
        if (!wait)
            return CHANOS_ERR_AGAIN;
        if ((err = tx_ended(c)) < 0)
            return err;
        int left = poll_timeout(deadline);
        if (left == 0)
            return CHANOS_ERR_TIMEDOUT;
        /* the peer takes its records as it reads the ring: a short wait
         * keeps this simple, and the common case never waits */
        struct pollfd p = {.fd = c->caps, .events = POLLOUT};
        if (poll(&p, 1, left < 0 || left > 10 ? 10 : left) < 0 && errno != EINTR)
            return -errno;
    }
}

int chanos_ump_recv_fds(chanos_ump *c, int *fds, unsigned n)
{
    uint8_t rec[CAPS_RECORD + 1];
    union {
        char buf[CMSG_SPACE(CHANOS_UMP_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = rec, .iov_len = sizeof rec};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
    unsigned got = 0;
    ssize_t r;

    if (!c || (n && !fds))
        return -EINVAL;
    if (n == 0)
        return 0;
    if (n > CHANOS_UMP_MAX_FDS)
        return fail(c, CHANOS_ERR_PROTOCOL);
    /* a peer that closed with records of ours unread resets the socket,
     * which the kernel reports once, before the records the peer sent:
     * the record is read again after it */
    bool reset = false;
    for (;;) {
        r = recvmsg(c->caps, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == ECONNRESET && !reset) {
            reset = true;
            continue;
        }
        if (!(r < 0 && errno == EINTR))
            break;
    }
    if (r < 0)
        return fail(c, CHANOS_ERR_PROTOCOL); /* announced, never sent */
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (got < n)
                fds[got] = fd;
            else
                close(fd);
            got++;
        }
    }
    if (r != CAPS_RECORD || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
        chanos_load_u32(rec) != c->caps_in + 1 || chanos_load_u32(rec + 4) != n ||
        got != n) {
        for (unsigned i = 0; i < got && i < n; i++)
            close(fds[i]);
        return fail(c, CHANOS_ERR_PROTOCOL);
    }
    c->caps_in++;
    return 0;
}

int chanos_ump_try_send_fds(chanos_ump *c, const void *msg, size_t len,
                            const int *fds, unsigned nfds)
{
    if (nfds > CHANOS_UMP_MAX_FDS || (nfds && !fds))
        return -EINVAL;
    int err = tx_prepare(c, msg, len);
    if (err < 0)
        return err;
    uint64_t nbulk, need = tx_need(c, len, &nbulk);
    if (!tx_free(c, need, nbulk)) {
        if ((err = tx_refresh(c)) < 0)
            return err;
        if (!tx_free(c, need, nbulk)) {
            err = tx_announce(c, need, nbulk);
            if (err <= 0)
                return err < 0 ? err : CHANOS_ERR_AGAIN;
        }
    }
    tx_unannounce(c);
    if (nfds && (err = send_fds(c, fds, nfds, 0, -1)) < 0)
        return err;
    tx_write(c, msg, len);
    return 0;
}

int chanos_ump_send(chanos_ump *c, const void *msg, size_t len, int timeout_ms)
{
    return chanos_ump_send_fds(c, msg, len, NULL, 0, timeout_ms);
}

int chanos_ump_send_fds(chanos_ump *c, const void *msg, size_t len,
                        const int *fds, unsigned nfds, int timeout_ms)
{
    if (nfds > CHANOS_UMP_MAX_FDS || (nfds && !fds))
        return -EINVAL;
    int err = tx_prepare(c, msg, len);
    if (err < 0)
        return err;
    int64_t deadline = -1;
    uint64_t nbulk, need = tx_need(c, len, &nbulk);
    if (tx_free(c, need, nbulk))
        goto write;
    if ((err = tx_refresh(c)) < 0)
        return err;
    if (tx_free(c, need, nbulk))
        goto write;
    deadline = deadline_of(timeout_ms);
    int64_t window = spin_window(c->tx_spin, c->spin_ns, c->tx_misses);
    if (window > 0 && timeout_ms != 0) {
        int64_t start = 0;
        int yielded = 0;
        for (unsigned i = 1;; i++) {
            spin_pause();
            if ((err = tx_refresh(c)) < 0)
                return err;
            if (tx_free(c, need, nbulk)) {
                c->tx_spin = c->spin_ns;
                c->tx_misses = 0;
                if (c->tx_yields)
                    c->tx_yields--;
                goto write;
            }
            if (i % 64)
                continue;
            if ((err = tx_ended(c)) < 0)
                return err;
            int64_t t = now_ns();
            if (!start)
                start = t;
            else if (t - start > window) {
                c->tx_spin = spin_lost(c->tx_spin, c->spin_ns);
                c->tx_misses++;
                c->tx_yields = YIELD_WAITS;
                break;
            } else if (deadline >= 0 && t >= deadline)
                break;
            if (i > YIELD_AFTER && !yielded && c->tx_yields) {
                sched_yield();
                yielded = 1;
            }
        }
    }
    for (;;) {
        err = tx_announce(c, need, nbulk);
        if (err < 0) {
            tx_unannounce(c);
            return err;
        }
        if (err == 1)
            break;
        int left = poll_timeout(deadline);
        if (left == 0) {
            tx_unannounce(c);
            return CHANOS_ERR_TIMEDOUT;
        }
        struct pollfd p[2] = {{.fd = c->space, .events = POLLIN},
                              {.fd = c->sock, .events = POLLIN}};
        if (poll(p, 2, poll_timeout(deadline)) < 0 && errno != EINTR) {
            err = -errno;
            tx_unannounce(c);
            return err;
        }
    }
    tx_unannounce(c);
write:
    /* the record goes once the ring has room: a message that cannot be
     * written leaves none behind */
    if (nfds) {
        if (deadline == -1)
            deadline = deadline_of(timeout_ms);
        if ((err = send_fds(c, fds, nfds, timeout_ms != 0, deadline)) < 0)
            return err;
    }
    tx_write(c, msg, len);
    return 0;
}

/* ---- receiving ---- */

static uint32_t rx_stale(const chanos_ump *c, uint64_t pos)
{
    return pos < c->n ? 0 : (uint32_t)(pos + 1 - c->n);
}

/* rx_changed reports whether the next slot holds anything but its stale
 * sequence number: a new fragment, or garbage that rx_poll rejects. */
static int rx_changed(chanos_ump *c)
{
    uint8_t *slot = c->rx_slots + (c->rx_pos & c->mask) * SLOT;
    uint64_t w = atomic_load_explicit(word(slot, CTRL_OFF), memory_order_acquire);
    return (uint32_t)w != rx_stale(c, c->rx_pos);
}

/* rx_reserve makes the reassembly buffer hold n <= max_msg bytes. */
static int rx_reserve(chanos_ump *c, uint32_t n)
{
    if (c->buf_cap < n || !c->buf) {
        size_t want = c->buf_cap * 2 > n ? c->buf_cap * 2 : n;
        if (want > c->max_msg)
            want = c->max_msg;
        if (want < n || want == 0)
            want = n ? n : 1;
        uint8_t *b = realloc(c->buf, want);
        if (!b)
            return -ENOMEM;
        c->buf = b;
        c->buf_cap = want;
    }
    return 0;
}

/* rx_take_bulk copies out the bulk message of n <= max_msg bytes whose
 * descriptor is the slot at position p: 1, or an error. */
static int rx_take_bulk(chanos_ump *c, uint64_t p, uint8_t *slot, uint32_t n)
{
    /* Read once: the producer may change the slot under us. */
    uint64_t q = atomic_load_explicit(word(slot, 0), memory_order_relaxed);
    if (!c->rx_bulk || n <= BULK_MIN || q != c->rx_bpos)
        return fail(c, CHANOS_ERR_PROTOCOL);
    int err = rx_reserve(c, n);
    if (err < 0)
        return err;
    /* n <= max_msg <= nb, checked when the header was read. */
    uint64_t at = q & c->bmask;
    size_t k = c->nb - at < n ? (size_t)(c->nb - at) : n;
    memcpy(c->buf, c->rx_bulk + at, k);
    if (k < n)
        memcpy(c->buf + k, c->rx_bulk, n - k); /* the part that wrapped around */
    c->got = n;
    c->rx_bpos = q + n;
    c->rx_pos = p + 1;
    return 1;
}

/* rx_poll reads every available fragment: 1 when a message is complete, 0
 * when the next slot is not written yet, or an error. This is the ring
 * reader: each control word is loaded once, then validated. */
static int rx_poll(chanos_ump *c)
{
    for (;;) {
        uint64_t p = c->rx_pos;
        uint8_t *slot = c->rx_slots + (p & c->mask) * SLOT;
        uint64_t w = atomic_load_explicit(word(slot, CTRL_OFF), memory_order_acquire);
        uint32_t seq = (uint32_t)w, info = (uint32_t)(w >> 32);
        if (seq != (uint32_t)(p + 1))
            return seq == rx_stale(c, p) ? 0 : fail(c, CHANOS_ERR_PROTOCOL);
        if (c->msg_len < 0) {
            if (!(info & INFO_FIRST) || (info & INFO_CAPS))
                return fail(c, CHANOS_ERR_PROTOCOL);
            uint32_t n = info & INFO_LEN;
            if (n > c->max_msg)
                return fail(c, CHANOS_ERR_PROTOCOL);
            if (info & INFO_BULK)
                return rx_take_bulk(c, p, slot, n);
            if (c->rx_bulk && n > BULK_MIN) /* belongs in the bulk region */
                return fail(c, CHANOS_ERR_PROTOCOL);
            int err = rx_reserve(c, n);
            if (err < 0)
                return err;
            c->msg_len = n;
            c->got = 0;
            c->frag = 0;
        } else if (info != c->frag) {
            return fail(c, CHANOS_ERR_PROTOCOL);
        }
        size_t k = (size_t)c->msg_len - c->got;
        if (k > PAYLOAD)
            k = PAYLOAD;
        copy_payload(c->buf + c->got, slot, k);
        c->got += k;
        c->frag++;
        c->rx_pos = p + 1;
        if (c->got == (size_t)c->msg_len) {
            c->msg_len = -1;
            return 1;
        }
    }
}

/* rx_publish tells the producer how far we read, and wakes it if it sleeps
 * waiting for space. Only a fenced publication is sure to see a fresh
 * announcement; the fenced one before sleeping catches what others miss.
 * The bulk position goes first (the producer reads head first), and a
 * fenced publication stores head even unchanged: its fence orders the
 * bulk position before our load of the producer's wait word. */
static void rx_publish(chanos_ump *c, int fenced)
{
    if (c->rx_bpos != c->rx_bpub) {
        c->rx_bpub = c->rx_bpos;
        atomic_store_explicit(c->rx_bheadp, c->rx_bpos, memory_order_release);
    }
    if (c->rx_pos != c->rx_pub || fenced) {
        c->rx_pub = c->rx_pos;
        atomic_store_explicit(c->rx_headp, c->rx_pos,
                              fenced ? memory_order_seq_cst : memory_order_release);
    }
    if (should_signal(atomic_load_explicit(c->rx_peer_waitp, memory_order_relaxed), &c->rx_signaled))
        wake_signal(c->space);
}

/* rx_ended decides, when no fragment is ready, whether the connection
 * ended: 1 means poll again first (the peer wrote more before it closed or
 * died), 0 not ended, or the error. */
static int rx_ended(chanos_ump *c)
{
    int e = atomic_load_explicit(&c->err, memory_order_relaxed);
    if (e)
        return e;
    uint64_t w = atomic_load_explicit(c->peer_closed, memory_order_acquire);
    if (w) {
        uint64_t cp = w & ~CLOSED_BIT;
        if (!(w & CLOSED_BIT) || cp < c->rx_pos || cp - c->rx_pos > c->n)
            return fail(c, CHANOS_ERR_PROTOCOL);
        if (cp > c->rx_pos) {
            if (c->rx_retry == c->rx_pos + 1)
                return fail(c, CHANOS_ERR_PROTOCOL); /* promised data is not there */
            c->rx_retry = c->rx_pos + 1;
            return 1;
        }
        if (c->msg_len >= 0)
            return fail(c, CHANOS_ERR_PROTOCOL);
        return fail(c, CHANOS_ERR_CLOSED);
    }
    e = atomic_load_explicit(&c->peer_end, memory_order_relaxed);
    if (e) {
        if (!c->rx_gone_polled) {
            c->rx_gone_polled = 1;
            return 1;
        }
        return fail(c, e);
    }
    return 0;
}

static void rx_unannounce(chanos_ump *c)
{
    if (c->rx_announced) {
        atomic_store_explicit(c->rx_waitp, 0, memory_order_release);
        c->rx_announced = 0;
    }
}

static int rx_done(chanos_ump *c, const void **msg, size_t *len)
{
    rx_unannounce(c);
    if (c->rx_pos - c->rx_pub >= c->rx_batch || c->rx_bpos - c->rx_bpub >= c->rx_bbatch)
        rx_publish(c, 1);
    *msg = c->buf;
    *len = c->buf ? (size_t)c->got : 0;
    return 0;
}

/* rx_announce says we sleep waiting for data, then looks again: 1 if the
 * caller should poll the ring, 0 if it may sleep, or an error. As in
 * tx_announce, the drain comes before the announcement. */
static int rx_announce(chanos_ump *c)
{
    wake_drain(c, c->data);
    atomic_store_explicit(c->rx_waitp, next_epoch(&c->rx_epoch), memory_order_seq_cst);
    c->rx_announced = 1;
    rx_publish(c, 0); /* after the fence above: sees a sleeping producer */
    if (rx_changed(c))
        return 1;
    check_socket(c);
    return rx_ended(c);
}

/*
 * rx_try returns a message if one is there. Otherwise, with announce, it
 * announces that this side sleeps and returns CHANOS_ERR_AGAIN, staying
 * announced until a message comes (try_recv); without, it returns
 * CHANOS_ERR_AGAIN at once (spin_recv).
 */
static int rx_try(chanos_ump *c, const void **msg, size_t *len, int announce)
{
    for (;;) {
        int e = atomic_load_explicit(&c->err, memory_order_relaxed);
        if (e)
            return e;
        int r = rx_poll(c);
        if (r < 0)
            return r;
        if (r == 1)
            return rx_done(c, msg, len);
        rx_publish(c, 0);
        r = rx_ended(c);
        if (r < 0)
            return r;
        if (r == 1)
            continue;
        if (!announce)
            return CHANOS_ERR_AGAIN;
        r = rx_announce(c);
        if (r < 0)
            return r;
        if (r == 0)
            return CHANOS_ERR_AGAIN;
    }
}

int chanos_ump_try_recv(chanos_ump *c, const void **msg, size_t *len)
{
    if (!c || !msg || !len)
        return -EINVAL;
    return rx_try(c, msg, len, 1);
}

/*
 * chanos_ump_spin_recv is try_recv without the announcement: the caller
 * spins over it (and so do the peers' sends without a system call), and
 * announces with try_recv before it sleeps. An announcement a try_recv left
 * is withdrawn first, since this side is awake now; a signal already sent
 * for it is drained by the next announcement.
 */
int chanos_ump_spin_recv(chanos_ump *c, const void **msg, size_t *len)
{
    if (!c || !msg || !len)
        return -EINVAL;
    rx_unannounce(c);
    return rx_try(c, msg, len, 0);
}

int chanos_ump_peek_cancel_(chanos_ump *c, uint32_t call_id)
{
    uint64_t p = c->rx_pos, end = c->rx_pos + c->n;

    /* the rest of a message whose first fragments were read */
    if (c->msg_len >= 0)
        p += slots_for((size_t)c->msg_len - c->got);
    while (p < end) {
        uint8_t *slot = c->rx_slots + (p & c->mask) * SLOT;
        uint64_t w = atomic_load_explicit(word(slot, CTRL_OFF), memory_order_acquire);
        uint32_t seq = (uint32_t)w, info = (uint32_t)(w >> 32);
        uint32_t n = info & INFO_LEN;
        uint8_t h[CHANOS_HEADER_SIZE];

        /* not written yet, or not a message's first slot: what rx_poll
         * reads and judges, when the receives come to it */
        if (seq != (uint32_t)(p + 1) || !(info & INFO_FIRST) || n > c->max_msg)
            return 0;
        if (info & INFO_BULK) {
            p++;
            continue;
        }
        if (n == CHANOS_HEADER_SIZE) {
            copy_payload(h, slot, sizeof h);
            if (h[6] == CHANOS_KIND_CANCEL && h[7] == 0 &&
                chanos_load_u32(h) == CHANOS_HEADER_SIZE &&
                chanos_load_u32(h + 8) == call_id)
                return 1;
        }
        p += slots_for(n);
    }
    return 0;
}

int chanos_ump_recv(chanos_ump *c, const void **msg, size_t *len, int timeout_ms)
{
    if (!c || !msg || !len)
        return -EINVAL;
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        int e = atomic_load_explicit(&c->err, memory_order_relaxed);
        if (e)
            return e;
        int r = rx_poll(c);
        if (r < 0)
            return r;
        if (r == 1)
            return rx_done(c, msg, len);
        rx_publish(c, 0);
        if ((r = rx_ended(c)) < 0)
            return r;
        if (r == 1)
            continue;
        int64_t window = spin_window(c->rx_spin, c->spin_ns, c->rx_misses);
        if (window > 0 && timeout_ms != 0 && !c->rx_announced) {
            int64_t start = 0;
            int yielded = 0;
            for (unsigned i = 1;; i++) {
                if (i > TIGHT_POLLS)
                    spin_pause();
                if (rx_changed(c)) {
                    c->rx_spin = c->spin_ns;
                    c->rx_misses = 0;
                    if (c->rx_yields)
                        c->rx_yields--;
                    break;
                }
                if (i % 64)
                    continue;
                if ((r = rx_ended(c)) != 0)
                    break;
                int64_t t = now_ns();
                if (!start)
                    start = t;
                else if (t - start > window) {
                    c->rx_spin = spin_lost(c->rx_spin, c->spin_ns);
                    c->rx_misses++;
                    c->rx_yields = YIELD_WAITS;
                    break;
                } else if (deadline >= 0 && t >= deadline)
                    break;
                if (i > YIELD_AFTER && !yielded && c->rx_yields) {
                    sched_yield();
                    yielded = 1;
                }
            }
            if (r < 0)
                return r;
            if (rx_changed(c) || r == 1)
                continue;
        }
        r = rx_announce(c);
        if (r < 0) {
            rx_unannounce(c);
            return r;
        }
        if (r == 1)
            continue;
        int left = poll_timeout(deadline);
        if (left == 0) {
            rx_unannounce(c);
            return CHANOS_ERR_TIMEDOUT;
        }
        struct pollfd p[2] = {{.fd = c->data, .events = POLLIN},
                              {.fd = c->sock, .events = POLLIN}};
        if (poll(p, 2, poll_timeout(deadline)) < 0 && errno != EINTR) {
            r = -errno;
            rx_unannounce(c);
            return r;
        }
        if (p[1].revents)
            check_socket(c);
    }
}

/* ---- the rest ---- */

int chanos_ump_fd(const chanos_ump *c)
{
    return c ? c->epfd : -EINVAL;
}

int64_t chanos_ump_spin_ns(const chanos_ump *c)
{
    return c ? c->spin_ns : -EINVAL;
}

int chanos_ump_err(const chanos_ump *c)
{
    if (!c)
        return -EINVAL;
    int e = atomic_load_explicit(&((chanos_ump *)c)->err, memory_order_relaxed);
    return e ? e : atomic_load_explicit(&((chanos_ump *)c)->peer_end, memory_order_relaxed);
}

int chanos_ump_peer_gone(chanos_ump *c)
{
    if (!c)
        return -EINVAL;
    check_socket(c);
    return atomic_load_explicit(&c->peer_end, memory_order_relaxed);
}

size_t chanos_ump_max_msg(const chanos_ump *c)
{
    return c ? c->max_msg : 0;
}

void chanos_ump_close(chanos_ump *c)
{
    if (!c)
        return;
    if (c->mem) {
        atomic_store_explicit(c->my_closed, CLOSED_BIT | c->tx_tail, memory_order_seq_cst);
        /* Closing our ends wakes a sleeping peer with end of file; these
         * wake it too where a copy of our ends lives on elsewhere (a child
         * forked without exec). */
        if (c->data >= 0)
            wake_signal(c->data);
        if (c->space >= 0)
            wake_signal(c->space);
        munmap(c->mem, c->mem_size);
    }
    close_fd(&c->sock);
    close_fd(&c->epfd);
    close_fd(&c->data);
    close_fd(&c->space);
    close_fd(&c->caps); /* descriptors still queued on it close with it */
    free(c->buf);
    free(c);
}

const char *chanos_ump_strerror(int err)
{
    switch (err) {
    case CHANOS_ERR_AGAIN:
        return "ump: would block";
    case CHANOS_ERR_TIMEDOUT:
        return "ump: timed out";
    case CHANOS_ERR_CLOSED:
        return "ump: connection closed";
    case CHANOS_ERR_PEER_DIED:
        return "ump: peer died";
    case CHANOS_ERR_PROTOCOL:
        return "ump: protocol violation";
    case CHANOS_ERR_TOO_LARGE:
        return "ump: message too large";
    }
    return chanos_strerror(err);
}
