/* elementwise.cu: the elementwise ops of the model on the device: residual add, SiLU and the
 * SwiGLU gate, forward and backward (kernels/elementwise.c, kernels/swiglu.c). bf16 storage,
 * fp32 arithmetic with the CPU's formulas (expf, IEEE division), one rounding per output.
 * Pointers are not __restrict__: outputs may alias inputs as the CPU ops allow. */
#include "cuda_common.cuh"

#define GRID_STRIDE(i, n)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                    \
         i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

template <typename T> __global__ void add_kernel(T *out, const T *a, const T *b, size_t n)
{
    GRID_STRIDE(i, n) kc_st(out + i, kc_ld(a + i) + kc_ld(b + i));
}

__global__ void silu_fwd_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float xi = kc_ld(x + i);
        kc_st(out + i, xi * sigmoidf_(xi));
    }
}

__global__ void silu_bwd_kernel(__nv_bfloat16 *dx, const __nv_bfloat16 *dout,
                                const __nv_bfloat16 *x, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float xi = kc_ld(x + i), s = sigmoidf_(xi);
        kc_st(dx + i, kc_ld(dx + i) + kc_ld(dout + i) * s * (1.0f + xi * (1.0f - s)));
    }
}

__global__ void swiglu_fwd_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *gate,
                                  const __nv_bfloat16 *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float g = kc_ld(gate + i);
        kc_st(h + i, g * sigmoidf_(g) * kc_ld(up + i));
    }
}

__global__ void swiglu_bwd_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup,
                                  const __nv_bfloat16 *dh, const __nv_bfloat16 *gate,
                                  const __nv_bfloat16 *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float g = kc_ld(gate + i), s = sigmoidf_(g), d = kc_ld(dh + i);
        kc_st(dgate + i, kc_ld(dgate + i) + d * kc_ld(up + i) * s * (1.0f + g * (1.0f - s)));
        kc_st(dup + i, kc_ld(dup + i) + d * g * s);
    }
}

#define LAUNCH_1D(kernel, n, stream, ...)                                                      \
    do {                                                                                       \
        if ((n) == 0)                                                                          \
            return K_OK;                                                                       \
        kernel<<<kc_grid_for((n), 256), 256, 0, (stream)>>>(__VA_ARGS__);                     \
        KC_LAUNCH_CHECK((stream), #kernel);                                                    \
        return K_OK;                                                                           \
    } while (0)

extern "C" int kc_add_bf16(kc_bf16 *out, const kc_bf16 *a, const kc_bf16 *b, size_t n,
                           cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (out && a && b), "kc_add_bf16: NULL pointer");
    LAUNCH_1D(add_kernel<__nv_bfloat16>, n, stream, out, a, b, n);
}

extern "C" int kc_add_f32(float *out, const float *a, const float *b, size_t n,
                          cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (out && a && b), "kc_add_f32: NULL pointer");
    LAUNCH_1D(add_kernel<float>, n, stream, out, a, b, n);
}

extern "C" int kc_silu_fwd(kc_bf16 *out, const kc_bf16 *x, size_t n, cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (out && x), "kc_silu_fwd: NULL pointer");
    LAUNCH_1D(silu_fwd_kernel, n, stream, out, x, n);
}

extern "C" int kc_silu_bwd(kc_bf16 *dx, const kc_bf16 *dout, const kc_bf16 *x, size_t n,
                           cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (dx && dout && x), "kc_silu_bwd: NULL pointer");
    LAUNCH_1D(silu_bwd_kernel, n, stream, dx, dout, x, n);
}

extern "C" int kc_swiglu_fwd(kc_bf16 *h, const kc_bf16 *gate, const kc_bf16 *up, size_t n,
                             cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (h && gate && up), "kc_swiglu_fwd: NULL pointer");
    LAUNCH_1D(swiglu_fwd_kernel, n, stream, h, gate, up, n);
}

extern "C" int kc_swiglu_bwd(kc_bf16 *dgate, kc_bf16 *dup, const kc_bf16 *dh,
                             const kc_bf16 *gate, const kc_bf16 *up, size_t n,
                             cudaStream_t stream)
{
    KC_REQUIRE(n == 0 || (dgate && dup && dh && gate && up), "kc_swiglu_bwd: NULL pointer");
    LAUNCH_1D(swiglu_bwd_kernel, n, stream, dgate, dup, dh, gate, up, n);
}
