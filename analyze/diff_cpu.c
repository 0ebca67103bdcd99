/* diff_cpu.c: what the CPU capture adds to `diff` (diff_cpu.h). Per trace:
 * the on-CPU part of each (step bin, role, stage)'s self time
 * (an_cpu_bin_on), and over the analysed period the samples of each
 * thread's stages and their leaf functions (an_cpu_compute). A (role,
 * stage)'s on-CPU time per step is compared as diff compares its time; a
 * function's samples are counts, so its growth is judged with a binomial
 * test: given the samples of both traces together, B's share is what B's
 * exposure (steps x threads / period) predicts when the CPU time per step
 * did not change. The Python-frame samples' innermost Python functions
 * are tested the same way and listed apart: their exposure is steps x the
 * role's threads with such samples x python_frames_hz, their time wall time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_share.h"
#include "cpu_stacks.h"
#include "diff_cpu.h"
#include "diff_stats.h"

#define MIN_STEPS_FOR_TEST 8 /* as diff's stage times */

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

static int32_t stage_col(const an_pipe *p, const char *name)
{
    if (!name) return (int32_t)p->n_stages;
    for (uint32_t s = 0; s < p->n_stages; s++)
        if (strcmp(st_reader_stage(p->trace->r, s)->name, name) == 0) return (int32_t)s;
    return -1;
}

static int is_known(const an_cpu_thread *th) { return th->has_switches; }

/* One trace's per-bin on-CPU time and its period's figures. */
typedef struct side {
    const an_pipe *p;
    int64_t *on_ns;          /* [(bin * n_roles + role) * n_cols + col] */
    uint32_t *known;         /* [n_roles] threads with figures */
    double *inv_period;      /* [n_roles] sum over them of 1 / period_ns */
    double *py_rate;         /* [n_roles] sum over its threads with Python-frame samples of hz / 10^9 */
    uint64_t steps;
} side;

static int64_t on_at(const side *s, uint32_t bin, uint32_t role, uint32_t col)
{
    return s->on_ns[((size_t)bin * s->p->n_roles + role) * s->p->n_cols + col];
}

/* The role's self time and on-CPU time in a cell (stage -1: none) over the period. */
static void role_cell(const an_cpu_result *res, const an_pipe *p, uint32_t role, int32_t stage, int64_t *wall,
                      int64_t *on)
{
    *wall = *on = 0;
    for (uint32_t i = 0; i < res->n_threads; i++) {
        const an_cpu_thread *th = &res->threads[i];
        if (!is_known(th) || th->thread >= p->n_threads || p->thread_role[th->thread] != role) continue;
        *wall += th->cells[stage + 1].wall_ns;
        *on += th->cells[stage + 1].on_ns;
    }
}

static double pct_or_nan(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : NAN; }

static int compare_stage(an_diff_cpu *d, const side *s, uint32_t ra, uint32_t rb, int32_t ca, int32_t cb,
                         const char *stage, const char *kind, double *buf_a, double *buf_b)
{
    const side *a = &s[0], *b = &s[1];
    an_diff_cpu_stage *c = &d->stages[d->n_stages];
    memset(c, 0, sizeof *c);
    c->role = a->p->role_names[ra];
    c->stage = stage;
    c->kind = kind;
    uint32_t na = a->p->n_bins, nb = b->p->n_bins;
    for (uint32_t i = 0; i < na; i++)
        buf_a[i] = ca < 0 ? 0 : (double)on_at(a, i, ra, (uint32_t)ca) / a->known[ra] / (a->p->bin_steps[i] ? a->p->bin_steps[i] : 1);
    for (uint32_t i = 0; i < nb; i++)
        buf_b[i] = cb < 0 ? 0 : (double)on_at(b, i, rb, (uint32_t)cb) / b->known[rb] / (b->p->bin_steps[i] ? b->p->bin_steps[i] : 1);
    c->mean_a = mean_of(buf_a, na);
    c->mean_b = mean_of(buf_b, nb);
    int64_t wall, on;
    c->on_pct_a = c->on_pct_b = NAN;
    if (ca >= 0) {
        role_cell(&d->res[0], a->p, ra, ca == (int32_t)a->p->n_stages ? -1 : ca, &wall, &on);
        c->on_pct_a = pct_or_nan(on, wall);
    }
    if (cb >= 0) {
        role_cell(&d->res[1], b->p, rb, cb == (int32_t)b->p->n_stages ? -1 : cb, &wall, &on);
        c->on_pct_b = pct_or_nan(on, wall);
    }
    c->p = NAN;
    if (na && nb) {
        c->p = an_mann_whitney(buf_a, na, buf_b, nb, NULL);
        if (isnan(c->p)) return oom();
        c->tested = 1;
        c->significant = na >= MIN_STEPS_FOR_TEST && nb >= MIN_STEPS_FOR_TEST && c->p < d->alpha;
    }
    c->median_a = na ? an_median(buf_a, na) : NAN;
    c->median_b = nb ? an_median(buf_b, nb) : NAN;
    d->n_stages++;
    return 0;
}

