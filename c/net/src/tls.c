/*
 * tls.c: identities (a fresh ECDSA P-256 key and a self-signed certificate
 * on it) and TLS 1.3 with pinned certificates, matching Go's
 * interconnect/net/tls.go: the dialing side pins the server's fingerprint
 * and sends a server name; the accepting side presents the certificate its
 * callback picks for that name and requires a client certificate, whose
 * fingerprint the listener then admits. No certificate authority, no name
 * check, no session resumption (every TCP connection runs a full handshake
 * with both certificates).
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

static void fingerprint(X509 *x, uint8_t fp[CHANOS_NET_FP_SIZE])
{
    unsigned len = 0;
    X509_digest(x, EVP_sha256(), fp, &len);
}

static int add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!e)
        return -1;
    int ok = X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    return ok ? 0 : -1;
}

int chanos_net_identity_new(chanos_net_identity **out,
                            uint8_t fp[CHANOS_NET_FP_SIZE])
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    chanos_net_identity *id = calloc(1, sizeof *id);
    if (!id)
        return -ENOMEM;
    int rc = CHANOS_ERR_TLS;
    BIGNUM *bn = NULL;
    id->key = EVP_EC_gen("P-256");
    id->cert = X509_new();
    bn = BN_new();
    if (!id->key || !id->cert || !bn)
        goto fail;
    /* A random 127-bit serial, as Go's NewIdentity. */
    if (!BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
        !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(id->cert)))
        goto fail;
    if (!X509_set_version(id->cert, X509_VERSION_3) ||
        !X509_gmtime_adj(X509_getm_notBefore(id->cert), -60) ||
        !X509_gmtime_adj(X509_getm_notAfter(id->cert), 24 * 3600) ||
        !X509_set_pubkey(id->cert, id->key))
        goto fail;
    if (add_ext(id->cert, NID_key_usage, "critical,digitalSignature") ||
        add_ext(id->cert, NID_ext_key_usage, "clientAuth,serverAuth"))
        goto fail;
    if (!X509_sign(id->cert, id->key, EVP_sha256()))
        goto fail;
    fingerprint(id->cert, id->fp);
    BN_free(bn);
    if (fp)
        memcpy(fp, id->fp, CHANOS_NET_FP_SIZE);
    *out = id;
    return 0;
fail:
    ERR_clear_error();
    BN_free(bn);
    chanos_net_identity_free(id);
    return rc;
}

int chanos_net_identity_from_der(const uint8_t *cert, size_t cert_len,
                                 const uint8_t *key, size_t key_len,
                                 chanos_net_identity **out)
{
    if (!out || !cert || !key || cert_len > LONG_MAX || key_len > LONG_MAX)
        return -EINVAL;
    *out = NULL;
    chanos_net_identity *id = calloc(1, sizeof *id);
    if (!id)
        return -ENOMEM;
    const unsigned char *p = cert;
    id->cert = d2i_X509(NULL, &p, (long)cert_len);
    const unsigned char *q = key;
    id->key = d2i_AutoPrivateKey(NULL, &q, (long)key_len);
    if (!id->cert || p != cert + cert_len || !id->key ||
        q != key + key_len || X509_check_private_key(id->cert, id->key) != 1) {
        ERR_clear_error();
        chanos_net_identity_free(id);
        return CHANOS_ERR_AUTH;
    }
    fingerprint(id->cert, id->fp);
    *out = id;
    return 0;
}

void chanos_net_identity_free(chanos_net_identity *id)
{
    if (!id)
        return;
    X509_free(id->cert);
    EVP_PKEY_free(id->key);
    free(id);
}

void chanos_net_identity_fingerprint(const chanos_net_identity *id,
                                     uint8_t fp[CHANOS_NET_FP_SIZE])
{
    memcpy(fp, id->fp, CHANOS_NET_FP_SIZE);
}

