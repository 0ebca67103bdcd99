/* reader.c: reads traces written by the writer (see st_reader.h). The file
 * is untrusted: read-only, defensive, trusted_schema off, every table
 * checked to be a real table (not a view) before it is read, every value
 * type-checked, every chunk decoded with bounds checks. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_reader.h"
#include "st_sqlite.h"

int st_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct meta_kv {
    char *key, *value;
} meta_kv;

struct st_reader {
    sqlite3 *db;
    int owns_db;
    int wal_absent; /* st_reader_open: before SQLite opened the file, no PATH-wal beside it (1) or an empty one (2) */
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
    int has_flow_chunks; /* the optional flow_chunks table exists (checked at open) */
    /* A rank set (st_reader_open_set): the ranks' own readers, and for each
     * merged thread its rank's part and its id there. NULL for a file. */
    struct set_part *parts;
    uint32_t n_parts;
    uint32_t *thread_part, *thread_local;
};

typedef struct set_part {
    st_reader *r;
    int rank;
    st_rank_clock clock;
    uint32_t *stage_map;   /* the rank's stage id -> the set's */
    uint32_t *counter_map; /* the rank's counter id -> the set's */
    uint32_t *thread_of;   /* the rank's thread index -> the set's thread id */
} set_part;

/* A time of a part onto rank 0's clock, 0 to INT64_MAX (the analysis
 * needs times that are not negative). */
static int set_map(const set_part *p, int64_t t, int64_t *out)
{
    if (st_rank_clock_map(&p->clock, t, out) != ST_OK || *out < 0)
        return st_set_error(ST_ECORRUPT, "rank %d: time %lld does not map onto rank 0's clock within 0..%lld ns",
                            p->rank, (long long)t, (long long)INT64_MAX);
    return ST_OK;
}

static const char *const required_tables[] = {"meta", "threads", "stages", "counter_names",
                                              "steps", "range_chunks", "counter_chunks"};

static char *dup_text(sqlite3_stmt *st, int col)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    return strdup(s ? (const char *)s : "");
}

/* The text, cut to at most max bytes ending in "..." (at a UTF-8 character
 * boundary) when it is longer. */
static char *dup_bounded(sqlite3_stmt *st, int col, size_t max)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    size_t n = s ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (n <= max) return strdup(s ? s : "");
    size_t keep = max - 3;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--;
    char *out = malloc(keep + 4);
    if (!out) return NULL;
    memcpy(out, s, keep);
    memcpy(out + keep, "...", 4);
    return out;
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

/* ---- validation at open ----
 *
 * Before anything is read, each table of the format is checked to be the
 * plain table docs/trace-format.md defines (a table, not a view or virtual
 * table; its columns stored, none generated), then every row of it in one
 * pass: each column's type, names no longer than ST_NAME_MAX bytes, unique
 * keys, chunks of known threads. The first fault found, in table order and
 * then row order, is the error: the same for every reader of the file,
 * whatever it reads afterwards and in whatever order. */

enum { COL_INT, COL_TEXT, COL_NAME, COL_BLOB };

typedef struct col_spec {
    const char *name;
    int type;
} col_spec;

typedef struct table_spec {
    const char *name;
    const char *key_name; /* how a row's key is named in messages ("id", "key", "step") */
    int key;              /* column whose values are unique; -1 none */
    int thread_ref;       /* column that must name a thread in `threads`; -1 none */
    int n_cols;
    col_spec cols[8];
    int n_open;           /* cols[0..n_open-1] are checked at open; chunk tables' others as each chunk is read */
} table_spec;

static const table_spec meta_spec = {"meta", "key", 0, -1, 2, {{"key", COL_NAME}, {"value", COL_TEXT}}, 2};
static const table_spec small_specs[] = {
    {"threads", "id", 0, -1, 7,
     {{"id", COL_INT}, {"os_tid", COL_INT}, {"name", COL_NAME}, {"role", COL_NAME}, {"device", COL_INT},
      {"rank", COL_INT}, {"dropped", COL_INT}},
     7},
    {"stages", "id", 0, -1, 3, {{"id", COL_INT}, {"name", COL_NAME}, {"kind", COL_NAME}}, 3},
    {"counter_names", "id", 0, -1, 3, {{"id", COL_INT}, {"name", COL_NAME}, {"unit", COL_NAME}}, 3},
    {"steps", "step", 0, -1, 4, {{"step", COL_INT}, {"ts_ns", COL_INT}, {"tokens", COL_INT}, {"thread", COL_INT}}, 4},
};
static const table_spec chunk_specs[] = {
    {"range_chunks", "id", 0, 1, 7,
     {{"id", COL_INT}, {"thread", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}, {"n_events", COL_INT},
      {"n_ranges", COL_INT}, {"data", COL_BLOB}},
     2},
    {"counter_chunks", "id", 0, 1, 6,
     {{"id", COL_INT}, {"thread", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}, {"n_samples", COL_INT},
      {"data", COL_BLOB}},
     2},
};
/* Optional: present only in traces with GPU activity. */
static const table_spec gpu_specs[] = {
    {"gpu_chunks", "id", 0, -1, 7,
     {{"id", COL_INT}, {"device", COL_INT}, {"stream", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT},
      {"n_records", COL_INT}, {"data", COL_BLOB}},
     1},
    {"gpu_strings", "id", 0, -1, 2, {{"id", COL_INT}, {"value", COL_TEXT}}, 2},
};

/* Optional: present only in traces with flows (st_flow_out / st_flow_in).
 * Flow chunks are few (a record per item and handoff), so every column of
 * every row is checked at open; the data as each chunk is read. */
static const table_spec flow_spec = {"flow_chunks", "id", 0, 1, 6,
    {{"id", COL_INT}, {"thread", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}, {"n_records", COL_INT},
     {"data", COL_BLOB}},
    6};

/* Optional, written by the writer when it had to discard records: its shape
 * is checked here; its rows (thread and device may be NULL) by the reader of
 * the table (analyze/common.c). */
static const table_spec lost_spans_spec = {"lost_spans", "id", 0, -1, 7,
    {{"id", COL_INT}, {"source", COL_TEXT}, {"thread", COL_INT}, {"device", COL_INT}, {"t0_ns", COL_INT},
     {"t1_ns", COL_INT}, {"n_records", COL_INT}},
    0};

/* Meta keys whose value is a decimal integer. */
static const char *const meta_int_keys[] = {
    "schema_version", "start_ns",       "end_ns",         "tsc_hz",        "pid",
    "rank",           "world_size",     "profile_interval", "commit_ms",   "ring_records",
    "dropped_events", "unmatched_ends", "rejected_steps", "clock_clamped", "bad_counters",
    "gpu_dropped_records", "failed_commits", "lost_events", "local_rank", "device",
    "clock_sync_ns", "clock_offset_ns", "clock_uncertainty_ns", "clock_sync_close_ns",
    "clock_offset_close_ns", "clock_uncertainty_close_ns", "clock_drift_ppb",
};

/* What the schema holds under this name: 0 nothing, 1 a plain table, 2 a
 * view, 3 a virtual table, 4 something else (an index); -1 error. Names are
 * compared as SQLite compares them, without case. */
static int object_kind(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT type, sql FROM main.sqlite_schema WHERE name = ?1 COLLATE NOCASE", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), kind = 0;
    if (rc == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        const char *sql = (const char *)sqlite3_column_text(st, 1);
        if (!type) kind = 4;
        else if (strcmp(type, "view") == 0) kind = 2;
        else if (strcmp(type, "table") != 0) kind = 4;
        else if (sql && sqlite3_strnicmp(sql, "CREATE VIRTUAL", 14) == 0) kind = 3;
        else kind = 1;
    }
    int err = rc != SQLITE_ROW && rc != SQLITE_DONE;
    sqlite3_finalize(st);
    return err ? -1 : kind;
}

static int is_table(sqlite3 *db, const char *name)
{
    int kind = object_kind(db, name);
    return kind < 0 ? -1 : kind == 1;
}

/* The table is the plain table of the format: a table, each column the
 * format names present, no column generated or hidden. Extra stored
 * columns are allowed (and ignored). */
static int check_shape(sqlite3 *db, const table_spec *t)
{
    int kind = object_kind(db, t->name);
    if (kind < 0) return bad(t->name, sqlite3_errmsg(db));
    if (kind == 2) return bad(t->name, "it is a view, not a plain table");
    if (kind == 3) return bad(t->name, "it is a virtual table, not a plain table");
    if (kind != 1) return bad(t->name, "it is not a plain table");
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT name, hidden FROM pragma_table_xinfo('%s', 'main')", t->name);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return bad(t->name, sqlite3_errmsg(db));
    int rc, found[8] = {0}, err = ST_OK;
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int hidden = sqlite3_column_int(st, 1);
        if (hidden)
            err = st_set_error(ST_ECORRUPT, "trace table '%s': column '%.64s' is %s, not a stored column", t->name,
                               name ? name : "", hidden == 1 ? "hidden" : "generated");
        for (int i = 0; name && i < t->n_cols; i++)
            if (sqlite3_stricmp(name, t->cols[i].name) == 0) found[i] = 1;
    }
    if (!err && rc != SQLITE_DONE) err = bad(t->name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    for (int i = 0; !err && i < t->n_cols; i++)
        if (!found[i])
            err = st_set_error(ST_ECORRUPT, "trace table '%s': it has no column '%s'", t->name, t->cols[i].name);
    return err;
}

static const char *type_name(int sqlite_type)
{
    switch (sqlite_type) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "a blob";
    default: return "null";
    }
}

static int type_of(const char *typeof_text)
{
    if (!typeof_text) return SQLITE_NULL;
    switch (typeof_text[0]) {
    case 'i': return SQLITE_INTEGER;
    case 'r': return SQLITE_FLOAT;
    case 't': return SQLITE_TEXT;
    case 'b': return SQLITE_BLOB;
    default: return SQLITE_NULL;
    }
}

