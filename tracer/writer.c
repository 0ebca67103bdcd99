/* writer.c: the writer thread. It drains every thread's ring, converts raw
 * clock readings to trace nanoseconds, encodes range events and counter
 * samples (and flows) into per-thread chunks, stores small rows (threads, stages,
 * steps, marks) and commits every opt.commit_ms, so a killed process loses
 * about that window (plus the time the writer waited for a core). A signal
 * flush (st_signal_flush) commits at once, stores the ranges still open as
 * open until then, and checkpoints the WAL into the file. It also feeds the interval
 * aggregator: per-thread event queues fed in st_agg_order up to a
 * horizon that lags the clock by ST_AGG_GRACE_NS, because a thread may read
 * the clock and publish its record a little later. With opt.cpu it drains
 * each thread's perf ring on the same pass, just before its event ring,
 * and tells the CPU side (cpu_record.c) each event's time and stage, by
 * which it gives each sample its stage. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "st_cpurec.h"
#include "st_internal.h"
#include "st_schema.h"
#include "st_store.h"

#define ST_CHUNK_BYTES 32768
#define ST_DRAIN_BATCH 4096
#define ST_AGG_GRACE_NS 100000000LL /* 100 ms */

typedef struct agg_item {
    int64_t ts;
    uint32_t stage;
    uint32_t is_end;
} agg_item;

typedef struct agg_queue {
    agg_item *items;
    size_t head, len, cap;
} agg_queue;

typedef struct step_item {
    uint64_t step, tokens;
    int64_t ts;
    uint32_t thread;
} step_item;

struct st_thread_state {
    uint32_t id;
    st_ring *ring;            /* NULL once retired and freed */
    st_event_encoder ev;
    uint32_t chunk_ranges;    /* ends in the current event chunk */
    st_counter_encoder ctr;
    st_flow_encoder flow;
    int64_t last_ns;          /* clamps the thread's time line to monotone */
    uint64_t final_dropped;
    agg_queue q;
    st_cpurec_thread *cpu;    /* opt.cpu: the thread's CPU capture (owned by w->cpu) */
};

typedef struct mark_string {
    const char *ptr;
    int64_t id;
} mark_string;

typedef struct gpu_stream {
    int32_t device;
    uint32_t stream;
    st_gpu_encoder enc;
} gpu_stream;

typedef struct writer {
    gpu_stream *gpu;          /* one encoder per device and stream */
    size_t n_gpu, gpu_cap;
    int gpu_tables;           /* gpu_chunks and gpu_strings are created */
    int flow_table;           /* flow_chunks is created */
    int gpu_pauses_table;     /* gpu_pauses is created */
    int gpu_threads_table;    /* gpu_threads is created */
    long long gpu_dropped_written;
    st_store *store;          /* every row goes through it (store.c) */
    mark_string *strings;     /* open addressing by pointer */
    size_t strings_cap, strings_len;
    step_item *steps;
    size_t steps_head, steps_len, steps_cap;
    int64_t last_step_ns;
    uint64_t last_step;
    int have_step;
    uint64_t clock_clamped, bad_ends, bad_steps, bad_counters;
    st_cpurec *cpu;           /* opt.cpu: the CPU capture's writer side, else NULL */
} writer;

static void meta_int(writer *w, const char *key, long long value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", value);
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(buf)};
    st_store_row(w->store, ST_S_META, 2, v);
}

static void meta_text(writer *w, const char *key, const char *value)
{
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(value)};
    st_store_row(w->store, ST_S_META, 2, v);
}

/* ---- aggregator feeding ---- */

static int queue_push(agg_queue *q, int64_t ts, uint32_t stage, uint32_t is_end)
{
    if (q->head + q->len == q->cap) {
        if (q->head > q->cap / 2) {
            memmove(q->items, q->items + q->head, q->len * sizeof *q->items);
            q->head = 0;
        } else {
            size_t cap = q->cap ? q->cap * 2 : 1024;
            agg_item *items = realloc(q->items, cap * sizeof *items);
            if (!items) return -1;
            q->items = items;
            q->cap = cap;
        }
    }
    q->items[q->head + q->len++] = (agg_item){ts, stage, is_end};
    return 0;
}

static int steps_push(writer *w, step_item s)
{
    if (w->steps_head + w->steps_len == w->steps_cap) {
        if (w->steps_head > 0) {
            memmove(w->steps, w->steps + w->steps_head, w->steps_len * sizeof *w->steps);
            w->steps_head = 0;
        } else {
            size_t cap = w->steps_cap ? w->steps_cap * 2 : 256;
            step_item *steps = realloc(w->steps, cap * sizeof *steps);
            if (!steps) return -1;
            w->steps = steps;
            w->steps_cap = cap;
        }
    }
    w->steps[w->steps_head + w->steps_len++] = s;
    return 0;
}

/* Feeds every queued event with ts < horizon to the aggregator in
 * st_agg_order. Threads meet only at step marks, so each thread's events
 * before the next mark go in one run, then the mark: the same rule as
 * st_reader_windows, hence the same windows. */
