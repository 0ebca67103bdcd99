/* test_analyze2.c: unit tests of the pipeline model behind `analyze
 * bottleneck`, `diff` and `report` (analyze/model.c, verdict.c), and the generator
 * of the traces with exactly known answers that tests/it_analyze2.sh and
 * tests/it_report.sh run the commands on.
 *
 * Traces are written directly (SQLite + the chunk encoder + the schema), not
 * through the recording API, so every timestamp is exact and every expected
 * number below is worked out by hand in the comments of the generators.
 *
 *   test_analyze2                  the cmocka tests
 *   test_analyze2 --generate DIR   writes the traces of the integration tests
 *
 * The analyzer's sources are compiled in (it is a program, not a library).
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

#include "encoding.h"
#include "st_reader.h"
#include "st_schema.h"

#include "../analyze/diff_stats.h"
#include "../analyze/gpu_activity.h"
#include "../analyze/queues.h"
#include "../analyze/verdict.h"

#define MS 1000000LL
#define US 1000LL
#define BASE_NS 1000000000LL

/* ---- the generator ------------------------------------------------------------------------ */

typedef struct g_event {
    int is_end;
    uint32_t stage;
    int64_t ts;
} g_event;

typedef struct g_thread {
    const char *name, *role;
    g_event *ev;
    size_t n, cap;
} g_thread;

typedef struct g_sample {
    uint32_t thread, counter;
    int64_t ts;
    double value;
} g_sample;

#define G_MAX 16
#define G_STEPS 128
typedef struct g_trace {
    const char *program, *run_id;
    uint32_t profile_interval;
    uint32_t n_stages, n_threads, n_counters, n_steps;
    const char *stage_name[G_MAX], *stage_kind[G_MAX], *counter_name[G_MAX];
    g_thread threads[G_MAX];
    uint64_t step[G_STEPS], step_tokens[G_STEPS];
    int64_t step_ts[G_STEPS];
    g_sample samples[4 * G_STEPS];
    uint32_t n_samples;
} g_trace;

static void g_init(g_trace *g, const char *program, uint32_t profile_interval)
{
    memset(g, 0, sizeof *g);
    g->program = program;
    g->run_id = "1700000000-77";
    g->profile_interval = profile_interval;
}

static void g_free(g_trace *g)
{
    for (uint32_t i = 0; i < g->n_threads; i++) free(g->threads[i].ev);
}

static uint32_t g_stage(g_trace *g, const char *name, const char *kind)
{
    g->stage_name[g->n_stages] = name;
    g->stage_kind[g->n_stages] = kind;
    return g->n_stages++;
}

static uint32_t g_thread_add(g_trace *g, const char *name, const char *role)
{
    g->threads[g->n_threads] = (g_thread){name, role, NULL, 0, 0};
    return g->n_threads++;
}

static void g_push(g_trace *g, uint32_t t, int is_end, uint32_t stage, int64_t ts)
{
    g_thread *th = &g->threads[t];
    if (th->n == th->cap) {
        th->cap = th->cap ? th->cap * 2 : 64;
        th->ev = realloc(th->ev, th->cap * sizeof *th->ev);
        assert_non_null(th->ev);
    }
    th->ev[th->n++] = (g_event){is_end, stage, ts};
}

/* [a, b) in ns from BASE_NS */
static void g_range(g_trace *g, uint32_t t, uint32_t stage, int64_t a, int64_t b)
{
    g_push(g, t, 0, stage, BASE_NS + a);
    g_push(g, t, 1, 0, BASE_NS + b);
}

static void g_step(g_trace *g, uint64_t step, int64_t ts, uint64_t tokens)
{
    g->step[g->n_steps] = step;
    g->step_ts[g->n_steps] = BASE_NS + ts;
    g->step_tokens[g->n_steps++] = tokens;
}

static void g_sample_add(g_trace *g, uint32_t thread, uint32_t counter, int64_t ts, double v)
{
    g->samples[g->n_samples++] = (g_sample){thread, counter, BASE_NS + ts, v};
}

static void g_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("SQL failed: %s: %s", sql, err ? err : "?");
}

