/* test_rank_clock.c: ranks on one clock (docs/trace-format.md, "Ranks on
 * one clock"): st_rank_clock_map's exact values (offset alone, negative
 * offsets, drift between two measurements and extended beyond them,
 * truncation toward zero, sync_close <= sync, 64-bit overflow refused), and
 * the reader's checks of the multi-process meta keys (run_id, the clock
 * keys' types, ranges and groups), with their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "stagetrace_reader.h"
#include "tracegen.h"

static st_rank_clock open_only(int64_t sync, int64_t offset)
{
    st_rank_clock c = {1, 0, sync, offset, 5, 0, 0, 0};
    return c;
}

static st_rank_clock both(int64_t s0, int64_t o0, int64_t s1, int64_t o1)
{
    st_rank_clock c = {1, 1, s0, o0, 5, s1, o1, 7};
    return c;
}

static int64_t map(const st_rank_clock *c, int64_t t)
{
    int64_t out = -12345;
    assert_int_equal(st_rank_clock_map(c, t, &out), ST_OK);
    return out;
}

static void test_map_values(void **state)
{
    (void)state;
    st_rank_clock none;
    memset(&none, 0, sizeof none);
    assert_int_equal(map(&none, 123), 123);
    assert_int_equal(map(&none, INT64_MAX), INT64_MAX);
    assert_int_equal(st_rank_clock_uncertainty(&none), 0);

    st_rank_clock c = open_only(1000, 250);
    assert_int_equal(map(&c, 0), 250);
    assert_int_equal(map(&c, 5000), 5250);
    c = open_only(1000, -3000000000LL); /* rank 0's host booted 3 s later */
    assert_int_equal(map(&c, 5000000000LL), 2000000000LL);
    assert_int_equal(map(&c, 0), -3000000000LL);
    assert_int_equal(st_rank_clock_uncertainty(&c), 5);

    /* offset 100 at 1000, 200 at 2000: slope 1/10 */
    c = both(1000, 100, 2000, 200);
    assert_int_equal(map(&c, 1000), 1100);
    assert_int_equal(map(&c, 1500), 1500 + 100 + 50);
    assert_int_equal(map(&c, 2000), 2200);
    assert_int_equal(map(&c, 3000), 3300); /* extended beyond the close */
    assert_int_equal(map(&c, 0), 0);       /* and before the open */
    assert_int_equal(map(&c, 1009), 1009 + 100 + 0); /* 9 * 100 / 1000 = 0.9 -> 0 */
    assert_int_equal(map(&c, 991), 991 + 100 + 0);   /* -9 * 100 / 1000 = -0.9 -> 0 (toward zero) */
    assert_int_equal(map(&c, 989), 989 + 100 - 1);   /* -11 * 100 / 1000 = -1.1 -> -1 */
    assert_int_equal(st_rank_clock_uncertainty(&c), 7);

    /* a negative drift: offset -500 at 10^9, -700 at 3*10^9 */
    c = both(1000000000LL, -500, 3000000000LL, -700);
    assert_int_equal(map(&c, 2000000000LL), 2000000000LL - 500 - 100);
    assert_int_equal(map(&c, 2000000001LL), 2000000001LL - 500 - 100); /* -100.0000001 -> -100 */
    assert_int_equal(map(&c, 2000000011LL), 2000000011LL - 500 - 100);
    assert_int_equal(map(&c, 4000000000LL), 4000000000LL - 500 - 300);

    /* close at or before the open: the open offset alone */
    c = both(2000, 100, 2000, 900);
    assert_int_equal(map(&c, 5000), 5100);
    c = both(2000, 100, 1000, 900);
    assert_int_equal(map(&c, 5000), 5100);

    /* products past 64 bits stay exact: t - sync near 2^62 times an offset change near 2^40 */
    c = both(0, 0, 1LL << 50, 1LL << 40);
    assert_int_equal(map(&c, 1LL << 62), (1LL << 62) + (1LL << 52));
}

static void test_map_overflow(void **state)
{
    (void)state;
    st_rank_clock c = open_only(0, 10);
    int64_t out = 77;
    assert_int_equal(st_rank_clock_map(&c, INT64_MAX - 10, &out), ST_OK);
    assert_int_equal(out, INT64_MAX);
    assert_int_equal(st_rank_clock_map(&c, INT64_MAX - 9, &out), ST_ECORRUPT);
    assert_int_equal(out, INT64_MAX); /* left alone */
    assert_string_equal(st_last_error(), "time 9223372036854775798 does not map onto rank 0's clock within 64 bits");
    c = open_only(0, -10);
    assert_int_equal(st_rank_clock_map(&c, INT64_MIN + 9, &out), ST_ECORRUPT);
    /* a steep drift overflows far from the limits of t */
    st_rank_clock d = both(0, 0, 1, INT64_MAX);
    assert_int_equal(st_rank_clock_map(&d, 1, &out), ST_ECORRUPT); /* 1 + INT64_MAX */
    assert_int_equal(st_rank_clock_map(&d, 0, &out), ST_OK);
    assert_int_equal(out, 0);
    assert_int_equal(st_rank_clock_map(&d, -1, &out), ST_OK); /* -1 - INT64_MAX = INT64_MIN */
    assert_int_equal(out, INT64_MIN);
}

