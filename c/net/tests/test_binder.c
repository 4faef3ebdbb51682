/*
 * test_binder.c: libchanos_net's binder (chanos_net_binder), the part of a
 * C domain that takes connections between machines, driven as libchanos
 * drives it from the monitor's messages, over loopback TCP: a grant lets
 * in the one client it names, once, with the certificate made for it; the
 * accepted connection comes back with its grant's tag and polls through
 * the state's wait descriptor and its own; a client with another
 * certificate, or asking for a server name never granted, is refused; a
 * dial and an accept both end at once on peer_gone, with the error it
 * names; close frees everything (the sanitizers check).
 */
#include "check.h"

#include <chanos_net.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const struct chanos_net_binder *B;

/* listener opens a TCP listening socket on loopback: its fd and port. */
static int listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t n = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, 16) != 0 || getsockname(fd, (struct sockaddr *)&a, &n) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/* An identity and its DER forms, as a monitor hands them over. */
struct cred {
    chanos_net_identity *id;
    uint8_t fp[CHANOS_NET_FP_SIZE];
    uint8_t *cert, *key;
    size_t cert_len, key_len;
};

static void cred_make(struct cred *c)
{
    CHECK_EQ(chanos_net_identity_new(&c->id, c->fp), 0);
    CHECK_EQ(chanos_net_identity_to_der(c->id, &c->cert, &c->cert_len,
                                        &c->key, &c->key_len),
             0);
}

static void cred_free(struct cred *c)
{
    chanos_net_identity_free(c->id);
    free(c->cert);
    free(c->key);
}

/* grant announces the connection conn_id: server presents srv to the
 * client with certificate fp asking for name. */
static int grant(void *st, const char *name, const struct cred *srv,
                 const uint8_t fp[CHANOS_NET_FP_SIZE], uint64_t conn_id,
                 const char *tag)
{
    struct chanos_net_grant g = {
        .server_name = name,
        .peer = fp,
        .cert = srv->cert,
        .cert_len = srv->cert_len,
        .key = srv->key,
        .key_len = srv->key_len,
        .conn_id = conn_id,
        .tag = tag,
        .tag_len = strlen(tag) + 1,
    };
    return B->grant(st, &g);
}

/* dial dials the binder's listener at port as client cli, pinning srv. */
static int dial_mode(int port, const char *name, const struct cred *cli,
                     const struct cred *srv, bool auth_only,
                     chanos_net_link **out)
{
    char addr[32];
    struct chanos_net_tls t = {.identity = cli->id, .server_name = name,
                               .auth_only = auth_only};
    /* its peer is ended under it: closing waits no longer than this */
    struct chanos_net_options o = {.tls = &t, .handshake_ms = 5000, .linger_ms = 200};
    memcpy(t.peer, srv->fp, CHANOS_NET_FP_SIZE);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return chanos_net_dial(addr, &o, out);
}

/* dial dials encrypted. */
static int dial(int port, const char *name, const struct cred *cli,
                const struct cred *srv, chanos_net_link **out)
{
    return dial_mode(port, name, cli, srv, false, out);
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
}

/* accept_one waits on the state's descriptor for the next connection. */
static int accept_one(void *st, int wfd, chanos_conn **c, char *tag,
                      size_t cap)
{
    size_t n = cap;
    if (!readable(wfd, 10000))
        return CHANOS_ERR_TIMEDOUT;
    return B->accept(st, c, tag, &n);
}

static void ping(chanos_net_link *l, chanos_conn *c, uint16_t msg)
{
    uint8_t f[CHANOS_HEADER_SIZE];
    struct chanos_hdr h = {.size = CHANOS_HEADER_SIZE, .msg = msg};
    struct chanos_frame got;
    chanos_hdr_put(f, &h);
    CHECK_EQ(chanos_net_send(l, f, sizeof f, 5000), 0);
    CHECK(readable(chanos_conn_fd(c), 5000));
    CHECK_EQ(chanos_conn_recv(c, 5000, &got), 0);
    CHECK_EQ(got.hdr.msg, msg);
}

