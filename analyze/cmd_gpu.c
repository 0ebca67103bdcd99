/* cmd_gpu.c: `analyze gpu FILE`: what the GPUs did, from the trace's GPU
 * activity (recorded through CUPTI, docs/tracer.md): kernels per device,
 * copies by direction and memory kind, each device's busy share and idle
 * split (an_gpu_idle_split, as Holistic Trace Analysis splits it), and GPU
 * time projected onto the CPU stages that launched it (as Nsight Systems'
 * nvtx_gpu_proj_sum projects it onto NVTX ranges).
 */
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "demangle.h"
#include "gpu_activity.h"

static const char help[] =
    "usage: analyze gpu [--steps A:B | --time T0:T1] [--format text|csv|json [--table NAME]] [--top N] FILE|SET\n"
    "(SET: the rank files of one run, listed, as a directory or a quoted glob: docs/analyze.md, \"Rank sets\")\n"
    "\n"
    "GPU activity of a trace recorded with GPU tracing on (trainer --trace-gpu on,\n"
    "or st_gpu_start). Six tables; kernels, copies and stages cover the whole trace,\n"
    "devices, host_wait and api a window (stated in the header): by default the steady\n"
    "state, from the second step mark (step 1's: the first step holds start-up, weight\n"
    "init and first launches) to the last; the whole trace with fewer than 2 marks.\n"
    "  kernels  per device and kernel name: count, total, mean, share of the device's\n"
    "           kernel time (the N largest per device; --top 0 for all)\n"
    "  copies   memcpy by device, direction (HtoD, DtoH, ...) and memory kinds\n"
    "           (pageable, pinned, device), and memset: count, bytes, total, GB/s\n"
    "  devices  per device over the window: busy (the union of kernels, copies and\n"
    "           memsets, clipped to it), busy share, idle, and idle split as HTA does.\n"
    "           Each idle gap (clipped to the window)\n"
    "           gap ends where a record R starts; L is the start of the API call that\n"
    "           launched R:\n"
    "             host_wait   the part of the gap before L: nothing was queued, the\n"
    "                         device waited for the host to issue R\n"
    "             launch_gap  from max(L, gap start) to R's start when at most 50 us\n"
    "                         (launch overhead)\n"
    "             other       the rest: longer waits on dependencies (events, other\n"
    "                         streams), gaps with no known launch, the gap after the\n"
    "                         last record\n"
    "           host_thread/host_stage: the launching thread and the stage it was in\n"
    "           (innermost range) for the largest part of the host wait, counting only\n"
    "           time inside that stage; \"(no stage)\" when the thread was in no range\n"
    "           (a host-bound device: make that stage asynchronous)\n"
    "           unrecorded: time GPU recording was paused (st_gpu_pause, or the sampled\n"
    "           capture every_steps=N): neither busy nor idle, so busy and idle shares\n"
    "           are of the recorded time\n"
    "  host_wait per device, the host wait split by launching thread and the stage it\n"
    "           was in at each instant (\"(no stage)\": in no range): ms and share of\n"
    "           the device's host wait, largest first\n"
    "  stages   GPU time projected onto CPU stages: per launching thread and stage\n"
    "           (\"NAME (untraced tid N)\" for a thread the trace did not register)\n"
    "           (the innermost range open when the launch call started), the records\n"
    "           launched, and the sum of their GPU durations\n"
    "  api      host time in CUDA API calls over the window: per thread, stage (open at\n"
    "           the call's start) and function: count, total, mean, max, share of the\n"
    "           window. Top-level calls only: a driver call inside a runtime call on the\n"
    "           same thread is part of it. Calls on untraced threads (libraries' own,\n"
    "           PyTorch's autograd threads) count per OS thread as \"NAME (untraced tid\n"
    "           N)\". The N largest per thread (--top)\n"
    "\n"
    "options:\n"
    "  --steps A:B  devices, host_wait and api between the marks of steps A and B (A: or\n"
    "               :B leave an end open)\n"
    "  --time T0:T1 devices, host_wait and api over T0..T1 s from the trace start\n"
    "  --top N      kernels per device in the kernels table, and functions per thread\n"
    "               in the api table (default 20, 0 = all)\n"
    "  --format F   text (default), csv or json\n"
    "  --table NAME\n"
    "               only the table NAME (with --format csv or json): kernels, copies, devices,\n"
    "               host_wait, stages, api\n"
    "  --align MODE\n"
    "               a rank set's clocks: auto (default), meta, collectives or none\n"
    "               (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_TOP = 1 };
