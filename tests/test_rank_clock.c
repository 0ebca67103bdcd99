/* test_rank_clock.c: ranks on one clock (docs/trace-format.md, "Ranks on
 * one clock"): st_rank_clock_map's exact values (offset alone, negative
 * offsets, drift between two measurements and extended beyond them,
 * truncation toward zero, sync_close <= sync, 64-bit overflow refused), and
 * the reader's checks of the multi-process meta keys (run_id, the clock
 * keys' and clock map keys' types, ranges and groups), with their
 * messages. */
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

/* Hostile measurements at the limits of int64 (INT64_MIN, INT64_MAX, equal
 * sync points, zero spans): every result exact or refused, never undefined
 * behaviour (the sanitizer build aborts on any). The drift term's factors
 * reach 2^64 - 1 each, so their product passes a signed 128-bit integer.
 * Expected values by hand: through (MIN, MIN) and (MAX, MAX) the map is
 * 2t; through (MIN, 0) and (MAX, +-1) it moves t by (t - MIN) / (2^64 - 1),
 * 0 below MAX and 1 at it. */
static void test_map_hostile(void **state)
{
    (void)state;
    int64_t out = 77;
    st_rank_clock twice = both(INT64_MIN, INT64_MIN, INT64_MAX, INT64_MAX);
    assert_int_equal(map(&twice, 0), 0);
    assert_int_equal(map(&twice, 1), 2);
    assert_int_equal(map(&twice, -7), -14);
    assert_int_equal(map(&twice, INT64_MAX / 2), INT64_MAX - 1);
    assert_int_equal(map(&twice, INT64_MIN / 2), INT64_MIN);
    assert_int_equal(st_rank_clock_map(&twice, INT64_MAX / 2 + 1, &out), ST_ECORRUPT);
    assert_int_equal(st_rank_clock_map(&twice, INT64_MAX, &out), ST_ECORRUPT);
    assert_int_equal(st_rank_clock_map(&twice, INT64_MIN, &out), ST_ECORRUPT);
    assert_int_equal(st_rank_clock_map(&twice, INT64_MIN / 2 - 1, &out), ST_ECORRUPT);
    assert_int_equal(out, 77); /* left alone */
    st_rank_clock creep = both(INT64_MIN, 0, INT64_MAX, 1);
    assert_int_equal(map(&creep, INT64_MIN), INT64_MIN);
    assert_int_equal(map(&creep, INT64_MAX - 1), INT64_MAX - 1);
    assert_int_equal(st_rank_clock_map(&creep, INT64_MAX, &out), ST_ECORRUPT); /* INT64_MAX + 1 */
    st_rank_clock back = both(INT64_MIN, 0, INT64_MAX, -1);
    assert_int_equal(map(&back, INT64_MAX), INT64_MAX - 1);
    assert_int_equal(map(&back, INT64_MIN), INT64_MIN);
    assert_int_equal(map(&back, 0), 0); /* -(2^63 / (2^64 - 1)) truncates to 0 */
    /* the largest product: |t - sync| and the offsets' distance both 2^64 - 2 or more */
    st_rank_clock steep = both(INT64_MAX - 1, INT64_MIN, INT64_MAX, INT64_MAX);
    assert_int_equal(map(&steep, INT64_MAX - 1), INT64_MIN + INT64_MAX - 1); /* at the open measurement */
    assert_int_equal(st_rank_clock_map(&steep, INT64_MIN, &out), ST_ECORRUPT);
    assert_int_equal(st_rank_clock_map(&steep, INT64_MAX, &out), ST_ECORRUPT);
    assert_int_equal(st_rank_clock_map(&steep, 0, &out), ST_ECORRUPT);
    st_rank_clock steep_down = both(INT64_MAX - 1, INT64_MAX, INT64_MAX, INT64_MIN);
    assert_int_equal(st_rank_clock_map(&steep_down, INT64_MIN, &out), ST_ECORRUPT);
    assert_int_equal(map(&steep_down, INT64_MAX), -1); /* MAX + MAX - (2^64 - 1) */
    /* equal sync points and a close before the open: the open offset alone */
    st_rank_clock equal = both(5, 10, 5, INT64_MAX);
    assert_int_equal(map(&equal, INT64_MIN), INT64_MIN + 10);
    assert_int_equal(map(&equal, 100), 110);
    st_rank_clock before = both(INT64_MAX, INT64_MIN, INT64_MIN, INT64_MAX);
    assert_int_equal(map(&before, INT64_MAX), -1);
    assert_int_equal(st_rank_clock_map(&before, INT64_MIN, &out), ST_ECORRUPT);
    /* offsets at the limits without drift */
    st_rank_clock low = open_only(INT64_MIN, INT64_MIN);
    assert_int_equal(map(&low, INT64_MAX), -1);
    assert_int_equal(st_rank_clock_map(&low, -1, &out), ST_ECORRUPT);
    st_rank_clock flat = both(INT64_MIN, INT64_MAX, INT64_MAX, INT64_MAX); /* no drift over the widest span */
    assert_int_equal(map(&flat, INT64_MIN), -1);
    assert_int_equal(st_rank_clock_map(&flat, 1, &out), ST_ECORRUPT);
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

    /* the clock map errors: optional (older traces lack them), each pair whole, half brackets >= 0 */
    const char *map[] = {"clock_map_error_ns", "-2113", "clock_map_half_bracket_ns", "16",
                         "clock_map_error_close_ns", "9223372036854775807", "clock_map_half_bracket_close_ns", "0"};
    assert_int_equal(open_with(map, 4, NULL), ST_OK);
    const char *map_text[] = {"clock_map_error_ns", "1e3", "clock_map_half_bracket_ns", "16"};
    expect_refused(map_text, 2,
                   "trace table 'meta': row 19 (key 'clock_map_error_ns'): value '1e3' is not an integer");
    const char *map_huge[] = {"clock_map_error_close_ns", "-9223372036854775809", "clock_map_half_bracket_close_ns",
                              "1"};
    expect_refused(map_huge, 2,
                   "trace table 'meta': key 'clock_map_error_close_ns' is '-9223372036854775809', past 64 bits");
    const char *map_alone[] = {"clock_map_error_ns", "5"};
    expect_refused(map_alone, 1,
                   "trace table 'meta': keys 'clock_map_error_ns' and 'clock_map_half_bracket_ns' go together "
                   "(only 'clock_map_error_ns' present)");
    const char *half_alone[] = {"clock_map_half_bracket_close_ns", "5"};
    expect_refused(half_alone, 1,
                   "trace table 'meta': keys 'clock_map_error_close_ns' and 'clock_map_half_bracket_close_ns' go "
                   "together (only 'clock_map_half_bracket_close_ns' present)");
    const char *half_neg[] = {"clock_map_error_ns", "0", "clock_map_half_bracket_ns", "-1"};
    expect_refused(half_neg, 2,
                   "trace table 'meta': key 'clock_map_half_bracket_ns' is -1, a negative half bracket");
}

