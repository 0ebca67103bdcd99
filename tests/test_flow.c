/* test_flow.c: tests of analyze/flow.c, the items followed through the
 * pipeline (docs/analyze.md, "flow"), on a hand-made trace whose every
 * number is worked out by hand: pairing (an out alone, an in alone, an id
 * repeated, an in before its out), chaining handoffs into items, items in
 * flight, and one step's critical path through two queues.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_schema.h"
#include "tracegen.h"

#include "../analyze/flow.h"

typedef struct frec {
    uint32_t dir;
    int64_t ts;
    uint64_t id;
} frec;

/* One flow chunk of thread `thread` with these records, as the writer encodes them. */
static void add_flow_chunk(sqlite3 *db, int64_t thread, const frec *r, size_t n)
{
    st_flow_encoder e;
    memset(&e, 0, sizeof e);
    assert_int_equal(st_flow_chunk_start(&e), 0);
    for (size_t i = 0; i < n; i++) assert_int_equal(st_flow_put(&e, r[i].dir, r[i].ts, r[i].id), 0);
    sqlite3_stmt *st = prepare(db, "INSERT INTO flow_chunks(thread, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?)");
    sqlite3_bind_int64(st, 1, thread);
    sqlite3_bind_int64(st, 2, e.t0_ns);
    sqlite3_bind_int64(st, 3, e.t1_ns);
    sqlite3_bind_int64(st, 4, e.n_records);
    sqlite3_bind_blob(st, 5, e.buf.data, (int)e.buf.len, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    st_buf_free(&e.buf);
}

enum { OUT = ST_FLOW_OUT, IN = ST_FLOW_IN };

/* loader -> target -> drafter: item A (ids 1 and 2) goes through both
 * queues; id 100 only leaves, 200 only arrives, 300 leaves twice, 400
 * arrives before it leaves. */
static void write_pipeline(const char *path)
{
    tg_trace *g = tg_create("flowtest");
    uint32_t load = tg_stage(g, "load", "work"), put = tg_stage(g, "queue_put", "wait_output");
    uint32_t bwait = tg_stage(g, "batch_wait", "wait_input"), fwd = tg_stage(g, "forward", "work");
    uint32_t qwait = tg_stage(g, "queue_wait", "wait_input"), train = tg_stage(g, "train", "work");
    uint32_t loader = tg_thread(g, "loader", "loader"), target = tg_thread(g, "target0", "target");
    uint32_t drafter = tg_thread(g, "drafter0", "drafter");
    tg_range(g, loader, load, 0, 100);
    tg_range(g, loader, put, 100, 110);
    tg_range(g, target, bwait, 50, 120);
    tg_range(g, target, fwd, 125, 200);
    tg_range(g, target, put, 200, 210);
    tg_range(g, drafter, qwait, 150, 220);
    tg_range(g, drafter, train, 225, 400);
    tg_step(g, 0, 0, 0);
    tg_step(g, 1, 410, 64);
    tg_write(g, path);
    tg_free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, st_flow_schema_sql);
    const frec lo[] = {{OUT, 105, 1}, {OUT, 300, 100}, {OUT, 310, 300}, {OUT, 320, 300}, {OUT, 340, 400}};
    const frec ta[] = {{IN, 121, 1}, {OUT, 205, 2}, {IN, 330, 300}, {IN, 335, 400}};
    const frec dr[] = {{IN, 221, 2}, {IN, 402, 200}};
    add_flow_chunk(db, loader, lo, 5);
    add_flow_chunk(db, target, ta, 4);
    add_flow_chunk(db, drafter, dr, 2);
    sqlite3_close(db);
}

