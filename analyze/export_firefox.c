/* export_firefox.c: `analyze export --firefox OUT.json`: ranges and CPU
 * samples on one timeline, as a Firefox Profiler "processed profile"
 * (meta.preprocessedProfileVersion 65; docs/analyze.md, "export"), which
 * the Firefox Profiler (profiler.firefox.com) opens and Perfetto's UI
 * imports with both its samples and its markers. (Perfetto reads the
 * markers of the processed format only, not of the older Gecko format, and
 * reads the stack table's `prefix` column, which version 66 replaced: so 65.)
 *
 * One thread entry per trace thread: its samples (the CPU chunks' samples in
 * the analysed time, each a stack of the shared stack table whose root is a
 * frame "stage:NAME" for the stage open at the sample, then the sampled
 * frames outermost first, named as `analyze cpu` names them) and its
 * markers (each range an interval marker named after its stage, category =
 * the stage's kind; an unended range an interval start; step marks instant
 * markers on the main thread). The tables are columns, so each column is
 * written by its own pass over the thread's records (two over the CPU
 * records, six over the range events; with Python-frame samples one more
 * to count them and two for their entry): memory holds the interned stacks,
 * frames and strings, never a thread's records. Threads come first, then the
 * shared tables they index (stacks, frames, functions, strings), which are
 * complete only once every thread is written. A thread with Python-frame
 * samples (python_stacks 'frames') in the analysed time has a second entry
 * after its own, "NAME (Python)", holding those samples alone (same stage
 * roots, frames "py::QUALNAME:FILE"; no markers): the interpreter's
 * wall-time samples beside the kernel's CPU-time ones, never in one track.
 * One of the converters under cmd_export.c (export.h).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "cpu_stacks.h"
#include "export.h"

#define PROCESSED_VERSION 65
#define GECKO_VERSION 34 /* meta.version: the Gecko format of the same profiler release */

/* Marker phases of the format. */
enum { PHASE_INSTANT = 0, PHASE_INTERVAL = 1, PHASE_INTERVAL_START = 2 };

/* Categories (meta.categories): 0 the default ("Other", grey), 1 + kind for
 * each stage kind, then the step marks. */
#define CAT_OTHER 0
#define CAT_STEP (1 + ST_KIND_COUNT)
static const char *const kind_names[ST_KIND_COUNT] = {"work", "wait_input", "wait_output", "sync", "comm", "copy"};
static const char *const kind_colors[ST_KIND_COUNT] = {"blue", "yellow", "orange", "red", "purple", "green"};

/* ---- growable arrays and a map of key pairs ---- */

static int grow(void **v, uint32_t *cap, uint32_t n, size_t size)
{
    if (n < *cap) return 0;
    if (*cap >= UINT32_MAX / 2) return -1;
    uint32_t c = *cap ? *cap * 2 : 256;
    void *p = realloc(*v, (size_t)c * size);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

typedef struct pair_slot {
    uint64_t a, b;
    uint32_t value; /* + 1; 0: empty */
} pair_slot;

typedef struct pair_map {
    pair_slot *slot;
    uint32_t cap, n;
} pair_map;

static uint64_t pair_hash(uint64_t a, uint64_t b)
{
    uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
    return h * 0xBF58476D1CE4E5B9ull;
}

/* The value of (a, b): 1 found, 0 absent. */
static int pair_find(const pair_map *m, uint64_t a, uint64_t b, uint32_t *out)
{
    if (!m->cap) return 0;
    for (uint64_t k = pair_hash(a, b) & (m->cap - 1); m->slot[k].value; k = (k + 1) & (m->cap - 1))
        if (m->slot[k].a == a && m->slot[k].b == b) {
            *out = m->slot[k].value - 1;
            return 1;
        }
    return 0;
}

/* The value of (a, b), or when absent, value `fresh` stored for it (*added 1). 0 or -1. */
static int pair_get(pair_map *m, uint64_t a, uint64_t b, uint32_t fresh, uint32_t *out, int *added)
{
    if ((m->n + 1) * 2 > m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 1024;
        if (cap < m->cap) return -1;
        pair_slot *s = calloc(cap, sizeof *s);
        if (!s) return -1;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->slot[i].value) {
                uint64_t k = pair_hash(m->slot[i].a, m->slot[i].b) & (cap - 1);
                while (s[k].value) k = (k + 1) & (cap - 1);
                s[k] = m->slot[i];
            }
        free(m->slot);
        m->slot = s;
        m->cap = cap;
    }
    uint64_t k = pair_hash(a, b) & (m->cap - 1);
    for (; m->slot[k].value; k = (k + 1) & (m->cap - 1))
        if (m->slot[k].a == a && m->slot[k].b == b) {
            *out = m->slot[k].value - 1;
            *added = 0;
            return 0;
        }
    m->slot[k] = (pair_slot){a, b, fresh + 1};
    m->n++;
    *out = fresh;
    *added = 1;
    return 0;
}

/* ---- the exporter's state ---- */

typedef struct firefox {
    FILE *f;
    an_trace *t;
    st_reader *r;
    int64_t t0_ns, t1_ns; /* the analysed time: samples in [t0, t1) */
    int windowed;         /* 0: every range; 1: the ranges overlapping [t0, t1) */
    /* strings (shared.stringArray), interned by an_hash_name */
    char **str;
    uint32_t n_str, cap_str;
    uint32_t *str_slot; /* index + 1 */
    uint32_t str_slot_cap;
    /* functions, one frame each (frame i is function i): name, resource, category (-1: none) */
    uint32_t *fn_name;
    int32_t *fn_resource, *fn_category;
    uint32_t n_fn, cap_fn, cap_fn_r, cap_fn_c;
    pair_map fn_map;      /* (name string, path string) -> function */
    uint32_t *res_name;   /* resources: one per mapping path, named by its base name */
    uint32_t n_res, cap_res;
    pair_map res_map;     /* (path string, 0) -> resource */
    uint32_t *stage_fn;   /* per stage: its "stage:NAME" function + 1, 0 not yet */
    /* the stack table: frame and prefix (-1: a root) per node */
    uint32_t *node_frame;
    int64_t *node_prefix;
    uint32_t n_node, cap_node, cap_node_p;
    pair_map node_map;    /* (prefix + 1, frame) -> node */
    pair_map sample_map;  /* (stage + 1, CPU stack id) -> node + 1 (0: no frames, a null stack) */
    uint32_t step_thread; /* reader index of the thread that shows the step marks */
    long long *pid;       /* per thread index: its process id (thread_pid) */
    int has_cpu;
} firefox;

static void put_lit(FILE *f, const char *s) { fputs_unlocked(s, f); }

static void put_i64(FILE *f, int64_t v)
{
    char buf[24];
    fwrite_unlocked(buf, 1, (size_t)an_fmt_i64(buf, v), f);
}

/* A trace time as milliseconds from the trace start, exact: 1234567 ns -> 1.234567 */
static void put_ms(firefox *x, int64_t ts_ns)
{
    char buf[40];
    fwrite_unlocked(buf, 1, (size_t)an_fmt_fixed(buf, ts_ns - x->t->origin_ns, 6, 6), x->f);
}

