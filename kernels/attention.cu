/* attention.cu: masked multi-head attention forward and backward on the device
 * (kernels/attention.c): bf16 q, k, v, out and gradients; fp32 scores, softmax statistics and
 * accumulators; an explicit uint8 mask [Tq, Tk].
 *
 * Design: tiled and flash-style. Nothing of size [Tq, Tk] is ever materialized except the
 * caller's mask.
 *  - Forward, hd a multiple of 16: attn_fwd_tc_kernel, on tensor cores (described there).
 *  - Forward, other hd (and with kc_attention_use_tensor_cores(0)), on CUDA cores: a block
 *    of 8 warps owns 32 queries of one head (4 per warp) and walks the keys in tiles of 64.
 *    Per tile it first stages the [32 x 64] slice of the mask in shared memory; when that
 *    slice has no allowed entry (most tiles of a causal or DFlash block mask) the tile is
 *    skipped without touching K or V. Otherwise K and V are staged in shared memory as fp32,
 *    and each warp, per 32-key sub-tile (also skipped when its own queries allow none of those
 *    keys): lane j computes the 4 scores of key j (one dot product each), the warp updates the
 *    running max / sum (online softmax, base-2 exponent), writes the 32 probabilities to
 *    shared memory, and lane d accumulates out[:, d] += p_j v_j[d] for its head dims
 *    d = lane + 32 r. The row's log-sum-exp is saved for the backward.
 *  - Backward, on CUDA cores, two kernels, no atomics:
 *      dq:    the forward's layout (block = 32 queries of one head); it also computes
 *             delta_i = dout_i . out_i (kept in the caller's scratch for the next kernel);
 *             per allowed (i, j): p = exp(s - lse_i), ds = p (dout_i . v_j - delta_i) scale,
 *             dq_i += ds k_j.
 *      dk/dv: transposed: a block owns 32 keys of one head (4 per warp) and walks the queries
 *             in tiles of 64 (lane = query in the score phase, lane = head dim in the
 *             accumulation phase): dv_j += p dout_i, dk_j += ds q_i.
 *    Each recomputes p from q, k and the saved lse (as the CPU backward does).
 *  - Shared-memory rows are padded to an odd number of float4s, so that the 32 lanes reading
 *    32 different rows as float4 hit distinct banks.
 * A query with no allowed key (lse = -inf) gets out = 0 and contributes no gradient. */
#include <math.h>

#include <atomic>

#include <mma.h>

#include "cuda_common.cuh"

#define NW 8            /* warps per block */
#define THREADS (NW * 32)
#define QPW 4           /* queries per warp (forward, dq) */
#define BQ (NW * QPW)   /* queries per block: 32 */
#define BK 64           /* keys per tile (forward, dq) */
#define KPW 4           /* keys per warp (dk/dv) */
#define BKV (NW * KPW)  /* keys per block: 32 */
#define BQ2 64          /* queries per tile (dk/dv) */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

struct attn_dims {
    int Tq, Tk, H, hd;
    int ld;      /* shared-memory row stride in floats (a multiple of 4) */
    int hd4;     /* float4s that hold the head dims: ceil(hd / 4) */
    int mask_vec; /* mask rows can be read 16 bytes at a time (Tk % 16 == 0, aligned) */
    float scale; /* 1 / sqrt(hd) */
};

/* Stage rows [r0, r0 + n_rows) of head h of a [T, H, hd] bf16 tensor as fp32 rows of stride
 * ld; the padding dims and rows past T are zero. bf16x2 loads (hd is even). */
__device__ void load_rows(float *dst, const __nv_bfloat16 *src, int r0, int n_rows, int T,
                          const attn_dims &D, int h)
{
    int pairs = D.ld / 2;
    for (int e = threadIdx.x; e < n_rows * pairs; e += blockDim.x) {
        int r = e / pairs, c = e % pairs;
        int t = r0 + r;
        float2 x = make_float2(0.0f, 0.0f);
        if (t < T && 2 * c < D.hd)
            x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(
                src + ((size_t)t * D.H + h) * D.hd + 2 * c));
        *reinterpret_cast<float2 *>(dst + r * D.ld + 2 * c) = x;
    }
}

/* Stage mask[i0 .. i0+rows, j0 .. j0+cols] (0 outside the matrix; NULL mask = all allowed) and
 * return, to every thread, whether any entry is allowed. Contains a barrier. */
__device__ bool load_mask_tile(uint8_t *dst, const uint8_t *mask, int i0, int rows, int j0,
                               int cols, const attn_dims &D)
{
    int any = 0;
    if (mask && D.mask_vec) { /* cols and j0 are multiples of 16, dst 16-byte aligned */
        int chunks = cols / 16;
        for (int e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
            int r = e / chunks, c = e % chunks;
            int i = i0 + r, j = j0 + 16 * c;
            uint4 x = make_uint4(0u, 0u, 0u, 0u);
            if (i < D.Tq && j < D.Tk) /* Tk % 16 == 0: the whole chunk is inside */
                x = *reinterpret_cast<const uint4 *>(mask + (size_t)i * D.Tk + j);
            *reinterpret_cast<uint4 *>(dst + r * cols + 16 * c) = x;
            any |= (x.x | x.y | x.z | x.w) != 0u;
        }
        return __syncthreads_or(any) != 0;
    }
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        int r = e / cols, c = e % cols;
        int i = i0 + r, j = j0 + c;
        uint8_t allow = 0;
        if (i < D.Tq && j < D.Tk)
            allow = mask ? (uint8_t)(mask[(size_t)i * D.Tk + j] != 0) : (uint8_t)1;
        dst[e] = allow;
        any |= allow;
    }
    return __syncthreads_or(any) != 0;
}

