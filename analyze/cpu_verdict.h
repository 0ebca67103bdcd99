/* cpu_verdict.h: what the CPU capture says of a role's time, for
 * `bottleneck` (cpu_verdict.c; docs/analyze.md, "bottleneck", "With the CPU
 * capture"): whether the role's `work` time was spent on a core
 * (compute-bound), waiting for one (CPU-starved: preempted, runnable with no
 * core) or off the CPU by its own doing (blocked), and whether a `sync`
 * stage spins on a core. The rules are pure functions of the figures, so
 * that their thresholds are tested on their own.
 */
#ifndef AN_CPU_VERDICT_H
#define AN_CPU_VERDICT_H

#include "cpu.h"
#include "model.h"

/* Off-CPU (preempted + blocked) above this share of the role's work time:
 * the work is not compute-bound. A sync stage on-CPU above this share of
 * its time spins. */
#define AN_CPU_OFF_PCT 50.0
#define AN_CPU_SPIN_PCT 50.0

typedef enum an_cpu_work_verdict {
    AN_CPU_NO_WORK = 0,  /* no work time with CPU figures */
    AN_CPU_COMPUTE,      /* off-CPU at most AN_CPU_OFF_PCT of the work time */
    AN_CPU_STARVED,      /* off-CPU above it, preempted >= blocked */
    AN_CPU_BLOCKED,      /* off-CPU above it, blocked > preempted */
    AN_CPU_LOCK_BOUND,   /* blocked, and more than AN_CPU_LOCK_PCT of the blocked time in futex waits */
} an_cpu_work_verdict;

/* Of a blocked role's blocked work time, the share in futex waits (block
 * reasons "futex:...", from cpu_blocks) above which it is lock-bound. */
#define AN_CPU_LOCK_PCT 50.0

/* The verdict of work time wall = on + preempted + blocked. */
an_cpu_work_verdict an_cpu_judge_work(int64_t wall_ns, int64_t on_ns, int64_t preempted_ns, int64_t blocked_ns);
/* The same, with the blocked time's futex part: BLOCKED becomes LOCK_BOUND
 * when futex_ns is above AN_CPU_LOCK_PCT of blocked_ns. */
an_cpu_work_verdict an_cpu_judge_work_locks(int64_t wall_ns, int64_t on_ns, int64_t preempted_ns,
                                            int64_t blocked_ns, int64_t futex_ns);
/* 1 when a sync stage of wall_ns spent more than AN_CPU_SPIN_PCT of it on-CPU. */
int an_cpu_spins(int64_t wall_ns, int64_t on_ns);
/* "compute-bound", "CPU-starved", "blocked", "lock-bound", or NULL for AN_CPU_NO_WORK. */
const char *an_cpu_verdict_name(an_cpu_work_verdict v);

/* A role's CPU figures over the analysed period: its threads with figures
 * (an_cpu_result threads whose status is perf), their work stages' self time
 * split, and its sync stage that spends the most time on-CPU. */
typedef struct an_cpu_role {
    uint32_t threads, threads_known;  /* the role's threads; of them, with CPU figures */
    int64_t work_wall_ns, work_on_ns, work_preempted_ns, work_blocked_ns;
    int64_t work_futex_ns;             /* of work_blocked_ns, in futex waits (cpu_blocks reasons) */
    int64_t sync_wall_ns, sync_on_ns;  /* all its sync stages */
    int32_t spin_stage;                /* the sync stage with the most on-CPU time that spins, -1 if none */
    int64_t spin_wall_ns, spin_on_ns;
    an_cpu_work_verdict verdict;
} an_cpu_role;

/* out[p->n_roles], from res (an_cpu_compute over the period). */
void an_cpu_roles(const an_pipe *p, const an_cpu_result *res, an_cpu_role *out);

#endif
