/*
 * codegen_test.c: tests the C that chanosc generates, on c/tests/ctest.if.
 *
 * Every frame is encoded and compared byte for byte where the bytes are
 * spelled out, decoded back, and put through every error path of the
 * encoder and the decoder. Frames are decoded from heap buffers of exactly
 * their length, so that AddressSanitizer catches any read past the end.
 * The client stubs and the server dispatch run over a ring pair, the
 * server on a thread of its own (test_stubs).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the ring pair of ump_testutil.h */
#endif

#include "check.h"
#include "ctest.h"
#include "ump_testutil.h"

#include <errno.h>
#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A frame being built or decoded: exactly len bytes on the heap. */
struct frame {
    uint8_t *p;
    size_t len;
};

/* frame_alloc returns len zero bytes on the heap. */
static struct frame frame_alloc(size_t len)
{
    struct frame f;

    f.p = calloc(len > 0 ? len : 1, 1);
    if (f.p == NULL)
        abort();
    f.len = len;
    return f;
}

static struct frame frame_dup(const uint8_t *p, size_t len)
{
    struct frame f = frame_alloc(len);

    if (len > 0)
        memcpy(f.p, p, len);
    return f;
}

/* frame_make builds a frame from a header and a body. */
static struct frame frame_make(uint16_t msg, uint8_t flags, uint8_t ncaps,
                               uint32_t call_id, uint32_t timeout_us,
                               const uint8_t *body, size_t n)
{
    struct chanos_hdr h;
    struct frame f = frame_alloc(CHANOS_HEADER_SIZE + n);

    h.size = (uint32_t)(CHANOS_HEADER_SIZE + n);
    h.msg = msg;
    h.flags = flags;
    h.ncaps = ncaps;
    h.call_id = call_id;
    h.timeout_us = timeout_us;
    chanos_hdr_put(f.p, &h);
    if (n > 0)
        memcpy(f.p + CHANOS_HEADER_SIZE, body, n);
    return f;
}

/* frame_resize returns a copy of f cut or extended (with zeros) to len
 * bytes, with the header's size patched to match. */
static struct frame frame_resize(struct frame f, size_t len)
{
    struct frame g = frame_alloc(len);

    memcpy(g.p, f.p, len < f.len ? len : f.len);
    if (len >= 4)
        chanos_store_u32(g.p, (uint32_t)len);
    return g;
}

static void frame_free(struct frame f) { free(f.p); }

/* Encoding into a caller-owned buffer; newbuf resets it. */
static uint8_t bufmem[4096];
static int buffds[16];

static struct chanos_buf newbuf(void)
{
    struct chanos_buf b;

    memset(bufmem, 0xAA, sizeof bufmem);
    chanos_buf_init(&b, bufmem, sizeof bufmem, buffds, 16);
    return b;
}

static const uint8_t scalars_body[] = {
    0x01,                                           /* u8 */
    0x02, 0x03,                                     /* u16 */
    0x04, 0x05, 0x06, 0x07,                         /* u32 */
    0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, /* u64 */
    0xff,                                           /* i8 -1 */
    0xfe, 0xff,                                     /* i16 -2 */
    0xfd, 0xff, 0xff, 0xff,                         /* i32 -3 */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, /* i64 min */
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* uintptr max */
    0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* intptr -5 */
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* size 6 */
    0x41,                                           /* char 'A' */
    0x01,                                           /* bool true */
    0x34, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* errval */
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* iref machine */
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* iref export */
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, /* iref token */
    0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0xef, 0xbe, 0xad, 0xde,                         /* handle */
    0x02, 0x00, 0x00, 0x00,                         /* shade blue */
};
#define SCALARS_FLAG_OFF (16 + 1 + 2 + 4 + 8 + 1 + 2 + 4 + 8 + 8 + 8 + 8 + 1)
#define SCALARS_ENUM_OFF (16 + 104 - 4)

static void fill_scalars(struct ctest_scalars *m)
{
    int i;

    memset(m, 0, sizeof *m);
    m->u8 = 0x01;
    m->u16 = 0x0302;
    m->u32 = 0x07060504;
    m->u64 = UINT64_C(0x0f0e0d0c0b0a0908);
    m->i8 = -1;
    m->i16 = -2;
    m->i32 = -3;
    m->i64 = INT64_MIN;
    m->up = UINT64_MAX;
    m->ip = -5;
    m->sz = 6;
    m->ch = 'A';
    m->flag = true;
    m->err = 0x1234;
    m->ref.machine = 1;
    m->ref.export_id = 2;
    for (i = 0; i < 16; i++)
        m->ref.token[i] = (uint8_t)i;
    m->h = 0xdeadbeef;
    m->s = CTEST_COLOR_BLUE;
}

static void test_scalars(void)
{
    struct ctest_scalars m, d;
    struct chanos_buf b = newbuf();
    struct frame want = frame_make(CTEST_MSG_SCALARS, 0, 0, 0, 0, scalars_body,
                                   sizeof scalars_body);
    struct frame f, g;
    size_t n;

    CHECK(sizeof scalars_body == 104);
    CHECK(want.len == CTEST_SCALARS_MAX_FRAME_SIZE);
    fill_scalars(&m);
    CHECK_EQ(ctest_scalars_encode(&m, &b), 0);
    CHECK(b.len == want.len && memcmp(b.data, want.p, want.len) == 0);
    CHECK(b.nfds == 0);

    f = frame_dup(b.data, b.len);
    memset(&d, 0x55, sizeof d);
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), 0);
    CHECK(d.u8 == m.u8 && d.u16 == m.u16 && d.u32 == m.u32 && d.u64 == m.u64);
    CHECK(d.i8 == -1 && d.i16 == -2 && d.i32 == -3 && d.i64 == INT64_MIN);
    CHECK(d.up == UINT64_MAX && d.ip == -5 && d.sz == 6 && d.ch == 'A');
    CHECK(d.flag == true && d.err == 0x1234 && d.h == 0xdeadbeef);
    CHECK(d.s == CTEST_COLOR_BLUE);
    CHECK(memcmp(&d.ref, &m.ref, sizeof d.ref) == 0);

    /* Every cut inside the body, size patched: truncated. */
    for (n = 16; n < f.len; n++) {
        g = frame_resize(f, n);
        CHECK_EQ(ctest_scalars_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRUNCATED);
        frame_free(g);
    }
    /* Cuts inside the header: truncated; size unpatched: size. */
    for (n = 0; n < 16; n++)
        CHECK_EQ(ctest_scalars_decode(&d, f.p, n, NULL, 0), CHANOS_ERR_TRUNCATED);
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len - 1, NULL, 0), CHANOS_ERR_SIZE);
    /* One byte more: trailing. */
    g = frame_resize(f, f.len + 1);
    CHECK_EQ(ctest_scalars_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRAILING);
    CHECK_EQ(ctest_scalars_decode(&d, g.p, g.len - 1, NULL, 0), CHANOS_ERR_SIZE);
    frame_free(g);

    /* Field values. */
    f.p[SCALARS_FLAG_OFF] = 2;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOOL);
    f.p[SCALARS_FLAG_OFF] = 0;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), 0);
    CHECK(d.flag == false);
    f.p[SCALARS_ENUM_OFF] = 3;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_ENUM);
    f.p[SCALARS_ENUM_OFF] = 2;
    f.p[SCALARS_ENUM_OFF + 3] = 0x80;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_ENUM);
    f.p[SCALARS_ENUM_OFF + 3] = 0;

    /* The first error wins: a bad bool before a cut is reported as such. */
    g = frame_resize(f, SCALARS_FLAG_OFF + 3);
    g.p[SCALARS_FLAG_OFF] = 7;
    CHECK_EQ(ctest_scalars_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_BOOL);
    frame_free(g);

    /* Header. */
    f.p[4] = CTEST_MSG_EMPTY;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_UNKNOWN_MESSAGE);
    f.p[4] = 0;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_UNKNOWN_MESSAGE);
    f.p[4] = CTEST_MSG_SCALARS;
    f.p[6] = CHANOS_FLAG_CALL;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[6] = 0x10;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[6] = 0;
    f.p[8] = 1; /* call_id on a message */
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[8] = 0;
    f.p[15] = 1; /* timeout_us on a message */
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[15] = 0;
    f.p[7] = 1; /* ncaps, but no capability in the body */
    {
        int fd = 3;

        CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, &fd, 1), CHANOS_ERR_CAP);
    }
    f.p[7] = 0;
    CHECK_EQ(ctest_scalars_decode(&d, f.p, f.len, NULL, 0), 0);

    /* Too small a buffer, at every size: NOSPACE, buffer unchanged. */
    for (n = 0; n < want.len; n++) {
        struct chanos_buf s = newbuf();

        s.cap = n;
        CHECK_EQ(ctest_scalars_encode(&m, &s), CHANOS_ERR_NOSPACE);
        CHECK(s.len == 0 && s.nfds == 0);
    }
    /* Value errors come before NOSPACE. */
    {
        struct chanos_buf s = newbuf();

        s.cap = 10;
        m.s = (enum ctest_color)3;
        CHECK_EQ(ctest_scalars_encode(&m, &s), CHANOS_ERR_ENUM);
        s.cap = sizeof bufmem;
        CHECK_EQ(ctest_scalars_encode(&m, &s), CHANOS_ERR_ENUM);
        m.s = (enum ctest_color)-1;
        CHECK_EQ(ctest_scalars_encode(&m, &s), CHANOS_ERR_ENUM);
        CHECK(s.len == 0);
    }
    frame_free(f);
    frame_free(want);
}

