/* ops_cuda.cu: the trainer's own device kernels (see ops_cuda.h) and the error reporting of
 * check_cuda.h. Arithmetic follows the CPU reference formulas (model.c and the C files of
 * kernels/) in fp32, bf16 results rounded once to nearest even; the elementwise kernels of the
 * target forward move bf16 pairs (bf16x2) when the row lengths allow it (bandwidth-bound). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "check_cuda.h"
#include "ops_cuda.h"

/* ---- error reporting (check_cuda.h) ------------------------------------------------------------ */

int tr_debug_sync(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *a = getenv("KC_DEBUG_SYNC"), *b = getenv("TR_DEBUG_SYNC");
        cached = (a && *a && strcmp(a, "0")) || (b && *b && strcmp(b, "0"));
    }
    return cached;
}

/* "kc_matmul(blas, ...)" -> "kc_matmul": the call's text is long, its function name enough. */
static void function_name(char *out, size_t size, const char *call)
{
    size_t n = strcspn(call, "(");
    if (n >= size)
        n = size - 1;
    memcpy(out, call, n);
    out[n] = '\0';
}

int tr_cuda_fail(cudaError_t err, const char *what, const char *file, int line)
{
    char fn[64];
    function_name(fn, sizeof fn, what);
    tr_backend_set_error("%s:%d: %s: %s (%s)", file, line, fn, cudaGetErrorString(err),
                         cudaGetErrorName(err));
    return -1;
}

int tr_kc_fail(int rc, const char *what, const char *file, int line)
{
    char fn[64];
    function_name(fn, sizeof fn, what);
    const char *msg = kc_last_error();
    tr_backend_set_error("%s:%d: %s returned %d: %s", file, line, fn, rc,
                         msg && *msg ? msg : "(no message)");
    return -1;
}

int tr_launch_check(cudaStream_t stream, const char *what, const char *file, int line)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess && tr_debug_sync()) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
            capturing == cudaStreamCaptureStatusNone)
            err = cudaStreamSynchronize(stream);
    }
    if (err != cudaSuccess) {
        tr_backend_set_error("%s:%d: kernel %s: %s (%s)", file, line, what,
                             cudaGetErrorString(err), cudaGetErrorName(err));
        return -1;
    }
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------------ */

#define GRID_STRIDE(i, n)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)(n);            \
         i += (size_t)gridDim.x * blockDim.x)

static unsigned grid_for(size_t n, int threads)
{
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks < 1)
        blocks = 1;
    if (blocks > (1u << 20))
        blocks = 1u << 20;
    return (unsigned)blocks;
}

__device__ __forceinline__ float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ __nv_bfloat16 bf(float x) { return __float2bfloat16_rn(x); }

/* block-wide sum (blockDim.x a multiple of 32); every thread gets it */
__device__ float block_sum(float x)
{
    __shared__ float partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if (lane == 0)
        partial[warp] = x;
    __syncthreads();
    float total = lane < n_warps ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        total += __shfl_xor_sync(0xffffffffu, total, o);
    return total;
}

/* ---- seeded initialisation ---------------------------------------------------------------------- */

__global__ void fill_normal_bf16_kernel(__nv_bfloat16 *dst, int rows, int cols, size_t ld_dst,
                                        uint64_t state0, uint64_t first, float std)
{
    size_t n = (size_t)rows * cols;
    GRID_STRIDE(e, n)
    {
        size_t r = e / (size_t)cols, c = e % (size_t)cols;
        dst[r * ld_dst + c] = bf(std * op_normal_at(state0, first + e));
    }
}

__global__ void fill_normal_f32_kernel(float *dst, size_t n, uint64_t state0, uint64_t first,
                                       float std)
{
    GRID_STRIDE(e, n) dst[e] = std * op_normal_at(state0, first + e);
}

__global__ void fill_f32_kernel(float *dst, size_t n, float value)
{
    GRID_STRIDE(e, n) dst[e] = value;
}

