/* test_ranks.c: tests of tracer/ranks.c, the library's part of a
 * multi-process run, through the public interface:
 *
 *  - st_rank_path: every naming rule of docs/tracer.md "Many processes",
 *    its refusals, and st_open writing to the rank's file;
 *  - st_clock_estimate: the probe with the smallest round trip wins, the
 *    offset and uncertainty are exact, unusable probes are skipped;
 *  - st_clock_sync_record: the open and close measurements and the drift
 *    reach meta with the documented keys and values;
 *  - st_clock_sync_widen: the uncertainty gains both ends' |map error| +
 *    half bracket, exactly, saturating at INT64_MAX; st_clock_map_record's
 *    keys in meta;
 *  - run_id, local_rank and device in meta, and their refusals;
 *  - ST_TEST_CLOCK_SHIFT_NS moves the rank's clock (start_ns, every range)
 *    by the given amount, leaves other ranks alone, and is refused when
 *    malformed.
 *
 * Files go to a fresh directory under $ST_TEST_TMP (else under /tmp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "st_reader.h"
#include "st_testing.h"
#include "stagetrace.h"

static void expect_path(const char *path, int rank, int world, const char *want)
{
    char buf[PATH_MAX];
    int rc = st_rank_path(path, rank, world, buf, sizeof buf);
    if (rc != ST_OK) fail_msg("st_rank_path('%s', %d, %d) failed: %s", path, rank, world, st_last_error());
    if (strcmp(buf, want)) fail_msg("st_rank_path('%s', %d, %d) = '%s', want '%s'", path, rank, world, buf, want);
}

static void test_rank_path_rules(void **state)
{
    (void)state;
    expect_path("run.sqlite", 0, 1, "run.sqlite");
    expect_path("run", 0, 1, "run");
    expect_path("run.sqlite", 3, 4, "run.rank3.sqlite");
    expect_path("a/b/run.sqlite", 0, 2, "a/b/run.rank0.sqlite");
    expect_path("run.db", 1, 2, "run.db.rank1.sqlite");
    expect_path("run", 1, 2, "run.rank1.sqlite");
    expect_path(".sqlite", 1, 2, ".sqlite.rank1.sqlite"); /* no stem: appended */
    expect_path("runs/", 7, 8, "runs/rank7.sqlite");
    char dir[PATH_MAX], want[PATH_MAX + 32];
    tmp_path(dir, sizeof dir, "rankdir");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(want, sizeof want, "%s/rank5.sqlite", dir);
    expect_path(dir, 5, 6, want);

    char buf[32];
    assert_int_equal(st_rank_path("run.sqlite", 2, 2, buf, sizeof buf), ST_EINVAL);
    assert_int_equal(st_rank_path("run.sqlite", -1, 2, buf, sizeof buf), ST_EINVAL);
    assert_int_equal(st_rank_path("run.sqlite", 0, 0, buf, sizeof buf), ST_EINVAL);
    assert_int_equal(st_rank_path("", 0, 2, buf, sizeof buf), ST_EINVAL);
    assert_int_equal(st_rank_path(NULL, 0, 2, buf, sizeof buf), ST_EINVAL);
    /* "r.rank10.sqlite" is 15 bytes: 16 fit, 15 do not */
    assert_int_equal(st_rank_path("r.sqlite", 10, 11, buf, 16), ST_OK);
    assert_string_equal(buf, "r.rank10.sqlite");
    assert_int_equal(st_rank_path("r.sqlite", 10, 11, buf, 15), ST_EINVAL);
    assert_non_null(strstr(st_last_error(), "too long"));
}

