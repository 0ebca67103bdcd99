/* export_chrome.c: `analyze export --chrome OUT.json`: the trace as Chrome
 * trace-event JSON, for Perfetto (ui.perfetto.dev) and chrome://tracing: a
 * process named after the program and rank, its threads named and ordered
 * by role, each range a complete event ("ph":"X", ts and dur in microseconds
 * with nanosecond decimals, cat = the stage kind, args depth and step),
 * counter samples as counter events ("C"), step marks as instant events,
 * item handoffs (flows) as flow arrows ("s"/"f").
 * Streamed: per thread, ranges are written in start order (what viewers
 * expect of nested slices) from the raw events through a bounded queue; a
 * range open across more than QUEUE_MAX later ranges is written as a
 * begin/end pair ("B"/"E") instead, so memory stays bounded whatever the
 * nesting. GPU activity as Kineto writes it (chrome_gpu_tracks), for HTA and
 * Perfetto. One of the converters under cmd_export.c (export.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "demangle.h"
#include "export.h"
#include "model.h"

#define QUEUE_MAX 65536 /* ranges held per thread while an outer one is open */

typedef struct pending {
    uint32_t stage, depth;
    int64_t start_ns, end_ns;
    int ended;
} pending;

#define NOT_QUEUED UINT64_MAX       /* open range not in the queue (began before the data) */
#define EMITTED_BEGIN (UINT64_MAX - 1) /* written as "B": its end writes "E" */

typedef struct chrome {
    FILE *f;
    an_trace *t;
    long long pid;
    /* A rank set: a process per rank, rank_pid[k] for the set's rank k
     * (t->ranks[k]); thread_pid[id] the pid of thread id's rank (set thread
     * ids are 0..n-1). NULL for one file: every event in pid. */
    long long *rank_pid;
    long long *thread_pid;
    uint32_t n_thread_pid;
    /* Track ids: thread (by id) -> tid, 1, 2, ... in role order (track_order),
     * sorted by thread id for lookup; never 0 (Perfetto takes tid 0 for a
     * process's main thread), and in the order of the tracks, as their
     * thread_sort_index (Chromium's DevTools ignores both: it draws a
     * process's threads by their number of events). */
    struct thread_track *tracks;
    uint32_t n_tracks;
    char **stage_json; /* [n_stages] quoted, escaped names */
    const char **kind_json;
    /* the current thread: its id, its track */
    uint32_t tid;
    int64_t track;
    pending *queue;     /* ring of QUEUE_MAX */
    uint64_t head_seq, n_queued;
    uint64_t open_seq[ST_MAX_DEPTH + 1];
    uint64_t n_events, n_skipped_samples;
    an_progress progress;
    /* GPU: the CUDA API calls (by thread, then start), the launch flows */
    st_gpu_iter *api_it;
    struct api_call *api;
    size_t n_api;
    struct flow *flows;
    size_t n_flows;
} chrome;

static char *json_quoted(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    an_json_string(m, s);
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void put_i64(FILE *f, int64_t v)
{
    char buf[24];
    int n = an_fmt_i64(buf, v);
    fwrite_unlocked(buf, 1, (size_t)n, f);
}

/* Microseconds with nanosecond decimals: 1234567 ns -> 1234.567 */
static void put_us(FILE *f, int64_t ns)
{
    char buf[32];
    int n = an_fmt_fixed(buf, ns, 3, 3);
    fwrite_unlocked(buf, 1, (size_t)n, f);
}

static void put_lit(FILE *f, const char *s) { fputs_unlocked(s, f); }

typedef struct thread_track {
    int64_t thread, tid;
} thread_track;

/* The tid of a thread's track (thread id -> tid; an unknown id: itself + 1). */
static int64_t tid_of(const chrome *c, int64_t thread)
{
    size_t lo = 0, hi = c->n_tracks;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (c->tracks[m].thread < thread) lo = m + 1;
        else hi = m;
    }
    return lo < c->n_tracks && c->tracks[lo].thread == thread ? c->tracks[lo].tid : thread + 1;
}

/* The process of a thread's events: its rank's on a set. */
static long long pid_of(const chrome *c, int64_t thread)
{
    if (c->thread_pid && thread >= 0 && (uint64_t)thread < c->n_thread_pid) return c->thread_pid[thread];
    return c->pid;
}

static void event_head(chrome *c, const char *ph, uint32_t stage, int64_t ts_ns)
{
    FILE *f = c->f;
    put_lit(f, ",\n{\"name\":");
    put_lit(f, c->stage_json[stage]);
    put_lit(f, ",\"cat\":");
    put_lit(f, c->kind_json[stage]);
    put_lit(f, ",\"ph\":\"");
    put_lit(f, ph);
    put_lit(f, "\",\"pid\":");
    put_i64(f, pid_of(c, c->tid));
    put_lit(f, ",\"tid\":");
    put_i64(f, c->track);
    put_lit(f, ",\"ts\":");
    put_us(f, ts_ns - c->t->origin_ns);
    c->n_events++;
}

static void event_args(chrome *c, uint32_t depth, int64_t start_ns, int unfinished)
{
    FILE *f = c->f;
    put_lit(f, ",\"args\":{\"depth\":");
    put_i64(f, depth);
    int has;
    uint64_t step = an_step_of(c->t, start_ns, &has);
    if (has) {
        put_lit(f, ",\"step\":");
        put_i64(f, (int64_t)step);
    }
    if (unfinished) put_lit(f, ",\"unfinished\":true");
    put_lit(f, "}}");
}

static void write_complete(chrome *c, uint32_t stage, uint32_t depth, int64_t start_ns, int64_t end_ns)
{
    event_head(c, "X", stage, start_ns);
    put_lit(c->f, ",\"dur\":");
    put_us(c->f, end_ns > start_ns ? end_ns - start_ns : 0); /* never negative, even for a damaged trace */
    event_args(c, depth, start_ns, 0);
}

static void write_begin(chrome *c, const pending *p, int unfinished)
{
    event_head(c, "B", p->stage, p->start_ns);
    event_args(c, p->depth, p->start_ns, unfinished);
}

/* ---- GPU activity (Kineto's layout, for Perfetto and Holistic Trace Analysis) ---------- */

/* A CUDA API call, exported on its calling thread's track. */
typedef struct api_call {
    int64_t thread;        /* thread id; -1: a thread not in `threads` (then os_tid) */
    int64_t os_tid;
    int64_t start_ns, end_ns; /* end_ns cut so that the slice nests (cut_calls, nest_calls) */
    uint32_t correlation, cbid, driver;
    const char *name;      /* valid while c->api_it is open */
    const char *tname;     /* thread -1: the OS thread's name (gpu_threads), NULL unknown; as name */
} api_call;

