/*
 * endpoint.c: channel endpoints as capabilities (docs/capabilities.md,
 * "Channel endpoints"): a fresh connection of an interface, one end kept,
 * the other sent in a message as one descriptor, which the receiver opens
 * into a chanos_conn. The label that travels with the endpoint is the Go
 * library's: "CHANEP01", the fingerprint, the largest frame, the name.
 */
#include <chanos.h>

#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EP_MAGIC UINT64_C(0x313050454e414843) /* "CHANEP01" */
#define EP_HEAD 20

int chanos_endpoint_new(const struct chanos_interface *iface,
                        chanos_conn **mine, int *ep)
{
    uint8_t label[EP_HEAD + CHANOS_UMP_MAX_LABEL];
    struct chanos_ump_options o = { 0 };
    size_t nlen;
    chanos_ump *u;
    int rc;

    if (!iface || !iface->name || !mine || !ep)
        return -EINVAL;
    *mine = NULL;
    *ep = -1;
    nlen = strlen(iface->name);
    if (nlen > CHANOS_UMP_MAX_LABEL - EP_HEAD)
        return -EINVAL;
    chanos_store_u64(label, EP_MAGIC);
    chanos_store_u64(label + 8, iface->fingerprint);
    chanos_store_u32(label + 16, iface->max_frame);
    memcpy(label + EP_HEAD, iface->name, nlen);
    o.max_msg = iface->max_frame;
    rc = chanos_ump_endpoint_new(&o, label, EP_HEAD + nlen, &u, ep);
    if (rc != 0)
        return rc;
    rc = chanos_conn_new(u, mine);
    if (rc != 0) {
        close(*ep);
        *ep = -1;
    }
    return rc;
}

int chanos_endpoint_open(int ep, const struct chanos_interface *iface,
                         chanos_conn **out)
{
    uint8_t label[CHANOS_UMP_MAX_LABEL];
    struct chanos_ump_options o = { 0 };
    size_t len = 0, nlen;
    uint64_t fp;
    chanos_ump *u;
    int rc;

    if (!iface || !iface->name || !out) {
        close(ep);
        return -EINVAL;
    }
    *out = NULL;
    {
        struct chanos_iref ref;
        uint64_t nonce, key;
        chanos_domain *d;

        if (chanos_endpoint_ref_read_(ep, &nonce, &key, &ref) == 0) {
            close(ep);
            d = nonce == chanos_process_nonce_() ? chanos_domain_by_key_(key)
                                                  : NULL;
            if (d == NULL)
                return CHANOS_ERR_NO_ROUTE;
            return chanos_connect_ref_iface(d, &ref, iface, -1, out);
        }
    }
    o.max_msg = iface->max_frame;
    rc = chanos_ump_endpoint_open(ep, &o, label, sizeof label, &len, &u);
    if (rc != 0)
        return rc;
    nlen = strlen(iface->name);
    if (len < EP_HEAD || chanos_load_u64(label) != EP_MAGIC ||
        len - EP_HEAD != nlen || memcmp(label + EP_HEAD, iface->name, nlen) != 0) {
        chanos_ump_close(u); /* its maker sees its peer go */
        return CHANOS_ERR_MISMATCH;
    }
    fp = chanos_load_u64(label + 8);
    if (fp != 0 && iface->fingerprint != 0 && fp != iface->fingerprint) {
        chanos_ump_close(u);
        return CHANOS_ERR_MISMATCH;
    }
    return chanos_conn_new(u, out);
}

int chanos_endpoint_take_(int ep, chanos_ump **u,
                          struct chanos_interface *iface, char *name)
{
    uint8_t label[CHANOS_UMP_MAX_LABEL];
    struct chanos_ump_options o = { 0 };
    int type = 0, dom = 0, rc;
    socklen_t tl = sizeof type, dl = sizeof dom;
    size_t len = 0;

    *u = NULL;
    /* an endpoint is a Unix stream socket; nothing else is read from */
    if (getsockopt(ep, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 ||
        type != SOCK_STREAM ||
        getsockopt(ep, SOL_SOCKET, SO_DOMAIN, &dom, &dl) != 0 ||
        dom != AF_UNIX) {
        close(ep);
        return CHANOS_ERR_CAP;
    }
    rc = chanos_ump_endpoint_open(ep, &o, label, sizeof label, &len, u);
    if (rc != 0)
        return rc == CHANOS_ERR_PROTOCOL ? CHANOS_ERR_CAP : rc;
    if (len <= EP_HEAD || chanos_load_u64(label) != EP_MAGIC) {
        chanos_ump_close(*u); /* its maker sees its peer go */
        *u = NULL;
        return CHANOS_ERR_CAP;
    }
    memcpy(name, label + EP_HEAD, len - EP_HEAD);
    name[len - EP_HEAD] = '\0';
    iface->name = name;
    iface->fingerprint = chanos_load_u64(label + 8);
    iface->max_frame = chanos_load_u32(label + 16);
    return 0;
}
