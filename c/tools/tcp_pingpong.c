/*
 * chanos-tcp-pingpong: the C baseline of `chanos bench net` (bench/net.go),
 * a raw TCP ping-pong of 8-byte messages with TCP_NODELAY on both sides.
 *
 *   chanos-tcp-pingpong serve ADDR
 *   chanos-tcp-pingpong client ADDR PORT ITERS
 *
 * The server listens on ADDR (an IPv4 address) at a port the kernel picks,
 * prints "ready PORT" on standard output, and echoes every 8 bytes it
 * reads on each connection it accepts, one connection at a time, until
 * standard input closes. The client connects, makes up to 1000 untimed
 * round trips, then ITERS timed one by one (8 bytes sent, each after the
 * echo of the previous one), and prints one JSON object: iters,
 * rtt_ns_p50, rtt_ns_p99, rtt_ns_mean and total_ns (the mean is total_ns
 * over iters, as in the Go cases).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG 8

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int full_io(int fd, unsigned char *b, size_t n, int rd)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = rd ? read(fd, b + done, n - done) : write(fd, b + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

static int nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int parse_addr(const char *s, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, s, &sa->sin_addr) == 1 ? 0 : -1;
}

static int serve(const char *addr)
{
    struct sockaddr_in sa;
    if (parse_addr(addr, 0, &sa) < 0) {
        fprintf(stderr, "chanos-tcp-pingpong: bad address %s\n", addr);
        return 2;
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 4) < 0) {
        perror("chanos-tcp-pingpong: listen");
        return 1;
    }
    socklen_t len = sizeof sa;
    if (getsockname(l, (struct sockaddr *)&sa, &len) < 0) {
        perror("chanos-tcp-pingpong: getsockname");
        return 1;
    }
    printf("ready %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    for (;;) {
        /* Standard input closing is the order to stop. */
        struct pollfd p[2] = {{.fd = l, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("chanos-tcp-pingpong: poll");
            return 1;
        }
        if (p[1].revents) {
            char c;
            if (read(0, &c, 1) <= 0)
                return 0;
        }
        if (!(p[0].revents & POLLIN))
            continue;
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        if (nodelay(c) < 0)
            perror("chanos-tcp-pingpong: TCP_NODELAY");
        unsigned char b[MSG];
        while (full_io(c, b, MSG, 1) == 0 && full_io(c, b, MSG, 0) == 0)
            ;
        close(c);
    }
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* round_trip sends i in 8 bytes and checks its echo. */
static int round_trip(int fd, long i)
{
    unsigned char b[MSG] = {0};
    memcpy(b, &i, sizeof i);
    if (full_io(fd, b, MSG, 0) < 0 || full_io(fd, b, MSG, 1) < 0) {
        perror("chanos-tcp-pingpong: round trip");
        return -1;
    }
    long got;
    memcpy(&got, b, sizeof got);
    if (got != i) {
        fprintf(stderr, "chanos-tcp-pingpong: echo %ld, want %ld\n", got, i);
        return -1;
    }
    return 0;
}

static int client(const char *addr, int port, long iters)
{
    struct sockaddr_in sa;
    if (parse_addr(addr, port, &sa) < 0 || iters < 1) {
        fprintf(stderr, "chanos-tcp-pingpong: bad address %s or iterations %ld\n", addr, iters);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || nodelay(fd) < 0) {
        perror("chanos-tcp-pingpong: connect");
        return 1;
    }
    int64_t *s = malloc((size_t)iters * sizeof *s);
    if (!s) {
        perror("chanos-tcp-pingpong: malloc");
        return 1;
    }
    /* As many untimed round trips as the Go cases make (up to 1000). */
    for (long i = 0; i < iters && i < 1000; i++) {
        if (round_trip(fd, i) < 0) {
            free(s);
            return 1;
        }
    }
    int64_t t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        int64_t t = now_ns();
        if (round_trip(fd, i) < 0) {
            free(s);
            return 1;
        }
        s[i] = now_ns() - t;
    }
    int64_t total = now_ns() - t0;
    close(fd);
    qsort(s, (size_t)iters, sizeof *s, cmp64);
    printf("{\"iters\":%ld,\"rtt_ns_p50\":%lld,\"rtt_ns_p99\":%lld,\"rtt_ns_mean\":%.1f,\"total_ns\":%lld}\n",
           iters, (long long)s[iters / 2], (long long)s[iters * 99 / 100], (double)total / (double)iters,
           (long long)total);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2]);
    if (argc == 5 && strcmp(argv[1], "client") == 0)
        return client(argv[2], atoi(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: chanos-tcp-pingpong serve ADDR\n"
                    "       chanos-tcp-pingpong client ADDR PORT ITERS\n");
    return 2;
}
