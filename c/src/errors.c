/*
 * errors.c: the descriptions of the ump and domain result codes, for
 * chanos_strerror (src/wire.c), which covers the wire codes and -errno;
 * and the names of the rpc status codes (chanos_code_str).
 */
#include <chanos.h>

const char *chanos_strerror_more_(int err);

const char *chanos_strerror_more_(int err)
{
    switch (err) {
    case CHANOS_ERR_AGAIN:
        return "would block: poll the connection's fd";
    case CHANOS_ERR_TIMEDOUT:
        return "timed out";
    case CHANOS_ERR_CLOSED:
        return "connection closed";
    case CHANOS_ERR_PEER_DIED:
        return "peer died";
    case CHANOS_ERR_PROTOCOL:
        return "the peer broke the ring protocol";
    case CHANOS_ERR_TOO_LARGE:
        return "message over the connection's maximum size";
    case CHANOS_ERR_NO_MONITOR:
        return "no monitor running: start one with `chanos monitor` "
               "(or set CHANOS_DIR)";
    case CHANOS_ERR_MONITOR_LOST:
        return "lost the monitor: the session ended";
    case CHANOS_ERR_INVALID:
        return "monitor: invalid name, interface name or frame size";
    case CHANOS_ERR_EXISTS:
        return "monitor: name already registered";
    case CHANOS_ERR_NOT_FOUND:
        return "monitor: name not found";
    case CHANOS_ERR_MISMATCH:
        return "monitor: interface mismatch";
    case CHANOS_ERR_LIMIT:
        return "monitor: a limit was reached (resource exhausted)";
    case CHANOS_ERR_DENIED:
        return "monitor: denied (a private export bound by name, a caller "
               "not on the export's allow-list, or a wrong token)";
    case CHANOS_ERR_MONITOR:
        return "monitor: internal failure";
    case CHANOS_ERR_UNSAFE_DIR:
        return "untrusted monitor: its directory is not private to this "
               "user (want a directory of ours with mode 0700), or it runs "
               "as another user";
    case CHANOS_ERR_BUSY:
        return "concurrent use: one thread per domain, one sender and one "
               "receiver per connection";
    case CHANOS_ERR_REMOTE:
        return "the peer answered with an error reply";
    case CHANOS_ERR_NOT_OWNER:
        return "nameservice: the name belongs to another domain";
    case CHANOS_ERR_NO_ROUTE:
        return "monitor: no route to the machine of the export (binding "
               "across machines needs a net binder on both sides, "
               "chanos_join_opts.net)";
    case CHANOS_ERR_HANDED_OVER:
        return "the export was handed over to another domain";
    case CHANOS_ERR_HEALTH_FULL:
        return "health: the table of statuses is full (the most services "
               "chanos_health_new was given)";
    case CHANOS_ERR_INBOX_FULL:
        return "connection inbox full";
    case CHANOS_ERR_MONITOR_FULL:
        return "monitor full: every session is taken (the monitor's "
               "--max-domains cap)";
    }
    return "unknown chanos error";
}

/* The names of the canonical status codes, as Go's chanos.Code.String. */
static const char *const code_names[] = {
    [CHANOS_CODE_OK] = "ok",
    [CHANOS_CODE_CANCELED] = "canceled",
    [CHANOS_CODE_UNKNOWN] = "unknown",
    [CHANOS_CODE_INVALID_ARGUMENT] = "invalid argument",
    [CHANOS_CODE_DEADLINE_EXCEEDED] = "deadline exceeded",
    [CHANOS_CODE_NOT_FOUND] = "not found",
    [CHANOS_CODE_ALREADY_EXISTS] = "already exists",
    [CHANOS_CODE_PERMISSION_DENIED] = "permission denied",
    [CHANOS_CODE_RESOURCE_EXHAUSTED] = "resource exhausted",
    [CHANOS_CODE_FAILED_PRECONDITION] = "failed precondition",
    [CHANOS_CODE_ABORTED] = "aborted",
    [CHANOS_CODE_OUT_OF_RANGE] = "out of range",
    [CHANOS_CODE_UNIMPLEMENTED] = "unimplemented",
    [CHANOS_CODE_INTERNAL] = "internal",
    [CHANOS_CODE_UNAVAILABLE] = "unavailable",
    [CHANOS_CODE_DATA_LOSS] = "data loss",
    [CHANOS_CODE_UNAUTHENTICATED] = "unauthenticated",
};

const char *chanos_code_str(uint64_t code)
{
    if (code < sizeof code_names / sizeof code_names[0])
        return code_names[code];
    if (code >= CHANOS_CODE_APPLICATION)
        return "application code";
    return "reserved code";
}
