/*
 * chanos-caps-peer: the C side of the tests of descriptors in messages
 * between Go and C domains (tests/interop), over the interface files
 * (testdata/caps/files.if). The monitor directory comes from $CHANOS_DIR.
 *
 *   chanos-caps-peer serve NAME      exports files under NAME, prints
 *                                    "serving NAME" and serves one
 *                                    connection until it ends: share
 *                                    writes the tag into the descriptor,
 *                                    stat answers its size, dup hands it
 *                                    back, given away, ring signals the
 *                                    event object it is sent, hand opens
 *                                    the pingpong endpoint it is given,
 *                                    which it serves (echo answers its
 *                                    argument) once the files connection
 *                                    has ended
 *   chanos-caps-peer call NAME FILE  connects to NAME and prints "size N"
 *                                    (stat of FILE), "dup size N" (stat,
 *                                    here, of what dup hands back) and
 *                                    "share TEXT" (what the server wrote
 *                                    into a pipe it was given away, read
 *                                    to its end) and "ring N" (the count
 *                                    of an event object it sent the
 *                                    server to signal twice) and
 *                                    "endpoint echo N" (an echo over a
 *                                    pingpong connection whose endpoint
 *                                    it handed the server)
 *
 * It prints "leaked fds N" last: how many more descriptors it holds than
 * when it started, so that a test sees that none leaked. Exit status 0 on
 * success; 1 on failure, with the reason on stderr.
 */
#include "files.h"
#include "pingpong.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CALL_MS 10000

static int fail(const char *what, int rc)
{
    fprintf(stderr, "chanos-caps-peer: %s: %s (%d)\n", what, chanos_strerror(rc), rc);
    return 1;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own */
}

static int on_share(void *ctx, chanos_conn *c, const struct files_share *m)
{
    (void)ctx;
    (void)c;
    dprintf(m->fd, "%" PRIu64, m->tag);
    close(m->fd); /* the message's descriptor is ours */
    return 0;
}

static int on_stat(void *ctx, chanos_conn *c, const struct files_stat_call *in,
                   struct files_stat_reply *out)
{
    struct stat st;
    int rc = fstat(in->fd, &st);

    (void)ctx;
    (void)c;
    close(in->fd);
    if (rc != 0)
        return CHANOS_CODE_INVALID_ARGUMENT;
    out->size = (uint64_t)st.st_size;
    return 0;
}

/* dup's reply gives the descriptor away: the reply's send closes it */
static int on_dup(void *ctx, chanos_conn *c, const struct files_dup_call *in,
                  struct files_dup_reply *out)
{
    (void)ctx;
    (void)c;
    out->copy = in->fd;
    return 0;
}

static int on_ring(void *ctx, chanos_conn *c, const struct files_ring *m)
{
    int rc = chanos_event_signal(m->event, m->times);

    (void)ctx;
    (void)c;
    close(m->event);
    return rc;
}

/* the pingpong connection a hand opened, served after files' */
static chanos_conn *handed;

static int on_hand(void *ctx, chanos_conn *c, const struct files_hand *m)
{
    (void)ctx;
    (void)c;
    if (handed != NULL || m->iface.len != strlen("pingpong") ||
        memcmp(m->iface.ptr, "pingpong", m->iface.len) != 0) {
        close(m->endpoint);
        return 0;
    }
    return chanos_endpoint_open(m->endpoint, &pingpong_interface, &handed);
}

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx;
    (void)c;
    out->result = in->val;
    return 0;
}

static int on_pass(void *ctx, chanos_conn *c, const struct files_pass *m)
{
    (void)ctx;
    (void)c;
    close(m->any);
    return 0;
}

static const struct files_server_ops ops = {
    .share = on_share, .stat = on_stat, .dup = on_dup, .ring = on_ring,
    .hand = on_hand, .pass = on_pass,
};

static const struct pingpong_server_ops pp_ops = { .echo = on_echo };