__device__ __forceinline__ float dot4(float4 a, float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* component u of a float4 (u a compile-time constant after unrolling) */
__device__ __forceinline__ float part(float4 a, int u)
{
    return u == 0 ? a.x : u == 1 ? a.y : u == 2 ? a.z : a.w;
}

__device__ __forceinline__ float4 row4(const float *base, int row, int ld, int d4)
{
    return reinterpret_cast<const float4 *>(base + row * ld)[d4];
}

/* ---- forward ------------------------------------------------------------------------------ */
template <int HPL> /* head dims per lane: hd <= 32 * HPL */
__global__ void __launch_bounds__(THREADS)
    attn_fwd_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                    const __nv_bfloat16 *k, const __nv_bfloat16 *v, const uint8_t *mask,
                    attn_dims D)
{
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); /* [BQ][ld] */
    float *Ks = Qs + BQ * D.ld;                   /* [BK][ld] */
    float *Vs = Ks + BK * D.ld;                   /* [BK][ld] */
    float *Ps = Vs + BK * D.ld;                   /* [NW][QPW][32] */
    uint8_t *Ms = reinterpret_cast<uint8_t *>(Ps + NW * QPW * 32); /* [BQ][BK] */

    const int h = blockIdx.y, i0 = blockIdx.x * BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale_log2 = D.scale * LOG2E;
    float *Pw = Ps + warp * QPW * 32;

    load_rows(Qs, q, i0, BQ, D.Tq, D, h);

    float row_max[QPW], row_sum[QPW], acc[QPW][HPL];
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        row_max[a] = -INFINITY;
        row_sum[a] = 0.0f;
#pragma unroll
        for (int r = 0; r < HPL; r++)
            acc[a][r] = 0.0f;
    }

    for (int j0 = 0; j0 < D.Tk; j0 += BK) {
        __syncthreads(); /* the previous tile is no longer read */
        if (!load_mask_tile(Ms, mask, i0, BQ, j0, BK, D))
            continue;
        load_rows(Ks, k, j0, BK, D.Tk, D, h);
        load_rows(Vs, v, j0, BK, D.Tk, D, h);
        __syncthreads();
        for (int sub = 0; sub < BK; sub += 32) {
            const int jl = sub + lane; /* this lane's key in the tile */
            bool allowed[QPW];
            bool any = false;
#pragma unroll
            for (int a = 0; a < QPW; a++) {
                allowed[a] = Ms[(warp * QPW + a) * BK + jl] != 0;
                any |= allowed[a];
            }
            if (!__any_sync(0xffffffffu, any))
                continue;
            float s[QPW];
#pragma unroll
            for (int a = 0; a < QPW; a++)
                s[a] = 0.0f;
            const float4 *krow = reinterpret_cast<const float4 *>(Ks + jl * D.ld);
            for (int d4 = 0; d4 < D.hd4; d4++) {
                float4 kv = krow[d4];
#pragma unroll
                for (int a = 0; a < QPW; a++)
                    s[a] += dot4(row4(Qs, warp * QPW + a, D.ld, d4), kv);
            }
#pragma unroll
            for (int a = 0; a < QPW; a++) {
                float x = allowed[a] ? s[a] * scale_log2 : -INFINITY;
                float new_max = fmaxf(row_max[a], kc_warp_max(x));
                float p = 0.0f, correction = 1.0f;
                if (new_max != -INFINITY) { /* warp-uniform */
                    p = exp2f(x - new_max); /* 0 for a masked key */
                    correction = exp2f(row_max[a] - new_max); /* 0 while the max was -inf */
                }
                row_sum[a] = row_sum[a] * correction + kc_warp_sum(p);
                row_max[a] = new_max;
#pragma unroll
                for (int r = 0; r < HPL; r++)
                    acc[a][r] *= correction;
                Pw[a * 32 + lane] = p;
            }
            __syncwarp();
            for (int jj = 0; jj < 32; jj += 4) {
                float4 p4[QPW];
#pragma unroll
                for (int a = 0; a < QPW; a++)
                    p4[a] = *reinterpret_cast<const float4 *>(Pw + a * 32 + jj);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float *vrow = Vs + (sub + jj + u) * D.ld;
#pragma unroll
                    for (int r = 0; r < HPL; r++) {
                        int d = lane + 32 * r;
                        float vd = d < D.hd ? vrow[d] : 0.0f;
#pragma unroll
                        for (int a = 0; a < QPW; a++) {
                            acc[a][r] += part(p4[a], u) * vd;
                        }
                    }
                }
            }
            __syncwarp(); /* Pw is rewritten by the next sub-tile */
        }
    }

