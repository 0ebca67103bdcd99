/* pipeline.c: the per-step model of a pipeline trace (see pipeline.h), the
 * bottleneck verdict and its what-if bound, shared by `bottleneck`, `diff`
 * and `report`.
 *
 * The scan reads each thread's begin/end events once, in recorded order,
 * keeping its own stack of open stages: the time between two events belongs
 * to the innermost open range (self time), split at step marks; a range is
 * counted in the step window where it begins (as the profile lines do).
 * Threads are independent, so there is no merge across threads; a thread's
 * per-bin sums are folded into its role's, and its idle time per bin is the
 * bin's length minus its self time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "pipeline.h"

static int pipe_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

int an_pipe_known_role(const char *name)
{
    static const char *const order[] = {"loader", "target", "post", "drafter"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, order[i]) == 0) return i;
    if (strcmp(name, "main") == 0) return 1000;
    return -1;
}

int32_t an_pipe_role_index(const an_pipe *p, const char *name)
{
    for (uint32_t r = 0; r < p->n_roles; r++)
        if (strcmp(p->role_names[r], name) == 0) return (int32_t)r;
    return -1;
}

/* ---- bins from the step marks --------------------------------------------------------- */

/* Every sum of the model is bounded by the analysed period times the number
 * of threads; a period so long that those sums could overflow int64 comes
 * only from corrupt timestamps, and is refused. */
static int check_period(const an_pipe *p)
{
    int64_t period;
    int64_t limit = INT64_MAX / 4 / ((int64_t)p->n_threads + 1);
    if (__builtin_sub_overflow(p->bin_t[p->n_bins], p->bin_t[0], &period) || period > limit) {
        an_error("%s: the trace spans more time than any run can (%s); its timestamps are corrupt", p->trace->path,
                 p->has_steps ? "step marks" : "chunk headers and step marks");
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

static int setup_bins(an_pipe *p, const an_pipe_opts *o)
{
    st_reader *r = p->trace->r;
    uint32_t n_marks = st_reader_n_steps(r), first = o->skip_steps;
    uint64_t max_cells = o->max_cells ? o->max_cells : AN_PIPE_MAX_CELLS;
    uint64_t cells_per_bin = (uint64_t)(p->n_roles ? p->n_roles : 1) * p->n_cols;
    uint32_t n_windows = n_marks > first + 1 ? n_marks - first - 1 : 0;
    p->has_steps = n_windows > 0;
    if (!p->has_steps) {
        p->n_bins = 1;
        p->steps_per_bin = 0;
    } else {
        uint64_t max_bins = max_cells / cells_per_bin;
        if (max_bins < 1) max_bins = 1;
        p->steps_per_bin = (uint32_t)((n_windows + max_bins - 1) / max_bins);
        p->n_bins = (n_windows + p->steps_per_bin - 1) / p->steps_per_bin;
    }
    size_t nb = p->n_bins;
    p->bin_t = calloc(nb + 1, sizeof *p->bin_t);
    p->bin_step_first = calloc(nb, sizeof *p->bin_step_first);
    p->bin_step_last = calloc(nb, sizeof *p->bin_step_last);
    p->bin_steps = calloc(nb, sizeof *p->bin_steps);
    p->bin_tokens = calloc(nb, sizeof *p->bin_tokens);
    p->self_ns = calloc(nb * cells_per_bin, sizeof *p->self_ns);
    p->count = calloc(nb * (p->n_roles ? p->n_roles : 1) * (p->n_stages ? p->n_stages : 1), sizeof *p->count);
    if (!p->bin_t || !p->bin_step_first || !p->bin_step_last || !p->bin_steps || !p->bin_tokens || !p->self_ns ||
        !p->count)
        return pipe_oom();
    if (!p->has_steps) {
        p->bin_t[0] = p->trace->span_t0_ns;
        p->bin_t[1] = p->trace->span_t1_ns;
        return check_period(p);
    }
    p->step_open = st_reader_step(r, first)->step;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        uint32_t m0 = first + b * p->steps_per_bin;               /* opening mark */
        uint32_t m1 = m0 + p->steps_per_bin;                      /* closing mark */
        if (m1 > n_marks - 1) m1 = n_marks - 1;
        p->bin_t[b] = st_reader_step(r, m0)->ts_ns;
        p->bin_t[b + 1] = st_reader_step(r, m1)->ts_ns;
        p->bin_step_first[b] = st_reader_step(r, m0 + 1)->step;
        p->bin_step_last[b] = st_reader_step(r, m1)->step;
        p->bin_steps[b] = m1 - m0;
        for (uint32_t m = m0 + 1; m <= m1; m++) p->bin_tokens[b] += st_reader_step(r, m)->tokens;
    }
    return check_period(p);
}

/* ---- the scan ---------------------------------------------------------------------------- */

/* Bin of time ts: -1 before the first, n_bins at or after the end. */
static int64_t bin_of(const an_pipe *p, int64_t ts)
{
    uint32_t lo = 0, hi = p->n_bins + 1; /* boundaries <= ts */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->bin_t[mid] <= ts) lo = mid + 1;
        else hi = mid;
    }
    return (int64_t)lo - 1;
}

/* [a, ts) to stage (UINT32_MAX: no stage's), split at the bins; *b is the
 * bin of a (-1 before the first) and moves along. */
static void charge_bins(const an_pipe *p, int64_t *ns, int64_t *b, int64_t a, int64_t ts, uint32_t stage)
{
    const int64_t *bt = p->bin_t;
    while (a < ts) {
        if (*b < 0) {
            if (ts < bt[0]) break;
            a = bt[0];
            *b = 0;
            continue;
        }
        if (*b >= p->n_bins) break;
        int64_t end = ts < bt[*b + 1] ? ts : bt[*b + 1];
        if (stage < p->n_stages) ns[(size_t)*b * p->n_stages + stage] += end - a;
        a = end;
        if (a == bt[*b + 1]) (*b)++;
    }
}

/* One thread: self time per (bin, stage) into ns[], begins into cnt[]. A
 * range that never ended (a killed run) holds its stage to the end of the
 * last bin, as the profile lines count it. */
static int scan_thread(an_pipe *p, uint32_t ti, int64_t *ns, uint32_t *cnt, an_progress *prog)
{
    st_reader *r = p->trace->r;
    st_event_iter *it = NULL;
    int rc = st_event_iter_open(&it, r, st_reader_thread(r, ti)->id);
    if (rc) return rc;
    const uint32_t n_stages = p->n_stages, n_bins = p->n_bins;
    uint32_t stack[ST_STACK_MAX + 1];
    uint32_t depth = 0;
    int64_t last = 0, b = 0;
    int started = 0;
    uint64_t n = 0;
    st_event ev;
    while ((rc = st_event_iter_next(it, &ev)) == 1) {
        int64_t ts = ev.ts_ns;
        if (!started) {
            started = 1;
            b = bin_of(p, ts);
        } else {
            /* [last, ts) goes to the innermost open stage, split at the bins. */
            charge_bins(p, ns, &b, last, ts, depth ? stack[depth - 1] : UINT32_MAX);
        }
        last = ts;
        if (ev.is_end) {
            if (depth) depth--;
        } else {
            /* A stage id the stages table does not have can only come from a
             * trace whose stages table is empty (the decoder checks ids
             * against it otherwise): its time counts as no stage's. */
            uint32_t stage = ev.stage < n_stages ? ev.stage : UINT32_MAX;
            if (b >= 0 && b < n_bins && stage != UINT32_MAX) cnt[(size_t)b * n_stages + stage]++;
            if (depth <= ST_STACK_MAX) stack[depth++] = stage;
        }
        if (++n == 65536) {
            an_progress_add(prog, n);
            n = 0;
        }
    }
    if (rc == 0 && started && depth) charge_bins(p, ns, &b, last, p->bin_t[n_bins], stack[depth - 1]);
    an_progress_add(prog, n);
    st_event_iter_close(it);
    return rc;
}

/* Adds a thread's bins to its role, with the idle time of each bin. */
static void fold_thread(an_pipe *p, uint32_t role, int64_t *ns, uint32_t *cnt)
{
    const uint32_t n_stages = p->n_stages, n_cols = p->n_cols;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        int64_t *to = &p->self_ns[((size_t)b * p->n_roles + role) * n_cols];
        uint32_t *cto = &p->count[((size_t)b * p->n_roles + role) * n_stages];
        int64_t *from = &ns[(size_t)b * n_stages];
        uint32_t *cfrom = &cnt[(size_t)b * n_stages];
        int64_t busy = 0;
        for (uint32_t s = 0; s < n_stages; s++) {
            to[s] += from[s];
            busy += from[s];
            cto[s] += cfrom[s];
        }
        int64_t len = p->bin_t[b + 1] - p->bin_t[b];
        to[n_stages] += len > busy ? len - busy : 0;
    }
    memset(ns, 0, (size_t)p->n_bins * n_stages * sizeof *ns);
    memset(cnt, 0, (size_t)p->n_bins * n_stages * sizeof *cnt);
}

/* ---- role order ---------------------------------------------------------------------------- */

typedef struct role_key {
    uint32_t role;
    int cls;
    const char *name;
} role_key;

