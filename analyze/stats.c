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
 *
 * With several jobs, the trace threads (of every file) are shared out among
 * worker threads (pool.c), largest first: a worker reads a whole thread, in order
 * (self time needs it), through its own reader of the file (a reader and its
 * SQLite connection are not shared), sums the thread's row, and adds the
 * durations to its own shard of the quantile engine, merged when the pass
 * ends. Role and merged rows are then summed from the thread rows as with
 * one job. Every number is a sum, a maximum, a count or a k-th smallest
 * value, so the results are the same for any number of jobs and any order
 * of the work; an error is the one a single job meets first.
 *
 * Several files (an_stats_compute_paths, summary on a rank set): a file is
 * opened to be set up and closed; its names are kept in an_file_stats. In
 * each pass a task is a whole file, opened, read (every thread, with one
 * iterator) and closed by one worker. The file's thread and role groups
 * have an engine of their own (file_ctx.q), fed directly (one worker per
 * file), which ends its pass as soon as the file is read: its histograms go
 * then, and its next pass's buffers come only when it is read again
 * (an_quant_defer_buffers). The merged groups have the shared engine (ctx.qm,
 * with a shard per worker), folded into from each file's thread groups at
 * the end of the file's first pass. Open files: at most one per job; memory
 * held per file between passes: its rows and wanted buckets.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "analyze.h"
#include "pool.h"

static const uint32_t pct_permille[AN_NPCT] = {500, 950, 990};

typedef struct file_ctx {
    uint32_t *thread_index; /* [max id + 1] id -> index, UINT32_MAX unknown */
    uint32_t n_ids;
    uint32_t group_thread;  /* first quantile group of the thread x stage block */
    uint32_t group_role;
    int32_t *role_merged;   /* [n_roles] merged role or -1 */
    int32_t *stage_merged;  /* [n_stages] merged stage or -1 */
    int64_t iter_t0, iter_t1;
    an_quant *q;            /* an_stats_compute_paths: the file's own groups, NULL once done */
} file_ctx;

#define BATCH 4096 /* (group, value) pairs handed to the quantile engine at once */

#define REPORT_EVERY 65536 /* ranges read between progress updates */

/* A duration range that a later pass looks at (see want_ranges). */
#define WANT_MAX (3 * AN_QUANT_MAX_PCT)
typedef struct want_range {
    int64_t lo, hi;
} want_range;

typedef struct ctx {
    an_stats *s;
    file_ctx *fc;
    int pass;               /* 1, 2, ... */
    an_quant *q;            /* the engine, or this worker's shard of it (by file: the file's engine, or NULL) */
    an_quant *qm;           /* the engine of the merged groups: q, but by file its own (or a shard) */
    uint32_t group_merged;
    an_progress *progress;
    pthread_mutex_t *lock;  /* with workers: guards progress and the files' n_ranges */
    uint64_t unreported;    /* ranges read, not yet added to progress */
    uint64_t n_read;        /* ranges read */
    uint64_t n_ranges;      /* selected ranges, not yet added to the file's */
    an_stage_stats *row;    /* [max stages]: the current thread's sums, first pass */
    int overflow;           /* a sum passed INT64_MAX (it was kept at INT64_MAX) */
    want_range *want;       /* [max stages * WANT_MAX], later passes */
    uint8_t *n_want;        /* [max stages] */
    size_t n_batch, n_batch_m;
    uint32_t batch_group[BATCH], batch_group_m[BATCH];
    int64_t batch_value[BATCH], batch_value_m[BATCH];
} ctx;

static void report(ctx *c, an_file_stats *fs)
{
    if (c->lock) pthread_mutex_lock(c->lock);
    an_progress_add(c->progress, c->unreported);
    fs->n_ranges += c->n_ranges;
    if (c->lock) pthread_mutex_unlock(c->lock);
    c->unreported = c->n_ranges = 0;
}

static void flush_batch(ctx *c)
{
    if (c->n_batch) an_quant_add_many(c->q, c->batch_group, c->batch_value, c->n_batch);
    if (c->n_batch_m) an_quant_add_many(c->qm, c->batch_group_m, c->batch_value_m, c->n_batch_m);
    c->n_batch = c->n_batch_m = 0;
}

