/*
 * test_wire.c: the wire-format runtime of libchanos (the wire section of
 * chanos.h and src/wire.c), tested without generated code.
 */
#include "check.h"

#include <chanos.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metadata_vectors.h"

static void test_strerror(void)
{
    static const int codes[] = {
        CHANOS_ERR_TRUNCATED, CHANOS_ERR_SIZE, CHANOS_ERR_TRAILING,
        CHANOS_ERR_UNKNOWN_MESSAGE, CHANOS_ERR_HEADER, CHANOS_ERR_BOUND,
        CHANOS_ERR_ENUM, CHANOS_ERR_BOOL, CHANOS_ERR_CAP, CHANOS_ERR_NUL,
        CHANOS_ERR_NOSPACE,
    };
    size_t i, j;

    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = chanos_strerror(codes[i]);

        CHECK(codes[i] < -4096);
        CHECK(s != NULL && strcmp(s, "unknown chanos error") != 0);
        for (j = 0; j < i; j++)
            CHECK(codes[j] != codes[i] && strcmp(chanos_strerror(codes[j]), s) != 0);
    }
    CHECK(strcmp(chanos_strerror(0), "success") == 0);
    CHECK(strcmp(chanos_strerror(-ENOMEM), strerror(ENOMEM)) == 0);
    CHECK(strcmp(chanos_strerror(-4200), "unknown chanos error") == 0);
    CHECK(strcmp(chanos_strerror(7), "unknown chanos error") == 0);
}

static void test_load_store(void)
{
    uint8_t b[17];

    memset(b, 0xee, sizeof b);
    chanos_store_u16(b + 1, 0x0102);
    CHECK(b[0] == 0xee && b[1] == 0x02 && b[2] == 0x01 && b[3] == 0xee);
    CHECK(chanos_load_u16(b + 1) == 0x0102);
    chanos_store_u32(b + 3, 0x01020304);
    CHECK(b[3] == 4 && b[4] == 3 && b[5] == 2 && b[6] == 1 && b[7] == 0xee);
    CHECK(chanos_load_u32(b + 3) == 0x01020304);
    chanos_store_u64(b + 7, UINT64_C(0x0102030405060708));
    CHECK(b[7] == 8 && b[14] == 1 && b[15] == 0xee);
    CHECK(chanos_load_u64(b + 7) == UINT64_C(0x0102030405060708));
    chanos_store_u64(b + 9, UINT64_MAX);
    CHECK(chanos_load_u64(b + 9) == UINT64_MAX);
}

static void test_header(void)
{
    struct chanos_hdr h = { 24, 0x0201, CHANOS_KIND_CALL, 3, 0x0a0b0c0d, 0xffffffff };
    struct chanos_hdr g;
    uint8_t f[24];
    size_t n;

    memset(f, 0, sizeof f);
    chanos_hdr_put(f, &h);
    CHECK(f[0] == 24 && f[1] == 0 && f[4] == 0x01 && f[5] == 0x02);
    CHECK(f[6] == CHANOS_KIND_CALL && f[7] == 3 && f[8] == 0x0d && f[15] == 0xff);
    CHECK_EQ(chanos_hdr_parse(&g, f, sizeof f), 0);
    CHECK(g.size == h.size && g.msg == h.msg && g.flags == h.flags);
    CHECK(g.ncaps == h.ncaps && g.call_id == h.call_id && g.timeout_us == h.timeout_us);
    for (n = 0; n < CHANOS_HEADER_SIZE; n++)
        CHECK_EQ(chanos_hdr_parse(&g, f, n), CHANOS_ERR_TRUNCATED);
    CHECK_EQ(chanos_hdr_parse(&g, f, 23), CHANOS_ERR_SIZE);
    chanos_hdr_set_call(f, 9, 10);
    CHECK(chanos_load_u32(f + 8) == 9 && chanos_load_u32(f + 12) == 10);
}

