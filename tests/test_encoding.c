/* test_encoding.c: tests of the chunk encodings (tracer/encoding.h, .c):
 * varints, range-event chunks, counter-sample chunks and GPU chunks.
 *
 * Round trips: seeded random event streams (timestamps near 0, near
 * INT64_MAX / 2 and up to INT64_MAX, zero and huge durations, nesting to the
 * full 256 open ranges, stage ids up to 4095, chunk restarts with open ranges
 * carried in the header) are encoded and decoded chunk by chunk, and every
 * decoded field (kind, stage, depth, ts_ns, start_ns of ends) must equal the
 * model's. Counter samples with awkward values (-0.0, infinities, NaNs with
 * payloads, subnormals, integers at the edge of the integer form) must come
 * back bit for bit.
 *
 * Robustness: every prefix of a valid chunk, extra trailing bytes, a wrong
 * declared count, random byte corruption and over-long varints must be
 * reported as ST_ECORRUPT, or decode to events that are self-consistent;
 * every buffer handed to a decoder is a heap block of exactly its size, so
 * an ASan build (make SAN=address,undefined) catches any read past it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "encoding.h"
#include "stagetrace.h"

/* ---- helpers ---- */

static uint64_t rng_state;

static uint64_t rng_next(void) /* splitmix64: deterministic per seed */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t n) { return n ? rng_next() % n : 0; }

/* A heap copy of exactly `len` bytes (at least one byte allocated, so that a
 * zero-length buffer still has a distinct address that ASan guards). */
static uint8_t *exact_copy(const uint8_t *data, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (len) memcpy(p, data, len);
    return p;
}

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double double_of(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* ---- the model of an event stream ---- */

typedef struct exp_event {
    int is_end;
    uint32_t stage, depth;
    int64_t ts_ns, start_ns;
} exp_event;

typedef struct exp_chunk {
    uint8_t *data;
    size_t len;
    uint32_t n_events;
    uint32_t open_at_start;                 /* ranges carried in the header */
    st_open_range header[ST_MAX_DEPTH];
    exp_event *events;
    int64_t t0_ns, t1_ns;                   /* what the encoder reported */
} exp_chunk;

typedef struct exp_stream {
    exp_chunk *chunks;
    size_t n_chunks, cap_chunks;
    exp_event *pending;                     /* events of the chunk being built */
    size_t n_pending, cap_pending;
    st_open_range stack[ST_MAX_DEPTH];      /* the model's open ranges */
    uint32_t depth;
    uint32_t max_depth_seen;
    uint64_t restarts_with_open;
} exp_stream;

static void stream_add(exp_stream *s, exp_event ev)
{
    if (s->n_pending == s->cap_pending) {
        s->cap_pending = s->cap_pending ? s->cap_pending * 2 : 256;
        s->pending = realloc(s->pending, s->cap_pending * sizeof *s->pending);
        assert_non_null(s->pending);
    }
    s->pending[s->n_pending++] = ev;
}

/* Saves the encoder's current chunk with its expected events. The chunk's
 * header was written by st_event_chunk_start from `header`/`open`. */
static void stream_cut(exp_stream *s, st_event_encoder *e, const st_open_range *header,
                       uint32_t open)
{
    assert_int_equal(e->n_events, s->n_pending);
    if (s->n_chunks == s->cap_chunks) {
        s->cap_chunks = s->cap_chunks ? s->cap_chunks * 2 : 16;
        s->chunks = realloc(s->chunks, s->cap_chunks * sizeof *s->chunks);
        assert_non_null(s->chunks);
    }
    exp_chunk *c = &s->chunks[s->n_chunks++];
    memset(c, 0, sizeof *c);
    c->data = exact_copy(e->buf.data, e->buf.len);
    c->len = e->buf.len;
    c->n_events = e->n_events;
    c->open_at_start = open;
    memcpy(c->header, header, open * sizeof *header);
    c->events = malloc((s->n_pending ? s->n_pending : 1) * sizeof *c->events);
    assert_non_null(c->events);
    memcpy(c->events, s->pending, s->n_pending * sizeof *s->pending);
    c->t0_ns = e->t0_ns;
    c->t1_ns = e->t1_ns;
    /* The encoder's time bounds cover the header's starts and every event. */
    if (c->n_events) {
        int64_t t0 = open ? header[0].start_ns : c->events[0].ts_ns;
        assert_int_equal(c->t0_ns, t0);
        assert_int_equal(c->t1_ns, c->events[c->n_events - 1].ts_ns);
    }
    s->n_pending = 0;
}

static void stream_free(exp_stream *s)
{
    for (size_t i = 0; i < s->n_chunks; i++) {
        free(s->chunks[i].data);
        free(s->chunks[i].events);
    }
    free(s->chunks);
    free(s->pending);
    memset(s, 0, sizeof *s);
}

typedef struct stream_params {
    uint64_t seed;
    int64_t base_ns;        /* the first timestamp */
    int64_t limit_ns;       /* timestamps never exceed this */
    size_t n_ops;
    int restart_per_mille;  /* chance of a chunk restart per operation */
} stream_params;

static int64_t next_delta(int64_t ts, int64_t limit)
{
    uint64_t r = rng_below(16);
    uint64_t d;
    if (r < 4) d = 0;                                  /* zero durations */
    else if (r < 11) d = 1 + rng_below(1000);          /* ordinary */
    else if (r < 14) d = rng_below(1ull << 40);        /* long */
    else d = rng_next() >> (4 + rng_below(20));        /* huge: up to 2^60 */
    if ((uint64_t)(limit - ts) < d) d = (uint64_t)(limit - ts); /* runs into the limit */
    return (int64_t)d;
}

static uint32_t random_stage(void)
{
    uint64_t r = rng_below(8);
    if (r == 0) return 0;
    if (r == 1) return ST_MAX_STAGES - 1;
    if (r < 4) return (uint32_t)rng_below(128);        /* one-byte varints */
    return (uint32_t)rng_below(ST_MAX_STAGES);
}

/* Builds a random stream into chunks. Phases alternate between diving
 * (mostly begins, all the way to 256 open ranges), climbing and wandering. */
static void build_stream(exp_stream *s, st_event_encoder *e, const stream_params *p)
{
    memset(s, 0, sizeof *s);
    memset(e, 0, sizeof *e);
    rng_state = p->seed;
    assert_int_equal(st_event_chunk_start(e), 0);
    st_open_range header[ST_MAX_DEPTH];
    uint32_t header_open = 0;
    int64_t ts = p->base_ns;
    int phase = 0; /* 0 wander, 1 dive, 2 climb */
    for (size_t op = 0; op < p->n_ops; op++) {
        if (rng_below(500) == 0) phase = (int)rng_below(3);
        if (phase == 1 && s->depth == ST_MAX_DEPTH) phase = 2;
        if (phase == 2 && s->depth == 0) phase = 0;
        if ((int)rng_below(1000) < p->restart_per_mille) {
            stream_cut(s, e, header, header_open);
            memcpy(header, s->stack, s->depth * sizeof *header);
            header_open = s->depth;
            if (s->depth) s->restarts_with_open++;
            assert_int_equal(st_event_chunk_start(e), 0);
            continue;
        }
        unsigned begin_chance = phase == 1 ? 90 : phase == 2 ? 10 : 50;
        int begin = s->depth == 0 || (s->depth < ST_MAX_DEPTH && rng_below(100) < begin_chance);
        int64_t next = op == 0 ? ts : ts + next_delta(ts, p->limit_ns);
        ts = next;
        if (begin) {
            uint32_t stage = random_stage();
            assert_int_equal(st_event_put_begin(e, stage, ts), 0);
            s->stack[s->depth] = (st_open_range){stage, ts};
            stream_add(s, (exp_event){0, stage, s->depth, ts, ts});
            s->depth++;
            if (s->depth > s->max_depth_seen) s->max_depth_seen = s->depth;
        } else {
            assert_int_equal(st_event_put_end(e, ts), 0);
            s->depth--;
            stream_add(s, (exp_event){1, s->stack[s->depth].stage, s->depth, ts,
                                      s->stack[s->depth].start_ns});
        }
        assert_int_equal(e->depth, s->depth);
    }
    stream_cut(s, e, header, header_open);
}

/* Decodes one chunk and compares every event with the model. */
static void check_chunk(const exp_chunk *c, uint32_t n_stages)
{
    uint8_t *buf = exact_copy(c->data, c->len);
    st_event_cursor *cur = malloc(sizeof *cur);
    assert_non_null(cur);
    assert_int_equal(st_event_cursor_open(cur, buf, c->len, c->n_events, n_stages), 0);
    assert_int_equal(cur->depth, c->open_at_start);
    for (uint32_t i = 0; i < c->open_at_start; i++) {
        assert_int_equal(cur->stack[i].stage, c->header[i].stage);
        assert_int_equal(cur->stack[i].start_ns, c->header[i].start_ns);
    }
    for (uint32_t i = 0; i < c->n_events; i++) {
        st_event ev;
        memset(&ev, 0xa5, sizeof ev);
        assert_int_equal(st_event_next(cur, &ev), 1);
        const exp_event *x = &c->events[i];
        assert_int_equal(ev.is_end, x->is_end);
        assert_int_equal(ev.stage, x->stage);
        assert_int_equal(ev.depth, x->depth);
        assert_int_equal(ev.ts_ns, x->ts_ns);
        assert_int_equal(ev.start_ns, x->start_ns);
    }
    st_event ev;
    assert_int_equal(st_event_next(cur, &ev), 0);
    assert_int_equal(st_event_next(cur, &ev), 0); /* done stays done */
    free(cur);
    free(buf);
}

static void round_trip(const stream_params *p, uint32_t *max_depth, uint64_t *restarts)
{
    exp_stream s;
    st_event_encoder *e = malloc(sizeof *e);
    assert_non_null(e);
    build_stream(&s, e, p);
    uint64_t events = 0;
    for (size_t i = 0; i < s.n_chunks; i++) {
        check_chunk(&s.chunks[i], ST_MAX_STAGES);
        events += s.chunks[i].n_events;
    }
    assert_true(events > p->n_ops / 2);
    *max_depth = s.max_depth_seen > *max_depth ? s.max_depth_seen : *max_depth;
    *restarts += s.restarts_with_open;
    st_buf_free(&e->buf);
    free(e);
    stream_free(&s);
}

/* ---- tests: events ---- */

static void test_events_round_trip_random(void **state)
{
    (void)state;
    const int64_t half = INT64_MAX / 2;
    const stream_params params[] = {
        {1, 0, INT64_MAX / 4, 20000, 5},                    /* from time 0 */
        {2, 0, 1000, 20000, 5},                             /* all near 0, many equal times */
        {3, half - 1000, half + 1000000, 20000, 5},         /* near INT64_MAX / 2 */
        {4, half, INT64_MAX, 20000, 3},                     /* runs up to INT64_MAX */
        {5, 123456789, INT64_MAX / 2, 40000, 1},            /* long chunks */
        {6, 7, INT64_MAX / 2, 20000, 100},                  /* very short chunks */
    };
    uint32_t max_depth = 0;
    uint64_t restarts = 0;
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) round_trip(&params[i], &max_depth, &restarts);
    for (uint64_t seed = 100; seed < 120; seed++) {
        stream_params p = {seed, (int64_t)rng_below(1ull << 62), INT64_MAX, 3000, (int)(seed % 50)};
        round_trip(&p, &max_depth, &restarts);
    }
    /* The random walk did reach the full 256 open ranges and did restart
     * chunks with ranges open. */
    assert_int_equal(max_depth, ST_MAX_DEPTH);
    assert_true(restarts > 100);
}

