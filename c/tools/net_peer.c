/*
 * chanos-net-peer: the C side of the Go tests of the net interconnect
 * between Go and C (tests/interop/net_test.go).
 *
 *   chanos-net-peer dial ADDR COUNT [-pin HEX] [-sni NAME] [-auth]
 *   chanos-net-peer listen COUNT [-admit HEX] [-sni NAME] [-auth]
 *   chanos-net-peer serve [-admit HEX] [-sni NAME] [-auth]
 *
 * With -pin (dial) or -admit (listen) the link is TLS, authenticated only
 * (chanos_net_tls.auth_only) with -auth: the program makes
 * an identity and prints "fp HEX", its fingerprint. listen prints
 * "port P" (it listens on 127.0.0.1), presents its certificate to a
 * client asking for server name NAME (default "chanos") and admits the
 * client fingerprint HEX once. dial waits for a line on stdin (the test
 * has then learnt its fingerprint) and dials ADDR, pinning HEX and
 * sending NAME; a dial cut by the network is tried again.
 *
 * Then both stream COUNT frames each way at once (the sequence of
 * frame_make, which the Go test makes too), check that the COUNT
 * received are the sequence, exactly once and in order, print
 * "received COUNT resumes R", wait for the peer's close (the test closes
 * first), close and print "closed". A failure prints
 * "error CODE TEXT" and exits with status 2 for a refused authentication,
 * 3 for a peer of the other mode (CHANOS_ERR_MODE), 1 otherwise.
 *
 * serve listens as listen does, then serves the pingpong interface with
 * its generated C stubs (pingpong_serve over chanos_net_conn_new) until
 * the client closes, and prints "served".
 *
 *   chanos-net-peer bind DIR NAME COUNT
 *
 * bind joins the monitor in DIR with libchanos_net's dialer
 * (chanos_net_binder), connects to the pingpong export NAME, which may
 * live on another machine of the cluster, makes COUNT echo calls with the
 * generated stubs, checking each, and prints "echo ok COUNT"; a failure
 * prints "error CODE TEXT".
 *
 *   chanos-net-peer bind-wait DIR NAME
 *
 * bind-wait binds as bind does, makes one echo call, prints "bound", then
 * waits for the connection to end while polling the domain (which applies
 * the monitor's peer_gone), and prints "ended CODE TEXT".
 *
 *   chanos-net-peer export DIR NAME
 *
 * export joins the monitor in DIR with libchanos_net's binder, exports
 * the pingpong interface as NAME, prints "exported NAME", and serves it
 * (echo answering its value plus one, as the Go servers of tests/cluster)
 * with chanos_serve_export (clients of this machine and of others alike)
 * until SIGTERM or SIGINT.
 */
#include <chanos_net.h>
#include <pingpong.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>

#define FILL_MAX 3000

/* frame_make writes frame i: a message whose payload is i (u64), then
 * (i * 7919) % 3000 bytes, byte k being (i + k) & 0xff. */
static size_t frame_make(uint8_t *buf, uint64_t i)
{
    size_t fill = (size_t)((i * 7919) % FILL_MAX);
    size_t n = CHANOS_HEADER_SIZE + 8 + fill;
    struct chanos_hdr h = {.size = (uint32_t)n, .msg = 1};
    chanos_hdr_put(buf, &h);
    chanos_store_u64(buf + CHANOS_HEADER_SIZE, i);
    for (size_t k = 0; k < fill; k++)
        buf[CHANOS_HEADER_SIZE + 8 + k] = (uint8_t)(i + k);
    return n;
}

static int fail(const char *what, int err)
{
    printf("error %d %s: %s\n", err, what, chanos_net_strerror(err));
    fflush(stdout);
    return err == CHANOS_ERR_AUTH ? 2 : err == CHANOS_ERR_MODE ? 3 : 1;
}

