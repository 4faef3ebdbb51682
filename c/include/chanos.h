/*
 * chanos.h: the one public header of libchanos.
 *
 * Sections: wire format (encoding helpers used by generated code), ump
 * (shared-memory rings), domains (the monitor, exports, connections, rpc).
 * Ownership is stated beside each function.
 */
#ifndef CHANOS_H
#define CHANOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== wire format: see docs/wire.md ==== */

#include <string.h> /* memcpy in the inline helpers below */

/*
 * Results. libchanos functions return 0 (CHANOS_OK) on success and a
 * negative value on failure: one of the CHANOS_ERR_* codes below or, from
 * functions that make system calls, -errno. The wire codes lie below -4096,
 * outside the range of -errno, so the two never clash.
 *
 * The first ten are the decode errors of docs/wire.md, in its table order;
 * encoders also fail with BOUND, NUL, ENUM and CAP on a value that cannot be
 * encoded, and with NOSPACE when the caller's buffer is too small.
 */
#define CHANOS_OK                  0
#define CHANOS_ERR_TRUNCATED       (-4101) /* the frame ends inside a field */
#define CHANOS_ERR_SIZE            (-4102) /* size is not the length */
#define CHANOS_ERR_TRAILING        (-4103) /* bytes after the last argument */
#define CHANOS_ERR_UNKNOWN_MESSAGE (-4104) /* msg unknown or unexpected */
#define CHANOS_ERR_HEADER          (-4105) /* flags, call_id, timeout_us */
#define CHANOS_ERR_BOUND           (-4106) /* string or array over its bound */
#define CHANOS_ERR_ENUM            (-4107) /* enum value out of range */
#define CHANOS_ERR_BOOL            (-4108) /* bool byte neither 0 nor 1 */
#define CHANOS_ERR_CAP             (-4109) /* capability index or count wrong */
#define CHANOS_ERR_NUL             (-4110) /* NUL byte in a string */
#define CHANOS_ERR_NOSPACE         (-4111) /* encode buffer too small */

/*
 * chanos_strerror returns a description of err: a CHANOS_ERR_* code, a
 * -errno value, or 0. The string is static; never free it.
 */
const char *chanos_strerror(int err);

/* The frame header: 16 bytes, little-endian (docs/wire.md, "Frame header"). */
#define CHANOS_HEADER_SIZE 16
/* The most capabilities one frame can carry (ncaps is one byte). */
#define CHANOS_MAX_CAPS 255

/* Header flag bits. */
#define CHANOS_FLAG_CALL   0x01
#define CHANOS_FLAG_REPLY  0x02
#define CHANOS_FLAG_ERROR  0x04
#define CHANOS_FLAG_CANCEL 0x08
/* With CALL, REPLY or REPLY|ERROR: the frame's body is followed by a
 * metadata trailer (docs/wire.md, "Metadata"), which libchanos takes off
 * the frame before anyone decodes it (chanos_frame_meta); decoders refuse
 * the flag. */
#define CHANOS_FLAG_META   0x10

/* Frame kinds: the flags byte of each valid combination. */
#define CHANOS_KIND_MESSAGE 0x00
#define CHANOS_KIND_CALL    CHANOS_FLAG_CALL
#define CHANOS_KIND_REPLY   CHANOS_FLAG_REPLY
#define CHANOS_KIND_ERROR   (CHANOS_FLAG_REPLY | CHANOS_FLAG_ERROR)
#define CHANOS_KIND_CANCEL  CHANOS_FLAG_CANCEL

struct chanos_hdr {
    uint32_t size;       /* total frame length, header included */
    uint16_t msg;        /* message number, from 1 */
    uint8_t flags;       /* CHANOS_KIND_* */
    uint8_t ncaps;       /* capabilities passed beside the frame */
    uint32_t call_id;    /* rpc correlation id; 0 on plain messages */
    uint32_t timeout_us; /* rpc call deadline; 0 = none */
};

/*
 * Little-endian loads and stores of unaligned bytes; correct on any host.
 * Signed values are two's complement (int*_t is, by definition).
 */
static inline uint16_t chanos_load_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t chanos_load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline uint64_t chanos_load_u64(const uint8_t *p)
{
    return (uint64_t)chanos_load_u32(p) |
           (uint64_t)chanos_load_u32(p + 4) << 32;
}

static inline void chanos_store_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void chanos_store_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void chanos_store_u64(uint8_t *p, uint64_t v)
{
    chanos_store_u32(p, (uint32_t)v);
    chanos_store_u32(p + 4, (uint32_t)(v >> 32));
}

/* chanos_hdr_load reads the 16 header bytes at p, without any check. */
static inline void chanos_hdr_load(struct chanos_hdr *h, const uint8_t *p)
{
    h->size = chanos_load_u32(p);
    h->msg = chanos_load_u16(p + 4);
    h->flags = p[6];
    h->ncaps = p[7];
    h->call_id = chanos_load_u32(p + 8);
    h->timeout_us = chanos_load_u32(p + 12);
}

/* chanos_hdr_put writes h as the 16 header bytes at p. */
static inline void chanos_hdr_put(uint8_t *p, const struct chanos_hdr *h)
{
    chanos_store_u32(p, h->size);
    chanos_store_u16(p + 4, h->msg);
    p[6] = h->flags;
    p[7] = h->ncaps;
    chanos_store_u32(p + 8, h->call_id);
    chanos_store_u32(p + 12, h->timeout_us);
}

/*
 * chanos_hdr_set_call patches call_id and timeout_us into an encoded frame
 * (generated encoders write them as 0; the connection layer fills them in).
 */
static inline void chanos_hdr_set_call(uint8_t *frame, uint32_t call_id,
                                       uint32_t timeout_us)
{
    chanos_store_u32(frame + 8, call_id);
    chanos_store_u32(frame + 12, timeout_us);
}

/*
 * chanos_hdr_parse reads the header of the frame in frame[0..len), which
 * must hold exactly one frame. Fails with TRUNCATED if len < 16 and with
 * SIZE if the header's size differs from len. Does not look at the flags.
 */
static inline int chanos_hdr_parse(struct chanos_hdr *h, const uint8_t *frame,
                                   size_t len)
{
    if (len < CHANOS_HEADER_SIZE)
        return CHANOS_ERR_TRUNCATED;
    chanos_hdr_load(h, frame);
    if (h->size != len)
        return CHANOS_ERR_SIZE;
    return CHANOS_OK;
}

/*
 * chanos_hdr_kind returns the kind of frame h describes (CHANOS_KIND_*, a
 * value >= 0), or CHANOS_ERR_HEADER if its flags, call_id and timeout_us
 * form no valid combination (docs/wire.md, "Flags").
 */
static inline int chanos_hdr_kind(const struct chanos_hdr *h)
{
    switch (h->flags) {
    case CHANOS_KIND_MESSAGE:
        if (h->call_id != 0 || h->timeout_us != 0)
            return CHANOS_ERR_HEADER;
        return CHANOS_KIND_MESSAGE;
    case CHANOS_KIND_CALL:
        return CHANOS_KIND_CALL;
    case CHANOS_KIND_REPLY:
    case CHANOS_KIND_ERROR:
    case CHANOS_KIND_CANCEL:
        if (h->timeout_us != 0)
            return CHANOS_ERR_HEADER;
        return h->flags;
    }
    return CHANOS_ERR_HEADER;
}

/*
 * chanos_hdr_check returns 0 if h is a valid frame of the given kind,
 * else CHANOS_ERR_HEADER.
 */
static inline int chanos_hdr_check(const struct chanos_hdr *h, unsigned kind)
{
    int k = chanos_hdr_kind(h);

    if (k < 0 || (unsigned)k != kind)
        return CHANOS_ERR_HEADER;
    return CHANOS_OK;
}

/*
 * An iref names an export: 32 bytes on the wire. All zero is the null iref.
 * Its token (128 random bits) is the capability to bind the export
 * (chanos_connect_ref): whoever holds the whole iref may bind, and may pass
 * it on in any message with an iref field. The nameservice hands out irefs
 * with the token zeroed, which name an export but bind nothing
 * (docs/security.md).
 */
struct chanos_iref {
    uint64_t machine;
    uint64_t export_id;
    uint8_t token[16];
};

/*
 * A string view: len bytes at ptr, not NUL-terminated. Decoders point ptr
 * into the frame, so a decoded view lives as long as the frame's buffer.
 * Encoders read len bytes at ptr (ptr may be NULL when len is 0).
 */
struct chanos_str {
    const char *ptr;
    uint32_t len;
};

/* A byte view, as chanos_str, for dynamic arrays of 1-byte elements. */
struct chanos_bytes {
    const uint8_t *ptr;
    uint32_t len;
};

/* chanos_cstr returns a view of the NUL-terminated string s. */
static inline struct chanos_str chanos_cstr(const char *s)
{
    struct chanos_str v;
    size_t n = 0;

    while (s[n] != '\0')
        n++;
    v.ptr = s;
    v.len = (uint32_t)n;
    return v;
}

/* CHANOS_STR("literal") is a view of a string literal. */
#define CHANOS_STR(lit) \
    ((struct chanos_str){ (lit), (uint32_t)(sizeof(lit) - 1) })

/*
 * A wire fault: which frame, field and byte a value that does not encode,
 * or a frame that does not decode, went wrong at, and why, in the words of
 * Go's wire.Error. chanos_wire_fault_describe formats it as Go does:
 *
 *     wire: kv.put call: field key: string length 300 exceeds bound 256 at offset 20
 *
 * Encoders and decoders fill one only when they fail, never on success:
 * the fault record of a chanos_buf (encoding), the fault argument of a
 * generated NAME_decode_fault (decoding), a connection's own record in
 * the generated stubs and dispatch (chanos_conn_fault). It holds no
 * pointer into the frame, and its message is a static string, so it
 * outlives the frame and the buffer.
 */
#define CHANOS_WIRE_FIELD_MAX 96
#define CHANOS_WIRE_DETAIL_MAX 256

struct chanos_wire_fault {
    int code; /* the CHANOS_ERR_* code the call returned */
    /* the frame, "kv.put" or "kv.get call" (a static string); NULL: not
     * known */
    const char *message;
    int64_t offset; /* byte of the frame where the field starts; -1: none */
    /* the argument, with a path into structs and arrays, as
     * "lines[1].from.x"; "" for the header and for the frame as a whole.
     * A longer path keeps its innermost part, after "..." */
    char field[CHANOS_WIRE_FIELD_MAX];
    /* what is wrong, as "string length 300 exceeds bound 256"; "": the
     * name of the code alone ("bound") */
    char detail[CHANOS_WIRE_DETAIL_MAX];
};

/*
 * chanos_wire_fault_describe writes f as Go's wire.Error writes itself,
 * "wire: MESSAGE: field FIELD: DETAIL at offset N" (each part only if
 * known), NUL-terminated and cut to fit n bytes as snprintf does, and
 * returns the length of the whole text. A buffer of
 * CHANOS_WIRE_FAULT_TEXT_MAX bytes holds any text whose message name is
 * under 80 bytes. f NULL or with code 0 describes nothing: "". A fault
 * whose code is no wire code, a connection's explanation of an end that
 * is not the wire format's (see chanos_conn_fault), is written as Go
 * wraps an error with one, "WHAT (DETAIL)", WHAT being
 * chanos_strerror's text.
 */
#define CHANOS_WIRE_FAULT_TEXT_MAX 480
int chanos_wire_fault_describe(const struct chanos_wire_fault *f, char *out,
                               size_t n);

/*
 * An encode buffer, all caller-owned memory: encoders append whole frames
 * to data[len..cap) and the capabilities (fds) they carry to
 * fds[nfds..fds_cap). They never allocate: a frame that does not fit fails
 * with CHANOS_ERR_NOSPACE. On any failure the buffer is unchanged (bytes
 * past len and fds past nfds may have been overwritten). The fds are
 * copied, not duplicated: the buffer does not own them.
 */
struct chanos_buf {
    uint8_t *data;
    size_t cap;
    size_t len;
    int *fds;
    uint32_t fds_cap;
    uint32_t nfds;
    /* bit i set: fds[i] is a give_away_cap, which the send closes once it
     * has succeeded (chanos_conn_send_buf) */
    uint64_t give[4];
    /* where an encode into the buffer that fails describes why; NULL (as
     * chanos_buf_init leaves it): nowhere, the code alone. The buffer is
     * the encoder's one state that outlives the encode, so the record's
     * address travels in it; chanos_conn_buf points it at the
     * connection's own (chanos_conn_fault). */
    struct chanos_wire_fault *fault;
};

/* chanos_buf_init makes b an empty buffer over the given memory, whose
 * faults are not described (b->fault NULL). */
static inline void chanos_buf_init(struct chanos_buf *b, void *data, size_t cap,
                                   int *fds, uint32_t fds_cap)
{
    b->data = (uint8_t *)data;
    b->cap = cap;
    b->len = 0;
    b->fds = fds;
    b->fds_cap = fds_cap;
    b->nfds = 0;
    memset(b->give, 0, sizeof b->give);
    b->fault = NULL;
}

/* chanos_buf_reset empties b, keeping its memory. */
static inline void chanos_buf_reset(struct chanos_buf *b)
{
    b->len = 0;
    b->nfds = 0;
    memset(b->give, 0, sizeof b->give);
}

/*
 * Encoding and decoding state used by generated code. Errors are sticky:
 * after the first one every call is a no-op that returns a zero value, and
 * chanos_enc_end / chanos_dec_end report it. Applications normally call
 * the generated functions instead.
 *
 * The first error is also described in a fault record, buf->fault for an
 * encoder and fault for a decoder, if not NULL (see struct
 * chanos_wire_fault): the helpers take the name of the field they code,
 * as Go's wire.Encoder and wire.Decoder do (NULL: ""), and generated code
 * adds the path of structs and arrays around it (chanos_wire_leave_), as
 * it returns from the fault. The record lives outside the state, in the
 * caller's hands, because the state is a local of the generated function
 * that fails; nothing is written to it while all goes well.
 */
struct chanos_enc {
    struct chanos_buf *buf;
    size_t start;    /* offset of the frame's header in buf->data */
    size_t pos;      /* offset of the next byte; may run past buf->cap */
    uint32_t ncaps;  /* capabilities appended so far */
    int err;         /* first value error (BOUND, NUL, ENUM, CAP) */
    const char *name; /* the frame, for faults (buf->fault); NULL: none */
};

struct chanos_dec {
    const uint8_t *frame;
    size_t len;      /* frame length */
    size_t pos;      /* offset of the next byte, <= len */
    const int *fds;  /* the fds received with the frame */
    uint32_t nfds;
    uint32_t ncaps;  /* the header's ncaps */
    uint32_t caps;   /* capability values decoded so far */
    int err;         /* first error */
    const char *name;                /* the frame, for faults; NULL: none */
    struct chanos_wire_fault *fault; /* where to describe err; NULL: nowhere */
};

