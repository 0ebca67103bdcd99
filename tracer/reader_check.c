/* reader_check.c: the reader's validation at open (reader.c's load calls
 * it table by table): every table of the format a real table of the
 * documented shape, every value type-checked; and the checks a chunk row
 * gets as the iterators read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

int st_rd_int_col(sqlite3_stmt *st, int col, int64_t *out)
{
    if (sqlite3_column_type(st, col) != SQLITE_INTEGER) return -1;
    *out = sqlite3_column_int64(st, col);
    return 0;
}

int st_rd_bad(const char *table, const char *what)
{
    return st_set_error(ST_ECORRUPT, "trace table '%s': %s", table, what);
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
    col_spec cols[12];
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

/* Optional, st_gpu_pause's: every row at open (they are few); t0_ns <=
 * t1_ns by the analyzer's reader of the table (analyze/trace.c). */
static const table_spec gpu_pauses_spec = {"gpu_pauses", "id", 0, -1, 3,
    {{"id", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}}, 3};

/* Optional, the GPU collector's names of launching threads the trace did not
 * register: every row at open (a few per process). */
static const table_spec gpu_threads_spec = {"gpu_threads", "os_tid", 0, -1, 2,
    {{"os_tid", COL_INT}, {"name", COL_NAME}}, 2};

/* Optional, the CPU capture's (st_options.cpu): checked the first time the
 * CPU tables are read (reader_cpu.c), not at open. The small ones every row;
 * cpu_chunks its id and thread, its other columns as each chunk is read;
 * cpu_stacks its id, n_frames and data as the stacks are loaded. */
static const table_spec cpu_specs[] = {
    {"cpu_threads", "thread", 0, 0, 12,
     {{"thread", COL_INT}, {"os_tid", COL_INT}, {"status", COL_NAME}, {"reason", COL_TEXT}, {"period_ns", COL_INT},
      {"ring_bytes", COL_INT}, {"refused_bytes", COL_INT}, {"start_ns", COL_INT}, {"cpu_ns", COL_INT},
      {"switches", COL_INT}, {"samples", COL_INT}, {"lost", COL_INT}},
     12},
    {"cpu_chunks", "id", 0, 1, 6,
     {{"id", COL_INT}, {"thread", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}, {"n_records", COL_INT},
      {"data", COL_BLOB}},
     2},
    {"cpu_stacks", "id", 0, -1, 3, {{"id", COL_INT}, {"n_frames", COL_INT}, {"data", COL_BLOB}}, 1},
    {"cpu_maps", "id", 0, -1, 6,
     {{"id", COL_INT}, {"start", COL_INT}, {"end", COL_INT}, {"file_offset", COL_INT}, {"path", COL_TEXT},
      {"build_id", COL_TEXT}},
     6},
    {"cpu_symbols", "addr", 0, -1, 5,
     {{"addr", COL_INT}, {"map", COL_INT}, {"file_offset", COL_INT}, {"name", COL_TEXT}, {"sym_offset", COL_INT}},
     5},
};

/* Optional beside those five (a trace recorded before they existed lacks
 * them): their shape, and cpu_blocks' ids and threads, checked the first
 * time each is read; their other columns as each row is read
 * (reader_cpu.c). */
static const table_spec cpu_extra_specs[] = {
    {"cpu_blocks", "id", 0, 1, 9,
     {{"id", COL_INT}, {"thread", COL_INT}, {"t_ns", COL_INT}, {"seen_ns", COL_INT}, {"syscall", COL_INT},
      {"name", COL_TEXT}, {"arg0", COL_INT}, {"arg1", COL_INT}, {"wchan", COL_TEXT}},
     2},
    {"cpu_lines", "addr", -1, -1, 6,
     {{"addr", COL_INT}, {"depth", COL_INT}, {"function", COL_TEXT}, {"file", COL_TEXT}, {"line", COL_INT},
      {"col", COL_INT}},
     0},
    {"cpu_windows", "window", -1, -1, 10,
     {{"window", COL_INT}, {"step", COL_INT}, {"t0_ns", COL_INT}, {"t1_ns", COL_INT}, {"os_tid", COL_INT},
      {"thread", COL_INT}, {"name", COL_TEXT}, {"oncpu_ns", COL_INT}, {"runq_ns", COL_INT}, {"slices", COL_INT}},
     0},
};

/* Meta keys whose value is a decimal integer. */
static const char *const meta_int_keys[] = {
    "schema_version", "start_ns",       "end_ns",         "tsc_hz",        "pid",
    "rank",           "world_size",     "profile_interval", "commit_ms",   "ring_records",
    "dropped_events", "unmatched_ends", "rejected_steps", "clock_clamped", "bad_counters",
    "gpu_dropped_records", "failed_commits", "lost_events", "local_rank", "device",
    "clock_sync_ns", "clock_offset_ns", "clock_uncertainty_ns", "clock_sync_close_ns",
    "clock_offset_close_ns", "clock_uncertainty_close_ns", "clock_drift_ppb", "clock_map_error_ns",
    "clock_map_half_bracket_ns", "clock_map_error_close_ns", "clock_map_half_bracket_close_ns",
    "gpu_every_steps",
};

