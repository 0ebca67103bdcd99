/* bench_cpu_perf.c: what the CPU capture (tracer/cpu_perf.c) costs a busy
 * thread, and what draining its ring costs the consumer.
 *
 * Work rate: a thread runs a fixed arithmetic loop in blocks of about
 * 100 ms, with capture off, with switch records only (no samples: what
 * the host's other load costs through preemptions), at the default period (ST_CPU_DEFAULT_PERIOD_NS,
 * 199 Hz), at 1 kHz, at 1 kHz with a 16 KiB user-stack copy per sample
 * (DWARF unwinding's input; 1k+stack) and at 10 kHz of its CPU time; with capture on, the
 * thread opens its own event before the block (untimed) and a consumer
 * thread drains the ring every millisecond, as the writer will. The
 * variants are interleaved, block after block in rotating order, so that a
 * loaded machine treats them alike; each block's rate is compared to the
 * off block of the same round, and the table gives the median of those
 * ratios over the rounds with their interquartile range. Two rates: work
 * per second of the thread's CPU time (CLOCK_THREAD_CPUTIME_ID; this
 * kernel charges interrupt time to the interrupted thread when
 * CONFIG_IRQ_TIME_ACCOUNTING is off, so the sampling interrupt shows), and
 * work per second of wall time (what other load on the host also moves).
 *
 * The signal sampler (tracer/cpu_timer.c), the fallback where perf
 * events are refused: the same blocks with the thread's CPU-clock timer at
 * the default period and at 1 kHz asked (the tick's period where that is
 * longer), its buffer drained every millisecond; these run where perf
 * events are refused too (the perf variants are then left out).
 *
 * Drain: ns per record as the consumer saw it in the 1 ms drains (parse
 * and callbacks that count), and in one drain of a full 1 MiB ring filled
 * at 10 kHz with nothing draining (records cold in cache), both with and
 * without cutting each chain against the mappings (st_cpu_chain_cut).
 *
 *   build/bench/bench_cpu_perf [rounds, default 15] [block ms, default 100] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tracer/st_cpu.h" /* the capture layer, not yet behind stagetrace.h */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The unit of work: a few µs of dependent multiply-adds. */
__attribute__((noinline)) static uint64_t work_unit(uint64_t x)
{
    for (int i = 0; i < 4096; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
    return x;
}

enum { V_OFF, V_SWITCHES, V_DEFAULT, V_1K, V_1K_STACK, V_10K, V_TIMER, V_TIMER_1K, N_VARIANTS };
static const char *variant_name[N_VARIANTS] = {"off", "switches", "default", "1 kHz", "1k+stack", "10 kHz", "timer", "timer 1k"};
static uint64_t variant_period(int v)
{
    return v == V_SWITCHES ? UINT64_MAX
           : v == V_1K || v == V_1K_STACK || v == V_TIMER_1K ? 1000000
           : v == V_10K ? 100000 : 0;
}
/* 1k+stack: 1 kHz with a 16 KiB user-stack copy and the registers in each
 * sample (st_cpu_config.user_stack, for DWARF unwinding): the kernel's copy
 * on the sampled thread, and the drain of the larger records. */
#define BENCH_USER_STACK 16384u
static int is_timer(int v) { return v == V_TIMER || v == V_TIMER_1K; }
static int perf_ok; /* the perf variants run */
static int variant_runs(int v) { return v == V_OFF || is_timer(v) || perf_ok; }

typedef struct counts {
    uint64_t switches, samples, lost, frames, kept_frames, sum;
    uint64_t overruns, timer_period_ns; /* the signal sampler's */
    int cut; /* cut each chain against the mappings */
} counts;

static st_cpu_maps maps;

static void on_switch(void *ctx, const st_cpu_thread *t, const st_cpu_switch *s)
{
    counts *c = ctx;
    c->switches++;
    c->sum += (uint64_t)s->t_ns;
}

static void on_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s)
{
    counts *c = ctx;
    c->samples++;
    c->frames += s->n_frames;
    c->sum += s->frames[0];
    if (c->cut) c->kept_frames += st_cpu_chain_cut(&maps, s->frames, s->n_frames);
}

static void on_lost(void *ctx, const st_cpu_thread *t, uint64_t n, int64_t t_ns)
{
    ((counts *)ctx)->lost += n;
}

/* One block, on the busy thread, drained by the consumer. */
typedef struct block {
    int variant;
    int64_t dur_ns;
    st_cpu_thread ev;
    st_cpu_timer *tm;
    char why[256];
    int open_rc;
    atomic_int state; /* 0 starting, 1 open (drain), 2 done */
    uint64_t units;
    int64_t wall_ns, cpu_ns;
    volatile uint64_t sink_value;
} block;

