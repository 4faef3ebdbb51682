/*
 * test_ump_hostile.c: a hostile peer against the wake-up descriptors
 * (issue 18, row A). The peer is written by hand here: it speaks the
 * handshake itself, maps the shared memory, and holds raw descriptors. It
 *
 *  - clears O_NONBLOCK on every descriptor it holds, copies of the
 *    victim's own ends included where a hostile creator kept them;
 *  - fills the wake-up sockets' buffers, both ways;
 *  - announces sleep in both wait words, so that the victim signals;
 *  - closes or replaces its wake-up sockets, or shuts them down, mid-
 *    connection; and hands over pipes, eventfds, the wrong kind of socket
 *    or the same socket twice in the handshake.
 *
 * Every step of the victim must return promptly: each runs under alarm(),
 * whose handler names the step that hung and fails the test. Opens of bad
 * descriptors must be refused with CHANOS_ERR_PROTOCOL (and a refusal
 * sent), and a peer whose wake-up socket ends must end the connection.
 * SIGPIPE is left at its default: a send to a closed peer must not raise
 * it.
 */
#include "ump_testutil.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define SLOTS  4096
#define MAXMSG 1000

/* The handshake and the layout, written out as a foreign peer would
 * (docs/ump.md, "Setup" and "Header page"). */
#define HELLO_MAGIC 0x314f4c4c45484d55ull
#define ACK_MAGIC   0x314b4341504d55ull
#define RING_CTL(r) (512 + (size_t)(r) * 512)
#define PROD_WAIT   0
#define CONS_WAIT   256

static const struct chanos_ump_options opts = {
    .max_msg = MAXMSG, .ring_slots = SLOTS, .bulk_size = -1};

/* ---- hanging steps fail the test ---- */

static const char *volatile step = "";

static void on_alarm(int sig)
{
    (void)sig;
    static const char pre[] = "test_ump_hostile: hung in: ";
    ssize_t r = write(2, pre, sizeof pre - 1);
    r = write(2, (const char *)step, strlen((const char *)step));
    r = write(2, "\n", 1);
    (void)r;
    _exit(3);
}

/* begin names the victim's next step and gives it 5 seconds; done stops
 * the clock. */
static void begin(const char *what)
{
    step = what;
    alarm(5);
}

