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

#include "tracegen.h"

#define MS 1000000LL
#define US 1000LL

static void die(const char *what)
{
    fprintf(stderr, "bench_analyze_gpu: %s\n", what);
    exit(1);
}

/* Stages: 0 load, 1 queue_put, 2 forward, 3 queue_wait, 4 stream_sync, 5 step_wait. Threads 0 loader,
 * 1-2 target0/1 (os tid 101-102), 3-4 drafter0/1 (103-104), 5 main. Chunks of 100 steps. Written with
 * the tests' trace writer (tests/tracegen.h). */
static void write_trace(const char *path, int steps)
{
    tg_trace *g = tg_create("bench");
    tg_meta_clear(g);
    static const char *const meta[][2] = {
        {"schema_version", "1"}, {"status", "complete"}, {"program", "bench"}, {"tool_version", "0.1.0"},
        {"run_id", "1700000000-9"}, {"start_ns", "0"}, {"clock", "monotonic"}, {"rank", "0"},
        {"world_size", "1"}, {"profile_interval", "10"}, {"dropped_events", "0"}, {"gpu_dropped_records", "0"},
    };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) tg_meta(g, meta[i][0], meta[i][1]);
    tg_set_chunk_events(g, 0); /* cut where the script says: every 100 steps */
    tg_set_interleave(g, 1);   /* chunks in time order, as the writer commits them */
    tg_set_os_tid_base(g, 100);
    tg_set_step_thread(g, 5);
    tg_set_gpu_tables(g, 1);
    static const char *const stages[][2] = {{"load", "work"},       {"queue_put", "wait_output"},
                                            {"forward", "work"},    {"queue_wait", "wait_input"},
                                            {"stream_sync", "sync"}, {"step_wait", "wait_input"}};
    for (int i = 0; i < 6; i++) tg_stage(g, stages[i][0], stages[i][1]);
    static const struct {
        const char *name, *role;
        int device;
    } threads[] = {{"loader", "loader", -1},    {"target0", "target", 0}, {"target1", "target", 1},
                   {"drafter0", "drafter", 0}, {"drafter1", "drafter", 1}, {"main", "main", -1}};
    for (uint32_t i = 0; i < 6; i++) tg_thread_at(g, tg_thread(g, threads[i].name, threads[i].role))->device = threads[i].device;
    static const char *const names[] = {"target_gemm", "drafter_gemm", "cudaLaunchKernel", "cudaStreamQuery"};
    for (int i = 0; i < 4; i++) tg_gpu_string(g, names[i]);
    for (int k = 0; k <= steps; k++) tg_step(g, (uint64_t)k, (int64_t)k * 10 * MS, k ? 16384 : 0);
    /* the GPU records of one chunk (100 steps): kernels per device and stream, API calls */
    st_gpu_rec *kern[2][2], *api;
    size_t n_kern[2][2], n_api;
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++)
            if (!(kern[d][s] = malloc(100 * 300 * sizeof(st_gpu_rec)))) die("no memory");
    if (!(api = malloc(100 * 2 * 800 * sizeof *api))) die("no memory");
    uint32_t corr = 1;
    for (int k0 = 0; k0 < steps; k0 += 100) {
        memset(n_kern, 0, sizeof n_kern);
        n_api = 0;
        for (int k = k0; k < k0 + 100 && k < steps; k++) {
            int64_t t = (int64_t)k * 10 * MS;
            tg_range(g, 0, 0, t, t + 1 * MS);
            tg_range(g, 0, 1, t + 1 * MS, t + 10 * MS);
            for (uint32_t d = 0; d < 2; d++) {
                uint32_t tgt = 1 + d, dr = 3 + d;
                tg_range(g, tgt, 2, t + 100 * US, t + 2 * MS);
                tg_range(g, tgt, 1, t + 2 * MS, t + 10 * MS);
                tg_range(g, dr, 3, t, t + 1 * MS);
                tg_range(g, dr, 2, t + 1 * MS, t + 2 * MS);
                tg_range(g, dr, 4, t + 2 * MS, t + 10 * MS);
                /* 300 target kernels of 20 us from t+0.2 ms, launched 5 us apart in forward; 100 drafter
                 * kernels of 30 us from t+6 ms, launched from t+1.1 ms in forward */
                for (int i = 0; i < 400; i++) {
                    int target = i < 300;
                    int64_t launch = target ? t + 150 * US + i * 5 * US : t + 1100 * US + (i - 300) * 5 * US;
                    int64_t start = target ? t + 200 * US + i * 20 * US : t + 6 * MS + (i - 300) * 30 * US;
                    kern[d][target ? 0 : 1][n_kern[d][target ? 0 : 1]++] =
                        (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = target ? 1 : 2, .start_ns = start,
                                     .dur_ns = (target ? 20 : 30) * US, .correlation = corr};
                    api[n_api++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 3, .start_ns = launch, .dur_ns = 4 * US,
                                                .correlation = corr++, .copy_kind = 211, .os_tid = target ? 101 + d : 103 + d};
                }
                /* the drafter's polling while it syncs: 400 queries, 20 us apart */
                for (int i = 0; i < 400; i++)
                    api[n_api++] = (st_gpu_rec){.kind = ST_GPU_API, .name = 4, .start_ns = t + 2 * MS + i * 20 * US,
                                                .dur_ns = 2 * US, .correlation = corr++, .copy_kind = 132,
                                                .os_tid = 103 + d};
            }
            tg_range(g, 5, 5, t, t + 10 * MS);
        }
        for (uint32_t th = 0; th < 6; th++) tg_cut(g, th);
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 2; s++) tg_gpu_chunk(g, d, 7 + s, kern[d][s], n_kern[d][s]);
        tg_gpu_chunk(g, -1, 0, api, n_api);
    }
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++) free(kern[d][s]);
    free(api);
    tg_write(g, path);
    tg_free(g);
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
