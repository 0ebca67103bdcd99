/* stagetrace.h: the public interface of libstagetrace, the recording library.
 *
 * A program opens one trace per process (st_open), registers the stages it
 * will mark (st_stage_register) and each thread that marks them
 * (st_thread_register), then brackets work with st_begin/st_end or
 * ST_SCOPE. Each call appends a fixed-size binary record to the calling
 * thread's lock-free ring; a writer thread drains the rings into the SQLite
 * trace described in docs/trace-format.md and feeds the interval aggregator
 * that produces the "profile" lines. Every range is also emitted to NVTX.
 *
 * Rules:
 *  - A range ends on the thread that began it, and ranges nest (LIFO).
 *  - Stage, counter, thread and mark names are copied at registration,
 *    except st_mark's name, which must outlive the trace (pass a literal).
 *    A thread, role, stage, counter or unit name is at most ST_NAME_MAX
 *    bytes: a longer one is refused (ST_EINVAL).
 *  - st_begin, st_end, st_counter_set, st_mark, st_step, st_flow_out and
 *    st_flow_in are called only by registered threads. They take no lock,
 *    allocate nothing and make no system call. On any other thread they
 *    record nothing, and while an enabled trace is open the first call of
 *    such a thread (st_end excepted) is reported, once per thread and trace,
 *    as an ST_LOG_WARNING through options.log and in that thread's
 *    st_last_error() (st_end alone is not reported).
 *  - Registration functions, st_flush and st_close are thread-safe.
 *    st_signal_flush is async-signal-safe; nothing else is.
 *  - With profiling disabled (options.enabled = 0, no trace open) every
 *    hot-path call is inline: one thread-local load and one predictable
 *    branch, then (st_end excepted) one load of a global flag and a second
 *    predictable branch, no function call (GCC and Clang;
 *    other compilers, or -DST_NO_INLINE, call the exported functions, which
 *    do the same test). Compiled with -DST_DISABLE, the hot-path calls
 *    (st_begin, st_end, st_counter_set, st_mark, st_step, st_flow_out,
 *    st_flow_in) and ST_SCOPE, ST_SCOPE_AUTO compile to nothing and reference no library symbol; their
 *    arguments are still evaluated. Every other call (st_open,
 *    registration, st_close, ...) is an inline stub too (what each returns
 *    is listed at the stubs, near the end): a program compiled with
 *    -DST_DISABLE links with no stagetrace library.
 *  - Functions that can fail return ST_OK (0) or a negative ST_E* code;
 *    st_last_error() gives a one-line message for the calling thread.
 */
#ifndef STAGETRACE_H
#define STAGETRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ST_API marks what libstagetrace.so exports: the library is built with
 * -fvisibility=hidden, so everything else (the writer, the reader, the
 * interval aggregator, the store) stays inside it. A build may define
 * ST_API itself before including this header (the SQLite extension defines
 * it empty: it exports only its entry points). */
#if defined(ST_DISABLE)
/* Every function below becomes a static inline stub (defined at the end of
 * this header): a program compiled with -DST_DISABLE links with no
 * stagetrace library. */
#undef ST_API
#if defined(__GNUC__)
#define ST_API static inline __attribute__((unused))
#else
#define ST_API static inline
#endif
#elif !defined(ST_API)
#if defined(__GNUC__)
#define ST_API __attribute__((visibility("default")))
#else
#define ST_API
#endif
#endif

#define ST_VERSION_STRING "0.1.0"
#define ST_SCHEMA_VERSION 1

enum st_status {
    ST_OK = 0,
    ST_EINVAL = -1,   /* a bad argument or option */
    ST_EIO = -2,      /* the trace file cannot be created or written */
    ST_EEXIST = -3,   /* the trace file exists and overwrite was not asked */
    ST_ENOMEM = -4,
    ST_ESTATE = -5,   /* wrong call order: no open trace, already open, ... */
    ST_ELIMIT = -6,   /* too many stages, threads or counters */
    ST_ECORRUPT = -7, /* (reader) a chunk or table does not decode */
    ST_EVERSION = -8, /* (reader) unknown schema version */
    ST_EBUSY = -9,    /* the trace file is being written by another process */
    ST_ETIMEDOUT = -10, /* st_signal_flush: the writer did not answer in time */
};

/* Stage kinds: what the analyzer uses for bottleneck attribution. */
typedef enum st_kind {
    ST_WORK = 0,        /* the thread's own useful work */
    ST_WAIT_INPUT = 1,  /* blocked until an upstream stage delivers */
    ST_WAIT_OUTPUT = 2, /* blocked because a downstream queue is full */
    ST_SYNC = 3,        /* waiting for a device or stream */
    ST_COMM = 4,        /* collective communication */
    ST_COPY = 5,        /* host<->device transfer */
    ST_KIND_COUNT
} st_kind;

ST_API const char *st_kind_name(st_kind kind);    /* "work", "wait_input", ... */
ST_API int st_kind_parse(const char *name);       /* kind, or -1 */

typedef uint16_t st_stage;   /* id returned by st_stage_register */
typedef uint16_t st_counter; /* id returned by st_counter_register */

#define ST_MAX_STAGES 4096
#define ST_MAX_THREADS 1024
#define ST_MAX_COUNTERS 4096
/* Ranges open at once on one thread (depths 0..ST_MAX_DEPTH-1): a begin
 * deeper than that is dropped and counted, and so is its end. Readers and
 * the analyzer use the same limit (docs/trace-format.md). */
#define ST_MAX_DEPTH 256
/* Longest thread, role, stage, counter or unit name, in bytes (readers refuse longer ones). */
#define ST_NAME_MAX 256

