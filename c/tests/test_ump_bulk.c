/*
 * test_ump_bulk.c: the bulk region of the ump interconnect (docs/ump.md,
 * "Bulk region"): the defaults, sizes on both sides of 448 bytes up to the
 * maximum across many wrap-arounds of the region, the exact ring format the
 * producer writes, a full bulk region (try_send says "again" and writes
 * nothing; small messages still pass; a blocking sender waits across
 * processes), and a peer that breaks the rules: wrong bulk positions, the
 * BULK bit where it does not belong, a long message outside the region, a
 * bad bulk_head, a bad header. Each violation must end the connection with
 * CHANOS_ERR_PROTOCOL and nothing else (this test runs under ASan and
 * UBSan).
 */
#include "ump_testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define FIRST 0x80000000u
#define BULK  0x20000000u

typedef _Atomic uint64_t aword;

/* A ring pair in this process, with a mapping of its shared memory to
 * look at and to misbehave with. a writes ring 0, b ring 1. */
struct raw {
    chanos_ump *a, *b;
    uint8_t *mem;
    size_t size;
    uint32_t n, max, bulk; /* slots per ring, maximum message, bulk bytes */
};

static void raw_pair(const struct chanos_ump_options *o, struct raw *r)
{
    struct chanos_ump_files f, g;
    int sv[2];
    struct stat st;
    memset(r, 0, sizeof *r);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_EQ(chanos_ump_files_create(o, &f), 0);
    CHECK(split_files(&f, &g) == 0);
    CHECK(fstat(f.mem, &st) == 0);
    r->size = (size_t)st.st_size;
    r->mem = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, f.mem, 0);
    CHECK(r->mem != MAP_FAILED);
    r->n = chanos_load_u32(r->mem + 16);
    r->max = chanos_load_u32(r->mem + 20);
    r->bulk = chanos_load_u32(r->mem + 28);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_CREATOR, &f, sv[0], o, &r->a), 0);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_ATTACHER, &g, sv[1], o, &r->b), 0);
}

static void raw_close(struct raw *r)
{
    chanos_ump_close(r->a);
    chanos_ump_close(r->b);
    munmap(r->mem, r->size);
}

static uint8_t *slot_at(const struct raw *r, int ring, uint64_t p)
{
    return r->mem + 4096 + ((size_t)ring * r->n + (p % r->n)) * 64;
}

static uint8_t *bulk_of(const struct raw *r, int ring)
{
    return r->mem + 4096 + 2 * (size_t)r->n * 64 + (size_t)ring * r->bulk;
}

static aword *bulk_head(const struct raw *r, int ring)
{
    return (aword *)(void *)(r->mem + 512 + 512 * (size_t)ring + 136);
}

static uint64_t ctrl(const struct raw *r, int ring, uint64_t p)
{
    return atomic_load((aword *)(void *)(slot_at(r, ring, p) + 56));
}

/* put writes the control word of position p of ring 0 by hand. */
static void put(const struct raw *r, uint64_t p, uint32_t info)
{
    atomic_store((aword *)(void *)(slot_at(r, 0, p) + 56),
                 (uint64_t)(uint32_t)(p + 1) | (uint64_t)info << 32);
}

/* put_desc writes a bulk descriptor by hand at position p of ring 0. */
static void put_desc(const struct raw *r, uint64_t p, uint64_t q, uint32_t n)
{
    chanos_store_u64(slot_at(r, 0, p), q);
    put(r, p, FIRST | BULK | n);
}

static size_t nslots(size_t n)
{
    return n <= 56 ? 1 : (n + 55) / 56;
}

