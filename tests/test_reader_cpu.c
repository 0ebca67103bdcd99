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
 *  - cpu_blocks and cpu_windows (rows inserted after tracegen wrote the
 *    trace): a thread's blocks in time order with every column, a window
 *    of them, none for an unknown thread; every window row with its thread
 *    (-1 unregistered); a trace of the five older tables only: no rows; in
 *    a rank set whose rank 1 runs 2 ms ahead: that rank's rows, times on
 *    rank 0's clock (2 ms earlier), threads the set's, part and rank;
 *    hostile rows (wrong types, negative or reversed times, unknown
 *    threads, a view) refused with one line, never a crash;
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

/* ---- cpu_blocks and cpu_windows ---- */

static const char blocks_sql[] =
    "INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) VALUES "
    "(0, 7000, 9000, 0, 'read', 5, 4096, 'anon_pipe_read'),"
    "(0, 2000, 3500, 202, 'futex', 140737488350000, 393, 'futex_do_wait'),"
    "(1, 2500, 4000, -1, '', 0, 0, '');"
    "INSERT INTO cpu_windows VALUES "
    "(0, -1, 0, 5000, 1000, 0, 'w0', 3000, 100, 4),"
    "(0, -1, 0, 5000, 1500, -1, 'helper', 200, 0, 1),"
    "(1, 3, 5000, 12000, 1000, 0, 'w0', 6000, 500, 9);";

static void assert_block(const st_cpu_block_row *b, uint32_t thread, int64_t t, int64_t seen, int64_t nr,
                         const char *name, int64_t a0, int64_t a1, const char *wchan)
{
    assert_int_equal(b->thread, thread);
    assert_int_equal(b->t_ns, t);
    assert_int_equal(b->seen_ns, seen);
    assert_int_equal(b->syscall, nr);
    assert_string_equal(b->name, name);
    assert_int_equal(b->arg0, a0);
    assert_int_equal(b->arg1, a1);
    assert_string_equal(b->wchan, wchan);
}

/* The blocks of thread over [t0, t1): their count, the first two kept. */
static int read_blocks(st_reader *r, uint32_t thread, int64_t t0, int64_t t1, st_cpu_block_row *first, char *names)
{
    st_cpu_block_iter *it;
    int rc = st_cpu_block_iter_open(&it, r, thread, t0, t1);
    if (rc) return rc;
    st_cpu_block_row b;
    int n = 0;
    while ((rc = st_cpu_block_iter_next(it, &b)) == 1) {
        if (n < 2 && first) {
            first[n] = b;
            strcpy(names + 64 * n, b.name); /* valid until the next call */
            first[n].name = names + 64 * n;
            strcpy(names + 128 + 64 * n, b.wchan);
            first[n].wchan = names + 128 + 64 * n;
        }
        n++;
    }
    st_cpu_block_iter_close(it);
    return rc < 0 ? rc : n;
}

static int read_windows(st_reader *r, st_cpu_window_row *out, char *names, int max)
{
    st_cpu_window_iter *it;
    int rc = st_cpu_window_iter_open(&it, r);
    if (rc) return rc;
    st_cpu_window_row w;
    int n = 0;
    while ((rc = st_cpu_window_iter_next(it, &w)) == 1) {
        if (n < max && out) {
            out[n] = w;
            snprintf(names + 32 * n, 32, "%s", w.name);
            out[n].name = names + 32 * n;
        }
        n++;
    }
    st_cpu_window_iter_close(it);
    return rc < 0 ? rc : n;
}

