/* test_cpu.c: the figures of `analyze cpu` (analyze/cpu.c; docs/analyze.md,
 * "cpu") on a trace of exactly known contents (tests/tracegen.c), and the
 * command's lines (build/analyze, run as a program):
 *
 *   steps 0 at 0 and 1 at 12 ms: the analysed time is [0, 12 ms)
 *   w0  compute [1, 11) ms holding sync [6, 8) ms;
 *       off-CPU: blocked [2, 4) ms, preempted [9, 10) ms;
 *       samples: 1 ms stack A in compute (a begin's time: inside), 5 ms A,
 *       6 ms B stored "unknown" (sync, its begin), 7 ms B in sync, 8 ms A
 *       "unknown" (compute: sync's end is outside sync), 11 ms A "unknown"
 *       (no range), 12 ms A (past the window)
 *   w1  compute [1, 11) ms; blocked [3, 5) ms, preempted [7, 8) ms
 *   w2  no cpu_threads row: not shown
 * Stack A: burn <- main; stack B: spin_fn <- sync_fn <- main.
 *
 * w0: compute self 8 ms (on 5: 62.5 %, preempted 12.5 %, blocked 25 %, 3
 * samples: burn self 3, main inclusive 3); sync 2 ms, 100 % on-CPU (2
 * samples) and so "spinning"; (none) 2 ms on-CPU, 1 sample. The thread:
 * 12 ms, 9 on (75 %). w1: compute 10 ms, 70 % on, 10 % preempted, 20 %
 * blocked; (none) 2 ms on. With --steps 0:1 the same; a window --time
 * 0.004:0.010 cuts w1's compute to [4, 10) ms: 4 ms on, 1 preempted, 1 blocked.
 *
 * Block reasons, libraries, windows (rows added with SQL): cpu_blocks has
 * w0's block at 2 ms (futex, futex_do_wait), a row at 9 ms (w0's
 * preempted switch-out: not a block, ignored) and one at 4.5 ms (no
 * switch-out there: ignored); w1's block at 3 ms has none. So w0's compute
 * blocked 2 ms is all "futex:futex_do_wait" (1 interval), w1's 2 ms
 * "(short/unexamined)" (1 ms in [4, 10)). spin_fn is put in a second
 * mapping, /lib/libspin.so: w0's sync samples (2) have it as their leaf's
 * library (self 2, inclusive 2) and /bin/prog above (self 0, inclusive 2);
 * compute's 3 samples are all /bin/prog. cpu_windows: window 0 [0, 6] ms
 * (step 0): w0 3 ms on-CPU, 1 ms runnable, 5 slices (a row of thread -1,
 * comm "prog": seen before it registered; window 1's row names it), "helper"
 * (unregistered) 1.5 ms on; window 1 [6, 12] ms (step 1): w0 6 ms on. Over
 * all: w0 9 of 12 ms (75 %), 1 ms run queue, 2 windows; helper 12.5 %.
 * With --time 0:0.006 only window 0 (its midpoint, 3 ms, inside): w0 50 %.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../analyze/cpu.h"
#include "common.h"
#include "encoding.h"
#include "traces.h"

static const uint64_t stack_a[] = {0x401100, 0x401000};
static const uint64_t stack_b[] = {0x401200, 0x401300, 0x401000};

#define R_SW(k, t) {.kind = (k), .ts_ns = (t)}
#define R_S(t, st, sg) {.kind = ST_CPU_REC_SAMPLE, .ts_ns = (t), .stack = (st), .stage = (sg)}
#define R_U(t, st) {.kind = ST_CPU_REC_SAMPLE_UNKNOWN, .ts_ns = (t), .stack = (st)}

static void write_trace(const char *path, int with_cpu)
{
    tg_trace *g = tg_create("cpu");
    uint32_t compute = tg_stage(g, "compute", "work");
    uint32_t sync = tg_stage(g, "sync", "sync");
    uint32_t w0 = tg_thread(g, "w0", "worker"), w1 = tg_thread(g, "w1", "worker"), w2 = tg_thread(g, "w2", "loader");
    tg_step(g, 0, 0, 0);
    tg_step(g, 1, 12 * MS, 10);
    tg_begin(g, w0, compute, 1 * MS);
    tg_begin(g, w0, sync, 6 * MS);
    tg_end(g, w0, 8 * MS);
    tg_end(g, w0, 11 * MS);
    tg_range(g, w1, compute, 1 * MS, 11 * MS);
    tg_range(g, w2, compute, 1 * MS, 2 * MS);
    if (with_cpu) {
        tg_cpu_thread(g, w0, "perf", 1000000, 0, 9 * MS);
        tg_cpu_thread(g, w1, "perf", 1000000, 0, 9 * MS);
        uint32_t a = tg_cpu_stack(g, stack_a, 2), b = tg_cpu_stack(g, stack_b, 3);
        const st_cpu_rec c0[] = {R_S(1 * MS, a, compute),
                                 R_SW(ST_CPU_REC_OUT, 2 * MS),
                                 R_SW(ST_CPU_REC_IN, 4 * MS),
                                 R_S(5 * MS, a, compute),
                                 R_U(6 * MS, b),
                                 R_S(7 * MS, b, sync),
                                 R_U(8 * MS, a),
                                 R_SW(ST_CPU_REC_PREEMPTED, 9 * MS),
                                 R_SW(ST_CPU_REC_IN, 10 * MS),
                                 R_U(11 * MS, a),
                                 R_S(12 * MS, a, ST_CPU_NO_STAGE)};
        tg_cpu_chunk(g, w0, c0, 11);
        const st_cpu_rec c1[] = {R_SW(ST_CPU_REC_OUT, 3 * MS), R_SW(ST_CPU_REC_IN, 5 * MS),
                                 R_SW(ST_CPU_REC_PREEMPTED, 7 * MS), R_SW(ST_CPU_REC_IN, 8 * MS)};
        tg_cpu_chunk(g, w1, c1, 4);
        tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "");
        tg_cpu_symbol(g, 0x401000, 0, "main", 0);
        tg_cpu_symbol(g, 0x401100, 0, "burn", 0);
        tg_cpu_symbol(g, 0x401200, 0, "spin_fn", 0);
        tg_cpu_symbol(g, 0x401300, 0, "sync_fn", 0);
    }
    tg_write(g, path);
    tg_free(g);
}

static void assert_cell(const an_cpu_cell *c, int64_t wall, int64_t on, int64_t pre, int64_t blk, uint64_t samples)
{
    assert_int_equal(c->wall_ns, wall);
    assert_int_equal(c->on_ns, on);
    assert_int_equal(c->preempted_ns, pre);
    assert_int_equal(c->blocked_ns, blk);
    assert_int_equal(c->samples, samples);
}

static const an_cpu_fn *fn_of(const an_cpu_result *res, const an_cpu_cell *c, const char *name)
{
    for (uint32_t i = 0; i < c->n_fns; i++)
        if (strcmp(res->names[c->fns[i].name].name, name) == 0) return &c->fns[i];
    return NULL;
}

static void test_figures(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "cpu.sqlite");
    write_trace(path, 1);
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), AN_EXIT_OK);
    assert_int_equal(t.span_t0_ns, 0);
    assert_int_equal(t.span_t1_ns, 12 * MS);
    an_cpu_result res;
    assert_int_equal(an_cpu_compute(&t, t.span_t0_ns, t.span_t1_ns, &res), 0);
    assert_int_equal(res.n_threads, 2);
    assert_int_equal(res.n_stages, 2);
    const an_cpu_thread *w0 = &res.threads[0], *w1 = &res.threads[1];
    assert_int_equal(w0->thread, 0);
    assert_int_equal(w1->thread, 1);
    /* cells[0]: no range open; [1]: compute; [2]: sync */
    assert_cell(&w0->cells[0], 2 * MS, 2 * MS, 0, 0, 1);
    assert_cell(&w0->cells[1], 8 * MS, 5 * MS, 1 * MS, 2 * MS, 3);
    assert_cell(&w0->cells[2], 2 * MS, 2 * MS, 0, 0, 2);
    assert_cell(&w0->total, 12 * MS, 9 * MS, 1 * MS, 2 * MS, 6);
    assert_cell(&w1->cells[0], 2 * MS, 2 * MS, 0, 0, 0);
    assert_cell(&w1->cells[1], 10 * MS, 7 * MS, 1 * MS, 2 * MS, 0);
    assert_cell(&w1->total, 12 * MS, 9 * MS, 1 * MS, 2 * MS, 0);
    const an_cpu_fn *f = fn_of(&res, &w0->cells[1], "burn");
    assert_non_null(f);
    assert_int_equal(f->self, 3);
    assert_int_equal(f->incl, 3);
    f = fn_of(&res, &w0->cells[1], "main");
    assert_non_null(f);
    assert_int_equal(f->self, 0);
    assert_int_equal(f->incl, 3);
    assert_null(fn_of(&res, &w0->cells[1], "spin_fn"));
    f = fn_of(&res, &w0->cells[2], "sync_fn");
    assert_non_null(f);
    assert_int_equal(f->self, 0);
    assert_int_equal(f->incl, 2);
    const an_cpu_fn *top[3];
    assert_int_equal(an_cpu_top(&res, &w0->cells[2], 0, 3, top), 1); /* by self: spin_fn only */
    assert_string_equal(res.names[top[0]->name].name, "spin_fn");
    assert_string_equal(res.names[top[0]->name].path, "/bin/prog");
    assert_int_equal(an_cpu_top(&res, &w0->cells[2], 1, 3, top), 3); /* by inclusive: 2 each, then by name */
    assert_string_equal(res.names[top[0]->name].name, "spin_fn"); /* self 2 before self 0 */
    assert_string_equal(res.names[top[1]->name].name, "main");
    assert_string_equal(res.names[top[2]->name].name, "sync_fn");
    an_cpu_free(&res);
    /* a window [4, 10) ms */
    assert_int_equal(an_cpu_compute(&t, 4 * MS, 10 * MS, &res), 0);
    assert_cell(&res.threads[1].cells[1], 6 * MS, 4 * MS, 1 * MS, 1 * MS, 0);
    assert_cell(&res.threads[0].cells[1], 4 * MS, 3 * MS, 1 * MS, 0, 2); /* [4,6) + [8,10): samples 5 and 8 ms */
    an_cpu_free(&res);
    an_trace_close(&t);
}

