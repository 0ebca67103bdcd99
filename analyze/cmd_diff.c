/* cmd_diff.c: `analyze diff A B`: what changed between two traces, role by
 * role and stage by stage, judged on per-step distributions.
 *
 * Each trace goes through the per-step model of model.c: for every step
 * window (between consecutive step marks) and every (role, stage), the self
 * time of the role's threads added up and divided by its thread count (the
 * role's average thread). Roles and stages are matched by name, so traces
 * with different thread counts compare. For each (role, stage) the two
 * samples of per-step times give medians, the change in ms and %, and a
 * two-sided Mann-Whitney U test (normal approximation with tie and
 * continuity corrections) of whether the change is beyond run-to-run noise.
 * Also: ranges begun per step per thread (a count that doubles is work done
 * twice), tokens/s of each trace and their ratio, the step time, and the top
 * changes by their effect on the step time (the change of the mean time per
 * step: means add up to the step time, medians do not).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "diff_cpu.h"
#include "diff_stats.h"
#include "verdict.h"

static const char help[] =
    "usage: analyze diff [--alpha P] [--top N] [--skip-steps N]\n"
    "                    [--format text|csv|json [--table NAME]] A B\n"
    "\n"
    "Compares trace B with trace A, role by role and stage by stage (matched by name, so\n"
    "the thread counts may differ), on per-step distributions rather than totals.\n"
    "\n"
    "Per-step time of a (role, stage): its self time (nested ranges not counted twice) in\n"
    "each step window, from one step mark to the next, added up over the role's threads and\n"
    "divided by their number. Each trace gives one value per step; the two samples give the\n"
    "medians, the change of the median in ms and in %, and a two-sided Mann-Whitney U test\n"
    "(normal approximation, corrected for ties and continuity): p_value is the chance of a\n"
    "difference at least this large between two runs of the same program; 'significant'\n"
    "means p < alpha (default 0.01) with at least 8 steps in each trace. Consecutive steps\n"
    "are not independent, so p is optimistic on traces with slow drifts: read it with the\n"
    "size of the change. 'idle' is the time in no range.\n"
    "count_a, count_b: ranges begun per step per thread; a ratio of 2 is work done twice.\n"
    "Top changes: stages ordered by the absolute change of their mean time per step (the\n"
    "means of a role's stages add up to its step time, so this is each stage's share of the\n"
    "change in step time). Throughput: tokens/s of each (tokens after the first mark / time\n"
    "from the first mark to the last) and B/A; step time: per-step durations, compared the\n"
    "same way.\n"
    "With GPU activity in both traces (trainer --trace-gpu): gpu_busy compares each GPU's busy\n"
    "time per step (the union of its kernels, copies and memsets in each step window), in all\n"
    "and per launching role, the same way; kernels compares each kernel (by name, all devices)\n"
    "over the analysed steps: launches and GPU ms per step in A and B, largest change of the\n"
    "time first. A kernel launched 1.5x as often or more (or as seldom) is named in the\n"
    "summary: the same work launched twice shows here.\n"
    "With the CPU capture in both traces (--trace-cpu): cpu_stages compares each stage's\n"
    "on-CPU time per step the same way; cpu_functions lists per stage the leaf functions\n"
    "whose CPU time per step grew, grown when a binomial test of their sample counts gives\n"
    "p < alpha / (functions tested) and B is at least 1.2x A. With Python-frame samples in\n"
    "both (python_stacks='frames'), cpu_python_functions does the same, apart, for the\n"
    "innermost Python functions of those samples (wall time, 1/python_frames_hz s each).\n"
    "\n"
    "options:\n"
    "  --alpha P       significance level (default 0.01)\n"
    "  --top N         rows of the top-changes and kernels tables (default 10)\n"
    "  --skip-steps N  leave out the first N steps of each trace (warm-up)\n"
    "  --format F      text (default: a summary, then the tables), csv or json (tables:\n"
    "                  runs, throughput, stages, top_changes; with GPU activity also\n"
    "                  gpu_busy and kernels)\n"
    "  --table NAME    only the table NAME (with --format csv or json): runs, throughput,\n"
    "                  stages, top_changes, gpu_busy, kernels, cpu_stages, cpu_functions,\n                  cpu_python_functions\n"
    "  --align MODE    a rank set's clocks: auto (default), meta, collectives or none\n"
    "                  (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_ALPHA = 1, OPT_TOP, OPT_SKIP };
static const an_opt opts[] = {
    {"alpha", 1, OPT_ALPHA}, {"top", 1, OPT_TOP}, {"skip-steps", 1, OPT_SKIP},
    {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE}, {"help", 0, AN_OPT_HELP}, {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

#define MIN_STEPS_FOR_TEST 8
#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static double mean_of(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    return n ? s / (double)n : NAN;
}

/* ---- per-step samples of one trace ----------------------------------------------------------- */

typedef struct side {
    an_trace trace;
    int opened;
    an_pipe pipe;
    double *step_ns;     /* [n_bins] step duration (per step) */
    double tokens_per_s;
    uint64_t steps, tokens;
    int64_t period_ns;
} side;

/* Per-step time of (role, col) in every bin: ns per step per thread. */
static void samples_of(const an_pipe *p, uint32_t role, uint32_t col, double *out)
{
    for (uint32_t b = 0; b < p->n_bins; b++)
        out[b] = (double)an_pipe_self(p, b, role, col) / p->role_threads[role] / (p->bin_steps[b] ? p->bin_steps[b] : 1);
}

