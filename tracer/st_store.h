/* st_store.h: the writer's SQLite side (store.c). The writer hands it rows;
 * the store runs them in the open transaction and also keeps a copy of each
 * until the transaction commits, so that a commit that fails (a full disk,
 * an I/O error) loses nothing: the store rolls back, keeps the rows in
 * memory and replays them at the next commit. Past a memory bound it
 * discards the chunk rows it holds (ranges, counter samples, GPU activity)
 * and records what they covered in the lost_spans table and meta
 * lost_events (docs/trace-format.md). Private to the tracer. */
#ifndef ST_STORE_H
#define ST_STORE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct st_trace st_trace;
typedef struct st_store st_store;

/* The statements a row may use; the order of their values is the order of
 * the columns in each statement (store.c, stmt_defs). */
enum st_store_stmt {
    ST_S_RANGE_CHUNK,   /* thread, t0_ns, t1_ns, n_events, n_ranges, data */
    ST_S_COUNTER_CHUNK, /* thread, t0_ns, t1_ns, n_samples, data */
    ST_S_GPU_CHUNK,     /* device, stream, t0_ns, t1_ns, n_records, data */
    ST_S_STEP,
    ST_S_MARK,
    ST_S_STRING,
    ST_S_THREAD,
    ST_S_STAGE,
    ST_S_COUNTER,
    ST_S_DROPPED,
    ST_S_META,
    ST_S_GPU_STRING,
    ST_S_LOST_SPAN,
    ST_S_FLOW_CHUNK,    /* thread, t0_ns, t1_ns, n_records, data */
    ST_S_CPU_CHUNK,     /* thread, t0_ns, t1_ns, n_records, data */
    ST_S_CPU_STACK,     /* id, n_frames, data */
    ST_S_CPU_THREAD,    /* the 12 columns of cpu_threads */
    ST_S_CPU_MAP,       /* id, start, end, file_offset, path, build_id */
    ST_S_CPU_SYMBOL,    /* addr, map, file_offset, name, sym_offset */
    ST_S_CPU_LINE,      /* addr, depth, function, file, line, col */
    ST_S_CPU_BLOCK,     /* thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan */
    ST_S_CPU_WINDOW,    /* the 10 columns of cpu_windows */
    ST_S_GPU_PAUSE,     /* t0_ns, t1_ns */
    ST_S_GPU_THREAD,    /* os_tid, name */
    ST_S_EXEC,          /* one text value: SQL run with sqlite3_exec (DDL) */
    ST_S_COUNT
};

typedef struct st_val {
    int type;          /* SQLITE_INTEGER, SQLITE_TEXT or SQLITE_BLOB */
    int64_t i;
    const void *p;     /* text or blob; the store copies it */
    size_t len;
} st_val;

#define ST_VINT(x) ((st_val){SQLITE_INTEGER, (int64_t)(x), NULL, 0})
#define ST_VTEXT(s) ((st_val){SQLITE_TEXT, 0, (s), strlen(s)})
#define ST_VBLOB(d, n) ((st_val){SQLITE_BLOB, 0, (d), (n)})

/* Prepares the statements on t->db; -1 with t->writer_msg set on failure. */
int st_store_open(st_store **out, st_trace *t, size_t retry_max_bytes);
void st_store_close(st_store *s);

/* Adds a row to the open transaction (runs it now unless an earlier failure
 * left the transaction to be replayed). A row that fails for good (not a
 * full disk or I/O error) is reported through the trace's writer error and
 * left out. */
void st_store_row(st_store *s, int stmt, int n, const st_val *v);
static inline void st_store_exec(st_store *s, const char *sql)
{
    st_val v = ST_VTEXT(sql);
    st_store_row(s, ST_S_EXEC, 1, &v);
}

/* Opens the next transaction (after st_store_commit). */
void st_store_begin(st_store *s);
/* Commits what the rows added since the last commit, and whatever earlier
 * failed commits held. 0: stored; 1: not stored now, kept for the next. */
int st_store_commit(st_store *s);
/* 1 when the rows held have passed half the bound while commits succeed:
 * the writer should commit now rather than at its interval. */
int st_store_wants_commit(const st_store *s);
/* Gives up on the chunk rows held: records them as lost spans (in the held
 * transaction, which stays to be committed). */
void st_store_discard_chunks(st_store *s);

#endif
