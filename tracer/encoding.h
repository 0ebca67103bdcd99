/* encoding.h: the chunk encodings of trace format version 1 (see
 * docs/trace-format.md, "Chunk encodings"): range events and counter samples
 * as varint-coded records. The writer encodes; the reader, the virtual
 * tables and the analyzer decode. Decoders check every byte against the
 * chunk's end and report corruption instead of reading past it. */
#ifndef ST_ENCODING_H
#define ST_ENCODING_H

#include <stddef.h>
#include <stdint.h>

#include "stagetrace.h"
#include "stagetrace_reader.h" /* st_open_range, st_event, st_gpu_rec and the GPU enums */

#define ST_CHUNK_EVENTS_V1 0x45   /* 'E' */
#define ST_CHUNK_COUNTERS_V1 0x43 /* 'C' */
#define ST_CHUNK_GPU_V1 0x47      /* 'G': every field of every record (read only) */
#define ST_CHUNK_GPU_V2 0x48      /* 'H': fields that repeat or are zero left out (written) */
#define ST_CHUNK_FLOWS_V1 0x46    /* 'F' */
#define ST_CHUNK_CPU_V1 0x50      /* 'P': a thread's switch, sample and lost records */
/* ST_MAX_DEPTH (stagetrace.h): open ranges per thread, depth 0..255 */

typedef struct st_buf {
    uint8_t *data;
    size_t len, cap;
} st_buf;

int st_buf_reserve(st_buf *b, size_t extra); /* 0 or -1 (no memory) */
void st_buf_free(st_buf *b);

/* Varints: LEB128, at most 10 bytes. */
static inline size_t st_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    p[n++] = (uint8_t)v;
    return n;
}
/* Returns bytes read, or 0 if truncated or longer than 10 bytes. */
static inline size_t st_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        uint64_t byte = p[i];
        if (i == 9 && byte > 1) return 0; /* more than 64 bits */
        v |= (byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) { *out = v; return i + 1; }
    }
    return 0;
}
static inline uint64_t st_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t st_unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* ---- range events ---- */


/* Per-thread encoder state. The stack lives on across chunks: each chunk
 * starts with the ranges open at its start, so it decodes on its own. */
typedef struct st_event_encoder {
    st_buf buf;
    uint32_t n_events;
    int64_t prev_ts, t0_ns, t1_ns;
    uint32_t depth;
    st_open_range stack[ST_MAX_DEPTH];
} st_event_encoder;

/* Starts a chunk (writes the header with the open stack). */
int st_event_chunk_start(st_event_encoder *e);
/* Appends a begin (stage) or an end (of the innermost open range).
 * ts_ns must be >= the previous event's. Returns 0, or -1 on no memory,
 * stack overflow (begin at depth 256) or underflow (end with none open). */
int st_event_put_begin(st_event_encoder *e, uint32_t stage, int64_t ts_ns);
int st_event_put_end(st_event_encoder *e, int64_t ts_ns);


typedef struct st_event_cursor {
    const uint8_t *p, *end;
    uint32_t remaining;
    uint32_t n_stages;   /* stage ids must be < n_stages (0: unchecked) */
    int64_t prev_ts;
    uint32_t depth;
    st_open_range stack[ST_MAX_DEPTH];
} st_event_cursor;

/* Opens a chunk of n_events events. Returns 0 or ST_ECORRUPT. */
int st_event_cursor_open(st_event_cursor *c, const void *data, size_t size,
                         uint32_t n_events, uint32_t n_stages);
/* 1: *ev filled; 0: chunk done (every byte consumed); ST_ECORRUPT.
 * Inline: the readers call it once per event. */