int op_fill_normal_bf16(kc_bf16 *dst, int rows, int cols, size_t ld, uint64_t state0,
                        uint64_t first_normal, float std, cudaStream_t stream)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return 0;
    fill_normal_bf16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, rows, cols, ld, state0,
                                                                  first_normal, std);
    TR_LAUNCH(stream, "fill_normal_bf16_kernel");
    return 0;
}

int op_fill_normal_f32(float *dst, size_t n, uint64_t state0, uint64_t first_normal, float std,
                       cudaStream_t stream)
{
    if (n == 0)
        return 0;
    fill_normal_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, n, state0, first_normal,
                                                                 std);
    TR_LAUNCH(stream, "fill_normal_f32_kernel");
    return 0;
}

int op_fill_f32(float *dst, size_t n, float value, cudaStream_t stream)
{
    if (n == 0)
        return 0;
    fill_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, n, value);
    TR_LAUNCH(stream, "fill_f32_kernel");
    return 0;
}

/* ---- target forward ------------------------------------------------------------------------------ */

__global__ void embed_f32_kernel(float *x, const int32_t *tokens, const __nv_bfloat16 *table,
                                 int T, int d, int vocab, int32_t *n_bad)
{
    size_t n = (size_t)T * d;
    GRID_STRIDE(e, n)
    {
        int t = (int)(e / (size_t)d), c = (int)(e % (size_t)d);
        int32_t tok = tokens[t];
        bool ok = tok >= 0 && tok < vocab;
        x[e] = ok ? ld(table + (size_t)tok * d + c) : 0.0f;
        if (!ok && c == 0 && n_bad)
            atomicAdd(n_bad, 1);
    }
}

int op_embed_f32(float *x, const int32_t *tokens, const kc_bf16 *table, int T, int d, int vocab,
                 int32_t *n_bad, cudaStream_t stream)
{
    size_t n = (size_t)T * d;
    if (n == 0)
        return 0;
    embed_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, tokens, table, T, d, vocab, n_bad);
    TR_LAUNCH(stream, "embed_f32_kernel");
    return 0;
}

#define RMS_THREADS 256

/* one block per row; VEC = 4: float4 loads and bf16x2 pairs of stores (d % 4 == 0) */
template <int VEC>
__global__ void __launch_bounds__(RMS_THREADS)
    rmsnorm_f32_bf16_kernel(__nv_bfloat16 *out, const float *x, const float *weight, int T, int d,
                            float eps)
{
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        const float *xr = x + (size_t)t * d;
        __nv_bfloat16 *yr = out + (size_t)t * d;
        float sum_sq = 0.0f;
        if (VEC == 4) {
            const float4 *x4 = reinterpret_cast<const float4 *>(xr);
            for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
                float4 v = x4[i];
                sum_sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
        } else {
            for (int i = threadIdx.x; i < d; i += blockDim.x)
                sum_sq += xr[i] * xr[i];
        }
        sum_sq = block_sum(sum_sq);
        float r = 1.0f / sqrtf(sum_sq / (float)d + eps);
        if (VEC == 4) {
            const float4 *x4 = reinterpret_cast<const float4 *>(xr);
            __nv_bfloat162 *y2 = reinterpret_cast<__nv_bfloat162 *>(yr);
            for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
                float4 v = x4[i];
                float w0 = 1.0f, w1 = 1.0f, w2 = 1.0f, w3 = 1.0f;
                if (weight) {
                    w0 = weight[4 * i], w1 = weight[4 * i + 1];
                    w2 = weight[4 * i + 2], w3 = weight[4 * i + 3];
                }
                __nv_bfloat162 a, b;
                a.x = bf(v.x * r * w0);
                a.y = bf(v.y * r * w1);
                b.x = bf(v.z * r * w2);
                b.y = bf(v.w * r * w3);
                y2[2 * i] = a;
                y2[2 * i + 1] = b;
            }
        } else {
            for (int i = threadIdx.x; i < d; i += blockDim.x)
                yr[i] = bf(xr[i] * r * (weight ? weight[i] : 1.0f));
        }
    }
}

