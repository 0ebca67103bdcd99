/* diff_cpu.h: the CPU part of `analyze diff A B` (diff_cpu.c;
 * docs/analyze.md, "diff", "With the CPU capture"): each (role, stage)'s
 * on-CPU time per step in A and B, compared like diff's stage times
 * (medians, Mann-Whitney U), and each stage's functions whose CPU time grew,
 * judged on their sample counts with a binomial test, and apart, the same
 * for the Python functions of the Python-frame samples (python_stacks
 * 'frames': wall time, innermost Python frame). Only when both traces
 * have the CPU tables; with them in one, a line says so; with none, nothing
 * is printed.
 */
#ifndef AN_DIFF_CPU_H
#define AN_DIFF_CPU_H

#include "cpu.h"
#include "model.h"

/* A function grows beyond noise when p < alpha / (functions tested) and its
 * CPU time per step in B is at least this many times A's. */
#define AN_DIFF_CPU_MIN_RATIO 1.2

typedef struct an_diff_cpu_stage {
    const char *role, *stage, *kind; /* stage NULL: idle (no range open) */
    double median_a, median_b, mean_a, mean_b; /* on-CPU ns per step per thread */
    double on_pct_a, on_pct_b;      /* of the stage's self time over the period (threads with figures) */
    double p;
    int tested, significant;
} an_diff_cpu_stage;

typedef struct an_diff_cpu_fn {
    uint32_t role_order;            /* the role's index in A's model */
    const char *role, *stage;       /* stage NULL: idle */
    const char *name, *file;        /* file: the mapping's file name (no directory) */
    uint64_t samples_a, samples_b;
    double ms_a, ms_b;              /* CPU ms per step per thread */
    double p;
    int grew;
} an_diff_cpu_fn;

typedef struct an_diff_cpu {
    int has_a, has_b;               /* the traces' CPU tables */
    an_cpu_result res[2];
    an_diff_cpu_stage *stages;
    uint32_t n_stages;
    an_diff_cpu_fn *fns;            /* per (role, stage): its growing functions, top `top` by the change */
    uint32_t n_fns;
    uint32_t n_tested;              /* functions tested: alpha is divided by it */
    /* The Python-frame samples' innermost functions, tested the same way
     * apart (ms: wall ms per step per sampled thread, 1 / python_frames_hz
     * s per sample; file: the frame's file); has_py_*: the trace has such
     * samples in the analysed period. */
    int has_py_a, has_py_b;
    an_diff_cpu_fn *py_fns;
    uint32_t n_py_fns, n_py_tested;
    double alpha;
} an_diff_cpu;

/* From the two traces' models (the same period as diff's). 0, or an exit
 * code after the message. */
int an_diff_cpu_compute(an_diff_cpu *d, an_trace *ta, const an_pipe *pa, an_trace *tb, const an_pipe *pb, double alpha,
                        uint64_t top);
/* The summary lines (text only) and the tables cpu_stages, cpu_functions. */
void an_diff_cpu_lines(an_out *out, const an_diff_cpu *d);
void an_diff_cpu_tables(an_out *out, const an_diff_cpu *d);
void an_diff_cpu_free(an_diff_cpu *d);

#endif
