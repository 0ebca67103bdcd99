/* test_vtab.c: the virtual tables of tracer/vtab.c beyond plain contents
 * (test_reader.c covers those): the `step` column on a trace with known
 * step marks; constraint pushdown (windowed and filtered queries return the
 * same rows as a full scan filtered in C, and the plan carries the pushed
 * constraints); rowids (unique and the same in every scan, so ORs, IN
 * lists, self-joins and LIMIT/OFFSET give the rows a decode through the
 * reader gives); the gpu table; read-only and innocuous behaviour; the
 * loadable extension, ordered scans (GROUP BY / ORDER BY on thread and
 * stage consumed without a sort, with SQLite's own sort's answer), both through sqlite3_load_extension and through the
 * sqlite3 command-line shell (`.load $ST_BUILD/stagetrace_ext`); and traces
 * with damaged chunks, which must make a query fail with a message, never
 * crash or return made-up rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <link.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "st_reader.h"
#include "st_schema.h"
#include "stagetrace.h"

/* ---- helpers ---- */

/* Runs sql to completion; returns the SQLite code of the last step and
 * copies the error message. */
static int sql_run(sqlite3 *db, const char *sql, char *msg, size_t size)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        }
    }
    if (msg) snprintf(msg, size, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static sqlite3 *open_registered(const char *path, int flags)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, flags, NULL), SQLITE_OK);
    assert_int_equal(st_sql_register(db), ST_OK);
    return db;
}

/* A copy of a trace that the test may damage. */
static void copy_trace(const char *from, const char *to)
{
    unlink(to);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(from, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char *sql = sqlite3_mprintf("VACUUM INTO %Q", to);
    exec_sql(db, sql);
    sqlite3_free(sql);
    sqlite3_close(db);
}

static st_trace *open_trace(const char *path)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_vtab";
    opt.nvtx = 0;
    opt.clock = 1;
    st_trace *t = NULL;
    if (st_open(&t, &opt) != ST_OK) fail_msg("st_open: %s", st_last_error());
    return t;
}

/* ---- the traces ---- */

typedef struct fixture {
    char steps_path[512]; /* one thread, known step membership */
    char multi_path[512]; /* three threads, many chunks, counters, no steps */
} fixture;

enum { S_BEFORE, S_OUTER, S_INNER, S_SPAN, S_NESTED, S_GAP, S_AFTER, N_STEP_STAGES };
static const char *const step_stage_names[N_STEP_STAGES] = {"before", "outer", "inner", "span",
                                                            "nested", "gap", "after"};

/* A range's step is the number of the first step mark after its start. */
static void record_steps_trace(const char *path)
{
    st_trace *t = open_trace(path);
    int s[N_STEP_STAGES];
    for (int i = 0; i < N_STEP_STAGES; i++) s[i] = st_stage_register(t, step_stage_names[i], ST_WORK);
    int tokens = st_counter_register(t, "tokens", "tokens");
    assert_int_equal(st_thread_register(t, "main", "main", -1, 0), 0);
    st_begin((st_stage)s[S_BEFORE]); /* before any mark: step 0 */
    st_end((st_stage)s[S_BEFORE]);
    st_step(0, 0);
    st_begin((st_stage)s[S_OUTER]); /* step 1 */
    st_begin((st_stage)s[S_INNER]); /* step 1 */
    st_end((st_stage)s[S_INNER]);
    st_end((st_stage)s[S_OUTER]);
    st_counter_set((st_counter)tokens, 100);
    st_step(1, 100);
    st_begin((st_stage)s[S_SPAN]); /* begins in step 2, ends in step 3 */
    st_step(2, 200);
    st_begin((st_stage)s[S_NESTED]); /* step 3 */
    st_end((st_stage)s[S_NESTED]);
    st_end((st_stage)s[S_SPAN]);
    st_step(3, 300);
    st_begin((st_stage)s[S_GAP]); /* the next mark is step 5: step 5 */
    st_end((st_stage)s[S_GAP]);
    st_step(5, 500);
    st_begin((st_stage)s[S_AFTER]); /* after the last mark: NULL */
    st_end((st_stage)s[S_AFTER]);
    assert_int_equal(st_close(t), ST_OK);
}

#define MULTI_THREADS 3
#define MULTI_BATCHES 6
#define MULTI_ITERS 40

typedef struct multi_arg {
    st_trace *trace;
    int index;
    int stage[4], counter[2];
    int ok;
} multi_arg;

static void *multi_worker(void *p)
{
    multi_arg *a = p;
    char name[32];
    snprintf(name, sizeof name, "worker%d", a->index);
    a->ok = st_thread_register(a->trace, name, "worker", a->index, 0) >= 0;
    for (int b = 0; b < MULTI_BATCHES; b++) {
        for (int i = 0; i < MULTI_ITERS; i++) {
            st_begin((st_stage)a->stage[0]);
            st_begin((st_stage)a->stage[1]);
            if ((i + a->index) % 3 == 0) {
                st_begin((st_stage)a->stage[2]);
                st_end((st_stage)a->stage[2]);
            }
            st_end((st_stage)a->stage[1]);
            st_end((st_stage)a->stage[0]);
            st_begin((st_stage)a->stage[3]);
            st_end((st_stage)a->stage[3]);
            st_counter_set((st_counter)a->counter[0], b * MULTI_ITERS + i);
            if (i % 4 == 0) st_counter_set((st_counter)a->counter[1], -0.5 * i);
        }
        st_flush(a->trace); /* a chunk boundary in every thread */
    }
    st_thread_unregister();
    return NULL;
}

static void record_multi_trace(const char *path)
{
    st_trace *t = open_trace(path);
    multi_arg args[MULTI_THREADS];
    pthread_t threads[MULTI_THREADS];
    const char *names[4] = {"outer", "middle", "leaf", "tail"};
    for (int i = 0; i < MULTI_THREADS; i++) {
        args[i] = (multi_arg){.trace = t, .index = i};
        for (int s = 0; s < 4; s++) args[i].stage[s] = st_stage_register(t, names[s], s == 3 ? ST_SYNC : ST_WORK);
        args[i].counter[0] = st_counter_register(t, "items", "items");
        args[i].counter[1] = st_counter_register(t, "delta", "");
        assert_int_equal(pthread_create(&threads[i], NULL, multi_worker, &args[i]), 0);
    }
    for (int i = 0; i < MULTI_THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_true(args[i].ok);
    }
    assert_int_equal(st_close(t), ST_OK);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    tmp_path(f->steps_path, sizeof f->steps_path, "steps.sqlite");
    tmp_path(f->multi_path, sizeof f->multi_path, "multi.sqlite");
    record_steps_trace(f->steps_path);
    record_multi_trace(f->multi_path);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->steps_path);
    unlink(f->multi_path);
    free(f);
    return 0;
}

/* ---- step column ---- */

static void test_step_column(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_registered(f->steps_path, SQLITE_OPEN_READONLY);
    static const struct {
        const char *stage;
        int depth;
        int64_t step; /* -1: NULL */
    } expect[] = {
        {"before", 0, 0}, {"outer", 0, 1}, {"inner", 1, 1}, {"span", 0, 2},
        {"nested", 1, 3}, {"gap", 0, 5},  {"after", 0, -1},
    };
    sqlite3_stmt *st = prepare(db, "SELECT stage_name, depth, step, start_ns FROM ranges_v ORDER BY start_ns, depth");
    size_t n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_true(n < sizeof expect / sizeof expect[0]);
        assert_string_equal((const char *)sqlite3_column_text(st, 0), expect[n].stage);
        assert_int_equal(sqlite3_column_int(st, 1), expect[n].depth);
        if (expect[n].step < 0) {
            assert_int_equal(sqlite3_column_type(st, 2), SQLITE_NULL);
        } else {
            assert_int_equal(sqlite3_column_type(st, 2), SQLITE_INTEGER);
            assert_int_equal(sqlite3_column_int64(st, 2), expect[n].step);
        }
        n++;
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    assert_int_equal(n, sizeof expect / sizeof expect[0]);

    /* The definition, checked row by row against the steps table: the
     * first mark (in step order) whose ts_ns is after start_ns. */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges r WHERE r.step IS NOT "
                                 "(SELECT min(step) FROM main.steps s WHERE s.ts_ns > r.start_ns)"),
                     0);
    /* The spanning range ends after the mark of its own step. */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges_v WHERE stage_name = 'span' AND "
                                 "end_ns > (SELECT ts_ns FROM main.steps WHERE step = 2)"),
                     1);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE step = 4"), 0);
    assert_int_equal(sql_int(db, "SELECT sum(tokens) FROM main.steps"), 1100);
    sqlite3_close(db);

    /* A trace without step marks: every step is NULL. */
    db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    assert_true(sql_int(db, "SELECT count(*) FROM ranges") > 0);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE step IS NOT NULL"), 0);
    sqlite3_close(db);
}

/* ---- pushdown ---- */

typedef struct row {
    int64_t thread, stage, start, dur, end, depth;
} row;

typedef struct rows {
    row *r;
    int n, cap;
} rows;

