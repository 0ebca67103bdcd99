/* cmd_stragglers.c: `analyze stragglers SET`: which rank holds the others
 * up (docs/analyze.md, "stragglers"). Over a rank set on rank 0's clock:
 * each collective (a range of a `comm` stage) is identified by the
 * collective itself: on every rank, the ranges of one comm stage (all the
 * rank's threads together) are numbered 0, 1, ... in start order, and the
 * k-th of each rank is that rank's part of instance k. No other role's step
 * marks enter the matching (a target rank's step is "batch sent", queue
 * depth batches ahead of the drafters). The rank that begins an instance
 * last is the one the others wait for, and each other rank waits from its
 * own start to that last start. Per stage and role, the rank with the most
 * time in the stage against the median over ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

static const char help[] =
    "usage: analyze stragglers [--format text|csv|json] SET\n"
    "\n"
    "SET: the rank files of one run (several files, a directory or a quoted glob\n"
    "pattern; see docs/analyze.md, \"Rank sets\"). Per collective (ranges of comm\n"
    "stages; on each rank the ranges of a stage are numbered in start order over the\n"
    "rank's threads, and the k-th of every rank is its part of instance k): the rank\n"
    "that arrives last, how long the others wait for it, whether the same rank is\n"
    "last every time; per role and stage: the slowest rank and how far over the\n"
    "median of the ranks it is.\n"
    "\n"
    "options:\n"
    "  --format F   text (default), csv or json: tables collectives, instances, stages\n";

static const an_opt opts[] = {
    {"format", 1, AN_OPT_FORMAT},
    {"help", 0, AN_OPT_HELP},
    {NULL, 0, 0},
};

typedef struct arrival {
    uint32_t stage, rank_ix;
    uint32_t thread; /* the set's thread index: ties of start in one rank */
    uint64_t instance; /* k: the range's index among its rank's ranges of the stage, by start */
    int64_t start_ns;
} arrival;

static int cmp_stage_rank_start(const void *a, const void *b)
{
    const arrival *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->rank_ix != y->rank_ix) return x->rank_ix < y->rank_ix ? -1 : 1;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x->thread > y->thread) - (x->thread < y->thread);
}

static int cmp_instance(const void *a, const void *b)
{
    const arrival *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->instance != y->instance) return x->instance < y->instance ? -1 : 1;
    return x->rank_ix < y->rank_ix ? -1 : x->rank_ix > y->rank_ix;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct stage_total {
    uint32_t role, stage;
    int64_t *ns; /* [rank index] */
} stage_total;

static const an_col coll_cols[] = {{"stage", AN_T_STR, 0},          {"instances", AN_T_INT, 0},
                                   {"ranks", AN_T_INT, 0},          {"last_rank", AN_T_INT, 0},
                                   {"times_last", AN_T_INT, 0},     {"last_pct", AN_T_PCT, 0},
                                   {"every_time", AN_T_STR, 0},     {"mean_wait_ms", AN_T_MS, 0},
                                   {"max_wait_ms", AN_T_MS, 0}};
static const an_col inst_cols[] = {{"stage", AN_T_STR, 0},      {"instance", AN_T_INT, 0},
                                   {"step", AN_T_INT, 0},       {"ranks", AN_T_INT, 0},
                                   {"last_rank", AN_T_INT, 0},  {"late_vs_median_ms", AN_T_MS, 0},
                                   {"wait_ms", AN_T_MS, 0},     {"max_wait_ms", AN_T_MS, 0}};
static const an_col stage_cols[] = {{"role", AN_T_STR, 0},           {"stage", AN_T_STR, 0},
                                    {"kind", AN_T_STR, 0},           {"ranks", AN_T_INT, 0},
                                    {"slowest_rank", AN_T_INT, 0},   {"slowest_ms", AN_T_MS, 0},
                                    {"median_ms", AN_T_MS, 0},       {"over_median_pct", AN_T_PCT, 0}};

/* The matching: each arrival's instance index k (per stage and rank, in start order; ties of
 * start by thread), then sorted so that one instance (stage, k) is one run of the array, its
 * arrivals in rank order. n_arr may be 0 (arr NULL: a set without a comm range). */