#define ST_ECORRUPT_ (-7) /* == ST_ECORRUPT in stagetrace.h */
static inline __attribute__((always_inline)) int st_event_next(st_event_cursor *c, st_event *ev)
{
    if (c->remaining == 0) return c->p == c->end ? 0 : ST_ECORRUPT_;
    uint64_t tag, delta;
    int64_t ts;
    /* Fast path: tags are one byte almost always, deltas one to three. */
    if (c->end - c->p >= 4 && c->p[0] < 0x80 && c->p[1] < 0x80) {
        tag = c->p[0];
        delta = c->p[1];
        c->p += 2;
    } else if (c->end - c->p >= 4 && c->p[0] < 0x80 && c->p[2] < 0x80) {
        tag = c->p[0];
        delta = (uint64_t)(c->p[1] & 0x7f) | (uint64_t)c->p[2] << 7;
        c->p += 3;
    } else {
        size_t n1 = st_varint_get(c->p, c->end, &tag);
        if (!n1) return ST_ECORRUPT_;
        c->p += n1;
        n1 = st_varint_get(c->p, c->end, &delta);
        if (!n1) return ST_ECORRUPT_;
        c->p += n1;
    }
    if (delta > (uint64_t)INT64_MAX || c->prev_ts > INT64_MAX - (int64_t)delta) return ST_ECORRUPT_;
    ts = c->prev_ts + (int64_t)delta;
    if (tag == 0) {
        if (c->depth == 0) return ST_ECORRUPT_;
        c->depth--;
        ev->is_end = 1;
        ev->stage = c->stack[c->depth].stage;
        ev->start_ns = c->stack[c->depth].start_ns;
    } else {
        uint64_t stage = tag - 1;
        if (stage > UINT32_MAX || (c->n_stages && stage >= c->n_stages)) return ST_ECORRUPT_;
        if (c->depth >= ST_MAX_DEPTH) return ST_ECORRUPT_;
        c->stack[c->depth].stage = (uint32_t)stage;
        c->stack[c->depth].start_ns = ts;
        ev->is_end = 0;
        ev->stage = (uint32_t)stage;
        ev->start_ns = ts;
        c->depth++;
    }
    ev->depth = ev->is_end ? c->depth : c->depth - 1;
    ev->ts_ns = ts;
    c->prev_ts = ts;
    c->remaining--;
    return 1;
}


/* ---- counter samples ---- */

typedef struct st_counter_encoder {
    st_buf buf;
    uint32_t n_samples;
    int64_t prev_ts, t0_ns, t1_ns;
} st_counter_encoder;

int st_counter_chunk_start(st_counter_encoder *e);
int st_counter_put(st_counter_encoder *e, uint32_t counter, int64_t ts_ns, double value);

typedef struct st_sample {
    uint32_t counter;
    int64_t ts_ns;
    double value;
} st_sample;

typedef struct st_counter_cursor {
    const uint8_t *p, *end;
    uint32_t remaining;
    uint32_t n_counters;
    int64_t prev_ts;
} st_counter_cursor;

int st_counter_cursor_open(st_counter_cursor *c, const void *data, size_t size,
                           uint32_t n_samples, uint32_t n_counters);
int st_counter_next(st_counter_cursor *c, st_sample *s);


/* ---- flows (docs/trace-format.md, "Flow chunk") ---- */

typedef struct st_flow_encoder {
    st_buf buf;
    uint32_t n_records;
    int64_t prev_ts, t0_ns, t1_ns;
} st_flow_encoder;

int st_flow_chunk_start(st_flow_encoder *e);
/* dir: ST_FLOW_OUT or ST_FLOW_IN. ts_ns must be >= the previous record's.
 * 0, or -1 (no memory, time going back, a bad direction). */
int st_flow_put(st_flow_encoder *e, uint32_t dir, int64_t ts_ns, uint64_t id);

typedef struct st_flow_cursor {
    const uint8_t *p, *end;
    uint32_t remaining;
    int64_t prev_ts;
} st_flow_cursor;

typedef struct st_flow_rec {
    uint32_t dir;
    int64_t ts_ns;
    uint64_t id;
} st_flow_rec;

int st_flow_cursor_open(st_flow_cursor *c, const void *data, size_t size, uint32_t n_records);
/* 1: *f filled; 0: chunk done (every byte consumed); ST_ECORRUPT. */
int st_flow_next(st_flow_cursor *c, st_flow_rec *f);


/* ---- GPU activity (docs/trace-format.md, "GPU chunk") ---- */


/* The previous record's values that a v2 record may repeat. */
typedef struct st_gpu_prev {
    int64_t start, os_tid;
    uint32_t name, copy_kind, correlation;
} st_gpu_prev;

typedef struct st_gpu_encoder {
    st_buf buf;
    uint32_t n_records;
    int64_t t0_ns, t1_ns;
    st_gpu_prev prev;
} st_gpu_encoder;

int st_gpu_chunk_start(st_gpu_encoder *e);
int st_gpu_put(st_gpu_encoder *e, const st_gpu_rec *r);

typedef struct st_gpu_cursor {
    const uint8_t *p, *end;
    uint32_t remaining;
    int version; /* 1 or 2, from the chunk's tag */
    st_gpu_prev prev;
} st_gpu_cursor;

