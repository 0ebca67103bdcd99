/* bench_cpu_switch.c: what the CPU capture costs a thread that blocks often, per context switch.
 *
 * Two threads ping-pong one byte through two pipes: each round trip blocks each thread once, so
 * it is two switch-outs and two switch-ins per thread. Blocks of about 200 ms per variant, the
 * variants interleaved in rotating order over the rounds, each block's round-trip rate compared
 * to the same round's `off` block; the table gives the median of those ratios with their
 * interquartile range, and the time each variant adds per switch-out of one thread (from the
 * medians' rates: 1 / rate - 1 / rate_off, over the two threads' two switch-outs a round trip).
 *
 *   off        no event
 *   switches   the CPU-clock event without samples: the switch records only
 *   default    switch records and CPU samples at the default period (199 Hz)
 *   wait       a wait stack at every switch-out instead (st_cpu_config.wait_stacks: a context-switch
 *              event, period 1, with the callchain; perf_event_paranoid <= 1, CAP_PERFMON or root)
 *   sched      switch records plus the sched_switch tracepoint event (st_cpusched_open: the task
 *              state and the kernel stack at every switch-out; root with tracefs mounted)
 * A consumer thread drains both threads' rings every millisecond, as the writer does. Variants
 * the system refuses are said and left out.
 *
 *   build/bench/bench_cpu_switch [rounds, default 15] [block ms, default 200] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tracer/st_cpu.h"
#include "../tracer/st_cpusched.h"

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum { V_OFF, V_SWITCHES, V_DEFAULT, V_WAIT, V_SCHED, N_VARIANTS };
static const char *variant_name[N_VARIANTS] = {"off", "switches", "default", "wait", "sched"};
static int usable[N_VARIANTS];

typedef struct side {
    int variant, in, out, first;
    st_cpu_thread ev, sched;
    int rc, sched_rc;
    char why[300];
} side;

static atomic_int opened, stop;
static uint64_t trips;

/* Opens this thread's events for the variant; 0 or -1 with why. */
static int open_events(side *s)
{
    s->ev.fd = s->sched.fd = -1;
    if (s->variant == V_OFF) return 0;
    st_cpu_config cfg = {.period_ns = s->variant == V_DEFAULT ? 0 : UINT64_MAX, .wait_stacks = s->variant == V_WAIT};
    if (st_cpu_thread_open(&s->ev, 0, &cfg) != ST_CPU_OK) {
        snprintf(s->why, sizeof s->why, "%s", s->ev.reason);
        return -1;
    }
    if (s->variant == V_SCHED && st_cpusched_open(&s->sched, ST_CPU_DEFAULT_RING_BYTES) != ST_CPU_OK) {
        snprintf(s->why, sizeof s->why, "%s", s->sched.reason);
        st_cpu_thread_close(&s->ev);
        return -1;
    }
    return 0;
}

static void *pinger(void *arg)
{
    side *s = arg;
    s->rc = open_events(s);
    atomic_fetch_add(&opened, 1);
    while (atomic_load(&opened) < 2) usleep(100);
    char c = 0;
    uint64_t n = 0;
    if (s->first && write(s->out, &c, 1) != 1) return NULL;
    while (!atomic_load(&stop)) {
        if (read(s->in, &c, 1) != 1) break;
        if (s->first) n++;
        if (write(s->out, &c, 1) != 1) break;
    }
    if (s->first) trips = n;
    return NULL;
}

static void on_switch(void *ctx, const st_cpu_thread *t, const st_cpu_switch *w) { (*(uint64_t *)ctx)++; }
static void on_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *w) { (*(uint64_t *)ctx)++; }
static void on_sched(void *ctx, const st_cpu_thread *t, const st_cpu_sample *w, uint32_t nk, int state)
{
    (*(uint64_t *)ctx)++;
}