static void rows_push(rows *rs, const row *x)
{
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? rs->cap * 2 : 1024;
        rs->r = realloc(rs->r, (size_t)rs->cap * sizeof *rs->r);
        assert_non_null(rs->r);
    }
    rs->r[rs->n++] = *x;
}

static int row_cmp(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    for (int i = 0; i < 6; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

static rows query_ranges(sqlite3 *db, const char *where)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT thread, stage, start_ns, dur_ns, end_ns, depth FROM ranges%s%s",
             where ? " WHERE " : "", where ? where : "");
    sqlite3_stmt *st = prepare(db, sql);
    rows rs = {0};
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        row x;
        int64_t *v = &x.thread;
        for (int i = 0; i < 6; i++) v[i] = sqlite3_column_int64(st, i);
        rows_push(&rs, &x);
    }
    if (rc != SQLITE_DONE) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rs;
}

typedef int (*row_pred)(const row *x, const int64_t *p);

/* The query's rows equal the full scan's rows for which pred holds. */
static int check_query(sqlite3 *db, const rows *all, const char *where, row_pred pred, const int64_t *p)
{
    rows got = query_ranges(db, where), want = {0};
    for (int i = 0; i < all->n; i++)
        if (pred(&all->r[i], p)) rows_push(&want, &all->r[i]);
    if (got.n > 1) qsort(got.r, (size_t)got.n, sizeof *got.r, row_cmp);
    if (want.n > 1) qsort(want.r, (size_t)want.n, sizeof *want.r, row_cmp);
    if (got.n != want.n) fail_msg("WHERE %s: %d rows, expected %d", where, got.n, want.n);
    for (int i = 0; i < got.n; i++)
        if (row_cmp(&got.r[i], &want.r[i]) != 0) fail_msg("WHERE %s: row %d differs", where, i);
    int n = got.n;
    free(got.r);
    free(want.r);
    return n;
}

static int p_overlap(const row *x, const int64_t *p) { return x->start < p[1] && x->end > p[0]; }
static int p_start_in(const row *x, const int64_t *p) { return x->start >= p[0] && x->start <= p[1]; }
static int p_end_in(const row *x, const int64_t *p) { return x->end >= p[0] && x->end <= p[1]; }
static int p_thread_window(const row *x, const int64_t *p)
{
    return x->thread == p[2] && x->end >= p[0] && x->start < p[1];
}
static int p_strict_half(const row *x, const int64_t *p) { return x->start > p[0] && x->end < p[1]; }
static int p_start_eq(const row *x, const int64_t *p) { return x->start == p[0]; }
static int p_end_eq_thread(const row *x, const int64_t *p) { return x->end == p[0] && x->thread == p[1]; }
static int p_threads_before(const row *x, const int64_t *p) { return (x->thread == 0 || x->thread == 2) && x->start < p[1]; }
static int p_stage_depth(const row *x, const int64_t *p) { return x->stage == p[2] && x->depth == 1 && x->start >= p[0]; }
static int p_dur(const row *x, const int64_t *p) { return x->dur > p[2] && x->end <= p[1]; }
static int p_all(const row *x, const int64_t *p) { return 1; }
static int p_none(const row *x, const int64_t *p) { return 0; }
static int p_thread1(const row *x, const int64_t *p) { return x->thread == 1; }

static void test_pushdown_ranges(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    rows all = query_ranges(db, NULL);
    int per_batch = 0; /* outer, middle, tail, and a leaf every third iteration */
    for (int t = 0; t < MULTI_THREADS; t++)
        for (int i = 0; i < MULTI_ITERS; i++) per_batch += 3 + ((i + t) % 3 == 0);
    assert_int_equal(all.n, MULTI_BATCHES * per_batch);
    assert_true(sql_int(db, "SELECT count(*) FROM range_chunks") >= MULTI_THREADS * MULTI_BATCHES);

    /* Windows from the middle of one range to the middle of another, all
     * over the trace (a fixed pseudo-random sequence). */
    uint64_t seed = 12345;
    int nonempty = 0, partial = 0;
    char where[256];
    for (int k = 0; k < 40; k++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const row *a = &all.r[(seed >> 33) % (uint64_t)all.n];
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const row *b = &all.r[(seed >> 33) % (uint64_t)all.n];
        int64_t t0 = a->start + a->dur / 2, t1 = b->start + b->dur / 2;
        if (t0 > t1) {
            int64_t tmp = t0;
            t0 = t1;
            t1 = tmp;
        }
        int64_t p[3] = {t0, t1, (int64_t)(seed >> 40) % MULTI_THREADS};
        snprintf(where, sizeof where, "start_ns < %lld AND end_ns > %lld", (long long)t1, (long long)t0);
        int n = check_query(db, &all, where, p_overlap, p);
        nonempty += n > 0;
        partial += n > 0 && n < all.n;
        snprintf(where, sizeof where, "start_ns >= %lld AND start_ns <= %lld", (long long)t0, (long long)t1);
        check_query(db, &all, where, p_start_in, p);
        snprintf(where, sizeof where, "end_ns BETWEEN %lld AND %lld", (long long)t0, (long long)t1);
        check_query(db, &all, where, p_end_in, p);
        snprintf(where, sizeof where, "thread = %lld AND end_ns >= %lld AND start_ns < %lld",
                 (long long)p[2], (long long)t0, (long long)t1);
        check_query(db, &all, where, p_thread_window, p);
        /* Real-valued bounds: start_ns > t0 + 0.5 is start_ns > t0. */
        snprintf(where, sizeof where, "start_ns > %lld.5 AND end_ns < %lld.0 - 0.5", (long long)t0,
                 (long long)t1);
        check_query(db, &all, where, p_strict_half, p);
        snprintf(where, sizeof where, "thread IN (0, 2) AND start_ns < %lld", (long long)t1);
        check_query(db, &all, where, p_threads_before, p);
        p[2] = k % 3; /* a stage id */
        snprintf(where, sizeof where, "stage = %lld AND depth = 1 AND start_ns >= %lld", (long long)p[2],
                 (long long)t0);
        check_query(db, &all, where, p_stage_depth, p);
        p[2] = a->dur;
        snprintf(where, sizeof where, "dur_ns > %lld AND end_ns <= %lld", (long long)p[2], (long long)t1);
        check_query(db, &all, where, p_dur, p);
        /* Exact values of a row. */
        int64_t e[2] = {a->start, 0};
        snprintf(where, sizeof where, "start_ns = %lld", (long long)a->start);
        assert_true(check_query(db, &all, where, p_start_eq, e) >= 1);
        e[0] = b->end;
        e[1] = b->thread;
        snprintf(where, sizeof where, "end_ns = %lld AND thread = %lld", (long long)b->end, (long long)b->thread);
        assert_true(check_query(db, &all, where, p_end_eq_thread, e) >= 1);
    }
    assert_true(nonempty >= 30 && partial >= 30);

    /* Odd and contradictory constraints: never lose a row SQLite keeps. */
    int64_t none[3] = {0};
    check_query(db, &all, "start_ns < 'abc'", p_all, none); /* a number is less than any text */
    check_query(db, &all, "start_ns < 1e300 AND end_ns > -1e300", p_all, none);
    check_query(db, &all, "start_ns > 1e300", p_none, none);
    check_query(db, &all, "start_ns > 9223372036854775807", p_none, none);
    check_query(db, &all, "end_ns < -9223372036854775808", p_none, none);
    check_query(db, &all, "start_ns < 0", p_none, none);
    check_query(db, &all, "thread = -1", p_none, none);
    check_query(db, &all, "thread = 1.5", p_none, none);
    assert_true(check_query(db, &all, "thread = 1.0", p_thread1, none) > 0);
    assert_true(check_query(db, &all, "thread = '1'", p_thread1, none) > 0);
    check_query(db, &all, "thread = NULL", p_none, none);
    int64_t first_start = INT64_MAX, last_end = INT64_MIN;
    for (int i = 0; i < all.n; i++) {
        if (all.r[i].start < first_start) first_start = all.r[i].start;
        if (all.r[i].end > last_end) last_end = all.r[i].end;
    }
    snprintf(where, sizeof where, "start_ns > %lld AND start_ns < %lld", (long long)last_end,
             (long long)first_start);
    check_query(db, &all, where, p_none, none);
    snprintf(where, sizeof where, "start_ns >= %lld AND end_ns <= %lld", (long long)first_start,
             (long long)last_end);
    check_query(db, &all, where, p_all, none);

    /* The plan carries the constraints to the table, also through the
     * view's joins: 'a' thread, 'c' start_ns, 'e' end_ns. */
    const char *queries[] = {
        "EXPLAIN QUERY PLAN SELECT * FROM ranges WHERE thread = 1 AND start_ns < 5 AND end_ns > 3",
        "EXPLAIN QUERY PLAN SELECT * FROM ranges_v WHERE thread = 1 AND start_ns < 5 AND end_ns > 3",
    };
    for (int q = 0; q < 2; q++) {
        sqlite3_stmt *st = prepare(db, queries[q]);
        int found = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *detail = (const char *)sqlite3_column_text(st, 3);
            if (strstr(detail, "VIRTUAL TABLE INDEX") && strstr(detail, "a=") && strstr(detail, "c<") &&
                strstr(detail, "e>"))
                found = 1;
        }
        sqlite3_finalize(st);
        assert_true(found);
    }
    free(all.r);
    sqlite3_close(db);
}

