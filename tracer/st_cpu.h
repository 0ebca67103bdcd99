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
 *       callbacks; returns the number of records passed. One consumer per
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
} st_cpu_config;

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
    uint64_t lost;             /* records the kernel lost (sum of PERF_RECORD_LOST) */
    uint64_t n_switches, n_samples, n_other;
    uint64_t n_corrupt;        /* drains that met a malformed record and skipped to data_head */
    int err;                   /* errno of the failure, 0 when open */
    char reason[256];          /* why open failed, or what ring memory was refused */
} st_cpu_thread;

/* st_cpu_switch, and the accounting of a range's on-CPU, preempted and
 * blocked time over a thread's switch records (st_cpu_off_intervals,
 * st_cpu_account), are part of the reader API: stagetrace_reader.h. */

/* One PERF_RECORD_SAMPLE. frames[0] is the sampled ip; frames[1..] are the
 * return addresses of the frame-pointer walk, PERF_CONTEXT_* markers
 * removed. They point into the sink's scratch memory. */
typedef struct st_cpu_sample {
    int64_t t_ns;
    uint32_t pid, tid;
    uint32_t n_frames;
    const uint64_t *frames;
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
long st_cpu_thread_drain(st_cpu_thread *t, st_cpu_sink *sink);
void st_cpu_thread_close(st_cpu_thread *t);

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

#endif