static int is_decimal(const char *s)
{
    if (*s == '-') s++;
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

typedef struct row_key {
    int64_t key, row;
    char *text; /* text keys (meta) */
} row_key;

static int cmp_row_key(const void *pa, const void *pb)
{
    const row_key *a = pa, *b = pb;
    int c = a->text ? strcmp(a->text, b->text) : (a->key > b->key) - (a->key < b->key);
    return c ? c : (a->row > b->row) - (a->row < b->row);
}

static int same_key(const row_key *a, const row_key *b)
{
    return a->text ? strcmp(a->text, b->text) == 0 : a->key == b->key;
}

/* "row 3 (id 7)": the row's place in the table (1-based, stored order) and its key, when it has one. */
static void row_label(char *buf, size_t size, const table_spec *t, sqlite3_stmt *st, int64_t row)
{
    int k = t->n_open; /* the key's value follows the types */
    int type = sqlite3_column_type(st, k);
    if (type == SQLITE_INTEGER && t->cols[t->key].type == COL_INT)
        snprintf(buf, size, "row %lld (%s %lld)", (long long)row, t->key_name, (long long)sqlite3_column_int64(st, k));
    else if (type == SQLITE_TEXT && t->cols[t->key].type != COL_INT && sqlite3_column_bytes(st, k) <= ST_NAME_MAX)
        snprintf(buf, size, "row %lld (%s '%.64s')", (long long)row, t->key_name, (const char *)sqlite3_column_text(st, k));
    else
        snprintf(buf, size, "row %lld", (long long)row);
}

/* One pass over the rows of t: types, name lengths, keys, thread references,
 * meta's integer values. */
static int check_rows(st_reader *r, const table_spec *t)
{
    /* typeof() of every column, then the key, then the columns whose values are looked at. */
    char sql[1024];
    size_t len = (size_t)snprintf(sql, sizeof sql, "SELECT ");
    for (int i = 0; i < t->n_open; i++)
        len += (size_t)snprintf(sql + len, sizeof sql - len, "typeof(\"%s\"), ", t->cols[i].name);
    len += (size_t)snprintf(sql + len, sizeof sql - len, "\"%s\"", t->cols[t->key].name);
    for (int i = 0; i < t->n_open; i++)
        if (t->cols[i].type == COL_NAME || t->cols[i].type == COL_TEXT || i == t->thread_ref)
            len += (size_t)snprintf(sql + len, sizeof sql - len, ", \"%s\"", t->cols[i].name);
        else
            len += (size_t)snprintf(sql + len, sizeof sql - len, ", NULL");
    snprintf(sql + len, sizeof sql - len, " FROM main.\"%s\" NOT INDEXED", t->name);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return bad(t->name, sqlite3_errmsg(r->db));
    row_key *keys = NULL;
    size_t n_keys = 0, cap = 0;
    int rc, err = ST_OK;
    int64_t row = 0;
    char label[128];
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        row++;
        for (int i = 0; !err && i < t->n_open; i++) {
            int want = t->cols[i].type == COL_INT ? SQLITE_INTEGER : t->cols[i].type == COL_BLOB ? SQLITE_BLOB : SQLITE_TEXT;
            int got = type_of((const char *)sqlite3_column_text(st, i));
            if (got != want) {
                row_label(label, sizeof label, t, st, row);
                err = st_set_error(ST_ECORRUPT, "trace table '%s': %s: column '%s' is %s, not %s", t->name, label,
                                   t->cols[i].name, type_name(got), type_name(want));
                break;
            }
            int v = t->n_open + 1 + i;
            int bytes = sqlite3_column_bytes(st, v);
            if ((t->cols[i].type == COL_NAME && bytes > ST_NAME_MAX) ||
                (t->cols[i].type == COL_TEXT && t == &meta_spec && bytes > ST_META_VALUE_MAX)) {
                row_label(label, sizeof label, t, st, row);
                err = st_set_error(ST_ECORRUPT, "trace table '%s': %s: column '%s' is %d bytes long, more than %d",
                                   t->name, label, t->cols[i].name, bytes,
                                   t->cols[i].type == COL_NAME ? ST_NAME_MAX : ST_META_VALUE_MAX);
            }
        }
        if (!err && t->thread_ref >= 0) {
            int64_t thread = sqlite3_column_int64(st, t->n_open + 1 + t->thread_ref);
            if (thread < 0 || thread > UINT32_MAX || !st_reader_thread_by_id(r, (uint32_t)thread))
                err = st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld names unknown thread %lld", t->name,
                                   (long long)sqlite3_column_int64(st, t->n_open), (long long)thread);
        }
        if (!err && t == &meta_spec) {
            const char *key = (const char *)sqlite3_column_text(st, t->n_open + 1);
            const char *value = (const char *)sqlite3_column_text(st, t->n_open + 2);
            for (size_t i = 0; key && value && i < sizeof meta_int_keys / sizeof meta_int_keys[0]; i++)
                if (strcmp(key, meta_int_keys[i]) == 0 && !is_decimal(value)) {
                    row_label(label, sizeof label, t, st, row);
                    err = st_set_error(ST_ECORRUPT, "trace table 'meta': %s: value '%.32s%s' is not an integer",
                                       label, value, strlen(value) > 32 ? "..." : "");
                }
        }
        if (err) break;
        if (n_keys == cap) {
            cap = cap ? cap * 2 : 64;
            row_key *k = realloc(keys, cap * sizeof *k);
            if (!k) {
                err = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            keys = k;
        }
        row_key *k = &keys[n_keys];
        k->row = row;
        k->key = sqlite3_column_int64(st, t->n_open);
        k->text = NULL;
        if (t->cols[t->key].type != COL_INT && !(k->text = strdup((const char *)sqlite3_column_text(st, t->n_open)))) {
            err = st_set_error(ST_ENOMEM, "out of memory");
            break;
        }
        n_keys++;
    }
    if (!err && rc != SQLITE_DONE) err = bad(t->name, sqlite3_errmsg(r->db));
    sqlite3_finalize(st);
    if (!err && n_keys > 1) {
        /* The duplicate met first in row order: the smallest second row of a key. */
        qsort(keys, n_keys, sizeof *keys, cmp_row_key);
        size_t dup = SIZE_MAX;
        for (size_t i = 1; i < n_keys; i++)
            if (same_key(&keys[i], &keys[i - 1]) && (i < 2 || !same_key(&keys[i - 1], &keys[i - 2])) &&
                (dup == SIZE_MAX || keys[i].row < keys[dup].row))
                dup = i;
        if (dup != SIZE_MAX) {
            if (keys[dup].text)
                err = st_set_error(ST_ECORRUPT, "trace table '%s': row %lld: %s '%.64s' is also in row %lld (%ss must be unique)",
                                   t->name, (long long)keys[dup].row, t->key_name, keys[dup].text,
                                   (long long)keys[dup - 1].row, t->key_name);
            else
                err = st_set_error(ST_ECORRUPT, "trace table '%s': row %lld: %s %lld is also in row %lld (%ss must be unique)",
                                   t->name, (long long)keys[dup].row, t->key_name, (long long)keys[dup].key,
                                   (long long)keys[dup - 1].row, t->key_name);
        }
    }
    for (size_t i = 0; i < n_keys; i++) free(keys[i].text);
    free(keys);
    return err;
}

/* Whether the table's id is its rowid (`id INTEGER PRIMARY KEY`), so an
 * integer and unique without being looked at; 1, 0, or -1 on error. */
static int id_is_rowid(sqlite3 *db, const char *table)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) = 1 AND max(name = 'id' COLLATE NOCASE AND upper(type) = 'INTEGER') FROM "
             "pragma_table_info('%s', 'main') WHERE pk > 0) AND (SELECT count(*) = 0 FROM "
             "pragma_index_list('%s', 'main') WHERE origin = 'pk')",
             table, table);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    int rc = sqlite3_step(st), yes = rc == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? yes : -1;
}

/* A chunk table can hold millions of rows: at open only its id and thread
 * are checked, through the (thread, id) index where it has one, and the full
 * pass (check_rows) runs only when something is wrong, to say what and where,
 * or when the id is not the rowid (unique ids must then be looked for). The
 * other columns are checked as each chunk is read. */
static int check_chunk_rows(st_reader *r, const table_spec *t)
{
    int rowid = id_is_rowid(r->db, t->name);
    if (rowid < 0) return bad(t->name, sqlite3_errmsg(r->db));
    if (!rowid) return check_rows(r, t);
    if (t->thread_ref < 0) return ST_OK;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM main.%s WHERE typeof(thread) <> 'integer' OR thread NOT IN (SELECT id FROM main.threads) "
             "LIMIT 1",
             t->name);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return bad(t->name, sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return check_rows(r, t);
    return rc == SQLITE_DONE ? ST_OK : bad(t->name, sqlite3_errmsg(r->db));
}

/* The integer columns of a chunk row that are checked as it is read, from
 * their typeof() in columns first.. of st. */
static int check_typed(sqlite3_stmt *st, int first, const char *table, int64_t id, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        int got = type_of((const char *)sqlite3_column_text(st, first + i));
        if (got != SQLITE_INTEGER)
            return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column '%s' is %s, not an integer", table,
                                (long long)id, names[i], type_name(got));
    }
    return ST_OK;
}

static int check_blob(sqlite3_stmt *st, int col, const char *table, int64_t id)
{
    int got = sqlite3_column_type(st, col);
    if (got == SQLITE_BLOB) return ST_OK;
    return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column 'data' is %s, not a blob", table,
                        (long long)id, type_name(got));
}

/* ---- ranks on one clock (docs/trace-format.md, "Ranks on one clock") ---- */

static const char *const clock_keys[6] = {"clock_sync_ns",       "clock_offset_ns",       "clock_uncertainty_ns",
                                          "clock_sync_close_ns", "clock_offset_close_ns", "clock_uncertainty_close_ns"};

/* A meta value known to be decimal (check_rows) as an int64; -1 when it
 * does not fit. */
static int meta_i64(const char *s, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* The multi-process keys: run_id's alphabet and length; the clock keys,
 * local_rank and device within int64; each measurement whole (its three
 * keys or none), the close one only with the open one, uncertainties >= 0. */
static int check_rank_meta(st_reader *r)
{
    const char *id = st_reader_meta(r, "run_id");
    if (id) {
        size_t n = strlen(id);
        int ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++) {
            char c = id[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        }
        if (!ok) {
            char shown[40];
            size_t k = 0;
            for (; id[k] && k < 32; k++) shown[k] = (unsigned char)id[k] < 0x20 || id[k] == 0x7f ? '?' : id[k];
            shown[k] = '\0';
            return st_set_error(ST_ECORRUPT,
                                "trace table 'meta': key 'run_id' is '%s%s', not 1 to 64 bytes of [A-Za-z0-9._-]",
                                shown, n > 32 ? "..." : "");
        }
    }
    static const char *const wide[] = {"local_rank", "device", "clock_drift_ppb"};
    int64_t v[6];
    int has[6];
    for (int i = 0; i < 9; i++) {
        const char *key = i < 6 ? clock_keys[i] : wide[i - 6];
        const char *s = st_reader_meta(r, key);
        int64_t x = 0;
        if (s && meta_i64(s, &x))
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is '%.32s%s', past 64 bits", key, s,
                                strlen(s) > 32 ? "..." : "");
        if (i < 6) {
            has[i] = s != NULL;
            v[i] = x;
        }
    }
    for (int m = 0; m < 2; m++) {
        int n = has[3 * m] + has[3 * m + 1] + has[3 * m + 2];
        if (n != 0 && n != 3)
            return st_set_error(ST_ECORRUPT, "trace table 'meta': keys '%s', '%s' and '%s' go together (%s of them present)",
                                clock_keys[3 * m], clock_keys[3 * m + 1], clock_keys[3 * m + 2], n == 1 ? "one" : "two");
        if (n && v[3 * m + 2] < 0)
            return st_set_error(ST_ECORRUPT, "trace table 'meta': key '%s' is %lld, a negative uncertainty",
                                clock_keys[3 * m + 2], (long long)v[3 * m + 2]);
    }
    if (has[3] && !has[0])
        return st_set_error(ST_ECORRUPT, "trace table 'meta': the close measurement '%s' without the open one '%s'",
                            clock_keys[4], clock_keys[1]);
    return ST_OK;
}

void st_reader_rank_clock(const st_reader *r, st_rank_clock *out)
{
    memset(out, 0, sizeof *out);
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    int has[6];
    for (int i = 0; i < 6; i++) {
        const char *s = st_reader_meta(r, clock_keys[i]);
        has[i] = s && meta_i64(s, &v[i]) == 0;
    }
    if (has[0] && has[1] && has[2]) {
        out->has_open = 1;
        out->sync_ns = v[0];
        out->offset_ns = v[1];
        out->uncertainty_ns = v[2];
        if (has[3] && has[4] && has[5]) {
            out->has_close = 1;
            out->sync_close_ns = v[3];
            out->offset_close_ns = v[4];
            out->uncertainty_close_ns = v[5];
        }
    }
}

/* |x - y| of two int64s, exactly: at most 2^64 - 1, so it fits in a uint64
 * (the unsigned subtraction wraps to the true distance). */
