/*
 * wire.c: the chanos wire format (docs/wire.md), the part of it that
 * generated encoders and decoders share. The frame-level and fixed-size
 * helpers are inline in chanos.h, for speed; this file holds error strings
 * and the variable-size and rarer fields.
 */
#include <chanos.h>

#include <string.h>

const char *chanos_strerror_more_(int err);

const char *chanos_strerror(int err)
{
    switch (err) {
    case CHANOS_OK:
        return "success";
    case CHANOS_ERR_TRUNCATED:
        return "truncated frame: the buffer ends inside the header or a field";
    case CHANOS_ERR_SIZE:
        return "frame size differs from the buffer length or exceeds a limit";
    case CHANOS_ERR_TRAILING:
        return "trailing bytes after the last argument";
    case CHANOS_ERR_UNKNOWN_MESSAGE:
        return "unknown message number";
    case CHANOS_ERR_HEADER:
        return "invalid frame header: flags, call_id or timeout_us";
    case CHANOS_ERR_BOUND:
        return "string or array longer than its bound";
    case CHANOS_ERR_ENUM:
        return "enum value out of range";
    case CHANOS_ERR_BOOL:
        return "bool byte neither 0 nor 1";
    case CHANOS_ERR_CAP:
        return "wrong capability index or count";
    case CHANOS_ERR_NUL:
        return "NUL byte in a string";
    case CHANOS_ERR_NOSPACE:
        return "encode buffer too small";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return chanos_strerror_more_(err); /* ump and domain codes: errors.c */
}






void chanos_enc_str(struct chanos_enc *e, struct chanos_str s, uint32_t max)
{
    uint8_t *p;

    if (s.len > max) {
        chanos_enc_fail_(e, CHANOS_ERR_BOUND);
        return;
    }
    if (s.len > 0 && memchr(s.ptr, '\0', s.len) != NULL) {
        chanos_enc_fail_(e, CHANOS_ERR_NUL);
        return;
    }
    p = chanos_enc_room_(e, 4 + (size_t)s.len);
    if (p == NULL)
        return;
    chanos_store_u32(p, s.len);
    if (s.len > 0)
        memcpy(p + 4, s.ptr, s.len);
}

void chanos_enc_bytes(struct chanos_enc *e, struct chanos_bytes b, uint32_t max)
{
    uint8_t *p;

    if (b.len > max) {
        chanos_enc_fail_(e, CHANOS_ERR_BOUND);
        return;
    }
    p = chanos_enc_room_(e, 4 + (size_t)b.len);
    if (p == NULL)
        return;
    chanos_store_u32(p, b.len);
    if (b.len > 0)
        memcpy(p + 4, b.ptr, b.len);
}

void chanos_enc_iref(struct chanos_enc *e, const struct chanos_iref *r)
{
    uint8_t *p = chanos_enc_room_(e, 32);

    if (p == NULL)
        return;
    chanos_store_u64(p, r->machine);
    chanos_store_u64(p + 8, r->export_id);
    memcpy(p + 16, r->token, 16);
}

/* enc_cap appends fd, given away or not. Its give bit is written either
 * way: an encode that failed after marking a descriptor given away leaves
 * the bit behind, and the next frame's descriptor at that place must not
 * inherit it (its send would close a descriptor the caller keeps). */
static void enc_cap(struct chanos_enc *e, int fd, bool give)
{
    struct chanos_buf *b = e->buf;
    uint32_t k = e->ncaps, i = b->nfds + k;

    if (k >= CHANOS_MAX_CAPS) {
        chanos_enc_fail_(e, CHANOS_ERR_CAP);
        return;
    }
    if (i < 64 * sizeof b->give / sizeof b->give[0]) {
        uint64_t bit = (uint64_t)1 << (i % 64);

        b->give[i / 64] = give ? b->give[i / 64] | bit : b->give[i / 64] & ~bit;
    }
    /* Only fds that fit are stored; chanos_enc_end reports NOSPACE. */
    if (k < b->fds_cap - b->nfds)
        b->fds[i] = fd;
    e->ncaps = k + 1;
    chanos_enc_u32(e, k);
}

void chanos_enc_cap(struct chanos_enc *e, int fd)
{
    enc_cap(e, fd, false);
}

void chanos_enc_give_away_cap(struct chanos_enc *e, int fd)
{
    enc_cap(e, fd, true);
}




struct chanos_str chanos_dec_str(struct chanos_dec *d, uint32_t max)
{
    struct chanos_str s = { NULL, 0 };
    uint32_t n = chanos_dec_u32(d);
    const uint8_t *p;

    if (d->err != 0)
        return s;
    if (n > max) {
        d->err = CHANOS_ERR_BOUND;
        return s;
    }
    p = chanos_dec_take_(d, n);
    if (p == NULL)
        return s;
    if (n > 0 && memchr(p, '\0', n) != NULL) {
        d->err = CHANOS_ERR_NUL;
        return s;
    }
    s.ptr = (const char *)p;
    s.len = n;
    return s;
}

struct chanos_bytes chanos_dec_bytes(struct chanos_dec *d, uint32_t max)
{
    struct chanos_bytes b = { NULL, 0 };
    uint32_t n = chanos_dec_u32(d);
    const uint8_t *p;

    if (d->err != 0)
        return b;
    if (n > max) {
        d->err = CHANOS_ERR_BOUND;
        return b;
    }
    p = chanos_dec_take_(d, n);
    if (p == NULL)
        return b;
    b.ptr = p;
    b.len = n;
    return b;
}

void chanos_dec_iref(struct chanos_dec *d, struct chanos_iref *r)
{
    const uint8_t *p = chanos_dec_take_(d, 32);

    if (p == NULL) {
        memset(r, 0, sizeof *r);
        return;
    }
    r->machine = chanos_load_u64(p);
    r->export_id = chanos_load_u64(p + 8);
    memcpy(r->token, p + 16, 16);
}

int chanos_dec_cap(struct chanos_dec *d)
{
    uint32_t k = d->caps;
    uint32_t idx = chanos_dec_u32(d);

    if (d->err != 0)
        return -1;
    if (idx != k || k >= d->ncaps || k >= d->nfds) {
        d->err = CHANOS_ERR_CAP;
        return -1;
    }
    d->caps = k + 1;
    return d->fds[k];
}
