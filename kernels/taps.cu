/* taps.cu: packing of the target's tapped hidden states into the drafter's fc input
 * [T, n_taps*d] on the device (kernels/taps.c): one gather that also casts, the `postprocess`
 * stage's work before the device-to-host copy. The tap pointers travel in the kernel's
 * parameters, TAPS_PER_LAUNCH at a time. */
#include "cuda_common.cuh"

#define TAPS_PER_LAUNCH 32

struct tap_list {
    const void *ptr[TAPS_PER_LAUNCH];
    int n;
};

template <typename Tout, typename Tin>
__global__ void pack_taps_kernel(Tout *out, tap_list taps, int first_tap, int n_taps, int T,
                                 int d)
{
    size_t chunk_row = (size_t)taps.n * d;
    size_t n = (size_t)T * chunk_row;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t t = e / chunk_row, r = e % chunk_row;
        int i = (int)(r / d), c = (int)(r % d);
        const Tin *src = (const Tin *)taps.ptr[i];
        kc_st(out + t * n_taps * (size_t)d + (size_t)(first_tap + i) * d + c,
              kc_ld(src + t * d + c));
    }
}

/* bf16 -> bf16 is a plain copy (kc_ld/kc_st would round-trip through fp32, which is exact too,
 * but this keeps NaN payloads untouched). */
template <>
__global__ void pack_taps_kernel<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 *out,
                                                               tap_list taps, int first_tap,
                                                               int n_taps, int T, int d)
{
    size_t chunk_row = (size_t)taps.n * d;
    size_t n = (size_t)T * chunk_row;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t t = e / chunk_row, r = e % chunk_row;
        int i = (int)(r / d), c = (int)(r % d);
        const __nv_bfloat16 *src = (const __nv_bfloat16 *)taps.ptr[i];
        out[t * n_taps * (size_t)d + (size_t)(first_tap + i) * d + c] = src[t * d + c];
    }
}

template <typename Tout, typename Tin>
static int pack_taps(Tout *out, const void *const *taps, int n_taps, int T, int d,
                     cudaStream_t stream)
{
    for (int first = 0; first < n_taps; first += TAPS_PER_LAUNCH) {
        tap_list list;
        list.n = n_taps - first < TAPS_PER_LAUNCH ? n_taps - first : TAPS_PER_LAUNCH;
        for (int i = 0; i < TAPS_PER_LAUNCH; i++)
            list.ptr[i] = i < list.n ? taps[first + i] : NULL;
        for (int i = 0; i < list.n; i++)
            KC_REQUIRE(list.ptr[i], "kc_pack_taps: taps[%d] is NULL", first + i);
        size_t n = (size_t)T * list.n * d;
        pack_taps_kernel<Tout, Tin><<<kc_grid_for(n, 256), 256, 0, stream>>>(out, list, first,
                                                                             n_taps, T, d);
        KC_LAUNCH_CHECK(stream, "pack_taps_kernel");
    }
    return K_OK;
}

extern "C" int kc_pack_taps(void *out, kc_dtype out_dtype, const void *const *taps,
                            kc_dtype taps_dtype, int n_taps, int T, int d, cudaStream_t stream)
{
    KC_REQUIRE(n_taps >= 0 && T >= 0 && d >= 0, "kc_pack_taps: n_taps=%d T=%d d=%d", n_taps, T,
               d);
    if (n_taps == 0 || T == 0 || d == 0)
        return K_OK;
    KC_REQUIRE(out && taps, "kc_pack_taps: NULL pointer");
    KC_REQUIRE((out_dtype == KC_F32 || out_dtype == KC_BF16) &&
                   (taps_dtype == KC_F32 || taps_dtype == KC_BF16),
               "kc_pack_taps: unknown dtype (%d, %d)", (int)out_dtype, (int)taps_dtype);
    if (out_dtype == KC_BF16 && taps_dtype == KC_BF16)
        return pack_taps<__nv_bfloat16, __nv_bfloat16>((__nv_bfloat16 *)out, taps, n_taps, T, d,
                                                       stream);
    if (out_dtype == KC_BF16)
        return pack_taps<__nv_bfloat16, float>((__nv_bfloat16 *)out, taps, n_taps, T, d, stream);
    if (taps_dtype == KC_BF16)
        return pack_taps<float, __nv_bfloat16>((float *)out, taps, n_taps, T, d, stream);
    return pack_taps<float, float>((float *)out, taps, n_taps, T, d, stream);
}
