/* cpu_nofp.c: a call chain built without frame pointers, for
 * tests/test_cpu_unwind.c (the Makefile compiles this file alone with
 * -O2 -fomit-frame-pointer -momit-leaf-frame-pointer, as the PyTorch wheels
 * are built). nofp_a calls nofp_b, which calls nofp_c, which calls the leaf
 * nofp_spin until the deadline: each keeps its caller's rbp and none saves
 * its own frame record, so the kernel's frame-pointer walk from a sample
 * in nofp_spin skips all three; only their CFI (.eh_frame) finds them.
 * noinline and noclone keep the four functions apart, and the work after
 * each call keeps it from being a tail call (which would take the caller
 * off the stack). */
#include <stdint.h>
#include <time.h>

#include "cpu_nofp.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline, noclone)) uint64_t nofp_spin(uint64_t x)
{
    /* about 0.1 ms of work between two clock reads in nofp_c */
    for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
    return x;
}

__attribute__((noinline, noclone)) uint64_t nofp_c(int64_t until_ns, uint64_t x)
{
    while (now_ns() < until_ns) {
        x = nofp_spin(x);
        __asm__ volatile("" : "+r"(x));
    }
    return x ^ 3;
}

__attribute__((noinline, noclone)) uint64_t nofp_b(int64_t until_ns, uint64_t x)
{
    x = nofp_c(until_ns, x + 1);
    __asm__ volatile("" : "+r"(x));
    return x ^ 2;
}

__attribute__((noinline, noclone)) uint64_t nofp_a(int64_t until_ns, uint64_t x)
{
    x = nofp_b(until_ns, x + 1);
    __asm__ volatile("" : "+r"(x));
    return x ^ 1;
}
