/* test_cpu_perf.c: the CPU capture layer (tracer/cpu_perf.c, st_cpu.h).
 *
 * Measured cases run a workload on a thread that has its own perf event and
 * check what its switch records say of the range around the workload: a
 * spin loop never blocks, and its on-CPU time agrees with the thread's CPU
 * clock (CLOCK_THREAD_CPUTIME_ID) within 2 % of the range plus 2 ms (the
 * switch records and the clock are read at slightly different instants)
 * plus the time the hypervisor stole from the guest's CPUs meanwhile
 * (/proc/stat's steal, summed over the CPUs: the scheduler leaves stolen
 * time out of a thread's CPU clock, while the switch records see the thread
 * on its CPU all along); on
 * a loaded host the spin is preempted, not blocked, so the >= 95 % on-CPU
 * figure is asserted on the share that was not preempted and printed as it
 * is. usleep, a condition-variable wait and a pipe read are <= 5 % on-CPU
 * and >= 90 % blocked. Two spinning threads pinned to one CPU are each
 * preempted for >= 25 % of the range (half, on an idle CPU). At a 1 ms
 * period, >= 90 % of the samples taken while burn() runs have an address
 * of burn (its own section, st_burn_text, bounds the extent) in their
 * frame-pointer chain, although the samples mostly land in the leaf it
 * calls through burn_step.
 *
 * Pure cases: the accounting on hand-made switch sequences, whose expected
 * numbers are worked out beside each case; the drain on a hand-made ring
 * (a record wrapping the ring end, corrupt sizes); the frame validator on
 * fake maps. Refusal: in forked children, a seccomp filter that answers
 * perf_event_open with EPERM or ENOSYS gives ST_CPU_REFUSED and the reason
 * "seccomp refused perf_event_open"; as nobody (when the test runs as
 * root), the event opens at perf_event_paranoid <= 2, and a ring larger
 * than the lock limit is mapped smaller with the refusal reported.
 * Tests that need perf events print why and skip where the kernel refuses
 * them (ST_TEST_REFUSE_PERF=1 runs the whole program under the filter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/perf_event.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "st_cpu.h"

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

/* The steal time of all CPUs so far (/proc/stat's "cpu" line, field 8),
 * in ns; 0 where the kernel does not say. */
static int64_t steal_ns(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int got = 0;
    if (f) {
        got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                     &v[6], &v[7]);
        fclose(f);
    }
    long hz = sysconf(_SC_CLK_TCK);
    return got == 8 && hz > 0 ? (int64_t)(v[7] * (1000000000ULL / (unsigned long long)hz)) : 0;
}

/* The steal time over the last run_jobs. */
static int64_t g_steal_ns;
/* Under ThreadSanitizer a thread that wakes hundreds of times a second runs the runtime's own
 * code around every wake, which its CPU clock counts and a single run showed 5 % apart from the
 * switch records (usleep, 522 switches in 300 ms): the bound is wider there. */
#if defined(__SANITIZE_THREAD__)
#define CLOCK_BOUND(d) (0.08 * (d) + 2e6 + (double)g_steal_ns)
#else
#define CLOCK_BOUND(d) (0.02 * (d) + 2e6 + (double)g_steal_ns)
#endif

static long paranoid(void)
{
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    long v = -99;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -99;
        fclose(f);
    }
    return v;
}

/* Whether this process may open the event at all; the reason otherwise. */
static int perf_refused(char *why, size_t n)
{
    st_cpu_thread t;
    int rc = st_cpu_thread_open(&t, 0, NULL);
    if (rc != ST_CPU_OK) snprintf(why, n, "%s", t.reason);
    st_cpu_thread_close(&t);
    return rc != ST_CPU_OK;
}

#define NEED_PERF()                                                                       \
    do {                                                                                  \
        char why_[256];                                                                   \
        if (perf_refused(why_, sizeof why_)) {                                            \
            printf("skipped: %s (uid %d)\n", why_, (int)getuid());                        \
            skip();                                                                       \
        }                                                                                 \
    } while (0)

/* ---- the measured thread -------------------------------------------------- */

extern const char __start_st_burn_text[], __stop_st_burn_text[];

/* burn_leaf does the work, called by burn_step, called by burn: a sample
 * finds burn in the chain through the frame pointers, as a profile of real
 * code would. gcc keeps no frame pointer in a leaf function whatever the
 * attribute says, so a sample in burn_leaf shows its ip and then its
 * caller's caller (burn: the very case the test needs, the intermediate
 * burn_step being the frame that a leaf hides); burn_step and burn keep
 * theirs whatever the build's flags. */