/* One block of the variant: round trips per second (0 when refused, with why). */
static double run_block(int v, int64_t block_ns, uint64_t *records, char *why, size_t why_size)
{
    int p1[2], p2[2];
    if (pipe(p1) || pipe(p2)) return 0;
    side a = {.variant = v, .in = p2[0], .out = p1[1], .first = 1};
    side b = {.variant = v, .in = p1[0], .out = p2[1]};
    atomic_store(&opened, 0);
    atomic_store(&stop, 0);
    trips = 0;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, pinger, &a);
    pthread_create(&tb, NULL, pinger, &b);
    while (atomic_load(&opened) < 2) usleep(100);
    st_cpu_sink sink = {.ctx = records, .on_switch = on_switch, .on_sample = on_sample, .on_sched = on_sched};
    int64_t t0 = mono_ns();
    while (mono_ns() - t0 < block_ns) {
        st_cpu_thread_drain(&a.ev, &sink);
        st_cpu_thread_drain(&b.ev, &sink);
        st_cpusched_drain(&a.sched, &sink);
        st_cpusched_drain(&b.sched, &sink);
        usleep(1000);
    }
    atomic_store(&stop, 1);
    int64_t dt = mono_ns() - t0;
    /* unblock whichever side waits: close the pipes' write ends */
    close(p1[1]);
    close(p2[1]);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    close(p1[0]);
    close(p2[0]);
    side *s[2] = {&a, &b};
    double rate = (double)trips * 1e9 / (double)dt;
    for (int i = 0; i < 2; i++) {
        if (s[i]->rc && why[0] == 0) snprintf(why, why_size, "%s", s[i]->why);
        st_cpu_thread_drain(&s[i]->ev, &sink);
        st_cpusched_drain(&s[i]->sched, &sink);
        st_cpu_thread_close(&s[i]->ev);
        st_cpu_thread_close(&s[i]->sched);
    }
    return a.rc || b.rc ? 0 : rate;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    int64_t block_ns = (argc > 2 ? atoll(argv[2]) : 200) * 1000000;
    if (rounds < 3) rounds = 3;
    printf("uid %d, %ld cores, %d rounds of %lld ms blocks\n", (int)getuid(), sysconf(_SC_NPROCESSORS_ONLN), rounds,
           (long long)(block_ns / 1000000));
    for (int v = 0; v < N_VARIANTS; v++) {
        char why[300] = "";
        uint64_t rec = 0;
        usable[v] = run_block(v, 20000000, &rec, why, sizeof why) > 0;
        if (!usable[v]) printf("  %-9s refused here: %s\n", variant_name[v], why);
    }
    double *ratio[N_VARIANTS], *rate[N_VARIANTS];
    uint64_t records[N_VARIANTS] = {0};
    for (int v = 0; v < N_VARIANTS; v++) {
        ratio[v] = calloc((size_t)rounds, sizeof(double));
        rate[v] = calloc((size_t)rounds, sizeof(double));
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < N_VARIANTS; k++) {
            int v = (k + r) % N_VARIANTS;
            if (!usable[v]) continue;
            char why[300] = "";
            rate[v][r] = run_block(v, block_ns, &records[v], why, sizeof why);
        }
        for (int v = 0; v < N_VARIANTS; v++)
            if (usable[v]) ratio[v][r] = rate[v][r] / rate[V_OFF][r];
    }
    qsort(rate[V_OFF], (size_t)rounds, sizeof(double), cmp_double);
    double off = rate[V_OFF][rounds / 2];
    printf("  variant   rate / off [IQR]           round trips/s (median)  added per switch-out  records\n");
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!usable[v]) continue;
        qsort(ratio[v], (size_t)rounds, sizeof(double), cmp_double);
        qsort(rate[v], (size_t)rounds, sizeof(double), cmp_double);
        double med = rate[v][rounds / 2];
        /* two threads, one switch-out each per round trip */
        double added_ns = v == V_OFF || med <= 0 ? 0 : (1e9 / med - 1e9 / off) / 2;
        printf("  %-9s %.4f [%.4f-%.4f]   %-23.0f %-21.0f %llu\n", variant_name[v], ratio[v][rounds / 2],
               ratio[v][rounds / 4], ratio[v][(3 * rounds) / 4], med, added_ns, (unsigned long long)records[v]);
    }
    return 0;
}
