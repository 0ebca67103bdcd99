/* rmsnorm.cu: RMSNorm forward and backward on the device (kernels/rmsnorm.c). bf16 activations,
 * fp32 weight, rstd and arithmetic. The forward is one block per row; the backward gives each
 * block a run of rows so that dweight is summed in shared memory and added with one atomic per
 * column per block (not per row). */
#include "cuda_common.cuh"

#define RMS_THREADS 256
#define RMS_BWD_ROWS 16 /* rows per block in the backward */

/* 1 / sqrt(mean x^2 + eps) of one row; all threads of the block get it. */
__device__ float row_rstd(const __nv_bfloat16 *x, int d, float eps)
{
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = kc_ld(x + i);
        sum_sq += v * v;
    }
    sum_sq = kc_block_sum(sum_sq);
    return 1.0f / sqrtf(sum_sq / (float)d + eps);
}

__global__ void rmsnorm_fwd_kernel(__nv_bfloat16 *out, float *rstd, const __nv_bfloat16 *x,
                                   const float *weight, int T, int d, float eps)
{
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        const __nv_bfloat16 *xr = x + (size_t)t * d;
        __nv_bfloat16 *yr = out + (size_t)t * d;
        float r = row_rstd(xr, d, eps);
        if (rstd && threadIdx.x == 0)
            rstd[t] = r;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            kc_st(yr + i, kc_ld(xr + i) * r * weight[i]);
    }
}

/* dx_j += r w_j dy_j - (r^3 / d) x_j sum_i dy_i w_i x_i;  dweight_j += sum_t dy_j x_j r. */
__global__ void rmsnorm_bwd_kernel(__nv_bfloat16 *dx, float *dweight, const __nv_bfloat16 *dout,
                                   const __nv_bfloat16 *x, const float *weight,
                                   const float *rstd, int T, int d, float eps)
{
    extern __shared__ float dweight_acc[]; /* [d] when dweight != NULL */
    if (dweight)
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            dweight_acc[i] = 0.0f;
    int t_end = min(T, (blockIdx.x + 1) * RMS_BWD_ROWS);
    for (int t = blockIdx.x * RMS_BWD_ROWS; t < t_end; t++) {
        const __nv_bfloat16 *xr = x + (size_t)t * d, *dyr = dout + (size_t)t * d;
        __nv_bfloat16 *dxr = dx + (size_t)t * d;
        float r = rstd ? rstd[t] : row_rstd(xr, d, eps);
        float dot = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            dot += kc_ld(dyr + i) * weight[i] * kc_ld(xr + i);
        dot = kc_block_sum(dot);
        float c = dot * r * r * r / (float)d;
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float xi = kc_ld(xr + i), dyi = kc_ld(dyr + i);
            kc_st(dxr + i, kc_ld(dxr + i) + (r * weight[i] * dyi - c * xi));
            if (dweight)
                dweight_acc[i] += dyi * xi * r; /* column i belongs to this thread only */
        }
    }
    if (dweight)
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            atomicAdd(dweight + i, dweight_acc[i]);
}

extern "C" int kc_rmsnorm_fwd(kc_bf16 *out, float *rstd, const kc_bf16 *x, const float *weight,
                              int T, int d, float eps, cudaStream_t stream)
{
    KC_REQUIRE(T >= 0 && d > 0, "kc_rmsnorm_fwd: T=%d d=%d", T, d);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(out && x && weight, "kc_rmsnorm_fwd: NULL pointer");
    unsigned blocks = T < 65536 ? (unsigned)T : 65536u;
    rmsnorm_fwd_kernel<<<blocks, RMS_THREADS, 0, stream>>>(out, rstd, x, weight, T, d, eps);
    KC_LAUNCH_CHECK(stream, "rmsnorm_fwd_kernel");
    return K_OK;
}

extern "C" int kc_rmsnorm_bwd(kc_bf16 *dx, float *dweight, const kc_bf16 *dout,
                              const kc_bf16 *x, const float *weight, const float *rstd, int T,
                              int d, float eps, cudaStream_t stream)
{
    KC_REQUIRE(T >= 0 && d > 0, "kc_rmsnorm_bwd: T=%d d=%d", T, d);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(dx && dout && x && weight, "kc_rmsnorm_bwd: NULL pointer");
    size_t smem = dweight ? (size_t)d * sizeof(float) : 0;
    KC_REQUIRE(smem <= 48 * 1024, "kc_rmsnorm_bwd: d=%d too large for the dweight tile", d);
    unsigned blocks = (unsigned)((T + RMS_BWD_ROWS - 1) / RMS_BWD_ROWS);
    rmsnorm_bwd_kernel<<<blocks, RMS_THREADS, smem, stream>>>(dx, dweight, dout, x, weight,
                                                                rstd, T, d, eps);
    KC_LAUNCH_CHECK(stream, "rmsnorm_bwd_kernel");
    return K_OK;
}
