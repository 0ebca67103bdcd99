/* cpu_share.h: on-CPU, preempted and blocked time of stages, for the
 * commands that add the CPU capture to their own figures (cpu_share.c;
 * docs/analyze.md, "summary", "bottleneck", "diff"): summary's inclusive
 * time of each (thread, stage), and the self time of each (step bin, role,
 * stage) that diff compares step by step. Both split time with the capture
 * layer's own accounting (st_cpu_off_intervals, st_cpu_account in the
 * reader API), as `analyze cpu` does (cpu.c); what is new here is which
 * time is split.
 */
#ifndef AN_CPU_SHARE_H
#define AN_CPU_SHARE_H

#include "analyze.h"

typedef struct an_cpu_split {
    int64_t on_ns, preempted_ns, blocked_ns;
} an_cpu_split;

/* A thread's CPU figures are known when it has a cpu_threads row with status
 * "perf" (its perf event opened); any other thread has none. 1: known (info
 * filled), 0: not, <0: a read error (not printed). */
int an_cpu_thread_known(st_reader *r, uint32_t thread_index, st_cpu_thread_info *info);

/* Inclusive time, as summary's total_ms: for each thread marked in
 * thread_on (NULL: all) whose figures are known, the ranges of each stage
 * clipped to [t0, t1) (a range that never ended ends at t1), each split by
 * the thread's off-CPU intervals (an interval still open after the thread's
 * last switch record ends at t1); time before the thread's capture start
 * (cpu_threads.start_ns) is in no part. known[n_threads] gets 1 per thread
 * with figures; split[n_threads * n_stages] (zeroed here) the sums. 0, or an
 * exit code after the message. */
int an_cpu_range_shares(an_trace *t, int64_t t0, int64_t t1, const uint8_t *thread_on, uint8_t *known,
                        an_cpu_split *split);

/* Self time per step bin, as diff's per-step time: for every thread whose
 * figures are known, its self-time pieces (the innermost range open between
 * two events; a range that never ended is open to bin_t[n_bins]) cut at the
 * bin edges bin_t[0..n_bins], split as above (intervals still open end at
 * bin_t[n_bins]; time before the capture start is in no part), and added to
 * on_ns[(bin * n_roles + thread_role[i]) * (n_stages + 1) + col] (col
 * n_stages: no range open), which the caller zeroes. role_known[n_roles]
 * gets the number of the role's threads with figures. 0, or an exit code
 * after the message. */
int an_cpu_bin_on(an_trace *t, const int64_t *bin_t, uint32_t n_bins, const uint32_t *thread_role, uint32_t n_roles,
                  int64_t *on_ns, uint32_t *role_known);

#endif