static int str_intern(firefox *x, const char *s, uint32_t *out)
{
    if ((x->n_str + 1) * 2 > x->str_slot_cap) {
        uint32_t cap = x->str_slot_cap ? x->str_slot_cap * 2 : 1024;
        uint32_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (uint32_t i = 0; i < x->n_str; i++) {
            uint64_t k = an_hash_name(x->str[i]) & (cap - 1);
            while (slot[k]) k = (k + 1) & (cap - 1);
            slot[k] = i + 1;
        }
        free(x->str_slot);
        x->str_slot = slot;
        x->str_slot_cap = cap;
    }
    uint64_t k = an_hash_name(s) & (x->str_slot_cap - 1);
    for (; x->str_slot[k]; k = (k + 1) & (x->str_slot_cap - 1))
        if (strcmp(x->str[x->str_slot[k] - 1], s) == 0) {
            *out = x->str_slot[k] - 1;
            return 0;
        }
    if (grow((void **)&x->str, &x->cap_str, x->n_str, sizeof *x->str)) return -1;
    if (!(x->str[x->n_str] = strdup(s))) return -1;
    x->str_slot[k] = ++x->n_str;
    *out = x->n_str - 1;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* The function (and frame) named name from the mapping at path ("" none);
 * category -1 (inherited from the caller) or a category. */
static int fn_intern(firefox *x, const char *name, const char *path, int32_t category, uint32_t *out)
{
    uint32_t ns, ps, fn;
    int added;
    if (str_intern(x, name, &ns) || str_intern(x, path, &ps)) return -1;
    if (pair_get(&x->fn_map, ns, category < 0 ? ps : ((uint64_t)1 << 40) | (uint64_t)category, x->n_fn, &fn, &added))
        return -1;
    if (added) {
        int32_t res = -1;
        if (path[0]) {
            uint32_t bs, ri;
            if (str_intern(x, base_name(path), &bs) || pair_get(&x->res_map, ps, 0, x->n_res, &ri, &added)) return -1;
            if (added) {
                if (grow((void **)&x->res_name, &x->cap_res, x->n_res, sizeof *x->res_name)) return -1;
                x->res_name[x->n_res++] = bs;
            }
            res = (int32_t)ri;
        }
        if (grow((void **)&x->fn_name, &x->cap_fn, x->n_fn, sizeof *x->fn_name) ||
            grow((void **)&x->fn_resource, &x->cap_fn_r, x->n_fn, sizeof *x->fn_resource) ||
            grow((void **)&x->fn_category, &x->cap_fn_c, x->n_fn, sizeof *x->fn_category))
            return -1;
        x->fn_name[x->n_fn] = ns;
        x->fn_resource[x->n_fn] = res;
        x->fn_category[x->n_fn] = category;
        x->n_fn++;
    }
    *out = fn;
    return 0;
}

/* The stack node of frame under prefix (-1: a root). */
static int node_intern(firefox *x, int64_t prefix, uint32_t frame, int64_t *out)
{
    uint32_t node;
    int added;
    if (pair_get(&x->node_map, (uint64_t)(prefix + 1), frame, x->n_node, &node, &added)) return -1;
    if (added) {
        if (grow((void **)&x->node_frame, &x->cap_node, x->n_node, sizeof *x->node_frame) ||
            grow((void **)&x->node_prefix, &x->cap_node_p, x->n_node, sizeof *x->node_prefix))
            return -1;
        x->node_frame[x->n_node] = frame;
        x->node_prefix[x->n_node] = prefix;
        x->n_node++;
    }
    *out = node;
    return 0;
}

/* A sample's stack: the root frame "stage:NAME" of its stage (none for -1),
 * then its frames outermost first. *node -1: no frame at all (a null stack).
 * 0, ST_ENOMEM, or the reader's error. */
static int sample_node(firefox *x, int32_t stage, uint64_t stack, int64_t *node)
{
    uint32_t ns = st_reader_n_stages(x->r);
    if (stage < 0 || (uint32_t)stage >= ns) stage = -1;
    uint64_t key = (uint64_t)(int64_t)(stage + 1);
    uint32_t v;
    int added;
    if (pair_find(&x->sample_map, key, stack, &v)) {
        *node = (int64_t)v - 1;
        return 0;
    }
    int64_t at = -1;
    if (stage >= 0) {
        if (!x->stage_fn[stage]) {
            const st_stage_info *si = st_reader_stage(x->r, (uint32_t)stage);
            size_t len = strlen(si->name) + 7;
            char *label = malloc(len);
            if (!label) return ST_ENOMEM;
            snprintf(label, len, "stage:%s", si->name);
            uint32_t fn;
            int bad = fn_intern(x, label, "", 1 + ((unsigned)si->kind < ST_KIND_COUNT ? (int32_t)si->kind : 0), &fn);
            free(label);
            if (bad) return ST_ENOMEM;
            x->stage_fn[stage] = fn + 1;
        }
        if (node_intern(x, -1, x->stage_fn[stage] - 1, &at)) return ST_ENOMEM;
    }
    const uint64_t *frames;
    uint32_t n;
    int rc = st_reader_cpu_stack(x->r, stack, &frames, &n);
    if (rc < 0) return rc;
    for (uint32_t i = n; i-- > 0;) {
        st_cpu_frame fr;
        if ((rc = st_reader_cpu_frame_name(x->r, stack, frames[i], &fr)) < 0) return rc;
        char buf[512];
        uint32_t fn;
        if (fn_intern(x, an_cpu_frame_label(&fr, 0, buf, sizeof buf), fr.path, -1, &fn) || node_intern(x, at, fn, &at))
            return ST_ENOMEM;
    }
    if (pair_get(&x->sample_map, key, stack, (uint32_t)(at + 1), &v, &added)) return ST_ENOMEM;
    *node = at;
    return 0;
}

/* ---- a thread's samples: the stack column, then the time column ---- */

/* times: 0 the stack column, 1 the time column, 2 only the count. kind:
 * ST_CPU_ROW_SAMPLE (the kernel's) or ST_CPU_ROW_PY_SAMPLE (the
 * interpreter's, on their own thread entry). */
static int samples_pass(firefox *x, uint32_t thread_id, uint32_t kind, int times, uint64_t *count)
{
    st_cpu_iter *it;
    int rc = st_cpu_iter_open(&it, x->r, thread_id, x->t0_ns, x->t1_ns);
    if (rc) return rc;
    st_cpu_row row;
    uint64_t n = 0;
    while ((rc = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != kind || row.ts_ns < x->t0_ns || row.ts_ns >= x->t1_ns) continue;
        if (times == 2) {
            n++;
            continue;
        }
        if (n++) put_lit(x->f, ",");
        if (times) {
            put_ms(x, row.ts_ns);
            continue;
        }
        int64_t node;
        if ((rc = sample_node(x, row.stage, row.stack, &node))) break;
        if (node < 0) put_lit(x->f, "null");
        else put_i64(x->f, node);
    }
    st_cpu_iter_close(it);
    *count = n;
    return rc < 0 ? rc : 0;
}

/* ---- a thread's markers, one column per pass ---- */

enum { COL_DATA, COL_NAME, COL_START, COL_END, COL_PHASE, COL_CATEGORY, N_COLS };
static const char *const col_names[N_COLS] = {"data", "name", "startTime", "endTime", "phase", "category"};

typedef struct marker {
    int phase;
    uint32_t stage, depth;
    int64_t start_ns, end_ns;
    const st_step_info *step; /* a step mark: stage and depth unused */
} marker;

static int put_marker(firefox *x, int col, const marker *m, uint64_t *n)
{
    FILE *f = x->f;
    if ((*n)++) put_lit(f, ",");
    const st_stage_info *si = m->step ? NULL : st_reader_stage(x->r, m->stage);
    int kind = si && (unsigned)si->kind < ST_KIND_COUNT ? (int)si->kind : 0;
    switch (col) {
    case COL_DATA:
        if (m->step) {
            put_lit(f, "{\"type\":\"step\",\"step\":");
            put_i64(f, (int64_t)m->step->step);
            put_lit(f, ",\"tokens\":");
            put_i64(f, (int64_t)m->step->tokens);
        } else {
            put_lit(f, "{\"type\":\"stage\",\"kind\":\"");
            put_lit(f, kind_names[kind]);
            put_lit(f, "\",\"depth\":");
            put_i64(f, m->depth);
            int has;
            uint64_t step = an_step_of(x->t, m->start_ns, &has);
            if (has) {
                put_lit(f, ",\"step\":");
                put_i64(f, (int64_t)step);
            }
            if (m->phase == PHASE_INTERVAL_START) put_lit(f, ",\"unfinished\":true");
        }
        put_lit(f, "}");
        break;
    case COL_NAME: {
        uint32_t s;
        char label[32];
        if (m->step) snprintf(label, sizeof label, "step %llu", (unsigned long long)m->step->step);
        if (str_intern(x, m->step ? label : si->name, &s)) return ST_ENOMEM;
        put_i64(f, s);
        break;
    }
    case COL_START: put_ms(x, m->start_ns); break;
    case COL_END: put_ms(x, m->phase == PHASE_INTERVAL ? m->end_ns : m->start_ns); break;
    case COL_PHASE: put_i64(f, m->phase); break;
    default: put_i64(f, m->step ? CAT_STEP : 1 + kind);
    }
    return 0;
}

/* Whether a range [start, end) is written: every range of the whole trace;
 * in a window, one that begins before its end and ends after its start, or
 * a zero-length one at a time in it. An unended range: end INT64_MAX. */
static int range_in(const firefox *x, int64_t start_ns, int64_t end_ns)
{
    if (!x->windowed) return 1;
    return start_ns < x->t1_ns && (end_ns > x->t0_ns || start_ns >= x->t0_ns);
}

static int markers_pass(firefox *x, uint32_t thread_index, int col, uint64_t *count)
{
    const st_thread_info *th = st_reader_thread(x->r, thread_index);
    st_event_iter *it;
    int rc = st_event_iter_open(&it, x->r, th->id);
    if (rc) return rc;
    struct {
        uint32_t stage;
        int64_t start_ns;
    } open[ST_MAX_DEPTH];
    uint32_t depth = 0;
    uint64_t n = 0;
    st_event e;
    while ((rc = st_event_iter_next(it, &e)) == 1) {
        rc = 0;
        if (!e.is_end) {
            if (e.depth < ST_MAX_DEPTH) {
                open[e.depth].stage = e.stage;
                open[e.depth].start_ns = e.ts_ns;
                depth = e.depth + 1;
            }
            continue;
        }
        if (e.depth < ST_MAX_DEPTH) depth = e.depth;
        if (!range_in(x, e.start_ns, e.ts_ns)) continue;
        marker m = {PHASE_INTERVAL, e.stage, e.depth, e.start_ns, e.ts_ns > e.start_ns ? e.ts_ns : e.start_ns, NULL};
        if ((rc = put_marker(x, col, &m, &n))) break;
    }
    st_event_iter_close(it);
    if (rc) return rc;
    /* ranges that never ended: an interval start each, outermost first */
    for (uint32_t d = 0; d < depth; d++) {
        if (!range_in(x, open[d].start_ns, INT64_MAX)) continue;
        marker m = {PHASE_INTERVAL_START, open[d].stage, d, open[d].start_ns, open[d].start_ns, NULL};
        if ((rc = put_marker(x, col, &m, &n))) return rc;
    }
    if (thread_index == x->step_thread)
        for (uint32_t i = 0; i < st_reader_n_steps(x->r); i++) {
            const st_step_info *s = st_reader_step(x->r, i);
            if (x->windowed && (s->ts_ns < x->t0_ns || s->ts_ns >= x->t1_ns)) continue;
            marker m = {PHASE_INSTANT, 0, 0, s->ts_ns, s->ts_ns, s};
            if ((rc = put_marker(x, col, &m, &n))) return rc;
        }
    *count = n;
    return 0;
}

/* ---- threads ---- */

/* The pid of a thread's process as a string: its rank's meta pid (1 to
 * 2147483646) unless that is missing or a lower rank's already, then
 * 1000000000 + its rank (as export --chrome numbers a rank set's processes). */
static long long thread_pid(const firefox *x, const st_thread_info *th)
{
    const an_trace *t = x->t;
    int64_t pid;
    if (!t->is_set) return an_trace_meta_i64(t, "pid", &pid) == 0 && pid > 0 && pid < INT32_MAX ? pid : 1;
    for (uint32_t k = 0; k < t->n_ranks; k++) {
        int64_t rank = 0;
        an_trace_meta_i64(&t->ranks[k], "rank", &rank);
        if (rank != th->rank) continue;
        int ok = an_trace_meta_i64(&t->ranks[k], "pid", &pid) == 0 && pid > 0 && pid < INT32_MAX;
        for (uint32_t j = 0; ok && j < k; j++) {
            int64_t other;
            ok = !(an_trace_meta_i64(&t->ranks[j], "pid", &other) == 0 && other == pid);
        }
        return ok ? pid : 1000000000LL + rank;
    }
    return 1000000000LL + th->rank;
}

/* The thread's tid: its OS thread id when that is 1 to 2147483647 and no
 * other thread of the export has it, else 2000000000 + its thread id. */
static long long thread_tid(const firefox *x, uint32_t index)
{
    const st_thread_info *th = st_reader_thread(x->r, index);
    int ok = th->os_tid > 0 && th->os_tid <= INT32_MAX;
    for (uint32_t j = 0; ok && j < st_reader_n_threads(x->r); j++)
        ok = j == index || st_reader_thread(x->r, j)->os_tid != th->os_tid;
    return ok ? th->os_tid : 2000000000LL + th->id;
}

static void process_name(const firefox *x, const st_thread_info *th, char *buf, size_t size)
{
    const an_trace *t = x->t;
    if (t->is_set) {
        for (uint32_t k = 0; k < t->n_ranks; k++) {
            int64_t rank = 0;
            an_trace_meta_i64(&t->ranks[k], "rank", &rank);
            if (rank != th->rank) continue;
            const char *program = an_trace_meta(&t->ranks[k], "program"), *host = an_trace_meta(&t->ranks[k], "host");
            snprintf(buf, size, "%s rank %lld (%s)", program ? program : "stagetrace", (long long)rank, host ? host : "?");
            return;
        }
    }
    const char *program = an_trace_meta(t, "program"), *rank = an_trace_meta(t, "rank");
    snprintf(buf, size, "%s (rank %s)", program ? program : "stagetrace", rank ? rank : "?");
}

/* A thread entry; python: the thread's Python-frame samples, on an entry
 * of their own named "NAME (Python)" (tid PY_TID_BASE + the thread id, not
 * the main thread, no markers), so that their weights never add to the
 * kernel's samples in one track or call tree. */
#define PY_TID_BASE 2100000000LL
static int write_thread(firefox *x, uint32_t index, int python)
{
    FILE *f = x->f;
    const st_thread_info *th = st_reader_thread(x->r, index);
    char label[600];
    put_lit(f, index || python ? ",\n{\"name\":" : "{\"name\":");
    if (strcmp(th->name, th->role) == 0 && !python) {
        an_json_string(f, th->name);
    } else {
        if (strcmp(th->name, th->role) == 0) snprintf(label, sizeof label, "%s (Python)", th->name);
        else snprintf(label, sizeof label, python ? "%s (%s) (Python)" : "%s (%s)", th->name, th->role);
        an_json_string(f, label);
    }
    process_name(x, th, label, sizeof label);
    put_lit(f, ",\"processName\":");
    an_json_string(f, label);
    put_lit(f, ",\"processType\":\"default\",\"processStartupTime\":");
    put_ms(x, x->t0_ns);
    put_lit(f, ",\"processShutdownTime\":null,\"registerTime\":");
    put_ms(x, x->t0_ns);
    put_lit(f, ",\"unregisterTime\":null,\"pausedRanges\":[],\"showMarkersInTimeline\":true,\"isMainThread\":");
    /* per process, its main-role thread is the main thread, else its first */
    int is_main = 1, main_role = strcmp(th->role, "main") == 0;
    for (uint32_t j = 0; j < st_reader_n_threads(x->r) && is_main; j++) {
        if (j == index || x->pid[j] != x->pid[index]) continue;
        int other = strcmp(st_reader_thread(x->r, j)->role, "main") == 0;
        if ((other && !main_role) || (other == main_role && j < index)) is_main = 0;
    }
    put_lit(f, is_main && !python ? "true" : "false");
    put_lit(f, ",\"pid\":\"");
    put_i64(f, x->pid[index]);
    put_lit(f, "\",\"tid\":");
    put_i64(f, python ? PY_TID_BASE + th->id : thread_tid(x, index));
    /* samples: only a thread whose perf event opened has the kernel's records */
    st_cpu_thread_info ci;
    int has = x->has_cpu ? st_reader_cpu_thread(x->r, th->id, &ci) : 0;
    if (has < 0) return has;
    has = has && (python || an_cpu_status_has_samples(&ci));
    uint32_t kind = python ? ST_CPU_ROW_PY_SAMPLE : ST_CPU_ROW_SAMPLE;
    uint64_t n_samples = 0, n_times = 0;
    int rc = 0;
    put_lit(f, ",\n \"samples\":{\"weight\":null,\"weightType\":\"samples\",\"stack\":[");
    if (has && (rc = samples_pass(x, th->id, kind, 0, &n_samples))) return rc;
    put_lit(f, "],\"time\":[");
    if (has && (rc = samples_pass(x, th->id, kind, 1, &n_times))) return rc;
    put_lit(f, "],\"length\":");
    put_i64(f, (int64_t)n_samples);
    put_lit(f, "},\n \"markers\":{");
    uint64_t n_markers = 0;
    for (int col = 0; col < N_COLS; col++) {
        uint64_t n = 0;
        put_lit(f, col ? "],\"" : "\"");
        put_lit(f, col_names[col]);
        put_lit(f, "\":[");
        if (!python && (rc = markers_pass(x, index, col, &n))) return rc;
        n_markers = n;
    }
    put_lit(f, "],\"length\":");
    put_i64(f, (int64_t)n_markers);
    put_lit(f, "}}");
    return 0;
}

/* ---- meta and the shared tables ---- */

/* meta.startTime: start_utc (whole seconds, UTC) in milliseconds since 1970; 0 without it. */
static long long start_time_ms(const an_trace *t)
{
    const an_trace *first = t->is_set && t->n_ranks ? &t->ranks[0] : t;
    const char *s = an_trace_meta(first, "start_utc");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) return 0;
    time_t secs = timegm(&tm);
    return secs > 0 ? (long long)secs * 1000 : 0;
}