/*
 * The fault path, out of line and with few arguments, so that the inline
 * helpers stay small enough to be inlined: only a failing frame reaches
 * it. Each records err (unless an error came first) for field.
 * chanos_enc_bad_ is for the value about to be written, whose error
 * e.err is: an enum v of n enumerators (ENUM), a count v over the bound n
 * (BOUND). It takes a copy of the encoder, whose address is then never
 * taken, so that the compiler may keep its state in registers while it
 * writes the frame's bytes (a store through a byte pointer may otherwise
 * be a store to it).
 * chanos_dec_short_ is for a field the frame ends in (TRUNCATED);
 * chanos_dec_bad_ for the value v just read: a bool byte (BOOL), an enum
 * of n enumerators (ENUM), a count over the bound n (BOUND) or of
 * elements of n bytes that the bytes left cannot hold (TRUNCATED). The
 * others are those of generated code.
 *
 * The helpers that begin, end or read a frame are CHANOS_INLINE_: their
 * fault path, small as it is, would otherwise make the compiler call them
 * instead of inlining them into every generated decoder.
 */
#if defined(__GNUC__) || defined(__clang__)
#define CHANOS_COLD_ __attribute__((cold, noinline))
#define CHANOS_INLINE_ static inline __attribute__((always_inline))
#else
#define CHANOS_COLD_
#define CHANOS_INLINE_ static inline
#endif
CHANOS_COLD_ void chanos_enc_bad_(struct chanos_enc e, const char *field,
                                  uint32_t v, uint32_t n);
CHANOS_COLD_ void chanos_dec_short_(struct chanos_dec *d, const char *field);
CHANOS_COLD_ void chanos_dec_bad_(struct chanos_dec *d, int err,
                                  const char *field, uint32_t v, uint32_t n);
/* chanos_enc_end_fault_ and chanos_dec_end_fault_ are the failures of
 * chanos_enc_end and chanos_dec_end: they record what the end found
 * wrong (NOSPACE, SIZE; TRAILING, CAP) and return the first error; the
 * encoder's is a copy, as chanos_enc_bad_'s. */
CHANOS_COLD_ int chanos_enc_end_fault_(struct chanos_enc e);
CHANOS_COLD_ int chanos_dec_end_fault_(struct chanos_dec *d);
/* chanos_dec_header_ describes the first fault of d's frame header in the
 * order of docs/wire.md: length, size, message number msg (-1: any),
 * flags for kind (-1: any), ncaps against the fds received; it records it
 * whatever came before, and returns its code (0: none). */
CHANOS_COLD_ int chanos_dec_header_(struct chanos_dec *d, int msg, int kind);
/* chanos_dec_unknown_ records that the frame's message number names no
 * message of the interface iface, and returns UNKNOWN_MESSAGE. */
CHANOS_COLD_ int chanos_dec_unknown_(struct chanos_dec *d, const char *iface);
/* chanos_enc_refuse_ records, in out->fault, that an interface-wide
 * encoder of iface was given msg (UNKNOWN_MESSAGE, name NULL) or a kind
 * that the frame name does not have (HEADER; rpc: whether it is an
 * rpc's), and returns that code. */
CHANOS_COLD_ int chanos_enc_refuse_(struct chanos_buf *out, int err,
                                    const char *iface, const char *name,
                                    unsigned msg, unsigned kind, bool rpc);
/* chanos_wire_leave_ adds field, the struct field or argument the fault
 * came out of, to the front of f's path (Go's Decoder.Leave);
 * chanos_wire_leave_index_ adds element i of the array field ("": of an
 * array type). f NULL: nothing. */
CHANOS_COLD_ void chanos_wire_leave_(struct chanos_wire_fault *f,
                                     const char *field);
CHANOS_COLD_ void chanos_wire_leave_index_(struct chanos_wire_fault *f,
                                           const char *field, uint32_t i);

/*
 * chanos_enc_room_ advances the frame by n bytes and returns where to write
 * them, or NULL if they fall outside the buffer.
 */
static inline uint8_t *chanos_enc_room_(struct chanos_enc *e, size_t n)
{
    size_t pos = e->pos;
    size_t cap = e->buf->cap;

    e->pos = pos + n;
    if (pos > cap || n > cap - pos)
        return NULL;
    return e->buf->data + pos;
}

/*
 * chanos_enc_begin_ starts a frame of msg and flags at out->len, named
 * name (as "kv.put", a static string) in its faults, which go to
 * out->fault; chanos_enc_begin starts one without a name.
 */
CHANOS_INLINE_ void chanos_enc_begin_(struct chanos_enc *e,
                                      struct chanos_buf *out, uint16_t msg,
                                      unsigned flags, const char *name)
{
    struct chanos_hdr h = { 0, msg, (uint8_t)flags, 0, 0, 0 };
    uint8_t *p;

    e->buf = out;
    e->start = out->len;
    e->pos = out->len;
    e->ncaps = 0;
    e->err = 0;
    e->name = name;
    p = chanos_enc_room_(e, CHANOS_HEADER_SIZE);
    if (p != NULL)
        chanos_hdr_put(p, &h); /* size and ncaps are patched at the end */
}

static inline void chanos_enc_begin(struct chanos_enc *e,
                                    struct chanos_buf *out, uint16_t msg,
                                    unsigned flags)
{
    chanos_enc_begin_(e, out, msg, flags, NULL);
}

/*
 * chanos_enc_end finishes the frame: on success it patches size and ncaps
 * and commits the frame and its fds to the buffer; on failure it returns
 * the first error (value errors before NOSPACE) and leaves the buffer as
 * it was.
 */
CHANOS_INLINE_ int chanos_enc_end(struct chanos_enc *e)
{
    struct chanos_buf *b = e->buf;
    size_t size = e->pos - e->start;
    uint8_t *p;

    if (e->err != 0 || e->pos > b->cap || e->ncaps > b->fds_cap - b->nfds ||
        size > UINT32_MAX)
        return chanos_enc_end_fault_(*e);
    p = b->data + e->start;
    chanos_store_u32(p, (uint32_t)size);
    p[7] = (uint8_t)e->ncaps;
    b->len = e->pos;
    b->nfds += e->ncaps;
    return CHANOS_OK;
}

static inline void chanos_enc_u8(struct chanos_enc *e, uint8_t v)
{
    uint8_t *p = chanos_enc_room_(e, 1);

    if (p != NULL)
        p[0] = v;
}

static inline void chanos_enc_u16(struct chanos_enc *e, uint16_t v)
{
    uint8_t *p = chanos_enc_room_(e, 2);

    if (p != NULL)
        chanos_store_u16(p, v);
}

static inline void chanos_enc_u32(struct chanos_enc *e, uint32_t v)
{
    uint8_t *p = chanos_enc_room_(e, 4);

    if (p != NULL)
        chanos_store_u32(p, v);
}

static inline void chanos_enc_u64(struct chanos_enc *e, uint64_t v)
{
    uint8_t *p = chanos_enc_room_(e, 8);

    if (p != NULL)
        chanos_store_u64(p, v);
}

static inline void chanos_enc_i8(struct chanos_enc *e, int8_t v)
{
    uint8_t u;

    memcpy(&u, &v, 1);
    chanos_enc_u8(e, u);
}

static inline void chanos_enc_i16(struct chanos_enc *e, int16_t v)
{
    uint16_t u;

    memcpy(&u, &v, 2);
    chanos_enc_u16(e, u);
}

static inline void chanos_enc_i32(struct chanos_enc *e, int32_t v)
{
    uint32_t u;

    memcpy(&u, &v, 4);
    chanos_enc_u32(e, u);
}

static inline void chanos_enc_i64(struct chanos_enc *e, int64_t v)
{
    uint64_t u;

    memcpy(&u, &v, 8);
    chanos_enc_u64(e, u);
}

static inline void chanos_enc_char(struct chanos_enc *e, char v)
{
    uint8_t u;

    memcpy(&u, &v, 1);
    chanos_enc_u8(e, u);
}

static inline void chanos_enc_bool(struct chanos_enc *e, bool v)
{
    chanos_enc_u8(e, v ? 1 : 0);
}

/* chanos_enc_fail_ fails e with err for the value v (of n) of field,
 * unless an error came first. */
static inline void chanos_enc_fail_(struct chanos_enc *e, int err,
                                    const char *field, uint32_t v, uint32_t n)
{
    if (e->err == 0) {
        e->err = err;
        chanos_enc_bad_(*e, field, v, n);
    }
}

/* chanos_enc_enum writes v, the value of field, failing with ENUM unless
 * v < n. */
static inline void chanos_enc_enum(struct chanos_enc *e, const char *field,
                                   uint32_t v, uint32_t n)
{
    if (v >= n)
        chanos_enc_fail_(e, CHANOS_ERR_ENUM, field, v, n);
    chanos_enc_u32(e, v);
}

/* chanos_enc_raw writes n bytes at p (a fixed array of 1-byte elements). */
static inline void chanos_enc_raw(struct chanos_enc *e, const void *p, size_t n)
{
    uint8_t *q = chanos_enc_room_(e, n);

    if (q != NULL && n > 0)
        memcpy(q, p, n);
}

/*
 * chanos_enc_count writes the element count n of field, a dynamic array.
 * It returns n, or 0 (after failing with BOUND) if n > max, so that a
 * loop over the returned count never reads past the array.
 */
static inline uint32_t chanos_enc_count(struct chanos_enc *e,
                                        const char *field, uint32_t n,
                                        uint32_t max)
{
    if (n > max) {
        chanos_enc_fail_(e, CHANOS_ERR_BOUND, field, n, max);
        n = 0;
    }
    chanos_enc_u32(e, n);
    return n;
}

/* chanos_enc_str writes s, failing with BOUND if longer than max bytes and
 * with NUL if it holds a NUL byte. */
void chanos_enc_str(struct chanos_enc *e, const char *field,
                    struct chanos_str s, uint32_t max);

/* chanos_enc_bytes writes b, failing with BOUND if longer than max. */
void chanos_enc_bytes(struct chanos_enc *e, const char *field,
                      struct chanos_bytes b, uint32_t max);

void chanos_enc_iref(struct chanos_enc *e, const struct chanos_iref *r);

/*
 * chanos_enc_cap appends fd to the buffer's fds and writes its index,
 * failing with CAP past CHANOS_MAX_CAPS capabilities in one frame.
 */
void chanos_enc_cap(struct chanos_enc *e, const char *field, int fd);

/*
 * chanos_enc_give_away_cap is chanos_enc_cap for a give_away_cap: it also
 * marks fd in the buffer's give set, so that a send of the buffer
 * (chanos_conn_send_buf) closes it once it has succeeded.
 */
void chanos_enc_give_away_cap(struct chanos_enc *e, const char *field, int fd);

/* chanos_dec_take_ consumes the n bytes of field and returns them, or
 * NULL (sticky TRUNCATED) if the frame ends first. */
CHANOS_INLINE_ const uint8_t *chanos_dec_take_(struct chanos_dec *d,
                                               const char *field, size_t n)
{
    const uint8_t *p;

    if (d->err != 0)
        return NULL;
    if (d->len - d->pos < n) {
        chanos_dec_short_(d, field);
        return NULL;
    }
    p = d->frame + d->pos;
    d->pos += n;
    return p;
}

/*
 * chanos_dec_begin_ starts decoding the frame in frame[0..len) with the
 * fds received beside it, named name (NULL: not known yet) in faults it
 * describes in *fault (NULL: nowhere): it parses the header into h
 * (TRUNCATED, SIZE) and positions d at the body. If nfds is not the
 * header's ncaps, d starts with the sticky error CAP: the caller's checks
 * of msg and flags still come first, and the body's faults are never
 * reached (docs/wire.md, "Order of checks" 4), so a decoder that succeeds
 * has handed on every fd. chanos_dec_begin is the same without a name or
 * a fault record.
 */
CHANOS_INLINE_ int chanos_dec_begin_(struct chanos_dec *d, struct chanos_hdr *h,
                                     const uint8_t *frame, size_t len,
                                     const int *fds, uint32_t nfds,
                                     const char *name,
                                     struct chanos_wire_fault *fault)
{
    d->frame = frame;
    d->len = len;
    d->pos = CHANOS_HEADER_SIZE;
    d->fds = fds;
    d->nfds = nfds;
    d->ncaps = 0;
    d->caps = 0;
    d->err = 0;
    d->name = name;
    d->fault = fault;
    if (len < CHANOS_HEADER_SIZE) {
        chanos_dec_header_(d, -1, -1);
        return CHANOS_ERR_TRUNCATED;
    }
    chanos_hdr_load(h, frame);
    if (h->size != len) {
        chanos_dec_header_(d, -1, -1);
        return CHANOS_ERR_SIZE;
    }
    d->ncaps = h->ncaps;
    if (nfds != h->ncaps)
        d->err = chanos_dec_header_(d, -1, -1);
    return CHANOS_OK;
}

static inline int chanos_dec_begin(struct chanos_dec *d, struct chanos_hdr *h,
                                   const uint8_t *frame, size_t len,
                                   const int *fds, uint32_t nfds)
{
    return chanos_dec_begin_(d, h, frame, len, fds, nfds, NULL, NULL);
}

/*
 * chanos_dec_begin_msg_ is chanos_dec_begin_ for a decoder of one frame
 * kind of one message: it also fails with UNKNOWN_MESSAGE if the header's
 * msg is not msg and with HEADER if the frame is not a valid one of kind.
 * chanos_dec_begin_msg is the same without a name or a fault record.
 */
CHANOS_INLINE_ int chanos_dec_begin_msg_(struct chanos_dec *d,
                                         const uint8_t *frame, size_t len,
                                         const int *fds, uint32_t nfds,
                                         uint16_t msg, unsigned kind,
                                         const char *name,
                                         struct chanos_wire_fault *fault)
{
    struct chanos_hdr h;
    int rc = chanos_dec_begin_(d, &h, frame, len, fds, nfds, name, fault);

    if (rc != 0)
        return rc;
    if (h.msg != msg || chanos_hdr_check(&h, kind) != 0)
        return chanos_dec_header_(d, msg, (int)kind);
    return CHANOS_OK;
}

static inline int chanos_dec_begin_msg(struct chanos_dec *d,
                                       const uint8_t *frame, size_t len,
                                       const int *fds, uint32_t nfds,
                                       uint16_t msg, unsigned kind)
{
    return chanos_dec_begin_msg_(d, frame, len, fds, nfds, msg, kind, NULL,
                                 NULL);
}

/*
 * chanos_dec_expect_ is, for an interface-wide decoder that has begun h's
 * frame (chanos_dec_begin_) and found its message, the rest of
 * chanos_dec_begin_msg_: it names the frame name and fails with HEADER if
 * it is not a valid one of kind, then with CAP as chanos_dec_begin_ found.
 */
CHANOS_INLINE_ int chanos_dec_expect_(struct chanos_dec *d,
                                      const struct chanos_hdr *h,
                                      unsigned kind, const char *name)
{
    d->name = name;
    if (chanos_hdr_check(h, kind) != 0 || d->err != 0)
        return chanos_dec_header_(d, -1, (int)kind);
    return CHANOS_OK;
}

/*
 * chanos_dec_end returns the first error met, else TRAILING if bytes
 * remain, else CAP if the header's ncaps differs from the number of
 * capability values decoded, else 0.
 */
