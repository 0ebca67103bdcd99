/* st_cpu.h: the CPU capture layer (cpu_perf.c). One Linux perf event per
 * thread gives the kernel's context-switch records (on-CPU / off-CPU, with
 * the preempted flag) and CPU-clock samples with frame-pointer callchains,
 * all stamped on CLOCK_MONOTONIC, in a ring the kernel fills and one
 * consumer (the writer thread, through cpu_record.c) drains. Nothing here
 * runs on a range's hot path. Private to the tracer (docs/cpu.md; what
 * reaches a trace: docs/tracer.md and docs/trace-format.md, "CPU capture").
 *
 * The API:
 *   st_cpu_thread_open(t, tid, cfg)  opens the event of thread `tid` (the
 *       calling thread when tid is 0) and maps its ring. Returns ST_CPU_OK or
 *       a negative st_cpu_status, with t->reason saying why in one line
 *       (errno name, perf_event_paranoid, seccomp, what ring memory was
 *       refused). Never aborts; a closed st_cpu_thread is harmless to drain
 *       and close.
 *   st_cpu_thread_drain(t, sink)  parses what the kernel wrote since the last
 *       drain and passes each switch, sample and lost record to the sink's
 *       callbacks (a sample with its user registers and stack copy when
 *       cfg->user_stack asked for them, for cpu_unwind.c); returns the number of records passed. One consumer per
 *       thread's ring (it owns data_tail); any number of rings may share one
 *       sink, which holds the scratch record a callback sees (valid during
 *       the callback only).
 *   st_cpu_thread_close(t)  unmaps and closes (t may be closed already).
 *
 *   st_cpu_off_intervals + st_cpu_account  the accounting, pure functions of
 *       a thread's switch records and a set of ranges (below).
 *   st_cpu_maps_*  the process's executable mappings, and st_cpu_chain_cut,
 *       which cuts a callchain at its first frame outside them.
 *
 * What is and is not thread-safe: open and close may run on any thread;
 * drain of one st_cpu_thread runs on one thread at a time; the sink and an
 * st_cpu_maps belong to the thread that drains. The pure functions share
 * nothing. */
#ifndef ST_CPU_H
#define ST_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "stagetrace_reader.h"

enum st_cpu_status {
    ST_CPU_OK = 0,
    ST_CPU_REFUSED = -1,     /* permission: perf_event_paranoid, a seccomp filter, capabilities */
    ST_CPU_UNSUPPORTED = -2, /* the kernel has no such event (ENOSYS, ENOENT, EOPNOTSUPP, EINVAL) */
    ST_CPU_NOMEM = -3,       /* not even a one-page ring could be mapped (locked-memory limits) */
    ST_CPU_EINVAL = -4,      /* a bad argument */
    ST_CPU_ERROR = -5,       /* anything else (the reason names the errno) */
};

/* Default sample period: 1/199 s of CPU time (199 Hz), so that the capture
 * costs well under 1 % of a busy thread: a sample cost about 20-28 us of
 * the thread's CPU on the 2-core Firecracker VM (1 kHz: 2.5-2.8 %, 10 kHz:
 * 17-19 %), 16 us on the H200 host (1 kHz: 1.6 %); bench/bench_cpu_perf.c,
 * bench/RESULTS.md. 199 rather than 200 Hz: a period that is no multiple
 * of the 4 ms scheduler tick nor of a program's whole-millisecond loops,
 * so that samples do not stay in step with them (as perf users take 99 or
 * 999 Hz). */
#define ST_CPU_DEFAULT_PERIOD_NS 5025126ull
/* Default ring: 64 KiB of data (16 pages) plus the metadata page. */
#define ST_CPU_DEFAULT_RING_BYTES (64u * 1024u)

