/* stats.c: per thread, role and stage statistics over a selection of
 * ranges, for `summary` (and for diff / bottleneck / report, which need the
 * same numbers).
 *
 * A selection is a window (--steps / --time, clipped: a range overlapping
 * the window counts with the part inside it) and name filters. For every
 * (thread, stage) it computes: inclusive total, self time (minus nested
 * children, whatever their stage), count, max and exact nearest-rank p50,
 * p95, p99 (quantiles.c, which may need more than one pass over the
 * ranges). Roles and, across the files of one run, (role, stage) pairs get
 * the same numbers over all their ranges.
 *
 * Self time needs no stack: the reader reports a thread's ranges in the
 * order they end, with their depth, and ranges nest, so the children of a
 * range at depth d are exactly the depth d+1 ranges that ended since the
 * last depth-d range ended. child_ns[d + 1] sums them. A child outside the
 * window is skipped by the reader, and its clipped length is 0 anyway.
 *
 * Cost per range: a clip, an add to the thread's accumulator and one
 * quantile add per group (thread, role, merged role); no allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

static const uint32_t pct_permille[AN_NPCT] = {500, 950, 990};

typedef struct file_ctx {
    uint32_t *thread_index; /* [max id + 1] id -> index, UINT32_MAX unknown */
    uint32_t n_ids;
    uint32_t group_thread;  /* first quantile group of the thread x stage block */
    uint32_t group_role;
    int32_t *role_merged;   /* [n_roles] merged role or -1 */
    int32_t *stage_merged;  /* [n_stages] merged stage or -1 */
    int64_t iter_t0, iter_t1;
} file_ctx;

#define BATCH 4096 /* (group, value) pairs handed to the quantile engine at once */

typedef struct ctx {
    an_stats *s;
    file_ctx *fc;
    an_quant *q;
    uint32_t group_merged;
    an_progress progress;
    size_t n_batch;
    uint32_t batch_group[BATCH];
    int64_t batch_value[BATCH];
} ctx;

static void flush_batch(ctx *c)
{
    an_quant_add_many(c->q, c->batch_group, c->batch_value, c->n_batch);
    c->n_batch = 0;
}

