/* test_stats.c: the summary statistics (analyze/stats.c) on traces with
 * exactly known contents (tests/traces.c: the statistics set, whose
 * comments work out every number): per thread, role and stage, over the
 * whole trace, windows, filters and the ranks of one run; ranges left open;
 * and an_stats_compute_jobs giving the same numbers for 1, 2 and 7 jobs
 * (the jobs set: several threads per role, more ranges per thread than a
 * group keeps exactly, so two passes) against the sorted truth.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "st_intervals.h"
#include "st_reader.h"
#include "traces.h"

#include "../analyze/analyze.h"

static const an_stage_stats *thread_stage(const an_file_stats *fs, const char *thread, const char *stage)
{
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        if (strcmp(st_reader_thread(fs->trace->r, ti)->name, thread) != 0) continue;
        for (uint32_t s = 0; s < fs->n_stages; s++)
            if (strcmp(st_reader_stage(fs->trace->r, s)->name, stage) == 0)
                return &fs->thread_stage[(size_t)ti * fs->n_stages + s];
    }
    fail_msg("no %s/%s", thread, stage);
    return NULL;
}

static const an_stage_stats *role_stage(const an_file_stats *fs, const char *role, const char *stage)
{
    for (uint32_t r = 0; r < fs->n_roles; r++) {
        if (strcmp(fs->role_names[r], role) != 0) continue;
        for (uint32_t s = 0; s < fs->n_stages; s++)
            if (strcmp(st_reader_stage(fs->trace->r, s)->name, stage) == 0)
                return &fs->role_stage[(size_t)r * fs->n_stages + s];
    }
    fail_msg("no role %s/%s", role, stage);
    return NULL;
}

static void check_stats(const an_stage_stats *x, int64_t total, int64_t self, uint64_t count, int64_t p50,
                        int64_t p95, int64_t p99, int64_t max)
{
    assert_int_equal(x->total_ns, total);
    assert_int_equal(x->self_ns, self);
    assert_int_equal(x->count, count);
    assert_int_equal(x->pct_ns[AN_P50], p50);
    assert_int_equal(x->pct_ns[AN_P95], p95);
    assert_int_equal(x->pct_ns[AN_P99], p99);
    assert_int_equal(x->max_ns, max);
}

static void stats_of(an_trace *t, an_stats *s, const char *steps, const char *time)
{
    an_select sel;
    memset(&sel, 0, sizeof sel);
    if (steps) assert_int_equal(an_window_parse_steps(&sel.window, steps), 0);
    if (time) assert_int_equal(an_window_parse_time(&sel.window, time), 0);
    assert_int_equal(an_stats_compute(s, t, 1, &sel, 0), 0);
}

static void test_stats_whole(void **state)
{
    (void)state;
    an_trace t;
    assert_int_equal(an_trace_open(&t, tmp_file("gen.sqlite")), 0);
    assert_int_equal(t.origin_ns, BASE_NS);
    assert_int_equal(t.span_t0_ns, BASE_NS);
    assert_int_equal(t.span_t1_ns, BASE_NS + 800 * MS);
    an_stats s;
    stats_of(&t, &s, NULL, NULL);
    const an_file_stats *fs = &s.files[0];
    assert_int_equal(fs->wall_ns, 800 * MS);
    check_stats(thread_stage(fs, "main", "log"), 80 * MS, 80 * MS, 8, 10 * MS, 10 * MS, 10 * MS, 10 * MS);
    /* 62.5% of the wall time inclusive, 50% self. */
    check_stats(thread_stage(fs, "loader", "load"), 500 * MS, 400 * MS, 8, 62500 * US, 62500 * US, 62500 * US,
                62500 * US);
    check_stats(thread_stage(fs, "loader", "h2d"), 100 * MS, 100 * MS, 8, 12500 * US, 12500 * US, 12500 * US,
                12500 * US);
    check_stats(thread_stage(fs, "worker0", "compute"), 505 * MS, 505 * MS, 100, 5 * MS, 9500 * US, 9900 * US,
                10 * MS);
    check_stats(thread_stage(fs, "worker1", "allreduce"), 200 * MS, 190 * MS, 1, 200 * MS, 200 * MS, 200 * MS,
                200 * MS);
    check_stats(role_stage(fs, "worker", "compute"), 705 * MS, 705 * MS, 150, 4 * MS, 9300 * US, 9900 * US, 10 * MS);
    assert_int_equal(fs->thread_busy_ns[1], 580 * MS); /* loader: load + queue_put */
    assert_int_equal(fs->thread_busy_ns[3], 400 * MS);
    assert_int_equal(s.passes, 1);
    an_stats_free(&s);
    an_trace_close(&t);
}

