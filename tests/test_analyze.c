/* test_analyze.c: unit tests of the analyzer's library code (analyze/)
 * and the generator of traces with exactly known contents.
 *
 * Traces are written directly (SQLite + the chunk encoder of
 * tracer/encoding.h + the schema of tracer/st_schema.h), not through the
 * recording API, so every timestamp is exact and every expected number can
 * be worked out by hand (they are, in the comments of gen_main).
 *
 *   test_analyze                    the cmocka tests
 *   test_analyze --generate DIR     writes the traces tests/it_analyze.sh uses
 *   test_analyze --big PATH N       writes a trace of N ranges (benchmarking)
 *
 * The analyzer's sources are compiled in (it is a program, not a library),
 * which gives the tests its static helpers too.
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
#include <unistd.h>

#include <sqlite3.h>

#include "common.h"
#include "encoding.h"
#include "st_intervals.h"
#include "st_reader.h"
#include "st_schema.h"

#include "../analyze/analyze.h"

#define MS 1000000LL
#define US 1000LL
#define BASE_NS 1000000000LL /* meta start_ns and step 0 of the generated traces */

/* ---- the generator ------------------------------------------------------------------- */

typedef struct gen_event {
    int is_end;
    uint32_t stage;
    int64_t ts;
} gen_event;

typedef struct gen_thread {
    uint32_t id;
    const char *name, *role;
    gen_event *ev;
    size_t n, cap;
} gen_thread;

typedef struct gen_sample {
    uint32_t thread, counter;
    int64_t ts;
    double value;
} gen_sample;

#define GEN_MAX 16
typedef struct gen_trace {
    const char *program, *run_id, *status;
    int rank, world_size, pid;
    int64_t start_ns, end_ns; /* end 0: absent */
    uint32_t profile_interval;
    uint32_t n_stages;
    const char *stage_name[GEN_MAX];
    const char *stage_kind[GEN_MAX];
    uint32_t n_threads;
    gen_thread threads[GEN_MAX];
    uint32_t n_steps;
    uint64_t step[64], step_tokens[64];
    int64_t step_ts[64];
    uint32_t n_counters;
    const char *counter_name[GEN_MAX], *counter_unit[GEN_MAX];
    gen_sample *samples;
    size_t n_samples, samples_cap;
    uint32_t chunk_events; /* events per chunk */
} gen_trace;

static void gen_init(gen_trace *g, const char *program, const char *run_id)
{
    memset(g, 0, sizeof *g);
    g->program = program;
    g->run_id = run_id;
    g->status = "complete";
    g->world_size = 1;
    g->pid = 42;
    g->start_ns = BASE_NS;
    g->chunk_events = 7; /* small: chunk boundaries cut through open ranges */
}

static void gen_free(gen_trace *g)
{
    for (uint32_t i = 0; i < g->n_threads; i++) free(g->threads[i].ev);
    free(g->samples);
}

static uint32_t gen_stage(gen_trace *g, const char *name, const char *kind)
{
    g->stage_name[g->n_stages] = name;
    g->stage_kind[g->n_stages] = kind;
    return g->n_stages++;
}

static gen_thread *gen_thread_add(gen_trace *g, const char *name, const char *role)
{
    gen_thread *t = &g->threads[g->n_threads];
    t->id = g->n_threads++;
    t->name = name;
    t->role = role;
    return t;
}

static void gen_push(gen_thread *t, int is_end, uint32_t stage, int64_t ts)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->ev = realloc(t->ev, t->cap * sizeof *t->ev);
        assert_non_null(t->ev);
    }
    t->ev[t->n++] = (gen_event){is_end, stage, ts};
}

static void gen_begin(gen_thread *t, uint32_t stage, int64_t ts) { gen_push(t, 0, stage, ts); }
static void gen_end(gen_thread *t, int64_t ts) { gen_push(t, 1, 0, ts); }
static void gen_range(gen_thread *t, uint32_t stage, int64_t a, int64_t b)
{
    gen_begin(t, stage, a);
    gen_end(t, b);
}

static void gen_step(gen_trace *g, uint64_t step, int64_t ts, uint64_t tokens)
{
    g->step[g->n_steps] = step;
    g->step_ts[g->n_steps] = ts;
    g->step_tokens[g->n_steps++] = tokens;
}

static void gen_sample_add(gen_trace *g, uint32_t thread, uint32_t counter, int64_t ts, double v)
{
    if (g->n_samples == g->samples_cap) {
        g->samples_cap = g->samples_cap ? g->samples_cap * 2 : 64;
        g->samples = realloc(g->samples, g->samples_cap * sizeof *g->samples);
        assert_non_null(g->samples);
    }
    g->samples[g->n_samples++] = (gen_sample){thread, counter, ts, v};
}

static void put_meta(sqlite3 *db, const char *key, const char *value)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta VALUES (?, ?)", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

static void put_meta_i(sqlite3 *db, const char *key, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    put_meta(db, key, buf);
}

static void insert_chunk(sqlite3 *db, uint32_t thread, const st_event_encoder *e, uint32_t n_ranges)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) "
                                        "VALUES (?, ?, ?, ?, ?, ?)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, thread);
    sqlite3_bind_int64(st, 2, e->t0_ns);
    sqlite3_bind_int64(st, 3, e->t1_ns);
    sqlite3_bind_int64(st, 4, e->n_events);
    sqlite3_bind_int64(st, 5, n_ranges);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