int main(void)
{
    struct cred srv, cli, other, srv2, cli2;
    chanos_net_link *l = NULL, *bad = NULL;
    chanos_conn *c = NULL, *c2 = NULL, *dialed = NULL;
    char tag[CHANOS_NET_GRANT_TAG_MAX];
    void *st = NULL;
    int wfd = -1, port = 0;

    B = chanos_net_binder();
    cred_make(&srv);
    cred_make(&cli);
    cred_make(&other);
    cred_make(&srv2);
    cred_make(&cli2);
    CHECK_EQ(B->open(&st, &wfd), 0);
    CHECK(wfd >= 0);
    int fd = listener(&port);
    CHECK(fd >= 0);
    CHECK_EQ(B->listen(st, fd, 0), 0);

    /* The granted client: admitted, accepted with its tag. */
    CHECK_EQ(grant(st, "sn-1", &srv, cli.fp, 7, "conn seven"), 0);
    CHECK_EQ(grant(st, "sn-1", &srv, cli.fp, 8, "twice"), CHANOS_ERR_EXISTS);
    CHECK_EQ(dial(port, "sn-1", &cli, &srv, &l), 0);
    CHECK_EQ(accept_one(st, wfd, &c, tag, sizeof tag), 0);
    CHECK(strcmp(tag, "conn seven") == 0);
    size_t n = sizeof tag;
    CHECK_EQ(B->accept(st, &c2, tag, &n), CHANOS_ERR_AGAIN);
    CHECK(!readable(wfd, 0));
    ping(l, c, 3);

    /* Admission is once: the same client again, another certificate for
     * the granted name, and a name never granted (after the wait for its
     * grant) are all refused. */
    CHECK_EQ(dial(port, "sn-1", &cli, &srv, &bad), CHANOS_ERR_AUTH);
    CHECK_EQ(grant(st, "sn-2", &srv2, cli2.fp, 9, "conn nine"), 0);
    CHECK_EQ(dial(port, "sn-2", &other, &srv2, &bad), CHANOS_ERR_AUTH);
    CHECK(dial(port, "sn-none", &other, &srv2, &bad) != 0);
    CHECK(bad == NULL);
    n = sizeof tag;
    CHECK_EQ(B->accept(st, &c2, tag, &n), CHANOS_ERR_AGAIN);

    /* The binder's own dial, to a grant of the same state: both ends are
     * known by their connection ids. */
    struct chanos_net_bind b = {
        .server_name = "sn-2",
        .peer = srv2.fp,
        .cert = cli2.cert,
        .cert_len = cli2.cert_len,
        .key = cli2.key,
        .key_len = cli2.key_len,
        .conn_id = 10,
    };
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    b.addr = addr;
    CHECK_EQ(B->dial(st, &b, &dialed), 0);
    CHECK_EQ(accept_one(st, wfd, &c2, tag, sizeof tag), 0);
    CHECK(strcmp(tag, "conn nine") == 0);

    /* peer_gone ends the connection it names, at once, and no other. */
    B->peer_gone(st, 7, 0);
    CHECK(readable(chanos_conn_fd(c), 5000));
    struct chanos_frame f;
    CHECK_EQ(chanos_conn_recv(c, 0, &f), CHANOS_ERR_PEER_DIED);
    CHECK_EQ(chanos_conn_peer_gone(c), CHANOS_ERR_PEER_DIED);
    CHECK_EQ(chanos_conn_peer_gone(c2), 0);
    B->peer_gone(st, 10, 1);
    CHECK_EQ(chanos_conn_recv(dialed, 5000, &f), CHANOS_ERR_NETWORK_LOST);
    B->peer_gone(st, 12345, 0); /* unknown: nothing */
    /* as the monitor tells both sides (else c2 would wait for a resume) */
    B->peer_gone(st, 9, 0);
    CHECK_EQ(chanos_conn_recv(c2, 5000, &f), CHANOS_ERR_PEER_DIED);

    /* An authenticated-only grant, on the same listener as the encrypted
     * ones: a dial of the other mode is refused without spending its
     * admission, then one of its mode is let in. */
    chanos_net_link *al = NULL;
    chanos_conn *ac = NULL;
    struct chanos_net_grant ao = {.server_name = "sn-3", .peer = other.fp,
                                  .cert = srv.cert, .cert_len = srv.cert_len,
                                  .key = srv.key, .key_len = srv.key_len,
                                  .auth_only = 1, .conn_id = 11,
                                  .tag = "auth", .tag_len = 5};
    CHECK_EQ(B->grant(st, &ao), 0);
    CHECK_EQ(dial_mode(port, "sn-3", &other, &srv, false, &bad), CHANOS_ERR_MODE);
    CHECK_EQ(dial_mode(port, "sn-3", &other, &srv, true, &al), 0);
    CHECK_EQ(accept_one(st, wfd, &ac, tag, sizeof tag), 0);
    CHECK(strcmp(tag, "auth") == 0);
    ping(al, ac, 5);
    B->peer_gone(st, 11, 0);
    CHECK_EQ(chanos_conn_recv(ac, 5000, &f), CHANOS_ERR_PEER_DIED);
    chanos_conn_close(ac);
    chanos_net_close(al);

    /* Connections outlive the state; closing them in any order frees it. */
    B->close(st);
    chanos_conn_close(dialed);
    chanos_conn_close(c);
    chanos_conn_close(c2);
    chanos_net_close(l);
    cred_free(&srv);
    cred_free(&cli);
    cred_free(&other);
    cred_free(&srv2);
    cred_free(&cli2);
    return check_done("net binder");
}
