/* pipeline.h: the per-step model of a pipeline trace that `bottleneck`,
 * `diff` and `report` share (pipeline.c).
 *
 * One pass over every thread's events splits its wall time, per step window
 * (the time between two consecutive step marks), into self time per stage
 * and idle, and counts the ranges begun in each window; threads are then
 * added up per role. Roles are put in pipeline order (the trainer's names
 * loader -> target -> post -> drafter, main last; otherwise inferred from
 * which roles wait for input and which for output). Counters named like
 * *queue_depth* get time-weighted statistics over the same windows.
 *
 * On top of that model: per role loads over any run of windows (busy share,
 * waits by kind), the bottleneck verdict with its evidence and a what-if
 * bound (an_pipe_verdict), and the queue-side pairs (upstream wait_output
 * stages vs downstream wait_input stages).
 *
 * Memory: windows x roles x stages cells (at most AN_PIPE_MAX_CELLS; a trace
 * with more step windows than that groups consecutive steps into one bin, and
 * per-step values are then per-bin values divided by its steps), never
 * anything per range.
 */
#ifndef ANALYZE_PIPELINE_H
#define ANALYZE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "analyze.h"

#define AN_PIPE_MAX_CELLS (4u << 20)

typedef struct an_pipe_opts {
    uint32_t skip_steps;   /* leave out the first N step windows (warm-up) */
    uint32_t max_cells;    /* 0: AN_PIPE_MAX_CELLS (tests use less) */
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
int32_t an_pipe_role_index(const an_pipe *p, const char *name); /* -1 if absent */
/* The trainer's position of a role name (loader 0, target 1, post 2,
 * drafter 3, main 1000), or -1. */
int an_pipe_known_role(const char *name);
/* Is time in this kind the role's own (work, sync, comm, copy) or a wait on a
 * neighbour (wait_input, wait_output)? */
static inline int an_kind_is_busy(st_kind k) { return k != ST_WAIT_INPUT && k != ST_WAIT_OUTPUT; }

/* ---- loads and the verdict over bins [bin0, bin1) ---------------------------------------- */

/* What a role needs for the period's work. Without GPU activity: its busy
 * time. With it, a host thread's sync time is a wait on a device, which may
 * run other roles' work too (a shared GPU), so it is not the role's own
 * need: the role needs the larger of its host time without sync (work +
 * comm + copy) and the device time of the records it launched. */
typedef struct an_role_load {
    int64_t wall_ns;                  /* the role's threads' wall time added up */
    int64_t kind_ns[ST_KIND_COUNT];
    int64_t idle_ns, busy_ns;         /* busy: work + sync + comm + copy */
    double busy_pct, work_pct, idle_pct, kind_pct[ST_KIND_COUNT];
    double busy_per_step_ns;          /* per thread, per step (NaN without steps) */
    int32_t top_stage;                /* largest self-time work stage, -1 if none */
    int64_t top_stage_ns;
    /* GPU activity (all 0 / NaN / -1 without it) */
    int64_t device_ns;                /* its records' device time: per device the union, added up */
    int64_t host_ns;                  /* busy - sync with GPU activity, busy without */
    double device_pct, host_pct;      /* of wall_ns */
    int32_t top_device_stage;         /* the stage that launched the most device time, -1 if none */
    int64_t top_device_stage_ns;
    int device_bound;                 /* device_ns > host_ns: the need is device time */
    int64_t need_ns;                  /* max(host_ns, device_ns) with GPU activity, busy_ns without */
    double need_pct, need_per_step_ns; /* of wall_ns; per thread, per step (NaN without steps) */
} an_role_load;

/* A device's load over bins: busy time in total and per launching role. */
typedef struct an_device_load {
    int device;
    int64_t busy_ns, span_ns;         /* span: the period's length */
    double busy_pct;
    uint32_t n_roles_on;              /* roles that launched work on it */
    int32_t top_role;                 /* the role with the most device time on it, -1 if none */
    int64_t *role_ns;                 /* [n_roles], in the same block */
} an_device_load;

typedef struct an_verdict {
    uint32_t bin0, bin1;
    int64_t t0_ns, t1_ns;
    uint64_t steps, tokens;
    double step_ns, tokens_per_s;     /* NaN without steps / tokens */
    int32_t role, stage;              /* the bottleneck and its limiting stage, -1 if none */
    int saturated;                    /* busy >= AN_SATURATED_PCT */
    int32_t device;                   /* with GPU activity: index into p->devices when the bottleneck is a device
                                       * busier than any role needs (a GPU shared by roles), else -1; role and
                                       * stage are then its largest user and that role's top device stage */
    double load_pct;                  /* the bottleneck's need (a role's) or busy share (a device's) */
    int32_t down_role, up_role;       /* nearest downstream role waiting for input / upstream blocked on output */
    double down_wait_pct, up_wait_pct;
    /* what-if: the limiting stage `speedup` times faster */
    double speedup;
    double busy_after_ns;             /* the bottleneck's busy time per step after */
    double whatif_step_ns;            /* max over roles of busy per step, after */
    double whatif_factor;             /* throughput after / before (step_ns / whatif_step_ns) */
    double whatif_tokens_per_s;
    int32_t whatif_limit_role;        /* the role that limits after, -1 when a device does */
    int32_t whatif_limit_device;      /* the device (index) that limits after, -1 when a role does */
} an_verdict;

#define AN_SATURATED_PCT 50.0
#define AN_EVIDENCE_PCT 5.0
#define AN_DEVICE_MARGIN_PCT 5.0

/* loads: [n_roles]. */
void an_pipe_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1, an_role_load *loads);
/* Every device's load over bins [bin0, bin1): [n_devices] loads and their
 * role_ns in one malloc'd block (free()); NULL on no memory (printed). */
