/* vtab.c: the SQL face of a trace. A SQLite virtual-table module that shows
 * the chunk tables as plain row tables, decoded through the reader
 * (st_reader.h), so any SQL sees one row per completed range, counter sample
 * and (later) GPU activity record:
 *
 *   ranges(thread, stage, start_ns, dur_ns, end_ns, depth, step)
 *   counters(thread, counter, ts_ns, value)
 *   gpu(device, stream, kind, name, start_ns, dur_ns, bytes, correlation, thread, stage, launch_tid,
 *       launch_thread)
 *   flows(thread, ts_ns, dir, id)
 *   cpu_samples(thread, ts_ns, stage, stack, stage_from_ranges, source)
 *   cpu_switches(thread, ts_ns, kind)
 *   cpu_ranges(thread, stage, start_ns, dur_ns, depth, on_cpu_ns, preempted_ns, blocked_ns)
 *   cpu_lost(thread, ts_ns, n)
 *   cpu_frames(stack, depth, addr, function, symbol, sym_offset, map, path)
 *   cpu_stack_text(stack, n_frames, leaf, frames)
 *
 * plus the TEMP views ranges_v, counters_v, gpu_v and cpu_samples_v, which
 * join the names in, and the SQL function demangle(name): a C++ mangled
 * name ("_Z...") as people read it, through libstdc++'s __cxa_demangle,
 * any other name (and one that does not demangle) as it is. gpu_v's name
 * is demangle(gpu.name), its raw_name gpu.name. libstdc++ is found at the
 * first call (already loaded, else dlopen of libstdc++.so.6), so that the
 * library and the extension need no C++ runtime to load; without one,
 * demangle returns names as they are. The cpu_ tables read the CPU capture (st_cpu_iter, one
 * thread at a time in ascending id; the stacks and frame names of the
 * reader) and are empty in a trace without it.
 * The tables are eponymous-only (`SELECT * FROM ranges` needs no CREATE
 * VIRTUAL TABLE), read-only, and innocuous, so views may use them with
 * trusted_schema off. Each table opens its own st_reader over the connection
 * when SQLite first connects it (once per connection); the reader re-checks
 * the trace like any untrusted file. The small tables (threads, stages,
 * counters, steps) are thus a snapshot: on a trace still being written, a
 * thread or stage registered after that makes queries on this connection
 * fail ("unknown thread"); a new connection sees it.
 *
 * Constraints on thread and on start_ns / end_ns (ts_ns for counters) become
 * the iterator's thread and time window, so a windowed query decodes only the
 * chunks that overlap the window. The window is conservative; the cursor then
 * applies every pushed constraint exactly to the decoded rows, and SQLite
 * re-checks them all (no constraint is omitted), so a value of an odd type
 * can at worst make the filter looser, never drop a row.
 *
 * A row's rowid is its chunk's id times 2^32 plus its index in the chunk,
 * the same in every scan, since SQLite merges the scans of an OR by rowid.
 *
 * Built twice: into libstagetrace (entry point st_sql_register) and, with
 * -DST_SQLITE_EXTENSION, into the loadable extension stagetrace_ext.so
 * (entry point sqlite3_stagetraceext_init, for `.load build/stagetrace_ext`).
 * The tables are documented in docs/trace-format.md, "Row views".
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "st_reader.h"
#include "st_sqlite.h"

#ifdef ST_SQLITE_EXTENSION
SQLITE_EXTENSION_INIT1
#endif

/* ---- the tables ---- */

enum table_id {
    TABLE_RANGES, TABLE_COUNTERS, TABLE_GPU, TABLE_FLOWS,
    TABLE_CPU_SAMPLES, TABLE_CPU_SWITCHES, TABLE_CPU_LOST, TABLE_CPU_FRAMES, TABLE_CPU_STACK_TEXT,
    TABLE_CPU_RANGES
};

enum { R_THREAD, R_STAGE, R_START, R_DUR, R_END, R_DEPTH, R_STEP, R_NCOLS };
enum { C_THREAD, C_COUNTER, C_TS, C_VALUE, C_NCOLS };
enum { F_THREAD, F_TS, F_DIR, F_ID, F_NCOLS };
/* The three tables of CPU records share thread and ts_ns as columns 0, 1. */
enum { CR_THREAD, CR_TS };
enum { CS_THREAD, CS_TS, CS_STAGE, CS_STACK, CS_FROM_RANGES, CS_SOURCE };
enum { CW_THREAD, CW_TS, CW_KIND };
enum { CL_THREAD, CL_TS, CL_N };
enum { CF_STACK, CF_DEPTH, CF_ADDR, CF_FUNCTION, CF_SYMBOL, CF_SYM_OFFSET, CF_MAP, CF_PATH, CF_FILE, CF_LINE };
enum { CT_STACK, CT_N_FRAMES, CT_LEAF, CT_FRAMES };
enum { CG_THREAD, CG_STAGE, CG_START, CG_DUR, CG_DEPTH, CG_ON, CG_PREEMPTED, CG_BLOCKED };

#define MAX_COLS 10
#define MAX_PUSHED 16 /* constraints passed to xFilter; more are left to SQLite */

typedef struct table_def {
    enum table_id id;
    const char *name;
    const char *schema;
    /* Columns whose constraints the cursor applies: integers, never NULL. */
    unsigned filter_cols;
    /* Of those, the ones that narrow what is decoded (thread, time). */
    unsigned window_cols;
    /* Lower bound of each filtered column's domain (ids, depths and
     * durations are never negative). */
    int64_t domain_lo[MAX_COLS];
} table_def;

#define BIT(c) (1u << (c))

