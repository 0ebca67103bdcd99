/* stagetrace_reader.h: reading traces from C (docs/tracer.md, "Reading
 * traces from C"). Part of libstagetrace, installed beside stagetrace.h.
 *
 * A trace is untrusted input: st_reader_open opens it read-only with
 * SQLite's defensive mode on and trusted_schema off, checks the schema
 * version and the tables it needs, and loads the small tables (threads,
 * stages, counters, steps) into memory. Chunk tables are decoded on demand,
 * one chunk at a time; a time-window query reads only the chunks whose
 * [t0_ns, t1_ns] overlaps the window.
 *
 * Threads: a reader, and every iterator opened on it, is used by one thread
 * at a time (readers of the same file on different threads are
 * independent). Errors: a function that fails returns a negative ST_E*
 * code (or NULL) and st_last_error() says what is wrong, on the calling
 * thread. Ownership: the reader owns every string and info struct it hands
 * out (valid until st_reader_close); the caller closes each iterator it
 * opened, before closing the reader, and frees (free()) the arrays the
 * per-thread/per-device queries return.
 *
 * Compiled with -DST_DISABLE (which turns recording off), these functions
 * stay real: reading needs the library.
 */
#ifndef STAGETRACE_READER_H
#define STAGETRACE_READER_H

#include <stdint.h>

#include "stagetrace.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ST_DISABLE)
#pragma push_macro("ST_API")
#undef ST_API
#if defined(__GNUC__)
#define ST_API __attribute__((visibility("default")))
#else
#define ST_API
#endif
#define ST__READER_POP_API
#endif

/* A range still open when its thread's events end: its stage and start. */
typedef struct st_open_range {
    uint32_t stage;
    int64_t start_ns;
} st_open_range;

/* A raw begin or end event (st_event_iter_next). */
typedef struct st_event {
    int is_end;          /* 0: begin, 1: end */
    uint32_t stage;
    uint32_t depth;      /* depth of this range (0 = outermost) */
    int64_t ts_ns;       /* the event's time */
    int64_t start_ns;    /* for ends: when the range began */
} st_event;

/* ---- GPU records (docs/trace-format.md, "GPU chunk") ---- */

enum st_gpu_kind {
    ST_GPU_KERNEL = 1,
    ST_GPU_MEMCPY = 2,
    ST_GPU_MEMSET = 3,
    ST_GPU_SYNC = 4,
    ST_GPU_API = 5, /* a CUDA runtime/driver call: (correlation, os_tid, start, dur); device -1 */
    ST_GPU_KIND_MAX = 5
};
/* Memcpy directions (copy_kind of ST_GPU_MEMCPY). */
enum st_gpu_copy { ST_COPY_OTHER = 0, ST_COPY_H2D = 1, ST_COPY_D2H = 2, ST_COPY_D2D = 3, ST_COPY_H2H = 4,
                   ST_COPY_P2P = 5 };
/* Memory kinds (src_mem, dst_mem; memset: dst_mem). */
enum st_gpu_mem { ST_MEM_UNKNOWN = 0, ST_MEM_PAGEABLE = 1, ST_MEM_PINNED = 2, ST_MEM_DEVICE = 3,
                  ST_MEM_MANAGED = 4, ST_MEM_OTHER = 5 };

typedef struct st_gpu_rec {
    uint32_t kind;        /* st_gpu_kind */
    uint32_t name;        /* gpu_strings id + 1; 0: none */
    int64_t start_ns, dur_ns;
    uint64_t bytes;
    uint32_t copy_kind;   /* memcpy: st_gpu_copy; sync: CUPTI's synchronization type */
    uint32_t src_mem, dst_mem;
    uint32_t correlation; /* CUPTI correlation id (graph kernels: the graph launch's) */
    int64_t os_tid;       /* API records: the calling OS thread; others 0 */
} st_gpu_rec;

typedef struct sqlite3 sqlite3;

typedef struct st_thread_info {
    uint32_t id;
    int64_t os_tid;
    const char *name, *role;
    int device, rank;
    uint64_t dropped;
} st_thread_info;

typedef struct st_stage_info {
    uint32_t id;
    const char *name;
    st_kind kind;
} st_stage_info;

typedef struct st_counter_info {
    uint32_t id;
    const char *name, *unit;
} st_counter_info;

typedef struct st_step_info {
    uint64_t step;
    int64_t ts_ns;
    uint64_t tokens;
} st_step_info;

typedef struct st_reader st_reader;