int op_rmsnorm_f32_bf16(kc_bf16 *out, const float *x, const float *weight, int T, int d,
                        float eps, cudaStream_t stream)
{
    if (T == 0 || d == 0)
        return 0;
    unsigned grid = (unsigned)(T < 65535 * 16 ? T : 65535 * 16);
    bool vec = d % 4 == 0 && ((uintptr_t)x & 15u) == 0 && ((uintptr_t)out & 3u) == 0;
    if (vec)
        rmsnorm_f32_bf16_kernel<4><<<grid, RMS_THREADS, 0, stream>>>(out, x, weight, T, d, eps);
    else
        rmsnorm_f32_bf16_kernel<1><<<grid, RMS_THREADS, 0, stream>>>(out, x, weight, T, d, eps);
    TR_LAUNCH(stream, "rmsnorm_f32_bf16_kernel");
    return 0;
}

__global__ void rope_table_kernel(float2 *cs, const int32_t *positions, int T, int hd,
                                  float theta)
{
    int half = hd / 2;
    size_t n = (size_t)T * half;
    GRID_STRIDE(e, n)
    {
        int t = (int)(e / (size_t)half), p = (int)(e % (size_t)half);
        /* kc_rope_fwd's rope_angle, exactly */
        double angle = (double)positions[t] * pow((double)theta, -2.0 * p / hd);
        double sn, c;
        sincos(angle, &sn, &c);
        cs[e] = make_float2((float)c, (float)sn);
    }
}

int op_rope_table(float2 *cs, const int32_t *positions, int T, int hd, float theta,
                  cudaStream_t stream)
{
    size_t n = (size_t)T * (hd / 2);
    if (n == 0)
        return 0;
    rope_table_kernel<<<grid_for(n, 256), 256, 0, stream>>>(cs, positions, T, hd, theta);
    TR_LAUNCH(stream, "rope_table_kernel");
    return 0;
}

/* One thread per (t, h, pair of rotation indices p, p+1) when VEC == 2 (hd/2 even), else per
 * (t, h, p). The rotation pairs (p, p + hd/2) as in kc_rope_fwd. */
template <int VEC>
__global__ void qkv_split_rope_kernel(__nv_bfloat16 *q, __nv_bfloat16 *k, __nv_bfloat16 *v,
                                      const __nv_bfloat16 *qkv, const float2 *cs, int T, int H,
                                      int hd)
{
    const int half = hd / 2, per_head = half / VEC, D = H * hd;
    size_t n = (size_t)T * H * per_head;
    GRID_STRIDE(e, n)
    {
        int t = (int)(e / ((size_t)H * per_head));
        int rem = (int)(e % ((size_t)H * per_head));
        int h = rem / per_head, p = (rem % per_head) * VEC;
        const __nv_bfloat16 *row = qkv + (size_t)t * 3 * D;
        size_t col = (size_t)h * hd + p, out0 = (size_t)t * D + col;
        if (VEC == 2) {
            float2 c0 = cs[(size_t)t * half + p], c1 = cs[(size_t)t * half + p + 1];
#pragma unroll
            for (int which = 0; which < 2; which++) {
                const __nv_bfloat16 *src = row + which * D;
                __nv_bfloat16 *dst = which == 0 ? q : k;
                float2 a = __bfloat1622float2(
                    *reinterpret_cast<const __nv_bfloat162 *>(src + col));
                float2 b = __bfloat1622float2(
                    *reinterpret_cast<const __nv_bfloat162 *>(src + col + half));
                __nv_bfloat162 lo, hi;
                lo.x = bf(a.x * c0.x - b.x * c0.y);
                lo.y = bf(a.y * c1.x - b.y * c1.y);
                hi.x = bf(a.x * c0.y + b.x * c0.x);
                hi.y = bf(a.y * c1.y + b.y * c1.x);
                *reinterpret_cast<__nv_bfloat162 *>(dst + out0) = lo;
                *reinterpret_cast<__nv_bfloat162 *>(dst + out0 + half) = hi;
            }
            *reinterpret_cast<__nv_bfloat162 *>(v + out0) =
                *reinterpret_cast<const __nv_bfloat162 *>(row + 2 * D + col);
            *reinterpret_cast<__nv_bfloat162 *>(v + out0 + half) =
                *reinterpret_cast<const __nv_bfloat162 *>(row + 2 * D + col + half);
        } else {
            float2 c = cs[(size_t)t * half + p];
#pragma unroll
            for (int which = 0; which < 2; which++) {
                const __nv_bfloat16 *src = row + which * D;
                __nv_bfloat16 *dst = which == 0 ? q : k;
                float x0 = ld(src + col), x1 = ld(src + col + half);
                dst[out0] = bf(x0 * c.x - x1 * c.y);
                dst[out0 + half] = bf(x0 * c.y + x1 * c.x);
            }
            v[out0] = row[2 * D + col];
            v[out0 + half] = row[2 * D + col + half];
        }
    }
}