static const table_def table_defs[] = {
    {TABLE_RANGES, "ranges",
     "CREATE TABLE x(thread INTEGER, stage INTEGER, start_ns INTEGER, dur_ns INTEGER, "
     "end_ns INTEGER, depth INTEGER, step INTEGER)",
     BIT(R_THREAD) | BIT(R_STAGE) | BIT(R_START) | BIT(R_DUR) | BIT(R_END) | BIT(R_DEPTH),
     BIT(R_THREAD) | BIT(R_START) | BIT(R_END),
     {[R_THREAD] = 0, [R_STAGE] = 0, [R_START] = INT64_MIN, [R_DUR] = 0, [R_END] = INT64_MIN,
      [R_DEPTH] = 0}},
    {TABLE_COUNTERS, "counters",
     "CREATE TABLE x(thread INTEGER, counter INTEGER, ts_ns INTEGER, value NUMERIC)",
     BIT(C_THREAD) | BIT(C_COUNTER) | BIT(C_TS), BIT(C_THREAD) | BIT(C_TS),
     {[C_THREAD] = 0, [C_COUNTER] = 0, [C_TS] = INT64_MIN}},
    /* GPU activity (CUPTI kernels, copies, memsets, syncs) from the
     * optional gpu_chunks table; empty without it. thread and stage are
     * the launching thread and its innermost open stage (NULL unknown);
     * launch_tid and launch_thread the launching call's OS thread and its
     * gpu_threads name (NULL unknown), for threads the trace did not register. */
    {TABLE_GPU, "gpu",
     "CREATE TABLE x(device INTEGER, stream INTEGER, kind TEXT, name TEXT, start_ns INTEGER, "
     "dur_ns INTEGER, bytes INTEGER, correlation INTEGER, thread INTEGER, stage INTEGER, launch_tid INTEGER, "
     "launch_thread TEXT)",
     0, 0, {0}},
    /* Flows from the optional flow_chunks table; empty without it. dir is
     * 'out' or 'in'; id the program's 64-bit id as a signed integer. */
    {TABLE_FLOWS, "flows", "CREATE TABLE x(thread INTEGER, ts_ns INTEGER, dir TEXT, id INTEGER)",
     BIT(F_THREAD) | BIT(F_TS), BIT(F_THREAD) | BIT(F_TS), {[F_THREAD] = 0, [F_TS] = INT64_MIN}},
    /* The CPU capture (cpu_chunks, cpu_stacks, cpu_symbols, cpu_maps);
     * empty without it. A sample's stage is NULL when no range was open;
     * stage_from_ranges 1 when the writer stored "unknown" and the reader
     * placed it from the thread's ranges; source 'perf', 'timer' (the
     * signal sampler) or 'python-frames' (st_cpu_sample_add's). */
    {TABLE_CPU_SAMPLES, "cpu_samples",
     "CREATE TABLE x(thread INTEGER, ts_ns INTEGER, stage INTEGER, stack INTEGER, stage_from_ranges INTEGER, "
     "source TEXT)",
     BIT(CS_THREAD) | BIT(CS_TS) | BIT(CS_STACK), BIT(CS_THREAD) | BIT(CS_TS),
     {[CS_THREAD] = 0, [CS_TS] = INT64_MIN, [CS_STACK] = 0}},
    /* kind: 'in', 'out_blocked' or 'out_preempted' */
    {TABLE_CPU_SWITCHES, "cpu_switches", "CREATE TABLE x(thread INTEGER, ts_ns INTEGER, kind TEXT)",
     BIT(CW_THREAD) | BIT(CW_TS), BIT(CW_THREAD) | BIT(CW_TS), {[CW_THREAD] = 0, [CW_TS] = INT64_MIN}},
    {TABLE_CPU_LOST, "cpu_lost", "CREATE TABLE x(thread INTEGER, ts_ns INTEGER, n INTEGER)",
     BIT(CL_THREAD) | BIT(CL_TS), BIT(CL_THREAD) | BIT(CL_TS), {[CL_THREAD] = 0, [CL_TS] = INT64_MIN}},
    /* One row per frame of each interned stack, depth 0 the innermost (the
     * sampled ip); function as `analyze cpu` names it (the symbol, else
     * [file], else [unknown]); map and path NULL outside every mapping;
     * file and line the address's source line (cpu_lines depth 0), NULL
     * without one. */
    {TABLE_CPU_FRAMES, "cpu_frames",
     "CREATE TABLE x(stack INTEGER, depth INTEGER, addr INTEGER, function TEXT, symbol TEXT, sym_offset INTEGER, "
     "map INTEGER, path TEXT, file TEXT, line INTEGER)",
     BIT(CF_STACK) | BIT(CF_DEPTH), BIT(CF_STACK), {[CF_STACK] = 0, [CF_DEPTH] = 0}},
    /* One row per interned stack: its leaf function and its functions
     * joined by ';', outermost first (the folded-stack order). */
    {TABLE_CPU_STACK_TEXT, "cpu_stack_text",
     "CREATE TABLE x(stack INTEGER, n_frames INTEGER, leaf TEXT, frames TEXT)", BIT(CT_STACK), BIT(CT_STACK),
     {[CT_STACK] = 0}},
    /* Each range of a thread with switch records (cpu_threads.status
     * 'perf') with its own on-CPU, preempted and blocked time over its
     * whole span [start, end), nested ranges' time included: st_cpu_account
     * over the thread's off-CPU intervals, as analyze cpu splits time. */
    {TABLE_CPU_RANGES, "cpu_ranges",
     "CREATE TABLE x(thread INTEGER, stage INTEGER, start_ns INTEGER, dur_ns INTEGER, depth INTEGER, "
     "on_cpu_ns INTEGER, preempted_ns INTEGER, blocked_ns INTEGER)",
     BIT(CG_THREAD), BIT(CG_THREAD), {[CG_THREAD] = 0}},
};

static int is_cpu_record_table(enum table_id id)
{
    return id == TABLE_CPU_SAMPLES || id == TABLE_CPU_SWITCHES || id == TABLE_CPU_LOST;
}

typedef struct st_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    const table_def *def;
    st_reader *reader;
    int has_gpu_chunks;
} st_vtab;

typedef struct st_cursor {
    sqlite3_vtab_cursor base;
    st_range_iter *ranges;
    st_sample_iter *samples;
    st_gpu_iter *gpus;
    st_gpu_row gpu;
    st_flow_iter *flows;
    st_flow_row flow;
    /* CPU records: one thread's iterator at a time (threads[ti]) */
    st_cpu_iter *cpu;
    st_cpu_row cpu_row;
    /* CPU stacks: the ids to visit (stacks[si]), the current one's frames */
    int cpu_stacks_on;
    uint64_t *stacks;
    uint32_t n_stacks, si, depth;
    const uint64_t *frames;
    uint32_t n_frames;
    st_cpu_frame frame;   /* cpu_frames: the current frame */
    const st_cpu_line *line; /* cpu_frames: its source line, NULL: none */
    const char *function; /* its function: frame.name or label */
    char label[512];
    char *demangled; /* the current frame's function, demangled (free) */
    char *text, *leaf;    /* cpu_stack_text: the current stack's functions joined, its leaf */
    st_range range;
    st_sample_row sample;
    /* cpu_ranges: the current thread's ranges and their shares */
    int cpu_ranges_on;
    st_range *cr;
    st_cpu_share *cr_share;
    size_t cr_n, cr_i;
    int eof;
    sqlite3_int64 rowid;
    int64_t lo[MAX_COLS], hi[MAX_COLS]; /* the row filter: lo <= column <= hi */
    /* Ordered scans of ranges (see "ordered scans" below). */
    int order;                 /* ORDER_* */
    uint32_t *threads, n_threads, ti; /* thread ids in ascending order; the one scanned */
    int64_t stage_cur;         /* the stage this pass emits; -1: a pass that only finds the first */
    int64_t stage_next;        /* the smallest stage above stage_cur seen in this block */
    int64_t t0, t1;            /* the iterator's time window */
} st_cursor;

/* ---- ordered scans ----
 * A GROUP BY or ORDER BY on thread and/or stage makes SQLite sort every row
 * (10 M rows: seconds, most of the query). The cursor can instead hand rows
 * out already grouped, by scanning again instead of sorting: one iterator
 * per thread (in ascending id) for thread order, and one pass per stage for
 * stage order, each pass emitting that stage's rows and noting the next
 * stage id seen (a first pass only finds the smallest). Decoding is cheap
 * next to SQLite's sorter, so k stages cost k + 1 decodes of the rows and
 * no sort, and no memory grows with the trace. Rows within one group come
 * in the iterator's order (by end time per thread), so only these
 * orderings, ascending, are offered: (thread), (thread, stage), (stage),
 * (stage, thread). */
enum { ORDER_NONE, ORDER_THREAD, ORDER_THREAD_STAGE, ORDER_STAGE, ORDER_STAGE_THREAD };
#define STAGE_NONE INT64_MAX

static int vt_error(st_vtab *vt, int st_code)
{
    sqlite3_free(vt->base.zErrMsg);
    vt->base.zErrMsg = sqlite3_mprintf("%s", st_last_error());
    return st_code == ST_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
}

static int is_table(sqlite3 *db, const char *name, int *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT type = 'table' FROM main.sqlite_schema WHERE name = ?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int vt_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **out, char **err)
{
    const table_def *def = aux;
    st_vtab *vt = sqlite3_malloc(sizeof *vt);
    if (!vt) return SQLITE_NOMEM;
    memset(vt, 0, sizeof *vt);
    vt->db = db;
    vt->def = def;
    int rc = st_reader_open_db(&vt->reader, db);
    if (rc) {
        *err = sqlite3_mprintf("stagetrace table '%s': %s", def->name, st_last_error());
        sqlite3_free(vt);
        return rc == ST_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
    }
    int sql_rc = SQLITE_OK;
    if (def->id == TABLE_GPU) sql_rc = is_table(db, "gpu_chunks", &vt->has_gpu_chunks);
    /* Row ids come from chunk ids (see chunk_rowid): st_reader_open_db has
     * already refused a trace whose chunk ids repeat. */
    if (sql_rc == SQLITE_OK) sql_rc = sqlite3_declare_vtab(db, def->schema);
    if (sql_rc == SQLITE_OK) sql_rc = sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    if (sql_rc != SQLITE_OK) {
        *err = sqlite3_mprintf("stagetrace table '%s': %s", def->name, sqlite3_errmsg(db));
        st_reader_close(vt->reader);
        sqlite3_free(vt);
        return sql_rc;
    }
    *out = &vt->base;
    return SQLITE_OK;
}

