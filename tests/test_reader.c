/* test_reader.c: the contents of a trace, end to end. A scripted run
 * (nested ranges on four threads, integer / fractional / negative counter
 * samples, instant marks, steps with tokens) is recorded through the public
 * API, then read back twice: (a) through the reader API (metadata arrays,
 * range / event / sample iterators, time windows) and (b) through the
 * virtual tables in plain SQL (st_sql_register), and both must give exactly
 * the scripted records. Timestamps are real clock readings, so the tests
 * assert relations (ordering, nesting, phases between step marks, equality
 * of (a) and (b)) and exact counts, ids, names and values.
 *
 * The run: the main thread marks step 0, then drives PHASES phases with
 * barriers; the workers record their phase's script between the barriers,
 * and main marks step p+1 after phase p (none after the last phase) and
 * flushes, so every thread's ranges span several chunks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_reader.h"
#include "stagetrace.h"
#include "traces.h"

#define PHASES 4 /* phases 0..2 end with step marks 1..3; phase 3 has none */
#define N_THREADS 4
#define MAX_OPS 512
#define MAX_RECORDS 4096

/* ---- the script ---- */

enum { S_FORWARD, S_BACKWARD, S_QUEUE_WAIT, S_QUEUE_PUT, S_STREAM_SYNC, S_ALLREDUCE, S_D2H,
       S_STEP, S_SETUP, N_STAGES };
static const struct {
    const char *name;
    st_kind kind;
} stage_defs[N_STAGES] = {
    {"forward", ST_WORK},        {"backward", ST_WORK},      {"queue_wait", ST_WAIT_INPUT},
    {"queue_put", ST_WAIT_OUTPUT}, {"stream_sync", ST_SYNC}, {"allreduce", ST_COMM},
    {"d2h", ST_COPY},            {"step", ST_WORK},          {"setup", ST_WORK},
};

enum { C_QUEUE_DEPTH, C_LOSS, C_TEMP_DELTA, N_COUNTERS };
static const struct {
    const char *name, *unit;
} counter_defs[N_COUNTERS] = {{"queue_depth", "items"}, {"loss", "nats"}, {"temp_delta", "C"}};

static const struct {
    const char *name, *role;
    int device;
} thread_defs[N_THREADS] = {
    {"main", "main", -1}, {"target0", "target", 0}, {"target1", "target", 1}, {"drafter0", "drafter", 2},
};

static const uint64_t step_tokens[PHASES] = {0, 4096, 8192, 12288}; /* tokens of steps 0..3 */

enum { OP_BEGIN, OP_END, OP_COUNTER, OP_MARK };
typedef struct op {
    int type, id;
    double value;
} op;

/* The ops of worker `thread` (1..3) in `phase`. */
static int worker_script(int thread, int phase, op *ops)
{
    int n = 0;
#define OPB(s) (ops[n++] = (op){OP_BEGIN, (s), 0})
#define OPE(s) (ops[n++] = (op){OP_END, (s), 0})
#define OPC(c, v) (ops[n++] = (op){OP_COUNTER, (c), (v)})
    if (thread == 1 || thread == 2) { /* targets */
        int k = thread - 1;
        for (int i = 0; i < 3 + k + phase; i++) {
            OPB(S_FORWARD);
            OPB(S_STREAM_SYNC);
            OPE(S_STREAM_SYNC);
            OPB(S_D2H);
            if (k == 1) { /* one level deeper on target1 */
                OPB(S_STREAM_SYNC);
                OPE(S_STREAM_SYNC);
            }
            OPE(S_D2H);
            OPE(S_FORWARD);
            OPB(S_QUEUE_PUT);
            OPE(S_QUEUE_PUT);
            OPC(C_QUEUE_DEPTH, (double)(i + k + phase));
        }
    } else { /* drafter */
        ops[n++] = (op){OP_MARK, 0, 0};
        for (int i = 0; i < 2 + phase; i++) {
            OPB(S_QUEUE_WAIT);
            OPE(S_QUEUE_WAIT);
            OPC(C_LOSS, 2.5 - 0.125 * (phase * 4 + i)); /* fractions, and 2.0 once */
            OPB(S_FORWARD);
            OPE(S_FORWARD);
            OPB(S_BACKWARD);
            OPB(S_ALLREDUCE);
            OPE(S_ALLREDUCE);
            OPE(S_BACKWARD);
            OPC(C_TEMP_DELTA, i % 2 == 0 ? -(double)(3 + i) : -0.25 - i);
        }
    }
#undef OPB
#undef OPE
#undef OPC
    assert_true(n <= MAX_OPS);
    return n;
}

/* What the script must produce, per thread in recorded (end) order. phase
 * -1 is main's setup range before step 0. */
typedef struct exp_range {
    uint32_t stage, depth;
    int phase;
} exp_range;
typedef struct exp_sample {
    uint32_t counter;
    double value;
    int phase;
} exp_sample;
typedef struct expected {
    exp_range ranges[N_THREADS][MAX_RECORDS];
    int n_ranges[N_THREADS];
    exp_sample samples[N_THREADS][MAX_RECORDS];
    int n_samples[N_THREADS];
    int marks[N_THREADS];
} expected;

static void build_expected(expected *e)
{
    memset(e, 0, sizeof *e);
    e->ranges[0][e->n_ranges[0]++] = (exp_range){S_SETUP, 0, -1};
    for (int p = 0; p < PHASES; p++) {
        e->ranges[0][e->n_ranges[0]++] = (exp_range){S_QUEUE_WAIT, 1, p};
        e->ranges[0][e->n_ranges[0]++] = (exp_range){S_STEP, 0, p};
        if (p + 1 < PHASES) e->marks[0]++;
    }
    for (int t = 1; t < N_THREADS; t++) {
        for (int p = 0; p < PHASES; p++) {
            op ops[MAX_OPS];
            int n = worker_script(t, p, ops);
            uint32_t stack[64], depth = 0;
            for (int i = 0; i < n; i++) {
                switch (ops[i].type) {
                case OP_BEGIN: stack[depth++] = (uint32_t)ops[i].id; break;
                case OP_END:
                    assert_int_equal(stack[depth - 1], ops[i].id);
                    depth--;
                    e->ranges[t][e->n_ranges[t]++] = (exp_range){(uint32_t)ops[i].id, depth, p};
                    break;
                case OP_COUNTER:
                    e->samples[t][e->n_samples[t]++] = (exp_sample){(uint32_t)ops[i].id, ops[i].value, p};
                    break;
                case OP_MARK: e->marks[t]++; break;
                }
            }
            assert_int_equal(depth, 0);
        }
    }
}

/* ---- recording ---- */

typedef struct run {
    st_trace *trace;
    int stage[N_STAGES], counter[N_COUNTERS];
    pthread_barrier_t phase_start, phase_end;
    sem_t registered;
} run;

typedef struct worker_arg {
    run *run;
    int thread, id; /* id: what registration returned (checked on main) */
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    run *r = a->run;
    a->id = st_thread_register(r->trace, thread_defs[a->thread].name, thread_defs[a->thread].role,
                               thread_defs[a->thread].device, 0);
    sem_post(&r->registered);
    for (int phase = 0; phase < PHASES; phase++) {
        op ops[MAX_OPS];
        int n = worker_script(a->thread, phase, ops);
        pthread_barrier_wait(&r->phase_start);
        for (int i = 0; i < n; i++) {
            switch (ops[i].type) {
            case OP_BEGIN: st_begin((st_stage)r->stage[ops[i].id]); break;
            case OP_END: st_end((st_stage)r->stage[ops[i].id]); break;
            case OP_COUNTER: st_counter_set((st_counter)r->counter[ops[i].id], ops[i].value); break;
            case OP_MARK: st_mark("drafter_phase"); break;
            }
        }
        pthread_barrier_wait(&r->phase_end);
    }
    st_thread_unregister();
    return NULL;
}