static double count_per_step(const side *s, uint32_t role, uint32_t stage)
{
    uint64_t c = 0;
    for (uint32_t b = 0; b < s->pipe.n_bins; b++) c += an_pipe_count(&s->pipe, b, role, stage);
    return s->steps ? (double)c / s->pipe.role_threads[role] / (double)s->steps : NAN;
}

/* ---- the comparison ------------------------------------------------------------------------------ */

typedef struct change {
    const char *role, *stage;  /* stage NULL: idle */
    const char *kind;
    int32_t role_a, role_b, col_a, col_b; /* -1: absent */
    uint32_t order;            /* role position for sorting */
    double median_a, median_b, mean_a, mean_b; /* ns per step */
    double p, count_a, count_b;
    int significant, tested;
} change;

static int32_t stage_col(const an_pipe *p, const char *name)
{
    if (!name) return (int32_t)p->n_stages; /* idle */
    for (uint32_t s = 0; s < p->n_stages; s++)
        if (strcmp(st_reader_stage(p->trace->r, s)->name, name) == 0) return (int32_t)s;
    return -1;
}

static int role_has(const an_pipe *p, int32_t role, int32_t col)
{
    if (role < 0 || col < 0) return 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        if (an_pipe_self(p, b, (uint32_t)role, (uint32_t)col)) return 1;
        if (col < (int32_t)p->n_stages && an_pipe_count(p, b, (uint32_t)role, (uint32_t)col)) return 1;
    }
    return 0;
}


/* Fills c's statistics from the two sides. */
static int compare_one(change *c, const side *a, const side *b, double alpha, double *buf_a, double *buf_b)
{
    size_t na = 0, nb = 0;
    c->median_a = c->median_b = c->mean_a = c->mean_b = c->p = c->count_a = c->count_b = NAN;
    /* A role present in a trace without this stage: zero time in every step. */
    if (c->role_a >= 0) {
        na = a->pipe.n_bins;
        if (c->col_a >= 0) samples_of(&a->pipe, (uint32_t)c->role_a, (uint32_t)c->col_a, buf_a);
        else memset(buf_a, 0, na * sizeof *buf_a);
        c->mean_a = mean_of(buf_a, na);
        c->count_a = c->stage ? (c->col_a >= 0 ? count_per_step(a, (uint32_t)c->role_a, (uint32_t)c->col_a) : 0) : NAN;
    }
    if (c->role_b >= 0) {
        nb = b->pipe.n_bins;
        if (c->col_b >= 0) samples_of(&b->pipe, (uint32_t)c->role_b, (uint32_t)c->col_b, buf_b);
        else memset(buf_b, 0, nb * sizeof *buf_b);
        c->mean_b = mean_of(buf_b, nb);
        c->count_b = c->stage ? (c->col_b >= 0 ? count_per_step(b, (uint32_t)c->role_b, (uint32_t)c->col_b) : 0) : NAN;
    }
    if (na && nb) {
        c->p = an_mann_whitney(buf_a, na, buf_b, nb, NULL);
        if (isnan(c->p)) return oom();
        c->tested = 1;
        c->significant = na >= MIN_STEPS_FOR_TEST && nb >= MIN_STEPS_FOR_TEST && c->p < alpha;
    }
    if (na) c->median_a = an_median(buf_a, na);
    if (nb) c->median_b = an_median(buf_b, nb);
    return AN_EXIT_OK;
}

static int cmp_changes_table(const void *x, const void *y)
{
    const change *a = x, *b = y;
    if (a->order != b->order) return a->order < b->order ? -1 : 1;
    int c = strcmp(a->role, b->role);
    if (c) return c;
    if (!a->stage != !b->stage) return a->stage ? -1 : 1; /* idle last */
    double ka = fmax(isnan(a->mean_a) ? 0 : a->mean_a, isnan(a->mean_b) ? 0 : a->mean_b);
    double kb = fmax(isnan(b->mean_a) ? 0 : b->mean_a, isnan(b->mean_b) ? 0 : b->mean_b);
    if (ka != kb) return ka > kb ? -1 : 1;
    return a->stage && b->stage ? strcmp(a->stage, b->stage) : 0;
}

static double impact(const change *c)
{
    if (isnan(c->mean_a) || isnan(c->mean_b)) return 0;
    return c->mean_b - c->mean_a;
}

static int cmp_impact(const void *x, const void *y)
{
    const change *a = *(const change *const *)x, *b = *(const change *const *)y;
    double ka = fabs(impact(a)), kb = fabs(impact(b));
    if (ka != kb) return ka > kb ? -1 : 1;
    int c = strcmp(a->role, b->role);
    return c ? c : strcmp(a->stage ? a->stage : "", b->stage ? b->stage : "");
}

