/* cpu.h: what the CPU capture says per thread and stage (analyze/cpu.c;
 * docs/analyze.md, "cpu"): each thread's analysed time split by the stage
 * whose self time it is (the innermost range open), each piece's on-CPU,
 * preempted and blocked time from the thread's switch records
 * (st_cpu_account), the samples attributed to each stage and their
 * functions (self: the leaf frame; inclusive: anywhere in the stack, once
 * per sample), the libraries of those samples (the functions' mapping
 * files, self and inclusive), and the blocked time split by why the thread
 * was blocked (cpu_blocks). Apart, every OS thread's schedstat use per
 * window (cpu_windows: an_cpu_windows_compute). `analyze cpu` prints them
 * (cmd_cpu.c).
 */
#ifndef AN_CPU_H
#define AN_CPU_H

#include "analyze.h"

/* A function: its name from cpu_symbols ("[lib.so]" for an address with no
 * symbol, "[unknown]" outside every mapping) and its mapping's file. */
typedef struct an_cpu_name {
    char *name, *path;
} an_cpu_name;

typedef struct an_cpu_fn {
    uint32_t name; /* an index of an_cpu_result.names */
    uint64_t self, incl;
    /* with lines (an_cpu_compute_lines): the source line, an index of
     * an_cpu_result.srcs + 1 (0: none), holding most of its self and of its
     * inclusive samples (docs/analyze.md, "cpu", --lines) */
    uint32_t self_src, incl_src;
} an_cpu_fn;

/* Samples of a function at one of its source lines (internal to cpu.c). */
typedef struct an_cpu_fnline {
    uint32_t name, src; /* src: an index of an_cpu_result.srcs + 1 */
    uint64_t self, incl;
} an_cpu_fnline;

/* Blocked time of a cell with one reason: its overlap with the thread's
 * blocked off-CPU intervals that have that reason, and how many of those
 * intervals overlap the cell's self time. A reason is the cpu_blocks label
 * with, where the trace has the sched_switch tracepoint's samples
 * (cpu_block_reasons 'proc+sched'), the task state and the kernel function
 * of the interval's switch-out (docs/analyze.md, "cpu"). */
typedef struct an_cpu_reason_ns {
    uint32_t reason; /* an index of an_cpu_result.reasons */
    int state;       /* the task state letter ('S', 'D', ...), 0 none */
    uint32_t kfn;    /* the kernel function, an index of an_cpu_result.kfns (0: "", none) */
    int64_t ns;
    uint64_t count;
    size_t last_interval; /* the interval last counted, + 1 (internal) */
} an_cpu_reason_ns;

/* A library (a mapping file) of a cell's samples: self, the samples whose
 * leaf frame is in it; incl, those with a frame anywhere in it (once per
 * sample). */
typedef struct an_cpu_lib {
    uint32_t lib; /* an index of an_cpu_result.libs */
    uint64_t self, incl;
} an_cpu_lib;

/* The reason of a blocked interval without a cpu_blocks row: reasons[0]. */
#define AN_CPU_REASON_UNEXAMINED "(short/unexamined)"

/* A thread and stage: the stage's self time on the thread in the analysed
 * time, split on + preempted + blocked = wall exactly; the samples of the
 * stage; its functions (unsorted). stage -1: no range open. */
typedef struct an_cpu_cell {
    int32_t stage;
    int64_t wall_ns, on_ns, preempted_ns, blocked_ns;
    uint64_t samples;
    an_cpu_fn *fns;
    uint32_t n_fns, cap_fns;
    an_cpu_reason_ns *reasons; /* unsorted; their ns add up to blocked_ns */
    uint32_t n_reasons, cap_reasons;
    an_cpu_lib *libs; /* unsorted */
    uint32_t n_libs, cap_libs;
    an_cpu_fnline *fnlines; /* with lines only */
    uint32_t n_fnlines, cap_fnlines;
} an_cpu_cell;

typedef struct an_cpu_thread {
    uint32_t thread;   /* index in the reader's threads */
    st_cpu_thread_info info;
    int64_t t0_ns, t1_ns; /* its analysed time: the window from its capture's start */
    uint64_t lost;     /* records lost within it */
    an_cpu_cell *cells; /* [stage + 1], 0 .. n_stages */
    an_cpu_cell total; /* the sums of its cells (no functions) */
    int has_samples;   /* status perf or timer (the signal sampler): samples counted */
    int has_switches;  /* status perf: switch records, so on/preempted/blocked are known; without
                          them (timer) every cell's on_ns, preempted_ns and blocked_ns are -1 */
    /* The Python-frame samples (st_cpu_sample_add; docs/analyze.md, "cpu",
     * "Python stacks"), apart from the kernel's: [stage + 1] as cells, only
     * samples and fns (self: the innermost Python frame; inclusive: a
     * function anywhere in the stack, once per sample) filled; py_samples
     * their sum. Each stands for 1 / python_frames_hz s of wall time. */
    an_cpu_cell *py_cells;
    uint64_t py_samples;
} an_cpu_thread;