static int api_cmp(const void *pa, const void *pb)
{
    const api_call *a = pa, *b = pb;
    if (a->thread != b->thread) return a->thread < b->thread ? -1 : 1;
    if (a->os_tid != b->os_tid) return a->os_tid < b->os_tid ? -1 : 1;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns ? -1 : 1; /* the outer call first */
    return a->correlation < b->correlation ? -1 : a->correlation > b->correlation;
}

/* Loads every API call, sorted by thread then start (outer calls first). */
static int load_api_calls(chrome *c)
{
    int rc = st_gpu_api_iter_open(&c->api_it, c->t->r, INT64_MIN, INT64_MAX);
    if (rc) return rc;
    st_gpu_row g;
    size_t cap = 0;
    while ((rc = st_gpu_iter_next(c->api_it, &g)) == 1) {
        if (c->n_api == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            api_call *n = realloc(c->api, ncap * sizeof *n);
            if (!n) return ST_ENOMEM;
            c->api = n;
            cap = ncap;
        }
        api_call *a = &c->api[c->n_api++];
        a->thread = g.thread;
        a->os_tid = g.thread >= 0 ? 0 : g.rec.os_tid;
        a->start_ns = g.rec.start_ns;
        a->end_ns = g.rec.start_ns + (g.rec.dur_ns > 0 ? g.rec.dur_ns : 0);
        a->correlation = g.rec.correlation;
        a->cbid = g.rec.copy_kind;
        a->driver = g.stream == 1;
        a->name = g.name;
        a->tname = g.thread >= 0 ? NULL : g.launch_thread;
    }
    if (rc < 0) return rc;
    if (c->n_api) qsort(c->api, c->n_api, sizeof *c->api, api_cmp);
    return 0;
}

/* The calls of one thread: [*lo, *hi) of c->api. */
static void api_span(const chrome *c, int64_t thread, int64_t os_tid, size_t from, size_t *lo, size_t *hi)
{
    size_t i = from, end = c->n_api;
    while (i < end) { /* the first call not before (thread, os_tid) */
        size_t m = i + (end - i) / 2;
        const api_call *a = &c->api[m];
        if (a->thread < thread || (a->thread == thread && a->os_tid < os_tid)) i = m + 1;
        else end = m;
    }
    *lo = i;
    while (i < c->n_api && c->api[i].thread == thread && c->api[i].os_tid == os_tid) i++;
    *hi = i;
}

/* Calls of one thread that straddle another call's end are cut at it, so
 * that the calls nest (a driver call inside its runtime call). */
static void nest_calls(api_call *a, size_t n)
{
    int64_t stack[64];
    int top = 0;
    for (size_t i = 0; i < n; i++) {
        while (top && stack[top - 1] <= a[i].start_ns) top--;
        if (top && a[i].end_ns > stack[top - 1]) a[i].end_ns = stack[top - 1];
        if (top < 64) stack[top++] = a[i].end_ns;
        else a[i].end_ns = a[i].start_ns; /* 64 deep: an instant nests whatever it is in */
    }
}

static void write_api_calls(chrome *c, size_t lo, size_t hi, long long pid, int64_t tid)
{
    FILE *f = c->f;
    nest_calls(c->api + lo, hi - lo);
    for (size_t i = lo; i < hi; i++) {
        const api_call *a = &c->api[i];
        put_lit(f, ",\n{\"name\":");
        if (a->name) {
            an_json_string(f, a->name);
        } else {
            put_lit(f, a->driver ? "\"CUDA driver cbid " : "\"CUDA runtime cbid ");
            put_i64(f, a->cbid);
            put_lit(f, "\"");
        }
        put_lit(f, a->driver ? ",\"cat\":\"cuda_driver\",\"ph\":\"X\",\"pid\":" : ",\"cat\":\"cuda_runtime\",\"ph\":\"X\",\"pid\":");
        put_i64(f, pid);
        put_lit(f, ",\"tid\":");
        put_i64(f, tid);
        put_lit(f, ",\"ts\":");
        put_us(f, a->start_ns - c->t->origin_ns);
        put_lit(f, ",\"dur\":");
        put_us(f, a->end_ns - a->start_ns);
        put_lit(f, ",\"args\":{\"cbid\":");
        put_i64(f, a->cbid);
        put_lit(f, ",\"correlation\":");
        put_i64(f, a->correlation);
        put_lit(f, ",\"External id\":");
        put_i64(f, a->correlation);
        put_lit(f, "}}");
        c->n_events++;
    }
}

/* Calls of threads that are not in `threads` (a thread that never opened a
 * range): a track per OS thread id, named "os thread N", whose tids follow
 * the traced threads' (an OS id could equal a traced thread's tid). */
