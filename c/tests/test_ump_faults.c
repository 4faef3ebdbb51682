/*
 * test_ump_faults.c: a peer that dies (SIGKILL in the middle of writing a
 * message, or while streaming) and a peer that scribbles random bytes over
 * the whole shared memory. The reader must deliver only whole messages,
 * report CHANOS_ERR_PEER_DIED or CHANOS_ERR_PROTOCOL, and never read out of
 * bounds (this test runs under ASan and UBSan).
 */
#include "ump_testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define SLOTS 64
#define MAXMSG 1000

/* child_pair makes a ring pair whose attacher side runs fn in a child
 * process; the parent gets the creator side. The child also gets a mapping
 * of the shared memory, to misbehave with, but runs fn only once the
 * parent has opened its side (a scribbler could otherwise spoil the header
 * the parent validates). ready is a pipe the child writes a byte to when
 * it wants to be killed. */
static pid_t child_pair(void (*fn)(chanos_ump *, uint8_t *, size_t, int), chanos_ump **parent, int *ready)
{
    struct chanos_ump_options o = {.max_msg = MAXMSG, .ring_slots = SLOTS};
    struct chanos_ump_files f, g;
    int sv[2], pp[2], gp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(pipe(pp) == 0);
    CHECK(pipe(gp) == 0);
    CHECK_EQ(chanos_ump_files_create(&o, &f), 0);
    CHECK(split_files(&f, &g) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pp[0]);
        close(sv[0]);
        chanos_ump_files_close(&f);
        struct stat st; /* the slots and the bulk regions (MAXMSG > 448) */
        if (fstat(g.mem, &st) < 0)
            _exit(10);
        size_t size = (size_t)st.st_size;
        uint8_t *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g.mem, 0);
        chanos_ump *c;
        if (mem == MAP_FAILED || chanos_ump_open(CHANOS_UMP_ATTACHER, &g, sv[1], &o, &c) < 0)
            _exit(10);
        close(gp[1]);
        char go;
        if (read(gp[0], &go, 1) != 1) /* the parent has opened its side */
            _exit(11);
        close(gp[0]);
        fn(c, mem, size, pp[1]);
        _exit(0);
    }
    close(pp[1]);
    close(sv[1]);
    close(gp[0]);
    chanos_ump_files_close(&g);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_CREATOR, &f, sv[0], &o, parent), 0);
    CHECK(write(gp[1], "g", 1) == 1);
    close(gp[1]);
    *ready = pp[0];
    return pid;
}

static void wait_ready(int fd)
{
    char b;
    CHECK(read(fd, &b, 1) == 1);
    close(fd);
}

static void kill_child(pid_t pid)
{
    kill(pid, SIGKILL);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
}

/* mid_write sends 3 messages of 100 bytes (2 slots each),
 * then writes 2 of the 5 slots of a 250-byte message by hand, as a
 * producer killed inside chanos_ump_send would leave them. */
static void mid_write(chanos_ump *c, uint8_t *mem, size_t size, int ready)
{
    (void)size;
    uint8_t buf[250];
    for (int i = 0; i < 3; i++) {
        pattern(buf, 100, (uint64_t)i);
        if (chanos_ump_send(c, buf, 100, 1000) < 0)
            _exit(11);
    }
    pattern(buf, 250, 3);
    uint8_t *ring1 = mem + 4096 + SLOTS * 64; /* the attacher writes ring 1 */
    uint64_t pos = 3 * 2;                     /* 100 bytes: 2 slots each */
    for (uint64_t k = 0; k < 2; k++, pos++) {
        uint8_t *slot = ring1 + (pos % SLOTS) * 64;
        memcpy(slot, buf + k * CHANOS_UMP_SLOT_PAYLOAD, CHANOS_UMP_SLOT_PAYLOAD);
        uint32_t info = k == 0 ? 0x80000000u | 250u : (uint32_t)k;
        uint64_t w = (uint64_t)(uint32_t)(pos + 1) | (uint64_t)info << 32;
        atomic_store((_Atomic uint64_t *)(void *)(slot + 56), w);
    }
    if (write(ready, "r", 1) != 1)
        _exit(12);
    pause();
}

