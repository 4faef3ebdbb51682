/*
 * endpoint_ref.c: the descriptor that stands for a channel endpoint from
 * another machine in this process (docs/capabilities.md, "Between
 * machines"), which a connection between machines makes of each iref it
 * receives and which chanos_endpoint_open binds. A file of its own, apart
 * from the domain, so that the connection layer (conn.c) builds without
 * the domain layer.
 */
#include <chanos.h>

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t nonce_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t process_nonce;

uint64_t chanos_process_nonce_(void)
{
    uint64_t n;

    pthread_mutex_lock(&nonce_mu);
    while (process_nonce == 0) {
        if (getrandom(&process_nonce, sizeof process_nonce, 0) !=
            (ssize_t)sizeof process_nonce)
            process_nonce = 0;
    }
    n = process_nonce;
    pthread_mutex_unlock(&nonce_mu);
    return n;
}

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

int chanos_endpoint_ref_read_(int ep, uint64_t *nonce, uint64_t *key,
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
    return chanos_endpoint_ref_read_(ep, &nonce, &key, out);
}