static int col_has(const side *s, uint32_t role, int32_t col)
{
    if (col < 0) return 0;
    for (uint32_t b = 0; b < s->p->n_bins; b++)
        if (on_at(s, b, role, (uint32_t)col)) return 1;
    return 0;
}

/* ---- functions ---- */

typedef struct fn_entry {
    uint32_t role_order;     /* the role's index in A's pipe */
    const char *role, *stage, *name, *file;
    int which;
    uint64_t samples;
} fn_entry;

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Whether a thread counts: the kernel's samples need its switch records
 * (status perf), the Python ones samples in the period. */
static int fn_known(const an_cpu_thread *th, int python) { return python ? th->py_samples > 0 : is_known(th); }
static int side_known(const side *s, uint32_t role, int python) { return python ? s->py_rate[role] > 0 : s->known[role] > 0; }

static int cmp_str_null_last(const char *a, const char *b)
{
    if (!a || !b) return !a - !b;
    return strcmp(a, b);
}

/* The function's key: role, stage, name, file. */
static int cmp_key(const fn_entry *a, const fn_entry *b)
{
    if (a->role_order != b->role_order) return a->role_order < b->role_order ? -1 : 1;
    int c = cmp_str_null_last(a->stage, b->stage);
    if (!c) c = strcmp(a->name, b->name);
    if (!c) c = strcmp(a->file, b->file);
    return c;
}

static int cmp_entry(const void *x, const void *y)
{
    const fn_entry *a = x, *b = y;
    int c = cmp_key(a, b);
    return c ? c : a->which - b->which;
}

static int cmp_fn(const void *x, const void *y)
{
    const an_diff_cpu_fn *a = x, *b = y;
    if (a->role_order != b->role_order) return a->role_order < b->role_order ? -1 : 1;
    int c = cmp_str_null_last(a->stage, b->stage);
    if (c) return c;
    double ka = a->ms_b - a->ms_a, kb = b->ms_b - b->ms_a;
    if (ka != kb) return ka > kb ? -1 : 1;
    c = strcmp(a->name, b->name);
    return c ? c : strcmp(a->file, b->file);
}

/* The growing functions of the kernel's samples (python 0) or of the
 * Python-frame samples (python 1) into d->fns or d->py_fns. */