static void write_meta(firefox *x)
{
    FILE *f = x->f;
    int64_t period_ns = 0;
    if (an_trace_meta_i64(x->t, "cpu_period_ns", &period_ns) != 0 || period_ns <= 0) period_ns = 1000000;
    const char *program = an_trace_meta(x->t, "program");
    put_lit(f, "{\"meta\":{\"version\":");
    put_i64(f, GECKO_VERSION);
    put_lit(f, ",\"preprocessedProfileVersion\":");
    put_i64(f, PROCESSED_VERSION);
    put_lit(f, ",\"product\":");
    an_json_string(f, program ? program : "stagetrace");
    put_lit(f, ",\"importedFrom\":\"stagetrace\",\"interval\":");
    char buf[40];
    fwrite_unlocked(buf, 1, (size_t)an_fmt_fixed(buf, period_ns, 6, 6), f);
    put_lit(f, ",\"startTime\":");
    put_i64(f, start_time_ms(x->t));
    put_lit(f, ",\"profilingStartTime\":");
    put_ms(x, x->t0_ns);
    put_lit(f, ",\"profilingEndTime\":");
    put_ms(x, x->t1_ns);
    put_lit(f, ",\"processType\":0,\"stackwalk\":1,\"symbolicated\":true,\"categories\":[\n"
               "  {\"name\":\"Other\",\"color\":\"grey\",\"subcategories\":[\"Other\"]}");
    for (int k = 0; k < ST_KIND_COUNT; k++) {
        put_lit(f, ",\n  {\"name\":\"");
        put_lit(f, kind_names[k]);
        put_lit(f, "\",\"color\":\"");
        put_lit(f, kind_colors[k]);
        put_lit(f, "\",\"subcategories\":[\"Other\"]}");
    }
    put_lit(f, ",\n  {\"name\":\"step\",\"color\":\"magenta\",\"subcategories\":[\"Other\"]}],\n"
               " \"markerSchema\":[\n"
               "  {\"name\":\"stage\",\"display\":[\"marker-chart\",\"marker-table\",\"timeline-overview\"],"
               "\"tooltipLabel\":\"{marker.name} ({marker.data.kind})\",\"tableLabel\":\"{marker.name}\","
               "\"chartLabel\":\"{marker.name}\",\"description\":\"A stagetrace range: the stage, its kind, its "
               "nesting depth and step\",\"fields\":[{\"key\":\"kind\",\"label\":\"Kind\",\"format\":\"string\"},"
               "{\"key\":\"depth\",\"label\":\"Depth\",\"format\":\"integer\"},{\"key\":\"step\",\"label\":\"Step\","
               "\"format\":\"integer\"},{\"key\":\"unfinished\",\"label\":\"Unfinished\",\"format\":\"string\"}]},\n"
               "  {\"name\":\"step\",\"display\":[\"marker-chart\",\"marker-table\",\"timeline-overview\"],"
               "\"tooltipLabel\":\"{marker.name}\",\"tableLabel\":\"{marker.name}\",\"chartLabel\":\"{marker.name}\","
               "\"description\":\"A step mark\",\"fields\":[{\"key\":\"step\",\"label\":\"Step\",\"format\":\"integer\"},"
               "{\"key\":\"tokens\",\"label\":\"Tokens\",\"format\":\"integer\"}]}]},\n"
               "\"libs\":[],\n\"threads\":[\n");
}

