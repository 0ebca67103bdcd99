/* traces.c: the traces of tests/traces.h, with exactly known contents.
 *
 * Every timestamp is chosen here and written as is (tests/tracegen.c), so
 * each number the tests expect is worked out by hand in the comment above
 * the trace that gives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "st_intervals.h"
#include "traces.h"

static void fail(const char *what, const char *path)
{
    fprintf(stderr, "traces: %s %s\n", what, path);
    exit(1);
}

static char *path_in(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (!p) fail("no memory for", name);
    snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static void write_text(const char *dir, const char *name, const char *text, size_t len)
{
    char *p = path_in(dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) fail("cannot write", p);
    free(p);
}

/* Writes g to dir/name and frees it. */
static void write_in(tg_trace *g, const char *dir, const char *name)
{
    char *p = path_in(dir, name);
    tg_write(g, p);
    free(p);
    tg_free(g);
}

/* ---- the statistics set -------------------------------------------------------------- */

/* The meta of the statistics set: argv "gen", start_ns BASE_NS, chunks of
 * 7 events (small: chunk boundaries cut through open ranges). */
static tg_trace *stats_trace(const char *program, const char *run_id)
{
    tg_trace *g = tg_create(program);
    tg_meta(g, "run_id", run_id);
    tg_meta(g, "argv", "gen");
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_set_chunk_events(g, 7);
    return g;
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
tg_trace *trace_main(const char *status)
{
    tg_trace *g = stats_trace("gen", "1700000000-42");
    tg_meta(g, "status", status);
    tg_meta_int(g, "profile_interval", 2);
    if (strcmp(status, "running") != 0) tg_meta_int(g, "end_ns", BASE_NS + 810 * MS);
    uint32_t s_log = tg_stage(g, "log", "work");
    uint32_t s_load = tg_stage(g, "load", "work");
    uint32_t s_h2d = tg_stage(g, "h2d", "copy");
    uint32_t s_put = tg_stage(g, "queue_put", "wait_output");
    uint32_t s_wait = tg_stage(g, "queue_wait", "wait_input");
    uint32_t s_compute = tg_stage(g, "compute", "work");
    uint32_t s_allreduce = tg_stage(g, "allreduce", "comm");
    uint32_t s_sync = tg_stage(g, "stream_sync", "sync");
    uint32_t main_t = tg_thread(g, "main", "main");
    uint32_t loader = tg_thread(g, "loader", "loader");
    uint32_t w0 = tg_thread(g, "worker0", "worker");
    uint32_t w1 = tg_thread(g, "worker1", "worker");
    tg_counter(g, "queue_depth", "items");
    tg_counter(g, "lr", "");
    for (int k = 0; k <= 8; k++) tg_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 1000 : 0);
    for (int k = 0; k < 8; k++) {
        int64_t t = BASE_NS + k * 100 * MS;
        tg_range(g, main_t, s_log, t, t + 10 * MS);
        tg_sample(g, 0, 1, t, 0.5 / (k + 1));
        tg_begin(g, loader, s_load, t + 5 * MS);
        tg_range(g, loader, s_h2d, t + 20 * MS, t + 32500 * US);
        tg_end(g, loader, t + 67500 * US);
        tg_range(g, loader, s_put, t + 67500 * US, t + 77500 * US);
        tg_sample(g, 1, 0, t + 67500 * US, k % 3);
    }
    int64_t t = BASE_NS + 10 * MS;
    for (int i = 1; i <= 100; i++) {
        tg_range(g, w0, s_wait, t, t + 1 * MS);
        tg_range(g, w0, s_compute, t + 1 * MS, t + 1 * MS + i * 100 * US);
        t += 2 * MS + i * 100 * US;
    }
    tg_begin(g, w1, s_allreduce, BASE_NS + 150 * MS);
    tg_range(g, w1, s_sync, BASE_NS + 200 * MS, BASE_NS + 210 * MS);
    tg_end(g, w1, BASE_NS + 350 * MS);
    for (int j = 0; j < 50; j++) tg_range(g, w1, s_compute, BASE_NS + (400 + 8 * j) * MS, BASE_NS + (404 + 8 * j) * MS);
    if (strcmp(status, "running") == 0) tg_begin(g, w1, s_allreduce, BASE_NS + 798 * MS); /* never ends */
    return g;
}

/* Two ranks of one run: rank 1's worker computes 8 ms where rank 0's takes 5. */
tg_trace *trace_rank(int rank)
{
    tg_trace *g = stats_trace("gen", "1700000000-100"); /* one run: one run_id on every rank */
    tg_meta_int(g, "end_ns", BASE_NS + 210 * MS);
    tg_meta_int(g, "pid", 100 + rank);
    tg_meta_int(g, "rank", rank);
    tg_meta_int(g, "world_size", 2);
    tg_meta_int(g, "profile_interval", 1);
    uint32_t s_log = tg_stage(g, "log", "work");
    uint32_t s_load = tg_stage(g, "load", "work");
    uint32_t s_compute = tg_stage(g, "compute", "work");
    uint32_t main_t = tg_thread(g, "main", "main");
    uint32_t loader = tg_thread(g, "loader", "loader");
    uint32_t worker = tg_thread(g, "worker0", "worker");
    for (int k = 0; k <= 2; k++) tg_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 500 : 0);
    for (int k = 0; k < 2; k++) tg_range(g, main_t, s_log, BASE_NS + k * 100 * MS, BASE_NS + (k * 100 + 5) * MS);
    for (int j = 0; j < 10; j++) {
        int64_t t = BASE_NS + (10 + 15 * j) * MS;
        tg_range(g, loader, s_load, t, t + 2 * MS);
        tg_range(g, worker, s_compute, t + 2 * MS, t + (rank ? 10 : 7) * MS);
    }
    return g;
}

