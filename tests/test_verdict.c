/* test_verdict.c: the verdict of `analyze bottleneck` and its story
 * (analyze/verdict.c): role loads, the verdict and what-if, verdicts per
 * window and windows that move, the windows being intervals' windows, a
 * trace without steps, and the story's sentences and helpers, on the model
 * set of tests/traces.c (whose comments work out every number).
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
#include <unistd.h>

#include "common.h"
#include "st_reader.h"
#include "traces.h"

#include "../analyze/verdict.h"

static void open_pipe(an_trace *t, an_pipe *p, const char *name, const an_pipe_opts *o)
{
    assert_int_equal(an_trace_open(t, tmp_file(name)), 0);
    assert_int_equal(an_pipe_compute(p, t, o), 0);
}

static uint32_t role(const an_pipe *p, const char *name)
{
    int32_t r = an_pipe_role_index(p, name);
    if (r < 0) fail_msg("no role %s", name);
    return (uint32_t)r;
}

static uint32_t stage(const an_pipe *p, const char *name)
{
    for (uint32_t s = 0; s < p->n_stages; s++)
        if (strcmp(st_reader_stage(p->trace->r, s)->name, name) == 0) return s;
    fail_msg("no stage %s", name);
    return 0;
}

#define assert_close(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9 * (1.0 + fabs((double)(b))))

static void test_loads_and_verdict(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "target.sqlite", NULL);
    assert_int_equal(p.n_roles, 4);
    assert_false(p.order_inferred);
    static const char *const order[] = {"loader", "target", "drafter", "main"};
    for (int i = 0; i < 4; i++) assert_string_equal(p.role_names[i], order[i]);
    assert_int_equal(p.role_threads[role(&p, "drafter")], 2);
    assert_int_equal(p.n_bins, 20);
    assert_int_equal(p.steps_per_bin, 1);
    an_role_load loads[4];
    an_pipe_loads(&p, 0, p.n_bins, loads);
    const an_role_load *lo = &loads[0], *ta = &loads[1], *dr = &loads[2], *ma = &loads[3];
    assert_close(lo->busy_pct, 10);
    assert_close(lo->kind_pct[ST_WAIT_OUTPUT], 90);
    assert_close(ta->busy_pct, 90);
    assert_close(ta->work_pct, 90);
    assert_close(ta->kind_pct[ST_WAIT_INPUT], 5);
    assert_close(ta->kind_pct[ST_WAIT_OUTPUT], 5);
    assert_int_equal(ta->top_stage, (int32_t)stage(&p, "forward"));
    assert_int_equal(ta->top_stage_ns, 160 * MS);
    assert_close(ta->busy_per_step_ns, 9 * MS);
    assert_int_equal(dr->wall_ns, 400 * MS); /* two threads */
    assert_close(dr->busy_pct, 35);
    assert_close(dr->kind_pct[ST_WAIT_INPUT], 60);
    assert_close(dr->idle_pct, 5);
    assert_close(ma->kind_pct[ST_WAIT_INPUT], 100);
    /* self time and idle add up to the wall time */
    for (int r = 0; r < 4; r++) {
        int64_t sum = loads[r].idle_ns;
        for (int k = 0; k < ST_KIND_COUNT; k++) sum += loads[r].kind_ns[k];
        assert_int_equal(sum, loads[r].wall_ns);
    }
    an_verdict v;
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    assert_int_equal(v.role, 1);
    assert_int_equal(v.stage, (int32_t)stage(&p, "forward"));
    assert_true(v.saturated);
    assert_int_equal(v.down_role, 2);
    assert_close(v.down_wait_pct, 60);
    assert_int_equal(v.up_role, 0);
    assert_close(v.up_wait_pct, 90);
    assert_int_equal(v.steps, 20);
    assert_close(v.step_ns, 10 * MS);
    assert_close(v.tokens_per_s, 100000);
    /* forward 2x faster: target needs 9 - 8/2 = 5 ms per step, more than any
     * other role (loader 1, drafter 3.5): still the limit, twice the throughput. */
    assert_close(v.busy_after_ns, 5 * MS);
    assert_int_equal(v.whatif_limit_role, 1);
    assert_close(v.whatif_step_ns, 5 * MS);
    assert_close(v.whatif_factor, 2.0);
    assert_close(v.whatif_tokens_per_s, 200000);
    /* 4x faster: target 9 - 6 = 3 ms, so the drafters' 3.5 ms limit:
     * 10 / 3.5 = 2.857x, 285714.29 tokens/s. */
    an_pipe_verdict(&p, 0, p.n_bins, loads, 4.0, &v);
    assert_close(v.busy_after_ns, 3 * MS);
    assert_int_equal(v.whatif_limit_role, 2);
    assert_close(v.whatif_step_ns, 3.5 * MS);
    assert_close(v.whatif_factor, 10.0 / 3.5);
    assert_close(v.whatif_tokens_per_s, 1e6 / 3.5);
    /* counts: one forward per step on target, one per drafter thread */
    uint64_t fwd = 0;
    for (uint32_t b = 0; b < p.n_bins; b++) fwd += an_pipe_count(&p, b, 2, stage(&p, "forward"));
    assert_int_equal(fwd, 40);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static void test_windows_move(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "moves.sqlite", NULL);
    an_window_verdict *w;
    uint32_t n = an_pipe_window_verdicts(&p, 5, &w);
    assert_int_equal(n, 4);
    static const char *const want[] = {"target", "target", "drafter", "drafter"};
    static const int moved[] = {0, 0, 1, 0};
    static const double busy[] = {90, 90, 95, 95};
    for (uint32_t i = 0; i < n; i++) {
        assert_string_equal(p.role_names[w[i].role], want[i]);
        assert_int_equal(w[i].moved, moved[i]);
        assert_close(w[i].busy_pct, busy[i]);
        assert_int_equal(w[i].step_first, 5 * i + 1);
        assert_int_equal(w[i].step_last, 5 * i + 5);
        assert_int_equal(w[i].stage, (int32_t)stage(&p, "forward"));
    }
    /* Over the whole trace: target 62.5% busy, drafters 65%. */
    an_role_load loads[4];
    an_pipe_loads(&p, 0, p.n_bins, loads);
    assert_close(loads[1].busy_pct, 62.5);
    assert_close(loads[2].busy_pct, 65);
    an_verdict v;
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    assert_string_equal(p.role_names[v.role], "drafter");
    char *story = an_pipe_story(&p, loads, &v, w, n, 5);
    assert_non_null(story);
    assert_non_null(strstr(story, "the bottleneck moved: target in steps 1-10, drafter in steps 11-20."));
    free(story);
    free(w);
    an_pipe_free(&p);
    an_trace_close(&t);
}