static int hex_decode(const char *s, uint8_t out[CHANOS_NET_FP_SIZE])
{
    if (strlen(s) != 2 * CHANOS_NET_FP_SIZE)
        return -1;
    for (int i = 0; i < CHANOS_NET_FP_SIZE; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void print_fp(const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    printf("fp ");
    for (int i = 0; i < CHANOS_NET_FP_SIZE; i++)
        printf("%02x", fp[i]);
    printf("\n");
    fflush(stdout);
}

static chanos_net_identity *me;
static const char *sni = CHANOS_NET_DEFAULT_SERVER_NAME;
static uint8_t admit_fp[CHANOS_NET_FP_SIZE];
static bool admitted;

static const chanos_net_identity *identity_for(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, sni) == 0 ? me : NULL;
}

static bool admit(void *arg, const char *name,
                  const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    (void)arg;
    if (admitted || strcmp(name, sni) != 0 ||
        memcmp(fp, admit_fp, CHANOS_NET_FP_SIZE) != 0)
        return false;
    admitted = true;
    return true;
}

struct sender {
    chanos_net_link *c;
    uint64_t n;
    int rc;
};

static void *send_all(void *arg)
{
    struct sender *s = arg;
    static uint8_t buf[CHANOS_HEADER_SIZE + 8 + FILL_MAX];
    for (uint64_t i = 0; i < s->n; i++) {
        size_t len = frame_make(buf, i);
        s->rc = chanos_net_send(s->c, buf, len, 60000);
        if (s->rc != 0)
            break;
    }
    return NULL;
}

static int stream(chanos_net_link *c, uint64_t n)
{
    struct sender s = {c, n, 0};
    pthread_t t;
    pthread_create(&t, NULL, send_all, &s);
    static uint8_t want[CHANOS_HEADER_SIZE + 8 + FILL_MAX];
    int rc = 0;
    uint64_t i = 0;
    for (; i < n; i++) {
        const void *f;
        size_t len;
        rc = chanos_net_recv(c, &f, &len, 60000);
        if (rc != 0)
            break;
        size_t wn = frame_make(want, i);
        if (len != wn || memcmp(f, want, len) != 0) {
            printf("error 0 frame %llu is not the one due\n",
                   (unsigned long long)i);
            rc = -1;
            break;
        }
    }
    pthread_join(t, NULL);
    if (rc > 0 || rc < -1)
        return fail("receive", rc);
    if (rc == -1)
        return 1;
    if (s.rc != 0)
        return fail("send", s.rc);
    printf("received %llu resumes %llu\n", (unsigned long long)i,
           (unsigned long long)chanos_net_resumes(c));
    fflush(stdout);
    return 0;
}

static int on_ping(void *ctx, chanos_conn *c, const struct pingpong_ping *m)
{
    struct pingpong_pong p = {m->client_id, m->msg_id};
    (void)ctx;
    return pingpong_pong_send(c, &p, -1);
}

/* echo answers val + echo_add: 0 in serve mode (tests/interop), 1 in
 * export mode, as the Go servers of tests/cluster answer. */
static uint64_t echo_add;

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx;
    (void)c;
    out->result = in->val + echo_add;
    return 0;
}

static int on_bounce(void *ctx, chanos_conn *c,
                     const struct pingpong_bounce_call *in,
                     struct pingpong_bounce_reply *out)
{
    (void)ctx;
    (void)c;
    out->reply = in->payload;
    return 0;
}

static int on_data(void *ctx, chanos_conn *c, const struct pingpong_data *m)
{
    (void)ctx;
    (void)c;
    (void)m;
    return 0;
}

static const struct pingpong_server_ops pingpong_ops = {
    .ping = on_ping, .data = on_data, .echo = on_echo, .bounce = on_bounce,
};

/* client is the bind and bind-wait modes: a C client of an export that may
 * live on another machine makes n echo calls; then, with wait, it waits
 * for the connection to end while polling the domain, which applies the
 * monitor's peer_gone. */
static int client(const char *dir, const char *name, uint64_t n, bool wait)
{
    struct chanos_join_opts jo = { .dir = dir,
                                   .program = wait ? "net-peer-bind-wait" : "net-peer-bind",
                                   .net = chanos_net_binder() };
    chanos_domain *d = NULL;
    chanos_conn *c = NULL;
    int rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    rc = chanos_connect_iface(d, name, &pingpong_interface, 10000, &c);
    if (rc != 0) {
        chanos_domain_close(d);
        return fail("connect", rc);
    }
    for (uint64_t i = 0; i < n; i++) {
        struct pingpong_echo_call in = { i };
        struct pingpong_echo_reply out;
        rc = pingpong_echo(c, &in, &out, 10000);
        if (rc != 0 || out.result != i + 1) {
            chanos_conn_close(c);
            chanos_domain_close(d);
            return fail("echo", rc != 0 ? rc : CHANOS_ERR_MISMATCH);
        }
    }
    if (!wait) {
        printf("echo ok %" PRIu64 "\n", n);
    } else {
        printf("bound\n");
        fflush(stdout);
        while ((rc = chanos_conn_peer_gone(c)) == 0) {
            struct pollfd p[2] = { { chanos_domain_fd(d), POLLIN, 0 },
                                   { chanos_conn_fd(c), POLLIN, 0 } };
            if (poll(p, 2, 100) > 0 && p[0].revents != 0)
                (void)chanos_domain_poll(d, 0);
        }
        printf("ended %d %s\n", rc, chanos_net_strerror(rc));
    }
    fflush(stdout);
    chanos_conn_close(c);
    chanos_domain_close(d);
    return 0;
}

static volatile int stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* export_serve is the export mode: a C server that takes connections from
 * other machines. */