static void g_bind_exec(sqlite3 *db, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    va_list ap;
    va_start(ap, fmt);
    for (int i = 0; fmt[i]; i++) {
        if (fmt[i] == 'i') sqlite3_bind_int64(st, i + 1, va_arg(ap, long long));
        else if (fmt[i] == 's') sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else {
            const st_buf *b = va_arg(ap, const st_buf *);
            sqlite3_bind_blob(st, i + 1, b->data, (int)b->len, SQLITE_TRANSIENT);
        }
    }
    va_end(ap);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

/* Writes g to path as a schema-1 trace; chunks of 5 events, so chunk
 * boundaries cut through open ranges. */
static void g_write(const g_trace *g, const char *path)
{
    unlink(path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    g_sql(db, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF");
    g_sql(db, st_schema_sql);
    g_sql(db, "BEGIN");
    static const char meta[] = "INSERT INTO meta VALUES (?, ?)";
    const char *kv[][2] = {{"schema_version", "1"}, {"status", "complete"},   {"tool_version", "0.1.0"},
                           {"start_utc", "2023-11-14T22:13:20Z"},             {"clock", "monotonic"},
                           {"tsc_hz", "0"},         {"host", "testhost"},     {"pid", "77"},
                           {"argv", "gen2"},        {"rank", "0"},            {"world_size", "1"},
                           {"commit_ms", "250"},    {"ring_records", "65536"}, {"dropped_events", "0"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) g_bind_exec(db, meta, "ss", kv[i][0], kv[i][1]);
    char buf[32];
    g_bind_exec(db, meta, "ss", "program", g->program);
    g_bind_exec(db, meta, "ss", "run_id", g->run_id);
    snprintf(buf, sizeof buf, "%lld", BASE_NS);
    g_bind_exec(db, meta, "ss", "start_ns", buf);
    snprintf(buf, sizeof buf, "%u", g->profile_interval);
    g_bind_exec(db, meta, "ss", "profile_interval", buf);
    for (uint32_t i = 0; i < g->n_threads; i++)
        g_bind_exec(db, "INSERT INTO threads VALUES (?, ?, ?, ?, -1, 0, 0)", "iiss", (long long)i, 2000LL + i,
                    g->threads[i].name, g->threads[i].role);
    for (uint32_t i = 0; i < g->n_stages; i++)
        g_bind_exec(db, "INSERT INTO stages VALUES (?, ?, ?)", "iss", (long long)i, g->stage_name[i], g->stage_kind[i]);
    for (uint32_t i = 0; i < g->n_counters; i++)
        g_bind_exec(db, "INSERT INTO counter_names VALUES (?, ?, 'items')", "is", (long long)i, g->counter_name[i]);
    for (uint32_t i = 0; i < g->n_steps; i++)
        g_bind_exec(db, "INSERT INTO steps VALUES (?, ?, ?, 0)", "iii", (long long)g->step[i], (long long)g->step_ts[i],
                    (long long)g->step_tokens[i]);
    st_event_encoder *e = calloc(1, sizeof *e);
    assert_non_null(e);
    static const char chunk_sql[] =
        "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) VALUES (?, ?, ?, ?, ?, ?)";
    for (uint32_t i = 0; i < g->n_threads; i++) {
        const g_thread *t = &g->threads[i];
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
            if (e->n_events == 5 || k + 1 == t->n) {
                g_bind_exec(db, chunk_sql, "iiiiib", (long long)i, (long long)e->t0_ns, (long long)e->t1_ns,
                            (long long)e->n_events, (long long)n_ranges, &e->buf);
                n_ranges = 0;
                assert_int_equal(st_event_chunk_start(e), 0);
            }
        }
    }
    st_buf_free(&e->buf);
    free(e);
    for (uint32_t i = 0; i < g->n_threads; i++) {
        st_counter_encoder c;
        memset(&c, 0, sizeof c);
        assert_int_equal(st_counter_chunk_start(&c), 0);
        for (uint32_t k = 0; k < g->n_samples; k++)
            if (g->samples[k].thread == i)
                assert_int_equal(st_counter_put(&c, g->samples[k].counter, g->samples[k].ts, g->samples[k].value), 0);
        if (c.n_samples)
            g_bind_exec(db, "INSERT INTO counter_chunks(thread, t0_ns, t1_ns, n_samples, data) VALUES (?, ?, ?, ?, ?)",
                        "iiiib", (long long)i, (long long)c.t0_ns, (long long)c.t1_ns, (long long)c.n_samples, &c.buf);
        st_buf_free(&c.buf);
    }
    g_sql(db, "COMMIT");
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* The trainer's stages, as far as these traces need them. */
typedef struct g_stages {
    uint32_t load, queue_put, batch_wait, forward, postprocess, queue_wait, optimizer, step_wait;
} g_stages;

static void g_trainer_stages(g_trace *g, g_stages *s)
{
    s->load = g_stage(g, "load", "work");
    s->queue_put = g_stage(g, "queue_put", "wait_output");
    s->batch_wait = g_stage(g, "batch_wait", "wait_input");
    s->forward = g_stage(g, "forward", "work");
    s->postprocess = g_stage(g, "postprocess", "work");
    s->queue_wait = g_stage(g, "queue_wait", "wait_input");
    s->optimizer = g_stage(g, "optimizer", "work");
    s->step_wait = g_stage(g, "step_wait", "wait_input");
}

/* One step of a pipeline at t (10 ms per step); target_bound picks the
 * balance (2: target-bound after a start-up: target0 is in no range for the
 * first 4 ms, then forward [4, 8.5] and the rest as target-bound). Target-bound:
 *   loader   load [0, 1], queue_put [1, 10]                  busy 10%, wait_output 90%
 *   target   batch_wait [0, 0.5], forward [0.5, 8.5],
 *            postprocess [8.5, 9.5], queue_put [9.5, 10]      busy 90% (forward 80%), wi 5%, wo 5%
 *   drafterN queue_wait [0, 6], forward [6, 9], optimizer [9, 9.5], idle 0.5
 *                                                              busy 35%, wait_input 60%, idle 5%
 *   main     step_wait [0, 10]                                 wait_input 100%
 * Drafter-bound: target batch_wait [0, 0.5], forward [0.5, 3.5], postprocess
 * [3.5, 4], queue_put [4, 10] (busy 35%, wo 60%); drafters queue_wait
 * [0, 0.5], forward [0.5, 9], optimizer [9, 10] (busy 95%, wi 5%). */
static void g_pipeline_step(g_trace *g, const g_stages *s, int64_t t, int target_bound)
{
    g_range(g, 0, s->load, t, t + 1 * MS);
    g_range(g, 0, s->queue_put, t + 1 * MS, t + 10 * MS);
    if (target_bound != 2) g_range(g, 1, s->batch_wait, t, t + 500 * US);
    if (target_bound) {
        g_range(g, 1, s->forward, t + (target_bound == 2 ? 4 * MS : 500 * US), t + 8500 * US);
        g_range(g, 1, s->postprocess, t + 8500 * US, t + 9500 * US);
        g_range(g, 1, s->queue_put, t + 9500 * US, t + 10 * MS);
    } else {
        g_range(g, 1, s->forward, t + 500 * US, t + 3500 * US);
        g_range(g, 1, s->postprocess, t + 3500 * US, t + 4 * MS);
        g_range(g, 1, s->queue_put, t + 4 * MS, t + 10 * MS);
    }
    for (uint32_t d = 2; d <= 3; d++) {
        if (target_bound) {
            g_range(g, d, s->queue_wait, t, t + 6 * MS);
            g_range(g, d, s->forward, t + 6 * MS, t + 9 * MS);
            g_range(g, d, s->optimizer, t + 9 * MS, t + 9500 * US);
        } else {
            g_range(g, d, s->queue_wait, t, t + 500 * US);
            g_range(g, d, s->forward, t + 500 * US, t + 9 * MS);
            g_range(g, d, s->optimizer, t + 9 * MS, t + 10 * MS);
        }
    }
    g_range(g, 4, s->step_wait, t, t + 10 * MS);
}

static void g_pipeline_threads(g_trace *g)
{
    g_thread_add(g, "loader", "loader");
    g_thread_add(g, "target0", "target");
    g_thread_add(g, "drafter0", "drafter");
    g_thread_add(g, "drafter1", "drafter");
    g_thread_add(g, "main", "main");
}

/* 20 steps of 10 ms, 1000 tokens each (100000 tokens/s), target-bound
 * throughout. A queue_depth counter on the target thread: 0 for the first
 * 5 ms of each step, 3 for the rest: mean 1.5, max 3, 50% of the time at max
 * and 50% at zero, 40 samples. */
static void gen_target(g_trace *g)
{
    g_stages s;
    g_init(g, "gen2", 10);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    g->counter_name[g->n_counters++] = "queue_depth";
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) {
        int64_t t = k * 10 * MS;
        g_pipeline_step(g, &s, t, 1);
        g_sample_add(g, 1, 0, t, 0);
        g_sample_add(g, 1, 0, t + 5 * MS, 3);
    }
}

/* Partial windows: marks of steps 3..22 every 10 ms (tokens 1000 + 100 k),
 * profile_interval 5, so the windows are steps 6-10, 11-15 and 16-20
 * (marks 5 to 20); steps 4-5 and 21-22 are in no window. Drafter-bound in
 * steps 4-5 and 21-22, target-bound in 6-20: a partial window counted would
 * show the drafter. */
static void gen_partial(g_trace *g)
{
    g_stages s;
    g_init(g, "gen2", 5);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 3; k <= 22; k++) g_step(g, (uint64_t)k, (k - 3) * 10 * MS, 1000 + 100 * (uint64_t)k);
    for (int k = 3; k < 22; k++) g_pipeline_step(g, &s, (k - 3) * 10 * MS, k + 1 >= 6 && k + 1 <= 20);
}

/* The same, target-bound in steps 1-10, drafter-bound in steps 11-20;
 * windows of 5 steps: target, target, drafter (moved), drafter. Over the
 * whole trace target is busy 62.5%, the drafters 65%: drafter. */
static void gen_moves(g_trace *g)
{
    g_stages s;
    g_init(g, "gen2", 5);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) g_pipeline_step(g, &s, k * 10 * MS, k < 10);
}

static uint64_t g_rand(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return *seed >> 33;
}

/* Diff pair, 40 steps of 1000 tokens. Each worker thread per step: compute
 * (A 4 ms, B 8 ms, each +-200 us of noise), log (1 ms +-100 us, both), check
 * (A one 0.5 ms range, B two of 0.25 ms: the same time, the count doubled),
 * then 0.3 ms of idle after the slowest worker; main waits in step_wait. A has
 * one worker, B two: roles and stages are matched by name. Returns the sum of
 * the step durations (ns). */
static int64_t gen_diff(g_trace *g, int is_b)
{
    g_init(g, is_b ? "diffb" : "diffa", 10);
    g->run_id = is_b ? "1700000100-2" : "1700000000-1";
    uint32_t s_compute = g_stage(g, "compute", "work");
    uint32_t s_log = g_stage(g, "log", "work");
    uint32_t s_check = g_stage(g, "check", "work");
    uint32_t s_wait = g_stage(g, "step_wait", "wait_input");
    g_thread_add(g, "main", "main");
    uint32_t n_workers = is_b ? 2 : 1;
    g_thread_add(g, "worker0", "worker");
    if (is_b) g_thread_add(g, "worker1", "worker");
    uint64_t seed = is_b ? 977 : 13;
    int64_t t = 0;
    g_step(g, 0, 0, 0);
    for (int k = 1; k <= 40; k++) {
        int64_t longest = 0;
        for (uint32_t w = 0; w < n_workers; w++) {
            int64_t c = (is_b ? 8 : 4) * MS + (int64_t)(g_rand(&seed) % 401) * US - 200 * US;
            int64_t l = 1 * MS + (int64_t)(g_rand(&seed) % 201) * US - 100 * US;
            int64_t a = t;
            g_range(g, 1 + w, s_compute, a, a + c);
            g_range(g, 1 + w, s_log, a + c, a + c + l);
            a += c + l;
            if (is_b) {
                g_range(g, 1 + w, s_check, a, a + 250 * US);
                g_range(g, 1 + w, s_check, a + 250 * US, a + 500 * US);
            } else {
                g_range(g, 1 + w, s_check, a, a + 500 * US);
            }
            if (a + 500 * US - t > longest) longest = a + 500 * US - t;
        }
        int64_t d = longest + 300 * US;
        g_range(g, 0, s_wait, t, t + d);
        t += d;
        g_step(g, (uint64_t)k, t, 1000);
    }
    return t;
}

/* Roles that are not the trainer's: the order is inferred from the waits.
 * producer waits only for output, zeta for both, consumer only for input. */
static void gen_inferred(g_trace *g)
{
    g_init(g, "gen2", 5);
    uint32_t produce = g_stage(g, "produce", "work"), put = g_stage(g, "queue_put", "wait_output");
    uint32_t wait = g_stage(g, "queue_wait", "wait_input"), consume = g_stage(g, "consume", "work");
    uint32_t step_wait = g_stage(g, "step_wait", "wait_input");
    g_thread_add(g, "c", "consumer");
    g_thread_add(g, "m", "main");
    g_thread_add(g, "p", "producer");
    g_thread_add(g, "z", "zeta");
    for (int k = 0; k <= 10; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 100 : 0);
    for (int k = 0; k < 10; k++) {
        int64_t t = k * 10 * MS;
        g_range(g, 0, wait, t, t + 4 * MS);
        g_range(g, 0, consume, t + 4 * MS, t + 10 * MS);
        g_range(g, 1, step_wait, t, t + 10 * MS);
        g_range(g, 2, produce, t, t + 2 * MS);
        g_range(g, 2, put, t + 2 * MS, t + 10 * MS);
        g_range(g, 3, wait, t, t + 1 * MS);
        g_range(g, 3, produce, t + 1 * MS, t + 5 * MS);
        g_range(g, 3, put, t + 5 * MS, t + 10 * MS);
    }
}

/* No step marks: one window over the span. */
static void gen_nosteps(g_trace *g)
{
    g_init(g, "gen2", 0);
    uint32_t work = g_stage(g, "work", "work");
    g_thread_add(g, "w", "worker");
    for (int k = 0; k < 10; k++) g_range(g, 0, work, k * 10 * MS, k * 10 * MS + 6 * MS);
}

/* No stages at all, yet chunks with begins of stage 3: the decoder checks
 * stage ids only against a non-empty stages table (found by fuzz_reader). */
static void gen_nostages(g_trace *g)
{
    g_init(g, "gen2", 0);
    g_thread_add(g, "w", "worker");
    g_step(g, 0, 0, 0);
    g_step(g, 1, 10 * MS, 10);
    g_range(g, 0, 3, 1 * MS, 5 * MS);
}

/* Dense: 4 steps of 10 ms; per step and thread a 9 ms parent range with a
 * 2 us child every 5 us inside (1800 per step): the report's timeline must
 * merge them per pixel column. */
static void gen_dense(g_trace *g)
{
    g_init(g, "dense", 1);
    uint32_t outer = g_stage(g, "batch", "work"), inner = g_stage(g, "kernel", "work");
    uint32_t wait = g_stage(g, "queue_wait", "wait_input");
    g_thread_add(g, "w0", "worker");
    g_thread_add(g, "w1", "worker");
    for (int k = 0; k <= 4; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 10 : 0);
    for (uint32_t w = 0; w < 2; w++)
        for (int k = 0; k < 4; k++) {
            int64_t t = k * 10 * MS;
            g_range(g, w, wait, t, t + 1 * MS);
            g_push(g, w, 0, outer, BASE_NS + t + 1 * MS);
            for (int i = 0; i < 1800; i++) g_range(g, w, inner, t + 1 * MS + i * 5 * US, t + 1 * MS + i * 5 * US + 2 * US);
            g_push(g, w, 1, 0, BASE_NS + t + 10 * MS);
        }
}

static char *path_in(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    assert_non_null(p);
    snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static void write_one(const char *dir, const char *name, void (*gen)(g_trace *))
{
    g_trace *g = calloc(1, sizeof *g);
    assert_non_null(g);
    gen(g);
    char *p = path_in(dir, name);
    g_write(g, p);
    free(p);
    g_free(g);
    free(g);
}

static void write_gpu_steps(const char *path);
static void write_gpu_pipeline(const char *path, int layout);

static void generate_all(const char *dir)
{
    mkdir(dir, 0777);
    write_one(dir, "target.sqlite", gen_target);
    write_one(dir, "moves.sqlite", gen_moves);
    write_one(dir, "partial.sqlite", gen_partial);
    write_one(dir, "inferred.sqlite", gen_inferred);
    write_one(dir, "nosteps.sqlite", gen_nosteps);
    write_one(dir, "dense.sqlite", gen_dense);
    write_one(dir, "nostages.sqlite", gen_nostages);
    char *gp = path_in(dir, "gpu_steps.sqlite");
    write_gpu_steps(gp);
    free(gp);
    gp = path_in(dir, "gpu_shared.sqlite");
    write_gpu_pipeline(gp, 1);
    free(gp);
    gp = path_in(dir, "gpu_split.sqlite");
    write_gpu_pipeline(gp, 0);
    free(gp);
    gp = path_in(dir, "gpu_twice.sqlite");
    write_gpu_pipeline(gp, 2);
    free(gp);
    for (int b = 0; b < 2; b++) {
        g_trace *g = calloc(1, sizeof *g);
        assert_non_null(g);
        int64_t total = gen_diff(g, b);
        char *p = path_in(dir, b ? "diff_b.sqlite" : "diff_a.sqlite");
        g_write(g, p);
        free(p);
        g_free(g);
        free(g);
        /* the exact periods, for the integration test's tokens/s check */
        char name[32], text[64];
        snprintf(name, sizeof name, "diff_%c.period_ns", b ? 'b' : 'a');
        p = path_in(dir, name);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        snprintf(text, sizeof text, "%lld\n", (long long)total);
        fputs(text, f);
        fclose(f);
        free(p);
    }
}

/* ---- tests ------------------------------------------------------------------------------------- */

static char tmp_dir[256];

static const char *tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmp_dir, name);
    return buf;
}

