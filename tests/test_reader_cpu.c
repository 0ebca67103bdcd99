/* test_reader_cpu.c: the reader's CPU capture API (tracer/reader_cpu.c;
 * stagetrace_reader.h, "CPU capture"), on traces of exactly known contents
 * written by tests/tracegen.c, then on a real recording:
 *  - st_reader_has_cpu, st_reader_cpu_thread: the cpu_threads row as
 *    written, 0 for a thread without one and for a trace without the tables;
 *  - st_cpu_iter: every record with its kind, time, stack and stage, the
 *    stage of a sample stored as "unknown" resolved from the thread's ranges
 *    (at a begin's time inside the new range, at an end's time outside the
 *    ended one), lost counts, a time window;
 *  - st_reader_cpu_stack, st_reader_cpu_frame_name and st_reader_cpu_map:
 *    frames, names, offsets, mappings;
 *  - a rank set: thread ids, stages and times as the set numbers them, stack
 *    ids part << 32 | the rank's id, leading back to the rank's frames;
 *  - hostile traces: each fault refused with one line naming the table;
 *  - a recording with st_options.cpu (skipped where perf events are refused):
 *    samples in a spinning stage whose stacks name the spinning function, a
 *    blocked switch-out inside a sleeping one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_reader.h"
#include "stagetrace.h"
#include "tracegen.h"
#include "traces.h"

static const uint64_t stack0[] = {0x401000, 0x401234, 0x400f00};
static const uint64_t stack2[] = {0x7f0000001000ull};

#define R_SW(k, t) {.kind = (k), .ts_ns = (t)}
#define R_S(t, st, sg) {.kind = ST_CPU_REC_SAMPLE, .ts_ns = (t), .stack = (st), .stage = (sg)}
#define R_U(t, st) {.kind = ST_CPU_REC_SAMPLE_UNKNOWN, .ts_ns = (t), .stack = (st)}

/* Thread w0: work [1000, 11000) holding wait [4000, 6000); w1 no CPU rows.
 * Chunk 1: out blocked 2000, in 3000, sample stack 0 in work 3500, unknown
 * stack 2 at 4000 (wait); chunk 2: unknown stack 1 at 6000 (work), out
 * preempted 7000, in 7500, lost 3 at 8000, unknown stack 0 at 11000 (none),
 * sample stack 0 with no stage at 12000. */
static tg_trace *cpu_trace(void)
{
    tg_trace *g = tg_create("cpugen");
    uint32_t work = tg_stage(g, "work", "work");
    uint32_t wait = tg_stage(g, "wait", "wait_input");
    uint32_t w0 = tg_thread(g, "w0", "worker");
    tg_thread(g, "w1", "worker");
    tg_begin(g, w0, work, 1000);
    tg_begin(g, w0, wait, 4000);
    tg_end(g, w0, 6000);
    tg_end(g, w0, 11000);
    tg_cpu_thread_row *t = tg_cpu_thread(g, w0, "perf", 1000000, 500, 9000);
    free(t->reason);
    t->reason = strdup("ring of 64 KiB refused: 32 KiB used");
    t->ring_bytes = 32768;
    t->refused_bytes = 65536;
    tg_cpu_stack(g, stack0, 3);
    tg_cpu_stack(g, NULL, 0);
    tg_cpu_stack(g, stack2, 1);
    const st_cpu_rec c1[] = {R_SW(ST_CPU_REC_OUT, 2000), R_SW(ST_CPU_REC_IN, 3000), R_S(3500, 0, work), R_U(4000, 2)};
    const st_cpu_rec c2[] = {R_U(6000, 1),
                             R_SW(ST_CPU_REC_PREEMPTED, 7000),
                             R_SW(ST_CPU_REC_IN, 7500),
                             {.kind = ST_CPU_REC_LOST, .ts_ns = 8000, .n = 3},
                             R_U(11000, 0),
                             R_S(12000, 0, ST_CPU_NO_STAGE)};
    tg_cpu_chunk(g, w0, c1, 4);
    tg_cpu_chunk(g, w0, c2, 6);
    tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "abcd");
    tg_cpu_map(g, 0x7f0000000000ull, 0x7f0000010000ull, 0x1000, "/lib/libx.so", "");
    tg_cpu_symbol(g, 0x401000, 0, "main", 0);
    tg_cpu_symbol(g, 0x401234, 0, "burn", 0x34);
    tg_cpu_symbol(g, 0x400f00, 0, "", 0);
    return g;
}