/* Every (role, stage) with time or ranges in either trace, plus each role's idle. */
static int collect(const side *a, const side *b, change **out, uint32_t *n_out)
{
    const an_pipe *pa = &a->pipe, *pb = &b->pipe;
    size_t cap = (size_t)(pa->n_roles + pb->n_roles) * (pa->n_cols + pb->n_cols) + 1, n = 0;
    change *cs = calloc(cap, sizeof *cs);
    if (!cs) return oom();
    for (int which = 0; which < 2; which++) {
        const an_pipe *p = which ? pb : pa, *q = which ? pa : pb;
        for (uint32_t r = 0; r < p->n_roles; r++) {
            const char *role = p->role_names[r];
            int32_t qr = an_pipe_role_index(q, role);
            if (which && qr >= 0) continue; /* done from A */
            for (uint32_t col = 0; col < p->n_cols; col++) {
                const char *stage = col < p->n_stages ? st_reader_stage(p->trace->r, col)->name : NULL;
                int32_t qcol = stage_col(q, stage);
                if (!role_has(p, (int32_t)r, (int32_t)col) && !role_has(q, qr, qcol)) continue;
                change *c = &cs[n++];
                c->role = role;
                c->stage = stage;
                c->kind = stage ? st_kind_name(st_reader_stage(p->trace->r, col)->kind) : NULL;
                c->role_a = which ? qr : (int32_t)r;
                c->col_a = which ? qcol : (int32_t)col;
                c->role_b = which ? (int32_t)r : qr;
                c->col_b = which ? (int32_t)col : qcol;
                c->order = which ? 1000 + r : r;
            }
            /* Stages only B has, for a role both have. */
            if (!which && qr >= 0) {
                for (uint32_t qc = 0; qc < q->n_stages; qc++) {
                    const char *stage = st_reader_stage(q->trace->r, qc)->name;
                    if (stage_col(p, stage) >= 0 || !role_has(q, qr, (int32_t)qc)) continue;
                    change *c = &cs[n++];
                    c->role = role;
                    c->stage = stage;
                    c->kind = st_kind_name(st_reader_stage(q->trace->r, qc)->kind);
                    c->role_a = (int32_t)r;
                    c->col_a = -1;
                    c->role_b = qr;
                    c->col_b = (int32_t)qc;
                    c->order = r;
                }
            }
        }
    }
    *out = cs;
    *n_out = (uint32_t)n;
    return AN_EXIT_OK;
}

/* ---- GPU activity ----------------------------------------------------------------------------------- */

/* Busy time per step of (device, role) in every bin of one trace; role < 0:
 * the device's total. 0 in every bin where the trace lacks the device or role.
 * A bin in which GPU recording was partly paused counts its recorded time
 * scaled to the bin (an_pipe_dev_scale); one with nothing recorded is left
 * out. Returns the number of values in out. */
static uint32_t gpu_samples(const an_pipe *p, int device, const char *role, double *out)
{
    int32_t d = -1, r = role ? an_pipe_role_index(p, role) : (int32_t)p->n_roles;
    for (uint32_t i = 0; i < p->n_devices; i++)
        if (p->devices[i] == device) d = (int32_t)i;
    uint32_t n = 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        double scale = an_pipe_dev_scale(p, b, b + 1);
        if (!(scale > 0)) continue;
        out[n++] = d >= 0 && r >= 0 ? scale * (double)an_pipe_dev(p, b, (uint32_t)d, (uint32_t)r) /
                                          (p->bin_steps[b] ? p->bin_steps[b] : 1)
                                    : 0.0;
    }
    return n;
}

typedef struct gpu_change {
    int device;
    const char *role; /* NULL: the device's total */
    double median_a, median_b, mean_a, mean_b, p;
    int significant, tested;
} gpu_change;

/* Every device of either trace, in all and per role that launched on it. */
static int gpu_collect(const side *a, const side *b, double alpha, double *buf_a, double *buf_b, gpu_change **out,
                       uint32_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    const an_pipe *pa = &a->pipe, *pb = &b->pipe;
    size_t cap = (size_t)(pa->n_devices + pb->n_devices) * (pa->n_roles + pb->n_roles + 1) + 1, n = 0;
    gpu_change *v = calloc(cap, sizeof *v);
    if (!v) return oom();
    for (int which = 0; which < 2; which++) {
        const an_pipe *p = which ? pb : pa, *q = which ? pa : pb;
        for (uint32_t d = 0; d < p->n_devices; d++) {
            int dev = p->devices[d], seen = 0;
            for (uint32_t e = 0; e < q->n_devices && which; e++) seen |= q->devices[e] == dev;
            if (seen) continue; /* done from A */
            for (int64_t r = -1; r < (int64_t)p->n_roles + (int64_t)q->n_roles; r++) {
                const char *role = r < 0 ? NULL : r < p->n_roles ? p->role_names[r] : q->role_names[r - p->n_roles];
                if (r >= p->n_roles && an_pipe_role_index(p, role) >= 0) continue; /* listed from p */
                gpu_change *c = &v[n];
                c->device = dev;
                c->role = role;
                uint32_t na = gpu_samples(pa, dev, role, buf_a);
                uint32_t nb = gpu_samples(pb, dev, role, buf_b);
                if (!na || !nb) continue; /* nothing recorded in one of them */
                c->mean_a = mean_of(buf_a, na);
                c->mean_b = mean_of(buf_b, nb);
                if (role && !(c->mean_a > 0) && !(c->mean_b > 0)) continue;
                c->p = an_mann_whitney(buf_a, na, buf_b, nb, NULL);
                if (isnan(c->p)) {
                    free(v);
                    return oom();
                }
                c->tested = 1;
                c->significant = na >= MIN_STEPS_FOR_TEST && nb >= MIN_STEPS_FOR_TEST && c->p < alpha;
                c->median_a = an_median(buf_a, na);
                c->median_b = an_median(buf_b, nb);
                n++;
            }
        }
    }
    *out = v;
    *n_out = (uint32_t)n;
    return AN_EXIT_OK;
}

typedef struct kernel_change {
    char *name;
    uint64_t count[2];
    int64_t ns[2];
    double change_ns; /* GPU ns per step, B - A */
} kernel_change;

typedef struct kernel_set {
    kernel_change *slot; /* open addressing on the name */
    size_t cap, len;
} kernel_set;