static void feed_agg(st_trace *t, writer *w, int64_t horizon)
{
    uint32_t n = atomic_load(&t->n_threads);
    for (;;) {
        int have_step = w->steps_len && w->steps[w->steps_head].ts < horizon;
        int64_t limit = have_step ? w->steps[w->steps_head].ts : horizon;
        for (uint32_t i = 0; i < n; i++) {
            st_thread_state *s = t->tstate[i];
            if (!s) continue;
            agg_queue *q = &s->q;
            while (q->len && (q->items[q->head].ts < limit || limit == INT64_MAX)) {
                agg_item *it = &q->items[q->head++];
                q->len--;
                if (it->is_end)
                    st_agg_end(t->agg, i, it->ts);
                else
                    st_agg_begin(t->agg, i, it->stage, it->ts);
            }
        }
        if (!have_step) return;
        step_item *st = &w->steps[w->steps_head++];
        w->steps_len--;
        st_agg_step(t->agg, st->step, st->ts, st->tokens);
    }
}

/* ---- checkpoints, off the draining path ----
 * SQLite's auto-checkpoint runs on the committing connection: every ~1000
 * WAL pages the writer would copy them into the database and fsync it
 * (tens of milliseconds on a busy disk) while the rings fill. Instead the
 * writer's connection has auto-checkpoint off, and its WAL hook (called
 * after each commit with the WAL's size) wakes a thread of its own, with
 * its own connection, that runs PASSIVE checkpoints: they copy what no
 * reader needs and never wait for the writer, which keeps appending. After
 * a checkpoint that copied everything the writer's next transaction starts
 * the WAL over, so it stays about ST_CHECKPOINT_PAGES long. */
#define ST_CHECKPOINT_PAGES 1000

typedef struct checkpointer {
    pthread_t thread;
    sqlite3 *db;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int wanted, stop, started;
} checkpointer;

static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    checkpointer *c = arg;
    if (pages < ST_CHECKPOINT_PAGES) return SQLITE_OK;
    pthread_mutex_lock(&c->lock);
    c->wanted = 1;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    return SQLITE_OK;
}

static void *checkpointer_main(void *arg)
{
    checkpointer *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->wanted && !c->stop) pthread_cond_wait(&c->wake, &c->lock);
        if (c->stop) break;
        c->wanted = 0;
        pthread_mutex_unlock(&c->lock);
        /* A failure (a full disk) is left for the next try; the WAL keeps
         * everything meanwhile. */
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Starts the checkpointer; when it cannot (no second connection), SQLite's
 * auto-checkpoint stays on the writer. */
static void checkpointer_start(st_trace *t, checkpointer *c)
{
    memset(c, 0, sizeof *c);
    if (t->checkpoint_on_writer) return;
    if (sqlite3_open_v2(t->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(c->db);
        c->db = NULL;
        return;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    if (pthread_create(&c->thread, NULL, checkpointer_main, c) != 0) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->wake);
        sqlite3_close(c->db);
        c->db = NULL;
        return;
    }
    c->started = 1;
    sqlite3_wal_hook(t->db, wal_hook, c); /* replaces the auto-checkpoint */
}

static void checkpointer_stop(st_trace *t, checkpointer *c)
{
    if (!c->started) return;
    sqlite3_wal_hook(t->db, NULL, NULL);
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    sqlite3_close(c->db);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    c->started = 0;
}

/* ---- registrations ---- */

static void write_registrations(st_trace *t, writer *w)
{
    pthread_mutex_lock(&t->lock);
    uint32_t ns = atomic_load(&t->n_stages), nc = atomic_load(&t->n_counters),
             nt = atomic_load(&t->n_threads);
    for (; t->stages_written < ns; t->stages_written++) {
        uint32_t i = t->stages_written;
        st_val v[3] = {ST_VINT(i), ST_VTEXT(t->stages[i].name), ST_VTEXT(st_kind_name(t->stages[i].kind))};
        st_store_row(w->store, ST_S_STAGE, 3, v);
        if (t->agg) st_agg_stage(t->agg, i, t->stages[i].name, t->stages[i].kind);
    }
    for (; t->counters_written < nc; t->counters_written++) {
        uint32_t i = t->counters_written;
        st_val v[3] = {ST_VINT(i), ST_VTEXT(t->counters[i].name), ST_VTEXT(t->counters[i].unit)};
        st_store_row(w->store, ST_S_COUNTER, 3, v);
    }
    for (; t->threads_written < nt; t->threads_written++) {
        uint32_t i = t->threads_written;
        st_thread_def *d = &t->threads[i];
        st_val v[6] = {ST_VINT(i), ST_VINT(d->os_tid), ST_VTEXT(d->name), ST_VTEXT(d->role),
                       ST_VINT(d->device), ST_VINT(d->rank)};
        st_store_row(w->store, ST_S_THREAD, 6, v);
        st_thread_state *s = calloc(1, sizeof *s);
        if (!s) {
            t->writer_error = ST_ENOMEM;
            snprintf(t->writer_msg, sizeof t->writer_msg, "writer: out of memory");
            continue;
        }
        s->id = i;
        s->ring = d->ring;
        st_event_chunk_start(&s->ev);
        st_counter_chunk_start(&s->ctr);
        st_flow_chunk_start(&s->flow);
        if (w->cpu) s->cpu = st_cpurec_thread_add(w->cpu, i, d->os_tid, d->cpu, d->cpu_status, d->cpu_start_ns);
        else st_cpurec_discard(d->cpu); /* the CPU side had no memory at open */
        d->cpu = NULL;
        t->tstate[i] = s;
        if (t->agg) st_agg_thread(t->agg, i, d->name, d->role);
    }
    pthread_mutex_unlock(&t->lock);
}

