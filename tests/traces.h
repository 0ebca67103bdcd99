/* traces.h: the traces with exactly known contents that the analyzer's unit
 * tests and the integration scripts (tests/it_*.sh, through the tracegen
 * program, tests/tracegen_main.c) run on. Each is described with
 * tests/tracegen.h; the comments in traces.c work out every number the
 * tests expect.
 *
 * Two sets, with file names that never clash:
 *   write_stats_traces   summary statistics, windows, exports, hostile and
 *                        broken files: gen.sqlite (and gen.intervals.txt, the
 *                        windows the aggregator gives without the reader),
 *                        running, rank0/rank1, unended, huge, huge_nested,
 *                        empty, many, outer, zero, notsqlite and broken
 *                        copies of gen.sqlite;
 *   write_model_traces   the per-step model, verdict, diff and GPU
 *                        analyses: target, moves, partial, inferred,
 *                        nosteps, nostages, dense, gpu_steps, gpu_shared,
 *                        gpu_split, gpu_twice, diff_a/diff_b (and their
 *                        step periods, diff_a.period_ns, diff_b.period_ns);
 *   write_jobs_traces    `summary --jobs N` (unit tests only): jobs0, jobs1
 *                        (two ranks of one run, several threads per role,
 *                        more ranges than a group keeps exactly, nested
 *                        ranges, chunks of 61 events) and corrupt (jobs0
 *                        with corrupt chunks in two threads).
 */
#ifndef ST_TESTS_TRACES_H
#define ST_TESTS_TRACES_H

#include <stdint.h>

#include "tracegen.h"

#define MS 1000000LL
#define US 1000LL
#define BASE_NS 1000000000LL /* meta start_ns and step 0 of the generated traces */

/* ---- the statistics set ---- */

/* gen.sqlite ("complete") and running.sqlite ("running": no end_ns, one
 * range never ends). */
tg_trace *trace_main(const char *status);
/* rank0.sqlite, rank1.sqlite: two ranks of one run. */
tg_trace *trace_rank(int rank);
/* unended.sqlite: a killed run, a range left open over a closed child. */
tg_trace *trace_unended(void);
void write_stats_traces(const char *dir);
/* N ranges over 8 threads, nested one deep, chunks of 4096 events
 * (the benchmarks' traces). */
void write_big_trace(const char *path, long n_ranges);

/* g's events and steps, merged in st_agg_order, fed to the interval
 * aggregator: the text of `analyze intervals --every every`, computed
 * without the reader. The caller frees it. */
char *trace_windows_text(const tg_trace *g, uint32_t every);

/* ---- the model set ---- */

/* target.sqlite: 20 steps of a target-bound pipeline, a queue_depth counter
 * on target0 (thread 1, os_tid 2001). */
tg_trace *trace_target(void);
void write_model_traces(const char *dir);

/* ---- the jobs set ---- */

/* jobs0.sqlite, jobs1.sqlite: rank 0 or 1 of run "1700000000-30x", rank 1
 * with one more drafter and other random durations. Thread ids 10, 11, ...
 * (main 0): ids and indexes differ. The main thread marks 21 steps over the
 * span with a `step` range before each mark. */
tg_trace *trace_jobs(int rank);
void write_jobs_traces(const char *dir);

/* A multi-process run written as DIR/rank<r>.sqlite (docs/analyze.md, "Rank
 * sets"): ranks 0..ceil(world/2)-1 are targets (one thread target0: forward
 * then queue_put, wait_output, to the step's end), the rest drafters (one
 * thread drafter0: queue_wait, forward, backward, allreduce ending at 9.5 ms
 * of each 10 ms step); rank 0 also has main with the step marks 0..steps
 * (1000 tokens each). Default: drafter-bound (target forward 4 ms); with
 * target_bound the target's forward takes 9 ms and drafters wait 5.5 ms.
 * slow_rank's backward is 2 ms longer (0.5 ms when target-bound): it
 * arrives last at every allreduce. shift_rank records its clock shifted by
 * -shift_ns and stores clock_offset_ns = shift_ns (open and close), so that
 * the mapping aligns it; missing: no file for that rank; killed: status
 * running, half the steps and a range left open. -1: none. extra_per_step
 * adds short forward ranges per step (benchmarks). */
typedef struct rank_set_opts {
    int world, world_size, steps;
    int slow_rank, shift_rank, missing, killed, target_bound, extra_per_step;
    int64_t shift_ns;
    const char *run_id;
    int gpu; /* GPU records: per step a kernel on the rank's device 0, launched in its forward */
    /* gpu and, per step, the drafters also run an NCCL all-reduce kernel (its mangled name, id 3)
     * on stream 8 of device 0, launched 50 us after their other kernel in the same forward:
     * 600 us from 300 us after that kernel's start, so half of it overlaps that kernel */
    int nccl;
    /* the clock alignment's cases (docs/analyze.md, "Clock alignment"): no_clock leaves every
     * clock_* key out of meta (as a launcher without the MPI measurement does); drift_rank's
     * clock runs drift_ppb fast: each step begins, on its clock, at L(t) = t - shift + (t - t0)
     * drift_ppb / 1e9 for the step's true start t (t0 = BASE_NS), the ranges of the step at their
     * usual distances from it; jitter_ns: each drafter's allreduce of step k ends j(rank, k) =
     * ((h >> 16) mod 1000) * jitter_ns / 1000 later (truncated; h = (k * 1000003 + rank) *
     * 2654435761 mod 2^32), and the
     * last rank's 10 jitter_ns later still in every step k with k mod 10 = 5 (an outlier;
     * jitter_ns at most 40000) */
    int no_clock, drift_rank;
    int64_t drift_ppb, jitter_ns;
} rank_set_opts;
void write_rank_set(const char *dir, const rank_set_opts *o);

#endif
