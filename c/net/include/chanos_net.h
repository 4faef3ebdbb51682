/*
 * chanos_net.h: the one public header of libchanos_net, the C side of the
 * net interconnect (docs/net.md): chanos frames between machines over TCP,
 * sequenced, acknowledged and kept until acknowledged, so that a broken TCP
 * connection is resumed on a new one without loss, duplicate or
 * reordering; optionally TLS 1.3 with pinned per-connection certificates.
 * It speaks the protocol of Go's interconnect/net: either side may be Go.
 *
 * libchanos_net is a library of its own (pkg-config chanos-net), so that a
 * program using only libchanos needs no OpenSSL.
 *
 * Threads: each link runs one I/O thread of its own, which does all of its
 * socket (and TLS) work; each listener runs one thread that accepts TCP
 * connections, and a thread for each handshake in progress (at most
 * max_handshakes), so that a client stalling its handshake holds up no
 * other. Sends may come from
 * any number of threads at once; receives from one thread at a time;
 * chanos_net_close must not race with any other call on the link.
 *
 * Results: 0 on success, else a negative code: a CHANOS_ERR_* of chanos.h
 * or of this header, -EINVAL for a bad argument, or -errno from a failed
 * system call. chanos_net_strerror describes all of them.
 */
#ifndef CHANOS_NET_H
#define CHANOS_NET_H

#include <chanos.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The ends of a link (docs/net.md, "Errors") are the codes of chanos.h:
 * CHANOS_ERR_CLOSED (this side closed, or the peer's close arrived and
 * everything before it was taken), CHANOS_ERR_PROTOCOL (the peer broke the
 * protocol), CHANOS_ERR_PEER_DIED (a resume refused: the peer no longer
 * holds the connection), and the one below, CHANOS_ERR_NETWORK_LOST (no
 * resume within the grace period). A send of a frame with capabilities
 * fails with CHANOS_ERR_CAP, of one over the maximum frame size with
 * CHANOS_ERR_TOO_LARGE; neither ends the link.
 */
/* libchanos_net's own codes lie in -45xx (chanos.h uses -41xx to -44xx). */
#define CHANOS_ERR_NETWORK_LOST (-4501) /* no resume within the grace period */
#define CHANOS_ERR_AUTH         (-4502) /* peer not authenticated (pin, admission) */
#define CHANOS_ERR_TLS          (-4503) /* the TLS handshake failed otherwise */
#define CHANOS_ERR_REFUSED      (-4504) /* the listener refused the hello (bad, busy) */
#define CHANOS_ERR_MODE         (-4505) /* the peers disagree on auth_only */

/* The size of a fingerprint: SHA-256 of a certificate's DER form. */
#define CHANOS_NET_FP_SIZE 32

/* The server name a dialing side sends when given none. */
#define CHANOS_NET_DEFAULT_SERVER_NAME "chanos"

/*
 * An identity is a connection's credential: a self-signed certificate on a
 * fresh ECDSA P-256 key, made for one connection (and its resumes). Its
 * fingerprint is what the peer pins.
 */
typedef struct chanos_net_identity chanos_net_identity;

/*
 * chanos_net_identity_new makes a fresh identity in *out and, if fp is not
 * NULL, writes its fingerprint to fp[0..32). Free it with
 * chanos_net_identity_free; a link or listener that was given it keeps
 * what it needs, so it may be freed once chanos_net_dial has returned or,
 * on the accepting side, once no identity callback can return it.
 */
int chanos_net_identity_new(chanos_net_identity **out,
                            uint8_t fp[CHANOS_NET_FP_SIZE]);
void chanos_net_identity_free(chanos_net_identity *id);

/* chanos_net_identity_from_der makes an identity of a certificate (DER)
 * and its private key (PKCS#8 DER), as a monitor hands them to its domain
 * for one connection; CHANOS_ERR_AUTH if they do not parse or the key is
 * not the certificate's. */
int chanos_net_identity_from_der(const uint8_t *cert, size_t cert_len,
                                 const uint8_t *key, size_t key_len,
                                 chanos_net_identity **out);

/*
 * chanos_net_binder is the dialer a domain passes in chanos_join_opts.net
 * to bind exports of other machines (docs/net.md, "Binding between
 * machines"): with it, chanos_connect of such an export returns a
 * chanos_conn over a TLS 1.3 net link, pinned to the server's certificate,
 * with the credential the monitors made for that connection; and it takes
 * the connections from other machines that the monitor announces to the
 * domain's exports (docs/net-c.md, "Binding between machines"). A bind the
 * monitors made authenticated only (both machines' --net-auth-only) runs
 * in that mode (chanos_net_tls.auth_only), on either side. Channel
 * endpoints sent on its connections are exported and relayed by threads
 * of its own, each on a monitor session of its own (docs/net-c.md,
 * "Endpoints between machines").
 */