static inline void batch_add(ctx *c, uint32_t group, int64_t value)
{
    c->batch_group[c->n_batch] = group;
    c->batch_value[c->n_batch++] = value;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted distinct strings of `n` (pointers are borrowed). */
static const char **distinct(const char **names, uint32_t n, uint32_t *n_out)
{
    const char **out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return NULL;
    memcpy(out, names, n * sizeof *out);
    qsort(out, n, sizeof *out, cmp_str);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (k == 0 || strcmp(out[k - 1], out[i]) != 0) out[k++] = out[i];
    *n_out = k;
    return out;
}

static int32_t find_name(const char *const *names, uint32_t n, const char *name)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(names[mid], name);
        if (c == 0) return (int32_t)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* Window, filters, roles and accumulators of one file. */
static int setup_file(an_stats *s, uint32_t f, an_trace *t, const an_select *sel, file_ctx *fc)
{
    an_file_stats *fs = &s->files[f];
    fs->trace = t;
    int rc = an_window_resolve(&sel->window, t, &fs->t0_ns, &fs->t1_ns);
    if (rc) return rc;
    fs->wall_ns = fs->t1_ns > fs->t0_ns ? fs->t1_ns - fs->t0_ns : 0;
    fc->iter_t0 = sel->window.kind == AN_WIN_ALL ? INT64_MIN : fs->t0_ns;
    fc->iter_t1 = sel->window.kind == AN_WIN_ALL ? INT64_MAX : fs->t1_ns;
    uint32_t nt = st_reader_n_threads(t->r), ns = st_reader_n_stages(t->r);
    fs->n_threads = nt;
    fs->n_stages = ns;
    fs->thread_on = calloc(nt ? nt : 1, 1);
    fs->stage_on = calloc(ns ? ns : 1, 1);
    fs->thread_role = calloc(nt ? nt : 1, sizeof *fs->thread_role);
    fs->thread_busy_ns = calloc(nt ? nt : 1, sizeof *fs->thread_busy_ns);
    fs->thread_stage = calloc((size_t)nt * ns + 1, sizeof *fs->thread_stage);
    const char **roles = malloc((nt ? nt : 1) * sizeof *roles);
    if (!fs->thread_on || !fs->stage_on || !fs->thread_role || !fs->thread_busy_ns ||
        !fs->thread_stage || !roles) {
        free(roles);
        return oom();
    }
    rc = an_filter_resolve(&sel->filter, t, fs->thread_on, fs->stage_on);
    if (rc) {
        free(roles);
        return rc;
    }
    for (uint32_t i = 0; i < nt; i++) roles[i] = st_reader_thread(t->r, i)->role;
    fs->role_names = distinct(roles, nt, &fs->n_roles);
    free(roles);
    if (!fs->role_names) return oom();
    fs->role_threads = calloc(fs->n_roles ? fs->n_roles : 1, sizeof *fs->role_threads);
    fs->role_stage = calloc((size_t)fs->n_roles * ns + 1, sizeof *fs->role_stage);
    if (!fs->role_threads || !fs->role_stage) return oom();
    uint32_t max_id = 0;
    for (uint32_t i = 0; i < nt; i++) {
        const st_thread_info *th = st_reader_thread(t->r, i);
        fs->thread_role[i] = (uint32_t)find_name(fs->role_names, fs->n_roles, th->role);
        if (fs->thread_on[i]) fs->role_threads[fs->thread_role[i]]++;
        if (th->id > max_id) max_id = th->id;
    }
    fc->n_ids = max_id + 1;
    fc->thread_index = malloc(fc->n_ids * sizeof *fc->thread_index);
    if (!fc->thread_index) return oom();
    for (uint32_t i = 0; i < fc->n_ids; i++) fc->thread_index[i] = UINT32_MAX;
    for (uint32_t i = 0; i < nt; i++) fc->thread_index[st_reader_thread(t->r, i)->id] = i;
    int64_t rank;
    fs->rank = an_trace_meta_i64(t, "rank", &rank) == 0 && rank >= 0 && rank < INT32_MAX ? (int)rank : (int)f;
    return AN_EXIT_OK;
}

/* Roles by name and stages by name across files (a stage id means nothing
 * outside its file). */
static int setup_merged(an_stats *s, file_ctx *fcs)
{
    an_merged_stats *m = &s->merged;
    uint32_t total_roles = 0, total_stages = 0;
    for (uint32_t f = 0; f < s->n_files; f++) {
        total_roles += s->files[f].n_roles;
        total_stages += s->files[f].n_stages;
    }
    const char **all = malloc((total_roles + total_stages + 1) * sizeof *all);
    if (!all) return oom();
    uint32_t k = 0;
    for (uint32_t f = 0; f < s->n_files; f++)
        for (uint32_t r = 0; r < s->files[f].n_roles; r++) all[k++] = s->files[f].role_names[r];
    m->role_names = distinct(all, k, &m->n_roles);
    k = 0;
    for (uint32_t f = 0; f < s->n_files; f++)
        for (uint32_t st = 0; st < s->files[f].n_stages; st++)
            all[k++] = st_reader_stage(s->files[f].trace->r, st)->name;
    m->stage_names = distinct(all, k, &m->n_stages);
    free(all);
    if (!m->role_names || !m->stage_names) return oom();
    m->stage_kinds = calloc(m->n_stages ? m->n_stages : 1, 1);
    m->role_stage = calloc((size_t)m->n_roles * m->n_stages + 1, sizeof *m->role_stage);
    m->file_role = calloc(s->n_files, sizeof *m->file_role);
    m->file_stage = calloc(s->n_files, sizeof *m->file_stage);
    if (!m->stage_kinds || !m->role_stage || !m->file_role || !m->file_stage) return oom();
    for (uint32_t f = s->n_files; f-- > 0;) {
        an_file_stats *fs = &s->files[f];
        m->file_role[f] = malloc((m->n_roles ? m->n_roles : 1) * sizeof **m->file_role);
        m->file_stage[f] = malloc((m->n_stages ? m->n_stages : 1) * sizeof **m->file_stage);
        fcs[f].role_merged = malloc((fs->n_roles ? fs->n_roles : 1) * sizeof *fcs[f].role_merged);
        fcs[f].stage_merged = malloc((fs->n_stages ? fs->n_stages : 1) * sizeof *fcs[f].stage_merged);
        if (!m->file_role[f] || !m->file_stage[f] || !fcs[f].role_merged || !fcs[f].stage_merged) return oom();
        for (uint32_t i = 0; i < m->n_roles; i++) m->file_role[f][i] = -1;
        for (uint32_t i = 0; i < m->n_stages; i++) m->file_stage[f][i] = -1;
        for (uint32_t r = 0; r < fs->n_roles; r++) {
            int32_t mr = find_name(m->role_names, m->n_roles, fs->role_names[r]);
            fcs[f].role_merged[r] = mr;
            m->file_role[f][mr] = (int32_t)r;
        }
        for (uint32_t st = 0; st < fs->n_stages; st++) {
            const st_stage_info *si = st_reader_stage(fs->trace->r, st);
            int32_t ms = find_name(m->stage_names, m->n_stages, si->name);
            fcs[f].stage_merged[st] = ms;
            if (m->file_stage[f][ms] < 0) m->file_stage[f][ms] = (int32_t)st;
            m->stage_kinds[ms] = (uint8_t)si->kind; /* the first file's kind wins */
        }
    }
    return AN_EXIT_OK;
}

static void add_stats(an_stage_stats *to, const an_stage_stats *from)
{
    to->total_ns += from->total_ns;
    to->self_ns += from->self_ns;
    to->count += from->count;
    if (from->max_ns > to->max_ns) to->max_ns = from->max_ns;
}

/* Does thread ti of file f have values that the next pass needs? */
static int thread_needed(ctx *c, uint32_t f, uint32_t ti)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    if (!fs->thread_on[ti]) return 0;
    uint32_t ns = fs->n_stages, role = fs->thread_role[ti];
    for (uint32_t st = 0; st < ns; st++) {
        if (!fs->stage_on[st]) continue;
        if (an_quant_wants(c->q, fc->group_thread + ti * ns + st) ||
            an_quant_wants(c->q, fc->group_role + role * ns + st))
            return 1;
        if (c->s->merged_valid) {
            int32_t mr = fc->role_merged[role], ms = fc->stage_merged[st];
            if (an_quant_wants(c->q, c->group_merged + (uint32_t)mr * c->s->merged.n_stages + (uint32_t)ms))
                return 1;
        }
    }
    return 0;
}