static kernel_change *kernel_slot(kernel_set *k, const char *name)
{
    if (k->len * 2 >= k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 256;
        kernel_change *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < k->cap; i++) {
            if (!k->slot[i].name) continue;
            size_t h = an_hash_name(k->slot[i].name) & (cap - 1);
            while (t[h].name) h = (h + 1) & (cap - 1);
            t[h] = k->slot[i];
        }
        free(k->slot);
        k->slot = t;
        k->cap = cap;
    }
    size_t h = an_hash_name(name) & (k->cap - 1);
    while (k->slot[h].name && strcmp(k->slot[h].name, name) != 0) h = (h + 1) & (k->cap - 1);
    if (!k->slot[h].name) {
        if (!(k->slot[h].name = strdup(name))) return NULL;
        k->len++;
    }
    return &k->slot[h];
}

/* Kernels launched in the analysed period of trace `which` (a kernel counts
 * where it starts), by name over all devices: the model's reader of the
 * period's GPU records (an_pipe_opts gpu_record), so each is read once. */
typedef struct kernel_pass {
    kernel_set *k;
    int which;
} kernel_pass;

static int add_kernel_record(const st_gpu_row *g, void *arg)
{
    kernel_pass *kp = arg;
    if (g->rec.kind != ST_GPU_KERNEL) return 0;
    kernel_change *c = kernel_slot(kp->k, g->name ? an_demangle(g->name) : "?");
    if (!c) return oom();
    c->count[kp->which]++;
    c->ns[kp->which] += g->rec.dur_ns;
    return 0;
}

static double per_step(uint64_t v, uint64_t steps) { return steps ? (double)v / (double)steps : NAN; }

static int cmp_kernel_change(const void *x, const void *y)
{
    const kernel_change *a = x, *b = y;
    double ka = fabs(a->change_ns), kb = fabs(b->change_ns);
    if (ka != kb) return ka > kb ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Both traces' kernels, compacted and ordered by the change of their GPU
 * time per step, largest first. */
static void kernel_set_free(kernel_set *k)
{
    for (size_t i = 0; i < k->cap; i++) free(k->slot[i].name);
    free(k->slot);
    memset(k, 0, sizeof *k);
}

/* Takes the slots of k (filled while each trace's model was read: opts
 * gpu_record) and leaves it empty. */
static int kernel_changes(const side *s, kernel_set *kset, kernel_change **out, size_t *n_out)
{
    kernel_set k = *kset;
    memset(kset, 0, sizeof *kset);
    int rc = AN_EXIT_OK;
    size_t n = 0;
    for (size_t i = 0; i < k.cap; i++) {
        if (!k.slot[i].name) continue;
        if (rc) {
            free(k.slot[i].name);
            continue;
        }
        kernel_change *c = &k.slot[n++];
        *c = k.slot[i];
        c->change_ns = per_step((uint64_t)c->ns[1], s[1].steps) - per_step((uint64_t)c->ns[0], s[0].steps);
    }
    if (rc) {
        free(k.slot);
        return rc;
    }
    if (n) qsort(k.slot, n, sizeof *k.slot, cmp_kernel_change);
    *out = k.slot;
    *n_out = n;
    return AN_EXIT_OK;
}

/* ---- output ------------------------------------------------------------------------------------------ */

static const an_col run_cols[] = {
    {"trace", AN_T_STR, 0},      {"file", AN_T_STR, 0},          {"program", AN_T_STR, 0},
    {"steps", AN_T_INT, 0},      {"period_s", AN_T_REAL, 6},     {"tokens", AN_T_INT, 0},
    {"tokens_per_s", AN_T_REAL, 1}, {"step_median_ms", AN_T_REAL, 3}, {"step_mean_ms", AN_T_REAL, 3},
    {"threads", AN_T_STR, 0},
};

static const an_col tp_cols[] = {
    {"tokens_per_s_a", AN_T_REAL, 1}, {"tokens_per_s_b", AN_T_REAL, 1}, {"ratio", AN_T_REAL, 4},
    {"change_pct", AN_T_PCT, 0},      {"step_median_a_ms", AN_T_REAL, 3}, {"step_median_b_ms", AN_T_REAL, 3},
    {"step_change_pct", AN_T_PCT, 0}, {"p_value", AN_T_REAL, 6},          {"significant", AN_T_STR, 0},
};

static const an_col stage_cols[] = {
    {"role", AN_T_STR, 0},         {"stage", AN_T_STR, 0},         {"kind", AN_T_STR, 0},
    {"threads_a", AN_T_INT, 0},    {"threads_b", AN_T_INT, 0},     {"median_a_ms", AN_T_REAL, 3},
    {"median_b_ms", AN_T_REAL, 3}, {"change_ms", AN_T_REAL, 3},    {"change_pct", AN_T_PCT, 0},
    {"p_value", AN_T_REAL, 6},     {"significant", AN_T_STR, 0},   {"mean_a_ms", AN_T_REAL, 3},
    {"mean_b_ms", AN_T_REAL, 3},   {"mean_change_ms", AN_T_REAL, 3}, {"count_a", AN_T_REAL, 2},
    {"count_b", AN_T_REAL, 2},     {"count_ratio", AN_T_REAL, 2},
};

static const an_col top_cols[] = {
    {"rank", AN_T_INT, 0},          {"role", AN_T_STR, 0},          {"stage", AN_T_STR, 0},
    {"kind", AN_T_STR, 0},          {"mean_change_ms", AN_T_REAL, 3}, {"mean_a_ms", AN_T_REAL, 3},
    {"mean_b_ms", AN_T_REAL, 3},    {"median_a_ms", AN_T_REAL, 3},  {"median_b_ms", AN_T_REAL, 3},
    {"change_pct", AN_T_PCT, 0},    {"significant", AN_T_STR, 0},   {"count_a", AN_T_REAL, 2},
    {"count_b", AN_T_REAL, 2},
};

static const an_col gpu_busy_cols[] = {
    {"device", AN_T_INT, 0},       {"role", AN_T_STR, 0},        {"median_a_ms", AN_T_REAL, 3},
    {"median_b_ms", AN_T_REAL, 3}, {"change_ms", AN_T_REAL, 3},  {"change_pct", AN_T_PCT, 0},
    {"p_value", AN_T_REAL, 6},     {"significant", AN_T_STR, 0}, {"mean_a_ms", AN_T_REAL, 3},
    {"mean_b_ms", AN_T_REAL, 3},
};

static const an_col kernel_cols[] = {
    {"rank", AN_T_INT, 0},           {"kernel", AN_T_STR, 0},         {"launches_per_step_a", AN_T_REAL, 2},
    {"launches_per_step_b", AN_T_REAL, 2}, {"launch_ratio", AN_T_REAL, 2}, {"ms_per_step_a", AN_T_REAL, 3},
    {"ms_per_step_b", AN_T_REAL, 3}, {"change_ms", AN_T_REAL, 3},
};

static char *threads_by_role(const an_pipe *p)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f) return NULL;
    for (uint32_t r = 0; r < p->n_roles; r++) fprintf(f, "%s%s %u", r ? ", " : "", p->role_names[r], p->role_threads[r]);
    fclose(f);
    return s;
}

