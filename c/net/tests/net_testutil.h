/*
 * net_testutil.h: what the tests of libchanos_net that stream through a
 * cutting relay share: TCP on loopback for the relay, streams of numbered
 * frames both ways at once, checked exactly once and in order, and the
 * choice of tests by name. A test defines FRAME_FILL(i) (the filler bytes
 * of frame i) and FRAME_MAX (the largest frame) before including it, after
 * check.h.
 */
#ifndef CHANOS_NET_TESTUTIL_H
#define CHANOS_NET_TESTUTIL_H

#include <chanos_net.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Under ThreadSanitizer every TLS handshake, and so every resume, is many
 * times slower: a quarter of the frames still makes hundreds of cuts. */
#ifdef __SANITIZE_THREAD__
#define STREAM_DIVISOR 4
#else
#define STREAM_DIVISOR 1
#endif

/* ---- TCP on loopback, for the relay ---- */

/* rst closes fd with a reset rather than an orderly end. */
static void rst(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static int tcp_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0)
        return -1;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int tcp_dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- streams ---- */

/* frame_make writes frame i of a stream: a message whose payload is i,
 * then FRAME_FILL(i) bytes that follow each other by 1 from i. */
static size_t frame_make(uint8_t *buf, uint64_t i)
{
    size_t fill = FRAME_FILL(i);
    size_t n = CHANOS_HEADER_SIZE + 8 + fill;
    struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1};
    chanos_hdr_put(buf, &h);
    chanos_store_u64(buf + CHANOS_HEADER_SIZE, i);
    for (size_t k = 0; k < fill; k++)
        buf[CHANOS_HEADER_SIZE + 8 + k] = (uint8_t)(i + k);
    return n;
}

struct side {
    chanos_net_link *c;
    uint64_t n;
    int send_rc;
    uint64_t got;
};

static void *send_all(void *arg)
{
    struct side *s = arg;
    uint8_t *buf = malloc(FRAME_MAX);
    for (uint64_t i = 0; buf && i < s->n; i++) {
        size_t len = frame_make(buf, i);
        s->send_rc = chanos_net_send(s->c, buf, len, 60000);
        if (s->send_rc != 0)
            break;
    }
    free(buf);
    return NULL;
}

static void *recv_all(void *arg)
{
    struct side *s = arg;
    uint8_t *want = malloc(FRAME_MAX);
    for (; want && s->got < s->n; s->got++) {
        const void *f;
        size_t len;
        int r = chanos_net_recv(s->c, &f, &len, 60000);
        if (r != 0) {
            fprintf(stderr, "recv %llu: %s\n", (unsigned long long)s->got,
                    chanos_net_strerror(r));
            break;
        }
        size_t wn = frame_make(want, s->got);
        if (len != wn || memcmp(f, want, len) != 0) {
            fprintf(stderr, "frame %llu is wrong\n",
                    (unsigned long long)s->got);
            break;
        }
    }
    free(want);
    return NULL;
}

/* stream sends n frames each way at once and checks them: exactly once,
 * in order, intact. */
static void stream(chanos_net_link *a, chanos_net_link *b, uint64_t n)
{
    struct side sa = {a, n, 0, 0}, sb = {b, n, 0, 0};
    pthread_t t[4];
    pthread_create(&t[0], NULL, send_all, &sa);
    pthread_create(&t[1], NULL, send_all, &sb);
    pthread_create(&t[2], NULL, recv_all, &sa);
    pthread_create(&t[3], NULL, recv_all, &sb);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(sa.send_rc, 0);
    CHECK_EQ(sb.send_rc, 0);
    CHECK_EQ(sa.got, n);
    CHECK_EQ(sb.got, n);
}

/* Without arguments every test runs; with some, those named. */
static bool want(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

#endif