__attribute__((noinline, noclone)) static uint64_t burn_leaf(uint64_t x)
{
    for (int i = 0; i < 100; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
    return x;
}

__attribute__((noinline, noclone, optimize("no-omit-frame-pointer"))) static uint64_t burn_step(uint64_t x)
{
    for (int i = 0; i < 20; i++) {
        x = burn_leaf(x);
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline, noclone, used, section("st_burn_text"), optimize("no-omit-frame-pointer")))
static uint64_t burn(int64_t until_ns)
{
    uint64_t x = 1;
    while (mono_ns() < until_ns) {
        x = burn_step(x);
        __asm__ volatile("" : "+r"(x)); /* no tail call: burn stays on the stack */
    }
    return x;
}

typedef struct job_sample {
    int64_t t_ns;
    int has_burn;
} job_sample;

typedef struct job job;
struct job {
    void (*work)(job *j);
    int64_t dur_ns;
    int cpu;                 /* pin to this CPU when >= 0 */
    st_cpu_config cfg;
    st_cpu_thread ev;
    int open_rc;
    int64_t t_open, t0, t1, cpu0, cpu1;
    atomic_int opened, done;
    /* what the drain saw */
    st_cpu_switch *sw;
    size_t n_sw, cap_sw;
    job_sample *smp;
    size_t n_smp, cap_smp;
    long samples_in, samples_burn;
    int pipe_fd[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    volatile uint64_t sink;
};

static void on_switch(void *ctx, const st_cpu_thread *t, const st_cpu_switch *s)
{
    job *j = ctx;
    if (j->n_sw == j->cap_sw) {
        j->cap_sw = j->cap_sw ? 2 * j->cap_sw : 1024;
        j->sw = realloc(j->sw, j->cap_sw * sizeof *j->sw);
        assert_non_null(j->sw);
    }
    j->sw[j->n_sw++] = *s;
}

static st_cpu_maps proc_maps;

/* Each sample's time and whether burn is in its chain (cut at the first
 * frame outside the executable mappings): judged once the job is over and
 * its range known. */
static void on_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s)
{
    job *j = ctx;
    if ((pid_t)s->tid != t->tid) return;
    if (j->n_smp == j->cap_smp) {
        j->cap_smp = j->cap_smp ? 2 * j->cap_smp : 1024;
        j->smp = realloc(j->smp, j->cap_smp * sizeof *j->smp);
        assert_non_null(j->smp);
    }
    int has_burn = 0;
    size_t n = st_cpu_chain_cut(&proc_maps, s->frames, s->n_frames);
    for (size_t i = 0; i < n && !has_burn; i++)
        has_burn = s->frames[i] >= (uint64_t)(uintptr_t)__start_st_burn_text &&
                   s->frames[i] <= (uint64_t)(uintptr_t)__stop_st_burn_text;
    j->smp[j->n_smp++] = (job_sample){s->t_ns, has_burn};
}

static void count_samples(job *j)
{
    j->samples_in = j->samples_burn = 0;
    for (size_t i = 0; i < j->n_smp; i++) {
        if (j->smp[i].t_ns < j->t0 || j->smp[i].t_ns >= j->t1) continue;
        j->samples_in++;
        j->samples_burn += j->smp[i].has_burn;
    }
}

static void *job_thread(void *arg)
{
    job *j = arg;
    if (j->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(j->cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    j->t_open = mono_ns();
    j->open_rc = st_cpu_thread_open(&j->ev, 0, &j->cfg);
    atomic_store(&j->opened, 1);
    if (j->open_rc == ST_CPU_OK) {
        j->cpu0 = thread_cpu_ns();
        j->t0 = mono_ns();
        j->work(j);
        j->t1 = mono_ns();
        j->cpu1 = thread_cpu_ns();
    }
    atomic_store(&j->done, 1);
    return NULL;
}

static st_cpu_sink sink; /* 128 KiB of scratch: not on a stack */

static void job_sink(job *j)
{
    sink.ctx = j;
    sink.on_switch = on_switch;
    sink.on_sample = on_sample;
    sink.on_lost = NULL;
}

static void job_init(job *j, void (*work)(job *), int64_t dur_ns)
{
    memset(j, 0, sizeof *j);
    j->work = work;
    j->dur_ns = dur_ns;
    j->cpu = -1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    assert_int_equal(pipe(j->pipe_fd), 0);
}

/* Runs the jobs at once, draining their rings every 2 ms (the writer's
 * manner), and returns when all are done. */
static void run_jobs(job **jobs, int n, void (*while_running)(job **, int))
{
    pthread_t th[4];
    int64_t steal0 = steal_ns();
    for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&th[i], NULL, job_thread, jobs[i]), 0);
    for (int i = 0; i < n; i++)
        while (!atomic_load(&jobs[i]->opened)) usleep(100);
    if (while_running) while_running(jobs, n);
    for (;;) {
        int all = 1;
        for (int i = 0; i < n; i++) {
            job_sink(jobs[i]);
            st_cpu_thread_drain(&jobs[i]->ev, &sink);
            all &= atomic_load(&jobs[i]->done);
        }
        if (all) break;
        usleep(2000);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        job_sink(jobs[i]);
        st_cpu_thread_drain(&jobs[i]->ev, &sink);
        assert_int_equal(jobs[i]->ev.n_corrupt, 0);
        st_cpu_thread_close(&jobs[i]->ev);
    }
    g_steal_ns = steal_ns() - steal0;
}

/* The range [t0, t1) of a finished job, accounted from its switches. */
static st_cpu_share job_share(const job *j)
{
    st_cpu_off *off = malloc((j->n_sw + 1) * sizeof *off);
    assert_non_null(off);
    size_t n = st_cpu_off_intervals(j->sw, j->n_sw, j->t_open, j->t1, off);
    st_cpu_range r = {j->t0, j->t1};
    st_cpu_share s;
    st_cpu_account(off, n, &r, 1, &s);
    free(off);
    assert_int_equal(s.on_ns + s.preempted_ns + s.blocked_ns, j->t1 - j->t0);
    return s;
}

static void job_free(job *j)
{
    free(j->sw);
    free(j->smp);
    close(j->pipe_fd[0]);
    close(j->pipe_fd[1]);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
}

static void print_share(const char *name, const job *j, st_cpu_share s)
{
    double d = (double)(j->t1 - j->t0);
    printf("%-8s %6.1f ms: on %5.1f %%  preempted %5.1f %%  blocked %5.1f %%  (thread CPU clock %5.1f %%, %zu switches, lost %llu, steal %.1f ms)\n",
           name, d / 1e6, 100.0 * s.on_ns / d, 100.0 * s.preempted_ns / d, 100.0 * s.blocked_ns / d,
           100.0 * (j->cpu1 - j->cpu0) / d, j->n_sw, (unsigned long long)j->ev.lost, g_steal_ns / 1e6);
}

static void work_spin(job *j)
{
    uint64_t x = 0;
    int64_t until = mono_ns() + j->dur_ns;
    while (mono_ns() < until) x += 1;
    j->sink = x;
}

static void work_usleep(job *j)
{
    int64_t until = mono_ns() + j->dur_ns;
    while (mono_ns() < until) usleep(1000);
}

static void work_cond(job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t d = ts.tv_nsec + j->dur_ns;
    ts.tv_sec += d / 1000000000;
    ts.tv_nsec = d % 1000000000;
    pthread_mutex_lock(&j->mu);
    while (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&j->mu);
}

static void work_pipe(job *j)
{
    char c;
    assert_int_equal(read(j->pipe_fd[0], &c, 1), 1);
}

static void work_burn(job *j)
{
    j->sink = burn(mono_ns() + j->dur_ns);
}

static void write_pipe_later(job **jobs, int n)
{
    usleep(300000);
    assert_int_equal(write(jobs[0]->pipe_fd[1], "x", 1), 1);
}

static void test_spin_on_cpu(void **state)
{
    (void)state;
    NEED_PERF();
    job j;
    job_init(&j, work_spin, 300000000);
    job *jobs[] = {&j};
    run_jobs(jobs, 1, NULL);
    st_cpu_share s = job_share(&j);
    print_share("spin", &j, s);
    double d = (double)(j.t1 - j.t0);
    assert_true(s.blocked_ns <= 0.02 * d);
    /* >= 95 % on-CPU of the time it was not preempted (all of it, idle) */
    assert_true((double)s.on_ns >= 0.95 * (d - (double)s.preempted_ns));
    assert_true(llabs(s.on_ns - (j.cpu1 - j.cpu0)) <= CLOCK_BOUND(d));
    job_free(&j);
}

static void check_blocked(const char *name, void (*work)(job *), void (*during)(job **, int))
{
    job j;
    job_init(&j, work, 300000000);
    job *jobs[] = {&j};
    run_jobs(jobs, 1, during);
    st_cpu_share s = job_share(&j);
    print_share(name, &j, s);
    double d = (double)(j.t1 - j.t0);
    assert_true(d >= 0.29e9);
    assert_true(s.on_ns <= 0.05 * d);
    assert_true(s.blocked_ns >= 0.90 * d);
    assert_true(llabs(s.on_ns - (j.cpu1 - j.cpu0)) <= CLOCK_BOUND(d));
    job_free(&j);
}

static void test_usleep_blocked(void **state)
{
    (void)state;
    NEED_PERF();
    check_blocked("usleep", work_usleep, NULL);
}

static void test_cond_wait_blocked(void **state)
{
    (void)state;
    NEED_PERF();
    check_blocked("condwait", work_cond, NULL);
}

static void test_pipe_read_blocked(void **state)
{
    (void)state;
    NEED_PERF();
    check_blocked("pipe", work_pipe, write_pipe_later);
}

static void test_pinned_pair_preempted(void **state)
{
    (void)state;
    NEED_PERF();
    job a, b;
    job_init(&a, work_spin, 400000000);
    job_init(&b, work_spin, 400000000);
    a.cpu = b.cpu = 0;
    job *jobs[] = {&a, &b};
    run_jobs(jobs, 2, NULL);
    job *both[] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        st_cpu_share s = job_share(both[i]);
        print_share(i ? "pinned-b" : "pinned-a", both[i], s);
        double d = (double)(both[i]->t1 - both[i]->t0);
        assert_true(s.preempted_ns >= 0.25 * d);
        assert_true(s.blocked_ns <= 0.05 * d);
        assert_true(llabs(s.on_ns - (both[i]->cpu1 - both[i]->cpu0)) <= CLOCK_BOUND(d));
    }
    job_free(&a);
    job_free(&b);
}

