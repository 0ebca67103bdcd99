/* tracegen.c: the trace writer of tests/tracegen.h. It writes through
 * SQLite and the tracer's own schema text and chunk encoders, so a trace
 * written here reads as one the tracer wrote, with every value chosen. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "encoding.h"
#include "st_schema.h"
#include "tracegen.h"

typedef struct tg_kv {
    char *key, *value;
} tg_kv;

typedef struct tg_named {
    char *name, *kind;
} tg_named;

typedef struct tg_step_row {
    uint64_t step, tokens;
    int64_t ts_ns, thread;
} tg_step_row;

typedef struct tg_sample_row {
    uint32_t thread, counter;
    int64_t ts_ns;
    double value;
} tg_sample_row;

typedef struct tg_gpu_row {
    int64_t device, stream, t0_ns, t1_ns;
    uint32_t n_records;
    st_buf data;
} tg_gpu_row;

typedef struct tg_cpu_chunk_row {
    uint32_t thread; /* index */
    int64_t t0_ns, t1_ns;
    uint32_t n_records, switches, samples;
    uint64_t lost;
    st_buf data;
} tg_cpu_chunk_row;

typedef struct tg_cpu_stack_row {
    st_buf data;
    uint32_t n;
} tg_cpu_stack_row;

typedef struct tg_cpu_map_row {
    uint64_t start, end, file_offset;
    char *path, *build_id;
} tg_cpu_map_row;

typedef struct tg_cpu_sym_row {
    uint64_t addr, sym_offset;
    int64_t map;
    char *name;
} tg_cpu_sym_row;

/* A growable array of n elements of size `size`. */
#define TG_VEC(type, name) \
    type *name;            \
    size_t n_##name, cap_##name

struct tg_trace {
    TG_VEC(tg_kv, meta);
    TG_VEC(tg_named, stages);
    TG_VEC(tg_named, counters);
    TG_VEC(tg_thread_row, threads);
    TG_VEC(tg_step_row, steps);
    TG_VEC(tg_sample_row, samples);
    TG_VEC(char *, gpu_strings);
    TG_VEC(tg_gpu_row, gpu_chunks);
    TG_VEC(tg_cpu_thread_row *, cpu_threads);
    TG_VEC(tg_cpu_chunk_row, cpu_chunks);
    TG_VEC(tg_cpu_stack_row, cpu_stacks);
    TG_VEC(tg_cpu_map_row, cpu_maps);
    TG_VEC(tg_cpu_sym_row, cpu_syms);
    int cpu_tables;
    uint32_t chunk_events;
    int64_t os_tid_base, step_thread;
    int page_size, gpu_tables, interleave;
};

