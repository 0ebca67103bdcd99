/* test_faults.c: what a trace holds when its process dies or is
 * interrupted (tracer/writer.c commits, tracer/trace.c signal path).
 *
 * Each test forks a child that opens a trace, records numbered iterations
 * (outer { counter = i; inner }) in batches and reports on a pipe how many
 * it has recorded; the parent kills or signals it and then reads the trace
 * with the reader:
 *  - SIGKILL after acknowledged st_flush calls: the file opens, says
 *    "running", and holds every acknowledged iteration, as complete ranges;
 *  - SIGTERM with st_install_signal_handlers(trace, 1): the child dies of
 *    SIGTERM, the file says "interrupted" and holds every iteration recorded
 *    before the signal, with no st_flush by the child;
 *  - SIGINT: the child sees st_interrupted(), stops, closes; the file keeps
 *    "interrupted" and holds everything;
 *  - SIGTERM while the child holds the trace's registration lock: the
 *    handler's flush must still complete (promptly, with "interrupted");
 *  - SIGKILL while the child registers stages and counters as it records:
 *    every committed chunk names only stages and counters the file has;
 *  - a disk that fills up and frees again mid-run (a 2 MiB tmpfs, root
 *    only: otherwise a SKIP line): with the default retry memory no step
 *    and no range is missing; with none, the discarded chunks are recorded
 *    as lost spans, counted exactly, shown by `analyze info` and warned by
 *    `analyze intervals`. Never "complete" with a silent hole.
 *
 * Files go to a fresh directory under $ST_TEST_TMP (else under /tmp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "st_internal.h" /* st__test_set_writer_delay */
#include "st_reader.h"
#include "stagetrace.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the child's side ---- */

enum { MSG_ACK = 1, MSG_DONE = 2, MSG_FAIL = 3 };

typedef struct msg {
    uint32_t kind;
    uint32_t batch;
    uint64_t recorded; /* iterations recorded (and, for acks, flushed if asked) */
} msg;

static void child_send(int fd, uint32_t kind, uint32_t batch, uint64_t recorded)
{
    msg m = {kind, batch, recorded};
    if (write(fd, &m, sizeof m) != (ssize_t)sizeof m) _exit(20);
}

static void child_fail(int fd, const char *what)
{
    fprintf(stderr, "child: %s: %s\n", what, st_last_error());
    child_send(fd, MSG_FAIL, 0, 0);
    _exit(21);
}

typedef struct workload {
    st_trace *trace;
    st_stage outer, inner;
    st_counter seq;
} workload;

static void child_open(workload *w, int fd, const char *path, uint32_t commit_ms, int block)
{
    alarm(30); /* never outlive a failed parent by long */
    st_options o;
    st_options_init(&o);
    o.path = path;
    o.nvtx = 0;
    o.commit_ms = commit_ms;
    o.block_when_full = block;
    if (st_open(&w->trace, &o)) child_fail(fd, "st_open");
    int outer = st_stage_register(w->trace, "outer", ST_WORK);
    int inner = st_stage_register(w->trace, "inner", ST_COPY);
    int seq = st_counter_register(w->trace, "seq", "");
    if (outer < 0 || inner < 0 || seq < 0) child_fail(fd, "register");
    if (st_thread_register(w->trace, "main", "main", -1, 0) != 0) child_fail(fd, "st_thread_register");
    w->outer = (st_stage)outer;
    w->inner = (st_stage)inner;
    w->seq = (st_counter)seq;
}

static void record_iteration(const workload *w, uint64_t i)
{
    st_begin(w->outer);
    st_counter_set(w->seq, (double)i);
    st_begin(w->inner);
    st_end(w->inner);
    st_end(w->outer);
}

#define BATCH 2000
#define MAX_BATCHES 5000

/* Records batches; after each, st_flush (when `flush`) and an ack. */
static void child_batches(const char *path, int fd, int flush, int handlers, uint32_t commit_ms,
                          int stop_on_interrupt)
{
    workload w;
    child_open(&w, fd, path, commit_ms, 1);
    if (handlers && st_install_signal_handlers(w.trace, 1)) child_fail(fd, "handlers");
    uint64_t i = 0;
    for (uint32_t b = 0; b < MAX_BATCHES; b++) {
        for (int k = 0; k < BATCH; k++) record_iteration(&w, i++);
        if (flush && st_flush(w.trace)) child_fail(fd, "st_flush");
        child_send(fd, MSG_ACK, b, i);
        if (stop_on_interrupt && st_interrupted()) {
            /* One more batch after the signal, then a clean close. */
            for (int k = 0; k < BATCH; k++) record_iteration(&w, i++);
            if (st_close(w.trace)) child_fail(fd, "st_close");
            child_send(fd, MSG_DONE, b, i);
            _exit(0);
        }
        usleep(2000);
    }
    _exit(22); /* the parent should have stopped us long ago */
}