static void match_instances(arrival *arr, size_t n_arr)
{
    if (!n_arr) return;
    qsort(arr, n_arr, sizeof *arr, cmp_stage_rank_start);
    for (size_t i = 0; i < n_arr; i++)
        arr[i].instance = i && arr[i - 1].stage == arr[i].stage && arr[i - 1].rank_ix == arr[i].rank_ix
                              ? arr[i - 1].instance + 1
                              : 0;
    qsort(arr, n_arr, sizeof *arr, cmp_instance);
}

/* One collective stage's figures: the rows of the collectives table. top is
 * a rank index (the rank last most often; ties: the lowest index). */
typedef struct coll_stats {
    uint64_t instances;
    uint32_t ranks_with, top, times_last;
    int every;
    int64_t mean_wait_ns, max_wait_ns;
} coll_stats;

/* One instance that two or more ranks share: its arrivals arr[first, first + m), the one that
 * begins last, the median start, the others' mean and longest wait for it. */
typedef struct instance_stats {
    const arrival *first, *last;
    uint32_t m;
    int64_t median_start_ns, mean_wait_ns, max_wait_ns;
} instance_stats;

typedef void (*instance_fn)(void *arg, uint32_t stage, const instance_stats *in);

/* The aggregation, for the command's tables and for the report alike: the stage whose arrivals
 * begin at arr[i] (matched and sorted by match_instances), its instances handed to each_instance
 * (when not NULL) in order, its figures in *out. last_count and starts hold n_ranks entries
 * (scratch: an instance has at most one arrival per rank). Returns the index past the stage. */
static size_t aggregate_stage(const arrival *arr, size_t n_arr, size_t i, uint32_t n_ranks, uint32_t *last_count,
                              int64_t *starts, coll_stats *out, instance_fn each_instance, void *arg)
{
    uint32_t stage = arr[i].stage;
    uint64_t instances = 0;
    __int128 wait_sum = 0;
    int64_t wait_max = 0;
    memset(last_count, 0, n_ranks * sizeof *last_count);
    size_t j = i;
    while (j < n_arr && arr[j].stage == stage) {
        size_t e = j;
        while (e < n_arr && arr[e].stage == stage && arr[e].instance == arr[j].instance) e++;
        uint32_t m = (uint32_t)(e - j);
        if (m >= 2) {
            size_t last = j;
            for (size_t k = j; k < e; k++) {
                if (arr[k].start_ns > arr[last].start_ns) last = k;
                starts[k - j] = arr[k].start_ns;
            }
            qsort(starts, m, sizeof *starts, cmp_i64);
            __int128 w = 0; /* the waits of up to 2^32 ranks of up to 2^63 ns each */
            int64_t wmax = 0;
            for (size_t k = j; k < e; k++) {
                int64_t d = arr[last].start_ns - arr[k].start_ns;
                w += d;
                if (d > wmax) wmax = d;
            }
            int64_t wmean = (int64_t)(w / (m - 1));
            instances++;
            last_count[arr[last].rank_ix]++;
            wait_sum += wmean;
            if (wmax > wait_max) wait_max = wmax;
            if (each_instance) {
                instance_stats in = {&arr[j], &arr[last], m, starts[(m - 1) / 2], wmean, wmax};
                each_instance(arg, stage, &in);
            }
        }
        j = e;
    }
    memset(out, 0, sizeof *out);
    out->instances = instances;
    if (instances) {
        for (uint32_t k = 1; k < n_ranks; k++)
            if (last_count[k] > last_count[out->top]) out->top = k;
        for (uint32_t k = 0; k < n_ranks; k++) {
            int has = 0;
            for (size_t q = i; q < j && !has; q++) has = arr[q].rank_ix == k;
            out->ranks_with += (uint32_t)has;
        }
        out->times_last = last_count[out->top];
        out->every = out->times_last == instances;
        out->mean_wait_ns = (int64_t)(wait_sum / (__int128)instances);
        out->max_wait_ns = wait_max;
    }
    return j;
}

/* A rank's own step marks on rank 0's clock, for the instances table's `step`. */
typedef struct rank_marks {
    int64_t *ts_ns;
    uint64_t *step;
    uint32_t n;
} rank_marks;