static void test_open_writes_rank_file(void **state)
{
    (void)state;
    char path[PATH_MAX], want[PATH_MAX + 32];
    tmp_path(path, sizeof path, "multi.sqlite");
    snprintf(want, sizeof want, "%.*s.rank2.sqlite", (int)(strlen(path) - 7), path);
    st_options o;
    test_options(&o, path);
    o.rank = 2;
    o.world_size = 3;
    o.local_rank = 1;
    o.device = 4;
    o.run_id = "job-42.a_b";
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    assert_string_equal(st_path(t), want);
    assert_int_equal(st_close(t), ST_OK);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0); /* the given name itself is not written */
    st_reader *r = open_reader(want);
    assert_meta(r, "run_id", "job-42.a_b");
    assert_meta(r, "rank", "2");
    assert_meta(r, "world_size", "3");
    assert_meta(r, "local_rank", "1");
    assert_meta(r, "device", "4");
    assert_meta(r, "clock_offset_ns", NULL); /* nothing measured */
    st_reader_close(r);

    /* defaults: local rank 0, no device, a run id of its own */
    tmp_path(path, sizeof path, "single.sqlite");
    test_options(&o, path);
    assert_int_equal(st_open(&t, &o), ST_OK);
    assert_string_equal(st_path(t), path);
    assert_int_equal(st_close(t), ST_OK);
    r = open_reader(path);
    assert_meta(r, "local_rank", "0");
    assert_meta(r, "device", "-1");
    char own[64];
    snprintf(own, sizeof own, "-%ld", (long)getpid());
    const char *id = st_reader_meta(r, "run_id");
    assert_non_null(id);
    assert_true(strlen(id) > strlen(own));
    assert_string_equal(id + strlen(id) - strlen(own), own);
    st_reader_close(r);
}

static void test_open_refuses_bad_identity(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bad-id.sqlite");
    const char *bad_ids[] = {"", "has space", "slash/no", "quote'", "\xc3\xa9",
                             "12345678901234567890123456789012345678901234567890123456789012345"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        st_options o;
        test_options(&o, path);
        o.run_id = bad_ids[i];
        st_trace *t = NULL;
        if (st_open(&t, &o) != ST_EINVAL) fail_msg("run id '%s' was accepted", bad_ids[i]);
        assert_null(t);
        assert_non_null(strstr(st_last_error(), "run id"));
        assert_null(strchr(st_last_error(), '\n'));
    }
    st_options o;
    test_options(&o, path);
    o.run_id = "1234567890123456789012345678901234567890123456789012345678901234"; /* 64: fine */
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    assert_int_equal(st_close(t), ST_OK);
    remove_trace_files(path);
    test_options(&o, path);
    o.local_rank = -1;
    assert_int_equal(st_open(&t, &o), ST_EINVAL);
    assert_non_null(strstr(st_last_error(), "local rank -1"));
    test_options(&o, path);
    o.device = -2;
    assert_int_equal(st_open(&t, &o), ST_EINVAL);
    assert_non_null(strstr(st_last_error(), "device -2"));
    test_options(&o, path);
    o.rank = 0;
    o.world_size = 2;
    o.path = "/nonexistent-dir-for-ranks/";
    assert_int_not_equal(st_open(&t, &o), ST_OK);
}

static void test_clock_estimate(void **state)
{
    (void)state;
    st_clock_sync s;
    /* round trips 100, 40, 41, 40: the first 40 wins */
    st_clock_probe p[] = {
        {1000, 5000, 1100},
        {2000, 7030, 2040}, /* midpoint 2020: offset 5010 */
        {3000, 9000, 3041},
        {4000, 1, 4040},
    };
    assert_int_equal(st_clock_estimate(p, 4, &s), ST_OK);
    assert_int_equal(s.local_ns, 2020);
    assert_int_equal(s.offset_ns, 5010);
    assert_int_equal(s.uncertainty_ns, 20);
    /* an odd round trip rounds the uncertainty up and the midpoint down */
    st_clock_probe odd[] = {{-10, -100, -5}};
    assert_int_equal(st_clock_estimate(odd, 1, &s), ST_OK);
    assert_int_equal(s.local_ns, -8);
    assert_int_equal(s.offset_ns, -92);
    assert_int_equal(s.uncertainty_ns, 3);
    /* probes that came back before they left are skipped */
    st_clock_probe skip[] = {{100, 0, 50}, {100, 700, 120}};
    assert_int_equal(st_clock_estimate(skip, 2, &s), ST_OK);
    assert_int_equal(s.offset_ns, 590);
    assert_int_equal(st_clock_estimate(skip, 1, &s), ST_EINVAL);
    assert_int_equal(st_clock_estimate(p, 0, &s), ST_EINVAL);
    assert_int_equal(st_clock_estimate(NULL, 1, &s), ST_EINVAL);
    /* a round trip wider than 64 bits is unusable */
    st_clock_probe wide[] = {{INT64_MIN, 0, INT64_MAX}};
    assert_int_equal(st_clock_estimate(wide, 1, &s), ST_EINVAL);
    /* an offset wider than 64 bits is refused */
    st_clock_probe far[] = {{INT64_MAX - 10, INT64_MIN, INT64_MAX - 10}};
    assert_int_equal(st_clock_estimate(far, 1, &s), ST_EINVAL);
}