static void test_kinds(void)
{
    struct chanos_hdr h = { 16, 1, 0, 0, 0, 0 };
    unsigned flags;

    /* Every flags byte: only the five combinations of docs/wire.md. */
    for (flags = 0; flags < 256; flags++) {
        int want;

        h.flags = (uint8_t)flags;
        h.call_id = 0;
        h.timeout_us = 0;
        switch (flags) {
        case CHANOS_KIND_MESSAGE:
        case CHANOS_KIND_CALL:
        case CHANOS_KIND_REPLY:
        case CHANOS_KIND_ERROR:
        case CHANOS_KIND_CANCEL:
            want = (int)flags;
            break;
        default:
            want = CHANOS_ERR_HEADER;
        }
        CHECK_EQ(chanos_hdr_kind(&h), want);
        CHECK_EQ(chanos_hdr_check(&h, flags), want < 0 ? want : 0);
    }
    /* call_id: any on rpc frames, 0 on messages. */
    h.call_id = 5;
    h.flags = CHANOS_KIND_MESSAGE;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_ERR_HEADER);
    h.flags = CHANOS_KIND_CALL;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_KIND_CALL);
    h.flags = CHANOS_KIND_CANCEL;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_KIND_CANCEL);
    /* timeout_us: only on calls. */
    h.timeout_us = 1;
    h.flags = CHANOS_KIND_CALL;
    CHECK_EQ(chanos_hdr_check(&h, CHANOS_KIND_CALL), 0);
    h.flags = CHANOS_KIND_REPLY;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_ERR_HEADER);
    h.flags = CHANOS_KIND_ERROR;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_ERR_HEADER);
    h.flags = CHANOS_KIND_CANCEL;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_ERR_HEADER);
    h.call_id = 0;
    h.flags = CHANOS_KIND_MESSAGE;
    CHECK_EQ(chanos_hdr_kind(&h), CHANOS_ERR_HEADER);
    /* A valid frame of another kind. */
    h.timeout_us = 0;
    h.flags = CHANOS_KIND_REPLY;
    CHECK_EQ(chanos_hdr_check(&h, CHANOS_KIND_CALL), CHANOS_ERR_HEADER);
}

static void test_views(void)
{
    struct chanos_str s = chanos_cstr("hello");
    struct chanos_str t = CHANOS_STR("a\0b");
    struct chanos_str e = chanos_cstr("");

    CHECK(s.len == 5 && memcmp(s.ptr, "hello", 5) == 0);
    CHECK(t.len == 3);
    CHECK(e.len == 0 && e.ptr != NULL);
}

