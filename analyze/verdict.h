/* verdict.h: what `bottleneck`, `report` and `diff` judge from the model
 * (verdict.c): per role loads over any run of step windows (busy share,
 * waits by kind, need with GPU activity), per device loads, the bottleneck
 * verdict with its evidence and a what-if bound, the verdict per window of N
 * steps, and the verdict told as sentences (the "story").
 */
#ifndef ANALYZE_VERDICT_H
#define ANALYZE_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

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

/* The roles table of `bottleneck` (text, CSV, JSON) and `report` (HTML),
 * built once here: one row per role, in pipeline order. Shares are of the
 * role's wall time; host and gpu mean something only with GPU activity
 * (p->n_devices); per-step values and the capacity (tokens per step / need
 * per step) are NaN when unknown; names are NULL when there is none. */
typedef struct an_role_row {
    const char *role;              /* borrowed from the reader */
    uint32_t threads;
    double busy_pct, work_pct, idle_pct;
    double kind_pct[5];            /* wait_input, wait_output, sync, comm, copy */
    double host_pct, gpu_pct;
    double busy_ms_per_step, need_ms_per_step, capacity_tokens_per_s;
    const char *top_stage;         /* the largest work stage */
    double top_stage_pct;          /* NaN without one */
    const char *top_gpu_stage;     /* the stage that launched the most GPU time */
    const char *bottleneck;        /* "yes", "its GPU" (a device is, this role its largest user), or NULL */
} an_role_row;
/* The kinds of an_role_row's kind_pct, in order. */
extern const st_kind an_role_row_kinds[5];
/* malloc'd [p->n_roles]; NULL on no memory (printed). */
an_role_row *an_roles_table(const an_pipe *p, const an_role_load *loads, const an_verdict *v);

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

#endif
