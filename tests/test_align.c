/* test_align.c: a rank set put on one clock from its collectives (align.c;
 * docs/analyze.md, "Clock alignment").
 *
 * The fit (an_align_fit) on lines of known offset and slope:
 *   - 200 points, x = 1 s + k * 10 ms, y = -7 s + 30e-6 (x - 1 s) plus a
 *     noise e_k in -500..500 ns (e_k = ((k * 7919) mod 1001) - 500), and 40
 *     of them (k mod 5 = 2) 50 us late on top: Theil-Sen recovers the slope
 *     within 1e-8 (the noise over the 2 s span moves a pairwise slope by up
 *     to 1e-3 / 2 = 5e-7, the median far less) and the offset within the
 *     noise (500 ns); every late point and no other is left out (its
 *     residual, near 50 us, is far past 3 x 1.4826 x the median |residual|,
 *     about 1.1 us, which every noisy point is within); the uncertainty is
 *     the largest kept residual, so at most 500 ns plus the fit's own error
 *     (the late fifth pulls the median offset up by about 125 ns) and at
 *     least 480 ns (e_k reaches both -500 and 500);
 *   - an exact line: uncertainty 0 or 1 (rounding), every point kept;
 *   - one x for every point: slope 0, the offset the median y;
 *   - 5000 points (past AN_ALIGN_SLOPE_POINTS, the slopes from 512 of them
 *     spread evenly): the same recovery.
 * The set (an_align_set through an_trace_open_inputs) on tracegen's rank
 * set of 4 ranks (targets 0 and 1 with no comm range, drafters 2 and 3)
 * without clock keys, rank 3's clock 7 s ahead and 50 ppm fast
 * (write_rank_set: no_clock, shift, drift, jitter): rank 3's fitted offset
 * at both ends of the fit is the generator's (off - P k d for step k,
 * exactly, without jitter) within the ends' spread (the jitter), and so
 * within the stated uncertainty, which is the barrier bounds' 5 ms here
 * (rank 3 last every time: nothing bounds its offset from below closer
 * than rank 2's 5 ms inside each allreduce); rank 2 is
 * the reference, ranks 0 and 1 keep their clocks; stragglers' answer with
 * the fitted clock is the one with the generator's own clock keys (rank 3
 * slowed). Refusals: 5 steps (5 instances < 8); one rank with and the
 * others without meta keys (auto fits all, meta is refused); comm ranges
 * that are no barriers (test_set_not_barriers says how). Ends noisy enough
 * to fit a slope of -1 % (test_set_steep_ends says how): the slope used is
 * within 1000 ppm, the fit is not refused, and the true offset (0) is
 * within the stated uncertainty at both ends.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "../analyze/align.h"
#include "../analyze/analyze.h"
#include "../analyze/stragglers.h"
#include "common.h"
#include "traces.h"

#define SEC 1000000000LL

static void line_points(size_t n, int64_t *x, int64_t *y, int late)
{
    for (size_t k = 0; k < n; k++) {
        x[k] = SEC + (int64_t)k * 10000000;
        int64_t noise = (int64_t)((k * 7919) % 1001) - 500;
        y[k] = -7 * SEC + llround(30e-6 * (double)(x[k] - SEC)) + noise;
        if (late && k % 5 == 2) y[k] += 50000;
    }
}

static void test_fit_outliers(void **state)
{
    (void)state;
    enum { n = 200 };
    int64_t x[n], y[n];
    unsigned char keep[n];
    line_points(n, x, y, 1);
    an_align_line l;
    assert_int_equal(an_align_fit(x, y, n, &l, keep), 0);
    assert_int_equal(l.x0_ns, SEC);
    assert_true(fabs(l.slope - 30e-6) < 1e-8);
    assert_true(fabs(l.offset_ns - (double)(-7 * SEC)) <= 500);
    assert_int_equal(l.kept, n - n / 5);
    for (size_t k = 0; k < n; k++) assert_int_equal(keep[k], k % 5 != 2);
    /* the late points pull the median offset up (here about 125 ns): the noise's extremes, seen
     * from the fitted line, are at most 500 ns plus that error away */
    double err = fabs(l.offset_ns - (double)(-7 * SEC));
    assert_true(l.uncertainty_ns >= 480 && (double)l.uncertainty_ns <= 500 + err + 1);
}