/* An encoder round trip of every primitive, by hand. */
static void test_encode_decode(void)
{
    uint8_t mem[128];
    int fds[2];
    struct chanos_buf b;
    struct chanos_enc e;
    struct chanos_dec d;
    struct chanos_hdr h;
    struct chanos_iref r = { 1, 2, { 0 } };
    struct chanos_iref r2;
    uint8_t raw[3];
    struct chanos_str s;
    struct chanos_bytes by;
    static const int in[] = { 40, 41 };
    int i;

    for (i = 0; i < 16; i++)
        r.token[i] = (uint8_t)(0xf0 + i);
    chanos_buf_init(&b, mem, sizeof mem, fds, 2);
    chanos_enc_begin(&e, &b, 7, CHANOS_KIND_REPLY);
    chanos_enc_u8(&e, 0xab);
    chanos_enc_i8(&e, -2);
    chanos_enc_u16(&e, 0xbeef);
    chanos_enc_i16(&e, -3);
    chanos_enc_u32(&e, 0xdeadbeef);
    chanos_enc_i32(&e, INT32_MIN);
    chanos_enc_u64(&e, UINT64_MAX);
    chanos_enc_i64(&e, INT64_MIN);
    chanos_enc_char(&e, 'z');
    chanos_enc_bool(&e, true);
    chanos_enc_enum(&e, NULL, 2, 3);
    chanos_enc_raw(&e, "xyz", 3);
    CHECK(chanos_enc_count(&e, NULL, 2, 2) == 2);
    chanos_enc_str(&e, NULL, CHANOS_STR("hi"), 2);
    chanos_enc_bytes(&e, NULL, (struct chanos_bytes){ (const uint8_t *)"\0\1", 2 }, 4);
    chanos_enc_iref(&e, &r);
    chanos_enc_cap(&e, NULL, 30);
    chanos_enc_cap(&e, NULL, 31);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK(b.len == 16 + 1 + 1 + 2 + 2 + 4 + 4 + 8 + 8 + 1 + 1 + 4 + 3 + 4 + 6 + 6 + 32 + 8);
    CHECK(b.nfds == 2 && fds[0] == 30 && fds[1] == 31);
    CHECK(chanos_load_u32(mem) == b.len && mem[6] == CHANOS_KIND_REPLY && mem[7] == 2);

    CHECK_EQ(chanos_dec_begin(&d, &h, mem, b.len, in, 2), 0);
    CHECK(h.msg == 7 && h.ncaps == 2);
    CHECK(chanos_dec_u8(&d, NULL) == 0xab);
    CHECK(chanos_dec_i8(&d, NULL) == -2);
    CHECK(chanos_dec_u16(&d, NULL) == 0xbeef);
    CHECK(chanos_dec_i16(&d, NULL) == -3);
    CHECK(chanos_dec_u32(&d, NULL) == 0xdeadbeef);
    CHECK(chanos_dec_i32(&d, NULL) == INT32_MIN);
    CHECK(chanos_dec_u64(&d, NULL) == UINT64_MAX);
    CHECK(chanos_dec_i64(&d, NULL) == INT64_MIN);
    CHECK(chanos_dec_char(&d, NULL) == 'z');
    CHECK(chanos_dec_bool(&d, NULL) == true);
    CHECK(chanos_dec_enum(&d, NULL, 3) == 2);
    chanos_dec_raw(&d, NULL, raw, 3);
    CHECK(memcmp(raw, "xyz", 3) == 0);
    CHECK(chanos_dec_count(&d, NULL, 2, 1) == 2);
    s = chanos_dec_str(&d, NULL, 2);
    CHECK(s.len == 2 && memcmp(s.ptr, "hi", 2) == 0);
    by = chanos_dec_bytes(&d, NULL, 4);
    CHECK(by.len == 2 && by.ptr[0] == 0 && by.ptr[1] == 1);
    chanos_dec_iref(&d, NULL, &r2);
    CHECK(memcmp(&r, &r2, sizeof r) == 0);
    CHECK(chanos_dec_cap(&d, NULL) == 40);
    CHECK(chanos_dec_cap(&d, NULL) == 41);
    CHECK_EQ(chanos_dec_end(&d), 0);

    /* Sticky errors: after the first, reads return zero values. */
    CHECK_EQ(chanos_dec_begin(&d, &h, mem, b.len, in, 2), 0);
    d.len = 18; /* pretend the frame ends after two bytes of body */
    CHECK(chanos_dec_u16(&d, NULL) == 0xfeab);
    CHECK(chanos_dec_u32(&d, NULL) == 0);
    CHECK(chanos_dec_u8(&d, NULL) == 0); /* even though one byte would fit */
    CHECK(chanos_dec_cap(&d, NULL) == -1);
    s = chanos_dec_str(&d, NULL, 10);
    CHECK(s.ptr == NULL && s.len == 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_TRUNCATED);
}

