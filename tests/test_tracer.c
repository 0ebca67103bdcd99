/* test_tracer.c: tests of the recording library (tracer/record.c, trace.c,
 * writer.c) through its public interface, read back with the reader
 * (st_reader.h).
 *
 *  - rings: 4 threads record 200k ranges each (nested, with a counter whose
 *    value encodes thread and sequence number) through small rings while the
 *    writer drains them, with block_when_full: every event is stored exactly
 *    once, in order, with its stage and depth, and nothing is dropped;
 *  - two-slot records (counter samples, marks, flows, steps: a slot and its
 *    payload) come back whole where they straddle the ring's end or the
 *    writer's batches, and count two slots against ring_records;
 *  - drops: a slow writer (st__test_set_writer_delay) and tiny rings without
 *    blocking: what is lost is counted exactly (stored ranges * 2 + dropped
 *    = begin + end calls), ranges stay paired, and the three drop counts
 *    (threads.dropped, meta dropped_events, st_dropped) agree;
 *  - nesting beyond 256 levels, and deeper than a blocking ring can hold;
 *  - bad input: unwritable paths, existing files, bad options, a second
 *    open, registration errors, a disabled trace;
 *  - one file, one writer: processes racing on one path (exactly one
 *    wins, its trace whole), overwrite against a live trace (refused, the
 *    trace survives) and against a finished or killed one (replaced);
 *  - unmatched ends and calls from unregistered threads;
 *  - st_meta_set: a key set twice keeps its last value, from another
 *    thread too; the library's keys (status, cpu_*, clock_*, gpu_*), bad
 *    characters, an empty or 65-byte key, a 4097-byte value and a 33rd key
 *    are refused, and no refused key reaches meta.
 *
 * Files go to a fresh directory under $ST_TEST_TMP (else under /tmp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "st_internal.h" /* st__test_set_writer_delay */
#include "st_reader.h"
#include "stagetrace.h"

/* ---- helpers ---- */

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Neither the trace nor any of its side files is there. */
static void assert_no_trace_files(const char *path)
{
    char temp[32]; /* st_open's temporary name */
    snprintf(temp, sizeof temp, ".st-new-%ld", (long)getpid());
    const char *const sides[] = {"", "-wal", "-shm", "-journal", temp};
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        char p[PATH_MAX + 40];
        snprintf(p, sizeof p, "%s%s", path, sides[i]);
        if (exists(p)) fail_msg("'%s' exists, but nothing should have been created", p);
    }
}

/* st_last_error() is one line that mentions `needle`. */
static void assert_error_line(const char *needle)
{
    const char *msg = st_last_error();
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    if (strchr(msg, '\n')) fail_msg("error message has a newline: '%s'", msg);
    if (!strstr(msg, needle)) fail_msg("error message '%s' does not mention '%s'", msg, needle);
}

/* ---- rings: everything arrives, once, in order ---- */

#define RING_THREADS 4
#define RING_RANGES 200000 /* per thread */
#define RING_SEQ_BASE 10000000.0

typedef struct ring_worker {
    st_trace *trace;
    int index;
    int thread_id;
    uint32_t iterations;
    st_stage outer;
    st_stage inner[4]; /* [1..3] */
    st_counter seq;
    pthread_barrier_t *start;
} ring_worker;

/* Iteration i: outer { counter = index*1e7 + i; inner1 { inner2 { ... } } }
 * with i % 4 inner levels: 1 + i % 4 ranges. */
static uint32_t ring_iterations_for(uint32_t ranges)
{
    uint32_t it = 0, n = 0;
    while (n < ranges) n += 1 + (it++ % 4);
    return it;
}

static void *ring_worker_main(void *arg)
{
    ring_worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "worker%d", w->index);
    w->thread_id = st_thread_register(w->trace, name, "worker", -1, 0);
    pthread_barrier_wait(w->start);
    if (w->thread_id < 0) return NULL;
    for (uint32_t i = 0; i < w->iterations; i++) {
        st_begin(w->outer);
        st_counter_set(w->seq, w->index * RING_SEQ_BASE + i);
        uint32_t nest = i % 4;
        for (uint32_t d = 1; d <= nest; d++) st_begin(w->inner[d]);
        for (uint32_t d = nest; d >= 1; d--) st_end(w->inner[d]);
        st_end(w->outer);
    }
    st_thread_unregister();
    return NULL;
}

static void next_event(st_event_iter *it, st_event *ev, int64_t *prev_ts)
{
    int rc = st_event_iter_next(it, ev);
    if (rc != 1) fail_msg("event iterator returned %d: %s", rc, st_last_error());
    assert_true(ev->ts_ns >= *prev_ts);
    *prev_ts = ev->ts_ns;
}

static void expect_event(const st_event *ev, int is_end, uint32_t stage, uint32_t depth)
{
    if (ev->is_end != is_end || ev->stage != stage || ev->depth != depth)
        fail_msg("event %s stage %u depth %u, want %s stage %u depth %u", ev->is_end ? "end" : "begin",
                 ev->stage, ev->depth, is_end ? "end" : "begin", stage, depth);
}

static void test_rings_every_event_once_in_order(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "rings.sqlite");
    st_options o;
    test_options(&o, path);
    o.ring_records = 1024;
    o.block_when_full = 1;
    o.commit_ms = 20;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);

    static const char *const inner_names[] = {NULL, "inner1", "inner2", "inner3"};
    int inner[4] = {0};
    for (int d = 1; d <= 3; d++) {
        inner[d] = st_stage_register(trace, inner_names[d], ST_SYNC);
        assert_true(inner[d] >= 0);
    }
    int seq = st_counter_register(trace, "seq", "n");
    assert_true(seq >= 0);
    uint32_t iterations = ring_iterations_for(RING_RANGES);
    uint64_t ranges_per_thread = 0;
    for (uint32_t i = 0; i < iterations; i++) ranges_per_thread += 1 + i % 4;

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, RING_THREADS + 1);
    ring_worker w[RING_THREADS];
    pthread_t th[RING_THREADS];
    for (int t = 0; t < RING_THREADS; t++) {
        char name[32];
        snprintf(name, sizeof name, "outer%d", t);
        int outer = st_stage_register(trace, name, (st_kind)(t % ST_KIND_COUNT));
        assert_true(outer >= 0);
        w[t] = (ring_worker){trace, t, -1, iterations, (st_stage)outer,
                             {0, (st_stage)inner[1], (st_stage)inner[2], (st_stage)inner[3]},
                             (st_counter)seq, &start};
        assert_int_equal(pthread_create(&th[t], NULL, ring_worker_main, &w[t]), 0);
    }
    pthread_barrier_wait(&start);
    for (int t = 0; t < RING_THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);
    for (int t = 0; t < RING_THREADS; t++) assert_true(w[t].thread_id >= 0);
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 0);
    assert_int_equal(st_close(trace), ST_OK);
    char wal[PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_false(exists(wal)); /* a clean close leaves a single file */

    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_meta(r, "dropped_events", "0");
    assert_meta(r, "unmatched_ends", NULL);
    assert_int_equal(st_reader_n_threads(r), RING_THREADS);
    assert_int_equal(st_reader_n_stages(r), 3 + RING_THREADS);
    assert_string_equal(st_reader_stage(r, (uint32_t)inner[2])->name, "inner2");
    assert_int_equal(st_reader_stage(r, (uint32_t)inner[2])->kind, ST_SYNC);
    assert_string_equal(st_reader_counter(r, (uint32_t)seq)->name, "seq");

    int64_t *outer_begin = malloc(iterations * sizeof *outer_begin);
    int64_t *outer_end = malloc(iterations * sizeof *outer_end);
    assert_non_null(outer_begin);
    assert_non_null(outer_end);
    for (int t = 0; t < RING_THREADS; t++) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", t);
        const st_thread_info *ti = thread_named(r, name);
        if (!ti) fail_msg("no thread named '%s' in the trace", name);
        assert_int_equal(ti->id, (uint32_t)w[t].thread_id);
        assert_string_equal(ti->role, "worker");
        assert_int_equal(ti->dropped, 0);
        uint32_t outer = w[t].outer;
        assert_int_equal(st_reader_stage(r, outer)->kind, (st_kind)(t % ST_KIND_COUNT));

        /* Raw events: exactly the recorded sequence. */
        st_event_iter *it;
        assert_int_equal(st_event_iter_open(&it, r, ti->id), ST_OK);
        st_event ev;
        int64_t prev = INT64_MIN;
        for (uint32_t i = 0; i < iterations; i++) {
            uint32_t nest = i % 4;
            next_event(it, &ev, &prev);
            expect_event(&ev, 0, outer, 0);
            outer_begin[i] = ev.ts_ns;
            for (uint32_t d = 1; d <= nest; d++) {
                next_event(it, &ev, &prev);
                expect_event(&ev, 0, (uint32_t)inner[d], d);
            }
            for (uint32_t d = nest; d >= 1; d--) {
                next_event(it, &ev, &prev);
                expect_event(&ev, 1, (uint32_t)inner[d], d);
            }
            next_event(it, &ev, &prev);
            expect_event(&ev, 1, outer, 0);
            assert_int_equal(ev.start_ns, outer_begin[i]);
            outer_end[i] = ev.ts_ns;
        }
        assert_int_equal(st_event_iter_next(it, &ev), 0); /* nothing more */
        st_event_iter_close(it);

        /* Counters: index*1e7 + i, every i once, in order, each inside its
         * own iteration's outer range. */
        st_sample_iter *si;
        assert_int_equal(st_sample_iter_open(&si, r, ti->id, INT64_MIN, INT64_MAX), ST_OK);
        st_sample_row s;
        for (uint32_t i = 0; i < iterations; i++) {
            int rc = st_sample_iter_next(si, &s);
            if (rc != 1) fail_msg("thread %d: sample %u missing (rc %d)", t, i, rc);
            assert_int_equal(s.thread, ti->id);
            assert_int_equal(s.counter, (uint32_t)seq);
            if (s.value != t * RING_SEQ_BASE + i)
                fail_msg("thread %d: sample %u has value %.0f", t, i, s.value);
            assert_true(s.ts_ns >= outer_begin[i] && s.ts_ns <= outer_end[i]);
        }
        assert_int_equal(st_sample_iter_next(si, &s), 0);
        st_sample_iter_close(si);

        /* The chunk rows' own counts agree. */
        sqlite3 *db = st_reader_db(r);
        assert_int_equal(sql_intf(db, "SELECT sum(n_ranges) FROM range_chunks WHERE thread = %u", ti->id),
                         ranges_per_thread);
        assert_int_equal(sql_intf(db, "SELECT sum(n_events) FROM range_chunks WHERE thread = %u", ti->id),
                         2 * ranges_per_thread);
        assert_int_equal(sql_intf(db, "SELECT sum(n_samples) FROM counter_chunks WHERE thread = %u", ti->id),
                         iterations);
    }
    /* Completed ranges: per thread in end order, with stage and depth. */
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    uint64_t per_thread[RING_THREADS] = {0};
    int rc;
    while ((rc = st_range_iter_next(ri, &rg)) == 1) {
        int t = -1;
        for (int k = 0; k < RING_THREADS; k++)
            if ((uint32_t)w[k].thread_id == rg.thread) t = k;
        assert_true(t >= 0);
        assert_true(rg.dur_ns >= 0);
        if (rg.depth == 0) assert_int_equal(rg.stage, w[t].outer);
        else assert_int_equal(rg.stage, (uint32_t)inner[rg.depth]);
        per_thread[t]++;
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(ri);
    for (int t = 0; t < RING_THREADS; t++) assert_int_equal(per_thread[t], ranges_per_thread);
    assert_true(ranges_per_thread >= RING_RANGES);
    free(outer_begin);
    free(outer_end);
    st_reader_close(r);
}

