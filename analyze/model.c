/* model.c: the per-step model of a pipeline trace (see model.h), shared by
 * `bottleneck`, `diff` and `report`.
 *
 * The scan reads each thread's begin/end events once, in recorded order,
 * keeping its own stack of open stages: the time between two events belongs
 * to the innermost open range (self time), split at step marks; a range is
 * counted in the step window where it begins (as the profile lines do).
 * Threads are independent, so there is no merge across threads; a thread's
 * per-bin sums are folded into its role's, and its idle time per bin is the
 * bin's length minus its self time. GPU records are then folded into busy
 * time per bin, device and launching role.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "queues.h"

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
    uint32_t stack[ST_MAX_DEPTH + 1];
    uint32_t depth = 0;
    int64_t last = 0, b = 0;
    int started = 0;
    uint64_t n = 0;
    st_event ev;
    while ((rc = st_event_iter_next(it, &ev)) == 1) {
        int64_t ts = ev.ts_ns;
        if (!started) {
            started = 1;
            b = an_pipe_bin_of(p, ts);
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
            if (depth <= ST_MAX_DEPTH) stack[depth++] = stage;
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


/* ---- GPU activity per bin ------------------------------------------------------------------ */

/* Adds [a, b) to cells[bin * stride] of the bins it overlaps. */
static void add_to_bins(const an_pipe *p, int64_t a, int64_t b, int64_t *cells, size_t stride)
{
    if (a < p->bin_t[0]) a = p->bin_t[0];
    if (b > p->bin_t[p->n_bins]) b = p->bin_t[p->n_bins];
    if (b <= a) return;
    for (int64_t bin = an_pipe_bin_of(p, a); bin < (int64_t)p->n_bins && p->bin_t[bin] < b; bin++) {
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
    int64_t *kept;        /* [device index][bin][k], every device's */
    size_t per_dev;       /* n_bins * (n_roles + 1) */
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
    /* a record that starts while recording was paused (copies, memsets: a pause stops the kernel
     * records only) is left out, so that the device time is that of the recorded time alone,
     * which an_pipe_dev_scale extends to the period */
    if (p->trace->n_gpu_unrecorded && an_trace_gpu_paused_at(p->trace, start)) return 0;
    f->seen = 1;
    if (role < nr && row->stage >= 0 && (uint64_t)row->stage < p->n_stages)
        add_to_bins(p, start, end, p->dev_stage_ns + (size_t)role * p->n_stages + (size_t)row->stage,
                    (size_t)nr * p->n_stages);
    if (role < nr) fold_extend(f, role, start, end);
    fold_extend(f, nr, start, end);
    return 0;
}

static int fold_begin(int32_t device, void *arg)
{
    gpu_fold *f = arg;
    an_pipe *p = f->p;
    f->cells = f->kept + f->per_dev * p->n_devices;
    f->seen = 0;
    for (uint32_t k = 0; k <= p->n_roles; k++) f->b[k] = INT64_MIN;
    return 0;
}

static int fold_end(int32_t device, void *arg)
{
    gpu_fold *f = arg;
    an_pipe *p = f->p;
    const uint32_t nr = p->n_roles;
    for (uint32_t k = 0; k <= nr; k++)
        if (f->b[k] != INT64_MIN) add_to_bins(p, f->a[k], f->b[k], f->cells + k, nr + 1);
    if (f->seen) p->devices[p->n_devices++] = device;
    else memset(f->cells, 0, f->per_dev * sizeof *f->cells);
    return 0;
}

/* The devices with records in the period, and their busy time per bin. A
 * record counts from ST_GPU_LAUNCH_LOOKBACK_NS before the period (a long
 * kernel running into it). The same pass feeds the steady-state idle split
 * (opts->gpu_idle) and the caller's own reader of the period's records
 * (opts->gpu_record), so a command reads each record once. */
static int read_gpu(an_pipe *p, const an_pipe_opts *o)
{
    an_trace *t = p->trace;
    int32_t *devs = NULL;
    uint32_t n_devs = 0;
    an_gpu_tap taps[3];
    uint32_t n_taps = 0;
    an_gpu_split *split = NULL;
    char desc[160];
    int rc = AN_EXIT_OK;
    int64_t t0 = p->bin_t[0], t1 = p->bin_t[p->n_bins];
    if (o->gpu_idle) {
        int64_t w0, w1;
        rc = an_gpu_steady_window(t, t0, t1, &w0, &w1, desc, sizeof desc);
        if (!rc) split = an_gpu_split_open(t, w0, w1, &taps[n_taps++], &rc);
        if (rc) return rc;
    }
    if (o->gpu_record) taps[n_taps++] = (an_gpu_tap){t0, t1, NULL, o->gpu_record, NULL, o->gpu_record_arg};
    rc = an_gpu_devices(t, &devs, &n_devs);
    const uint32_t nr = p->n_roles;
    gpu_fold f;
    memset(&f, 0, sizeof f);
    if (!rc && n_devs) {
        f.p = p;
        f.per_dev = (size_t)p->n_bins * (nr + 1);
        f.ids = malloc((p->n_threads ? p->n_threads : 1) * sizeof *f.ids);
        f.a = malloc((nr + 1) * sizeof *f.a);
        f.b = malloc((nr + 1) * sizeof *f.b);
        f.kept = calloc(f.per_dev * n_devs, sizeof *f.kept); /* [device index][bin][k] while reading */
        p->devices = malloc(n_devs * sizeof *p->devices);
        p->dev_stage_ns =
            calloc((size_t)p->n_bins * (nr ? nr : 1) * (p->n_stages ? p->n_stages : 1), sizeof *p->dev_stage_ns);
        if (!f.ids || !f.a || !f.b || !f.kept || !p->devices || !p->dev_stage_ns) rc = pipe_oom();
        for (uint32_t i = 0; !rc && i < p->n_threads; i++) {
            f.ids[i][0] = st_reader_thread(t->r, i)->id;
            f.ids[i][1] = p->thread_role[i];
        }
        if (!rc) qsort(f.ids, p->n_threads, sizeof *f.ids, cmp_u32_pair);
        int64_t from = t0 < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : t0 - ST_GPU_LAUNCH_LOOKBACK_NS;
        taps[n_taps++] = (an_gpu_tap){from, t1, fold_begin, fold_record, fold_end, &f};
        if (!rc) rc = an_gpu_read(t, devs, n_devs, taps, n_taps);
    }
    /* [(bin * n_devices + dev) * (n_roles + 1) + k] */
    if (!rc && p->n_devices) {
        p->dev_ns = malloc(f.per_dev * p->n_devices * sizeof *p->dev_ns);
        if (!p->dev_ns) rc = pipe_oom();
        for (uint32_t d = 0; !rc && d < p->n_devices; d++)
            for (uint32_t b = 0; b < p->n_bins; b++)
                memcpy(p->dev_ns + ((size_t)b * p->n_devices + d) * (nr + 1),
                       f.kept + f.per_dev * d + (size_t)b * (nr + 1), (nr + 1) * sizeof *p->dev_ns);
    }
    if (!rc && p->n_devices && t->n_gpu_unrecorded) {
        p->bin_rec_ns = malloc((size_t)p->n_bins * sizeof *p->bin_rec_ns);
        if (!p->bin_rec_ns) rc = pipe_oom();
        uint32_t cursor = 0;
        for (uint32_t b = 0; !rc && b < p->n_bins; b++)
            p->bin_rec_ns[b] = p->bin_t[b + 1] - p->bin_t[b] -
                               an_trace_gpu_paused_next(t, &cursor, p->bin_t[b], p->bin_t[b + 1]);
    }
    if (!rc && !p->n_devices) {
        free(p->devices);
        free(p->dev_stage_ns);
        p->devices = NULL;
        p->dev_stage_ns = NULL;
    }
    free(f.kept);
    free(f.ids);
    free(f.a);
    free(f.b);
    free(devs);
    if (split) {
        const char *note = NULL;
        an_gpu_split_close(split, rc == AN_EXIT_OK, &p->gpu_idle, &p->n_gpu_idle, &note);
        if (!rc && !(p->gpu_idle_text = an_gpu_idle_steady_text(t, desc, p->gpu_idle, p->n_gpu_idle, note)))
            rc = pipe_oom();
    }
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
    if (!rc) rc = an_pipe_read_queues(p);
    if (!rc) rc = read_gpu(p, opts);
    return rc;
}

int an_pipe_compute(an_pipe *p, an_trace *t, const an_pipe_opts *opts)
{
    /* on failure nothing stays allocated */
    int rc = pipe_compute(p, t, opts);
    if (rc) an_pipe_free(p);
    return rc;
}

double an_pipe_dev_scale(const an_pipe *p, uint32_t bin0, uint32_t bin1)
{
    if (!p->bin_rec_ns) return 1.0;
    int64_t len = 0, rec = 0;
    for (uint32_t b = bin0; b < bin1; b++) {
        len += p->bin_t[b + 1] - p->bin_t[b];
        rec += p->bin_rec_ns[b];
    }
    return rec > 0 ? (double)len / (double)rec : 0.0;
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
    free(p->bin_rec_ns);
    free(p->bin_step_first);
    free(p->bin_step_last);
    free(p->bin_steps);
    free(p->bin_tokens);
    free(p->self_ns);
    free(p->count);
    free(p->devices);
    free(p->dev_ns);
    free(p->dev_stage_ns);
    an_gpu_idle_free(p->gpu_idle, p->n_gpu_idle);
    free(p->gpu_idle_text);
    memset(p, 0, sizeof *p);
}

/* ---- queue depths ------------------------------------------------------------------------
 * A counter named like *queue_depth* is read once, every thread's samples
 * merged by time (queues.c); its value holds from one sample to the next, so
 * its statistics are time-weighted (mean, min, max, time at max and at zero)
 * over the model's period and per bin. */

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
    int64_t bin = an_pipe_bin_of(p, a);
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

int an_pipe_read_queues(an_pipe *p)
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

