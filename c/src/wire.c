/*
 * wire.c: the chanos wire format (docs/wire.md), the part of it that
 * generated encoders and decoders share. The frame-level and fixed-size
 * helpers are inline in chanos.h, for speed; this file holds error strings,
 * the variable-size and rarer fields, and the description of faults
 * (struct chanos_wire_fault), in the words of Go's wire package.
 */
#include <chanos.h>

#include "internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
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

/* code_name is the name of a wire code in docs/wire.md ("bound"), which
 * Go's wire.Error prints when it has no detail; NULL for another code. */
static const char *code_name(int err)
{
    switch (err) {
    case CHANOS_ERR_TRUNCATED:
        return "truncated";
    case CHANOS_ERR_SIZE:
        return "size";
    case CHANOS_ERR_TRAILING:
        return "trailing";
    case CHANOS_ERR_UNKNOWN_MESSAGE:
        return "unknown_message";
    case CHANOS_ERR_HEADER:
        return "header";
    case CHANOS_ERR_BOUND:
        return "bound";
    case CHANOS_ERR_ENUM:
        return "enum";
    case CHANOS_ERR_BOOL:
        return "bool";
    case CHANOS_ERR_CAP:
        return "cap";
    case CHANOS_ERR_NUL:
        return "nul";
    case CHANOS_ERR_NOSPACE:
        return "nospace";
    }
    return NULL;
}

int chanos_wire_fault_describe(const struct chanos_wire_fault *f, char *out,
                               size_t n)
{
    const char *detail, *msg;
    char off[32] = "";
    int len;

    if (f == NULL || f->code == 0) {
        if (n > 0)
            out[0] = '\0';
        return 0;
    }
    /* not the wire format's: a connection's explanation of an end, as Go
     * wraps one */
    if (f->code > CHANOS_ERR_TRUNCATED || f->code < CHANOS_ERR_NOSPACE) {
        len = snprintf(out, n, "%s (%s)", chanos_strerror(f->code), f->detail);
        return len < 0 ? 0 : len;
    }
    detail = f->detail;
    if (detail[0] == '\0' && (detail = code_name(f->code)) == NULL)
        detail = chanos_strerror(f->code);
    if (f->offset >= 0)
        snprintf(off, sizeof off, " at offset %" PRId64, f->offset);
    msg = f->message != NULL ? f->message : "";
    len = snprintf(out, n, "wire: %s%s%s%s%s%s%s", msg, msg[0] ? ": " : "",
                   f->field[0] ? "field " : "", f->field,
                   f->field[0] ? ": " : "", detail, off);
    return len < 0 ? 0 : len;
}

static void put_path(struct chanos_wire_fault *f, const char *prefix,
                     size_t plen, const char *sep, const char *inner);

/* record fills f with a fault; the field path is copied, cut to its
 * innermost part if it is too long (see put_path). */
static void record(struct chanos_wire_fault *f, int err, const char *name,
                   const char *field, int64_t off, const char *fmt,
                   va_list ap)
{
    f->code = err;
    f->message = name;
    f->offset = off;
    f->field[0] = '\0';
    if (field != NULL)
        put_path(f, field, strlen(field), "", "");
    vsnprintf(f->detail, sizeof f->detail, fmt, ap);
}

#if defined(__GNUC__) || defined(__clang__)
#define PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF(f, a)
#endif

/* recordf is record with the detail's arguments in place; f NULL:
 * nothing to describe into. */
PRINTF(6, 7)
static void recordf(struct chanos_wire_fault *f, int err, const char *name,
                    const char *field, int64_t off, const char *fmt, ...)
{
    va_list ap;

    if (f == NULL)
        return;
    va_start(ap, fmt);
    record(f, err, name, field, off, fmt, ap);
    va_end(ap);
}

/* enc_fault records err for field, about to be written at the encoder's
 * position, unless an error came first. */
PRINTF(4, 5) CHANOS_COLD_
static void enc_fault(struct chanos_enc *e, int err, const char *field,
                      const char *fmt, ...)
{
    va_list ap;

    if (e->err != 0)
        return;
    e->err = err;
    if (e->buf->fault == NULL)
        return;
    va_start(ap, fmt);
    record(e->buf->fault, err, e->name, field, (int64_t)(e->pos - e->start),
           fmt, ap);
    va_end(ap);
}

/* dec_fault records err for field at offset off of the frame, unless an
 * error came first. */