static uint64_t distance_u64(int64_t x, int64_t y)
{
    return x >= y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
}

/* Exact on every input, with no intermediate out of its type's range:
 * t + offset is within +-2^64; the drift term's two factors |t - sync| and
 * |offset_close - offset| are each at most 2^64 - 1, so their product fits
 * in an unsigned 128-bit integer (< 2^128), and is divided there by the
 * span (1 to 2^64 - 1) before its sign is applied; a quotient past 2^66
 * cannot bring the sum back within 64 bits, so it is refused before it is
 * added. Truncation of the magnitude is truncation toward zero. */
int st_rank_clock_map(const st_rank_clock *c, int64_t t_ns, int64_t *out)
{
    __int128 m = t_ns;
    if (c->has_open) {
        m += c->offset_ns;
        if (c->has_close && c->sync_close_ns > c->sync_ns) {
            uint64_t dt = distance_u64(t_ns, c->sync_ns);
            uint64_t doff = distance_u64(c->offset_close_ns, c->offset_ns);
            uint64_t span = (uint64_t)c->sync_close_ns - (uint64_t)c->sync_ns; /* > 0 */
            unsigned __int128 q = (unsigned __int128)dt * doff / span;
            int negative = (t_ns < c->sync_ns) != (c->offset_close_ns < c->offset_ns);
            if (q > ((unsigned __int128)1 << 66)) m = negative ? -((__int128)1 << 66) : ((__int128)1 << 66);
            else m += negative ? -(__int128)q : (__int128)q;
        }
    }
    if (m < INT64_MIN || m > INT64_MAX)
        return st_set_error(ST_ECORRUPT, "time %lld does not map onto rank 0's clock within 64 bits",
                            (long long)t_ns);
    *out = (int64_t)m;
    return ST_OK;
}

int64_t st_rank_clock_uncertainty(const st_rank_clock *c)
{
    if (!c->has_open) return 0;
    if (c->has_close && c->uncertainty_close_ns > c->uncertainty_ns) return c->uncertainty_close_ns;
    return c->uncertainty_ns;
}

/* Whether a file without stagetrace tables is plausibly a trace copied
 * without its write-ahead log (no PATH-wal beside it when it was opened,
 * or an empty one, which a reader's earlier open may have left:
 * r->wal_absent): a SQLite database in WAL mode, header bytes 18
 * and 19 (the file format's write and read versions) both 2. While a
 * program records, its commits sit in the -wal file, so the main file alone
 * can be an empty database. */
static int wal_mode(const char *path)
{
    unsigned char h[20];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, h, sizeof h);
    close(fd);
    return got == (ssize_t)sizeof h && memcmp(h, "SQLite format 3", 16) == 0 && h[18] == 2 && h[19] == 2;
}

static int load(st_reader *r, const char *path)
{
    const char *file = r->db ? sqlite3_db_filename(r->db, "main") : NULL;
    const char *where = path ? path : file && *file ? file : "database";
    for (size_t i = 0; i < sizeof required_tables / sizeof required_tables[0]; i++) {
        int kind = object_kind(r->db, required_tables[i]);
        if (kind < 0) {
            int code = sqlite3_errcode(r->db);
            if (code == SQLITE_NOTADB)
                return st_set_error(ST_ECORRUPT, "'%s' is not a SQLite file, so not a stagetrace trace", where);
            return st_set_error(ST_ECORRUPT, "cannot read '%s': %s", where, sqlite3_errmsg(r->db));
        }
        if (!kind) {
            if (strcmp(required_tables[i], "meta") == 0 && path && r->wal_absent && wal_mode(path))
                return st_set_error(ST_ECORRUPT,
                                    "'%s' has no stagetrace tables; its write-ahead log '%s-wal' is %s (was "
                                    "the file copied without it?)",
                                    where, where, r->wal_absent == 2 ? "empty" : "missing");
            if (strcmp(required_tables[i], "meta") == 0)
                return st_set_error(ST_ECORRUPT, "'%s' is not a stagetrace trace (it has no meta table)", where);
            return st_set_error(ST_ECORRUPT, "'%s' is not a complete stagetrace trace: table '%s' is missing",
                                where, required_tables[i]);
        }
    }
    int rc;
    if ((rc = check_shape(r->db, &meta_spec)) || (rc = check_rows(r, &meta_spec)) || (rc = load_meta(r)) ||
        (rc = check_rank_meta(r)))
        return rc;
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
    for (size_t i = 0; i < sizeof small_specs / sizeof small_specs[0]; i++)
        if ((rc = check_shape(r->db, &small_specs[i])) || (rc = check_rows(r, &small_specs[i]))) return rc;
    if ((rc = load_threads(r)) || (rc = load_stages(r)) || (rc = load_counters(r)) || (rc = load_steps(r)))
        return rc;
    for (size_t i = 0; i < sizeof chunk_specs / sizeof chunk_specs[0]; i++)
        if ((rc = check_shape(r->db, &chunk_specs[i])) || (rc = check_chunk_rows(r, &chunk_specs[i]))) return rc;
    for (size_t i = 0; i < sizeof gpu_specs / sizeof gpu_specs[0]; i++) {
        const table_spec *t = &gpu_specs[i];
        int kind = object_kind(r->db, t->name);
        if (kind < 0) return bad(t->name, sqlite3_errmsg(r->db));
        if (kind && ((rc = check_shape(r->db, t)) || (rc = t->n_open < t->n_cols ? check_chunk_rows(r, t) : check_rows(r, t))))
            return rc;
    }
    int kind = object_kind(r->db, flow_spec.name);
    if (kind < 0) return bad(flow_spec.name, sqlite3_errmsg(r->db));
    if (kind && ((rc = check_shape(r->db, &flow_spec)) || (rc = check_rows(r, &flow_spec)))) return rc;
    r->has_flow_chunks = kind != 0;
    kind = object_kind(r->db, lost_spans_spec.name);
    if (kind < 0) return bad(lost_spans_spec.name, sqlite3_errmsg(r->db));
    if (kind && (rc = check_shape(r->db, &lost_spans_spec))) return rc;
    return ST_OK;
}

static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a directory";
    return "not a plain file";
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
    /* SQLite would block opening a FIFO, and read a device forever. */
    if (!S_ISREG(sb.st_mode))
        return st_set_error(ST_EIO, "cannot open trace '%s': it is not a regular file (%s)", path, file_kind(sb.st_mode));
    /* The same for the side files SQLite opens beside it. */
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    int wal_absent = 0; /* looked at before SQLite opens the file: it may make an empty one, and leave it */
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        size_t n = strlen(path);
        char *side = malloc(n + 9);
        if (!side) return st_set_error(ST_ENOMEM, "out of memory");
        memcpy(side, path, n);
        strcpy(side + n, sides[i]);
        struct stat ss;
        int found = stat(side, &ss) == 0;
        int odd = found && !S_ISREG(ss.st_mode);
        if (i == 0) wal_absent = found ? (S_ISREG(ss.st_mode) && ss.st_size == 0 ? 2 : 0) : errno == ENOENT;
        free(side);
        if (odd)
            return st_set_error(ST_EIO, "cannot open trace '%s': its side file '%s%s' is not a regular file (%s)", path,
                                path, sides[i], file_kind(ss.st_mode));
    }
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_set_error(ST_ENOMEM, "out of memory");
    r->owns_db = 1;
    r->wal_absent = wal_absent;
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

static void set_free(st_reader *r);

void st_reader_close(st_reader *r)
{
    if (!r) return;
    if (r->parts) set_free(r);
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
    if (r->parts) return st_reader_meta(r->parts[0].r, key);
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

/* ---- chunk headers ---- */

/* The first chunk (by id) of table whose columns are not of the format's
 * types: one message as a read of it would give. */
static int describe_mistyped(st_reader *r, const char *table, const char *count_col, int64_t id)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT typeof(thread), typeof(t0_ns), typeof(t1_ns), typeof(%s), %s, data FROM main.%s WHERE id = ?1",
             count_col, strcmp(table, "range_chunks") == 0 ? "typeof(n_ranges)" : "'integer'", table);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return bad(table, sqlite3_errmsg(r->db));
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), err;
    const char *const names[] = {"thread", "t0_ns", "t1_ns", count_col, "n_ranges"};
    if (rc != SQLITE_ROW) err = bad(table, sqlite3_errmsg(r->db));
    else if (!(err = check_typed(st, 0, table, id, names, 5))) err = check_blob(st, 5, table, id);
    sqlite3_finalize(st);
    return err ? err : bad(table, "a chunk has a wrongly typed column");
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
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return bad(table, sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int err = bad(table, sqlite3_errmsg(r->db));
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

static int set_chunk_totals(st_reader *r, st_chunk_totals *out);

int st_reader_chunk_totals(st_reader *r, st_chunk_totals *out)
{
    memset(out, 0, sizeof *out);
    if (r->parts) return set_chunk_totals(r, out);
    int64_t unused0, unused1;
    int unused;
    int rc = chunk_headers(r, "range_chunks", "n_events", &out->first_ns, &out->last_ns, &out->has_ranges,
                           &out->n_ranges);
    if (!rc) rc = chunk_headers(r, "counter_chunks", "n_samples", &unused0, &unused1, &unused, &out->n_samples);
    return rc;
}

/* ---- chunk iteration shared by the three iterators ---- */

typedef struct chunk_rows {
    st_reader *r;
    sqlite3_stmt *st;
    const char *table, *count_col;
    int64_t row_id, thread, n_items;
    const void *data;
    int size;
} chunk_rows;

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
    if (int_col(c->st, 0, &c->row_id)) return bad(c->table, "a chunk's id is not an integer");
    const char *const names[] = {"thread", "t0_ns", "t1_ns", c->count_col};
    int trc = check_typed(c->st, 4, c->table, c->row_id, names, 4);
    if (!trc) trc = check_blob(c->st, 3, c->table, c->row_id);
    if (trc) return trc;
    c->thread = sqlite3_column_int64(c->st, 1);
    c->n_items = sqlite3_column_int64(c->st, 2);
    if (c->n_items < 0 || c->n_items > UINT32_MAX)
        return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column '%s' is out of range", c->table,
                            (long long)c->row_id, c->count_col);
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

/* ---- a rank set's walk over its threads ----
 * A rank set's ranges, counter samples and flows are read thread by thread,
 * in the set's thread order (or only the thread asked for), each with an
 * iterator of the same kind opened on the thread's rank (set_walk_next, in
 * the rank-set part below); the caller maps the rows' times. */
typedef struct set_walk {
    st_reader *set;      /* NULL: the iterator reads one file */
    void *sub;           /* the current thread's iterator, on its rank's reader */
    int64_t want_thread; /* < 0: every thread */
    uint32_t next_thread, cur_thread;
} set_walk;

static void set_walk_init(set_walk *w, st_reader *set, int64_t thread)
{
    w->set = set;
    w->want_thread = thread;
    w->next_thread = thread < 0 ? 0 : thread >= (int64_t)set->n_threads ? set->n_threads : (uint32_t)thread;
}

/* ---- ranges ---- */

#define RANGE_BATCH 512

struct st_range_iter {
    struct st_range_iter_head head; /* first: st_range_iter_next reads it */
    chunk_rows rows;
    int in_chunk;
    int pending;                    /* 0 or the error met after the batch */
    int64_t t0, t1;
    st_event_cursor cur;
    set_walk walk; /* a rank set's */
    st_range batch[RANGE_BATCH];
    uint32_t batch_event[RANGE_BATCH]; /* each range's end event: its index in the chunk */
};