/* Reads the ranges of one iterator (one thread, or all threads by id). */
static int scan_iter(ctx *c, uint32_t f, st_range_iter *it)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    const int first_pass = an_quant_pass(c->q) == 1;
    const int merged = c->s->merged_valid;
    const uint32_t ns = fs->n_stages, mns = c->s->merged.n_stages;
    const int64_t w0 = fs->t0_ns, w1 = fs->t1_ns;
    int64_t child_ns[ST_STACK_MAX + 2];
    uint32_t cur = UINT32_MAX, ti = 0, role = 0, on = 0, role_group = 0;
    an_stage_stats *row = NULL;
    st_range r;
    int rc;
    while ((rc = st_range_iter_next(it, &r)) == 1) {
        an_progress_add(&c->progress, 1);
        if (r.thread != cur) {
            cur = r.thread;
            ti = r.thread < fc->n_ids ? fc->thread_index[r.thread] : UINT32_MAX;
            /* The reader refuses chunks of unknown threads; this is a guard. */
            on = ti != UINT32_MAX && fs->thread_on[ti];
            if (!on) continue;
            role = fs->thread_role[ti];
            /* A role of one thread takes its percentiles from the thread. */
            role_group = fs->role_threads[role] > 1;
            row = &fs->thread_stage[(size_t)ti * ns];
            memset(child_ns, 0, sizeof child_ns);
        }
        if (!on) continue;
        int64_t a = r.start_ns, b = r.start_ns + r.dur_ns;
        if (a < w0) a = w0;
        if (b > w1) b = w1;
        int64_t d = b > a ? b - a : 0;
        uint32_t depth = r.depth <= ST_STACK_MAX ? r.depth : ST_STACK_MAX;
        int64_t kids = child_ns[depth + 1];
        child_ns[depth + 1] = 0;
        child_ns[depth] += d;
        if (first_pass && depth == 0) fs->thread_busy_ns[ti] += d;
        uint32_t st = r.stage;
        if (st >= ns || !fs->stage_on[st]) continue;
        if (first_pass) {
            an_stage_stats *x = &row[st];
            x->total_ns += d;
            x->self_ns += d > kids ? d - kids : 0;
            x->count++;
            if (d > x->max_ns) x->max_ns = d;
            fs->n_ranges++;
        }
        if (c->n_batch > BATCH - 3) flush_batch(c);
        batch_add(c, fc->group_thread + ti * ns + st, d);
        if (role_group) batch_add(c, fc->group_role + role * ns + st, d);
        if (merged)
            batch_add(c, c->group_merged + (uint32_t)fc->role_merged[role] * mns + (uint32_t)fc->stage_merged[st], d);
    }
    flush_batch(c);
    return rc;
}

