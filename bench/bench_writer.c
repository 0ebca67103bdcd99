/* bench_writer.c: can the writer keep up with a steady producer? Each
 * producer thread records flat ranges at a fixed pace (R ranges per second,
 * caught up in bursts when it falls behind, never blocking: a full ring
 * drops), for D seconds; the figure is the share of ranges dropped. The
 * variants run interleaved, round after round, so that a noisy machine
 * treats them alike:
 *   old   checkpoints on the writer thread (SQLite's auto-checkpoint,
 *         st__test_set_checkpoint_on_writer(1)), default ring
 *   new   checkpoints on their own thread (the default), default ring
 *   new/N the default scheme with a ring of N records (ring sizes to try
 *         are given after the other arguments)
 *
 *   build/bench/bench_writer [seconds, default 3] [M ranges/s per thread,
 *                             default 10] [threads, default 1] [rounds,
 *                             default 3] [ring sizes...] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tracer/st_testing.h" /* st__test_set_checkpoint_on_writer */
#include "stagetrace.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct producer {
    st_trace *trace;
    st_stage stage;
    double rate, seconds;
    int index;
    uint64_t ranges;
    double behind_s; /* how far behind its pace it ended */
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    char name[32];
    snprintf(name, sizeof name, "producer%d", p->index);
    if (st_thread_register(p->trace, name, "producer", -1, 0) < 0) return NULL;
    int64_t t0 = now_ns(), end = t0 + (int64_t)(p->seconds * 1e9), t;
    uint64_t done = 0;
    while ((t = now_ns()) < end) {
        uint64_t due = (uint64_t)((double)(t - t0) * 1e-9 * p->rate);
        /* At most 1 ms of ranges per burst, so the clock is read often. */
        uint64_t burst = due - done < (uint64_t)(p->rate / 1000) + 1 ? due - done : (uint64_t)(p->rate / 1000) + 1;
        for (uint64_t i = 0; i < burst; i++) {
            st_begin(p->stage);
            st_end(p->stage);
        }
        done += burst;
    }
    p->ranges = done;
    p->behind_s = ((double)(end - t0) * 1e-9 * p->rate - (double)done) / p->rate;
    st_thread_unregister();
    return NULL;
}

typedef struct result {
    uint64_t ranges, dropped;
    double behind_s, seconds;
} result;

static int run(const char *dir, int old_scheme, uint32_t ring, double seconds, double rate, int threads,
               result *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_writer_%d.sqlite", dir, (int)getpid());
    st_options o;
    st_options_init(&o);
    o.path = path;
    o.overwrite = 1;
    o.nvtx = 0;
    st__test_set_checkpoint_on_writer(old_scheme);
    if (ring) o.ring_records = ring;
    st_trace *trace;
    if (st_open(&trace, &o) != ST_OK) {
        fprintf(stderr, "bench_writer: %s\n", st_last_error());
        return -1;
    }
    int stage = st_stage_register(trace, "work", ST_WORK);
    producer *p = calloc((size_t)threads, sizeof *p);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    int64_t t0 = now_ns();
    for (int i = 0; i < threads; i++) {
        p[i] = (producer){trace, (st_stage)stage, rate, seconds, i, 0, 0};
        pthread_create(&th[i], NULL, produce, &p[i]);
    }
    memset(out, 0, sizeof *out);
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        out->ranges += p[i].ranges;
        if (p[i].behind_s > out->behind_s) out->behind_s = p[i].behind_s;
    }
    out->dropped = st_dropped(trace);
    int rc = st_close(trace);
    out->seconds = (double)(now_ns() - t0) * 1e-9;
    unlink(path);
    free(p);
    free(th);
    if (rc != ST_OK) fprintf(stderr, "bench_writer: %s\n", st_last_error());
    return rc;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    double rate = (argc > 2 ? atof(argv[2]) : 10) * 1e6;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (seconds <= 0 || rate <= 0 || threads < 1 || threads > 64 || rounds < 1) {
        fprintf(stderr, "bench_writer: usage: bench_writer [seconds] [M ranges/s per thread] [threads] "
                        "[rounds] [ring sizes...]\n");
        return 2;
    }
    const char *dir = getenv("ST_BENCH_TMP") ? getenv("ST_BENCH_TMP") : "/tmp";
    enum { MAX_VARIANTS = 10 };
    typedef struct variant {
        char name[32];
        int old;
        uint32_t ring;
        uint64_t ranges, dropped;
        double worst_pct, behind_s;
    } variant;
    variant v[MAX_VARIANTS];
    int nv = 0;
    v[nv++] = (variant){"old", 1, 0, 0, 0, 0, 0};
    v[nv++] = (variant){"new", 0, 0, 0, 0, 0, 0};
    for (int i = 5; i < argc && nv < MAX_VARIANTS; i++) {
        v[nv] = (variant){"", 0, (uint32_t)atol(argv[i]), 0, 0, 0, 0};
        snprintf(v[nv].name, sizeof v[nv].name, "new/%u", v[nv].ring);
        nv++;
    }
    printf("paced producers: %d thread%s x %.1f M ranges/s for %.1f s, %d rounds, variants interleaved\n", threads,
           threads == 1 ? "" : "s", rate / 1e6, seconds, rounds);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nv; i++) {
            result res;
            if (run(dir, v[i].old, v[i].ring, seconds, rate, threads, &res)) return 1;
            double pct = 100.0 * (double)res.dropped / (2.0 * (double)res.ranges);
            printf("  round %d %-12s ranges %11llu  dropped events %10llu (%6.3f%%)  producer behind %.3f s\n", r,
                   v[i].name, (unsigned long long)res.ranges, (unsigned long long)res.dropped, pct, res.behind_s);
            fflush(stdout);
            v[i].ranges += res.ranges;
            v[i].dropped += res.dropped;
            if (pct > v[i].worst_pct) v[i].worst_pct = pct;
            if (res.behind_s > v[i].behind_s) v[i].behind_s = res.behind_s;
        }
    }
    printf("\n%-12s %14s %14s %10s %10s %12s\n", "variant", "ranges", "dropped", "drop %", "worst %", "behind s");
    for (int i = 0; i < nv; i++)
        printf("%-12s %14llu %14llu %10.4f %10.4f %12.3f\n", v[i].name, (unsigned long long)v[i].ranges,
               (unsigned long long)v[i].dropped, 100.0 * (double)v[i].dropped / (2.0 * (double)v[i].ranges),
               v[i].worst_pct, v[i].behind_s);
    return 0;
}