static int vt_disconnect(sqlite3_vtab *vtab)
{
    st_vtab *vt = (st_vtab *)vtab;
    st_reader_close(vt->reader);
    sqlite3_free(vt);
    return SQLITE_OK;
}

/* ---- planning ----
 * idxStr lists the constraints passed to xFilter, two characters each:
 * the column ('a' + index) and the operator ('=', '<', 'l' for <=, '>',
 * 'g' for >=). */

static int vt_best_index(sqlite3_vtab *vtab, sqlite3_index_info *info)
{
    const table_def *def = ((st_vtab *)vtab)->def;
    char plan[2 * MAX_PUSHED + 1];
    int n = 0;
    double cost = 1e6, rows = 1e6;
    for (int i = 0; i < info->nConstraint && n < MAX_PUSHED; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (!c->usable || c->iColumn < 0 || c->iColumn >= MAX_COLS ||
            !(def->filter_cols & BIT(c->iColumn)))
            continue;
        char op;
        switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ: op = '='; break;
        case SQLITE_INDEX_CONSTRAINT_LT: op = '<'; break;
        case SQLITE_INDEX_CONSTRAINT_LE: op = 'l'; break;
        case SQLITE_INDEX_CONSTRAINT_GT: op = '>'; break;
        case SQLITE_INDEX_CONSTRAINT_GE: op = 'g'; break;
        default: continue;
        }
        info->aConstraintUsage[i].argvIndex = n + 1;
        info->aConstraintUsage[i].omit = 0; /* SQLite re-checks every row */
        plan[2 * n] = (char)('a' + c->iColumn);
        plan[2 * n + 1] = op;
        n++;
        /* A narrower window decodes fewer chunks; other filters only pass
         * fewer rows up. */
        double keep = op == '=' ? 0.05 : 0.25;
        rows *= keep;
        cost *= (def->window_cols & BIT(c->iColumn)) ? keep : 0.9;
    }
    plan[2 * n] = 0;
    if (def->id == TABLE_CPU_FRAMES || def->id == TABLE_CPU_STACK_TEXT) {
        /* one stack: a lookup (the views join cpu_stack_text on it per sample) */
        for (int k = 0; k < n; k++)
            if (plan[2 * k] == 'a' && plan[2 * k + 1] == '=') {
                cost = 10;
                rows = def->id == TABLE_CPU_FRAMES ? 20 : 1;
            }
    }
    if (def->id == TABLE_RANGES && info->nOrderBy >= 1 && info->nOrderBy <= 2) {
        int c0 = info->aOrderBy[0].iColumn, d0 = info->aOrderBy[0].desc;
        int c1 = info->nOrderBy == 2 ? info->aOrderBy[1].iColumn : -1;
        int d1 = info->nOrderBy == 2 ? info->aOrderBy[1].desc : 0;
        int order = ORDER_NONE;
        if (!d0 && !d1) {
            if (c0 == R_THREAD && c1 == -1) order = ORDER_THREAD;
            else if (c0 == R_THREAD && c1 == R_STAGE) order = ORDER_THREAD_STAGE;
            else if (c0 == R_STAGE && c1 == -1) order = ORDER_STAGE;
            else if (c0 == R_STAGE && c1 == R_THREAD) order = ORDER_STAGE_THREAD;
        }
        if (order != ORDER_NONE) {
            info->idxNum = order;
            info->orderByConsumed = 1;
            if (order != ORDER_THREAD) cost *= 1.5; /* extra decoding, far below a sort */
        }
    }
    if (n) {
        info->idxStr = sqlite3_mprintf("%s", plan);
        if (!info->idxStr) return SQLITE_NOMEM;
        info->needToFreeIdxStr = 1;
    }
    info->estimatedCost = cost < 1 ? 1 : cost;
    info->estimatedRows = rows < 1 ? 1 : (sqlite3_int64)rows;
    return SQLITE_OK;
}

/* ---- cursors ---- */

static int vt_open(sqlite3_vtab *vtab, sqlite3_vtab_cursor **out)
{
    st_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    c->eof = 1;
    *out = &c->base;
    return SQLITE_OK;
}

static void cursor_reset(st_cursor *c)
{
    sqlite3_free(c->threads);
    c->threads = NULL;
    c->n_threads = c->ti = 0;
    c->order = ORDER_NONE;
    st_range_iter_close(c->ranges);
    st_sample_iter_close(c->samples);
    st_gpu_iter_close(c->gpus);
    st_flow_iter_close(c->flows);
    c->flows = NULL;
    st_cpu_iter_close(c->cpu);
    c->cpu = NULL;
    sqlite3_free(c->stacks);
    c->stacks = NULL;
    c->n_stacks = c->si = c->depth = 0;
    c->cpu_stacks_on = 0;
    c->cpu_ranges_on = 0;
    free(c->cr);
    free(c->cr_share);
    c->cr = NULL;
    c->cr_share = NULL;
    c->cr_n = c->cr_i = 0;
    sqlite3_free(c->text);
    sqlite3_free(c->leaf);
    c->text = c->leaf = NULL;
    free(c->demangled);
    c->demangled = NULL;
    c->gpus = NULL;
    c->ranges = NULL;
    c->samples = NULL;
    c->eof = 1;
    c->rowid = 0;
}

static int vt_close(sqlite3_vtab_cursor *cur)
{
    st_cursor *c = (st_cursor *)cur;
    cursor_reset(c);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* Bounds of an integer column x for which "x op v" can hold, intersected
 * into [*lo, *hi]. Only numeric v narrows: SQLite compares a number with a
 * text or blob by type, and NULL never matches, so ignoring those is safe
 * (SQLite applies the constraint anyway). Doubles are compared as SQLite
 * does, numerically: x < 2.5 holds for x <= 2. */
static void narrow(int64_t *lo, int64_t *hi, char op, sqlite3_value *v)
{
    int type = sqlite3_value_type(v);
    if (type == SQLITE_INTEGER) {
        int64_t x = sqlite3_value_int64(v);
        int64_t l = INT64_MIN, h = INT64_MAX;
        switch (op) {
        case '=': l = h = x; break;
        case '<':
            if (x == INT64_MIN) l = INT64_MAX, h = INT64_MIN; /* nothing */
            else h = x - 1;
            break;
        case 'l': h = x; break;
        case '>':
            if (x == INT64_MAX) l = INT64_MAX, h = INT64_MIN;
            else l = x + 1;
            break;
        case 'g': l = x; break;
        }
        if (l > *lo) *lo = l;
        if (h < *hi) *hi = h;
    } else if (type == SQLITE_FLOAT) {
        double d = sqlite3_value_double(v);
        if (isnan(d)) return;
        const double two63 = 9223372036854775808.0;
        /* x >= lower and x <= upper, as doubles; NAN: no bound */
        double lower = NAN, upper = NAN;
        switch (op) {
        case '=': lower = ceil(d); upper = floor(d); break;
        case '<': upper = ceil(d) - 1; break;
        case 'l': upper = floor(d); break;
        case '>': lower = floor(d) + 1; break;
        case 'g': lower = ceil(d); break;
        }
        if (!isnan(lower)) {
            if (lower >= two63) *lo = INT64_MAX, *hi = INT64_MIN; /* nothing */
            else if (lower > -two63 && (int64_t)lower > *lo) *lo = (int64_t)lower;
        }
        if (!isnan(upper)) {
            if (upper < -two63) *lo = INT64_MAX, *hi = INT64_MIN;
            else if (upper < two63 && (int64_t)upper < *hi) *hi = (int64_t)upper;
        }
    }
}

/* A row's rowid: its chunk's id times 2^32 plus its index in the chunk
 * (st_range_iter_pos), so that every scan of a table, whatever its filter,
 * gives a row the same rowid and no two rows the same one: SQLite relies on
 * that to merge the scans of an OR (docs/trace-format.md, "Row views"). */
static int chunk_rowid(st_cursor *c, const char *table, int64_t chunk_id, uint32_t index)
{
    if (chunk_id < INT32_MIN || chunk_id > INT32_MAX) {
        st_vtab *vt = (st_vtab *)c->base.pVtab;
        sqlite3_free(vt->base.zErrMsg);
        vt->base.zErrMsg = sqlite3_mprintf("trace table '%s': chunk id %lld is outside -2^31..2^31-1, "
                                           "so its rows cannot be numbered",
                                           table, (long long)chunk_id);
        c->eof = 1;
        return SQLITE_ERROR;
    }
    c->rowid = (sqlite3_int64)(((uint64_t)chunk_id << 32) | index);
    return SQLITE_OK;
}

static int keep(const st_cursor *c, int col, int64_t value)
{
    return value >= c->lo[col] && value <= c->hi[col];
}

static int64_t one_thread(const st_cursor *c, int col);

/* Opens the iterator of the ordered scan's current pass. */
static int open_pass(st_cursor *c)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    st_range_iter_close(c->ranges);
    c->ranges = NULL;
    int64_t thread = c->order == ORDER_STAGE ? one_thread(c, R_THREAD) : (int64_t)c->threads[c->ti];
    int rc = st_range_iter_open(&c->ranges, vt->reader, thread, c->t0, c->t1);
    if (rc) {
        c->eof = 1;
        return vt_error(vt, rc);
    }
    return SQLITE_OK;
}