/* ---- rank sets: order, one run, hostile clocks (st_reader_open_set) ---- */

/* A rank's trace at DIR/set<rank>.sqlite: run_id id, one thread "w" with a
 * range [1000, 2000) and a step mark, and the clock keys kv. */
static st_reader *rank_trace(int rank, const char *id, const char *const *kv, int n)
{
    char path[4300], value[32];
    snprintf(path, sizeof path, "%s/set%d.sqlite", dir, rank);
    tg_trace *g = tg_create("gen");
    tg_stage(g, "work", "work");
    uint32_t t = tg_thread(g, "w", "w");
    tg_range(g, t, 0, 1000 + rank, 2000);
    tg_step(g, 0, 3000 + rank, 0);
    if (id) tg_meta(g, "run_id", id);
    else tg_meta_unset(g, "run_id");
    snprintf(value, sizeof value, "%d", rank);
    tg_meta(g, "rank", value);
    tg_meta(g, "world_size", "4");
    for (int i = 0; i < n; i++) tg_meta(g, kv[2 * i], kv[2 * i + 1]);
    tg_write(g, path);
    tg_free(g);
    st_reader *r = NULL;
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    return r;
}

/* Given in any order, a set's parts are in rank order: part 0 the lowest
 * rank (its step marks the set's), threads ranks ascending. */
static void test_set_order(void **state)
{
    (void)state;
    static const int orders[][3] = {{0, 1, 3}, {3, 1, 0}, {1, 3, 0}};
    for (size_t o = 0; o < 3; o++) {
        st_reader *in[3];
        for (int i = 0; i < 3; i++) in[i] = rank_trace(orders[o][i], "run-1", NULL, 0);
        st_reader *set = NULL;
        assert_int_equal(st_reader_open_set(&set, in, orders[o], 3), ST_OK);
        assert_int_equal(st_reader_n_parts(set), 3);
        for (uint32_t p = 0; p < 3; p++)
            assert_string_equal(st_reader_meta(st_reader_part(set, p), "rank"), p == 0 ? "0" : p == 1 ? "1" : "3");
        assert_string_equal(st_reader_thread(set, 0)->name, "r0/w");
        assert_string_equal(st_reader_thread(set, 2)->name, "r3/w");
        assert_int_equal(st_reader_n_steps(set), 1);
        assert_int_equal(st_reader_step(set, 0)->ts_ns, 3000); /* rank 0's mark */
        st_reader_close(set);
    }
}

static void expect_set_refused(st_reader **in, const int *ranks, uint32_t n, int code, const char *message)
{
    st_reader *set = (st_reader *)1;
    assert_int_equal(st_reader_open_set(&set, in, ranks, n), code);
    assert_null(set);
    assert_string_equal(st_last_error(), message);
}

/* One rule for one run: run_ids equal byte for byte (a common prefix is not
 * one run); each rank once. */