static void rank_marks_free(rank_marks *m, uint32_t n_ranks)
{
    if (!m) return;
    for (uint32_t i = 0; i < n_ranks; i++) {
        free(m[i].ts_ns);
        free(m[i].step);
    }
    free(m);
}

/* Each rank's marks mapped (a mark whose time does not map leaves the rank with none). */
static rank_marks *rank_marks_load(an_trace *t)
{
    rank_marks *m = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *m);
    if (!m) return NULL;
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        st_reader *part = st_reader_part(t->r, i);
        uint32_t n = part ? st_reader_n_steps(part) : 0;
        if (!n) continue;
        m[i].ts_ns = malloc(n * sizeof *m[i].ts_ns);
        m[i].step = malloc(n * sizeof *m[i].step);
        if (!m[i].ts_ns || !m[i].step) {
            rank_marks_free(m, i + 1);
            return NULL;
        }
        st_rank_clock c;
        st_reader_rank_clock(part, &c);
        m[i].n = n;
        for (uint32_t k = 0; k < n && m[i].n; k++) {
            m[i].step[k] = st_reader_step(part, k)->step;
            if (st_rank_clock_map(&c, st_reader_step(part, k)->ts_ns, &m[i].ts_ns[k]) != ST_OK) m[i].n = 0;
        }
    }
    return m;
}

/* The instance's step: on the first of its ranks (in rank order) that has step marks, the first
 * mark after that rank's start of it. 0 when there is none. */
static int instance_step(const rank_marks *marks, const instance_stats *in, uint64_t *step)
{
    for (uint32_t q = 0; q < in->m; q++) {
        const arrival *a = &in->first[q];
        const rank_marks *m = &marks[a->rank_ix];
        if (!m->n) continue;
        uint32_t lo = 0, hi = m->n;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (m->ts_ns[mid] > a->start_ns) hi = mid;
            else lo = mid + 1;
        }
        if (lo == m->n) return 0;
        *step = m->step[lo];
        return 1;
    }
    return 0;
}

/* A row of the instances table. */
typedef struct instance_rows {
    an_table *tb;
    st_reader *r;
    const int *rank_of;
    const rank_marks *marks;
} instance_rows;

static void put_instance_row(void *arg, uint32_t stage, const instance_stats *in)
{
    instance_rows *rows = arg;
    an_table *tb = rows->tb;
    uint64_t step = 0;
    an_put_str(tb, st_reader_stage(rows->r, stage)->name);
    an_put_int(tb, (int64_t)in->first->instance);
    if (instance_step(rows->marks, in, &step)) an_put_int(tb, (int64_t)step);
    else an_put_null(tb);
    an_put_int(tb, in->m);
    an_put_int(tb, rows->rank_of[in->last->rank_ix]);
    an_put_ns(tb, in->last->start_ns - in->median_start_ns);
    an_put_ns(tb, in->mean_wait_ns);
    an_put_ns(tb, in->max_wait_ns);
    an_row_end(tb);
}