static const an_opt opts[] = {
    {"top", 1, OPT_TOP},
    {"steps", 1, AN_OPT_STEPS},
    {"time", 1, AN_OPT_TIME},
    {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"help", 0, AN_OPT_HELP},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col kernel_cols[] = {
    {"device", AN_T_INT, 0}, {"kernel", AN_T_STR, 0}, {"count", AN_T_INT, 0},
    {"total_ms", AN_T_MS, 0}, {"mean_ms", AN_T_MS, 0}, {"share_pct", AN_T_PCT, 0},
};
static const an_col copy_cols[] = {
    {"device", AN_T_INT, 0},   {"kind", AN_T_STR, 0},     {"direction", AN_T_STR, 0},
    {"src", AN_T_STR, 0},      {"dst", AN_T_STR, 0},      {"count", AN_T_INT, 0},
    {"bytes", AN_T_INT, 0},    {"total_ms", AN_T_MS, 0},  {"gb_per_s", AN_T_REAL, 2},
};
static const an_col device_cols[] = {
    {"device", AN_T_INT, 0},        {"records", AN_T_INT, 0},      {"busy_ms", AN_T_MS, 0},
    {"busy_pct", AN_T_PCT, 0},      {"idle_ms", AN_T_MS, 0},       {"host_wait_ms", AN_T_MS, 0},
    {"launch_gap_ms", AN_T_MS, 0},  {"other_ms", AN_T_MS, 0},      {"host_thread", AN_T_STR, 0},
    {"host_stage", AN_T_STR, 0},    {"host_stage_ms", AN_T_MS, 0}, {"unrecorded_ms", AN_T_MS, 0},
};
static const an_col wait_cols[] = {
    {"device", AN_T_INT, 0}, {"thread", AN_T_STR, 0}, {"stage", AN_T_STR, 0},
    {"ms", AN_T_MS, 0},      {"share_pct", AN_T_PCT, 0},
};
static const an_col stage_cols[] = {
    {"thread", AN_T_STR, 0}, {"stage", AN_T_STR, 0},   {"device", AN_T_INT, 0},
    {"records", AN_T_INT, 0}, {"kernels", AN_T_INT, 0}, {"gpu_ms", AN_T_MS, 0},
};
static const an_col api_cols[] = {
    {"thread", AN_T_STR, 0},  {"stage", AN_T_STR, 0},    {"function", AN_T_STR, 0}, {"api", AN_T_STR, 0},
    {"count", AN_T_INT, 0},   {"total_ms", AN_T_MS, 0},  {"mean_us", AN_T_REAL, 3}, {"max_ms", AN_T_MS, 0},
    {"share_pct", AN_T_PCT, 0},
};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct kernel_sum {
    int32_t device;
    const char *name;
    uint64_t count;
    int64_t total_ns;
} kernel_sum;

typedef struct copy_sum {
    int32_t device;
    uint32_t kind, dir, src, dst;
    uint64_t count, bytes;
    int64_t total_ns;
} copy_sum;

typedef struct stage_sum {
    int64_t thread, stage;
    int64_t os_tid;     /* thread -1: the launching call's OS thread (0 unknown) */
    const char *tname;  /* its name (gpu_threads), interned; NULL unknown */
    int32_t device;
    uint64_t records, kernels;
    int64_t gpu_ns;
} stage_sum;

typedef struct sums {
    kernel_sum *k;   /* open addressing on (device, name) */
    size_t k_cap, k_len;
    copy_sum *c;
    size_t c_len;
    stage_sum *s;
    size_t s_len;
    char **names;    /* interned kernel and function names: open addressing, one copy each */
    size_t names_cap, names_len;
} sums;

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* One lasting copy of each name (the readers that hand them out live for one
 * time slice), so that names compare by pointer; NULL on no memory. */
static const char *intern(sums *s, const char *name)
{
    if (s->names_len * 2 >= s->names_cap) {
        size_t cap = s->names_cap ? s->names_cap * 2 : 256;
        char **t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < s->names_cap; i++) {
            if (!s->names[i]) continue;
            size_t h = an_hash_name(s->names[i]) & (cap - 1);
            while (t[h]) h = (h + 1) & (cap - 1);
            t[h] = s->names[i];
        }
        free(s->names);
        s->names = t;
        s->names_cap = cap;
    }
    size_t h = an_hash_name(name) & (s->names_cap - 1);
    while (s->names[h] && strcmp(s->names[h], name) != 0) h = (h + 1) & (s->names_cap - 1);
    if (!s->names[h]) {
        if (!(s->names[h] = strdup(name))) return NULL;
        s->names_len++;
    }
    return s->names[h];
}