#pragma unroll
    for (int a = 0; a < QPW; a++) {
        int i = i0 + warp * QPW + a;
        if (i >= D.Tq)
            continue;
        float inv = row_sum[a] > 0.0f ? 1.0f / row_sum[a] : 0.0f;
        __nv_bfloat16 *orow = out + ((size_t)i * D.H + h) * D.hd;
#pragma unroll
        for (int r = 0; r < HPL; r++) {
            int d = lane + 32 * r;
            if (d < D.hd)
                orow[d] = kc_f2bf(acc[a][r] * inv);
        }
        if (lse && lane == 0)
            lse[(size_t)i * D.H + h] =
                row_sum[a] > 0.0f ? (row_max[a] + log2f(row_sum[a])) * LN2 : -INFINITY;
    }
}

/* ---- backward: dq (and delta) ------------------------------------------------------------- */
template <int HPL>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dq_kernel(__nv_bfloat16 *dq, float *delta, const __nv_bfloat16 *dout,
                       const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                       const __nv_bfloat16 *out, const float *lse, const uint8_t *mask,
                       attn_dims D)
{
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); /* [BQ][ld] */
    float *dOs = Qs + BQ * D.ld;                  /* [BQ][ld] */
    float *Ks = dOs + BQ * D.ld;                  /* [BK][ld] */
    float *Vs = Ks + BK * D.ld;                   /* [BK][ld] */
    float *Ps = Vs + BK * D.ld;                   /* [NW][QPW][32]: ds */
    uint8_t *Ms = reinterpret_cast<uint8_t *>(Ps + NW * QPW * 32); /* [BQ][BK] */

    const int h = blockIdx.y, i0 = blockIdx.x * BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale_log2 = D.scale * LOG2E;
    float *Pw = Ps + warp * QPW * 32;

    load_rows(Qs, q, i0, BQ, D.Tq, D, h);
    load_rows(dOs, dout, i0, BQ, D.Tq, D, h);

    float lse2[QPW], row_delta[QPW], acc[QPW][HPL];
    bool row_live[QPW];
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        int i = i0 + warp * QPW + a;
        float l = i < D.Tq ? lse[(size_t)i * D.H + h] : -INFINITY;
        row_live[a] = l != -INFINITY;
        lse2[a] = l * LOG2E;
        float part = 0.0f; /* delta_i = dout_i . out_i, in the CPU's fp32 */
        if (i < D.Tq) {
            const __nv_bfloat16 *orow = out + ((size_t)i * D.H + h) * D.hd;
            const __nv_bfloat16 *dorow = dout + ((size_t)i * D.H + h) * D.hd;
            for (int d = lane; d < D.hd; d += 32)
                part += kc_ld(dorow + d) * kc_ld(orow + d);
        }
        row_delta[a] = kc_warp_sum(part);
        if (i < D.Tq && lane == 0)
            delta[(size_t)i * D.H + h] = row_delta[a];
#pragma unroll
        for (int r = 0; r < HPL; r++)
            acc[a][r] = 0.0f;
    }

    for (int j0 = 0; j0 < D.Tk; j0 += BK) {
        __syncthreads();
        if (!load_mask_tile(Ms, mask, i0, BQ, j0, BK, D))
            continue;
        load_rows(Ks, k, j0, BK, D.Tk, D, h);
        load_rows(Vs, v, j0, BK, D.Tk, D, h);
        __syncthreads();
        for (int sub = 0; sub < BK; sub += 32) {
            const int jl = sub + lane;
            bool allowed[QPW];
            bool any = false;
#pragma unroll
            for (int a = 0; a < QPW; a++) {
                allowed[a] = row_live[a] && Ms[(warp * QPW + a) * BK + jl] != 0;
                any |= allowed[a];
            }
            if (!__any_sync(0xffffffffu, any))
                continue;
            float s[QPW], dp[QPW];
#pragma unroll
            for (int a = 0; a < QPW; a++)
                s[a] = dp[a] = 0.0f;
            const float4 *krow = reinterpret_cast<const float4 *>(Ks + jl * D.ld);
            const float4 *vrow = reinterpret_cast<const float4 *>(Vs + jl * D.ld);
            for (int d4 = 0; d4 < D.hd4; d4++) {
                float4 kv = krow[d4], vv = vrow[d4];
#pragma unroll
                for (int a = 0; a < QPW; a++) {
                    s[a] += dot4(row4(Qs, warp * QPW + a, D.ld, d4), kv);
                    dp[a] += dot4(row4(dOs, warp * QPW + a, D.ld, d4), vv);
                }
            }
#pragma unroll
            for (int a = 0; a < QPW; a++) {
                float p = allowed[a] ? exp2f(s[a] * scale_log2 - lse2[a]) : 0.0f;
                Pw[a * 32 + lane] = p * (dp[a] - row_delta[a]) * D.scale;
            }
            __syncwarp();
            for (int jj = 0; jj < 32; jj += 4) {
                float4 ds4[QPW];
#pragma unroll
                for (int a = 0; a < QPW; a++)
                    ds4[a] = *reinterpret_cast<const float4 *>(Pw + a * 32 + jj);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float *kr = Ks + (sub + jj + u) * D.ld;
#pragma unroll
                    for (int r = 0; r < HPL; r++) {
                        int d = lane + 32 * r;
                        float kd = d < D.hd ? kr[d] : 0.0f;
#pragma unroll
                        for (int a = 0; a < QPW; a++) {
                            acc[a][r] += part(ds4[a], u) * kd;
                        }
                    }
                }
            }
            __syncwarp();
        }
    }