/* ---- chunks ---- */

/* The thread's innermost open stage, as the chunk encoder knows it. */
static uint32_t open_stage(const st_thread_state *s)
{
    return s->ev.depth ? s->ev.stack[s->ev.depth - 1].stage : ST_CPU_NO_STAGE;
}

/* Stores the thread's current chunk when it holds an event. At an
 * interrupted flush (st_signal_flush) open_until_ns is the time the writer
 * drained the thread, and a thread with ranges open gets a chunk even with no
 * new event, its t1_ns at least open_until_ns: the process may die now, and
 * the ranges it leaves unended (the chunk's header repeats them) were open at
 * least until then (docs/trace-format.md, "Ranges left open by an interrupted
 * flush"). 0: an ordinary flush. */
static void flush_event_chunk(writer *w, st_thread_state *s, int64_t open_until_ns)
{
    if (open_until_ns && s->ev.depth) {
        if (s->ev.t1_ns < open_until_ns) s->ev.t1_ns = open_until_ns;
    } else if (s->ev.n_events == 0) {
        return;
    }
    st_val v[6] = {ST_VINT(s->id), ST_VINT(s->ev.t0_ns), ST_VINT(s->ev.t1_ns), ST_VINT(s->ev.n_events),
                   ST_VINT(s->chunk_ranges), ST_VBLOB(s->ev.buf.data, s->ev.buf.len)};
    st_store_row(w->store, ST_S_RANGE_CHUNK, 6, v);
    s->chunk_ranges = 0;
    st_event_chunk_start(&s->ev);
}

static void flush_counter_chunk(st_trace *t, writer *w, st_thread_state *s)
{
    if (s->ctr.n_samples == 0) return;
    (void)t;
    st_val v[5] = {ST_VINT(s->id), ST_VINT(s->ctr.t0_ns), ST_VINT(s->ctr.t1_ns), ST_VINT(s->ctr.n_samples),
                   ST_VBLOB(s->ctr.buf.data, s->ctr.buf.len)};
    st_store_row(w->store, ST_S_COUNTER_CHUNK, 5, v);
    st_counter_chunk_start(&s->ctr);
}

static void flush_flow_chunk(writer *w, st_thread_state *s)
{
    if (s->flow.n_records == 0) return;
    if (!w->flow_table) {
        st_store_exec(w->store, st_flow_schema_sql);
        w->flow_table = 1;
    }
    st_val v[5] = {ST_VINT(s->id), ST_VINT(s->flow.t0_ns), ST_VINT(s->flow.t1_ns), ST_VINT(s->flow.n_records),
                   ST_VBLOB(s->flow.buf.data, s->flow.buf.len)};
    st_store_row(w->store, ST_S_FLOW_CHUNK, 5, v);
    st_flow_chunk_start(&s->flow);
}

static int64_t string_id(st_trace *t, writer *w, const char *ptr)
{
    if (w->strings_len * 2 >= w->strings_cap) {
        size_t cap = w->strings_cap ? w->strings_cap * 2 : 64;
        mark_string *tab = calloc(cap, sizeof *tab);
        if (!tab) return -1;
        for (size_t i = 0; i < w->strings_cap; i++) {
            if (!w->strings[i].ptr) continue;
            size_t h = ((uintptr_t)w->strings[i].ptr >> 3) & (cap - 1);
            while (tab[h].ptr) h = (h + 1) & (cap - 1);
            tab[h] = w->strings[i];
        }
        free(w->strings);
        w->strings = tab;
        w->strings_cap = cap;
    }
    size_t h = ((uintptr_t)ptr >> 3) & (w->strings_cap - 1);
    while (w->strings[h].ptr) {
        if (w->strings[h].ptr == ptr) return w->strings[h].id;
        h = (h + 1) & (w->strings_cap - 1);
    }
    int64_t id = (int64_t)w->strings_len++;
    w->strings[h].ptr = ptr;
    w->strings[h].id = id;
    (void)t;
    st_val v[2] = {ST_VINT(id), ST_VTEXT(ptr)};
    st_store_row(w->store, ST_S_STRING, 2, v);
    return id;
}

/* ---- GPU activity ---- */

int st_gpu_submit(st_trace *t, const st_gpu_item *items, size_t n)
{
    if (!n) return ST_OK;
    pthread_mutex_lock(&t->gpu_lock);
    if (t->gpu_items_len + n > t->gpu_items_cap) {
        size_t cap = t->gpu_items_cap ? t->gpu_items_cap : 4096;
        while (cap < t->gpu_items_len + n) cap *= 2;
        st_gpu_item *a = realloc(t->gpu_items, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&t->gpu_lock);
            return ST_ENOMEM;
        }
        t->gpu_items = a;
        t->gpu_items_cap = cap;
    }
    memcpy(t->gpu_items + t->gpu_items_len, items, n * sizeof *items);
    t->gpu_items_len += n;
    pthread_mutex_unlock(&t->gpu_lock);
    return ST_OK;
}