static int serve(chanos_domain *d, const char *name)
{
    chanos_listener *l;
    chanos_conn *c;
    int rc;

    rc = chanos_export_iface(d, name, &files_interface, NULL, &l);
    if (rc != 0)
        return fail("export", rc);
    printf("serving %s\n", name);
    fflush(stdout);
    if ((rc = chanos_accept(l, 20000, &c)) != 0)
        return fail("accept", rc);
    rc = files_serve(c, &ops, NULL, 20000);
    chanos_conn_close(c);
    chanos_listener_close(l);
    if (rc != 0)
        return fail("serve", rc);
    if (handed != NULL) {
        rc = pingpong_serve(handed, &pp_ops, NULL, 20000);
        chanos_conn_close(handed);
        if (rc != 0)
            return fail("serve the handed connection", rc);
    }
    return 0;
}

static int call(chanos_domain *d, const char *name, const char *path)
{
    struct files_stat_call sc;
    struct files_stat_reply sr;
    struct files_dup_call dc;
    struct files_dup_reply dr;
    struct files_share sh;
    struct stat st;
    chanos_conn *c;
    char text[64];
    ssize_t n, got = 0;
    int p[2], rc;

    rc = chanos_connect_iface(d, name, &files_interface, CALL_MS, &c);
    if (rc != 0)
        return fail("connect", rc);
    sc.fd = dc.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (sc.fd < 0)
        return fail("open", -1);
    if ((rc = files_stat(c, &sc, &sr, CALL_MS)) != 0)
        return fail("stat", rc);
    printf("size %" PRIu64 "\n", sr.size);
    if ((rc = files_dup(c, &dc, &dr, CALL_MS)) != 0)
        return fail("dup", rc);
    close(dc.fd); /* a cap is copied: ours stays ours */
    if (fstat(dr.copy, &st) != 0)
        return fail("fstat of dup's descriptor", -1);
    close(dr.copy);
    printf("dup size %lld\n", (long long)st.st_size);
    if (pipe(p) != 0)
        return fail("pipe", -1);
    sh.fd = p[1];
    sh.tag = 42;
    if ((rc = files_share_send(c, &sh, CALL_MS)) != 0)
        return fail("share", rc);
    /* p[1] was given away: the server's copy is the last, so the pipe
     * ends once it has written */
    while ((n = read(p[0], text + got, sizeof text - 1 - (size_t)got)) > 0)
        got += n;
    close(p[0]);
    text[got] = '\0';
    printf("share %s\n", text);
    {
        struct files_ring rg;
        uint64_t count = 0;

        rg.event = chanos_event_create(0);
        rg.times = 2;
        if (rg.event < 0)
            return fail("event", rg.event);
        if ((rc = files_ring_send(c, &rg, CALL_MS)) != 0)
            return fail("ring", rc);
        if ((rc = chanos_event_wait(rg.event, CALL_MS, &count)) != 0)
            return fail("wait on the event", rc);
        close(rg.event); /* a cap is copied: ours stays ours */
        printf("ring %" PRIu64 "\n", count);
    }
    {
        struct files_hand h;
        struct pingpong_echo_call ec = { 77 };
        struct pingpong_echo_reply er;
        chanos_conn *pc;

        if ((rc = chanos_endpoint_new(&pingpong_interface, &pc, &h.endpoint)) != 0)
            return fail("endpoint", rc);
        h.iface.ptr = "pingpong";
        h.iface.len = 8;
        if ((rc = files_hand_send(c, &h, CALL_MS)) != 0) /* gives it away */
            return fail("hand", rc);
        if ((rc = pingpong_echo(pc, &ec, &er, CALL_MS)) != 0)
            return fail("echo over the handed connection", rc);
        printf("endpoint echo %" PRIu64 "\n", er.result);
        chanos_conn_close(pc);
    }
    chanos_conn_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    int start = open_fds();
    chanos_domain *d;
    int rc;

    if (!((argc == 3 && strcmp(argv[1], "serve") == 0) ||
          (argc == 4 && strcmp(argv[1], "call") == 0))) {
        fprintf(stderr, "usage: chanos-caps-peer serve NAME | call NAME FILE\n");
        return 2;
    }
    rc = chanos_join(&d, NULL);
    if (rc != 0)
        return fail("join", rc);
    if (strcmp(argv[1], "serve") == 0)
        rc = serve(d, argv[2]);
    else
        rc = call(d, argv[2], argv[3]);
    chanos_domain_close(d);
    printf("leaked fds %d\n", open_fds() - start);
    return rc;
}