static void test_pairs_and_items(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "flow.sqlite");
    write_pipeline(path);
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), AN_EXIT_OK);
    an_flow f;
    assert_int_equal(an_flow_load(&f, &t), AN_EXIT_OK);
    assert_int_equal(f.n_recs, 11);
    assert_int_equal(f.n_ids, 6);
    assert_int_equal(f.n_handoffs, 2);
    assert_int_equal(f.out_only, 1);
    assert_int_equal(f.in_only, 1);
    assert_int_equal(f.repeated, 1);
    assert_int_equal(f.in_before_out, 1);
    assert_int_equal(f.n_items, 1);
    uint32_t hops;
    int flying;
    int64_t last = an_flow_item_last(&f, 0, &hops, &flying);
    assert_int_equal(hops, 2);
    assert_int_equal(flying, 0);
    const an_flow_rec *first_out = &f.recs[f.handoffs[f.item_first[0]].out_rec];
    const an_flow_rec *last_in = &f.recs[f.handoffs[last].in_rec];
    assert_int_equal(first_out->ts_ns, 105);
    assert_int_equal(last_in->ts_ns, 221);
    assert_true(first_out->id == 1 && last_in->id == 2);

    /* the critical path of step 1, latest first */
    an_path_seg *segs;
    uint64_t n;
    assert_int_equal(an_flow_critical_path(&f, 1, &segs, &n), AN_EXIT_OK);
    const an_path_seg want[] = {
        {2, -1, 400, 410}, {2, 5, 225, 400}, {2, -1, 220, 225}, {2, 4, 205, 220}, {1, 1, 200, 205},
        {1, 3, 125, 200},  {1, -1, 120, 125}, {1, 2, 105, 120}, {0, 1, 100, 105}, {0, 0, 0, 100},
    };
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (uint64_t i = 0; i < n; i++) {
        if (segs[i].thread != want[i].thread || segs[i].stage != want[i].stage ||
            segs[i].start_ns != want[i].start_ns || segs[i].end_ns != want[i].end_ns)
            fail_msg("segment %llu: thread %u stage %lld [%lld, %lld), wanted thread %u stage %lld [%lld, %lld)",
                     (unsigned long long)i, segs[i].thread, (long long)segs[i].stage, (long long)segs[i].start_ns,
                     (long long)segs[i].end_ns, want[i].thread, (long long)want[i].stage,
                     (long long)want[i].start_ns, (long long)want[i].end_ns);
    }
    free(segs);
    /* no step before the first mark, none past the last */
    assert_int_equal(an_flow_critical_path(&f, 0, &segs, &n), AN_EXIT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(an_flow_critical_path(&f, 2, &segs, &n), AN_EXIT_OK);
    assert_int_equal(n, 0);
    an_flow_free(&f);
    an_trace_close(&t);
}

/* An item whose last in is on a thread that sends items on is in flight;
 * a queue_wait the item did not make the consumer wait for (its out came
 * before the wait began) stays on the consumer's thread. */