/* Ranks on one clock (docs/trace-format.md, "Ranks on one clock"): a
 * rank's clock measurements from meta, and the mapping of its times onto
 * rank 0's clock. has_open: clock_sync_ns, clock_offset_ns and
 * clock_uncertainty_ns present; has_close: the close keys too. The reader
 * refuses at open a trace whose keys break the format's rules, so every
 * open reader gives a usable st_rank_clock. */
typedef struct st_rank_clock {
    int has_open, has_close;
    int64_t sync_ns, offset_ns, uncertainty_ns;
    int64_t sync_close_ns, offset_close_ns, uncertainty_close_ns;
} st_rank_clock;

/* Exactly the format's mapping, on 128-bit integers (divisions truncate
 * toward zero): t unchanged without has_open; t + offset with has_open
 * alone or when sync_close_ns <= sync_ns; otherwise linear through both
 * measurements, extended beyond them. ST_OK, or ST_ECORRUPT (and
 * st_last_error) when the mapped time does not fit in an int64 (*out is
 * then left alone). */
ST_API int st_rank_clock_map(const st_rank_clock *c, int64_t t_ns, int64_t *out);
/* max(uncertainty_ns, uncertainty_close_ns) of the measurements present; 0 without. */
ST_API int64_t st_rank_clock_uncertainty(const st_rank_clock *c);

/* The one rule for "ranks of one run" (docs/trace-format.md, run_id): two
 * traces are ranks of one run when both have a run_id and the two are equal
 * byte for byte. 1 or 0; NULL (no run_id) matches nothing. */
ST_API int st_run_ids_match(const char *a, const char *b);

/* A rank set: the traces of one multi-process run read as one, on rank 0's
 * clock. Takes the ranks' readers (owned by the set from then on, closed
 * with it, also on failure) and their ranks, in any order: the set orders
 * them by rank (st_reader_part(r, 0) is the lowest rank, whose step marks
 * the set uses), and refuses (ST_EINVAL) a rank given twice or traces that
 * are not ranks of one run (st_run_ids_match), and (ST_ECORRUPT) a rank
 * whose close measurement puts rank 0's clock before its open one. The
 * set's threads are every rank's, ranks ascending, with ids 0, 1, ... and names "r<rank>/<name>" (role,
 * device, os_tid as recorded; rank = the rank given); its stages are one per
 * name (in order of first appearance, ranks ascending; a name of two kinds
 * is refused), its counters one per name; its meta the lowest rank's; its
 * step marks the lowest rank's, mapped. Every time its iterators and functions give is
 * mapped (st_rank_clock_map) and must fall in 0..INT64_MAX (else
 * ST_ECORRUPT). Flow records are merged (per set thread, mapped; see
 * st_reader_flow_slack). GPU records are every rank's, mapped the same way: device
 * d of rank r is device r * ST_SET_DEVICE_STRIDE + d (d 0..999, else
 * ST_ECORRUPT; API calls keep device -1), launching thread and stage the
 * set's; rec.correlation and rec.name are the rank's own (scoped per rank:
 * a correlation id names one launch within a rank; the row's name is the
 * text). Records come rank by rank (ascending), each rank's as its file
 * gives them; a window [t0, t1) is on rank 0's clock. st_reader_db gives
 * the lowest rank's connection. */
#define ST_SET_DEVICE_STRIDE 1000
ST_API int st_reader_open_set(st_reader **out, st_reader **readers, const int *ranks, uint32_t n);
/* A set's readers (0 for a file's reader), and where a set's thread lives. */
ST_API uint32_t st_reader_n_parts(const st_reader *r);
ST_API st_reader *st_reader_part(const st_reader *r, uint32_t index);
ST_API int st_reader_thread_part(const st_reader *r, uint32_t thread, uint32_t *part, uint32_t *local_id);
/* The clock a set maps part `index` with (st_rank_clock_map): the rank's
 * meta measurements (st_reader_rank_clock) until st_reader_set_part_clock
 * replaces them. ST_OK, or ST_EINVAL for a file's reader or an index past
 * the parts. */
ST_API int st_reader_part_clock(const st_reader *r, uint32_t index, st_rank_clock *out);
/* Replaces the clock of part `index` (an offline alignment: analyze's
 * --align), and, for part 0, maps the set's step marks again with it.
 * Refused (ST_ECORRUPT, the reader's message, the part's clock unchanged)
 * as at open: a close reading before the open one on rank 0's clock, or a
 * step mark of part 0 that no longer maps in order within 0..INT64_MAX. */
ST_API int st_reader_set_part_clock(st_reader *r, uint32_t index, const st_rank_clock *c);

