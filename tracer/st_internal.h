/* st_internal.h: what the recording side of libstagetrace shares between
 * its files (the clock, the per-thread state, the trace object; the ring is
 * in ring.h). Not
 * installed; programs use stagetrace.h only. */
#ifndef ST_INTERNAL_H
#define ST_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "encoding.h"
#include "ring.h"
#include "stagetrace.h"
#include "st_clock.h"
#include "st_intervals.h"
#include "st_testing.h"

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

/* ---- clock: st_clock.h; test knobs: st_testing.h ---- */
/* ST_TEST_CLOCK_SHIFT_NS (ranks.c): the shift for this rank, 0 when unset;
 * ST_EINVAL when malformed. st_clock_set_shift (clock.c) applies it to
 * every conversion to trace nanoseconds. */
int st_clock_shift_from_env(int rank, int64_t *shift_ns);

/* ---- errors (error.c) ---- */
int st_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Passes one message to the trace's options.log (nothing when it is NULL),
 * under t->log_lock. level: ST_LOG_*. */
void st_log(st_trace *t, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- NVTX (nvtx.c); all no-ops without NVTX headers ---- */
void st_nvtx_init(const char *domain_name);
void st_nvtx_stage(uint32_t stage, const char *name, st_kind kind);
void st_nvtx_thread(const char *name);
void st_nvtx_shutdown(void);
extern int st_nvtx_on;
/* registered: stage < st_stage_limit, read by the caller (record.c), so
 * that NVTX needs none of the recording side's state. */
void st_nvtx_push(uint32_t stage, int registered);
void st_nvtx_pop(void);
void st_nvtx_step(uint64_t step, uint64_t tokens); /* after the step's records are written */

/* ---- the trace ---- */
typedef struct st_thread_state st_thread_state; /* writer-side, writer.c */

typedef struct st_stage_def {
    char *name;
    st_kind kind;
} st_stage_def;

typedef struct st_counter_def {
    char *name, *unit;
} st_counter_def;

typedef struct st_thread_def {
    char *name, *role;
    int device, rank;
    int64_t os_tid;
    st_ring *ring;
    /* opt.cpu: the thread's perf event, opened at registration (st_cpu.h),
     * handed to the writer with the thread (st_cpurec.h). */
    struct st_cpu_thread *cpu;
    int cpu_status;
    int64_t cpu_start_ns;
} st_thread_def;

struct st_trace {
    st_options opt;
    uint32_t writer_delay_us;       /* st__test_set_writer_delay at st_open */
    int checkpoint_on_writer;       /* st__test_set_checkpoint_on_writer at st_open */
    char *path;
    char *program;
    sqlite3 *db;
    pthread_mutex_t lock;           /* registration */
    pthread_mutex_t log_lock;       /* one options.log call at a time */
    pthread_cond_t flushed;
    pthread_t writer;
    int writer_started;

    st_stage_def stages[ST_MAX_STAGES];
    _Atomic uint32_t n_stages;
    st_counter_def counters[ST_MAX_COUNTERS];
    _Atomic uint32_t n_counters;
    st_thread_def threads[ST_MAX_THREADS];
    _Atomic uint32_t n_threads;
    uint32_t stages_written, counters_written, threads_written; /* writer */

    int wake_pipe[2];               /* any thread -> writer */
    int sig_req_pipe[2];            /* signal handler -> writer */
    int sig_resp_pipe[2];           /* writer -> signal handler */
    _Atomic int stop;
    uint64_t flush_requested, flush_done; /* under lock */
    _Atomic int interrupted;
    uint64_t dropped_written;       /* writer: meta dropped_events as last written */
    uint64_t retired_dropped;       /* under lock: drops of the rings already freed */
    int writer_error;               /* first SQLite error, reported at close */
    _Atomic int commit_failed;      /* the last commit could not be written (kept, retried) */
    char writer_msg[512];
    int lock_fd;                    /* the trace file, flock'ed until close; -1 none */

    st_agg *agg;
    st_thread_state *tstate[ST_MAX_THREADS];
    void *wpriv;                    /* writer.c private state */

    /* GPU activity: gpu.c (CUPTI's threads) submits, the writer stores. */
    char run_id[72];                /* st_options.run_id, or "" */
    st_clock_sync clock_sync[2];    /* under lock: st_clock_sync_record's */
    int clock_sync_state[2];        /* under lock: 0 none, 1 to write, 2 written */
    st_clock_map clock_map[2];      /* under lock: st_clock_map_record's */
    int clock_map_state[2];         /* under lock: 0 none, 1 to write, 2 written */
    struct st_meta_item *meta_items; /* under lock: st_meta_set's (meta.c) */
    size_t n_meta_items;
    pthread_mutex_t gpu_lock;
    struct st_gpu_item *gpu_items;  /* under gpu_lock */
    size_t gpu_items_len, gpu_items_cap;
    struct st_gpu_string *gpu_strings;
    size_t gpu_strings_len, gpu_strings_cap;
    _Atomic long long gpu_dropped;  /* CUPTI's dropped records; -1: GPU tracing off */
    void (*gpu_stop)(st_trace *t);  /* set by st_gpu_start; st_close calls it first */
    char gpu_records[160];          /* under gpu_lock: meta gpu_records to write, "" none */
    int64_t gpu_paused_since;       /* under gpu_lock: st_gpu_pause's time, 0 when not paused */
    struct st_gpu_pause_span *gpu_pauses; /* under gpu_lock: ended pauses the writer has not stored */
    size_t gpu_pauses_len, gpu_pauses_cap;
    int gpu_records_written;        /* writer: meta gpu_records stored */
    uint32_t gpu_every_steps;       /* under gpu_lock: the step sampler's N (meta gpu_every_steps when > 1) */
    /* set by st_gpu_start with every_steps > 1: the writer calls it with each
     * step mark it stores, and it turns recording on or off */
    void (*_Atomic gpu_on_step)(st_trace *t, uint64_t step);
    void *gpu_priv;
};

#include "st_gpu_records.h"

/* ---- GPU activity (docs/trace-format.md, gpu_chunks) ----
 * The collector (gpu.c) parses CUPTI's buffers on CUPTI's thread and hands
 * the records over here; the writer encodes them into gpu_chunks rows per
 * device and stream at its next commit. device -1 holds the API records
 * that the reader joins to activity by correlation id. */
typedef struct st_gpu_item {
    int32_t device;
    uint32_t stream;
    st_gpu_rec rec;
} st_gpu_item;
typedef struct st_gpu_pause_span {
    int64_t t0_ns, t1_ns; /* gpu_pauses row: capture off from t0_ns to t1_ns */
} st_gpu_pause_span;
typedef struct st_gpu_string {
    uint32_t id;
    int64_t os_tid; /* > 0: a gpu_threads row (os_tid, value) instead of gpu_strings (id, value) */
    char *value;
} st_gpu_string;
int st_gpu_submit(st_trace *t, const st_gpu_item *items, size_t n); /* thread-safe */
int st_gpu_submit_string(st_trace *t, uint32_t id, const char *value); /* copied */
int st_gpu_submit_thread(st_trace *t, int64_t os_tid, const char *name); /* a gpu_threads row; copied */


/* Calls from unregistered threads (record.c): st_open passes the enabled
 * trace that reports them, st_close passes NULL before it stops the writer
 * (after which no report uses the trace). */
void st_unregistered_watch(st_trace *t);

/* meta.c: st_meta_set's pairs not yet written go into meta (the writer, at
 * each commit); st_meta_free at the trace's end. */
struct st_store;
void st_meta_store(st_trace *t, struct st_store *store);
void st_meta_free(st_trace *t);

int st_writer_start(st_trace *t);
void st_writer_stop(st_trace *t);   /* drains everything, final commit */
void st_wake_writer(st_trace *t);
/* record.c; set by trace.c. */
extern st_trace *st_active_trace;
/* Stage ids below this were registered (hot-path check, relaxed loads). */
extern _Atomic uint32_t st_stage_limit;

#endif