static void test_fit_exact(void **state)
{
    (void)state;
    enum { n = 50 };
    int64_t x[n], y[n];
    for (size_t k = 0; k < n; k++) {
        x[k] = 3 * SEC + (int64_t)k * 1000000;
        y[k] = 123456789 - (int64_t)k * 20; /* -20 ns per ms: -2e-5 */
    }
    an_align_line l;
    assert_int_equal(an_align_fit(x, y, n, &l, NULL), 0);
    assert_true(fabs(l.slope + 2e-5) < 1e-12);
    assert_true(fabs(l.offset_ns - 123456789) < 1e-3);
    assert_true(l.uncertainty_ns <= 1);
    assert_int_equal(l.kept, n);
}

static void test_fit_one_x(void **state)
{
    (void)state;
    int64_t x[5] = {7, 7, 7, 7, 7}, y[5] = {10, 40, 20, 1000000, 30};
    an_align_line l;
    assert_int_equal(an_align_fit(x, y, 5, &l, NULL), 0);
    assert_true(l.slope == 0.0);
    assert_true(l.offset_ns == 30.0);
}

static void test_fit_many(void **state)
{
    (void)state;
    enum { n = 5000 };
    int64_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    line_points(n, x, y, 1);
    an_align_line l;
    assert_int_equal(an_align_fit(x, y, n, &l, NULL), 0);
    assert_true(fabs(l.slope - 30e-6) < 1e-8);
    assert_true(fabs(l.offset_ns - (double)(-7 * SEC)) <= 500);
    assert_int_equal(l.kept, n - n / 5);
    free(x);
    free(y);
}

/* ---- the set ---------------------------------------------------------------------------------- */

#define P 10000000LL     /* the generator's step */
#define OFF (-7 * SEC)   /* rank 3: clock_offset (rank 0's minus its own) */
#define PPB 50000        /* rank 3's drift */

static void gen(const char *name, int steps, int no_clock, int slow, char *dir, size_t size)
{
    snprintf(dir, size, "%s/%s", tmp_dir, name);
    mkdir(dir, 0777);
    rank_set_opts o = {4, 0, steps, slow, 3, -1, -1, 0, 0, 0, NULL, 0, 0, no_clock, 3, PPB, 20000};
    o.shift_ns = OFF;
    write_rank_set(dir, &o);
}

/* The generator's offset of rank 3 at its own time x, the end of a step's allreduce: off - P k d
 * for the step k whose allreduce ends near x (x = t0 - off + P k (1 + d) + 9.5 ms + jitter). */
static double want_offset(int64_t x)
{
    double k = round(((double)(x - (BASE_NS - OFF)) - 9.5e6) / ((double)P * (1 + PPB * 1e-9)));
    return (double)OFF - (double)P * k * PPB * 1e-9;
}

