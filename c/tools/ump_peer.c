/*
 * chanos-ump-peer: the C side of the Go tests' cross-language ump exchange.
 *
 *   chanos-ump-peer exchange creator|attacher COUNT MAXMSG [SLOTS BULK]
 *   chanos-ump-peer echo creator|attacher MAXMSG
 *
 * The connected Unix socket is descriptor 3. exchange sends COUNT messages
 * of the sequence in exchange.h and checks the COUNT it receives, driving
 * both directions at once from one event loop with the try variants and
 * chanos_ump_fd. Then the creator closes; the attacher waits for the
 * creator's close (CHANOS_ERR_CLOSED) before closing. SLOTS and BULK are
 * the ring_slots and bulk_size options (0: the defaults; BULK -1: no bulk
 * region); only a creator uses them. echo returns every message until the
 * peer closes. Exit status 0 means success.
 */
#include "chanos.h"
#include "exchange.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SOCK_FD 3

static int die(const char *what, int err)
{
    fprintf(stderr, "chanos-ump-peer: %s: %s\n", what, chanos_ump_strerror(err));
    return 1;
}

static int connect_side(const char *side, uint32_t max, uint32_t slots,
                        int32_t bulk, chanos_ump **c)
{
    struct chanos_ump_options o = {.max_msg = max, .ring_slots = slots, .bulk_size = bulk};
    if (strcmp(side, "creator") == 0)
        return chanos_ump_create(SOCK_FD, &o, 10000, c);
    if (strcmp(side, "attacher") == 0)
        return chanos_ump_attach(SOCK_FD, &o, 10000, c);
    return -22; /* -EINVAL */
}

static int exchange(chanos_ump *c, int creator, uint64_t count)
{
    size_t max = chanos_ump_max_msg(c);
    int out = creator ? 0 : 1, in = 1 - out;
    uint8_t *msg = malloc(max ? max : 1);
    if (!msg)
        return die("malloc", -12);
    uint64_t sent = 0, recvd = 0;
    size_t len = xsize(0, out, max);
    for (size_t j = 0; j < len; j++)
        msg[j] = xbyte(0, out, j);
    while (sent < count || recvd < count) {
        int progress = 0;
        if (sent < count) {
            int err = chanos_ump_try_send(c, msg, len);
            if (err == 0) {
                progress = 1;
                if (++sent < count) {
                    len = xsize(sent, out, max);
                    for (size_t j = 0; j < len; j++)
                        msg[j] = xbyte(sent, out, j);
                }
            } else if (err != CHANOS_ERR_AGAIN) {
                return die("send", err);
            }
        }
        if (recvd < count) {
            const void *m;
            size_t n;
            int err = chanos_ump_try_recv(c, &m, &n);
            if (err == 0) {
                progress = 1;
                size_t want = xsize(recvd, in, max);
                if (n != want) {
                    fprintf(stderr, "chanos-ump-peer: message %llu: %zu bytes, want %zu\n",
                            (unsigned long long)recvd, n, want);
                    return 1;
                }
                for (size_t j = 0; j < n; j++)
                    if (((const uint8_t *)m)[j] != xbyte(recvd, in, j)) {
                        fprintf(stderr, "chanos-ump-peer: message %llu: byte %zu differs\n",
                                (unsigned long long)recvd, j);
                        return 1;
                    }
                recvd++;
            } else if (err != CHANOS_ERR_AGAIN) {
                return die("receive", err);
            }
        }
        if (!progress) {
            struct pollfd p = {.fd = chanos_ump_fd(c), .events = POLLIN};
            if (poll(&p, 1, 10000) == 0) {
                fprintf(stderr, "chanos-ump-peer: stalled at sent=%llu received=%llu\n",
                        (unsigned long long)sent, (unsigned long long)recvd);
                return 1;
            }
        }
    }
    free(msg);
    if (!creator) {
        const void *m;
        size_t n;
        int err = chanos_ump_recv(c, &m, &n, 10000);
        if (err != CHANOS_ERR_CLOSED)
            return die("waiting for the creator's close", err ? err : -5);
    }
    return 0;
}

static int echo(chanos_ump *c)
{
    for (;;) {
        const void *m;
        size_t n;
        int err = chanos_ump_recv(c, &m, &n, -1);
        if (err == CHANOS_ERR_CLOSED)
            return 0;
        if (err < 0)
            return die("receive", err);
        if ((err = chanos_ump_send(c, m, n, -1)) < 0)
            return die("send", err);
    }
}

int main(int argc, char **argv)
{
    chanos_ump *c = NULL;
    int rc;
    if ((argc == 5 || argc == 7) && strcmp(argv[1], "exchange") == 0) {
        uint32_t slots = argc == 7 ? (uint32_t)strtoul(argv[5], NULL, 0) : 0;
        int32_t bulk = argc == 7 ? (int32_t)strtol(argv[6], NULL, 0) : 0;
        int err = connect_side(argv[2], (uint32_t)strtoul(argv[4], NULL, 0), slots, bulk, &c);
        if (err < 0)
            return die("connect", err);
        rc = exchange(c, strcmp(argv[2], "creator") == 0, strtoull(argv[3], NULL, 0));
    } else if (argc == 4 && strcmp(argv[1], "echo") == 0) {
        int err = connect_side(argv[2], (uint32_t)strtoul(argv[3], NULL, 0), 0, 0, &c);
        if (err < 0)
            return die("connect", err);
        rc = echo(c);
    } else {
        fprintf(stderr, "usage: chanos-ump-peer exchange creator|attacher COUNT MAXMSG [SLOTS BULK]\n"
                        "       chanos-ump-peer echo creator|attacher MAXMSG\n");
        return 2;
    }
    chanos_ump_close(c);
    return rc;
}
