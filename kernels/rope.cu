/* rope.cu: rotary position embedding on the device (kernels/rope.c), "rotate half" layout,
 * forward and backward on bf16 [T, H, hd]. One thread per (token, pair index) computes the
 * angle in double, as the CPU does, then rotates that pair in every head. */
#include "cuda_common.cuh"

__device__ __forceinline__ void rope_angle(int32_t pos, int p, int hd, float theta, float *c,
                                           float *s)
{
    double angle = (double)pos * pow((double)theta, -2.0 * p / hd);
    double sn, cs;
    sincos(angle, &sn, &cs);
    *c = (float)cs;
    *s = (float)sn;
}

/* backward = 0: out = R x; backward = 1: out += R^T x. out may alias x in the forward (each
 * thread reads its pair before writing it). */
template <int BACKWARD>
__global__ void rope_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x, const int32_t *positions,
                            int T, int H, int hd, float theta)
{
    int half = hd / 2;
    size_t n = (size_t)T * half;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(e / half), p = (int)(e % half);
        float c, s;
        rope_angle(positions[t], p, hd, theta, &c, &s);
        for (int h = 0; h < H; h++) {
            size_t off = ((size_t)t * H + h) * hd;
            float x0 = kc_ld(x + off + p), x1 = kc_ld(x + off + p + half);
            if (!BACKWARD) {
                kc_st(out + off + p, x0 * c - x1 * s);
                kc_st(out + off + p + half, x0 * s + x1 * c);
            } else {
                kc_st(out + off + p, kc_ld(out + off + p) + (x0 * c + x1 * s));
                kc_st(out + off + p + half, kc_ld(out + off + p + half) + (-x0 * s + x1 * c));
            }
        }
    }
}

static int rope_launch(int backward, kc_bf16 *out, const kc_bf16 *x, const int32_t *positions,
                       int T, int H, int hd, float theta, cudaStream_t stream)
{
    KC_REQUIRE(T >= 0 && H >= 0 && hd >= 0 && hd % 2 == 0, "kc_rope: T=%d H=%d hd=%d (hd even)",
               T, H, hd);
    size_t n = (size_t)T * (hd / 2);
    if (n == 0 || H == 0)
        return K_OK;
    KC_REQUIRE(out && x && positions, "kc_rope: NULL pointer");
    if (backward) {
        rope_kernel<1><<<kc_grid_for(n, 256), 256, 0, stream>>>(out, x, positions, T, H, hd,
                                                                theta);
        KC_LAUNCH_CHECK(stream, "rope_kernel<bwd>");
    } else {
        rope_kernel<0><<<kc_grid_for(n, 256), 256, 0, stream>>>(out, x, positions, T, H, hd,
                                                                theta);
        KC_LAUNCH_CHECK(stream, "rope_kernel<fwd>");
    }
    return K_OK;
}

extern "C" int kc_rope_fwd(kc_bf16 *out, const kc_bf16 *x, const int32_t *positions, int T,
                           int H, int hd, float theta, cudaStream_t stream)
{
    return rope_launch(0, out, x, positions, T, H, hd, theta, stream);
}

extern "C" int kc_rope_bwd(kc_bf16 *dx, const kc_bf16 *dout, const int32_t *positions, int T,
                           int H, int hd, float theta, cudaStream_t stream)
{
    return rope_launch(1, dx, dout, positions, T, H, hd, theta, stream);
}