/* ---- two-slot records: a counter sample, mark, flow or step takes a 16-byte
 * slot and its payload slot; both are written and read together ---- */

/* One outer begin (one slot), then per iteration: begin, counter, flow_out,
 * end, mark, step (1 + 2 + 2 + 1 + 2 + 2 slots): the two-slot records start
 * at odd and even slots, so some straddle the ring's end and, in the larger
 * ring, the writer's batch boundaries. Blocking: nothing is dropped, and
 * every value comes back. */
static void check_pairs(uint32_t ring_records, uint32_t iterations, uint32_t writer_delay_us)
{
    char path[PATH_MAX];
    char file[64];
    snprintf(file, sizeof file, "pairs-%u.sqlite", ring_records);
    tmp_path(path, sizeof path, file);
    st_options o;
    test_options(&o, path);
    o.ring_records = ring_records;
    o.block_when_full = 1;
    o.commit_ms = 20;
    st_trace *trace;
    st__test_set_writer_delay(writer_delay_us);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st__test_set_writer_delay(0);
    int outer = st_stage_register(trace, "outer", ST_WORK);
    int inner = st_stage_register(trace, "inner", ST_COPY);
    int ctr = st_counter_register(trace, "value", "n");
    assert_true(outer >= 0 && inner >= 0 && ctr >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_begin((st_stage)outer);
    for (uint32_t i = 0; i < iterations; i++) {
        st_begin((st_stage)inner);
        st_counter_set((st_counter)ctr, -0.5 * i);
        st_flow_out((uint64_t)i << 33 | 0x5a5a5a5aull);
        st_end((st_stage)inner);
        st_mark(i % 2 ? "odd" : "even");
        st_step(i + 1, 1000000000000ull + i);
    }
    st_end((st_stage)outer);
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 0);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_complete_trace(path);
    sqlite3 *db = st_reader_db(r);
    assert_meta(r, "dropped_events", "0");
    assert_meta(r, "unmatched_ends", NULL);
    assert_meta(r, "rejected_steps", NULL);
    assert_meta(r, "bad_counters", NULL);
    assert_int_equal(sql_int(db, "SELECT sum(n_ranges) FROM range_chunks"), iterations + 1);
    st_sample_iter *si;
    assert_int_equal(st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_sample_row sr;
    for (uint32_t i = 0; i < iterations; i++) {
        assert_int_equal(st_sample_iter_next(si, &sr), 1);
        if (sr.value != -0.5 * i) fail_msg("sample %u has value %g", i, sr.value);
    }
    assert_int_equal(st_sample_iter_next(si, &sr), 0);
    st_sample_iter_close(si);
    st_flow_iter *fi;
    assert_int_equal(st_flow_iter_open(&fi, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_flow_row f;
    for (uint32_t i = 0; i < iterations; i++) {
        assert_int_equal(st_flow_iter_next(fi, &f), 1);
        assert_int_equal(f.dir, ST_FLOW_OUT);
        if (f.id != ((uint64_t)i << 33 | 0x5a5a5a5aull)) fail_msg("flow %u has id %llx", i, (unsigned long long)f.id);
    }
    assert_int_equal(st_flow_iter_next(fi, &f), 0);
    st_flow_iter_close(fi);
    assert_int_equal(st_reader_n_steps(r), iterations);
    for (uint32_t i = 0; i < iterations; i++) {
        const st_step_info *si2 = st_reader_step(r, i);
        assert_non_null(si2);
        assert_int_equal(si2->step, i + 1);
        assert_int_equal(si2->tokens, 1000000000000ull + i);
    }
    assert_int_equal(sql_int(db, "SELECT count(*) FROM marks m JOIN strings s ON s.id = m.string "
                                 "WHERE s.value = 'odd'"), iterations / 2);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM marks m JOIN strings s ON s.id = m.string "
                                 "WHERE s.value = 'even'"), iterations / 2);
    st_reader_close(r);
}

static void test_two_slot_records_whole(void **state)
{
    (void)state;
    check_pairs(64, 2000, 0);
    check_pairs(8192, 20000, 2000); /* a slow writer: batches of 4096 slots */
}

/* A trace whose rings hold 64 slots, never block, and whose writer sleeps
 * 500 ms after each batch it drains and commits only at close: once the
 * writer has taken a first batch (wait_tail), nothing more is freed for
 * half a second, so a test can fill the ring exactly. */
static st_trace *open_held_ring(const char *path, int nvtx)
{
    st_options o;
    test_options(&o, path);
    o.ring_records = 64;
    o.block_when_full = 0;
    o.commit_ms = 60000;
    o.nvtx = nvtx;
    st_trace *trace;
    st__test_set_writer_delay(500000);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st__test_set_writer_delay(0);
    return trace;
}

/* Waits (up to 10 s) until the writer has read the ring up to `tail`. */
static void wait_tail(st_ring *ring, uint64_t tail)
{
    double t0 = monotonic_s();
    while (atomic_load(&ring->tail) != tail) {
        if (monotonic_s() - t0 > 10) fail_msg("the writer never drained the ring");
        usleep(100);
    }
}

/* ring_records counts 16-byte slots: a begin takes one (and reserves its
 * end's), a counter sample two. In a 64-slot ring with one range open, 31
 * samples fit, the next ones are dropped and counted one each. The writer
 * is held in its sleep after draining one range, so nothing is freed. */
static void test_ring_counts_slots(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "ring-slots.sqlite");
    st_trace *trace = open_held_ring(path, 0);
    int s = st_stage_register(trace, "work", ST_WORK);
    int c = st_counter_register(trace, "depth", "items");
    assert_true(s >= 0 && c >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_ring *ring = st__thread_ring;
    assert_non_null(ring);
    st_begin((st_stage)s);
    st_end((st_stage)s);
    wait_tail(ring, 2); /* the writer has taken it: it now sleeps 500 ms */
    st_begin((st_stage)s);
    for (int i = 0; i < 40; i++) st_counter_set((st_counter)c, i);
    st_end((st_stage)s);
    assert_int_equal(atomic_load(&ring->head), 2 + 1 + 31 * 2 + 1);
    assert_int_equal(st_dropped(trace), 9);
    st_thread_unregister();
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_int_equal(meta_ll(r, "dropped_events"), 9);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), 2);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_samples) FROM counter_chunks"), 31);
    st_reader_close(r);
}

/* The common begin and end (stagetrace.h's inline ring write, TSC and NVTX
 * off) and the general path (here NVTX on) keep the same books: in
 * a 64-slot ring with the writer held asleep, a range holding 40 inner
 * ranges keeps 31 of them (the 32nd finds no room once the tail is
 * re-read), a range begun with no room is dropped with everything nested
 * in it, and once the writer has drained, a range holding another records
 * again. Same head, same drops, same trace, in both modes. */