/* Limits a reader holds a trace to (docs/trace-format.md), so that what
 * analyze prints stays bounded: names (threads, stages, counters, meta keys)
 * of at most ST_NAME_MAX bytes and meta values of at most ST_META_VALUE_MAX,
 * else the open fails; kernel names (gpu_strings) longer than
 * ST_GPU_NAME_MAX bytes are cut there, ending in "...". */
#define ST_META_VALUE_MAX 65536
#define ST_GPU_NAME_MAX 4096

/* Opens a trace read-only and validates it before anything is read: each
 * table the plain table of the format (not a view, no generated column),
 * every value of the small tables and every chunk row's columns of the type
 * the format says, keys unique, chunks of known threads. path must be a
 * regular file (a FIFO or device is refused, never opened).
 * Returns ST_OK or a negative code; st_last_error() says what is wrong
 * ("not a stagetrace trace", "schema version 7 is newer than ...", ...). */
ST_API int st_reader_open(st_reader **out, const char *path);
/* Reads a trace through a connection the caller owns (virtual tables). */
ST_API int st_reader_open_db(st_reader **out, sqlite3 *db);
ST_API void st_reader_close(st_reader *r);

ST_API sqlite3 *st_reader_db(const st_reader *r);
ST_API const char *st_reader_meta(const st_reader *r, const char *key); /* NULL if absent */
ST_API void st_reader_rank_clock(const st_reader *r, st_rank_clock *out);

ST_API uint32_t st_reader_n_threads(const st_reader *r);
ST_API const st_thread_info *st_reader_thread(const st_reader *r, uint32_t index);
ST_API const st_thread_info *st_reader_thread_by_id(const st_reader *r, uint32_t id);
ST_API uint32_t st_reader_n_stages(const st_reader *r); /* ids are 0..n-1 */
ST_API const st_stage_info *st_reader_stage(const st_reader *r, uint32_t id);
/* The stages' colours as the tracer gave their NVTX ranges, so that a tool
 * drawing a trace shows each stage as Nsight Systems does: rgb[id] =
 * 0xRRGGBB for the stage ids 0..min(n, st_reader_n_stages(r)) - 1, and
 * returns how many it wrote (0 for a NULL r or rgb). The i-th stage of a
 * kind, in id order, takes the kind's i-th colour, cyclically: 16 strong
 * colours for work, 4 light tints of one family for each waiting kind
 * (wait_input blues, wait_output oranges, sync purples, comm greens, copy
 * reds); a kind the header does not know is coloured as work. */
ST_API uint32_t st_reader_stage_colours(const st_reader *r, uint32_t *rgb, uint32_t n);
ST_API uint32_t st_reader_n_counters(const st_reader *r);
ST_API const st_counter_info *st_reader_counter(const st_reader *r, uint32_t id);
ST_API uint32_t st_reader_n_steps(const st_reader *r); /* sorted by step */
ST_API const st_step_info *st_reader_step(const st_reader *r, uint32_t index);

/* What the chunk tables' headers say, in one pass over them: the earliest
 * t0_ns and latest t1_ns of the range chunks and the sum of their n_ranges
 * (rows with t0_ns > t1_ns or a negative count left out: headers are only
 * hints), the sum of the counter chunks' n_samples. The same pass checks
 * the type of every column of every chunk row (otherwise checked as each
 * chunk is read), so that a caller that reads no chunk still refuses a
 * mistyped one, with the message a read of it would give. */
typedef struct st_chunk_totals {
    int has_ranges;
    int64_t first_ns, last_ns;
    double n_ranges, n_samples;
} st_chunk_totals;
ST_API int st_reader_chunk_totals(st_reader *r, st_chunk_totals *out);

/* Per thread or device, from the chunk tables (reader_iter.c and
 * reader_gpu.c; the analyzer reads no chunk table itself). *out is malloc'd (NULL when empty), by key.
 * range_chunks_per_thread: (thread, chunk rows), a hint only: a query that
 * fails ends the list early. gpu_records_per_device: (device, the sum of
 * n_records, negative counts as 0), every device including the API calls'
 * (device < 0); an unreadable table or a sum past int64 is an error
 * ("trace table 'gpu_chunks' cannot be read: ..."), *out then holding the
 * rows before it. */
typedef struct st_chunk_count {
    int64_t key, n;
} st_chunk_count;
ST_API int st_reader_range_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n);
ST_API int st_reader_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n);
/* The devices (>= 0, integer, at most INT32_MAX) that hold GPU chunks,
 * ascending; *out malloc'd, NULL when none. */
