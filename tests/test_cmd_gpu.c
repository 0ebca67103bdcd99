/* test_cmd_gpu.c: `analyze gpu` (analyze/cmd_gpu.c) reads the GPU records
 * once, also when its window is the records' own span (fewer than two step
 * marks, no --steps/--time): the span then comes from the chunk headers
 * (st_reader_gpu_span). When a header lies about its records' times, the
 * command reads the split again over the records' true span and prints
 * what the truthful trace gives, byte for byte. --time counts from the
 * trace start, as its help says, also when the first range comes later,
 * and reaches the end of the GPU records after the last range event.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "stagetrace_reader.h"
#include "traces.h"
#include "../analyze/analyze.h"
#include "../analyze/gpu_activity.h"

typedef struct gpu_run {
    int status;
    unsigned long reads; /* an_gpu_read calls */
    char *out;
} gpu_run;

/* Runs cmd_gpu in this process with ARGV (ARGC of them), stdout to a file. */
static gpu_run run_gpu_args(int argc, char **argv)
{
    fflush(stdout);
    int saved = dup(1);
    int fd = open(tmp_file("gpu.out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    unsigned long before = an_gpu_read_count;
    gpu_run r;
    r.status = an_command_run(&an_cmd_gpu, argc, argv);
    r.reads = an_gpu_read_count - before;
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    r.out = read_file(tmp_file("gpu.out"), NULL);
    assert_non_null(r.out);
    return r;
}

/* Runs cmd_gpu in this process on tmp_dir's NAME with --format FORMAT. */
static gpu_run run_gpu(const char *name, const char *format)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    char *argv[] = {"gpu", "--format", (char *)format, path, NULL};
    return run_gpu_args(4, argv);
}

/* Copies tmp_dir's FROM to TO and runs SQL on the copy. */
static void copy_with(const char *from, const char *to, const char *sql)
{
    size_t len;
    char *data = read_file(tmp_file(from), &len);
    assert_non_null(data);
    FILE *f = fopen(tmp_file(to), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    free(data);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(tmp_file(to), &db), SQLITE_OK);
    exec_sql(db, sql);
    sqlite3_close(db);
}

static void test_gpu_span_one_read(void **state)
{
    (void)state;
    static const char *const formats[] = {"text", "csv", "json"};
    /* gpu_shared without its step marks: the window is the whole trace */
    copy_with("gpu_shared.sqlite", "nosteps.sqlite", "DELETE FROM steps");
    /* ... and with headers that widen the records' span on both sides */
    copy_with("nosteps.sqlite", "nostepz.sqlite", /* a name as long: the outputs compare */
              "UPDATE gpu_chunks SET t0_ns = t0_ns - 5000000000, t1_ns = t1_ns + 7000000000 WHERE device >= 0");
    for (size_t i = 0; i < 3; i++) {
        gpu_run steps = run_gpu("gpu_shared.sqlite", formats[i]);
        assert_int_equal(steps.status, 0);
        assert_int_equal(steps.reads, 1);
        gpu_run honest = run_gpu("nosteps.sqlite", formats[i]);
        assert_int_equal(honest.status, 0);
        assert_int_equal(honest.reads, 1); /* 2 when the span came from a first pass */
        if (i == 0) assert_non_null(strstr(honest.out, "over the whole trace ("));
        gpu_run liar = run_gpu("nostepz.sqlite", formats[i]);
        assert_int_equal(liar.status, 0);
        assert_int_equal(liar.reads, 2); /* the split read again over the true span */
        /* the file name (nostepz, the liar) aside, the same bytes */
        char *at = strstr(liar.out, "nostepz.sqlite");
        if (at) memcpy(at, "nosteps", 7);
        assert_string_equal(liar.out, honest.out);
        free(steps.out);
        free(honest.out);
        free(liar.out);
    }
}

static void test_gpu_span_headers(void **state)
{
    (void)state;
    st_reader *r = open_reader(tmp_file("gpu_shared.sqlite"));
    st_gpu_headers h;
    assert_int_equal(st_reader_gpu_span(r, &h), ST_OK);
    assert_int_equal(h.has, 1);
    sqlite3 *db = st_reader_db(r);
    assert_int_equal(h.n_records, sql_int(db, "SELECT sum(n_records) FROM gpu_chunks WHERE device >= 0"));
    assert_int_equal(h.t0_ns, sql_int(db, "SELECT min(t0_ns) FROM gpu_chunks WHERE device >= 0"));
    assert_int_equal(h.t1_ns, sql_int(db, "SELECT max(t1_ns) FROM gpu_chunks WHERE device >= 0"));
    /* the records' own span, as the iterator reads them */
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row g;
    int64_t lo = INT64_MAX, hi = INT64_MIN, n = 0;
    while (st_gpu_iter_next(it, &g) == 1) {
        if (g.rec.start_ns < lo) lo = g.rec.start_ns;
        if (g.rec.start_ns + g.rec.dur_ns > hi) hi = g.rec.start_ns + g.rec.dur_ns;
        n++;
    }
    st_gpu_iter_close(it);
    assert_int_equal(n, h.n_records);
    assert_int_equal(lo, h.t0_ns);
    assert_int_equal(hi, h.t1_ns);
    st_reader_close(r);
    /* a trace without GPU chunks: has 0 */
    r = open_reader(tmp_file("target.sqlite"));
    assert_int_equal(st_reader_gpu_span(r, &h), ST_OK);
    assert_int_equal(h.has, 0);
    st_reader_close(r);
}

/* --time counts from the trace start (meta.start_ns), not from the first
 * range event. late_range.sqlite: start_ns at BASE, its only range (forward
 * on target0) from BASE + 100 ms to BASE + 200 ms, kernels on device 0 at
 * [BASE + 10, + 20) ms and [BASE + 150, + 180) ms. `--time 0:0.2` is
 * 0.000-0.200 s: busy 40 ms of 200, 20%, idle 160 ms. (From the first range
 * event it would be 0.100-0.200 s: busy 30 of 100, 30%.) */
static void test_gpu_time_from_trace_start(void **state)
{
    (void)state;
    tg_trace *g = tg_create("late");
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_meta_int(g, "end_ns", BASE_NS + 200 * MS);
    tg_meta_int(g, "device", 0);
    uint32_t fwd = tg_stage(g, "forward", "work");
    uint32_t th = tg_thread(g, "target0", "target");
    tg_range(g, th, fwd, BASE_NS + 100 * MS, BASE_NS + 200 * MS);
    tg_gpu_string(g, "gemm");
    st_gpu_rec k[2] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 10 * MS, .dur_ns = 10 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 150 * MS, .dur_ns = 30 * MS, .correlation = 2},
    };
    tg_gpu_chunk(g, 0, 7, k, 2);
    tg_write(g, tmp_file("late_range.sqlite"));
    tg_free(g);
    char path[8192];
    snprintf(path, sizeof path, "%s/late_range.sqlite", tmp_dir);
    char *argv[] = {"gpu", "--format", "csv", "--time", "0:0.2", path, NULL};
    gpu_run r = run_gpu_args(6, argv);
    assert_int_equal(r.status, AN_EXIT_OK);
    assert_non_null(strstr(r.out, "\ndevice,records,busy_ms,busy_pct,idle_ms,host_wait_ms,launch_gap_ms,other_ms,"
                                "host_thread,host_stage,host_stage_ms,unrecorded_ms\n"
                                "0,2,40.000000,20,160.000000,0.000000,0.000000,160.000000,,,0.000000,0.000000\n"));
    free(r.out);
    /* the window's text, and a window that starts before the first range event */
    char *text_argv[] = {"gpu", "--time", "0:0.05", path, NULL};
    r = run_gpu_args(4, text_argv);
    assert_int_equal(r.status, AN_EXIT_OK);
    assert_non_null(strstr(r.out, "devices and host_wait over time 0.000-0.050 s, 50.000 ms\n"));
    /* no API record joins its kernels to a thread: the stages table (over the whole trace) has
     * one row, (unknown), and the text says so with the kernels' count and time */
    assert_non_null(strstr(r.out, "\n(unknown)  (none)       0        2        2  40.000\n\n"
                                  "No launching thread for 2 kernels (2 records, 40.000 ms, 100.0% of the GPU time above): "
                                  "their launch calls are not in the trace"));
    free(r.out);
    /* none in CSV: the rows say it */
    char *csv_argv[] = {"gpu", "--format", "csv", "--time", "0:0.05", path, NULL};
    r = run_gpu_args(6, csv_argv);
    assert_int_equal(r.status, AN_EXIT_OK);
    assert_null(strstr(r.out, "No launching thread"));
    assert_non_null(strstr(r.out, "\n(unknown),(none),0,2,2,40.000000\n"));
    free(r.out);
}

