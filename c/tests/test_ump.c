/*
 * test_ump.c: the ump interconnect in one process and across fork: sizes
 * around the slot boundaries, the maximum size, full rings, timeouts, the
 * pollable descriptor with the try variants, the handshake, orderly close,
 * argument checks and descriptor leaks. Runs under ASan and UBSan.
 */
#include "ump_testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

static void test_sizes(void)
{
    struct chanos_ump_options o = {.max_msg = 4096, .ring_slots = 256};
    chanos_ump *a, *b;
    pair(&o, &a, &b);
    uint8_t *buf = malloc(4096);
    size_t sizes[300];
    size_t ns = 0;
    for (size_t n = 0; n <= 4 * CHANOS_UMP_SLOT_PAYLOAD + 1; n++)
        sizes[ns++] = n;
    sizes[ns++] = 1000;
    sizes[ns++] = 4096 - CHANOS_UMP_SLOT_PAYLOAD - 1;
    sizes[ns++] = 4095;
    sizes[ns++] = 4096;
    chanos_ump *dirs[2][2] = {{a, b}, {b, a}};
    for (int d = 0; d < 2; d++) {
        for (int round = 0; round < 10; round++) { /* wraps the ring */
            for (size_t i = 0; i < ns; i++) {
                uint64_t id = (uint64_t)round * 1000 + i;
                pattern(buf, sizes[i], id);
                CHECK_EQ(chanos_ump_send(dirs[d][0], buf, sizes[i], 1000), 0);
                const void *m;
                size_t n;
                CHECK_EQ(chanos_ump_recv(dirs[d][1], &m, &n, 1000), 0);
                CHECK_EQ(n, sizes[i]);
                CHECK(pattern_ok(m, n, id));
            }
        }
    }
    CHECK_EQ(chanos_ump_max_msg(a), 4096);
    free(buf);
    chanos_ump_close(a);
    chanos_ump_close(b);
}

static void test_too_large(void)
{
    struct chanos_ump_options o = {.max_msg = 1000};
    chanos_ump *a, *b;
    pair(&o, &a, &b);
    static uint8_t buf[1001];
    CHECK_EQ(chanos_ump_send(a, buf, 1001, 0), CHANOS_ERR_TOO_LARGE);
    CHECK_EQ(chanos_ump_try_send(a, buf, 1001), CHANOS_ERR_TOO_LARGE);
    CHECK_EQ(chanos_ump_send(a, buf, 1000, 0), 0);
    const void *m;
    size_t n;
    CHECK_EQ(chanos_ump_recv(b, &m, &n, 1000), 0);
    CHECK_EQ(n, 1000);
    CHECK_EQ(chanos_ump_err(a), 0);
    chanos_ump_close(a);
    chanos_ump_close(b);
}

static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

static void test_full_ring_and_fd(void)
{
    struct chanos_ump_options o = {.max_msg = 100, .ring_slots = 8, .spin_ns = 1000};
    chanos_ump *a, *b;
    pair(&o, &a, &b);
    uint8_t buf[100];
    int sent = 0;
    for (;; sent++) {
        pattern(buf, sizeof buf, (uint64_t)sent);
        int err = chanos_ump_try_send(a, buf, sizeof buf);
        if (err == CHANOS_ERR_AGAIN)
            break;
        CHECK_EQ(err, 0);
        if (err)
            break;
    }
    CHECK_EQ(sent, 4); /* 100 bytes take 2 of the 8 slots */
    CHECK_EQ(chanos_ump_send(a, buf, sizeof buf, 20), CHANOS_ERR_TIMEDOUT);
    CHECK(!readable(chanos_ump_fd(a), 0));
    CHECK_EQ(chanos_ump_try_send(a, buf, sizeof buf), CHANOS_ERR_AGAIN);
    /* The receiver frees room: a's descriptor becomes readable. */
    const void *m;
    size_t n;
    CHECK_EQ(chanos_ump_try_recv(b, &m, &n), 0);
    CHECK(pattern_ok(m, n, 0));
    CHECK(readable(chanos_ump_fd(a), 1000));
    pattern(buf, sizeof buf, (uint64_t)sent);
    CHECK_EQ(chanos_ump_try_send(a, buf, sizeof buf), 0);
    for (int i = 1; i <= sent; i++) {
        CHECK_EQ(chanos_ump_recv(b, &m, &n, 1000), 0);
        CHECK(pattern_ok(m, n, (uint64_t)i));
    }
    /* Empty: try_recv says AGAIN, then the descriptor wakes on a send. */
    CHECK_EQ(chanos_ump_try_recv(b, &m, &n), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_ump_recv(b, &m, &n, 20), CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_ump_try_recv(b, &m, &n), CHANOS_ERR_AGAIN);
    CHECK(!readable(chanos_ump_fd(b), 0));
    CHECK_EQ(chanos_ump_send(a, "x", 1, 0), 0);
    CHECK(readable(chanos_ump_fd(b), 1000));
    CHECK_EQ(chanos_ump_try_recv(b, &m, &n), 0);
    CHECK_EQ(n, 1);
    chanos_ump_close(a);
    chanos_ump_close(b);
}

static void test_close(void)
{
    chanos_ump *a, *b;
    pair(NULL, &a, &b);
    uint8_t buf[300];
    for (int i = 0; i < 50; i++) {
        pattern(buf, (size_t)i * 6, (uint64_t)i);
        CHECK_EQ(chanos_ump_send(a, buf, (size_t)i * 6, 1000), 0);
    }
    chanos_ump_close(a);
    for (int i = 0; i < 50; i++) {
        const void *m;
        size_t n;
        CHECK_EQ(chanos_ump_recv(b, &m, &n, 1000), 0);
        CHECK_EQ(n, (size_t)i * 6);
        CHECK(pattern_ok(m, n, (uint64_t)i));
    }
    const void *m;
    size_t n;
    CHECK_EQ(chanos_ump_recv(b, &m, &n, 1000), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_ump_try_recv(b, &m, &n), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_ump_send(b, "x", 1, 0), CHANOS_ERR_CLOSED);
    CHECK_EQ(chanos_ump_err(b), CHANOS_ERR_CLOSED);
    chanos_ump_close(b);
}