PRINTF(5, 6) CHANOS_COLD_
static void dec_fault(struct chanos_dec *d, int err, const char *field,
                      size_t off, const char *fmt, ...)
{
    va_list ap;

    if (d->err != 0)
        return;
    d->err = err;
    if (d->fault == NULL)
        return;
    va_start(ap, fmt);
    record(d->fault, err, d->name, field, (int64_t)off, fmt, ap);
    va_end(ap);
}

void chanos_enc_bad_(struct chanos_enc e, const char *field, uint32_t v,
                     uint32_t n)
{
    int64_t off = (int64_t)(e.pos - e.start);

    if (e.err == CHANOS_ERR_ENUM)
        recordf(e.buf->fault, e.err, e.name, field, off,
                "enum value %u out of range (%u enumerators)", (unsigned)v,
                (unsigned)n);
    else
        recordf(e.buf->fault, e.err, e.name, field, off,
                "array count %u exceeds bound %u", (unsigned)v, (unsigned)n);
}

void chanos_dec_short_(struct chanos_dec *d, const char *field)
{
    dec_fault(d, CHANOS_ERR_TRUNCATED, field, d->pos,
              "frame ends %zu bytes into the field", d->len - d->pos);
}

void chanos_dec_bad_(struct chanos_dec *d, int err, const char *field,
                     uint32_t v, uint32_t n)
{
    switch (err) {
    case CHANOS_ERR_BOOL:
        dec_fault(d, err, field, d->pos - 1, "bool byte %u is neither 0 nor 1",
                  (unsigned)v);
        break;
    case CHANOS_ERR_ENUM:
        dec_fault(d, err, field, d->pos - 4,
                  "enum value %u out of range (%u enumerators)", (unsigned)v,
                  (unsigned)n);
        break;
    case CHANOS_ERR_BOUND:
        dec_fault(d, err, field, d->pos - 4, "array count %u exceeds bound %u",
                  (unsigned)v, (unsigned)n);
        break;
    default:
        dec_fault(d, err, field, d->pos - 4,
                  "array count %u needs %llu bytes, %zu left", (unsigned)v,
                  (unsigned long long)v * n, d->len - d->pos);
    }
}

int chanos_enc_end_fault_(struct chanos_enc e)
{
    struct chanos_buf *b = e.buf;
    size_t size = e.pos - e.start;

    if (e.err != 0)
        return e.err;
    /* NOSPACE is the caller's buffer, not the frame: no offset */
    if (e.pos > b->cap) {
        recordf(b->fault, CHANOS_ERR_NOSPACE, e.name, NULL, -1,
                "frame of %zu bytes does not fit the %zu bytes left in the "
                "buffer",
                size, b->cap > e.start ? b->cap - e.start : 0);
        return CHANOS_ERR_NOSPACE;
    }
    if (e.ncaps > b->fds_cap - b->nfds) {
        recordf(b->fault, CHANOS_ERR_NOSPACE, e.name, NULL, -1,
                "%u capabilities do not fit the %u places left in the buffer",
                (unsigned)e.ncaps, (unsigned)(b->fds_cap - b->nfds));
        return CHANOS_ERR_NOSPACE;
    }
    recordf(b->fault, CHANOS_ERR_SIZE, e.name, NULL, 0,
            "frame of %zu bytes exceeds the limit of %u", size,
            (unsigned)UINT32_MAX);
    return CHANOS_ERR_SIZE;
}

int chanos_dec_end_fault_(struct chanos_dec *d)
{
    if (d->err != 0)
        return d->err;
    if (d->pos != d->len) {
        d->err = CHANOS_ERR_TRAILING;
        if (d->fault != NULL)
            recordf(d->fault, d->err, d->name, NULL, (int64_t)d->pos,
                    "%zu bytes after the last argument", d->len - d->pos);
        return d->err;
    }
    d->err = CHANOS_ERR_CAP;
    if (d->fault != NULL)
        recordf(d->fault, d->err, d->name, NULL, 7,
                "header ncaps %u, but the body holds %u capabilities",
                (unsigned)d->ncaps, (unsigned)d->caps);
    return d->err;
}

/* kind_name is the name of a frame kind, as Go's wire.Kind says it. */
static const char *kind_name(unsigned kind)
{
    switch (kind) {
    case CHANOS_KIND_MESSAGE:
        return "message";
    case CHANOS_KIND_CALL:
        return "call";
    case CHANOS_KIND_REPLY:
        return "reply";
    case CHANOS_KIND_ERROR:
        return "error reply";
    case CHANOS_KIND_CANCEL:
        return "cancel";
    }
    return "frame";
}