static void open_pipe(an_trace *t, an_pipe *p, const char *name, const an_pipe_opts *o)
{
    assert_int_equal(an_trace_open(t, tmp_path(name)), 0);
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

static void test_queue_depth(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "target.sqlite", NULL);
    assert_int_equal(p.n_queues, 1);
    const an_pipe_queue *q = &p.queues[0];
    assert_string_equal(q->name, "queue_depth");
    assert_int_equal(q->n_samples, 40);
    assert_int_equal(q->covered_ns, 200 * MS);
    assert_close(q->mean, 1.5);
    assert_close(q->min, 0);
    assert_close(q->max, 3);
    assert_int_equal(q->at_max_ns, 100 * MS);
    assert_int_equal(q->at_zero_ns, 100 * MS);
    assert_close(q->bin_mean[7], 1.5);
    assert_close(q->bin_max[7], 3);
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

static void test_unknown_stage(void **state)
{
    (void)state;
    /* A chunk naming a stage the (empty) stages table lacks is corrupt, as
     * it is when the table is not empty: the scan fails instead of
     * guessing. */
    an_trace t;
    an_pipe p;
    assert_int_equal(an_trace_open(&t, tmp_path("nostages.sqlite")), 0);
    assert_int_not_equal(an_pipe_compute(&p, &t, NULL), 0);
    assert_non_null(strstr(st_last_error(), "corrupt"));
    an_trace_close(&t);
}

static void test_mann_whitney(void **state)
{
    (void)state;
    double a[] = {1, 2, 3, 4, 5}, b[] = {6, 7, 8, 9, 10}, u;
    /* U = 0; mu = 12.5, var = 25/12 * 11; z = 12 / sqrt(22.9167) = 2.5067; p = 0.012186
     * (scipy.stats.mannwhitneyu(a, b, method='asymptotic') gives 0.01219). */
    double p = an_mann_whitney(a, 5, b, 5, &u);
    assert_close(u, 0);
    assert_true(fabs(p - 0.0121857) < 1e-6);
    assert_close(an_mann_whitney(b, 5, a, 5, &u), p);
    assert_close(u, 25);
    /* all tied: p = 1 */
    double c[] = {3, 3, 3}, d[] = {3, 3};
    assert_close(an_mann_whitney(c, 3, d, 2, NULL), 1.0);
    /* ties across the samples: a = {1, 2, 2}, b = {2, 3}: ranks 1, 3, 3 | 3, 5;
     * U = 7 - 6 = 1; tie term 24; var = 6/12 * (6 - 24/20) = 2.4; z = (2 - 0.5)/1.549 */
    double e[] = {1, 2, 2}, f[] = {2, 3};
    p = an_mann_whitney(e, 3, f, 2, &u);
    assert_close(u, 1);
    assert_true(fabs(p - erfc(1.5 / sqrt(2.4) / sqrt(2.0))) < 1e-12);
    double m[] = {5, 1, 3, 2};
    assert_close(an_median(m, 4), 2.5);
    assert_close(an_median(m, 3), 2); /* sorted in place: 1 2 3 */
    assert_true(isnan(an_mann_whitney(a, 0, b, 5, NULL)));
}

/* The GPU tables of a trace (docs/trace-format.md), gpu_strings holding
 * `strings` ("(0, 'kernA'), (1, 'kernB')"). */
static void g_gpu_tables(sqlite3 *db, const char *strings)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "CREATE TABLE gpu_strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
             "CREATE TABLE gpu_chunks(id INTEGER PRIMARY KEY, device INTEGER NOT NULL, stream INTEGER NOT NULL,"
             " t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL);"
             "INSERT INTO gpu_strings VALUES %s",
             strings);
    g_sql(db, sql);
}