/* Moves an ordered scan to its next pass; 0 when there is none. */
static int next_pass(st_cursor *c)
{
    int64_t first_stage = c->lo[R_STAGE] == c->hi[R_STAGE] ? c->lo[R_STAGE] : -1;
    switch (c->order) {
    case ORDER_THREAD:
        return ++c->ti < c->n_threads;
    case ORDER_THREAD_STAGE:
        if (c->stage_next != STAGE_NONE) {
            c->stage_cur = c->stage_next;
        } else {
            if (++c->ti >= c->n_threads) return 0;
            c->stage_cur = first_stage;
        }
        break;
    case ORDER_STAGE:
        if (c->stage_next == STAGE_NONE) return 0;
        c->stage_cur = c->stage_next;
        break;
    case ORDER_STAGE_THREAD:
        if (++c->ti >= c->n_threads) {
            if (c->stage_next == STAGE_NONE) return 0;
            c->stage_cur = c->stage_next;
            c->ti = 0;
        } else {
            return 1; /* the same stage on the next thread: stage_next keeps counting */
        }
        break;
    }
    c->stage_next = STAGE_NONE;
    return 1;
}

static int next_range(st_cursor *c)
{
    for (;;) {
        int rc = st_range_iter_next(c->ranges, &c->range);
        if (rc == 0) {
            if (c->order != ORDER_NONE && next_pass(c)) {
                rc = open_pass(c);
                if (rc != SQLITE_OK) return rc;
                continue;
            }
            c->eof = 1;
            return SQLITE_OK;
        }
        if (rc < 0) {
            c->eof = 1;
            return vt_error((st_vtab *)c->base.pVtab, rc);
        }
        const st_range *r = &c->range;
        if (keep(c, R_THREAD, r->thread) && keep(c, R_STAGE, r->stage) &&
            keep(c, R_START, r->start_ns) && keep(c, R_DUR, r->dur_ns) &&
            keep(c, R_END, r->start_ns + r->dur_ns) && keep(c, R_DEPTH, r->depth)) {
            if (c->order > ORDER_THREAD && r->stage != c->stage_cur) {
                if (r->stage > c->stage_cur && r->stage < c->stage_next) c->stage_next = r->stage;
                continue;
            }
            int64_t chunk_id;
            uint32_t index;
            st_range_iter_pos(c->ranges, &chunk_id, &index);
            return chunk_rowid(c, "range_chunks", chunk_id, index);
        }
    }
}

static int next_sample(st_cursor *c)
{
    for (;;) {
        int rc = st_sample_iter_next(c->samples, &c->sample);
        if (rc == 0) {
            c->eof = 1;
            return SQLITE_OK;
        }
        if (rc < 0) {
            c->eof = 1;
            return vt_error((st_vtab *)c->base.pVtab, rc);
        }
        const st_sample_row *s = &c->sample;
        if (keep(c, C_THREAD, s->thread) && keep(c, C_COUNTER, s->counter) &&
            keep(c, C_TS, s->ts_ns)) {
            int64_t chunk_id;
            uint32_t index;
            st_sample_iter_pos(c->samples, &chunk_id, &index);
            return chunk_rowid(c, "counter_chunks", chunk_id, index);
        }
    }
}

static int next_flow(st_cursor *c)
{
    for (;;) {
        int rc = st_flow_iter_next(c->flows, &c->flow);
        if (rc == 0) {
            c->eof = 1;
            return SQLITE_OK;
        }
        if (rc < 0) {
            c->eof = 1;
            return vt_error((st_vtab *)c->base.pVtab, rc);
        }
        if (keep(c, F_THREAD, c->flow.thread) && keep(c, F_TS, c->flow.ts_ns)) {
            int64_t chunk_id;
            uint32_t index;
            st_flow_iter_pos(c->flows, &chunk_id, &index);
            return chunk_rowid(c, "flow_chunks", chunk_id, index);
        }
    }
}

/* The thread argument of the iterators: one thread, or -1 for all. */
static int64_t one_thread(const st_cursor *c, int col)
{
    return c->lo[col] == c->hi[col] ? c->lo[col] : -1;
}

static int next_gpu(st_cursor *c)
{
    int rc = st_gpu_iter_next(c->gpus, &c->gpu);
    if (rc == 0) {
        c->eof = 1;
        return SQLITE_OK;
    }
    if (rc < 0) {
        c->eof = 1;
        return vt_error((st_vtab *)c->base.pVtab, rc);
    }
    int64_t chunk_id;
    uint32_t index;
    st_gpu_iter_pos(c->gpus, &chunk_id, &index);
    return chunk_rowid(c, "gpu_chunks", chunk_id, index);
}

/* Traces without a gpu_chunks table (no GPU tracing) have no rows. */
static int gpu_filter(st_vtab *vt, st_cursor *c)
{
    if (!vt->has_gpu_chunks) return SQLITE_OK;
    int rc = st_gpu_iter_open(&c->gpus, vt->reader, -1, INT64_MIN, INT64_MAX);
    if (rc) return vt_error(vt, rc);
    c->eof = 0;
    return next_gpu(c);
}


/* ---- CPU records and stacks ---- */

/* The ids of the threads whose id passes the filter on column col, in
 * ascending order, into c->threads. */
static int thread_list(st_cursor *c, int col)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    uint32_t n = st_reader_n_threads(vt->reader);
    c->threads = sqlite3_malloc64((n ? n : 1) * sizeof *c->threads);
    if (!c->threads) return SQLITE_NOMEM;
    c->n_threads = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = st_reader_thread(vt->reader, i)->id;
        if (!keep(c, col, id)) continue;
        uint32_t j = c->n_threads++; /* insertion: thread lists are short */
        while (j > 0 && c->threads[j - 1] > id) {
            c->threads[j] = c->threads[j - 1];
            j--;
        }
        c->threads[j] = id;
    }
    return SQLITE_OK;
}

/* 1: the trace has the CPU tables; 0: it has none (no rows), or they do
 * not pass the reader's checks (*sql_rc then says so, the message set). */
static int cpu_present(st_vtab *vt, int *sql_rc)
{
    int has = st_reader_has_cpu(vt->reader);
    *sql_rc = has < 0 ? vt_error(vt, has) : SQLITE_OK;
    return has > 0;
}

static int cpu_row_wanted(const st_cursor *c, enum table_id id, const st_cpu_row *row)
{
    switch (id) {
    case TABLE_CPU_SAMPLES:
        return (row->kind == ST_CPU_ROW_SAMPLE || row->kind == ST_CPU_ROW_PY_SAMPLE) && row->stack <= INT64_MAX &&
               keep(c, CS_STACK, (int64_t)row->stack);
    case TABLE_CPU_SWITCHES:
        return row->kind == ST_CPU_ROW_IN || row->kind == ST_CPU_ROW_OUT_BLOCKED ||
               row->kind == ST_CPU_ROW_OUT_PREEMPTED;
    case TABLE_CPU_LOST: return row->kind == ST_CPU_ROW_LOST;
    default: return 0;
    }
}