/* A scripted stream: a range spanning time 0 to INT64_MAX/2 (a huge
 * duration), zero-length ranges, 256 open ranges carried over a restart, and
 * ends decoded in the next chunk with start times from its header. */
static void test_events_scripted_extremes(void **state)
{
    (void)state;
    st_event_encoder *e = calloc(1, sizeof *e);
    assert_non_null(e);
    const int64_t half = INT64_MAX / 2;
    assert_int_equal(st_event_chunk_start(e), 0);
    assert_int_equal(e->buf.len, 2); /* tag + depth 0 */
    assert_int_equal(st_event_put_begin(e, 4095, 0), 0);
    assert_int_equal(st_event_put_begin(e, 0, 0), 0);
    assert_int_equal(st_event_put_end(e, 0), 0); /* zero duration at time 0 */
    for (uint32_t d = 1; d < ST_MAX_DEPTH; d++) assert_int_equal(st_event_put_begin(e, d * 16 - 1, half - 1000 + d), 0);
    assert_int_equal(e->depth, ST_MAX_DEPTH);
    /* A 257th open range and a step back in time are refused, state intact. */
    size_t len = e->buf.len;
    uint32_t n = e->n_events;
    assert_int_equal(st_event_put_begin(e, 1, half), -1);
    assert_int_equal(st_event_put_end(e, half - 1000), -1);
    assert_int_equal(e->buf.len, len);
    assert_int_equal(e->n_events, n);
    assert_int_equal(e->depth, ST_MAX_DEPTH);

    uint8_t *first = exact_copy(e->buf.data, e->buf.len);
    size_t first_len = e->buf.len;
    uint32_t first_n = e->n_events;
    /* Restart with all 256 ranges open, then close them all. */
    assert_int_equal(st_event_chunk_start(e), 0);
    assert_int_equal(e->t0_ns, 0);
    for (uint32_t d = 0; d < ST_MAX_DEPTH; d++) assert_int_equal(st_event_put_end(e, half + d), 0);
    assert_int_equal(st_event_put_end(e, half + 1000), -1); /* nothing open */
    assert_int_equal(e->t0_ns, 0);
    assert_int_equal(e->t1_ns, half + 255);

    st_event_cursor *c = malloc(sizeof *c);
    assert_non_null(c);
    st_event ev = {0};
    assert_int_equal(st_event_cursor_open(c, first, first_len, first_n, ST_MAX_STAGES), 0);
    assert_int_equal(st_event_next(c, &ev), 1);
    assert_int_equal(ev.stage, 4095);
    assert_int_equal(ev.ts_ns, 0);
    assert_int_equal(st_event_next(c, &ev), 1);
    assert_int_equal(st_event_next(c, &ev), 1);
    assert_true(ev.is_end);
    assert_int_equal(ev.stage, 0);
    assert_int_equal(ev.depth, 1);
    assert_int_equal(ev.start_ns, 0);
    assert_int_equal(ev.ts_ns, 0);
    for (uint32_t d = 1; d < ST_MAX_DEPTH; d++) {
        assert_int_equal(st_event_next(c, &ev), 1);
        assert_false(ev.is_end);
        assert_int_equal(ev.depth, d);
        assert_int_equal(ev.stage, d * 16 - 1);
    }
    assert_int_equal(st_event_next(c, &ev), 0);

    uint8_t *second = exact_copy(e->buf.data, e->buf.len);
    assert_int_equal(st_event_cursor_open(c, second, e->buf.len, e->n_events, ST_MAX_STAGES), 0);
    assert_int_equal(c->depth, ST_MAX_DEPTH);
    for (int d = ST_MAX_DEPTH - 1; d >= 0; d--) {
        assert_int_equal(st_event_next(c, &ev), 1);
        assert_true(ev.is_end);
        assert_int_equal(ev.depth, (uint32_t)d);
        assert_int_equal(ev.ts_ns, half + (ST_MAX_DEPTH - 1 - d));
        if (d == 0) {
            assert_int_equal(ev.stage, 4095);
            assert_int_equal(ev.start_ns, 0); /* began at 0, lasted INT64_MAX / 2 */
        } else {
            assert_int_equal(ev.stage, (uint32_t)d * 16 - 1);
            assert_int_equal(ev.start_ns, half - 1000 + d);
        }
    }
    assert_int_equal(st_event_next(c, &ev), 0);
    /* The stage check: with only 4095 stages known, stage 4095 is corrupt
     * (in the first chunk's events, in the second chunk's header). */
    assert_int_equal(st_event_cursor_open(c, first, first_len, first_n, ST_MAX_STAGES - 1), 0);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    assert_int_equal(st_event_cursor_open(c, second, e->buf.len, e->n_events, ST_MAX_STAGES - 1),
                     ST_ECORRUPT);
    free(first);
    free(second);
    free(c);
    st_buf_free(&e->buf);
    free(e);
}

