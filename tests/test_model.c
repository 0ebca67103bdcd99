/* test_model.c: the per-step role model behind `analyze bottleneck`,
 * `diff` and `report` (analyze/model.c): steps grouped into bins, skipped
 * start-up steps, the role order inferred from the waits, a chunk naming an
 * unknown stage, and the GPU-aware loads, on the model set of
 * tests/traces.c (whose comments work out every number).
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

#define assert_close(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9 * (1.0 + fabs((double)(b))))

static void test_grouped_bins_and_skip(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    an_pipe_opts o;
    memset(&o, 0, sizeof o);
    /* 4 roles x 9 columns a bin: room for 7 bins, so 3 steps each. */
    o.max_cells = 4 * 9 * 7;
    open_pipe(&t, &p, "target.sqlite", &o);
    assert_int_equal(p.steps_per_bin, 3);
    assert_int_equal(p.n_bins, 7);
    assert_int_equal(p.bin_steps[6], 2);
    assert_int_equal(p.bin_step_first[1], 4);
    assert_int_equal(p.bin_step_last[1], 6);
    an_role_load loads[4];
    an_pipe_loads(&p, 0, p.n_bins, loads);
    assert_close(loads[1].busy_pct, 90);
    assert_close(loads[1].busy_per_step_ns, 9 * MS);
    assert_close(loads[2].kind_pct[ST_WAIT_INPUT], 60);
    an_pipe_free(&p);
    an_trace_close(&t);

    memset(&o, 0, sizeof o);
    o.skip_steps = 5;
    open_pipe(&t, &p, "target.sqlite", &o);
    assert_int_equal(p.n_bins, 15);
    assert_int_equal(p.bin_step_first[0], 6);
    assert_int_equal(p.bin_t[0], BASE_NS + 50 * MS);
    assert_int_equal(p.queues[0].n_samples, 30);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static void test_inferred_order(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "inferred.sqlite", NULL);
    assert_true(p.order_inferred);
    static const char *const order[] = {"producer", "zeta", "consumer", "main"};
    for (int i = 0; i < 4; i++) assert_string_equal(p.role_names[i], order[i]);
    /* thread -> role follows the reordering */
    for (uint32_t i = 0; i < p.n_threads; i++)
        assert_string_equal(p.role_names[p.thread_role[i]], st_reader_thread(t.r, i)->role);
    an_role_load loads[4];
    an_pipe_loads(&p, 0, p.n_bins, loads);
    an_verdict v;
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    /* consumer 60% busy, producer 20%, zeta 40%: consumer; upstream zeta blocked 50% */
    assert_string_equal(p.role_names[v.role], "consumer");
    assert_string_equal(p.role_names[v.up_role], "zeta");
    assert_close(v.up_wait_pct, 50);
    assert_string_equal(p.role_names[v.down_role], "main");
    an_pipe_free(&p);
    an_trace_close(&t);
}

static void test_unknown_stage(void **state)
{
    (void)state;
    /* A chunk naming a stage the (empty) stages table lacks is corrupt, as
     * it is when the table is not empty: the scan fails instead of
     * guessing. */
    an_trace t;
    an_pipe p;
    assert_int_equal(an_trace_open(&t, tmp_file("nostages.sqlite")), 0);
    assert_int_not_equal(an_pipe_compute(&p, &t, NULL), 0);
    assert_non_null(strstr(st_last_error(), "corrupt"));
    an_trace_close(&t);
}

/* The GPU-aware model on gpu_shared.sqlite and gpu_split.sqlite (see
 * tests/traces.c, trace_gpu_pipeline, for every number). */
