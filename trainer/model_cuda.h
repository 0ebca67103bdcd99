/* model_cuda.h: the target and the drafter of model.h on one CUDA device, on kernels/ (kc_*)
 * and the trainer's own kernels (ops_cuda.h). Same architecture, same parameter layout, same
 * seeded initialisation as model.c; storage and precision as kernels_cuda.h states: bf16
 * activations and matmul weights, fp32 accumulation, fp32 master weights, gradients and AdamW
 * moments for the drafter.
 *
 * Target forward (frozen; the hot path of the pipeline, so laid out for big matmuls):
 *  - weights in bf16 with the projections fused: W_qkv [d, 3d] (columns q | k | v), W_o,
 *    W_gu [d, 2F] (columns gate | up), W_down; the RMSNorm weights are model.c's frozen
 *    ones (all 1), so the norms run without a weight vector;
 *  - the residual stream x in fp32: the output projections accumulate into it inside the
 *    cuBLASLt epilogue (beta = 1), one rounding per product as on the CPU; RMSNorm reads it and
 *    writes bf16;
 *  - per layer 4 matmuls over all n_seqs * seq_len rows at once (M = 16384 at the h200
 *    preset), RoPE from one table per forward fused with the split of the QKV product,
 *    SwiGLU over the fused gate|up product, attention per sequence with one causal-document
 *    mask per sequence built once per forward and shared by every layer;
 *  - taps: the residual after each tapped layer, copied (fp32) into the caller's buffers;
 *  - LM head in chunks of rows (fp32 logits) and argmax into the predictions.
 * Drafter: model.c's forward, loss and backward op for op (per-sequence K/V projections,
 * DFlash masks, frozen LM head shared with the target's weights on that device), with
 * clipping + AdamW on the flat fp32 parameters and a bf16 copy refreshed by AdamW itself.
 *
 * Every function enqueues on `stream` and returns 0, or -1 with the backend error set.
 * C++ only. */
#ifndef TR_MODEL_CUDA_H
#define TR_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels_cuda.h"
extern "C" {
#include "config.h"
#include "model.h"
}

/* ---- target weights (one copy per device; read-only once made) ---------------------------- */
typedef struct tm_target_weights {
    tr_dims D;
    int full;                      /* 0: only embed and lm_head (a drafter-only device) */
    kc_bf16 *embed;                /* [V, d] */
    kc_bf16 *lm_head;              /* [d, V] */
    kc_bf16 **wqkv, **wo, **wgu, **wdown; /* host arrays [target_layers] of device pointers */
    void *block;
    size_t bytes;
} tm_target_weights;

/* Allocates and initialises (seeded, as tr_target_weights_init) on the current device; the
 * fills are enqueued on stream. */
int tm_target_weights_create(tm_target_weights *w, const tr_dims *D, int full, uint64_t seed,
                             cudaStream_t stream);
void tm_target_weights_free(tm_target_weights *w);

/* ---- target forward ----------------------------------------------------------------------- */
typedef struct tm_target_ws {
    tr_dims D;
    float *x;                      /* [NT, d] fp32 residual */
    kc_bf16 *h, *qkv, *q, *k, *v, *o, *gu, *act;
    uint8_t *masks;                /* [S, T, T] */
    float2 *rope;                  /* [NT, hd/2] */
    float *logits;                 /* [logit_rows, V] */
    int logit_rows;
    void *block;
    size_t bytes;
} tm_target_ws;

int tm_target_ws_create(tm_target_ws *ws, const tr_dims *D);
void tm_target_ws_free(tm_target_ws *ws);

/* tokens, doc_ids, positions: device [NT]; taps[i]: device fp32 [NT, d] (dims.n_taps of them);
 * predictions: device [NT]; n_bad (device int32, +=): tokens outside the vocabulary. */
int tm_target_forward(const tm_target_weights *w, tm_target_ws *ws, kc_blas *blas,
                      const int32_t *tokens, const int32_t *doc_ids, const int32_t *positions,
                      float *const *taps, int32_t *predictions, int32_t *n_bad,
                      cudaStream_t stream);

/* Model FLOPs of one target forward over a batch whose (host) doc_ids are given: matmuls
 * (2 per multiply-add, LM head included) plus attention (QK^T and PV over the allowed
 * causal-document pairs: 4 * d per pair). *attention_flops gets the attention part. */
double tm_target_forward_flops(const tr_dims *D, const int32_t *doc_ids,
                               double *attention_flops);