int chanos_net_identity_to_der(const chanos_net_identity *id, uint8_t **cert,
                               size_t *cert_len, uint8_t **key,
                               size_t *key_len)
{
    if (!id || !cert || !cert_len || !key || !key_len)
        return -EINVAL;
    *cert = *key = NULL;
    unsigned char *c = NULL, *k = NULL;
    int cn = i2d_X509(id->cert, &c);
    /* i2d_PrivateKey of an EC key writes the SEC 1 form: PKCS#8 is what
     * chanos_net_identity_from_der (and Go) take */
    PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(id->key);
    int kn = p8 ? i2d_PKCS8_PRIV_KEY_INFO(p8, &k) : -1;
    PKCS8_PRIV_KEY_INFO_free(p8);
    if (cn <= 0 || kn <= 0) {
        OPENSSL_free(c);
        OPENSSL_clear_free(k, kn > 0 ? (size_t)kn : 0);
        ERR_clear_error();
        return CHANOS_ERR_TLS;
    }
    *cert = malloc((size_t)cn);
    *key = malloc((size_t)kn);
    if (!*cert || !*key) {
        free(*cert);
        free(*key);
        *cert = *key = NULL;
        OPENSSL_free(c);
        OPENSSL_clear_free(k, (size_t)kn);
        return -ENOMEM;
    }
    memcpy(*cert, c, (size_t)cn);
    memcpy(*key, k, (size_t)kn);
    *cert_len = (size_t)cn;
    *key_len = (size_t)kn;
    OPENSSL_free(c);
    OPENSSL_clear_free(k, (size_t)kn);
    return 0;
}

/* What one handshake learns, hung on its SSL (app data). */
struct hs_state {
    const uint8_t *pin; /* client: the server's pinned fingerprint */
    bool pin_failed;
    bool got;
    uint8_t fp[CHANOS_NET_FP_SIZE];
};

/* Replaces chain verification: the peer presents one self-signed
 * certificate, and the client checks it against its pin. */
static int verify_cb(X509_STORE_CTX *x, void *arg)
{
    (void)arg;
    SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
    struct hs_state *st = ssl ? SSL_get_app_data(ssl) : NULL;
    X509 *leaf = X509_STORE_CTX_get0_cert(x);
    STACK_OF(X509) *chain = X509_STORE_CTX_get0_untrusted(x);
    if (!st || !leaf || (chain && sk_X509_num(chain) != 1))
        return 0;
    fingerprint(leaf, st->fp);
    if (st->pin && memcmp(st->fp, st->pin, CHANOS_NET_FP_SIZE) != 0) {
        st->pin_failed = true;
        return 0;
    }
    st->got = true;
    return 1;
}

static SSL_CTX *base_ctx(const SSL_METHOD *m)
{
    SSL_CTX *ctx = SSL_CTX_new(m);
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_cert_verify_callback(ctx, verify_cb, NULL);
    /* OpenSSL's default, made sure of: in the authenticated-only mode the
     * bytes after the peer's hello are clear records, which TLS must leave
     * in the socket. */
    SSL_CTX_set_read_ahead(ctx, 0);
    return ctx;
}

/* alpn_wire writes protocol name in ALPN's wire form (a length byte, then
 * the name): its length. */
static unsigned alpn_wire(uint8_t *out, const char *name)
{
    size_t n = strlen(name);
    out[0] = (uint8_t)n;
    memcpy(out + 1, name, n);
    return (unsigned)n + 1;
}

