/* cpu.c: the figures of `analyze cpu` (cpu.h; docs/analyze.md, "cpu"), from
 * the reader's CPU records (st_cpu_iter), stacks and frame names. Per
 * thread with a cpu_threads row: its innermost-stage timeline from its
 * events cut into self-time pieces, each piece's on/off-CPU split by the
 * capture layer's own accounting (st_cpu_account over st_cpu_off_intervals,
 * in the reader API), the samples counted per stage and their frames named
 * once per stack, with their libraries (the frames' mapping files);
 * each blocked off-CPU interval given the reason of the cpu_blocks row of
 * its switch-out time. Apart, cpu_windows per OS thread and window.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_stacks.h"


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
    uint32_t loff, ln; /* its distinct libraries, the leaf's first */
} stack_ent;

typedef struct stack_cache {
    stack_ent *slot;
    uint32_t cap, n;
    an_vec names; /* uint32_t */
    an_vec libs;  /* uint32_t */
    an_vec srcs;  /* uint32_t, beside names (with lines): each frame's source line + 1, 0 none */
} stack_cache;

/* ---- strings interned by a linear search: reasons and libraries are few ---- */

static int str_intern(char ***v, uint32_t *n, uint32_t *cap, const char *s, uint32_t *out)
{
    for (uint32_t i = 0; i < *n; i++)
        if (strcmp((*v)[i], s) == 0) {
            *out = i;
            return 0;
        }
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 16;
        char **x = realloc(*v, c * sizeof *x);
        if (!x) return -1;
        *v = x;
        *cap = c;
    }
    if (!((*v)[*n] = strdup(s))) return -1;
    *out = (*n)++;
    return 0;
}

/* The library of a name (its file; "[unknown]" for none), once per name. */
static int name_lib(an_cpu_result *res, uint32_t name, uint32_t *out)
{
    if (name >= res->cap_name_lib_) {
        uint32_t cap = res->cap_name_lib_ ? res->cap_name_lib_ : 256;
        while (cap <= name) cap *= 2;
        uint32_t *v = realloc(res->name_lib, cap * sizeof *v);
        if (!v) return -1;
        memset(v + res->cap_name_lib_, 0, (cap - res->cap_name_lib_) * sizeof *v);
        res->name_lib = v;
        res->cap_name_lib_ = cap;
    }
    if (!res->name_lib[name]) {
        const char *path = res->names[name].path;
        uint32_t lib;
        if (str_intern(&res->libs, &res->n_libs, &res->cap_libs_, path[0] ? path : "[unknown]", &lib)) return -1;
        res->name_lib[name] = lib + 1;
    }
    *out = res->name_lib[name] - 1;
    return 0;
}

/* The name indices of a stack's frames, innermost first, and its distinct
 * libraries (the leaf's first; "[unknown]" alone for a stack of no frame).
 * 0, or an exit code. */
/* A frame's source line in its function's own code: the outermost
 * cpu_lines row of the address (the out-of-line function's line, where
 * the inlined ones were called), "FILE:LINE" interned; 0: none. */
static int frame_src(an_trace *t, an_cpu_result *res, uint64_t stack, uint64_t addr, uint32_t *out)
{
    *out = 0;
    const st_cpu_line *lines;
    uint32_t n;
    int has = st_reader_cpu_frame_lines(t->r, stack, addr, &lines, &n);
    if (has < 0) return an_trace_fail(t);
    if (!has || !lines[n - 1].file[0] || lines[n - 1].line <= 0) return 0;
    char buf[4200];
    snprintf(buf, sizeof buf, "%s:%lld", lines[n - 1].file, (long long)lines[n - 1].line);
    uint32_t id;
    if (str_intern(&res->srcs, &res->n_srcs, &res->cap_srcs_, buf, &id)) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    *out = id + 1;
    return 0;
}

