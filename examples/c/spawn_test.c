/*
 * spawn_test: a C domain that uses the spawn service of its monitor
 * (docs/spawn.md) through the C code chanosc generates for
 * interfaces/spawn.if: it connects to spawnd.<machine id>, spawns
 * /bin/echo with an argument, waits for its end, reads its output, then
 * spawns a sleep and kills it with SIGTERM. The Go tests in tests/spawn
 * run it against a real monitor.
 *
 *   spawn_test WORD   prints "spawned ID", "exit 0", "output WORD",
 *                     "killed by 15", then "ok"
 *
 * The monitor directory comes from $CHANOS_DIR. Exit status 0 on success;
 * on failure 1, with the reason on stderr.
 */
#include <chanos.h>
#include <spawn.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define CALL_MS 10000

static int fail(const char *what, int rc)
{
    fprintf(stderr, "spawn_test: %s: %s (%d)\n", what, chanos_strerror(rc), rc);
    return 1;
}

/* start spawns program with args ('\0'-separated, args_len bytes) and
 * returns its id in *id. */
static int start(chanos_conn *c, const char *program, const char *args,
                 size_t args_len, uint64_t *id)
{
    struct spawn_spawn_call in = {
        .program = chanos_cstr(program),
        .args = { (const uint8_t *)args, (uint32_t)args_len },
    };
    struct spawn_spawn_reply out;
    int rc = spawn_spawn(c, &in, &out, CALL_MS);

    if (rc != 0)
        return fail("spawn", rc);
    if (out.err != 0) {
        fprintf(stderr, "spawn_test: spawn %s: code %" PRIu64 ": %.*s\n",
                program, out.err, (int)out.detail.len,
                (const char *)out.detail.ptr);
        return 1;
    }
    *id = out.id;
    return 0;
}

static int wait_end(chanos_conn *c, uint64_t id, struct spawn_wait_reply *out)
{
    struct spawn_wait_call in = { .id = id };
    int rc = spawn_wait(c, &in, out, CALL_MS);

    if (rc != 0)
        return fail("wait", rc);
    if (out->err != 0) {
        fprintf(stderr, "spawn_test: wait: code %" PRIu64 "\n", out->err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts jo = { .program = "spawn_test (C)" };
    chanos_domain *d;
    chanos_conn *c;
    char name[64];
    char out_text[256];
    size_t out_len = 0;
    uint64_t id;
    struct spawn_wait_reply w;
    int rc, status = 1;

    if (argc != 2 || strlen(argv[1]) > 100) {
        fprintf(stderr, "usage: spawn_test WORD\n");
        return 2;
    }
    rc = chanos_join(&d, &jo);
    if (rc != 0)
        return fail("join", rc);
    snprintf(name, sizeof name, "spawnd.%" PRIu64, chanos_domain_machine(d));
    rc = chanos_connect_iface(d, name, &spawn_interface, CALL_MS, &c);
    if (rc != 0) {
        chanos_domain_close(d);
        return fail(name, rc);
    }

    if (start(c, "/bin/echo", argv[1], strlen(argv[1]), &id) != 0)
        goto out;
    printf("spawned %" PRIu64 "\n", id);
    if (wait_end(c, id, &w) != 0)
        goto out;
    printf("exit %d\n", w.exit_code);

    /* Its output, to the end: the reply's view lives until the next call,
     * so each chunk is copied out. */
    for (uint64_t from = 0;;) {
        struct spawn_logs_call in = { .id = id, .from = from, .follow = true };
        struct spawn_logs_reply r;

        if ((rc = spawn_logs(c, &in, &r, CALL_MS)) != 0) {
            fail("logs", rc);
            goto out;
        }
        if (r.err != 0 || r.data.len > sizeof out_text - 1 - out_len) {
            fprintf(stderr, "spawn_test: logs: code %" PRIu64 ", %u bytes\n",
                    r.err, r.data.len);
            goto out;
        }
        memcpy(out_text + out_len, r.data.ptr, r.data.len);
        out_len += r.data.len;
        from = r.start + r.data.len;
        if (r.done)
            break;
    }
    out_text[out_len] = '\0';
    printf("output %s", out_text);

    static const char sleep_args[] = "100";
    if (start(c, "sleep", sleep_args, sizeof sleep_args - 1, &id) != 0)
        goto out;
    struct spawn_kill_call k = { .id = id, .signal = SIGTERM };
    struct spawn_kill_reply kr;
    if ((rc = spawn_kill(c, &k, &kr, CALL_MS)) != 0 || kr.err != 0) {
        fprintf(stderr, "spawn_test: kill: %s, code %" PRIu64 "\n",
                chanos_strerror(rc), rc == 0 ? kr.err : 0);
        goto out;
    }
    if (wait_end(c, id, &w) != 0)
        goto out;
    printf("killed by %d\n", w.signal);
    printf("ok\n");
    status = 0;
out:
    chanos_conn_close(c);
    chanos_domain_close(d);
    return status;
}
