/*
 * chanos-ep-peer: the C side of the tests of channel endpoints between
 * machines (tests/cluster, TestCEndpointAcrossMachines;
 * docs/capabilities.md, "Between machines"), on libchanos_net's binder.
 *
 *   chanos-ep-peer open DIR NAME COUNT
 *
 * open joins the monitor in DIR, exports the files interface as NAME,
 * prints "exported NAME", accepts one connection (from another machine)
 * and waits for its hand message, whose endpoint came from another
 * machine. It prints, each on a line:
 *   "ref other machine" (or "ref ..." saying what is wrong) for the iref
 *     the endpoint holds (chanos_endpoint_ref);
 *   "wrong interface CODE": a copy opened as the files interface;
 *   "forged CODE": its iref with one bit of the token changed, bound;
 *   "opened": the endpoint opened as pingpong (or "error CODE TEXT");
 *   "echo ok COUNT": COUNT echo calls on it, each answered val + 1;
 *   "used CODE": a copy opened then.
 * Then it closes the connections and the domain, and prints "done" (after
 * "descriptors: ..." if more are open than before it joined).
 *
 *   chanos-ep-peer serve DIR NAME
 *
 * serve exports and accepts as open does, opens the endpoint of the first
 * hand message as pingpong, prints "opened", serves echo on it (val + 1)
 * until its peer closes, and prints "served N" (N the calls answered).
 *
 *   chanos-ep-peer hand DIR NAME COUNT
 *
 * hand joins the monitor in DIR, connects to the files export NAME (on
 * another machine), makes a pingpong endpoint, hands it over, makes COUNT
 * echo calls on its own end (each answered val + 1) and prints "echo ok
 * COUNT"; it closes its end, waits for the relay to end
 * (chanos_net_endpoints_wait), tries to send a pipe and prints "fd:
 * CODE"; then it closes the connection and the domain, and prints "done"
 * (after "descriptors: ..." if more are open than before it joined).
 *
 *   chanos-ep-peer hand-wait DIR NAME
 *
 * hand-wait hands an endpoint over as hand does, makes one echo call on
 * its own end, prints "bound", then waits for that end to end (the test
 * kills the endpoint's opener), prints "ended CODE", and waits for the
 * relay to end (chanos_net_endpoints_wait). Once the files connection has
 * ended too, it hands over a second endpoint, which cannot go, and prints
 * "unsent CODE maker CODE": the send's failure and what that endpoint's
 * own end then receives.
 *
 * A failure prints "error CODE TEXT" and exits with status 1.
 */
#include <chanos_net.h>
#include <files.h>
#include <pingpong.h>

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALL_MS 20000

static int fail(const char *what, int err)
{
    printf("error %d %s: %s\n", err, what, chanos_net_strerror(err));
    fflush(stdout);
    return 1;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* open_fds counts the process's open descriptors. */
static int open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    int n = 0;
    if (!dir)
        return -1;
    while (readdir(dir))
        n++;
    closedir(dir);
    return n;
}

static int join(const char *dir, const char *program, chanos_domain **d)
{
    struct chanos_join_opts jo = {.dir = dir, .program = program,
                                  .net = chanos_net_binder()};
    return chanos_join(d, &jo);
}

/* echoes makes n echo calls on c: 0, or the first failure. */
static int echoes(chanos_conn *c, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        struct pingpong_echo_call in = {.val = i};
        struct pingpong_echo_reply out;
        int rc = pingpong_echo(c, &in, &out, CALL_MS);
        if (rc != 0)
            return rc;
        if (out.result != i + 1)
            return CHANOS_ERR_PROTOCOL;
    }
    return 0;
}

/* wait_hand receives frames on c until a hand message: its endpoint. */
static int wait_hand(chanos_conn *c, int *ep)
{
    for (;;) {
        struct chanos_frame f;
        struct files_hand m;
        int rc = chanos_conn_recv(c, CALL_MS, &f);
        if (rc != 0)
            return rc;
        if (f.hdr.msg != FILES_MSG_HAND) {
            chanos_frame_close_fds(&f);
            continue;
        }
        rc = files_hand_decode(&m, f.data, f.len, f.fds, f.nfds);
        if (rc != 0) {
            chanos_frame_close_fds(&f);
            return rc;
        }
        *ep = m.endpoint;
        return 0;
    }
}

