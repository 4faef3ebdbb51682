/*
 * wait.c: tasks that wait for descriptors and timers, and the poller.
 *
 * The runtime owns one poller thread. A task that waits hands it a request
 * (a duplicate of the descriptor, the events, a deadline) and suspends. The
 * poller alone touches the epoll set and the timer list: it registers the
 * descriptor (one-shot), and when it polls or the deadline passes it
 * unregisters it and releases the task (tasks_release_), which resumes on
 * whichever worker is free. Since only the poller registers and
 * unregisters, a request completes exactly once, and the poller is done
 * with it before the task can resume and free it.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct waitreq {
    struct waitpoint wp;
    int fd;              /* ours (a duplicate), or -1: a timer alone */
    uint32_t events;
    int64_t deadline;    /* CLOCK_MONOTONIC ns, or -1 */
    int direct;          /* registered by the task, which unregisters it */
    uint32_t revents;    /* out */
    int timed_out;       /* out */
    int err;             /* out: registration failed */
    struct waitreq *next;  /* request queue */
    struct waitreq *tnext; /* timer list, by deadline */
};

struct poller {
    pthread_t thread;
    int ep;
    int kick; /* an eventfd: requests are queued, or stop */
    pthread_mutex_t lock;
    struct waitreq *head, *tail;
    int stop;
    struct waitreq *timers; /* the poller's own */
    chanos_tasks *rt;
};

static void complete(struct poller *p, struct waitreq *r)
{
    tasks_release_(p->rt, &r->wp);
}

static void timer_insert(struct poller *p, struct waitreq *r)
{
    struct waitreq **pp = &p->timers;

    while (*pp != NULL && (*pp)->deadline <= r->deadline)
        pp = &(*pp)->tnext;
    r->tnext = *pp;
    *pp = r;
}

static void timer_remove(struct poller *p, struct waitreq *r)
{
    for (struct waitreq **pp = &p->timers; *pp != NULL; pp = &(*pp)->tnext)
        if (*pp == r) {
            *pp = r->tnext;
            return;
        }
}

static void take_requests(struct poller *p)
{
    struct waitreq *r;
    uint64_t v;

    if (read(p->kick, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing was kicked; the queue is looked at anyway. */
    }
    pthread_mutex_lock(&p->lock);
    r = p->head;
    p->head = p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    while (r != NULL) {
        struct waitreq *next = r->next;

        if (r->fd >= 0) {
            struct epoll_event ev = { .events = r->events | EPOLLONESHOT, .data.ptr = r };

            if (epoll_ctl(p->ep, EPOLL_CTL_ADD, r->fd, &ev) != 0) {
                r->err = -errno;
                complete(p, r);
                r = next;
                continue;
            }
        }
        if (r->deadline >= 0)
            timer_insert(p, r);
        r = next;
    }
}

static void *poller_main(void *arg)
{
    struct poller *p = arg;
    struct epoll_event evs[64];

    for (;;) {
        int timeout = -1;
        int n;
        int64_t now;

        if (p->timers != NULL) {
            int64_t d = p->timers->deadline - tasks_now_ns_();

            /* capped: epoll takes an int of ms, and a negative one
             * means forever (a sleep of over 24 days would never end) */
            timeout = d <= 0                              ? 0
                      : d >= (int64_t)INT_MAX * 1000000 ? INT_MAX
                                                         : (int)((d + 999999) / 1000000);
        }
        n = epoll_wait(p->ep, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            struct waitreq *r = evs[i].data.ptr;

            if (r == NULL) {
                int stop;

                pthread_mutex_lock(&p->lock);
                stop = p->stop;
                pthread_mutex_unlock(&p->lock);
                if (stop)
                    return NULL;
                take_requests(p);
                continue;
            }
            if (!r->direct) {
                epoll_ctl(p->ep, EPOLL_CTL_DEL, r->fd, NULL);
                if (r->deadline >= 0)
                    timer_remove(p, r);
            }
            r->revents = evs[i].events;
            complete(p, r);
        }
        now = tasks_now_ns_();
        while (p->timers != NULL && p->timers->deadline <= now) {
            struct waitreq *r = p->timers;

            p->timers = r->tnext;
            if (r->fd >= 0)
                epoll_ctl(p->ep, EPOLL_CTL_DEL, r->fd, NULL);
            r->timed_out = 1;
            complete(p, r);
        }
    }
}

int poller_start_(chanos_tasks *rt)
{
    struct poller *p = calloc(1, sizeof(*p));
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    int err;

    if (p == NULL)
        return -ENOMEM;
    p->rt = rt;
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    p->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->ep < 0 || p->kick < 0 || epoll_ctl(p->ep, EPOLL_CTL_ADD, p->kick, &ev) != 0) {
        err = -errno;
        goto fail;
    }
    pthread_mutex_init(&p->lock, NULL);
    err = -pthread_create(&p->thread, NULL, poller_main, p);
    if (err != 0) {
        pthread_mutex_destroy(&p->lock);
        goto fail;
    }
    rt->poller = p;
    return 0;
fail:
    if (p->ep >= 0)
        close(p->ep);
    if (p->kick >= 0)
        close(p->kick);
    free(p);
    return err;
}