static void check_fast_general(int nvtx)
{
    char path[PATH_MAX];
    char file[64];
    snprintf(file, sizeof file, "fast-general-%d.sqlite", nvtx);
    tmp_path(path, sizeof path, file);
    st_trace *trace = open_held_ring(path, nvtx);
    st_stage a = (st_stage)st_stage_register(trace, "a", ST_WORK);
    st_stage b = (st_stage)st_stage_register(trace, "b", ST_WORK);
    int c = st_counter_register(trace, "c", "items");
    assert_true(c >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_ring *ring = st__thread_ring;
    assert_non_null(ring);
    assert_ptr_equal(st__thread_hot, &ring->w);
    /* The mode under test: the general path with NVTX on (in builds with
     * NVTX) or without an invariant TSC, else the inline one. */
    int general = st_nvtx_on || !st_clock_use_tsc;
#ifdef ST_HAVE_NVTX
    if (nvtx) assert_true(general);
#endif
    assert_int_equal((ring->w.open & ST_OPEN_GENERAL) != 0, general);
    st_begin(a);
    st_end(a);
    wait_tail(ring, 2);
    st_begin(a);
    for (int i = 0; i < 40; i++) {
        st_begin(b);
        st_end(b);
    }
    st_end(a);
    assert_int_equal(atomic_load(&ring->head), 2 + 1 + 31 * 2 + 1);
    assert_int_equal(st_dropped(trace), 9 * 2);
    st_begin(a); /* no room: dropped, and so is what it holds */
    st_begin(b);
    st_end(b);
    st_end(a);
    assert_int_equal(atomic_load(&ring->head), 66);
    assert_int_equal(st_dropped(trace), 9 * 2 + 4);
    assert_int_equal(ring->w.open & ~ST_OPEN_GENERAL, 0); /* nothing open, nothing dropped open */
    wait_tail(ring, 66);
    st_begin(a);
    st_begin(b);
    assert_int_equal(ring->w.open & ~ST_OPEN_GENERAL, 2);
    st_end(b);
    st_end(a);
    assert_int_equal(atomic_load(&ring->head), 70);
    /* Two-slot records, each with its payload. */
    st_counter_set((st_counter)c, 2.5);
    st_mark("fast-general");
    st_mark(NULL); /* nothing */
    st_flow_out(UINT64_MAX);
    st_flow_in(7);
    assert_int_equal(atomic_load(&ring->head), 78);
    assert_int_equal(st_dropped(trace), 22);
    st_thread_unregister();
    assert_null(st__thread_hot);
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_int_equal(meta_ll(r, "dropped_events"), 22);
    assert_meta(r, "unmatched_ends", NULL);
    sqlite3 *db = st_reader_db(r);
    assert_int_equal(sql_int(db, "SELECT sum(n_ranges) FROM range_chunks"), 1 + 31 + 1 + 2);
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    int n_inner = 0, n_outer = 0, rc;
    while ((rc = st_range_iter_next(it, &rg)) == 1) {
        if (rg.stage == b) {
            assert_int_equal(rg.depth, 1);
            n_inner++;
        } else {
            assert_int_equal(rg.stage, a);
            assert_int_equal(rg.depth, 0);
            n_outer++;
        }
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(it);
    assert_int_equal(n_inner, 32);
    assert_int_equal(n_outer, 3);
    assert_int_equal(sql_int(db, "SELECT sum(n_samples) FROM counter_chunks"), 1);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM marks m JOIN strings s ON s.id = m.string "
                                 "WHERE s.value = 'fast-general'"), 1);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM marks"), 1);
    st_flow_iter *fi;
    assert_int_equal(st_flow_iter_open(&fi, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_flow_row f;
    assert_int_equal(st_flow_iter_next(fi, &f), 1);
    assert_true(f.dir == ST_FLOW_OUT && f.id == UINT64_MAX);
    assert_int_equal(st_flow_iter_next(fi, &f), 1);
    assert_true(f.dir == ST_FLOW_IN && f.id == 7);
    assert_int_equal(st_flow_iter_next(fi, &f), 0);
    st_flow_iter_close(fi);
    st_sample_iter *si;
    st_sample_row sample;
    assert_int_equal(st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    assert_int_equal(st_sample_iter_next(si, &sample), 1);
    assert_true(sample.value == 2.5 && sample.counter == (uint32_t)c);
    assert_int_equal(st_sample_iter_next(si, &sample), 0);
    st_sample_iter_close(si);
    st_reader_close(r);
}

static void test_fast_and_general_paths(void **state)
{
    (void)state;
    check_fast_general(0);
    check_fast_general(1);
}

/* ---- drops: counted exactly, ranges intact ---- */

#define DROP_THREADS 2
#define DROP_ITERATIONS 20000

typedef struct drop_worker {
    st_trace *trace;
    int index;
    int nested; /* 0: flat ranges; 1: outer { inner } */
    int thread_id;
    st_stage stages[3];
} drop_worker;

static void *drop_worker_main(void *arg)
{
    drop_worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "%s%d", w->nested ? "nested" : "flat", w->index);
    w->thread_id = st_thread_register(w->trace, name, "dropper", -1, 0);
    if (w->thread_id < 0) return NULL;
    for (uint32_t i = 0; i < DROP_ITERATIONS; i++) {
        if (w->nested) {
            st_begin(w->stages[0]);
            st_begin(w->stages[1 + i % 2]);
            st_end(w->stages[1 + i % 2]);
            st_end(w->stages[0]);
        } else {
            st_begin(w->stages[i % 3]);
            st_end(w->stages[i % 3]);
        }
        if (i % 500 == 499) usleep(300); /* let the writer store some */
    }
    st_thread_unregister();
    return NULL;
}

static void check_drops(int nested, uint32_t ring_records)
{
    char path[PATH_MAX];
    char file[64];
    snprintf(file, sizeof file, "drops-%s-%u.sqlite", nested ? "nested" : "flat", ring_records);
    tmp_path(path, sizeof path, file);
    st_options o;
    test_options(&o, path);
    o.ring_records = ring_records;
    o.block_when_full = 0;
    o.commit_ms = 10;
    st_trace *trace;
    st__test_set_writer_delay(2000);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st__test_set_writer_delay(0);
    st_stage stages[3];
    static const char *const names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        int id = st_stage_register(trace, names[i], ST_WORK);
        assert_true(id >= 0);
        stages[i] = (st_stage)id;
    }
    drop_worker w[DROP_THREADS];
    pthread_t th[DROP_THREADS];
    for (int t = 0; t < DROP_THREADS; t++) {
        w[t] = (drop_worker){trace, t, nested, -1, {stages[0], stages[1], stages[2]}};
        assert_int_equal(pthread_create(&th[t], NULL, drop_worker_main, &w[t]), 0);
    }
    for (int t = 0; t < DROP_THREADS; t++) pthread_join(th[t], NULL);
    assert_int_equal(st_flush(trace), ST_OK);
    uint64_t dropped = st_dropped(trace);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_meta(r, "unmatched_ends", NULL); /* every stored end matched its begin */
    uint64_t calls_per_thread = (uint64_t)DROP_ITERATIONS * (nested ? 4 : 2);
    uint64_t sum_dropped = 0;
    for (int t = 0; t < DROP_THREADS; t++) {
        assert_true(w[t].thread_id >= 0);
        const st_thread_info *ti = st_reader_thread_by_id(r, (uint32_t)w[t].thread_id);
        assert_non_null(ti);
        /* Walk the events: properly paired, flat ranges at depth 0. */
        st_event_iter *it;
        assert_int_equal(st_event_iter_open(&it, r, ti->id), ST_OK);
        st_event ev;
        uint64_t begins = 0, ends = 0, depth = 0;
        uint32_t open_stage[2] = {0, 0};
        int64_t prev = INT64_MIN;
        int rc;
        while ((rc = st_event_iter_next(it, &ev)) == 1) {
            assert_true(ev.ts_ns >= prev);
            prev = ev.ts_ns;
            if (!ev.is_end) {
                assert_true(depth < (nested ? 2u : 1u));
                assert_int_equal(ev.depth, depth);
                open_stage[depth++] = ev.stage;
                begins++;
            } else {
                assert_true(depth > 0);
                depth--;
                assert_int_equal(ev.depth, depth);
                assert_int_equal(ev.stage, open_stage[depth]);
                ends++;
            }
            /* An inner range (b or c) kept while its outer (a) was dropped
             * sits at depth 0; an outer is never inside an inner. */
            if (nested && ev.depth == 1) assert_int_equal(open_stage[0], stages[0]);
        }
        assert_int_equal(rc, 0);
        st_event_iter_close(it);
        assert_int_equal(depth, 0);
        assert_int_equal(begins, ends);
        uint64_t ranges = (uint64_t)sql_intf(
            st_reader_db(r), "SELECT coalesce(sum(n_ranges), 0) FROM range_chunks WHERE thread = %u", ti->id);
        assert_int_equal(ranges, ends);
        /* The accounting is exact: each begin/end pair is stored or both
         * its halves are counted. */
        if (ranges * 2 + ti->dropped != calls_per_thread)
            fail_msg("thread %s: %llu ranges stored, %llu events dropped, %llu calls", ti->name,
                     (unsigned long long)ranges, (unsigned long long)ti->dropped,
                     (unsigned long long)calls_per_thread);
        /* Both happened: this test says nothing if the ring never filled or
         * the writer never caught up. */
        assert_true(ranges > 0);
        assert_true(ti->dropped > 0);
        sum_dropped += ti->dropped;
    }
    assert_int_equal(meta_ll(r, "dropped_events"), (long long)sum_dropped);
    assert_int_equal(dropped, sum_dropped);
    st_reader_close(r);
}

static void test_drops_counted_exactly_flat(void **state)
{
    (void)state;
    check_drops(0, 64);
    check_drops(0, 256);
}

static void test_drops_counted_exactly_nested(void **state)
{
    (void)state;
    check_drops(1, 64);
}

/* st_dropped counts live: a 64-record ring, a writer that sleeps 300 ms
 * after every batch it drains and commits only at close, and a producer
 * that records 5000 ranges at once. The drops are visible the moment the
 * producer has made them (not at the writer's next commit), still after the
 * writer has freed the retired ring, and equal meta dropped_events. */
static void test_dropped_counts_live(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "dropped-live.sqlite");
    st_options o;
    test_options(&o, path);
    o.ring_records = 64;
    o.block_when_full = 0;
    o.commit_ms = 60000;
    st_trace *trace;
    st__test_set_writer_delay(300000);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st__test_set_writer_delay(0);
    int s = st_stage_register(trace, "work", ST_WORK);
    assert_true(s >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    assert_int_equal(st_dropped(trace), 0);
    for (int i = 0; i < 5000; i++) {
        st_begin((st_stage)s);
        st_end((st_stage)s);
    }
    uint64_t live = st_dropped(trace);
    /* The ring holds at most 64 records: at least 10000 - 64 - what the
     * writer took in its first batches are dropped. */
    if (live < 5000) fail_msg("st_dropped() is %llu right after 10000 events into a 64-record ring",
                              (unsigned long long)live);
    st_thread_unregister();
    assert_int_equal(st_dropped(trace), live);
    assert_int_equal(st_flush(trace), ST_OK); /* the writer frees the retired ring */
    assert_int_equal(st_dropped(trace), live);
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_int_equal(meta_ll(r, "dropped_events"), (long long)live);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT dropped FROM threads WHERE name = 'main'"),
                     (long long)live);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks") * 2 + (long long)live,
                     10000);
    st_reader_close(r);
}