/* header_of reads slots, maximum and bulk size from a memfd's header. */
static void header_of(int fd, uint32_t *slots, uint32_t *max, uint32_t *bulk, uint64_t *total)
{
    uint8_t h[64];
    CHECK(pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
    *slots = chanos_load_u32(h + 16);
    *max = chanos_load_u32(h + 20);
    *bulk = chanos_load_u32(h + 28);
    *total = chanos_load_u64(h + 32);
}

/* test_defaults: the creator's defaults are Go's (defaultBulk,
 * defaultSlots): B = the power of two >= max(2*max, 4 MiB), none if
 * max <= 448, and 4096 slots with a bulk region. */
static void test_defaults(void)
{
    struct {
        struct chanos_ump_options o;
        uint32_t slots, bulk;
    } cases[] = {
        {{.max_msg = 0}, 4096, 4194304},
        {{.max_msg = 448}, 1024, 0},
        {{.max_msg = 449}, 4096, 4194304},
        {{.max_msg = 2048}, 4096, 4194304},
        {{.max_msg = 3000}, 4096, 4194304},
        {{.max_msg = 4096}, 4096, 4194304},
        {{.max_msg = 600000}, 4096, 4194304},
        {{.max_msg = 65536, .bulk_size = -1}, 4096, 0},
        {{.max_msg = 1000, .bulk_size = -1}, 1024, 0},
        {{.max_msg = 1000, .ring_slots = 8}, 8, 4194304}, /* 448 bytes take 8 slots */
        {{.max_msg = 4096, .bulk_size = 4096}, 4096, 4096},
        {{.max_msg = 100, .bulk_size = 8192}, 4096, 8192}, /* allowed, unused */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct chanos_ump_files f;
        CHECK_EQ(chanos_ump_files_create(&cases[i].o, &f), 0);
        uint32_t s, m, b;
        uint64_t t;
        header_of(f.mem, &s, &m, &b, &t);
        CHECK_EQ(s, cases[i].slots);
        CHECK_EQ(b, cases[i].bulk);
        CHECK_EQ(t, 4096 + 2 * (uint64_t)s * 64 + 2 * (uint64_t)b);
        struct stat st;
        CHECK(fstat(f.mem, &st) == 0 && (uint64_t)st.st_size == t);
        chanos_ump_files_close(&f);
    }
}

/* check_written checks the ring format of the message msg of n bytes that
 * the producer of ring just wrote at *pos (bulk position *bpos), and
 * advances both. */
static void check_written(const struct raw *r, int ring, const uint8_t *msg, size_t n,
                          uint64_t *pos, uint64_t *bpos)
{
    uint64_t w = ctrl(r, ring, *pos);
    CHECK_EQ((uint32_t)w, (uint32_t)(*pos + 1));
    if (n > 448) {
        CHECK_EQ(w >> 32, FIRST | BULK | n);
        CHECK_EQ(chanos_load_u64(slot_at(r, ring, *pos)), *bpos);
        const uint8_t *b = bulk_of(r, ring);
        size_t bad = 0;
        for (size_t j = 0; j < n; j++)
            bad += b[(*bpos + j) % r->bulk] != msg[j];
        CHECK_EQ(bad, 0);
        *pos += 1;
        *bpos += n;
    } else {
        CHECK_EQ(w >> 32, FIRST | n);
        *pos += nslots(n);
    }
    /* Nothing after it. */
    CHECK((uint32_t)ctrl(r, ring, *pos) != (uint32_t)(*pos + 1));
}

/* test_sizes: sizes around 448 and up to the maximum, in both directions,
 * many times around a bulk region of one maximum message and a ring of 16
 * slots (most of these messages would not fit in it). */
static void test_sizes(void)
{
    struct chanos_ump_options o = {.max_msg = 8192, .ring_slots = 16, .bulk_size = 8192};
    struct raw r;
    raw_pair(&o, &r);
    CHECK_EQ(r.n, 16);
    CHECK_EQ(r.bulk, 8192);
    uint8_t *buf = malloc(8192);
    size_t sizes[64];
    size_t ns = 0;
    size_t fixed[] = {0, 1, 56, 57, 447, 448, 449, 450, 503, 504, 505, 1000,
                      4095, 4096, 4097, 8191, 8192, 449, 8192, 448, 8191};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        sizes[ns++] = fixed[i];
    for (uint64_t x = 12345; ns < sizeof sizes / sizeof sizes[0];) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        sizes[ns++] = (size_t)(x >> 33) % 8193;
    }
    chanos_ump *dirs[2][2] = {{r.a, r.b}, {r.b, r.a}};
    for (int d = 0; d < 2; d++) {
        uint64_t pos = 0, bpos = 0;
        for (int round = 0; round < 20; round++) { /* wraps region and ring */
            for (size_t i = 0; i < ns; i++) {
                uint64_t id = (uint64_t)round * 1000 + i;
                pattern(buf, sizes[i], id);
                int err = i % 2 ? chanos_ump_try_send(dirs[d][0], buf, sizes[i])
                                : chanos_ump_send(dirs[d][0], buf, sizes[i], 1000);
                CHECK_EQ(err, 0);
                check_written(&r, d, buf, sizes[i], &pos, &bpos);
                const void *m;
                size_t n;
                CHECK_EQ(chanos_ump_recv(dirs[d][1], &m, &n, 1000), 0);
                CHECK_EQ(n, sizes[i]);
                CHECK(pattern_ok(m, n, id));
                /* Look again, as a receiver does: finding the ring empty
                 * publishes every position (a receiver publishes bulk_head
                 * every B/8 bytes otherwise, and the next message may need
                 * the whole region). */
                CHECK_EQ(chanos_ump_try_recv(dirs[d][1], &m, &n), CHANOS_ERR_AGAIN);
                CHECK_EQ(atomic_load(bulk_head(&r, d)), bpos);
            }
        }
        CHECK(bpos > 20 * (uint64_t)r.bulk);
    }
    CHECK_EQ(chanos_ump_err(r.a), 0);
    CHECK_EQ(chanos_ump_err(r.b), 0);
    free(buf);
    raw_close(&r);
}

