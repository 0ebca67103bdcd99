/* export_cpu.c: the CPU capture's tables that `analyze export --csv` and
 * `--rows` write when the trace has one (docs/analyze.md, "export"): the
 * SQL row tables cpu_samples, cpu_switches, cpu_lost, cpu_stack_text and
 * cpu_frames, read through the library's own virtual tables (vtab.c,
 * registered on the reader's connection), so that the rows are those of
 * `analyze sql` by construction, and the trace's plain cpu_threads,
 * cpu_windows and cpu_blocks tables as they are. Shared by export_csv.c and
 * export_rows.c (export.h).
 */
#include <string.h>

#include <sqlite3.h>

#include "export.h"

static const an_col sample_cols[] = {{"thread", AN_T_INT, 0}, {"ts_ns", AN_T_INT, 0}, {"stage", AN_T_INT, 0},
                                     {"stack", AN_T_INT, 0},  {"stage_from_ranges", AN_T_INT, 0}};
static const an_col switch_cols[] = {{"thread", AN_T_INT, 0}, {"ts_ns", AN_T_INT, 0}, {"kind", AN_T_STR, 0}};
static const an_col lost_cols[] = {{"thread", AN_T_INT, 0}, {"ts_ns", AN_T_INT, 0}, {"n", AN_T_INT, 0}};
static const an_col stack_cols[] = {{"stack", AN_T_INT, 0}, {"n_frames", AN_T_INT, 0}, {"leaf", AN_T_STR, 0},
                                    {"frames", AN_T_STR, 0}};
static const an_col frame_cols[] = {{"stack", AN_T_INT, 0},      {"depth", AN_T_INT, 0}, {"addr", AN_T_INT, 0},
                                    {"function", AN_T_STR, 0},   {"symbol", AN_T_STR, 0},
                                    {"sym_offset", AN_T_INT, 0}, {"map", AN_T_INT, 0},   {"path", AN_T_STR, 0},
                                    {"file", AN_T_STR, 0},       {"line", AN_T_INT, 0}};
static const an_col thread_cols[] = {
    {"thread", AN_T_INT, 0},     {"os_tid", AN_T_INT, 0},        {"status", AN_T_STR, 0},
    {"reason", AN_T_STR, 0},     {"period_ns", AN_T_INT, 0},     {"ring_bytes", AN_T_INT, 0},
    {"refused_bytes", AN_T_INT, 0}, {"start_ns", AN_T_INT, 0},   {"cpu_ns", AN_T_INT, 0},
    {"switches", AN_T_INT, 0},   {"samples", AN_T_INT, 0},       {"lost", AN_T_INT, 0}};
static const an_col window_cols[] = {{"window", AN_T_INT, 0},   {"step", AN_T_INT, 0},    {"t0_ns", AN_T_INT, 0},
                                     {"t1_ns", AN_T_INT, 0},    {"os_tid", AN_T_INT, 0},  {"thread", AN_T_INT, 0},
                                     {"name", AN_T_STR, 0},     {"oncpu_ns", AN_T_INT, 0}, {"runq_ns", AN_T_INT, 0},
                                     {"slices", AN_T_INT, 0}};
static const an_col block_cols[] = {{"id", AN_T_INT, 0},      {"thread", AN_T_INT, 0}, {"t_ns", AN_T_INT, 0},
                                    {"seen_ns", AN_T_INT, 0}, {"syscall", AN_T_INT, 0}, {"name", AN_T_STR, 0},
                                    {"arg0", AN_T_INT, 0},    {"arg1", AN_T_INT, 0},   {"wchan", AN_T_STR, 0}};

#define COLS(c) c, (int)(sizeof c / sizeof c[0])
const an_export_cpu_table an_export_cpu_tables[AN_EXPORT_CPU_TABLES] = {
    {"cpu_threads", COLS(thread_cols),
     "SELECT thread, os_tid, status, reason, period_ns, ring_bytes, refused_bytes, start_ns, cpu_ns, switches, "
     "samples, lost FROM main.cpu_threads ORDER BY thread", 0},
    {"cpu_samples", COLS(sample_cols), "SELECT * FROM main.cpu_samples", 0},
    {"cpu_switches", COLS(switch_cols), "SELECT * FROM main.cpu_switches", 0},
    {"cpu_lost", COLS(lost_cols), "SELECT * FROM main.cpu_lost", 0},
    {"cpu_stack_text", COLS(stack_cols), "SELECT * FROM main.cpu_stack_text", 0},
    {"cpu_frames", COLS(frame_cols), "SELECT * FROM main.cpu_frames", 0},
    /* not among the five tables the reader requires: written when present */
    {"cpu_windows", COLS(window_cols),
     "SELECT window, step, t0_ns, t1_ns, os_tid, thread, name, oncpu_ns, runq_ns, slices FROM main.cpu_windows "
     "ORDER BY window, os_tid", 1},
    {"cpu_blocks", COLS(block_cols),
     "SELECT id, thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan FROM main.cpu_blocks ORDER BY id", 1},
};

int an_export_cpu_list(an_trace *t, int *tables, int *n)
{
    *n = 0;
    int has = st_reader_has_cpu(t->r);
    if (has < 0) {
        an_trace_fail(t);
        return AN_EXPORT_PRINTED;
    }
    if (!has) return 0;
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = ?1", -1, &st,
                           NULL) != SQLITE_OK) {
        an_error("%s: %s", t->path, sqlite3_errmsg(db));
        return AN_EXPORT_PRINTED;
    }
    for (int i = 0; i < AN_EXPORT_CPU_TABLES; i++) {
        int present = 1;
        if (an_export_cpu_tables[i].optional) {
            sqlite3_bind_text(st, 1, an_export_cpu_tables[i].name, -1, SQLITE_STATIC);
            present = sqlite3_step(st) == SQLITE_ROW;
            sqlite3_reset(st);
        }
        if (present) tables[(*n)++] = i;
    }
    sqlite3_finalize(st);
    return 0;
}

int an_export_each_cpu_row(an_trace *t, int table, an_export_cpu_row_fn fn, void *arg)
{
    static sqlite3 *registered; /* one trace per process: register its tables once */
    sqlite3 *db = st_reader_db(t->r);
    if (registered != db) {
        if (st_sql_register(db) != ST_OK) {
            an_trace_fail(t);
            return AN_EXPORT_PRINTED;
        }
        registered = db;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, an_export_cpu_tables[table].select, -1, &st, NULL) != SQLITE_OK) {
        an_error("%s: trace table '%s' cannot be read: %s", t->path, an_export_cpu_tables[table].name,
                 sqlite3_errmsg(db));
        return AN_EXPORT_PRINTED;
    }
    int rc, out = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if ((out = fn(st, arg)) != 0) break;
    if (!out && rc != SQLITE_DONE) {
        an_error("%s: %s", t->path, sqlite3_errmsg(db));
        out = AN_EXPORT_PRINTED;
    }
    sqlite3_finalize(st);
    return out;
}