static void test_in_flight_and_no_wait(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "flow2.sqlite");
    tg_trace *g = tg_create("flowtest");
    uint32_t load = tg_stage(g, "load", "work"), qwait = tg_stage(g, "queue_wait", "wait_input");
    uint32_t train = tg_stage(g, "train", "work");
    uint32_t loader = tg_thread(g, "loader", "loader"), mid = tg_thread(g, "mid", "mid");
    uint32_t sink = tg_thread(g, "sink", "sink");
    tg_range(g, loader, load, 0, 50);
    tg_range(g, sink, qwait, 60, 70);
    tg_range(g, sink, train, 70, 100);
    tg_step(g, 0, 0, 0);
    tg_step(g, 1, 100, 1);
    tg_write(g, path);
    tg_free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, st_flow_schema_sql);
    /* id 1 loader -> sink (out at 40, before the wait at 60); id 2 loader -> mid, which
     * sends id 3 on to sink, and id 4 loader -> mid, which sends nothing yet */
    const frec lo[] = {{OUT, 40, 1}, {OUT, 45, 2}, {OUT, 48, 4}};
    const frec md[] = {{IN, 46, 2}, {OUT, 47, 3}, {IN, 49, 4}};
    const frec sk[] = {{IN, 70, 1}, {IN, 90, 3}};
    add_flow_chunk(db, loader, lo, 3);
    add_flow_chunk(db, mid, md, 3);
    add_flow_chunk(db, sink, sk, 2);
    sqlite3_close(db);
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), AN_EXIT_OK);
    an_flow f;
    assert_int_equal(an_flow_load(&f, &t), AN_EXIT_OK);
    assert_int_equal(f.n_handoffs, 4);
    assert_int_equal(f.n_items, 3);
    int delivered = 0, flying_n = 0;
    for (uint64_t i = 0; i < f.n_items; i++) {
        int flying;
        uint32_t hops;
        an_flow_item_last(&f, i, &hops, &flying);
        if (flying) {
            flying_n++;
            assert_int_equal(hops, 1); /* id 4, held by mid */
        } else {
            delivered++;
        }
    }
    assert_int_equal(delivered, 2);
    assert_int_equal(flying_n, 1);
    an_path_seg *segs;
    uint64_t n;
    assert_int_equal(an_flow_critical_path(&f, 1, &segs, &n), AN_EXIT_OK);
    /* train, then the whole queue_wait (no jump: the item was there first), then nothing */
    assert_int_equal(n, 3);
    assert_true(segs[0].thread == sink && segs[0].stage == (int64_t)train && segs[0].start_ns == 70);
    assert_true(segs[1].thread == sink && segs[1].stage == (int64_t)qwait && segs[1].start_ns == 60);
    assert_true(segs[2].thread == sink && segs[2].stage == -1 && segs[2].start_ns == 0 && segs[2].end_ns == 60);
    free(segs);
    an_flow_free(&f);
    an_trace_close(&t);
}


/* A rank set of two files: rank 0's target sends ids 1, 2 and 3 to rank 1's
 * drafter, whose clock runs 5 s behind (it records g - 5 s and stores the
 * measured offset +5 s, uncertainty 1500 ns). Mapped onto rank 0's clock, id
 * 1's in is 100 us after its out, id 2's 1000 ns before it (within the 1500
 * ns the clocks allow: paired at the out's time, residence 0), id 3's 5000
 * ns before it (beyond: in_before_out). Unmapped, every in would lie 5 s
 * before its out. */
static void write_rank_own(const char *path, int rank, int64_t own0, int64_t off, const frec *r, size_t n);

static void write_rank(const char *path, int rank, int64_t off, const frec *r, size_t n)
{
    write_rank_own(path, rank, 10000000000LL - off, off, r, n);
}

/* The rank's own clock reads own0 at rank 0's 10 s (its sync and its one range). */
static void write_rank_own(const char *path, int rank, int64_t own0, int64_t off, const frec *r, size_t n)
{
    tg_trace *g = tg_create("flowranks");
    tg_meta(g, "run_id", "1700000000-777");
    tg_meta_int(g, "rank", rank);
    tg_meta_int(g, "world_size", 2);
    tg_meta_int(g, "local_rank", rank);
    tg_meta_int(g, "device", -1);
    tg_meta_int(g, "clock_sync_ns", own0);
    tg_meta_int(g, "clock_offset_ns", off);
    tg_meta_int(g, "clock_uncertainty_ns", rank ? 1500 : 0);
    uint32_t s = rank ? tg_stage(g, "queue_wait", "wait_input") : tg_stage(g, "send", "copy");
    uint32_t th = tg_thread(g, rank ? "drafter0" : "target0", rank ? "drafter" : "target");
    tg_thread_at(g, th)->rank = rank;
    int64_t g0 = own0;
    tg_range(g, th, s, g0, g0 + 1000);
    if (!rank) {
        tg_set_step_thread(g, th);
        tg_step(g, 0, g0, 0);
        tg_step(g, 1, g0 + 100000000, 64);
    }
    tg_write(g, path);
    tg_free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, st_flow_schema_sql);
    add_flow_chunk(db, th, r, n);
    sqlite3_close(db);
}

