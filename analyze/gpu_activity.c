/* gpu_activity.c: GPU records read in time slices, and the GPU idle split
 * (see gpu_activity.h).
 *
 * The records of a device are read a slice of about an_gpu_slice_records at
 * a time (slices judged from the chunk headers), sorted by start in each
 * slice, and handed to a callback, so memory follows the slice, not the
 * trace. The idle split walks one device's records in start order, keeping
 * the end of the time accounted so far; each gap is split by where the API
 * call that launched the next record began, and its host-wait part by the
 * stage the launching thread was in (its ranges flattened into segments of
 * the innermost stage, loaded once per thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_activity.h"

static int gpu_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* ---- GPU records in time slices ------------------------------------------------------------ */

uint32_t an_gpu_slice_records = AN_GPU_SLICE_RECORDS;

int an_gpu_devices(an_trace *t, int32_t **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    int has = st_reader_has_gpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    int rc = st_reader_gpu_devices(t->r, out, n);
    if (rc == ST_ENOMEM) return gpu_oom();
    return rc ? an_trace_fail(t) : AN_EXIT_OK;
}

/* Slices of [t0, t1) holding about an_gpu_slice_records records of the
 * chunks of `device` (< 0: the API calls') each: *lo, *width, *n. */
static int gpu_slices(an_trace *t, int64_t device, int64_t t0, int64_t t1, int64_t *lo, int64_t *width, uint64_t *n)
{
    st_gpu_headers h;
    *n = 0;
    if (st_reader_gpu_headers(t->r, device, t0, t1, &h)) return an_trace_fail(t);
    if (h.has) {
        int64_t count = h.n_records, a = h.t0_ns, b = h.t1_ns;
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
        if ((!api && !st_gpu_kind_is_device_work(row.rec.kind)) || row.rec.start_ns < s || row.rec.start_ns >= e) continue;
        if (n == *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            st_gpu_row *nb = realloc(*buf, nc * sizeof *nb);
            if (!nb) {
                rc = gpu_oom();
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
    int rc = gpu_slices(t, api ? -1 : device, t0, t1, &lo, &width, &n);
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

/* ---- one pass, several readers ------------------------------------------------------------- */

typedef struct tap_pass {
    const an_gpu_tap *taps;
    uint32_t n;
} tap_pass;

static int tap_record(const st_gpu_row *row, void *arg)
{
    const tap_pass *tp = arg;
    int64_t start = row->rec.start_ns;
    for (uint32_t i = 0; i < tp->n; i++) {
        const an_gpu_tap *tap = &tp->taps[i];
        if (start < tap->from_ns || start >= tap->to_ns) continue;
        int rc = tap->record(row, tap->arg);
        if (rc) return rc;
    }
    return 0;
}

unsigned long an_gpu_read_count;

int an_gpu_read(an_trace *t, const int32_t *devices, uint32_t n_devices, const an_gpu_tap *taps, uint32_t n_taps)
{
    an_gpu_read_count++;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (uint32_t i = 0; i < n_taps; i++) {
        if (taps[i].from_ns >= taps[i].to_ns) continue;
        if (taps[i].from_ns < lo) lo = taps[i].from_ns;
        if (taps[i].to_ns > hi) hi = taps[i].to_ns;
    }
    tap_pass tp = {taps, n_taps};
    int rc = AN_EXIT_OK;
    for (uint32_t d = 0; !rc && d < n_devices; d++) {
        for (uint32_t i = 0; !rc && i < n_taps; i++)
            if (taps[i].begin) rc = taps[i].begin(devices[d], taps[i].arg);
        if (!rc && lo < hi) rc = an_gpu_each(t, devices[d], lo, hi, tap_record, &tp);
        for (uint32_t i = 0; !rc && i < n_taps; i++)
            if (taps[i].end) rc = taps[i].end(devices[d], taps[i].arg);
    }
    return rc;
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
    size_t cap;      /* of d->waits */
    uint32_t paused; /* an_trace_gpu_paused_next's cursor */
} split_state;

/* The paused part of [a, b) (GPU recording off: neither busy nor idle). */
static int64_t split_paused(split_state *st, int64_t a, int64_t b)
{
    if (b <= a || !st->cache->t->n_gpu_unrecorded) return 0;
    return an_trace_gpu_paused_next(st->cache->t, &st->paused, a, b);
}

/* add_host_wait for the recorded parts of [a, b) only. */
static int add_host_wait_recorded(split_state *st, int64_t thread, int64_t a, int64_t b)
{
    const an_trace *t = st->cache->t;
    if (!t->n_gpu_unrecorded) return add_host_wait(st->cache, st->d, &st->cap, thread, a, b);
    uint32_t i = st->paused;
    const an_lost_span *u = t->gpu_unrecorded;
    while (i < t->n_gpu_unrecorded && u[i].t1_ns <= a) i++;
    int64_t x = a;
    for (; x < b && i < t->n_gpu_unrecorded && u[i].t0_ns < b; i++) {
        if (u[i].t0_ns > x) {
            int rc = add_host_wait(st->cache, st->d, &st->cap, thread, x, u[i].t0_ns);
            if (rc) return rc;
        }
        if (u[i].t1_ns > x) x = u[i].t1_ns;
    }
    return x < b ? add_host_wait(st->cache, st->d, &st->cap, thread, x, b) : 0;
}

static int split_step(split_state *st, int64_t start, int64_t end, int64_t launch, int64_t thread, int last)
{
    an_gpu_idle *d = st->d;
    int64_t s = last ? st->t1 : (start > st->t0 ? start : st->t0);
    int64_t e = last ? st->t1 : (end < st->t1 ? end : st->t1);
    if (s > st->cur) {
        if (last || launch == INT64_MIN) {
            int64_t p = split_paused(st, st->cur, s);
            d->unrecorded_ns += p;
            d->idle_ns += s - st->cur - p;
            d->other_ns += s - st->cur - p;
        } else {
            int64_t host_end = launch < s ? launch : s;
            if (host_end < st->cur) host_end = st->cur;
            int64_t p_host = split_paused(st, st->cur, host_end);
            int64_t p_rest = split_paused(st, host_end, s);
            int64_t host = host_end - st->cur - p_host;
            int64_t rest = s - host_end - p_rest;
            d->unrecorded_ns += p_host + p_rest;
            d->idle_ns += host + rest;
            d->host_wait_ns += host;
            if (rest <= AN_GPU_LAUNCH_GAP_MAX_NS)
                d->launch_gap_ns += rest;
            else
                d->other_ns += rest;
            if (host > 0) {
                int rc = add_host_wait_recorded(st, thread, st->cur, host_end);
                if (rc) return rc;
            }
        }
        st->cur = s;
    }
    if (!last && e > st->cur) {
        int64_t p = split_paused(st, st->cur, e);
        d->unrecorded_ns += p;
        d->busy_ns += e - st->cur - p;
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
    if (rc == ST_ENOMEM) return gpu_oom();
    if (rc) return an_trace_fail(st->cache->t);
    return 0;
}

void an_gpu_idle_free(an_gpu_idle *d, uint32_t n)
{
    if (!d) return;
    for (uint32_t i = 0; i < n; i++) free(d[i].waits);
    free(d);
}

struct an_gpu_split {
    an_trace *t;
    int64_t t0, t1;
    const char *note;
    int reading;            /* the window is read (the trace has GPU activity, the window is not empty) */
    int open_dev;           /* devs[n_devs] is being read */
    seg_cache cache;
    an_gpu_idle *devs;      /* [n_devs] finished, then the one being read */
    uint32_t n_devs, cap_devs;
    split_state st;
};

static int split_begin(int32_t device, void *arg)
{
    an_gpu_split *sp = arg;
    if (!sp->reading) return 0;
    if (sp->n_devs == sp->cap_devs) {
        uint32_t nc = sp->cap_devs ? sp->cap_devs * 2 : 4;
        an_gpu_idle *nv = realloc(sp->devs, nc * sizeof *nv);
        if (!nv) return gpu_oom();
        sp->devs = nv;
        sp->cap_devs = nc;
    }
    an_gpu_idle *d = &sp->devs[sp->n_devs];
    memset(d, 0, sizeof *d);
    d->device = device;
    sp->st = (split_state){&sp->cache, d, sp->t0, sp->t1, sp->t0, 0, 0};
    sp->open_dev = 1;
    return 0;
}

static int split_end(int32_t device, void *arg)
{
    an_gpu_split *sp = arg;
    if (!sp->reading) return 0;
    an_gpu_idle *d = &sp->devs[sp->n_devs];
    sp->open_dev = 0;
    if (!d->n_records) {
        free(d->waits);
        return 0;
    }
    int rc = 0, src = split_step(&sp->st, 0, 0, INT64_MIN, -1, 1); /* the gap after the last record */
    if (src) rc = src == ST_ENOMEM ? gpu_oom() : an_trace_fail(sp->t);
    split_finish(d);
    sp->n_devs++;
    return rc;
}

static int split_tap_record(const st_gpu_row *row, void *arg)
{
    an_gpu_split *sp = arg;
    return split_record(row, &sp->st);
}

an_gpu_split *an_gpu_split_open(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_tap *tap, int *rc)
{
    memset(tap, 0, sizeof *tap);
    *rc = AN_EXIT_OK;
    an_gpu_split *sp = calloc(1, sizeof *sp);
    if (!sp) {
        *rc = gpu_oom();
        return NULL;
    }
    sp->t = t;
    sp->t0 = t0_ns;
    sp->t1 = t1_ns;
    sp->note = "no GPU activity in this trace";
    sp->cache = (seg_cache){t, t0_ns, t1_ns, NULL, 0};
    tap->begin = split_begin;
    tap->record = split_tap_record;
    tap->end = split_end;
    tap->arg = sp;
    int has = st_reader_has_gpu(t->r);
    if (has < 0) {
        *rc = an_trace_fail(t);
        free(sp);
        return NULL;
    }
    if (!has) return sp;
    sp->note = "no GPU activity in the window";
    if (t1_ns <= t0_ns) return sp;
    sp->reading = 1;
    /* records from ST_GPU_LAUNCH_LOOKBACK_NS before the window: a long one may run into it */
    tap->from_ns = t0_ns < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : t0_ns - ST_GPU_LAUNCH_LOOKBACK_NS;
    tap->to_ns = t1_ns;
    return sp;
}

int an_gpu_split_close(an_gpu_split *sp, int ok, an_gpu_idle **out, uint32_t *n, const char **note)
{
    *out = NULL;
    *n = 0;
    if (note) *note = NULL;
    if (!sp) return AN_EXIT_OK;
    seg_cache_free(&sp->cache);
    if (!ok) {
        if (sp->open_dev) free(sp->devs[sp->n_devs].waits);
        an_gpu_idle_free(sp->devs, sp->n_devs);
        free(sp);
        return AN_EXIT_OK;
    }
    if (note) *note = sp->reading ? (sp->n_devs ? NULL : "no GPU activity in the window") : sp->note;
    *n = sp->n_devs;
    *out = sp->devs;
    if (!sp->n_devs) {
        free(sp->devs);
        *out = NULL;
    }
    free(sp);
    return AN_EXIT_OK;
}

int an_gpu_idle_split(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_idle **out, uint32_t *n, const char **note)
{
    *out = NULL;
    *n = 0;
    *note = "no GPU activity in this trace";
    an_gpu_tap tap;
    int rc;
    an_gpu_split *sp = an_gpu_split_open(t, t0_ns, t1_ns, &tap, &rc);
    if (!sp) return rc;
    int32_t *ids = NULL;
    uint32_t n_ids = 0;
    if (tap.from_ns < tap.to_ns) {
        rc = an_gpu_devices(t, &ids, &n_ids);
        if (!rc) rc = an_gpu_read(t, ids, n_ids, &tap, 1);
    }
    free(ids);
    an_gpu_split_close(sp, rc == AN_EXIT_OK, out, n, note);
    return rc;
}

/* "steps A-B" for [t0, t1) when both ends are step marks: steps A to B
 * inclusive, step N being the work that ends at mark N (so marks 1 and 10
 * bound steps 2-10), the one way every command names a window; 0 when an
 * end is not a mark. */
static int steps_name(const an_trace *t, int64_t t0, int64_t t1, char *buf, size_t size)
{
    int has0 = 0, has1 = 0;
    uint64_t s0 = 0, s1 = 0;
    for (uint32_t i = 0; i < st_reader_n_steps(t->r); i++) {
        const st_step_info *s = st_reader_step(t->r, i);
        if (s->ts_ns == t0 && !has0) { s0 = s->step; has0 = 1; }
        if (s->ts_ns == t1) { s1 = s->step; has1 = 1; }
    }
    if (!has0 || !has1 || s1 <= s0) return 0;
    snprintf(buf, size, "steps %llu-%llu", (unsigned long long)s0 + 1, (unsigned long long)s1);
    return 1;
}

static int64_t time_add_sat(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
    return a + b;
}

int an_gpu_window(const an_trace *t, const an_window_spec *w, int64_t all_t0, int64_t all_t1, int64_t *t0_ns,
                  int64_t *t1_ns, char *desc, size_t desc_size)
{
    char a[40], b[40];
    if (w && w->kind == AN_WIN_TIME) {
        /* Seconds from the trace start (meta.start_ns, t->origin_ns), not from the first range
         * event: `--time 0:T` covers the device from the moment the trace was opened. Clipped to
         * [trace start, end of the span], the end being the last range event, step mark or
         * (all_t1) GPU record known. */
        int64_t end = all_t1 > t->span_t1_ns ? all_t1 : t->span_t1_ns;
        int64_t lo = w->has_a ? time_add_sat(t->origin_ns, w->time_a_ns) : t->origin_ns;
        int64_t hi = w->has_b ? time_add_sat(t->origin_ns, w->time_b_ns) : end;
        if (lo < t->origin_ns) lo = t->origin_ns;
        if (hi > end) hi = end;
        if (hi <= lo) {
            an_fmt_fixed(a, 0, 9, 3);
            an_fmt_fixed(b, end - t->origin_ns, 9, 3);
            an_error("--time %s selects no time in %s (it spans %s-%s s)", w->text, t->path, a, b);
            return AN_EXIT_USAGE;
        }
        *t0_ns = lo;
        *t1_ns = hi;
        an_fmt_fixed(a, lo - t->origin_ns, 9, 3);
        an_fmt_fixed(b, hi - t->origin_ns, 9, 3);
        snprintf(desc, desc_size, "time %s-%s s", a, b);
        return AN_EXIT_OK;
    }
    if (w && w->kind != AN_WIN_ALL) {
        int rc = an_window_resolve(w, t, t0_ns, t1_ns);
        if (rc) return rc;
        an_fmt_fixed(a, *t0_ns - t->origin_ns, 9, 3);
        an_fmt_fixed(b, *t1_ns - t->origin_ns, 9, 3);
        char name[64];
        if (w->kind == AN_WIN_STEPS && steps_name(t, *t0_ns, *t1_ns, name, sizeof name))
            snprintf(desc, desc_size, "%s (%s-%s s)", name, a, b);
        else if (w->kind == AN_WIN_STEPS) snprintf(desc, desc_size, "steps %s (%s-%s s)", w->text, a, b);
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
        snprintf(desc, desc_size, "steps %llu-%llu (%s-%s s%s)", (unsigned long long)s0->step + 1,
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

int an_gpu_window_needs_span(const an_trace *t, const an_window_spec *w)
{
    if (w && w->kind == AN_WIN_TIME) return 1; /* clipped to the span's end */
    if (w && w->kind != AN_WIN_ALL) return 0;
    uint32_t n = st_reader_n_steps(t->r);
    if (n < 2) return 1;
    return st_reader_step(t->r, n - 1)->ts_ns <= st_reader_step(t->r, n >= 3 ? 1 : 0)->ts_ns;
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
        if (g->unrecorded_ns > 0)
            fprintf(f, ", not recorded %.3f ms (GPU recording paused: busy and idle are shares of the %.3f ms "
                       "recorded)",
                    (double)g->unrecorded_ns / 1e6, (double)span / 1e6);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

int an_gpu_steady_window(an_trace *t, int64_t v0, int64_t v1, int64_t *w0_ns, int64_t *w1_ns, char *desc,
                         size_t desc_size)
{
    int64_t w0, w1;
    int rc = an_gpu_window(t, NULL, v0, v1, &w0, &w1, desc, desc_size);
    if (rc) return rc;
    if (w0 < v0) w0 = v0;
    if (w1 > v1) w1 = v1;
    if (w1 <= w0) {
        w0 = v0;
        w1 = v1;
        char a[40], b[40];
        an_fmt_fixed(a, v0 - t->origin_ns, 9, 3);
        an_fmt_fixed(b, v1 - t->origin_ns, 9, 3);
        snprintf(desc, desc_size, "%s-%s s", a, b);
    } else if (w0 != v0 || w1 != v1) {
        char a[40], b[40];
        an_fmt_fixed(a, w0 - t->origin_ns, 9, 3);
        an_fmt_fixed(b, w1 - t->origin_ns, 9, 3);
        char name[64];
        if (steps_name(t, w0, w1, name, sizeof name))
            snprintf(desc, desc_size, "%s (%s-%s s, start-up left out)", name, a, b);
        else
            snprintf(desc, desc_size, "%s-%s s (start-up left out)", a, b);
    }
    uint32_t n_paused;
    int64_t paused = an_trace_gpu_paused_in(t, w0, w1, &n_paused);
    size_t len = strlen(desc);
    if (n_paused && len + 1 < desc_size)
        snprintf(desc + len, desc_size - len, ", GPU recording paused for %.3f ms of it", (double)paused / 1e6);
    *w0_ns = w0;
    *w1_ns = w1;
    return AN_EXIT_OK;
}

char *an_gpu_idle_steady_text(const an_trace *t, const char *desc, const an_gpu_idle *d, uint32_t n,
                              const char *note)
{
    char *body = an_gpu_idle_text(t, d, n, note);
    if (!body || !n) return body;
    size_t len = strlen(body) + strlen(desc) + 16;
    char *text = malloc(len);
    if (text) snprintf(text, len, "over %s: %s", desc, body);
    free(body);
    return text;
}

int an_gpu_idle_steady(an_trace *t, int64_t v0, int64_t v1, an_gpu_idle **out, uint32_t *n, char **text)
{
    *out = NULL;
    *n = 0;
    *text = NULL;
    int64_t w0, w1;
    char desc[160];
    int rc = an_gpu_steady_window(t, v0, v1, &w0, &w1, desc, sizeof desc);
    if (rc) return rc;
    const char *note = NULL;
    rc = an_gpu_idle_split(t, w0, w1, out, n, &note);
    if (rc) return rc;
    *text = an_gpu_idle_steady_text(t, desc, *out, *n, note);
    if (*text) return AN_EXIT_OK;
    an_gpu_idle_free(*out, *n);
    *out = NULL;
    *n = 0;
    return gpu_oom();
}