/* ---- the parent's side ---- */

typedef struct child {
    pid_t pid;
    int fd;         /* read end */
    uint64_t acked; /* the largest count the child reported */
    uint32_t acks;
    int done;       /* MSG_DONE seen */
} child;

static void start_child(child *c, void (*body)(const char *, int, void *), const char *path, void *arg)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        /* The child is to be signalled: default actions, whatever this
         * process inherited (a background job starts with SIGINT ignored,
         * which the handlers would keep). */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        body(path, fds[1], arg);
        _exit(23);
    }
    close(fds[1]);
    memset(c, 0, sizeof *c);
    c->pid = pid;
    c->fd = fds[0];
}

/* Reads one message; 1: got one, 0: EOF, fails on timeout. */
static int read_msg(child *c, msg *m, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc != 1) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        fail_msg("no message from the child in %d ms", timeout_ms);
    }
    ssize_t n = read(c->fd, m, sizeof *m);
    if (n == 0) return 0;
    assert_int_equal(n, sizeof *m);
    if (m->kind == MSG_FAIL) {
        waitpid(c->pid, NULL, 0);
        fail_msg("the child failed (see its message above)");
    }
    if (m->recorded > c->acked) c->acked = m->recorded;
    if (m->kind == MSG_ACK) c->acks++;
    if (m->kind == MSG_DONE) c->done = 1;
    return 1;
}

static void wait_acks(child *c, uint32_t n)
{
    msg m;
    while (c->acks < n) assert_int_equal(read_msg(c, &m, 10000), 1);
}

/* Reads what the child still says until it is gone; returns its status. */
static int drain_and_reap(child *c, int timeout_ms)
{
    msg m;
    while (read_msg(c, &m, timeout_ms) == 1) {
    }
    close(c->fd);
    int status = 0;
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    return status;
}

/* The trace holds a prefix of the child's iterations 0, 1, 2, ...: events in
 * exactly the recorded pattern (the last iteration may be cut anywhere), the
 * counter samples 0..K-1, complete ranges only. Returns the number of
 * complete iterations. */
static uint64_t check_prefix(const char *path, const char *status, uint64_t at_least)
{
    st_reader *r = open_reader(path);
    assert_meta(r, "status", status);
    assert_meta(r, "dropped_events", "0");
    assert_meta(r, "unmatched_ends", NULL);
    assert_int_equal(st_reader_n_threads(r), 1);
    const st_thread_info *ti = st_reader_thread(r, 0);
    assert_string_equal(ti->name, "main");
    assert_int_equal(ti->dropped, 0);
    assert_string_equal(st_reader_stage(r, 0)->name, "outer");
    assert_string_equal(st_reader_stage(r, 1)->name, "inner");

    /* Events: B outer, B inner, E inner, E outer, repeated. */
    static const int pat_end[4] = {0, 0, 1, 1};
    static const uint32_t pat_stage[4] = {0, 1, 1, 0};
    static const uint32_t pat_depth[4] = {0, 1, 1, 0};
    st_event_iter *it;
    assert_int_equal(st_event_iter_open(&it, r, ti->id), ST_OK);
    st_event ev;
    uint64_t n = 0;
    int64_t prev = INT64_MIN, outer_start = 0, inner_start = 0;
    int rc;
    while ((rc = st_event_iter_next(it, &ev)) == 1) {
        int k = (int)(n % 4);
        if (ev.is_end != pat_end[k] || ev.stage != pat_stage[k] || ev.depth != pat_depth[k])
            fail_msg("event %llu: %s stage %u depth %u breaks the pattern", (unsigned long long)n,
                     ev.is_end ? "end" : "begin", ev.stage, ev.depth);
        assert_true(ev.ts_ns >= prev);
        prev = ev.ts_ns;
        if (k == 0) outer_start = ev.ts_ns;
        if (k == 1) inner_start = ev.ts_ns;
        if (k == 2) assert_int_equal(ev.start_ns, inner_start);
        if (k == 3) assert_int_equal(ev.start_ns, outer_start);
        n++;
    }
    if (rc != 0) fail_msg("reading events: %d: %s", rc, st_last_error());
    st_event_iter_close(it);
    uint64_t complete = n / 4;

    /* Counter samples: 0, 1, ..., K-1, where the cut fell somewhere in
     * iteration K-1 or just after it. */
    st_sample_iter *si;
    assert_int_equal(st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_sample_row s;
    uint64_t k = 0;
    while ((rc = st_sample_iter_next(si, &s)) == 1) {
        if (s.value != (double)k) fail_msg("sample %llu has value %.0f", (unsigned long long)k, s.value);
        k++;
    }
    if (rc != 0) fail_msg("reading samples: %d: %s", rc, st_last_error());
    st_sample_iter_close(si);
    /* Records per iteration: B outer, counter, B inner, E inner, E outer. */
    if (n % 4 == 0) assert_int_equal(k, complete);
    else if (n % 4 == 1) assert_true(k == complete || k == complete + 1);
    else assert_int_equal(k, complete + 1);

    /* Completed ranges: two per complete iteration, plus the inner one of a
     * cut iteration. */
    st_range_iter *ri;
    assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    uint64_t ranges = 0;
    while ((rc = st_range_iter_next(ri, &rg)) == 1) {
        assert_true(rg.dur_ns >= 0);
        assert_int_equal(rg.depth, rg.stage == 0 ? 0 : 1);
        ranges++;
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(ri);
    assert_int_equal(ranges, 2 * complete + (n % 4 == 3 ? 1 : 0));
    if (complete < at_least)
        fail_msg("the trace holds %llu complete iterations, but %llu were acknowledged",
                 (unsigned long long)complete, (unsigned long long)at_least);
    st_reader_close(r);
    return complete;
}

static char *run_analyze(const char *args, const char *out_name, int *status)
{
    char out[PATH_MAX + 64], cmd[4 * PATH_MAX];
    snprintf(out, sizeof out, "%s/%s", tmp_dir, out_name);
    if ((size_t)snprintf(cmd, sizeof cmd, "%s/analyze %s > %s 2>&1", build_dir(), args, out) >= sizeof cmd)
        fail_msg("command too long");
    int rc = system(cmd);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return read_file(out, NULL);
}

/* Copies the trace file alone, without its -wal and -shm, as `cp *.sqlite`
 * does, to `to` (removed first, with its side files). */
static void copy_main_file(const char *from, const char *to)
{
    static const char *const sides[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        char side[PATH_MAX + 16];
        snprintf(side, sizeof side, "%s%s", to, sides[i]);
        unlink(side);
    }
    size_t len = 0;
    char *data = read_file(from, &len);
    assert_non_null(data);
    int fd = open(to, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    free(data);
}

/* ---- tests ---- */

static void body_flush_batches(const char *path, int fd, void *arg)
{
    (void)arg;
    child_batches(path, fd, 1, 0, 20, 0);
}

static void test_sigkill_keeps_flushed_batches(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "sigkill.sqlite");
    child c;
    start_child(&c, body_flush_batches, path, NULL);
    wait_acks(&c, 5);
    uint64_t acked = c.acked;
    assert_int_equal(kill(c.pid, SIGKILL), 0);
    int status = drain_and_reap(&c, 10000);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_true(c.acked >= acked);
    /* Every acknowledged batch was flushed before its ack. */
    uint64_t complete = check_prefix(path, "running", c.acked);
    assert_true(complete >= 5 * BATCH);
    st_reader *r = open_reader(path);
    assert_meta(r, "end_ns", NULL);
    assert_meta(r, "commit_ms", "20");
    st_reader_close(r);
}

static void body_term_batches(const char *path, int fd, void *arg)
{
    (void)arg;
    child_batches(path, fd, 0, 1, 250, 0);
}

static void test_sigterm_flushes_and_dies(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "sigterm%d.sqlite", round);
        tmp_path(path, sizeof path, name);
        child c;
        start_child(&c, body_term_batches, path, NULL);
        wait_acks(&c, 3 + (uint32_t)round);
        if (round == 1) usleep(700); /* land in the middle of a batch */
        int64_t t0 = now_ms();
        assert_int_equal(kill(c.pid, SIGTERM), 0);
        int status = drain_and_reap(&c, 10000);
        int64_t took = now_ms() - t0;
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGTERM);
        if (took > 3000) fail_msg("the child took %lld ms to die of SIGTERM", (long long)took);
        /* No st_flush in the child: the signal's flush stored everything
         * recorded before it (every ack the child wrote came before the
         * handler ran, on the one thread that records). */
        uint64_t complete = check_prefix(path, "interrupted", c.acked);
        st_reader *r = open_reader(path);
        assert_meta(r, "end_ns", NULL);
        st_reader_close(r);
        /* The flush checkpointed: the .sqlite alone holds the same prefix. */
        char copy[PATH_MAX + 8];
        snprintf(copy, sizeof copy, "%s.copy", path);
        copy_main_file(path, copy);
        assert_int_equal(check_prefix(copy, "interrupted", c.acked), complete);
    }
}

static void body_int_batches(const char *path, int fd, void *arg)
{
    (void)arg;
    child_batches(path, fd, 0, 1, 250, 1);
}

static void test_sigint_keeps_running_then_closes(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "sigint.sqlite");
    child c;
    start_child(&c, body_int_batches, path, NULL);
    wait_acks(&c, 3);
    assert_int_equal(kill(c.pid, SIGINT), 0);
    int status = drain_and_reap(&c, 10000);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(c.done);
    /* A clean close after the signal: every iteration, including the batch
     * recorded after it, and the status stays "interrupted". */
    uint64_t complete = check_prefix(path, "interrupted", c.acked);
    assert_int_equal(complete, c.acked);
    st_reader *r = open_reader(path);
    assert_non_null(st_reader_meta(r, "end_ns"));
    st_reader_close(r);
    char wal[PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_int_equal(access(wal, F_OK), -1);
    char copy[PATH_MAX + 8];
    snprintf(copy, sizeof copy, "%s.copy", path);
    copy_main_file(path, copy);
    assert_int_equal(check_prefix(copy, "interrupted", c.acked), complete);
}

/* A program started with SIGINT and SIGTERM ignored (`trap '' INT TERM`,
 * nohup): the handlers leave them ignored, so the signals change nothing.
 * The child reports st_interrupted() after the signals, records one more
 * batch and closes; the trace says complete and holds every iteration. */
static void body_ignored_signals(const char *path, int fd, void *arg)
{
    int go = *(int *)arg;
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    workload w;
    child_open(&w, fd, path, 250, 1);
    if (st_install_signal_handlers(w.trace, 1)) child_fail(fd, "handlers");
    uint64_t i = 0;
    for (int k = 0; k < BATCH; k++) record_iteration(&w, i++);
    child_send(fd, MSG_ACK, 0, i);
    char c;
    if (read(go, &c, 1) != 1) child_fail(fd, "read");
    for (int k = 0; k < BATCH; k++) record_iteration(&w, i++);
    int interrupted = st_interrupted();
    if (st_close(w.trace)) child_fail(fd, "st_close");
    child_send(fd, MSG_DONE, (uint32_t)interrupted, i);
    _exit(0);
}

static void test_ignored_signals_stay_ignored(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "ignored.sqlite");
    int go[2];
    assert_int_equal(pipe(go), 0);
    child c;
    start_child(&c, body_ignored_signals, path, &go[0]);
    close(go[0]);
    wait_acks(&c, 1);
    assert_int_equal(kill(c.pid, SIGINT), 0);
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    assert_int_equal(write(go[1], "g", 1), 1); /* the signals are delivered before the read returns */
    close(go[1]);
    msg m;
    assert_int_equal(read_msg(&c, &m, 10000), 1);
    assert_int_equal(m.kind, MSG_DONE);
    assert_int_equal(m.batch, 0); /* st_interrupted() */
    int status = drain_and_reap(&c, 10000);
    if (!WIFEXITED(status))
        fail_msg("the child died of signal %d, which it had ignored", WTERMSIG(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(check_prefix(path, "complete", 2 * BATCH), 2 * BATCH);
}

/* A thread sits in a long wait when SIGTERM comes (exit_on_term): the
 * trace keeps that wait as an unended range, with the start it was begun
 * at, open until the flush (its last chunk's t1_ns is past the signal),
 * and `analyze summary` counts it up to there, about as long as the
 * parent waited before the signal. */
#define WAIT_BEFORE_TERM_MS 400
static st_trace *waiter_trace;
static void *waiter_main(void *arg)
{
    int *fds = arg; /* [0] the report pipe, [1] the stage */
    if (st_thread_register(waiter_trace, "waiter", "drafter", -1, 0) < 0) _exit(24);
    int64_t before = st_now_ns();
    st_begin((st_stage)fds[1]);
    int64_t after = st_now_ns();
    child_send(fds[0], MSG_ACK, 0, (uint64_t)before);
    child_send(fds[0], MSG_ACK, 1, (uint64_t)after);
    for (;;) pause();
    return NULL;
}

static void body_long_wait(const char *path, int fd, void *arg)
{
    (void)arg;
    workload w;
    child_open(&w, fd, path, 250, 1);
    int wait_stage = st_stage_register(w.trace, "queue_wait", ST_WAIT_INPUT);
    if (wait_stage < 0) child_fail(fd, "register");
    if (st_install_signal_handlers(w.trace, 1)) child_fail(fd, "handlers");
    uint64_t i = 0;
    for (int k = 0; k < 100; k++) record_iteration(&w, i++);
    static int args[2];
    waiter_trace = w.trace;
    args[0] = fd;
    args[1] = wait_stage;
    pthread_t th;
    if (pthread_create(&th, NULL, waiter_main, args)) child_fail(fd, "pthread_create");
    for (;;) pause();
}

static void test_sigterm_keeps_open_wait(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "open-wait.sqlite");
    child c;
    start_child(&c, body_long_wait, path, NULL);
    msg m[2];
    for (int k = 0; k < 2; k++) assert_int_equal(read_msg(&c, &m[k], 10000), 1);
    int64_t begun_before = (int64_t)m[0].recorded, begun_after = (int64_t)m[1].recorded;
    usleep(WAIT_BEFORE_TERM_MS * 1000);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the child's trace clock maps onto it */
    int64_t term_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    int status = drain_and_reap(&c, 10000);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);

    st_reader *r = open_reader(path);
    assert_meta(r, "status", "interrupted");
    const st_thread_info *waiter = NULL;
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++)
        if (strcmp(st_reader_thread(r, i)->name, "waiter") == 0) waiter = st_reader_thread(r, i);
    assert_non_null(waiter);
    st_open_range open[ST_MAX_DEPTH];
    assert_int_equal(st_reader_unended(r, waiter->id, open), 1);
    assert_string_equal(st_reader_stage(r, open[0].stage)->name, "queue_wait");
    /* The child's clock is calibrated on its own (TSC): a few microseconds apart. */
    if (open[0].start_ns < begun_before - 50000 || open[0].start_ns > begun_after + 50000)
        fail_msg("the wait starts at %lld, begun between %lld and %lld", (long long)open[0].start_ns,
                 (long long)begun_before, (long long)begun_after);
    st_chunk_totals tot;
    assert_int_equal(st_reader_chunk_totals(r, &tot), ST_OK);
    if (tot.last_ns < term_ns - 50000)
        fail_msg("the trace ends at %lld, %lld ns before the signal: the wait's end is lost",
                 (long long)tot.last_ns, (long long)(term_ns - tot.last_ns));
    st_reader_close(r);

    char args[PATH_MAX + 64];
    snprintf(args, sizeof args, "summary --thread waiter --stage queue_wait --format csv '%s'", path);
    int rc;
    char *out = run_analyze(args, "open-wait.csv", &rc);
    assert_int_equal(rc, 0);
    /* file,scope,threads,thread,role,stage,kind,total_ms,...: the wait, from its start to the flush */
    static const char row[] = ",thread,1,waiter,drafter,queue_wait,wait_input,";
    const char *line = strstr(out, row);
    double total_ms = -1;
    if (!line || sscanf(line + strlen(row), "%lf", &total_ms) != 1)
        fail_msg("no queue_wait row for the waiter in:\n%s", out);
    double want_ms = (double)(term_ns - begun_after) / 1e6;
    if (total_ms < want_ms - 1 || total_ms > want_ms + 2000)
        fail_msg("summary gives the open wait %.3f ms, it was open %.3f ms before the signal:\n%s",
                 total_ms, want_ms, out);
    free(out);
}

/* The child spends its time inside registration calls, which hold the
 * trace's lock; the writer needs that lock to answer the handler's flush. */
static void body_register_loop(const char *path, int fd, void *arg)
{
    (void)arg;
    workload w;
    child_open(&w, fd, path, 250, 1);
    if (st_install_signal_handlers(w.trace, 1)) child_fail(fd, "handlers");
    uint64_t i = 0;
    for (int k = 0; k < 100; k++) record_iteration(&w, i++);
    child_send(fd, MSG_ACK, 0, i);
    for (long n = 0; n < 200000000L; n++) {
        st_stage_register(w.trace, "outer", ST_WORK);
        st_counter_register(w.trace, "seq", "");
    }
    _exit(22);
}

static void test_sigterm_during_registration(void **state)
{
    (void)state;
    for (int round = 0; round < 4; round++) {
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "sigterm-lock%d.sqlite", round);
        tmp_path(path, sizeof path, name);
        child c;
        start_child(&c, body_register_loop, path, NULL);
        wait_acks(&c, 1);
        usleep(20000 + round * 7000);
        int64_t t0 = now_ms();
        assert_int_equal(kill(c.pid, SIGTERM), 0);
        int status = drain_and_reap(&c, 10000);
        int64_t took = now_ms() - t0;
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGTERM);
        if (took > 3000)
            fail_msg("round %d: the child took %lld ms to die: its handler waited for a writer "
                     "blocked on the lock the child held",
                     round, (long long)took);
        check_prefix(path, "interrupted", 100);
    }
}

/* A busy thread keeps the (slowed) writer draining its full ring for tens
 * of milliseconds per pass, while the main thread registers a new stage and
 * counter for every range it records: by the time the writer reads the main
 * thread's ring, it holds ids registered after the pass began. */
static _Atomic int busy_ready;

static void *busy_main(void *arg)
{
    st_trace *trace = arg;
    int s = st_stage_register(trace, "busy", ST_WORK);
    if (st_thread_register(trace, "busy", "busy", -1, 0) < 0 || s < 0) return NULL;
    atomic_store(&busy_ready, 1); /* thread 0: the writer drains its ring first */
    for (;;) { /* until the parent kills the process */
        st_begin((st_stage)s);
        st_end((st_stage)s);
    }
    return NULL;
}

static void body_register_while_recording(const char *path, int fd, void *arg)
{
    (void)arg;
    alarm(30);
    st_options o;
    st_options_init(&o);
    o.path = path;
    o.nvtx = 0;
    o.commit_ms = 1;
    o.block_when_full = 1;
    o.ring_records = 16384;
    st_trace *trace;
    st__test_set_writer_delay(2000);
    if (st_open(&trace, &o)) child_fail(fd, "st_open");
    st__test_set_writer_delay(0);
    pthread_t busy;
    if (pthread_create(&busy, NULL, busy_main, trace)) child_fail(fd, "pthread_create");
    while (!atomic_load(&busy_ready)) usleep(100); /* busy is thread 0 and stage 0 */
    if (st_thread_register(trace, "main", "main", -1, 0) < 0) child_fail(fd, "st_thread_register");
    int64_t t0 = now_ms();
    uint32_t k = 1;
    int acked = 0;
    while (k < 4000) {
        char name[32];
        snprintf(name, sizeof name, "s%u", k);
        int s = st_stage_register(trace, name, ST_WORK);
        snprintf(name, sizeof name, "c%u", k);
        int c = st_counter_register(trace, name, "");
        if (s != (int)k || c != (int)k - 1) child_fail(fd, "register");
        st_begin((st_stage)s);
        st_counter_set((st_counter)c, k);
        st_end((st_stage)s);
        k++;
        usleep(200);
        if (!acked && now_ms() - t0 > 150) {
            child_send(fd, MSG_ACK, 0, k);
            acked = 1;
        }
    }
    pause();
    _exit(22);
}

static void test_sigkill_while_registering(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "sigkill-reg%d.sqlite", round);
        tmp_path(path, sizeof path, name);
        child c;
        start_child(&c, body_register_while_recording, path, NULL);
        wait_acks(&c, 1);
        usleep(20000 + 30000 * (useconds_t)round);
        assert_int_equal(kill(c.pid, SIGKILL), 0);
        int status = drain_and_reap(&c, 10000);
        assert_true(WIFSIGNALED(status));

        st_reader *r = open_reader(path);
        assert_meta(r, "status", "running");
        /* Whatever was committed decodes: each chunk names only stages and
         * counters the file defines; the main thread's k-th range has stage
         * s<k>, its k-th sample counter c<k> and value k. */
        const st_thread_info *mt = NULL;
        for (uint32_t i = 0; i < st_reader_n_threads(r); i++)
            if (strcmp(st_reader_thread(r, i)->name, "main") == 0) mt = st_reader_thread(r, i);
        st_range_iter *ri;
        assert_int_equal(st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX), ST_OK);
        st_range rg;
        int rc;
        uint32_t ranges = 0, busy_ranges = 0;
        while ((rc = st_range_iter_next(ri, &rg)) == 1) {
            if (rg.stage == 0) {
                busy_ranges++;
                continue;
            }
            assert_non_null(mt);
            assert_int_equal(rg.thread, mt->id);
            ranges++;
            assert_int_equal(rg.stage, ranges);
            char want[32];
            snprintf(want, sizeof want, "s%u", ranges);
            assert_string_equal(st_reader_stage(r, rg.stage)->name, want);
        }
        if (rc != 0) fail_msg("round %d: reading ranges after SIGKILL: %s", round, st_last_error());
        st_range_iter_close(ri);
        st_sample_iter *si;
        assert_int_equal(st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX), ST_OK);
        st_sample_row s;
        uint32_t samples = 0;
        while ((rc = st_sample_iter_next(si, &s)) == 1) {
            samples++;
            assert_int_equal(s.counter, samples - 1);
            assert_true(s.value == (double)samples);
            char want[32];
            snprintf(want, sizeof want, "c%u", samples);
            assert_string_equal(st_reader_counter(r, s.counter)->name, want);
        }
        if (rc != 0) fail_msg("round %d: reading samples after SIGKILL: %s", round, st_last_error());
        st_sample_iter_close(si);
        assert_true(busy_ranges > 0);
        assert_true(ranges > 0);
        assert_true(samples == ranges || samples == ranges + 1);
        st_reader_close(r);
    }
}

/* ---- a disk that fills up and frees again ---- */

#define FULL_STEPS 600
#define FULL_RANGES_PER_STEP 20

/* Mounts a 2 MiB tmpfs at tmp_dir/<name>; 0, or -1 when not permitted. */
static int mount_small_tmpfs(char *dir, size_t size, const char *name)
{
    if ((size_t)snprintf(dir, size, "%s/%s", tmp_dir, name) >= size) return -1;
    if (mkdir(dir, 0755) && errno != EEXIST) return -1;
    if (mount("tmpfs", dir, "tmpfs", 0, "size=2m") != 0) {
        printf("SKIP: cannot mount a tmpfs at %s (%s): the disk-full test needs root\n", dir, strerror(errno));
        rmdir(dir);
        return -1;
    }
    return 0;
}

/* Writes a file until the file system has no room left. */
static void fill_disk(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    static char block[4096];
    while (write(fd, block, sizeof block) > 0) {
    }
    assert_int_equal(errno, ENOSPC);
    close(fd);
}

/* Records FULL_STEPS steps of FULL_RANGES_PER_STEP ranges and one counter
 * sample each, filling the disk at step 150 and freeing it at step 450
 * (about 0.3 s later). */
/* What options.log received: levels and lines, in order. */
typedef struct log_seen {
    int n, levels[16];
    char text[8192];
} log_seen;

static void collect_log(int level, const char *msg, void *arg)
{
    log_seen *seen = arg;
    if (seen->n < 16) seen->levels[seen->n] = level;
    seen->n++;
    size_t used = strlen(seen->text);
    snprintf(seen->text + used, sizeof seen->text - used, "%d %s\n", level, msg);
}

static void record_through_full_disk(const char *dir, const char *path, uint32_t retry_mib, int *close_rc,
                                     log_seen *seen)
{
    st_options o;
    st_options_init(&o);
    if (seen) {
        o.log = collect_log;
        o.log_arg = seen;
    }
    o.path = path;
    o.nvtx = 0;
    o.commit_ms = 10;
    o.retry_mib = retry_mib;
    o.block_when_full = 1;
    st_trace *trace;
    assert_int_equal(st_open(&trace, &o), ST_OK);
    int work = st_stage_register(trace, "work", ST_WORK);
    int seq = st_counter_register(trace, "seq", "");
    assert_true(work >= 0 && seq >= 0);
    assert_int_equal(st_thread_register(trace, "main", "main", -1, 0), 0);
    char fill[PATH_MAX + 16];
    snprintf(fill, sizeof fill, "%s/fill", dir);
    st_step(0, 0);
    for (uint64_t step = 1; step <= FULL_STEPS; step++) {
        if (step == 150) fill_disk(fill);
        if (step == 450) assert_int_equal(unlink(fill), 0);
        for (int i = 0; i < FULL_RANGES_PER_STEP; i++) {
            st_begin((st_stage)work);
            st_end((st_stage)work);
        }
        st_counter_set((st_counter)seq, (double)step);
        st_step(step, 10);
        usleep(1000);
    }
    *close_rc = st_close(trace);
}


static void check_full_disk(uint32_t retry_mib)
{
    char dir[PATH_MAX];
    if (mount_small_tmpfs(dir, sizeof dir, retry_mib ? "full-retry" : "full-discard")) skip();
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/t.sqlite", dir);
    int close_rc = -1;
    /* With a log callback (retry_mib > 0) the messages reach it; without
     * one (retry_mib = 0) nothing is written to stderr. */
    log_seen seen = {0};
    char err_path[PATH_MAX + 64];
    snprintf(err_path, sizeof err_path, "%s/full-stderr-%u.out", tmp_dir, retry_mib);
    int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), saved_err = dup(2);
    assert_true(err_fd >= 0 && saved_err >= 0);
    fflush(stderr);
    assert_int_equal(dup2(err_fd, 2), 2);
    record_through_full_disk(dir, path, retry_mib, &close_rc, retry_mib ? &seen : NULL);
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    close(err_fd);
    size_t err_len = 0;
    char *err_text = read_file(err_path, &err_len);
    if (err_len) fail_msg("the library wrote to stderr:\n%s", err_text);
    free(err_text);
    if (retry_mib) {
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "2 trace '%s': cannot write (", path);
        if (strncmp(seen.text, want, strlen(want)) || !strstr(seen.text, "); keeping the records in memory (up to 64 MiB) and retrying at each commit\n"))
            fail_msg("options.log did not get the disk-full warning first:\n%s", seen.text);
        snprintf(want, sizeof want, "3 trace '%s': written again after ", path);
        if (!strstr(seen.text, want) || !strstr(seen.text, "; nothing lost\n"))
            fail_msg("options.log did not get the recovery:\n%s", seen.text);
        assert_int_equal(seen.n, 2);
        assert_int_equal(seen.levels[0], ST_LOG_WARNING);
        assert_int_equal(seen.levels[1], ST_LOG_INFO);
    }
    assert_int_equal(close_rc, ST_OK);

    st_reader *r = open_reader(path);
    sqlite3 *db = st_reader_db(r);
    assert_meta(r, "status", "complete");
    /* The disk did fill: some commit failed. */
    assert_true(sql_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'failed_commits'") > 0);
    /* Step marks are never given up. */
    assert_int_equal(st_reader_n_steps(r), FULL_STEPS + 1);
    int64_t ranges = sql_int(db, "SELECT coalesce(sum(n_ranges), 0) FROM range_chunks");
    int64_t events = sql_int(db, "SELECT coalesce(sum(n_events), 0) FROM range_chunks");
    int64_t samples = sql_int(db, "SELECT coalesce(sum(n_samples), 0) FROM counter_chunks");
    int has_lost = sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'lost_spans'") > 0;
    if (retry_mib) {
        /* Kept in memory and written once the disk had room: nothing lost. */
        assert_int_equal(ranges, FULL_STEPS * FULL_RANGES_PER_STEP);
        assert_int_equal(samples, FULL_STEPS);
        assert_false(has_lost);
        assert_meta(r, "lost_events", NULL);
    } else {
        /* Nothing kept: what could not be written is recorded, exactly. */
        assert_true(has_lost);
        int64_t lost_events = sql_int(db, "SELECT sum(n_records) FROM lost_spans WHERE source = 'ranges'");
        int64_t lost_samples = sql_int(db, "SELECT coalesce(sum(n_records), 0) FROM lost_spans WHERE source = 'counters'");
        assert_true(lost_events > 0);
        assert_int_equal(events + lost_events, 2 * FULL_STEPS * FULL_RANGES_PER_STEP);
        assert_int_equal(samples + lost_samples, FULL_STEPS);
        assert_int_equal(sql_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'lost_events'"),
                         lost_events + lost_samples);
        assert_int_equal(sql_int(db, "SELECT count(*) FROM lost_spans WHERE thread IS NOT 0 OR t0_ns > t1_ns"), 0);
        /* The spans lie between the marks of steps 150 and 450 or so. */
        int64_t s100 = sql_int(db, "SELECT ts_ns FROM steps WHERE step = 100");
        int64_t s500 = sql_int(db, "SELECT ts_ns FROM steps WHERE step = 500");
        assert_true(sql_int(db, "SELECT min(t0_ns) FROM lost_spans") > s100);
        assert_true(sql_int(db, "SELECT max(t1_ns) FROM lost_spans") < s500);
    }
    st_reader_close(r);

    int status;
    char args[PATH_MAX + 64];
    snprintf(args, sizeof args, "info %s", path);
    char *info = run_analyze(args, "full-info.out", &status);
    assert_int_equal(status, 0);
    snprintf(args, sizeof args, "intervals --every 100 %s", path);
    char *intervals = run_analyze(args, "full-intervals.out", &status);
    assert_int_equal(status, 0);
    if (retry_mib) {
        if (!strstr(info, "\n  failed commits: ") || !strstr(info, "(retried: nothing lost)"))
            fail_msg("analyze info does not show the retried commits:\n%s", info);
        assert_null(strstr(intervals, "lost"));
    } else {
        if (!strstr(info, "\n  lost events: ")) fail_msg("analyze info does not show the loss:\n%s", info);
        if (!strstr(intervals, "analyze: warning: ") || !strstr(intervals, "events were lost"))
            fail_msg("analyze intervals does not warn of the loss:\n%s", intervals);
        if (!strstr(intervals, "\n  lost: ")) fail_msg("analyze intervals does not mark the window:\n%s", intervals);
    }
    free(info);
    free(intervals);
    umount2(dir, MNT_DETACH);
    rmdir(dir);
}

static void test_disk_full_retried(void **state)
{
    (void)state;
    check_full_disk(64);
}

static void test_disk_full_recorded_as_lost(void **state)
{
    (void)state;
    check_full_disk(0);
}

int main(void)
{
    if (make_tmp_dir("test_faults")) return 1;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_keeps_flushed_batches),
        cmocka_unit_test(test_sigterm_flushes_and_dies),
        cmocka_unit_test(test_sigint_keeps_running_then_closes),
        cmocka_unit_test(test_sigterm_during_registration),
        cmocka_unit_test(test_ignored_signals_stay_ignored),
        cmocka_unit_test(test_sigterm_keeps_open_wait),
        cmocka_unit_test(test_sigkill_while_registering),
        cmocka_unit_test(test_disk_full_retried),
        cmocka_unit_test(test_disk_full_recorded_as_lost),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