int st_range_iter_open(st_range_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_range_iter *it = malloc(sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    memset(it, 0, offsetof(st_range_iter, batch));
    it->head.next = it->head.end = it->batch;
    it->t0 = t0;
    it->t1 = t1;
    if (r->parts) {
        set_walk_init(&it->walk, r, thread);
        *out = it;
        return ST_OK;
    }
    int rc = chunk_rows_open(&it->rows, r, "range_chunks", "n_events", thread, t0, t1);
    if (rc) {
        st_range_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
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

static int set_range_fill(st_range_iter *it, st_range *out);

int st_range_iter_fill(st_range_iter *it, st_range *out)
{
    if (it->walk.set) return set_range_fill(it, out);
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
    st_range_iter_close(it->walk.sub);
    sqlite3_finalize(it->rows.st);
    free(it);
}

/* The ranges a thread left open: its last chunk decoded to the end. The
 * chunk's header repeats every range open at its start, so this one chunk
 * says what was open after the thread's last event. */
int st_reader_unended(st_reader *r, uint32_t thread, st_open_range *stack)
{
    if (r->parts) {
        if (thread >= r->n_threads) return 0;
        const set_part *p = &r->parts[r->thread_part[thread]];
        int n = st_reader_unended(p->r, r->thread_local[thread], stack);
        for (int i = 0; i < n; i++) {
            stack[i].stage = p->stage_map[stack[i].stage];
            int rc = set_map(p, stack[i].start_ns, &stack[i].start_ns);
            if (rc) return rc;
        }
        return n;
    }
    chunk_rows c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.table = "range_chunks";
    c.count_col = "n_events";
    if (sqlite3_prepare_v2(r->db,
                           "SELECT id, thread, n_events, data, typeof(thread), typeof(t0_ns), typeof(t1_ns), "
                           "typeof(n_events) FROM main.range_chunks WHERE thread = ?1 ORDER BY id DESC LIMIT 1",
                           -1, &c.st, NULL) != SQLITE_OK)
        return bad(c.table, sqlite3_errmsg(r->db));
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

struct st_event_iter {
    chunk_rows rows;
    int in_chunk;
    st_event_cursor cur;
    st_event_iter *sub; /* a rank set's: on the thread's rank */
    const set_part *part;
};

int st_event_iter_open(st_event_iter **out, st_reader *r, uint32_t thread)
{
    st_event_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    if (r->parts) {
        if (thread < r->n_threads) {
            it->part = &r->parts[r->thread_part[thread]];
            int rc = st_event_iter_open(&it->sub, it->part->r, r->thread_local[thread]);
            if (rc) {
                free(it);
                return rc;
            }
        }
        *out = it;
        return ST_OK;
    }
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
    if (it->part || !it->rows.st) {
        if (!it->sub) return 0;
        int rc = st_event_iter_next(it->sub, out);
        if (rc != 1) return rc;
        out->stage = it->part->stage_map[out->stage];
        if ((rc = set_map(it->part, out->ts_ns, &out->ts_ns))) return rc;
        if (out->is_end && (rc = set_map(it->part, out->start_ns, &out->start_ns))) return rc;
        return 1;
    }
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
    st_event_iter_close(it->sub);
    sqlite3_finalize(it->rows.st);
    free(it);
}

/* ---- counter samples ---- */

struct st_sample_iter {
    chunk_rows rows;
    int in_chunk;
    int64_t t0, t1;
    st_counter_cursor cur;
    set_walk walk; /* a rank set's */
};

int st_sample_iter_open(st_sample_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    st_sample_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->t0 = t0;
    it->t1 = t1;
    if (r->parts) {
        set_walk_init(&it->walk, r, thread);
        *out = it;
        return ST_OK;
    }
    int rc = chunk_rows_open(&it->rows, r, "counter_chunks", "n_samples", thread, t0, t1);
    if (rc) {
        st_sample_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

static int set_sample_next(st_sample_iter *it, st_sample_row *out);

int st_sample_iter_next(st_sample_iter *it, st_sample_row *out)
{
    if (it->walk.set) return set_sample_next(it, out);
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
    st_sample_iter_close(it->walk.sub);
    sqlite3_finalize(it->rows.st);
    free(it);
}

/* ---- flows ---- */

struct st_flow_iter {
    chunk_rows rows;
    int in_chunk, empty;
    int64_t t0, t1;
    st_flow_cursor cur;
    set_walk walk; /* a rank set's (set_flow_next) */
};

static int set_has_flows(st_reader *r);
static int set_flow_next(st_flow_iter *it, st_flow_row *out);

int st_reader_has_flows(st_reader *r)
{
    if (r->parts) return set_has_flows(r);
    if (!r->has_flow_chunks) return 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM main.flow_chunks LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        return bad("flow_chunks", sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return bad("flow_chunks", sqlite3_errmsg(r->db));
    return rc == SQLITE_ROW;
}

int st_flow_iter_open(st_flow_iter **out, st_reader *r, int64_t thread, int64_t t0, int64_t t1)
{
    *out = NULL;
    st_flow_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->t0 = t0;
    it->t1 = t1;
    if (r->parts) {
        set_walk_init(&it->walk, r, thread);
        *out = it;
        return ST_OK;
    }
    if (!r->has_flow_chunks) {
        it->empty = 1;
        *out = it;
        return ST_OK;
    }
    int rc = chunk_rows_open(&it->rows, r, "flow_chunks", "n_records", thread, t0, t1);
    if (rc) {
        st_flow_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_flow_iter_next(st_flow_iter *it, st_flow_row *out)
{
    if (it->walk.set) return set_flow_next(it, out);
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
    st_flow_iter_close(it->walk.sub);
    sqlite3_finalize(it->rows.st);
    free(it);
}

void st_flow_iter_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index)
{
    if (it->walk.set) { /* the row's place in its rank's file */
        if (it->walk.sub) st_flow_iter_pos(it->walk.sub, chunk_id, index);
        else *chunk_id = 0, *index = 0;
        return;
    }
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

/* ---- GPU activity ---- */

const char *st_gpu_kind_name(uint32_t kind)
{
    static const char *const n[] = {"?", "kernel", "memcpy", "memset", "sync", "api"};
    return kind <= ST_GPU_KIND_MAX ? n[kind] : "?";
}

const char *st_gpu_copy_name(uint32_t copy)
{
    static const char *const n[] = {"other", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"};
    return copy <= ST_COPY_P2P ? n[copy] : "other";
}

const char *st_gpu_mem_name(uint32_t mem)
{
    static const char *const n[] = {"unknown", "pageable", "pinned", "device", "managed", "other"};
    return mem <= ST_MEM_OTHER ? n[mem] : "other";
}

static int set_gpu_has(st_reader *r);

int st_reader_has_gpu(st_reader *r)
{
    if (r->parts) return set_gpu_has(r);
    int ok = is_table(r->db, "gpu_chunks");
    if (ok <= 0) return ok < 0 ? bad("gpu_chunks", sqlite3_errmsg(r->db)) : 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM main.gpu_chunks WHERE device >= 0 LIMIT 1", -1, &st, NULL) !=
        SQLITE_OK)
        return bad("gpu_chunks", sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return bad("gpu_chunks", sqlite3_errmsg(r->db));
    return rc == SQLITE_ROW;
}

typedef struct api_slot {
    uint32_t correlation, used;
    int64_t os_tid, start_ns;
} api_slot;

typedef struct thread_ranges {
    int loaded;
    uint32_t n;
    int64_t *start, *end;
    uint32_t *stage;
    int32_t *parent;
} thread_ranges;

struct st_gpu_iter {
    st_reader *r;
    sqlite3_stmt *st;
    int64_t t0, t1;
    int64_t row_id, device, stream, n_items;
    int in_chunk;
    st_gpu_cursor cur;
    char **names;
    uint32_t n_names;
    api_slot *api;
    size_t api_cap, api_len;
    thread_ranges *tr; /* [thread index] */
    int api_mode;      /* st_gpu_api_iter_open: the API calls only */
    /* a rank set's (set_gpu_*): each part's iterator (kept open until close,
     * so that names stay valid), the part being read, the device asked */
    st_gpu_iter **sub;
    uint32_t part;
    int64_t want_device;
};

/* Columns of a gpu_chunks row checked as it is read (the query returns
 * badly typed rows whatever the window, so that they are never passed over). */
#define GPU_TYPED "typeof(device), typeof(stream), typeof(t0_ns), typeof(t1_ns)"
#define GPU_MISTYPED \
    "typeof(device) <> 'integer' OR typeof(stream) <> 'integer' OR typeof(t0_ns) <> 'integer' OR " \
    "typeof(t1_ns) <> 'integer'"
static const char *const gpu_typed_names[] = {"device", "stream", "t0_ns", "t1_ns"};

static int gpu_corrupt(st_gpu_iter *it)
{
    return st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld (device %lld) is corrupt or truncated",
                        (long long)it->row_id, (long long)it->device);
}

static int gpu_load_names(st_gpu_iter *it)
{
    int ok = is_table(it->r->db, "gpu_strings");
    if (ok <= 0) return ok < 0 ? bad("gpu_strings", sqlite3_errmsg(it->r->db)) : ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(it->r->db, "SELECT id, value FROM main.gpu_strings", -1, &st, NULL) != SQLITE_OK)
        return bad("gpu_strings", sqlite3_errmsg(it->r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (int_col(st, 0, &id) || id < 0 || id >= 1 << 24) {
            sqlite3_finalize(st);
            return bad("gpu_strings", "a row has a missing or out-of-range id");
        }
        if ((uint32_t)id >= it->n_names) {
            char **n = realloc(it->names, ((size_t)id + 1) * sizeof *n);
            if (!n) {
                sqlite3_finalize(st);
                return st_set_error(ST_ENOMEM, "out of memory");
            }
            for (uint32_t i = it->n_names; i <= (uint32_t)id; i++) n[i] = NULL;
            it->names = n;
            it->n_names = (uint32_t)id + 1;
        }
        free(it->names[id]);
        it->names[id] = dup_bounded(st, 1, ST_GPU_NAME_MAX);
        if (!it->names[id]) {
            sqlite3_finalize(st);
            return st_set_error(ST_ENOMEM, "out of memory");
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("gpu_strings", sqlite3_errmsg(it->r->db));
    return ST_OK;
}

/* The launch join: correlation id -> the earliest API call with it. A slot
 * is made for each id a device record of the window carries (start_ns
 * INT64_MAX until its call is found), so that only those calls are kept:
 * most calls launch nothing (queries, polls, attribute reads). Open
 * addressing, at most half full; id 0, which no launch has, is never put. */
static api_slot *api_find(const st_gpu_iter *it, uint32_t corr)
{
    if (!it->api_cap) return NULL;
    size_t h = (corr * 2654435761u) & (it->api_cap - 1);
    while (it->api[h].used) {
        if (it->api[h].correlation == corr) return &it->api[h];
        h = (h + 1) & (it->api_cap - 1);
    }
    return NULL;
}

static int api_want(st_gpu_iter *it, uint32_t corr)
{
    if (!corr || api_find(it, corr)) return ST_OK;
    if ((it->api_len + 1) * 2 > it->api_cap) {
        size_t cap = it->api_cap ? it->api_cap * 2 : 1024;
        api_slot *t = calloc(cap, sizeof *t);
        if (!t) return st_set_error(ST_ENOMEM, "out of memory");
        for (size_t i = 0; i < it->api_cap; i++) {
            if (!it->api[i].used) continue;
            size_t h = (it->api[i].correlation * 2654435761u) & (cap - 1);
            while (t[h].used) h = (h + 1) & (cap - 1);
            t[h] = it->api[i];
        }
        free(it->api);
        it->api = t;
        it->api_cap = cap;
    }
    size_t h = (corr * 2654435761u) & (it->api_cap - 1);
    while (it->api[h].used) h = (h + 1) & (it->api_cap - 1);
    it->api[h] = (api_slot){corr, 1, 0, INT64_MAX};
    it->api_len++;
    return ST_OK;
}

/* Calls fn for every record of the gpu_chunks rows that sql selects (id,
 * n_records, data; ?1.. bound to args), each row checked and each chunk
 * decoded with bounds checks. device: for the messages. fn returns ST_OK
 * or an error, which stops the scan. */
typedef int (*gpu_rec_fn)(const st_gpu_rec *rec, void *arg);
static int gpu_scan(st_gpu_iter *it, const char *sql, const int64_t *args, int n_args, int64_t device, gpu_rec_fn fn,
                    void *arg)
{
    sqlite3 *db = it->r->db;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return bad("gpu_chunks", sqlite3_errmsg(db));
    for (int i = 0; i < n_args; i++) sqlite3_bind_int64(st, i + 1, args[i]);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, n = 0;
        if (int_col(st, 0, &id)) {
            sqlite3_finalize(st);
            return bad("gpu_chunks", "a chunk's id is not an integer");
        }
        int trc = check_typed(st, 3, "gpu_chunks", id, gpu_typed_names, 4);
        if (!trc && int_col(st, 1, &n))
            trc = st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld: column 'n_records' is %s, not an integer",
                               (long long)id, type_name(sqlite3_column_type(st, 1)));
        if (!trc && (n < 0 || n > UINT32_MAX))
            trc = st_set_error(ST_ECORRUPT, "trace table 'gpu_chunks': chunk %lld: column 'n_records' is out of range",
                               (long long)id);
        if (!trc) trc = check_blob(st, 2, "gpu_chunks", id);
        if (trc) {
            sqlite3_finalize(st);
            return trc;
        }
        st_gpu_cursor c;
        it->row_id = id;
        it->device = device;
        if (st_gpu_cursor_open(&c, sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2), (uint32_t)n)) {
            sqlite3_finalize(st);
            return gpu_corrupt(it);
        }
        st_gpu_rec rec;
        int k;
        while ((k = st_gpu_next(&c, &rec)) == 1)
            if ((k = fn(&rec, arg)) != ST_OK) break;
        if (k < 0) {
            sqlite3_finalize(st);
            return k == ST_ECORRUPT ? gpu_corrupt(it) : k;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return bad("gpu_chunks", sqlite3_errmsg(db));
    return ST_OK;
}

static int want_record(const st_gpu_rec *rec, void *arg)
{
    st_gpu_iter *it = arg;
    if (rec->kind == ST_GPU_API || rec->start_ns >= it->t1 || rec->start_ns + rec->dur_ns < it->t0) return ST_OK;
    return api_want(it, rec->correlation);
}

typedef struct api_ctx {
    st_gpu_iter *it;
    int64_t from;
} api_ctx;

static int api_record(const st_gpu_rec *rec, void *arg)
{
    api_ctx *a = arg;
    if (rec->kind != ST_GPU_API || rec->start_ns < a->from || rec->start_ns >= a->it->t1) return ST_OK;
    api_slot *s = api_find(a->it, rec->correlation);
    if (s && rec->start_ns < s->start_ns) { /* a runtime call and the driver call it makes share the id */
        s->os_tid = rec->os_tid;
        s->start_ns = rec->start_ns;
    }
    return ST_OK;
}

/* The join for the window's device records (of `device`, < 0 all): their
 * correlation ids, then the calls with those ids that start from
 * ST_GPU_LAUNCH_LOOKBACK_NS before the window to its end, so that memory
 * follows the window's records, not the trace. */
static int gpu_load_api(st_gpu_iter *it, int64_t device)
{
    int64_t want_args[3] = {device, it->t0, it->t1};
    int rc = gpu_scan(it,
                      "SELECT id, n_records, data, " GPU_TYPED " FROM main.gpu_chunks WHERE " GPU_MISTYPED
                      " OR (device >= 0 AND (?1 < 0 OR device = ?1) AND t1_ns >= ?2 AND t0_ns < ?3)",
                      want_args, 3, device, want_record, it);
    if (rc || !it->api_len) return rc;
    api_ctx a = {it, it->t0 < INT64_MIN + ST_GPU_LAUNCH_LOOKBACK_NS ? INT64_MIN : it->t0 - ST_GPU_LAUNCH_LOOKBACK_NS};
    int64_t api_args[2] = {a.from, it->t1};
    return gpu_scan(it,
                    "SELECT id, n_records, data, " GPU_TYPED " FROM main.gpu_chunks WHERE " GPU_MISTYPED
                    " OR (device < 0 AND t1_ns >= ?1 AND t0_ns < ?2)",
                    api_args, 2, -1, api_record, &a);
}

typedef struct range_ix {
    int64_t start, end;
    uint32_t stage, depth;
} range_ix;

static int cmp_range_ix(const void *a, const void *b)
{
    const range_ix *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static int gpu_load_ranges(st_gpu_iter *it, uint32_t index)
{
    thread_ranges *tr = &it->tr[index];
    tr->loaded = 1;
    st_range_iter *ri;
    int rc = st_range_iter_open(&ri, it->r, it->r->threads[index].id, INT64_MIN, INT64_MAX);
    if (rc) return rc;
    range_ix *v = NULL;
    size_t n = 0, cap = 0;
    st_range rg;
    while ((rc = st_range_iter_next(ri, &rg)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            range_ix *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = st_set_error(ST_ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        v[n++] = (range_ix){rg.start_ns, rg.start_ns + rg.dur_ns, rg.stage, rg.depth};
    }
    st_range_iter_close(ri);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n) qsort(v, n, sizeof *v, cmp_range_ix);
    tr->n = (uint32_t)n;
    tr->start = malloc((n + 1) * sizeof *tr->start);
    tr->end = malloc((n + 1) * sizeof *tr->end);
    tr->stage = malloc((n + 1) * sizeof *tr->stage);
    tr->parent = malloc((n + 1) * sizeof *tr->parent);
    if (!tr->start || !tr->end || !tr->stage || !tr->parent) {
        free(v);
        tr->n = 0;
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    int32_t last_at[ST_MAX_DEPTH];
    for (int d = 0; d < ST_MAX_DEPTH; d++) last_at[d] = -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t d = v[i].depth < ST_MAX_DEPTH ? v[i].depth : ST_MAX_DEPTH - 1;
        tr->start[i] = v[i].start;
        tr->end[i] = v[i].end;
        tr->stage[i] = v[i].stage;
        tr->parent[i] = d ? last_at[d - 1] : -1;
        last_at[d] = (int32_t)i;
    }
    free(v);
    return ST_OK;
}

/* The innermost range of the thread open at ts (start <= ts < end). */
static int64_t gpu_stage_at(const thread_ranges *tr, int64_t ts)
{
    uint32_t lo = 0, hi = tr->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tr->start[mid] <= ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    int32_t j = (int32_t)lo - 1;
    for (int guard = 0; j >= 0 && guard <= ST_MAX_DEPTH; guard++, j = tr->parent[j])
        if (tr->start[j] <= ts && ts < tr->end[j]) return tr->stage[j];
    return -1;
}

static int set_gpu_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1, int api_mode);
static int set_gpu_next(st_gpu_iter *it, st_gpu_row *out);

static int gpu_iter_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1, int api_mode)
{
    *out = NULL;
    if (r->parts) return set_gpu_open(out, r, device, t0, t1, api_mode);
    st_gpu_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->r = r;
    it->t0 = t0;
    it->t1 = t1;
    it->api_mode = api_mode;
    int ok = is_table(r->db, "gpu_chunks");
    int rc = ok < 0 ? bad("gpu_chunks", sqlite3_errmsg(r->db)) : ST_OK;
    if (!rc && ok) {
        it->tr = calloc(r->n_threads ? r->n_threads : 1, sizeof *it->tr);
        if (!it->tr) rc = st_set_error(ST_ENOMEM, "out of memory");
        if (!rc) rc = gpu_load_names(it);
        if (!rc && !api_mode) rc = gpu_load_api(it, device);
        if (!rc && sqlite3_prepare_v2(r->db,
                                      api_mode ? "SELECT id, device, stream, n_records, data, " GPU_TYPED
                                                 " FROM main.gpu_chunks WHERE " GPU_MISTYPED " OR (device < 0 "
                                                 "AND ?1 = ?1 AND t1_ns >= ?2 AND t0_ns < ?3) ORDER BY stream, id"
                                               : "SELECT id, device, stream, n_records, data, " GPU_TYPED
                                                 " FROM main.gpu_chunks WHERE " GPU_MISTYPED " OR (device >= 0 "
                                                 "AND (?1 < 0 OR device = ?1) AND t1_ns >= ?2 AND t0_ns < ?3) "
                                                 "ORDER BY device, stream, id",
                                      -1, &it->st, NULL) != SQLITE_OK)
            rc = bad("gpu_chunks", sqlite3_errmsg(r->db));
        if (!rc) {
            sqlite3_bind_int64(it->st, 1, device);
            sqlite3_bind_int64(it->st, 2, t0);
            sqlite3_bind_int64(it->st, 3, t1);
        }
    }
    if (rc) {
        st_gpu_iter_close(it);
        return rc;
    }
    *out = it;
    return ST_OK;
}

int st_gpu_iter_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1)
{
    return gpu_iter_open(out, r, device, t0, t1, 0);
}

int st_gpu_api_iter_open(st_gpu_iter **out, st_reader *r, int64_t t0, int64_t t1)
{
    return gpu_iter_open(out, r, -1, t0, t1, 1);
}

/* The traced thread with this OS thread id, and its innermost stage at ts. */
static int gpu_thread_at(st_gpu_iter *it, int64_t os_tid, int64_t ts, st_gpu_row *out)
{
    for (uint32_t i = 0; i < it->r->n_threads; i++) {
        if (it->r->threads[i].os_tid != os_tid) continue;
        out->thread = it->r->threads[i].id;
        if (!it->tr[i].loaded) {
            int lrc = gpu_load_ranges(it, i);
            if (lrc) return lrc;
        }
        out->stage = gpu_stage_at(&it->tr[i], ts);
        break;
    }
    return ST_OK;
}

int st_gpu_iter_next(st_gpu_iter *it, st_gpu_row *out)
{
    if (it->sub) return set_gpu_next(it, out);
    if (!it->st) return 0;
    for (;;) {
        if (!it->in_chunk) {
            int rc = sqlite3_step(it->st);
            if (rc == SQLITE_DONE) return 0;
            if (rc != SQLITE_ROW) return bad("gpu_chunks", sqlite3_errmsg(it->r->db));
            if (int_col(it->st, 0, &it->row_id)) return bad("gpu_chunks", "a chunk's id is not an integer");
            int trc = check_typed(it->st, 5, "gpu_chunks", it->row_id, gpu_typed_names, 4);
            if (!trc && int_col(it->st, 3, &it->n_items))
                trc = st_set_error(ST_ECORRUPT,
                                   "trace table 'gpu_chunks': chunk %lld: column 'n_records' is %s, not an integer",
                                   (long long)it->row_id, type_name(sqlite3_column_type(it->st, 3)));
            if (!trc) trc = check_blob(it->st, 4, "gpu_chunks", it->row_id);
            if (trc) return trc;
            it->device = sqlite3_column_int64(it->st, 1);
            it->stream = sqlite3_column_int64(it->st, 2);
            if (it->n_items < 0 || it->n_items > UINT32_MAX || it->device > INT32_MAX || it->stream < 0 ||
                it->stream > UINT32_MAX)
                return bad("gpu_chunks", "a chunk row has an out-of-range column");
            if (st_gpu_cursor_open(&it->cur, sqlite3_column_blob(it->st, 4),
                                   (size_t)sqlite3_column_bytes(it->st, 4), (uint32_t)it->n_items))
                return gpu_corrupt(it);
            it->in_chunk = 1;
        }
        st_gpu_rec rec;
        int rc = st_gpu_next(&it->cur, &rec);
        if (rc == 0) {
            it->in_chunk = 0;
            continue;
        }
        if (rc < 0) return gpu_corrupt(it);
        if ((rec.kind == ST_GPU_API) != it->api_mode) continue;
        int64_t end = rec.start_ns + rec.dur_ns;
        if (rec.start_ns >= it->t1) continue;
        if (end < it->t0 || (end == it->t0 && rec.dur_ns != 0)) continue;
        memset(out, 0, sizeof *out);
        out->device = (int32_t)it->device;
        out->stream = (uint32_t)it->stream;
        out->rec = rec;
        out->name = rec.name && rec.name - 1 < it->n_names ? it->names[rec.name - 1] : NULL;
        out->thread = -1;
        out->stage = -1;
        out->launch_ns = INT64_MIN;
        if (it->api_mode) {
            out->launch_ns = rec.start_ns;
            int trc = gpu_thread_at(it, rec.os_tid, rec.start_ns, out);
            if (trc) return trc;
            return 1;
        }
        const api_slot *api = api_find(it, rec.correlation);
        if (api && api->start_ns != INT64_MAX) {
            out->launch_ns = api->start_ns;
            int trc = gpu_thread_at(it, api->os_tid, api->start_ns, out);
            if (trc) return trc;
        }
        return 1;
    }
}

void st_gpu_iter_close(st_gpu_iter *it)
{
    if (!it) return;
    for (uint32_t i = 0; it->sub && i < it->r->n_parts; i++) st_gpu_iter_close(it->sub[i]);
    free(it->sub);
    sqlite3_finalize(it->st);
    for (uint32_t i = 0; i < it->n_names; i++) free(it->names[i]);
    free(it->names);
    free(it->api);
    for (uint32_t i = 0; it->tr && i < it->r->n_threads; i++) {
        free(it->tr[i].start);
        free(it->tr[i].end);
        free(it->tr[i].stage);
        free(it->tr[i].parent);
    }
    free(it->tr);
    free(it);
}

int64_t st_gpu_iter_stage_at(st_gpu_iter *it, int64_t thread, int64_t ts_ns)
{
    if (!it->tr || thread < 0 || thread >= (int64_t)it->r->thread_index_len) return -1;
    int32_t i = it->r->thread_index[thread];
    if (i < 0) return -1;
    if (!it->tr[i].loaded) {
        int rc = gpu_load_ranges(it, (uint32_t)i);
        if (rc) return rc < -1 ? rc : -2;
    }
    return gpu_stage_at(&it->tr[i], ts_ns);
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

void st_gpu_iter_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index)
{
    if (it->sub && it->part < it->r->n_parts && it->sub[it->part]) it = it->sub[it->part]; /* the rank's file */
    *chunk_id = it->row_id;
    *index = (uint32_t)it->n_items - it->cur.remaining - 1;
}

/* ---- what the chunk headers say, per thread or device ---- */

static int unreadable(const char *table, sqlite3 *db)
{
    return st_set_error(ST_ECORRUPT, "trace table '%s' cannot be read: %s", table, sqlite3_errmsg(db));
}

static int push_count(st_chunk_count **v, uint32_t *n, uint32_t *cap, int64_t key, int64_t count)
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
static int chunk_counts(st_reader *r, const char *table, const char *sql, int strict, st_chunk_count **out,
                        uint32_t *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return unreadable(table, r->db);
    uint32_t cap = 0;
    int rc, err = ST_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && !err)
        err = push_count(out, n, &cap, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
    if (err) { /* no memory */
        free(*out);
        *out = NULL;
        *n = 0;
    } else if (rc != SQLITE_DONE && strict) {
        err = unreadable(table, r->db); /* *out keeps the rows before the failure */
    }
    sqlite3_finalize(st);
    return err;
}

static int set_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n);

int st_reader_range_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    if (r->parts) return set_chunks_per_thread(r, out, n);
    return chunk_counts(r, "range_chunks", "SELECT thread, count(*) FROM main.range_chunks GROUP BY thread", 0, out,
                        n);
}

static int set_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n);
static int set_gpu_devices(st_reader *r, int32_t **out, uint32_t *n);
static int set_gpu_span(st_reader *r, st_gpu_headers *out);
static int set_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out);

int st_reader_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    if (r->parts) return set_gpu_records_per_device(r, out, n);
    return chunk_counts(r, "gpu_chunks",
                        "SELECT device, sum(max(n_records, 0)) FROM main.gpu_chunks GROUP BY device ORDER BY device", 1,
                        out, n);
}

int st_reader_gpu_devices(st_reader *r, int32_t **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    if (r->parts) return set_gpu_devices(r, out, n);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT DISTINCT device FROM main.gpu_chunks WHERE device >= 0 ORDER BY device", -1,
                           &st, NULL) != SQLITE_OK)
        return unreadable("gpu_chunks", r->db);
    int rc, err = ST_OK;
    int32_t *v = NULL;
    uint32_t len = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || sqlite3_column_int64(st, 0) > INT32_MAX) continue;
        int32_t *nv = realloc(v, (len + 1) * sizeof *nv);
        if (!nv) {
            err = st_set_error(ST_ENOMEM, "out of memory");
            break;
        }
        v = nv;
        v[len++] = (int32_t)sqlite3_column_int64(st, 0);
    }
    if (!err && rc != SQLITE_DONE) err = unreadable("gpu_chunks", r->db);
    sqlite3_finalize(st);
    if (err) {
        free(v);
        return err;
    }
    *out = v;
    *n = len;
    return ST_OK;
}

