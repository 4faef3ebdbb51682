/*
 * listen.c: the accepting side. One thread per listener accepts TCP
 * connections, and each connection's handshake (TLS, then the hello) runs
 * on a thread of its own, within the handshake timeout, so that a client
 * that stalls its handshake holds up no other: a new connection becomes a
 * link queued for chanos_net_accept; a resume is handed to the link it
 * names, whose own thread answers it. At most max_handshakes run at once;
 * a connection beyond them is closed as it comes.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

struct chanos_net_listener {
    struct net_opts o;
    struct chanos_net_tls tls; /* o.t, which the server context refers to */
    SSL_CTX *sctx;
    int fd;
    /* readable once the listener closes: a semaphore given a count no
     * wait takes whole, so that every thread waiting on it wakes */
    int wakefd;
    int readyfd; /* readable while the queue is not empty */
    pthread_t thr;
    struct registry *reg;
    /* under reg->mu */
    bool stop;
    chanos_net_link **queue; /* new links awaiting accept */
    size_t qhead, qn;
    /* the ids of new connections past the busy check and not yet queued:
     * each holds a place in the backlog while it is admitted */
    uint8_t (*resv)[16];
    size_t nresv;
    pthread_cond_t cv;
    int shaking;          /* handshakes running */
    pthread_cond_t idle;  /* signalled when shaking falls to 0 */
};

void registry_put(struct registry *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last) {
        pthread_mutex_destroy(&r->mu);
        free(r->links);
        free(r);
    }
}

static void reject(struct tconn *t, uint32_t code, int wakefd)
{
    uint8_t b[REC_HDR + 4];
    net_put_header(b, REC_REJECT, 4, 0, 0);
    chanos_store_u32(b + REC_HDR, code);
    /* Best effort, briefly: the connection closes either way. */
    tconn_write_all(t, b, sizeof b, wakefd, net_now() + 100000000, NULL, NULL);
}

/* handle runs one TCP connection's handshake; it takes fd over. */
static void handle(chanos_net_listener *L, int fd)
{
    struct registry *reg = L->reg;
    struct tconn t = {.fd = fd};
    net_tune(fd);
    int64_t deadline = net_now() + L->o.handshake;
    uint8_t fp[CHANOS_NET_FP_SIZE] = {0};
    char name[256] = "";
    bool auth_only = false;
    int r = 0;
    if (L->sctx)
        r = net_tls_server(L->sctx, &t, L->wakefd, deadline, &L->stop,
                           &reg->mu, fp, name, sizeof name, &auth_only);
    uint8_t hb[REC_HDR + HELLO_SIZE];
    if (r == 0)
        r = tconn_read_all(&t, hb, REC_HDR, L->wakefd, deadline, &L->stop,
                           &reg->mu);
    if (r != 0)
        goto drop;
    if (hb[0] != REC_HELLO || chanos_load_u32(hb + 4) != HELLO_SIZE) {
        reject(&t, REJECT_BAD, L->wakefd);
        goto drop;
    }
    if (tconn_read_all(&t, hb + REC_HDR, HELLO_SIZE, L->wakefd, deadline,
                       &L->stop, &reg->mu) != 0)
        goto drop;
    struct hello h;
    if (net_hello_parse(hb, hb + REC_HDR, &h) != 0) {
        reject(&t, REJECT_BAD, L->wakefd);
        goto drop;
    }
    /* Before admission and resumes: a client of the other mode spends
     * no admission, and learns why it is refused. */
    struct net_opts lo = L->o;
    if (L->sctx && L->tls.auth_only_for)
        lo.auth = L->tls.auth_only_for(L->tls.arg, name);
    if (L->sctx && auth_only != lo.auth) {
        reject(&t, REJECT_MODE, L->wakefd);
        goto drop;
    }
    if (h.resume) {
        bool taken = false;
        pthread_mutex_lock(&reg->mu);
        for (size_t i = 0; i < reg->n && !reg->closed; i++) {
            if (memcmp(net_link_id(reg->links[i]), h.id, 16) == 0) {
                /* Another certificate than the opening one is answered
                 * as an unknown connection. */
                taken = net_link_resume(reg->links[i], t, &h, fp, name);
                break;
            }
        }
        pthread_mutex_unlock(&reg->mu);
        if (taken)
            return;
        reject(&t, REJECT_UNKNOWN, L->wakefd);
        goto drop;
    }
    if (h.received != 0) {
        reject(&t, REJECT_BAD, L->wakefd);
        goto drop;
    }
    /* Busy is decided before admission, which a grant allows once: a
     * client refused for room must be able to try again. Its place in
     * the backlog is held meanwhile, so that the clients admitted at once
     * do not overrun it, and its id, so that it is not opened twice. */
    pthread_mutex_lock(&reg->mu);
    bool busy = reg->closed || L->qn + L->nresv >= (size_t)L->o.backlog;
    for (size_t i = 0; i < reg->n && !busy; i++)
        busy = memcmp(net_link_id(reg->links[i]), h.id, 16) == 0;
    for (size_t i = 0; i < L->nresv && !busy; i++)
        busy = memcmp(L->resv[i], h.id, 16) == 0;
    if (!busy)
        memcpy(L->resv[L->nresv++], h.id, 16);
    pthread_mutex_unlock(&reg->mu);
    if (busy) {
        reject(&t, REJECT_BUSY, L->wakefd);
        goto drop;
    }
    bool admitted =
        !L->sctx || (L->tls.admit && L->tls.admit(L->tls.arg, name, fp));
    pthread_mutex_lock(&reg->mu);
    for (size_t i = 0; i < L->nresv; i++) {
        if (memcmp(L->resv[i], h.id, 16) == 0) {
            memcpy(L->resv[i], L->resv[--L->nresv], 16);
            break;
        }
    }
    chanos_net_link *c = NULL;
    if (admitted && !reg->closed)
        c = net_link_accepted(&lo, reg, t, &h, fp, name);
    if (c) {
        L->queue[(L->qhead + L->qn++) % (size_t)L->o.backlog] = c;
        pthread_cond_broadcast(&L->cv);
        uint64_t one = 1;
        if (write(L->readyfd, &one, sizeof one) < 0) {
            /* the counter is full: it is readable anyway */
        }
    }
    pthread_mutex_unlock(&reg->mu);
    if (c)
        return;
    reject(&t, admitted ? REJECT_BUSY : REJECT_AUTH, L->wakefd);
drop:
    tconn_close(&t);
}

