/* cross_entropy.cu: the drafter's loss and metrics on the device (kernels/cross_entropy.c):
 * softmax cross-entropy forward (per-row losses and their weighted mean, reduced on the
 * device) and backward, argmax, top-k hit counts. One block per row of logits (fp32 or bf16),
 * a single pass with a running max and sum for the log-sum-exp. Nothing returns to the host:
 * the mean loss and the counts land in device scalars. */
#include <math.h>

#include "cuda_common.cuh"

#define ROW_THREADS 512
#define REDUCE_THREADS 1024

/* Running (max, sum of exp(x - max)) of a row: the log-sum-exp in one pass. */
struct max_sum {
    float m, s;
};

__device__ __forceinline__ max_sum ms_combine(max_sum a, max_sum b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY)
        return {m, 0.0f};
    float s = (a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m)) +
              (b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m));
    return {m, s};
}

/* log sum_v exp(row[v]) over the block; every thread gets it. */
template <typename T> __device__ float block_row_lse(const T *row, int V)
{
    __shared__ max_sum partial[32];
    max_sum acc = {-INFINITY, 0.0f};
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float x = kc_ld(row + v);
        if (x > acc.m) {
            acc.s = (acc.m == -INFINITY ? 0.0f : acc.s * expf(acc.m - x)) + 1.0f;
            acc.m = x;
        } else if (acc.m != -INFINITY) {
            acc.s += expf(x - acc.m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        max_sum other = {__shfl_xor_sync(0xffffffffu, acc.m, o),
                         __shfl_xor_sync(0xffffffffu, acc.s, o)};
        acc = ms_combine(acc, other);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        partial[warp] = acc;
    __syncthreads();
    acc = lane < n_warps ? partial[lane] : max_sum{-INFINITY, 0.0f};
    for (int o = 16; o > 0; o >>= 1) {
        max_sum other = {__shfl_xor_sync(0xffffffffu, acc.m, o),
                         __shfl_xor_sync(0xffffffffu, acc.s, o)};
        acc = ms_combine(acc, other);
    }
    if (acc.m == -INFINITY || acc.m == INFINITY)
        return acc.m;
    return acc.m + logf(acc.s);
}

template <typename T>
__global__ void ce_fwd_rows_kernel(float *losses, const T *logits, const int32_t *targets, int T_,
                                   int V, int32_t ignore_index)
{
    for (int t = blockIdx.x; t < T_; t += gridDim.x) {
        int32_t y = targets[t];
        if (y == ignore_index || y < 0 || y >= V) { /* block-uniform */
            if (threadIdx.x == 0)
                losses[t] = 0.0f;
            continue;
        }
        const T *row = logits + (size_t)t * V;
        float lse = block_row_lse(row, V);
        if (threadIdx.x == 0)
            losses[t] = lse - kc_ld(row + y);
    }
}

/* Weighted sum and total weight over valid rows (double), and whether a valid row has a target
 * outside [0, V). */
__device__ void weighted_totals(const float *losses, const int32_t *targets,
                                const float *weights, int T_, int V, int32_t ignore_index,
                                double *weighted_sum, double *weight_total, int *bad_target)
{
    double ws = 0.0, wt = 0.0;
    int bad = 0;
    for (int t = threadIdx.x; t < T_; t += blockDim.x) {
        int32_t y = targets[t];
        if (y == ignore_index)
            continue;
        double w = weights ? (double)weights[t] : 1.0;
        wt += w;
        if (y < 0 || y >= V)
            bad = 1;
        else if (losses)
            ws += w * (double)losses[t];
    }
    *weighted_sum = kc_block_sum(ws);
    *weight_total = kc_block_sum(wt);
    *bad_target = __syncthreads_or(bad);
}

__global__ void ce_fwd_reduce_kernel(float *loss, const float *losses, const int32_t *targets,
                                     const float *weights, int T_, int V, int32_t ignore_index)
{
    double ws, wt;
    int bad;
    weighted_totals(losses, targets, weights, T_, V, ignore_index, &ws, &wt, &bad);
    if (threadIdx.x == 0)
        *loss = bad ? NAN : (wt > 0.0 ? (float)(ws / wt) : 0.0f);
}

__global__ void ce_weight_total_kernel(float *weight_total, const int32_t *targets,
                                       const float *weights, int T_, int V,
                                       int32_t ignore_index)
{
    double ws, wt;
    int bad;
    weighted_totals(NULL, targets, weights, T_, V, ignore_index, &ws, &wt, &bad);
    if (threadIdx.x == 0)
        *weight_total = (float)wt;
}

template <typename T>
__global__ void ce_bwd_rows_kernel(T *dlogits, const T *logits, const int32_t *targets,
                                   const float *weights, int T_, int V, int32_t ignore_index,
                                   float dloss, const float *weight_total)
{
    float total = *weight_total;
    if (!(total > 0.0f))
        return;
    for (int t = blockIdx.x; t < T_; t += gridDim.x) {
        int32_t y = targets[t];
        if (y == ignore_index || y < 0 || y >= V) /* block-uniform */
            continue;
        float coef = (float)((double)dloss * (weights ? (double)weights[t] : 1.0) / total);
        if (coef == 0.0f)
            continue;
        const T *row = logits + (size_t)t * V;
        T *drow = dlogits + (size_t)t * V;
        float lse = block_row_lse(row, V);
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float g = coef * expf(kc_ld(row + v) - lse);
            if (v == y)
                g -= coef;
            kc_st(drow + v, kc_ld(drow + v) + g);
        }
    }
}

/* (value, index) with the CPU's order: larger value first, then smaller index. */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

template <typename T>
__global__ void argmax_kernel(int32_t *pred, const T *logits, int T_, int V)
{
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    for (int t = blockIdx.x; t < T_; t += gridDim.x) {
        const T *row = logits + (size_t)t * V;
        float bv = -INFINITY;
        int bi = V; /* sentinel: any real index wins a tie with it */
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float x = kc_ld(row + v);
            if (better(x, v, bv, bi))
                bv = x, bi = v;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
        __syncthreads();
        if (lane == 0) {
            best_v[warp] = bv;
            best_i[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            bv = lane < n_warps ? best_v[lane] : -INFINITY;
            bi = lane < n_warps ? best_i[lane] : V;
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (better(ov, oi, bv, bi))
                    bv = ov, bi = oi;
            }
            if (lane == 0)
                pred[t] = bi < V ? bi : 0; /* an all -inf (or NaN) row: 0, as the CPU */
        }
    }
}

/* rank = #{v: x > x_y} + #{v < y: x == x_y}; hit when rank < k. */
template <typename T>
__global__ void topk_kernel(int32_t *hits, int32_t *n_valid, const T *logits,
                            const int32_t *targets, int T_, int V, int k, int32_t ignore_index)
{
    int row_hits = 0, row_valid = 0; /* meaningful in thread 0 */
    for (int t = blockIdx.x; t < T_; t += gridDim.x) {
        int32_t y = targets[t];
        if (y == ignore_index) /* block-uniform */
            continue;
        row_valid++;
        if (y < 0 || y >= V)
            continue;
        const T *row = logits + (size_t)t * V;
        float ty = kc_ld(row + y);
        int rank = 0;
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float x = kc_ld(row + v);
            rank += x > ty || (x == ty && v < y);
        }
        rank = kc_block_sum(rank);
        row_hits += rank < k;
    }
    if (threadIdx.x == 0) {
        if (row_hits)
            atomicAdd(hits, row_hits);
        if (n_valid && row_valid)
            atomicAdd(n_valid, row_valid);
    }
}

