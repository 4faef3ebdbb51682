/*
 * internal.h: what one part of libchanos offers another and programs do
 * not call.
 */
#ifndef CHANOS_INTERNAL_H
#define CHANOS_INTERNAL_H

#include <chanos.h>

/* chanos_conn_set_peer_ records the client of a connection chanos_accept
 * hands out (chanos_conn_peer): 0 or -ENOMEM. */
int chanos_conn_set_peer_(chanos_conn *c, const struct chanos_peer *p);

#endif