static void test_rank_set_pairs_across_clocks(void **state)
{
    (void)state;
    const int64_t G = 10000000000LL, OFF = 5000000000LL;
    char p0[PATH_MAX], p1[PATH_MAX];
    tmp_path(p0, sizeof p0, "set.rank0.sqlite");
    tmp_path(p1, sizeof p1, "set.rank1.sqlite");
    const frec outs[] = {{OUT, G + 1000000, 1}, {OUT, G + 2000000, 2}, {OUT, G + 3000000, 3}};
    const frec ins[] = {{IN, G + 1100000 - OFF, 1}, {IN, G + 2000000 - 1000 - OFF, 2},
                        {IN, G + 3000000 - 5000 - OFF, 3}};
    write_rank(p0, 0, 0, outs, 3);
    write_rank(p1, 1, OFF, ins, 3);
    char *paths[] = {p0, p1};
    an_trace t;
    assert_int_equal(an_trace_open_set(&t, paths, 2, AN_ALIGN_AUTO), AN_EXIT_OK);
    assert_int_equal(st_reader_has_flows(t.r), 1);
    /* the raw records: set threads (r0/target0 = 0, r1/drafter0 = 1), mapped times */
    st_flow_iter *it;
    assert_int_equal(st_flow_iter_open(&it, t.r, 1, INT64_MIN, INT64_MAX), ST_OK);
    st_flow_row row;
    assert_int_equal(st_flow_iter_next(it, &row), 1);
    assert_int_equal(row.thread, 1);
    assert_int_equal(row.dir, ST_FLOW_IN);
    assert_int_equal(row.id, 1);
    assert_int_equal(row.ts_ns, G + 1100000);
    st_flow_iter_close(it);
    assert_int_equal(st_reader_flow_slack(t.r, 0, 1), 1500);
    assert_int_equal(st_reader_flow_slack(t.r, 1, 1), 0);
    an_flow f;
    assert_int_equal(an_flow_load(&f, &t), AN_EXIT_OK);
    assert_int_equal(f.n_recs, 6);
    assert_int_equal(f.n_handoffs, 2);
    assert_int_equal(f.in_before_out, 1);
    for (uint64_t h = 0; h < f.n_handoffs; h++) {
        const an_flow_rec *o = &f.recs[f.handoffs[h].out_rec], *i = &f.recs[f.handoffs[h].in_rec];
        assert_int_equal(o->thread, 0);
        assert_int_equal(i->thread, 1);
        assert_int_equal(i->ts_ns - o->ts_ns, o->id == 1 ? 100000 : 0);
        assert_true(o->id == 1 || o->id == 2);
    }
    an_flow_free(&f);
    an_trace_close(&t);
}