static void test_burn_in_chain(void **state)
{
    (void)state;
    NEED_PERF();
    assert_int_equal(st_cpu_maps_load(&proc_maps, NULL), 0);
    job j;
    job_init(&j, work_burn, 400000000);
    j.cfg.period_ns = 1000000;
    job *jobs[] = {&j};
    run_jobs(jobs, 1, NULL);
    count_samples(&j);
    printf("burn: %ld samples in the range, %ld with burn [%p, %p) in the chain (%.1f %%), lost %llu\n",
           j.samples_in, j.samples_burn, (void *)__start_st_burn_text, (void *)__stop_st_burn_text,
           j.samples_in ? 100.0 * j.samples_burn / j.samples_in : 0.0, (unsigned long long)j.ev.lost);
    /* 400 ms of wall time at 1 ms of CPU time per sample: at least 40 even
     * when the host is loaded enough to leave the thread 10 % of a CPU. */
    assert_true(j.samples_in >= 40);
    assert_true(j.samples_burn >= 0.90 * j.samples_in);
    job_free(&j);
    st_cpu_maps_free(&proc_maps);
}

/* ---- the signal sampler (cpu_timer.c) -------------------------------------
 * No perf event needed: these run under ST_TEST_REFUSE_PERF=1 too. A
 * thread opens its timer (1 ms asked: the tick's period where that is
 * longer) and burns 200 ms of its CPU time in burn(); the samples drained
 * afterwards are this thread's, inside the burn, with no GIL probe, and
 * >= 90 % have burn in their cut chain; signals taken + overruns cover
 * the CPU time burnt (each signal stands for 1 + its overruns periods). A
 * buffer of 8 samples not drained while 100 ms are burnt keeps 8 and
 * counts the rest as lost. */
typedef struct timer_job {
    uint32_t ring;
    int64_t burn_cpu_ns;
    st_cpu_timer *tm;
    int rc;
    char why[256];
    int64_t t0, t1, cpu0, cpu1;
    pid_t tid;
} timer_job;

static void *timer_thread(void *arg)
{
    timer_job *j = arg;
    j->tid = (pid_t)syscall(SYS_gettid);
    j->rc = st_cpu_timer_open(&j->tm, 1000000, j->ring, j->why, sizeof j->why);
    if (j->rc != ST_CPU_OK) return NULL;
    j->t0 = mono_ns();
    j->cpu0 = thread_cpu_ns();
    volatile uint64_t x = 0;
    while (thread_cpu_ns() - j->cpu0 < j->burn_cpu_ns) x = x + burn(mono_ns() + 5000000);
    j->cpu1 = thread_cpu_ns();
    j->t1 = mono_ns();
    st_cpu_timer_stop(j->tm);
    return NULL;
}

typedef struct timer_seen {
    const timer_job *j;
    long n, in_range, with_burn, own_tid, no_probe, deep;
} timer_seen;

static void timer_on_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s)
{
    (void)t;
    timer_seen *x = ctx;
    x->n++;
    x->own_tid += (pid_t)s->tid == x->j->tid;
    x->no_probe += s->gil == ST_CPU_GIL_NO_PROBE;
    x->deep += s->n_frames >= 2;
    if (s->t_ns < x->j->t0 || s->t_ns > x->j->t1) return;
    x->in_range++;
    size_t n = st_cpu_chain_cut(&proc_maps, s->frames, s->n_frames);
    int has = 0;
    for (size_t i = 0; i < n && !has; i++)
        has = s->frames[i] >= (uint64_t)(uintptr_t)__start_st_burn_text &&
              s->frames[i] <= (uint64_t)(uintptr_t)__stop_st_burn_text;
    x->with_burn += has;
}