/* ---- tests: counters ---- */

static void test_counters_round_trip_bit_exact(void **state)
{
    (void)state;
    static const uint64_t special_bits[] = {
        0x0000000000000000ull, /* +0.0 */
        0x8000000000000000ull, /* -0.0 */
        0x7ff0000000000000ull, /* +inf */
        0xfff0000000000000ull, /* -inf */
        0x7ff8000000000000ull, /* quiet NaN */
        0xfff8000000000000ull, /* negative quiet NaN */
        0x7ff8000000000123ull, /* NaN with a payload */
        0x7ff0000000000001ull, /* signalling NaN */
        0x0000000000000001ull, /* smallest subnormal */
        0x800fffffffffffffull, /* largest negative subnormal */
        0x7fefffffffffffffull, /* DBL_MAX */
        0xffefffffffffffffull, /* -DBL_MAX */
        0x0010000000000000ull, /* DBL_MIN */
    };
    static const double values[] = {
        1, -1, 2, 42, -42, 127, 128, -64, -65, 1e6, 123456789, -987654321,
        9.0e15, -9.0e15, 9.0e15 + 2, -9.0e15 - 2,              /* around the integer form's edge */
        9007199254740992.0, -9007199254740992.0,                /* 2^53 */
        9223372036854775807.0, -9223372036854775808.0,          /* +-2^63 */
        1.8446744073709552e19, 1e300, -1e300,
        0.5, -0.25, 1.0 / 3.0, -2.0 / 3.0, 0.1, 1e-300, 3.141592653589793, 4503599627370495.5,
    };
    size_t n_special = sizeof special_bits / sizeof special_bits[0];
    size_t n_values = sizeof values / sizeof values[0];
    size_t n_random = 4000;
    size_t total = n_special + n_values + n_random;
    uint64_t *want_bits = malloc(total * sizeof *want_bits);
    uint32_t *want_counter = malloc(total * sizeof *want_counter);
    int64_t *want_ts = malloc(total * sizeof *want_ts);
    assert_non_null(want_bits);
    assert_non_null(want_counter);
    assert_non_null(want_ts);
    rng_state = 77;
    for (size_t i = 0; i < total; i++) {
        if (i < n_special) want_bits[i] = special_bits[i];
        else if (i < n_special + n_values) want_bits[i] = bits_of(values[i - n_special]);
        else {
            uint64_t r = rng_below(4);
            if (r == 0) want_bits[i] = rng_next();                                 /* any bits */
            else if (r == 1) want_bits[i] = bits_of((double)(int64_t)rng_next());  /* huge ints */
            else if (r == 2) want_bits[i] = bits_of((double)((int64_t)rng_below(2000001) - 1000000));
            else want_bits[i] = bits_of(((double)(int64_t)rng_next()) / 1e9);
        }
        uint64_t cr = rng_below(4);
        want_counter[i] = cr == 0 ? 0 : cr == 1 ? ST_MAX_COUNTERS - 1 : (uint32_t)rng_below(UINT32_MAX);
    }
    st_counter_encoder enc;
    memset(&enc, 0, sizeof enc);
    assert_int_equal(st_counter_chunk_start(&enc), 0);
    int64_t ts = 0;
    for (size_t i = 0; i < total; i++) {
        if (i == total / 2) ts = INT64_MAX / 2;
        else if (i == total - 1) ts = INT64_MAX;
        else if (i) ts += (int64_t)(rng_below(3) == 0 ? 0 : rng_below(1u << 20));
        want_ts[i] = ts;
        assert_int_equal(st_counter_put(&enc, want_counter[i], ts, double_of(want_bits[i])), 0);
    }
    assert_int_equal(st_counter_put(&enc, 0, INT64_MAX - 1, 1.0), -1); /* back in time */
    assert_int_equal(enc.n_samples, total);
    assert_int_equal(enc.t0_ns, 0);
    assert_int_equal(enc.t1_ns, INT64_MAX);

    uint8_t *buf = exact_copy(enc.buf.data, enc.buf.len);
    st_counter_cursor cur;
    assert_int_equal(st_counter_cursor_open(&cur, buf, enc.buf.len, (uint32_t)total, 0), 0);
    for (size_t i = 0; i < total; i++) {
        st_sample s;
        assert_int_equal(st_counter_next(&cur, &s), 1);
        assert_int_equal(s.counter, want_counter[i]);
        assert_int_equal(s.ts_ns, want_ts[i]);
        if (bits_of(s.value) != want_bits[i])
            fail_msg("sample %zu: value bits %016llx, want %016llx", i,
                     (unsigned long long)bits_of(s.value), (unsigned long long)want_bits[i]);
    }
    st_sample s;
    assert_int_equal(st_counter_next(&cur, &s), 0);
    /* With 4096 counters known, a larger id is corrupt. */
    assert_int_equal(st_counter_cursor_open(&cur, buf, enc.buf.len, (uint32_t)total, ST_MAX_COUNTERS), 0);
    int rc;
    size_t ok = 0;
    while ((rc = st_counter_next(&cur, &s)) == 1) {
        assert_true(s.counter < ST_MAX_COUNTERS);
        ok++;
    }
    assert_int_equal(rc, ST_ECORRUPT);
    size_t first_big = 0;
    while (want_counter[first_big] < ST_MAX_COUNTERS) first_big++;
    assert_int_equal(ok, first_big);

    /* Small integers take the short form: a sample of 5 at delta 0 is 3 bytes. */
    assert_int_equal(st_counter_chunk_start(&enc), 0);
    assert_int_equal(st_counter_put(&enc, 1, 0, 5.0), 0);
    assert_int_equal(enc.buf.len, 1 + 3);
    assert_int_equal(st_counter_put(&enc, 1, 0, -0.0), 0); /* -0.0 keeps its sign: 8-byte form */
    assert_int_equal(enc.buf.len, 1 + 3 + 2 + 8);
    free(buf);
    free(want_bits);
    free(want_counter);
    free(want_ts);
    st_buf_free(&enc.buf);
}