static int submit_string(st_trace *t, uint32_t id, int64_t os_tid, const char *value)
{
    char *copy = strdup(value ? value : "");
    if (!copy) return ST_ENOMEM;
    pthread_mutex_lock(&t->gpu_lock);
    if (t->gpu_strings_len == t->gpu_strings_cap) {
        size_t cap = t->gpu_strings_cap ? t->gpu_strings_cap * 2 : 64;
        st_gpu_string *a = realloc(t->gpu_strings, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&t->gpu_lock);
            free(copy);
            return ST_ENOMEM;
        }
        t->gpu_strings = a;
        t->gpu_strings_cap = cap;
    }
    t->gpu_strings[t->gpu_strings_len++] = (st_gpu_string){id, os_tid, copy};
    pthread_mutex_unlock(&t->gpu_lock);
    return ST_OK;
}

int st_gpu_submit_string(st_trace *t, uint32_t id, const char *value) { return submit_string(t, id, 0, value); }

int st_gpu_submit_thread(st_trace *t, int64_t os_tid, const char *name)
{
    return os_tid > 0 ? submit_string(t, 0, os_tid, name) : ST_EINVAL;
}

static void flush_gpu_chunk(st_trace *t, writer *w, gpu_stream *g)
{
    if (g->enc.n_records == 0) return;
    (void)t;
    st_val v[6] = {ST_VINT(g->device), ST_VINT(g->stream), ST_VINT(g->enc.t0_ns), ST_VINT(g->enc.t1_ns),
                   ST_VINT(g->enc.n_records), ST_VBLOB(g->enc.buf.data, g->enc.buf.len)};
    st_store_row(w->store, ST_S_GPU_CHUNK, 6, v);
    st_gpu_chunk_start(&g->enc);
}

static int gpu_tables(writer *w)
{
    if (w->gpu_tables) return 0;
    st_store_exec(w->store, st_gpu_schema_sql);
    w->gpu_tables = 1;
    return 0;
}

static gpu_stream *gpu_stream_of(writer *w, int32_t device, uint32_t stream)
{
    for (size_t i = 0; i < w->n_gpu; i++)
        if (w->gpu[i].device == device && w->gpu[i].stream == stream) return &w->gpu[i];
    if (w->n_gpu == w->gpu_cap) {
        size_t cap = w->gpu_cap ? w->gpu_cap * 2 : 16;
        gpu_stream *a = realloc(w->gpu, cap * sizeof *a);
        if (!a) return NULL;
        w->gpu = a;
        w->gpu_cap = cap;
    }
    gpu_stream *g = &w->gpu[w->n_gpu++];
    memset(g, 0, sizeof *g);
    g->device = device;
    g->stream = stream;
    if (st_gpu_chunk_start(&g->enc)) {
        w->n_gpu--;
        return NULL;
    }
    return g;
}

/* Takes what the collector handed over and stores it; on final, flushes
 * every encoder. */
static void store_gpu(st_trace *t, writer *w, int final)
{
    pthread_mutex_lock(&t->gpu_lock);
    st_gpu_item *items = t->gpu_items;
    size_t n = t->gpu_items_len;
    st_gpu_string *strings = t->gpu_strings;
    size_t n_strings = t->gpu_strings_len;
    t->gpu_items = NULL;
    t->gpu_items_len = t->gpu_items_cap = 0;
    t->gpu_strings = NULL;
    t->gpu_strings_len = t->gpu_strings_cap = 0;
    st_gpu_pause_span *pauses = t->gpu_pauses;
    size_t n_pauses = t->gpu_pauses_len;
    t->gpu_pauses = NULL;
    t->gpu_pauses_len = t->gpu_pauses_cap = 0;
    pthread_mutex_unlock(&t->gpu_lock);
    long long dropped = atomic_load(&t->gpu_dropped);
    if ((n || n_strings || dropped >= 0) && gpu_tables(w) == 0) {
        for (size_t i = 0; i < n_strings; i++) {
            if (strings[i].os_tid > 0) {
                if (!w->gpu_threads_table) {
                    st_store_exec(w->store, st_gpu_threads_sql);
                    w->gpu_threads_table = 1;
                }
                st_val v[2] = {ST_VINT(strings[i].os_tid), ST_VTEXT(strings[i].value)};
                st_store_row(w->store, ST_S_GPU_THREAD, 2, v);
                continue;
            }
            st_val v[2] = {ST_VINT(strings[i].id), ST_VTEXT(strings[i].value)};
            st_store_row(w->store, ST_S_GPU_STRING, 2, v);
        }
        for (size_t i = 0; i < n; i++) {
            gpu_stream *g = gpu_stream_of(w, items[i].device, items[i].stream);
            if (!g) break;
            st_gpu_put(&g->enc, &items[i].rec);
            if (g->enc.buf.len >= ST_CHUNK_BYTES) flush_gpu_chunk(t, w, g);
        }
        /* Every commit ends the open chunks: a killed process keeps what
         * was committed, and chunks stay small enough for a window query. */
        for (size_t i = 0; i < w->n_gpu; i++) flush_gpu_chunk(t, w, &w->gpu[i]);
        if (t->gpu_records[0] && !t->gpu_records_written) {
            pthread_mutex_lock(&t->gpu_lock);
            char records[sizeof t->gpu_records];
            memcpy(records, t->gpu_records, sizeof records);
            uint32_t every = t->gpu_every_steps;
            pthread_mutex_unlock(&t->gpu_lock);
            meta_text(w, "gpu_records", records);
            if (every > 1) meta_int(w, "gpu_every_steps", every);
            t->gpu_records_written = 1;
        }
        if (dropped >= 0 && dropped != w->gpu_dropped_written) {
            meta_int(w, "gpu_dropped_records", dropped);
            w->gpu_dropped_written = dropped;
        }
        if (n_pauses && !w->gpu_pauses_table) {
            st_store_exec(w->store, st_gpu_pauses_sql);
            w->gpu_pauses_table = 1;
        }
        for (size_t i = 0; i < n_pauses; i++) {
            st_val v[2] = {ST_VINT(pauses[i].t0_ns), ST_VINT(pauses[i].t1_ns)};
            st_store_row(w->store, ST_S_GPU_PAUSE, 2, v);
        }
    }
    (void)final;
    free(pauses);
    free(items);
    for (size_t i = 0; i < n_strings; i++) free(strings[i].value);
    free(strings);
}