/* take_hand joins the monitor in dir as program, exports files under
 * name, accepts the one connection of the machine that hands an endpoint
 * over, and waits for the hand: 0 and the endpoint in *ep, or what fail
 * returned. */
static int take_hand(const char *dir, const char *program, const char *name,
                     chanos_domain **d, chanos_listener **l, chanos_conn **c,
                     int *ep)
{
    int rc;

    if ((rc = join(dir, program, d)) != 0)
        return fail("join", rc);
    if ((rc = chanos_export_iface(*d, name, &files_interface, NULL, l)) != 0)
        return fail("export", rc);
    say("exported %s", name);
    if ((rc = chanos_accept(*l, CALL_MS, c)) != 0)
        return fail("accept", rc);
    if ((rc = wait_hand(*c, ep)) != 0)
        return fail("hand", rc);
    return 0;
}

static int open_main(const char *dir, const char *name, uint64_t count)
{
    chanos_domain *d;
    chanos_listener *l;
    chanos_conn *c, *pc = NULL, *x = NULL;
    struct chanos_iref ref, forged;
    int rc, ep;

    int fds0 = open_fds();
    if ((rc = take_hand(dir, "ep-peer-open", name, &d, &l, &c, &ep)) != 0)
        return rc;
    rc = chanos_endpoint_ref(ep, &ref);
    if (rc != 0)
        say("ref %d", rc);
    else if (ref.machine == chanos_domain_machine(d))
        say("ref this machine");
    else
        say("ref other machine");

    /* Opened as another interface: the export's monitor refuses it. */
    rc = chanos_endpoint_open(dup(ep), &files_interface, &x);
    say("wrong interface %d", rc);
    chanos_conn_close(x);
    x = NULL;
    /* Another token: refused. */
    forged = ref;
    forged.token[0] ^= 1;
    rc = chanos_connect_ref_iface(d, &forged, &pingpong_interface, CALL_MS, &x);
    say("forged %d", rc);
    chanos_conn_close(x);
    x = NULL;

    int copy = dup(ep);
    rc = chanos_endpoint_open(ep, &pingpong_interface, &pc);
    if (rc != 0) {
        close(copy);
        return fail("open", rc);
    }
    say("opened");
    rc = echoes(pc, count);
    if (rc != 0) {
        close(copy);
        return fail("echo", rc);
    }
    say("echo ok %" PRIu64, count);
    /* Opened again: the export is gone. (Right after the first open, the
     * sender's withdraw may still be on its way, and the bind then fails
     * at the connection instead.) */
    rc = chanos_endpoint_open(copy, &pingpong_interface, &x);
    say("used %d", rc);
    chanos_conn_close(x);
    chanos_conn_close(pc);
    chanos_conn_close(c);
    chanos_listener_close(l);
    chanos_domain_close(d);
    if (open_fds() != fds0)
        say("descriptors: %d open, %d before", open_fds(), fds0);
    say("done");
    return 0;
}

static uint64_t served;

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx;
    (void)c;
    served++;
    out->result = in->val + 1;
    return 0;
}

static const struct pingpong_server_ops echo_ops = {.echo = on_echo};

static int serve_main(const char *dir, const char *name)
{
    chanos_domain *d;
    chanos_listener *l;
    chanos_conn *c, *pc;
    int rc, ep;

    if ((rc = take_hand(dir, "ep-peer-serve", name, &d, &l, &c, &ep)) != 0)
        return rc;
    if ((rc = chanos_endpoint_open(ep, &pingpong_interface, &pc)) != 0)
        return fail("open", rc);
    say("opened");
    rc = pingpong_serve(pc, &echo_ops, NULL, CALL_MS);
    if (rc != 0)
        return fail("serve", rc);
    say("served %" PRIu64, served);
    chanos_conn_close(pc);
    chanos_conn_close(c);
    chanos_listener_close(l);
    chanos_domain_close(d);
    return 0;
}