static void test_set_fitted(void **state)
{
    (void)state;
    char dir[PATH_MAX + 32];
    gen("fit", 40, 1, 3, dir, sizeof dir);
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_COLLECTIVES);
    assert_int_equal(t.align[0].method, AN_CLOCK_NONE);
    assert_int_equal(t.align[1].method, AN_CLOCK_NONE);
    assert_int_equal(t.align[2].method, AN_CLOCK_REFERENCE);
    assert_int_equal(t.align[3].method, AN_CLOCK_COLLECTIVES);
    assert_int_equal(t.align[3].reference_rank, 2);
    assert_int_equal(t.align[3].instances, 40);
    assert_int_equal(t.align[3].kept, 36); /* the four outliers (steps 5, 15, 25, 35) left out */
    /* the ends' spread: the jitter's (at most 20 us); the uncertainty: the barrier bounds' room,
     * rank 2 entering each allreduce at 4.5 ms of its step and leaving at 9.5 ms + jitter, so the
     * offset could be up to 5 ms lower for all these collectives say (rank 3 is always last) */
    int64_t u = t.align[3].uncertainty_ns, spread = t.align[3].spread_ns;
    assert_true(spread > 0 && spread <= 20000);
    assert_true(u >= 4950000 && u <= 5050000);
    st_rank_clock c;
    assert_int_equal(st_reader_part_clock(t.r, 3, &c), ST_OK);
    assert_true(c.has_open && c.has_close);
    assert_int_equal(c.uncertainty_ns, u);
    print_message("rank 3: offset %lld at %lld (want %.0f), %lld at %lld (want %.0f), within %lld ns\n",
                  (long long)c.offset_ns, (long long)c.sync_ns, want_offset(c.sync_ns), (long long)c.offset_close_ns,
                  (long long)c.sync_close_ns, want_offset(c.sync_close_ns), (long long)u);
    /* the ends are simultaneous here but for the jitter: the fit is within the spread, and so within u */
    assert_true(fabs((double)c.offset_ns - want_offset(c.sync_ns)) <= (double)spread);
    assert_true(fabs((double)c.offset_close_ns - want_offset(c.sync_close_ns)) <= (double)spread);
    /* the drift: 39 steps of 50 ppm, 19.5 us */
    assert_true(llabs((c.offset_close_ns - c.offset_ns) + 19500) <= 2 * spread);
    an_stragglers s;
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_int_equal(s.n_coll, 1);
    assert_int_equal(s.coll[0].last_rank, 3);
    assert_int_equal(s.coll[0].times_last, 40);
    an_stragglers_free(&s);
    an_trace_close(&t);

    /* the same run with its clock keys: the same straggler */
    char dir_meta[PATH_MAX + 32];
    gen("fit_meta", 40, 0, 3, dir_meta, sizeof dir_meta);
    const char *paths_meta[] = {dir_meta};
    assert_int_equal(an_trace_open_inputs(&t, paths_meta, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_META);
    assert_int_equal(t.align[3].method, AN_CLOCK_META);
    assert_int_equal(t.align[3].uncertainty_ns, 2000);
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_int_equal(s.coll[0].last_rank, 3);
    assert_int_equal(s.coll[0].times_last, 40);
    an_stragglers_free(&s);
    an_trace_close(&t);
    /* ... and without any alignment rank 3 is 7 s late at every collective */
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_NONE), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_NONE);
    assert_int_equal(st_reader_part_clock(t.r, 3, &c), ST_OK);
    assert_false(c.has_open);
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_true(s.coll[0].mean_wait_ns > 6 * SEC);
    an_stragglers_free(&s);
    an_trace_close(&t);
}

static void test_set_too_few(void **state)
{
    (void)state;
    char dir[PATH_MAX + 32];
    gen("few", 5, 1, -1, dir, sizeof dir);
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_COLLECTIVES), AN_EXIT_USAGE);
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_META), AN_EXIT_USAGE);
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_NONE);
    for (uint32_t p = 0; p < 4; p++) assert_int_equal(t.align[p].method, AN_CLOCK_NONE);
    an_trace_close(&t);
}

static void test_set_mixed(void **state)
{
    (void)state;
    char dir[PATH_MAX + 32];
    gen("mixed", 40, 0, 3, dir, sizeof dir);
    /* rank 3 loses its clock keys, the others keep theirs */
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/rank3.sqlite", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "DELETE FROM meta WHERE key LIKE 'clock_%'");
    sqlite3_close(db);
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_META), AN_EXIT_USAGE);
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    /* one method for the set: ranks 0-2's measured offsets are not used beside rank 3's fit */
    assert_int_equal(t.align_used, AN_ALIGN_COLLECTIVES);
    assert_int_equal(t.align[0].method, AN_CLOCK_NONE);
    assert_int_equal(t.align[2].method, AN_CLOCK_REFERENCE);
    assert_int_equal(t.align[3].method, AN_CLOCK_COLLECTIVES);
    st_rank_clock c;
    assert_int_equal(st_reader_part_clock(t.r, 2, &c), ST_OK);
    assert_false(c.has_open); /* its meta offset (0) replaced by the reference's identity */
    assert_int_equal(st_reader_part_clock(t.r, 3, &c), ST_OK);
    assert_true(fabs((double)c.offset_ns - want_offset(c.sync_ns)) <= (double)c.uncertainty_ns);
    an_trace_close(&t);
}

/* Two ranks whose comm ranges are no barriers (a rank's range empty: a launch that returns at
 * once): in even steps rank 0's allreduce is the empty one and ends 1 us after rank 1's, in odd
 * steps rank 1's, 1 us after rank 0's (plus k ns, so that the ends' residuals differ). Every
 * point is kept (the residuals, about 1 us, are all within 3 x 1.4826 x their median), and the
 * bounds contradict: an even step says theta >= 1 us, an odd one theta <= -1 us. */