/* ---- meta checks at open ---- */

static char dir[4200];

static int open_with(const char *const *kv, int n, st_rank_clock *clock)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/m.sqlite", dir);
    tg_trace *g = tg_create("gen");
    tg_stage(g, "work", "work");
    uint32_t t = tg_thread(g, "w", "w");
    tg_range(g, t, 0, 1000, 2000);
    for (int i = 0; i < n; i++) tg_meta(g, kv[2 * i], kv[2 * i + 1]);
    tg_write(g, path);
    tg_free(g);
    st_reader *r = NULL;
    int rc = st_reader_open(&r, path);
    if (rc == ST_OK && clock) st_reader_rank_clock(r, clock);
    st_reader_close(r);
    return rc;
}

static void expect_refused(const char *const *kv, int n, const char *message)
{
    assert_int_equal(open_with(kv, n, NULL), ST_ECORRUPT);
    assert_string_equal(st_last_error(), message);
}

static void test_meta_checks(void **state)
{
    (void)state;
    st_rank_clock c;
    const char *good[] = {"run_id", "job.42_a-B", "clock_sync_ns", "1000", "clock_offset_ns", "-250",
                          "clock_uncertainty_ns", "3", "clock_sync_close_ns", "9000", "clock_offset_close_ns",
                          "-170", "clock_uncertainty_close_ns", "4", "clock_drift_ppb", "10000000",
                          "local_rank", "1", "device", "-1"};
    assert_int_equal(open_with(good, 10, &c), ST_OK);
    assert_true(c.has_open && c.has_close);
    assert_int_equal(c.sync_ns, 1000);
    assert_int_equal(c.offset_ns, -250);
    assert_int_equal(c.offset_close_ns, -170);
    assert_int_equal(c.uncertainty_close_ns, 4);
    int64_t out;
    assert_int_equal(st_rank_clock_map(&c, 5000, &out), ST_OK);
    assert_int_equal(out, 5000 - 250 + 40);
    /* no clock keys: the identity */
    assert_int_equal(open_with(NULL, 0, &c), ST_OK);
    assert_false(c.has_open);

    const char *long_id[] = {"run_id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}; /* 65 */
    expect_refused(long_id, 1,
                   "trace table 'meta': key 'run_id' is 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...', not 1 to 64 bytes of "
                   "[A-Za-z0-9._-]");
    const char *id64[] = {"run_id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    assert_int_equal(open_with(id64, 1, NULL), ST_OK);
    const char *empty_id[] = {"run_id", ""};
    expect_refused(empty_id, 1, "trace table 'meta': key 'run_id' is '', not 1 to 64 bytes of [A-Za-z0-9._-]");
    const char *slash_id[] = {"run_id", "../x"};
    expect_refused(slash_id, 1, "trace table 'meta': key 'run_id' is '../x', not 1 to 64 bytes of [A-Za-z0-9._-]");
    const char *nl_id[] = {"run_id", "a\nb"};
    expect_refused(nl_id, 1, "trace table 'meta': key 'run_id' is 'a?b', not 1 to 64 bytes of [A-Za-z0-9._-]");

    const char *text[] = {"clock_offset_ns", "12ms"};
    expect_refused(text, 1, "trace table 'meta': row 19 (key 'clock_offset_ns'): value '12ms' is not an integer");
    const char *huge[] = {"clock_sync_ns", "9223372036854775808", "clock_offset_ns", "0", "clock_uncertainty_ns",
                          "0"};
    expect_refused(huge, 3, "trace table 'meta': key 'clock_sync_ns' is '9223372036854775808', past 64 bits");
    const char *dev[] = {"device", "-99999999999999999999"};
    expect_refused(dev, 1, "trace table 'meta': key 'device' is '-99999999999999999999', past 64 bits");
    const char *partial[] = {"clock_sync_ns", "1", "clock_offset_ns", "2"};
    expect_refused(partial, 2,
                   "trace table 'meta': keys 'clock_sync_ns', 'clock_offset_ns' and 'clock_uncertainty_ns' go "
                   "together (two of them present)");
    const char *neg[] = {"clock_sync_ns", "1", "clock_offset_ns", "2", "clock_uncertainty_ns", "-1"};
    expect_refused(neg, 3, "trace table 'meta': key 'clock_uncertainty_ns' is -1, a negative uncertainty");
    const char *close_only[] = {"clock_sync_close_ns", "1", "clock_offset_close_ns", "2",
                                "clock_uncertainty_close_ns", "1"};
    expect_refused(close_only, 3,
                   "trace table 'meta': the close measurement 'clock_offset_close_ns' without the open one "
                   "'clock_offset_ns'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_values),
        cmocka_unit_test(test_map_overflow),
        cmocka_unit_test(test_meta_checks),
    };
    if (make_tmp_dir("test_rank_clock")) return 1;
    snprintf(dir, sizeof dir, "%s", tmp_dir);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
