/* pipeline.h: the trainer's threads and the queues between them.
 *
 *   loader ──batch queue──▶ target[g] ──(post[g])──▶ hidden-state queue ──▶ drafter[d] ─▶ main
 *
 * loader     load, queue_put                  packs batches of documents (data.c)
 * target[g]  batch_wait, forward,             frozen target forward; taps + predictions
 *            postprocess, queue_put           (sync) or handoff to post[g] (async)
 * post[g]    handoff_wait, postprocess,       (--postprocess async) packs and copies the taps
 *            queue_put                        off the target's critical path
 * drafter[d] queue_wait, h2d, forward, loss,  one step per queue item; all drafters step
 *            backward, allreduce, optimizer   together (the all-reduce is their barrier)
 *
 * Every buffer that travels (batches, hidden-state slots, the targets' staging buffers) is
 * preallocated and returns to its producer through a free list, so steady state allocates
 * nothing. The hidden-state queue records its depth in the counter `queue_depth` after every
 * put and pop; the batch queue in `batch_queue_depth`.
 *
 * A step is one optimizer step of the drafters. Each drafter reports its step (loss, metrics,
 * tokens consumed) to a small ring that main reads with tr_pipeline_wait_step().
 */
#ifndef TR_PIPELINE_H
#define TR_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "stagetrace.h"

typedef struct tr_step_report {
    uint64_t step;
    uint64_t tokens;       /* consumed by all drafters in this step */
    int n_reported;        /* drafters that finished it */
    double loss_sum;       /* over drafters */
    int n_accuracy;        /* drafters that measured accuracy this step */
    double accuracy_sum, topk_sum;
    double grad_norm;      /* rank 0's (all ranks see the same gradient) */
    int skipped;
} tr_step_report;

typedef struct tr_pipeline tr_pipeline;

/* Allocates every buffer, opens the backend and its roles, registers the stages and counters
 * in trace. Takes ownership of data (also on failure). 0, or -1 with one line in err; on
 * failure *out may be set and must be passed to tr_pipeline_destroy. */
struct tr_data;
int tr_pipeline_create(tr_pipeline **out, const tr_config *cfg, const tr_backend *backend,
                       st_trace *trace, struct tr_data *data, char *err, size_t err_size);
/* Starts every thread. 0, or -1 with err (then call tr_pipeline_stop). */
int tr_pipeline_start(tr_pipeline *p, char *err, size_t err_size);
/* Waits up to timeout_ms for every drafter to finish `step` (steps are waited for in order).
 * 1: done (report filled); 0: timeout; -1: a thread failed (tr_pipeline_error says why). */
int tr_pipeline_wait_step(tr_pipeline *p, uint64_t step, int timeout_ms, tr_step_report *out);
int tr_pipeline_queue_depth(tr_pipeline *p);
/* Starts (on != 0) or stops the backend's device-profiler capture, when it has one. */
void tr_pipeline_profiler(tr_pipeline *p, int on);
const char *tr_pipeline_error(tr_pipeline *p);
/* Closes every queue, aborts the collectives and joins every thread. Idempotent. */
void tr_pipeline_stop(tr_pipeline *p);
void tr_pipeline_destroy(tr_pipeline *p);

/* Flow ids (docs/tracer.md, "Flows"): batch index << 16 | hop, unique per run across every
 * thread and rank, since each global batch has one owner. Shared by the single-process
 * pipeline and the multi-process channel (dist.c). */
enum { TR_HOP_BATCH = 0, TR_HOP_STAGING = 1, TR_HOP_HIDDEN = 2 }; /* loader->target, target->post, ->drafter */
static inline uint64_t tr_flow_id(uint64_t batch_index, int hop) { return batch_index << 16 | (uint64_t)hop; }

/* The --*-delay-us knobs: a busy wait, so the thread looks like it computes. */
void tr_spin_us(long us);

#endif