static void test_kill_mid_write(void)
{
    chanos_ump *c;
    int ready;
    pid_t pid = child_pair(mid_write, &c, &ready);
    wait_ready(ready);
    kill_child(pid);
    for (int i = 0; i < 3; i++) {
        const void *m;
        size_t n;
        CHECK_EQ(chanos_ump_recv(c, &m, &n, 5000), 0);
        CHECK_EQ(n, 100);
        CHECK(pattern_ok(m, n, (uint64_t)i));
    }
    const void *m;
    size_t n;
    CHECK_EQ(chanos_ump_recv(c, &m, &n, 5000), CHANOS_ERR_PEER_DIED);
    CHECK_EQ(chanos_ump_err(c), CHANOS_ERR_PEER_DIED);
    chanos_ump_close(c);
}

static void stream_forever(chanos_ump *c, uint8_t *mem, size_t size, int ready)
{
    (void)mem;
    (void)size;
    uint8_t buf[MAXMSG];
    if (write(ready, "r", 1) != 1)
        _exit(12);
    for (uint64_t i = 0;; i++) {
        size_t n = (size_t)(i * 7919) % (MAXMSG + 1);
        pattern(buf, n, i);
        if (chanos_ump_send(c, buf, n, -1) < 0)
            _exit(11);
    }
}

static void test_kill_streaming(void)
{
    chanos_ump *c;
    int ready;
    pid_t pid = child_pair(stream_forever, &c, &ready);
    wait_ready(ready);
    for (uint64_t i = 0;; i++) {
        if (i == 200)
            kill_child(pid);
        const void *m;
        size_t n;
        int err = chanos_ump_recv(c, &m, &n, 5000);
        if (err < 0) {
            CHECK_EQ(err, CHANOS_ERR_PEER_DIED);
            CHECK(i >= 200);
            break;
        }
        CHECK_EQ(n, (size_t)(i * 7919) % (MAXMSG + 1));
        CHECK(pattern_ok(m, n, i));
    }
    chanos_ump_close(c);
}

/* scribble writes random words and bytes all over the shared memory and
 * signals every eventfd now and then, through its own connection. */
static void scribble(chanos_ump *c, uint8_t *mem, size_t size, int ready)
{
    if (write(ready, "r", 1) != 1)
        _exit(12);
    for (unsigned i = 0;; i++) {
        size_t off = (size_t)(check_rnd() % (size / 8)) * 8;
        atomic_store_explicit((_Atomic uint64_t *)(void *)(mem + off), check_rnd(), memory_order_relaxed);
        if (i % 1024 == 0) {
            size_t o2 = (size_t)(check_rnd() % (size - 64));
            for (int j = 0; j < 64; j++)
                mem[o2 + (size_t)j] = (uint8_t)check_rnd();
            chanos_ump_try_send(c, "x", 1); /* wakes the parent now and then */
        }
    }
}