int st_reader_gpu_span(st_reader *r, st_gpu_headers *out)
{
    memset(out, 0, sizeof *out);
    if (r->parts) return set_gpu_span(r, out);
    int ok = is_table(r->db, "gpu_chunks");
    if (ok <= 0) return ok < 0 ? bad("gpu_chunks", sqlite3_errmsg(r->db)) : ST_OK;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT count(*), total(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks "
                           "WHERE typeof(device) = 'integer' AND device >= 0 AND device <= 2147483647",
                           -1, &st, NULL) != SQLITE_OK)
        return unreadable("gpu_chunks", r->db);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0 && sqlite3_column_type(st, 2) == SQLITE_INTEGER &&
        sqlite3_column_type(st, 3) == SQLITE_INTEGER) {
        double n = sqlite3_column_double(st, 1); /* total(): a sum past int64 is capped, not an error */
        out->has = 1;
        out->n_records = n >= 9.2e18 ? INT64_MAX : (int64_t)n;
        out->t0_ns = sqlite3_column_int64(st, 2);
        out->t1_ns = sqlite3_column_int64(st, 3);
    }
    int err = rc == SQLITE_ROW || rc == SQLITE_DONE ? ST_OK : unreadable("gpu_chunks", r->db);
    sqlite3_finalize(st);
    return err;
}