/* Writes g to path as a schema-1 trace, replacing any file there. */
static void gen_write(const gen_trace *g, const char *path)
{
    unlink(path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF"); /* test files: no fsync */
    exec_sql(db, st_schema_sql);
    exec_sql(db, "BEGIN");
    put_meta_i(db, "schema_version", 1);
    put_meta(db, "status", g->status);
    put_meta(db, "program", g->program);
    put_meta(db, "tool_version", "0.1.0");
    put_meta(db, "run_id", g->run_id);
    put_meta(db, "start_utc", "2023-11-14T22:13:20Z");
    put_meta_i(db, "start_ns", g->start_ns);
    if (g->end_ns) put_meta_i(db, "end_ns", g->end_ns);
    put_meta(db, "clock", "monotonic");
    put_meta(db, "tsc_hz", "0");
    put_meta(db, "host", "testhost");
    put_meta_i(db, "pid", g->pid);
    put_meta(db, "argv", "gen");
    put_meta_i(db, "rank", g->rank);
    put_meta_i(db, "world_size", g->world_size);
    put_meta_i(db, "profile_interval", g->profile_interval);
    put_meta(db, "commit_ms", "250");
    put_meta(db, "ring_records", "65536");
    put_meta(db, "dropped_events", "0");
    sqlite3_stmt *st;
    for (uint32_t i = 0; i < g->n_threads; i++) {
        assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO threads VALUES (?, ?, ?, ?, -1, ?, 0)", -1, &st, NULL),
                         SQLITE_OK);
        sqlite3_bind_int64(st, 1, g->threads[i].id);
        sqlite3_bind_int64(st, 2, 1000 + g->threads[i].id);
        sqlite3_bind_text(st, 3, g->threads[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, g->threads[i].role, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, g->rank);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
    }
    for (uint32_t i = 0; i < g->n_stages; i++) {
        assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO stages VALUES (?, ?, ?)", -1, &st, NULL), SQLITE_OK);
        sqlite3_bind_int64(st, 1, i);
        sqlite3_bind_text(st, 2, g->stage_name[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, g->stage_kind[i], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
    }
    for (uint32_t i = 0; i < g->n_counters; i++) {
        assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO counter_names VALUES (?, ?, ?)", -1, &st, NULL),
                         SQLITE_OK);
        sqlite3_bind_int64(st, 1, i);
        sqlite3_bind_text(st, 2, g->counter_name[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, g->counter_unit[i], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
    }
    for (uint32_t i = 0; i < g->n_steps; i++) {
        assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO steps VALUES (?, ?, ?, 0)", -1, &st, NULL), SQLITE_OK);
        sqlite3_bind_int64(st, 1, (sqlite3_int64)g->step[i]);
        sqlite3_bind_int64(st, 2, g->step_ts[i]);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)g->step_tokens[i]);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
    }
    st_event_encoder *e = calloc(1, sizeof *e);
    assert_non_null(e);
    for (uint32_t i = 0; i < g->n_threads; i++) {
        const gen_thread *t = &g->threads[i];
        uint32_t n_ranges = 0;
        e->depth = 0;
        assert_int_equal(st_event_chunk_start(e), 0);
        for (size_t k = 0; k < t->n; k++) {
            if (t->ev[k].is_end) {
                assert_int_equal(st_event_put_end(e, t->ev[k].ts), 0);
                n_ranges++;
            } else {
                assert_int_equal(st_event_put_begin(e, t->ev[k].stage, t->ev[k].ts), 0);
            }
            if (e->n_events == g->chunk_events) {
                insert_chunk(db, t->id, e, n_ranges);
                n_ranges = 0;
                assert_int_equal(st_event_chunk_start(e), 0);
            }
        }
        if (e->n_events) insert_chunk(db, t->id, e, n_ranges);
    }
    st_buf_free(&e->buf);
    free(e);
    for (uint32_t i = 0; i < g->n_threads; i++) {
        st_counter_encoder c;
        memset(&c, 0, sizeof c);
        assert_int_equal(st_counter_chunk_start(&c), 0);
        for (size_t k = 0; k < g->n_samples; k++)
            if (g->samples[k].thread == g->threads[i].id)
                assert_int_equal(st_counter_put(&c, g->samples[k].counter, g->samples[k].ts, g->samples[k].value), 0);
        if (c.n_samples) {
            assert_int_equal(sqlite3_prepare_v2(db,
                                                "INSERT INTO counter_chunks(thread, t0_ns, t1_ns, n_samples, data) "
                                                "VALUES (?, ?, ?, ?, ?)",
                                                -1, &st, NULL),
                             SQLITE_OK);
            sqlite3_bind_int64(st, 1, g->threads[i].id);
            sqlite3_bind_int64(st, 2, c.t0_ns);
            sqlite3_bind_int64(st, 3, c.t1_ns);
            sqlite3_bind_int64(st, 4, c.n_samples);
            sqlite3_bind_blob(st, 5, c.buf.data, (int)c.buf.len, SQLITE_STATIC);
            assert_int_equal(sqlite3_step(st), SQLITE_DONE);
            sqlite3_finalize(st);
        }
        st_buf_free(&c.buf);
    }
    exec_sql(db, "COMMIT");
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* The main generated trace; every number below is asserted somewhere.
 * Times from BASE_NS (= meta start_ns); steps 0..8 every 100 ms with 1000
 * tokens each (10000 tokens/s); the span, so every thread's wall time, is
 * 0..800 ms. profile_interval 2: windows [0,200), [200,400), ... ms.
 *   main    log 8 x 10 ms at k*100                          -> 80 ms, 10%
 *   loader  load [k*100+5, k*100+67.5] (62.5 ms)            -> 500 ms, 62.5%
 *             with h2d [k*100+20, k*100+32.5] inside        -> load self 400 ms, 50%
 *           queue_put [k*100+67.5, k*100+77.5]              -> 80 ms, 10%
 *   worker0 from 10 ms, i = 1..100: queue_wait 1 ms, compute i*0.1 ms, 1 ms idle
 *           compute: 505 ms, count 100, mean 5.05, p50 5.0, p95 9.5, p99 9.9, max 10.0
 *   worker1 allreduce [150, 350] with stream_sync [200, 210] inside: self 190 ms;
 *           compute 50 x 4 ms at 400 + 8j                   -> 200 ms
 *   role worker compute: 150 ranges, 705 ms of 1600 (44.0625%); p50 4.0, p95 9.3,
 *           p99 9.9 (values 0.1..10.0 and fifty more 4.0)
 *   counters: queue_depth (items) on loader, k % 3 at k*100+67.5; lr on main, 0.5/(k+1). */
static void gen_main(gen_trace *g, const char *status)
{
    gen_init(g, "gen", "1700000000-42");
    g->status = status;
    g->profile_interval = 2;
    if (strcmp(status, "running") != 0) g->end_ns = BASE_NS + 810 * MS;
    uint32_t s_log = gen_stage(g, "log", "work");
    uint32_t s_load = gen_stage(g, "load", "work");
    uint32_t s_h2d = gen_stage(g, "h2d", "copy");
    uint32_t s_put = gen_stage(g, "queue_put", "wait_output");
    uint32_t s_wait = gen_stage(g, "queue_wait", "wait_input");
    uint32_t s_compute = gen_stage(g, "compute", "work");
    uint32_t s_allreduce = gen_stage(g, "allreduce", "comm");
    uint32_t s_sync = gen_stage(g, "stream_sync", "sync");
    gen_thread *main_t = gen_thread_add(g, "main", "main");
    gen_thread *loader = gen_thread_add(g, "loader", "loader");
    gen_thread *w0 = gen_thread_add(g, "worker0", "worker");
    gen_thread *w1 = gen_thread_add(g, "worker1", "worker");
    g->counter_name[0] = "queue_depth";
    g->counter_unit[0] = "items";
    g->counter_name[1] = "lr";
    g->counter_unit[1] = "";
    g->n_counters = 2;
    for (int k = 0; k <= 8; k++) gen_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 1000 : 0);
    for (int k = 0; k < 8; k++) {
        int64_t t = BASE_NS + k * 100 * MS;
        gen_range(main_t, s_log, t, t + 10 * MS);
        gen_sample_add(g, 0, 1, t, 0.5 / (k + 1));
        gen_begin(loader, s_load, t + 5 * MS);
        gen_range(loader, s_h2d, t + 20 * MS, t + 32500 * US);
        gen_end(loader, t + 67500 * US);
        gen_range(loader, s_put, t + 67500 * US, t + 77500 * US);
        gen_sample_add(g, 1, 0, t + 67500 * US, k % 3);
    }
    int64_t t = BASE_NS + 10 * MS;
    for (int i = 1; i <= 100; i++) {
        gen_range(w0, s_wait, t, t + 1 * MS);
        gen_range(w0, s_compute, t + 1 * MS, t + 1 * MS + i * 100 * US);
        t += 2 * MS + i * 100 * US;
    }
    gen_begin(w1, s_allreduce, BASE_NS + 150 * MS);
    gen_range(w1, s_sync, BASE_NS + 200 * MS, BASE_NS + 210 * MS);
    gen_end(w1, BASE_NS + 350 * MS);
    for (int j = 0; j < 50; j++) gen_range(w1, s_compute, BASE_NS + (400 + 8 * j) * MS, BASE_NS + (404 + 8 * j) * MS);
    if (strcmp(status, "running") == 0) gen_begin(w1, s_allreduce, BASE_NS + 798 * MS); /* never ends */
}

/* Two ranks of one run: rank 1's worker computes 8 ms where rank 0's takes 5. */
static void gen_rank(gen_trace *g, int rank)
{
    gen_init(g, "gen", rank ? "1700000000-101" : "1700000000-100");
    g->rank = rank;
    g->world_size = 2;
    g->pid = 100 + rank;
    g->profile_interval = 1;
    g->end_ns = BASE_NS + 210 * MS;
    uint32_t s_log = gen_stage(g, "log", "work");
    uint32_t s_load = gen_stage(g, "load", "work");
    uint32_t s_compute = gen_stage(g, "compute", "work");
    gen_thread *main_t = gen_thread_add(g, "main", "main");
    gen_thread *loader = gen_thread_add(g, "loader", "loader");
    gen_thread *worker = gen_thread_add(g, "worker0", "worker");
    for (int k = 0; k <= 2; k++) gen_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 500 : 0);
    for (int k = 0; k < 2; k++) gen_range(main_t, s_log, BASE_NS + k * 100 * MS, BASE_NS + (k * 100 + 5) * MS);
    for (int j = 0; j < 10; j++) {
        int64_t t = BASE_NS + (10 + 15 * j) * MS;
        gen_range(loader, s_load, t, t + 2 * MS);
        gen_range(worker, s_compute, t + 2 * MS, t + (rank ? 10 : 7) * MS);
    }
}

/* A killed run: worker leaves a range open that holds a closed child.
 * Steps 0..4 every 100 ms (100 tokens each), so the span is 0..400 ms.
 *   main    log [k*100, k*100+10], k = 0..3
 *   worker  a [10, 50]; outer begins at 120 and never ends; inner [150, 250]
 * Open ranges count up to the end of the analysed time: outer [120, 400],
 * total 280, self 180; inner 100; a 40; idle 80 (self + idle = 400). Per
 * window of 1 step: worker a 40 + idle 60 | idle 20, outer 30, inner 50 |
 * inner 50, outer 50 | outer 100. */
static void gen_unended(gen_trace *g)
{
    gen_init(g, "unended", "1700000000-11");
    g->status = "running";
    g->profile_interval = 1;
    uint32_t s_log = gen_stage(g, "log", "work");
    uint32_t s_a = gen_stage(g, "a", "work");
    uint32_t s_outer = gen_stage(g, "outer", "work");
    uint32_t s_inner = gen_stage(g, "inner", "copy");
    gen_thread *main_t = gen_thread_add(g, "main", "main");
    gen_thread *w = gen_thread_add(g, "worker", "worker");
    for (int k = 0; k <= 4; k++) gen_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 100 : 0);
    for (int k = 0; k < 4; k++) gen_range(main_t, s_log, BASE_NS + k * 100 * MS, BASE_NS + (k * 100 + 10) * MS);
    gen_range(w, s_a, BASE_NS + 10 * MS, BASE_NS + 50 * MS);
    gen_begin(w, s_outer, BASE_NS + 120 * MS);
    gen_range(w, s_inner, BASE_NS + 150 * MS, BASE_NS + 250 * MS);
}