static void kick(struct poller *p)
{
    uint64_t one = 1;

    if (write(p->kick, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is full, so the poller is kicked already. */
    }
}

void poller_stop_(chanos_tasks *rt)
{
    struct poller *p = rt->poller;

    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    kick(p);
    pthread_join(p->thread, NULL);
    close(p->ep);
    close(p->kick);
    pthread_mutex_destroy(&p->lock);
    free(p);
    rt->poller = NULL;
}

static int64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : tasks_now_ns_() + (int64_t)timeout_ms * 1000000;
}

/* wait_until suspends the task until fd (if >= 0) polls or deadline (if
 * >= 0) passes: the events, CHANOS_ERR_TIMEDOUT, or -errno. */

static int wait_until(struct worker *w, int fd, uint32_t events, int64_t deadline)
{
    struct poller *p = w->rt->poller;
    struct waitreq r = { 0 };

    r.fd = -1;
    if (fd >= 0) {
        r.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (r.fd < 0)
            return -errno;
    }
    r.events = events;
    r.deadline = deadline;
    atomic_init(&r.wp.count, 2);
    if (r.fd >= 0 && deadline < 0) {
        /* Without a deadline the descriptor is the only way out: register
         * it here (one-shot: it completes once) rather than through the
         * poller's queue, which would cost the poller a wake-up. */
        struct epoll_event ev = { .events = events | EPOLLONESHOT, .data.ptr = &r };

        r.direct = 1;
        if (epoll_ctl(p->ep, EPOLL_CTL_ADD, r.fd, &ev) != 0) {
            int err = -errno;

            close(r.fd);
            return err;
        }
        tasks_suspend_(w, &r.wp);
        epoll_ctl(p->ep, EPOLL_CTL_DEL, r.fd, NULL);
        close(r.fd);
        return (int)r.revents;
    }
    pthread_mutex_lock(&p->lock);
    if (p->tail != NULL)
        p->tail->next = &r;
    else
        p->head = &r;
    p->tail = &r;
    pthread_mutex_unlock(&p->lock);
    kick(p);
    tasks_suspend_(w, &r.wp);
    if (r.fd >= 0)
        close(r.fd);
    if (r.err != 0)
        return r.err;
    if (r.timed_out)
        return CHANOS_ERR_TIMEDOUT;
    return (int)r.revents;
}