static inline void batch_add_merged(ctx *c, uint32_t group, int64_t value)
{
    c->batch_group_m[c->n_batch_m] = group;
    c->batch_value_m[c->n_batch_m++] = value;
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

static char *dup_or_null(const char *v)
{
    return v ? strdup(v) : NULL;
}

/* The names printing and merging need, kept past the reader. */
static int snapshot_file(an_file_stats *fs, const an_trace *t)
{
    uint32_t nt = fs->n_threads, ns = fs->n_stages;
    fs->thread_names = calloc(nt ? nt : 1, sizeof *fs->thread_names);
    fs->thread_roles = calloc(nt ? nt : 1, sizeof *fs->thread_roles);
    fs->thread_ids = calloc(nt ? nt : 1, sizeof *fs->thread_ids);
    fs->stage_names = calloc(ns ? ns : 1, sizeof *fs->stage_names);
    fs->stage_kinds = calloc(ns ? ns : 1, 1);
    if (!fs->thread_names || !fs->thread_roles || !fs->thread_ids || !fs->stage_names || !fs->stage_kinds)
        return oom();
    for (uint32_t i = 0; i < nt; i++) {
        const st_thread_info *th = st_reader_thread(t->r, i);
        fs->thread_ids[i] = th->id;
        if (!(fs->thread_names[i] = strdup(th->name)) || !(fs->thread_roles[i] = strdup(th->role))) return oom();
    }
    for (uint32_t i = 0; i < ns; i++) {
        const st_stage_info *si = st_reader_stage(t->r, i);
        fs->stage_kinds[i] = (uint8_t)si->kind;
        if (!(fs->stage_names[i] = strdup(si->name))) return oom();
    }
    const char *program = an_trace_meta(t, "program"), *run_id = an_trace_meta(t, "run_id");
    fs->program = dup_or_null(program);
    fs->run_id = dup_or_null(run_id);
    if ((program && !fs->program) || (run_id && !fs->run_id)) return oom();
    return AN_EXIT_OK;
}

/* Window, filters, roles and accumulators of one file. */
static int setup_file(an_stats *s, uint32_t f, an_trace *t, const an_select *sel, file_ctx *fc)
{
    an_file_stats *fs = &s->files[f];
    fs->trace = t;
    fs->n_threads = fs->n_stages = 0;
    int rc = an_window_resolve(&sel->window, t, &fs->t0_ns, &fs->t1_ns);
    if (rc) return rc;
    fs->wall_ns = fs->t1_ns > fs->t0_ns ? fs->t1_ns - fs->t0_ns : 0;
    fc->iter_t0 = sel->window.kind == AN_WIN_ALL ? INT64_MIN : fs->t0_ns;
    fc->iter_t1 = sel->window.kind == AN_WIN_ALL ? INT64_MAX : fs->t1_ns;
    uint32_t nt = st_reader_n_threads(t->r), ns = st_reader_n_stages(t->r);
    fs->n_threads = nt;
    fs->n_stages = ns;
    rc = snapshot_file(fs, t);
    if (rc) return rc;
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
    for (uint32_t i = 0; i < nt; i++) roles[i] = fs->thread_roles[i]; /* the copies outlive the reader */
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
    fs->has_rank = an_trace_meta_i64(t, "rank", &rank) == 0 && rank >= 0 && rank < INT32_MAX;
    if (an_trace_meta_i64(t, "world_size", &fs->world_size) || fs->world_size < 1 || fs->world_size > INT32_MAX)
        fs->world_size = 0;
    fs->rank = fs->has_rank && rank >= 0 && rank < INT32_MAX ? (int)rank : (int)f;
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
            all[k++] = s->files[f].stage_names[st];
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
            int32_t ms = find_name(m->stage_names, m->n_stages, fs->stage_names[st]);
            fcs[f].stage_merged[st] = ms;
            if (m->file_stage[f][ms] < 0) m->file_stage[f][ms] = (int32_t)st;
            m->stage_kinds[ms] = fs->stage_kinds[st]; /* the first file's kind wins */
        }
    }
    return AN_EXIT_OK;
}

/* Sums of nanoseconds (all of them >= 0): a thread's inclusive time in a
 * stage nested in itself, or a role's over many threads, can pass INT64_MAX
 * only with timestamps no run has; the sum stops there and the overflow is
 * reported (an_stats_compute fails) instead of wrapping. */
static inline void add_ns(int64_t *to, int64_t v, int *overflow)
{
    if (__builtin_add_overflow(*to, v, to)) {
        *to = INT64_MAX;
        *overflow = 1;
    }
}

static void add_stats(an_stage_stats *to, const an_stage_stats *from, int *overflow)
{
    add_ns(&to->total_ns, from->total_ns, overflow);
    add_ns(&to->self_ns, from->self_ns, overflow);
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
        if (c->q && (an_quant_wants(c->q, fc->group_thread + ti * ns + st) ||
                     an_quant_wants(c->q, fc->group_role + role * ns + st)))
            return 1;
        if (c->s->merged_valid) {
            int32_t mr = fc->role_merged[role], ms = fc->stage_merged[st];
            if (an_quant_wants(c->qm, c->group_merged + (uint32_t)mr * c->s->merged.n_stages + (uint32_t)ms))
                return 1;
        }
    }
    return 0;
}

/* The first pass sums a thread's ranges in c->row and adds them to the
 * thread's row when the thread is done: workers reading threads side by
 * side write no shared cache line per range. */
static void flush_row(ctx *c, an_file_stats *fs, uint32_t ti, int64_t *busy_ns)
{
    an_stage_stats *row = &fs->thread_stage[(size_t)ti * fs->n_stages];
    for (uint32_t st = 0; st < fs->n_stages; st++) add_stats(&row[st], &c->row[st], &c->overflow);
    memset(c->row, 0, fs->n_stages * sizeof *c->row);
    add_ns(&fs->thread_busy_ns[ti], *busy_ns, &c->overflow);
    *busy_ns = 0;
}

/* End of pass 1: each role of several threads, and each merged role, gets
 * the values of its threads, stage by stage, as scan_iter adds them in later
 * passes. Returns 0 or -1 (no memory). */
static int fold_file(ctx *c, uint32_t f)
{
    an_stats *s = c->s;
    an_file_stats *fs = &s->files[f];
    file_ctx *fc = &c->fc[f];
    uint32_t ns = fs->n_stages;
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        if (!fs->thread_on[ti]) continue;
        uint32_t role = fs->thread_role[ti];
        for (uint32_t st = 0; st < ns; st++) {
            if (!fs->stage_on[st]) continue;
            uint32_t from = fc->group_thread + ti * ns + st;
            if (fs->role_threads[role] > 1 && an_quant_fold(c->q, fc->group_role + role * ns + st, from)) return -1;
            if (!s->merged_valid) continue;
            uint32_t merged = c->group_merged + (uint32_t)fc->role_merged[role] * s->merged.n_stages +
                              (uint32_t)fc->stage_merged[st];
            if (an_quant_fold_from(c->qm, merged, c->q, from)) return -1;
        }
    }
    return 0;
}

static int fold_groups(ctx *c)
{
    for (uint32_t f = 0; f < c->s->n_files; f++)
        if (fold_file(c, f)) return -1;
    return 0;
}

/* The percentiles of file f's thread and role rows, from engine q (groups
 * numbered from fc's). */
static void file_results(an_file_stats *fs, const file_ctx *fc, const an_quant *q)
{
    uint32_t ns = fs->n_stages;
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        if (!fs->thread_on[ti]) continue;
        for (uint32_t st = 0; st < ns; st++) {
            an_stage_stats *x = &fs->thread_stage[(size_t)ti * ns + st];
            if (!x->count) continue;
            for (int p = 0; p < AN_NPCT; p++) x->pct_ns[p] = an_quant_get(q, fc->group_thread + ti * ns + st, (uint32_t)p);
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
                                       : an_quant_get(q, fc->group_role + role * ns + st, (uint32_t)p);
    }
}