static void done(void)
{
    alarm(0);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the hostile peer ---- */

struct hostile {
    int side;     /* the victim's side */
    int sock;     /* the hostile end of the liveness socket */
    int own[2];   /* the hostile's data and space sockets */
    int copy[2];  /* copies of the victim's data and space sockets, or -1 */
    uint8_t *mem;
    size_t size;
};

static void map_mem(struct hostile *h, int memfd)
{
    struct stat st;
    CHECK(fstat(memfd, &st) == 0);
    h->size = (size_t)st.st_size;
    h->mem = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    CHECK(h->mem != MAP_FAILED);
    close(memfd);
}

/* send_hello sends a hello of the given version and descriptor count
 * field, with n descriptors. */
static void send_hello(int sock, uint32_t version, uint32_t nfield, const int *fds, int n)
{
    uint8_t hello[16];
    chanos_store_u64(hello, HELLO_MAGIC);
    chanos_store_u32(hello + 8, version);
    chanos_store_u32(hello + 12, nfield);
    union {
        char buf[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 0) {
        m.msg_control = u.buf;
        m.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
    }
    CHECK(sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)sizeof hello);
}

/* read_ack returns the status of the ack waiting on sock, or -1. */
static int64_t read_ack(int sock)
{
    uint8_t ack[16];
    if (recv(sock, ack, sizeof ack, MSG_DONTWAIT) != (ssize_t)sizeof ack ||
        chanos_load_u64(ack) != ACK_MAGIC)
        return -1;
    return chanos_load_u32(ack + 8);
}

/* hostile_creator makes the ring pair and hands the victim, which
 * attaches, its descriptors; with keep, it keeps copies of the victim's
 * wake-up sockets: the attack that defeated shared eventfds. */
static void hostile_creator(struct hostile *h, int keep, chanos_ump **victim)
{
    struct chanos_ump_files f;
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_EQ(chanos_ump_files_create(&opts, &f), 0);
    h->side = CHANOS_UMP_ATTACHER;
    for (int k = 0; k < 2; k++) {
        h->own[k] = f.wake[0][k];
        h->copy[k] = keep ? fcntl(f.wake[1][k], F_DUPFD_CLOEXEC, 0) : -1;
    }
    int fds[4] = {f.mem, f.wake[1][0], f.wake[1][1], f.caps[1]};
    send_hello(sv[0], CHANOS_UMP_VERSION, 4, fds, 4);
    close(f.wake[1][0]);
    close(f.wake[1][1]);
    close(f.caps[0]);
    close(f.caps[1]);
    map_mem(h, f.mem);
    CHECK_EQ(chanos_ump_attach(sv[1], &opts, 1000, victim), 0);
    CHECK_EQ(read_ack(sv[0]), 0);
    h->sock = sv[0];
}

/* hostile_attacher attaches to the victim's chanos_ump_create: its ack
 * is written first, so that one thread plays both. */
static void hostile_attacher(struct hostile *h, chanos_ump **victim)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    uint8_t ack[16] = {0};
    chanos_store_u64(ack, ACK_MAGIC);
    CHECK(send(sv[1], ack, sizeof ack, 0) == (ssize_t)sizeof ack);
    CHECK_EQ(chanos_ump_create(sv[0], &opts, 1000, victim), 0);
    uint8_t hello[16];
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    CHECK(recvmsg(sv[1], &m, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof hello);
    CHECK_EQ(chanos_load_u32(hello + 8), CHANOS_UMP_VERSION);
    CHECK_EQ(chanos_load_u32(hello + 12), 4);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    CHECK(cm && cm->cmsg_len == CMSG_LEN(4 * sizeof(int)));
    int fds[4];
    memcpy(fds, CMSG_DATA(cm), sizeof fds);
    close(fds[3]); /* the caps socket: this hostile sends no descriptors */
    h->side = CHANOS_UMP_CREATOR;
    h->sock = sv[1];
    h->own[0] = fds[1];
    h->own[1] = fds[2];
    h->copy[0] = h->copy[1] = -1;
    map_mem(h, fds[0]);
}

static void hostile_close(struct hostile *h)
{
    munmap(h->mem, h->size);
    close(h->sock);
    for (int k = 0; k < 2; k++) {
        if (h->own[k] >= 0)
            close(h->own[k]);
        if (h->copy[k] >= 0)
            close(h->copy[k]);
    }
}

/* clear_flags clears O_NONBLOCK (every status flag) on each descriptor
 * the hostile holds. */
static void clear_flags(struct hostile *h)
{
    int fds[5] = {h->sock, h->own[0], h->own[1], h->copy[0], h->copy[1]};
    for (int i = 0; i < 5; i++)
        if (fds[i] >= 0)
            CHECK(fcntl(fds[i], F_SETFL, 0) == 0);
}

/* announce stores a sleep announcement, epoch e, in both wait words the
 * victim reads: the consumer's of the ring it writes, the producer's of
 * the ring it reads. */
static void announce(struct hostile *h, uint64_t e)
{
    int out = h->side, in = 1 - h->side;
    atomic_store((_Atomic uint64_t *)(void *)(h->mem + RING_CTL(out) + CONS_WAIT), e);
    atomic_store((_Atomic uint64_t *)(void *)(h->mem + RING_CTL(in) + PROD_WAIT), e);
}

/* fill sends on fd until its peer's buffer is full, and returns the bytes
 * sent. */
static size_t fill(int fd)
{
    static const uint8_t junk[4096];
    size_t total = 0;
    for (;;) {
        ssize_t r = send(fd, junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r <= 0) {
            CHECK(r < 0 && errno == EAGAIN);
            return total;
        }
        total += (size_t)r;
    }
}

/* ---- the victim's steps ---- */

/* quiet: with every flag cleared and nothing pending, a receive drains
 * an empty socket (a blocking read of an eventfd at 0 hung here), and a
 * send signals the announced peer. */
static void victim_quiet(chanos_ump *c)
{
    const void *m;
    size_t n;
    uint8_t b[8] = {0};
    begin("try_recv, flags cleared, nothing pending");
    CHECK_EQ(chanos_ump_try_recv(c, &m, &n), CHANOS_ERR_AGAIN);
    done();
    begin("recv, flags cleared, nothing pending");
    CHECK_EQ(chanos_ump_recv(c, &m, &n, 20), CHANOS_ERR_TIMEDOUT);
    done();
    begin("send to an announced peer, flags cleared");
    CHECK_EQ(chanos_ump_send(c, b, sizeof b, 0), 0);
    done();
}

/* flooded: the victim's wake-up sockets are full both ways (as far as the
 * hostile can fill them) and the peer announces each time anew, so every
 * send signals into a full buffer (a write to a blocking eventfd at its
 * maximum hung here). */
static void victim_flooded(struct hostile *h, chanos_ump *c, uint64_t *epoch)
{
    const void *m;
    size_t n;
    uint8_t b[8] = {0};
    begin("sends that signal a full buffer");
    for (int i = 0; i < 2000; i++) {
        announce(h, ++*epoch);
        CHECK_EQ(chanos_ump_try_send(c, b, sizeof b), 0);
    }
    done();
    begin("recv with a flooded data socket");
    CHECK_EQ(chanos_ump_recv(c, &m, &n, 20), CHANOS_ERR_TIMEDOUT);
    done();
    begin("try_recv that publishes to an announced producer");
    announce(h, ++*epoch);
    CHECK_EQ(chanos_ump_try_recv(c, &m, &n), CHANOS_ERR_AGAIN);
    done();
    begin("send into a full ring, flooded space socket");
    int err;
    while ((err = chanos_ump_try_send(c, b, sizeof b)) == 0)
        ;
    CHECK_EQ(err, CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_ump_send(c, b, sizeof b, 20), CHANOS_ERR_TIMEDOUT);
    done();
}

/* test_flags_and_floods runs the attack against an attacher whose
 * creator kept copies of its wake-up sockets, and against a creator. */
static void test_flags_and_floods(void)
{
    for (int as_creator = 0; as_creator < 2; as_creator++) {
        struct hostile h;
        chanos_ump *c;
        uint64_t epoch = 1;
        if (as_creator)
            hostile_attacher(&h, &c);
        else
            hostile_creator(&h, 1, &c);
        clear_flags(&h);
        announce(&h, epoch);
        victim_quiet(c);
        /* Fill what the hostile can: the victim's receive buffers from
         * its own ends; the hostile's, through the copies of the victim's
         * ends if it kept them (else the victim's signals fill them). */
        for (int k = 0; k < 2; k++) {
            CHECK(fill(h.own[k]) > 0);
            if (h.copy[k] >= 0)
                CHECK(fill(h.copy[k]) > 0);
        }
        victim_flooded(&h, c, &epoch);
        begin("close");
        chanos_ump_close(c);
        done();
        hostile_close(&h);
    }
}

/* ---- descriptors closed, replaced, shut down ---- */

/* test_replaced: the hostile puts a pipe in place of its data socket, or
 * of its space socket (which closes the socket: the victim's end reads end
 * of file). A waiting receive, or a send waiting for space, ends with
 * CHANOS_ERR_PEER_DIED: the peer did not close in order. */
static void test_replaced(void)
{
    for (int k = 0; k < 2; k++) {
        struct hostile h;
        chanos_ump *c;
        const void *m;
        size_t n;
        uint8_t b[8] = {0};
        hostile_creator(&h, 0, &c);
        int p[2];
        CHECK(pipe(p) == 0);
        CHECK(dup2(p[0], h.own[k]) == h.own[k]);
        close(p[0]);
        close(p[1]);
        int64_t t0 = now_ms();
        begin(k == 0 ? "recv, data socket replaced" : "send, space socket replaced");
        if (k == 0) {
            CHECK_EQ(chanos_ump_recv(c, &m, &n, 3000), CHANOS_ERR_PEER_DIED);
        } else {
            int err;
            while ((err = chanos_ump_try_send(c, b, sizeof b)) == 0)
                ;
            CHECK_EQ(err, CHANOS_ERR_PEER_DIED);
            CHECK_EQ(chanos_ump_send(c, b, sizeof b, 3000), CHANOS_ERR_PEER_DIED);
        }
        CHECK(now_ms() - t0 < 1000);
        CHECK_EQ(chanos_ump_err(c), CHANOS_ERR_PEER_DIED);
        chanos_ump_close(c);
        done();
        hostile_close(&h);
    }
}

/* test_shutdown: a forked hostile shuts down the write side of its data
 * socket (then of its space socket) while the victim waits: the wait ends
 * with CHANOS_ERR_PEER_DIED soon after, though every descriptor stays
 * open. */
static void test_shutdown(void)
{
    for (int k = 0; k < 2; k++) {
        struct hostile h;
        chanos_ump *c;
        const void *m;
        size_t n;
        uint8_t b[8] = {0};
        hostile_creator(&h, 1, &c);
        if (k == 1) { /* the send below waits for space */
            while (chanos_ump_try_send(c, b, sizeof b) == 0)
                ;
        }
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            usleep(100 * 1000);
            shutdown(h.own[k], SHUT_WR);
            pause();
            _exit(0);
        }
        int64_t t0 = now_ms();
        begin(k == 0 ? "recv, data socket shut down" : "send, space socket shut down");
        if (k == 0)
            CHECK_EQ(chanos_ump_recv(c, &m, &n, 3000), CHANOS_ERR_PEER_DIED);
        else
            CHECK_EQ(chanos_ump_send(c, b, sizeof b, 3000), CHANOS_ERR_PEER_DIED);
        done();
        int64_t took = now_ms() - t0;
        CHECK(took >= 50 && took < 1000);
        kill(pid, SIGKILL);
        CHECK(waitpid(pid, NULL, 0) == pid);
        chanos_ump_close(c);
        hostile_close(&h);
    }
}