/* test_caps_after_reset: a peer that sends a message with a descriptor
 * and closes while a record of ours waits unread on its side. The kernel
 * reports the reset of the descriptors' socket before the peer's record,
 * which is still taken. */
static void test_caps_after_reset(void)
{
    chanos_ump *a, *b;
    const void *m;
    size_t n;
    int p[2], got = -1;

    pair(NULL, &a, &b);
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(chanos_ump_send_fds(b, "1", 1, &p[1], 1, 1000), 0);
    CHECK_EQ(chanos_ump_send_fds(a, "2", 1, &p[0], 1, 1000), 0);
    chanos_ump_close(a);
    CHECK_EQ(chanos_ump_recv(b, &m, &n, 1000), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(chanos_ump_recv_fds(b, &got, 1), 0);
    CHECK(got >= 0);
    close(got);
    close(p[0]);
    close(p[1]);
    chanos_ump_close(b);
}

/* test_handshake: create and attach across fork; the child echoes until
 * the parent closes. */
static void test_handshake(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        chanos_ump *c;
        if (chanos_ump_attach(sv[1], NULL, 5000, &c) < 0)
            _exit(10);
        for (;;) {
            const void *m;
            size_t n;
            int err = chanos_ump_recv(c, &m, &n, 5000);
            if (err == CHANOS_ERR_CLOSED)
                break;
            if (err < 0 || chanos_ump_send(c, m, n, 5000) < 0)
                _exit(11);
        }
        chanos_ump_close(c);
        _exit(0);
    }
    close(sv[1]);
    chanos_ump *c;
    CHECK_EQ(chanos_ump_create(sv[0], NULL, 5000, &c), 0);
    if (!c)
        return;
    uint8_t *buf = malloc(CHANOS_UMP_DEFAULT_MAX_MSG);
    for (int i = 0; i < 2000; i++) {
        size_t len = (size_t)(i % 300);
        if (i % 100 == 0)
            len = ((size_t)i * 977) % (CHANOS_UMP_DEFAULT_MAX_MSG + 1);
        pattern(buf, len, (uint64_t)i);
        CHECK_EQ(chanos_ump_send(c, buf, len, 5000), 0);
        const void *m;
        size_t n;
        CHECK_EQ(chanos_ump_recv(c, &m, &n, 5000), 0);
        CHECK_EQ(n, len);
        CHECK(pattern_ok(m, n, (uint64_t)i));
    }
    free(buf);
    chanos_ump_close(c);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* test_bad_handshake: an attacher refuses garbage, and a creator whose
 * peer goes away reports it. */
static void test_bad_handshake(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(write(sv[0], "not a ump hello!", 16) == 16);
    chanos_ump *c = NULL;
    CHECK_EQ(chanos_ump_attach(sv[1], NULL, 1000, &c), CHANOS_ERR_PROTOCOL);
    close(sv[0]);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    close(sv[1]);
    int err = chanos_ump_create(sv[0], NULL, 1000, &c);
    CHECK(err == -EPIPE || err == CHANOS_ERR_PEER_DIED);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_EQ(chanos_ump_create(sv[0], NULL, 20, &c), CHANOS_ERR_TIMEDOUT);
    close(sv[1]);
}

static void test_args(void)
{
    struct chanos_ump_files f;
    struct chanos_ump_options bad[] = {
        {.ring_slots = 1000}, {.ring_slots = 1},
        {.max_msg = 1000, .ring_slots = 8, .bulk_size = -1},
        {.max_msg = 1000, .ring_slots = 4},        /* a 448-byte message takes 8 slots */
        {.max_msg = 1000, .bulk_size = 512},       /* below the minimum */
        {.max_msg = 10000, .bulk_size = 8192},     /* smaller than a message */
        {.max_msg = 1000, .bulk_size = 5000},      /* not a power of two */
        {.max_msg = 1000, .bulk_size = INT32_MAX}, /* too large */
        {.max_msg = CHANOS_UMP_MAX_MSG_LIMIT + 1u},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(chanos_ump_files_create(&bad[i], &f), -EINVAL);
    CHECK_EQ(chanos_ump_files_create(NULL, NULL), -EINVAL);
    chanos_ump *c;
    CHECK_EQ(chanos_ump_open(7, NULL, -1, NULL, &c), -EINVAL);
    CHECK_EQ(chanos_ump_send(NULL, "", 0, 0), -EINVAL);
    CHECK_EQ(chanos_ump_recv(NULL, NULL, NULL, 0), -EINVAL);
    CHECK_EQ(chanos_ump_fd(NULL), -EINVAL);
    chanos_ump_close(NULL);
    CHECK(strcmp(chanos_ump_strerror(CHANOS_ERR_PEER_DIED), "ump: peer died") == 0);
    CHECK(strlen(chanos_ump_strerror(-EINVAL)) > 0);
}

int main(void)
{
    int fds = count_fds();
    test_sizes();
    test_too_large();
    test_full_ring_and_fd();
    test_close();
    test_caps_after_reset();
    test_handshake();
    test_bad_handshake();
    test_args();
    CHECK_EQ(count_fds(), fds);
    return check_done("test_ump");
}
