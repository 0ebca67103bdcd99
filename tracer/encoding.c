/* encoding.c: encoders and bounds-checked decoders for the chunk BLOBs of
 * trace format version 1. The byte layout is specified in
 * docs/trace-format.md; keep the two in step. */
#include "encoding.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stagetrace.h"

int st_buf_reserve(st_buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

void st_buf_free(st_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- range events ----
 * header: 0x45, varint depth, depth x (varint stage, varint start delta)
 * event:  varint tag (0 = end, stage + 1 = begin), varint ts delta
 * Deltas are from the previous timestamp in the chunk (the first from 0). */

int st_event_chunk_start(st_event_encoder *e)
{
    e->buf.len = 0;
    e->n_events = 0;
    if (st_buf_reserve(&e->buf, 1 + 10 + (size_t)e->depth * 20)) return -1;
    uint8_t *p = e->buf.data;
    size_t n = 0;
    p[n++] = ST_CHUNK_EVENTS_V1;
    n += st_varint_put(p + n, e->depth);
    int64_t prev = 0;
    for (uint32_t i = 0; i < e->depth; i++) {
        n += st_varint_put(p + n, e->stack[i].stage);
        n += st_varint_put(p + n, (uint64_t)(e->stack[i].start_ns - prev));
        prev = e->stack[i].start_ns;
    }
    e->buf.len = n;
    e->prev_ts = prev;
    e->t0_ns = e->depth ? e->stack[0].start_ns : INT64_MAX;
    e->t1_ns = prev;
    return 0;
}

static int put_event(st_event_encoder *e, uint64_t tag, int64_t ts_ns)
{
    if (st_buf_reserve(&e->buf, 20)) return -1;
    uint8_t *p = e->buf.data + e->buf.len;
    size_t n = st_varint_put(p, tag);
    n += st_varint_put(p + n, (uint64_t)(ts_ns - e->prev_ts));
    e->buf.len += n;
    e->prev_ts = ts_ns;
    if (ts_ns < e->t0_ns) e->t0_ns = ts_ns;
    e->t1_ns = ts_ns;
    e->n_events++;
    return 0;
}

int st_event_put_begin(st_event_encoder *e, uint32_t stage, int64_t ts_ns)
{
    if (e->depth >= ST_MAX_DEPTH || ts_ns < e->prev_ts) return -1;
    if (put_event(e, (uint64_t)stage + 1, ts_ns)) return -1;
    e->stack[e->depth].stage = stage;
    e->stack[e->depth].start_ns = ts_ns;
    e->depth++;
    return 0;
}

int st_event_put_end(st_event_encoder *e, int64_t ts_ns)
{
    if (e->depth == 0 || ts_ns < e->prev_ts) return -1;
    if (put_event(e, 0, ts_ns)) return -1;
    e->depth--;
    return 0;
}

static int get(st_event_cursor *c, uint64_t *v)
{
    size_t n = st_varint_get(c->p, c->end, v);
    if (!n) return -1;
    c->p += n;
    return 0;
}

static int add_delta(int64_t prev, uint64_t delta, int64_t *out)
{
    if (delta > (uint64_t)INT64_MAX) return -1;
    if (prev > INT64_MAX - (int64_t)delta) return -1;
    *out = prev + (int64_t)delta;
    return 0;
}

int st_event_cursor_open(st_event_cursor *c, const void *data, size_t size,
                         uint32_t n_events, uint32_t n_stages)
{
    c->p = data;
    c->end = c->p + size;
    c->remaining = n_events;
    c->n_stages = n_stages;
    c->prev_ts = 0;
    c->depth = 0;
    if (size < 2 || c->p[0] != ST_CHUNK_EVENTS_V1) return ST_ECORRUPT;
    c->p++;
    uint64_t depth;
    if (get((st_event_cursor *)c, &depth) || depth > ST_MAX_DEPTH) return ST_ECORRUPT;
    for (uint64_t i = 0; i < depth; i++) {
        uint64_t stage, delta;
        if (get(c, &stage) || get(c, &delta)) return ST_ECORRUPT;
        if (stage > UINT32_MAX || (n_stages && stage >= n_stages)) return ST_ECORRUPT;
        if (add_delta(c->prev_ts, delta, &c->prev_ts)) return ST_ECORRUPT;
        c->stack[i].stage = (uint32_t)stage;
        c->stack[i].start_ns = c->prev_ts;
    }
    c->depth = (uint32_t)depth;
    return 0;
}

/* ---- counter samples ----
 * header: 0x43
 * sample: varint (counter << 1 | is_int), varint ts delta,
 *         then zigzag varint (is_int) or 8 bytes little-endian IEEE double */

int st_counter_chunk_start(st_counter_encoder *e)
{
    e->buf.len = 0;
    e->n_samples = 0;
    if (st_buf_reserve(&e->buf, 1)) return -1;
    e->buf.data[e->buf.len++] = ST_CHUNK_COUNTERS_V1;
    e->prev_ts = 0;
    e->t0_ns = INT64_MAX;
    e->t1_ns = 0;
    return 0;
}

int st_counter_put(st_counter_encoder *e, uint32_t counter, int64_t ts_ns, double value)
{
    if (ts_ns < e->prev_ts) return -1;
    if (st_buf_reserve(&e->buf, 30)) return -1;
    uint8_t *p = e->buf.data + e->buf.len;
    int is_int = value >= -9.0e15 && value <= 9.0e15 && value == (double)(int64_t)value &&
                 !(value == 0 && signbit(value));
    size_t n = st_varint_put(p, ((uint64_t)counter << 1) | (uint64_t)is_int);
    n += st_varint_put(p + n, (uint64_t)(ts_ns - e->prev_ts));
    if (is_int) {
        n += st_varint_put(p + n, st_zigzag((int64_t)value));
    } else {
        uint64_t bits;
        memcpy(&bits, &value, 8);
        for (int i = 0; i < 8; i++) p[n++] = (uint8_t)(bits >> (8 * i));
    }
    e->buf.len += n;
    e->prev_ts = ts_ns;
    if (ts_ns < e->t0_ns) e->t0_ns = ts_ns;
    e->t1_ns = ts_ns;
    e->n_samples++;
    return 0;
}

int st_counter_cursor_open(st_counter_cursor *c, const void *data, size_t size,
                           uint32_t n_samples, uint32_t n_counters)
{
    c->p = data;
    c->end = c->p + size;
    c->remaining = n_samples;
    c->n_counters = n_counters;
    c->prev_ts = 0;
    if (size < 1 || c->p[0] != ST_CHUNK_COUNTERS_V1) return ST_ECORRUPT;
    c->p++;
    return 0;
}

int st_counter_next(st_counter_cursor *c, st_sample *s)
{
    if (c->remaining == 0) return c->p == c->end ? 0 : ST_ECORRUPT;
    uint64_t tag, delta;
    size_t n = st_varint_get(c->p, c->end, &tag);
    if (!n) return ST_ECORRUPT;
    c->p += n;
    n = st_varint_get(c->p, c->end, &delta);
    if (!n) return ST_ECORRUPT;
    c->p += n;
    int64_t ts;
    if (add_delta(c->prev_ts, delta, &ts)) return ST_ECORRUPT;
    uint64_t counter = tag >> 1;
    if (counter > UINT32_MAX || (c->n_counters && counter >= c->n_counters)) return ST_ECORRUPT;
    if (tag & 1) {
        uint64_t z;
        n = st_varint_get(c->p, c->end, &z);
        if (!n) return ST_ECORRUPT;
        c->p += n;
        s->value = (double)st_unzigzag(z);
    } else {
        if (c->end - c->p < 8) return ST_ECORRUPT;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits |= (uint64_t)c->p[i] << (8 * i);
        memcpy(&s->value, &bits, 8);
        c->p += 8;
    }
    s->counter = (uint32_t)counter;
    s->ts_ns = ts;
    c->prev_ts = ts;
    c->remaining--;
    return 1;
}

/* ---- flows ----
 * header: 0x46
 * record: varint ts delta (from the previous record; the first from 0),
 *         byte direction (0 out, 1 in), varint id */

int st_flow_chunk_start(st_flow_encoder *e)
{
    e->buf.len = 0;
    e->n_records = 0;
    if (st_buf_reserve(&e->buf, 1)) return -1;
    e->buf.data[e->buf.len++] = ST_CHUNK_FLOWS_V1;
    e->prev_ts = 0;
    e->t0_ns = INT64_MAX;
    e->t1_ns = 0;
    return 0;
}

int st_flow_put(st_flow_encoder *e, uint32_t dir, int64_t ts_ns, uint64_t id)
{
    if (ts_ns < e->prev_ts || dir > ST_FLOW_IN) return -1;
    if (st_buf_reserve(&e->buf, 21)) return -1;
    uint8_t *p = e->buf.data + e->buf.len;
    size_t n = st_varint_put(p, (uint64_t)(ts_ns - e->prev_ts));
    p[n++] = (uint8_t)dir;
    n += st_varint_put(p + n, id);
    e->buf.len += n;
    e->prev_ts = ts_ns;
    if (ts_ns < e->t0_ns) e->t0_ns = ts_ns;
    e->t1_ns = ts_ns;
    e->n_records++;
    return 0;
}

int st_flow_cursor_open(st_flow_cursor *c, const void *data, size_t size, uint32_t n_records)
{
    c->p = data;
    c->end = c->p + size;
    c->remaining = n_records;
    c->prev_ts = 0;
    if (size < 1 || c->p[0] != ST_CHUNK_FLOWS_V1) return ST_ECORRUPT;
    c->p++;
    return 0;
}

int st_flow_next(st_flow_cursor *c, st_flow_rec *f)
{
    if (c->remaining == 0) return c->p == c->end ? 0 : ST_ECORRUPT;
    uint64_t delta, dir, id;
    size_t n = st_varint_get(c->p, c->end, &delta);
    if (!n) return ST_ECORRUPT;
    c->p += n;
    if (c->p == c->end || c->p[0] > ST_FLOW_IN) return ST_ECORRUPT; /* one byte: 0 or 1 */
    dir = *c->p++;
    n = st_varint_get(c->p, c->end, &id);
    if (!n) return ST_ECORRUPT;
    c->p += n;
    int64_t ts;
    if (add_delta(c->prev_ts, delta, &ts)) return ST_ECORRUPT;
    f->dir = (uint32_t)dir;
    f->ts_ns = ts;
    f->id = id;
    c->prev_ts = ts;
    c->remaining--;
    return 1;
}

/* ---- GPU activity ----
 * header: 0x47
 * record: varint kind, zigzag varint start delta (from the previous record's
 * start; the first from 0), varint dur, varint name, varint bytes,
 * varint copy_kind, varint src_mem, varint dst_mem, varint correlation,
 * zigzag varint os_tid. */

int st_gpu_chunk_start(st_gpu_encoder *e)
{
    e->buf.len = 0;
    e->n_records = 0;
    memset(&e->prev, 0, sizeof e->prev);
    e->t0_ns = INT64_MAX;
    e->t1_ns = INT64_MIN;
    if (st_buf_reserve(&e->buf, 1)) return -1;
    e->buf.data[e->buf.len++] = ST_CHUNK_GPU_V2;
    return 0;
}

/* v2 record header bits (docs/trace-format.md, "GPU chunk"): the kind in
 * bits 0-2, then which fields follow. */
enum {
    GPU_HAS_NAME = 1 << 3,  /* else the previous record's */
    GPU_HAS_TID = 1 << 4,   /* else the previous record's */
    GPU_HAS_KIND2 = 1 << 5, /* copy_kind; else the previous record's */
    GPU_HAS_BYTES = 1 << 6, /* bytes, src_mem, dst_mem; else 0 */
};

int st_gpu_put(st_gpu_encoder *e, const st_gpu_rec *r)
{
    if (r->dur_ns < 0 || r->kind < 1 || r->kind > ST_GPU_KIND_MAX) return -1;
    if (st_buf_reserve(&e->buf, 1 + 9 * 10)) return -1;
    uint8_t *p = e->buf.data + e->buf.len;
    st_gpu_prev *pv = &e->prev;
    uint8_t head = (uint8_t)r->kind;
    if (r->name != pv->name) head |= GPU_HAS_NAME;
    if (r->os_tid != pv->os_tid) head |= GPU_HAS_TID;
    if (r->copy_kind != pv->copy_kind) head |= GPU_HAS_KIND2;
    if (r->bytes || r->src_mem || r->dst_mem) head |= GPU_HAS_BYTES;
    size_t n = 0;
    p[n++] = head;
    n += st_varint_put(p + n, st_zigzag((int64_t)((uint64_t)r->start_ns - (uint64_t)pv->start)));
    n += st_varint_put(p + n, (uint64_t)r->dur_ns);
    n += st_varint_put(p + n, st_zigzag((int64_t)r->correlation - (int64_t)pv->correlation));
    if (head & GPU_HAS_NAME) n += st_varint_put(p + n, r->name);
    if (head & GPU_HAS_KIND2) n += st_varint_put(p + n, r->copy_kind);
    if (head & GPU_HAS_BYTES) {
        n += st_varint_put(p + n, r->bytes);
        n += st_varint_put(p + n, r->src_mem);
        n += st_varint_put(p + n, r->dst_mem);
    }
    if (head & GPU_HAS_TID) n += st_varint_put(p + n, st_zigzag(r->os_tid));
    e->buf.len += n;
    *pv = (st_gpu_prev){r->start_ns, r->os_tid, r->name, r->copy_kind, r->correlation};
    e->n_records++;
    if (r->start_ns < e->t0_ns) e->t0_ns = r->start_ns;
    int64_t end = r->start_ns + r->dur_ns;
    if (end > e->t1_ns) e->t1_ns = end;
    return 0;
}

int st_gpu_cursor_open(st_gpu_cursor *c, const void *data, size_t size, uint32_t n_records)
{
    const uint8_t *p = data;
    if (!p || size < 1 || (p[0] != ST_CHUNK_GPU_V1 && p[0] != ST_CHUNK_GPU_V2)) return ST_ECORRUPT;
    c->version = p[0] == ST_CHUNK_GPU_V1 ? 1 : 2;
    c->p = p + 1;
    c->end = p + size;
    c->remaining = n_records;
    memset(&c->prev, 0, sizeof c->prev);
    return 0;
}

static int gpu_get(st_gpu_cursor *c, uint64_t *v)
{
    size_t n = st_varint_get(c->p, c->end, v);
    if (!n) return -1;
    c->p += n;
    return 0;
}

/* v1: ten varints, every field. */
static int gpu_next_v1(st_gpu_cursor *c, uint64_t v[10])
{
    for (int i = 0; i < 10; i++)
        if (gpu_get(c, &v[i])) return ST_ECORRUPT;
    v[1] = (uint64_t)((uint64_t)c->prev.start + (uint64_t)st_unzigzag(v[1])); /* start, as v2 gives it */
    return 0;
}

/* v2: a header byte, then the fields it says are there; the rest repeat
 * the previous record's (name, copy_kind, os_tid) or are 0 (bytes, memory
 * kinds). v[] gets the fields in v1's order, start absolute. */
static int gpu_next_v2(st_gpu_cursor *c, uint64_t v[10])
{
    if (c->p >= c->end) return ST_ECORRUPT;
    uint8_t head = *c->p++;
    if (head & 0x80) return ST_ECORRUPT;
    uint64_t delta, corr;
    v[0] = head & 7u;
    if (gpu_get(c, &delta) || gpu_get(c, &v[2]) || gpu_get(c, &corr)) return ST_ECORRUPT;
    v[1] = (uint64_t)c->prev.start + (uint64_t)st_unzigzag(delta);
    int64_t corr_delta = st_unzigzag(corr);
    if (corr_delta < -(int64_t)c->prev.correlation || corr_delta > (int64_t)UINT32_MAX - (int64_t)c->prev.correlation)
        return ST_ECORRUPT;
    v[8] = (uint64_t)((int64_t)c->prev.correlation + corr_delta);
    v[3] = c->prev.name;
    v[5] = c->prev.copy_kind;
    v[4] = v[6] = v[7] = 0;
    v[9] = st_zigzag(c->prev.os_tid);
    if ((head & GPU_HAS_NAME) && gpu_get(c, &v[3])) return ST_ECORRUPT;
    if ((head & GPU_HAS_KIND2) && gpu_get(c, &v[5])) return ST_ECORRUPT;
    if ((head & GPU_HAS_BYTES) && (gpu_get(c, &v[4]) || gpu_get(c, &v[6]) || gpu_get(c, &v[7]))) return ST_ECORRUPT;
    if ((head & GPU_HAS_TID) && gpu_get(c, &v[9])) return ST_ECORRUPT;
    return 0;
}

int st_gpu_next(st_gpu_cursor *c, st_gpu_rec *r)
{
    if (c->remaining == 0) return c->p == c->end ? 0 : ST_ECORRUPT;
    uint64_t v[10];
    if ((c->version == 1 ? gpu_next_v1(c, v) : gpu_next_v2(c, v)) != 0) return ST_ECORRUPT;
    if (v[0] < 1 || v[0] > ST_GPU_KIND_MAX || v[2] > (uint64_t)INT64_MAX || v[3] > UINT32_MAX ||
        v[5] > UINT32_MAX || v[6] > UINT32_MAX || v[7] > UINT32_MAX || v[8] > UINT32_MAX)
        return ST_ECORRUPT;
    int64_t start = (int64_t)v[1];
    int64_t dur = (int64_t)v[2];
    if (start > INT64_MAX - dur) return ST_ECORRUPT;
    r->kind = (uint32_t)v[0];
    r->start_ns = start;
    r->dur_ns = dur;
    r->name = (uint32_t)v[3];
    r->bytes = v[4];
    r->copy_kind = (uint32_t)v[5];
    r->src_mem = (uint32_t)v[6];
    r->dst_mem = (uint32_t)v[7];
    r->correlation = (uint32_t)v[8];
    r->os_tid = st_unzigzag(v[9]);
    c->prev = (st_gpu_prev){start, r->os_tid, r->name, r->copy_kind, r->correlation};
    c->remaining--;
    return 1;
}

/* ---- CPU records ----
 * header: 0x50
 * record: byte kind, varint zigzag(ts - previous ts) (the first from 0),
 *         then by kind: sample: varint stack, varint stage + 1 (0: none
 *         open); unknown-stage sample: varint stack; lost: varint count;
 *         switches: nothing; sample with flags: varint stack, varint
 *         stage + 1, varint flags; its unknown-stage kind: varint stack,
 *         varint flags; blocked switch-out with its wait stack: varint
 *         stack. */

static int flags_ok(uint64_t f)
{
    return f <= 3 && !((f & ST_CPU_FLAG_GIL_HELD) && !(f & ST_CPU_FLAG_GIL_KNOWN));
}

int st_cpu_chunk_start(st_cpu_encoder *e)
{
    e->buf.len = 0;
    e->n_records = 0;
    if (st_buf_reserve(&e->buf, 1)) return -1;
    e->buf.data[e->buf.len++] = ST_CHUNK_CPU_V1;
    e->prev_ts = 0;
    e->t0_ns = INT64_MAX;
    e->t1_ns = INT64_MIN;
    return 0;
}

int st_cpu_put(st_cpu_encoder *e, const st_cpu_rec *r)
{
    if (r->kind > ST_CPU_REC_KIND_MAX) return -1;
    int flagged = r->kind == ST_CPU_REC_SAMPLE_FLAGS || r->kind == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN;
    if (flagged && !flags_ok(r->flags)) return -1;
    if (r->kind == ST_CPU_REC_OUT_SCHED && (!ST_CPU_STATE_OK(r->flags) || r->n > UINT32_MAX - 1)) return -1;
    if (st_buf_reserve(&e->buf, 1 + 10 + 10 + 10 + 10)) return -1;
    uint8_t *p = e->buf.data + e->buf.len;
    size_t n = 0;
    p[n++] = (uint8_t)r->kind;
    n += st_varint_put(p + n, st_zigzag((int64_t)((uint64_t)r->ts_ns - (uint64_t)e->prev_ts)));
    if (r->kind == ST_CPU_REC_SAMPLE || r->kind == ST_CPU_REC_SAMPLE_FLAGS || r->kind == ST_CPU_REC_PY_SAMPLE) {
        n += st_varint_put(p + n, r->stack);
        n += st_varint_put(p + n, r->stage == ST_CPU_NO_STAGE ? 0 : (uint64_t)r->stage + 1);
    } else if (r->kind == ST_CPU_REC_SAMPLE_UNKNOWN || r->kind == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN ||
               r->kind == ST_CPU_REC_OUT_STACK || r->kind == ST_CPU_REC_PY_SAMPLE_UNKNOWN) {
        n += st_varint_put(p + n, r->stack);
    } else if (r->kind == ST_CPU_REC_OUT_SCHED) {
        n += st_varint_put(p + n, r->stack);
        n += st_varint_put(p + n, r->n);
        n += st_varint_put(p + n, r->flags);
    } else if (r->kind == ST_CPU_REC_LOST) {
        n += st_varint_put(p + n, r->n);
    }
    if (flagged) n += st_varint_put(p + n, r->flags);
    e->buf.len += n;
    e->prev_ts = r->ts_ns;
    if (r->ts_ns < e->t0_ns) e->t0_ns = r->ts_ns;
    if (r->ts_ns > e->t1_ns) e->t1_ns = r->ts_ns;
    e->n_records++;
    return 0;
}

int st_cpu_cursor_open(st_cpu_cursor *c, const void *data, size_t size, uint32_t n_records)
{
    c->p = data;
    c->end = c->p + size;
    c->remaining = n_records;
    c->prev_ts = 0;
    if (size < 1 || c->p[0] != ST_CHUNK_CPU_V1) return ST_ECORRUPT;
    c->p++;
    return 0;
}

static int get_u(st_cpu_cursor *c, uint64_t *v)
{
    size_t n = st_varint_get(c->p, c->end, v);
    if (!n) return -1;
    c->p += n;
    return 0;
}

int st_cpu_next(st_cpu_cursor *c, st_cpu_rec *r)
{
    if (c->remaining == 0) return c->p == c->end ? 0 : ST_ECORRUPT;
    if (c->p == c->end || c->p[0] > ST_CPU_REC_KIND_MAX) return ST_ECORRUPT;
    memset(r, 0, sizeof *r);
    r->kind = *c->p++;
    r->stage = ST_CPU_NO_STAGE;
    uint64_t z, v;
    if (get_u(c, &z)) return ST_ECORRUPT;
    int64_t d = st_unzigzag(z);
    if ((d > 0 && c->prev_ts > INT64_MAX - d) || (d < 0 && c->prev_ts < INT64_MIN - d)) return ST_ECORRUPT;
    r->ts_ns = c->prev_ts + d;
    int k = (int)r->kind;
    if (k == ST_CPU_REC_SAMPLE || k == ST_CPU_REC_SAMPLE_UNKNOWN || k == ST_CPU_REC_SAMPLE_FLAGS ||
        k == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN || k == ST_CPU_REC_OUT_STACK || k == ST_CPU_REC_OUT_SCHED ||
        k == ST_CPU_REC_PY_SAMPLE || k == ST_CPU_REC_PY_SAMPLE_UNKNOWN) {
        if (get_u(c, &v) || v > UINT32_MAX - 1) return ST_ECORRUPT;
        r->stack = (uint32_t)v;
    }
    if (k == ST_CPU_REC_OUT_SCHED) {
        if (get_u(c, &v) || v > UINT32_MAX - 1) return ST_ECORRUPT;
        r->n = v;
        if (get_u(c, &v) || !ST_CPU_STATE_OK(v)) return ST_ECORRUPT;
        r->flags = (uint32_t)v;
    }
    if (k == ST_CPU_REC_SAMPLE || k == ST_CPU_REC_SAMPLE_FLAGS || k == ST_CPU_REC_PY_SAMPLE) {
        if (get_u(c, &v) || v > UINT32_MAX - 1) return ST_ECORRUPT;
        r->stage = v == 0 ? ST_CPU_NO_STAGE : (uint32_t)(v - 1);
    } else if (k == ST_CPU_REC_LOST) {
        if (get_u(c, &v)) return ST_ECORRUPT;
        r->n = v;
    }
    if (k == ST_CPU_REC_SAMPLE_FLAGS || k == ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN) {
        if (get_u(c, &v) || !flags_ok(v)) return ST_ECORRUPT;
        r->flags = (uint32_t)v;
    }
    c->prev_ts = r->ts_ns;
    c->remaining--;
    return 1;
}

int st_cpu_stack_put(st_buf *b, const uint64_t *frames, uint32_t n)
{
    if (st_buf_reserve(b, (size_t)n * 10)) return -1;
    uint64_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        b->len += st_varint_put(b->data + b->len, st_zigzag((int64_t)(frames[i] - prev)));
        prev = frames[i];
    }
    return 0;
}

int st_cpu_stack_get(const void *data, size_t size, uint32_t n, uint64_t *frames)
{
    if (!data) return n == 0 && size == 0 ? 0 : ST_ECORRUPT; /* an empty blob is NULL: no NULL + 0 */
    const uint8_t *p = data, *end = p + size;
    uint64_t prev = 0, z;
    for (uint32_t i = 0; i < n; i++) {
        size_t k = st_varint_get(p, end, &z);
        if (!k) return ST_ECORRUPT;
        p += k;
        prev += (uint64_t)st_unzigzag(z);
        frames[i] = prev;
    }
    return p == end ? 0 : ST_ECORRUPT;
}
