/*
 * event.c: event objects (docs/capabilities.md): an eventfd, a timerfd
 * or a signalfd behind a descriptor that a program waits on, signals, and
 * passes to another domain in a message.
 */
#include <chanos.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

int chanos_event_create(unsigned flags)
{
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK |
                            ((flags & CHANOS_EVENT_SEMAPHORE) ? EFD_SEMAPHORE : 0));

    return fd < 0 ? -errno : fd;
}

int chanos_event_timer(int64_t first_ns, int64_t period_ns)
{
    struct itimerspec its;
    int fd;

    if (first_ns <= 0 || period_ns < 0)
        return -EINVAL;
    fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (fd < 0)
        return -errno;
    its.it_value.tv_sec = first_ns / 1000000000;
    its.it_value.tv_nsec = first_ns % 1000000000;
    its.it_interval.tv_sec = period_ns / 1000000000;
    its.it_interval.tv_nsec = period_ns % 1000000000;
    if (timerfd_settime(fd, 0, &its, NULL) != 0) {
        int err = -errno;

        close(fd);
        return err;
    }
    return fd;
}

int chanos_event_signals(const int *signals, unsigned n)
{
    sigset_t set;
    int fd;

    sigemptyset(&set);
    for (unsigned i = 0; i < n; i++)
        if (sigaddset(&set, signals[i]) != 0)
            return -EINVAL;
    fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return fd < 0 ? -errno : fd;
}

int chanos_event_signal(int fd, uint64_t n)
{
    /* a full count fails at once (EAGAIN) rather than waiting for a
     * reader; the descriptor may come from another domain, which can clear
     * O_NONBLOCK, so the write is preceded by no assumption: a blocking
     * eventfd at its maximum would wait, and poll tells first */
    struct pollfd p = { .fd = fd, .events = POLLOUT };

    if (n == 0 || n == UINT64_MAX)
        return -EINVAL;
    if (poll(&p, 1, 0) < 0)
        return -errno;
    if (!(p.revents & POLLOUT))
        return CHANOS_ERR_AGAIN;
    if (write(fd, &n, sizeof n) != (ssize_t)sizeof n)
        return errno == EAGAIN ? CHANOS_ERR_AGAIN : -errno;
    return 0;
}

int chanos_event_wait(int fd, int timeout_ms, uint64_t *count)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    union {
        uint64_t n;
        struct signalfd_siginfo si;
    } u;

    for (;;) {
        ssize_t r = read(fd, &u, sizeof u);

        if (r == (ssize_t)sizeof u.n) {
            *count = u.n;
            return 0;
        }
        if (r == (ssize_t)sizeof u.si) { /* a signalfd: one signal */
            *count = 1;
            return 0;
        }
        if (r >= 0)
            return CHANOS_ERR_PROTOCOL;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        if (errno == EAGAIN) {
            int k = poll(&p, 1, timeout_ms);

            if (k < 0 && errno != EINTR)
                return -errno;
            if (k == 0)
                return timeout_ms == 0 ? CHANOS_ERR_AGAIN : CHANOS_ERR_TIMEDOUT;
        }
    }
}
