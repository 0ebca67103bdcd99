/* cpu_stacks.c: CPU samples per thread, stage and stack, frames resolved
 * once (cpu_stacks.h). Each thread's samples are read through st_cpu_iter
 * and counted per (stage, stack id) in a hash map; each stack id met is
 * resolved once into frame indices, each distinct (process, address) into
 * one frame named through st_reader_cpu_frame_name, names interned.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "demangle.h"
#include "cpu_stacks.h"

const char *an_cpu_frame_label(const st_cpu_frame *fr, int with_offset, char *buf, size_t size)
{
    if (fr->name[0]) return an_demangle(fr->name);
    if (!fr->path[0]) {
        snprintf(buf, size, "[unknown]");
        return buf;
    }
    const char *base = strrchr(fr->path, '/');
    base = base ? base + 1 : fr->path;
    size_t len = strlen(base);
    if (with_offset && len >= 2 && base[0] == '[' && base[len - 1] == ']') /* [vdso]: [vdso+0xOFF] */
        snprintf(buf, size, "[%.*s+0x%llx]", (int)(len - 2), base + 1, (unsigned long long)fr->file_offset);
    else if (with_offset) snprintf(buf, size, "[%s+0x%llx]", base, (unsigned long long)fr->file_offset);
    else snprintf(buf, size, "[%s]", base);
    return buf;
}

int an_cpu_stacks_require(an_trace *t, const char *cmd, const char *what)
{
    int has = st_reader_has_cpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (has) return AN_EXIT_OK;
    an_error("%s: %s has no CPU capture (record with --trace-cpu / st_options.cpu)%s%s", cmd, t->path,
             what[0] ? ": " : "", what);
    return AN_EXIT_USAGE;
}

/* ---- a map from a pair of 64-bit keys to an index ---- */

typedef struct pair_slot {
    uint64_t a, b;
    uint32_t value; /* + 1; 0 empty */
} pair_slot;

typedef struct pair_map {
    pair_slot *slot;
    size_t cap, n;
} pair_map;

static uint64_t pair_hash(uint64_t a, uint64_t b)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
    return h ^ (h >> 29);
}

/* The slot of (a, b): found (value != 0) or the empty one to fill; NULL out of memory. */
static pair_slot *pair_find(pair_map *m, uint64_t a, uint64_t b)
{
    if (m->n * 2 >= m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        pair_slot *slot = calloc(cap, sizeof *slot);
        if (!slot) return NULL;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slot[i].value) {
                size_t k = pair_hash(m->slot[i].a, m->slot[i].b) & (cap - 1);
                while (slot[k].value) k = (k + 1) & (cap - 1);
                slot[k] = m->slot[i];
            }
        free(m->slot);
        m->slot = slot;
        m->cap = cap;
    }
    size_t k = pair_hash(a, b) & (m->cap - 1);
    for (; m->slot[k].value; k = (k + 1) & (m->cap - 1))
        if (m->slot[k].a == a && m->slot[k].b == b) return &m->slot[k];
    m->slot[k].a = a;
    m->slot[k].b = b;
    return &m->slot[k];
}

static void pair_set(pair_map *m, pair_slot *s, uint32_t value)
{
    s->value = value + 1;
    m->n++;
}

static void pair_clear(pair_map *m)
{
    if (m->slot) memset(m->slot, 0, m->cap * sizeof *m->slot);
    m->n = 0;
}

/* ---- the computation ---- */

typedef struct ctx {
    an_trace *t;
    an_cpu_stacks *s;
    pair_map names;  /* (hash, index) -> index: names compared by string */
    pair_map frames; /* (process, addr) -> frame */
    pair_map stacks; /* (stack, 0) -> the first row that holds it */
    size_t cap_rows, cap_frames, cap_names, cap_stack_frames;
    size_t n_stack_frames;
    uint32_t kind;   /* the rows kept: ST_CPU_ROW_SAMPLE, or ST_CPU_ROW_PY_SAMPLE */
} ctx;

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *p = realloc(*v, c * size);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