static void record_run(const char *path)
{
    static run r;
    memset(&r, 0, sizeof r);
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_reader";
    opt.nvtx = 0;
    opt.clock = 1; /* CLOCK_MONOTONIC: one time line across cores */
    int rc = st_open(&r.trace, &opt);
    assert_int_equal(rc, ST_OK);
    for (int s = 0; s < N_STAGES; s++) {
        r.stage[s] = st_stage_register(r.trace, stage_defs[s].name, stage_defs[s].kind);
        assert_int_equal(r.stage[s], s);
    }
    for (int c = 0; c < N_COUNTERS; c++) {
        r.counter[c] = st_counter_register(r.trace, counter_defs[c].name, counter_defs[c].unit);
        assert_int_equal(r.counter[c], c);
    }
    assert_int_equal(st_thread_register(r.trace, "main", "main", -1, 0), 0);
    st_begin((st_stage)r.stage[S_SETUP]);
    st_end((st_stage)r.stage[S_SETUP]);
    st_step(0, step_tokens[0]);

    pthread_barrier_init(&r.phase_start, NULL, N_THREADS);
    pthread_barrier_init(&r.phase_end, NULL, N_THREADS);
    sem_init(&r.registered, 0, 0);
    pthread_t threads[N_THREADS];
    worker_arg args[N_THREADS];
    for (int t = 1; t < N_THREADS; t++) { /* one at a time: ids follow the order */
        args[t] = (worker_arg){&r, t, -1};
        assert_int_equal(pthread_create(&threads[t], NULL, worker, &args[t]), 0);
        sem_wait(&r.registered);
        assert_int_equal(args[t].id, t);
    }
    for (int phase = 0; phase < PHASES; phase++) {
        st_begin((st_stage)r.stage[S_STEP]);
        st_begin((st_stage)r.stage[S_QUEUE_WAIT]);
        pthread_barrier_wait(&r.phase_start);
        pthread_barrier_wait(&r.phase_end);
        st_end((st_stage)r.stage[S_QUEUE_WAIT]);
        st_end((st_stage)r.stage[S_STEP]);
        if (phase + 1 < PHASES) {
            st_step((uint64_t)phase + 1, step_tokens[phase + 1]);
            st_mark("phase_done");
        }
        assert_int_equal(st_flush(r.trace), ST_OK); /* ends every thread's chunk */
    }
    for (int t = 1; t < N_THREADS; t++) pthread_join(threads[t], NULL);
    assert_int_equal(st_close(r.trace), ST_OK);
    pthread_barrier_destroy(&r.phase_start);
    pthread_barrier_destroy(&r.phase_end);
    sem_destroy(&r.registered);
}

/* ---- shared fixture: one recorded run, read by every test ---- */

typedef struct fixture {
    char path[512];
    expected exp;
    st_range ranges[MAX_RECORDS * N_THREADS]; /* full scan through the reader */
    int n_ranges;
    int range_phase[MAX_RECORDS * N_THREADS];
    st_sample_row samples[MAX_RECORDS * N_THREADS];
    int n_samples;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    tmp_path(f->path, sizeof f->path, "test_reader.sqlite");
    build_expected(&f->exp);
    record_run(f->path);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->path);
    free(f);
    return 0;
}

/* ---- (a) through the reader API ---- */