static int cmp_role_key(const void *a, const void *b)
{
    const role_key *x = a, *y = b;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_role_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Pipeline order: the trainer's when every role (but main) is one of its
 * names; otherwise sources (roles that wait only for output) first, then
 * roles that wait for both, then sinks (wait only for input), then roles
 * that never wait, main last; ties by name. Reorders the role arrays. */
static int order_roles(an_pipe *p)
{
    uint32_t nr = p->n_roles;
    role_key *keys = calloc(nr ? nr : 1, sizeof *keys);
    uint32_t *new_of_old = calloc(nr ? nr : 1, sizeof *new_of_old);
    if (!keys || !new_of_old) {
        free(keys);
        free(new_of_old);
        return pipe_oom();
    }
    int all_known = 1;
    for (uint32_t r = 0; r < nr; r++)
        if (an_pipe_known_role(p->role_names[r]) < 0) all_known = 0;
    p->order_inferred = !all_known;
    for (uint32_t r = 0; r < nr; r++) {
        keys[r].role = r;
        keys[r].name = p->role_names[r];
        if (all_known) {
            keys[r].cls = an_pipe_known_role(p->role_names[r]);
            continue;
        }
        int64_t wi = 0, wo = 0;
        for (uint32_t b = 0; b < p->n_bins; b++)
            for (uint32_t s = 0; s < p->n_stages; s++) {
                st_kind k = st_reader_stage(p->trace->r, s)->kind;
                if (k == ST_WAIT_INPUT) wi += an_pipe_self(p, b, r, s);
                if (k == ST_WAIT_OUTPUT) wo += an_pipe_self(p, b, r, s);
            }
        keys[r].cls = strcmp(p->role_names[r], "main") == 0 ? 4 : wo && !wi ? 0 : wo && wi ? 1 : wi ? 2 : 3;
    }
    qsort(keys, nr, sizeof *keys, cmp_role_key);
    int identity = 1;
    for (uint32_t i = 0; i < nr; i++) {
        new_of_old[keys[i].role] = i;
        if (keys[i].role != i) identity = 0;
    }
    int rc = AN_EXIT_OK;
    if (!identity) {
        size_t nb = p->n_bins;
        const char **names = malloc(nr * sizeof *names);
        uint32_t *threads = malloc(nr * sizeof *threads);
        int64_t *self = malloc(nb * nr * p->n_cols * sizeof *self);
        uint32_t *count = malloc(nb * nr * (p->n_stages ? p->n_stages : 1) * sizeof *count);
        if (!names || !threads || !self || !count) {
            free(names);
            free(threads);
            free(self);
            free(count);
            rc = pipe_oom();
        } else {
            for (uint32_t r = 0; r < nr; r++) {
                uint32_t to = new_of_old[r];
                names[to] = p->role_names[r];
                threads[to] = p->role_threads[r];
                for (size_t b = 0; b < nb; b++) {
                    memcpy(&self[(b * nr + to) * p->n_cols], &p->self_ns[(b * nr + r) * p->n_cols],
                           p->n_cols * sizeof *self);
                    memcpy(&count[(b * nr + to) * p->n_stages], &p->count[(b * nr + r) * p->n_stages],
                           p->n_stages * sizeof *count);
                }
            }
            for (uint32_t i = 0; i < p->n_threads; i++) p->thread_role[i] = new_of_old[p->thread_role[i]];
            free(p->role_names);
            free(p->role_threads);
            free(p->self_ns);
            free(p->count);
            p->role_names = names;
            p->role_threads = threads;
            p->self_ns = self;
            p->count = count;
        }
    }
    free(keys);
    free(new_of_old);
    return rc;
}

/* ---- counters -------------------------------------------------------------------------------- */

typedef struct merge_head {
    st_sample_iter *it;
    st_sample_row row;
    int has;
} merge_head;

struct an_counter_merge {
    uint32_t counter, n;
    merge_head *heads;
};

static int head_advance(an_counter_merge *m, merge_head *h)
{
    int rc;
    while ((rc = st_sample_iter_next(h->it, &h->row)) == 1)
        if (h->row.counter == m->counter) break;
    h->has = rc == 1;
    return rc < 0 ? rc : 0;
}

int an_counter_merge_open(an_counter_merge **out, an_trace *t, uint32_t counter)
{
    *out = NULL;
    an_counter_merge *m = calloc(1, sizeof *m);
    uint32_t n = st_reader_n_threads(t->r);
    if (!m || !(m->heads = calloc(n ? n : 1, sizeof *m->heads))) {
        free(m);
        return ST_ENOMEM;
    }
    m->counter = counter;
    m->n = n;
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        rc = st_sample_iter_open(&m->heads[i].it, t->r, st_reader_thread(t->r, i)->id, INT64_MIN, INT64_MAX);
        if (!rc) rc = head_advance(m, &m->heads[i]);
    }
    if (rc) {
        an_counter_merge_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int an_counter_merge_next(an_counter_merge *m, int64_t *ts, double *value)
{
    merge_head *best = NULL;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->heads[i].has && (!best || m->heads[i].row.ts_ns < best->row.ts_ns)) best = &m->heads[i];
    if (!best) return 0;
    *ts = best->row.ts_ns;
    *value = best->row.value;
    int rc = head_advance(m, best);
    return rc < 0 ? rc : 1;
}

void an_counter_merge_close(an_counter_merge *m)
{
    if (!m) return;
    for (uint32_t i = 0; i < m->n; i++) st_sample_iter_close(m->heads[i].it);
    free(m->heads);
    free(m);
}

typedef struct qacc {
    double *bin_sum;
    int64_t *bin_cov;
} qacc;

/* Value v held over [a, b): into the statistics, split per bin. */
static void queue_hold(an_pipe *p, an_pipe_queue *q, qacc *acc, int64_t a, int64_t b, double v)
{
    if (a < p->bin_t[0]) a = p->bin_t[0];
    if (b > p->bin_t[p->n_bins]) b = p->bin_t[p->n_bins];
    if (b <= a) return;
    int64_t bin = bin_of(p, a);
    while (a < b && bin >= 0 && bin < p->n_bins) {
        int64_t end = b < p->bin_t[bin + 1] ? b : p->bin_t[bin + 1];
        int64_t d = end - a;
        if (d > 0) {
            acc->bin_sum[bin] += v * (double)d;
            acc->bin_cov[bin] += d;
            if (isnan(q->bin_max[bin]) || v > q->bin_max[bin]) q->bin_max[bin] = v;
            if (q->covered_ns == 0 || v > q->max) {
                q->max = v;
                q->at_max_ns = 0;
            }
            if (q->covered_ns == 0 || v < q->min) q->min = v;
            if (v == q->max) q->at_max_ns += d;
            if (v == 0) q->at_zero_ns += d;
            q->covered_ns += d;
        }
        a = end;
        bin++;
    }
}

static int read_queue(an_pipe *p, an_pipe_queue *q)
{
    qacc acc;
    acc.bin_sum = calloc(p->n_bins, sizeof *acc.bin_sum);
    acc.bin_cov = calloc(p->n_bins, sizeof *acc.bin_cov);
    q->bin_mean = malloc(p->n_bins * sizeof *q->bin_mean);
    q->bin_max = malloc(p->n_bins * sizeof *q->bin_max);
    if (!acc.bin_sum || !acc.bin_cov || !q->bin_mean || !q->bin_max) {
        free(acc.bin_sum);
        free(acc.bin_cov);
        return pipe_oom();
    }
    for (uint32_t b = 0; b < p->n_bins; b++) q->bin_max[b] = q->bin_mean[b] = NAN;
    q->mean = q->min = q->max = NAN;
    an_counter_merge *m;
    int rc = an_counter_merge_open(&m, p->trace, q->counter);
    int64_t cur_t = 0, ts;
    double cur_v = 0, v;
    int have = 0;
    while (!rc && (rc = an_counter_merge_next(m, &ts, &v)) == 1) {
        rc = 0;
        if (have) queue_hold(p, q, &acc, cur_t, ts, cur_v);
        if (ts >= p->bin_t[0] && ts < p->bin_t[p->n_bins]) q->n_samples++;
        have = isfinite(v);
        cur_t = ts;
        cur_v = v;
    }
    an_counter_merge_close(m);
    if (rc < 0) {
        free(acc.bin_sum);
        free(acc.bin_cov);
        return an_trace_fail(p->trace);
    }
    if (have) queue_hold(p, q, &acc, cur_t, p->bin_t[p->n_bins], cur_v);
    double sum = 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        if (acc.bin_cov[b]) q->bin_mean[b] = acc.bin_sum[b] / (double)acc.bin_cov[b];
        sum += acc.bin_sum[b];
    }
    if (q->covered_ns) q->mean = sum / (double)q->covered_ns;
    free(acc.bin_sum);
    free(acc.bin_cov);
    return AN_EXIT_OK;
}

static int read_queues(an_pipe *p)
{
    st_reader *r = p->trace->r;
    uint32_t nc = st_reader_n_counters(r);
    p->queues = calloc(nc ? nc : 1, sizeof *p->queues);
    if (!p->queues) return pipe_oom();
    for (uint32_t c = 0; c < nc; c++) {
        const st_counter_info *ci = st_reader_counter(r, c);
        if (!strstr(ci->name, "queue_depth")) continue;
        an_pipe_queue *q = &p->queues[p->n_queues++];
        q->counter = ci->id;
        q->name = ci->name;
        q->unit = ci->unit;
        int rc = read_queue(p, q);
        if (rc) return rc;
    }
    return AN_EXIT_OK;
}

/* ---- compute / free ---------------------------------------------------------------------------- */

/* ---- GPU records in time slices ------------------------------------------------------------ */

uint32_t an_gpu_slice_records = AN_GPU_SLICE_RECORDS;

int an_gpu_devices(an_trace *t, int32_t **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    int has = st_reader_has_gpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT DISTINCT device FROM main.gpu_chunks WHERE device >= 0 ORDER BY device", -1, &st,
                           NULL) != SQLITE_OK) {
        an_error("%s: trace table 'gpu_chunks' cannot be read: %s", t->path, sqlite3_errmsg(db));
        return AN_EXIT_USAGE;
    }
    int rc;
    int32_t *v = NULL;
    uint32_t len = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || sqlite3_column_int64(st, 0) > INT32_MAX) continue;
        int32_t *nv = realloc(v, (len + 1) * sizeof *nv);
        if (!nv) {
            free(v);
            sqlite3_finalize(st);
            return pipe_oom();
        }
        v = nv;
        v[len++] = (int32_t)sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE) {
        an_error("%s: trace table 'gpu_chunks' cannot be read: %s", t->path, sqlite3_errmsg(db));
        sqlite3_finalize(st);
        free(v);
        return AN_EXIT_USAGE;
    }
    sqlite3_finalize(st);
    *out = v;
    *n = len;
    return AN_EXIT_OK;
}

/* Slices of [t0, t1) holding about an_gpu_slice_records records of the
 * chunks selected by `where` each (device `device`): *lo, *width, *n. */