static void sums_free(sums *s)
{
    for (size_t i = 0; i < s->names_cap; i++) free(s->names[i]);
    free(s->names);
    free(s->k);
    free(s->c);
    free(s->s);
}

static int grow(void **v, size_t len, size_t size)
{
    if (len & (len - 1) && len) return 0; /* capacity doubles at powers of two */
    void *nv = realloc(*v, (len ? len * 2 : 8) * size);
    if (!nv) return -1;
    *v = nv;
    return 0;
}

static int add_kernel(sums *s, int32_t device, const char *name, int64_t dur)
{
    if (s->k_len * 2 >= s->k_cap) {
        size_t cap = s->k_cap ? s->k_cap * 2 : 256;
        kernel_sum *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < s->k_cap; i++) {
            if (!s->k[i].count) continue;
            size_t h = (((uintptr_t)s->k[i].name >> 3) * 31 + (size_t)s->k[i].device) & (cap - 1);
            while (t[h].count) h = (h + 1) & (cap - 1);
            t[h] = s->k[i];
        }
        free(s->k);
        s->k = t;
        s->k_cap = cap;
    }
    size_t h = (((uintptr_t)name >> 3) * 31 + (size_t)device) & (s->k_cap - 1);
    while (s->k[h].count && !(s->k[h].device == device && s->k[h].name == name)) h = (h + 1) & (s->k_cap - 1);
    if (!s->k[h].count) {
        s->k[h] = (kernel_sum){device, name, 0, 0};
        s->k_len++;
    }
    s->k[h].count++;
    s->k[h].total_ns += dur;
    return 0;
}

static int add_row(sums *s, const st_gpu_row *g)
{
    const st_gpu_rec *r = &g->rec;
    if (r->kind == ST_GPU_KERNEL) {
        const char *name = intern(s, g->name ? an_demangle(g->name) : "?");
        if (!name || add_kernel(s, g->device, name, r->dur_ns)) return -1;
    }
    if (r->kind == ST_GPU_MEMCPY || r->kind == ST_GPU_MEMSET) {
        uint32_t dir = r->kind == ST_GPU_MEMCPY ? r->copy_kind : 0, src = r->kind == ST_GPU_MEMCPY ? r->src_mem : 0;
        size_t i = 0;
        for (; i < s->c_len; i++) {
            copy_sum *c = &s->c[i];
            if (c->device == g->device && c->kind == r->kind && c->dir == dir && c->src == src && c->dst == r->dst_mem)
                break;
        }
        if (i == s->c_len) {
            if (grow((void **)&s->c, s->c_len, sizeof *s->c)) return -1;
            s->c[s->c_len++] = (copy_sum){g->device, r->kind, dir, src, r->dst_mem, 0, 0, 0};
        }
        s->c[i].count++;
        s->c[i].bytes += r->bytes;
        s->c[i].total_ns += r->dur_ns;
    }
    if (!st_gpu_kind_is_device_work(r->kind)) return 0; /* a host wait, not GPU work */
    size_t i = 0;
    int64_t os_tid = g->thread < 0 ? g->launch_os_tid : 0;
    for (; i < s->s_len; i++)
        if (s->s[i].thread == g->thread && s->s[i].stage == g->stage && s->s[i].device == g->device &&
            s->s[i].os_tid == os_tid)
            break;
    if (i == s->s_len) {
        const char *tname = os_tid && g->launch_thread ? intern(s, g->launch_thread) : NULL;
        if ((os_tid && g->launch_thread && !tname) || grow((void **)&s->s, s->s_len, sizeof *s->s)) return -1;
        s->s[s->s_len++] = (stage_sum){g->thread, g->stage, os_tid, tname, g->device, 0, 0, 0};
    }
    s->s[i].records++;
    s->s[i].kernels += r->kind == ST_GPU_KERNEL;
    s->s[i].gpu_ns += r->dur_ns;
    return 0;
}

/* "NAME (untraced tid N)", or "(untraced tid N)" without a name: a thread
 * the trace did not register, in the stages and api tables. */
static const char *untraced_label(char *buf, size_t size, const char *name, int64_t os_tid)
{
    snprintf(buf, size, "%s%s(untraced tid %lld)", name ? name : "", name ? " " : "", (long long)os_tid);
    return buf;
}

/* ---- CUDA API calls ---- */