ST_API int st_reader_gpu_devices(st_reader *r, int32_t **out, uint32_t *n);
/* The headers of the GPU chunks of `device` (device < 0: the API calls')
 * overlapping [t0_ns, t1_ns] (t1_ns >= t0 and t0_ns < t1): the sum of their
 * n_records, the earliest t0_ns and the latest t1_ns; has 0 when there are
 * none or the sum cannot be had. Hints, for slicing a read. */
typedef struct st_gpu_headers {
    int has;
    int64_t n_records, t0_ns, t1_ns;
} st_gpu_headers;
ST_API int st_reader_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out);
/* The same over the chunks of every device st_reader_gpu_devices lists
 * (device >= 0, integer, at most INT32_MAX; the API calls' left out), at any
 * time: the span of the GPU records as the headers give it, no chunk
 * decoded (n_records: the sum, past INT64_MAX capped there); has 0 when
 * there are none (or no gpu_chunks table). A hint too: a
 * corrupt header may say otherwise than its records. */
ST_API int st_reader_gpu_span(st_reader *r, st_gpu_headers *out);

/* Ranges: each completed range once, in the order they ended (per thread;
 * threads one after another by id). thread < 0: all threads. Only ranges
 * overlapping [t0_ns, t1_ns) are returned (t0 = INT64_MIN, t1 = INT64_MAX
 * for all). */
typedef struct st_range {
    uint32_t thread, stage, depth;
    int64_t start_ns, dur_ns;
} st_range;

typedef struct st_range_iter st_range_iter;
ST_API int st_range_iter_open(st_range_iter **out, st_reader *r, int64_t thread,
                       int64_t t0_ns, int64_t t1_ns);
/* 1, 0 = done, <0 error. The iterator decodes ranges a batch at a time;
 * st_range_iter_next is inline and hands them out one by one (its first
 * member is this head), calling st_range_iter_fill for the next batch. */
struct st_range_iter_head {
    const st_range *next, *end;
};
ST_API int st_range_iter_fill(st_range_iter *it, st_range *out);
static inline int st_range_iter_next(st_range_iter *it, st_range *out)
{
    struct st_range_iter_head *h = (struct st_range_iter_head *)(void *)it;
    if (__builtin_expect(h->next != h->end, 1)) {
        *out = *h->next++;
        return 1;
    }
    return st_range_iter_fill(it, out);
}
ST_API void st_range_iter_close(st_range_iter *it);

/* The ranges that never ended on a thread (id): those still open after its
 * last event, outermost first, as its last chunk leaves them. Fills stack
 * (room for ST_MAX_DEPTH) and returns how many, 0 for none (or no chunk),
 * or a negative code (a corrupt chunk). */
ST_API int st_reader_unended(st_reader *r, uint32_t thread, st_open_range *stack);
/* Raw begin/end events of one thread, in recorded order. */
typedef struct st_event_iter st_event_iter;
ST_API int st_event_iter_open(st_event_iter **out, st_reader *r, uint32_t thread);
ST_API int st_event_iter_next(st_event_iter *it, st_event *out); /* 1, 0, <0 */
ST_API void st_event_iter_close(st_event_iter *it);

/* Counter samples, per thread in time order, threads by id. */
typedef struct st_sample_iter st_sample_iter;
typedef struct st_sample_row {
    uint32_t thread, counter;
    int64_t ts_ns;
    double value;
} st_sample_row;
ST_API int st_sample_iter_open(st_sample_iter **out, st_reader *r, int64_t thread,
                        int64_t t0_ns, int64_t t1_ns);
ST_API int st_sample_iter_next(st_sample_iter *it, st_sample_row *out);
ST_API void st_sample_iter_close(st_sample_iter *it);

/* GPU activity (kernels, copies, memsets, synchronizations), from the
 * optional gpu_chunks table: per device, per stream, in stored order (within
 * a stream, by start). API records (device -1) are not returned: they give
 * each record its launching thread (os_tid joined to threads), the start of
 * the launching call, and the stage: the innermost range of that thread
 * open at that start. device < 0: all devices. Only records overlapping
 * [t0_ns, t1_ns) are returned. A trace without gpu_chunks has none. */