int st_reader_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out)
{
    memset(out, 0, sizeof *out);
    if (r->parts) return set_gpu_headers(r, device, t0_ns, t1_ns, out);
    sqlite3_stmt *st;
    /* ?1 is bound either way; "device < 0" leaves it unused */
    const char *sql = device < 0 ? "SELECT sum(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks WHERE "
                                   "device < 0 AND t1_ns >= ?2 AND t0_ns < ?3"
                                 : "SELECT sum(max(n_records, 0)), min(t0_ns), max(t1_ns) FROM main.gpu_chunks WHERE "
                                   "device = ?1 AND t1_ns >= ?2 AND t0_ns < ?3";
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return unreadable("gpu_chunks", r->db);
    sqlite3_bind_int64(st, 1, device);
    sqlite3_bind_int64(st, 2, t0_ns);
    sqlite3_bind_int64(st, 3, t1_ns);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        out->has = 1;
        out->n_records = sqlite3_column_int64(st, 0);
        out->t0_ns = sqlite3_column_int64(st, 1);
        out->t1_ns = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    return ST_OK;
}

/* ---- rank sets (st_reader_open_set) ---- */

static void set_free(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_reader_close(r->parts[i].r);
        free(r->parts[i].stage_map);
        free(r->parts[i].counter_map);
        free(r->parts[i].thread_of);
    }
    free(r->parts);
    free(r->thread_part);
    free(r->thread_local);
    r->parts = NULL;
    r->n_parts = 0;
    r->db = NULL; /* the first part's */
}

/* A rank's clock must run forwards when mapped: rank 0's reading at the
 * close measurement (clock_sync_close_ns + clock_offset_close_ns) not
 * before its reading at the open one, else the linear map would turn
 * every duration negative. */
static int check_part_clock(const set_part *p)
{
    const st_rank_clock *c = &p->clock;
    if (!c->has_open || !c->has_close || c->sync_close_ns <= c->sync_ns) return ST_OK;
    __int128 at_open = (__int128)c->sync_ns + c->offset_ns, at_close = (__int128)c->sync_close_ns + c->offset_close_ns;
    if (at_close < at_open)
        return st_set_error(ST_ECORRUPT,
                            "rank %d: meta 'clock_sync_close_ns' + 'clock_offset_close_ns' is before "
                            "'clock_sync_ns' + 'clock_offset_ns' (rank 0's clock would run backwards): its times "
                            "cannot be mapped onto rank 0's clock",
                            p->rank);
    return ST_OK;
}