static void test_stats_windows(void **state)
{
    (void)state;
    an_trace t;
    assert_int_equal(an_trace_open(&t, tmp_file("gen.sqlite")), 0);
    an_stats s;
    /* Steps 2:4 = [200, 400) ms: allreduce [150, 350] clipped to 150 ms, 10 ms of sync inside. */
    stats_of(&t, &s, "2:4", NULL);
    assert_int_equal(s.files[0].wall_ns, 200 * MS);
    check_stats(thread_stage(&s.files[0], "worker1", "allreduce"), 150 * MS, 140 * MS, 1, 150 * MS, 150 * MS,
                150 * MS, 150 * MS);
    check_stats(thread_stage(&s.files[0], "worker1", "compute"), 0, 0, 0, 0, 0, 0, 0);
    an_stats_free(&s);
    /* --time 0.1:0.175 = [100, 175) ms: allreduce's first 25 ms, one log range. */
    stats_of(&t, &s, NULL, "0.1:0.175");
    assert_int_equal(s.files[0].wall_ns, 75 * MS);
    check_stats(thread_stage(&s.files[0], "worker1", "allreduce"), 25 * MS, 25 * MS, 1, 25 * MS, 25 * MS, 25 * MS,
                25 * MS);
    check_stats(thread_stage(&s.files[0], "main", "log"), 10 * MS, 10 * MS, 1, 10 * MS, 10 * MS, 10 * MS, 10 * MS);
    an_stats_free(&s);
    an_trace_close(&t);
}

