/* st_intervals.h: the interval aggregator behind the "profile" lines.
 *
 * The writer thread (online) and `analyze intervals` (offline) feed this
 * module the same event stream (each thread's begin/end events, the step
 * marks) in the same order, so the windows they get are identical.
 *
 * Order contract: events are fed in non-decreasing time; at equal times
 * step marks come before range events. Within one thread, events keep the
 * order the thread recorded them in. st_agg_order() defines that order.
 * Threads interact only at step marks, so feeding, between two marks, each
 * thread's events in turn is the same as the full st_agg_order merge; the
 * writer and st_reader_windows both feed that way.
 *
 * Accounting: a window is the time between the marks of steps k*N and
 * (k+1)*N. In it each thread's wall time is split exactly: every
 * nanosecond goes to the innermost open range's stage (self time), or to
 * "idle" when no range is open. A range crossing a window boundary is split
 * at it. A range is counted in the window where it begins. Threads with no
 * activity in a window are left out of it.
 */
#ifndef ST_INTERVALS_H
#define ST_INTERVALS_H

#include <stddef.h>
#include <stdint.h>

#include "stagetrace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* st_window, st_window_thread and st_window_format are public: stagetrace.h. */

typedef struct st_agg st_agg;

/* every_steps >= 1. cb is called once per finished window, in order; the
 * window and everything it points to are valid only during the call, and
 * the callback must not call back into the aggregator. */
st_agg *st_agg_create(uint32_t every_steps, st_window_fn cb, void *arg);
void st_agg_free(st_agg *agg);

/* With the CPU capture, online: fn fills in each emitted window's on-CPU
 * times (st_window.oncpu_ns, [w->n_threads] into oncpu_ns, and *span_ns)
 * before the callback sees it, and returns 1, or 0 when it has none for
 * that window (the window then goes out without them). */
typedef int (*st_agg_oncpu_fn)(void *arg, const st_window *w, int64_t *oncpu_ns, int64_t *span_ns);
void st_agg_set_oncpu(st_agg *agg, st_agg_oncpu_fn fn, void *arg);

/* Names: must be declared before a thread's or stage's first event. */
int st_agg_thread(st_agg *agg, uint32_t thread, const char *name, const char *role);
int st_agg_stage(st_agg *agg, uint32_t stage, const char *name, st_kind kind);

/* Events, in st_agg_order order. */
void st_agg_begin(st_agg *agg, uint32_t thread, uint32_t stage, int64_t ts_ns);
void st_agg_end(st_agg *agg, uint32_t thread, int64_t ts_ns);
void st_agg_step(st_agg *agg, uint64_t step, int64_t ts_ns, uint64_t tokens);

/* Event type ranks for ordering at equal timestamps. */
enum { ST_AGG_STEP = 0, ST_AGG_RANGE = 1 };
/* <0, 0, >0 like strcmp: by time, then rank, then thread. */
static inline int st_agg_order(int64_t ts_a, int rank_a, uint32_t thread_a,
                               int64_t ts_b, int rank_b, uint32_t thread_b)
{
    if (ts_a != ts_b) return ts_a < ts_b ? -1 : 1;
    if (rank_a != rank_b) return rank_a < rank_b ? -1 : 1;
    if (thread_a != thread_b) return thread_a < thread_b ? -1 : 1;
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif
