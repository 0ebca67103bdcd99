/* pipeline.c: a small instrumented program, producer -> bounded queue ->
 * consumers, driven by a step loop in main. It shows the whole library in
 * about two hundred lines: stages of each kind, threads with roles, a queue
 * depth counter, step marks with tokens, a profile line every N steps, and
 * a trace that `analyze` (or sqlite3 with the extension) can read.
 *
 *   build/samples/pipeline --steps 40 --profile-interval 10 --trace run.sqlite
 *
 * SIGINT or SIGTERM stops it as the trainer stops: the trace is flushed and
 * marked interrupted, the threads finish what they hold, and it exits 130.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stagetrace.h"

typedef struct config {
    long steps, items_per_step, queue_depth, consumers;
    long produce_us, consume_us;
    unsigned profile_interval;
    const char *trace;
    int overwrite;
} config;

typedef struct queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    long *items;
    long cap, head, len;
    int closed;
} queue;

static st_trace *trace;
static int stage_produce, stage_put, stage_wait, stage_consume, stage_step_wait;
static int counter_depth;
static queue q;
static config cfg;
static long consumed;
static pthread_mutex_t consumed_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t consumed_cond = PTHREAD_COND_INITIALIZER;

static void spin_us(long us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void queue_put(long item)
{
    st_begin(stage_put);
    pthread_mutex_lock(&q.lock);
    while (q.len == q.cap && !q.closed) pthread_cond_wait(&q.not_full, &q.lock);
    q.items[(q.head + q.len) % q.cap] = item;
    q.len++;
    st_counter_set(counter_depth, (double)q.len);
    pthread_cond_signal(&q.not_empty);
    pthread_mutex_unlock(&q.lock);
    st_end(stage_put);
}

static int queue_pop(long *item)
{
    st_begin(stage_wait);
    pthread_mutex_lock(&q.lock);
    while (q.len == 0 && !q.closed) pthread_cond_wait(&q.not_empty, &q.lock);
    int ok = q.len > 0;
    if (ok) {
        *item = q.items[q.head];
        q.head = (q.head + 1) % q.cap;
        q.len--;
        st_counter_set(counter_depth, (double)q.len);
        pthread_cond_signal(&q.not_full);
    }
    pthread_mutex_unlock(&q.lock);
    st_end(stage_wait);
    return ok;
}

static void *producer(void *arg)
{
    (void)arg;
    st_thread_register(trace, "producer", "producer", -1, 0);
    for (long i = 0; i < cfg.steps * cfg.items_per_step && !st_interrupted(); i++) {
        st_begin(stage_produce);
        spin_us(cfg.produce_us);
        st_end(stage_produce);
        queue_put(i);
    }
    st_thread_unregister();
    return NULL;
}

static void *consumer(void *arg)
{
    char name[32];
    snprintf(name, sizeof name, "consumer%ld", (long)(intptr_t)arg);
    st_thread_register(trace, name, "consumer", -1, 0);
    long item;
    while (queue_pop(&item)) {
        st_begin(stage_consume);
        spin_us(cfg.consume_us);
        st_end(stage_consume);
        pthread_mutex_lock(&consumed_lock);
        consumed++;
        pthread_cond_broadcast(&consumed_cond);
        pthread_mutex_unlock(&consumed_lock);
    }
    st_thread_unregister();
    return NULL;
}

static void print_window(const struct st_window *w, void *arg)
{
    (void)arg;
    char buf[8192];
    st_window_format(w, buf, sizeof buf);
    fputs(buf, stdout);
    fflush(stdout);
}

/* The tracer's messages (a disk that fills up, a failed commit, a call from
 * an unregistered thread) go to stderr, one line each. */
static void print_log(int level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    fprintf(stderr, "stagetrace: %s\n", msg);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pipeline [options]\n"
            "  --steps N              steps to run (default 40)\n"
            "  --items-per-step N     items produced and consumed per step (default 20)\n"
            "  --queue-depth N        queue capacity (default 8)\n"
            "  --consumers N          consumer threads (default 2)\n"
            "  --produce-us N         producer work per item, microseconds (default 200)\n"
            "  --consume-us N         consumer work per item, microseconds (default 300)\n"
            "  --profile-interval N   profile lines every N steps, 0 = off (default 10)\n"
            "  --trace PATH           trace file (default pipeline.sqlite)\n"
            "  --overwrite            replace an existing trace file (never one that another\n"
            "                         process is still writing)\n"
            "Exit status: 0 done, 1 runtime failure (the trace cannot be created or written),\n"
            "2 bad flags, 130 stopped by SIGINT/SIGTERM (the trace is then flushed and says\n"
            "status = interrupted).\n");
}