/* ---- draining ---- */

/* Processes the record at slot `at` of the ring (and its payload slot, for
 * the types that have one) and returns the slots it took. The producer
 * publishes a record and its payload together, so both are below head. */
static uint32_t process(st_trace *t, writer *w, st_thread_state *s, const st_ring *ring, uint64_t at)
{
    const st_record *r = &ring->buf[at & ring->mask];
    const st_record *p = &ring->buf[(at + 1) & ring->mask]; /* read only by two-slot types */
    int64_t ns = st_clock_to_ns(r->ts);
    if (ns < s->last_ns) {
        ns = s->last_ns;
        w->clock_clamped++;
    }
    s->last_ns = ns;
    switch (r->type) {
    case ST_REC_BEGIN: {
        uint32_t before = open_stage(s);
        if (st_event_put_begin(&s->ev, r->id, ns) == 0) {
            if (t->agg) queue_push(&s->q, ns, r->id, 0);
        }
        if (s->cpu) st_cpurec_event(w->cpu, s->cpu, ns, before, open_stage(s));
        if (s->ev.buf.len >= ST_CHUNK_BYTES) flush_event_chunk(w, s, 0);
        break;
    }
    case ST_REC_END: {
        if (s->ev.depth == 0) {
            w->bad_ends++;
            break;
        }
        if (s->ev.stack[s->ev.depth - 1].stage != r->id) w->bad_ends++;
        uint32_t before = open_stage(s);
        st_event_put_end(&s->ev, ns);
        if (s->cpu) st_cpurec_event(w->cpu, s->cpu, ns, before, open_stage(s));
        s->chunk_ranges++;
        if (t->agg) queue_push(&s->q, ns, 0, 1);
        if (s->ev.buf.len >= ST_CHUNK_BYTES) flush_event_chunk(w, s, 0);
        break;
    }
    case ST_REC_COUNTER: {
        double v;
        memcpy(&v, &p->arg, sizeof v);
        if (r->id >= atomic_load(&t->n_counters)) {
            w->bad_counters++;
            break;
        }
        st_counter_put(&s->ctr, r->id, ns, v);
        if (s->ctr.buf.len >= ST_CHUNK_BYTES) flush_counter_chunk(t, w, s);
        break;
    }
    case ST_REC_MARK: {
        int64_t id = string_id(t, w, (const char *)(uintptr_t)p->arg);
        st_val v[3] = {ST_VINT(s->id), ST_VINT(ns), ST_VINT(id)};
        st_store_row(w->store, ST_S_MARK, 3, v);
        break;
    }
    case ST_REC_FLOW:
        st_flow_put(&s->flow, r->id, ns, p->arg);
        if (s->flow.buf.len >= ST_CHUNK_BYTES) flush_flow_chunk(w, s);
        break;
    case ST_REC_STEP: {
        uint64_t step = p->arg, tokens = p->arg2;
        /* Steps must increase, and in time, and step and tokens must fit the
         * table's 64-bit signed integers: anything else is a program error,
         * counted and left out (of the file and of the windows). */
        if (step > (uint64_t)INT64_MAX || tokens > (uint64_t)INT64_MAX ||
            (w->have_step && (step <= w->last_step || ns < w->last_step_ns))) {
            w->bad_steps++;
            break;
        }
        w->have_step = 1;
        w->last_step = step;
        w->last_step_ns = ns;
        st_val v[4] = {ST_VINT(step), ST_VINT(ns), ST_VINT(tokens), ST_VINT(s->id)};
        st_store_row(w->store, ST_S_STEP, 4, v);
        if (t->agg) steps_push(w, (step_item){step, tokens, ns, s->id});
        if (w->cpu) st_cpurec_step(w->cpu, step);
        void (*on_step)(st_trace *, uint64_t) = atomic_load(&t->gpu_on_step);
        if (on_step) on_step(t, step);
        break;
    }
    default:
        break;
    }
    return st_rec_slots(r->type);
}

/* Drains what the ring holds now (not what arrives meanwhile: chasing the
 * producer record by record would bounce its cache lines between cores).
 * Returns the number of slots that were pending. */
static size_t drain_ring(st_trace *t, writer *w, st_thread_state *s)
{
    st_ring *ring = s->ring;
    if (!ring) return 0;
    int retired = atomic_load_explicit(&ring->retired, memory_order_acquire);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    size_t pending = (size_t)(head - tail);
    while (tail < head) {
        uint64_t stop = head - tail > ST_DRAIN_BATCH ? tail + ST_DRAIN_BATCH : head;
        /* A two-slot record may end one slot past stop, never past head. */
        while (tail < stop) tail += process(t, w, s, ring, tail);
        atomic_store_explicit(&ring->tail, tail, memory_order_release);
        if (t->writer_delay_us) usleep(t->writer_delay_us);
    }
    if (retired) {
        /* The producer was gone before head was read: everything it wrote
         * is processed. */
        s->final_dropped = atomic_load(&ring->dropped);
        pthread_mutex_lock(&t->lock);
        t->retired_dropped += s->final_dropped;
        t->threads[s->id].ring = NULL;
        pthread_mutex_unlock(&t->lock);
        s->ring = NULL;
        free(ring->buf);
        free(ring);
    }
    return pending;
}

