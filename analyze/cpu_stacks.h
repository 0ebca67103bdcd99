/* cpu_stacks.h: a trace's (or a rank set's) CPU samples aggregated per
 * thread, stage and stack (analyze/cpu_stacks.c; docs/analyze.md, "export"
 * and "report"), with every frame resolved once: what the stack exports
 * (--folded, --pprof) and the report's flame graphs are written from.
 *
 * Over a window [t0, t1): a thread's samples with t0' <= ts < t1, t0' the
 * later of t0 and the thread's capture start (cpu_threads.start_ns), as
 * `analyze cpu` counts them, so the two agree sample for sample. A sample's
 * stage is the reader's (the innermost range open at its time, -1 none).
 * Each sample stands for its thread's period_ns of CPU time.
 *
 * Frames: one per distinct (process, address), a process being a rank of a
 * set (the stack id's part, stack >> 32) or the file. Each frame's name is
 * an_cpu_frame_label's (with offsets): the cpu_symbols name, else
 * "[file+0xOFF]" (the mapping's file's base name and the address's offset
 * in that file), else "[unknown]"; a C++ symbol demangled (demangle.h),
 * raw_name the symbol as recorded. Names are interned: two frames of one
 * function share a name index.
 */
#ifndef AN_CPU_STACKS_H
#define AN_CPU_STACKS_H

#include "analyze.h"

/* A frame's name as the CPU views print it: fr->name when the address has
 * a symbol (demangled: an_demangle); else, with a mapping that has a path, "[base]" (with_offset 0,
 * `analyze cpu`'s libraries) or "[base+0xOFF]" (with_offset 1: OFF the
 * address's offset in the file, lower-case hex; a bracketed path such as
 * [vdso] keeps one pair: "[vdso+0xOFF]"); else "[unknown]". Returns
 * fr->name or buf (which receives the bracketed form, cut to size). */
const char *an_cpu_frame_label(const st_cpu_frame *fr, int with_offset, char *buf, size_t size);

/* A Python-frame sample's frame name, "py::QUALNAME:FILE": its FILE (after
 * the first ':' past the prefix); "" for any other name. */
const char *an_cpu_py_file(const char *name);

typedef struct an_cpu_sframe {
    uint64_t addr;
    uint64_t stack;   /* a stack holding it: names its process for st_reader_cpu_map */
    uint32_t process; /* 0 in a file; a set: the rank's index (stack >> 32) */
    uint32_t name;    /* index of an_cpu_stacks.names */
    uint32_t path;    /* index of an_cpu_stacks.names: the mapping's path, "" without one */
    int64_t map;      /* the cpu_maps id in its process; -1 none */
    uint32_t raw_name; /* index of an_cpu_stacks.names: the symbol as recorded (mangled), else name's */
} an_cpu_sframe;

/* One (thread, stage, stack): its samples in the window and their CPU time. */
typedef struct an_cpu_srow {
    uint32_t thread;  /* reader thread index */
    int32_t stage;    /* -1: no range open */
    uint64_t stack;   /* the reader's stack id */
    uint64_t samples;
    int64_t cpu_ns;   /* samples x the thread's period_ns */
    uint32_t frames_off, n_frames; /* an_cpu_stacks.stack_frames[off ..): frame indices, innermost first */
} an_cpu_srow;

typedef struct an_cpu_stacks {
    an_cpu_srow *rows; /* by thread (the reader's order), then stage (-1 first), then stack id */
    size_t n_rows;
    uint32_t *stack_frames;
    an_cpu_sframe *frames;
    uint32_t n_frames;
    char **names;
    uint32_t n_names;
    uint64_t samples;     /* all rows' */
    int64_t period_ns;    /* the first thread's with status perf (0: none) */
    int mixed_periods;    /* 1: threads' periods differ */
} an_cpu_stacks;

/* Over [t0, t1). 0, or an exit code after the message. */
int an_cpu_stacks_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *out);
/* The same for the Python-frame samples (python_stacks 'frames'), apart:
 * every thread with a cpu_threads row; cpu_ns and period_ns are wall time,
 * 10^9 / meta python_frames_hz per sample (0 without the rate). */
int an_cpu_stacks_compute_python(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *out);
void an_cpu_stacks_free(an_cpu_stacks *s);
/* Both over [t0, t1): the kernel's samples into *native, the Python-frame
 * samples into *py; on an error neither is left to free. */
int an_cpu_stacks_compute_both(an_trace *t, int64_t t0, int64_t t1, an_cpu_stacks *native, an_cpu_stacks *py);

/* The CPU views' check: 0 when the trace has the CPU tables; else the line
 * `CMD: FILE has no CPU capture (record with --trace-cpu / st_options.cpu)`
 * (what: a flag to name, "" none) and AN_EXIT_USAGE, or the reader's line. */
int an_cpu_stacks_require(an_trace *t, const char *cmd, const char *what);

#endif