static int set_build(st_reader *r, st_reader **readers, uint32_t n, const int *ranks)
{
    uint32_t nt = 0, ns = 0, nc = 0;
    for (uint32_t i = 0; i < n; i++) {
        nt += readers[i]->n_threads;
        ns += readers[i]->n_stages;
        nc += readers[i]->n_counters;
    }
    r->parts = calloc(n, sizeof *r->parts);
    r->threads = calloc(nt ? nt : 1, sizeof *r->threads);
    r->thread_part = calloc(nt ? nt : 1, sizeof *r->thread_part);
    r->thread_local = calloc(nt ? nt : 1, sizeof *r->thread_local);
    r->thread_index = calloc(nt ? nt : 1, sizeof *r->thread_index);
    r->stages = calloc(ns ? ns : 1, sizeof *r->stages);
    r->counters = calloc(nc ? nc : 1, sizeof *r->counters);
    if (!r->parts || !r->threads || !r->thread_part || !r->thread_local || !r->thread_index || !r->stages ||
        !r->counters) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    r->n_parts = n;
    for (uint32_t i = 0; i < n; i++) {
        r->parts[i].r = readers[i];
        r->parts[i].rank = ranks[i];
        st_reader_rank_clock(readers[i], &r->parts[i].clock);
    }
    for (uint32_t i = 0; i < n; i++) {
        int rc = check_part_clock(&r->parts[i]);
        if (rc) return rc;
    }
    r->db = readers[0]->db;
    r->owns_db = 0;
    for (uint32_t i = 0; i < n; i++) {
        set_part *p = &r->parts[i];
        st_reader *pr = p->r;
        p->stage_map = calloc(pr->n_stages ? pr->n_stages : 1, sizeof *p->stage_map);
        p->counter_map = calloc(pr->n_counters ? pr->n_counters : 1, sizeof *p->counter_map);
        p->thread_of = calloc(pr->n_threads ? pr->n_threads : 1, sizeof *p->thread_of);
        if (!p->stage_map || !p->counter_map || !p->thread_of) return st_set_error(ST_ENOMEM, "out of memory");
        /* stages are one by name across ranks: the first rank's id and kind */
        for (uint32_t s = 0; s < pr->n_stages; s++) {
            uint32_t k = 0;
            while (k < r->n_stages && strcmp(r->stages[k].name, pr->stages[s].name) != 0) k++;
            if (k == r->n_stages) {
                r->stages[k] = pr->stages[s];
                r->stages[k].id = k;
                if (!(r->stages[k].name = strdup(pr->stages[s].name))) return st_set_error(ST_ENOMEM, "out of memory");
                r->n_stages++;
            } else if (r->stages[k].kind != pr->stages[s].kind) {
                return st_set_error(ST_ECORRUPT, "rank %d's stage '%.64s' is of kind %s, another rank's of kind %s",
                                    p->rank, pr->stages[s].name, st_kind_name(pr->stages[s].kind),
                                    st_kind_name(r->stages[k].kind));
            }
            p->stage_map[s] = k;
        }
        for (uint32_t c = 0; c < pr->n_counters; c++) {
            uint32_t k = 0;
            while (k < r->n_counters && strcmp(r->counters[k].name, pr->counters[c].name) != 0) k++;
            if (k == r->n_counters) {
                r->counters[k] = pr->counters[c];
                r->counters[k].id = k;
                r->counters[k].name = strdup(pr->counters[c].name);
                r->counters[k].unit = strdup(pr->counters[c].unit);
                r->n_counters++;
                if (!r->counters[k].name || !r->counters[k].unit) return st_set_error(ST_ENOMEM, "out of memory");
            }
            p->counter_map[c] = k;
        }
        for (uint32_t t = 0; t < pr->n_threads; t++) {
            st_thread_info *th = &r->threads[r->n_threads];
            *th = pr->threads[t];
            size_t len = strlen(pr->threads[t].name) + 16;
            char *name = malloc(len);
            if (!name) return st_set_error(ST_ENOMEM, "out of memory");
            snprintf(name, len, "r%d/%s", p->rank, pr->threads[t].name);
            th->name = name;
            th->role = strdup(pr->threads[t].role);
            r->n_threads++; /* owned from here: freed by st_reader_close */
            if (!th->role) return st_set_error(ST_ENOMEM, "out of memory");
            r->n_threads--;
            th->id = r->n_threads;
            th->rank = p->rank;
            r->thread_part[r->n_threads] = i;
            r->thread_local[r->n_threads] = pr->threads[t].id;
            r->thread_index[r->n_threads] = (int32_t)r->n_threads;
            p->thread_of[t] = r->n_threads;
            r->n_threads++;
        }
    }
    r->thread_index_len = r->n_threads;
    /* step marks: the first part's (rank 0 normally), on rank 0's clock */
    st_reader *first = r->parts[0].r;
    r->steps = calloc(first->n_steps ? first->n_steps : 1, sizeof *r->steps);
    if (!r->steps) return st_set_error(ST_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < first->n_steps; i++) {
        r->steps[i] = first->steps[i];
        int rc = set_map(&r->parts[0], first->steps[i].ts_ns, &r->steps[i].ts_ns);
        if (rc) return rc;
        if (i && r->steps[i].ts_ns <= r->steps[i - 1].ts_ns)
            return st_set_error(ST_ECORRUPT, "rank %d: step marks %llu and %llu are out of order on rank 0's clock",
                                r->parts[0].rank, (unsigned long long)r->steps[i - 1].step,
                                (unsigned long long)r->steps[i].step);
    }
    r->n_steps = first->n_steps;
    return ST_OK;
}

int st_run_ids_match(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* The parts in rank order (stable), each rank once, one run_id: so that
 * nothing of a set depends on the order its traces were given in. */
static int set_order(st_reader **readers, const int *ranks, uint32_t n, st_reader **by_rank, int *rank_of)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && rank_of[j - 1] > ranks[i]) {
            by_rank[j] = by_rank[j - 1];
            rank_of[j] = rank_of[j - 1];
            j--;
        }
        by_rank[j] = readers[i];
        rank_of[j] = ranks[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *id = st_reader_meta(by_rank[i], "run_id"), *id0 = st_reader_meta(by_rank[0], "run_id");
        if (!id) return st_set_error(ST_EINVAL, "rank %d's trace has no run_id: it cannot be one rank of a set", rank_of[i]);
        if (i && rank_of[i] == rank_of[i - 1])
            return st_set_error(ST_EINVAL, "rank %d is given twice (each rank once)", rank_of[i]);
        if (!st_run_ids_match(id, id0))
            return st_set_error(ST_EINVAL, "rank %d's run_id '%s' is not the run_id '%s' of rank %d: the traces are "
                                "not ranks of one run",
                                rank_of[i], id, id0, rank_of[0]);
    }
    return ST_OK;
}

int st_reader_open_set(st_reader **out, st_reader **readers, const int *ranks, uint32_t n)
{
    *out = NULL;
    if (n == 0) return st_set_error(ST_EINVAL, "a rank set needs at least one trace");
    st_reader *r = calloc(1, sizeof *r);
    st_reader **by_rank = malloc(n * sizeof *by_rank);
    int *rank_of = malloc(n * sizeof *rank_of);
    if (!r || !by_rank || !rank_of) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        free(r);
        free(by_rank);
        free(rank_of);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    int rc = set_order(readers, ranks, n, by_rank, rank_of);
    if (rc) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        free(r);
        free(by_rank);
        free(rank_of);
        return rc;
    }
    rc = set_build(r, by_rank, n, rank_of);
    free(by_rank);
    free(rank_of);
    if (rc) {
        if (!r->parts) {
            free(r->threads);
            free(r->thread_part);
            free(r->thread_local);
            free(r->thread_index);
            free(r->stages);
            free(r->counters);
            free(r);
            return rc;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_last_error());
        st_reader_close(r);
        return st_set_error(rc, "%s", msg);
    }
    *out = r;
    return ST_OK;
}

uint32_t st_reader_n_parts(const st_reader *r) { return r->parts ? r->n_parts : 0; }
st_reader *st_reader_part(const st_reader *r, uint32_t i) { return r->parts && i < r->n_parts ? r->parts[i].r : NULL; }
int st_reader_thread_part(const st_reader *r, uint32_t thread, uint32_t *part, uint32_t *local_id)
{
    if (!r->parts || thread >= r->n_threads) return -1;
    *part = r->thread_part[thread];
    *local_id = r->thread_local[thread];
    return 0;
}

static int set_chunk_totals(st_reader *r, st_chunk_totals *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_totals t;
        int rc = st_reader_chunk_totals(r->parts[i].r, &t);
        if (rc) return rc;
        out->n_ranges += t.n_ranges;
        out->n_samples += t.n_samples;
        if (!t.has_ranges) continue;
        int64_t a, b;
        if ((rc = set_map(&r->parts[i], t.first_ns, &a)) || (rc = set_map(&r->parts[i], t.last_ns, &b))) return rc;
        if (!out->has_ranges || a < out->first_ns) out->first_ns = a;
        if (!out->has_ranges || b > out->last_ns) out->last_ns = b;
        out->has_ranges = 1;
    }
    return ST_OK;
}

static int set_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    *out = calloc(r->n_threads ? r->n_threads : 1, sizeof **out);
    *n = 0;
    if (!*out) return st_set_error(ST_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_count *c = NULL;
        uint32_t nc = 0;
        st_reader_range_chunks_per_thread(r->parts[i].r, &c, &nc);
        for (uint32_t k = 0; k < nc; k++) {
            const st_thread_info *th = c[k].key >= 0 && c[k].key <= UINT32_MAX
                                           ? st_reader_thread_by_id(r->parts[i].r, (uint32_t)c[k].key)
                                           : NULL;
            if (!th) continue;
            uint32_t index = (uint32_t)(th - r->parts[i].r->threads);
            (*out)[*n].key = r->parts[i].thread_of[index];
            (*out)[*n].n = c[k].n;
            (*n)++;
        }
        free(c);
    }
    return ST_OK;
}

/* ---- rank sets: the walk over the threads (set_walk) ----
 * One kind of per-file iterator, behind three calls: the thread's iterator
 * opened on its rank over all time (the set filters the mapped times), its
 * next row, its close. */
typedef struct set_walk_kind {
    int (*open)(void **sub, st_reader *rank, uint32_t local_thread);
    int (*next)(void *sub, void *row);
    void (*close)(void *sub);
} set_walk_kind;

/* The next row of the walk, from the current thread's iterator, moving on
 * to the next thread when it ends: 1 (a row, from thread w->cur_thread),
 * 0 (no thread left) or a negative code. */
static int set_walk_next(set_walk *w, const set_walk_kind *kind, void *row)
{
    st_reader *r = w->set;
    for (;;) {
        if (!w->sub) {
            if (w->next_thread >= r->n_threads || (w->want_thread >= 0 && w->next_thread != w->want_thread))
                return 0;
            uint32_t t = w->next_thread++;
            int rc = kind->open(&w->sub, r->parts[r->thread_part[t]].r, r->thread_local[t]);
            if (rc) return rc;
            w->cur_thread = t;
        }
        int rc = kind->next(w->sub, row);
        if (rc != 0) return rc;
        kind->close(w->sub);
        w->sub = NULL;
    }
}

/* The part (rank) of the walk's current thread. */
static const set_part *set_walk_part(const set_walk *w)
{
    return &w->set->parts[w->set->thread_part[w->cur_thread]];
}

static int walk_range_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_range_iter *it = NULL;
    int rc = st_range_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}
static int walk_range_next(void *sub, void *row) { return st_range_iter_next(sub, row); }
static void walk_range_close(void *sub) { st_range_iter_close(sub); }
static const set_walk_kind range_walk = {walk_range_open, walk_range_next, walk_range_close};

static int walk_sample_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_sample_iter *it = NULL;
    int rc = st_sample_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}
static int walk_sample_next(void *sub, void *row) { return st_sample_iter_next(sub, row); }
static void walk_sample_close(void *sub) { st_sample_iter_close(sub); }
static const set_walk_kind sample_walk = {walk_sample_open, walk_sample_next, walk_sample_close};

static int walk_flow_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_flow_iter *it = NULL;
    int rc = st_flow_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}
static int walk_flow_next(void *sub, void *row) { return st_flow_iter_next(sub, row); }
static void walk_flow_close(void *sub) { st_flow_iter_close(sub); }
static const set_walk_kind flow_walk = {walk_flow_open, walk_flow_next, walk_flow_close};

/* The next batch of a rank set's ranges: each thread's, one after another,
 * read on its rank and mapped, kept when they overlap [t0, t1) as a file's
 * iterator keeps them. */
static int set_range_fill(st_range_iter *it, st_range *out)
{
    it->head.next = it->head.end = it->batch;
    size_t n = 0;
    while (n < RANGE_BATCH) {
        st_range g;
        int rc = set_walk_next(&it->walk, &range_walk, &g);
        if (rc < 0) return rc;
        if (rc == 0) break;
        uint32_t t = it->walk.cur_thread;
        const set_part *p = set_walk_part(&it->walk);
        int64_t start, end;
        if ((rc = set_map(p, g.start_ns, &start)) || (rc = set_map(p, g.start_ns + g.dur_ns, &end))) return rc;
        if (start >= it->t1 || end < it->t0 || (end == it->t0 && end != start)) continue;
        it->batch[n].thread = t;
        it->batch[n].stage = p->stage_map[g.stage];
        it->batch[n].depth = g.depth;
        it->batch[n].start_ns = start;
        it->batch[n].dur_ns = end - start;
        n++;
    }
    if (!n) return 0;
    *out = it->batch[0];
    it->head.next = it->batch + 1;
    it->head.end = it->batch + n;
    return 1;
}

