/* store.c: the writer's SQLite side. Every row the writer stores goes
 * through st_store_row, which runs it in the open transaction and keeps a
 * copy until that transaction commits. When a statement or the COMMIT
 * fails with a transient error (SQLITE_FULL, SQLITE_IOERR, ...: a disk that
 * filled up, an I/O error), the store rolls back and goes on collecting
 * rows in memory only; each later commit replays them all in a fresh
 * transaction, so a disk that fills and frees again leaves no hole. While
 * the rows held pass the memory bound, the chunk rows among them (the bulk)
 * are discarded and what they covered, per thread (or GPU device) and kind,
 * becomes a lost_spans row plus meta lost_events: a hole that is recorded,
 * never silent. Small rows (registrations, steps, marks, meta) are always
 * kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_internal.h"
#include "st_store.h"

typedef struct held_row {
    uint8_t stmt, n;
    st_val v[12]; /* text and blob values point to copies owned by the row
                     (12: cpu_threads, the widest row) */
} held_row;

struct st_store {
    st_trace *t;
    sqlite3_stmt *st[ST_S_COUNT];
    held_row *rows;            /* the open (or failed) transaction's rows */
    size_t n_rows, cap_rows;
    size_t held_bytes, max_bytes;
    size_t held_chunks;        /* chunk rows among them */
    int healthy;               /* every held row ran in the open transaction */
    int lost_table;            /* lost_spans is created (or its creation held) */
    int discard_said;          /* the discarding of this failure is reported */
    uint64_t failed_commits;   /* commits that failed and were retried */
    uint64_t failed_written;
    uint64_t lost_events;
    char error[256];           /* the last transient error */
};