/* Feeds g's events and steps, merged in st_agg_order, to the aggregator and
 * returns the formatted windows: the expected text of `analyze intervals`,
 * computed without the reader. */
static void on_window_text(const st_window *w, void *arg)
{
    char **text = arg;
    size_t len = st_window_format(w, NULL, 0), old = *text ? strlen(*text) : 0;
    *text = realloc(*text, old + len + 1);
    assert_non_null(*text);
    assert_int_equal(st_window_format(w, *text + old, len + 1), len);
}

static char *gen_intervals_text(const gen_trace *g, uint32_t every)
{
    char *text = calloc(1, 1);
    st_agg *agg = st_agg_create(every, on_window_text, &text);
    assert_non_null(agg);
    for (uint32_t s = 0; s < g->n_stages; s++) st_agg_stage(agg, s, g->stage_name[s], (st_kind)st_kind_parse(g->stage_kind[s]));
    for (uint32_t i = 0; i < g->n_threads; i++) st_agg_thread(agg, g->threads[i].id, g->threads[i].name, g->threads[i].role);
    size_t pos[GEN_MAX] = {0};
    uint32_t next_step = 0;
    for (;;) {
        int best = -2;
        int64_t best_ts = 0;
        int best_rank = 0;
        uint32_t best_thread = 0;
        if (next_step < g->n_steps) {
            best = -1;
            best_ts = g->step_ts[next_step];
            best_rank = ST_AGG_STEP;
        }
        for (uint32_t i = 0; i < g->n_threads; i++) {
            if (pos[i] == g->threads[i].n) continue;
            const gen_event *ev = &g->threads[i].ev[pos[i]];
            if (best == -2 || st_agg_order(ev->ts, ST_AGG_RANGE, g->threads[i].id, best_ts, best_rank, best_thread) < 0) {
                best = (int)i;
                best_ts = ev->ts;
                best_rank = ST_AGG_RANGE;
                best_thread = g->threads[i].id;
            }
        }
        if (best == -2) break;
        if (best == -1) {
            st_agg_step(agg, g->step[next_step], g->step_ts[next_step], g->step_tokens[next_step]);
            next_step++;
            continue;
        }
        const gen_event *ev = &g->threads[best].ev[pos[best]++];
        if (ev->is_end) st_agg_end(agg, g->threads[best].id, ev->ts);
        else st_agg_begin(agg, g->threads[best].id, ev->stage, ev->ts);
    }
    st_agg_free(agg);
    return text;
}