static int run(an_trace *t, an_format fmt)
{
    st_reader *r = t->r;
    uint32_t n_ranks = t->n_ranks, nt = st_reader_n_threads(r);
    int *rank_of = malloc(n_ranks * sizeof *rank_of);
    const char **roles = malloc((nt ? nt : 1) * sizeof *roles);
    uint32_t n_roles = 0;
    arrival *arr = NULL;
    size_t n_arr = 0, cap = 0;
    stage_total *tot = NULL;
    uint32_t n_tot = 0;
    rank_marks *marks = NULL;
    int rc = AN_EXIT_OK;
    if (!rank_of || !roles) goto oom;
    for (uint32_t i = 0; i < n_ranks; i++) {
        int64_t v = 0;
        an_trace tmp = t->ranks[i];
        tmp.r = st_reader_part(r, i);
        an_trace_meta_i64(&tmp, "rank", &v);
        rank_of[i] = (int)v;
    }
    for (uint32_t th = 0; th < nt && !rc; th++) {
        const st_thread_info *info = st_reader_thread(r, th);
        uint32_t part, local;
        st_reader_thread_part(r, th, &part, &local);
        uint32_t role = 0;
        while (role < n_roles && strcmp(roles[role], info->role) != 0) role++;
        if (role == n_roles) roles[n_roles++] = info->role;
        st_range_iter *it;
        if (st_range_iter_open(&it, r, th, INT64_MIN, INT64_MAX) != ST_OK) {
            rc = an_trace_fail(t);
            break;
        }
        st_range g;
        int n;
        while ((n = st_range_iter_next(it, &g)) == 1) {
            uint32_t k = 0;
            while (k < n_tot && !(tot[k].role == role && tot[k].stage == g.stage)) k++;
            if (k == n_tot) {
                stage_total *nt2 = realloc(tot, (n_tot + 1) * sizeof *nt2);
                if (!nt2) break;
                tot = nt2;
                tot[k].role = role;
                tot[k].stage = g.stage;
                tot[k].ns = calloc(n_ranks, sizeof *tot[k].ns);
                n_tot++;
                if (!tot[k].ns) break;
            }
            tot[k].ns[part] += g.dur_ns; /* every depth: a stage's own total on that rank */
            if (st_reader_stage(r, g.stage)->kind != ST_COMM) continue;
            if (n_arr == cap) {
                cap = cap ? cap * 2 : 1024;
                arrival *na = realloc(arr, cap * sizeof *na);
                if (!na) break;
                arr = na;
            }
            arr[n_arr++] = (arrival){g.stage, part, th, 0, g.start_ns};
        }
        st_range_iter_close(it);
        if (n < 0) rc = an_trace_fail(t);
        else if (n == 1) goto oom;
    }
    if (rc) goto done;
    match_instances(arr, n_arr);
    marks = rank_marks_load(t);
    if (!marks) goto oom;
    an_out *out = an_out_new(stdout, fmt);
    if (!out) goto oom;
    an_out_text(out, "== %s: stragglers over %u of %lld ranks; collectives (comm stages) matched by stage and "
                     "instance (the k-th range of the stage on each rank)\n",
                t->label, n_ranks, (long long)t->world_size);
    /* per stage: instances, how often each rank is last, the others' waits */
    an_table *ct = an_table_new(out, "collectives", coll_cols, 9);
    an_table *it_tb = NULL;
    uint32_t *last_count = calloc(n_ranks, sizeof *last_count);
    int64_t *starts = malloc(n_ranks * sizeof *starts);
    char verdict[1024] = "";
    size_t vlen = 0;
    if (!ct || !last_count || !starts) goto oom_out;
    /* two passes over the instances: the collectives table first, then each instance */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            an_table_end(ct);
            ct = NULL;
            it_tb = an_table_new(out, "instances", inst_cols, 8);
            if (!it_tb) goto oom_out;
        }
        instance_rows rows = {it_tb, r, rank_of, marks};
        for (size_t i = 0; i < n_arr;) {
            uint32_t stage = arr[i].stage;
            coll_stats c;
            i = aggregate_stage(arr, n_arr, i, n_ranks, last_count, starts, &c,
                                pass == 1 ? put_instance_row : NULL, &rows);
            if (pass == 0 && c.instances) {
                an_put_str(ct, st_reader_stage(r, stage)->name);
                an_put_int(ct, (int64_t)c.instances);
                an_put_int(ct, c.ranks_with);
                an_put_int(ct, rank_of[c.top]);
                an_put_int(ct, c.times_last);
                an_put_pct(ct, 100.0 * c.times_last / (double)c.instances);
                an_put_str(ct, c.every ? "yes" : "no");
                an_put_ns(ct, c.mean_wait_ns);
                an_put_ns(ct, c.max_wait_ns);
                an_row_end(ct);
                char ms[40];
                an_fmt_fixed(ms, c.mean_wait_ns, 6, 3);
                if (vlen < sizeof verdict - 200)
                    vlen += (size_t)snprintf(verdict + vlen, sizeof verdict - vlen,
                                             "Straggler at %.64s: rank %d arrives last in %u of %llu instances%s; the "
                                             "others wait %s ms for it on average.\n",
                                             st_reader_stage(r, stage)->name, rank_of[c.top], c.times_last,
                                             (unsigned long long)c.instances, c.every ? " (every time)" : "", ms);
            }
        }
    }
    an_table_end(it_tb);
    it_tb = NULL;
    /* per role and stage: the slowest rank against the median of the ranks with the stage */
    an_table *st = an_table_new(out, "stages", stage_cols, 8);
    if (!st) goto oom_out;
    int64_t *vals = malloc(n_ranks * sizeof *vals);
    if (!vals) {
        an_table_end(st);
        goto oom_out;
    }
    char slow_line[512] = "";
    double worst_pct = 0;
    for (uint32_t k = 0; k < n_tot; k++) {
        uint32_t m = 0, slow = 0;
        for (uint32_t q = 0; q < n_ranks; q++) {
            int has = 0;
            for (uint32_t th = 0; th < nt && !has; th++) {
                uint32_t part, local;
                st_reader_thread_part(r, th, &part, &local);
                has = part == q && strcmp(st_reader_thread(r, th)->role, roles[tot[k].role]) == 0;
            }
            if (!has) continue;
            vals[m++] = tot[k].ns[q];
            if (tot[k].ns[q] > tot[k].ns[slow] || m == 1) slow = q;
        }
        if (m < 2) continue;
        qsort(vals, m, sizeof *vals, cmp_i64);
        int64_t median = vals[(m - 1) / 2];
        double pct = median > 0 ? 100.0 * (double)(tot[k].ns[slow] - median) / (double)median : 0;
        const st_stage_info *si = st_reader_stage(r, tot[k].stage);
        an_put_str(st, roles[tot[k].role]);
        an_put_str(st, si->name);
        an_put_str(st, st_kind_name(si->kind));
        an_put_int(st, m);
        an_put_int(st, rank_of[slow]);
        an_put_ns(st, tot[k].ns[slow]);
        an_put_ns(st, median);
        an_put_pct(st, pct);
        an_row_end(st);
        if (si->kind == ST_WORK && pct > worst_pct) {
            worst_pct = pct;
            snprintf(slow_line, sizeof slow_line, "Slowest rank in work: rank %d in %.64s (%.64s), %.1f%% over the median of %u ranks.\n",
                     rank_of[slow], si->name, roles[tot[k].role], pct, m);
        }
    }
    free(vals);
    an_table_end(st);
    if (an_out_format(out) == AN_FMT_TEXT) {
        if (!n_arr || !vlen) an_out_text(out, "No collective (comm stage) is shared by two ranks.\n");
        else an_out_text(out, "%s", verdict);
        if (*slow_line) an_out_text(out, "%s", slow_line);
    }
    free(last_count);
    free(starts);
    if (an_out_finish(out)) {
        an_error("stragglers: cannot write the output");
        rc = AN_EXIT_FAIL;
    }
    goto done;
