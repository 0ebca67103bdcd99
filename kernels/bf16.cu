/* bf16.cu: fp32 <-> bf16 conversion on the device, bit-exact with kernels/bf16.c (the tapped
 * hidden states and the bf16 weight copies go through it). */
#include "cuda_common.cuh"

__global__ void float_to_bf16_kernel(__nv_bfloat16 *out, const float *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = kc_f2bf(in[i]);
}

__global__ void bf16_to_float_kernel(float *out, const __nv_bfloat16 *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __bfloat162float(in[i]);
}

extern "C" int kc_float_to_bf16(kc_bf16 *out, const float *in, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return K_OK;
    KC_REQUIRE(out && in, "kc_float_to_bf16: NULL pointer");
    float_to_bf16_kernel<<<kc_grid_for(n, 256), 256, 0, stream>>>(out, in, n);
    KC_LAUNCH_CHECK(stream, "float_to_bf16_kernel");
    return K_OK;
}

extern "C" int kc_bf16_to_float(float *out, const kc_bf16 *in, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return K_OK;
    KC_REQUIRE(out && in, "kc_bf16_to_float: NULL pointer");
    bf16_to_float_kernel<<<kc_grid_for(n, 256), 256, 0, stream>>>(out, in, n);
    KC_LAUNCH_CHECK(stream, "bf16_to_float_kernel");
    return K_OK;
}