static int functions(an_diff_cpu *d, const side *s, uint64_t top, int python)
{
    size_t cap = 0, n = 0;
    for (int w = 0; w < 2; w++)
        for (uint32_t i = 0; i < d->res[w].n_threads; i++)
            for (uint32_t c = 0; c <= d->res[w].n_stages; c++)
                cap += (python ? d->res[w].threads[i].py_cells : d->res[w].threads[i].cells)[c].n_fns;
    fn_entry *e = malloc((cap ? cap : 1) * sizeof *e);
    if (!e) return oom();
    for (int w = 0; w < 2; w++) {
        const an_cpu_result *res = &d->res[w];
        const an_pipe *p = s[w].p, *q = s[!w].p;
        for (uint32_t i = 0; i < res->n_threads; i++) {
            const an_cpu_thread *th = &res->threads[i];
            if (!fn_known(th, python) || th->thread >= p->n_threads || p->thread_role[th->thread] >= p->n_roles) continue;
            uint32_t role = p->thread_role[th->thread];
            int32_t other = an_pipe_role_index(q, p->role_names[role]);
            /* not comparable: the role in one trace only, or without figures (a Python rate) in one */
            if (other < 0 || !side_known(&s[w], role, python) || !side_known(&s[!w], (uint32_t)other, python)) continue;
            uint32_t order = w ? (uint32_t)other : role;
            for (uint32_t c = 0; c <= res->n_stages; c++) {
                const an_cpu_cell *cell = python ? &th->py_cells[c] : &th->cells[c];
                const char *stage = c ? st_reader_stage(p->trace->r, c - 1)->name : NULL;
                for (uint32_t f = 0; f < cell->n_fns; f++) {
                    if (!cell->fns[f].self) continue;
                    const an_cpu_name *nm = &res->names[cell->fns[f].name];
                    e[n++] = (fn_entry){order,
                                        p->role_names[role],
                                        stage,
                                        nm->name,
                                        python ? an_cpu_py_file(nm->name) : base_name(nm->path),
                                        w,
                                        cell->fns[f].self};
                }
            }
        }
    }
    if (n) qsort(e, n, sizeof *e, cmp_entry);
    an_diff_cpu_fn *fns = malloc((n ? n : 1) * sizeof *fns);
    if (!fns) {
        free(e);
        return oom();
    }
    uint32_t m = 0;
    for (size_t i = 0; i < n;) {
        an_diff_cpu_fn *f = &fns[m++];
        memset(f, 0, sizeof *f);
        f->role_order = e[i].role_order;
        f->role = s[0].p->role_names[e[i].role_order];
        f->stage = e[i].stage;
        f->name = e[i].name;
        f->file = e[i].file;
        size_t j = i;
        for (; j < n && cmp_key(&e[i], &e[j]) == 0; j++) {
            if (e[j].which) f->samples_b += e[j].samples;
            else f->samples_a += e[j].samples;
        }
        i = j;
    }
    free(e);
    if (python) d->n_py_tested = m;
    else d->n_tested = m;
    /* exposure: steps x the sum over the role's threads of 1 / period, in samples per ns of CPU time per step per thread */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m; i++) {
        an_diff_cpu_fn *f = &fns[i];
        uint32_t ra = (uint32_t)an_pipe_role_index(s[0].p, f->role), rb = (uint32_t)an_pipe_role_index(s[1].p, f->role);
        double wa = (double)s[0].steps * (python ? s[0].py_rate[ra] : s[0].inv_period[ra]),
               wb = (double)s[1].steps * (python ? s[1].py_rate[rb] : s[1].inv_period[rb]);
        f->ms_a = wa > 0 ? (double)f->samples_a / wa / 1e6 : NAN;
        f->ms_b = wb > 0 ? (double)f->samples_b / wb / 1e6 : NAN;
        if (!(wa > 0 && wb > 0) || !(f->ms_b > f->ms_a)) continue;
        f->p = an_binomial_test(f->samples_b, f->samples_a + f->samples_b, wb / (wa + wb));
        f->grew = f->p < d->alpha / m && f->ms_b >= AN_DIFF_CPU_MIN_RATIO * f->ms_a;
        fns[kept++] = *f;
    }
    /* per (role, stage): the largest growths first, the top `top` */
    if (kept) qsort(fns, kept, sizeof *fns, cmp_fn);
    uint32_t out = 0, run = 0;
    for (uint32_t i = 0; i < kept; i++) {
        run = i && fns[i].role_order == fns[i - 1].role_order && !cmp_str_null_last(fns[i].stage, fns[i - 1].stage) ? run + 1 : 0;
        if (run < top) fns[out++] = fns[i];
    }
    if (python) {
        d->py_fns = fns;
        d->n_py_fns = out;
    } else {
        d->fns = fns;
        d->n_fns = out;
    }
    return 0;
}

