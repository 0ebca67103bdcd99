/* stragglers.h: which rank holds the others up, over a rank set
 * (stragglers.c; docs/analyze.md, "stragglers"): the collectives matched
 * into instances, the rank each instance waits for, and per role and stage
 * the slowest rank against the median. `stragglers` prints its tables from
 * it; `bottleneck` and `report` take the collectives table and each rank's
 * busy and wait time (an_stragglers_compute).
 */
#ifndef ANALYZE_STRAGGLERS_H
#define ANALYZE_STRAGGLERS_H

#include <stddef.h>
#include <stdint.h>

#include "analyze.h"

/* ---- for bottleneck and the report: the collectives table and each rank's busy and wait time ---- */
/* Per collective stage: the rows of `stragglers`' collectives table. */
typedef struct an_straggler {
    const char *stage;          /* the set reader's */
    uint64_t instances;
    uint32_t ranks;             /* ranks with the stage */
    int last_rank;              /* the rank last most often (ties: the lowest index) */
    uint32_t times_last;
    int every;                  /* last in every instance */
    int64_t mean_wait_ns, max_wait_ns;
} an_straggler;
/* Per rank present: its threads' top-level ranges over the whole set. */
typedef struct an_rank_load {
    int rank;
    uint32_t threads;
    int64_t busy_ns;            /* work, sync and copy */
    int64_t wait_ns;            /* wait_input, wait_output and comm (the wait inside a collective) */
    int64_t total_ns;           /* threads x the set's span */
} an_rank_load;
typedef struct an_stragglers {
    an_straggler *coll;
    uint32_t n_coll;
    an_rank_load *ranks;
    uint32_t n_ranks;
} an_stragglers;
/* t a rank set. Errors printed; exit code. */
int an_stragglers_compute(an_trace *t, an_stragglers *s);
void an_stragglers_free(an_stragglers *s);

/* ---- for `stragglers`' tables ---------------------------------------------------------------- */

/* One range of a comm stage: one rank's part of a collective instance. */
typedef struct an_stragglers_arrival {
    uint32_t stage, rank_ix;
    uint32_t thread; /* the set's thread index: ties of start in one rank */
    uint64_t instance; /* k: the range's index among its rank's ranges of the stage, by start */
    int64_t start_ns;
    int64_t end_ns;    /* start + duration (the clock alignment's points: align.c) */
} an_stragglers_arrival;

/* NCCL's collectives from GPU activity alone (docs/analyze.md, "stragglers"): a kernel whose
 * name (mangled or not) begins ncclDevKernel_ or ncclKernel_ is one rank's part of a collective
 * of its operation (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, SendRecv, AllToAll;
 * any other: "other"), as if a range of the comm stage "nccl:<operation>" on the GPU.
 *   an_nccl_op(name)  the operation's index, AN_NCCL_OTHER for another NCCL kernel, -1 for a
 *                     kernel that is not NCCL's.
 *   an_stragglers_stage_name(r, stage)  an arrival's stage name: the reader's for a stage id
 *                     below st_reader_n_stages(r), else "nccl:<operation>" (stage ids
 *                     n_stages + op).
 *   an_stragglers_add_gpu(t, rank_of, arr, n, cap)  appends the set's NCCL kernels to arr
 *                     (rank_of[part] the part's meta rank; a kernel's device names its rank),
 *                     times on the set's clock, the launching thread (UINT32_MAX unknown). An
 *                     exit code (printed). */
enum { AN_NCCL_OTHER = 7, AN_NCCL_OPS = 8 };
int an_nccl_op(const char *name);
const char *an_stragglers_stage_name(const st_reader *r, uint32_t stage);
struct an_stragglers_arrival;
int an_stragglers_add_gpu(an_trace *t, const int *rank_of, struct an_stragglers_arrival **arr, size_t *n,
                          size_t *cap);

/* The matching: each arrival's instance (per stage and rank, in start
 * order; ties of start by thread), then arr sorted so that one instance
 * (stage, k) is one run of the array, its arrivals in rank order. n may be
 * 0 (arr NULL). The same for any clock map that keeps each rank's order. */
void an_stragglers_match(an_stragglers_arrival *arr, size_t n);

/* Per role and stage: its time (ranges of every depth) on each rank. */
typedef struct an_stragglers_total {
    uint32_t role, stage;
    int64_t *ns; /* [rank index] */
} an_stragglers_total;

/* A rank's own step marks on rank 0's clock, for the instances table's `step`. */
typedef struct an_stragglers_marks {
    int64_t *ts_ns;
    uint64_t *step;
    uint32_t n;
} an_stragglers_marks;

/* What `stragglers` reads of a set: rank_of[rank index] the meta rank;
 * roles distinct (the set reader's names); arr every comm range, matched and
 * sorted so that one instance (stage, k) is one run of the array, its
 * arrivals in rank order; tot per role and stage; marks [n_ranks]. */
typedef struct an_stragglers_data {
    uint32_t n_ranks;
    int *rank_of;
    const char **roles;
    uint32_t n_roles;
    an_stragglers_arrival *arr;
    size_t n_arr;
    an_stragglers_total *tot;
    uint32_t n_tot;
    an_stragglers_marks *marks;
} an_stragglers_data;
/* t a rank set. Errors printed; exit code (d freed on an error). */
int an_stragglers_read(an_trace *t, an_stragglers_data *d);
void an_stragglers_data_free(an_stragglers_data *d);

/* One collective stage's figures: the rows of the collectives table. top is
 * a rank index (the rank last most often; ties: the lowest index). */
typedef struct an_stragglers_coll {
    uint64_t instances;
    uint32_t ranks_with, top, times_last;
    int every;
    int64_t mean_wait_ns, max_wait_ns;
} an_stragglers_coll;

/* One instance that two or more ranks share: its arrivals arr[first, first + m), the one that
 * begins last, the median start, the others' mean and longest wait for it. */
typedef struct an_stragglers_instance {
    const an_stragglers_arrival *first, *last;
    uint32_t m;
    int64_t median_start_ns, mean_wait_ns, max_wait_ns;
} an_stragglers_instance;

typedef void (*an_stragglers_instance_fn)(void *arg, uint32_t stage, const an_stragglers_instance *in);

/* The aggregation, for the command's tables and for the report alike: the stage whose arrivals
 * begin at arr[i] (matched and sorted: an_stragglers_read), its instances handed to each_instance
 * (when not NULL) in order, its figures in *out. last_count and starts hold n_ranks entries
 * (scratch: an instance has at most one arrival per rank). Returns the index past the stage. */
size_t an_stragglers_aggregate(const an_stragglers_arrival *arr, size_t n_arr, size_t i, uint32_t n_ranks,
                               uint32_t *last_count, int64_t *starts, an_stragglers_coll *out,
                               an_stragglers_instance_fn each_instance, void *arg);
/* The instance's step: on the first of its ranks (in rank order) that has step marks, the first
 * mark after that rank's start of it. 0 when there is none. */
int an_stragglers_instance_step(const an_stragglers_marks *marks, const an_stragglers_instance *in, uint64_t *step);
/* tot[k] against the ranks that have its role: their number (< 2: nothing
 * else is set), the slowest (a rank index), the median time and how far
 * over it the slowest is, in percent. vals: scratch of n_ranks. */
uint32_t an_stragglers_slowest(const an_trace *t, const an_stragglers_data *d, uint32_t k, int64_t *vals,
                               uint32_t *slowest, int64_t *median_ns, double *over_pct);

#endif