/* One gpu_chunks row of records r[0..n). */
static void put_gpu_chunk(sqlite3 *db, int64_t device, int64_t stream, const st_gpu_rec *r, int n)
{
    static const char sql[] =
        "INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?, ?)";
    st_gpu_encoder e;
    memset(&e, 0, sizeof e);
    assert_int_equal(st_gpu_chunk_start(&e), 0);
    for (int i = 0; i < n; i++) assert_int_equal(st_gpu_put(&e, &r[i]), 0);
    g_bind_exec(db, sql, "iiiiib", (long long)device, (long long)stream, (long long)e.t0_ns, (long long)e.t1_ns,
                (long long)e.n_records, &e.buf);
    st_buf_free(&e.buf);
}

/* GPU activity on device 0 over step 0 of gen_target, written with the
 * chunk encoder (target0 is thread 1, os_tid 2001):
 *   kernel A launched at 0.6 ms (forward), runs [1.0, 8.0]
 *   kernel B launched at 7.0 ms (forward), runs [8.02, 8.4]: a 20 us gap
 *            after A with B already issued: launch gap
 *   kernel C launched at 9.6 ms (queue_put), runs [9.7, 9.9]: the gap
 *            [8.4, 9.7] is host wait up to the launch (1.2 ms, while target0
 *            is in postprocess), then 0.1 ms other (over 50 us)
 *   a sync record [8.4, 9.6] on stream 8 (called in forward): a host wait,
 *            not device work
 * Over [0, 10 ms): leading gap [0, 1.0]: host wait 0.6 (batch_wait), other
 * 0.4; trailing [9.9, 10]: other 0.1. Busy 7.58 ms, idle 2.42 ms: host wait
 * 1.8, launch gaps 0.02, other 0.6; host stage postprocess, 1.2 ms. */