typedef struct sample {
    int64_t thread, counter, ts;
    double value;
} sample;

static int query_samples(sqlite3 *db, const char *where, sample *out, int cap)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT thread, counter, ts_ns, value FROM counters%s%s", where ? " WHERE " : "",
             where ? where : "");
    sqlite3_stmt *st = prepare(db, sql);
    int n = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        assert_true(n < cap);
        out[n++] = (sample){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                            sqlite3_column_double(st, 3)};
    }
    if (rc != SQLITE_DONE) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_pushdown_counters(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    enum { CAP = MULTI_THREADS * MULTI_BATCHES * MULTI_ITERS * 2 };
    static sample all[CAP], got[CAP];
    int n_all = query_samples(db, NULL, all, CAP);
    assert_int_equal(n_all, MULTI_THREADS * MULTI_BATCHES * (MULTI_ITERS + MULTI_ITERS / 4));
    /* Windows between time quantiles, so that each holds samples. */
    static int64_t ts[CAP];
    for (int i = 0; i < n_all; i++) ts[i] = all[i].ts;
    qsort(ts, (size_t)n_all, sizeof *ts, cmp_i64);
    int partial = 0;
    for (int k = 0; k < 9; k++) {
        int64_t t0 = ts[n_all * k / 9], t1 = ts[n_all * (k + 1) / 9 - 1];
        for (int form = 0; form < 3; form++) {
            char where[256];
            switch (form) {
            case 0: snprintf(where, sizeof where, "ts_ns >= %lld AND ts_ns < %lld", (long long)t0, (long long)t1); break;
            case 1:
                snprintf(where, sizeof where, "thread = 1 AND ts_ns > %lld AND ts_ns <= %lld", (long long)t0,
                         (long long)t1);
                break;
            case 2:
                snprintf(where, sizeof where, "counter = 1 AND ts_ns BETWEEN %lld AND %lld", (long long)t0,
                         (long long)t1);
                break;
            }
            int n = query_samples(db, where, got, CAP), j = 0;
            for (int i = 0; i < n_all; i++) { /* the same filter over the full scan, in order */
                const sample *x = &all[i];
                int keep = form == 0   ? x->ts >= t0 && x->ts < t1
                           : form == 1 ? x->thread == 1 && x->ts > t0 && x->ts <= t1
                                       : x->counter == 1 && x->ts >= t0 && x->ts <= t1;
                if (!keep) continue;
                if (j >= n) fail_msg("WHERE %s: too few rows (%d)", where, n);
                assert_int_equal(got[j].thread, x->thread);
                assert_int_equal(got[j].counter, x->counter);
                assert_int_equal(got[j].ts, x->ts);
                assert_true(got[j].value == x->value);
                j++;
            }
            assert_int_equal(n, j);
            partial += n > 0 && n < n_all;
        }
    }
    assert_true(partial >= 9);
    sqlite3_close(db);
}

/* ---- the gpu table, read-only, innocuous, registration ---- */

static void test_gpu_table(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_registered(f->steps_path, SQLITE_OPEN_READONLY);
    sqlite3_stmt *st = prepare(db, "SELECT * FROM gpu");
    static const char *const cols[] = {"device", "stream", "kind",   "name",  "start_ns",   "dur_ns",
                                       "bytes",  "correlation", "thread", "stage", "launch_tid", "launch_thread"};
    assert_int_equal(sqlite3_column_count(st), 12);
    for (int i = 0; i < 12; i++) assert_string_equal(sqlite3_column_name(st, i), cols[i]);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE); /* no GPU activity recorded */
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* An empty gpu_chunks table: still no rows. A corrupt chunk: an error
     * that says so, not an empty table. A valid chunk decodes, with the
     * launching thread and stage joined in from the API records. */
    char path[512], msg[512];
    tmp_path(path, sizeof path, "gpu.sqlite");
    copy_trace(f->steps_path, path);
    sqlite3 *w;
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    exec_sql(w, st_gpu_schema_sql); /* the GPU tables as the writer makes them */
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu"), 0);
    sqlite3_close(db);
    exec_sql(w, "INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) "
                "VALUES (0, 7, 0, 10, 1, x'4701020304')");
    sqlite3_close(w);
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_run(db, "SELECT count(*) FROM gpu", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "corrupt"));
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges"), 7); /* the rest still reads */
    sqlite3_close(db);

    /* A kernel launched by thread 0 at the start of its first range. */
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    int64_t tid = sql_int(w, "SELECT os_tid FROM threads WHERE id = 0");
    st_gpu_encoder enc = {0};
    assert_int_equal(st_gpu_chunk_start(&enc), 0);
    st_gpu_rec k = {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = 1000000000000LL, .dur_ns = 5000, .correlation = 9};
    assert_int_equal(st_gpu_put(&enc, &k), 0);
    sqlite3_stmt *ins = prepare(w, "INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) "
                                   "VALUES (?, ?, ?, ?, ?, ?)");
    exec_sql(w, "DELETE FROM gpu_chunks; INSERT INTO gpu_strings VALUES (0, 'spin_kernel')");
    sqlite3_bind_int(ins, 1, 1);
    sqlite3_bind_int(ins, 2, 7);
    sqlite3_bind_int64(ins, 3, enc.t0_ns);
    sqlite3_bind_int64(ins, 4, enc.t1_ns);
    sqlite3_bind_int(ins, 5, (int)enc.n_records);
    sqlite3_bind_blob(ins, 6, enc.buf.data, (int)enc.buf.len, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
    sqlite3_reset(ins);
    assert_int_equal(st_gpu_chunk_start(&enc), 0);
    st_gpu_rec api = {.kind = ST_GPU_API, .start_ns = 999999999000LL, .dur_ns = 10, .correlation = 9, .os_tid = tid};
    assert_int_equal(st_gpu_put(&enc, &api), 0);
    sqlite3_bind_int(ins, 1, -1);
    sqlite3_bind_int(ins, 2, 0);
    sqlite3_bind_int64(ins, 3, enc.t0_ns);
    sqlite3_bind_int64(ins, 4, enc.t1_ns);
    sqlite3_bind_int(ins, 5, (int)enc.n_records);
    sqlite3_bind_blob(ins, 6, enc.buf.data, (int)enc.buf.len, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
    sqlite3_finalize(ins);
    st_buf_free(&enc.buf);
    sqlite3_close(w);
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu"), 1);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu WHERE device = 1 AND stream = 7 AND kind = 'kernel' "
                                 "AND name = 'spin_kernel' AND dur_ns = 5000 AND correlation = 9 AND thread = 0"),
                     1);
    sqlite3_close(db);
    unlink(path);
}

/* ---- rowids: unique and the same in every scan ----
 * SQLite merges the scans of an OR (a MULTI-INDEX OR plan) by rowid, and
 * joins, IN lists, LIMIT/OFFSET run other plans over the same rows: every
 * query must give the rows a decode through the reader gives, each with the
 * rowid docs/trace-format.md defines (chunk id * 2^32 + index in chunk). */

#define VCOLS 9

typedef struct vrow {
    int64_t rowid, v[VCOLS];
} vrow;

typedef struct vrows {
    vrow *r;
    int n, cap;
} vrows;

static void vrows_push(vrows *rs, const vrow *x)
{
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? rs->cap * 2 : 1024;
        rs->r = realloc(rs->r, (size_t)rs->cap * sizeof *rs->r);
        assert_non_null(rs->r);
    }
    rs->r[rs->n++] = *x;
}

static int vrow_cmp(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    for (int i = 0; i < 1 + VCOLS; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

static int64_t expected_rowid(int64_t chunk_id, uint32_t index) { return chunk_id * 4294967296LL + index; }

/* The rowid and the columns of a row of sql; a text column is a GPU kind
 * (its st_gpu_kind), NULL is -1. */
static vrows query_vrows(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    vrows rs = {0};
    int rc, n_cols = sqlite3_column_count(st);
    assert_true(n_cols >= 1 && n_cols <= 1 + VCOLS);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        vrow x = {0};
        int64_t *v = &x.rowid;
        for (int i = 0; i < n_cols; i++) {
            int type = sqlite3_column_type(st, i);
            if (type == SQLITE_NULL) {
                v[i] = -1;
            } else if (type == SQLITE_TEXT) {
                const char *text = (const char *)sqlite3_column_text(st, i);
                v[i] = 0;
                for (uint32_t k = 1; k <= ST_GPU_KIND_MAX; k++)
                    if (strcmp(st_gpu_kind_name(k), text) == 0) v[i] = k;
                if (!v[i]) fail_msg("%s: unexpected text '%s'", sql, text);
            } else {
                v[i] = sqlite3_column_int64(st, i);
            }
        }
        vrows_push(&rs, &x);
    }
    if (rc != SQLITE_DONE) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rs;
}

typedef int (*vrow_pred)(const vrow *x);

typedef struct vcase {
    const char *where;
    vrow_pred keep;
} vcase;

/* "SELECT <cols> FROM <table> WHERE <where>" gives, as a set, the decoded
 * rows for which keep holds, with their rowids; no rowid comes twice. */
static void check_vcase(sqlite3 *db, const char *cols, const char *table, const vrows *all, const vcase *c)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT %s FROM %s WHERE %s", cols, table, c->where);
    vrows got = query_vrows(db, sql), want = {0};
    for (int i = 0; i < all->n; i++)
        if (c->keep(&all->r[i])) vrows_push(&want, &all->r[i]);
    if (got.n > 1) qsort(got.r, (size_t)got.n, sizeof *got.r, vrow_cmp);
    if (want.n > 1) qsort(want.r, (size_t)want.n, sizeof *want.r, vrow_cmp);
    if (got.n != want.n) fail_msg("%s: %d rows, expected %d", sql, got.n, want.n);
    for (int i = 0; i < got.n; i++) {
        if (vrow_cmp(&got.r[i], &want.r[i]) != 0) fail_msg("%s: row %d differs", sql, i);
        if (i && got.r[i].rowid == got.r[i - 1].rowid) fail_msg("%s: rowid %lld twice", sql, (long long)got.r[i].rowid);
    }
    /* count(*) agrees with the rows */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE %s", table, c->where);
    assert_int_equal(sql_int(db, sql), want.n);
    free(got.r);
    free(want.r);
}