/* test_fill: the sender fills the ring (slots or bulk region, whichever
 * runs out first) with try_send, which must then write nothing, and the
 * receiver drains it; over and over. */
static void test_fill(void)
{
    struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 32, .bulk_size = 4096};
    struct raw r;
    raw_pair(&o, &r);
    size_t cycle[] = {449, 4096, 100, 3000, 2000, 448, 1500, 0, 4000, 700, 300, 1023};
    size_t nc = sizeof cycle / sizeof cycle[0];
    size_t rings = (size_t)r.n * 64, span = 2 * rings + 2 * (size_t)r.bulk;
    uint8_t *before = malloc(span), *buf = malloc(4096);
    uint64_t sent = 0, recvd = 0, agains = 0;
    while (recvd < 5000) {
        for (;;) {
            size_t len = cycle[sent % nc];
            pattern(buf, len, sent);
            memcpy(before, r.mem + 4096, span);
            int err = chanos_ump_try_send(r.a, buf, len);
            if (err == CHANOS_ERR_AGAIN) {
                CHECK(memcmp(before, r.mem + 4096, span) == 0);
                agains++;
                break;
            }
            CHECK_EQ(err, 0);
            if (err)
                break;
            sent++;
        }
        for (;;) {
            const void *m;
            size_t n;
            int err = chanos_ump_try_recv(r.b, &m, &n);
            if (err == CHANOS_ERR_AGAIN)
                break;
            CHECK_EQ(err, 0);
            if (err)
                break;
            CHECK_EQ(n, cycle[recvd % nc]);
            CHECK(pattern_ok(m, n, recvd));
            recvd++;
        }
        CHECK_EQ(recvd, sent);
        if (failures)
            break;
    }
    CHECK(agains > 100);
    free(before);
    free(buf);
    raw_close(&r);
}

