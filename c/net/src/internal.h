/*
 * internal.h: what the parts of libchanos_net share: the record format,
 * transport connections (plain TCP or TLS over it), the link and its
 * registry on the accepting side.
 */
#ifndef CHANOS_NET_INTERNAL_H
#define CHANOS_NET_INTERNAL_H

#include "chanos_net.h"

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <openssl/ssl.h>

/* Records (docs/net.md, "Records"). */
#define REC_DATA   1
#define REC_ACK    2
#define REC_CLOSE  3
#define REC_HELLO  4
#define REC_REJECT 5
#define REC_HDR    24
#define HELLO_SIZE 36
#define PROTO_VERSION 1
#define HELLO_RESUME 1
#define REJECT_UNKNOWN 1
#define REJECT_BAD     2
#define REJECT_BUSY    3
#define REJECT_AUTH    4
#define REJECT_MODE    5 /* the client asked for the other mode (auth_only) */

/* A result of the handshake only: the listener no longer holds the
 * connection (a resume's REJECT 1). */
#define NET_REJECTED_UNKNOWN (-4590)

struct hello {
    bool resume;
    uint8_t id[16];
    uint32_t max_frame, win_frames, win_bytes;
    uint64_t received;
};

void net_put_header(uint8_t *b, uint8_t type, uint32_t len, uint64_t seq,
                    uint64_t ack);
void net_hello_encode(const struct hello *h, uint8_t out[REC_HDR + HELLO_SIZE]);
/* net_hello_parse checks a hello's header hdr and payload p: 0 or
 * CHANOS_ERR_PROTOCOL. */
int net_hello_parse(const uint8_t hdr[REC_HDR], const uint8_t *p,
                    struct hello *h);

/* Resolved options. Durations in nanoseconds. */
struct net_opts {
    uint32_t max_frame, win_frames, win_bytes;
    int64_t grace, keepalive, dead_after, ack_delay, redial_min, redial_max,
        handshake, linger;
    int backlog, max_handshakes;
    /* bytes per second a record in progress must keep up, past
     * dead_after (min_record_rate); 0: off */
    int64_t min_record_rate;
    bool tls;
    bool auth; /* tls and t.auth_only: records in the clear with tags */
    struct chanos_net_tls t;
};
void net_opts_resolve(const struct chanos_net_options *o, struct net_opts *r);

int64_t net_now(void); /* CLOCK_MONOTONIC, in nanoseconds */

/* chanos_net_options' default max_frame (chanos_net.h). */
#define NET_DEFAULT_MAX_FRAME ((1u << 20) + (64u << 10))

/*
 * The authenticated-only mode's record tags (auth.c; docs/net.md, "Without
 * encryption"): AES-256-GMAC under one direction's key, the nonce four
 * zero bytes and the record's index in its direction on this TCP
 * connection (little-endian u64).
 */
#define GMAC_KEY 32
#define GMAC_TAG 16
struct gmac {
    EVP_CIPHER_CTX *ctx;
    uint64_t index; /* of the next record */
};
int gmac_init(struct gmac *m, const uint8_t key[GMAC_KEY]);
void gmac_free(struct gmac *m);
/* gmac_tag writes the tag of the next record, a[0..an) then b[0..bn) (its
 * header and payload), and moves to the record after: 0, -EINVAL (a
 * record past INT_MAX bytes), or CHANOS_ERR_TLS if OpenSSL fails. */
int gmac_tag(struct gmac *m, const uint8_t *a, size_t an, const uint8_t *b,
             size_t bn, uint8_t tag[GMAC_TAG]);
/* gmac_check says whether tag is the next record's, and moves on. */
bool gmac_check(struct gmac *m, const uint8_t *a, size_t an,
                const uint8_t *b, size_t bn, const uint8_t tag[GMAC_TAG]);

/* The two directions of one TCP connection in the authenticated-only
 * mode, once its hellos are exchanged. */
struct tconn_auth {
    struct gmac out, in;
};

/* A transport connection: a TCP socket, with TLS over it if ssl, or, in
 * the authenticated-only mode after the hellos, clear with tags if auth. */
struct tconn {
    int fd;
    SSL *ssl;
    struct tconn_auth *auth;
    /* bytes taken from the socket, under TLS if any: a TLS record, or a
     * tagged one, counts as life while it arrives, before it is whole */
    uint64_t raw_in;
};
#define TCONN_NONE ((struct tconn){.fd = -1})
void tconn_close(struct tconn *t);
/* Nonblocking: > 0 bytes moved; 0 would block (*want: POLLIN or POLLOUT);
 * < 0 the connection failed or ended. A read adds what it took from the
 * socket to raw_in, whatever it returns. */
ssize_t tconn_read(struct tconn *t, void *buf, size_t n, short *want);
ssize_t tconn_write(struct tconn *t, const void *buf, size_t n, short *want);
/*
 * Blocking with a deadline (net_now's clock): wait for fd (events) or
 * wakefd readable. 0: fd ready; 1: woken (wakefd drained); or
 * CHANOS_ERR_TIMEDOUT.
 */