static void test_meta_and_tables(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->path);
    assert_string_equal(st_reader_meta(r, "status"), "complete");
    assert_string_equal(st_reader_meta(r, "schema_version"), "1");
    assert_string_equal(st_reader_meta(r, "dropped_events"), "0");
    assert_string_equal(st_reader_meta(r, "program"), "test_reader");
    assert_string_equal(st_reader_meta(r, "clock"), "monotonic");
    assert_string_equal(st_reader_meta(r, "rank"), "0");
    assert_string_equal(st_reader_meta(r, "world_size"), "1");
    assert_non_null(st_reader_meta(r, "end_ns"));
    assert_null(st_reader_meta(r, "unmatched_ends")); /* no program errors counted */
    assert_null(st_reader_meta(r, "no such key"));

    assert_int_equal(st_reader_n_threads(r), N_THREADS);
    for (uint32_t i = 0; i < N_THREADS; i++) {
        const st_thread_info *t = st_reader_thread(r, i);
        assert_non_null(t);
        assert_int_equal(t->id, i);
        assert_ptr_equal(st_reader_thread_by_id(r, i), t);
        assert_string_equal(t->name, thread_defs[i].name);
        assert_string_equal(t->role, thread_defs[i].role);
        assert_int_equal(t->device, thread_defs[i].device);
        assert_int_equal(t->rank, 0);
        assert_int_equal(t->dropped, 0);
        assert_true(t->os_tid > 0);
        for (uint32_t j = 0; j < i; j++) assert_true(st_reader_thread(r, j)->os_tid != t->os_tid);
    }
    assert_null(st_reader_thread(r, N_THREADS));
    assert_null(st_reader_thread_by_id(r, N_THREADS));

    assert_int_equal(st_reader_n_stages(r), N_STAGES);
    for (uint32_t s = 0; s < N_STAGES; s++) {
        const st_stage_info *info = st_reader_stage(r, s);
        assert_int_equal(info->id, s);
        assert_string_equal(info->name, stage_defs[s].name);
        assert_int_equal(info->kind, stage_defs[s].kind);
    }
    assert_null(st_reader_stage(r, N_STAGES));

    assert_int_equal(st_reader_n_counters(r), N_COUNTERS);
    for (uint32_t c = 0; c < N_COUNTERS; c++) {
        const st_counter_info *info = st_reader_counter(r, c);
        assert_int_equal(info->id, c);
        assert_string_equal(info->name, counter_defs[c].name);
        assert_string_equal(info->unit, counter_defs[c].unit);
    }

    assert_int_equal(st_reader_n_steps(r), PHASES);
    for (uint32_t i = 0; i < PHASES; i++) {
        const st_step_info *s = st_reader_step(r, i);
        assert_int_equal(s->step, i);
        assert_int_equal(s->tokens, step_tokens[i]);
        if (i) assert_true(s->ts_ns > st_reader_step(r, i - 1)->ts_ns);
    }
    assert_null(st_reader_step(r, PHASES));

    /* Marks have no reader accessor: plain SQL over the same connection. */
    sqlite3 *db = st_reader_db(r);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT m.thread, s.value, m.ts_ns FROM marks m "
                                        "JOIN strings s ON s.id = m.string ORDER BY m.thread, m.ts_ns",
                                        -1, &st, NULL),
                     SQLITE_OK);
    int n_marks[N_THREADS] = {0};
    while (sqlite3_step(st) == SQLITE_ROW) {
        int t = sqlite3_column_int(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        int64_t ts = sqlite3_column_int64(st, 2);
        assert_true(t == 0 || t == 3);
        if (t == 0) { /* after the mark of step n+1, before the next phase */
            assert_string_equal(name, "phase_done");
            assert_true(ts >= st_reader_step(r, (uint32_t)n_marks[0] + 1)->ts_ns);
        } else {
            assert_string_equal(name, "drafter_phase");
            assert_true(ts >= st_reader_step(r, (uint32_t)n_marks[3])->ts_ns); /* phase start */
        }
        n_marks[t]++;
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    for (int t = 0; t < N_THREADS; t++) assert_int_equal(n_marks[t], f->exp.marks[t]);
    st_reader_close(r);
}

/* Reads every range and sample once into the fixture, checking them
 * against the script; later tests compare other paths with these. */
static void test_ranges_match_script(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->path);
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    int n = 0, rc;
    st_range range;
    while ((rc = st_range_iter_next(it, &range)) == 1) {
        assert_true(n < MAX_RECORDS * N_THREADS);
        f->ranges[n++] = range;
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(it);
    f->n_ranges = n;

    int total = 0;
    for (int t = 0; t < N_THREADS; t++) total += f->exp.n_ranges[t];
    assert_int_equal(n, total);

    /* Threads one after another by id, each in the scripted order. */
    int i = 0;
    for (uint32_t t = 0; t < N_THREADS; t++) {
        for (int k = 0; k < f->exp.n_ranges[t]; k++, i++) {
            const exp_range *e = &f->exp.ranges[t][k];
            assert_int_equal(f->ranges[i].thread, t);
            assert_int_equal(f->ranges[i].stage, e->stage);
            assert_int_equal(f->ranges[i].depth, e->depth);
            assert_true(f->ranges[i].dur_ns >= 0);
            f->range_phase[i] = e->phase;
            /* Between the step marks that bound its phase. */
            int64_t start = f->ranges[i].start_ns, end = start + f->ranges[i].dur_ns;
            if (e->phase >= 0) assert_true(start >= st_reader_step(r, (uint32_t)e->phase)->ts_ns);
            if (e->phase + 1 < PHASES) assert_true(end <= st_reader_step(r, (uint32_t)e->phase + 1)->ts_ns);
        }
    }

    /* Per thread: ranges nest properly. Listed in end order, a later range
     * either starts after an earlier one ends, or contains it at a smaller
     * depth; and each range's parent is the next range one level up. */
    for (int a = 0; a < n; a++) {
        const st_range *x = &f->ranges[a];
        int64_t x_end = x->start_ns + x->dur_ns;
        int parent_seen = x->depth == 0;
        for (int b = a + 1; b < n && f->ranges[b].thread == x->thread; b++) {
            const st_range *y = &f->ranges[b];
            int64_t y_end = y->start_ns + y->dur_ns;
            assert_true(y_end >= x_end);
            int disjoint = x_end <= y->start_ns;
            int contains = y->start_ns <= x->start_ns && y->depth < x->depth;
            assert_true(disjoint || contains);
            if (!parent_seen && y->depth + 1 == x->depth) {
                assert_true(contains); /* the first range one level up is the parent */
                parent_seen = 1;
            }
        }
        assert_true(parent_seen);
    }
    st_reader_close(r);
}

static void test_samples_match_script(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->path);
    st_sample_iter *it;
    assert_int_equal(st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    int n = 0, rc;
    st_sample_row s;
    while ((rc = st_sample_iter_next(it, &s)) == 1) {
        assert_true(n < MAX_RECORDS * N_THREADS);
        f->samples[n++] = s;
    }
    assert_int_equal(rc, 0);
    st_sample_iter_close(it);
    f->n_samples = n;

    int i = 0, negatives = 0, fractions = 0, integers = 0;
    for (uint32_t t = 0; t < N_THREADS; t++) {
        for (int k = 0; k < f->exp.n_samples[t]; k++, i++) {
            const exp_sample *e = &f->exp.samples[t][k];
            assert_true(i < n);
            assert_int_equal(f->samples[i].thread, t);
            assert_int_equal(f->samples[i].counter, e->counter);
            assert_true(f->samples[i].value == e->value); /* bit-exact round trip */
            if (k) assert_true(f->samples[i].ts_ns >= f->samples[i - 1].ts_ns);
            if (e->phase >= 0) assert_true(f->samples[i].ts_ns >= st_reader_step(r, (uint32_t)e->phase)->ts_ns);
            if (e->phase + 1 < PHASES)
                assert_true(f->samples[i].ts_ns <= st_reader_step(r, (uint32_t)e->phase + 1)->ts_ns);
            negatives += e->value < 0;
            fractions += e->value != floor(e->value);
            integers += e->value == floor(e->value);
        }
    }
    assert_int_equal(n, i);
    assert_true(negatives > 0 && fractions > 0 && integers > 0); /* the script covers all three */

    /* A time window: exactly the samples with t0 <= ts < t1. */
    int64_t t0 = st_reader_step(r, 1)->ts_ns, t1 = st_reader_step(r, 2)->ts_ns;
    assert_int_equal(st_sample_iter_open(&it, r, -1, t0, t1), ST_OK);
    int j = 0;
    for (int k = 0; k < n; k++) {
        if (f->samples[k].ts_ns < t0 || f->samples[k].ts_ns >= t1) continue;
        assert_int_equal(st_sample_iter_next(it, &s), 1);
        assert_int_equal(s.thread, f->samples[k].thread);
        assert_int_equal(s.counter, f->samples[k].counter);
        assert_int_equal(s.ts_ns, f->samples[k].ts_ns);
        assert_true(s.value == f->samples[k].value);
        j++;
    }
    assert_int_equal(st_sample_iter_next(it, &s), 0);
    st_sample_iter_close(it);
    int in_phase1 = 0;
    for (int t = 0; t < N_THREADS; t++)
        for (int k = 0; k < f->exp.n_samples[t]; k++) in_phase1 += f->exp.samples[t][k].phase == 1;
    assert_int_equal(j, in_phase1);
    st_reader_close(r);
}

static void assert_range_equal(const st_range *a, const st_range *b)
{
    assert_int_equal(a->thread, b->thread);
    assert_int_equal(a->stage, b->stage);
    assert_int_equal(a->depth, b->depth);
    assert_int_equal(a->start_ns, b->start_ns);
    assert_int_equal(a->dur_ns, b->dur_ns);
}

static int overlaps(const st_range *x, int64_t t0, int64_t t1)
{
    int64_t end = x->start_ns + x->dur_ns;
    return x->start_ns < t1 && (end > t0 || (end == t0 && x->dur_ns == 0));
}

/* Checks the iterator over [t0, t1) (and thread) against the full scan. */
static int check_window(const fixture *f, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, thread, t0, t1), ST_OK);
    int n = 0;
    st_range got;
    for (int k = 0; k < f->n_ranges; k++) {
        const st_range *x = &f->ranges[k];
        if ((thread >= 0 && x->thread != thread) || !overlaps(x, t0, t1)) continue;
        assert_int_equal(st_range_iter_next(it, &got), 1);
        assert_range_equal(&got, x);
        n++;
    }
    assert_int_equal(st_range_iter_next(it, &got), 0);
    st_range_iter_close(it);
    return n;
}

static void test_time_windows(void **state)
{
    fixture *f = *state;
    assert_true(f->n_ranges > 0);
    st_reader *r = open_reader(f->path);
    /* Several chunks per thread, so windows can skip some. */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(st_reader_db(r), "SELECT count(*) FROM range_chunks WHERE thread = 1",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_int(st, 0) >= PHASES);
    sqlite3_finalize(st);

    /* Between the marks of steps 1 and 2: exactly phase 1's ranges. */
    int64_t m1 = st_reader_step(r, 1)->ts_ns, m2 = st_reader_step(r, 2)->ts_ns;
    int in_phase1 = 0;
    for (int k = 0; k < f->n_ranges; k++) in_phase1 += f->range_phase[k] == 1;
    assert_int_equal(check_window(f, r, -1, m1, m2), in_phase1);
    for (int t = 0; t < N_THREADS; t++) {
        int expect = 0;
        for (int k = 0; k < f->n_ranges; k++) expect += f->range_phase[k] == 1 && f->ranges[k].thread == (uint32_t)t;
        assert_int_equal(check_window(f, r, t, m1, m2), expect);
    }

    /* Windows that cut ranges: from the middle of a range to the middle of
     * a later one (so the first and the last are partly inside). */
    int windows = 0;
    for (int k = 0; k + 7 < f->n_ranges; k += 7) {
        const st_range *a = &f->ranges[k], *b = &f->ranges[k + 7];
        int64_t t0 = a->start_ns + a->dur_ns / 2, t1 = b->start_ns + b->dur_ns / 2;
        if (t1 <= t0) continue;
        int n = check_window(f, r, -1, t0, t1);
        assert_true(n >= 1); /* at least range k */
        windows++;
    }
    assert_true(windows > 10);
    /* Edges: a range's exact [start, end) holds it; [end, ...) does not,
     * unless it is empty; nothing is before the first or after the last. */
    const st_range *x = &f->ranges[f->n_ranges / 2];
    int64_t x_end = x->start_ns + x->dur_ns;
    assert_true(check_window(f, r, x->thread, x->start_ns, x->dur_ns ? x_end : x_end + 1) >= 1);
    check_window(f, r, x->thread, x_end, x_end + 1);
    assert_int_equal(check_window(f, r, -1, INT64_MIN, f->ranges[0].start_ns - 1000000000LL), 0);
    assert_int_equal(check_window(f, r, -1, INT64_MIN, INT64_MAX), f->n_ranges);
    assert_int_equal(check_window(f, r, 7, INT64_MIN, INT64_MAX), 0); /* no such thread */
    st_reader_close(r);
}