static int stack_names(an_trace *t, an_cpu_result *res, name_table *nt, stack_cache *sc, uint64_t id,
                       const uint32_t **names, uint32_t *n, const uint32_t **libs, uint32_t *n_libs,
                       const uint32_t **srcs)
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
            *srcs = res->lines ? (const uint32_t *)sc->srcs.v + sc->slot[k].off : NULL;
            *n = sc->slot[k].n;
            *libs = (const uint32_t *)sc->libs.v + sc->slot[k].loff;
            *n_libs = sc->slot[k].ln;
            return 0;
        }
    const uint64_t *frames;
    uint32_t nf;
    if (st_reader_cpu_stack(t->r, id, &frames, &nf)) return an_trace_fail(t);
    stack_ent e = {id, (uint32_t)sc->names.n, nf, 1, (uint32_t)sc->libs.n, 0};
    for (uint32_t i = 0; i < nf; i++) {
        st_cpu_frame fr;
        if (st_reader_cpu_frame_name(t->r, id, frames[i], &fr) < 0) return an_trace_fail(t);
        char label[512];
        const char *name = an_cpu_frame_label(&fr, 0, label, sizeof label);
        uint32_t *slot = an_vec_push(&sc->names, sizeof *slot);
        if (!slot || name_intern(res, nt, name, fr.path, slot)) goto oom;
        if (res->lines) {
            uint32_t *src = an_vec_push(&sc->srcs, sizeof *src);
            if (!src) goto oom;
            int rc = frame_src(t, res, id, frames[i], src);
            if (rc) return rc;
        }
        uint32_t lib;
        if (name_lib(res, *slot, &lib)) goto oom;
        int seen = 0;
        for (uint32_t j = 0; j < e.ln && !seen; j++) seen = ((uint32_t *)sc->libs.v)[e.loff + j] == lib;
        if (seen) continue;
        uint32_t *l = an_vec_push(&sc->libs, sizeof *l);
        if (!l) goto oom;
        *l = lib;
        e.ln++;
    }
    if (!nf) {
        uint32_t lib, *l;
        if (str_intern(&res->libs, &res->n_libs, &res->cap_libs_, "[unknown]", &lib) ||
            !(l = an_vec_push(&sc->libs, sizeof *l)))
            goto oom;
        *l = lib;
        e.ln = 1;
    }
    sc->slot[k] = e;
    sc->n++;
    *names = (const uint32_t *)sc->names.v + e.off;
    *srcs = res->lines ? (const uint32_t *)sc->srcs.v + e.off : NULL;
    *n = e.n;
    *libs = (const uint32_t *)sc->libs.v + e.loff;
    *n_libs = e.ln;
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
    *f = (an_cpu_fn){name, 0, 0, 0, 0};
    return f;
}

static an_cpu_fnline *cell_fnline(an_cpu_cell *c, uint32_t name, uint32_t src)
{
    for (uint32_t i = c->n_fnlines; i-- > 0;)
        if (c->fnlines[i].name == name && c->fnlines[i].src == src) return &c->fnlines[i];
    if (c->n_fnlines == c->cap_fnlines) {
        uint32_t cap = c->cap_fnlines ? c->cap_fnlines * 2 : 16;
        an_cpu_fnline *v = realloc(c->fnlines, cap * sizeof *v);
        if (!v) return NULL;
        c->fnlines = v;
        c->cap_fnlines = cap;
    }
    an_cpu_fnline *f = &c->fnlines[c->n_fnlines++];
    *f = (an_cpu_fnline){name, src, 0, 0};
    return f;
}

static an_cpu_lib *cell_lib(an_cpu_cell *c, uint32_t lib)
{
    for (uint32_t i = 0; i < c->n_libs; i++)
        if (c->libs[i].lib == lib) return &c->libs[i];
    if (c->n_libs == c->cap_libs) {
        uint32_t cap = c->cap_libs ? c->cap_libs * 2 : 8;
        an_cpu_lib *v = realloc(c->libs, cap * sizeof *v);
        if (!v) return NULL;
        c->libs = v;
        c->cap_libs = cap;
    }
    an_cpu_lib *l = &c->libs[c->n_libs++];
    *l = (an_cpu_lib){lib, 0, 0};
    return l;
}