static void test_blocks_windows(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "blocks.sqlite");
    write_cpu_trace(path);
    tg_exec(path, blocks_sql);
    st_reader *r = open_ok(path);
    st_cpu_block_row b[2];
    char names[256];
    assert_int_equal(read_blocks(r, 0, INT64_MIN, INT64_MAX, b, names), 2);
    assert_block(&b[0], 0, 2000, 3500, 202, "futex", 140737488350000, 393, "futex_do_wait");
    assert_block(&b[1], 0, 7000, 9000, 0, "read", 5, 4096, "anon_pipe_read");
    assert_int_equal(read_blocks(r, 0, 2001, 7001, b, names), 1); /* [t0, t1) of t_ns */
    assert_int_equal(b[0].t_ns, 7000);
    assert_int_equal(read_blocks(r, 0, 0, 2000, NULL, NULL), 0);
    assert_int_equal(read_blocks(r, 1, INT64_MIN, INT64_MAX, b, names), 1);
    assert_block(&b[0], 1, 2500, 4000, -1, "", 0, 0, "");
    assert_int_equal(read_blocks(r, 9, INT64_MIN, INT64_MAX, NULL, NULL), 0);
    st_cpu_window_row w[3];
    char wn[96];
    assert_int_equal(read_windows(r, w, wn, 3), 3);
    assert_int_equal(w[0].window, 0);
    assert_int_equal(w[0].step, -1);
    assert_int_equal(w[0].t0_ns, 0);
    assert_int_equal(w[0].t1_ns, 5000);
    assert_int_equal(w[0].os_tid, 1000);
    assert_int_equal(w[0].thread, 0);
    assert_string_equal(w[0].name, "w0");
    assert_int_equal(w[0].oncpu_ns, 3000);
    assert_int_equal(w[0].runq_ns, 100);
    assert_int_equal(w[0].slices, 4);
    assert_int_equal(w[0].part, 0);
    assert_int_equal(w[0].rank, -1);
    assert_int_equal(w[1].os_tid, 1500);
    assert_int_equal(w[1].thread, -1);
    assert_string_equal(w[1].name, "helper");
    assert_int_equal(w[2].window, 1);
    assert_int_equal(w[2].step, 3);
    assert_int_equal(w[2].oncpu_ns, 6000);
    st_reader_close(r);
    /* the five older tables only; no CPU tables at all */
    write_cpu_trace(path);
    tg_exec(path, "DROP TABLE cpu_blocks; DROP TABLE cpu_windows");
    r = open_ok(path);
    assert_int_equal(read_blocks(r, 0, INT64_MIN, INT64_MAX, NULL, NULL), 0);
    assert_int_equal(read_windows(r, NULL, NULL, 0), 0);
    assert_int_equal(read_all(r), ST_OK);
    st_reader_close(r);
    tg_trace *g = trace_rank(0);
    tg_write(g, path);
    tg_free(g);
    r = open_ok(path);
    assert_int_equal(read_blocks(r, 0, INT64_MIN, INT64_MAX, NULL, NULL), 0);
    assert_int_equal(read_windows(r, NULL, NULL, 0), 0);
    st_reader_close(r);
}

/* Rank 1 two milliseconds ahead of rank 0 (its clock_offset_ns): its
 * worker0 (the set's thread 5) has a block and a window row. */