/* Self-joins on rowid and LIMIT/OFFSET, in the scan's own order and in rowid
 * order, against the decode (whose order is the scan's: threads or devices
 * one after another, chunks in order). */
static void check_join_limit(sqlite3 *db, const char *cols, const char *table, const vrows *all)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s a JOIN %s b ON a.rowid = b.rowid", table, table);
    assert_int_equal(sql_int(db, sql), all->n);
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT rowid) FROM %s", table);
    assert_int_equal(sql_int(db, sql), all->n);
    /* each row finds itself by rowid in a second scan */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s a WHERE a.rowid IN (SELECT rowid FROM %s)", table, table);
    assert_int_equal(sql_int(db, sql), all->n);

    vrows sorted = {0};
    for (int i = 0; i < all->n; i++) vrows_push(&sorted, &all->r[i]);
    qsort(sorted.r, (size_t)sorted.n, sizeof *sorted.r, vrow_cmp);
    static const int limits[][2] = {{10, 0}, {25, 7}, {50, 100}, {1000000, 3}, {5, 1000000}};
    for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
        int lim = limits[k][0], off = limits[k][1];
        for (int ordered = 0; ordered < 2; ordered++) {
            const vrows *ref = ordered ? &sorted : all;
            snprintf(sql, sizeof sql, "SELECT %s FROM %s%s LIMIT %d OFFSET %d", cols, table,
                     ordered ? " ORDER BY rowid" : "", lim, off);
            vrows got = query_vrows(db, sql);
            int want = off >= ref->n ? 0 : ref->n - off < lim ? ref->n - off : lim;
            if (got.n != want) fail_msg("%s: %d rows, expected %d", sql, got.n, want);
            for (int i = 0; i < got.n; i++)
                if (vrow_cmp(&got.r[i], &ref->r[off + i]) != 0) fail_msg("%s: row %d differs", sql, i);
            free(got.r);
        }
    }
    free(sorted.r);
}

/* Whether some query's plan is a MULTI-INDEX OR, the plan that merges by
 * rowid; the cases must exercise it. */
static int uses_or_plan(sqlite3 *db, const char *table, const vcase *cases, size_t n)
{
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        char sql[1024];
        snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN SELECT count(*) FROM %s WHERE %s", table, cases[i].where);
        sqlite3_stmt *st = prepare(db, sql);
        while (sqlite3_step(st) == SQLITE_ROW)
            if (strstr((const char *)sqlite3_column_text(st, 3), "MULTI-INDEX OR")) found++;
        sqlite3_finalize(st);
    }
    return found;
}

/* Ranges: thread, stage, start, dur, end, depth. */
static int64_t v_t0, v_t1; /* times for the cases: a third and two thirds into the trace */
static int rk_or_thread_stage(const vrow *x) { return x->v[0] == 0 || x->v[1] == 2; }
static int rk_or_three(const vrow *x) { return x->v[1] == 1 || x->v[5] == 2 || x->v[0] == 2; }
static int rk_in_lists(const vrow *x)
{
    return x->v[0] == 0 || x->v[0] == 2 || x->v[1] == 1 || x->v[1] == 3;
}
static int rk_in_only(const vrow *x) { return x->v[1] == 0 || x->v[1] == 3; }
static int rk_or_times(const vrow *x) { return x->v[2] < v_t0 || x->v[4] > v_t1; }
static int rk_or_ands(const vrow *x)
{
    return (x->v[0] == 1 && x->v[2] < v_t1) || (x->v[1] == 2 && x->v[4] > v_t0);
}
static int rk_or_same_row(const vrow *x) { return x->v[0] == 1 || x->v[1] == 0 || x->v[5] == 0; }

static void test_rowid_ranges(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->multi_path);
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    vrows all = {0};
    st_range rg;
    int rc;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    while ((rc = st_range_iter_next(it, &rg)) == 1) {
        int64_t chunk_id;
        uint32_t index;
        st_range_iter_pos(it, &chunk_id, &index);
        vrow x = {expected_rowid(chunk_id, index),
                  {rg.thread, rg.stage, rg.start_ns, rg.dur_ns, rg.start_ns + rg.dur_ns, rg.depth}};
        vrows_push(&all, &x);
        if (rg.start_ns < lo) lo = rg.start_ns;
        if (rg.start_ns > hi) hi = rg.start_ns;
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(it);
    st_reader_close(r);
    int leaves = 0; /* multi_worker's leaf ranges */
    for (int t = 0; t < MULTI_THREADS; t++)
        for (int i = 0; i < MULTI_ITERS; i++) leaves += (i + t) % 3 == 0;
    assert_int_equal(all.n, MULTI_BATCHES * (MULTI_THREADS * MULTI_ITERS * 3 + leaves));
    v_t0 = lo + (hi - lo) / 3;
    v_t1 = lo + (hi - lo) * 2 / 3;

    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    char w_times[128], w_ands[256];
    snprintf(w_times, sizeof w_times, "start_ns < %lld OR end_ns > %lld", (long long)v_t0, (long long)v_t1);
    snprintf(w_ands, sizeof w_ands, "(thread = 1 AND start_ns < %lld) OR (stage = 2 AND end_ns > %lld)",
             (long long)v_t1, (long long)v_t0);
    const vcase cases[] = {
        {"thread = 0 OR stage = 2", rk_or_thread_stage},
        {"stage = 1 OR depth = 2 OR thread = 2", rk_or_three},
        {"thread IN (0, 2) OR stage IN (1, 3)", rk_in_lists},
        {"stage IN (0, 3)", rk_in_only},
        {w_times, rk_or_times},
        {w_ands, rk_or_ands},
        {"thread = 1 OR stage = 0 OR depth = 0", rk_or_same_row},
    };
    const char *cols = "rowid, thread, stage, start_ns, dur_ns, end_ns, depth";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_vcase(db, cols, "ranges", &all, &cases[i]);
    assert_true(uses_or_plan(db, "ranges", cases, sizeof cases / sizeof cases[0]) > 0);
    check_join_limit(db, cols, "ranges", &all);

    /* A self-join on columns: each range with the ranges directly nested in
     * it (same thread, one deeper, inside its span), counted in C. */
    int64_t pairs = 0;
    for (int i = 0; i < all.n; i++)
        for (int j = 0; j < all.n; j++) {
            const int64_t *a = all.r[i].v, *b = all.r[j].v;
            pairs += a[0] == b[0] && b[5] == a[5] + 1 && b[2] >= a[2] && b[4] <= a[4];
        }
    assert_true(pairs > 0);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges a JOIN ranges b ON a.thread = b.thread "
                                 "AND b.depth = a.depth + 1 AND b.start_ns >= a.start_ns AND b.end_ns <= a.end_ns"),
                     pairs);
    /* Rows of different threads or stages never share a rowid across scans. */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM (SELECT rowid FROM ranges WHERE thread = 0) a JOIN "
                                 "(SELECT rowid FROM ranges WHERE thread = 1) b ON a.rowid = b.rowid"),
                     0);
    /* The same rowids from another connection: fixed by the file. */
    sqlite3 *db2 = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db2, "SELECT sum(rowid % 1000003) FROM ranges WHERE stage = 2"),
                     sql_int(db, "SELECT sum(rowid % 1000003) FROM ranges WHERE stage = 2"));
    sqlite3_close(db2);
    sqlite3_close(db);
    free(all.r);
}

/* Counters: thread, counter, ts, value * 2 (the values are halves). */
static int ck_or_thread_counter(const vrow *x) { return x->v[0] == 0 || x->v[1] == 1; }
static int ck_in_or_time(const vrow *x) { return x->v[0] == 1 || x->v[0] == 2 || x->v[2] < v_t0; }
static int ck_or_times(const vrow *x) { return x->v[2] < v_t0 || x->v[2] > v_t1; }
static int ck_or_ands(const vrow *x) { return (x->v[0] == 2 && x->v[1] == 0) || (x->v[1] == 1 && x->v[2] >= v_t0); }
static int ck_counter_in(const vrow *x) { return x->v[1] == 0 || x->v[1] == 1; }

