/* reader.c: reads traces written by the writer (see st_reader.h). The file
 * is untrusted: read-only, defensive, trusted_schema off, every table
 * checked to be a real table (not a view) before it is read, every value
 * type-checked, every chunk decoded with bounds checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "st_reader.h"
#include "st_sqlite.h"

int st_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct meta_kv {
    char *key, *value;
} meta_kv;

struct st_reader {
    sqlite3 *db;
    int owns_db;
    meta_kv *meta;
    uint32_t n_meta;
    st_thread_info *threads;
    uint32_t n_threads;
    int32_t *thread_index; /* id -> index, -1 */
    uint32_t thread_index_len;
    st_stage_info *stages;
    uint32_t n_stages;
    st_counter_info *counters;
    uint32_t n_counters;
    st_step_info *steps;
    uint32_t n_steps;
};

static const char *const required_tables[] = {"meta", "threads", "stages", "counter_names",
                                              "steps", "range_chunks", "counter_chunks"};

static int is_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT type FROM main.sqlite_schema WHERE name = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
             strcmp((const char *)sqlite3_column_text(st, 0), "table") == 0;
    int err = rc != SQLITE_ROW && rc != SQLITE_DONE;
    sqlite3_finalize(st);
    return err ? -1 : ok;
}

static char *dup_text(sqlite3_stmt *st, int col)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    return strdup(s ? (const char *)s : "");
}

static int int_col(sqlite3_stmt *st, int col, int64_t *out)
{
    if (sqlite3_column_type(st, col) != SQLITE_INTEGER) return -1;
    *out = sqlite3_column_int64(st, col);
    return 0;
}

static int bad(const char *table, const char *what)
{
    return st_set_error(ST_ECORRUPT, "trace table '%s': %s", table, what);
}