/* Offsets of the header's fields (docs/wire.md, "Frame header"). */
enum { OFF_SIZE = 0, OFF_MSG = 4, OFF_FLAGS = 6, OFF_NCAPS = 7,
       OFF_CALL_ID = 8, OFF_TIMEOUT = 12 };

int chanos_frame_fault_(const uint8_t *frame, size_t len, const char *name,
                        struct chanos_hdr *h, struct chanos_wire_fault *f)
{
    if (len < CHANOS_HEADER_SIZE) {
        recordf(f, CHANOS_ERR_TRUNCATED, name, NULL, 0,
                "frame of %zu bytes is shorter than the %d-byte header",
                len, CHANOS_HEADER_SIZE);
        return CHANOS_ERR_TRUNCATED;
    }
    chanos_hdr_load(h, frame);
    if (h->size != len) {
        recordf(f, CHANOS_ERR_SIZE, name, NULL, OFF_SIZE,
                "header size %u differs from frame length %zu",
                (unsigned)h->size, len);
        return CHANOS_ERR_SIZE;
    }
    return CHANOS_OK;
}

int chanos_kind_fault_(const struct chanos_hdr *h, const char *name,
                       struct chanos_wire_fault *f)
{
    struct chanos_hdr bare = { 0, 0, 0, 0, 0, 0 };
    int k = chanos_hdr_kind(h);

    if (k < 0 && h->flags == CHANOS_KIND_MESSAGE && h->call_id != 0) {
        recordf(f, CHANOS_ERR_HEADER, name, NULL, OFF_CALL_ID,
                "message with nonzero call_id");
        return CHANOS_ERR_HEADER;
    }
    bare.flags = h->flags;
    if (k < 0 && chanos_hdr_kind(&bare) >= 0) {
        /* a valid kind but for its timeout_us */
        recordf(f, CHANOS_ERR_HEADER, name, NULL, OFF_TIMEOUT,
                "%s with nonzero timeout_us", kind_name(h->flags));
        return CHANOS_ERR_HEADER;
    }
    if (k < 0) {
        recordf(f, CHANOS_ERR_HEADER, name, NULL, OFF_FLAGS,
                "invalid flags 0x%02x", (unsigned)h->flags);
        return CHANOS_ERR_HEADER;
    }
    return k;
}

int chanos_conn_refuse_(struct chanos_wire_fault *f, int err, int64_t off,
                        const char *field, const char *fmt, ...)
{
    va_list ap;

    if (f == NULL)
        return err;
    va_start(ap, fmt);
    record(f, err, NULL, field, off, fmt, ap);
    va_end(ap);
    return err;
}

int chanos_dec_header_(struct chanos_dec *d, int msg, int kind)
{
    struct chanos_wire_fault *f = d->fault;
    struct chanos_hdr h;
    int k = chanos_frame_fault_(d->frame, d->len, d->name, &h, f);

    if (k != CHANOS_OK)
        return k;
    if (msg >= 0 && h.msg != msg) {
        recordf(f, CHANOS_ERR_UNKNOWN_MESSAGE, d->name, NULL, OFF_MSG,
                "message number %u, expected %d", (unsigned)h.msg, msg);
        return CHANOS_ERR_UNKNOWN_MESSAGE;
    }
    k = chanos_kind_fault_(&h, d->name, f);
    if (k < 0)
        return k;
    if (kind >= 0 && k != kind) {
        recordf(f, CHANOS_ERR_HEADER, d->name, NULL, OFF_FLAGS,
                "%s frame, expected a %s", kind_name((unsigned)k),
                kind_name((unsigned)kind));
        return CHANOS_ERR_HEADER;
    }
    if (h.ncaps != d->nfds) {
        recordf(f, CHANOS_ERR_CAP, d->name, NULL, OFF_NCAPS,
                "header ncaps %u differs from the %u capabilities received",
                (unsigned)h.ncaps, (unsigned)d->nfds);
        return CHANOS_ERR_CAP;
    }
    return CHANOS_OK;
}

int chanos_dec_unknown_(struct chanos_dec *d, const char *iface)
{
    if (d->fault != NULL)
        recordf(d->fault, CHANOS_ERR_UNKNOWN_MESSAGE, iface, NULL, OFF_MSG,
                "message number %u names no message of %s",
                (unsigned)chanos_load_u16(d->frame + OFF_MSG), iface);
    return CHANOS_ERR_UNKNOWN_MESSAGE;
}