static void test_encode_errors(void)
{
    uint8_t mem[2048];
    int fds[300];
    struct chanos_buf b;
    struct chanos_enc e;
    int i;

    chanos_buf_init(&b, mem, sizeof mem, fds, 300);
    /* 255 capabilities fit in a frame, 256 do not. */
    chanos_enc_begin(&e, &b, 1, 0);
    for (i = 0; i < CHANOS_MAX_CAPS; i++)
        chanos_enc_cap(&e, NULL, i);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK(b.nfds == 255 && mem[7] == 255);
    chanos_buf_reset(&b);
    chanos_enc_begin(&e, &b, 1, 0);
    for (i = 0; i <= CHANOS_MAX_CAPS; i++)
        chanos_enc_cap(&e, NULL, i);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_CAP);
    CHECK(b.len == 0 && b.nfds == 0);

    /* Bounds, NUL and enums. */
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_str(&e, NULL, CHANOS_STR("abc"), 2);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_BOUND);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_str(&e, NULL, CHANOS_STR("a\0"), 2);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NUL);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_str(&e, NULL, (struct chanos_str){ NULL, 0 }, 2);
    chanos_enc_bytes(&e, NULL, (struct chanos_bytes){ NULL, 0 }, 0);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK(b.len == 24);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_bytes(&e, NULL, (struct chanos_bytes){ mem, 3 }, 2);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_BOUND);
    chanos_enc_begin(&e, &b, 1, 0);
    CHECK(chanos_enc_count(&e, NULL, 5, 4) == 0);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_BOUND);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_enum(&e, NULL, 3, 3);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_ENUM);
    /* The first value error is the one reported. */
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_enum(&e, NULL, 9, 3);
    chanos_enc_str(&e, NULL, CHANOS_STR("abc"), 1);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_ENUM);
    CHECK(b.len == 24 && b.nfds == 0);

    /* NOSPACE: in the header, in the body, in fds; value errors first. */
    chanos_buf_init(&b, mem, 10, fds, 0);
    chanos_enc_begin(&e, &b, 1, 0);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NOSPACE);
    chanos_buf_init(&b, mem, 20, fds, 0);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_u64(&e, 1);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NOSPACE);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_u64(&e, 1);
    chanos_enc_str(&e, NULL, CHANOS_STR("toolong"), 3);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_BOUND);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_cap(&e, NULL, 5);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NOSPACE);
    CHECK(b.len == 0 && b.nfds == 0);
    chanos_buf_init(&b, mem, 20, NULL, 0);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_cap(&e, NULL, 5);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_NOSPACE);
    chanos_buf_init(&b, mem, 20, fds, 1);
    chanos_enc_begin(&e, &b, 1, 0);
    chanos_enc_cap(&e, NULL, 5);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK(b.len == 20 && b.nfds == 1 && fds[0] == 5);
}