/* ---- tests: truncation and corruption ---- */

/* Builds a random stream, then a chunk that opens 5 more ranges, then the
 * chunk under test: it carries at least 5 open ranges in its header, and has
 * big stage ids and big deltas. */
static void make_sample_event_chunk(exp_stream *s, st_event_encoder *e)
{
    stream_params p = {999, INT64_MAX / 2 - 5000000, INT64_MAX - (1ll << 40), 600, 0};
    build_stream(s, e, &p);
    int64_t ts = e->n_events ? e->t1_ns : p.base_ns;
    st_open_range header[ST_MAX_DEPTH];
    for (int chunk = 0; chunk < 2; chunk++) {
        memcpy(header, s->stack, s->depth * sizeof *header);
        uint32_t open = s->depth;
        assert_int_equal(st_event_chunk_start(e), 0);
        int n = chunk == 0 ? 5 : 150;
        for (int i = 0; i < n; i++) {
            ts += (int64_t)rng_below(1u << 30);
            int end = chunk == 1 && s->depth > 0 && (s->depth == ST_MAX_DEPTH || rng_below(2));
            if (chunk == 0 && s->depth == ST_MAX_DEPTH) end = 1;
            if (end) {
                assert_int_equal(st_event_put_end(e, ts), 0);
                s->depth--;
                stream_add(s, (exp_event){1, s->stack[s->depth].stage, s->depth, ts,
                                          s->stack[s->depth].start_ns});
            } else {
                uint32_t stage = random_stage();
                assert_int_equal(st_event_put_begin(e, stage, ts), 0);
                s->stack[s->depth] = (st_open_range){stage, ts};
                stream_add(s, (exp_event){0, stage, s->depth, ts, ts});
                s->depth++;
            }
        }
        stream_cut(s, e, header, open);
    }
}

/* Decodes `len` bytes declared to hold n events: returns the number of
 * events before the end or the error, and stores the final status. Checks
 * every event for self-consistency against a shadow stack. */
static uint32_t decode_checked(const uint8_t *data, size_t len, uint32_t n, uint32_t n_stages,
                               int *status, const exp_event *expect, uint32_t n_expect)
{
    uint8_t *buf = exact_copy(data, len);
    st_event_cursor *c = malloc(sizeof *c);
    assert_non_null(c);
    uint32_t got = 0;
    int rc = st_event_cursor_open(c, buf, len, n, n_stages);
    if (rc) {
        assert_int_equal(rc, ST_ECORRUPT);
        *status = rc;
        free(c);
        free(buf);
        return 0;
    }
    st_open_range shadow[ST_MAX_DEPTH];
    uint32_t depth = c->depth;
    assert_true(depth <= ST_MAX_DEPTH);
    memcpy(shadow, c->stack, depth * sizeof *shadow);
    int64_t prev = depth ? shadow[depth - 1].start_ns : 0;
    for (uint32_t i = 0; i < depth; i++) {
        if (n_stages) assert_true(shadow[i].stage < n_stages);
        assert_true(shadow[i].start_ns >= 0);
        if (i) assert_true(shadow[i].start_ns >= shadow[i - 1].start_ns);
    }
    for (;;) {
        st_event ev;
        rc = st_event_next(c, &ev);
        if (rc != 1) break;
        assert_true(got < n);
        assert_true(ev.ts_ns >= prev);
        prev = ev.ts_ns;
        if (ev.is_end) {
            assert_true(depth > 0);
            depth--;
            assert_int_equal(ev.depth, depth);
            assert_int_equal(ev.stage, shadow[depth].stage);
            assert_int_equal(ev.start_ns, shadow[depth].start_ns);
            assert_true(ev.start_ns <= ev.ts_ns);
        } else {
            assert_true(depth < ST_MAX_DEPTH);
            assert_int_equal(ev.depth, depth);
            assert_int_equal(ev.start_ns, ev.ts_ns);
            shadow[depth++] = (st_open_range){ev.stage, ev.ts_ns};
        }
        if (n_stages) assert_true(ev.stage < n_stages);
        if (expect && got < n_expect) {
            assert_int_equal(ev.is_end, expect[got].is_end);
            assert_int_equal(ev.stage, expect[got].stage);
            assert_int_equal(ev.depth, expect[got].depth);
            assert_int_equal(ev.ts_ns, expect[got].ts_ns);
            assert_int_equal(ev.start_ns, expect[got].start_ns);
        }
        got++;
    }
    assert_true(rc == 0 || rc == ST_ECORRUPT);
    if (rc == 0) assert_int_equal(got, n); /* done means: every declared event */
    *status = rc;
    free(c);
    free(buf);
    return got;
}

