/* ump_testutil.h: helpers shared by the ump tests. */
#ifndef CHANOS_UMP_TESTUTIL_H
#define CHANOS_UMP_TESTUTIL_H

#include "check.h"

#include <chanos.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* pattern fills b with the content of message i of a test stream. */
static inline void pattern(uint8_t *b, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        b[j] = (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

static inline int pattern_ok(const void *m, size_t n, uint64_t i)
{
    const uint8_t *b = m;
    for (size_t j = 0; j < n; j++)
        if (b[j] != (uint8_t)(i * 31 + j * 7 + (j >> 8)))
            return 0;
    return 1;
}

static inline int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* split_files gives the attacher its descriptors out of f, as the monitor
 * hands each side its own: a duplicate of the memfd, and the attacher's
 * ends of the wake-up and caps sockets, moved out of f. */
static inline int split_files(struct chanos_ump_files *f, struct chanos_ump_files *g)
{
    g->mem = fcntl(f->mem, F_DUPFD_CLOEXEC, 0);
    for (int k = 0; k < 2; k++) {
        g->wake[CHANOS_UMP_CREATOR][k] = -1;
        g->wake[CHANOS_UMP_ATTACHER][k] = f->wake[CHANOS_UMP_ATTACHER][k];
        f->wake[CHANOS_UMP_ATTACHER][k] = -1;
    }
    g->caps[CHANOS_UMP_CREATOR] = -1;
    g->caps[CHANOS_UMP_ATTACHER] = f->caps[CHANOS_UMP_ATTACHER];
    f->caps[CHANOS_UMP_ATTACHER] = -1;
    return g->mem >= 0 ? 0 : -1;
}

/* pair opens both sides of a new ring pair in this process. */
static inline void pair(const struct chanos_ump_options *o, chanos_ump **a, chanos_ump **b)
{
    struct chanos_ump_files f, g;
    int sv[2];
    *a = *b = NULL;
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_EQ(chanos_ump_files_create(o, &f), 0);
    CHECK(split_files(&f, &g) == 0);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_CREATOR, &f, sv[0], o, a), 0);
    CHECK_EQ(chanos_ump_open(CHANOS_UMP_ATTACHER, &g, sv[1], o, b), 0);
}

/* conn_pair_of connects *srv and *cli, libchanos connections, over a
 * fresh ring pair for frames of up to max_msg bytes. */
static inline void conn_pair_of(uint32_t max_msg, chanos_conn **srv,
                                chanos_conn **cli)
{
    struct chanos_ump_options o = { 0 };
    chanos_ump *ua, *ub;

    o.max_msg = max_msg;
    pair(&o, &ua, &ub);
    CHECK_EQ(chanos_conn_new(ua, srv), 0);
    CHECK_EQ(chanos_conn_new(ub, cli), 0);
}

#endif
