/* sim.h: a small discrete-event simulator of threads joined by bounded queues
 * and barriers, sharing processors (sim.c). `whatif` (whatif.c) builds the
 * trainer's pipeline on it from a trace; the tests build pipelines with known
 * answers on it.
 *
 * An actor is one thread: it runs its list of operations in a loop, forever:
 *   POP q      take an item from queue q, waiting while it is empty
 *   PUT q      add an item to queue q, waiting while it is full
 *   WORK d     compute for a time drawn from distribution d
 *   BARRIER b  wait until every actor of barrier b arrived (then all go on)
 *   ITEM       count one finished item (the throughput's unit); takes no time
 * Work runs on the actor's pool, a set of `capacity` identical processors
 * (any real number > 0) shared by processor sharing, with `others` more
 * threads from outside the model always runnable on it: while n actors of
 * the pool compute, each advances at min(1, capacity / (n + others)) ns of
 * work per ns. An actor with pool -1 has a processor of its own. Blocked
 * actors use none.
 *
 * Wake-ups (a thread woken through a condition variable waits for a
 * processor, and on a busy machine the waker may lose its own to it): an
 * operation may carry two delay distributions. wakee: when the actor had
 * blocked in it and its wait is over, it sleeps on for a drawn latency, then
 * tries the operation again. waker: when the operation releases an actor
 * blocked on the same queue (a PUT an actor waiting in POP, a POP an actor
 * waiting in PUT) or completes a barrier others wait at, the actor itself
 * pauses for a drawn delay after it. plain: a POP or PUT that neither
 * blocked nor released anyone is followed by a delay drawn from it. Delays
 * use no processor and count as waiting (blocked_in, or blocked_out for a
 * PUT).
 *
 * Draws: replay mode (resample 0) hands each distribution's values out in
 * order, cyclically, one cursor per distribution shared by its actors;
 * resample mode draws values uniformly with replacement (a bootstrap) from a
 * generator seeded with `seed`, a work distribution with `group` g > 1 in
 * runs of g consecutive values (values kg..kg+g-1 for a random k: the items
 * of one recorded step, when the values are stored step by step). Actors that are ready at the same time act in
 * index order, so a run is deterministic.
 */
#ifndef ANALYZE_SIM_H
#define ANALYZE_SIM_H

#include <stdint.h>

enum { AN_SIM_POP, AN_SIM_PUT, AN_SIM_WORK, AN_SIM_BARRIER, AN_SIM_ITEM };

#define AN_SIM_MAX_OPS 8

typedef struct an_sim_dist an_sim_dist;

typedef struct an_sim_op {
    int kind; /* AN_SIM_* */
    int arg;  /* queue, distribution or barrier index; unused for ITEM */
    const an_sim_dist *wakee; /* POP, PUT, BARRIER: latency after it blocked and was released; NULL none */
    const an_sim_dist *waker; /* POP, PUT, BARRIER: the actor's own delay after this operation released a
                               * blocked actor (a woken thread took its processor); NULL none */
    const an_sim_dist *plain; /* POP, PUT: the delay after it when it neither blocked nor released; NULL none */
} an_sim_op;

typedef struct an_sim_actor {
    int role; /* index of the actor's role, for the per-role statistics */
    int pool; /* -1: a processor of its own */
    int n_ops;
    an_sim_op ops[AN_SIM_MAX_OPS];
} an_sim_actor;

typedef struct an_sim_queue {
    int capacity; /* <= 0: unbounded */
    int initial;  /* items at time 0; < 0: an endless source (POP never waits, PUT never blocks) */
} an_sim_queue;

struct an_sim_dist {
    const double *ns; /* work per draw, ns, >= 0 */
    uint32_t n;       /* >= 1 */
    uint32_t group;   /* resample mode: values drawn in runs of this many, each run
                         starting at a random multiple of it (0 or 1: one at a
                         time); replay mode ignores it */
};

typedef struct an_sim_model {
    int n_actors, n_queues, n_dists, n_pools, n_barriers, n_roles;
    const an_sim_actor *actors;
    const an_sim_queue *queues;
    const an_sim_dist *dists;
    const double *pool_capacity; /* [n_pools], > 0 */
    const double *pool_others;   /* [n_pools] or NULL: threads outside the model that compete for the pool
                                  * (their mean number runnable, >= 0) */
    const int *barrier_count;    /* [n_barriers]: actors that meet there, >= 1 */
    int watch_queue;             /* queue whose occupancy is reported, -1 none */
    uint64_t warmup_items;       /* ITEMs before the measured window opens */
    uint64_t measure_items;      /* ITEMs in the measured window, >= 1 */
    int resample;                /* 0 replay, 1 bootstrap */
    uint64_t seed;
    uint64_t max_events;         /* 0: 100 million; more and the run counts as stalled */
} an_sim_model;

#define AN_SIM_MAX_ROLES 16
#define AN_SIM_MAX_POOLS 128

typedef struct an_sim_result {
    int stalled;              /* no actor could move (or max_events passed): nothing below is valid */
    double window_ns;         /* from the warmup_items-th ITEM to the (warmup + measure)-th */
    uint64_t items;           /* measure_items */
    double items_per_s;
    double role_busy[AN_SIM_MAX_ROLES];    /* share of the window the role's actors spent in WORK, mean over them */
    double role_blocked_in[AN_SIM_MAX_ROLES];  /* waiting in POP or BARRIER */
    double role_blocked_out[AN_SIM_MAX_ROLES]; /* waiting in PUT */
    double pool_contended[AN_SIM_MAX_POOLS];  /* share of the window with actors computing slowed (n + others > capacity) */
    double pool_load[AN_SIM_MAX_POOLS];        /* mean of min(computing, capacity) / capacity */
    double queue_mean;        /* time-weighted mean occupancy of watch_queue */
    double queue_full, queue_empty; /* shares of the window at capacity and at 0 */
} an_sim_result;

/* Runs the model; 0, or -1 when the model is malformed (an index out of
 * range, a distribution without values, more roles or pools than the result
 * holds). A model that deadlocks returns 0 with r->stalled set. */
int an_sim_run(const an_sim_model *m, an_sim_result *r);

/* The generator of the resample mode (splitmix64), for callers that draw
 * their own: the next value of *state. */
uint64_t an_sim_rand(uint64_t *state);

#endif
