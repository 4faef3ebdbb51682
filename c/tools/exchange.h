/*
 * exchange.h: the deterministic message sequence of the cross-language ump
 * test. interconnect/ump/crosslang_test.go generates the same sequence; the
 * two must change together.
 */
#ifndef CHANOS_TOOLS_EXCHANGE_H
#define CHANOS_TOOLS_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t xmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* xsize is the length of message i in direction dir (0: creator to
 * attacher, 1: the reverse), for a connection whose maximum is max. */
static inline size_t xsize(uint64_t i, int dir, size_t max)
{
    static const size_t fixed[] = {0, 1, 7, 8, 55, 56, 57, 63, 64, 111, 112,
                                   113, 447, 448, 449, 1000, 4095, 4096};
    size_t nfixed = sizeof fixed / sizeof fixed[0];
    if (i < nfixed)
        return fixed[i] < max ? fixed[i] : max;
    if (i == nfixed)
        return max - 1;
    if (i == nfixed + 1)
        return max;
    uint64_t h = xmix(i * 2 + (uint64_t)dir);
    return (size_t)(i % 4 == 0 ? h % (max + 1) : h % 200);
}

/* xbyte is byte j of message i in direction dir. */
static inline uint8_t xbyte(uint64_t i, int dir, size_t j)
{
    uint64_t h = xmix(i * 2 + (uint64_t)dir);
    return (uint8_t)((h >> ((j & 7) * 8)) + (j >> 3));
}

#endif
