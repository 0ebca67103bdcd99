/* cpu_nofp.h: the call chain of tests/cpu_nofp.c, built without frame
 * pointers: nofp_a -> nofp_b -> nofp_c -> nofp_spin until until_ns
 * (CLOCK_MONOTONIC). */
#ifndef CPU_NOFP_H
#define CPU_NOFP_H
#include <stdint.h>
uint64_t nofp_a(int64_t until_ns, uint64_t x);
uint64_t nofp_b(int64_t until_ns, uint64_t x);
uint64_t nofp_c(int64_t until_ns, uint64_t x);
uint64_t nofp_spin(uint64_t x);
#endif