/* Kernels launched by threads the trace did not register: the stages table names each by the
 * name the GPU collector kept (gpu_threads) and its OS thread id, and the text lists them
 * apart from kernels with no launch call at all. untraced.sqlite: target0 (os_tid 1000) in
 * forward over [BASE, BASE + 200 ms); launch calls by 1000 (corr 1), 4242 (corr 2, named
 * pt_autograd_0) and 4343 (corr 3, no name); kernels of 10, 30, 5 ms for them and one of 2 ms
 * (corr 4) with no call: 47 ms in all, 35 ms (74.5 %) untraced, 2 ms (4.3 %) unknown. */
static void test_gpu_untraced_launchers(void **state)
{
    (void)state;
    tg_trace *g = tg_create("untraced");
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_meta_int(g, "end_ns", BASE_NS + 200 * MS);
    uint32_t fwd = tg_stage(g, "forward", "work");
    uint32_t th = tg_thread(g, "target0", "target");
    tg_range(g, th, fwd, BASE_NS, BASE_NS + 200 * MS);
    tg_gpu_string(g, "gemm");
    st_gpu_rec api[3] = {
        {.kind = ST_GPU_API, .start_ns = BASE_NS + 5 * MS, .dur_ns = MS, .correlation = 1, .os_tid = 1000},
        {.kind = ST_GPU_API, .start_ns = BASE_NS + 50 * MS, .dur_ns = MS, .correlation = 2, .os_tid = 4242},
        {.kind = ST_GPU_API, .start_ns = BASE_NS + 55 * MS, .dur_ns = MS, .correlation = 3, .os_tid = 4343},
    };
    tg_gpu_chunk(g, -1, 0, api, 3);
    st_gpu_rec k[4] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 10 * MS, .dur_ns = 10 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 60 * MS, .dur_ns = 30 * MS, .correlation = 2},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 100 * MS, .dur_ns = 5 * MS, .correlation = 3},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 120 * MS, .dur_ns = 2 * MS, .correlation = 4},
    };
    tg_gpu_chunk(g, 0, 7, k, 4);
    tg_write(g, tmp_file("untraced.sqlite"));
    tg_free(g);
    char path[8192];
    snprintf(path, sizeof path, "%s/untraced.sqlite", tmp_dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE gpu_threads(os_tid INTEGER PRIMARY KEY, name TEXT NOT NULL);"
                                  "INSERT INTO gpu_threads VALUES (4242, 'pt_autograd_0'), (1000, 'python3');",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    /* the reader hands the launching call's OS thread and its name */
    st_reader *r;
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row row;
    int64_t tids[4];
    const char *names[4];
    int n = 0;
    while (n < 4 && st_gpu_iter_next(it, &row) == 1) {
        tids[n] = row.launch_os_tid;
        names[n++] = row.launch_thread;
    }
    assert_int_equal(n, 4);
    assert_int_equal(tids[0], 1000);
    assert_string_equal(names[0], "python3");
    assert_int_equal(tids[1], 4242);
    assert_string_equal(names[1], "pt_autograd_0");
    assert_int_equal(tids[2], 4343);
    assert_null(names[2]);
    assert_int_equal(tids[3], 0);
    assert_null(names[3]);
    st_gpu_iter_close(it);
    st_reader_close(r);

    char *argv[] = {"gpu", path, NULL};
    gpu_run res = run_gpu_args(2, argv);
    assert_int_equal(res.status, AN_EXIT_OK);
    if (!strstr(res.out, "Launched by threads the trace did not register: 2 kernels (2 records, 35.000 ms, 74.5% of "
                         "the GPU time above): pt_autograd_0 (tid 4242) 30.000 ms, tid 4343 5.000 ms. Register them") ||
        !strstr(res.out, "No launching thread for 1 kernel (1 record, 2.000 ms, 4.3% of the GPU time above): their "
                         "launch calls are not in the trace"))
        fail_msg("%s", res.out);
    free(res.out);
    char *csv[] = {"gpu", "--format", "csv", "--table", "stages", path, NULL};
    res = run_gpu_args(6, csv);
    assert_int_equal(res.status, AN_EXIT_OK);
    if (!strstr(res.out, "\npt_autograd_0 (untraced tid 4242),(none),0,1,1,30.000000\n"
                         "(untraced tid 4343),(none),0,1,1,5.000000\n"
                         "(unknown),(none),0,1,1,2.000000\n"
                         "target0,forward,0,1,1,10.000000\n"))
        fail_msg("%s", res.out);
    free(res.out);

    /* a gpu_threads row whose os_tid is not an integer: refused at open, naming the table */
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE gpu_threads; CREATE TABLE gpu_threads(os_tid, name);"
                                      "INSERT INTO gpu_threads VALUES ('x', 'a')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(st_reader_open(&r, path), ST_ECORRUPT);
    assert_non_null(strstr(st_last_error(), "gpu_threads"));
}

/* --time is clipped to the span's end with the GPU records in it: work a device finishes after
 * the last range event counts. gpu_after.sqlite: start_ns at BASE, its only range from BASE +
 * 100 ms to BASE + 200 ms, kernels on device 0 at [BASE + 150, + 180) ms and [BASE + 190, +
 * 260) ms. `--time 0:1` is 0.000-0.260 s: busy 30 + 70 = 100 ms, idle 160 ms (clipped at the
 * last range event it was 0.000-0.200 s, busy 40 ms); `--time 0.21:0.3` is 0.210-0.260 s, all
 * busy (it was refused: no time after the last range event). One read each: the chunk headers
 * give the records' true span. */
static void test_gpu_time_past_last_range(void **state)
{
    (void)state;
    tg_trace *g = tg_create("after");
    tg_meta_int(g, "start_ns", BASE_NS);
    tg_meta_int(g, "end_ns", BASE_NS + 300 * MS);
    tg_meta_int(g, "device", 0);
    uint32_t fwd = tg_stage(g, "forward", "work");
    uint32_t th = tg_thread(g, "target0", "target");
    tg_range(g, th, fwd, BASE_NS + 100 * MS, BASE_NS + 200 * MS);
    tg_gpu_string(g, "gemm");
    st_gpu_rec k[2] = {
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 150 * MS, .dur_ns = 30 * MS, .correlation = 1},
        {.kind = ST_GPU_KERNEL, .name = 1, .start_ns = BASE_NS + 190 * MS, .dur_ns = 70 * MS, .correlation = 2},
    };
    tg_gpu_chunk(g, 0, 7, k, 2);
    tg_write(g, tmp_file("gpu_after.sqlite"));
    tg_free(g);
    char path[8192];
    snprintf(path, sizeof path, "%s/gpu_after.sqlite", tmp_dir);
    char *all[] = {"gpu", "--format", "csv", "--time", "0:1", path, NULL};
    gpu_run r = run_gpu_args(6, all);
    assert_int_equal(r.status, AN_EXIT_OK);
    assert_int_equal(r.reads, 1);
    assert_non_null(strstr(r.out, "\ndevice,records,busy_ms,busy_pct,idle_ms,host_wait_ms,launch_gap_ms,other_ms,"
                                  "host_thread,host_stage,host_stage_ms,unrecorded_ms\n"
                                  "0,2,100.000000,38.46153846153846,160.000000,0.000000,0.000000,160.000000,,,0.000000,"
                                  "0.000000\n"));
    free(r.out);
    char *after[] = {"gpu", "--time", "0.21:0.3", path, NULL};
    r = run_gpu_args(4, after);
    assert_int_equal(r.status, AN_EXIT_OK);
    assert_int_equal(r.reads, 1);
    assert_non_null(strstr(r.out, "devices and host_wait over time 0.210-0.260 s, 50.000 ms\n"));
    free(r.out);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_cmd_gpu")) return -1;
    write_model_traces(tmp_dir);
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
        cmocka_unit_test(test_gpu_span_headers),
        cmocka_unit_test(test_gpu_span_one_read),
        cmocka_unit_test(test_gpu_time_from_trace_start),
        cmocka_unit_test(test_gpu_untraced_launchers),
        cmocka_unit_test(test_gpu_time_past_last_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
