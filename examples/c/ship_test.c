/*
 * ship_test: a C domain that ships a program to a spawn service and runs
 * it there (docs/spawn.md, "Shipping a program"), through the C code
 * chanosc generates for interfaces/spawn.if: it hashes FILE (SHA-256, with
 * OpenSSL's libcrypto), asks the target's cache whether it holds it
 * (cached), uploads it if not (put_begin, put_data chunks streamed without
 * a round trip each, put_end), spawns it by its hash (spawn_shipped) with
 * ARG, waits for its end and prints its output. The target is the spawn
 * service of this machine, or of MACHINE (its id in hex, as `chanos
 * machines` shows it) of the cluster: the domain joins with libchanos_net's binder, so the bind and
 * the upload go over an encrypted net connection. The Go tests in
 * tests/spawn and tests/cluster run it against real monitors.
 *
 *   ship_test [-on MACHINE] FILE [ARG]
 *
 * prints "sha256 HASH", then "uploaded N" (bytes sent) or "cached" (the
 * target had it), "exit CODE" and "output TEXT". The monitor directory
 * comes from $CHANOS_DIR. Exit status 0 on success; on failure 1, with the
 * reason on stderr.
 */
#include <chanos.h>
#include <chanos_net.h>
#include <spawn.h>

#include <openssl/evp.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_MS 30000
#define CHUNK   SPAWN_PUT_DATA_DATA_MAX

static uint8_t chunk[CHUNK];

static int fail(const char *what, int rc)
{
    fprintf(stderr, "ship_test: %s: %s (%d)\n", what, chanos_net_strerror(rc),
            rc);
    return 1;
}

/* failed reports a service's error answer (errval and detail). */
static int failed(const char *what, uint64_t err, const struct chanos_bytes *detail)
{
    fprintf(stderr, "ship_test: %s: code %" PRIu64 ": %.*s\n", what, err,
            detail ? (int)detail->len : 0,
            detail ? (const char *)detail->ptr : "");
    return 1;
}

/* hash_file writes the SHA-256 of f, from its start, as 64 lowercase hex
 * digits into hex, and its size into *size. */
static int hash_file(FILE *f, char hex[65], uint64_t *size)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t n;
    int ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

    *size = 0;
    while (ok && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        ok = EVP_DigestUpdate(ctx, chunk, n) == 1;
        *size += n;
    }
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 32;
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; ok && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return ok ? 0 : -EIO;
}

/* upload sends f's size bytes into the target's cache under hash: 0,
 * with *sent the bytes sent (0 when the cache had it already). */
static int upload(chanos_conn *c, FILE *f, const char *hash, uint64_t size,
                  uint64_t *sent)
{
    struct spawn_cached_call cc = { .hash = chanos_cstr(hash) };
    struct spawn_cached_reply cr;
    struct spawn_put_begin_call bc = { .hash = chanos_cstr(hash), .size = size };
    struct spawn_put_begin_reply br;
    int rc;

    *sent = 0;
    if ((rc = spawn_cached(c, &cc, &cr, CALL_MS)) != 0)
        return fail("cached", rc);
    if (cr.err != 0)
        return failed("cached", cr.err, NULL);
    if (cr.present)
        return 0;
    if ((rc = spawn_put_begin(c, &bc, &br, CALL_MS)) != 0)
        return fail("put_begin", rc);
    if (br.err != 0)
        return failed("put_begin", br.err, &br.detail);
    if (br.present) /* another caller shipped it meanwhile */
        return 0;
    rewind(f);
    for (uint64_t off = 0; off < size;) {
        size_t n = fread(chunk, 1, sizeof chunk, f);
        struct spawn_put_data m = { .upload = br.upload, .offset = off,
                                    .data = { chunk, (uint32_t)n } };

        if (n == 0)
            return failed("read the file: it shrank", 0, NULL);
        /* one-way: streamed as fast as the connection takes them */
        if ((rc = spawn_put_data_send(c, &m, CALL_MS)) != 0)
            return fail("put_data", rc);
        off += n;
        *sent = off;
    }
    struct spawn_put_end_call ec = { .upload = br.upload };
    struct spawn_put_end_reply er;
    if ((rc = spawn_put_end(c, &ec, &er, CALL_MS)) != 0)
        return fail("put_end", rc);
    if (er.err != 0)
        return failed("put_end", er.err, &er.detail);
    return 0;
}