static void test_stats_filters_and_passes(void **state)
{
    (void)state;
    an_trace t;
    assert_int_equal(an_trace_open(&t, tmp_file("many.sqlite")), 0);
    an_select sel;
    memset(&sel, 0, sizeof sel);
    an_stats s;
    /* 40000 ranges of (i % 7 + 1) us: more than a group keeps exactly, so a
     * second pass; the answers are exact: ranks 20000, 38000, 39600. */
    assert_int_equal(an_stats_compute(&s, &t, 1, &sel, 0), 0);
    assert_int_equal(s.passes, 2);
    const an_stage_stats *x = thread_stage(&s.files[0], "main", "work");
    assert_int_equal(x->count, 40000);
    assert_int_equal(x->pct_ns[AN_P50], 4 * US);
    assert_int_equal(x->pct_ns[AN_P95], 7 * US);
    assert_int_equal(x->pct_ns[AN_P99], 7 * US);
    an_stats_free(&s);
    an_trace_close(&t);

    assert_int_equal(an_trace_open(&t, tmp_file("gen.sqlite")), 0);
    assert_int_equal(an_filter_add(&sel.filter.threads, &sel.filter.n_threads, "loader,3"), 0);
    assert_int_equal(an_filter_add(&sel.filter.stages, &sel.filter.n_stages, "load"), 0);
    assert_int_equal(an_stats_compute(&s, &t, 1, &sel, 0), 0);
    const an_file_stats *fs = &s.files[0];
    assert_int_equal(fs->thread_on[0] + fs->thread_on[1] * 2 + fs->thread_on[2] * 4 + fs->thread_on[3] * 8, 2 + 8);
    /* The h2d child is filtered out of the rows but still taken off load's self time. */
    check_stats(thread_stage(fs, "loader", "load"), 500 * MS, 400 * MS, 8, 62500 * US, 62500 * US, 62500 * US,
                62500 * US);
    check_stats(thread_stage(fs, "loader", "h2d"), 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(fs->n_ranges, 8);
    an_stats_free(&s);
    an_filter_free(&sel.filter);
    assert_int_equal(an_filter_add(&sel.filter.stages, &sel.filter.n_stages, "nope"), 0);
    assert_int_equal(an_stats_compute(&s, &t, 1, &sel, 0), AN_EXIT_USAGE);
    an_stats_free(&s);
    an_filter_free(&sel.filter);
    an_trace_close(&t);
}

static int32_t name_index(const char *const *names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (int32_t)i;
    return -1;
}

static void test_stats_merged(void **state)
{
    (void)state;
    an_trace t[2];
    assert_int_equal(an_trace_open(&t[0], tmp_file("rank0.sqlite")), 0);
    assert_int_equal(an_trace_open(&t[1], tmp_file("rank1.sqlite")), 0);
    an_select sel;
    memset(&sel, 0, sizeof sel);
    an_stats s;
    assert_int_equal(an_stats_compute(&s, t, 2, &sel, 1), 0);
    assert_true(s.merged_valid);
    const an_merged_stats *m = &s.merged;
    int32_t role = name_index(m->role_names, m->n_roles, "worker"), stage = name_index(m->stage_names, m->n_stages, "compute");
    assert_true(role >= 0 && stage >= 0);
    const an_stage_stats *x = &m->role_stage[(size_t)role * m->n_stages + (uint32_t)stage];
    /* rank 0: 10 x 5 ms, rank 1: 10 x 8 ms */
    check_stats(x, 130 * MS, 130 * MS, 20, 5 * MS, 8 * MS, 8 * MS, 8 * MS);
    assert_int_equal(s.files[1].rank, 1);
    an_stats_free(&s);
    an_trace_close(&t[0]);
    an_trace_close(&t[1]);
}

/* An st_window callback appending the window, as st_window_format writes
 * it, to the text *arg (NULL at first). */
static void on_window_append(const st_window *w, void *arg)
{
    char **text = arg;
    size_t len = st_window_format(w, NULL, 0), old = *text ? strlen(*text) : 0;
    *text = realloc(*text, old + len + 1);
    assert_non_null(*text);
    assert_int_equal(st_window_format(w, *text + old, len + 1), len);
}

/* Per thread, the self times of its stages plus idle are its wall time. */
static void assert_self_plus_idle(const an_file_stats *fs)
{
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        int64_t self = 0;
        for (uint32_t st = 0; st < fs->n_stages; st++) self += fs->thread_stage[(size_t)ti * fs->n_stages + st].self_ns;
        int64_t idle = fs->wall_ns > fs->thread_busy_ns[ti] ? fs->wall_ns - fs->thread_busy_ns[ti] : 0;
        assert_true(fs->thread_busy_ns[ti] <= fs->wall_ns);
        assert_int_equal(self + idle, fs->wall_ns);
    }
}

/* Self time per thread and stage over the windows of st_reader_windows. */
typedef struct window_sums {
    int64_t stage_ns[2][8], idle_ns[2];
    uint32_t n_windows;
} window_sums;

static void on_window_sum(const st_window *w, void *arg)
{
    window_sums *ws = arg;
    ws->n_windows++;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *th = &w->threads[i];
        int64_t sum = th->idle_ns;
        ws->idle_ns[th->thread] += th->idle_ns;
        for (uint32_t s = 0; s < w->n_stages; s++) {
            ws->stage_ns[th->thread][s] += th->stage_ns[s];
            sum += th->stage_ns[s];
        }
        /* Every nanosecond of the window once. */
        assert_int_equal(sum, w->t1_ns - w->t0_ns);
    }
}

/* A range that never ended counts up to the end of the analysed time, as
 * self time of its stage net of its children: summary and intervals agree,
 * and self + idle is the wall time (it was 500 ms of 400 when the open
 * range was left out but its child was not). */
