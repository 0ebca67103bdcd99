/* export_rows.c: `analyze export --rows OUT.sqlite`: a new SQLite file with
 * the trace's tables as plain rows (plus the views ranges_v, counters_v,
 * gpu_v; with a CPU capture its tables, export_cpu.c, and cpu_samples_v), for tools that cannot load the extension (pandas on a Python
 * without extension loading). Written to a temporary name and renamed when
 * complete. One of the converters under cmd_export.c (export.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "demangle.h"
#include "export.h"

static const char rows_schema[] =
    "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;\n"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE threads(id INTEGER PRIMARY KEY, os_tid INTEGER, name TEXT, role TEXT, device INTEGER,\n"
    "  rank INTEGER, dropped INTEGER);\n"
    "CREATE TABLE stages(id INTEGER PRIMARY KEY, name TEXT, kind TEXT);\n"
    "CREATE TABLE steps(step INTEGER PRIMARY KEY, ts_ns INTEGER, tokens INTEGER);\n"
    "CREATE TABLE counter_names(id INTEGER PRIMARY KEY, name TEXT, unit TEXT);\n"
    "CREATE TABLE ranges(thread INTEGER, stage INTEGER, start_ns INTEGER, dur_ns INTEGER, end_ns INTEGER,\n"
    "  depth INTEGER, step INTEGER);\n"
    "CREATE TABLE counters(thread INTEGER, counter INTEGER, ts_ns INTEGER, value NUMERIC);\n"
    "CREATE VIEW ranges_v AS SELECT r.thread, r.stage, r.start_ns, r.dur_ns, r.end_ns, r.depth, r.step,\n"
    "  t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS kind\n"
    "  FROM ranges AS r LEFT JOIN threads AS t ON t.id = r.thread LEFT JOIN stages AS s ON s.id = r.stage;\n"
    "CREATE VIEW counters_v AS SELECT c.thread, c.counter, c.ts_ns, c.value,\n"
    "  t.name AS thread_name, n.name AS counter_name, n.unit AS unit\n"
    "  FROM counters AS c LEFT JOIN threads AS t ON t.id = c.thread\n"
    "  LEFT JOIN counter_names AS n ON n.id = c.counter;\n"
    "CREATE TABLE gpu(device INTEGER, stream INTEGER, kind TEXT, name TEXT, start_ns INTEGER, dur_ns INTEGER,\n"
    "  bytes INTEGER, correlation INTEGER, thread INTEGER, stage INTEGER, launch_tid INTEGER, launch_thread TEXT);\n"
    "CREATE TABLE gpu_api(thread INTEGER, os_tid INTEGER, api TEXT, name TEXT, cbid INTEGER, start_ns INTEGER,\n"
    "  dur_ns INTEGER, correlation INTEGER, stage INTEGER);\n"
    "CREATE TABLE gpu_names(raw_name TEXT PRIMARY KEY, name TEXT);\n"
    "CREATE VIEW gpu_v AS SELECT g.device, g.stream, g.kind, coalesce(n.name, g.name) AS name, g.start_ns, g.dur_ns,\n"
    "  g.start_ns + g.dur_ns AS end_ns, g.bytes, g.correlation, g.thread, g.stage,\n"
    "  t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS stage_kind, g.name AS raw_name,\n"
    "  g.launch_tid, g.launch_thread\n"
    "  FROM gpu AS g LEFT JOIN threads AS t ON t.id = g.thread LEFT JOIN stages AS s ON s.id = g.stage\n"
    "  LEFT JOIN gpu_names AS n ON n.raw_name = g.name;\n";

/* demangle(name) on the output connection, for gpu_names: what the
 * extension's demangle() returns (demangle.h's rule). */
static void sql_demangle(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *name = (const char *)sqlite3_value_text(argv[0]);
    if (name) sqlite3_result_text(ctx, an_demangle(name), -1, SQLITE_TRANSIENT);
    else sqlite3_result_null(ctx);
}

static void bind_opt(sqlite3_stmt *ins, int col, int64_t v)
{
    if (v >= 0) sqlite3_bind_int64(ins, col, v);
    else sqlite3_bind_null(ins, col);
}