#pragma unroll
    for (int a = 0; a < QPW; a++) {
        int i = i0 + warp * QPW + a;
        if (i >= D.Tq || !row_live[a])
            continue;
        __nv_bfloat16 *row = dq + ((size_t)i * D.H + h) * D.hd;
#pragma unroll
        for (int r = 0; r < HPL; r++) {
            int d = lane + 32 * r;
            if (d < D.hd)
                row[d] = kc_f2bf(kc_ld(row + d) + acc[a][r]);
        }
    }
}

/* ---- backward: dk, dv ------------------------------------------------------------------------ */
template <int HPL>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dkdv_kernel(__nv_bfloat16 *dk, __nv_bfloat16 *dv, const __nv_bfloat16 *dout,
                         const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                         const __nv_bfloat16 *v, const float *lse, const float *delta,
                         const uint8_t *mask, attn_dims D)
{
    extern __shared__ float4 smem4[];
    float *Ks = reinterpret_cast<float *>(smem4); /* [BKV][ld] */
    float *Vs = Ks + BKV * D.ld;                  /* [BKV][ld] */
    float *Qs = Vs + BKV * D.ld;                  /* [BQ2][ld] */
    float *dOs = Qs + BQ2 * D.ld;                 /* [BQ2][ld] */
    float *Ps = dOs + BQ2 * D.ld;                 /* [NW][KPW][32]: p */
    float *DSs = Ps + NW * KPW * 32;              /* [NW][KPW][32]: ds */
    float *lse2s = DSs + NW * KPW * 32;           /* [BQ2] */
    float *deltas = lse2s + BQ2;                  /* [BQ2] */
    uint8_t *Ms = reinterpret_cast<uint8_t *>(deltas + BQ2); /* [BQ2][BKV] */

    const int h = blockIdx.y, j0 = blockIdx.x * BKV;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale_log2 = D.scale * LOG2E;
    float *Pw = Ps + warp * KPW * 32, *DSw = DSs + warp * KPW * 32;

    load_rows(Ks, k, j0, BKV, D.Tk, D, h);
    load_rows(Vs, v, j0, BKV, D.Tk, D, h);

    float dk_acc[KPW][HPL], dv_acc[KPW][HPL];
#pragma unroll
    for (int c = 0; c < KPW; c++)
#pragma unroll
        for (int r = 0; r < HPL; r++)
            dk_acc[c][r] = dv_acc[c][r] = 0.0f;

    for (int i0 = 0; i0 < D.Tq; i0 += BQ2) {
        __syncthreads();
        if (!load_mask_tile(Ms, mask, i0, BQ2, j0, BKV, D))
            continue;
        load_rows(Qs, q, i0, BQ2, D.Tq, D, h);
        load_rows(dOs, dout, i0, BQ2, D.Tq, D, h);
        for (int r = threadIdx.x; r < BQ2; r += blockDim.x) {
            int i = i0 + r;
            lse2s[r] = i < D.Tq ? lse[(size_t)i * D.H + h] * LOG2E : -INFINITY;
            deltas[r] = i < D.Tq ? delta[(size_t)i * D.H + h] : 0.0f;
        }
        __syncthreads();
        for (int sub = 0; sub < BQ2; sub += 32) {
            const int il = sub + lane; /* this lane's query in the tile */
            const float l2 = lse2s[il];
            bool allowed[KPW];
            bool any = false;
#pragma unroll
            for (int c = 0; c < KPW; c++) {
                allowed[c] = l2 != -INFINITY && Ms[il * BKV + warp * KPW + c] != 0;
                any |= allowed[c];
            }
            if (!__any_sync(0xffffffffu, any))
                continue;
            float s[KPW], dp[KPW];
#pragma unroll
            for (int c = 0; c < KPW; c++)
                s[c] = dp[c] = 0.0f;
            const float4 *qrow = reinterpret_cast<const float4 *>(Qs + il * D.ld);
            const float4 *dorow = reinterpret_cast<const float4 *>(dOs + il * D.ld);
            for (int d4 = 0; d4 < D.hd4; d4++) {
                float4 qv = qrow[d4], dov = dorow[d4];
#pragma unroll
                for (int c = 0; c < KPW; c++) {
                    s[c] += dot4(qv, row4(Ks, warp * KPW + c, D.ld, d4));
                    dp[c] += dot4(dov, row4(Vs, warp * KPW + c, D.ld, d4));
                }
            }
            const float row_delta = deltas[il];
#pragma unroll
            for (int c = 0; c < KPW; c++) {
                float p = allowed[c] ? exp2f(s[c] * scale_log2 - l2) : 0.0f;
                Pw[c * 32 + lane] = p;
                DSw[c * 32 + lane] = p * (dp[c] - row_delta) * D.scale;
            }
            __syncwarp();
            for (int ii = 0; ii < 32; ii += 4) {
                float4 p4[KPW], ds4[KPW];
#pragma unroll
                for (int c = 0; c < KPW; c++) {
                    p4[c] = *reinterpret_cast<const float4 *>(Pw + c * 32 + ii);
                    ds4[c] = *reinterpret_cast<const float4 *>(DSw + c * 32 + ii);
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float *qr = Qs + (sub + ii + u) * D.ld;
                    const float *dor = dOs + (sub + ii + u) * D.ld;
#pragma unroll
                    for (int r = 0; r < HPL; r++) {
                        int d = lane + 32 * r;
                        float qd = d < D.hd ? qr[d] : 0.0f, dod = d < D.hd ? dor[d] : 0.0f;
#pragma unroll
                        for (int c = 0; c < KPW; c++) {
                            dv_acc[c][r] += part(p4[c], u) * dod;
                            dk_acc[c][r] += part(ds4[c], u) * qd;
                        }
                    }
                }
            }
            __syncwarp();
        }
    }

#pragma unroll
    for (int c = 0; c < KPW; c++) {
        int j = j0 + warp * KPW + c;
        if (j >= D.Tk)
            continue;
        __nv_bfloat16 *dkrow = dk + ((size_t)j * D.H + h) * D.hd;
        __nv_bfloat16 *dvrow = dv + ((size_t)j * D.H + h) * D.hd;
#pragma unroll
        for (int r = 0; r < HPL; r++) {
            int d = lane + 32 * r;
            if (d < D.hd) {
                dkrow[d] = kc_f2bf(kc_ld(dkrow + d) + dk_acc[c][r]);
                dvrow[d] = kc_f2bf(kc_ld(dvrow + d) + dv_acc[c][r]);
            }
        }
    }
}