static int export_serve(const char *dir, const char *name)
{
    struct chanos_join_opts jo = { .dir = dir, .program = "net-peer-export",
                                   .net = chanos_net_binder() };
    struct sigaction sa = { .sa_handler = on_signal };
    chanos_domain *d = NULL;
    chanos_listener *l = NULL;
    sigset_t block, old;
    int rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    echo_add = 1;
    rc = chanos_export_iface(d, name, &pingpong_interface, NULL, &l);
    if (rc != 0) {
        chanos_domain_close(d);
        return fail("export", rc);
    }
    /* the signals wake serving only in its ppoll (chanos_serve_opts) */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    printf("exported %s\n", name);
    fflush(stdout);
    struct chanos_serve_opts so = { .spin_ns = -1, .stop = &stop, .sigmask = &old };
    rc = chanos_serve_export(d, l, pingpong_dispatch, &pingpong_ops, NULL, &so);
    chanos_listener_close(l);
    chanos_domain_close(d);
    if (rc != 0)
        return fail("serve", rc);
    printf("stopped\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "bind") == 0)
        return client(argv[2], argv[3], strtoull(argv[4], NULL, 10), false);
    if (argc == 4 && strcmp(argv[1], "bind-wait") == 0)
        return client(argv[2], argv[3], 1, true);
    if (argc == 4 && strcmp(argv[1], "export") == 0)
        return export_serve(argv[2], argv[3]);
    if (argc < 2)
        goto usage;
    bool dial = strcmp(argv[1], "dial") == 0;
    bool serve = strcmp(argv[1], "serve") == 0;
    if (!dial && !serve && strcmp(argv[1], "listen") != 0)
        goto usage;
    int a = 2;
    const char *addr = dial ? argv[a++] : NULL;
    if (!serve && a >= argc)
        goto usage;
    uint64_t n = serve ? 0 : strtoull(argv[a++], NULL, 10);
    const char *hex = NULL;
    bool auth_only = false;
    for (; a < argc; a++) {
        if (strcmp(argv[a], "-auth") == 0)
            auth_only = true;
        else if (a + 1 == argc)
            goto usage;
        else if (strcmp(argv[a], "-pin") == 0 || strcmp(argv[a], "-admit") == 0)
            hex = argv[++a];
        else if (strcmp(argv[a], "-sni") == 0)
            sni = argv[++a];
        else
            goto usage;
    }
    if (auth_only && !hex)
        goto usage;
    struct chanos_net_tls tls = {.identity_for = identity_for, .admit = admit,
                                 .auth_only = auth_only};
    struct chanos_net_options o = {0};
    if (hex) {
        uint8_t fp[CHANOS_NET_FP_SIZE];
        if (hex_decode(hex, dial ? tls.peer : admit_fp) < 0)
            goto usage;
        int r = chanos_net_identity_new(&me, fp);
        if (r != 0)
            return fail("identity", r);
        print_fp(fp);
        tls.identity = me;
        tls.server_name = sni;
        o.tls = &tls;
    }
    chanos_net_link *c = NULL;
    chanos_net_listener *l = NULL;
    int r;
    if (dial) {
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return fail("stdin", -5);
        /* The network may cut the first dial too. */
        for (int i = 0; i < 100; i++) {
            r = chanos_net_dial(addr, &o, &c);
            if (r == 0 || r == CHANOS_ERR_AUTH || r == CHANOS_ERR_TLS ||
                r == CHANOS_ERR_MODE)
                break;
            usleep(10000);
        }
        if (r != 0)
            return fail("dial", r);
    } else {
        r = chanos_net_listen("127.0.0.1:0", &o, &l);
        if (r != 0)
            return fail("listen", r);
        printf("port %d\n", chanos_net_listener_port(l));
        fflush(stdout);
        r = chanos_net_accept(l, 60000, &c);
        if (r != 0) {
            chanos_net_listener_close(l);
            return fail("accept", r);
        }
    }
    if (serve) {
        chanos_conn *conn;
        r = chanos_net_conn_new(c, &conn);
        if (r == 0)
            r = pingpong_serve(conn, &pingpong_ops, NULL, 60000);
        chanos_conn_close(conn);
        chanos_net_listener_close(l);
        chanos_net_identity_free(me);
        if (r != 0)
            return fail("serve", r);
        printf("served\n");
        return 0;
    }
    int st = stream(c, n);
    if (st == 0) {
        /* The test's side closes first: its close is acknowledged, then
         * this side's close ends at once. */
        const void *f;
        size_t len;
        r = chanos_net_recv(c, &f, &len, 60000);
        if (r != CHANOS_ERR_CLOSED)
            st = fail("the peer's close", r);
    }
    r = chanos_net_close(c);
    chanos_net_listener_close(l);
    chanos_net_identity_free(me);
    if (st != 0)
        return st;
    if (r != 0)
        return fail("close", r);
    printf("closed\n");
    return 0;
usage:
    fprintf(stderr, "usage: chanos-net-peer dial ADDR COUNT [-pin HEX] [-sni NAME] [-auth]\n"
                    "       chanos-net-peer listen COUNT [-admit HEX] [-sni NAME] [-auth]\n"
                    "       chanos-net-peer serve [-admit HEX] [-sni NAME] [-auth]\n");
    return 64;
}
