/* fuzz_chunks.c: libFuzzer target over the chunk decoders of
 * tracer/encoding.h, fed raw bytes (no SQLite around them).
 *
 * The first bytes of an input choose the parameters a reader would take from
 * the chunk row (n_events / n_samples, n_stages / n_counters); the rest is
 * the chunk; mode % 3 picks the decoder. Event chunks go through
 * st_event_cursor_open/st_event_next, counter chunks through
 * st_counter_cursor_open/st_counter_next, GPU chunks through
 * st_gpu_cursor_open/st_gpu_next; the decoders must stop at the end of the
 * bytes and report corruption, never read past it. Every accepted event is
 * checked against the format's rules (non-decreasing time, ends within the
 * stack, stage ids in range; GPU records: a known kind, a duration that does
 * not overflow). Then a round trip: the events or GPU records the input
 * decodes to are encoded again and must decode to the same.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "encoding.h"
#include "stagetrace.h"

static uint32_t take32(const uint8_t **p, size_t *n)
{
    uint32_t v = 0;
    for (int i = 0; i < 4 && *n; i++, (*p)++, (*n)--) v |= (uint32_t)**p << (8 * i);
    return v;
}

#define MAX_EVENTS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t n = size;
    uint32_t mode = take32(&p, &n);
    uint32_t count = take32(&p, &n) % (MAX_EVENTS + 2);
    uint32_t limit = take32(&p, &n) % 300; /* 0: unchecked */
    if (mode % 3 == 2) {
        static st_gpu_rec recs[MAX_EVENTS + 2];
        st_gpu_cursor c;
        if (st_gpu_cursor_open(&c, p, n, count) != 0) return 0;
        uint32_t n_rec = 0;
        int rc;
        while ((rc = st_gpu_next(&c, &recs[n_rec])) == 1) {
            const st_gpu_rec *r = &recs[n_rec];
            if (r->kind < 1 || r->kind > ST_GPU_KIND_MAX || r->dur_ns < 0) abort();
            if (r->start_ns > 0 && r->dur_ns > INT64_MAX - r->start_ns) abort();
            if (++n_rec > count) abort();
        }
        if (rc != 0 && rc != ST_ECORRUPT) abort();
        if (rc != 0) return 0;
        static st_gpu_encoder e;
        st_buf_free(&e.buf);
        memset(&e, 0, sizeof e);
        if (st_gpu_chunk_start(&e)) abort();
        for (uint32_t i = 0; i < n_rec; i++)
            if (st_gpu_put(&e, &recs[i])) abort();
        st_gpu_cursor c2;
        if (st_gpu_cursor_open(&c2, e.buf.data, e.buf.len, e.n_records)) abort();
        st_gpu_rec r2;
        for (uint32_t i = 0; i < n_rec; i++) {
            const st_gpu_rec *a = &recs[i];
            if (st_gpu_next(&c2, &r2) != 1 || r2.kind != a->kind || r2.name != a->name || r2.start_ns != a->start_ns ||
                r2.dur_ns != a->dur_ns || r2.bytes != a->bytes || r2.copy_kind != a->copy_kind ||
                r2.src_mem != a->src_mem || r2.dst_mem != a->dst_mem || r2.correlation != a->correlation ||
                r2.os_tid != a->os_tid)
                abort();
        }
        if (st_gpu_next(&c2, &r2) != 0) abort();
        return 0;
    }
    if (mode % 3 == 1) {
        st_counter_cursor c;
        if (st_counter_cursor_open(&c, p, n, count, limit) != 0) return 0;
        st_sample s;
        int64_t prev = INT64_MIN;
        int rc;
        while ((rc = st_counter_next(&c, &s)) == 1) {
            if (s.ts_ns < prev) abort();
            if (limit && s.counter >= limit) abort();
            prev = s.ts_ns;
        }
        if (rc != 0 && rc != ST_ECORRUPT) abort();
        return 0;
    }
    static st_event_cursor c;
    if (st_event_cursor_open(&c, p, n, count, limit) != 0) return 0;
    static st_event evs[MAX_EVENTS + 2];
    uint32_t n_ev = 0, open0 = c.depth;
    static st_open_range head[ST_MAX_DEPTH];
    memcpy(head, c.stack, sizeof head);
    int64_t prev = c.prev_ts;
    int rc;
    while ((rc = st_event_next(&c, &evs[n_ev])) == 1) {
        const st_event *e = &evs[n_ev];
        if (e->ts_ns < prev) abort();
        if (limit && e->stage >= limit) abort();
        if (e->is_end && e->start_ns > e->ts_ns) abort();
        if (e->depth >= ST_MAX_DEPTH) abort();
        prev = e->ts_ns;
        if (++n_ev > count) abort();
    }
    if (rc != 0 && rc != ST_ECORRUPT) abort();
    if (rc != 0) return 0;
    /* Round trip: re-encode from the same open stack; it must decode the same. */
    static st_event_encoder e;
    st_buf_free(&e.buf);
    memset(&e, 0, sizeof e);
    e.depth = open0;
    memcpy(e.stack, head, sizeof head);
    if (st_event_chunk_start(&e)) abort();
    for (uint32_t i = 0; i < n_ev; i++) {
        int r = evs[i].is_end ? st_event_put_end(&e, evs[i].ts_ns) : st_event_put_begin(&e, evs[i].stage, evs[i].ts_ns);
        if (r) abort();
    }
    static st_event_cursor c2;
    if (st_event_cursor_open(&c2, e.buf.data, e.buf.len, e.n_events, limit)) abort();
    st_event ev;
    for (uint32_t i = 0; i < n_ev; i++) {
        if (st_event_next(&c2, &ev) != 1) abort();
        if (ev.is_end != evs[i].is_end || ev.stage != evs[i].stage || ev.ts_ns != evs[i].ts_ns ||
            ev.depth != evs[i].depth || (ev.is_end && ev.start_ns != evs[i].start_ns))
            abort();
    }
    if (st_event_next(&c2, &ev) != 0) abort();
    return 0;
}
