/*
 * chanos-domain-peer: a C domain for the Go tests of the monitor's
 * admission (tests/interop).
 *
 *   chanos-domain-peer join DIR
 *   chanos-domain-peer sleep DIR [NAME]
 *
 * join joins the monitor in DIR, prints "joined ID" and leaves; if the
 * join fails it prints "join: " and chanos_strerror's text, and exits
 * with status 1. sleep joins, exports NAME (interface "kv") if given,
 * prints "joined ID" and then sleeps without ever calling libchanos
 * again, as a program between uses may: it leaves the monitor's pings
 * unread (docs/quotas.md, "Idle sessions").
 */
#include "chanos.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    struct chanos_join_opts o = { 0 };
    chanos_domain *d;
    chanos_listener *l;
    int rc;

    if (argc < 3 || (strcmp(argv[1], "join") != 0 && strcmp(argv[1], "sleep") != 0)) {
        fprintf(stderr, "usage: chanos-domain-peer join|sleep DIR [NAME]\n");
        return 2;
    }
    o.dir = argv[2];
    o.program = "c-domain-peer";
    rc = chanos_join(&d, &o);
    if (rc != 0) {
        printf("join: %s\n", chanos_strerror(rc));
        return 1;
    }
    if (strcmp(argv[1], "sleep") == 0 && argc > 3) {
        rc = chanos_export(d, argv[3], "kv", 1024, &l);
        if (rc != 0) {
            printf("export: %s\n", chanos_strerror(rc));
            return 1;
        }
    }
    printf("joined %llu\n", (unsigned long long)chanos_domain_id(d));
    fflush(stdout);
    if (strcmp(argv[1], "sleep") == 0) {
        for (;;)
            sleep(3600);
    }
    chanos_domain_close(d);
    return 0;
}