/* A killed run: worker leaves a range open that holds a closed child.
 * Steps 0..4 every 100 ms (100 tokens each), so the span is 0..400 ms.
 *   main    log [k*100, k*100+10], k = 0..3
 *   worker  a [10, 50]; outer begins at 120 and never ends; inner [150, 250]
 * Open ranges count up to the end of the analysed time: outer [120, 400],
 * total 280, self 180; inner 100; a 40; idle 80 (self + idle = 400). Per
 * window of 1 step: worker a 40 + idle 60 | idle 20, outer 30, inner 50 |
 * inner 50, outer 50 | outer 100. */
tg_trace *trace_unended(void)
{
    tg_trace *g = stats_trace("unended", "1700000000-11");
    tg_meta(g, "status", "running");
    tg_meta_int(g, "profile_interval", 1);
    uint32_t s_log = tg_stage(g, "log", "work");
    uint32_t s_a = tg_stage(g, "a", "work");
    uint32_t s_outer = tg_stage(g, "outer", "work");
    uint32_t s_inner = tg_stage(g, "inner", "copy");
    uint32_t main_t = tg_thread(g, "main", "main");
    uint32_t w = tg_thread(g, "worker", "worker");
    for (int k = 0; k <= 4; k++) tg_step(g, (uint64_t)k, BASE_NS + k * 100 * MS, k ? 100 : 0);
    for (int k = 0; k < 4; k++) tg_range(g, main_t, s_log, BASE_NS + k * 100 * MS, BASE_NS + (k * 100 + 10) * MS);
    tg_range(g, w, s_a, BASE_NS + 10 * MS, BASE_NS + 50 * MS);
    tg_begin(g, w, s_outer, BASE_NS + 120 * MS);
    tg_range(g, w, s_inner, BASE_NS + 150 * MS, BASE_NS + 250 * MS);
    return g;
}

/* Appends a window, as st_window_format writes it, to the text *arg. */
static void on_window_text(const st_window *w, void *arg)
{
    char **text = arg;
    size_t len = st_window_format(w, NULL, 0), old = strlen(*text);
    *text = realloc(*text, old + len + 1);
    if (!*text) fail("no memory for", "the windows' text");
    st_window_format(w, *text + old, len + 1);
}

char *trace_windows_text(const tg_trace *g, uint32_t every)
{
    char *text = calloc(1, 1);
    st_agg *agg = st_agg_create(every, on_window_text, &text);
    if (!text || !agg) fail("no memory for", "the aggregator");
    uint32_t n_threads = tg_n_threads(g), n_steps = tg_n_steps(g);
    for (uint32_t s = 0; s < tg_n_stages(g); s++)
        st_agg_stage(agg, s, tg_stage_name(g, s), (st_kind)st_kind_parse(tg_stage_kind(g, s)));
    for (uint32_t i = 0; i < n_threads; i++) {
        const tg_thread_row *t = tg_thread_at(g, i);
        st_agg_thread(agg, (uint32_t)t->id, t->name, t->role);
    }
    size_t *pos = calloc(n_threads + 1, sizeof *pos);
    if (!pos) fail("no memory for", "the aggregator");
    uint32_t next_step = 0;
    uint64_t step, tokens;
    int64_t step_ts;
    for (;;) {
        int best = -2;
        int64_t best_ts = 0;
        int best_rank = 0;
        uint32_t best_thread = 0;
        if (next_step < n_steps) {
            tg_step_at(g, next_step, &step, &step_ts, &tokens);
            best = -1;
            best_ts = step_ts;
            best_rank = ST_AGG_STEP;
        }
        for (uint32_t i = 0; i < n_threads; i++) {
            const tg_thread_row *t = tg_thread_at(g, i);
            while (pos[i] < t->n_ev && t->ev[pos[i]].kind == TG_CUT) pos[i]++;
            if (pos[i] == t->n_ev) continue;
            const tg_event *ev = &t->ev[pos[i]];
            if (best == -2 || st_agg_order(ev->ts_ns, ST_AGG_RANGE, (uint32_t)t->id, best_ts, best_rank, best_thread) < 0) {
                best = (int)i;
                best_ts = ev->ts_ns;
                best_rank = ST_AGG_RANGE;
                best_thread = (uint32_t)t->id;
            }
        }
        if (best == -2) break;
        if (best == -1) {
            st_agg_step(agg, step, step_ts, tokens);
            next_step++;
            continue;
        }
        const tg_thread_row *t = tg_thread_at(g, (uint32_t)best);
        const tg_event *ev = &t->ev[pos[best]++];
        if (ev->kind == TG_END) st_agg_end(agg, (uint32_t)t->id, ev->ts_ns);
        else st_agg_begin(agg, (uint32_t)t->id, ev->stage, ev->ts_ns);
    }
    free(pos);
    st_agg_free(agg);
    return text;
}

/* Writes trace_main's trace to dir/name, then runs `sql` on it (to break it). */
static void write_broken(const char *dir, const char *name, const char *sql)
{
    char *p = path_in(dir, name);
    tg_trace *g = trace_main("complete");
    tg_write(g, p);
    tg_free(g);
    tg_exec(p, sql);
    free(p);
}

