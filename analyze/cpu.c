/* cpu.c: the figures of `analyze cpu` (cpu.h; docs/analyze.md, "cpu"), from
 * the reader's CPU records (st_cpu_iter), stacks and frame names. Per
 * thread with a cpu_threads row: its innermost-stage timeline from its
 * events cut into self-time pieces, each piece's on/off-CPU split by the
 * capture layer's own accounting (st_cpu_account over st_cpu_off_intervals,
 * in the reader API), the samples counted per stage and their frames named
 * once per stack.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

typedef struct vec {
    void *v;
    size_t n, cap;
} vec;

static void *vec_push(vec *x, size_t size)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        void *v = realloc(x->v, cap * size);
        if (!v) return NULL;
        x->v = v;
        x->cap = cap;
    }
    return (char *)x->v + size * x->n++;
}

/* ---- names: (function, file) interned ---- */

typedef struct name_table {
    uint32_t *slot; /* index + 1, 0 empty */
    uint32_t cap;
} name_table;

static uint64_t name_hash(const char *name, const char *path)
{
    return an_hash_name(name) * 31 + an_hash_name(path);
}

static int name_intern(an_cpu_result *res, name_table *h, const char *name, const char *path, uint32_t *out)
{
    if (res->n_names * 2 >= h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 1024;
        uint32_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (uint32_t i = 0; i < res->n_names; i++) {
            uint64_t k = name_hash(res->names[i].name, res->names[i].path) & (cap - 1);
            while (slot[k]) k = (k + 1) & (cap - 1);
            slot[k] = i + 1;
        }
        free(h->slot);
        h->slot = slot;
        h->cap = cap;
    }
    uint64_t k = name_hash(name, path) & (h->cap - 1);
    for (; h->slot[k]; k = (k + 1) & (h->cap - 1)) {
        const an_cpu_name *n = &res->names[h->slot[k] - 1];
        if (strcmp(n->name, name) == 0 && strcmp(n->path, path) == 0) {
            *out = h->slot[k] - 1;
            return 0;
        }
    }
    if (res->n_names == res->cap_names) {
        uint32_t cap = res->cap_names ? res->cap_names * 2 : 256;
        an_cpu_name *v = realloc(res->names, cap * sizeof *v);
        if (!v) return -1;
        res->names = v;
        res->cap_names = cap;
    }
    an_cpu_name *n = &res->names[res->n_names];
    n->name = strdup(name);
    n->path = strdup(path);
    if (!n->name || !n->path) {
        free(n->name);
        free(n->path);
        return -1;
    }
    h->slot[k] = ++res->n_names;
    *out = res->n_names - 1;
    return 0;
}

/* ---- stacks: each one's frames as name indices, once ---- */

typedef struct stack_ent {
    uint64_t id;
    uint32_t off, n, used;
} stack_ent;

typedef struct stack_cache {
    stack_ent *slot;
    uint32_t cap, n;
    vec names; /* uint32_t */
} stack_cache;

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const char *an_cpu_frame_label(const st_cpu_frame *fr, char *buf, size_t size)
{
    if (fr->name[0]) return fr->name;
    snprintf(buf, size, "[%s]", fr->path[0] ? base_name(fr->path) : "unknown");
    return buf;
}

