/* reader_iter.c: the reader's chunk iterators: ranges, raw events,
 * counter samples and flows of one file, each chunk decoded with bounds
 * checks, the windows fed from them to the interval aggregator, and what
 * the chunk headers say without decoding. */
#include <endian.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

/* ---- chunk headers ---- */

/* The first chunk (by id) of table whose columns are not of the format's
 * types: one message as a read of it would give. */
static int describe_mistyped(st_reader *r, const char *table, const char *count_col, int64_t id)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT typeof(thread), typeof(t0_ns), typeof(t1_ns), typeof(%s), %s, data FROM main.%s WHERE id = ?1",
             count_col, strcmp(table, "range_chunks") == 0 ? "typeof(n_ranges)" : "'integer'", table);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad(table, sqlite3_errmsg(r->db));
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), err;
    const char *const names[] = {"thread", "t0_ns", "t1_ns", count_col, "n_ranges"};
    if (rc != SQLITE_ROW) err = st_rd_bad(table, sqlite3_errmsg(r->db));
    else if (!(err = st_rd_check_typed(st, 0, table, id, names, 5))) err = st_rd_check_blob(st, 5, table, id);
    sqlite3_finalize(st);
    return err ? err : st_rd_bad(table, "a chunk has a wrongly typed column");
}

static int chunk_headers(st_reader *r, const char *table, const char *count_col, int64_t *first, int64_t *last,
                         int *has, double *count)
{
    char sql[1024];
    int ranges = strcmp(table, "range_chunks") == 0;
    /* headers that lie (t0 < 0, t0 > t1, a negative count) are left out of the
     * hints: the chunks themselves are checked as they are decoded */
    const char *sane = ranges ? "0 <= t0_ns AND t0_ns <= t1_ns AND n_ranges >= 0" : "n_samples >= 0";
    snprintf(sql, sizeof sql,
             "SELECT min(t0_ns) FILTER (WHERE %s), max(t1_ns) FILTER (WHERE %s), total(%s) FILTER (WHERE %s), "
             "min(id) FILTER (WHERE typeof(thread) <> 'integer' OR typeof(t0_ns) <> 'integer' OR typeof(t1_ns) <> "
             "'integer' OR typeof(%s) <> 'integer' OR %s OR typeof(data) <> 'blob') FROM main.%s",
             sane, sane, ranges ? "n_ranges" : "n_samples", sane, count_col,
             ranges ? "typeof(n_ranges) <> 'integer'" : "0", table);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad(table, sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int err = st_rd_bad(table, sqlite3_errmsg(r->db));
        sqlite3_finalize(st);
        return err;
    }
    if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
        int64_t id = sqlite3_column_int64(st, 3);
        sqlite3_finalize(st);
        return describe_mistyped(r, table, count_col, id);
    }
    *has = sqlite3_column_type(st, 0) == SQLITE_INTEGER && sqlite3_column_type(st, 1) == SQLITE_INTEGER;
    if (*has) {
        *first = sqlite3_column_int64(st, 0);
        *last = sqlite3_column_int64(st, 1);
    }
    *count = sqlite3_column_double(st, 2);
    sqlite3_finalize(st);
    return ST_OK;
}

int st_reader_chunk_totals(st_reader *r, st_chunk_totals *out)
{
    memset(out, 0, sizeof *out);
    return r->m->chunk_totals(r, out);
}

int st_rd_file_chunk_totals(st_reader *r, st_chunk_totals *out)
{
    int64_t unused0, unused1;
    int unused;
    int rc = chunk_headers(r, "range_chunks", "n_events", &out->first_ns, &out->last_ns, &out->has_ranges,
                           &out->n_ranges);
    if (!rc) rc = chunk_headers(r, "counter_chunks", "n_samples", &unused0, &unused1, &unused, &out->n_samples);
    return rc;
}

/* ---- chunk iteration shared by the three iterators ---- */

