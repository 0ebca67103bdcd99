/* tracegen_main.c: the tracegen program, which writes the traces of
 * tests/traces.h for the integration scripts (tests/it_*.sh) and the
 * benchmarks (bench/bench_analyze.sh, bench/ab_analyze.sh).
 *
 *   tracegen DIR            every trace of both sets into DIR (made if missing)
 *   tracegen --big PATH N   a trace of N ranges over 8 threads at PATH
 *   tracegen --ranks DIR WORLD [--steps N] [--slow R] [--shift R:NS] [--missing R]
 *            [--killed R] [--target-bound] [--extra N] [--world-size W] [--run-id ID] [--gpu] [--nccl]
 *            [--no-clock] [--drift R:PPB] [--jitter NS]
 *                           a multi-process run, DIR/rank<r>.sqlite (traces.h)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces.h"

int main(int argc, char **argv)
{
    if (argc == 2 && argv[1][0] != '-') {
        write_stats_traces(argv[1]);
        write_model_traces(argv[1]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--big") == 0) {
        char *end;
        long n = strtol(argv[3], &end, 10);
        if (*end || n < 0) {
            fprintf(stderr, "tracegen: --big: '%s' is not a count of ranges\n", argv[3]);
            return 2;
        }
        write_big_trace(argv[2], n);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "--ranks") == 0) {
        rank_set_opts o = {atoi(argv[3]), 0, 20, -1, -1, -1, -1, 0, 0, 0, NULL, 0, 0, 0, -1, 0, 0};
        for (int i = 4; i < argc; i++) {
            const char *v = i + 1 < argc ? argv[i + 1] : "";
            if (strcmp(argv[i], "--steps") == 0) o.steps = atoi(v), i++;
            else if (strcmp(argv[i], "--slow") == 0) o.slow_rank = atoi(v), i++;
            else if (strcmp(argv[i], "--missing") == 0) o.missing = atoi(v), i++;
            else if (strcmp(argv[i], "--killed") == 0) o.killed = atoi(v), i++;
            else if (strcmp(argv[i], "--extra") == 0) o.extra_per_step = atoi(v), i++;
            else if (strcmp(argv[i], "--world-size") == 0) o.world_size = atoi(v), i++;
            else if (strcmp(argv[i], "--run-id") == 0) o.run_id = v, i++;
            else if (strcmp(argv[i], "--target-bound") == 0) o.target_bound = 1;
            else if (strcmp(argv[i], "--gpu") == 0) o.gpu = 1;
            else if (strcmp(argv[i], "--nccl") == 0) o.gpu = o.nccl = 1;
            else if (strcmp(argv[i], "--no-clock") == 0) o.no_clock = 1;
            else if (strcmp(argv[i], "--jitter") == 0) o.jitter_ns = strtoll(v, NULL, 10), i++;
            else if (strcmp(argv[i], "--drift") == 0 && strchr(v, ':')) {
                o.drift_rank = atoi(v);
                o.drift_ppb = strtoll(strchr(v, ':') + 1, NULL, 10);
                i++;
            } else if (strcmp(argv[i], "--shift") == 0 && strchr(v, ':')) {
                o.shift_rank = atoi(v);
                o.shift_ns = strtoll(strchr(v, ':') + 1, NULL, 10);
                i++;
            } else {
                fprintf(stderr, "tracegen: --ranks: unknown option '%s'\n", argv[i]);
                return 2;
            }
        }
        if (o.jitter_ns < 0 || o.jitter_ns > 40000) {
            fprintf(stderr, "tracegen: --ranks: --jitter must be 0 to 40000 ns (its outliers stay inside the step)\n");
            return 2;
        }
        if (o.world < 1 || o.steps < 1) {
            fprintf(stderr, "tracegen: --ranks: WORLD and --steps must be at least 1\n");
            return 2;
        }
        write_rank_set(argv[2], &o);
        return 0;
    }
    fprintf(stderr, "usage: tracegen DIR | tracegen --big PATH N | tracegen --ranks DIR WORLD [options]\n");
    return 2;
}
