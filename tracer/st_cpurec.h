/* st_cpurec.h: what the writer does with the CPU capture (cpu_record.c):
 * the per-thread perf events opened at st_thread_register (opt.cpu), their
 * rings drained on each writer pass, the records encoded into cpu_chunks
 * with each sample's stage, the stacks interned into cpu_stacks, and the
 * cpu_threads rows and cpu_* meta keys (docs/trace-format.md, "CPU
 * capture"). Private to the tracer; everything here runs on the writer
 * thread except st_cpurec_open, which runs on the registering thread.
 *
 * A sample's stage: the writer knows each thread's open ranges as it
 * encodes its events, but a sample and the events around it come through
 * two rings. Records wait in a per-thread queue until an event later than
 * them is encoded (they are then attributed to the stage open just before
 * that event) or until they are ST_CPUREC_GRACE_NS old (attributed to the
 * stage open now: no event can still be on its way). A sample that arrives
 * after events later than it were encoded is looked up in a short history
 * of the thread's last stage changes, and stored as "unknown" when that
 * history no longer reaches back to it. */
#ifndef ST_CPUREC_H
#define ST_CPUREC_H

#include <stdint.h>

#include "stagetrace.h"
#include "st_cpu.h"
#include "st_intervals.h"
#include "st_store.h"

/* Records wait this long for the events around them (the same lag as the
 * interval aggregator's, writer.c). */
#define ST_CPUREC_GRACE_NS 100000000LL

typedef struct st_cpurec st_cpurec;
typedef struct st_cpurec_thread st_cpurec_thread;

/* A thread's status when its perf event was refused but the signal
 * sampler samples it (cpu_threads.status 'timer'). */
#define ST_CPU_TIMER_MODE 1

/* On the registering thread: opens its event (period opt->cpu_period_ns,
 * ring st_cpu_ring_bytes_for(0)), and the signal sampler where the event
 * is refused or a GIL probe is set (ct->timer; the event then records
 * switches only), and the wait-stack event where the kernel allows it
 * (ct->waits; closed, with its reason, when refused). Never fails: the
 * status (an st_cpu_status, or ST_CPU_TIMER_MODE) and the reason stay in
 * the returned object (NULL only without memory). *start_ns: the trace
 * time of the open. */
st_cpu_thread *st_cpurec_open(const st_options *opt, int *status, int64_t *start_ns);
/* Closes and frees what st_cpurec_open returned (NULL: nothing). */
void st_cpurec_discard(st_cpu_thread *ct);

/* Creates the cpu tables and the first meta keys in the open transaction. */
st_cpurec *st_cpurec_create(st_trace *t, st_store *store);
/* Takes ownership of ct (may be NULL: no memory at registration). */
st_cpurec_thread *st_cpurec_thread_add(st_cpurec *r, uint32_t id, int64_t os_tid, st_cpu_thread *ct,
                                       int status, int64_t start_ns);
/* Moves what the kernel wrote since the last drain into the thread's queue. */
void st_cpurec_drain(st_cpurec *r, st_cpurec_thread *c);
/* The thread's event at ts_ns was encoded: top_before and top_after are its
 * innermost open stage before and after it (ST_CPU_NO_STAGE: none). */
void st_cpurec_event(st_cpurec *r, st_cpurec_thread *c, int64_t ts_ns, uint32_t top_before,
                     uint32_t top_after);
/* Encodes the queued records older than horizon_ns (INT64_MAX: all), top
 * being the stage open now. */
void st_cpurec_emit(st_cpurec *r, st_cpurec_thread *c, int64_t horizon_ns, uint32_t top);
/* The thread unregistered (its ring was drained to the end): last drain,
 * everything encoded, the event closed. */
void st_cpurec_retire(st_cpurec *r, st_cpurec_thread *c, uint32_t top);
/* The writer stored the step mark `step`: with profile_interval N > 0, a
 * step that is a multiple of N ends a window, and every thread's schedstat
 * is read into cpu_windows (st_cpurec_commit reads them at each commit
 * when N is 0, and at close in both cases). */
void st_cpurec_step(st_cpurec *r, uint64_t step);
/* Stores the thread's current chunk (at every commit). */
void st_cpurec_flush(st_cpurec *r, st_cpurec_thread *c);
/* cpu_threads rows and meta keys that changed. final: the events are closed
 * first, and the mappings and symbols stored (cpu_symbols.c); also at an
 * interrupted flush (mappings and symbols, events left open). */
