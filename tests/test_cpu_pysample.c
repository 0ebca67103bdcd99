/* test_cpu_pysample.c: st_cpu_sample_add (stagetrace.h; tracer/cpu_pysample.c
 * and cpu_record.c's st_cpurec_pysamples), the samples an interpreter takes
 * of its own threads' stacks, read back through the reader.
 *
 *  - arguments: a NULL trace, NULL frames with n_frames > 0, n_frames of
 *    257 and SIZE_MAX (refused before any frame is read), a NULL qualname,
 *    a negative line, unknown flags, os tids 0, -1 and one no registered
 *    thread has (an unregistered thread of this process), a time before the
 *    thread registered and one after the call: ST_EINVAL, each with its
 *    message; a trace opened without opt.cpu, and a closed one: ST_ESTATE;
 *  - attribution and order: the registered thread runs stage outer, inside
 *    it inner, then outer alone, then nothing, the test noting st_now_ns()
 *    within each; samples are added for those times in reverse order, from
 *    another (unregistered) thread, after the ranges' events were written:
 *    the reader gives them in time order, as ST_CPU_ROW_PY_SAMPLE rows with
 *    source ST_CPU_SOURCE_PYTHON_FRAMES, each in the stage open at its time
 *    (inner, outer, outer, none), with the frames as given, innermost first,
 *    named "py::QUALNAME:FILE" with sym_offset the line (lines of 2^20 and
 *    more as 0), a 600-byte name cut to 512 bytes and a control byte as '?';
 *    an empty stack is kept (0 frames); one with ST_CPU_SAMPLE_NOW is
 *    stamped between the times read before and after the call;
 *  - the bound: with the writer slowed (st__test_set_writer_delay) samples
 *    of 256 frames with 1 KiB of names each fill the 4 MiB queue: the calls
 *    that return 1 are exactly meta python_frames_lost, those that return
 *    0 exactly python_frames_samples and the rows read, and some were lost;
 *  - the encoding: kinds 10 and 11 give docs/trace-format.md's example bytes
 *    and decode back; every truncation and a kind of 12 are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_testing.h"
#include "stagetrace_reader.h"

static int gettid_(void) { return (int)syscall(SYS_gettid); }

static st_trace *open_cpu(const char *name, int cpu)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, name);
    st_options opt;
    test_options(&opt, path);
    opt.cpu = cpu;
    opt.cpu_period_ns = UINT64_MAX; /* switch records only: no kernel samples beside ours */
    st_trace *t = NULL;
    assert_int_equal(st_open(&t, &opt), ST_OK);
    return t;
}

static void assert_error(int rc, int want, const char *text)
{
    assert_int_equal(rc, want);
    if (!strstr(st_last_error(), text)) fail_msg("message '%s' lacks '%s'", st_last_error(), text);
}

static int other_tid;
static pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t other_cond = PTHREAD_COND_INITIALIZER;
static int other_done;

static void *other_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&other_lock);
    other_tid = gettid_();
    pthread_cond_broadcast(&other_cond);
    while (!other_done) pthread_cond_wait(&other_cond, &other_lock);
    pthread_mutex_unlock(&other_lock);
    return NULL;
}

