/* flow_tables.c: the tables of `analyze flow` (docs/analyze.md, "flow")
 * over an_flow (flow.c): counts, end-to-end latency, queue residence per
 * producer and consumer role, time in each role, the latency breakdown by
 * outermost stage and the critical path of each step, with exact
 * percentiles (quantiles.c). `flow` prints them in any format over its
 * window (an_flow_tables); `report` takes them as text (an_flow_text).
 */
#include <stdlib.h>
#include <string.h>

#include "flow.h"

static const uint32_t permille[] = {500, 950, 990};

/* sum_ns on 128 bits: n values of up to 2^63 ns each (a handoff between two
 * ranks whose clocks are 10^18 ns apart is one), so that the mean is exact. */
typedef struct group_stat {
    uint64_t n;
    __int128 sum_ns;
    int64_t max_ns;
} group_stat;

typedef struct gv {
    uint32_t group;
    int64_t value;
} gv;

typedef struct ctx {
    an_flow f;
    const char **roles;     /* distinct roles, in thread order of first appearance */
    uint32_t n_roles;
    uint32_t *thread_role;  /* [n_threads] */
    gv *vals;
    uint64_t n_vals, cap_vals;
    int64_t t0, t1;
} ctx;

/* groups: 0 latency; 1 + from * n_roles + to: residence; 1 + n_roles^2 + role: time in role */
static uint32_t g_hop(const ctx *c, uint32_t from, uint32_t to) { return 1 + from * c->n_roles + to; }
static uint32_t g_role(const ctx *c, uint32_t role) { return 1 + c->n_roles * c->n_roles + role; }

static int push(ctx *c, uint32_t group, int64_t v)
{
    if (c->n_vals == c->cap_vals) {
        c->cap_vals = c->cap_vals ? c->cap_vals * 2 : 1024;
        gv *a = realloc(c->vals, c->cap_vals * sizeof *a);
        if (!a) return -1;
        c->vals = a;
    }
    c->vals[c->n_vals++] = (gv){group, v};
    return 0;
}

static int setup_roles(ctx *c)
{
    st_reader *r = c->f.trace->r;
    c->roles = calloc((size_t)c->f.n_threads + 1, sizeof *c->roles);
    c->thread_role = calloc((size_t)c->f.n_threads + 1, sizeof *c->thread_role);
    if (!c->roles || !c->thread_role) return -1;
    for (uint32_t t = 0; t < c->f.n_threads; t++) {
        const char *role = st_reader_thread(r, t)->role;
        uint32_t k = 0;
        while (k < c->n_roles && strcmp(c->roles[k], role) != 0) k++;
        if (k == c->n_roles) c->roles[c->n_roles++] = role;
        c->thread_role[t] = k;
    }
    return 0;
}

/* Items in the window: residence, time in role, latency; the breakdown of
 * time in role by outermost stage. */