int chanos_task_wait_fd(int fd, uint32_t events, int timeout_ms)
{
    struct worker *w = tasks_worker_();
    struct pollfd pfd = { .fd = fd, .events = 0 };
    int n;

    if (fd < 0)
        return -EBADF;
    if (w != NULL && timeout_ms != 0)
        return wait_until(w, fd, events, deadline_of(timeout_ms));
    if (events & EPOLLIN)
        pfd.events |= POLLIN;
    if (events & EPOLLOUT)
        pfd.events |= POLLOUT;
    if (events & EPOLLPRI)
        pfd.events |= POLLPRI;
    if (events & EPOLLRDHUP)
        pfd.events |= POLLRDHUP;
    n = poll(&pfd, 1, timeout_ms);
    if (n < 0)
        return -errno;
    if (n == 0)
        return CHANOS_ERR_TIMEDOUT;
    if (pfd.revents & POLLNVAL)
        return -EBADF; /* as epoll_ctl says on a worker */
    return (pfd.revents & POLLIN ? EPOLLIN : 0) | (pfd.revents & POLLOUT ? EPOLLOUT : 0) |
           (pfd.revents & POLLPRI ? EPOLLPRI : 0) | (pfd.revents & POLLRDHUP ? EPOLLRDHUP : 0) |
           (pfd.revents & POLLHUP ? EPOLLHUP : 0) | (pfd.revents & POLLERR ? EPOLLERR : 0);
}

void chanos_task_sleep(int64_t ms)
{
    struct worker *w = tasks_worker_();

    if (ms <= 0)
        return;
    if (w != NULL) {
        /* a sleep past what the clock can count (292 years) is one
         * until then, not one that overflows into the past */
        int64_t now = tasks_now_ns_();
        int64_t deadline = ms > (INT64_MAX - now) / 1000000 ? INT64_MAX : now + ms * 1000000;

        wait_until(w, -1, 0, deadline);
        return;
    }
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- events ---- */

struct chanos_event {
    int fd;
};

int chanos_event_new(chanos_event **out)
{
    chanos_event *e = malloc(sizeof(*e));

    *out = NULL;
    if (e == NULL)
        return -ENOMEM;
    e->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->fd < 0) {
        int err = -errno;

        free(e);
        return err;
    }
    *out = e;
    return 0;
}

void chanos_event_free(chanos_event *e)
{
    if (e == NULL)
        return;
    close(e->fd);
    free(e);
}