oom_out:
    an_table_end(ct);
    an_table_end(it_tb);
    an_out_finish(out);
    free(last_count);
    free(starts);
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
done:
    rank_marks_free(marks, n_ranks);
    for (uint32_t k = 0; k < n_tot; k++) free(tot[k].ns);
    free(tot);
    free(arr);
    free(roles);
    free(rank_of);
    return rc;
}

int cmd_stragglers(int argc, char **argv)
{
    an_args a;
    an_format fmt = AN_FMT_TEXT;
    an_common_opts common = {help, &fmt, NULL, 0, 0};
    if (an_args_init(&a, "stragglers", argc, argv)) return AN_EXIT_FAIL;
    int id, rc = AN_EXIT_OK;
    while ((id = an_args_next_own(&a, opts, &common)) > 0) {
    }
    if (common.help_shown) {
        an_args_free(&a);
        return AN_EXIT_OK;
    }
    if (id < 0) rc = AN_EXIT_USAGE;
    if (!rc && a.n_pos == 0) rc = an_usage_error("stragglers", "no trace file given");
    an_trace t;
    int opened = 0;
    if (!rc) {
        rc = an_trace_open_inputs(&t, a.pos, a.n_pos);
        opened = rc == AN_EXIT_OK;
    }
    if (!rc && !t.is_set) {
        an_error("stragglers: %s is one trace, not a rank set (give the rank files of one run)", t.path);
        rc = AN_EXIT_USAGE;
    }
    if (!rc) {
        rc = run(&t, fmt);
        if (!rc) an_trace_warn(&t);
    }
    if (opened) an_trace_close(&t);
    an_args_free(&a);
    return rc;
}

