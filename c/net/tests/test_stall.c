/*
 * test_stall.c: clients that open a TCP connection to a C listener and
 * stall their handshake hold up no other client (each handshake runs on a
 * thread of its own); beyond max_handshakes, connections are closed as
 * they come; closing the listener ends the stalled handshakes at once
 * rather than after their timeout.
 */
#include "check.h"

#include <chanos_net.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* tcp_dial opens a bare TCP connection to the listener, which then waits
 * for a handshake that never comes. */
static int tcp_dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A dial whose own handshake timeout is shorter than one stalled
 * handshake's: it succeeds only if the listener serves it meanwhile. */
static void test_stalled_hold_no_one(void)
{
    check_context = "stalled clients";
    struct chanos_net_options lo = {.handshake_ms = 20000, .linger_ms = 100};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &lo, &L), 0);
    int port = chanos_net_listener_port(L);
    int stalled[3];
    for (int i = 0; i < 3; i++) {
        stalled[i] = tcp_dial(port);
        CHECK(stalled[i] >= 0);
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct chanos_net_options co = {.handshake_ms = 5000, .linger_ms = 100};
    chanos_net_link *a = NULL, *b = NULL;
    CHECK_EQ(chanos_net_dial(addr, &co, &a), 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    static const uint8_t frame[16] = {16, 0, 0, 0, 1};
    const void *f;
    size_t len;
    CHECK_EQ(chanos_net_send(a, frame, sizeof frame, 5000), 0);
    CHECK_EQ(chanos_net_recv(b, &f, &len, 5000), 0);
    CHECK_EQ(len, sizeof frame);
    chanos_net_close(a);
    chanos_net_close(b);
    /* Closing ends the stalled handshakes without their 20 s. */
    int64_t t0 = now_ms();
    chanos_net_listener_close(L);
    fprintf(stderr,
            "test_stall: the listener closed %lld ms after the close began, "
            "3 handshakes stalled\n",
            (long long)(now_ms() - t0));
    for (int i = 0; i < 3; i++) {
        uint8_t c;
        /* the listener's side is closed: end of stream, or a reset */
        CHECK(read(stalled[i], &c, 1) <= 0);
        close(stalled[i]);
    }
}

static void test_bound(void)
{
    check_context = "max_handshakes";
    struct chanos_net_options lo = {.handshake_ms = 20000, .max_handshakes = 2,
                                    .linger_ms = 100};
    chanos_net_listener *L;
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", &lo, &L), 0);
    int port = chanos_net_listener_port(L);
    int held[2];
    for (int i = 0; i < 2; i++) {
        held[i] = tcp_dial(port);
        CHECK(held[i] >= 0);
    }
    /* A third is closed as it comes: its read ends (after the two
     * above are held, which the listener takes in order). */
    usleep(200000);
    int third = tcp_dial(port);
    CHECK(third >= 0);
    struct timeval tv = {10, 0};
    setsockopt(third, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t c;
    CHECK(read(third, &c, 1) <= 0);
    close(third);
    /* Once the held ones go, a client gets through again. */
    close(held[0]);
    close(held[1]);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    chanos_net_link *a = NULL, *b = NULL;
    int r = CHANOS_ERR_REFUSED;
    for (int tries = 0; tries < 50 && r != 0; tries++) {
        struct chanos_net_options co = {.handshake_ms = 2000, .linger_ms = 100};
        r = chanos_net_dial(addr, &co, &a);
        if (r != 0)
            usleep(20000); /* the listener has yet to see them go */
    }
    CHECK_EQ(r, 0);
    CHECK_EQ(chanos_net_accept(L, 5000, &b), 0);
    chanos_net_close(a);
    chanos_net_close(b);
    chanos_net_listener_close(L);
}

int main(void)
{
    test_stalled_hold_no_one();
    test_bound();
    return check_done("test_stall");
}