/* ---- profile windows ----
 * With options.profile_interval = N > 0 and options.on_window set, the
 * writer thread calls on_window once per finished window, in order: a window
 * is the time between the marks of steps k*N and (k+1)*N (st_step). In it
 * each active thread's wall time is split exactly: every nanosecond goes to
 * the innermost open range's stage (self time), or to idle when no range is
 * open; a range crossing a window boundary is split at it, and is counted
 * (stage_count) in the window where it begins. Threads with no activity in a
 * window are left out of it. `analyze intervals` computes the same windows
 * from the trace with the same code: for the same trace it prints the same
 * lines as st_window_format.
 *
 * The window and everything it points to are valid only during the call.
 * The callback runs on the writer thread: it must not call st_flush or
 * st_close, and should return quickly (the writer waits for it). */
typedef struct st_window_thread {
    uint32_t thread;         /* thread id in the trace (st_thread_register's id) */
    const char *name;        /* thread name */
    const char *role;        /* thread role ("other" when none was given) */
    int64_t idle_ns;         /* time with no range open */
    int64_t *stage_ns;       /* [n_stages] self time per stage id */
    uint64_t *stage_count;   /* [n_stages] ranges begun in the window */
} st_window_thread;

typedef struct st_window {
    uint64_t index;          /* 0, 1, ...: window k spans steps kN+1..(k+1)N */
    uint64_t step_first;     /* first step in the window (kN+1) */
    uint64_t step_last;      /* last step ((k+1)N) */
    int64_t t0_ns, t1_ns;    /* boundaries (the step marks), trace clock */
    uint64_t tokens;         /* sum of the steps' tokens */
    uint32_t n_stages;       /* stage ids 0..n_stages-1 */
    const char *const *stage_names; /* [n_stages] */
    const uint8_t *stage_kinds;     /* [n_stages] st_kind values */
    uint32_t n_threads;      /* threads active in the window, by id */
    const st_window_thread *threads; /* [n_threads] */
    /* With the CPU capture (st_options.cpu) and the scheduler's schedstat:
     * each thread's on-CPU time in the window ([n_threads], as threads;
     * -1: unknown), read at the step mark that closes it (the trace's
     * cpu_windows rows of that step), and the time between that read and
     * the one before it, which the on-CPU share is of. NULL and 0 otherwise. */
    const int64_t *oncpu_ns;
    int64_t oncpu_span_ns;
} st_window;

typedef void (*st_window_fn)(const st_window *window, void *arg);

/* Formats a window as the "profile" lines that the trainer logs and
 * `analyze intervals` prints: one header line, one line per thread (stages
 * by self time, descending, idle last), then one line per role with more
 * than one thread; every line ends in '\n'. Writes at most size bytes,
 * always NUL-terminated when size > 0 (buf may be NULL when size is 0), and
 * returns the length that the whole text needs, like snprintf: the text was
 * cut when the result is >= size. Thread-safe. */
ST_API size_t st_window_format(const st_window *window, char *buf, size_t size);

/* ---- log messages ----
 * The library never writes to stderr (or anywhere) by itself. What it has
 * to say outside a call's status code and st_last_error() (the writer
 * thread's failures and recoveries, a misuse seen on the hot path) goes to
 * options.log when it is set, and nowhere when it is NULL (the default).
 * msg is one line without a trailing newline or a "stagetrace: " prefix,
 * valid during the call only. Calls are serialized (one at a time per
 * trace), on the writer thread or on the thread whose call caused the
 * message; the callback must not call stagetrace functions. */
enum st_log_level {
    ST_LOG_ERROR = 1,   /* data will not reach the trace as asked: a failed
                           final commit, records discarded */
    ST_LOG_WARNING = 2, /* degraded but nothing lost yet (commits failing,
                           records kept in memory), or a misuse (a call from
                           an unregistered thread) */
    ST_LOG_INFO = 3,    /* back to normal (written again after failures) */
};
typedef void (*st_log_fn)(int level, const char *msg, void *arg);

typedef struct st_options {
    const char *path;        /* trace file; required when enabled */
    int enabled;             /* 0: no trace, no NVTX; each hot-path call is
                                two predicted branches, no call */
    int overwrite;           /* replace an existing file at path */
    const char *program;     /* NVTX domain and meta "program"; default "stagetrace" */
    int argc;                /* stored in meta "argv" */
    char *const *argv;
    int rank, world_size;    /* default 0 and 1 */
    uint32_t ring_records;   /* per-thread ring capacity in 16-byte slots,
                                a power of two from 64 to 2^28; a range
                                takes 2 (begin, end), a counter sample,
                                mark, flow or step 2 (record, payload);
                                default 262144 (4 MiB; docs/tracer.md) */
    int block_when_full;     /* 1: a full ring waits for the writer instead
                                of counting a drop */
    uint32_t commit_ms;      /* writer commits this often: a killed process
                                loses about this much, more when the writer
                                waits for a core (docs/tracer.md);
                                default 250, range 1..60000 */
    uint32_t retry_mib;      /* memory the writer may use to keep records
                                whose commit failed (a full disk) for the
                                next commit; past it their chunks are
                                discarded and recorded as lost spans.
                                default 64, range 0..65536 */
    uint32_t profile_interval; /* steps per window; 0 = no windows */
    st_window_fn on_window;  /* called on the writer thread per finished window
                                (needs profile_interval > 0) */
    void *on_window_arg;
    int nvtx;                /* -1 default (on), 0 off, 1 on */
    int clock;               /* 0 auto (TSC when invariant), 1 CLOCK_MONOTONIC */
    st_log_fn log;           /* where messages go; NULL: nowhere (see above) */
    void *log_arg;
    /* Multi-process runs (docs/tracer.md, "Many processes"). With
     * world_size > 1 the trace goes to st_rank_path(path, rank, ...). */
    const char *run_id;      /* shared by every rank of one run: 1..64 bytes
                                of [A-Za-z0-9._-]; NULL: "<unix seconds>-<pid>" */
    int local_rank;          /* the process's rank on its host; default 0 */
    int device;              /* the process's GPU, or -1 (default) */
    /* CPU capture (docs/tracer.md, "CPU capture"): 0 off (default); 1 on:
     * st_thread_register opens a Linux perf event for the calling thread
     * (context switches, and CPU-clock samples with call stacks), which the
     * writer thread drains into the trace's cpu_* tables. Nothing is added
     * to a range's cost. Where the kernel refuses perf events (a seccomp
     * filter, perf_event_paranoid 3) the trace says why in meta cpu_mode
     * and cpu_reason, and everything else is recorded as usual. */
    int cpu;
    uint64_t cpu_period_ns;  /* sample period in ns of a thread's CPU time;
                                0: the default, 1/199 s; UINT64_MAX: switch
                                records only, no samples */
    /* GPU activity (st_gpu_start; docs/tracer.md, "GPU activity"): which
     * records CUPTI is asked for, a comma list read at st_gpu_start, such as
     * "kernel,memcpy,memset,runtime-launch" or "default,buffer_kb=32768".
     * NULL: the environment variable STAGETRACE_GPU_RECORDS, else the
     * default set. The set that ran is in meta gpu_records. */
    const char *gpu_records;
    /* DWARF unwinding of the CPU capture's samples (docs/cpu.md, "DWARF
     * unwinding"), for code built without frame pointers: 0 off (default);
     * else the bytes of each sampled thread's user stack that the kernel
     * copies with its registers into every sample, 8192..65536 (rounded
     * down to a multiple of 8, and to 65528, the kernel's limit), which the
     * writer thread unwinds with libdw's CFI. A sample keeps that stack
     * when it is longer than its frame-pointer chain. Only the perf
     * event's samples carry the copies, so with it the perf event samples
     * a thread even when a GIL probe is set (st_cpu_set_gil_probe), its
     * samples' GIL state unknown. Costs ring memory (16 samples' worth per
     * thread) and writer time per sample; a build without libdw records
     * why in meta cpu_unwind_reason and samples as with 0. Last in the
     * struct, so that the fields above keep their offsets. */
    uint32_t cpu_user_stack;
} st_options;