int st_gpu_cursor_open(st_gpu_cursor *c, const void *data, size_t size, uint32_t n_records);
/* 1: *r filled; 0: chunk done (every byte consumed); ST_ECORRUPT. */
int st_gpu_next(st_gpu_cursor *c, st_gpu_rec *r);


/* ---- CPU records (docs/trace-format.md, "CPU chunk") ---- */

enum st_cpu_rec_kind {
    ST_CPU_REC_IN = 0,         /* switched in */
    ST_CPU_REC_OUT = 1,        /* switched out, blocked */
    ST_CPU_REC_PREEMPTED = 2,  /* switched out, still runnable */
    ST_CPU_REC_SAMPLE = 3,     /* a sample, with the stage the writer saw open */
    ST_CPU_REC_SAMPLE_UNKNOWN = 4, /* a sample whose stage the writer did not know */
    ST_CPU_REC_LOST = 5,       /* the kernel lost `n` records here */
    ST_CPU_REC_SAMPLE_FLAGS = 6,         /* a sample with flags (the GIL state), stage known */
    ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN = 7, /* a sample with flags, stage unknown */
    ST_CPU_REC_OUT_STACK = 8,  /* switched out, blocked, with the stack it blocked in */
    ST_CPU_REC_OUT_SCHED = 9,  /* switched out, blocked, with the sched_switch tracepoint's stack
                                  (its first `n` frames the kernel's) and task state (`flags`) */
    ST_CPU_REC_PY_SAMPLE = 10, /* a Python-frames sample (st_cpu_sample_add), with its stage */
    ST_CPU_REC_PY_SAMPLE_UNKNOWN = 11, /* a Python-frames sample whose stage the writer did not know */
};
#define ST_CPU_REC_KIND_MAX 11
/* A task state letter of kind 9 (the kernel's: 'S', 'D', ...): printable ASCII. */
#define ST_CPU_STATE_OK(c) ((c) >= 0x21 && (c) <= 0x7e)
/* Flags of a sample with flags: bit 0 the GIL state is known, bit 1 the
 * thread held the GIL (only with bit 0); other bits must be 0. */
#define ST_CPU_FLAG_GIL_KNOWN 1u
#define ST_CPU_FLAG_GIL_HELD 2u
/* Stage of a ST_CPU_REC_SAMPLE: ST_CPU_NO_STAGE when no range was open. */
#define ST_CPU_NO_STAGE UINT32_MAX

typedef struct st_cpu_rec {
    uint32_t kind;   /* st_cpu_rec_kind */
    int64_t ts_ns;
    uint32_t stack;  /* samples: an id in cpu_stacks; ST_CPU_REC_OUT_STACK: the wait stack */
    uint32_t stage;  /* ST_CPU_REC_SAMPLE(_FLAGS): the stage, or ST_CPU_NO_STAGE */
    uint64_t n;      /* ST_CPU_REC_LOST: records lost; ST_CPU_REC_OUT_SCHED: kernel frames */
    uint32_t flags;  /* ST_CPU_REC_SAMPLE_FLAGS(_UNKNOWN): ST_CPU_FLAG_*; ST_CPU_REC_OUT_SCHED: the state */
} st_cpu_rec;

typedef struct st_cpu_encoder {
    st_buf buf;
    uint32_t n_records;
    int64_t prev_ts, t0_ns, t1_ns;
} st_cpu_encoder;

int st_cpu_chunk_start(st_cpu_encoder *e);
/* 0, or -1 (no memory, a bad kind). */
int st_cpu_put(st_cpu_encoder *e, const st_cpu_rec *r);

typedef struct st_cpu_cursor {
    const uint8_t *p, *end;
    uint32_t remaining;
    int64_t prev_ts;
} st_cpu_cursor;

int st_cpu_cursor_open(st_cpu_cursor *c, const void *data, size_t size, uint32_t n_records);
/* 1: *r filled; 0: chunk done (every byte consumed); ST_ECORRUPT. */
int st_cpu_next(st_cpu_cursor *c, st_cpu_rec *r);

/* A stack's frames (cpu_stacks.data): n × varint zigzag(frame - previous
 * frame), the first from 0. put: 0 or -1; get: 0 or ST_ECORRUPT (the count
 * must match and every byte be used). */
int st_cpu_stack_put(st_buf *b, const uint64_t *frames, uint32_t n);
int st_cpu_stack_get(const void *data, size_t size, uint32_t n, uint64_t *frames);

#endif