static void test_gpu_model(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "gpu_shared.sqlite", NULL);
    assert_int_equal(p.n_devices, 2);
    assert_int_equal(p.devices[0], 0);
    assert_int_equal(p.devices[1], 1);
    int32_t target = an_pipe_role_index(&p, "target"), drafter = an_pipe_role_index(&p, "drafter");
    an_role_load loads[8];
    assert_true(p.n_roles <= 8);
    an_pipe_loads(&p, 0, p.n_bins, loads);
    const an_role_load *tl = &loads[target], *dl = &loads[drafter];
    assert_int_equal(tl->busy_ns, 90 * MS);
    assert_int_equal(tl->kind_ns[ST_SYNC], 80 * MS);
    assert_int_equal(tl->host_ns, 10 * MS);
    assert_int_equal(tl->device_ns, 60 * MS);
    assert_true(tl->device_bound);
    assert_int_equal(tl->need_ns, 60 * MS);
    assert_close(tl->need_pct, 60.0);
    assert_close(tl->need_per_step_ns, 6.0 * MS);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)tl->top_device_stage)->name, "forward");
    assert_int_equal(tl->top_device_stage_ns, 60 * MS);
    assert_int_equal(dl->host_ns, 20 * MS);
    assert_int_equal(dl->device_ns, 80 * MS);
    assert_close(dl->need_pct, 40.0);
    /* the loader launches nothing: its need is its host time */
    assert_int_equal(loads[an_pipe_role_index(&p, "loader")].need_ns, 10 * MS);

    an_device_load *d = an_pipe_device_loads(&p, 0, p.n_bins);
    assert_non_null(d);
    assert_int_equal(d[0].busy_ns, 80 * MS); /* [1, 9] per step; the sync record is not device work */
    assert_int_equal(d[0].role_ns[target], 60 * MS);
    assert_int_equal(d[0].role_ns[drafter], 40 * MS);
    assert_int_equal(d[0].n_roles_on, 2);
    assert_int_equal(d[0].top_role, target);
    assert_int_equal(d[1].busy_ns, 45 * MS); /* D1 and the unknown launcher's kernel */
    assert_int_equal(d[1].role_ns[drafter], 40 * MS);
    assert_int_equal(d[1].n_roles_on, 1);
    free(d);

    an_verdict v;
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    assert_int_equal(v.device, 0);
    assert_int_equal(v.role, target);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)v.stage)->name, "forward");
    assert_close(v.load_pct, 80.0);
    assert_true(v.saturated);
    assert_int_equal(v.whatif_limit_device, 0);
    assert_int_equal(v.whatif_limit_role, -1);
    assert_close(v.whatif_factor, 2.0);
    assert_close(v.whatif_step_ns, 5.0 * MS);
    assert_close(v.busy_after_ns, 5.0 * MS);
    assert_close(v.whatif_tokens_per_s, 200000.0);

    an_window_verdict *w;
    uint32_t nw = an_pipe_window_verdicts(&p, 5, &w);
    assert_int_equal(nw, 2);
    for (uint32_t i = 0; i < nw; i++) {
        assert_int_equal(w[i].device, 0);
        assert_int_equal(w[i].role, target);
        assert_close(w[i].busy_pct, 80.0);
        assert_false(w[i].moved);
    }
    char *story = an_pipe_story(&p, loads, &v, w, nw, 5);
    assert_non_null(story);
    assert_non_null(strstr(story, "Bottleneck: GPU 0, busy 80.0% of the time, shared by 2 roles: target 60.0%, "
                                  "drafter 40.0% (the time each role's GPU work ran on it; they overlap); its largest "
                                  "user is target, whose stage forward launched 60.0% of its time in GPU work "
                                  "(6.000 ms per step).\n"));
    assert_non_null(strstr(story, "target 10.0% busy without sync (sync 80.0%), drafter 10.0% busy without sync "
                                  "(sync 80.0%); no role needs more than 60.0% of its threads' time"));
    assert_non_null(strstr(story, "What if forward were 2x faster: GPU 0 would need 5.000 ms per step instead of "
                                  "8.000 ms; GPU 0 stays the limit at 5.000 ms per step: at most 200000.0 tokens/s, "
                                  "2.00x the measured 100000.0.\n"));
    assert_non_null(strstr(story, "the bottleneck did not move (GPU 0 (target) in all 2 windows)"));
    free(story);
    free(w);
    an_pipe_free(&p);
    an_trace_close(&t);

    /* split: GPU 1 holds both drafters; the what-if moves the limit to target */
    open_pipe(&t, &p, "gpu_split.sqlite", NULL);
    an_pipe_loads(&p, 0, p.n_bins, loads);
    assert_int_equal(loads[drafter].device_ns, 70 * MS);
    assert_close(loads[drafter].need_pct, 35.0);
    assert_close(loads[target].need_pct, 60.0);
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    assert_int_equal(v.device, 1);
    assert_int_equal(v.role, drafter);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)v.stage)->name, "forward");
    assert_close(v.load_pct, 70.0);
    assert_int_equal(v.whatif_limit_role, target);
    assert_int_equal(v.whatif_limit_device, -1);
    story = an_pipe_story(&p, loads, &v, NULL, 0, 5);
    assert_non_null(story);
    assert_non_null(strstr(story, "Bottleneck: GPU 1, busy 70.0% of the time, used by one role: drafter 70.0%"));
    assert_non_null(strstr(story, "the limit becomes target (needs 60.0% now) at 6.000 ms per step: at most "
                                  "166666.7 tokens/s, 1.67x the measured 100000.0.\n"));
    free(story);
    assert_close(v.busy_after_ns, 3.0 * MS);
    assert_close(v.whatif_step_ns, 6.0 * MS);
    assert_close(v.whatif_factor, 100.0 / 60.0);
    an_pipe_free(&p);
    an_trace_close(&t);

    /* without GPU activity (target.sqlite): need is busy time, no device */
    open_pipe(&t, &p, "target.sqlite", NULL);
    assert_int_equal(p.n_devices, 0);
    an_pipe_loads(&p, 0, p.n_bins, loads);
    target = an_pipe_role_index(&p, "target");
    assert_int_equal(loads[target].need_ns, loads[target].busy_ns);
    assert_int_equal(loads[target].host_ns, loads[target].busy_ns);
    assert_int_equal(loads[target].device_ns, 0);
    assert_int_equal(loads[target].top_device_stage, -1);
    an_pipe_verdict(&p, 0, p.n_bins, loads, 2.0, &v);
    assert_int_equal(v.device, -1);
    assert_int_equal(v.role, target);
    assert_close(v.load_pct, loads[target].busy_pct);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_model")) return -1;
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
        cmocka_unit_test(test_grouped_bins_and_skip),
        cmocka_unit_test(test_inferred_order),
        cmocka_unit_test(test_unknown_stage),
        cmocka_unit_test(test_gpu_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
