/*
 * internal.h: what one part of libchanos offers another and programs do
 * not call.
 */
#ifndef CHANOS_INTERNAL_H
#define CHANOS_INTERNAL_H

#include <chanos.h>

/* chanos_domain_wait_ms_ returns how long a loop may sleep on
 * chanos_domain_fd(d) without calling into d: the milliseconds until the
 * monitor must have answered the rejoin attempt under way (the next call
 * then fails the attempt and arms the next one), or -1 for as long as it
 * likes. */
int chanos_domain_wait_ms_(const chanos_domain *d);

/* chanos_conn_set_peer_ records the client of a connection chanos_accept
 * hands out (chanos_conn_peer): 0 or -ENOMEM. */
int chanos_conn_set_peer_(chanos_conn *c, const struct chanos_peer *p);

/*
 * Endpoints from other machines (endpoint.c, docs/capabilities.md,
 * "Between machines"). A domain has a key, unique in the process, by
 * which such an endpoint names the domain that is to bind it: the
 * connections a domain makes between machines carry its key
 * (chanos_conn_set_domain_), and chanos_domain_by_key_ finds a domain not
 * yet closed by it (NULL otherwise).
 */
uint64_t chanos_domain_key_(const chanos_domain *d);
chanos_domain *chanos_domain_by_key_(uint64_t key);
/* The process's own random value, which a key is good with: an endpoint
 * passed to another process finds no domain there. */
uint64_t chanos_process_nonce_(void);
/* How a connection between machines exports an endpoint of this machine
 * that it sends (conn.c's send_refs): the domain layer's
 * chanos_domain_export_endpoint_, which chanos_conn_set_domain_ hands the
 * connection with the domain's key, so that the connection layer calls no
 * domain function by name and builds without the domain layer. */
typedef int (*chanos_export_endpoint_fn_)(uint64_t key, int ep,
                                          struct chanos_iref *ref,
                                          void **handle,
                                          const struct chanos_net_binder **net);
void chanos_conn_set_domain_(chanos_conn *c, uint64_t key,
                             chanos_export_endpoint_fn_ export_endpoint);
/* chanos_endpoint_ref_read_ reads the descriptor of an endpoint from
 * another machine (endpoint_ref.c): 0, the process nonce and domain key it
 * was made for, and its iref; -EINVAL for a descriptor that is not one. */
int chanos_endpoint_ref_read_(int ep, uint64_t *nonce, uint64_t *key,
                              struct chanos_iref *ref);
/* chanos_endpoint_remote_ makes the descriptor of an endpoint from another
 * machine: the iref ref (CHANOS_IREF_WIRE_SIZE bytes, as the wire encodes
 * it), to be bound in the domain of key key. 0 and *fd, or -errno. */
int chanos_endpoint_remote_(uint64_t key, const uint8_t *ref, int *fd);

/* chanos_endpoint_take_ opens the ump endpoint ep (taken over) whatever
 * its interface: 0, *u and its interface in *iface, whose name it writes
 * to name (CHANOS_UMP_MAX_LABEL + 1 bytes); CHANOS_ERR_CAP for a
 * descriptor that is not an endpoint, or one opened already. */
int chanos_endpoint_take_(int ep, chanos_ump **u,
                          struct chanos_interface *iface, char *name);
/* chanos_domain_export_endpoint_ has the binder of the domain of key key
 * export the ump endpoint ep (the caller's, left open) for another
 * machine (struct chanos_net_binder's export_endpoint): 0, the iref in
 * *ref, and in *handle and *net what to tell whether it was sent
 * (net->endpoint_sent); CHANOS_ERR_CAP where that cannot be. */
int chanos_domain_export_endpoint_(uint64_t key, int ep,
                                   struct chanos_iref *ref, void **handle,
                                   const struct chanos_net_binder **net);

/*
 * The checks of a frame's header that decoders and the connection layer
 * share (wire.c), each describing its failure in *f (NULL: nowhere) in
 * the words of Go's wire.ParseHeader and Header.Kind, for the frame name
 * (NULL: none). chanos_frame_fault_ loads the header of frame[0..len)
 * into *h: 0, TRUNCATED or SIZE. chanos_kind_fault_ returns h's kind, or
 * HEADER. Both are for the path of a failure: chanos_hdr_parse and
 * chanos_hdr_kind are the quick ones.
 */
int chanos_frame_fault_(const uint8_t *frame, size_t len, const char *name,
                        struct chanos_hdr *h, struct chanos_wire_fault *f);
int chanos_kind_fault_(const struct chanos_hdr *h, const char *name,
                       struct chanos_wire_fault *f);

