/* bench_analyze_gpu.c: time and peak memory of the GPU analyses
 * (`analyze bottleneck` and `analyze gpu`) as a trace's GPU activity grows.
 *
 * Writes synthetic traces of N steps (10 ms each) shaped like the trainer's
 * co-located 2 x 2 layout: loader, target0/1, drafter0/1 and main threads
 * with their stages, and on each of GPUs 0 and 1 per step 300 target and 100
 * drafter kernels, each launched by a named API call, plus 400 polling calls
 * of each drafter (no device work): 2 400 GPU records per step. Then runs
 * build's analyze on each, twice: with the default time slices, and with
 * ST_GPU_SLICE_RECORDS large enough for one slice (the whole trace read at
 * once, as the analyses did before slicing), measuring wall time and the
 * child's peak resident memory (wait4). Prints one row per run.
 *
 *   bench_analyze_gpu [STEPS...]     (default 200 2000; env ST_BUILD, ST_BENCH_TMP)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "encoding.h"
#include "st_schema.h"

#define MS 1000000LL
#define US 1000LL

static void die(const char *what)
{
    fprintf(stderr, "bench_analyze_gpu: %s\n", what);
    exit(1);
}

static void sql(sqlite3 *db, const char *s)
{
    char *err = NULL;
    if (sqlite3_exec(db, s, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "bench_analyze_gpu: %s: %s\n", s, err ? err : "?");
        exit(1);
    }
}

static void put_range_chunk(sqlite3_stmt *st, int thread, st_event_encoder *e, int n_ranges)
{
    sqlite3_bind_int(st, 1, thread);
    sqlite3_bind_int64(st, 2, e->t0_ns);
    sqlite3_bind_int64(st, 3, e->t1_ns);
    sqlite3_bind_int(st, 4, (int)e->n_events);
    sqlite3_bind_int(st, 5, n_ranges);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) die("insert range chunk");
    sqlite3_reset(st);
}

static void put_gpu_chunk(sqlite3_stmt *st, int device, int stream, st_gpu_encoder *e)
{
    sqlite3_bind_int(st, 1, device);
    sqlite3_bind_int(st, 2, stream);
    sqlite3_bind_int64(st, 3, e->t0_ns);
    sqlite3_bind_int64(st, 4, e->t1_ns);
    sqlite3_bind_int(st, 5, (int)e->n_records);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) die("insert gpu chunk");
    sqlite3_reset(st);
}

/* Stages: 0 load, 1 queue_put, 2 forward, 3 queue_wait, 4 stream_sync, 5 step_wait. Threads 0 loader,
 * 1-2 target0/1 (os tid 101-102), 3-4 drafter0/1 (103-104), 5 main. Chunks of 100 steps. */
