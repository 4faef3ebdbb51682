/*
 * raw_peer.h: a peer of the tests of libchanos_net that speaks the
 * records of docs/net.md by hand over a plain TCP socket on loopback, to
 * break the protocol where the library never would: dial, write a record
 * header, and read and write whole buffers.
 */
#ifndef CHANOS_NET_RAW_PEER_H
#define CHANOS_NET_RAW_PEER_H

#include <chanos.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* raw_dial connects to port on loopback, with reads that give up after
 * 5 s (a test waits for an answer that may never come): the socket, or
 * -1. */
static inline int raw_dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* put_header writes a record header of 24 bytes into b. */
static inline void put_header(uint8_t *b, uint8_t type, uint32_t len, uint64_t seq,
                              uint64_t ack)
{
    memset(b, 0, 24);
    b[0] = type;
    chanos_store_u32(b + 4, len);
    chanos_store_u64(b + 8, seq);
    chanos_store_u64(b + 16, ack);
}

/* read_full reads n bytes into b, or reports that it could not. */
static inline bool read_full(int fd, uint8_t *b, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t r = read(fd, b + off, n - off);
        if (r <= 0)
            return false;
        off += (size_t)r;
    }
    return true;
}

/* write_full writes the n bytes of b, or reports that it could not. */
static inline bool write_full(int fd, const void *b, size_t n)
{
    return send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n;
}

#endif