static int gpu_slices(an_trace *t, const char *where, int64_t device, int64_t t0, int64_t t1, int64_t *lo,
                      int64_t *width, uint64_t *n)
{
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT sum(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks WHERE %s AND t1_ns >= ?2 "
             "AND t0_ns < ?3",
             where);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        an_error("%s: trace table 'gpu_chunks' cannot be read: %s", t->path, sqlite3_errmsg(db));
        return AN_EXIT_USAGE;
    }
    sqlite3_bind_int64(st, 1, device);
    sqlite3_bind_int64(st, 2, t0);
    sqlite3_bind_int64(st, 3, t1);
    *n = 0;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        int64_t count = sqlite3_column_int64(st, 0), a = sqlite3_column_int64(st, 1), b = sqlite3_column_int64(st, 2);
        if (a < t0) a = t0;
        if (b >= t1) b = t1;
        else if (b < INT64_MAX) b++; /* a record may start at the last chunk's t1 (zero length) */
        if (b > a && count > 0) {
            uint64_t slices = ((uint64_t)count + an_gpu_slice_records - 1) / (an_gpu_slice_records ? an_gpu_slice_records : 1);
            uint64_t span = (uint64_t)b - (uint64_t)a;
            if (slices > span) slices = span;
            *lo = a;
            *width = (int64_t)((span + slices - 1) / slices);
            *n = (span + (uint64_t)*width - 1) / (uint64_t)*width;
        }
    }
    sqlite3_finalize(st);
    return AN_EXIT_OK;
}

static int cmp_gpu_row_start(const void *a, const void *b)
{
    const st_gpu_row *x = a, *y = b;
    if (x->rec.start_ns != y->rec.start_ns) return x->rec.start_ns < y->rec.start_ns ? -1 : 1;
    return (x->rec.dur_ns > y->rec.dur_ns) - (x->rec.dur_ns < y->rec.dur_ns);
}

static int cmp_gpu_row_thread(const void *a, const void *b)
{
    const st_gpu_row *x = a, *y = b;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    if (x->rec.start_ns != y->rec.start_ns) return x->rec.start_ns < y->rec.start_ns ? -1 : 1;
    return (x->rec.dur_ns < y->rec.dur_ns) - (x->rec.dur_ns > y->rec.dur_ns); /* the enclosing call first */
}

/* One slice: the rows starting in [s, e), sorted, handed to fn. */
static int gpu_slice(an_trace *t, int api, int32_t device, int64_t s, int64_t e, an_gpu_fn fn, void *arg,
                     st_gpu_row **buf, size_t *cap)
{
    st_gpu_iter *it;
    if (api ? st_gpu_api_iter_open(&it, t->r, s, e) : st_gpu_iter_open(&it, t->r, device, s, e))
        return an_trace_fail(t);
    size_t n = 0;
    int got, rc = AN_EXIT_OK;
    st_gpu_row row;
    while ((got = st_gpu_iter_next(it, &row)) == 1) {
        if (row.rec.kind == ST_GPU_SYNC || row.rec.start_ns < s || row.rec.start_ns >= e) continue;
        if (n == *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            st_gpu_row *nb = realloc(*buf, nc * sizeof *nb);
            if (!nb) {
                rc = pipe_oom();
                break;
            }
            *buf = nb;
            *cap = nc;
        }
        (*buf)[n++] = row;
    }
    if (got < 0 && !rc) rc = an_trace_fail(t);
    if (!rc && n) qsort(*buf, n, sizeof **buf, api ? cmp_gpu_row_thread : cmp_gpu_row_start);
    for (size_t i = 0; i < n && !rc; i++) rc = fn(&(*buf)[i], arg);
    st_gpu_iter_close(it);
    return rc;
}

static int gpu_each(an_trace *t, int api, int32_t device, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg)
{
    int64_t lo = 0, width = 0;
    uint64_t n = 0;
    /* ?1 is bound either way; "device < 0" leaves it unused */
    int rc = gpu_slices(t, api ? "device < 0" : "device = ?1", device, t0, t1, &lo, &width, &n);
    st_gpu_row *buf = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        /* the first slice from t0, the last to t1; inner bounds lo + k width stay below the records' end */
        int64_t s = i == 0 ? t0 : lo + (int64_t)i * width, e = i + 1 == n ? t1 : lo + (int64_t)(i + 1) * width;
        rc = gpu_slice(t, api, device, s, e, fn, arg, &buf, &cap);
    }
    free(buf);
    return rc;
}

int an_gpu_each(an_trace *t, int32_t device, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg)
{
    return gpu_each(t, 0, device, t0, t1, fn, arg);
}

int an_gpu_api_each(an_trace *t, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg)
{
    return gpu_each(t, 1, -1, t0, t1, fn, arg);
}

/* ---- GPU activity per bin ------------------------------------------------------------------ */

/* Adds [a, b) to cells[bin * stride] of the bins it overlaps. */
static void add_to_bins(const an_pipe *p, int64_t a, int64_t b, int64_t *cells, size_t stride)
{
    if (a < p->bin_t[0]) a = p->bin_t[0];
    if (b > p->bin_t[p->n_bins]) b = p->bin_t[p->n_bins];
    if (b <= a) return;
    for (int64_t bin = bin_of(p, a); bin < (int64_t)p->n_bins && p->bin_t[bin] < b; bin++) {
        int64_t lo = a > p->bin_t[bin] ? a : p->bin_t[bin], hi = b < p->bin_t[bin + 1] ? b : p->bin_t[bin + 1];
        if (hi > lo) cells[(size_t)bin * stride] += hi - lo;
    }
}

static int cmp_u32_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* One device's records in start order (an_gpu_each): the union of each
 * role's and of all records, kept as one open interval each and added to the
 * bins when the next record starts after it; the device time per (role,
 * stage). */
typedef struct gpu_fold {
    an_pipe *p;
    uint32_t (*ids)[2];   /* thread id -> role, sorted by id */
    int64_t *cells;       /* [bin * (n_roles + 1) + k], this device's */
    int64_t *a, *b;       /* [n_roles + 1]: the open interval of each role, then of all; b INT64_MIN: none */
    int seen;
} gpu_fold;

static void fold_extend(gpu_fold *f, uint32_t k, int64_t start, int64_t end)
{
    size_t stride = f->p->n_roles + 1;
    if (f->b[k] != INT64_MIN && start <= f->b[k]) {
        if (end > f->b[k]) f->b[k] = end;
        return;
    }
    if (f->b[k] != INT64_MIN) add_to_bins(f->p, f->a[k], f->b[k], f->cells + k, stride);
    f->a[k] = start;
    f->b[k] = end;
}

static int fold_record(const st_gpu_row *row, void *arg)
{
    gpu_fold *f = arg;
    an_pipe *p = f->p;
    const uint32_t nr = p->n_roles;
    uint32_t role = nr;
    if (row->thread >= 0 && row->thread <= UINT32_MAX) {
        uint32_t key[2] = {(uint32_t)row->thread, 0};
        uint32_t(*hit)[2] = bsearch(key, f->ids, p->n_threads, sizeof *f->ids, cmp_u32_pair);
        if (hit) role = (*hit)[1];
    }
    int64_t start = row->rec.start_ns, end = start + row->rec.dur_ns;
    f->seen = 1;
    if (role < nr && row->stage >= 0 && (uint64_t)row->stage < p->n_stages)
        add_to_bins(p, start, end, p->dev_stage_ns + (size_t)role * p->n_stages + (size_t)row->stage,
                    (size_t)nr * p->n_stages);
    if (role < nr) fold_extend(f, role, start, end);
    fold_extend(f, nr, start, end);
    return 0;
}

/* The devices with records in the period, and their busy time per bin. A
 * record counts from ST_GPU_LAUNCH_LOOKBACK_NS before the period (a long
 * kernel running into it). */
static int read_gpu(an_pipe *p)
{
    an_trace *t = p->trace;
    int32_t *devs = NULL;
    uint32_t n_devs = 0;
    int rc = an_gpu_devices(t, &devs, &n_devs);
    if (rc || !n_devs) return rc;
    const uint32_t nr = p->n_roles;
    size_t per_dev = (size_t)p->n_bins * (nr + 1);
    gpu_fold f;
    memset(&f, 0, sizeof f);
    f.p = p;
    f.ids = malloc((p->n_threads ? p->n_threads : 1) * sizeof *f.ids);
    f.a = malloc((nr + 1) * sizeof *f.a);
    f.b = malloc((nr + 1) * sizeof *f.b);
    int64_t *kept = calloc(per_dev * n_devs, sizeof *kept); /* [device index][bin][k] while reading */
    p->devices = malloc(n_devs * sizeof *p->devices);
    p->dev_stage_ns =
        calloc((size_t)p->n_bins * (nr ? nr : 1) * (p->n_stages ? p->n_stages : 1), sizeof *p->dev_stage_ns);
    if (!f.ids || !f.a || !f.b || !kept || !p->devices || !p->dev_stage_ns) rc = pipe_oom();
    for (uint32_t i = 0; !rc && i < p->n_threads; i++) {
        f.ids[i][0] = st_reader_thread(t->r, i)->id;
        f.ids[i][1] = p->thread_role[i];
    }
    if (!rc) qsort(f.ids, p->n_threads, sizeof *f.ids, cmp_u32_pair);
    int64_t t0 = p->bin_t[0], t1 = p->bin_t[p->n_bins];
    int64_t from = t0 < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : t0 - ST_GPU_LAUNCH_LOOKBACK_NS;
    for (uint32_t d = 0; !rc && d < n_devs; d++) {
        f.cells = kept + per_dev * p->n_devices;
        f.seen = 0;
        for (uint32_t k = 0; k <= nr; k++) f.b[k] = INT64_MIN;
        rc = an_gpu_each(t, devs[d], from, t1, fold_record, &f);
        for (uint32_t k = 0; !rc && k <= nr; k++)
            if (f.b[k] != INT64_MIN) add_to_bins(p, f.a[k], f.b[k], f.cells + k, nr + 1);
        if (!rc && f.seen) p->devices[p->n_devices++] = devs[d];
        else if (!rc) memset(f.cells, 0, per_dev * sizeof *f.cells);
    }
    /* [(bin * n_devices + dev) * (n_roles + 1) + k] */
    if (!rc && p->n_devices) {
        p->dev_ns = malloc(per_dev * p->n_devices * sizeof *p->dev_ns);
        if (!p->dev_ns) rc = pipe_oom();
        for (uint32_t d = 0; !rc && d < p->n_devices; d++)
            for (uint32_t b = 0; b < p->n_bins; b++)
                memcpy(p->dev_ns + ((size_t)b * p->n_devices + d) * (nr + 1), kept + per_dev * d + (size_t)b * (nr + 1),
                       (nr + 1) * sizeof *p->dev_ns);
    }
    if (!rc && !p->n_devices) {
        free(p->devices);
        free(p->dev_stage_ns);
        p->devices = NULL;
        p->dev_stage_ns = NULL;
    }
    free(kept);
    free(f.ids);
    free(f.a);
    free(f.b);
    free(devs);
    return rc;
}