static int name_intern(ctx *x, const char *name, uint32_t *out)
{
    an_cpu_stacks *s = x->s;
    uint64_t h = an_hash_name(name);
    /* probe (h, 0), (h, 1), ...: each a distinct name of that hash */
    for (uint64_t k = 0;; k++) {
        pair_slot *sl = pair_find(&x->names, h, k);
        if (!sl) return -1;
        if (sl->value) {
            if (strcmp(s->names[sl->value - 1], name) == 0) {
                *out = sl->value - 1;
                return 0;
            }
            continue;
        }
        if (grow((void **)&s->names, &x->cap_names, (size_t)s->n_names + 1, sizeof *s->names)) return -1;
        char *d = strdup(name);
        if (!d) return -1;
        s->names[s->n_names] = d;
        pair_set(&x->names, sl, s->n_names);
        *out = s->n_names++;
        return 0;
    }
}

/* The frame of (process, addr), resolved when new. 0, -1 out of memory, or an exit code (> 0). */
static int frame_of(ctx *x, uint64_t stack, uint64_t addr, uint32_t *out)
{
    an_cpu_stacks *s = x->s;
    uint32_t process = x->t->is_set ? (uint32_t)(stack >> 32) : 0;
    pair_slot *sl = pair_find(&x->frames, process, addr);
    if (!sl) return -1;
    if (sl->value) {
        *out = sl->value - 1;
        return 0;
    }
    st_cpu_frame fr;
    if (st_reader_cpu_frame_name(x->t->r, stack, addr, &fr) < 0) return an_trace_fail(x->t);
    char buf[600];
    an_cpu_sframe f = {addr, stack, process, 0, 0, fr.map, 0};
    if (name_intern(x, an_cpu_frame_label(&fr, 1, buf, sizeof buf), &f.name) || name_intern(x, fr.path, &f.path))
        return -1;
    f.raw_name = f.name;
    if (fr.name[0] && strcmp(fr.name, s->names[f.name]) != 0 && name_intern(x, fr.name, &f.raw_name)) return -1;
    if (grow((void **)&s->frames, &x->cap_frames, (size_t)s->n_frames + 1, sizeof *s->frames)) return -1;
    s->frames[s->n_frames] = f;
    pair_set(&x->frames, sl, s->n_frames);
    *out = s->n_frames++;
    return 0;
}

/* Fills row's frames: from an earlier row of the same stack, or resolved. */
static int row_frames(ctx *x, an_cpu_srow *row, size_t row_index)
{
    an_cpu_stacks *s = x->s;
    pair_slot *sl = pair_find(&x->stacks, row->stack, 0);
    if (!sl) return -1;
    if (sl->value) {
        const an_cpu_srow *first = &s->rows[sl->value - 1];
        row->frames_off = first->frames_off;
        row->n_frames = first->n_frames;
        return 0;
    }
    pair_set(&x->stacks, sl, (uint32_t)row_index);
    const uint64_t *addrs;
    uint32_t n;
    if (st_reader_cpu_stack(x->t->r, row->stack, &addrs, &n)) return an_trace_fail(x->t);
    if (x->n_stack_frames + n > UINT32_MAX) return -1;
    if (grow((void **)&s->stack_frames, &x->cap_stack_frames, x->n_stack_frames + n, sizeof *s->stack_frames))
        return -1;
    row->frames_off = (uint32_t)x->n_stack_frames;
    row->n_frames = n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = 0;
        int rc = frame_of(x, row->stack, addrs[i], &f);
        if (rc) return rc;
        s->stack_frames[x->n_stack_frames++] = f;
    }
    return 0;
}

static int cmp_row(const void *pa, const void *pb)
{
    const an_cpu_srow *a = pa, *b = pb;
    if (a->stage != b->stage) return a->stage < b->stage ? -1 : 1;
    return a->stack < b->stack ? -1 : a->stack > b->stack;
}