static int parse_long(const char *flag, const char *text, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "pipeline: %s expects an integer in %ld..%ld, got '%s'\n", flag, lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    cfg = (config){40, 20, 8, 2, 200, 300, 10, "pipeline.sqlite", 0};
    static const struct option opts[] = {
        {"steps", required_argument, 0, 's'},      {"items-per-step", required_argument, 0, 'i'},
        {"queue-depth", required_argument, 0, 'q'}, {"consumers", required_argument, 0, 'c'},
        {"produce-us", required_argument, 0, 'p'}, {"consume-us", required_argument, 0, 'u'},
        {"profile-interval", required_argument, 0, 'n'}, {"trace", required_argument, 0, 't'},
        {"overwrite", no_argument, 0, 'o'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    long v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (c) {
        case 's': if (parse_long("--steps", optarg, 1, 1000000, &cfg.steps)) return 2; break;
        case 'i': if (parse_long("--items-per-step", optarg, 1, 1000000, &cfg.items_per_step)) return 2; break;
        case 'q': if (parse_long("--queue-depth", optarg, 1, 1000000, &cfg.queue_depth)) return 2; break;
        case 'c': if (parse_long("--consumers", optarg, 1, 64, &cfg.consumers)) return 2; break;
        case 'p': if (parse_long("--produce-us", optarg, 0, 10000000, &cfg.produce_us)) return 2; break;
        case 'u': if (parse_long("--consume-us", optarg, 0, 10000000, &cfg.consume_us)) return 2; break;
        case 'n': if (parse_long("--profile-interval", optarg, 0, 1000000, &v)) return 2;
                  cfg.profile_interval = (unsigned)v; break;
        case 't': cfg.trace = optarg; break;
        case 'o': cfg.overwrite = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "pipeline: unknown or incomplete option '%s' (see --help)\n", flag);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pipeline: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }

    st_options opt;
    st_options_init(&opt);
    opt.path = cfg.trace;
    opt.overwrite = cfg.overwrite;
    opt.program = "pipeline";
    opt.argc = argc;
    opt.argv = argv;
    opt.profile_interval = cfg.profile_interval;
    opt.on_window = print_window;
    opt.log = print_log;
    /* SIGINT and SIGTERM go to main only: the other threads start with them
     * blocked (the trace's writer blocks every signal itself). */
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    if (st_open(&trace, &opt) != ST_OK) {
        fprintf(stderr, "pipeline: %s\n", st_last_error());
        return 1;
    }
    st_install_signal_handlers(trace, 0);
    stage_produce = st_stage_register(trace, "produce", ST_WORK);
    stage_put = st_stage_register(trace, "queue_put", ST_WAIT_OUTPUT);
    stage_wait = st_stage_register(trace, "queue_wait", ST_WAIT_INPUT);
    stage_consume = st_stage_register(trace, "consume", ST_WORK);
    stage_step_wait = st_stage_register(trace, "step_wait", ST_WAIT_INPUT);
    counter_depth = st_counter_register(trace, "queue_depth", "items");
    st_thread_register(trace, "main", "main", -1, 0);

    q.cap = cfg.queue_depth;
    q.items = calloc((size_t)q.cap, sizeof *q.items);
    pthread_mutex_init(&q.lock, NULL);
    pthread_cond_init(&q.not_empty, NULL);
    pthread_cond_init(&q.not_full, NULL);

    pthread_t prod, cons[64];
    st_step(0, 0);
    pthread_create(&prod, NULL, producer, NULL);
    for (long i = 0; i < cfg.consumers; i++)
        pthread_create(&cons[i], NULL, consumer, (void *)(intptr_t)i);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);

    /* A step ends when its items have been consumed. The wait wakes up every
     * 50 ms to see whether a signal asked to stop (the producer then stops
     * too, so the step would never end). */
    long steps_done = 0;
    while (steps_done < cfg.steps && !st_interrupted()) {
        long step = steps_done + 1;
        int done;
        st_begin(stage_step_wait);
        pthread_mutex_lock(&consumed_lock);
        while (!(done = consumed >= step * cfg.items_per_step) && !st_interrupted()) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 50 * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&consumed_cond, &consumed_lock, &until);
        }
        pthread_mutex_unlock(&consumed_lock);
        st_end(stage_step_wait);
        if (!done) break;
        st_step((uint64_t)step, (uint64_t)cfg.items_per_step);
        steps_done = step;
    }
    pthread_join(prod, NULL);
    pthread_mutex_lock(&q.lock);
    q.closed = 1;
    pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.lock);
    for (long i = 0; i < cfg.consumers; i++) pthread_join(cons[i], NULL);
    int interrupted = st_interrupted();
    uint64_t dropped = st_dropped(trace);
    char path[4096];
    snprintf(path, sizeof path, "%s", st_path(trace));
    if (st_close(trace) != ST_OK) {
        fprintf(stderr, "pipeline: %s\n", st_last_error());
        return 1;
    }
    if (interrupted)
        printf("trace: %s (interrupted after %ld of %ld steps, %llu events dropped)\n", path, steps_done,
               cfg.steps, (unsigned long long)dropped);
    else
        printf("trace: %s (%ld steps, %llu events dropped)\n", path, steps_done, (unsigned long long)dropped);
    free(q.items);
    return interrupted ? 130 : 0;
}
