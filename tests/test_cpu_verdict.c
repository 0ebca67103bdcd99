/* test_cpu_verdict.c: what summary, bottleneck and diff take from the CPU
 * capture (analyze/cpu_share.c, cpu_verdict.c, diff_cpu.c, the binomial
 * test of diff_stats.c; docs/analyze.md "summary", "bottleneck", "diff").
 *
 * Pure rules: the work verdict's thresholds (off-CPU > 50 % of the work
 * time; preempted >= blocked is CPU-starved), spinning (on-CPU > 50 % of a
 * sync stage), the binomial test against exact values (computed with
 * Python's fractions: P(X <= 3 or X >= 7 | n 10, p 1/2) = 352/1024, ...).
 *
 * A trace of exactly known contents (tests/tracegen.c), steps every 10 ms,
 * marks 0 .. 100 ms (10 steps):
 *   w  (worker)  compute [10s+1, 10s+9) ms, sync [10s+9, 10s+10) ms;
 *                off-CPU [10s+2, 10s+7) ms each step, preempted ("starved"),
 *                blocked ("blocked"), or only [10s+2, 10s+3) preempted
 *                ("compute"); `burn` samples in compute, 5 a step (B of the
 *                diff: 10); period 1 ms
 *   m  (main)    step_wait [10s, 10s+10) ms, blocked [10s+0.5, 10s+9.5)
 *   x  (extra)   compute [10s+2, 10s+3), its capture refused
 *   u  (tail)    compute from 96 ms, never ended; blocked from 97 ms on
 * So: w's compute 80 ms, on-CPU 30 ms (37.5 %), 62.5 % preempted (or
 * blocked); sync 10 ms all on-CPU: spinning; m's step_wait 10 % on-CPU;
 * u's unended compute clipped to [96, 100) ms: 1 ms on (25 %), 3 ms
 * blocked; x: no figures ("-", null). In the "compute" variant w's compute
 * is 87.5 % on-CPU: compute-bound. diff starved -> compute: compute's
 * on-CPU time per step 3 -> 7 ms in every step (significant); burn's
 * samples 50 -> 100 (p = 5.4e-05 < 0.01 / 1): grew; 50 -> 50: not.
 *
 * Real recordings (this program as `test_cpu_verdict --scene NAME PATH
 * [N]`) are run by tests/it_cpu_verdicts.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../analyze/cpu_verdict.h"
#include "../analyze/diff_stats.h"
#include "common.h"
#include "encoding.h"
#include "stagetrace.h"
#include "traces.h"

/* ---- pure rules ---- */

static void test_judge(void **state)
{
    (void)state;
    assert_int_equal(an_cpu_judge_work(0, 0, 0, 0), AN_CPU_NO_WORK);
    assert_int_equal(an_cpu_judge_work(100, 100, 0, 0), AN_CPU_COMPUTE);
    assert_int_equal(an_cpu_judge_work(100, 50, 25, 25), AN_CPU_COMPUTE); /* off exactly 50 %: still on */
    assert_int_equal(an_cpu_judge_work(100, 49, 26, 25), AN_CPU_STARVED);
    assert_int_equal(an_cpu_judge_work(100, 49, 25, 26), AN_CPU_BLOCKED);
    assert_int_equal(an_cpu_judge_work(100, 40, 30, 30), AN_CPU_STARVED); /* a tie: preempted */
    assert_int_equal(an_cpu_judge_work(100, 0, 0, 100), AN_CPU_BLOCKED);
    assert_int_equal(an_cpu_judge_work(INT64_MAX, 0, INT64_MAX / 2, INT64_MAX / 2 + 1), AN_CPU_BLOCKED);
    /* futex waits above half the blocked time: lock-bound; at half or with preemption dominating: not */
    assert_int_equal(an_cpu_judge_work_locks(100, 0, 0, 100, 51), AN_CPU_LOCK_BOUND);
    assert_int_equal(an_cpu_judge_work_locks(100, 0, 0, 100, 50), AN_CPU_BLOCKED);
    assert_int_equal(an_cpu_judge_work_locks(100, 40, 35, 25, 25), AN_CPU_STARVED);
    assert_int_equal(an_cpu_judge_work_locks(100, 60, 0, 40, 40), AN_CPU_COMPUTE);
    assert_int_equal(an_cpu_judge_work_locks(0, 0, 0, 0, 0), AN_CPU_NO_WORK);
    assert_string_equal(an_cpu_verdict_name(AN_CPU_LOCK_BOUND), "lock-bound");
    assert_string_equal(an_cpu_verdict_name(AN_CPU_COMPUTE), "compute-bound");
    assert_string_equal(an_cpu_verdict_name(AN_CPU_STARVED), "CPU-starved");
    assert_string_equal(an_cpu_verdict_name(AN_CPU_BLOCKED), "blocked");
    assert_null(an_cpu_verdict_name(AN_CPU_NO_WORK));
    assert_int_equal(an_cpu_spins(100, 51), 1);
    assert_int_equal(an_cpu_spins(100, 50), 0);
    assert_int_equal(an_cpu_spins(0, 0), 0);
}