/* `"key":[v, v, ...]` for n values of fn(x, i) (or of the literal lit when fn is NULL) */
static void put_column(firefox *x, const char *key, uint32_t n, void (*fn)(firefox *, uint32_t), const char *lit)
{
    FILE *f = x->f;
    put_lit(f, "\"");
    put_lit(f, key);
    put_lit(f, "\":[");
    for (uint32_t i = 0; i < n; i++) {
        if (i) put_lit(f, ",");
        if (fn) fn(x, i);
        else put_lit(f, lit);
    }
    put_lit(f, "],");
}

static void col_node_frame(firefox *x, uint32_t i) { put_i64(x->f, x->node_frame[i]); }
static void col_node_prefix(firefox *x, uint32_t i)
{
    if (x->node_prefix[i] < 0) put_lit(x->f, "null");
    else put_i64(x->f, x->node_prefix[i]);
}
static void col_frame_category(firefox *x, uint32_t i)
{
    if (x->fn_category[i] < 0) put_lit(x->f, "null");
    else put_i64(x->f, x->fn_category[i]);
}
static void col_frame_subcategory(firefox *x, uint32_t i) { put_lit(x->f, x->fn_category[i] < 0 ? "null" : "0"); }
static void col_index(firefox *x, uint32_t i) { put_i64(x->f, i); }
static void col_fn_name(firefox *x, uint32_t i) { put_i64(x->f, x->fn_name[i]); }
static void col_fn_resource(firefox *x, uint32_t i) { put_i64(x->f, x->fn_resource[i]); }
static void col_res_name(firefox *x, uint32_t i) { put_i64(x->f, x->res_name[i]); }