/* Later passes: for the thread ti, the duration ranges that any of its
 * groups (thread, role, merged role) still looks at, per stage:
 * want[st * WANT_MAX + k] for k < n_want[st]. A range whose clipped length
 * is in none of them would be ignored by every add, so scan_iter skips it
 * before any other work (most ranges, in a pass that looks for the few
 * around each percentile). */
static void want_ranges(ctx *c, uint32_t f, uint32_t ti, want_range *want, uint8_t *n_want)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    const uint32_t ns = fs->n_stages, role = fs->thread_role[ti];
    for (uint32_t st = 0; st < ns; st++) {
        uint32_t groups[3], n_groups = 0, n = 0;
        const an_quant *engine[3];
        if (c->q) {
            engine[n_groups] = c->q;
            groups[n_groups++] = fc->group_thread + ti * ns + st;
            if (fs->role_threads[role] > 1) {
                engine[n_groups] = c->q;
                groups[n_groups++] = fc->group_role + role * ns + st;
            }
        }
        if (c->s->merged_valid) {
            engine[n_groups] = c->qm;
            groups[n_groups++] = c->group_merged + (uint32_t)fc->role_merged[role] * c->s->merged.n_stages +
                                 (uint32_t)fc->stage_merged[st];
        }
        for (uint32_t g = 0; g < n_groups; g++) {
            int64_t lo[AN_QUANT_MAX_PCT], hi[AN_QUANT_MAX_PCT];
            uint32_t k = an_quant_ranges(engine[g], groups[g], lo, hi);
            for (uint32_t i = 0; i < k && n < WANT_MAX; i++) want[st * WANT_MAX + n++] = (want_range){lo[i], hi[i]};
        }
        n_want[st] = (uint8_t)n;
    }
}

/* The state of the thread being read. */
typedef struct scan_thread {
    uint32_t ti, role, role_group;
    int64_t busy_ns;
    int64_t child_ns[ST_MAX_DEPTH + 2];
} scan_thread;

/* One range of the thread, clipped to the window [w0, w1]. */
static inline __attribute__((always_inline)) void scan_range(ctx *c, an_file_stats *fs, const file_ctx *fc,
                                                             scan_thread *th, int first_pass, int merged,
                                                             uint32_t stage, uint32_t depth_in, int64_t start_ns,
                                                             int64_t end_ns)
{
    const uint32_t ns = fs->n_stages, mns = c->s->merged.n_stages;
    int64_t a = start_ns, b = end_ns;
    if (a < fs->t0_ns) a = fs->t0_ns;
    if (b > fs->t1_ns) b = fs->t1_ns;
    int64_t d = b > a ? b - a : 0;
    if (!first_pass) {
        /* Later passes only add values (self and busy time were summed in
         * pass 1): skip a range no group looks at before any other work. */
        if (stage >= ns || !fs->stage_on[stage]) return;
        const want_range *w = &c->want[(size_t)stage * WANT_MAX];
        uint32_t k = 0, n = c->n_want[stage];
        while (k < n && (uint64_t)d - (uint64_t)w[k].lo > (uint64_t)w[k].hi - (uint64_t)w[k].lo) k++;
        if (k == n) return;
        if (c->n_batch > BATCH - 3 || c->n_batch_m > BATCH - 3) flush_batch(c);
        if (c->q) {
            batch_add(c, fc->group_thread + th->ti * ns + stage, d);
            if (th->role_group) batch_add(c, fc->group_role + th->role * ns + stage, d);
        }
        if (merged)
            batch_add_merged(c, c->group_merged + (uint32_t)fc->role_merged[th->role] * mns + (uint32_t)fc->stage_merged[stage],
                      d);
        return;
    }
    uint32_t depth = depth_in <= ST_MAX_DEPTH ? depth_in : ST_MAX_DEPTH;
    int64_t kids = th->child_ns[depth + 1];
    th->child_ns[depth + 1] = 0;
    add_ns(&th->child_ns[depth], d, &c->overflow);
    if (depth == 0) add_ns(&th->busy_ns, d, &c->overflow);
    if (stage >= ns || !fs->stage_on[stage]) return;
    an_stage_stats *x = &c->row[stage];
    add_ns(&x->total_ns, d, &c->overflow);
    add_ns(&x->self_ns, d > kids ? d - kids : 0, &c->overflow);
    x->count++;
    if (d > x->max_ns) x->max_ns = d;
    c->n_ranges++;
    if (c->n_batch > BATCH - 3) flush_batch(c);
    /* In pass 1 role and merged groups get their threads' values folded in
     * at the end of the pass (fold_groups). */
    batch_add(c, fc->group_thread + th->ti * ns + stage, d);
}

static void scan_thread_start(ctx *c, uint32_t f, scan_thread *th, uint32_t ti)
{
    const an_file_stats *fs = &c->s->files[f];
    th->ti = ti;
    th->role = fs->thread_role[ti];
    /* A role of one thread takes its percentiles from the thread. */
    th->role_group = fs->role_threads[th->role] > 1;
    th->busy_ns = 0;
    memset(th->child_ns, 0, sizeof th->child_ns);
    if (c->pass != 1) want_ranges(c, f, ti, c->want, c->n_want);
}

/* The end of a thread's ranges: the ranges it never ended (a killed run)
 * count as if they ended at the end of the window (for the whole trace, of
 * the trace's span), innermost first, like any range that reaches past the
 * window; then the thread's sums are done. So every instant of the window is
 * some range's self time or idle, once. */
