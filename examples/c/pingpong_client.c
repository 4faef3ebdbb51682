/*
 * pingpong_client: a C domain that connects to a pingpong service by name
 * and exchanges messages and rpcs with it, as the Go
 * examples/pingpong/client does: n pings (each answered by a pong), n echo
 * calls, then a 64 KiB bounce. Like the Go client, it times every round
 * trip and prints the median and 99th percentile of each phase.
 *
 *   pingpong_client [-name NAME] [-n N] [-wait MS] [-ref-stdin]
 *
 * With -ref-stdin it binds not by name but by the iref on its first line
 * of input (MACHINE:EXPORT:TOKEN, as chanos_iref_format writes it): the
 * capability that a private export needs (docs/security.md). The iref is
 * read from stdin rather than taken as an argument because anyone on the
 * machine can read a command line. The monitor directory comes from
 * $CHANOS_DIR as usual. It prints
 * "connected" once bound, and a line per phase; it exits 0 if every answer
 * was right.
 */
#include <chanos.h>

#include "pingpong.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALL_TIMEOUT_MS 10000

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* report prints a phase's total time and the median and 99th percentile of
 * its round trips (rtts, n of them, sorted here), as the Go client does. */
static void report(const char *what, const char *unit, long n, int64_t total,
                   int64_t *rtts)
{
    qsort(rtts, (size_t)n, sizeof *rtts, cmp_i64);
    printf("%s: %ld %s in %.3f s; round trip p50 %.2f us, p99 %.2f us\n", what,
           n, unit, (double)total / 1e9, (double)rtts[n / 2] / 1e3,
           (double)rtts[n * 99 / 100] / 1e3);
}

static uint8_t payload[PINGPONG_BOUNCE_PAYLOAD_MAX];

static int fail(const char *what, int rc)
{
    fprintf(stderr, "pingpong_client: %s: %s\n", what, chanos_strerror(rc));
    return 1;
}

static int run(chanos_conn *c, uint32_t me, long n, int64_t *rtts)
{
    struct chanos_frame f;
    int64_t t0, prev;
    int rc;

    /* messages: each ping is answered by a pong with the same numbers;
     * each round trip is timed with one clock read, taken right after the
     * ping is sent, while the pong is on its way (read between a pong and
     * the next ping, the clock would lengthen the round trips it times) */
    int64_t sent;
    t0 = sent = now_ns();
    for (long i = 0; i < n; i++) {
        struct pingpong_ping p = { me, (uint32_t)i };
        struct pingpong_pong q;

        if ((rc = pingpong_ping_send(c, &p, CALL_TIMEOUT_MS)) != 0)
            return fail("send ping", rc);
        int64_t t = now_ns();
        if (i > 0)
            rtts[i - 1] = t - sent;
        sent = t;
        if ((rc = chanos_conn_recv(c, CALL_TIMEOUT_MS, &f)) != 0)
            return fail("receive pong", rc);
        if ((rc = pingpong_pong_decode(&q, f.data, f.len, NULL, 0)) != 0)
            return fail("decode pong", rc);
        if (q.client_id != me || q.msg_id != (uint32_t)i) {
            fprintf(stderr, "pingpong_client: ping %ld answered by %u/%u\n",
                    i, q.client_id, q.msg_id);
            return 1;
        }
    }
    prev = now_ns();
    rtts[n - 1] = prev - sent;
    report("ping/pong messages", "round trips", n, prev - t0, rtts);

    /* rpcs: echo returns its argument */
    t0 = prev = now_ns();
    for (long i = 0; i < n; i++) {
        struct pingpong_echo_call call = { (uint64_t)i };
        struct pingpong_echo_reply r;

        if ((rc = pingpong_echo(c, &call, &r, CALL_TIMEOUT_MS)) != 0)
            return fail("echo", rc);
        int64_t t = now_ns();
        rtts[i] = t - prev;
        prev = t;
        if (r.result != (uint64_t)i) {
            fprintf(stderr, "pingpong_client: echo %ld returned %" PRIu64 "\n",
                    i, r.result);
            return 1;
        }
    }
    report("echo rpcs", "calls", n, prev - t0, rtts);

    /* bounce: a 64 KiB payload comes back intact */
    {
        struct pingpong_bounce_call call;
        struct pingpong_bounce_reply r;

        for (size_t i = 0; i < sizeof payload; i++)
            payload[i] = (uint8_t)i;
        call.payload.ptr = payload;
        call.payload.len = sizeof payload;
        if ((rc = pingpong_bounce(c, &call, &r, CALL_TIMEOUT_MS)) != 0)
            return fail("bounce", rc);
        if (r.reply.len != sizeof payload ||
            memcmp(r.reply.ptr, payload, sizeof payload) != 0) {
            fprintf(stderr, "pingpong_client: bounce returned a different "
                            "payload\n");
            return 1;
        }
        printf("bounce: 64 KiB payload returned intact\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *name = "pingsvc";
    long n = 1000;
    int wait_ms = 10000;
    bool by_ref = false;
    struct chanos_iref ref;
    char line[128];
    struct chanos_join_opts jo = { 0 };
    chanos_domain *d;
    chanos_conn *c;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-wait") == 0 && i + 1 < argc) {
            wait_ms = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-ref-stdin") == 0) {
            by_ref = true;
        } else {
            fprintf(stderr,
                    "usage: %s [-name NAME] [-n N] [-wait MS] [-ref-stdin]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n < 1) {
        fprintf(stderr, "pingpong_client: -n must be at least 1\n");
        return 2;
    }
    if (by_ref) {
        if (fgets(line, sizeof line, stdin) == NULL) {
            fprintf(stderr, "pingpong_client: no iref on stdin\n");
            return 1;
        }
        line[strcspn(line, "\n")] = '\0';
        if (chanos_iref_parse(line, &ref) != 0) {
            fprintf(stderr, "pingpong_client: not an iref: %s\n", line);
            return 1;
        }
        name = "(by iref)";
    }
    jo.program = "pingpong_client (C)";
    rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    if (by_ref)
        rc = chanos_connect_ref_iface(d, &ref, &pingpong_interface, wait_ms, &c);
    else
        rc = chanos_connect_iface(d, name, &pingpong_interface, wait_ms, &c);
    if (rc != 0) {
        fprintf(stderr, "pingpong_client: connect %s: %s\n", name,
                chanos_strerror(rc));
        if (rc == CHANOS_ERR_MISMATCH)
            fprintf(stderr, "pingpong_client: %s\n", chanos_domain_error(d));
        chanos_domain_close(d);
        return 1;
    }
    printf("connected to %s (domain %" PRIu64 ")\n", name,
           chanos_domain_id(d));
    fflush(stdout);
    int64_t *rtts = malloc((size_t)n * sizeof *rtts);
    if (!rtts) {
        fprintf(stderr, "pingpong_client: out of memory for %ld round trips\n", n);
        chanos_conn_close(c);
        chanos_domain_close(d);
        return 1;
    }
    /* Touch every page of rtts now, so that a page fault every 512 round
     * trips does not land in the timed loop (about 5 ms per million round
     * trips here). Not with zeros: malloc and a memset of zeros may become
     * calloc, which leaves the pages unmapped. */
    memset(rtts, 0xff, (size_t)n * sizeof *rtts);
    rc = run(c, (uint32_t)chanos_domain_id(d), n, rtts);
    free(rtts);
    chanos_conn_close(c);
    chanos_domain_close(d);
    return rc;
}