static void test_set_one_run(void **state)
{
    (void)state;
    assert_true(st_run_ids_match("1700000000-5", "1700000000-5"));
    assert_false(st_run_ids_match("1700000000-5", "1700000000-6"));
    assert_false(st_run_ids_match("a", "A"));
    assert_false(st_run_ids_match("a", "a."));
    assert_false(st_run_ids_match(NULL, "a"));
    assert_false(st_run_ids_match("a", NULL));
    assert_false(st_run_ids_match(NULL, NULL));
    int ranks[2] = {1, 0};
    st_reader *in[2] = {rank_trace(1, "1700000000-6", NULL, 0), rank_trace(0, "1700000000-5", NULL, 0)};
    expect_set_refused(in, ranks, 2, ST_EINVAL,
                       "rank 1's run_id '1700000000-6' is not the run_id '1700000000-5' of rank 0: the traces are not "
                       "ranks of one run");
    in[0] = rank_trace(1, NULL, NULL, 0);
    in[1] = rank_trace(0, "x", NULL, 0);
    expect_set_refused(in, ranks, 2, ST_EINVAL, "rank 1's trace has no run_id: it cannot be one rank of a set");
    int twice[2] = {1, 1};
    in[0] = rank_trace(1, "x", NULL, 0);
    in[1] = rank_trace(1, "x", NULL, 0);
    expect_set_refused(in, twice, 2, ST_EINVAL, "rank 1 is given twice (each rank once)");
}

/* A set whose rank carries measurements at the limits: its times map
 * exactly or the set is refused with one line naming the rank; a close
 * measurement that puts rank 0's clock before the open one is refused by
 * name. Never undefined behaviour (the sanitizer build). */
static void test_set_hostile_clock(void **state)
{
    (void)state;
    int ranks[2] = {0, 1};
    static const char *const twice[] = {"clock_sync_ns", "-9223372036854775808", "clock_offset_ns",
                                        "-9223372036854775808", "clock_uncertainty_ns", "0",
                                        "clock_sync_close_ns", "9223372036854775807", "clock_offset_close_ns",
                                        "9223372036854775807", "clock_uncertainty_close_ns", "9223372036854775807"};
    st_reader *in[2] = {rank_trace(0, "x", NULL, 0), rank_trace(1, "x", twice, 6)};
    st_reader *set = NULL;
    assert_int_equal(st_reader_open_set(&set, in, ranks, 2), ST_OK); /* map(t) = 2t */
    st_range_iter *it = NULL;
    assert_int_equal(st_range_iter_open(&it, set, 1, INT64_MIN, INT64_MAX), ST_OK);
    st_range g;
    assert_int_equal(st_range_iter_next(it, &g), 1);
    assert_int_equal(g.start_ns, 2002);
    assert_int_equal(g.dur_ns, 1998);
    st_range_iter_close(it);
    assert_int_equal(st_reader_flow_slack(set, 0, 1), INT64_MAX);
    st_reader_close(set);
    static const char *const steep[] = {"clock_sync_ns", "9223372036854775806", "clock_offset_ns",
                                        "-9223372036854775808", "clock_uncertainty_ns", "0",
                                        "clock_sync_close_ns", "9223372036854775807", "clock_offset_close_ns",
                                        "9223372036854775807", "clock_uncertainty_close_ns", "0"};
    in[0] = rank_trace(0, "x", NULL, 0);
    in[1] = rank_trace(1, "x", steep, 6);
    assert_int_equal(st_reader_open_set(&set, in, ranks, 2), ST_OK);
    assert_int_equal(st_range_iter_open(&it, set, 1, INT64_MIN, INT64_MAX), ST_OK);
    assert_int_equal(st_range_iter_next(it, &g), ST_ECORRUPT);
    assert_string_equal(st_last_error(),
                        "rank 1: time 1001 does not map onto rank 0's clock within 0..9223372036854775807 ns");
    st_range_iter_close(it);
    st_reader_close(set);
    static const char *const backwards[] = {"clock_sync_ns", "-9223372036854775808", "clock_offset_ns", "1",
                                            "clock_uncertainty_ns", "0", "clock_sync_close_ns", "0",
                                            "clock_offset_close_ns", "-9223372036854775808",
                                            "clock_uncertainty_close_ns", "0"};
    in[0] = rank_trace(0, "x", NULL, 0);
    in[1] = rank_trace(1, "x", backwards, 6);
    expect_set_refused(in, ranks, 2, ST_ECORRUPT,
                       "rank 1: meta 'clock_sync_close_ns' + 'clock_offset_close_ns' is before 'clock_sync_ns' + "
                       "'clock_offset_ns' (rank 0's clock would run backwards): its times cannot be mapped onto rank "
                       "0's clock");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_values),
        cmocka_unit_test(test_map_overflow),
        cmocka_unit_test(test_map_hostile),
        cmocka_unit_test(test_set_order),
        cmocka_unit_test(test_set_one_run),
        cmocka_unit_test(test_set_hostile_clock),
        cmocka_unit_test(test_meta_checks),
    };
    if (make_tmp_dir("test_rank_clock")) return 1;
    snprintf(dir, sizeof dir, "%s", tmp_dir);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