static void tg_fail(const char *format, ...) __attribute__((format(printf, 1, 2), noreturn));
static void tg_fail(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    fputs("tracegen: ", stderr);
    vfprintf(stderr, format, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Room for one more element in *v (n used of cap). */
static void *grow(void *v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap) return v;
    *cap = *cap ? *cap * 2 : 16;
    v = realloc(v, *cap * size);
    if (!v) tg_fail("no memory");
    return v;
}
#define TG_PUSH(vec, n, cap) ((vec) = grow((vec), (n), &(cap), sizeof *(vec)), &(vec)[(n)++])

static char *copy(const char *s)
{
    char *c = strdup(s ? s : "");
    if (!c) tg_fail("no memory");
    return c;
}

/* ---- the description ---- */

tg_trace *tg_create(const char *program)
{
    tg_trace *g = calloc(1, sizeof *g);
    if (!g) tg_fail("no memory");
    g->chunk_events = 7;
    g->os_tid_base = 1000;
    static const char *const defaults[][2] = {
        {"schema_version", "1"}, {"status", "complete"},
        {"program", NULL},       {"tool_version", "0.1.0"},
        {"run_id", "1700000000-42"}, {"start_utc", "2023-11-14T22:13:20Z"},
        {"start_ns", "1000000000"}, {"clock", "monotonic"},
        {"tsc_hz", "0"},         {"host", "testhost"},
        {"pid", "42"},           {"argv", NULL},
        {"rank", "0"},           {"world_size", "1"},
        {"profile_interval", "0"}, {"commit_ms", "250"},
        {"ring_records", "65536"}, {"dropped_events", "0"},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        tg_meta(g, defaults[i][0], defaults[i][1] ? defaults[i][1] : program);
    return g;
}

void tg_free(tg_trace *g)
{
    if (!g) return;
    tg_meta_clear(g);
    free(g->meta);
    for (size_t i = 0; i < g->n_stages; i++) free(g->stages[i].name), free(g->stages[i].kind);
    for (size_t i = 0; i < g->n_counters; i++) free(g->counters[i].name), free(g->counters[i].kind);
    for (size_t i = 0; i < g->n_threads; i++) {
        free(g->threads[i].name);
        free(g->threads[i].role);
        free(g->threads[i].ev);
    }
    for (size_t i = 0; i < g->n_gpu_strings; i++) free(g->gpu_strings[i]);
    for (size_t i = 0; i < g->n_gpu_chunks; i++) st_buf_free(&g->gpu_chunks[i].data);
    for (size_t i = 0; i < g->n_cpu_threads; i++) {
        free(g->cpu_threads[i]->status);
        free(g->cpu_threads[i]->reason);
        free(g->cpu_threads[i]);
    }
    for (size_t i = 0; i < g->n_cpu_chunks; i++) st_buf_free(&g->cpu_chunks[i].data);
    for (size_t i = 0; i < g->n_cpu_stacks; i++) st_buf_free(&g->cpu_stacks[i].data);
    for (size_t i = 0; i < g->n_cpu_maps; i++) free(g->cpu_maps[i].path), free(g->cpu_maps[i].build_id);
    for (size_t i = 0; i < g->n_cpu_syms; i++) free(g->cpu_syms[i].name);
    free(g->cpu_threads);
    free(g->cpu_chunks);
    free(g->cpu_stacks);
    free(g->cpu_maps);
    free(g->cpu_syms);
    free(g->stages);
    free(g->counters);
    free(g->threads);
    free(g->steps);
    free(g->samples);
    free(g->gpu_strings);
    free(g->gpu_chunks);
    free(g);
}

void tg_meta(tg_trace *g, const char *key, const char *value)
{
    for (size_t i = 0; i < g->n_meta; i++)
        if (strcmp(g->meta[i].key, key) == 0) {
            free(g->meta[i].value);
            g->meta[i].value = copy(value);
            return;
        }
    *TG_PUSH(g->meta, g->n_meta, g->cap_meta) = (tg_kv){copy(key), copy(value)};
}

void tg_meta_int(tg_trace *g, const char *key, long long value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", value);
    tg_meta(g, key, buf);
}

void tg_meta_unset(tg_trace *g, const char *key)
{
    for (size_t i = 0; i < g->n_meta; i++)
        if (strcmp(g->meta[i].key, key) == 0) {
            free(g->meta[i].key);
            free(g->meta[i].value);
            memmove(&g->meta[i], &g->meta[i + 1], (g->n_meta - i - 1) * sizeof *g->meta);
            g->n_meta--;
            return;
        }
}

void tg_meta_clear(tg_trace *g)
{
    for (size_t i = 0; i < g->n_meta; i++) free(g->meta[i].key), free(g->meta[i].value);
    g->n_meta = 0;
}

void tg_set_chunk_events(tg_trace *g, uint32_t n) { g->chunk_events = n; }
void tg_set_os_tid_base(tg_trace *g, int64_t base) { g->os_tid_base = base; }
void tg_set_step_thread(tg_trace *g, int64_t id) { g->step_thread = id; }
void tg_set_page_size(tg_trace *g, int bytes) { g->page_size = bytes; }
void tg_set_gpu_tables(tg_trace *g, int on) { g->gpu_tables = on; }
void tg_set_interleave(tg_trace *g, int on) { g->interleave = on; }

uint32_t tg_stage(tg_trace *g, const char *name, const char *kind)
{
    *TG_PUSH(g->stages, g->n_stages, g->cap_stages) = (tg_named){copy(name), copy(kind)};
    return (uint32_t)g->n_stages - 1;
}

uint32_t tg_counter(tg_trace *g, const char *name, const char *unit)
{
    *TG_PUSH(g->counters, g->n_counters, g->cap_counters) = (tg_named){copy(name), copy(unit)};
    return (uint32_t)g->n_counters - 1;
}

uint32_t tg_thread(tg_trace *g, const char *name, const char *role)
{
    int64_t index = (int64_t)g->n_threads, rank = 0;
    for (size_t i = 0; i < g->n_meta; i++)
        if (strcmp(g->meta[i].key, "rank") == 0) rank = atoll(g->meta[i].value);
    *TG_PUSH(g->threads, g->n_threads, g->cap_threads) =
        (tg_thread_row){.id = index, .os_tid = g->os_tid_base + index, .device = -1, .rank = rank,
                        .name = copy(name), .role = copy(role)};
    return (uint32_t)index;
}

tg_thread_row *tg_thread_at(const tg_trace *g, uint32_t thread)
{
    if (thread >= g->n_threads) tg_fail("no thread %u (%zu threads)", thread, g->n_threads);
    return &g->threads[thread];
}

uint32_t tg_n_threads(const tg_trace *g) { return (uint32_t)g->n_threads; }

void tg_step(tg_trace *g, uint64_t step, int64_t ts_ns, uint64_t tokens)
{
    *TG_PUSH(g->steps, g->n_steps, g->cap_steps) = (tg_step_row){step, tokens, ts_ns, g->step_thread};
}

static void push_event(tg_trace *g, uint32_t thread, uint8_t kind, uint32_t stage, int64_t ts_ns)
{
    tg_thread_row *t = tg_thread_at(g, thread);
    *TG_PUSH(t->ev, t->n_ev, t->cap_ev) = (tg_event){kind, stage, ts_ns};
}

void tg_begin(tg_trace *g, uint32_t thread, uint32_t stage, int64_t ts_ns) { push_event(g, thread, TG_BEGIN, stage, ts_ns); }
void tg_end(tg_trace *g, uint32_t thread, int64_t ts_ns) { push_event(g, thread, TG_END, 0, ts_ns); }
void tg_cut(tg_trace *g, uint32_t thread) { push_event(g, thread, TG_CUT, 0, 0); }

void tg_range(tg_trace *g, uint32_t thread, uint32_t stage, int64_t start_ns, int64_t end_ns)
{
    tg_begin(g, thread, stage, start_ns);
    tg_end(g, thread, end_ns);
}

int64_t tg_last_ts(const tg_trace *g)
{
    int64_t last = INT64_MIN;
    for (size_t i = 0; i < g->n_threads; i++)
        for (size_t k = 0; k < g->threads[i].n_ev; k++)
            if (g->threads[i].ev[k].kind != TG_CUT && g->threads[i].ev[k].ts_ns > last) last = g->threads[i].ev[k].ts_ns;
    return last;
}

void tg_sample(tg_trace *g, uint32_t thread, uint32_t counter, int64_t ts_ns, double value)
{
    *TG_PUSH(g->samples, g->n_samples, g->cap_samples) = (tg_sample_row){thread, counter, ts_ns, value};
}

uint32_t tg_gpu_string(tg_trace *g, const char *value)
{
    *TG_PUSH(g->gpu_strings, g->n_gpu_strings, g->cap_gpu_strings) = copy(value);
    return (uint32_t)g->n_gpu_strings - 1;
}

void tg_gpu_chunk(tg_trace *g, int64_t device, int64_t stream, const st_gpu_rec *r, size_t n)
{
    st_gpu_encoder e;
    memset(&e, 0, sizeof e);
    if (st_gpu_chunk_start(&e)) tg_fail("no memory");
    for (size_t i = 0; i < n; i++)
        if (st_gpu_put(&e, &r[i])) tg_fail("GPU record %zu of a chunk does not encode", i);
    *TG_PUSH(g->gpu_chunks, g->n_gpu_chunks, g->cap_gpu_chunks) =
        (tg_gpu_row){device, stream, e.t0_ns, e.t1_ns, e.n_records, e.buf};
}

static void put_varint(st_buf *b, uint64_t v)
{
    if (st_buf_reserve(b, 10)) tg_fail("no memory");
    b->len += st_varint_put(b->data + b->len, v);
}

void tg_encode_gpu_v1(st_buf *b, const st_gpu_rec *r, size_t n, int64_t *t0_ns, int64_t *t1_ns)
{
    b->len = 0;
    if (st_buf_reserve(b, 1)) tg_fail("no memory");
    b->data[b->len++] = ST_CHUNK_GPU_V1;
    int64_t prev = 0, t0 = 0, t1 = 0;
    for (size_t i = 0; i < n; i++) {
        put_varint(b, r[i].kind);
        put_varint(b, st_zigzag((int64_t)((uint64_t)r[i].start_ns - (uint64_t)prev)));
        put_varint(b, (uint64_t)r[i].dur_ns);
        put_varint(b, r[i].name);
        put_varint(b, r[i].bytes);
        put_varint(b, r[i].copy_kind);
        put_varint(b, r[i].src_mem);
        put_varint(b, r[i].dst_mem);
        put_varint(b, r[i].correlation);
        put_varint(b, st_zigzag(r[i].os_tid));
        prev = r[i].start_ns;
        if (i == 0 || r[i].start_ns < t0) t0 = r[i].start_ns;
        if (i == 0 || r[i].start_ns + r[i].dur_ns > t1) t1 = r[i].start_ns + r[i].dur_ns;
    }
    if (t0_ns) *t0_ns = t0;
    if (t1_ns) *t1_ns = t1;
}

void tg_gpu_chunk_v1(tg_trace *g, int64_t device, int64_t stream, const st_gpu_rec *r, size_t n)
{
    tg_gpu_row row = {device, stream, 0, 0, (uint32_t)n, {0}};
    tg_encode_gpu_v1(&row.data, r, n, &row.t0_ns, &row.t1_ns);
    *TG_PUSH(g->gpu_chunks, g->n_gpu_chunks, g->cap_gpu_chunks) = row;
}

void tg_set_cpu_tables(tg_trace *g, int on) { g->cpu_tables = on; }

tg_cpu_thread_row *tg_cpu_thread(tg_trace *g, uint32_t thread, const char *status, int64_t period_ns, int64_t start_ns,
                                 int64_t cpu_ns)
{
    if (thread >= g->n_threads) tg_fail("tg_cpu_thread: no thread %u", thread);
    tg_cpu_thread_row *t = calloc(1, sizeof *t);
    if (!t) tg_fail("no memory");
    t->thread = g->threads[thread].id;
    t->os_tid = g->threads[thread].os_tid;
    t->status = copy(status);
    t->reason = copy("");
    t->period_ns = period_ns;
    t->ring_bytes = 65536;
    t->start_ns = start_ns;
    t->cpu_ns = cpu_ns;
    *TG_PUSH(g->cpu_threads, g->n_cpu_threads, g->cap_cpu_threads) = t;
    return t;
}

void tg_cpu_chunk(tg_trace *g, uint32_t thread, const st_cpu_rec *r, size_t n)
{
    if (thread >= g->n_threads) tg_fail("tg_cpu_chunk: no thread %u", thread);
    st_cpu_encoder e = {0};
    if (st_cpu_chunk_start(&e)) tg_fail("no memory");
    tg_cpu_chunk_row row = {.thread = thread};
    for (size_t i = 0; i < n; i++) {
        if (st_cpu_put(&e, &r[i])) tg_fail("CPU record %zu of a chunk does not encode", i);
        if (r[i].kind <= ST_CPU_REC_PREEMPTED) row.switches++;
        else if (r[i].kind <= ST_CPU_REC_SAMPLE_UNKNOWN) row.samples++;
        else row.lost += r[i].n;
    }
    row.t0_ns = e.t0_ns;
    row.t1_ns = e.t1_ns;
    row.n_records = e.n_records;
    row.data = e.buf;
    *TG_PUSH(g->cpu_chunks, g->n_cpu_chunks, g->cap_cpu_chunks) = row;
}

uint32_t tg_cpu_stack(tg_trace *g, const uint64_t *frames, uint32_t n)
{
    tg_cpu_stack_row row = {.n = n};
    if (st_cpu_stack_put(&row.data, frames, n)) tg_fail("no memory");
    *TG_PUSH(g->cpu_stacks, g->n_cpu_stacks, g->cap_cpu_stacks) = row;
    return (uint32_t)g->n_cpu_stacks - 1;
}

uint32_t tg_cpu_map(tg_trace *g, uint64_t start, uint64_t end, uint64_t file_offset, const char *path,
                    const char *build_id)
{
    *TG_PUSH(g->cpu_maps, g->n_cpu_maps, g->cap_cpu_maps) =
        (tg_cpu_map_row){start, end, file_offset, copy(path), copy(build_id)};
    return (uint32_t)g->n_cpu_maps - 1;
}

void tg_cpu_symbol(tg_trace *g, uint64_t addr, int64_t map, const char *name, uint64_t sym_offset)
{
    *TG_PUSH(g->cpu_syms, g->n_cpu_syms, g->cap_cpu_syms) = (tg_cpu_sym_row){addr, sym_offset, map, copy(name)};
}

uint32_t tg_n_stages(const tg_trace *g) { return (uint32_t)g->n_stages; }
const char *tg_stage_name(const tg_trace *g, uint32_t stage) { return g->stages[stage].name; }
const char *tg_stage_kind(const tg_trace *g, uint32_t stage) { return g->stages[stage].kind; }
uint32_t tg_n_steps(const tg_trace *g) { return (uint32_t)g->n_steps; }

void tg_step_at(const tg_trace *g, uint32_t i, uint64_t *step, int64_t *ts_ns, uint64_t *tokens)
{
    *step = g->steps[i].step;
    *ts_ns = g->steps[i].ts_ns;
    *tokens = g->steps[i].tokens;
}

/* ---- writing ---- */

static void exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) tg_fail("%s: %s", sql, err ? err : "?");
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) tg_fail("%s: %s", sql, sqlite3_errmsg(db));
    return st;
}