/* The widened uncertainty: the round trip's half plus |error| + half
 * bracket of each end, exactly, saturating; its refusals. */
static void test_clock_sync_widen(void **state)
{
    (void)state;
    st_clock_sync s = {100, -3000000496LL, 396};
    st_clock_map own = {-5, 17}, rank0 = {54, 16};
    assert_int_equal(st_clock_sync_widen(&s, &own, &rank0), ST_OK);
    assert_int_equal(s.uncertainty_ns, 396 + 5 + 17 + 54 + 16);
    assert_int_equal(s.local_ns, 100);            /* the measurement itself stays */
    assert_int_equal(s.offset_ns, -3000000496LL);
    /* |INT64_MIN| and a sum past 64 bits saturate */
    st_clock_map far = {INT64_MIN, 0}, zero = {0, 0};
    s.uncertainty_ns = 0;
    assert_int_equal(st_clock_sync_widen(&s, &far, &zero), ST_OK);
    assert_int_equal(s.uncertainty_ns, INT64_MAX);
    st_clock_map wide = {INT64_MAX, INT64_MAX};
    s.uncertainty_ns = 1;
    assert_int_equal(st_clock_sync_widen(&s, &zero, &wide), ST_OK);
    assert_int_equal(s.uncertainty_ns, INT64_MAX);
    /* refusals leave it alone */
    s.uncertainty_ns = 7;
    st_clock_map bad = {0, -1};
    assert_int_equal(st_clock_sync_widen(&s, &bad, &zero), ST_EINVAL);
    assert_non_null(strstr(st_last_error(), "negative half bracket -1"));
    assert_int_equal(st_clock_sync_widen(&s, &zero, &bad), ST_EINVAL);
    assert_int_equal(st_clock_sync_widen(&s, NULL, &zero), ST_EINVAL);
    assert_int_equal(st_clock_sync_widen(NULL, &zero, &zero), ST_EINVAL);
    assert_int_equal(s.uncertainty_ns, 7);
    s.uncertainty_ns = -1;
    assert_int_equal(st_clock_sync_widen(&s, &zero, &zero), ST_EINVAL);
    assert_int_equal(st_clock_map_measure(NULL), ST_EINVAL);
}

/* st_clock_map_record: the two pairs of meta keys, each written once. */
static void test_clock_map_meta(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "map.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    st_clock_map at_open = {-2113, 16}, at_close = {INT64_MIN, 0}, negative = {0, -1};
    assert_int_equal(st_clock_map_record(t, 2, &at_open), ST_EINVAL);
    assert_int_equal(st_clock_map_record(t, ST_CLOCK_AT_OPEN, NULL), ST_EINVAL);
    assert_int_equal(st_clock_map_record(t, ST_CLOCK_AT_OPEN, &negative), ST_EINVAL);
    assert_int_equal(st_clock_map_record(NULL, ST_CLOCK_AT_OPEN, &at_open), ST_ESTATE);
    assert_int_equal(st_clock_map_record(t, ST_CLOCK_AT_OPEN, &at_open), ST_OK);
    assert_int_equal(st_flush(t), ST_OK);
    st_reader *r = open_reader(path);
    assert_int_equal(meta_ll(r, "clock_map_error_ns"), -2113);
    assert_int_equal(meta_ll(r, "clock_map_half_bracket_ns"), 16);
    assert_meta(r, "clock_map_error_close_ns", NULL);
    assert_meta(r, "clock_map_half_bracket_close_ns", NULL);
    st_reader_close(r);
    assert_int_equal(st_clock_map_record(t, ST_CLOCK_AT_CLOSE, &at_close), ST_OK);
    assert_int_equal(st_close(t), ST_OK);
    r = open_reader(path);
    assert_int_equal(meta_ll(r, "clock_map_error_ns"), -2113);
    assert_int_equal(meta_ll(r, "clock_map_error_close_ns"), INT64_MIN);
    assert_int_equal(meta_ll(r, "clock_map_half_bracket_close_ns"), 0);
    st_reader_close(r);
}

