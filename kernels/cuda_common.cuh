/* cuda_common.cuh: private helpers of the GPU kernels (not part of the public API): the error
 * checking macros that every CUDA / cuBLAS call site goes through, launch checking, bf16
 * load/store with the CPU's exact rounding, and warp/block reductions. */
#ifndef STAGETRACE_KERNELS_CUDA_COMMON_CUH
#define STAGETRACE_KERNELS_CUDA_COMMON_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels_cuda.h"

/* ---- error reporting (cuda_check.cu) ------------------------------------------------------ */
/* Each records "file:line: what: message" for kc_last_error(), prints it to stderr and
 * returns the status code to pass up. */
int kc_fail_cuda(cudaError_t err, const char *what, const char *file, int line);
int kc_fail_blas(int status, const char *status_string, const char *what, const char *file,
                 int line);
int kc_fail_arg(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* cudaGetLastError(), and in debug-sync mode a stream sync, after a launch. */
int kc_check_launch(cudaStream_t stream, const char *what, const char *file, int line);

#define KC_CUDA_CHECK(call)                                                                    \
    do {                                                                                       \
        cudaError_t kc_err_ = (call);                                                          \
        if (kc_err_ != cudaSuccess)                                                            \
            return kc_fail_cuda(kc_err_, #call, __FILE__, __LINE__);                           \
    } while (0)

/* After every <<<...>>>: reports a bad launch configuration (and, in debug-sync mode, a fault
 * in the kernel) at the call site. */
#define KC_LAUNCH_CHECK(stream, name)                                                          \
    do {                                                                                       \
        int kc_rc_ = kc_check_launch((stream), (name), __FILE__, __LINE__);                    \
        if (kc_rc_ != K_OK)                                                                    \
            return kc_rc_;                                                                     \
    } while (0)

/* Argument checks: one line naming the function and the bad value, K_EINVAL, nothing run. */
#define KC_REQUIRE(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond))                                                                           \
            return kc_fail_arg(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)

/* Grid size for a grid-stride loop over n items. */
static inline unsigned kc_grid_for(size_t n, int threads)
{
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 65536)
        blocks = 65536;
    return (unsigned)blocks;
}

/* ---- bf16 -------------------------------------------------------------------------------- */
/* float -> bf16 exactly as k_bf16_from_float (round to nearest even, NaN kept quiet). */
__device__ __forceinline__ __nv_bfloat16 kc_f2bf(float x)
{
    uint32_t u = __float_as_uint(x);
    __nv_bfloat16_raw r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.x = (unsigned short)((u >> 16) | 0x0040u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        r.x = (unsigned short)(u >> 16);
    }
    return __nv_bfloat16(r);
}

__device__ __forceinline__ float kc_ld(const float *p) { return *p; }
__device__ __forceinline__ float kc_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void kc_st(float *p, float x) { *p = x; }
__device__ __forceinline__ void kc_st(__nv_bfloat16 *p, float x) { *p = kc_f2bf(x); }

/* ---- reductions -------------------------------------------------------------------------- */
template <typename T> __device__ __forceinline__ T kc_warp_sum(T x)
{
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ float kc_warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
 * Contains barriers: call from all threads. */
template <typename T> __device__ T kc_block_sum(T x)
{
    __shared__ T partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    x = kc_warp_sum(x);
    __syncthreads(); /* partial may still be read by a previous call */
    if (lane == 0)
        partial[warp] = x;
    __syncthreads();
    T total = lane < n_warps ? partial[lane] : T(0);
    return kc_warp_sum(total);
}

#endif /* STAGETRACE_KERNELS_CUDA_COMMON_CUH */
