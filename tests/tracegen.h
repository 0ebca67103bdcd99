/* tracegen.h: writes traces of the documented format (docs/trace-format.md,
 * schema version 1) from a description held in memory, for the tests, the
 * benchmarks and the fuzz seeds. One writer for all of them, so that every
 * hand-made trace has the tracer's own schema (tracer/st_schema.h) and chunk
 * encodings (tracer/encoding.h), and every timestamp is exactly what its
 * generator says: expected answers can be worked out by hand.
 *
 * A trace is described, then written:
 *
 *   tg_trace *g = tg_create("gen");                   meta as the writer's, program "gen"
 *   uint32_t work = tg_stage(g, "work", "work");      stage ids 0, 1, ... in order
 *   uint32_t w = tg_thread(g, "worker0", "worker");   thread 0 (tg_thread_at(g, w) to edit)
 *   tg_range(g, w, work, 1000, 2000);                 a begin and its end
 *   tg_step(g, 0, 1000, 0);                           step marks
 *   tg_write(g, "gen.sqlite");                        replaces any file there
 *   tg_free(g);
 *
 * Each thread holds a script of events (begin, end, and "cut": end the chunk
 * here), encoded when the trace is written into range_chunks rows of at
 * most chunk_events events (0: cut only where the script says), so chunk
 * boundaries may cut through open ranges as the tracer's do. Counter samples
 * go into one counter_chunks row per thread. GPU chunks are encoded when
 * they are added (version 2 as the writer does, or version 1, which readers
 * still decode); GPU tables are written when the trace has GPU strings or
 * chunks (or gpu_tables is set).
 *
 * Nothing here asserts through cmocka: a failure (no memory, an encoder or
 * SQLite error) prints "tracegen: ..." on stderr and exits with status 1, so
 * the bench and fuzz programs may use it as well as the tests. Strings
 * passed in are copied.
 */
#ifndef ST_TESTS_TRACEGEN_H
#define ST_TESTS_TRACEGEN_H

#include <stddef.h>
#include <stdint.h>

#include "stagetrace_reader.h"

struct st_buf;     /* encoding.h */
struct st_cpu_rec; /* encoding.h */

enum tg_event_kind { TG_BEGIN, TG_END, TG_CUT };

typedef struct tg_event {
    uint8_t kind;   /* tg_event_kind */
    uint32_t stage; /* TG_BEGIN */
    int64_t ts_ns;  /* TG_BEGIN, TG_END */
} tg_event;

/* A row of `threads` and its event script. Fields may be edited after
 * tg_thread: the defaults are id = index, os_tid = the trace's os_tid_base +
 * index, device -1, rank = the trace's meta rank at the time (0), dropped 0. */
typedef struct tg_thread_row {
    int64_t id, os_tid, device, rank, dropped;
    char *name, *role;
    tg_event *ev;
    size_t n_ev, cap_ev;
} tg_thread_row;

typedef struct tg_trace tg_trace;

/* ---- the description ---- */

/* A trace whose meta are those of a complete run of the writer, in the
 * writer's order: schema_version 1, status complete, program, tool_version
 * 0.1.0, run_id 1700000000-42, start_utc, start_ns 1000000000, clock
 * monotonic, tsc_hz 0, host testhost, pid 42, argv = program, rank 0,
 * world_size 1, profile_interval 0, commit_ms 250, ring_records 65536,
 * dropped_events 0. Change them with tg_meta / tg_meta_unset. */
tg_trace *tg_create(const char *program);
void tg_free(tg_trace *g);

/* Meta: sets key (in place when present, else appended), removes it, or
 * removes every key. */
void tg_meta(tg_trace *g, const char *key, const char *value);
void tg_meta_int(tg_trace *g, const char *key, long long value);
void tg_meta_unset(tg_trace *g, const char *key);
void tg_meta_clear(tg_trace *g);

/* Write options. */
void tg_set_chunk_events(tg_trace *g, uint32_t n); /* events per range chunk (default 7; 0: script cuts only) */
void tg_set_os_tid_base(tg_trace *g, int64_t base); /* os_tid of thread index 0 (default 1000) */
void tg_set_step_thread(tg_trace *g, int64_t id);  /* steps.thread of the marks (default 0) */
void tg_set_page_size(tg_trace *g, int bytes);     /* SQLite page size, and VACUUM at the end (default: SQLite's) */
void tg_set_gpu_tables(tg_trace *g, int on);       /* write the GPU tables even when empty */
void tg_set_interleave(tg_trace *g, int on);       /* range chunks in rounds: each thread's first, then
                                                      each thread's second, ... (default: thread by thread) */