static int pipe_compute(an_pipe *p, an_trace *t, const an_pipe_opts *opts)
{
    an_pipe_opts none;
    memset(&none, 0, sizeof none);
    if (!opts) opts = &none;
    memset(p, 0, sizeof *p);
    p->trace = t;
    st_reader *r = t->r;
    uint32_t nt = st_reader_n_threads(r);
    p->n_threads = nt;
    p->n_stages = st_reader_n_stages(r);
    p->n_cols = p->n_stages + 1;
    p->thread_role = calloc(nt ? nt : 1, sizeof *p->thread_role);
    p->role_names = malloc((nt ? nt : 1) * sizeof *p->role_names);
    if (!p->thread_role || !p->role_names) return pipe_oom();
    for (uint32_t i = 0; i < nt; i++) p->role_names[i] = st_reader_thread(r, i)->role;
    qsort(p->role_names, nt, sizeof *p->role_names, cmp_role_name);
    for (uint32_t i = 0; i < nt; i++)
        if (p->n_roles == 0 || strcmp(p->role_names[p->n_roles - 1], p->role_names[i]) != 0)
            p->role_names[p->n_roles++] = p->role_names[i];
    p->role_threads = calloc(p->n_roles ? p->n_roles : 1, sizeof *p->role_threads);
    if (!p->role_threads) return pipe_oom();
    for (uint32_t i = 0; i < nt; i++) {
        p->thread_role[i] = (uint32_t)an_pipe_role_index(p, st_reader_thread(r, i)->role);
        p->role_threads[p->thread_role[i]]++;
    }
    int rc = setup_bins(p, opts);
    if (rc) return rc;
    size_t scratch = (size_t)p->n_bins * (p->n_stages ? p->n_stages : 1);
    int64_t *ns = calloc(scratch, sizeof *ns);
    uint32_t *cnt = calloc(scratch, sizeof *cnt);
    if (!ns || !cnt) {
        free(ns);
        free(cnt);
        return pipe_oom();
    }
    an_progress prog;
    an_progress_start(&prog, "reading events", t->n_ranges_hint * 2);
    for (uint32_t i = 0; i < nt && !rc; i++) {
        if (scan_thread(p, i, ns, cnt, &prog) < 0) rc = an_trace_fail(t);
        else fold_thread(p, p->thread_role[i], ns, cnt);
    }
    an_progress_end(&prog);
    free(ns);
    free(cnt);
    if (!rc) rc = order_roles(p);
    if (!rc) rc = read_queues(p);
    if (!rc) rc = read_gpu(p);
    return rc;
}

int an_pipe_compute(an_pipe *p, an_trace *t, const an_pipe_opts *opts)
{
    /* on failure nothing stays allocated */
    int rc = pipe_compute(p, t, opts);
    if (rc) an_pipe_free(p);
    return rc;
}

void an_pipe_free(an_pipe *p)
{
    if (!p) return;
    for (uint32_t q = 0; p->queues && q < p->n_queues; q++) {
        free(p->queues[q].bin_mean);
        free(p->queues[q].bin_max);
    }
    free(p->queues);
    free(p->role_names);
    free(p->role_threads);
    free(p->thread_role);
    free(p->bin_t);
    free(p->bin_step_first);
    free(p->bin_step_last);
    free(p->bin_steps);
    free(p->bin_tokens);
    free(p->self_ns);
    free(p->count);
    free(p->devices);
    free(p->dev_ns);
    free(p->dev_stage_ns);
    memset(p, 0, sizeof *p);
}

/* ---- loads, verdict, windows ----------------------------------------------------------------- */

void an_pipe_stage_ns(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t role, int64_t *stage_ns)
{
    memset(stage_ns, 0, p->n_cols * sizeof *stage_ns);
    for (uint32_t b = bin0; b < bin1; b++)
        for (uint32_t c = 0; c < p->n_cols; c++) stage_ns[c] += an_pipe_self(p, b, role, c);
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

/* Device time of (role, stage) over bins. */
static int64_t dev_stage_sum(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t role, uint32_t stage)
{
    int64_t v = 0;
    if (!p->n_devices) return 0;
    for (uint32_t b = bin0; b < bin1; b++) v += p->dev_stage_ns[((size_t)b * p->n_roles + role) * p->n_stages + stage];
    return v;
}

static int64_t dev_sum(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t dev, uint32_t role)
{
    int64_t v = 0;
    for (uint32_t b = bin0; b < bin1; b++) v += an_pipe_dev(p, b, dev, role);
    return v;
}

void an_pipe_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1, an_role_load *loads)
{
    uint64_t steps = 0;
    int64_t len = 0;
    for (uint32_t b = bin0; b < bin1; b++) {
        steps += p->bin_steps[b];
        len += p->bin_t[b + 1] - p->bin_t[b];
    }
    for (uint32_t r = 0; r < p->n_roles; r++) {
        an_role_load *l = &loads[r];
        memset(l, 0, sizeof *l);
        l->top_stage = l->top_device_stage = -1;
        l->wall_ns = len * (int64_t)p->role_threads[r];
        for (uint32_t s = 0; s < p->n_stages; s++) {
            int64_t v = 0;
            for (uint32_t b = bin0; b < bin1; b++) v += an_pipe_self(p, b, r, s);
            st_kind k = st_reader_stage(p->trace->r, s)->kind;
            if ((unsigned)k >= ST_KIND_COUNT) continue;
            l->kind_ns[k] += v;
            if (an_kind_is_busy(k)) l->busy_ns += v;
            if (k == ST_WORK && v > 0 && (l->top_stage < 0 || v > l->top_stage_ns)) {
                l->top_stage = (int32_t)s;
                l->top_stage_ns = v;
            }
            int64_t d = dev_stage_sum(p, bin0, bin1, r, s);
            if (d > 0 && (l->top_device_stage < 0 || d > l->top_device_stage_ns)) {
                l->top_device_stage = (int32_t)s;
                l->top_device_stage_ns = d;
            }
        }
        for (uint32_t b = bin0; b < bin1; b++) l->idle_ns += an_pipe_self(p, b, r, p->n_stages);
        l->host_ns = l->busy_ns;
        if (p->n_devices) {
            l->host_ns -= l->kind_ns[ST_SYNC];
            for (uint32_t d = 0; d < p->n_devices; d++) l->device_ns += dev_sum(p, bin0, bin1, d, r);
        }
        l->device_bound = l->device_ns > l->host_ns;
        l->need_ns = p->n_devices ? (l->device_bound ? l->device_ns : l->host_ns) : l->busy_ns;
        l->busy_pct = pct(l->busy_ns, l->wall_ns);
        l->work_pct = pct(l->kind_ns[ST_WORK], l->wall_ns);
        l->idle_pct = pct(l->idle_ns, l->wall_ns);
        l->host_pct = pct(l->host_ns, l->wall_ns);
        l->device_pct = pct(l->device_ns, l->wall_ns);
        l->need_pct = pct(l->need_ns, l->wall_ns);
        for (int k = 0; k < ST_KIND_COUNT; k++) l->kind_pct[k] = pct(l->kind_ns[k], l->wall_ns);
        l->busy_per_step_ns = steps && p->role_threads[r]
                                  ? (double)l->busy_ns / p->role_threads[r] / (double)steps
                                  : NAN;
        l->need_per_step_ns = steps && p->role_threads[r]
                                  ? (double)l->need_ns / p->role_threads[r] / (double)steps
                                  : NAN;
    }
}

an_device_load *an_pipe_device_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1)
{
    size_t n = p->n_devices ? p->n_devices : 1;
    an_device_load *out = malloc(n * sizeof *out + n * (p->n_roles ? p->n_roles : 1) * sizeof(int64_t));
    if (!out) {
        pipe_oom();
        return NULL;
    }
    int64_t *role_ns = (int64_t *)(out + n);
    int64_t len = p->bin_t[bin1] - p->bin_t[bin0];
    for (uint32_t d = 0; d < p->n_devices; d++) {
        an_device_load *l = &out[d];
        l->role_ns = role_ns + (size_t)d * p->n_roles;
        l->device = p->devices[d];
        l->span_ns = len;
        l->busy_ns = dev_sum(p, bin0, bin1, d, p->n_roles);
        l->busy_pct = pct(l->busy_ns, len);
        l->n_roles_on = 0;
        l->top_role = -1;
        for (uint32_t r = 0; r < p->n_roles; r++) {
            l->role_ns[r] = dev_sum(p, bin0, bin1, d, r);
            if (l->role_ns[r] > 0) l->n_roles_on++;
            if (l->role_ns[r] > 0 && (l->top_role < 0 || l->role_ns[r] > l->role_ns[l->top_role])) l->top_role = (int32_t)r;
        }
    }
    return out;
}

/* What a role needs over the period, per thread. */
static double need_per_thread(const an_pipe *p, const an_role_load *l, uint32_t r)
{
    return p->role_threads[r] ? (double)l->need_ns / p->role_threads[r] : 0.0;
}

/* The nearest neighbours' waits: downstream wait_input, upstream wait_output. */
static double neighbour_evidence(const an_pipe *p, const an_role_load *loads, uint32_t r, int32_t *down, int32_t *up)
{
    double evidence = 0;
    *down = *up = -1;
    for (uint32_t d = r + 1; d < p->n_roles; d++)
        if (loads[d].kind_ns[ST_WAIT_INPUT] > 0) {
            evidence += loads[d].kind_pct[ST_WAIT_INPUT];
            *down = (int32_t)d;
            break;
        }
    for (uint32_t u = r; u-- > 0;)
        if (loads[u].kind_ns[ST_WAIT_OUTPUT] > 0) {
            evidence += loads[u].kind_pct[ST_WAIT_OUTPUT];
            *up = (int32_t)u;
            break;
        }
    return evidence;
}

