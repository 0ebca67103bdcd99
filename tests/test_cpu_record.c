/* test_cpu_record.c: what the CPU capture puts in a trace (opt.cpu:
 * tracer/cpu_record.c, cpu_symbols.c; docs/trace-format.md, "CPU capture").
 *
 * A recorder (this program run as `test_cpu_record --record PATH`, so that
 * it can be run under setpriv or a seccomp filter) opens a trace with
 * opt.cpu = 1 and a 1 ms sample period, and runs three rounds of three
 * stages on its registered thread: `spin` (a 60 ms spin loop), `sleep`
 * (usleep 60 ms) and `burn` (100 ms in burn(), which calls burn_step, which
 * calls the leaf burn_leaf: frame pointers kept in burn and burn_step, as
 * in tests/test_cpu_perf.c). The tests read the trace back with SQLite and
 * the chunk decoders of tracer/encoding.c, and check:
 *  - meta: cpu_mode perf, cpu_period_ns 1000000, cpu_lost_records,
 *    cpu_samples equal to the samples decoded, cpu_sample_hz;
 *  - cpu_threads: one row, status perf, switches and samples as decoded;
 *  - switch records: every usleep blocks, so at least one blocked
 *    switch-out and one switch-in per sleep range;
 *  - samples: of those whose time lies inside a burn range (from the
 *    range chunks), >= 90 % attributed to stage burn by the writer, and of
 *    those, >= 90 % with a frame that cpu_symbols names "burn"; the sleep
 *    ranges get few samples (at most 5 % of the burn ranges' count);
 *  - cpu_maps holds this program's file, cpu_symbols resolves its frames;
 *  - cpu_blocks: after the rounds the recorder blocks 20 ms in each of a
 *    condition-variable wait (stage `cond`), a pipe read fed 20 ms later by
 *    the unregistered thread "feeder" (`pipe`) and a usleep (`nap`), three
 *    times: at most one reason per sleep, cond, pipe and nap range (one
 *    each when the writer ran during it), named nanosleep or
 *    clock_nanosleep, futex (with an address), read (with the pipe's fd),
 *    at least one per kind, and none in the spin and burn ranges;
 *  - cpu_windows (profile_interval 1, a step mark before each sleep, while
 *    the thread's CPU clock stands still): its on-CPU time over all
 *    windows within 2 % of CLOCK_THREAD_CPUTIME_ID from st_open to
 *    st_close, in each
 *    window between two marks (read during the sleeps) within 2 % of what
 *    it said at the marks (written beside the trace), and "feeder" there
 *    as an unregistered thread; under the seccomp filter too.
 * The same recorder as nobody (setpriv --reuid=nobody --regid=nogroup
 * --clear-groups, when the test runs as root): the same checks where
 * perf_event_paranoid <= 2. Under a seccomp filter that refuses
 * perf_event_open (EPERM, as Docker's default profile): the recorder
 * exits 0, the signal sampler takes the samples (meta cpu_mode "timer",
 * a cpu_reason naming seccomp, cpu_threads status timer, the burn checks
 * above, the period bounded by the tick, samples + overruns covering the
 * thread's CPU time), no switch records, and the ranges are all there.
 * Where the kernel allows the context-switch event (root here), every
 * blocked switch-out of the waits carries its wait stack (kind 8; the
 * reader's wait_stack rows); as nobody, the refusal is in meta. The GIL
 * recorder (below) checks the fake probe's flags through the reader in
 * the timer and hybrid modes, beside a program's own signals. Where the kernel
 * refuses perf events to this test altogether, the measured cases print
 * why and skip. Pure cases: the CPU chunk and stack encodings give the
 * bytes of docs/trace-format.md's examples, decode back, and every
 * truncation, a bad tag, a bad kind and a wrong count are refused; the
 * /proc parsers of cpu_proc.c read the kernel's syscall and schedstat
 * texts, and refuse short ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_cpurec.h"
#include "st_cpusched.h"
#include "stagetrace.h"
#include "stagetrace_reader.h"

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

/* ---- the recorder ------------------------------------------------------- */

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

__attribute__((noinline, noclone, used, optimize("no-omit-frame-pointer"))) static uint64_t burn(int64_t until_ns)
{
    uint64_t x = 1;
    while (mono_ns() < until_ns) {
        x = burn_step(x);
        __asm__ volatile("" : "+r"(x)); /* no tail call: burn stays on the stack */
    }
    return x;
}

enum { SPIN, SLEEP, BURN, COND, PIPE, NAP };
#define ROUNDS 3
#define N_RANGES (6 * ROUNDS)

/* The unregistered thread "feeder": for each byte read from its first pipe,
 * 20 ms later a byte on its second, so that the recorder blocks 20 ms in
 * read(). */
static int feed_in[2], feed_out[2];

static void *feeder(void *arg)
{
    (void)arg;
    char c;
    while (read(feed_in[0], &c, 1) == 1) {
        usleep(20000);
        if (write(feed_out[1], &c, 1) != 1) break;
    }
    return NULL;
}

static int record(const char *path)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cpu_record";
    opt.cpu = 1;
    opt.cpu_period_ns = 1000000;
    opt.profile_interval = 1; /* a schedstat window at each step mark */
    /* the feeder named before the trace opens: the writer's first scan of
     * /proc/self/task, which keeps each thread's name as first seen, may
     * come at any time after st_open */
    if (pipe(feed_in) || pipe(feed_out)) return 14;
    pthread_t feed;
    if (pthread_create(&feed, NULL, feeder, NULL)) return 15;
    pthread_setname_np(feed, "feeder");
    st_trace *t;
    int64_t cpu_before = thread_cpu_ns();
    if (st_open(&t, &opt) != ST_OK) {
        fprintf(stderr, "st_open: %s\n", st_last_error());
        return 10;
    }
    int64_t cpu_opened = thread_cpu_ns(); /* the writer's first schedstat read lies between the two */
    int spin = st_stage_register(t, "spin", ST_WORK);
    int sleep_ = st_stage_register(t, "sleep", ST_WAIT_INPUT);
    int burn_ = st_stage_register(t, "burn", ST_WORK);
    int cond_ = st_stage_register(t, "cond", ST_WAIT_INPUT);
    int pipe_ = st_stage_register(t, "pipe", ST_WAIT_INPUT);
    int nap = st_stage_register(t, "nap", ST_WAIT_INPUT);
    if (spin != SPIN || sleep_ != SLEEP || burn_ != BURN || cond_ != COND || pipe_ != PIPE || nap != NAP) return 11;
    if (st_thread_register(t, "main", "worker", -1, 0) < 0) return 12;
    /* The thread's CPU time at each step mark, written beside the trace: the
     * marks come just before a sleep, during which the writer reads the
     * schedstat of each window's end, the thread's CPU clock standing still. */
    int64_t cpu_at[ROUNDS + 1];
    volatile uint64_t sink = 0;
    for (int r = 0; r < ROUNDS; r++) {
        st_begin(SPIN);
        int64_t until = mono_ns() + 60000000;
        while (mono_ns() < until) sink = sink + 1;
        st_end(SPIN);
        st_begin(SLEEP);
        st_step((uint64_t)r, 0);
        cpu_at[r] = thread_cpu_ns();
        usleep(60000);
        st_end(SLEEP);
        st_begin(BURN);
        sink = sink + burn(mono_ns() + 100000000);
        st_end(BURN);
    }
    /* 20 ms blocked in each of: a condition-variable wait (futex), a pipe
     * read, usleep (clock_nanosleep or nanosleep), ROUNDS times */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    for (int r = 0; r < ROUNDS; r++) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 20000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        st_begin(COND);
        pthread_mutex_lock(&mu);
        while (pthread_cond_timedwait(&cv, &mu, &until) == 0) {
        }
        pthread_mutex_unlock(&mu);
        st_end(COND);
        char c = 'x';
        st_begin(PIPE);
        if (write(feed_in[1], &c, 1) != 1 || read(feed_out[0], &c, 1) != 1) return 16;
        st_end(PIPE);
        st_begin(NAP);
        if (r == 0) {
            st_step(ROUNDS, 0);
            cpu_at[ROUNDS] = thread_cpu_ns();
        }
        usleep(20000);
        st_end(NAP);
    }
    close(feed_in[1]);
    pthread_join(feed, NULL);
    int64_t cpu_end = thread_cpu_ns();
    int rc = st_close(t);
    if (rc != ST_OK) {
        fprintf(stderr, "st_close: %s\n", st_last_error());
        return 13;
    }
    char side[4200];
    snprintf(side, sizeof side, "%s.cpu", path);
    FILE *f = fopen(side, "w");
    if (!f) return 17;
    for (int k = 0; k <= ROUNDS; k++) fprintf(f, "%lld\n", (long long)cpu_at[k]);
    fprintf(f, "%lld\n%lld\n%lld\n", (long long)cpu_end, (long long)cpu_before, (long long)cpu_opened);
    return fclose(f) ? 18 : 0;
}