ST_API void st_options_init(st_options *opt);

/* The GIL probe of the CPU capture (docs/tracer.md, "CPU capture"): an
 * async-signal-safe function that says whether the calling thread holds
 * the interpreter's lock: 1 it does, 0 it does not, -1 unknown (the
 * Python extension registers one built on PyGILState_Check). With a probe
 * set, every thread registered afterwards is sampled by the signal sampler
 * (but with st_options.cpu_user_stack, whose stack copies only the perf
 * event's samples carry), which calls the probe on the sampled thread
 * inside its signal handler and stores the answer with each sample; where
 * perf events work the thread's perf event still records its context
 * switches (meta cpu_sampler 'timer', cpu_mode 'perf'). Set it before
 * st_thread_register (threads registered before keep their sampler); NULL
 * removes it (those threads' samples then say "unknown"). Any thread, any
 * time. */
#define ST_HAVE_GIL_PROBE 1
ST_API void st_cpu_set_gil_probe(int (*probe)(void));

typedef struct st_trace st_trace;

/* Samples of a thread's stack that an interpreter takes itself (docs/cpu.md,
 * "Python frames"): the Python package's sampler thread reads every other
 * thread's frames (sys._current_frames) where CPython's perf trampoline
 * cannot put them in the kernel's stacks (Python before 3.12, a libpython
 * without frame pointers), and hands each stack here. The writer gives
 * each sample the innermost stage open on that thread at ts_ns, as it does
 * the kernel's samples, and stores it in the thread's cpu_chunks as a
 * Python-frames sample (kinds 10 and 11 of docs/trace-format.md's CPU
 * chunk), its frames as addresses that cpu_symbols names
 * "py::QUALNAME:FILE" (their sym_offset the line), apart from the kernel's
 * samples: a reader gives them with source ST_CPU_SOURCE_PYTHON_FRAMES.
 *
 * frames: innermost first; qualname not NULL (at most 512 bytes are kept
 * of it and of file), file NULL for "", line 0 when unknown (lines above
 * 2^20 - 1 are kept as 0). os_tid: the Linux thread id of a thread
 * registered with the trace (st_thread_register). ts_ns: the sample's time
 * on the trace clock (st_now_ns), not before the thread's registration nor
 * after the call; with flags ST_CPU_SAMPLE_NOW it is ignored and the
 * sample is stamped with st_now_ns() as the call enters.
 *
 * Thread-safe, any thread (registered or not), between st_open and st_close;
 * no allocation past a bounded queue (ST_CPU_SAMPLE_QUEUE_MAX samples or
 * 4 MiB waiting for the writer, which drains it about every millisecond).
 * Returns ST_OK (queued), 1 when the queue was full (the sample is counted
 * in meta python_frames_lost, shown by `analyze cpu` with the other
 * losses), ST_EINVAL (with a message: a NULL trace or frames with
 * n_frames > 0, n_frames above ST_CPU_SAMPLE_MAX_FRAMES, a NULL qualname,
 * a negative line, unknown flags, an os_tid no registered thread has, a
 * time before the thread's registration or in the future) or ST_ESTATE
 * (the trace is not open, or was opened without st_options.cpu). */
typedef struct st_py_frame {
    const char *qualname; /* co_qualname (co_name before 3.11) */
    const char *file;     /* co_filename, or NULL */
    int32_t line;         /* the line being run; 0 unknown */
} st_py_frame;
#define ST_CPU_SAMPLE_NOW 1u           /* flags: stamp the sample at the call */
#define ST_CPU_SAMPLE_MAX_FRAMES 256   /* deeper stacks: pass the innermost 256 */
#define ST_CPU_SAMPLE_QUEUE_MAX 16384
ST_API int st_cpu_sample_add(st_trace *trace, int os_tid, int64_t ts_ns, const st_py_frame *frames,
                             size_t n_frames, unsigned flags);

