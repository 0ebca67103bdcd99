/* stragglers.c: which rank holds the others up, over a rank set
 * (stragglers.h; docs/analyze.md, "stragglers"). Over a rank set on rank
 * 0's clock: each collective (a range of a `comm` stage) is identified by
 * the collective itself: on every rank, the ranges of one comm stage (all
 * the rank's threads together) are numbered 0, 1, ... in start order, and
 * the k-th of each rank is that rank's part of instance k. No other role's
 * step marks enter the matching (a target rank's step is "batch sent", queue
 * depth batches ahead of the drafters). The rank that begins an instance
 * last is the one the others wait for, and each other rank waits from its
 * own start to that last start. Per stage and role, the rank with the most
 * time in the stage against the median over ranks. `stragglers` prints its
 * tables from an_stragglers_read; bottleneck and report use
 * an_stragglers_compute.
 */
#include <stdlib.h>
#include <string.h>

#include "stragglers.h"

static int cmp_stage_rank_start(const void *a, const void *b)
{
    const an_stragglers_arrival *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->rank_ix != y->rank_ix) return x->rank_ix < y->rank_ix ? -1 : 1;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x->thread > y->thread) - (x->thread < y->thread);
}

static int cmp_instance(const void *a, const void *b)
{
    const an_stragglers_arrival *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->instance != y->instance) return x->instance < y->instance ? -1 : 1;
    return x->rank_ix < y->rank_ix ? -1 : x->rank_ix > y->rank_ix;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The matching (stragglers.h): n_arr may be 0 (arr NULL: a set without a comm range). */
/* ---- NCCL's kernels as collectives ---- */
static const char *const nccl_ops[AN_NCCL_OPS] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                                  "Reduce",    "SendRecv",  "AllToAll",      "other"};
static const char *const nccl_stages[AN_NCCL_OPS] = {"nccl:AllReduce", "nccl:AllGather", "nccl:ReduceScatter",
                                                     "nccl:Broadcast", "nccl:Reduce",    "nccl:SendRecv",
                                                     "nccl:AllToAll",  "nccl:other"};

int an_nccl_op(const char *name)
{
    if (!name) return -1;
    const char *p = name;
    if (p[0] == '_' && p[1] == 'Z') { /* _Z<length><name>...: the Itanium ABI's mangled name */
        p += 2;
        while (*p >= '0' && *p <= '9') p++;
    }
    const char *rest;
    if (strncmp(p, "ncclDevKernel_", 14) == 0) rest = p + 14;
    else if (strncmp(p, "ncclKernel_", 11) == 0) rest = p + 11;
    else return -1;
    for (int i = 0; i < AN_NCCL_OTHER; i++) {
        size_t len = strlen(nccl_ops[i]);
        /* the whole word: Reduce is not ReduceScatter */
        if (strncmp(rest, nccl_ops[i], len) == 0 && (rest[len] == '_' || rest[len] == 0 || rest[len] == '(')) return i;
    }
    return AN_NCCL_OTHER;
}

const char *an_stragglers_stage_name(const st_reader *r, uint32_t stage)
{
    uint32_t n = st_reader_n_stages(r);
    if (stage < n) return st_reader_stage(r, stage)->name;
    return stage - n < AN_NCCL_OPS ? nccl_stages[stage - n] : "?";
}

int an_stragglers_add_gpu(an_trace *t, const int *rank_of, an_stragglers_arrival **arr, size_t *n, size_t *cap)
{
    st_reader *r = t->r;
    int has = st_reader_has_gpu(r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    uint32_t n_stages = st_reader_n_stages(r);
    st_gpu_iter *it;
    if (st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK) return an_trace_fail(t);
    st_gpu_row row;
    int k;
    while ((k = st_gpu_iter_next(it, &row)) == 1) {
        if (row.rec.kind != ST_GPU_KERNEL || row.rec.dur_ns < 0 || row.device < 0) continue;
        int op = an_nccl_op(row.name);
        if (op < 0) continue;
        int rank = row.device / ST_SET_DEVICE_STRIDE;
        uint32_t part = 0;
        while (part < t->n_ranks && rank_of[part] != rank) part++;
        if (part == t->n_ranks) continue;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            an_stragglers_arrival *na = realloc(*arr, nc * sizeof *na);
            if (!na) {
                st_gpu_iter_close(it);
                an_error("out of memory");
                return AN_EXIT_FAIL;
            }
            *arr = na;
            *cap = nc;
        }
        uint32_t th = row.thread >= 0 && row.thread < UINT32_MAX ? (uint32_t)row.thread : UINT32_MAX;
        (*arr)[(*n)++] = (an_stragglers_arrival){n_stages + (uint32_t)op, part, th, 0, row.rec.start_ns,
                                                 row.rec.start_ns + row.rec.dur_ns};
    }
    st_gpu_iter_close(it);
    return k < 0 ? an_trace_fail(t) : AN_EXIT_OK;
}

void an_stragglers_match(an_stragglers_arrival *arr, size_t n_arr)
{
    if (!n_arr) return;
    qsort(arr, n_arr, sizeof *arr, cmp_stage_rank_start);
    for (size_t i = 0; i < n_arr; i++)
        arr[i].instance = i && arr[i - 1].stage == arr[i].stage && arr[i - 1].rank_ix == arr[i].rank_ix
                              ? arr[i - 1].instance + 1
                              : 0;
    qsort(arr, n_arr, sizeof *arr, cmp_instance);
}

/* The aggregation, for the command's tables and for the report alike (stragglers.h). */
size_t an_stragglers_aggregate(const an_stragglers_arrival *arr, size_t n_arr, size_t i, uint32_t n_ranks,
                               uint32_t *last_count, int64_t *starts, an_stragglers_coll *out,
                               an_stragglers_instance_fn each_instance, void *arg)
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
                an_stragglers_instance in = {&arr[j], &arr[last], m, starts[(m - 1) / 2], wmean, wmax};
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