/* Returns 1 when a ring was at least a quarter full: drain again at once.
 * A thread's perf ring is drained just before its event ring, so that the
 * events which place its samples are there when they are encoded
 * (st_cpurec.h). */
static int drain_all(st_trace *t, writer *w)
{
    int busy = 0;
    uint32_t n = atomic_load(&t->n_threads);
    int64_t horizon = w->cpu ? st_now_ns() - ST_CPUREC_GRACE_NS : 0;
    for (uint32_t i = 0; i < n && i < t->threads_written; i++) {
        st_thread_state *s = t->tstate[i];
        if (!s || !s->ring) continue;
        if (s->cpu) st_cpurec_drain(w->cpu, s->cpu);
        size_t cap = (size_t)s->ring->mask + 1;
        if (drain_ring(t, w, s) >= cap / 4) busy = 1;
        if (s->cpu) {
            if (!s->ring) st_cpurec_retire(w->cpu, s->cpu, open_stage(s)); /* unregistered */
            else st_cpurec_emit(w->cpu, s->cpu, horizon, open_stage(s));
        }
    }
    return busy;
}

/* At close (final) and at an interrupted flush: every CPU record drained
 * and encoded, the events closed at close. */
static void cpu_drain_rest(st_trace *t, writer *w, int final)
{
    for (uint32_t i = 0; i < t->threads_written; i++) {
        st_thread_state *s = t->tstate[i];
        if (!s || !s->cpu) continue;
        if (final) {
            st_cpurec_retire(w->cpu, s->cpu, open_stage(s));
        } else {
            st_cpurec_drain(w->cpu, s->cpu);
            st_cpurec_emit(w->cpu, s->cpu, INT64_MAX, open_stage(s));
        }
    }
}

/* Dropped counts: a live ring's counter, or the final count of a freed ring. */
static uint64_t thread_dropped(st_thread_state *s)
{
    if (s->ring) return atomic_load(&s->ring->dropped);
    return s->final_dropped;
}

static void write_dropped(st_trace *t, writer *w)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->threads_written; i++) {
        st_thread_state *s = t->tstate[i];
        if (!s) continue;
        uint64_t d = thread_dropped(s);
        total += d;
        if (d) {
            st_val v[2] = {ST_VINT(d), ST_VINT(i)};
            st_store_row(w->store, ST_S_DROPPED, 2, v);
        }
    }
    if (total != t->dropped_written) {
        t->dropped_written = total;
        meta_int(w, "dropped_events", (long long)total);
    }
}

/* st_clock_sync_record's and st_clock_map_record's measurements, each
 * written once (docs/trace-format.md, "Ranks on one clock"). */
static void write_clock_sync(st_trace *t, writer *w)
{
    st_clock_sync sync[2];
    int state[2];
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < 2; i++) {
        sync[i] = t->clock_sync[i];
        state[i] = t->clock_sync_state[i];
        if (state[i] == 1) t->clock_sync_state[i] = 2;
    }
    pthread_mutex_unlock(&t->lock);
    static const char *keys[2][3] = {
        {"clock_sync_ns", "clock_offset_ns", "clock_uncertainty_ns"},
        {"clock_sync_close_ns", "clock_offset_close_ns", "clock_uncertainty_close_ns"}};
    for (int i = 0; i < 2; i++) {
        if (state[i] != 1) continue;
        meta_int(w, keys[i][0], (long long)sync[i].local_ns);
        meta_int(w, keys[i][1], (long long)sync[i].offset_ns);
        meta_int(w, keys[i][2], (long long)sync[i].uncertainty_ns);
    }
    if ((state[0] == 1 || state[1] == 1) && state[0] && state[1] &&
        sync[1].local_ns > sync[0].local_ns) {
        __int128 drift = (__int128)((__int128)sync[1].offset_ns - sync[0].offset_ns) * 1000000000 /
                         ((__int128)sync[1].local_ns - sync[0].local_ns);
        if (drift <= INT64_MAX && drift >= INT64_MIN) meta_int(w, "clock_drift_ppb", (long long)drift);
    }
    st_clock_map map[2];
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < 2; i++) {
        map[i] = t->clock_map[i];
        state[i] = t->clock_map_state[i];
        if (state[i] == 1) t->clock_map_state[i] = 2;
    }
    pthread_mutex_unlock(&t->lock);
    static const char *map_keys[2][2] = {{"clock_map_error_ns", "clock_map_half_bracket_ns"},
                                         {"clock_map_error_close_ns", "clock_map_half_bracket_close_ns"}};
    for (int i = 0; i < 2; i++) {
        if (state[i] != 1) continue;
        meta_int(w, map_keys[i][0], (long long)map[i].error_ns);
        meta_int(w, map_keys[i][1], (long long)map[i].half_bracket_ns);
    }
}