/* Opens the process's trace. Fails (with a message) on a bad option, an
 * unwritable path (ST_EIO), an existing file without overwrite (ST_EEXIST),
 * or a file that another process is still writing (ST_EBUSY, with or
 * without overwrite); in that case no file is left behind and no file this
 * call did not create is removed. The trace file is locked (flock) from
 * st_open to st_close: a live trace is never replaced (docs/tracer.md,
 * "One file, one writer"). Only one trace may be open per process. */
ST_API int st_open(st_trace **out, const st_options *opt);

/* Drains every ring, writes everything, marks the trace "complete" (or
 * keeps "interrupted" when st_signal_flush ran) and frees it. NULL is fine. */
ST_API int st_close(st_trace *trace);

/* Blocks until everything recorded before the call is committed. ST_EIO
 * when that commit failed (a full disk, say): the records are kept in memory
 * and retried at the next commit (see retry_mib). */
ST_API int st_flush(st_trace *trace);

/* Async-signal-safe: asks the writer to commit everything recorded so far
 * (the ranges still open stored as open until now), to mark the trace
 * "interrupted" and to checkpoint the WAL into the trace file, and waits up
 * to timeout_ms for it
 * (a negative timeout_ms waits without limit). Returns ST_OK when the
 * writer committed, ST_ESTATE when no trace is open or it was opened with
 * enabled = 0, ST_ETIMEDOUT when the writer did not answer within
 * timeout_ms (the request stays: it commits and marks the trace as soon as
 * it can), ST_EIO when the request could not be sent. Being called from a
 * signal handler, it sets no st_last_error() message and keeps errno. */
ST_API int st_signal_flush(int timeout_ms);

/* Installs SIGINT/SIGTERM handlers that call st_signal_flush, set the flag
 * read by st_interrupted(), and (on a second signal, or SIGTERM when
 * exit_on_term) restore the previous actions and re-raise with the default
 * one. A signal ignored (SIG_IGN) when this is called stays ignored: no
 * handler is installed for it, so it neither flushes nor marks the trace
 * interrupted (a program run under nohup or `trap '' INT`). */
ST_API int st_install_signal_handlers(st_trace *trace, int exit_on_term);
ST_API int st_interrupted(void);

ST_API int st_enabled(const st_trace *trace);
ST_API const char *st_path(const st_trace *trace);
ST_API const char *st_last_error(void);

/* Registration. Returns the id (>= 0) or a negative ST_E* code. Registering
 * the same name again returns the same id (the kind must match). */
ST_API int st_stage_register(st_trace *trace, const char *name, st_kind kind);
ST_API int st_counter_register(st_trace *trace, const char *name, const char *unit);

/* Registers the calling thread: gives it a ring and names it (also in NVTX).
 * role: "loader", "target", ...; device: GPU index or -1. Returns the thread
 * id (>= 0) or a negative code. st_thread_unregister must be called before
 * the thread exits (st_close does it for the thread that calls it). */
ST_API int st_thread_register(st_trace *trace, const char *name, const char *role,
                       int device, int rank);
ST_API void st_thread_unregister(void);

/* Hot path: st_begin(stage), st_end(stage), st_counter_set(counter, value),
 * st_mark(literal_name), and st_step(step, tokens): "step `step` ended now,
 * having processed `tokens` tokens". Mark step 0 when the loop starts.
 * Steps must increase, in time, and step and tokens must be at most
 * INT64_MAX: the writer leaves any other mark out and counts it in meta
 * rejected_steps. Windows of N steps run from the mark of step k*N to the
 * mark of step (k+1)*N.
 *
 * Flows: st_flow_out(id) says "item `id` leaves this thread now" (call it
 * in the producer's put before the queue's lock is released, else the
 * consumer's in may be recorded first) and st_flow_in(id)
 * "item `id` arrived on this thread now" (in the consumer, right after its
 * get returned it). Ids are chosen by the program: any 64-bit value, unique
 * per item and handoff within a run (across threads and ranks), e.g.
 * step << 16 | producer index. Each call is one record in the thread's
 * ring, like a begin; docs/trace-format.md ("flow_chunks") stores them and
 * `analyze flow` pairs each out with its in.
 *
 * Each is exported as a function (what code built with -DST_NO_INLINE or
 * by other compilers calls) and, for GCC and Clang, also defined below as a
 * static inline function that tests the calling thread's ring pointer and
 * calls the recording half (st__ring_*) only when the thread records; on
 * x86-64 the common st_begin, st_end, st_counter_set, st_mark, st_flow_out
 * and st_flow_in write the ring themselves, with no call. Names with a
 * double underscore are not part of the API: they are here for the inline
 * functions only. */
#if !defined(ST_DISABLE) && (defined(ST_NO_INLINE) || defined(ST__OUT_OF_LINE) || \
                             !defined(__GNUC__))
ST_API void st_begin(st_stage stage);
ST_API void st_end(st_stage stage);
ST_API void st_counter_set(st_counter counter, double value);
ST_API void st_mark(const char *literal_name);
ST_API void st_step(uint64_t step, uint64_t tokens);
ST_API void st_flow_out(uint64_t id);
ST_API void st_flow_in(uint64_t id);
#endif

#if !defined(ST_DISABLE)
struct st_ring;
/* The first fields of a thread's ring (tracer/ring.h), which the inline
 * st_begin and st_end read and write on x86-64: their layout, and the head
 * at ST__RING_HEAD_OFFSET bytes from them, are part of the library's ABI
 * (docs/tracer.md, "The hot path"). */
struct st__ring_hot {
    uint64_t open;        /* open begins (bits 0-31), dropped open begins
                             (32-62), 1 << 63: every call takes the general path */
    uint64_t limit;       /* last tail seen + capacity */
    void *buf;            /* the 16-byte slots */
    uint32_t mask;        /* capacity - 1 */
    uint32_t stage_limit; /* stage ids below it are registered */
};
#define ST__RING_HEAD_OFFSET 128 /* the ring's uint64_t head: the next slot */
#if defined(__GNUC__)
/* The calling thread's ring; NULL when it does not record. st__thread_hot
 * is what this header's inline calls read; st__thread_ring (the same ring)
 * what those of earlier headers read. */