static int collect(ctx *c, uint64_t *n_items, uint64_t *in_flight, __int128 *breakdown, uint64_t *role_segs)
{
    const an_flow *f = &c->f;
    uint32_t n_stages = st_reader_n_stages(f->trace->r);
    for (uint64_t it = 0; it < f->n_items; it++) {
        int64_t h = f->item_first[it];
        const an_flow_rec *first = &f->recs[f->handoffs[h].out_rec];
        if (first->ts_ns < c->t0 || first->ts_ns >= c->t1) continue;
        int flying;
        an_flow_item_last(f, it, NULL, &flying);
        if (flying) {
            (*in_flight)++;
            continue;
        }
        (*n_items)++;
        int64_t last_in = 0;
        for (; h >= 0; h = f->handoffs[h].next) {
            const an_flow_rec *out = &f->recs[f->handoffs[h].out_rec], *in = &f->recs[f->handoffs[h].in_rec];
            if (push(c, g_hop(c, c->thread_role[out->thread], c->thread_role[in->thread]), in->ts_ns - out->ts_ns))
                return -1;
            last_in = in->ts_ns;
            int64_t nx = f->handoffs[h].next;
            if (nx < 0) continue;
            const an_flow_rec *next_out = &f->recs[f->handoffs[nx].out_rec];
            uint32_t role = c->thread_role[in->thread];
            if (push(c, g_role(c, role), next_out->ts_ns - in->ts_ns)) return -1;
            role_segs[role]++;
            /* [in, next out) split among the thread's outermost ranges; the rest is "(none)" */
            int64_t a = in->ts_ns, b = next_out->ts_ns, covered = 0;
            uint32_t t = in->thread;
            uint64_t lo = f->thread_ranges[t], hi = f->thread_ranges[t + 1];
            while (lo < hi) { /* first range ending after a */
                uint64_t mid = lo + (hi - lo) / 2;
                if (f->ranges[mid].end_ns <= a) lo = mid + 1;
                else hi = mid;
            }
            for (uint64_t k = lo; k < f->thread_ranges[t + 1] && f->ranges[k].start_ns < b; k++) {
                int64_t s = f->ranges[k].start_ns > a ? f->ranges[k].start_ns : a;
                int64_t e = f->ranges[k].end_ns < b ? f->ranges[k].end_ns : b;
                if (e > s && f->ranges[k].stage < n_stages) {
                    breakdown[(size_t)role * (n_stages + 1) + f->ranges[k].stage] += e - s;
                    covered += e - s;
                }
            }
            breakdown[(size_t)role * (n_stages + 1) + n_stages] += b - a - covered;
        }
        if (push(c, 0, last_in - first->ts_ns)) return -1;
    }
    return 0;
}

static int quantiles(ctx *c, uint32_t n_groups, group_stat *gs, an_quant **out)
{
    an_quant *q = an_quant_new(n_groups, permille, 3);
    if (!q) return -1;
    for (uint64_t i = 0; i < c->n_vals; i++) {
        group_stat *g = &gs[c->vals[i].group];
        g->n++;
        g->sum_ns += c->vals[i].value;
        if (c->vals[i].value > g->max_ns) g->max_ns = c->vals[i].value;
    }
    for (;;) {
        for (uint64_t i = 0; i < c->n_vals; i++) an_quant_add(q, c->vals[i].group, c->vals[i].value);
        int more = an_quant_end_pass(q);
        if (more < 0) {
            an_quant_free(q);
            return -1;
        }
        if (!more) break;
    }
    *out = q;
    return 0;
}

static const an_col dist_cols[] = {
    {"from", AN_T_STR, 0}, {"to", AN_T_STR, 0},  {"n", AN_T_INT, 0},   {"mean_ms", AN_T_MS, 0},
    {"p50_ms", AN_T_MS, 0}, {"p95_ms", AN_T_MS, 0}, {"p99_ms", AN_T_MS, 0}, {"max_ms", AN_T_MS, 0},
};

static void put_dist(an_table *tb, const group_stat *g, const an_quant *q, uint32_t group)
{
    an_put_int(tb, (int64_t)g->n);
    an_put_ns(tb, g->n ? (int64_t)(g->sum_ns / (__int128)g->n) : 0); /* truncated toward zero */
    for (uint32_t k = 0; k < 3; k++) an_put_ns(tb, an_quant_get(q, group, k));
    an_put_ns(tb, g->max_ns);
    an_row_end(tb);
}

static const char *stage_name(const st_reader *r, int64_t stage)
{
    if (stage < 0) return "(none)";
    const st_stage_info *s = st_reader_stage(r, (uint32_t)stage);
    return s ? s->name : "(none)";
}