static void test_empty(void)
{
    static const uint8_t want[] = { 16, 0, 0, 0, CTEST_MSG_EMPTY, 0, 0, 0,
                                    0, 0, 0, 0, 0, 0, 0, 0 };
    struct ctest_empty m = { 0 }, d;
    struct chanos_buf b = newbuf();
    struct frame f, g;

    CHECK_EQ(ctest_empty_encode(&m, &b), 0);
    CHECK(b.len == sizeof want && memcmp(b.data, want, sizeof want) == 0);
    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_empty_decode(&d, f.p, f.len, NULL, 0), 0);
    g = frame_resize(f, 17);
    CHECK_EQ(ctest_empty_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRAILING);
    frame_free(g);
    g = frame_resize(f, 15);
    CHECK_EQ(ctest_empty_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRUNCATED);
    frame_free(g);
    frame_free(f);
}

static void test_texts(void)
{
    static const uint8_t body[] = {
        5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o',
        3, 0, 0, 0, 0x00, 0xff, 0x80,
        0, 0, 0, 0,
    };
    static const uint8_t data[] = { 0x00, 0xff, 0x80 };
    struct ctest_texts m, d;
    struct chanos_buf b = newbuf();
    struct frame want = frame_make(CTEST_MSG_TEXTS, 0, 0, 0, 0, body, sizeof body);
    struct frame f, g;
    char longname[CTEST_TEXTS_NAME_MAX + 1];
    uint8_t body2[4 + CTEST_TEXTS_NAME_MAX + 1 + 8];

    memset(&m, 0, sizeof m);
    m.name = CHANOS_STR("hello");
    m.data.ptr = data;
    m.data.len = 3;
    m.chars.ptr = NULL; /* an empty view may be NULL */
    m.chars.len = 0;
    CHECK_EQ(ctest_texts_encode(&m, &b), 0);
    CHECK(b.len == want.len && memcmp(b.data, want.p, want.len) == 0);

    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), 0);
    /* Views point into the frame. */
    CHECK(d.name.len == 5 && d.name.ptr == (const char *)f.p + 20);
    CHECK(memcmp(d.name.ptr, "hello", 5) == 0);
    CHECK(d.data.len == 3 && memcmp(d.data.ptr, data, 3) == 0);
    CHECK(d.chars.len == 0 && d.chars.ptr != NULL);

    /* Every cut: truncated. */
    for (size_t n = 16; n < f.len; n++) {
        g = frame_resize(f, n);
        CHECK_EQ(ctest_texts_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRUNCATED);
        frame_free(g);
    }
    /* NUL inside the string. */
    f.p[22] = 0;
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_NUL);
    f.p[22] = 'l';
    /* A NUL in a byte array is fine. */
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), 0);
    /* Bounds: checked before the bytes, so a short frame says BOUND. */
    f.p[16] = CTEST_TEXTS_NAME_MAX + 1;
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOUND);
    f.p[16] = 0xff;
    f.p[19] = 0xff;
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOUND);
    f.p[16] = 5;
    f.p[19] = 0;
    f.p[25] = CTEST_TEXTS_DATA_MAX + 1;
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOUND);
    f.p[25] = 6; /* within the bound, past the end */
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_TRUNCATED);
    f.p[25] = 3;
    CHECK_EQ(ctest_texts_decode(&d, f.p, f.len, NULL, 0), 0);

    /* A string at its bound is fine; one byte more is not, both ways. */
    memset(longname, 'x', sizeof longname);
    memset(body2, 0, sizeof body2);
    body2[0] = CTEST_TEXTS_NAME_MAX;
    memset(body2 + 4, 'x', CTEST_TEXTS_NAME_MAX);
    g = frame_make(CTEST_MSG_TEXTS, 0, 0, 0, 0, body2, 4 + CTEST_TEXTS_NAME_MAX + 8);
    CHECK_EQ(ctest_texts_decode(&d, g.p, g.len, NULL, 0), 0);
    CHECK(d.name.len == CTEST_TEXTS_NAME_MAX);
    frame_free(g);
    b = newbuf();
    m.name.ptr = longname;
    m.name.len = CTEST_TEXTS_NAME_MAX;
    CHECK_EQ(ctest_texts_encode(&m, &b), 0);
    b = newbuf();
    m.name.len = CTEST_TEXTS_NAME_MAX + 1;
    CHECK_EQ(ctest_texts_encode(&m, &b), CHANOS_ERR_BOUND);
    CHECK(b.len == 0);
    m.name = CHANOS_STR("a\0b");
    CHECK_EQ(ctest_texts_encode(&m, &b), CHANOS_ERR_NUL);
    m.name = CHANOS_STR("ok");
    m.data.len = CTEST_TEXTS_DATA_MAX + 1;
    CHECK_EQ(ctest_texts_encode(&m, &b), CHANOS_ERR_BOUND);
    m.data.len = 3;
    m.chars = (struct chanos_bytes){ (const uint8_t *)"abcde", 5 };
    CHECK_EQ(ctest_texts_encode(&m, &b), CHANOS_ERR_BOUND);
    CHECK(b.len == 0);
    frame_free(f);
    frame_free(want);
}

static void fill_arrays(struct ctest_arrays *m)
{
    memset(m, 0, sizeof *m);
    m->nvals = 2;
    m->vals[0] = 1;
    m->vals[1] = 0xffffffff;
    m->nbits = 3;
    m->bits[0] = true;
    m->bits[2] = true;
    m->ncolors = 1;
    m->colors[0] = CTEST_COLOR_GREEN;
    m->npairs = 1;
    m->pairs[0].a = 9;
    m->pairs[0].b = 10;
    m->nvecs = 1;
    m->vecs[0][0] = -1;
    m->vecs[0][2] = 3;
    m->m[1][2] = 7;
    memcpy(m->addr, "\x01\x02\x03\x04\x05\x06", 6);
}