/* ---- forward on tensor cores (hd a multiple of 16) ---------------------------------------------
 * Same tiling idea, with the two products on bf16 tensor cores (WMMA 16x16x16, fp32
 * accumulation) and the softmax in two passes instead of an online rescale, because a WMMA
 * accumulator's element-to-row mapping is opaque (the running output could not be rescaled in
 * registers):
 *   pass 1: S = Q K^T per key tile -> per-row max and sum of exp2 -> the row's lse (exact, fp32);
 *   pass 2: S again, P = exp2(S - lse) (already normalized) rounded to bf16, O += P V.
 * A block of 4 warps owns 64 queries of one head (16 per warp); key tiles of 64, skipped when
 * their mask slice is empty, as in the CUDA-core kernel. Q, K, V live in shared memory as bf16
 * with rows padded by 8 elements. P in bf16 adds at most 2^-9 relative error per term. */
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_BQ (TC_WARPS * 16) /* 64 queries per block */
#define TC_BK 64              /* keys per tile */
#define TC_SLD (TC_BK + 4)    /* fp32 row stride of a warp's S tile */
#define TC_PLD (TC_BK + 8)    /* bf16 row stride of a warp's P tile */

/* Stage rows [r0, r0 + n_rows) of head h as bf16 rows of stride ld (hd <= ld); rows past T are
 * zero. 16-byte copies: hd is a multiple of 16 and the tensors 16-byte aligned (checked by the
 * host), so every row starts 16-byte aligned. */
__device__ void load_rows_bf16(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int r0, int n_rows,
                               int T, int H, int hd, int ld, int h)
{
    int chunks = hd / 8;
    for (int e = threadIdx.x; e < n_rows * chunks; e += blockDim.x) {
        int r = e / chunks, c = e % chunks;
        int t = r0 + r;
        uint4 x = make_uint4(0u, 0u, 0u, 0u);
        if (t < T)
            x = *reinterpret_cast<const uint4 *>(src + ((size_t)t * H + h) * hd + 8 * c);
        *reinterpret_cast<uint4 *>(dst + r * ld + 8 * c) = x;
    }
}

/* S[16 x 64] = Q[warp's 16 rows] K^T for the staged key tile, stored row-major (fp32) in Sw. */
template <int MAXF>
__device__ __forceinline__ void tc_scores(float *Sw, const __nv_bfloat16 *Qw,
                                          const __nv_bfloat16 *Ks, int ld, int nf)
{
    using namespace nvcuda;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[TC_BK / 16];
#pragma unroll
    for (int n = 0; n < TC_BK / 16; n++)
        wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
    for (int kk = 0; kk < MAXF; kk++) {
        if (kk >= nf)
            break;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, Qw + kk * 16, ld);
#pragma unroll
        for (int n = 0; n < TC_BK / 16; n++) {
            /* K^T as a column-major 16 x 16 block: K rows n*16.., dims kk*16.. */
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
            wmma::load_matrix_sync(b, Ks + n * 16 * ld + kk * 16, ld);
            wmma::mma_sync(s[n], a, b, s[n]);
        }
    }
#pragma unroll
    for (int n = 0; n < TC_BK / 16; n++)
        wmma::store_matrix_sync(Sw + n * 16, s[n], TC_SLD, wmma::mem_row_major);
}