static unsigned row_blocks(int T)
{
    return T < 65536 ? (unsigned)T : 65536u;
}

#define REQUIRE_LOGITS(fn, T, V, dtype)                                                        \
    do {                                                                                       \
        KC_REQUIRE((T) >= 0 && (V) > 0, fn ": T=%d V=%d", (T), (V));                           \
        KC_REQUIRE((dtype) == KC_F32 || (dtype) == KC_BF16, fn ": unknown logits dtype %d",    \
                   (int)(dtype));                                                              \
    } while (0)

extern "C" int kc_cross_entropy_fwd(float *loss, float *losses, const void *logits,
                                    kc_dtype logits_dtype, const int32_t *targets,
                                    const float *weights, int T, int V, int32_t ignore_index,
                                    cudaStream_t stream)
{
    REQUIRE_LOGITS("kc_cross_entropy_fwd", T, V, logits_dtype);
    KC_REQUIRE(loss && (T == 0 || (losses && logits && targets)),
               "kc_cross_entropy_fwd: NULL pointer (loss, losses, logits, targets required)");
    if (T > 0) {
        if (logits_dtype == KC_BF16)
            ce_fwd_rows_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
                losses, (const __nv_bfloat16 *)logits, targets, T, V, ignore_index);
        else
            ce_fwd_rows_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
                losses, (const float *)logits, targets, T, V, ignore_index);
        KC_LAUNCH_CHECK(stream, "ce_fwd_rows_kernel");
    }
    ce_fwd_reduce_kernel<<<1, REDUCE_THREADS, 0, stream>>>(loss, losses, targets, weights, T, V,
                                                           ignore_index);
    KC_LAUNCH_CHECK(stream, "ce_fwd_reduce_kernel");
    return K_OK;
}