static int next_cpu(st_cursor *c)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    for (;;) {
        if (!c->cpu) {
            if (c->ti >= c->n_threads) {
                c->eof = 1;
                return SQLITE_OK;
            }
            int rc = st_cpu_iter_open(&c->cpu, vt->reader, c->threads[c->ti++], c->t0, c->t1);
            if (rc) {
                c->eof = 1;
                return vt_error(vt, rc);
            }
        }
        int rc = st_cpu_iter_next(c->cpu, &c->cpu_row);
        if (rc == 0) {
            st_cpu_iter_close(c->cpu);
            c->cpu = NULL;
            continue;
        }
        if (rc < 0) {
            c->eof = 1;
            return vt_error(vt, rc);
        }
        if (!cpu_row_wanted(c, vt->def->id, &c->cpu_row) || !keep(c, CR_TS, c->cpu_row.ts_ns)) continue;
        int64_t chunk_id;
        uint32_t index;
        st_cpu_iter_pos(c->cpu, &chunk_id, &index);
        return chunk_rowid(c, "cpu_chunks", chunk_id, index);
    }
}

/* cpu_ranges: one thread's ranges (all of them) and each one's share of its
 * off-CPU intervals; a thread without switch records has none. */
static int cpu_ranges_load(st_vtab *vt, st_cursor *c, uint32_t thread)
{
    free(c->cr);
    free(c->cr_share);
    c->cr = NULL;
    c->cr_share = NULL;
    c->cr_n = c->cr_i = 0;
    st_cpu_thread_info info;
    int has = st_reader_cpu_thread(vt->reader, thread, &info);
    if (has < 0) return vt_error(vt, has);
    if (!has || strcmp(info.status, "perf") != 0) return SQLITE_OK;
    st_cpu_switch *sw = NULL;
    size_t n_sw = 0, cap_sw = 0, cap_r = 0;
    st_cpu_iter *it;
    int rc = st_cpu_iter_open(&it, vt->reader, thread, INT64_MIN, INT64_MAX);
    if (rc) return vt_error(vt, rc);
    st_cpu_row row;
    while ((rc = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != ST_CPU_ROW_IN && row.kind != ST_CPU_ROW_OUT_BLOCKED && row.kind != ST_CPU_ROW_OUT_PREEMPTED)
            continue;
        if (n_sw == cap_sw) {
            cap_sw = cap_sw ? cap_sw * 2 : 1024;
            st_cpu_switch *v = realloc(sw, cap_sw * sizeof *v);
            if (!v) {
                rc = ST_ENOMEM;
                break;
            }
            sw = v;
        }
        sw[n_sw++] = (st_cpu_switch){row.ts_ns, row.kind != ST_CPU_ROW_IN, row.kind == ST_CPU_ROW_OUT_PREEMPTED};
    }
    st_cpu_iter_close(it);
    st_range_iter *ri = NULL;
    if (rc == 0) rc = st_range_iter_open(&ri, vt->reader, thread, INT64_MIN, INT64_MAX);
    st_range rg;
    int more = rc == 0;
    while (more && (more = st_range_iter_next(ri, &rg)) == 1) {
        if (c->cr_n == cap_r) {
            cap_r = cap_r ? cap_r * 2 : 1024;
            st_range *v = realloc(c->cr, cap_r * sizeof *v);
            if (!v) {
                more = ST_ENOMEM;
                break;
            }
            c->cr = v;
        }
        c->cr[c->cr_n++] = rg;
    }
    if (more < 0) rc = more;
    st_range_iter_close(ri);
    st_cpu_off *off = rc == 0 ? malloc((n_sw + 1) * sizeof *off) : NULL;
    st_cpu_range *spans = rc == 0 ? malloc((c->cr_n ? c->cr_n : 1) * sizeof *spans) : NULL;
    c->cr_share = rc == 0 ? malloc((c->cr_n ? c->cr_n : 1) * sizeof *c->cr_share) : NULL;
    if (rc == 0 && (!off || !spans || !c->cr_share)) rc = ST_ENOMEM;
    if (rc == 0) {
        /* every range ends by the trace's end: any "now" past it splits them alike */
        size_t n_off = st_cpu_off_intervals(sw, n_sw, info.start_ns, INT64_MAX, off);
        for (size_t i = 0; i < c->cr_n; i++) spans[i] = (st_cpu_range){c->cr[i].start_ns, c->cr[i].start_ns + c->cr[i].dur_ns};
        st_cpu_account(off, n_off, spans, c->cr_n, c->cr_share);
    }
    free(sw);
    free(off);
    free(spans);
    if (rc) {
        c->cr_n = 0;
        return vt_error(vt, rc);
    }
    return SQLITE_OK;
}

static int next_cpu_range(st_cursor *c)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    for (;;) {
        while (c->cr_i < c->cr_n) {
            c->cr_i++;
            c->rowid++;
            return SQLITE_OK;
        }
        if (c->ti >= c->n_threads) {
            c->eof = 1;
            return SQLITE_OK;
        }
        int rc = cpu_ranges_load(vt, c, c->threads[c->ti++]);
        if (rc) {
            c->eof = 1;
            return rc;
        }
    }
}

static int cpu_records_filter(st_vtab *vt, st_cursor *c)
{
    int rc;
    if (!cpu_present(vt, &rc)) return rc;
    rc = thread_list(c, CR_THREAD);
    if (rc) return rc;
    c->t0 = c->lo[CR_TS];
    c->t1 = c->hi[CR_TS] == INT64_MAX ? INT64_MAX : c->hi[CR_TS] + 1;
    c->ti = 0;
    c->eof = 0;
    return next_cpu(c);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static char *demangled_or_null(const char *name);

/* A frame's function as `analyze cpu` names it: its symbol (demangled:
 * *own, freed at the next call), else [file] (the mapping's file name),
 * else [unknown]. */
static int frame_function(st_vtab *vt, uint64_t stack, uint64_t addr, st_cpu_frame *fr, char *label, size_t size,
                          char **own, const char **out)
{
    int rc = st_reader_cpu_frame_name(vt->reader, stack, addr, fr);
    if (rc < 0) return vt_error(vt, rc);
    free(*own);
    *own = NULL;
    if (fr->name[0]) {
        *own = demangled_or_null(fr->name);
        *out = *own ? *own : fr->name;
    } else {
        snprintf(label, size, "[%s]", fr->path[0] ? base_name(fr->path) : "unknown");
        *out = label;
    }
    return SQLITE_OK;
}

/* cpu_stack_text: the current stack's leaf and functions joined by ';',
 * outermost first. */
static int stack_text(st_cursor *c, uint64_t stack)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    sqlite3_free(c->text);
    sqlite3_free(c->leaf);
    c->text = c->leaf = NULL;
    sqlite3_str *str = sqlite3_str_new(NULL);
    int rc = SQLITE_OK;
    for (uint32_t i = c->n_frames; i-- > 0 && rc == SQLITE_OK;) {
        st_cpu_frame fr;
        const char *fn;
        rc = frame_function(vt, stack, c->frames[i], &fr, c->label, sizeof c->label, &c->demangled, &fn);
        if (rc) break;
        if (i + 1 < c->n_frames) sqlite3_str_appendchar(str, 1, ';');
        sqlite3_str_appendall(str, fn);
        if (i == 0 && !(c->leaf = sqlite3_mprintf("%s", fn))) rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) rc = sqlite3_str_errcode(str);
    c->text = sqlite3_str_finish(str);
    if (rc == SQLITE_OK && !c->text) c->text = sqlite3_mprintf("%s", "");
    if (rc == SQLITE_OK && !c->text) rc = SQLITE_NOMEM;
    if (rc) c->eof = 1;
    return rc;
}

/* Moves to the next stack to show (cpu_frames: the next frame, through the
 * stacks). Rowids: cpu_frames stack * 2^16 + depth (a stack has at most
 * 65535 frames), cpu_stack_text the stack id. */