static an_cpu_reason_ns *cell_reason(an_cpu_cell *c, uint32_t reason, int state, uint32_t kfn)
{
    for (uint32_t i = 0; i < c->n_reasons; i++)
        if (c->reasons[i].reason == reason && c->reasons[i].state == state && c->reasons[i].kfn == kfn)
            return &c->reasons[i];
    if (c->n_reasons == c->cap_reasons) {
        uint32_t cap = c->cap_reasons ? c->cap_reasons * 2 : 4;
        an_cpu_reason_ns *v = realloc(c->reasons, cap * sizeof *v);
        if (!v) return NULL;
        c->reasons = v;
        c->cap_reasons = cap;
    }
    an_cpu_reason_ns *x = &c->reasons[c->n_reasons++];
    *x = (an_cpu_reason_ns){reason, state, kfn, 0, 0, 0};
    return x;
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
    const uint32_t *names = NULL, *libs = NULL, *srcs = NULL;
    uint32_t n = 0, n_libs = 0;
    int rc = stack_names(x->t, x->res, x->nt, x->sc, stack, &names, &n, &libs, &n_libs, &srcs);
    if (rc) return rc;
    for (uint32_t i = 0; i < n_libs; i++) {
        an_cpu_lib *l = cell_lib(c, libs[i]);
        if (!l) goto oom;
        l->self += i == 0;
        l->incl++;
    }
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
        an_cpu_fnline *fl = srcs && srcs[i] ? cell_fnline(c, names[i], srcs[i]) : NULL;
        if (srcs && srcs[i] && !fl) goto oom;
        if (i == 0) {
            f->self++;
            if (fl) fl->self++;
        }
        if (x->seen[names[i]] != mark) {
            x->seen[names[i]] = mark;
            f->incl++;
            if (fl) fl->incl++;
        }
    }
    return 0;
oom:
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static void reason_label(const st_cpu_block_row *b, char *buf, size_t size)
{
    const char *name = b->name[0] ? b->name : "(no syscall)";
    if (b->wchan[0]) snprintf(buf, size, "%s:%s", name, b->wchan);
    else snprintf(buf, size, "%s", name);
}

/* Each blocked interval's reason (an index of res->reasons; 0 unexamined):
 * that of the cpu_blocks row whose t_ns is the interval's start (its
 * switch-out); the first such row when several are. 0, or an exit code. */
static int block_reasons(an_trace *t, an_cpu_result *res, uint32_t id, const st_cpu_off *off, size_t n_off,
                         uint32_t *reason_of)
{
    memset(reason_of, 0, (n_off ? n_off : 1) * sizeof *reason_of);
    st_cpu_block_iter *bi;
    if (st_cpu_block_iter_open(&bi, t->r, id, INT64_MIN, INT64_MAX)) return an_trace_fail(t);
    size_t j = 0;
    st_cpu_block_row b;
    int n;
    while ((n = st_cpu_block_iter_next(bi, &b)) == 1) {
        while (j < n_off && off[j].t0_ns < b.t_ns) j++;
        if (j == n_off || off[j].t0_ns != b.t_ns || off[j].preempted || reason_of[j]) continue;
        char label[2 * ST_NAME_MAX + 32];
        reason_label(&b, label, sizeof label);
        if (str_intern(&res->reasons, &res->n_reasons, &res->cap_reasons_, label, &reason_of[j])) {
            st_cpu_block_iter_close(bi);
            an_error("out of memory");
            return AN_EXIT_FAIL;
        }
    }
    st_cpu_block_iter_close(bi);
    return n < 0 ? an_trace_fail(t) : 0;
}

/* A blocked switch-out with its sched_switch sample (kind 9). */
typedef struct sched_out {
    int64_t ts_ns;
    uint64_t stack;
    int state;
    uint32_t kernel_frames;
} sched_out;

/* A scheduler frame, which says nothing of what the thread waits for:
 * schedule(), __schedule(), schedule_timeout(), io_schedule(),
 * schedule_hrtimeout_range(), poll_schedule_timeout() ... (a name holding
 * "schedule"), and the voluntary preemption points __cond_resched,
 * _cond_resched. */
static int scheduler_frame(const char *name)
{
    return strstr(name, "schedule") || strcmp(name, "__cond_resched") == 0 || strcmp(name, "_cond_resched") == 0;
}

/* The kernel function of a sched_switch stack: its first kernel frame,
 * innermost first, that is named and no scheduler frame; an index of
 * res->kfns (0: none). 0, or an exit code. */