static void test_unended_ranges(void **state)
{
    (void)state;
    an_trace t;
    assert_int_equal(an_trace_open(&t, tmp_file("unended.sqlite")), 0);
    an_stats s;
    stats_of(&t, &s, NULL, NULL);
    const an_file_stats *fs = &s.files[0];
    assert_int_equal(fs->wall_ns, 400 * MS);
    check_stats(thread_stage(fs, "worker", "a"), 40 * MS, 40 * MS, 1, 40 * MS, 40 * MS, 40 * MS, 40 * MS);
    check_stats(thread_stage(fs, "worker", "outer"), 280 * MS, 180 * MS, 1, 280 * MS, 280 * MS, 280 * MS, 280 * MS);
    check_stats(thread_stage(fs, "worker", "inner"), 100 * MS, 100 * MS, 1, 100 * MS, 100 * MS, 100 * MS, 100 * MS);
    assert_int_equal(fs->thread_busy_ns[1], 320 * MS);
    assert_self_plus_idle(fs);
    an_stats_free(&s);

    /* --jobs 2: the same numbers. */
    an_select sel;
    memset(&sel, 0, sizeof sel);
    assert_int_equal(an_stats_compute_jobs(&s, &t, 1, &sel, 0, 2), 0);
    fs = &s.files[0];
    check_stats(thread_stage(fs, "worker", "outer"), 280 * MS, 180 * MS, 1, 280 * MS, 280 * MS, 280 * MS, 280 * MS);
    assert_self_plus_idle(fs);
    an_stats_free(&s);

    /* A window after the worker's last event: only the open range is in it
     * (no chunk of the worker overlaps the window). */
    stats_of(&t, &s, NULL, "0.3:0.4");
    fs = &s.files[0];
    assert_int_equal(fs->wall_ns, 100 * MS);
    check_stats(thread_stage(fs, "worker", "outer"), 100 * MS, 100 * MS, 1, 100 * MS, 100 * MS, 100 * MS, 100 * MS);
    assert_int_equal(thread_stage(fs, "worker", "inner")->count, 0);
    assert_self_plus_idle(fs);
    an_stats_free(&s);

    /* Steps 1:2, 100..200 ms: outer [120, 200] holding inner [150, 200]. */
    stats_of(&t, &s, "1:2", NULL);
    fs = &s.files[0];
    check_stats(thread_stage(fs, "worker", "outer"), 80 * MS, 30 * MS, 1, 80 * MS, 80 * MS, 80 * MS, 80 * MS);
    check_stats(thread_stage(fs, "worker", "inner"), 50 * MS, 50 * MS, 1, 50 * MS, 50 * MS, 50 * MS, 50 * MS);
    assert_int_equal(thread_stage(fs, "worker", "a")->count, 0);
    assert_self_plus_idle(fs);
    an_stats_free(&s);

    /* intervals: the same self times, window by window. */
    window_sums ws;
    memset(&ws, 0, sizeof ws);
    assert_int_equal(st_reader_windows(t.r, 1, on_window_sum, &ws), ST_OK);
    assert_int_equal(ws.n_windows, 4);
    assert_int_equal(ws.stage_ns[1][1], 40 * MS);
    assert_int_equal(ws.stage_ns[1][2], 180 * MS);
    assert_int_equal(ws.stage_ns[1][3], 100 * MS);
    assert_int_equal(ws.idle_ns[1], 80 * MS);
    an_trace_close(&t);

    /* The generator's own merge gives the same text as the reader. */
    tg_trace *g = trace_unended();
    char *want = trace_windows_text(g, 1);
    tg_free(g);
    st_reader *r;
    assert_int_equal(st_reader_open(&r, tmp_file("unended.sqlite")), ST_OK);
    char *got = NULL;
    assert_int_equal(st_reader_windows(r, 1, on_window_append, &got), ST_OK);
    assert_string_equal(got, want);
    assert_non_null(strstr(want, "profile steps 4-4  window 0.100 s  tokens 100  tokens/s 1000\n"));
    assert_non_null(strstr(want, "worker       worker    outer 100.0% 100.0ms\n"));
    free(want);
    free(got);
    st_reader_close(r);
}

