/* attention_doc.cu: kc_attention_fwd_causal_doc, the target model's attention forward:
 * causal attention confined to documents, every sequence and head in one launch, the mask
 * computed on the fly from per-token document ids (no [T, T] mask in memory).
 *
 * Fast path (hd 64 or 128, tensors 16-byte aligned): kc_attn_doc::fwd_kernel, a
 * flash-attention-2 style kernel on mma.sync tensor cores (design in attention_doc.cuh).
 * Anything else: the explicit-mask path, per sequence kc_mask_causal_doc into the caller's
 * scratch and kc_attention_fwd (attention.cu), which gives the same results within the
 * tolerances of kernels_cuda.h. */
#include <math.h>

#include <atomic>

#include "attention_doc.cuh"
#include "cuda_common.cuh"

static std::atomic<int> force_fallback{0};

extern "C" void kc_attention_causal_doc_use_fallback(int on)
{
    force_fallback.store(on != 0, std::memory_order_relaxed);
}

template <int HD>
static int doc_fwd_launch(kc_bf16 *out, float *lse, const kc_bf16 *q, const kc_bf16 *k,
                          const kc_bf16 *v, const int32_t *doc_ids, int B, int T, int H,
                          cudaStream_t stream)
{
    using namespace kc_attn_doc;
    const size_t smem = shape<HD>::SMEM;
    int device = 0, limit = 0;
    KC_CUDA_CHECK(cudaGetDevice(&device));
    KC_CUDA_CHECK(
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KC_REQUIRE(smem <= (size_t)limit,
               "kc_attention_fwd_causal_doc: needs %zu bytes of shared memory, device has %d",
               smem, limit);
    /* per call (cheap): the attribute is per device, and trainer threads use several */
    KC_CUDA_CHECK(cudaFuncSetAttribute(fwd_kernel<HD>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    KC_CUDA_CHECK(cudaFuncSetAttribute(fwd_kernel<HD>,
                                       cudaFuncAttributePreferredSharedMemoryCarveout, 100));
    const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)HD));
    dim3 grid((unsigned)((T + BQ - 1) / BQ), (unsigned)H, (unsigned)B);
    fwd_kernel<HD><<<grid, THREADS, smem, stream>>>(out, lse, q, k, v, doc_ids, T, H,
                                                    scale_log2);
    KC_LAUNCH_CHECK(stream, "kc_attn_doc::fwd_kernel");
    return K_OK;
}

extern "C" int kc_attention_fwd_causal_doc(kc_bf16 *out, float *lse, const kc_bf16 *q,
                                           const kc_bf16 *k, const kc_bf16 *v,
                                           const int32_t *doc_ids, uint8_t *mask_scratch,
                                           int B, int T, int H, int hd, cudaStream_t stream)
{
    static const char *fn = "kc_attention_fwd_causal_doc";
    KC_REQUIRE(B >= 0 && T >= 0 && H >= 0, "%s: B=%d T=%d H=%d", fn, B, T, H);
    KC_REQUIRE(hd >= 2 && hd <= 256 && hd % 2 == 0, "%s: hd=%d (must be even, 2..256)", fn, hd);
    KC_REQUIRE(B <= 65535 && H <= 65535, "%s: B=%d H=%d (at most 65535 each)", fn, B, H);
    if (B == 0 || T == 0 || H == 0)
        return K_OK;
    KC_REQUIRE(out && q && k && v, "%s: NULL pointer", fn);
    KC_REQUIRE((size_t)B * (size_t)T <= (size_t)INT32_MAX, "%s: B*T=%zu too large", fn,
               (size_t)B * (size_t)T);
    const bool aligned16 = (((uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15u) == 0;
    const bool lse_ok = lse == NULL || ((uintptr_t)lse & 3u) == 0;
    if ((hd == 64 || hd == 128) && aligned16 && lse_ok &&
        !force_fallback.load(std::memory_order_relaxed)) {
        if (hd == 64)
            return doc_fwd_launch<64>(out, lse, q, k, v, doc_ids, B, T, H, stream);
        return doc_fwd_launch<128>(out, lse, q, k, v, doc_ids, B, T, H, stream);
    }
    /* fallback: an explicit mask per sequence (the scratch is reused, in stream order) */
    KC_REQUIRE(mask_scratch != NULL,
               "%s: hd=%d (or unaligned tensors) takes the explicit-mask path, which needs "
               "mask_scratch (uint8 [T, T])",
               fn, hd);
    const size_t seq = (size_t)T * H * hd;
    for (int b = 0; b < B; b++) {
        int rc = kc_mask_causal_doc(mask_scratch, doc_ids ? doc_ids + (size_t)b * T : NULL, T,
                                    stream);
        if (rc != K_OK)
            return rc;
        rc = kc_attention_fwd(out + b * seq, lse ? lse + (size_t)b * T * H : NULL, q + b * seq,
                              k + b * seq, v + b * seq, mask_scratch, T, T, H, hd, stream);
        if (rc != K_OK)
            return rc;
    }
    return K_OK;
}