/* ---- nesting ---- */

/* 300 nested begins: depths 0..255 are stored, deeper ones are counted as
 * dropped (begin and end), and the 256 stored ranges have their depths. */
static void test_nesting_beyond_256(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "deep.sqlite");
    st_options o;
    test_options(&o, path);
    o.ring_records = 1024;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int s0 = st_stage_register(trace, "level", ST_WORK);
    int s1 = st_stage_register(trace, "odd_level", ST_COMM);
    assert_true(s0 >= 0 && s1 >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    for (int d = 0; d < 300; d++) st_begin((st_stage)(d % 2 ? s1 : s0));
    for (int d = 299; d >= 0; d--) st_end((st_stage)(d % 2 ? s1 : s0));
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 2 * (300 - ST_MAX_DEPTH));
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_reader(path);
    assert_meta(r, "unmatched_ends", NULL);
    assert_int_equal(meta_ll(r, "dropped_events"), 2 * (300 - ST_MAX_DEPTH));
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    int expect_depth = ST_MAX_DEPTH - 1;
    while (st_range_iter_next(ri, &rg) == 1) {
        assert_int_equal(rg.depth, (uint32_t)expect_depth); /* innermost ends first */
        assert_int_equal(rg.stage, (uint32_t)(expect_depth % 2 ? s1 : s0));
        expect_depth--;
    }
    assert_int_equal(expect_depth, -1);
    st_range_iter_close(ri);
    st_reader_close(r);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_tracer: timed out: a blocking begin never returned\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(3);
}

/* With block_when_full, a begin nested deeper than the ring can ever hold
 * (it needs room for its end and every open range's end) must not wait
 * forever: it is dropped and counted. A 64-record ring holds begins at
 * depths 0..62 (depth d needs d + 2 free slots). */
static void test_blocking_ring_deeper_than_ring(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "deep-blocking.sqlite");
    st_options o;
    test_options(&o, path);
    o.ring_records = 64;
    o.block_when_full = 1;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int s = st_stage_register(trace, "level", ST_WORK);
    assert_true(s >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    signal(SIGALRM, on_alarm);
    alarm(10);
    for (int round = 0; round < 3; round++) {
        for (int d = 0; d < 100; d++) st_begin((st_stage)s);
        for (int d = 0; d < 100; d++) st_end((st_stage)s);
    }
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 3 * 2 * (100 - 63));
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), 3 * 63);
    assert_int_equal(meta_ll(r, "dropped_events"), 3 * 2 * (100 - 63));
    assert_meta(r, "unmatched_ends", NULL);
    st_reader_close(r);
}

/* ---- bad input ---- */

static void test_open_unwritable_paths(void **state)
{
    (void)state;
    st_options o;
    st_trace *trace = (st_trace *)&o; /* must be set to NULL on failure */
    char path[PATH_MAX + 64];

    /* In a directory that does not exist. */
    snprintf(path, sizeof path, "%s/no-such-dir/x.sqlite", tmp_dir);
    test_options(&o, path);
    assert_int_equal(st_open(&trace, &o), ST_EIO);
    assert_null(trace);
    assert_error_line(path);
    assert_no_trace_files(path);
    char dir[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/no-such-dir", tmp_dir);
    assert_false(exists(dir));

    /* Under /proc, where nothing can be created, even by root. */
    test_options(&o, "/proc/nonexistent/x.sqlite");
    assert_int_equal(st_open(&trace, &o), ST_EIO);
    assert_error_line("/proc/nonexistent/x.sqlite");
    assert_no_trace_files("/proc/nonexistent/x.sqlite");

    /* A path that is a directory (with and without overwrite): refused, and
     * the directory and what it holds are left alone. */
    tmp_path(path, sizeof path, "a-directory");
    assert_int_equal(mkdir(path, 0755), 0);
    char inside[PATH_MAX + 80];
    snprintf(inside, sizeof inside, "%s/keep", path);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fputs("keep me", f);
    fclose(f);
    for (int overwrite = 0; overwrite <= 1; overwrite++) {
        test_options(&o, path);
        o.overwrite = overwrite;
        assert_int_equal(st_open(&trace, &o), ST_EINVAL);
        assert_null(trace);
        assert_error_line(path);
        assert_error_line("directory");
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_true(S_ISDIR(sb.st_mode));
        assert_true(exists(inside));
        char side[PATH_MAX + 80];
        snprintf(side, sizeof side, "%s-wal", path);
        assert_false(exists(side));
    }
    /* Nothing stayed open: a good path works now. */
    tmp_path(path, sizeof path, "after-bad-paths.sqlite");
    test_options(&o, path);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_int_equal(st_close(trace), ST_OK);
}

static void test_open_existing_file(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "existing.sqlite");
    static const char original[] = "not a trace, and it must stay exactly like this\n";
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(original, 1, sizeof original - 1, f);
    fclose(f);

    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_EEXIST);
    assert_null(trace);
    assert_error_line(path);
    size_t len;
    char *contents = read_file(path, &len);
    assert_int_equal(len, sizeof original - 1);
    assert_memory_equal(contents, original, len);
    free(contents);
    char side[PATH_MAX + 8];
    snprintf(side, sizeof side, "%s-wal", path);
    assert_false(exists(side));
    snprintf(side, sizeof side, "%s-shm", path);
    assert_false(exists(side));

    /* With overwrite: replaced by a trace (a stale -wal beside it goes too). */
    snprintf(side, sizeof side, "%s-wal", path);
    f = fopen(side, "wb");
    assert_non_null(f);
    fputs("stale wal", f);
    fclose(f);
    o.overwrite = 1;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int s = st_stage_register(trace, "work", ST_WORK);
    assert_true(s >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_begin((st_stage)s);
    st_end((st_stage)s);
    assert_int_equal(st_close(trace), ST_OK);
    assert_false(exists(side));
    contents = read_file(path, &len);
    assert_true(len >= 16);
    assert_memory_equal(contents, "SQLite format 3", 16);
    free(contents);
    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), 1);
    st_reader_close(r);

    /* Without overwrite, an existing trace is refused too. */
    o.overwrite = 0;
    assert_int_equal(st_open(&trace, &o), ST_EEXIST);
    r = open_reader(path);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), 1);
    st_reader_close(r);
}

/* ---- one file, one writer ----
 * Children made with fork open the same path; each reports its st_open
 * result to the parent (code, and the message), then waits for the parent's
 * word before recording and closing, so that a winner is still writing
 * while the other tries. */

#define LOCK_RANGES 500

typedef struct lock_child {
    pid_t pid;
    int result_fd; /* read end: int code, then the message */
    int go_fd;     /* write end: one byte lets it record and close */
} lock_child;

static void child_run(const char *path, int overwrite, int start_fd, int result_fd, int go_fd)
{
    char c;
    if (start_fd >= 0 && read(start_fd, &c, 1) != 1) _exit(90);
    st_options o;
    test_options(&o, path);
    o.overwrite = overwrite;
    o.program = "lock_child";
    st_trace *t = NULL;
    int rc = st_open(&t, &o);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc == ST_OK ? "" : st_last_error());
    if (write(result_fd, &rc, sizeof rc) != (ssize_t)sizeof rc ||
        write(result_fd, msg, sizeof msg) != (ssize_t)sizeof msg)
        _exit(91);
    if (read(go_fd, &c, 1) != 1) _exit(92);
    if (rc != ST_OK) _exit(3);
    int s = st_stage_register(t, "work", ST_WORK);
    if (s < 0 || st_thread_register(t, "main", "main", -1, 0) < 0) _exit(93);
    for (int i = 0; i < LOCK_RANGES; i++) {
        st_begin((st_stage)s);
        st_end((st_stage)s);
    }
    _exit(st_close(t) == ST_OK ? 0 : 94);
}