/* The command's stdout and exit status. */
static char *run(const char *args, int *status)
{
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "%s/analyze cpu %s 2>&1", build_dir(), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t k;
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) len += k;
    out[len] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static void test_command(void **state)
{
    (void)state;
    char path[PATH_MAX], args[PATH_MAX + 64];
    tmp_path(path, sizeof path, "cmd.sqlite");
    write_trace(path, 1);
    int st;
    char *out = run(path, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "spinning: w0 waits in sync (sync) 100.0% on-CPU (cudaDeviceScheduleBlockingSync "
                                "or events would free the core)\n"));
    assert_null(strstr(out, "w2"));
    free(out);
    snprintf(args, sizeof args, "--format csv --top 1 %s", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "w0,worker,perf,12.000000,9.000000,75,8.333333333333334,16.666666666666668,6,0\n"));
    assert_non_null(strstr(out, "w0,worker,compute,work,8.000000,5.000000,62.5,12.5,25,3\n"));
    assert_non_null(strstr(out, "w0,worker,sync,sync,2.000000,2.000000,100,0,0,2\n"));
    assert_non_null(strstr(out, "w0,worker,(none),,2.000000,2.000000,100,0,0,1\n"));
    assert_non_null(strstr(out, "w1,worker,compute,work,10.000000,7.000000,70,10,20,0\n"));
    assert_non_null(strstr(out, "w0,compute,self,1,burn,/bin/prog,3,100\n"));
    assert_non_null(strstr(out, "w0,compute,inclusive,1,burn,/bin/prog,3,100\n"));
    assert_null(strstr(out, "w0,compute,inclusive,2")); /* --top 1 */
    assert_null(strstr(out, "spinning")); /* text only */
    free(out);
    snprintf(args, sizeof args, "--format csv --stage sync --time 0.004:0.010 %s", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "w0,worker,sync,sync,2.000000,2.000000,100,0,0,2\n"));
    assert_null(strstr(out, "compute,work"));
    free(out);
    snprintf(args, sizeof args, "--stage nope %s", path);
    out = run(args, &st);
    assert_int_equal(st, 2);
    free(out);
    tmp_path(path, sizeof path, "nocpu.sqlite");
    write_trace(path, 0);
    out = run(path, &st);
    assert_int_equal(st, 2);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "analyze: cpu: %s has no CPU capture (record with --trace-cpu / st_options.cpu)\n", path);
    assert_string_equal(out, want);
    free(out);
}