typedef struct api_sum {
    int64_t thread, stage;     /* thread < 0: an untraced OS thread, -1 - its os_tid */
    const char *tname;         /* an untraced thread's name (gpu_threads), interned; NULL unknown */
    const char *name;
    uint32_t domain, cbid;
    uint64_t count;
    int64_t total_ns, max_ns;
} api_sum;

static int cmp_api_sum(const void *a, const void *b)
{
    const api_sum *x = a, *y = b;
    /* traced threads by id, then the untraced */
    if (x->thread != y->thread) return (uint64_t)x->thread < (uint64_t)y->thread ? -1 : 1;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (x->name != y->name) return x->name && y->name ? strcmp(x->name, y->name) : x->name ? -1 : 1;
    return (x->cbid > y->cbid) - (x->cbid < y->cbid);
}

/* The API calls of the window [w0, w1), top level only (a call inside the
 * previous top-level call of its thread is part of it), clipped to the
 * window and added up per (thread, stage, function). Fed by an_gpu_api_each
 * in (thread, start) order, a time slice at a time: each thread's top-level
 * end carries over from one slice to the next. */
typedef struct api_acc {
    sums *names;
    int64_t w0, w1;
    api_sum *rows;
    size_t n, cap, last; /* last: the row matched last (calls of one thread and stage come in runs) */
    struct {
        int64_t thread, top_end;
    } *threads;
    size_t n_threads;
} api_acc;

static int64_t *api_top_end(api_acc *a, int64_t thread)
{
    for (size_t i = 0; i < a->n_threads; i++)
        if (a->threads[i].thread == thread) return &a->threads[i].top_end;
    void *nt = realloc(a->threads, (a->n_threads + 1) * sizeof *a->threads);
    if (!nt) return NULL;
    a->threads = nt;
    a->threads[a->n_threads].thread = thread;
    a->threads[a->n_threads].top_end = INT64_MIN;
    return &a->threads[a->n_threads++].top_end;
}

static int api_add(const st_gpu_row *g, void *arg)
{
    api_acc *a = arg;
    int64_t start = g->rec.start_ns, end = start + g->rec.dur_ns;
    /* an untraced thread by its OS thread id, each its own row and nesting */
    int64_t thread = g->thread >= 0 ? g->thread : g->launch_os_tid > 0 ? -1 - g->launch_os_tid : -1;
    int64_t *top_end = api_top_end(a, thread);
    if (!top_end) return oom();
    if (thread != -1 && start < *top_end && end <= *top_end) return 0;
    if (end > *top_end) *top_end = end;
    int64_t lo = start > a->w0 ? start : a->w0, hi = end < a->w1 ? end : a->w1;
    if (hi < lo || (hi == lo && end > start) || start >= a->w1) return 0; /* outside the window */
    const char *name = g->name ? intern(a->names, g->name) : NULL;
    if (g->name && !name) return oom();
    size_t j = a->n;
    for (size_t k = 0; k < a->n; k++) {
        size_t m = (a->last + k) % a->n;
        const api_sum *r = &a->rows[m];
        if (r->thread == thread && r->stage == g->stage && r->name == name && r->domain == g->stream &&
            (name || r->cbid == g->rec.copy_kind)) {
            j = m;
            break;
        }
    }
    if (j == a->n) {
        if (a->n == a->cap) {
            size_t nc = a->cap ? a->cap * 2 : 64;
            api_sum *nr = realloc(a->rows, nc * sizeof *nr);
            if (!nr) return oom();
            a->rows = nr;
            a->cap = nc;
        }
        const char *tname = thread < -1 && g->launch_thread ? intern(a->names, g->launch_thread) : NULL;
        if (thread < -1 && g->launch_thread && !tname) return oom();
        a->rows[a->n++] = (api_sum){thread, g->stage, tname, name, g->stream, g->rec.copy_kind, 0, 0, 0};
    }
    a->last = j;
    a->rows[j].count++;
    a->rows[j].total_ns += hi - lo;
    if (hi - lo > a->rows[j].max_ns) a->rows[j].max_ns = hi - lo;
    return 0;
}