int an_diff_cpu_compute(an_diff_cpu *d, an_trace *ta, const an_pipe *pa, an_trace *tb, const an_pipe *pb, double alpha,
                        uint64_t top)
{
    memset(d, 0, sizeof *d);
    d->alpha = alpha;
    an_trace *t[2] = {ta, tb};
    const an_pipe *p[2] = {pa, pb};
    int has[2];
    for (int i = 0; i < 2; i++) {
        has[i] = st_reader_has_cpu(t[i]->r);
        if (has[i] < 0) return an_trace_fail(t[i]);
    }
    d->has_a = has[0];
    d->has_b = has[1];
    if (!has[0] || !has[1]) return 0;
    side s[2];
    memset(s, 0, sizeof s);
    double *buf_a = NULL, *buf_b = NULL;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        s[i].p = p[i];
        size_t cells = (size_t)p[i]->n_bins * p[i]->n_roles * p[i]->n_cols;
        s[i].on_ns = calloc(cells ? cells : 1, sizeof *s[i].on_ns);
        s[i].known = calloc(p[i]->n_roles ? p[i]->n_roles : 1, sizeof *s[i].known);
        s[i].inv_period = calloc(p[i]->n_roles ? p[i]->n_roles : 1, sizeof *s[i].inv_period);
        s[i].py_rate = calloc(p[i]->n_roles ? p[i]->n_roles : 1, sizeof *s[i].py_rate);
        if (!s[i].on_ns || !s[i].known || !s[i].inv_period || !s[i].py_rate) {
            rc = oom();
            break;
        }
        for (uint32_t b = 0; b < p[i]->n_bins; b++) s[i].steps += p[i]->bin_steps[b];
        rc = an_cpu_bin_on(t[i], p[i]->bin_t, p[i]->n_bins, p[i]->thread_role, p[i]->n_roles, s[i].on_ns, s[i].known);
        if (!rc) rc = an_cpu_compute(t[i], p[i]->bin_t[0], p[i]->bin_t[p[i]->n_bins], &d->res[i]);
        for (uint32_t k = 0; !rc && k < d->res[i].n_threads; k++) {
            const an_cpu_thread *th = &d->res[i].threads[k];
            if (is_known(th) && th->info.period_ns > 0 && th->thread < p[i]->n_threads &&
                p[i]->thread_role[th->thread] < p[i]->n_roles)
                s[i].inv_period[p[i]->thread_role[th->thread]] += 1.0 / (double)th->info.period_ns;
        }
        /* the Python-frame samples: each stands for 1 / python_frames_hz s of a sampled thread's wall time */
        const char *hz_text = an_trace_meta(t[i], "python_frames_hz");
        double hz = hz_text ? strtod(hz_text, NULL) : 0.0;
        for (uint32_t k = 0; !rc && k < d->res[i].n_threads; k++) {
            const an_cpu_thread *th = &d->res[i].threads[k];
            if (!th->py_samples) continue;
            if (i) d->has_py_b = 1;
            else d->has_py_a = 1;
            if (hz >= 1.0 && hz <= 1e6 && th->thread < p[i]->n_threads && p[i]->thread_role[th->thread] < p[i]->n_roles)
                s[i].py_rate[p[i]->thread_role[th->thread]] += hz / 1e9;
        }
    }
    if (!rc) {
        buf_a = malloc(((size_t)pa->n_bins + 1) * sizeof *buf_a);
        buf_b = malloc(((size_t)pb->n_bins + 1) * sizeof *buf_b);
        d->stages = malloc(((size_t)pa->n_roles * (pa->n_cols + pb->n_cols) + 1) * sizeof *d->stages);
        if (!buf_a || !buf_b || !d->stages) rc = oom();
    }
    /* the (role, stage)s of the roles both traces have with CPU figures: A's stages and idle, then B's others */
    for (uint32_t ra = 0; !rc && ra < pa->n_roles; ra++) {
        int32_t rb = an_pipe_role_index(pb, pa->role_names[ra]);
        if (rb < 0 || !s[0].known[ra] || !s[1].known[rb]) continue;
        for (uint32_t ca = 0; !rc && ca < pa->n_cols; ca++) {
            const char *stage = ca < pa->n_stages ? st_reader_stage(pa->trace->r, ca)->name : NULL;
            int32_t cb = stage_col(pb, stage);
            if (!col_has(&s[0], ra, (int32_t)ca) && !col_has(&s[1], (uint32_t)rb, cb)) continue;
            const char *kind = stage ? st_kind_name(st_reader_stage(pa->trace->r, ca)->kind) : NULL;
            rc = compare_stage(d, s, ra, (uint32_t)rb, (int32_t)ca, cb, stage, kind, buf_a, buf_b);
        }
        for (uint32_t cb = 0; !rc && cb < pb->n_stages; cb++) {
            const char *stage = st_reader_stage(pb->trace->r, cb)->name;
            if (stage_col(pa, stage) >= 0 || !col_has(&s[1], (uint32_t)rb, (int32_t)cb)) continue;
            rc = compare_stage(d, s, ra, (uint32_t)rb, -1, (int32_t)cb, stage,
                               st_kind_name(st_reader_stage(pb->trace->r, cb)->kind), buf_a, buf_b);
        }
    }
    if (!rc) rc = functions(d, s, top, 0);
    if (!rc) rc = functions(d, s, top, 1);
    for (int i = 0; i < 2; i++) {
        free(s[i].on_ns);
        free(s[i].known);
        free(s[i].inv_period);
        free(s[i].py_rate);
    }
    free(buf_a);
    free(buf_b);
    return rc;
}