static void test_rowid_counters(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->multi_path);
    st_sample_iter *it;
    assert_int_equal(st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    vrows all = {0};
    st_sample_row s;
    int rc;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    while ((rc = st_sample_iter_next(it, &s)) == 1) {
        int64_t chunk_id;
        uint32_t index;
        st_sample_iter_pos(it, &chunk_id, &index);
        vrow x = {expected_rowid(chunk_id, index), {s.thread, s.counter, s.ts_ns, (int64_t)(s.value * 2)}};
        vrows_push(&all, &x);
        if (s.ts_ns < lo) lo = s.ts_ns;
        if (s.ts_ns > hi) hi = s.ts_ns;
    }
    assert_int_equal(rc, 0);
    st_sample_iter_close(it);
    st_reader_close(r);
    assert_int_equal(all.n, MULTI_THREADS * MULTI_BATCHES * (MULTI_ITERS + MULTI_ITERS / 4));
    v_t0 = lo + (hi - lo) / 3;
    v_t1 = lo + (hi - lo) * 2 / 3;

    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    char w_in[128], w_times[128], w_ands[256];
    snprintf(w_in, sizeof w_in, "thread IN (1, 2) OR ts_ns < %lld", (long long)v_t0);
    snprintf(w_times, sizeof w_times, "ts_ns < %lld OR ts_ns > %lld", (long long)v_t0, (long long)v_t1);
    snprintf(w_ands, sizeof w_ands, "(thread = 2 AND counter = 0) OR (counter = 1 AND ts_ns >= %lld)",
             (long long)v_t0);
    const vcase cases[] = {
        {"thread = 0 OR counter = 1", ck_or_thread_counter},
        {w_in, ck_in_or_time},
        {w_times, ck_or_times},
        {w_ands, ck_or_ands},
        {"counter IN (0, 1)", ck_counter_in},
    };
    const char *cols = "rowid, thread, counter, ts_ns, CAST(value * 2 AS INTEGER)";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_vcase(db, cols, "counters", &all, &cases[i]);
    assert_true(uses_or_plan(db, "counters", cases, sizeof cases / sizeof cases[0]) > 0);
    check_join_limit(db, cols, "counters", &all);
    /* counters_v joins names in without losing or repeating a row */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM counters_v WHERE thread = 0 OR counter_name = 'delta'"),
                     sql_int(db, "SELECT count(*) FROM counters WHERE thread = 0 OR counter = 1"));
    sqlite3_close(db);
    free(all.r);
}

/* GPU: device, stream, kind, start, dur, bytes, correlation, thread, stage. */
static int gk_or_device_stream(const vrow *x) { return x->v[0] == 0 || x->v[1] == 7; }
static int gk_kind_in(const vrow *x) { return x->v[2] == ST_GPU_KERNEL || x->v[2] == ST_GPU_MEMSET; }
static int gk_or_kind_bytes(const vrow *x) { return x->v[2] == ST_GPU_SYNC || x->v[5] > 3000; }
static int gk_or_thread(const vrow *x) { return x->v[7] == 0 || x->v[0] == 1; }

/* A copy of the multi trace with GPU activity: 2 devices x 2 streams x 3
 * chunks of 6 records of every kind, and the API calls that launched half
 * of them, on thread 0. */
static void make_gpu_trace(const char *from, const char *path)
{
    copy_trace(from, path);
    sqlite3 *w;
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    exec_sql(w, "CREATE TABLE gpu_strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
                "CREATE TABLE gpu_chunks(id INTEGER PRIMARY KEY, device INTEGER NOT NULL, stream INTEGER NOT NULL,"
                " t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL);"
                "INSERT INTO gpu_strings VALUES (0, 'gemm'), (1, 'softmax')");
    int64_t tid = sql_int(w, "SELECT os_tid FROM threads WHERE id = 0");
    /* Launch times inside thread 0's recorded ranges (the middle of each of
     * its first ranges, in time order), so that the reader finds a stage
     * open at each launch whatever the recording's timing. */
    enum { N_LAUNCH = 2 * 2 * 3 * 6 };
    int64_t launch[N_LAUNCH];
    int n_launch = 0;
    {
        st_reader *r = open_reader(from);
        st_range_iter *it;
        st_range g;
        assert_int_equal(st_range_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK);
        while (n_launch < N_LAUNCH && st_range_iter_next(it, &g) == 1)
            if (g.dur_ns >= 2) launch[n_launch++] = g.start_ns + g.dur_ns / 2;
        st_range_iter_close(it);
        st_reader_close(r);
        qsort(launch, (size_t)n_launch, sizeof launch[0], cmp_i64);
    }
    assert_true(n_launch > 0);
    for (int k = n_launch; k < N_LAUNCH; k++) launch[k] = launch[k - 1] + 20000;
    sqlite3_stmt *ins = prepare(w, "INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) "
                                   "VALUES (?, ?, ?, ?, ?, ?)");
    st_gpu_encoder enc = {0}, api = {0};
    assert_int_equal(st_gpu_chunk_start(&api), 0);
    uint32_t corr = 0;
    for (int device = 0; device < 2; device++)
        for (int stream = 3; stream <= 7; stream += 4)
            for (int chunk = 0; chunk < 3; chunk++) {
                assert_int_equal(st_gpu_chunk_start(&enc), 0);
                for (int i = 0; i < 6; i++) {
                    corr++;
                    int64_t at = launch[(corr - 1) % N_LAUNCH];
                    int64_t start = at + 100 + device * 1000 + stream;
                    st_gpu_rec g = {.kind = (uint32_t)(1 + i % 4), .start_ns = start, .dur_ns = 5000 + i,
                                    .correlation = corr};
                    if (g.kind == ST_GPU_KERNEL) g.name = 1 + (uint32_t)(i % 2);
                    if (g.kind == ST_GPU_MEMCPY) {
                        g.bytes = 1000u * (uint32_t)(1 + i + chunk);
                        g.copy_kind = ST_COPY_H2D;
                        g.src_mem = ST_MEM_PINNED;
                        g.dst_mem = ST_MEM_DEVICE;
                    }
                    if (g.kind == ST_GPU_MEMSET) g.bytes = 4096;
                    assert_int_equal(st_gpu_put(&enc, &g), 0);
                    if (corr % 2) {
                        st_gpu_rec a = {.kind = ST_GPU_API, .start_ns = at, .dur_ns = 10,
                                        .correlation = corr, .os_tid = tid};
                        assert_int_equal(st_gpu_put(&api, &a), 0);
                    }
                }
                sqlite3_bind_int(ins, 1, device);
                sqlite3_bind_int(ins, 2, stream);
                sqlite3_bind_int64(ins, 3, enc.t0_ns);
                sqlite3_bind_int64(ins, 4, enc.t1_ns);
                sqlite3_bind_int(ins, 5, (int)enc.n_records);
                sqlite3_bind_blob(ins, 6, enc.buf.data, (int)enc.buf.len, SQLITE_TRANSIENT);
                assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
                sqlite3_reset(ins);
            }
    sqlite3_bind_int(ins, 1, -1);
    sqlite3_bind_int(ins, 2, 0);
    sqlite3_bind_int64(ins, 3, api.t0_ns);
    sqlite3_bind_int64(ins, 4, api.t1_ns);
    sqlite3_bind_int(ins, 5, (int)api.n_records);
    sqlite3_bind_blob(ins, 6, api.buf.data, (int)api.buf.len, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
    sqlite3_finalize(ins);
    st_buf_free(&enc.buf);
    st_buf_free(&api.buf);
    sqlite3_close(w);
}

static void test_rowid_gpu(void **state)
{
    fixture *f = *state;
    char path[512];
    tmp_path(path, sizeof path, "gpu_rowid.sqlite");
    make_gpu_trace(f->multi_path, path);

    st_reader *r = open_reader(path);
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    vrows all = {0};
    st_gpu_row g;
    int rc, launched = 0;
    while ((rc = st_gpu_iter_next(it, &g)) == 1) {
        int64_t chunk_id;
        uint32_t index;
        st_gpu_iter_pos(it, &chunk_id, &index);
        vrow x = {expected_rowid(chunk_id, index),
                  {g.device, g.stream, g.rec.kind, g.rec.start_ns, g.rec.dur_ns, (int64_t)g.rec.bytes,
                   g.rec.correlation, g.thread, g.stage}};
        vrows_push(&all, &x);
        launched += g.thread == 0;
    }
    assert_int_equal(rc, 0);
    st_gpu_iter_close(it);
    st_reader_close(r);
    assert_int_equal(all.n, 2 * 2 * 3 * 6);
    assert_int_equal(launched, all.n / 2);

    sqlite3 *db = open_registered(path, SQLITE_OPEN_READONLY);
    const vcase cases[] = {
        {"device = 0 OR stream = 7", gk_or_device_stream},
        {"kind IN ('kernel', 'memset')", gk_kind_in},
        {"kind = 'sync' OR bytes > 3000", gk_or_kind_bytes},
        {"thread = 0 OR device = 1", gk_or_thread},
    };
    const char *cols = "rowid, device, stream, kind, start_ns, dur_ns, bytes, correlation, thread, stage";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_vcase(db, cols, "gpu", &all, &cases[i]);
    check_join_limit(db, cols, "gpu", &all);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu a JOIN gpu b ON a.correlation = b.correlation"), all.n);
    sqlite3_close(db);
    free(all.r);
    unlink(path);
}

/* gpu_v: every gpu row once, with the launching thread's name and role and
 * the stage's name and kind that the reader gives (NULL where the reader has
 * none), and end_ns = start_ns + dur_ns. */
static void test_gpu_view(void **state)
{
    fixture *f = *state;
    char path[512];
    tmp_path(path, sizeof path, "gpu_view.sqlite");
    make_gpu_trace(f->multi_path, path);
    st_reader *r = open_reader(path);
    sqlite3 *db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu_v"), sql_int(db, "SELECT count(*) FROM gpu"));
    sqlite3_stmt *q = prepare(db, "SELECT thread_name, role, stage_name, stage_kind, end_ns, name, kind, count(*) "
                                  "FROM gpu_v WHERE device = ? AND stream = ? AND start_ns = ? AND correlation = ?");
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row g;
    int rc, n = 0, named = 0, staged = 0;
    while ((rc = st_gpu_iter_next(it, &g)) == 1) {
        sqlite3_bind_int64(q, 1, g.device);
        sqlite3_bind_int64(q, 2, g.stream);
        sqlite3_bind_int64(q, 3, g.rec.start_ns);
        sqlite3_bind_int64(q, 4, g.rec.correlation);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(q, 7), 1);
        const char *tn = (const char *)sqlite3_column_text(q, 0), *role = (const char *)sqlite3_column_text(q, 1);
        if (g.thread >= 0) {
            const st_thread_info *th = NULL;
            for (uint32_t i = 0; i < st_reader_n_threads(r); i++)
                if (st_reader_thread(r, i)->id == g.thread) th = st_reader_thread(r, i);
            assert_non_null(th);
            assert_string_equal(tn, th->name);
            assert_string_equal(role, th->role);
            named++;
        } else {
            assert_null(tn);
            assert_null(role);
        }
        const char *sn = (const char *)sqlite3_column_text(q, 2), *sk = (const char *)sqlite3_column_text(q, 3);
        if (g.stage >= 0) {
            const st_stage_info *si = st_reader_stage(r, (uint32_t)g.stage);
            assert_string_equal(sn, si->name);
            assert_string_equal(sk, st_kind_name(si->kind));
            staged++;
        } else {
            assert_null(sn);
            assert_null(sk);
        }
        assert_int_equal(sqlite3_column_int64(q, 4), g.rec.start_ns + g.rec.dur_ns);
        if (g.name) assert_string_equal((const char *)sqlite3_column_text(q, 5), g.name);
        assert_string_equal((const char *)sqlite3_column_text(q, 6), st_gpu_kind_name(g.rec.kind));
        sqlite3_reset(q);
        n++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, 2 * 2 * 3 * 6);
    assert_int_equal(named, n / 2); /* half were launched by thread 0 */
    assert_true(staged > 0);
    st_gpu_iter_close(it);
    sqlite3_finalize(q);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu_v WHERE thread_name IS NOT NULL AND stage_name IS NULL "
                                 "AND stage IS NOT NULL"),
                     0);
    sqlite3_close(db);
    st_reader_close(r);
    unlink(path);

    /* A trace without GPU activity: gpu_v is empty. */
    db = open_registered(f->steps_path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu_v"), 0);
    sqlite3_close(db);
}