static int scan_thread_end(ctx *c, uint32_t f, st_reader *r, scan_thread *th)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    const int first_pass = c->pass == 1;
    st_open_range open[ST_MAX_DEPTH];
    int n = st_reader_unended(r, st_reader_thread(r, th->ti)->id, open);
    if (n < 0) return n;
    for (int k = n - 1; k >= 0; k--) {
        if (open[k].start_ns >= fc->iter_t1) continue; /* begun after the window */
        int64_t end = fs->t1_ns > open[k].start_ns ? fs->t1_ns : open[k].start_ns;
        scan_range(c, fs, fc, th, first_pass, c->s->merged_valid, open[k].stage, (uint32_t)k, open[k].start_ns, end);
    }
    if (first_pass) flush_row(c, fs, th->ti, &th->busy_ns);
    return 0;
}

/* A thread the iterator gave no range of (none in the window) may still
 * hold a range that never ended. */
static int scan_rest(ctx *c, uint32_t f, st_reader *rd, uint32_t ti)
{
    scan_thread th;
    scan_thread_start(c, f, &th, ti);
    return scan_thread_end(c, f, rd, &th);
}

/* Reads the ranges of one iterator: of the threads with index lo..hi-1 (by
 * id, as the reader lists them), those marked in needed[] (NULL: all). A needed thread
 * the iterator has no range of is still ended (scan_rest), in its place in
 * thread order, so an error is the one a single job meets first. */
static int scan_iter(ctx *c, uint32_t f, st_range_iter *it, st_reader *rd, const uint8_t *needed, uint32_t lo,
                     uint32_t hi)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    const int first_pass = c->pass == 1;
    const int merged = c->s->merged_valid;
    uint32_t cur = UINT32_MAX, on = 0, next = lo; /* threads before next are done */
    scan_thread th;
    st_range r;
    int rc;
    while ((rc = st_range_iter_next(it, &r)) == 1) {
        c->n_read++;
        if (++c->unreported == REPORT_EVERY) report(c, fs);
        if (r.thread != cur) {
            if (on && (rc = scan_thread_end(c, f, rd, &th)) < 0) break;
            cur = r.thread;
            uint32_t ti = r.thread < fc->n_ids ? fc->thread_index[r.thread] : UINT32_MAX;
            /* The reader refuses chunks of unknown threads; this is a guard. */
            on = ti != UINT32_MAX && ti >= next && ti < hi && (!needed || needed[ti]);
            if (!on) continue;
            for (; next < ti && rc >= 0; next++)
                if (!needed || needed[next]) rc = scan_rest(c, f, rd, next);
            if (rc < 0) break;
            next = ti + 1;
            scan_thread_start(c, f, &th, ti);
        }
        if (!on) continue;
        scan_range(c, fs, fc, &th, first_pass, merged, r.stage, r.depth, r.start_ns, r.start_ns + r.dur_ns);
    }
    if (rc == 0 && on) rc = scan_thread_end(c, f, rd, &th);
    for (; next < hi && rc >= 0; next++)
        if (!needed || needed[next]) rc = scan_rest(c, f, rd, next);
    flush_batch(c);
    report(c, fs);
    return rc;
}

static int scan_file_with(ctx *c, uint32_t f, st_reader *r)
{
    an_file_stats *fs = &c->s->files[f];
    file_ctx *fc = &c->fc[f];
    uint32_t n_needed = 0;
    uint8_t *needed = calloc(fs->n_threads ? fs->n_threads : 1, 1);
    if (!needed) return oom();
    for (uint32_t i = 0; i < fs->n_threads; i++) {
        needed[i] = (uint8_t)(c->pass == 1 ? fs->thread_on[i] : thread_needed(c, f, i));
        n_needed += needed[i];
    }
    int rc = 0;
    if (n_needed == fs->n_threads && n_needed > 1) {
        /* Every thread: one iterator, one query. */
        st_range_iter *it = NULL;
        rc = st_range_iter_open(&it, r, -1, fc->iter_t0, fc->iter_t1);
        if (!rc) rc = scan_iter(c, f, it, r, needed, 0, fs->n_threads);
        st_range_iter_close(it);
    } else {
        for (uint32_t i = 0; i < fs->n_threads && !rc; i++) {
            if (!needed[i]) continue;
            st_range_iter *it = NULL;
            rc = st_range_iter_open(&it, r, st_reader_thread(r, i)->id, fc->iter_t0, fc->iter_t1);
            if (!rc) rc = scan_iter(c, f, it, r, needed, i, i + 1);
            st_range_iter_close(it);
        }
    }
    free(needed);
    return rc < 0 ? -1 : 0;
}

static int scan_file(ctx *c, uint32_t f)
{
    if (scan_file_with(c, f, c->s->files[f].trace->r)) return an_trace_fail(c->s->files[f].trace);
    return AN_EXIT_OK;
}

/* ---- several jobs ----------------------------------------------------------------------- */

/* A task: one trace thread of one file, read whole by one worker. */
typedef struct task {
    uint32_t file, thread, id; /* thread index and id */
    uint32_t at;               /* its index in team.size */
    uint64_t size;             /* the largest go first */
} task;

typedef struct worker {
    struct team *team;
    ctx *c;
    st_reader *reader;         /* its reader of file reader_file (worker 0 uses the traces') */
    uint32_t reader_file;
} worker;

typedef struct team {
    an_trace *traces;
    int by_file;               /* a task is a whole file, opened for it (an_stats_compute_paths) */
    uint32_t n_files, n_workers;
    worker *workers;
    uint64_t *size;            /* [threads of all files]: chunks, then ranges read in pass 1 */
    task *tasks;               /* [threads of all files] */
    uint64_t *keys;            /* [threads of all files]: task_key of tasks[i], the pool's order */
    uint32_t n_tasks;
    an_pool *pool;             /* its lock also guards what ctx.lock guards */
} team;

static uint64_t task_key(const task *t) { return (uint64_t)t->file << 32 | t->thread; }

static int cmp_tasks(const void *pa, const void *pb)
{
    const task *a = pa, *b = pb;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    uint64_t ka = task_key(a), kb = task_key(b);
    return ka < kb ? -1 : ka > kb;
}

/* The size of each thread for the order of the first pass: its chunks,
 * counted in the index of the chunk table (reading the chunks' headers would
 * cost as much as a few percent of the pass). Later passes go by the ranges
 * each thread gave in the first. An estimate only: it decides balance,
 * nothing else. */