static void test_blocks_windows_set(void **state)
{
    (void)state;
    char p0[PATH_MAX], p1[PATH_MAX];
    tmp_path(p0, sizeof p0, "brank0.sqlite");
    tmp_path(p1, sizeof p1, "brank1.sqlite");
    tg_trace *g = trace_rank(0);
    tg_write(g, p0);
    tg_free(g);
    g = trace_rank(1);
    tg_meta_int(g, "clock_sync_ns", BASE_NS);
    tg_meta_int(g, "clock_offset_ns", -2 * MS);
    tg_meta_int(g, "clock_uncertainty_ns", 1000);
    tg_cpu_thread(g, 2, "perf", 1000000, BASE_NS, 5 * MS);
    tg_write(g, p1);
    tg_free(g);
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) VALUES "
             "(2, %lld, %lld, 202, 'futex', 1, 2, 'futex_do_wait');"
             "INSERT INTO cpu_windows VALUES (0, 1, %lld, %lld, 4242, 2, 'worker0', 7, 8, 9),"
             "(0, 1, %lld, %lld, 4343, -1, 'cuda-evt', 1, 0, 1);",
             (long long)(BASE_NS + 50 * MS), (long long)(BASE_NS + 52 * MS), (long long)BASE_NS,
             (long long)(BASE_NS + 100 * MS), (long long)BASE_NS, (long long)(BASE_NS + 100 * MS));
    tg_exec(p1, sql);
    st_reader *in[2] = {open_ok(p0), open_ok(p1)};
    int ranks[2] = {0, 1};
    st_reader *set = NULL;
    assert_int_equal(st_reader_open_set(&set, in, ranks, 2), ST_OK);
    st_rank_clock c;
    st_reader_rank_clock(st_reader_part(set, 1), &c);
    int64_t t, seen, w0, w1;
    assert_int_equal(st_rank_clock_map(&c, BASE_NS + 50 * MS, &t), ST_OK);
    assert_int_equal(st_rank_clock_map(&c, BASE_NS + 52 * MS, &seen), ST_OK);
    assert_int_equal(st_rank_clock_map(&c, BASE_NS, &w0), ST_OK);
    assert_int_equal(st_rank_clock_map(&c, BASE_NS + 100 * MS, &w1), ST_OK);
    assert_true(t != BASE_NS + 50 * MS); /* the mapping moves it */
    st_cpu_block_row b[2];
    char names[256];
    assert_int_equal(read_blocks(set, 5, INT64_MIN, INT64_MAX, b, names), 1);
    assert_block(&b[0], 5, t, seen, 202, "futex", 1, 2, "futex_do_wait");
    assert_int_equal(read_blocks(set, 5, t + 1, INT64_MAX, NULL, NULL), 0);
    assert_int_equal(read_blocks(set, 5, t, t + 1, NULL, NULL), 1);
    assert_int_equal(read_blocks(set, 2, INT64_MIN, INT64_MAX, NULL, NULL), 0); /* rank 0's worker0 */
    assert_int_equal(read_blocks(set, 99, INT64_MIN, INT64_MAX, NULL, NULL), 0);
    st_cpu_window_row w[2];
    char wn[64];
    assert_int_equal(read_windows(set, w, wn, 2), 2);
    assert_int_equal(w[0].os_tid, 4242);
    assert_int_equal(w[0].thread, 5);
    assert_int_equal(w[0].t0_ns, w0);
    assert_int_equal(w[0].t1_ns, w1);
    assert_int_equal(w[0].part, 1);
    assert_int_equal(w[0].rank, 1);
    assert_string_equal(w[0].name, "worker0");
    assert_int_equal(w[1].thread, -1);
    assert_string_equal(w[1].name, "cuda-evt");
    st_reader_close(set);
}