static void test_events_truncation_and_count(void **state)
{
    (void)state;
    exp_stream s;
    st_event_encoder *e = malloc(sizeof *e);
    assert_non_null(e);
    make_sample_event_chunk(&s, e);
    const exp_chunk *c = &s.chunks[s.n_chunks - 1];
    assert_true(c->open_at_start > 0);
    assert_int_equal(c->n_events, 150);
    int status;
    /* The whole chunk decodes exactly. */
    assert_int_equal(decode_checked(c->data, c->len, c->n_events, ST_MAX_STAGES, &status, c->events, c->n_events),
                     c->n_events);
    assert_int_equal(status, 0);
    /* Every proper prefix is corrupt; the events before the cut are the
     * chunk's own. */
    for (size_t len = 0; len < c->len; len++) {
        uint32_t got = decode_checked(c->data, len, c->n_events, ST_MAX_STAGES, &status, c->events, c->n_events);
        assert_int_equal(status, ST_ECORRUPT);
        assert_true(got < c->n_events);
    }
    /* Trailing bytes after the declared events are corrupt, whatever they are. */
    for (size_t extra = 1; extra <= 12; extra++) {
        uint8_t *longer = malloc(c->len + extra);
        assert_non_null(longer);
        memcpy(longer, c->data, c->len);
        for (size_t i = 0; i < extra; i++) longer[c->len + i] = (uint8_t)(i == 0 ? 0 : rng_next());
        uint32_t got = decode_checked(longer, c->len + extra, c->n_events, ST_MAX_STAGES, &status, c->events,
                                      c->n_events);
        assert_int_equal(got, c->n_events);
        assert_int_equal(status, ST_ECORRUPT);
        free(longer);
    }
    /* The declared count must match exactly. */
    assert_int_equal(decode_checked(c->data, c->len, c->n_events - 1, ST_MAX_STAGES, &status, c->events, c->n_events),
                     c->n_events - 1);
    assert_int_equal(status, ST_ECORRUPT);
    assert_int_equal(decode_checked(c->data, c->len, c->n_events + 1, ST_MAX_STAGES, &status, c->events, c->n_events),
                     c->n_events);
    assert_int_equal(status, ST_ECORRUPT);
    assert_int_equal(decode_checked(c->data, c->len, 0, ST_MAX_STAGES, &status, NULL, 0), 0);
    assert_int_equal(status, ST_ECORRUPT);
    assert_int_equal(decode_checked(c->data, c->len, UINT32_MAX, ST_MAX_STAGES, &status, c->events, c->n_events),
                     c->n_events);
    assert_int_equal(status, ST_ECORRUPT);
    /* A wrong chunk tag. */
    uint8_t *wrong = exact_copy(c->data, c->len);
    wrong[0] = ST_CHUNK_COUNTERS_V1;
    assert_int_equal(decode_checked(wrong, c->len, c->n_events, ST_MAX_STAGES, &status, NULL, 0), 0);
    assert_int_equal(status, ST_ECORRUPT);
    free(wrong);
    /* NULL with size 0 (what SQLite gives for an empty BLOB). */
    st_event_cursor *cur = malloc(sizeof *cur);
    assert_non_null(cur);
    assert_int_equal(st_event_cursor_open(cur, NULL, 0, 0, 0), ST_ECORRUPT);
    st_counter_cursor cc;
    assert_int_equal(st_counter_cursor_open(&cc, NULL, 0, 0, 0), ST_ECORRUPT);
    /* The smallest valid chunk: no open ranges, no events. */
    const uint8_t empty[] = {ST_CHUNK_EVENTS_V1, 0};
    assert_int_equal(decode_checked(empty, 2, 0, 0, &status, NULL, 0), 0);
    assert_int_equal(status, 0);
    free(cur);
    st_buf_free(&e->buf);
    free(e);
    stream_free(&s);
}

static void test_events_random_corruption(void **state)
{
    (void)state;
    exp_stream s;
    st_event_encoder *e = malloc(sizeof *e);
    assert_non_null(e);
    make_sample_event_chunk(&s, e);
    rng_state = 4242;
    uint64_t corrupt = 0, decoded = 0;
    for (size_t ci = 0; ci < s.n_chunks; ci++) {
        const exp_chunk *c = &s.chunks[ci];
        uint8_t *mut = malloc(c->len);
        assert_non_null(mut);
        for (int trial = 0; trial < 3000; trial++) {
            memcpy(mut, c->data, c->len);
            int flips = 1 + (int)rng_below(4);
            for (int f = 0; f < flips; f++) {
                size_t at = rng_below(c->len);
                if (rng_below(2)) mut[at] ^= (uint8_t)(1u << rng_below(8));
                else mut[at] = (uint8_t)rng_next();
            }
            size_t len = rng_below(8) == 0 ? rng_below(c->len + 1) : c->len;
            uint32_t n = rng_below(8) == 0 ? (uint32_t)rng_below(c->n_events * 2 + 1) : c->n_events;
            uint32_t n_stages = rng_below(2) ? ST_MAX_STAGES : 0;
            int status;
            decode_checked(mut, len, n, n_stages, &status, NULL, 0);
            if (status) corrupt++;
            else decoded++;
        }
        free(mut);
    }
    /* Garbage that merely starts like a chunk. */
    for (int trial = 0; trial < 3000; trial++) {
        size_t len = 1 + rng_below(200);
        uint8_t *junk = malloc(len);
        assert_non_null(junk);
        for (size_t i = 0; i < len; i++) junk[i] = (uint8_t)rng_next();
        junk[0] = ST_CHUNK_EVENTS_V1;
        if (len > 1 && rng_below(2)) junk[1] = (uint8_t)rng_below(4);
        int status;
        decode_checked(junk, len, (uint32_t)rng_below(100), ST_MAX_STAGES, &status, NULL, 0);
        if (status) corrupt++;
        else decoded++;
        free(junk);
    }
    /* Both outcomes happen: corruption is caught, and some mutations (a
     * changed delta, a changed stage) still decode to valid events. */
    assert_true(corrupt > 1000);
    assert_true(decoded > 10);
    st_buf_free(&e->buf);
    free(e);
    stream_free(&s);
}

static void test_counters_truncation_and_corruption(void **state)
{
    (void)state;
    st_counter_encoder enc;
    memset(&enc, 0, sizeof enc);
    assert_int_equal(st_counter_chunk_start(&enc), 0);
    rng_state = 31337;
    const uint32_t n = 120;
    int64_t ts = INT64_MAX / 2;
    for (uint32_t i = 0; i < n; i++) {
        ts += (int64_t)rng_below(1ull << 35);
        double v = (i % 3 == 0) ? (double)((int64_t)rng_below(1u << 20) - (1 << 19))
                                : double_of(rng_next());
        assert_int_equal(st_counter_put(&enc, (uint32_t)rng_below(ST_MAX_COUNTERS), ts, v), 0);
    }
    st_counter_cursor cur;
    st_sample smp;
    for (size_t len = 0; len <= enc.buf.len + 3; len++) {
        uint8_t *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        for (size_t i = 0; i < len; i++) buf[i] = i < enc.buf.len ? enc.buf.data[i] : 0;
        int rc = st_counter_cursor_open(&cur, buf, len, n, ST_MAX_COUNTERS);
        uint32_t got = 0;
        if (rc == 0)
            while ((rc = st_counter_next(&cur, &smp)) == 1) got++;
        if (len == enc.buf.len) {
            assert_int_equal(rc, 0);
            assert_int_equal(got, n);
        } else {
            assert_int_equal(rc, ST_ECORRUPT);
            assert_true(got <= n);
        }
        free(buf);
    }
    /* Declared count off by one either way. */
    uint8_t *exact = exact_copy(enc.buf.data, enc.buf.len);
    for (int delta = -1; delta <= 1; delta += 2) {
        assert_int_equal(st_counter_cursor_open(&cur, exact, enc.buf.len, (uint32_t)((int)n + delta), 0), 0);
        int rc;
        while ((rc = st_counter_next(&cur, &smp)) == 1) {
        }
        assert_int_equal(rc, ST_ECORRUPT);
    }
    free(exact);
    /* Random corruption: corrupt, or valid samples in time order. */
    uint64_t corrupt = 0;
    for (int trial = 0; trial < 5000; trial++) {
        uint8_t *mut = exact_copy(enc.buf.data, enc.buf.len);
        for (int f = 0; f < 1 + (int)rng_below(3); f++) mut[rng_below(enc.buf.len)] ^= (uint8_t)(1u + rng_below(255));
        int rc = st_counter_cursor_open(&cur, mut, enc.buf.len, n, ST_MAX_COUNTERS);
        uint32_t got = 0;
        int64_t prev = 0;
        if (rc == 0) {
            while ((rc = st_counter_next(&cur, &smp)) == 1) {
                assert_true(smp.counter < ST_MAX_COUNTERS);
                assert_true(smp.ts_ns >= prev);
                prev = smp.ts_ns;
                got++;
            }
        }
        assert_true(rc == 0 || rc == ST_ECORRUPT);
        if (rc == 0) assert_int_equal(got, n);
        else corrupt++;
        free(mut);
    }
    assert_true(corrupt > 100);
    st_buf_free(&enc.buf);
}