static int scan_file(ctx *c, uint32_t f)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    st_reader *r = fs->trace->r;
    uint32_t n_needed = 0;
    uint8_t *needed = calloc(fs->n_threads ? fs->n_threads : 1, 1);
    if (!needed) return oom();
    for (uint32_t i = 0; i < fs->n_threads; i++) {
        needed[i] = (uint8_t)(an_quant_pass(c->q) == 1 ? fs->thread_on[i] : thread_needed(c, f, i));
        n_needed += needed[i];
    }
    int rc = 0;
    if (n_needed == fs->n_threads && n_needed > 1) {
        /* Every thread: one iterator, one query. */
        st_range_iter *it = NULL;
        rc = st_range_iter_open(&it, r, -1, fc->iter_t0, fc->iter_t1);
        if (!rc) rc = scan_iter(c, f, it);
        st_range_iter_close(it);
    } else {
        for (uint32_t i = 0; i < fs->n_threads && !rc; i++) {
            if (!needed[i]) continue;
            st_range_iter *it = NULL;
            rc = st_range_iter_open(&it, r, st_reader_thread(r, i)->id, fc->iter_t0, fc->iter_t1);
            if (!rc) rc = scan_iter(c, f, it);
            st_range_iter_close(it);
        }
    }
    free(needed);
    if (rc < 0) return an_trace_fail(fs->trace);
    return AN_EXIT_OK;
}