static void test_events(void **state)
{
    fixture *f = *state;
    st_reader *r = open_reader(f->path);
    for (uint32_t t = 0; t < N_THREADS; t++) {
        st_event_iter *it;
        assert_int_equal(st_event_iter_open(&it, r, t), ST_OK);
        st_event ev;
        int rc, begins = 0, ends = 0, depth = 0;
        int64_t prev = INT64_MIN;
        uint32_t stack[64];
        while ((rc = st_event_iter_next(it, &ev)) == 1) {
            assert_true(ev.ts_ns >= prev);
            prev = ev.ts_ns;
            if (ev.is_end) {
                assert_true(depth > 0);
                depth--;
                assert_int_equal(ev.depth, depth);
                assert_int_equal(ev.stage, stack[depth]);
                assert_true(ev.start_ns <= ev.ts_ns);
                ends++;
            } else {
                assert_int_equal(ev.depth, depth);
                assert_true(depth < 64);
                stack[depth++] = ev.stage;
                begins++;
            }
        }
        assert_int_equal(rc, 0);
        assert_int_equal(depth, 0);
        assert_int_equal(begins, f->exp.n_ranges[t]);
        assert_int_equal(ends, f->exp.n_ranges[t]);
        st_event_iter_close(it);
    }
    st_reader_close(r);
}

/* ---- (b) through the virtual tables ---- */

static void test_sql_ranges(void **state)
{
    fixture *f = *state;
    assert_true(f->n_ranges > 0);
    st_reader *r = open_reader(f->path);
    sqlite3 *db = st_reader_db(r); /* the read-only, defensive connection */
    assert_int_equal(st_sql_register(db), ST_OK);

    /* Row by row, in the reader's order. */
    sqlite3_stmt *st = prepare(db, "SELECT thread, stage, start_ns, dur_ns, end_ns, depth, step FROM ranges");
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_true(n < f->n_ranges);
        const st_range *x = &f->ranges[n];
        assert_int_equal(sqlite3_column_int64(st, 0), x->thread);
        assert_int_equal(sqlite3_column_int64(st, 1), x->stage);
        assert_int_equal(sqlite3_column_int64(st, 2), x->start_ns);
        assert_int_equal(sqlite3_column_int64(st, 3), x->dur_ns);
        assert_int_equal(sqlite3_column_int64(st, 4), x->start_ns + x->dur_ns);
        assert_int_equal(sqlite3_column_int64(st, 5), x->depth);
        /* Phase p lies between the marks of steps p and p+1: step p+1. */
        int phase = f->range_phase[n];
        if (phase + 1 < PHASES) {
            assert_int_equal(sqlite3_column_type(st, 6), SQLITE_INTEGER);
            assert_int_equal(sqlite3_column_int64(st, 6), phase + 1);
        } else {
            assert_int_equal(sqlite3_column_type(st, 6), SQLITE_NULL);
        }
        n++;
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    assert_int_equal(n, f->n_ranges);

    /* Aggregates equal the reader's. */
    int64_t sum_dur = 0, min_start = INT64_MAX, max_end = INT64_MIN;
    for (int k = 0; k < f->n_ranges; k++) {
        sum_dur += f->ranges[k].dur_ns;
        if (f->ranges[k].start_ns < min_start) min_start = f->ranges[k].start_ns;
        if (f->ranges[k].start_ns + f->ranges[k].dur_ns > max_end) max_end = f->ranges[k].start_ns + f->ranges[k].dur_ns;
    }
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges"), f->n_ranges);
    assert_int_equal(sql_int(db, "SELECT sum(dur_ns) FROM ranges"), sum_dur);
    assert_int_equal(sql_int(db, "SELECT min(start_ns) FROM ranges"), min_start);
    assert_int_equal(sql_int(db, "SELECT max(end_ns) FROM ranges"), max_end);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE dur_ns < 0 OR end_ns - start_ns != dur_ns"), 0);

    /* Per stage through ranges_v: names, kinds, counts, total durations. */
    int64_t count[N_STAGES] = {0}, dur[N_STAGES] = {0};
    for (int k = 0; k < f->n_ranges; k++) {
        count[f->ranges[k].stage]++;
        dur[f->ranges[k].stage] += f->ranges[k].dur_ns;
    }
    st = prepare(db, "SELECT stage, stage_name, kind, count(*), sum(dur_ns) FROM ranges_v "
                     "GROUP BY stage_name ORDER BY stage");
    int groups = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int s = sqlite3_column_int(st, 0);
        assert_true(s >= 0 && s < N_STAGES);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), stage_defs[s].name);
        assert_string_equal((const char *)sqlite3_column_text(st, 2), st_kind_name(stage_defs[s].kind));
        assert_int_equal(sqlite3_column_int64(st, 3), count[s]);
        assert_int_equal(sqlite3_column_int64(st, 4), dur[s]);
        groups++;
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    assert_int_equal(groups, N_STAGES); /* every stage is used by the script */

    /* Per thread: names and roles joined in. */
    st = prepare(db, "SELECT thread, thread_name, role, count(*) FROM ranges_v GROUP BY thread ORDER BY thread");
    for (int t = 0; t < N_THREADS; t++) {
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(st, 0), t);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), thread_defs[t].name);
        assert_string_equal((const char *)sqlite3_column_text(st, 2), thread_defs[t].role);
        assert_int_equal(sqlite3_column_int(st, 3), f->exp.n_ranges[t]);
    }
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);

    /* Steps: ranges per step, and main's setup range in step 0. */
    int per_phase[PHASES + 1] = {0};
    for (int k = 0; k < f->n_ranges; k++) per_phase[f->range_phase[k] + 1]++;
    for (int s = 0; s < PHASES; s++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM ranges WHERE step = %d", s);
        assert_int_equal(sql_int(db, sql), per_phase[s]);
    }
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges WHERE step IS NULL"), per_phase[PHASES]);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM ranges_v WHERE step = 0 AND stage_name = 'setup' "
                                 "AND thread_name = 'main'"),
                     1);

    /* A time window in SQL equals the C filter over the reader's rows. */
    int64_t m1 = st_reader_step(r, 1)->ts_ns, m2 = st_reader_step(r, 2)->ts_ns;
    int64_t t0 = m1 + (m2 - m1) / 3, t1 = m1 + 2 * (m2 - m1) / 3;
    int expect = 0;
    for (int k = 0; k < f->n_ranges; k++) {
        const st_range *x = &f->ranges[k];
        expect += x->start_ns < t1 && x->start_ns + x->dur_ns > t0;
    }
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM ranges_v WHERE start_ns < %lld AND end_ns > %lld",
             (long long)t1, (long long)t0);
    assert_int_equal(sql_int(db, sql), expect);
    st_reader_close(r);
}

static void test_sql_counters(void **state)
{
    fixture *f = *state;
    assert_true(f->n_samples > 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(st_sql_register(db), ST_OK);

    sqlite3_stmt *st = prepare(db, "SELECT thread, counter, ts_ns, value, typeof(value) FROM counters");
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_true(n < f->n_samples);
        const st_sample_row *s = &f->samples[n];
        assert_int_equal(sqlite3_column_int64(st, 0), s->thread);
        assert_int_equal(sqlite3_column_int64(st, 1), s->counter);
        assert_int_equal(sqlite3_column_int64(st, 2), s->ts_ns);
        assert_true(sqlite3_column_double(st, 3) == s->value);
        /* Integers as stored: integer values come back as INTEGER. */
        assert_string_equal((const char *)sqlite3_column_text(st, 4),
                            s->value == floor(s->value) ? "integer" : "real");
        n++;
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    assert_int_equal(n, f->n_samples);

    st = prepare(db, "SELECT counter, counter_name, unit, count(*), sum(value), min(value), max(value) "
                     "FROM counters_v GROUP BY counter ORDER BY counter");
    for (int c = 0; c < N_COUNTERS; c++) {
        int64_t cnt = 0;
        double sum = 0, mn = INFINITY, mx = -INFINITY;
        for (int k = 0; k < f->n_samples; k++) {
            if (f->samples[k].counter != (uint32_t)c) continue;
            cnt++;
            sum += f->samples[k].value;
            mn = fmin(mn, f->samples[k].value);
            mx = fmax(mx, f->samples[k].value);
        }
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(st, 0), c);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), counter_defs[c].name);
        assert_string_equal((const char *)sqlite3_column_text(st, 2), counter_defs[c].unit);
        assert_int_equal(sqlite3_column_int64(st, 3), cnt);
        assert_true(fabs(sqlite3_column_double(st, 4) - sum) <= 1e-9 * (1 + fabs(sum)));
        assert_true(sqlite3_column_double(st, 5) == mn);
        assert_true(sqlite3_column_double(st, 6) == mx);
    }
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);

    /* Counter samples per thread: only the workers that set them. */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM counters_v WHERE thread_name = 'drafter0'"),
                     f->exp.n_samples[3]);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM counters WHERE thread = 0"), 0);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM counters WHERE value < 0"),
                     sql_int(db, "SELECT count(*) FROM counters_v WHERE counter_name = 'temp_delta'"));
    assert_int_equal(sql_int(db, "SELECT count(*) FROM gpu"), 0); /* no GPU activity recorded */
    sqlite3_close(db);
}