static void put_api(an_out *out, an_trace *t, const api_sum *s, size_t n, int64_t window_ns, uint64_t top)
{
    an_table *tb = an_table_new(out, "api", api_cols, N_OF(api_cols));
    for (size_t i = 0, shown = 0; i < n; i++) {
        if (i == 0 || s[i].thread != s[i - 1].thread) shown = 0;
        if (top && shown++ >= top) continue;
        const st_thread_info *ti = s[i].thread >= 0 ? st_reader_thread_by_id(t->r, (uint32_t)s[i].thread) : NULL;
        const st_stage_info *si = s[i].stage >= 0 ? st_reader_stage(t->r, (uint32_t)s[i].stage) : NULL;
        char fn[64], label[160];
        if (!s[i].name) snprintf(fn, sizeof fn, "cbid %u", s[i].cbid);
        an_put_str(tb, ti                  ? ti->name
                       : s[i].thread < -1 ? untraced_label(label, sizeof label, s[i].tname, -1 - s[i].thread)
                                          : "(untraced)");
        an_put_str(tb, si ? si->name : s[i].thread >= 0 ? "(no stage)" : NULL);
        an_put_str(tb, s[i].name ? s[i].name : fn);
        an_put_str(tb, s[i].domain ? "driver" : "runtime");
        an_put_int(tb, (int64_t)s[i].count);
        an_put_ns(tb, s[i].total_ns);
        an_put_real(tb, (double)s[i].total_ns / (double)s[i].count / 1e3);
        an_put_ns(tb, s[i].max_ns);
        an_put_pct(tb, window_ns > 0 ? 100.0 * (double)s[i].total_ns / (double)window_ns : 0);
        an_row_end(tb);
    }
    an_table_end(tb);
}

/* an_gpu_each's callback for the whole-trace tables: the sums, and the span
 * of the GPU records. */
typedef struct gpu_pass {
    sums *s;
    int64_t t0, t1;
} gpu_pass;

static int add_record(const st_gpu_row *g, void *arg)
{
    gpu_pass *p = arg;
    if (add_row(p->s, g)) return oom();
    if (g->rec.start_ns < p->t0) p->t0 = g->rec.start_ns;
    if (g->rec.start_ns + g->rec.dur_ns > p->t1) p->t1 = g->rec.start_ns + g->rec.dur_ns;
    return 0;
}