typedef struct st_cpu_config {
    uint64_t period_ns;  /* CPU-clock sample period in ns of CPU time; 0: the
                            default; UINT64_MAX: no samples, switches only */
    size_t ring_bytes;   /* wanted data size, rounded down to 2^n pages;
                            0: st_cpu_ring_bytes_for(0) */
    int no_callchain;    /* 1: samples without PERF_SAMPLE_CALLCHAIN */
    int wait_stacks;     /* 1: instead of the CPU-clock event, a context-switch
                            event (PERF_COUNT_SW_CONTEXT_SWITCHES, period 1)
                            whose samples carry the user stack at each
                            switch-out ("wait stacks"); needs
                            perf_event_paranoid <= 1, CAP_PERFMON or root */
    uint32_t user_stack;  /* 0: none; else the bytes of user stack each
                             sample copies (PERF_SAMPLE_STACK_USER, with the
                             ip, sp and bp of PERF_SAMPLE_REGS_USER), for
                             DWARF unwinding (cpu_unwind.c): a multiple of 8
                             from ST_CPU_USER_STACK_MIN to _MAX; x86-64 only.
                             The ring is sized to hold ST_CPU_USER_STACK_RECORDS
                             such samples (st_cpu_user_stack_ring); where it
                             cannot hold 2, or the kernel refuses the fields,
                             the event opens without them (reason says why) */
} st_cpu_config;

#define ST_CPU_USER_STACK_MIN 8192u
#define ST_CPU_USER_STACK_MAX 65528u /* the kernel's limit: below USHRT_MAX, 8-aligned */
#define ST_CPU_USER_STACK_RECORDS 16u
/* A sample's bytes beside its stack copy: header, ip, pid/tid, time, a
 * callchain of up to 127 frames, abi, 3 registers, size, dyn_size. */
#define ST_CPU_USER_STACK_OVERHEAD 1152u
/* The ring data size wanted for samples with user_stack bytes of stack:
 * ST_CPU_USER_STACK_RECORDS of them, rounded up to a power of two, and
 * never below the default ring. */
size_t st_cpu_user_stack_ring(uint32_t user_stack);

typedef struct st_cpu_thread {
    int fd;                    /* -1 when closed */
    pid_t tid;
    void *map;                 /* metadata page + data */
    size_t map_bytes;
    unsigned char *data;
    size_t data_bytes;         /* a power of two */
    size_t refused_bytes;      /* the first ring size that mmap refused, 0 if none */
    uint64_t period_ns;        /* the period asked for (0 when switches only) */
    int callchain;             /* samples carry a callchain */
    int wait_stacks;           /* a wait-stack event (st_cpu_config.wait_stacks) */
    int sched;                 /* the sched_switch tracepoint event (cpu_sched.c), drained by
                                  st_cpusched_drain; also a wait-stack event */
    uint32_t user_stack;       /* samples carry user registers and this many bytes of user
                                  stack (st_cpu_config.user_stack); 0 when not asked or refused */
    char user_stack_reason[160]; /* why user stacks were asked and left out, "" otherwise */
    uint64_t lost;             /* records the kernel lost (sum of PERF_RECORD_LOST) */
    uint64_t n_switches, n_samples, n_other;
    uint64_t n_corrupt;        /* drains that met a malformed record and skipped to data_head */
    int err;                   /* errno of the failure, 0 when open */
    char reason[256];          /* why open failed, or what ring memory was refused */
    /* What else the writer (cpu_record.c) captures of the thread, set after
     * the open and owned there; open and close leave them alone. */
    struct st_cpu_timer *timer;   /* the signal sampler, or NULL */
    struct st_cpu_thread *waits;  /* the wait-stack event, or NULL */
} st_cpu_thread;

/* st_cpu_switch, and the accounting of a range's on-CPU, preempted and
 * blocked time over a thread's switch records (st_cpu_off_intervals,
 * st_cpu_account), are part of the reader API: stagetrace_reader.h. */

/* One PERF_RECORD_SAMPLE, or a sample of the signal sampler. frames[0] is
 * the sampled ip; frames[1..] are the return addresses of the
 * frame-pointer walk, PERF_CONTEXT_* markers removed. They point into the
 * sink's scratch memory. A wait-stack event's sample has the user-space
 * ip where the thread entered the kernel as frames[0] (the kernel ip it
 * was taken at is left out). gil: what the GIL probe said on the sampled
 * thread (1 held, 0 not, -1 unknown), ST_CPU_GIL_NO_PROBE when no probe
 * was asked (perf samples, a timer opened without a probe). */
#define ST_CPU_GIL_NO_PROBE (-2)
/* A sample's user registers and stack copy (st_cpu_config.user_stack):
 * data[0 .. dyn_size) holds the bytes at [sp, sp + dyn_size) when the
 * kernel took the sample (dyn_size: the part the kernel could copy, at most
 * the size asked). */
