/* cpu.h: what the CPU capture says per thread and stage (analyze/cpu.c;
 * docs/analyze.md, "cpu"): each thread's analysed time split by the stage
 * whose self time it is (the innermost range open), each piece's on-CPU,
 * preempted and blocked time from the thread's switch records
 * (st_cpu_account), the samples attributed to each stage and their
 * functions (self: the leaf frame; inclusive: anywhere in the stack, once
 * per sample). `analyze cpu` prints it (cmd_cpu.c).
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
} an_cpu_fn;

/* A thread and stage: the stage's self time on the thread in the analysed
 * time, split on + preempted + blocked = wall exactly; the samples of the
 * stage; its functions (unsorted). stage -1: no range open. */
typedef struct an_cpu_cell {
    int32_t stage;
    int64_t wall_ns, on_ns, preempted_ns, blocked_ns;
    uint64_t samples;
    an_cpu_fn *fns;
    uint32_t n_fns, cap_fns;
} an_cpu_cell;

typedef struct an_cpu_thread {
    uint32_t thread;   /* index in the reader's threads */
    st_cpu_thread_info info;
    int64_t t0_ns, t1_ns; /* its analysed time: the window from its capture's start */
    uint64_t lost;     /* records lost within it */
    an_cpu_cell *cells; /* [stage + 1], 0 .. n_stages */
    an_cpu_cell total; /* the sums of its cells (no functions) */
} an_cpu_thread;

typedef struct an_cpu_result {
    an_cpu_thread *threads; /* the threads with a cpu_threads row, in the reader's order */
    uint32_t n_threads, n_stages;
    an_cpu_name *names;
    uint32_t n_names, cap_names;
} an_cpu_result;

/* The name `analyze cpu` gives a frame: its symbol (cpu_symbols), else
 * "[file]" (the base name of its mapping's path), else "[unknown]"; built
 * in buf (size bytes) when it is not the symbol. */
const char *an_cpu_frame_label(const st_cpu_frame *fr, char *buf, size_t size);

/* Over [t0, t1) (the window; the trace's span for all of it). 0, or an exit
 * code after the message. */
int an_cpu_compute(an_trace *t, int64_t t0, int64_t t1, an_cpu_result *out);
void an_cpu_free(an_cpu_result *res);

/* A cell's functions, the top n by self samples (then inclusive, then name)
 * or by inclusive samples (then self, then name), into out (room for n);
 * returns how many. */
uint32_t an_cpu_top(const an_cpu_result *res, const an_cpu_cell *c, int by_inclusive, uint32_t n,
                    const an_cpu_fn **out);

#endif
