/*
 * serve.c: the loop that drives a generated dispatch (chanos_serve), and
 * the few steps every generated dispatch shares, so that the code chanosc
 * writes per interface holds only the switch over its messages.
 */
#include "chanos.h"

#include <stdio.h>

/* is_wire_error tells the wire section's codes (a frame that does not
 * decode, a reply that does not encode) from the connection's. */
static int is_wire_error(int rc)
{
    return rc <= CHANOS_ERR_TRUNCATED && rc >= CHANOS_ERR_NOSPACE;
}

/* describe writes what, then the fault f that made rc, as Go's wire.Error
 * says it (or the code's description, if nothing recorded it), which the
 * peer's error reply carries as its detail. */
static void describe(char *out, size_t n, const char *what,
                     const struct chanos_wire_fault *f, int rc)
{
    int k = snprintf(out, n, "%s: ", what);

    if (k < 0 || (size_t)k >= n)
        return;
    if (f != NULL && f->code == rc)
        chanos_wire_fault_describe(f, out + k, n - (size_t)k);
    else
        snprintf(out + k, n - (size_t)k, "%s", chanos_strerror(rc));
}

int chanos_serve_frame(chanos_conn *c, const struct chanos_frame *f,
                       chanos_dispatch_fn dispatch, const void *ops,
                       void *ctx)
{
    /* a handler runs to its end before the next frame is read: there is
     * nothing left to cancel. A cancel carries no descriptors; those a
     * broken peer sent with one go now, or they would stay open. */
    if (f->kind == CHANOS_KIND_CANCEL) {
        chanos_frame_close_fds(f);
        return 0;
    }
    return dispatch(c, f, ops, ctx);
}

int chanos_serve(chanos_conn *c, chanos_dispatch_fn dispatch, const void *ops,
                 void *ctx, int timeout_ms)
{
    struct chanos_frame f;
    int rc;

    for (;;) {
        rc = chanos_conn_recv(c, timeout_ms, &f);
        /* a frame that breaks the wire format ends the connection, as
         * one that does not decode does: the peer is broken or hostile */
        if (rc == CHANOS_ERR_CLOSED)
            return 0;
        if (rc != 0) {
            /* A frame the connection refused (a wire code) is described
             * in the fault record. Any other end is no frame's fault: the
             * record of a call answered before is not why serving ends. */
            if (!is_wire_error(rc))
                chanos_conn_fault_(c);
            return rc;
        }
        rc = chanos_serve_frame(c, &f, dispatch, ops, ctx);
        if (rc != 0)
            return rc;
    }
}

int chanos_serve_reply_(chanos_conn *c, const struct chanos_frame *call,
                        int rc, const struct chanos_buf *b)
{
    /* taken whatever the result: a detail set by a handler that then
     * succeeded must not reach the next call's error reply */
    const char *detail = chanos_conn_take_detail_(c);

    if (rc == 0)
        return chanos_conn_reply_buf(c, call, b, -1);
    if (rc == CHANOS_SERVE_DEFER)
        return 0;
    if (rc > 0)
        return chanos_conn_reply_error(c, call, (uint64_t)rc, detail, -1);
    if (is_wire_error(rc)) {
        /* the handler's reply breaks the interface's bounds: the caller
         * hears of it, and the connection goes on */
        char why[64 + CHANOS_WIRE_FAULT_TEXT_MAX];

        describe(why, sizeof why, "the reply does not encode",
                 b != NULL ? b->fault : NULL, rc);
        return chanos_conn_reply_error(c, call, CHANOS_CODE_INTERNAL, why, -1);
    }
    return rc;
}

int chanos_serve_bad_(chanos_conn *c, const struct chanos_frame *f, int rc)
{
    char detail[64 + CHANOS_WIRE_FAULT_TEXT_MAX];

    /* the frame's descriptors go with it: nobody decoded them */
    chanos_frame_close_fds(f);
    if (f->kind != CHANOS_KIND_CALL)
        return rc;
    describe(detail, sizeof detail, "the call does not decode",
             chanos_conn_fault(c), rc);
    return chanos_conn_reply_error(c, f, CHANOS_SERVE_INVALID, detail, -1);
}

int chanos_serve_unimplemented_(chanos_conn *c, const struct chanos_frame *f,
                                const char *what)
{
    char detail[192];

    snprintf(detail, sizeof detail, "the server has no handler for %s", what);
    return chanos_conn_reply_error(c, f, CHANOS_SERVE_UNIMPLEMENTED, detail,
                                   -1);
}
