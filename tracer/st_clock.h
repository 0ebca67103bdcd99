/* st_clock.h: the trace clock (clock.c): raw readings on the hot path, the
 * map to trace nanoseconds the writer applies. Private to the tracer; the
 * tests and benchmarks reach it through st_testing.h, the library's own
 * files through st_internal.h. */
#ifndef ST_CLOCK_H
#define ST_CLOCK_H

#include <stdint.h>

int st_clock_init(int force_monotonic);
extern int st_clock_use_tsc;
int64_t st_clock_mono_ns(void);
static inline int64_t st_clock_raw(void) /* the hot-path read */
{
#if defined(__x86_64__)
    if (st_clock_use_tsc) return (int64_t)__builtin_ia32_rdtsc();
#endif
    return st_clock_mono_ns();
}
int64_t st_clock_to_ns(int64_t raw);   /* raw -> trace nanoseconds */
/* This process's map error, measured now against CLOCK_MONOTONIC: of a few
 * (raw, CLOCK_MONOTONIC) pairs the one with the tightest clock_gettime
 * bracket (the TSC read fenced inside it); *error_ns = its raw reading
 * mapped to trace nanoseconds, less the test shift, minus the bracket's
 * midpoint; *half_bracket_ns = half the bracket's width, rounded up, so the
 * true error is within *error_ns +- *half_bracket_ns. 0 and 0 on the
 * monotonic clock (and before st_clock_init). */
void st_clock_map_error(int64_t *error_ns, int64_t *half_bracket_ns);
const char *st_clock_name(void);       /* "tsc" or "monotonic" */
double st_clock_tsc_hz(void);          /* 0 when monotonic */
/* Applies ST_TEST_CLOCK_SHIFT_NS (st_clock_shift_from_env, ranks.c) to
 * every conversion to trace nanoseconds. */
void st_clock_set_shift(int64_t shift_ns);
/* A CLOCK_MONOTONIC time taken elsewhere (a perf record's) on the trace's
 * time line: the same shift. */
int64_t st_clock_mono_to_ns(int64_t mono_ns);

#endif