static int chunk_rows_open(chunk_rows *c, st_reader *r, const char *table, const char *count_col,
                           int64_t thread, int64_t t0, int64_t t1)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT id, thread, %s, data, typeof(thread), typeof(t0_ns), typeof(t1_ns), typeof(%s) FROM main.%s "
             "WHERE (?1 < 0 OR thread = ?1) AND (typeof(t0_ns) <> 'integer' OR typeof(t1_ns) <> 'integer' OR "
             "(t1_ns >= ?2 AND t0_ns < ?3)) ORDER BY thread, id",
             count_col, count_col, table);
    memset(c, 0, sizeof *c);
    c->count_col = count_col;
    c->r = r;
    c->table = table;
    if (sqlite3_prepare_v2(r->db, sql, -1, &c->st, NULL) != SQLITE_OK)
        return st_rd_bad(table, sqlite3_errmsg(r->db));
    sqlite3_bind_int64(c->st, 1, thread);
    sqlite3_bind_int64(c->st, 2, t0);
    sqlite3_bind_int64(c->st, 3, t1);
    return ST_OK;
}

/* 1: row loaded; 0: no more rows; <0: error. */
static int chunk_rows_next(chunk_rows *c)
{
    int rc = sqlite3_step(c->st);
    if (rc == SQLITE_DONE) return 0;
    if (rc != SQLITE_ROW) return st_rd_bad(c->table, sqlite3_errmsg(c->r->db));
    if (st_rd_int_col(c->st, 0, &c->row_id)) return st_rd_bad(c->table, "a chunk's id is not an integer");
    const char *const names[] = {"thread", "t0_ns", "t1_ns", c->count_col};
    int trc = st_rd_check_typed(c->st, 4, c->table, c->row_id, names, 4);
    if (!trc) trc = st_rd_check_blob(c->st, 3, c->table, c->row_id);
    if (trc) return trc;
    c->thread = sqlite3_column_int64(c->st, 1);
    c->n_items = sqlite3_column_int64(c->st, 2);
    if (c->n_items < 0 || c->n_items > UINT32_MAX)
        return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column '%s' is out of range", c->table,
                            (long long)c->row_id, c->count_col);
    if (c->thread < 0 || !st_rd_thread_by_id(c->r, (uint32_t)c->thread))
        return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld names unknown thread %lld",
                            c->table, (long long)c->row_id, (long long)c->thread);
    c->data = sqlite3_column_blob(c->st, 3);
    c->size = sqlite3_column_bytes(c->st, 3);
    return 1;
}

static int chunk_corrupt(chunk_rows *c)
{
    return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld (thread %lld) is corrupt or truncated",
                        c->table, (long long)c->row_id, (long long)c->thread);
}

/* The chunk walk for the reader's other files (reader_cpu.c). */
int st_rd_chunk_rows_open(chunk_rows *c, st_reader *r, const char *table, const char *count_col, int64_t thread,
                          int64_t t0, int64_t t1)
{
    return chunk_rows_open(c, r, table, count_col, thread, t0, t1);
}

int st_rd_chunk_rows_next(chunk_rows *c) { return chunk_rows_next(c); }

int st_rd_chunk_corrupt(chunk_rows *c) { return chunk_corrupt(c); }

/* ---- ranges ---- */