/* 0: stored; 1: not stored (the store keeps it for the next commit). */
static int commit_rows(st_trace *t, writer *w, int final, int64_t seen_ns)
{
    /* Rows for every stage and counter registered so far go in first: the
     * records drained in this pass may use ids registered after the pass
     * began, and a committed chunk must never name an id the file lacks
     * (a reader rejects such a chunk, and the process may die before the
     * next commit). */
    write_registrations(t, w);
    if (w->cpu && (final || seen_ns)) cpu_drain_rest(t, w, final);
    for (uint32_t i = 0; i < t->threads_written; i++) {
        st_thread_state *s = t->tstate[i];
        if (!s) continue;
        flush_event_chunk(w, s, seen_ns);
        flush_counter_chunk(t, w, s);
        flush_flow_chunk(w, s);
        if (s->cpu) st_cpurec_flush(w->cpu, s->cpu);
    }
    st_cpurec_commit(w->cpu, final, seen_ns != 0);
    store_gpu(t, w, final);
    write_dropped(t, w);
    write_clock_sync(t, w);
    st_meta_store(t, w->store);
    if (w->bad_ends || w->bad_steps || w->clock_clamped || w->bad_counters) {
        meta_int(w, "unmatched_ends", (long long)w->bad_ends);
        meta_int(w, "rejected_steps", (long long)w->bad_steps);
        meta_int(w, "clock_clamped", (long long)w->clock_clamped);
        meta_int(w, "bad_counters", (long long)w->bad_counters);
    }
    if (final) {
        meta_int(w, "end_ns", (long long)st_now_ns());
        meta_text(w, "status", atomic_load(&t->interrupted) ? "interrupted" : "complete");
    }
    int rc = st_store_commit(w->store);
    atomic_store(&t->commit_failed, rc);
    return rc;
}

/* 0: stored; 1: not stored (the store keeps it for the next commit). */
static int commit(st_trace *t, writer *w, int final)
{
    int rc = commit_rows(t, w, final, 0);
    if (!final) st_store_begin(w->store);
    return rc;
}

/* Copies the WAL into the database file and empties it (TRUNCATE), so that
 * the .sqlite file alone holds every commit: a trace copied without its
 * -wal is whole. Another connection's checkpoint (the checkpointer's
 * PASSIVE one) makes it SQLITE_BUSY at once, so it is retried for up to
 * ST_CHECKPOINT_WAIT_MS. With sync 0 it runs with synchronous=OFF: no
 * fsync, so it costs a copy in the page cache; what it wrote survives the
 * process, not a power loss, like the commits themselves (WAL with
 * synchronous=NORMAL). Run between transactions. */