static void thread_sizes(const an_trace *t, const file_ctx *fc, uint64_t *size)
{
    st_chunk_count *c;
    uint32_t n_c;
    if (st_reader_range_chunks_per_thread(t->r, &c, &n_c)) return;
    for (uint32_t i = 0; i < n_c; i++) {
        int64_t id = c[i].key, n = c[i].n;
        if (id >= 0 && id < fc->n_ids && fc->thread_index[id] != UINT32_MAX)
            size[fc->thread_index[id]] = n > 0 ? (uint64_t)n : 0;
    }
    free(c);
}

/* msg as an_trace_fail prints it: after the file's name, unless it names
 * the file itself (the reader's open errors do). */
static void task_failed(team *tm, const task *tk, const char *msg, int named)
{
    const char *path = tm->traces[tk->file].path;
    char buf[1024];
    if (named && strstr(msg, path)) snprintf(buf, sizeof buf, "%s", msg);
    else snprintf(buf, sizeof buf, "%s: %s", path, msg);
    an_pool_fail(tm->pool, task_key(tk), buf);
}

/* A worker's reader opens the file again by its name: it must still be the
 * trace the others read (same run_id or none in both, stages and threads;
 * a live trace may have gained some). This asks whether a file is still
 * itself, not whether two files are ranks of one run (st_run_ids_match):
 * a trace without a run_id is still itself. */
int an_stats_same_trace(const st_reader *a, const st_reader *b)
{
    const char *ra = st_reader_meta(a, "run_id"), *rb = st_reader_meta(b, "run_id");
    if ((ra == NULL) != (rb == NULL) || (ra && strcmp(ra, rb) != 0)) return 0;
    if (st_reader_n_stages(b) < st_reader_n_stages(a) || st_reader_n_threads(b) < st_reader_n_threads(a)) return 0;
    for (uint32_t i = 0; i < st_reader_n_stages(a); i++)
        if (strcmp(st_reader_stage(a, i)->name, st_reader_stage(b, i)->name) != 0) return 0;
    for (uint32_t i = 0; i < st_reader_n_threads(a); i++)
        if (!st_reader_thread_by_id(b, st_reader_thread(a, i)->id)) return 0;
    return 1;
}

/* The worker's reader of the task's file. Worker 0 runs on the thread that
 * opened the traces and uses their readers; the others keep one reader of
 * their own, of the file of their last task, so that open files stay few
 * (jobs + files) however many files there are. NULL: failed (reported). */
static st_reader *task_reader(worker *w, const task *tk)
{
    team *tm = w->team;
    const an_trace *t = &tm->traces[tk->file];
    if (w == &tm->workers[0]) return t->r;
    if (w->reader && w->reader_file == tk->file) return w->reader;
    st_reader_close(w->reader);
    w->reader = NULL;
    st_reader *r;
    if (st_reader_open(&r, t->path) != ST_OK) {
        task_failed(tm, tk, st_last_error(), 1); /* st_last_error() is per thread: read here */
        return NULL;
    }
    if (!an_stats_same_trace(t->r, r)) {
        st_reader_close(r);
        task_failed(tm, tk, "the file changed while it was being read: analyze a copy that stays put", 0);
        return NULL;
    }
    /* It reads each chunk once a pass: a small page cache does (-N: N kB). */
    sqlite3_exec(st_reader_db(r), "PRAGMA cache_size = -256", NULL, NULL, NULL);
    w->reader = r;
    w->reader_file = tk->file;
    return r;
}

/* A file opened again by its name for a pass (an_stats_compute_paths): it
 * must still be the trace set up (same run, the same stages and threads at
 * the same indexes; a live trace may have gained some after them). NULL:
 * failed, *msg says why (and whether it names the file: *named). */
static st_reader *open_again(const an_trace *t, const an_file_stats *fs, const char **msg, int *named)
{
    st_reader *r;
    *named = 1;
    if (st_reader_open(&r, t->path) != ST_OK) {
        *msg = st_last_error(); /* per thread: the caller reads it at once */
        return NULL;
    }
    const char *run_id = st_reader_meta(r, "run_id");
    int same = (run_id == NULL) == (fs->run_id == NULL) && (!run_id || strcmp(run_id, fs->run_id) == 0) &&
               st_reader_n_stages(r) >= fs->n_stages && st_reader_n_threads(r) >= fs->n_threads;
    for (uint32_t i = 0; same && i < fs->n_stages; i++)
        same = strcmp(st_reader_stage(r, i)->name, fs->stage_names[i]) == 0 &&
               (uint8_t)st_reader_stage(r, i)->kind == fs->stage_kinds[i];
    for (uint32_t i = 0; same && i < fs->n_threads; i++) same = st_reader_thread(r, i)->id == fs->thread_ids[i];
    if (!same) {
        st_reader_close(r);
        *msg = "the file changed while it was being read: analyze a copy that stays put";
        *named = 0;
        return NULL;
    }
    /* It reads each chunk once a pass: a small page cache does (-N: N kB). */
    sqlite3_exec(st_reader_db(r), "PRAGMA cache_size = -256", NULL, NULL, NULL);
    return r;
}

/* One pass over file f, opened for it and closed after. */
static int scan_file_again(ctx *c, uint32_t f, const an_trace *t, const char **msg, int *named)
{
    st_reader *r = open_again(t, &c->s->files[f], msg, named);
    if (!r) return -1;
    file_ctx *fc = &c->fc[f];
    c->q = fc->q;
    if (fc->q && an_quant_begin_pass(fc->q)) {
        st_reader_close(r);
        c->q = NULL;
        *msg = "out of memory";
        *named = 0;
        return -1;
    }
    int rc = scan_file_with(c, f, r);
    if (rc) {
        *msg = st_last_error();
        *named = 0;
    }
    st_reader_close(r);
    /* The file's own groups end their pass now: in pass 1 its histograms
     * go (only the buckets of the wanted ranks stay), so what stays of a
     * file between passes is small. */
    if (!rc && fc->q) {
        int more = c->pass == 1 && fold_file(c, f) ? -1 : an_quant_end_pass(fc->q);
        if (more < 0) {
            *msg = "out of memory";
            *named = 0;
            rc = -1;
        } else if (more == 0) {
            file_results(&c->s->files[f], fc, fc->q);
            an_quant_free(fc->q);
            fc->q = NULL;
        }
    }
    c->q = NULL;
    return rc;
}

