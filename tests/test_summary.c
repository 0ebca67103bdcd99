/* test_summary.c: `analyze summary --jobs N` gives the same answers for
 * every N.
 *
 * With several jobs, summary reads the trace threads on worker threads, each
 * through its own reader, and the exact percentiles come from shards of the
 * quantile engine merged at the end of each pass (analyze/stats.c,
 * analyze/quantiles.c). These tests check, from the bottom up:
 *   - the quantile engine fed through shards on real threads, in any split,
 *     gives the sorted truth, through every kind of pass (exact groups,
 *     histograms, collected buckets, refined buckets);
 *   - an_stats_compute_jobs gives the same numbers for 1, 2 and 7 jobs, over
 *     whole traces, windows, filters and the ranks of one run;
 *   - the `analyze` program prints the same bytes (text, CSV, JSON) and the
 *     same error for --jobs 1, 2 and 7, and refuses a bad --jobs with one
 *     line and exit status 2.
 * The traces are written here directly (SQLite + the chunk encoder), with
 * several threads per role, more ranges per thread than a group keeps
 * exactly (so two passes), nested ranges, odd chunk sizes and step marks.
 *
 * The analyzer's sources are compiled in, as in test_analyze.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common.h"
#include "encoding.h"
#include "st_reader.h"
#include "st_schema.h"

#include "../analyze/analyze.h"

#define US 1000LL
#define MS 1000000LL
#define BASE_NS 1000000000LL

/* tmp_dir/name: a trace setup wrote, or a command's output. */
static const char *work_path(const char *name)
{
    static char buf[PATH_MAX + 64];
    snprintf(buf, sizeof buf, "%s/%s", tmp_dir, name);
    return buf;
}

static uint64_t next_random(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return *seed >> 17;
}

/* ---- the quantile engine through shards ------------------------------------------------ */

typedef struct shard_job {
    an_quant *shard;
    int64_t *const *vals;
    const size_t *n;
    uint32_t n_groups, index, n_shards;
    int interleave;
} shard_job;

/* A shard's share of every group: every n_shards-th value, or one
 * contiguous slice of each group. */
static void *add_share(void *arg)
{
    shard_job *j = arg;
    for (uint32_t gi = 0; gi < j->n_groups; gi++) {
        size_t n = j->n[gi];
        if (j->interleave) {
            for (size_t i = j->index; i < n; i += j->n_shards) an_quant_add(j->shard, gi, j->vals[gi][i]);
        } else {
            size_t a = n * j->index / j->n_shards, b = n * (j->index + 1) / j->n_shards;
            uint32_t groups[64];
            int64_t values[64];
            for (size_t i = a; i < b;) {
                size_t k = 0;
                for (; k < 64 && i < b; k++, i++) {
                    groups[k] = gi;
                    values[k] = j->vals[gi][i];
                }
                an_quant_add_many(j->shard, groups, values, k);
            }
        }
    }
    return NULL;
}

