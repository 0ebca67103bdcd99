/* backend_cpu.c: the CPU backend. Every role runs the kernels/ references in its own thread:
 * "device" buffers are ordinary host memory owned by the role's object, `h2d` and the copy in
 * `postprocess` are memcpy, and the all-reduce is a shared-memory mean among the drafter
 * threads between two barriers (each drafter reduces one slice of the gradient, then all
 * copy the result back, so every drafter ends with bit-identical gradients and weights).
 * The frozen target weights are shared read-only by every target and drafter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kernels.h"
#include "model.h"
#include "queue.h"

struct tr_context {
    const tr_config *cfg;
    tr_dims dims;
    tr_target_weights target;
    /* communicator */
    int n_drafters;
    tr_barrier barrier;
    float **rank_grads; /* [n_drafters]: each drafter's gradient buffer */
    float *mean_grad;   /* [n_params] */
    size_t n_params;
};

typedef struct staging {
    float *taps[TR_MAX_TAPS]; /* [NT, d] each */
    int32_t *predictions, *tokens, *doc_ids, *positions;
    uint64_t batch_index;
} staging;

struct tr_target {
    tr_context *ctx;
    int index, device, n_staging;
    tr_target_ws *ws;
    staging st[2];
};

struct tr_drafter {
    tr_context *ctx;
    int rank, device;
    tr_drafter_params params, grads;
    float *adam_m, *adam_v;
    int adam_step;
    tr_drafter_ws *ws;
    uint16_t *taps_bf16; /* the copied-in slot */
};

static size_t rows_of(const tr_dims *D)
{
    return (size_t)D->n_seqs * D->seq_len;
}

static int cpu_open(tr_context **out, const tr_config *cfg)
{
    *out = NULL;
    tr_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        tr_backend_set_error("out of memory");
        return -1;
    }
    ctx->cfg = cfg;
    tr_dims_from_config(&ctx->dims, cfg);
    if (tr_target_weights_init(&ctx->target, &ctx->dims, cfg->seed)) {
        free(ctx);
        tr_backend_set_error("out of memory for the target weights");
        return -1;
    }
    tr_drafter_params probe;
    if (tr_drafter_params_alloc(&probe, &ctx->dims, NULL)) {
        tr_target_weights_free(&ctx->target);
        free(ctx);
        tr_backend_set_error("out of memory");
        return -1;
    }
    ctx->n_params = probe.n_floats;
    tr_drafter_params_free(&probe);
    ctx->n_drafters = cfg->n_drafters;
    ctx->rank_grads = calloc((size_t)cfg->n_drafters, sizeof *ctx->rank_grads);
    ctx->mean_grad = cfg->n_drafters > 1 ? malloc(ctx->n_params * sizeof(float)) : NULL;
    if (!ctx->rank_grads || (cfg->n_drafters > 1 && !ctx->mean_grad)) {
        free(ctx->rank_grads);
        free(ctx->mean_grad);
        tr_target_weights_free(&ctx->target);
        free(ctx);
        tr_backend_set_error("out of memory");
        return -1;
    }
    tr_barrier_init(&ctx->barrier, cfg->n_drafters);
    *out = ctx;
    return 0;
}

static void cpu_close(tr_context *ctx)
{
    if (!ctx)
        return;
    tr_barrier_destroy(&ctx->barrier);
    free(ctx->rank_grads);
    free(ctx->mean_grad);
    tr_target_weights_free(&ctx->target);
    free(ctx);
}

static void cpu_abort(tr_context *ctx)
{
    tr_barrier_abort(&ctx->barrier);
}

static int cpu_hidden_alloc(tr_context *ctx, tr_hidden *h)
{
    const tr_dims *D = &ctx->dims;
    size_t n = rows_of(D);
    memset(h, 0, sizeof *h);
    h->n_seqs = D->n_seqs;
    h->seq_len = D->seq_len;
    h->n_taps = D->n_taps;
    h->dim = D->dim;
    /* malloc, not calloc: pages are touched only when a slot is first filled */
    h->taps_bf16 = malloc(n * D->n_taps * D->dim * sizeof(uint16_t));
    h->predictions = malloc(n * 4 * sizeof(int32_t));
    if (!h->taps_bf16 || !h->predictions) {
        free(h->taps_bf16);
        free(h->predictions);
        tr_backend_set_error("out of memory for the hidden-state slots");
        return -1;
    }
    h->tokens = h->predictions + n;
    h->doc_ids = h->tokens + n;
    h->positions = h->doc_ids + n;
    return 0;
}

static void cpu_hidden_free(tr_context *ctx, tr_hidden *h)
{
    free(h->taps_bf16);
    free(h->predictions);
    memset(h, 0, sizeof *h);
}

/* ---- target ------------------------------------------------------------------------------ */

