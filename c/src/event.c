/*
 * event.c: event objects (docs/capabilities.md): an eventfd, a timerfd
 * or a signalfd behind a descriptor that a program waits on, signals, and
 * passes to another domain in a message.
 */
#include <chanos.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
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

/*
 * The descriptor of an Event may be shared with other domains, and its
 * O_NONBLOCK flag with them (it belongs to the open file, not to the
 * descriptor): a broken or hostile peer can clear it. Neither a signal nor
 * a wait may then block for good. A wait reads with RWF_NOWAIT, which
 * never blocks whatever the flag says; a kernel without it for this kind
 * of descriptor (before about Linux 5.12 for an eventfd) gets the flag set
 * again before each read. A signal sets it again before each write, since
 * no write of an eventfd takes RWF_NOWAIT. A peer that clears it between
 * the two system calls, while also keeping the count full, can still
 * hold a signal until somebody reads (docs/capabilities.md).
 */

/* nonblocking sets O_NONBLOCK on fd's open file if a peer cleared it. */
static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0)
        return -errno;
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* read_nowait reads at most len bytes from fd without blocking, whatever
 * its flags: the byte count, or -1 with errno (EAGAIN: nothing there). */
static ssize_t read_nowait(int fd, void *buf, size_t len)
{
    static atomic_int no_nowait; /* the kernel refused RWF_NOWAIT once */
    struct iovec v = { buf, len };

    if (!atomic_load_explicit(&no_nowait, memory_order_relaxed)) {
        ssize_t r = preadv2(fd, &v, 1, -1, RWF_NOWAIT);

        if (r >= 0 || (errno != EOPNOTSUPP && errno != EINVAL && errno != ENOSYS))
            return r;
        atomic_store_explicit(&no_nowait, 1, memory_order_relaxed);
    }
    int err = nonblocking(fd);

    if (err < 0) {
        errno = -err;
        return -1;
    }
    return read(fd, buf, len);
}

int chanos_event_signal(int fd, uint64_t n)
{
    /* a full count fails at once (EAGAIN) rather than waiting for a
     * reader: the descriptor is made non-blocking again first (see
     * above) */
    if (n == 0 || n == UINT64_MAX)
        return -EINVAL;
    int err = nonblocking(fd);

    if (err < 0)
        return err;
    if (write(fd, &n, sizeof n) != (ssize_t)sizeof n)
        return errno == EAGAIN ? CHANOS_ERR_AGAIN : -errno;
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int chanos_event_wait(int fd, int timeout_ms, uint64_t *count)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    /* one deadline for the whole wait: a wake-up whose count another
     * waiter took waits only for what is left */
    int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    union {
        uint64_t n;
        struct signalfd_siginfo si;
    } u;

    for (;;) {
        ssize_t r = read_nowait(fd, &u, sizeof u);

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
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        if (timeout_ms == 0) /* the read looked: a poll would only look again */
            return CHANOS_ERR_AGAIN;
        int wait = timeout_ms;

        if (timeout_ms > 0) {
            int64_t left = deadline - now_ms();

            wait = left <= 0 ? 0 : (int)left;
        }
        int k = poll(&p, 1, wait);

        if (k < 0 && errno != EINTR)
            return -errno;
        if (k == 0)
            return timeout_ms == 0 ? CHANOS_ERR_AGAIN : CHANOS_ERR_TIMEDOUT;
    }
}
