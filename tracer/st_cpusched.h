/* st_cpusched.h: the root level of "why a thread was blocked" (cpu_sched.c;
 * docs/cpu.md, "The sched_switch tracepoint"). Per registered thread, a
 * perf event on the kernel's sched:sched_switch tracepoint samples every
 * switch-out of that thread with its raw record (prev_state: the task
 * state it blocked in) and its whole callchain, kernel part included; the
 * writer gives each sample to its switch-out record as it does a wait
 * stack (cpu_record.c), and names the kernel frames at close from
 * /proc/kallsyms (st_ksyms_*, called by cpu_symbols.c). The tracepoint's id
 * and field offsets are read from tracefs (never mounted by the library:
 * /sys/kernel/tracing, else /sys/kernel/debug/tracing), once per process.
 * Private to the tracer. */
#ifndef ST_CPUSCHED_H
#define ST_CPUSCHED_H

#include <stddef.h>
#include <stdint.h>

#include "st_cpu.h"

/* Opens the calling thread's sched_switch event into t (t->sched and
 * t->wait_stacks set, period 0), with a ring of ring_bytes (halved down to
 * a page when mmap refuses). ST_CPU_OK, or a status with t->reason (tracefs
 * not mounted or unreadable, the event refused by perf_event_paranoid ...). */
int st_cpusched_open(st_cpu_thread *t, size_t ring_bytes);
/* Passes each sched_switch sample of the thread (prev_pid its tid) to
 * sink->on_sched with its kernel frames and state, and lost records to
 * sink->on_lost; the records passed. One consumer per ring. */
long st_cpusched_drain(st_cpu_thread *t, st_cpu_sink *sink);

/* The parsed tracepoint format (tests: st_cpusched_parse_format on a text).
 * Offsets and sizes of the raw record's fields; letters[i] the state letter
 * of bit i of prev_state (0: none), preempt_bit the bit the kernel sets for
 * a preempted task ("R+"). */
typedef struct st_cpusched_format {
    int prev_pid_off, prev_pid_size, prev_state_off, prev_state_size, common_type_off;
    char letters[32];
    uint64_t preempt_bit;
} st_cpusched_format;
/* 0, or -1 when a field the capture needs is missing. */
int st_cpusched_parse_format(const char *text, st_cpusched_format *f);
/* The state letter of a prev_state value: '+' preempted, 'R' runnable (0),
 * else the letter of its lowest set bit ('?' when the format names none). */
int st_cpusched_state(const st_cpusched_format *f, uint64_t prev_state);

/* A kernel address (the upper half of the address space). */
static inline int st_cpusched_is_kernel(uint64_t a) { return (a >> 63) != 0; }

/* The kernel's function symbols from /proc/kallsyms (text symbols only). NULL
 * when it cannot be read or shows no addresses (kptr_restrict, not root):
 * why in reason. */
typedef struct st_ksyms st_ksyms;
st_ksyms *st_ksyms_load(const char *path, char *reason, size_t size);
/* The function holding addr (a return address just past its function is
 * given to that function, as user frames are): its name and addr's offset
 * in it; NULL when none. */
const char *st_ksyms_find(const st_ksyms *k, uint64_t addr, uint64_t *offset);
/* [lo, hi): the kernel text the symbols cover. */
void st_ksyms_span(const st_ksyms *k, uint64_t *lo, uint64_t *hi);
void st_ksyms_free(st_ksyms *k);

/* Why the first open that failed failed ("" while none has): the process's
 * reason, for meta cpu_sched_reason. */
const char *st_cpusched_reason(void);

#endif