ST_API extern __thread struct st__ring_hot *st__thread_hot __attribute__((tls_model("initial-exec")));
ST_API extern __thread struct st_ring *st__thread_ring __attribute__((tls_model("initial-exec")));
#if defined(__x86_64__)
/* The common calls, with no call (tracer/ring.h, "The common case in one
 * compare"): st__hot_begin, st__hot_end and st__hot_pair return 1 when they
 * recorded, 0 when the general path must run. */
static inline __attribute__((always_inline, unused)) uint64_t *st__hot_head(struct st__ring_hot *r)
{
    return (uint64_t *)((char *)r + ST__RING_HEAD_OFFSET);
}
/* Writes the record at slot h (its room taken): the clock, then id and
 * type in one 8-byte word. Returns the slot. */
static inline __attribute__((always_inline, unused)) char *st__hot_record(struct st__ring_hot *r,
                                                                          uint64_t h, uint64_t id_type)
{
    char *slot = (char *)r->buf + ((h & r->mask) << 4);
    int64_t ts = (int64_t)__builtin_ia32_rdtsc();
    __builtin_memcpy(slot, &ts, 8);
    __builtin_memcpy(slot + 8, &id_type, 8);
    return slot;
}
static inline __attribute__((always_inline, unused)) void st__hot_publish(struct st__ring_hot *r, uint64_t head)
{
    __atomic_store_n(st__hot_head(r), head, __ATOMIC_RELEASE);
}
static inline __attribute__((always_inline, unused)) int st__hot_begin(struct st__ring_hot *r,
                                                                       st_stage stage)
{
    uint64_t o = r->open, h = __atomic_load_n(st__hot_head(r), __ATOMIC_RELAXED);
    if (__builtin_expect(!(o < ST_MAX_DEPTH && stage < r->stage_limit && h + o + 2 <= r->limit), 0))
        return 0;
    r->open = o + 1; /* reserves the slot of its end */
    st__hot_record(r, h, (uint64_t)stage | (uint64_t)1 << 32);
    st__hot_publish(r, h + 1);
    return 1;
}
static inline __attribute__((always_inline, unused)) int st__hot_end(struct st__ring_hot *r,
                                                                     st_stage stage)
{
    uint64_t o = r->open;
    if (__builtin_expect(!(o - 1 < ST_MAX_DEPTH), 0)) return 0;
    uint64_t h = __atomic_load_n(st__hot_head(r), __ATOMIC_RELAXED);
    r->open = o - 1;
    st__hot_record(r, h, (uint64_t)stage | (uint64_t)2 << 32);
    st__hot_publish(r, h + 1);
    return 1;
}
/* A counter sample, mark or flow: its record and a payload slot with arg,
 * published together. */
static inline __attribute__((always_inline, unused)) int st__hot_pair(struct st__ring_hot *r,
                                                                      uint64_t id_type, uint64_t arg)
{
    uint64_t o = r->open, h = __atomic_load_n(st__hot_head(r), __ATOMIC_RELAXED);
    if (__builtin_expect(!(o < ST_MAX_DEPTH && h + o + 2 <= r->limit), 0)) return 0;
    /* (before the record's stores, which may alias r's fields) */
    char *payload = (char *)r->buf + (((h + 1) & r->mask) << 4);
    st__hot_record(r, h, id_type);
    uint64_t zero = 0;
    __builtin_memcpy(payload, &arg, 8);
    __builtin_memcpy(payload + 8, &zero, 8);
    st__hot_publish(r, h + 2);
    return 1;
}
#endif
#endif
ST_API void st__ring_begin(struct st_ring *ring, st_stage stage);
ST_API void st__ring_end(struct st_ring *ring, st_stage stage);
ST_API void st__ring_counter(struct st_ring *ring, st_counter counter, double value);
ST_API void st__ring_mark(struct st_ring *ring, const char *literal_name);
ST_API void st__ring_step(struct st_ring *ring, uint64_t step, uint64_t tokens);
ST_API void st__ring_flow(struct st_ring *ring, uint64_t id, uint32_t dir);
/* 1 while an enabled trace is open; a call from a thread with no ring then
 * reports itself through st__unregistered (out of line, once per thread). */
ST_API extern int st__recording;
ST_API void st__unregistered(const char *call);
#endif

#if defined(ST_DISABLE)
static inline void st_begin(st_stage stage) { (void)stage; }
static inline void st_end(st_stage stage) { (void)stage; }
static inline void st_counter_set(st_counter counter, double value) { (void)counter; (void)value; }
static inline void st_mark(const char *literal_name) { (void)literal_name; }
static inline void st_step(uint64_t step, uint64_t tokens) { (void)step; (void)tokens; }
static inline void st_flow_out(uint64_t id) { (void)id; }
static inline void st_flow_in(uint64_t id) { (void)id; }
#elif !defined(ST_NO_INLINE) && !defined(ST__OUT_OF_LINE) && defined(__GNUC__)
#define ST__HOT static inline __attribute__((always_inline, unused))
#if defined(__x86_64__)
#define ST__HOT_BEGIN(r, stage) st__hot_begin(r, stage)
#define ST__HOT_END(r, stage) st__hot_end(r, stage)
#define ST__HOT_PAIR(r, id, type, arg) st__hot_pair(r, (uint64_t)(id) | (uint64_t)(type) << 32, arg)
#else
#define ST__HOT_BEGIN(r, stage) 0
#define ST__HOT_END(r, stage) 0
#define ST__HOT_PAIR(r, id, type, arg) 0
#endif
ST__HOT void st_begin(st_stage stage)
{
    struct st__ring_hot *r = st__thread_hot;
    /* Laid out for the disabled case (a straight line); recording costs
     * the same either way. */
    if (__builtin_expect(r != 0, 0)) {
        if (!ST__HOT_BEGIN(r, stage)) st__ring_begin((struct st_ring *)r, stage);
    } else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0)) {
        st__unregistered("st_begin");
    }
}
ST__HOT void st_end(st_stage stage)
{
    struct st__ring_hot *r = st__thread_hot;
    if (__builtin_expect(r != 0, 0) && !ST__HOT_END(r, stage)) st__ring_end((struct st_ring *)r, stage);
}
ST__HOT void st_counter_set(st_counter counter, double value)
{
    struct st__ring_hot *r = st__thread_hot;
    if (__builtin_expect(r != 0, 0)) {
        uint64_t bits;
        __builtin_memcpy(&bits, &value, 8);
        if (!ST__HOT_PAIR(r, counter, 3, bits)) st__ring_counter((struct st_ring *)r, counter, value);
    } else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0)) {
        st__unregistered("st_counter_set");
    }
}
ST__HOT void st_mark(const char *literal_name)
{
    struct st__ring_hot *r = st__thread_hot;
    if (__builtin_expect(r != 0, 0)) {
        if (!literal_name) return;
        if (!ST__HOT_PAIR(r, 0, 4, (uint64_t)(uintptr_t)literal_name))
            st__ring_mark((struct st_ring *)r, literal_name);
    } else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0)) {
        st__unregistered("st_mark");
    }
}
ST__HOT void st_step(uint64_t step, uint64_t tokens)
{
    struct st_ring *ring = (struct st_ring *)st__thread_hot;
    if (ring) st__ring_step(ring, step, tokens);
    else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0))
        st__unregistered("st_step");
}
ST__HOT void st_flow_out(uint64_t id)
{
    struct st__ring_hot *r = st__thread_hot;
    if (__builtin_expect(r != 0, 0)) {
        if (!ST__HOT_PAIR(r, 0, 7, id)) st__ring_flow((struct st_ring *)r, id, 0);
    } else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0)) {
        st__unregistered("st_flow_out");
    }
}
ST__HOT void st_flow_in(uint64_t id)
{
    struct st__ring_hot *r = st__thread_hot;
    if (__builtin_expect(r != 0, 0)) {
        if (!ST__HOT_PAIR(r, 1, 7, id)) st__ring_flow((struct st_ring *)r, id, 1);
    } else if (__builtin_expect(__atomic_load_n(&st__recording, __ATOMIC_RELAXED), 0)) {
        st__unregistered("st_flow_in");
    }
}
#undef ST__HOT
#undef ST__HOT_BEGIN
#undef ST__HOT_END
#undef ST__HOT_PAIR
#endif

/* Events dropped so far because a ring was full (all threads), counted live:
 * a drop is seen by the next call on any thread, not at the writer's next
 * commit. Thread-safe. After every thread has stopped recording it equals
 * what st_close stores in meta dropped_events. */
ST_API uint64_t st_dropped(const st_trace *trace);

/* NVTX: names a CUDA stream (a cudaStream_t passed as void *). No-op without
 * NVTX or CUDA support. */
ST_API void st_name_stream(void *cuda_stream, const char *name);

/* GPU activity (CUDA builds with CUPTI): from this call to st_close, records
 * every kernel, memcpy (direction, bytes, pageable or pinned), memset and
 * synchronization of every device and stream, with the thread and stage
 * that launched it, into the trace's gpu_chunks table, on the trace's clock.
 * CUPTI's buffers are parsed on CUPTI's thread and flushed every 100 ms;
 * st_close forces the last flush. CUPTI's dropped-record count goes to meta
 * "gpu_dropped_records". Lives in libstagetrace_gpu.a: link it and -lcupti
 * before libstagetrace. Returns ST_OK, ST_ESTATE (no trace, or already on),
 * ST_EINVAL (built without CUPTI) or ST_EIO (CUPTI failed; message). */
ST_API int st_gpu_start(st_trace *trace);
/* st_gpu_start with the record-set spec `records` (the syntax of
 * st_options.gpu_records, such as "kernel,every_steps=10") in place of
 * st_options.gpu_records and STAGETRACE_GPU_RECORDS; NULL: as st_gpu_start.
 * A spec that does not parse: ST_EINVAL with a one-line message. */
ST_API int st_gpu_start_with(st_trace *trace, const char *records);

/* Pauses GPU activity recording and resumes it: the kernel records (CUPTI's
 * per-launch instrumentation, what the capture costs) are turned off, so
 * kernels run as if untraced; copies, memsets, syncs and API calls are still
 * recorded (CUPTI does not switch those safely under concurrent launches;
 * docs/tracer.md, "Pausing"). Each pause is stored as a gpu_pauses row; the
 * analyses say how much of their window was paused, since the kernels run
 * then are missing from the trace. A pause still open at st_close
 * ends there. For benchmarks that alternate traced and untraced blocks in
 * one process, and for tracing chosen stretches of a long run. Returns
 * ST_OK, or ST_ESTATE (GPU tracing not on; already paused / not paused) or
 * ST_EIO (CUPTI refused to resume; message). Thread-safe. */
ST_API int st_gpu_pause(st_trace *trace);
ST_API int st_gpu_resume(st_trace *trace);

/* Nanoseconds on the trace's clock (the clock every record uses). */
ST_API int64_t st_now_ns(void);

/* Many processes (docs/tracer.md, "Many processes"; docs/trace-format.md,
 * "Ranks on one clock").
 *
 * st_rank_path: the file a rank writes for the path given by the user.
 * world_size 1: path itself. Otherwise: "<path>/rank<r>.sqlite" when path
 * ends in '/' or names an existing directory; "<stem>.rank<r>.sqlite" when
 * path ends in ".sqlite"; "<path>.rank<r>.sqlite" otherwise. Returns ST_OK,
 * or ST_EINVAL when rank is not in 0..world_size-1 or the result does not
 * fit in size bytes. */
ST_API int st_rank_path(const char *path, int rank, int world_size, char *buf, size_t size);

/* One clock exchange with rank 0: this process's clock when the probe left
 * (send_ns) and when the answer came back (recv_ns), and rank 0's clock
 * when it answered (remote_ns). */
typedef struct st_clock_probe {
    int64_t send_ns, remote_ns, recv_ns;
} st_clock_probe;

/* A measured offset: at local time local_ns, rank 0's clock read
 * local_ns + offset_ns, give or take uncertainty_ns. */
typedef struct st_clock_sync {
    int64_t local_ns;
    int64_t offset_ns;
    int64_t uncertainty_ns;
} st_clock_sync;

/* Picks the probe with the smallest round trip recv_ns - send_ns (the
 * first of equals; probes with recv_ns < send_ns are ignored) and gives
 * local_ns = send_ns + rtt/2, offset_ns = remote_ns - local_ns,
 * uncertainty_ns = (rtt + 1) / 2. ST_EINVAL when no probe is usable. */
ST_API int st_clock_estimate(const st_clock_probe *probes, int n, st_clock_sync *out);

/* This process's trace clock against its own CLOCK_MONOTONIC, measured by
 * st_clock_map_measure: error_ns is the trace time of one clock reading
 * minus CLOCK_MONOTONIC at that reading (the shift of
 * ST_TEST_CLOCK_SHIFT_NS not counted), known to within +- half_bracket_ns
 * (half the clock_gettime bracket around the reading, rounded up). On the
 * TSC the map is fixed at open, so the error is its anchor's error plus
 * its slope's error times the time since open; on CLOCK_MONOTONIC both are
 * 0. */
typedef struct st_clock_map {
    int64_t error_ns;
    int64_t half_bracket_ns;
} st_clock_map;

/* Measures it now: of a few (TSC, CLOCK_MONOTONIC) reads, the one with the
 * tightest bracket, the TSC read fenced inside it; a few microseconds.
 * ST_OK, or ST_EINVAL without `out`. Before any st_open, 0 and 0. */
ST_API int st_clock_map_measure(st_clock_map *out);

/* Widens a measured offset by both ends' map errors: uncertainty_ns +=
 * |own->error_ns| + own->half_bracket_ns + |rank0->error_ns| +
 * rank0->half_bracket_ns (saturating at INT64_MAX), so that it bounds the
 * offset between the two hosts' CLOCK_MONOTONIC, not only between their
 * trace clocks (docs/trace-format.md, "Ranks on one clock"). ST_EINVAL on
 * a NULL argument, a negative half bracket or a negative uncertainty. */
ST_API int st_clock_sync_widen(st_clock_sync *sync, const st_clock_map *own, const st_clock_map *rank0);

enum { ST_CLOCK_AT_OPEN = 0, ST_CLOCK_AT_CLOSE = 1 };
/* Stores a measurement in the trace's meta (clock_offset_ns, ... at open;
 * clock_offset_close_ns, ... and clock_drift_ppb at close). Thread-safe;
 * call it between st_open and st_close. Rank 0 records offset 0 and
 * uncertainty 0. ST_EINVAL on a bad `at` or negative uncertainty,
 * ST_ESTATE when the trace is not open. */
ST_API int st_clock_sync_record(st_trace *trace, int at, const st_clock_sync *sync);

/* Stores this process's map error as measured at that clock measurement
 * (clock_map_error_ns and clock_map_half_bracket_ns at open, the _close_
 * pair at close). Thread-safe; between st_open and st_close. ST_EINVAL on a
 * bad `at` or a negative half bracket, ST_ESTATE when the trace is not
 * open. */
ST_API int st_clock_map_record(st_trace *trace, int at, const st_clock_map *map);

/* Stores key = value in the trace's meta at the writer's next commit, for
 * what the program knows of its run that the library cannot (the Python
 * package's python_stacks, ...; docs/trace-format.md, "meta"); a later call
 * with the same key replaces the value. key: 1..64 bytes of [a-z0-9_], not
 * one the library writes (those of docs/trace-format.md's meta table, and
 * every key beginning with cpu_, clock_ or gpu_); value: at most 4096 bytes
 * of text. At most 32 distinct keys. Thread-safe; call it between st_open
 * and st_close. ST_EINVAL for a refused key or value, ST_ELIMIT past 32
 * keys, ST_ESTATE without a trace. */
ST_API int st_meta_set(st_trace *trace, const char *key, const char *value);

#if defined(ST_DISABLE)
/* -DST_DISABLE: every call is a stub that records nothing and touches no
 * library symbol. What they return: st_open gives a NULL trace and ST_OK;
 * st_close, st_flush, st_signal_flush, st_install_signal_handlers and
 * st_gpu_start, st_clock_sync_record, st_clock_sync_widen (leaving the
 * measurement as it is), st_clock_map_record and st_meta_set return ST_OK;
 * st_clock_map_measure gives 0 and 0 and ST_OK; st_rank_path and
 * st_clock_estimate return ST_EINVAL; st_stage_register, st_counter_register and
 * st_thread_register return 0 (every stage, counter and thread gets id 0);
 * st_enabled, st_interrupted, st_dropped and st_now_ns return 0; st_path
 * returns ""; st_last_error returns "no error"; st_kind_name and
 * st_kind_parse work as in the library; st_window_format writes "" and
 * returns 0; st_options_init fills the library's defaults. No signal
 * handler is installed, so SIGINT and SIGTERM keep their default action. */
