/* cmd_sql.c: `analyze sql FILE QUERY`: one read-only SQL query over a trace,
 * with the library's row tables (ranges, counters, gpu) and views (ranges_v,
 * counters_v, gpu_v) registered on the reader's own connection.
 *
 * The connection stays as the reader opened it: read-only, defensive,
 * trusted_schema off, triggers and extension loading off. On top of that the
 * query must be a single statement that sqlite3_stmt_readonly accepts, and
 * ATTACH is disabled (SQLITE_LIMIT_ATTACHED 0), so a query can only read
 * this trace. Rows stream in any format (text sizes its columns from the
 * first thousand rows).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "analyze.h"

static const char help[] =
    "usage: analyze sql [--format text|csv|json] FILE QUERY\n"
    "\n"
    "Runs one read-only SQL statement on the trace and prints its rows. Besides the\n"
    "trace's plain tables (meta, threads, stages, steps, counter_names, ...), these\n"
    "tables decode the chunks (docs/trace-format.md, \"Row views\"):\n"
    "  ranges(thread, stage, start_ns, dur_ns, end_ns, depth, step)\n"
    "  counters(thread, counter, ts_ns, value)\n"
    "  gpu(device, stream, kind, name, start_ns, dur_ns, bytes, correlation, thread, stage,\n"
    "      launch_tid, launch_thread)\n"
    "  flows(thread, ts_ns, dir, id): st_flow_out/st_flow_in records, dir 'out' or 'in'\n"
    "  ranges_v, counters_v, gpu_v: the same with thread, role, stage and counter names\n"
    "  joined in (gpu_v also end_ns, stage_kind; its name demangled, raw_name as recorded)\n"
    "  demangle(name): a C++ mangled name ('_Z...') as c++filt prints it, else as it is\n"
    "Constraints on thread and on start_ns/end_ns (ts_ns) are pushed down, so a window\n"
    "query decodes only the chunks that overlap it.\n"
    "\n"
    "example:\n"
    "  analyze sql run.sqlite \"SELECT stage_name, count(*), sum(dur_ns)/1e6 AS ms\n"
    "                         FROM ranges_v GROUP BY 1 ORDER BY ms DESC\"\n"
    "\n"
    "options:\n"
    "  --format F   text (default), csv or json\n";

static const an_opt opts[] = {
    {"format", 1, AN_OPT_FORMAT},
    {"help", 0, AN_OPT_HELP},
    {NULL, 0, 0},
};

/* Whether only blanks, semicolons and comments are left in s. */
static int only_trailer(const char *s)
{
    while (*s) {
        if (isspace((unsigned char)*s) || *s == ';') {
            s++;
        } else if (s[0] == '-' && s[1] == '-') {
            while (*s && *s != '\n') s++;
        } else if (s[0] == '/' && s[1] == '*') {
            const char *end = strstr(s + 2, "*/");
            if (!end) return 1;
            s = end + 2;
        } else {
            return 0;
        }
    }
    return 1;
}

static void put_value(an_table *tb, sqlite3_stmt *st, int col)
{
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_INTEGER: an_put_int(tb, sqlite3_column_int64(st, col)); break;
    case SQLITE_FLOAT: an_put_real(tb, sqlite3_column_double(st, col)); break;
    case SQLITE_NULL: an_put_null(tb); break;
    case SQLITE_BLOB: {
        /* As the SQL literal x'..', so it stays text in every format. */
        const unsigned char *b = sqlite3_column_blob(st, col);
        int n = sqlite3_column_bytes(st, col);
        char *hex = malloc((size_t)n * 2 + 4);
        if (!hex) {
            an_put_null(tb);
            break;
        }
        static const char digits[] = "0123456789abcdef";
        hex[0] = 'x';
        hex[1] = '\'';
        for (int i = 0; i < n; i++) {
            hex[2 + 2 * i] = digits[b[i] >> 4];
            hex[3 + 2 * i] = digits[b[i] & 15];
        }
        hex[2 + 2 * n] = '\'';
        hex[3 + 2 * n] = '\0';
        an_put_str(tb, hex);
        free(hex);
        break;
    }
    default: an_put_str(tb, (const char *)sqlite3_column_text(st, col)); break;
    }
}