/* What the schema holds under this name: 0 nothing, 1 a plain table, 2 a
 * view, 3 a virtual table, 4 something else (an index); -1 error. Names are
 * compared as SQLite compares them, without case. */
int st_rd_object_kind(sqlite3 *db, const char *name)
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

int st_rd_is_table(sqlite3 *db, const char *name)
{
    int kind = st_rd_object_kind(db, name);
    return kind < 0 ? -1 : kind == 1;
}

/* The table is the plain table of the format: a table, each column the
 * format names present, no column generated or hidden. Extra stored
 * columns are allowed (and ignored). */
static int check_shape(sqlite3 *db, const table_spec *t)
{
    int kind = st_rd_object_kind(db, t->name);
    if (kind < 0) return st_rd_bad(t->name, sqlite3_errmsg(db));
    if (kind == 2) return st_rd_bad(t->name, "it is a view, not a plain table");
    if (kind == 3) return st_rd_bad(t->name, "it is a virtual table, not a plain table");
    if (kind != 1) return st_rd_bad(t->name, "it is not a plain table");
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT name, hidden FROM pragma_table_xinfo('%s', 'main')", t->name);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad(t->name, sqlite3_errmsg(db));
    int rc, found[12] = {0}, err = ST_OK;
    while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int hidden = sqlite3_column_int(st, 1);
        if (hidden)
            err = st_set_error(ST_ECORRUPT, "trace table '%s': column '%.64s' is %s, not a stored column", t->name,
                               name ? name : "", hidden == 1 ? "hidden" : "generated");
        for (int i = 0; name && i < t->n_cols; i++)
            if (sqlite3_stricmp(name, t->cols[i].name) == 0) found[i] = 1;
    }
    if (!err && rc != SQLITE_DONE) err = st_rd_bad(t->name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    for (int i = 0; !err && i < t->n_cols; i++)
        if (!found[i])
            err = st_set_error(ST_ECORRUPT, "trace table '%s': it has no column '%s'", t->name, t->cols[i].name);
    return err;
}

const char *st_rd_type_name(int sqlite_type)
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
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad(t->name, sqlite3_errmsg(r->db));
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
                                   t->cols[i].name, st_rd_type_name(got), st_rd_type_name(want));
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
            if (thread < 0 || thread > UINT32_MAX || !st_rd_thread_by_id(r, (uint32_t)thread))
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
    if (!err && rc != SQLITE_DONE) err = st_rd_bad(t->name, sqlite3_errmsg(r->db));
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
    if (rowid < 0) return st_rd_bad(t->name, sqlite3_errmsg(r->db));
    if (!rowid) return check_rows(r, t);
    if (t->thread_ref < 0) return ST_OK;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM main.%s WHERE typeof(thread) <> 'integer' OR thread NOT IN (SELECT id FROM main.threads) "
             "LIMIT 1",
             t->name);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return st_rd_bad(t->name, sqlite3_errmsg(r->db));
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return check_rows(r, t);
    return rc == SQLITE_DONE ? ST_OK : st_rd_bad(t->name, sqlite3_errmsg(r->db));
}

/* The integer columns of a chunk row that are checked as it is read, from
 * their typeof() in columns first.. of st. */
int st_rd_check_typed(sqlite3_stmt *st, int first, const char *table, int64_t id, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        int got = type_of((const char *)sqlite3_column_text(st, first + i));
        if (got != SQLITE_INTEGER)
            return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column '%s' is %s, not an integer", table,
                                (long long)id, names[i], st_rd_type_name(got));
    }
    return ST_OK;
}

int st_rd_check_blob(sqlite3_stmt *st, int col, const char *table, int64_t id)
{
    int got = sqlite3_column_type(st, col);
    if (got == SQLITE_BLOB) return ST_OK;
    return st_set_error(ST_ECORRUPT, "trace table '%s': chunk %lld: column 'data' is %s, not a blob", table,
                        (long long)id, st_rd_type_name(got));
}

/* ---- the checks at open, in table order (reader.c's load) ---- */

/* meta: its shape and rows, before it is loaded. */
int st_rd_check_meta_table(st_reader *r)
{
    int rc;
    if ((rc = check_shape(r->db, &meta_spec)) || (rc = check_rows(r, &meta_spec))) return rc;
    return ST_OK;
}