static lock_child spawn_lock_child(const char *path, int overwrite, int start_fd)
{
    int res[2], go[2];
    assert_int_equal(pipe(res), 0);
    assert_int_equal(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(res[0]);
        close(go[1]);
        child_run(path, overwrite, start_fd, res[1], go[0]);
    }
    close(res[1]);
    close(go[0]);
    return (lock_child){pid, res[0], go[1]};
}

/* The child's st_open code, its message in msg. */
static int child_open_result(lock_child *c, char *msg, size_t size)
{
    int rc;
    char buf[512];
    assert_int_equal(read(c->result_fd, &rc, sizeof rc), (ssize_t)sizeof rc);
    assert_int_equal(read(c->result_fd, buf, sizeof buf), (ssize_t)sizeof buf);
    snprintf(msg, size, "%s", buf);
    close(c->result_fd);
    return rc;
}

static int child_finish(lock_child *c)
{
    char go = 1;
    assert_int_equal(write(c->go_fd, &go, 1), 1);
    close(c->go_fd);
    int status;
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The trace at path is a complete one written by process pid. */
static void assert_whole_trace(const char *path, pid_t pid)
{
    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_int_equal(meta_ll(r, "pid"), pid);
    assert_int_equal(meta_ll(r, "dropped_events"), 0);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), LOCK_RANGES);
    st_reader_close(r);
}

/* Two processes start on one path at once, many times, with and without
 * overwrite, on a fresh path and over a finished trace: exactly one opens
 * it, the other is refused with one line naming the path, and the winner's
 * trace is whole. */
static void test_open_race(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "race.sqlite");
    int refusals[2] = {0, 0}; /* ST_EEXIST, ST_EBUSY */
    for (int trial = 0; trial < 90; trial++) {
        /* a fresh path, without and with overwrite; a finished trace, with overwrite */
        int overwrite = trial % 3 != 0, fresh = trial % 3 != 2;
        if (fresh) remove_trace_files(path);
        int start[2];
        assert_int_equal(pipe(start), 0);
        lock_child c[2];
        for (int i = 0; i < 2; i++) c[i] = spawn_lock_child(path, overwrite, start[0]);
        close(start[0]);
        char go[2] = {1, 1};
        assert_int_equal(write(start[1], go, 2), 2); /* both at once */
        close(start[1]);
        int rc[2], winner = -1;
        char msg[2][512];
        for (int i = 0; i < 2; i++) {
            rc[i] = child_open_result(&c[i], msg[i], sizeof msg[i]);
            if (rc[i] == ST_OK) {
                if (winner >= 0) fail_msg("trial %d: both processes opened '%s'", trial, path);
                winner = i;
            }
        }
        if (winner < 0)
            fail_msg("trial %d (overwrite %d): neither opened: '%s' / '%s'", trial, overwrite, msg[0], msg[1]);
        int loser = 1 - winner;
        if (rc[loser] != ST_EBUSY && rc[loser] != ST_EEXIST)
            fail_msg("trial %d: refused with %d: %s", trial, rc[loser], msg[loser]);
        if (overwrite && rc[loser] != ST_EBUSY)
            fail_msg("trial %d: overwrite refused with %d, not ST_EBUSY: %s", trial, rc[loser], msg[loser]);
        refusals[rc[loser] == ST_EBUSY]++;
        if (!strstr(msg[loser], path) || strchr(msg[loser], '\n'))
            fail_msg("trial %d: message '%s' is not one line naming the path", trial, msg[loser]);
        if (rc[loser] == ST_EBUSY && !strstr(msg[loser], "another process"))
            fail_msg("trial %d: message '%s' does not say another process writes it", trial, msg[loser]);
        assert_int_equal(child_finish(&c[winner]), 0);
        assert_int_equal(child_finish(&c[loser]), 3);
        assert_whole_trace(path, c[winner].pid);
        char tmp[PATH_MAX + 32];
        for (int i = 0; i < 2; i++) {
            snprintf(tmp, sizeof tmp, "%s.st-new-%ld", path, (long)c[i].pid);
            assert_false(exists(tmp));
        }
    }
    assert_true(refusals[1] > 0); /* the overwrite trials at least */
}

/* A trace that another process is writing is never replaced or removed:
 * overwrite is refused (ST_EBUSY, one line), so is a plain open; the live
 * trace ends whole. Once it is finished, overwrite replaces it. */
static void test_open_live_trace(void **state)
{
    (void)state;
    char path[PATH_MAX], msg[512];
    tmp_path(path, sizeof path, "live.sqlite");
    lock_child writer = spawn_lock_child(path, 0, -1);
    assert_int_equal(child_open_result(&writer, msg, sizeof msg), ST_OK);
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    for (int overwrite = 1; overwrite >= 0; overwrite--) {
        lock_child other = spawn_lock_child(path, overwrite, -1);
        assert_int_equal(child_open_result(&other, msg, sizeof msg), ST_EBUSY);
        assert_int_equal(child_finish(&other), 3);
        if (!strstr(msg, path) || !strstr(msg, "another process") || strchr(msg, '\n'))
            fail_msg("message '%s'", msg);
        assert_int_equal(stat(path, &after), 0);
        assert_true(before.st_ino == after.st_ino);
    }
    /* In this process too (a process of its own for the library). */
    st_options o;
    test_options(&o, path);
    o.overwrite = 1;
    st_trace *t = (st_trace *)&o;
    assert_int_equal(st_open(&t, &o), ST_EBUSY);
    assert_null(t);
    assert_error_line("another process");
    assert_int_equal(child_finish(&writer), 0);
    assert_int_equal(stat(path, &after), 0);
    assert_true(before.st_ino == after.st_ino);
    assert_whole_trace(path, writer.pid);

    /* Finished: plain open refused as existing, overwrite replaces it. */
    lock_child again = spawn_lock_child(path, 0, -1);
    assert_int_equal(child_open_result(&again, msg, sizeof msg), ST_EEXIST);
    assert_int_equal(child_finish(&again), 3);
    again = spawn_lock_child(path, 1, -1);
    assert_int_equal(child_open_result(&again, msg, sizeof msg), ST_OK);
    assert_int_equal(child_finish(&again), 0);
    assert_whole_trace(path, again.pid);

    /* A trace killed mid-run holds no lock: it is replaced too. */
    lock_child killed = spawn_lock_child(path, 1, -1);
    assert_int_equal(child_open_result(&killed, msg, sizeof msg), ST_OK);
    kill(killed.pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(killed.pid, &status, 0), killed.pid);
    close(killed.go_fd);
    again = spawn_lock_child(path, 1, -1);
    assert_int_equal(child_open_result(&again, msg, sizeof msg), ST_OK);
    assert_int_equal(child_finish(&again), 0);
    assert_whole_trace(path, again.pid);
}

/* Neither a FIFO nor a device is opened, removed or replaced. */
static void test_open_not_regular(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "fifo.sqlite");
    assert_int_equal(mkfifo(path, 0644), 0);
    for (int overwrite = 0; overwrite <= 1; overwrite++) {
        st_options o;
        test_options(&o, path);
        o.overwrite = overwrite;
        st_trace *t;
        assert_int_equal(st_open(&t, &o), ST_EINVAL);
        assert_error_line("not a regular file");
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_true(S_ISFIFO(sb.st_mode));
    }
    unlink(path);
}

typedef struct bad_option {
    const char *what;
    void (*set)(st_options *o);
    const char *mention; /* in the message */
} bad_option;

static void ring_100(st_options *o) { o->ring_records = 100; }
static void ring_32(st_options *o) { o->ring_records = 32; }
static void ring_0(st_options *o) { o->ring_records = 0; }
static void ring_huge(st_options *o) { o->ring_records = 1u << 29; }
static void ring_96(st_options *o) { o->ring_records = 96; }
static void commit_0(st_options *o) { o->commit_ms = 0; }
static void commit_huge(st_options *o) { o->commit_ms = 60001; }
static void rank_eq_world(st_options *o) { o->rank = 2; o->world_size = 2; }
static void rank_negative(st_options *o) { o->rank = -1; }
static void world_0(st_options *o) { o->rank = 0; o->world_size = 0; }
static void null_path(st_options *o) { o->path = NULL; }
static void empty_path(st_options *o) { o->path = ""; }
static void nvtx_bad(st_options *o) { o->nvtx = 2; }
static void clock_bad(st_options *o) { o->clock = 7; }

static void test_open_bad_options(void **state)
{
    (void)state;
    const bad_option cases[] = {
        {"ring not a power of two", ring_100, "100"},
        {"ring too small", ring_32, "32"},
        {"ring zero", ring_0, "ring size 0"},
        {"ring too large", ring_huge, "536870912"},
        {"ring 96", ring_96, "96"},
        {"commit_ms 0", commit_0, "0 ms"},
        {"commit_ms too large", commit_huge, "60001"},
        {"rank == world_size", rank_eq_world, "rank 2"},
        {"rank < 0", rank_negative, "rank -1"},
        {"world_size 0", world_0, "world size 0"},
        {"enabled without a path", null_path, "path"},
        {"empty path", empty_path, "path"},
        {"nvtx 2", nvtx_bad, "nvtx"},
        {"clock 7", clock_bad, "clock"},
    };
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bad-options.sqlite");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_options o;
        test_options(&o, path);
        cases[i].set(&o);
        st_trace *trace = (st_trace *)&o;
        int rc = st_open(&trace, &o);
        if (rc != ST_EINVAL) fail_msg("%s: st_open returned %d, want ST_EINVAL", cases[i].what, rc);
        assert_null(trace);
        assert_error_line(cases[i].mention);
        assert_no_trace_files(path);
    }
    /* No options, no out pointer. */
    st_trace *trace;
    assert_int_equal(st_open(&trace, NULL), ST_EINVAL);
    st_options o;
    test_options(&o, path);
    assert_int_equal(st_open(NULL, &o), ST_EINVAL);
    assert_no_trace_files(path);
    /* The boundaries themselves are fine. */
    o.ring_records = 64;
    o.commit_ms = 60000;
    o.rank = 3;
    o.world_size = 4;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    char rank_file[PATH_MAX + 32]; /* world_size > 1: the rank's own file */
    snprintf(rank_file, sizeof rank_file, "%s", st_path(trace));
    assert_non_null(strstr(rank_file, "bad-options.rank3.sqlite"));
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(rank_file);
    assert_meta(r, "ring_records", "64");
    assert_meta(r, "commit_ms", "60000");
    assert_meta(r, "rank", "3");
    assert_meta(r, "world_size", "4");
    st_reader_close(r);
}