static int cmp_kernel(const void *a, const void *b)
{
    const kernel_sum *x = a, *y = b;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_copy(const void *a, const void *b)
{
    const copy_sum *x = a, *y = b;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    return (x->dst > y->dst) - (x->dst < y->dst);
}

static int cmp_stage(const void *a, const void *b)
{
    const stage_sum *x = a, *y = b;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    if ((x->os_tid == 0) != (y->os_tid == 0)) return x->os_tid ? -1 : 1; /* untraced threads before unknown */
    if (x->gpu_ns != y->gpu_ns) return x->gpu_ns > y->gpu_ns ? -1 : 1;
    if (x->os_tid != y->os_tid) return x->os_tid < y->os_tid ? -1 : 1;
    return (x->device > y->device) - (x->device < y->device);
}

static void put_tables(an_out *out, an_trace *t, sums *s, const an_gpu_idle *dev, uint32_t n_dev, uint64_t top)
{
    /* kernels: compact the hash, sort by device then total */
    size_t nk = 0;
    for (size_t i = 0; i < s->k_cap; i++)
        if (s->k[i].count) s->k[nk++] = s->k[i];
    if (nk) qsort(s->k, nk, sizeof *s->k, cmp_kernel);
    an_table *tb = an_table_new(out, "kernels", kernel_cols, N_OF(kernel_cols));
    for (size_t i = 0, shown = 0; i < nk; i++) {
        if (i == 0 || s->k[i].device != s->k[i - 1].device) shown = 0;
        if (top && shown++ >= top) continue;
        int64_t dev_total = 0;
        for (size_t j = 0; j < nk; j++)
            if (s->k[j].device == s->k[i].device) dev_total += s->k[j].total_ns;
        an_put_int(tb, s->k[i].device);
        an_put_str(tb, s->k[i].name);
        an_put_int(tb, (int64_t)s->k[i].count);
        an_put_ns(tb, s->k[i].total_ns);
        an_put_ns(tb, s->k[i].total_ns / (int64_t)s->k[i].count);
        an_put_pct(tb, dev_total ? 100.0 * (double)s->k[i].total_ns / (double)dev_total : 0);
        an_row_end(tb);
    }
    an_table_end(tb);

    if (s->c_len) qsort(s->c, s->c_len, sizeof *s->c, cmp_copy);
    tb = an_table_new(out, "copies", copy_cols, N_OF(copy_cols));
    for (size_t i = 0; i < s->c_len; i++) {
        const copy_sum *c = &s->c[i];
        an_put_int(tb, c->device);
        an_put_str(tb, st_gpu_kind_name(c->kind));
        if (c->kind == ST_GPU_MEMCPY) {
            an_put_str(tb, st_gpu_copy_name(c->dir));
            an_put_str(tb, st_gpu_mem_name(c->src));
        } else {
            an_put_null(tb);
            an_put_null(tb);
        }
        an_put_str(tb, st_gpu_mem_name(c->dst));
        an_put_int(tb, (int64_t)c->count);
        an_put_int(tb, (int64_t)c->bytes);
        an_put_ns(tb, c->total_ns);
        if (c->total_ns > 0) an_put_real(tb, (double)c->bytes / (double)c->total_ns);
        else an_put_null(tb);
        an_row_end(tb);
    }
    an_table_end(tb);

    tb = an_table_new(out, "devices", device_cols, N_OF(device_cols));
    for (uint32_t i = 0; i < n_dev; i++) {
        const an_gpu_idle *d = &dev[i];
        int64_t span = d->busy_ns + d->idle_ns;
        an_put_int(tb, d->device);
        an_put_int(tb, (int64_t)d->n_records);
        an_put_ns(tb, d->busy_ns);
        an_put_pct(tb, span ? 100.0 * (double)d->busy_ns / (double)span : 0);
        an_put_ns(tb, d->idle_ns);
        an_put_ns(tb, d->host_wait_ns);
        an_put_ns(tb, d->launch_gap_ns);
        an_put_ns(tb, d->other_ns);
        const st_thread_info *ti = d->host_thread >= 0 ? st_reader_thread_by_id(t->r, (uint32_t)d->host_thread) : NULL;
        const st_stage_info *si = d->host_stage >= 0 ? st_reader_stage(t->r, (uint32_t)d->host_stage) : NULL;
        an_put_str(tb, ti ? ti->name : d->host_thread >= 0 ? "(unknown)" : NULL);
        an_put_str(tb, si ? si->name : d->host_thread >= 0 ? "(no stage)" : NULL);
        an_put_ns(tb, d->host_stage_ns);
        an_put_ns(tb, d->unrecorded_ns);
        an_row_end(tb);
    }
    an_table_end(tb);

    tb = an_table_new(out, "host_wait", wait_cols, N_OF(wait_cols));
    for (uint32_t i = 0; i < n_dev; i++) {
        const an_gpu_idle *d = &dev[i];
        for (uint32_t k = 0; k < d->n_waits; k++) {
            const an_gpu_wait *w = &d->waits[k];
            const st_thread_info *ti = w->thread >= 0 ? st_reader_thread_by_id(t->r, (uint32_t)w->thread) : NULL;
            const st_stage_info *si = w->stage >= 0 ? st_reader_stage(t->r, (uint32_t)w->stage) : NULL;
            an_put_int(tb, d->device);
            an_put_str(tb, ti ? ti->name : "(unknown)");
            an_put_str(tb, si ? si->name : "(no stage)");
            an_put_ns(tb, w->ns);
            an_put_pct(tb, d->host_wait_ns ? 100.0 * (double)w->ns / (double)d->host_wait_ns : 0);
            an_row_end(tb);
        }
    }
    an_table_end(tb);

    if (s->s_len) qsort(s->s, s->s_len, sizeof *s->s, cmp_stage);
    tb = an_table_new(out, "stages", stage_cols, N_OF(stage_cols));
    for (size_t i = 0; i < s->s_len; i++) {
        const stage_sum *g = &s->s[i];
        const st_thread_info *ti = g->thread >= 0 ? st_reader_thread_by_id(t->r, (uint32_t)g->thread) : NULL;
        const st_stage_info *si = g->stage >= 0 ? st_reader_stage(t->r, (uint32_t)g->stage) : NULL;
        char label[160];
        an_put_str(tb, ti ? ti->name : g->os_tid ? untraced_label(label, sizeof label, g->tname, g->os_tid) : "(unknown)");
        an_put_str(tb, si ? si->name : "(none)");
        an_put_int(tb, g->device);
        an_put_int(tb, (int64_t)g->records);
        an_put_int(tb, (int64_t)g->kernels);
        an_put_ns(tb, g->gpu_ns);
        an_row_end(tb);
    }
    an_table_end(tb);
    /* Work no stage can be given: say how much, and why (text only; the rows are in the table in
     * every format). Launched by a thread the trace did not register, whose name the GPU
     * collector kept: those threads, largest first; with no launch call at all: the record set. */
    uint64_t untraced_k = 0, untraced_r = 0, lost_k = 0, lost_r = 0;
    int64_t untraced_ns = 0, lost_ns = 0, all_ns = 0;
    for (size_t i = 0; i < s->s_len; i++) {
        all_ns += s->s[i].gpu_ns;
        if (s->s[i].thread >= 0 && st_reader_thread_by_id(t->r, (uint32_t)s->s[i].thread)) continue;
        if (s->s[i].os_tid) {
            untraced_k += s->s[i].kernels;
            untraced_r += s->s[i].records;
            untraced_ns += s->s[i].gpu_ns;
        } else {
            lost_k += s->s[i].kernels;
            lost_r += s->s[i].records;
            lost_ns += s->s[i].gpu_ns;
        }
    }
    if (untraced_k) {
        an_out_text(out, "Launched by threads the trace did not register: %llu kernel%s (%llu record%s, %.3f ms, %.1f%% "
                         "of the GPU time above)",
                    (unsigned long long)untraced_k, untraced_k == 1 ? "" : "s", (unsigned long long)untraced_r,
                    untraced_r == 1 ? "" : "s", (double)untraced_ns / 1e6,
                    all_ns ? 100.0 * (double)untraced_ns / (double)all_ns : 0.0);
        /* the rows are sorted untraced-first within thread -1, largest first */
        int shown = 0;
        for (size_t i = 0; i < s->s_len && shown < 5; i++) {
            const stage_sum *g = &s->s[i];
            if (g->thread >= 0 || !g->os_tid) continue;
            char clean[80];
            if (g->tname)
                an_out_text(out, "%s%s (tid %lld) %.3f ms", shown ? ", " : ": ", an_clean(g->tname, clean, sizeof clean),
                            (long long)g->os_tid, (double)g->gpu_ns / 1e6);
            else
                an_out_text(out, "%stid %lld %.3f ms", shown ? ", " : ": ", (long long)g->os_tid, (double)g->gpu_ns / 1e6);
            shown++;
        }
        an_out_text(out, ". Register them (st_thread_register; PyTorch runs the backward pass of CUDA tensors on its "
                         "own autograd threads) to see their stages.\n\n");
    }
    if (lost_k)
        an_out_text(out, "No launching thread for %llu kernel%s (%llu record%s, %.3f ms, %.1f%% of the GPU time above): "
                         "their launch calls are not in the trace (the record set, meta gpu_records, left them out, or "
                         "they were made before the trace's window).\n\n",
                    (unsigned long long)lost_k, lost_k == 1 ? "" : "s", (unsigned long long)lost_r,
                    lost_r == 1 ? "" : "s", (double)lost_ns / 1e6, all_ns ? 100.0 * (double)lost_ns / (double)all_ns : 0.0);
}

typedef struct own_opts {
    uint64_t top;
} own_opts;

static void init(an_cmd *c)
{
    own_opts *o = c->own;
    o->top = 20;
}

static int option(an_cmd *c, int id)
{
    own_opts *o = c->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_TOP:
        if (an_parse_u64(c->args.value, &o->top))
            rc = an_usage_error("gpu", "--top needs a number of kernels (0 = all), not '%s'", c->args.value);
        break;
    }
    return rc;
}

