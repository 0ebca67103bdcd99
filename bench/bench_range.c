/* bench_range.c: what one range (st_begin + st_end) costs the calling
 * thread, against its floor: two raw reads of the library's clock in the
 * same loop shape. On a shared machine only ratios measured side by side
 * mean anything, so the variants of each phase are interleaved: every
 * repetition runs one block of each variant (in rotating order), and the
 * figure kept is the median over the repetitions of each variant's time
 * and of its paired difference to the floor of the same repetition, with
 * the interquartile range of that difference as its spread.
 *
 * Phases (one trace per process, so one trace per phase):
 *   1. recording, NVTX off: floor, ranges, flows (st_flow_out + st_flow_in:
 *      two calls, as a range), and a range's stores without the library
 *      (what a ring of this shape costs at the least);
 *   2. recording, NVTX on with no tool attached: floor, ranges, and NVTX
 *      push+pop alone;
 *   3. profiling disabled (a trace opened with enabled = 0): an empty loop,
 *      ranges, flows, two clock_gettime calls.
 * Recording blocks use the default ring (ST_BENCH_RING_RECORDS=N sets
 * another; ST_BENCH_CPU=1 records with the CPU capture on) and flush the
 * trace (untimed) before each block, so a block never finds the ring full
 * and the writer is idle when the block starts, as in a program whose
 * writer keeps up. The "NVTX with a recording tool" rows run in a child
 * process started with NVTX_INJECTION64_PATH pointing at the test injection
 * library, since NVTX binds its tool once per process.
 *
 *   build/bench/bench_range [ranges_per_block] [reps]
 * Defaults: 4096 ranges per block (about 0.1 ms), 1001 repetitions: short
 * blocks, so that few of them are cut by the scheduler on a busy machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stagetrace.h"
#include "../tracer/st_testing.h" /* st_clock_raw: the clock read the hot path times */

#ifdef ST_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

static long n_ranges = 4096;
static int reps = 1001;

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

/* The value at quantile q of v[0..n) (sorted in place). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return v[(int)(q * (n - 1) + 0.5)];
}

typedef void (*body_fn)(long n);
static volatile int64_t sink;
static volatile int stage_var; /* read once per block, as a call site's id would be */

static void body_empty(long n)
{
    for (long i = 0; i < n; i++) __asm__ volatile("" ::: "memory");
}

static void body_raw_clock(long n)
{
    int64_t s = 0;
    for (long i = 0; i < n; i++) {
        s += st_clock_raw();
        s += st_clock_raw();
    }
    sink = s;
}

/* The stores of a range without the library: two clock reads, each
 * followed by a 16-byte slot written into a 4 MiB array (the default
 * ring's size) and a counter kept in memory, as the inline st_begin and
 * st_end write theirs, with no check and no call. What a ring of this
 * shape costs on the machine at the least. */
#define STORE_SLOTS (1u << 18)
static struct { int64_t ts; uint64_t id_type; } *store_buf;
static uint64_t store_head, store_open;
static void body_raw_stores(long n)
{
    uint64_t h = store_head;
    for (long i = 0; i < n; i++) {
        store_buf[h & (STORE_SLOTS - 1)].ts = st_clock_raw();
        store_buf[h & (STORE_SLOTS - 1)].id_type = 1;
        h++;
        __atomic_store_n(&store_open, store_open + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&store_head, h, __ATOMIC_RELEASE);
        store_buf[h & (STORE_SLOTS - 1)].ts = st_clock_raw();
        store_buf[h & (STORE_SLOTS - 1)].id_type = 2;
        h++;
        __atomic_store_n(&store_open, store_open - 1, __ATOMIC_RELAXED);
        __atomic_store_n(&store_head, h, __ATOMIC_RELEASE);
    }
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
    st_stage stage = (st_stage)stage_var;
    for (long i = 0; i < n; i++) {
        st_begin(stage);
        st_end(stage);
    }
}

/* Two flow records (an out and an in) per iteration: two calls, as a range,
 * so their rows compare directly (a flow takes two 16-byte ring slots, its
 * record and its payload, where a begin or an end takes one). */
static void body_flows(long n)
{
    for (long i = 0; i < n; i++) {
        st_flow_out((uint64_t)i);
        st_flow_in((uint64_t)i);
    }
}

typedef struct variant {
    const char *name;
    body_fn fn;
    int flush;        /* flush the trace (untimed) before each block */
    double *ns;       /* per repetition, ns per range */
    double *diff;     /* per repetition, ns over variant 0 */
} variant;

static st_trace *cur_trace;

static double time_block(const variant *v)
{
    if (v->flush && cur_trace) st_flush(cur_trace);
    double a = now_s();
    v->fn(n_ranges);
    return (now_s() - a) * 1e9 / (double)n_ranges;
}

/* Runs the variants interleaved and prints, per variant, the median ns per
 * range and (after the first, the reference) the median paired difference
 * to the reference with its interquartile range. */