void write_stats_traces(const char *dir)
{
    mkdir(dir, 0777);
    tg_trace *g = trace_main("complete");
    char *text = trace_windows_text(g, 2);
    write_text(dir, "gen.intervals.txt", text, strlen(text));
    free(text);
    write_in(g, dir, "gen.sqlite");
    write_in(trace_main("running"), dir, "running.sqlite");
    write_in(trace_rank(0), dir, "rank0.sqlite");
    write_in(trace_rank(1), dir, "rank1.sqlite");
    write_in(trace_unended(), dir, "unended.sqlite");

    /* Times at the int64 limit: a range from 0 to INT64_MAX - 1 and step
     * marks at both ends (huge.sqlite: every number fits, exactly); the same
     * with the stage nested in itself three deep (huge_nested.sqlite: its
     * inclusive time passes INT64_MAX). */
    for (int nested = 0; nested < 2; nested++) {
        g = stats_trace("huge", "1700000000-12");
        tg_meta_int(g, "start_ns", 0);
        tg_set_chunk_events(g, 3);
        tg_stage(g, "work", "work");
        uint32_t h = tg_thread(g, "main", "main");
        for (int d = 0; d <= 2 * nested; d++) tg_begin(g, h, 0, d);
        for (int d = 0; d <= 2 * nested; d++) tg_end(g, h, INT64_MAX - 1 - (2 * nested - d) * nested);
        tg_step(g, 0, 0, 0);
        tg_step(g, 1, INT64_MAX - 1, 7);
        write_in(g, dir, nested ? "huge_nested.sqlite" : "huge.sqlite");
    }

    /* A valid trace with nothing recorded. */
    write_in(stats_trace("empty", "1700000000-7"), dir, "empty.sqlite");

    /* Many ranges, so that a truncated copy loses chunk pages. */
    g = stats_trace("many", "1700000000-8");
    tg_set_chunk_events(g, 256);
    tg_stage(g, "work", "work");
    uint32_t t = tg_thread(g, "main", "main");
    for (int i = 0; i < 40000; i++) tg_range(g, t, 0, BASE_NS + i * 10 * US, BASE_NS + i * 10 * US + (i % 7 + 1) * US);
    write_in(g, dir, "many.sqlite");

    /* One range open across 70000 others: more than export --chrome queues,
     * so it is written as a "B"/"E" pair. */
    g = stats_trace("outer", "1700000000-10");
    tg_set_chunk_events(g, 4096);
    tg_stage(g, "epoch", "work");
    tg_stage(g, "batch", "work");
    t = tg_thread(g, "main", "main");
    tg_begin(g, t, 0, BASE_NS);
    for (int i = 0; i < 70000; i++) tg_range(g, t, 1, BASE_NS + (i * 10 + 1) * US, BASE_NS + (i * 10 + 6) * US);
    tg_end(g, t, BASE_NS + 700001 * US);
    tg_range(g, t, 1, BASE_NS + 700002 * US, BASE_NS + 700003 * US);
    tg_step(g, 0, BASE_NS, 0);
    tg_step(g, 1, BASE_NS + 700003 * US, 70000);
    write_in(g, dir, "outer.sqlite");

    write_text(dir, "zero.sqlite", "", 0);
    static const char not_sqlite[] = "this is a text file, not a trace\n";
    char big[4096];
    for (size_t i = 0; i < sizeof big; i++) big[i] = not_sqlite[i % (sizeof not_sqlite - 1)];
    write_text(dir, "notsqlite.sqlite", big, sizeof big);
    write_broken(dir, "badversion.sqlite", "UPDATE meta SET value = '7' WHERE key = 'schema_version'");
    write_broken(dir, "missingtable.sqlite", "DROP TABLE steps");
    write_broken(dir, "corruptchunk.sqlite", "UPDATE range_chunks SET data = x'4500ff' WHERE id = 3");
    write_broken(dir, "badtypes.sqlite", "UPDATE threads SET os_tid = 'x' WHERE id = 1");
    write_broken(dir, "badkind.sqlite", "UPDATE stages SET kind = 'bogus' WHERE id = 3");
    write_broken(dir, "unknownthread.sqlite", "UPDATE range_chunks SET thread = 99 WHERE id = 2");
    /* Stage 40 does not exist: begin tag 41, delta 0. */
    write_broken(dir, "unknownstage.sqlite", "UPDATE range_chunks SET data = x'45002900', n_events = 1 WHERE id = 1");
    /* A view where a table belongs: the reader must refuse it, never run it. */
    write_broken(dir, "viewtrap.sqlite",
                 "DROP TABLE stages; CREATE VIEW stages AS SELECT 0 AS id, load_extension('/nonexistent') AS name, "
                 "'work' AS kind");
    /* Lying chunk headers (t0 > t1, negative counts): ignored where they are only hints. */
    write_broken(dir, "liar.sqlite", "UPDATE range_chunks SET t0_ns = t1_ns + 5, n_ranges = -3 WHERE id = 4");
}