int op_qkv_split_rope(kc_bf16 *q, kc_bf16 *k, kc_bf16 *v, const kc_bf16 *qkv, const float2 *cs,
                      int T, int H, int hd, cudaStream_t stream)
{
    size_t n = (size_t)T * H * (hd / 2);
    if (n == 0)
        return 0;
    bool vec = (hd / 2) % 2 == 0 &&
               (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)qkv) & 3u) == 0;
    if (vec)
        qkv_split_rope_kernel<2><<<grid_for(n / 2, 256), 256, 0, stream>>>(
            (__nv_bfloat16 *)q, (__nv_bfloat16 *)k, (__nv_bfloat16 *)v,
            (const __nv_bfloat16 *)qkv, cs, T, H, hd);
    else
        qkv_split_rope_kernel<1><<<grid_for(n, 256), 256, 0, stream>>>(
            (__nv_bfloat16 *)q, (__nv_bfloat16 *)k, (__nv_bfloat16 *)v,
            (const __nv_bfloat16 *)qkv, cs, T, H, hd);
    TR_LAUNCH(stream, "qkv_split_rope_kernel");
    return 0;
}

__device__ __forceinline__ float swiglu1(float g, float u)
{
    return g * (1.0f / (1.0f + expf(-g))) * u; /* kc_swiglu_fwd's expression */
}

template <int VEC>
__global__ void swiglu_rows_kernel(__nv_bfloat16 *act, const __nv_bfloat16 *gu, int T, int F)
{
    const int per_row = F / VEC;
    size_t n = (size_t)T * per_row;
    GRID_STRIDE(e, n)
    {
        int t = (int)(e / (size_t)per_row), j = (int)(e % (size_t)per_row) * VEC;
        const __nv_bfloat16 *row = gu + (size_t)t * 2 * F;
        if (VEC == 2) {
            float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(row + j));
            float2 u =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(row + F + j));
            __nv_bfloat162 o;
            o.x = bf(swiglu1(g.x, u.x));
            o.y = bf(swiglu1(g.y, u.y));
            *reinterpret_cast<__nv_bfloat162 *>(act + (size_t)t * F + j) = o;
        } else {
            act[(size_t)t * F + j] = bf(swiglu1(ld(row + j), ld(row + F + j)));
        }
    }
}

int op_swiglu_rows(kc_bf16 *act, const kc_bf16 *gu, int T, int F, cudaStream_t stream)
{
    size_t n = (size_t)T * F;
    if (n == 0)
        return 0;
    bool vec = F % 2 == 0 && (((uintptr_t)act | (uintptr_t)gu) & 3u) == 0;
    if (vec)
        swiglu_rows_kernel<2><<<grid_for(n / 2, 256), 256, 0, stream>>>(
            (__nv_bfloat16 *)act, (const __nv_bfloat16 *)gu, T, F);
    else
        swiglu_rows_kernel<1><<<grid_for(n, 256), 256, 0, stream>>>(
            (__nv_bfloat16 *)act, (const __nv_bfloat16 *)gu, T, F);
    TR_LAUNCH(stream, "swiglu_rows_kernel");
    return 0;
}