static void test_blocks_windows_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *sql, *error;
    } cases[] = {
        {"UPDATE cpu_blocks SET t_ns = 'x' WHERE thread = 0 AND t_ns = 2000",
         "trace table 'cpu_blocks': row id 2: column 't_ns' is text, not an integer"},
        {"UPDATE cpu_blocks SET name = x'41' WHERE t_ns = 7000", "trace table 'cpu_blocks': row id 1: column 'name' is a blob, not text"},
        {"CREATE TABLE x AS SELECT * FROM cpu_blocks; UPDATE x SET wchan = NULL WHERE t_ns = 7000; DROP TABLE cpu_blocks; "
         "ALTER TABLE x RENAME TO cpu_blocks",
         "trace table 'cpu_blocks': row id 1: column 'wchan' is null, not text"},
        {"UPDATE cpu_blocks SET arg1 = 1.5 WHERE t_ns = 7000",
         "trace table 'cpu_blocks': row id 1: column 'arg1' is a real, not an integer"},
        {"UPDATE cpu_blocks SET t_ns = -5, seen_ns = 0 WHERE t_ns = 2000",
         "trace table 'cpu_blocks': row id 2: t_ns is negative"},
        {"UPDATE cpu_blocks SET seen_ns = 1999 WHERE t_ns = 2000",
         "trace table 'cpu_blocks': row id 2: seen_ns is before t_ns"},
        {"UPDATE cpu_blocks SET syscall = -2 WHERE t_ns = 2000", "trace table 'cpu_blocks': row id 2: syscall is below -1"},
        {"UPDATE cpu_blocks SET name = printf('%.300c', 'a') WHERE t_ns = 2000",
         "trace table 'cpu_blocks': row id 2: name is too long"},
        {"UPDATE cpu_blocks SET thread = 9 WHERE t_ns = 2500", "trace table 'cpu_blocks': chunk 3 names unknown thread 9"},
        {"UPDATE cpu_blocks SET thread = 'w0' WHERE t_ns = 2500",
         "trace table 'cpu_blocks': row 3 (id 3): column 'thread' is text, not an integer"},
        {"DROP TABLE cpu_blocks; CREATE VIEW cpu_blocks AS SELECT 1 AS id, 0 AS thread, 0 AS t_ns, 0 AS seen_ns, "
         "0 AS syscall, '' AS name, 0 AS arg0, 0 AS arg1, '' AS wchan",
         "trace table 'cpu_blocks': it is a view, not a plain table"},
        {"ALTER TABLE cpu_blocks DROP COLUMN wchan", "trace table 'cpu_blocks': it has no column 'wchan'"},
        {"UPDATE cpu_windows SET oncpu_ns = 'lots' WHERE os_tid = 1500",
         "trace table 'cpu_windows': row (window 0, os_tid 1500): column 'oncpu_ns' is text, not an integer"},
        {"UPDATE cpu_windows SET window = 'a' WHERE os_tid = 1500",
         "trace table 'cpu_windows': a row: column 'window' is text, not an integer"},
        {"UPDATE cpu_windows SET window = -1 WHERE os_tid = 1500",
         "trace table 'cpu_windows': row (window -1, os_tid 1500): window is negative"},
        {"UPDATE cpu_windows SET t1_ns = 10 WHERE window = 1",
         "trace table 'cpu_windows': row (window 1, os_tid 1000): t1_ns is before t0_ns"},
        {"UPDATE cpu_windows SET t0_ns = -10 WHERE window = 1",
         "trace table 'cpu_windows': row (window 1, os_tid 1000): t0_ns is negative"},
        {"UPDATE cpu_windows SET runq_ns = -1 WHERE window = 1",
         "trace table 'cpu_windows': row (window 1, os_tid 1000): runq_ns is negative"},
        {"UPDATE cpu_windows SET step = -7 WHERE window = 1",
         "trace table 'cpu_windows': row (window 1, os_tid 1000): step is below -1"},
        {"UPDATE cpu_windows SET os_tid = 0 WHERE os_tid = 1500",
         "trace table 'cpu_windows': row (window 0, os_tid 0): os_tid is not positive"},
        {"UPDATE cpu_windows SET thread = 4 WHERE os_tid = 1500",
         "trace table 'cpu_windows': row (window 0, os_tid 1500) names unknown thread 4"},
        {"UPDATE cpu_windows SET thread = -2 WHERE os_tid = 1500",
         "trace table 'cpu_windows': row (window 0, os_tid 1500) names unknown thread -2"},
        {"ALTER TABLE cpu_windows RENAME COLUMN slices TO s2", "trace table 'cpu_windows': it has no column 'slices'"},
    };
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bhostile.sqlite");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_cpu_trace(path);
        tg_exec(path, blocks_sql);
        tg_exec(path, cases[i].sql);
        st_reader *r = open_ok(path);
        int rc = read_blocks(r, 0, INT64_MIN, INT64_MAX, NULL, NULL);
        if (rc >= 0) rc = read_blocks(r, 1, INT64_MIN, INT64_MAX, NULL, NULL);
        if (rc >= 0) rc = read_windows(r, NULL, NULL, 0);
        if (rc != ST_ECORRUPT || strcmp(st_last_error(), cases[i].error) != 0)
            fail_msg("case %zu (%s): rc %d, '%s'", i, cases[i].sql, rc, st_last_error());
        st_reader_close(r);
    }
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
        cmocka_unit_test(test_hostile), cmocka_unit_test(test_blocks_windows), cmocka_unit_test(test_blocks_windows_set),
        cmocka_unit_test(test_blocks_windows_hostile), cmocka_unit_test(test_recording),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