/* test_peer_closed: a forked peer writes its close word and closes its
 * data socket while the victim sleeps in a receive: the end of file wakes
 * the victim, which ends with CHANOS_ERR_CLOSED though the liveness socket
 * stays open. */
static void test_peer_closed(void)
{
    struct hostile h;
    chanos_ump *c;
    const void *m;
    size_t n;
    hostile_creator(&h, 0, &c);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        usleep(100 * 1000);
        /* side 0's close word: closed, at position 0 (nothing sent) */
        atomic_store((_Atomic uint64_t *)(void *)(h.mem + 128), 1ull << 63);
        close(h.own[0]);
        pause();
        _exit(0);
    }
    close(h.own[0]); /* the child's is the last */
    h.own[0] = -1;
    int64_t t0 = now_ms();
    begin("recv while the peer closes");
    CHECK_EQ(chanos_ump_recv(c, &m, &n, 3000), CHANOS_ERR_CLOSED);
    done();
    int64_t took = now_ms() - t0;
    CHECK(took >= 50 && took < 1000);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    chanos_ump_close(c);
    hostile_close(&h);
}

/* ---- bad descriptors in the handshake ---- */

/* attach_bad sends a hello with version, nfield and the n descriptors fds
 * and checks that the attacher refuses it with CHANOS_ERR_PROTOCOL, and
 * says so, within the timeout. */