static char *path_in(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    assert_non_null(p);
    snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static void write_text(const char *dir, const char *name, const char *text, size_t len)
{
    char *p = path_in(dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(p);
}

/* Writes gen_main's trace to dir/name, then runs `sql` on it (to break it). */
static void gen_broken(const char *dir, const char *name, const char *sql)
{
    gen_trace g;
    gen_main(&g, "complete");
    char *p = path_in(dir, name);
    gen_write(&g, p);
    gen_free(&g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    exec_sql(db, "PRAGMA synchronous=OFF");
    exec_sql(db, sql);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    free(p);
}

/* Every trace the integration test needs. */
static void generate_all(const char *dir)
{
    gen_trace g;
    char *p;
    mkdir(dir, 0777);
    gen_main(&g, "complete");
    gen_write(&g, p = path_in(dir, "gen.sqlite"));
    free(p);
    char *text = gen_intervals_text(&g, 2);
    write_text(dir, "gen.intervals.txt", text, strlen(text));
    free(text);
    gen_free(&g);

    gen_main(&g, "running");
    gen_write(&g, p = path_in(dir, "running.sqlite"));
    free(p);
    gen_free(&g);

    for (int rank = 0; rank < 2; rank++) {
        gen_rank(&g, rank);
        char name[32];
        snprintf(name, sizeof name, "rank%d.sqlite", rank);
        gen_write(&g, p = path_in(dir, name));
        free(p);
        gen_free(&g);
    }

    gen_unended(&g);
    gen_write(&g, p = path_in(dir, "unended.sqlite"));
    free(p);
    gen_free(&g);

    /* Times at the int64 limit: a range from 0 to INT64_MAX - 1 and step
     * marks at both ends (huge.sqlite: every number fits, exactly); the same
     * with the stage nested in itself three deep (huge_nested.sqlite: its
     * inclusive time passes INT64_MAX). */
    for (int nested = 0; nested < 2; nested++) {
        gen_init(&g, "huge", "1700000000-12");
        g.start_ns = 0;
        g.chunk_events = 3;
        gen_stage(&g, "work", "work");
        gen_thread *h = gen_thread_add(&g, "main", "main");
        for (int d = 0; d <= 2 * nested; d++) gen_begin(h, 0, d);
        for (int d = 0; d <= 2 * nested; d++) gen_end(h, INT64_MAX - 1 - (2 * nested - d) * nested);
        gen_step(&g, 0, 0, 0);
        gen_step(&g, 1, INT64_MAX - 1, 7);
        gen_write(&g, p = path_in(dir, nested ? "huge_nested.sqlite" : "huge.sqlite"));
        free(p);
        gen_free(&g);
    }

    /* A valid trace with nothing recorded. */
    gen_init(&g, "empty", "1700000000-7");
    gen_write(&g, p = path_in(dir, "empty.sqlite"));
    free(p);
    gen_free(&g);

    /* Many ranges, so that a truncated copy loses chunk pages. */
    gen_init(&g, "many", "1700000000-8");
    g.chunk_events = 256;
    gen_stage(&g, "work", "work");
    gen_thread *t = gen_thread_add(&g, "main", "main");
    for (int i = 0; i < 40000; i++) gen_range(t, 0, BASE_NS + i * 10 * US, BASE_NS + i * 10 * US + (i % 7 + 1) * US);
    gen_write(&g, p = path_in(dir, "many.sqlite"));
    free(p);
    gen_free(&g);

    /* One range open across 70000 others: more than export --chrome queues,
     * so it is written as a "B"/"E" pair. */
    gen_init(&g, "outer", "1700000000-10");
    g.chunk_events = 4096;
    gen_stage(&g, "epoch", "work");
    gen_stage(&g, "batch", "work");
    t = gen_thread_add(&g, "main", "main");
    gen_begin(t, 0, BASE_NS);
    for (int i = 0; i < 70000; i++) gen_range(t, 1, BASE_NS + (i * 10 + 1) * US, BASE_NS + (i * 10 + 6) * US);
    gen_end(t, BASE_NS + 700001 * US);
    gen_range(t, 1, BASE_NS + 700002 * US, BASE_NS + 700003 * US);
    gen_step(&g, 0, BASE_NS, 0);
    gen_step(&g, 1, BASE_NS + 700003 * US, 70000);
    gen_write(&g, p = path_in(dir, "outer.sqlite"));
    free(p);
    gen_free(&g);

    write_text(dir, "zero.sqlite", "", 0);
    static const char not_sqlite[] = "this is a text file, not a trace\n";
    char big[4096];
    for (size_t i = 0; i < sizeof big; i++) big[i] = not_sqlite[i % (sizeof not_sqlite - 1)];
    write_text(dir, "notsqlite.sqlite", big, sizeof big);
    gen_broken(dir, "badversion.sqlite", "UPDATE meta SET value = '7' WHERE key = 'schema_version'");
    gen_broken(dir, "missingtable.sqlite", "DROP TABLE steps");
    gen_broken(dir, "corruptchunk.sqlite", "UPDATE range_chunks SET data = x'4500ff' WHERE id = 3");
    gen_broken(dir, "badtypes.sqlite", "UPDATE threads SET os_tid = 'x' WHERE id = 1");
    gen_broken(dir, "badkind.sqlite", "UPDATE stages SET kind = 'bogus' WHERE id = 3");
    gen_broken(dir, "unknownthread.sqlite", "UPDATE range_chunks SET thread = 99 WHERE id = 2");
    /* Stage 40 does not exist: begin tag 41, delta 0. */
    gen_broken(dir, "unknownstage.sqlite", "UPDATE range_chunks SET data = x'45002900', n_events = 1 WHERE id = 1");
    /* A view where a table belongs: the reader must refuse it, never run it. */
    gen_broken(dir, "viewtrap.sqlite",
               "DROP TABLE stages; CREATE VIEW stages AS SELECT 0 AS id, load_extension('/nonexistent') AS name, "
               "'work' AS kind");
    /* Lying chunk headers (t0 > t1, negative counts): ignored where they are only hints. */
    gen_broken(dir, "liar.sqlite", "UPDATE range_chunks SET t0_ns = t1_ns + 5, n_ranges = -3 WHERE id = 4");
}

/* N ranges over 8 threads, nested one deep, chunks of 4096 events. */
static void generate_big(const char *path, long n)
{
    gen_trace g;
    gen_init(&g, "big", "1700000000-9");
    g.chunk_events = 4096;
    g.profile_interval = 100;
    uint32_t s_outer = gen_stage(&g, "outer", "work");
    uint32_t s_inner = gen_stage(&g, "inner", "copy");
    uint32_t s_wait = gen_stage(&g, "wait", "wait_input");
    for (int i = 0; i < 8; i++) gen_thread_add(&g, i ? "worker" : "main", i ? "worker" : "main");
    uint64_t seed = 1;
    long per_thread = n / 8;
    int64_t end = 0;
    for (int i = 0; i < 8; i++) {
        gen_thread *t = &g.threads[i];
        int64_t ts = BASE_NS;
        for (long k = 0; k + 3 <= per_thread; k += 3) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t d = 1000 + (int64_t)(seed >> 40) % 100000;
            gen_range(t, s_wait, ts, ts + d / 3);
            gen_begin(t, s_outer, ts + d / 3);
            gen_range(t, s_inner, ts + d / 2, ts + d / 2 + d / 5);
            gen_end(t, ts + d);
            ts += d + 100;
        }
        if (ts > end) end = ts;
    }
    uint32_t steps = 60;
    for (uint32_t k = 0; k < steps; k++) gen_step(&g, k, BASE_NS + (int64_t)((end - BASE_NS) / (steps - 1)) * k, 100);
    gen_write(&g, path);
    gen_free(&g);
}

/* ---- tests: quantiles ---------------------------------------------------------------- */

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs the quantile engine over groups of values, replaying them as often as
 * it asks, and compares every percentile with the sorted truth. */
static void check_quant(int64_t **vals, const size_t *n, uint32_t n_groups, uint32_t exact, uint64_t collect,
                        int min_passes)
{
    static const uint32_t pm[] = {1, 500, 950, 990, 1000};
    an_quant *q = an_quant_new(n_groups, pm + 1, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    int more, passes = 0;
    do {
        passes++;
        for (uint32_t gi = 0; gi < n_groups; gi++)
            for (size_t i = 0; i < n[gi]; i++) an_quant_add(q, gi, vals[gi][i]);
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
    } while (more);
    assert_true(passes >= min_passes);
    for (uint32_t gi = 0; gi < n_groups; gi++) {
        int64_t *sorted = malloc((n[gi] + 1) * sizeof *sorted);
        if (n[gi]) memcpy(sorted, vals[gi], n[gi] * sizeof *sorted);
        qsort(sorted, n[gi], sizeof *sorted, cmp64);
        assert_int_equal(an_quant_count(q, gi), n[gi]);
        for (uint32_t p = 0; p < 3; p++) {
            uint64_t rank = (n[gi] * pm[p + 1] + 999) / 1000;
            int64_t want = n[gi] ? sorted[(rank ? rank : 1) - 1] : 0;
            assert_int_equal(an_quant_get(q, gi, p), want);
        }
        free(sorted);
    }
    an_quant_free(q);
}

static void test_quant_exact_small(void **state)
{
    (void)state;
    int64_t a[] = {5, 1, 4, 2, 3}; /* p50 = 3 (rank 3), p95 = p99 = 5 */
    int64_t b[100];
    for (int i = 0; i < 100; i++) b[i] = 100 - i; /* p50 = 50, p95 = 95, p99 = 99 */
    int64_t *vals[] = {a, b, NULL};
    size_t n[] = {5, 100, 0};
    check_quant(vals, n, 3, 512, 1 << 20, 1);
}

static void test_quant_multipass(void **state)
{
    (void)state;
    enum { N = 50000, G = 6 };
    int64_t *vals[G];
    size_t n[G];
    uint64_t seed = 12345;
    for (int gi = 0; gi < G; gi++) {
        vals[gi] = malloc(N * sizeof **vals);
        n[gi] = N - (size_t)gi * 997;
        for (size_t i = 0; i < n[gi]; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            uint64_t r = seed >> 11;
            switch (gi) {
            case 0: vals[gi][i] = (int64_t)(r % 1000000000ULL); break;           /* wide uniform */
            case 1: vals[gi][i] = 4000000; break;                                /* all equal */
            case 2: vals[gi][i] = r & 1 ? 7 : 1000000007; break;                 /* two values */
            case 3: vals[gi][i] = (int64_t)(1000.0 / (1e-6 + (double)(r % 1000000) / 1e6)); break; /* heavy tail */
            case 4: vals[gi][i] = (int64_t)(r % 60); break;                      /* below 64: exact buckets */
            default: vals[gi][i] = INT64_MAX - (int64_t)(r % 3); break;          /* the top of the range */
            }
        }
    }
    /* Tiny limits force histograms, budget exhaustion and refinement passes. */
    check_quant(vals, n, G, 64, 100, 3);
    /* Generous limits: two passes. */
    check_quant(vals, n, G, 512, 1 << 22, 2);
    for (int gi = 0; gi < G; gi++) free(vals[gi]);
}

/* an_quant_fold: a group that gets its values in pass 1 by folding other
 * groups in (summary's roles), and directly in later passes, reports what a
 * group given every value directly reports: for exact groups folded into a
 * small one, an exact one into a histogram, histograms into histograms, and
 * folds that push an exact group over its limit; with limits that force
 * several passes and with generous ones. */
static void check_fold(uint32_t exact, uint64_t collect)
{
    static const uint32_t pm[] = {500, 950, 990};
    enum { SRC = 4, N = 20000 };
    /* groups 0..3: sources; 4: folded from 0 and 1 (small + small);
     * 5: from 1 and 2 (small + large); 6: from 2 and 3 (large + large);
     * 7..9: direct references for 4..6 */
    static const size_t n[SRC] = {40, 300, N, N / 2};
    int64_t *vals[SRC];
    uint64_t seed = 99;
    for (int s = 0; s < SRC; s++) {
        vals[s] = malloc(n[s] * sizeof **vals);
        assert_non_null(vals[s]);
        for (size_t i = 0; i < n[s]; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            vals[s][i] = s == 3 ? 5000 + (int64_t)(seed >> 50) % 7 : (int64_t)((seed >> 20) % 1000000);
        }
    }
    static const int pair[3][2] = {{0, 1}, {1, 2}, {2, 3}};
    an_quant *q = an_quant_new(10, pm, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    assert_int_equal(an_quant_fold(q, 4, 4), -1); /* not into itself */
    int more, passes = 0;
    do {
        passes++;
        for (int s = 0; s < SRC; s++)
            for (size_t i = 0; i < n[s]; i++) an_quant_add(q, (uint32_t)s, vals[s][i]);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 2; j++) {
                int s = pair[k][j];
                for (size_t i = 0; i < n[s]; i++) {
                    an_quant_add(q, (uint32_t)(7 + k), vals[s][i]);
                    if (passes > 1) an_quant_add(q, (uint32_t)(4 + k), vals[s][i]);
                }
                if (passes == 1) assert_int_equal(an_quant_fold(q, (uint32_t)(4 + k), (uint32_t)s), 0);
            }
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
        if (more) assert_int_equal(an_quant_fold(q, 4, 0), -1); /* pass 1 only */
    } while (more);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(an_quant_count(q, (uint32_t)(4 + k)), n[pair[k][0]] + n[pair[k][1]]);
        for (uint32_t p = 0; p < 3; p++)
            assert_int_equal(an_quant_get(q, (uint32_t)(4 + k), p), an_quant_get(q, (uint32_t)(7 + k), p));
    }
    an_quant_free(q);
    for (int s = 0; s < SRC; s++) free(vals[s]);
}

static void test_quant_fold(void **state)
{
    (void)state;
    check_fold(64, 100);      /* histograms everywhere, refinement passes */
    check_fold(512, 1 << 22); /* exact small groups, two passes */
}

/* ---- tests: formatting --------------------------------------------------------------- */

static void test_fmt(void **state)
{
    (void)state;
    char buf[64];
    an_fmt_fixed(buf, 62500000, 6, 3);
    assert_string_equal(buf, "62.500");
    an_fmt_fixed(buf, 1234567, 6, 6);
    assert_string_equal(buf, "1.234567");
    an_fmt_fixed(buf, 1999500, 6, 3); /* half away from zero */
    assert_string_equal(buf, "2.000");
    an_fmt_fixed(buf, -1500, 3, 3);
    assert_string_equal(buf, "-1.500");
    an_fmt_fixed(buf, -400, 6, 3); /* rounds to zero: no sign */
    assert_string_equal(buf, "0.000");
    an_fmt_fixed(buf, INT64_MIN, 9, 9);
    assert_string_equal(buf, "-9223372036.854775808");
    an_fmt_i64(buf, INT64_MIN);
    assert_string_equal(buf, "-9223372036854775808");
    an_fmt_i64(buf, 0);
    assert_string_equal(buf, "0");
}

static char *capture(void (*fn)(FILE *, const char *), const char *in)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    fn(m, in);
    fclose(m);
    return buf;
}

static void test_escaping(void **state)
{
    (void)state;
    char *s = capture(an_json_string, "a\"b\\c\n\x01\xc3\xa9\xff\xed\xa0\x80z");
    /* quote, backslash, newline, control, valid é, invalid byte, a surrogate (3 invalid bytes) */
    assert_string_equal(s, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\\ufffd\\ufffd\\ufffd\\ufffdz\"");
    free(s);
    s = capture(an_csv_field, "plain");
    assert_string_equal(s, "plain");
    free(s);
    s = capture(an_csv_field, "a,\"b\"");
    assert_string_equal(s, "\"a,\"\"b\"\"\"");
    free(s);
    s = capture(an_csv_field, " lead");
    assert_string_equal(s, "\" lead\"");
    free(s);
}

static char *render(an_format fmt)
{
    static const an_col cols[] = {{"name", AN_T_STR, 0}, {"ms", AN_T_MS, 0}, {"pct", AN_T_PCT, 0}, {"n", AN_T_INT, 0}};
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    an_out *o = an_out_new(m, fmt);
    an_table *t = an_table_new(o, "t", cols, 4);
    an_put_str(t, "a\x1b[31m");
    an_put_ns(t, 62500000);
    an_put_pct(t, 62.5);
    an_put_int(t, 8);
    an_row_end(t);
    an_table_gap(t);
    an_put_str(t, "long name");
    an_put_null(t);
    an_put_pct(t, NAN);
    an_put_int(t, -1);
    an_row_end(t);
    an_table_end(t);
    assert_int_equal(an_out_finish(o), 0);
    fclose(m);
    return buf;
}

static void test_tables(void **state)
{
    (void)state;
    char *s = render(AN_FMT_TEXT);
    assert_string_equal(s, "name           ms    pct   n\n"
                           "a?[31m     62.500  62.5%   8\n"
                           "\n"
                           "long name       -      -  -1\n");
    free(s);
    s = render(AN_FMT_CSV);
    assert_string_equal(s, "name,ms,pct,n\na\x1b[31m,62.500000,62.5,8\nlong name,,,-1\n");
    free(s);
    s = render(AN_FMT_JSON);
    assert_string_equal(s, "{\n\"t\": [\n  {\"name\": \"a\\u001b[31m\", \"ms\": 62.500000, \"pct\": 62.5, \"n\": 8},\n"
                           "  {\"name\": \"long name\", \"ms\": null, \"pct\": null, \"n\": -1}\n]\n}\n");
    free(s);
}

/* ---- tests: options and windows ------------------------------------------------------- */

static void test_args(void **state)
{
    (void)state;
    static const an_opt opts[] = {{"every", 1, 1}, {"flag", 0, 2}, {"help", 0, AN_OPT_HELP}, {NULL, 0, 0}};
    char *argv[] = {"cmd", "a", "--every=3", "--flag", "b", "--every", "4", "--", "--flag", "-", NULL};
    an_args a;
    assert_int_equal(an_args_init(&a, "cmd", 10, argv), 0);
    assert_int_equal(an_args_next(&a, opts), 1);
    assert_string_equal(a.value, "3");
    assert_int_equal(an_args_next(&a, opts), 2);
    assert_int_equal(an_args_next(&a, opts), 1);
    assert_string_equal(a.value, "4");
    assert_int_equal(an_args_next(&a, opts), 0);
    assert_int_equal(a.n_pos, 4);
    assert_string_equal(a.pos[0], "a");
    assert_string_equal(a.pos[1], "b");
    assert_string_equal(a.pos[2], "--flag");
    assert_string_equal(a.pos[3], "-");
    an_args_free(&a);
    char *bad1[] = {"cmd", "--nope", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad1), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
    char *bad2[] = {"cmd", "--every", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad2), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
    char *bad3[] = {"cmd", "--flag=1", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad3), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
}

static void test_window_parse(void **state)
{
    (void)state;
    an_window_spec w;
    assert_int_equal(an_window_parse_steps(&w, "2:4"), 0);
    assert_true(w.has_a && w.has_b && w.step_a == 2 && w.step_b == 4);
    assert_int_equal(an_window_parse_steps(&w, "3:"), 0);
    assert_true(w.has_a && !w.has_b);
    assert_int_equal(an_window_parse_steps(&w, "4:2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "x:2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "1:2:3"), -1);
    assert_int_equal(an_window_parse_time(&w, "0.25:0.5"), 0);
    assert_int_equal(w.time_a_ns, 250000000);
    assert_int_equal(w.time_b_ns, 500000000);
    assert_int_equal(an_window_parse_time(&w, ":1e-3"), 0);
    assert_int_equal(w.time_b_ns, 1000000);
    assert_int_equal(an_window_parse_time(&w, "-1:2"), -1);
    assert_int_equal(an_window_parse_time(&w, "nan:2"), -1);
    assert_int_equal(an_window_parse_time(&w, "2:1"), -1);
}

/* ---- tests: statistics on the generated trace ------------------------------------------- */

/* tmp_dir/name: a trace setup_traces generated. */
static const char *generated_trace(const char *name)
{
    static char buf[PATH_MAX + 64];
    snprintf(buf, sizeof buf, "%s/%s", tmp_dir, name);
    return buf;
}

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
    assert_int_equal(an_trace_open(&t, generated_trace("gen.sqlite")), 0);
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
    assert_int_equal(an_trace_open(&t, generated_trace("gen.sqlite")), 0);
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
    assert_int_equal(an_trace_open(&t, generated_trace("many.sqlite")), 0);
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

    assert_int_equal(an_trace_open(&t, generated_trace("gen.sqlite")), 0);
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
    assert_int_equal(an_trace_open(&t[0], generated_trace("rank0.sqlite")), 0);
    assert_int_equal(an_trace_open(&t[1], generated_trace("rank1.sqlite")), 0);
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

/* The reader's windows (what `analyze intervals` prints) equal the
 * aggregator fed directly from the generator's events. */
static void on_window_append(const st_window *w, void *arg) { on_window_text(w, arg); }

static void test_intervals_equal(void **state)
{
    (void)state;
    gen_trace g;
    gen_main(&g, "complete");
    char *want = gen_intervals_text(&g, 2);
    gen_free(&g);
    st_reader *r;
    assert_int_equal(st_reader_open(&r, generated_trace("gen.sqlite")), ST_OK);
    char *got = NULL;
    assert_int_equal(st_reader_windows(r, 2, on_window_append, &got), ST_OK);
    assert_non_null(got);
    assert_string_equal(got, want);
    /* Window 0 splits allreduce at 200 ms: 50 ms in it. */
    assert_non_null(strstr(want, "profile steps 1-2  window 0.200 s  tokens 2000  tokens/s 10000\n"));
    assert_non_null(strstr(want, "allreduce 25.0% 50.0ms"));
    free(want);
    free(got);
    st_reader_close(r);
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
    assert_int_equal(an_trace_open(&t, generated_trace("unended.sqlite")), 0);
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
    gen_trace g;
    gen_unended(&g);
    char *want = gen_intervals_text(&g, 1);
    gen_free(&g);
    st_reader *r;
    assert_int_equal(st_reader_open(&r, generated_trace("unended.sqlite")), ST_OK);
    char *got = NULL;
    assert_int_equal(st_reader_windows(r, 1, on_window_append, &got), ST_OK);
    assert_string_equal(got, want);
    assert_non_null(strstr(want, "profile steps 4-4  window 0.100 s  tokens 100  tokens/s 1000\n"));
    assert_non_null(strstr(want, "worker       worker    outer 100.0% 100.0ms\n"));
    free(want);
    free(got);
    st_reader_close(r);
}

static int setup_traces(void **state)
{
    (void)state;
    if (make_tmp_dir("test_analyze")) return -1;
    generate_all(tmp_dir);
    return 0;
}

static int teardown_traces(void **state)
{
    (void)state;
    return remove_tmp_dir();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--generate") == 0) {
        generate_all(argv[2]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--big") == 0) {
        generate_big(argv[2], atol(argv[3]));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_exact_small),
        cmocka_unit_test(test_quant_multipass),
        cmocka_unit_test(test_quant_fold),
        cmocka_unit_test(test_fmt),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_window_parse),
        cmocka_unit_test(test_stats_whole),
        cmocka_unit_test(test_stats_windows),
        cmocka_unit_test(test_stats_filters_and_passes),
        cmocka_unit_test(test_stats_merged),
        cmocka_unit_test(test_intervals_equal),
        cmocka_unit_test(test_unended_ranges),
    };
    return cmocka_run_group_tests(tests, setup_traces, teardown_traces);
}
