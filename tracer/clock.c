/* clock.c: the trace clock. Records carry raw readings: TSC ticks when the
 * processor has an invariant TSC (rdtsc costs a few ns, clock_gettime tens),
 * otherwise CLOCK_MONOTONIC nanoseconds. The writer converts raw readings to
 * nanoseconds on the CLOCK_MONOTONIC time line with a fixed linear map
 * calibrated at open, so every record, online window and stored row uses
 * one clock. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stagetrace.h" /* st_now_ns */
#include "st_clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

int st_clock_use_tsc;
#define use_tsc st_clock_use_tsc
static int64_t anchor_raw, anchor_ns;
static uint64_t mult_q32; /* ns per tick, fixed point 32.32 */
static double tsc_hz;

int64_t st_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int tsc_invariant(void)
{
#if defined(__x86_64__)
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[4096];
    int constant = 0, nonstop = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    return constant && nonstop;
#else
    return 0;
#endif
}

#if defined(__x86_64__)
/* A TSC read that stays between the instructions around it: rdtsc alone may
 * run before the clock_gettime before it has finished, or after the one
 * after it has begun, and then lies outside the bracket it is timed in. */
static inline int64_t tsc_fenced(void)
{
    _mm_lfence();
    int64_t r = (int64_t)__rdtsc();
    _mm_lfence();
    return r;
}
#endif

/* One (raw, CLOCK_MONOTONIC) pair read as close together as possible: of
 * PAIR_TRIES reads, the one with the shortest clock_gettime bracket. *ns is
 * the bracket's midpoint, *half_ns half its width rounded up: the TSC was
 * read at an instant whose CLOCK_MONOTONIC time is within *ns +- *half_ns. */
#define PAIR_TRIES 16
static void read_pair(int64_t *raw, int64_t *ns, int64_t *half_ns)
{
#if defined(__x86_64__)
    int64_t best = INT64_MAX;
    for (int i = 0; i < PAIR_TRIES; i++) {
        int64_t a = st_clock_mono_ns();
        int64_t r = tsc_fenced();
        int64_t b = st_clock_mono_ns();
        if (b - a < best) {
            best = b - a;
            *raw = r;
            *ns = a + (b - a) / 2;
        }
    }
    *half_ns = best / 2 + (best & 1);
#else
    *raw = *ns = st_clock_mono_ns();
    *half_ns = 0;
#endif
}

int st_clock_init(int force_monotonic)
{
    if (use_tsc || mult_q32) return 0; /* calibrated once per process */
    use_tsc = !force_monotonic && tsc_invariant();
    if (!use_tsc) {
        mult_q32 = 1ull << 32;
        return 0;
    }
    int64_t r0 = 0, n0 = 0, r1 = 0, n1 = 0, h0, h1;
    read_pair(&r0, &n0, &h0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    read_pair(&r1, &n1, &h1);
    if (r1 <= r0 || n1 <= n0) {
        use_tsc = 0;
        mult_q32 = 1ull << 32;
        return 0;
    }
    tsc_hz = (double)(r1 - r0) * 1e9 / (double)(n1 - n0);
    mult_q32 = (uint64_t)(((unsigned __int128)(n1 - n0) << 32) / (uint64_t)(r1 - r0));
    anchor_raw = r1;
    anchor_ns = n1;
    return 0;
}

/* ST_TEST_CLOCK_SHIFT_NS only; 0 in every real run. Applied where raw
 * readings become nanoseconds (the writer), never on the hot path. */
static int64_t shift_ns;
void st_clock_set_shift(int64_t shift) { shift_ns = shift; }
int64_t st_clock_mono_to_ns(int64_t mono_ns) { return mono_ns + shift_ns; }

int64_t st_clock_to_ns(int64_t raw)
{
    if (!use_tsc) return raw + shift_ns;
    __int128 d = (__int128)(raw - anchor_raw) * (__int128)mult_q32;
    return anchor_ns + (int64_t)(d >> 32) + shift_ns;
}

/* The map's error now: a fresh pair against the map calibrated at open. Its
 * anchor was read within +- its own half bracket, and its slope is off by
 * the two pairs' errors over 20 ms (parts per million), which grows with
 * the time since calibration; CLOCK_MONOTONIC itself may be slewed by NTP
 * meanwhile. The shift of ST_TEST_CLOCK_SHIFT_NS is not an error. */
void st_clock_map_error(int64_t *error_ns, int64_t *half_bracket_ns)
{
    *error_ns = *half_bracket_ns = 0;
    if (!use_tsc) return; /* the trace clock is CLOCK_MONOTONIC itself */
    int64_t raw = 0, mono = 0;
    read_pair(&raw, &mono, half_bracket_ns);
    *error_ns = st_clock_to_ns(raw) - shift_ns - mono;
}

const char *st_clock_name(void) { return use_tsc ? "tsc" : "monotonic"; }
double st_clock_tsc_hz(void) { return use_tsc ? tsc_hz : 0; }

int64_t st_now_ns(void)
{
    if (!mult_q32) return st_clock_mono_ns() + shift_ns;
    return st_clock_to_ns(st_clock_raw());
}