/* ---- (c) validation at open: hostile and malformed traces ---- */

/* A copy of the recorded trace, changed by sql (a writable handle; the
 * reader never writes). */
static void hostile_copy(const char *from, const char *to, const char *sql)
{
    remove_trace_files(to);
    size_t n;
    char *data = read_file(from, &n);
    FILE *out = fopen(to, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(data, 1, n, out), n);
    assert_int_equal(fclose(out), 0);
    free(data);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(to, &db), SQLITE_OK);
    exec_sql(db, sql);
    sqlite3_close(db);
}

/* The table without its declared types and constraints (rows kept in
 * order), so that values the writer's schema would refuse can be stored. */
#define LOOSEN(t) "CREATE TABLE loose AS SELECT * FROM " t " ORDER BY rowid; DROP TABLE " t "; " \
                  "ALTER TABLE loose RENAME TO " t "; "

/* A flow_chunks table as the writer makes it, with one valid chunk of thread 0. */
#define FLOWS "CREATE TABLE flow_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, t0_ns INTEGER NOT NULL, " \
              "t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL); " \
              "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, x'46050007'); "
#define LOOSE_FLOWS "CREATE TABLE flow_chunks(id, thread, t0_ns, t1_ns, n_records, data); " \
                    "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, x'46050007'); "

static const struct {
    const char *sql;
    const char *arg_sql[3]; /* values for the message's %lld, read from the changed copy */
    const char *message;
    int at_read;            /* opens; the chunk pass (st_reader_chunk_totals) refuses it */
} damages[] = {
    {"UPDATE meta SET value = CAST('1' AS BLOB) WHERE key = 'schema_version'",
     {"SELECT count(*) FROM meta WHERE rowid <= (SELECT rowid FROM meta WHERE key = 'schema_version')"},
     "trace table 'meta': row %lld (key 'schema_version'): column 'value' is a blob, not text", 0},
    {"UPDATE meta SET value = 'abc' WHERE key = 'start_ns'",
     {"SELECT count(*) FROM meta WHERE rowid <= (SELECT rowid FROM meta WHERE key = 'start_ns')"},
     "trace table 'meta': row %lld (key 'start_ns'): value 'abc' is not an integer", 0},
    {LOOSEN("meta") "INSERT INTO meta VALUES ('program', 'again')",
     {"SELECT count(*) FROM meta", "SELECT count(*) FROM meta WHERE rowid <= (SELECT min(rowid) FROM meta WHERE key = 'program')"},
     "trace table 'meta': row %lld: key 'program' is also in row %lld (keys must be unique)", 0},
    {"UPDATE meta SET value = printf('%.*c', 70000, 'a') WHERE key = 'argv'",
     {"SELECT count(*) FROM meta WHERE rowid <= (SELECT rowid FROM meta WHERE key = 'argv')"},
     "trace table 'meta': row %lld (key 'argv'): column 'value' is 70000 bytes long, more than 65536", 0},
    {LOOSEN("threads") "UPDATE threads SET name = NULL WHERE id = 1", {NULL},
     "trace table 'threads': row 2 (id 1): column 'name' is null, not text", 0},
    {LOOSEN("threads") "INSERT INTO threads SELECT * FROM threads WHERE id = 2", {NULL},
     "trace table 'threads': row 5: id 2 is also in row 3 (ids must be unique)", 0},
    {"UPDATE threads SET device = 1.5 WHERE id = 3", {NULL},
     "trace table 'threads': row 4 (id 3): column 'device' is a real, not an integer", 0},
    {LOOSEN("stages") "INSERT INTO stages VALUES (3, 'again', 'work')", {NULL},
     "trace table 'stages': row 10: id 3 is also in row 4 (ids must be unique)", 0},
    {"UPDATE stages SET name = printf('%.*c', 300, 'x') WHERE id = 0", {NULL},
     "trace table 'stages': row 1 (id 0): column 'name' is 300 bytes long, more than 256", 0},
    {LOOSEN("counter_names") "INSERT INTO counter_names VALUES (0, 'again', '')", {NULL},
     "trace table 'counter_names': row 4: id 0 is also in row 1 (ids must be unique)", 0},
    {LOOSEN("steps") "INSERT INTO steps SELECT * FROM steps WHERE step = 1", {NULL},
     "trace table 'steps': row 5: step 1 is also in row 2 (steps must be unique)", 0},
    {"UPDATE steps SET ts_ns = 'abc' WHERE step = 2", {NULL},
     "trace table 'steps': row 3 (step 2): column 'ts_ns' is text, not an integer", 0},
    {LOOSEN("range_chunks") "UPDATE range_chunks SET thread = NULL WHERE id = (SELECT min(id) FROM range_chunks)",
     {"SELECT min(id) FROM range_chunks"},
     "trace table 'range_chunks': row 1 (id %lld): column 'thread' is null, not an integer", 0},
    {LOOSEN("range_chunks") "INSERT INTO range_chunks SELECT * FROM range_chunks WHERE id = (SELECT max(id) FROM "
     "range_chunks)",
     {"SELECT count(*) FROM range_chunks", "SELECT max(id) FROM range_chunks", "SELECT max(id) FROM range_chunks"},
     "trace table 'range_chunks': row %lld: id %lld is also in row %lld (ids must be unique)", 0},
    {"UPDATE range_chunks SET thread = 9 WHERE id = (SELECT min(id) FROM range_chunks)",
     {"SELECT min(id) FROM range_chunks"}, "trace table 'range_chunks': chunk %lld names unknown thread 9", 0},
    {"UPDATE counter_chunks SET thread = -1 WHERE id = (SELECT max(id) FROM counter_chunks)",
     {"SELECT max(id) FROM counter_chunks"}, "trace table 'counter_chunks': chunk %lld names unknown thread -1", 0},
    {"UPDATE range_chunks SET t0_ns = 'abc' WHERE id = (SELECT max(id) FROM range_chunks)",
     {"SELECT max(id) FROM range_chunks"}, "trace table 'range_chunks': chunk %lld: column 't0_ns' is text, not an integer", 1},
    {"UPDATE range_chunks SET n_ranges = 2.5 WHERE id = (SELECT min(id) FROM range_chunks)",
     {"SELECT min(id) FROM range_chunks"}, "trace table 'range_chunks': chunk %lld: column 'n_ranges' is a real, not an integer", 1},
    {"UPDATE counter_chunks SET data = 'text' WHERE id = (SELECT min(id) FROM counter_chunks)",
     {"SELECT min(id) FROM counter_chunks"}, "trace table 'counter_chunks': chunk %lld: column 'data' is text, not a blob", 1},
    {"CREATE TABLE x AS SELECT id, os_tid, role, device, rank, dropped FROM threads; DROP TABLE threads; "
     "CREATE TABLE threads(id INTEGER PRIMARY KEY, os_tid, name TEXT GENERATED ALWAYS AS (printf('%.*c', 100000000, "
     "'x')), role, device, rank, dropped); INSERT INTO threads(id, os_tid, role, device, rank, dropped) SELECT * FROM x",
     {NULL}, "trace table 'threads': column 'name' is generated, not a stored column", 0},
    {"ALTER TABLE threads RENAME TO t; CREATE VIEW threads AS SELECT * FROM t", {NULL},
     "trace table 'threads': it is a view, not a plain table", 0},
    {"CREATE TABLE x AS SELECT id, os_tid, name, role, device, rank FROM threads; DROP TABLE threads; "
     "ALTER TABLE x RENAME TO threads",
     {NULL}, "trace table 'threads': it has no column 'dropped'", 0},
    {"CREATE VIEW gpu_chunks AS SELECT 1 AS id", {NULL}, "trace table 'gpu_chunks': it is a view, not a plain table", 0},
    {"CREATE TABLE gpu_strings(id INTEGER PRIMARY KEY, value TEXT); INSERT INTO gpu_strings VALUES (1, NULL)", {NULL},
     "trace table 'gpu_strings': row 1 (id 1): column 'value' is null, not text", 0},
    {FLOWS "INSERT INTO flow_chunks VALUES (2, 9, 5, 5, 1, x'46050007')", {NULL},
     "trace table 'flow_chunks': chunk 2 names unknown thread 9", 0},
    {LOOSE_FLOWS "INSERT INTO flow_chunks VALUES (2, 0, 'abc', 5, 1, x'46050007')", {NULL},
     "trace table 'flow_chunks': row 2 (id 2): column 't0_ns' is text, not an integer", 0},
    {LOOSE_FLOWS "INSERT INTO flow_chunks VALUES (2, 0, 5, 5, 1.0, x'46050007')", {NULL},
     "trace table 'flow_chunks': row 2 (id 2): column 'n_records' is a real, not an integer", 0},
    {LOOSE_FLOWS "INSERT INTO flow_chunks VALUES (2, 0, 5, 5, 1, 'F')", {NULL},
     "trace table 'flow_chunks': row 2 (id 2): column 'data' is text, not a blob", 0},
    {LOOSE_FLOWS "INSERT INTO flow_chunks VALUES (2, NULL, 5, 5, 1, x'46050007')", {NULL},
     "trace table 'flow_chunks': row 2 (id 2): column 'thread' is null, not an integer", 0},
    {LOOSE_FLOWS "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, x'46050007')", {NULL},
     "trace table 'flow_chunks': row 2: id 1 is also in row 1 (ids must be unique)", 0},
    {"CREATE VIEW flow_chunks AS SELECT 1 AS id", {NULL}, "trace table 'flow_chunks': it is a view, not a plain table", 0},
    {"CREATE TABLE flow_chunks(id INTEGER PRIMARY KEY, thread, t0_ns, t1_ns, data)", {NULL},
     "trace table 'flow_chunks': it has no column 'n_records'", 0},
};

