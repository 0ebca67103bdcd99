/* kernels_cuda.h: the GPU half of the trainer's kernels (prefix kc_), one function per CPU
 * reference op of kernels.h that the CUDA backend needs, with the same layouts and semantics,
 * so the trainer can swap backends. Included only by CUDA-aware code (C or C++).
 *
 * Conventions (hold for every function below unless its comment says otherwise):
 *  - Every tensor pointer is a DEVICE pointer, dense row-major with the shape named as in
 *    kernels.h ([T, H, hd]: last index fastest). Lists of tensors (taps, gradients) are HOST
 *    arrays of device pointers. Scalars passed by value are host values.
 *  - Every call is asynchronous on `stream` (0 = the legacy default stream): it enqueues work
 *    and returns; nothing syncs with the host, nothing allocates (except kc_blas_create).
 *    Results that the CPU version returns (loss, norms, counts, status) land in device
 *    scalars instead, so a step never waits for the GPU.
 *  - Dtypes: `kc_bf16` is bf16 storage (in C++ it is __nv_bfloat16, in C a uint16_t holding the
 *    bit pattern of k_bf16_from_float: the two are the same bytes). Activations and their
 *    gradients are bf16; weights used by matmuls are bf16 copies; master weights, parameter
 *    gradients, AdamW moments, per-row statistics (rstd, lse), losses and norms are fp32.
 *    Arithmetic is fp32 everywhere (fp64 where the CPU reference uses double for a
 *    reduction: grad norm, loss mean). bf16 results are rounded once, to nearest even, exactly
 *    as k_bf16_from_float does.
 *  - Backward ops ADD into every gradient (dx += ...), as on the CPU; for a bf16 gradient that
 *    is a read-modify-write rounded once to bf16.
 *  - Aliasing: as in kernels.h (out may alias x where the CPU op allows it).
 *  - Return value: K_OK (0); K_EINVAL (-1) for an argument out of range, with nothing
 *    launched; KC_ECUDA / KC_EBLAS when the CUDA runtime / cuBLAS refused a call (the message,
 *    with file:line and the library's own text, is printed to stderr and kept for
 *    kc_last_error()). Out-of-range DATA (a token id, an anchor) is not an error here: it is
 *    handled as the CPU op documents, and reported in a device counter where one is offered.
 *  - After every launch the library checks cudaGetLastError(). With KC_DEBUG_SYNC=1 in the
 *    environment (or kc_set_debug_sync(1)) it also synchronizes the stream after each launch
 *    (skipped while the stream is being captured into a graph), so that an asynchronous fault is
 *    reported by the op that caused it. Tests run that way; training runs should not.
 *
 * Agreement with the CPU reference fed the same (bf16-rounded) inputs, as checked by
 * tests/gpu/test_kernels_gpu.cu, |gpu - cpu| <= atol + rtol |cpu|:
 *  - exact: bf16 conversions, embedding, masks, taps packing, argmax, top-k counts;
 *  - fp32 outputs: ~1e-5 relative (rstd, lse, losses, mean loss, fp32 matmul with atol 1e-4,
 *    bias and rmsnorm dweight), 1e-6 for AdamW and the grad norm (same expressions, FMA
 *    contraction only); cross-entropy fp32 dlogits 1e-5 relative + 1e-5 of dloss/T;
 *  - bf16 outputs rounded once from fp32 math (add, silu/swiglu, rope, rmsnorm out):
 *    1e-2 relative (one bf16 ulp is <= 2^-7 relative) + 1e-5; bf16 outputs of reductions
 *    (matmul, attention out and gradients, rmsnorm dx): 1e-2 relative + 1e-3..1e-2 absolute
 *    on O(1) values (attention on tensor cores also rounds the probabilities to bf16).
 */
#ifndef STAGETRACE_KERNELS_CUDA_H
#define STAGETRACE_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels.h"