static void cpu_target_destroy(tr_target *t)
{
    if (!t)
        return;
    tr_target_ws_free(t->ws);
    for (int i = 0; i < 2; i++) {
        free(t->st[i].taps[0]);
        free(t->st[i].predictions);
    }
    free(t);
}

static int cpu_target_create(tr_context *ctx, int index, int device, int n_staging,
                             tr_target **out)
{
    const tr_dims *D = &ctx->dims;
    size_t n = rows_of(D);
    tr_target *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t)
        goto nomem;
    t->ctx = ctx;
    t->index = index;
    t->device = device;
    t->n_staging = n_staging < 1 ? 1 : n_staging > 2 ? 2 : n_staging;
    t->ws = tr_target_ws_create(D);
    if (!t->ws)
        goto nomem;
    for (int i = 0; i < t->n_staging; i++) {
        staging *s = &t->st[i];
        s->taps[0] = malloc(n * D->n_taps * D->dim * sizeof(float));
        s->predictions = malloc(n * 4 * sizeof(int32_t));
        if (!s->taps[0] || !s->predictions)
            goto nomem;
        for (int k = 1; k < D->n_taps; k++)
            s->taps[k] = s->taps[0] + (size_t)k * n * D->dim;
        s->tokens = s->predictions + n;
        s->doc_ids = s->tokens + n;
        s->positions = s->doc_ids + n;
    }
    *out = t;
    return 0;
nomem:
    cpu_target_destroy(t);
    tr_backend_set_error("out of memory for target %d", index);
    return -1;
}

static int cpu_target_forward(tr_target *t, const tr_batch *b, int which)
{
    const tr_dims *D = &t->ctx->dims;
    staging *s = &t->st[which];
    size_t n = rows_of(D) * sizeof(int32_t);
    /* "upload" the batch: the staging buffer keeps it for postprocess */
    memcpy(s->tokens, b->tokens, n);
    memcpy(s->doc_ids, b->doc_ids, n);
    memcpy(s->positions, b->positions, n);
    s->batch_index = b->index;
    if (tr_target_forward(&t->ctx->target, t->ws, s->tokens, s->doc_ids, s->positions, s->taps,
                          s->predictions)) {
        tr_backend_set_error("batch %llu holds a token outside the vocabulary (--vocab %d)",
                             (unsigned long long)b->index, D->vocab);
        return -1;
    }
    return 0;
}

static int cpu_target_postprocess(tr_target *t, int which, tr_hidden *h)
{
    const tr_dims *D = &t->ctx->dims;
    const staging *s = &t->st[which];
    size_t n = rows_of(D);
    k_pack_taps_bf16(h->taps_bf16, (const float *const *)s->taps, D->n_taps, (int)n, D->dim);
    memcpy(h->predictions, s->predictions, n * sizeof(int32_t));
    memcpy(h->tokens, s->tokens, n * sizeof(int32_t));
    memcpy(h->doc_ids, s->doc_ids, n * sizeof(int32_t));
    memcpy(h->positions, s->positions, n * sizeof(int32_t));
    h->batch_index = s->batch_index;
    h->n_tokens = n;
    h->producer = t->index;
    return 0;
}

/* ---- drafter ----------------------------------------------------------------------------- */

static void cpu_drafter_destroy(tr_drafter *d)
{
    if (!d)
        return;
    tr_drafter_params_free(&d->params);
    tr_drafter_params_free(&d->grads);
    free(d->adam_m);
    free(d->adam_v);
    free(d->taps_bf16);
    tr_drafter_ws_free(d->ws);
    free(d);
}

static int cpu_drafter_create(tr_context *ctx, int rank, int device, tr_drafter **out)
{
    const tr_dims *D = &ctx->dims;
    *out = NULL;
    tr_drafter *d = calloc(1, sizeof *d);
    if (!d)
        goto nomem;
    d->ctx = ctx;
    d->rank = rank;
    d->device = device;
    if (tr_drafter_params_alloc(&d->params, D, NULL) ||
        tr_drafter_params_alloc(&d->grads, D, NULL))
        goto nomem;
    /* the same seed on every rank: all drafters start from the same weights */
    tr_drafter_params_init(&d->params, ctx->cfg->seed);
    d->adam_m = calloc(d->params.n_floats, sizeof(float));
    d->adam_v = calloc(d->params.n_floats, sizeof(float));
    d->taps_bf16 = malloc(rows_of(D) * D->n_taps * D->dim * sizeof(uint16_t));
    d->ws = tr_drafter_ws_create(D);
    if (!d->adam_m || !d->adam_v || !d->taps_bf16 || !d->ws)
        goto nomem;
    ctx->rank_grads[rank] = d->grads.data;
    *out = d;
    return 0;
nomem:
    cpu_drafter_destroy(d);
    tr_backend_set_error("out of memory for drafter %d", rank);
    return -1;
}

