/* kernels.h: the CPU reference kernels of the DFlash-style drafter trainer.
 *
 * Every op the trainer's model needs (frozen target transformer forward, drafter forward and
 * backward, loss, optimizer, hidden-state packing) as plain fp32 C. These are the CPU backend's
 * kernels and the oracle that the CUDA kernels are checked against, so each op's semantics and
 * memory layout are kept simple and written down here.
 *
 * Conventions (hold for every function below unless its comment says otherwise):
 *  - Tensors are dense, row-major, fp32, with no padding between rows. A comment `[T, H, hd]`
 *    names the shape; the last index varies fastest. Dimension parameters carry the same names.
 *  - Functions are pure over caller-provided buffers: no globals, no allocation, no threads.
 *    Any number of threads may call them at once on disjoint outputs. Results are
 *    deterministic (fixed summation order) but the order is not part of the contract.
 *  - Outputs must not overlap inputs or each other, except where a comment says aliasing is
 *    allowed (inputs may alias each other freely, e.g. q == k).
 *  - Backward ops ADD into every gradient they produce (dx += ..., dweight += ...), for inputs
 *    and parameters alike, so that gradients of tensors used twice (residual streams, keys that
 *    are both context and block) sum naturally. Zero gradient buffers before a backward pass.
 *  - "Optional" pointers may be NULL; the comment says what NULL means.
 *  - Functions returning int return K_OK (0) on success, K_EINVAL when an argument is out of
 *    range (they still fill their outputs as documented).
 */
#ifndef STAGETRACE_KERNELS_H
#define STAGETRACE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K_OK 0
#define K_EINVAL (-1)

/* ---- arena (arena.c) ----------------------------------------------------------------------
 * A bump allocator over one caller-owned buffer, for activations and scratch. Allocations are
 * 64-byte aligned and never freed one by one: take a mark, allocate, reset to the mark. */
typedef struct k_arena {
    unsigned char *base;
    size_t capacity_bytes;
    size_t used_bytes;
} k_arena;

void k_arena_init(k_arena *arena, void *buffer, size_t capacity_bytes);
/* Returns 64-byte-aligned uninitialized memory, or NULL (arena unchanged) when it does not fit. */
void *k_arena_alloc(k_arena *arena, size_t bytes);
/* Same, for `count` floats, zero-filled. */
float *k_arena_floats_zeroed(k_arena *arena, size_t count);
size_t k_arena_mark(const k_arena *arena);
void k_arena_reset(k_arena *arena, size_t mark);

/* ---- elementwise (elementwise.c) --------------------------------------------------------- */
/* out[i] = a[i] + b[i]. out may alias a or b (residual add in place: k_add(x, x, y, n)). */
void k_add(float *out, const float *a, const float *b, size_t n);

/* ---- embedding (embedding.c); forward only: the table is frozen -------------------------- */
/* out[t, :] = table[tokens[t], :]. A token outside [0, vocab) gives a zero row and K_EINVAL. */
int k_embedding_fwd(float *out /* [T, d] */, const int32_t *tokens /* [T] */,
                    const float *table /* [vocab, d] */, int T, int d, int vocab);

/* ---- rmsnorm (rmsnorm.c) -------------------------------------------------------------------
 * rstd[t] = 1 / sqrt(mean_i x[t,i]^2 + eps);  out[t,i] = x[t,i] * rstd[t] * weight[i]. */
void k_rmsnorm_fwd(float *out /* [T, d] */, float *rstd /* [T], optional: saved for bwd */,
                   const float *x /* [T, d] */, const float *weight /* [d] */, int T, int d,
                   float eps);
/* dx += d(out)/dx^T dout; dweight += sum_t dout[t,:] * x[t,:] * rstd[t].
 * rstd: from the forward, or NULL to recompute it from x and eps. dweight optional. */
void k_rmsnorm_bwd(float *dx /* [T, d] */, float *dweight /* [d], optional */,
                   const float *dout /* [T, d] */, const float *x /* [T, d] */,
                   const float *weight /* [d] */, const float *rstd /* [T], optional */, int T,
                   int d, float eps);

/* ---- matmul (matmul.c) ---------------------------------------------------------------------
 * A linear layer y = x @ W + b keeps W as [in, out]; its backward is
 *   dx += dy @ W^T  -> k_matmul_nt(dx, dy, W, T, out, in, 1)
 *   dW += x^T @ dy  -> k_matmul_tn(dW, x, dy, in, T, out, 1)
 *   db += colsum dy -> k_bias_bwd(db, dy, T, out).
 * accumulate = 0: C = result; accumulate != 0: C += result. */
/* C[M,N] (=|+=) A[M,K] @ B[K,N] + bias[N]  (bias optional: NULL adds nothing). */
void k_matmul(float *C /* [M, N] */, const float *A /* [M, K] */, const float *B /* [K, N] */,
              const float *bias /* [N], optional */, int M, int K, int N, int accumulate);