static int next_stack(st_cursor *c)
{
    st_vtab *vt = (st_vtab *)c->base.pVtab;
    int frames_table = vt->def->id == TABLE_CPU_FRAMES;
    for (;;) {
        if (frames_table && c->frames && c->depth + 1 < c->n_frames) {
            c->depth++;
        } else {
            if (c->si >= c->n_stacks) {
                c->eof = 1;
                return SQLITE_OK;
            }
            uint64_t stack = c->stacks[c->si++];
            int rc = st_reader_cpu_stack(vt->reader, stack, &c->frames, &c->n_frames);
            if (rc) {
                c->eof = 1;
                return vt_error(vt, rc);
            }
            c->depth = 0;
            if (!frames_table) {
                rc = stack_text(c, stack);
                if (rc) return rc;
                c->rowid = (sqlite3_int64)stack;
                return SQLITE_OK;
            }
            if (c->n_frames == 0) {
                c->frames = NULL;
                continue;
            }
        }
        if (!keep(c, CF_DEPTH, c->depth)) continue;
        uint64_t stack = c->stacks[c->si - 1];
        int rc = frame_function(vt, stack, c->frames[c->depth], &c->frame, c->label, sizeof c->label, &c->demangled,
                                &c->function);
        if (!rc && frames_table) {
            uint32_t n_lines = 0;
            int lr = st_reader_cpu_frame_lines(vt->reader, stack, c->frames[c->depth], &c->line, &n_lines);
            if (lr < 0) rc = vt_error(vt, lr);
            else if (!lr || !c->line[0].file[0]) c->line = NULL;
        }
        if (rc) {
            c->eof = 1;
            return rc;
        }
        c->rowid = (sqlite3_int64)((stack << 16) | c->depth);
        return SQLITE_OK;
    }
}

/* The stack ids in the filter's range, from cpu_stacks (a plain table), in
 * ascending order; one id asked for is looked up by the reader, so an id
 * the trace does not have gives no row. */
static int cpu_stacks_filter(st_vtab *vt, st_cursor *c, int col)
{
    int sql_rc;
    if (!cpu_present(vt, &sql_rc)) return sql_rc;
    int64_t lo = c->lo[col], hi = c->hi[col];
    if (lo == hi) {
        c->stacks = sqlite3_malloc64(sizeof *c->stacks);
        if (!c->stacks) return SQLITE_NOMEM;
        int rc = st_reader_cpu_stack(vt->reader, (uint64_t)lo, &c->frames, &c->n_frames);
        if (rc == ST_EINVAL) return SQLITE_OK; /* no such stack */
        if (rc) return vt_error(vt, rc);
        c->stacks[c->n_stacks++] = (uint64_t)lo;
    } else {
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(vt->db, "SELECT id FROM main.cpu_stacks WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
                                    -1, &st, NULL);
        if (rc != SQLITE_OK) return rc;
        sqlite3_bind_int64(st, 1, lo);
        sqlite3_bind_int64(st, 2, hi);
        uint32_t cap = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (c->n_stacks == cap) {
                uint32_t nc = cap ? cap * 2 : 256;
                uint64_t *v = sqlite3_realloc64(c->stacks, (sqlite3_uint64)nc * sizeof *v);
                if (!v) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                c->stacks = v;
                cap = nc;
            }
            c->stacks[c->n_stacks++] = (uint64_t)sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) return rc == SQLITE_ROW ? SQLITE_ERROR : rc;
    }
    c->frames = NULL;
    c->n_frames = 0;
    c->si = 0;
    c->cpu_stacks_on = 1;
    c->eof = 0;
    return next_stack(c);
}

static int vt_filter(sqlite3_vtab_cursor *cur, int idx_num, const char *idx_str, int argc,
                     sqlite3_value **argv)
{
    st_cursor *c = (st_cursor *)cur;
    st_vtab *vt = (st_vtab *)cur->pVtab;
    const table_def *def = vt->def;
    cursor_reset(c);
    for (int i = 0; i < MAX_COLS; i++) {
        c->lo[i] = def->domain_lo[i];
        c->hi[i] = INT64_MAX;
    }
    for (int i = 0; i < argc && idx_str && idx_str[2 * i]; i++) {
        int col = idx_str[2 * i] - 'a';
        if (col >= 0 && col < MAX_COLS) narrow(&c->lo[col], &c->hi[col], idx_str[2 * i + 1], argv[i]);
    }
    for (int i = 0; i < MAX_COLS; i++)
        if (c->lo[i] > c->hi[i]) return SQLITE_OK; /* contradictory: no rows */

    int rc;
    switch (def->id) {
    case TABLE_RANGES: {
        /* start <= end, so an upper bound on either bounds the start and a
         * lower bound on either bounds the end. The iterator returns ranges
         * with start < t1 and end > t0 (and empty ranges at t0). */
        int64_t start_max = c->hi[R_START] < c->hi[R_END] ? c->hi[R_START] : c->hi[R_END];
        int64_t end_min = c->lo[R_END] > c->lo[R_START] ? c->lo[R_END] : c->lo[R_START];
        int64_t t1 = start_max == INT64_MAX ? INT64_MAX : start_max + 1;
        int64_t t0 = end_min == INT64_MIN ? INT64_MIN : end_min - 1;
        c->t0 = t0;
        c->t1 = t1;
        if (idx_num > ORDER_NONE && idx_num <= ORDER_STAGE_THREAD) {
            rc = thread_list(c, R_THREAD);
            if (rc) return rc;
            c->order = idx_num;
            c->ti = 0;
            c->stage_cur = c->lo[R_STAGE] == c->hi[R_STAGE] ? c->lo[R_STAGE] : -1;
            c->stage_next = STAGE_NONE;
            if (c->order != ORDER_STAGE && c->n_threads == 0) return SQLITE_OK; /* no rows */
            rc = open_pass(c);
            if (rc) return rc;
            c->eof = 0;
            return next_range(c);
        }
        rc = st_range_iter_open(&c->ranges, vt->reader, one_thread(c, R_THREAD), t0, t1);
        if (rc) return vt_error(vt, rc);
        c->eof = 0;
        return next_range(c);
    }
    case TABLE_COUNTERS: {
        int64_t t0 = c->lo[C_TS];
        int64_t t1 = c->hi[C_TS] == INT64_MAX ? INT64_MAX : c->hi[C_TS] + 1;
        rc = st_sample_iter_open(&c->samples, vt->reader, one_thread(c, C_THREAD), t0, t1);
        if (rc) return vt_error(vt, rc);
        c->eof = 0;
        return next_sample(c);
    }
    case TABLE_GPU:
        return gpu_filter(vt, c);
    case TABLE_FLOWS: {
        int64_t t0 = c->lo[F_TS];
        int64_t t1 = c->hi[F_TS] == INT64_MAX ? INT64_MAX : c->hi[F_TS] + 1;
        rc = st_flow_iter_open(&c->flows, vt->reader, one_thread(c, F_THREAD), t0, t1);
        if (rc) return vt_error(vt, rc);
        c->eof = 0;
        return next_flow(c);
    }
    case TABLE_CPU_SAMPLES:
    case TABLE_CPU_SWITCHES:
    case TABLE_CPU_LOST:
        return cpu_records_filter(vt, c);
    case TABLE_CPU_FRAMES:
        return cpu_stacks_filter(vt, c, CF_STACK);
    case TABLE_CPU_STACK_TEXT:
        return cpu_stacks_filter(vt, c, CT_STACK);
    case TABLE_CPU_RANGES:
        if (!cpu_present(vt, &rc)) return rc;
        if ((rc = thread_list(c, CG_THREAD))) return rc;
        c->cpu_ranges_on = 1;
        c->ti = 0;
        c->eof = 0;
        return next_cpu_range(c);
    }
    return SQLITE_OK;
}

static int vt_next(sqlite3_vtab_cursor *cur)
{
    st_cursor *c = (st_cursor *)cur;
    if (c->eof) return SQLITE_OK;
    if (c->ranges) return next_range(c);
    if (c->samples) return next_sample(c);
    if (c->gpus) return next_gpu(c);
    if (c->flows) return next_flow(c);
    if (c->threads && is_cpu_record_table(((st_vtab *)cur->pVtab)->def->id)) return next_cpu(c);
    if (c->cpu_stacks_on) return next_stack(c);
    if (c->cpu_ranges_on) return next_cpu_range(c);
    c->eof = 1;
    return SQLITE_OK;
}