static int set_sample_next(st_sample_iter *it, st_sample_row *out)
{
    int rc;
    while ((rc = set_walk_next(&it->walk, &sample_walk, out)) == 1) {
        const set_part *p = set_walk_part(&it->walk);
        if ((rc = set_map(p, out->ts_ns, &out->ts_ns))) return rc;
        if (out->ts_ns < it->t0 || out->ts_ns >= it->t1) continue;
        out->thread = it->walk.cur_thread;
        out->counter = p->counter_map[out->counter];
        return 1;
    }
    return rc;
}

/* ---- rank sets: flows (set_flow_*) ----
 * Each rank's flow records, per merged thread in the set's thread order, on
 * the thread's rank with its times mapped onto rank 0's clock; ids are the
 * program's, shared by all ranks (an out on one rank pairs with the in on
 * another). */

static int set_has_flows(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        int has = st_reader_has_flows(r->parts[i].r);
        if (has) return has;
    }
    return 0;
}

static int set_flow_next(st_flow_iter *it, st_flow_row *out)
{
    int rc;
    while ((rc = set_walk_next(&it->walk, &flow_walk, out)) == 1) {
        if ((rc = set_map(set_walk_part(&it->walk), out->ts_ns, &out->ts_ns))) return rc;
        if (out->ts_ns < it->t0 || out->ts_ns >= it->t1) continue;
        out->thread = it->walk.cur_thread;
        return 1;
    }
    return rc;
}

int64_t st_reader_flow_slack(const st_reader *r, uint32_t thread_a, uint32_t thread_b)
{
    if (!r->parts || thread_a >= r->n_threads || thread_b >= r->n_threads) return 0;
    const set_part *a = &r->parts[r->thread_part[thread_a]], *b = &r->parts[r->thread_part[thread_b]];
    if (a == b) return 0;
    int64_t ua = st_rank_clock_uncertainty(&a->clock), ub = st_rank_clock_uncertainty(&b->clock);
    if (ua < 0) ua = 0;
    if (ub < 0) ub = 0;
    return ua > INT64_MAX - ub ? INT64_MAX : ua + ub;
}

/* ---- a rank set's GPU records (docs/analyze.md, "Rank sets") ----
 * Each rank's records read by its own reader, times mapped as its ranges
 * are (set_map), device d of rank r numbered r * ST_SET_DEVICE_STRIDE + d,
 * launching threads and stages the set's; API calls keep device -1. */

/* A device of part p as the set numbers it. */
static int set_gpu_device(const set_part *p, int64_t d, int32_t *out)
{
    if (d < 0) {
        *out = -1;
        return ST_OK;
    }
    if (d >= ST_SET_DEVICE_STRIDE || p->rank < 0 ||
        (int64_t)p->rank * ST_SET_DEVICE_STRIDE + d > INT32_MAX)
        return st_set_error(ST_ECORRUPT, "rank %d: GPU device %lld cannot be numbered in a rank set (devices 0..%d of ranks 0..%d)",
                            p->rank, (long long)d, ST_SET_DEVICE_STRIDE - 1, INT32_MAX / ST_SET_DEVICE_STRIDE - 1);
    *out = (int32_t)((int64_t)p->rank * ST_SET_DEVICE_STRIDE + d);
    return ST_OK;
}

/* A time on rank 0's clock back onto part p's, for the windows a part is
 * read with (a bound widened by a few ns; the mapped records are filtered
 * exactly). The map is t + offset (+ drift), so a few fixed-point steps
 * invert it; the ends of the line stay there. */
static int64_t set_unmap(const set_part *p, int64_t m, int lower)
{
    if (m == INT64_MIN || m == INT64_MAX || !p->clock.has_open) return m;
    __int128 t = (__int128)m - p->clock.offset_ns;
    for (int k = 0; k < 4; k++) {
        if (t <= INT64_MIN || t >= INT64_MAX) break;
        int64_t back = 0;
        if (st_rank_clock_map(&p->clock, (int64_t)t, &back) != ST_OK) break;
        t += (__int128)m - back;
    }
    t += lower ? -16 : 16;
    return t <= INT64_MIN ? INT64_MIN : t >= INT64_MAX ? INT64_MAX : (int64_t)t;
}

static int set_gpu_has(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        int h = st_reader_has_gpu(r->parts[i].r);
        if (h) return h;
    }
    return 0;
}

static int set_gpu_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0, int64_t t1, int api_mode)
{
    st_gpu_iter *it = calloc(1, sizeof *it);
    if (!it) return st_set_error(ST_ENOMEM, "out of memory");
    it->r = r;
    it->t0 = t0;
    it->t1 = t1;
    it->api_mode = api_mode;
    it->want_device = device;
    it->sub = calloc(r->n_parts ? r->n_parts : 1, sizeof *it->sub);
    it->tr = calloc(r->n_threads ? r->n_threads : 1, sizeof *it->tr);
    if (!it->sub || !it->tr) {
        st_gpu_iter_close(it);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    *out = it;
    return ST_OK;
}

/* The part's device asked for: -1 all, -2 none of this part's. */
static int64_t set_gpu_local_device(const st_gpu_iter *it, const set_part *p)
{
    if (it->want_device < 0) return -1;
    if (p->rank < 0 || it->want_device / ST_SET_DEVICE_STRIDE != p->rank) return -2;
    return it->want_device % ST_SET_DEVICE_STRIDE;
}

static int set_gpu_next(st_gpu_iter *it, st_gpu_row *out)
{
    st_reader *r = it->r;
    while (it->part < r->n_parts) {
        const set_part *p = &r->parts[it->part];
        st_gpu_iter **sub = &it->sub[it->part];
        int64_t dev = set_gpu_local_device(it, p);
        if (dev == -2) {
            it->part++;
            continue;
        }
        int rc;
        if (!*sub) {
            int64_t a = set_unmap(p, it->t0, 1), b = set_unmap(p, it->t1, 0);
            rc = gpu_iter_open(sub, p->r, dev, a, b, it->api_mode);
            if (rc) return rc;
        }
        rc = st_gpu_iter_next(*sub, out);
        if (rc < 0) return rc;
        if (rc == 0) {
            it->part++; /* its iterator stays open: the names it gave stay valid */
            continue;
        }
        int64_t start, end;
        if ((rc = set_map(p, out->rec.start_ns, &start)) ||
            (rc = set_map(p, out->rec.start_ns + (out->rec.dur_ns > 0 ? out->rec.dur_ns : 0), &end)))
            return rc;
        int64_t dur = out->rec.dur_ns > 0 ? end - start : out->rec.dur_ns;
        if (start >= it->t1) continue;
        int64_t e = start + (dur > 0 ? dur : 0);
        if (e < it->t0 || (e == it->t0 && dur != 0)) continue;
        out->rec.start_ns = start;
        out->rec.dur_ns = dur;
        int32_t d;
        if ((rc = set_gpu_device(p, out->device, &d))) return rc;
        out->device = d;
        if (out->launch_ns != INT64_MIN && (rc = set_map(p, out->launch_ns, &out->launch_ns))) return rc;
        if (out->thread >= 0) {
            const st_thread_info *th =
                out->thread <= UINT32_MAX ? st_reader_thread_by_id(p->r, (uint32_t)out->thread) : NULL;
            out->thread = th ? (int64_t)p->thread_of[th - p->r->threads] : -1;
        }
        if (out->stage >= 0) out->stage = (uint32_t)out->stage < p->r->n_stages ? (int64_t)p->stage_map[out->stage] : -1;
        return 1;
    }
    return 0;
}

static int set_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    uint32_t cap = 0;
    int64_t api = 0;
    int has_api = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_count *c = NULL;
        uint32_t nc = 0;
        int rc = ST_OK;
        if (is_table(r->parts[i].r->db, "gpu_chunks") > 0)
            rc = st_reader_gpu_records_per_device(r->parts[i].r, &c, &nc);
        for (uint32_t k = 0; !rc && k < nc; k++) {
            if (c[k].key < 0) { /* the API calls: one row for the set, under the lowest key */
                api = c[k].n > INT64_MAX - api ? INT64_MAX : api + c[k].n;
                has_api = 1;
                continue;
            }
            int32_t d;
            rc = set_gpu_device(&r->parts[i], c[k].key, &d);
            if (!rc) rc = push_count(out, n, &cap, d, c[k].n);
        }
        free(c);
        if (rc) return rc;
    }
    if (has_api) {
        int rc = push_count(out, n, &cap, -1, api);
        if (rc) return rc;
        memmove(*out + 1, *out, (*n - 1) * sizeof **out);
        (*out)[0] = (st_chunk_count){-1, api};
    }
    return ST_OK;
}

static int set_gpu_devices(st_reader *r, int32_t **out, uint32_t *n)
{
    int32_t *v = NULL;
    uint32_t len = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        if (is_table(r->parts[i].r->db, "gpu_chunks") <= 0) continue;
        int32_t *d = NULL;
        uint32_t nd = 0;
        int rc = st_reader_gpu_devices(r->parts[i].r, &d, &nd);
        int32_t *nv = rc || !nd ? NULL : realloc(v, (len + nd) * sizeof *nv);
        if (!rc && nd && !nv) rc = st_set_error(ST_ENOMEM, "out of memory");
        if (nv) v = nv;
        for (uint32_t k = 0; !rc && k < nd; k++) rc = set_gpu_device(&r->parts[i], d[k], &v[len++]);
        free(d);
        if (rc) {
            free(v);
            return rc;
        }
    }
    *out = v;
    *n = len;
    return ST_OK;
}

static int set_gpu_span(st_reader *r, st_gpu_headers *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_gpu_headers h;
        int rc = st_reader_gpu_span(r->parts[i].r, &h);
        if (rc) return rc;
        if (!h.has) continue;
        int64_t a, b;
        if ((rc = set_map(&r->parts[i], h.t0_ns, &a)) || (rc = set_map(&r->parts[i], h.t1_ns, &b))) return rc;
        out->n_records = h.n_records > INT64_MAX - out->n_records ? INT64_MAX : out->n_records + h.n_records;
        if (!out->has || a < out->t0_ns) out->t0_ns = a;
        if (!out->has || b > out->t1_ns) out->t1_ns = b;
        out->has = 1;
    }
    return ST_OK;
}

static int set_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const set_part *p = &r->parts[i];
        int64_t dev = device;
        if (device >= 0) {
            if (p->rank < 0 || device / ST_SET_DEVICE_STRIDE != p->rank) continue;
            dev = device % ST_SET_DEVICE_STRIDE;
        }
        st_gpu_headers h;
        int rc = st_reader_gpu_headers(p->r, dev, set_unmap(p, t0_ns, 1), set_unmap(p, t1_ns, 0), &h);
        if (rc) return rc;
        if (!h.has) continue;
        int64_t a, b;
        if ((rc = set_map(p, h.t0_ns, &a)) || (rc = set_map(p, h.t1_ns, &b))) return rc;
        out->n_records = h.n_records > INT64_MAX - out->n_records ? INT64_MAX : out->n_records + h.n_records;
        if (!out->has || a < out->t0_ns) out->t0_ns = a;
        if (!out->has || b > out->t1_ns) out->t1_ns = b;
        out->has = 1;
    }
    return ST_OK;
}