static void test_arrays(void)
{
    static const uint8_t body[] = {
        2, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,     /* vals */
        3, 0, 0, 0, 1, 0, 1,                                /* bits */
        1, 0, 0, 0, 1, 0, 0, 0,                             /* colors */
        1, 0, 0, 0, 9, 10, 0, 0, 0, 0, 0, 0, 0,             /* pairs */
        1, 0, 0, 0, 0xff, 0xff, 0, 0, 3, 0,                 /* vecs */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0,                 /* m */
        1, 2, 3, 4, 5, 6,                                   /* addr */
    };
    struct ctest_arrays m, d;
    struct chanos_buf b = newbuf();
    struct frame want = frame_make(CTEST_MSG_ARRAYS, 0, 0, 0, 0, body, sizeof body);
    struct frame f, g;

    fill_arrays(&m);
    CHECK_EQ(ctest_arrays_encode(&m, &b), 0);
    CHECK(b.len == want.len && memcmp(b.data, want.p, want.len) == 0);
    f = frame_dup(b.data, b.len);
    memset(&d, 0x55, sizeof d);
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), 0);
    CHECK(d.nvals == 2 && d.vals[0] == 1 && d.vals[1] == 0xffffffff);
    CHECK(d.nbits == 3 && d.bits[0] && !d.bits[1] && d.bits[2]);
    CHECK(d.ncolors == 1 && d.colors[0] == CTEST_COLOR_GREEN);
    CHECK(d.npairs == 1 && d.pairs[0].a == 9 && d.pairs[0].b == 10);
    CHECK(d.nvecs == 1 && d.vecs[0][0] == -1 && d.vecs[0][1] == 0 && d.vecs[0][2] == 3);
    CHECK(d.m[1][2] == 7 && d.m[0][0] == 0);
    CHECK(memcmp(d.addr, "\x01\x02\x03\x04\x05\x06", 6) == 0);

    for (size_t n = 16; n < f.len; n++) {
        g = frame_resize(f, n);
        CHECK_EQ(ctest_arrays_decode(&d, g.p, g.len, NULL, 0), CHANOS_ERR_TRUNCATED);
        frame_free(g);
    }
    /* Counts past their bound, even huge ones. */
    f.p[16] = CTEST_ARRAYS_VALS_MAX + 1;
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOUND);
    memset(f.p + 16, 0xff, 4);
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOUND);
    memcpy(f.p + 16, "\x02\x00\x00\x00", 4);
    f.p[16 + 12 + 4 + 1] = 2; /* bits[1] */
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_BOOL);
    f.p[16 + 12 + 4 + 1] = 0;
    f.p[16 + 12 + 7 + 4] = 3; /* colors[0] */
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_ENUM);
    f.p[16 + 12 + 7 + 4] = 1;
    CHECK_EQ(ctest_arrays_decode(&d, f.p, f.len, NULL, 0), 0);

    m.nvals = CTEST_ARRAYS_VALS_MAX + 1;
    CHECK_EQ(ctest_arrays_encode(&m, &b), CHANOS_ERR_BOUND);
    m.nvals = UINT32_MAX; /* must not read past vals[] */
    CHECK_EQ(ctest_arrays_encode(&m, &b), CHANOS_ERR_BOUND);
    m.nvals = 2;
    m.colors[0] = (enum ctest_color)7;
    CHECK_EQ(ctest_arrays_encode(&m, &b), CHANOS_ERR_ENUM);
    m.colors[0] = CTEST_COLOR_RED;
    m.npairs = 3;
    CHECK_EQ(ctest_arrays_encode(&m, &b), CHANOS_ERR_BOUND);
    CHECK(b.len == want.len); /* only the first frame */
    frame_free(f);
    frame_free(want);
}

static void fill_caps(struct ctest_caps *m)
{
    memset(m, 0, sizeof *m);
    m->a = 10;
    m->nmore = 2;
    m->more[0] = 11;
    m->more[1] = 12;
    m->r.p.x = -7;
    m->r.p.c = CTEST_COLOR_BLUE;
    memcpy(m->r.addr, "abcdef", 6);
    m->r.m[0][1] = 300;
    m->r.f[1] = true;
    m->r.fd = 13;
}

static void test_caps(void)
{
    static const int fds[] = { 110, 111, 112, 113, 114 };
    static struct ctest_msg any; /* large: the union holds the biggest frame */
    struct ctest_caps m, d;
    struct chanos_buf b = newbuf();
    struct frame f, g;
    int rc;

    fill_caps(&m);
    CHECK_EQ(ctest_caps_encode(&m, &b), 0);
    CHECK(b.nfds == 4);
    CHECK(buffds[0] == 10 && buffds[1] == 11 && buffds[2] == 12 && buffds[3] == 13);
    CHECK(b.data[7] == 4); /* ncaps */
    /* Indices in encoding order: a, more[0], more[1], r.fd. */
    CHECK(chanos_load_u32(b.data + 16) == 0);
    CHECK(chanos_load_u32(b.data + 20) == 2); /* nmore */
    CHECK(chanos_load_u32(b.data + 24) == 1);
    CHECK(chanos_load_u32(b.data + 28) == 2);
    CHECK(chanos_load_u32(b.data + b.len - 4) == 3);

    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 4), 0);
    CHECK(d.a == 110 && d.nmore == 2 && d.more[0] == 111 && d.more[1] == 112);
    CHECK(d.r.fd == 113);
    CHECK(d.r.p.x == -7);
    CHECK(d.r.p.c == CTEST_COLOR_BLUE && memcmp(d.r.addr, "abcdef", 6) == 0);
    CHECK(d.r.m[0][1] == 300 && !d.r.f[0] && d.r.f[1]);
    /* The fds that came with the frame must be as many as its ncaps
     * (docs/wire.md, "Order of checks" 4): more are refused as fewer are,
     * by both decoders. */
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 3), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, NULL, 0), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 3), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 4), 0);
    /* That check comes after the header's and before the body's: a bad
     * bool, met before the last capability, is still CAP. */
    f.p[f.len - 5] = 9;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 3), CHANOS_ERR_CAP);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    f.p[6] = CHANOS_KIND_CALL;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_HEADER);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 5), CHANOS_ERR_HEADER);
    f.p[6] = CHANOS_KIND_MESSAGE;
    f.p[4] = CTEST_MSG_EMPTY;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_UNKNOWN_MESSAGE);
    f.p[4] = CTEST_MSG_CAPS;
    f.p[f.len - 5] = 1;
    /* ncaps differs from the body's count. */
    f.p[7] = 5;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    f.p[7] = 3;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 5), CHANOS_ERR_CAP);
    f.p[7] = 4;
    /* An index out of canonical order. */
    f.p[24] = 2;
    f.p[28] = 1;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 4), CHANOS_ERR_CAP);
    f.p[24] = 1;
    f.p[28] = 2;
    f.p[16] = 0xff;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 4), CHANOS_ERR_CAP);
    f.p[16] = 0;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 4), 0);
    /* A bool inside the struct. */
    f.p[f.len - 5] = 9;
    CHECK_EQ(ctest_caps_decode(&d, f.p, f.len, fds, 4), CHANOS_ERR_BOOL);
    f.p[f.len - 5] = 1;
    /* Cuts: truncated. */
    for (size_t n = 16; n < f.len; n++) {
        g = frame_resize(f, n);
        rc = ctest_caps_decode(&d, g.p, g.len, fds, 4);
        CHECK_EQ(rc, CHANOS_ERR_TRUNCATED);
        frame_free(g);
    }

    /* Room for too few fds: NOSPACE, buffer unchanged. */
    for (uint32_t n = 0; n < 4; n++) {
        uint8_t mem[256];
        int few[4];
        struct chanos_buf s;

        chanos_buf_init(&s, mem, sizeof mem, few, n);
        CHECK_EQ(ctest_caps_encode(&m, &s), CHANOS_ERR_NOSPACE);
        CHECK(s.len == 0 && s.nfds == 0);
    }
    /* Appending a second frame: its indices restart at 0, its fds follow. */
    CHECK_EQ(ctest_caps_encode(&m, &b), 0);
    CHECK(b.len == 2 * f.len && b.nfds == 8);
    CHECK(memcmp(b.data, b.data + f.len, f.len) == 0);
    CHECK(buffds[4] == 10 && buffds[7] == 13);
    m.nmore = 4;
    CHECK_EQ(ctest_caps_encode(&m, &b), CHANOS_ERR_BOUND);
    CHECK(b.len == 2 * f.len && b.nfds == 8);
    frame_free(f);
}

/* on_caps takes the descriptors of a caps message: it closes them. */
static int on_caps(void *ctx, chanos_conn *c, const struct ctest_caps *m)
{
    int *ran = ctx;

    (void)c;
    (*ran)++;
    close(m->a);
    for (uint32_t i = 0; i < m->nmore; i++)
        close(m->more[i]);
    close(m->r.fd);
    return 0;
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/*
 * A frame that came with more descriptors than its ncaps does not decode,
 * so the dispatch closes every one of them and no handler runs; one with
 * as many hands them all to the handler. Either way none is left open.
 */
static void test_dispatch_extra_fds(void)
{
    static const struct ctest_server_ops ops = { .caps = on_caps };
    struct ctest_caps m;
    struct chanos_buf b = newbuf();
    struct chanos_frame f;
    int fds[6], ran = 0;

    fill_caps(&m);
    CHECK_EQ(ctest_caps_encode(&m, &b), 0);
    CHECK(b.data[7] == 4);
    for (uint32_t n = 4; n <= 5; n++) {
        for (int i = 0; i < 6; i += 2)
            CHECK(pipe(fds + i) == 0);
        close(fds[5]);
        memset(&f, 0, sizeof f);
        f.data = b.data;
        f.len = b.len;
        CHECK_EQ(chanos_hdr_parse(&f.hdr, b.data, b.len), 0);
        f.kind = CHANOS_KIND_MESSAGE;
        f.fds = fds;
        f.nfds = n;
        CHECK_EQ(ctest_dispatch(NULL, &f, &ops, &ran), n == 4 ? 0 : CHANOS_ERR_CAP);
        CHECK_EQ(ran, 1); /* the handler ran for 4, not for 5 */
        for (uint32_t i = 0; i < n; i++)
            CHECK(!fd_open(fds[i]));
        if (n == 4 && fd_open(fds[4]))
            close(fds[4]);
    }
}

static void test_keywords(void)
{
    struct ctest_keywords m, d;
    struct chanos_buf b = newbuf();
    struct frame f;

    memset(&m, 0, sizeof m);
    m.register_ = -42;
    m.long_ = 2;
    m.default_[0] = 1;
    m.default_[1] = 0xffff;
    m.errno_ = 5;
    CHECK_EQ(ctest_keywords_encode(&m, &b), 0);
    CHECK(b.len == CTEST_KEYWORDS_MAX_FRAME_SIZE);
    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_keywords_decode(&d, f.p, f.len, NULL, 0), 0);
    CHECK(d.register_ == -42 && d.long_ == 2 && d.default_[0] == 1);
    CHECK(d.default_[1] == 0xffff && d.errno_ == 5);
    frame_free(f);
}