static int cpu_drafter_h2d(tr_drafter *d, const tr_hidden *h)
{
    const tr_dims *D = &d->ctx->dims;
    size_t n = rows_of(D);
    tr_drafter_inputs *in = tr_drafter_ws_inputs(d->ws);
    memcpy(d->taps_bf16, h->taps_bf16, n * D->n_taps * D->dim * sizeof(uint16_t));
    memcpy(in->predictions, h->predictions, n * sizeof(int32_t));
    memcpy(in->tokens, h->tokens, n * sizeof(int32_t));
    memcpy(in->doc_ids, h->doc_ids, n * sizeof(int32_t));
    memcpy(in->positions, h->positions, n * sizeof(int32_t));
    return 0;
}

static int cpu_drafter_forward(tr_drafter *d, const int32_t *anchors)
{
    const tr_dims *D = &d->ctx->dims;
    tr_drafter_inputs *in = tr_drafter_ws_inputs(d->ws);
    k_bf16_to_float(in->taps, d->taps_bf16, rows_of(D) * D->n_taps * D->dim);
    tr_drafter_forward(d->ws, &d->params, &d->ctx->target, anchors);
    return 0;
}

static int cpu_drafter_loss(tr_drafter *d, int want_accuracy, tr_step_metrics *m)
{
    m->have_accuracy = want_accuracy;
    m->loss = tr_drafter_loss(d->ws, d->ctx->cfg->topk, want_accuracy ? &m->accuracy : NULL,
                              want_accuracy ? &m->topk_accuracy : NULL,
                              want_accuracy ? &m->n_valid : NULL);
    return 0;
}

static int cpu_drafter_backward(tr_drafter *d)
{
    tr_drafter_backward(d->ws, &d->params, &d->ctx->target, &d->grads);
    return 0;
}

static int cpu_drafter_allreduce(tr_drafter *d)
{
    tr_context *ctx = d->ctx;
    int n = ctx->n_drafters;
    if (n == 1)
        return 0;
    if (tr_barrier_wait(&ctx->barrier)) {
        tr_backend_set_error("all-reduce aborted");
        return -1;
    }
    size_t per = (ctx->n_params + (size_t)n - 1) / (size_t)n;
    size_t lo = per * (size_t)d->rank, hi = lo + per < ctx->n_params ? lo + per : ctx->n_params;
    float inv = 1.0f / (float)n;
    for (size_t i = lo; i < hi; i++) {
        float sum = 0.0f;
        for (int r = 0; r < n; r++) /* fixed order: every rank gets the same bits */
            sum += ctx->rank_grads[r][i];
        ctx->mean_grad[i] = sum * inv;
    }
    if (tr_barrier_wait(&ctx->barrier)) {
        tr_backend_set_error("all-reduce aborted");
        return -1;
    }
    memcpy(d->grads.data, ctx->mean_grad, ctx->n_params * sizeof(float));
    return 0;
}

static int cpu_drafter_optimizer(tr_drafter *d, tr_step_metrics *m)
{
    const tr_config *cfg = d->ctx->cfg;
    float *g = d->grads.data;
    size_t n = d->grads.n_floats;
    m->grad_norm = k_clip_grad_norm(&g, &n, 1, cfg->clip);
    m->skipped = !isfinite(m->grad_norm);
    if (m->skipped)
        return 0;
    d->adam_step++;
    for (int i = 0; i < d->params.n_tensors; i++) {
        const tr_param_tensor *t = &d->params.tensors[i];
        k_adamw_step(d->params.data + t->offset, g + t->offset, d->adam_m + t->offset,
                     d->adam_v + t->offset, t->count, cfg->lr, cfg->beta1, cfg->beta2,
                     cfg->adam_eps, t->decay ? cfg->weight_decay : 0.0f, d->adam_step);
    }
    return 0;
}

static float *cpu_drafter_grads(tr_drafter *d, size_t *n_floats)
{
    *n_floats = d->grads.n_floats;
    return d->grads.data;
}

const tr_backend tr_backend_cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .abort = cpu_abort,
    .hidden_alloc = cpu_hidden_alloc,
    .hidden_free = cpu_hidden_free,
    .target_create = cpu_target_create,
    .target_forward = cpu_target_forward,
    .target_postprocess = cpu_target_postprocess,
    .target_destroy = cpu_target_destroy,
    .drafter_create = cpu_drafter_create,
    .drafter_h2d = cpu_drafter_h2d,
    .drafter_forward = cpu_drafter_forward,
    .drafter_loss = cpu_drafter_loss,
    .drafter_backward = cpu_drafter_backward,
    .drafter_allreduce = cpu_drafter_allreduce,
    .drafter_optimizer = cpu_drafter_optimizer,
    .drafter_destroy = cpu_drafter_destroy,
    .drafter_grads = cpu_drafter_grads,
};