int st_range_iter_open(st_range_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_range_iter *it = malloc(sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    memset(it, 0, offsetof(st_range_iter, batch));
    it->head.next = it->head.end = it->batch;
    it->m = r->m;
    it->t0 = t0;
    it->t1 = t1;
    int rc = r->m->range_open(it, r, thread);
    if (rc) {
        st_range_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_range_open(st_range_iter *it, st_reader *r, int64_t thread)
{
    return chunk_rows_open(&it->rows, r, "range_chunks", "n_events", thread, it->t0, it->t1);
}

/* Decodes the current chunk's events into it->batch until it is full or the
 * chunk ends: the ranges that end, overlapping [t0, t1). The same checks as
 * st_event_next (every byte against the chunk's end, stage ids below
 * n_stages, depth, time overflow), in one loop that keeps the cursor in
 * registers. Returns the number of ranges; *status is 1 (more events in
 * the chunk), 0 (the chunk is done, every byte consumed) or ST_ECORRUPT. */
static size_t decode_ranges(st_range_iter *it, int *status)
{
    st_event_cursor *c = &it->cur;
    const uint8_t *p = c->p, *end = c->end;
    uint32_t remaining = c->remaining, depth = c->depth;
    const uint32_t n_stages = it->rows.r->n_stages, thread = (uint32_t)it->rows.thread;
    const int64_t t0 = it->t0, t1 = it->t1;
    const uint32_t n_items = (uint32_t)it->rows.n_items;
    int64_t ts = c->prev_ts;
    st_range *out = it->batch;
    size_t n = 0;
    int rc = 1;
    while (n < RANGE_BATCH) {
        if (remaining == 0) {
            rc = p == end ? 0 : ST_ECORRUPT_;
            break;
        }
        uint64_t tag, delta, w = 0, stop = 0;
        /* Fast path, without a branch on the delta's length (1 to 4 bytes
         * vary from event to event): a one-byte tag and the delta's bytes
         * read from one little-endian load; their stop bit (the first byte
         * with the high bit clear) gives the length. */
        if (end - p >= 8) {
            memcpy(&w, p, sizeof w);
            w = le64toh(w);
            stop = (w & 0x80) ? 0 : ~w & 0x0000008080808000ull;
        }
        if (stop) {
            unsigned nb = ((unsigned)__builtin_ctzll(stop) + 1) >> 3; /* tag + delta bytes */
            uint64_t x = (w >> 8) & ((1ull << ((nb - 1) * 8)) - 1);
            tag = w & 0x7f;
            delta = (x & 0x7f) | ((x >> 1) & 0x3f80) | ((x >> 2) & 0x1fc000) | ((x >> 3) & 0xfe00000);
            p += nb;
        } else {
            size_t k = st_varint_get(p, end, &tag);
            if (!k) { rc = ST_ECORRUPT_; break; }
            p += k;
            k = st_varint_get(p, end, &delta);
            if (!k) { rc = ST_ECORRUPT_; break; }
            p += k;
        }
        if (delta > (uint64_t)INT64_MAX || ts > INT64_MAX - (int64_t)delta) { rc = ST_ECORRUPT_; break; }
        ts += (int64_t)delta;
        if (tag == 0) {
            if (depth == 0) { rc = ST_ECORRUPT_; break; }
            depth--;
            /* (an open range carried in the chunk's header was checked
             * only against a non-empty stages table) */
            if (c->stack[depth].stage >= n_stages) { rc = ST_ECORRUPT_; break; }
            remaining--;
            int64_t start = c->stack[depth].start_ns;
            if (start >= t1 || ts < t0 || (ts == t0 && ts != start)) continue;
            out[n].thread = thread;
            out[n].stage = c->stack[depth].stage;
            out[n].depth = depth;
            out[n].start_ns = start;
            out[n].dur_ns = ts - start;
            it->batch_event[n] = n_items - remaining - 1;
            n++;
        } else {
            /* Every id must name a stage of the file (none when it has none). */
            if (tag - 1 >= n_stages || depth >= ST_MAX_DEPTH) { rc = ST_ECORRUPT_; break; }
            c->stack[depth].stage = (uint32_t)(tag - 1);
            c->stack[depth].start_ns = ts;
            depth++;
            remaining--;
        }
    }
    c->p = p;
    c->remaining = remaining;
    c->depth = depth;
    c->prev_ts = ts;
    *status = rc;
    return n;
}

int st_range_iter_fill(st_range_iter *it, st_range *out) { return it->m->range_fill(it, out); }

int st_rd_file_range_fill(st_range_iter *it, st_range *out)
{
    it->head.next = it->head.end = it->batch;
    for (;;) {
        if (it->pending) {
            int rc = it->pending;
            it->pending = 0;
            return rc;
        }
        if (!it->in_chunk) {
            int rc = chunk_rows_next(&it->rows);
            if (rc <= 0) return rc;
            if (st_event_cursor_open(&it->cur, it->rows.data, (size_t)it->rows.size,
                                     (uint32_t)it->rows.n_items, it->rows.r->n_stages))
                return chunk_corrupt(&it->rows);
            it->in_chunk = 1;
        }
        int status;
        size_t n = decode_ranges(it, &status);
        if (status <= 0) it->in_chunk = 0;
        if (status < 0) it->pending = chunk_corrupt(&it->rows);
        if (n) {
            *out = it->batch[0];
            it->head.next = it->batch + 1;
            it->head.end = it->batch + n;
            return 1;
        }
    }
}

void st_range_iter_close(st_range_iter *it)
{
    if (!it) return;
    it->m->range_close(it);
    free(it);
}

void st_rd_file_range_close(st_range_iter *it) { sqlite3_finalize(it->rows.st); }

/* The ranges a thread left open: its last chunk decoded to the end. The
 * chunk's header repeats every range open at its start, so this one chunk
 * says what was open after the thread's last event. */
int st_reader_unended(st_reader *r, uint32_t thread, st_open_range *stack)
{
    return r->m->unended(r, thread, stack);
}

int st_rd_file_unended(st_reader *r, uint32_t thread, st_open_range *stack)
{
    chunk_rows c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.table = "range_chunks";
    c.count_col = "n_events";
    if (sqlite3_prepare_v2(r->db,
                           "SELECT id, thread, n_events, data, typeof(thread), typeof(t0_ns), typeof(t1_ns), "
                           "typeof(n_events) FROM main.range_chunks WHERE thread = ?1 ORDER BY id DESC LIMIT 1",
                           -1, &c.st, NULL) != SQLITE_OK)
        return st_rd_bad(c.table, sqlite3_errmsg(r->db));
    sqlite3_bind_int64(c.st, 1, thread);
    int rc = chunk_rows_next(&c);
    if (rc == 1) {
        st_event_cursor *cur = malloc(sizeof *cur);
        st_event ev;
        if (!cur) {
            rc = st_set_error(ST_ENOMEM, "out of memory");
        } else if (st_event_cursor_open(cur, c.data, (size_t)c.size, (uint32_t)c.n_items, r->n_stages)) {
            rc = chunk_corrupt(&c);
        } else {
            while ((rc = st_event_next(cur, &ev)) == 1) {
                if (ev.stage >= r->n_stages) break;
            }
            if (rc == 1 || rc < 0) {
                rc = chunk_corrupt(&c);
            } else {
                memcpy(stack, cur->stack, cur->depth * sizeof *stack);
                rc = (int)cur->depth;
            }
        }
        free(cur);
    }
    sqlite3_finalize(c.st);
    return rc;
}

/* ---- raw events of one thread ---- */

int st_event_iter_open(st_event_iter **out, st_reader *r, uint32_t thread)
{
    st_event_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    int rc = r->m->event_open(it, r, thread);
    if (rc) {
        st_event_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_event_open(st_event_iter *it, st_reader *r, uint32_t thread)
{
    return chunk_rows_open(&it->rows, r, "range_chunks", "n_events", thread, INT64_MIN, INT64_MAX);
}

int st_event_iter_next(st_event_iter *it, st_event *out) { return it->m->event_next(it, out); }

int st_rd_file_event_next(st_event_iter *it, st_event *out)
{
    for (;;) {
        if (!it->in_chunk) {
            int rc = chunk_rows_next(&it->rows);
            if (rc <= 0) return rc;
            if (st_event_cursor_open(&it->cur, it->rows.data, (size_t)it->rows.size,
                                     (uint32_t)it->rows.n_items, it->rows.r->n_stages))
                return chunk_corrupt(&it->rows);
            it->in_chunk = 1;
        }
        int rc = st_event_next(&it->cur, out);
        if (rc == 1 && out->stage >= it->rows.r->n_stages) return chunk_corrupt(&it->rows);
        if (rc == 1) return 1;
        if (rc < 0) return chunk_corrupt(&it->rows);
        it->in_chunk = 0;
    }
}

void st_event_iter_close(st_event_iter *it)
{
    if (!it) return;
    it->m->event_close(it);
    free(it);
}

void st_rd_file_event_close(st_event_iter *it) { sqlite3_finalize(it->rows.st); }

/* ---- counter samples ---- */

int st_sample_iter_open(st_sample_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_sample_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->t0 = t0;
    it->t1 = t1;
    int rc = r->m->sample_open(it, r, thread);
    if (rc) {
        st_sample_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_sample_open(st_sample_iter *it, st_reader *r, int64_t thread)
{
    return chunk_rows_open(&it->rows, r, "counter_chunks", "n_samples", thread, it->t0, it->t1);
}

int st_sample_iter_next(st_sample_iter *it, st_sample_row *out) { return it->m->sample_next(it, out); }

int st_rd_file_sample_next(st_sample_iter *it, st_sample_row *out)
{
    for (;;) {
        if (!it->in_chunk) {
            int rc = chunk_rows_next(&it->rows);
            if (rc <= 0) return rc;
            if (st_counter_cursor_open(&it->cur, it->rows.data, (size_t)it->rows.size,
                                       (uint32_t)it->rows.n_items, it->rows.r->n_counters))
                return chunk_corrupt(&it->rows);
            it->in_chunk = 1;
        }
        st_sample s;
        int rc = st_counter_next(&it->cur, &s);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return chunk_corrupt(&it->rows);
        if (s.ts_ns < it->t0 || s.ts_ns >= it->t1) continue;
        out->thread = (uint32_t)it->rows.thread;
        out->counter = s.counter;
        out->ts_ns = s.ts_ns;
        out->value = s.value;
        return 1;
    }
}

void st_sample_iter_close(st_sample_iter *it)
{
    if (!it) return;
    it->m->sample_close(it);
    free(it);
}

void st_rd_file_sample_close(st_sample_iter *it) { sqlite3_finalize(it->rows.st); }

/* ---- flows ---- */

int st_reader_has_flows(st_reader *r) { return r->m->has_flows(r); }

int st_rd_file_has_flows(st_reader *r)
{
    if (!r->has_flow_chunks) return 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM main.flow_chunks LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("flow_chunks", sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return st_rd_bad("flow_chunks", sqlite3_errmsg(r->db));
    return rc == SQLITE_ROW;
}

int st_flow_iter_open(st_flow_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    *out = NULL;
    st_flow_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->m = r->m;
    it->t0 = t0;
    it->t1 = t1;
    int rc = r->m->flow_open(it, r, thread);
    if (rc) {
        st_flow_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_rd_file_flow_open(st_flow_iter *it, st_reader *r, int64_t thread)
{
    if (!r->has_flow_chunks) {
        it->empty = 1;
        return ST_OK;
    }
    return chunk_rows_open(&it->rows, r, "flow_chunks", "n_records", thread, it->t0, it->t1);
}

int st_flow_iter_next(st_flow_iter *it, st_flow_row *out) { return it->m->flow_next(it, out); }

int st_rd_file_flow_next(st_flow_iter *it, st_flow_row *out)
{
    if (it->empty) return 0;
    for (;;) {
        if (!it->in_chunk) {
            int rc = chunk_rows_next(&it->rows);
            if (rc <= 0) return rc;
            if (st_flow_cursor_open(&it->cur, it->rows.data, (size_t)it->rows.size, (uint32_t)it->rows.n_items))
                return chunk_corrupt(&it->rows);
            it->in_chunk = 1;
        }
        st_flow_rec f;
        int rc = st_flow_next(&it->cur, &f);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return chunk_corrupt(&it->rows);
        if (f.ts_ns < it->t0 || f.ts_ns >= it->t1) continue;
        out->thread = (uint32_t)it->rows.thread;
        out->dir = f.dir;
        out->ts_ns = f.ts_ns;
        out->id = f.id;
        return 1;
    }
}

void st_flow_iter_close(st_flow_iter *it)
{
    if (!it) return;
    it->m->flow_close(it);
    free(it);
}

void st_rd_file_flow_close(st_flow_iter *it) { sqlite3_finalize(it->rows.st); }

void st_flow_iter_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index)
{
    it->m->flow_pos(it, chunk_id, index);
}

void st_rd_file_flow_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index)
{
    *chunk_id = it->rows.row_id;
    *index = (uint32_t)it->rows.n_items - it->cur.remaining - 1;
}

/* ---- windows ---- */

typedef struct thread_stream {
    uint32_t id;
    st_event_iter *it;
    st_event ev;
    int has;
} thread_stream;

int st_reader_windows(st_reader *r, uint32_t every_steps, st_window_fn cb, void *arg)
{
    if (every_steps < 1) return st_set_error(ST_EINVAL, "window size must be at least 1 step");
    st_agg *agg = st_agg_create(every_steps, cb, arg);
    thread_stream *ts = calloc(r->n_threads ? r->n_threads : 1, sizeof *ts);
    if (!agg || !ts) {
        st_agg_free(agg);
        free(ts);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < r->n_stages; i++)
        st_agg_stage(agg, i, r->stages[i].name, r->stages[i].kind);
    int rc = ST_OK;
    for (uint32_t i = 0; i < r->n_threads && !rc; i++) {
        ts[i].id = r->threads[i].id;
        st_agg_thread(agg, ts[i].id, r->threads[i].name, r->threads[i].role);
        rc = st_event_iter_open(&ts[i].it, r, ts[i].id);
        if (!rc) {
            int n = st_event_iter_next(ts[i].it, &ts[i].ev);
            if (n < 0) rc = n;
            ts[i].has = n == 1;
        }
    }
    /* Threads meet only at step marks: between two marks each thread's
     * events are fed on their own, which is the st_agg_order merge (steps
     * first at equal times) without comparing across threads per event. */
    for (uint32_t next_step = 0; !rc && next_step <= r->n_steps; next_step++) {
        int64_t limit = next_step < r->n_steps ? r->steps[next_step].ts_ns : INT64_MAX;
        for (uint32_t i = 0; i < r->n_threads && !rc; i++) {
            thread_stream *s = &ts[i];
            while (s->has && (s->ev.ts_ns < limit || limit == INT64_MAX)) {
                if (s->ev.is_end)
                    st_agg_end(agg, s->id, s->ev.ts_ns);
                else
                    st_agg_begin(agg, s->id, s->ev.stage, s->ev.ts_ns);
                int n = st_event_iter_next(s->it, &s->ev);
                if (n < 0) {
                    rc = n;
                    break;
                }
                s->has = n == 1;
            }
        }
        if (!rc && next_step < r->n_steps) {
            const st_step_info *st = &r->steps[next_step];
            st_agg_step(agg, st->step, st->ts_ns, st->tokens);
        }
    }
    for (uint32_t i = 0; i < r->n_threads; i++) st_event_iter_close(ts[i].it);
    free(ts);
    st_agg_free(agg);
    return rc;
}

/* ---- where the last returned row is stored (the SQL tables' rowids) ---- */

void st_range_iter_pos(const st_range_iter *it, int64_t *chunk_id, uint32_t *index)
{
    /* the batch holds ranges of one chunk, the current row until the next fill */
    *chunk_id = it->rows.row_id;
    *index = it->batch_event[it->head.next - it->batch - 1];
}

void st_sample_iter_pos(const st_sample_iter *it, int64_t *chunk_id, uint32_t *index)
{
    *chunk_id = it->rows.row_id;
    *index = (uint32_t)it->rows.n_items - it->cur.remaining - 1;
}

/* ---- what the chunk headers say, per thread or device ---- */

int st_rd_unreadable(const char *table, sqlite3 *db)
{
    return st_set_error(ST_ECORRUPT, "trace table '%s' cannot be read: %s", table, sqlite3_errmsg(db));
}

int st_rd_push_count(st_chunk_count **v, uint32_t *n, uint32_t *cap, int64_t key, int64_t count)
{
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 16;
        st_chunk_count *nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return st_set_error(ST_ENOMEM, "out of memory");
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = (st_chunk_count){key, count};
    return ST_OK;
}

/* Runs sql (two integer columns) into *out. A failed step ends the list:
 * ST_OK when lenient, an error when strict (with the rows before it). */
int st_rd_chunk_counts(st_reader *r, const char *table, const char *sql, int strict, st_chunk_count **out,
                        uint32_t *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_unreadable(table, r->db);
    uint32_t cap = 0;
    int rc, err = ST_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && !err)
        err = st_rd_push_count(out, n, &cap, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
    if (err) { /* no memory */
        free(*out);
        *out = NULL;
        *n = 0;
    } else if (rc != SQLITE_DONE && strict) {
        err = st_rd_unreadable(table, r->db); /* *out keeps the rows before the failure */
    }
    sqlite3_finalize(st);
    return err;
}

int st_reader_range_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    return r->m->range_chunks_per_thread(r, out, n);
}

int st_rd_file_range_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    return st_rd_chunk_counts(r, "range_chunks", "SELECT thread, count(*) FROM main.range_chunks GROUP BY thread", 0, out,
                        n);
}