static void test_timer_burn_in_chain(void **state)
{
    (void)state;
    assert_int_equal(st_cpu_maps_load(&proc_maps, NULL), 0);
    timer_job j = {.burn_cpu_ns = 200000000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, timer_thread, &j), 0);
    pthread_join(th, NULL);
    if (j.rc != ST_CPU_OK) fail_msg("st_cpu_timer_open: %s", j.why);
    timer_seen x = {.j = &j};
    st_cpu_sink *sk = calloc(1, sizeof *sk);
    assert_non_null(sk);
    sk->ctx = &x;
    sk->on_sample = timer_on_sample;
    long drained = st_cpu_timer_drain(j.tm, sk, NULL);
    const char *src;
    long hz = st_cpu_timer_tick_hz(&src);
    printf("signal sampler: signal %d, tick %ld Hz (%s), period %llu ns; %ld samples (%ld in the burn, %ld with burn "
           "in the chain, %.1f %%), %llu overruns, %llu lost, %.1f ms of CPU\n",
           j.tm->signo, hz, src, (unsigned long long)j.tm->period_ns, drained, x.in_range, x.with_burn,
           x.in_range ? 100.0 * x.with_burn / x.in_range : 0.0, (unsigned long long)j.tm->overruns,
           (unsigned long long)j.tm->lost, (j.cpu1 - j.cpu0) / 1e6);
    assert_int_equal(j.tm->period_ns, 1000000000 / hz > 1000000 ? 1000000000 / hz : 1000000);
    assert_int_equal(drained, x.n);
    assert_int_equal(x.own_tid, x.n);
    assert_int_equal(x.no_probe, x.n);
    assert_true(x.deep >= 0.9 * x.n);
    assert_int_equal(j.tm->lost, 0);
    assert_int_equal(j.tm->signals, (uint64_t)drained);
    double covered = (double)(j.tm->signals + j.tm->overruns) * (double)j.tm->period_ns;
    assert_true(covered >= 0.8 * (j.cpu1 - j.cpu0) && covered <= 1.2 * (j.cpu1 - j.cpu0) + j.tm->period_ns);
    assert_true(x.in_range >= 20);
    assert_true(x.with_burn >= 0.90 * x.in_range);
    assert_int_equal(st_cpu_timer_drain(j.tm, sk, NULL), 0);
    st_cpu_timer_close(j.tm);
    free(sk);
    st_cpu_maps_free(&proc_maps);
}

static void test_timer_full_buffer(void **state)
{
    (void)state;
    timer_job j = {.ring = 8, .burn_cpu_ns = 100000000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, timer_thread, &j), 0);
    pthread_join(th, NULL);
    if (j.rc != ST_CPU_OK) fail_msg("st_cpu_timer_open: %s", j.why);
    timer_seen x = {.j = &j};
    st_cpu_sink *sk = calloc(1, sizeof *sk);
    assert_non_null(sk);
    sk->ctx = &x;
    sk->on_sample = timer_on_sample;
    long drained = st_cpu_timer_drain(j.tm, sk, NULL);
    printf("a buffer of 8 undrained: %ld samples kept, %llu lost, %llu signals\n", drained,
           (unsigned long long)j.tm->lost, (unsigned long long)j.tm->signals);
    assert_int_equal(drained, 8);
    assert_true(j.tm->lost >= 1);
    assert_int_equal(j.tm->signals, 8 + j.tm->lost);
    st_cpu_timer_close(j.tm);
    free(sk);
}

/* The event opened by another thread on a thread that waits: its first
 * record is a switch-in, and the time before it counts as blocked from the
 * open on (st_cpu_off_intervals' start_ns). */
static atomic_int other_go;
static atomic_int other_tid;
static void *other_thread(void *arg)
{
    atomic_store(&other_tid, (int)syscall(SYS_gettid));
    while (!atomic_load(&other_go)) usleep(1000);
    int64_t until = mono_ns() + 50000000;
    uint64_t x = 0;
    while (mono_ns() < until) x++;
    *(volatile uint64_t *)arg = x;
    return NULL;
}

static void test_open_other_thread(void **state)
{
    (void)state;
    NEED_PERF();
    volatile uint64_t x;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread, (void *)&x), 0);
    while (!atomic_load(&other_tid)) usleep(100);
    job j;
    job_init(&j, NULL, 0);
    int64_t t_open = mono_ns();
    assert_int_equal(st_cpu_thread_open(&j.ev, atomic_load(&other_tid), NULL), ST_CPU_OK);
    usleep(20000);
    int64_t t_go = mono_ns();
    atomic_store(&other_go, 1);
    pthread_join(th, NULL);
    int64_t t_end = mono_ns();
    job_sink(&j);
    st_cpu_thread_drain(&j.ev, &sink);
    st_cpu_thread_close(&j.ev);
    assert_true(j.n_sw >= 2);
    assert_int_equal(j.sw[0].out, 0); /* it was asleep in usleep when opened */
    st_cpu_off off[4096];
    assert_true(j.n_sw < 4095);
    size_t n = st_cpu_off_intervals(j.sw, j.n_sw, t_open, t_end, off);
    st_cpu_range r = {t_open, t_go};
    st_cpu_share s;
    st_cpu_account(off, n, &r, 1, &s);
    /* open .. go: the thread sleeps in usleep(1000) loops: mostly blocked */
    printf("other thread, open to go: on %.1f %%, blocked %.1f %%\n", 100.0 * s.on_ns / (t_go - t_open),
           100.0 * s.blocked_ns / (t_go - t_open));
    assert_true(s.blocked_ns >= 0.8 * (t_go - t_open));
    job_free(&j);
}

/* ---- accounting on hand-made switch sequences ------------------------------ */

#define OUT(t) {(t), 1, 0}
#define OUTP(t) {(t), 1, 1}
#define IN(t) {(t), 0, 0}

static void assert_share(st_cpu_share s, int64_t on, int64_t pre, int64_t blk)
{
    assert_int_equal(s.on_ns, on);
    assert_int_equal(s.preempted_ns, pre);
    assert_int_equal(s.blocked_ns, blk);
}

