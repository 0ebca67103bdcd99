/* ops_cuda.h: the trainer's own device kernels, the glue that kernels/ (kernels_cuda.h) does not
 * offer because it is specific to this model's layout on the GPU:
 *  - seeded initialisation that draws the very same numbers as model.c (splitmix64 is a
 *    counter-based generator: draw k of a stream is a function of k alone, so each element is
 *    computed independently, and the CPU and CUDA backends start from the same weights);
 *  - the target forward's fused pieces: embedding into the fp32 residual stream, RMSNorm from
 *    the fp32 residual to bf16, a per-forward RoPE table, the split of the fused QKV product
 *    with RoPE applied, SwiGLU over the fused gate|up product;
 *  - the drafter's block inputs (DFlash anchors), key positions, and the gradients of the
 *    block-input parameters;
 *  - device scalars: sums of losses, counts of skipped steps.
 * Every function enqueues on `stream` and returns 0, or -1 with the backend error set. Device
 * pointers throughout; the layouts are model.c's. C++ only (included by .cu files). */
#ifndef TR_OPS_CUDA_H
#define TR_OPS_CUDA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels_cuda.h"

/* ---- seeded initialisation (rng.h) ------------------------------------------------------------
 * Draw k (0-based) of the stream whose state is state0: tr_rng_next adds the golden gamma to
 * the state, then mixes. Host and device (the host side lets tests check the indexing). */
static __host__ __device__ inline uint64_t op_splitmix_at(uint64_t state0, uint64_t draw)
{
    uint64_t z = state0 + (draw + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Normal number i of the stream: tr_rng_normal over draws 2i and 2i+1. */
static __host__ __device__ inline float op_normal_at(uint64_t state0, uint64_t i)
{
    double u1 = (double)(op_splitmix_at(state0, 2 * i) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(op_splitmix_at(state0, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The stream whose state after tr_rng_stream() is state0 yields, for normal number i (0-based),
 * tr_rng_normal() over draws 2i and 2i+1, exactly as fill_normal() in model.c consumes them.
 * dst[r * ld + c] = std * normal(first_normal + r * cols + c), rounded to bf16. */
int op_fill_normal_bf16(kc_bf16 *dst, int rows, int cols, size_t ld, uint64_t state0,
                        uint64_t first_normal, float std, cudaStream_t stream);
/* dst[i] = std * normal(first_normal + i), fp32. */
int op_fill_normal_f32(float *dst, size_t n, uint64_t state0, uint64_t first_normal, float std,
                       cudaStream_t stream);
int op_fill_f32(float *dst, size_t n, float value, cudaStream_t stream);

/* ---- target forward ---------------------------------------------------------------------------
 * x[t, :] = float(table[tokens[t], :]); a token outside [0, vocab) gives a zero row and adds 1
 * to *n_bad. */
int op_embed_f32(float *x /* [T, d] */, const int32_t *tokens, const kc_bf16 *table, int T, int d,
                 int vocab, int32_t *n_bad, cudaStream_t stream);
/* out = bf16(x * rstd(x) * weight) with x the fp32 residual; weight NULL = all ones. */
int op_rmsnorm_f32_bf16(kc_bf16 *out /* [T, d] */, const float *x /* [T, d] */,
                        const float *weight, int T, int d, float eps, cudaStream_t stream);
/* cs[t * hd/2 + p] = (cos, sin) of positions[t] * theta^(-2p/hd), computed in double as
 * kc_rope_fwd does, rounded to float. Shared by every layer of one forward. */
int op_rope_table(float2 *cs /* [T, hd/2] */, const int32_t *positions, int T, int hd,
                  float theta, cudaStream_t stream);
/* From qkv [T, 3*H*hd] (columns q | k | v): q and k rotated with the table, v copied, each into
 * its own dense [T, H, hd] tensor (what kc_attention_fwd reads). */
int op_qkv_split_rope(kc_bf16 *q, kc_bf16 *k, kc_bf16 *v, const kc_bf16 *qkv, const float2 *cs,
                      int T, int H, int hd, cudaStream_t stream);
/* act[t, j] = silu(gu[t, j]) * gu[t, F + j]: SwiGLU over the fused [T, 2F] gate|up product. */
int op_swiglu_rows(kc_bf16 *act /* [T, F] */, const kc_bf16 *gu /* [T, 2F] */, int T, int F,
                   cudaStream_t stream);

/* ---- drafter ------------------------------------------------------------------------------------
 * Block inputs of the sampled anchors (model.c drafter_blocks), rows ((s*A + b)*bs + r):
 *   x0 = bf16((r == 0 ? embed[x[a]] : mask_embed) + pos_embed[r] (+ ctx[a-1] when ctx is
 *        given, the MLP-only drafter, and a-1 is in a's document));
 *   block_pos = pos[a] + r; labels = predictions[a + r] when a + r is in a's document, else -1.
 * tokens .. predictions: [S*T]; anchors [S*A]. */
int op_drafter_blocks(kc_bf16 *x0, int32_t *block_pos, int32_t *labels, const int32_t *anchors,
                      const int32_t *tokens, const int32_t *doc_ids, const int32_t *positions,
                      const int32_t *predictions, const kc_bf16 *embed, const float *mask_embed,
                      const float *pos_embed, const kc_bf16 *ctx, int S, int T, int A, int bs,
                      int d, int vocab, cudaStream_t stream);
/* key_pos[s, j] (j < S*(T + A*bs)): positions of the context rows, then of the block rows. */
int op_key_positions(int32_t *key_pos, const int32_t *positions, const int32_t *anchors, int S,
                     int T, int A, int bs, cudaStream_t stream);
/* g_pos[r] += sum over blocks of dx[block, r]; g_mask += sum over r >= 1 of the same sums.
 * scratch: fp32 [bs * d]. */
int op_block_input_grads(float *g_pos, float *g_mask, float *scratch, const kc_bf16 *dx,
                         int n_blocks, int bs, int d, cudaStream_t stream);
/* MLP-only drafter: dctx[a-1] += sum_r dx[block, r] for each block whose a-1 is in a's doc. */
int op_ctx_row_grads(kc_bf16 *dctx, const kc_bf16 *dx, const int32_t *anchors,
                     const int32_t *doc_ids, int S, int T, int A, int bs, int d,
                     cudaStream_t stream);

/* ---- device scalars ------------------------------------------------------------------------ */
int op_add_scalar(float *acc, const float *x, cudaStream_t stream);               /* *acc += *x */
int op_count_nonfinite(int32_t *count, const float *x, cudaStream_t stream); /* += !finite(*x) */

#endif