/* ---- drafter ---------------------------------------------------------------------------------------- */

/* one block per block row */
__global__ void drafter_blocks_kernel(__nv_bfloat16 *x0, int32_t *block_pos, int32_t *labels,
                                      const int32_t *anchors, const int32_t *tokens,
                                      const int32_t *doc_ids, const int32_t *positions,
                                      const int32_t *predictions, const __nv_bfloat16 *embed,
                                      const float *mask_embed, const float *pos_embed,
                                      const __nv_bfloat16 *ctx, int S, int T, int A, int bs,
                                      int d, int vocab)
{
    const int row = blockIdx.x;
    const int r = row % bs, blk = row / bs, s = blk / A;
    const int a = anchors[blk];
    const int32_t *doc = doc_ids + (size_t)s * T;
    int32_t tok = tokens[(size_t)s * T + a];
    if (tok < 0 || tok >= vocab)
        tok = 0;
    int ctx_row = (!ctx || a < 1 || doc[a - 1] != doc[a]) ? -1 : s * T + a - 1;
    __nv_bfloat16 *xr = x0 + (size_t)row * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float src = r == 0 ? ld(embed + (size_t)tok * d + c) : mask_embed[c];
        float x = src + pos_embed[(size_t)r * d + c];
        if (ctx_row >= 0)
            x += ld(ctx + (size_t)ctx_row * d + c);
        xr[c] = bf(x);
    }
    if (threadIdx.x == 0) {
        block_pos[row] = positions[(size_t)s * T + a] + r;
        labels[row] = doc[a + r] == doc[a] ? predictions[(size_t)s * T + a + r] : -1;
    }
}

int op_drafter_blocks(kc_bf16 *x0, int32_t *block_pos, int32_t *labels, const int32_t *anchors,
                      const int32_t *tokens, const int32_t *doc_ids, const int32_t *positions,
                      const int32_t *predictions, const kc_bf16 *embed, const float *mask_embed,
                      const float *pos_embed, const kc_bf16 *ctx, int S, int T, int A, int bs,
                      int d, int vocab, cudaStream_t stream)
{
    int rows = S * A * bs;
    if (rows == 0)
        return 0;
    drafter_blocks_kernel<<<rows, 128, 0, stream>>>(
        (__nv_bfloat16 *)x0, block_pos, labels, anchors, tokens, doc_ids, positions,
        predictions, (const __nv_bfloat16 *)embed, mask_embed, pos_embed,
        (const __nv_bfloat16 *)ctx, S, T, A, bs, d, vocab);
    TR_LAUNCH(stream, "drafter_blocks_kernel");
    return 0;
}

__global__ void key_positions_kernel(int32_t *key_pos, const int32_t *positions,
                                     const int32_t *anchors, int S, int T, int A, int bs)
{
    const int TK = T + A * bs;
    size_t n = (size_t)S * TK;
    GRID_STRIDE(e, n)
    {
        int s = (int)(e / (size_t)TK), j = (int)(e % (size_t)TK);
        if (j < T) {
            key_pos[e] = positions[(size_t)s * T + j];
        } else {
            int jj = j - T, b = jj / bs, r = jj % bs;
            key_pos[e] = positions[(size_t)s * T + anchors[s * A + b]] + r;
        }
    }
}

int op_key_positions(int32_t *key_pos, const int32_t *positions, const int32_t *anchors, int S,
                     int T, int A, int bs, cudaStream_t stream)
{
    size_t n = (size_t)S * (T + A * bs);
    if (n == 0)
        return 0;
    key_positions_kernel<<<grid_for(n, 256), 256, 0, stream>>>(key_pos, positions, anchors, S,
                                                               T, A, bs);
    TR_LAUNCH(stream, "key_positions_kernel");
    return 0;
}