#define ST_CHECKPOINT_WAIT_MS 500
static int checkpoint_truncate(st_trace *t, int sync)
{
    if (!sync) sqlite3_exec(t->db, "PRAGMA synchronous=OFF", NULL, NULL, NULL);
    int rc = SQLITE_BUSY;
    for (int waited = 0;; waited += 2) {
        rc = sqlite3_wal_checkpoint_v2(t->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        if (rc != SQLITE_BUSY || waited >= ST_CHECKPOINT_WAIT_MS) break;
        usleep(2000);
    }
    if (!sync) sqlite3_exec(t->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    return rc;
}

/* The commit of st_signal_flush: every open range gets a chunk that says
 * it was open at seen_ns (flush_event_chunk), the status says
 * interrupted, and the WAL is checkpointed into the file, since the
 * process may die as soon as the handler has its answer. */
static int interrupted_commit(st_trace *t, writer *w, int64_t seen_ns)
{
    meta_text(w, "status", "interrupted");
    int rc = commit_rows(t, w, 0, seen_ns);
    if (rc == 0) checkpoint_truncate(t, 0);
    st_store_begin(w->store);
    return rc;
}

/* The last commit may meet a disk that is still full: retry it for up to
 * ST_FINAL_RETRY_MS, then give up the chunk data held (recorded as lost
 * spans, so that what is written says what is missing) and try once more
 * with what is left. If even that fails, the file keeps its last commit,
 * whose status is not "complete". */
#define ST_FINAL_RETRY_MS 1000
static void final_commit(st_trace *t, writer *w)
{
    if (commit(t, w, 1) == 0) return;
    for (int waited = 0; waited < ST_FINAL_RETRY_MS; waited += 100) {
        usleep(100000);
        if (st_store_commit(w->store) == 0) {
            atomic_store(&t->commit_failed, 0);
            return;
        }
    }
    st_store_discard_chunks(w->store);
    if (st_store_commit(w->store) == 0) {
        atomic_store(&t->commit_failed, 0);
        return;
    }
    if (!t->writer_error) {
        t->writer_error = ST_EIO;
        snprintf(t->writer_msg, sizeof t->writer_msg,
                 "trace '%s': the last commit failed (%s): the file keeps its previous commit, "
                 "which does not say complete",
                 t->path, sqlite3_errmsg(t->db));
        st_log(t, ST_LOG_ERROR, "%s", t->writer_msg);
    }
}

static void writer_free(st_trace *t, writer *w)
{
    st_cpurec_free(w->cpu); /* closes events still open (a writer that never ran) */
    st_pyq_close(t);        /* st_cpu_sample_add refuses from here on */
    st_store_close(w->store);
    for (size_t i = 0; i < w->n_gpu; i++) st_buf_free(&w->gpu[i].enc.buf);
    free(w->gpu);
    for (uint32_t i = 0; i < ST_MAX_THREADS; i++) {
        st_thread_state *s = t->tstate[i];
        if (!s) continue;
        if (s->ring) { /* never retired: the thread did not unregister */
            pthread_mutex_lock(&t->lock);
            t->retired_dropped += atomic_load(&s->ring->dropped);
            t->threads[i].ring = NULL;
            pthread_mutex_unlock(&t->lock);
            free(s->ring->buf);
            free(s->ring);
        }
        st_buf_free(&s->ev.buf);
        st_buf_free(&s->ctr.buf);
        st_buf_free(&s->flow.buf);
        free(s->q.items);
        free(s);
        t->tstate[i] = NULL;
    }
    free(w->strings);
    free(w->steps);
    free(w);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Any thread: the byte ends writer_main's poll (t->wake_pipe). */
void st_wake_writer(st_trace *t)
{
    char c = 1;
    ssize_t n = write(t->wake_pipe[1], &c, 1);
    (void)n; /* a full pipe already means "wake up" */
}

static void *writer_main(void *arg)
{
    st_trace *t = arg;
    writer *w = t->wpriv;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signal handlers never run here */

    checkpointer ckpt;
    checkpointer_start(t, &ckpt);
    st_store_begin(w->store);
    if (t->opt.cpu) w->cpu = st_cpurec_create(t, w->store);
    if (w->cpu && t->agg) st_cpurec_attach_agg(w->cpu, t->agg); /* on-CPU shares in the profile lines */
    int64_t last_commit = now_ms();
    for (;;) {
        int stop = atomic_load(&t->stop);
        pthread_mutex_lock(&t->lock);
        uint64_t flush_req = t->flush_requested;
        pthread_mutex_unlock(&t->lock);
        char buf[64];
        int sig = read(t->sig_req_pipe[0], buf, sizeof buf) > 0;
        while (read(t->wake_pipe[0], buf, sizeof buf) > 0) {
        }
        int64_t horizon = st_now_ns() - ST_AGG_GRACE_NS;

        write_registrations(t, w);
        int busy = drain_all(t, w);
        if (t->agg && !stop) feed_agg(t, w, horizon);

        int64_t now = now_ms();
        if (stop) break;
        if (sig) atomic_store(&t->interrupted, 1);
        if (sig || flush_req > t->flush_done || now - last_commit >= (int64_t)t->opt.commit_ms ||
            st_store_wants_commit(w->store)) {
            if (sig)
                interrupted_commit(t, w, st_now_ns()); /* after this pass's drain */
            else
                commit(t, w, 0);
            last_commit = now;
            pthread_mutex_lock(&t->lock);
            t->flush_done = flush_req;
            pthread_cond_broadcast(&t->flushed);
            pthread_mutex_unlock(&t->lock);
            if (sig) {
                char c = 1;
                if (write(t->sig_resp_pipe[1], &c, 1) < 0) { /* the handler timed out */
                }
            }
        }
        if (!busy) {
            struct pollfd p[2] = {{.fd = t->wake_pipe[0], .events = POLLIN},
                                  {.fd = t->sig_req_pipe[0], .events = POLLIN}};
            int timeout = 1;
            poll(p, 2, timeout);
        }
    }
    /* Final pass: everything recorded is drained; every event reaches the
     * aggregator. */
    write_registrations(t, w);
    drain_all(t, w);
    if (t->agg) feed_agg(t, w, INT64_MAX);
    final_commit(t, w);
    checkpointer_stop(t, &ckpt);
    /* One file again; on a disk still full this may fail, and the -wal
     * file then stays beside the trace, which opens as it is. The
     * checkpoint first: should the switch fail (another process reading
     * the trace holds the WAL), the file still holds every commit. */
    if (!t->writer_error) {
        checkpoint_truncate(t, 1);
        sqlite3_exec(t->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    }
    pthread_mutex_lock(&t->lock);
    t->flush_done = t->flush_requested;
    pthread_cond_broadcast(&t->flushed);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int st_writer_start(st_trace *t)
{
    writer *w = calloc(1, sizeof *w);
    if (!w) return st_set_error(ST_ENOMEM, "out of memory");
    w->gpu_dropped_written = -1;
    t->wpriv = w;
    size_t retry_bytes = (size_t)t->opt.retry_mib << 20;
    if (st_store_open(&w->store, t, retry_bytes)) {
        writer_free(t, w);
        t->wpriv = NULL;
        return st_set_error(ST_EIO, "%s", t->writer_msg);
    }
    /* Python-frame samples are taken from st_open's return on, before the
     * writer thread has set up the CPU side: they wait in the queue */
    if (t->opt.cpu) st_pyq_open(t);
    if (pthread_create(&t->writer, NULL, writer_main, t) != 0) {
        writer_free(t, w);
        t->wpriv = NULL;
        return st_set_error(ST_EIO, "cannot start the writer thread: %s", strerror(errno));
    }
    t->writer_started = 1;
    return ST_OK;
}

void st_writer_stop(st_trace *t)
{
    if (!t->writer_started) return;
    atomic_store(&t->stop, 1);
    st_wake_writer(t);
    pthread_join(t->writer, NULL);
    t->writer_started = 0;
    writer_free(t, t->wpriv);
    t->wpriv = NULL;
    sqlite3_close(t->db);
    t->db = NULL;
    if (t->writer_error) st_set_error(t->writer_error, "%s", t->writer_msg);
}