static void write_untraced_calls(chrome *c)
{
    int64_t tid = c->n_tracks;
    size_t i = 0;
    while (i < c->n_api && c->api[i].thread < 0) {
        int64_t os_tid = c->api[i].os_tid;
        size_t lo, hi;
        api_span(c, -1, os_tid, i, &lo, &hi);
        FILE *f = c->f;
        tid++;
        put_lit(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
        put_i64(f, c->pid);
        put_lit(f, ",\"tid\":");
        put_i64(f, tid);
        put_lit(f, ",\"args\":{\"name\":");
        char label[128];
        const char *tname = c->api[i].tname;
        if (tname)
            snprintf(label, sizeof label, "os thread %lld (%.80s)", (long long)os_tid, tname); /* UTF-8 may be cut: an_json_string repairs */
        else
            snprintf(label, sizeof label, "os thread %lld", (long long)os_tid);
        an_json_string(f, label);
        put_lit(f, "}}");
        write_api_calls(c, lo, hi, c->pid, tid);
        i = hi;
    }
}

/* Flow from a launching call to its GPU record (Kineto's "ac2g" arrows). */
typedef struct flow {
    int64_t id; /* the correlation id; on a set, rank << 32 | correlation (ids are per rank) */
    int32_t device;
    int64_t thread, launch_ns, tid, start_ns;
} flow;

static int flow_cmp(const void *pa, const void *pb)
{
    const flow *a = pa, *b = pb;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    return (a->device > b->device) - (a->device < b->device);
}

/* A CUPTI synchronization record, written on a sync track of its device. */
typedef struct sync_rec {
    int64_t start_ns, end_ns;
    uint32_t stream, type, correlation;
    int64_t thread, stage;
} sync_rec;

static int sync_cmp(const void *pa, const void *pb)
{
    const sync_rec *a = pa, *b = pb;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    return (a->end_ns < b->end_ns) - (a->end_ns > b->end_ns);
}

#define CONTEXT_STREAM 4294967295u /* CUPTI's stream id of a context-wide synchronization */
#define GPU_PID_BASE 1000000
/* A set's process order: rank r's at r * SET_SORT_STRIDE, its device d's at
 * r * SET_SORT_STRIDE + 1 + d. */
#define SET_SORT_STRIDE (ST_SET_DEVICE_STRIDE + 1)
static void process_meta(chrome *c, long long pid, const char *label, int64_t sort_index, int first);

static const char *sync_name(uint32_t type)
{
    /* CUpti_ActivitySynchronizationType; lower case, so that HTA, which counts
     * records named "Context Sync" or "Event Sync" as GPU time, does not. */
    static const char *const n[] = {"sync", "event sync", "stream wait event", "stream sync", "context sync"};
    return type <= 4 ? n[type] : "sync";
}

static void put_gpu_name(FILE *f, const st_gpu_row *g)
{
    static const char *const mem[] = {"Unknown", "Pageable", "Pinned", "Device", "Managed", "Other"};
    switch (g->rec.kind) {
    case ST_GPU_KERNEL:
        if (g->name) an_json_string(f, an_demangle(g->name)); /* the raw name: args.mangled */
        else put_lit(f, "\"kernel\"");
        return;
    case ST_GPU_MEMCPY:
        put_lit(f, "\"Memcpy ");
        put_lit(f, st_gpu_copy_name(g->rec.copy_kind));
        put_lit(f, " (");
        put_lit(f, mem[g->rec.src_mem <= ST_MEM_OTHER ? g->rec.src_mem : ST_MEM_OTHER]);
        put_lit(f, " -> ");
        put_lit(f, mem[g->rec.dst_mem <= ST_MEM_OTHER ? g->rec.dst_mem : ST_MEM_OTHER]);
        put_lit(f, ")\"");
        return;
    default:
        put_lit(f, "\"Memset (");
        put_lit(f, mem[g->rec.dst_mem <= ST_MEM_OTHER ? g->rec.dst_mem : ST_MEM_OTHER]);
        put_lit(f, ")\"");
    }
}

static void put_launch_args(chrome *c, int64_t thread, int64_t stage)
{
    if (thread >= 0) {
        put_lit(c->f, ",\"thread\":");
        put_i64(c->f, thread);
    }
    if (stage >= 0 && (uint64_t)stage < st_reader_n_stages(c->t->r)) {
        put_lit(c->f, ",\"stage\":");
        put_lit(c->f, c->stage_json[stage]);
    }
}

static void gpu_track_meta(chrome *c, int64_t pid, int64_t tid, const char *name, int64_t n, int64_t sort)
{
    FILE *f = c->f;
    put_lit(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
    put_i64(f, pid);
    put_lit(f, ",\"tid\":");
    put_i64(f, tid);
    put_lit(f, ",\"args\":{\"name\":\"");
    put_lit(f, name);
    if (n >= 0) {
        put_lit(f, " ");
        put_i64(f, n);
    }
    put_lit(f, "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":");
    put_i64(f, pid);
    put_lit(f, ",\"tid\":");
    put_i64(f, tid);
    put_lit(f, ",\"args\":{\"sort_index\":");
    put_i64(f, sort);
    put_lit(f, "}}");
}

/* The synchronization records of one device, on tracks of their own: a
 * slice on a stream's track counts as that stream's work in HTA, and syncs
 * overlap the kernels they wait for. Context-wide syncs go to "context
 * sync" tracks, the others to "sync" tracks; a record that overlaps the
 * last one of every track of its group opens another track ("sync 2"), so
 * that the slices of a track never overlap. Track ids follow the device's
 * largest stream id. */
/* A min-heap of track numbers by the end of their last slice. */
static void heap_down(size_t *h, size_t n, const int64_t *end, size_t i)
{
    for (;;) {
        size_t m = i, a = 2 * i + 1, b = a + 1;
        if (a < n && end[h[a]] < end[h[m]]) m = a;
        if (b < n && end[h[b]] < end[h[m]]) m = b;
        if (m == i) return;
        size_t x = h[i];
        h[i] = h[m], h[m] = x, i = m;
    }
}

static void heap_up(size_t *h, const int64_t *end, size_t i)
{
    while (i && end[h[(i - 1) / 2]] > end[h[i]]) {
        size_t p = (i - 1) / 2, x = h[i];
        h[i] = h[p], h[p] = x, i = p;
    }
}

static int write_syncs(chrome *c, int64_t pid, int32_t device, sync_rec *s, size_t n, int64_t first_tid)
{
    if (!n) return 0;
    qsort(s, n, sizeof *s, sync_cmp);
    int64_t tid = first_tid;
    for (int ctx = 1; ctx >= 0; ctx--) {
        int64_t *lane_end = NULL;
        size_t *heap = NULL;
        size_t n_lanes = 0, cap = 0;
        int64_t lane_tid0 = tid;
        for (size_t i = 0; i < n; i++) {
            if ((s[i].stream == CONTEXT_STREAM) != ctx) continue;
            size_t l;
            if (n_lanes && lane_end[heap[0]] <= s[i].start_ns) {
                l = heap[0]; /* the track free the longest */
                lane_end[l] = s[i].end_ns;
                heap_down(heap, n_lanes, lane_end, 0);
            } else {
                if (n_lanes == cap) {
                    cap = cap ? cap * 2 : 4;
                    int64_t *nl = realloc(lane_end, cap * sizeof *nl);
                    if (nl) lane_end = nl;
                    size_t *nh = nl ? realloc(heap, cap * sizeof *nh) : NULL;
                    if (nh) heap = nh;
                    if (!nl || !nh) {
                        free(lane_end);
                        free(heap);
                        return ST_ENOMEM;
                    }
                }
                l = n_lanes;
                lane_end[l] = s[i].end_ns;
                heap[n_lanes++] = l;
                heap_up(heap, lane_end, n_lanes - 1);
                gpu_track_meta(c, pid, tid, ctx ? "context sync" : "sync", l ? (int64_t)l + 1 : -1,
                               tid - first_tid + 1000000000LL);
                tid++;
            }
            FILE *f = c->f;
            put_lit(f, ",\n{\"name\":\"");
            put_lit(f, sync_name(s[i].type));
            put_lit(f, "\",\"cat\":\"cuda_sync\",\"ph\":\"X\",\"pid\":");
            put_i64(f, pid);
            put_lit(f, ",\"tid\":");
            put_i64(f, lane_tid0 + (int64_t)l);
            put_lit(f, ",\"ts\":");
            put_us(f, s[i].start_ns - c->t->origin_ns);
            put_lit(f, ",\"dur\":");
            put_us(f, s[i].end_ns - s[i].start_ns);
            put_lit(f, ",\"args\":{\"device\":");
            put_i64(f, device);
            put_lit(f, ",\"synced_stream\":");
            put_i64(f, s[i].stream);
            put_lit(f, ",\"correlation\":");
            put_i64(f, s[i].correlation);
            put_launch_args(c, s[i].thread, s[i].stage);
            put_lit(f, "}}");
            c->n_events++;
        }
        free(lane_end);
        free(heap);
    }
    return 0;
}

/* The records of one stream, written in start order (longer first on a
 * tie, so that an enclosing record comes before what it holds): CUPTI
 * delivers some records late, after later ones of their stream, so stored
 * order is not start order. After sorting, a record that starts inside an
 * earlier one still open on the track and ends after it (CUPTI's clock) is
 * cut at that end, so that the track's slices nest; 64 deep, a record
 * becomes zero-length. */
static int gpu_row_start_cmp(const void *pa, const void *pb)
{
    const st_gpu_row *a = pa, *b = pb;
    if (a->rec.start_ns != b->rec.start_ns) return a->rec.start_ns < b->rec.start_ns ? -1 : 1;
    if (a->rec.dur_ns != b->rec.dur_ns) return a->rec.dur_ns > b->rec.dur_ns ? -1 : 1;
    return (a->rec.correlation > b->rec.correlation) - (a->rec.correlation < b->rec.correlation);
}

static int write_stream(chrome *c, int64_t pid, st_gpu_row *rows, size_t n, size_t *flow_cap)
{
    FILE *f = c->f;
    int64_t stack[64]; /* ends of the slices open on the track */
    int top = 0;
    qsort(rows, n, sizeof *rows, gpu_row_start_cmp);
    for (size_t i = 0; i < n; i++) {
        const st_gpu_row *g = &rows[i];
        int64_t start = g->rec.start_ns, end = start + (g->rec.dur_ns > 0 ? g->rec.dur_ns : 0);
        while (top && stack[top - 1] <= start) top--;
        if (top && end > stack[top - 1]) end = stack[top - 1];
        if (top < 64) stack[top++] = end;
        else end = start; /* 64 deep: an instant nests whatever it is in */
        put_lit(f, ",\n{\"name\":");
        put_gpu_name(f, g);
        put_lit(f, g->rec.kind == ST_GPU_KERNEL ? ",\"cat\":\"kernel\""
                   : g->rec.kind == ST_GPU_MEMCPY ? ",\"cat\":\"gpu_memcpy\""
                                                   : ",\"cat\":\"gpu_memset\"");
        put_lit(f, ",\"ph\":\"X\",\"pid\":");
        put_i64(f, pid);
        put_lit(f, ",\"tid\":");
        put_i64(f, g->stream);
        put_lit(f, ",\"ts\":");
        put_us(f, start - c->t->origin_ns);
        put_lit(f, ",\"dur\":");
        put_us(f, end - start);
        put_lit(f, ",\"args\":{\"device\":");
        put_i64(f, g->device);
        put_lit(f, ",\"stream\":");
        put_i64(f, g->stream);
        put_lit(f, ",\"correlation\":");
        put_i64(f, g->rec.correlation);
        put_lit(f, ",\"External id\":");
        put_i64(f, g->rec.correlation);
        if (g->rec.kind == ST_GPU_KERNEL && g->name && an_demangle(g->name) != g->name) {
            put_lit(f, ",\"mangled\":");
            an_json_string(f, g->name);
        }
        if (g->rec.kind != ST_GPU_KERNEL) {
            put_lit(f, ",\"bytes\":");
            put_i64(f, (int64_t)g->rec.bytes);
        }
        put_launch_args(c, g->thread, g->stage);
        put_lit(f, "}}");
        c->n_events++;
        if (g->thread >= 0 && g->launch_ns != INT64_MIN) {
            if (c->n_flows == *flow_cap) {
                *flow_cap = *flow_cap ? *flow_cap * 2 : 1024;
                flow *nf = realloc(c->flows, *flow_cap * sizeof *nf);
                if (!nf) return ST_ENOMEM;
                c->flows = nf;
            }
            int64_t scope = c->rank_pid ? g->device / ST_SET_DEVICE_STRIDE : 0;
            c->flows[c->n_flows++] = (flow){scope << 32 | g->rec.correlation, g->device, g->thread, g->launch_ns,
                                            g->stream, start};
        }
    }
    return 0;
}

/* GPU tracks, as Kineto writes them: one process per device ("GPU n", pid
 * 1000000 + n, sorted after the CPU process), a track per stream (tid = the
 * stream id) with kernels, copies and memsets as complete events (cat
 * kernel, gpu_memcpy, gpu_memset; args device, stream, correlation,
 * External id, the launching thread and stage), synchronizations on tracks
 * of their own (write_syncs), and a flow from each launching API call to
 * its GPU record (ac2g). */
static int chrome_gpu_tracks(chrome *c)
{
    st_reader *r = c->t->r;
    int has = st_reader_has_gpu(r);
    if (has <= 0) return has;
    st_gpu_iter *it;
    int rc = st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
    if (rc) return rc;
    FILE *f = c->f;
    st_gpu_row g;
    int64_t last_device = INT64_MIN, last_stream = -1, max_stream = -1;
    st_gpu_row *rows = NULL; /* the current stream's records */
    size_t n_rows = 0, row_cap = 0;
    sync_rec *syncs = NULL;
    size_t n_syncs = 0, sync_cap = 0, flow_cap = 0;
    int32_t device = 0;
    for (;;) {
        rc = st_gpu_iter_next(it, &g);
        if (rc < 0) break;
        int done = rc == 0;
        if (n_rows && (done || g.device != last_device || (g.rec.kind != ST_GPU_SYNC && (int64_t)g.stream != last_stream))) {
            rc = write_stream(c, GPU_PID_BASE + last_device, rows, n_rows, &flow_cap);
            n_rows = 0;
            if (rc) break;
        }
        if (last_device != INT64_MIN && (done || g.device != last_device)) {
            rc = write_syncs(c, GPU_PID_BASE + last_device, device, syncs, n_syncs, max_stream + 1);
            n_syncs = 0;
            if (rc) break;
        }
        if (done) break;
        device = g.device;
        int64_t pid = GPU_PID_BASE + (int64_t)g.device;
        if (g.device != last_device && c->rank_pid) {
            /* a set: "GPU d (rank r)", sorted right after rank r's process */
            int32_t rk = g.device / ST_SET_DEVICE_STRIDE, d = g.device % ST_SET_DEVICE_STRIDE;
            char label[64];
            snprintf(label, sizeof label, "GPU %d (rank %d)", (int)d, (int)rk);
            process_meta(c, pid, label, (int64_t)rk * SET_SORT_STRIDE + 1 + d, 0);
            last_device = g.device;
            last_stream = -1;
            max_stream = -1;
        } else if (g.device != last_device) {
            put_lit(f, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
            put_i64(f, pid);
            put_lit(f, ",\"tid\":0,\"args\":{\"name\":\"GPU ");
            put_i64(f, g.device);
            put_lit(f, "\"}},\n{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":");
            put_i64(f, pid);
            put_lit(f, ",\"tid\":0,\"args\":{\"labels\":\"GPU ");
            put_i64(f, g.device);
            put_lit(f, "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":");
            put_i64(f, pid);
            put_lit(f, ",\"tid\":0,\"args\":{\"sort_index\":");
            put_i64(f, pid);
            put_lit(f, "}}");
            last_device = g.device;
            last_stream = -1;
            max_stream = -1;
        }
        if (g.rec.kind == ST_GPU_SYNC) {
            if (n_syncs == sync_cap) {
                sync_cap = sync_cap ? sync_cap * 2 : 1024;
                sync_rec *ns = realloc(syncs, sync_cap * sizeof *ns);
                if (!ns) {
                    rc = ST_ENOMEM;
                    break;
                }
                syncs = ns;
            }
            syncs[n_syncs++] = (sync_rec){g.rec.start_ns, g.rec.start_ns + (g.rec.dur_ns > 0 ? g.rec.dur_ns : 0),
                                          g.stream, g.rec.copy_kind, g.rec.correlation, g.thread, g.stage};
            continue;
        }
        if ((int64_t)g.stream != last_stream) {
            char label[64]; /* "GPU d stream s": the device as its process is named */
            snprintf(label, sizeof label, "GPU %d stream", (int)(c->rank_pid ? g.device % ST_SET_DEVICE_STRIDE : g.device));
            gpu_track_meta(c, pid, g.stream, label, g.stream, g.stream);
            last_stream = g.stream;
            if ((int64_t)g.stream > max_stream) max_stream = g.stream;
        }
        if (n_rows == row_cap) {
            row_cap = row_cap ? row_cap * 2 : 1024;
            st_gpu_row *nr = realloc(rows, row_cap * sizeof *nr);
            if (!nr) {
                rc = ST_ENOMEM;
                break;
            }
            rows = nr;
        }
        rows[n_rows++] = g;
    }
    st_gpu_iter_close(it);
    free(rows);
    free(syncs);
    if (rc < 0 || rc == ST_ENOMEM) return rc;
    /* One arrow per correlation id (the kernels of a CUDA graph share their
     * launch's): to the first record it launched. */
    if (c->n_flows) qsort(c->flows, c->n_flows, sizeof *c->flows, flow_cmp);
    for (size_t i = 0; i < c->n_flows; i++) {
        const flow *fl = &c->flows[i];
        if (i && fl->id == c->flows[i - 1].id) continue;
        put_lit(f, ",\n{\"name\":\"ac2g\",\"cat\":\"ac2g\",\"ph\":\"s\",\"id\":");
        put_i64(f, fl->id);
        put_lit(f, ",\"pid\":");
        put_i64(f, pid_of(c, fl->thread));
        put_lit(f, ",\"tid\":");
        put_i64(f, tid_of(c, fl->thread));
        put_lit(f, ",\"ts\":");
        put_us(f, fl->launch_ns - c->t->origin_ns);
        put_lit(f, "},\n{\"name\":\"ac2g\",\"cat\":\"ac2g\",\"ph\":\"f\",\"bp\":\"e\",\"id\":");
        put_i64(f, fl->id);
        put_lit(f, ",\"pid\":");
        put_i64(f, GPU_PID_BASE + (int64_t)fl->device);
        put_lit(f, ",\"tid\":");
        put_i64(f, fl->tid);
        put_lit(f, ",\"ts\":");
        put_us(f, fl->start_ns - c->t->origin_ns);
        put_lit(f, "}");
        c->n_events += 2;
    }
    return 0;
}

static pending *queued(chrome *c, uint64_t seq) { return &c->queue[seq % QUEUE_MAX]; }

/* Writes the finished ranges at the head of the queue (start order). */
static void drain_ready(chrome *c)
{
    while (c->n_queued) {
        pending *p = queued(c, c->head_seq);
        if (!p->ended) break;
        write_complete(c, p->stage, p->depth, p->start_ns, p->end_ns);
        c->head_seq++;
        c->n_queued--;
    }
}

static void on_begin(chrome *c, const st_event *ev)
{
    if (c->n_queued == QUEUE_MAX) {
        /* The head is still open (else it would have been written): it
         * becomes a "B" event now, its end an "E" event later. */
        pending *p = queued(c, c->head_seq);
        write_begin(c, p, 0);
        if (p->depth <= ST_MAX_DEPTH) c->open_seq[p->depth] = EMITTED_BEGIN;
        c->head_seq++;
        c->n_queued--;
        drain_ready(c);
    }
    uint64_t seq = c->head_seq + c->n_queued++;
    *queued(c, seq) = (pending){ev->stage, ev->depth, ev->ts_ns, 0, 0};
    if (ev->depth <= ST_MAX_DEPTH) c->open_seq[ev->depth] = seq;
}

static void on_end(chrome *c, const st_event *ev)
{
    uint64_t seq = ev->depth <= ST_MAX_DEPTH ? c->open_seq[ev->depth] : NOT_QUEUED;
    if (ev->depth <= ST_MAX_DEPTH) c->open_seq[ev->depth] = NOT_QUEUED;
    if (seq == EMITTED_BEGIN) {
        /* Everything queued began inside it, so has ended by now. */
        drain_ready(c);
        event_head(c, "E", ev->stage, ev->ts_ns);
        put_lit(c->f, "}");
        return;
    }
    if (seq == NOT_QUEUED || seq < c->head_seq || seq >= c->head_seq + c->n_queued) {
        /* Began before the first chunk (a damaged trace): the end event
         * knows its start, so write it at once. */
        write_complete(c, ev->stage, ev->depth, ev->start_ns, ev->ts_ns);
        return;
    }
    pending *p = queued(c, seq);
    p->end_ns = ev->ts_ns;
    p->ended = 1;
    drain_ready(c);
}

/* A CUDA API call is a slice on its thread's track, among the thread's
 * ranges: one that straddles a range's begin or end (the two clocks' jitter)
 * is cut at the first such boundary after its start, so that slices nest. */
static void cut_calls(chrome *c, size_t hi, size_t *from, size_t *next, int64_t ts_ns)
{
    while (*next < hi && c->api[*next].start_ns < ts_ns) (*next)++;
    for (size_t i = *from; i < *next; i++)
        if (c->api[i].end_ns > ts_ns) c->api[i].end_ns = ts_ns;
    *from = *next;
}

static int chrome_thread(chrome *c, const st_thread_info *th)
{
    st_event_iter *it = NULL;
    int rc = st_event_iter_open(&it, c->t->r, th->id);
    c->tid = th->id;
    c->track = tid_of(c, th->id);
    c->head_seq = c->n_queued = 0;
    for (int i = 0; i <= ST_MAX_DEPTH; i++) c->open_seq[i] = NOT_QUEUED;
    size_t lo, hi;
    api_span(c, th->id, 0, 0, &lo, &hi);
    size_t cut_from = lo, next = lo;
    st_event ev;
    while (!rc && (rc = st_event_iter_next(it, &ev)) == 1) {
        rc = 0;
        an_progress_add(&c->progress, 1);
        if (lo < hi) cut_calls(c, hi, &cut_from, &next, ev.ts_ns);
        if (ev.is_end) on_end(c, &ev);
        else on_begin(c, &ev);
    }
    st_event_iter_close(it);
    if (rc < 0) return rc;
    /* Ranges that never ended: a begin without an end. */
    while (c->n_queued) {
        pending *p = queued(c, c->head_seq);
        if (p->ended) write_complete(c, p->stage, p->depth, p->start_ns, p->end_ns);
        else write_begin(c, p, 1);
        c->head_seq++;
        c->n_queued--;
    }
    write_api_calls(c, lo, hi, pid_of(c, th->id), c->track);
    return 0;
}

static void put_meta_object(FILE *f, an_trace *t)
{
    sqlite3_stmt *st;
    put_lit(f, "{");
    if (sqlite3_prepare_v2(st_reader_db(t->r), "SELECT key, value FROM main.meta ORDER BY key", -1, &st,
                           NULL) == SQLITE_OK) {
        int first = 1;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *k = (const char *)sqlite3_column_text(st, 0);
            const char *v = (const char *)sqlite3_column_text(st, 1);
            if (!k) continue;
            if (!first) put_lit(f, ",");
            first = 0;
            an_json_string(f, k);
            put_lit(f, ":");
            an_json_string(f, v ? v : "");
        }
        sqlite3_finalize(st);
    }
    put_lit(f, "}");
}

/* "distributedInfo": the backend, rank and world size, where HTA and
 * Kineto look for them (a trace without them: rank 0 of 1), spaced as
 * Kineto writes them: HTA finds a file's rank with the pattern
 * "rank":\s+(\d+) (the first line that matches), which nothing else in the
 * file has, since every other member is written without a space after its
 * colon. The backend: "nccl" with GPU activity (the CUDA trainer's
 * collectives), else "mpi" with more than one rank, else none. */
static void put_distributed_info(FILE *f, an_trace *t)
{
    int64_t rank, world;
    if (an_trace_meta_i64(t, "rank", &rank) != 0 || rank < 0) rank = 0;
    if (an_trace_meta_i64(t, "world_size", &world) != 0 || world < 1) world = 1;
    const char *backend = st_reader_has_gpu(t->r) > 0 ? "nccl" : world > 1 ? "mpi" : NULL;
    put_lit(f, ",\n\"distributedInfo\": {");
    if (backend) {
        put_lit(f, "\"backend\": \"");
        put_lit(f, backend);
        put_lit(f, "\", ");
    }
    put_lit(f, "\"rank\": ");
    put_i64(f, rank);
    put_lit(f, ", \"world_size\": ");
    put_i64(f, world);
    put_lit(f, "}");
}

static void process_meta(chrome *c, long long pid, const char *label, int64_t sort_index, int first)
{
    FILE *f = c->f;
    put_lit(f, first ? "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" : ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
    put_i64(f, pid);
    put_lit(f, ",\"tid\":0,\"args\":{\"name\":");
    an_json_string(f, label);
    put_lit(f, "}}");
    put_lit(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":");
    put_i64(f, pid);
    put_lit(f, ",\"tid\":0,\"args\":{\"sort_index\":");
    put_i64(f, sort_index);
    put_lit(f, "}}");
}

static void chrome_metadata(chrome *c)
{
    FILE *f = c->f;
    st_reader *r = c->t->r;
    char label[256];
    if (c->rank_pid) {
        /* A set: "rank N (host)" per rank, in rank order. */
        for (uint32_t k = 0; k < c->t->n_ranks; k++) {
            const an_trace *rt = &c->t->ranks[k];
            int64_t rank_i = 0;
            an_trace_meta_i64(rt, "rank", &rank_i);
            const char *host = an_trace_meta(rt, "host");
            snprintf(label, sizeof label, "rank %lld (%s)", (long long)rank_i, host ? host : "?");
            process_meta(c, c->rank_pid[k], label, rank_i * SET_SORT_STRIDE, k == 0);
        }
    } else {
        const char *program = an_trace_meta(c->t, "program");
        const char *rank = an_trace_meta(c->t, "rank");
        int64_t rank_i;
        snprintf(label, sizeof label, "%s (rank %s)", program ? program : "stagetrace", rank ? rank : "?");
        process_meta(c, c->pid, label, an_trace_meta_i64(c->t, "rank", &rank_i) == 0 ? rank_i : 0, 1);
    }
    /* Threads in track order (track_order), tid and sort index alike. */
    uint32_t n = st_reader_n_threads(r);
    for (int64_t tid = 1; tid <= (int64_t)n; tid++)
        for (uint32_t i = 0; i < n; i++) {
            const st_thread_info *th = st_reader_thread(r, i);
            if (tid_of(c, th->id) != tid) continue;
            put_lit(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
            put_i64(f, pid_of(c, th->id));
            put_lit(f, ",\"tid\":");
            put_i64(f, tid);
            put_lit(f, ",\"args\":{\"name\":");
            an_json_string(f, th->name);
            put_lit(f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":");
            put_i64(f, pid_of(c, th->id));
            put_lit(f, ",\"tid\":");
            put_i64(f, tid);
            put_lit(f, ",\"args\":{\"sort_index\":");
            put_i64(f, tid);
            put_lit(f, "}}");
        }
}

/* Track order: the trainer's roles in pipeline order (loader, target, post,
 * drafter), then other roles in the order of their first thread, main last;
 * within a role by rank, then name, then id. tids 1, 2, ... in that order. */
typedef struct track_key {
    int cls;
    uint32_t first;
    const st_thread_info *th;
} track_key;

static int track_key_cmp(const void *pa, const void *pb)
{
    const track_key *a = pa, *b = pb;
    if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->th->rank != b->th->rank) return a->th->rank < b->th->rank ? -1 : 1;
    int k = strcmp(a->th->name, b->th->name);
    if (k) return k;
    return (a->th->id > b->th->id) - (a->th->id < b->th->id);
}

static int thread_track_cmp(const void *pa, const void *pb)
{
    const thread_track *a = pa, *b = pb;
    return (a->thread > b->thread) - (a->thread < b->thread);
}

static int track_order(chrome *c)
{
    st_reader *r = c->t->r;
    uint32_t n = st_reader_n_threads(r);
    track_key *k = calloc(n ? n : 1, sizeof *k);
    c->tracks = calloc(n ? n : 1, sizeof *c->tracks);
    if (!k || !c->tracks) {
        free(k);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        const st_thread_info *th = st_reader_thread(r, i);
        int known = an_pipe_known_role(th->role);
        uint32_t first = i;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(st_reader_thread(r, j)->role, th->role) == 0) {
                first = j;
                break;
            }
        /* known roles 0..3 and main (1000) keep their class; others sit between */
        k[i] = (track_key){known >= 0 ? known : 500, known >= 0 ? 0 : first, th};
    }
    qsort(k, n, sizeof *k, track_key_cmp);
    for (uint32_t i = 0; i < n; i++) c->tracks[i] = (thread_track){k[i].th->id, (int64_t)i + 1};
    qsort(c->tracks, n, sizeof *c->tracks, thread_track_cmp);
    c->n_tracks = n;
    free(k);
    return 1;
}

static int chrome_counters(chrome *c)
{
    st_reader *r = c->t->r;
    uint32_t nc = st_reader_n_counters(r);
    char **names = calloc(nc ? nc : 1, sizeof *names);
    char **series = calloc(nc ? nc : 1, sizeof *series);
    if (!names || !series) {
        free(names);
        free(series);
        return ST_ENOMEM;
    }
    for (uint32_t i = 0; i < nc; i++) {
        /* The series is named after the unit ("(items)"): viewers label a
         * counter track "NAME SERIES", so it reads "queue_depth (items)". */
        const st_counter_info *ci = st_reader_counter(r, i);
        char *unit = NULL;
        names[i] = json_quoted(ci->name);
        if (ci->unit && *ci->unit && asprintf(&unit, "(%s)", ci->unit) < 0) unit = NULL;
        series[i] = json_quoted(unit ? unit : "value");
        free(unit);
        if (!names[i] || !series[i]) {
            for (uint32_t j = 0; j <= i; j++) {
                free(names[j]);
                free(series[j]);
            }
            free(names);
            free(series);
            return ST_ENOMEM;
        }
    }
    st_sample_iter *it = NULL;
    int rc = st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
    st_sample_row s;
    while (!rc && (rc = st_sample_iter_next(it, &s)) == 1) {
        rc = 0;
        if (!isfinite(s.value) || s.counter >= nc) {
            c->n_skipped_samples++; /* JSON has no NaN or infinity */
            continue;
        }
        char value[40];
        snprintf(value, sizeof value, "%.17g", s.value);
        FILE *f = c->f;
        put_lit(f, ",\n{\"name\":");
        put_lit(f, names[s.counter]);
        put_lit(f, ",\"ph\":\"C\",\"pid\":");
        put_i64(f, pid_of(c, s.thread));
        put_lit(f, ",\"tid\":");
        put_i64(f, tid_of(c, s.thread));
        put_lit(f, ",\"ts\":");
        put_us(f, s.ts_ns - c->t->origin_ns);
        put_lit(f, ",\"args\":{");
        put_lit(f, series[s.counter]);
        put_lit(f, ":");
        put_lit(f, value);
        put_lit(f, "}}");
        c->n_events++;
    }
    st_sample_iter_close(it);
    for (uint32_t i = 0; i < nc; i++) {
        free(names[i]);
        free(series[i]);
    }
    free(names);
    free(series);
    return rc < 0 ? rc : 0;
}

static void chrome_steps(chrome *c)
{
    st_reader *r = c->t->r;
    uint32_t tid = st_reader_n_threads(r) ? st_reader_thread(r, 0)->id : 0;
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++)
        if (strcmp(st_reader_thread(r, i)->role, "main") == 0) {
            tid = st_reader_thread(r, i)->id;
            break;
        }
    for (uint32_t i = 0; i < st_reader_n_steps(r); i++) {
        const st_step_info *s = st_reader_step(r, i);
        FILE *f = c->f;
        put_lit(f, ",\n{\"name\":\"step ");
        put_i64(f, (int64_t)s->step);
        put_lit(f, "\",\"cat\":\"step\",\"ph\":\"i\",\"s\":\"p\",\"pid\":");
        put_i64(f, pid_of(c, tid));
        put_lit(f, ",\"tid\":");
        put_i64(f, tid_of(c, tid));
        put_lit(f, ",\"ts\":");
        put_us(f, s->ts_ns - c->t->origin_ns);
        put_lit(f, ",\"args\":{\"step\":");
        put_i64(f, (int64_t)s->step);
        put_lit(f, ",\"tokens\":");
        put_i64(f, (int64_t)s->tokens);
        put_lit(f, "}}");
        c->n_events++;
    }
    /* GPU recording paused (gpu_pauses: st_gpu_pause, the sampled capture):
     * a process-scoped instant at each end, so a viewer shows why a GPU
     * track is empty there. */
    for (uint32_t i = 0; i < c->t->n_gpu_pauses; i++) {
        const an_lost_span *p = &c->t->gpu_pauses[i];
        for (int end = 0; end < 2; end++) {
            FILE *f = c->f;
            put_lit(f, end ? ",\n{\"name\":\"GPU recording resumed\"" : ",\n{\"name\":\"GPU recording paused\"");
            put_lit(f, ",\"cat\":\"gpu_recording\",\"ph\":\"i\",\"s\":\"p\",\"pid\":");
            put_i64(f, pid_of(c, tid));
            put_lit(f, ",\"tid\":");
            put_i64(f, tid_of(c, tid));
            put_lit(f, ",\"ts\":");
            put_us(f, (end ? p->t1_ns : p->t0_ns) - c->t->origin_ns);
            put_lit(f, ",\"args\":{\"pause\":");
            put_i64(f, (int64_t)i + 1);
            put_lit(f, "}}");
            c->n_events++;
        }
    }
}

/* Item flows (st_flow_out / st_flow_in) as arrows: one per handoff (an id
 * with exactly one out and one in, the in not earlier: docs/analyze.md,
 * "flow"), "s" at the out on the producer's track (bound to the slice
 * enclosing it, the put) and "f" at the in on the consumer's track, bound
 * to the next slice that begins there (the in follows the get's wait, so
 * no slice encloses it). Category "flow", name "item", ids 1, 2, ... in the
 * order of the outs. */
typedef struct item_rec {
    uint64_t id;
    int64_t ts_ns;
    uint32_t thread, dir;
} item_rec;

static int item_rec_cmp(const void *pa, const void *pb)
{
    const item_rec *a = pa, *b = pb;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    if (a->dir != b->dir) return a->dir < b->dir ? -1 : 1; /* out first */
    return (a->ts_ns > b->ts_ns) - (a->ts_ns < b->ts_ns);
}

static int item_out_cmp(const void *pa, const void *pb)
{
    const item_rec *a = pa, *b = pb; /* pairs: [0] out, [1] in */
    if (a->ts_ns != b->ts_ns) return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->thread != b->thread) return a->thread < b->thread ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int chrome_item_flows(chrome *c)
{
    st_flow_iter *it;
    int rc = st_flow_iter_open(&it, c->t->r, -1, INT64_MIN, INT64_MAX);
    if (rc) return rc;
    item_rec *v = NULL;
    size_t n = 0, cap = 0;
    st_flow_row row;
    while ((rc = st_flow_iter_next(it, &row)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            item_rec *a = realloc(v, cap * sizeof *a);
            if (!a) {
                rc = ST_ENOMEM;
                break;
            }
            v = a;
        }
        v[n++] = (item_rec){row.id, row.ts_ns, row.thread, row.dir};
    }
    st_flow_iter_close(it);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n) qsort(v, n, sizeof *v, item_rec_cmp);
    size_t pairs = 0; /* the handoffs, packed as (out, in) at the front */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].id == v[i].id) j++;
        if (j - i == 2 && v[i].dir == ST_FLOW_OUT && v[i + 1].dir == ST_FLOW_IN &&
            (v[i + 1].ts_ns >= v[i].ts_ns ||
             v[i].ts_ns - v[i + 1].ts_ns <= st_reader_flow_slack(c->t->r, v[i].thread, v[i + 1].thread))) {
            item_rec out = v[i], in = v[i + 1];
            if (in.ts_ns < out.ts_ns) in.ts_ns = out.ts_ns; /* within the clocks' uncertainty */
            v[2 * pairs] = out;
            v[2 * pairs + 1] = in;
            pairs++;
        }
        i = j;
    }
    if (pairs) qsort(v, pairs, 2 * sizeof *v, item_out_cmp);
    FILE *f = c->f;
    for (size_t k = 0; k < pairs; k++) {
        for (int end = 0; end < 2; end++) {
            const item_rec *e = &v[2 * k + end];
            put_lit(f, end ? ",\n{\"name\":\"item\",\"cat\":\"flow\",\"ph\":\"f\",\"id\":"
                           : ",\n{\"name\":\"item\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":");
            put_i64(f, (int64_t)k + 1);
            put_lit(f, ",\"pid\":");
            put_i64(f, pid_of(c, e->thread));
            put_lit(f, ",\"tid\":");
            put_i64(f, tid_of(c, e->thread));
            put_lit(f, ",\"ts\":");
            put_us(f, e->ts_ns - c->t->origin_ns);
            put_lit(f, "}");
        }
        c->n_events += 2;
    }
    free(v);
    return 0;
}

/* A rank set: each rank's process id is the pid it recorded (meta pid, 1 to
 * 2147483646) unless that is missing or a lower rank's already (ranks on
 * other hosts), then 1000000000 + its rank. 0: no memory. */
static int set_pids(chrome *c)
{
    const an_trace *t = c->t;
    if (!t->is_set) return 1;
    st_reader *r = t->r;
    uint32_t nt = st_reader_n_threads(r);
    c->rank_pid = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *c->rank_pid);
    c->thread_pid = calloc(nt ? nt : 1, sizeof *c->thread_pid);
    if (!c->rank_pid || !c->thread_pid) return 0;
    c->n_thread_pid = nt;
    int64_t *rank_of = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *rank_of);
    if (!rank_of) return 0;
    for (uint32_t k = 0; k < t->n_ranks; k++) {
        int64_t pid, rank = 0;
        an_trace_meta_i64(&t->ranks[k], "rank", &rank);
        rank_of[k] = rank;
        int ok = an_trace_meta_i64(&t->ranks[k], "pid", &pid) == 0 && pid > 0 && pid < INT32_MAX;
        for (uint32_t j = 0; ok && j < k; j++) ok = c->rank_pid[j] != pid;
        c->rank_pid[k] = ok ? pid : 1000000000LL + rank;
    }
    for (uint32_t i = 0; i < nt; i++) {
        const st_thread_info *th = st_reader_thread(r, i);
        long long pid = c->pid;
        for (uint32_t k = 0; k < t->n_ranks; k++)
            if (rank_of[k] == th->rank) pid = c->rank_pid[k];
        if (th->id < nt) c->thread_pid[th->id] = pid;
    }
    free(rank_of);
    return 1;
}