static void step_reset(sqlite3 *db, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE) tg_fail("%s: %s", sqlite3_sql(st), sqlite3_errmsg(db));
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

static void put_range_chunk(sqlite3 *db, sqlite3_stmt *st, int64_t thread, const st_event_encoder *e, uint32_t n_ranges)
{
    sqlite3_bind_int64(st, 1, thread);
    sqlite3_bind_int64(st, 2, e->t0_ns);
    sqlite3_bind_int64(st, 3, e->t1_ns);
    sqlite3_bind_int64(st, 4, e->n_events);
    sqlite3_bind_int64(st, 5, n_ranges);
    sqlite3_bind_blob(st, 6, e->buf.data, (int)e->buf.len, SQLITE_STATIC);
    step_reset(db, st);
}

/* Encodes thread t's next chunk, from event *pos up to a cut, the chunk
 * size or the end of its script, and writes it (none when it holds no
 * event). Returns 0 when the script is done. */
static int write_next_chunk(sqlite3 *db, sqlite3_stmt *st, const tg_trace *g, const tg_thread_row *t,
                            st_event_encoder *e, size_t *pos)
{
    if (*pos >= t->n_ev) return 0;
    uint32_t n_ranges = 0;
    if (st_event_chunk_start(e)) tg_fail("no memory");
    while (*pos < t->n_ev) {
        size_t k = (*pos)++;
        const tg_event *ev = &t->ev[k];
        if (ev->kind == TG_CUT) break;
        if (ev->kind == TG_END) {
            if (st_event_put_end(e, ev->ts_ns)) tg_fail("thread %s: event %zu: an end with no range open", t->name, k);
            n_ranges++;
        } else if (st_event_put_begin(e, ev->stage, ev->ts_ns)) {
            tg_fail("thread %s: event %zu: a begin past depth %d", t->name, k, ST_MAX_DEPTH);
        }
        if (g->chunk_events && e->n_events == g->chunk_events) break;
    }
    if (e->n_events) put_range_chunk(db, st, t->id, e, n_ranges);
    return 1;
}