/* chanos_conn_refuse_ records in *f (NULL: nowhere) that the connection
 * layer refuses a frame or an argument with err, and returns err: at byte
 * off of the frame (-1: none), in field (NULL: none), for the reason fmt
 * makes; the frame is not named (Go's wire.Error without a Message). */
int chanos_conn_refuse_(struct chanos_wire_fault *f, int err, int64_t off,
                        const char *field, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/*
 * chanos_ump_peek_cancel_ looks through the messages the peer has written
 * and this side has not received yet for a chanos cancel frame of call
 * call_id (16 bytes, docs/wire.md), without receiving anything: 1 if one
 * is there, else 0. It reads the ring and changes nothing in it, nor the
 * message received last, nor the descriptors, so that a handler may ask
 * while its call's frame is in use. It stops at the first slot not
 * written yet, or that no message starts at (the receive that comes to
 * it judges it). The receiving side's call.
 */
int chanos_ump_peek_cancel_(chanos_ump *c, uint32_t call_id);

/*
 * chanos_conn_serve_recv_ is chanos_conn_spin_recv (spin) or
 * chanos_conn_recv(c, 0, f), for a serve loop that read the clock
 * (CLOCK_MONOTONIC) at seen_ns, before it looked: a call it returns
 * counts its deadline from then (chanos_conn_call_left_ns), so that the
 * receive reads no clock of its own on the path of every call.
 */
int chanos_conn_serve_recv_(chanos_conn *c, bool spin, int64_t seen_ns,
                            struct chanos_frame *f);

/* chanos_listener_domain_ returns the domain l exports from. */
chanos_domain *chanos_listener_domain_(const chanos_listener *l);

/*
 * chanos_domain_exported_ finds the export name[0..len) of d for a
 * reflection service (src/reflection.c), as Go's
 * Domain.ExportedInterface does: 0 and *out, its interface name (a view
 * valid while the listener is open), fingerprint and definition (NULL:
 * none); CHANOS_ERR_NOT_FOUND for a name d does not export by name now
 * (none, a private export, one handed over or not exported again after
 * a rejoin); CHANOS_ERR_BUSY while another thread is in d. A call on d.
 */
struct chanos_exported_ {
    struct chanos_str iface;
    uint64_t fingerprint;
    const char *const *definition;
};
int chanos_domain_exported_(chanos_domain *d, const char *name, size_t len,
                            struct chanos_exported_ *out);

/* chanos_export_suffixed_ exports name + suffix with the interface
 * *iface, as chanos_export_iface does: NAME.health, NAME.reflection. */
int chanos_export_suffixed_(chanos_domain *d, const char *name,
                            const char *suffix,
                            const struct chanos_interface *iface,
                            chanos_listener **out);

/*
 * What a server inside libchanos (chanos_server_add_health's) adds to a
 * chanos_server's loop for its export: a descriptor that also wakes it, a
 * turn of its own on the serving thread, word of each connection the
 * loop is about to close, and the end of the server.
 * chanos_server_add_hooked_ is chanos_server_add with them (NULL: none).
 *
 * fd: polled readable beside the connections while the loop sleeps; -1
 *   for none.
 * turn: runs after every round of frames, with woke set after a sleep
 *   and at the loop's chores (every millisecond while busy); it returns
 *   the longest the loop may sleep next, in milliseconds (-1: no bound).
 *   NULL: no hooks at all.
 * closing: runs before the loop closes c (an ended connection, or every
 *   one at the loop's end), a connection of this export.
 * release: runs once, at chanos_server_free (not when the add fails: the
 *   caller then releases what arg holds); NULL: nothing to release.
 */
struct chanos_serve_hooks_ {
    int fd;
    int (*turn)(void *arg, bool woke);
    void (*closing)(void *arg, chanos_conn *c);
    void (*release)(void *arg);
    void *arg;
};
int chanos_server_add_hooked_(chanos_server *s, chanos_listener *l,
                              chanos_dispatch_fn dispatch, const void *ops,
                              void *ctx, const struct chanos_serve_hooks_ *hk);

/*
 * chanos_quote_ writes s[0..n), cut to its first max bytes and "...", into
 * out, of CHANOS_QUOTED_SIZE_(max) bytes, as Go's %q quotes it, and
 * returns out: so that a peer's bytes put no control byte into a text a
 * tool prints. A byte past ASCII is written \xNN, where Go shows a letter
 * of valid UTF-8 as it is.
 */
#define CHANOS_QUOTED_SIZE_(max) (4 * (max) + 6)
const char *chanos_quote_(char *out, const void *s, size_t n, size_t max);

#endif