/* thread per (r, c): sum over the blocks, in block order */
__global__ void block_pos_grads_kernel(float *g_pos, float *scratch, const __nv_bfloat16 *dx,
                                       int n_blocks, int bs, int d)
{
    size_t n = (size_t)bs * d;
    GRID_STRIDE(e, n)
    {
        int r = (int)(e / (size_t)d), c = (int)(e % (size_t)d);
        float acc = 0.0f;
        for (int b = 0; b < n_blocks; b++)
            acc += ld(dx + ((size_t)b * bs + r) * d + c);
        g_pos[e] += acc;
        scratch[e] = acc;
    }
}

__global__ void block_mask_grads_kernel(float *g_mask, const float *scratch, int bs, int d)
{
    GRID_STRIDE(c, d)
    {
        float acc = 0.0f;
        for (int r = 1; r < bs; r++)
            acc += scratch[(size_t)r * d + c];
        g_mask[c] += acc;
    }
}

int op_block_input_grads(float *g_pos, float *g_mask, float *scratch, const kc_bf16 *dx,
                         int n_blocks, int bs, int d, cudaStream_t stream)
{
    size_t n = (size_t)bs * d;
    if (n == 0)
        return 0;
    block_pos_grads_kernel<<<grid_for(n, 256), 256, 0, stream>>>(
        g_pos, scratch, (const __nv_bfloat16 *)dx, n_blocks, bs, d);
    TR_LAUNCH(stream, "block_pos_grads_kernel");
    block_mask_grads_kernel<<<grid_for((size_t)d, 256), 256, 0, stream>>>(g_mask, scratch, bs, d);
    TR_LAUNCH(stream, "block_mask_grads_kernel");
    return 0;
}

/* thread per (s, c); the blocks of a sequence in order, so that two blocks with the same
 * anchor add into the same context row one after the other */
__global__ void ctx_row_grads_kernel(__nv_bfloat16 *dctx, const __nv_bfloat16 *dx,
                                     const int32_t *anchors, const int32_t *doc_ids, int S, int T,
                                     int A, int bs, int d)
{
    size_t n = (size_t)S * d;
    GRID_STRIDE(e, n)
    {
        int s = (int)(e / (size_t)d), c = (int)(e % (size_t)d);
        const int32_t *doc = doc_ids + (size_t)s * T;
        for (int b = 0; b < A; b++) {
            int a = anchors[s * A + b];
            if (a < 1 || doc[a - 1] != doc[a])
                continue;
            float sum = 0.0f;
            for (int r = 0; r < bs; r++)
                sum += ld(dx + (((size_t)s * A + b) * bs + r) * d + c);
            __nv_bfloat16 *dst = dctx + ((size_t)s * T + a - 1) * d + c;
            *dst = bf(ld(dst) + sum);
        }
    }
}

int op_ctx_row_grads(kc_bf16 *dctx, const kc_bf16 *dx, const int32_t *anchors,
                     const int32_t *doc_ids, int S, int T, int A, int bs, int d,
                     cudaStream_t stream)
{
    size_t n = (size_t)S * d;
    if (n == 0)
        return 0;
    ctx_row_grads_kernel<<<grid_for(n, 256), 256, 0, stream>>>(
        (__nv_bfloat16 *)dctx, (const __nv_bfloat16 *)dx, anchors, doc_ids, S, T, A, bs, d);
    TR_LAUNCH(stream, "ctx_row_grads_kernel");
    return 0;
}

/* ---- device scalars ------------------------------------------------------------------------------ */

__global__ void add_scalar_kernel(float *acc, const float *x)
{
    *acc += *x;
}

__global__ void count_nonfinite_kernel(int32_t *count, const float *x)
{
    if (!isfinite(*x))
        *count += 1;
}

int op_add_scalar(float *acc, const float *x, cudaStream_t stream)
{
    add_scalar_kernel<<<1, 1, 0, stream>>>(acc, x);
    TR_LAUNCH(stream, "add_scalar_kernel");
    return 0;
}

int op_count_nonfinite(int32_t *count, const float *x, cudaStream_t stream)
{
    count_nonfinite_kernel<<<1, 1, 0, stream>>>(count, x);
    TR_LAUNCH(stream, "count_nonfinite_kernel");
    return 0;
}