typedef struct st_gpu_row {
    int32_t device;
    uint32_t stream;
    st_gpu_rec rec;
    const char *name;       /* kernel name; NULL for others (valid until close) */
    int64_t thread;         /* launching thread id, -1 unknown */
    int64_t stage;          /* stage open on it at launch, -1 none */
    int64_t launch_ns;      /* start of the launching API call; INT64_MIN unknown */
    int64_t launch_os_tid;  /* the OS thread of that call (API rows: their own); 0 unknown */
    const char *launch_thread; /* that thread's name from gpu_threads (the threads the trace did not
                                  register: /proc's comm when CUPTI first saw it); NULL unknown
                                  (valid until the iterator is closed) */
} st_gpu_row;
ST_API int st_reader_has_gpu(st_reader *r); /* 1: gpu_chunks holds rows; 0; <0 error */
typedef struct st_gpu_iter st_gpu_iter;
/* GPU records (API calls left out) overlapping [t0_ns, t1_ns), one device
 * (or every device, device < 0) after another, each stream's in stored order.
 * A record's launching thread, stage and launch_ns come from the API call
 * with its correlation id, looked up among the calls that start from
 * ST_GPU_LAUNCH_LOOKBACK_NS before t0_ns to t1_ns (a record launched earlier
 * than that has thread -1). */
#define ST_GPU_LAUNCH_LOOKBACK_NS (2LL * 1000 * 1000 * 1000)
ST_API int st_gpu_iter_open(st_gpu_iter **out, st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns);
/* The CUDA API calls instead (stream 0: runtime, 1: driver; name: the
 * function, NULL in traces that did not store it; rec.copy_kind: CUPTI's
 * cbid), each with its thread and the stage open at its start (launch_ns). */
ST_API int st_gpu_api_iter_open(st_gpu_iter **out, st_reader *r, int64_t t0_ns, int64_t t1_ns);
ST_API int st_gpu_iter_next(st_gpu_iter *it, st_gpu_row *out); /* 1, 0 = done, <0 error */
ST_API void st_gpu_iter_close(st_gpu_iter *it);
/* The innermost stage open on thread (id) at ts, -1 none or unknown thread;
 * the same lookup the iterator uses for launches. <-1: error. */
ST_API int64_t st_gpu_iter_stage_at(st_gpu_iter *it, int64_t thread, int64_t ts_ns);
ST_API const char *st_gpu_kind_name(uint32_t kind);   /* "kernel", "memcpy", ... */
ST_API const char *st_gpu_copy_name(uint32_t copy);   /* "HtoD", ... */
ST_API const char *st_gpu_mem_name(uint32_t mem);     /* "pageable", "pinned", ... */
/* 1 for a record of work the device does on its stream (ST_GPU_KERNEL,
 * ST_GPU_MEMCPY, ST_GPU_MEMSET); 0 for the host's side of the activity
 * (ST_GPU_SYNC, a host thread waiting; ST_GPU_API, a runtime or driver
 * call) and for a kind this reader does not know. What GPU busy time and
 * idle gaps are made of. */
ST_API int st_gpu_kind_is_device_work(uint32_t kind);

/* Flows (st_flow_out / st_flow_in), from the optional flow_chunks table:
 * per thread in recorded (time) order, threads by id. thread < 0: all
 * threads. Only records with t0_ns <= ts_ns < t1_ns are returned. A trace
 * without flow_chunks has none. */
enum st_flow_dir { ST_FLOW_OUT = 0, ST_FLOW_IN = 1 };
typedef struct st_flow_row {
    uint32_t thread;
    uint32_t dir;        /* ST_FLOW_OUT or ST_FLOW_IN */
    int64_t ts_ns;
    uint64_t id;         /* the program's item id */
} st_flow_row;
typedef struct st_flow_iter st_flow_iter;
ST_API int st_reader_has_flows(st_reader *r); /* 1: flow_chunks holds rows; 0; <0 error */
ST_API int st_flow_iter_open(st_flow_iter **out, st_reader *r, int64_t thread, int64_t t0_ns, int64_t t1_ns);
ST_API int st_flow_iter_next(st_flow_iter *it, st_flow_row *out); /* 1, 0 = done, <0 error */
ST_API void st_flow_iter_close(st_flow_iter *it);
/* A rank set's flows are every rank's, threads as the set numbers them,
 * times mapped onto rank 0's clock. How far an in on thread_b may map before
 * an out on thread_a and still be the same handoff: 0 in a file or when both
 * threads are on one rank; otherwise the sum of the two ranks' clock
 * uncertainties (st_rank_clock_uncertainty). */
ST_API int64_t st_reader_flow_slack(const st_reader *r, uint32_t thread_a, uint32_t thread_b);

/* CPU capture (docs/trace-format.md, "CPU capture"; st_options.cpu,
 * trainer --trace-cpu), from the optional cpu_* tables, checked (shape,
 * every row of cpu_threads, cpu_maps and cpu_symbols, the ids of the chunk
 * and stack tables) the first time one of these functions reads them;
 * a chunk's and a stack's data as each is read. */
/* One context switch of a thread: a PERF_RECORD_SWITCH as the capture
 * reads it, or a switch row of st_cpu_iter (ST_CPU_ROW_IN / _OUT_*). */
