/* whatif.h: the trainer's pipeline as a simulation built from a trace
 * (whatif.c), for `analyze whatif` (cmd_whatif.c). docs/analyze.md, "whatif",
 * is the model's reference: what is measured, what is assumed.
 */
#ifndef ANALYZE_WHATIF_H
#define ANALYZE_WHATIF_H

#include <stdint.h>

#include "sim.h"
#include "verdict.h"

#define AN_WHATIF_MAX_THREADS 64
#define AN_WHATIF_MAX_WARMUP 10000 /* warm-up items of a simulated run, at most */

/* The queues whose operations are measured, and the delays of each:
 * a put or a pop that blocked (wakee), that released a blocked partner
 * (waker), or neither (plain). */
enum { AN_WHATIF_BATCH_QUEUE, AN_WHATIF_HIDDEN_QUEUE, AN_WHATIF_N_QUEUES };
enum { AN_WHATIF_PUT_WAKEE, AN_WHATIF_PUT_WAKER, AN_WHATIF_PUT_PLAIN, AN_WHATIF_POP_WAKEE, AN_WHATIF_POP_WAKER,
       AN_WHATIF_POP_PLAIN, AN_WHATIF_N_DELAYS };

enum { AN_WHATIF_LOADER, AN_WHATIF_TARGET, AN_WHATIF_POST, AN_WHATIF_DRAFTER, AN_WHATIF_N_ROLES };

/* A configuration of the pipeline. */
typedef struct an_whatif_cfg {
    int targets, drafters, async;
    int queue_depth, batch_depth;
    /* the devices of the threads (--target-gpus/--drafter-gpus I,J,...), NULL: the rule of
     * docs/analyze.md ("The simulated pipeline") */
    const int *target_devices, *drafter_devices;
} an_whatif_cfg;

/* A stage scaled by --stage NAME=FACTORx. */
typedef struct an_whatif_scale {
    uint32_t stage;
    double factor;
} an_whatif_scale;

typedef struct an_whatif_opts {
    uint32_t skip_steps;      /* UINT32_MAX: the default (a tenth of the marks, at least 1) */
    double cores;             /* cpu backend: processors of the shared pool; <= 0: this machine's */
    double others;            /* cpu backend: runnable threads of other programs; < 0: 0 */
    int gpu_share_off;        /* cuda backend: every thread on a processor of its own */
    double allreduce_ns;      /* < 0: measured (or 0 when the trace has no all-reduce) */
    const an_whatif_scale *scales;
    uint32_t n_scales;
} an_whatif_opts;

/* Everything the simulation takes from the trace. Work samples are in ns of
 * the thread's own processor (contention removed, see docs), one per item. */
typedef struct an_whatif_input {
    an_whatif_cfg rec;            /* the recorded configuration */
    int cuda;                     /* 1: GPU backend (pools per device); 0: cpu (one pool) */
    double cores;                 /* cpu backend: the pool's capacity */
    double others;                /* cpu backend: other programs' runnable threads on it */
    int gpu_share_off;            /* cuda backend: no GPU pools (--gpu-share off) */
    int target_device[AN_WHATIF_MAX_THREADS], drafter_device[AN_WHATIF_MAX_THREADS];
    /* cuda, GPUs shared, GPU activity recorded: each recorded device's capacity, the threads'
     * work on it over its busy time in the steady window, at least 1 (docs/analyze.md,
     * "GPU capacity"); other devices (and traces without GPU activity) 1 */
    int n_gpu_cap;
    int gpu_cap_device[AN_WHATIF_MAX_THREADS * AN_WHATIF_N_ROLES];
    double gpu_cap[AN_WHATIF_MAX_THREADS * AN_WHATIF_N_ROLES];
    double gpu_cap_other;         /* the capacity of a device the trace did not record on */
    uint32_t skip_steps;
    uint64_t step_first, step_last, steps; /* the steady window: steps step_first..step_last */
    int64_t t0_ns, t1_ns;
    uint64_t tokens;
    double measured_tokens_per_s, tokens_per_item;
    uint64_t items;               /* drafter items in the window (steps x drafters) */
    /* samples: loader; target without postprocess; postprocess; drafter before,
     * in and after the all-reduce. Each in step order, a role's threads taking
     * turns (item k of each thread, then item k + 1; docs/analyze.md, "Sample
     * order") */
    double *load, *forward, *post, *draft_a, *draft_c, *draft_b;
    uint32_t n_load, n_forward, n_post, n_draft, n_draft_c;
    /* delays around the queues' operations (sim.h, "Wake-ups"): [queue][kind] */
    double *delay[AN_WHATIF_N_QUEUES][AN_WHATIF_N_DELAYS];
    uint32_t n_delay[AN_WHATIF_N_QUEUES][AN_WHATIF_N_DELAYS];
    int allreduce_measured;       /* draft_c from a recorded all-reduce */
    int allreduce_given;          /* --allreduce-ms: allreduce_ns replaces it */
    double allreduce_ns;          /* the all-reduce's cost when not measured (or given) */
    const char *queue_depth_from; /* "argv", "trainer default", "counter" */
} an_whatif_input;

/* Reads the trace into *in; prints its own errors and returns an exit code. */
int an_whatif_read(an_trace *t, const an_whatif_opts *o, an_whatif_input *in);
void an_whatif_free(an_whatif_input *in);

extern const char *const an_whatif_role_names[AN_WHATIF_N_ROLES];

/* The capacity of device `device`'s pool (an_whatif_input's gpu_cap). */
double an_whatif_gpu_capacity(const an_whatif_input *in, int device);

/* One simulated run of cfg; *n_pools and (cuda) pool_device[AN_SIM_MAX_POOLS], the device of each
 * pool, when not NULL. resample 0: the samples replayed in recorded
 * order; 1: drawn with replacement from seed. 0, or -1 on a malformed model
 * or no memory. */
int an_whatif_simulate(const an_whatif_input *in, const an_whatif_cfg *cfg, int resample, uint64_t seed,
                       uint64_t measure_items, an_sim_result *r, int *n_pools, int *pool_device);

#endif