/* threads, stages, counter_names, steps: before they are loaded. */
int st_rd_check_small_tables(st_reader *r)
{
    int rc;
    for (size_t i = 0; i < sizeof small_specs / sizeof small_specs[0]; i++)
        if ((rc = check_shape(r->db, &small_specs[i])) || (rc = check_rows(r, &small_specs[i]))) return rc;
    return ST_OK;
}

/* The chunk tables and the optional ones, after the threads are loaded
 * (chunks must name known threads); notes whether flow_chunks exists. */
int st_rd_check_chunk_tables(st_reader *r)
{
    int rc;
    for (size_t i = 0; i < sizeof chunk_specs / sizeof chunk_specs[0]; i++)
        if ((rc = check_shape(r->db, &chunk_specs[i])) || (rc = check_chunk_rows(r, &chunk_specs[i]))) return rc;
    for (size_t i = 0; i < sizeof gpu_specs / sizeof gpu_specs[0]; i++) {
        const table_spec *t = &gpu_specs[i];
        int kind = st_rd_object_kind(r->db, t->name);
        if (kind < 0) return st_rd_bad(t->name, sqlite3_errmsg(r->db));
        if (kind && ((rc = check_shape(r->db, t)) || (rc = t->n_open < t->n_cols ? check_chunk_rows(r, t) : check_rows(r, t))))
            return rc;
    }
    int kind = st_rd_object_kind(r->db, flow_spec.name);
    if (kind < 0) return st_rd_bad(flow_spec.name, sqlite3_errmsg(r->db));
    if (kind && ((rc = check_shape(r->db, &flow_spec)) || (rc = check_rows(r, &flow_spec)))) return rc;
    r->has_flow_chunks = kind != 0;
    kind = st_rd_object_kind(r->db, lost_spans_spec.name);
    if (kind < 0) return st_rd_bad(lost_spans_spec.name, sqlite3_errmsg(r->db));
    if (kind && (rc = check_shape(r->db, &lost_spans_spec))) return rc;
    kind = st_rd_object_kind(r->db, gpu_pauses_spec.name);
    if (kind < 0) return st_rd_bad(gpu_pauses_spec.name, sqlite3_errmsg(r->db));
    if (kind && ((rc = check_shape(r->db, &gpu_pauses_spec)) || (rc = check_rows(r, &gpu_pauses_spec)))) return rc;
    kind = st_rd_object_kind(r->db, gpu_threads_spec.name);
    if (kind < 0) return st_rd_bad(gpu_threads_spec.name, sqlite3_errmsg(r->db));
    if (kind && ((rc = check_shape(r->db, &gpu_threads_spec)) || (rc = check_rows(r, &gpu_threads_spec)))) return rc;
    return ST_OK;
}

/* The CPU tables (reader_cpu.c, at their first read): 0 when the trace has
 * none of them, 1 when it has all five and they pass, <0 the fault (one of
 * them missing beside the others included). */
int st_rd_check_cpu_tables(st_reader *r)
{
    int n_present = 0, rc;
    for (size_t i = 0; i < sizeof cpu_specs / sizeof cpu_specs[0]; i++) {
        int kind = st_rd_object_kind(r->db, cpu_specs[i].name);
        if (kind < 0) return st_rd_bad(cpu_specs[i].name, sqlite3_errmsg(r->db));
        n_present += kind != 0;
    }
    if (n_present == 0) return 0;
    for (size_t i = 0; i < sizeof cpu_specs / sizeof cpu_specs[0]; i++) {
        const table_spec *t = &cpu_specs[i];
        if (st_rd_object_kind(r->db, t->name) == 0)
            return st_rd_bad(t->name, "it is missing (the CPU capture's five tables come together)");
        if ((rc = check_shape(r->db, t)) || (rc = t->n_open < t->n_cols ? check_chunk_rows(r, t) : check_rows(r, t)))
            return rc;
    }
    return 1;
}

/* cpu_blocks, cpu_lines or cpu_windows (reader_cpu.c, at its first read): 0 when the
 * trace has no such table, 1 when its shape passes (and, cpu_blocks, every
 * row's id and thread), <0 the fault. */
int st_rd_check_cpu_extra(st_reader *r, const char *table)
{
    for (size_t i = 0; i < sizeof cpu_extra_specs / sizeof cpu_extra_specs[0]; i++) {
        const table_spec *t = &cpu_extra_specs[i];
        if (strcmp(t->name, table) != 0) continue;
        int kind = st_rd_object_kind(r->db, t->name), rc;
        if (kind < 0) return st_rd_bad(t->name, sqlite3_errmsg(r->db));
        if (!kind) return 0;
        if ((rc = check_shape(r->db, t)) || (t->n_open && (rc = check_chunk_rows(r, t)))) return rc;
        return 1;
    }
    return st_set_error(ST_EINVAL, "no CPU table '%s'", table);
}