static void test_decode_errors(void)
{
    uint8_t f[64];
    struct chanos_dec d;
    struct chanos_hdr h = { 0, 3, 0, 0, 0, 0 };
    static const int fds[] = { 7, 8, 9 };

    memset(f, 0, sizeof f);
    h.size = 16 + 8;
    chanos_hdr_put(f, &h);
    /* begin_msg: truncated, size, unknown message, header. */
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 15, NULL, 0, 3, CHANOS_KIND_MESSAGE), CHANOS_ERR_TRUNCATED);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 25, NULL, 0, 3, CHANOS_KIND_MESSAGE), CHANOS_ERR_SIZE);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 4, CHANOS_KIND_MESSAGE), CHANOS_ERR_UNKNOWN_MESSAGE);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, CHANOS_KIND_CALL), CHANOS_ERR_HEADER);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, CHANOS_KIND_MESSAGE), 0);

    /* Strings: bound before bytes, then truncation, then NUL. */
    chanos_store_u32(f + 16, 3);
    memcpy(f + 20, "ab\0c", 4);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_str(&d, NULL, 2);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_BOUND);
    chanos_store_u32(f + 16, 5);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_str(&d, NULL, 8);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_TRUNCATED);
    chanos_store_u32(f + 16, 4);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_str(&d, NULL, 8);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_NUL);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_bytes(&d, NULL, 8); /* a NUL is fine in bytes */
    CHECK_EQ(chanos_dec_end(&d), 0);
    chanos_store_u32(f + 16, 0xffffffff);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_bytes(&d, NULL, 8);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_BOUND);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    CHECK(chanos_dec_count(&d, NULL, 0xfffffffe, 1) == 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_BOUND);
    /* A count within its bound whose elements the bytes left cannot
     * hold is TRUNCATED before any element is read, as in Go. */
    chanos_store_u32(f + 16, 2);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    CHECK(chanos_dec_count(&d, NULL, 4, 4) == 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_TRUNCATED);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    CHECK(chanos_dec_count(&d, NULL, 4, 2) == 2);

    /* Bool and enum values. */
    f[16] = 2;
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    (void)chanos_dec_bool(&d, NULL);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_BOOL);
    chanos_store_u32(f + 16, 1);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    CHECK(chanos_dec_enum(&d, NULL, 1) == 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_ENUM);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, NULL, 0, 3, 0), 0);
    CHECK(chanos_dec_enum(&d, NULL, 2) == 1);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_TRAILING);

    /* Capabilities: index, ncaps and nfds. */
    chanos_store_u32(f + 16, 0);
    chanos_store_u32(f + 20, 1);
    f[7] = 2;
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 2, 3, 0), 0);
    CHECK(chanos_dec_cap(&d, NULL) == 7 && chanos_dec_cap(&d, NULL) == 8);
    CHECK_EQ(chanos_dec_end(&d), 0);
    /* one fd for an ncaps of 2: no capability is handed out */
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 3, 0), 0);
    CHECK(chanos_dec_cap(&d, NULL) == -1);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    /* more capability values than ncaps, and fewer */
    f[7] = 1;
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 3, 0), 0);
    CHECK(chanos_dec_cap(&d, NULL) == 7 && chanos_dec_cap(&d, NULL) == -1);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    f[7] = 3;
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 3, 3, 0), 0);
    CHECK(chanos_dec_cap(&d, NULL) == 7 && chanos_dec_cap(&d, NULL) == 8);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    f[7] = 2;
    chanos_store_u32(f + 16, 1);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 2, 3, 0), 0);
    (void)chanos_dec_cap(&d, NULL);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);

    /* More fds than ncaps, or fewer, is CAP before any fault of the body
     * (docs/wire.md, "Order of checks" 4), and after the header's. */
    f[7] = 1;
    f[16] = 2; /* a bad bool */
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 3, 0), 0);
    (void)chanos_dec_bool(&d, NULL);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_BOOL);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 2, 3, 0), 0);
    (void)chanos_dec_bool(&d, NULL);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_dec_begin(&d, &h, f, 24, NULL, 0), 0);
    (void)chanos_dec_bool(&d, NULL);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    f[7] = 0;
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 3, 0), 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_CAP);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 4, 0), CHANOS_ERR_UNKNOWN_MESSAGE);
    CHECK_EQ(chanos_dec_begin_msg(&d, f, 24, fds, 1, 3, CHANOS_KIND_CALL), CHANOS_ERR_HEADER);
}

/*
 * A fault's description, as Go's wire.Error writes one: each part only if
 * known, cut as snprintf cuts; and its path, built from the inside out
 * (chanos_wire_leave_), Go's joins included, a path too long for the
 * record keeping its innermost part.
 */
