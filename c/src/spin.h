/*
 * spin.h: what libchanos's spin loops share (the ring's waits and
 * chanos_serve_export's): a monotonic clock in ns and the CPU's spin hint.
 * Internal to the library; not installed.
 */
#ifndef CHANOS_SPIN_H
#define CHANOS_SPIN_H

#include <stdint.h>
#include <time.h>

static inline int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* cpu_relax eases a spin loop (PAUSE on x86, YIELD on arm64). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif
