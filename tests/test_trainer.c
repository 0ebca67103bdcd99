/* test_trainer.c: tests of the drafter trainer (trainer/).
 *
 * Unit tests of the pieces the trainer is built from (flag parsing and presets, the blocking
 * queue and barrier, the token sources) run in-process: their sources are compiled into this
 * test. Everything else runs the real program, $ST_BUILD/trainer (default build/trainer), on
 * the CPU backend and checks what it printed and the trace it wrote, through the reader:
 *  - end to end, tiny preset, seed 1234, async postprocess, 2 drafters, 50 steps: the mean
 *    loss of the last 10 steps is at least 0.5 below that of the first 10 (measured: 4.57 ->
 *    3.60; single-drafter runs on seeds 1-5 all fall by >= 0.85) and the top-1 accuracy ends
 *    above 0.1 (chance is 1/256); the trace is complete and holds every role's threads with
 *    their stages, of the right kinds; every step is marked with the tokens of both drafters;
 *    the queue_depth samples stay within --queue-depth; the profile lines printed are
 *    byte-identical to the windows recomputed from the trace (st_reader_windows +
 *    st_window_format). Sanitizer builds instrument every load and store of the kernels
 *    (TSan: ~150x slower, 80 s for this run), so there the same run and the same checks use
 *    tiny with --dim 32 --ffn 64 --seq-len 64 --batch 1 (measured: 5.13 -> 3.99, ~8 s);
 *  - pipeline balance, on a micro model so that only the delay knobs matter: with a slow
 *    drafter the queue fills to its depth (never beyond) and the target spends most of its
 *    time in queue_put; with a slow target the drafters spend most of theirs in queue_wait;
 *    device lists that overlap between roles;
 *  - SIGINT: the run stops, exit status 130, the trace says status = interrupted and holds
 *    the steps done so far;
 *  - the other variants (MLP-only drafter, sliding window with two sync targets, --data text
 *    file, the default trace path under runs/) run with finite, sane losses;
 *  - --trace DIR/ in one process writes DIR/rank0.sqlite (rank 0 of 1); over rank files of
 *    an older, larger run the run stops without --overwrite and removes (and names) them
 *    with it, never a file of that name that is not a trace or that a process is writing;
 *  - bad flags: each gives exit status 2, nothing on stdout, exactly one line on stderr, and
 *    leaves no trace file behind; so do the flags of a multi-process run in one process, and
 *    torchrun's environment with RANK=1.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "st_intervals.h"
#include "st_reader.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED_BUILD 1
#endif
#endif

#include "../trainer/config.h"
#include "../trainer/data.h"
#include "../trainer/queue.h"
#include "../trainer/alternate.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static int setup_paths(void **state)
{
    (void)state;
    return (find_trainer() || make_tmp_dir("test_trainer")) ? -1 : 0;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Max and count of the samples of a counter (all threads). */
static void counter_stats(st_reader *r, const char *name, double *max, long *count)
{
    int id = counter_id(r, name);
    assert_true(id >= 0);
    st_sample_iter *it;
    assert_int_equal(st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_sample_row s;
    int rc;
    *max = -1.0;
    *count = 0;
    while ((rc = st_sample_iter_next(it, &s)) == 1) {
        if ((int)s.counter != id)
            continue;
        assert_true(s.value >= 0.0);
        if (s.value > *max)
            *max = s.value;
        ++*count;
    }
    assert_int_equal(rc, 0);
    st_sample_iter_close(it);
}

/* Share of a role's wall time spent in a stage, over one window spanning the whole run. */
typedef struct share_query {
    const char *role, *stage;
    double share; /* mean over the role's threads */
    int threads;
} share_query;

static void share_cb(const struct st_window *w, void *arg)
{
    share_query *q = arg;
    int stage = -1;
    for (uint32_t i = 0; i < w->n_stages; i++)
        if (w->stage_names[i] && !strcmp(w->stage_names[i], q->stage))
            stage = (int)i;
    double span = (double)(w->t1_ns - w->t0_ns);
    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *t = &w->threads[i];
        if (!t->role || strcmp(t->role, q->role))
            continue;
        q->threads++;
        if (stage >= 0)
            q->share += (double)t->stage_ns[stage] / span;
    }
    if (q->threads)
        q->share /= q->threads;
}

static double role_share(st_reader *r, const char *role, const char *stage, uint32_t steps)
{
    share_query q = {role, stage, 0.0, 0};
    assert_int_equal(st_reader_windows(r, steps, share_cb, &q), ST_OK);
    assert_true(q.threads > 0);
    return q.share;
}

/* A model small enough that compute is negligible next to the delay knobs, even under
 * sanitizers. */
#define MICRO_MODEL                                                                            \
    "--vocab", "64", "--dim", "16", "--heads", "2", "--ffn", "16", "--target-layers", "1",    \
        "--seq-len", "32", "--batch", "1", "--block-size", "4", "--anchors", "2"

/* ---- unit tests: config ------------------------------------------------------------------ */

static int parse_args(tr_config *cfg, const char *const *args, char *err, size_t n)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"trainer";
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    FILE *devnull = fopen("/dev/null", "w");
    int rc = tr_config_parse(cfg, argc, argv, devnull, err, n);
    fclose(devnull);
    return rc;
}

static void test_config_presets_and_overrides(void **state)
{
    (void)state;
    tr_config cfg;
    char err[256];
    const char *none[] = {NULL};
    assert_int_equal(parse_args(&cfg, none, err, sizeof err), TR_CONFIG_OK);
    assert_string_equal(cfg.preset, "tiny");
    assert_int_equal(cfg.vocab, 256);
    assert_int_equal(cfg.dim, 64);
    assert_int_equal(cfg.n_taps, 2);
    assert_int_equal(cfg.taps[1], 1);
    assert_int_equal(cfg.queue_depth, 60);
    assert_int_equal(cfg.device, TR_DEVICE_CPU);

    /* flags override the preset wherever --preset appears */
    const char *a[] = {"--dim", "32", "--preset", "h200", "--queue-depth", "5", NULL};
    assert_int_equal(parse_args(&cfg, a, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.dim, 32);
    assert_int_equal(cfg.vocab, 32000);
    assert_int_equal(cfg.seq_len, 2048);
    assert_int_equal(cfg.queue_depth, 5);
    int h200_taps[] = {0, 5, 11, 17, 23};
    assert_int_equal(cfg.n_taps, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(cfg.taps[i], h200_taps[i]);

    /* default taps follow --target-layers; explicit ones are kept */
    const char *b[] = {"--target-layers", "1", NULL};
    assert_int_equal(parse_args(&cfg, b, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.n_taps, 1);
    assert_int_equal(cfg.taps[0], 0);
    const char *c[] = {"--target-layers", "6", "--taps", "1,4", "--drafter-attention", "off", NULL};
    assert_int_equal(parse_args(&cfg, c, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.n_taps, 2);
    assert_int_equal(cfg.taps[1], 4);
    assert_int_equal(cfg.drafter_attention, 0);
}

static void test_config_devices(void **state)
{
    (void)state;
    tr_config cfg;
    char err[256];
    const char *a[] = {"--target-gpus", "3", "--drafter-gpus", "2,5", NULL};
    assert_int_equal(parse_args(&cfg, a, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.n_targets, 3);
    assert_int_equal(cfg.target_devices[2], 2);
    assert_int_equal(cfg.n_drafters, 2);
    assert_int_equal(cfg.drafter_devices[0], 2);
    assert_int_equal(cfg.drafter_devices[1], 5);
    const char *b[] = {"--target-gpus", "4,", NULL}; /* a one-device list */
    assert_int_equal(parse_args(&cfg, b, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.n_targets, 1);
    assert_int_equal(cfg.target_devices[0], 4);
    /* a device may hold several threads of a role */
    const char *c[] = {"--drafter-gpus", "1,1", "--target-gpus", "0,0,1", NULL};
    assert_int_equal(parse_args(&cfg, c, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.n_drafters, 2);
    assert_int_equal(cfg.drafter_devices[0], 1);
    assert_int_equal(cfg.drafter_devices[1], 1);
    assert_int_equal(cfg.n_targets, 3);
    assert_int_equal(cfg.target_devices[1], 0);
    assert_int_equal(cfg.target_devices[2], 1);
    /* a tap may not */
    const char *t[] = {"--taps", "1,3,1", NULL};
    assert_int_equal(parse_args(&cfg, t, err, sizeof err), TR_CONFIG_ERROR);
    assert_string_equal(err, "--taps lists 1 twice");
}

static void test_config_trace_ring(void **state)
{
    (void)state;
    tr_config cfg;
    char err[256] = "";
    const char *const none[] = {NULL};
    assert_int_equal(parse_args(&cfg, none, err, sizeof err), 0);
    assert_int_equal(cfg.ring_records, 0); /* the tracer's default */
    assert_int_equal(cfg.block_when_full, 0);
    const char *const args[] = {"--ring-records", "1048576", "--block-when-full", NULL};
    assert_int_equal(parse_args(&cfg, args, err, sizeof err), 0);
    assert_int_equal(cfg.ring_records, 1048576);
    assert_int_equal(cfg.block_when_full, 1);
}

static void test_config_errors(void **state)
{
    (void)state;
    static const struct {
        const char *args[10];
        const char *message_part;
    } cases[] = {
        {{"--steps", "0"}, "--steps expects an integer in 1.."},
        {{"--gpu-alternate", "50", "--trace", "x.sqlite"}, "it needs --device cuda"},
        {{"--device", "cuda", "--gpu-alternate", "50"}, "a trace (--trace or --profile-interval)"},
        {{"--device", "cuda", "--gpu-alternate", "50", "--trace", "x.sqlite", "--trace-gpu", "off"},
         "--trace-gpu on"},
        {{"--device", "cuda", "--gpu-alternate", "20", "--trace", "x.sqlite", "--alternate-settle", "20"},
         "--alternate-settle 20 must be less than --gpu-alternate 20"},
        {{"--gpu-alternate", "-1"}, "--gpu-alternate expects an integer in 0..1000000"},
        {{"--gpu-every", "0"}, "--gpu-every expects an integer in 1..1000000"},
        {{"--gpu-every", "1000001"}, "--gpu-every expects an integer in 1..1000000"},
        {{"--gpu-every", "10", "--trace", "x.sqlite"}, "--gpu-every samples the GPU recording by steps: it needs --device cuda"},
        {{"--device", "cuda", "--gpu-every", "10", "--trace", "x.sqlite", "--trace-gpu", "off"}, "--trace-gpu on"},
        {{"--device", "cuda", "--gpu-every", "10"}, "a trace (--trace or --profile-interval)"},
        {{"--taps", "0,2"}, "--taps: layer 2 is out of range"},
        {{"--dim", "100", "--heads", "3"}, "not a multiple of --heads"},
        {{"--dim", "12", "--heads", "4"}, "must be even"},
        {{"--block-size", "128"}, "must be smaller than --seq-len"},
        {{"--lr", "0"}, "--lr expects a number"},
        {{"--clip", "nan"}, "--clip expects a number"},
        {{"--seed", "-1"}, "--seed expects an unsigned integer"},
        {{"--drafter-attention", "maybe"}, "expects off or on"},
        {{"--data", "x", "--vocab", "100"}, "at least 256"},
        {{"--ring-records", "1000"}, "--ring-records expects a power of two"},
        {{"--ring-records", "32"}, "--ring-records expects an integer in 64..268435456"},
        {{"--ring-records", "536870912"}, "--ring-records expects an integer in 64..268435456"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tr_config cfg;
        char err[256] = "";
        assert_int_equal(parse_args(&cfg, cases[i].args, err, sizeof err), TR_CONFIG_ERROR);
        if (!strstr(err, cases[i].message_part)) {
            print_error("case %zu: '%s' lacks '%s'\n", i, err, cases[i].message_part);
            fail();
        }
        assert_null(strchr(err, '\n'));
    }
}

/* --gpu-every N: the spec st_gpu_start_with gets, from STAGETRACE_GPU_RECORDS or the default. */
static void test_gpu_every_spec(void **state)
{
    (void)state;
    tr_config cfg;
    char err[256];
    const char *const none[] = {NULL};
    assert_int_equal(parse_args(&cfg, none, err, sizeof err), 0);
    char buf[400];
    unsetenv("STAGETRACE_GPU_RECORDS");
    assert_null(tr_gpu_records(&cfg, buf, sizeof buf));
    cfg.gpu_every = 10;
    assert_string_equal(tr_gpu_records(&cfg, buf, sizeof buf), "every_steps=10");
    setenv("STAGETRACE_GPU_RECORDS", "kernel,buffer_kb=64", 1);
    assert_string_equal(tr_gpu_records(&cfg, buf, sizeof buf), "kernel,buffer_kb=64,every_steps=10");
    setenv("STAGETRACE_GPU_RECORDS", "", 1);
    assert_string_equal(tr_gpu_records(&cfg, buf, sizeof buf), "every_steps=10");
    unsetenv("STAGETRACE_GPU_RECORDS");
    const char *const args[] = {"--device", "cuda", "--gpu-every", "7", "--trace", "x.sqlite", NULL};
    assert_int_equal(parse_args(&cfg, args, err, sizeof err), 0);
    assert_int_equal(cfg.gpu_every, 7);
}

/* --gpu-alternate's blocks on a made-up clock: a step takes 1.05 s recorded and 1.00 s paused
 * (the first `settle` steps of every block 7 s, left out), 0.5 and 0.4 s of CPU: the pairs'
 * ratio is 1 / 1.05 exactly, whatever the block's order. */
static void test_gpu_alternate(void **state)
{
    (void)state;
    enum { N = 10, SETTLE = 3, STEPS = 9 * N };
    tr_alternate a;
    tr_alternate_init(&a, N, SETTLE);
    double now = 0, cpu = 0;
    int recording = 1, actions = 0;
    for (long step = 1; step <= STEPS; step++) {
        long in_block = (step - 1) % N; /* step `step` ran during block (step - 1) / N */
        now += in_block < SETTLE ? 7.0 : recording ? 1.05 : 1.00;
        cpu += in_block < SETTLE ? 3.0 : recording ? 0.5 : 0.4;
        int act = tr_alternate_at_step(&a, step, now, cpu);
        assert_true(act >= 0);
        if (act == TR_ALT_PAUSE) { assert_true(recording); recording = 0; actions++; }
        if (act == TR_ALT_RESUME) { assert_false(recording); recording = 1; actions++; }
        /* the state from the mark of step k*N on is block k's */
        if (step % N == 0) assert_int_equal(recording, tr_alternate_on(step / N));
    }
    /* blocks 0 (warm-up) and 1 on, then off off on on off off on on: four switches by step 80 */
    assert_int_equal(actions, 4);
    static const int want_on[] = {1, 1, 0, 0, 1, 1, 0, 0, 1};
    for (int k = 0; k < 9; k++) assert_int_equal(tr_alternate_on(k), want_on[k]);
    assert_int_equal(a.n_blocks, 8); /* blocks 1..8 timed; block 9 never ended */
    char line[512];
    assert_int_equal(tr_alternate_summary(&a, line, sizeof line), 4);
    printf("%s\n", line);
    assert_non_null(strstr(line, "4 block pairs of 10 steps (7 timed)"));
    assert_non_null(strstr(line, "mean 0.9524, 95% interval [0.9524, 0.9524], median 0.9524"));
    assert_non_null(strstr(line, "CPU ms per step recorded 500.000, paused 400.000"));
    tr_alternate_free(&a);
    tr_alternate_init(&a, N, SETTLE);
    for (long step = 1; step <= 2 * N; step++) tr_alternate_at_step(&a, step, (double)step, 0);
    assert_int_equal(tr_alternate_summary(&a, line, sizeof line), 0);
    assert_non_null(strstr(line, "0 block pairs: too few for an interval"));
    tr_alternate_free(&a);
}

/* ---- unit tests: queue and barrier ------------------------------------------------------- */

#define QUEUE_ITEMS 20000
#define QUEUE_THREADS 3

static tr_queue test_queue;
static long consumed_sum[QUEUE_THREADS];

/* cmocka's asserts must stay on the main thread: workers return what they saw */
static void *queue_producer(void *arg)
{
    long base = (long)(intptr_t)arg * QUEUE_ITEMS, refused = 0;
    for (long i = 1; i <= QUEUE_ITEMS; i++)
        refused += !tr_queue_put(&test_queue, (void *)(intptr_t)(base + i));
    return (void *)(intptr_t)refused;
}

static void *queue_consumer(void *arg)
{
    long sum = 0;
    void *item;
    while ((item = tr_queue_pop(&test_queue)) != (void *)(intptr_t)-1)
        sum += (long)(intptr_t)item;
    consumed_sum[(intptr_t)arg] = sum;
    return NULL;
}

static void test_queue_mpmc(void **state)
{
    (void)state;
    assert_int_equal(tr_queue_init(&test_queue, 3, -1), 0);
    pthread_t prod[QUEUE_THREADS], cons[QUEUE_THREADS];
    for (intptr_t i = 0; i < QUEUE_THREADS; i++) {
        pthread_create(&prod[i], NULL, queue_producer, (void *)i);
        pthread_create(&cons[i], NULL, queue_consumer, (void *)i);
    }
    for (int i = 0; i < QUEUE_THREADS; i++) {
        void *refused;
        pthread_join(prod[i], &refused);
        assert_int_equal((intptr_t)refused, 0);
    }
    for (int i = 0; i < QUEUE_THREADS; i++) /* one end marker per consumer */
        assert_true(tr_queue_put(&test_queue, (void *)(intptr_t)-1));
    long total = 0;
    for (int i = 0; i < QUEUE_THREADS; i++) {
        pthread_join(cons[i], NULL);
        total += consumed_sum[i];
    }
    long n = (long)QUEUE_THREADS * QUEUE_ITEMS;
    assert_int_equal(total, n * (n + 1) / 2);
    assert_int_equal(tr_queue_depth(&test_queue), 0);
    tr_queue_destroy(&test_queue);
}

static void *pop_blocked(void *arg)
{
    return tr_queue_pop(arg);
}

static void test_queue_close(void **state)
{
    (void)state;
    tr_queue q;
    assert_int_equal(tr_queue_init(&q, 1, -1), 0);
    pthread_t t;
    pthread_create(&t, NULL, pop_blocked, &q); /* blocks: the queue is empty */
    struct timespec pause = {0, 20 * 1000000L};
    nanosleep(&pause, NULL);
    tr_queue_close(&q);
    void *got = (void *)1;
    pthread_join(t, &got);
    assert_null(got);
    assert_int_equal(tr_queue_put(&q, (void *)1), 0);
    assert_null(tr_queue_pop(&q));
    tr_queue_destroy(&q);
}

static tr_barrier test_barrier;
static void *barrier_waiter(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)tr_barrier_wait(&test_barrier);
}

static void test_barrier_wait_and_abort(void **state)
{
    (void)state;
    tr_barrier_init(&test_barrier, 2);
    pthread_t t;
    for (int round = 0; round < 3; round++) { /* reusable */
        pthread_create(&t, NULL, barrier_waiter, NULL);
        assert_int_equal(tr_barrier_wait(&test_barrier), 0);
        void *rc;
        pthread_join(t, &rc);
        assert_int_equal((intptr_t)rc, 0);
    }
    pthread_create(&t, NULL, barrier_waiter, NULL); /* waits for a partner that never comes */
    struct timespec pause = {0, 20 * 1000000L};
    nanosleep(&pause, NULL);
    tr_barrier_abort(&test_barrier);
    void *rc;
    pthread_join(t, &rc);
    assert_int_equal((intptr_t)rc, -1);
    assert_int_equal(tr_barrier_wait(&test_barrier), -1);
    tr_barrier_destroy(&test_barrier);
}

/* ---- unit tests: data -------------------------------------------------------------------- */

static void check_documents(const tr_batch *b)
{
    size_t n = (size_t)b->n_seqs * b->seq_len;
    for (size_t i = 1; i < n; i++) {
        if (b->doc_ids[i] == b->doc_ids[i - 1])
            assert_int_equal(b->positions[i], b->positions[i - 1] + 1);
        else {
            assert_int_equal(b->doc_ids[i], b->doc_ids[i - 1] + 1);
            assert_int_equal(b->positions[i], 0);
        }
    }
}

static void test_data_synthetic(void **state)
{
    (void)state;
    tr_config cfg;
    char err[256];
    const char *none[] = {NULL};
    assert_int_equal(parse_args(&cfg, none, err, sizeof err), TR_CONFIG_OK);
    int n = cfg.batch * cfg.seq_len;
    int32_t *mem = malloc(6 * (size_t)n * sizeof(int32_t));
    tr_batch a = {cfg.batch, cfg.seq_len, 0, mem, mem + n, mem + 2 * n};
    tr_batch b = {cfg.batch, cfg.seq_len, 0, mem + 3 * n, mem + 4 * n, mem + 5 * n};
    tr_data *d1, *d2;
    assert_int_equal(tr_data_open(&d1, &cfg, err, sizeof err), 0);
    assert_int_equal(tr_data_open(&d2, &cfg, err, sizeof err), 0);
    int follows_first = 0, transitions = 0, max_token = 0;
    for (int it = 0; it < 20; it++) {
        tr_data_next(d1, &a);
        tr_data_next(d2, &b);
        /* same seed, same stream */
        assert_memory_equal(a.tokens, b.tokens, (size_t)n * 3 * sizeof(int32_t));
        check_documents(&a);
        for (int i = 1; i < n; i++) {
            if (a.tokens[i] > max_token)
                max_token = a.tokens[i];
            if (a.doc_ids[i] != a.doc_ids[i - 1])
                continue;
            transitions++;
            follows_first += a.tokens[i] == tr_data_successor(d1, a.tokens[i - 1], 0);
        }
    }
    /* the chain's first successor is taken ~90% of the time (plus chance hits) */
    double p = (double)follows_first / transitions;
    assert_true(p > 0.85 && p < 0.95);
    assert_true(max_token < 64); /* 64 active tokens of 256 */
    tr_data_close(d1);
    tr_data_close(d2);
    free(mem);
}

static void test_data_file(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "text.txt");
    FILE *f = fopen(path, "w");
    fputs("ab\n\ncd", f);
    fclose(f);
    tr_config cfg;
    char err[256];
    const char *args[] = {"--data", path, NULL};
    assert_int_equal(parse_args(&cfg, args, err, sizeof err), TR_CONFIG_OK);
    int32_t tok[8], doc[8], pos[8];
    tr_batch b = {1, 8, 0, tok, doc, pos};
    tr_data *d;
    assert_int_equal(tr_data_open(&d, &cfg, err, sizeof err), 0);
    tr_data_next(d, &b);
    /* "ab\n" | "cd" | (wraps) "ab\n" */
    const int32_t want_tok[8] = {'a', 'b', '\n', 'c', 'd', 'a', 'b', '\n'};
    const int32_t want_doc[8] = {0, 0, 0, 1, 1, 2, 2, 2};
    const int32_t want_pos[8] = {0, 1, 2, 0, 1, 0, 1, 2};
    assert_memory_equal(tok, want_tok, sizeof tok);
    assert_memory_equal(doc, want_doc, sizeof doc);
    assert_memory_equal(pos, want_pos, sizeof pos);
    tr_data_close(d);

    const char *missing[] = {"--data", "/nonexistent/file.txt", NULL};
    assert_int_equal(parse_args(&cfg, missing, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(tr_data_open(&d, &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* ---- end to end -------------------------------------------------------------------------- */

static void test_end_to_end(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "e2e.sqlite");
    const char *args[] = {"--preset", "tiny", "--seed", "1234", "--steps", "50",
                          "--log-every", "10", "--metrics-every", "10", "--profile-interval",
                          "10", "--postprocess", "async", "--drafter-gpus", "2", "--trace",
                          trace,
#ifdef SANITIZED_BUILD
                          "--dim", "32", "--ffn", "64", "--seq-len", "64", "--batch", "1",
#endif
                          NULL};
#ifdef SANITIZED_BUILD
    const uint64_t tokens_per_step = 2 * 1 * 64;
#else
    const uint64_t tokens_per_step = 2 * 2 * 128;
#endif
    trainer_result res = run_trainer(args, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    assert_string_equal(res.err, "");

    /* log lines, and the loss falling */
    trainer_log_line lines[16];
    int n = parse_trainer_log(res.out, lines, 16);
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) {
        assert_int_equal(lines[i].step, 10 * (i + 1));
        assert_true(lines[i].queue >= 0 && lines[i].queue <= 60);
        assert_int_equal(lines[i].depth, 60);
        assert_true(lines[i].tok_s > 0);
    }
    printf("  loss %.3f -> %.3f, accuracy %.3f -> %.3f\n", lines[0].loss, lines[n - 1].loss,
           lines[0].acc, lines[n - 1].acc);
    assert_true(lines[n - 1].loss < lines[0].loss - 0.5);
    assert_true(lines[n - 1].acc > 0.1);

    st_reader *r = open_complete_trace(trace);

    /* every role's threads, with their stages */
    static const struct {
        const char *thread, *role;
        const char *stages[8];
    } expect[] = {
        {"main", "main", {"step_wait"}},
        {"loader", "loader", {"load", "queue_put"}},
        {"target0", "target", {"batch_wait", "handoff", "forward"}},
        {"post0", "post", {"handoff_wait", "postprocess", "queue_put"}},
        {"drafter0", "drafter",
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer"}},
        {"drafter1", "drafter",
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer"}},
    };
    assert_int_equal(st_reader_n_threads(r), sizeof expect / sizeof expect[0]);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const st_thread_info *t = thread_named(r, expect[i].thread);
        if (!t) {
            print_error("no thread %s in the trace\n", expect[i].thread);
            fail();
        }
        assert_string_equal(t->role, expect[i].role);
        for (int k = 0; k < 8 && expect[i].stages[k]; k++) {
            int id = stage_id(r, expect[i].stages[k]);
            assert_true(id >= 0);
            long count = count_ranges(r, t->id, id);
            if (count < 1) {
                print_error("thread %s has no %s range\n", t->name, expect[i].stages[k]);
                fail();
            }
            /* the drafters' stages run once per step */
            if (!strcmp(expect[i].role, "drafter") && strcmp(expect[i].stages[k], "queue_wait"))
                assert_int_equal(count, 50);
        }
    }
    static const struct {
        const char *name;
        st_kind kind;
    } kinds[] = {
        {"load", ST_WORK}, {"forward", ST_WORK}, {"postprocess", ST_WORK}, {"loss", ST_WORK},
        {"backward", ST_WORK}, {"optimizer", ST_WORK}, {"batch_wait", ST_WAIT_INPUT},
        {"queue_wait", ST_WAIT_INPUT}, {"queue_put", ST_WAIT_OUTPUT}, {"allreduce", ST_COMM},
        {"h2d", ST_COPY},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        assert_int_equal(st_reader_stage(r, (uint32_t)stage_id(r, kinds[i].name))->kind,
                         kinds[i].kind);

    /* steps 0..50, each with the tokens of both drafters (2 x batch x seq-len) */
    assert_int_equal(st_reader_n_steps(r), 51);
    for (uint32_t i = 0; i <= 50; i++) {
        assert_int_equal(st_reader_step(r, i)->step, i);
        assert_int_equal(st_reader_step(r, i)->tokens, i ? tokens_per_step : 0);
    }

    double max_depth;
    long samples;
    counter_stats(r, "queue_depth", &max_depth, &samples);
    assert_true(samples >= 2 * 50); /* a put and a pop per item at least */
    assert_true(max_depth <= 60.0);

    /* the printed profile lines are exactly the windows recomputed from the trace */
    text_buf recomputed = {0};
    assert_int_equal(st_reader_windows(r, 10, append_window, &recomputed), ST_OK);
    char *printed = profile_text(res.out);
    assert_non_null(recomputed.data);
    assert_int_equal(count_lines(recomputed.data) > 5 * 6, 1);
    assert_string_equal(printed, recomputed.data);
    free(printed);
    free(recomputed.data);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* Slow drafter: the queue fills to its depth and the target waits in queue_put. Target and
 * drafter sets overlap (device 1 has both). */
static void test_slow_drafter(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "slow_drafter.sqlite");
    const char *args[] = {MICRO_MODEL, "--steps", "16", "--queue-depth", "3",
                          "--drafter-delay-us", "40000", "--target-gpus", "0,1",
                          "--drafter-gpus", "1,2", "--trace", trace, NULL};
    trainer_result res = run_trainer(args, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    st_reader *r = open_reader(trace);
    assert_non_null(thread_named(r, "target0"));
    assert_non_null(thread_named(r, "target1"));
    assert_non_null(thread_named(r, "drafter1"));
    assert_non_null(thread_named(r, "drafter2"));
    double max_depth;
    long samples;
    counter_stats(r, "queue_depth", &max_depth, &samples);
    assert_true(max_depth == 3.0); /* full, never beyond */
    double put = role_share(r, "target", "queue_put", 16);
    double fwd = role_share(r, "drafter", "forward", 16);
    printf("  slow drafter: target queue_put %.0f%%, drafter forward %.0f%%\n", 100 * put,
           100 * fwd);
    assert_true(put > 0.5);
    assert_true(fwd > 0.5);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* Several threads of a role on one device: named by device and order. */
static void test_shared_device_names(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "shared_names.sqlite");
    const char *args[] = {MICRO_MODEL, "--steps", "4", "--postprocess", "async",
                          "--target-gpus", "0,0", "--drafter-gpus", "1,1,2", "--trace", trace,
                          NULL};
    trainer_result res = run_trainer(args, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    st_reader *r = open_reader(trace);
    static const struct {
        const char *name, *role;
        int device;
    } expect[] = {{"target0.0", "target", 0}, {"target0.1", "target", 0},
                  {"post0.0", "post", 0},     {"post0.1", "post", 0},
                  {"drafter1.0", "drafter", 1}, {"drafter1.1", "drafter", 1},
                  {"drafter2", "drafter", 2}};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const st_thread_info *t = thread_named(r, expect[i].name);
        if (!t)
            print_error("no thread %s\n", expect[i].name);
        assert_non_null(t);
        assert_string_equal(t->role, expect[i].role);
        assert_int_equal(t->device, expect[i].device);
    }
    assert_null(thread_named(r, "target0"));
    assert_null(thread_named(r, "drafter1"));
    st_reader_close(r);
    free_trainer_result(&res);
}

/* Slow target: the drafters wait in queue_wait; the queue stays nearly empty. */
static void test_slow_target(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "slow_target.sqlite");
    const char *args[] = {MICRO_MODEL, "--steps", "12", "--queue-depth", "3",
                          "--target-delay-us", "50000", "--trace", trace, NULL};
    trainer_result res = run_trainer(args, NULL);
    assert_int_equal(res.status, 0);
    st_reader *r = open_reader(trace);
    double wait = role_share(r, "drafter", "queue_wait", 12);
    double fwd = role_share(r, "target", "forward", 12);
    printf("  slow target: drafter queue_wait %.0f%%, target forward %.0f%%\n", 100 * wait,
           100 * fwd);
    assert_true(wait > 0.5);
    assert_true(fwd > 0.5);
    double max_depth;
    long samples;
    counter_stats(r, "queue_depth", &max_depth, &samples);
    /* Never full (3). A second item queues only when a drafter is kept off
     * a core for a whole 50 ms forward, which a loaded machine does. */
    assert_true(max_depth <= 2.0);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* SIGINT: clean stop, exit status 130, trace flushed with status interrupted. */
static void test_sigint(void **state)
{
    (void)state;
    char trace[PATH_MAX], out_path[PATH_MAX], err_path[PATH_MAX];
    tmp_path(trace, sizeof trace, "sigint.sqlite");
    tmp_path(out_path, sizeof out_path, "sigint.out");
    tmp_path(err_path, sizeof err_path, "sigint.err");
    const char *args[] = {MICRO_MODEL, "--steps", "1000000", "--log-every", "5",
                          "--target-delay-us", "2000", "--postprocess", "async",
                          "--drafter-gpus", "2", "--trace", trace, NULL};
    pid_t pid = spawn_trainer(args, NULL, out_path, err_path);
    /* wait for a log line, so that the run is well under way */
    int seen = 0;
    for (int i = 0; i < 600 && !seen; i++) {
        struct timespec pause = {0, 50 * 1000000L};
        nanosleep(&pause, NULL);
        char *out = read_file(out_path, NULL);
        seen = strstr(out, "\nstep ") != NULL;
        free(out);
    }
    assert_true(seen);
    assert_int_equal(kill(pid, SIGINT), 0);
    assert_int_equal(wait_trainer(pid, 0), 130);
    char *out = read_file(out_path, NULL), *err = read_file(err_path, NULL);
    assert_non_null(strstr(out, "trainer: interrupted after"));
    assert_string_equal(err, "");
    st_reader *r = open_reader(trace);
    assert_string_equal(st_reader_meta(r, "status"), "interrupted");
    assert_true(st_reader_n_steps(r) >= 6); /* step 0 and the 5 logged at least */
    assert_non_null(thread_named(r, "post0"));
    assert_non_null(thread_named(r, "drafter1"));
    st_reader_close(r);
    free(out);
    free(err);
}

/* The other variants run and learn something: MLP-only drafter blocks; a sliding window with
 * two targets in sync mode; training on a text file (--data); and, started in an empty
 * directory, the default trace path runs/<time>-<pid>.sqlite when profiling is on. */
static void check_run(const char *const *args, const char *what, int steps)
{
    trainer_result res = run_trainer(args, NULL);
    if (res.status != 0 || res.err[0])
        print_error("%s: exit %d\n%s%s", what, res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    trainer_log_line lines[8];
    int n = parse_trainer_log(res.out, lines, 8);
    assert_true(n >= 1);
    assert_int_equal(lines[n - 1].step, steps);
    for (int i = 0; i < n; i++)
        assert_true(isfinite(lines[i].loss) && lines[i].loss > 0.0 && lines[i].loss < 10.0);
    free_trainer_result(&res);
}

static void test_variants(void **state)
{
    (void)state;
    const char *mlp[] = {MICRO_MODEL, "--drafter-attention", "off", "--drafter-layers", "2",
                         "--steps", "10", "--log-every", "5", NULL};
    check_run(mlp, "MLP-only drafter", 10);
    const char *window[] = {MICRO_MODEL, "--sliding-window", "8", "--target-gpus", "2",
                            "--steps", "10", "--log-every", "5", NULL};
    check_run(window, "sliding window, 2 targets", 10);

    char text[PATH_MAX];
    tmp_path(text, sizeof text, "corpus.txt");
    FILE *f = fopen(text, "w");
    for (int i = 0; i < 40; i++)
        fprintf(f, "paragraph %d: the quick brown fox jumps over the lazy dog.\n\n", i);
    fclose(f);
    const char *data[] = {MICRO_MODEL, "--vocab", "256", "--data", text, "--steps", "10",
                          "--log-every", "5", NULL};
    check_run(data, "--data", 10);

    char dir[PATH_MAX], out_path[PATH_MAX], err_path[PATH_MAX];
    tmp_path(dir, sizeof dir, "cwd");
    tmp_path(out_path, sizeof out_path, "cwd.out");
    tmp_path(err_path, sizeof err_path, "cwd.err");
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *profiled[] = {MICRO_MODEL, "--steps", "6", "--profile-interval", "3", NULL};
    const trainer_options in_dir = {.cwd = dir};
    assert_int_equal(wait_trainer(spawn_trainer(profiled, &in_dir, out_path, err_path), 0), 0);
    char *out = read_file(out_path, NULL);
    assert_non_null(strstr(out, "\nprofile steps 1-3 "));
    assert_non_null(strstr(out, "\nprofile steps 4-6 "));
    const char *at = strstr(out, "; trace runs/");
    assert_non_null(at);
    char trace[PATH_MAX];
    assert_int_equal(sscanf(at, "; trace %1000s", trace), 1);
    char full[PATH_MAX * 2];
    snprintf(full, sizeof full, "%s/%s", dir, trace);
    st_reader *r = open_reader(full);
    assert_string_equal(st_reader_meta(r, "status"), "complete");
    assert_string_equal(st_reader_meta(r, "profile_interval"), "3");
    st_reader_close(r);
    free(out);
}

/* ---- flags ------------------------------------------------------------------------------- */

/* An old trace of rank `rank` of a `world`-process run at DIR/rank<rank>.sqlite, written with
 * the tracer as a multi-process run writes it. */
static void write_rank_trace(const char *dir, int rank, int world, st_trace **keep_open)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = dir;
    opt.rank = rank;
    opt.world_size = world;
    opt.run_id = "1700000000-42";
    opt.program = "trainer";
    st_trace *t;
    assert_int_equal(st_open(&t, &opt), ST_OK);
    if (keep_open)
        *keep_open = t;
    else
        assert_int_equal(st_close(t), ST_OK);
}

static int exists(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* --trace DIR/ in one process writes DIR/rank0.sqlite (rank 0 of 1), the name rank 0 of any
 * run writes there; with or without the slash for an existing directory. */
static void test_trace_directory(void **state)
{
    (void)state;
    char dir[PATH_MAX], slash[PATH_MAX + 1], file[PATH_MAX + 16];
    tmp_path(dir, sizeof dir, "tracedir");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(slash, sizeof slash, "%s/", dir);
    snprintf(file, sizeof file, "%s/rank0.sqlite", dir);
    const char *args[] = {"--steps", "2", "--trace", slash, NULL};
    trainer_result res = run_trainer(args, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    assert_non_null(strstr(res.out, "rank0.sqlite (0 events dropped)"));
    free_trainer_result(&res);
    st_reader *r = open_complete_trace(file);
    assert_string_equal(st_reader_meta(r, "rank"), "0");
    assert_string_equal(st_reader_meta(r, "world_size"), "1");
    st_reader_close(r);
    const char *again[] = {"--steps", "2", "--trace", dir, "--overwrite", NULL};
    res = run_trainer(again, NULL);
    assert_int_equal(res.status, 0);
    free_trainer_result(&res);
    r = open_complete_trace(file);
    st_reader_close(r);
    assert_false(exists(dir, "rank1.sqlite"));
    /* DIR/ that does not exist yet, two levels deep: created */
    char deep[PATH_MAX + 16], deep_file[PATH_MAX + 32];
    snprintf(deep, sizeof deep, "%s/new/sub/", dir);
    snprintf(deep_file, sizeof deep_file, "%s/new/sub/rank0.sqlite", dir);
    const char *fresh[] = {"--steps", "2", "--trace", deep, NULL};
    res = run_trainer(fresh, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    free_trainer_result(&res);
    r = open_complete_trace(deep_file);
    st_reader_close(r);
    /* a file where a directory of the path must go: exit 1, one line naming it */
    char blocked[PATH_MAX + 16];
    snprintf(blocked, sizeof blocked, "%s/rank0.sqlite/x/", dir);
    const char *bad[] = {"--steps", "2", "--trace", blocked, NULL};
    res = run_trainer(bad, NULL);
    assert_int_equal(res.status, 1);
    assert_non_null(strstr(res.err, "rank0.sqlite' is not a directory"));
    assert_non_null(strchr(res.err, '\n'));
    assert_null(strchr(strchr(res.err, '\n') + 1, '\n'));
    free_trainer_result(&res);
}

/* A directory that holds more ranks of an older run: without --overwrite the run stops (exit
 * 1, one line naming them) and nothing is removed; with it the stale rank files are removed
 * and named, so the directory reads as the new run; a file of that name that is not a trace,
 * or a trace another process is writing, stops the run and is never removed; other files
 * are not touched. */
static void test_trace_directory_stale_ranks(void **state)
{
    (void)state;
    char dir[PATH_MAX], slash[PATH_MAX + 1], junk[PATH_MAX + 16];
    tmp_path(dir, sizeof dir, "staledir");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(slash, sizeof slash, "%s/", dir);
    for (int rank = 0; rank < 4; rank++)
        write_rank_trace(slash, rank, 4, NULL);
    snprintf(junk, sizeof junk, "%s/notes.txt", dir);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fputs("not a trace\n", f);
    fclose(f);
    char expect[4 * PATH_MAX];
    snprintf(expect, sizeof expect, "%srank1.sqlite, %srank2.sqlite, %srank3.sqlite", slash,
             slash, slash);

    const char *plain[] = {"--steps", "2", "--trace", slash, NULL};
    trainer_result res = run_trainer(plain, NULL);
    assert_int_equal(res.status, 1);
    assert_int_equal(count_lines(res.err), 1);
    assert_non_null(strstr(res.err, "trainer: an older run left rank files that a run of 1 "
                                    "process does not write: "));
    assert_non_null(strstr(res.err, expect));
    assert_non_null(strstr(res.err, "add --overwrite to remove them"));
    assert_string_equal(res.out, "");
    free_trainer_result(&res);
    assert_true(exists(dir, "rank1.sqlite") && exists(dir, "rank3.sqlite"));

    /* a file of a rank file's name that is not a trace: never removed, nor anything else */
    snprintf(junk, sizeof junk, "%s/rank9.sqlite", dir);
    f = fopen(junk, "w");
    assert_non_null(f);
    fputs("not a trace\n", f);
    fclose(f);
    const char *over[] = {"--steps", "2", "--trace", slash, "--overwrite", NULL};
    res = run_trainer(over, NULL);
    assert_int_equal(res.status, 1);
    assert_int_equal(count_lines(res.err), 1);
    assert_non_null(strstr(res.err, "rank9.sqlite' has the name of a rank's trace but is not one"));
    free_trainer_result(&res);
    assert_true(exists(dir, "rank1.sqlite") && exists(dir, "rank9.sqlite"));
    assert_int_equal(unlink(junk), 0);

    /* a rank file another process is writing (this one): never removed */
    st_trace *live;
    char live_dir[PATH_MAX + 1];
    snprintf(live_dir, sizeof live_dir, "%s", slash);
    write_rank_trace(live_dir, 5, 8, &live);
    res = run_trainer(over, NULL);
    assert_int_equal(res.status, 1);
    assert_int_equal(count_lines(res.err), 1);
    assert_non_null(strstr(res.err, "rank5.sqlite' is being written by another process"));
    free_trainer_result(&res);
    assert_true(exists(dir, "rank5.sqlite") && exists(dir, "rank1.sqlite"));
    assert_int_equal(st_close(live), ST_OK);
    char live_path[PATH_MAX + 16];
    snprintf(live_path, sizeof live_path, "%s/rank5.sqlite", dir);
    remove_trace_files(live_path);

    /* --overwrite: the stale ranks go, named; rank 0 is replaced; notes.txt stays */
    res = run_trainer(over, NULL);
    if (res.status != 0)
        print_error("trainer exited %d:\n%s%s", res.status, res.out, res.err);
    assert_int_equal(res.status, 0);
    char removed[5 * PATH_MAX];
    snprintf(removed, sizeof removed,
             "trainer: --overwrite removed the rank files of an older run: %s\n", expect);
    assert_non_null(strstr(res.out, removed));
    free_trainer_result(&res);
    assert_false(exists(dir, "rank1.sqlite") || exists(dir, "rank2.sqlite") ||
                 exists(dir, "rank3.sqlite") || exists(dir, "rank3.sqlite-wal"));
    assert_true(exists(dir, "notes.txt"));
    char file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/rank0.sqlite", dir);
    st_reader *r = open_complete_trace(file);
    assert_string_equal(st_reader_meta(r, "world_size"), "1");
    st_reader_close(r);
}

static void test_help_and_version(void **state)
{
    (void)state;
    const char *help[] = {"--help", NULL};
    trainer_result res = run_trainer(help, NULL);
    assert_int_equal(res.status, 0);
    assert_non_null(strstr(res.out, "usage: trainer"));
    assert_non_null(strstr(res.out, "--queue-depth"));
    assert_non_null(strstr(res.out, "--postprocess sync|async"));
    free_trainer_result(&res);
    const char *version[] = {"--version", NULL};
    res = run_trainer(version, NULL);
    assert_int_equal(res.status, 0);
    assert_int_equal(strncmp(res.out, "trainer " TR_VERSION, strlen("trainer " TR_VERSION)), 0);
    assert_int_equal(count_lines(res.out), 1);
    free_trainer_result(&res);
}

static void test_bad_flags(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "never.sqlite");
    const char *cases[][8] = {
        {"--bogus"},
        {"--steps", "0"},
        {"--steps", "abc"},
        {"--steps"},
        {"--queue-depth", "-1"},
        {"--taps", "0,5"},
        {"--preset", "bogus"},
        {"--dim", "100", "--heads", "3"},
        {"--block-size", "500"},
        {"--target-gpus", "0"},
        {"--postprocess", "later"},
        {"--data", "/nonexistent/file.txt"},
        {"--lr", "-1"},
        {"stray"},
        /* flags of a multi-process run, in one process (no launcher) */
        {"--layout", "targets=2,drafters=2", "--steps", "5"},
        {"--target-ranks", "0,5"},
        {"--drafter-ranks", "0,"},
        {"--test-die-at", "0:2"},
        {"--device", "cuda"}, /* last: skipped when this build has the CUDA backend */
    };
    size_t n_cases = sizeof cases / sizeof cases[0];
    const char *version[] = {"--version", NULL};
    trainer_result v = run_trainer(version, NULL);
    if (strstr(v.out, "cuda"))
        n_cases--;
    free_trainer_result(&v);
    for (size_t i = 0; i < n_cases; i++) {
        const char *args[12];
        int k = 0;
        for (; k < 8 && cases[i][k]; k++)
            args[k] = cases[i][k];
        /* every run names a trace, which must not be created on a bad flag */
        if (strcmp(cases[i][0], "--trace")) {
            args[k++] = "--trace";
            args[k++] = trace;
        }
        args[k] = NULL;
        trainer_result res = run_trainer(args, NULL);
        if (res.status != 2 || count_lines(res.err) != 1 || res.out[0] ||
            strncmp(res.err, "trainer: ", 9)) {
            print_error("case %zu (%s): exit %d, stdout '%s', stderr '%s'\n", i, cases[i][0],
                        res.status, res.out, res.err);
            fail();
        }
        assert_int_equal(access(trace, F_OK), -1);
        free_trainer_result(&res);
    }
    /* A trace that cannot be created is a runtime failure, not a bad flag:
     * exit 1, one line naming the path. */
    const char *no_dir[] = {"--steps", "2", "--trace", "/nonexistent-dir/run.sqlite", NULL};
    trainer_result nd = run_trainer(no_dir, NULL);
    assert_int_equal(nd.status, 1);
    assert_int_equal(count_lines(nd.err), 1);
    assert_non_null(strstr(nd.err, "trainer: cannot open the trace: "));
    assert_non_null(strstr(nd.err, "'/nonexistent-dir/run.sqlite'"));
    assert_string_equal(nd.out, "");
    free_trainer_result(&nd);
    /* A layout in one process says what is wrong and how to mend it. */
    const char *layout[] = {"--layout", "targets=2,drafters=2", "--steps", "5", NULL};
    trainer_result l = run_trainer(layout, NULL);
    assert_int_equal(l.status, 2);
    assert_string_equal(l.err, "trainer: --layout targets=2,drafters=2 needs 4 processes, but the "
                               "run has 1 (start it with mpirun -np 4)\n");
    free_trainer_result(&l);
    /* torchrun's environment without rank 0 beside it: this process says it itself */
    const char *rank1_env[] = {"WORLD_SIZE=2", "RANK=1", NULL};
    trainer_options rank1_opt = {NULL, rank1_env, 0};
    const char *plain[] = {"--steps", "2", NULL};
    trainer_result t1 = run_trainer(plain, &rank1_opt);
    assert_int_equal(t1.status, 2);
    assert_int_equal(count_lines(t1.err), 1);
    assert_non_null(strstr(t1.err, "trainer: WORLD_SIZE=2 but no MPI launcher started this process"));
    assert_non_null(strstr(t1.err, "use mpirun -np 2 build/trainer"));
    assert_string_equal(t1.out, "");
    free_trainer_result(&t1);
    /* "0" reads as a count of no devices; the message says how to name device 0 alone */
    const char *zero[] = {"--target-gpus", "0", NULL};
    trainer_result z = run_trainer(zero, NULL);
    assert_int_equal(z.status, 2);
    assert_string_equal(z.err, "trainer: --target-gpus 0 is a count of no devices; for device 0 alone write '0,'\n");
    free_trainer_result(&z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_presets_and_overrides),
        cmocka_unit_test(test_config_devices),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_gpu_alternate),
        cmocka_unit_test(test_gpu_every_spec),
        cmocka_unit_test(test_queue_mpmc),
        cmocka_unit_test(test_queue_close),
        cmocka_unit_test(test_barrier_wait_and_abort),
        cmocka_unit_test(test_data_synthetic),
        cmocka_unit_test(test_data_file),
        cmocka_unit_test(test_end_to_end),
        cmocka_unit_test(test_slow_drafter),
        cmocka_unit_test(test_shared_device_names),
        cmocka_unit_test(test_slow_target),
        cmocka_unit_test(test_sigint),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_trace_directory),
        cmocka_unit_test(test_trace_directory_stale_ranks),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_config_trace_ring),
    };
    return cmocka_run_group_tests(tests, setup_paths, NULL);
}
