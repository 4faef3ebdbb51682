/*
 * chanos-caps-bench: the C side of `chanos bench caps` (bench/caps.go):
 * an event ping-pong between two C processes over chanos's event objects,
 * for the case event-wake/chanos-c, and over bare eventfds, its baseline
 * event-wake/eventfd-c. Descriptor 3 is the ping event, 4 the pong event;
 * MODE is "parked" (chanos_event_wait sleeps in poll; a bare eventfd is
 * read with a blocking read(2)) or "spin" (chanos_event_wait is called
 * with a timeout of 0, or a non-blocking read(2) made, until a count
 * comes).
 *
 *   chanos-caps-bench event-peer MODE N
 *       waits on ping and signals pong, N times
 *   chanos-caps-bench event-client MODE WARMUP ITERS
 *       signals ping and waits on pong, WARMUP times untimed and ITERS
 *       times timed, and prints {"iters":…,"rtt_ns_p50":…,"rtt_ns_p99":…,
 *       "rtt_ns_mean":…}
 *   chanos-caps-bench eventfd-peer MODE N
 *   chanos-caps-bench eventfd-client MODE WARMUP ITERS
 *       the same with write(2) and read(2) on the bare eventfds, whose
 *       O_NONBLOCK flag is made to fit MODE first
 *
 * Exit status 0 on success; 1 on failure, with the reason on stderr.
 */
#include <chanos.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PING = 3, PONG = 4 };

static int spin, raw;

static int wait_event(int fd)
{
    uint64_t n;
    int rc;

    if (raw) {
        ssize_t r;

        do
            r = read(fd, &n, sizeof n);
        while (r < 0 && (errno == EAGAIN || errno == EINTR));
        return r == (ssize_t)sizeof n ? 0 : r < 0 ? -errno : -EIO;
    }
    do
        rc = chanos_event_wait(fd, spin ? 0 : -1, &n);
    while (rc == CHANOS_ERR_AGAIN);
    return rc;
}

static int signal_event(int fd)
{
    uint64_t one = 1;

    if (raw) {
        ssize_t r = write(fd, &one, sizeof one);

        return r == (ssize_t)sizeof one ? 0 : r < 0 ? -errno : -EIO;
    }
    return chanos_event_signal(fd, 1);
}

/* raw_flags makes the bare eventfds blocking (parked) or non-blocking
 * (spin), whatever they came as. */
static int raw_flags(void)
{
    for (int fd = PING; fd <= PONG; fd++) {
        int fl = fcntl(fd, F_GETFL);

        if (fl < 0 || fcntl(fd, F_SETFL, spin ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0)
            return -errno;
    }
    return 0;
}

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "chanos-caps-bench: %s: %s (%d)\n", what, chanos_strerror(rc), rc);
    return 1;
}

static int peer(long n)
{
    int rc;

    for (long i = 0; i < n; i++) {
        if ((rc = wait_event(PING)) != 0)
            return fail("wait on ping", rc);
        if ((rc = signal_event(PONG)) != 0)
            return fail("signal pong", rc);
    }
    return 0;
}

static int trip(void)
{
    int rc = signal_event(PING);

    return rc != 0 ? rc : wait_event(PONG);
}

static int client(long warmup, long iters)
{
    int64_t *s = malloc(sizeof *s * (size_t)iters), t0, prev;
    int rc;

    if (s == NULL)
        return fail("samples", -1);
    for (long i = 0; i < warmup; i++)
        if ((rc = trip()) != 0)
            return free(s), fail("warm-up round trip", rc);
    t0 = prev = now_ns();
    for (long i = 0; i < iters; i++) {
        int64_t t;

        if ((rc = trip()) != 0)
            return free(s), fail("round trip", rc);
        t = now_ns();
        s[i] = t - prev;
        prev = t;
    }
    qsort(s, (size_t)iters, sizeof *s, cmp);
    printf("{\"iters\":%ld,\"rtt_ns_p50\":%lld,\"rtt_ns_p99\":%lld,\"rtt_ns_mean\":%.1f}\n",
           iters, (long long)s[iters / 2], (long long)s[iters * 99 / 100],
           (double)(prev - t0) / (double)iters);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *role = argc >= 2 ? argv[1] : "";
    int rc;

    if (argc >= 3)
        spin = strcmp(argv[2], "spin") == 0;
    if (strncmp(role, "eventfd-", 8) == 0) {
        raw = 1;
        role += 8;
    } else if (strncmp(role, "event-", 6) == 0) {
        role += 6;
    } else {
        role = "";
    }
    int is_peer = argc == 4 && strcmp(role, "peer") == 0;
    int is_client = argc == 5 && strcmp(role, "client") == 0 && atol(argv[4]) > 0;

    if (raw && (is_peer || is_client) && (rc = raw_flags()) != 0)
        return fail("the eventfds' flags", rc);
    if (is_peer)
        return peer(atol(argv[3]));
    if (is_client)
        return client(atol(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: chanos-caps-bench event-peer|eventfd-peer MODE N | event-client|eventfd-client MODE WARMUP ITERS\n");
    return 2;
}