/* The rows of gpu and gpu_api, as in CSV; ROW_REFUSED when SQLite refuses one. */
#define ROW_REFUSED (-10000) /* not an ST_ code: tells a write failure from a read failure */
static int rows_gpu_row(const st_gpu_row *g, void *arg)
{
    sqlite3_stmt *ins = arg;
    char buf[96];
    sqlite3_bind_int64(ins, 1, g->device);
    sqlite3_bind_int64(ins, 2, g->stream);
    sqlite3_bind_text(ins, 3, st_gpu_kind_name(g->rec.kind), -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 4, an_export_gpu_row_name(g, buf, sizeof buf), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 5, g->rec.start_ns);
    sqlite3_bind_int64(ins, 6, g->rec.dur_ns);
    sqlite3_bind_int64(ins, 7, (sqlite3_int64)g->rec.bytes);
    sqlite3_bind_int64(ins, 8, g->rec.correlation);
    bind_opt(ins, 9, g->thread);
    bind_opt(ins, 10, g->stage);
    bind_opt(ins, 11, g->launch_os_tid > 0 ? g->launch_os_tid : -1);
    if (g->launch_thread) sqlite3_bind_text(ins, 12, g->launch_thread, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(ins, 12);
    int ok = sqlite3_step(ins) == SQLITE_DONE;
    sqlite3_reset(ins);
    return ok ? 0 : ROW_REFUSED;
}

static int rows_api_row(const st_gpu_row *g, void *arg)
{
    sqlite3_stmt *ins = arg;
    bind_opt(ins, 1, g->thread);
    sqlite3_bind_int64(ins, 2, g->rec.os_tid);
    sqlite3_bind_text(ins, 3, g->stream == 1 ? "driver" : "runtime", -1, SQLITE_STATIC);
    if (g->name) sqlite3_bind_text(ins, 4, g->name, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(ins, 4);
    sqlite3_bind_int64(ins, 5, g->rec.copy_kind);
    sqlite3_bind_int64(ins, 6, g->rec.start_ns);
    sqlite3_bind_int64(ins, 7, g->rec.dur_ns);
    sqlite3_bind_int64(ins, 8, g->rec.correlation);
    bind_opt(ins, 9, g->stage);
    int ok = sqlite3_step(ins) == SQLITE_DONE;
    sqlite3_reset(ins);
    return ok ? 0 : ROW_REFUSED;
}

/* The view of the extension (vtab.c), over the plain copies. */
static const char cpu_view_sql[] =
    "CREATE VIEW cpu_samples_v AS SELECT c.thread, c.ts_ns, c.stage, c.stack, c.stage_from_ranges,\n"
    "  t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS kind, x.leaf AS leaf, x.frames AS frames\n"
    "  FROM cpu_samples AS c LEFT JOIN threads AS t ON t.id = c.thread LEFT JOIN stages AS s ON s.id = c.stage\n"
    "  LEFT JOIN cpu_stack_text AS x ON x.stack = c.stack;\n";

static int rows_cpu_row(sqlite3_stmt *row, void *arg)
{
    sqlite3_stmt *ins = arg;
    for (int i = 0; i < sqlite3_column_count(row); i++) sqlite3_bind_value(ins, i + 1, sqlite3_column_value(row, i));
    int ok = sqlite3_step(ins) == SQLITE_DONE;
    sqlite3_reset(ins);
    return ok ? 0 : ROW_REFUSED;
}

/* The CPU capture's tables (none without one): created, then filled. */
static int insert_cpu(sqlite3 *out, an_trace *t)
{
    int tables[AN_EXPORT_CPU_TABLES], n;
    int rc = an_export_cpu_list(t, tables, &n);
    if (rc || !n) return rc;
    sqlite3_stmt *ins = NULL;
    for (int k = 0; k < n && !rc; k++) {
        const an_export_cpu_table *c = &an_export_cpu_tables[tables[k]];
        sqlite3_str *create = sqlite3_str_new(out), *insert = sqlite3_str_new(out);
        sqlite3_str_appendf(create, "CREATE TABLE %s(", c->name);
        sqlite3_str_appendf(insert, "INSERT INTO %s VALUES (", c->name);
        for (int i = 0; i < c->n_cols; i++) {
            sqlite3_str_appendf(create, "%s%s %s", i ? ", " : "", c->cols[i].name,
                                c->cols[i].type == AN_T_STR ? "TEXT" : "INTEGER");
            sqlite3_str_appendf(insert, "%s?", i ? ", " : "");
        }
        sqlite3_str_appendall(create, ")");
        sqlite3_str_appendall(insert, ")");
        char *create_sql = sqlite3_str_finish(create), *insert_sql = sqlite3_str_finish(insert);
        if (!create_sql || !insert_sql || sqlite3_exec(out, create_sql, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_prepare_v2(out, insert_sql, -1, &ins, NULL) != SQLITE_OK)
            rc = ROW_REFUSED;
        sqlite3_free(create_sql);
        sqlite3_free(insert_sql);
        if (!rc) rc = an_export_each_cpu_row(t, tables[k], rows_cpu_row, ins);
        sqlite3_finalize(ins);
        ins = NULL;
    }
    if (!rc && sqlite3_exec(out, cpu_view_sql, NULL, NULL, NULL) != SQLITE_OK) rc = ROW_REFUSED;
    return rc;
}

/* The an_table interface is for text formats; rows go to SQLite through a
 * prepared INSERT per table, bound from the same reader data. */
static int insert_all(sqlite3 *out, an_trace *t, an_progress *p)
{
    st_reader *r = t->r;
    sqlite3_stmt *ins = NULL, *sel = NULL;
    int rc = 0;
#define PREP(sql) (sqlite3_finalize(ins), ins = NULL, sqlite3_prepare_v2(out, sql, -1, &ins, NULL) == SQLITE_OK ? 0 : -1)
#define STEP() (sqlite3_step(ins) == SQLITE_DONE ? (sqlite3_reset(ins), 0) : -1)
    if (PREP("INSERT INTO meta VALUES (?, ?)")) goto fail;
    if (sqlite3_prepare_v2(st_reader_db(r), "SELECT key, value FROM main.meta", -1, &sel, NULL) != SQLITE_OK) goto fail;
    while (sqlite3_step(sel) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(sel, 0), *v = (const char *)sqlite3_column_text(sel, 1);
        sqlite3_bind_text(ins, 1, k ? k : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 2, v ? v : "", -1, SQLITE_TRANSIENT);
        if (STEP()) goto fail;
    }
    sqlite3_finalize(sel);
    sel = NULL;
    if (PREP("INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?, ?)")) goto fail;
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
        const st_thread_info *th = st_reader_thread(r, i);
        sqlite3_bind_int64(ins, 1, th->id);
        sqlite3_bind_int64(ins, 2, th->os_tid);
        sqlite3_bind_text(ins, 3, th->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 4, th->role, -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 5, th->device);
        sqlite3_bind_int64(ins, 6, th->rank);
        sqlite3_bind_int64(ins, 7, (sqlite3_int64)th->dropped);
        if (STEP()) goto fail;
    }
    if (PREP("INSERT INTO stages VALUES (?, ?, ?)")) goto fail;
    for (uint32_t i = 0; i < st_reader_n_stages(r); i++) {
        const st_stage_info *s = st_reader_stage(r, i);
        sqlite3_bind_int64(ins, 1, s->id);
        sqlite3_bind_text(ins, 2, s->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 3, st_kind_name(s->kind), -1, SQLITE_STATIC);
        if (STEP()) goto fail;
    }
    if (PREP("INSERT INTO steps VALUES (?, ?, ?)")) goto fail;
    for (uint32_t i = 0; i < st_reader_n_steps(r); i++) {
        const st_step_info *s = st_reader_step(r, i);
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)s->step);
        sqlite3_bind_int64(ins, 2, s->ts_ns);
        sqlite3_bind_int64(ins, 3, (sqlite3_int64)s->tokens);
        if (STEP()) goto fail;
    }
    if (PREP("INSERT INTO counter_names VALUES (?, ?, ?)")) goto fail;
    for (uint32_t i = 0; i < st_reader_n_counters(r); i++) {
        const st_counter_info *c = st_reader_counter(r, i);
        sqlite3_bind_int64(ins, 1, c->id);
        sqlite3_bind_text(ins, 2, c->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 3, c->unit, -1, SQLITE_STATIC);
        if (STEP()) goto fail;
    }
    if (PREP("INSERT INTO ranges VALUES (?, ?, ?, ?, ?, ?, ?)")) goto fail;
    st_range_iter *ri = NULL;
    rc = st_range_iter_open(&ri, r, -1, INT64_MIN, INT64_MAX);
    st_range x;
    while (!rc && (rc = st_range_iter_next(ri, &x)) == 1) {
        rc = 0;
        an_progress_add(p, 1);
        sqlite3_bind_int64(ins, 1, x.thread);
        sqlite3_bind_int64(ins, 2, x.stage);
        sqlite3_bind_int64(ins, 3, x.start_ns);
        sqlite3_bind_int64(ins, 4, x.dur_ns);
        sqlite3_bind_int64(ins, 5, x.start_ns + x.dur_ns);
        sqlite3_bind_int64(ins, 6, x.depth);
        int has;
        uint64_t step = an_step_of(t, x.start_ns, &has);
        if (has) sqlite3_bind_int64(ins, 7, (sqlite3_int64)step);
        else sqlite3_bind_null(ins, 7);
        if (STEP()) {
            st_range_iter_close(ri);
            goto fail;
        }
    }
    st_range_iter_close(ri);
    if (rc < 0) goto done;
    if (PREP("INSERT INTO counters VALUES (?, ?, ?, ?)")) goto fail;
    st_sample_iter *si = NULL;
    rc = st_sample_iter_open(&si, r, -1, INT64_MIN, INT64_MAX);
    st_sample_row s;
    while (!rc && (rc = st_sample_iter_next(si, &s)) == 1) {
        rc = 0;
        an_progress_add(p, 1);
        sqlite3_bind_int64(ins, 1, s.thread);
        sqlite3_bind_int64(ins, 2, s.counter);
        sqlite3_bind_int64(ins, 3, s.ts_ns);
        if (isnan(s.value)) sqlite3_bind_null(ins, 4); /* SQLite stores NaN as NULL anyway */
        else sqlite3_bind_double(ins, 4, s.value);
        if (STEP()) {
            st_sample_iter_close(si);
            goto fail;
        }
    }
    st_sample_iter_close(si);
    if (rc < 0) goto done;
    if (PREP("INSERT INTO gpu VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) goto fail;
    rc = an_export_each_gpu_row(t, 0, rows_gpu_row, ins);
    if (rc == ROW_REFUSED) goto fail;
    if (rc < 0) goto done;
    /* the kernels' names demangled, for gpu_v (the extension demangles them as it reads) */
    if (sqlite3_create_function(out, "demangle", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_demangle, NULL, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(out,
                     "INSERT INTO gpu_names SELECT name, demangle(name) FROM gpu "
                     "WHERE kind = 'kernel' AND substr(name, 1, 2) = '_Z' GROUP BY name",
                     NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    if (PREP("INSERT INTO gpu_api VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")) goto fail;
    rc = an_export_each_gpu_row(t, 1, rows_api_row, ins);
    if (rc == ROW_REFUSED) goto fail;
    if (rc < 0) goto done;
    rc = insert_cpu(out, t);
    if (rc == ROW_REFUSED) goto fail;
done:
    sqlite3_finalize(ins);
    return rc < 0 ? rc : 0;
fail:
    an_error("export: writing rows: %s", sqlite3_errmsg(out));
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    return ST_EIO;
#undef PREP
#undef STEP
}

int an_export_rows(an_trace *t, const char *path, int overwrite)
{
    int kind = an_path_kind(path);
    if (kind == AN_PATH_OTHER || kind == AN_PATH_DIR) {
        an_error("export: --rows %s: not a regular file (a SQLite database is written beside it and renamed)", path);
        return AN_EXIT_USAGE;
    }
    if (an_out_allowed("export", path, overwrite)) return AN_EXIT_USAGE;
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp) return AN_EXIT_FAIL;
    snprintf(tmp, len, "%s.tmp%ld", path, (long)getpid());
    unlink(tmp);
    sqlite3 *out = NULL;
    int rc = an_tmp_add_file(tmp); /* a signal removes it */
    if (rc) {
        free(tmp);
        return rc;
    }
    if (sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK ||
        sqlite3_exec(out, rows_schema, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(out, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        an_error("export: cannot create %s: %s", path, out ? sqlite3_errmsg(out) : "out of memory");
        rc = AN_EXIT_USAGE;
    }
    if (!rc) {
        an_progress p;
        an_progress_start(&p, "export --rows", t->n_ranges_hint + t->n_samples_hint);
        int st = insert_all(out, t, &p);
        an_progress_end(&p);
        if (st == ST_EIO) rc = AN_EXIT_FAIL;
        else if (st == AN_EXPORT_PRINTED) rc = AN_EXIT_USAGE; /* its line is out */
        else if (st) rc = an_trace_fail(t);
        else if (sqlite3_exec(out, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            an_error("export: cannot write %s: %s", path, sqlite3_errmsg(out));
            rc = AN_EXIT_FAIL;
        }
    }
    if (sqlite3_close(out) != SQLITE_OK && !rc) rc = AN_EXIT_FAIL;
    if (!rc && rename(tmp, path) != 0) {
        an_error("export: cannot write %s: %s", path, strerror(errno));
        rc = AN_EXIT_FAIL;
    }
    if (rc) unlink(tmp);
    an_tmp_forget(tmp);
    free(tmp);
    return rc;
}
