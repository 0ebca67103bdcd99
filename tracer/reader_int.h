/* reader_int.h: what the reader's files share (not installed; programs
 * include stagetrace_reader.h, the library's other files st_reader.h).
 * The reader is split by job: reader.c opens a trace and holds its small
 * tables, reader_check.c validates a file at open, reader_clock.c maps a
 * rank's times onto rank 0's clock, reader_iter.c reads the chunk tables
 * (ranges, events, counter samples, flows, windows), reader_gpu.c the GPU
 * activity and its launch join, reader_set.c a rank set. The structs are
 * here so that each file reads its own fields; functions private to the
 * reader's files are named st_rd_. */
#ifndef READER_INT_H
#define READER_INT_H

#include "st_reader.h"
#include "st_sqlite.h"

int st_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct meta_kv {
    char *key, *value;
} meta_kv;

typedef struct st_reader_methods st_reader_methods;

struct st_reader {
    const st_reader_methods *m; /* a file's (reader.c) or a rank set's (reader_set.c) */
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
    struct cpu_data *cpu; /* reader_cpu.c: the CPU tables once read; NULL before */
};

typedef struct set_part {
    st_reader *r;
    int rank;
    st_rank_clock clock;
    uint32_t *stage_map;   /* the rank's stage id -> the set's */
    uint32_t *counter_map; /* the rank's counter id -> the set's */
    uint32_t *thread_of;   /* the rank's thread index -> the set's thread id */
} set_part;

/* ---- chunk iteration shared by the three iterators (reader_iter.c) ---- */

typedef struct chunk_rows {
    st_reader *r;
    sqlite3_stmt *st;
    const char *table, *count_col;
    int64_t row_id, thread, n_items;
    const void *data;
    int size;
} chunk_rows;

/* ---- a rank set's walk over its threads ----
 * A rank set's ranges, counter samples and flows are read thread by thread,
 * in the set's thread order (or only the thread asked for), each with an
 * iterator of the same kind opened on the thread's rank (set_walk_next, in
 * reader_set.c); the caller maps the rows' times. */
typedef struct set_walk {
    st_reader *set;      /* NULL: the iterator reads one file */
    void *sub;           /* the current thread's iterator, on its rank's reader */
    int64_t want_thread; /* < 0: every thread */
    uint32_t next_thread, cur_thread;
} set_walk;

#define RANGE_BATCH 512

struct st_range_iter {
    struct st_range_iter_head head; /* first: st_range_iter_next reads it */
    const st_reader_methods *m;     /* its reader's */
    chunk_rows rows;
    int in_chunk;
    int pending;                    /* 0 or the error met after the batch */
    int64_t t0, t1;
    st_event_cursor cur;
    set_walk walk; /* a rank set's */
    st_range batch[RANGE_BATCH];
    uint32_t batch_event[RANGE_BATCH]; /* each range's end event: its index in the chunk */
};

struct st_event_iter {
    const st_reader_methods *m; /* its reader's */
    chunk_rows rows;
    int in_chunk;
    st_event_cursor cur;
    st_event_iter *sub; /* a rank set's: on the thread's rank */
    const set_part *part;
};

struct st_sample_iter {
    const st_reader_methods *m; /* its reader's */
    chunk_rows rows;
    int in_chunk;
    int64_t t0, t1;
    st_counter_cursor cur;
    set_walk walk; /* a rank set's */
};

struct st_flow_iter {
    const st_reader_methods *m; /* its reader's */
    chunk_rows rows;
    int in_chunk, empty;
    int64_t t0, t1;
    st_flow_cursor cur;
    set_walk walk; /* a rank set's (set_flow_next) */
};

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
    const st_reader_methods *m; /* its reader's */
    st_reader *r;
    sqlite3_stmt *st;
    int64_t t0, t1;
    int64_t row_id, device, stream, n_items;
    int in_chunk;
    st_gpu_cursor cur;
    char **names;
    uint32_t n_names;
    struct gpu_tname *tnames; /* gpu_threads rows, by os_tid */
    uint32_t n_tnames;
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

/* ---- reader_check.c: validation at open, and the checks a chunk row gets as it is read ---- */
int st_rd_int_col(sqlite3_stmt *st, int col, int64_t *out);
int st_rd_bad(const char *table, const char *what);
int st_rd_object_kind(sqlite3 *db, const char *name);
int st_rd_is_table(sqlite3 *db, const char *name);
const char *st_rd_type_name(int sqlite_type);
int st_rd_check_typed(sqlite3_stmt *st, int first, const char *table, int64_t id, const char *const *names, int n);
int st_rd_check_blob(sqlite3_stmt *st, int col, const char *table, int64_t id);
int st_rd_check_meta_table(st_reader *r);
int st_rd_check_small_tables(st_reader *r);
int st_rd_check_chunk_tables(st_reader *r);
int st_rd_check_cpu_tables(st_reader *r);
int st_rd_check_cpu_extra(st_reader *r, const char *table);