int chanos_enc_refuse_(struct chanos_buf *out, int err, const char *iface,
                       const char *name, unsigned msg, unsigned kind, bool rpc)
{
    if (out->fault == NULL)
        return err;
    if (err == CHANOS_ERR_UNKNOWN_MESSAGE)
        recordf(out->fault, err, iface, NULL, -1,
                "message number %u names no message of %s", msg, iface);
    else
        recordf(out->fault, err, name, NULL, -1, "kind 0x%02x, expected %s",
                kind, rpc ? "a call or a reply" : "a message");
    return err;
}

/*
 * put_path sets f's field to prefix[0..plen) + sep + inner, where inner
 * may be f->field itself (as when a fault leaves a struct). A path longer
 * than the room keeps its end, the innermost part, and shows the cut as a
 * leading "...": the field at fault stays whole.
 */
static void put_path(struct chanos_wire_fault *f, const char *prefix,
                     size_t plen, const char *sep, const char *inner)
{
    static const char cut[] = "...";
    size_t slen = strlen(sep), ilen = strlen(inner), head = plen + slen;
    size_t room = sizeof f->field - 1, mark = 0, skip = 0;
    char *out = f->field;

    if (head + ilen > room) {
        mark = sizeof cut - 1;
        skip = head + ilen - (room - mark); /* bytes dropped at the front */
    }
    /* inner first, as the rest may overwrite where it is */
    if (skip >= head) {
        memmove(out + mark, inner + (skip - head), ilen - (skip - head));
        out[mark + ilen - (skip - head)] = '\0';
    } else {
        memmove(out + mark + head - skip, inner, ilen);
        out[mark + head - skip + ilen] = '\0';
        if (skip < plen) {
            memcpy(out + mark, prefix + skip, plen - skip);
            memcpy(out + mark + plen - skip, sep, slen);
        } else {
            memcpy(out + mark, sep + (skip - plen), head - skip);
        }
    }
    memcpy(out, cut, mark);
}

/* leave is Go's fault.leave: field, with [i] when indexed, goes before the
 * path so far, joined by a dot unless either side makes one needless. */
static void leave(struct chanos_wire_fault *f, const char *field, bool indexed,
                  uint32_t i)
{
    char name[CHANOS_WIRE_FIELD_MAX + 16];
    size_t n = strlen(field), skip = 0;
    const char *sep = "";

    if (f == NULL)
        return;
    if (n > CHANOS_WIRE_FIELD_MAX) { /* only its end can show */
        skip = n - CHANOS_WIRE_FIELD_MAX;
        n = CHANOS_WIRE_FIELD_MAX;
    }
    memcpy(name, field + skip, n);
    if (indexed)
        n += (size_t)snprintf(name + n, sizeof name - n, "[%u]", (unsigned)i);
    name[n] = '\0';
    if (f->field[0] != '\0' && f->field[0] != '[' && n > 0)
        sep = ".";
    put_path(f, name, n, sep, f->field);
}

void chanos_wire_leave_(struct chanos_wire_fault *f, const char *field)
{
    leave(f, field, false, 0);
}

void chanos_wire_leave_index_(struct chanos_wire_fault *f, const char *field,
                              uint32_t i)
{
    leave(f, field, true, i);
}

void chanos_enc_str(struct chanos_enc *e, const char *field,
                    struct chanos_str s, uint32_t max)
{
    const char *nul;
    uint8_t *p;

    if (s.len > max) {
        enc_fault(e, CHANOS_ERR_BOUND, field,
                  "string length %u exceeds bound %u",
                  (unsigned)s.len, (unsigned)max);
        return;
    }
    if (s.len > 0 && (nul = memchr(s.ptr, '\0', s.len)) != NULL) {
        enc_fault(e, CHANOS_ERR_NUL, field,
                  "string holds a NUL byte at index %td", nul - s.ptr);
        return;
    }
    p = chanos_enc_room_(e, 4 + (size_t)s.len);
    if (p == NULL)
        return;
    chanos_store_u32(p, s.len);
    if (s.len > 0)
        memcpy(p + 4, s.ptr, s.len);
}

void chanos_enc_bytes(struct chanos_enc *e, const char *field,
                      struct chanos_bytes b, uint32_t max)
{
    uint8_t *p;