void an_pipe_verdict(const an_pipe *p, uint32_t bin0, uint32_t bin1, const an_role_load *loads, double speedup,
                     an_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->bin0 = bin0;
    v->bin1 = bin1;
    v->t0_ns = p->bin_t[bin0];
    v->t1_ns = p->bin_t[bin1];
    for (uint32_t b = bin0; b < bin1; b++) {
        v->steps += p->bin_steps[b];
        v->tokens += p->bin_tokens[b];
    }
    int64_t period = v->t1_ns - v->t0_ns;
    v->step_ns = v->steps ? (double)period / (double)v->steps : NAN;
    v->tokens_per_s = v->steps && period > 0 && v->tokens ? (double)v->tokens * 1e9 / (double)period : NAN;
    v->role = v->stage = v->down_role = v->up_role = v->whatif_limit_role = v->whatif_limit_device = v->device = -1;
    v->speedup = speedup;
    v->load_pct = NAN;
    v->busy_after_ns = v->whatif_step_ns = v->whatif_factor = v->whatif_tokens_per_s = NAN;
    /* The bottleneck: the role with the most need per thread, i.e. the least
     * capacity; within one percentage point, the one with the stronger
     * evidence from its neighbours' waits. */
    double best_evidence = -1;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_role_load *l = &loads[r];
        if (l->need_ns <= 0) continue;
        int32_t down, up;
        double evidence = neighbour_evidence(p, loads, r, &down, &up);
        if (v->role >= 0) {
            double cur = loads[v->role].need_pct;
            if (l->need_pct < cur - 1.0) continue;
            if (l->need_pct <= cur + 1.0 && evidence <= best_evidence) continue;
        }
        v->role = (int32_t)r;
        best_evidence = evidence;
    }
    /* A device busier than any role needs, by more than AN_DEVICE_MARGIN_PCT
     * (less is a role's own copies on the copy engines, or another role's
     * odd kernel): roles share it, and it is the limit. Of devices within
     * one percentage point of the busiest, the first, so that twin devices
     * do not trade places on noise. */
    double role_pct = v->role >= 0 ? loads[v->role].need_pct : 0.0, top_pct = -1.0;
    for (uint32_t d = 0; d < p->n_devices; d++) {
        double bp = pct(dev_sum(p, bin0, bin1, d, p->n_roles), period);
        if (bp > top_pct) top_pct = bp;
    }
    double dev_pct = 0;
    for (uint32_t d = 0; d < p->n_devices && top_pct > role_pct + AN_DEVICE_MARGIN_PCT; d++) {
        double bp = pct(dev_sum(p, bin0, bin1, d, p->n_roles), period);
        if (bp <= role_pct + AN_DEVICE_MARGIN_PCT || bp < top_pct - 1.0) continue;
        int32_t top = -1;
        int64_t top_ns = 0;
        for (uint32_t r = 0; r < p->n_roles; r++) {
            int64_t x = dev_sum(p, bin0, bin1, d, r);
            if (x > 0 && (top < 0 || x > top_ns)) {
                top = (int32_t)r;
                top_ns = x;
            }
        }
        if (top < 0) continue; /* only records of unknown threads: no role to name */
        v->device = (int32_t)d;
        v->role = top;
        dev_pct = bp;
        break;
    }
    if (v->role < 0) return;
    uint32_t br = (uint32_t)v->role;
    const an_role_load *bl = &loads[br];
    if (v->device >= 0) {
        v->stage = bl->top_device_stage;
        v->load_pct = dev_pct;
    } else {
        v->stage = bl->device_bound ? bl->top_device_stage : bl->top_stage;
        v->load_pct = bl->need_pct;
    }
    v->saturated = v->load_pct >= AN_SATURATED_PCT;
    neighbour_evidence(p, loads, br, &v->down_role, &v->up_role);
    if (v->down_role >= 0) v->down_wait_pct = loads[v->down_role].kind_pct[ST_WAIT_INPUT];
    if (v->up_role >= 0) v->up_wait_pct = loads[v->up_role].kind_pct[ST_WAIT_OUTPUT];
    /* What-if: each role needs its need per thread for the period's work,
     * each device its busy time; the pipeline cannot go faster than the
     * largest. With the limiting stage k times faster, its host self time and
     * the device time it launched shrink by (1 - 1/k): the bottleneck role's
     * host and device parts, and each device by the part of the stage's
     * device time that ran there (in proportion to the role's time on it). */
    if (speedup <= 0 || period <= 0) return;
    double cut = 1.0 - 1.0 / speedup, threads = p->role_threads[br];
    double stage_host = 0, stage_dev = 0;
    if (v->stage >= 0) {
        int64_t *ns = calloc(p->n_cols, sizeof *ns);
        if (!ns) return;
        an_pipe_stage_ns(p, bin0, bin1, br, ns);
        st_kind k = st_reader_stage(p->trace->r, (uint32_t)v->stage)->kind;
        stage_host = an_kind_is_busy(k) && (k != ST_SYNC || !p->n_devices) ? (double)ns[v->stage] : 0.0;
        free(ns);
        stage_dev = (double)dev_stage_sum(p, bin0, bin1, br, (uint32_t)v->stage);
    }
    double host_after = ((double)(p->n_devices ? bl->host_ns : bl->busy_ns) - stage_host * cut) / threads;
    double dev_after = ((double)bl->device_ns - stage_dev * cut) / threads;
    double role_after = host_after > dev_after ? host_after : dev_after;
    double need = role_after, after = role_after;
    v->whatif_limit_role = (int32_t)br;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        if (r == br) continue;
        double b = need_per_thread(p, &loads[r], r);
        if (b > need) {
            need = b;
            v->whatif_limit_role = (int32_t)r;
        }
    }
    for (uint32_t d = 0; d < p->n_devices; d++) {
        double busy = (double)dev_sum(p, bin0, bin1, d, p->n_roles);
        if (bl->device_ns > 0) busy -= stage_dev * cut * (double)dev_sum(p, bin0, bin1, d, br) / (double)bl->device_ns;
        if ((int32_t)d == v->device) after = busy;
        if (busy > need) {
            need = busy;
            v->whatif_limit_role = -1;
            v->whatif_limit_device = (int32_t)d;
        }
    }
    if (need <= 0) return;
    v->whatif_factor = (double)period / need;
    if (v->steps) {
        v->busy_after_ns = after / (double)v->steps;
        v->whatif_step_ns = need / (double)v->steps;
    }
    if (isfinite(v->tokens_per_s)) v->whatif_tokens_per_s = v->tokens_per_s * v->whatif_factor;
}

/* Does a window boundary fall at the closing mark of bin b? With a bin per
 * step: when that mark's step is a multiple of every, as the profile lines
 * have it. With bins of several steps: when a multiple of every is among the
 * bin's steps (the window then ends with that bin). */
static int boundary_after(const an_pipe *p, uint32_t b, uint64_t every)
{
    uint64_t s0 = b ? p->bin_step_last[b - 1] : p->step_open, s1 = p->bin_step_last[b];
    if (p->steps_per_bin <= 1) return s1 % every == 0;
    return s1 / every > s0 / every;
}

uint32_t an_pipe_windows(const an_pipe *p, uint64_t every, uint32_t *first)
{
    if (!p->has_steps || every == 0) {
        first[0] = 0;
        first[1] = p->n_bins;
        return 1;
    }
    /* Windows run from one boundary mark to the next; the bins before the
     * first boundary and after the last are in no window. */
    uint32_t n = 0, start = 0;
    int open = p->step_open % every == 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        if (!boundary_after(p, b, every)) continue;
        if (open) first[n++] = start;
        open = 1;
        start = b + 1;
    }
    first[n] = open ? start : 0;
    return n;
}

uint32_t an_pipe_window_verdicts(const an_pipe *p, uint64_t every, an_window_verdict **out)
{
    *out = NULL;
    uint32_t *first = malloc(((size_t)p->n_bins + 1) * sizeof *first);
    an_role_load *loads = calloc(p->n_roles ? p->n_roles : 1, sizeof *loads);
    if (!first || !loads) {
        free(first);
        free(loads);
        pipe_oom();
        return 0;
    }
    uint32_t n = an_pipe_windows(p, every, first);
    an_window_verdict *w = calloc(n ? n : 1, sizeof *w);
    if (!w) {
        free(first);
        free(loads);
        pipe_oom();
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        an_verdict v;
        an_pipe_loads(p, first[i], first[i + 1], loads);
        an_pipe_verdict(p, first[i], first[i + 1], loads, 0, &v);
        w[i].bin0 = first[i];
        w[i].bin1 = first[i + 1];
        w[i].step_first = p->has_steps ? p->bin_step_first[first[i]] : 0;
        w[i].step_last = p->has_steps ? p->bin_step_last[first[i + 1] - 1] : 0;
        w[i].index = p->has_steps && every ? (w[i].step_last - 1) / every : 0;
        w[i].tokens_per_s = v.tokens_per_s;
        w[i].role = v.role;
        w[i].device = v.device;
        w[i].stage = v.stage;
        w[i].busy_pct = v.load_pct;
        w[i].moved = i > 0 && (w[i].role != w[i - 1].role || w[i].device != w[i - 1].device);
    }
    free(first);
    free(loads);
    *out = w;
    return n;
}

const char *an_pipe_label(const an_pipe *p, int32_t role, int32_t device, char *buf, size_t size)
{
    char name[128];
    if (role < 0) snprintf(buf, size, "none");
    else if (device >= 0) snprintf(buf, size, "GPU %d (%s)", p->devices[device], an_clean(p->role_names[role], name, sizeof name));
    else an_clean(p->role_names[role], buf, size);
    return buf;
}

const char *an_clean(const char *s, char *buf, size_t size)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < size; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

const char *an_fmt_pct1(double v, char *buf, size_t size)
{
    if (!isfinite(v)) {
        snprintf(buf, size, "-");
        return buf;
    }
    long long tenths = llround(v * 10.0);
    snprintf(buf, size, "%s%lld.%lld%%", tenths < 0 ? "-" : "", llabs(tenths) / 10, llabs(tenths) % 10);
    return buf;
}