/* C[M,N] (=|+=) A^T @ B, with A stored [K, M] and B [K, N]. */
void k_matmul_tn(float *C /* [M, N] */, const float *A /* [K, M] */, const float *B /* [K, N] */,
                 int M, int K, int N, int accumulate);
/* C[M,N] (=|+=) A @ B^T, with A stored [M, K] and B [N, K]. */
void k_matmul_nt(float *C /* [M, N] */, const float *A /* [M, K] */, const float *B /* [N, K] */,
                 int M, int K, int N, int accumulate);
/* dbias[n] += sum_m dC[m, n]. */
void k_bias_bwd(float *dbias /* [N] */, const float *dC /* [M, N] */, int M, int N);

/* ---- attention masks (mask.c) --------------------------------------------------------------
 * A mask is uint8 [Tq, Tk]: mask[i*Tk + j] = 1 when query i may attend to key j, else 0. */
/* Causal within documents (the target): allow(i, j) = j <= i && doc_ids[i] == doc_ids[j].
 * doc_ids optional: NULL = one document (plain causal). */
void k_mask_causal_doc(uint8_t *mask /* [T, T] */, const int32_t *doc_ids /* [T], optional */,
                       int T);
/* DFlash block mask (the drafter). Keys are [context (n_ctx) | block 0 | ... | block n-1],
 * Tk = n_ctx + n_blocks*block_size; queries are [block 0 | ... | block n-1],
 * Tq = n_blocks*block_size. For query i in block b = i / block_size with a = anchors[b]:
 *   context key j (j < n_ctx):  allowed iff j < a, and j >= a - window when window > 0,
 *                               and doc_ids[j] == doc_ids[a] when doc_ids is given;
 *   block key n_ctx + b2*block_size + r: allowed iff b2 == b (bidirectional inside the block);
 *   a block with block_keep[b] == 0 sees nothing (its rows are all 0; attention gives 0 there).
 * Anchors must lie in [0, n_ctx); a block whose anchor does not gets an all-zero row and the
 * call returns K_EINVAL. window <= 0: no window. doc_ids, block_keep optional (NULL: no
 * document confinement / keep every block). */
int k_mask_dflash_block(uint8_t *mask /* [n_blocks*block_size, n_ctx + n_blocks*block_size] */,
                        const int32_t *anchors /* [n_blocks] */,
                        const uint8_t *block_keep /* [n_blocks], optional */,
                        const int32_t *doc_ids /* [n_ctx], optional */, int n_ctx, int n_blocks,
                        int block_size, int window);

/* ---- attention (attention.c) ---------------------------------------------------------------
 * Multi-head attention, H heads of size hd, same head count for q and k/v:
 *   s[h,i,j] = (q[i,h,:] . k[j,h,:]) / sqrt(hd)  for allowed (i, j), -inf otherwise;
 *   p = softmax_j(s) (max-subtracted); out[i,h,:] = sum_j p[h,i,j] v[j,h,:];
 *   lse[i,h] = log sum_j exp(s[h,i,j]).
 * A query with no allowed key gets out = 0 and lse = -INFINITY (and no gradient).
 * mask optional: NULL = every key allowed. Projections, RoPE and the output projection are
 * separate ops. */
void k_attention_fwd(float *out /* [Tq, H, hd] */, float *lse /* [Tq, H], optional: for bwd */,
                     const float *q /* [Tq, H, hd] */, const float *k /* [Tk, H, hd] */,
                     const float *v /* [Tk, H, hd] */, const uint8_t *mask /* [Tq, Tk] */,
                     int Tq, int Tk, int H, int hd);
/* dq, dk, dv += gradients given dout; out and lse are the forward's. */
void k_attention_bwd(float *dq /* [Tq, H, hd] */, float *dk /* [Tk, H, hd] */,
                     float *dv /* [Tk, H, hd] */, const float *dout /* [Tq, H, hd] */,
                     const float *q, const float *k, const float *v,
                     const float *out /* [Tq, H, hd] */, const float *lse /* [Tq, H] */,
                     const uint8_t *mask /* [Tq, Tk] */, int Tq, int Tk, int H, int hd);

/* ---- rotary position embedding (rope.c) ----------------------------------------------------
 * Rotates the pairs (x[t,h,p], x[t,h,p + hd/2]), p < hd/2, by angle
 * positions[t] * theta^(-2p/hd) (the "rotate half" layout). hd must be even. out may alias x. */
void k_rope_fwd(float *out /* [T, H, hd] */, const float *x /* [T, H, hd] */,
                const int32_t *positions /* [T] */, int T, int H, int hd, float theta);
/* dx += R^T dout (the inverse rotation). */
void k_rope_bwd(float *dx /* [T, H, hd] */, const float *dout /* [T, H, hd] */,
                const int32_t *positions /* [T] */, int T, int H, int hd, float theta);