static void write_ranges(sqlite3 *db, const tg_trace *g)
{
    sqlite3_stmt *st =
        prepare(db, "INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) VALUES (?, ?, ?, ?, ?, ?)");
    size_t n = g->interleave ? g->n_threads : 1;
    st_event_encoder *e = calloc(n ? n : 1, sizeof *e);
    size_t *pos = calloc(g->n_threads + 1, sizeof *pos);
    if (!e || !pos) tg_fail("no memory");
    if (g->interleave) {
        /* rounds: every thread's first chunk, then every thread's second, ... */
        for (int more = 1; more;) {
            more = 0;
            for (size_t i = 0; i < g->n_threads; i++) more |= write_next_chunk(db, st, g, &g->threads[i], &e[i], &pos[i]);
        }
    } else {
        for (size_t i = 0; i < g->n_threads; i++) {
            e->depth = 0;
            while (write_next_chunk(db, st, g, &g->threads[i], e, &pos[i])) {
            }
        }
    }
    for (size_t i = 0; i < n; i++) st_buf_free(&e[i].buf);
    free(e);
    free(pos);
    sqlite3_finalize(st);
}

static void write_counters(sqlite3 *db, const tg_trace *g)
{
    sqlite3_stmt *st = prepare(db, "INSERT INTO counter_chunks(thread, t0_ns, t1_ns, n_samples, data) VALUES (?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_threads; i++) {
        st_counter_encoder c;
        memset(&c, 0, sizeof c);
        if (st_counter_chunk_start(&c)) tg_fail("no memory");
        for (size_t k = 0; k < g->n_samples; k++) {
            const tg_sample_row *s = &g->samples[k];
            if (s->thread == i && st_counter_put(&c, s->counter, s->ts_ns, s->value)) tg_fail("no memory");
        }
        if (c.n_samples) {
            sqlite3_bind_int64(st, 1, g->threads[i].id);
            sqlite3_bind_int64(st, 2, c.t0_ns);
            sqlite3_bind_int64(st, 3, c.t1_ns);
            sqlite3_bind_int64(st, 4, c.n_samples);
            sqlite3_bind_blob(st, 5, c.buf.data, (int)c.buf.len, SQLITE_STATIC);
            step_reset(db, st);
        }
        st_buf_free(&c.buf);
    }
    sqlite3_finalize(st);
}