/* run spawns the cached file hash as program with arg, waits for its end
 * and prints its exit code and output. */
static int run(chanos_conn *c, const char *hash, const char *program,
               const char *arg)
{
    struct spawn_spawn_shipped_call sc = {
        .hash = chanos_cstr(hash),
        .program = chanos_cstr(program),
        .args = { (const uint8_t *)arg, arg ? (uint32_t)strlen(arg) : 0 },
    };
    struct spawn_spawn_shipped_reply sr;
    struct spawn_wait_reply w;
    char text[4096];
    size_t len = 0;
    int rc;

    if ((rc = spawn_spawn_shipped(c, &sc, &sr, CALL_MS)) != 0)
        return fail("spawn_shipped", rc);
    if (sr.err != 0)
        return failed("spawn_shipped", sr.err, &sr.detail);
    struct spawn_wait_call wc = { .id = sr.id };
    if ((rc = spawn_wait(c, &wc, &w, CALL_MS)) != 0)
        return fail("wait", rc);
    if (w.err != 0)
        return failed("wait", w.err, NULL);
    printf("exit %d\n", w.exit_code);
    /* the reply's view lives until the next call: copy each chunk out */
    for (uint64_t from = 0;;) {
        struct spawn_logs_call lc = { .id = sr.id, .from = from, .follow = true };
        struct spawn_logs_reply lr;

        if ((rc = spawn_logs(c, &lc, &lr, CALL_MS)) != 0)
            return fail("logs", rc);
        if (lr.err != 0 || lr.data.len > sizeof text - 1 - len)
            return failed("logs", lr.err, NULL);
        memcpy(text + len, lr.data.ptr, lr.data.len);
        len += lr.data.len;
        from = lr.start + lr.data.len;
        if (lr.done)
            break;
    }
    text[len] = '\0';
    printf("output %s", text);
    return 0;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts jo = { .program = "ship_test (C)",
                                   .net = chanos_net_binder() };
    uint64_t machine = 0, size, sent;
    chanos_domain *d;
    chanos_conn *c;
    char name[64], hash[65];
    int a = 1, rc, status = 1;

    if (argc > 2 && strcmp(argv[1], "-on") == 0) {
        machine = strtoull(argv[2], NULL, 16);
        a = 3;
    }
    if (argc - a < 1 || argc - a > 2) {
        fprintf(stderr, "usage: ship_test [-on MACHINE] FILE [ARG]\n");
        return 2;
    }
    FILE *f = fopen(argv[a], "rb");
    if (f == NULL) {
        fprintf(stderr, "ship_test: %s: %s\n", argv[a], strerror(errno));
        return 1;
    }
    if (hash_file(f, hash, &size) != 0) {
        fclose(f);
        return fail("hash", -EIO);
    }
    printf("sha256 %s\n", hash);
    rc = chanos_join(&d, &jo);
    if (rc != 0) {
        fclose(f);
        return fail("join", rc);
    }
    snprintf(name, sizeof name, "spawnd.%" PRIu64,
             machine != 0 ? machine : chanos_domain_machine(d));
    rc = chanos_connect_iface(d, name, &spawn_interface, CALL_MS, &c);
    if (rc != 0) {
        fclose(f);
        chanos_domain_close(d);
        return fail(name, rc);
    }
    if (upload(c, f, hash, size, &sent) == 0) {
        if (sent != 0)
            printf("uploaded %" PRIu64 "\n", sent);
        else
            printf("cached\n");
        status = run(c, hash, argv[a], a + 1 < argc ? argv[a + 1] : NULL);
    }
    fflush(stdout);
    fclose(f);
    chanos_conn_close(c);
    chanos_domain_close(d);
    return status;
}