static int kernel_function(thread_ctx *x, const sched_out *so, uint32_t *out)
{
    const uint32_t *names = NULL, *libs = NULL, *srcs = NULL;
    uint32_t n = 0, n_libs = 0;
    int rc = stack_names(x->t, x->res, x->nt, x->sc, so->stack, &names, &n, &libs, &n_libs, &srcs);
    if (rc) return rc;
    *out = 0;
    for (uint32_t i = 0; i < so->kernel_frames && i < n; i++) {
        const an_cpu_name *nm = &x->res->names[names[i]];
        if (nm->name[0] == '[' || scheduler_frame(nm->name)) continue; /* "[file]": no symbol */
        if (str_intern(&x->res->kfns, &x->res->n_kfns, &x->res->cap_kfns_, nm->name, out)) {
            an_error("out of memory");
            return AN_EXIT_FAIL;
        }
        break;
    }
    return 0;
}

/* Each blocked interval's state and kernel function: those of the kind-9
 * switch-out at its start. 0, or an exit code. */
static int block_sched(thread_ctx *x, const st_cpu_off *off, size_t n_off, const an_vec *outs, int *state_of,
                       uint32_t *kfn_of)
{
    memset(state_of, 0, (n_off ? n_off : 1) * sizeof *state_of);
    memset(kfn_of, 0, (n_off ? n_off : 1) * sizeof *kfn_of);
    size_t j = 0;
    for (size_t i = 0; i < outs->n; i++) {
        const sched_out *so = &((const sched_out *)outs->v)[i];
        while (j < n_off && off[j].t0_ns < so->ts_ns) j++;
        if (j == n_off) break;
        if (off[j].t0_ns != so->ts_ns || off[j].preempted) continue;
        state_of[j] = so->state;
        int rc = kernel_function(x, so, &kfn_of[j]);
        if (rc) return rc;
    }
    return 0;
}

/* A thread without the kernel's samples (its perf event and the signal
 * sampler refused) may still have Python-frame samples: those alone. */
static int thread_python_only(thread_ctx *x, an_cpu_thread *th, int64_t t0, int64_t t1)
{
    uint32_t ns = x->res->n_stages;
    th->t0_ns = t0 > th->info.start_ns ? t0 : th->info.start_ns;
    th->t1_ns = t1 > th->t0_ns ? t1 : th->t0_ns;
    st_cpu_iter *it;
    if (st_cpu_iter_open(&it, x->t->r, st_reader_thread(x->t->r, th->thread)->id, th->t0_ns, th->t1_ns))
        return an_trace_fail(x->t);
    st_cpu_row row;
    int n, rc = 0;
    while (!rc && (n = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != ST_CPU_ROW_PY_SAMPLE) continue;
        an_cpu_cell *c = &th->py_cells[row.stage < 0 || (uint32_t)row.stage >= ns ? 0 : row.stage + 1];
        c->samples++;
        th->py_samples++;
        rc = count_sample(x, c, row.stack);
    }
    st_cpu_iter_close(it);
    if (!rc && n < 0) rc = an_trace_fail(x->t);
    return rc;
}