static void test_account_exact(void **state)
{
    (void)state;
    /* out@100 blocked, in@200, out@300 preempted, in@350, out@500 blocked
     * and never back in: now = 600 closes it. Off: [100,200) B, [300,350) P,
     * [500,600) B. */
    const st_cpu_switch sw[] = {OUT(100), IN(200), OUTP(300), IN(350), OUT(500)};
    st_cpu_off off[6];
    size_t n = st_cpu_off_intervals(sw, 5, 0, 600, off);
    assert_int_equal(n, 3);
    assert_int_equal(off[0].t0_ns, 100); assert_int_equal(off[0].t1_ns, 200); assert_int_equal(off[0].preempted, 0);
    assert_int_equal(off[1].t0_ns, 300); assert_int_equal(off[1].t1_ns, 350); assert_int_equal(off[1].preempted, 1);
    assert_int_equal(off[2].t0_ns, 500); assert_int_equal(off[2].t1_ns, 600); assert_int_equal(off[2].preempted, 0);
    const st_cpu_range r[] = {
        {0, 1000},  /* all: B 100 + 100, P 50; 600..1000 is past now: on. on 1000-250 */
        {150, 320}, /* B 150..200 = 50, P 300..320 = 20, on 170-70 = 100 */
        {160, 180}, /* nested, inside the first block: B 20 */
        {200, 300}, /* from one edge to the next: all on */
        {350, 350}, /* empty */
        {550, 600}, /* unended, cut at now: inside the open block */
        {340, 510}, /* straddles two ends: P 340..350 = 10, B 500..510 = 10 */
        {100, 200}, /* exactly one block */
        {400, 300}, /* reversed: zeros */
    };
    st_cpu_share s[9];
    st_cpu_account(off, n, r, 9, s);
    assert_share(s[0], 750, 50, 200);
    assert_share(s[1], 100, 20, 50);
    assert_share(s[2], 0, 0, 20);
    assert_share(s[3], 100, 0, 0);
    assert_share(s[4], 0, 0, 0);
    assert_share(s[5], 0, 0, 50);
    assert_share(s[6], 150, 10, 10);
    assert_share(s[7], 0, 0, 100);
    assert_share(s[8], 0, 0, 0);
    /* the same ranges in another order give the same answers */
    st_cpu_range rr[9];
    st_cpu_share ss[9];
    for (int i = 0; i < 9; i++) rr[i] = r[8 - i];
    st_cpu_account(off, n, rr, 9, ss);
    for (int i = 0; i < 9; i++) assert_memory_equal(&ss[i], &s[8 - i], sizeof s[0]);
}

static void test_account_edges(void **state)
{
    (void)state;
    st_cpu_off off[8];
    st_cpu_share s;
    /* A leading switch-in: off from start_ns (10) to 50, blocked; then
     * out@80 in@90. [0,100): B 40 + 10 = 50, on 50. */
    const st_cpu_switch lead[] = {IN(50), OUT(80), IN(90)};
    size_t n = st_cpu_off_intervals(lead, 3, 10, 100, off);
    assert_int_equal(n, 2);
    st_cpu_range all = {0, 100};
    st_cpu_account(off, n, &all, 1, &s);
    assert_share(s, 50, 0, 50);
    /* ... since always (INT64_MIN): [0,100) B 50 + 10 = 60 */
    n = st_cpu_off_intervals(lead, 3, INT64_MIN, 100, off);
    st_cpu_account(off, n, &all, 1, &s);
    assert_share(s, 40, 0, 60);
    /* ... a start after the switch-in: no leading interval */
    n = st_cpu_off_intervals(lead, 3, 60, 100, off);
    assert_int_equal(n, 1);
    /* Two outs (the in between was lost): the first one's kind stands.
     * out@10 P, out@20 B, in@30: [10,30) P. */
    const st_cpu_switch two_out[] = {OUTP(10), OUT(20), IN(30)};
    n = st_cpu_off_intervals(two_out, 3, 0, 100, off);
    assert_int_equal(n, 1);
    st_cpu_account(off, n, &all, 1, &s);
    assert_share(s, 80, 20, 0);
    /* Two ins (the out between was lost): the second one changes nothing.
     * out@10, in@20, in@25, out@40, in@45: B 10 + 5. */
    const st_cpu_switch two_in[] = {OUT(10), IN(20), IN(25), OUT(40), IN(45)};
    n = st_cpu_off_intervals(two_in, 5, 0, 100, off);
    assert_int_equal(n, 2);
    st_cpu_account(off, n, &all, 1, &s);
    assert_share(s, 85, 0, 15);
    /* No switches: all on. An out at now: an empty interval, left out. */
    n = st_cpu_off_intervals(NULL, 0, 0, 100, off);
    assert_int_equal(n, 0);
    const st_cpu_switch at_now[] = {OUT(100)};
    assert_int_equal(st_cpu_off_intervals(at_now, 1, 0, 100, off), 0);
    /* An open block that began before the range and is still open: the
     * whole range blocked. */
    const st_cpu_switch open_out[] = {OUT(5)};
    n = st_cpu_off_intervals(open_out, 1, 0, 100, off);
    st_cpu_range mid = {20, 70};
    st_cpu_account(off, n, &mid, 1, &s);
    assert_share(s, 0, 0, 50);
}

/* ---- the drain on a hand-made ring ----------------------------------------- */

typedef struct ring_fixture {
    st_cpu_thread t;
    unsigned char *mem;
    uint64_t head;
} ring_fixture;

static void ring_make(ring_fixture *f, size_t data_bytes)
{
    memset(f, 0, sizeof *f);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    f->mem = aligned_alloc(pg, pg + data_bytes);
    assert_non_null(f->mem);
    memset(f->mem, 0, pg + data_bytes);
    f->t.fd = -1;
    f->t.tid = 42;
    f->t.map = f->mem;
    f->t.data = f->mem + pg;
    f->t.data_bytes = data_bytes;
    f->t.callchain = 1;
}

static void ring_put(ring_fixture *f, const void *rec, size_t n)
{
    for (size_t i = 0; i < n; i++) f->t.data[(f->head + i) & (f->t.data_bytes - 1)] = ((const unsigned char *)rec)[i];
    f->head += n;
    ((struct perf_event_mmap_page *)f->mem)->data_head = f->head;
}