static void test_scribbler(void)
{
    for (int run = 0; run < 3; run++) {
        chanos_ump *c;
        int ready;
        pid_t pid = child_pair(scribble, &c, &ready);
        wait_ready(ready);
        int err = 0;
        uint8_t buf[MAXMSG] = {0};
        for (int tries = 0; tries < 1000 && err >= 0; tries++) {
            chanos_ump_try_send(c, buf, (size_t)run * 300);
            const void *m;
            size_t n;
            err = chanos_ump_recv(c, &m, &n, 10);
            if (err == CHANOS_ERR_TIMEDOUT)
                err = 0;
            else if (err == 0)
                CHECK(n <= MAXMSG);
        }
        CHECK_EQ(err, CHANOS_ERR_PROTOCOL);
        CHECK_EQ(chanos_ump_err(c), CHANOS_ERR_PROTOCOL);
        CHECK_EQ(chanos_ump_send(c, buf, 10, 0), CHANOS_ERR_PROTOCOL);
        kill_child(pid);
        chanos_ump_close(c);
    }
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* call_frame puts a call of message 1 with no body into b. */
static void call_frame(uint8_t b[CHANOS_HEADER_SIZE], int kind)
{
    struct chanos_hdr h = {CHANOS_HEADER_SIZE, 1, (uint8_t)kind, 0, 0, 0};
    chanos_hdr_put(b, &h);
}

/* caller sends a call, then (for close_after_call) a message and closes
 * its connection in order, says so, and waits to be killed: the parent
 * sees an orderly close from a process that is still there. */
static void caller(chanos_ump *u, int close_after_call, int ready)
{
    chanos_conn *c;
    uint8_t b[CHANOS_HEADER_SIZE];
    uint32_t id;
    if (chanos_conn_new(u, &c) != 0)
        _exit(11);
    call_frame(b, CHANOS_KIND_CALL);
    if (chanos_conn_send_call(c, b, sizeof b, -1, &id) != 0)
        _exit(12);
    if (close_after_call) {
        call_frame(b, CHANOS_KIND_MESSAGE);
        if (chanos_conn_send(c, b, sizeof b, -1) != 0)
            _exit(13);
        chanos_conn_close(c);
    }
    if (write(ready, "r", 1) != 1)
        _exit(14);
    pause();
}

static void call_and_wait(chanos_ump *u, uint8_t *mem, size_t size, int ready)
{
    (void)mem;
    (void)size;
    caller(u, 0, ready);
}

static void call_and_close(chanos_ump *u, uint8_t *mem, size_t size, int ready)
{
    (void)mem;
    (void)size;
    caller(u, 1, ready);
}

/* await_gone polls chanos_conn_peer_gone, as a handler working on a call
 * would, until it reports the peer's end, for at most a second. */
static int await_gone(chanos_conn *c)
{
    int64_t limit = mono_ms() + 1000;
    int gone;
    while ((gone = chanos_conn_peer_gone(c)) == 0 && mono_ms() < limit) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return gone;
}

/* A C server has no handler contexts; chanos_conn_peer_gone tells it,
 * while it works on a call, that its caller died (kill -9) or closed the
 * connection, without a receive: within a second. What the caller sent
 * before it closed is still received. */
static void test_peer_gone(void)
{
    for (int closes = 0; closes < 2; closes++) {
        chanos_ump *u;
        chanos_conn *c;
        struct chanos_frame f;
        int ready;
        pid_t pid = child_pair(closes ? call_and_close : call_and_wait, &u, &ready);
        CHECK_EQ(chanos_conn_new(u, &c), 0);
        CHECK_EQ(chanos_conn_recv(c, 5000, &f), 0);
        CHECK_EQ(f.kind, CHANOS_KIND_CALL);
        /* the handler runs: the caller is there (the closing caller may
         * have closed already: it does not wait for us) */
        if (!closes)
            CHECK_EQ(chanos_conn_peer_gone(c), 0);
        if (closes) {
            wait_ready(ready); /* the caller has closed, and lives on */
            CHECK_EQ(await_gone(c), CHANOS_ERR_CLOSED);
            /* the message sent before the close, then the end */
            CHECK_EQ(chanos_conn_recv(c, 5000, &f), 0);
            CHECK_EQ(f.kind, CHANOS_KIND_MESSAGE);
            CHECK_EQ(chanos_conn_recv(c, 5000, &f), CHANOS_ERR_CLOSED);
            kill_child(pid);
        } else {
            wait_ready(ready);
            CHECK_EQ(chanos_conn_peer_gone(c), 0);
            kill_child(pid);
            CHECK_EQ(await_gone(c), CHANOS_ERR_PEER_DIED);
            CHECK_EQ(chanos_conn_recv(c, 5000, &f), CHANOS_ERR_PEER_DIED);
        }
        CHECK_EQ(chanos_conn_peer_gone(c), closes ? CHANOS_ERR_CLOSED : CHANOS_ERR_PEER_DIED);
        chanos_conn_close(c);
    }
    CHECK_EQ(chanos_ump_peer_gone(NULL), -EINVAL);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    int fds = count_fds();
    test_kill_mid_write();
    test_kill_streaming();
    test_scribbler();
    test_peer_gone();
    CHECK_EQ(count_fds(), fds);
    return check_done("test_ump_faults");
}