/* Flow chunks whose data does not decode open (the data is read only when
 * flows are read), and fail at the first read of the chunk, through the
 * reader and the SQL table alike; a valid one reads back. */
static void test_flow_chunks_hostile(void **state)
{
    fixture *f = *state;
    char path[512];
    tmp_path(path, sizeof path, "hostile-flows.sqlite");
    static const struct {
        const char *data; /* hex */
        int n;
        const char *what;
    } bad[] = {
        {"450500" "07", 1, "wrong tag"},
        {"4605" "00" "80", 1, "truncated id varint"},
        {"46ff", 1, "truncated time delta"},
        {"4605" "02" "07", 1, "unknown direction 2"},
        {"4605" "ff" "07", 1, "unknown direction 0xff"},
        {"4605" "00" "ffffffffffffffffff02", 1, "id over 64 bits"},
        {"4605" "00" "07", 2, "fewer records than n_records"},
        {"4605" "00" "07" "00", 1, "trailing byte"},
        {"46ffffffffffffffff7f" "00" "01" "01" "00" "01", 2, "time past INT64_MAX"},
        {"", 0, "empty blob"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE flow_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, t0_ns INTEGER NOT NULL, "
                 "t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL); "
                 "INSERT INTO flow_chunks VALUES (3, 1, 0, 9223372036854775807, %d, x'%s')",
                 bad[i].n, bad[i].data);
        hostile_copy(f->path, path, sql);
        st_reader *r = open_reader(path);
        assert_int_equal(st_reader_has_flows(r), 1);
        st_flow_iter *it;
        assert_int_equal(st_flow_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
        st_flow_row row;
        int rc;
        while ((rc = st_flow_iter_next(it, &row)) == 1) {
        }
        st_flow_iter_close(it);
        if (rc != ST_ECORRUPT) fail_msg("%s: %d, not ST_ECORRUPT", bad[i].what, rc);
        assert_string_equal(st_last_error(), "trace table 'flow_chunks': chunk 3 (thread 1) is corrupt or truncated");
        sqlite3 *db = st_reader_db(r);
        assert_int_equal(st_sql_register(db), ST_OK);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM flows", -1, &st, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ERROR);
        sqlite3_finalize(st);
        assert_string_equal(sqlite3_errmsg(db), "trace table 'flow_chunks': chunk 3 (thread 1) is corrupt or truncated");
        st_reader_close(r);
    }
    /* valid: out of id 7 at 5, in of id 2^64-1 at 6 */
    hostile_copy(f->path, path,
                 "CREATE TABLE flow_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, t0_ns INTEGER NOT NULL, "
                 "t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL); "
                 "INSERT INTO flow_chunks VALUES (3, 1, 5, 6, 2, x'460500070101ffffffffffffffffff01')");
    st_reader *r = open_reader(path);
    st_flow_iter *it;
    st_flow_row row;
    assert_int_equal(st_flow_iter_open(&it, r, 1, INT64_MIN, INT64_MAX), ST_OK);
    assert_int_equal(st_flow_iter_next(it, &row), 1);
    assert_true(row.thread == 1 && row.dir == ST_FLOW_OUT && row.ts_ns == 5 && row.id == 7);
    assert_int_equal(st_flow_iter_next(it, &row), 1);
    assert_true(row.thread == 1 && row.dir == ST_FLOW_IN && row.ts_ns == 6 && row.id == UINT64_MAX);
    assert_int_equal(st_flow_iter_next(it, &row), 0);
    st_flow_iter_close(it);
    assert_int_equal(st_flow_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK); /* another thread: none */
    assert_int_equal(st_flow_iter_next(it, &row), 0);
    st_flow_iter_close(it);
    st_reader_close(r);
    remove_trace_files(path);
}

static void test_validation(void **state)
{
    fixture *f = *state;
    char path[512], want[512];
    tmp_path(path, sizeof path, "hostile.sqlite");
    for (size_t i = 0; i < sizeof damages / sizeof damages[0]; i++) {
        hostile_copy(f->path, path, damages[i].sql);
        long long arg[3] = {0, 0, 0};
        sqlite3 *db;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        for (int a = 0; a < 3 && damages[i].arg_sql[a]; a++) arg[a] = sql_int(db, damages[i].arg_sql[a]);
        sqlite3_close(db);
        snprintf(want, sizeof want, damages[i].message, arg[0], arg[1], arg[2]);
        st_reader *r = NULL;
        int rc = st_reader_open(&r, path);
        if (damages[i].at_read) {
            if (rc != ST_OK) fail_msg("damage %zu: open failed: %s", i, st_last_error());
            st_chunk_totals tot;
            rc = st_reader_chunk_totals(r, &tot);
            st_reader_close(r);
        }
        if (rc != ST_ECORRUPT) fail_msg("damage %zu: %d, not ST_ECORRUPT (%s)", i, rc, st_last_error());
        if (strcmp(st_last_error(), want) != 0)
            fail_msg("damage %zu: message\n  '%s', wanted\n  '%s'", i, st_last_error(), want);
        /* A connection the caller owns (the SQL extension) gets the same. */
        if (!damages[i].at_read) {
            assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
            assert_int_equal(st_reader_open_db(&r, db), ST_ECORRUPT);
            assert_string_equal(st_last_error(), want);
            sqlite3_close(db);
        }
    }
    /* The limits themselves are allowed. */
    hostile_copy(f->path, path,
                 "UPDATE stages SET name = printf('%.*c', 256, 'x') WHERE id = 0; "
                 "UPDATE meta SET value = printf('%.*c', 65536, 'a') WHERE key = 'argv'");
    st_reader *r = open_reader(path);
    assert_int_equal(strlen(st_reader_stage(r, 0)->name), 256);
    assert_int_equal(strlen(st_reader_meta(r, "argv")), 65536);
    st_reader_close(r);
    remove_trace_files(path);
}

/* What is not a regular file is refused before SQLite opens it: a FIFO
 * would block the open, a device would be read forever. */
static void test_hostile_files(void **state)
{
    fixture *f = *state;
    char fifo[512], want[1200], side[600];
    tmp_path(fifo, sizeof fifo, "fifo.sqlite");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    st_reader *r = NULL;
    assert_int_equal(st_reader_open(&r, fifo), ST_EIO);
    assert_null(r);
    snprintf(want, sizeof want, "cannot open trace '%s': it is not a regular file (a FIFO)", fifo);
    assert_string_equal(st_last_error(), want);
    unlink(fifo);

    assert_int_equal(st_reader_open(&r, "/dev/zero"), ST_EIO);
    assert_string_equal(st_last_error(), "cannot open trace '/dev/zero': it is not a regular file (a character device)");

    /* A FIFO where SQLite looks for the trace's WAL. */
    char copy[512];
    tmp_path(copy, sizeof copy, "sidefifo.sqlite");
    hostile_copy(f->path, copy, "SELECT 1");
    snprintf(side, sizeof side, "%s-wal", copy);
    assert_int_equal(mkfifo(side, 0600), 0);
    assert_int_equal(st_reader_open(&r, copy), ST_EIO);
    snprintf(want, sizeof want, "cannot open trace '%s': its side file '%s' is not a regular file (a FIFO)", copy, side);
    assert_string_equal(st_last_error(), want);
    unlink(side);
    remove_trace_files(copy);
}

/* ---- (d) the range decoder against the event decoder ---- */

/* st_range_iter decodes ranges in its own loop (a branch-free fast path for
 * one-byte tags and deltas of one to four bytes, the general varint path
 * otherwise); st_event_iter uses st_event_next. On chunks written by the
 * encoder with deltas of every length (0 to 2^40 ns, across each varint
 * length boundary), stage ids that need two-byte tags, chunks cut at random
 * with open ranges carried in their headers, and chunk tails shorter than the
 * fast path's 8-byte load, both must give the same ranges, whole or through
 * time windows; and on corrupted chunks the same ranges before the same
 * error. */
#define DEC_STAGES 200
#define DEC_EVENTS 30000

static uint64_t dec_rng = 0x243f6a8885a308d3ull;
static uint64_t dec_next(void)
{
    dec_rng ^= dec_rng << 13;
    dec_rng ^= dec_rng >> 7;
    dec_rng ^= dec_rng << 17;
    return dec_rng;
}

/* Writes thread 0's range_chunks: random nesting and deltas. */
static void write_random_chunks(sqlite3 *db)
{
    static const int64_t deltas[] = {0, 1, 2, 100, 127, 128, 129, 5000, 16383, 16384, 16385,
                                     (1 << 21) - 1, 1 << 21, (1 << 28) - 1, 1 << 28,
                                     (int64_t)1 << 35, (int64_t)1 << 40};
    exec_sql(db, "DELETE FROM range_chunks");
    sqlite3_stmt *ins = prepare(db, "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) "
                                    "VALUES (0, ?, ?, ?, ?, ?)");
    st_event_encoder *e = calloc(1, sizeof *e);
    assert_non_null(e);
    int64_t ts = 1000;
    uint32_t n_ranges = 0, until_cut = 1;
    assert_int_equal(st_event_chunk_start(e), 0);
    for (int i = 0; i < DEC_EVENTS; i++) {
        uint64_t x = dec_next();
        ts += (x & 3) ? deltas[(x >> 8) % 12] : deltas[(x >> 8) % (sizeof deltas / sizeof deltas[0])];
        int end = e->depth > 0 && (e->depth >= 6 || ((x >> 32) & 1));
        if (end) {
            assert_int_equal(st_event_put_end(e, ts), 0);
            n_ranges++;
        } else {
            uint32_t stage = (x >> 40) % 4 == 0 ? 120 + (uint32_t)((x >> 44) % 80) : (uint32_t)((x >> 44) % 8);
            assert_int_equal(st_event_put_begin(e, stage, ts), 0);
        }
        if (--until_cut == 0 || i == DEC_EVENTS - 1) {
            sqlite3_bind_int64(ins, 1, e->t0_ns);
            sqlite3_bind_int64(ins, 2, e->t1_ns);
            sqlite3_bind_int64(ins, 3, e->n_events);
            sqlite3_bind_int64(ins, 4, n_ranges);
            sqlite3_bind_blob(ins, 5, e->buf.data, (int)e->buf.len, SQLITE_TRANSIENT);
            assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
            sqlite3_reset(ins);
            e->n_events = 0;
            n_ranges = 0;
            assert_int_equal(st_event_chunk_start(e), 0);
            until_cut = 1 + (uint32_t)(dec_next() % 300);
        }
    }
    sqlite3_finalize(ins);
    st_buf_free(&e->buf);
    free(e);
}

/* Ranges from the event iterator, with the range iterator's window rule;
 * returns the count and sets *rc to the iterator's last status. */
static size_t ranges_from_events(st_reader *r, int64_t t0, int64_t t1, st_range *out, size_t cap, int *rc)
{
    st_event_iter *it;
    assert_int_equal(st_event_iter_open(&it, r, 0), ST_OK);
    st_event ev;
    size_t n = 0;
    while ((*rc = st_event_iter_next(it, &ev)) == 1) {
        if (!ev.is_end) continue;
        if (ev.start_ns >= t1 || ev.ts_ns < t0 || (ev.ts_ns == t0 && ev.ts_ns != ev.start_ns)) continue;
        assert_true(n < cap);
        out[n++] = (st_range){0, ev.stage, ev.depth, ev.start_ns, ev.ts_ns - ev.start_ns};
    }
    st_event_iter_close(it);
    return n;
}

static int check_range_decoder(st_reader *r, int64_t t0, int64_t t1, st_range *want, st_range *got)
{
    int want_rc, got_rc;
    size_t n_want = ranges_from_events(r, t0, t1, want, DEC_EVENTS, &want_rc);
    for (int thread = -1; thread <= 0; thread++) {
        st_range_iter *it;
        assert_int_equal(st_range_iter_open(&it, r, thread, t0, t1), ST_OK);
        size_t n = 0;
        while ((got_rc = st_range_iter_next(it, &got[n])) == 1) {
            assert_true(n < n_want);
            n++;
        }
        st_range_iter_close(it);
        assert_int_equal(n, n_want);
        assert_int_equal(got_rc < 0, want_rc < 0);
        assert_int_equal(got_rc > 0, 0);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(got[i].thread, 0);
            assert_int_equal(got[i].stage, want[i].stage);
            assert_int_equal(got[i].depth, want[i].depth);
            assert_int_equal(got[i].start_ns, want[i].start_ns);
            assert_int_equal(got[i].dur_ns, want[i].dur_ns);
        }
    }
    return want_rc;
}