/* Rowids need unique chunk ids: a chunk table whose ids repeat (made
 * without its primary key) is refused, one with unique ids is read; ids
 * beyond 32 bits cannot be numbered. */
static void test_rowid_chunk_ids(void **state)
{
    fixture *f = *state;
    char path[512], msg[512];
    tmp_path(path, sizeof path, "chunk_ids.sqlite");
    copy_trace(f->multi_path, path);
    sqlite3 *w;
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    int64_t n = sql_int(w, "SELECT sum(n_ranges) FROM range_chunks");
    exec_sql(w, "CREATE TABLE rc2(id INTEGER, thread INTEGER NOT NULL, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL,"
                " n_events INTEGER NOT NULL, n_ranges INTEGER NOT NULL, data BLOB NOT NULL);"
                "INSERT INTO rc2 SELECT * FROM range_chunks; DROP TABLE range_chunks;"
                "ALTER TABLE rc2 RENAME TO range_chunks");
    sqlite3_close(w);
    sqlite3 *db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE thread = 0 OR stage = 2"),
                     sql_int(db, "SELECT count(*) FROM ranges WHERE (thread = 0) + (stage = 2) > 0"));
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges"), n);
    sqlite3_close(db);

    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    exec_sql(w, "UPDATE range_chunks SET id = 1 WHERE id = 2");
    sqlite3_close(w);
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_run(db, "SELECT count(*) FROM ranges", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "range_chunks"));
    assert_non_null(strstr(msg, "ids must be unique"));
    /* the reader refuses the whole trace at open, so every table fails alike */
    assert_int_equal(sql_run(db, "SELECT count(*) FROM counters", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "ids must be unique"));
    sqlite3_close(db);

    copy_trace(f->multi_path, path);
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    exec_sql(w, "UPDATE range_chunks SET id = 2147483647 WHERE id = (SELECT max(id) FROM range_chunks);"
                "UPDATE counter_chunks SET id = 2147483648 WHERE id = (SELECT max(id) FROM counter_chunks)");
    sqlite3_close(w);
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE rowid >= 2147483647 * 4294967296"),
                     sql_int(db, "SELECT n_ranges FROM range_chunks WHERE id = 2147483647"));
    assert_int_equal(sql_run(db, "SELECT count(*) FROM counters", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "chunk id 2147483648"));
    sqlite3_close(db);
    unlink(path);
}

static void test_read_only_and_registration(void **state)
{
    fixture *f = *state;
    char msg[512];
    assert_int_equal(st_sql_register(NULL), ST_EINVAL);

    /* A read-write connection: the tables still refuse writes, and the
     * views live in TEMP, so the trace itself is not changed. */
    sqlite3 *db = open_registered(f->steps_path, SQLITE_OPEN_READWRITE);
    assert_int_equal(st_sql_register(db), ST_OK); /* twice is fine */
    assert_int_equal(sql_run(db, "DELETE FROM ranges", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "may not be modified"));
    assert_int_equal(sql_run(db, "INSERT INTO counters VALUES (0, 0, 1, 2)", NULL, 0), SQLITE_ERROR);
    assert_int_equal(sql_run(db, "UPDATE ranges SET depth = 3", NULL, 0), SQLITE_ERROR);
    assert_int_equal(sql_run(db, "CREATE VIRTUAL TABLE r2 USING ranges", NULL, 0), SQLITE_ERROR);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM temp.sqlite_schema WHERE type = 'view' AND "
                                 "name IN ('ranges_v', 'counters_v', 'gpu_v')"),
                     3);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM main.sqlite_schema WHERE name LIKE '%_v'"), 0);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges"), 7);
    sqlite3_close(db);

    /* Not a trace: a query fails with the reader's message. */
    db = open_registered(":memory:", SQLITE_OPEN_READWRITE);
    assert_int_equal(sql_run(db, "SELECT * FROM ranges", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "not a stagetrace trace"));
    assert_int_equal(sql_run(db, "SELECT * FROM counters_v", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "not a stagetrace trace"));
    sqlite3_close(db);

    /* Innocuous: a view stored in the file may use the tables even with
     * trusted_schema off (as the reader and analyze open traces). */
    char path[512];
    tmp_path(path, sizeof path, "stored_view.sqlite");
    copy_trace(f->steps_path, path);
    db = open_registered(path, SQLITE_OPEN_READWRITE);
    exec_sql(db, "CREATE VIEW main.stored_v AS SELECT count(*) AS n FROM ranges WHERE step IS NOT NULL");
    sqlite3_close(db);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0), SQLITE_OK);
    assert_int_equal(sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0), SQLITE_OK);
    assert_int_equal(st_sql_register(db), ST_OK);
    assert_int_equal(sql_int(db, "SELECT n FROM stored_v"), 6);
    sqlite3_close(db);
    unlink(path);
}

/* ---- the loadable extension ---- */

static void extension_path(char *buf, size_t size, int with_suffix)
{
    snprintf(buf, size, "%s/stagetrace_ext%s", build_dir(), with_suffix ? ".so" : "");
}

static const char ext_sql[] =
    "SELECT count(*), sum(dur_ns), group_concat(stage_name || '@' || coalesce(step, 'null'), ',') "
    "FROM (SELECT * FROM ranges_v ORDER BY start_ns, depth);\n"
    "SELECT count(*), sum(value), group_concat(counter_name, ',') FROM counters_v;\n"
    "SELECT count(*) FROM gpu;\n"
    "SELECT count(*) FROM ranges WHERE step = 1;\n";

/* Runs ext_sql on a connection, as the shell prints it: '|' between
 * values, one line per row. */