static void interleave(const char *title, variant *v, int nv)
{
    for (int k = 0; k < nv; k++) {
        v[k].ns = calloc((size_t)reps, sizeof(double));
        v[k].diff = calloc((size_t)reps, sizeof(double));
        if (!v[k].ns || !v[k].diff) {
            fprintf(stderr, "bench_range: out of memory\n");
            exit(1);
        }
        time_block(&v[k]); /* warm up */
    }
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < nv; j++) {
            int k = (r + j) % nv;
            v[k].ns[r] = time_block(&v[k]);
        }
    for (int k = 1; k < nv; k++)
        for (int r = 0; r < reps; r++) v[k].diff[r] = v[k].ns[r] - v[0].ns[r];
    printf("%s\n", title);
    printf("  %-46s %9s %26s\n", "", "ns/range", "minus first row [IQR]");
    for (int k = 0; k < nv; k++) {
        double med = quantile(v[k].ns, reps, 0.5);
        if (k == 0) {
            printf("  %-46s %9.2f\n", v[k].name, med);
        } else {
            double d50 = quantile(v[k].diff, reps, 0.5);
            double d25 = quantile(v[k].diff, reps, 0.25), d75 = quantile(v[k].diff, reps, 0.75);
            printf("  %-46s %9.2f %+10.2f [%+.2f, %+.2f]\n", v[k].name, med, d50, d25, d75);
        }
        free(v[k].ns);
        free(v[k].diff);
    }
}

static st_trace *open_trace(int enabled, int nvtx, const char *path)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.enabled = enabled;
    opt.overwrite = 1;
    opt.program = "bench_range";
    opt.nvtx = nvtx;
    opt.block_when_full = 1; /* never taken: each block fits the ring after a flush */
    const char *ring = getenv("ST_BENCH_RING_RECORDS"); /* default: the library's */
    if (ring) opt.ring_records = (uint32_t)strtoul(ring, NULL, 10);
    const char *cpu = getenv("ST_BENCH_CPU"); /* 1: CPU capture on (opt.cpu), at its default period */
    if (cpu && enabled) opt.cpu = atoi(cpu);
    st_trace *t;
    if (st_open(&t, &opt)) {
        fprintf(stderr, "bench_range: %s\n", st_last_error());
        exit(1);
    }
    stage_var = st_stage_register(t, "range", ST_WORK);
    st_thread_register(t, "bench", "bench", -1, 0);
    return t;
}

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
    if (n_ranges < 1000 || n_ranges > 30000 || reps < 1) {
        fprintf(stderr, "bench_range: usage: bench_range [ranges_per_block 1000..30000] [reps >= 1]\n");
        return 2;
    }
    const char *dir = getenv("ST_BENCH_TMP") ? getenv("ST_BENCH_TMP") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_range_%d.sqlite", dir, (int)getpid());
    st_clock_init(0);

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
        cur_trace = open_trace(1, 1, path);
        variant v[] = {{"NVTX push+pop, recording tool attached", body_nvtx, 0, 0, 0},
                       {"st_begin+st_end, NVTX on, tool attached", body_ranges, 1, 0, 0}};
        interleave("with NVTX_INJECTION64_PATH set (the test's recording tool):", v, 2);
        st_close(cur_trace);
        unlink(path);
#endif
        return 0;
    }
    printf("cost of one range, one thread, %d interleaved reps x %ld ranges (clock: %s)\n", reps,
           n_ranges, st_clock_name());

    store_buf = aligned_alloc(64, sizeof *store_buf * STORE_SLOTS);
    if (!store_buf) {
        fprintf(stderr, "bench_range: out of memory\n");
        return 1;
    }
    memset(store_buf, 0, sizeof *store_buf * STORE_SLOTS);
    cur_trace = open_trace(1, 0, path);
    variant rec[] = {{"two raw clock reads (the floor)", body_raw_clock, 0, 0, 0},
                     {"st_begin+st_end, NVTX off", body_ranges, 1, 0, 0},
                     {"st_flow_out+st_flow_in", body_flows, 1, 0, 0},
                     {"the same stores without the library", body_raw_stores, 0, 0, 0}};
    interleave("recording, NVTX off:", rec, 4);
    uint64_t d1 = st_dropped(cur_trace);
    st_close(cur_trace);

#ifdef ST_HAVE_NVTX
    cur_trace = open_trace(1, 1, path);
    variant nv[] = {{"two raw clock reads (the floor)", body_raw_clock, 0, 0, 0},
                    {"st_begin+st_end, NVTX on, no tool", body_ranges, 1, 0, 0},
                    {"NVTX push+pop alone, no tool", body_nvtx, 0, 0, 0}};
    interleave("recording, NVTX on, no tool attached:", nv, 3);
    d1 += st_dropped(cur_trace);
    st_close(cur_trace);
#endif
    unlink(path);

    cur_trace = open_trace(0, 0, path);
    variant off[] = {{"empty loop", body_empty, 0, 0, 0},
                     {"st_begin+st_end, profiling disabled", body_ranges, 0, 0, 0},
                     {"st_flow_out+st_flow_in, profiling disabled", body_flows, 0, 0, 0},
                     {"two raw clock reads", body_raw_clock, 0, 0, 0},
                     {"two clock_gettime(CLOCK_MONOTONIC)", body_clock_gettime, 0, 0, 0}};
    interleave("profiling disabled (enabled = 0):", off, 5);
    st_close(cur_trace);
    cur_trace = NULL;
    printf("  dropped events: %llu (block_when_full: must be 0)\n", (unsigned long long)d1);
    fflush(stdout);

    const char *inject = getenv("ST_NVTX_INJECT");
    if (inject && access(inject, R_OK) == 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "NVTX_INJECTION64_PATH='%s' NVTX_INJECT_LOG=/dev/null '%s' --child %ld %d", inject,
                 argv[0], n_ranges / 4 < 1000 ? 1000 : n_ranges / 4, reps / 10 < 5 ? 5 : reps / 10);
        int rc = system(cmd);
        if (rc != 0) fprintf(stderr, "bench_range: child with the injection tool failed (%d)\n", rc);
    }
    return d1 != 0;
}
