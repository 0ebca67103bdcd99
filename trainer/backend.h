/* backend.h: the interface between the pipeline (threads, queues, stages: pipeline.c) and the
 * device that runs the model. The pipeline never touches model tensors; it hands each role's
 * backend object host buffers and calls one function per stage, so the same threads and the
 * same trace stages run on any backend:
 *
 *   target[g]   target_forward (batch -> taps + predictions, on the device)
 *               target_postprocess (pack taps as bf16, copy with predictions into a host slot)
 *   drafter[d]  drafter_h2d, drafter_forward, drafter_loss, drafter_backward,
 *               drafter_allreduce (mean of gradients over every drafter), drafter_optimizer
 *
 * The CPU backend (backend_cpu.c) runs kernels/ in the calling thread. A CUDA backend plugs in
 * by defining `const tr_backend tr_backend_cuda` and building with TR_HAVE_CUDA_BACKEND, which
 * makes tr_backend_find() return it for --device cuda (and --version list it); without it,
 * --device cuda is a usage error. TR_HAVE_CUDA_BACKEND is defined (config.h) in builds with
 * the CUDA toolkit, whose trainer links backend_cuda.cu. Its functions
 * enqueue work on the role's streams and return; the pipeline brackets each call with its
 * stage, so a backend that must wait for its device records that wait itself as a `sync`
 * stage (a stream_sync inside postprocess, for instance), in the trace the pipeline hands it
 * with tr_backend_set_trace(). Objects are used by one thread at a time except where noted;
 * every function returns 0 or -1 and then sets tr_backend_error().
 */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* A packed batch from the loader: host memory, [n_seqs * seq_len] each. */
typedef struct tr_batch {
    int n_seqs, seq_len;
    uint64_t index; /* 0, 1, ... in loading order */
    int32_t *tokens, *doc_ids, *positions;
} tr_batch;

/* One hidden-state queue item: host memory the backend allocated (pinned on CUDA), filled by
 * target_postprocess and read by drafter_h2d. Rows are the batch's tokens, n_rows = n_seqs *
 * seq_len. */
typedef struct tr_hidden {
    int n_seqs, seq_len, n_taps, dim;
    uint64_t batch_index, n_tokens;
    int producer;          /* index of the target that made it */
    uint16_t *taps_bf16;   /* [n_rows, n_taps * dim]: tapped layer outputs, concatenated */
    int32_t *predictions;  /* [n_rows]: the target's next-token choice at each position */
    int32_t *tokens, *doc_ids, *positions; /* [n_rows]: copied from the batch */
} tr_hidden;

/* What a drafter step measured. loss every step; accuracy and top-k only when asked.
 * A backend whose device runs asynchronously may defer them so that no step waits for the
 * device (the CUDA backend does): loss 0 on the steps between two log lines (--log-every) and,
 * on a log step, the sum of the losses since the previous one; accuracy on the log step that
 * follows the measurement. main's log line (the mean over the steps since the last line, the
 * latest accuracy) is the same either way. */
typedef struct tr_step_metrics {
    float loss;
    int have_accuracy;
    float accuracy, topk_accuracy;
    int n_valid;      /* rows with a label */
    float grad_norm;  /* before clipping */
    int skipped;      /* non-finite gradient: optimizer step skipped */
} tr_step_metrics;

typedef struct tr_context tr_context; /* one per run: shared frozen target, communicator */
typedef struct tr_target tr_target;   /* one per target thread */
typedef struct tr_drafter tr_drafter; /* one per drafter thread */

typedef struct tr_backend {
    const char *name;

    /* Run-wide state: initialises the frozen target weights (seeded) and the communicator of
     * cfg->n_drafters drafters. cfg must outlive the context. */
    int (*open)(tr_context **out, const tr_config *cfg);
    void (*close)(tr_context *ctx);
    /* Releases every drafter blocked in drafter_allreduce (they return -1); thread-safe. */
    void (*abort)(tr_context *ctx);

    /* Hidden-state slots (host memory suitable for fast copies). */
    int (*hidden_alloc)(tr_context *ctx, tr_hidden *slot);
    void (*hidden_free)(tr_context *ctx, tr_hidden *slot);

    /* Target role. n_staging device buffers of taps + predictions (2 with async postprocess,
     * so that the next forward can start while the last one is packed). target_forward and
     * target_postprocess on different staging buffers may run on two threads at once. */
    int (*target_create)(tr_context *ctx, int index, int device, int n_staging, tr_target **out);
    int (*target_forward)(tr_target *t, const tr_batch *batch, int staging);
    int (*target_postprocess)(tr_target *t, int staging, tr_hidden *slot);
    void (*target_destroy)(tr_target *t);

    /* Drafter role. rank in 0..n_drafters-1; every drafter starts from the same weights. */
    int (*drafter_create)(tr_context *ctx, int rank, int device, tr_drafter **out);
    /* Copies the slot to the device; the slot may be reused once this returns. */
    int (*drafter_h2d)(tr_drafter *d, const tr_hidden *slot);
    /* anchors: [n_seqs * anchors] positions in 1..seq_len - block_size (tr_sample_anchors). */
    int (*drafter_forward)(tr_drafter *d, const int32_t *anchors);
    int (*drafter_loss)(tr_drafter *d, int want_accuracy, tr_step_metrics *m);
    int (*drafter_backward)(tr_drafter *d);
    /* Collective over all drafters: every drafter's gradient becomes the mean. Skipped by the
     * pipeline when there is one drafter. -1 when aborted. */
    int (*drafter_allreduce)(tr_drafter *d);
    /* Gradient clipping (global norm) and AdamW; fills grad_norm and skipped. */
    int (*drafter_optimizer)(tr_drafter *d, tr_step_metrics *m);
    void (*drafter_destroy)(tr_drafter *d);

    /* Optional (NULL: none): starts (on != 0) or stops the device profiler's capture
     * (cudaProfilerStart/Stop, for nsys --capture-range=cudaProfilerApi); --profile-steps. */
    void (*profiler)(tr_context *ctx, int on);

    /* Optional, for multi-process runs (dist.c). drafter_grads: the drafter's flat fp32
     * gradient in host memory (*n_floats of them), which dist.c all-reduces over the drafter
     * ranks with MPI; NULL: the backend all-reduces itself in drafter_allreduce, over the
     * drafter processes named by cfg->comm_ranks (NCCL). device_count: the devices a rank
     * may pick from (its local rank modulo that); NULL: the local rank is only a label. */
    float *(*drafter_grads)(tr_drafter *d, size_t *n_floats);
    int (*device_count)(void);
} tr_backend;

/* The backend for a device, or NULL when this build has none (then err says why). */
const tr_backend *tr_backend_find(int device, char *err, size_t err_size);
extern const tr_backend tr_backend_cpu;

/* The trace in which a backend records its own stages (host waits, copies) and counters;
 * set by the pipeline before open. NULL: none. */
struct st_trace;
void tr_backend_set_trace(struct st_trace *trace);
struct st_trace *tr_backend_trace(void);

/* The last backend error of the calling thread. */
const char *tr_backend_error(void);
void tr_backend_set_error(const char *fmt, ...);

/* Anchor positions for one batch, a function of (seed, batch index) only, so that every
 * backend and every drafter draws the same ones: uniform in [1, seq_len - block_size]. */
void tr_sample_anchors(int32_t *anchors /* [n_seqs * n_anchors] */, uint64_t seed,
                       uint64_t batch_index, int n_seqs, int n_anchors, int seq_len,
                       int block_size);

#endif