static void add_gpu(const char *path, uint32_t postprocess_thread)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    g_gpu_tables(db, "(0, 'kernA'), (1, 'kernB'), (2, 'kernC')");
    int64_t B = BASE_NS;
    st_gpu_rec k[] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + 1 * MS, .dur_ns = 7 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 2, .start_ns = B + 8020 * US, .dur_ns = 380 * US, .correlation = 2},
        {.kind = ST_GPU_KERNEL, .name = 3, .start_ns = B + 9700 * US, .dur_ns = 200 * US, .correlation = 3},
    };
    st_gpu_rec sync = {.kind = ST_GPU_SYNC, .start_ns = B + 8400 * US, .dur_ns = 1200 * US, .correlation = 4};
    st_gpu_rec api[] = {
        {.kind = ST_GPU_API, .start_ns = B + 600 * US, .dur_ns = 5 * US, .correlation = 1},
        {.kind = ST_GPU_API, .start_ns = B + 7 * MS, .dur_ns = 5 * US, .correlation = 2},
        {.kind = ST_GPU_API, .start_ns = B + 9600 * US, .dur_ns = 5 * US, .correlation = 3},
        {.kind = ST_GPU_API, .start_ns = B + 8400 * US, .dur_ns = 1200 * US, .correlation = 4},
    };
    for (int i = 0; i < 4; i++) api[i].os_tid = 2000 + postprocess_thread;
    put_gpu_chunk(db, 0, 7, k, 3);
    put_gpu_chunk(db, 0, 8, &sync, 1);
    put_gpu_chunk(db, -1, 0, api, 4);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_gpu_idle(void **state)
{
    (void)state;
    g_trace *g = calloc(1, sizeof *g);
    assert_non_null(g);
    gen_target(g);
    const char *path = tmp_path("gpu.sqlite");
    g_write(g, path);
    g_free(g);
    free(g);
    add_gpu(path, 1);
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), 0);
    /* the iterator: names, launching thread, stage */
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, t.r, -1, INT64_MIN, INT64_MAX), 0);
    st_gpu_row row;
    static const char *const names[] = {"kernA", "kernB", "kernC"};
    static const char *const stages[] = {"forward", "forward", "queue_put"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st_gpu_iter_next(it, &row), 1);
        assert_string_equal(row.name, names[i]);
        assert_int_equal(row.thread, 1);
        assert_string_equal(st_reader_stage(t.r, (uint32_t)row.stage)->name, stages[i]);
    }
    assert_int_equal(st_gpu_iter_next(it, &row), 1);
    assert_int_equal(row.rec.kind, ST_GPU_SYNC);
    assert_int_equal(row.stream, 8);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)row.stage)->name, "forward");
    assert_int_equal(st_gpu_iter_next(it, &row), 0);
    st_gpu_iter_close(it);

    an_gpu_idle *gpu;
    uint32_t n;
    const char *note;
    assert_int_equal(an_gpu_idle_split(&t, BASE_NS, BASE_NS + 10 * MS, &gpu, &n, &note), 0);
    assert_int_equal(n, 1);
    assert_int_equal(gpu[0].device, 0);
    assert_int_equal(gpu[0].busy_ns, 7580 * US);
    assert_int_equal(gpu[0].idle_ns, 2420 * US);
    assert_int_equal(gpu[0].host_wait_ns, 1800 * US);
    assert_int_equal(gpu[0].launch_gap_ns, 20 * US);
    assert_int_equal(gpu[0].other_ns, 600 * US);
    assert_int_equal(gpu[0].host_thread, 1);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)gpu[0].host_stage)->name, "postprocess");
    /* only the time inside postprocess: [8.5, 9.5] of the wait [8.4, 9.6] */
    assert_int_equal(gpu[0].host_stage_ns, 1000 * US);
    /* host wait by (thread, stage): [0, 0.6] batch_wait 0.5 + forward 0.1;
     * [8.4, 9.6] forward 0.1, postprocess 1.0, queue_put 0.1 */
    assert_int_equal(gpu[0].n_waits, 4);
    static const char *const wst[] = {"postprocess", "batch_wait", "forward", "queue_put"};
    static const int64_t wns[] = {1000 * US, 500 * US, 200 * US, 100 * US};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gpu[0].waits[i].thread, 1);
        assert_string_equal(st_reader_stage(t.r, (uint32_t)gpu[0].waits[i].stage)->name, wst[i]);
        assert_int_equal(gpu[0].waits[i].ns, wns[i]);
    }
    char *text = an_gpu_idle_text(&t, gpu, n, note);
    assert_non_null(strstr(text, "GPU 0 busy 75.8%, idle 2.420 ms: host wait 1.800 ms (mostly while target0 is in "
                                 "'postprocess', 1.000 ms"));
    free(text);
    an_gpu_idle_free(gpu, n);
    an_trace_close(&t);
    unlink(path);
}

/* gpu_steps.sqlite: gen_target's pipeline (marks of steps 0-20 at 10k ms)
 * with a start-up in step 0: target0 (thread 1) is in no range for [0, 4],
 * then forward [4, 8.5], postprocess [8.5, 9.5], queue_put [9.5, 10]; steps
 * 1-19 as gen_target. GPU activity on device 0, all launched by target0:
 *   step 0:  kernel S launched at 3.0 (no stage), runs [5, 8]; kernel X
 *            launched at 9.6 (queue_put), runs [9.7, 9.9]
 *   step k (t = 10k ms, k = 1..19): kernel A launched at t+0.6 (forward),
 *            runs [t+1, t+8]; a memcpy HtoD on stream 8 launched at t+0.55,
 *            runs [t+2, t+3] (inside A: busy unchanged); kernel C launched
 *            at t+9.6 (queue_put), runs [t+9.7, t+9.9]
 * Default window, steps 1:20 = [10, 200) ms (190 ms): busy 19 x 7.2 =
 * 136.8 ms (72.0%), idle 53.2: the first gap [10, 11] is host wait 0.6
 * (batch_wait 0.5, forward 0.1) and other 0.4; in steps 2-19 the gap
 * [t-0.1, t+1] is host wait 0.7 (queue_put 0.1, batch_wait 0.5, forward
 * 0.1) and other 0.4; each gap [t+8, t+9.7] is host wait 1.6 (forward 0.5,
 * postprocess 1.0, queue_put 0.1) and other 0.1; the tail [199.9, 200]
 * other 0.1. Host wait 43.6 = postprocess 19.0 (43.58%), forward 11.4,
 * batch_wait 9.5, queue_put 3.7; other 9.6; launch gaps 0.
 * Steps 0:20 = [0, 200): add [0, 5]: host wait 3.0 in no stage, other 2.0;
 * S busy 3; [8, 9.7]: host wait 1.6 (forward 0.5, postprocess 1.0,
 * queue_put 0.1), other 0.1; X busy 0.2; step 1's first gap now starts at
 * 9.9: host wait 0.7 (queue_put 0.1 more). Busy 140.0 (70.0%), idle 60.0,
 * host wait 48.3 = postprocess 20.0, forward 11.9, batch_wait 9.5, queue_put
 * 3.9, (no stage) 3.0; other 11.7. */
static void gen_gpu_steps(g_trace *g)
{
    g_stages s;
    g_init(g, "gen2", 10);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) g_pipeline_step(g, &s, k * 10 * MS, k ? 1 : 2);
}