static void run_ext_sql(sqlite3 *db, char *out, size_t size)
{
    size_t len = 0;
    out[0] = 0;
    const char *tail = ext_sql;
    while (*tail) {
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(db, tail, -1, &st, &tail), SQLITE_OK);
        if (!st) break;
        while (sqlite3_step(st) == SQLITE_ROW) {
            for (int i = 0; i < sqlite3_column_count(st); i++) {
                const unsigned char *v = sqlite3_column_text(st, i);
                len += (size_t)snprintf(out + len, size - len, "%s%s", i ? "|" : "", v ? (const char *)v : "");
                assert_true(len < size);
            }
            len += (size_t)snprintf(out + len, size - len, "\n");
        }
        assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
        while (*tail == '\n' || *tail == ' ') tail++;
    }
}

static void test_extension_in_process(void **state)
{
    fixture *f = *state;
    char ext[512], lib_out[4096], ext_out[4096];
    extension_path(ext, sizeof ext, 1);
    if (access(ext, R_OK) != 0) fail_msg("%s is missing (run make first)", ext);
    extension_path(ext, sizeof ext, 0);

    sqlite3 *db = open_registered(f->steps_path, SQLITE_OPEN_READONLY);
    run_ext_sql(db, lib_out, sizeof lib_out);
    sqlite3_close(db);
    assert_int_equal(strncmp(lib_out, "7|", 2), 0);
    assert_non_null(strstr(lib_out, "|before@0,outer@1,inner@1,span@2,nested@3,gap@5,after@null\n"
                                    "1|100|tokens\n0\n2\n"));

    /* The extension build, loaded the way any SQLite program would. */
    assert_int_equal(sqlite3_open_v2(f->steps_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 1, (int *)0), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) fail_msg("load %s: %s", ext, err);
    run_ext_sql(db, ext_out, sizeof ext_out);
    assert_string_equal(ext_out, lib_out);
    sqlite3_close(db);
}

/* Sanitizer runtimes this process runs with: the extension of a sanitizer
 * build needs them preloaded into the (uninstrumented) shell. */
static int find_sanitizer(struct dl_phdr_info *info, size_t size, void *arg)
{
    char *preload = arg;
    const char *name = info->dlpi_name;
    if (name && (strstr(name, "/libasan.so") || strstr(name, "/libubsan.so") || strstr(name, "/libtsan.so"))) {
        size_t len = strlen(preload);
        snprintf(preload + len, 1024 - len, "%s%s", len ? ":" : "", name);
    }
    return 0;
}

/* Runs the sqlite3 shell on trace with .load and script; returns its exit
 * status, output (stdout and stderr) in out. */
static int run_shell(const char *trace, const char *script, char *out, size_t size)
{
    char ext[512], script_path[512], cmd[4096], preload[1024] = "";
    extension_path(ext, sizeof ext, 0);
    tmp_path(script_path, sizeof script_path, "script.sql");
    FILE *s = fopen(script_path, "w");
    assert_non_null(s);
    fprintf(s, ".load %s\n%s", ext, script);
    fclose(s);
    dl_iterate_phdr(find_sanitizer, preload);
    snprintf(cmd, sizeof cmd, "%s%s%s sqlite3 -batch -bail '%s' < '%s' 2>&1", preload[0] ? "LD_PRELOAD='" : "",
             preload, preload[0] ? "' ASAN_OPTIONS=detect_leaks=0" : "", trace, script_path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, size - 1, p);
    out[len] = 0;
    int status = pclose(p);
    unlink(script_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_extension_shell(void **state)
{
    fixture *f = *state;
    if (system("command -v sqlite3 >/dev/null 2>&1") != 0) {
        print_message("sqlite3 shell not installed: skipped\n");
        skip();
    }
    char ext[512], lib_out[4096], out[8192];
    extension_path(ext, sizeof ext, 1);
    if (access(ext, R_OK) != 0) fail_msg("%s is missing (run make first)", ext);

    sqlite3 *db = open_registered(f->steps_path, SQLITE_OPEN_READONLY);
    run_ext_sql(db, lib_out, sizeof lib_out);
    sqlite3_close(db);

    int status = run_shell(f->steps_path, ext_sql, out, sizeof out);
    if (status != 0) fail_msg("sqlite3 shell exited %d:\n%s", status, out);
    assert_string_equal(out, lib_out);
    assert_non_null(strstr(out, "before@0,outer@1,inner@1,span@2,nested@3,gap@5,after@null"));

    /* Time-window pushdown in the shell too. */
    status = run_shell(f->multi_path,
                       "SELECT count(*) = (SELECT count(*) FROM (SELECT * FROM ranges ORDER BY rowid) "
                       "WHERE +start_ns < (SELECT avg(start_ns) FROM ranges) AND +thread = 1) "
                       "FROM ranges WHERE start_ns < (SELECT avg(start_ns) FROM ranges) AND thread = 1;\n",
                       out, sizeof out);
    assert_int_equal(status, 0);
    assert_string_equal(out, "1\n");

    /* A database that is not a trace: a clear message, a failing status. */
    char path[512];
    tmp_path(path, sizeof path, "not_a_trace.sqlite");
    unlink(path);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "CREATE TABLE t(x)");
    sqlite3_close(db);
    status = run_shell(path, "SELECT count(*) FROM ranges;\n", out, sizeof out);
    assert_true(status != 0);
    assert_non_null(strstr(out, "not a stagetrace trace"));
    unlink(path);
}

/* ---- damaged chunks ---- */

/* Copies the multi trace and damages it with sql, run on a separate,
 * writable connection. */
static void damaged_copy(const fixture *f, const char *path, const char *sql)
{
    copy_trace(f->multi_path, path);
    sqlite3 *w;
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    exec_sql(w, sql);
    assert_int_equal(sqlite3_changes(w), 1);
    sqlite3_close(w);
}

static void test_corrupt_chunks(void **state)
{
    fixture *f = *state;
    char path[512], msg[512], sql[512];
    tmp_path(path, sizeof path, "corrupt.sqlite");

    /* What the intact trace says, for comparison. */
    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    rows all = query_ranges(db, NULL);
    /* The victim: thread 1's first chunk (many events); a window after it. */
    int64_t victim = sql_int(db, "SELECT min(id) FROM range_chunks WHERE thread = 1");
    snprintf(sql, sizeof sql, "SELECT n_events FROM range_chunks WHERE id = %lld", (long long)victim);
    assert_true(sql_int(db, sql) > 10);
    /* A range starting at or after after = t1 + 2 ends after t1 + 1, so
     * the (conservative) window leaves out a chunk that ends at t1. */
    snprintf(sql, sizeof sql, "SELECT t1_ns + 2 FROM range_chunks WHERE id = %lld", (long long)victim);
    int64_t after = sql_int(db, sql);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM ranges WHERE start_ns >= %lld", (long long)after);
    int64_t n_after = sql_int(db, sql);
    assert_true(n_after > 0);
    int64_t n_thread2 = sql_int(db, "SELECT count(*) FROM ranges WHERE thread = 2");
    sqlite3_close(db);

    /* Truncated to 5 bytes. */
    snprintf(sql, sizeof sql, "UPDATE range_chunks SET data = substr(data, 1, 5) WHERE id = %lld",
             (long long)victim);
    damaged_copy(f, path, sql);
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_run(db, "SELECT count(*) FROM ranges", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "corrupt or truncated"));
    assert_int_equal(sql_run(db, "SELECT stage_name, sum(dur_ns) FROM ranges_v GROUP BY 1", msg, sizeof msg),
                     SQLITE_ERROR);
    assert_non_null(strstr(msg, "range_chunks"));
    /* Rows that come before the error are real ones, in order. */
    sqlite3_stmt *st = prepare(db, "SELECT thread, stage, start_ns, dur_ns, end_ns, depth FROM ranges");
    int n = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        assert_true(n < all.n);
        int64_t v[6];
        for (int i = 0; i < 6; i++) v[i] = sqlite3_column_int64(st, i);
        assert_int_equal(row_cmp(v, &all.r[n]), 0);
        n++;
    }
    assert_int_equal(rc, SQLITE_ERROR);
    sqlite3_finalize(st);
    /* Queries that do not need the damaged chunk still answer, so a time
     * window reads only the chunks that overlap it. */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE thread = 2"), n_thread2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM ranges WHERE start_ns >= %lld", (long long)after);
    assert_int_equal(sql_int(db, sql), n_after);
    sqlite3_close(db);
    /* The reader API reports the same. */
    st_reader *r;
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, 1, INT64_MIN, INT64_MAX), ST_OK);
    st_range range;
    assert_int_equal(st_range_iter_next(it, &range), ST_ECORRUPT);
    assert_non_null(strstr(st_last_error(), "corrupt or truncated"));
    st_range_iter_close(it);
    st_reader_close(r);
    /* And the shell, through the extension. */
    if (system("command -v sqlite3 >/dev/null 2>&1") == 0) {
        char out[4096];
        assert_true(run_shell(path, "SELECT count(*) FROM ranges;\n", out, sizeof out) != 0);
        assert_non_null(strstr(out, "corrupt or truncated"));
    }

    /* Other damage: each one an error with a message. */
    static const struct {
        const char *sql, *message;
    } damage[] = {
        {"UPDATE range_chunks SET data = 'not a blob' WHERE id = %lld", "column 'data' is text, not a blob"},
        {"UPDATE range_chunks SET data = zeroblob(64) WHERE id = %lld", "corrupt"},
        {"UPDATE range_chunks SET n_events = n_events + 1 WHERE id = %lld", "corrupt"},
        {"UPDATE range_chunks SET n_events = n_events - 1 WHERE id = %lld", "corrupt"},
        {"UPDATE range_chunks SET data = CAST(data || x'00' AS BLOB) WHERE id = %lld", "corrupt"},
        {"UPDATE range_chunks SET data = CAST(x'45' || substr(data, 2, 3) || x'ffffffffffffffffffff01' || "
         "substr(data, 5) AS BLOB) WHERE id = %lld",
         "corrupt"},
        {"UPDATE range_chunks SET thread = 77 WHERE id = %lld", "unknown thread"},
    };
    for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
        snprintf(sql, sizeof sql, damage[i].sql, (long long)victim);
        damaged_copy(f, path, sql);
        db = open_registered(path, SQLITE_OPEN_READONLY);
        assert_int_equal(sql_run(db, "SELECT sum(dur_ns) FROM ranges", msg, sizeof msg), SQLITE_ERROR);
        if (!strstr(msg, damage[i].message)) fail_msg("damage %zu: message '%s'", i, msg);
        sqlite3_close(db);
    }

    /* A damaged counter chunk. */
    damaged_copy(f, path,
                 "UPDATE counter_chunks SET data = substr(data, 1, 5) WHERE id = (SELECT min(id) FROM "
                 "counter_chunks)");
    db = open_registered(path, SQLITE_OPEN_READONLY);
    assert_int_equal(sql_run(db, "SELECT sum(value) FROM counters_v", msg, sizeof msg), SQLITE_ERROR);
    assert_non_null(strstr(msg, "counter_chunks"));
    assert_int_equal(sql_run(db, "SELECT count(*) FROM ranges", NULL, 0), SQLITE_OK);
    sqlite3_close(db);

    free(all.r);
    unlink(path);
}