static void write_gpu(sqlite3 *db, const tg_trace *g)
{
    if (!g->gpu_tables && !g->n_gpu_strings && !g->n_gpu_chunks) return;
    exec(db, st_gpu_schema_sql);
    sqlite3_stmt *st = prepare(db, "INSERT INTO gpu_strings VALUES (?, ?)");
    for (size_t i = 0; i < g->n_gpu_strings; i++) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)i);
        sqlite3_bind_text(st, 2, g->gpu_strings[i], -1, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_gpu_chunks; i++) {
        const tg_gpu_row *c = &g->gpu_chunks[i];
        sqlite3_bind_int64(st, 1, c->device);
        sqlite3_bind_int64(st, 2, c->stream);
        sqlite3_bind_int64(st, 3, c->t0_ns);
        sqlite3_bind_int64(st, 4, c->t1_ns);
        sqlite3_bind_int64(st, 5, c->n_records);
        sqlite3_bind_blob(st, 6, c->data.data, (int)c->data.len, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
}

static void write_cpu(sqlite3 *db, const tg_trace *g)
{
    if (!g->cpu_tables && !g->n_cpu_threads && !g->n_cpu_chunks && !g->n_cpu_stacks && !g->n_cpu_maps &&
        !g->n_cpu_syms)
        return;
    exec(db, st_cpu_schema_sql);
    sqlite3_stmt *st = prepare(db, "INSERT INTO cpu_threads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_cpu_threads; i++) {
        tg_cpu_thread_row t = *g->cpu_threads[i];
        if (!t.counts_given) {
            t.switches = t.samples = t.lost = 0;
            for (size_t k = 0; k < g->n_cpu_chunks; k++) {
                const tg_cpu_chunk_row *c = &g->cpu_chunks[k];
                if (g->threads[c->thread].id != t.thread) continue;
                t.switches += c->switches;
                t.samples += c->samples;
                t.lost += (int64_t)c->lost;
            }
        }
        sqlite3_bind_int64(st, 1, t.thread);
        sqlite3_bind_int64(st, 2, t.os_tid);
        sqlite3_bind_text(st, 3, t.status, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, t.reason, -1, SQLITE_STATIC);
        const int64_t v[] = {t.period_ns, t.ring_bytes, t.refused_bytes, t.start_ns, t.cpu_ns, t.switches, t.samples, t.lost};
        for (int k = 0; k < 8; k++) sqlite3_bind_int64(st, 5 + k, v[k]);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO cpu_stacks VALUES (?, ?, ?)");
    for (size_t i = 0; i < g->n_cpu_stacks; i++) {
        sqlite3_bind_int64(st, 1, (int64_t)i);
        sqlite3_bind_int64(st, 2, g->cpu_stacks[i].n);
        sqlite3_bind_blob(st, 3, g->cpu_stacks[i].data.data ? (const void *)g->cpu_stacks[i].data.data : "", (int)g->cpu_stacks[i].data.len,
                          SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO cpu_chunks(thread, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_cpu_chunks; i++) {
        const tg_cpu_chunk_row *c = &g->cpu_chunks[i];
        sqlite3_bind_int64(st, 1, g->threads[c->thread].id);
        sqlite3_bind_int64(st, 2, c->t0_ns);
        sqlite3_bind_int64(st, 3, c->t1_ns);
        sqlite3_bind_int64(st, 4, c->n_records);
        sqlite3_bind_blob(st, 5, c->data.data, (int)c->data.len, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO cpu_maps VALUES (?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_cpu_maps; i++) {
        const tg_cpu_map_row *m = &g->cpu_maps[i];
        sqlite3_bind_int64(st, 1, (int64_t)i);
        sqlite3_bind_int64(st, 2, (int64_t)m->start);
        sqlite3_bind_int64(st, 3, (int64_t)m->end);
        sqlite3_bind_int64(st, 4, (int64_t)m->file_offset);
        sqlite3_bind_text(st, 5, m->path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, m->build_id, -1, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO cpu_symbols VALUES (?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_cpu_syms; i++) {
        const tg_cpu_sym_row *y = &g->cpu_syms[i];
        uint64_t off = 0;
        if (y->map >= 0 && (size_t)y->map < g->n_cpu_maps)
            off = y->addr - g->cpu_maps[y->map].start + g->cpu_maps[y->map].file_offset;
        sqlite3_bind_int64(st, 1, (int64_t)y->addr);
        sqlite3_bind_int64(st, 2, y->map);
        sqlite3_bind_int64(st, 3, (int64_t)off);
        sqlite3_bind_text(st, 4, y->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (int64_t)y->sym_offset);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
}

static void remove_files(const char *path)
{
    static const char *const sides[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s%s", path, sides[i]);
        unlink(p);
    }
}

void tg_write(const tg_trace *g, const char *path)
{
    remove_files(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) tg_fail("cannot create %s: %s", path, sqlite3_errmsg(db));
    char pragma[64];
    if (g->page_size) {
        snprintf(pragma, sizeof pragma, "PRAGMA page_size=%d", g->page_size);
        exec(db, pragma);
    }
    exec(db, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF"); /* written once, read after: no fsync */
    exec(db, st_schema_sql);
    exec(db, "BEGIN");
    sqlite3_stmt *st = prepare(db, "INSERT INTO meta VALUES (?, ?)");
    for (size_t i = 0; i < g->n_meta; i++) {
        sqlite3_bind_text(st, 1, g->meta[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, g->meta[i].value, -1, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_threads; i++) {
        const tg_thread_row *t = &g->threads[i];
        sqlite3_bind_int64(st, 1, t->id);
        sqlite3_bind_int64(st, 2, t->os_tid);
        sqlite3_bind_text(st, 3, t->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, t->role, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, t->device);
        sqlite3_bind_int64(st, 6, t->rank);
        sqlite3_bind_int64(st, 7, t->dropped);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO stages VALUES (?, ?, ?)");
    for (size_t i = 0; i < g->n_stages; i++) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)i);
        sqlite3_bind_text(st, 2, g->stages[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, g->stages[i].kind, -1, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO counter_names VALUES (?, ?, ?)");
    for (size_t i = 0; i < g->n_counters; i++) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)i);
        sqlite3_bind_text(st, 2, g->counters[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, g->counters[i].kind, -1, SQLITE_STATIC);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    st = prepare(db, "INSERT INTO steps VALUES (?, ?, ?, ?)");
    for (size_t i = 0; i < g->n_steps; i++) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)g->steps[i].step);
        sqlite3_bind_int64(st, 2, g->steps[i].ts_ns);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)g->steps[i].tokens);
        sqlite3_bind_int64(st, 4, g->steps[i].thread);
        step_reset(db, st);
    }
    sqlite3_finalize(st);
    write_ranges(db, g);
    write_counters(db, g);
    write_gpu(db, g);
    write_cpu(db, g);
    exec(db, "COMMIT");
    if (g->page_size) exec(db, "VACUUM");
    if (sqlite3_close(db) != SQLITE_OK) tg_fail("cannot close %s", path);
}

void tg_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) tg_fail("cannot open %s: %s", path, sqlite3_errmsg(db));
    exec(db, "PRAGMA synchronous=OFF");
    exec(db, sql);
    if (sqlite3_close(db) != SQLITE_OK) tg_fail("cannot close %s", path);
}