/* ---- the GIL recorder ------------------------------------------------------
 * `--record-gil PATH`: a fake GIL probe (st_cpu_set_gil_probe, set before
 * any thread registers) answers what the sampled thread's gil_state says.
 * Threads "a" and "b" burn 20 ms of CPU time in each of two stages per
 * round, `held` (gil_state 1) and `free` (gil_state 0), in opposite order;
 * thread "c" burns in `held`
 * with gil_state -1 (the probe does not know). The program also runs as a
 * program with its own signals would: a SIGPROF handler fed by
 * ITIMER_PROF every 10 ms of the process's CPU time, and a handler on
 * SIGRTMAX installed before st_open, which must get the sigqueue sent at
 * the end (so the sampler must not take SIGRTMAX). Written beside the
 * trace: the SIGPROF count and the SIGRTMAX count. */
enum { G_HELD, G_FREE };
#define G_ROUNDS 6
#define G_CPU_NS 20000000 /* CPU time per stage and round: samples however loaded the host */
static __thread int gil_state = -1;
static int fake_probe(void) { return gil_state; }
/* counted from signal handlers on other threads: atomics (lock-free), errno kept */
static atomic_int prof_ticks, rtmax_got;
static void on_prof(int s)
{
    int e = errno;
    (void)s;
    atomic_fetch_add_explicit(&prof_ticks, 1, memory_order_relaxed);
    errno = e;
}
static void on_rtmax(int s, siginfo_t *si, void *uc)
{
    int e = errno;
    (void)s;
    (void)uc;
    if (si->si_value.sival_int == 7) atomic_fetch_add_explicit(&rtmax_got, 1, memory_order_relaxed);
    errno = e;
}

typedef struct gil_job {
    st_trace *t;
    const char *name;
    int order; /* 0: held first; 1: free first; 2: "c", unknown */
    int rc;
} gil_job;

static void *gil_thread(void *arg)
{
    gil_job *j = arg;
    if (st_thread_register(j->t, j->name, "worker", -1, 0) < 0) {
        j->rc = 1;
        return NULL;
    }
    volatile uint64_t sink = 0;
    for (int r = 0; r < G_ROUNDS; r++) {
        for (int k = 0; k < 2; k++) {
            int stage = j->order == 2 ? G_HELD : (k ^ j->order) ? G_FREE : G_HELD;
            gil_state = j->order == 2 ? -1 : stage == G_HELD;
            st_begin(stage);
            int64_t until = thread_cpu_ns() + G_CPU_NS;
            while (thread_cpu_ns() < until) sink = burn_step(sink);
            st_end(stage);
        }
    }
    st_thread_unregister();
    return NULL;
}

static int record_gil(const char *path)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rtmax;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGRTMAX, &sa, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval prof = {{0, 10000}, {0, 10000}};
    if (setitimer(ITIMER_PROF, &prof, NULL) != 0) return 30;
    st_cpu_set_gil_probe(fake_probe);
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cpu_record";
    opt.cpu = 1;
    opt.cpu_period_ns = 1000000;
    st_trace *t;
    if (st_open(&t, &opt) != ST_OK) return 31;
    if (st_stage_register(t, "held", ST_WORK) != G_HELD || st_stage_register(t, "free", ST_WORK) != G_FREE) return 32;
    gil_job jobs[3] = {{t, "a", 0, 0}, {t, "b", 1, 0}, {t, "c", 2, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, gil_thread, &jobs[i])) return 33;
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        if (jobs[i].rc) return 34;
    if (st_close(t) != ST_OK) return 35;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    union sigval v = {.sival_int = 7};
    sigqueue(getpid(), SIGRTMAX, v);
    for (int i = 0; i < 100 && !rtmax_got; i++) usleep(1000);
    char side[4200];
    snprintf(side, sizeof side, "%s.sig", path);
    FILE *f = fopen(side, "w");
    if (!f) return 36;
    fprintf(f, "%d %d\n", atomic_load(&prof_ticks), atomic_load(&rtmax_got));
    return fclose(f) ? 37 : 0;
}

/* ---- running it ---------------------------------------------------------- */

static char dir[64], self[4096];

static int refuse_perf(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

enum { AS_IS, AS_NOBODY, UNDER_SECCOMP };

static const char *recorder_flag = "--record";

/* Runs the recorder into dir/name; its exit status. */
static int run_recorder(int how, const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", dir, name);
    fflush(stdout);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        if (how == UNDER_SECCOMP && refuse_perf() != 0) _exit(20);
        if (how == AS_NOBODY)
            execlp("setpriv", "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", self,
                   recorder_flag, path, (char *)NULL);
        else
            execl(self, self, recorder_flag, path, (char *)NULL);
        _exit(21);
    }
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* ---- reading it back ------------------------------------------------------ */

typedef struct range {
    uint32_t stage;
    int64_t t0, t1;
} range;

typedef struct sample {
    int64_t ts;
    uint32_t stack, stage;
    int known, has_burn;
    int flagged;      /* kind 6 or 7 */
    uint32_t flags;
} sample;

typedef struct wait_stack {
    int64_t ts;
    uint32_t stack;
    int state;         /* kind 9: the task state letter; 0 for kind 8 */
    uint32_t n_kernel; /* kind 9: the stack's kernel frames */
} wait_stack;

typedef struct trace_read {
    sqlite3 *db;
    range ranges[64];
    int n_ranges;
    sample samples[4096];
    int n_samples;
    long n_in, n_out, n_preempted, n_lost_recs;
    int64_t sleep_outs[ROUNDS], sleep_ins[ROUNDS];
    wait_stack waits[256]; /* the blocked switch-outs stored with a wait stack (kinds 8 and 9) */
    int n_waits;
} trace_read;

static char *meta(sqlite3 *db, const char *key)
{
    static char buf[1024];
    sqlite3_stmt *st;
    buf[0] = 0;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int found = sqlite3_step(st) == SQLITE_ROW;
    if (found) snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return found ? buf : NULL;
}

static long long one_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Whether cpu_symbols names one of the stack's frames `name`. */
static int stack_has(sqlite3 *db, uint32_t stack, const char *name)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n_frames, data FROM cpu_stacks WHERE id = ?", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, stack);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    uint32_t n = (uint32_t)sqlite3_column_int64(st, 0);
    uint64_t frames[512];
    assert_true(n <= 512);
    assert_int_equal(st_cpu_stack_get(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), n, frames), 0);
    sqlite3_finalize(st);
    int found = 0;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT name FROM cpu_symbols WHERE addr = ?", -1, &st, NULL), SQLITE_OK);
    for (uint32_t i = 0; i < n && !found; i++) {
        sqlite3_bind_int64(st, 1, (int64_t)frames[i]);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW); /* every frame has a row */
        found = strcmp((const char *)sqlite3_column_text(st, 0), name) == 0;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return found;
}

static void read_trace(const char *path, trace_read *r)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    /* ranges, through the event chunk decoder */
    assert_int_equal(sqlite3_prepare_v2(r->db, "SELECT n_events, data FROM range_chunks WHERE thread = 0 ORDER BY id",
                                        -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        st_event_cursor c;
        assert_int_equal(st_event_cursor_open(&c, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                              (uint32_t)sqlite3_column_int64(st, 0), NAP + 1), 0);
        st_event ev;
        int rc;
        while ((rc = st_event_next(&c, &ev)) == 1)
            if (ev.is_end && r->n_ranges < 64) r->ranges[r->n_ranges++] = (range){ev.stage, ev.start_ns, ev.ts_ns};
        assert_int_equal(rc, 0);
    }
    sqlite3_finalize(st);
    /* CPU records */
    assert_int_equal(sqlite3_prepare_v2(r->db, "SELECT n_records, data, t0_ns, t1_ns FROM cpu_chunks WHERE thread = 0 "
                                        "ORDER BY id", -1, &st, NULL), SQLITE_OK);
    int sleeps_seen = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        st_cpu_cursor c;
        assert_int_equal(st_cpu_cursor_open(&c, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                            (uint32_t)sqlite3_column_int64(st, 0)), 0);
        int64_t t0 = sqlite3_column_int64(st, 2), t1 = sqlite3_column_int64(st, 3);
        st_cpu_rec rec;
        int rc;
        while ((rc = st_cpu_next(&c, &rec)) == 1) {
            assert_true(rec.ts_ns >= t0 && rec.ts_ns <= t1);
            if (rec.kind == ST_CPU_REC_IN) r->n_in++;
            if (rec.kind == ST_CPU_REC_OUT_STACK && r->n_waits < 256)
                r->waits[r->n_waits++] = (wait_stack){rec.ts_ns, rec.stack, 0, 0};
            if (rec.kind == ST_CPU_REC_OUT_SCHED && r->n_waits < 256)
                r->waits[r->n_waits++] = (wait_stack){rec.ts_ns, rec.stack, (int)rec.flags, (uint32_t)rec.n};
            if (rec.kind == ST_CPU_REC_OUT_STACK || rec.kind == ST_CPU_REC_OUT_SCHED)
                rec.kind = ST_CPU_REC_OUT; /* a blocked switch-out too */
            if (rec.kind == ST_CPU_REC_OUT) r->n_out++;
            if (rec.kind == ST_CPU_REC_PREEMPTED) r->n_preempted++;
            if (rec.kind == ST_CPU_REC_LOST) r->n_lost_recs++;
            if (rec.kind == ST_CPU_REC_OUT || rec.kind == ST_CPU_REC_IN) {
                for (int i = 0; i < r->n_ranges; i++) {
                    if (r->ranges[i].stage != SLEEP || rec.ts_ns < r->ranges[i].t0 || rec.ts_ns >= r->ranges[i].t1)
                        continue;
                    int k = 0;
                    for (int j = 0; j < i; j++) k += r->ranges[j].stage == SLEEP;
                    if (k < ROUNDS) {
                        if (rec.kind == ST_CPU_REC_OUT) r->sleep_outs[k]++;
                        else r->sleep_ins[k]++;
                    }
                    sleeps_seen = 1;
                }
            }
            int flagged = rec.kind == ST_CPU_REC_SAMPLE_FLAGS || rec.kind == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN;
            if ((rec.kind == ST_CPU_REC_SAMPLE || rec.kind == ST_CPU_REC_SAMPLE_UNKNOWN || flagged) && r->n_samples < 4096)
                r->samples[r->n_samples++] =
                    (sample){rec.ts_ns, rec.stack, rec.stage,
                             rec.kind == ST_CPU_REC_SAMPLE || rec.kind == ST_CPU_REC_SAMPLE_FLAGS, 0, flagged, rec.flags};
        }
        assert_int_equal(rc, 0);
    }
    sqlite3_finalize(st);
    (void)sleeps_seen;
    for (int i = 0; i < r->n_samples; i++) r->samples[i].has_burn = stack_has(r->db, r->samples[i].stack, "burn");
}

static uint32_t range_stage_at(const trace_read *r, int64_t ts)
{
    for (int i = 0; i < r->n_ranges; i++)
        if (ts >= r->ranges[i].t0 && ts < r->ranges[i].t1) return r->ranges[i].stage;
    return ST_CPU_NO_STAGE;
}

/* cpu_blocks: at most one reason for each 20 ms or 60 ms block, inside
 * its range, naming the system call the recorder sleeps in there, and none
 * in the spin and burn ranges (preempted there, never blocked). Each sleep
 * gets one when the writer passes during it: on a loaded machine the writer
 * can be held off the CPU for longer than a sleep (200 ms has been seen),
 * so each kind of wait must have a reason in at least one of its ROUNDS
 * ranges, and the misses are printed. */
static int range_index_at(const trace_read *r, int64_t ts)
{
    for (int i = 0; i < r->n_ranges; i++)
        if (ts >= r->ranges[i].t0 && ts < r->ranges[i].t1) return i;
    return -1;
}

static void check_blocks(const trace_read *r)
{
    sqlite3 *db = r->db;
    const char *level = meta(db, "cpu_block_reasons");
    assert_true(strcmp(level, "proc") == 0 || strcmp(level, "proc+stacks") == 0 || strcmp(level, "proc+sched") == 0);
    assert_string_equal(meta(db, "cpu_block_min_ns"), "1000000");
    assert_int_equal(atoll(meta(db, "cpu_blocks")), one_int(db, "SELECT count(*) FROM cpu_blocks"));
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT t_ns, seen_ns, syscall, name, arg0, wchan FROM cpu_blocks "
                                        "WHERE thread = 0 ORDER BY t_ns", -1, &st, NULL), SQLITE_OK);
    int per_stage[NAP + 1] = {0}, per_range[64] = {0};
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t t = sqlite3_column_int64(st, 0), seen = sqlite3_column_int64(st, 1);
        const char *name = (const char *)sqlite3_column_text(st, 3);
        const char *wchan = (const char *)sqlite3_column_text(st, 5);
        long long arg0 = sqlite3_column_int64(st, 4);
        int i = range_index_at(r, t);
        uint32_t at = i < 0 ? ST_CPU_NO_STAGE : r->ranges[i].stage;
        printf("block at %lld (seen %.2f ms later): %s (%lld, arg0 %#llx), wchan %s, in stage %d\n", (long long)t,
               (seen - t) / 1e6, name, sqlite3_column_int64(st, 2), arg0, wchan, (int)at);
        assert_true(seen - t >= 1000000);
        if (i < 0) continue; /* st_thread_register, st_close */
        assert_true(at <= NAP);
        per_stage[at]++;
        per_range[i]++;
        assert_true(per_range[i] == 1);
        if (at == SLEEP || at == NAP)
            assert_true(strcmp(name, "clock_nanosleep") == 0 || strcmp(name, "nanosleep") == 0);
        if (at == COND) {
            assert_string_equal(name, "futex");
            assert_true(arg0 != 0); /* the futex word's address */
        }
        if (at == PIPE) {
            assert_string_equal(name, "read");
            assert_true(arg0 > 2); /* the pipe's fd */
        }
    }
    sqlite3_finalize(st);
    printf("block reasons: sleep %d, cond %d, pipe %d, nap %d of %d each\n", per_stage[SLEEP], per_stage[COND],
           per_stage[PIPE], per_stage[NAP], ROUNDS);
    assert_int_equal(per_stage[SPIN], 0);
    assert_int_equal(per_stage[BURN], 0);
    for (int k = SLEEP; k <= NAP; k++) {
        if (k == BURN) continue;
        assert_true(per_stage[k] >= 1 && per_stage[k] <= ROUNDS);
    }
}

/* cpu_windows (with or without perf events): the main thread's on-CPU time
 * over all windows within 2 % of its CPU clock from st_open to st_close, and in each
 * window between two step marks within 2 % of what its CPU clock said at
 * the marks, where the writer read schedstat during the sleeps that follow
 * both marks (a loaded machine can hold the writer off the CPU for longer
 * than a sleep: such a window is said and skipped, at least one checked); the unregistered
 * thread "feeder" there by name. */
static void check_windows(const trace_read *r, const char *path)
{
    sqlite3 *db = r->db;
    assert_string_equal(meta(db, "cpu_window_source"), "schedstat");
    char side[4200];
    snprintf(side, sizeof side, "%s.cpu", path);
    FILE *f = fopen(side, "r");
    assert_non_null(f);
    long long cpu_at[ROUNDS + 1], cpu_end, cpu_before, cpu_opened;
    for (int k = 0; k <= ROUNDS; k++) assert_int_equal(fscanf(f, "%lld", &cpu_at[k]), 1);
    assert_int_equal(fscanf(f, "%lld %lld %lld", &cpu_end, &cpu_before, &cpu_opened), 3);
    fclose(f);
    long long tid = one_int(db, "SELECT os_tid FROM cpu_threads WHERE thread = 0");
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT sum(oncpu_ns) FROM cpu_windows WHERE os_tid = %lld AND thread = 0", tid);
    long long total = one_int(db, sql);
    /* from the writer's first read to its last (during st_close): the first
     * comes when the writer thread starts, after st_open returned when the
     * machine is loaded, so the lower bound counts from mark 1 only */
    printf("all windows: on-CPU %.3f ms (schedstat) vs %.3f-%.3f ms (CPU clock from st_open to st_close)\n",
           total / 1e6, (cpu_end - cpu_opened) / 1e6, (cpu_end - cpu_before) / 1e6);
    assert_true(total >= 0.98 * (cpu_end - cpu_at[1]) && total <= 1.02 * (cpu_end - cpu_before));
    /* the sleep after mark k: SLEEP of round k, or the first NAP */
    const range *after[ROUNDS + 1];
    for (int k = 0; k < ROUNDS; k++) after[k] = &r->ranges[3 * k + 1];
    after[ROUNDS] = &r->ranges[3 * ROUNDS + 2];
    for (int k = 0; k <= ROUNDS; k++) assert_int_equal(after[k]->stage, k < ROUNDS ? SLEEP : NAP);
    int checked = 0;
    for (int k = 1; k <= ROUNDS; k++) {
        sqlite3_stmt *st;
        snprintf(sql, sizeof sql, "SELECT t0_ns, t1_ns, oncpu_ns, runq_ns FROM cpu_windows WHERE step = %d AND "
                 "os_tid = %lld AND thread = 0", k, tid);
        assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        int64_t t0 = sqlite3_column_int64(st, 0), t1 = sqlite3_column_int64(st, 1);
        long long on = sqlite3_column_int64(st, 2), rq = sqlite3_column_int64(st, 3);
        sqlite3_finalize(st);
        long long want = cpu_at[k] - cpu_at[k - 1];
        int in_sleeps = t0 >= after[k - 1]->t0 && t0 < after[k - 1]->t1 && t1 >= after[k]->t0 && t1 < after[k]->t1;
        printf("window to step %d: on-CPU %.3f ms (schedstat) vs %.3f ms (CPU clock), run queue %.3f ms%s\n", k,
               on / 1e6, want / 1e6, rq / 1e6, in_sleeps ? "" : " (the writer read it after the sleep: skipped)");
        if (!in_sleeps) continue;
        checked++;
        assert_true(on >= 0.98 * want && on <= 1.02 * want);
    }
    /* a window the writer read outside the sleeps is skipped, but not all of
     * them: 60 ms sleeps against a writer that wakes every millisecond */
    printf("%d of %d windows checked against the CPU clock\n", checked, ROUNDS);
    assert_true(checked >= 1);
    assert_true(one_int(db, "SELECT count(*) FROM cpu_windows WHERE name = 'feeder' AND thread = -1") >= 1);
    assert_true(one_int(db, "SELECT count(DISTINCT window) FROM cpu_windows") >= ROUNDS + 1);
}

/* The samples: of those inside the burn ranges (at least min_in_burn),
 * >= 90 % attributed to stage burn by the writer and >= 90 % of those with
 * burn named in the stack; the sleep ranges get at most 5 % as many. */
static void check_burn_samples(const trace_read *r, long long lost, long min_in_burn)
{
    long in_burn = 0, burn_attr = 0, burn_named = 0, in_sleep = 0, unknown = 0;
    for (int i = 0; i < r->n_samples; i++) {
        const sample *s = &r->samples[i];
        uint32_t at = range_stage_at(r, s->ts);
        if (!s->known) unknown++;
        if (at == SLEEP) in_sleep++;
        if (at != BURN) continue;
        in_burn++;
        if (s->known && s->stage == BURN) {
            burn_attr++;
            burn_named += s->has_burn;
        }
    }
    double hz = atof(meta(r->db, "cpu_sample_hz"));
    printf("%d samples (%.1f per CPU second, %lld lost, %ld of unknown stage); in the burn ranges %ld, "
           "%ld attributed to burn, %ld of them with burn named in the stack; in the sleep ranges %ld; "
           "switches in %ld out %ld preempted %ld\n",
           r->n_samples, hz, lost, unknown, in_burn, burn_attr, burn_named, in_sleep, r->n_in, r->n_out,
           r->n_preempted);
    assert_true(in_burn >= min_in_burn);
    assert_true(burn_attr >= 0.90 * in_burn);
    assert_true(burn_named >= 0.90 * burn_attr);
    assert_true(in_sleep <= 0.05 * in_burn + 1);
}

/* Whether the sched_switch tracepoint is usable here: root (tracepoint
 * events and tracefs are root's on this VM) and tracefs mounted, which the
 * tests do as root when it is not (the library itself never mounts it). */
static const char *sched_unusable(void)
{
    static char why[160];
    if (getuid() != 0) return "not root: the sched_switch tracepoint is not allowed";
    if (access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) == 0 ||
        access("/sys/kernel/debug/tracing/events/sched/sched_switch/id", R_OK) == 0)
        return NULL;
    if (system("mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null") == 0 &&
        access("/sys/kernel/tracing/events/sched/sched_switch/id", R_OK) == 0)
        return NULL;
    snprintf(why, sizeof why, "tracefs is not mounted and could not be (mount -t tracefs nodev /sys/kernel/tracing)");
    return why;
}

/* Whether the first n of the stack's frames are named from kallsyms, under
 * the [kernel.kallsyms] mapping, and the rest are not. */
static int kernel_frames_ok(sqlite3 *db, uint32_t stack, uint32_t n_kernel)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n_frames, data FROM cpu_stacks WHERE id = ?", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, stack);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    uint32_t n = (uint32_t)sqlite3_column_int64(st, 0);
    uint64_t frames[512];
    assert_true(n <= 512 && n_kernel <= n);
    assert_int_equal(st_cpu_stack_get(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), n, frames), 0);
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT s.name, m.path FROM cpu_symbols s LEFT JOIN cpu_maps m "
                                        "ON m.id = s.map WHERE s.addr = ?", -1, &st, NULL), SQLITE_OK);
    int ok = 1;
    for (uint32_t i = 0; i < n; i++) {
        sqlite3_bind_int64(st, 1, (int64_t)frames[i]);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *path = (const char *)sqlite3_column_text(st, 1);
        int kernel = path && strcmp(path, "[kernel.kallsyms]") == 0;
        if (i < n_kernel && (!kernel || !name[0] || !(frames[i] >> 63))) ok = 0;
        if (i >= n_kernel && kernel) ok = 0;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return ok;
}

/* Wait stacks (meta cpu_block_reasons 'proc+stacks' where the kernel
 * allows the context-switch event: root, CAP_PERFMON, paranoid <= 1):
 * every blocked switch-out of the sleep, cond, pipe and nap ranges has its
 * stack (kind 8), but for one in each kind of wait at most (a wait-stack
 * sample the kernel lost, or a switch-out drained more than 100 ms after
 * it); their stacks start in the system call's libc wrapper, named
 * clock_nanosleep for the sleeps and read for the pipe; the count is
 * meta cpu_wait_stacks. Elsewhere 'proc', with the refusal in
 * cpu_wait_stacks_reason and no kind 8.
 * As root with tracefs, 'proc+sched': the same switch-outs as kind 9, each
 * in state S (every wait here is interruptible), its leading frames the
 * kernel's, named from kallsyms: hrtimer_nanosleep for the sleeps,
 * futex_wait for the condition wait, a pipe_read (anon_pipe_read on 6.x)
 * for the pipe; the user frames after them as in kind 8. Where the
 * tracepoint cannot be used, meta cpu_sched_reason says why. */
static void check_wait_stacks(const trace_read *r, int as_nobody)
{
    sqlite3 *db = r->db;
    char level[32];
    snprintf(level, sizeof level, "%s", meta(db, "cpu_block_reasons"));
    assert_int_equal(atoll(meta(db, "cpu_wait_stacks")), r->n_waits);
    const char *unusable = as_nobody ? "recorded as nobody" : sched_unusable();
    if (!unusable) {
        assert_string_equal(level, "proc+sched");
        assert_null(meta(db, "cpu_sched_reason"));
        assert_string_equal(meta(db, "cpu_kernel_symbols"), "kallsyms");
    } else {
        const char *why = meta(db, "cpu_sched_reason");
        printf("no sched_switch tracepoint (%s): %s\n", unusable, why ? why : "(no reason)");
        assert_non_null(why);
        assert_true(strcmp(level, "proc+sched") != 0);
    }
    int sched = strcmp(level, "proc+sched") == 0;
    if (strcmp(level, "proc+stacks") != 0 && !sched) {
        assert_string_equal(level, "proc");
        const char *why = meta(db, "cpu_wait_stacks_reason");
        printf("no wait stacks: %s\n", why ? why : "(no reason)");
        assert_non_null(why);
        assert_int_equal(r->n_waits, 0);
        return;
    }
    int blocked[NAP + 1] = {0}, stacked[NAP + 1] = {0}, named[NAP + 1] = {0};
    /* the blocked switch-outs per stage, from the chunks again */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n_records, data FROM cpu_chunks WHERE thread = 0 ORDER BY id", -1,
                                        &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        st_cpu_cursor c;
        assert_int_equal(st_cpu_cursor_open(&c, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                            (uint32_t)sqlite3_column_int64(st, 0)), 0);
        st_cpu_rec rec;
        while (st_cpu_next(&c, &rec) == 1) {
            if (rec.kind != ST_CPU_REC_OUT && rec.kind != ST_CPU_REC_OUT_STACK && rec.kind != ST_CPU_REC_OUT_SCHED)
                continue;
            uint32_t at = range_stage_at(r, rec.ts_ns);
            if (at == ST_CPU_NO_STAGE || at == SPIN || at == BURN) continue;
            blocked[at]++;
            if (rec.kind == ST_CPU_REC_OUT) continue;
            assert_int_equal(rec.kind, sched ? ST_CPU_REC_OUT_SCHED : ST_CPU_REC_OUT_STACK);
            stacked[at]++;
            const char *want = at == PIPE ? "read" : at == COND ? NULL : "clock_nanosleep";
            int user_named = want ? stack_has(db, rec.stack, want) || (at == PIPE && stack_has(db, rec.stack, "__read"))
                                  : 1;
            if (sched) {
                const char *kfn = at == PIPE ? "pipe_read" : at == COND ? "futex_wait" : "hrtimer_nanosleep";
                int k_named = stack_has(db, rec.stack, kfn) || (at == PIPE && stack_has(db, rec.stack, "anon_pipe_read"));
                if (!k_named || rec.flags != 'S' || !rec.n || !kernel_frames_ok(db, rec.stack, (uint32_t)rec.n))
                    printf("stage %u: kind 9 at %lld: state %c, %llu kernel frames, %s %s\n", at, (long long)rec.ts_ns,
                           (int)rec.flags, (unsigned long long)rec.n, kfn, k_named ? "named" : "not named");
                assert_int_equal(rec.flags, 'S');
                assert_true(rec.n >= 3);
                assert_true(kernel_frames_ok(db, rec.stack, (uint32_t)rec.n));
                named[at] += k_named && user_named;
            } else {
                named[at] += user_named;
            }
        }
    }
    sqlite3_finalize(st);
    /* the reader gives them as blocked switch-outs with wait_stack 1 */
    st_reader *rd;
    if (st_reader_open(&rd, sqlite3_db_filename(db, "main")) != ST_OK) fail_msg("%s", st_last_error());
    st_cpu_iter *it;
    assert_int_equal(st_cpu_iter_open(&it, rd, 0, INT64_MIN, INT64_MAX), ST_OK);
    st_cpu_row row;
    int rows_with = 0, k_rc;
    while ((k_rc = st_cpu_iter_next(it, &row)) == 1) {
        if (!row.wait_stack) continue;
        assert_int_equal(row.kind, ST_CPU_ROW_OUT_BLOCKED);
        if (sched) {
            assert_int_equal(row.state, 'S');
            assert_true(row.kernel_frames >= 3);
        } else {
            assert_int_equal(row.state, 0);
            assert_int_equal(row.kernel_frames, 0);
        }
        const uint64_t *fr;
        uint32_t nf;
        assert_int_equal(st_reader_cpu_stack(rd, row.stack, &fr, &nf), ST_OK);
        rows_with++;
    }
    assert_int_equal(k_rc, 0);
    st_cpu_iter_close(it);
    st_reader_close(rd);
    assert_int_equal(rows_with, r->n_waits);
    printf("wait stacks (%s): %d stored; sleep %d/%d (named %d), cond %d/%d, pipe %d/%d (named %d), nap %d/%d (named %d)\n",
           level, r->n_waits, stacked[SLEEP], blocked[SLEEP], named[SLEEP], stacked[COND], blocked[COND], stacked[PIPE],
           blocked[PIPE], named[PIPE], stacked[NAP], blocked[NAP], named[NAP]);
    for (int k = SLEEP; k <= NAP; k++) {
        if (k == BURN) continue;
        assert_true(blocked[k] >= ROUNDS);
        assert_true(stacked[k] >= blocked[k] - 1);
        assert_true(named[k] >= stacked[k] - 1);
    }
}

/* The checks of a trace recorded with perf events (see the top). */
static void check_perf_trace(const char *path, int as_nobody)
{
    static trace_read r;
    read_trace(path, &r);
    sqlite3 *db = r.db;
    assert_string_equal(meta(db, "status"), "complete");
    assert_string_equal(meta(db, "cpu_mode"), "perf");
    assert_string_equal(meta(db, "cpu_period_ns"), "1000000");
    assert_non_null(meta(db, "cpu_lost_records"));
    assert_int_equal(r.n_ranges, N_RANGES);
    long long lost = atoll(meta(db, "cpu_lost_records"));
    assert_int_equal(atoll(meta(db, "cpu_samples")), r.n_samples);
    assert_non_null(meta(db, "cpu_sample_hz"));
    assert_int_equal(one_int(db, "SELECT count(*) FROM cpu_threads"), 1);
    assert_int_equal(one_int(db, "SELECT count(*) FROM cpu_threads WHERE status = 'perf' AND ring_bytes > 0"), 1);
    assert_int_equal(one_int(db, "SELECT samples FROM cpu_threads"), r.n_samples);
    assert_int_equal(one_int(db, "SELECT switches FROM cpu_threads"), r.n_in + r.n_out + r.n_preempted);
    assert_int_equal(one_int(db, "SELECT lost FROM cpu_threads"), lost);
    /* every sleep blocked: out and in inside each sleep range */
    for (int k = 0; k < ROUNDS; k++) {
        printf("sleep %d: %lld blocked switch-outs, %lld switch-ins\n", k, (long long)r.sleep_outs[k],
               (long long)r.sleep_ins[k]);
        assert_true(r.sleep_outs[k] >= 1);
        assert_true(r.sleep_ins[k] >= 1);
    }
    check_burn_samples(&r, lost, 50);
    check_blocks(&r);
    check_wait_stacks(&r, as_nobody);
    if (as_nobody) { /* the level falls back to proc: nothing that needs privileges */
        assert_string_equal(meta(db, "cpu_block_reasons"), "proc");
        printf("as nobody: cpu_sched_reason \"%s\"\n", meta(db, "cpu_sched_reason"));
        assert_non_null(strstr(meta(db, "cpu_sched_reason"), "tracefs"));
    }
    check_windows(&r, path);
    /* the mappings: this program's file, with its symbols */
    assert_true(one_int(db, "SELECT count(*) FROM cpu_maps WHERE path LIKE '%test_cpu_record'") >= 1);
    assert_true(one_int(db, "SELECT count(*) FROM cpu_symbols WHERE name = 'burn_leaf'") >= 1);
    assert_int_equal(one_int(db, "SELECT count(*) FROM cpu_symbols WHERE map < 0 OR map >= (SELECT count(*) FROM cpu_maps)"), 0);
    sqlite3_close(db);
}

static void test_record(void **state)
{
    (void)state;
    char path[256];
    const char *no_sched = sched_unusable(); /* mounts tracefs as root where it can */
    if (no_sched) printf("the sched_switch level is not checked: %s\n", no_sched);
    assert_int_equal(run_recorder(AS_IS, "plain.sqlite", path, sizeof path), 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(db, "cpu_mode");
    if (!mode || strcmp(mode, "perf") != 0) {
        printf("skipped: perf events refused here: %s\n", meta(db, "cpu_reason"));
        sqlite3_close(db);
        skip();
    }
    sqlite3_close(db);
    check_perf_trace(path, 0);
}

static void test_record_as_nobody(void **state)
{
    (void)state;
    if (getuid() != 0) {
        printf("skipped: not root, cannot become nobody\n");
        skip();
    }
    if (system("setpriv --version > /dev/null 2>&1") != 0) {
        printf("skipped: no setpriv\n");
        skip();
    }
    char path[256];
    assert_int_equal(run_recorder(AS_NOBODY, "nobody.sqlite", path, sizeof path), 0);
    if (paranoid() > 2) {
        sqlite3 *db;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        assert_string_equal(meta(db, "cpu_mode"), "refused");
        sqlite3_close(db);
        return;
    }
    check_perf_trace(path, 1);
}

/* Under the seccomp filter the signal sampler takes the samples: cpu_mode
 * timer, the refusal in cpu_reason and cpu_threads.reason, the period the
 * asked 1 ms or the tick's if longer, an achieved rate within a factor 2
 * of it, the burn checks as with perf events (fewer samples: at the tick
 * rate), no switch records, no blocks, the windows all the same. */
static void test_record_under_seccomp(void **state)
{
    (void)state;
    char path[256];
    assert_int_equal(run_recorder(UNDER_SECCOMP, "seccomp.sqlite", path, sizeof path), 0);
    static trace_read r;
    read_trace(path, &r);
    sqlite3 *db = r.db;
    assert_string_equal(meta(db, "status"), "complete");
    assert_string_equal(meta(db, "cpu_mode"), "timer");
    assert_string_equal(meta(db, "cpu_sampler"), "timer");
    const char *why = meta(db, "cpu_reason");
    printf("under seccomp: cpu_mode timer, cpu_reason \"%s\"\n", why);
    assert_non_null(strstr(why, "seccomp"));
    assert_int_equal(one_int(db, "SELECT count(*) FROM cpu_threads WHERE status = 'timer' AND reason LIKE '%seccomp%'"), 1);
    assert_int_equal(r.n_ranges, N_RANGES);
    long long tick_hz = atoll(meta(db, "cpu_timer_tick_hz"));
    long long period = atoll(meta(db, "cpu_timer_period_ns"));
    long long want = 1000000000ll / tick_hz > 1000000 ? 1000000000ll / tick_hz : 1000000;
    double hz = atof(meta(db, "cpu_sample_hz"));
    printf("signal sampler: signal %lld, tick %lld Hz", atoll(meta(db, "cpu_timer_signal")), tick_hz);
    printf(" (%s), period %lld ns, %.1f samples per CPU second", meta(db, "cpu_timer_tick_source"), period, hz);
    printf(", %s timer overruns\n", meta(db, "cpu_timer_overruns") ? meta(db, "cpu_timer_overruns") : "0");
    assert_int_equal(period, want);
    assert_int_equal(one_int(db, "SELECT period_ns FROM cpu_threads"), period);
    /* a signal stands for 1 + its overruns periods: together they are the
     * thread's CPU time (exact but for the last period begun); the rate is
     * below the asked one when the thread often loses the CPU between
     * ticks (0.6 of it seen on the loaded VM) */
    long long over = meta(db, "cpu_timer_overruns") ? atoll(meta(db, "cpu_timer_overruns")) : 0;
    long long cpu = one_int(db, "SELECT cpu_ns FROM cpu_threads");
    double covered = (double)(r.n_samples + over) * (double)period;
    printf("(samples + overruns) x period = %.1f ms of the thread's %.1f ms of CPU\n", covered / 1e6, cpu / 1e6);
    assert_true(covered >= 0.8 * cpu && covered <= 1.2 * cpu + period);
    assert_true(hz >= 0.3e9 / period && hz <= 1.5e9 / period);
    assert_int_equal(atoll(meta(db, "cpu_samples")), r.n_samples);
    assert_int_equal(one_int(db, "SELECT samples FROM cpu_threads"), r.n_samples);
    assert_true(one_int(db, "SELECT cpu_ns FROM cpu_threads") > 50000000); /* the spins and burns */
    check_burn_samples(&r, atoll(meta(db, "cpu_lost_records")), 15);
    assert_int_equal(r.n_in + r.n_out + r.n_preempted, 0);
    assert_null(meta(db, "cpu_switches")); /* written once non-zero */
    assert_int_equal(one_int(db, "SELECT switches FROM cpu_threads"), 0);
    assert_int_equal(one_int(db, "SELECT count(*) FROM cpu_blocks"), 0);
    assert_string_equal(meta(db, "cpu_block_reasons"), "proc");
    check_windows(&r, path);
    sqlite3_close(db);
}

/* The GIL recorder's trace through the reader (st_cpu_iter): threads a
 * and b have >= 95 % of their samples in `held` with gil 1 and >= 95 % of
 * those in `free` with gil 0, at least 10 of each; thread c's are all -1;
 * meta cpu_gil_samples counts the samples whose state is known, and
 * cpu_sampler is timer. hybrid: perf events work, so cpu_mode is perf and
 * every thread has switch records beside its flagged samples; else (the
 * seccomp filter) cpu_mode timer and none. The program's SIGPROF handler
 * ran, and its SIGRTMAX handler got its signal (the sampler took another). */
static void check_gil_trace(const char *path, int hybrid)
{
    char side[4200];
    snprintf(side, sizeof side, "%s.sig", path);
    FILE *f = fopen(side, "r");
    assert_non_null(f);
    int prof = 0, rtmax = 0;
    assert_int_equal(fscanf(f, "%d %d", &prof, &rtmax), 2);
    fclose(f);
    st_reader *r;
    if (st_reader_open(&r, path) != ST_OK) fail_msg("%s: %s", path, st_last_error());
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_string_equal(meta(db, "cpu_mode"), hybrid ? "perf" : "timer");
    assert_string_equal(meta(db, "cpu_sampler"), "timer");
    int signo = atoi(meta(db, "cpu_timer_signal"));
    printf("%s: the program's SIGPROF handler ran %d times, its SIGRTMAX (%d) handler got %d signal; the sampler "
           "took signal %d\n", hybrid ? "hybrid" : "timer", prof, SIGRTMAX, rtmax, signo);
    assert_true(prof > 0);
    assert_int_equal(rtmax, 1);
    assert_true(signo >= SIGRTMIN && signo < SIGRTMAX);
    long long known = 0;
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
        const st_thread_info *ti = st_reader_thread(r, i);
        st_cpu_iter *it;
        assert_int_equal(st_cpu_iter_open(&it, r, ti->id, INT64_MIN, INT64_MAX), ST_OK);
        st_cpu_row row;
        long n[2] = {0}, right[2] = {0}, minus1 = 0, samples = 0, switches = 0;
        int rc;
        while ((rc = st_cpu_iter_next(it, &row)) == 1) {
            if (row.kind != ST_CPU_ROW_SAMPLE) {
                if (row.kind <= ST_CPU_ROW_OUT_PREEMPTED) switches++;
                assert_int_equal(row.gil, -1);
                continue;
            }
            samples++;
            minus1 += row.gil == -1;
            known += row.gil != -1;
            if (row.stage < 0) continue;
            n[row.stage]++;
            right[row.stage] += row.gil == (row.stage == G_HELD ? 1 : 0);
        }
        assert_int_equal(rc, 0);
        st_cpu_iter_close(it);
        printf("thread %s: %ld samples, held %ld (%ld with gil 1), free %ld (%ld with gil 0), %ld unknown; %ld "
               "switch records\n", ti->name, samples, n[G_HELD], right[G_HELD], n[G_FREE], right[G_FREE], minus1,
               switches);
        if (hybrid) assert_true(switches > 0);
        else assert_int_equal(switches, 0);
        if (strcmp(ti->name, "c") == 0) {
            assert_true(samples >= 10);
            assert_int_equal(minus1, samples);
            continue;
        }
        for (int k = 0; k < 2; k++) {
            assert_true(n[k] >= 10);
            assert_true(right[k] >= 0.95 * n[k]);
        }
    }
    assert_int_equal(atoll(meta(db, "cpu_gil_samples")), known);
    sqlite3_close(db);
    st_reader_close(r);
}

static void test_gil_timer(void **state)
{
    (void)state;
    char path[256];
    recorder_flag = "--record-gil";
    int rc = run_recorder(UNDER_SECCOMP, "gil_timer.sqlite", path, sizeof path);
    recorder_flag = "--record";
    assert_int_equal(rc, 0);
    check_gil_trace(path, 0);
}

static void test_gil_hybrid(void **state)
{
    (void)state;
    char path[256];
    recorder_flag = "--record-gil";
    int rc = run_recorder(AS_IS, "gil_hybrid.sqlite", path, sizeof path);
    recorder_flag = "--record";
    assert_int_equal(rc, 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(db, "cpu_mode");
    int perf = mode && strcmp(mode, "perf") == 0;
    if (!perf) printf("skipped: perf events refused here: %s\n", meta(db, "cpu_reason"));
    sqlite3_close(db);
    if (!perf) skip();
    check_gil_trace(path, 1);
}

/* ---- the encodings, byte by byte ----------------------------------------- */

static void test_chunk_bytes(void **state)
{
    (void)state;
    /* docs/trace-format.md, "CPU chunk": a blocked switch-out at 1000 ns, a
     * switch-in at 1500 ns, a sample of stack 7 in stage 2 at 2000 ns. */
    st_cpu_encoder e = {0};
    assert_int_equal(st_cpu_chunk_start(&e), 0);
    st_cpu_rec recs[] = {
        {ST_CPU_REC_OUT, 1000, 0, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_IN, 1500, 0, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_SAMPLE, 2000, 7, 2, 0, 0},
    };
    for (int i = 0; i < 3; i++) assert_int_equal(st_cpu_put(&e, &recs[i]), 0);
    static const uint8_t want[] = {0x50, 0x01, 0xd0, 0x0f, 0x00, 0xe8, 0x07, 0x03, 0xe8, 0x07, 0x07, 0x03};
    assert_int_equal(e.buf.len, sizeof want);
    assert_memory_equal(e.buf.data, want, sizeof want);
    assert_int_equal(e.t0_ns, 1000);
    assert_int_equal(e.t1_ns, 2000);
    /* more kinds, and time going back (zigzag): decode it all back */
    st_cpu_rec more[] = {
        {ST_CPU_REC_PREEMPTED, 1900, 0, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_SAMPLE, 1950, 0, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_SAMPLE_UNKNOWN, 5000000000, 123456, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_LOST, 5000000001, 0, ST_CPU_NO_STAGE, 99, 0},
    };
    for (int i = 0; i < 4; i++) assert_int_equal(st_cpu_put(&e, &more[i]), 0);
    st_cpu_rec bad = {9, 0, 0, 0, 0, 0};
    assert_int_equal(st_cpu_put(&e, &bad), -1);
    st_cpu_cursor c;
    assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, e.buf.len, 7), 0);
    st_cpu_rec r;
    for (int i = 0; i < 7; i++) {
        const st_cpu_rec *x = i < 3 ? &recs[i] : &more[i - 3];
        assert_int_equal(st_cpu_next(&c, &r), 1);
        assert_int_equal(r.kind, x->kind);
        assert_int_equal(r.ts_ns, x->ts_ns);
        if (x->kind == ST_CPU_REC_SAMPLE || x->kind == ST_CPU_REC_SAMPLE_UNKNOWN) assert_int_equal(r.stack, x->stack);
        if (x->kind == ST_CPU_REC_SAMPLE) assert_int_equal(r.stage, x->stage);
        if (x->kind == ST_CPU_REC_LOST) assert_int_equal(r.n, 99);
    }
    assert_int_equal(st_cpu_next(&c, &r), 0);
    /* every truncation is refused; so are a bad tag, a bad kind, a wrong count */
    for (size_t n = 1; n < e.buf.len; n++) {
        int rc = st_cpu_cursor_open(&c, e.buf.data, n, 7);
        if (rc == 0)
            while ((rc = st_cpu_next(&c, &r)) == 1) {
            }
        assert_int_equal(rc, ST_ECORRUPT);
    }
    assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, e.buf.len, 8), 0);
    int rc;
    while ((rc = st_cpu_next(&c, &r)) == 1) {
    }
    assert_int_equal(rc, ST_ECORRUPT);
    assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, e.buf.len, 6), 0);
    while ((rc = st_cpu_next(&c, &r)) == 1) {
    }
    assert_int_equal(rc, ST_ECORRUPT); /* bytes left */
    uint8_t copy[64];
    memcpy(copy, e.buf.data, e.buf.len);
    copy[0] = 0x51;
    assert_int_equal(st_cpu_cursor_open(&c, copy, e.buf.len, 7), ST_ECORRUPT);
    copy[0] = 0x50;
    copy[1] = 9; /* kind 9 */
    assert_int_equal(st_cpu_cursor_open(&c, copy, e.buf.len, 7), 0);
    assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    st_buf_free(&e.buf);
}

/* docs/trace-format.md, "CPU chunk", kinds 6 to 8: a sample of stack 7
 * in stage 2 with the GIL held at 1000 ns, a sample of stack 1 of unknown
 * stage without the GIL at 1500 ns, a blocked switch-out with wait stack 4
 * at 2000 ns, a sample of stack 0 with no range open and the GIL state
 * unknown at 2500 ns; the reader's rows; and the rejections: flags 2
 * (held, not known), flags 4, kind 9. */
static void test_chunk_bytes_flags(void **state)
{
    (void)state;
    st_cpu_encoder e = {0};
    assert_int_equal(st_cpu_chunk_start(&e), 0);
    st_cpu_rec recs[] = {
        {ST_CPU_REC_SAMPLE_FLAGS, 1000, 7, 2, 0, ST_CPU_FLAG_GIL_KNOWN | ST_CPU_FLAG_GIL_HELD},
        {ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN, 1500, 1, ST_CPU_NO_STAGE, 0, ST_CPU_FLAG_GIL_KNOWN},
        {ST_CPU_REC_OUT_STACK, 2000, 4, ST_CPU_NO_STAGE, 0, 0},
        {ST_CPU_REC_SAMPLE_FLAGS, 2500, 0, ST_CPU_NO_STAGE, 0, 0},
    };
    for (int i = 0; i < 4; i++) assert_int_equal(st_cpu_put(&e, &recs[i]), 0);
    static const uint8_t want[] = {0x50, 0x06, 0xd0, 0x0f, 0x07, 0x03, 0x03, 0x07, 0xe8, 0x07, 0x01, 0x01,
                                   0x08, 0xe8, 0x07, 0x04, 0x06, 0xe8, 0x07, 0x00, 0x00, 0x00};
    assert_int_equal(e.buf.len, sizeof want);
    assert_memory_equal(e.buf.data, want, sizeof want);
    st_cpu_cursor c;
    st_cpu_rec r;
    assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, e.buf.len, 4), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(st_cpu_next(&c, &r), 1);
        assert_int_equal(r.kind, recs[i].kind);
        assert_int_equal(r.ts_ns, recs[i].ts_ns);
        assert_int_equal(r.stack, recs[i].stack);
        assert_int_equal(r.stage, recs[i].stage);
        assert_int_equal(r.flags, recs[i].flags);
    }
    assert_int_equal(st_cpu_next(&c, &r), 0);
    for (size_t n = 1; n < e.buf.len; n++) { /* every truncation */
        int rc = st_cpu_cursor_open(&c, e.buf.data, n, 4);
        if (rc == 0)
            while ((rc = st_cpu_next(&c, &r)) == 1) {
            }
        assert_int_equal(rc, ST_ECORRUPT);
    }
    uint8_t copy[sizeof want];
    uint8_t bad_flags[] = {2, 4, 0x7f};
    for (int k = 0; k < 3; k++) {
        memcpy(copy, want, sizeof want);
        copy[6] = bad_flags[k]; /* the first record's flags */
        assert_int_equal(st_cpu_cursor_open(&c, copy, sizeof copy, 4), 0);
        assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    }
    memcpy(copy, want, sizeof want);
    copy[12] = 12; /* kind 12: above the last kind (11) */
    assert_int_equal(st_cpu_cursor_open(&c, copy, sizeof copy, 4), 0);
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    st_cpu_rec bad = {ST_CPU_REC_SAMPLE_FLAGS, 0, 0, 0, 0, ST_CPU_FLAG_GIL_HELD};
    assert_int_equal(st_cpu_put(&e, &bad), -1);
    st_buf_free(&e.buf);
}

/* Kind 9 (the sched_switch tracepoint's switch-out): docs/trace-format.md's
 * example, a blocked switch-out at 1000 ns with stack 5 whose first 3
 * frames are the kernel's, in state S (0x53), then a switch-in at 1500 ns:
 * 50 09 d0 0f 05 03 53 00 e8 07. A state outside printable ASCII, or more
 * kernel frames than 2^32 - 2, is refused both ways. */
static void test_chunk_bytes_sched(void **state)
{
    (void)state;
    st_cpu_encoder e = {0};
    assert_int_equal(st_cpu_chunk_start(&e), 0);
    st_cpu_rec recs[] = {
        {ST_CPU_REC_OUT_SCHED, 1000, 5, ST_CPU_NO_STAGE, 3, 'S'},
        {ST_CPU_REC_IN, 1500, 0, ST_CPU_NO_STAGE, 0, 0},
    };
    for (int i = 0; i < 2; i++) assert_int_equal(st_cpu_put(&e, &recs[i]), 0);
    static const uint8_t want[] = {0x50, 0x09, 0xd0, 0x0f, 0x05, 0x03, 0x53, 0x00, 0xe8, 0x07};
    assert_int_equal(e.buf.len, sizeof want);
    assert_memory_equal(e.buf.data, want, sizeof want);
    st_cpu_cursor c;
    st_cpu_rec r;
    assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, e.buf.len, 2), 0);
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(r.kind, ST_CPU_REC_OUT_SCHED);
    assert_int_equal(r.ts_ns, 1000);
    assert_int_equal(r.stack, 5);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.flags, 'S');
    assert_int_equal(st_cpu_next(&c, &r), 1);
    assert_int_equal(r.kind, ST_CPU_REC_IN);
    assert_int_equal(st_cpu_next(&c, &r), 0);
    for (size_t n = 1; n < 7; n++) { /* every truncation of the first record */
        assert_int_equal(st_cpu_cursor_open(&c, e.buf.data, n, 2), 0);
        assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    }
    uint8_t copy[sizeof want];
    uint8_t bad_state[] = {0x00, 0x20, 0x7f};
    for (int k = 0; k < 3; k++) {
        memcpy(copy, want, sizeof want);
        copy[6] = bad_state[k];
        assert_int_equal(st_cpu_cursor_open(&c, copy, sizeof copy, 2), 0);
        assert_int_equal(st_cpu_next(&c, &r), ST_ECORRUPT);
    }
    st_cpu_rec bad = {ST_CPU_REC_OUT_SCHED, 0, 0, ST_CPU_NO_STAGE, 0, 0x7f};
    assert_int_equal(st_cpu_put(&e, &bad), -1);
    bad.flags = 'D';
    bad.n = UINT32_MAX;
    assert_int_equal(st_cpu_put(&e, &bad), -1);
    st_buf_free(&e.buf);
}

/* The tracepoint's format file: Linux 6.18's here (prev_state a long at 32,
 * the letters S D T t X Z P I, preempted above them), and a 4.x-style one
 * whose print fmt names other letters (the parser takes them from the
 * file, not from a table of its own); one without prev_state is refused. */
static void test_sched_format(void **state)
{
    (void)state;
    static const char fmt618[] =
        "name: sched_switch\nID: 372\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
        "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
        "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
        "\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
        "\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
        "\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n"
        "\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
        "\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n"
        "print fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d "
        "next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | "
        "0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - "
        "1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 "
        "| 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, "
        "\"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, "
        "{ 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | "
        "0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", "
        "REC->next_comm, REC->next_pid, REC->next_prio\n";
    st_cpusched_format f;
    assert_int_equal(st_cpusched_parse_format(fmt618, &f), 0);
    assert_int_equal(f.prev_pid_off, 24);
    assert_int_equal(f.prev_pid_size, 4);
    assert_int_equal(f.prev_state_off, 32);
    assert_int_equal(f.prev_state_size, 8);
    assert_int_equal(f.common_type_off, 0);
    assert_int_equal(f.preempt_bit, 0x100);
    assert_int_equal(st_cpusched_state(&f, 0), 'R');
    assert_int_equal(st_cpusched_state(&f, 1), 'S');
    assert_int_equal(st_cpusched_state(&f, 2), 'D');
    assert_int_equal(st_cpusched_state(&f, 0x80), 'I');
    assert_int_equal(st_cpusched_state(&f, 0x100), '+');
    assert_int_equal(st_cpusched_state(&f, 0x101), '+');
    /* 4.x: prev_state an int at 32 (no field named like it before), letters with K W */
    static const char fmt4[] =
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
        "\tfield:long prev_state;\toffset:32;\tsize:4;\tsigned:1;\n"
        "print fmt: \"...\", __print_flags(REC->prev_state & (2048-1), \"|\", { 1, \"S\"} ) : \"R\", "
        "{ 0x01, \"S\" }, { 0x02, \"D\" }, { 0x04, \"T\" }, { 0x08, \"t\" }, { 0x10, \"X\" }, "
        "{ 0x20, \"Z\" }, { 0x40, \"x\" }, { 0x80, \"K\" }, { 0x100, \"W\" }, { 0x200, \"P\" }, { 0x400, \"N\" }\n";
    assert_int_equal(st_cpusched_parse_format(fmt4, &f), 0);
    assert_int_equal(f.prev_state_size, 4);
    assert_int_equal(f.preempt_bit, 0x800);
    assert_int_equal(st_cpusched_state(&f, 0x80), 'K');
    assert_int_equal(st_cpusched_state(&f, 0x400), 'N');
    assert_int_equal(st_cpusched_state(&f, 0x800), '+');
    static const char nostate[] = "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n";
    assert_int_equal(st_cpusched_parse_format(nostate, &f), -1);
}

static void test_stack_bytes(void **state)
{
    (void)state;
    /* docs/trace-format.md, "cpu_stacks" */
    uint64_t frames[] = {0x401000, 0x401234, 0x400f00}, back[3];
    st_buf b = {0};
    assert_int_equal(st_cpu_stack_put(&b, frames, 3), 0);
    static const uint8_t want[] = {0x80, 0xc0, 0x80, 0x04, 0xe8, 0x08, 0xe7, 0x0c};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    assert_int_equal(st_cpu_stack_get(b.data, b.len, 3, back), 0);
    assert_memory_equal(back, frames, sizeof frames);
    assert_int_equal(st_cpu_stack_get(b.data, b.len - 1, 3, back), ST_ECORRUPT);
    assert_int_equal(st_cpu_stack_get(b.data, b.len, 2, back), ST_ECORRUPT);
    /* high addresses wrap in 64 bits */
    uint64_t high[] = {0xffffffffff600000ull, 0x10, 0x7fffffffe000ull};
    b.len = 0;
    assert_int_equal(st_cpu_stack_put(&b, high, 3), 0);
    assert_int_equal(st_cpu_stack_get(b.data, b.len, 3, back), 0);
    assert_memory_equal(back, high, sizeof high);
    assert_int_equal(st_cpu_stack_get(NULL, 0, 0, back), 0);
    st_buf_free(&b);
}

/* The /proc parsers (cpu_proc.c) on the texts the kernel writes. */
static void test_proc_parsers(void **state)
{
    (void)state;
    st_cpu_block b;
    assert_int_equal(st_cpuproc_parse_syscall("202 0x7ffc9ef16ba8 0x189 0x0 0x0 0x7ffc9ef16b10 0xffffffff "
                                              "0x7ffc9ef16aa0 0x7f04e9c98d61", &b), 1);
    assert_int_equal(b.nr, 202);
    assert_true(b.arg[0] == 0x7ffc9ef16ba8ull && b.arg[1] == 0x189);
    assert_int_equal(st_cpuproc_parse_syscall("-1 0x7ffc9ef16aa0 0x7f04e9c98d61", &b), 1);
    assert_int_equal(b.nr, -1);
    assert_true(b.arg[0] == 0 && b.arg[1] == 0);
    assert_int_equal(st_cpuproc_parse_syscall("running", &b), 0);
    assert_int_equal(st_cpuproc_parse_syscall("", &b), -1);
    assert_int_equal(st_cpuproc_parse_syscall("x", &b), -1);
    assert_int_equal(st_cpuproc_parse_syscall("0", &b), -1); /* no arguments */
    assert_string_equal(st_cpuproc_syscall_name(SYS_futex), "futex");
    assert_string_equal(st_cpuproc_syscall_name(SYS_read), "read");
    assert_string_equal(st_cpuproc_syscall_name(SYS_ioctl), "ioctl");
    assert_string_equal(st_cpuproc_syscall_name(SYS_clock_nanosleep), "clock_nanosleep");
    assert_string_equal(st_cpuproc_syscall_name(-1), "");
    assert_string_equal(st_cpuproc_syscall_name(100000), "other");
    uint64_t v[3];
    assert_int_equal(st_cpuproc_parse_schedstat("37227946 22454259 108", v), 0);
    assert_true(v[0] == 37227946 && v[1] == 22454259 && v[2] == 108);
    assert_int_equal(st_cpuproc_parse_schedstat("37227946 22454259", v), -1);
    assert_int_equal(st_cpuproc_parse_schedstat("", v), -1);
    /* this thread, read through the descriptor */
    int fd = st_cpuproc_schedstat_open(syscall(SYS_gettid));
    assert_true(fd >= 0);
    assert_int_equal(st_cpuproc_schedstat_read(fd, v), 0);
    uint64_t before = v[0];
    int64_t until = mono_ns() + 20000000;
    while (mono_ns() < until) {
    }
    assert_int_equal(st_cpuproc_schedstat_read(fd, v), 0);
    assert_true(v[0] > before);
    close(fd);
    char name[20];
    assert_int_equal(st_cpuproc_comm(syscall(SYS_gettid), name, sizeof name), 0);
    assert_true(name[0] != 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--record") == 0) return record(argv[2]);
    /* the recorder under the seccomp filter that refuses perf_event_open: the signal sampler
     * (tests/it_cpu_analyze.sh reads it back through analyze) */
    if (argc == 3 && strcmp(argv[1], "--record-refused") == 0) return refuse_perf() != 0 ? 20 : record(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--record-gil") == 0) return record_gil(argv[2]);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    snprintf(dir, sizeof dir, "/tmp/st_cpu_record.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    chmod(dir, 0777); /* nobody writes there too */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_record_as_nobody),
        cmocka_unit_test(test_record_under_seccomp),
        cmocka_unit_test(test_gil_timer),
        cmocka_unit_test(test_gil_hybrid),
        cmocka_unit_test(test_proc_parsers),
        cmocka_unit_test(test_chunk_bytes),
        cmocka_unit_test(test_chunk_bytes_flags),
        cmocka_unit_test(test_chunk_bytes_sched),
        cmocka_unit_test(test_sched_format),
        cmocka_unit_test(test_stack_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