/* ---- flow chunks ---- */

/* Round trip of flow records (both directions, ids up to 2^64-1, equal
 * timestamps, times near INT64_MAX), the exact bytes of a small chunk as
 * docs/trace-format.md spells them, and every prefix, trailing bytes and a
 * wrong count refused. */
static void test_flows_round_trip_and_truncation(void **state)
{
    (void)state;
    st_flow_encoder enc;
    memset(&enc, 0, sizeof enc);
    assert_int_equal(st_flow_chunk_start(&enc), 0);
    /* The documented example: out of id 300 at 5, in of id 1 at 5, out of id 0 at 133. */
    assert_int_equal(st_flow_put(&enc, ST_FLOW_OUT, 5, 300), 0);
    assert_int_equal(st_flow_put(&enc, ST_FLOW_IN, 5, 1), 0);
    assert_int_equal(st_flow_put(&enc, ST_FLOW_OUT, 133, 0), 0);
    const uint8_t want[] = {0x46, 0x05, 0x00, 0xac, 0x02, 0x00, 0x01, 0x01, 0x80, 0x01, 0x00, 0x00};
    assert_int_equal(enc.buf.len, sizeof want);
    assert_memory_equal(enc.buf.data, want, sizeof want);
    assert_int_equal(enc.t0_ns, 5);
    assert_int_equal(enc.t1_ns, 133);
    /* time going back and a bad direction are refused by the encoder */
    assert_int_equal(st_flow_put(&enc, ST_FLOW_OUT, 132, 1), -1);
    assert_int_equal(st_flow_put(&enc, 2, 133, 1), -1);
    assert_int_equal(enc.n_records, 3);

    assert_int_equal(st_flow_chunk_start(&enc), 0);
    rng_state = 4242;
    const uint32_t n = 200;
    st_flow_rec model[200];
    int64_t ts = INT64_MAX - ((int64_t)1 << 45);
    for (uint32_t i = 0; i < n; i++) {
        ts += (int64_t)rng_below(i % 7 ? 1ull << 30 : 1); /* some equal times */
        uint64_t id = i % 5 == 0 ? UINT64_MAX - rng_below(3) : rng_next() >> rng_below(64);
        model[i] = (st_flow_rec){(uint32_t)rng_below(2), ts, id};
        assert_int_equal(st_flow_put(&enc, model[i].dir, ts, id), 0);
    }
    st_flow_cursor cur;
    st_flow_rec f;
    for (size_t len = 0; len <= enc.buf.len + 2; len++) {
        uint8_t *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        for (size_t i = 0; i < len; i++) buf[i] = i < enc.buf.len ? enc.buf.data[i] : 0;
        int rc = st_flow_cursor_open(&cur, buf, len, n);
        uint32_t got = 0;
        if (rc == 0)
            while ((rc = st_flow_next(&cur, &f)) == 1) {
                assert_true(got < n);
                assert_int_equal(f.dir, model[got].dir);
                assert_true(f.ts_ns == model[got].ts_ns);
                assert_true(f.id == model[got].id);
                got++;
            }
        if (len == enc.buf.len) {
            assert_int_equal(rc, 0);
            assert_int_equal(got, n);
        } else {
            assert_int_equal(rc, ST_ECORRUPT);
        }
        free(buf);
    }
    uint8_t *exact = exact_copy(enc.buf.data, enc.buf.len);
    for (int delta = -1; delta <= 1; delta += 2) {
        assert_int_equal(st_flow_cursor_open(&cur, exact, enc.buf.len, (uint32_t)((int)n + delta)), 0);
        int rc;
        while ((rc = st_flow_next(&cur, &f)) == 1) {
        }
        assert_int_equal(rc, ST_ECORRUPT);
    }
    free(exact);
    st_buf_free(&enc.buf);
}

/* Hostile flow chunks: a wrong tag, a truncated varint, an 11-byte varint,
 * a direction of 2 (or a two-byte 0), a time past INT64_MAX. */