static void test_rpc(void)
{
    static const int fds[] = { 200 };
    struct ctest_lookup_call c, dc;
    struct ctest_lookup_reply r, dr;
    struct ctest_sync_call sc = { 0 }, dsc;
    struct ctest_sync_reply dsr;
    struct ctest_msg any;
    struct chanos_buf b = newbuf();
    struct frame f, g;

    memset(&c, 0, sizeof c);
    c.key = CHANOS_STR("k");
    CHECK_EQ(ctest_lookup_call_encode(&c, &b), 0);
    CHECK(b.data[6] == CHANOS_FLAG_CALL);
    CHECK(chanos_load_u32(b.data + 8) == 0 && chanos_load_u32(b.data + 12) == 0);
    chanos_hdr_set_call(b.data, 77, 5000);
    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_lookup_call_decode(&dc, f.p, f.len, NULL, 0), 0);
    CHECK(dc.key.len == 1 && dc.key.ptr[0] == 'k');
    CHECK_EQ(ctest_lookup_reply_decode(&dr, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), 0);
    CHECK(any.msg == CTEST_MSG_LOOKUP && any.kind == CHANOS_KIND_CALL);
    CHECK(any.call_id == 77 && any.timeout_us == 5000);
    CHECK(any.u.lookup_call.key.len == 1);
    /* The interface-wide encoder writes call_id and timeout back. */
    b = newbuf();
    CHECK_EQ(ctest_encode(&any, &b), 0);
    CHECK(b.len == f.len && memcmp(b.data, f.p, f.len) == 0);
    /* Error replies and cancels belong to the connection layer. */
    f.p[6] = CHANOS_KIND_ERROR;
    f.p[12] = f.p[13] = f.p[14] = f.p[15] = 0;
    CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[6] = CHANOS_KIND_CANCEL;
    CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    f.p[6] = 0;
    CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    frame_free(f);

    memset(&r, 0, sizeof r);
    r.found = true;
    r.value.machine = 3;
    r.value.token[15] = 0xee;
    r.fd = 9;
    b = newbuf();
    CHECK_EQ(ctest_lookup_reply_encode(&r, &b), 0);
    CHECK(b.data[6] == CHANOS_FLAG_REPLY && b.data[7] == 1 && b.nfds == 1);
    chanos_hdr_set_call(b.data, 78, 0);
    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_lookup_reply_decode(&dr, f.p, f.len, fds, 1), 0);
    CHECK(dr.found && dr.value.machine == 3 && dr.value.token[15] == 0xee && dr.fd == 200);
    CHECK_EQ(ctest_lookup_call_decode(&dc, f.p, f.len, fds, 1), CHANOS_ERR_HEADER);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 1), 0);
    CHECK(any.kind == CHANOS_KIND_REPLY && any.call_id == 78 && any.u.lookup_reply.fd == 200);
    b = newbuf();
    CHECK_EQ(ctest_encode(&any, &b), 0);
    CHECK(b.len == f.len && memcmp(b.data, f.p, f.len) == 0);
    f.p[12] = 1; /* a reply carries no timeout */
    CHECK_EQ(ctest_lookup_reply_decode(&dr, f.p, f.len, fds, 1), CHANOS_ERR_HEADER);
    CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, 1), CHANOS_ERR_HEADER);
    frame_free(f);

    /* An rpc without arguments. */
    b = newbuf();
    CHECK_EQ(ctest_sync_call_encode(&sc, &b), 0);
    CHECK(b.len == 16);
    f = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_sync_call_decode(&dsc, f.p, f.len, NULL, 0), 0);
    CHECK_EQ(ctest_sync_reply_decode(&dsr, f.p, f.len, NULL, 0), CHANOS_ERR_HEADER);
    g = frame_resize(f, 20);
    CHECK_EQ(ctest_sync_call_decode(&dsc, g.p, g.len, NULL, 0), CHANOS_ERR_TRAILING);
    CHECK_EQ(ctest_decode(&any, g.p, g.len, NULL, 0), CHANOS_ERR_TRAILING);
    frame_free(g);
    frame_free(f);

    /* The interface-wide encoder rejects a tag it does not know. */
    memset(&any, 0, sizeof any);
    any.msg = 99;
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_UNKNOWN_MESSAGE);
    any.msg = CTEST_MSG_EMPTY;
    any.kind = CHANOS_KIND_CALL;
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_HEADER);
    any.msg = CTEST_MSG_SYNC;
    any.kind = CHANOS_KIND_MESSAGE;
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_HEADER);
}

/* test_any decodes each kind of frame with ctest_decode and encodes it
 * back with ctest_encode. */
static void test_any(void)
{
    struct ctest_scalars s;
    struct ctest_arrays a;
    struct ctest_caps c;
    struct ctest_msg any;
    struct chanos_buf b = newbuf();
    static const int fds[] = { 1, 2, 3, 4 };
    size_t ends[3];
    size_t start = 0;

    fill_scalars(&s);
    fill_arrays(&a);
    fill_caps(&c);
    CHECK_EQ(ctest_scalars_encode(&s, &b), 0);
    ends[0] = b.len;
    CHECK_EQ(ctest_arrays_encode(&a, &b), 0);
    ends[1] = b.len;
    CHECK_EQ(ctest_caps_encode(&c, &b), 0);
    ends[2] = b.len;
    for (int i = 0; i < 3; i++) {
        struct frame f = frame_dup(b.data + start, ends[i] - start);
        uint8_t out[512];
        int outfds[8];
        struct chanos_buf o;

        chanos_buf_init(&o, out, sizeof out, outfds, 8);
        CHECK_EQ(ctest_decode(&any, f.p, f.len, fds, f.p[7]), 0);
        CHECK(any.kind == CHANOS_KIND_MESSAGE && any.call_id == 0);
        CHECK_EQ(ctest_encode(&any, &o), 0);
        CHECK(o.len == f.len && memcmp(out, f.p, f.len) == 0);
        start = ends[i];
        frame_free(f);
    }
    CHECK(any.msg == CTEST_MSG_CAPS && any.u.caps.r.fd == 4);
    /* Unknown numbers. */
    {
        struct frame f = frame_make(CTEST_MSG_SHAPES + 1, 0, 0, 0, 0, NULL, 0);

        CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), CHANOS_ERR_UNKNOWN_MESSAGE);
        chanos_store_u16(f.p + 4, 0);
        CHECK_EQ(ctest_decode(&any, f.p, f.len, NULL, 0), CHANOS_ERR_UNKNOWN_MESSAGE);
        CHECK_EQ(ctest_decode(&any, f.p, 15, NULL, 0), CHANOS_ERR_TRUNCATED);
        CHECK_EQ(ctest_decode(&any, NULL, 0, NULL, 0), CHANOS_ERR_TRUNCATED);
        frame_free(f);
    }
}

/* ---- faults: which message and field, as Go's wire.Error says ---- */

/* text returns f described, as chanos_wire_fault_describe writes it, in a
 * buffer of its own. */
static const char *text(const struct chanos_wire_fault *f)
{
    static char buf[CHANOS_WIRE_FAULT_TEXT_MAX];

    chanos_wire_fault_describe(f, buf, sizeof buf);
    return buf;
}