static void write_cpu_trace(const char *path)
{
    tg_trace *g = cpu_trace();
    tg_write(g, path);
    tg_free(g);
}

static st_reader *open_ok(const char *path)
{
    st_reader *r = NULL;
    if (st_reader_open(&r, path) != ST_OK) fail_msg("%s: %s", path, st_last_error());
    return r;
}

typedef struct want_row {
    uint32_t kind;
    int64_t ts;
    uint64_t stack;
    int32_t stage;
    uint32_t from_ranges;
    uint64_t lost;
} want_row;

static const want_row all_rows[] = {
    {ST_CPU_ROW_OUT_BLOCKED, 2000, 0, -1, 0, 0}, {ST_CPU_ROW_IN, 3000, 0, -1, 0, 0},
    {ST_CPU_ROW_SAMPLE, 3500, 0, 0, 0, 0},       {ST_CPU_ROW_SAMPLE, 4000, 2, 1, 1, 0},
    {ST_CPU_ROW_SAMPLE, 6000, 1, 0, 1, 0},       {ST_CPU_ROW_OUT_PREEMPTED, 7000, 0, -1, 0, 0},
    {ST_CPU_ROW_IN, 7500, 0, -1, 0, 0},          {ST_CPU_ROW_LOST, 8000, 0, -1, 0, 3},
    {ST_CPU_ROW_SAMPLE, 11000, 0, -1, 1, 0},     {ST_CPU_ROW_SAMPLE, 12000, 0, -1, 0, 0},
};