static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* test_bulk_full: a full bulk region stops bulk messages only. */
static void test_bulk_full(void)
{
    struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 64, .bulk_size = 4096,
                                   .spin_ns = 1000};
    struct raw r;
    raw_pair(&o, &r);
    static uint8_t buf[4096];
    pattern(buf, 3000, 0);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 3000), 0);
    /* 3000 + 1097 > 4096: neither waits nor writes. */
    size_t span = 2 * (size_t)r.n * 64 + 2 * (size_t)r.bulk;
    uint8_t *before = malloc(span);
    memcpy(before, r.mem + 4096, span);
    pattern(buf, 1097, 1);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 1097), CHANOS_ERR_AGAIN);
    CHECK(memcmp(before, r.mem + 4096, span) == 0);
    CHECK_EQ(chanos_ump_send(r.a, buf, 1097, 20), CHANOS_ERR_TIMEDOUT);
    CHECK(memcmp(before, r.mem + 4096, span) == 0);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 1097), CHANOS_ERR_AGAIN);
    CHECK(!readable(chanos_ump_fd(r.a), 0));
    /* Slot messages still pass. */
    pattern(buf, 448, 2);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 448), 0);
    /* Exactly the room left: 3000 + 1096 = 4096, up to the region's end. */
    pattern(buf, 1096, 3);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 1096), 0);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 449), CHANOS_ERR_AGAIN);
    /* The receiver frees the region: bulk_head is published (3000 >= B/8)
     * and the sender, which announced, is woken. */
    const void *m;
    size_t n;
    CHECK_EQ(chanos_ump_try_recv(r.b, &m, &n), 0);
    CHECK_EQ(n, 3000);
    CHECK(pattern_ok(m, n, 0));
    CHECK_EQ(atomic_load(bulk_head(&r, 0)), 3000);
    CHECK(readable(chanos_ump_fd(r.a), 1000));
    pattern(buf, 1097, 1);
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 1097), 0); /* at 4096: the start again */
    uint64_t expect[][2] = {{448, 2}, {1096, 3}, {1097, 1}};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(chanos_ump_recv(r.b, &m, &n, 1000), 0);
        CHECK_EQ(n, expect[i][0]);
        CHECK(pattern_ok(m, n, expect[i][1]));
    }
    CHECK_EQ(chanos_ump_try_recv(r.b, &m, &n), CHANOS_ERR_AGAIN);
    /* Found empty: every bulk byte is published. */
    CHECK_EQ(atomic_load(bulk_head(&r, 0)), 3000 + 1096 + 1097);
    CHECK_EQ(chanos_ump_err(r.a), 0);
    free(before);
    raw_close(&r);
}

/* test_blocking: a sender blocks on a bulk region that holds two messages
 * while a slow receiver in another process drains it; with spinning and
 * with parking at once. */