template <int MAXF> /* head dims in 16-wide fragments: hd <= 16 * MAXF */
__global__ void __launch_bounds__(TC_THREADS)
    attn_fwd_tc_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                       const __nv_bfloat16 *k, const __nv_bfloat16 *v, const uint8_t *mask,
                       attn_dims D)
{
    using namespace nvcuda;
    extern __shared__ float4 smem4[];
    const int ld = D.hd + 8; /* bf16 row stride: a multiple of 8, rows 32-byte aligned */
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem4); /* [TC_BQ][ld] */
    __nv_bfloat16 *Ks = Qs + TC_BQ * ld;                          /* [TC_BK][ld] */
    __nv_bfloat16 *Vs = Ks + TC_BK * ld;                          /* [TC_BK][ld] */
    float *Ss = reinterpret_cast<float *>(Vs + TC_BK * ld);       /* [warps][16][TC_SLD] */
    __nv_bfloat16 *Ps = reinterpret_cast<__nv_bfloat16 *>(Ss + TC_WARPS * 16 * TC_SLD);
    uint8_t *Ms = reinterpret_cast<uint8_t *>(Ps + TC_WARPS * 16 * TC_PLD); /* [BQ][BK] */

    const int h = blockIdx.y, i0 = blockIdx.x * TC_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nf = D.hd / 16;
    const float scale_log2 = D.scale * LOG2E;
    const __nv_bfloat16 *Qw = Qs + warp * 16 * ld;
    float *Sw = Ss + warp * 16 * TC_SLD;
    __nv_bfloat16 *Pw = Ps + warp * 16 * TC_PLD;
    /* softmax phase: lane owns columns lane and lane + 32 of the warp's 16 rows (conflict-free
     * shared-memory accesses, 16 independent rows in flight) */
    const uint8_t *Mw = Ms + warp * 16 * TC_BK;

    load_rows_bf16(Qs, q, i0, TC_BQ, D.Tq, D.H, D.hd, ld, h);

    /* pass 1: each row's max and sum of exp2, each lane over its 2 columns of every tile */
    float run_max[16], run_sum[16];
#pragma unroll
    for (int r = 0; r < 16; r++)
        run_max[r] = -INFINITY, run_sum[r] = 0.0f;
    for (int j0 = 0; j0 < D.Tk; j0 += TC_BK) {
        __syncthreads();
        if (!load_mask_tile(Ms, mask, i0, TC_BQ, j0, TC_BK, D))
            continue;
        load_rows_bf16(Ks, k, j0, TC_BK, D.Tk, D.H, D.hd, ld, h);
        __syncthreads();
        tc_scores<MAXF>(Sw, Qw, Ks, ld, nf);
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 16; r++) {
#pragma unroll
            for (int c = lane; c < TC_BK; c += 32) {
                if (!Mw[r * TC_BK + c])
                    continue;
                float x = Sw[r * TC_SLD + c] * scale_log2;
                if (x > run_max[r]) {
                    run_sum[r] = run_sum[r] * exp2f(run_max[r] - x) + 1.0f; /* 0 * exp2(-inf) */
                    run_max[r] = x;
                } else {
                    run_sum[r] += exp2f(x - run_max[r]);
                }
            }
        }
        __syncwarp();
    }
    /* the 32 lanes of each row meet; every lane gets every row's lse (log2 domain) */
    float row_lse2[16];
#pragma unroll
    for (int r = 0; r < 16; r++) {
        float m = kc_warp_max(run_max[r]);
        float part = run_max[r] == -INFINITY ? 0.0f : run_sum[r] * exp2f(run_max[r] - m);
        float sum = m == -INFINITY ? 0.0f : kc_warp_sum(part);
        row_lse2[r] = sum > 0.0f ? m + log2f(sum) : -INFINITY;
    }
    if (lse && lane < 16) {
        int i = i0 + warp * 16 + lane;
        float mine = row_lse2[0];
#pragma unroll
        for (int r = 1; r < 16; r++)
            if (lane == r)
                mine = row_lse2[r];
        if (i < D.Tq)
            lse[(size_t)i * D.H + h] = mine == -INFINITY ? -INFINITY : mine * LN2;
    }

    /* pass 2: O = sum_j exp2(S - lse) V */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[MAXF];
#pragma unroll
    for (int f = 0; f < MAXF; f++)
        wmma::fill_fragment(o[f], 0.0f);
    for (int j0 = 0; j0 < D.Tk; j0 += TC_BK) {
        __syncthreads();
        if (!load_mask_tile(Ms, mask, i0, TC_BQ, j0, TC_BK, D))
            continue;
        load_rows_bf16(Ks, k, j0, TC_BK, D.Tk, D.H, D.hd, ld, h);
        load_rows_bf16(Vs, v, j0, TC_BK, D.Tk, D.H, D.hd, ld, h);
        __syncthreads();
        tc_scores<MAXF>(Sw, Qw, Ks, ld, nf);
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 16; r++) {
#pragma unroll
            for (int c = lane; c < TC_BK; c += 32) {
                float p = Mw[r * TC_BK + c] && row_lse2[r] != -INFINITY
                              ? exp2f(Sw[r * TC_SLD + c] * scale_log2 - row_lse2[r])
                              : 0.0f;
                Pw[r * TC_PLD + c] = __float2bfloat16_rn(p);
            }
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::load_matrix_sync(a, Pw + kk * 16, TC_PLD);
#pragma unroll
            for (int f = 0; f < MAXF; f++) {
                if (f >= nf)
                    break;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                wmma::load_matrix_sync(b, Vs + kk * 16 * ld + f * 16, ld);
                wmma::mma_sync(o[f], a, b, o[f]);
            }
        }
    }

    /* O through shared memory (the K and V tiles' space) to global bf16 */
    __syncthreads();
    float *Ow = reinterpret_cast<float *>(Ks) + warp * 16 * D.hd; /* [16][hd] fp32 */