/* "queue_wait 60.0%, batch_wait 2.0%": a role's stages of one kind, largest first. */
static void stages_of_kind(FILE *f, const an_pipe *p, const an_verdict *v, uint32_t role, st_kind kind, int64_t wall)
{
    int64_t *ns = calloc(p->n_cols, sizeof *ns);
    if (!ns) return;
    an_pipe_stage_ns(p, v->bin0, v->bin1, role, ns);
    int first = 1;
    for (;;) {
        int32_t best = -1;
        for (uint32_t s = 0; s < p->n_stages; s++)
            if (st_reader_stage(p->trace->r, s)->kind == kind && ns[s] > 0 && (best < 0 || ns[s] > ns[best]))
                best = (int32_t)s;
        if (best < 0) break;
        char name[128], pc[32];
        fprintf(f, "%s%s %s", first ? "" : ", ", an_clean(st_reader_stage(p->trace->r, (uint32_t)best)->name, name, sizeof name),
                an_fmt_pct1(pct(ns[best], wall), pc, sizeof pc));
        ns[best] = 0;
        first = 0;
    }
    free(ns);
}

static double max_need_pct(const an_pipe *p, const an_role_load *loads)
{
    double m = 0;
    for (uint32_t r = 0; r < p->n_roles; r++)
        if (loads[r].need_pct > m) m = loads[r].need_pct;
    return m;
}

/* The verdict's first line when a shared device is the limit: its busy
 * share, each role's part of it, the largest user and its stage, and what
 * the roles' host threads do meanwhile. */
static void story_device(FILE *f, const an_pipe *p, const an_role_load *loads, const an_verdict *v)
{
    char a[128], b[128], p1[32], p2[32];
    uint32_t d = (uint32_t)v->device;
    an_device_load *loads_d = an_pipe_device_loads(p, v->bin0, v->bin1);
    if (!loads_d) return;
    int64_t *role_ns = loads_d[d].role_ns, period = v->t1_ns - v->t0_ns;
    uint32_t n_on = loads_d[d].n_roles_on;
    if (n_on == 1)
        fprintf(f, "Bottleneck: GPU %d, busy %s of the time, used by one role:", p->devices[d],
                an_fmt_pct1(v->load_pct, p1, sizeof p1));
    else
        fprintf(f, "Bottleneck: GPU %d, busy %s of the time, shared by %u roles:", p->devices[d],
                an_fmt_pct1(v->load_pct, p1, sizeof p1), n_on);
    for (int first = 1;; first = 0) {
        int32_t best = -1;
        for (uint32_t r = 0; r < p->n_roles; r++)
            if (role_ns[r] > 0 && (best < 0 || role_ns[r] > role_ns[best])) best = (int32_t)r;
        if (best < 0) break;
        fprintf(f, "%s %s %s", first ? "" : ",", an_clean(p->role_names[best], a, sizeof a),
                an_fmt_pct1(pct(role_ns[best], period), p1, sizeof p1));
        role_ns[best] = 0;
    }
    free(loads_d);
    const an_role_load *l = &loads[v->role];
    fprintf(f, " (the time each role's GPU work ran on it; they overlap); its largest user is %s", an_clean(p->role_names[v->role], a, sizeof a));
    if (v->stage >= 0) {
        fprintf(f, ", whose stage %s launched %s of its time in GPU work",
                an_clean(st_reader_stage(p->trace->r, (uint32_t)v->stage)->name, b, sizeof b),
                an_fmt_pct1(pct(l->top_device_stage_ns, l->wall_ns), p1, sizeof p1));
        if (v->steps)
            fprintf(f, " (%.3f ms per step)", (double)l->top_device_stage_ns / p->role_threads[v->role] / (double)v->steps / 1e6);
    }
    fprintf(f, ".\nOn the host, the roles on it ");
    int first = 1;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        if (dev_sum(p, v->bin0, v->bin1, d, r) <= 0) continue;
        fprintf(f, "%s%s %s busy without sync (sync %s)", first ? "are: " : ", ", an_clean(p->role_names[r], a, sizeof a),
                an_fmt_pct1(loads[r].host_pct, p1, sizeof p1), an_fmt_pct1(loads[r].kind_pct[ST_SYNC], p2, sizeof p2));
        first = 0;
    }
    fprintf(f, "; no role needs more than %s of its threads' time, so the device, not a role, sets the pace.\n",
            an_fmt_pct1(max_need_pct(p, loads), p1, sizeof p1));
}

char *an_pipe_story(const an_pipe *p, const an_role_load *loads, const an_verdict *v, const an_window_verdict *w,
                    uint32_t n_windows, uint64_t every)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    char a[128], b[128], p1[32], p2[32];
    st_reader *r = p->trace->r;
    if (v->role < 0) {
        fprintf(f, "Bottleneck: none found: no role spends time in work, sync, comm or copy stages.\n");
    } else {
        const an_role_load *l = &loads[v->role];
        if (v->device >= 0) {
            story_device(f, p, loads, v);
        } else {
            fprintf(f, "Bottleneck: %s (%u thread%s), busy %s of its time (work %s",
                    an_clean(p->role_names[v->role], a, sizeof a), p->role_threads[v->role],
                    p->role_threads[v->role] == 1 ? "" : "s", an_fmt_pct1(l->busy_pct, p1, sizeof p1),
                    an_fmt_pct1(l->work_pct, p2, sizeof p2));
            static const st_kind other[] = {ST_SYNC, ST_COMM, ST_COPY};
            for (int i = 0; i < 3; i++)
                if (l->kind_ns[other[i]] > 0)
                    fprintf(f, ", %s %s", st_kind_name(other[i]), an_fmt_pct1(l->kind_pct[other[i]], p1, sizeof p1));
            fprintf(f, ")");
            if (p->n_devices)
                fprintf(f, "; it needs %s: %s of GPU time (the work it launched) against %s on the host without sync",
                        an_fmt_pct1(l->need_pct, p1, sizeof p1), an_fmt_pct1(l->device_pct, p2, sizeof p2),
                        an_fmt_pct1(l->host_pct, b, sizeof b));
            if (v->stage >= 0) {
                /* a device-bound role's limiting stage is measured by the GPU time it launched */
                int64_t stage_ns = l->device_bound ? l->top_device_stage_ns : l->top_stage_ns;
                fprintf(f, "; limiting stage: %s, %s%s of its time%s",
                        an_clean(st_reader_stage(r, (uint32_t)v->stage)->name, b, sizeof b),
                        l->device_bound ? "which launched " : "", an_fmt_pct1(pct(stage_ns, l->wall_ns), p1, sizeof p1),
                        l->device_bound ? " in GPU work" : "");
                if (v->steps)
                    fprintf(f, ", %.3f ms per step", (double)stage_ns / p->role_threads[v->role] / (double)v->steps / 1e6);
            } else {
                fprintf(f, "; it has no work stage (its busy time is sync, comm or copy)");
            }
            fprintf(f, ".\n");
        }
        if (!v->saturated) {
            fprintf(f, "No role is saturated: the busiest, %s, is busy only %s of its time (idle %s); the limit is "
                       "probably outside the traced stages (untraced code, or the pace of the step marks).\n",
                    an_clean(p->role_names[v->role], a, sizeof a), an_fmt_pct1(v->load_pct, p1, sizeof p1),
                    an_fmt_pct1(l->idle_pct, p2, sizeof p2));
        }
        fprintf(f, "Evidence: ");
        if (v->down_role >= 0) {
            const an_role_load *d = &loads[v->down_role];
            fprintf(f, "downstream, %s waits for input %s of its time (", an_clean(p->role_names[v->down_role], a, sizeof a),
                    an_fmt_pct1(v->down_wait_pct, p1, sizeof p1));
            stages_of_kind(f, p, v, (uint32_t)v->down_role, ST_WAIT_INPUT, d->wall_ns);
            fprintf(f, ")");
        } else {
            fprintf(f, "no downstream role waits for input");
        }
        if (v->up_role >= 0) {
            const an_role_load *u = &loads[v->up_role];
            fprintf(f, "; upstream, %s is blocked on output %s of its time (", an_clean(p->role_names[v->up_role], a, sizeof a),
                    an_fmt_pct1(v->up_wait_pct, p1, sizeof p1));
            stages_of_kind(f, p, v, (uint32_t)v->up_role, ST_WAIT_OUTPUT, u->wall_ns);
            fprintf(f, ")");
        } else {
            fprintf(f, "; no upstream role is blocked on output");
        }
        fprintf(f, ".\n");
        if (v->stage >= 0 && isfinite(v->whatif_factor)) {
            fprintf(f, "What if %s were %gx faster: ", an_clean(st_reader_stage(r, (uint32_t)v->stage)->name, b, sizeof b),
                    v->speedup);
            if (v->device >= 0) snprintf(a, sizeof a, "GPU %d", p->devices[v->device]);
            else an_clean(p->role_names[v->role], a, sizeof a);
            double before = v->device >= 0 ? v->load_pct / 100.0 * v->step_ns : l->need_per_step_ns;
            if (v->steps) fprintf(f, "%s would need %.3f ms per step instead of %.3f ms; ", a, v->busy_after_ns / 1e6, before / 1e6);
            if (v->whatif_limit_device >= 0 ? v->whatif_limit_device == v->device
                                            : v->device < 0 && v->whatif_limit_role == v->role)
                fprintf(f, "%s stays the limit", a);
            else if (v->whatif_limit_device >= 0)
                fprintf(f, "the limit becomes GPU %d", p->devices[v->whatif_limit_device]);
            else
                fprintf(f, "the limit becomes %s (%s %s now)", an_clean(p->role_names[v->whatif_limit_role], b, sizeof b),
                        p->n_devices ? "needs" : "busy",
                        an_fmt_pct1(loads[v->whatif_limit_role].need_pct, p1, sizeof p1));
            if (v->steps) fprintf(f, " at %.3f ms per step", v->whatif_step_ns / 1e6);
            if (isfinite(v->whatif_tokens_per_s))
                fprintf(f, ": at most %.1f tokens/s, %.2fx the measured %.1f.\n", v->whatif_tokens_per_s, v->whatif_factor,
                        v->tokens_per_s);
            else
                fprintf(f, ": throughput at most %.2fx the measured.\n", v->whatif_factor);
        }
    }
    if (n_windows > 1) {
        int moved = 0;
        for (uint32_t i = 1; i < n_windows; i++) moved |= w[i].moved;
        if (!moved) {
            fprintf(f, "Per window of %llu steps: the bottleneck did not move (%s in all %u windows).\n",
                    (unsigned long long)every, an_pipe_label(p, w[0].role, w[0].device, a, sizeof a), n_windows);
        } else {
            fprintf(f, "Per window of %llu steps: the bottleneck moved:", (unsigned long long)every);
            uint32_t runs = 0;
            for (uint32_t i = 0; i < n_windows; i++) {
                uint32_t j = i;
                while (j + 1 < n_windows && !w[j + 1].moved) j++;
                if (++runs > 12) {
                    fprintf(f, " ...");
                    break;
                }
                fprintf(f, "%s %s in steps %llu-%llu", runs > 1 ? "," : "",
                        an_pipe_label(p, w[i].role, w[i].device, a, sizeof a), (unsigned long long)w[i].step_first,
                        (unsigned long long)w[j].step_last);
                i = j;
            }
            fprintf(f, ".\n");
        }
    }
    fprintf(f, "Role order: ");
    for (uint32_t i = 0; i < p->n_roles; i++)
        fprintf(f, "%s%s", i ? " -> " : "", an_clean(p->role_names[i], a, sizeof a));
    fprintf(f, p->order_inferred ? " (inferred from the waits: roles that wait only for output first, then those "
                                   "that wait for both, then those that wait only for input, main last).\n"
                                 : " (the trainer's roles).\n");
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* A thread's innermost stage over time: flat segments [start, end) in time
 * order, only where some range is open. */