static void test_range_decoder_matches_events(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "decoder.sqlite");
    st_options o;
    st_options_init(&o);
    o.path = path;
    o.overwrite = 1;
    o.nvtx = 0;
    st_trace *t;
    assert_int_equal(st_open(&t, &o), ST_OK);
    for (int i = 0; i < DEC_STAGES; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d", i);
        assert_int_equal(st_stage_register(t, name, ST_WORK), i);
    }
    assert_int_equal(st_thread_register(t, "only", "only", -1, 0), 0);
    assert_int_equal(st_close(t), ST_OK);

    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "PRAGMA synchronous = OFF");
    write_random_chunks(db);
    st_range *want = malloc(DEC_EVENTS * sizeof *want), *got = malloc(DEC_EVENTS * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);

    st_reader *r = open_reader(path);
    int rc;
    size_t n_all = ranges_from_events(r, INT64_MIN, INT64_MAX, want, DEC_EVENTS, &rc);
    assert_int_equal(rc, 0);
    assert_true(n_all > DEC_EVENTS / 2 - 10);
    int64_t last = want[n_all - 1].start_ns + want[n_all - 1].dur_ns;
    check_range_decoder(r, INT64_MIN, INT64_MAX, want, got);
    for (int k = 0; k < 6; k++) {
        int64_t a = (int64_t)(dec_next() % (uint64_t)last), b = a + (int64_t)(dec_next() % (uint64_t)(last / 4 + 1));
        check_range_decoder(r, a, b, want, got);
    }
    /* a window that starts exactly at a range's end (zero-length ranges
     * there are kept, others dropped) */
    check_range_decoder(r, want[n_all / 2].start_ns + want[n_all / 2].dur_ns, INT64_MAX, want, got);
    st_reader_close(r);

    /* Corruption: a chunk cut short by 1 to 9 bytes, and single bytes
     * replaced, one chunk at a time (committed, so the reader sees it, and
     * put back from a copy after). */
    int64_t n_chunks = sql_int(db, "SELECT count(*) FROM range_chunks");
    for (int k = 0; k < 40; k++) {
        int64_t id = sql_intf(db, "SELECT id FROM range_chunks LIMIT 1 OFFSET %lld",
                              (long long)(dec_next() % (uint64_t)n_chunks));
        exec_sql(db, "DROP TABLE IF EXISTS saved; CREATE TABLE saved AS SELECT id, data FROM range_chunks");
        if (k % 2 == 0) {
            char sql[200];
            snprintf(sql, sizeof sql, "UPDATE range_chunks SET data = substr(data, 1, length(data) - %d) WHERE id = %lld",
                     1 + k / 2 % 9, (long long)id);
            exec_sql(db, sql);
        } else {
            int64_t len = sql_intf(db, "SELECT length(data) FROM range_chunks WHERE id = %lld", (long long)id);
            int64_t at = 1 + (int64_t)(dec_next() % (uint64_t)len);
            char sql[300];
            snprintf(sql, sizeof sql,
                     "UPDATE range_chunks SET data = substr(data, 1, %lld) || x'%02x' || substr(data, %lld) WHERE id = %lld",
                     (long long)at - 1, (unsigned)(dec_next() & 0xff), (long long)at + 1, (long long)id);
            exec_sql(db, sql);
        }
        r = open_reader(path);
        rc = check_range_decoder(r, INT64_MIN, INT64_MAX, want, got);
        if (k % 2 == 0) assert_true(rc < 0); /* a chunk cut short is always caught */
        st_reader_close(r);
        exec_sql(db, "UPDATE range_chunks SET data = (SELECT data FROM saved WHERE saved.id = range_chunks.id)");
    }
    sqlite3_close(db);
    free(want);
    free(got);
}