typedef struct st_cpu_ustack {
    uint64_t ip, sp, bp;
    const unsigned char *data;
    uint64_t dyn_size;
} st_cpu_ustack;

typedef struct st_cpu_sample {
    int64_t t_ns;
    uint32_t pid, tid;
    uint32_t n_frames;
    const uint64_t *frames;
    int gil;
    const st_cpu_ustack *ustack; /* NULL: none (not asked, a kernel-thread sample, an empty copy) */
} st_cpu_sample;

typedef struct st_cpu_sink {
    void *ctx;
    /* Each may be NULL. */
    void (*on_switch)(void *ctx, const st_cpu_thread *t, const st_cpu_switch *s);
    void (*on_sample)(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s);
    void (*on_lost)(void *ctx, const st_cpu_thread *t, uint64_t n_lost, int64_t t_ns);
    /* Scratch: one record copied out of the ring (a record is at most 64 KiB,
     * its size field being 16 bits) and the frames of a sample. */
    uint64_t rec[65536 / 8];
    uint64_t frames[65536 / 8];
    /* A sample of the sched_switch tracepoint (cpu_sched.c; may be NULL):
     * frames[0 .. n_kernel) are kernel frames, the user chain follows;
     * state the task state the thread switched out in, the kernel's letter
     * ('S', 'D', ...; 'R' runnable, '+' preempted). */
    void (*on_sched)(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s, uint32_t n_kernel, int state);
} st_cpu_sink;

/* The bytes of ring memory this process may still lock for perf rings, as
 * the kernel counts it: perf_event_mlock_kb per CPU for the user, then
 * RLIMIT_MEMLOCK; SIZE_MAX when the limit does not apply (CAP_IPC_LOCK,
 * unlimited rlimit). mlock_kb and rlimit_kb (may be NULL) receive the two
 * figures (-1: unlimited or unreadable). */
size_t st_cpu_lock_budget(long *mlock_kb, long *rlimit_kb);
/* The data size for one of n_threads rings (0: 16 threads assumed): the
 * default ring, or less when the lock budget would not hold them all; a
 * power of two pages, at least one page. */
size_t st_cpu_ring_bytes_for(unsigned n_threads);

int st_cpu_thread_open(st_cpu_thread *t, pid_t tid, const st_cpu_config *cfg);
/* Parses the CPU-clock event's PERF_RECORD_SAMPLE rec[0 .. size) (the
 * header included) as t's sample_type lays it out: ip, pid and tid, time,
 * the callchain when t->callchain, and when t->user_stack: abi, the
 * registers bp, sp, ip (their perf_regs order) when abi is not
 * PERF_SAMPLE_REGS_ABI_NONE, the copy's size, its bytes, and dyn_size when
 * size is not 0. Fills *s (frames into frames[0 .. max_frames), and
 * s->ustack = us when a copy with registers came). 0, or -1 for a record
 * whose fields do not fit its size (or dyn_size > size): nothing past
 * rec + size is read. Pure, for the drain and for tests. */
int st_cpu_sample_parse(const st_cpu_thread *t, const unsigned char *rec, size_t size, st_cpu_sample *s,
                        uint64_t *frames, size_t max_frames, st_cpu_ustack *us);
long st_cpu_thread_drain(st_cpu_thread *t, st_cpu_sink *sink);
void st_cpu_thread_close(st_cpu_thread *t);

/* ---- the ring, for every per-thread perf event (cpu_perf.c, cpu_sched.c) --
 *   st_cpu_errno_name(e)   "EPERM", "ENOMEM", ...; "errno" for the others.
 *   st_cpu_ring_map(t, fd, bytes)  maps fd's ring with a data part of bytes
 *                          rounded down to a power of two pages, halving
 *                          while the kernel refuses the lock (EPERM,
 *                          ENOMEM) down to one page; sets t->map, data,
 *                          data_bytes, map_bytes and, when a larger ring was
 *                          refused, t->refused_bytes. 0, or the last mmap's
 *                          errno with t->map NULL.
 *   st_cpu_ring_each(t, sink, fn)  the one consumer's loop: every whole
 *                          record between the ring's tail and head, its
 *                          header checked (size at least a header, within
 *                          what was written, 8-byte multiple: otherwise
 *                          n_corrupt grows and the rest is skipped), copied
 *                          whole to sink->rec and passed to fn; then the
 *                          tail is given back. The records read. */