static void write_trace(const char *path, int steps)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) die("cannot create a trace");
    sql(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF");
    sql(db, st_schema_sql);
    sql(db, "CREATE TABLE gpu_strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE gpu_chunks(id INTEGER PRIMARY KEY, device INTEGER NOT NULL, stream INTEGER NOT NULL,"
            " t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL)");
    sql(db, "BEGIN");
    sql(db, "INSERT INTO meta VALUES ('schema_version','1'),('status','complete'),('program','bench'),"
            "('tool_version','0.1.0'),('run_id','1700000000-9'),('start_ns','0'),('clock','monotonic'),"
            "('rank','0'),('world_size','1'),('profile_interval','10'),('dropped_events','0'),"
            "('gpu_dropped_records','0')");
    sql(db, "INSERT INTO threads VALUES (0,100,'loader','loader',-1,0,0),(1,101,'target0','target',0,0,0),"
            "(2,102,'target1','target',1,0,0),(3,103,'drafter0','drafter',0,0,0),(4,104,'drafter1','drafter',1,0,0),"
            "(5,105,'main','main',-1,0,0)");
    sql(db, "INSERT INTO stages VALUES (0,'load','work'),(1,'queue_put','wait_output'),(2,'forward','work'),"
            "(3,'queue_wait','wait_input'),(4,'stream_sync','sync'),(5,'step_wait','wait_input')");
    sql(db, "INSERT INTO gpu_strings VALUES (0,'target_gemm'),(1,'drafter_gemm'),(2,'cudaLaunchKernel'),"
            "(3,'cudaStreamQuery')");
    sqlite3_stmt *steps_st, *range_st, *gpu_st;
    if (sqlite3_prepare_v2(db, "INSERT INTO steps VALUES (?, ?, ?, 5)", -1, &steps_st, NULL) ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) VALUES (?,?,?,?,?,?)",
                           -1, &range_st, NULL) ||
        sqlite3_prepare_v2(db, "INSERT INTO gpu_chunks(device,stream,t0_ns,t1_ns,n_records,data) VALUES (?,?,?,?,?,?)",
                           -1, &gpu_st, NULL))
        die("prepare");
    for (int k = 0; k <= steps; k++) {
        sqlite3_bind_int(steps_st, 1, k);
        sqlite3_bind_int64(steps_st, 2, (int64_t)k * 10 * MS);
        sqlite3_bind_int(steps_st, 3, k ? 16384 : 0);
        if (sqlite3_step(steps_st) != SQLITE_DONE) die("insert step");
        sqlite3_reset(steps_st);
    }
    st_event_encoder ev[6];
    st_gpu_encoder kern[2][2], api;
    memset(ev, 0, sizeof ev);
    memset(kern, 0, sizeof kern);
    memset(&api, 0, sizeof api);
    uint32_t corr = 1;
    int n_ranges[6] = {0};
    for (int k0 = 0; k0 < steps; k0 += 100) {
        for (int th = 0; th < 6; th++)
            if (st_event_chunk_start(&ev[th])) die("no memory");
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 2; s++)
                if (st_gpu_chunk_start(&kern[d][s])) die("no memory");
        if (st_gpu_chunk_start(&api)) die("no memory");
        for (int k = k0; k < k0 + 100 && k < steps; k++) {
            int64_t t = (int64_t)k * 10 * MS;
            st_event_put_begin(&ev[0], 0, t);
            st_event_put_end(&ev[0], t + 1 * MS);
            st_event_put_begin(&ev[0], 1, t + 1 * MS);
            st_event_put_end(&ev[0], t + 10 * MS);
            n_ranges[0] += 2;
            for (int d = 0; d < 2; d++) {
                st_event_encoder *tg = &ev[1 + d], *dr = &ev[3 + d];
                st_event_put_begin(tg, 2, t + 100 * US);
                st_event_put_end(tg, t + 2 * MS);
                st_event_put_begin(tg, 1, t + 2 * MS);
                st_event_put_end(tg, t + 10 * MS);
                st_event_put_begin(dr, 3, t);
                st_event_put_end(dr, t + 1 * MS);
                st_event_put_begin(dr, 2, t + 1 * MS);
                st_event_put_end(dr, t + 2 * MS);
                st_event_put_begin(dr, 4, t + 2 * MS);
                st_event_put_end(dr, t + 10 * MS);
                n_ranges[1 + d] += 2;
                n_ranges[3 + d] += 3;
                /* 300 target kernels of 20 us from t+0.2 ms, launched 5 us apart in forward; 100 drafter
                 * kernels of 30 us from t+6 ms, launched from t+1.1 ms in forward */
                for (int i = 0; i < 400; i++) {
                    int target = i < 300;
                    int64_t launch = target ? t + 150 * US + i * 5 * US : t + 1100 * US + (i - 300) * 5 * US;
                    int64_t start = target ? t + 200 * US + i * 20 * US : t + 6 * MS + (i - 300) * 30 * US;
                    st_gpu_rec r = {.kind = ST_GPU_KERNEL, .name = target ? 1 : 2, .start_ns = start,
                                    .dur_ns = (target ? 20 : 30) * US, .correlation = corr};
                    st_gpu_rec a = {.kind = ST_GPU_API, .name = 3, .start_ns = launch, .dur_ns = 4 * US,
                                    .correlation = corr++, .copy_kind = 211, .os_tid = target ? 101 + d : 103 + d};
                    if (st_gpu_put(&kern[d][target ? 0 : 1], &r) || st_gpu_put(&api, &a)) die("gpu put");
                }
                /* the drafter's polling while it syncs: 400 queries, 20 us apart */
                for (int i = 0; i < 400; i++) {
                    st_gpu_rec q = {.kind = ST_GPU_API, .name = 4, .start_ns = t + 2 * MS + i * 20 * US, .dur_ns = 2 * US,
                                    .correlation = corr++, .copy_kind = 132, .os_tid = 103 + d};
                    if (st_gpu_put(&api, &q)) die("gpu put");
                }
            }
            st_event_put_begin(&ev[5], 5, t);
            st_event_put_end(&ev[5], t + 10 * MS);
            n_ranges[5]++;
        }
        for (int th = 0; th < 6; th++) {
            put_range_chunk(range_st, th, &ev[th], n_ranges[th]);
            n_ranges[th] = 0;
        }
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 2; s++) put_gpu_chunk(gpu_st, d, 7 + s, &kern[d][s]);
        put_gpu_chunk(gpu_st, -1, 0, &api);
    }
    for (int th = 0; th < 6; th++) st_buf_free(&ev[th].buf);
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++) st_buf_free(&kern[d][s].buf);
    st_buf_free(&api.buf);
    sqlite3_finalize(steps_st);
    sqlite3_finalize(range_st);
    sqlite3_finalize(gpu_st);
    sql(db, "COMMIT");
    if (sqlite3_close(db) != SQLITE_OK) die("close");
}