typedef struct st_cpu_switch {
    int64_t t_ns;       /* CLOCK_MONOTONIC */
    uint8_t out;        /* 1: switched out, 0: switched in */
    uint8_t preempted;  /* out only: still runnable (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) */
} st_cpu_switch;

/* ---- CPU time of ranges (cpu_account.c) ----------------------------------
 * A thread's off-CPU intervals from its switch records (in time order):
 * each switch-out opens an interval (preempted when its flag says so,
 * blocked otherwise) that the next switch-in closes. An interval still open
 * after the last record ends at now_ns. A switch-in before any switch-out
 * means the thread was off the CPU when the capture began: that interval
 * starts at start_ns (the time the event was opened; INT64_MIN: since
 * always) and counts as blocked, the kernel having said nothing of why. A
 * second switch-out with no switch-in between (a lost record) keeps the
 * first; a second switch-in is ignored. out receives at most n + 1
 * intervals, disjoint and in time order; returns their number. */
typedef struct st_cpu_off {
    int64_t t0_ns, t1_ns;
    int preempted;
} st_cpu_off;
ST_API size_t st_cpu_off_intervals(const st_cpu_switch *sw, size_t n, int64_t start_ns,
                            int64_t now_ns, st_cpu_off *out);

/* For each range [t0, t1) (any order, nested or overlapping): its overlap
 * with the preempted and with the blocked intervals, and on = duration -
 * both, so that on + preempted + blocked = t1 - t0 exactly. Time outside
 * every interval is on-CPU, including time past now_ns: callers end an
 * unended range at now_ns. A range with t1 <= t0 gets zeros. */
typedef struct st_cpu_range {
    int64_t t0_ns, t1_ns;
} st_cpu_range;
typedef struct st_cpu_share {
    int64_t on_ns, preempted_ns, blocked_ns;
} st_cpu_share;
ST_API void st_cpu_account(const st_cpu_off *off, size_t n_off, const st_cpu_range *r, size_t n_r,
                    st_cpu_share *out);

ST_API int st_reader_has_cpu(st_reader *r); /* 1: the trace has the CPU tables; 0 none; <0 error */

/* A thread's cpu_threads row: status "perf" (its event opened), "refused",
 * "unsupported", "nomem" or "error"; start_ns (mapped onto rank 0's clock
 * in a rank set) when its records start; cpu_ns its CPU time as the event
 * counted it; every sample stands for period_ns of CPU time. */
typedef struct st_cpu_thread_info {
    uint32_t thread;
    int64_t os_tid;
    const char *status, *reason; /* valid until st_reader_close */
    int64_t period_ns, ring_bytes, refused_bytes, start_ns, cpu_ns, switches, samples, lost;
} st_cpu_thread_info;
/* 1: found; 0: the thread has no row (or the trace no CPU tables); <0 error. */
ST_API int st_reader_cpu_thread(st_reader *r, uint32_t thread, st_cpu_thread_info *out);

/* One thread's CPU records in time order, those with t0_ns <= ts_ns < t1_ns:
 * switches in and out (blocked: it gave up the CPU; preempted: the kernel
 * took it while it could run), samples and lost-record counts. A sample's
 * stage is the innermost range open on the thread at ts_ns ([start, end)),
 * as the writer stored it, or, where the writer stored "unknown" (a sample
 * it could not place), looked up by the reader in the thread's ranges
 * (stage_from_ranges 1). Stack ids: a file's are its cpu_stacks ids; a rank
 * set's are part << 32 | the rank's id (part: the rank's index in the set,
 * st_reader_thread_part), unique across the set; times are mapped onto rank
 * 0's clock as ranges are. */
enum st_cpu_row_kind {
    ST_CPU_ROW_IN = 0,
    ST_CPU_ROW_OUT_BLOCKED = 1,
    ST_CPU_ROW_OUT_PREEMPTED = 2,
    ST_CPU_ROW_SAMPLE = 3,
    ST_CPU_ROW_LOST = 5,
    /* A Python-frame sample (st_cpu_sample_add: the interpreter's own
     * sampler read the thread's frames): stack, stage and stage_from_ranges
     * as a sample's, its frames named "py::QUALNAME:FILE"; it stands for
     * an interval of wall time (meta python_frames_hz), not of CPU time,
     * so it is never summed with ST_CPU_ROW_SAMPLE rows. */
    ST_CPU_ROW_PY_SAMPLE = 10,
};
/* What took a sample (st_cpu_row.source): the thread's perf event, the
 * signal sampler (cpu_threads.status 'timer', or a sample with the GIL
 * state), or the interpreter (ST_CPU_ROW_PY_SAMPLE). */