void st_cpurec_commit(st_cpurec *r, int final, int interrupted);
void st_cpurec_free(st_cpurec *r);
/* The online profile lines get each thread's on-CPU share (st_window's
 * oncpu_ns) from the schedstat reads stored at their closing step marks
 * (cpu_oncpu.c). */
void st_cpurec_attach_agg(st_cpurec *r, st_agg *agg);

/* ---- on-CPU per profile window (cpu_oncpu.c) ----
 * A queue of the schedstat reads stored at step marks: begin (a read at
 * the mark of `step`, -1: not at a mark, not queued, span_ns the time since
 * the read before), a row per cpu_windows row stored (thread -1: not
 * registered), end; st_oncpu_window is the aggregator's st_agg_oncpu_fn. */
typedef struct st_oncpu_queue st_oncpu_queue;
st_oncpu_queue *st_oncpu_create(void);
void st_oncpu_free(st_oncpu_queue *q);
void st_oncpu_begin(st_oncpu_queue *q, int64_t step, int64_t span_ns);
void st_oncpu_row(st_oncpu_queue *q, int64_t thread, int64_t oncpu_ns);
void st_oncpu_end(st_oncpu_queue *q);
int st_oncpu_window(void *q, const st_window *w, int64_t *oncpu_ns, int64_t *span_ns);

/* ---- mappings and symbols (cpu_symbols.c) ----
 * Stores cpu_maps (the process's executable mappings, with build-ids) and
 * cpu_symbols (one row per distinct frame address, its name from the ELF
 * symbol tables) in the open transaction, replacing earlier rows. addrs
 * may hold zeros (an open-addressed set), which are skipped. */
typedef struct st_cpusym st_cpusym; /* caches each file's symbol table */
void st_cpusym_store(st_cpusym **cache, st_store *store, const uint64_t *addrs, size_t n_addrs);
void st_cpusym_free(st_cpusym *cache);

/* ---- source lines and inline chains (cpu_lines.c) ----
 * Stores cpu_lines (docs/trace-format.md, "cpu_lines") for the frame
 * addresses of addrs (an open-addressed set, zeros skipped), replacing
 * earlier rows, and the meta keys cpu_lines, cpu_lines_reason,
 * cpu_lines_frames, cpu_lines_cut, cpu_lines_ns. An address in the set ips (the stacks'
 * depth-0 frames, same layout) is looked up as is, any other (a return
 * address) at the byte before it. With libdw (ST_HAVE_LIBDW) the lookups
 * stop once budget_ns have passed (the addresses left are counted in
 * cpu_lines_cut); without it, meta says cpu_lines none and the table
 * stays empty. */
#define ST_CPU_LINES_BUDGET_NS 2000000000LL
void st_cpulines_store(st_store *store, const uint64_t *addrs, size_t addrs_cap, const uint64_t *ips, size_t ips_cap,
                       int64_t budget_ns);

/* ---- the perf map (cpu_perfmap.c) ----
 * /tmp/perf-PID.map, "START SIZE NAME" per line (a JIT's, or CPython's perf
 * trampoline's "py::func:file"), names for frames in memory that has no
 * file. st_perfmap_load reads it only when it is a regular file owned by
 * this user and not older than the process (else m->refused says why, and
 * it returns 1); 0 when read or absent (m->found says which); -1 out of
 * memory. At most ST_PERFMAP_MAX_BYTES are read, a line longer than
 * ST_PERFMAP_LINE_MAX bytes and one that does not parse (hex start, hex
 * size > 0 not wrapping, a name) is counted in n_bad and passed over;
 * st_perfmap_parse does the same for a text in memory (appending). */
#define ST_PERFMAP_LINE_MAX 4096
#define ST_PERFMAP_MAX_BYTES (64u << 20) /* 64 MiB */
#define ST_PERFMAP_LOOK_BACK 64
typedef struct st_perfmap_entry {
    uint64_t start, size;
    uint32_t seq; /* the line's index: of overlapping entries the later wins */
    char *name;   /* control bytes replaced by '?' */
} st_perfmap_entry;
typedef struct st_perfmap {
    st_perfmap_entry *v; /* by start */
    size_t n, cap;
    uint64_t max_size;
    size_t n_lines, n_bad;
    int found;
    char refused[128];
} st_perfmap;
int st_perfmap_load(st_perfmap *m, const char *path);
int st_perfmap_parse(st_perfmap *m, const char *text, size_t len);
/* The entry holding addr (start <= addr < start + size), or NULL. */
const st_perfmap_entry *st_perfmap_find(const st_perfmap *m, uint64_t addr);
void st_perfmap_free(st_perfmap *m);