an_device_load *an_pipe_device_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1);
/* The verdict. Candidates are the roles (their need per thread) and, with
 * GPU activity, the devices (their busy time): a device wins only when it is
 * busier than every role's need by more than AN_DEVICE_MARGIN_PCT points,
 * which happens when roles (or several threads of one role) share it. */
void an_pipe_verdict(const an_pipe *p, uint32_t bin0, uint32_t bin1, const an_role_load *loads, double speedup,
                     an_verdict *v);
/* A role's self time per stage over bins: fills stage_ns[n_cols] (the last is idle). */
void an_pipe_stage_ns(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t role, int64_t *stage_ns);

/* Windows of `every` steps, as `intervals` has them: from the mark of a step
 * k*every to the next such mark (window k spans steps k*every+1 ..
 * (k+1)*every); bins before the first such mark and after the last are in
 * no window. With bins of several steps a window ends with the bin holding
 * its last boundary step. Window i is bins [first[i], first[i + 1]); returns
 * the number of windows (0 when no window is complete). Without steps (or
 * every 0): one window of every bin. first must hold n_bins + 1 entries. */
uint32_t an_pipe_windows(const an_pipe *p, uint64_t every, uint32_t *first);

/* The verdict of each window of `every` steps (see an_pipe_windows). */
typedef struct an_window_verdict {
    uint32_t bin0, bin1;
    uint64_t step_first, step_last;
    uint64_t index;                   /* as intervals numbers it: (step_last - 1) / every */
    double tokens_per_s;              /* NaN without tokens */
    int32_t role, stage;              /* bottleneck, -1 if none (with device >= 0: the device's largest user) */
    int32_t device;                   /* as an_verdict's */
    double busy_pct;                  /* the bottleneck's load_pct */
    int moved;                        /* the bottleneck differs from the previous window's */
} an_window_verdict;
/* *out: malloc'd [return value] windows; returns 0 with *out NULL on no memory (printed). */
uint32_t an_pipe_window_verdicts(const an_pipe *p, uint64_t every, an_window_verdict **out);

/* The verdict as plain sentences, one per line (malloc'd; NULL on no
 * memory): the bottleneck and its busy share, the limiting stage, the
 * evidence from its neighbours' waits, the what-if bound, whether the
 * bottleneck moved between windows, the role order used. Names are
 * sanitized (control characters shown as '?'). */
char *an_pipe_story(const an_pipe *p, const an_role_load *loads, const an_verdict *v, const an_window_verdict *w,
                    uint32_t n_windows, uint64_t every);

/* A verdict's bottleneck for a line of text: the role's name, "GPU 0
 * (target)" for a device and its largest user, or "none". */
const char *an_pipe_label(const an_pipe *p, int32_t role, int32_t device, char *buf, size_t size);
/* A name from the trace for a line of text: control characters as '?'. */
const char *an_clean(const char *s, char *buf, size_t size);
/* Percent with one decimal, rounded half up like the profile lines: "62.5%". */
const char *an_fmt_pct1(double pct, char *buf, size_t size);

/* ---- GPU records in time slices --------------------------------------------------------
 * A long run holds tens of millions of GPU records; the analyses read them a
 * time slice at a time (about an_gpu_slice_records records each, judged by
 * the chunk headers), so that memory follows the slice, not the trace. */
extern uint32_t an_gpu_slice_records; /* default AN_GPU_SLICE_RECORDS; tests lower it */
#define AN_GPU_SLICE_RECORDS (1u << 16)
/* The devices that hold records, ascending (*out malloc'd, NULL when none).
 * Returns an exit code. */
int an_gpu_devices(an_trace *t, int32_t **out, uint32_t *n);
/* Calls fn for every record of `device` (kernels, copies, memsets: not
 * syncs, which are host waits) whose start is in [t0, t1), in start order
 * (ties: the longer first), with its launching thread and stage. The row's
 * name is valid during the call. fn returns 0 to go on; anything else stops
 * and is returned. Returns an exit code (errors printed) or fn's. */
