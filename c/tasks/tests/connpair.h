/* connpair.h: a chanos connection between two processes for the tasks'
 * connection tests: a ump ring pair over a socketpair, or (over_net) a
 * libchanos_net link over loopback TCP, whose port the child tells the
 * parent through the socketpair. Fork before any thread starts (the net
 * link's). */
#ifndef CHANOS_TASKS_CONNPAIR_H
#define CHANOS_TASKS_CONNPAIR_H

#include <chanos.h>
#include <chanos_net.h>

#include <stdio.h>
#include <unistd.h>

/* connpair_child makes the child's end over sock (the socketpair's child
 * end): 0, or nonzero on failure. */
static inline int connpair_child(int sock, int over_net, int timeout_ms, chanos_conn **out)
{
    chanos_net_listener *l;
    chanos_net_link *k;
    chanos_ump *u;
    int port;

    if (!over_net)
        return chanos_ump_attach(sock, NULL, 10000, &u) != 0 || chanos_conn_new(u, out) != 0;
    /* the server's side: it listens and tells the parent its port */
    if (chanos_net_listen("127.0.0.1:0", NULL, &l) != 0)
        return 1;
    port = chanos_net_listener_port(l);
    if (write(sock, &port, sizeof port) != (ssize_t)sizeof port ||
        chanos_net_accept(l, timeout_ms, &k) != 0 || chanos_net_conn_new(k, out) != 0) {
        chanos_net_listener_close(l);
        return 1;
    }
    chanos_net_listener_close(l);
    return 0;
}

/* connpair_parent makes the parent's end over sock, which a ring keeps
 * (a net link's parent closes it): 0, or nonzero on failure. */
static inline int connpair_parent(int sock, int over_net, chanos_conn **out)
{
    chanos_net_link *k = NULL;
    chanos_ump *u;
    char addr[32];
    int port = 0;

    if (!over_net)
        return chanos_ump_create(sock, NULL, 10000, &u) != 0 || chanos_conn_new(u, out) != 0;
    if (read(sock, &port, sizeof port) != (ssize_t)sizeof port)
        return 1;
    close(sock);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return chanos_net_dial(addr, NULL, &k) != 0 || chanos_net_conn_new(k, out) != 0;
}

#endif