static void test_second_open_fails(void **state)
{
    (void)state;
    char first[PATH_MAX], second[PATH_MAX];
    tmp_path(first, sizeof first, "first.sqlite");
    tmp_path(second, sizeof second, "second.sqlite");
    st_options o;
    test_options(&o, first);
    st_trace *a, *b = (st_trace *)&o;
    assert_int_equal(st_open(&a, &o), ST_OK);
    test_options(&o, second);
    assert_int_equal(st_open(&b, &o), ST_ESTATE);
    assert_null(b);
    assert_error_line("already open");
    assert_no_trace_files(second);
    /* The first trace is unharmed. */
    int s = st_stage_register(a, "s", ST_WORK);
    assert_true(st_thread_register(a, "main", "main", -1, 0) >= 0);
    st_begin((st_stage)s);
    st_end((st_stage)s);
    assert_int_equal(st_close(a), ST_OK);
    st_reader *r = open_reader(first);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT sum(n_ranges) FROM range_chunks"), 1);
    st_reader_close(r);
    /* Once closed, another may be opened. */
    assert_int_equal(st_open(&b, &o), ST_OK);
    assert_int_equal(st_close(b), ST_OK);
    assert_int_equal(st_close(NULL), ST_OK);
}

static void test_registration_errors(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "registration.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);

    assert_int_equal(st_stage_register(trace, "", ST_WORK), ST_EINVAL);
    assert_error_line("empty");
    assert_int_equal(st_stage_register(trace, NULL, ST_WORK), ST_EINVAL);
    assert_int_equal(st_stage_register(trace, "odd", (st_kind)99), ST_EINVAL);
    assert_error_line("odd");
    assert_int_equal(st_stage_register(NULL, "x", ST_WORK), ST_EINVAL);
    /* Names are at most ST_NAME_MAX bytes, so that readers take the trace back. */
    char long_name[ST_NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[ST_NAME_MAX + 1] = '\0';
    assert_int_equal(st_stage_register(trace, long_name, ST_WORK), ST_EINVAL);
    assert_error_line("longer than 256 bytes");
    assert_int_equal(st_counter_register(trace, long_name, "x"), ST_EINVAL);
    assert_int_equal(st_counter_register(trace, "x", long_name), ST_EINVAL);
    assert_int_equal(st_thread_register(trace, long_name, "main", -1, 0), ST_EINVAL);
    assert_int_equal(st_thread_register(trace, "main", long_name, -1, 0), ST_EINVAL);
    assert_error_line("longer than 256 bytes");
    int fwd = st_stage_register(trace, "forward", ST_WORK);
    int wait = st_stage_register(trace, "queue_wait", ST_WAIT_INPUT);
    assert_int_equal(fwd, 0);
    assert_int_equal(wait, 1);
    assert_int_equal(st_stage_register(trace, "forward", ST_WORK), fwd);
    assert_int_equal(st_stage_register(trace, "queue_wait", ST_WAIT_INPUT), wait);
    assert_int_equal(st_stage_register(trace, "forward", ST_SYNC), ST_EINVAL);
    assert_error_line("forward");
    assert_int_equal(st_stage_register(trace, "forward", ST_WORK), fwd); /* still there */

    assert_int_equal(st_counter_register(trace, "", "bytes"), ST_EINVAL);
    assert_int_equal(st_counter_register(trace, NULL, "bytes"), ST_EINVAL);
    assert_int_equal(st_counter_register(NULL, "depth", "items"), ST_EINVAL);
    int depth = st_counter_register(trace, "depth", "items");
    assert_int_equal(depth, 0);
    assert_int_equal(st_counter_register(trace, "depth", "items"), depth);
    assert_int_equal(st_counter_register(trace, "bytes", NULL), 1);

    assert_int_equal(st_thread_register(trace, "", "main", -1, 0), ST_EINVAL);
    assert_int_equal(st_thread_register(trace, NULL, "main", -1, 0), ST_EINVAL);
    assert_int_equal(st_thread_register(NULL, "main", "main", -1, 0), ST_EINVAL);
    int tid = st_thread_register(trace, "main", NULL, 2, 0);
    assert_int_equal(tid, 0);
    assert_int_equal(st_thread_register(trace, "again", "main", -1, 0), ST_ESTATE);
    assert_error_line("again");
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_reader(path);
    assert_int_equal(st_reader_n_stages(r), 2);
    assert_string_equal(st_reader_stage(r, 0)->name, "forward");
    assert_int_equal(st_reader_stage(r, 0)->kind, ST_WORK);
    assert_string_equal(st_reader_stage(r, 1)->name, "queue_wait");
    assert_int_equal(st_reader_stage(r, 1)->kind, ST_WAIT_INPUT);
    assert_int_equal(st_reader_n_counters(r), 2);
    assert_string_equal(st_reader_counter(r, 0)->unit, "items");
    assert_string_equal(st_reader_counter(r, 1)->unit, "");
    assert_int_equal(st_reader_n_threads(r), 1);
    assert_string_equal(st_reader_thread(r, 0)->name, "main");
    assert_string_equal(st_reader_thread(r, 0)->role, "other");
    assert_int_equal(st_reader_thread(r, 0)->device, 2);
    st_reader_close(r);
}

static void *disabled_worker(void *arg)
{
    st_trace *trace = arg;
    st_thread_register(trace, "worker", "worker", -1, 0);
    for (int i = 0; i < 1000; i++) {
        st_begin(0);
        st_counter_set(0, i);
        st_end(0);
    }
    st_thread_unregister();
    return NULL;
}

static void test_disabled_trace(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "disabled.sqlite");
    st_options o;
    test_options(&o, path);
    o.enabled = 0;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_non_null(trace);
    assert_int_equal(st_enabled(trace), 0);
    int s = st_stage_register(trace, "work", ST_WORK);
    assert_true(s >= 0);
    assert_int_equal(st_stage_register(trace, "work", ST_WORK), s);
    assert_true(st_counter_register(trace, "c", "") >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    for (int i = 0; i < 100000; i++) {
        st_begin((st_stage)s);
        st_counter_set(0, i);
        st_mark("mark");
        st_end((st_stage)s);
        st_end((st_stage)s); /* unmatched: nothing to count either */
    }
    st_step(0, 0);
    st_step(1, 100);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, disabled_worker, trace), 0);
    pthread_join(th, NULL);
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 0);
    assert_no_trace_files(path);
    assert_int_equal(st_close(trace), ST_OK);
    assert_no_trace_files(path);

    /* Disabled needs no path; and it does not count as the open trace. */
    o.path = NULL;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st_trace *enabled;
    test_options(&o, path);
    assert_int_equal(st_open(&enabled, &o), ST_OK);
    assert_int_equal(st_close(enabled), ST_OK);
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    st_reader_close(r);
}

/* ---- unmatched ends, unregistered threads ---- */

typedef struct stray {
    st_stage s;
    st_counter c;
} stray;

static void *unregistered_worker(void *arg)
{
    stray *x = arg;
    for (int i = 0; i < 10000; i++) {
        st_begin(x->s);
        st_counter_set(x->c, i);
        st_mark("stray");
        st_end(x->s);
        st_end(x->s);
    }
    st_step(1000, 1);
    st_thread_unregister(); /* harmless when not registered */
    return NULL;
}