static int thread_compute(thread_ctx *x, an_cpu_thread *th, int64_t t0, int64_t t1)
{
    an_trace *t = x->t;
    st_reader *r = t->r;
    uint32_t id = st_reader_thread(r, th->thread)->id;
    uint32_t ns = x->res->n_stages;
    th->t0_ns = t0 > th->info.start_ns ? t0 : th->info.start_ns;
    th->t1_ns = t1 > th->t0_ns ? t1 : th->t0_ns;
    an_vec sw = {0}, pieces = {0}, piece_stage = {0}, outs = {0};
    st_cpu_off *off = NULL;
    st_cpu_share *share = NULL;
    uint32_t *reason_of = NULL, *kfn_of = NULL;
    int *state_of = NULL;
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
        } else if (row.kind == ST_CPU_ROW_PY_SAMPLE) {
            /* the interpreter's samples: apart, never summed with the kernel's */
            if (row.ts_ns < th->t0_ns || row.ts_ns >= th->t1_ns) continue;
            an_cpu_cell *c = &th->py_cells[row.stage < 0 || (uint32_t)row.stage >= ns ? 0 : row.stage + 1];
            c->samples++;
            th->py_samples++;
            if ((rc = count_sample(x, c, row.stack))) break;
        } else {
            st_cpu_switch *s = an_vec_push(&sw, sizeof *s);
            if (!s) {
                rc = -1;
                break;
            }
            *s = (st_cpu_switch){row.ts_ns, row.kind != ST_CPU_ROW_IN, row.kind == ST_CPU_ROW_OUT_PREEMPTED};
            if (row.kind == ST_CPU_ROW_OUT_BLOCKED && row.state) {
                sched_out *so = an_vec_push(&outs, sizeof *so);
                if (!so) {
                    rc = -1;
                    break;
                }
                *so = (sched_out){row.ts_ns, row.stack, row.state, row.kernel_frames};
            }
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
            st_cpu_range *p = an_vec_push(&pieces, sizeof *p);
            int32_t *ps = an_vec_push(&piece_stage, sizeof *ps);
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
    /* the blocked time by reason: the same overlaps as st_cpu_account's, interval by interval */
    reason_of = malloc((n_off ? n_off : 1) * sizeof *reason_of);
    if (!reason_of) goto oom;
    if ((rc = block_reasons(t, x->res, id, off, n_off, reason_of))) goto done;
    state_of = malloc((n_off ? n_off : 1) * sizeof *state_of);
    kfn_of = malloc((n_off ? n_off : 1) * sizeof *kfn_of);
    if (!state_of || !kfn_of) goto oom;
    if ((rc = block_sched(x, off, n_off, &outs, state_of, kfn_of))) goto done;
    for (size_t i = 0, j = 0; i < pieces.n; i++) {
        int32_t s = ((int32_t *)piece_stage.v)[i];
        an_cpu_cell *c = &th->cells[s < 0 || (uint32_t)s >= ns ? 0 : s + 1];
        const st_cpu_range *p = &((st_cpu_range *)pieces.v)[i];
        while (j < n_off && off[j].t1_ns <= p->t0_ns) j++;
        for (size_t k = j; k < n_off && off[k].t0_ns < p->t1_ns; k++) {
            int64_t a = off[k].t0_ns > p->t0_ns ? off[k].t0_ns : p->t0_ns;
            int64_t b = off[k].t1_ns < p->t1_ns ? off[k].t1_ns : p->t1_ns;
            if (off[k].preempted || b <= a) continue;
            an_cpu_reason_ns *rn = cell_reason(c, reason_of[k], state_of[k], kfn_of[k]);
            if (!rn) goto oom;
            if (c->n_reasons > x->res->max_cell_reasons) x->res->max_cell_reasons = c->n_reasons;
            rn->ns += b - a;
            if (rn->last_interval != k + 1) {
                rn->last_interval = k + 1;
                rn->count++;
            }
        }
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
    free(reason_of);
    free(state_of);
    free(kfn_of);
    free(outs.v);
    return rc;
}

static int compute(an_trace *t, int64_t t0, int64_t t1, int lines, an_cpu_result *out);

int an_cpu_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out)
{
    return compute(t, t0, t1, 0, out);
}

/* Each function's line: the one holding most of its samples, on a tie
 * the one interned first (the lower src). */
static int beats(uint64_t a, uint32_t a_src, uint64_t b, uint32_t b_src)
{
    return a > b || (a == b && a_src < b_src);
}

static void pick_lines(an_cpu_result *res)
{
    for (uint32_t i = 0; i < res->n_threads; i++)
        for (uint32_t s = 0; s <= res->n_stages; s++) {
            an_cpu_cell *c = &res->threads[i].cells[s];
            for (uint32_t k = 0; k < c->n_fnlines; k++) {
                const an_cpu_fnline *l = &c->fnlines[k];
                int best_self = l->self > 0, best_incl = l->incl > 0;
                for (uint32_t j = 0; j < c->n_fnlines && (best_self || best_incl); j++) {
                    const an_cpu_fnline *o = &c->fnlines[j];
                    if (j == k || o->name != l->name) continue;
                    if (beats(o->self, o->src, l->self, l->src)) best_self = 0;
                    if (beats(o->incl, o->src, l->incl, l->src)) best_incl = 0;
                }
                if (!best_self && !best_incl) continue;
                an_cpu_fn *f = cell_fn(c, l->name); /* there: counted with it */
                if (!f) continue;
                if (best_self) f->self_src = l->src;
                if (best_incl) f->incl_src = l->src;
            }
        }
}

int an_cpu_compute_lines(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out)
{
    int rc = compute(t, t0, t1, 1, out);
    if (!rc) pick_lines(out);
    return rc;
}