const struct chanos_net_binder *chanos_net_binder(void);

/*
 * chanos_net_endpoints_wait waits, at most timeout_ms (-1: no bound; 0:
 * not at all), until the relays of the channel endpoints this process
 * sent to other machines have ended: each ends once either side has (its
 * frames relayed up to there), or, never opened, after a minute. 0, or
 * CHANOS_ERR_TIMEDOUT. A process that exits while relays run cuts them:
 * frames still in them are lost, and the other machine's side learns it
 * as a peer's death. So a program that has closed its ends of such
 * endpoints calls this before it exits.
 */
int chanos_net_endpoints_wait(int timeout_ms);
/* chanos_net_identity_fingerprint copies id's fingerprint into fp. */
void chanos_net_identity_fingerprint(const chanos_net_identity *id,
                                     uint8_t fp[CHANOS_NET_FP_SIZE]);

/* chanos_net_identity_to_der writes id's certificate (DER) and private
 * key (PKCS#8 DER), the forms chanos_net_identity_from_der takes, into
 * buffers it allocates: free both with free(). The key is a secret. */
int chanos_net_identity_to_der(const chanos_net_identity *id, uint8_t **cert,
                               size_t *cert_len, uint8_t **key,
                               size_t *key_len);

/*
 * TLS: every TCP connection of a link is TLS 1.3 with two pinned
 * certificates (docs/net.md, "Security"). No certificate authority is
 * involved.
 */
struct chanos_net_tls {
    /* Dialing side: this side's identity, the fingerprint the accepting
     * side's certificate must have, and the TLS server name to send (NULL:
     * CHANOS_NET_DEFAULT_SERVER_NAME), by which the accepting side picks
     * the certificate it presents. The same name is sent on every resume. */
    const chanos_net_identity *identity;
    uint8_t peer[CHANOS_NET_FP_SIZE];
    const char *server_name;

    /* Accepting side: identity_for returns the identity to present to a
     * client that asked for server_name ("" when the client sent none), or
     * NULL to refuse the handshake; admit says whether a new connection
     * whose client certificate has fingerprint fp, asking for server_name,
     * may open (it should admit a fingerprint once). A resume must present
     * the certificate that opened the connection, and is not asked about.
     * Both run on the listener's thread, with arg. admit NULL admits none. */
    const chanos_net_identity *(*identity_for)(void *arg,
                                               const char *server_name);
    bool (*admit)(void *arg, const char *server_name,
                  const uint8_t fp[CHANOS_NET_FP_SIZE]);
    /* If set, called on the listener's thread once the handshake has
     * taken what it needs of an identity identity_for returned: from then
     * on it may be freed. */
    void (*identity_done)(void *arg, const chanos_net_identity *id);
    void *arg;

    /* Both sides: authentication without encryption (docs/net.md,
     * "Without encryption"), for trusted networks. The TLS handshake and
     * the hellos run as above; then the records cross in the clear, each
     * followed by an AES-256-GMAC tag keyed from that TCP connection's TLS
     * session, so that the peer's frames cannot be changed, forged,
     * replayed, reordered or dropped unnoticed, but can be read. Both
     * sides must agree: a dial whose listener runs the other mode fails
     * with CHANOS_ERR_MODE (and spends no admission). A record that fails
     * its tag breaks the TCP connection, which resumes
     * (chanos_net_auth_failures counts them). */
    bool auth_only;
    /* Accepting side: if set, the mode of a connection that asks for
     * server_name (true: authenticated only), in place of auth_only, so
     * that one listener serves both modes, each connection in its own (as
     * Go's TLS.ModeOf). Runs on the listener's thread, with arg. */
    bool (*auth_only_for)(void *arg, const char *server_name);
};

/*
 * Options; a zeroed struct (or NULL) gives the defaults of docs/net.md
 * ("Options and defaults"). Durations are in milliseconds.
 */
struct chanos_net_options {
    uint32_t max_frame;     /* largest frame received; 0: 1 MiB + 64 KiB */
    uint32_t window_frames; /* receive window, frames; 0: 1024 */
    uint32_t window_bytes;  /* receive window, bytes; 0: 4 MiB (>= max_frame) */
    int grace_ms;           /* resume deadline; 0: 10000 */
    int keepalive_ms;       /* idle acknowledgements; 0: 1000 */
    int dead_after_ms;      /* silence (no byte read) that means broken; 0: 4 keepalives */
    int ack_delay_ms;       /* delayed acknowledgement; 0: 1 */
    int redial_min_ms;      /* redial backoff; 0: 10 */
    int redial_max_ms;      /* 0: 500 */
    int handshake_ms;       /* each TLS and hello exchange; 0: 5000 */
    int linger_ms;          /* close's wait for its acknowledgement; 0: grace */
    int backlog;            /* new connections awaiting accept; 0: 64 */
    /* NULL: plain TCP, neither authenticated nor encrypted (tests and
     * loopback only). Copied by dial and listen (the identities are
     * referenced, see chanos_net_identity_new). */
    const struct chanos_net_tls *tls;
    /* TCP connections a listener holds in their handshake at once, each
     * on a thread of its own; more are closed as they come; 0: 64 */
    int max_handshakes;
    /* bytes per second below which a record's progress means broken:
     * a record not whole within dead_after plus its length (and a TLS
     * record's) at this rate after the last one; 0: 64 KiB/s; negative: off */
    int min_record_rate;
};