static void assert_rows_equal(const an_stage_stats *a, const an_stage_stats *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            fail_msg("%s row %zu: total %lld/%lld count %llu/%llu p50 %lld/%lld p99 %lld/%lld", what, i,
                     (long long)a[i].total_ns, (long long)b[i].total_ns, (unsigned long long)a[i].count,
                     (unsigned long long)b[i].count, (long long)a[i].pct_ns[AN_P50], (long long)b[i].pct_ns[AN_P50],
                     (long long)a[i].pct_ns[AN_P99], (long long)b[i].pct_ns[AN_P99]);
}

static void assert_stats_equal(const an_stats *a, const an_stats *b)
{
    assert_int_equal(a->n_files, b->n_files);
    assert_int_equal(a->merged_valid, b->merged_valid);
    for (uint32_t f = 0; f < a->n_files; f++) {
        const an_file_stats *x = &a->files[f], *y = &b->files[f];
        assert_int_equal(x->wall_ns, y->wall_ns);
        assert_int_equal(x->n_ranges, y->n_ranges);
        assert_int_equal(x->n_threads, y->n_threads);
        assert_int_equal(x->n_stages, y->n_stages);
        assert_int_equal(x->n_roles, y->n_roles);
        assert_memory_equal(x->thread_busy_ns, y->thread_busy_ns, x->n_threads * sizeof *x->thread_busy_ns);
        assert_rows_equal(x->thread_stage, y->thread_stage, (size_t)x->n_threads * x->n_stages, "thread");
        assert_rows_equal(x->role_stage, y->role_stage, (size_t)x->n_roles * x->n_stages, "role");
    }
    if (a->merged_valid)
        assert_rows_equal(a->merged.role_stage, b->merged.role_stage,
                          (size_t)a->merged.n_roles * a->merged.n_stages, "merged");
}

typedef struct selection {
    const char *steps, *time, *roles, *threads, *stages;
} selection;

/* With paths: an_stats_compute_paths (t filled by it, readers closed). */
static void compute_any(an_stats *s, an_trace *t, char **paths, uint32_t n, const selection *pick, int merge,
                        int jobs)
{
    an_select sel;
    memset(&sel, 0, sizeof sel);
    if (pick->steps) assert_int_equal(an_window_parse_steps(&sel.window, pick->steps), 0);
    if (pick->time) assert_int_equal(an_window_parse_time(&sel.window, pick->time), 0);
    if (pick->roles) assert_int_equal(an_filter_add(&sel.filter.roles, &sel.filter.n_roles, pick->roles), 0);
    if (pick->threads) assert_int_equal(an_filter_add(&sel.filter.threads, &sel.filter.n_threads, pick->threads), 0);
    if (pick->stages) assert_int_equal(an_filter_add(&sel.filter.stages, &sel.filter.n_stages, pick->stages), 0);
    if (paths) assert_int_equal(an_stats_compute_paths(s, t, paths, n, &sel, merge, jobs), 0);
    else assert_int_equal(an_stats_compute_jobs(s, t, n, &sel, merge, jobs), 0);
    an_filter_free(&sel.filter);
}



static void compute(an_stats *s, an_trace *t, uint32_t n, const selection *pick, int merge, int jobs)
{
    compute_any(s, t, NULL, n, pick, merge, jobs);
}

typedef struct vec {
    int64_t *v;
    size_t n, cap;
} vec;

static void vec_push(vec *x, int64_t v)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 64;
        x->v = realloc(x->v, x->cap * sizeof *x->v);
        assert_non_null(x->v);
    }
    x->v[x->n++] = v;
}