typedef void (*st_cpu_record_fn)(st_cpu_thread *t, st_cpu_sink *sink, uint32_t type, uint16_t misc,
                                 const unsigned char *rec, size_t size);
const char *st_cpu_errno_name(int e);
int st_cpu_ring_map(st_cpu_thread *t, int fd, size_t bytes);
long st_cpu_ring_each(st_cpu_thread *t, st_cpu_sink *sink, st_cpu_record_fn fn);

/* ---- frame validation --------------------------------------------------
 * The process's executable mappings, from a /proc/PID/maps text. A
 * callchain is cut at its first frame that points into none of them (a
 * corrupt frame-pointer chain has been seen to return ASCII text). On a
 * miss, the maps are read again from their file (a library loaded since),
 * at most once per min_refresh_ns. */
typedef struct st_cpu_exec_map {
    uint64_t lo, hi; /* [lo, hi) */
} st_cpu_exec_map;
typedef struct st_cpu_maps {
    st_cpu_exec_map *v;
    size_t n, cap;
    char path[128];          /* the file read on a refresh ("/proc/self/maps") */
    int64_t loaded_ns;       /* CLOCK_MONOTONIC of the last read */
    int64_t min_refresh_ns;  /* default 100 ms */
    unsigned n_loads;
} st_cpu_maps;

/* Reads path (NULL: /proc/self/maps). 0, or -1 when it cannot be read. */
int st_cpu_maps_load(st_cpu_maps *m, const char *path);
/* Replaces the mappings with those of a maps text (pure; for tests and for
 * texts read elsewhere). 0, or -1 on no memory. */
int st_cpu_maps_parse(st_cpu_maps *m, const char *text);
/* 1 when addr lies in an executable mapping. A return address may equal a
 * mapping's end (a call as its last instruction): hi counts as inside. */
int st_cpu_maps_contains(const st_cpu_maps *m, uint64_t addr);
/* The number of leading frames to keep: frames[0..k) all lie in executable
 * mappings, frames[k] does not. Refreshes m once on a miss (see above). */
size_t st_cpu_chain_cut(st_cpu_maps *m, const uint64_t *frames, size_t n);
void st_cpu_maps_free(st_cpu_maps *m);

/* ---- DWARF unwinding of sampled user stacks (cpu_unwind.c) ------------
 * With elfutils libdw (ST_HAVE_LIBDW), in the process itself, on the
 * thread that drains: a Dwfl of the process's modules
 * (dwfl_linux_proc_report of getpid()), attached with callbacks of its own
 * (dwfl_attach_state: no ptrace), unwinds a sample from its registers and
 * stack copy by the modules' CFI (.eh_frame, .debug_frame). Memory inside
 * the copy is read from it; other addresses from the process's memory with
 * process_vm_readv, which fails where nothing is mapped (the chain ends
 * there). The Dwfl is kept and reported again when maps_gen changes (the
 * caller bumps it when the executable mappings changed).
 *   st_cpu_unwind_open(why, n)  an unwinder, or NULL with why (no libdw in
 *       this build, libdw's own error).
 *   st_cpu_unwind(u, us, tid, maps_gen, frames, max)  frames[0] the ip,
 *       then the return addresses, as a frame-pointer chain gives them; the
 *       number of frames (0 when libdw could not start).
 *   st_cpu_unwind_close(u)  (NULL: nothing).
 *   st_cpu_unwind_missing()  NULL in a build with libdw, else why not (one
 *       line): samples need not copy stacks that nothing would unwind. */
#define ST_CPU_UNWIND_MAX_FRAMES 256
typedef struct st_cpu_unwinder st_cpu_unwinder;
st_cpu_unwinder *st_cpu_unwind_open(char *why, size_t why_size);
size_t st_cpu_unwind(st_cpu_unwinder *u, const st_cpu_ustack *us, pid_t tid, unsigned maps_gen, uint64_t *frames,
                     size_t max_frames);