void write_big_trace(const char *path, long n)
{
    tg_trace *g = stats_trace("big", "1700000000-9");
    tg_set_chunk_events(g, 4096);
    tg_meta_int(g, "profile_interval", 100);
    uint32_t s_outer = tg_stage(g, "outer", "work");
    uint32_t s_inner = tg_stage(g, "inner", "copy");
    uint32_t s_wait = tg_stage(g, "wait", "wait_input");
    for (int i = 0; i < 8; i++) tg_thread(g, i ? "worker" : "main", i ? "worker" : "main");
    uint64_t seed = 1;
    long per_thread = n / 8;
    int64_t end = 0;
    for (uint32_t t = 0; t < 8; t++) {
        int64_t ts = BASE_NS;
        for (long k = 0; k + 3 <= per_thread; k += 3) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t d = 1000 + (int64_t)(seed >> 40) % 100000;
            tg_range(g, t, s_wait, ts, ts + d / 3);
            tg_begin(g, t, s_outer, ts + d / 3);
            tg_range(g, t, s_inner, ts + d / 2, ts + d / 2 + d / 5);
            tg_end(g, t, ts + d);
            ts += d + 100;
        }
        if (ts > end) end = ts;
    }
    uint32_t steps = 60;
    for (uint32_t k = 0; k < steps; k++) tg_step(g, k, BASE_NS + (int64_t)((end - BASE_NS) / (steps - 1)) * k, 100);
    tg_write(g, path);
    tg_free(g);
}

/* ---- the model set ------------------------------------------------------------------- */

/* The meta of the model set: program, run_id 1700000000-77, pid 77, argv
 * "gen2", start_ns BASE_NS; os_tid 2000 + thread; chunks of 5 events. Times
 * below are from BASE_NS. */
static tg_trace *model_trace(const char *program, uint32_t profile_interval)
{
    tg_trace *g = tg_create(program);
    tg_meta(g, "run_id", "1700000000-77");
    tg_meta(g, "pid", "77");
    tg_meta(g, "argv", "gen2");
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_meta_int(g, "profile_interval", profile_interval);
    tg_set_os_tid_base(g, 2000);
    tg_set_chunk_events(g, 5);
    return g;
}

/* [a, b) in ns from BASE_NS */
static void g_range(tg_trace *g, uint32_t t, uint32_t stage, int64_t a, int64_t b)
{
    tg_range(g, t, stage, BASE_NS + a, BASE_NS + b);
}

static void g_step(tg_trace *g, uint64_t step, int64_t ts, uint64_t tokens) { tg_step(g, step, BASE_NS + ts, tokens); }

static void g_sample_add(tg_trace *g, uint32_t thread, uint32_t counter, int64_t ts, double v)
{
    tg_sample(g, thread, counter, BASE_NS + ts, v);
}


/* The trainer's stages, as far as these traces need them. */
typedef struct g_stages {
    uint32_t load, queue_put, batch_wait, forward, postprocess, queue_wait, optimizer, step_wait;
} g_stages;

static void g_trainer_stages(tg_trace *g, g_stages *s)
{
    s->load = tg_stage(g, "load", "work");
    s->queue_put = tg_stage(g, "queue_put", "wait_output");
    s->batch_wait = tg_stage(g, "batch_wait", "wait_input");
    s->forward = tg_stage(g, "forward", "work");
    s->postprocess = tg_stage(g, "postprocess", "work");
    s->queue_wait = tg_stage(g, "queue_wait", "wait_input");
    s->optimizer = tg_stage(g, "optimizer", "work");
    s->step_wait = tg_stage(g, "step_wait", "wait_input");
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
static void g_pipeline_step(tg_trace *g, const g_stages *s, int64_t t, int target_bound)
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

static void g_pipeline_threads(tg_trace *g)
{
    tg_thread(g, "loader", "loader");
    tg_thread(g, "target0", "target");
    tg_thread(g, "drafter0", "drafter");
    tg_thread(g, "drafter1", "drafter");
    tg_thread(g, "main", "main");
}

/* 20 steps of 10 ms, 1000 tokens each (100000 tokens/s), target-bound
 * throughout. A queue_depth counter on the target thread: 0 for the first
 * 5 ms of each step, 3 for the rest: mean 1.5, max 3, 50% of the time at max
 * and 50% at zero, 40 samples. */
tg_trace *trace_target(void)
{
    g_stages s;
    tg_trace *g = model_trace("gen2", 10);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    tg_counter(g, "queue_depth", "items");
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) {
        int64_t t = k * 10 * MS;
        g_pipeline_step(g, &s, t, 1);
        g_sample_add(g, 1, 0, t, 0);
        g_sample_add(g, 1, 0, t + 5 * MS, 3);
    }
    return g;
}

/* Partial windows: marks of steps 3..22 every 10 ms (tokens 1000 + 100 k),
 * profile_interval 5, so the windows are steps 6-10, 11-15 and 16-20
 * (marks 5 to 20); steps 4-5 and 21-22 are in no window. Drafter-bound in
 * steps 4-5 and 21-22, target-bound in 6-20: a partial window counted would
 * show the drafter. */
static tg_trace *trace_partial(void)
{
    g_stages s;
    tg_trace *g = model_trace("gen2", 5);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 3; k <= 22; k++) g_step(g, (uint64_t)k, (k - 3) * 10 * MS, 1000 + 100 * (uint64_t)k);
    for (int k = 3; k < 22; k++) g_pipeline_step(g, &s, (k - 3) * 10 * MS, k + 1 >= 6 && k + 1 <= 20);
    return g;
}