/* ---- drafter ----------------------------------------------------------------------------- */
typedef struct tm_layer_offsets {
    size_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
} tm_layer_offsets;

typedef struct tm_drafter_params {
    tr_dims D;
    size_t n;                      /* floats */
    int n_tensors;
    tr_param_tensor *tensors;      /* host [n_tensors]: model.c's table (names, offsets, decay) */
    size_t fc, ctx_norm, mask_embed, pos_embed, final_norm; /* offsets */
    tm_layer_offsets *layers;      /* host [drafter_layers] */
    float *master, *grads, *adam_m, *adam_v; /* device fp32 [n] */
    kc_bf16 *pbf;                  /* device bf16 [n]: what the matmuls read */
    void *block;
    size_t bytes;
} tm_drafter_params;

/* Allocates and initialises as tr_drafter_params_init (same seed: same weights on every
 * drafter); gradients and moments zeroed. */
int tm_drafter_params_create(tm_drafter_params *p, const tr_dims *D, uint64_t seed,
                             cudaStream_t stream);
void tm_drafter_params_free(tm_drafter_params *p);

/* What a step's H2D fills: one of the two input buffers (double buffering). */
typedef struct tm_drafter_inputs {
    kc_bf16 *taps;                 /* [NT, n_taps * d] */
    int32_t *ints;                 /* [4 * NT]: predictions, tokens, doc_ids, positions */
    int32_t *anchors;              /* [S * A] */
} tm_drafter_inputs;

/* Device scalars a step accumulates; read by the host only at log steps (one copy). */
typedef struct tm_drafter_stats {
    float loss_sum;                /* sum of the step losses since the last read */
    float grad_norm;               /* the last step's, before clipping */
    int32_t hits1, n_valid, hitsk; /* the last metrics measurement */
    int32_t skipped;               /* steps with a non-finite gradient since the last read */
} tm_drafter_stats;

typedef struct tm_drafter_layer {
    kc_bf16 *x_mid, *h_attn, *q, *K, *V, *o; /* attention only; K, V [S, TK, d] */
    float *rstd_attn, *lse;
    kc_bf16 *h_mlp, *g, *u, *act;
    float *rstd_mlp;
} tm_drafter_layer;

typedef struct tm_drafter_ws {
    tr_dims D;
    int NT, NB, QB, TK;
    tm_drafter_inputs in[2];
    int32_t *labels, *block_pos, *key_pos;
    uint8_t *masks;                /* [S, QB, TK] */
    kc_bf16 *u_ctx, *ctx;
    float *ctx_rstd;
    kc_bf16 **x;                   /* host [L+1] */
    tm_drafter_layer *layers;      /* host [L] */
    kc_bf16 *h_final;
    float *rstd_final;
    float *logits, *dlogits;       /* fp32 [NB, V] */
    kc_bf16 *dlogits_bf16;
    kc_bf16 *dx, *dh, *dact, *dg, *du, *dout, *dq, *dq_pre, *dK, *dV, *dK_pre, *dctx, *du_ctx;
    float *delta, *losses, *loss_step, *weight_total, *clip_scale, *grad_scratch;
    double *partials;
    tm_drafter_stats *stats;       /* device */
    void *block;
    size_t bytes;
} tm_drafter_ws;

int tm_drafter_ws_create(tm_drafter_ws *ws, const tr_dims *D);
void tm_drafter_ws_free(tm_drafter_ws *ws);

/* The step on input buffer `buf` (taps, ints and anchors already on the device). target: the
 * frozen weights on this device (embed and lm_head are used). */
int tm_drafter_forward(tm_drafter_ws *ws, const tm_drafter_params *p,
                       const tm_target_weights *target, kc_blas *blas, int buf,
                       cudaStream_t stream);
/* Adds the step's loss to stats->loss_sum; with want_accuracy, replaces the stats' hit
 * counts by this step's (top-1 and top-k over the labelled rows). */
int tm_drafter_loss(tm_drafter_ws *ws, int want_accuracy, int topk, cudaStream_t stream);
int tm_drafter_backward(tm_drafter_ws *ws, tm_drafter_params *p, const tm_target_weights *target,
                        kc_blas *blas, int buf, cudaStream_t stream);
/* Clipping (global norm, cfg->clip; the norm into stats->grad_norm) and AdamW step
 * `adam_step` (1 for the first). A non-finite norm skips the update (and counts it). */
int tm_drafter_optimizer(tm_drafter_params *p, tm_drafter_ws *ws, const tr_config *cfg,
                         int adam_step, cudaStream_t stream);

#endif