/* A GPU record's launch (st_gpu_iter) is looked up among the API calls from
 * ST_GPU_LAUNCH_LOOKBACK_NS before the iterator's window: a kernel launched
 * 1 s before it starts has its thread and stage, one launched 3 s before
 * has none (thread -1), and the whole-trace iteration finds both. */
static void test_gpu_launch_lookback(void **state)
{
    (void)state;
    tg_trace *g = trace_target();
    tg_gpu_string(g, "k");
    int64_t B = BASE_NS, S = 10 * 1000 * MS; /* both kernels start 10 s into the trace */
    st_gpu_rec k[] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + S, .dur_ns = 1 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = B + S + 2 * MS, .dur_ns = 1 * MS, .correlation = 2},
    };
    st_gpu_rec api[] = {
        {.kind = ST_GPU_API, .start_ns = B + S - 3000 * MS, .dur_ns = 5 * US, .correlation = 1, .os_tid = 2001},
        {.kind = ST_GPU_API, .start_ns = B + S - 1000 * MS, .dur_ns = 5 * US, .correlation = 2, .os_tid = 2001},
    };
    tg_gpu_chunk(g, 0, 7, k, 2);
    tg_gpu_chunk(g, -1, 0, api, 2);
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "lookback.sqlite");
    tg_write(g, path);
    tg_free(g);
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

/* A trace copied without its -wal: a SQLite file in WAL mode (header bytes
 * 18 and 19 are 2) with no stagetrace table and no -wal beside it (or an
 * empty one) is said to be that; a file in rollback mode, or with its -wal
 * there, keeps the plain message. */
static void make_db(const char *path, int wal, const char *sql)
{
    unlink(path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (wal) assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL), SQLITE_OK);
    if (sql) assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK); /* the last close checkpoints and removes the -wal */
}

/* Every kind of docs/trace-format.md's GPU chunk, and kinds past them:
 * device work is what runs on a stream; syncs and API calls are the host's. */
static void test_gpu_kind_classes(void **state)
{
    (void)state;
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_KERNEL), 1);
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_MEMCPY), 1);
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_MEMSET), 1);
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_SYNC), 0);
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_API), 0);
    assert_int_equal(st_gpu_kind_is_device_work(0), 0);
    assert_int_equal(st_gpu_kind_is_device_work(ST_GPU_KIND_MAX + 1), 0);
    assert_int_equal(st_gpu_kind_is_device_work(UINT32_MAX), 0);
    /* each known kind has its name; an unknown one is "?" as for kind 0 */
    assert_string_equal(st_gpu_kind_name(ST_GPU_KERNEL), "kernel");
    assert_string_equal(st_gpu_kind_name(ST_GPU_KIND_MAX + 1), "?");
}

static void test_wal_missing(void **state)
{
    (void)state;
    char path[4200], wal[4300], shm[4300], want[9000];
    snprintf(path, sizeof path, "%s", tmp_file("copied.sqlite"));
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    st_reader *r = NULL;
    for (int tables = 0; tables < 2; tables++) {
        make_db(path, 1, tables ? "CREATE TABLE other(a)" : NULL); /* no tables at all, or none of ours */
        struct stat sb;
        assert_int_not_equal(stat(wal, &sb), 0);
        assert_int_equal(st_reader_open(&r, path), ST_ECORRUPT);
        assert_null(r);
        snprintf(want, sizeof want,
                 "'%s' has no stagetrace tables; its write-ahead log '%s-wal' is missing (was the file copied without "
                 "it?)",
                 path, path);
        assert_string_equal(st_last_error(), want);
        /* an empty -wal (a reader's earlier open may leave one): the same diagnosis */
        FILE *f = fopen(wal, "w");
        assert_non_null(f);
        fclose(f);
        unlink(shm);
        assert_int_equal(st_reader_open(&r, path), ST_ECORRUPT);
        snprintf(want, sizeof want,
                 "'%s' has no stagetrace tables; its write-ahead log '%s-wal' is empty (was the file copied without "
                 "it?)",
                 path, path);
        assert_string_equal(st_last_error(), want);
        unlink(wal);
        unlink(shm);
    }
    /* rollback mode: not a WAL trace, the plain message */
    make_db(path, 0, NULL);
    assert_int_equal(st_reader_open(&r, path), ST_ECORRUPT);
    snprintf(want, sizeof want, "'%s' is not a stagetrace trace (it has no meta table)", path);
    assert_string_equal(st_last_error(), want);
    /* a WAL database with a meta table: no such diagnosis */
    make_db(path, 1, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    assert_int_equal(st_reader_open(&r, path), ST_ECORRUPT);
    assert_null(strstr(st_last_error(), "write-ahead"));
    unlink(path);
    unlink(wal);
    unlink(shm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta_and_tables),
        cmocka_unit_test(test_ranges_match_script),
        cmocka_unit_test(test_samples_match_script),
        cmocka_unit_test(test_time_windows),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_sql_ranges),
        cmocka_unit_test(test_sql_counters),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_flow_chunks_hostile),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_wal_missing),
        cmocka_unit_test(test_range_decoder_matches_events),
        cmocka_unit_test(test_gpu_launch_lookback),
        cmocka_unit_test(test_gpu_kind_classes),
    };
    if (make_tmp_dir("test_reader")) return 1;
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    tidy_tmp_dir(failed);
    return failed;
}