/* fill_shapes sets two lines: (1,2)-(3,4) red, then (5,6)-(7,8) green. */
static void fill_shapes(struct ctest_shapes *m)
{
    memset(m, 0, sizeof *m);
    m->nlines = 2;
    for (int i = 0; i < 2; i++) {
        m->lines[i].from = (struct ctest_point){ 4 * i + 1, 4 * i + 2, (enum ctest_color)i };
        m->lines[i].to = (struct ctest_point){ 4 * i + 3, 4 * i + 4, (enum ctest_color)i };
    }
}

/*
 * An argument that does not encode, and a frame that does not decode, are
 * described with the frame's name, the field's path and its offset, in
 * Go's words (wire.Error), into the buffer's fault record (encoding) or
 * the one given to NAME_decode_fault; a success leaves the record alone.
 */
static void test_faults(void)
{
    struct chanos_wire_fault f;
    struct chanos_buf b = newbuf();
    struct ctest_lookup_call lc;
    struct ctest_arrays a, da;
    struct ctest_shapes sh, dsh;
    struct ctest_msg any;
    struct ctest_texts t;
    char key[40];
    struct frame fr;

    /* a string over its bound, a top-level argument */
    memset(&lc, 0, sizeof lc);
    memset(key, 'k', sizeof key);
    lc.key = (struct chanos_str){ key, sizeof key };
    memset(&f, 0, sizeof f);
    b.fault = &f;
    CHECK_EQ(ctest_lookup_call_encode(&lc, &b), CHANOS_ERR_BOUND);
    CHECK_EQ(f.code, CHANOS_ERR_BOUND);
    CHECK_STR(f.message, "ctest.lookup call");
    CHECK_STR(f.field, "key");
    CHECK_EQ(f.offset, 16);
    CHECK_STR(f.detail, "string length 40 exceeds bound 32");
    CHECK_STR(text(&f), "wire: ctest.lookup call: field key: string length 40 "
                        "exceeds bound 32 at offset 16");
    CHECK(b.len == 0);
    /* the record is written on failure only: a success leaves it */
    lc.key = CHANOS_STR("k");
    CHECK_EQ(ctest_lookup_call_encode(&lc, &b), 0);
    CHECK_EQ(f.code, CHANOS_ERR_BOUND);
    /* a NUL in a string, past the first argument */
    b = newbuf();
    b.fault = &f;
    memset(&t, 0, sizeof t);
    t.name = CHANOS_STR("ok");
    t.data = (struct chanos_bytes){ (const uint8_t *)"abcdefghi", 9 };
    CHECK_EQ(ctest_texts_encode(&t, &b), CHANOS_ERR_BOUND);
    CHECK_STR(text(&f), "wire: ctest.texts: field data: array count 9 exceeds "
                        "bound 8 at offset 22");
    t.data.len = 0;
    t.name = CHANOS_STR("a\0b");
    CHECK_EQ(ctest_texts_encode(&t, &b), CHANOS_ERR_NUL);
    CHECK_STR(text(&f), "wire: ctest.texts: field name: string holds a NUL byte "
                        "at index 1 at offset 16");

    /* an array over its bound */
    fill_arrays(&a);
    a.nvals = CTEST_ARRAYS_VALS_MAX + 1;
    CHECK_EQ(ctest_arrays_encode(&a, &b), CHANOS_ERR_BOUND);
    CHECK_STR(text(&f), "wire: ctest.arrays: field vals: array count 5 exceeds "
                        "bound 4 at offset 16");
    /* an element whose index the path holds */
    a.nvals = 2;
    a.colors[0] = (enum ctest_color)7;
    CHECK_EQ(ctest_arrays_encode(&a, &b), CHANOS_ERR_ENUM);
    CHECK_STR(text(&f), "wire: ctest.arrays: field colors[0]: enum value 7 out "
                        "of range (3 enumerators) at offset 39");

    /* a struct in a struct in an array: lines[1] starts at 20 + 24 */
    fill_shapes(&sh);
    sh.lines[1].to.c = (enum ctest_color)9;
    CHECK_EQ(ctest_shapes_encode(&sh, &b), CHANOS_ERR_ENUM);
    CHECK_STR(f.field, "lines[1].to.c");
    CHECK_STR(text(&f), "wire: ctest.shapes: field lines[1].to.c: enum value 9 "
                        "out of range (3 enumerators) at offset 64");
    /* the interface-wide encoder says the same */
    memset(&any, 0, sizeof any);
    any.msg = CTEST_MSG_SHAPES;
    any.u.shapes = sh;
    memset(&f, 0, sizeof f);
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_ENUM);
    CHECK_STR(text(&f), "wire: ctest.shapes: field lines[1].to.c: enum value 9 "
                        "out of range (3 enumerators) at offset 64");
    any.kind = CHANOS_KIND_CALL;
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_HEADER);
    CHECK_STR(text(&f), "wire: ctest.shapes: kind 0x01, expected a message");
    any.msg = 99;
    CHECK_EQ(ctest_encode(&any, &b), CHANOS_ERR_UNKNOWN_MESSAGE);
    CHECK_STR(text(&f), "wire: ctest: message number 99 names no message of ctest");
    /* a buffer too small, which Go's encoder does not know */
    {
        uint8_t small[40];

        chanos_buf_init(&b, small, sizeof small, NULL, 0);
        b.fault = &f;
        fill_shapes(&sh);
        CHECK_EQ(ctest_shapes_encode(&sh, &b), CHANOS_ERR_NOSPACE);
        CHECK_STR(text(&f), "wire: ctest.shapes: frame of 68 bytes does not fit "
                            "the 40 bytes left in the buffer");
    }

    /* decode faults of crafted frames: the same lines, lines[1].from.c
     * (at 44 + 8) made 3, past the enumerators */
    b = newbuf();
    fill_shapes(&sh);
    CHECK_EQ(ctest_shapes_encode(&sh, &b), 0);
    fr = frame_dup(b.data, b.len);
    CHECK_EQ(ctest_shapes_decode_fault(&dsh, fr.p, fr.len, NULL, 0, &f), 0);
    CHECK(dsh.nlines == 2 && dsh.lines[1].to.x == 7);
    fr.p[52] = 3;
    memset(&f, 0, sizeof f);
    CHECK_EQ(ctest_shapes_decode_fault(&dsh, fr.p, fr.len, NULL, 0, &f), CHANOS_ERR_ENUM);
    CHECK_STR(text(&f), "wire: ctest.shapes: field lines[1].from.c: enum value 3 "
                        "out of range (3 enumerators) at offset 52");
    memset(&f, 0, sizeof f);
    CHECK_EQ(ctest_decode_fault(&any, fr.p, fr.len, NULL, 0, &f), CHANOS_ERR_ENUM);
    CHECK_STR(text(&f), "wire: ctest.shapes: field lines[1].from.c: enum value 3 "
                        "out of range (3 enumerators) at offset 52");
    /* the plain decoder fails the same, describing nothing */
    CHECK_EQ(ctest_shapes_decode(&dsh, fr.p, fr.len, NULL, 0), CHANOS_ERR_ENUM);
    /* the header: another message's frame, a count past the bytes left */
    fr.p[52] = 1;
    chanos_store_u16(fr.p + 4, CTEST_MSG_TEXTS);
    CHECK_EQ(ctest_shapes_decode_fault(&dsh, fr.p, fr.len, NULL, 0, &f),
             CHANOS_ERR_UNKNOWN_MESSAGE);
    CHECK_STR(text(&f), "wire: ctest.shapes: message number 3, expected 11 at "
                        "offset 4");
    chanos_store_u16(fr.p + 4, CTEST_MSG_SHAPES);
    fr.p[16] = 3;
    CHECK_EQ(ctest_shapes_decode_fault(&dsh, fr.p, fr.len, NULL, 0, &f),
             CHANOS_ERR_TRUNCATED);
    CHECK_STR(text(&f), "wire: ctest.shapes: field lines: array count 3 needs "
                        "72 bytes, 48 left at offset 16");
    frame_free(fr);

    /* a bool in an array, and a fixed array in a struct */
    fill_arrays(&a);
    b = newbuf();
    CHECK_EQ(ctest_arrays_encode(&a, &b), 0);
    fr = frame_dup(b.data, b.len);
    fr.p[33] = 2; /* bits[1]: after vals (16 + 4 + 8) and the count */
    CHECK_EQ(ctest_arrays_decode_fault(&da, fr.p, fr.len, NULL, 0, &f), CHANOS_ERR_BOOL);
    CHECK_STR(text(&f), "wire: ctest.arrays: field bits[1]: bool byte 2 is "
                        "neither 0 nor 1 at offset 33");
    frame_free(fr);
}

/* ---- stubs and dispatch ---- */