#pragma unroll
    for (int f = 0; f < MAXF; f++)
        if (f < nf)
            wmma::store_matrix_sync(Ow + f * 16, o[f], D.hd, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * D.hd; e += 32) {
        int r = e / D.hd, d = e % D.hd, i = i0 + warp * 16 + r;
        if (i < D.Tq)
            out[((size_t)i * D.H + h) * D.hd + d] = kc_f2bf(Ow[e]);
    }
}

static size_t smem_fwd_tc(const attn_dims &D)
{
    size_t ld = (size_t)D.hd + 8;
    return (TC_BQ + 2 * TC_BK) * ld * sizeof(__nv_bfloat16) +
           TC_WARPS * 16 * TC_SLD * sizeof(float) + TC_WARPS * 16 * TC_PLD * sizeof(__nv_bfloat16) +
           TC_BQ * TC_BK;
}

/* ---- host side ------------------------------------------------------------------------------- */
static attn_dims make_dims(int Tq, int Tk, int H, int hd)
{
    attn_dims D;
    D.Tq = Tq;
    D.Tk = Tk;
    D.H = H;
    D.hd = hd;
    D.hd4 = (hd + 3) / 4;
    D.ld = 4 * (D.hd4 % 2 == 0 ? D.hd4 + 1 : D.hd4); /* an odd number of float4s */
    D.scale = 1.0f / sqrtf((float)hd);
    D.mask_vec = 0;
    return D;
}

static size_t smem_fwd(const attn_dims &D)
{
    return (size_t)(BQ + 2 * BK) * D.ld * sizeof(float) + NW * QPW * 32 * sizeof(float) +
           BQ * BK;
}

static size_t smem_dq(const attn_dims &D)
{
    return (size_t)(2 * BQ + 2 * BK) * D.ld * sizeof(float) + NW * QPW * 32 * sizeof(float) +
           BQ * BK;
}

static size_t smem_dkdv(const attn_dims &D)
{
    return (size_t)(2 * BKV + 2 * BQ2) * D.ld * sizeof(float) +
           2 * NW * KPW * 32 * sizeof(float) + 2 * BQ2 * sizeof(float) + BQ2 * BKV;
}

static int heads_per_lane(int hd)
{
    int hpl = 1;
    while (32 * hpl < hd)
        hpl *= 2;
    return hpl;
}

static bool aligned4(const void *p)
{
    return ((uintptr_t)p & 3u) == 0;
}

static int check_args(const char *fn, int Tq, int Tk, int H, int hd)
{
    KC_REQUIRE(Tq >= 0 && Tk >= 0 && H >= 0, "%s: Tq=%d Tk=%d H=%d", fn, Tq, Tk, H);
    KC_REQUIRE(hd >= 2 && hd <= 256 && hd % 2 == 0, "%s: hd=%d (must be even, 2..256)", fn, hd);
    KC_REQUIRE(H <= 65535, "%s: H=%d (at most 65535)", fn, H);
    return K_OK;
}

/* Opt in to more than 48 KiB of dynamic shared memory and check the device has it. */
template <typename Kernel> static int prepare(Kernel kernel, size_t smem, const char *fn)
{
    int device = 0, limit = 0;
    KC_CUDA_CHECK(cudaGetDevice(&device));
    KC_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KC_REQUIRE(smem <= (size_t)limit, "%s: needs %zu bytes of shared memory, device has %d", fn,
               smem, limit);
    KC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    return K_OK;
}

static std::atomic<int> use_tensor_cores{1};

extern "C" void kc_attention_use_tensor_cores(int on)
{
    use_tensor_cores.store(on != 0, std::memory_order_relaxed);
}

template <int MAXF>
static int fwd_tc_launch(kc_bf16 *out, float *lse, const kc_bf16 *q, const kc_bf16 *k,
                         const kc_bf16 *v, const uint8_t *mask, const attn_dims &D,
                         cudaStream_t stream)
{
    size_t smem = smem_fwd_tc(D);
    int rc = prepare(attn_fwd_tc_kernel<MAXF>, smem, "kc_attention_fwd");
    if (rc != K_OK)
        return rc;
    dim3 grid((unsigned)((D.Tq + TC_BQ - 1) / TC_BQ), (unsigned)D.H);
    attn_fwd_tc_kernel<MAXF><<<grid, TC_THREADS, smem, stream>>>(out, lse, q, k, v, mask, D);
    KC_LAUNCH_CHECK(stream, "attn_fwd_tc_kernel");
    return K_OK;
}

template <int HPL>
static int fwd_launch(kc_bf16 *out, float *lse, const kc_bf16 *q, const kc_bf16 *k,
                      const kc_bf16 *v, const uint8_t *mask, const attn_dims &D,
                      cudaStream_t stream)
{
    size_t smem = smem_fwd(D);
    int rc = prepare(attn_fwd_kernel<HPL>, smem, "kc_attention_fwd");
    if (rc != K_OK)
        return rc;
    dim3 grid((unsigned)((D.Tq + BQ - 1) / BQ), (unsigned)D.H);
    attn_fwd_kernel<HPL><<<grid, THREADS, smem, stream>>>(out, lse, q, k, v, mask, D);
    KC_LAUNCH_CHECK(stream, "attn_fwd_kernel");
    return K_OK;
}