static void test_binomial(void **state)
{
    (void)state;
    assert_true(fabs(an_binomial_test(7, 10, 0.5) - 0.34375) < 1e-12);
    assert_true(fabs(an_binomial_test(3, 10, 0.5) - 0.34375) < 1e-12);
    assert_true(fabs(an_binomial_test(9, 10, 0.5) - 0.021484375) < 1e-12);
    assert_true(fabs(an_binomial_test(0, 5, 0.5) - 0.0625) < 1e-12);
    assert_true(fabs(an_binomial_test(3, 20, 0.1) - 0.44464984940110325) < 1e-9);
    assert_true(fabs(an_binomial_test(100, 150, 0.5) - 5.447533103392586e-05) < 1e-12);
    assert_true(fabs(an_binomial_test(50, 100, 0.5) - 1.0) < 1e-12);
    /* above AN_BINOMIAL_EXACT_MAX (20000): the normal approximation with a continuity correction,
     * erfc((|10100 - 10000.5| - 0.5) / sqrt(20001 / 4) / sqrt(2)); the exact test at n = 20000 is near it */
    assert_true(fabs(an_binomial_test(10100, 20001, 0.5) - 0.1615024107176387) < 1e-12);
    assert_true(fabs(an_binomial_test(10100, 20000, 0.5) - 0.15938343598497376) < 1e-9);
    assert_int_equal(an_binomial_test(0, 0, 0.3), 1.0);
    assert_int_equal(an_binomial_test(4, 4, 1.0), 1.0);
    assert_int_equal(an_binomial_test(3, 4, 1.0), 0.0);
    assert_true(isnan(an_binomial_test(5, 4, 0.5)));
    assert_true(isnan(an_binomial_test(1, 4, 1.5)));
}

/* ---- the generated trace ---- */

enum variant { STARVED, BLOCKED, COMPUTE };
static const uint64_t burn_stack[] = {0x401100, 0x401000};

#define R_SW(k, t) {.kind = (k), .ts_ns = (t)}

static void write_trace(const char *path, enum variant v, int burn_per_step)
{
    tg_trace *g = tg_create("cpuv");
    uint32_t compute = tg_stage(g, "compute", "work"), sync = tg_stage(g, "sync", "sync");
    uint32_t wait = tg_stage(g, "step_wait", "wait_input");
    uint32_t w = tg_thread(g, "w", "worker"), m = tg_thread(g, "m", "main"), x = tg_thread(g, "x", "extra");
    uint32_t u = tg_thread(g, "u", "tail");
    tg_cpu_thread(g, w, "perf", 1000000, 0, 0);
    tg_cpu_thread(g, m, "perf", 1000000, 0, 0);
    tg_cpu_thread(g, x, "refused", 1000000, 0, 0);
    tg_cpu_thread(g, u, "perf", 1000000, 0, 0);
    uint32_t stack = tg_cpu_stack(g, burn_stack, 2);
    tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "");
    tg_cpu_symbol(g, 0x401000, 0, "main", 0);
    tg_cpu_symbol(g, 0x401100, 0, "burn", 0);
    tg_step(g, 0, 0, 0);
    for (int s = 0; s < 10; s++) {
        int64_t t = (int64_t)s * 10 * MS;
        tg_range(g, w, compute, t + 1 * MS, t + 9 * MS);
        tg_range(g, w, sync, t + 9 * MS, t + 10 * MS);
        tg_range(g, m, wait, t, t + 10 * MS);
        tg_range(g, x, compute, t + 2 * MS, t + 3 * MS);
        tg_step(g, (uint64_t)s + 1, t + 10 * MS, 100);
        st_cpu_rec rw[16];
        int n = 0;
        rw[n++] = (st_cpu_rec)R_SW(v == BLOCKED ? ST_CPU_REC_OUT : ST_CPU_REC_PREEMPTED, t + 2 * MS);
        rw[n++] = (st_cpu_rec)R_SW(ST_CPU_REC_IN, t + (v == COMPUTE ? 3 : 7) * MS);
        for (int k = 0; k < burn_per_step; k++)
            rw[n++] = (st_cpu_rec){.kind = ST_CPU_REC_SAMPLE, .ts_ns = t + 7 * MS + k * 100000, .stack = stack, .stage = compute};
        tg_cpu_chunk(g, w, rw, (size_t)n);
        const st_cpu_rec rm[] = {R_SW(ST_CPU_REC_OUT, t + MS / 2), R_SW(ST_CPU_REC_IN, t + 9 * MS + MS / 2)};
        tg_cpu_chunk(g, m, rm, 2);
    }
    tg_begin(g, u, compute, 96 * MS);
    const st_cpu_rec ru[] = {R_SW(ST_CPU_REC_OUT, 97 * MS)};
    tg_cpu_chunk(g, u, ru, 1);
    tg_write(g, path);
    tg_free(g);
}

/* The stdout (and stderr) of `analyze ARGS` and its exit status. */
static char *run(const char *args, int *status)
{
    char cmd[PATH_MAX * 4];
    snprintf(cmd, sizeof cmd, "%s/analyze %s 2>&1", build_dir(), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 18, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t k;
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) len += k;
    out[len] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static char *run_ok(const char *fmt, const char *a, const char *b)
{
    char args[PATH_MAX * 3];
    snprintf(args, sizeof args, fmt, a, b);
    int st;
    char *out = run(args, &st);
    if (st != 0) fprintf(stderr, "analyze %s: exit %d: %s\n", args, st, out);
    assert_int_equal(st, 0);
    return out;
}

#define HAS(out, s)                                                                                                    \
    do {                                                                                                               \
        if (!strstr(out, s)) fprintf(stderr, "missing: %s\nin:\n%s\n", s, out);                                     \
        assert_non_null(strstr(out, s));                                                                               \
    } while (0)

static void test_summary(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "starved.sqlite");
    write_trace(path, STARVED, 5);
    char *out = run_ok("summary --format csv %s%s", path, "");
    /* ... total_ms ... max_ms, on_cpu_ms, on_cpu_pct, preempted_pct, blocked_pct */
    HAS(out, ",w,worker,compute,work,80.000000,80,80.000000,80,10,8.000000,8.000000,8.000000,8.000000,8.000000,"
             "30.000000,37.5,62.5,0\n");
    HAS(out, ",w,worker,sync,sync,10.000000,10,10.000000,10,10,1.000000,1.000000,1.000000,1.000000,1.000000,"
             "10.000000,100,0,0\n");
    HAS(out, ",m,main,step_wait,wait_input,100.000000,100,100.000000,100,10,10.000000,10.000000,10.000000,10.000000,"
             "10.000000,10.000000,10,0,90\n");
    HAS(out, ",w,worker,idle,,10.000000,10,10.000000,10,,,,,,,,,,\n"); /* idle: no figures */
    HAS(out, ",x,extra,compute,work,10.000000,10,10.000000,10,10,1.000000,1.000000,1.000000,1.000000,1.000000,,,,\n");
    HAS(out, ",u,tail,compute,work,4.000000,4,4.000000,4,1,4.000000,4.000000,4.000000,4.000000,4.000000,1.000000,25,0,75\n");
    free(out);
    out = run_ok("summary %s%s", path, "");
    HAS(out, "on_cpu_ms  on_cpu_pct  preempted_pct  blocked_pct\n");
    free(out);
    /* a window: steps 2-3 ([10, 30) ms): w's compute 16 ms, 6 on */
    out = run_ok("summary --format csv --steps 1:3 --thread w --stage compute %s%s", path, "");
    HAS(out, ",w,worker,compute,work,16.000000,80,16.000000,80,2,8.000000,8.000000,8.000000,8.000000,8.000000,6.000000,37.5,62.5,0\n");
    free(out);
    /* without the CPU tables: the columns are not there */
    tmp_path(path, sizeof path, "plain.sqlite");
    write_trace(path, STARVED, 5);
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd,
             "sqlite3 %s 'drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps; "
             "drop table cpu_symbols' 2>/dev/null",
             path);
    if (system(cmd) == 0) {
        out = run_ok("summary --format csv %s%s", path, "");
        assert_null(strstr(out, "on_cpu"));
        HAS(out, ",w,worker,compute,work,80.000000,80,80.000000,80,10,8.000000,8.000000,8.000000,8.000000,8.000000\n");
        free(out);
    }
}

static void test_bottleneck(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "starved.sqlite");
    write_trace(path, STARVED, 5);
    char *out = run_ok("bottleneck %s%s", path, "");
    HAS(out, "CPU: worker's work is 37.5% on-CPU, 62.5% preempted, 0.0% blocked (80.000 ms of work self time on 1 "
             "thread): CPU-starved, not compute-bound: runnable but without a core for 62.5% of it");
    HAS(out, "spinning: worker waits in sync (sync) 100.0% on-CPU (cudaDeviceScheduleBlockingSync or events would free "
             "the core).\n");
    free(out);
    out = run_ok("bottleneck --format csv %s%s", path, "");
    HAS(out, ",moved,role_order,gpu,cpu_verdict\n");
    HAS(out, ",CPU-starved\n");
    HAS(out, "role,threads,cpu_threads,work_ms,work_on_cpu_pct,work_preempted_pct,work_blocked_pct,work_verdict,"
             "sync_ms,sync_on_cpu_pct,spinning_stage,spinning_on_cpu_pct,bottleneck\n");
    HAS(out, "worker,1,1,80.000000,37.5,62.5,0,CPU-starved,10.000000,100,sync,100,yes\n");
    HAS(out, "extra,1,0,0.000000,,,,,0.000000,,,,\n");
    HAS(out, "main,1,1,0.000000,,,,,0.000000,,,,\n");
    free(out);
    tmp_path(path, sizeof path, "blocked.sqlite");
    write_trace(path, BLOCKED, 5);
    out = run_ok("bottleneck %s%s", path, "");
    HAS(out, "CPU: worker's work is 37.5% on-CPU, 0.0% preempted, 62.5% blocked (80.000 ms of work self time on 1 "
             "thread): blocked, not compute-bound: its threads gave up the CPU for 62.5% of it");
    free(out);
    tmp_path(path, sizeof path, "compute.sqlite");
    write_trace(path, COMPUTE, 5);
    out = run_ok("bottleneck %s%s", path, "");
    HAS(out, "CPU: worker's work is 87.5% on-CPU, 12.5% preempted, 0.0% blocked (80.000 ms of work self time on 1 "
             "thread): compute-bound, on a core; faster code in compute is the lever.\n");
    free(out);
    out = run_ok("bottleneck --format json %s%s", path, "");
    HAS(out, "\"cpu_verdict\": \"compute-bound\"");
    free(out);
}

static void test_diff(void **state)
{
    (void)state;
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
    tmp_path(a, sizeof a, "a.sqlite");
    tmp_path(b, sizeof b, "b.sqlite");
    tmp_path(c, sizeof c, "c.sqlite");
    write_trace(a, STARVED, 5);
    write_trace(b, COMPUTE, 10);
    write_trace(c, STARVED, 5);
    char *out = run_ok("diff --format csv %s %s", a, b);
    /* on-CPU per step: 3 -> 7 ms, every step; of self time 37.5 -> 87.5 % */
    HAS(out, "worker,compute,work,3.000,7.000,4.000,133.33333333333334,0.000016,yes,3.000,7.000,4.000,37.5,87.5\n");
    /* burn: 50 -> 100 samples of 1 ms over 10 steps: 5 -> 10 ms per step */
    HAS(out, "worker,compute,1,burn,prog,50,100,5.000,10.000,5.000,2.00,0.000054,yes\n");
    free(out);
    out = run_ok("diff %s %s", a, b);
    HAS(out, "Functions whose CPU time grew beyond sampling noise (binomial test at alpha / 1 function):\n"
             "  worker/compute: burn (prog) 5.000 -> 10.000 ms per step (50 -> 100 samples, p = 5.45e-05)\n");
    HAS(out, "  worker/compute: +4.000 ms on-CPU per step on average (median 3.000 -> 7.000 ms, +133.3%, p = 1.59e-05)\n");
    free(out);
    out = run_ok("diff %s %s", a, c);
    HAS(out, "No stage's on-CPU time changed beyond run-to-run noise (alpha 0.01).\n");
    HAS(out, "No function's CPU time grew beyond sampling noise (1 function, binomial test at alpha / 1).\n");
    free(out);
    out = run_ok("diff --format csv %s %s", a, c);
    assert_null(strstr(out, ",yes\n"));
    free(out);
}

/* ---- the recorder of tests/it_cpu_verdicts.sh ---- */

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A leaf (no calls) with a frame pointer: its samples name it, their
 * callchains hold its caller. n rounds of about 2 us each. */
__attribute__((noinline, noclone, used, optimize("no-omit-frame-pointer"))) static uint64_t burn(uint64_t n)
{
    uint64_t x = 1;
    for (uint64_t i = 0; i < n * 2000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
    return x;
}

enum { COMPUTE_STAGE, WAIT_STAGE };
typedef struct spinner {
    st_trace *t;
    pthread_barrier_t *bar;
    int index, cpu, steps;
} spinner;

static void *spin_thread(void *arg)
{
    spinner *s = arg;
    char name[16];
    snprintf(name, sizeof name, "w%d", s->index);
    if (s->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(s->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    st_thread_register(s->t, name, "worker", -1, 0);
    volatile uint64_t sink = 0;
    for (int i = 0; i < s->steps; i++) {
        /* 10 ms of this thread's CPU time: while the others share the core, its range lasts about
         * four times as long, whatever the scheduler's slice */
        st_begin(COMPUTE_STAGE);
        int64_t until = thread_cpu_ns() + 10000000;
        while (thread_cpu_ns() < until) sink = sink + 1;
        st_end(COMPUTE_STAGE);
        pthread_barrier_wait(s->bar);
    }
    return NULL;
}

/* locked: a holder thread (not registered) takes a mutex, posts a
 * semaphore and keeps the mutex 5 ms; the worker, once posted, locks it
 * inside compute, so compute waits about 5 ms in futex per step, 12 steps. */
typedef struct holder {
    pthread_mutex_t mu;
    sem_t held, done;
    int steps;
} holder;

static void *hold_thread(void *arg)
{
    holder *h = arg;
    for (int i = 0; i < h->steps; i++) {
        pthread_mutex_lock(&h->mu);
        sem_post(&h->held);
        usleep(5000);
        pthread_mutex_unlock(&h->mu);
        sem_wait(&h->done);
    }
    return NULL;
}

/* blocked: the worker's compute is a 5 ms usleep, 12 steps. starved: 4
 * threads pinned to one core spin 10 ms of CPU time each per step, 12
 * steps, main waits.
 * burn N: the worker's compute runs burn(N), 16 steps. */
static int scene(const char *name, const char *path, uint64_t n)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cpu_verdict";
    opt.cpu = 1;
    opt.cpu_period_ns = 1000000;
    st_trace *t;
    if (st_open(&t, &opt) != ST_OK) {
        fprintf(stderr, "st_open: %s\n", st_last_error());
        return 10;
    }
    if (st_stage_register(t, "compute", ST_WORK) != COMPUTE_STAGE) return 11;
    if (st_stage_register(t, "step_wait", ST_WAIT_INPUT) != WAIT_STAGE) return 11;
    volatile uint64_t sink = 0;
    if (strcmp(name, "blocked") == 0 || strcmp(name, "burn") == 0) {
        if (st_thread_register(t, "main", "worker", -1, 0) < 0) return 12;
        int burn_ = strcmp(name, "burn") == 0;
        st_step(0, 0);
        for (int s = 1; s <= (burn_ ? 16 : 12); s++) {
            st_begin(COMPUTE_STAGE);
            if (burn_) sink = sink + burn(n);
            else usleep(5000);
            st_end(COMPUTE_STAGE);
            st_step((uint64_t)s, 100);
        }
    } else if (strcmp(name, "locked") == 0) {
        if (st_thread_register(t, "main", "worker", -1, 0) < 0) return 12;
        enum { STEPS = 12 };
        holder h = {.steps = STEPS};
        pthread_mutex_init(&h.mu, NULL);
        sem_init(&h.held, 0, 0);
        sem_init(&h.done, 0, 0);
        pthread_t th;
        if (pthread_create(&th, NULL, hold_thread, &h)) return 13;
        st_step(0, 0);
        for (int s = 1; s <= STEPS; s++) {
            sem_wait(&h.held);
            st_begin(COMPUTE_STAGE);
            pthread_mutex_lock(&h.mu);
            pthread_mutex_unlock(&h.mu);
            st_end(COMPUTE_STAGE);
            sem_post(&h.done);
            st_step((uint64_t)s, 100);
        }
        pthread_join(th, NULL);
    } else if (strcmp(name, "starved") == 0) {
        cpu_set_t set;
        int cpu = -1;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
                if (CPU_ISSET(c, &set)) cpu = c;
        enum { N = 4, STEPS = 12 };
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, N + 1);
        spinner sp[N];
        pthread_t th[N];
        if (st_thread_register(t, "main", "main", -1, 0) < 0) return 12;
        for (int i = 0; i < N; i++) {
            sp[i] = (spinner){t, &bar, i, cpu, STEPS};
            if (pthread_create(&th[i], NULL, spin_thread, &sp[i])) return 13;
        }
        st_step(0, 0);
        for (int s = 1; s <= STEPS; s++) {
            st_begin(WAIT_STAGE);
            pthread_barrier_wait(&bar);
            st_end(WAIT_STAGE);
            st_step((uint64_t)s, 100);
        }
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
    } else {
        fprintf(stderr, "unknown scene '%s'\n", name);
        return 2;
    }
    (void)sink;
    return st_close(t) == ST_OK ? 0 : 14;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--scene") == 0)
        return scene(argv[2], argv[3], argc >= 5 ? strtoull(argv[4], NULL, 10) : 1000);
    if (make_tmp_dir("test_cpu_verdict")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge),   cmocka_unit_test(test_binomial), cmocka_unit_test(test_summary),
        cmocka_unit_test(test_bottleneck), cmocka_unit_test(test_diff),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
