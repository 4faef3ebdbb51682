/*
 * auth.c: the authenticated-only mode (docs/net.md, "Without
 * encryption"). TLS 1.3 has no cipher suite that authenticates without
 * encrypting, so the handshake and the hellos run in TLS for the pinned
 * certificates, and then the records cross in the clear on the socket,
 * each followed by an AES-256-GMAC tag under a key exported from that
 * TCP connection's TLS session: integrity at a fraction of encryption's
 * cost, the frames readable on the path.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

/* The exporter label of the record keys (RFC 8446, section 7.5). */
static const char auth_label[] = "EXPORTER-chanos-net-auth";

int gmac_init(struct gmac *m, const uint8_t key[GMAC_KEY])
{
    m->index = 0;
    m->ctx = EVP_CIPHER_CTX_new();
    if (!m->ctx)
        return -ENOMEM;
    /* The key once; each record then sets only its nonce. */
    if (EVP_EncryptInit_ex(m->ctx, EVP_aes_256_gcm(), NULL, key, NULL) != 1) {
        ERR_clear_error();
        gmac_free(m);
        return CHANOS_ERR_TLS;
    }
    return 0;
}

void gmac_free(struct gmac *m)
{
    EVP_CIPHER_CTX_free(m->ctx);
    m->ctx = NULL;
}

int gmac_tag(struct gmac *m, const uint8_t *a, size_t an, const uint8_t *b,
             size_t bn, uint8_t tag[GMAC_TAG])
{
    /* EVP takes lengths as int; a record is bounded by a maximum frame
     * size, which could be set past it. */
    if (an > INT_MAX || bn > INT_MAX)
        return -EINVAL;
    uint8_t nonce[12] = {0}, none[16];
    chanos_store_u64(nonce + 4, m->index++);
    int n = 0;
    /* GCM over an empty plaintext, the record as additional data: the
     * tag is GMAC. */
    if (EVP_EncryptInit_ex(m->ctx, NULL, NULL, NULL, nonce) != 1 ||
        (an && EVP_EncryptUpdate(m->ctx, NULL, &n, a, (int)an) != 1) ||
        (bn && EVP_EncryptUpdate(m->ctx, NULL, &n, b, (int)bn) != 1) ||
        EVP_EncryptFinal_ex(m->ctx, none, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(m->ctx, EVP_CTRL_GCM_GET_TAG, GMAC_TAG, tag) != 1) {
        ERR_clear_error();
        return CHANOS_ERR_TLS;
    }
    return 0;
}

bool gmac_check(struct gmac *m, const uint8_t *a, size_t an,
                const uint8_t *b, size_t bn, const uint8_t tag[GMAC_TAG])
{
    uint8_t want[GMAC_TAG];
    if (gmac_tag(m, a, an, b, bn, want) != 0)
        return false;
    return CRYPTO_memcmp(want, tag, GMAC_TAG) == 0;
}

int net_auth_switch(struct tconn *t, bool dialer)
{
    /* Nothing travels in TLS after the peer's hello: TLS data OpenSSL
     * holds now was sent against the protocol. Without read-ahead
     * (base_ctx), OpenSSL has read no byte past the hello's record, so
     * the socket holds the first clear record. */
    if (!t->ssl || SSL_has_pending(t->ssl))
        return CHANOS_ERR_PROTOCOL;
    uint8_t ekm[2 * GMAC_KEY];
    if (SSL_export_keying_material(t->ssl, ekm, sizeof ekm, auth_label,
                                   sizeof auth_label - 1, NULL, 0, 0) != 1) {
        ERR_clear_error();
        return CHANOS_ERR_TLS;
    }
    struct tconn_auth *a = calloc(1, sizeof *a);
    if (!a) {
        OPENSSL_cleanse(ekm, sizeof ekm);
        return -ENOMEM;
    }
    /* Bytes 0-31 key what the dialing side sends, 32-63 what the
     * accepting side sends. */
    const uint8_t *mine = dialer ? ekm : ekm + GMAC_KEY;
    const uint8_t *peer = dialer ? ekm + GMAC_KEY : ekm;
    int r = gmac_init(&a->out, mine);
    if (r == 0) {
        r = gmac_init(&a->in, peer);
        if (r != 0)
            gmac_free(&a->out);
    }
    OPENSSL_cleanse(ekm, sizeof ekm);
    if (r != 0) {
        free(a);
        return r;
    }
    /* No close_notify, nothing more in TLS: the socket stays, its BIO
     * does not close it. */
    SSL_free(t->ssl);
    t->ssl = NULL;
    t->auth = a;
    return 0;
}