static void attach_bad(const char *what, uint32_t version, uint32_t nfield, const int *fds, int n)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    send_hello(sv[0], version, nfield, fds, n);
    chanos_ump *c = NULL;
    check_context = what;
    begin(what);
    CHECK_EQ(chanos_ump_attach(sv[1], &opts, 1000, &c), CHANOS_ERR_PROTOCOL);
    done();
    CHECK(c == NULL);
    CHECK_EQ(read_ack(sv[0]), 1);
    check_context = NULL;
    close(sv[0]);
}

static void test_bad_handshake(void)
{
    struct chanos_ump_files f;
    CHECK_EQ(chanos_ump_files_create(&opts, &f), 0);
    int mem = f.mem, data = f.wake[1][0], space = f.wake[1][1], caps = f.caps[1];
    int ev1 = eventfd(0, EFD_CLOEXEC), ev2 = eventfd(0, EFD_CLOEXEC);
    int p[2], dg[2], live[2];
    CHECK(pipe(p) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, live) == 0);
    int inet = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(ev1 >= 0 && ev2 >= 0 && inet >= 0);

    attach_bad("eventfds", CHANOS_UMP_VERSION, 4, (int[]){mem, ev1, ev2, caps}, 4);
    attach_bad("a pipe", CHANOS_UMP_VERSION, 4, (int[]){mem, p[0], p[1], caps}, 4);
    attach_bad("the same socket twice", CHANOS_UMP_VERSION, 4, (int[]){mem, data, data, caps}, 4);
    attach_bad("datagram sockets", CHANOS_UMP_VERSION, 4, (int[]){mem, dg[0], dg[1], caps}, 4);
    attach_bad("a seqpacket socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, live[0], caps}, 4);
    attach_bad("a stream socket as the caps socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, space, p[0]}, 4);
    attach_bad("a wake-up socket as the caps socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, space, data}, 4);
    attach_bad("a datagram caps socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, space, dg[0]}, 4);
    attach_bad("an inet socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, inet, caps}, 4);
    attach_bad("a memfd as a socket", CHANOS_UMP_VERSION, 4, (int[]){mem, data, mem, caps}, 4);
    attach_bad("two descriptors", CHANOS_UMP_VERSION, 3, (int[]){mem, data}, 2);
    attach_bad("three descriptors", CHANOS_UMP_VERSION, 4, (int[]){mem, data, space}, 3);
    attach_bad("five descriptors", CHANOS_UMP_VERSION, 4, (int[]){mem, data, space, caps, ev1}, 5);
    attach_bad("version 1's five", 1, 5, (int[]){mem, ev1, ev2, ev1, ev2}, 5);
    attach_bad("version 1", 1, 3, (int[]){mem, data, space}, 3);
    attach_bad("version 2", 2, 3, (int[]){mem, data, space}, 3);
    attach_bad("a count of 5", CHANOS_UMP_VERSION, 5, (int[]){mem, data, space, caps}, 4);

    /* The attacher's own liveness socket as a wake-up socket: the hello
     * carries the end it receives on. */
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    send_hello(sv[0], CHANOS_UMP_VERSION, 4, (int[]){mem, data, sv[1], caps}, 4);
    chanos_ump *c = NULL;
    begin("the liveness socket as a wake-up socket");
    CHECK_EQ(chanos_ump_attach(sv[1], &opts, 1000, &c), CHANOS_ERR_PROTOCOL);
    done();
    CHECK_EQ(read_ack(sv[0]), 1);
    close(sv[0]);

    /* A socket that is not connected passes the checks, but poll reports
     * it ready and every receive fails (EINVAL): the connection ends, it
     * does not spin. */
    int lone = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(lone >= 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    send_hello(sv[0], CHANOS_UMP_VERSION, 4, (int[]){mem, lone, space, caps}, 4);
    begin("attach with an unconnected data socket");
    CHECK_EQ(chanos_ump_attach(sv[1], &opts, 1000, &c), 0);
    done();
    CHECK_EQ(read_ack(sv[0]), 0);
    const void *m;
    size_t n;
    int64_t t0 = now_ms();
    begin("recv on an unconnected data socket");
    CHECK_EQ(chanos_ump_recv(c, &m, &n, 3000), CHANOS_ERR_PEER_DIED);
    done();
    CHECK(now_ms() - t0 < 1000);
    chanos_ump_close(c);
    close(sv[0]);
    close(lone);

    close(ev1);
    close(ev2);
    close(p[0]);
    close(p[1]);
    close(dg[0]);
    close(dg[1]);
    close(live[0]);
    close(live[1]);
    close(inet);
    chanos_ump_files_close(&f);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    int fds = count_fds();
    test_flags_and_floods();
    test_replaced();
    test_shutdown();
    test_peer_closed();
    test_bad_handshake();
    CHECK_EQ(count_fds(), fds);
    return check_done("test_ump_hostile");
}