static int cmp_i64_test(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every pass: n_shards shards on as many threads, merged; then the
 * percentiles against the sorted truth. Returns the passes taken. */
static int quant_through_shards(int64_t *const *vals, const size_t *n, uint32_t n_groups, uint32_t exact,
                                uint64_t collect, uint32_t n_shards, int interleave)
{
    static const uint32_t pm[] = {500, 950, 990};
    an_quant *q = an_quant_new(n_groups, pm, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    shard_job jobs[16];
    pthread_t tids[16];
    assert_true(n_shards <= 16);
    int more, passes = 0;
    do {
        passes++;
        for (uint32_t s = 0; s < n_shards; s++) {
            jobs[s] = (shard_job){an_quant_shard(q), vals, n, n_groups, s, n_shards, interleave};
            assert_non_null(jobs[s].shard);
        }
        for (uint32_t s = 0; s < n_shards; s++)
            assert_int_equal(pthread_create(&tids[s], NULL, add_share, &jobs[s]), 0);
        for (uint32_t s = 0; s < n_shards; s++) assert_int_equal(pthread_join(tids[s], NULL), 0);
        for (uint32_t s = 0; s < n_shards; s++) assert_int_equal(an_quant_merge(q, jobs[s].shard), 0);
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
    } while (more);
    for (uint32_t gi = 0; gi < n_groups; gi++) {
        int64_t *sorted = malloc((n[gi] + 1) * sizeof *sorted);
        assert_non_null(sorted);
        if (n[gi]) memcpy(sorted, vals[gi], n[gi] * sizeof *sorted);
        qsort(sorted, n[gi], sizeof *sorted, cmp_i64_test);
        assert_int_equal(an_quant_count(q, gi), n[gi]);
        for (uint32_t p = 0; p < 3; p++) {
            uint64_t rank = (n[gi] * pm[p] + 999) / 1000;
            int64_t want = n[gi] ? sorted[(rank ? rank : 1) - 1] : 0;
            if (an_quant_get(q, gi, p) != want)
                fail_msg("group %u p%u: %lld, want %lld (%u shards, exact %u, collect %llu)", gi, pm[p] / 10,
                         (long long)an_quant_get(q, gi, p), (long long)want, n_shards, exact,
                         (unsigned long long)collect);
        }
        free(sorted);
    }
    an_quant_free(q);
    return passes;
}

static void test_quant_shards(void **state)
{
    (void)state;
    enum { G = 9, N = 30000 };
    int64_t *vals[G];
    size_t n[G] = {N, N - 997, N, N - 5, 3000, 40, 100, 1, 0};
    uint64_t seed = 99;
    for (int gi = 0; gi < G; gi++) {
        vals[gi] = malloc((n[gi] + 1) * sizeof **vals);
        assert_non_null(vals[gi]);
        for (size_t i = 0; i < n[gi]; i++) {
            uint64_t r = next_random(&seed);
            switch (gi) {
            case 0: vals[gi][i] = (int64_t)(r % 1000000000ULL); break;       /* wide uniform */
            case 1: vals[gi][i] = 4000000; break;                            /* all equal */
            case 2: vals[gi][i] = r & 1 ? 7 : 1000000007; break;             /* two values */
            case 3: vals[gi][i] = (int64_t)(r % 60); break;                  /* exact buckets */
            case 4: vals[gi][i] = INT64_MAX - (int64_t)(r % 3); break;       /* the top of the range */
            default: vals[gi][i] = (int64_t)(r % 5000); break;               /* small groups */
            }
        }
    }
    /* Tiny limits: groups of 40 stay exact when merged, groups of 100 and
     * up become histograms from exact shards; the budget runs out, so
     * buckets are refined over several passes. */
    for (uint32_t shards = 1; shards <= 7; shards += 3) {
        assert_true(quant_through_shards(vals, n, G, 64, 100, shards, 0) >= 3);
        assert_true(quant_through_shards(vals, n, G, 64, 100, shards, 1) >= 3);
    }
    /* Default-like limits: two passes, values collected through the engine's lock. */
    assert_int_equal(quant_through_shards(vals, n, G, 512, 1 << 22, 2, 1), 2);
    assert_int_equal(quant_through_shards(vals, n, G, 512, 1 << 22, 7, 0), 2);
    for (int gi = 0; gi < G; gi++) free(vals[gi]);
}

/* A shard of a shard, or a shard of another engine, is refused. */
static void test_quant_shard_misuse(void **state)
{
    (void)state;
    static const uint32_t pm[] = {500};
    an_quant *a = an_quant_new(2, pm, 1), *b = an_quant_new(2, pm, 1);
    assert_non_null(a);
    assert_non_null(b);
    an_quant *sa = an_quant_shard(a);
    assert_non_null(sa);
    assert_null(an_quant_shard(sa));
    assert_int_equal(an_quant_end_pass(sa), -1);
    an_quant_add(sa, 0, 5);
    assert_int_equal(an_quant_merge(b, sa), -1); /* not b's shard: b fails */
    assert_int_equal(an_quant_end_pass(b), -1);
    assert_int_equal(an_quant_merge(a, NULL), 0);
    an_quant_free(a);
    an_quant_free(b);
}

/* ---- traces with several threads ------------------------------------------------------- */

typedef struct writer {
    sqlite3 *db;
    sqlite3_stmt *insert;
    st_event_encoder *e;
    uint32_t thread, chunk_events, n_ranges;
    int64_t end_ns; /* the latest event */
} writer;

static void flush_chunk(writer *w)
{
    if (!w->e->n_events) return;
    sqlite3_stmt *st = w->insert;
    sqlite3_bind_int64(st, 1, w->thread);
    sqlite3_bind_int64(st, 2, w->e->t0_ns);
    sqlite3_bind_int64(st, 3, w->e->t1_ns);
    sqlite3_bind_int64(st, 4, w->e->n_events);
    sqlite3_bind_int64(st, 5, w->n_ranges);
    sqlite3_bind_blob(st, 6, w->e->buf.data, (int)w->e->buf.len, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
    w->n_ranges = 0;
    assert_int_equal(st_event_chunk_start(w->e), 0);
}

static void put_event(writer *w, int is_end, uint32_t stage, int64_t ts)
{
    if (is_end) {
        assert_int_equal(st_event_put_end(w->e, ts), 0);
        w->n_ranges++;
    } else {
        assert_int_equal(st_event_put_begin(w->e, stage, ts), 0);
    }
    if (ts > w->end_ns) w->end_ns = ts;
    if (w->e->n_events == w->chunk_events) flush_chunk(w);
}

static void start_thread(writer *w, uint32_t id)
{
    flush_chunk(w);
    w->thread = id;
    w->e->depth = 0;
    assert_int_equal(st_event_chunk_start(w->e), 0);
}

enum { S_STEP, S_LOAD, S_FORWARD, S_BACKWARD, S_WAIT, S_ALLREDUCE, S_D2H, N_STAGES };
static const char *const stage_names[N_STAGES] = {"step", "load", "forward", "backward", "queue_wait",
                                                  "allreduce", "d2h"};
static const char *const stage_kinds[N_STAGES] = {"work", "work", "work", "work", "wait_input", "comm", "copy"};

typedef struct thread_spec {
    const char *name, *role;
    uint32_t n_loops; /* work loops; sizes differ, so the largest-first order matters */
} thread_spec;

/* One thread's ranges: loops of a wait, a forward with a d2h inside, a
 * backward, and sometimes an allreduce with a d2h inside that again holds
 * a d2h (depth 2). Durations are random, some rounded to the microsecond
 * (ties), some long. */
static void write_thread(writer *w, uint32_t id, const thread_spec *ts, uint64_t seed)
{
    start_thread(w, id);
    int64_t t = BASE_NS + (int64_t)(next_random(&seed) % 50) * US;
    for (uint32_t k = 0; k < ts->n_loops; k++) {
        uint64_t r = next_random(&seed);
        int64_t wait = r % 3 == 0 ? (int64_t)(r % 40) * US : (int64_t)(r % 900) + 20;
        put_event(w, 0, S_WAIT, t);
        put_event(w, 1, 0, t += wait);
        int64_t fwd = 2 * US + (int64_t)(next_random(&seed) % (k % 97 == 0 ? 5000 : 300)) * US;
        put_event(w, 0, S_FORWARD, t);
        put_event(w, 0, S_D2H, t + fwd / 3);
        put_event(w, 1, 0, t + fwd / 3 + fwd / 5);
        put_event(w, 1, 0, t += fwd);
        put_event(w, 0, S_BACKWARD, t += 100);
        put_event(w, 1, 0, t += 2 * fwd + (int64_t)(next_random(&seed) % 7));
        if (k % 5 == 0) {
            put_event(w, 0, S_ALLREDUCE, t);
            put_event(w, 0, S_D2H, t + 10 * US);
            put_event(w, 0, S_D2H, t + 11 * US);
            put_event(w, 1, 0, t + 12 * US);
            put_event(w, 1, 0, t + 30 * US);
            put_event(w, 1, 0, t += 40 * US + (int64_t)(next_random(&seed) % 1000));
        }
        t += (int64_t)(next_random(&seed) % 20) * US;
    }
}

static void put_meta_text(sqlite3 *db, const char *key, const char *value)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta VALUES (?, ?)", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

/* A run's trace: rank 0 or 1 of run "1700000000-30x" (merged by default),
 * rank 1 with one more drafter and other random durations. The main thread
 * marks 21 steps over the span with a `step` range before each mark. */
static void write_trace(const char *name, int rank)
{
    static const thread_spec threads[] = {
        {"loader", "loader", 900},    {"target0", "target", 150},   {"target1", "target", 160},
        {"drafter0", "drafter", 700}, {"drafter1", "drafter", 520}, {"drafter2", "drafter", 610},
        {"drafter3", "drafter", 480},
    };
    const uint32_t n_threads = rank ? 7 : 6;
    const char *path = work_path(name);
    unlink(path);
    writer w;
    memset(&w, 0, sizeof w);
    w.chunk_events = 61; /* chunks cut through open ranges */
    w.e = calloc(1, sizeof *w.e);
    assert_non_null(w.e);
    assert_int_equal(sqlite3_open(path, &w.db), SQLITE_OK);
    exec_sql(w.db, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF");
    exec_sql(w.db, st_schema_sql);
    exec_sql(w.db, "BEGIN");
    char buf[64];
    static const char *const meta[][2] = {
        {"schema_version", "1"}, {"status", "complete"}, {"program", "jobs"},   {"tool_version", "0.1.0"},
        {"clock", "monotonic"},  {"host", "testhost"},   {"argv", "jobs"},      {"dropped_events", "0"},
        {"world_size", "2"},     {"profile_interval", "5"},
    };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) put_meta_text(w.db, meta[i][0], meta[i][1]);
    snprintf(buf, sizeof buf, "1700000000-30%d", rank);
    put_meta_text(w.db, "run_id", buf);
    snprintf(buf, sizeof buf, "%d", rank);
    put_meta_text(w.db, "rank", buf);
    snprintf(buf, sizeof buf, "%lld", BASE_NS);
    put_meta_text(w.db, "start_ns", buf);
    for (uint32_t s = 0; s < N_STAGES; s++) {
        snprintf(buf, sizeof buf, "INSERT INTO stages VALUES (%u, '%s', '%s')", s, stage_names[s], stage_kinds[s]);
        exec_sql(w.db, buf);
    }
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO threads VALUES (0, 1000, 'main', 'main', -1, %d, 0)", rank);
    exec_sql(w.db, sql);
    for (uint32_t i = 0; i < n_threads; i++) {
        /* ids 10, 11, ...: ids and indexes differ */
        snprintf(sql, sizeof sql, "INSERT INTO threads VALUES (%u, %u, '%s', '%s', -1, %d, 0)", 10 + i, 1001 + i,
                 threads[i].name, threads[i].role, rank);
        exec_sql(w.db, sql);
    }
    assert_int_equal(sqlite3_prepare_v2(w.db,
                                        "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) "
                                        "VALUES (?, ?, ?, ?, ?, ?)",
                                        -1, &w.insert, NULL),
                     SQLITE_OK);
    for (uint32_t i = 0; i < n_threads; i++) write_thread(&w, 10 + i, &threads[i], 1000 * (uint64_t)rank + i + 1);
    /* main: a step range before each of 21 marks spread over the span */
    int64_t span = w.end_ns - BASE_NS;
    start_thread(&w, 0);
    for (int k = 0; k <= 20; k++) {
        int64_t mark = BASE_NS + span * k / 20;
        if (k) {
            put_event(&w, 0, S_STEP, mark - span / 80);
            put_event(&w, 1, 0, mark);
        }
        snprintf(sql, sizeof sql, "INSERT INTO steps VALUES (%d, %lld, %d, 0)", k, (long long)mark, k ? 1000 : 0);
        exec_sql(w.db, sql);
    }
    flush_chunk(&w);
    sqlite3_finalize(w.insert);
    exec_sql(w.db, "COMMIT");
    assert_int_equal(sqlite3_close(w.db), SQLITE_OK);
    st_buf_free(&w.e->buf);
    free(w.e);
}

/* A copy of rank 0 with corrupt chunks in two threads: the error must be
 * the one a single job meets first (thread order), whatever the jobs. */
static void write_corrupt_trace(void)
{
    write_trace("corrupt.sqlite", 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(work_path("corrupt.sqlite"), &db), SQLITE_OK);
    exec_sql(db, "UPDATE range_chunks SET data = x'4500ff' WHERE id = (SELECT max(id) FROM range_chunks WHERE thread = 14)");
    exec_sql(db, "UPDATE range_chunks SET data = x'4500ff' WHERE id = (SELECT min(id) + 3 FROM range_chunks WHERE thread = 11)");
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- statistics for every number of jobs ------------------------------------------------- */

static void assert_rows_equal(const an_stage_stats *a, const an_stage_stats *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            fail_msg("%s row %zu: total %lld/%lld count %llu/%llu p50 %lld/%lld p99 %lld/%lld", what, i,
                     (long long)a[i].total_ns, (long long)b[i].total_ns, (unsigned long long)a[i].count,
                     (unsigned long long)b[i].count, (long long)a[i].pct_ns[AN_P50], (long long)b[i].pct_ns[AN_P50],
                     (long long)a[i].pct_ns[AN_P99], (long long)b[i].pct_ns[AN_P99]);
}

static void assert_stats_equal(const an_stats *a, const an_stats *b)
{
    assert_int_equal(a->n_files, b->n_files);
    assert_int_equal(a->merged_valid, b->merged_valid);
    for (uint32_t f = 0; f < a->n_files; f++) {
        const an_file_stats *x = &a->files[f], *y = &b->files[f];
        assert_int_equal(x->wall_ns, y->wall_ns);
        assert_int_equal(x->n_ranges, y->n_ranges);
        assert_int_equal(x->n_threads, y->n_threads);
        assert_int_equal(x->n_stages, y->n_stages);
        assert_int_equal(x->n_roles, y->n_roles);
        assert_memory_equal(x->thread_busy_ns, y->thread_busy_ns, x->n_threads * sizeof *x->thread_busy_ns);
        assert_rows_equal(x->thread_stage, y->thread_stage, (size_t)x->n_threads * x->n_stages, "thread");
        assert_rows_equal(x->role_stage, y->role_stage, (size_t)x->n_roles * x->n_stages, "role");
    }
    if (a->merged_valid)
        assert_rows_equal(a->merged.role_stage, b->merged.role_stage,
                          (size_t)a->merged.n_roles * a->merged.n_stages, "merged");
}

typedef struct selection {
    const char *steps, *time, *roles, *threads, *stages;
} selection;

static void compute(an_stats *s, an_trace *t, uint32_t n, const selection *pick, int merge, int jobs)
{
    an_select sel;
    memset(&sel, 0, sizeof sel);
    if (pick->steps) assert_int_equal(an_window_parse_steps(&sel.window, pick->steps), 0);
    if (pick->time) assert_int_equal(an_window_parse_time(&sel.window, pick->time), 0);
    if (pick->roles) assert_int_equal(an_filter_add(&sel.filter.roles, &sel.filter.n_roles, pick->roles), 0);
    if (pick->threads) assert_int_equal(an_filter_add(&sel.filter.threads, &sel.filter.n_threads, pick->threads), 0);
    if (pick->stages) assert_int_equal(an_filter_add(&sel.filter.stages, &sel.filter.n_stages, pick->stages), 0);
    assert_int_equal(an_stats_compute_jobs(s, t, n, &sel, merge, jobs), 0);
    an_filter_free(&sel.filter);
}

/* ---- percentiles against the sorted truth ---------------------------------------------- */

typedef struct vec {
    int64_t *v;
    size_t n, cap;
} vec;

static void vec_push(vec *x, int64_t v)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 64;
        x->v = realloc(x->v, x->cap * sizeof *x->v);
        assert_non_null(x->v);
    }
    x->v[x->n++] = v;
}

static int cmp_truth(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Checks one row's count and percentiles against its values (sorted here). */
static void check_row(const an_stage_stats *x, vec *truth, const char *what, size_t at)
{
    static const uint32_t permille[AN_NPCT] = {500, 950, 990};
    if (x->count != truth->n)
        fail_msg("%s row %zu: count %llu, %zu values", what, at, (unsigned long long)x->count, truth->n);
    if (!truth->n) return;
    qsort(truth->v, truth->n, sizeof *truth->v, cmp_truth);
    for (int p = 0; p < AN_NPCT; p++) {
        size_t rank = (truth->n * permille[p] + 999) / 1000;
        int64_t want = truth->v[(rank ? rank : 1) - 1];
        if (x->pct_ns[p] != want)
            fail_msg("%s row %zu: percentile %d is %lld, the sorted values say %lld", what, at, p,
                     (long long)x->pct_ns[p], (long long)want);
    }
}

/* Every thread, role and merged row's percentiles are the nearest-rank
 * values of the selected ranges' durations, clipped to the window,
 * computed here from a plain read of the ranges. */
static void check_truth(const an_stats *s)
{
    vec **role_vals = calloc(s->n_files, sizeof *role_vals);
    assert_non_null(role_vals);
    for (uint32_t f = 0; f < s->n_files; f++) {
        const an_file_stats *fs = &s->files[f];
        uint32_t ns = fs->n_stages;
        vec *tv = calloc((size_t)fs->n_threads * ns + 1, sizeof *tv);
        role_vals[f] = calloc((size_t)fs->n_roles * ns + 1, sizeof *role_vals[f]);
        assert_non_null(tv);
        assert_non_null(role_vals[f]);
        st_reader *r = fs->trace->r;
        st_range_iter *it;
        assert_int_equal(st_range_iter_open(&it, r, -1, fs->t0_ns, fs->t1_ns), ST_OK);
        st_range rg;
        int rc;
        while ((rc = st_range_iter_next(it, &rg)) == 1) {
            uint32_t ti = UINT32_MAX;
            for (uint32_t i = 0; i < fs->n_threads; i++)
                if (st_reader_thread(r, i)->id == rg.thread) ti = i;
            assert_true(ti != UINT32_MAX);
            if (!fs->thread_on[ti] || rg.stage >= ns || !fs->stage_on[rg.stage]) continue;
            int64_t a = rg.start_ns > fs->t0_ns ? rg.start_ns : fs->t0_ns;
            int64_t b = rg.start_ns + rg.dur_ns < fs->t1_ns ? rg.start_ns + rg.dur_ns : fs->t1_ns;
            int64_t d = b > a ? b - a : 0;
            vec_push(&tv[(size_t)ti * ns + rg.stage], d);
            vec_push(&role_vals[f][(size_t)fs->thread_role[ti] * ns + rg.stage], d);
        }
        assert_int_equal(rc, 0);
        st_range_iter_close(it);
        for (size_t i = 0; i < (size_t)fs->n_threads * ns; i++) {
            check_row(&fs->thread_stage[i], &tv[i], "thread", i);
            free(tv[i].v);
        }
        free(tv);
    }
    if (s->merged_valid) {
        const an_merged_stats *m = &s->merged;
        for (uint32_t mr = 0; mr < m->n_roles; mr++)
            for (uint32_t ms = 0; ms < m->n_stages; ms++) {
                vec all = {0};
                for (uint32_t f = 0; f < s->n_files; f++) {
                    int32_t r = m->file_role[f][mr], st = m->file_stage[f][ms];
                    if (r < 0 || st < 0) continue;
                    vec *x = &role_vals[f][(size_t)r * s->files[f].n_stages + (uint32_t)st];
                    for (size_t i = 0; i < x->n; i++) vec_push(&all, x->v[i]);
                }
                check_row(&m->role_stage[(size_t)mr * m->n_stages + ms], &all, "merged", (size_t)mr * m->n_stages + ms);
                free(all.v);
            }
    }
    for (uint32_t f = 0; f < s->n_files; f++) {
        const an_file_stats *fs = &s->files[f];
        for (size_t i = 0; i < (size_t)fs->n_roles * fs->n_stages; i++) {
            check_row(&fs->role_stage[i], &role_vals[f][i], "role", i);
            free(role_vals[f][i].v);
        }
        free(role_vals[f]);
    }
    free(role_vals);
}

static void test_stats_jobs(void **state)
{
    (void)state;
    an_trace t[2];
    char *paths[2] = {strdup(work_path("jobs0.sqlite")), strdup(work_path("jobs1.sqlite"))};
    assert_non_null(paths[0]);
    assert_non_null(paths[1]);
    assert_int_equal(an_trace_open(&t[0], paths[0]), 0); /* t keeps the path: workers open it again */
    assert_int_equal(an_trace_open(&t[1], paths[1]), 0);
    static const selection picks[] = {
        {0},
        {.steps = "3:11"},
        {.time = "0.01:0.2"},
        {.steps = "15:"},
        {.roles = "drafter,target"},
        {.threads = "loader,drafter1,0", .stages = "forward,d2h"},
        {.stages = "allreduce"},
    };
    for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++) {
        for (uint32_t n_files = 1; n_files <= 2; n_files++) {
            an_stats one;
            compute(&one, t, n_files, &picks[p], n_files == 2, 1);
            if (p == 0) {
                assert_int_equal(one.passes, 2); /* drafters hold more ranges than a group keeps exactly */
                assert_true(one.files[0].n_ranges > 10000);
            }
            check_truth(&one);
            for (int jobs = 2; jobs <= 7; jobs += 5) {
                an_stats many;
                compute(&many, t, n_files, &picks[p], n_files == 2, jobs);
                assert_stats_equal(&one, &many);
                assert_int_equal(one.passes, many.passes);
                an_stats_free(&many);
            }
            an_stats_free(&one);
        }
    }
    an_trace_close(&t[0]);
    an_trace_close(&t[1]);
    free(paths[0]);
    free(paths[1]);
}

/* Workers other than the first open the file again by its name; another
 * trace there by then is an error, never a mix of two traces. */
static void test_stats_file_replaced(void **state)
{
    (void)state;
    st_reader *r0, *r0_again, *r1;
    assert_int_equal(st_reader_open(&r0, work_path("jobs0.sqlite")), ST_OK);
    assert_int_equal(st_reader_open(&r0_again, work_path("jobs0.sqlite")), ST_OK);
    assert_int_equal(st_reader_open(&r1, work_path("jobs1.sqlite")), ST_OK);
    assert_true(an_stats_same_trace(r0, r0_again));
    assert_false(an_stats_same_trace(r0, r1));
    assert_false(an_stats_same_trace(r1, r0));
    st_reader_close(r0);
    st_reader_close(r0_again);
    st_reader_close(r1);

    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s", work_path("jobs0.sqlite"));
    an_trace t;
    assert_int_equal(an_trace_open(&t, path), 0);
    an_select sel;
    memset(&sel, 0, sizeof sel);
    an_stats one, many;
    assert_int_equal(an_stats_compute_jobs(&one, &t, 1, &sel, 0, 1), 0);
    snprintf(path, sizeof path, "%s", work_path("jobs1.sqlite")); /* t->path now names the other trace */
    for (int i = 0; i < 5; i++) {
        /* Whether the second worker gets a task first is up to the threads. */
        int rc = an_stats_compute_jobs(&many, &t, 1, &sel, 0, 2);
        if (rc == 0) assert_stats_equal(&one, &many);
        else assert_int_equal(rc, AN_EXIT_USAGE);
        an_stats_free(&many);
    }
    an_stats_free(&one);
    an_trace_close(&t);
}

/* ---- the program ------------------------------------------------------------------------- */

static char analyze_path[PATH_MAX];

/* $ST_BUILD/analyze, absolute: the commands run in tmp_dir. */
static int find_analyze(void)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/analyze", build_dir());
    return realpath(rel, analyze_path) && access(analyze_path, X_OK) == 0 ? 0 : -1;
}

typedef struct result {
    int status;
    char *out, *err;
} result;

/* Runs `analyze summary ARGS` in tmp_dir (relative file names: the output
 * does not depend on where the test runs). */
static result summary(const char *args)
{
    char cmd[PATH_MAX * 3 + 512];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' summary %s >summary.out 2>summary.err", tmp_dir, analyze_path, args);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc));
    result r = {WEXITSTATUS(rc), NULL, NULL};
    r.out = read_file(work_path("summary.out"), NULL);
    r.err = read_file(work_path("summary.err"), NULL);
    return r;
}

static void free_result(result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_cli_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    static const char *const formats[] = {"text", "csv", "json"};
    static const char *const selections[] = {
        "jobs0.sqlite",
        "--steps 3:11 jobs0.sqlite",
        "--time 0.01:0.2 --sort p99 jobs0.sqlite",
        "--role drafter,target --stage forward --stage backward,d2h jobs0.sqlite",
        "--thread loader --thread drafter2,0 --sort count jobs0.sqlite",
        "jobs0.sqlite jobs1.sqlite",
        "--steps 5: --sort name jobs1.sqlite jobs0.sqlite",
        "--separate jobs0.sqlite jobs1.sqlite",
        "--merge --role drafter jobs0.sqlite jobs1.sqlite jobs0.sqlite",
    };
    for (size_t s = 0; s < sizeof selections / sizeof selections[0]; s++) {
        for (size_t f = 0; f < 3; f++) {
            char args[512];
            snprintf(args, sizeof args, "--format %s --jobs 1 %s", formats[f], selections[s]);
            result one = summary(args);
            if (one.status != 0) fail_msg("summary %s: exit %d: %s", args, one.status, one.err);
            assert_true(strlen(one.out) > 200);
            static const char *const jobs[] = {"--jobs 2", "--jobs 7", "--jobs=3", ""};
            for (size_t j = 0; j < 4; j++) {
                snprintf(args, sizeof args, "--format %s %s %s", formats[f], jobs[j], selections[s]);
                result many = summary(args);
                assert_int_equal(many.status, one.status);
                if (strcmp(many.out, one.out) != 0) fail_msg("summary %s: output differs from --jobs 1", args);
                assert_string_equal(many.err, one.err);
                free_result(&many);
            }
            free_result(&one);
        }
    }
}

/* A corrupt chunk: the same single line and status 2 for every --jobs. */
static void test_cli_error_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    result one = summary("--jobs 1 corrupt.sqlite");
    assert_int_equal(one.status, 2);
    assert_int_equal(count_lines(one.err), 1);
    assert_non_null(strstr(one.err, "analyze: corrupt.sqlite: trace table 'range_chunks': chunk "));
    assert_non_null(strstr(one.err, "(thread 11) is corrupt or truncated"));
    assert_string_equal(one.out, "");
    static const char *const jobs[] = {"--jobs 2 corrupt.sqlite", "--jobs 7 corrupt.sqlite",
                                       "--jobs 2 jobs0.sqlite corrupt.sqlite", "--jobs 7 --role drafter,target corrupt.sqlite"};
    for (size_t j = 0; j < 4; j++) {
        result many = summary(jobs[j]);
        assert_int_equal(many.status, 2);
        assert_string_equal(many.err, one.err);
        assert_string_equal(many.out, "");
        free_result(&many);
    }
    free_result(&one);
    /* Without the loader, the first corrupt thread is drafter1 (id 14). */
    one = summary("--jobs 1 --role drafter corrupt.sqlite");
    assert_int_equal(one.status, 2);
    assert_non_null(strstr(one.err, "(thread 14) is corrupt or truncated"));
    result many = summary("--jobs 2 --role drafter corrupt.sqlite");
    assert_int_equal(many.status, 2);
    assert_string_equal(many.err, one.err);
    free_result(&many);
    free_result(&one);
}

