/* embedding.cu: token embedding lookup on the device (kernels/embedding.c): a gather of bf16
 * rows. Out-of-range tokens give zero rows and are counted in a device counter instead of the
 * CPU's K_EINVAL, so the lookup never waits for the host. */
#include "cuda_common.cuh"

/* One block row of 2-element (bf16x2) copies when d is even, else element copies. */
__global__ void embedding_fwd_kernel(__nv_bfloat16 *out, const int32_t *tokens,
                                     const __nv_bfloat16 *table, int T, int d, int vocab,
                                     int32_t *n_bad)
{
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t tok = tokens[t];
        bool bad = tok < 0 || tok >= vocab;
        __nv_bfloat16 *row = out + (size_t)t * d;
        if (bad) {
            __nv_bfloat16 zero = __float2bfloat16(0.0f);
            for (int i = threadIdx.x; i < d; i += blockDim.x)
                row[i] = zero;
            if (threadIdx.x == 0 && n_bad)
                atomicAdd(n_bad, 1);
            continue;
        }
        const __nv_bfloat16 *src = table + (size_t)tok * d;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            row[i] = src[i];
    }
}

extern "C" int kc_embedding_fwd(kc_bf16 *out, const int32_t *tokens, const kc_bf16 *table,
                                int T, int d, int vocab, int32_t *n_bad, cudaStream_t stream)
{
    KC_REQUIRE(T >= 0 && d >= 0 && vocab >= 0, "kc_embedding_fwd: T=%d d=%d vocab=%d", T, d,
               vocab);
    if (T == 0 || d == 0)
        return K_OK;
    KC_REQUIRE(out && tokens && (table || vocab == 0), "kc_embedding_fwd: NULL pointer");
    int threads = d >= 256 ? 256 : ((d + 31) / 32) * 32;
    unsigned blocks = T < 65536 ? (unsigned)T : 65536u;
    embedding_fwd_kernel<<<blocks, threads, 0, stream>>>(out, tokens, table, T, d, vocab, n_bad);
    KC_LAUNCH_CHECK(stream, "embedding_fwd_kernel");
    return K_OK;
}
