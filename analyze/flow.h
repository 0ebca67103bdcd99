/* flow.h: items followed through the pipeline, from a trace's flow records
 * (st_flow_out / st_flow_in; docs/analyze.md, "flow", defines every rule).
 *
 * an_flow_load reads the flow records and the outermost (depth 0) ranges of
 * every thread, pairs each id's out with its in (a handoff), chains
 * handoffs into items (an in on a thread is continued by that thread's next
 * out), and an_flow_critical_path walks one step's critical path back from
 * its end. `analyze flow`, `export --chrome` (arrows) and `report` use it;
 * flow_tables.c prints `flow`'s tables over it.
 */
#ifndef AN_FLOW_H
#define AN_FLOW_H

#include <stdint.h>
#include <stdio.h>

#include "analyze.h"

typedef struct an_flow_rec {
    int64_t ts_ns;
    uint64_t id;
    uint32_t thread;   /* reader's thread index */
    uint32_t dir;      /* ST_FLOW_OUT or ST_FLOW_IN */
    int64_t handoff;   /* index in handoffs, -1 when the id does not pair */
} an_flow_rec;

typedef struct an_handoff {
    uint64_t out_rec, in_rec; /* indices in recs */
    int64_t next, prev;       /* the item's next and previous handoff, -1 none */
    int continued_unpaired;   /* the in's thread went on with an out that did not pair */
} an_handoff;

typedef struct an_flow_range {
    int64_t start_ns, end_ns;
    uint32_t stage;
} an_flow_range;

typedef struct an_flow {
    an_trace *trace;
    uint32_t n_threads;
    an_flow_rec *recs;        /* per thread (by index), in recorded order */
    uint64_t n_recs;
    uint64_t *thread_recs;    /* [n_threads + 1]: thread i's records are recs[a[i] .. a[i+1]) */
    an_handoff *handoffs;
    uint64_t n_handoffs;
    int64_t *item_first;      /* the first handoff of each item */
    uint64_t n_items;
    an_flow_range *ranges;    /* depth-0 ranges per thread, by start */
    uint64_t *thread_ranges;  /* [n_threads + 1] */
    uint8_t *thread_sends;    /* [n_threads]: the thread records an out that pairs */
    /* ids that did not pair */
    uint64_t n_ids, out_only, in_only, repeated, in_before_out;
} an_flow;

/* AN_EXIT_OK, or an exit code with the message printed. */
int an_flow_load(an_flow *f, an_trace *t);
void an_flow_free(an_flow *f);

/* Item facts: last handoff, number of handoffs, and whether it is in flight:
 * its last in is on a thread that sends items on (records an out that pairs),
 * or was continued by an out that did not pair. */
int64_t an_flow_item_last(const an_flow *f, uint64_t item, uint32_t *n_hops, int *in_flight);

/* One piece of a step's critical path: [start, end) on a thread, in a stage
 * (-1: no range open there). */
typedef struct an_path_seg {
    uint32_t thread;
    int64_t stage;
    int64_t start_ns, end_ns;
} an_path_seg;

/* The critical path of the step that ends at mark index `mark` (>= 1): the
 * segments from the previous mark to this one, latest first, merged where
 * consecutive pieces share thread and stage. *segs is malloc'd (the caller
 * frees it); *n 0 when there is nothing to walk. AN_EXIT_OK or AN_EXIT_FAIL. */
int an_flow_critical_path(const an_flow *f, uint32_t mark, an_path_seg **segs, uint64_t *n);

/* ---- the tables of `analyze flow` (flow_tables.c) ---- */

/* Its tables (counts, end-to-end latency, queue residence, time in each
 * role, the latency breakdown by stage, critical paths) over the items
 * whose first out is in [t0_ns, t1_ns) and the steps inside it, in format
 * fmt on `to`. AN_EXIT_OK, or an exit code with the message printed. */
int an_flow_tables(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_format fmt, FILE *to);
/* The same as text over the whole trace; nothing when the trace has no flow
 * records. The report's "Item flow" section. */
int an_flow_text(an_trace *t, FILE *to);

#endif