/* The same, target-bound in steps 1-10, drafter-bound in steps 11-20;
 * windows of 5 steps: target, target, drafter (moved), drafter. Over the
 * whole trace target is busy 62.5%, the drafters 65%: drafter. */
static tg_trace *trace_moves(void)
{
    g_stages s;
    tg_trace *g = model_trace("gen2", 5);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) g_pipeline_step(g, &s, k * 10 * MS, k < 10);
    return g;
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
static tg_trace *trace_diff(int is_b, int64_t *period_ns)
{
    tg_trace *g = model_trace(is_b ? "diffb" : "diffa", 10);
    tg_meta(g, "run_id", is_b ? "1700000100-2" : "1700000000-1");
    uint32_t s_compute = tg_stage(g, "compute", "work");
    uint32_t s_log = tg_stage(g, "log", "work");
    uint32_t s_check = tg_stage(g, "check", "work");
    uint32_t s_wait = tg_stage(g, "step_wait", "wait_input");
    tg_thread(g, "main", "main");
    uint32_t n_workers = is_b ? 2 : 1;
    tg_thread(g, "worker0", "worker");
    if (is_b) tg_thread(g, "worker1", "worker");
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
    *period_ns = t;
    return g;
}

/* Roles that are not the trainer's: the order is inferred from the waits.
 * producer waits only for output, zeta for both, consumer only for input. */
static tg_trace *trace_inferred(void)
{
    tg_trace *g = model_trace("gen2", 5);
    uint32_t produce = tg_stage(g, "produce", "work"), put = tg_stage(g, "queue_put", "wait_output");
    uint32_t wait = tg_stage(g, "queue_wait", "wait_input"), consume = tg_stage(g, "consume", "work");
    uint32_t step_wait = tg_stage(g, "step_wait", "wait_input");
    tg_thread(g, "c", "consumer");
    tg_thread(g, "m", "main");
    tg_thread(g, "p", "producer");
    tg_thread(g, "z", "zeta");
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
    return g;
}

/* No step marks: one window over the span. */
static tg_trace *trace_nosteps(void)
{
    tg_trace *g = model_trace("gen2", 0);
    uint32_t work = tg_stage(g, "work", "work");
    tg_thread(g, "w", "worker");
    for (int k = 0; k < 10; k++) g_range(g, 0, work, k * 10 * MS, k * 10 * MS + 6 * MS);
    return g;
}

/* No stages at all, yet chunks with begins of stage 3: the decoder checks
 * stage ids only against a non-empty stages table (found by fuzz_reader). */
static tg_trace *trace_nostages(void)
{
    tg_trace *g = model_trace("gen2", 0);
    tg_thread(g, "w", "worker");
    g_step(g, 0, 0, 0);
    g_step(g, 1, 10 * MS, 10);
    g_range(g, 0, 3, 1 * MS, 5 * MS);
    return g;
}

/* Dense: 4 steps of 10 ms; per step and thread a 9 ms parent range with a
 * 2 us child every 5 us inside (1800 per step): the report's timeline must
 * merge them per pixel column. */