static void write_shared(firefox *x)
{
    FILE *f = x->f;
    put_lit(f, "\n],\n\"shared\":{\n \"stackTable\":{");
    put_column(x, "frame", x->n_node, col_node_frame, NULL);
    put_column(x, "prefix", x->n_node, col_node_prefix, NULL);
    put_lit(f, "\"length\":");
    put_i64(f, x->n_node);
    put_lit(f, "},\n \"frameTable\":{");
    put_column(x, "address", x->n_fn, NULL, "-1");
    put_column(x, "inlineDepth", x->n_fn, NULL, "0");
    put_column(x, "category", x->n_fn, col_frame_category, NULL);
    put_column(x, "subcategory", x->n_fn, col_frame_subcategory, NULL);
    put_column(x, "func", x->n_fn, col_index, NULL);
    put_column(x, "nativeSymbol", x->n_fn, NULL, "null");
    put_column(x, "innerWindowID", x->n_fn, NULL, "0");
    put_column(x, "line", x->n_fn, NULL, "null");
    put_column(x, "column", x->n_fn, NULL, "null");
    put_column(x, "originalLocation", x->n_fn, NULL, "null");
    put_lit(f, "\"length\":");
    put_i64(f, x->n_fn);
    put_lit(f, "},\n \"funcTable\":{");
    put_column(x, "name", x->n_fn, col_fn_name, NULL);
    put_column(x, "isJS", x->n_fn, NULL, "false");
    put_column(x, "relevantForJS", x->n_fn, NULL, "false");
    put_column(x, "resource", x->n_fn, col_fn_resource, NULL);
    put_column(x, "source", x->n_fn, NULL, "null");
    put_column(x, "lineNumber", x->n_fn, NULL, "null");
    put_column(x, "columnNumber", x->n_fn, NULL, "null");
    put_column(x, "originalLocation", x->n_fn, NULL, "null");
    put_lit(f, "\"length\":");
    put_i64(f, x->n_fn);
    put_lit(f, "},\n \"resourceTable\":{");
    put_column(x, "lib", x->n_res, NULL, "null");
    put_column(x, "name", x->n_res, col_res_name, NULL);
    put_column(x, "host", x->n_res, NULL, "null");
    put_column(x, "type", x->n_res, NULL, "1");
    put_lit(f, "\"length\":");
    put_i64(f, x->n_res);
    put_lit(f, "},\n \"nativeSymbols\":{\"libIndex\":[],\"address\":[],\"name\":[],\"functionSize\":[],\"length\":0},\n"
               " \"sources\":{\"id\":[],\"filename\":[],\"startLine\":[],\"startColumn\":[],\"sourceMapURL\":[],"
               "\"content\":[],\"length\":0},\n"
               " \"sourceLocationTable\":{\"source\":[],\"line\":[],\"column\":[],\"length\":0},\n"
               " \"stringArray\":[");
    for (uint32_t i = 0; i < x->n_str; i++) {
        if (i) put_lit(f, ",");
        an_json_string(f, x->str[i]);
    }
    put_lit(f, "]}}\n");
}