static const char extra_sql[] =
    "INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) VALUES "
    "(0, 2000000, 3100000, 202, 'futex', 4096, 393, 'futex_do_wait'),"
    "(0, 9000000, 9500000, 0, 'read', 3, 1, 'anon_pipe_read'),"
    "(0, 4500000, 5600000, 0, 'read', 3, 1, 'anon_pipe_read');"
    "INSERT INTO cpu_maps VALUES (1, 4198912, 4199168, 0, '/lib/libspin.so', '');"
    "UPDATE cpu_symbols SET map = 1 WHERE addr = 4198912;"
    /* w0 as the writer's first scan saw it: before it registered, under the process's comm */
    "INSERT INTO cpu_windows SELECT 0, 0, 0, 6000000, os_tid, -1, 'prog', 3000000, 1000000, 5 FROM threads WHERE name = 'w0';"
    "INSERT INTO cpu_windows VALUES (0, 0, 0, 6000000, 99999, -1, 'helper', 1500000, 0, 2);"
    "INSERT INTO cpu_windows SELECT 1, 1, 6000000, 12000000, os_tid, id, name, 6000000, 0, 4 FROM threads WHERE name = 'w0';";

static const an_cpu_reason_ns *reason_of(const an_cpu_result *res, const an_cpu_cell *c, const char *name)
{
    for (uint32_t i = 0; i < c->n_reasons; i++)
        if (strcmp(res->reasons[c->reasons[i].reason], name) == 0) return &c->reasons[i];
    return NULL;
}