/* The server's state, its handlers' ctx. */
struct store {
    ctest_handle h;
    int scalars;
    uint64_t last_u64;
};

static int on_put(void *ctx, chanos_conn *c, const struct ctest_put_call *in,
                  struct ctest_put_reply *out)
{
    struct store *s = ctx;

    (void)out;
    if (in->h == 1) {
        /* a detail left by a handler that then succeeds is dropped */
        CHECK_EQ(chanos_conn_set_detail(c, "never sent"), 0);
        return 0;
    }
    if (in->h == 0) {
        CHECK_EQ(chanos_conn_set_detail(c, "no h: %d of %s", 0, "put"), 0);
        return 7; /* an application's own error code */
    }
    if (in->h == 2)
        return CHANOS_CODE_NOT_FOUND; /* with no detail */
    s->h = in->h;
    return 0;
}

static int on_get(void *ctx, chanos_conn *c, const struct ctest_get_call *in,
                  struct ctest_get_reply *out)
{
    const struct store *s = ctx;

    (void)c;
    (void)in;
    out->h = s->h;
    return 0;
}

static int on_scalars(void *ctx, chanos_conn *c, const struct ctest_scalars *m)
{
    struct store *s = ctx;

    (void)c;
    s->scalars++;
    s->last_u64 = m->u64;
    return 0;
}

static const struct ctest_server_ops store_ops = {
    .put = on_put,
    .get = on_get,
    .scalars = on_scalars,
    /* lookup and sync unimplemented; the other messages dropped */
};

struct server_thread {
    chanos_conn *c;
    struct store s;
    int rc;
};

static void *serve_thread(void *arg)
{
    struct server_thread *t = arg;

    t->rc = ctest_serve(t->c, &store_ops, &t->s, 5000);
    return NULL;
}

/* conn_pair connects *srv and *cli over a fresh ring pair sized for
 * ctest's frames. */
static void conn_pair(chanos_conn **srv, chanos_conn **cli)
{
    conn_pair_of(CTEST_MAX_FRAME_SIZE, srv, cli);
}

static bool str_is(struct chanos_str v, const char *want)
{
    return v.len == strlen(want) && memcmp(v.ptr, want, v.len) == 0;
}

static void test_stubs(void)
{
    struct server_thread t = { 0 };
    struct ctest_put_call put = { 42 };
    struct ctest_put_reply pr;
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr = { 0 };
    struct ctest_sync_call sc = { 0 };
    struct ctest_sync_reply sr;
    struct ctest_scalars m;
    struct chanos_status st;
    chanos_conn *cli;
    pthread_t th;

    /* the constants binding takes */
    CHECK(strcmp(CTEST_INTERFACE_NAME, "ctest") == 0);
    CHECK(CTEST_FINGERPRINT != 0);
    CHECK(strcmp(ctest_interface.name, "ctest") == 0);
    CHECK_EQ(ctest_interface.max_frame, CTEST_MAX_FRAME_SIZE);
    CHECK(ctest_interface.fingerprint == CTEST_FINGERPRINT);

    conn_pair(&t.c, &cli);
    CHECK_EQ(pthread_create(&th, NULL, serve_thread, &t), 0);

    /* rpcs: a reply, the handler's own error code, unimplemented */
    CHECK_EQ(ctest_put(cli, &put, &pr, 2000), 0);
    CHECK_EQ(ctest_get(cli, &gc, &gr, 2000), 0);
    CHECK_EQ(gr.h, 42);
    CHECK_EQ(chanos_conn_status(cli, &st), CHANOS_ERR_NOT_FOUND);
    put.h = 0;
    CHECK_EQ(ctest_put(cli, &put, &pr, 2000), CHANOS_ERR_REMOTE);
    /* the error reply's status outlives its slot in the ring */
    CHECK_EQ(chanos_conn_status(cli, &st), 0);
    CHECK(st.code == 7);
    CHECK(str_is(st.detail, "no h: 0 of put"));
    CHECK_EQ(ctest_sync(cli, &sc, &sr, 2000), CHANOS_ERR_REMOTE);
    CHECK_EQ(chanos_conn_status(cli, &st), 0);
    CHECK(st.code == CHANOS_CODE_UNIMPLEMENTED);
    CHECK(str_is(st.detail, "the server has no handler for ctest.sync"));
    put.h = 1;
    CHECK_EQ(ctest_put(cli, &put, &pr, 2000), 0);
    CHECK_EQ(chanos_conn_status(cli, &st), CHANOS_ERR_NOT_FOUND);
    put.h = 2;
    CHECK_EQ(ctest_put(cli, &put, &pr, 2000), CHANOS_ERR_REMOTE);
    CHECK_EQ(chanos_conn_status(cli, &st), 0);
    CHECK(st.code == CHANOS_CODE_NOT_FOUND);
    CHECK_EQ(st.detail.len, 0);
    CHECK(chanos_conn_fault(cli) == NULL);
    /* an argument over its bound: nothing is sent, and the connection
     * says which frame and field, until its next call */
    {
        char key[40];
        struct ctest_lookup_call lc = { 0 };
        struct ctest_lookup_reply lr;

        memset(key, 'k', sizeof key);
        lc.key = (struct chanos_str){ key, sizeof key };
        CHECK_EQ(ctest_lookup(cli, &lc, &lr, 2000), CHANOS_ERR_BOUND);
        CHECK(chanos_conn_fault(cli) != NULL);
        CHECK_STR(text(chanos_conn_fault(cli)),
                  "wire: ctest.lookup call: field key: string length 40 "
                  "exceeds bound 32 at offset 16");
        put.h = 42;
        CHECK_EQ(ctest_put(cli, &put, &pr, 2000), 0);
        CHECK(chanos_conn_fault(cli) == NULL);
    }
    /* a call that does not decode is answered with why, in Go's words */
    {
        uint8_t mem[CTEST_LOOKUP_CALL_MAX_FRAME_SIZE];
        struct ctest_lookup_call lc = { 0 };
        struct chanos_frame reply;
        struct chanos_buf cb;

        chanos_buf_init(&cb, mem, sizeof mem, NULL, 0);
        lc.key = CHANOS_STR("k");
        CHECK_EQ(ctest_lookup_call_encode(&lc, &cb), 0);
        mem[16 + 5 + 8] = 5; /* p.c, after key and p.x, p.y */
        CHECK_EQ(chanos_conn_call(cli, mem, cb.len, 2000, &reply, NULL, NULL),
                 CHANOS_ERR_REMOTE);
        CHECK_EQ(chanos_conn_status(cli, &st), 0);
        CHECK(st.code == CHANOS_SERVE_INVALID);
        CHECK(str_is(st.detail, "the call does not decode: wire: ctest.lookup "
                                "call: field p.c: enum value 5 out of range (3 "
                                "enumerators) at offset 29"));
    }
    /* messages, handled in order before the next call */
    memset(&m, 0, sizeof m);
    m.u64 = 1234567890123ull;
    CHECK_EQ(ctest_scalars_send(cli, &m, 2000), 0);
    CHECK_EQ(ctest_empty_send(cli, &(struct ctest_empty){ 0 }, 2000), 0);
    CHECK_EQ(ctest_get(cli, &gc, &gr, 2000), 0);
    CHECK_EQ(gr.h, 42);

    /* the client closes: the serve loop ends with 0 */
    chanos_conn_close(cli);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(t.rc, 0);
    CHECK_EQ(t.s.scalars, 1);
    CHECK(t.s.last_u64 == 1234567890123ull);
    chanos_conn_close(t.c);
}

/* A reply that brings descriptors its type has none of (put's) fails to
 * decode in the stub, which closes them rather than leave them open. The
 * reply is in the ring before the call: a fresh connection's first call
 * has id 1. */
static void test_stub_closes_stray_fds(void)
{
    struct ctest_put_call put = { 42 };
    struct ctest_put_reply pr;
    struct chanos_hdr h = { CHANOS_HEADER_SIZE, CTEST_MSG_PUT, CHANOS_KIND_REPLY, 2, 1, 0 };
    uint8_t frame[CHANOS_HEADER_SIZE];
    chanos_conn *srv, *cli;
    int before = count_fds(), fds[2];

    conn_pair(&srv, &cli);
    chanos_hdr_put(frame, &h);
    fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(fds[0] >= 0 && fds[1] >= 0);
    CHECK_EQ(chanos_ump_send_fds(chanos_conn_ump(srv), frame, sizeof frame, fds, 2, 1000), 0);
    close(fds[0]);
    close(fds[1]);
    CHECK(ctest_put(cli, &put, &pr, 2000) < 0);
    chanos_conn_close(cli);
    chanos_conn_close(srv);
    CHECK_EQ(count_fds(), before);
}

