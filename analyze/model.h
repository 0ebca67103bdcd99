/* model.h: the per-step model of a pipeline trace that `bottleneck`, `diff`
 * and `report` share (model.c).
 *
 * One pass over every thread's events splits its wall time, per step window
 * (the time between two consecutive step marks), into self time per stage
 * and idle, and counts the ranges begun in each window; threads are then
 * added up per role. Roles are put in pipeline order (the trainer's names
 * loader -> target -> post -> drafter, main last; otherwise inferred from
 * which roles wait for input and which for output). Counters named like
 * *queue_depth* get time-weighted statistics over the same windows (their
 * samples merged across threads by queues.c), and GPU records their busy time per window and launching role
 * (read through gpu_activity.h, once per command).
 *
 * What is judged from the model lives beside it: the loads, the verdict and
 * its sentences in verdict.h; the per-step statistics of `diff` in
 * diff_stats.h.
 *
 * Memory: windows x roles x stages cells (at most AN_PIPE_MAX_CELLS; a trace
 * with more step windows than that groups consecutive steps into one bin, and
 * per-step values are then per-bin values divided by its steps), never
 * anything per range.
 */
#ifndef ANALYZE_MODEL_H
#define ANALYZE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "analyze.h"
#include "gpu_activity.h"

#define AN_PIPE_MAX_CELLS (4u << 20)

typedef struct an_pipe_opts {
    uint32_t skip_steps;   /* leave out the first N step windows (warm-up) */
    uint32_t max_cells;    /* 0: AN_PIPE_MAX_CELLS (tests use less) */
    /* Read in the same pass as the model's GPU busy time, so that a command
     * reads each GPU record once: */
    int gpu_idle;          /* 1: the steady-state idle split over the period (an_gpu_idle_steady's) */
    an_gpu_fn gpu_record;  /* called with every GPU record starting in the period [bin_t[0], bin_t[n_bins]) */
    void *gpu_record_arg;
} an_pipe_opts;

/* A counter named like *queue_depth*, time-weighted: the value holds from
 * one sample to the next (samples of every thread merged in time order);
 * time before its first sample is not covered. */
typedef struct an_pipe_queue {
    uint32_t counter;
    const char *name, *unit;
    uint64_t n_samples;      /* in the analysed period */
    int64_t covered_ns;      /* time with a known value in the period */
    double mean, min, max;   /* NaN when nothing is covered */
    int64_t at_max_ns, at_zero_ns;
    double *bin_mean, *bin_max; /* [n_bins]; NaN where not covered */
} an_pipe_queue;

typedef struct an_pipe {
    an_trace *trace;
    /* roles, in pipeline order */
    uint32_t n_roles;
    const char **role_names;   /* borrowed from the reader */
    uint32_t *role_threads;    /* threads of each role */
    int order_inferred;        /* 0: the trainer's role names; 1: inferred */
    uint32_t n_threads;
    uint32_t *thread_role;     /* [reader thread index] -> role */
    uint32_t n_stages;         /* stage ids; column n_stages of self_ns is idle */
    uint32_t n_cols;           /* n_stages + 1 */
    /* bins: [bin_t[b], bin_t[b + 1]) */
    int has_steps;             /* at least two step marks after skipping */
    uint32_t n_bins, steps_per_bin;
    int64_t *bin_t;            /* [n_bins + 1] */
    uint64_t *bin_step_first, *bin_step_last; /* step numbers of the first and last mark closing it */
    uint64_t step_open;        /* step number of the mark opening bin 0 */
    uint32_t *bin_steps;       /* marks closing in the bin (0 without steps) */
    uint64_t *bin_tokens;
    int64_t *self_ns;          /* [(bin * n_roles + role) * n_cols + col], all the role's threads */
    uint32_t *count;           /* [(bin * n_roles + role) * n_stages + stage], ranges begun */
    uint32_t n_queues;
    an_pipe_queue *queues;
    /* GPU activity (trainer --trace-gpu), per bin; n_devices 0 without it.
     * A device's busy time is the union of its kernels, copies and memsets
     * clipped to the bin, in total and per launching role (the union of that
     * role's records; records of an unknown thread count in the total only).
     * Per role and stage: the device time of the records launched while the
     * role's thread was in that stage (their clipped durations added up). */
    uint32_t n_devices;
    int32_t *devices;          /* device numbers, ascending */
    int64_t *dev_ns;           /* [(bin * n_devices + dev) * (n_roles + 1) + role]; role n_roles: the total */
    int64_t *dev_stage_ns;     /* [(bin * n_roles + role) * n_stages + stage] */
    /* With GPU recording paused in the period (gpu_pauses, the sampled
     * capture): each bin's recorded time, its length less the paused time;
     * NULL when nothing was paused. dev_ns and dev_stage_ns hold what was
     * recorded; an_pipe_dev_scale turns them into estimates for whole bins. */
    int64_t *bin_rec_ns;
    /* With opts gpu_idle: an_gpu_idle_steady(trace, bin_t[0], bin_t[n_bins]). */
    an_gpu_idle *gpu_idle;
    uint32_t n_gpu_idle;
    char *gpu_idle_text;
} an_pipe;

/* Reads the trace; prints its own errors and returns an exit code. */
int an_pipe_compute(an_pipe *p, an_trace *t, const an_pipe_opts *opts);
void an_pipe_free(an_pipe *p);

static inline int64_t an_pipe_self(const an_pipe *p, uint32_t bin, uint32_t role, uint32_t col)
{
    return p->self_ns[((size_t)bin * p->n_roles + role) * p->n_cols + col];
}
static inline uint32_t an_pipe_count(const an_pipe *p, uint32_t bin, uint32_t role, uint32_t stage)
{
    return p->count[((size_t)bin * p->n_roles + role) * p->n_stages + stage];
}
static inline int64_t an_pipe_dev(const an_pipe *p, uint32_t bin, uint32_t dev, uint32_t role)
{
    return p->dev_ns[((size_t)bin * p->n_devices + dev) * (p->n_roles + 1) + role];
}
/* The factor from recorded device time over bins [bin0, bin1) to its
 * estimate for their whole length: length / recorded time (1 when nothing
 * was paused; 0 when nothing was recorded: device time unknown). */
double an_pipe_dev_scale(const an_pipe *p, uint32_t bin0, uint32_t bin1);
int32_t an_pipe_role_index(const an_pipe *p, const char *name); /* -1 if absent */
/* The trainer's position of a role name (loader 0, target 1, post 2,
 * drafter 3, main 1000), or -1. */
int an_pipe_known_role(const char *name);
/* Is time in this kind the role's own (work, sync, comm, copy) or a wait on a
 * neighbour (wait_input, wait_output)? */
static inline int an_kind_is_busy(st_kind k) { return k != ST_WAIT_INPUT && k != ST_WAIT_OUTPUT; }

/* Bin of time ts: -1 before the first, n_bins at or after the end. */
static inline int64_t an_pipe_bin_of(const an_pipe *p, int64_t ts)
{
    uint32_t lo = 0, hi = p->n_bins + 1; /* boundaries <= ts */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->bin_t[mid] <= ts) lo = mid + 1;
        else hi = mid;
    }
    return (int64_t)lo - 1;
}

/* The queue-depth statistics of the model: fills p->queues and
 * p->n_queues once the bins are set. Returns an exit code (errors printed). */
int an_pipe_read_queues(an_pipe *p);

#endif