static void test_cli_bad_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    static const char *const bad[] = {"0",   "-1", "-7", "two", "''", "1.5", "3x", "257",
                                      "4096", "99999999999999999999", "18446744073709551617", " 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--jobs %s jobs0.sqlite", bad[i][0] == ' ' ? "' 2'" : bad[i]);
        result r = summary(args);
        if (r.status != 2) fail_msg("summary %s: exit %d, wanted 2", args, r.status);
        assert_int_equal(count_lines(r.err), 1);
        assert_non_null(strstr(r.err, "analyze: summary: --jobs needs a number of threads from 1 to 256, not '"));
        assert_string_equal(r.out, "");
        free_result(&r);
    }
    result r = summary("jobs0.sqlite --jobs");
    assert_int_equal(r.status, 2);
    assert_int_equal(count_lines(r.err), 1);
    assert_non_null(strstr(r.err, "analyze: summary: option '--jobs' needs a value"));
    free_result(&r);
    r = summary("--jobs 256 jobs0.sqlite"); /* the largest: fine, however many CPUs */
    assert_int_equal(r.status, 0);
    free_result(&r);
    r = summary("--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  --jobs N "));
    free_result(&r);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_summary")) return -1;
    write_trace("jobs0.sqlite", 0);
    write_trace("jobs1.sqlite", 1);
    write_corrupt_trace();
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
        cmocka_unit_test(test_quant_shards),
        cmocka_unit_test(test_quant_shard_misuse),
        cmocka_unit_test(test_stats_jobs),
        cmocka_unit_test(test_stats_file_replaced),
        cmocka_unit_test(test_cli_jobs),
        cmocka_unit_test(test_cli_error_jobs),
        cmocka_unit_test(test_cli_bad_jobs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