typedef struct an_cpu_result {
    an_cpu_thread *threads; /* the threads with a cpu_threads row, in the reader's order */
    uint32_t n_threads, n_stages;
    an_cpu_name *names;
    uint32_t n_names, cap_names;
    /* block reasons, "SYSCALL:WCHAN" (docs/analyze.md, "cpu"); [0] AN_CPU_REASON_UNEXAMINED */
    char **reasons;
    uint32_t n_reasons, cap_reasons_;
    char **kfns; /* kernel functions of blocks; [0] "" (none) */
    uint32_t n_kfns, cap_kfns_;
    uint32_t max_cell_reasons; /* the most reasons of one cell (room for an_cpu_reasons_sorted) */
    char **libs; /* mapping files ("[unknown]" outside every mapping) */
    uint32_t n_libs, cap_libs_;
    uint32_t *name_lib; /* per name: its lib + 1, 0 not yet (internal) */
    uint32_t cap_name_lib_;
    int lines; /* an_cpu_compute_lines: the functions' source lines */
    char **srcs; /* "FILE:LINE" */
    uint32_t n_srcs, cap_srcs_;
} an_cpu_result;

/* What a cpu_threads status says a thread's records hold: switch records
 * (status perf, so its on/preempted/blocked split is known), samples
 * (perf, or timer: the signal sampler). */
int an_cpu_status_has_switches(const st_cpu_thread_info *info);
int an_cpu_status_has_samples(const st_cpu_thread_info *info);

/* Over [t0, t1) (the window; the trace's span for all of it). 0, or an exit
 * code after the message. */
int an_cpu_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out);
/* The same, and each function's source line (an_cpu_fn self_src,
 * incl_src), from the trace's cpu_lines. */
int an_cpu_compute_lines(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out);
void an_cpu_free(an_cpu_result *res);

/* A cell's functions, the top n by self samples (then inclusive, then name)
 * or by inclusive samples (then self, then name), into out (room for n);
 * returns how many. */
uint32_t an_cpu_top(const an_cpu_result *res, const an_cpu_cell *c, int by_inclusive, uint32_t n,
                    const an_cpu_fn **out);

/* A cell's block reasons by time (then name, state, kernel function), into
 * out (room for c->n_reasons); returns how many. */
uint32_t an_cpu_reasons_sorted(const an_cpu_result *res, const an_cpu_cell *c, const an_cpu_reason_ns **out);
/* A cell's libraries, the top n by self samples (then inclusive, then
 * name), into out (room for n); returns how many. */
uint32_t an_cpu_top_libs(const an_cpu_result *res, const an_cpu_cell *c, uint32_t n, const an_cpu_lib **out);

/* ---- every OS thread per window (cpu_windows) ---- */

/* A thread of the process (of a rank's, in a set), registered or not, over
 * the selected windows: name the reader's thread name for a registered one,
 * else its comm ("r<rank>/comm" in a set); wall_ns the length of its
 * process's selected windows (the time its shares are of). */
typedef struct an_cpu_os_thread {
    char *name;
    int64_t os_tid, thread; /* thread: the reader's id, -1 unregistered */
    uint32_t part;
    int64_t wall_ns, oncpu_ns, runq_ns, slices;
    uint32_t n_windows; /* the selected windows it has a row in */
} an_cpu_os_thread;

typedef struct an_cpu_window {
    int64_t window, step, t0_ns, t1_ns;
    uint32_t part, os_thread; /* an index of an_cpu_windows.threads */
    int64_t oncpu_ns, runq_ns, slices;
} an_cpu_window;

typedef struct an_cpu_windows {
    an_cpu_os_thread *threads; /* by oncpu_ns, descending, then name */
    uint32_t n_threads;
    an_cpu_window *rows; /* by part, window, then oncpu_ns descending, os_tid */
    size_t n_rows;
    uint32_t n_windows; /* selected windows, all parts */
} an_cpu_windows;

/* The rows of the windows whose midpoint lies in [t0, t1) (all of them
 * when whole). 0, or an exit code after the message. */
int an_cpu_windows_compute(an_trace *t, int whole, int64_t t0, int64_t t1, an_cpu_windows *out);
void an_cpu_windows_free(an_cpu_windows *w);

#endif