static int put_runs(an_out *out, const side *s, const double *step_median)
{
    an_table *t = an_table_new(out, "runs", run_cols, N_OF(run_cols));
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        const an_pipe *p = &s[i].pipe;
        char *threads = threads_by_role(p);
        if (!threads) {
            rc = -1;
            break;
        }
        double mean = mean_of(s[i].step_ns, p->n_bins);
        an_put_str(t, i ? "B" : "A");
        an_put_str(t, s[i].trace.path);
        an_put_str(t, an_trace_meta(&s[i].trace, "program"));
        an_put_int(t, (int64_t)s[i].steps);
        an_put_real(t, (double)s[i].period_ns * 1e-9);
        an_put_int(t, (int64_t)s[i].tokens);
        an_put_real_or_null(t, s[i].tokens_per_s);
        an_put_real_or_null(t, step_median[i] / 1e6);
        an_put_real_or_null(t, mean / 1e6);
        an_put_str(t, threads);
        an_row_end(t);
        free(threads);
    }
    an_table_end(t);
    return rc;
}

/* Medians of A and B (ns per step), and with stats the change in ms and %,
 * p and whether it is significant (NULL when untested). */
static void put_median_cells(an_table *t, double median_a, double median_b, int with_stats, double p, int tested,
                             int significant)
{
    an_put_real_or_null(t, median_a / 1e6);
    an_put_real_or_null(t, median_b / 1e6);
    if (with_stats) {
        an_put_real_or_null(t, (median_b - median_a) / 1e6);
        if (isfinite(an_change_pct(median_a, median_b))) an_put_pct(t, an_change_pct(median_a, median_b));
        else an_put_null(t);
        an_put_real_or_null(t, p);
        an_put_str(t, tested ? (significant ? "yes" : "no") : NULL);
    }
}

static void put_change_cells(an_table *t, const change *c, int with_stats)
{
    put_median_cells(t, c->median_a, c->median_b, with_stats, c->p, c->tested, c->significant);
}

typedef struct own_opts {
    uint64_t top, skip;
    double alpha;
} own_opts;

static void init(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    o->top = 10;
    o->alpha = 0.01;
}

static int option(an_cmd *cmd, int id)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_ALPHA: {
        char *end;
        o->alpha = strtod(cmd->args.value, &end);
        if (end == cmd->args.value || *end || !(o->alpha > 0 && o->alpha < 1))
            rc = an_usage_error("diff", "--alpha needs a level between 0 and 1, not '%s'", cmd->args.value);
        break;
    }
    case OPT_TOP:
        if (an_parse_u64(cmd->args.value, &o->top) || o->top > 100000)
            rc = an_usage_error("diff", "--top needs a number of rows, not '%s'", cmd->args.value);
        break;
    case OPT_SKIP:
        if (an_parse_u64(cmd->args.value, &o->skip) || o->skip > UINT32_MAX)
            rc = an_usage_error("diff", "--skip-steps needs a number of steps, not '%s'", cmd->args.value);
        break;
    }
    return rc;
}

static int check(an_cmd *cmd)
{
    int rc = AN_EXIT_OK;
    if (!rc && cmd->args.n_pos != 2) rc = an_usage_error("diff", "give two trace files, A and B");
    return rc;
}