static void test_set_not_barriers(void **state)
{
    (void)state;
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/async", tmp_dir);
    mkdir(dir, 0777);
    for (int rank = 0; rank < 2; rank++) {
        tg_trace *g = tg_create("async");
        tg_meta(g, "run_id", "1700000000-77");
        tg_meta_int(g, "rank", rank);
        tg_meta_int(g, "world_size", 2);
        uint32_t ar = tg_stage(g, "allreduce", "comm");
        uint32_t th = tg_thread(g, "drafter0", "drafter");
        tg_thread_at(g, th)->rank = rank;
        for (int k = 0; k < 20; k++) {
            int64_t s = BASE_NS + (int64_t)k * P, end_full = s + 5000000, end_empty = end_full + 1000 + k;
            int empty = (k % 2) == rank; /* even steps: rank 0's; odd: rank 1's */
            if (empty) tg_range(g, th, ar, end_empty, end_empty);
            else tg_range(g, th, ar, s + 1000000, end_full);
        }
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/rank%d.sqlite", dir, rank);
        tg_write(g, path);
        tg_free(g);
    }
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_COLLECTIVES), AN_EXIT_USAGE);
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_NONE);
    an_trace_close(&t);
}

/* Two ranks on one clock (the true offset 0) whose ends say otherwise: rank 1 is released 2 ms
 * late in the second half of the run (a preempted waiter), so the ends jump by -2 ms and
 * Theil-Sen's slope, a median over pairs most of which cross the jump, is about -1.5 % (20 steps
 * of 10 ms). Each rank is last to enter every other step (rank 0 in even steps at 4 ms of the
 * step, rank 1 in odd ones; the other at 1 ms), so the bounds hold the line near slope 0: an
 * odd step says theta(x) <= 10 us, an even one theta(x) >= -10 us - the release delay. No line
 * within 1000 ppm of the fitted slope is inside them; lines within 1000 ppm of 0 are. */
static void test_set_steep_ends(void **state)
{
    (void)state;
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/steep", tmp_dir);
    mkdir(dir, 0777);
    for (int rank = 0; rank < 2; rank++) {
        tg_trace *g = tg_create("steep");
        tg_meta(g, "run_id", "1700000000-78");
        tg_meta_int(g, "rank", rank);
        tg_meta_int(g, "world_size", 2);
        uint32_t ar = tg_stage(g, "allreduce", "comm");
        uint32_t th = tg_thread(g, "drafter0", "drafter");
        tg_thread_at(g, th)->rank = rank;
        for (int k = 0; k < 20; k++) {
            int64_t s = BASE_NS + (int64_t)k * P;
            int last = (k % 2) == rank;
            int64_t enter = s + (last ? 4000000 : 1000000);
            int64_t leave = s + 4010000 + (rank == 1 && k >= 10 ? 2000000 : 0);
            tg_range(g, th, ar, enter, leave);
        }
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/rank%d.sqlite", dir, rank);
        tg_write(g, path);
        tg_free(g);
    }
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_COLLECTIVES), AN_EXIT_OK);
    assert_int_equal(t.align_used, AN_ALIGN_COLLECTIVES);
    assert_int_equal(t.align[1].method, AN_CLOCK_COLLECTIVES);
    st_rank_clock c;
    assert_int_equal(st_reader_part_clock(t.r, 1, &c), ST_OK);
    assert_true(c.has_open && c.has_close);
    print_message("rank 1: offset %lld at %lld, %lld at %lld, within %lld ns\n", (long long)c.offset_ns,
                  (long long)c.sync_ns, (long long)c.offset_close_ns, (long long)c.sync_close_ns,
                  (long long)c.uncertainty_ns);
    /* the slope used: within 1000 ppm */
    assert_true(fabs((double)(c.offset_close_ns - c.offset_ns)) <= 1e-3 * (double)(c.sync_close_ns - c.sync_ns) + 2);
    /* the truth, 0, within the stated uncertainty at both ends; and that uncertainty no wider than
     * the bounds' 2 ms delay and the slope's 1000 ppm over the 190 ms allow */
    assert_true(llabs(c.offset_ns) <= c.uncertainty_ns && llabs(c.offset_close_ns) <= c.uncertainty_ns);
    assert_true(c.uncertainty_ns <= 2200000);
    an_trace_close(&t);
}

int main(void)
{
    if (make_tmp_dir("test_align")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_outliers), cmocka_unit_test(test_fit_exact),   cmocka_unit_test(test_fit_one_x),
        cmocka_unit_test(test_fit_many),     cmocka_unit_test(test_set_fitted),  cmocka_unit_test(test_set_too_few),
        cmocka_unit_test(test_set_mixed),    cmocka_unit_test(test_set_not_barriers),
        cmocka_unit_test(test_set_steep_ends),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed ? 1 : 0;
}
