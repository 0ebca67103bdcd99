/* test_cpu_stacks.c: CPU samples per thread, stage and stack
 * (analyze/cpu_stacks.c) and the folded export written from them
 * (analyze/export_folded.c; docs/analyze.md, "export"), on traces of
 * exactly known contents (tests/tracegen.c), a file and a rank set:
 *
 *   two ranks of one run (tests/traces.c trace_rank: steps at 0, 100 and
 *   200 ms, so the span is [0, 200) ms; worker0's compute ranges
 *   [12 + 15 j, 12 + 15 j + 5 or 8) ms, j = 0..9), worker0 with a
 *   cpu_threads row, period 1 ms on rank 0 and 2 ms on rank 1;
 *   stack 0: burn <- main (0x401234, 0x401000: symbols); stack 1:
 *   0x7f0000001000 <- 0x10 (no symbol: in libx.so's map at 0x7f0000000000,
 *   file offset 0x1000, so "[libx.so+0x2000]"; outside every map:
 *   "[unknown]"). Rank 0's samples: 9 ms stack 0 (no range: (none)),
 *   12.5 and 13 ms stack 0 (compute), 27.5 ms stack 1 (compute), 205 ms
 *   stack 0 (past the span: not counted). Rank 1's: 12.5 ms stack 0.
 *
 * The file (rank 0): rows (worker0, (none), 0) 1 sample 1 ms, (worker0,
 * compute, 0) 2 samples 2 ms, (worker0, compute, 1) 1 sample 1 ms; folded
 *   worker0;(none);main;burn 1
 *   worker0;compute;[unknown];[libx.so+0x2000] 1
 *   worker0;compute;main;burn 2
 * The set adds r1/worker0;compute;main;burn 1 (2000000 with weight ns),
 * threads named r0/... and r1/..., the two ranks' burn frames apart
 * (two processes) under one name. A trace without the CPU tables: refused
 * with exit 2 and no file. Frame labels (an_cpu_frame_label) and the file
 * of a Python frame's name (an_cpu_py_file) on literal names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../analyze/cpu_stacks.h"
#include "../analyze/export.h"
#include "common.h"
#include "encoding.h"
#include "traces.h"

static const uint64_t stack0[] = {0x401234, 0x401000};
static const uint64_t stack1[] = {0x7f0000001000ull, 0x10};

#define R_S(t, st, sg) {.kind = ST_CPU_REC_SAMPLE, .ts_ns = (t), .stack = (st), .stage = (sg)}

static char p0[PATH_MAX], p1[PATH_MAX], pnone[PATH_MAX], dir[PATH_MAX];

static void write_rank(int rank, const char *path, int with_cpu)
{
    tg_trace *g = trace_rank(rank);
    uint32_t worker = 2, compute = 2; /* trace_rank: threads main, loader, worker0; stages log, load, compute */
    if (with_cpu) {
        tg_cpu_thread(g, worker, "perf", rank ? 2000000 : 1000000, BASE_NS, 10 * MS);
        tg_cpu_stack(g, stack0, 2);
        tg_cpu_stack(g, stack1, 2);
        tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "abcd");
        tg_cpu_map(g, 0x7f0000000000ull, 0x7f0000010000ull, 0x1000, "/lib/libx.so", "");
        tg_cpu_symbol(g, 0x401000, 0, "main", 0);
        tg_cpu_symbol(g, 0x401234, 0, "burn", 0x34);
        if (rank == 0) {
            const st_cpu_rec c[] = {R_S(BASE_NS + 9 * MS, 0, ST_CPU_NO_STAGE), R_S(BASE_NS + 12 * MS + MS / 2, 0, compute),
                                    R_S(BASE_NS + 13 * MS, 0, compute), R_S(BASE_NS + 27 * MS + MS / 2, 1, compute),
                                    R_S(BASE_NS + 205 * MS, 0, ST_CPU_NO_STAGE)};
            tg_cpu_chunk(g, worker, c, 5);
        } else {
            const st_cpu_rec c[] = {R_S(BASE_NS + 12 * MS + MS / 2, 0, compute)};
            tg_cpu_chunk(g, worker, c, 1);
        }
    }
    tg_write(g, path);
    tg_free(g);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_file(void **state)
{
    (void)state;
    const char *paths[] = {p0};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    an_cpu_stacks s;
    assert_int_equal(an_cpu_stacks_compute(&t, t.span_t0_ns, t.span_t1_ns, &s), AN_EXIT_OK);
    assert_int_equal(s.n_rows, 3);
    assert_int_equal(s.samples, 4);
    assert_int_equal(s.period_ns, 1000000);
    assert_int_equal(s.mixed_periods, 0);
    const struct {
        int32_t stage;
        uint64_t stack, samples;
        const char *inner, *outer;
    } want[] = {{-1, 0, 1, "burn", "main"}, {2, 0, 2, "burn", "main"}, {2, 1, 1, "[libx.so+0x2000]", "[unknown]"}};
    for (int i = 0; i < 3; i++) {
        const an_cpu_srow *r = &s.rows[i];
        assert_int_equal(r->thread, 2);
        assert_int_equal(r->stage, want[i].stage);
        assert_int_equal(r->stack, want[i].stack);
        assert_int_equal(r->samples, want[i].samples);
        assert_int_equal(r->cpu_ns, (int64_t)want[i].samples * 1000000);
        assert_int_equal(r->n_frames, 2);
        assert_string_equal(s.names[s.frames[s.stack_frames[r->frames_off]].name], want[i].inner);
        assert_string_equal(s.names[s.frames[s.stack_frames[r->frames_off + 1]].name], want[i].outer);
    }
    /* one frame per address, resolved once: the two stacks' four */
    assert_int_equal(s.n_frames, 4);
    const an_cpu_sframe *lib = &s.frames[s.stack_frames[s.rows[2].frames_off]];
    assert_int_equal(lib->map, 1);
    assert_string_equal(s.names[lib->path], "/lib/libx.so");
    assert_int_equal(s.frames[s.stack_frames[s.rows[2].frames_off + 1]].map, -1);
    an_cpu_stacks_free(&s);

    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/file.folded", dir);
    assert_int_equal(an_export_folded(&t, out, 0, 0), AN_EXIT_OK);
    assert_string_equal(slurp(out), "worker0;(none);main;burn 1\n"
                                    "worker0;compute;[unknown];[libx.so+0x2000] 1\n"
                                    "worker0;compute;main;burn 2\n");
    /* an existing file needs overwrite */
    assert_int_equal(an_export_folded(&t, out, 1, 0), AN_EXIT_USAGE);
    assert_int_equal(an_export_folded(&t, out, 1, 1), AN_EXIT_OK);
    assert_string_equal(slurp(out), "worker0;(none);main;burn 1000000\n"
                                    "worker0;compute;[unknown];[libx.so+0x2000] 1000000\n"
                                    "worker0;compute;main;burn 2000000\n");
    an_trace_close(&t);
}

