/*
 * health_server: a C domain that serves a pingpong service NAME, its
 * health, NAME.health, with libchanos's health statuses (chanos_health_*,
 * docs/health.md), and its reflection, NAME.reflection
 * (docs/reflection.md), all on the main thread in one chanos_server, and
 * sets statuses on another thread as commands on its standard input say,
 * one per line:
 *
 *   set SERVICE STATUS   sets SERVICE ("-" for "", the domain as a whole)
 *                        to STATUS: serving, not_serving or unknown
 *   shutdown             every service not serving, sets ignored
 *   resume               every service serving again
 *
 * It answers each command with a line, "ok" or "error: WHY", once the
 * status is set. Its pingpong service answers echo (the other messages
 * and rpcs are not handled). It prints "serving NAME NAME.health
 * NAME.reflection" once exported, and stops on SIGINT or SIGTERM. The Go
 * tests in tests/interop ask it with `chanos health`, `chanos describe`,
 * `chanos call` and Go clients:
 *
 *   health_server NAME
 *
 * The monitor directory comes from $CHANOS_DIR as usual.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* sigaction, sigprocmask */
#endif

#include <chanos.h>

#include "pingpong.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stopping;
static chanos_health *statuses;
/* set once the command thread is done with statuses (its input ended) */
static atomic_bool commands_done;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int on_echo(void *ctx, chanos_conn *c,
                   const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx, (void)c;
    out->result = in->val;
    return 0;
}

static const struct pingpong_server_ops ops = { .echo = on_echo };

/* command runs one command line: 0, or a chanos code. */
static int command(char *line)
{
    static const struct {
        const char *name;
        int status;
    } statuses_by_name[] = {
        { "serving", CHANOS_HEALTH_SERVING },
        { "not_serving", CHANOS_HEALTH_NOT_SERVING },
        { "unknown", CHANOS_HEALTH_UNKNOWN },
    };
    char *verb = strtok(line, " \n"), *service, *status;

    if (verb != NULL && strcmp(verb, "shutdown") == 0) {
        chanos_health_shutdown(statuses);
        return 0;
    }
    if (verb != NULL && strcmp(verb, "resume") == 0) {
        chanos_health_resume(statuses);
        return 0;
    }
    service = strtok(NULL, " \n");
    status = strtok(NULL, " \n");
    if (verb == NULL || strcmp(verb, "set") != 0 || service == NULL ||
        status == NULL)
        return CHANOS_ERR_INVALID;
    if (strcmp(service, "-") == 0)
        service = "";
    for (size_t i = 0; i < sizeof statuses_by_name / sizeof statuses_by_name[0]; i++)
        if (strcmp(status, statuses_by_name[i].name) == 0)
            return chanos_health_set(statuses, service, statuses_by_name[i].status);
    return CHANOS_ERR_ENUM;
}

/* commands runs the commands of the standard input until it ends. */
static void *commands(void *arg)
{
    char line[512];

    (void)arg;
    while (fgets(line, sizeof line, stdin) != NULL) {
        int rc = command(line);

        if (rc == 0)
            printf("ok\n");
        else
            printf("error: %s\n", chanos_strerror(rc));
        fflush(stdout);
    }
    atomic_store(&commands_done, true);
    return NULL;
}

/* serve exports NAME, NAME.health and NAME.reflection and serves them
 * on this thread until stopping is set: 0, or 1 after saying why not. */
static int serve(chanos_domain *d, const char *name, const sigset_t *waitmask)
{
    struct chanos_serve_opts so = { 0, NULL, NULL };
    chanos_listener *svc = NULL, *hl = NULL, *rl = NULL;
    chanos_server *s = NULL;
    int rc;

    if ((rc = chanos_export_iface(d, name, &pingpong_interface, NULL, &svc)) != 0 ||
        (rc = chanos_health_export(d, name, &hl)) != 0 ||
        (rc = chanos_reflection_export(d, name, &rl)) != 0) {
        fprintf(stderr, "health_server: export %s: %s\n", name, chanos_strerror(rc));
        chanos_listener_close(hl);
        chanos_listener_close(svc);
        return 1;
    }
    if ((rc = chanos_server_new(d, &s)) != 0 ||
        (rc = chanos_server_add(s, svc, pingpong_dispatch, &ops, NULL)) != 0 ||
        (rc = chanos_server_add_health(s, statuses, hl)) != 0 ||
        (rc = chanos_server_add_reflection(s, rl)) != 0) {
        fprintf(stderr, "health_server: %s\n", chanos_strerror(rc));
    } else {
        printf("serving %s %s %s\n", chanos_listener_name(svc),
               chanos_listener_name(hl), chanos_listener_name(rl));
        fflush(stdout);
        so.spin_ns = 0; /* a probe's rare calls need no spinning */
        so.stop = &stopping;
        so.sigmask = waitmask;
        rc = chanos_server_run(s, &so);
        if (rc != 0)
            fprintf(stderr, "health_server: serve: %s\n", chanos_strerror(rc));
    }
    chanos_server_free(s);
    chanos_listener_close(rl);
    chanos_listener_close(hl);
    chanos_listener_close(svc);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts jo = { 0 };
    sigset_t block, waitmask;
    struct sigaction sa;
    chanos_domain *d;
    pthread_t t;
    int rc;

    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME\n", argv[0]);
        return 2;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Blocked but while the server waits, on this thread only: the
     * command thread inherits the mask and never takes them. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &waitmask);

    if ((rc = chanos_health_new(0, &statuses)) != 0) {
        fprintf(stderr, "health_server: %s\n", chanos_strerror(rc));
        return 1;
    }
    jo.program = "health_server (C)";
    if ((rc = chanos_join(&d, &jo)) != 0) {
        fprintf(stderr, "health_server: join: %s\n", chanos_strerror(rc));
        return 1;
    }
    if (pthread_create(&t, NULL, commands, NULL) != 0) {
        fprintf(stderr, "health_server: no thread for the commands\n");
        return 1;
    }
    rc = serve(d, argv[1], &waitmask);
    chanos_domain_close(d);
    /* A command thread still waiting for input may still set a status:
     * the table stays until the process ends, then. */
    if (atomic_load(&commands_done)) {
        pthread_join(t, NULL);
        chanos_health_free(statuses);
    }
    return rc;
}