static int vt_eof(sqlite3_vtab_cursor *cur) { return ((st_cursor *)cur)->eof; }

static int vt_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    *rowid = ((st_cursor *)cur)->rowid;
    return SQLITE_OK;
}

/* The step a range falls in: the first step whose mark is after its start
 * (a mark says "step s ended now"). 0 when there is none. */
static int step_of(const st_reader *r, int64_t start_ns, uint64_t *step)
{
    uint32_t lo = 0, hi = st_reader_n_steps(r);
    while (lo < hi) { /* marks are sorted by step and by time */
        uint32_t mid = lo + (hi - lo) / 2;
        if (st_reader_step(r, mid)->ts_ns > start_ns)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo == st_reader_n_steps(r)) return 0;
    *step = st_reader_step(r, lo)->step;
    return 1;
}

/* Counter values come back as integers when they are stored as integers
 * (docs/trace-format.md, "Counter chunk"), as reals otherwise. NaN becomes
 * NULL, as everywhere in SQLite. */
static void result_value(sqlite3_context *ctx, double v)
{
    if (v >= -9.0e15 && v <= 9.0e15 && v == (double)(int64_t)v && !(v == 0 && signbit(v)))
        sqlite3_result_int64(ctx, (sqlite3_int64)v);
    else
        sqlite3_result_double(ctx, v);
}

static int vt_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    st_cursor *c = (st_cursor *)cur;
    st_vtab *vt = (st_vtab *)cur->pVtab;
    if (c->ranges) {
        const st_range *r = &c->range;
        switch (col) {
        case R_THREAD: sqlite3_result_int64(ctx, r->thread); break;
        case R_STAGE: sqlite3_result_int64(ctx, r->stage); break;
        case R_START: sqlite3_result_int64(ctx, r->start_ns); break;
        case R_DUR: sqlite3_result_int64(ctx, r->dur_ns); break;
        case R_END: sqlite3_result_int64(ctx, r->start_ns + r->dur_ns); break;
        case R_DEPTH: sqlite3_result_int64(ctx, r->depth); break;
        case R_STEP: {
            uint64_t step;
            if (step_of(vt->reader, r->start_ns, &step))
                sqlite3_result_int64(ctx, (sqlite3_int64)step);
            else
                sqlite3_result_null(ctx);
            break;
        }
        }
    } else if (c->samples) {
        const st_sample_row *s = &c->sample;
        switch (col) {
        case C_THREAD: sqlite3_result_int64(ctx, s->thread); break;
        case C_COUNTER: sqlite3_result_int64(ctx, s->counter); break;
        case C_TS: sqlite3_result_int64(ctx, s->ts_ns); break;
        case C_VALUE: result_value(ctx, s->value); break;
        }
    } else if (c->gpus) {
        const st_gpu_row *g = &c->gpu;
        switch (col) {
        case 0: sqlite3_result_int64(ctx, g->device); break;
        case 1: sqlite3_result_int64(ctx, g->stream); break;
        case 2: sqlite3_result_text(ctx, st_gpu_kind_name(g->rec.kind), -1, SQLITE_STATIC); break;
        case 3:
            if (g->name) sqlite3_result_text(ctx, g->name, -1, SQLITE_TRANSIENT);
            else if (g->rec.kind == ST_GPU_MEMCPY) {
                char buf[64];
                snprintf(buf, sizeof buf, "memcpy %s %s->%s", st_gpu_copy_name(g->rec.copy_kind),
                         st_gpu_mem_name(g->rec.src_mem), st_gpu_mem_name(g->rec.dst_mem));
                sqlite3_result_text(ctx, buf, -1, SQLITE_TRANSIENT);
            } else
                sqlite3_result_text(ctx, st_gpu_kind_name(g->rec.kind), -1, SQLITE_STATIC);
            break;
        case 4: sqlite3_result_int64(ctx, g->rec.start_ns); break;
        case 5: sqlite3_result_int64(ctx, g->rec.dur_ns); break;
        case 6: sqlite3_result_int64(ctx, (sqlite3_int64)g->rec.bytes); break;
        case 7: sqlite3_result_int64(ctx, g->rec.correlation); break;
        case 8: if (g->thread >= 0) sqlite3_result_int64(ctx, g->thread); else sqlite3_result_null(ctx); break;
        case 9: if (g->stage >= 0) sqlite3_result_int64(ctx, g->stage); else sqlite3_result_null(ctx); break;
        case 10:
            if (g->launch_os_tid > 0) sqlite3_result_int64(ctx, g->launch_os_tid);
            else sqlite3_result_null(ctx);
            break;
        case 11:
            if (g->launch_thread) sqlite3_result_text(ctx, g->launch_thread, -1, SQLITE_TRANSIENT);
            else sqlite3_result_null(ctx);
            break;
        }
    } else if (is_cpu_record_table(vt->def->id)) {
        const st_cpu_row *x = &c->cpu_row;
        if (col == CR_THREAD) sqlite3_result_int64(ctx, x->thread);
        else if (col == CR_TS) sqlite3_result_int64(ctx, x->ts_ns);
        else if (vt->def->id == TABLE_CPU_SAMPLES) {
            switch (col) {
            case CS_STAGE: if (x->stage >= 0) sqlite3_result_int64(ctx, x->stage); else sqlite3_result_null(ctx); break;
            case CS_STACK: sqlite3_result_int64(ctx, (sqlite3_int64)x->stack); break;
            case CS_FROM_RANGES: sqlite3_result_int64(ctx, x->stage_from_ranges); break;
            case CS_SOURCE:
                sqlite3_result_text(ctx, x->source == ST_CPU_SOURCE_PYTHON_FRAMES ? "python-frames"
                                         : x->source == ST_CPU_SOURCE_TIMER      ? "timer" : "perf",
                                    -1, SQLITE_STATIC);
                break;
            }
        } else if (vt->def->id == TABLE_CPU_SWITCHES && col == CW_KIND) {
            const char *kind = x->kind == ST_CPU_ROW_IN ? "in"
                               : x->kind == ST_CPU_ROW_OUT_BLOCKED ? "out_blocked" : "out_preempted";
            sqlite3_result_text(ctx, kind, -1, SQLITE_STATIC);
        } else if (vt->def->id == TABLE_CPU_LOST && col == CL_N) {
            sqlite3_result_int64(ctx, (sqlite3_int64)x->n_lost);
        }
    } else if (vt->def->id == TABLE_CPU_FRAMES) {
        const st_cpu_frame *f = &c->frame;
        switch (col) {
        case CF_STACK: sqlite3_result_int64(ctx, (sqlite3_int64)c->stacks[c->si - 1]); break;
        case CF_DEPTH: sqlite3_result_int64(ctx, c->depth); break;
        case CF_ADDR: sqlite3_result_int64(ctx, (sqlite3_int64)c->frames[c->depth]); break;
        case CF_FUNCTION: sqlite3_result_text(ctx, c->function, -1, SQLITE_TRANSIENT); break;
        case CF_SYMBOL: sqlite3_result_text(ctx, f->name, -1, SQLITE_TRANSIENT); break;
        case CF_SYM_OFFSET: sqlite3_result_int64(ctx, (sqlite3_int64)f->sym_offset); break;
        case CF_MAP: if (f->map >= 0) sqlite3_result_int64(ctx, f->map); else sqlite3_result_null(ctx); break;
        case CF_PATH: if (f->map >= 0) sqlite3_result_text(ctx, f->path, -1, SQLITE_TRANSIENT); else sqlite3_result_null(ctx); break;
        case CF_FILE: if (c->line) sqlite3_result_text(ctx, c->line->file, -1, SQLITE_TRANSIENT); else sqlite3_result_null(ctx); break;
        case CF_LINE: if (c->line) sqlite3_result_int64(ctx, c->line->line); else sqlite3_result_null(ctx); break;
        }
    } else if (vt->def->id == TABLE_CPU_RANGES) {
        const st_range *r = &c->cr[c->cr_i - 1];
        const st_cpu_share *sh = &c->cr_share[c->cr_i - 1];
        switch (col) {
        case CG_THREAD: sqlite3_result_int64(ctx, r->thread); break;
        case CG_STAGE: sqlite3_result_int64(ctx, r->stage); break;
        case CG_START: sqlite3_result_int64(ctx, r->start_ns); break;
        case CG_DUR: sqlite3_result_int64(ctx, r->dur_ns); break;
        case CG_DEPTH: sqlite3_result_int64(ctx, r->depth); break;
        case CG_ON: sqlite3_result_int64(ctx, sh->on_ns); break;
        case CG_PREEMPTED: sqlite3_result_int64(ctx, sh->preempted_ns); break;
        case CG_BLOCKED: sqlite3_result_int64(ctx, sh->blocked_ns); break;
        }
    } else if (vt->def->id == TABLE_CPU_STACK_TEXT) {
        switch (col) {
        case CT_STACK: sqlite3_result_int64(ctx, (sqlite3_int64)c->stacks[c->si - 1]); break;
        case CT_N_FRAMES: sqlite3_result_int64(ctx, c->n_frames); break;
        case CT_LEAF: if (c->leaf) sqlite3_result_text(ctx, c->leaf, -1, SQLITE_TRANSIENT); else sqlite3_result_null(ctx); break;
        case CT_FRAMES: sqlite3_result_text(ctx, c->text ? c->text : "", -1, SQLITE_TRANSIENT); break;
        }
    } else if (c->flows) {
        const st_flow_row *f = &c->flow;
        switch (col) {
        case F_THREAD: sqlite3_result_int64(ctx, f->thread); break;
        case F_TS: sqlite3_result_int64(ctx, f->ts_ns); break;
        case F_DIR: sqlite3_result_text(ctx, f->dir == ST_FLOW_OUT ? "out" : "in", -1, SQLITE_STATIC); break;
        case F_ID: sqlite3_result_int64(ctx, (sqlite3_int64)f->id); break;
        }
    }
    return SQLITE_OK;
}

