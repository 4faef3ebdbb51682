/*
 * chanos-version-peer: a C domain built from version 2 of the interface
 * calc (testdata/versions/v2/calc.if), for the Go tests of fingerprints
 * (tests/interop), whose other side is built from version 1.
 *
 *   chanos-version-peer connect DIR NAME
 *   chanos-version-peer export DIR NAME
 *
 * connect binds NAME as calc (calc_interface, fingerprint and all) and
 * prints "connected"; if the bind fails it prints "connect: ", the
 * error's text and the monitor's detail (chanos_domain_error), and exits
 * with status 1. export exports NAME as calc, prints "exported" and
 * serves the monitor's socket until SIGTERM, then exits with status 0.
 */
#include "calc.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d;
    int rc;

    if (argc != 4 || (strcmp(argv[1], "connect") != 0 &&
                      strcmp(argv[1], "export") != 0)) {
        fprintf(stderr, "usage: chanos-version-peer connect|export DIR NAME\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    o.dir = argv[2];
    o.program = "c-version-peer";
    rc = chanos_join(&d, &o);
    if (rc != 0) {
        printf("join: %s\n", chanos_strerror(rc));
        return 1;
    }
    if (strcmp(argv[1], "connect") == 0) {
        chanos_conn *c;

        rc = chanos_connect_iface(d, argv[3], &calc_interface, 5000, &c);
        if (rc != 0) {
            printf("connect: %s: %s\n", chanos_strerror(rc),
                   chanos_domain_error(d));
            chanos_domain_close(d);
            return 1;
        }
        printf("connected\n");
        chanos_conn_close(c);
    } else {
        chanos_listener *l;

        rc = chanos_export_iface(d, argv[3], &calc_interface, NULL, &l);
        if (rc != 0) {
            printf("export: %s: %s\n", chanos_strerror(rc),
                   chanos_domain_error(d));
            chanos_domain_close(d);
            return 1;
        }
        printf("exported\n");
        fflush(stdout);
        while (!stop && chanos_domain_poll(d, 100) == 0)
            ;
    }
    chanos_domain_close(d);
    return 0;
}