/* reverse reverses v[0..n). */
static void reverse(chanos_net_link **v, size_t n)
{
    for (size_t i = 0; i < n / 2; i++) {
        chanos_net_link *x = v[i];
        v[i] = v[n - 1 - i];
        v[n - 1 - i] = x;
    }
}

struct shake {
    chanos_net_listener *L;
    int fd;
};

/* shake_main is one handshake's thread. */
static void *shake_main(void *arg)
{
    struct shake *sh = arg;
    chanos_net_listener *L = sh->L;
    handle(L, sh->fd);
    free(sh);
    /* OpenSSL's state of this thread goes now, not in the thread's exit,
     * which may come after the listener's close has returned, and the
     * process's exit. */
    OPENSSL_thread_stop();
    pthread_mutex_lock(&L->reg->mu);
    if (--L->shaking == 0)
        pthread_cond_broadcast(&L->idle);
    pthread_mutex_unlock(&L->reg->mu);
    return NULL;
}

/* shake starts fd's handshake on a thread of its own, or closes fd if
 * max_handshakes are running (or no thread can be had). */
static void shake(chanos_net_listener *L, int fd)
{
    pthread_mutex_lock(&L->reg->mu);
    bool full = L->shaking >= L->o.max_handshakes;
    if (!full)
        L->shaking++;
    pthread_mutex_unlock(&L->reg->mu);
    struct shake *sh = full ? NULL : malloc(sizeof *sh);
    int r = -1;
    if (sh) {
        *sh = (struct shake){L, fd};
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        sigset_t old;
        net_block_signals(&old);
        pthread_t t;
        r = pthread_create(&t, &a, shake_main, sh);
        net_restore_signals(&old);
        pthread_attr_destroy(&a);
    }
    if (r == 0)
        return;
    free(sh);
    close(fd);
    if (!full) {
        pthread_mutex_lock(&L->reg->mu);
        if (--L->shaking == 0)
            pthread_cond_broadcast(&L->idle);
        pthread_mutex_unlock(&L->reg->mu);
    }
}