/* ---- output ---- */

static int cmp_stage_impact(const void *x, const void *y)
{
    const an_diff_cpu_stage *a = *(const an_diff_cpu_stage *const *)x, *b = *(const an_diff_cpu_stage *const *)y;
    double ka = fabs(a->mean_b - a->mean_a), kb = fabs(b->mean_b - b->mean_a);
    if (ka != kb) return ka > kb ? -1 : 1;
    int c = strcmp(a->role, b->role);
    return c ? c : cmp_str_null_last(a->stage, b->stage);
}

static int cmp_fn_growth(const void *x, const void *y)
{
    const an_diff_cpu_fn *a = *(const an_diff_cpu_fn *const *)x, *b = *(const an_diff_cpu_fn *const *)y;
    double ka = a->ms_b - a->ms_a, kb = b->ms_b - b->ms_a;
    if (ka != kb) return ka > kb ? -1 : 1;
    int c = strcmp(a->role, b->role);
    if (!c) c = cmp_str_null_last(a->stage, b->stage);
    return c ? c : strcmp(a->name, b->name);
}

/* The summary lines of the growing functions (fs: room for n_fns). */
static void fn_lines(an_out *out, const an_diff_cpu_fn *fns, uint32_t n_fns, uint32_t n_tested, const an_diff_cpu_fn **fs,
                     int python)
{
    char rn[128], sn[128], fn[256], fl[256];
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_fns; i++)
        if (fns[i].grew) fs[n++] = &fns[i];
    if (n) qsort(fs, n, sizeof *fs, cmp_fn_growth);
    for (uint32_t i = 0; i < n && i < 5; i++) {
        const an_diff_cpu_fn *f = fs[i];
        if (!i && python)
            an_out_text(out, "Python functions whose sampled wall time grew beyond sampling noise (Python-frame "
                             "samples, innermost frame; binomial test at alpha / %u function%s):\n",
                        n_tested, n_tested == 1 ? "" : "s");
        else if (!i)
            an_out_text(out, "Functions whose CPU time grew beyond sampling noise (binomial test at alpha / %u function%s):\n",
                        n_tested, n_tested == 1 ? "" : "s");
        an_out_text(out, "  %s/%s: %s (%s) %.3f -> %.3f ms per step (%llu -> %llu samples, p = %.3g)\n",
                    an_clean(f->role, rn, sizeof rn), f->stage ? an_clean(f->stage, sn, sizeof sn) : "idle",
                    an_clean(f->name, fn, sizeof fn), an_clean(f->file, fl, sizeof fl), f->ms_a, f->ms_b,
                    (unsigned long long)f->samples_a, (unsigned long long)f->samples_b, f->p);
    }
    if (!n && python)
        an_out_text(out, "No Python function's sampled wall time grew beyond sampling noise (%u function%s, binomial "
                         "test at alpha / %u).\n", n_tested, n_tested == 1 ? "" : "s", n_tested);
    else if (!n)
        an_out_text(out, "No function's CPU time grew beyond sampling noise (%u function%s, binomial test at alpha / %u).\n",
                    n_tested, n_tested == 1 ? "" : "s", n_tested);
}