static void ring_tail(ring_fixture *f, uint64_t tail)
{
    ((struct perf_event_mmap_page *)f->mem)->data_tail = tail;
    f->head = tail;
    ((struct perf_event_mmap_page *)f->mem)->data_head = tail;
}

static uint64_t ring_tail_now(ring_fixture *f)
{
    return ((struct perf_event_mmap_page *)f->mem)->data_tail;
}

typedef struct seen {
    int n_sw, n_sample, n_lost;
    st_cpu_switch sw[8];
    uint64_t frames[8][16];
    uint32_t n_frames[8];
    int64_t sample_t[8];
    uint64_t lost;
} seen;

static void seen_switch(void *ctx, const st_cpu_thread *t, const st_cpu_switch *s)
{
    seen *x = ctx;
    if (x->n_sw < 8) x->sw[x->n_sw] = *s;
    x->n_sw++;
}

static void seen_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s)
{
    seen *x = ctx;
    if (x->n_sample < 8) {
        x->n_frames[x->n_sample] = s->n_frames;
        x->sample_t[x->n_sample] = s->t_ns;
        for (uint32_t i = 0; i < s->n_frames && i < 16; i++) x->frames[x->n_sample][i] = s->frames[i];
    }
    x->n_sample++;
}

static void seen_lost(void *ctx, const st_cpu_thread *t, uint64_t n, int64_t t_ns)
{
    seen *x = ctx;
    x->n_lost++;
    x->lost += n;
}

static st_cpu_sink *seen_sink(seen *x)
{
    memset(x, 0, sizeof *x);
    sink.ctx = x;
    sink.on_switch = seen_switch;
    sink.on_sample = seen_sample;
    sink.on_lost = seen_lost;
    return &sink;
}

static void put_switch(ring_fixture *f, uint16_t misc, uint64_t t_ns)
{
    uint64_t r[3];
    struct perf_event_header h = {PERF_RECORD_SWITCH, misc, sizeof r};
    memcpy(&r[0], &h, 8);
    uint32_t pt[2] = {7, 42};
    memcpy(&r[1], pt, 8);
    r[2] = t_ns;
    ring_put(f, r, sizeof r);
}

/* A sample with a chain: PERF_CONTEXT_USER, the ip again, then callers. */
static void put_sample(ring_fixture *f, uint64_t ip, uint64_t t_ns, const uint64_t *callers, int n)
{
    uint64_t r[64];
    int k = 1;
    r[k++] = ip;
    uint32_t pt[2] = {7, 42};
    memcpy(&r[k++], pt, 8);
    r[k++] = t_ns;
    r[k++] = (uint64_t)(n + 2);
    r[k++] = (uint64_t)PERF_CONTEXT_USER;
    r[k++] = ip;
    for (int i = 0; i < n; i++) r[k++] = callers[i];
    struct perf_event_header h = {PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, (uint16_t)(8 * k)};
    memcpy(&r[0], &h, 8);
    ring_put(f, r, 8 * (size_t)k);
}

static void test_drain_parses_and_wraps(void **state)
{
    (void)state;
    ring_fixture f;
    ring_make(&f, 4096);
    /* Start 40 bytes before the end, so that the second record (a sample)
     * wraps the ring end. */
    ring_tail(&f, 4096 * 3 - 40);
    seen x;
    st_cpu_sink *s = seen_sink(&x);
    put_switch(&f, PERF_RECORD_MISC_SWITCH_OUT | (1 << 14), 1000);
    const uint64_t callers[] = {0x401000, 0x402000, 0x403000};
    put_sample(&f, 0x400123, 1500, callers, 3);
    put_switch(&f, 0, 2000);
    put_switch(&f, PERF_RECORD_MISC_SWITCH_OUT, 2500);
    uint64_t lost_rec[5];
    struct perf_event_header lh = {PERF_RECORD_LOST, 0, sizeof lost_rec};
    memcpy(&lost_rec[0], &lh, 8);
    lost_rec[1] = 1;  /* id */
    lost_rec[2] = 17; /* lost */
    uint32_t pt[2] = {7, 42};
    memcpy(&lost_rec[3], pt, 8);
    lost_rec[4] = 3000;
    ring_put(&f, lost_rec, sizeof lost_rec);
    uint64_t throttle[4] = {0, 3100, 1, 1};
    struct perf_event_header th = {PERF_RECORD_THROTTLE, 0, sizeof throttle};
    memcpy(&throttle[0], &th, 8);
    ring_put(&f, throttle, sizeof throttle);

    assert_int_equal(st_cpu_thread_drain(&f.t, s), 6);
    assert_int_equal(ring_tail_now(&f), f.head);
    assert_int_equal(f.t.n_corrupt, 0);
    assert_int_equal(x.n_sw, 3);
    assert_int_equal(x.sw[0].t_ns, 1000); assert_int_equal(x.sw[0].out, 1); assert_int_equal(x.sw[0].preempted, 1);
    assert_int_equal(x.sw[1].t_ns, 2000); assert_int_equal(x.sw[1].out, 0); assert_int_equal(x.sw[1].preempted, 0);
    assert_int_equal(x.sw[2].t_ns, 2500); assert_int_equal(x.sw[2].out, 1); assert_int_equal(x.sw[2].preempted, 0);
    assert_int_equal(x.n_sample, 1);
    assert_int_equal(x.sample_t[0], 1500);
    assert_int_equal(x.n_frames[0], 4); /* the ip, once, and three callers; no marker */
    assert_int_equal(x.frames[0][0], 0x400123);
    assert_int_equal(x.frames[0][1], 0x401000);
    assert_int_equal(x.frames[0][3], 0x403000);
    assert_int_equal(x.n_lost, 1);
    assert_int_equal(x.lost, 17);
    assert_int_equal(f.t.lost, 17);
    assert_int_equal(f.t.n_other, 1);
    /* Nothing new: nothing passed. */
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 0);
    free(f.mem);
}

