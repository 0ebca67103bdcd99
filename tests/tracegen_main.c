/* tracegen_main.c: the tracegen program, which writes the traces of
 * tests/traces.h for the integration scripts (tests/it_*.sh) and the
 * benchmarks (bench/bench_analyze.sh, bench/ab_analyze.sh).
 *
 *   tracegen DIR            every trace of both sets into DIR (made if missing)
 *   tracegen --big PATH N   a trace of N ranges over 8 threads at PATH
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
    fprintf(stderr, "usage: tracegen DIR | tracegen --big PATH N\n");
    return 2;
}