static void test_arguments(void **state)
{
    (void)state;
    st_py_frame f[1] = {{"fn", "f.py", 3}};
    assert_error(st_cpu_sample_add(NULL, gettid_(), 0, f, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "trace is NULL");

    st_trace *plain = open_cpu("plain.sqlite", 0);
    assert_int_equal(st_thread_register(plain, "main", "main", -1, 0), 0);
    assert_error(st_cpu_sample_add(plain, gettid_(), 0, f, 1, ST_CPU_SAMPLE_NOW), ST_ESTATE, "CPU capture");
    assert_int_equal(st_close(plain), ST_OK);

    int64_t before_register = st_now_ns();
    st_trace *t = open_cpu("args.sqlite", 1);
    assert_int_equal(st_thread_register(t, "main", "main", -1, 0), 0);
    pthread_t other;
    other_done = 0;
    assert_int_equal(pthread_create(&other, NULL, other_thread, NULL), 0);
    pthread_mutex_lock(&other_lock);
    while (!other_tid) pthread_cond_wait(&other_cond, &other_lock);
    pthread_mutex_unlock(&other_lock);
    int me = gettid_();
    assert_error(st_cpu_sample_add(t, me, 0, NULL, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "frames is NULL");
    assert_error(st_cpu_sample_add(t, me, 0, f, ST_CPU_SAMPLE_MAX_FRAMES + 1, ST_CPU_SAMPLE_NOW), ST_EINVAL,
                 "more than 256");
    assert_error(st_cpu_sample_add(t, me, 0, f, SIZE_MAX, ST_CPU_SAMPLE_NOW), ST_EINVAL, "more than 256");
    assert_error(st_cpu_sample_add(t, me, 0, NULL, SIZE_MAX, 0), ST_EINVAL, "more than 256");
    st_py_frame noname[2] = {{"ok", NULL, 0}, {NULL, "x.py", 1}};
    assert_error(st_cpu_sample_add(t, me, 0, noname, 2, ST_CPU_SAMPLE_NOW), ST_EINVAL, "frame 1 has no qualname");
    st_py_frame negative[1] = {{"fn", "f.py", -2}};
    assert_error(st_cpu_sample_add(t, me, 0, negative, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "frame 0 has line -2");
    assert_error(st_cpu_sample_add(t, me, 0, f, 1, 2), ST_EINVAL, "unknown flags 0x2");
    assert_error(st_cpu_sample_add(t, 0, 0, f, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "is not a thread id");
    assert_error(st_cpu_sample_add(t, -1, 0, f, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "is not a thread id");
    assert_error(st_cpu_sample_add(t, other_tid, 0, f, 1, ST_CPU_SAMPLE_NOW), ST_EINVAL, "not a thread registered");
    assert_error(st_cpu_sample_add(t, me, before_register, f, 1, 0), ST_EINVAL, "before thread 0's capture began");
    assert_error(st_cpu_sample_add(t, me, INT64_MIN, f, 1, 0), ST_EINVAL, "before thread 0's capture began");
    assert_error(st_cpu_sample_add(t, me, st_now_ns() + 1000000000, f, 1, 0), ST_EINVAL, "is after now");
    assert_error(st_cpu_sample_add(t, me, INT64_MAX, f, 1, 0), ST_EINVAL, "is after now");
    /* the refusals stored nothing; a good one is stored */
    assert_int_equal(st_cpu_sample_add(t, me, 0, f, 1, ST_CPU_SAMPLE_NOW), ST_OK);
    assert_int_equal(st_cpu_sample_add(t, me, st_now_ns(), NULL, 0, 0), ST_OK); /* an empty stack */
    assert_int_equal(st_close(t), ST_OK);
    assert_error(st_cpu_sample_add(t, me, 0, f, 1, ST_CPU_SAMPLE_NOW), ST_ESTATE, "CPU capture");
    pthread_mutex_lock(&other_lock);
    other_done = 1;
    pthread_cond_broadcast(&other_cond);
    pthread_mutex_unlock(&other_lock);
    pthread_join(other, NULL);
    other_tid = 0;
    st_reader *r = open_complete_trace(tmp_file("args.sqlite"));
    assert_int_equal(meta_ll(r, "python_frames_samples"), 2);
    assert_int_equal(meta_ll(r, "python_frames_lost"), 0);
    st_reader_close(r);
}

/* ---- attribution and order ---- */

enum { OUTER, INNER };

typedef struct added {
    int64_t ts;
    const st_py_frame *frames;
    size_t n;
} added;

static st_trace *att_trace;
static int att_tid;
static added att[4];

static void *add_reversed(void *arg)
{
    (void)arg;
    for (int i = 3; i >= 0; i--)
        if (st_cpu_sample_add(att_trace, att_tid, att[i].ts, att[i].frames, att[i].n, 0) != ST_OK) return (void *)1;
    return NULL;
}

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

static void test_attribution(void **state)
{
    (void)state;
    char long_name[601];
    memset(long_name, 'q', 600);
    long_name[600] = 0;
    static const st_py_frame in_inner[3] = {{"Model.leaf", "/m/model.py", 42}, {"Model.forward", "/m/model.py", 7},
                                            {"<module>", "/m/main.py", 1}};
    static const st_py_frame in_outer[2] = {{"step\x01x", "/m/main.py", 1u << 20}, {"<module>", "/m/main.py", 2}};
    st_py_frame in_outer2[1] = {{long_name, "", 5}};
    att_trace = open_cpu("order.sqlite", 1);
    assert_int_equal(st_stage_register(att_trace, "outer", ST_WORK), OUTER);
    assert_int_equal(st_stage_register(att_trace, "inner", ST_WORK), INNER);
    assert_int_equal(st_thread_register(att_trace, "main", "main", -1, 0), 0);
    att_tid = gettid_();
    st_begin(OUTER);
    sleep_ms(2);
    st_begin(INNER);
    sleep_ms(2);
    att[0] = (added){st_now_ns(), in_inner, 3};
    sleep_ms(2);
    st_end(INNER);
    sleep_ms(2);
    att[1] = (added){st_now_ns(), in_outer, 2};
    sleep_ms(2);
    att[2] = (added){st_now_ns(), in_outer2, 1};
    sleep_ms(2);
    st_end(OUTER);
    sleep_ms(2);
    att[3] = (added){st_now_ns(), NULL, 0};
    sleep_ms(20); /* the events are encoded before the samples come */
    pthread_t adder;
    assert_int_equal(pthread_create(&adder, NULL, add_reversed, NULL), 0);
    void *rc;
    pthread_join(adder, &rc);
    assert_null(rc);
    int64_t t0 = st_now_ns();
    static const st_py_frame now_frames[1] = {{"later", "/m/main.py", 9}};
    assert_int_equal(st_cpu_sample_add(att_trace, att_tid, 0, now_frames, 1, ST_CPU_SAMPLE_NOW), ST_OK);
    int64_t t1 = st_now_ns();
    assert_int_equal(st_close(att_trace), ST_OK);

    st_reader *r = open_complete_trace(tmp_file("order.sqlite"));
    assert_int_equal(meta_ll(r, "python_frames_samples"), 5);
    st_cpu_iter *it;
    assert_int_equal(st_cpu_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_cpu_row row;
    int n = 0, ok;
    const int32_t want_stage[5] = {INNER, OUTER, OUTER, -1, -1};
    int64_t last = INT64_MIN;
    while ((ok = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != ST_CPU_ROW_PY_SAMPLE) {
            assert_true(row.kind != ST_CPU_ROW_SAMPLE); /* no kernel samples: period UINT64_MAX */
            continue;
        }
        assert_true(n < 5);
        assert_int_equal(row.source, ST_CPU_SOURCE_PYTHON_FRAMES);
        assert_true(row.ts_ns >= last);
        last = row.ts_ns;
        assert_int_equal(row.stage, want_stage[n]);
        assert_int_equal(row.stage_from_ranges, 0);
        if (n < 4) assert_int_equal(row.ts_ns, att[n].ts);
        else assert_true(row.ts_ns >= t0 && row.ts_ns <= t1);
        const uint64_t *frames;
        uint32_t nf;
        assert_int_equal(st_reader_cpu_stack(r, row.stack, &frames, &nf), ST_OK);
        const st_py_frame *given = n < 4 ? att[n].frames : now_frames;
        assert_int_equal(nf, n < 4 ? att[n].n : 1);
        for (uint32_t k = 0; k < nf; k++) {
            st_cpu_frame fr;
            assert_int_equal(st_reader_cpu_frame_name(r, row.stack, frames[k], &fr), 1);
            char want[1200];
            if (given[k].qualname == long_name) snprintf(want, sizeof want, "py::%.512s:", long_name);
            else if (strcmp(given[k].qualname, "step\x01x") == 0) snprintf(want, sizeof want, "py::step?x:/m/main.py");
            else snprintf(want, sizeof want, "py::%s:%s", given[k].qualname, given[k].file);
            assert_string_equal(fr.name, want);
            assert_int_equal(fr.sym_offset, given[k].line >= (1 << 20) ? 0 : given[k].line);
            assert_int_equal(fr.map, -1);
        }
        n++;
    }
    assert_int_equal(ok, 0);
    assert_int_equal(n, 5);
    st_cpu_iter_close(it);
    st_reader_close(r);
}

/* ---- the bound ---- */

static void test_queue_full(void **state)
{
    (void)state;
    static char q[512], f[512];
    memset(q, 'a', 511);
    memset(f, 'b', 511);
    st_py_frame frames[ST_CPU_SAMPLE_MAX_FRAMES];
    for (int i = 0; i < ST_CPU_SAMPLE_MAX_FRAMES; i++) frames[i] = (st_py_frame){q, f, i};
    st__test_set_writer_delay(300000); /* 300 ms after each batch of a ring */
    st_trace *t = open_cpu("full.sqlite", 1);
    st__test_set_writer_delay(0);
    assert_int_equal(st_stage_register(t, "work", ST_WORK), 0);
    assert_int_equal(st_thread_register(t, "main", "main", -1, 0), 0);
    st_begin(0);
    st_end(0);
    sleep_ms(30); /* the writer drained the two events and sleeps */
    int stored = 0, lost = 0;
    for (int i = 0; i < 64; i++) {
        int rc = st_cpu_sample_add(t, gettid_(), 0, frames, ST_CPU_SAMPLE_MAX_FRAMES, ST_CPU_SAMPLE_NOW);
        assert_true(rc == ST_OK || rc == 1);
        if (rc == ST_OK) stored++;
        else lost++;
    }
    assert_int_equal(st_close(t), ST_OK);
    assert_true(lost > 0);
    assert_true(stored >= 1);
    st_reader *r = open_complete_trace(tmp_file("full.sqlite"));
    assert_int_equal(meta_ll(r, "python_frames_lost"), lost);
    assert_int_equal(meta_ll(r, "python_frames_samples"), stored);
    st_cpu_iter *it;
    assert_int_equal(st_cpu_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_cpu_row row;
    int rows = 0;
    while (st_cpu_iter_next(it, &row) == 1) rows += row.kind == ST_CPU_ROW_PY_SAMPLE;
    st_cpu_iter_close(it);
    assert_int_equal(rows, stored);
    st_reader_close(r);
}

/* ---- the encoding: docs/trace-format.md's example of kinds 10 and 11 ---- */

static void test_chunk_bytes(void **state)
{
    (void)state;
    st_cpu_encoder e = {0};
    assert_int_equal(st_cpu_chunk_start(&e), 0);
    st_cpu_rec a = {ST_CPU_REC_PY_SAMPLE, 1000, 2, 0, 0, 0};
    st_cpu_rec b = {ST_CPU_REC_PY_SAMPLE_UNKNOWN, 1500, 3, ST_CPU_NO_STAGE, 0, 0};
    assert_int_equal(st_cpu_put(&e, &a), 0);
    assert_int_equal(st_cpu_put(&e, &b), 0);
    static const uint8_t want[] = {0x50, 0x0a, 0xd0, 0x0f, 0x02, 0x01, 0x0b, 0xe8, 0x07, 0x03};
    assert_int_equal(e.buf.len, sizeof want);
    assert_memory_equal(e.buf.data, want, sizeof want);
    st_cpu_cursor c;
    st_cpu_rec r;
    assert_int_equal(st_cpu_cursor_open(&c, want, sizeof want, 2), 0);
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(r.kind, ST_CPU_REC_PY_SAMPLE);
    assert_int_equal(r.ts_ns, 1000);
    assert_int_equal(r.stack, 2);
    assert_int_equal(r.stage, 0);
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(r.kind, ST_CPU_REC_PY_SAMPLE_UNKNOWN);
    assert_int_equal(r.ts_ns, 1500);
    assert_int_equal(r.stack, 3);
    assert_int_equal(r.stage, ST_CPU_NO_STAGE);
    assert_int_equal(st_cpu_next(&c, &r), 0);
    for (size_t n = 1; n < sizeof want; n++) { /* every truncation is refused */
        int rc = st_cpu_cursor_open(&c, want, n, 2);
        if (rc == 0)
            while ((rc = st_cpu_next(&c, &r)) == 1) {
            }
        assert_int_equal(rc, ST_ECORRUPT);
    }
    uint8_t bad[sizeof want];
    memcpy(bad, want, sizeof want);
    bad[1] = 12; /* past the last kind */
    assert_int_equal(st_cpu_cursor_open(&c, bad, sizeof bad, 2), 0);
    assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    st_buf_free(&e.buf);
}

/* ---- a recorder for the integration tests ---- */

/* `test_cpu_pysample --record-py PATH VARIANT` (tests/it_cpu_python.sh):
 * a trace whose Python-frame samples are known exactly. Thread main (role
 * main) runs 12 steps, each a stage load (wait_input) then a stage fwd
 * (work), with a step mark after fwd; meta python_stacks 'frames' and
 * python_frames_hz 100.0. Per step, in load: 2 samples
 * read_batch < <module>; in fwd: HOT samples hot < Model.forward <
 * <module> (HOT 4 in variant a and mixed, 12 in b), 3 samples cold <
 * Model.forward < <module> and 1 sample of a function whose name and file
 * hold a quote, a backslash, '<' and a control byte (stored as '?'); in
 * step 0's fwd also one sample with no frame. So a: load 24, fwd 12 x 8 + 1
 * = 97 samples; b: fwd 12 x 16 + 1 = 193. Variants a and b take no kernel
 * samples (cpu_period_ns UINT64_MAX: switch records only); mixed samples
 * the CPU every millisecond and spins 20 ms in each fwd, so the kernel's
 * samples are there too. */
static int record_py(const char *path, const char *variant)
{
    int hot = strcmp(variant, "b") == 0 ? 12 : 4, mixed = strcmp(variant, "mixed") == 0;
    st_options opt;
    test_options(&opt, path);
    opt.overwrite = 1;
    opt.cpu = 1;
    opt.cpu_period_ns = mixed ? 1000000 : UINT64_MAX;
    st_trace *t = NULL;
    if (st_open(&t, &opt) != ST_OK) {
        fprintf(stderr, "st_open: %s\n", st_last_error());
        return 1;
    }
    int load = st_stage_register(t, "load", ST_WAIT_INPUT), fwd = st_stage_register(t, "fwd", ST_WORK);
    if (load < 0 || fwd < 0 || st_thread_register(t, "main", "main", -1, 0) < 0) return 1;
    if (st_meta_set(t, "python_stacks", "frames") || st_meta_set(t, "python_frames_hz", "100.0")) return 1;
    static const st_py_frame reading[2] = {{"read_batch", "/app/data.py", 5}, {"<module>", "/app/train.py", 1}};
    static const st_py_frame hot_fr[3] = {{"hot", "/app/model.py", 10}, {"Model.forward", "/app/model.py", 3},
                                          {"<module>", "/app/train.py", 1}};
    static const st_py_frame cold_fr[3] = {{"cold", "/app/model.py", 20}, {"Model.forward", "/app/model.py", 3},
                                           {"<module>", "/app/train.py", 1}};
    static const st_py_frame weird_fr[2] = {{"we\"ird\\<b>\x01", "/app/q\"uote.py", 7}, {"<module>", "/app/train.py", 1}};
    int me = gettid_(), bad = 0;
    for (int step = 0; step < 12; step++) {
        st_begin((uint32_t)load);
        for (int i = 0; i < 2; i++) bad |= st_cpu_sample_add(t, me, 0, reading, 2, ST_CPU_SAMPLE_NOW);
        sleep_ms(1);
        st_end((uint32_t)load);
        st_begin((uint32_t)fwd);
        for (int i = 0; i < hot; i++) bad |= st_cpu_sample_add(t, me, 0, hot_fr, 3, ST_CPU_SAMPLE_NOW);
        for (int i = 0; i < 3; i++) bad |= st_cpu_sample_add(t, me, 0, cold_fr, 3, ST_CPU_SAMPLE_NOW);
        bad |= st_cpu_sample_add(t, me, 0, weird_fr, 2, ST_CPU_SAMPLE_NOW);
        if (step == 0) bad |= st_cpu_sample_add(t, me, 0, NULL, 0, ST_CPU_SAMPLE_NOW);
        if (mixed) {
            volatile uint64_t x = 0;
            for (int64_t end = st_now_ns() + 20000000; st_now_ns() < end;) x += (uint64_t)x * 3 + 1;
        }
        sleep_ms(1);
        st_end((uint32_t)fwd);
        st_step((uint64_t)step, 1000);
    }
    if (bad) fprintf(stderr, "st_cpu_sample_add: %s\n", st_last_error());
    return st_close(t) != ST_OK || bad;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--record-py") == 0) return record_py(argv[2], argv[3]);
    if (make_tmp_dir("test_cpu_pysample")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_attribution),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_chunk_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(rc);
    return rc;
}