CHANOS_INLINE_ int chanos_dec_end(struct chanos_dec *d)
{
    if (d->err != 0 || d->pos != d->len || d->caps != d->ncaps)
        return chanos_dec_end_fault_(d);
    return CHANOS_OK;
}

static inline uint8_t chanos_dec_u8(struct chanos_dec *d, const char *field)
{
    const uint8_t *p = chanos_dec_take_(d, field, 1);

    return p != NULL ? p[0] : 0;
}

static inline uint16_t chanos_dec_u16(struct chanos_dec *d, const char *field)
{
    const uint8_t *p = chanos_dec_take_(d, field, 2);

    return p != NULL ? chanos_load_u16(p) : 0;
}

static inline uint32_t chanos_dec_u32(struct chanos_dec *d, const char *field)
{
    const uint8_t *p = chanos_dec_take_(d, field, 4);

    return p != NULL ? chanos_load_u32(p) : 0;
}

static inline uint64_t chanos_dec_u64(struct chanos_dec *d, const char *field)
{
    const uint8_t *p = chanos_dec_take_(d, field, 8);

    return p != NULL ? chanos_load_u64(p) : 0;
}

static inline int8_t chanos_dec_i8(struct chanos_dec *d, const char *field)
{
    uint8_t u = chanos_dec_u8(d, field);
    int8_t v;

    memcpy(&v, &u, 1);
    return v;
}

static inline int16_t chanos_dec_i16(struct chanos_dec *d, const char *field)
{
    uint16_t u = chanos_dec_u16(d, field);
    int16_t v;

    memcpy(&v, &u, 2);
    return v;
}

static inline int32_t chanos_dec_i32(struct chanos_dec *d, const char *field)
{
    uint32_t u = chanos_dec_u32(d, field);
    int32_t v;

    memcpy(&v, &u, 4);
    return v;
}

static inline int64_t chanos_dec_i64(struct chanos_dec *d, const char *field)
{
    uint64_t u = chanos_dec_u64(d, field);
    int64_t v;

    memcpy(&v, &u, 8);
    return v;
}

static inline char chanos_dec_char(struct chanos_dec *d, const char *field)
{
    uint8_t u = chanos_dec_u8(d, field);
    char v;

    memcpy(&v, &u, 1);
    return v;
}

/* chanos_dec_bool reads a bool, failing with BOOL unless the byte is 0 or 1. */
static inline bool chanos_dec_bool(struct chanos_dec *d, const char *field)
{
    uint8_t u = chanos_dec_u8(d, field);

    if (u > 1)
        chanos_dec_bad_(d, CHANOS_ERR_BOOL, field, u, 0);
    return u == 1;
}

/* chanos_dec_enum reads an enum of n enumerators, failing with ENUM (and
 * returning 0) if the value is n or more. */
static inline uint32_t chanos_dec_enum(struct chanos_dec *d, const char *field,
                                       uint32_t n)
{
    uint32_t v = chanos_dec_u32(d, field);

    if (v >= n && d->err == 0) {
        chanos_dec_bad_(d, CHANOS_ERR_ENUM, field, v, n);
        return 0;
    }
    return v;
}

/* chanos_dec_raw copies n bytes to dst (a fixed array of 1-byte elements). */
static inline void chanos_dec_raw(struct chanos_dec *d, const char *field,
                                  void *dst, size_t n)
{
    const uint8_t *p = chanos_dec_take_(d, field, n);

    if (p != NULL && n > 0)
        memcpy(dst, p, n);
}

/* chanos_dec_count reads a dynamic array's element count, failing (and
 * returning 0) with BOUND if it exceeds max, then with TRUNCATED if the
 * bytes left cannot hold that many elements of elem_size bytes (0: the
 * elements' size varies, and only their reading tells), as Go's decoder
 * does, before any element is read (docs/wire.md, "Order of checks"). It
 * returns 0 after any error, so that a loop over the count reads nothing
 * once one has happened. */
static inline uint32_t chanos_dec_count(struct chanos_dec *d,
                                        const char *field, uint32_t max,
                                        size_t elem_size)
{
    uint32_t n = chanos_dec_u32(d, field);

    if (n > max) {
        chanos_dec_bad_(d, CHANOS_ERR_BOUND, field, n, max);
        return 0;
    }
    if (d->err == 0 && (uint64_t)n * elem_size > (uint64_t)(d->len - d->pos)) {
        chanos_dec_bad_(d, CHANOS_ERR_TRUNCATED, field, n, (uint32_t)elem_size);
        return 0;
    }
    return n;
}

/* chanos_dec_str reads a string of at most max bytes (BOUND, TRUNCATED,
 * NUL) and returns a view into the frame. */
struct chanos_str chanos_dec_str(struct chanos_dec *d, const char *field,
                                 uint32_t max);

/* chanos_dec_bytes reads a byte array of at most max bytes (BOUND,
 * TRUNCATED) and returns a view into the frame. */
struct chanos_bytes chanos_dec_bytes(struct chanos_dec *d, const char *field,
                                     uint32_t max);

void chanos_dec_iref(struct chanos_dec *d, const char *field,
                     struct chanos_iref *r);

/*
 * chanos_dec_cap reads a capability index, which must be the number of
 * capabilities read before it, below both the header's ncaps and nfds
 * (else CAP), and returns that received fd; -1 on error.
 */
int chanos_dec_cap(struct chanos_dec *d, const char *field);

/* ==== end wire format ==== */

/* ==== ump: shared-memory channels, see docs/ump.md ==== */

/*
 * A ump connection is two single-producer single-consumer rings of 64-byte
 * slots in a memfd shared by two processes, one ring per direction, plus
 * two Unix socket pairs to wake a side that sleeps and a connected Unix
 * socket whose end of file tells that the peer closed or died. The ring format is the one
 * the Go package interconnect/ump uses: a C process and a Go process can be
 * the two sides.
 *
 * Threads: one thread may send while another receives; concurrent sends
 * (or concurrent receives) must be serialized by the caller.
 * chanos_ump_close must not race with any other call on the connection.
 *
 * Results: 0 on success, else a negative code: one of the CHANOS_ERR_*
 * below, -EINVAL for a bad argument, or -errno from a failed system call.
 * chanos_ump_strerror describes all of them.
 */
#define CHANOS_ERR_AGAIN     (-4201) /* try variant: would block; poll the fd */
#define CHANOS_ERR_TIMEDOUT  (-4202) /* the timeout expired */
#define CHANOS_ERR_CLOSED    (-4203) /* closed by this side or by the peer */
#define CHANOS_ERR_PEER_DIED (-4204) /* the peer went away without closing */
#define CHANOS_ERR_PROTOCOL  (-4205) /* the peer broke the ring protocol */
#define CHANOS_ERR_TOO_LARGE (-4206) /* message over the maximum size */

/* The ring layout version; the slot size and the payload of one slot. */
#define CHANOS_UMP_VERSION      3
#define CHANOS_UMP_SLOT_SIZE    64
#define CHANOS_UMP_SLOT_PAYLOAD 56
#define CHANOS_UMP_DEFAULT_MAX_MSG 65536u
#define CHANOS_UMP_MAX_MSG_LIMIT   0x1fffffffu
#define CHANOS_UMP_MAX_SLOTS       (1u << 24)
/* Messages longer than CHANOS_UMP_BULK_MIN bytes (8 slots' payload) travel
 * through the bulk region of a ring pair that has one; a bulk region is a
 * power of two from CHANOS_UMP_MIN_BULK to CHANOS_UMP_MAX_BULK bytes. */
#define CHANOS_UMP_BULK_MIN        448u
#define CHANOS_UMP_MIN_BULK        4096u
#define CHANOS_UMP_MAX_BULK        (1u << 30)
/* The default spin window before sleeping, in nanoseconds: long enough
 * that a peer answering with a system call or two is waited for without a
 * wake-up (docs/ump.md, "Waiting"). */
#define CHANOS_UMP_DEFAULT_SPIN_NS 40000

/* The sides of a ring pair: the creator writes ring 0, the attacher ring 1. */
#define CHANOS_UMP_CREATOR  0
#define CHANOS_UMP_ATTACHER 1

/* Options; a zeroed struct (or NULL) gives the defaults. */
struct chanos_ump_options {
    /* Largest message (the interface's MaxFrameSize). Creator: 0 means
     * CHANOS_UMP_DEFAULT_MAX_MSG. Attacher: 0 accepts the creator's value,
     * otherwise a larger value is refused. */
    uint32_t max_msg;
    /* Slots per direction, a power of two; 0: room for two maximum
     * messages, at least 1024, or 4096 with a bulk region. */
    uint32_t ring_slots;
    /* Creator: bytes of the bulk region per direction, a power of two in
     * [CHANOS_UMP_MIN_BULK, CHANOS_UMP_MAX_BULK] and at least max_msg,
     * through which messages longer than CHANOS_UMP_BULK_MIN travel. 0:
     * room for two maximum messages and at least 4 MiB (none if max_msg <=
     * CHANOS_UMP_BULK_MIN);
     * negative: no bulk region. Attacher: ignored (the creator's). */
    int32_t bulk_size;
    /* Spin window before sleeping: 0 means CHANOS_UMP_DEFAULT_SPIN_NS, a
     * negative value sleeps at once. */
    int64_t spin_ns;
};

/*
 * The descriptors of one ring pair (see chanos_ump_files_create), -1 where
 * absent. The wake-ups travel over two connected Unix stream socket pairs,
 * the data pair and the space pair, of which side s holds end s:
 * wake[s][0], its data socket, on which it waits for data in the peer's
 * ring and sends after writing its own; wake[s][1], its space socket, on
 * which it waits for space in its own ring and sends after reading the
 * peer's. A side's ends are its own: no other process holds them, so no
 * one else can change how they behave.
 */
struct chanos_ump_files {
    int mem;          /* the sealed memfd with both rings */
    int wake[2][2];   /* wake[side][0]: data socket; wake[side][1]: space socket */
    int caps[2];      /* caps[side]: its end of the caps socket (a Unix
                       * seqpacket pair), on which descriptors sent in
                       * messages travel (docs/ump.md, "Descriptors") */
};

typedef struct chanos_ump chanos_ump; /* one side of a connection; opaque */

/*
 * chanos_ump_files_create creates the memfd and the two wake-up socket
 * pairs of a ring pair, header written and memfd sealed, for a third party
 * (the monitor) to hand to both sides: each side gets the memfd and its own
 * ends, wake[side]. The caller owns the descriptors in *out: give them to
 * chanos_ump_open or release them with chanos_ump_files_close.
 */
int chanos_ump_files_create(const struct chanos_ump_options *opts,
                            struct chanos_ump_files *out);

/* chanos_ump_files_close closes every descriptor in f that is >= 0 and
 * sets it to -1. */
void chanos_ump_files_close(struct chanos_ump_files *f);

/*
 * chanos_ump_open maps a ring pair and returns side's connection in *out.
 * It uses f->mem and side's wake-up sockets, f->wake[side], and closes
 * every other descriptor in f (the other side's ends, if f has them). It
 * takes ownership of the descriptors in f (set to -1) and of sock, a
 * connected Unix socket to the peer kept open for the connection's life,
 * on success and on failure alike. Everything received from the peer is
 * checked (seals, header; the wake-up descriptors must be two Unix stream
 * sockets, different from each other and from sock, or the open fails
 * with CHANOS_ERR_PROTOCOL). Free *out with chanos_ump_close.
 */
int chanos_ump_open(int side, struct chanos_ump_files *f, int sock,
                    const struct chanos_ump_options *opts, chanos_ump **out);

/*
 * chanos_ump_create creates a ring pair, sends its descriptors to the peer
 * over sock (SCM_RIGHTS) and waits up to timeout_ms (-1: forever) for the
 * peer's acknowledgement. chanos_ump_attach is the peer's half: it receives
 * the descriptors, checks and maps them, and acknowledges. Both take
 * ownership of sock, on success and on failure. Free *out with
 * chanos_ump_close.
 */
int chanos_ump_create(int sock, const struct chanos_ump_options *opts,
                      int timeout_ms, chanos_ump **out);
int chanos_ump_attach(int sock, const struct chanos_ump_options *opts,
                      int timeout_ms, chanos_ump **out);

/*
 * chanos_ump_send copies len bytes from msg into the ring as one message
 * (CHANOS_ERR_TOO_LARGE over the maximum). It spins, then sleeps, while the
 * ring lacks room for the whole message, at most timeout_ms (-1: forever;
 * 0: do not wait). On CHANOS_ERR_TIMEDOUT nothing was written. The caller
 * keeps ownership of msg.
 *
 * chanos_ump_try_send never waits: CHANOS_ERR_AGAIN when the ring is full,
 * after which chanos_ump_fd becomes readable once there may be room.
 */
int chanos_ump_send(chanos_ump *c, const void *msg, size_t len, int timeout_ms);
int chanos_ump_try_send(chanos_ump *c, const void *msg, size_t len);

/*
 * chanos_ump_send_fds is chanos_ump_send of a message with nfds
 * descriptors attached (at most CHANOS_UMP_MAX_FDS): the receiver gets
 * duplicates of them (chanos_ump_recv_fds), and the caller keeps fds. It
 * also waits while the peer has not yet taken the descriptors of earlier
 * messages (the kernel bounds them in flight); on failure nothing was
 * sent. chanos_ump_try_send_fds does not wait: CHANOS_ERR_AGAIN.
 *
 * chanos_ump_recv_fds takes the n descriptors announced by the message
 * just received (a chanos frame's ncaps), into fds[0..n): the caller owns
 * them. Call it after the receive that returned the message and before
 * the next; descriptors that do not match what the message announces end
 * the connection (CHANOS_ERR_PROTOCOL), and those received are closed.
 */
#define CHANOS_UMP_MAX_FDS 253

/*
 * An endpoint is the far side of a fresh ring pair as one descriptor,
 * which a message carries to another process (docs/ump.md, "Endpoints"):
 * a Unix stream socket on which the hello of the handshake, with the
 * attacher's descriptors and a label, waits, and which becomes the
 * attacher's liveness socket. chanos_ump_endpoint_new makes the pair,
 * opens its creator side in *mine and returns the endpoint in *ep (the
 * caller's to send, as a give_away_cap, or close); label (at most
 * CHANOS_UMP_MAX_LABEL bytes) travels with it. chanos_ump_endpoint_open
 * opens the attacher side from ep, which it takes over (closed on failure
 * too), copies the label into label[0..cap) and its length into *len; it
 * never waits: CHANOS_ERR_PROTOCOL for what is not an endpoint (or one
 * opened already), CHANOS_ERR_TOO_LARGE for a label over cap.
 */
#define CHANOS_UMP_MAX_LABEL 1024
int chanos_ump_endpoint_new(const struct chanos_ump_options *opts,
                            const void *label, size_t len, chanos_ump **mine,
                            int *ep);
int chanos_ump_endpoint_open(int ep, const struct chanos_ump_options *opts,
                             void *label, size_t cap, size_t *len,
                             chanos_ump **out);