typedef int (*an_gpu_fn)(const st_gpu_row *row, void *arg);
int an_gpu_each(an_trace *t, int32_t device, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg);
/* The same for the CUDA API calls (st_gpu_api_iter_open) starting in [t0,
 * t1), in order of (thread, start), the enclosing call first. */
int an_gpu_api_each(an_trace *t, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg);

/* GPU idle time per device over [t0, t1), split by cause as HTA does.
 * Busy: the union of the device's kernels, copies and memsets (sync records
 * are host waits, not device work), clipped to the window. Each idle gap
 * ends where a record R starts (the gap before the first record in the
 * window starts at t0); L is the start of the API call that launched R:
 *   host_wait  = the part of the gap before L (nothing was queued: the
 *                device waited for the host to issue R);
 *   launch_gap = the rest, from max(L, gap start) to R's start, when at most
 *                AN_GPU_LAUNCH_GAP_MAX_NS (launch overhead);
 *   other      = the rest when longer (dependencies: events, other streams),
 *                gaps whose L is unknown, and the gap after the last record.
 * Each host-wait part is split by the innermost stage open on R's launching
 * thread at each instant (time in no range counts as stage -1, "(no
 * stage)"): waits[n_waits] holds the host wait per (thread, stage), largest
 * first. host_stage/host_thread/host_stage_ns are its largest entry
 * (host_stage -1 when that is time in no stage; host_thread -1 with no host
 * wait). Returns 0 devices and *note "no GPU activity in this trace" when
 * there is none. Returns an exit code; free with an_gpu_idle_free. */
#define AN_GPU_LAUNCH_GAP_MAX_NS 50000
typedef struct an_gpu_wait {
    int64_t thread, stage, ns;
} an_gpu_wait;
typedef struct an_gpu_idle {
    int device;
    int64_t busy_ns, idle_ns, host_wait_ns, launch_gap_ns, other_ns;
    uint64_t n_records;
    int64_t host_stage, host_stage_ns, host_thread;
    an_gpu_wait *waits;
    uint32_t n_waits;
} an_gpu_idle;
int an_gpu_idle_split(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_idle **out, uint32_t *n,
                      const char **note);
void an_gpu_idle_free(an_gpu_idle *d, uint32_t n);
/* The window the GPU split describes. w NULL or AN_WIN_ALL: the steady
 * state, from the second step mark (step 1's in the trainer's traces: the
 * first step holds start-up) to the last (the two marks with exactly two,
 * [all_t0, all_t1) with fewer); otherwise an_window_resolve's. desc gets
 * e.g. "steps 1:20 (0.010-0.200 s, the first step left out as start-up)".
 * Returns an exit code (a bad --steps/--time is printed). */
int an_gpu_window(const an_trace *t, const an_window_spec *w, int64_t all_t0, int64_t all_t1, int64_t *t0_ns,
                  int64_t *t1_ns, char *desc, size_t desc_size);
/* The split as one sentence per device, joined by "; " (malloc'd; NULL on
 * no memory), e.g. "GPU 0 busy 61.0%, idle 120.000 ms: host wait 80.000 ms
 * (mostly while target0 is in 'postprocess', 50.000 ms: the device is
 * host-bound there; make that stage asynchronous or move it off the
 * launching thread), launch gaps 1.000 ms, other 39.000 ms". note when
 * there are no devices. */
char *an_gpu_idle_text(const an_trace *t, const an_gpu_idle *d, uint32_t n, const char *note);

/* The GPU idle line of `bottleneck` and `report`: the split over the
 * analysed window [v0, v1) intersected with an_gpu_window's steady state
 * (the analysed window alone when they do not meet), as text: "over steps
 * 1:20 (...): GPU 0 busy ..." with GPU activity, the note alone without.
 * *text malloc'd; *out and *n: the devices (an_gpu_idle_free). Returns an exit
 * code. */
int an_gpu_idle_steady(an_trace *t, int64_t v0, int64_t v1, an_gpu_idle **out, uint32_t *n, char **text);

/* ---- statistics of per-step samples ---------------------------------------------------
 * Median (sorts v in place; the mean of the middle two for an even count;
 * NaN when empty). Two-sided Mann-Whitney U test of a against b: the p-value
 * by the normal approximation, with the variance corrected for ties and a
 * continuity correction of 1/2; 1 when every value is tied; NaN when a side
 * is empty or there is no memory. *u_out (may be NULL) gets U of a. */
double an_median(double *v, size_t n);
double an_mann_whitney(const double *a, size_t n1, const double *b, size_t n2, double *u_out);

/* ---- counter samples of one counter, every thread merged in time order -------------- */
typedef struct an_counter_merge an_counter_merge;
int an_counter_merge_open(an_counter_merge **out, an_trace *t, uint32_t counter);
int an_counter_merge_next(an_counter_merge *m, int64_t *ts_ns, double *value); /* 1, 0 done, <0 error */
void an_counter_merge_close(an_counter_merge *m);

#endif