static void test_drain_corrupt(void **state)
{
    (void)state;
    ring_fixture f;
    ring_make(&f, 4096);
    seen x;
    st_cpu_sink *s = seen_sink(&x);
    /* A size larger than what the kernel published: stop, skip to head. */
    put_switch(&f, 0, 10);
    uint64_t bad[2] = {0, 0};
    struct perf_event_header bh = {PERF_RECORD_SAMPLE, 0, 4000};
    memcpy(&bad[0], &bh, 8);
    ring_put(&f, bad, sizeof bad);
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 1);
    assert_int_equal(x.n_sw, 1);
    assert_int_equal(f.t.n_corrupt, 1);
    assert_int_equal(ring_tail_now(&f), f.head);
    /* A zero size (would loop forever) and an odd one. */
    struct perf_event_header zh = {PERF_RECORD_SWITCH, 0, 0};
    memcpy(&bad[0], &zh, 8);
    ring_put(&f, bad, sizeof bad);
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 0);
    assert_int_equal(f.t.n_corrupt, 2);
    struct perf_event_header oh = {PERF_RECORD_SWITCH, 0, 12};
    memcpy(&bad[0], &oh, 8);
    ring_put(&f, bad, sizeof bad);
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 0);
    assert_int_equal(f.t.n_corrupt, 3);
    /* A sample whose chain length runs past its record: passed over, not
     * read beyond; the next record still parses. */
    uint64_t r[8] = {0, 0x400000, 0, 5, 1000000, (uint64_t)PERF_CONTEXT_USER, 0x400000, 0};
    struct perf_event_header sh = {PERF_RECORD_SAMPLE, 0, sizeof r};
    memcpy(&r[0], &sh, 8);
    ring_put(&f, r, sizeof r);
    put_switch(&f, PERF_RECORD_MISC_SWITCH_OUT, 20);
    int before = x.n_sample;
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 2);
    assert_int_equal(x.n_sample, before);
    assert_int_equal(f.t.n_corrupt, 4);
    assert_int_equal(x.n_sw, 2);
    assert_int_equal(x.sw[1].t_ns, 20);
    /* A head further ahead than the ring holds (a broken page): resync. */
    ((struct perf_event_mmap_page *)f.mem)->data_head = f.head + 8192;
    assert_int_equal(st_cpu_thread_drain(&f.t, s), 0);
    assert_int_equal(f.t.n_corrupt, 5);
    /* A closed thread drains nothing. */
    st_cpu_thread closed = {.fd = -1};
    assert_int_equal(st_cpu_thread_drain(&closed, s), 0);
    st_cpu_thread_close(&closed);
    st_cpu_thread_close(NULL);
    free(f.mem);
}

/* ---- frame validation on fake maps ----------------------------------------- */

static const char fake_maps[] =
    "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/prog\n"
    "00651000-00652000 r--p 00051000 08:02 173521 /usr/bin/prog\n"
    "7f0000000000-7f0000100000 r-xp 00000000 08:02 1000 /usr/lib/libc.so.6\n"
    "7f0000100000-7f0000200000 rw-p 00000000 00:00 0\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n";

static void test_frames_fake_maps(void **state)
{
    (void)state;
    st_cpu_maps m = {0};
    assert_int_equal(st_cpu_maps_parse(&m, fake_maps), 0);
    assert_int_equal(m.n, 3);
    assert_true(st_cpu_maps_contains(&m, 0x400000));
    assert_true(st_cpu_maps_contains(&m, 0x452000)); /* a return address at the end */
    assert_false(st_cpu_maps_contains(&m, 0x3fffff));
    assert_false(st_cpu_maps_contains(&m, 0x452001));
    assert_false(st_cpu_maps_contains(&m, 0x651000)); /* not executable */
    assert_false(st_cpu_maps_contains(&m, 0x7ffd00000100)); /* the stack */
    assert_true(st_cpu_maps_contains(&m, 0x7f0000000500));
    const uint64_t chain[] = {0x400100, 0x7f0000000500, 0x4141414141414141ull /* "AAAAAAAA" */, 0x400200};
    assert_int_equal(st_cpu_chain_cut(&m, chain, 4), 2); /* no path: no refresh */
    assert_int_equal(st_cpu_chain_cut(&m, chain, 2), 2);
    assert_int_equal(st_cpu_chain_cut(&m, chain + 2, 2), 0);
    /* Out of order (a hand-made text): sorted. */
    assert_int_equal(st_cpu_maps_parse(&m, "7f0000000000-7f0000100000 r-xp 0 0:0 0\n00400000-00452000 r-xp 0 0:0 0\n"), 0);
    assert_true(st_cpu_maps_contains(&m, 0x400100));
    assert_true(st_cpu_maps_contains(&m, 0x7f0000000500));
    st_cpu_maps_free(&m);
    st_cpu_maps_free(&m);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_frames_refresh(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "maps");
    write_text(path, fake_maps);
    st_cpu_maps m = {0};
    assert_int_equal(st_cpu_maps_load(&m, path), 0);
    assert_int_equal(m.n_loads, 1);
    /* A library mapped since: a miss reads the file again ... */
    const uint64_t chain[] = {0x400100, 0x7e0000000100, 0x400200};
    char more[sizeof fake_maps + 128];
    snprintf(more, sizeof more, "%s7e0000000000-7e0000010000 r-xp 00000000 08:02 7 /usr/lib/libnew.so\n", fake_maps);
    write_text(path, more);
    m.min_refresh_ns = 1;
    usleep(10);
    assert_int_equal(st_cpu_chain_cut(&m, chain, 3), 3);
    assert_int_equal(m.n_loads, 2);
    /* ... but not more often than min_refresh_ns: a frame outside every
     * mapping is cut, with no new read. */
    m.min_refresh_ns = 3600 * 1000000000ll;
    const uint64_t bad[] = {0x400100, 0x10};
    assert_int_equal(st_cpu_chain_cut(&m, bad, 2), 1);
    assert_int_equal(m.n_loads, 2);
    st_cpu_maps_free(&m);
    /* This process: its own code and libc are in, its stack is not. */
    assert_int_equal(st_cpu_maps_load(&m, NULL), 0);
    int local = 0;
    assert_true(st_cpu_maps_contains(&m, (uint64_t)(uintptr_t)&burn));
    assert_true(st_cpu_maps_contains(&m, (uint64_t)(uintptr_t)&printf));
    assert_false(st_cpu_maps_contains(&m, (uint64_t)(uintptr_t)&local));
    st_cpu_maps_free(&m);
    assert_int_equal(st_cpu_maps_load(&m, "/nonexistent/maps"), -1);
    st_cpu_maps_free(&m);
}

