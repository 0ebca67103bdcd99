/* model.h: the target transformer and the DFlash-style drafter in plain C over kernels/,
 * forward and backward, used by the CPU backend and by tests/test_drafter_grad.c.
 *
 * Target (frozen, seed-initialised): token embedding, `target_layers` pre-norm blocks of
 * RMSNorm + causal attention confined to each document (RoPE at in-document positions) and
 * RMSNorm + SwiGLU MLP, final RMSNorm, LM head. It emits the outputs of the tapped layers and
 * its argmax next-token choice at every position (its "predictions").
 *
 * Drafter (trained), the DFlash variant used here:
 *  - context: c = RMSNorm(concat(taps) @ W_fc), one row per target position;
 *  - for each anchor a (sampled in 1..T - block_size) a block of block_size rows, r = 0..bs-1,
 *    at positions pos[a] + r. Block input: the target's (frozen) embedding of token x[a] at
 *    r = 0 and a learned mask embedding at r >= 1, plus a learned per-row embedding
 *    pos_embed[r];
 *  - drafter_layers blocks. With attention (DFlash): queries from the block rows; keys and
 *    values from the context rows before the anchor (same document, within the sliding window
 *    when set) and from the block itself, bidirectional inside the block
 *    (k_mask_dflash_block), both through the same K/V projections, RoPE on q and k; then a
 *    SwiGLU MLP. MLP-only: no attention, so the context enters as c[a-1] added to every block
 *    row's input (zero when a-1 is in another document);
 *  - final RMSNorm and the target's frozen LM head;
 *  - loss: row r of the block predicts the token after position a + r, and its label is the
 *    target's prediction at a + r (so the block drafts tokens a+1 .. a+block_size given x[a]
 *    and the context before a); rows whose position lies in another document than a are
 *    ignored. Mean cross-entropy over all labelled rows of the batch, uniform weights.
 *
 * The drafter's parameters live in one flat float array described by a tensor table, so the
 * optimizer, the all-reduce, clipping and the gradient check treat them uniformly.
 */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct tr_dims {
    int vocab, dim, heads, head_dim, ffn;
    int target_layers, n_taps, taps[TR_MAX_TAPS];
    int drafter_layers, attention, block_size, anchors, window;
    int seq_len, n_seqs;
    float eps, rope_theta;
} tr_dims;

void tr_dims_from_config(tr_dims *dims, const tr_config *cfg);

/* ---- target ------------------------------------------------------------------------------ */
typedef struct tr_block_weights {
    float *attn_norm, *wq, *wk, *wv, *wo;     /* [d], [d, d] x4; NULL in MLP-only drafters */
    float *mlp_norm, *w_gate, *w_up, *w_down; /* [d], [d, F], [d, F], [F, d] */
} tr_block_weights;

typedef struct tr_target_weights {
    tr_dims dims;
    float *data;
    size_t n_floats;
    float *embed;       /* [V, d] */
    float *final_norm;  /* [d] */
    float *lm_head;     /* [d, V] */
    tr_block_weights *layers;
} tr_target_weights;

int tr_target_weights_init(tr_target_weights *w, const tr_dims *dims, uint64_t seed);
void tr_target_weights_free(tr_target_weights *w);

typedef struct tr_target_ws tr_target_ws; /* activations of one forward */
tr_target_ws *tr_target_ws_create(const tr_dims *dims);
void tr_target_ws_free(tr_target_ws *ws);

/* Forward of n_seqs sequences of seq_len tokens. taps[i]: [n_seqs*seq_len, d], the output of
 * layer dims->taps[i]; predictions: [n_seqs*seq_len] argmax of the LM head. Returns 0, or -1
 * for a token outside the vocabulary. */
int tr_target_forward(const tr_target_weights *w, tr_target_ws *ws, const int32_t *tokens,
                      const int32_t *doc_ids, const int32_t *positions, float *const *taps,
                      int32_t *predictions);

/* ---- drafter ----------------------------------------------------------------------------- */
#define TR_MAX_PARAM_TENSORS (5 + 9 * 64)

typedef struct tr_param_tensor {
    char name[32];
    size_t offset, count;
    int decay; /* weight decay applies (matrices, not norms or embeddings) */
} tr_param_tensor;

typedef struct tr_drafter_params {
    tr_dims dims;
    float *data;
    size_t n_floats;
    int owns_data;
    int n_tensors;
    tr_param_tensor tensors[TR_MAX_PARAM_TENSORS];
    float *fc;          /* [n_taps*d, d] */
    float *ctx_norm;    /* [d] */
    float *mask_embed;  /* [d] */
    float *pos_embed;   /* [block_size, d] */
    float *final_norm;  /* [d] */
    tr_block_weights *layers;
} tr_drafter_params;

/* Lays the tensors out over data (allocated, zeroed, when data is NULL). */
int tr_drafter_params_alloc(tr_drafter_params *p, const tr_dims *dims, float *data);
/* Seeded initialisation: norms 1, matrices N(0, 1/fan_in) (output projections halved). */
void tr_drafter_params_init(tr_drafter_params *p, uint64_t seed);
void tr_drafter_params_free(tr_drafter_params *p);

typedef struct tr_drafter_ws tr_drafter_ws;
tr_drafter_ws *tr_drafter_ws_create(const tr_dims *dims);
void tr_drafter_ws_free(tr_drafter_ws *ws);

/* The inputs of one step, filled by the caller: [n_seqs*seq_len] rows each. */
typedef struct tr_drafter_inputs {
    float *taps;           /* [rows, n_taps*d] */
    int32_t *tokens, *doc_ids, *positions, *predictions;
} tr_drafter_inputs;
tr_drafter_inputs *tr_drafter_ws_inputs(tr_drafter_ws *ws);
/* What the forward built from the inputs, for the tests: the residual stream into layer
 * `layer` ([NB, d]; layer 0 is the block's input embeddings), the labels and the block
 * positions ([NB] each, label -1 where a row has none). */
const float *tr_drafter_ws_residual(const tr_drafter_ws *ws, int layer);
const int32_t *tr_drafter_ws_labels(const tr_drafter_ws *ws);
const int32_t *tr_drafter_ws_block_pos(const tr_drafter_ws *ws);

/* Forward through the logits; anchors [n_seqs * anchors] in 1..seq_len - block_size. */
void tr_drafter_forward(tr_drafter_ws *ws, const tr_drafter_params *p,
                        const tr_target_weights *target, const int32_t *anchors);
/* Mean cross-entropy over labelled rows (after tr_drafter_forward). With metrics non-NULL,
 * also top-1 and top-k accuracy. n_valid (optional) gets the number of labelled rows. */
float tr_drafter_loss(tr_drafter_ws *ws, int topk, float *accuracy, float *topk_accuracy,
                      int *n_valid);
/* grads = d(loss)/d(params) (overwritten, same layout as p). */
void tr_drafter_backward(tr_drafter_ws *ws, const tr_drafter_params *p,
                         const tr_target_weights *target, tr_drafter_params *grads);

#endif