typedef struct stage_seg {
    int64_t start, end, stage;
} stage_seg;

typedef struct thread_segs {
    int64_t thread;
    stage_seg *seg;
    size_t n;
} thread_segs;

typedef struct seg_cache {
    an_trace *t;
    int64_t t0, t1;
    thread_segs *th;
    size_t n;
} seg_cache;

static int cmp_range_start(const void *a, const void *b)
{
    const st_range *x = a, *y = b;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x->depth > y->depth) - (x->depth < y->depth);
}

static int seg_push(stage_seg **v, size_t *n, size_t *cap, int64_t s, int64_t e, int64_t stage)
{
    if (e <= s) return 0;
    if (*n && (*v)[*n - 1].end == s && (*v)[*n - 1].stage == stage) {
        (*v)[*n - 1].end = e;
        return 0;
    }
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        stage_seg *nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = (stage_seg){s, e, stage};
    return 0;
}

/* Emits the innermost stage from *pos up to x, closing ranges that end by x. */
static int seg_advance(stage_seg **v, size_t *n, size_t *cap, st_range *stack, size_t *depth, int64_t *pos, int64_t x)
{
    while (*depth) {
        st_range *top = &stack[*depth - 1];
        int64_t end = top->start_ns + top->dur_ns;
        if (end > x) break;
        if (end > *pos) {
            if (seg_push(v, n, cap, *pos, end, top->stage)) return -1;
            *pos = end;
        }
        (*depth)--;
    }
    if (*depth && x > *pos) {
        if (seg_push(v, n, cap, *pos, x, stack[*depth - 1].stage)) return -1;
    }
    if (x > *pos) *pos = x;
    return 0;
}

/* The segments of a thread (loaded on first use). Returns 0 or an ST_ code. */
static int seg_get(seg_cache *c, int64_t thread, const thread_segs **out)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->th[i].thread == thread) {
            *out = &c->th[i];
            return 0;
        }
    thread_segs *nt = realloc(c->th, (c->n + 1) * sizeof *nt);
    if (!nt) return ST_ENOMEM;
    c->th = nt;
    thread_segs *ts = &c->th[c->n++];
    *ts = (thread_segs){thread, NULL, 0};
    *out = ts;
    if (thread < 0) return 0;
    st_range *rs = NULL;
    size_t nr = 0, cr = 0;
    st_range_iter *it;
    int rc = st_range_iter_open(&it, c->t->r, thread, c->t0, c->t1);
    if (rc) return rc < -1 ? rc : -1;
    st_range r;
    while ((rc = st_range_iter_next(it, &r)) == 1) {
        if (nr == cr) {
            cr = cr ? cr * 2 : 64;
            st_range *nv = realloc(rs, cr * sizeof *nv);
            if (!nv) {
                rc = ST_ENOMEM;
                break;
            }
            rs = nv;
        }
        rs[nr++] = r;
    }
    st_range_iter_close(it);
    if (rc < 0) {
        free(rs);
        return rc;
    }
    if (nr) qsort(rs, nr, sizeof *rs, cmp_range_start);
    st_range *stack = malloc((nr ? nr : 1) * sizeof *stack);
    size_t depth = 0, cap = 0;
    int64_t pos = INT64_MIN;
    rc = stack ? 0 : ST_ENOMEM;
    for (size_t i = 0; i < nr && !rc; i++) {
        if (seg_advance(&ts->seg, &ts->n, &cap, stack, &depth, &pos, rs[i].start_ns)) rc = ST_ENOMEM;
        stack[depth++] = rs[i];
        pos = rs[i].start_ns;
    }
    if (!rc && seg_advance(&ts->seg, &ts->n, &cap, stack, &depth, &pos, INT64_MAX)) rc = ST_ENOMEM;
    free(stack);
    free(rs);
    return rc;
}

static void seg_cache_free(seg_cache *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->th[i].seg);
    free(c->th);
}

static int add_wait(an_gpu_idle *d, size_t *cap, int64_t thread, int64_t stage, int64_t ns)
{
    for (uint32_t i = 0; i < d->n_waits; i++)
        if (d->waits[i].thread == thread && d->waits[i].stage == stage) {
            d->waits[i].ns += ns;
            return 0;
        }
    if (d->n_waits == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        an_gpu_wait *nv = realloc(d->waits, nc * sizeof *nv);
        if (!nv) return ST_ENOMEM;
        d->waits = nv;
        *cap = nc;
    }
    d->waits[d->n_waits++] = (an_gpu_wait){thread, stage, ns};
    return 0;
}

/* Splits the host wait [a, b) of a launching thread by its innermost stage. */
static int add_host_wait(seg_cache *c, an_gpu_idle *d, size_t *cap, int64_t thread, int64_t a, int64_t b)
{
    const thread_segs *ts;
    int rc = seg_get(c, thread, &ts);
    if (rc) return rc;
    size_t lo = 0, hi = ts->n;
    while (lo < hi) { /* first segment ending after a */
        size_t mid = lo + (hi - lo) / 2;
        if (ts->seg[mid].end <= a) lo = mid + 1;
        else hi = mid;
    }
    int64_t covered = 0;
    for (size_t i = lo; i < ts->n && ts->seg[i].start < b; i++) {
        int64_t s = ts->seg[i].start > a ? ts->seg[i].start : a, e = ts->seg[i].end < b ? ts->seg[i].end : b;
        if (e <= s) continue;
        covered += e - s;
        if ((rc = add_wait(d, cap, thread, ts->seg[i].stage, e - s))) return rc;
    }
    if (b - a > covered) return add_wait(d, cap, thread, -1, b - a - covered);
    return 0;
}

static int cmp_wait(const void *a, const void *b)
{
    const an_gpu_wait *x = a, *y = b;
    if (x->ns != y->ns) return x->ns > y->ns ? -1 : 1;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return (x->stage > y->stage) - (x->stage < y->stage);
}

/* One device's records (sorted here) into its split. */
/* One device's idle split over [t0, t1), fed its records in start order
 * (ties: the shorter first). cur: the end of the time accounted so far. */
typedef struct split_state {
    seg_cache *cache;
    an_gpu_idle *d;
    int64_t t0, t1, cur;
    size_t cap; /* of d->waits */
} split_state;

static int split_step(split_state *st, int64_t start, int64_t end, int64_t launch, int64_t thread, int last)
{
    an_gpu_idle *d = st->d;
    int64_t s = last ? st->t1 : (start > st->t0 ? start : st->t0);
    int64_t e = last ? st->t1 : (end < st->t1 ? end : st->t1);
    if (s > st->cur) {
        int64_t gap = s - st->cur;
        d->idle_ns += gap;
        if (last || launch == INT64_MIN) {
            d->other_ns += gap;
        } else {
            int64_t host_end = launch < s ? launch : s;
            int64_t host = host_end > st->cur ? host_end - st->cur : 0;
            int64_t rest = gap - host;
            d->host_wait_ns += host;
            if (rest <= AN_GPU_LAUNCH_GAP_MAX_NS)
                d->launch_gap_ns += rest;
            else
                d->other_ns += rest;
            if (host > 0) {
                int rc = add_host_wait(st->cache, d, &st->cap, thread, st->cur, host_end);
                if (rc) return rc;
            }
        }
        st->cur = s;
    }
    if (!last && e > st->cur) {
        d->busy_ns += e - st->cur;
        st->cur = e;
    }
    return 0;
}

static void split_finish(an_gpu_idle *d)
{
    if (d->n_waits) qsort(d->waits, d->n_waits, sizeof *d->waits, cmp_wait);
    d->host_stage = -1;
    d->host_thread = -1;
    if (d->n_waits) {
        d->host_thread = d->waits[0].thread;
        d->host_stage = d->waits[0].stage;
        d->host_stage_ns = d->waits[0].ns;
    }
}

/* an_gpu_each's callback: records overlapping [t0, t1) only (a zero-length
 * record at t0 counts), as the iterator's window would return them. */
static int split_record(const st_gpu_row *row, void *arg)
{
    split_state *st = arg;
    int64_t start = row->rec.start_ns, end = start + row->rec.dur_ns;
    if (start >= st->t1 || end < st->t0 || (end == st->t0 && row->rec.dur_ns != 0)) return 0;
    st->d->n_records++;
    int rc = split_step(st, start, end, row->launch_ns, row->thread, 0);
    if (rc == ST_ENOMEM) return pipe_oom();
    if (rc) return an_trace_fail(st->cache->t);
    return 0;
}

void an_gpu_idle_free(an_gpu_idle *d, uint32_t n)
{
    if (!d) return;
    for (uint32_t i = 0; i < n; i++) free(d[i].waits);
    free(d);
}