static void test_flows_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint8_t bytes[24];
        size_t len;
        uint32_t n;
    } cases[] = {
        {"wrong tag", {0x45, 0x00, 0x00, 0x01}, 4, 1},
        {"empty", {0}, 0, 0},
        {"truncated id varint", {0x46, 0x01, 0x00, 0x80}, 4, 1},
        {"truncated delta", {0x46, 0x81}, 2, 1},
        {"direction 2", {0x46, 0x01, 0x02, 0x01}, 4, 1},
        {"direction 0x80 (a direction is one byte)", {0x46, 0x01, 0x80, 0x00, 0x01}, 5, 1},
        {"id of 11 bytes",
         {0x46, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 14, 1},
        {"tenth byte over 1", {0x46, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 13, 1},
        {"time overflow",
         {0x46, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, 0x01, 0x00, 0x00}, 15, 2},
        {"trailing byte", {0x46, 0x01, 0x00, 0x01, 0x00}, 5, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *buf = exact_copy(cases[i].bytes, cases[i].len);
        st_flow_cursor cur;
        st_flow_rec f;
        int rc = st_flow_cursor_open(&cur, buf, cases[i].len, cases[i].n);
        if (rc == 0)
            while ((rc = st_flow_next(&cur, &f)) == 1) {
            }
        if (rc != ST_ECORRUPT) fail_msg("%s: decoded (rc %d)", cases[i].what, rc);
        free(buf);
    }
    /* the largest valid record: delta INT64_MAX, id UINT64_MAX */
    const uint8_t ok[] = {0x46, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x01,
                          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    uint8_t *buf = exact_copy(ok, sizeof ok);
    st_flow_cursor cur;
    st_flow_rec f;
    assert_int_equal(st_flow_cursor_open(&cur, buf, sizeof ok, 1), 0);
    assert_int_equal(st_flow_next(&cur, &f), 1);
    assert_true(f.ts_ns == INT64_MAX);
    assert_true(f.id == UINT64_MAX);
    assert_int_equal(f.dir, ST_FLOW_IN);
    assert_int_equal(st_flow_next(&cur, &f), 0);
    free(buf);
}

/* ---- tests: varints ---- */

/* ---- GPU chunks ------------------------------------------------------------------------------- */

static int gpu_rec_equal(const st_gpu_rec *a, const st_gpu_rec *b)
{
    return a->kind == b->kind && a->name == b->name && a->start_ns == b->start_ns && a->dur_ns == b->dur_ns &&
           a->bytes == b->bytes && a->copy_kind == b->copy_kind && a->src_mem == b->src_mem &&
           a->dst_mem == b->dst_mem && a->correlation == b->correlation && a->os_tid == b->os_tid;
}

/* v2 round trip of records that exercise every field: repeats and changes
 * of name, cbid and thread, zero and non-zero bytes, correlation jumps both
 * ways up to the 32-bit limits, negative start deltas, and extreme times. */
static void test_gpu_round_trip(void **state)
{
    (void)state;
    enum { N = 4000 };
    st_gpu_rec *in = calloc(N, sizeof *in);
    assert_non_null(in);
    uint64_t seed = 42;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t x = (uint32_t)(seed >> 33);
        st_gpu_rec *r = &in[i];
        r->kind = 1 + x % 5;
        r->start_ns = i == 1 ? INT64_MAX - 5 : i == 2 ? -1000 : 1000000 + (int64_t)i * 1000 - (int64_t)(x % 3000);
        r->dur_ns = i == 1 ? 5 : (int64_t)(x % 100000);
        r->name = x % 4 == 0 ? x % 7 : (i ? in[i - 1].name : 0);
        r->correlation = i == 3 ? UINT32_MAX : i == 4 ? 0 : 100 + (uint32_t)i * 2 + (x % 5);
        r->copy_kind = r->kind == ST_GPU_API ? 200 + x % 3 : r->kind == ST_GPU_MEMCPY ? x % 6 : 0;
        if (r->kind == ST_GPU_MEMCPY || r->kind == ST_GPU_MEMSET) {
            r->bytes = i == 5 ? UINT64_MAX : (uint64_t)x * 4096;
            r->src_mem = x % 6;
            r->dst_mem = (x >> 3) % 6;
        }
        r->os_tid = r->kind == ST_GPU_API ? (i == 6 ? INT64_MIN : i == 7 ? INT64_MAX : 5000 + x % 3) : 0;
    }
    st_gpu_encoder e;
    memset(&e, 0, sizeof e);
    assert_int_equal(st_gpu_chunk_start(&e), 0);
    for (int i = 0; i < N; i++) assert_int_equal(st_gpu_put(&e, &in[i]), 0);
    assert_int_equal(e.buf.data[0], ST_CHUNK_GPU_V2);
    assert_int_equal(e.n_records, N);
    uint8_t *copy = malloc(e.buf.len);
    memcpy(copy, e.buf.data, e.buf.len);
    st_gpu_cursor c;
    assert_int_equal(st_gpu_cursor_open(&c, copy, e.buf.len, N), 0);
    st_gpu_rec r;
    for (int i = 0; i < N; i++) {
        assert_int_equal(st_gpu_next(&c, &r), 1);
        if (!gpu_rec_equal(&r, &in[i])) fail_msg("record %d differs", i);
    }
    assert_int_equal(st_gpu_next(&c, &r), 0);
    /* every proper prefix is corrupt or short (never a read past the end) */
    for (size_t len = 1; len < e.buf.len; len += 1 + len / 64) {
        uint8_t *pre = malloc(len);
        memcpy(pre, copy, len);
        assert_int_equal(st_gpu_cursor_open(&c, pre, len, N), 0);
        int k;
        uint32_t got = 0;
        while ((k = st_gpu_next(&c, &r)) == 1) got++;
        assert_int_equal(k, ST_ECORRUPT);
        assert_true(got < N);
        free(pre);
    }
    /* a reserved header bit is refused */
    copy[1] |= 0x80;
    assert_int_equal(st_gpu_cursor_open(&c, copy, e.buf.len, N), 0);
    assert_int_equal(st_gpu_next(&c, &r), ST_ECORRUPT);
    free(copy);
    st_buf_free(&e.buf);
    free(in);
}

/* A v1 chunk ('G': ten varints per record) still decodes: a kernel, then an
 * API call, written byte by byte. */
static void test_gpu_v1(void **state)
{
    (void)state;
    static const uint8_t v1[] = {
        0x47,
        /* kernel: kind 1, start +2000 (zigzag 4000 = 0xa0 0x1f), dur 300 (0xac 0x02), name 3, bytes 0,
         * copy 0, src 0, dst 0, correlation 9, tid 0 */
        0x01, 0xa0, 0x1f, 0xac, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00,
        /* API: kind 5, start -500 (zigzag 999 = 0xe7 0x07), dur 5, name 0, bytes 0, cbid 211 (0xd3 0x01),
         * 0, 0, correlation 9, tid 77 (zigzag 154 = 0x9a 0x01) */
        0x05, 0xe7, 0x07, 0x05, 0x00, 0x00, 0xd3, 0x01, 0x00, 0x00, 0x09, 0x9a, 0x01,
    };
    uint8_t *buf = malloc(sizeof v1);
    memcpy(buf, v1, sizeof v1);
    st_gpu_cursor c;
    st_gpu_rec r;
    assert_int_equal(st_gpu_cursor_open(&c, buf, sizeof v1, 2), 0);
    assert_int_equal(st_gpu_next(&c, &r), 1);
    st_gpu_rec k = {.kind = 1, .name = 3, .start_ns = 2000, .dur_ns = 300, .correlation = 9};
    assert_true(gpu_rec_equal(&r, &k));
    assert_int_equal(st_gpu_next(&c, &r), 1);
    st_gpu_rec a = {.kind = 5, .start_ns = 1500, .dur_ns = 5, .copy_kind = 211, .correlation = 9, .os_tid = 77};
    assert_true(gpu_rec_equal(&r, &a));
    assert_int_equal(st_gpu_next(&c, &r), 0);
    free(buf);
}

static void test_varints(void **state)
{
    (void)state;
    const uint64_t values[] = {0, 1, 127, 128, 255, 16383, 16384, (1ull << 32) - 1, 1ull << 32,
                               (1ull << 63) - 1, 1ull << 63, UINT64_MAX};
    const size_t sizes[] = {1, 1, 1, 2, 2, 2, 3, 5, 5, 9, 10, 10};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint8_t tmp[10];
        size_t n = st_varint_put(tmp, values[i]);
        assert_int_equal(n, sizes[i]);
        uint8_t *buf = exact_copy(tmp, n);
        uint64_t v = 12345;
        assert_int_equal(st_varint_get(buf, buf + n, &v), n);
        assert_true(v == values[i]);
        /* Any truncation is refused. */
        for (size_t k = 0; k < n; k++) assert_int_equal(st_varint_get(buf, buf + k, &v), 0);
        free(buf);
    }
    const int64_t signed_values[] = {0, -1, 1, INT64_MIN, INT64_MAX, -1000000, 63, -64};
    for (size_t i = 0; i < sizeof signed_values / sizeof signed_values[0]; i++)
        assert_true(st_unzigzag(st_zigzag(signed_values[i])) == signed_values[i]);
    assert_int_equal(st_zigzag(-1), 1);
    assert_int_equal(st_zigzag(1), 2);

    uint64_t v;
    /* Eleven bytes: longer than any 64-bit value needs. */
    uint8_t eleven[11];
    memset(eleven, 0x80, sizeof eleven);
    eleven[10] = 0x00;
    uint8_t *buf = exact_copy(eleven, sizeof eleven);
    assert_int_equal(st_varint_get(buf, buf + 11, &v), 0);
    free(buf);
    /* Ten bytes whose last carries bits beyond 64. */
    uint8_t over[10];
    memset(over, 0xff, sizeof over);
    over[9] = 0x02;
    buf = exact_copy(over, sizeof over);
    assert_int_equal(st_varint_get(buf, buf + 10, &v), 0);
    buf[9] = 0x7f;
    assert_int_equal(st_varint_get(buf, buf + 10, &v), 0);
    buf[9] = 0x81; /* continues past the tenth byte */
    assert_int_equal(st_varint_get(buf, buf + 10, &v), 0);
    buf[9] = 0x01; /* exactly UINT64_MAX */
    assert_int_equal(st_varint_get(buf, buf + 10, &v), 10);
    assert_true(v == UINT64_MAX);
    free(buf);

    st_event_cursor *c = malloc(sizeof *c);
    assert_non_null(c);
    st_event ev;
    /* An event whose tag is an eleven-byte varint. */
    uint8_t chunk1[2 + 11 + 1];
    chunk1[0] = ST_CHUNK_EVENTS_V1;
    chunk1[1] = 0;
    memcpy(chunk1 + 2, eleven, 11);
    chunk1[13] = 0;
    buf = exact_copy(chunk1, sizeof chunk1);
    assert_int_equal(st_event_cursor_open(c, buf, sizeof chunk1, 1, 0), 0);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    free(buf);
    /* A header depth as an over-long varint, and a depth of 257. */
    uint8_t chunk2[12] = {ST_CHUNK_EVENTS_V1};
    memcpy(chunk2 + 1, eleven, 11);
    buf = exact_copy(chunk2, sizeof chunk2);
    assert_int_equal(st_event_cursor_open(c, buf, sizeof chunk2, 0, 0), ST_ECORRUPT);
    free(buf);
    uint8_t chunk3[3] = {ST_CHUNK_EVENTS_V1, 0x81, 0x02}; /* 257 */
    buf = exact_copy(chunk3, sizeof chunk3);
    assert_int_equal(st_event_cursor_open(c, buf, sizeof chunk3, 0, 0), ST_ECORRUPT);
    free(buf);
    /* Deltas that would overflow int64: one above INT64_MAX, and two that
     * add up past it. */
    uint8_t chunk4[2 + 1 + 10] = {ST_CHUNK_EVENTS_V1, 0, 1};
    st_varint_put(chunk4 + 3, (uint64_t)INT64_MAX + 1);
    buf = exact_copy(chunk4, sizeof chunk4);
    assert_int_equal(st_event_cursor_open(c, buf, sizeof chunk4, 1, 0), 0);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    free(buf);
    uint8_t chunk5[32] = {ST_CHUNK_EVENTS_V1, 0};
    size_t len = 2;
    chunk5[len++] = 1;
    len += st_varint_put(chunk5 + len, (uint64_t)INT64_MAX);
    chunk5[len++] = 0;
    len += st_varint_put(chunk5 + len, 1);
    buf = exact_copy(chunk5, len);
    assert_int_equal(st_event_cursor_open(c, buf, len, 2, 0), 0);
    assert_int_equal(st_event_next(c, &ev), 1);
    assert_int_equal(ev.ts_ns, INT64_MAX);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    free(buf);
    /* An end with nothing open; a begin at depth 256. */
    uint8_t chunk6[4] = {ST_CHUNK_EVENTS_V1, 0, 0, 0};
    buf = exact_copy(chunk6, sizeof chunk6);
    assert_int_equal(st_event_cursor_open(c, buf, sizeof chunk6, 1, 0), 0);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    free(buf);
    uint8_t chunk7[3 + 2 * ST_MAX_DEPTH + 2] = {ST_CHUNK_EVENTS_V1, 0x80, 0x02}; /* depth 256 */
    len = 3;
    for (int i = 0; i < ST_MAX_DEPTH; i++) {
        chunk7[len++] = 5;
        chunk7[len++] = 0;
    }
    chunk7[len++] = 1; /* begin of stage 0 */
    chunk7[len++] = 0;
    buf = exact_copy(chunk7, len);
    assert_int_equal(st_event_cursor_open(c, buf, len, 1, 0), 0);
    assert_int_equal(c->depth, ST_MAX_DEPTH);
    assert_int_equal(st_event_next(c, &ev), ST_ECORRUPT);
    assert_int_equal(st_event_cursor_open(c, buf, len - 2, 0, 0), 0); /* the header alone is fine */
    assert_int_equal(st_event_next(c, &ev), 0);
    free(buf);
    free(c);
    /* Counter samples: an over-long counter tag, and a truncated double. */
    st_counter_cursor cc;
    st_sample smp;
    uint8_t cchunk[13] = {ST_CHUNK_COUNTERS_V1};
    memcpy(cchunk + 1, eleven, 11);
    cchunk[12] = 0;
    buf = exact_copy(cchunk, sizeof cchunk);
    assert_int_equal(st_counter_cursor_open(&cc, buf, sizeof cchunk, 1, 0), 0);
    assert_int_equal(st_counter_next(&cc, &smp), ST_ECORRUPT);
    free(buf);
    uint8_t dchunk[1 + 2 + 7] = {ST_CHUNK_COUNTERS_V1, 0x02, 0x00}; /* counter 1, double form */
    buf = exact_copy(dchunk, sizeof dchunk);
    assert_int_equal(st_counter_cursor_open(&cc, buf, sizeof dchunk, 1, 0), 0);
    assert_int_equal(st_counter_next(&cc, &smp), ST_ECORRUPT);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varints),
        cmocka_unit_test(test_gpu_round_trip),
        cmocka_unit_test(test_gpu_v1),
        cmocka_unit_test(test_events_round_trip_random),
        cmocka_unit_test(test_events_scripted_extremes),
        cmocka_unit_test(test_counters_round_trip_bit_exact),
        cmocka_unit_test(test_events_truncation_and_count),
        cmocka_unit_test(test_events_random_corruption),
        cmocka_unit_test(test_counters_truncation_and_corruption),
        cmocka_unit_test(test_flows_round_trip_and_truncation),
        cmocka_unit_test(test_flows_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