typedef struct chanos_net_link chanos_net_link;         /* opaque */
typedef struct chanos_net_listener chanos_net_listener; /* opaque */

/*
 * chanos_net_dial opens a net connection to the listener at addr
 * ("host:port", "[v6]:port"), and returns once the hellos are exchanged,
 * within the handshake timeout. The link redials addr by itself whenever
 * its TCP connection breaks. Errors: -errno of the TCP connection,
 * CHANOS_ERR_TIMEDOUT, CHANOS_ERR_AUTH (the server's certificate is not
 * the pinned one, or the listener does not admit this side's),
 * CHANOS_ERR_TLS, CHANOS_ERR_REFUSED, CHANOS_ERR_MODE (the listener runs
 * the other mode: auth_only on one side only), CHANOS_ERR_PROTOCOL. Free
 * *out with
 * chanos_net_close.
 */
int chanos_net_dial(const char *addr, const struct chanos_net_options *opts,
                    chanos_net_link **out);

/*
 * chanos_net_listen accepts net connections on addr ("host:port"; port 0
 * picks a free one, see chanos_net_listener_port); chanos_net_listen_fd on
 * a listening TCP socket, which it takes over (closed on failure too).
 * Free *out with chanos_net_listener_close.
 */
int chanos_net_listen(const char *addr, const struct chanos_net_options *opts,
                      chanos_net_listener **out);
int chanos_net_listen_fd(int fd, const struct chanos_net_options *opts,
                         chanos_net_listener **out);

/* chanos_net_listener_port returns the listener's TCP port. */
int chanos_net_listener_port(const chanos_net_listener *l);

/* chanos_net_listener_fd returns a descriptor that polls readable while a
 * new connection awaits chanos_net_accept, for programs that wait on
 * several things at once. It belongs to the listener: do not read it or
 * close it. */
int chanos_net_listener_fd(const chanos_net_listener *l);

/*
 * chanos_net_accept waits at most timeout_ms (-1: forever; 0: do not wait)
 * for the next new connection: 0 and *out (free it with chanos_net_close),
 * CHANOS_ERR_TIMEDOUT, or CHANOS_ERR_CLOSED once the listener is closed.
 */
int chanos_net_accept(chanos_net_listener *l, int timeout_ms,
                      chanos_net_link **out);

/*
 * chanos_net_listener_close stops accepting and frees l. Links it returned
 * go on, but can no longer be resumed; those it had not returned are
 * closed, all at once: it waits at most about one linger for them. It
 * must not race with chanos_net_accept. NULL is allowed.
 */
void chanos_net_listener_close(chanos_net_listener *l);

/*
 * chanos_net_send copies the chanos frame frame[0..len) into the send
 * window and has the link's thread write it. It waits at most timeout_ms
 * (-1: forever; 0: do not wait) while the window is full (the peer has not
 * taken enough of what was sent), including while there is no TCP
 * connection: on CHANOS_ERR_TIMEDOUT nothing was sent. The frame's header
 * must be valid (its size is len: else CHANOS_ERR_SIZE or
 * CHANOS_ERR_TRUNCATED), it must carry no capabilities (CHANOS_ERR_CAP:
 * chanos_net_send_refs sends those that cross machines) and
 * fit the connection's maximum frame size (CHANOS_ERR_TOO_LARGE). Once the
 * link has ended, its end. chanos_net_try_send never waits:
 * CHANOS_ERR_AGAIN when the window is full.
 */
int chanos_net_send(chanos_net_link *c, const void *frame, size_t len,
                    int timeout_ms);
int chanos_net_try_send(chanos_net_link *c, const void *frame, size_t len);

/*
 * chanos_net_recv waits at most timeout_ms (-1: forever; 0: do not wait,
 * CHANOS_ERR_AGAIN) for the next frame and sets *frame and *len to it. The
 * bytes belong to the link and stay valid until the next receive or close.
 * After the peer's close, or a network lost or peer died, the frames that
 * arrived before are returned first, then the end; after a protocol
 * violation or this side's close, the end at once. A frame whose header
 * does not give its length, or whose irefs do not follow it as its header
 * says (chanos_net_recv_refs), ends the link with CHANOS_ERR_PROTOCOL.
 */