void an_diff_cpu_lines(an_out *out, const an_diff_cpu *d)
{
    if (!d->has_a && !d->has_b) return;
    if (!d->has_a || !d->has_b) {
        an_out_text(out, "The CPU capture is only in %s: on-CPU time and functions are not compared.\n", d->has_a ? "A" : "B");
        return;
    }
    char rn[128], sn[128], p1[40];
    const an_diff_cpu_stage **st = malloc((d->n_stages + 1) * sizeof *st);
    const an_diff_cpu_fn **fs = malloc((d->n_fns + 1) * sizeof *fs);
    if (!st || !fs) {
        free(st);
        free(fs);
        return;
    }
    uint32_t n = 0, shown = 0;
    for (uint32_t i = 0; i < d->n_stages; i++)
        if (d->stages[i].significant) st[n++] = &d->stages[i];
    if (n) qsort(st, n, sizeof *st, cmp_stage_impact);
    for (uint32_t i = 0; i < n && shown < 5; i++, shown++) {
        const an_diff_cpu_stage *c = st[i];
        if (!shown) an_out_text(out, "Largest significant changes of the on-CPU time per step:\n");
        an_out_text(out, "  %s/%s: %+.3f ms on-CPU per step on average (median %.3f -> %.3f ms, %s, p = %.3g)\n",
                    an_clean(c->role, rn, sizeof rn), c->stage ? an_clean(c->stage, sn, sizeof sn) : "idle",
                    (c->mean_b - c->mean_a) / 1e6, c->median_a / 1e6, c->median_b / 1e6,
                    an_fmt_signed_pct(an_change_pct(c->median_a, c->median_b), p1, sizeof p1), c->p);
    }
    if (!shown) an_out_text(out, "No stage's on-CPU time changed beyond run-to-run noise (alpha %g).\n", d->alpha);
    fn_lines(out, d->fns, d->n_fns, d->n_tested, fs, 0);
    if (d->has_py_a && d->has_py_b) {
        const an_diff_cpu_fn **pfs = malloc((d->n_py_fns + 1) * sizeof *pfs);
        if (pfs) fn_lines(out, d->py_fns, d->n_py_fns, d->n_py_tested, pfs, 1);
        free(pfs);
    } else if (d->has_py_a || d->has_py_b) {
        an_out_text(out, "Python-frame samples are only in %s: Python functions are not compared.\n", d->has_py_a ? "A" : "B");
    }
    free(st);
    free(fs);
}

static const an_col stage_cols[] = {
    {"role", AN_T_STR, 0},          {"stage", AN_T_STR, 0},          {"kind", AN_T_STR, 0},
    {"median_a_ms", AN_T_REAL, 3},  {"median_b_ms", AN_T_REAL, 3},   {"change_ms", AN_T_REAL, 3},
    {"change_pct", AN_T_PCT, 0},    {"p_value", AN_T_REAL, 6},       {"significant", AN_T_STR, 0},
    {"mean_a_ms", AN_T_REAL, 3},    {"mean_b_ms", AN_T_REAL, 3},     {"mean_change_ms", AN_T_REAL, 3},
    {"on_cpu_pct_a", AN_T_PCT, 0},  {"on_cpu_pct_b", AN_T_PCT, 0},
};

