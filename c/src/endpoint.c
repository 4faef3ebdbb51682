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
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define EP_MAGIC UINT64_C(0x313050454e414843) /* "CHANEP01" */
#define EP_HEAD 20

/*
 * An endpoint from another machine is a sealed memfd of one record: the
 * magic "CHANREF1", the process's nonce and the key of the domain whose
 * connection received it (chanos_domain_by_key_), then the iref as the
 * wire encodes it. A memfd, not a socket: chanos_endpoint_open tells the
 * two kinds apart by reading it (a ump endpoint is a socket, which pread
 * refuses), and a record nobody opened costs nothing when closed (the
 * export withdraws itself).
 */
#define REF_MAGIC UINT64_C(0x314645524e414843) /* "CHANREF1" */
#define REF_REC (24 + CHANOS_IREF_WIRE_SIZE)

int chanos_endpoint_remote_(uint64_t key, const uint8_t *ref, int *fd)
{
    uint8_t b[REF_REC];
    int m;

    *fd = -1;
    chanos_store_u64(b, REF_MAGIC);
    chanos_store_u64(b + 8, chanos_process_nonce_());
    chanos_store_u64(b + 16, key);
    memcpy(b + 24, ref, CHANOS_IREF_WIRE_SIZE);
    m = memfd_create("chanos-endpoint-ref", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0)
        return -errno;
    if (pwrite(m, b, sizeof b, 0) != (ssize_t)sizeof b ||
        fcntl(m, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
                                  F_SEAL_SEAL) != 0) {
        int e = errno != 0 ? errno : EIO;

        close(m);
        return -e;
    }
    *fd = m;
    return 0;
}

/* remote_read reads the record of an endpoint from another machine: 0, or
 * -EINVAL for a descriptor that is not one. */
static int remote_read(int ep, uint64_t *nonce, uint64_t *key,
                       struct chanos_iref *ref)
{
    uint8_t b[REF_REC];
    struct stat st;
    int seals;

    if (fstat(ep, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != REF_REC)
        return -EINVAL;
    seals = fcntl(ep, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_WRITE) == 0)
        return -EINVAL;
    if (pread(ep, b, sizeof b, 0) != (ssize_t)sizeof b ||
        chanos_load_u64(b) != REF_MAGIC)
        return -EINVAL;
    *nonce = chanos_load_u64(b + 8);
    *key = chanos_load_u64(b + 16);
    ref->machine = chanos_load_u64(b + 24);
    ref->export_id = chanos_load_u64(b + 32);
    memcpy(ref->token, b + 40, sizeof ref->token);
    return 0;
}

int chanos_endpoint_ref(int ep, struct chanos_iref *out)
{
    uint64_t nonce, key;

    if (out == NULL)
        return -EINVAL;
    return remote_read(ep, &nonce, &key, out);
}

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

        if (remote_read(ep, &nonce, &key, &ref) == 0) {
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