template <int HPL>
static int bwd_launch(kc_bf16 *dq, kc_bf16 *dk, kc_bf16 *dv, const kc_bf16 *dout,
                      const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v, const kc_bf16 *out,
                      const float *lse, const uint8_t *mask, float *delta, const attn_dims &D,
                      cudaStream_t stream)
{
    size_t smem = smem_dq(D);
    int rc = prepare(attn_bwd_dq_kernel<HPL>, smem, "kc_attention_bwd");
    if (rc != K_OK)
        return rc;
    dim3 grid_q((unsigned)((D.Tq + BQ - 1) / BQ), (unsigned)D.H);
    attn_bwd_dq_kernel<HPL><<<grid_q, THREADS, smem, stream>>>(dq, delta, dout, q, k, v, out, lse,
                                                               mask, D);
    KC_LAUNCH_CHECK(stream, "attn_bwd_dq_kernel");
    if (D.Tk == 0)
        return K_OK;
    smem = smem_dkdv(D);
    rc = prepare(attn_bwd_dkdv_kernel<HPL>, smem, "kc_attention_bwd");
    if (rc != K_OK)
        return rc;
    dim3 grid_k((unsigned)((D.Tk + BKV - 1) / BKV), (unsigned)D.H);
    attn_bwd_dkdv_kernel<HPL><<<grid_k, THREADS, smem, stream>>>(dk, dv, dout, q, k, v, lse,
                                                                 delta, mask, D);
    KC_LAUNCH_CHECK(stream, "attn_bwd_dkdv_kernel");
    return K_OK;
}

extern "C" int kc_attention_fwd(kc_bf16 *out, float *lse, const kc_bf16 *q, const kc_bf16 *k,
                                const kc_bf16 *v, const uint8_t *mask, int Tq, int Tk, int H,
                                int hd, cudaStream_t stream)
{
    int rc = check_args("kc_attention_fwd", Tq, Tk, H, hd);
    if (rc != K_OK)
        return rc;
    if (Tq == 0 || H == 0)
        return K_OK;
    KC_REQUIRE(out && q && (Tk == 0 || (k && v)), "kc_attention_fwd: NULL pointer");
    KC_REQUIRE(aligned4(out) && aligned4(q) && aligned4(k) && aligned4(v),
               "kc_attention_fwd: q/k/v/out must be 4-byte aligned");
    attn_dims D = make_dims(Tq, Tk, H, hd);
    D.mask_vec = Tk % 16 == 0 && ((uintptr_t)mask & 15u) == 0;
    bool aligned16 = (((uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15u) == 0;
    if (hd % 16 == 0 && aligned16 && use_tensor_cores.load(std::memory_order_relaxed)) {
        int frags = hd / 16;
        if (frags <= 1)
            return fwd_tc_launch<1>(out, lse, q, k, v, mask, D, stream);
        if (frags <= 2)
            return fwd_tc_launch<2>(out, lse, q, k, v, mask, D, stream);
        if (frags <= 4)
            return fwd_tc_launch<4>(out, lse, q, k, v, mask, D, stream);
        if (frags <= 8)
            return fwd_tc_launch<8>(out, lse, q, k, v, mask, D, stream);
        return fwd_tc_launch<16>(out, lse, q, k, v, mask, D, stream);
    }
    switch (heads_per_lane(hd)) {
    case 1: return fwd_launch<1>(out, lse, q, k, v, mask, D, stream);
    case 2: return fwd_launch<2>(out, lse, q, k, v, mask, D, stream);
    case 4: return fwd_launch<4>(out, lse, q, k, v, mask, D, stream);
    default: return fwd_launch<8>(out, lse, q, k, v, mask, D, stream);
    }
}

extern "C" int kc_attention_bwd(kc_bf16 *dq, kc_bf16 *dk, kc_bf16 *dv, const kc_bf16 *dout,
                                const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v,
                                const kc_bf16 *out, const float *lse, const uint8_t *mask,
                                float *delta, int Tq, int Tk, int H, int hd, cudaStream_t stream)
{
    int rc = check_args("kc_attention_bwd", Tq, Tk, H, hd);
    if (rc != K_OK)
        return rc;
    if (Tq == 0 || H == 0)
        return K_OK;
    KC_REQUIRE(dq && dout && q && out && lse && delta && (Tk == 0 || (dk && dv && k && v)),
               "kc_attention_bwd: NULL pointer");
    KC_REQUIRE(aligned4(dq) && aligned4(dk) && aligned4(dv) && aligned4(dout) && aligned4(q) &&
                   aligned4(k) && aligned4(v) && aligned4(out),
               "kc_attention_bwd: tensors must be 4-byte aligned");
    attn_dims D = make_dims(Tq, Tk, H, hd);
    D.mask_vec = Tk % 16 == 0 && ((uintptr_t)mask & 15u) == 0;
    switch (heads_per_lane(hd)) {
    case 1: return bwd_launch<1>(dq, dk, dv, dout, q, k, v, out, lse, mask, delta, D, stream);
    case 2: return bwd_launch<2>(dq, dk, dv, dout, q, k, v, out, lse, mask, delta, D, stream);
    case 4: return bwd_launch<4>(dq, dk, dv, dout, q, k, v, out, lse, mask, delta, D, stream);
    default: return bwd_launch<8>(dq, dk, dv, dout, q, k, v, out, lse, mask, delta, D, stream);
    }
}
