/*
 * test_event.c: event objects (src/event.c). Their descriptors may be
 * shared with other domains, and with them the O_NONBLOCK flag of the
 * open file, which a peer can clear: a wait must still keep its timeout,
 * and a signal must still fail at once on a full count.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void set_blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    CHECK(fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A count is taken whole, or one at a time with the semaphore flag. */
static void test_counts(void)
{
    uint64_t n = 0;
    int fd = chanos_event_create(0), sem = chanos_event_create(CHANOS_EVENT_SEMAPHORE);

    CHECK(fd >= 0 && sem >= 0);
    CHECK_EQ(chanos_event_wait(fd, 0, &n), CHANOS_ERR_AGAIN);
    CHECK_EQ(chanos_event_signal(fd, 3), 0);
    CHECK_EQ(chanos_event_signal(fd, 4), 0);
    CHECK_EQ(chanos_event_wait(fd, 0, &n), 0);
    CHECK_EQ(n, 7);
    CHECK_EQ(chanos_event_signal(sem, 2), 0);
    CHECK_EQ(chanos_event_wait(sem, 0, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(chanos_event_wait(sem, 0, &n), 0);
    CHECK_EQ(chanos_event_wait(sem, 20, &n), CHANOS_ERR_TIMEDOUT);
    CHECK_EQ(chanos_event_signal(fd, 0), -EINVAL);
    CHECK_EQ(chanos_event_signal(fd, UINT64_MAX), -EINVAL);
    close(fd);
    close(sem);
}

/* A peer cleared O_NONBLOCK: waits keep their timeouts, a signal of a
 * full count fails at once, and a count signalled meanwhile is taken. */
static void test_blocking_descriptor(void)
{
    uint64_t n = 0;
    int fd = chanos_event_create(0);
    int64_t t;

    CHECK(fd >= 0);
    set_blocking(fd);
    CHECK_EQ(chanos_event_wait(fd, 0, &n), CHANOS_ERR_AGAIN);
    set_blocking(fd);
    t = now_ms();
    CHECK_EQ(chanos_event_wait(fd, 50, &n), CHANOS_ERR_TIMEDOUT);
    CHECK(now_ms() - t < 5000);
    set_blocking(fd);
    CHECK_EQ(chanos_event_signal(fd, UINT64_MAX - 2), 0);
    set_blocking(fd);
    CHECK_EQ(chanos_event_signal(fd, 5), CHANOS_ERR_AGAIN); /* would block */
    set_blocking(fd);
    CHECK_EQ(chanos_event_wait(fd, 1000, &n), 0);
    CHECK_EQ(n, UINT64_MAX - 2);
    close(fd);
}

static int taker_fd;

static void *taker(void *arg)
{
    (void)arg;
    usleep(20000);
    CHECK_EQ(chanos_event_signal(taker_fd, 1), 0);
    return NULL;
}

/* A wait with a timeout returns a count signalled while it waits. */
static void test_wait_wakes(void)
{
    pthread_t t;
    uint64_t n = 0;

    taker_fd = chanos_event_create(0);
    CHECK(taker_fd >= 0);
    CHECK(pthread_create(&t, NULL, taker, NULL) == 0);
    CHECK_EQ(chanos_event_wait(taker_fd, 5000, &n), 0);
    CHECK_EQ(n, 1);
    pthread_join(t, NULL);
    close(taker_fd);
}

int main(void)
{
    test_counts();
    test_blocking_descriptor();
    test_wait_wakes();
    return check_done("test_event");
}