/*
 * A peer's frame that does not decode: a reply in a stub, and a message
 * that ends serving. The connection's fault says which field, in Go's
 * words. The frames are in the ring before the call and the serve.
 */
static void test_stub_decode_faults(void)
{
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr;
    struct chanos_hdr h = { CHANOS_HEADER_SIZE, CTEST_MSG_GET, CHANOS_KIND_REPLY, 0, 1, 0 };
    uint8_t frame[CHANOS_HEADER_SIZE];
    struct ctest_scalars m;
    struct chanos_buf b = newbuf();
    struct store st = { 0 };
    chanos_conn *srv, *cli;

    conn_pair(&srv, &cli);
    /* get's reply, call id 1, without the handle it must carry */
    chanos_hdr_put(frame, &h);
    CHECK_EQ(chanos_conn_send(srv, frame, sizeof frame, 1000), 0);
    CHECK_EQ(ctest_get(cli, &gc, &gr, 2000), CHANOS_ERR_TRUNCATED);
    CHECK(chanos_conn_fault(cli) != NULL);
    CHECK_STR(text(chanos_conn_fault(cli)),
              "wire: ctest.get reply: field h: frame ends 0 bytes into the "
              "field at offset 16");
    /* a message whose bool is 2: serving ends with why */
    fill_scalars(&m);
    CHECK_EQ(ctest_scalars_encode(&m, &b), 0);
    b.data[16 + 55] = 2; /* flag, after u8 ... ch */
    CHECK_EQ(chanos_conn_send(cli, b.data, b.len, 1000), 0);
    CHECK_EQ(ctest_serve(srv, &store_ops, &st, 1000), CHANOS_ERR_BOOL);
    CHECK(chanos_conn_fault(srv) != NULL);
    CHECK_STR(text(chanos_conn_fault(srv)),
              "wire: ctest.scalars: field flag: bool byte 2 is neither 0 nor 1 "
              "at offset 71");
    CHECK_EQ(st.scalars, 0);
    chanos_conn_close(cli);
    chanos_conn_close(srv);
}

/* reply_get sends srv's reply to call id of get, carrying h. */
static void reply_get(chanos_conn *srv, uint32_t id, ctest_handle h)
{
    struct ctest_get_reply r = { h };
    struct chanos_frame call = { .hdr = { .msg = CTEST_MSG_GET, .call_id = id } };
    uint8_t mem[CTEST_GET_REPLY_MAX_FRAME_SIZE];
    struct chanos_buf b;

    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    CHECK_EQ(ctest_get_reply_encode(&r, &b), 0);
    CHECK_EQ(chanos_conn_reply_buf(srv, &call, &b, 1000), 0);
}

/* expect_scalars receives the next frame of cli, which must be scalars
 * carrying u64: false if none came. */
static bool expect_scalars(chanos_conn *cli, uint64_t u64)
{
    struct chanos_frame f;
    struct ctest_msg m;
    int rc = chanos_conn_recv(cli, 5000, &f);

    CHECK_EQ(rc, 0);
    if (rc != 0)
        return false;
    CHECK_EQ(ctest_decode(&m, f.data, f.len, f.fds, f.nfds), 0);
    CHECK_EQ(m.msg, CTEST_MSG_SCALARS);
    CHECK(m.u.scalars.u64 == u64);
    return true;
}

/*
 * One order per connection: the messages a server sends while a client's
 * stub waits for its reply are kept for the client's receives, which get
 * them after the call, in the order they came, with their descriptors; a
 * kept message never received has its descriptors closed with the
 * connection. The frames are in the ring before the call: a fresh
 * connection's first call has id 1.
 */