static int cmp_truth(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Checks one row's count and percentiles against its values (sorted here). */
static void check_row(const an_stage_stats *x, vec *truth, const char *what, size_t at)
{
    static const uint32_t permille[AN_NPCT] = {500, 950, 990};
    if (x->count != truth->n)
        fail_msg("%s row %zu: count %llu, %zu values", what, at, (unsigned long long)x->count, truth->n);
    if (!truth->n) return;
    qsort(truth->v, truth->n, sizeof *truth->v, cmp_truth);
    for (int p = 0; p < AN_NPCT; p++) {
        size_t rank = (truth->n * permille[p] + 999) / 1000;
        int64_t want = truth->v[(rank ? rank : 1) - 1];
        if (x->pct_ns[p] != want)
            fail_msg("%s row %zu: percentile %d is %lld, the sorted values say %lld", what, at, p,
                     (long long)x->pct_ns[p], (long long)want);
    }
}

/* Every thread, role and merged row's percentiles are the nearest-rank
 * values of the selected ranges' durations, clipped to the window,
 * computed here from a plain read of the ranges. */
static void check_truth(const an_stats *s)
{
    vec **role_vals = calloc(s->n_files, sizeof *role_vals);
    assert_non_null(role_vals);
    for (uint32_t f = 0; f < s->n_files; f++) {
        const an_file_stats *fs = &s->files[f];
        uint32_t ns = fs->n_stages;
        vec *tv = calloc((size_t)fs->n_threads * ns + 1, sizeof *tv);
        role_vals[f] = calloc((size_t)fs->n_roles * ns + 1, sizeof *role_vals[f]);
        assert_non_null(tv);
        assert_non_null(role_vals[f]);
        st_reader *r = fs->trace->r;
        st_range_iter *it;
        assert_int_equal(st_range_iter_open(&it, r, -1, fs->t0_ns, fs->t1_ns), ST_OK);
        st_range rg;
        int rc;
        while ((rc = st_range_iter_next(it, &rg)) == 1) {
            uint32_t ti = UINT32_MAX;
            for (uint32_t i = 0; i < fs->n_threads; i++)
                if (st_reader_thread(r, i)->id == rg.thread) ti = i;
            assert_true(ti != UINT32_MAX);
            if (!fs->thread_on[ti] || rg.stage >= ns || !fs->stage_on[rg.stage]) continue;
            int64_t a = rg.start_ns > fs->t0_ns ? rg.start_ns : fs->t0_ns;
            int64_t b = rg.start_ns + rg.dur_ns < fs->t1_ns ? rg.start_ns + rg.dur_ns : fs->t1_ns;
            int64_t d = b > a ? b - a : 0;
            vec_push(&tv[(size_t)ti * ns + rg.stage], d);
            vec_push(&role_vals[f][(size_t)fs->thread_role[ti] * ns + rg.stage], d);
        }
        assert_int_equal(rc, 0);
        st_range_iter_close(it);
        for (size_t i = 0; i < (size_t)fs->n_threads * ns; i++) {
            check_row(&fs->thread_stage[i], &tv[i], "thread", i);
            free(tv[i].v);
        }
        free(tv);
    }
    if (s->merged_valid) {
        const an_merged_stats *m = &s->merged;
        for (uint32_t mr = 0; mr < m->n_roles; mr++)
            for (uint32_t ms = 0; ms < m->n_stages; ms++) {
                vec all = {0};
                for (uint32_t f = 0; f < s->n_files; f++) {
                    int32_t r = m->file_role[f][mr], st = m->file_stage[f][ms];
                    if (r < 0 || st < 0) continue;
                    vec *x = &role_vals[f][(size_t)r * s->files[f].n_stages + (uint32_t)st];
                    for (size_t i = 0; i < x->n; i++) vec_push(&all, x->v[i]);
                }
                check_row(&m->role_stage[(size_t)mr * m->n_stages + ms], &all, "merged", (size_t)mr * m->n_stages + ms);
                free(all.v);
            }
    }
    for (uint32_t f = 0; f < s->n_files; f++) {
        const an_file_stats *fs = &s->files[f];
        for (size_t i = 0; i < (size_t)fs->n_roles * fs->n_stages; i++) {
            check_row(&fs->role_stage[i], &role_vals[f][i], "role", i);
            free(role_vals[f][i].v);
        }
        free(role_vals[f]);
    }
    free(role_vals);
}

static void test_stats_jobs(void **state)
{
    (void)state;
    an_trace t[2];
    char *paths[2] = {strdup(tmp_file("jobs0.sqlite")), strdup(tmp_file("jobs1.sqlite"))};
    assert_non_null(paths[0]);
    assert_non_null(paths[1]);
    assert_int_equal(an_trace_open(&t[0], paths[0]), 0); /* t keeps the path: workers open it again */
    assert_int_equal(an_trace_open(&t[1], paths[1]), 0);
    static const selection picks[] = {
        {0},
        {.steps = "3:11"},
        {.time = "0.01:0.2"},
        {.steps = "15:"},
        {.roles = "drafter,target"},
        {.threads = "loader,drafter1,0", .stages = "forward,d2h"},
        {.stages = "allreduce"},
    };
    for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++) {
        for (uint32_t n_files = 1; n_files <= 2; n_files++) {
            an_stats one;
            compute(&one, t, n_files, &picks[p], n_files == 2, 1);
            if (p == 0) {
                assert_int_equal(one.passes, 2); /* drafters hold more ranges than a group keeps exactly */
                assert_true(one.files[0].n_ranges > 10000);
            }
            check_truth(&one);
            for (int jobs = 2; jobs <= 7; jobs += 5) {
                an_stats many;
                compute(&many, t, n_files, &picks[p], n_files == 2, jobs);
                assert_stats_equal(&one, &many);
                assert_int_equal(one.passes, many.passes);
                an_stats_free(&many);
            }
            /* Files opened one at a time per job (summary on several files):
             * the same numbers, and each file's reader closed after. */
            for (int jobs = 1; jobs <= 2 && n_files == 2; jobs++) {
                an_stats by_file;
                an_trace closed[2];
                memset(closed, 0, sizeof closed);
                compute_any(&by_file, closed, paths, n_files, &picks[p], 1, jobs);
                assert_stats_equal(&one, &by_file);
                assert_null(closed[0].r);
                assert_null(closed[1].r);
                assert_string_equal(by_file.files[1].thread_names[0], st_reader_thread(t[1].r, 0)->name);
                an_stats_free(&by_file);
            }
            an_stats_free(&one);
        }
    }
    an_trace_close(&t[0]);
    an_trace_close(&t[1]);
    free(paths[0]);
    free(paths[1]);
}