/* One thread's samples into rows (sorted by stage, then stack). */
static int thread_rows(ctx *x, pair_map *cells, uint32_t index, const st_cpu_thread_info *info, int64_t t0, int64_t t1)
{
    an_cpu_stacks *s = x->s;
    st_reader *r = x->t->r;
    if (t0 < info->start_ns) t0 = info->start_ns;
    if (t1 <= t0) return 0;
    uint32_t ns = st_reader_n_stages(r);
    size_t first = s->n_rows;
    st_cpu_iter *it;
    if (st_cpu_iter_open(&it, r, st_reader_thread(r, index)->id, t0, t1)) return an_trace_fail(x->t);
    pair_clear(cells);
    st_cpu_row row;
    int n, rc = 0;
    while ((n = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != x->kind || row.ts_ns < t0 || row.ts_ns >= t1) continue;
        int32_t stage = row.stage < 0 || (uint32_t)row.stage >= ns ? -1 : row.stage;
        pair_slot *sl = pair_find(cells, (uint64_t)(int64_t)stage, row.stack);
        if (!sl) {
            rc = -1;
            break;
        }
        if (!sl->value) {
            if (s->n_rows - first >= UINT32_MAX - 1 ||
                grow((void **)&s->rows, &x->cap_rows, s->n_rows + 1, sizeof *s->rows)) {
                rc = -1;
                break;
            }
            s->rows[s->n_rows] = (an_cpu_srow){index, stage, row.stack, 0, 0, 0, 0};
            pair_set(cells, sl, (uint32_t)(s->n_rows - first));
            s->n_rows++;
        }
        an_cpu_srow *w = &s->rows[first + sl->value - 1];
        w->samples++;
        int64_t period = info->period_ns > 0 ? info->period_ns : 0; /* a hostile row: no time */
        if (__builtin_add_overflow(w->cpu_ns, period, &w->cpu_ns)) w->cpu_ns = INT64_MAX;
        s->samples++;
    }
    st_cpu_iter_close(it);
    if (rc) return rc;
    if (n < 0) return an_trace_fail(x->t);
    if (s->n_rows - first) qsort(s->rows + first, s->n_rows - first, sizeof *s->rows, cmp_row);
    for (size_t i = first; i < s->n_rows; i++)
        if ((rc = row_frames(x, &s->rows[i], i))) return rc;
    return 0;
}

static int compute(an_trace *t, int64_t t0, int64_t t1, uint32_t kind, an_cpu_stacks *out)
{
    memset(out, 0, sizeof *out);
    ctx x;
    memset(&x, 0, sizeof x);
    x.t = t;
    x.s = out;
    x.kind = kind;
    /* a Python-frame sample stands for 1 / python_frames_hz s of wall time */
    int64_t py_period = 0;
    const char *hz_text = an_trace_meta(t, "python_frames_hz");
    double hz = hz_text ? strtod(hz_text, NULL) : 0.0;
    if (hz >= 1.0 && hz <= 1e6) py_period = (int64_t)(1e9 / hz);
    pair_map cells = {0};
    st_reader *r = t->r;
    int rc = 0;
    for (uint32_t i = 0, n = st_reader_n_threads(r); i < n && !rc; i++) {
        st_cpu_thread_info info;
        int has = st_reader_cpu_thread(r, st_reader_thread(r, i)->id, &info);
        if (has < 0) {
            rc = an_trace_fail(t);
            break;
        }
        if (!has) continue;
        if (kind == ST_CPU_ROW_PY_SAMPLE) {
            info.period_ns = py_period;
            out->period_ns = py_period;
            rc = thread_rows(&x, &cells, i, &info, t0, t1);
            continue;
        }
        /* a thread whose event did not open has no records; the signal sampler's (timer) has samples */
        if (!an_cpu_status_has_samples(&info)) continue;
        if (!out->period_ns) out->period_ns = info.period_ns;
        else if (info.period_ns != out->period_ns) out->mixed_periods = 1;
        rc = thread_rows(&x, &cells, i, &info, t0, t1);
    }
    free(cells.slot);
    free(x.names.slot);
    free(x.frames.slot);
    free(x.stacks.slot);
    if (rc < 0) {
        an_error("out of memory");
        rc = AN_EXIT_FAIL;
    }
    if (rc) an_cpu_stacks_free(out);
    return rc;
}

const char *an_cpu_py_file(const char *name)
{
    if (strncmp(name, "py::", 4) != 0) return "";
    const char *colon = strchr(name + 4, ':');
    return colon ? colon + 1 : "";
}

int an_cpu_stacks_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *out)
{
    return compute(t, t0, t1, ST_CPU_ROW_SAMPLE, out);
}

int an_cpu_stacks_compute_both(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *native, an_cpu_stacks *py)
{
    int rc = an_cpu_stacks_compute(t, t0, t1, native);
    if (rc) return rc;
    if ((rc = an_cpu_stacks_compute_python(t, t0, t1, py))) an_cpu_stacks_free(native);
    return rc;
}

int an_cpu_stacks_compute_python(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *out)
{
    return compute(t, t0, t1, ST_CPU_ROW_PY_SAMPLE, out);
}

void an_cpu_stacks_free(an_cpu_stacks *s)
{
    for (uint32_t i = 0; i < s->n_names; i++) free(s->names[i]);
    free(s->names);
    free(s->rows);
    free(s->stack_frames);
    free(s->frames);
    memset(s, 0, sizeof *s);
}