#ifdef __cplusplus
#include <cuda_bf16.h>
typedef __nv_bfloat16 kc_bf16;
extern "C" {
#else
typedef uint16_t kc_bf16;
#endif

#define KC_ECUDA (-2) /* a CUDA runtime call or kernel launch failed */
#define KC_EBLAS (-3) /* a cuBLAS / cuBLASLt call failed */

/* Storage dtype of the tensors whose dtype is a parameter (matmul output, logits, taps). */
typedef enum kc_dtype { KC_F32 = 0, KC_BF16 = 1 } kc_dtype;

/* ---- errors and debugging ------------------------------------------------------------------ */
/* The message of the last failure on the calling thread ("" when none). */
const char *kc_last_error(void);
/* on != 0: synchronize the stream after every launch (overrides KC_DEBUG_SYNC). */
void kc_set_debug_sync(int on);

/* ---- bf16 conversion (bf16.cu) --------------------------------------------------------------
 * Bit-exact with k_float_to_bf16 / k_bf16_to_float (round to nearest even; NaN stays a quiet
 * NaN with its sign and high payload; too large finite values round to infinity). */
int kc_float_to_bf16(kc_bf16 *out /* bf16 [n] */, const float *in /* fp32 [n] */, size_t n,
                     cudaStream_t stream);
int kc_bf16_to_float(float *out /* fp32 [n] */, const kc_bf16 *in /* bf16 [n] */, size_t n,
                     cudaStream_t stream);

/* ---- elementwise (elementwise.cu) ------------------------------------------------------------
 * out[i] = a[i] + b[i] (the sum in fp32, rounded once). out may alias a or b. */
int kc_add_bf16(kc_bf16 *out, const kc_bf16 *a, const kc_bf16 *b, size_t n,
                cudaStream_t stream);
int kc_add_f32(float *out, const float *a, const float *b, size_t n, cudaStream_t stream);
/* silu / SwiGLU as k_silu_* / k_swiglu_*; every tensor bf16 [n]; out may alias x. */
int kc_silu_fwd(kc_bf16 *out, const kc_bf16 *x, size_t n, cudaStream_t stream);
int kc_silu_bwd(kc_bf16 *dx /* += */, const kc_bf16 *dout, const kc_bf16 *x, size_t n,
                cudaStream_t stream);
int kc_swiglu_fwd(kc_bf16 *h, const kc_bf16 *gate, const kc_bf16 *up, size_t n,
                  cudaStream_t stream);
int kc_swiglu_bwd(kc_bf16 *dgate /* += */, kc_bf16 *dup /* += */, const kc_bf16 *dh,
                  const kc_bf16 *gate, const kc_bf16 *up, size_t n, cudaStream_t stream);

/* ---- embedding (embedding.cu) ----------------------------------------------------------------
 * out[t, :] = table[tokens[t], :]; a token outside [0, vocab) gives a zero row and adds 1 to
 * *n_bad (device int32, optional: NULL counts nothing). */
int kc_embedding_fwd(kc_bf16 *out /* bf16 [T, d] */, const int32_t *tokens /* int32 [T] */,
                     const kc_bf16 *table /* bf16 [vocab, d] */, int T, int d, int vocab,
                     int32_t *n_bad /* int32 [1], optional, += */, cudaStream_t stream);

/* ---- rmsnorm (rmsnorm.cu) --------------------------------------------------------------------
 * As k_rmsnorm_fwd / k_rmsnorm_bwd. The sum of squares is fp32 (the CPU's is double). */
int kc_rmsnorm_fwd(kc_bf16 *out /* bf16 [T, d] */, float *rstd /* fp32 [T], optional */,
                   const kc_bf16 *x /* bf16 [T, d] */, const float *weight /* fp32 [d] */,
                   int T, int d, float eps, cudaStream_t stream);
/* dx += ...; dweight += ... (fp32, optional; summed per block of 16 rows in shared memory,
 * then one atomicAdd per column and block, so d <= 12288 when dweight is given).
 * rstd: the forward's, or NULL to recompute. */
int kc_rmsnorm_bwd(kc_bf16 *dx /* bf16 [T, d] */, float *dweight /* fp32 [d], optional */,
                   const kc_bf16 *dout /* bf16 [T, d] */, const kc_bf16 *x /* bf16 [T, d] */,
                   const float *weight /* fp32 [d] */, const float *rstd /* fp32 [T], opt. */,
                   int T, int d, float eps, cudaStream_t stream);

/* ---- matmul (matmul.cu): cuBLASLt, bf16 inputs, fp32 accumulation -------------------------
 * A kc_blas holds the cuBLAS and cuBLASLt handles, a 32 MiB workspace, a 16 MiB fp32 staging
 * buffer and a cache of matmul plans (descriptors + the chosen algorithm, keyed by shape, dtypes
 * and pointer alignment).
 * Create one per thread (it is not thread-safe) on the device it will run on; it may be used
 * with any stream of that device, but only one stream at a time (the workspace is shared).
 * kc_blas_destroy(NULL) is harmless. When cuBLASLt offers no algorithm for a shape, the call
 * falls back to cublasGemmEx plus a bias kernel (same results within tolerance).
 *
 * Semantics exactly as k_matmul / k_matmul_tn / k_matmul_nt (row-major; accumulate = 0:
 * C = result, accumulate != 0: C += result). A and B are bf16, C is fp32 or bf16 (c_dtype),
 * bias fp32. C is rounded once from the fp32 value (old C) + product + bias: a bf16 C that
 * accumulates or has a bias goes through the staging buffer in fp32 (cuBLASLt would round the
 * product to bf16 before adding C, and cannot fuse an fp32 bias into a bf16 output), which costs
 * one more pass over C. C must not overlap A, B or bias. */
typedef struct kc_blas kc_blas;
int kc_blas_create(kc_blas **out);
void kc_blas_destroy(kc_blas *blas);
/* Debugging/tests: force != 0 always takes the cublasGemmEx path. */
void kc_blas_force_gemmex(kc_blas *blas, int force);

/* C[M,N] (=|+=) A[M,K] @ B[K,N] + bias[N] (bias optional). */
int kc_matmul(kc_blas *blas, void *C /* c_dtype [M, N] */, kc_dtype c_dtype,
              const kc_bf16 *A /* bf16 [M, K] */, const kc_bf16 *B /* bf16 [K, N] */,
              const float *bias /* fp32 [N], optional */, int M, int K, int N, int accumulate,
              cudaStream_t stream);
/* C[M,N] (=|+=) A^T @ B, A stored [K, M], B [K, N]. */
int kc_matmul_tn(kc_blas *blas, void *C /* c_dtype [M, N] */, kc_dtype c_dtype,
                 const kc_bf16 *A /* bf16 [K, M] */, const kc_bf16 *B /* bf16 [K, N] */, int M,
                 int K, int N, int accumulate, cudaStream_t stream);
/* C[M,N] (=|+=) A @ B^T, A stored [M, K], B [N, K]. */
int kc_matmul_nt(kc_blas *blas, void *C /* c_dtype [M, N] */, kc_dtype c_dtype,
                 const kc_bf16 *A /* bf16 [M, K] */, const kc_bf16 *B /* bf16 [N, K] */, int M,
                 int K, int N, int accumulate, cudaStream_t stream);
/* dbias[n] += sum_m dC[m, n]. */
int kc_bias_bwd(float *dbias /* fp32 [N] */, const kc_bf16 *dC /* bf16 [M, N] */, int M, int N,
                cudaStream_t stream);

/* ---- attention masks (mask.cu) ---------------------------------------------------------------
 * Byte-identical to k_mask_causal_doc / k_mask_dflash_block (doc_ids, anchors, block_keep are
 * device arrays). A block whose anchor is outside [0, n_ctx) gets all-zero rows, as on the CPU;
 * the K_EINVAL that the CPU returns for it is not reported (that would need a host sync). */
int kc_mask_causal_doc(uint8_t *mask /* uint8 [T, T] */,
                       const int32_t *doc_ids /* int32 [T], optional */, int T,
                       cudaStream_t stream);
int kc_mask_dflash_block(uint8_t *mask /* uint8 [n_blocks*block_size, n_ctx + n_blocks*bs] */,
                         const int32_t *anchors /* int32 [n_blocks] */,
                         const uint8_t *block_keep /* uint8 [n_blocks], optional */,
                         const int32_t *doc_ids /* int32 [n_ctx], optional */, int n_ctx,
                         int n_blocks, int block_size, int window, cudaStream_t stream);

/* ---- attention (attention.cu) ------------------------------------------------------------------
 * As k_attention_fwd / k_attention_bwd (scale 1/sqrt(hd), explicit uint8 mask, NULL = all
 * allowed; a query with no allowed key gets out = 0, lse = -inf and no gradient).
 * Tiled, flash-style (no [Tq, Tk] scores in memory); tiles of the mask with no allowed entry are
 * skipped without loading K/V. The forward runs on bf16 tensor cores (fp32 accumulation, the
 * probabilities rounded to bf16 for the P.V product) when hd is a multiple of 16, else on CUDA
 * cores in fp32; the backward runs on CUDA cores in fp32.
 * Requires hd even and 2 <= hd <= 256, and q/k/v/out/dout (and the gradients) 4-byte aligned. */
int kc_attention_fwd(kc_bf16 *out /* bf16 [Tq, H, hd] */, float *lse /* fp32 [Tq, H], opt. */,
                     const kc_bf16 *q /* bf16 [Tq, H, hd] */,
                     const kc_bf16 *k /* bf16 [Tk, H, hd] */,
                     const kc_bf16 *v /* bf16 [Tk, H, hd] */,
                     const uint8_t *mask /* uint8 [Tq, Tk], optional */, int Tq, int Tk, int H,
                     int hd, cudaStream_t stream);
/* Tests/benchmarks: on = 0 makes the forward use the CUDA-core kernel for every hd (default 1). */
void kc_attention_use_tensor_cores(int on);
/* dq, dk, dv += gradients given dout; out and lse are the forward's. delta is scratch
 * (it receives dout . out per query row and head); dq may not alias dk or dv. */
int kc_attention_bwd(kc_bf16 *dq /* bf16 [Tq, H, hd] */, kc_bf16 *dk /* bf16 [Tk, H, hd] */,
                     kc_bf16 *dv /* bf16 [Tk, H, hd] */,
                     const kc_bf16 *dout /* bf16 [Tq, H, hd] */, const kc_bf16 *q,
                     const kc_bf16 *k, const kc_bf16 *v,
                     const kc_bf16 *out /* bf16 [Tq, H, hd] */,
                     const float *lse /* fp32 [Tq, H] */,
                     const uint8_t *mask /* uint8 [Tq, Tk], optional */,
                     float *delta /* fp32 [Tq, H] scratch */, int Tq, int Tk, int H, int hd,
                     cudaStream_t stream);

/* ---- causal-document attention forward (attention_doc.cu) --------------------------------------
 * B sequences of T tokens, packed: q, k, v, out are [B*T, H, hd] (token b*T + t), doc_ids
 * int32 [B*T] (optional; NULL = plain causal). Query t of sequence b attends to key j of the
 * same sequence iff j <= t and j, ..., t all carry the same doc id (a document is a run of equal
 * consecutive ids): exactly k_mask_causal_doc + k_attention_fwd per sequence whenever an id
 * does not reappear after a different one (the trainer's ids only increase). Scale
 * 1/sqrt(hd); lse (natural log, optional) as k_attention_fwd's; a query with no allowed key
 * gets out = 0, lse = -inf (cannot happen here: every query sees itself).
 * hd 64 or 128 with q/k/v/out 16-byte aligned (lse 4-byte): one launch, flash-attention
 * style on tensor cores (bf16 products, fp32 softmax and accumulation, P rounded to bf16 for
 * P.V), no mask in memory; mask_scratch is not touched and may be NULL.
 * Any other hd (or alignment): per sequence kc_mask_causal_doc into mask_scratch (uint8
 * [T, T], required then, else K_EINVAL) and kc_attention_fwd, in stream order. */
int kc_attention_fwd_causal_doc(kc_bf16 *out /* bf16 [B*T, H, hd] */,
                                float *lse /* fp32 [B*T, H], optional */,
                                const kc_bf16 *q /* bf16 [B*T, H, hd] */,
                                const kc_bf16 *k /* bf16 [B*T, H, hd] */,
                                const kc_bf16 *v /* bf16 [B*T, H, hd] */,
                                const int32_t *doc_ids /* int32 [B*T], optional */,
                                uint8_t *mask_scratch /* uint8 [T, T], fallback only */, int B,
                                int T, int H, int hd, cudaStream_t stream);
/* Tests/benchmarks: on != 0 sends every kc_attention_fwd_causal_doc call to the explicit-mask
 * path (default 0). */
void kc_attention_causal_doc_use_fallback(int on);

/* ---- rotary position embedding (rope.cu) -------------------------------------------------------
 * As k_rope_fwd / k_rope_bwd (angles in double, like the CPU). out may alias x. */
int kc_rope_fwd(kc_bf16 *out /* bf16 [T, H, hd] */, const kc_bf16 *x /* bf16 [T, H, hd] */,
                const int32_t *positions /* int32 [T] */, int T, int H, int hd, float theta,
                cudaStream_t stream);
int kc_rope_bwd(kc_bf16 *dx /* bf16 [T, H, hd], += */, const kc_bf16 *dout /* bf16 */,
                const int32_t *positions /* int32 [T] */, int T, int H, int hd, float theta,
                cudaStream_t stream);

/* ---- loss and metrics (cross_entropy.cu) ------------------------------------------------------
 * logits (and dlogits) are fp32 or bf16 (logits_dtype); logits must be finite.
 * Forward: losses[t] as k_cross_entropy_fwd's (0 on invalid rows) and *loss = the weighted
 * mean (0 with no valid row or zero total weight, NaN when a valid row's target is outside
 * [0, V)). Both are written (=), on the device. */
int kc_cross_entropy_fwd(float *loss /* fp32 [1] */, float *losses /* fp32 [T], required */,
                         const void *logits /* [T, V] */, kc_dtype logits_dtype,
                         const int32_t *targets /* int32 [T] */,
                         const float *weights /* fp32 [T], optional */, int T, int V,
                         int32_t ignore_index, cudaStream_t stream);
/* dlogits += dloss * w[t] / sum(w) * (softmax(logits[t]) - onehot(targets[t])), as
 * k_cross_entropy_bwd. weight_total is scratch (receives sum(w) over valid rows). */
int kc_cross_entropy_bwd(void *dlogits /* [T, V], logits_dtype */,
                         const void *logits /* [T, V] */, kc_dtype logits_dtype,
                         const int32_t *targets /* int32 [T] */,
                         const float *weights /* fp32 [T], optional */, int T, int V,
                         int32_t ignore_index, float dloss, float *weight_total /* fp32 [1] */,
                         cudaStream_t stream);
/* pred[t] = argmax_v logits[t, v], the first index on ties (as k_argmax). */
int kc_argmax(int32_t *pred /* int32 [T] */, const void *logits /* [T, V] */,
              kc_dtype logits_dtype, int T, int V, cudaStream_t stream);
/* Adds (+=) to *hits the number of valid rows whose target ranks among the top k (ranking as
 * k_topk_hits; k = 1 is accuracy), and to *n_valid (optional) the number of valid rows. The
 * counters are device int32 that the caller zeroes when a metrics window starts. */
int kc_topk_hits(int32_t *hits /* int32 [1], += */, int32_t *n_valid /* int32 [1], +=, opt. */,
                 const void *logits /* [T, V] */, kc_dtype logits_dtype,
                 const int32_t *targets /* int32 [T] */, int T, int V, int k,
                 int32_t ignore_index, cudaStream_t stream);

/* ---- optimizer (adamw.cu) ----------------------------------------------------------------------
 * AdamW step exactly as k_adamw_step on fp32 param, grad, m, v (bias corrections computed on
 * the host in double, like the CPU), with two additions:
 *  - grad_scale (device fp32 [1], optional): the gradient used is grad[i] * *grad_scale (the
 *    clip coefficient from kc_clip_grad_norm, without a second pass over the gradients). When
 *    *grad_scale is not finite (the gradient norm was not finite) the step does nothing.
 *  - param_bf16 (optional): receives bf16(param) after the update, the copy the matmuls use. */
int kc_adamw_step(float *param /* fp32 [n] */, const float *grad /* fp32 [n] */,
                  float *m /* fp32 [n] */, float *v /* fp32 [n] */, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step,
                  const float *grad_scale /* fp32 [1], optional */,
                  kc_bf16 *param_bf16 /* bf16 [n], optional */, cudaStream_t stream);

/* Global L2 norm of a list of fp32 gradient tensors, and its clip coefficient, on the device:
 *   *norm = sqrt(sum of squares) (accumulated in double, deterministic order);
 *   *clip_scale = max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm, 1 when not
 *   clipping, NaN when the norm is not finite.
 * scale_in_place != 0 also multiplies every gradient by *clip_scale when it is finite and not 1
 * (k_clip_grad_norm's behaviour: a non-finite norm leaves the gradients untouched); 0 leaves
 * them, for kc_adamw_step's grad_scale. partials is scratch. Any number of tensors. */
#define KC_GRAD_NORM_PARTIALS 512
int kc_clip_grad_norm(float *const *grads /* host array of n_tensors device fp32 pointers */,
                      const size_t *counts /* host [n_tensors] */, int n_tensors,
                      float max_norm, int scale_in_place, float *norm /* fp32 [1] */,
                      float *clip_scale /* fp32 [1] */,
                      double *partials /* fp64 [KC_GRAD_NORM_PARTIALS] scratch */,
                      cudaStream_t stream);

/* ---- hidden-state taps (taps.cu) ---------------------------------------------------------------
 * out[t, i*d : (i+1)*d] = taps[i][t, :] (as k_pack_taps / k_pack_taps_bf16), converting from
 * taps_dtype to out_dtype (bf16 -> bf16 and fp32 -> fp32 copy exactly; fp32 -> bf16 rounds as
 * k_float_to_bf16). Any number of taps. */
int kc_pack_taps(void *out /* out_dtype [T, n_taps*d] */, kc_dtype out_dtype,
                 const void *const *taps /* host array of n_taps device [T, d] pointers */,
                 kc_dtype taps_dtype, int n_taps, int T, int d, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* STAGETRACE_KERNELS_CUDA_H */