/* Rows; each returns the new row's id (its index: the order of calls). */
uint32_t tg_stage(tg_trace *g, const char *name, const char *kind);
uint32_t tg_counter(tg_trace *g, const char *name, const char *unit);
uint32_t tg_thread(tg_trace *g, const char *name, const char *role);
tg_thread_row *tg_thread_at(const tg_trace *g, uint32_t thread);
uint32_t tg_n_threads(const tg_trace *g);
void tg_step(tg_trace *g, uint64_t step, int64_t ts_ns, uint64_t tokens);

/* Events of a thread (by index), in time order. */
void tg_begin(tg_trace *g, uint32_t thread, uint32_t stage, int64_t ts_ns);
void tg_end(tg_trace *g, uint32_t thread, int64_t ts_ns);
void tg_range(tg_trace *g, uint32_t thread, uint32_t stage, int64_t start_ns, int64_t end_ns);
void tg_cut(tg_trace *g, uint32_t thread); /* the chunk ends here */
/* The latest event time of every thread (INT64_MIN when none). */
int64_t tg_last_ts(const tg_trace *g);

/* A counter sample of a thread (by index). */
void tg_sample(tg_trace *g, uint32_t thread, uint32_t counter, int64_t ts_ns, double value);

/* GPU: a gpu_strings row (ids 0, 1, ... in order; records name it as id + 1),
 * and a gpu_chunks row of records r[0..n) encoded as chunk version 2 or 1. */
uint32_t tg_gpu_string(tg_trace *g, const char *value);
void tg_gpu_chunk(tg_trace *g, int64_t device, int64_t stream, const st_gpu_rec *r, size_t n);
void tg_gpu_chunk_v1(tg_trace *g, int64_t device, int64_t stream, const st_gpu_rec *r, size_t n);

/* Chunk version 1 of records r[0..n) into b (replacing its contents); t0,
 * t1: the earliest start and latest end (either may be NULL). */
void tg_encode_gpu_v1(struct st_buf *b, const st_gpu_rec *r, size_t n, int64_t *t0_ns, int64_t *t1_ns);

/* CPU capture (docs/trace-format.md, "CPU capture"): the five cpu_* tables
 * are written (after the GPU tables) when any of these was called or
 * tg_set_cpu_tables is on. tg_cpu_thread: a cpu_threads row for a thread (by
 * index): os_tid the thread's, reason "", ring_bytes 65536, refused_bytes 0,
 * switches, samples and lost summed from its chunks at tg_write (edit the
 * returned row to change any). tg_cpu_chunk: a cpu_chunks row of records
 * r[0..n) of a thread (by index), through the tracer's encoder.
 * tg_cpu_stack: a cpu_stacks row (ids 0, 1, ... in order). tg_cpu_map: a
 * cpu_maps row (ids 0, 1, ...). tg_cpu_symbol: a cpu_symbols row, its
 * file_offset from the map's (0 for map -1). */
typedef struct tg_cpu_thread_row {
    int64_t thread, os_tid;
    char *status, *reason;
    int64_t period_ns, ring_bytes, refused_bytes, start_ns, cpu_ns, switches, samples, lost;
    int counts_given; /* 1: switches, samples and lost as set here, not summed */
} tg_cpu_thread_row;
void tg_set_cpu_tables(tg_trace *g, int on);
tg_cpu_thread_row *tg_cpu_thread(tg_trace *g, uint32_t thread, const char *status, int64_t period_ns, int64_t start_ns,
                                 int64_t cpu_ns);
void tg_cpu_chunk(tg_trace *g, uint32_t thread, const struct st_cpu_rec *r, size_t n);
uint32_t tg_cpu_stack(tg_trace *g, const uint64_t *frames, uint32_t n);
uint32_t tg_cpu_map(tg_trace *g, uint64_t start, uint64_t end, uint64_t file_offset, const char *path,
                    const char *build_id);
void tg_cpu_symbol(tg_trace *g, uint64_t addr, int64_t map, const char *name, uint64_t sym_offset);

/* ---- writing ---- */

/* Writes the trace to path, replacing any file there (and its side files):
 * the schema, meta, threads, stages, counter_names, steps, range_chunks
 * (thread by thread), counter_chunks, then gpu_strings and gpu_chunks, in
 * one transaction. */
void tg_write(const tg_trace *g, const char *path);

/* Runs sql on the trace at path (to break a good trace, say). */
void tg_exec(const char *path, const char *sql);

/* For readers of the description (expected values computed from it). */
uint32_t tg_n_stages(const tg_trace *g);
const char *tg_stage_name(const tg_trace *g, uint32_t stage);
const char *tg_stage_kind(const tg_trace *g, uint32_t stage);
uint32_t tg_n_steps(const tg_trace *g);
void tg_step_at(const tg_trace *g, uint32_t i, uint64_t *step, int64_t *ts_ns, uint64_t *tokens);

#endif