static int load_meta(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT key, value FROM main.meta", -1, &st, NULL) != SQLITE_OK)
        return bad("meta", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->n_meta == cap) {
            cap = cap ? cap * 2 : 32;
            meta_kv *m = realloc(r->meta, cap * sizeof *m);
            if (!m) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            r->meta = m;
        }
        r->meta[r->n_meta].key = dup_text(st, 0);
        r->meta[r->n_meta].value = dup_text(st, 1);
        r->n_meta++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("meta", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_threads(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT id, os_tid, name, role, device, rank, dropped FROM main.threads "
                           "ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return bad("threads", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    int64_t max_id = -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, tid, device, rank, dropped;
        if (int_col(st, 0, &id) || int_col(st, 1, &tid) || int_col(st, 4, &device) ||
            int_col(st, 5, &rank) || int_col(st, 6, &dropped) || id < 0 || id >= ST_MAX_THREADS ||
            dropped < 0) {
            sqlite3_finalize(st);
            return bad("threads", "a row has a missing, non-integer or out-of-range value");
        }
        if (r->n_threads == cap) {
            cap = cap ? cap * 2 : 16;
            st_thread_info *t = realloc(r->threads, cap * sizeof *t);
            if (!t) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            r->threads = t;
        }
        st_thread_info *t = &r->threads[r->n_threads++];
        t->id = (uint32_t)id;
        t->os_tid = tid;
        t->name = dup_text(st, 2);
        t->role = dup_text(st, 3);
        t->device = (int)device;
        t->rank = (int)rank;
        t->dropped = (uint64_t)dropped;
        if (id > max_id) max_id = id;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("threads", sqlite3_errmsg(r->db));
    r->thread_index_len = (uint32_t)(max_id + 1);
    r->thread_index = malloc((r->thread_index_len + 1) * sizeof *r->thread_index);
    if (!r->thread_index) return st_set_error(ST_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < r->thread_index_len; i++) r->thread_index[i] = -1;
    for (uint32_t i = 0; i < r->n_threads; i++) r->thread_index[r->threads[i].id] = (int32_t)i;
    return ST_OK;
}

static int load_stages(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT id, name, kind FROM main.stages ORDER BY id", -1, &st,
                           NULL) != SQLITE_OK)
        return bad("stages", sqlite3_errmsg(r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (int_col(st, 0, &id) || id < 0 || id >= ST_MAX_STAGES) {
            sqlite3_finalize(st);
            return bad("stages", "a row has a missing or out-of-range id");
        }
        const unsigned char *kind = sqlite3_column_text(st, 2);
        int k = st_kind_parse((const char *)kind);
        if (k < 0) {
            /* The message first: kind points into the statement's row. */
            int err = st_set_error(ST_ECORRUPT, "trace table 'stages': stage %lld has unknown kind '%s'",
                                   (long long)id, kind ? (const char *)kind : "");
            sqlite3_finalize(st);
            return err;
        }
        if ((uint32_t)id >= r->n_stages) {
            st_stage_info *s = realloc(r->stages, ((size_t)id + 1) * sizeof *s);
            if (!s) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            for (uint32_t i = r->n_stages; i <= (uint32_t)id; i++) {
                char name[32];
                snprintf(name, sizeof name, "stage%u", i);
                s[i] = (st_stage_info){i, strdup(name), ST_WORK};
            }
            r->stages = s;
            r->n_stages = (uint32_t)id + 1;
        }
        free((char *)r->stages[id].name);
        r->stages[id].name = dup_text(st, 1);
        r->stages[id].kind = (st_kind)k;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("stages", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_counters(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT id, name, unit FROM main.counter_names ORDER BY id", -1,
                           &st, NULL) != SQLITE_OK)
        return bad("counter_names", sqlite3_errmsg(r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (int_col(st, 0, &id) || id < 0 || id >= ST_MAX_COUNTERS) {
            sqlite3_finalize(st);
            return bad("counter_names", "a row has a missing or out-of-range id");
        }
        if ((uint32_t)id >= r->n_counters) {
            st_counter_info *c = realloc(r->counters, ((size_t)id + 1) * sizeof *c);
            if (!c) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            for (uint32_t i = r->n_counters; i <= (uint32_t)id; i++) {
                char name[32];
                snprintf(name, sizeof name, "counter%u", i);
                c[i] = (st_counter_info){i, strdup(name), strdup("")};
            }
            r->counters = c;
            r->n_counters = (uint32_t)id + 1;
        }
        free((char *)r->counters[id].name);
        free((char *)r->counters[id].unit);
        r->counters[id].name = dup_text(st, 1);
        r->counters[id].unit = dup_text(st, 2);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("counter_names", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_steps(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT step, ts_ns, tokens FROM main.steps ORDER BY step", -1,
                           &st, NULL) != SQLITE_OK)
        return bad("steps", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t step, ts, tokens;
        if (int_col(st, 0, &step) || int_col(st, 1, &ts) || int_col(st, 2, &tokens) || step < 0 ||
            tokens < 0) {
            sqlite3_finalize(st);
            return bad("steps", "a row has a missing, negative or non-integer value");
        }
        if (r->n_steps && ts < r->steps[r->n_steps - 1].ts_ns) {
            sqlite3_finalize(st);
            return bad("steps", "step marks go back in time");
        }
        if (r->n_steps == cap) {
            cap = cap ? cap * 2 : 256;
            st_step_info *s = realloc(r->steps, cap * sizeof *s);
            if (!s) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            r->steps = s;
        }
        r->steps[r->n_steps++] = (st_step_info){(uint64_t)step, ts, (uint64_t)tokens};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("steps", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load(st_reader *r, const char *path)
{
    const char *file = r->db ? sqlite3_db_filename(r->db, "main") : NULL;
    const char *where = path ? path : file && *file ? file : "database";
    for (size_t i = 0; i < sizeof required_tables / sizeof required_tables[0]; i++) {
        int ok = is_table(r->db, required_tables[i]);
        if (ok < 0) {
            int code = sqlite3_errcode(r->db);
            if (code == SQLITE_NOTADB)
                return st_set_error(ST_ECORRUPT, "'%s' is not a SQLite file, so not a stagetrace trace", where);
            return st_set_error(ST_ECORRUPT, "cannot read '%s': %s", where, sqlite3_errmsg(r->db));
        }
        if (!ok) {
            if (strcmp(required_tables[i], "meta") == 0)
                return st_set_error(ST_ECORRUPT, "'%s' is not a stagetrace trace (it has no meta table)", where);
            return st_set_error(ST_ECORRUPT, "'%s' is not a complete stagetrace trace: table '%s' is missing",
                                where, required_tables[i]);
        }
    }
    int rc = load_meta(r);
    if (rc) return rc;
    const char *version = st_reader_meta(r, "schema_version");
    if (!version)
        return st_set_error(ST_ECORRUPT, "'%s' is not a stagetrace trace (meta has no schema_version)", where);
    char *end;
    long v = strtol(version, &end, 10);
    if (*end || v < 1)
        return st_set_error(ST_ECORRUPT, "'%s' has an invalid schema_version '%s'", where, version);
    if (v != ST_SCHEMA_VERSION)
        return st_set_error(ST_EVERSION,
                            "'%s' uses trace schema version %ld; this stagetrace reads version %d "
                            "(use a matching stagetrace release)",
                            where, v, ST_SCHEMA_VERSION);
    if ((rc = load_threads(r)) || (rc = load_stages(r)) || (rc = load_counters(r)) ||
        (rc = load_steps(r)))
        return rc;
    return ST_OK;
}

static void harden(sqlite3 *db)
{
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)0);
}

int st_reader_open(st_reader **out, const char *path)
{
    *out = NULL;
    if (!path || !*path) return st_set_error(ST_EINVAL, "no trace file given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return st_set_error(ST_EIO, "cannot open trace '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return st_set_error(ST_EIO, "cannot open trace '%s': it is a directory", path);
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_set_error(ST_ENOMEM, "out of memory");
    r->owns_db = 1;
    if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        int rc = st_set_error(ST_EIO, "cannot open trace '%s': %s", path,
                              r->db ? sqlite3_errmsg(r->db) : "out of memory");
        st_reader_close(r);
        return rc;
    }
    harden(r->db);
    sqlite3_busy_timeout(r->db, 2000);
    int rc = load(r, path);
    if (rc) {
        st_reader_close(r);
        return rc;
    }
    *out = r;
    return ST_OK;
}

int st_reader_open_db(st_reader **out, sqlite3 *db)
{
    *out = NULL;
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_set_error(ST_ENOMEM, "out of memory");
    r->db = db;
    int rc = load(r, NULL);
    if (rc) {
        st_reader_close(r);
        return rc;
    }
    *out = r;
    return ST_OK;
}

void st_reader_close(st_reader *r)
{
    if (!r) return;
    for (uint32_t i = 0; i < r->n_meta; i++) {
        free(r->meta[i].key);
        free(r->meta[i].value);
    }
    for (uint32_t i = 0; i < r->n_threads; i++) {
        free((char *)r->threads[i].name);
        free((char *)r->threads[i].role);
    }
    for (uint32_t i = 0; i < r->n_stages; i++) free((char *)r->stages[i].name);
    for (uint32_t i = 0; i < r->n_counters; i++) {
        free((char *)r->counters[i].name);
        free((char *)r->counters[i].unit);
    }
    free(r->meta);
    free(r->threads);
    free(r->thread_index);
    free(r->stages);
    free(r->counters);
    free(r->steps);
    if (r->owns_db) sqlite3_close(r->db);
    free(r);
}

sqlite3 *st_reader_db(const st_reader *r) { return r->db; }

const char *st_reader_meta(const st_reader *r, const char *key)
{
    for (uint32_t i = 0; i < r->n_meta; i++)
        if (strcmp(r->meta[i].key, key) == 0) return r->meta[i].value;
    return NULL;
}

uint32_t st_reader_n_threads(const st_reader *r) { return r->n_threads; }
const st_thread_info *st_reader_thread(const st_reader *r, uint32_t i)
{
    return i < r->n_threads ? &r->threads[i] : NULL;
}
const st_thread_info *st_reader_thread_by_id(const st_reader *r, uint32_t id)
{
    if (id >= r->thread_index_len || r->thread_index[id] < 0) return NULL;
    return &r->threads[r->thread_index[id]];
}
uint32_t st_reader_n_stages(const st_reader *r) { return r->n_stages; }
const st_stage_info *st_reader_stage(const st_reader *r, uint32_t id)
{
    return id < r->n_stages ? &r->stages[id] : NULL;
}
uint32_t st_reader_n_counters(const st_reader *r) { return r->n_counters; }
const st_counter_info *st_reader_counter(const st_reader *r, uint32_t id)
{
    return id < r->n_counters ? &r->counters[id] : NULL;
}
uint32_t st_reader_n_steps(const st_reader *r) { return r->n_steps; }
const st_step_info *st_reader_step(const st_reader *r, uint32_t i)
{
    return i < r->n_steps ? &r->steps[i] : NULL;
}

/* ---- chunk iteration shared by the three iterators ---- */

typedef struct chunk_rows {
    st_reader *r;
    sqlite3_stmt *st;
    const char *table;
    int64_t row_id, thread, n_items;
    const void *data;
    int size;
} chunk_rows;

static int chunk_rows_open(chunk_rows *c, st_reader *r, const char *table, const char *count_col,
                           int64_t thread, int64_t t0, int64_t t1)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT id, thread, %s, data FROM main.%s WHERE (?1 < 0 OR thread = ?1) "
             "AND t1_ns >= ?2 AND t0_ns < ?3 ORDER BY thread, id",
             count_col, table);
    memset(c, 0, sizeof *c);
    c->r = r;
    c->table = table;
    if (sqlite3_prepare_v2(r->db, sql, -1, &c->st, NULL) != SQLITE_OK)
        return bad(table, sqlite3_errmsg(r->db));
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
    if (rc != SQLITE_ROW) return bad(c->table, sqlite3_errmsg(c->r->db));
    if (int_col(c->st, 0, &c->row_id) || int_col(c->st, 1, &c->thread) ||
        int_col(c->st, 2, &c->n_items) || c->n_items < 0 || c->n_items > UINT32_MAX ||
        sqlite3_column_type(c->st, 3) != SQLITE_BLOB)
        return bad(c->table, "a chunk row has a missing or wrongly typed column");
    if (c->thread < 0 || !st_reader_thread_by_id(c->r, (uint32_t)c->thread))
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

/* ---- ranges ---- */

struct st_range_iter {
    chunk_rows rows;
    int in_chunk;
    int64_t t0, t1;
    st_event_cursor cur;
};

int st_range_iter_open(st_range_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_range_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->t0 = t0;
    it->t1 = t1;
    int rc = chunk_rows_open(&it->rows, r, "range_chunks", "n_events", thread, t0, t1);
    if (rc) {
        st_range_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_range_iter_next(st_range_iter *it, st_range *out)
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
        st_event ev;
        int rc = st_event_next(&it->cur, &ev);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return chunk_corrupt(&it->rows);
        /* the cursor checks ids only against a non-empty stages table */
        if (ev.stage >= it->rows.r->n_stages) return chunk_corrupt(&it->rows);
        if (!ev.is_end) continue;
        int64_t start = ev.start_ns, end = ev.ts_ns;
        if (start >= it->t1) continue;
        if (end < it->t0 || (end == it->t0 && end != start)) continue;
        out->thread = (uint32_t)it->rows.thread;
        out->stage = ev.stage;
        out->depth = ev.depth;
        out->start_ns = start;
        out->dur_ns = end - start;
        return 1;
    }
}

void st_range_iter_close(st_range_iter *it)
{
    if (!it) return;
    sqlite3_finalize(it->rows.st);
    free(it);
}

/* ---- raw events of one thread ---- */

struct st_event_iter {
    chunk_rows rows;
    int in_chunk;
    st_event_cursor cur;
};

int st_event_iter_open(st_event_iter **out, st_reader *r, uint32_t thread)
{
    st_event_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    int rc = chunk_rows_open(&it->rows, r, "range_chunks", "n_events", thread, INT64_MIN, INT64_MAX);
    if (rc) {
        st_event_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_event_iter_next(st_event_iter *it, st_event *out)
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
    sqlite3_finalize(it->rows.st);
    free(it);
}

/* ---- counter samples ---- */

struct st_sample_iter {
    chunk_rows rows;
    int in_chunk;
    int64_t t0, t1;
    st_counter_cursor cur;
};

int st_sample_iter_open(st_sample_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_sample_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->t0 = t0;
    it->t1 = t1;
    int rc = chunk_rows_open(&it->rows, r, "counter_chunks", "n_samples", thread, t0, t1);
    if (rc) {
        st_sample_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_sample_iter_next(st_sample_iter *it, st_sample_row *out)
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
    sqlite3_finalize(it->rows.st);
    free(it);
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