static const an_col fn_cols[] = {
    {"role", AN_T_STR, 0},           {"stage", AN_T_STR, 0},          {"rank", AN_T_INT, 0},
    {"function", AN_T_STR, 0},       {"file", AN_T_STR, 0},           {"samples_a", AN_T_INT, 0},
    {"samples_b", AN_T_INT, 0},      {"ms_per_step_a", AN_T_REAL, 3}, {"ms_per_step_b", AN_T_REAL, 3},
    {"change_ms", AN_T_REAL, 3},     {"ratio", AN_T_REAL, 2},         {"p_value", AN_T_REAL, 6},
    {"grew", AN_T_STR, 0},
};

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static void fn_table(an_out *out, const char *name, const an_diff_cpu_fn *fns, uint32_t n_fns)
{
    an_table *t = an_table_new(out, name, fn_cols, N_OF(fn_cols));
    for (uint32_t i = 0, rank = 0; i < n_fns; i++) {
        const an_diff_cpu_fn *f = &fns[i];
        int same = i && f->role_order == fns[i - 1].role_order && !cmp_str_null_last(f->stage, fns[i - 1].stage);
        rank = same ? rank + 1 : 1;
        if (i && f->role_order != fns[i - 1].role_order) an_table_gap(t);
        an_put_str(t, f->role);
        an_put_str(t, f->stage ? f->stage : "idle");
        an_put_int(t, rank);
        an_put_str(t, f->name);
        an_put_str(t, f->file);
        an_put_int(t, (int64_t)f->samples_a);
        an_put_int(t, (int64_t)f->samples_b);
        an_put_real_or_null(t, f->ms_a);
        an_put_real_or_null(t, f->ms_b);
        an_put_real_or_null(t, f->ms_b - f->ms_a);
        an_put_real_or_null(t, f->ms_a > 0 ? f->ms_b / f->ms_a : NAN);
        an_put_real_or_null(t, f->p);
        an_put_str(t, f->grew ? "yes" : "no");
        an_row_end(t);
    }
    an_table_end(t);
}

void an_diff_cpu_tables(an_out *out, const an_diff_cpu *d)
{
    if (!d->has_a || !d->has_b) return;
    an_out_text(out, "cpu_stages: on-CPU time per step (ms per step per thread of the role with CPU records), A vs B; "
                     "p_value of a Mann-Whitney U test; on_cpu_pct = on-CPU share of the stage's self time\n");
    an_table *t = an_table_new(out, "cpu_stages", stage_cols, N_OF(stage_cols));
    for (uint32_t i = 0; i < d->n_stages; i++) {
        const an_diff_cpu_stage *c = &d->stages[i];
        if (i && strcmp(c->role, d->stages[i - 1].role) != 0) an_table_gap(t);
        an_put_str(t, c->role);
        an_put_str(t, c->stage ? c->stage : "idle");
        an_put_str(t, c->kind);
        an_put_real_or_null(t, c->median_a / 1e6);
        an_put_real_or_null(t, c->median_b / 1e6);
        an_put_real_or_null(t, (c->median_b - c->median_a) / 1e6);
        an_put_pct_or_null(t, an_change_pct(c->median_a, c->median_b));
        an_put_real_or_null(t, c->p);
        an_put_str(t, c->tested ? (c->significant ? "yes" : "no") : NULL);
        an_put_real_or_null(t, c->mean_a / 1e6);
        an_put_real_or_null(t, c->mean_b / 1e6);
        an_put_real_or_null(t, (c->mean_b - c->mean_a) / 1e6);
        an_put_pct_or_null(t, c->on_pct_a);
        an_put_pct_or_null(t, c->on_pct_b);
        an_row_end(t);
    }
    an_table_end(t);
    an_out_text(out, "cpu_functions: per role and stage, the functions whose CPU time per step grew (leaf samples), "
                     "largest growth first; p_value of a binomial test; grew = p < alpha / %u and at least x%.1f\n",
                d->n_tested, AN_DIFF_CPU_MIN_RATIO);
    fn_table(out, "cpu_functions", d->fns, d->n_fns);
    if (d->has_py_a && d->has_py_b) {
        an_out_text(out, "cpu_python_functions: per role and stage, the Python functions (innermost frame of the "
                         "Python-frame samples) whose sampled wall time per step grew, largest growth first; ms per step "
                         "per sampled thread at 1 / python_frames_hz s a sample; grew = p < alpha / %u and at least x%.1f\n",
                    d->n_py_tested, AN_DIFF_CPU_MIN_RATIO);
        fn_table(out, "cpu_python_functions", d->py_fns, d->n_py_fns);
    }
}

void an_diff_cpu_free(an_diff_cpu *d)
{
    for (int i = 0; i < 2; i++)
        if (d->res[i].threads) an_cpu_free(&d->res[i]);
    free(d->stages);
    free(d->fns);
    free(d->py_fns);
    memset(d, 0, sizeof *d);
}