static void test_blocking(void)
{
    for (int park = 0; park < 2; park++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        struct chanos_ump_options o = {.max_msg = 4096, .bulk_size = 8192,
                                       .spin_ns = park ? -1 : 0};
        pid_t pid = fork();
        if (pid == 0) {
            close(sv[0]);
            chanos_ump *c;
            if (chanos_ump_attach(sv[1], &o, 5000, &c) < 0)
                _exit(10);
            for (uint64_t i = 0; i < 300; i++) {
                if (i % 50 == 0)
                    usleep(20000);
                const void *m;
                size_t n;
                if (chanos_ump_recv(c, &m, &n, 5000) < 0)
                    _exit(11);
                if (n != 449 + (i * 131) % 3648 || !pattern_ok(m, n, i))
                    _exit(12);
            }
            chanos_ump_close(c);
            _exit(0);
        }
        close(sv[1]);
        chanos_ump *c;
        CHECK_EQ(chanos_ump_create(sv[0], &o, 5000, &c), 0);
        if (!c)
            return;
        uint8_t buf[4096];
        for (uint64_t i = 0; i < 300; i++) {
            size_t len = 449 + (i * 131) % 3648;
            pattern(buf, len, i);
            CHECK_EQ(chanos_ump_send(c, buf, len, 5000), 0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        chanos_ump_close(c);
    }
}

/* violation checks that b's next receive, and everything after, reports a
 * protocol violation. */
static void violation(struct raw *r, int line)
{
    const void *m;
    size_t n;
    int err = chanos_ump_recv(r->b, &m, &n, 1000);
    if (err != CHANOS_ERR_PROTOCOL) {
        fprintf(stderr, "%s:%d: receive = %d (%s), want a protocol violation\n",
                __FILE__, line, err, chanos_ump_strerror(err));
        failures++;
    }
    CHECK_EQ(chanos_ump_err(r->b), CHANOS_ERR_PROTOCOL);
    CHECK_EQ(chanos_ump_try_recv(r->b, &m, &n), CHANOS_ERR_PROTOCOL);
    CHECK_EQ(chanos_ump_send(r->b, "x", 1, 0), CHANOS_ERR_PROTOCOL);
    raw_close(r);
}

/* test_bad_descriptors: a producer (written by hand here) that breaks the
 * bulk rules. */
static void test_bad_descriptors(void)
{
    struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 64, .bulk_size = 4096};
    struct chanos_ump_options none = {.max_msg = 1000, .ring_slots = 64, .bulk_size = -1};
    struct raw r;
    const void *m;
    size_t n;
    static uint8_t buf[4096];

    /* Wrong bulk positions: ahead, far away, and a replay of the previous
     * message's. */
    raw_pair(&o, &r);
    put_desc(&r, 0, 8, 500);
    violation(&r, __LINE__);
    raw_pair(&o, &r);
    put_desc(&r, 0, 1ull << 63, 4096);
    violation(&r, __LINE__);
    raw_pair(&o, &r);
    pattern(buf, 1000, 7);
    CHECK_EQ(chanos_ump_send(r.a, buf, 1000, 0), 0);
    put_desc(&r, 1, 0, 1000);
    CHECK_EQ(chanos_ump_recv(r.b, &m, &n, 1000), 0);
    CHECK(n == 1000 && pattern_ok(m, n, 7));
    violation(&r, __LINE__);

    /* The BULK bit on messages of 448 bytes or less. */
    uint32_t shorts[] = {0, 1, 100, 448};
    for (size_t i = 0; i < sizeof shorts / sizeof shorts[0]; i++) {
        raw_pair(&o, &r);
        put_desc(&r, 0, 0, shorts[i]);
        violation(&r, __LINE__);
    }
    /* Longer than the maximum, in the region. */
    raw_pair(&o, &r);
    put_desc(&r, 0, 0, 4097);
    violation(&r, __LINE__);
    raw_pair(&o, &r);
    put_desc(&r, 0, 0, 0x1fffffff);
    violation(&r, __LINE__);

    /* The BULK bit on a ring pair without a bulk region. */
    raw_pair(&none, &r);
    CHECK_EQ(r.bulk, 0);
    put_desc(&r, 0, 0, 500);
    violation(&r, __LINE__);
    /* ...where a long message in slots is fine. */
    raw_pair(&none, &r);
    pattern(buf, 1000, 8);
    CHECK_EQ(chanos_ump_send(r.a, buf, 1000, 0), 0);
    CHECK_EQ(ctrl(&r, 0, 0) >> 32, FIRST | 1000);
    CHECK_EQ(chanos_ump_recv(r.b, &m, &n, 1000), 0);
    CHECK(n == 1000 && pattern_ok(m, n, 8));
    raw_close(&r);

    /* A message longer than 448 bytes outside the bulk region of a ring
     * pair that has one, whole (9 slots). */
    raw_pair(&o, &r);
    for (uint64_t k = 1; k < 9; k++)
        put(&r, k, (uint32_t)k);
    put(&r, 0, FIRST | 449);
    violation(&r, __LINE__);

    /* The BULK bit on a continuation slot. */
    raw_pair(&o, &r);
    put(&r, 0, FIRST | 100);
    put(&r, 1, 1 | BULK);
    violation(&r, __LINE__);

    /* CAPS with BULK. */
    raw_pair(&o, &r);
    put_desc(&r, 0, 0, 0x40000000u | 500);
    violation(&r, __LINE__);
}

/* test_bad_bulk_head: the sender validates the consumer's bulk position:
 * never past what was written, never backwards. */
static void test_bad_bulk_head(void)
{
    struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 64, .bulk_size = 4096};
    struct raw r;
    static uint8_t buf[4096];
    const void *m;
    size_t n;

    raw_pair(&o, &r);
    CHECK_EQ(chanos_ump_send(r.a, buf, 4096, 0), 0);
    atomic_store(bulk_head(&r, 0), 5000); /* past the 4096 bytes written */
    CHECK_EQ(chanos_ump_try_send(r.a, buf, 449), CHANOS_ERR_PROTOCOL);
    CHECK_EQ(chanos_ump_err(r.a), CHANOS_ERR_PROTOCOL);
    CHECK_EQ(chanos_ump_send(r.a, buf, 1, 0), CHANOS_ERR_PROTOCOL);
    raw_close(&r);

    raw_pair(&o, &r);
    CHECK_EQ(chanos_ump_send(r.a, buf, 4096, 0), 0);
    CHECK_EQ(chanos_ump_recv(r.b, &m, &n, 1000), 0);
    CHECK_EQ(chanos_ump_send(r.a, buf, 449, 0), 0); /* reads bulk_head: 4096 */
    atomic_store(bulk_head(&r, 0), 100);             /* backwards */
    CHECK_EQ(chanos_ump_send(r.a, buf, 4096, 1000), CHANOS_ERR_PROTOCOL);
    CHECK_EQ(chanos_ump_err(r.a), CHANOS_ERR_PROTOCOL);
    raw_close(&r);
}