static void test_unmatched_and_unregistered(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "unmatched.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int a = st_stage_register(trace, "a", ST_WORK);
    int b = st_stage_register(trace, "b", ST_COPY);
    int c = st_counter_register(trace, "c", "");
    assert_true(a >= 0 && b >= 0 && c >= 0);

    /* Before registering, the main thread records nothing. */
    st_begin((st_stage)a);
    st_end((st_stage)a);
    stray x = {(st_stage)a, (st_counter)c};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, unregistered_worker, &x), 0);
    pthread_join(th, NULL);

    assert_int_equal(st_thread_register(trace, "main", "main", -1, 0), 0);
    st_end((st_stage)a); /* three ends with nothing open */
    st_end((st_stage)b);
    st_end((st_stage)a);
    st_begin((st_stage)a); /* a range ended with the wrong stage: it ends a */
    st_end((st_stage)b);
    st_begin((st_stage)a);
    st_begin((st_stage)b);
    st_end((st_stage)b);
    st_end((st_stage)a);
    st_end((st_stage)a); /* a fourth end with nothing open */
    assert_int_equal(st_flush(trace), ST_OK);
    assert_int_equal(st_dropped(trace), 0); /* no ring was full */
    /* After unregistering, calls are ignored again; a range left open is
     * simply not a completed range. */
    st_begin((st_stage)b);
    st_thread_unregister();
    st_end((st_stage)b);
    st_begin((st_stage)a);
    st_end((st_stage)a);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_int_equal(st_reader_n_threads(r), 1);
    assert_meta(r, "dropped_events", "0");
    assert_int_equal(meta_ll(r, "unmatched_ends"), 4 + 1);
    assert_int_equal(st_reader_thread(r, 0)->dropped, 0);
    assert_int_equal(st_reader_n_steps(r), 0);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT count(*) FROM marks"), 0);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT count(*) FROM counter_chunks"), 0);
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    const uint32_t want_stage[] = {(uint32_t)a, (uint32_t)b, (uint32_t)a};
    const uint32_t want_depth[] = {0, 1, 0};
    int n = 0;
    while (st_range_iter_next(ri, &rg) == 1) {
        assert_true(n < 3);
        assert_int_equal(rg.thread, 0);
        assert_int_equal(rg.stage, want_stage[n]);
        assert_int_equal(rg.depth, want_depth[n]);
        n++;
    }
    assert_int_equal(n, 3);
    st_range_iter_close(ri);
    /* The begin left open is stored as an event, without an end. */
    st_event_iter *ei;
    assert_int_equal(st_event_iter_open(&ei, r, 0), ST_OK);
    st_event ev;
    int events = 0;
    while (st_event_iter_next(ei, &ev) == 1) events++;
    assert_int_equal(events, 7);
    assert_false(ev.is_end);
    assert_int_equal(ev.stage, (uint32_t)b);
    st_event_iter_close(ei);
    st_reader_close(r);
}

/* A stage id that was never registered (a program error) must not make the
 * trace unreadable: a reader rejects chunks naming stages the file lacks. */
static void test_unregistered_stage_id(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "stray-stage.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int a = st_stage_register(trace, "a", ST_WORK);
    assert_int_equal(a, 0);
    assert_int_equal(st_thread_register(trace, "main", "main", -1, 0), 0);
    st_begin((st_stage)a);
    st_begin(4000); /* inside a: a's range must survive */
    st_end(4000);
    st_end((st_stage)a);
    st_begin(ST_MAX_STAGES + 7);
    st_begin((st_stage)a); /* inside the stray one */
    st_end((st_stage)a);
    st_end(ST_MAX_STAGES + 7);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_reader(path);
    assert_int_equal(st_reader_n_stages(r), 1);
    assert_meta(r, "unmatched_ends", NULL);
    assert_int_equal(meta_ll(r, "dropped_events"), (long long)st_reader_thread(r, 0)->dropped);
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    int n = 0, rc;
    while ((rc = st_range_iter_next(ri, &rg)) == 1) {
        assert_int_equal(rg.stage, (uint32_t)a);
        assert_int_equal(rg.depth, 0);
        n++;
    }
    if (rc != 0) fail_msg("reading ranges: %s", st_last_error());
    assert_int_equal(n, 2);
    st_range_iter_close(ri);
    st_reader_close(r);
}

/* Calls from unregistered threads are reported through options.log and the
 * calling thread's st_last_error(): once per thread and trace, whichever
 * call comes first (st_begin, st_step, st_counter_set, st_mark; st_end
 * alone is not), inline or through the exported functions; never for a
 * registered thread, a disabled trace, or after st_close. */
typedef struct unreg_log {
    int n, levels[8];
    char lines[8][512];
} unreg_log;

static void unreg_collect(int level, const char *msg, void *arg)
{
    unreg_log *l = arg;
    if (l->n < 8) {
        l->levels[l->n] = level;
        snprintf(l->lines[l->n], sizeof l->lines[0], "%s", msg);
    }
    l->n++;
}

static char unreg_error[512];
static void *unreg_step_worker(void *arg)
{
    (void)arg;
    st_step(3, 0);
    st_step(4, 0);
    st_begin(0);
    snprintf(unreg_error, sizeof unreg_error, "%s", st_last_error());
    return NULL;
}

static void test_unregistered_calls_reported(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "unreg-log.sqlite");
    st_options o;
    test_options(&o, path);
    unreg_log seen = {0};
    o.log = unreg_collect;
    o.log_arg = &seen;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int a = st_stage_register(trace, "a", ST_WORK);
    assert_true(a >= 0);
    st_end((st_stage)a); /* an end alone: not reported */
    assert_int_equal(seen.n, 0);
    st_begin((st_stage)a); /* main, unregistered: reported once */
    st_end((st_stage)a);
    st_step(1, 0);
    st_mark("m");
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.levels[0], ST_LOG_WARNING);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "trace '%s': st_begin called from thread ", path);
    if (strncmp(seen.lines[0], want, strlen(want)) ||
        !strstr(seen.lines[0], ", which is not registered (st_thread_register): its calls are not recorded"))
        fail_msg("unexpected report: %s", seen.lines[0]);
    if (!strstr(st_last_error(), "st_begin called from thread ")) fail_msg("st_last_error: %s", st_last_error());

    pthread_t th; /* another thread: reported once, for its first call */
    assert_int_equal(pthread_create(&th, NULL, unreg_step_worker, NULL), 0);
    pthread_join(th, NULL);
    assert_int_equal(seen.n, 2);
    if (!strstr(seen.lines[1], "': st_step called from thread ")) fail_msg("unexpected report: %s", seen.lines[1]);
    if (!strstr(unreg_error, "st_step called from thread ")) fail_msg("worker's st_last_error: %s", unreg_error);

    assert_int_equal(st_thread_register(trace, "main", "main", -1, 0), 0);
    st_step(0, 0);
    st_begin((st_stage)a);
    st_end((st_stage)a);
    st_step(1, 0);
    assert_int_equal(seen.n, 2); /* registered: nothing to say */
    assert_int_equal(st_close(trace), ST_OK);
    st_begin((st_stage)a); /* no trace open */
    st_step(2, 0);
    assert_int_equal(seen.n, 2);

    /* A second trace reports the main thread again; a disabled one never. */
    tmp_path(path, sizeof path, "unreg-log2.sqlite");
    test_options(&o, path);
    o.log = unreg_collect;
    o.log_arg = &seen;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st_counter_set(0, 1.0);
    assert_int_equal(seen.n, 3);
    if (!strstr(seen.lines[2], "': st_counter_set called from thread ")) fail_msg("unexpected report: %s", seen.lines[2]);
    assert_int_equal(st_close(trace), ST_OK);
    o.enabled = 0;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st_begin(0);
    st_step(1, 0);
    assert_int_equal(st_close(trace), ST_OK);
    assert_int_equal(seen.n, 3);
}

/* A step or a token count beyond the signed 64-bit columns is rejected and counted, like a
 * step out of order; the rest of the trace stays readable. */
static void test_steps_beyond_int64(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "steps-int64.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_step(0, 0);
    st_step(1, 10);
    st_step((uint64_t)INT64_MAX + 1, 1); /* rejected: the step */
    st_step(2, UINT64_MAX);              /* rejected: the tokens */
    st_step(3, (uint64_t)INT64_MAX);     /* the largest token count kept */
    st_step((uint64_t)INT64_MAX, 30);    /* the largest step kept */
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_meta(r, "rejected_steps", "2");
    assert_int_equal(st_reader_n_steps(r), 4);
    assert_true(st_reader_step(r, 2)->step == 3);
    assert_true(st_reader_step(r, 2)->tokens == (uint64_t)INT64_MAX);
    assert_true(st_reader_step(r, 3)->step == (uint64_t)INT64_MAX);
    assert_true(st_reader_step(r, 3)->tokens == 30);
    st_reader_close(r);
}

/* ---- st_meta_set ---- */

static void *meta_from_thread(void *arg)
{
    return (void *)(intptr_t)st_meta_set(arg, "app_other_thread", "yes");
}

static void test_meta_set(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "meta-set.sqlite");
    st_options o;
    test_options(&o, path);
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_int_equal(st_meta_set(trace, "python_stacks", "none"), ST_OK);
    assert_int_equal(st_meta_set(trace, "python_stacks", "perf-trampoline"), ST_OK); /* the last wins */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, meta_from_thread, trace), 0);
    void *thread_rc;
    pthread_join(th, &thread_rc);
    assert_int_equal((intptr_t)thread_rc, ST_OK);
    const char *refused[] = {"status", "end_ns", "cpu_mode", "cpu_python", "clock_offset_ns", "gpu_x",
                             "Upper", "has-dash", "", "a234567890123456789012345678901234567890123456789012345678901234X"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        assert_int_equal(st_meta_set(trace, refused[i], "x"), ST_EINVAL);
    assert_int_equal(st_meta_set(trace, NULL, "x"), ST_EINVAL);
    assert_int_equal(st_meta_set(trace, "app_null", NULL), ST_EINVAL);
    assert_int_equal(st_meta_set(NULL, "app_x", "x"), ST_ESTATE);
    char big[4098];
    memset(big, 'v', sizeof big);
    big[4097] = '\0';
    assert_int_equal(st_meta_set(trace, "app_big", big), ST_EINVAL);
    big[4096] = '\0';
    assert_int_equal(st_meta_set(trace, "app_big", big), ST_OK); /* 4096 bytes: the most */
    for (int i = 3; i < 32; i++) {
        char key[16];
        snprintf(key, sizeof key, "app_k%d", i);
        assert_int_equal(st_meta_set(trace, key, "k"), ST_OK);
    }
    assert_int_equal(st_meta_set(trace, "app_one_too_many", "k"), ST_ELIMIT);
    assert_int_equal(st_meta_set(trace, "app_k3", "again"), ST_OK); /* a known key still */
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_meta(r, "python_stacks", "perf-trampoline");
    assert_meta(r, "app_other_thread", "yes");
    assert_meta(r, "app_k3", "again");
    assert_meta(r, "app_k31", "k");
    assert_meta(r, "status", "complete");
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(st_reader_db(r),
                                        "SELECT count(*) FROM meta WHERE key LIKE 'app_%' OR key = 'cpu_python' "
                                        "OR key = 'gpu_x' OR length(value) = 4096",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 31); /* app_other_thread, app_big, app_k3..app_k31 */
    sqlite3_finalize(st);
    st_reader_close(r);
}