static int compute(an_trace *t, int64_t t0, int64_t t1, int lines, an_cpu_result *out)
{
    memset(out, 0, sizeof *out);
    out->lines = lines;
    st_reader *r = t->r;
    uint32_t nt_ = st_reader_n_threads(r);
    out->n_stages = st_reader_n_stages(r);
    out->threads = calloc(nt_ ? nt_ : 1, sizeof *out->threads);
    if (!out->threads) goto oom;
    name_table names = {0};
    stack_cache sc = {0};
    thread_ctx x = {t, out, &names, &sc, NULL, 0, 0};
    uint32_t unexamined;
    int rc = 0;
    uint32_t no_kfn;
    if (str_intern(&out->reasons, &out->n_reasons, &out->cap_reasons_, AN_CPU_REASON_UNEXAMINED, &unexamined) ||
        str_intern(&out->kfns, &out->n_kfns, &out->cap_kfns_, "", &no_kfn)) {
        an_cpu_free(out);
        goto oom;
    }
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
        th->py_cells = calloc(out->n_stages + 1, sizeof *th->py_cells);
        if (!th->cells || !th->py_cells) {
            free(th->cells);
            free(th->py_cells);
            th->cells = th->py_cells = NULL;
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
            break;
        }
        for (uint32_t s = 0; s <= out->n_stages; s++) th->cells[s].stage = th->py_cells[s].stage = (int32_t)s - 1;
        out->n_threads++;
        /* a thread whose event did not open has no records: no figures rather than 100 % on-CPU;
         * one the signal sampler took (timer) has samples but no switches: its on/off-CPU split
         * is unknown (-1), not 100 % on */
        th->has_switches = an_cpu_status_has_switches(&th->info);
        th->has_samples = an_cpu_status_has_samples(&th->info);
        if (th->has_samples) rc = thread_compute(&x, th, t0, t1);
        else rc = thread_python_only(&x, th, t0, t1);
        if (!rc && th->has_samples && !th->has_switches)
            for (uint32_t s = 0; s <= out->n_stages + 1; s++) {
                an_cpu_cell *c = s <= out->n_stages ? &th->cells[s] : &th->total;
                c->on_ns = c->preempted_ns = c->blocked_ns = -1;
            }
    }
    free(names.slot);
    free(sc.slot);
    free(sc.names.v);
    free(sc.libs.v);
    free(sc.srcs.v);
    free(x.seen);
    if (rc) an_cpu_free(out);
    return rc;
oom:
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

int an_cpu_status_has_switches(const st_cpu_thread_info *info) { return strcmp(info->status, "perf") == 0; }

int an_cpu_status_has_samples(const st_cpu_thread_info *info)
{
    return an_cpu_status_has_switches(info) || strcmp(info->status, "timer") == 0;
}

void an_cpu_free(an_cpu_result *res)
{
    for (uint32_t i = 0; i < res->n_threads; i++) {
        an_cpu_thread *th = &res->threads[i];
        for (uint32_t s = 0; th->cells && s <= res->n_stages; s++) {
            free(th->cells[s].fns);
            free(th->cells[s].reasons);
            free(th->cells[s].libs);
            free(th->cells[s].fnlines);
        }
        for (uint32_t s = 0; th->py_cells && s <= res->n_stages; s++) {
            free(th->py_cells[s].fns);
            free(th->py_cells[s].reasons);
            free(th->py_cells[s].libs);
            free(th->py_cells[s].fnlines);
        }
        free(th->cells);
        free(th->py_cells);
    }
    free(res->threads);
    for (uint32_t i = 0; i < res->n_names; i++) {
        free(res->names[i].name);
        free(res->names[i].path);
    }
    free(res->names);
    for (uint32_t i = 0; i < res->n_srcs; i++) free(res->srcs[i]);
    free(res->srcs);
    for (uint32_t i = 0; i < res->n_reasons; i++) free(res->reasons[i]);
    free(res->reasons);
    for (uint32_t i = 0; i < res->n_kfns; i++) free(res->kfns[i]);
    free(res->kfns);
    for (uint32_t i = 0; i < res->n_libs; i++) free(res->libs[i]);
    free(res->libs);
    free(res->name_lib);
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
    if (k) qsort_r(all, k, sizeof *all, cmp_fn, &x);
    if (k > n) k = n;
    memcpy(out, all, k * sizeof *out);
    free(all);
    return k;
}

/* ---- block reasons and libraries, sorted ---- */