/* ---- /proc readers (cpu_proc.c) ----
 * Why a thread is blocked: a block still open this long when the writer
 * drains the thread's ring (its last switch record a blocked switch-out)
 * has /proc/self/task/TID/syscall and wchan read once (1.3-30 us a read);
 * the reason is stored in cpu_blocks with the block's switch-out time. */
#define ST_CPUREC_BLOCK_MIN_NS 1000000LL

typedef struct st_cpu_block {
    long nr;            /* the system call it sleeps in; -1: none (in the kernel outside one) */
    uint64_t arg[2];    /* its first two arguments (futex: the address and the op; ioctl: fd, request) */
    char wchan[64];     /* the kernel function it sleeps in; "" when the kernel does not say */
} st_cpu_block;

/* The name of a system call number of this architecture ("other" when not
 * among the blocking ones it knows; "" for -1). */
const char *st_cpuproc_syscall_name(long nr);
/* Parses a /proc/.../syscall text: 1 and *b filled, 0 when it says the
 * thread is running, -1 when malformed. */
int st_cpuproc_parse_syscall(const char *text, st_cpu_block *b);
/* Reads the thread's syscall and wchan files: 1 with *b, 0 when it is
 * running, -1 when they cannot be read (the thread is gone). */
int st_cpuproc_block(int64_t os_tid, st_cpu_block *b);

/* Each thread's CPU use per window: /proc/self/task/TID/schedstat, the
 * scheduler's own exact sums (on-CPU ns, run-queue wait ns, timeslices),
 * read for every thread of the process at each window's end, through a
 * descriptor kept open per thread (the file refers to that thread, not to
 * a later one given the same id). open: the fd, or -1; parse and read: 0
 * and v filled, or -1 (read: the thread ended). */
int st_cpuproc_parse_schedstat(const char *text, uint64_t v[3]);
int st_cpuproc_schedstat_open(int64_t os_tid);
int st_cpuproc_schedstat_read(int fd, uint64_t v[3]);
/* The thread's name (/proc/self/task/TID/comm, at most 15 bytes); 0, or -1
 * with name "". */
int st_cpuproc_comm(int64_t os_tid, char *name, size_t size);
/* The process's threads now (/proc/self/task) into *tids (grown as
 * needed); their number, or -1 when the directory cannot be read. */
long st_cpuproc_tasks(int64_t **tids, size_t *cap);

/* ---- Python-frame samples (cpu_pysample.c; stagetrace.h, st_cpu_sample_add) ----
 * The queue between the callers of st_cpu_sample_add and the writer:
 * st_writer_start opens it for its trace (before the writer thread runs,
 * so a sample taken as soon as st_open returns waits), writer_free closes
 * it (the samples still queued are dropped). On each pass the writer takes the
 * queued samples (st_pyq_take swaps the batch's buffer with the queue's)
 * and decodes them one by one (st_pyq_next: 1 and *s, its frames' names
 * pointing into the batch, or 0 at the end); lost is the count of samples
 * that found the queue full since the open. st_cpurec_pysamples does it
 * (cpu_record.c), placing each sample in its thread's records. */
#define ST_PYQ_NAME_MAX 512
typedef struct st_pyq_frame {
    const char *qualname, *file; /* not NUL-terminated */
    uint16_t qualname_len, file_len;
    uint32_t line;
} st_pyq_frame;
typedef struct st_pyq_sample {
    int64_t ts_ns;
    uint32_t thread, n_frames;
    st_pyq_frame frames[ST_CPU_SAMPLE_MAX_FRAMES];
} st_pyq_sample;
typedef struct st_pyq_batch {
    uint8_t *buf;
    size_t len, cap;
    uint32_t n;
    uint64_t lost;
} st_pyq_batch;
void st_pyq_open(const st_trace *t);
void st_pyq_close(const st_trace *t);
void st_pyq_take(st_pyq_batch *b);
int st_pyq_next(st_pyq_batch *b, size_t *off, st_pyq_sample *s);
void st_pyq_batch_free(st_pyq_batch *b);
/* The Python-frame samples queued for the registered threads, each put in
 * time order among its thread's records waiting for their stage (as the
 * signal sampler's are), its frames interned as synthetic addresses
 * (ST_CPU_PY_ADDR_BASE + name id << 20 + line) that cpu_symbols names at
 * close. A sample for a thread that has retired, or that the writer does
 * not know yet, is counted as lost. */
#define ST_CPU_PY_ADDR_BASE 0x5079000000000000ull /* "Py": above user space, below the kernel's */
#define ST_CPU_PY_ADDR_SPAN (1ull << 48)
void st_cpurec_pysamples(st_cpurec *r);

#endif