static void test_clock_sync_meta(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "sync.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    st_clock_sync open_sync = {1000000, -5000000000LL, 1234};
    st_clock_sync close_sync = {3000000001LL, -4999999000LL, 999};
    assert_int_equal(st_clock_sync_record(t, 2, &open_sync), ST_EINVAL);
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_OPEN, NULL), ST_EINVAL);
    st_clock_sync negative = {0, 0, -1};
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_OPEN, &negative), ST_EINVAL);
    assert_int_equal(st_clock_sync_record(NULL, ST_CLOCK_AT_OPEN, &open_sync), ST_ESTATE);
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_OPEN, &open_sync), ST_OK);
    assert_int_equal(st_flush(t), ST_OK);
    st_reader *r = open_reader(path); /* mid-run: the open measurement only */
    assert_int_equal(meta_ll(r, "clock_sync_ns"), 1000000);
    assert_int_equal(meta_ll(r, "clock_offset_ns"), -5000000000LL);
    assert_int_equal(meta_ll(r, "clock_uncertainty_ns"), 1234);
    assert_meta(r, "clock_offset_close_ns", NULL);
    assert_meta(r, "clock_drift_ppb", NULL);
    st_reader_close(r);
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_CLOSE, &close_sync), ST_OK);
    assert_int_equal(st_close(t), ST_OK);
    r = open_reader(path);
    assert_int_equal(meta_ll(r, "clock_sync_close_ns"), 3000000001LL);
    assert_int_equal(meta_ll(r, "clock_offset_close_ns"), -4999999000LL);
    assert_int_equal(meta_ll(r, "clock_uncertainty_close_ns"), 999);
    /* 1000 ns over 2 999 000 001 ns: 333.44 ppb, truncated */
    assert_int_equal(meta_ll(r, "clock_drift_ppb"), 333);
    assert_int_equal(meta_ll(r, "clock_offset_ns"), -5000000000LL);
    st_reader_close(r);

    /* a close measurement not after the open one: no drift */
    remove_trace_files(path);
    test_options(&o, path);
    assert_int_equal(st_open(&t, &o), ST_OK);
    st_clock_sync later = {500, 0, 0}, earlier = {400, 10, 0};
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_OPEN, &later), ST_OK);
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_CLOSE, &earlier), ST_OK);
    assert_int_equal(st_close(t), ST_OK);
    r = open_reader(path);
    assert_int_equal(meta_ll(r, "clock_offset_close_ns"), 10);
    assert_meta(r, "clock_drift_ppb", NULL);
    st_reader_close(r);

    /* a disabled trace takes the call and records nothing */
    test_options(&o, NULL);
    o.enabled = 0;
    assert_int_equal(st_open(&t, &o), ST_OK);
    assert_int_equal(st_clock_sync_record(t, ST_CLOCK_AT_OPEN, &later), ST_OK);
    assert_int_equal(st_close(t), ST_OK);
}

/* Records one range under ST_TEST_CLOCK_SHIFT_NS=spec as rank `rank`;
 * returns the trace's start_ns minus CLOCK_MONOTONIC read just before open,
 * and checks that the range lies after start_ns. */
static long long shifted_start(const char *spec, int rank, int clock, const char *name)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, name);
    setenv("ST_TEST_CLOCK_SHIFT_NS", spec, 1);
    st_options o;
    test_options(&o, path);
    o.clock = clock;
    o.rank = rank;
    o.world_size = 1 + rank;
    int64_t before = st_clock_mono_ns();
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    int64_t now = st_now_ns();
    int id = st_stage_register(t, "s", ST_WORK);
    assert_true(id >= 0);
    assert_true(st_thread_register(t, "main", "main", -1, rank) >= 0);
    st_begin((st_stage)id);
    st_end((st_stage)id);
    char file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s", st_path(t));
    assert_int_equal(st_close(t), ST_OK);
    unsetenv("ST_TEST_CLOCK_SHIFT_NS");
    st_reader *r = open_reader(file);
    long long start = meta_ll(r, "start_ns");
    st_event_iter *it;
    assert_int_equal(st_event_iter_open(&it, r, 0), ST_OK);
    st_event ev;
    assert_int_equal(st_event_iter_next(it, &ev), 1);
    assert_true(ev.ts_ns >= start);
    assert_true(ev.ts_ns <= now + 1000000000LL);
    st_event_iter_close(it);
    st_reader_close(r);
    long long d_now = (long long)(now - before);
    long long d_start = start - before;
    assert_true(d_now - d_start < 1000000000LL && d_start - d_now < 1000000000LL);
    return d_start;
}

static void test_clock_shift_for_tests(void **state)
{
    (void)state;
    const long long five_s = 5000000000LL, second = 1000000000LL;
    for (int clock = 0; clock <= 1; clock++) {
        long long d = shifted_start("1:-5000000000", 1, clock, clock ? "shift-m.sqlite" : "shift-t.sqlite");
        if (d > -five_s + second || d < -five_s - second)
            fail_msg("clock %d: start moved by %lld ns, want about -5 s", clock, d);
        d = shifted_start("1:5000000000", 1, clock, clock ? "shiftp-m.sqlite" : "shiftp-t.sqlite");
        if (d < five_s - second || d > five_s + second)
            fail_msg("clock %d: start moved by %lld ns, want about +5 s", clock, d);
        /* another rank's shift leaves this one alone */
        d = shifted_start("3:5000000000", 0, clock, clock ? "other-m.sqlite" : "other-t.sqlite");
        if (d < 0 || d > second) fail_msg("clock %d: rank 0 moved by %lld ns", clock, d);
    }
    /* the shift lasts for its trace only */
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "noshift.sqlite");
    st_options o;
    test_options(&o, path);
    int64_t before = st_clock_mono_ns();
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    int64_t now = st_now_ns();
    assert_int_equal(st_close(t), ST_OK);
    assert_true(now - before >= 0 && now - before < second);

    const char *bad[] = {"5000", "1:", ":5", "x:5", "1:5x", "-1:5", "1:99999999999999999999", "1 :5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("ST_TEST_CLOCK_SHIFT_NS", bad[i], 1);
        remove_trace_files(path);
        test_options(&o, path);
        t = NULL;
        if (st_open(&t, &o) != ST_EINVAL) fail_msg("ST_TEST_CLOCK_SHIFT_NS='%s' was accepted", bad[i]);
        assert_null(t);
        assert_non_null(strstr(st_last_error(), "ST_TEST_CLOCK_SHIFT_NS"));
        struct stat sb;
        assert_int_not_equal(stat(path, &sb), 0);
    }
    unsetenv("ST_TEST_CLOCK_SHIFT_NS");
}

int main(void)
{
    if (make_tmp_dir("test_ranks")) return 1;
    unsetenv("ST_TEST_CLOCK_SHIFT_NS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_path_rules),
        cmocka_unit_test(test_open_writes_rank_file),
        cmocka_unit_test(test_open_refuses_bad_identity),
        cmocka_unit_test(test_clock_estimate),
        cmocka_unit_test(test_clock_sync_meta),
        cmocka_unit_test(test_clock_sync_widen),
        cmocka_unit_test(test_clock_map_meta),
        cmocka_unit_test(test_clock_shift_for_tests),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