/* ---- refusal ---------------------------------------------------------------- */

/* In a child: a seccomp filter that answers perf_event_open with errno e. */
static int refuse_perf_with(int e)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (e & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* Runs fn in a forked child, which prints its own lines; the child's exit
 * status is fn's return value (0: as expected). */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        int rc = fn(arg);
        fflush(stdout);
        _exit(rc);
    }
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int child_seccomp(void *arg)
{
    int e = *(int *)arg;
    if (refuse_perf_with(e) != 0) {
        printf("seccomp filter not installed: %s\n", strerror(errno));
        return 3;
    }
    st_cpu_thread t;
    int rc = st_cpu_thread_open(&t, 0, NULL);
    printf("under a seccomp filter answering %s: status %d, \"%s\"\n", e == EPERM ? "EPERM" : "ENOSYS", rc, t.reason);
    if (rc != ST_CPU_REFUSED || t.err != e || !strstr(t.reason, "seccomp refused perf_event_open")) return 1;
    /* nothing crashes: drain and close a refused thread */
    if (st_cpu_thread_drain(&t, &sink) != 0) return 2;
    st_cpu_thread_close(&t);
    st_cpu_thread_close(&t);
    return 0;
}

static void test_seccomp_refusal(void **state)
{
    (void)state;
    int e = EPERM;
    assert_int_equal(in_child(child_seccomp, &e), 0);
    e = ENOSYS;
    assert_int_equal(in_child(child_seccomp, &e), 0);
}

static int drop_to_nobody(void)
{
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
        printf("cannot become nobody: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int child_unprivileged(void *arg)
{
    (void)arg;
    if (drop_to_nobody()) return 3;
    st_cpu_thread t;
    int rc = st_cpu_thread_open(&t, 0, NULL);
    long mk, rk;
    size_t budget = st_cpu_lock_budget(&mk, &rk);
    printf("as nobody, perf_event_paranoid %ld: status %d \"%s\", ring %zu KiB (lock budget %zu KiB: "
           "perf_event_mlock_kb %ld, RLIMIT_MEMLOCK %ld KiB)\n",
           paranoid(), rc, t.reason, t.data_bytes / 1024, budget / 1024, mk, rk);
    if (paranoid() <= 2 ? rc != ST_CPU_OK : (rc != ST_CPU_REFUSED || !strstr(t.reason, "paranoid"))) return 1;
    st_cpu_thread_close(&t);
    /* A ring larger than the lock limit: mapped smaller, the refusal said. */
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_MEMLOCK, &rl);
    st_cpu_config big = {.ring_bytes = 64u << 20};
    rc = st_cpu_thread_open(&t, 0, &big);
    printf("as nobody, a 64 MiB ring with RLIMIT_MEMLOCK 0: status %d, %zu KiB mapped, \"%s\"\n", rc,
           t.data_bytes / 1024, t.reason);
    if (rc == ST_CPU_OK &&
        (t.refused_bytes != (64u << 20) || t.data_bytes >= (64u << 20) || !strstr(t.reason, "refused"))) return 2;
    if (rc != ST_CPU_OK && rc != ST_CPU_NOMEM) return 4;
    st_cpu_thread_close(&t);
    return 0;
}

static void test_unprivileged(void **state)
{
    (void)state;
    NEED_PERF();
    if (getuid() != 0) {
        char why[256];
        int refused = perf_refused(why, sizeof why);
        printf("running as uid %d, perf_event_paranoid %ld: %s\n", (int)getuid(), paranoid(),
               refused ? why : "perf events open");
        if (paranoid() <= 2) assert_false(refused);
        return;
    }
    assert_int_equal(in_child(child_unprivileged, NULL), 0);
}

static void test_budget(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned n = 1; n < 4096; n *= 4) {
        size_t b = st_cpu_ring_bytes_for(n);
        assert_true(b >= pg && b <= ST_CPU_DEFAULT_RING_BYTES);
        assert_int_equal(b & (b - 1), 0);
    }
    st_cpu_thread t;
    assert_int_equal(st_cpu_thread_open(NULL, 0, NULL), ST_CPU_EINVAL);
    if (st_cpu_thread_open(&t, 1 << 30, NULL) != ST_CPU_OK) /* no such thread */
        assert_non_null(strstr(t.reason, "perf_event_open"));
    st_cpu_thread_close(&t);
}

int main(void)
{
    if (make_tmp_dir("test_cpu_perf")) return 1;
    printf("perf_event_paranoid %ld, uid %d\n", paranoid(), (int)getuid());
    /* ST_TEST_REFUSE_PERF=1: the whole run under a filter that refuses
     * perf_event_open, as in a container, to see the tests that need perf
     * events skip and the rest pass. */
    const char *refuse = getenv("ST_TEST_REFUSE_PERF");
    if (refuse && strcmp(refuse, "1") == 0) {
        if (refuse_perf_with(EPERM) != 0) {
            printf("cannot install the seccomp filter: %s\n", strerror(errno));
            return 1;
        }
        printf("ST_TEST_REFUSE_PERF=1: perf_event_open refused by a seccomp filter\n");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_account_exact),
        cmocka_unit_test(test_account_edges),
        cmocka_unit_test(test_drain_parses_and_wraps),
        cmocka_unit_test(test_drain_corrupt),
        cmocka_unit_test(test_frames_fake_maps),
        cmocka_unit_test(test_frames_refresh),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_seccomp_refusal),
        cmocka_unit_test(test_unprivileged),
        cmocka_unit_test(test_spin_on_cpu),
        cmocka_unit_test(test_usleep_blocked),
        cmocka_unit_test(test_cond_wait_blocked),
        cmocka_unit_test(test_pipe_read_blocked),
        cmocka_unit_test(test_pinned_pair_preempted),
        cmocka_unit_test(test_burn_in_chain),
        cmocka_unit_test(test_open_other_thread),
        cmocka_unit_test(test_timer_burn_in_chain),
        cmocka_unit_test(test_timer_full_buffer),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