int an_gpu_idle_split(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_idle **out, uint32_t *n, const char **note)
{
    *out = NULL;
    *n = 0;
    *note = "no GPU activity in this trace";
    int has = st_reader_has_gpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    *note = "no GPU activity in the window";
    if (t1_ns <= t0_ns) return AN_EXIT_OK;
    int32_t *ids = NULL;
    uint32_t n_ids = 0;
    int rc = an_gpu_devices(t, &ids, &n_ids);
    if (rc) return rc;
    an_gpu_idle *devs = calloc(n_ids ? n_ids : 1, sizeof *devs);
    if (!devs) {
        free(ids);
        return pipe_oom();
    }
    seg_cache cache = {t, t0_ns, t1_ns, NULL, 0};
    /* records from ST_GPU_LAUNCH_LOOKBACK_NS before the window: a long one may run into it */
    int64_t from = t0_ns < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : t0_ns - ST_GPU_LAUNCH_LOOKBACK_NS;
    uint32_t n_devs = 0;
    for (uint32_t i = 0; i < n_ids && !rc; i++) {
        an_gpu_idle *d = &devs[n_devs];
        memset(d, 0, sizeof *d);
        d->device = ids[i];
        split_state st = {&cache, d, t0_ns, t1_ns, t0_ns, 0};
        rc = an_gpu_each(t, ids[i], from, t1_ns, split_record, &st);
        if (!rc && d->n_records) {
            int src = split_step(&st, 0, 0, INT64_MIN, -1, 1); /* the gap after the last record */
            if (src) rc = src == ST_ENOMEM ? pipe_oom() : an_trace_fail(t);
            split_finish(d);
            n_devs++;
        } else {
            free(d->waits);
        }
    }
    seg_cache_free(&cache);
    free(ids);
    if (rc) {
        an_gpu_idle_free(devs, n_devs);
        return rc;
    }
    *out = devs;
    *n = n_devs;
    *note = n_devs ? NULL : "no GPU activity in the window";
    return AN_EXIT_OK;
}

int an_gpu_window(const an_trace *t, const an_window_spec *w, int64_t all_t0, int64_t all_t1, int64_t *t0_ns,
                  int64_t *t1_ns, char *desc, size_t desc_size)
{
    char a[40], b[40];
    if (w && w->kind != AN_WIN_ALL) {
        int rc = an_window_resolve(w, t, t0_ns, t1_ns);
        if (rc) return rc;
        an_fmt_fixed(a, *t0_ns - t->origin_ns, 9, 3);
        an_fmt_fixed(b, *t1_ns - t->origin_ns, 9, 3);
        if (w->kind == AN_WIN_STEPS) snprintf(desc, desc_size, "steps %s (%s-%s s)", w->text, a, b);
        else snprintf(desc, desc_size, "time %s-%s s", a, b);
        return AN_EXIT_OK;
    }
    uint32_t n = st_reader_n_steps(t->r);
    if (n >= 2) {
        uint32_t i0 = n >= 3 ? 1 : 0;
        const st_step_info *s0 = st_reader_step(t->r, i0), *s1 = st_reader_step(t->r, n - 1);
        *t0_ns = s0->ts_ns;
        *t1_ns = s1->ts_ns;
        an_fmt_fixed(a, *t0_ns - t->origin_ns, 9, 3);
        an_fmt_fixed(b, *t1_ns - t->origin_ns, 9, 3);
        snprintf(desc, desc_size, "steps %llu:%llu (%s-%s s%s)", (unsigned long long)s0->step,
                 (unsigned long long)s1->step, a, b, i0 ? ", the first step left out as start-up" : "");
        if (*t1_ns > *t0_ns) return AN_EXIT_OK;
    }
    *t0_ns = all_t0;
    *t1_ns = all_t1;
    an_fmt_fixed(a, all_t0 - t->origin_ns, 9, 3);
    an_fmt_fixed(b, all_t1 - t->origin_ns, 9, 3);
    snprintf(desc, desc_size, "the whole trace (%s-%s s, fewer than 2 step marks)", a, b);
    return AN_EXIT_OK;
}

char *an_gpu_idle_text(const an_trace *t, const an_gpu_idle *d, uint32_t n, const char *note)
{
    if (!n) return strdup(note ? note : "no GPU activity in this trace");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        const an_gpu_idle *g = &d[i];
        int64_t span = g->busy_ns + g->idle_ns;
        char pct[32], b1[64], b2[64];
        fprintf(f, "%sGPU %d busy %s, idle %.3f ms: host wait %.3f ms", i ? "; " : "", g->device,
                an_fmt_pct1(span ? 100.0 * (double)g->busy_ns / (double)span : 0, pct, sizeof pct),
                (double)g->idle_ns / 1e6, (double)g->host_wait_ns / 1e6);
        if (g->host_thread >= 0 && g->host_stage < 0 && g->host_stage_ns > 0) {
            const st_thread_info *ti = st_reader_thread_by_id(t->r, (uint32_t)g->host_thread);
            fprintf(f, " (mostly while %s is in no stage, %.3f ms)", an_clean(ti ? ti->name : "?", b1, sizeof b1),
                    (double)g->host_stage_ns / 1e6);
        } else if (g->host_stage >= 0 && g->host_stage_ns > 0) {
            const st_stage_info *si = st_reader_stage(t->r, (uint32_t)g->host_stage);
            const st_thread_info *ti = st_reader_thread_by_id(t->r, (uint32_t)g->host_thread);
            fprintf(f, " (mostly while %s is in '%s', %.3f ms: the device is host-bound there; make that stage "
                       "asynchronous or move it off the launching thread)",
                    an_clean(ti ? ti->name : "?", b1, sizeof b1), an_clean(si ? si->name : "?", b2, sizeof b2),
                    (double)g->host_stage_ns / 1e6);
        }
        fprintf(f, ", launch gaps %.3f ms, other %.3f ms", (double)g->launch_gap_ns / 1e6, (double)g->other_ns / 1e6);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

int an_gpu_idle_steady(an_trace *t, int64_t v0, int64_t v1, an_gpu_idle **out, uint32_t *n, char **text)
{
    *out = NULL;
    *n = 0;
    *text = NULL;
    int64_t w0, w1;
    char desc[160];
    int rc = an_gpu_window(t, NULL, v0, v1, &w0, &w1, desc, sizeof desc);
    if (rc) return rc;
    if (w0 < v0) w0 = v0;
    if (w1 > v1) w1 = v1;
    if (w1 <= w0) {
        w0 = v0;
        w1 = v1;
        char a[40], b[40];
        an_fmt_fixed(a, v0 - t->origin_ns, 9, 3);
        an_fmt_fixed(b, v1 - t->origin_ns, 9, 3);
        snprintf(desc, sizeof desc, "%s-%s s", a, b);
    } else if (w0 != v0 || w1 != v1) {
        char a[40], b[40];
        an_fmt_fixed(a, w0 - t->origin_ns, 9, 3);
        an_fmt_fixed(b, w1 - t->origin_ns, 9, 3);
        int has0 = 0, has1 = 0;
        uint64_t s0 = 0, s1 = 0;
        for (uint32_t i = 0; i < st_reader_n_steps(t->r); i++) {
            const st_step_info *s = st_reader_step(t->r, i);
            if (s->ts_ns == w0 && !has0) { s0 = s->step; has0 = 1; }
            if (s->ts_ns == w1) { s1 = s->step; has1 = 1; }
        }
        if (has0 && has1)
            snprintf(desc, sizeof desc, "steps %llu:%llu (%s-%s s, start-up left out)", (unsigned long long)s0,
                     (unsigned long long)s1, a, b);
        else
            snprintf(desc, sizeof desc, "%s-%s s (start-up left out)", a, b);
    }
    const char *note = NULL;
    rc = an_gpu_idle_split(t, w0, w1, out, n, &note);
    if (rc) return rc;
    char *body = an_gpu_idle_text(t, *out, *n, note);
    if (!body) goto oom;
    if (!*n) {
        *text = body;
        return AN_EXIT_OK;
    }
    size_t len = strlen(body) + strlen(desc) + 16;
    *text = malloc(len);
    if (!*text) {
        free(body);
        goto oom;
    }
    snprintf(*text, len, "over %s: %s", desc, body);
    free(body);
    return AN_EXIT_OK;
oom:
    an_gpu_idle_free(*out, *n);
    *out = NULL;
    *n = 0;
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* ---- statistics of per-step samples ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double an_median(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

typedef struct labelled {
    double v;
    int from_a;
} labelled;

static int cmp_labelled(const void *a, const void *b)
{
    return cmp_double(&((const labelled *)a)->v, &((const labelled *)b)->v);
}

double an_mann_whitney(const double *a, size_t n1, const double *b, size_t n2, double *u_out)
{
    if (!n1 || !n2) return NAN;
    size_t n = n1 + n2;
    labelled *all = malloc(n * sizeof *all);
    if (!all) return NAN;
    for (size_t i = 0; i < n1; i++) all[i] = (labelled){a[i], 1};
    for (size_t i = 0; i < n2; i++) all[n1 + i] = (labelled){b[i], 0};
    qsort(all, n, sizeof *all, cmp_labelled);
    double rank_sum_a = 0, ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && all[j + 1].v == all[i].v) j++;
        double t = (double)(j - i + 1), rank = (double)(i + j) / 2.0 + 1.0; /* average rank, 1-based */
        for (size_t k = i; k <= j; k++)
            if (all[k].from_a) rank_sum_a += rank;
        ties += t * t * t - t;
        i = j + 1;
    }
    free(all);
    double dn1 = (double)n1, dn2 = (double)n2, dn = (double)n;
    double u = rank_sum_a - dn1 * (dn1 + 1.0) / 2.0;
    if (u_out) *u_out = u;
    double mu = dn1 * dn2 / 2.0;
    double var = dn1 * dn2 / 12.0 * ((dn + 1.0) - ties / (dn * (dn - 1.0)));
    if (!(var > 0)) return 1.0;
    double d = fabs(u - mu) - 0.5; /* continuity correction */
    if (d < 0) d = 0;
    return erfc(d / sqrt(var) / sqrt(2.0));
}