static int work(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    side s[2];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 2 && !rc; i++) {
        rc = an_trace_open_inputs(&s[i].trace, (const char *const *)&cmd->args.pos[i], 1, cmd->align);
        s[i].opened = rc == AN_EXIT_OK;
    }
    an_pipe_opts po;
    memset(&po, 0, sizeof po);
    po.skip_steps = (uint32_t)o->skip;
    kernel_set kset;
    memset(&kset, 0, sizeof kset);
    kernel_pass kp[2] = {{&kset, 0}, {&kset, 1}};
    po.gpu_record = add_kernel_record;
    for (int i = 0; i < 2 && !rc; i++) {
        po.gpu_record_arg = &kp[i];
        rc = an_pipe_compute(&s[i].pipe, &s[i].trace, &po);
        if (!rc && !s[i].pipe.has_steps) {
            an_error("diff: %s has fewer than two step marks%s, so no per-step times to compare", s[i].trace.path,
                     o->skip ? " after --skip-steps" : "");
            rc = AN_EXIT_USAGE;
        }
        if (rc) break;
        an_pipe *p = &s[i].pipe;
        s[i].step_ns = malloc(p->n_bins * sizeof *s[i].step_ns);
        if (!s[i].step_ns) {
            rc = oom();
            break;
        }
        for (uint32_t b = 0; b < p->n_bins; b++) {
            s[i].step_ns[b] = (double)(p->bin_t[b + 1] - p->bin_t[b]) / (p->bin_steps[b] ? p->bin_steps[b] : 1);
            s[i].steps += p->bin_steps[b];
            s[i].tokens += p->bin_tokens[b];
        }
        s[i].period_ns = p->bin_t[p->n_bins] - p->bin_t[0];
        s[i].tokens_per_s = s[i].tokens && s[i].period_ns > 0 ? (double)s[i].tokens * 1e9 / (double)s[i].period_ns : NAN;
    }
    change *cs = NULL;
    uint32_t n = 0;
    double *buf_a = NULL, *buf_b = NULL;
    if (!rc) rc = collect(&s[0], &s[1], &cs, &n);
    if (!rc) {
        buf_a = malloc(((size_t)s[0].pipe.n_bins + 1) * sizeof *buf_a);
        buf_b = malloc(((size_t)s[1].pipe.n_bins + 1) * sizeof *buf_b);
        if (!buf_a || !buf_b) rc = oom();
    }
    for (uint32_t i = 0; i < n && !rc; i++) rc = compare_one(&cs[i], &s[0], &s[1], o->alpha, buf_a, buf_b);
    double step_p = NAN;
    if (!rc) {
        step_p = an_mann_whitney(s[0].step_ns, s[0].pipe.n_bins, s[1].step_ns, s[1].pipe.n_bins, NULL);
        if (isnan(step_p)) rc = oom();
    }
    const change **ranked = NULL;
    uint32_t n_ranked = 0;
    if (!rc) {
        qsort(cs, n, sizeof *cs, cmp_changes_table);
        ranked = malloc((n + 1) * sizeof *ranked);
        if (!ranked) rc = oom();
        for (uint32_t i = 0; i < n && ranked; i++)
            if (cs[i].stage && cs[i].tested) ranked[n_ranked++] = &cs[i];
        if (ranked) qsort(ranked, n_ranked, sizeof *ranked, cmp_impact);
        if (n_ranked > o->top) n_ranked = (uint32_t)o->top;
    }
    /* GPU activity: only when both traces hold it */
    int with_gpu = !rc && s[0].pipe.n_devices && s[1].pipe.n_devices;
    gpu_change *gc = NULL;
    uint32_t n_gc = 0;
    kernel_change *kc = NULL;
    size_t n_kc = 0;
    if (with_gpu) rc = gpu_collect(&s[0], &s[1], o->alpha, buf_a, buf_b, &gc, &n_gc);
    if (with_gpu && !rc) rc = kernel_changes(s, &kset, &kc, &n_kc);
    /* the CPU capture: only when both traces have it (diff_cpu.c) */
    an_diff_cpu dcpu;
    memset(&dcpu, 0, sizeof dcpu);
    if (!rc) rc = an_diff_cpu_compute(&dcpu, &s[0].trace, &s[0].pipe, &s[1].trace, &s[1].pipe, o->alpha, o->top);
    if (!rc) {
        an_out *out = an_out_new(stdout, cmd->format);
        if (!out) {
            rc = oom();
            goto done;
        }
        double step_median[2] = {NAN, NAN};
        int step_sig = s[0].pipe.n_bins >= MIN_STEPS_FOR_TEST && s[1].pipe.n_bins >= MIN_STEPS_FOR_TEST && step_p < o->alpha;
        char na[512], nb[512], p1[40], p2[40];
        if (cmd->format == AN_FMT_TEXT) {
            an_out_text(out, "== diff: A = %s, B = %s\n", an_clean(s[0].trace.path, na, sizeof na),
                        an_clean(s[1].trace.path, nb, sizeof nb));
        }
        for (int i = 0; i < 2 && !rc; i++) {
            double *v = malloc(s[i].pipe.n_bins * sizeof *v);
            if (!v) {
                rc = oom();
                break;
            }
            memcpy(v, s[i].step_ns, s[i].pipe.n_bins * sizeof *v);
            step_median[i] = an_median(v, s[i].pipe.n_bins);
            free(v);
        }
        if (!rc && cmd->format == AN_FMT_TEXT) {
            double ratio = s[1].tokens_per_s / s[0].tokens_per_s;
            if (isfinite(ratio))
                an_out_text(out, "Throughput: A %.1f tokens/s, B %.1f tokens/s: B/A = %.3f (%s).\n", s[0].tokens_per_s,
                            s[1].tokens_per_s, ratio, an_fmt_signed_pct(100.0 * (ratio - 1.0), p1, sizeof p1));
            an_out_text(out, "Step time: median %.3f ms in A, %.3f ms in B (%s, %s, p = %.3g; %llu and %llu steps).\n",
                        step_median[0] / 1e6, step_median[1] / 1e6,
                        an_fmt_signed_pct(an_change_pct(step_median[0], step_median[1]), p2, sizeof p2),
                        step_sig ? "significant" : "within noise", step_p, (unsigned long long)s[0].steps,
                        (unsigned long long)s[1].steps);
            uint32_t shown = 0;
            for (uint32_t i = 0; i < n_ranked && shown < 5; i++) {
                const change *c = ranked[i];
                if (!c->significant) continue;
                if (!shown++) an_out_text(out, "Largest significant changes of the time per step:\n");
                char rn[128], sn[128];
                an_out_text(out, "  %s/%s: %+.3f ms per step on average (median %.3f -> %.3f ms, %s, p = %.3g)\n",
                            an_clean(c->role, rn, sizeof rn), an_clean(c->stage, sn, sizeof sn),
                            impact(c) / 1e6, c->median_a / 1e6, c->median_b / 1e6,
                            an_fmt_signed_pct(an_change_pct(c->median_a, c->median_b), p1, sizeof p1), c->p);
            }
            if (s[0].pipe.n_bins < MIN_STEPS_FOR_TEST || s[1].pipe.n_bins < MIN_STEPS_FOR_TEST)
                an_out_text(out, "Too few steps to judge noise (fewer than %d in A or B): p-values are shown, no change "
                                 "is marked significant.\n",
                            MIN_STEPS_FOR_TEST);
            else if (!shown)
                an_out_text(out, "No stage changed beyond run-to-run noise (alpha %g).\n", o->alpha);
            for (uint32_t i = 0; i < n; i++) {
                const change *c = &cs[i];
                if (!c->stage || !(c->count_a > 0) || !(c->count_b > 0)) continue;
                double ratio_c = c->count_b / c->count_a;
                if (ratio_c < 1.5 && ratio_c > 1.0 / 1.5) continue;
                char rn[128], sn[128];
                an_out_text(out, "Count per step changed: %s/%s %.2f -> %.2f ranges per step per thread (x%.2f%s).\n",
                            an_clean(c->role, rn, sizeof rn), an_clean(c->stage, sn, sizeof sn), c->count_a, c->count_b,
                            ratio_c, ratio_c >= 1.9 && ratio_c <= 2.1 ? ": work done twice?" : "");
            }
            for (uint32_t i = 0; i < n_gc; i++) {
                const gpu_change *g = &gc[i];
                if (g->role) continue;
                an_out_text(out, "GPU %d busy per step: median %.3f ms in A, %.3f ms in B (%s, %s, p = %.3g).\n", g->device,
                            g->median_a / 1e6, g->median_b / 1e6,
                            an_fmt_signed_pct(an_change_pct(g->median_a, g->median_b), p1, sizeof p1),
                            g->significant ? "significant" : "within noise", g->p);
            }
            for (size_t i = 0, shown = 0; i < n_kc && shown < 5; i++) {
                const kernel_change *k = &kc[i];
                double la = per_step(k->count[0], s[0].steps), lb = per_step(k->count[1], s[1].steps);
                if (!(la > 0) || !(lb > 0) || (lb / la < 1.5 && lb / la > 1.0 / 1.5)) continue;
                char kn[160];
                an_out_text(out, "Kernel launches per step changed: %s %.2f -> %.2f (x%.2f), GPU %.3f -> %.3f ms per step%s\n",
                            an_clean(k->name, kn, sizeof kn), la, lb, lb / la,
                            per_step((uint64_t)k->ns[0], s[0].steps) / 1e6, per_step((uint64_t)k->ns[1], s[1].steps) / 1e6,
                            lb / la >= 1.9 && lb / la <= 2.1 ? ": launched twice?" : ".");
                shown++;
            }
            if (n_kc && fabs(kc[0].change_ns) > 0) {
                char kn[160];
                an_out_text(out, "Largest change of a kernel's GPU time: %s, %+.3f ms per step (%.3f -> %.3f).\n",
                            an_clean(kc[0].name, kn, sizeof kn), kc[0].change_ns / 1e6,
                            per_step((uint64_t)kc[0].ns[0], s[0].steps) / 1e6,
                            per_step((uint64_t)kc[0].ns[1], s[1].steps) / 1e6);
            }
            if (!with_gpu && (s[0].pipe.n_devices || s[1].pipe.n_devices))
                an_out_text(out, "GPU activity is only in %s: GPUs are not compared.\n", s[0].pipe.n_devices ? "A" : "B");
            for (uint32_t i = 0; i < n; i++) {
                const change *c = &cs[i];
                char rn[128], sn[128];
                if (c->role_a < 0 || c->role_b < 0) {
                    if (c->stage) continue;
                    an_out_text(out, "Role %s is only in %s.\n", an_clean(c->role, rn, sizeof rn), c->role_a < 0 ? "B" : "A");
                } else if (c->stage && (c->col_a < 0 || c->col_b < 0)) {
                    an_out_text(out, "Stage %s/%s is only in %s.\n", an_clean(c->role, rn, sizeof rn),
                                an_clean(c->stage, sn, sizeof sn), c->col_a < 0 ? "B" : "A");
                }
            }
            an_diff_cpu_lines(out, &dcpu);
            an_out_text(out, "\n");
        }
        if (!rc && put_runs(out, s, step_median)) rc = oom();
        if (!rc) {
            an_table *t = an_table_new(out, "throughput", tp_cols, N_OF(tp_cols));
            an_put_real_or_null(t, s[0].tokens_per_s);
            an_put_real_or_null(t, s[1].tokens_per_s);
            double ratio = s[1].tokens_per_s / s[0].tokens_per_s;
            an_put_real_or_null(t, ratio);
            if (isfinite(ratio)) an_put_pct(t, 100.0 * (ratio - 1.0));
            else an_put_null(t);
            an_put_real_or_null(t, step_median[0] / 1e6);
            an_put_real_or_null(t, step_median[1] / 1e6);
            if (isfinite(an_change_pct(step_median[0], step_median[1]))) an_put_pct(t, an_change_pct(step_median[0], step_median[1]));
            else an_put_null(t);
            an_put_real_or_null(t, step_p);
            an_put_str(t, step_sig ? "yes" : "no");
            an_row_end(t);
            an_table_end(t);
            an_out_text(out, "stages: per-step time (ms per step per thread of the role), A vs B; p_value of a "
                             "Mann-Whitney U test; count = ranges begun per step per thread\n");
            t = an_table_new(out, "stages", stage_cols, N_OF(stage_cols));
            const char *prev = NULL;
            for (uint32_t i = 0; i < n; i++) {
                const change *c = &cs[i];
                if (prev && strcmp(prev, c->role) != 0) an_table_gap(t);
                prev = c->role;
                an_put_str(t, c->role);
                an_put_str(t, c->stage ? c->stage : "idle");
                an_put_str(t, c->kind);
                if (c->role_a >= 0) an_put_int(t, s[0].pipe.role_threads[c->role_a]);
                else an_put_null(t);
                if (c->role_b >= 0) an_put_int(t, s[1].pipe.role_threads[c->role_b]);
                else an_put_null(t);
                put_change_cells(t, c, 1);
                an_put_real_or_null(t, c->mean_a / 1e6);
                an_put_real_or_null(t, c->mean_b / 1e6);
                an_put_real_or_null(t, (c->mean_b - c->mean_a) / 1e6);
                an_put_real_or_null(t, c->count_a);
                an_put_real_or_null(t, c->count_b);
                an_put_real_or_null(t, c->count_a > 0 ? c->count_b / c->count_a : NAN);
                an_row_end(t);
            }
            an_table_end(t);
            an_out_text(out, "top changes: by the change of the mean time per step (what each stage adds to the "
                             "step time)\n");
            t = an_table_new(out, "top_changes", top_cols, N_OF(top_cols));
            for (uint32_t i = 0; i < n_ranked; i++) {
                const change *c = ranked[i];
                an_put_int(t, i + 1);
                an_put_str(t, c->role);
                an_put_str(t, c->stage);
                an_put_str(t, c->kind);
                an_put_real_or_null(t, impact(c) / 1e6);
                an_put_real_or_null(t, c->mean_a / 1e6);
                an_put_real_or_null(t, c->mean_b / 1e6);
                an_put_real_or_null(t, c->median_a / 1e6);
                an_put_real_or_null(t, c->median_b / 1e6);
                if (isfinite(an_change_pct(c->median_a, c->median_b))) an_put_pct(t, an_change_pct(c->median_a, c->median_b));
                else an_put_null(t);
                an_put_str(t, c->significant ? "yes" : "no");
                an_put_real_or_null(t, c->count_a);
                an_put_real_or_null(t, c->count_b);
                an_row_end(t);
            }
            an_table_end(t);
            if (with_gpu) {
                an_out_text(out, "gpu_busy: GPU busy time per step (the union of kernels, copies and memsets in each "
                                 "step window), in all ('*') and per launching role\n");
                t = an_table_new(out, "gpu_busy", gpu_busy_cols, N_OF(gpu_busy_cols));
                for (uint32_t i = 0; i < n_gc; i++) {
                    const gpu_change *g = &gc[i];
                    if (i && g->device != gc[i - 1].device) an_table_gap(t);
                    an_put_int(t, g->device);
                    an_put_str(t, g->role ? g->role : "*");
                    put_median_cells(t, g->median_a, g->median_b, 1, g->p, g->tested, g->significant);
                    an_put_real_or_null(t, g->mean_a / 1e6);
                    an_put_real_or_null(t, g->mean_b / 1e6);
                    an_row_end(t);
                }
                an_table_end(t);
                an_out_text(out, "kernels: launches and GPU time per step over the analysed steps, by kernel name (all "
                                 "devices), largest change of the time first\n");
                t = an_table_new(out, "kernels", kernel_cols, N_OF(kernel_cols));
                for (size_t i = 0; i < n_kc && i < o->top; i++) {
                    const kernel_change *k = &kc[i];
                    double la = per_step(k->count[0], s[0].steps), lb = per_step(k->count[1], s[1].steps);
                    an_put_int(t, (int64_t)i + 1);
                    an_put_str(t, k->name);
                    an_put_real_or_null(t, la);
                    an_put_real_or_null(t, lb);
                    an_put_real_or_null(t, la > 0 ? lb / la : NAN);
                    an_put_real_or_null(t, per_step((uint64_t)k->ns[0], s[0].steps) / 1e6);
                    an_put_real_or_null(t, per_step((uint64_t)k->ns[1], s[1].steps) / 1e6);
                    an_put_real_or_null(t, k->change_ns / 1e6);
                    an_row_end(t);
                }
                an_table_end(t);
            }
            an_diff_cpu_tables(out, &dcpu);
        }
        if (an_out_finish(out) && !rc) {
            an_error("diff: cannot write the output");
            rc = AN_EXIT_FAIL;
        }
        for (int i = 0; i < 2 && !rc; i++) an_trace_warn(&s[i].trace);
    }
done:
    an_diff_cpu_free(&dcpu);
    kernel_set_free(&kset);
    for (size_t i = 0; i < n_kc; i++) free(kc[i].name);
    free(kc);
    free(gc);
    free(ranked);
    free(cs);
    free(buf_a);
    free(buf_b);
    for (int i = 0; i < 2; i++) {
        free(s[i].step_ns);
        an_pipe_free(&s[i].pipe);
        if (s[i].opened) an_trace_close(&s[i].trace);
    }
    return rc;
}

const an_cmd_def an_cmd_diff = {
    .name = "diff",
    .usage = help,
    .flags = AN_RUN_FORMAT,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .check = check,
    .work = work,
    .tables = "runs,throughput,stages,top_changes,gpu_busy,kernels,cpu_stages,cpu_functions,cpu_python_functions",
};