/* The name indices of a stack's frames, innermost first. 0, or an exit code. */
static int stack_names(an_trace *t, an_cpu_result *res, name_table *nt, stack_cache *sc, uint64_t id,
                       const uint32_t **names, uint32_t *n)
{
    if (sc->n * 2 >= sc->cap) {
        uint32_t cap = sc->cap ? sc->cap * 2 : 1024;
        stack_ent *slot = calloc(cap, sizeof *slot);
        if (!slot) goto oom;
        for (uint32_t i = 0; i < sc->cap; i++)
            if (sc->slot[i].used) {
                uint64_t k = (sc->slot[i].id * 0x9E3779B97F4A7C15ull) & (cap - 1);
                while (slot[k].used) k = (k + 1) & (cap - 1);
                slot[k] = sc->slot[i];
            }
        free(sc->slot);
        sc->slot = slot;
        sc->cap = cap;
    }
    uint64_t k = (id * 0x9E3779B97F4A7C15ull) & (sc->cap - 1);
    for (; sc->slot[k].used; k = (k + 1) & (sc->cap - 1))
        if (sc->slot[k].id == id) {
            *names = (const uint32_t *)sc->names.v + sc->slot[k].off;
            *n = sc->slot[k].n;
            return 0;
        }
    const uint64_t *frames;
    uint32_t nf;
    if (st_reader_cpu_stack(t->r, id, &frames, &nf)) return an_trace_fail(t);
    stack_ent e = {id, (uint32_t)sc->names.n, nf, 1};
    for (uint32_t i = 0; i < nf; i++) {
        st_cpu_frame fr;
        if (st_reader_cpu_frame_name(t->r, id, frames[i], &fr) < 0) return an_trace_fail(t);
        char label[512];
        const char *name = an_cpu_frame_label(&fr, label, sizeof label);
        uint32_t *slot = vec_push(&sc->names, sizeof *slot);
        if (!slot || name_intern(res, nt, name, fr.path, slot)) goto oom;
    }
    sc->slot[k] = e;
    sc->n++;
    *names = (const uint32_t *)sc->names.v + e.off;
    *n = e.n;
    return 0;
oom:
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static an_cpu_fn *cell_fn(an_cpu_cell *c, uint32_t name)
{
    /* a stage's functions are few dozen: a linear search from the end (the latest added) */
    for (uint32_t i = c->n_fns; i-- > 0;)
        if (c->fns[i].name == name) return &c->fns[i];
    if (c->n_fns == c->cap_fns) {
        uint32_t cap = c->cap_fns ? c->cap_fns * 2 : 16;
        an_cpu_fn *v = realloc(c->fns, cap * sizeof *v);
        if (!v) return NULL;
        c->fns = v;
        c->cap_fns = cap;
    }
    an_cpu_fn *f = &c->fns[c->n_fns++];
    *f = (an_cpu_fn){name, 0, 0};
    return f;
}

/* ---- one thread ---- */

typedef struct thread_ctx {
    an_trace *t;
    an_cpu_result *res;
    name_table *nt;
    stack_cache *sc;
    uint32_t *seen; /* per name: the sample that last counted it inclusively, + 1 */
    uint32_t seen_cap;
    uint64_t sample_no;
} thread_ctx;

static int count_sample(thread_ctx *x, an_cpu_cell *c, uint64_t stack)
{
    const uint32_t *names = NULL;
    uint32_t n = 0;
    int rc = stack_names(x->t, x->res, x->nt, x->sc, stack, &names, &n);
    if (rc) return rc;
    if (x->seen_cap < x->res->n_names) {
        uint32_t cap = x->res->n_names * 2;
        uint32_t *s = realloc(x->seen, cap * sizeof *s);
        if (!s) goto oom;
        memset(s + x->seen_cap, 0, (cap - x->seen_cap) * sizeof *s);
        x->seen = s;
        x->seen_cap = cap;
    }
    x->sample_no++;
    uint32_t mark = (uint32_t)x->sample_no; /* wraps only after 2^32 samples: then a name may be counted twice */
    for (uint32_t i = 0; i < n; i++) {
        an_cpu_fn *f = cell_fn(c, names[i]);
        if (!f) goto oom;
        if (i == 0) f->self++;
        if (x->seen[names[i]] != mark) {
            x->seen[names[i]] = mark;
            f->incl++;
        }
    }
    return 0;
oom:
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static int thread_compute(thread_ctx *x, an_cpu_thread *th, int64_t t0, int64_t t1)
{
    an_trace *t = x->t;
    st_reader *r = t->r;
    uint32_t id = st_reader_thread(r, th->thread)->id;
    uint32_t ns = x->res->n_stages;
    th->t0_ns = t0 > th->info.start_ns ? t0 : th->info.start_ns;
    th->t1_ns = t1 > th->t0_ns ? t1 : th->t0_ns;
    vec sw = {0}, pieces = {0}, piece_stage = {0};
    st_cpu_off *off = NULL;
    st_cpu_share *share = NULL;
    int rc = 0;
    /* the switches of all time (an interval may open before the window), the samples of the window */
    st_cpu_iter *it;
    if (st_cpu_iter_open(&it, r, id, INT64_MIN, INT64_MAX)) return an_trace_fail(t);
    st_cpu_row row;
    int n;
    while ((n = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind == ST_CPU_ROW_SAMPLE) {
            if (row.ts_ns < th->t0_ns || row.ts_ns >= th->t1_ns) continue;
            an_cpu_cell *c = &th->cells[row.stage < 0 || (uint32_t)row.stage >= ns ? 0 : row.stage + 1];
            c->samples++;
            if ((rc = count_sample(x, c, row.stack))) break;
        } else if (row.kind == ST_CPU_ROW_LOST) {
            if (row.ts_ns >= th->t0_ns && row.ts_ns < th->t1_ns) th->lost += row.n_lost;
        } else {
            st_cpu_switch *s = vec_push(&sw, sizeof *s);
            if (!s) {
                rc = -1;
                break;
            }
            *s = (st_cpu_switch){row.ts_ns, row.kind != ST_CPU_ROW_IN, row.kind == ST_CPU_ROW_OUT_PREEMPTED};
        }
    }
    st_cpu_iter_close(it);
    if (rc > 0) goto done;
    if (rc < 0) goto oom;
    if (n < 0) {
        rc = an_trace_fail(t);
        goto done;
    }
    off = malloc((sw.n + 1) * sizeof *off);
    if (!off) goto oom;
    size_t n_off = st_cpu_off_intervals(sw.v, sw.n, th->info.start_ns, th->t1_ns, off);
    /* the self-time pieces: between two events, the innermost stage open; the last to t1 */
    st_event_iter *ei;
    if (st_event_iter_open(&ei, r, id)) {
        rc = an_trace_fail(t);
        goto done;
    }
    int32_t stack[ST_MAX_DEPTH];
    uint32_t depth = 0;
    int64_t at = INT64_MIN;
    int32_t cur = -1;
    st_event e;
    for (;;) {
        n = st_event_iter_next(ei, &e);
        if (n < 0) {
            st_event_iter_close(ei);
            rc = an_trace_fail(t);
            goto done;
        }
        int64_t end = n == 1 ? e.ts_ns : INT64_MAX;
        int64_t a = at > th->t0_ns ? at : th->t0_ns, b = end < th->t1_ns ? end : th->t1_ns;
        if (b > a) {
            st_cpu_range *p = vec_push(&pieces, sizeof *p);
            int32_t *ps = vec_push(&piece_stage, sizeof *ps);
            if (!p || !ps) {
                st_event_iter_close(ei);
                goto oom;
            }
            *p = (st_cpu_range){a, b};
            *ps = cur;
        }
        if (n == 0) break;
        if (e.depth < ST_MAX_DEPTH) {
            if (!e.is_end) {
                stack[e.depth] = (int32_t)e.stage;
                depth = e.depth + 1;
            } else {
                depth = e.depth;
            }
        }
        at = e.ts_ns;
        cur = depth ? stack[depth - 1] : -1;
    }
    st_event_iter_close(ei);
    share = malloc((pieces.n ? pieces.n : 1) * sizeof *share);
    if (!share) goto oom;
    st_cpu_account(off, n_off, pieces.v, pieces.n, share);
    for (size_t i = 0; i < pieces.n; i++) {
        int32_t s = ((int32_t *)piece_stage.v)[i];
        an_cpu_cell *c = &th->cells[s < 0 || (uint32_t)s >= ns ? 0 : s + 1];
        const st_cpu_range *p = &((st_cpu_range *)pieces.v)[i];
        c->wall_ns += p->t1_ns - p->t0_ns;
        c->on_ns += share[i].on_ns;
        c->preempted_ns += share[i].preempted_ns;
        c->blocked_ns += share[i].blocked_ns;
    }
    for (uint32_t s = 0; s <= ns; s++) {
        th->total.wall_ns += th->cells[s].wall_ns;
        th->total.on_ns += th->cells[s].on_ns;
        th->total.preempted_ns += th->cells[s].preempted_ns;
        th->total.blocked_ns += th->cells[s].blocked_ns;
        th->total.samples += th->cells[s].samples;
    }
    goto done;
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
done:
    free(sw.v);
    free(pieces.v);
    free(piece_stage.v);
    free(off);
    free(share);
    return rc;
}

int an_cpu_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out)
{
    memset(out, 0, sizeof *out);
    st_reader *r = t->r;
    uint32_t nt_ = st_reader_n_threads(r);
    out->n_stages = st_reader_n_stages(r);
    out->threads = calloc(nt_ ? nt_ : 1, sizeof *out->threads);
    if (!out->threads) goto oom;
    name_table names = {0};
    stack_cache sc = {0};
    thread_ctx x = {t, out, &names, &sc, NULL, 0, 0};
    int rc = 0;
    for (uint32_t i = 0; i < nt_ && !rc; i++) {
        an_cpu_thread *th = &out->threads[out->n_threads];
        int has = st_reader_cpu_thread(r, st_reader_thread(r, i)->id, &th->info);
        if (has < 0) {
            rc = an_trace_fail(t);
            break;
        }
        if (!has) continue;
        th->thread = i;
        th->total.stage = -1;
        th->cells = calloc(out->n_stages + 1, sizeof *th->cells);
        if (!th->cells) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
            break;
        }
        for (uint32_t s = 0; s <= out->n_stages; s++) th->cells[s].stage = (int32_t)s - 1;
        out->n_threads++;
        /* a thread whose event did not open has no records: no figures rather than 100 % on-CPU */
        if (strcmp(th->info.status, "perf") == 0) rc = thread_compute(&x, th, t0, t1);
    }
    free(names.slot);
    free(sc.slot);
    free(sc.names.v);
    free(x.seen);
    if (rc) an_cpu_free(out);
    return rc;
oom:
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

void an_cpu_free(an_cpu_result *res)
{
    for (uint32_t i = 0; i < res->n_threads; i++) {
        an_cpu_thread *th = &res->threads[i];
        for (uint32_t s = 0; th->cells && s <= res->n_stages; s++) free(th->cells[s].fns);
        free(th->cells);
    }
    free(res->threads);
    for (uint32_t i = 0; i < res->n_names; i++) {
        free(res->names[i].name);
        free(res->names[i].path);
    }
    free(res->names);
    memset(res, 0, sizeof *res);
}

/* ---- the top functions ---- */

typedef struct sort_ctx {
    const an_cpu_result *res;
    int incl;
} sort_ctx;

static int cmp_fn(const void *pa, const void *pb, void *arg)
{
    const sort_ctx *x = arg;
    const an_cpu_result *sort_res = x->res;
    int sort_incl = x->incl;
    const an_cpu_fn *a = *(const an_cpu_fn *const *)pa, *b = *(const an_cpu_fn *const *)pb;
    uint64_t a1 = sort_incl ? a->incl : a->self, b1 = sort_incl ? b->incl : b->self;
    uint64_t a2 = sort_incl ? a->self : a->incl, b2 = sort_incl ? b->self : b->incl;
    if (a1 != b1) return a1 > b1 ? -1 : 1;
    if (a2 != b2) return a2 > b2 ? -1 : 1;
    int c = strcmp(sort_res->names[a->name].name, sort_res->names[b->name].name);
    return c ? c : strcmp(sort_res->names[a->name].path, sort_res->names[b->name].path);
}

uint32_t an_cpu_top(const an_cpu_result *res, const an_cpu_cell *c, int by_inclusive, uint32_t n,
                    const an_cpu_fn **out)
{
    if (!c->n_fns || !n) return 0;
    const an_cpu_fn **all = malloc(c->n_fns * sizeof *all);
    if (!all) return 0;
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_fns; i++)
        if (by_inclusive ? c->fns[i].incl : c->fns[i].self) all[k++] = &c->fns[i];
    sort_ctx x = {res, by_inclusive};
    qsort_r(all, k, sizeof *all, cmp_fn, &x);
    if (k > n) k = n;
    memcpy(out, all, k * sizeof *out);
    free(all);
    return k;
}
