/* queues.h: counter samples of one counter, every thread's merged in time
 * order (queues.c). The model's queue-depth statistics are built on it, and
 * `report` draws the queue depth over time from it.
 */
#ifndef ANALYZE_QUEUES_H
#define ANALYZE_QUEUES_H

#include "analyze.h"

typedef struct an_counter_merge an_counter_merge;
int an_counter_merge_open(an_counter_merge **out, an_trace *t, uint32_t counter);
int an_counter_merge_next(an_counter_merge *m, int64_t *ts_ns, double *value); /* 1, 0 done, <0 error */
void an_counter_merge_close(an_counter_merge *m);

#endif