ST_API void st_options_init(st_options *opt)
{
#ifdef __cplusplus
    st_options defaults = st_options();
#else
    st_options defaults = {0};
#endif
    defaults.enabled = 1;
    defaults.program = "stagetrace";
    defaults.world_size = 1;
    defaults.ring_records = 262144;
    defaults.commit_ms = 250;
    defaults.retry_mib = 64;
    defaults.nvtx = -1;
    defaults.device = -1;
    if (opt) *opt = defaults;
}
ST_API const char *st_kind_name(st_kind kind)
{
    static const char *const names[ST_KIND_COUNT] = {"work", "wait_input", "wait_output",
                                                     "sync", "comm", "copy"};
    return (unsigned)kind < ST_KIND_COUNT ? names[kind] : "unknown";
}
ST_API int st_kind_parse(const char *name)
{
    for (int i = 0; name && i < ST_KIND_COUNT; i++) {
        const char *a = name, *b = st_kind_name((st_kind)i);
        while (*a && *a == *b) a++, b++;
        if (*a == *b) return i;
    }
    return -1;
}
ST_API size_t st_window_format(const st_window *window, char *buf, size_t size)
{
    (void)window;
    if (buf && size > 0) buf[0] = '\0';
    return 0;
}
ST_API int st_open(st_trace **out, const st_options *opt)
{
    (void)opt;
    if (out) *out = (st_trace *)0;
    return ST_OK;
}
ST_API int st_close(st_trace *trace) { (void)trace; return ST_OK; }
ST_API int st_flush(st_trace *trace) { (void)trace; return ST_OK; }
ST_API int st_signal_flush(int timeout_ms) { (void)timeout_ms; return ST_OK; }
ST_API int st_install_signal_handlers(st_trace *trace, int exit_on_term)
{
    (void)trace; (void)exit_on_term;
    return ST_OK;
}
ST_API int st_interrupted(void) { return 0; }
ST_API int st_enabled(const st_trace *trace) { (void)trace; return 0; }
ST_API const char *st_path(const st_trace *trace) { (void)trace; return ""; }
ST_API const char *st_last_error(void) { return "no error"; }
ST_API int st_stage_register(st_trace *trace, const char *name, st_kind kind)
{
    (void)trace; (void)name; (void)kind;
    return 0;
}
ST_API int st_counter_register(st_trace *trace, const char *name, const char *unit)
{
    (void)trace; (void)name; (void)unit;
    return 0;
}
ST_API int st_thread_register(st_trace *trace, const char *name, const char *role,
                              int device, int rank)
{
    (void)trace; (void)name; (void)role; (void)device; (void)rank;
    return 0;
}
ST_API void st_thread_unregister(void) {}
ST_API void st_cpu_set_gil_probe(int (*probe)(void)) { (void)probe; }
ST_API uint64_t st_dropped(const st_trace *trace) { (void)trace; return 0; }
ST_API void st_name_stream(void *cuda_stream, const char *name) { (void)cuda_stream; (void)name; }
ST_API int st_gpu_start(st_trace *trace) { (void)trace; return ST_OK; }
ST_API int st_gpu_start_with(st_trace *trace, const char *records) { (void)trace; (void)records; return ST_OK; }
ST_API int st_gpu_pause(st_trace *trace) { (void)trace; return ST_OK; }
ST_API int st_gpu_resume(st_trace *trace) { (void)trace; return ST_OK; }
ST_API int64_t st_now_ns(void) { return 0; }
ST_API int st_rank_path(const char *path, int rank, int world_size, char *buf, size_t size)
{
    (void)path; (void)rank; (void)world_size; (void)buf; (void)size;
    return ST_EINVAL;
}
ST_API int st_clock_estimate(const st_clock_probe *probes, int n, st_clock_sync *out)
{
    (void)probes; (void)n; (void)out;
    return ST_EINVAL;
}
ST_API int st_clock_sync_record(st_trace *trace, int at, const st_clock_sync *sync)
{
    (void)trace; (void)at; (void)sync;
    return ST_OK;
}
ST_API int st_clock_map_measure(st_clock_map *out)
{
    if (out) out->error_ns = out->half_bracket_ns = 0;
    return ST_OK;
}
ST_API int st_clock_sync_widen(st_clock_sync *sync, const st_clock_map *own, const st_clock_map *rank0)
{
    (void)sync; (void)own; (void)rank0;
    return ST_OK;
}
ST_API int st_clock_map_record(st_trace *trace, int at, const st_clock_map *map)
{
    (void)trace; (void)at; (void)map;
    return ST_OK;
}
ST_API int st_meta_set(st_trace *trace, const char *key, const char *value)
{
    (void)trace; (void)key; (void)value;
    return ST_OK;
}
ST_API int st_cpu_sample_add(st_trace *trace, int os_tid, int64_t ts_ns, const st_py_frame *frames,
                             size_t n_frames, unsigned flags)
{
    (void)trace; (void)os_tid; (void)ts_ns; (void)frames; (void)n_frames; (void)flags;
    return ST_OK;
}
#endif

/* Scoped range: ST_SCOPE(stage) { ... } or ST_SCOPE_AUTO in GCC/Clang. */
#if defined(ST_DISABLE)
#define ST_SCOPE(stage) for (int st__once = ((void)(stage), 1); st__once; st__once = 0)
#if defined(__GNUC__) && !defined(__cplusplus)
#define ST__CAT2(a, b) a##b
#define ST__CAT(a, b) ST__CAT2(a, b)
#define ST_SCOPE_AUTO(stage) \
    __attribute__((unused)) const st_stage ST__CAT(st__scope_, __LINE__) = (st_stage)(stage)
#endif
#else
#define ST_SCOPE(stage) \
    for (int st__once = (st_begin(stage), 1); st__once; st__once = 0, st_end(stage))
#endif

#if defined(__GNUC__) && !defined(__cplusplus) && !defined(ST_DISABLE)
static inline void st__scope_end(const st_stage *stage) { st_end(*stage); }
#define ST__CAT2(a, b) a##b
#define ST__CAT(a, b) ST__CAT2(a, b)
/* Ends the range when the enclosing block exits, by any path. */
#define ST_SCOPE_AUTO(stage)                                              \
    __attribute__((cleanup(st__scope_end))) const st_stage ST__CAT(       \
        st__scope_, __LINE__) = (st_begin(stage), (st_stage)(stage))
#endif

#ifdef __cplusplus
}
#endif
#endif