/* Runs `flow` in this process with stdout to a file; its output. */
static char *flow_json(const char *path)
{
    char *argv[] = {"flow", "--format", "json", (char *)path, NULL};
    fflush(stdout);
    int saved = dup(1);
    int fd = open(tmp_file("flow.out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    int status = an_command_run(&an_cmd_flow, 4, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    assert_int_equal(status, AN_EXIT_OK);
    char *out = read_file(tmp_file("flow.out"), NULL);
    assert_non_null(out);
    return out;
}

/* Rank 1's clock reads 10 s when rank 0's does, but it stores a measured
 * offset of +10^18 ns (valid: its times map to about 10^18 + 10^10, inside
 * 0..2^63-1). Rank 0 sends ids 1..10 at 10 s + k ms; rank 1 receives id k at
 * its own 10 s + k ms + k us, so each residence (and latency) is 10^18 +
 * k * 1000 ns: ten of them add up past 2^63. The exact mean is 10^18 + 5500
 * ns, 1000000000000.005500 ms. */
static void test_huge_offset_means_exact(void **state)
{
    (void)state;
    const int64_t G = 10000000000LL, OFF = 1000000000000000000LL;
    char p0[PATH_MAX], p1[PATH_MAX];
    tmp_path(p0, sizeof p0, "huge.rank0.sqlite");
    tmp_path(p1, sizeof p1, "huge.rank1.sqlite");
    frec outs[10], ins[10];
    for (int k = 1; k <= 10; k++) {
        outs[k - 1] = (frec){OUT, G + k * 1000000LL, (uint64_t)k};
        ins[k - 1] = (frec){IN, G + k * 1000000LL + k * 1000LL, (uint64_t)k};
    }
    write_rank(p0, 0, 0, outs, 10);
    write_rank_own(p1, 1, G, OFF, ins, 10);
    char dir[PATH_MAX];
    tmp_path(dir, sizeof dir, "huge.rank*.sqlite");
    char *out = flow_json(dir);
    assert_non_null(strstr(out, "\"latency\": [\n  {\"n\": 10, \"mean_ms\": 1000000000000.005500, "
                                "\"p50_ms\": 1000000000000.005000, "));
    assert_non_null(strstr(out, "{\"from\": \"target\", \"to\": \"drafter\", \"n\": 10, "
                                "\"mean_ms\": 1000000000000.005500, "));
    free(out);
}

/* loader -> mid -> sink, two items: mid holds the first 1 ns (in at 20, out
 * at 21) and the second 2 ns (in at 50, out at 52), inside its one range
 * `work`. Time in role mid: 3 ns over 2 items, mean 1.5 ns truncated to 1 ns,
 * in the roles table and in the breakdown alike (rounding would give 2). */
static void test_means_truncated(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "trunc.sqlite");
    tg_trace *g = tg_create("flowtrunc");
    uint32_t work = tg_stage(g, "work", "work"), put = tg_stage(g, "put", "wait_output");
    uint32_t loader = tg_thread(g, "loader", "loader"), mid = tg_thread(g, "mid0", "mid");
    uint32_t sink = tg_thread(g, "sink0", "sink");
    tg_range(g, loader, put, 5, 45);
    tg_range(g, mid, work, 15, 100);
    tg_range(g, sink, work, 25, 100);
    tg_step(g, 0, 0, 0);
    tg_step(g, 1, 100, 64);
    tg_write(g, path);
    tg_free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, st_flow_schema_sql);
    const frec lo[] = {{OUT, 10, 1}, {OUT, 40, 3}};
    const frec mi[] = {{IN, 20, 1}, {OUT, 21, 2}, {IN, 50, 3}, {OUT, 52, 4}};
    const frec si[] = {{IN, 30, 2}, {IN, 60, 4}};
    add_flow_chunk(db, loader, lo, 2);
    add_flow_chunk(db, mid, mi, 4);
    add_flow_chunk(db, sink, si, 2);
    sqlite3_close(db);
    char *out = flow_json(path);
    /* latency 20 and 20; residence loader->mid 10, 10; mid->sink 9, 8: mean 8.5 -> 8 */
    assert_non_null(strstr(out, "{\"n\": 2, \"mean_ms\": 0.000020, "));
    assert_non_null(strstr(out, "{\"from\": \"mid\", \"to\": \"sink\", \"n\": 2, \"mean_ms\": 0.000008, "));
    assert_non_null(strstr(out, "{\"role\": \"mid\", \"n\": 2, \"mean_ms\": 0.000001, "));
    assert_non_null(strstr(out, "{\"role\": \"mid\", \"stage\": \"work\", \"mean_ms\": 0.000001, \"share\": 100}"));
    free(out);
}

int main(void)
{
    if (make_tmp_dir("test_flow")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_and_items),
        cmocka_unit_test(test_in_flight_and_no_wait),
        cmocka_unit_test(test_rank_set_pairs_across_clocks),
        cmocka_unit_test(test_huge_offset_means_exact),
        cmocka_unit_test(test_means_truncated),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