/* ---- for the report: the collectives table and each rank's busy and wait time ---------- */

void an_stragglers_free(an_stragglers *s)
{
    free(s->coll);
    free(s->ranks);
    memset(s, 0, sizeof *s);
}

int an_stragglers_compute(an_trace *t, an_stragglers *s)
{
    memset(s, 0, sizeof *s);
    st_reader *r = t->r;
    uint32_t n_ranks = t->n_ranks, nt = st_reader_n_threads(r);
    arrival *arr = NULL;
    size_t n_arr = 0, cap = 0;
    uint32_t *last_count = calloc(n_ranks ? n_ranks : 1, sizeof *last_count);
    int64_t *starts = malloc((n_ranks ? n_ranks : 1) * sizeof *starts);
    s->ranks = calloc(n_ranks ? n_ranks : 1, sizeof *s->ranks);
    s->n_ranks = n_ranks;
    if (!last_count || !starts || !s->ranks) goto oom;
    int64_t span = t->has_span && t->span_t1_ns > t->span_t0_ns ? t->span_t1_ns - t->span_t0_ns : 0;
    for (uint32_t i = 0; i < n_ranks; i++) {
        int64_t v = 0;
        an_trace tmp = t->ranks[i];
        tmp.r = st_reader_part(r, i);
        an_trace_meta_i64(&tmp, "rank", &v);
        s->ranks[i].rank = (int)v;
    }
    for (uint32_t th = 0; th < nt; th++) {
        uint32_t part, local;
        if (st_reader_thread_part(r, th, &part, &local) != ST_OK || part >= n_ranks) continue;
        an_rank_load *rl = &s->ranks[part];
        rl->threads++;
        rl->total_ns += span;
        st_range_iter *it;
        if (st_range_iter_open(&it, r, (int64_t)st_reader_thread(r, th)->id, INT64_MIN, INT64_MAX) != ST_OK) {
            free(arr);
            free(last_count);
            free(starts);
            an_stragglers_free(s);
            return an_trace_fail(t);
        }
        st_range g;
        int n;
        while ((n = st_range_iter_next(it, &g)) == 1) {
            st_kind kind = st_reader_stage(r, g.stage)->kind;
            if (g.depth == 0) {
                if (kind == ST_WORK || kind == ST_SYNC || kind == ST_COPY) rl->busy_ns += g.dur_ns;
                else rl->wait_ns += g.dur_ns;
            }
            if (kind != ST_COMM) continue;
            if (n_arr == cap) {
                cap = cap ? cap * 2 : 1024;
                arrival *na = realloc(arr, cap * sizeof *na);
                if (!na) break;
                arr = na;
            }
            arr[n_arr++] = (arrival){g.stage, part, th, 0, g.start_ns};
        }
        st_range_iter_close(it);
        if (n < 0) {
            free(arr);
            free(last_count);
            free(starts);
            an_stragglers_free(s);
            return an_trace_fail(t);
        }
        if (n == 1) goto oom;
    }
    match_instances(arr, n_arr);
    for (size_t i = 0; i < n_arr;) {
        uint32_t stage = arr[i].stage;
        coll_stats c;
        i = aggregate_stage(arr, n_arr, i, n_ranks, last_count, starts, &c, NULL, NULL);
        if (c.instances) {
            an_straggler *nc = realloc(s->coll, (s->n_coll + 1) * sizeof *nc);
            if (!nc) goto oom;
            s->coll = nc;
            s->coll[s->n_coll++] = (an_straggler){st_reader_stage(r, stage)->name, c.instances, c.ranks_with,
                                                  s->ranks[c.top].rank, c.times_last, c.every, c.mean_wait_ns,
                                                  c.max_wait_ns};
        }
    }
    free(arr);
    free(last_count);
    free(starts);
    return AN_EXIT_OK;
oom:
    free(arr);
    free(last_count);
    free(starts);
    an_stragglers_free(s);
    an_error("out of memory");
    return AN_EXIT_FAIL;
}