/* ---- reader_clock.c ---- */
int st_rd_check_rank_meta(st_reader *r);

/* ---- reader_iter.c: the chunk headers' counts ---- */
int st_rd_unreadable(const char *table, sqlite3 *db);
int st_rd_push_count(st_chunk_count **v, uint32_t *n, uint32_t *cap, int64_t key, int64_t count);
int st_rd_chunk_rows_open(chunk_rows *c, st_reader *r, const char *table, const char *count_col, int64_t thread,
                          int64_t t0, int64_t t1);
int st_rd_chunk_rows_next(chunk_rows *c); /* 1: a row; 0: no more; <0 error */
int st_rd_chunk_corrupt(chunk_rows *c);
int st_rd_chunk_counts(st_reader *r, const char *table, const char *sql, int strict, st_chunk_count **out,
                       uint32_t *n);

/* ---- the reader's methods ----
 * What a single file and a rank set do differently, behind one table of
 * operations each (as SQLite's sqlite3_io_methods): file_methods in
 * reader.c, over the st_rd_file_ functions below; set_methods in
 * reader_set.c. A public entry point does what both share (allocation,
 * clearing *out) and calls its reader's method for the rest; an iterator
 * keeps its reader's table, so that its next and close need no reader. */
struct st_reader_methods {
    void (*close)(st_reader *r); /* what it holds beyond the tables every reader has */
    const char *(*meta)(const st_reader *r, const char *key);
    int (*chunk_totals)(st_reader *r, st_chunk_totals *out);
    int (*range_chunks_per_thread)(st_reader *r, st_chunk_count **out, uint32_t *n);
    int (*unended)(st_reader *r, uint32_t thread, st_open_range *stack);
    /* iterators: open fills in an iterator allocated with its window (and m);
     * close frees what open made, never the iterator itself */
    int (*range_open)(st_range_iter *it, st_reader *r, int64_t thread);
    int (*range_fill)(st_range_iter *it, st_range *out);
    void (*range_close)(st_range_iter *it);
    int (*event_open)(st_event_iter *it, st_reader *r, uint32_t thread);
    int (*event_next)(st_event_iter *it, st_event *out);
    void (*event_close)(st_event_iter *it);
    int (*sample_open)(st_sample_iter *it, st_reader *r, int64_t thread);
    int (*sample_next)(st_sample_iter *it, st_sample_row *out);
    void (*sample_close)(st_sample_iter *it);
    int (*has_flows)(st_reader *r);
    int (*flow_open)(st_flow_iter *it, st_reader *r, int64_t thread);
    int (*flow_next)(st_flow_iter *it, st_flow_row *out);
    void (*flow_close)(st_flow_iter *it);
    void (*flow_pos)(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index);
    int (*has_gpu)(st_reader *r);
    int (*gpu_open)(st_gpu_iter *it, int64_t device); /* it->r, window and api_mode set */
    int (*gpu_next)(st_gpu_iter *it, st_gpu_row *out);
    void (*gpu_close)(st_gpu_iter *it);
    void (*gpu_pos)(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index);
    int (*gpu_records_per_device)(st_reader *r, st_chunk_count **out, uint32_t *n);
    int (*gpu_devices)(st_reader *r, int32_t **out, uint32_t *n);
    int (*gpu_span)(st_reader *r, st_gpu_headers *out);
    int (*gpu_headers)(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out);
    int (*has_cpu)(st_reader *r);
    int (*cpu_thread)(st_reader *r, uint32_t thread, st_cpu_thread_info *out);
    int (*cpu_open)(st_cpu_iter *it, st_reader *r, uint32_t thread); /* it->r, window set */
    int (*cpu_next)(st_cpu_iter *it, st_cpu_row *out);
    void (*cpu_close)(st_cpu_iter *it);
    int (*cpu_stack)(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n);
    int (*cpu_frame_name)(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out);
    int (*cpu_map)(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out);
    int (*cpu_frame_lines)(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines, uint32_t *n);
    int (*cpu_block_open)(st_cpu_block_iter *it, st_reader *r, uint32_t thread); /* it->r, window set */
    int (*cpu_block_next)(st_cpu_block_iter *it, st_cpu_block_row *out);
    void (*cpu_block_close)(st_cpu_block_iter *it);
    int (*cpu_window_open)(st_cpu_window_iter *it, st_reader *r);
    int (*cpu_window_next)(st_cpu_window_iter *it, st_cpu_window_row *out);
    void (*cpu_window_close)(st_cpu_window_iter *it);
};

/* st_reader_meta and st_reader_thread_by_id, inline: the files that
 * reader.c calls (reader_check.c, reader_clock.c, reader_iter.c) read
 * them without calling back into it. */