int net_wait(int fd, short events, int wakefd, int64_t deadline);
/* All of buf, or a failure: 0, -EPIPE, CHANOS_ERR_TIMEDOUT, or
 * CHANOS_ERR_CLOSED if *stop became true. */
int tconn_write_all(struct tconn *t, const void *buf, size_t n, int wakefd,
                    int64_t deadline, const bool *stop, pthread_mutex_t *mu);
int tconn_read_all(struct tconn *t, void *buf, size_t n, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu);
/* net_connect opens a TCP connection to addr ("host:port"), with
 * TCP_NODELAY, nonblocking. */
int net_connect(const char *addr, int wakefd, int64_t deadline,
                const bool *stop, pthread_mutex_t *mu);
void net_tune(int fd);

/* TLS (tls.c). */
struct chanos_net_identity {
    EVP_PKEY *key;
    X509 *cert;
    uint8_t fp[CHANOS_NET_FP_SIZE];
};
/* The ALPN protocols that carry the mode, so that the transcript, which
 * both certificates sign, binds it. */
#define ALPN_ENCRYPTED "chanos-net"
#define ALPN_AUTH_ONLY "chanos-net-auth"
/* A client context: identity, pinned peer, the one ALPN protocol of its
 * mode. */
SSL_CTX *net_tls_client_ctx(const struct chanos_net_tls *t);
/* A server context whose certificate identity_for picks by name. */
SSL_CTX *net_tls_server_ctx(const struct chanos_net_tls *t);
/* Runs the client's handshake on t->fd, which t->ssl then holds: 0,
 * CHANOS_ERR_AUTH (pin), CHANOS_ERR_MODE (the server chose another mode
 * than auth_only's), CHANOS_ERR_TLS, CHANOS_ERR_TIMEDOUT,
 * CHANOS_ERR_CLOSED (stop). */
int net_tls_client(SSL_CTX *ctx, bool auth_only,
                   const uint8_t pin[CHANOS_NET_FP_SIZE],
                   const char *server_name, struct tconn *t, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu);
/* The server's: also the client certificate's fingerprint, the server
 * name asked for (name[0..cap), "" if none) and the mode the client asked
 * for (*auth_only). */
int net_tls_server(SSL_CTX *ctx, struct tconn *t, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu,
                   uint8_t fp[CHANOS_NET_FP_SIZE], char *name, size_t cap,
                   bool *auth_only);
/*
 * net_auth_switch turns t, whose hellos were exchanged in TLS, into its
 * clear records (auth.c): it exports the record keys from the TLS session
 * and drops the TLS state, keeping the socket. 0; CHANOS_ERR_PROTOCOL if
 * the peer sent TLS data after its hello; -ENOMEM or CHANOS_ERR_TLS.
 */
int net_auth_switch(struct tconn *t, bool dialer);

/* The links a listener holds, by id, shared with them (reference counted)
 * so that a link outliving its listener can still take itself out. */
struct registry {
    pthread_mutex_t mu;
    int refs;
    bool closed;
    chanos_net_link **links;
    size_t n, cap;
};
void registry_put(struct registry *r); /* drops a reference */

/* link.c, for listen.c: a new accepting link on t, whose peer's hello is h
 * (the link answers it), opened with TLS by the client certificate fp
 * under the server name name; registered in reg, which the caller has
 * locked. */
chanos_net_link *net_link_accepted(const struct net_opts *o,
                                   struct registry *reg, struct tconn t,
                                   const struct hello *h,
                                   const uint8_t fp[CHANOS_NET_FP_SIZE],
                                   const char *name);
/* net_link_end ends c with err, as the peer's monitor tells (peer_gone):
 * what arrived before is still received first. */
void net_link_end(chanos_net_link *c, int err);
/* Hands link l the resume on t; reg->mu held. false: l does not take it
 * (ended, or with TLS another certificate or server name than those that
 * opened it): the caller rejects it as unknown. */
bool net_link_resume(chanos_net_link *l, struct tconn t, const struct hello *h,
                     const uint8_t fp[CHANOS_NET_FP_SIZE], const char *name);
/* net_links_close closes the n links v as chanos_net_close does, all at
 * once: each waits for its acknowledgement until the same deadline, so
 * that the whole waits about one linger. */
void net_links_close(chanos_net_link **v, size_t n, int64_t deadline);
const uint8_t *net_link_id(const chanos_net_link *l);

/* binder.c, for relay.c: the net link of a connection the binder made
 * (chanos_conn_link of it), or NULL for any other (link NULL). */
chanos_net_link *net_bconn_link(void *link);

/* relay.c: the binder's export_endpoint and endpoint_sent (struct
 * chanos_net_binder in chanos.h). */
int net_export_endpoint(const char *dir, const char *program, chanos_ump *far,
                        const struct chanos_interface *iface,
                        struct chanos_iref *ref, void **handle);
void net_endpoint_sent(void *handle, int sent);

/* Blocks every signal in the thread started between the two calls. */
void net_block_signals(sigset_t *old);
void net_restore_signals(const sigset_t *old);

#endif