/* ---- ordered scans ----
 * GROUP BY and ORDER BY on (thread), (thread, stage), (stage) and
 * (stage, thread), ascending, are consumed by the table (no sorter in the
 * plan), and give what SQLite's own sort gives: the same query with each
 * term written as `col+0`, which the table cannot consume. */

/* Every row of sql's result, one line each, columns separated by '|'. */
static char *query_text(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("cannot prepare '%s': %s", sql, sqlite3_errmsg(db));
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const char *v = (const char *)sqlite3_column_text(st, i);
            size_t need = len + (v ? strlen(v) : 4) + 3;
            if (need > cap) {
                while (need > cap) cap *= 2;
                out = realloc(out, cap);
                assert_non_null(out);
            }
            len += (size_t)sprintf(out + len, "%s%s", i ? "|" : "", v ? v : "NULL");
        }
        out[len++] = '\n';
        out[len] = 0;
    }
    if (rc != SQLITE_DONE) fail_msg("'%s' failed: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return out;
}

/* Whether sql's plan sorts (a temp B-tree for ORDER BY or GROUP BY). */
static int plan_sorts(sqlite3 *db, const char *sql)
{
    char plan[4096];
    snprintf(plan, sizeof plan, "EXPLAIN QUERY PLAN %s", sql);
    char *text = query_text(db, plan);
    int sorts = strstr(text, "TEMP B-TREE") != NULL;
    free(text);
    return sorts;
}

static void test_ordered_scans(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_registered(f->multi_path, SQLITE_OPEN_READONLY);
    char *bounds = query_text(db, "SELECT min(start_ns), max(start_ns) FROM ranges");
    long long lo, hi;
    assert_int_equal(sscanf(bounds, "%lld|%lld", &lo, &hi), 2);
    free(bounds);
    char mid_where[128];
    snprintf(mid_where, sizeof mid_where, "WHERE start_ns > %lld AND thread <> 1", lo + (hi - lo) / 2);
    const char *wheres[] = {"", "WHERE thread = 1", "WHERE thread IN (0, 2)", "WHERE stage = 2",
                            "WHERE stage >= 1 AND stage < 3", mid_where, "WHERE thread = 1 AND stage = 0",
                            "WHERE thread > 100", "WHERE stage = 99", "WHERE depth = 1 OR stage = 3"};
    const char *orders[][2] = {{"thread", "thread+0"},
                               {"thread, stage", "thread+0, stage+0"},
                               {"stage", "stage+0"},
                               {"stage, thread", "stage+0, thread+0"}};
    char q1[512], q2[512];
    for (size_t w = 0; w < sizeof wheres / sizeof wheres[0]; w++) {
        for (size_t o = 0; o < 4; o++) {
            const char *agg = "count(*), sum(dur_ns), min(rowid), max(rowid), sum(depth)";
            snprintf(q1, sizeof q1, "SELECT %s, %s FROM ranges %s GROUP BY %s", orders[o][0], agg, wheres[w],
                     orders[o][0]);
            snprintf(q2, sizeof q2, "SELECT %s, %s FROM ranges %s GROUP BY %s", orders[o][0], agg, wheres[w],
                     orders[o][1]);
            /* SQLite runs an OR or an IN list as several scans, and sorts their union */
            int may_sort = strstr(wheres[w], " OR ") || strstr(wheres[w], " IN ");
            if (!may_sort && plan_sorts(db, q1)) fail_msg("'%s' still sorts", q1);
            assert_true(plan_sorts(db, q2));
            char *a = query_text(db, q1), *b = query_text(db, q2);
            if (strcmp(a, b)) fail_msg("'%s' gives\n%s\nbut sorted by SQLite\n%s", q1, a, b);
            int empty = !strncmp(wheres[w], "WHERE thread > 100", 18) || !strcmp(wheres[w], "WHERE stage = 99");
            assert_int_equal(a[0] == 0, empty);
            free(a);
            free(b);
            /* ORDER BY: every row, grouped; within a group the order is the table's */
            snprintf(q1, sizeof q1, "SELECT %s, rowid FROM ranges %s ORDER BY %s", orders[o][0], wheres[w],
                     orders[o][0]);
            snprintf(q2, sizeof q2, "SELECT %s, rowid FROM ranges %s ORDER BY %s, rowid", orders[o][0],
                     wheres[w], orders[o][1]);
            char q1s[600];
            snprintf(q1s, sizeof q1s, "SELECT * FROM (%s) ORDER BY %s, rowid", q1, orders[o][1]);
            a = query_text(db, q1s);
            b = query_text(db, q2);
            if (strcmp(a, b)) fail_msg("'%s' does not return the rows of '%s'", q1, q2);
            free(a);
            free(b);
            /* and the consumed order really holds, row after row */
            sqlite3_stmt *st;
            assert_int_equal(sqlite3_prepare_v2(db, q1, -1, &st, NULL), SQLITE_OK);
            long long prev[2] = {-1, -1};
            int ncols = o == 0 || o == 2 ? 1 : 2;
            while (sqlite3_step(st) == SQLITE_ROW) {
                long long cur[2] = {sqlite3_column_int64(st, 0), ncols == 2 ? sqlite3_column_int64(st, 1) : 0};
                if (cur[0] < prev[0] || (cur[0] == prev[0] && cur[1] < prev[1]))
                    fail_msg("'%s': row (%lld, %lld) after (%lld, %lld)", q1, cur[0], cur[1], prev[0], prev[1]);
                prev[0] = cur[0];
                prev[1] = cur[1];
            }
            sqlite3_finalize(st);
        }
    }
    /* LIMIT/OFFSET on a consumed order, and a descending order (sorted by SQLite) */
    char *a = query_text(db, "SELECT thread, stage FROM ranges ORDER BY thread, stage LIMIT 50 OFFSET 1000");
    char *b = query_text(db, "SELECT thread, stage FROM ranges ORDER BY thread+0, stage+0 LIMIT 50 OFFSET 1000");
    assert_string_equal(a, b);
    free(a);
    free(b);
    assert_true(plan_sorts(db, "SELECT thread FROM ranges ORDER BY thread DESC"));
    a = query_text(db, "SELECT thread, count(*) FROM ranges GROUP BY thread ORDER BY thread DESC");
    b = query_text(db, "SELECT thread, count(*) FROM ranges GROUP BY thread+0 ORDER BY thread+0 DESC");
    assert_string_equal(a, b);
    free(a);
    free(b);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_column),
        cmocka_unit_test(test_pushdown_ranges),
        cmocka_unit_test(test_pushdown_counters),
        cmocka_unit_test(test_gpu_table),
        cmocka_unit_test(test_rowid_ranges),
        cmocka_unit_test(test_ordered_scans),
        cmocka_unit_test(test_rowid_counters),
        cmocka_unit_test(test_rowid_gpu),
        cmocka_unit_test(test_gpu_view),
        cmocka_unit_test(test_rowid_chunk_ids),
        cmocka_unit_test(test_read_only_and_registration),
        cmocka_unit_test(test_extension_in_process),
        cmocka_unit_test(test_extension_shell),
        cmocka_unit_test(test_corrupt_chunks),
    };
    if (make_tmp_dir("test_vtab")) return 1;
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    tidy_tmp_dir(failed);
    return failed;
}