int chanos_ump_send_fds(chanos_ump *c, const void *msg, size_t len,
                        const int *fds, unsigned nfds, int timeout_ms);
int chanos_ump_try_send_fds(chanos_ump *c, const void *msg, size_t len,
                            const int *fds, unsigned nfds);
int chanos_ump_recv_fds(chanos_ump *c, int *fds, unsigned n);

/*
 * chanos_ump_recv waits at most timeout_ms (-1: forever; 0: do not wait)
 * for the next message and sets *msg and *len to it. The bytes belong to
 * the connection and stay valid until the next receive or close; the
 * caller must not free them. After the peer closed or died, the messages it
 * had completely sent are returned first, then CHANOS_ERR_CLOSED or
 * CHANOS_ERR_PEER_DIED.
 *
 * chanos_ump_try_recv never waits: CHANOS_ERR_AGAIN when no message is
 * there, after which chanos_ump_fd becomes readable once one may be.
 */
int chanos_ump_recv(chanos_ump *c, const void **msg, size_t *len,
                    int timeout_ms);
int chanos_ump_try_recv(chanos_ump *c, const void **msg, size_t *len);

/*
 * chanos_ump_spin_recv is one look of the caller's own spin loop, for a
 * thread that serves several connections: it returns the next message as
 * chanos_ump_try_recv does, and never waits, but on CHANOS_ERR_AGAIN it
 * does not announce a sleep (and withdraws one a try_recv left), so the
 * peer's sends make no system call to wake us and chanos_ump_fd is not
 * armed. Before sleeping on chanos_ump_fd, call chanos_ump_try_recv, which
 * arms it (and may still return a message). Costs no system call. A peer
 * that died without closing is noticed by try_recv and recv, not here.
 */
int chanos_ump_spin_recv(chanos_ump *c, const void **msg, size_t *len);

/*
 * chanos_ump_fd returns a descriptor (an epoll set) that polls readable when
 * a try variant that returned CHANOS_ERR_AGAIN may now succeed, or the
 * connection ended. It belongs to the connection: do not close it.
 */
int chanos_ump_fd(const chanos_ump *c);

/* chanos_ump_spin_ns returns how long a wait spins at most before it
 * sleeps, in nanoseconds (struct chanos_ump_options' spin_ns): 0 if it
 * sleeps at once, -EINVAL for NULL. */
int64_t chanos_ump_spin_ns(const chanos_ump *c);

/* chanos_ump_err returns why the connection ended (CHANOS_ERR_CLOSED,
 * CHANOS_ERR_PEER_DIED, CHANOS_ERR_PROTOCOL), or 0 while it is open. */
int chanos_ump_err(const chanos_ump *c);

/*
 * chanos_ump_peer_gone looks, without waiting, whether the peer's end of
 * the connection's liveness socket has closed: 0 while the peer is there,
 * CHANOS_ERR_CLOSED once it closed the connection, CHANOS_ERR_PEER_DIED
 * once its process ended without closing. Messages the peer sent before
 * remain to be received. It costs one system call (a peek at the socket)
 * and may be called from any thread while others send and receive; -EINVAL
 * for NULL.
 */
int chanos_ump_peer_gone(chanos_ump *c);

/* chanos_ump_max_msg returns the connection's maximum message size. */
size_t chanos_ump_max_msg(const chanos_ump *c);

/*
 * chanos_ump_close closes the connection: the peer receives what was sent
 * before, then CHANOS_ERR_CLOSED. It unmaps the rings, closes every
 * descriptor and frees c. NULL is allowed.
 */
void chanos_ump_close(chanos_ump *c);

/* chanos_ump_strerror describes a ump result, or defers to
 * chanos_strerror. The string is static. */
const char *chanos_ump_strerror(int err);

/* ==== end ump ==== */

/* ==== domains: the monitor, exports, connections and rpc (docs/c-domains.md) ==== */

/*
 * A domain is a process's session with its machine's monitor
 * (docs/monitor-protocol.md). Through it the process exports services by
 * name (chanos_export, chanos_accept) and connects to them
 * (chanos_connect). Connections are ump ring pairs wrapped in a
 * chanos_conn, which adds rpc call ids, error replies and cancels.
 *
 * Threads. libchanos starts no thread. A domain's monitor socket is read by
 * whichever call needs it (chanos_accept, chanos_connect,
 * chanos_nameservice_connect, chanos_export, chanos_domain_poll), so
 * one thread at a time may call into a domain and its listeners; a second
 * concurrent call fails with CHANOS_ERR_BUSY instead of racing. A
 * chanos_conn allows one sending thread and one receiving thread at a time
 * (chanos_conn_call counts as both); a concurrent second sender or
 * receiver fails with CHANOS_ERR_BUSY.
 *
 * Errors: besides -errno, the wire codes and the ump codes above, the
 * following codes (all in -4399..-4301); chanos_strerror describes them.
 * The monitor's error replies map to INVALID..MONITOR.
 */
#define CHANOS_ERR_NO_MONITOR   (-4301) /* no monitor listens in the directory */
#define CHANOS_ERR_MONITOR_LOST (-4302) /* the monitor session ended */
#define CHANOS_ERR_INVALID      (-4303) /* monitor: invalid name, iface or size */
#define CHANOS_ERR_EXISTS       (-4304) /* monitor: the name is taken */
#define CHANOS_ERR_NOT_FOUND    (-4305) /* monitor: no such name (in time) */
#define CHANOS_ERR_MISMATCH     (-4306) /* monitor: the export's iface differs */
#define CHANOS_ERR_LIMIT        (-4307) /* monitor: a limit was reached */
#define CHANOS_ERR_DENIED       (-4308) /* monitor: the export's policy refused */
#define CHANOS_ERR_MONITOR      (-4309) /* monitor: internal or unknown failure */
#define CHANOS_ERR_UNSAFE_DIR   (-4310) /* the monitor is not this user's */
#define CHANOS_ERR_BUSY         (-4311) /* concurrent use against the rules */
#define CHANOS_ERR_REMOTE       (-4312) /* the peer answered with an error reply */
#define CHANOS_ERR_NOT_OWNER    (-4313) /* nameservice: another domain owns the name */
#define CHANOS_ERR_MONITOR_FULL (-4314) /* join: the monitor has no free session */
#define CHANOS_ERR_NO_ROUTE     (-4315) /* monitor: the export is on another machine */
#define CHANOS_ERR_HANDED_OVER  (-4316) /* the listener's export was handed over */
#define CHANOS_ERR_HEALTH_FULL  (-4317) /* health: the table of statuses is full */
#define CHANOS_ERR_INBOX_FULL   (-4318) /* a call's reply waits behind unread frames */

typedef struct chanos_domain chanos_domain;     /* opaque */
typedef struct chanos_listener chanos_listener; /* opaque */
typedef struct chanos_conn chanos_conn;         /* opaque */

/* The call timeout of a domain whose chanos_join_opts.timeout_ms is 0:
 * the Go library's chanos.DefaultCallTimeout. */
#define CHANOS_DEFAULT_CALL_TIMEOUT_MS 10000

/* Options of chanos_join; NULL or a zeroed struct gives the defaults. */
struct chanos_join_opts {
    /* The monitor's directory. NULL: $CHANOS_DIR, else
     * $XDG_RUNTIME_DIR/chanos, else ${TMPDIR:-/tmp}/chanos-UID. */
    const char *dir;
    /* The program name shown by `chanos ps` (at most 256 bytes used).
     * NULL: the executable's name. */
    const char *program;
    /* The domain's call timeout: how long a call to the monitor that has
     * no bound of its own waits for the answer (the hello, chanos_export,
     * the withdraw of chanos_listener_close) and how long chanos_connect
     * and chanos_nameservice_connect given -1 wait for their name. 0:
     * CHANOS_DEFAULT_CALL_TIMEOUT_MS (10 s); negative: no bound. A
     * monitor that does not answer in time (stopped, wedged) gives
     * CHANOS_ERR_TIMEDOUT rather than a hang. */
    int timeout_ms;
    /* The spin window of the domain's connections (struct
     * chanos_ump_options' spin_ns): 0 takes $CHANOS_SPIN_WINDOW if set (a
     * duration such as "160us", or -1; chanos_join fails with -EINVAL on
     * anything else), else keeps CHANOS_UMP_DEFAULT_SPIN_NS; negative
     * sleeps at once. Longer windows pay off when replies take longer than
     * the default to come (large payloads). */
    int64_t spin_ns;
    /* CHANOS_JOIN_NO_REJOIN, or 0. */
    unsigned flags;
    /* If set, called from within a call on the domain (libchanos starts
     * no thread) when the session with the monitor ends
     * (CHANOS_MONITOR_LOST, err CHANOS_ERR_MONITOR_LOST) and when the
     * domain has rejoined a new monitor (CHANOS_MONITOR_REJOINED, err 0,
     * or the error of the first name that could not be exported again).
     * It must not call into the domain. */
    void (*on_monitor)(void *arg, int event, int err);
    void *on_monitor_arg;
    /* The binder of connections between machines of a cluster:
     * libchanos_net's chanos_net_binder(). NULL: libchanos does not speak
     * the net interconnect itself: chanos_connect of an export of another
     * machine fails with CHANOS_ERR_NO_ROUTE, and the domain's exports
     * take no connections from other machines. With it, connections from
     * other machines come through chanos_accept like local ones, and
     * chanos_domain_fd polls readable for them too. */
    const struct chanos_net_binder *net;
};

/*
 * Connections between machines (docs/net.md, "Binding between machines"):
 * the monitors route the bind and make each side's credential for the one
 * connection; the client domain then dials the server domain itself, and
 * the server domain accepts on a TCP listener its monitor handed it.
 * libchanos speaks no network itself: it hands what the monitor says to a
 * binder (chanos_join_opts.net), libchanos_net's chanos_net_binder(), and
 * the connections the binder returns are chanos_conns like any other (the
 * generated stubs work on them), whose chanos_conn_ump is NULL.
 */

/* What the reply to a bind of an export of another machine says. */
struct chanos_net_bind {
    const char *addr;        /* the server domain's host:port */
    const char *server_name; /* the TLS server name to ask for */
    const uint8_t *peer;     /* SHA-256 of the server's certificate: 32 bytes */
    const uint8_t *cert;     /* this side's certificate, DER */
    size_t cert_len;
    const uint8_t *key; /* its private key, PKCS#8 DER */
    size_t key_len;
    int auth_only;      /* authenticated only, not encrypted */
    uint32_t max_frame; /* the export's largest frame */
    uint64_t conn_id;   /* the monitor's name of the connection (peer_gone) */
};

/* What an incoming message says of a connection from another machine that
 * the server domain is to accept: the client's credential is pinned, this
 * side's is presented to the client asking for server_name. */
struct chanos_net_grant {
    const char *server_name;
    const uint8_t *peer; /* SHA-256 of the client's certificate: 32 bytes */
    const uint8_t *cert; /* this side's certificate, DER */
    size_t cert_len;
    const uint8_t *key; /* its private key, PKCS#8 DER */
    size_t key_len;
    int auth_only;
    uint64_t conn_id;
    /* libchanos's own record of the connection, copied by grant and handed
     * back by accept: at most CHANOS_NET_GRANT_TAG_MAX bytes. */
    const void *tag;
    size_t tag_len;
};

#define CHANOS_NET_GRANT_TAG_MAX 512

/*
 * A binder keeps a state per domain (open), which dials, accepts and ends
 * the domain's connections between machines. Only dial is required: a
 * binder without listen, grant and accept takes no connections from other
 * machines (the monitor refuses binds to the domain's exports from other
 * machines with no route). All calls but close may come from any thread;
 * libchanos makes them from within calls on the domain.
 */
struct chanos_interface; /* below */
struct chanos_net_binder {
    /* open makes the domain's state in *state and, if the binder accepts,
     * a descriptor in *wait_fd that polls readable when accept may have a
     * connection (else -1). */
    int (*open)(void **state, int *wait_fd);
    /* dial opens the connection b describes into *out, or returns an
     * error (a CHANOS_ERR_* or negative errno). */
    int (*dial)(void *state, const struct chanos_net_bind *b, chanos_conn **out);
    /* listen accepts connections from other machines on the listening TCP
     * socket fd, which it takes (closed on failure too). */
    int (*listen)(void *state, int fd, uint32_t max_frame);
    /* grant admits the one connection g describes, for a while. */
    int (*grant)(void *state, const struct chanos_net_grant *g);
    /* accept returns an admitted connection without waiting: 0, *out, and
     * its grant's tag in tag[0..*tag_len); CHANOS_ERR_AGAIN if none. */
    int (*accept)(void *state, chanos_conn **out, void *tag, size_t *tag_len);
    /* peer_gone ends the connection conn_id, whose peer the monitor says
     * has gone: err is CHANOS_ERR_PEER_DIED, or the binder's "network
     * lost" when network_lost (the peer's machine left the cluster). */
    void (*peer_gone)(void *state, uint64_t conn_id, int network_lost);
    /* close stops accepting; connections already returned go on. */
    void (*close)(void *state);
    /*
     * Optional: channel endpoints sent to other machines
     * (docs/capabilities.md, "Between machines"). export_endpoint takes
     * far, the opened end of an endpoint of *iface, and exports it
     * privately, under no name, from a monitor session of its own in the
     * directory dir (as program): it stores the export's iref in *ref and
     * a handle in *handle, and then relays the one connection that binds
     * the export to far, frame for frame both ways, until either ends; an
     * export not bound within a minute is withdrawn and far closed. The
     * caller says with endpoint_sent(handle, sent) whether the frame that
     * carries the iref went: if not, the export is withdrawn at once.
     * Without them, endpoints of this machine are not sent to others
     * (CHANOS_ERR_CAP).
     */
    int (*export_endpoint)(const char *dir, const char *program,
                           chanos_ump *far,
                           const struct chanos_interface *iface,
                           struct chanos_iref *ref, void **handle);
    void (*endpoint_sent)(void *handle, int sent);
};

/* chanos_join_opts.flags: end the domain with its session, as before
 * rejoining existed: every later call fails with CHANOS_ERR_MONITOR_LOST. */
#define CHANOS_JOIN_NO_REJOIN 1u

/* Events of chanos_join_opts.on_monitor. */
#define CHANOS_MONITOR_LOST     1
#define CHANOS_MONITOR_REJOINED 2