/* ---- silu / swiglu (swiglu.c) --------------------------------------------------------------
 * silu(a) = a * sigmoid(a). SwiGLU MLP: h = silu(gate) * up, on two separate [T, F] inputs
 * (gate = x @ W_gate, up = x @ W_up), elementwise over n = T*F. out may alias x. */
void k_silu_fwd(float *out, const float *x, size_t n);
void k_silu_bwd(float *dx, const float *dout, const float *x, size_t n); /* dx += */
void k_swiglu_fwd(float *h, const float *gate, const float *up, size_t n);
/* dgate += dh * up * silu'(gate); dup += dh * silu(gate). */
void k_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                  size_t n);

/* ---- loss and metrics (cross_entropy.c) ----------------------------------------------------
 * A row t is valid when targets[t] != ignore_index. For a valid row,
 *   loss[t] = logsumexp(logits[t,:]) - logits[t, targets[t]].
 * The returned loss is the weighted mean over valid rows: sum w[t] loss[t] / sum w[t]
 * (weights optional: NULL = all 1; e.g. DFlash's per-position decay). 0 when no valid row
 * (or all their weights are 0). A valid row whose target is outside [0, V) makes it NaN. */
float k_cross_entropy_fwd(float *losses /* [T], optional: 0 on invalid rows */,
                          const float *logits /* [T, V] */, const int32_t *targets /* [T] */,
                          const float *weights /* [T], optional */, int T, int V,
                          int32_t ignore_index);
/* Gradient of dloss * (the returned mean loss):
 *   dlogits[t,:] += dloss * w[t] / sum(w) * (softmax(logits[t,:]) - onehot(targets[t])). */
void k_cross_entropy_bwd(float *dlogits /* [T, V] */, const float *logits /* [T, V] */,
                         const int32_t *targets /* [T] */, const float *weights /* [T], opt. */,
                         int T, int V, int32_t ignore_index, float dloss);
/* pred[t] = argmax_v logits[t, v], the first index on ties (the target's next-token choice). */
void k_argmax(int32_t *pred /* [T] */, const float *logits /* [T, V] */, int T, int V);
/* Number of valid rows whose target ranks among the top k: rank = #{v: logit > logit[target]}
 * + #{v < target: logit == logit[target]} (ties broken like k_argmax), hit when rank < k.
 * n_valid (optional) receives the number of valid rows. Targets outside [0, V) never hit. */
int k_topk_hits(const float *logits /* [T, V] */, const int32_t *targets /* [T] */, int T,
                int V, int k, int32_t ignore_index, int *n_valid);
/* Fraction of valid rows with argmax == target (k_topk_hits with k = 1); 0 with no valid row. */
float k_accuracy(const float *logits, const int32_t *targets, int T, int V, int32_t ignore_index);
float k_topk_accuracy(const float *logits, const int32_t *targets, int T, int V, int k,
                      int32_t ignore_index);

/* ---- optimizer (adamw.c) -------------------------------------------------------------------
 * AdamW (decoupled weight decay, as torch.optim.AdamW), step = 1 for the first step:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mh = m / (1-b1^step);  vh = v / (1-b2^step);
 *   param -= lr * (mh / (sqrt(vh) + eps) + weight_decay * param). */
void k_adamw_step(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step);
/* Global L2 norm over a list of gradient tensors (accumulated in double). */
float k_grad_norm(const float *const *grads, const size_t *counts, int n_tensors);
/* Returns the global norm before clipping. When it exceeds max_norm (> 0), scales every
 * gradient by max_norm / (norm + 1e-6) (as torch.nn.utils.clip_grad_norm_). A non-finite norm
 * is returned with the gradients left untouched, so the caller can skip the step. */
float k_clip_grad_norm(float *const *grads, const size_t *counts, int n_tensors, float max_norm);

/* ---- bf16 (bf16.c) -------------------------------------------------------------------------
 * bf16 is the top 16 bits of an fp32. float -> bf16 rounds to nearest, ties to even; infinities
 * stay infinite, NaN stays NaN (quiet), finite values too large round to infinity. */
uint16_t k_bf16_from_float(float x);
float k_float_from_bf16(uint16_t b);
void k_float_to_bf16(uint16_t *out, const float *in, size_t n);
void k_bf16_to_float(float *out, const uint16_t *in, size_t n);

/* ---- hidden-state taps (taps.c) ------------------------------------------------------------
 * Concatenates tapped layers along the feature axis:
 *   out[t, i*d : (i+1)*d] = taps[i][t, :], i < n_taps, each taps[i] being [T, d].
 * The result is the drafter's fc input [T, n_taps*d]; the bf16 form is what the hidden-state
 * queue carries (pack and cast in one pass). */
void k_pack_taps(float *out /* [T, n_taps*d] */, const float *const *taps /* n_taps x [T, d] */,
                 int n_taps, int T, int d);
void k_pack_taps_bf16(uint16_t *out /* [T, n_taps*d] */, const float *const *taps, int n_taps,
                      int T, int d);

#ifdef __cplusplus
}
#endif

#endif /* STAGETRACE_KERNELS_H */