/* test_bad_header: an opener validates the bulk size as Go's
 * config.check does. */
static void test_bad_header(void)
{
    struct {
        uint32_t slots, max, bulk;
        int fix_total; /* write the total that matches, or leave it */
        int want;
    } cases[] = {
        {64, 4096, 4096, 1, 0},                   /* valid: the control */
        {64, 4096, 8192, 1, 0},                   /* as created */
        {64, 1000, 2048, 1, CHANOS_ERR_PROTOCOL}, /* below the minimum */
        {64, 4096, 6144, 1, CHANOS_ERR_PROTOCOL}, /* not a power of two */
        {64, 8193, 8192, 1, CHANOS_ERR_PROTOCOL}, /* smaller than a message */
        {4, 4096, 8192, 1, CHANOS_ERR_PROTOCOL},  /* 448 bytes take 8 slots */
        {64, 4096, 0, 1, CHANOS_ERR_PROTOCOL},    /* 4096 bytes take 74 slots */
        {64, 4096, 4096, 0, CHANOS_ERR_PROTOCOL}, /* total disagrees */
        {64, 0x20000000, 8192, 1, CHANOS_ERR_PROTOCOL}, /* max over the limit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 64, .bulk_size = 8192};
        struct chanos_ump_files f;
        CHECK_EQ(chanos_ump_files_create(&o, &f), 0);
        uint8_t *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f.mem, 0);
        CHECK(h != MAP_FAILED);
        chanos_store_u32(h + 16, cases[i].slots);
        chanos_store_u32(h + 20, cases[i].max);
        chanos_store_u32(h + 28, cases[i].bulk);
        if (cases[i].fix_total)
            chanos_store_u64(h + 32, 4096 + 2 * (uint64_t)cases[i].slots * 64 +
                                         2 * (uint64_t)cases[i].bulk);
        munmap(h, 4096);
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        chanos_ump *c = NULL;
        int err = chanos_ump_open(CHANOS_UMP_ATTACHER, &f, sv[1], NULL, &c);
        if (err != cases[i].want) {
            fprintf(stderr, "%s:%d: case %zu: open = %d (%s), want %d\n", __FILE__, __LINE__,
                    i, err, chanos_ump_strerror(err), cases[i].want);
            failures++;
        }
        chanos_ump_close(c);
        close(sv[0]);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    int fds = count_fds();
    test_defaults();
    test_sizes();
    test_fill();
    test_bulk_full();
    test_blocking();
    test_bad_descriptors();
    test_bad_bulk_head();
    test_bad_header();
    CHECK_EQ(count_fds(), fds);
    return check_done("test_ump_bulk");
}