/*
 * chanos_join connects to the monitor, says hello (protocol version 4) and
 * returns the domain in *out, which the caller owns: free it with
 * chanos_domain_close. CHANOS_ERR_NO_MONITOR if no monitor listens,
 * CHANOS_ERR_UNSAFE_DIR if the directory is not private to this user or
 * the process on its socket runs as another user (SO_PEERCRED; a rejoin
 * checks both too, and waits for a monitor that passes),
 * CHANOS_ERR_TIMEDOUT if it does not answer within the call timeout,
 * CHANOS_ERR_MONITOR_FULL if the monitor answered hello with "monitor
 * full: N of N sessions" (its --max-domains cap is reached).
 *
 * Every call to the monitor is bounded: by its own timeout_ms where it has
 * one, else by the domain's call timeout (see chanos_join_opts); a
 * monitor that does not answer in time gives CHANOS_ERR_TIMEDOUT. A call
 * that timed out may still take effect once a stopped monitor resumes.
 *
 * Idle sessions. The monitor pings a session that has been idle; libchanos
 * answers by reading the socket, which it does in any call on the domain
 * (chanos_domain_poll, chanos_accept, ...). A program that leaves its
 * domain alone for long (it sleeps, say) does not answer; its session is
 * then dropped only when the monitor runs out of sessions or of reply
 * memory and it is among the sessions to evict (docs/quotas.md). Calling
 * chanos_domain_poll(d, 0) from time to time, or polling
 * chanos_domain_fd, keeps a session answering.
 */
int chanos_join(chanos_domain **out, const struct chanos_join_opts *opts);

/*
 * chanos_domain_close leaves the monitor: the monitor withdraws the
 * domain's exports and releases its names. Listeners still open are freed
 * (their pending connections closed); connections already returned by
 * chanos_accept or chanos_connect stay open and remain the caller's. NULL
 * is allowed.
 */
void chanos_domain_close(chanos_domain *d);

/* The domain's id and the monitor's machine id, from hello. */
uint64_t chanos_domain_id(const chanos_domain *d);
uint64_t chanos_domain_machine(const chanos_domain *d);

/*
 * chanos_domain_fd returns the descriptor to poll for the domain: the
 * monitor socket or, for a domain with a binder that accepts
 * (chanos_join_opts.net), an epoll descriptor that also becomes readable
 * when a connection from another machine is ready. When it is readable,
 * call chanos_domain_poll(d, 0) or chanos_accept(l, 0, ...). It belongs
 * to the domain; do not close it or read from it. Its number stays the
 * same across a rejoin: while the domain waits for a new monitor, the
 * monitor's part is a timer that becomes readable when the next attempt
 * is due.
 */
int chanos_domain_fd(const chanos_domain *d);

/*
 * chanos_domain_poll reads what the monitor sent (incoming connections,
 * which it queues for chanos_accept) for at most timeout_ms (-1: until a
 * frame arrives; 0: only what is there). 0, or CHANOS_ERR_MONITOR_LOST
 * when the session ended.
 *
 * Monitor loss and restart. The call that finds the session ended
 * (chanos_domain_poll, chanos_accept, or any other) returns
 * CHANOS_ERR_MONITOR_LOST, once, and on_monitor is told. Unless the
 * domain joined with CHANOS_JOIN_NO_REJOIN, it then rejoins by itself:
 * chanos_domain_poll and chanos_accept (which return 0 and
 * CHANOS_ERR_TIMEDOUT meanwhile), and any call on the domain, dial the
 * directory's socket again when an attempt is due (10 ms, doubling to
 * 250 ms), say hello (a new domain id) and export every open listener's
 * name again. An attempt waits for no one: the monitor's answers take it
 * on in whichever call reads them, so a call given 0 never blocks on it;
 * an answer that does not come within the call timeout fails the attempt
 * and arms the next. Calls that need the monitor fail with
 * CHANOS_ERR_MONITOR_LOST while no attempt is under way, and wait for one
 * under way within their own bound (CHANOS_ERR_TIMEDOUT past it). A
 * listener whose name cannot be exported again (another domain took it)
 * fails its chanos_accept with that error. Connections already open never
 * ran through the monitor and go on throughout.
 */
int chanos_domain_poll(chanos_domain *d, int timeout_ms);

/*
 * chanos_export registers name for a service of interface iface whose
 * largest frame is max_frame bytes (the generated IFACE_MAX_FRAME_SIZE)
 * and returns its listener in *out. The listener belongs to the caller
 * until chanos_listener_close, or chanos_domain_close, frees it.
 */
int chanos_export(chanos_domain *d, const char *name, const char *iface,
                  uint32_t max_frame, chanos_listener **out);

/*
 * Who may bind an export (docs/security.md). NULL or a zeroed struct is the
 * default: any domain of the monitor, by name or by iref.
 */
#define CHANOS_EXPORT_PRIVATE 1u /* bind by iref only: by name is denied */
struct chanos_export_opts {
    unsigned flags; /* CHANOS_EXPORT_PRIVATE, or 0 */
    /* If nuids > 0, only domains of these uids (SO_PEERCRED) may bind; at
     * most 16. A monitor admits only its own user's domains today. */
    const uint32_t *uids;
    size_t nuids;
    /* If nprograms > 0, only domains whose program (chanos_join_opts'
     * program, as they named themselves at hello) is one of these may
     * bind: 1 to 256 bytes each, no newline, 2048 bytes in all. A program
     * names itself: this keeps honest programs apart, not a hostile one of
     * the same user; for that, export privately and hand out the iref. */
    const char *const *programs;
    size_t nprograms;
};

/*
 * chanos_export_with is chanos_export with a policy, opts (NULL: the
 * default). CHANOS_ERR_INVALID for flags it does not know or lists over
 * their bounds.
 */
int chanos_export_with(chanos_domain *d, const char *name, const char *iface,
                       uint32_t max_frame,
                       const struct chanos_export_opts *opts,
                       chanos_listener **out);

/*
 * An interface as binding sees it: the generated header's IFACE_INTERFACE
 * (IFACE_INTERFACE_NAME, IFACE_MAX_FRAME_SIZE, IFACE_FINGERPRINT). The
 * monitor binds a client to an export only if both name the same
 * interface and, where both declare a fingerprint (not 0), the same
 * fingerprint: a client built from another version of the interface gets
 * CHANOS_ERR_MISMATCH, and chanos_domain_error names the interface and
 * both fingerprints (docs/idl.md, "Fingerprints").
 */
struct chanos_interface {
    const char *name;
    uint32_t max_frame;
    uint64_t fingerprint; /* 0: none declared, not checked */
    /* The interface as an IDL file of its own, in pieces that join into
     * it, NULL-terminated (the generated IFACE_definition); NULL for none.
     * Only a reflection service reads it (docs/reflection.md):
     * chanos_export_iface and chanos_adopt keep the pointer, so the
     * pieces must live as long as the export (the generated ones are
     * static). */
    const char *const *definition;
};

/*
 * Channel endpoints as capabilities (docs/capabilities.md): a fresh
 * connection of *iface between this program and whichever domain opens
 * the endpoint, with no monitor and no name. chanos_endpoint_new returns
 * this side's connection in *mine (the caller's: chanos_conn_close) and
 * the endpoint in *ep, a descriptor to send in a message as a
 * give_away_cap (or close: the connection then sees its peer gone).
 * chanos_endpoint_open opens an endpoint received in a message, which it
 * takes over, into *out; an endpoint of another interface, or of another
 * fingerprint, is refused with CHANOS_ERR_MISMATCH and closed, and one
 * that is not an endpoint (or was opened already) with
 * CHANOS_ERR_PROTOCOL. Neither waits.
 */
int chanos_endpoint_new(const struct chanos_interface *iface,
                        chanos_conn **mine, int *ep);
int chanos_endpoint_open(int ep, const struct chanos_interface *iface,
                         chanos_conn **out);

/*
 * Endpoints from other machines (docs/capabilities.md, "Between
 * machines"). An endpoint that a domain of another machine sent on a
 * connection between machines arrives as a descriptor too: it holds the
 * iref of the export that re-binds it, and the domain whose connection
 * received it. chanos_endpoint_open binds that iref through the monitors,
 * as chanos_connect_ref_iface does, in that domain (so it is a call on
 * the domain: not while another thread is in one), and returns a
 * connection between machines of *iface; it may wait, up to the domain's
 * call timeout. The export's monitor checks the interface and its
 * fingerprint (CHANOS_ERR_MISMATCH) and the token; an endpoint opened
 * already, withdrawn (not opened within a minute) or whose iref is not
 * the export's gives CHANOS_ERR_NOT_FOUND or CHANOS_ERR_DENIED (a second
 * open just after the first, while the sender withdraws its export, may
 * fail at the connection instead); chanos_domain_error says more. One
 * opened in another process, or after its domain was closed, gives
 * CHANOS_ERR_NO_ROUTE. The descriptor is taken over in every case.
 *
 * chanos_endpoint_ref stores in *out the iref such an endpoint holds: 0,
 * or -EINVAL for a descriptor that is not one (an endpoint of this
 * machine, or anything else). The descriptor stays the caller's.
 */
int chanos_endpoint_ref(int ep, struct chanos_iref *out);

/*
 * chanos_export_iface is chanos_export_with for the interface *iface,
 * whose fingerprint the export declares. chanos_export and
 * chanos_export_with declare none.
 */
int chanos_export_iface(chanos_domain *d, const char *name,
                        const struct chanos_interface *iface,
                        const struct chanos_export_opts *opts,
                        chanos_listener **out);

/*
 * chanos_domain_error returns the detail of the monitor's last error reply
 * to d (a refused export or bind, say), or "": a C string owned by d,
 * valid until its next call to the monitor.
 */
#define CHANOS_DOMAIN_ERROR_MAX 1024
const char *chanos_domain_error(const chanos_domain *d);

/*
 * chanos_accept waits at most timeout_ms (-1: forever; 0: do not wait) for
 * a client to connect to the export, reading the monitor's socket
 * meanwhile, and returns the server side of the connection in *out, which
 * the caller owns (chanos_conn_close). CHANOS_ERR_TIMEDOUT when none came.
 */
int chanos_accept(chanos_listener *l, int timeout_ms, chanos_conn **out);

/* chanos_listener_name returns the exported name (owned by l). */
const char *chanos_listener_name(const chanos_listener *l);

/*
 * chanos_listener_ref stores the export's iref, token and all, in *out: the
 * capability to bind it (chanos_connect_ref), private or not. Hand it only
 * to those who should bind; chanos_listener_close revokes it.
 */
void chanos_listener_ref(const chanos_listener *l, struct chanos_iref *out);

/*
 * chanos_listener_close withdraws the export (the name disappears), closes
 * the connections not yet accepted and frees l. NULL is allowed. Returns
 * the withdraw's result (0 as well when the session already ended). A
 * listener whose export was handed over, or could not be exported again
 * after a monitor restart, withdraws nothing and returns 0.
 */
int chanos_listener_close(chanos_listener *l);

/*
 * Listeners as capabilities (docs/capabilities.md, "Listeners"), as L4
 * passes an IPC gate. chanos_listener_hand_over gives l's export away and
 * stores in *grant a one-time iref for the domain that is to serve it,
 * which passes it to chanos_adopt; send it in any message, as an iref. Its
 * token is not the export's: it lets its holder take the export over
 * once, not bind it. From then on l accepts no more connections
 * (chanos_accept returns those it held, then CHANOS_ERR_HANDED_OVER); new
 * binds wait for the adopter, and connections already made go on.
 * Unadopted within a minute (the monitor's hand-over TTL), the export is
 * withdrawn. Free l with chanos_listener_close as usual.
 */
int chanos_listener_hand_over(chanos_listener *l, struct chanos_iref *grant);

/*
 * chanos_adopt takes over the export a hand-over grant names: this domain
 * becomes its exporting domain and the owner of its name, and the listener
 * returned in *out accepts its connections, binds that waited for it
 * included. iface must be the export's interface, of the same
 * fingerprint (else CHANOS_ERR_MISMATCH). A grant already used, or whose
 * export was withdrawn, gives CHANOS_ERR_NOT_FOUND; a forged one
 * CHANOS_ERR_DENIED. The listener's chanos_listener_ref is the export's
 * iref, token and all. An export is adopted on its own machine.
 */
int chanos_adopt(chanos_domain *d, const struct chanos_iref *grant,
                 const struct chanos_interface *iface, chanos_listener **out);

/*
 * chanos_connect binds to the export registered under name, which must be
 * of interface iface, waiting up to timeout_ms for the name to appear (-1:
 * the domain's call timeout, chanos_join_opts.timeout_ms, 10 s by default;
 * 0: not at all), and returns the client side in *out, which the caller
 * owns (chanos_conn_close). max_frame is the interface's largest frame; a
 * ring pair sized beyond it is refused (0 accepts the export's). The
 * monitor answers when the time is up; chanos_connect waits one second
 * more for that answer. Errors: CHANOS_ERR_NOT_FOUND (also when the name
 * did not appear in time), CHANOS_ERR_TIMEDOUT (the monitor did not
 * answer: stopped or wedged), CHANOS_ERR_MISMATCH, CHANOS_ERR_DENIED,
 * CHANOS_ERR_LIMIT, CHANOS_ERR_NO_ROUTE (the name is of an export on
 * another machine of the cluster, and this domain or the exporting one
 * has no net binder, chanos_join_opts.net), ...
 */
int chanos_connect(chanos_domain *d, const char *name, const char *iface,
                   uint32_t max_frame, int timeout_ms, chanos_conn **out);

/*
 * chanos_connect_ref binds to the export *ref names, by its iref rather
 * than a name: ref's token must be the export's, as chanos_listener_ref
 * gives it to the exporter, who may have passed it on. This is how a
 * private export is bound. timeout_ms bounds the monitor's answer (there
 * is no waiting for an export). Errors as chanos_connect; an iref from the
 * nameservice (no token) gives CHANOS_ERR_DENIED, the null iref
 * CHANOS_ERR_INVALID, a withdrawn export CHANOS_ERR_NOT_FOUND.
 */
int chanos_connect_ref(chanos_domain *d, const struct chanos_iref *ref,
                       const char *iface, uint32_t max_frame, int timeout_ms,
                       chanos_conn **out);

/*
 * chanos_connect_iface and chanos_connect_ref_iface are chanos_connect and
 * chanos_connect_ref for the interface *iface: the bind carries its
 * fingerprint, and an export of another fingerprint is refused with
 * CHANOS_ERR_MISMATCH (chanos_domain_error says why). chanos_connect and
 * chanos_connect_ref declare none.
 */
int chanos_connect_iface(chanos_domain *d, const char *name,
                         const struct chanos_interface *iface, int timeout_ms,
                         chanos_conn **out);
int chanos_connect_ref_iface(chanos_domain *d, const struct chanos_iref *ref,
                             const struct chanos_interface *iface,
                             int timeout_ms, chanos_conn **out);

/*
 * An iref as text: MACHINE:EXPORT:TOKEN, 16, 16 and 32 hex digits
 * (CHANOS_IREF_TEXT_LEN characters). The token is a secret: text that
 * holds it must go only where the iref itself may (not on a command line,
 * which other users can read in /proc).
 *
 * chanos_iref_format writes ref and a NUL into buf of n bytes
 * (CHANOS_IREF_TEXT_LEN + 1 suffice): the length, or -ENOSPC.
 * chanos_iref_parse reads exactly that form: 0, or -EINVAL.
 */
#define CHANOS_IREF_TEXT_LEN 66
int chanos_iref_format(const struct chanos_iref *ref, char *buf, size_t n);
int chanos_iref_parse(const char *s, struct chanos_iref *out);

/* ---- the nameservice (docs/nameservice.md) ---- */

