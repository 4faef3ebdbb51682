/*
 * reflection.c: the reflection service of a C domain (docs/reflection.md),
 * the C counterpart of Go's reflection.Exports, over the code chanosc
 * generates for interfaces/reflection.if (<chanos/reflection.h>, built
 * into libchanos). describe answers from the domain's exports as they are
 * at each call, with the definitions the generated IFACE_interface
 * carries (chanos_export_iface, chanos_adopt).
 */
#include "chanos.h"
#include "chanos/reflection.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CHANOS_REFLECTION_DEFINITION_MAX ==
                   REFLECTION_DESCRIBE_DEFINITION_MAX,
               "chanos.h's bound of a definition is reflection.if's");

/* What a server's reflection export keeps: its domain, and the buffer a
 * definition's pieces are joined in, which the reply points into until
 * the dispatch has encoded it. */
struct refl {
    chanos_domain *d;
    char *buf;
    size_t cap;
};

int chanos_reflection_export(chanos_domain *d, const char *name,
                             chanos_listener **out)
{
    return chanos_export_suffixed_(d, name, CHANOS_REFLECTION_SUFFIX,
                                   &reflection_interface, out);
}

/* definition_len is the length of the definition that pieces join
 * into. */
static size_t definition_len(const char *const *pieces)
{
    size_t n = 0;

    for (; *pieces != NULL; pieces++)
        n += strlen(*pieces);
    return n;
}

static int on_describe(void *ctx, chanos_conn *c,
                       const struct reflection_describe_call *in,
                       struct reflection_describe_reply *out)
{
    struct refl *r = ctx;
    struct chanos_exported_ e;
    size_t n, off = 0;
    int rc = chanos_domain_exported_(r->d, in->name.ptr, in->name.len, &e);

    /* The details are Go's (reflection.Exports.Describe), so that a tool
     * hears the same from either. */
    char name[CHANOS_QUOTED_SIZE_(REFLECTION_DESCRIBE_NAME_MAX)];

    /* as Go's %q: a client's name puts no control byte into the detail */
    chanos_quote_(name, in->name.ptr, in->name.len,
                  REFLECTION_DESCRIBE_NAME_MAX);
    if (rc == CHANOS_ERR_NOT_FOUND) {
        chanos_conn_set_detail(c, "this domain exports no %s", name);
        return CHANOS_CODE_NOT_FOUND;
    }
    if (rc != 0) {
        chanos_conn_set_detail(c, "the domain's exports cannot be read: %s",
                               chanos_strerror(rc));
        return CHANOS_CODE_UNAVAILABLE;
    }
    if (e.definition == NULL || e.definition[0] == NULL) {
        chanos_conn_set_detail(c,
                               "the interface %.*s of %s carries no "
                               "definition",
                               (int)e.iface.len, e.iface.ptr, name);
        return CHANOS_CODE_UNIMPLEMENTED;
    }
    n = definition_len(e.definition);
    if (n > CHANOS_REFLECTION_DEFINITION_MAX) {
        chanos_conn_set_detail(c,
                               "the definition of %.*s takes %zu bytes, more "
                               "than describe carries (%d)",
                               (int)e.iface.len, e.iface.ptr, n,
                               CHANOS_REFLECTION_DEFINITION_MAX);
        return CHANOS_CODE_RESOURCE_EXHAUSTED;
    }
    if (n > r->cap) {
        char *p = realloc(r->buf, n);

        if (p == NULL)
            return -ENOMEM;
        r->buf = p;
        r->cap = n;
    }
    for (const char *const *piece = e.definition; *piece != NULL; piece++) {
        size_t k = strlen(*piece);

        memcpy(r->buf + off, *piece, k);
        off += k;
    }
    out->iface = e.iface;
    out->fingerprint = e.fingerprint;
    out->definition.ptr = r->buf;
    out->definition.len = (uint32_t)n;
    return 0;
}

static const struct reflection_server_ops ops = { .describe = on_describe };

static void refl_release(void *arg)
{
    struct refl *r = arg;

    free(r->buf);
    free(r);
}

int chanos_server_add_reflection(chanos_server *s, chanos_listener *l)
{
    struct chanos_serve_hooks_ hk = { -1, NULL, NULL, refl_release, NULL };
    struct refl *r;
    int rc;

    if (s == NULL || l == NULL)
        return -EINVAL;
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->d = chanos_listener_domain_(l);
    hk.arg = r;
    rc = chanos_server_add_hooked_(s, l, reflection_dispatch, &ops, r, &hk);
    if (rc != 0)
        refl_release(r);
    return rc;
}