/* The accepting side knows both modes, so that a client of the other mode
 * reaches its hello and is refused with a reject that says why; a client
 * that offers neither fails the handshake, as with Go's listener. */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    /* Static: *out points into it. The client offers one protocol, so the
     * order of preference does not matter. */
    static const unsigned char both[] = "\x0a" ALPN_ENCRYPTED
                                        "\x0f" ALPN_AUTH_ONLY;
    _Static_assert(sizeof ALPN_ENCRYPTED - 1 == 0x0a &&
                       sizeof ALPN_AUTH_ONLY - 1 == 0x0f,
                   "ALPN length bytes");
    if (SSL_select_next_proto((unsigned char **)out, outlen, both,
                              sizeof both - 1, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *net_tls_client_ctx(const struct chanos_net_tls *t)
{
    if (!t->identity)
        return NULL;
    SSL_CTX *ctx = base_ctx(TLS_client_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* Exactly one protocol, the mode's: the server selects it or fails
     * the dial with the other mode's reject. */
    uint8_t alpn[32];
    unsigned an =
        alpn_wire(alpn, t->auth_only ? ALPN_AUTH_ONLY : ALPN_ENCRYPTED);
    if (SSL_CTX_set_alpn_protos(ctx, alpn, an) != 0 ||
        SSL_CTX_use_certificate(ctx, t->identity->cert) != 1 ||
        SSL_CTX_use_PrivateKey(ctx, t->identity->key) != 1) {
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* The server's certificate, picked by the server name the client sent. */
static int cert_cb(SSL *ssl, void *arg)
{
    const struct chanos_net_tls *t = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!t->identity_for)
        return 0;
    const chanos_net_identity *id = t->identity_for(t->arg, name ? name : "");
    if (!id)
        return 0;
    /* SSL_use_cert_and_key takes references of its own */
    int ok = SSL_use_cert_and_key(ssl, id->cert, id->key, NULL, 1) == 1;
    if (t->identity_done)
        t->identity_done(t->arg, id);
    return ok;
}

SSL_CTX *net_tls_server_ctx(const struct chanos_net_tls *t)
{
    SSL_CTX *ctx = base_ctx(TLS_server_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       NULL);
    SSL_CTX_set_num_tickets(ctx, 0);
    /* t lives in the listener, as long as the context. */
    SSL_CTX_set_cert_cb(ctx, cert_cb, (void *)t);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    return ctx;
}

static int handshake(SSL *ssl, bool client, int fd, int wakefd,
                     int64_t deadline, const bool *stop, pthread_mutex_t *mu)
{
    for (;;) {
        int r = client ? SSL_connect(ssl) : SSL_accept(ssl);
        if (r == 1)
            return 0;
        short ev;
        switch (SSL_get_error(ssl, r)) {
        case SSL_ERROR_WANT_READ:
            ev = POLLIN;
            break;
        case SSL_ERROR_WANT_WRITE:
            ev = POLLOUT;
            break;
        default:
            ERR_clear_error();
            return CHANOS_ERR_TLS;
        }
        int w = net_wait(fd, ev, wakefd, deadline);
        if (w < 0)
            return w;
        if (w == 1 && stop) {
            pthread_mutex_lock(mu);
            bool s = *stop;
            pthread_mutex_unlock(mu);
            if (s)
                return CHANOS_ERR_CLOSED;
        }
    }
}

/* alpn_is says whether the handshake on ssl selected protocol name ("" for
 * none). */
static bool alpn_is(SSL *ssl, const char *name)
{
    const unsigned char *p = NULL;
    unsigned n = 0;
    SSL_get0_alpn_selected(ssl, &p, &n);
    return n == strlen(name) && (n == 0 || memcmp(p, name, n) == 0);
}

int net_tls_client(SSL_CTX *ctx, bool auth_only,
                   const uint8_t pin[CHANOS_NET_FP_SIZE],
                   const char *server_name, struct tconn *t, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return -ENOMEM;
    struct hs_state st = {.pin = pin};
    SSL_set_app_data(ssl, &st);
    if (SSL_set_fd(ssl, t->fd) != 1 ||
        SSL_set_tlsext_host_name(ssl, server_name) != 1) {
        ERR_clear_error();
        SSL_free(ssl);
        return CHANOS_ERR_TLS;
    }
    int r = handshake(ssl, true, t->fd, wakefd, deadline, stop, mu);
    if (r == 0 && !st.got)
        r = CHANOS_ERR_AUTH;
    if (st.pin_failed)
        r = CHANOS_ERR_AUTH;
    /* A server that knows no modes selects none, and encrypts. */
    bool mode_ok = auth_only ? alpn_is(ssl, ALPN_AUTH_ONLY)
                             : alpn_is(ssl, ALPN_ENCRYPTED) || alpn_is(ssl, "");
    if (r == 0 && !mode_ok)
        r = CHANOS_ERR_MODE;
    SSL_set_app_data(ssl, NULL);
    if (r != 0) {
        SSL_free(ssl);
        return r;
    }
    t->ssl = ssl;
    return 0;
}

int net_tls_server(SSL_CTX *ctx, struct tconn *t, int wakefd,
                   int64_t deadline, const bool *stop, pthread_mutex_t *mu,
                   uint8_t fp[CHANOS_NET_FP_SIZE], char *name, size_t cap,
                   bool *auth_only)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return -ENOMEM;
    struct hs_state st = {0};
    SSL_set_app_data(ssl, &st);
    if (SSL_set_fd(ssl, t->fd) != 1) {
        ERR_clear_error();
        SSL_free(ssl);
        return CHANOS_ERR_TLS;
    }
    int r = handshake(ssl, false, t->fd, wakefd, deadline, stop, mu);
    if (r == 0 && !st.got)
        r = CHANOS_ERR_AUTH;
    SSL_set_app_data(ssl, NULL);
    if (r != 0) {
        SSL_free(ssl);
        return r;
    }
    memcpy(fp, st.fp, CHANOS_NET_FP_SIZE);
    const char *sn = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    snprintf(name, cap, "%s", sn ? sn : "");
    /* A client that offers no protocol asks for encryption. */
    *auth_only = alpn_is(ssl, ALPN_AUTH_ONLY);
    t->ssl = ssl;
    return 0;
}