int an_stats_compute(an_stats *s, an_trace *traces, uint32_t n, const an_select *sel, int merge)
{
    memset(s, 0, sizeof *s);
    s->n_files = n;
    s->files = calloc(n ? n : 1, sizeof *s->files);
    file_ctx *fcs = calloc(n ? n : 1, sizeof *fcs);
    ctx *cp = calloc(1, sizeof *cp);
    int rc = AN_EXIT_OK;
    if (!s->files || !fcs || !cp) {
        free(fcs);
        free(cp);
        return oom();
    }
    cp->s = s;
    cp->fc = fcs;
    for (uint32_t f = 0; f < n && !rc; f++) rc = setup_file(s, f, &traces[f], sel, &fcs[f]);
    if (!rc && merge && n > 1) {
        rc = setup_merged(s, fcs);
        s->merged_valid = rc == AN_EXIT_OK;
    }
    /* Quantile groups: per file thread x stage, role x stage; merged role x stage. */
    uint64_t groups = 0;
    for (uint32_t f = 0; f < n && !rc; f++) {
        fcs[f].group_thread = (uint32_t)groups;
        groups += (uint64_t)s->files[f].n_threads * s->files[f].n_stages;
        fcs[f].group_role = (uint32_t)groups;
        groups += (uint64_t)s->files[f].n_roles * s->files[f].n_stages;
    }
    cp->group_merged = (uint32_t)groups;
    if (s->merged_valid) groups += (uint64_t)s->merged.n_roles * s->merged.n_stages;
    if (!rc && groups > UINT32_MAX) {
        an_error("too many threads x stages to summarize at once");
        rc = AN_EXIT_FAIL;
    }
    if (!rc) {
        cp->q = an_quant_new((uint32_t)groups, pct_permille, AN_NPCT);
        if (!cp->q) rc = oom();
    }
    uint64_t hint = 0;
    for (uint32_t f = 0; f < n; f++) hint += traces[f].n_ranges_hint;
    while (!rc) {
        static const char *const labels[] = {"reading ranges", "percentiles, pass 2", "percentiles, pass 3+"};
        int pass = an_quant_pass(cp->q);
        an_progress_start(&cp->progress, labels[pass < 3 ? pass - 1 : 2], hint);
        for (uint32_t f = 0; f < n && !rc; f++) rc = scan_file(cp, f);
        an_progress_end(&cp->progress);
        if (rc) break;
        s->passes = (uint32_t)pass;
        int more = an_quant_end_pass(cp->q);
        if (more < 0) rc = oom();
        if (more <= 0) break;
    }
    /* Roles and merged rows from the thread rows; percentiles from the groups. */
    for (uint32_t f = 0; f < n && !rc; f++) {
        an_file_stats *fs = &s->files[f];
        uint32_t ns = fs->n_stages;
        for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
            if (!fs->thread_on[ti]) continue;
            uint32_t role = fs->thread_role[ti];
            for (uint32_t st = 0; st < ns; st++) {
                an_stage_stats *x = &fs->thread_stage[(size_t)ti * ns + st];
                if (!x->count) continue;
                for (int p = 0; p < AN_NPCT; p++)
                    x->pct_ns[p] = an_quant_get(cp->q, fcs[f].group_thread + ti * ns + st, (uint32_t)p);
                add_stats(&fs->role_stage[(size_t)role * ns + st], x);
                if (s->merged_valid) {
                    uint32_t mr = (uint32_t)fcs[f].role_merged[role], ms = (uint32_t)fcs[f].stage_merged[st];
                    add_stats(&s->merged.role_stage[(size_t)mr * s->merged.n_stages + ms], x);
                }
            }
        }
        for (uint32_t role = 0; role < fs->n_roles; role++) {
            uint32_t only = UINT32_MAX; /* the thread of a one-thread role */
            for (uint32_t ti = 0; ti < fs->n_threads && fs->role_threads[role] == 1; ti++)
                if (fs->thread_on[ti] && fs->thread_role[ti] == role) only = ti;
            for (uint32_t st = 0; st < ns; st++)
                for (int p = 0; p < AN_NPCT; p++)
                    fs->role_stage[(size_t)role * ns + st].pct_ns[p] =
                        only != UINT32_MAX ? fs->thread_stage[(size_t)only * ns + st].pct_ns[p]
                                           : an_quant_get(cp->q, fcs[f].group_role + role * ns + st, (uint32_t)p);
        }
    }
    if (!rc && s->merged_valid)
        for (uint32_t i = 0; i < s->merged.n_roles * s->merged.n_stages; i++)
            for (int p = 0; p < AN_NPCT; p++)
                s->merged.role_stage[i].pct_ns[p] = an_quant_get(cp->q, cp->group_merged + i, (uint32_t)p);
    an_quant_free(cp->q);
    for (uint32_t f = 0; f < n; f++) {
        free(fcs[f].thread_index);
        free(fcs[f].role_merged);
        free(fcs[f].stage_merged);
    }
    free(fcs);
    free(cp);
    return rc;
}

void an_stats_free(an_stats *s)
{
    for (uint32_t f = 0; s->files && f < s->n_files; f++) {
        an_file_stats *fs = &s->files[f];
        free(fs->thread_on);
        free(fs->stage_on);
        free(fs->role_names);
        free(fs->thread_role);
        free(fs->role_threads);
        free(fs->thread_stage);
        free(fs->role_stage);
        free(fs->thread_busy_ns);
    }
    an_merged_stats *m = &s->merged;
    for (uint32_t f = 0; f < s->n_files; f++) {
        if (m->file_role) free(m->file_role[f]);
        if (m->file_stage) free(m->file_stage[f]);
    }
    free(m->file_role);
    free(m->file_stage);
    free(m->role_names);
    free(m->stage_names);
    free(m->stage_kinds);
    free(m->role_stage);
    free(s->files);
    memset(s, 0, sizeof *s);
}