static int hand_main(const char *dir, const char *name, uint64_t count,
                     bool wait)
{
    chanos_domain *d;
    chanos_conn *c, *mine;
    int rc, ep, p[2];

    int fds0 = open_fds();
    if ((rc = join(dir, "ep-peer-hand", &d)) != 0)
        return fail("join", rc);
    if ((rc = chanos_connect_iface(d, name, &files_interface, CALL_MS, &c)) != 0)
        return fail("connect", rc);
    if ((rc = chanos_endpoint_new(&pingpong_interface, &mine, &ep)) != 0)
        return fail("endpoint", rc);
    struct files_hand h = {.endpoint = ep, .iface = CHANOS_STR("pingpong")};
    if ((rc = files_hand_send(c, &h, CALL_MS)) != 0) { /* gives it away */
        close(ep);
        return fail("hand", rc);
    }
    rc = echoes(mine, count);
    if (rc != 0)
        return fail("echo", rc);
    if (wait) {
        struct chanos_frame f;
        say("bound");
        while ((rc = chanos_conn_recv(mine, CALL_MS, &f)) == 0)
            chanos_frame_close_fds(&f);
        say("ended %d", rc);
        chanos_conn_close(mine);
        if ((rc = chanos_net_endpoints_wait(CALL_MS)) != 0)
            return fail("relay", rc);
        /* the monitor's peer_gone ends the files connection too (whose
         * close would otherwise wait out its linger for a dead peer) */
        for (int i = 0; i < 100 && chanos_conn_peer_gone(c) == 0; i++)
            (void)chanos_domain_poll(d, 100);
        /* An endpoint whose frame cannot go: its export is withdrawn at
         * once, and its maker sees its peer go. */
        chanos_conn *m2;
        int ep2;
        struct chanos_frame f2;
        if ((rc = chanos_endpoint_new(&pingpong_interface, &m2, &ep2)) != 0)
            return fail("endpoint", rc);
        struct files_hand h2 = {.endpoint = ep2, .iface = CHANOS_STR("pingpong")};
        int sent = files_hand_send(c, &h2, CALL_MS);
        if (sent == 0)
            return fail("hand on a dead connection", 0);
        close(ep2); /* not sent: still ours */
        rc = chanos_conn_recv(m2, CALL_MS, &f2);
        say("unsent %d maker %d", sent, rc);
        chanos_conn_close(m2);
        if ((rc = chanos_net_endpoints_wait(CALL_MS)) != 0)
            return fail("relay", rc);
        chanos_conn_close(c);
        chanos_domain_close(d);
        return 0;
    }
    say("echo ok %" PRIu64, count);
    chanos_conn_close(mine);
    /* the relay ends with the end just closed: let it finish */
    if ((rc = chanos_net_endpoints_wait(CALL_MS)) != 0)
        return fail("relay", rc);
    if (pipe(p) != 0)
        return fail("pipe", -5);
    struct files_share s = {.fd = p[0], .tag = 1};
    rc = files_share_send(c, &s, CALL_MS);
    say("fd: %d", rc);
    if (rc != 0)
        close(p[0]);
    close(p[1]);
    chanos_conn_close(c);
    chanos_domain_close(d);
    if (open_fds() != fds0)
        say("descriptors: %d open, %d before", open_fds(), fds0);
    say("done");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "open") == 0)
        return open_main(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "hand") == 0)
        return hand_main(argv[2], argv[3], strtoull(argv[4], NULL, 10), false);
    if (argc == 4 && strcmp(argv[1], "serve") == 0)
        return serve_main(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "hand-wait") == 0)
        return hand_main(argv[2], argv[3], 1, true);
    fprintf(stderr, "usage: chanos-ep-peer open|hand DIR NAME COUNT\n"
                    "       chanos-ep-peer serve|hand-wait DIR NAME\n");
    return 64;
}