static void firefox_free(firefox *x)
{
    for (uint32_t i = 0; i < x->n_str; i++) free(x->str[i]);
    free(x->str);
    free(x->str_slot);
    free(x->fn_name);
    free(x->fn_resource);
    free(x->fn_category);
    free(x->fn_map.slot);
    free(x->res_name);
    free(x->res_map.slot);
    free(x->stage_fn);
    free(x->node_frame);
    free(x->node_prefix);
    free(x->node_map.slot);
    free(x->sample_map.slot);
    free(x->pid);
}

int an_export_firefox(an_trace *t, const char *path, int overwrite, int64_t t0_ns, int64_t t1_ns, int windowed)
{
    firefox x;
    memset(&x, 0, sizeof x);
    x.t = t;
    x.r = t->r;
    x.t0_ns = t0_ns;
    x.t1_ns = t1_ns;
    x.windowed = windowed;
    int st = st_reader_has_cpu(x.r);
    if (st < 0) return an_trace_fail(t);
    x.has_cpu = st;
    uint32_t n = st_reader_n_threads(x.r), ns = st_reader_n_stages(x.r);
    /* the step marks go on the main thread, as in export --chrome: role main, else the first */
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(st_reader_thread(x.r, i)->role, "main") == 0) {
            x.step_thread = i;
            break;
        }
    x.stage_fn = calloc(ns ? ns : 1, sizeof *x.stage_fn);
    x.pid = calloc(n ? n : 1, sizeof *x.pid);
    if (!x.stage_fn || !x.pid) {
        firefox_free(&x);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    for (uint32_t i = 0; i < n; i++) x.pid[i] = thread_pid(&x, st_reader_thread(x.r, i));
    an_file o;
    int rc = an_file_open(&o, "export", path, overwrite);
    if (rc) {
        firefox_free(&x);
        return rc;
    }
    x.f = o.f;
    write_meta(&x);
    st = 0;
    for (uint32_t i = 0; i < n && !st; i++) {
        st = write_thread(&x, i, 0);
        /* its Python-frame samples in the analysed time, when it has any: an entry after it */
        st_cpu_thread_info ci;
        uint64_t n_py = 0;
        int has = !st && x.has_cpu ? st_reader_cpu_thread(x.r, st_reader_thread(x.r, i)->id, &ci) : 0;
        if (has < 0) st = has;
        else if (has) st = samples_pass(&x, st_reader_thread(x.r, i)->id, ST_CPU_ROW_PY_SAMPLE, 2, &n_py);
        if (!st && n_py) st = write_thread(&x, i, 1);
    }
    if (!st) write_shared(&x);
    firefox_free(&x);
    if (st == ST_ENOMEM) an_error("out of memory");
    else if (st) an_trace_fail(t);
    rc = an_file_close(&o, st == 0);
    if (st) return st == ST_ENOMEM ? AN_EXIT_FAIL : AN_EXIT_USAGE;
    return rc;
}