static inline const char *st_rd_meta(const st_reader *r, const char *key) { return r->m->meta(r, key); }
static inline const st_thread_info *st_rd_thread_by_id(const st_reader *r, uint32_t id)
{
    if (id >= r->thread_index_len || r->thread_index[id] < 0) return NULL;
    return &r->threads[r->thread_index[id]];
}

/* ---- reader_cpu.c: the CPU capture ---- */
struct st_cpu_iter {
    const st_reader_methods *m; /* its reader's */
    st_reader *r;
    uint32_t thread;
    int64_t t0, t1;
    chunk_rows rows;
    int in_chunk, empty;
    int timer_thread; /* cpu_threads.status 'timer': its samples are the signal sampler's */
    st_cpu_cursor cur;
    /* the thread's innermost stage after each of its events, built at the
     * first sample stored as "unknown" */
    int timeline_loaded;
    uint32_t n_changes;
    int64_t *change_ts;
    int32_t *change_stage;
    st_cpu_iter *sub; /* a rank set's: on the thread's rank */
    const set_part *part;
    uint32_t part_index;
};
/* cpu_blocks and cpu_windows rows, read with SQL (a file's), or through
 * the rank's iterator (a set's: sub, part). */
struct st_cpu_block_iter {
    const st_reader_methods *m;
    st_reader *r;
    uint32_t thread;
    int64_t t0, t1;
    sqlite3_stmt *st; /* NULL: no rows */
    st_cpu_block_iter *sub;
    const set_part *part;
};
struct st_cpu_window_iter {
    const st_reader_methods *m;
    st_reader *r;
    sqlite3_stmt *st; /* NULL: no rows */
    st_cpu_window_iter *sub;
    uint32_t part; /* a set's: the part sub reads */
};
void st_rd_cpu_free(st_reader *r);
int st_rd_file_cpu_block_open(st_cpu_block_iter *it, st_reader *r, uint32_t thread);
int st_rd_file_cpu_block_next(st_cpu_block_iter *it, st_cpu_block_row *out);
void st_rd_file_cpu_block_close(st_cpu_block_iter *it);
int st_rd_file_cpu_window_open(st_cpu_window_iter *it, st_reader *r);
int st_rd_file_cpu_window_next(st_cpu_window_iter *it, st_cpu_window_row *out);
void st_rd_file_cpu_window_close(st_cpu_window_iter *it);
int st_rd_file_has_cpu(st_reader *r);
int st_rd_file_cpu_thread(st_reader *r, uint32_t thread, st_cpu_thread_info *out);
int st_rd_file_cpu_open(st_cpu_iter *it, st_reader *r, uint32_t thread);
int st_rd_file_cpu_next(st_cpu_iter *it, st_cpu_row *out);
void st_rd_file_cpu_close(st_cpu_iter *it);
int st_rd_file_cpu_stack(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n);
int st_rd_file_cpu_frame_name(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out);
int st_rd_file_cpu_map(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out);
int st_rd_file_cpu_frame_lines(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines, uint32_t *n);

/* ---- reader_iter.c: one file's chunk methods ---- */
int st_rd_file_chunk_totals(st_reader *r, st_chunk_totals *out);
int st_rd_file_range_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n);
int st_rd_file_unended(st_reader *r, uint32_t thread, st_open_range *stack);
int st_rd_file_range_open(st_range_iter *it, st_reader *r, int64_t thread);
int st_rd_file_range_fill(st_range_iter *it, st_range *out);
void st_rd_file_range_close(st_range_iter *it);
int st_rd_file_event_open(st_event_iter *it, st_reader *r, uint32_t thread);
int st_rd_file_event_next(st_event_iter *it, st_event *out);
void st_rd_file_event_close(st_event_iter *it);
int st_rd_file_sample_open(st_sample_iter *it, st_reader *r, int64_t thread);
int st_rd_file_sample_next(st_sample_iter *it, st_sample_row *out);
void st_rd_file_sample_close(st_sample_iter *it);
int st_rd_file_has_flows(st_reader *r);
int st_rd_file_flow_open(st_flow_iter *it, st_reader *r, int64_t thread);
int st_rd_file_flow_next(st_flow_iter *it, st_flow_row *out);
void st_rd_file_flow_close(st_flow_iter *it);
void st_rd_file_flow_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index);

/* ---- reader_gpu.c: one file's GPU methods ---- */
int st_rd_file_has_gpu(st_reader *r);
int st_rd_file_gpu_open(st_gpu_iter *it, int64_t device);
int st_rd_file_gpu_next(st_gpu_iter *it, st_gpu_row *out);
void st_rd_file_gpu_close(st_gpu_iter *it);
void st_rd_file_gpu_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index);
int st_rd_file_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n);
int st_rd_file_gpu_devices(st_reader *r, int32_t **out, uint32_t *n);
int st_rd_file_gpu_span(st_reader *r, st_gpu_headers *out);
int st_rd_file_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out);

#endif