/* The profile windows of the trace, kept for comparison with the model. */
typedef struct kept_windows {
    uint32_t n;
    uint64_t step_first[8], step_last[8], index[8], tokens[8];
    int64_t t0[8], t1[8];
    int64_t role_stage_ns[8][8][16]; /* [window][role of the model][stage] */
    const an_pipe *p;
} kept_windows;

static void keep_window(const st_window *w, void *arg)
{
    kept_windows *k = arg;
    assert_true(k->n < 8);
    uint32_t i = k->n++;
    k->step_first[i] = w->step_first;
    k->step_last[i] = w->step_last;
    k->index[i] = w->index;
    k->tokens[i] = w->tokens;
    k->t0[i] = w->t0_ns;
    k->t1[i] = w->t1_ns;
    for (uint32_t j = 0; j < w->n_threads; j++) {
        int32_t r = an_pipe_role_index(k->p, w->threads[j].role);
        assert_true(r >= 0);
        for (uint32_t st = 0; st < w->n_stages; st++) k->role_stage_ns[i][r][st] += w->threads[j].stage_ns[st];
    }
}

/* bottleneck's windows are intervals' windows: from the mark of a step kN
 * to the next, the partial first and last windows left out, and the same
 * self time per role and stage, tokens and bounds in each. */
static void test_partial_windows(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "partial.sqlite", NULL);
    an_window_verdict *w;
    uint32_t n = an_pipe_window_verdicts(&p, 5, &w);
    assert_int_equal(n, 3);
    kept_windows k;
    memset(&k, 0, sizeof k);
    k.p = &p;
    assert_int_equal(st_reader_windows(t.r, 5, keep_window, &k), ST_OK);
    assert_int_equal(k.n, n);
    int64_t ns[16];
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(w[i].step_first, 6 + 5 * i);
        assert_int_equal(w[i].step_last, 10 + 5 * i);
        assert_int_equal(w[i].step_first, k.step_first[i]);
        assert_int_equal(w[i].step_last, k.step_last[i]);
        assert_int_equal(w[i].index, k.index[i]);
        assert_int_equal(w[i].index, i + 1);
        assert_string_equal(p.role_names[w[i].role], "target");
        assert_int_equal(p.bin_t[w[i].bin0], k.t0[i]);
        assert_int_equal(p.bin_t[w[i].bin1], k.t1[i]);
        uint64_t tokens = 0;
        for (uint32_t b = w[i].bin0; b < w[i].bin1; b++) tokens += p.bin_tokens[b];
        assert_int_equal(tokens, k.tokens[i]);
        for (uint32_t r = 0; r < p.n_roles; r++) {
            an_pipe_stage_ns(&p, w[i].bin0, w[i].bin1, r, ns);
            for (uint32_t st = 0; st < p.n_stages; st++) assert_int_equal(ns[st], k.role_stage_ns[i][r][st]);
        }
    }
    free(w);
    /* The whole period is still every step from the first mark to the last. */
    assert_int_equal(p.n_bins, 19);
    /* Fewer steps than a window: no window. */
    assert_int_equal(an_pipe_window_verdicts(&p, 100, &w), 0);
    free(w);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static void test_nosteps(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "nosteps.sqlite", NULL);
    assert_false(p.has_steps);
    assert_int_equal(p.n_bins, 1);
    an_role_load loads[1];
    an_pipe_loads(&p, 0, 1, loads);
    /* span [0, 96] ms: ten 6 ms ranges */
    assert_int_equal(loads[0].wall_ns, 96 * MS);
    assert_int_equal(loads[0].busy_ns, 60 * MS);
    assert_true(isnan(loads[0].busy_per_step_ns));
    an_verdict v;
    an_pipe_verdict(&p, 0, 1, loads, 2.0, &v);
    assert_int_equal(v.role, 0);
    assert_true(isnan(v.tokens_per_s));
    /* 60 ms of work, 2x faster: 30 ms needed of 96: 3.2x */
    assert_close(v.whatif_factor, 96.0 / 30.0);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static void test_story_and_helpers(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(an_fmt_pct1(62.25, buf, sizeof buf), "62.3%");
    assert_string_equal(an_fmt_pct1(NAN, buf, sizeof buf), "-");
    assert_string_equal(an_clean("a\x1b[1mb", buf, sizeof buf), "a?[1mb");
    assert_int_equal(an_pipe_known_role("post"), 2);
    assert_int_equal(an_pipe_known_role("main"), 1000);
    assert_int_equal(an_pipe_known_role("consumer"), -1);
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "target.sqlite", NULL);
    an_role_load loads[4];
    an_pipe_loads(&p, 0, p.n_bins, loads);
    an_verdict v;
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    char *story = an_pipe_story(&p, loads, &v, NULL, 0, 10);
    assert_non_null(story);
    assert_non_null(strstr(story, "Bottleneck: target (1 thread), busy 90.0% of its time (work 90.0%); limiting stage: "
                                  "forward, 80.0% of its time, 8.000 ms per step.\n"));
    assert_non_null(strstr(story, "Evidence: downstream, drafter waits for input 60.0% of its time (queue_wait 60.0%); "
                                  "upstream, loader is blocked on output 90.0% of its time (queue_put 90.0%).\n"));
    assert_non_null(strstr(story, "What if forward were 2x faster: target would need 5.000 ms per step instead of 9.000 "
                                  "ms; target stays the limit at 5.000 ms per step: at most 200000.0 tokens/s, 2.00x "
                                  "the measured 100000.0.\n"));
    free(story);
    an_gpu_idle *gpu;
    uint32_t n_gpu = 99;
    const char *note;
    assert_int_equal(an_gpu_idle_split(&t, 0, 1, &gpu, &n_gpu, &note), 0);
    assert_int_equal(n_gpu, 0);
    assert_string_equal(note, "no GPU activity in this trace");
    an_pipe_free(&p);
    an_trace_close(&t);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_verdict")) return -1;
    write_model_traces(tmp_dir);
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
        cmocka_unit_test(test_loads_and_verdict),
        cmocka_unit_test(test_windows_move),
        cmocka_unit_test(test_partial_windows),
        cmocka_unit_test(test_nosteps),
        cmocka_unit_test(test_story_and_helpers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
