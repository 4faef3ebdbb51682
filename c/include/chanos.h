/*
 * chanos.h: the one public header of libchanos.
 *
 * Sections: wire format (encoding helpers used by generated code), ump
 * (shared-memory rings). Ownership is stated beside each function.
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

/* ==== end wire format ==== */

/* ==== ump: shared-memory channels, see docs/ump.md ==== */

/* ==== end ump ==== */

#ifdef __cplusplus
}
#endif

#endif /* CHANOS_H */