static void *listen_main(void *arg)
{
    chanos_net_listener *L = arg;
    int64_t delay = 5000000;
    for (;;) {
        pthread_mutex_lock(&L->reg->mu);
        bool stop = L->stop;
        pthread_mutex_unlock(&L->reg->mu);
        if (stop)
            break;
        struct pollfd p[2] = {{L->fd, POLLIN, 0}, {L->wakefd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[1].revents & POLLIN)
            continue; /* closing: stop is set */
        int fd = accept4(L->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                continue;
            /* Out of descriptors, say: wait rather than spin. */
            net_wait(-1, 0, L->wakefd, net_now() + delay);
            delay = delay * 2 < 1000000000 ? delay * 2 : 1000000000;
            continue;
        }
        delay = 5000000;
        shake(L, fd);
    }
    return NULL;
}

int chanos_net_listen_fd(int fd, const struct chanos_net_options *opts,
                         chanos_net_listener **out)
{
    if (fd < 0 || !out) {
        if (fd >= 0)
            close(fd);
        return -EINVAL;
    }
    *out = NULL;
    chanos_net_listener *L = calloc(1, sizeof *L);
    struct registry *reg = calloc(1, sizeof *reg);
    if (!L || !reg) {
        free(L);
        free(reg);
        close(fd);
        return -ENOMEM;
    }
    net_opts_resolve(opts, &L->o);
    L->fd = fd;
    L->reg = reg;
    reg->refs = 1;
    pthread_mutex_init(&reg->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&L->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&L->idle, NULL);
    int r = 0;
    /* Nonblocking: a connection gone between poll and accept must not
     * block the listener's thread. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        r = -errno;
    L->queue = calloc((size_t)L->o.backlog, sizeof *L->queue);
    L->resv = calloc((size_t)L->o.backlog, sizeof *L->resv);
    L->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    L->readyfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r == 0 && (!L->queue || !L->resv || L->wakefd < 0 || L->readyfd < 0))
        r = -ENOMEM;
    if (r == 0 && L->o.tls) {
        L->tls = L->o.t;
        if (!L->tls.identity_for)
            r = -EINVAL;
        else if (!(L->sctx = net_tls_server_ctx(&L->tls)))
            r = CHANOS_ERR_TLS;
    }
    if (r == 0) {
        sigset_t old;
        net_block_signals(&old);
        r = -pthread_create(&L->thr, NULL, listen_main, L);
        net_restore_signals(&old);
    }
    if (r != 0) {
        SSL_CTX_free(L->sctx);
        if (L->wakefd >= 0)
            close(L->wakefd);
        if (L->readyfd >= 0)
            close(L->readyfd);
        close(fd);
        free(L->queue);
        free(L->resv);
        pthread_cond_destroy(&L->cv);
        pthread_cond_destroy(&L->idle);
        registry_put(reg);
        free(L);
        return r;
    }
    *out = L;
    return 0;
}

int chanos_net_listen(const char *addr, const struct chanos_net_options *opts,
                      chanos_net_listener **out)
{
    if (!addr || !out)
        return -EINVAL;
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return -EINVAL;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        size_t n = strlen(h);
        if (n == 0 || h[n - 1] != ']')
            return -EINVAL;
        h[n - 1] = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        return -EINVAL;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    int fam;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, h[0] ? h : "0.0.0.0", &s4->sin_addr) == 1) {
        fam = s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, h, &s6->sin6_addr) == 1) {
        fam = s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        sl = sizeof *s6;
    } else {
        return -EINVAL;
    }
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return chanos_net_listen_fd(fd, opts, out);
}

int chanos_net_listener_port(const chanos_net_listener *L)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (!L || getsockname(L->fd, (struct sockaddr *)&ss, &sl) < 0)
        return -EINVAL;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int chanos_net_accept(chanos_net_listener *L, int timeout_ms,
                      chanos_net_link **out)
{
    if (!L || !out)
        return -EINVAL;
    *out = NULL;
    struct registry *reg = L->reg;
    int64_t deadline = net_now() + (int64_t)timeout_ms * 1000000;
    int r = 0;
    pthread_mutex_lock(&reg->mu);
    while (L->qn == 0) {
        if (reg->closed) {
            r = CHANOS_ERR_CLOSED;
            break;
        }
        if (timeout_ms == 0) {
            r = CHANOS_ERR_TIMEDOUT;
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&L->cv, &reg->mu);
            continue;
        }
        struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
        if (pthread_cond_timedwait(&L->cv, &reg->mu, &ts) == ETIMEDOUT &&
            net_now() >= deadline) {
            r = L->qn ? 0 : CHANOS_ERR_TIMEDOUT;
            break;
        }
    }
    if (r == 0) {
        *out = L->queue[L->qhead];
        L->qhead = (L->qhead + 1) % (size_t)L->o.backlog;
        L->qn--;
    }
    if (L->qn == 0) {
        uint64_t n;
        if (read(L->readyfd, &n, sizeof n) < 0) {
            /* EAGAIN: it was not readable */
        }
    }
    pthread_mutex_unlock(&reg->mu);
    return r;
}

int chanos_net_listener_fd(const chanos_net_listener *L)
{
    return L->readyfd;
}

void chanos_net_listener_close(chanos_net_listener *L)
{
    if (!L)
        return;
    struct registry *reg = L->reg;
    pthread_mutex_lock(&reg->mu);
    L->stop = true;
    pthread_mutex_unlock(&reg->mu);
    uint64_t many = UINT64_C(1) << 62;
    if (write(L->wakefd, &many, sizeof many) < 0) {
        /* the counter is full: the threads are being woken anyway */
    }
    pthread_join(L->thr, NULL);
    pthread_mutex_lock(&reg->mu);
    /* The handshakes see wakefd and stop, and end at once. */
    while (L->shaking > 0)
        pthread_cond_wait(&L->idle, &reg->mu);
    reg->closed = true;
    pthread_cond_broadcast(&L->cv);
    size_t n = L->qn, head = L->qhead;
    chanos_net_link **q = L->queue;
    L->qn = 0;
    pthread_mutex_unlock(&reg->mu);
    /* Closed all at once: each may wait for its acknowledgement, and the
     * listener waits about one linger in all, not one per link. The ring
     * is turned so that they lie from its start. */
    size_t b = (size_t)L->o.backlog;
    reverse(q, head);
    reverse(q + head, b - head);
    reverse(q, b);
    net_links_close(q, n, net_now() + L->o.linger);
    close(L->fd);
    close(L->wakefd);
    close(L->readyfd);
    SSL_CTX_free(L->sctx);
    free(L->queue);
    free(L->resv);
    pthread_cond_destroy(&L->cv);
    pthread_cond_destroy(&L->idle);
    free(L);
    registry_put(reg);
}