int chanos_event_set(chanos_event *e)
{
    uint64_t one = 1;

    if (write(e->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        return -errno;
    return 0;
}

int chanos_event_fd(const chanos_event *e)
{
    return e->fd;
}

int chanos_task_event_wait(chanos_event *e, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);

    for (;;) {
        uint64_t v;
        int rc;
        int left;

        if (read(e->fd, &v, sizeof(v)) == sizeof(v))
            return 0;
        if (errno != EAGAIN)
            return -errno;
        left = timeout_ms;
        if (deadline >= 0) {
            int64_t d = deadline - tasks_now_ns_();

            if (d <= 0)
                return CHANOS_ERR_TIMEDOUT;
            left = (int)((d + 999999) / 1000000);
        }
        rc = chanos_task_wait_fd(e->fd, EPOLLIN, left);
        if (rc < 0 && rc != CHANOS_ERR_TIMEDOUT)
            return rc;
    }
}

/* ---- ump and connections ---- */

/* spin looks for a message with look (a spin receive) for the ring's spin
 * window while the worker has nothing else to run: AGAIN if none came. */
static int spin(struct worker *w, int64_t spin_ns, int (*look)(void *, void *), void *a, void *b)
{
    int64_t end;
    int rc;

    if (spin_ns <= 0)
        return CHANOS_ERR_AGAIN;
    end = tasks_now_ns_() + spin_ns;
    for (unsigned i = 1;; i++) {
        rc = look(a, b);
        if (rc != CHANOS_ERR_AGAIN)
            return rc;
        if ((i & 31) == 0 && (tasks_has_other_work_(w) || tasks_now_ns_() >= end))
            return CHANOS_ERR_AGAIN;
        tasks_relax_();
    }
}

/* wait_ready waits until fd polls readable or deadline passes: 0 or
 * CHANOS_ERR_TIMEDOUT, or -errno. */
static int wait_ready(struct worker *w, int fd, int64_t deadline)
{
    int rc;

    if (deadline >= 0 && tasks_now_ns_() >= deadline)
        return CHANOS_ERR_TIMEDOUT;
    rc = wait_until(w, fd, EPOLLIN, deadline);
    return rc < 0 ? rc : 0;
}

struct umprecv {
    const void **msg;
    size_t *len;
};

static int ump_look(void *u, void *a)
{
    struct umprecv *r = a;

    return chanos_ump_spin_recv(u, r->msg, r->len);
}

int chanos_task_ump_recv(chanos_ump *u, const void **msg, size_t *len, int timeout_ms)
{
    struct worker *w = tasks_worker_();
    struct umprecv a = { msg, len };
    int64_t deadline;
    int rc;

    if (w == NULL || timeout_ms == 0)
        return chanos_ump_recv(u, msg, len, timeout_ms);
    deadline = deadline_of(timeout_ms);
    rc = spin(w, chanos_ump_spin_ns(u), ump_look, u, &a);
    if (rc != CHANOS_ERR_AGAIN)
        return rc;
    for (;;) {
        rc = chanos_ump_try_recv(u, msg, len); /* arms the descriptor */
        if (rc != CHANOS_ERR_AGAIN)
            return rc;
        rc = wait_ready(w, chanos_ump_fd(u), deadline);
        if (rc == CHANOS_ERR_TIMEDOUT) {
            rc = chanos_ump_try_recv(u, msg, len);
            return rc == CHANOS_ERR_AGAIN ? CHANOS_ERR_TIMEDOUT : rc;
        }
        if (rc < 0)
            return rc;
        w = tasks_worker_();
    }
}

int chanos_task_ump_send(chanos_ump *u, const void *msg, size_t len, int timeout_ms)
{
    struct worker *w = tasks_worker_();
    int64_t deadline;
    int rc;

    if (w == NULL || timeout_ms == 0)
        return chanos_ump_send(u, msg, len, timeout_ms);
    deadline = deadline_of(timeout_ms);
    for (;;) {
        rc = chanos_ump_try_send(u, msg, len);
        if (rc != CHANOS_ERR_AGAIN)
            return rc;
        rc = wait_ready(w, chanos_ump_fd(u), deadline);
        if (rc == CHANOS_ERR_TIMEDOUT) {
            rc = chanos_ump_try_send(u, msg, len);
            return rc == CHANOS_ERR_AGAIN ? CHANOS_ERR_TIMEDOUT : rc;
        }
        if (rc < 0)
            return rc;
        w = tasks_worker_();
    }
}

static bool waiter_spin(void *unused)
{
    struct worker *w = tasks_worker_();

    (void)unused;
    return w != NULL && !tasks_has_other_work_(w);
}

static int waiter_wait(void *unused, int fd, int64_t deadline_ns)
{
    struct worker *w = tasks_worker_();

    (void)unused;
    if (w == NULL)
        return -EINVAL; /* set only on workers' threads */
    return wait_ready(w, fd, deadline_ns);
}

const struct chanos_waiter tasks_waiter_ = { waiter_spin, waiter_wait, NULL };

int chanos_task_conn_recv(chanos_conn *c, int timeout_ms, struct chanos_frame *f)
{
    return chanos_conn_recv(c, timeout_ms, f);
}

int chanos_task_conn_call(chanos_conn *c, uint8_t *frame, size_t len,
                          int timeout_ms, struct chanos_frame *reply,
                          void (*other)(void *arg, const struct chanos_frame *f),
                          void *arg)
{
    return chanos_conn_call(c, frame, len, timeout_ms, reply, other, arg);
}