/* The rows of thread over [t0, t1) are want[0..n), thread ids as given. */
static void assert_rows(st_reader *r, uint32_t thread, int64_t t0, int64_t t1, const want_row *want, size_t n,
                        uint64_t stack_high)
{
    st_cpu_iter *it = NULL;
    assert_int_equal(st_cpu_iter_open(&it, r, thread, t0, t1), ST_OK);
    st_cpu_row row;
    size_t i = 0;
    int rc;
    while ((rc = st_cpu_iter_next(it, &row)) == 1) {
        assert_true(i < n);
        assert_int_equal(row.kind, want[i].kind);
        assert_int_equal(row.thread, thread);
        assert_int_equal(row.ts_ns, want[i].ts);
        if (row.kind == ST_CPU_ROW_SAMPLE) assert_int_equal(row.stack, want[i].stack | stack_high);
        else assert_int_equal(row.stack, 0);
        assert_int_equal(row.stage, want[i].stage);
        assert_int_equal(row.stage_from_ranges, want[i].from_ranges);
        assert_int_equal(row.n_lost, want[i].lost);
        i++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(i, n);
    st_cpu_iter_close(it);
}

static void test_file(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "cpu.sqlite");
    write_cpu_trace(path);
    st_reader *r = open_ok(path);
    assert_int_equal(st_reader_has_cpu(r), 1);
    st_cpu_thread_info ti;
    assert_int_equal(st_reader_cpu_thread(r, 0, &ti), 1);
    assert_int_equal(ti.thread, 0);
    assert_int_equal(ti.os_tid, 1000);
    assert_string_equal(ti.status, "perf");
    assert_string_equal(ti.reason, "ring of 64 KiB refused: 32 KiB used");
    assert_int_equal(ti.period_ns, 1000000);
    assert_int_equal(ti.ring_bytes, 32768);
    assert_int_equal(ti.refused_bytes, 65536);
    assert_int_equal(ti.start_ns, 500);
    assert_int_equal(ti.cpu_ns, 9000);
    assert_int_equal(ti.switches, 4);
    assert_int_equal(ti.samples, 5);
    assert_int_equal(ti.lost, 3);
    assert_int_equal(st_reader_cpu_thread(r, 1, &ti), 0);
    assert_int_equal(st_reader_cpu_thread(r, 7, &ti), 0);

    assert_rows(r, 0, INT64_MIN, INT64_MAX, all_rows, 10, 0);
    assert_rows(r, 0, 3500, 7000, all_rows + 2, 3, 0); /* [3500, 7000): 7000 left out */
    assert_rows(r, 0, 13000, INT64_MAX, NULL, 0, 0);
    assert_rows(r, 1, INT64_MIN, INT64_MAX, NULL, 0, 0);
    assert_rows(r, 9, INT64_MIN, INT64_MAX, NULL, 0, 0);

    const uint64_t *f;
    uint32_t n;
    assert_int_equal(st_reader_cpu_stack(r, 0, &f, &n), ST_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(f[i], stack0[i]);
    assert_int_equal(st_reader_cpu_stack(r, 1, &f, &n), ST_OK);
    assert_int_equal(n, 0);
    assert_int_equal(st_reader_cpu_stack(r, 2, &f, &n), ST_OK);
    assert_int_equal(n, 1);
    assert_int_equal(f[0], 0x7f0000001000ull);
    assert_int_equal(st_reader_cpu_stack(r, 3, &f, &n), ST_EINVAL);
    assert_int_equal(st_reader_cpu_stack(r, 1ull << 32, &f, &n), ST_EINVAL);

    st_cpu_frame fr;
    assert_int_equal(st_reader_cpu_frame_name(r, 0, 0x401234, &fr), 1);
    assert_string_equal(fr.name, "burn");
    assert_int_equal(fr.sym_offset, 0x34);
    assert_int_equal(fr.map, 0);
    assert_string_equal(fr.path, "/bin/prog");
    assert_string_equal(fr.build_id, "abcd");
    assert_int_equal(fr.file_offset, 0x1234);
    assert_int_equal(st_reader_cpu_frame_name(r, 0, 0x400f00, &fr), 1); /* a row without a name */
    assert_string_equal(fr.name, "");
    assert_string_equal(fr.path, "/bin/prog");
    assert_int_equal(st_reader_cpu_frame_name(r, 2, 0x7f0000001000ull, &fr), 0); /* no row: the mapping */
    assert_string_equal(fr.name, "");
    assert_int_equal(fr.map, 1);
    assert_string_equal(fr.path, "/lib/libx.so");
    assert_string_equal(fr.build_id, "");
    assert_int_equal(fr.file_offset, 0x2000);
    assert_int_equal(st_reader_cpu_frame_name(r, 0, 0x10, &fr), 0);
    assert_int_equal(fr.map, -1);
    assert_string_equal(fr.path, "");
    st_cpu_map m;
    assert_int_equal(st_reader_cpu_map(r, 0, 1, &m), 1);
    assert_int_equal(m.id, 1);
    assert_int_equal(m.start, 0x7f0000000000ull);
    assert_int_equal(m.end, 0x7f0000010000ull);
    assert_int_equal(m.file_offset, 0x1000);
    assert_string_equal(m.path, "/lib/libx.so");
    assert_int_equal(st_reader_cpu_map(r, 0, 0, &m), 1);
    assert_string_equal(m.build_id, "abcd");
    assert_int_equal(st_reader_cpu_map(r, 0, 7, &m), 0);
    assert_int_equal(m.id, -1);
    st_reader_close(r);
}

static void test_no_cpu(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "nocpu.sqlite");
    tg_trace *g = trace_rank(0);
    tg_write(g, path);
    tg_free(g);
    st_reader *r = open_ok(path);
    assert_int_equal(st_reader_has_cpu(r), 0);
    st_cpu_thread_info ti;
    assert_int_equal(st_reader_cpu_thread(r, 0, &ti), 0);
    assert_rows(r, 0, INT64_MIN, INT64_MAX, NULL, 0, 0);
    const uint64_t *f;
    uint32_t n;
    assert_int_equal(st_reader_cpu_stack(r, 0, &f, &n), ST_EINVAL);
    st_cpu_frame fr;
    assert_int_equal(st_reader_cpu_frame_name(r, 0, 0x401000, &fr), 0);
    st_reader_close(r);
}

/* Two ranks; rank 1's worker0 has CPU records: rank 1 is part 1, its
 * worker0 the set's thread 5. Rank 1 has a stage of its own first, so that
 * its compute is a different id in the set than in the file. */