static void test_set(void **state)
{
    (void)state;
    const char *paths[] = {p0, p1};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 2, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_true(t.is_set);
    an_cpu_stacks s;
    assert_int_equal(an_cpu_stacks_compute(&t, t.span_t0_ns, t.span_t1_ns, &s), AN_EXIT_OK);
    assert_int_equal(s.n_rows, 4);
    assert_int_equal(s.samples, 5);
    assert_int_equal(s.mixed_periods, 1);
    const an_cpu_srow *r1 = &s.rows[3];
    assert_string_equal(st_reader_thread(t.r, r1->thread)->name, "r1/worker0");
    assert_int_equal(r1->stack, 1ull << 32);
    assert_int_equal(r1->cpu_ns, 2000000);
    /* rank 1's burn is its own frame (another process), under the same name */
    const an_cpu_sframe *b0 = &s.frames[s.stack_frames[s.rows[1].frames_off]];
    const an_cpu_sframe *b1 = &s.frames[s.stack_frames[r1->frames_off]];
    assert_true(b0 != b1);
    assert_int_equal(b0->process, 0);
    assert_int_equal(b1->process, 1);
    assert_int_equal(b0->name, b1->name);
    assert_int_equal(s.n_frames, 6);
    an_cpu_stacks_free(&s);
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/set.folded", dir);
    assert_int_equal(an_export_folded(&t, out, 1, 0), AN_EXIT_OK);
    assert_string_equal(slurp(out), "r0/worker0;(none);main;burn 1000000\n"
                                    "r0/worker0;compute;[unknown];[libx.so+0x2000] 1000000\n"
                                    "r0/worker0;compute;main;burn 2000000\n"
                                    "r1/worker0;compute;main;burn 2000000\n");
    an_trace_close(&t);
}

static void test_no_cpu(void **state)
{
    (void)state;
    const char *paths[] = {pnone};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/none.folded", dir);
    assert_int_equal(an_export_folded(&t, out, 0, 0), AN_EXIT_USAGE);
    assert_int_equal(an_export_pprof(&t, out, 0), AN_EXIT_USAGE);
    assert_int_equal(access(out, F_OK), -1);
    an_trace_close(&t);
}

static void test_labels(void **state)
{
    (void)state;
    st_cpu_frame fr = {.name = "", .map = 0, .path = "/usr/lib/libc.so.6", .build_id = "", .file_offset = 0x2a0f0};
    char buf[64];
    assert_string_equal(an_cpu_frame_label(&fr, 1, buf, sizeof buf), "[libc.so.6+0x2a0f0]");
    assert_string_equal(an_cpu_frame_label(&fr, 0, buf, sizeof buf), "[libc.so.6]");
    fr.path = "[vdso]";
    assert_string_equal(an_cpu_frame_label(&fr, 1, buf, sizeof buf), "[vdso+0x2a0f0]");
    assert_string_equal(an_cpu_frame_label(&fr, 0, buf, sizeof buf), "[[vdso]]"); /* as `analyze cpu` names it */
    fr.path = "";
    assert_string_equal(an_cpu_frame_label(&fr, 1, buf, sizeof buf), "[unknown]");
    fr.name = "memcpy";
    assert_string_equal(an_cpu_frame_label(&fr, 1, buf, sizeof buf), "memcpy");
    /* a Python-frame sample's frame: its file after the qualname */
    assert_string_equal(an_cpu_py_file("py::Model.forward:/app/model.py"), "/app/model.py");
    assert_string_equal(an_cpu_py_file("py::<module>:C:/a:b.py"), "C:/a:b.py");
    assert_string_equal(an_cpu_py_file("py::noname"), "");
    assert_string_equal(an_cpu_py_file("py:"), "");
    assert_string_equal(an_cpu_py_file("memcpy"), "");
}

int main(void)
{
    if (make_tmp_dir("test_cpu_stacks")) return 1;
    tmp_path(dir, sizeof dir, "");
    tmp_path(p0, sizeof p0, "rank0.sqlite");
    tmp_path(p1, sizeof p1, "rank1.sqlite");
    tmp_path(pnone, sizeof pnone, "nocpu.sqlite");
    write_rank(0, p0, 1);
    write_rank(1, p1, 1);
    write_rank(0, pnone, 0);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_file), cmocka_unit_test(test_set),
                                       cmocka_unit_test(test_no_cpu), cmocka_unit_test(test_labels)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