static void *busy_thread(void *arg)
{
    block *b = arg;
    if (is_timer(b->variant)) {
        b->ev.fd = -1;
        b->open_rc = st_cpu_timer_open(&b->tm, variant_period(b->variant), 0, b->why, sizeof b->why);
    } else if (b->variant != V_OFF) {
        st_cpu_config cfg = {.period_ns = variant_period(b->variant), /* 0: the library's default */
                             .user_stack = b->variant == V_1K_STACK ? BENCH_USER_STACK : 0};
        b->open_rc = st_cpu_thread_open(&b->ev, 0, &cfg);
        snprintf(b->why, sizeof b->why, "%s", b->ev.reason);
    } else {
        b->ev.fd = -1;
    }
    atomic_store(&b->state, 1);
    uint64_t x = 1, units = 0;
    int64_t w0 = mono_ns(), c0 = thread_cpu_ns(), until = w0 + b->dur_ns;
    do {
        for (int i = 0; i < 16; i++) x = work_unit(x);
        units += 16;
    } while (mono_ns() < until);
    b->wall_ns = mono_ns() - w0;
    b->cpu_ns = thread_cpu_ns() - c0;
    b->units = units;
    b->sink_value = x;
    st_cpu_timer_stop(b->tm);
    atomic_store(&b->state, 2);
    return NULL;
}

static st_cpu_sink sink;
static int64_t drain_ns_total;
static uint64_t drain_records_total, drains_with_records;