static int work(an_cmd *c)
{
    own_opts *o = c->own;
    an_trace *t = &c->trace;
    int rc = AN_EXIT_OK;
    sums s;
    memset(&s, 0, sizeof s);
    an_gpu_idle *dev = NULL;
    uint32_t n_dev = 0;
    if (!rc) {
        int has = st_reader_has_gpu(t->r);
        if (has < 0) rc = an_trace_fail(t);
        else if (!has) {
            an_error("gpu: %s holds no GPU activity (record with GPU tracing on: trainer --trace-gpu on "
                     "in a CUDA build with CUPTI)", t->path);
            rc = AN_EXIT_USAGE;
        }
    }
    /* The span: the ranges' and steps', widened to the GPU records'. */
    gpu_pass pass = {&s, t->has_span ? t->span_t0_ns : INT64_MAX, t->has_span ? t->span_t1_ns : INT64_MIN};
    int32_t *devices = NULL;
    uint32_t n_devices = 0;
    if (!rc) rc = an_gpu_devices(t, &devices, &n_devices);
    /* One pass over the records for the whole-trace tables and the idle
     * split. When the split's window depends on the records' span (fewer
     * than two step marks and no --steps/--time, or a --time window, which
     * is clipped to the span's end), the span is taken beforehand from
     * the chunk headers (st_reader_gpu_span, no chunk decoded); headers are
     * hints, so when the records' own span turns out to give another window
     * (a corrupt header), the split is read again over the right one. */
    const char *note = NULL;
    int64_t w0 = 0, w1 = 0;
    char wdesc[160] = "";
    an_gpu_tap taps[2] = {{INT64_MIN, INT64_MAX, NULL, add_record, NULL, &pass}};
    an_gpu_split *split = NULL;
    int needs_span = !rc && an_gpu_window_needs_span(t, &c->window);
    int64_t h0 = pass.t0, h1 = pass.t1; /* the span the headers give */
    if (needs_span) {
        st_gpu_headers h;
        if (st_reader_gpu_span(t->r, &h) == ST_OK && h.has) {
            if (h.t0_ns < h0) h0 = h.t0_ns;
            if (h.t1_ns > h1) h1 = h.t1_ns;
        }
    }
    if (!rc) rc = an_gpu_window(t, &c->window, h0, h1, &w0, &w1, wdesc, sizeof wdesc);
    if (!rc) split = an_gpu_split_open(t, w0, w1, &taps[1], &rc);
    if (!rc) rc = an_gpu_read(t, devices, n_devices, taps, split ? 2 : 1);
    free(devices);
    an_gpu_split_close(split, !rc, &dev, &n_dev, &note);
    int64_t t0 = pass.t0, t1 = pass.t1;
    if (!rc && needs_span && (t0 != h0 || t1 != h1)) {
        int64_t r0 = w0, r1 = w1;
        rc = an_gpu_window(t, &c->window, t0, t1, &r0, &r1, wdesc, sizeof wdesc);
        if (!rc && (r0 != w0 || r1 != w1)) {
            an_gpu_idle_free(dev, n_dev);
            dev = NULL;
            n_dev = 0;
            w0 = r0;
            w1 = r1;
            rc = an_gpu_idle_split(t, w0, w1, &dev, &n_dev, &note);
        }
    }
    api_acc api = {&s, w0, w1, NULL, 0, 0, 0, NULL, 0};
    if (!rc) {
        /* from ST_GPU_LAUNCH_LOOKBACK_NS before the window: a call may run into it */
        int64_t from = w0 < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : w0 - ST_GPU_LAUNCH_LOOKBACK_NS;
        rc = an_gpu_api_each(t, from, w1, api_add, &api);
        if (!rc && api.n) qsort(api.rows, api.n, sizeof *api.rows, cmp_api_sum);
    }
    if (!rc) {
        an_out *out = an_out_new(stdout, c->format);
        if (!out) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        } else {
            const char *dropped = an_trace_meta(t, "gpu_dropped_records");
            an_out_text(out, "GPU activity of %s over %.3f ms; CUPTI dropped records: %s\n", t->path,
                        (double)(t1 - t0) / 1e6, dropped ? dropped : "unknown");
            an_out_text(out, "devices and host_wait over %s, %.3f ms%s\n", wdesc, (double)(w1 - w0) / 1e6,
                        n_dev ? "" : ": no GPU activity in the window");
            uint32_t n_paused;
            int64_t paused = an_trace_gpu_paused_in(t, w0, w1, &n_paused);
            if (n_paused) {
                const char *every = an_trace_meta(t, "gpu_every_steps");
                an_out_text(out,
                            "GPU recording was paused for %.3f ms of this window (%u pause%s%s%s%s): that time is "
                            "neither busy nor idle: devices and host_wait are of the %.3f ms recorded (a pause stops the kernel "
                            "records; copies, memsets and API calls are recorded throughout)\n",
                            (double)paused / 1e6, n_paused, n_paused == 1 ? "" : "s",
                            every ? "; sampled capture: one step in " : "", every ? every : "", every ? " recorded" : "",
                            (double)(w1 - w0 - paused) / 1e6);
            }
            an_out_text(out, "\n");
            put_tables(out, t, &s, dev, n_dev, o->top);
            put_api(out, t, api.rows, api.n, w1 - w0, o->top);
            if (an_out_finish(out)) {
                an_error("gpu: cannot write the output");
                rc = AN_EXIT_FAIL;
            }
        }
        if (!rc) an_trace_warn(t);
    }
    free(api.rows);
    free(api.threads);
    an_gpu_idle_free(dev, n_dev);
    sums_free(&s);
    return rc;
}

const an_cmd_def an_cmd_gpu = {
    .name = "gpu",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_WINDOW | AN_RUN_TRACE,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .work = work,
    .tables = "kernels,copies,devices,host_wait,stages,api",
};