static void write_gpu_steps(const char *path)
{
    g_trace *g = calloc(1, sizeof *g);
    assert_non_null(g);
    gen_gpu_steps(g);
    g_write(g, path);
    g_free(g);
    free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    g_gpu_tables(db, "(0, 'startup_init'), (1, 'fwd_gemm'), (2, 'sample_tail')");
    int64_t B = BASE_NS;
    st_gpu_rec k7[64], k8[32], api[128];
    int n7 = 0, n8 = 0, na = 0;
    uint32_t corr = 1;
    k7[n7++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + 5 * MS, .dur_ns = 3 * MS, .correlation = corr};
    api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .start_ns = B + 3 * MS, .dur_ns = 5 * US, .correlation = corr++};
    k7[n7++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 3, .start_ns = B + 9700 * US, .dur_ns = 200 * US, .correlation = corr};
    api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .start_ns = B + 9600 * US, .dur_ns = 5 * US, .correlation = corr++};
    for (int k = 1; k < 20; k++) {
        int64_t t = B + k * 10 * MS;
        k8[n8++] = (st_gpu_rec){.kind = ST_GPU_MEMCPY, .copy_kind = 1, .src_mem = 1, .dst_mem = 2, .bytes = 1 << 20,
                                .start_ns = t + 2 * MS, .dur_ns = 1 * MS, .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .start_ns = t + 550 * US, .dur_ns = 5 * US, .correlation = corr++};
        k7[n7++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 2, .start_ns = t + 1 * MS, .dur_ns = 7 * MS, .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .start_ns = t + 600 * US, .dur_ns = 5 * US, .correlation = corr++};
        k7[n7++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 3, .start_ns = t + 9700 * US, .dur_ns = 200 * US, .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .start_ns = t + 9600 * US, .dur_ns = 5 * US, .correlation = corr++};
    }
    /* API records in time order */
    for (int i = 1; i < na; i++)
        for (int j = i; j > 0 && api[j].start_ns < api[j - 1].start_ns; j--) {
            st_gpu_rec x = api[j];
            api[j] = api[j - 1];
            api[j - 1] = x;
        }
    for (int i = 0; i < na; i++) api[i].os_tid = 2001;
    put_gpu_chunk(db, 0, 7, k7, n7);
    put_gpu_chunk(db, 0, 8, k8, n8);
    put_gpu_chunk(db, -1, 0, api, na);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* gpu_shared.sqlite (shared = 1) and gpu_split.sqlite (shared = 0): a
 * pipeline whose host threads mostly wait on their GPUs. Steps 0-10 at 10k
 * ms, 1000 tokens each (100000 tokens/s). Per step t:
 *   loader    load [0, 1], queue_put [1, 10]
 *   target0   batch_wait [0, 0.5], forward [0.5, 1.5], stream_sync [1.5, 9.5], queue_put [9.5, 10]
 *   drafterN  queue_wait [0, 1], forward [1, 2], stream_sync [2, 10]
 *   main      step_wait [0, 10]
 * Host busy 90% for target and drafters, of which sync 80%: without GPU
 * activity the model could not tell them apart. GPU records (launch API call
 * in the launching thread's forward):
 *   T   target0, device 0, launched t+0.6, runs [t+1, t+7]
 *   D0  drafter0, device 0 when shared (else 1), launched t+1.2, runs [t+5, t+9]
 *   D1  drafter1, device 1, launched t+1.2, runs [t+2, t+6]
 *   U   unknown launcher (no API record), device 1, [t+7, t+7.5]
 *   a sync record on device 0 over [t+1.5, t+9.5]: a host wait, not device work
 * CUDA API calls (named): each launch is a cudaLaunchKernel of 5 us (target0's
 * with a cuLaunchKernel of 3 us inside it, at t+0.601); target0 calls
 * cudaStreamSynchronize over [t+1.5, t+9.5] (8 ms, in stream_sync); drafter1
 * a top-level cuEventRecord of 2 us at t+1.5 (in forward); an untraced thread
 * a cudaLaunchKernel of 10 us at t+3. Over the steady state (steps 1:10,
 * [10, 100) ms, 9 steps): target0 stream_sync cudaStreamSynchronize 9 calls,
 * 72 ms, 80% of the window; target0 forward cudaLaunchKernel 9, 45 us;
 * drafter1 forward cuEventRecord (driver) 9, 18 us; (untraced) 9, 90 us.
 * Shared: device 0 busy [1, 9] = 80%, target 60%, drafter 40%; device 1
 * busy 4.5 ms = 45%, drafter 40%. Roles: target host 10%, GPU 60% (need
 * 60%, device-bound, top GPU stage forward); drafter host 10%, GPU 8 ms per
 * step over 2 threads = 40%. Device 0 (80%) > target's 60% + 1: the
 * bottleneck is GPU 0, its largest user target, stage forward. What-if x2:
 * forward's host 10 ms -> 5, its GPU 60 ms -> 30: target needs 30 ms;
 * device 0 loses 30 ms (all of target's GPU time is there): 50 ms; device 1
 * 45 ms; drafter 40 ms: the limit stays GPU 0 at 5 ms per step, factor 2.
 * Split: device 0 holds T only (60%, no more than target needs), device 1
 * D0, D1 and U: union [2, 9] = 70%, drafter's union the same. Drafter
 * needs 7 ms per step over 2 threads = 35% each, but both share GPU 1: 70%
 * > target's 60% + 1, so GPU 1 is the bottleneck (one role on it), its user
 * drafter, stage forward. What-if x2: forward's GPU time (durations added
 * up: 80 ms) and host time (20 ms) halve: drafter needs (70 - 40) / 2 = 15
 * ms; device 1 70 - 40 = 30 ms; device 0 and target still 60 ms: the limit
 * becomes target at 6 ms per step, factor 100 / 60. */
static void gen_gpu_pipeline(g_trace *g, int shared, uint32_t *stream_sync)
{
    g_stages s;
    g_init(g, "gen2", 5);
    g_trainer_stages(g, &s);
    *stream_sync = g_stage(g, "stream_sync", "sync");
    g_pipeline_threads(g);
    (void)shared;
    for (int k = 0; k <= 10; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 10; k++) {
        int64_t t = k * 10 * MS;
        g_range(g, 0, s.load, t, t + 1 * MS);
        g_range(g, 0, s.queue_put, t + 1 * MS, t + 10 * MS);
        g_range(g, 1, s.batch_wait, t, t + 500 * US);
        g_range(g, 1, s.forward, t + 500 * US, t + 1500 * US);
        g_range(g, 1, *stream_sync, t + 1500 * US, t + 9500 * US);
        g_range(g, 1, s.queue_put, t + 9500 * US, t + 10 * MS);
        for (uint32_t d = 2; d <= 3; d++) {
            g_range(g, d, s.queue_wait, t, t + 1 * MS);
            g_range(g, d, s.forward, t + 1 * MS, t + 2 * MS);
            g_range(g, d, *stream_sync, t + 2 * MS, t + 10 * MS);
        }
        g_range(g, 4, s.step_wait, t, t + 10 * MS);
    }
}

/* layout 0: gpu_split, 1: gpu_shared, 2: gpu_twice (gpu_shared with T
 * launched as two kernels of 3 ms, [t+1, t+4] and [t+4, t+7], the second
 * launched at t+0.7: the same GPU time, twice the launches). */
static void write_gpu_pipeline(const char *path, int layout)
{
    int shared = layout >= 1, twice = layout == 2;
    g_trace *g = calloc(1, sizeof *g);
    assert_non_null(g);
    uint32_t stream_sync;
    gen_gpu_pipeline(g, shared, &stream_sync);
    g_write(g, path);
    g_free(g);
    free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    g_gpu_tables(db, "(0, 'target_fwd'), (1, 'drafter_fwd'), (2, 'untracked'), (3, 'cudaLaunchKernel'),"
                     " (4, 'cudaStreamSynchronize'), (5, 'cuLaunchKernel'), (6, 'cuEventRecord')");
    int64_t B = BASE_NS;
    st_gpu_rec tk[20], d0[10], d1[20], sy[10], api[70], drv[20];
    int nd1 = 0, na = 0, nd = 0, nt = 0;
    uint32_t corr = 1;
    for (int k = 0; k < 10; k++) {
        int64_t t = B + k * 10 * MS;
        tk[nt++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 1, .start_ns = t + 1 * MS, .dur_ns = (twice ? 3 : 6) * MS,
                                .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .os_tid = 2001, .start_ns = t + 600 * US,
                                 .dur_ns = 5 * US, .correlation = corr++};
        if (twice) {
            tk[nt++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 1, .start_ns = t + 4 * MS, .dur_ns = 3 * MS,
                                    .correlation = corr};
            api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .os_tid = 2001, .start_ns = t + 700 * US,
                                     .dur_ns = 5 * US, .correlation = corr++};
        }
        /* the driver call inside it: part of the runtime call, not counted apart */
        drv[nd++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 6, .os_tid = 2001, .start_ns = t + 601 * US,
                                 .dur_ns = 3 * US, .correlation = 300000 + (uint32_t)k};
        d0[k] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 2, .start_ns = t + 5 * MS, .dur_ns = 4 * MS, .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .os_tid = 2002, .start_ns = t + 1200 * US,
                                 .dur_ns = 5 * US, .correlation = corr++};
        d1[nd1++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 2, .start_ns = t + 2 * MS, .dur_ns = 4 * MS, .correlation = corr};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .os_tid = 2003, .start_ns = t + 1200 * US,
                                 .dur_ns = 5 * US, .correlation = corr++};
        /* a driver call of its own (top level) on drafter1 */
        drv[nd++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 7, .os_tid = 2003, .start_ns = t + 1500 * US,
                                 .dur_ns = 2 * US, .correlation = 400000 + (uint32_t)k};
        /* target0's host sync, and a call on a thread the trace does not know */
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 5, .os_tid = 2001, .start_ns = t + 1500 * US,
                                 .dur_ns = 8 * MS, .correlation = 500000 + (uint32_t)k};
        api[na++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .os_tid = 9999, .start_ns = t + 3 * MS,
                                 .dur_ns = 10 * US, .correlation = 600000 + (uint32_t)k};
        d1[nd1++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 3, .start_ns = t + 7 * MS, .dur_ns = 500 * US,
                                 .correlation = 100000 + (uint32_t)k};
        sy[k] = (st_gpu_rec){.kind = ST_GPU_SYNC, .start_ns = t + 1500 * US, .dur_ns = 8 * MS, .correlation = 200000 + (uint32_t)k};
    }
    put_gpu_chunk(db, 0, 7, tk, nt);
    put_gpu_chunk(db, shared ? 0 : 1, 9, d0, 10);
    put_gpu_chunk(db, 1, 7, d1, nd1);
    put_gpu_chunk(db, 0, 8, sy, 10);
    put_gpu_chunk(db, -1, 0, api, na);
    put_gpu_chunk(db, -1, 1, drv, nd);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* The GPU-aware model on gpu_shared.sqlite and gpu_split.sqlite (see
 * gen_gpu_pipeline for every number). */
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