static void test_set(void **state)
{
    (void)state;
    char p0[PATH_MAX], p1[PATH_MAX];
    tmp_path(p0, sizeof p0, "rank0.sqlite");
    tmp_path(p1, sizeof p1, "rank1.sqlite");
    tg_trace *g = trace_rank(0);
    tg_write(g, p0);
    tg_free(g);
    g = trace_rank(1);
    uint32_t own = tg_stage(g, "rank1_only", "work");
    uint32_t worker = 2;
    tg_range(g, worker, own, BASE_NS + 300 * MS, BASE_NS + 301 * MS);
    tg_cpu_thread(g, worker, "perf", 1000000, BASE_NS, 5 * MS);
    tg_cpu_stack(g, stack0, 3);
    tg_cpu_stack(g, stack2, 1);
    const st_cpu_rec c[] = {R_U(BASE_NS + 12 * MS, 1), R_S(BASE_NS + 300 * MS, 0, own),
                            R_SW(ST_CPU_REC_OUT, BASE_NS + 302 * MS)};
    tg_cpu_chunk(g, worker, c, 3);
    tg_cpu_map(g, 0x7f0000000000ull, 0x7f0000010000ull, 0, "/lib/r1.so", "");
    tg_cpu_symbol(g, 0x7f0000001000ull, 0, "r1_fn", 0);
    tg_write(g, p1);
    tg_free(g);
    st_reader *in[2] = {open_ok(p0), open_ok(p1)};
    int ranks[2] = {0, 1};
    st_reader *set = NULL;
    assert_int_equal(st_reader_open_set(&set, in, ranks, 2), ST_OK);
    assert_int_equal(st_reader_has_cpu(set), 1);
    uint32_t part, local;
    assert_int_equal(st_reader_thread_part(set, 5, &part, &local), ST_OK);
    assert_int_equal(part, 1);
    assert_int_equal(local, 2);
    st_cpu_thread_info ti;
    assert_int_equal(st_reader_cpu_thread(set, 2, &ti), 0);
    assert_int_equal(st_reader_cpu_thread(set, 5, &ti), 1);
    assert_int_equal(ti.thread, 5);
    assert_int_equal(ti.start_ns, BASE_NS);
    int32_t compute = -1, own_set = -1;
    for (uint32_t s = 0; s < st_reader_n_stages(set); s++) {
        if (strcmp(st_reader_stage(set, s)->name, "compute") == 0) compute = (int32_t)s;
        if (strcmp(st_reader_stage(set, s)->name, "rank1_only") == 0) own_set = (int32_t)s;
    }
    assert_true(compute >= 0 && own_set >= 0);
    const want_row want[] = {{ST_CPU_ROW_SAMPLE, BASE_NS + 12 * MS, 1, compute, 1, 0},
                             {ST_CPU_ROW_SAMPLE, BASE_NS + 300 * MS, 0, own_set, 0, 0},
                             {ST_CPU_ROW_OUT_BLOCKED, BASE_NS + 302 * MS, 0, -1, 0, 0}};
    assert_rows(set, 5, INT64_MIN, INT64_MAX, want, 3, 1ull << 32);
    assert_rows(set, 5, BASE_NS + 100 * MS, INT64_MAX, want + 1, 2, 1ull << 32);
    assert_rows(set, 2, INT64_MIN, INT64_MAX, NULL, 0, 0);
    const uint64_t *f;
    uint32_t n;
    assert_int_equal(st_reader_cpu_stack(set, (1ull << 32) | 1, &f, &n), ST_OK);
    assert_int_equal(n, 1);
    assert_int_equal(f[0], 0x7f0000001000ull);
    assert_int_equal(st_reader_cpu_stack(set, 1, &f, &n), ST_EINVAL); /* rank 0 has no stacks */
    assert_int_equal(st_reader_cpu_stack(set, 2ull << 32, &f, &n), ST_EINVAL);
    st_cpu_frame fr;
    assert_int_equal(st_reader_cpu_frame_name(set, (1ull << 32) | 1, 0x7f0000001000ull, &fr), 1);
    assert_string_equal(fr.name, "r1_fn");
    assert_string_equal(fr.path, "/lib/r1.so");
    assert_int_equal(st_reader_cpu_frame_name(set, 1, 0x7f0000001000ull, &fr), 0); /* rank 0's process */
    st_cpu_map m;
    assert_int_equal(st_reader_cpu_map(set, (1ull << 32) | 1, 0, &m), 1);
    assert_string_equal(m.path, "/lib/r1.so");
    assert_int_equal(m.start, 0x7f0000000000ull);
    assert_int_equal(st_reader_cpu_map(set, 1, 0, &m), 0); /* rank 0 has no maps */
    assert_int_equal(st_reader_cpu_map(set, 2ull << 32, 0, &m), ST_EINVAL);
    st_reader_close(set);
}

/* ---- hostile traces ---- */

/* The error met by reading everything CPU of thread 0 (has_cpu, the rows,
 * stacks 0..2, frame names of stack 0), or ST_OK. */
static int read_all(st_reader *r)
{
    int rc = st_reader_has_cpu(r);
    if (rc < 0) return rc;
    st_cpu_thread_info ti;
    if ((rc = st_reader_cpu_thread(r, 0, &ti)) < 0) return rc;
    st_cpu_iter *it;
    if ((rc = st_cpu_iter_open(&it, r, 0, INT64_MIN, INT64_MAX))) return rc;
    st_cpu_row row;
    while ((rc = st_cpu_iter_next(it, &row)) == 1) {
    }
    st_cpu_iter_close(it);
    if (rc < 0) return rc;
    st_cpu_frame fr;
    for (int i = 0; i < 3; i++)
        if ((rc = st_reader_cpu_frame_name(r, 0, stack0[i], &fr)) < 0) return rc;
    return ST_OK;
}

static void test_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *sql, *error;
    } cases[] = {
        {"UPDATE cpu_chunks SET data = x'5001' WHERE id = 1",
         "trace table 'cpu_chunks': chunk 1 (thread 0) is corrupt or truncated"},
        {"UPDATE cpu_chunks SET data = x'4f' WHERE id = 2", "trace table 'cpu_chunks': chunk 2 (thread 0) is corrupt or truncated"},
        {"UPDATE cpu_chunks SET n_records = 5 WHERE id = 1",
         "trace table 'cpu_chunks': chunk 1 (thread 0) is corrupt or truncated"},
        {"UPDATE cpu_chunks SET n_records = 'x' WHERE id = 1",
         "trace table 'cpu_chunks': chunk 1: column 'n_records' is text, not an integer"},
        {"UPDATE cpu_chunks SET thread = 9 WHERE id = 2", "trace table 'cpu_chunks': chunk 2 names unknown thread 9"},
        {"DELETE FROM cpu_stacks WHERE id = 2", "trace table 'cpu_chunks': chunk 1 (thread 0) names unknown stack 2"},
        {"UPDATE cpu_stacks SET n_frames = 2 WHERE id = 0", "trace table 'cpu_stacks': stack 0: its frames are corrupt or truncated"},
        {"UPDATE cpu_stacks SET n_frames = 99999 WHERE id = 0",
         "trace table 'cpu_stacks': stack 0: column 'n_frames' is out of range"},
        {"UPDATE cpu_stacks SET data = 'abc' WHERE id = 0", "trace table 'cpu_stacks': stack 0: column 'data' is not a blob"},
        {"UPDATE cpu_threads SET status = x'00'", "trace table 'cpu_threads': row 1 (thread 0): column 'status' is a blob, not text"},
        {"UPDATE cpu_threads SET thread = 7", "trace table 'cpu_threads': chunk 7 names unknown thread 7"},
        {"UPDATE cpu_symbols SET map = 5 WHERE addr = 4198400",
         "trace table 'cpu_symbols': address 0x401000 names unknown map 5"},
        {"UPDATE cpu_maps SET start = 5000000 WHERE id = 0", "trace table 'cpu_maps': map 0: start is above end"},
        {"UPDATE cpu_maps SET path = x'01' WHERE id = 0", "trace table 'cpu_maps': row 1 (id 0): column 'path' is a blob, not text"},
        {"DROP TABLE cpu_maps",
         "trace table 'cpu_maps': it is missing (the CPU capture's five tables come together)"},
        {"DROP TABLE cpu_symbols; CREATE VIEW cpu_symbols AS SELECT 1 AS addr, 0 AS map, 0 AS file_offset, '' AS name, 0 AS sym_offset",
         "trace table 'cpu_symbols': it is a view, not a plain table"},
        {"ALTER TABLE cpu_threads RENAME COLUMN lost TO lost2", "trace table 'cpu_threads': it has no column 'lost'"},
    };
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "hostile.sqlite");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_cpu_trace(path);
        tg_exec(path, cases[i].sql);
        st_reader *r = open_ok(path); /* the CPU tables are checked as they are read */
        int rc = read_all(r);
        if (rc != ST_ECORRUPT || strcmp(st_last_error(), cases[i].error) != 0)
            fail_msg("case %zu (%s): rc %d, '%s'", i, cases[i].sql, rc, st_last_error());
        st_reader_close(r);
    }
    write_cpu_trace(path);
    st_reader *r = open_ok(path);
    assert_int_equal(read_all(r), ST_OK);
    st_reader_close(r);
}