/*
 * The monitor serves the nameservice (interfaces/nameservice.if) under the
 * name "nameservice". Its calls are encoded and decoded by the C code
 * chanosc generates for nameservice.if, which is built into libchanos:
 * #include <chanos/nameservice.h> and call over the connection with
 * chanos_conn_call (docs/c-domains.md, "The nameservice").
 */
#define CHANOS_NAMESERVICE_NAME  "nameservice" /* the name and interface */

/* The errval codes of set, get, wait_for and remove, and the status codes
 * of the error replies of get_count and list (docs/nameservice.md). */
#define CHANOS_NS_OK            0
#define CHANOS_NS_EXISTS        1 /* set: the name is taken */
#define CHANOS_NS_NOT_FOUND     2 /* get, remove: no such name */
#define CHANOS_NS_INVALID_NAME  3 /* the name breaks the naming rules */
#define CHANOS_NS_NOT_OWNER     4 /* remove: another domain owns the name */
#define CHANOS_NS_TIMEOUT       5 /* wait_for: the call's deadline passed */
#define CHANOS_NS_LIMIT         6 /* too many calls in progress */
#define CHANOS_NS_INVALID_REF   7 /* set: the null iref */
#define CHANOS_NS_UNAVAILABLE   8 /* the store failed or is shutting down */
#define CHANOS_NS_QUOTA         9 /* set: the quota of names is reached */

/*
 * chanos_nameservice_connect binds the monitor's nameservice, as the Go
 * monitor.Client.Nameservice does (no waiting for the name: the monitor
 * always serves it), and returns the client side in *out, which the
 * caller owns (chanos_conn_close). timeout_ms (-1: the domain's call
 * timeout) and a second more bound the monitor's answer;
 * CHANOS_ERR_TIMEDOUT if none came. Names set over the connection are owned by d's
 * session: they are released, and the connection ended by the monitor,
 * when the session ends (chanos_domain_close, exit, kill -9).
 */
int chanos_nameservice_connect(chanos_domain *d, int timeout_ms,
                               chanos_conn **out);

/*
 * chanos_nameservice_error maps a nameservice code (an errval, or the code
 * of an error reply's status) onto a result: 0 for CHANOS_NS_OK, else
 * CHANOS_ERR_EXISTS, _NOT_FOUND, _INVALID (a bad name, the null iref),
 * _NOT_OWNER, _TIMEDOUT, _LIMIT (also for CHANOS_NS_QUOTA: resource
 * exhausted), or _MONITOR (unavailable, unknown codes).
 */
int chanos_nameservice_error(uint64_t code);

/* ---- event objects (docs/capabilities.md) ---- */

/*
 * An event object is a descriptor a program waits on and signals: the
 * user-space form of an interrupt object. It travels in messages as a cap
 * or give_away_cap, so that another domain waits on or signals the same
 * object. Counting (the default): a wait takes the whole count, so that
 * two signals before a wait are one wake-up that says 2. Semaphore
 * (CHANOS_EVENT_SEMAPHORE): a wait takes 1.
 *
 * chanos_event_create returns a new event object's descriptor (an eventfd,
 * close-on-exec, non-blocking), or -errno; the caller owns it (close(2)).
 * chanos_event_timer returns a timerfd that the kernel signals after
 * first_ns and then every period_ns (0: once); its count is the number of
 * expirations. chanos_event_signals returns a signalfd for the n signals
 * signals[] (SIGUSR1, ...), which the caller must block in every thread
 * (pthread_sigmask) for them to reach it; a wait takes one signal.
 *
 * chanos_event_signal adds n (1 to 2^64-2) to the count; it never waits:
 * CHANOS_ERR_AGAIN if the count is full. chanos_event_wait waits at most
 * timeout_ms (-1: forever; 0: do not wait, CHANOS_ERR_AGAIN) for a
 * count, takes it into *count, and returns 0, CHANOS_ERR_TIMEDOUT or
 * -errno. Any of these descriptors can also be polled for POLLIN in a
 * program's own loop.
 */
#define CHANOS_EVENT_SEMAPHORE 1u
int chanos_event_create(unsigned flags);
int chanos_event_timer(int64_t first_ns, int64_t period_ns);
int chanos_event_signals(const int *signals, unsigned n);
int chanos_event_signal(int fd, uint64_t n);
int chanos_event_wait(int fd, int timeout_ms, uint64_t *count);

/* ---- connections: frames and rpc over a ump ring pair ---- */

/*
 * A received frame. data points into the connection's ring and stays valid
 * until the next receive on the connection, or its close; never free it.
 */
struct chanos_frame {
    const uint8_t *data;
    size_t len;
    struct chanos_hdr hdr;
    int kind; /* CHANOS_KIND_* */
    /* the descriptors the frame brought (hdr.ncaps of them): the
     * receiver's to close or keep (chanos_frame_close_fds); valid until
     * the next receive on the connection, as data is. NULL and 0 without */
    const int *fds;
    uint32_t nfds;
    /* a call's or reply's metadata entries, taken off data (see
     * chanos_frame_meta); NULL and 0 without */
    const uint8_t *meta;
    size_t meta_len;
};

/* The bounds of a call's metadata (docs/wire.md, "Metadata"). */
#define CHANOS_META_KEYS_MAX 32
#define CHANOS_META_KEY_MAX 64
#define CHANOS_META_VALUE_MAX 1024
#define CHANOS_META_MAX 8192

/*
 * chanos_frame_meta looks key up in the metadata of the call or reply f:
 * 0 and *value, a view into f's bytes valid as long as they are, or
 * CHANOS_ERR_NOT_FOUND (also for a frame without metadata).
 * chanos_conn_meta does the same for the frame c received last: the call
 * a handler under chanos_serve is serving, or, after a call (a generated
 * stub's too) returns, its reply or error reply (a server's reply
 * metadata, as gRPC's trailers).
 */
int chanos_frame_meta(const struct chanos_frame *f, const char *key,
                      struct chanos_str *value);

/*
 * chanos_conn_set_meta makes every rpc call made on c from now on (the
 * generated stubs' too) carry the n entries kv, which it copies; n 0
 * clears them. Keys are 1 to CHANOS_META_KEY_MAX bytes (else
 * CHANOS_ERR_BOUND) of a-z, 0-9, '-', '_' and '.' (else
 * CHANOS_ERR_HEADER), values NUL-terminated strings of at most
 * CHANOS_META_VALUE_MAX bytes, each key once, at most
 * CHANOS_META_KEYS_MAX entries and CHANOS_META_MAX bytes in all (else
 * CHANOS_ERR_BOUND); metadata that fails leaves c's as it was. A call
 * with metadata must still fit the connection's largest frame.
 */
struct chanos_meta {
    const char *key;
    const char *value;
};
int chanos_conn_set_meta(chanos_conn *c, const struct chanos_meta *kv,
                         unsigned n);
int chanos_conn_meta(const chanos_conn *c, const char *key,
                     struct chanos_str *value);

/*
 * chanos_conn_set_reply_meta makes the next reply or error reply sent on
 * c (a handler's under chanos_serve, chanos_conn_reply's,
 * chanos_conn_reply_error's) carry the n entries kv, which it copies;
 * that reply takes them, sent or not, and n 0 clears them. It refuses
 * what chanos_conn_set_meta refuses, with the same codes, and then leaves
 * what was set before. Call it on the thread that sends the reply. A
 * reply with metadata must still fit the connection's largest frame.
 */
int chanos_conn_set_reply_meta(chanos_conn *c, const struct chanos_meta *kv,
                               unsigned n);

/*
 * The trailer itself, as Go's wire.AppendMetadata and wire.SplitMetadata
 * handle it, for tools and tests; connections call these.
 *
 * chanos_meta_encode writes into out[0..cap) the metadata trailer of the
 * n entries kv (their entries sorted by key, then the entries' length)
 * and sets *len to its length; n 0 is no trailer, *len 0. It refuses
 * what chanos_conn_set_meta refuses, with the same codes, and fails with
 * CHANOS_ERR_NOSPACE, *len set to the room needed, when cap is short.
 *
 * chanos_meta_split checks the trailer of frame[0..len), a call or reply
 * with metadata (flags CALL|META, REPLY|META or REPLY|ERROR|META, size
 * len; else CHANOS_ERR_HEADER): 0 and *call_len, the length of the frame
 * before it, whose entries are then
 * frame[*call_len..len-2); or the code of the trailer's first fault in
 * the order of docs/wire.md, "Metadata". It only reads frame.
 */
int chanos_meta_encode(const struct chanos_meta *kv, unsigned n,
                       uint8_t *out, size_t cap, size_t *len);
int chanos_meta_split(const uint8_t *frame, size_t len, size_t *call_len);

/*
 * The domain at the other end of a connection chanos_accept returned, as
 * the monitor knows it. pid and uid come from the peer's socket
 * (SO_PEERCRED), which the monitor checked; the program is the name the
 * peer gave at join, so it tells honest programs apart, not a hostile one
 * of the same user.
 */
struct chanos_peer {
    uint64_t domain;
    uint64_t machine;
    int32_t pid;
    uint32_t uid;
    char program[257]; /* NUL-terminated */
};

/*
 * chanos_conn_peer stores the client of c, a connection chanos_accept
 * returned, in *out: 0, or CHANOS_ERR_NOT_FOUND for a connection made by
 * chanos_connect or chanos_conn_new.
 */
int chanos_conn_peer(const chanos_conn *c, struct chanos_peer *out);

/* The status body of an error reply (docs/wire.md, "rpc status body"). */
struct chanos_status {
    uint64_t code;           /* nonzero */
    struct chanos_str detail; /* at most 1024 bytes; a view into the frame */
};
#define CHANOS_STATUS_DETAIL_MAX 1024

/*
 * Status codes (docs/wire.md, "Status codes"): the canonical ones, with
 * gRPC's numbers and meanings, for chanos_conn_reply_error and in
 * chanos_status.code. 17..999 are reserved; codes from
 * CHANOS_CODE_APPLICATION up are an application's own and travel intact.
 * The Go package chanos names the same codes chanos.CodeNotFound, ...
 */
#define CHANOS_CODE_OK                  0  /* success; never sent */
#define CHANOS_CODE_CANCELED            1  /* the caller gave up */
#define CHANOS_CODE_UNKNOWN             2  /* an error that says no more */
#define CHANOS_CODE_INVALID_ARGUMENT    3  /* bad arguments in any state */
#define CHANOS_CODE_DEADLINE_EXCEEDED   4  /* the deadline passed first */
#define CHANOS_CODE_NOT_FOUND           5  /* what the call names is missing */
#define CHANOS_CODE_ALREADY_EXISTS      6  /* what it would create exists */
#define CHANOS_CODE_PERMISSION_DENIED   7  /* the caller may not do this */
#define CHANOS_CODE_RESOURCE_EXHAUSTED  8  /* a quota or limit was reached */
#define CHANOS_CODE_FAILED_PRECONDITION 9  /* the state does not allow it */
#define CHANOS_CODE_ABORTED             10 /* a conflict; retry higher up */
#define CHANOS_CODE_OUT_OF_RANGE        11 /* past the valid range */
#define CHANOS_CODE_UNIMPLEMENTED       12 /* the server lacks the rpc */
#define CHANOS_CODE_INTERNAL            13 /* an invariant broke server-side */
#define CHANOS_CODE_UNAVAILABLE         14 /* cannot be reached now; retry */
#define CHANOS_CODE_DATA_LOSS           15 /* data lost or corrupted */
#define CHANOS_CODE_UNAUTHENTICATED     16 /* no identity for the caller */
#define CHANOS_CODE_APPLICATION         1000 /* the first application code */

/*
 * chanos_code_str names a status code, as Go's Code.String does: "not
 * found" for CHANOS_CODE_NOT_FOUND, ..., and "application code" or
 * "reserved code" for a code that is not canonical. The string is static;
 * never free it.
 */
const char *chanos_code_str(uint64_t code);

/*
 * The most abandoned calls a connection remembers (see chanos_conn_recv):
 * once that many are waiting for their late replies, the oldest is
 * forgotten, and its reply, should it still come, is received as any
 * reply to no call of the caller's.
 */
#define CHANOS_CONN_ABANDONED_MAX 64

/*
 * The bounds of a connection's inbox (see chanos_conn_call), Go's: the
 * frames a call keeps for the receives to come, and their bytes. When
 * either is reached the inbox is full.
 */
#define CHANOS_CONN_INBOX_MAX   1024
#define CHANOS_CONN_INBOX_BYTES (4u << 20)

/*
 * chanos_conn_new wraps a ump connection, taking ownership of u (closed on
 * failure too). chanos_accept and chanos_connect use it; it is public for
 * connections set up by other means (chanos_ump_create/attach).
 */
int chanos_conn_new(chanos_ump *u, chanos_conn **out);

/*
 * A connection may also run on a link other than a ump ring pair, such as
 * libchanos_net's (chanos_net_conn_new): the link's operations, with the
 * shapes of the ump calls, each taking the link as its first argument.
 * send and recv with timeout_ms 0 do not wait (CHANOS_ERR_AGAIN); a frame
 * recv returns stays valid until the next recv. Such a link carries no
 * descriptors: a frame with capabilities is refused with CHANOS_ERR_CAP
 * (channel endpoints aside, on a link with send_refs and recv_refs),
 * chanos_conn_spin_recv looks as a receive that does not wait, and
 * chanos_conn_ump returns NULL (so the ump-only helpers, such as
 * libchanos_tasks' waits, are not for it). peer_gone answers as
 * chanos_conn_peer_gone; close closes and frees the link; fd, if set,
 * returns a descriptor that polls readable while recv would not wait
 * (chanos_conn_fd; chanos_serve_export needs it).
 */
struct chanos_link_ops {
    int (*send)(void *link, const void *frame, size_t len, int timeout_ms);
    int (*recv)(void *link, const void **frame, size_t *len, int timeout_ms);
    int (*peer_gone)(void *link);
    void (*close)(void *link);
    int (*fd)(void *link);
    /*
     * Optional: a link between machines that carries channel endpoints as
     * irefs (docs/capabilities.md, "Between machines"; libchanos_net's).
     * send_refs sends a frame whose ncaps is nrefs followed by its irefs,
     * refs[0..nrefs * CHANOS_IREF_WIRE_SIZE) as the wire encodes them;
     * recv_refs is recv that also sets *refs to the irefs of the frame
     * (its header's ncaps of them; NULL for none), valid as the frame is.
     * A connection on a link that has them receives each iref as an
     * endpoint (chanos_endpoint_open binds it), and sends endpoints of
     * that kind on; other descriptors, and every capability on a link
     * without them, are refused with CHANOS_ERR_CAP.
     */
    int (*send_refs)(void *link, const void *frame, size_t len,
                     const uint8_t *refs, uint32_t nrefs, int timeout_ms);
    int (*recv_refs)(void *link, const void **frame, size_t *len,
                     const uint8_t **refs, int timeout_ms);
};

/* The size of an iref on the wire: machine, export id, token. */
#define CHANOS_IREF_WIRE_SIZE 32