/* The GPU analyses read records in time slices; small slices must give
 * exactly what one slice gives: the pipe's device tables and the idle split,
 * on the generated traces (slices of 2 records) and, when present, the H200
 * samples (slices of 2000: some twenty). */
static void check_slices_agree(const char *path, uint32_t slice)
{
    an_trace t;
    an_pipe one, many;
    an_gpu_idle *g1 = NULL, *g2 = NULL;
    uint32_t n1 = 0, n2 = 0;
    const char *note;
    assert_int_equal(an_trace_open(&t, path), 0);
    an_gpu_slice_records = AN_GPU_SLICE_RECORDS;
    assert_int_equal(an_pipe_compute(&one, &t, NULL), 0);
    assert_int_equal(an_gpu_idle_split(&t, one.bin_t[0], one.bin_t[one.n_bins], &g1, &n1, &note), 0);
    an_gpu_slice_records = slice;
    assert_int_equal(an_pipe_compute(&many, &t, NULL), 0);
    assert_int_equal(an_gpu_idle_split(&t, many.bin_t[0], many.bin_t[many.n_bins], &g2, &n2, &note), 0);
    an_gpu_slice_records = AN_GPU_SLICE_RECORDS;
    assert_true(one.n_devices > 0);
    assert_int_equal(one.n_devices, many.n_devices);
    assert_memory_equal(one.devices, many.devices, one.n_devices * sizeof *one.devices);
    assert_memory_equal(one.dev_ns, many.dev_ns, (size_t)one.n_bins * one.n_devices * (one.n_roles + 1) * sizeof *one.dev_ns);
    assert_memory_equal(one.dev_stage_ns, many.dev_stage_ns,
                        (size_t)one.n_bins * one.n_roles * one.n_stages * sizeof *one.dev_stage_ns);
    assert_int_equal(n1, n2);
    for (uint32_t i = 0; i < n1; i++) {
        assert_int_equal(g1[i].busy_ns, g2[i].busy_ns);
        assert_int_equal(g1[i].idle_ns, g2[i].idle_ns);
        assert_int_equal(g1[i].host_wait_ns, g2[i].host_wait_ns);
        assert_int_equal(g1[i].launch_gap_ns, g2[i].launch_gap_ns);
        assert_int_equal(g1[i].other_ns, g2[i].other_ns);
        assert_int_equal(g1[i].n_records, g2[i].n_records);
        assert_int_equal(g1[i].n_waits, g2[i].n_waits);
        assert_memory_equal(g1[i].waits, g2[i].waits, g1[i].n_waits * sizeof *g1[i].waits);
    }
    an_gpu_idle_free(g1, n1);
    an_gpu_idle_free(g2, n2);
    an_pipe_free(&one);
    an_pipe_free(&many);
    an_trace_close(&t);
}

static void test_gpu_slices(void **state)
{
    (void)state;
    static const char *const gen[] = {"gpu_shared.sqlite", "gpu_split.sqlite", "gpu_twice.sqlite", "gpu_steps.sqlite"};
    for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++) check_slices_agree(tmp_path(gen[i]), 2);
    static const char *const samples[] = {"samples/traces/h200-sync.sqlite", "samples/traces/h200-2x2-async.sqlite"};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        char path[512];
        const char *root = getenv("ST_ROOT");
        snprintf(path, sizeof path, "%s%s%s", root ? root : "", root ? "/" : "", samples[i]);
        if (access(path, R_OK) == 0) check_slices_agree(path, 2000);
        else print_message("(%s not found: the samples' slice check is left out)\n", path);
    }
}

/* A record's launch is looked up among the API calls from
 * ST_GPU_LAUNCH_LOOKBACK_NS before the iterator's window: a kernel launched
 * 1 s before it starts has its thread and stage, one launched 3 s before
 * has none (thread -1), and the whole-trace iteration finds both. */