static void test_fault_text(void)
{
    struct chanos_wire_fault f;
    struct chanos_enc e;
    struct chanos_dec d;
    struct chanos_buf b;
    struct chanos_hdr h;
    uint8_t mem[64];
    char out[CHANOS_WIRE_FAULT_TEXT_MAX], inner[80];

    CHECK_EQ(chanos_wire_fault_describe(NULL, out, sizeof out), 0);
    CHECK_STR(out, "");
    memset(&f, 0, sizeof f);
    CHECK_EQ(chanos_wire_fault_describe(&f, out, sizeof out), 0);
    CHECK_STR(out, "");
    f.code = CHANOS_ERR_BOUND;
    f.offset = -1;
    CHECK_EQ(chanos_wire_fault_describe(&f, out, sizeof out), 11);
    CHECK_STR(out, "wire: bound");
    f.message = "kv.put";
    strcpy(f.detail, "string length 300 exceeds bound 256");
    strcpy(f.field, "key");
    f.offset = 20;
    CHECK_STR((chanos_wire_fault_describe(&f, out, sizeof out), out),
              "wire: kv.put: field key: string length 300 exceeds bound 256 at offset 20");
    CHECK_EQ(chanos_wire_fault_describe(&f, out, 10), 73);
    CHECK_STR(out, "wire: kv.");

    /* the joins of Go's Leave and LeaveIndex */
    strcpy(f.field, "x");
    chanos_wire_leave_(&f, "from");
    CHECK_STR(f.field, "from.x");
    chanos_wire_leave_index_(&f, "lines", 1);
    CHECK_STR(f.field, "lines[1].from.x");
    f.field[0] = '\0';
    chanos_wire_leave_index_(&f, "", 3);
    CHECK_STR(f.field, "[3]");
    chanos_wire_leave_index_(&f, "", 2);
    CHECK_STR(f.field, "[2][3]");
    chanos_wire_leave_(&f, "m");
    CHECK_STR(f.field, "m[2][3]");
    chanos_wire_leave_(&f, "");
    CHECK_STR(f.field, "m[2][3]");
    chanos_wire_leave_(NULL, "x"); /* no record: nothing */

    /* too long: the innermost part stays, after "..." */
    memset(inner, 'i', sizeof inner - 1);
    inner[sizeof inner - 1] = '\0';
    strcpy(f.field, inner);
    chanos_wire_leave_(&f, "outer_field_name");
    CHECK_EQ(strlen(f.field), CHANOS_WIRE_FIELD_MAX - 1);
    CHECK(strncmp(f.field, "...", 3) == 0);
    CHECK(strcmp(f.field + strlen(f.field) - strlen(inner), inner) == 0);
    CHECK(strstr(f.field, "name.") != NULL);
    chanos_wire_leave_index_(&f, "a", 7);
    CHECK_EQ(strlen(f.field), CHANOS_WIRE_FIELD_MAX - 1);
    CHECK(strcmp(f.field + strlen(f.field) - strlen(inner), inner) == 0);
    memset(inner, 'n', sizeof inner - 1);
    chanos_wire_leave_(&f, inner); /* a name longer than what is left */
    CHECK_EQ(strlen(f.field), CHANOS_WIRE_FIELD_MAX - 1);
    CHECK(strncmp(f.field, "...", 3) == 0);

    /* hand-written coding describes its faults when given a record */
    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    b.fault = &f;
    chanos_enc_begin(&e, &b, 1, CHANOS_KIND_MESSAGE);
    chanos_enc_u32(&e, 7);
    chanos_enc_enum(&e, "c", 3, 3);
    CHECK_EQ(chanos_enc_end(&e), CHANOS_ERR_ENUM);
    CHECK_STR((chanos_wire_fault_describe(&f, out, sizeof out), out),
              "wire: field c: enum value 3 out of range (3 enumerators) at offset 20");
    chanos_enc_begin(&e, &b, 1, CHANOS_KIND_MESSAGE);
    chanos_enc_u32(&e, 7);
    CHECK_EQ(chanos_enc_end(&e), 0);
    CHECK_EQ(chanos_dec_begin(&d, &h, mem, b.len - 1, NULL, 0), CHANOS_ERR_SIZE);
    CHECK_EQ(chanos_dec_begin(&d, &h, mem, b.len, NULL, 0), 0);
    d.fault = &f;
    CHECK(chanos_dec_u64(&d, "v") == 0);
    CHECK_EQ(chanos_dec_end(&d), CHANOS_ERR_TRUNCATED);
    CHECK_STR((chanos_wire_fault_describe(&f, out, sizeof out), out),
              "wire: field v: frame ends 4 bytes into the field at offset 16");
}

/*
 * The metadata trailers of testdata/wire/metadata.json, which Go's wire
 * package passes too: a trailer is split off its call (or reply) and
 * read back by key, and the entries encode to it in any order they are
 * given; malformed ones are refused with their code, as is metadata a
 * sender must not send.
 */