/* Runs analyze CMD PATH (output discarded); wall seconds and peak RSS in MB. */
static int run(const char *analyze, const char *cmd, const char *path, const char *slice, double *secs, double *mb)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        if (slice) setenv("ST_GPU_SLICE_RECORDS", slice, 1);
        else unsetenv("ST_GPU_SLICE_RECORDS");
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execl(analyze, analyze, cmd, path, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) die("wait4");
    clock_gettime(CLOCK_MONOTONIC, &b);
    *secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    *mb = (double)ru.ru_maxrss / 1024.0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv)
{
    const char *build = getenv("ST_BUILD") ? getenv("ST_BUILD") : "build";
    const char *tmp = getenv("ST_BENCH_TMP") ? getenv("ST_BENCH_TMP") : "/tmp";
    char analyze[512];
    snprintf(analyze, sizeof analyze, "%s/analyze", build);
    if (access(analyze, X_OK) != 0) die("analyze is not built (ST_BUILD)");
    static const int dflt[] = {200, 2000};
    int n = argc > 1 ? argc - 1 : 2;
    printf("%6s %10s %9s %-10s %-12s %8s %9s\n", "steps", "gpu_recs", "trace_MB", "command", "slices", "wall_s",
           "peak_MB");
    for (int i = 0; i < n; i++) {
        int steps = argc > 1 ? atoi(argv[i + 1]) : dflt[i];
        if (steps < 1) die("steps must be >= 1");
        char path[600];
        snprintf(path, sizeof path, "%s/bench_analyze_gpu_%d.sqlite", tmp, steps);
        write_trace(path, steps);
        FILE *f = fopen(path, "rb");
        double trace_mb = 0;
        if (f) {
            fseek(f, 0, SEEK_END);
            trace_mb = (double)ftell(f) / 1048576.0;
            fclose(f);
        }
        static const char *const cmds[] = {"bottleneck", "gpu"};
        for (int c = 0; c < 2; c++)
            for (int whole = 0; whole < 2; whole++) {
                double secs, mb;
                int rc = run(analyze, cmds[c], path, whole ? "4000000000" : NULL, &secs, &mb);
                printf("%6d %10lld %9.1f %-10s %-12s %8.2f %9.1f%s\n", steps, (long long)steps * 2400, trace_mb, cmds[c],
                       whole ? "one (whole)" : "default", secs, mb, rc ? "  (analyze failed)" : "");
                fflush(stdout);
            }
        unlink(path);
    }
    return 0;
}