static void test_stub_keeps_messages(void)
{
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr;
    struct ctest_scalars m;
    struct ctest_caps cm;
    struct ctest_msg got;
    struct chanos_frame f;
    chanos_conn *srv, *cli;
    int before = count_fds(), fds[4];

    conn_pair(&srv, &cli);
    for (int i = 0; i < 4; i++)
        CHECK((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
    fill_scalars(&m);
    m.u64 = 1;
    CHECK_EQ(ctest_scalars_send(srv, &m, 1000), 0);
    fill_caps(&cm);
    cm.a = fds[0];
    cm.more[0] = fds[1]; /* give_away_caps: the send closes them */
    cm.more[1] = fds[2];
    cm.r.fd = fds[3];
    CHECK_EQ(ctest_caps_send(srv, &cm, 1000), 0);
    close(fds[0]);
    close(fds[3]);
    m.u64 = 2;
    CHECK_EQ(ctest_scalars_send(srv, &m, 1000), 0);
    reply_get(srv, 1, 7);

    CHECK_EQ(ctest_get(cli, &gc, &gr, 1000), 0);
    CHECK_EQ(gr.h, 7);
    if (expect_scalars(cli, 1) && chanos_conn_recv(cli, 0, &f) == 0) {
        CHECK_EQ(ctest_decode(&got, f.data, f.len, f.fds, f.nfds), 0);
        CHECK_EQ(got.msg, CTEST_MSG_CAPS);
        CHECK_EQ(f.nfds, 4);
        CHECK(got.u.caps.nmore == 2 && got.u.caps.r.p.x == -7);
        for (uint32_t i = 0; i < f.nfds; i++)
            CHECK(fd_open(f.fds[i]));
        chanos_frame_close_fds(&f);
        expect_scalars(cli, 2);
    } else {
        CHECK(!"the messages sent before the reply are received after it");
    }
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);

    /* kept, and never received: the close closes its descriptors */
    for (int i = 0; i < 4; i++)
        CHECK((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
    cm.a = fds[0];
    cm.more[0] = fds[1];
    cm.more[1] = fds[2];
    cm.r.fd = fds[3];
    CHECK_EQ(ctest_caps_send(srv, &cm, 1000), 0);
    close(fds[0]);
    close(fds[3]);
    reply_get(srv, 2, 8);
    CHECK_EQ(ctest_get(cli, &gc, &gr, 1000), 0);
    CHECK_EQ(gr.h, 8);
    chanos_conn_close(cli);
    chanos_conn_close(srv);
    CHECK_EQ(count_fds(), before);
}

/* The server of test_inbox_full: it takes a get call, sends n scalars
 * before the reply, then takes the cancel of the call the client gave up
 * and answers its next get with handle 8. rc is the first failure. */
struct flood {
    chanos_conn *c;
    int n;
    int rc;
};

static void *flood_thread(void *arg)
{
    struct flood *t = arg;
    struct ctest_scalars m;
    struct ctest_get_reply r = { 7 };
    uint8_t mem[CTEST_GET_REPLY_MAX_FRAME_SIZE];
    struct chanos_frame f;
    struct chanos_buf b;
    int rc;

    if ((rc = chanos_conn_recv(t->c, 5000, &f)) != 0 ||
        (rc = f.kind == CHANOS_KIND_CALL ? 0 : -EPROTO) != 0)
        goto out;
    fill_scalars(&m);
    for (int i = 0; i < t->n && rc == 0; i++) {
        m.u64 = (uint64_t)i;
        rc = ctest_scalars_send(t->c, &m, 5000);
    }
    chanos_buf_init(&b, mem, sizeof mem, NULL, 0);
    if (rc != 0 || (rc = ctest_get_reply_encode(&r, &b)) != 0 ||
        (rc = chanos_conn_reply_buf(t->c, &f, &b, 5000)) != 0)
        goto out;
    if ((rc = chanos_conn_recv(t->c, 5000, &f)) != 0 ||
        (rc = f.kind == CHANOS_KIND_CANCEL ? 0 : -EPROTO) != 0 ||
        (rc = chanos_conn_recv(t->c, 5000, &f)) != 0 ||
        (rc = f.kind == CHANOS_KIND_CALL ? 0 : -EPROTO) != 0)
        goto out;
    r.h = 8;
    chanos_buf_reset(&b);
    if ((rc = ctest_get_reply_encode(&r, &b)) == 0)
        rc = chanos_conn_reply_buf(t->c, &f, &b, 5000);
out:
    t->rc = rc;
    return NULL;
}

/*
 * A client's inbox holds CHANOS_CONN_INBOX_MAX messages: a call whose
 * reply comes behind more fails once it is full, saying so, and the
 * connection goes on once the client has received them: the messages in
 * order, those the call kept and those it left in the ring, then a new
 * call (the reply of the one given up is dropped on the way).
 */
static void test_inbox_full(void)
{
    struct flood t = { NULL, CHANOS_CONN_INBOX_MAX + 10, 0 };
    struct ctest_get_call gc = { 0 };
    struct ctest_get_reply gr;
    struct chanos_frame f;
    chanos_conn *cli;
    char want[CHANOS_WIRE_FAULT_TEXT_MAX];
    pthread_t th;

    conn_pair(&t.c, &cli);
    CHECK_EQ(pthread_create(&th, NULL, flood_thread, &t), 0);
    CHECK_EQ(ctest_get(cli, &gc, &gr, 5000), CHANOS_ERR_INBOX_FULL);
    snprintf(want, sizeof want,
             "connection inbox full (the reply waits behind %d unread "
             "messages from the peer, %d bytes, that fill this connection's "
             "inbox: receive them, with chanos_conn_recv or a serve loop)",
             CHANOS_CONN_INBOX_MAX,
             CHANOS_CONN_INBOX_MAX * CTEST_SCALARS_MAX_FRAME_SIZE);
    CHECK(chanos_conn_fault(cli) != NULL);
    CHECK_STR(text(chanos_conn_fault(cli)), want);
    for (int i = 0; i < t.n && expect_scalars(cli, (uint64_t)i); i++)
        ;
    CHECK_EQ(ctest_get(cli, &gc, &gr, 5000), 0);
    CHECK_EQ(gr.h, 8);
    CHECK(chanos_conn_fault(cli) == NULL);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(t.rc, 0);
    CHECK_EQ(chanos_conn_recv(cli, 0, &f), CHANOS_ERR_AGAIN);
    chanos_conn_close(cli);
    chanos_conn_close(t.c);
}

/* What the handler of test_handler_gives_up saw of its call: the time
 * left when it began, and whether it saw the caller cancel. */
struct patient {
    chanos_conn *c;
    int64_t left;
    int cancelled;
    int rc;
};

static int on_sync_patient(void *ctx, chanos_conn *c,
                           const struct ctest_sync_call *in,
                           struct ctest_sync_reply *out)
{
    struct patient *p = ctx;
    struct timespec ms = { 0, 1000000 };

    (void)in, (void)out;
    p->left = chanos_conn_call_left_ns(c);
    for (int i = 0; i < 5000 && (p->cancelled = chanos_conn_call_cancelled(c)) == 0; i++)
        nanosleep(&ms, NULL);
    return CHANOS_SERVE_DEFER; /* nobody waits for the answer */
}

static const struct ctest_server_ops patient_ops = { .sync = on_sync_patient };

static void *patient_thread(void *arg)
{
    struct patient *p = arg;

    p->rc = ctest_serve(p->c, &patient_ops, p, 5000);
    return NULL;
}

/*
 * A handler behind a generated dispatch knows its caller's deadline and
 * sees its caller give up: a stub's call that times out cancels it, and
 * the handler, which works until it is cancelled, gives up and answers
 * nothing.
 */
static void test_handler_gives_up(void)
{
    struct patient p = { NULL, 0, 0, -1 };
    struct ctest_sync_call sc = { 0 };
    struct ctest_sync_reply sr;
    chanos_conn *cli;
    pthread_t th;

    conn_pair(&p.c, &cli);
    CHECK_EQ(pthread_create(&th, NULL, patient_thread, &p), 0);
    CHECK_EQ(ctest_sync(cli, &sc, &sr, 50), CHANOS_ERR_TIMEDOUT);
    chanos_conn_close(cli);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(p.rc, 0);
    CHECK(p.left >= 0 && p.left <= 50000000);
    CHECK_EQ(p.cancelled, 1);
    chanos_conn_close(p.c);
}

/* test_mutations decodes many corrupted copies of valid frames of every
 * kind: bytes flipped or set to the values that matter to a decoder (0,
 * 0xff, lengths past a bound), frames cut short or run long, the header's
 * size left as it was or patched to match, and fewer or more descriptors
 * than the frame announces. Each decode returns 0 or one of the documented
 * errors; a frame it accepts encodes back (ctest_encode) and decodes the
 * same way. Under AddressSanitizer, every frame is a heap buffer of
 * exactly its length, so that a read past the end is caught. The
 * corruptions are the same on every run (check_rnd). */
static void test_mutations(void)
{
    static const int fds[] = { 30, 31, 32, 33, 34, 35 };
    struct ctest_scalars s;
    struct ctest_texts t;
    struct ctest_arrays a;
    struct ctest_caps c;
    struct ctest_lookup_call lc;
    struct ctest_lookup_reply lr;
    struct chanos_buf b = newbuf();
    size_t ends[7], start = 0;
    int kinds = 0, accepted = 0, refused = 0;

    fill_scalars(&s);
    memset(&t, 0, sizeof t);
    t.name = CHANOS_STR("mutate");
    t.data.ptr = (const uint8_t *)"\x01\x02\x03";
    t.data.len = 3;
    t.chars.ptr = (const uint8_t *)"ab";
    t.chars.len = 2;
    fill_arrays(&a);
    fill_caps(&c);
    memset(&lc, 0, sizeof lc);
    lc.key = CHANOS_STR("key");
    lc.p.c = CTEST_COLOR_GREEN;
    memset(&lr, 0, sizeof lr);
    lr.found = true;
    lr.fd = 5;
    CHECK_EQ(ctest_scalars_encode(&s, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_texts_encode(&t, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_arrays_encode(&a, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_caps_encode(&c, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_lookup_call_encode(&lc, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_lookup_reply_encode(&lr, &b), 0);
    ends[kinds++] = b.len;
    CHECK_EQ(ctest_sync_call_encode(&(struct ctest_sync_call){ 0 }, &b), 0);
    ends[kinds++] = b.len;

    for (int k = 0; k < kinds; k++) {
        size_t flen = ends[k] - start;
        const uint8_t *orig = b.data + start;

        for (int iter = 0; iter < 20000; iter++) {
            uint64_t r = check_rnd();
            size_t len = flen;
            struct frame f;
            struct ctest_msg m;
            uint32_t nfds = (uint32_t)(check_rnd() % 7);
            int err;

            switch (r % 8) {
            case 0: /* cut short */
                len = (size_t)(check_rnd() % flen);
                break;
            case 1: /* run long */
                len = flen + 1 + (size_t)(check_rnd() % 16);
                break;
            default:
                break;
            }
            f = frame_alloc(len);
            memcpy(f.p, orig, len < flen ? len : flen);
            for (int n = 1 + (int)(check_rnd() % 4); n > 0 && len > 0; n--) {
                size_t at = (size_t)(check_rnd() % len);
                static const uint8_t vals[] = { 0, 1, 2, 3, 0x7f, 0x80, 0xfe, 0xff };

                f.p[at] = (check_rnd() & 1) ? (uint8_t)check_rnd() : vals[check_rnd() % sizeof vals];
            }
            if ((r >> 8) & 1 && len >= 4) /* the header's size made to match */
                chanos_store_u32(f.p, (uint32_t)len);
            err = ctest_decode(&m, f.p, f.len, fds, nfds);
            if (err == 0) {
                uint8_t out[512];
                int outfds[8];
                struct chanos_buf o;
                struct ctest_msg again;
                int eerr;

                accepted++;
                chanos_buf_init(&o, out, sizeof out, outfds, 8);
                eerr = ctest_encode(&m, &o);
                CHECK_EQ(eerr, 0);
                if (eerr == 0) {
                    struct frame g = frame_dup(out, o.len);

                    CHECK_EQ(ctest_decode(&again, g.p, g.len, outfds, o.nfds), 0);
                    CHECK(again.msg == m.msg && again.kind == m.kind);
                    frame_free(g);
                }
            } else {
                refused++;
                CHECK(err < 0 && chanos_strerror(err) != NULL);
            }
            frame_free(f);
        }
        start = ends[k];
    }
    /* Both outcomes came up: the mutations are neither all fatal nor all
     * harmless. */
    CHECK(accepted > 0 && refused > 0);
}

int main(void)
{
    test_scalars();
    test_empty();
    test_texts();
    test_arrays();
    test_caps();
    test_dispatch_extra_fds();
    test_keywords();
    test_rpc();
    test_any();
    test_mutations();
    test_faults();
    test_stubs();
    test_stub_closes_stray_fds();
    test_stub_decode_faults();
    test_stub_keeps_messages();
    test_inbox_full();
    test_handler_gives_up();
    return check_done("codegen_test");
}
