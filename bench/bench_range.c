/* bench_range.c: what one range (st_begin + st_end) costs the calling
 * thread, with the writer running, beside its parts and alternatives in the
 * same run: two raw clock reads (the library's clock), two clock_gettime
 * calls, NVTX push/pop with no tool attached, and library ranges with NVTX
 * off and on. The "NVTX with a recording tool" rows run in a child process
 * started with NVTX_INJECTION64_PATH pointing at the test injection library,
 * since NVTX binds its tool once per process.
 *
 *   build/bench/bench_range [ranges_per_rep] [reps]
 * Prints the median ns per range over the repetitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stagetrace.h"
#include "st_internal.h"

#ifdef ST_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

static long n_ranges = 1000000;
static int reps = 11;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*body_fn)(long n);
static volatile int64_t sink;
static int stage;

static void body_raw_clock(long n)
{
    int64_t s = 0;
    for (long i = 0; i < n; i++) {
        s += st_clock_raw();
        s += st_clock_raw();
    }
    sink = s;
}

static void body_clock_gettime(long n)
{
    int64_t s = 0;
    struct timespec ts;
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s += ts.tv_nsec;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s += ts.tv_nsec;
    }
    sink = s;
}

#ifdef ST_HAVE_NVTX
static nvtxDomainHandle_t domain;
static nvtxEventAttributes_t attr;
static void body_nvtx(long n)
{
    for (long i = 0; i < n; i++) {
        nvtxDomainRangePushEx(domain, &attr);
        nvtxDomainRangePop(domain);
    }
}
#endif

static void body_ranges(long n)
{
    for (long i = 0; i < n; i++) {
        st_begin((st_stage)stage);
        st_end((st_stage)stage);
    }
}

static st_trace *flush_between; /* drained (untimed) between repetitions */

static double measure(body_fn fn, long n)
{
    double t[64];
    int r = reps > 64 ? 64 : reps;
    fn(n / 10); /* warm up */
    for (int i = 0; i < r; i++) {
        if (flush_between) st_flush(flush_between);
        double a = now_s();
        fn(n);
        t[i] = (now_s() - a) * 1e9 / (double)n;
    }
    qsort(t, (size_t)r, sizeof t[0], cmp_double);
    return t[r / 2];
}

/* Library ranges with a trace open; nvtx: 0 off, 1 on. */
static double measure_library(int nvtx, const char *dir, uint64_t *dropped)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_range_%d_%d.sqlite", dir, nvtx, (int)getpid());
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "bench_range";
    opt.nvtx = nvtx;
    opt.block_when_full = 1;
    /* Room for a whole repetition, so the figure is the hot path's cost
     * (the writer drains concurrently; bench_writer measures its rate). */
    opt.ring_records = 1u << 22;
    st_trace *t;
    if (st_open(&t, &opt)) {
        fprintf(stderr, "bench_range: %s\n", st_last_error());
        exit(1);
    }
    stage = st_stage_register(t, "range", ST_WORK);
    st_thread_register(t, "bench", "bench", -1, 0);
    body_ranges(1l << 21); /* touch every page of the ring once */
    st_flush(t);
    flush_between = t;
    double ns = measure(body_ranges, n_ranges);
    flush_between = NULL;
    *dropped = st_dropped(t);
    st_close(t);
    unlink(path);
    return ns;
}

static void row(const char *what, double ns) { printf("  %-44s %8.2f ns\n", what, ns); }

int main(int argc, char **argv)
{
    const char *mode = "main";
    int argi = 1;
    if (argc > 1 && strcmp(argv[1], "--child") == 0) {
        mode = "child";
        argi = 2;
    }
    if (argc > argi) n_ranges = atol(argv[argi]);
    if (argc > argi + 1) reps = atoi(argv[argi + 1]);
    if (n_ranges < 1000 || n_ranges > 2000000 || reps < 1) {
        fprintf(stderr, "bench_range: usage: bench_range [ranges_per_rep 1000..2000000] [reps >= 1]\n");
        return 2;
    }
    const char *dir = getenv("ST_BENCH_TMP") ? getenv("ST_BENCH_TMP") : "/tmp";
    st_clock_init(0);
    uint64_t dropped = 0;

#ifdef ST_HAVE_NVTX
    domain = nvtxDomainCreateA("bench");
    memset(&attr, 0, sizeof attr);
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attr.message.registered = nvtxDomainRegisterStringA(domain, "range");
#endif

    if (strcmp(mode, "child") == 0) {
#ifdef ST_HAVE_NVTX
        row("NVTX push+pop, recording tool attached", measure(body_nvtx, n_ranges));
        row("st_begin+st_end, NVTX on, tool attached", measure_library(1, dir, &dropped));
#endif
        return 0;
    }
    printf("cost of one range, one thread, median of %d reps x %ld ranges (clock: %s)\n", reps,
           n_ranges, st_clock_name());
    row("two raw clock reads (the library's clock)", measure(body_raw_clock, n_ranges));
    row("two clock_gettime(CLOCK_MONOTONIC)", measure(body_clock_gettime, n_ranges));
#ifdef ST_HAVE_NVTX
    row("NVTX push+pop, no tool attached", measure(body_nvtx, n_ranges));
#endif
    row("st_begin+st_end, NVTX off, writer running", measure_library(0, dir, &dropped));
    uint64_t d1 = dropped;
#ifdef ST_HAVE_NVTX
    row("st_begin+st_end, NVTX on, no tool", measure_library(1, dir, &dropped));
#endif
    st_options off;
    st_options_init(&off);
    off.enabled = 0;
    st_trace *t;
    st_open(&t, &off);
    stage = st_stage_register(t, "range", ST_WORK);
    st_thread_register(t, "bench", "bench", -1, 0);
    row("st_begin+st_end, profiling disabled", measure(body_ranges, n_ranges));
    st_close(t);
    printf("  dropped events: %llu, %llu (block_when_full: must be 0)\n", (unsigned long long)d1,
           (unsigned long long)dropped);
    fflush(stdout);

    const char *inject = getenv("ST_NVTX_INJECT");
    if (inject && access(inject, R_OK) == 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "NVTX_INJECTION64_PATH='%s' NVTX_INJECT_LOG=/dev/null '%s' --child %ld %d", inject,
                 argv[0], n_ranges / 4, reps);
        int rc = system(cmd);
        if (rc != 0) fprintf(stderr, "bench_range: child with the injection tool failed (%d)\n", rc);
    }
    return 0;
}