static void test_gpu_launch_lookback(void **state)
{
    (void)state;
    g_trace *g = calloc(1, sizeof *g);
    assert_non_null(g);
    gen_target(g);
    const char *path = tmp_path("lookback.sqlite");
    g_write(g, path);
    g_free(g);
    free(g);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    g_gpu_tables(db, "(0, 'k')");
    int64_t B = BASE_NS, S = 10 * 1000 * MS; /* both kernels start 10 s into the trace */
    st_gpu_rec k[] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + S, .dur_ns = 1 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + S + 2 * MS, .dur_ns = 1 * MS, .correlation = 2},
    };
    st_gpu_rec api[] = {
        {.kind = ST_GPU_API, .start_ns = B + S - 3000 * MS, .dur_ns = 5 * US, .correlation = 1, .os_tid = 2001},
        {.kind = ST_GPU_API, .start_ns = B + S - 1000 * MS, .dur_ns = 5 * US, .correlation = 2, .os_tid = 2001},
    };
    put_gpu_chunk(db, 0, 7, k, 2);
    put_gpu_chunk(db, -1, 0, api, 2);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    st_reader *r;
    assert_int_equal(st_reader_open(&r, path), 0);
    for (int whole = 0; whole < 2; whole++) {
        st_gpu_iter *it;
        assert_int_equal(st_gpu_iter_open(&it, r, 0, whole ? INT64_MIN : B + S, INT64_MAX), 0);
        st_gpu_row row;
        assert_int_equal(st_gpu_iter_next(it, &row), 1);
        assert_int_equal(row.rec.correlation, 1);
        assert_int_equal(row.thread, whole ? 1 : -1);
        assert_int_equal(row.launch_ns, whole ? B + S - 3000 * MS : INT64_MIN);
        assert_int_equal(st_gpu_iter_next(it, &row), 1);
        assert_int_equal(row.rec.correlation, 2);
        assert_int_equal(row.thread, 1);
        assert_int_equal(row.launch_ns, B + S - 1000 * MS);
        assert_int_equal(st_gpu_iter_next(it, &row), 0);
        st_gpu_iter_close(it);
    }
    st_reader_close(r);
    unlink(path);
}

static void check_waits(const an_trace *t, const an_gpu_idle *d, const char *const *stages, const int64_t *ns, uint32_t n)
{
    assert_int_equal(d->n_waits, n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(d->waits[i].thread, 1);
        if (stages[i]) assert_string_equal(st_reader_stage(t->r, (uint32_t)d->waits[i].stage)->name, stages[i]);
        else assert_int_equal(d->waits[i].stage, -1);
        assert_int_equal(d->waits[i].ns, ns[i]);
    }
}

static void test_gpu_window(void **state)
{
    (void)state;
    an_trace t;
    assert_int_equal(an_trace_open(&t, tmp_path("gpu_steps.sqlite")), 0);
    int64_t w0, w1;
    char desc[160];
    /* the default: steady state, steps 1:20 */
    assert_int_equal(an_gpu_window(&t, NULL, t.span_t0_ns, t.span_t1_ns, &w0, &w1, desc, sizeof desc), 0);
    assert_int_equal(w0, BASE_NS + 10 * MS);
    assert_int_equal(w1, BASE_NS + 200 * MS);
    assert_string_equal(desc, "steps 1:20 (0.010-0.200 s, the first step left out as start-up)");
    an_gpu_idle *gpu;
    uint32_t n;
    const char *note;
    assert_int_equal(an_gpu_idle_split(&t, w0, w1, &gpu, &n, &note), 0);
    assert_int_equal(n, 1);
    assert_int_equal(gpu[0].n_records, 19 * 3);
    assert_int_equal(gpu[0].busy_ns, 136800 * US);
    assert_int_equal(gpu[0].idle_ns, 53200 * US);
    assert_int_equal(gpu[0].host_wait_ns, 43600 * US);
    assert_int_equal(gpu[0].launch_gap_ns, 0);
    assert_int_equal(gpu[0].other_ns, 9600 * US);
    static const char *const st1[] = {"postprocess", "forward", "batch_wait", "queue_put"};
    static const int64_t ns1[] = {19000 * US, 11400 * US, 9500 * US, 3700 * US};
    check_waits(&t, &gpu[0], st1, ns1, 4);
    assert_int_equal(gpu[0].host_thread, 1);
    assert_string_equal(st_reader_stage(t.r, (uint32_t)gpu[0].host_stage)->name, "postprocess");
    assert_int_equal(gpu[0].host_stage_ns, 19000 * US);
    an_gpu_idle_free(gpu, n);

    /* --steps 0:20: the start-up gap is in */
    an_window_spec w;
    assert_int_equal(an_window_parse_steps(&w, "0:20"), 0);
    assert_int_equal(an_gpu_window(&t, &w, t.span_t0_ns, t.span_t1_ns, &w0, &w1, desc, sizeof desc), 0);
    assert_int_equal(w0, BASE_NS);
    assert_string_equal(desc, "steps 0:20 (0.000-0.200 s)");
    assert_int_equal(an_gpu_idle_split(&t, w0, w1, &gpu, &n, &note), 0);
    assert_int_equal(gpu[0].busy_ns, 140000 * US);
    assert_int_equal(gpu[0].idle_ns, 60000 * US);
    assert_int_equal(gpu[0].host_wait_ns, 48300 * US);
    assert_int_equal(gpu[0].other_ns, 11700 * US);
    static const char *const st2[] = {"postprocess", "forward", "batch_wait", "queue_put", NULL};
    static const int64_t ns2[] = {20000 * US, 11900 * US, 9500 * US, 3900 * US, 3000 * US};
    check_waits(&t, &gpu[0], st2, ns2, 5);
    an_gpu_idle_free(gpu, n);

    /* only the start-up: mostly in no stage */
    assert_int_equal(an_gpu_idle_split(&t, BASE_NS, BASE_NS + 9 * MS, &gpu, &n, &note), 0);
    assert_int_equal(gpu[0].host_wait_ns, 3000 * US);
    assert_int_equal(gpu[0].host_thread, 1);
    assert_int_equal(gpu[0].host_stage, -1);
    char *text = an_gpu_idle_text(&t, gpu, n, note);
    assert_non_null(strstr(text, "host wait 3.000 ms (mostly while target0 is in no stage, 3.000 ms)"));
    free(text);
    an_gpu_idle_free(gpu, n);

    /* the bottleneck's line: steady state within the analysed window */
    char *line;
    assert_int_equal(an_gpu_idle_steady(&t, BASE_NS, BASE_NS + 200 * MS, &gpu, &n, &line), 0);
    assert_non_null(strstr(line, "over steps 1:20 (0.010-0.200 s, start-up left out): GPU 0 busy 72.0%, idle 53.200 ms: "
                                 "host wait 43.600 ms (mostly while target0 is in 'postprocess', 19.000 ms"));
    free(line);
    an_gpu_idle_free(gpu, n);
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
    const char *base = getenv("ST_TEST_TMP");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/analyze2-unit-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) return -1;
    generate_all(tmp_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--generate") == 0) {
        generate_all(argv[2]);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads_and_verdict), cmocka_unit_test(test_queue_depth),
        cmocka_unit_test(test_windows_move),
        cmocka_unit_test(test_partial_windows),      cmocka_unit_test(test_grouped_bins_and_skip),
        cmocka_unit_test(test_inferred_order),    cmocka_unit_test(test_nosteps),
        cmocka_unit_test(test_mann_whitney),      cmocka_unit_test(test_story_and_helpers),
        cmocka_unit_test(test_unknown_stage),     cmocka_unit_test(test_gpu_idle),
        cmocka_unit_test(test_gpu_window),        cmocka_unit_test(test_gpu_model),
        cmocka_unit_test(test_gpu_slices),        cmocka_unit_test(test_gpu_launch_lookback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