int an_export_chrome(an_trace *t, const char *path, int overwrite)
{
    an_file o;
    int rc = an_file_open(&o, "export", path, overwrite);
    if (rc) return rc;
    st_reader *r = t->r;
    chrome c;
    memset(&c, 0, sizeof c);
    c.f = o.f;
    c.t = t;
    int64_t pid;
    c.pid = an_trace_meta_i64(t, "pid", &pid) == 0 && pid > 0 && pid < INT32_MAX ? pid : 1;
    int pids_ok = set_pids(&c) && track_order(&c);
    uint32_t ns = st_reader_n_stages(r);
    c.stage_json = calloc(ns ? ns : 1, sizeof *c.stage_json);
    c.kind_json = calloc(ns ? ns : 1, sizeof *c.kind_json);
    c.queue = malloc(QUEUE_MAX * sizeof *c.queue);
    int ok = c.stage_json && c.kind_json && c.queue && pids_ok;
    static const char *const kinds[ST_KIND_COUNT] = {"\"work\"", "\"wait_input\"", "\"wait_output\"",
                                                     "\"sync\"", "\"comm\"", "\"copy\""};
    for (uint32_t s = 0; s < ns && ok; s++) {
        const st_stage_info *si = st_reader_stage(r, s);
        c.stage_json[s] = json_quoted(si->name);
        c.kind_json[s] = (unsigned)si->kind < ST_KIND_COUNT ? kinds[si->kind] : "\"work\"";
        ok = c.stage_json[s] != NULL;
    }
    int st = ok ? 0 : ST_ENOMEM;
    if (ok) {
        FILE *f = o.f;
        put_lit(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":");
        put_meta_object(f, t);
        put_distributed_info(f, t);
        put_lit(f, ",\n\"traceEvents\":[\n");
        chrome_metadata(&c);
        st = st_reader_has_gpu(r);
        if (st > 0) st = load_api_calls(&c);
        an_progress_start(&c.progress, "export --chrome", t->n_ranges_hint * 2);
        for (uint32_t i = 0; i < st_reader_n_threads(r) && !st; i++) st = chrome_thread(&c, st_reader_thread(r, i));
        an_progress_end(&c.progress);
        if (!st) write_untraced_calls(&c);
        if (!st) st = chrome_counters(&c);
        if (!st) chrome_steps(&c);
        if (!st) st = chrome_item_flows(&c);
        if (!st) st = chrome_gpu_tracks(&c);
        put_lit(f, "\n]}\n");
    }
    for (uint32_t s = 0; c.stage_json && s < ns; s++) free(c.stage_json[s]);
    free(c.stage_json);
    free((void *)c.kind_json);
    free(c.queue);
    free(c.rank_pid);
    free(c.thread_pid);
    free(c.tracks);
    st_gpu_iter_close(c.api_it);
    free(c.api);
    free(c.flows);
    if (st == ST_ENOMEM) an_error("out of memory");
    else if (st) an_trace_fail(t);
    rc = an_file_close(&o, st == 0);
    if (st) return st == ST_ENOMEM ? AN_EXIT_FAIL : AN_EXIT_USAGE;
    if (!rc && c.n_skipped_samples)
        an_warn("export: %llu counter samples with NaN or infinite values left out of %s (JSON has no such numbers)",
                (unsigned long long)c.n_skipped_samples, path);
    return rc;
}