/* chanos_conn_new_link wraps link, whose operations are ops (kept by
 * reference: static ones), taking ownership of link (closed on failure
 * too). */
int chanos_conn_new_link(const struct chanos_link_ops *ops, void *link,
                         chanos_conn **out);

/* chanos_conn_close closes the connection (the peer sees
 * CHANOS_ERR_CLOSED) and frees it. NULL is allowed. */
void chanos_conn_close(chanos_conn *c);

/* chanos_conn_fd returns a descriptor to poll for c's next frame: that
 * of its ump (chanos_ump_fd: armed by a receive that found none) or of
 * its link; -1 for a link that has none. It belongs to c. */
int chanos_conn_fd(chanos_conn *c);

/*
 * A waiter decides how libchanos waits on a thread. A runtime that runs
 * tasks on threads (libchanos_tasks) sets one on each of its threads, so
 * that a connection's waits suspend the calling task instead of blocking
 * the thread: chanos_conn_recv and chanos_conn_call (and so the generated
 * stubs and serve loops), and, on a ump connection, chanos_conn_send
 * waiting for ring space. They wait on the connection's descriptor
 * (chanos_conn_fd); a connection without one blocks the thread as
 * before, and so do sends over other links.
 *
 * spin: whether a receive about to wait may go on spinning over the ring
 *   (within the ring's adaptive spin window); NULL: it may.
 * wait: waits until fd polls readable or deadline_ns passes
 *   (CLOCK_MONOTONIC; -1: no deadline), and returns 0,
 *   CHANOS_ERR_TIMEDOUT or a negative error. It may return on another
 *   thread, whose waiter is used from then on.
 */
struct chanos_waiter {
    bool (*spin)(void *arg);
    int (*wait)(void *arg, int fd, int64_t deadline_ns);
    void *arg;
};

/* chanos_set_waiter sets the calling thread's waiter; NULL: none, the
 * thread blocks. *w must stay valid while it is set. */
void chanos_set_waiter(const struct chanos_waiter *w);

/* chanos_conn_link returns the link of a connection on another link
 * (chanos_conn_new_link), as it was given; NULL for a ump connection. */
void *chanos_conn_link(chanos_conn *c);

/* chanos_conn_ump returns the underlying ump connection (for
 * chanos_ump_fd, chanos_ump_err, ...), owned by c; NULL for a connection
 * on another link (chanos_conn_new_link). */
chanos_ump *chanos_conn_ump(chanos_conn *c);

/*
 * chanos_conn_peer_gone tells whether the connection's peer has gone, as
 * chanos_ump_peer_gone does: 0 while it is there, CHANOS_ERR_CLOSED or
 * CHANOS_ERR_PEER_DIED once it closed or died. libchanos runs no handlers
 * and has no contexts to cancel: a server that works long on a call
 * (between chanos_conn_recv and chanos_conn_reply) calls this now and then
 * to give up on a call whose caller is gone, where its next receive would
 * otherwise be the first to tell. It never waits, and may be called from
 * any thread while others send and receive on c.
 */
int chanos_conn_peer_gone(chanos_conn *c);

/*
 * What a handler knows of the call it serves: the frame the receives on c
 * gave last (chanos_conn_recv, chanos_conn_spin_recv, the serve loops), if
 * it is a call. From the thread that serves c.
 *
 * chanos_conn_call_left_ns returns the time left, in nanoseconds, before
 * the call's deadline: its caller's timeout (the frame's timeout_us)
 * counted from the call's arrival, as Go gives a handler a context with
 * that deadline (under chanos_serve_export and a chanos_server, from the
 * loop's last look before the round that received it, so that serving a
 * call costs no reading of the clock). 0 once it has passed: the caller waits no more, and a
 * handler that works long gives up (CHANOS_CODE_DEADLINE_EXCEEDED, or
 * nothing); -1 for a call without a deadline, or when the frame given
 * last is no call. A call the handler makes on meanwhile may take what is
 * left: timeout_ms of left / 1000000, at least 1 (-1 for none).
 *
 * chanos_conn_call_cancelled returns 1 once the caller has cancelled the
 * call (its cancel frame for the call's id, sent when the caller gave up
 * or its call timed out, has come), else 0; 0 too when the frame given
 * last is no call. It receives nothing: it looks through the frames that
 * have come and not been received yet, in the ring (no system call, no
 * copy) and in the inbox, and the call's frame and its views stay valid.
 * The cancel itself is still received after the handler returns, and
 * dropped there by the serve loops. Over a link other than ump (a
 * connection between machines) it sees only the inbox: the link's frames
 * are not looked at before they are received. CHANOS_ERR_BUSY while
 * another thread receives on c. A caller gone is told by
 * chanos_conn_peer_gone instead.
 */
int64_t chanos_conn_call_left_ns(const chanos_conn *c);
int chanos_conn_call_cancelled(chanos_conn *c);

/*
 * chanos_conn_send sends one encoded frame (a message, or a reply already
 * patched) as is, waiting at most timeout_ms for ring space (-1: forever;
 * 0: do not wait: CHANOS_ERR_AGAIN if full, and chanos_ump_fd of
 * chanos_conn_ump(c) polls readable once there may be room); past it,
 * CHANOS_ERR_TIMEDOUT, which chanos_conn_fault explains. A frame with
 * ncaps != 0 fails with CHANOS_ERR_CAP: send its descriptors with
 * chanos_conn_send_buf. The caller keeps frame.
 */
int chanos_conn_send(chanos_conn *c, const void *frame, size_t len,
                     int timeout_ms);

/*
 * The descriptors of a frame travel beside it (docs/ump.md,
 * "Descriptors"). chanos_conn_send_buf sends the frame in b with the
 * descriptors b holds (b->fds[0..nfds), as the generated encoders put
 * them there; the frame's ncaps must match), as chanos_conn_send; once it
 * has succeeded it closes those that are give_away_caps (b->give), and
 * the caller keeps the others. chanos_conn_call_buf and
 * chanos_conn_reply_buf are chanos_conn_call and chanos_conn_reply with
 * descriptors, alike. A received frame's descriptors (f->fds) are the
 * receiver's: chanos_frame_close_fds closes those it does not keep.
 */
int chanos_conn_send_buf(chanos_conn *c, const struct chanos_buf *b,
                         int timeout_ms);
int chanos_conn_call_buf(chanos_conn *c, const struct chanos_buf *b,
                         int timeout_ms, struct chanos_frame *reply,
                         void (*other)(void *arg, const struct chanos_frame *f),
                         void *arg);
int chanos_conn_reply_buf(chanos_conn *c, const struct chanos_frame *call,
                          const struct chanos_buf *b, int timeout_ms);
void chanos_frame_close_fds(const struct chanos_frame *f);

/*
 * chanos_conn_send_call patches a fresh call id and timeout_us (from
 * timeout_ms; -1 and 0 give "no deadline") into the encoded rpc call in
 * frame[0..len), sends it, and sets *call_id. The caller matches the reply
 * (chanos_conn_recv) by hdr.call_id, or gives up with chanos_conn_cancel.
 */
int chanos_conn_send_call(chanos_conn *c, uint8_t *frame, size_t len,
                          int timeout_ms, uint32_t *call_id);

/* chanos_conn_cancel tells the peer that call call_id of rpc msg is
 * abandoned (a CANCEL frame), and remembers the call so that its late
 * reply, if the peer sends one anyway, is dropped (chanos_conn_recv). */
int chanos_conn_cancel(chanos_conn *c, uint16_t msg, uint32_t call_id);

/*
 * chanos_conn_recv waits at most timeout_ms (-1: forever; 0: do not wait:
 * CHANOS_ERR_AGAIN if none, and chanos_ump_fd of chanos_conn_ump(c) polls
 * readable once one may be there) for the next frame and fills *f. The frame's
 * header is checked (a bad one is returned as its wire error, and the
 * frame is dropped); the body is the generated decoder's job. After the
 * peer closed or died: CHANOS_ERR_CLOSED or CHANOS_ERR_PEER_DIED.
 *
 * The frames a call kept in the connection's inbox (see
 * chanos_conn_call) come first, in the order they came, before any frame
 * the link holds; their bytes and descriptors are the receiver's as a
 * received frame's are, and live as long (until the next receive).
 *
 * A reply to an abandoned call (one that timed out in chanos_conn_call,
 * or was given up with chanos_conn_cancel) is never returned: it is
 * dropped by its call id, and the wait goes on for the next frame within
 * timeout_ms. Up to CHANOS_CONN_ABANDONED_MAX abandoned calls are
 * remembered. Other replies, such as those to chanos_conn_send_call, are
 * returned, for the caller to match by hdr.call_id.
 */
int chanos_conn_recv(chanos_conn *c, int timeout_ms, struct chanos_frame *f);

/*
 * chanos_conn_spin_recv is chanos_conn_recv(c, 0, f) for a spin loop over
 * several connections (chanos_ump_spin_recv): CHANOS_ERR_AGAIN does not
 * arm chanos_ump_fd, so the peer is not asked to wake us. Before sleeping
 * on the fd, call chanos_conn_recv(c, 0, f), which arms it. A receive, as
 * chanos_conn_recv is.
 */
int chanos_conn_spin_recv(chanos_conn *c, struct chanos_frame *f);

/*
 * chanos_conn_call sends the encoded call in frame[0..len) and waits at
 * most timeout_ms (-1: forever) for its reply, which it returns in *reply
 * (valid until the next receive).
 *
 * One order per connection: the frames the peer sent before the reply
 * come before it. With other NULL (the generated stubs' way), the call
 * keeps every one of them that is no reply in the connection's inbox,
 * descriptors and all (replies to other calls are dropped: one may answer
 * a call abandoned longer ago than CHANOS_CONN_ABANDONED_MAX calls), and the receives that follow
 * (chanos_conn_recv, chanos_conn_spin_recv, the serve loops) return them
 * first, in order; chanos_conn_close closes the descriptors of those
 * never received. Only the frame's copy into the inbox costs: a call
 * answered before anything else comes allocates and copies nothing. The
 * inbox holds at most CHANOS_CONN_INBOX_MAX frames or
 * CHANOS_CONN_INBOX_BYTES bytes: a call that finds it full reads no
 * further, since no one else may receive while it does, and fails with
 * CHANOS_ERR_INBOX_FULL, the call abandoned as on a timeout, and
 * chanos_conn_fault says "the reply waits behind N unread messages from
 * the peer, B bytes, that fill this connection's inbox: receive them".
 * Once the program has received them, calls go on. A program that calls
 * a peer that also sends it messages must receive them.
 *
 * With other set, the frames that are not a reply are passed to
 * other(arg, frame) instead, as they come (the frame is valid while the
 * callback runs, and its descriptors are the callback's), and the
 * replies to other calls are dropped. On CHANOS_ERR_TIMEDOUT the call is cancelled
 * (chanos_conn_cancel), and its reply, should it come late, is dropped by
 * whichever receive meets it. If the peer answered with an error reply,
 * the result is CHANOS_ERR_REMOTE and *reply is that frame
 * (chanos_frame_status reads it). Uses both the send and the receive side.
 */
int chanos_conn_call(chanos_conn *c, uint8_t *frame, size_t len,
                     int timeout_ms, struct chanos_frame *reply,
                     void (*other)(void *arg, const struct chanos_frame *f),
                     void *arg);

/*
 * chanos_conn_reply sends the encoded reply in frame[0..len) to call,
 * patching in the call's id. chanos_conn_reply_error sends an error reply
 * (code nonzero: a CHANOS_CODE_* or an application's code; detail a C
 * string of at most 1024 bytes, or NULL).
 */
int chanos_conn_reply(chanos_conn *c, const struct chanos_frame *call,
                      uint8_t *frame, size_t len, int timeout_ms);
int chanos_conn_reply_error(chanos_conn *c, const struct chanos_frame *call,
                            uint64_t code, const char *detail,
                            int timeout_ms);

/* chanos_frame_status decodes the status of an error reply frame; the
 * detail is a view into the frame. */
int chanos_frame_status(const struct chanos_frame *f, struct chanos_status *st);

/*
 * chanos_conn_status stores in *st the status of the error reply that
 * ended the last call made on c (by a generated stub, chanos_conn_call or
 * chanos_conn_call_buf, which returned CHANOS_ERR_REMOTE): its code and a
 * copy of its detail, valid until the next call on c or
 * chanos_conn_close. It returns 0, or CHANOS_ERR_NOT_FOUND if that call
 * did not end in an error reply. From the thread that made the call.
 */
int chanos_conn_status(const chanos_conn *c, struct chanos_status *st);

/*
 * chanos_conn_fault returns the wire fault that ended the last generated
 * stub call or dispatch on c, if it returned a wire code
 * (CHANOS_ERR_TRUNCATED to CHANOS_ERR_NOSPACE): an argument that does not
 * encode (a string over its bound, say), a reply or a peer's frame that
 * does not decode. The connection's own refusals are described there
 * too, by whichever call on c returned their wire code: a received frame
 * whose header, capabilities or metadata trailer break the wire format
 * (chanos_conn_recv, chanos_conn_spin_recv, chanos_conn_call, the stubs,
 * chanos_serve, which then ends with it), a frame given to send that the
 * call does not send (a header that is wrong or announces capabilities
 * not given, a reply that is no reply, an error reply of code 0), and
 * metadata that chanos_conn_set_meta or chanos_conn_set_reply_meta
 * refuses. It says which frame, field and byte, and why, as Go's
 * wire.Error does; chanos_wire_fault_describe formats it. It also
 * explains, as Go does, a call that failed with CHANOS_ERR_INBOX_FULL
 * (its reply waits behind unread messages; see chanos_conn_call), and a
 * send (a message's, a reply's, a call's before it goes) that failed
 * with CHANOS_ERR_TIMEDOUT waiting for room: "timed out (the peer took
 * no frame while this one waited for room: a peer that is itself
 * waiting to send to this side takes none until this side receives what
 * it sends ...)"; a call whose reply did not come in time clears it.
 * For instance:
 *
 *     if (kv_put(c, &in, &out, 1000) == CHANOS_ERR_BOUND) {
 *         char why[CHANOS_WIRE_FAULT_TEXT_MAX];
 *
 *         chanos_wire_fault_describe(chanos_conn_fault(c), why, sizeof why);
 *         ... "wire: kv.put call: field key: string length 300 exceeds bound 256 at offset 20"
 *
 * NULL when that call or frame met no fault: a stub call or dispatch
 * clears it as it starts, other calls write it only when they fail, so
 * after one of them it is that call's only if it returned a wire code
 * or one of those explained (the record's code says which).
 * Valid until the next call on c that fails or clears it, or
 * chanos_conn_close; from the thread that made the call. The record is
 * the connection's one: where a thread sends while another receives,
 * only one of them may read it, after its own call failed.
 */
const struct chanos_wire_fault *chanos_conn_fault(const chanos_conn *c);

/*
 * chanos_conn_set_detail gives the error reply that the rpc handler
 * running on c is about to return a positive code for its detail, made
 * as printf makes a string and cut to CHANOS_STATUS_DETAIL_MAX bytes: the
 * generated dispatch sends it with that code, and forgets it whatever the
 * handler returns. From the handler, on the thread that serves c. 0, or
 * -ENOMEM.
 */