static const struct {
    const char *sql, *what;
} stmt_defs[ST_S_COUNT] = {
    [ST_S_RANGE_CHUNK] = {"INSERT INTO range_chunks(thread, t0_ns, t1_ns, n_events, n_ranges, data) "
                          "VALUES (?, ?, ?, ?, ?, ?)", "range_chunks"},
    [ST_S_COUNTER_CHUNK] = {"INSERT INTO counter_chunks(thread, t0_ns, t1_ns, n_samples, data) "
                            "VALUES (?, ?, ?, ?, ?)", "counter_chunks"},
    [ST_S_GPU_CHUNK] = {"INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) "
                        "VALUES (?, ?, ?, ?, ?, ?)", "gpu_chunks"},
    [ST_S_STEP] = {"INSERT INTO steps(step, ts_ns, tokens, thread) VALUES (?, ?, ?, ?)", "steps"},
    [ST_S_MARK] = {"INSERT INTO marks(thread, ts_ns, string) VALUES (?, ?, ?)", "marks"},
    [ST_S_STRING] = {"INSERT INTO strings(id, value) VALUES (?, ?)", "strings"},
    [ST_S_THREAD] = {"INSERT INTO threads(id, os_tid, name, role, device, rank) VALUES (?, ?, ?, ?, ?, ?)",
                     "threads"},
    [ST_S_STAGE] = {"INSERT INTO stages(id, name, kind) VALUES (?, ?, ?)", "stages"},
    [ST_S_COUNTER] = {"INSERT INTO counter_names(id, name, unit) VALUES (?, ?, ?)", "counter_names"},
    [ST_S_DROPPED] = {"UPDATE threads SET dropped = ? WHERE id = ?", "threads.dropped"},
    [ST_S_META] = {"INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", "meta"},
    [ST_S_GPU_STRING] = {"INSERT OR REPLACE INTO gpu_strings(id, value) VALUES (?, ?)", "gpu_strings"},
    [ST_S_LOST_SPAN] = {"INSERT INTO lost_spans(source, thread, device, t0_ns, t1_ns, n_records) "
                        "VALUES (?, ?, ?, ?, ?, ?)", "lost_spans"},
    [ST_S_FLOW_CHUNK] = {"INSERT INTO flow_chunks(thread, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?)",
                         "flow_chunks"},
    [ST_S_CPU_CHUNK] = {"INSERT INTO cpu_chunks(thread, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?)",
                        "cpu_chunks"},
    [ST_S_CPU_STACK] = {"INSERT INTO cpu_stacks(id, n_frames, data) VALUES (?, ?, ?)", "cpu_stacks"},
    [ST_S_CPU_THREAD] = {"INSERT OR REPLACE INTO cpu_threads(thread, os_tid, status, reason, period_ns, "
                         "ring_bytes, refused_bytes, start_ns, cpu_ns, switches, samples, lost) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "cpu_threads"},
    [ST_S_CPU_MAP] = {"INSERT OR REPLACE INTO cpu_maps(id, start, end, file_offset, path, build_id) "
                      "VALUES (?, ?, ?, ?, ?, ?)", "cpu_maps"},
    [ST_S_CPU_SYMBOL] = {"INSERT OR REPLACE INTO cpu_symbols(addr, map, file_offset, name, sym_offset) "
                         "VALUES (?, ?, ?, ?, ?)", "cpu_symbols"},
    [ST_S_CPU_LINE] = {"INSERT OR REPLACE INTO cpu_lines(addr, depth, function, file, line, col) "
                       "VALUES (?, ?, ?, ?, ?, ?)", "cpu_lines"},
    [ST_S_CPU_BLOCK] = {"INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", "cpu_blocks"},
    [ST_S_CPU_WINDOW] = {"INSERT OR REPLACE INTO cpu_windows(window, step, t0_ns, t1_ns, os_tid, thread, name, "
                         "oncpu_ns, runq_ns, slices) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "cpu_windows"},
    [ST_S_GPU_PAUSE] = {"INSERT INTO gpu_pauses(t0_ns, t1_ns) VALUES (?, ?)", "gpu_pauses"},
    [ST_S_GPU_THREAD] = {"INSERT OR REPLACE INTO gpu_threads(os_tid, name) VALUES (?, ?)", "gpu_threads"},
    [ST_S_EXEC] = {NULL, "schema"},
};

static const char lost_spans_sql[] =
    "CREATE TABLE IF NOT EXISTS lost_spans(id INTEGER PRIMARY KEY, source TEXT NOT NULL,\n"
    "  thread INTEGER, device INTEGER, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL,\n"
    "  n_records INTEGER NOT NULL)";

/* Errors that a later attempt may not meet: the disk, the system, a lock. */
static int transient(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_NOMEM:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
        return 1;
    default:
        return 0;
    }
}

static void report_fail(st_store *s, const char *what)
{
    st_trace *t = s->t;
    if (t->writer_error) return;
    t->writer_error = ST_EIO;
    snprintf(t->writer_msg, sizeof t->writer_msg, "trace '%s': %s: %s", t->path, what,
             sqlite3_errmsg(t->db));
    st_log(t, ST_LOG_ERROR, "%s", t->writer_msg);
}

static int prepare(st_store *s, int i)
{
    if (s->st[i] || !stmt_defs[i].sql) return SQLITE_OK;
    return sqlite3_prepare_v3(s->t->db, stmt_defs[i].sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
}

int st_store_open(st_store **out, st_trace *t, size_t retry_max_bytes)
{
    *out = NULL;
    st_store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(t->writer_msg, sizeof t->writer_msg, "out of memory");
        return -1;
    }
    s->t = t;
    s->max_bytes = retry_max_bytes;
    s->healthy = 1;
    /* The optional tables' statements are prepared when first used. */
    for (int i = 0; i < ST_S_COUNT; i++) {
        if (i == ST_S_GPU_CHUNK || i == ST_S_GPU_STRING || i == ST_S_LOST_SPAN || i == ST_S_FLOW_CHUNK ||
            i >= ST_S_CPU_CHUNK)
            continue;
        if (prepare(s, i) != SQLITE_OK) {
            snprintf(t->writer_msg, sizeof t->writer_msg, "trace '%s': prepare %s: %s", t->path,
                     stmt_defs[i].what, sqlite3_errmsg(t->db));
            st_store_close(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

static int is_chunk(int stmt)
{
    return stmt == ST_S_RANGE_CHUNK || stmt == ST_S_COUNTER_CHUNK || stmt == ST_S_GPU_CHUNK;
}

static size_t row_bytes(const held_row *r)
{
    size_t bytes = sizeof *r;
    for (int i = 0; i < r->n; i++)
        if (r->v[i].type == SQLITE_TEXT || r->v[i].type == SQLITE_BLOB) bytes += r->v[i].len + 1;
    return bytes;
}

static void row_free(held_row *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->v[i].type == SQLITE_TEXT || r->v[i].type == SQLITE_BLOB) free((void *)r->v[i].p);
}

static void rows_clear(st_store *s)
{
    for (size_t i = 0; i < s->n_rows; i++) row_free(&s->rows[i]);
    s->n_rows = 0;
    s->held_bytes = 0;
    s->held_chunks = 0;
}

void st_store_close(st_store *s)
{
    if (!s) return;
    for (int i = 0; i < ST_S_COUNT; i++) sqlite3_finalize(s->st[i]);
    rows_clear(s);
    free(s->rows);
    free(s);
}

/* 0: done; 1: a transient failure; -1: failed for good (reported). */
static int run_row(st_store *s, const held_row *r)
{
    sqlite3 *db = s->t->db;
    int rc;
    if (r->stmt == ST_S_EXEC) {
        rc = sqlite3_exec(db, r->v[0].p, NULL, NULL, NULL);
    } else {
        rc = prepare(s, r->stmt);
        if (rc == SQLITE_OK) {
            sqlite3_stmt *st = s->st[r->stmt];
            for (int i = 0; i < r->n; i++) {
                const st_val *v = &r->v[i];
                if (v->type == SQLITE_INTEGER) sqlite3_bind_int64(st, i + 1, v->i);
                else if (v->type == SQLITE_TEXT) sqlite3_bind_text(st, i + 1, v->p, (int)v->len, SQLITE_STATIC);
                else if (v->type == SQLITE_BLOB) sqlite3_bind_blob(st, i + 1, v->p, (int)v->len, SQLITE_STATIC);
                else sqlite3_bind_null(st, i + 1);
            }
            rc = sqlite3_step(st);
            sqlite3_reset(st);
            sqlite3_clear_bindings(st);
            if (rc == SQLITE_DONE) rc = SQLITE_OK;
        }
    }
    if (rc == SQLITE_OK) return 0;
    if (transient(rc)) {
        snprintf(s->error, sizeof s->error, "%s: %s", stmt_defs[r->stmt].what, sqlite3_errmsg(db));
        return 1;
    }
    report_fail(s, stmt_defs[r->stmt].what);
    return -1;
}

static void rollback(st_store *s)
{
    if (!sqlite3_get_autocommit(s->t->db)) sqlite3_exec(s->t->db, "ROLLBACK", NULL, NULL, NULL);
}

/* A transient failure: the open transaction is abandoned; the rows held
 * wait for the next commit. */
static void fall_back(st_store *s)
{
    rollback(s);
    s->failed_commits++;
    if (s->healthy)
        st_log(s->t, ST_LOG_WARNING,
                "trace '%s': cannot write (%s); keeping the records in memory (up to %zu MiB) "
                "and retrying at each commit",
                s->t->path, s->error, s->max_bytes >> 20);
    s->healthy = 0;
}

static held_row *hold(st_store *s, int stmt, int n, const st_val *v)
{
    if (s->n_rows == s->cap_rows) {
        size_t cap = s->cap_rows ? s->cap_rows * 2 : 256;
        held_row *a = realloc(s->rows, cap * sizeof *a);
        if (!a) return NULL;
        s->rows = a;
        s->cap_rows = cap;
    }
    held_row *r = &s->rows[s->n_rows];
    r->stmt = (uint8_t)stmt;
    r->n = (uint8_t)n;
    size_t bytes = sizeof *r;
    for (int i = 0; i < n; i++) {
        r->v[i] = v[i];
        if (v[i].type == SQLITE_TEXT || v[i].type == SQLITE_BLOB) {
            char *copy = malloc(v[i].len + 1);
            if (!copy) {
                r->n = (uint8_t)i;
                row_free(r);
                return NULL;
            }
            if (v[i].len) memcpy(copy, v[i].p, v[i].len);
            copy[v[i].len] = '\0';
            r->v[i].p = copy;
            bytes += v[i].len + 1;
        }
    }
    s->n_rows++;
    s->held_bytes += bytes;
    if (is_chunk(stmt)) s->held_chunks++;
    return r;
}

void st_store_row(st_store *s, int stmt, int n, const st_val *v)
{
    held_row *r = hold(s, stmt, n, v);
    if (!r) {
        /* No memory to keep a copy: run it unheld (lost if this transaction fails). */
        if (s->healthy) {
            held_row tmp = {(uint8_t)stmt, (uint8_t)n, {{0}}};
            memcpy(tmp.v, v, (size_t)n * sizeof *v);
            int rc = run_row(s, &tmp);
            if (rc == 1) fall_back(s);
        }
        return;
    }
    if (s->healthy) {
        int rc = run_row(s, r);
        if (rc < 0) {
            s->n_rows--;
            s->held_bytes -= row_bytes(r);
            if (is_chunk(r->stmt)) s->held_chunks--;
            row_free(r);
        } else if (rc == 1) {
            fall_back(s);
        }
    }
    if (!s->healthy && s->held_chunks && s->held_bytes > s->max_bytes) st_store_discard_chunks(s);
}

void st_store_begin(st_store *s)
{
    if (!s->healthy) return;
    int rc = sqlite3_exec(s->t->db, "BEGIN", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        snprintf(s->error, sizeof s->error, "BEGIN: %s", sqlite3_errmsg(s->t->db));
        fall_back(s);
    }
}

int st_store_wants_commit(const st_store *s)
{
    return s->healthy && s->max_bytes && s->held_bytes > s->max_bytes / 2;
}

static void put_meta_count(st_store *s, const char *key, uint64_t value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(buf)};
    st_store_row(s, ST_S_META, 2, v);
}

int st_store_commit(st_store *s)
{
    sqlite3 *db = s->t->db;
    if (s->failed_commits != s->failed_written) {
        s->failed_written = s->failed_commits;
        put_meta_count(s, "failed_commits", s->failed_commits);
    }
    if (s->healthy) {
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) {
            rows_clear(s);
            return 0;
        }
        snprintf(s->error, sizeof s->error, "COMMIT: %s", sqlite3_errmsg(db));
        fall_back(s);
        return 1;
    }
    /* Replay everything held in a fresh transaction; the failure count held
     * above goes in with it, so a trace that recovered says how often its
     * commits failed. */
    rollback(s);
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK ? 0 : 1;
    for (size_t i = 0; !rc && i < s->n_rows; i++) {
        rc = run_row(s, &s->rows[i]);
        if (rc < 0) rc = 0; /* reported; the others still go in */
    }
    if (!rc && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(s->error, sizeof s->error, "COMMIT: %s", sqlite3_errmsg(db));
        rc = 1;
    }
    if (rc) {
        rollback(s);
        s->failed_commits++;
        return 1;
    }
    st_log(s->t, ST_LOG_INFO, "trace '%s': written again after %llu failed commit%s%s\n", s->t->path,
            (unsigned long long)s->failed_commits, s->failed_commits == 1 ? "" : "s",
            s->lost_events ? "; lost events are in lost_spans" : "; nothing lost");
    s->healthy = 1;
    s->discard_said = 0;
    rows_clear(s);
    return 0;
}

/* ---- lost spans ---- */

typedef struct span {
    const char *source;
    int64_t owner; /* thread id, or GPU device */
    int64_t t0, t1;
    uint64_t n;
} span;

void st_store_discard_chunks(st_store *s)
{
    span spans[64];
    size_t n_spans = 0, kept = 0;
    uint64_t lost = 0;
    for (size_t i = 0; i < s->n_rows; i++) {
        held_row *r = &s->rows[i];
        const char *source = r->stmt == ST_S_RANGE_CHUNK ? "ranges"
                             : r->stmt == ST_S_COUNTER_CHUNK ? "counters"
                             : r->stmt == ST_S_GPU_CHUNK ? "gpu"
                             : NULL;
        /* Only while the table of spans has room; the rest waits for the
         * next discard. */
        if (!source || n_spans == sizeof spans / sizeof spans[0]) {
            s->rows[kept++] = *r;
            continue;
        }
        int gpu = r->stmt == ST_S_GPU_CHUNK;
        int64_t owner = r->v[0].i;
        int64_t t0 = r->v[gpu ? 2 : 1].i, t1 = r->v[gpu ? 3 : 2].i;
        uint64_t n = (uint64_t)r->v[gpu ? 4 : 3].i;
        size_t j = 0;
        while (j < n_spans && (spans[j].source != source || spans[j].owner != owner)) j++;
        if (j == n_spans) spans[n_spans++] = (span){source, owner, t0, t1, 0};
        if (t0 < spans[j].t0) spans[j].t0 = t0;
        if (t1 > spans[j].t1) spans[j].t1 = t1;
        spans[j].n += n;
        lost += n;
        s->held_bytes -= row_bytes(r);
        s->held_chunks--;
        row_free(r);
    }
    s->n_rows = kept;
    if (!n_spans) return;
    if (!s->lost_table) {
        st_store_exec(s, lost_spans_sql);
        s->lost_table = 1;
    }
    for (size_t j = 0; j < n_spans; j++) {
        int gpu = strcmp(spans[j].source, "gpu") == 0;
        st_val v[6] = {ST_VTEXT(spans[j].source),
                       gpu ? (st_val){SQLITE_NULL, 0, NULL, 0} : ST_VINT(spans[j].owner),
                       gpu ? ST_VINT(spans[j].owner) : (st_val){SQLITE_NULL, 0, NULL, 0},
                       ST_VINT(spans[j].t0), ST_VINT(spans[j].t1), ST_VINT(spans[j].n)};
        st_store_row(s, ST_S_LOST_SPAN, 6, v);
    }
    s->lost_events += lost;
    put_meta_count(s, "lost_events", s->lost_events);
    if (s->discard_said) return;
    s->discard_said = 1;
    st_log(s->t, ST_LOG_ERROR,
            "trace '%s': still cannot write (%s); discarding the records held past %zu MiB, "
            "recorded in the trace's lost_spans",
            s->t->path, s->error, s->max_bytes >> 20);
}