static const sqlite3_module st_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous-only: no CREATE VIRTUAL TABLE */
    .xConnect = vt_connect,
    .xBestIndex = vt_best_index,
    .xDisconnect = vt_disconnect,
    .xDestroy = NULL,
    .xOpen = vt_open,
    .xClose = vt_close,
    .xFilter = vt_filter,
    .xNext = vt_next,
    .xEof = vt_eof,
    .xColumn = vt_column,
    .xRowid = vt_rowid,
    .xUpdate = NULL, /* read-only */
};

/* ---- registration ---- */

/* TEMP views, so that nothing is written to the trace; LEFT JOINs, so that
 * a row whose name is missing still shows. */
static const char views_sql[] =
    "CREATE TEMP VIEW IF NOT EXISTS ranges_v AS\n"
    "  SELECT r.thread, r.stage, r.start_ns, r.dur_ns, r.end_ns, r.depth, r.step,\n"
    "         t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS kind\n"
    "  FROM main.ranges AS r\n"
    "  LEFT JOIN main.threads AS t ON t.id = r.thread\n"
    "  LEFT JOIN main.stages AS s ON s.id = r.stage;\n"
    "CREATE TEMP VIEW IF NOT EXISTS counters_v AS\n"
    "  SELECT c.thread, c.counter, c.ts_ns, c.value,\n"
    "         t.name AS thread_name, n.name AS counter_name, n.unit AS unit\n"
    "  FROM main.counters AS c\n"
    "  LEFT JOIN main.threads AS t ON t.id = c.thread\n"
    "  LEFT JOIN main.counter_names AS n ON n.id = c.counter;\n"
    "CREATE TEMP VIEW IF NOT EXISTS gpu_v AS\n"
    "  SELECT g.device, g.stream, g.kind, demangle(g.name) AS name, g.start_ns, g.dur_ns, g.start_ns + g.dur_ns AS end_ns,\n"
    "         g.bytes, g.correlation, g.thread, g.stage,\n"
    "         t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS stage_kind, g.name AS raw_name,\n"
    "         g.launch_tid, g.launch_thread\n"
    "  FROM main.gpu AS g\n"
    "  LEFT JOIN main.threads AS t ON t.id = g.thread\n"
    "  LEFT JOIN main.stages AS s ON s.id = g.stage;\n"
    "CREATE TEMP VIEW IF NOT EXISTS cpu_samples_v AS\n"
    "  SELECT c.thread, c.ts_ns, c.stage, c.stack, c.stage_from_ranges,\n"
    "         t.name AS thread_name, t.role AS role, s.name AS stage_name, s.kind AS kind,\n"
    "         x.leaf AS leaf, x.frames AS frames, c.source AS source\n"
    "  FROM main.cpu_samples AS c\n"
    "  LEFT JOIN main.threads AS t ON t.id = c.thread\n"
    "  LEFT JOIN main.stages AS s ON s.id = c.stage\n"
    "  LEFT JOIN main.cpu_stack_text AS x ON x.stack = c.stack;\n";

/* demangle(name): libstdc++'s __cxa_demangle, looked up once. */
typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);
static cxa_demangle_fn cxa_demangle;
static pthread_once_t cxa_demangle_once = PTHREAD_ONCE_INIT;

static void find_cxa_demangle(void)
{
    void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!f) {
        void *lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL); /* kept open: the function is used after */
        if (lib) f = dlsym(lib, "__cxa_demangle");
    }
    cxa_demangle = (cxa_demangle_fn)f;
}

/* name demangled (malloc'd), or NULL: not mangled, does not demangle, or
 * no libstdc++. */
static char *demangled_or_null(const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z') return NULL;
    pthread_once(&cxa_demangle_once, find_cxa_demangle);
    int status = -1;
    char *readable = cxa_demangle ? cxa_demangle(name, NULL, NULL, &status) : NULL;
    if (readable && status == 0) return readable;
    free(readable);
    return NULL;
}

static void sql_demangle(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    char *readable = sqlite3_value_type(argv[0]) == SQLITE_TEXT
                         ? demangled_or_null((const char *)sqlite3_value_text(argv[0])) : NULL;
    if (!readable) {
        sqlite3_result_value(ctx, argv[0]); /* NULL, a number, a name that is not mangled: as it is */
        return;
    }
    sqlite3_result_text(ctx, readable, -1, SQLITE_TRANSIENT);
    free(readable);
}

int st_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int st_sql_register(sqlite3 *db)
{
    if (!db) return st_set_error(ST_EINVAL, "st_sql_register: no database connection");
    if (sqlite3_create_function(db, "demangle", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, NULL,
                                sql_demangle, NULL, NULL) != SQLITE_OK)
        return st_set_error(ST_EIO, "cannot register the SQL function demangle: %s", sqlite3_errmsg(db));
    for (size_t i = 0; i < sizeof table_defs / sizeof table_defs[0]; i++) {
        int rc = sqlite3_create_module_v2(db, table_defs[i].name, &st_module,
                                          (void *)&table_defs[i], NULL);
        if (rc != SQLITE_OK)
            return st_set_error(rc == SQLITE_NOMEM ? ST_ENOMEM : ST_EIO,
                                "cannot register the SQL table '%s': %s", table_defs[i].name,
                                sqlite3_errmsg(db));
    }
    char *err = NULL;
    if (sqlite3_exec(db, views_sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = st_set_error(ST_EIO, "cannot create the SQL views ranges_v, counters_v, gpu_v, cpu_samples_v: %s",
                              err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return rc;
    }
    return ST_OK;
}

#ifdef ST_SQLITE_EXTENSION
/* The loadable extension's entry points: SQLite derives the first from the
 * file name (stagetrace_ext.so -> sqlite3_stagetraceext_init) and falls back
 * to the second. */
#define ST_EXT_ENTRY __attribute__((visibility("default")))
ST_EXT_ENTRY int sqlite3_stagetraceext_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);
ST_EXT_ENTRY int sqlite3_extension_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);

int sqlite3_stagetraceext_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
    SQLITE_EXTENSION_INIT2(api);
    if (st_sql_register(db) != ST_OK) {
        if (err) *err = sqlite3_mprintf("stagetrace: %s", st_last_error());
        return SQLITE_ERROR;
    }
    return SQLITE_OK;
}

int sqlite3_extension_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
    return sqlite3_stagetraceext_init(db, err, api);
}
#endif