static int cmp_reason(const void *pa, const void *pb, void *arg)
{
    const an_cpu_result *res = arg;
    const an_cpu_reason_ns *a = *(const an_cpu_reason_ns *const *)pa, *b = *(const an_cpu_reason_ns *const *)pb;
    if (a->ns != b->ns) return a->ns > b->ns ? -1 : 1;
    int c = strcmp(res->reasons[a->reason], res->reasons[b->reason]);
    if (c) return c;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    return strcmp(res->kfns[a->kfn], res->kfns[b->kfn]);
}

uint32_t an_cpu_reasons_sorted(const an_cpu_result *res, const an_cpu_cell *c, const an_cpu_reason_ns **out)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_reasons; i++)
        if (c->reasons[i].ns > 0) out[k++] = &c->reasons[i];
    if (k) qsort_r(out, k, sizeof *out, cmp_reason, (void *)res);
    return k;
}

static int cmp_lib(const void *pa, const void *pb, void *arg)
{
    const an_cpu_result *res = arg;
    const an_cpu_lib *a = *(const an_cpu_lib *const *)pa, *b = *(const an_cpu_lib *const *)pb;
    if (a->self != b->self) return a->self > b->self ? -1 : 1;
    if (a->incl != b->incl) return a->incl > b->incl ? -1 : 1;
    return strcmp(res->libs[a->lib], res->libs[b->lib]);
}

uint32_t an_cpu_top_libs(const an_cpu_result *res, const an_cpu_cell *c, uint32_t n, const an_cpu_lib **out)
{
    if (!c->n_libs || !n) return 0;
    const an_cpu_lib **all = malloc(c->n_libs * sizeof *all);
    if (!all) return 0;
    for (uint32_t i = 0; i < c->n_libs; i++) all[i] = &c->libs[i];
    if (c->n_libs) qsort_r(all, c->n_libs, sizeof *all, cmp_lib, (void *)res);
    uint32_t k = c->n_libs < n ? c->n_libs : n;
    memcpy(out, all, k * sizeof *out);
    free(all);
    return k;
}

/* ---- every OS thread per window (cpu_windows) ---- */

void an_cpu_windows_free(an_cpu_windows *w)
{
    for (uint32_t i = 0; i < w->n_threads; i++) free(w->threads[i].name);
    free(w->threads);
    free(w->rows);
    memset(w, 0, sizeof *w);
}

static int cmp_os_thread(const void *pa, const void *pb)
{
    const an_cpu_os_thread *a = pa, *b = pb;
    if (a->oncpu_ns != b->oncpu_ns) return a->oncpu_ns > b->oncpu_ns ? -1 : 1;
    int c = strcmp(a->name, b->name);
    if (c) return c;
    if (a->part != b->part) return a->part < b->part ? -1 : 1;
    return (a->os_tid > b->os_tid) - (a->os_tid < b->os_tid);
}

static int cmp_window_row(const void *pa, const void *pb, void *arg)
{
    const an_cpu_os_thread *th = arg;
    const an_cpu_window *a = pa, *b = pb;
    if (a->part != b->part) return a->part < b->part ? -1 : 1;
    if (a->window != b->window) return a->window < b->window ? -1 : 1;
    if (a->oncpu_ns != b->oncpu_ns) return a->oncpu_ns > b->oncpu_ns ? -1 : 1;
    return (th[a->os_thread].os_tid > th[b->os_thread].os_tid) - (th[a->os_thread].os_tid < th[b->os_thread].os_tid);
}