static tg_trace *trace_dense(void)
{
    tg_trace *g = model_trace("dense", 1);
    uint32_t outer = tg_stage(g, "batch", "work"), inner = tg_stage(g, "kernel", "work");
    uint32_t wait = tg_stage(g, "queue_wait", "wait_input");
    tg_thread(g, "w0", "worker");
    tg_thread(g, "w1", "worker");
    for (int k = 0; k <= 4; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 10 : 0);
    for (uint32_t w = 0; w < 2; w++)
        for (int k = 0; k < 4; k++) {
            int64_t t = k * 10 * MS;
            g_range(g, w, wait, t, t + 1 * MS);
            tg_begin(g, w, outer, BASE_NS + t + 1 * MS);
            for (int i = 0; i < 1800; i++) g_range(g, w, inner, t + 1 * MS + i * 5 * US, t + 1 * MS + i * 5 * US + 2 * US);
            tg_end(g, w, BASE_NS + t + 10 * MS);
        }
    return g;
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
static tg_trace *trace_gpu_steps(void)
{
    g_stages s;
    tg_trace *g = model_trace("gen2", 10);
    g_trainer_stages(g, &s);
    g_pipeline_threads(g);
    for (int k = 0; k <= 20; k++) g_step(g, (uint64_t)k, k * 10 * MS, k ? 1000 : 0);
    for (int k = 0; k < 20; k++) g_pipeline_step(g, &s, k * 10 * MS, k ? 1 : 2);
    return g;
}

static tg_trace *trace_gpu_steps_with_gpu(void)
{
    tg_trace *g = trace_gpu_steps();
    tg_gpu_string(g, "startup_init");
    tg_gpu_string(g, "fwd_gemm");
    tg_gpu_string(g, "sample_tail");
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
    tg_gpu_chunk(g, 0, 7, k7, (size_t)n7);
    tg_gpu_chunk(g, 0, 8, k8, (size_t)n8);
    tg_gpu_chunk(g, -1, 0, api, (size_t)na);
    return g;
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
static tg_trace *trace_gpu_pipeline_hosts(uint32_t *stream_sync)
{
    g_stages s;
    tg_trace *g = model_trace("gen2", 5);
    g_trainer_stages(g, &s);
    *stream_sync = tg_stage(g, "stream_sync", "sync");
    g_pipeline_threads(g);
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
    return g;
}

/* layout 0: gpu_split, 1: gpu_shared, 2: gpu_twice (gpu_shared with T
 * launched as two kernels of 3 ms, [t+1, t+4] and [t+4, t+7], the second
 * launched at t+0.7: the same GPU time, twice the launches). */
static tg_trace *trace_gpu_pipeline(int layout)
{
    int shared = layout >= 1, twice = layout == 2;
    uint32_t stream_sync;
    tg_trace *g = trace_gpu_pipeline_hosts(&stream_sync);
    static const char *const names[] = {"target_fwd",            "drafter_fwd",    "untracked",    "cudaLaunchKernel",
                                        "cudaStreamSynchronize", "cuLaunchKernel", "cuEventRecord"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) tg_gpu_string(g, names[i]);
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
    tg_gpu_chunk(g, 0, 7, tk, (size_t)nt);
    tg_gpu_chunk(g, shared ? 0 : 1, 9, d0, 10);
    tg_gpu_chunk(g, 1, 7, d1, (size_t)nd1);
    tg_gpu_chunk(g, 0, 8, sy, 10);
    tg_gpu_chunk(g, -1, 0, api, (size_t)na);
    tg_gpu_chunk(g, -1, 1, drv, (size_t)nd);
    return g;
}

void write_model_traces(const char *dir)
{
    mkdir(dir, 0777);
    write_in(trace_target(), dir, "target.sqlite");
    write_in(trace_moves(), dir, "moves.sqlite");
    write_in(trace_partial(), dir, "partial.sqlite");
    write_in(trace_inferred(), dir, "inferred.sqlite");
    write_in(trace_nosteps(), dir, "nosteps.sqlite");
    write_in(trace_dense(), dir, "dense.sqlite");
    write_in(trace_nostages(), dir, "nostages.sqlite");
    write_in(trace_gpu_steps_with_gpu(), dir, "gpu_steps.sqlite");
    write_in(trace_gpu_pipeline(1), dir, "gpu_shared.sqlite");
    write_in(trace_gpu_pipeline(0), dir, "gpu_split.sqlite");
    write_in(trace_gpu_pipeline(2), dir, "gpu_twice.sqlite");
    for (int b = 0; b < 2; b++) {
        int64_t period_ns;
        write_in(trace_diff(b, &period_ns), dir, b ? "diff_b.sqlite" : "diff_a.sqlite");
        /* the exact periods, for the integration test's tokens/s check */
        char name[32], text[64];
        snprintf(name, sizeof name, "diff_%c.period_ns", b ? 'b' : 'a');
        snprintf(text, sizeof text, "%lld\n", (long long)period_ns);
        write_text(dir, name, text, strlen(text));
    }
}

/* ---- the jobs set -------------------------------------------------------------------- */

enum { J_STEP, J_LOAD, J_FORWARD, J_BACKWARD, J_WAIT, J_ALLREDUCE, J_D2H, J_N_STAGES };

static uint64_t jobs_random(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return *seed >> 17;
}

/* One thread's ranges: loops of a wait, a forward with a d2h inside, a
 * backward, and sometimes an allreduce with a d2h inside that again holds
 * a d2h (depth 2). Durations are random, some rounded to the microsecond
 * (ties), some long. */
static void jobs_thread(tg_trace *g, uint32_t th, uint32_t n_loops, uint64_t seed)
{
    int64_t t = BASE_NS + (int64_t)(jobs_random(&seed) % 50) * US;
    for (uint32_t k = 0; k < n_loops; k++) {
        uint64_t r = jobs_random(&seed);
        int64_t wait = r % 3 == 0 ? (int64_t)(r % 40) * US : (int64_t)(r % 900) + 20;
        tg_begin(g, th, J_WAIT, t);
        tg_end(g, th, t += wait);
        int64_t fwd = 2 * US + (int64_t)(jobs_random(&seed) % (k % 97 == 0 ? 5000 : 300)) * US;
        tg_begin(g, th, J_FORWARD, t);
        tg_begin(g, th, J_D2H, t + fwd / 3);
        tg_end(g, th, t + fwd / 3 + fwd / 5);
        tg_end(g, th, t += fwd);
        tg_begin(g, th, J_BACKWARD, t += 100);
        tg_end(g, th, t += 2 * fwd + (int64_t)(jobs_random(&seed) % 7));
        if (k % 5 == 0) {
            tg_begin(g, th, J_ALLREDUCE, t);
            tg_begin(g, th, J_D2H, t + 10 * US);
            tg_begin(g, th, J_D2H, t + 11 * US);
            tg_end(g, th, t + 12 * US);
            tg_end(g, th, t + 30 * US);
            tg_end(g, th, t += 40 * US + (int64_t)(jobs_random(&seed) % 1000));
        }
        t += (int64_t)(jobs_random(&seed) % 20) * US;
    }
}

tg_trace *trace_jobs(int rank)
{
    static const char *const stage_names[J_N_STAGES] = {"step", "load", "forward", "backward", "queue_wait",
                                                        "allreduce", "d2h"};
    static const char *const stage_kinds[J_N_STAGES] = {"work", "work", "work", "work", "wait_input", "comm", "copy"};
    static const struct {
        const char *name, *role;
        uint32_t n_loops; /* work loops; sizes differ, so the largest-first order matters */
    } threads[] = {
        {"loader", "loader", 900},    {"target0", "target", 150},   {"target1", "target", 160},
        {"drafter0", "drafter", 700}, {"drafter1", "drafter", 520}, {"drafter2", "drafter", 610},
        {"drafter3", "drafter", 480},
    };
    static const char *const meta[][2] = {
        {"schema_version", "1"}, {"status", "complete"}, {"program", "jobs"},   {"tool_version", "0.1.0"},
        {"clock", "monotonic"},  {"host", "testhost"},   {"argv", "jobs"},      {"dropped_events", "0"},
        {"world_size", "2"},     {"profile_interval", "5"},
    };
    tg_trace *g = tg_create("jobs");
    tg_meta_clear(g);
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) tg_meta(g, meta[i][0], meta[i][1]);
    tg_meta(g, "run_id", rank ? "1700000000-301" : "1700000000-300");
    tg_meta_int(g, "rank", rank);
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_set_chunk_events(g, 61); /* chunks cut through open ranges */
    for (uint32_t s = 0; s < J_N_STAGES; s++) tg_stage(g, stage_names[s], stage_kinds[s]);
    /* ids 10, 11, ...: ids and indexes differ; main (id 0) is written last */
    const uint32_t n_threads = rank ? 7 : 6;
    for (uint32_t i = 0; i < n_threads; i++) {
        uint32_t th = tg_thread(g, threads[i].name, threads[i].role);
        tg_thread_at(g, th)->id = 10 + i;
        tg_thread_at(g, th)->os_tid = 1001 + i;
        jobs_thread(g, th, threads[i].n_loops, 1000 * (uint64_t)rank + i + 1);
    }
    /* main: a step range before each of 21 marks spread over the span */
    int64_t span = tg_last_ts(g) - BASE_NS;
    uint32_t main_t = tg_thread(g, "main", "main");
    tg_thread_at(g, main_t)->id = 0;
    tg_thread_at(g, main_t)->os_tid = 1000;
    for (int k = 0; k <= 20; k++) {
        int64_t mark = BASE_NS + span * k / 20;
        if (k) tg_range(g, main_t, J_STEP, mark - span / 80, mark);
        tg_step(g, (uint64_t)k, mark, k ? 1000 : 0);
    }
    return g;
}

void write_jobs_traces(const char *dir)
{
    mkdir(dir, 0777);
    write_in(trace_jobs(0), dir, "jobs0.sqlite");
    write_in(trace_jobs(1), dir, "jobs1.sqlite");
    write_in(trace_jobs(0), dir, "corrupt.sqlite");
    char *p = path_in(dir, "corrupt.sqlite");
    tg_exec(p, "UPDATE range_chunks SET data = x'4500ff' WHERE id = (SELECT max(id) FROM range_chunks WHERE thread = 14);"
               "UPDATE range_chunks SET data = x'4500ff' WHERE id = (SELECT min(id) + 3 FROM range_chunks WHERE thread = 11)");
    free(p);
}

/* ---- rank sets (docs/analyze.md, "Rank sets") ---------------------------------------- */

/* One multi-process run, one trace per rank (see traces.h). Global time g
 * is rank 0's clock; a rank with offset o records g - o and stores o as its
 * measured offset, so that mapping puts its ranges back at g. */
void write_rank_set(const char *dir, const rank_set_opts *o)
{
    const int64_t period = 10000000, t0 = BASE_NS;
    int world = o->world;
    int targets = (world + 1) / 2;
    for (int rank = 0; rank < world; rank++) {
        if (rank == o->missing) continue;
        int64_t off = rank == o->shift_rank ? o->shift_ns : 0;
        char path[4200];
        snprintf(path, sizeof path, "%s/rank%d.sqlite", dir, rank);
        tg_trace *g = tg_create("ranks");
        tg_set_chunk_events(g, 4096);
        tg_meta(g, "run_id", o->run_id ? o->run_id : "1700000000-500");
        tg_meta_int(g, "rank", rank);
        tg_meta_int(g, "world_size", o->world_size ? o->world_size : world);
        tg_meta_int(g, "local_rank", rank % 8);
        tg_meta_int(g, "device", -1);
        tg_meta_int(g, "start_ns", t0 - 1000000 - off);
        tg_meta_int(g, "pid", 100 + rank);
        if (!o->no_clock) {
            tg_meta_int(g, "clock_sync_ns", t0 - off);
            tg_meta_int(g, "clock_offset_ns", off);
            tg_meta_int(g, "clock_uncertainty_ns", rank ? 1500 : 0);
        }
        int killed = rank == o->killed;
        int64_t drift = rank == o->drift_rank ? o->drift_ppb : 0;
        if (!killed) {
            if (!o->no_clock) {
                tg_meta_int(g, "clock_sync_close_ns", t0 + period * o->steps - off);
                tg_meta_int(g, "clock_offset_close_ns", off);
                tg_meta_int(g, "clock_uncertainty_close_ns", rank ? 2000 : 0);
                tg_meta_int(g, "clock_drift_ppb", 0);
            }
            tg_meta_int(g, "end_ns", t0 + period * o->steps + 1000000 - off);
        } else {
            tg_meta(g, "status", "running");
        }
        int target = rank < targets;
        uint32_t s_fwd = tg_stage(g, "forward", "work");
        uint32_t s_put = tg_stage(g, "queue_put", "wait_output");
        uint32_t s_wait = tg_stage(g, "queue_wait", "wait_input");
        uint32_t s_bwd = tg_stage(g, "backward", "work");
        uint32_t s_ar = tg_stage(g, "allreduce", "comm");
        tg_set_os_tid_base(g, 5000 + 10 * rank);
        uint32_t th = tg_thread(g, target ? "target0" : "drafter0", target ? "target" : "drafter");
        tg_thread_at(g, th)->rank = rank;
        uint32_t main_th = 0;
        if (rank == 0) {
            main_th = tg_thread(g, "main", "main");
            tg_thread_at(g, main_th)->rank = 0;
            tg_set_step_thread(g, main_th);
        }
        int steps = killed ? o->steps / 2 : o->steps;
        for (int k = 0; k < steps; k++) {
            int64_t gk = t0 + period * k - off + period * k * drift / 1000000000; /* this rank's clock */
            /* filler ranges for the benchmarks: short forwards nested in the step's first range */
#define FILL(first_stage, first_end)                                                                    \
    do {                                                                                                \
        tg_begin(g, th, first_stage, gk);                                                               \
        for (int e = 0; e < o->extra_per_step; e++)                                                     \
            tg_range(g, th, s_fwd, gk + 1 + (int64_t)e * 1000, gk + 1 + (int64_t)e * 1000 + 500);      \
        tg_end(g, th, first_end);                                                                       \
    } while (0)
            if (target) {
                int64_t fwd = o->target_bound ? 9000000 : 4000000;
                FILL(s_fwd, gk + fwd);
                tg_range(g, th, s_put, gk + fwd, gk + period);
            } else {
                int64_t bw = rank == o->slow_rank ? 5000000 : 3000000;
                int64_t w = o->target_bound ? 5500000 : 500000;
                if (o->target_bound) bw = rank == o->slow_rank ? 1500000 : 1000000;
                FILL(s_wait, gk + w);
                tg_range(g, th, s_fwd, gk + w, gk + w + 1000000);
                tg_range(g, th, s_bwd, gk + w + 1000000, gk + w + 1000000 + bw);
                uint32_t h = ((uint32_t)k * 1000003u + (uint32_t)rank) * 2654435761u;
                int64_t late = o->jitter_ns * (int64_t)((h >> 16) % 1000) / 1000;
                if (rank == world - 1 && k % 10 == 5) late += 10 * o->jitter_ns; /* an outlier */
                tg_range(g, th, s_ar, gk + w + 1000000 + bw, gk + 9500000 + late);
            }
        }
        if (o->gpu) {
            /* per step a kernel on device 0, launched 100 us into the thread's
             * forward (os_tid 5000 + 10 * rank); the drafters' name has id 2,
             * the targets' id 1; correlation ids from 1 on every rank */
            tg_meta_int(g, "device", 0);
            if (!target) tg_gpu_string(g, "pad");
            tg_gpu_string(g, target ? "fwd_gemm" : "draft_gemm");
            st_gpu_rec *k = calloc((size_t)steps + 1, sizeof *k), *api = calloc((size_t)steps + 1, sizeof *api);
            for (int i = 0; i < steps; i++) {
                int64_t gk = t0 + period * i - off;
                int64_t f0 = target ? gk : gk + (o->target_bound ? 5500000 : 500000);
                api[i] = (st_gpu_rec){.kind = ST_GPU_API, .os_tid = 5000 + 10 * rank, .start_ns = f0 + 100000,
                                      .dur_ns = 5000, .correlation = (uint32_t)i + 1};
                k[i] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = target ? 1 : 2, .start_ns = f0 + 200000,
                                    .dur_ns = 600000, .correlation = (uint32_t)i + 1};
            }
            tg_gpu_chunk(g, 0, 7, k, (size_t)steps);
            uint32_t launch = 0;
            if (o->nccl) { /* the launches named, as CUPTI names them: cudaLaunchKernel, cbid 211 */
                if (!target) tg_gpu_string(g, "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE");
                launch = tg_gpu_string(g, "cudaLaunchKernel") + 1;
                for (int i = 0; i < steps; i++) api[i].name = launch, api[i].copy_kind = 211;
            }
            if (o->nccl && !target) {
                st_gpu_rec *nk = calloc((size_t)steps + 1, sizeof *nk), *all = calloc(2 * (size_t)steps + 1, sizeof *all);
                for (int i = 0; i < steps; i++) {
                    /* launched 50 us after the step's other launch, in start order with it */
                    all[2 * i] = api[i];
                    all[2 * i + 1] = (st_gpu_rec){.kind = ST_GPU_API, .os_tid = 5000 + 10 * rank,
                                                  .start_ns = api[i].start_ns + 50000, .dur_ns = 5000,
                                                  .correlation = (uint32_t)(steps + i + 1), .name = launch,
                                                  .copy_kind = 211};
                    nk[i] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = 3, .start_ns = k[i].start_ns + 300000,
                                         .dur_ns = 600000, .correlation = (uint32_t)(steps + i + 1)};
                }
                tg_gpu_chunk(g, 0, 8, nk, (size_t)steps);
                tg_gpu_chunk(g, -1, 0, all, 2 * (size_t)steps);
                free(all);
                free(nk);
            } else {
                tg_gpu_chunk(g, -1, 0, api, (size_t)steps);
            }
            free(k);
            free(api);
        }
        if (killed) tg_begin(g, th, target ? s_fwd : s_wait, t0 + period * steps - off);
        if (rank == 0)
            for (int k = 0; k <= o->steps; k++) tg_step(g, (uint64_t)k, t0 + period * k, k ? 1000 : 0);
        tg_write(g, path);
        tg_free(g);
    }
}