static int report(ctx *c, an_format fmt, FILE *to)
{
    const an_flow *f = &c->f;
    st_reader *r = f->trace->r;
    uint32_t n_stages = st_reader_n_stages(r);
    uint32_t n_groups = 1 + c->n_roles * c->n_roles + c->n_roles;
    group_stat *gs = calloc(n_groups, sizeof *gs);
    __int128 *breakdown = calloc((size_t)c->n_roles * (n_stages + 1), sizeof *breakdown);
    uint64_t *role_segs = calloc(c->n_roles, sizeof *role_segs);
    uint64_t n_items = 0, in_flight = 0;
    an_quant *q = NULL;
    if (!gs || !breakdown || !role_segs || collect(c, &n_items, &in_flight, breakdown, role_segs) ||
        quantiles(c, n_groups, gs, &q)) {
        free(gs);
        free(breakdown);
        free(role_segs);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    an_out *o = an_out_new(to, fmt);
    if (!o) {
        free(gs);
        free(breakdown);
        free(role_segs);
        an_quant_free(q);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    /* counts */
    static const an_col count_cols[] = {
        {"records", AN_T_INT, 0},  {"ids", AN_T_INT, 0},     {"handoffs", AN_T_INT, 0},
        {"items", AN_T_INT, 0},    {"in_flight", AN_T_INT, 0}, {"out_only", AN_T_INT, 0},
        {"in_only", AN_T_INT, 0},  {"repeated", AN_T_INT, 0}, {"in_before_out", AN_T_INT, 0},
    };
    an_out_text(o, "flow: %s\n", f->trace->path);
    an_table *tb = an_table_new(o, "flow", count_cols, 9);
    an_put_int(tb, (int64_t)f->n_recs);
    an_put_int(tb, (int64_t)f->n_ids);
    an_put_int(tb, (int64_t)f->n_handoffs);
    an_put_int(tb, (int64_t)n_items);
    an_put_int(tb, (int64_t)in_flight);
    an_put_int(tb, (int64_t)f->out_only);
    an_put_int(tb, (int64_t)f->in_only);
    an_put_int(tb, (int64_t)f->repeated);
    an_put_int(tb, (int64_t)f->in_before_out);
    an_row_end(tb);
    an_table_end(tb);
    if (f->in_before_out)
        an_out_text(o,
                    "in_before_out %llu: ids whose in was recorded before their out (left out of every figure below).\n"
                    "The producer called st_flow_out after the item became visible to the consumer (after the\n"
                    "queue's lock was released), so the consumer's st_flow_in came first: call st_flow_out\n"
                    "before releasing the lock (docs/tracer.md, \"Flows\").\n",
                    (unsigned long long)f->in_before_out);

    an_out_text(o, "\nend-to-end latency per item (last in - first out)\n");
    tb = an_table_new(o, "latency", dist_cols + 2, 6);
    put_dist(tb, &gs[0], q, 0);
    an_table_end(tb);

    an_out_text(o, "\nqueue residence per handoff (in - out), by producer and consumer role\n");
    tb = an_table_new(o, "queues", dist_cols, 8);
    for (uint32_t a = 0; a < c->n_roles; a++)
        for (uint32_t b = 0; b < c->n_roles; b++) {
            uint32_t g = g_hop(c, a, b);
            if (!gs[g].n) continue;
            an_put_str(tb, c->roles[a]);
            an_put_str(tb, c->roles[b]);
            put_dist(tb, &gs[g], q, g);
        }
    an_table_end(tb);

    an_out_text(o, "\ntime in each role per item (its in to its next out on that thread)\n");
    static const an_col role_cols[] = {
        {"role", AN_T_STR, 0},   {"n", AN_T_INT, 0},      {"mean_ms", AN_T_MS, 0}, {"p50_ms", AN_T_MS, 0},
        {"p95_ms", AN_T_MS, 0}, {"p99_ms", AN_T_MS, 0}, {"max_ms", AN_T_MS, 0},
    };
    tb = an_table_new(o, "roles", role_cols, 7);
    for (uint32_t a = 0; a < c->n_roles; a++) {
        uint32_t g = g_role(c, a);
        if (!gs[g].n) continue;
        an_put_str(tb, c->roles[a]);
        put_dist(tb, &gs[g], q, g);
    }
    an_table_end(tb);

    an_out_text(o, "\nlatency breakdown: mean time per item in each role, by outermost stage\n");
    static const an_col bd_cols[] = {
        {"role", AN_T_STR, 0}, {"stage", AN_T_STR, 0}, {"mean_ms", AN_T_MS, 0}, {"share", AN_T_PCT, 0}};
    tb = an_table_new(o, "breakdown", bd_cols, 4);
    for (uint32_t a = 0; a < c->n_roles; a++) {
        if (!role_segs[a]) continue;
        __int128 total = 0;
        for (uint32_t s = 0; s <= n_stages; s++) total += breakdown[(size_t)a * (n_stages + 1) + s];
        for (uint32_t s = 0; s <= n_stages; s++) {
            __int128 v = breakdown[(size_t)a * (n_stages + 1) + s];
            if (v <= 0) continue;
            an_put_str(tb, c->roles[a]);
            an_put_str(tb, stage_name(r, s < n_stages ? (int64_t)s : -1));
            /* the mean per item, truncated toward zero like every mean of flow */
            an_put_ns(tb, (int64_t)(v / (__int128)role_segs[a]));
            an_put_pct(tb, total > 0 ? 100.0 * (double)v / (double)total : 0.0);
            an_row_end(tb);
        }
    }
    an_table_end(tb);

    /* critical paths */
    uint32_t n_threads = f->n_threads;
    /* integers: the steps do not overlap, so their sum, and a cell's, is at most a span of the trace */
    int64_t *path_ns = calloc((size_t)n_threads * (n_stages + 1), sizeof *path_ns);
    uint32_t *path_steps = calloc((size_t)n_threads * (n_stages + 1), sizeof *path_steps);
    int rc = AN_EXIT_OK;
    if (!path_ns || !path_steps) rc = AN_EXIT_FAIL;
    static const an_col step_cols[] = {
        {"step", AN_T_INT, 0}, {"thread", AN_T_STR, 0}, {"role", AN_T_STR, 0}, {"stage", AN_T_STR, 0},
        {"ms", AN_T_MS, 0},    {"share", AN_T_PCT, 0}, {"segments", AN_T_INT, 0}};
    int64_t steps_ns = 0;
    uint64_t n_paths = 0;
    int64_t *step_ns = calloc((size_t)n_threads * (n_stages + 1), sizeof *step_ns);
    uint32_t *step_segs = calloc((size_t)n_threads * (n_stages + 1), sizeof *step_segs);
    if (!step_ns || !step_segs) rc = AN_EXIT_FAIL;
    an_out_text(o, "\ncritical path of each step: time per thread and stage on it\n");
    tb = an_table_new(o, "critical_path_steps", step_cols, 7);
    for (uint32_t m = 1; !rc && m < st_reader_n_steps(r); m++) {
        int64_t lo = st_reader_step(r, m - 1)->ts_ns, hi = st_reader_step(r, m)->ts_ns;
        if (lo < c->t0 || hi > c->t1) continue;
        an_path_seg *segs;
        uint64_t n;
        if (an_flow_critical_path(f, m, &segs, &n)) {
            rc = AN_EXIT_FAIL;
            break;
        }
        if (!n) continue;
        n_paths++;
        steps_ns += hi - lo;
        memset(step_ns, 0, (size_t)n_threads * (n_stages + 1) * sizeof *step_ns);
        memset(step_segs, 0, (size_t)n_threads * (n_stages + 1) * sizeof *step_segs);
        for (uint64_t k = 0; k < n; k++) {
            const an_path_seg *s = &segs[k];
            size_t cell = (size_t)s->thread * (n_stages + 1) + (s->stage < 0 ? n_stages : (uint32_t)s->stage);
            step_ns[cell] += s->end_ns - s->start_ns;
            step_segs[cell]++;
        }
        free(segs);
        /* rows by time on the path, descending; ties by thread and stage */
        for (;;) {
            size_t best = SIZE_MAX;
            for (size_t cell = 0; cell < (size_t)n_threads * (n_stages + 1); cell++)
                if (step_segs[cell] && (best == SIZE_MAX || step_ns[cell] > step_ns[best])) best = cell;
            if (best == SIZE_MAX) break;
            uint32_t t = (uint32_t)(best / (n_stages + 1)), s = (uint32_t)(best % (n_stages + 1));
            path_ns[best] += step_ns[best];
            path_steps[best]++;
            an_put_int(tb, (int64_t)st_reader_step(r, m)->step);
            an_put_str(tb, st_reader_thread(r, t)->name);
            an_put_str(tb, st_reader_thread(r, t)->role);
            an_put_str(tb, stage_name(r, s < n_stages ? (int64_t)s : -1));
            an_put_ns(tb, step_ns[best]);
            an_put_pct(tb, hi > lo ? 100.0 * (double)step_ns[best] / (double)(hi - lo) : 0.0);
            an_put_int(tb, step_segs[best]);
            an_row_end(tb);
            step_segs[best] = 0;
        }
    }
    free(step_ns);
    free(step_segs);
    an_table_end(tb);
    if (!rc) {
        an_out_text(o, "\ncritical path over %llu steps: time per thread and stage\n", (unsigned long long)n_paths);
        static const an_col cp_cols[] = {
            {"thread", AN_T_STR, 0}, {"role", AN_T_STR, 0}, {"stage", AN_T_STR, 0},
            {"ms", AN_T_MS, 0},      {"share", AN_T_PCT, 0}, {"steps", AN_T_INT, 0}};
        tb = an_table_new(o, "critical_path", cp_cols, 6);
        for (uint32_t t = 0; t < n_threads; t++)
            for (uint32_t s = 0; s <= n_stages; s++) {
                size_t cell = (size_t)t * (n_stages + 1) + s;
                if (path_ns[cell] <= 0) continue;
                an_put_str(tb, st_reader_thread(r, t)->name);
                an_put_str(tb, st_reader_thread(r, t)->role);
                an_put_str(tb, stage_name(r, s < n_stages ? (int64_t)s : -1));
                an_put_ns(tb, path_ns[cell]);
                an_put_pct(tb, steps_ns > 0 ? 100.0 * (double)path_ns[cell] / (double)steps_ns : 0.0);
                an_put_int(tb, path_steps[cell]);
                an_row_end(tb);
            }
        an_table_end(tb);
    }
    if (an_out_finish(o) && !rc) {
        an_error("flow: cannot write the output");
        rc = AN_EXIT_FAIL;
    }
    if (rc == AN_EXIT_FAIL) an_error("out of memory");
    free(path_ns);
    free(path_steps);
    free(gs);
    free(breakdown);
    free(role_segs);
    an_quant_free(q);
    return rc;
}

int an_flow_tables(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_format fmt, FILE *to)
{
    ctx c;
    memset(&c, 0, sizeof c);
    c.t0 = t0_ns;
    c.t1 = t1_ns;
    int rc = an_flow_load(&c.f, t);
    if (!rc && (t0_ns != INT64_MIN || t1_ns != INT64_MAX)) {
        /* a window with no flow record in it: one line that says so, not empty tables */
        uint64_t in = 0;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (uint64_t i = 0; i < c.f.n_recs; i++) {
            int64_t ts = c.f.recs[i].ts_ns;
            in += ts >= t0_ns && ts < t1_ns;
            if (ts < lo) lo = ts;
            if (ts > hi) hi = ts;
        }
        if (!in && c.f.n_recs) {
            an_error("flow: %s has no flow record in the window given (its %llu flow records lie from %.3f s to %.3f s "
                     "of --time)",
                     t->path, (unsigned long long)c.f.n_recs, (double)(lo - t->origin_ns) / 1e9,
                     (double)(hi - t->origin_ns) / 1e9);
            rc = AN_EXIT_USAGE;
        }
    }
    if (!rc && setup_roles(&c)) {
        an_error("out of memory");
        rc = AN_EXIT_FAIL;
    }
    if (!rc) rc = report(&c, fmt, to);
    an_flow_free(&c.f);
    free(c.roles);
    free(c.thread_role);
    free(c.vals);
    return rc;
}

int an_flow_text(an_trace *t, FILE *to)
{
    int has = st_reader_has_flows(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    return an_flow_tables(t, INT64_MIN, INT64_MAX, AN_FMT_TEXT, to);
}