/* Denies ATTACH / DETACH at prepare time, with a message that says why
 * (SQLITE_LIMIT_ATTACHED 0 alone only fails when the statement runs). */
static int authorize(void *arg, int action, const char *a, const char *b, const char *c, const char *d)
{
    (void)a, (void)b, (void)c, (void)d;
    if (action == SQLITE_ATTACH || action == SQLITE_DETACH) {
        *(int *)arg = 1;
        return SQLITE_DENY;
    }
    return SQLITE_OK;
}

static int run_query(an_trace *t, const char *query, an_format fmt)
{
    sqlite3 *db = st_reader_db(t->r);
    if (st_sql_register(db) != ST_OK) {
        an_error("sql: %s: %s", t->path, st_last_error());
        return AN_EXIT_USAGE;
    }
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    int attach = 0;
    sqlite3_set_authorizer(db, authorize, &attach);
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    if (sqlite3_prepare_v2(db, query, -1, &st, &tail) != SQLITE_OK) {
        if (attach) an_error("sql: ATTACH and DETACH are not allowed: a query reads only this trace");
        else an_error("sql: %s", sqlite3_errmsg(db));
        return AN_EXIT_USAGE;
    }
    if (!st) {
        an_error("sql: the query is empty");
        return AN_EXIT_USAGE;
    }
    if (tail && !only_trailer(tail)) {
        sqlite3_finalize(st);
        an_error("sql: give one statement (there is more after the first ';')");
        return AN_EXIT_USAGE;
    }
    if (!sqlite3_stmt_readonly(st)) {
        sqlite3_finalize(st);
        an_error("sql: only read-only statements are allowed (SELECT, WITH ... SELECT, read-only PRAGMA)");
        return AN_EXIT_USAGE;
    }
    int n_cols = sqlite3_column_count(st);
    an_col *cols = calloc((size_t)(n_cols ? n_cols : 1), sizeof *cols);
    an_out *out = an_out_new(stdout, fmt);
    if (!cols || !out) {
        free(cols);
        an_out_finish(out);
        sqlite3_finalize(st);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    /* Repeated column names (SELECT 1, 1) get a suffix: JSON objects need
     * distinct keys. */
    char (*renamed)[80] = calloc((size_t)(n_cols ? n_cols : 1), sizeof *renamed);
    for (int i = 0; i < n_cols && renamed; i++) {
        const char *name = sqlite3_column_name(st, i);
        cols[i] = (an_col){name ? name : "?", AN_T_ANY, 0};
        for (int k = 2;; k++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = strcmp(cols[j].name, cols[i].name) == 0;
            if (!taken) break;
            snprintf(renamed[i], sizeof renamed[i], "%.60s_%d", name ? name : "?", k);
            cols[i].name = renamed[i];
        }
    }
    an_table *tb = n_cols ? an_table_new(out, "rows", cols, n_cols) : NULL;
    int rc, status = AN_EXIT_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < n_cols; i++) put_value(tb, st, i);
        an_row_end(tb);
    }
    if (rc != SQLITE_DONE) {
        /* Errors of the row tables (a corrupt chunk) come through SQLite. */
        an_error("sql: %s: %s", t->path, sqlite3_errmsg(db));
        status = AN_EXIT_USAGE;
    }
    an_table_end(tb);
    if (an_out_finish(out) && !status) {
        an_error("sql: cannot write the output");
        status = AN_EXIT_FAIL;
    }
    sqlite3_finalize(st);
    free(cols);
    free(renamed);
    return status;
}

static int check(an_cmd *c)
{
    return c->args.n_pos != 2 ? an_usage_error("sql", "give a trace file and one query") : AN_EXIT_OK;
}

static int work(an_cmd *c)
{
    an_trace t;
    int rc = an_trace_open(&t, c->args.pos[0]);
    if (!rc) {
        rc = run_query(&t, c->args.pos[1], c->format);
        an_trace_close(&t);
    }
    return rc;
}

const an_cmd_def an_cmd_sql = {
    .name = "sql",
    .usage = help,
    .flags = AN_RUN_FORMAT,
    .opts = opts,
    .check = check,
    .work = work,
};