int an_cpu_windows_compute(an_trace *t, int whole, int64_t t0, int64_t t1, an_cpu_windows *out)
{
    memset(out, 0, sizeof *out);
    st_reader *r = t->r;
    st_cpu_window_iter *it;
    if (st_cpu_window_iter_open(&it, r)) return an_trace_fail(t);
    size_t cap_rows = 0;
    uint32_t cap_threads = 0, n_parts = st_reader_n_parts(r) ? st_reader_n_parts(r) : 1;
    int64_t *part_wall = calloc(n_parts, sizeof *part_wall);
    int64_t last_window = -1;
    uint32_t last_part = UINT32_MAX;
    st_cpu_window_row w;
    int n, rc = 0;
    if (!part_wall) goto oom;
    while ((n = st_cpu_window_iter_next(it, &w)) == 1) {
        if (w.part >= n_parts) continue;
        int64_t mid = w.t0_ns + (w.t1_ns - w.t0_ns) / 2;
        if (!whole && (mid < t0 || mid >= t1)) continue;
        if (w.part != last_part || w.window != last_window) {
            /* a window's rows share its two reads (t0, t1 of its first row) */
            part_wall[w.part] += w.t1_ns - w.t0_ns;
            out->n_windows++;
            last_part = w.part;
            last_window = w.window;
        }
        uint32_t k = 0;
        while (k < out->n_threads && !(out->threads[k].part == w.part && out->threads[k].os_tid == w.os_tid)) k++;
        if (k == out->n_threads) {
            if (out->n_threads == cap_threads) {
                cap_threads = cap_threads ? cap_threads * 2 : 32;
                an_cpu_os_thread *v = realloc(out->threads, cap_threads * sizeof *v);
                if (!v) goto oom;
                out->threads = v;
            }
            an_cpu_os_thread *th = &out->threads[out->n_threads];
            memset(th, 0, sizeof *th);
            const st_thread_info *ti = w.thread >= 0 ? st_reader_thread_by_id(r, (uint32_t)w.thread) : NULL;
            char name[2 * ST_NAME_MAX + 32];
            if (ti) snprintf(name, sizeof name, "%s", ti->name);
            else if (w.rank >= 0) snprintf(name, sizeof name, "r%d/%s", w.rank, w.name);
            else snprintf(name, sizeof name, "%s", w.name);
            if (!(th->name = strdup(name))) goto oom;
            th->os_tid = w.os_tid;
            th->thread = ti ? w.thread : -1;
            th->part = w.part;
            out->n_threads++;
        }
        an_cpu_os_thread *th = &out->threads[k];
        /* a thread seen before it registered (the writer's first scan at open) has thread -1 in
         * its first rows: a later row's registration names it */
        const st_thread_info *reg = th->thread < 0 && w.thread >= 0 ? st_reader_thread_by_id(r, (uint32_t)w.thread) : NULL;
        if (reg) {
            char *name = strdup(reg->name);
            if (!name) goto oom;
            free(th->name);
            th->name = name;
            th->thread = w.thread;
        }
        th->oncpu_ns += w.oncpu_ns;
        th->runq_ns += w.runq_ns;
        th->slices += w.slices;
        th->n_windows++;
        if (out->n_rows == cap_rows) {
            cap_rows = cap_rows ? cap_rows * 2 : 256;
            an_cpu_window *v = realloc(out->rows, cap_rows * sizeof *v);
            if (!v) goto oom;
            out->rows = v;
        }
        out->rows[out->n_rows++] = (an_cpu_window){w.window, w.step, w.t0_ns, w.t1_ns, w.part, k,
                                                   w.oncpu_ns, w.runq_ns, w.slices};
    }
    if (n < 0) {
        rc = an_trace_fail(t);
        goto fail;
    }
    st_cpu_window_iter_close(it);
    it = NULL;
    for (uint32_t k = 0; k < out->n_threads; k++) out->threads[k].wall_ns = part_wall[out->threads[k].part];
    /* sort the rows by thread index first, then renumber after sorting the threads */
    if (out->n_rows) qsort_r(out->rows, out->n_rows, sizeof *out->rows, cmp_window_row, out->threads);
    uint32_t *order = malloc((out->n_threads ? out->n_threads : 1) * sizeof *order);
    an_cpu_os_thread *sorted = malloc((out->n_threads ? out->n_threads : 1) * sizeof *sorted);
    if (!order || !sorted) {
        free(order);
        free(sorted);
        goto oom;
    }
    if (out->n_threads) memcpy(sorted, out->threads, out->n_threads * sizeof *sorted);
    if (out->n_threads) qsort(sorted, out->n_threads, sizeof *sorted, cmp_os_thread);
    for (uint32_t k = 0; k < out->n_threads; k++)
        for (uint32_t j = 0; j < out->n_threads; j++)
            if (out->threads[j].part == sorted[k].part && out->threads[j].os_tid == sorted[k].os_tid) order[j] = k;
    for (size_t i = 0; i < out->n_rows; i++) out->rows[i].os_thread = order[out->rows[i].os_thread];
    free(out->threads);
    out->threads = sorted;
    free(order);
    free(part_wall);
    return 0;
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
fail:
    st_cpu_window_iter_close(it);
    free(part_wall);
    an_cpu_windows_free(out);
    return rc;
}