static void test_reasons_libs_windows(void **state)
{
    (void)state;
    char path[PATH_MAX], args[PATH_MAX + 64];
    tmp_path(path, sizeof path, "extra.sqlite");
    write_trace(path, 1);
    tg_exec(path, extra_sql);
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), AN_EXIT_OK);
    an_cpu_result res;
    assert_int_equal(an_cpu_compute(&t, t.span_t0_ns, t.span_t1_ns, &res), 0);
    const an_cpu_cell *c0 = &res.threads[0].cells[1], *c1 = &res.threads[1].cells[1];
    assert_string_equal(res.reasons[0], AN_CPU_REASON_UNEXAMINED);
    assert_int_equal(c0->n_reasons, 1);
    const an_cpu_reason_ns *x = reason_of(&res, c0, "futex:futex_do_wait");
    assert_non_null(x);
    assert_int_equal(x->ns, 2 * MS);
    assert_int_equal(x->count, 1);
    assert_null(reason_of(&res, c0, "read:anon_pipe_read"));
    assert_int_equal(c1->n_reasons, 1);
    x = reason_of(&res, c1, AN_CPU_REASON_UNEXAMINED);
    assert_non_null(x);
    assert_int_equal(x->ns, 2 * MS);
    assert_int_equal(x->count, 1);
    const an_cpu_cell *sync = &res.threads[0].cells[2];
    const an_cpu_lib *libs[4];
    assert_int_equal(an_cpu_top_libs(&res, sync, 4, libs), 2);
    assert_string_equal(res.libs[libs[0]->lib], "/lib/libspin.so");
    assert_int_equal(libs[0]->self, 2);
    assert_int_equal(libs[0]->incl, 2);
    assert_string_equal(res.libs[libs[1]->lib], "/bin/prog");
    assert_int_equal(libs[1]->self, 0);
    assert_int_equal(libs[1]->incl, 2);
    assert_int_equal(an_cpu_top_libs(&res, sync, 1, libs), 1);
    assert_int_equal(an_cpu_top_libs(&res, c0, 4, libs), 1);
    assert_string_equal(res.libs[libs[0]->lib], "/bin/prog");
    assert_int_equal(libs[0]->self, 3);
    an_cpu_free(&res);
    assert_int_equal(an_cpu_compute(&t, 4 * MS, 10 * MS, &res), 0);
    x = reason_of(&res, &res.threads[1].cells[1], AN_CPU_REASON_UNEXAMINED);
    assert_non_null(x);
    assert_int_equal(x->ns, 1 * MS);
    assert_int_equal(res.threads[0].cells[1].n_reasons, 0); /* w0 is not blocked in [4, 10) */
    an_cpu_free(&res);
    an_cpu_windows w;
    assert_int_equal(an_cpu_windows_compute(&t, 1, 0, 0, &w), 0);
    assert_int_equal(w.n_windows, 2);
    assert_int_equal(w.n_threads, 2);
    assert_string_equal(w.threads[0].name, "w0");
    assert_int_equal(w.threads[0].thread, 0);
    assert_int_equal(w.threads[0].wall_ns, 12 * MS);
    assert_int_equal(w.threads[0].oncpu_ns, 9 * MS);
    assert_int_equal(w.threads[0].runq_ns, 1 * MS);
    assert_int_equal(w.threads[0].slices, 9);
    assert_int_equal(w.threads[0].n_windows, 2);
    assert_string_equal(w.threads[1].name, "helper");
    assert_int_equal(w.threads[1].thread, -1);
    assert_int_equal(w.threads[1].wall_ns, 12 * MS);
    assert_int_equal(w.threads[1].oncpu_ns, 1500000);
    assert_int_equal(w.n_rows, 3);
    assert_int_equal(w.rows[0].window, 0); /* window 0: w0 (3 ms) before helper (1.5 ms) */
    assert_int_equal(w.rows[0].os_thread, 0);
    assert_int_equal(w.rows[1].os_thread, 1);
    assert_int_equal(w.rows[2].window, 1);
    assert_int_equal(w.rows[2].step, 1);
    an_cpu_windows_free(&w);
    assert_int_equal(an_cpu_windows_compute(&t, 0, 0, 6 * MS, &w), 0);
    assert_int_equal(w.n_windows, 1);
    assert_int_equal(w.threads[0].wall_ns, 6 * MS);
    assert_int_equal(w.threads[0].oncpu_ns, 3 * MS);
    an_cpu_windows_free(&w);
    an_trace_close(&t);
    /* the command's tables */
    int st;
    snprintf(args, sizeof args, "--format csv --windows %s", path);
    char *out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\nthread,stage,reason,state,kernel_function,blocked_ms,count,pct\n"
                                "w0,compute,futex:futex_do_wait,,,2.000000,1,100\n"
                                "w1,compute,(short/unexamined),,,2.000000,1,100\n\n"));
    assert_non_null(strstr(out, "\nthread,stage,rank,library,self,self_pct,inclusive,inclusive_pct\n"
                                "w0,(none),1,/bin/prog,1,100,1,100\n"
                                "w0,compute,1,/bin/prog,3,100,3,100\n"
                                "w0,sync,1,/lib/libspin.so,2,100,2,100\n"
                                "w0,sync,2,/bin/prog,0,0,2,100\n\n"));
    assert_non_null(strstr(out, "\nthread,registered,os_tid,wall_ms,on_cpu_ms,on_cpu_pct,runq_ms,runq_pct,slices,windows\n"
                                "w0,yes,"));
    assert_non_null(strstr(out, ",12.000000,9.000000,75,1.000000,8.333333333333334,9,2\n"
                                "helper,no,99999,12.000000,1.500000,12.5,0.000000,0,2,1\n\n"));
    assert_non_null(strstr(out, "\nwindow,step,start_ms,dur_ms,thread,os_tid,on_cpu_ms,on_cpu_pct,runq_ms,runq_pct,slices\n"
                                "0,0,0.000000,6.000000,w0,"));
    assert_non_null(strstr(out, "\n0,0,0.000000,6.000000,helper,99999,1.500000,25,0.000000,0,2\n"
                                "1,1,6.000000,6.000000,w0,"));
    free(out);
    snprintf(args, sizeof args, "--format csv --time 0:0.006 %s", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, ",6.000000,3.000000,50,1.000000,16.666666666666668,5,1\n"));
    assert_null(strstr(out, "window,step")); /* --windows not given */
    free(out);
}

int main(void)
{
    if (make_tmp_dir("test_cpu")) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_figures), cmocka_unit_test(test_command),
                                       cmocka_unit_test(test_reasons_libs_windows)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