enum st_cpu_source {
    ST_CPU_SOURCE_PERF = 0,
    ST_CPU_SOURCE_TIMER = 1,
    ST_CPU_SOURCE_PYTHON_FRAMES = 2,
};
typedef struct st_cpu_row {
    uint32_t kind;   /* st_cpu_row_kind */
    uint32_t thread;
    int64_t ts_ns;
    uint64_t stack;  /* a sample's stack id (st_reader_cpu_stack); a blocked
                        switch-out's wait stack when wait_stack is 1 */
    int32_t stage;   /* a sample's stage, -1 when no range was open */
    uint32_t stage_from_ranges; /* 1: resolved by the reader (the writer stored "unknown") */
    uint64_t n_lost; /* ST_CPU_ROW_LOST: the records the kernel lost there */
    int32_t gil;     /* a sample's GIL state: 1 the thread held the GIL, 0 it
                        did not, -1 unknown (no GIL probe, or the probe did
                        not know); -1 for the other kinds */
    uint32_t wait_stack; /* ST_CPU_ROW_OUT_BLOCKED: 1 when stack is the
                            stack the thread blocked in (meta
                            cpu_block_reasons 'proc+stacks' or 'proc+sched'), else 0 */
    int32_t state;       /* ST_CPU_ROW_OUT_BLOCKED from the sched_switch
                            tracepoint ('proc+sched'): the task state the
                            thread blocked in, the kernel's letter ('S'
                            interruptible sleep, 'D' uninterruptible, ...);
                            0 otherwise */
    uint32_t kernel_frames; /* with state: the stack's first kernel_frames
                               frames are the kernel's (the user ones follow) */
    uint32_t source;        /* ST_CPU_ROW_SAMPLE and _PY_SAMPLE: st_cpu_source; 0 otherwise */
} st_cpu_row;
typedef struct st_cpu_iter st_cpu_iter;
ST_API int st_cpu_iter_open(st_cpu_iter **out, st_reader *r, uint32_t thread, int64_t t0_ns, int64_t t1_ns);
ST_API int st_cpu_iter_next(st_cpu_iter *it, st_cpu_row *out); /* 1, 0 = done, <0 error */
ST_API void st_cpu_iter_close(st_cpu_iter *it);

/* A stack's frames, innermost first (the sampled ip, then return
 * addresses); *frames is the reader's, valid until st_reader_close.
 * ST_EINVAL for an id the trace does not have. */
ST_API int st_reader_cpu_stack(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n);

/* What a frame address of a stack is (cpu_symbols and cpu_maps, as the
 * recording process resolved them): name "" and sym_offset 0 when no symbol
 * holds it; map -1, path and build_id "" when no mapping does. Strings are
 * the reader's, valid until st_reader_close. The stack id says whose
 * process (a rank set's ranks each have theirs). 1: the address has a
 * cpu_symbols row; 0: it has none (the mapping is still looked up); <0 error. */
typedef struct st_cpu_frame {
    const char *name;
    uint64_t sym_offset;
    int64_t map;
    const char *path, *build_id;
    uint64_t file_offset;
} st_cpu_frame;
ST_API int st_reader_cpu_frame_name(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out);

/* The source line of a frame address and the functions inlined there
 * (cpu_lines, docs/trace-format.md, as the recording process found them
 * with libdw): *n rows, innermost first (depth 0: the function whose code
 * holds the address, with the address's file and line; each next one the
 * function that inlined the one before, with the line of that call; the
 * last the out-of-line function). file "" and line 0 when unknown;
 * strings and rows the reader's, valid until st_reader_close. 1: the
 * address has rows; 0: none (or the trace has no cpu_lines table, as
 * traces recorded before it, or meta cpu_lines none); <0 error. The table
 * is checked when first read: a row mistyped, a (addr, depth) twice or a
 * gap in an address's depths is ST_ECORRUPT. */
typedef struct st_cpu_line {
    const char *function, *file;
    int64_t line, col;
} st_cpu_line;
ST_API int st_reader_cpu_frame_lines(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines,
                                     uint32_t *n);

/* A cpu_maps row: the mapping map (st_cpu_frame.map) of the process the
 * stack id names, its addresses [start, end), its offset in its file, path
 * and build_id (strings the reader's, valid until st_reader_close), for
 * exports that carry the mappings (pprof). 1: found; 0: no such map (or no
 * CPU tables); <0 error. */
typedef struct st_cpu_map {
    int64_t id;
    uint64_t start, end, file_offset;
    const char *path, *build_id;
} st_cpu_map;
ST_API int st_reader_cpu_map(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out);
/* Why a thread was blocked: its cpu_blocks rows (docs/trace-format.md), the
 * blocks the writer examined, with t0_ns <= t_ns < t1_ns, in t_ns order
 * (then id). t_ns is the block's blocked switch-out (the ST_CPU_ROW_OUT_BLOCKED
 * row of that time); seen_ns when /proc was read. A trace without the table
 * (the five other CPU tables only) has no rows. Each row is checked as it is
 * read (types; 0 <= t_ns <= seen_ns; syscall >= -1; names of at most
 * ST_NAME_MAX bytes), every row's thread at the first open: a fault is
 * ST_ECORRUPT with one line naming the table. A rank set's: the thread's
 * rank's rows, the times mapped onto rank 0's clock. Strings are valid
 * until the next call on the iterator. */
typedef struct st_cpu_block_row {
    uint32_t thread;
    int64_t t_ns, seen_ns;
    int64_t syscall;           /* this architecture's number; -1 outside a system call */
    const char *name, *wchan;  /* "futex", "read", ...; "" when none */
    int64_t arg0, arg1;
} st_cpu_block_row;
typedef struct st_cpu_block_iter st_cpu_block_iter;
ST_API int st_cpu_block_iter_open(st_cpu_block_iter **out, st_reader *r, uint32_t thread, int64_t t0_ns,
                                  int64_t t1_ns);
ST_API int st_cpu_block_iter_next(st_cpu_block_iter *it, st_cpu_block_row *out); /* 1, 0 = done, <0 error */
ST_API void st_cpu_block_iter_close(st_cpu_block_iter *it);

/* Every thread's CPU use per window: the cpu_windows rows (the process's
 * threads, registered or not, from /proc schedstat), in window order, then
 * os_tid. thread: the reader's thread id of a registered thread, -1 for
 * one the program did not register. Each row is checked as it is read
 * (types; window >= 0, step >= -1, 0 <= t0_ns <= t1_ns, os_tid > 0,
 * oncpu_ns, runq_ns, slices >= 0, a thread -1 or known, a name of at most
 * ST_NAME_MAX bytes): a fault is ST_ECORRUPT naming the table. A trace
 * without the table has no rows. A rank set's: rank by rank (ascending),
 * part its index in the set and rank its rank, times on rank 0's clock,
 * threads the set's; a file's: part 0, rank -1. name is valid until the
 * next call. */
typedef struct st_cpu_window_row {
    int64_t window, step, t0_ns, t1_ns, os_tid;
    int64_t thread;
    const char *name; /* the thread's comm */
    int64_t oncpu_ns, runq_ns, slices;
    uint32_t part;
    int rank;
} st_cpu_window_row;
typedef struct st_cpu_window_iter st_cpu_window_iter;
ST_API int st_cpu_window_iter_open(st_cpu_window_iter **out, st_reader *r);
ST_API int st_cpu_window_iter_next(st_cpu_window_iter *it, st_cpu_window_row *out); /* 1, 0 = done, <0 error */
ST_API void st_cpu_window_iter_close(st_cpu_window_iter *it);

/* Where the row an iterator's last next() returned is stored: the id of its
 * chunk row (range_chunks.id, counter_chunks.id, gpu_chunks.id) and its
 * index among the chunk's items (a range: the index of its end event among
 * the chunk's events; a sample, a GPU record: its index in the chunk). Both
 * are fixed by the file, whatever window or thread the iterator was opened
 * with: the SQL tables number their rows from them (vtab.c). */
ST_API void st_range_iter_pos(const st_range_iter *it, int64_t *chunk_id, uint32_t *index);
ST_API void st_sample_iter_pos(const st_sample_iter *it, int64_t *chunk_id, uint32_t *index);
ST_API void st_gpu_iter_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index);
ST_API void st_flow_iter_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index);
ST_API void st_cpu_iter_pos(const st_cpu_iter *it, int64_t *chunk_id, uint32_t *index); /* cpu_chunks.id; index among its records */

/* Recomputes the interval windows of every_steps steps from the stored
 * events and step marks, through the same aggregator as the online path. */
ST_API int st_reader_windows(st_reader *r, uint32_t every_steps, st_window_fn cb, void *arg);

ST_API int st_sql_register(sqlite3 *db); /* vtab.c: tables ranges, counters, gpu, flows; views ranges_v, counters_v, gpu_v */

#if defined(ST__READER_POP_API)
#undef ST__READER_POP_API
#pragma pop_macro("ST_API")
#endif

#ifdef __cplusplus
}
#endif
#endif