int chanos_conn_set_detail(chanos_conn *c, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*
 * chanos_conn_buf sets *b up (chanos_buf_init, no capabilities) over the
 * connection's own scratch buffer of at least size bytes, allocated on
 * first use and grown as needed, freed by chanos_conn_close: the buffer
 * the generated stubs and dispatch encode into. -ENOMEM if it cannot grow.
 * b->fault is the connection's fault record, cleared: what
 * chanos_conn_fault gives. It holds one frame at a time: the stubs and the
 * dispatch of one connection must not run on two threads at once.
 */
int chanos_conn_buf(chanos_conn *c, struct chanos_buf *b, size_t size);

/* ---- serving: the loop that drives a generated dispatch ---- */

/*
 * A generated interface IFACE has IFACE_dispatch, which decodes one frame,
 * calls the handler of its message or rpc in a struct IFACE_server_ops
 * and sends an rpc's reply (docs/codegen-c.md, "Stubs and dispatch"). Its
 * type is chanos_dispatch_fn: ops is the struct IFACE_server_ops, ctx is
 * handed to every handler. It returns 0 to go on serving, or a negative
 * code that ends serving the connection.
 */
typedef int (*chanos_dispatch_fn)(chanos_conn *c, const struct chanos_frame *f,
                                  const void *ops, void *ctx);

/*
 * What an rpc handler returns: 0, and the dispatch sends the reply the
 * handler filled in; a positive code, and it sends an error reply with
 * that code (the caller's stub returns CHANOS_ERR_REMOTE); or
 * CHANOS_SERVE_DEFER, and it sends nothing: the handler keeps the call to
 * answer it later (chanos_conn_reply, from a copy of the frame) or never.
 * Any other negative code ends serving, as it does from a message's
 * handler.
 */
#define CHANOS_SERVE_DEFER (-4401)

/* The code of the error reply to a call whose handler is NULL, or whose
 * frame does not decode (its detail says which). */
#define CHANOS_SERVE_UNIMPLEMENTED CHANOS_CODE_UNIMPLEMENTED
#define CHANOS_SERVE_INVALID       CHANOS_CODE_INVALID_ARGUMENT

/*
 * chanos_serve receives the frames of c and hands each to dispatch (the
 * generated IFACE_dispatch, or IFACE_serve which calls this), until the
 * peer closes (0), no frame comes within timeout_ms of the last (-1: no
 * limit; CHANOS_ERR_TIMEDOUT), or the connection or dispatch fails (that
 * code; a frame that breaks the wire format, or a message that does not
 * decode, fails it, where a call that does not decode is answered with an
 * error reply). Cancels are dropped: a handler runs to its end before
 * the next frame is read (one that works long sees its call's cancel
 * with chanos_conn_call_cancelled). One connection, one thread; to serve
 * several on one thread, receive from each (chanos_conn_recv,
 * chanos_conn_spin_recv) and call chanos_serve_frame.
 */
int chanos_serve(chanos_conn *c, chanos_dispatch_fn dispatch, const void *ops,
                 void *ctx, int timeout_ms);

/* chanos_serve_frame serves one received frame f as chanos_serve does: 0
 * or the code that ends serving. */
int chanos_serve_frame(chanos_conn *c, const struct chanos_frame *f,
                       chanos_dispatch_fn dispatch, const void *ops,
                       void *ctx);

/*
 * chanos_serve_export serves every connection of the export l, of the
 * domain d, on the calling thread until *o->stop is set (0) or accepting
 * fails (that code): it accepts what the monitor hands over, gives each
 * connection a turn of frames, each through dispatch (chanos_serve_frame),
 * and closes a connection that ended or whose dispatch failed. After the
 * last frame it spins for o->spin_ns, polling every connection without a
 * system call; then it sleeps in ppoll(2) on the connections and the
 * monitor's socket, with the signal mask o->sigmask (NULL: the thread's),
 * so that a program that blocks its stop signals elsewhere sees one at
 * once. While busy it looks at the listener and the signals every
 * millisecond. A lost monitor does not end serving while the domain
 * rejoins (chanos_domain_poll): the connections go on, and the export is
 * taken up again; with CHANOS_JOIN_NO_REJOIN, serving ends with
 * CHANOS_ERR_MONITOR_LOST. Connections from other machines (a domain
 * joined with libchanos_net's binder) are served alongside, and slept on
 * through their chanos_conn_fd. The connections are closed on return; l
 * stays the caller's. NULL o: the defaults. It is a call on d: to serve
 * several exports of d on one thread, use a chanos_server (below).
 * -EINVAL for an l of another domain.
 */
struct chanos_serve_opts {
    int64_t spin_ns; /* the spin window; 0: sleep at once; <0: the ring's
                      * default, CHANOS_UMP_DEFAULT_SPIN_NS */
    const volatile int *stop; /* stops serving once *stop != 0; NULL: never */
    const void *sigmask;      /* a sigset_t *, for ppoll; NULL: the thread's */
};
int chanos_serve_export(chanos_domain *d, chanos_listener *l,
                        chanos_dispatch_fn dispatch, const void *ops,
                        void *ctx, const struct chanos_serve_opts *o);

/*
 * A server serves several exports of one domain on one thread, in one
 * loop: a service, its NAME.health and its NAME.reflection, say, each
 * through its own dispatch. chanos_serve_export is a server of one
 * export.
 *
 * chanos_server_new makes an empty server of the domain d in *out, which
 * the caller owns: chanos_server_free, once chanos_server_run has
 * returned (NULL is allowed). 0, -EINVAL or -ENOMEM.
 *
 * chanos_server_add adds the export l, of the server's domain (else
 * -EINVAL; -EEXIST if added already), served through dispatch (a
 * generated IFACE_dispatch) with ops and ctx, as chanos_serve_export
 * serves it; chanos_server_add_health (below) adds a health export. Not
 * while the server runs (CHANOS_ERR_BUSY). l stays the caller's, and
 * must stay open while the server holds it.
 *
 * chanos_server_run serves every connection of every export added, as
 * chanos_serve_export does with the options o (NULL: the defaults), and
 * returns as it does: 0 once *o->stop is set, or the code of the first
 * listener whose accept failed. The connections are closed on return,
 * and a later run serves the exports again. It is a call on the domain:
 * no other thread may call into d while it runs.
 */
typedef struct chanos_server chanos_server; /* opaque */
int chanos_server_new(chanos_domain *d, chanos_server **out);
int chanos_server_add(chanos_server *s, chanos_listener *l,
                      chanos_dispatch_fn dispatch, const void *ops, void *ctx);
int chanos_server_run(chanos_server *s, const struct chanos_serve_opts *o);
void chanos_server_free(chanos_server *s);

/*
 * The generated dispatch's own helpers, not for programs.
 * chanos_serve_reply_ finishes a call: rc is the handler's result, or the
 * encoder's error, and b the encoded reply when rc is 0.
 * chanos_serve_bad_ answers a frame that failed to decode with rc (an
 * error reply to a call; a message's error ends serving), and
 * chanos_serve_unimplemented_ a call that has no handler.
 */
int chanos_serve_reply_(chanos_conn *c, const struct chanos_frame *call,
                        int rc, const struct chanos_buf *b);
int chanos_serve_bad_(chanos_conn *c, const struct chanos_frame *f, int rc);
int chanos_serve_unimplemented_(chanos_conn *c, const struct chanos_frame *f,
                                const char *what);
/* chanos_conn_take_detail_ returns the detail chanos_conn_set_detail
 * left for the error reply being made, or NULL, and forgets it. */
const char *chanos_conn_take_detail_(chanos_conn *c);
/* chanos_conn_fault_ clears the connection's fault record and returns it,
 * for the generated dispatch's decode to describe its fault in. */
struct chanos_wire_fault *chanos_conn_fault_(chanos_conn *c);

/* ---- health checking (docs/health.md) ---- */

/*
 * A domain says whether its services are serving through the bundled
 * interface health (interfaces/health.if), exported under NAME.health
 * beside the service NAME, so that probes (`chanos health NAME`) and
 * balancers ask without knowing the service's own interface. A
 * chanos_health is the C counterpart of Go's health.Statuses: a table of
 * services, by name, and their statuses, which it serves. The empty
 * service, "", is the domain as a whole, serving from chanos_health_new
 * on. The C code chanosc generates for health.if is built into libchanos
 * (#include <chanos/health.h> for a client's health_check and
 * health_watch_send); a server needs none of it.
 *
 * Threads: every function but chanos_health_free may be called from any
 * thread, while another serves. A status set is sent to the connections
 * that watch it by the thread that serves them, never by the setter, so
 * that a watcher that reads slowly holds up no one.
 */
#define CHANOS_HEALTH_SUFFIX ".health" /* NAME.health serves NAME's statuses */
#define CHANOS_HEALTH_SERVICE_MAX 256  /* bytes of a service's name */
/* The services one connection may watch at most, as Go's
 * health.MaxWatched: a watch past them ends that connection, so that no
 * client makes the server hold a set of any size. */
#define CHANOS_HEALTH_WATCHED_MAX 64
/* The table's bound when chanos_health_new is given 0. */
#define CHANOS_HEALTH_SERVICES_DEFAULT 1024

/* The serving statuses, gRPC's numbers: <chanos/health.h>'s enum
 * health_serving_status (HEALTH_SERVING_STATUS_SERVING, ...). */
#define CHANOS_HEALTH_UNKNOWN         0
#define CHANOS_HEALTH_SERVING         1
#define CHANOS_HEALTH_NOT_SERVING     2
#define CHANOS_HEALTH_SERVICE_UNKNOWN 3 /* watch's answer for no status */

typedef struct chanos_health chanos_health; /* opaque */

/*
 * chanos_health_new makes a table that holds at most max_services
 * services, the domain's "" among them (0: CHANOS_HEALTH_SERVICES_DEFAULT),
 * and returns it in *out, which the caller owns: chanos_health_free, once
 * no chanos_health_serve on it runs and every server it was added to is
 * freed. 0, or -ENOMEM.
 */
int chanos_health_new(unsigned max_services, chanos_health **out);
void chanos_health_free(chanos_health *h); /* NULL is allowed */

/*
 * chanos_health_set sets the status of service, a C string of at most
 * CHANOS_HEALTH_SERVICE_MAX bytes (else CHANOS_ERR_BOUND), to status, one
 * of CHANOS_HEALTH_* (else CHANOS_ERR_ENUM), and has the connections that
 * watch it told. A service new to the table takes a place in it:
 * CHANOS_ERR_HEALTH_FULL when it holds max_services already (the table
 * is as it was). After chanos_health_shutdown it does nothing, and
 * returns 0, until chanos_health_resume. 0, or -ENOMEM.
 */
int chanos_health_set(chanos_health *h, const char *service, int status);

/* chanos_health_status stores service's status in *status: 0, or
 * CHANOS_ERR_NOT_FOUND if it was never set. */
int chanos_health_status(chanos_health *h, const char *service, int *status);

/*
 * chanos_health_shutdown sets every service, "" included, not serving and
 * has chanos_health_set ignored until chanos_health_resume, which sets
 * every service serving again: a domain that drains turns probes and
 * balancers away first.
 */
void chanos_health_shutdown(chanos_health *h);
void chanos_health_resume(chanos_health *h);

/*
 * chanos_health_export exports the health service of the service name,
 * under name + CHANOS_HEALTH_SUFFIX, with the interface health and its
 * fingerprint: chanos_export_iface's results, and *out as it gives it.
 */
int chanos_health_export(chanos_domain *d, const char *name,
                         chanos_listener **out);

/*
 * chanos_server_add_health adds to the server s the export l, of
 * interface health of the server's domain (chanos_health_export), to
 * serve h over. The server answers check with a service's status, or an
 * error reply of CHANOS_CODE_NOT_FOUND for one with none; and after a
 * watch it sends that connection a changed at once (a service with no
 * status as CHANOS_HEALTH_SERVICE_UNKNOWN) and at each change of the
 * service's status, until the connection ends. Two changes before the
 * first is sent go as one, as the status then is: a watcher whose ring
 * is full is sent the latest status once it has room, and the others are
 * served meanwhile. A watch of a service past the
 * CHANOS_HEALTH_WATCHED_MAX that connection watches ends the connection.
 * Returns as chanos_server_add does. Several servers may serve one h at
 * once; h must outlive the server (chanos_server_free).
 *
 * chanos_health_serve serves h over every connection of l on the calling
 * thread, as a server of that one export does (chanos_server_run, with
 * the options o), and returns as it does. It is a call on d: a program
 * that serves its own service too adds both to one chanos_server.
 */
int chanos_server_add_health(chanos_server *s, chanos_health *h,
                             chanos_listener *l);
int chanos_health_serve(chanos_health *h, chanos_domain *d,
                        chanos_listener *l, const struct chanos_serve_opts *o);

/* ---- reflection (docs/reflection.md) ---- */

/*
 * A domain describes the interfaces of its exports through the bundled
 * interface reflection (interfaces/reflection.if), exported under
 * NAME.reflection beside the service NAME, so that a tool calls a service
 * it has no .if of (`chanos describe NAME`, `chanos call NAME RPC`), as
 * gRPC's server reflection lets grpcurl. The C counterpart of Go's
 * reflection.Exports: libchanos keeps, for each export made with
 * chanos_export_iface or chanos_adopt, the interface's definition (the
 * generated IFACE_interface's), and a server's reflection export answers
 * describe(name) from the domain's exports as they are at each call: the
 * interface's name, its fingerprint and its definition; an error reply of
 * CHANOS_CODE_NOT_FOUND for a name the domain does not export by name
 * (none, a private export, one handed over), CHANOS_CODE_UNIMPLEMENTED for
 * an export without a definition (chanos_export, chanos_export_with),
 * CHANOS_CODE_RESOURCE_EXHAUSTED for a definition over
 * CHANOS_REFLECTION_DEFINITION_MAX bytes. The details are Go's. The C code
 * chanosc generates for reflection.if is built into libchanos
 * (#include <chanos/reflection.h> for a client's reflection_describe).
 */
#define CHANOS_REFLECTION_SUFFIX ".reflection" /* NAME.reflection */
#define CHANOS_REFLECTION_DEFINITION_MAX 262144 /* describe's bound */

/*
 * chanos_reflection_export exports the reflection service of the domain
 * that serves name, under name + CHANOS_REFLECTION_SUFFIX, with the
 * interface reflection and its fingerprint: chanos_export_iface's
 * results, and *out as it gives it.
 *
 * chanos_server_add_reflection adds to the server s the export l, of
 * interface reflection of the server's domain
 * (chanos_reflection_export), which then answers describe for that
 * domain's exports on the server's thread. Returns as chanos_server_add
 * does.
 */
int chanos_reflection_export(chanos_domain *d, const char *name,
                             chanos_listener **out);
int chanos_server_add_reflection(chanos_server *s, chanos_listener *l);

/* ==== end domains ==== */

#ifdef __cplusplus
}
#endif

#endif /* CHANOS_H */