    if (b.len > max) {
        enc_fault(e, CHANOS_ERR_BOUND, field,
                  "array count %u exceeds bound %u", (unsigned)b.len,
                  (unsigned)max);
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
static void enc_cap(struct chanos_enc *e, const char *field, int fd, bool give)
{
    struct chanos_buf *b = e->buf;
    uint32_t k = e->ncaps, i = b->nfds + k;

    if (k >= CHANOS_MAX_CAPS) {
        enc_fault(e, CHANOS_ERR_CAP, field,
                  "more than %d capabilities in one frame",
                  CHANOS_MAX_CAPS);
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

void chanos_enc_cap(struct chanos_enc *e, const char *field, int fd)
{
    enc_cap(e, field, fd, false);
}

void chanos_enc_give_away_cap(struct chanos_enc *e, const char *field, int fd)
{
    enc_cap(e, field, fd, true);
}

/* dec_length reads the u32 length of a string or the count of a byte
 * array, field, checks it against max (BOUND) and against the bytes left
 * (TRUNCATED), as Go's Decoder.length, and returns where its bytes start,
 * or NULL on a fault. what names it in the fault: "string length". */
CHANOS_INLINE_ const uint8_t *dec_length(struct chanos_dec *d,
                                         const char *field, uint32_t max,
                                         const char *what, uint32_t *n)
{
    const uint8_t *p;

    *n = chanos_dec_u32(d, field);
    if (d->err != 0)
        return NULL;
    if (*n > max) {
        dec_fault(d, CHANOS_ERR_BOUND, field, d->pos - 4,
                  "%s %u exceeds bound %u", what, (unsigned)*n, (unsigned)max);
        return NULL;
    }
    if (*n > d->len - d->pos) {
        dec_fault(d, CHANOS_ERR_TRUNCATED, field, d->pos - 4,
                  "%s %u needs %u bytes, %zu left", what, (unsigned)*n,
                  (unsigned)*n, d->len - d->pos);
        return NULL;
    }
    p = d->frame + d->pos;
    d->pos += *n;
    return p;
}

struct chanos_str chanos_dec_str(struct chanos_dec *d, const char *field,
                                 uint32_t max)
{
    struct chanos_str s = { NULL, 0 };
    const uint8_t *p, *nul;
    uint32_t n;

    p = dec_length(d, field, max, "string length", &n);
    if (p == NULL)
        return s;
    if (n > 0 && (nul = memchr(p, '\0', n)) != NULL) {
        dec_fault(d, CHANOS_ERR_NUL, field, d->pos - n - 4,
                  "string holds a NUL byte at index %td", nul - p);
        return s;
    }
    s.ptr = (const char *)p;
    s.len = n;
    return s;
}

struct chanos_bytes chanos_dec_bytes(struct chanos_dec *d, const char *field,
                                     uint32_t max)
{
    struct chanos_bytes b = { NULL, 0 };
    uint32_t n;
    const uint8_t *p = dec_length(d, field, max, "array count", &n);

    if (p == NULL)
        return b;
    b.ptr = p;
    b.len = n;
    return b;
}

void chanos_dec_iref(struct chanos_dec *d, const char *field,
                     struct chanos_iref *r)
{
    const uint8_t *p = chanos_dec_take_(d, field, 32);

    if (p == NULL) {
        memset(r, 0, sizeof *r);
        return;
    }
    r->machine = chanos_load_u64(p);
    r->export_id = chanos_load_u64(p + 8);
    memcpy(r->token, p + 16, 16);
}

/* cap_fault records why capability index idx, read for field, is not
 * the next one; out of line, so that chanos_dec_cap needs no frame. */
CHANOS_COLD_ static void cap_fault(struct chanos_dec *d, const char *field,
                                   uint32_t idx)
{
    uint32_t k = d->caps, have = d->ncaps < d->nfds ? d->ncaps : d->nfds;

    if (k >= have)
        dec_fault(d, CHANOS_ERR_CAP, field, d->pos - 4,
                  "capability %u of a frame that carries %u", (unsigned)k + 1,
                  (unsigned)have);
    else
        dec_fault(d, CHANOS_ERR_CAP, field, d->pos - 4,
                  "capability index %u, expected %u", (unsigned)idx,
                  (unsigned)k);
}

int chanos_dec_cap(struct chanos_dec *d, const char *field)
{
    uint32_t k = d->caps;
    uint32_t idx = chanos_dec_u32(d, field);

    if (d->err != 0)
        return -1;
    if (idx != k || k >= d->ncaps || k >= d->nfds) {
        cap_fault(d, field, idx);
        return -1;
    }
    d->caps = k + 1;
    return d->fds[k];
}