/* Workers other than the first open the file again by its name; another
 * trace there by then is an error, never a mix of two traces. */
static void test_stats_file_replaced(void **state)
{
    (void)state;
    st_reader *r0, *r0_again, *r1;
    assert_int_equal(st_reader_open(&r0, tmp_file("jobs0.sqlite")), ST_OK);
    assert_int_equal(st_reader_open(&r0_again, tmp_file("jobs0.sqlite")), ST_OK);
    assert_int_equal(st_reader_open(&r1, tmp_file("jobs1.sqlite")), ST_OK);
    assert_true(an_stats_same_trace(r0, r0_again));
    assert_false(an_stats_same_trace(r0, r1));
    assert_false(an_stats_same_trace(r1, r0));
    st_reader_close(r0);
    st_reader_close(r0_again);
    st_reader_close(r1);

    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s", tmp_file("jobs0.sqlite"));
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), 0);
    an_select sel;
    memset(&sel, 0, sizeof sel);
    an_stats one, many;
    assert_int_equal(an_stats_compute_jobs(&one, &t, 1, &sel, 0, 1), 0);
    snprintf(path, sizeof path, "%s", tmp_file("jobs1.sqlite")); /* t->path now names the other trace */
    for (int i = 0; i < 5; i++) {
        /* Whether the second worker gets a task first is up to the threads. */
        int rc = an_stats_compute_jobs(&many, &t, 1, &sel, 0, 2);
        if (rc == 0) assert_stats_equal(&one, &many);
        else assert_int_equal(rc, AN_EXIT_USAGE);
        an_stats_free(&many);
    }
    an_stats_free(&one);
    an_trace_close(&t);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_stats")) return -1;
    write_stats_traces(tmp_dir);
    write_jobs_traces(tmp_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return remove_tmp_dir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_whole),
        cmocka_unit_test(test_stats_windows),
        cmocka_unit_test(test_stats_filters_and_passes),
        cmocka_unit_test(test_stats_merged),
        cmocka_unit_test(test_unended_ranges),
        cmocka_unit_test(test_stats_jobs),
        cmocka_unit_test(test_stats_file_replaced),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