static void run_task(worker *w, const task *tk)
{
    if (w->team->by_file) {
        const char *msg = NULL;
        int named = 0;
        if (scan_file_again(w->c, tk->file, &w->team->traces[tk->file], &msg, &named))
            task_failed(w->team, tk, msg, named);
        return;
    }
    st_reader *r = task_reader(w, tk);
    if (!r) return;
    const file_ctx *fc = &w->c->fc[tk->file];
    st_range_iter *it = NULL;
    w->c->n_read = 0;
    int rc = st_range_iter_open(&it, r, tk->id, fc->iter_t0, fc->iter_t1);
    if (!rc) rc = scan_iter(w->c, tk->file, it, r, NULL, tk->thread, tk->thread + 1);
    st_range_iter_close(it);
    if (w->c->pass == 1) w->team->size[tk->at] = w->c->n_read; /* this task's own slot */
    if (rc < 0) task_failed(w->team, tk, st_last_error(), 0);
}

static void run_pool_task(void *arg, uint32_t worker, uint32_t task)
{
    team *tm = arg;
    run_task(&tm->workers[worker], &tm->tasks[task]);
}

static void team_free(team *tm)
{
    if (!tm) return;
    for (uint32_t i = 0; tm->workers && i < tm->n_workers; i++) {
        worker *w = &tm->workers[i];
        if (i > 0) st_reader_close(w->reader);
        if (w->c) {
            an_quant_free(w->c->qm);
            free(w->c->row);
            free(w->c->want);
            free(w->c->n_want);
        }
        free(w->c);
    }
    free(tm->workers);
    free(tm->size);
    free(tm->tasks);
    free(tm->keys);
    an_pool_free(tm->pool);
    free(tm);
}

/* Workers, kept for all the passes. */
static team *team_new(ctx *cp, an_trace *traces, uint32_t n_files, uint32_t jobs, uint32_t max_stages)
{
    team *tm = calloc(1, sizeof *tm);
    if (!tm) return NULL;
    tm->pool = an_pool_new();
    tm->traces = traces;
    tm->n_files = n_files;
    tm->n_workers = jobs;
    tm->workers = calloc(jobs, sizeof *tm->workers);
    uint32_t n_threads = 0;
    for (uint32_t f = 0; f < n_files; f++) n_threads += cp->s->files[f].n_threads;
    tm->tasks = calloc(n_threads ? n_threads : 1, sizeof *tm->tasks);
    tm->size = calloc(n_threads ? n_threads : 1, sizeof *tm->size);
    tm->keys = calloc(n_threads ? n_threads : 1, sizeof *tm->keys);
    if (!tm->pool || !tm->workers || !tm->tasks || !tm->size || !tm->keys) {
        team_free(tm);
        return NULL;
    }
    for (uint32_t f = 0, at = 0; f < n_files; at += cp->s->files[f++].n_threads)
        if (traces[f].r) thread_sizes(&traces[f], &cp->fc[f], tm->size + at);
    for (uint32_t i = 0; i < jobs; i++) {
        worker *w = &tm->workers[i];
        w->team = tm;
        w->c = calloc(1, sizeof *w->c);
        if (w->c) {
            w->c->row = calloc(max_stages, sizeof *w->c->row);
            w->c->want = malloc((size_t)max_stages * WANT_MAX * sizeof *w->c->want);
            w->c->n_want = malloc(max_stages);
        }
        if (!w->c || !w->c->row || !w->c->want || !w->c->n_want) {
            team_free(tm);
            return NULL;
        }
        w->c->s = cp->s;
        w->c->fc = cp->fc;
        w->c->group_merged = cp->group_merged;
        w->c->progress = cp->progress;
        w->c->lock = an_pool_lock(tm->pool);
    }
    return tm;
}