extern "C" int kc_cross_entropy_bwd(void *dlogits, const void *logits, kc_dtype logits_dtype,
                                    const int32_t *targets, const float *weights, int T, int V,
                                    int32_t ignore_index, float dloss, float *weight_total,
                                    cudaStream_t stream)
{
    REQUIRE_LOGITS("kc_cross_entropy_bwd", T, V, logits_dtype);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(dlogits && logits && targets && weight_total,
               "kc_cross_entropy_bwd: NULL pointer");
    ce_weight_total_kernel<<<1, REDUCE_THREADS, 0, stream>>>(weight_total, targets, weights, T, V,
                                                             ignore_index);
    KC_LAUNCH_CHECK(stream, "ce_weight_total_kernel");
    if (logits_dtype == KC_BF16)
        ce_bwd_rows_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
            (__nv_bfloat16 *)dlogits, (const __nv_bfloat16 *)logits, targets, weights, T, V,
            ignore_index, dloss, weight_total);
    else
        ce_bwd_rows_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
            (float *)dlogits, (const float *)logits, targets, weights, T, V, ignore_index, dloss,
            weight_total);
    KC_LAUNCH_CHECK(stream, "ce_bwd_rows_kernel");
    return K_OK;
}

extern "C" int kc_argmax(int32_t *pred, const void *logits, kc_dtype logits_dtype, int T, int V,
                         cudaStream_t stream)
{
    REQUIRE_LOGITS("kc_argmax", T, V, logits_dtype);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(pred && logits, "kc_argmax: NULL pointer");
    if (logits_dtype == KC_BF16)
        argmax_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
            pred, (const __nv_bfloat16 *)logits, T, V);
    else
        argmax_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(pred, (const float *)logits, T,
                                                                 V);
    KC_LAUNCH_CHECK(stream, "argmax_kernel");
    return K_OK;
}

extern "C" int kc_topk_hits(int32_t *hits, int32_t *n_valid, const void *logits,
                            kc_dtype logits_dtype, const int32_t *targets, int T, int V, int k,
                            int32_t ignore_index, cudaStream_t stream)
{
    REQUIRE_LOGITS("kc_topk_hits", T, V, logits_dtype);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(hits && logits && targets, "kc_topk_hits: NULL pointer");
    if (logits_dtype == KC_BF16)
        topk_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
            hits, n_valid, (const __nv_bfloat16 *)logits, targets, T, V, k, ignore_index);
    else
        topk_kernel<<<row_blocks(T), ROW_THREADS, 0, stream>>>(
            hits, n_valid, (const float *)logits, targets, T, V, k, ignore_index);
    KC_LAUNCH_CHECK(stream, "topk_kernel");
    return K_OK;
}