/* ---- flows ---- */

#define FLOW_N 12000 /* ~60 KB of records: more than one flow chunk per thread */

static void *flow_producer(void *arg)
{
    st_trace *trace = arg;
    assert_true(st_thread_register(trace, "producer", "loader", -1, 0) >= 0);
    for (uint64_t i = 0; i < FLOW_N; i++) st_flow_out(i << 40 | 7);
    st_flow_out(UINT64_MAX);
    st_thread_unregister();
    return NULL;
}

/* st_flow_out on one thread, st_flow_in on another: every record reaches
 * flow_chunks in order with its thread, direction and id (ids up to
 * 2^64-1), through the reader and through the SQL table `flows`; a trace
 * without flows has no flow_chunks and reads as having none; an
 * unregistered thread's st_flow_in is reported like st_begin. */
static void test_flows_recorded(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "flows.sqlite");
    st_options o;
    test_options(&o, path);
    unreg_log seen = {0};
    o.log = unreg_collect;
    o.log_arg = &seen;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st_flow_in(1); /* not registered yet: reported, not recorded */
    assert_int_equal(seen.n, 1);
    if (!strstr(seen.lines[0], "': st_flow_in called from thread ")) fail_msg("unexpected report: %s", seen.lines[0]);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flow_producer, trace), 0);
    pthread_join(th, NULL);
    assert_true(st_thread_register(trace, "consumer", "drafter", -1, 0) >= 0);
    for (uint64_t i = 0; i < FLOW_N; i++) st_flow_in(i << 40 | 7);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r = open_complete_trace(path);
    assert_int_equal(st_reader_has_flows(r), 1);
    const st_thread_info *prod = thread_named(r, "producer"), *cons = thread_named(r, "consumer");
    assert_non_null(prod);
    assert_non_null(cons);
    st_flow_iter *it;
    assert_int_equal(st_flow_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_flow_row f;
    uint64_t n_out = 0, n_in = 0;
    int64_t prev = INT64_MIN, last_out = 0, first_in = INT64_MAX;
    uint32_t prev_thread = UINT32_MAX;
    int rc;
    while ((rc = st_flow_iter_next(it, &f)) == 1) {
        if (f.thread == prod->id) {
            assert_int_equal(f.dir, ST_FLOW_OUT);
            if (n_out < FLOW_N) assert_true(f.id == (n_out << 40 | 7));
            else assert_true(f.id == UINT64_MAX);
            n_out++;
            last_out = f.ts_ns;
        } else {
            assert_int_equal(f.thread, cons->id);
            assert_int_equal(f.dir, ST_FLOW_IN);
            assert_true(f.id == (n_in << 40 | 7));
            if (n_in == 0) first_in = f.ts_ns;
            n_in++;
        }
        if (f.thread == prev_thread) assert_true(f.ts_ns >= prev); /* per thread, in time */
        prev = f.ts_ns;
        prev_thread = f.thread;
    }
    assert_int_equal(rc, 0);
    st_flow_iter_close(it);
    assert_int_equal(n_out, FLOW_N + 1);
    assert_int_equal(n_in, FLOW_N);
    assert_true(first_in >= last_out);
    /* one thread, a window */
    assert_int_equal(st_flow_iter_open(&it, r, cons->id, first_in, first_in + 1), ST_OK);
    assert_int_equal(st_flow_iter_next(it, &f), 1);
    assert_true(f.id == 7 && f.dir == ST_FLOW_IN && f.ts_ns == first_in);
    st_flow_iter_close(it);
    sqlite3 *db = st_reader_db(r);
    assert_true(sql_int(db, "SELECT count(*) FROM flow_chunks WHERE thread = (SELECT id FROM threads WHERE name = 'producer')") >= 2);
    assert_int_equal(sql_int(db, "SELECT sum(n_records) FROM flow_chunks"), 2 * FLOW_N + 1);
    uint32_t cons_id = cons->id; /* cons lives in the reader */
    st_reader_close(r);

    sqlite3 *conn;
    assert_int_equal(sqlite3_open_v2(path, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(st_sql_register(conn), ST_OK);
    assert_int_equal(sql_int(conn, "SELECT count(*) FROM flows WHERE dir = 'out'"), FLOW_N + 1);
    assert_int_equal(sql_int(conn, "SELECT count(*) FROM flows WHERE dir = 'in'"), FLOW_N);
    assert_int_equal(sql_int(conn, "SELECT id FROM flows WHERE dir = 'out' ORDER BY ts_ns DESC, rowid DESC LIMIT 1"), -1);
    /* every in pairs with an out of the same id, later or at the same time */
    assert_int_equal(sql_int(conn, "SELECT count(*) FROM flows AS i JOIN flows AS o ON o.id = i.id AND o.dir = 'out' "
                                   "WHERE i.dir = 'in' AND i.ts_ns >= o.ts_ns"),
                     FLOW_N);
    assert_int_equal(sql_intf(conn, "SELECT count(*) FROM flows WHERE thread = %u AND ts_ns >= %lld", cons_id,
                              (long long)first_in),
                     FLOW_N);
    sqlite3_close(conn);

    /* No flows: no table, none read. */
    tmp_path(path, sizeof path, "noflows.sqlite");
    test_options(&o, path);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    st_step(0, 0);
    assert_int_equal(st_close(trace), ST_OK);
    r = open_complete_trace(path);
    assert_int_equal(sql_int(st_reader_db(r), "SELECT count(*) FROM sqlite_schema WHERE name = 'flow_chunks'"), 0);
    assert_int_equal(st_reader_has_flows(r), 0);
    assert_int_equal(st_flow_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    assert_int_equal(st_flow_iter_next(it, &f), 0);
    st_flow_iter_close(it);
    st_reader_close(r);
}

/* st_signal_flush's status codes: ST_ESTATE with no trace or a disabled one,
 * ST_ETIMEDOUT when the writer answers too late (a slow writer with records
 * pending; the request stays and the trace still ends "interrupted"), ST_OK
 * when it answers in time. */
static void test_signal_flush_codes(void **state)
{
    (void)state;
    assert_int_equal(st_signal_flush(10), ST_ESTATE);
    char path[PATH_MAX];
    st_options o;
    tmp_path(path, sizeof path, "sigflush-off.sqlite");
    test_options(&o, path);
    o.enabled = 0;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    assert_int_equal(st_signal_flush(10), ST_ESTATE);
    assert_int_equal(st_close(trace), ST_OK);

    tmp_path(path, sizeof path, "sigflush.sqlite");
    test_options(&o, path);
    o.ring_records = 64;
    o.commit_ms = 60000;
    st__test_set_writer_delay(300000);
    assert_int_equal(st_open(&trace, &o), ST_OK);
    st__test_set_writer_delay(0);
    int s = st_stage_register(trace, "work", ST_WORK);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);
    for (int i = 0; i < 20; i++) {
        st_begin((st_stage)s);
        st_end((st_stage)s);
    }
    assert_int_equal(st_signal_flush(20), ST_ETIMEDOUT);
    assert_int_equal(st_signal_flush(-1), ST_OK);
    assert_int_equal(st_close(trace), ST_OK);
    st_reader *r = open_reader(path);
    assert_meta(r, "status", "interrupted");
    st_reader_close(r);
}

int main(void)
{
    if (make_tmp_dir("test_tracer")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rings_every_event_once_in_order),
        cmocka_unit_test(test_two_slot_records_whole),
        cmocka_unit_test(test_ring_counts_slots),
        cmocka_unit_test(test_fast_and_general_paths),
        cmocka_unit_test(test_drops_counted_exactly_flat),
        cmocka_unit_test(test_drops_counted_exactly_nested),
        cmocka_unit_test(test_nesting_beyond_256),
        cmocka_unit_test(test_blocking_ring_deeper_than_ring),
        cmocka_unit_test(test_open_unwritable_paths),
        cmocka_unit_test(test_open_existing_file),
        cmocka_unit_test(test_open_race),
        cmocka_unit_test(test_open_live_trace),
        cmocka_unit_test(test_open_not_regular),
        cmocka_unit_test(test_open_bad_options),
        cmocka_unit_test(test_second_open_fails),
        cmocka_unit_test(test_registration_errors),
        cmocka_unit_test(test_disabled_trace),
        cmocka_unit_test(test_unmatched_and_unregistered),
        cmocka_unit_test(test_dropped_counts_live),
        cmocka_unit_test(test_unregistered_stage_id),
        cmocka_unit_test(test_signal_flush_codes),
        cmocka_unit_test(test_unregistered_calls_reported),
        cmocka_unit_test(test_steps_beyond_int64),
        cmocka_unit_test(test_flows_recorded),
        cmocka_unit_test(test_meta_set),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