void st_cpu_unwind_close(st_cpu_unwinder *u);
const char *st_cpu_unwind_missing(void);

/* ---- the signal sampler (cpu_timer.c) -----------------------------------
 * Where perf events are refused, or where samples must carry the GIL state
 * (st_cpu_set_gil_probe, stagetrace.h): per thread a POSIX timer on the
 * thread's CPU clock (timer_create(CLOCK_THREAD_CPUTIME_ID), SIGEV_THREAD_ID
 * to that thread) sends one real-time signal every period of the thread's
 * CPU time; the handler (SA_SIGINFO | SA_RESTART, on the highest real-time
 * signal whose disposition was SIG_DFL, installed once and kept) walks the
 * interrupted context's frame pointers, bounds-checked against the
 * thread's stack (docs/cpu.md, "The signal sampler"), calls the GIL probe
 * when one is set, and writes the sample into the thread's buffer of
 * ST_CPU_TIMER_RING samples: single producer (the handler, on that
 * thread), single consumer (st_cpu_timer_drain); a sample that finds the
 * buffer full is counted in `lost`. A CPU-clock timer fires at the
 * scheduler's tick at most, so the period is at least 1/CONFIG_HZ
 * (st_cpu_timer_tick_hz: /boot/config-RELEASE, else 250 Hz assumed). */
#define ST_CPU_TIMER_MAX_FRAMES 126 /* a sample is then 1 KiB */
#define ST_CPU_TIMER_RING 256
#define ST_CPU_TIMER_ASSUMED_TICK_HZ 250

typedef struct st_cpu_timer_sample {
    int64_t t_ns;       /* CLOCK_MONOTONIC in the handler */
    uint32_t n_frames;
    int32_t gil;        /* as st_cpu_sample.gil */
    uint64_t frames[ST_CPU_TIMER_MAX_FRAMES];
} st_cpu_timer_sample;

typedef struct st_cpu_timer {
    int slot;                  /* the handler's index (the timer's sigev_value) */
    int signo;
    pid_t tid;
    timer_t timer;
    int has_timer;
    int gil;                   /* a GIL probe was set at the open: samples carry its answer */
    clockid_t cpu_clock;       /* the thread's CPU clock, readable from any thread */
    int64_t cpu0_ns;           /* its value at the open */
    uintptr_t stack_lo, stack_hi;
    uint64_t period_ns;        /* the timer's period (the asked one, at least a tick) */
    st_cpu_timer_sample *ring;
    uint32_t ring_n;           /* samples it holds */
    size_t ring_bytes;
    uint64_t head;             /* written by the handler */
    uint64_t tail;             /* written by the consumer */
    uint64_t signals, lost, overruns; /* by the handler: signals taken, samples
                                         lost to a full buffer, timer overruns */
    uint64_t n_samples;        /* drained */
} st_cpu_timer;

/* On the thread to sample: ST_CPU_OK and *out, or a status with reason.
 * period_ns 0: the default; ring_samples 0: ST_CPU_TIMER_RING. */
int st_cpu_timer_open(st_cpu_timer **out, uint64_t period_ns, uint32_t ring_samples, char *reason,
                      size_t reason_size);
/* Passes each sample written since the last drain to sink->on_sample with
 * t as its thread; one consumer at a time. Returns the samples passed. */
long st_cpu_timer_drain(st_cpu_timer *tm, st_cpu_sink *sink, const st_cpu_thread *t);
/* The thread's CPU time since the open (-1 once the thread has ended). */
int64_t st_cpu_timer_cpu_ns(const st_cpu_timer *tm);
/* Deletes the timer (no more samples; the buffer stays to be drained). */
void st_cpu_timer_stop(st_cpu_timer *tm);
/* Stops, waits for a handler still running on the buffer, frees (NULL: nothing). */
void st_cpu_timer_close(st_cpu_timer *tm);
uint64_t st_cpu_timer_period_for(uint64_t asked_ns);
long st_cpu_timer_tick_hz(const char **source); /* source: "boot-config" or "assumed" */
int st_cpu_timer_signal(void);  /* the signal in use, 0 before the first open */
int st_cpu_gil_probe_set(void); /* 1 when st_cpu_set_gil_probe set one */

#endif