static void run_block(block *b, counts *c)
{
    pthread_t th;
    pthread_create(&th, NULL, busy_thread, b);
    while (atomic_load(&b->state) == 0) usleep(100);
    sink.ctx = c;
    while (atomic_load(&b->state) != 2) {
        int64_t t0 = mono_ns();
        long n = st_cpu_thread_drain(&b->ev, &sink) + st_cpu_timer_drain(b->tm, &sink, &b->ev);
        if (n > 0) {
            drain_ns_total += mono_ns() - t0;
            drain_records_total += (uint64_t)n;
            drains_with_records++;
        }
        usleep(1000);
    }
    pthread_join(th, NULL);
    st_cpu_thread_drain(&b->ev, &sink);
    st_cpu_thread_close(&b->ev);
    if (b->tm) {
        st_cpu_timer_drain(b->tm, &sink, &b->ev);
        c->lost += b->tm->lost;
        c->overruns += b->tm->overruns;
        c->timer_period_ns = b->tm->period_ns;
        st_cpu_timer_close(b->tm);
        b->tm = NULL;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void quartiles(double *v, int n, double *q1, double *med, double *q3)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *q1 = v[n / 4];
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *q3 = v[(3 * n) / 4];
}

/* One drain of a ring filled with nothing draining it. */
static void full_ring_drain(int cut)
{
    block b;
    memset(&b, 0, sizeof b);
    st_cpu_config cfg = {.period_ns = 100000, .ring_bytes = 1u << 20};
    if (st_cpu_thread_open(&b.ev, 0, &cfg) != ST_CPU_OK) {
        printf("full-ring drain: %s\n", b.ev.reason);
        return;
    }
    uint64_t x = 1;
    int64_t until = mono_ns() + 300000000; /* 300 ms of samples, about 3 000 at 10 kHz */
    while (mono_ns() < until) x = work_unit(x);
    b.sink_value = x;
    counts c = {.cut = cut};
    sink.ctx = &c;
    if (cut) st_cpu_maps_load(&maps, NULL); /* fresh: a miss does not read them again */
    unsigned loads = maps.n_loads;
    int64_t t0 = mono_ns();
    long n = st_cpu_thread_drain(&b.ev, &sink);
    int64_t dt = mono_ns() - t0;
    printf("  one drain of a %zu KiB ring (%s): %ld records (%llu samples, %.1f frames each, %llu lost) "
           "in %.1f µs: %.0f ns per record%s\n",
           b.ev.data_bytes / 1024, cut ? "chains cut against the mappings" : "parse only", n,
           (unsigned long long)c.samples, c.samples ? (double)c.frames / c.samples : 0.0,
           (unsigned long long)c.lost, dt / 1e3, n ? (double)dt / n : 0.0,
           maps.n_loads != loads ? " (the maps were read again)" : "");
    st_cpu_thread_close(&b.ev);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    int64_t block_ns = (argc > 2 ? atoll(argv[2]) : 100) * 1000000;
    if (rounds < 3) rounds = 3;
    sink.on_switch = on_switch;
    sink.on_sample = on_sample;
    sink.on_lost = on_lost;
    st_cpu_maps_load(&maps, NULL);

    st_cpu_thread probe;
    int rc = st_cpu_thread_open(&probe, 0, NULL);
    st_cpu_thread_close(&probe);
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    long par = -99;
    if (f) {
        if (fscanf(f, "%ld", &par) != 1) par = -99;
        fclose(f);
    }
    printf("perf_event_paranoid %ld, uid %d, %ld cores: %s; default period %.3f ms (%.0f Hz)\n", par, (int)getuid(),
           sysconf(_SC_NPROCESSORS_ONLN), rc == ST_CPU_OK ? "perf events open" : probe.reason, probe.period_ns / 1e6,
           probe.period_ns ? 1e9 / probe.period_ns : 0.0);
    perf_ok = rc == ST_CPU_OK;
    const char *tick_src;
    long tick_hz = st_cpu_timer_tick_hz(&tick_src);
    printf("signal sampler: tick %ld Hz (%s); default period %.3f ms, 1 kHz asked: %.3f ms\n", tick_hz, tick_src,
           st_cpu_timer_period_for(0) / 1e6, st_cpu_timer_period_for(1000000) / 1e6);
    if (!perf_ok) printf("perf events refused: the signal sampler's variants only\n");

    double *cpu_ratio[N_VARIANTS], *wall_ratio[N_VARIANTS];
    counts c[N_VARIANTS];
    memset(c, 0, sizeof c);
    int64_t cpu_total[N_VARIANTS] = {0};
    for (int v = 0; v < N_VARIANTS; v++) {
        cpu_ratio[v] = calloc((size_t)rounds, sizeof(double));
        wall_ratio[v] = calloc((size_t)rounds, sizeof(double));
    }
    for (int r = 0; r < rounds; r++) {
        block b[N_VARIANTS];
        for (int k = 0; k < N_VARIANTS; k++) {
            int v = (k + r) % N_VARIANTS;
            if (!variant_runs(v)) continue;
            memset(&b[v], 0, sizeof b[v]);
            b[v].variant = v;
            b[v].dur_ns = block_ns;
            run_block(&b[v], &c[v]);
            if (b[v].open_rc != ST_CPU_OK) {
                printf("%s: %s\n", variant_name[v], b[v].why);
                return 1;
            }
            cpu_total[v] += b[v].cpu_ns;
        }
        double off_cpu = (double)b[V_OFF].units / b[V_OFF].cpu_ns, off_wall = (double)b[V_OFF].units / b[V_OFF].wall_ns;
        for (int v = 0; v < N_VARIANTS; v++) {
            if (!variant_runs(v)) continue;
            cpu_ratio[v][r] = ((double)b[v].units / b[v].cpu_ns) / off_cpu;
            wall_ratio[v][r] = ((double)b[v].units / b[v].wall_ns) / off_wall;
        }
    }
    printf("\nbusy thread's work rate against capture off (%d interleaved rounds of %lld ms blocks; median [IQR]):\n",
           rounds, (long long)(block_ns / 1000000));
    printf("  %-8s %-24s %-24s %-12s %-10s %s\n", "capture", "per CPU second", "per wall second", "samples/s",
           "switches", "lost (timer: overruns, period)");
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!variant_runs(v)) continue;
        double q1, m, q3, w1, wm, w3;
        quartiles(cpu_ratio[v], rounds, &q1, &m, &q3);
        quartiles(wall_ratio[v], rounds, &w1, &wm, &w3);
        printf("  %-8s %.4f [%.4f-%.4f]   %.4f [%.4f-%.4f]   %-12.0f %-10llu %llu\n", variant_name[v], m, q1, q3, wm,
               w1, w3, cpu_total[v] ? c[v].samples / (cpu_total[v] / 1e9) : 0.0, (unsigned long long)c[v].switches,
               (unsigned long long)c[v].lost);
        if (is_timer(v))
            printf("           (overruns %llu, period %.3f ms)\n", (unsigned long long)c[v].overruns,
                   c[v].timer_period_ns / 1e6);
    }
    printf("\ndrain, every 1 ms during the blocks: %llu records in %llu drains that found some: %.0f ns per record, "
           "%.2f µs per drain (with its two clock reads)\n",
           (unsigned long long)drain_records_total, (unsigned long long)drains_with_records,
           drain_records_total ? (double)drain_ns_total / drain_records_total : 0.0,
           drains_with_records ? drain_ns_total / 1e3 / drains_with_records : 0.0);
    if (perf_ok) {
        full_ring_drain(0);
        full_ring_drain(1);
    }
    st_cpu_maps_free(&maps);
    return 0;
}