/* One pass with the team: the tasks are the threads the pass needs. */
static int scan_parallel(ctx *cp, team *tm)
{
    an_stats *s = cp->s;
    const int first_pass = cp->pass == 1;
    tm->n_tasks = 0;
    for (uint32_t f = 0; tm->by_file && f < s->n_files; f++) {
        int any = 0;
        cp->q = cp->fc[f].q;
        for (uint32_t i = 0; i < s->files[f].n_threads && !any; i++)
            any = first_pass ? s->files[f].thread_on[i] : thread_needed(cp, f, i);
        cp->q = NULL;
        if (any) tm->tasks[tm->n_tasks++] = (task){f, 0, 0, 0, tm->traces[f].n_ranges_hint};
    }
    for (uint32_t f = 0, at = 0; !tm->by_file && f < s->n_files; at += s->files[f++].n_threads)
        for (uint32_t i = 0; i < s->files[f].n_threads; i++)
            if (first_pass ? s->files[f].thread_on[i] : thread_needed(cp, f, i))
                tm->tasks[tm->n_tasks++] =
                    (task){f, i, s->files[f].thread_ids[i], at + i, tm->size[at + i]};
    if (tm->n_tasks < 2 && !tm->by_file) {
        for (uint32_t f = 0; f < s->n_files; f++) {
            int rc = scan_file(cp, f);
            if (rc) return rc;
        }
        return AN_EXIT_OK;
    }
    uint32_t n_workers = tm->n_workers < tm->n_tasks ? tm->n_workers : tm->n_tasks;
    qsort(tm->tasks, tm->n_tasks, sizeof *tm->tasks, cmp_tasks);
    for (uint32_t i = 0; i < tm->n_tasks; i++) tm->keys[i] = task_key(&tm->tasks[i]);
    for (uint32_t i = 0; i < n_workers; i++) {
        ctx *c = tm->workers[i].c;
        c->pass = cp->pass;
        c->qm = an_quant_shard(cp->qm);
        c->q = tm->by_file ? NULL : c->qm;
        if (!c->qm) {
            for (uint32_t j = 0; j < i; j++) {
                an_quant_free(tm->workers[j].c->qm);
                tm->workers[j].c->q = tm->workers[j].c->qm = NULL;
            }
            return oom();
        }
    }
    /* This thread is worker 0, which reads with the traces' own readers. */
    int failed = an_pool_run(tm->pool, n_workers, tm->keys, tm->n_tasks, run_pool_task, tm);
    /* A failed merge fails the engine: an_quant_end_pass says so. */
    for (uint32_t i = 0; i < n_workers; i++) {
        an_quant_merge(cp->qm, tm->workers[i].c->qm);
        tm->workers[i].c->q = tm->workers[i].c->qm = NULL;
    }
    if (failed) {
        an_error("%s", an_pool_error(tm->pool));
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

int an_stats_compute(an_stats *s, an_trace *traces, uint32_t n, const an_select *sel, int merge)
{
    return an_stats_compute_jobs(s, traces, n, sel, merge, 1);
}

/* Sets file f up: with paths, opens it first, keeps its warnings and
 * closes it after (an_stats_compute_paths). */
static int setup_one(an_stats *s, uint32_t f, an_trace *traces, char **paths, const an_select *sel, file_ctx *fc)
{
    if (!paths) return setup_file(s, f, &traces[f], sel, fc);
    int rc = an_trace_open(&traces[f], paths[f]);
    if (rc) return rc;
    rc = setup_file(s, f, &traces[f], sel, fc);
    /* kept both ways: summary knows only once all are set up whether the
     * files are one rank set */
    for (int as_rank = 0; !rc && as_rank < 2; as_rank++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *ms = open_memstream(&buf, &len);
        if (!ms) rc = oom();
        else {
            an_warn_to(ms);
            if (as_rank) an_trace_warn_rank(&traces[f]);
            else an_trace_warn(&traces[f]);
            an_warn_to(NULL);
            if (fclose(ms) || !buf) rc = oom();
            else if (as_rank) s->files[f].rank_warnings = buf;
            else s->files[f].warnings = buf;
        }
    }
    /* What stays: path, origin, span and hints; the reader and its pages go. */
    an_trace_close(&traces[f]);
    return rc;
}

int an_stats_rank_set(const an_stats *s)
{
    if (s->n_files < 1) return 0;
    const an_file_stats *f0 = &s->files[0];
    for (uint32_t i = 0; i < s->n_files; i++) {
        const an_file_stats *fi = &s->files[i];
        if (!st_run_ids_match(fi->run_id, f0->run_id) || !fi->has_rank || fi->world_size < 1 ||
            fi->world_size != f0->world_size || fi->rank >= fi->world_size)
            return 0;
        for (uint32_t j = 0; j < i; j++)
            if (s->files[j].rank == fi->rank) return 0;
    }
    return 1;
}

int an_stats_same_run(const an_stats *s) { return s->n_files >= 2 && an_stats_rank_set(s); }

/* The CPUs this process may run on (online ones, within its affinity mask),
 * at most 8: past a few workers the reading is bound by memory and SQLite,
 * and each worker holds a reader and a page cache. Small traces get one job:
 * starting workers (a reader each) costs a few milliseconds, more than they
 * save under about half a million ranges. */
int an_stats_default_jobs(uint64_t ranges)
{
    if (ranges < 500000) return 1;
    int n_cpus = an_pool_cpus();
    return n_cpus > 8 ? 8 : n_cpus;
}

static int compute(an_stats *s, an_trace *traces, char **paths, uint32_t n, const an_select *sel, int merge,
                   int jobs);

int an_stats_compute_jobs(an_stats *s, an_trace *traces, uint32_t n, const an_select *sel, int merge, int jobs)
{
    return compute(s, traces, NULL, n, sel, merge, jobs);
}

int an_stats_compute_paths(an_stats *s, an_trace *traces, char **paths, uint32_t n, const an_select *sel, int merge,
                           int jobs)
{
    return compute(s, traces, paths, n, sel, merge, jobs);
}

static int compute(an_stats *s, an_trace *traces, char **paths, uint32_t n, const an_select *sel, int merge,
                   int jobs)
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
    an_progress progress;
    memset(&progress, 0, sizeof progress);
    cp->s = s;
    cp->fc = fcs;
    cp->progress = &progress;
    for (uint32_t f = 0; f < n && !rc; f++) rc = setup_one(s, f, traces, paths, sel, &fcs[f]);
    if (!rc && merge < 0) merge = an_stats_same_run(s);
    if (!rc && !jobs) {
        uint64_t ranges = 0;
        for (uint32_t f = 0; f < n; f++) ranges += traces[f].n_ranges_hint;
        jobs = an_stats_default_jobs(ranges);
    }
    if (!rc && merge && n > 1) {
        rc = setup_merged(s, fcs);
        s->merged_valid = rc == AN_EXIT_OK;
    }
    /* Quantile groups: per file thread x stage, role x stage; merged role x
     * stage. By file, each file has an engine of its own groups (its budget
     * for collecting values is that of one file, and it is done with the
     * file), and the merged groups one of their own. */
    uint64_t groups = 0;
    for (uint32_t f = 0; f < n && !rc; f++) {
        if (paths) groups = 0;
        fcs[f].group_thread = (uint32_t)groups;
        groups += (uint64_t)s->files[f].n_threads * s->files[f].n_stages;
        fcs[f].group_role = (uint32_t)groups;
        groups += (uint64_t)s->files[f].n_roles * s->files[f].n_stages;
        if (paths && groups <= UINT32_MAX && !(fcs[f].q = an_quant_new((uint32_t)groups, pct_permille, AN_NPCT)))
            rc = oom();
        if (fcs[f].q) an_quant_defer_buffers(fcs[f].q); /* a file's buffers only while it is read */
        if (paths && groups > UINT32_MAX) break;
    }
    if (paths && groups <= UINT32_MAX) groups = 0;
    cp->group_merged = (uint32_t)groups;
    if (s->merged_valid) groups += (uint64_t)s->merged.n_roles * s->merged.n_stages;
    if (!rc && groups > UINT32_MAX) {
        an_error("too many threads x stages to summarize at once");
        rc = AN_EXIT_FAIL;
    }
    uint32_t max_stages = 1, n_selected = 0;
    for (uint32_t f = 0; f < n && !rc; f++) {
        if (s->files[f].n_stages > max_stages) max_stages = s->files[f].n_stages;
        for (uint32_t i = 0; i < s->files[f].n_threads; i++) n_selected += s->files[f].thread_on[i];
    }
    if (!rc) {
        cp->qm = an_quant_new((uint32_t)groups, pct_permille, AN_NPCT);
        cp->q = paths ? NULL : cp->qm;
        cp->pass = 1;
        cp->row = calloc(max_stages, sizeof *cp->row);
        cp->want = malloc((size_t)max_stages * WANT_MAX * sizeof *cp->want);
        cp->n_want = malloc(max_stages);
        if (!cp->qm || !cp->row || !cp->want || !cp->n_want) rc = oom();
    }
    /* Workers: no more than the threads (by file: the files) to read. */
    if (jobs > (int)(paths ? n : n_selected)) jobs = (int)(paths ? n : n_selected);
    team *tm = NULL;
    if (!rc && (jobs > 1 || paths)) {
        tm = team_new(cp, traces, n, (uint32_t)(jobs > 1 ? jobs : 1), max_stages);
        if (!tm) rc = oom();
        else tm->by_file = paths != NULL;
    }
    uint64_t hint = 0;
    for (uint32_t f = 0; f < n; f++) hint += traces[f].n_ranges_hint;
    int merged_more = 1;
    while (!rc) {
        static const char *const labels[] = {"reading ranges", "percentiles, pass 2", "percentiles, pass 3+"};
        int pass = cp->pass;
        an_progress_start(&progress, labels[pass < 3 ? pass - 1 : 2], hint);
        if (tm) rc = scan_parallel(cp, tm);
        for (uint32_t f = 0; !tm && f < n && !rc; f++) rc = scan_file(cp, f);
        an_progress_end(&progress);
        if (rc) break;
        s->passes = (uint32_t)pass;
        if (!paths && pass == 1 && fold_groups(cp)) {
            rc = oom();
            break;
        }
        int more = merged_more ? an_quant_end_pass(cp->qm) : 0;
        if (more < 0) {
            rc = oom();
            break;
        }
        merged_more = more;
        for (uint32_t f = 0; paths && f < n; f++)
            if (fcs[f].q) more = 1; /* the file's own groups want another pass */
        if (!more) break;
        cp->pass++;
    }
    /* Roles and merged rows from the thread rows; percentiles from the groups. */
    for (uint32_t f = 0; f < n && !rc; f++) {
        an_file_stats *fs = &s->files[f];
        uint32_t ns = fs->n_stages;
        if (!paths) file_results(fs, &fcs[f], cp->q); /* by file: when the file was done */
        for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
            if (!fs->thread_on[ti]) continue;
            uint32_t role = fs->thread_role[ti];
            for (uint32_t st = 0; st < ns; st++) {
                an_stage_stats *x = &fs->thread_stage[(size_t)ti * ns + st];
                if (!x->count) continue;
                add_stats(&fs->role_stage[(size_t)role * ns + st], x, &cp->overflow);
                if (s->merged_valid) {
                    uint32_t mr = (uint32_t)fcs[f].role_merged[role], ms = (uint32_t)fcs[f].stage_merged[st];
                    add_stats(&s->merged.role_stage[(size_t)mr * s->merged.n_stages + ms], x, &cp->overflow);
                }
            }
        }
    }
    if (!rc && s->merged_valid)
        for (uint32_t i = 0; i < s->merged.n_roles * s->merged.n_stages; i++)
            for (int p = 0; p < AN_NPCT; p++)
                s->merged.role_stage[i].pct_ns[p] = an_quant_get(cp->qm, cp->group_merged + i, (uint32_t)p);
    /* A role row's wall time is its threads' added up (summary's shares). */
    for (uint32_t f = 0; f < n && !rc; f++) {
        an_file_stats *fs = &s->files[f];
        int64_t role_wall;
        for (uint32_t role = 0; role < fs->n_roles; role++)
            if (__builtin_mul_overflow(fs->wall_ns, (int64_t)fs->role_threads[role], &role_wall)) cp->overflow = 1;
    }
    for (uint32_t i = 0; tm && i < tm->n_workers; i++)
        if (tm->workers[i].c && tm->workers[i].c->overflow) cp->overflow = 1;
    if (!rc && cp->overflow) {
        an_error("%s: times summed over a thread's or a role's ranges pass %lld ns (292 years): the trace's "
                 "timestamps are corrupt",
                 n == 1 ? traces[0].path : "summary", (long long)INT64_MAX);
        rc = AN_EXIT_USAGE;
    }
    team_free(tm);
    an_quant_free(cp->qm);
    free(cp->row);
    free(cp->want);
    free(cp->n_want);
    for (uint32_t f = 0; f < n; f++) {
        an_quant_free(fcs[f].q);
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
        for (uint32_t i = 0; i < fs->n_threads; i++) {
            if (fs->thread_names) free(fs->thread_names[i]);
            if (fs->thread_roles) free(fs->thread_roles[i]);
        }
        for (uint32_t i = 0; fs->stage_names && i < fs->n_stages; i++) free(fs->stage_names[i]);
        free(fs->thread_names);
        free(fs->thread_roles);
        free(fs->thread_ids);
        free(fs->stage_names);
        free(fs->stage_kinds);
        free(fs->program);
        free(fs->run_id);
        free(fs->warnings);
        free(fs->rank_warnings);
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