static void rank_marks_free(an_stragglers_marks *m, uint32_t n_ranks)
{
    if (!m) return;
    for (uint32_t i = 0; i < n_ranks; i++) {
        free(m[i].ts_ns);
        free(m[i].step);
    }
    free(m);
}

/* Each rank's marks mapped (a mark whose time does not map leaves the rank with none). */
static an_stragglers_marks *rank_marks_load(an_trace *t)
{
    an_stragglers_marks *m = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *m);
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
        st_reader_part_clock(t->r, i, &c); /* the set's mapping (--align), not only meta's */
        m[i].n = n;
        for (uint32_t k = 0; k < n && m[i].n; k++) {
            m[i].step[k] = st_reader_step(part, k)->step;
            if (st_rank_clock_map(&c, st_reader_step(part, k)->ts_ns, &m[i].ts_ns[k]) != ST_OK) m[i].n = 0;
        }
    }
    return m;
}

int an_stragglers_instance_step(const an_stragglers_marks *marks, const an_stragglers_instance *in, uint64_t *step)
{
    for (uint32_t q = 0; q < in->m; q++) {
        const an_stragglers_arrival *a = &in->first[q];
        const an_stragglers_marks *m = &marks[a->rank_ix];
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

/* ---- for the tables of `stragglers` -------------------------------------------------------- */

int an_stragglers_read(an_trace *t, an_stragglers_data *d)
{
    memset(d, 0, sizeof *d);
    st_reader *r = t->r;
    uint32_t n_ranks = t->n_ranks, nt = st_reader_n_threads(r);
    int *rank_of = malloc(n_ranks * sizeof *rank_of);
    const char **roles = malloc((nt ? nt : 1) * sizeof *roles);
    uint32_t n_roles = 0;
    an_stragglers_arrival *arr = NULL;
    size_t n_arr = 0, cap = 0;
    an_stragglers_total *tot = NULL;
    uint32_t n_tot = 0;
    an_stragglers_marks *marks = NULL;
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
                an_stragglers_total *nt2 = realloc(tot, (n_tot + 1) * sizeof *nt2);
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
                an_stragglers_arrival *na = realloc(arr, cap * sizeof *na);
                if (!na) break;
                arr = na;
            }
            arr[n_arr++] = (an_stragglers_arrival){g.stage, part, th, 0, g.start_ns, g.start_ns + g.dur_ns};
        }
        st_range_iter_close(it);
        if (n < 0) rc = an_trace_fail(t);
        else if (n == 1) goto oom;
    }
    if (rc) goto done;
    if ((rc = an_stragglers_add_gpu(t, rank_of, &arr, &n_arr, &cap))) goto done;
    an_stragglers_match(arr, n_arr);
    marks = rank_marks_load(t);
    if (!marks) goto oom;
    goto done;
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
done:
    *d = (an_stragglers_data){n_ranks, rank_of, roles, n_roles, arr, n_arr, tot, n_tot, marks};
    if (rc) an_stragglers_data_free(d);
    return rc;
}

void an_stragglers_data_free(an_stragglers_data *d)
{
    rank_marks_free(d->marks, d->n_ranks);
    for (uint32_t k = 0; k < d->n_tot; k++) free(d->tot[k].ns);
    free(d->tot);
    free(d->arr);
    free(d->roles);
    free(d->rank_of);
    memset(d, 0, sizeof *d);
}

uint32_t an_stragglers_slowest(const an_trace *t, const an_stragglers_data *d, uint32_t k, int64_t *vals,
                               uint32_t *slowest, int64_t *median_ns, double *over_pct)
{
    st_reader *r = t->r;
    uint32_t n_ranks = d->n_ranks, nt = st_reader_n_threads(r);
    const an_stragglers_total *tot = d->tot;
    const char *const *roles = d->roles;
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
    if (m < 2) return m;
    qsort(vals, m, sizeof *vals, cmp_i64);
    int64_t median = vals[(m - 1) / 2];
    *over_pct = median > 0 ? 100.0 * (double)(tot[k].ns[slow] - median) / (double)median : 0;
    *slowest = slow;
    *median_ns = median;
    return m;
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
    an_stragglers_arrival *arr = NULL;
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
                an_stragglers_arrival *na = realloc(arr, cap * sizeof *na);
                if (!na) break;
                arr = na;
            }
            arr[n_arr++] = (an_stragglers_arrival){g.stage, part, th, 0, g.start_ns, g.start_ns + g.dur_ns};
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
    {
        int *rank_of = malloc((n_ranks ? n_ranks : 1) * sizeof *rank_of);
        if (!rank_of) goto oom;
        for (uint32_t i = 0; i < n_ranks; i++) rank_of[i] = s->ranks[i].rank;
        int grc = an_stragglers_add_gpu(t, rank_of, &arr, &n_arr, &cap);
        free(rank_of);
        if (grc) {
            free(arr);
            free(last_count);
            free(starts);
            an_stragglers_free(s);
            return grc;
        }
    }
    an_stragglers_match(arr, n_arr);
    for (size_t i = 0; i < n_arr;) {
        uint32_t stage = arr[i].stage;
        an_stragglers_coll c;
        i = an_stragglers_aggregate(arr, n_arr, i, n_ranks, last_count, starts, &c, NULL, NULL);
        if (c.instances) {
            an_straggler *nc = realloc(s->coll, (s->n_coll + 1) * sizeof *nc);
            if (!nc) goto oom;
            s->coll = nc;
            s->coll[s->n_coll++] = (an_straggler){an_stragglers_stage_name(r, stage), c.instances, c.ranks_with,
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