int chanos_net_recv(chanos_net_link *c, const void **frame, size_t *len,
                    int timeout_ms);

/*
 * Capabilities between machines (docs/net.md, "Records"): a frame whose
 * header says ncaps = N > 0 travels with N irefs after it, in the same
 * record, each CHANOS_NET_REF_SIZE bytes (machine u64, export u64, token
 * 16 bytes, little-endian: struct chanos_iref as the wire encodes it),
 * none the null iref. libchanos turns them into channel endpoints that
 * re-bind through the monitors (docs/capabilities.md, "Between
 * machines").
 *
 * chanos_net_send_refs is chanos_net_send (timeout_ms 0:
 * chanos_net_try_send) of a frame whose ncaps is nrefs, followed by the
 * irefs refs[0..nrefs * CHANOS_NET_REF_SIZE): CHANOS_ERR_CAP if ncaps is
 * not nrefs or an iref is null; the frame and its irefs together must fit
 * the maximum frame size. chanos_net_recv_refs is chanos_net_recv that
 * also sets *refs to the received frame's irefs (its header's ncaps of
 * them), valid as the frame is, or to NULL for a frame without;
 * chanos_net_recv returns the frame alone. A record whose length is not
 * the frame's size plus 32 bytes per capability, or that carries a null
 * iref, ends the link with CHANOS_ERR_PROTOCOL.
 */
#define CHANOS_NET_REF_SIZE 32
int chanos_net_send_refs(chanos_net_link *c, const void *frame, size_t len,
                         const uint8_t *refs, uint32_t nrefs, int timeout_ms);
int chanos_net_recv_refs(chanos_net_link *c, const void **frame, size_t *len,
                         const uint8_t **refs, int timeout_ms);

/* chanos_net_fd returns a descriptor that polls readable while
 * chanos_net_recv would not wait (a frame, the peer's close or the link's
 * end is there), for programs that wait on several things at once. It
 * belongs to the link: do not read it or close it. The link keeps it up
 * to date from the first call on (a link never asked writes it never). */
int chanos_net_fd(chanos_net_link *c);

/* chanos_net_err returns why the link ended, or 0 while it goes on. */
int chanos_net_err(chanos_net_link *c);

/* chanos_net_peer_closed returns whether the peer's close has arrived. */
bool chanos_net_peer_closed(chanos_net_link *c);

/* chanos_net_resumes returns how many times the connection has been
 * resumed on a new TCP connection. */
uint64_t chanos_net_resumes(chanos_net_link *c);

/* chanos_net_auth_failures returns how many records, in the
 * authenticated-only mode, failed their tag: each broke its TCP connection,
 * and the connection resumed on a new one. */
uint64_t chanos_net_auth_failures(chanos_net_link *c);

/* chanos_net_max_frame returns the largest frame this link sends: the
 * smaller of its own and the peer's maximum. */
size_t chanos_net_max_frame(const chanos_net_link *c);

/* chanos_net_peer_fingerprint copies the fingerprint of the peer's
 * certificate into fp: 0, or -EINVAL for a plain link. */
int chanos_net_peer_fingerprint(const chanos_net_link *c,
                                uint8_t fp[CHANOS_NET_FP_SIZE]);

/*
 * chanos_net_close ends the link in order: it sends a close record after
 * every frame sent before, and waits until the peer has acknowledged it
 * (the peer then holds everything), the link has ended otherwise, or the
 * linger time has passed; and until the socket has taken the close and
 * the acknowledgement of the peer's close, if any. It then closes the TCP
 * connection, joins the link's thread and frees c. It returns 0 if the
 * peer took everything sent before (it acknowledged the close, or every
 * frame before it, or had closed too), else why not (the link's end, or
 * CHANOS_ERR_TIMEDOUT). NULL is allowed.
 */
int chanos_net_close(chanos_net_link *c);

/*
 * chanos_net_conn_new wraps link c in a chanos connection
 * (chanos_conn_new_link), so that generated C stubs, chanos_conn_call and
 * chanos_serve run over it. It takes ownership of c (closed on failure
 * too); chanos_conn_close closes it in order (chanos_net_close).
 * chanos_conn_peer_gone answers 0 while the link goes on,
 * CHANOS_ERR_CLOSED once the peer's close arrived, else the link's end.
 */
int chanos_net_conn_new(chanos_net_link *c, chanos_conn **out);

/* chanos_net_strerror describes a result of this library, or defers to
 * chanos_strerror. The string is static. */
const char *chanos_net_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* CHANOS_NET_H */