/* ---- a real recording ---- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline, noclone, optimize("no-omit-frame-pointer"))) static uint64_t reader_cpu_spin(int64_t until)
{
    uint64_t x = 1;
    while (now_ns() < until) /* the clock read now and then: samples land in this function, not the vDSO */
        for (int i = 0; i < 200000; i++) {
            x = x * 6364136223846793005ull + 1;
            __asm__ volatile("" : "+r"(x));
        }
    return x;
}

static void test_recording(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "rec.sqlite");
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_reader_cpu";
    opt.cpu = 1;
    opt.cpu_period_ns = 1000000;
    st_trace *t;
    assert_int_equal(st_open(&t, &opt), ST_OK);
    int spin = st_stage_register(t, "spin", ST_WORK);
    int sleep_ = st_stage_register(t, "sleep", ST_WAIT_INPUT);
    assert_true(st_thread_register(t, "main", "worker", -1, 0) >= 0);
    volatile uint64_t sink = 0;
    for (int k = 0; k < 2; k++) {
        st_begin((uint32_t)spin);
        sink = sink + reader_cpu_spin(now_ns() + 80000000);
        st_end((uint32_t)spin);
        st_begin((uint32_t)sleep_);
        usleep(40000);
        st_end((uint32_t)sleep_);
    }
    assert_int_equal(st_close(t), ST_OK);
    st_reader *r = open_ok(path);
    assert_int_equal(st_reader_has_cpu(r), 1);
    st_cpu_thread_info ti;
    assert_int_equal(st_reader_cpu_thread(r, 0, &ti), 1);
    if (strcmp(ti.status, "perf") != 0) {
        st_reader_close(r);
        skip(); /* perf events refused here: nothing recorded to read */
    }
    /* the ranges, to check where the blocked switch-outs fall */
    int64_t sleep_start[2], sleep_end[2];
    int ns = 0;
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    while (st_range_iter_next(ri, &rg) == 1)
        if ((int)rg.stage == sleep_ && ns < 2) {
            sleep_start[ns] = rg.start_ns;
            sleep_end[ns++] = rg.start_ns + rg.dur_ns;
        }
    st_range_iter_close(ri);
    assert_int_equal(ns, 2);
    st_cpu_iter *it;
    assert_int_equal(st_cpu_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_cpu_row row;
    int rc, spin_samples = 0, spin_named = 0, blocked_in_sleep = 0, samples = 0;
    int64_t prev = INT64_MIN;
    while ((rc = st_cpu_iter_next(it, &row)) == 1) {
        assert_true(row.ts_ns >= prev);
        prev = row.ts_ns;
        if (row.kind == ST_CPU_ROW_OUT_BLOCKED)
            for (int k = 0; k < 2; k++) blocked_in_sleep += row.ts_ns >= sleep_start[k] && row.ts_ns < sleep_end[k];
        if (row.kind != ST_CPU_ROW_SAMPLE) continue;
        samples++;
        const uint64_t *f;
        uint32_t n;
        assert_int_equal(st_reader_cpu_stack(r, row.stack, &f, &n), ST_OK);
        if (row.stage != spin) continue;
        spin_samples++;
        for (uint32_t i = 0; i < n; i++) {
            st_cpu_frame fr;
            assert_true(st_reader_cpu_frame_name(r, row.stack, f[i], &fr) >= 0);
            if (strcmp(fr.name, "reader_cpu_spin") == 0) {
                spin_named++;
                break;
            }
        }
    }
    assert_int_equal(rc, 0);
    st_cpu_iter_close(it);
    assert_int_equal(samples, ti.samples);
    /* 160 ms of spinning at 1 kHz: at least a few dozen samples even on a loaded host */
    assert_true(spin_samples >= 30);
    assert_true(spin_named * 10 >= spin_samples * 8);
    assert_true(blocked_in_sleep >= 2);
    st_reader_close(r);
}

int main(void)
{
    if (make_tmp_dir("test_reader_cpu")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file),   cmocka_unit_test(test_no_cpu),   cmocka_unit_test(test_set),
        cmocka_unit_test(test_hostile), cmocka_unit_test(test_recording),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