static void test_metadata_vectors(void)
{
    static uint8_t t[CHANOS_META_MAX + 2];
    struct chanos_meta rev[CHANOS_META_KEYS_MAX + 1];
    size_t n = 0, len;
    int splits = 0, sent = 0;

    for (size_t i = 0; i < sizeof md_vectors / sizeof md_vectors[0]; i++) {
        const struct md_vector *v = &md_vectors[i];
        bool sendable = v->frame == NULL || strcmp(v->section, "trailers") == 0 ||
                        v->base != NULL;
        /* what the trailer follows: a reply's own frame, or the call */
        const uint8_t *before = v->base != NULL ? v->base : md_call;
        size_t before_len = v->base != NULL ? v->base_len : sizeof md_call;

        check_context = v->name;
        if (v->frame != NULL) {
            /* a heap block of exactly the frame's size, for ASan */
            uint8_t *f = malloc(v->len);
            int rc;

            CHECK(f != NULL);
            if (f == NULL)
                continue;
            memcpy(f, v->frame, v->len);
            n = 0;
            rc = chanos_meta_split(f, v->len, &n);
            CHECK_EQ(rc, v->error);
            splits++;
            if (rc == 0 && v->error == 0) {
                struct chanos_frame fr;
                struct chanos_str val;

                /* the frame before the trailer, its header aside */
                CHECK_EQ(n, before_len);
                CHECK(n >= CHANOS_HEADER_SIZE && n <= v->len && n == before_len &&
                      memcmp(f + CHANOS_HEADER_SIZE, before + CHANOS_HEADER_SIZE,
                             n - CHANOS_HEADER_SIZE) == 0);
                memset(&fr, 0, sizeof fr);
                fr.meta = f + n;
                fr.meta_len = v->len - 2 - n;
                CHECK_EQ(fr.meta_len == 0, v->n == 0);
                for (unsigned j = 0; j < v->n; j++) {
                    CHECK_EQ(chanos_frame_meta(&fr, v->entries[j].key, &val), 0);
                    CHECK(val.len == strlen(v->entries[j].value) &&
                          memcmp(val.ptr, v->entries[j].value, val.len) == 0);
                }
                CHECK_EQ(chanos_frame_meta(&fr, "missing", &val), CHANOS_ERR_NOT_FOUND);
            }
            free(f);
        }
        if (!sendable)
            continue;
        /* in the order given, and reversed: a sender sorts them */
        CHECK(v->n <= CHANOS_META_KEYS_MAX + 1);
        for (unsigned j = 0; j < v->n && j <= CHANOS_META_KEYS_MAX; j++)
            rev[j] = v->entries[v->n - 1 - j];
        for (int r = 0; r < 2; r++) {
            const struct chanos_meta *kv = r ? rev : v->entries;

            len = 0;
            CHECK_EQ(chanos_meta_encode(kv, v->n, t, sizeof t, &len), v->error);
            sent++;
            if (v->error == 0) {
                CHECK_EQ(len, v->len - before_len);
                CHECK(len == v->len - before_len &&
                      memcmp(t, v->frame + before_len, len) == 0);
                /* one byte short: NOSPACE, with the room needed */
                if (len > 0) {
                    size_t need = 0;

                    CHECK_EQ(chanos_meta_encode(kv, v->n, t, len - 1, &need), CHANOS_ERR_NOSPACE);
                    CHECK_EQ(need, len);
                }
            }
        }
    }
    check_context = NULL;
    CHECK(splits > 30 && sent > 20);
    CHECK(strcmp(md_vectors[sizeof md_vectors / sizeof md_vectors[0] - 1].section, "replies") == 0);
}

int main(void)
{
    test_strerror();
    test_load_store();
    test_header();
    test_kinds();
    test_views();
    test_encode_decode();
    test_encode_errors();
    test_decode_errors();
    test_fault_text();
    test_metadata_vectors();
    return check_done("test_wire");
}
