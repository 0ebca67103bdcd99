/* test_clock.c: tests of tracer/clock.c's map error (st_clock_map_error),
 * the measurement every rank's clock uncertainty adds (docs/trace-format.md,
 * "Ranks on one clock"):
 *
 *  - on CLOCK_MONOTONIC (and before any calibration) it is 0 and 0: the
 *    trace clock is CLOCK_MONOTONIC itself; a test shift changes nothing.
 *    In a child process, since the clock is calibrated once per process and
 *    this must run before the TSC calibration of the tests after it;
 *  - on the TSC right after calibration: the half bracket is > 0 (two
 *    clock_gettime calls around a fenced rdtsc take nanoseconds) and below
 *    10 us, and the error is within 1 us. The map's anchor was read within
 *    its own half bracket (tens of ns here), and its slope error (parts per
 *    million) has had microseconds to grow, so a correct map is off by tens
 *    of ns; a map read in the wrong unit, or against another clock, is off
 *    by far more;
 *  - the error excludes ST_TEST_CLOCK_SHIFT_NS's shift (5 s here);
 *  - it agrees with an independent measurement: st_now_ns() read between
 *    two clock_gettime calls a and b has a true error in [t - b, t - a],
 *    which must meet the measured error +- its half bracket (with 100 ns
 *    for st_now_ns's own unfenced rdtsc, which may run a little outside
 *    [a, b]); and two measurements back to back agree within the sum of
 *    their half brackets (the slope error over a microsecond is below 1 ns:
 *    +1);
 *  - after 200 ms the error is still within 1 us + 20 ppm of the time since
 *    calibration (a slope off by 20 ppm would mean a calibration bracket of
 *    400 ns: none seen here).
 * Skipped (the TSC parts) when the processor has no invariant TSC.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "st_testing.h"
#include "stagetrace.h"

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

/* The child's checks; its exit status names the first that failed. */
static int monotonic_child(void)
{
    int64_t e = -1, h = -1;
    st_clock_map_error(&e, &h);
    if (e != 0 || h != 0) return 10; /* before calibration */
    st_clock_init(1);
    if (strcmp(st_clock_name(), "monotonic") != 0) return 11;
    st_clock_map_error(&e, &h);
    if (e != 0 || h != 0) return 12;
    st_clock_set_shift(5000000000LL);
    st_clock_map_error(&e, &h);
    if (e != 0 || h != 0) return 13;
    st_clock_map m = {-1, -1};
    if (st_clock_map_measure(&m) != ST_OK || m.error_ns != 0 || m.half_bracket_ns != 0) return 14;
    return 0;
}

static void test_monotonic_is_exact(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(monotonic_child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("monotonic clock: check %d failed (10 before calibration, 11 not monotonic, 12 error not 0 +- 0, "
                 "13 with a shift, 14 st_clock_map_measure)", WEXITSTATUS(status));
}

static int64_t calibrated_at;

static int tsc_setup(void **state)
{
    (void)state;
    st_clock_init(0);
    calibrated_at = st_clock_mono_ns();
    return 0;
}

static int tsc_or_skip(void)
{
    if (strcmp(st_clock_name(), "tsc") == 0) return 1;
    printf("SKIP: no invariant TSC here: the trace clock is %s\n", st_clock_name());
    return 0;
}

static void test_tsc_right_after_calibration(void **state)
{
    (void)state;
    if (!tsc_or_skip()) skip();
    int64_t e, h;
    st_clock_map_error(&e, &h);
    print_message("map error right after calibration: %lld +- %lld ns\n", (long long)e, (long long)h);
    assert_true(h > 0);
    assert_true(h < 10000);
    assert_true(abs64(e) <= 1000);
    st_clock_map m;
    assert_int_equal(st_clock_map_measure(&m), ST_OK);
    assert_true(m.half_bracket_ns > 0);
    assert_true(abs64(m.error_ns) <= 1000);
}

static void test_tsc_shift_excluded(void **state)
{
    (void)state;
    if (!tsc_or_skip()) skip();
    st_clock_set_shift(5000000000LL);
    int64_t t = st_now_ns(), mono = st_clock_mono_ns();
    int64_t e, h;
    st_clock_map_error(&e, &h);
    st_clock_set_shift(0);
    assert_true(t - mono > 4000000000LL); /* the shift is there */
    assert_true(abs64(e) <= 1000);        /* and not an error */
}

/* The measured error +- half against [t - b - 100, t - a + 100], and two
 * measurements against each other. */
static void agree_with_independent(void)
{
    int64_t e, h, e2, h2;
    st_clock_map_error(&e, &h);
    st_clock_map_error(&e2, &h2);
    int64_t a = st_clock_mono_ns();
    int64_t t = st_now_ns();
    int64_t b = st_clock_mono_ns();
    int64_t lo = t - b - 100, hi = t - a + 100;
    if (e + h < lo || e - h > hi)
        fail_msg("map error %lld +- %lld ns, but st_now_ns between clock_gettime calls puts it in [%lld, %lld]",
                 (long long)e, (long long)h, (long long)lo, (long long)hi);
    if (abs64(e - e2) > h + h2 + 1)
        fail_msg("two measurements back to back: %lld +- %lld and %lld +- %lld ns", (long long)e, (long long)h,
                 (long long)e2, (long long)h2);
}

static void test_tsc_agrees(void **state)
{
    (void)state;
    if (!tsc_or_skip()) skip();
    for (int i = 0; i < 20; i++) agree_with_independent();
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    for (int i = 0; i < 20; i++) agree_with_independent();
    int64_t e, h;
    st_clock_map_error(&e, &h);
    int64_t since = st_clock_mono_ns() - calibrated_at;
    print_message("map error %lld ms after calibration: %lld +- %lld ns\n", (long long)(since / 1000000),
                  (long long)e, (long long)h);
    assert_true(abs64(e) <= 1000 + since / 50000); /* 20 ppm */
}

int main(void)
{
    const struct CMUnitTest first[] = {
        cmocka_unit_test(test_monotonic_is_exact),
    };
    const struct CMUnitTest tsc[] = {
        cmocka_unit_test(test_tsc_right_after_calibration),
        cmocka_unit_test(test_tsc_shift_excluded),
        cmocka_unit_test(test_tsc_agrees),
    };
    int failed = cmocka_run_group_tests_name("clock: monotonic", first, NULL, NULL);
    return failed + cmocka_run_group_tests_name("clock: tsc", tsc, tsc_setup, NULL);
}
