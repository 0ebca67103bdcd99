/* mask.cu: the attention mask builders on the device (kernels/mask.c), byte-identical to the
 * CPU's, so that the mask of a forward is built next to the attention that uses it instead of
 * being copied from the host. One thread per mask byte. */
#include "cuda_common.cuh"

__global__ void mask_causal_doc_kernel(uint8_t *mask, const int32_t *doc_ids, int T)
{
    size_t n = (size_t)T * T;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / T), j = (int)(e % T);
        mask[e] = (uint8_t)(j <= i && (!doc_ids || doc_ids[j] == doc_ids[i]));
    }
}

__global__ void mask_dflash_block_kernel(uint8_t *mask, const int32_t *anchors,
                                         const uint8_t *block_keep, const int32_t *doc_ids,
                                         int n_ctx, int n_blocks, int block_size, int window)
{
    size_t Tk = (size_t)n_ctx + (size_t)n_blocks * block_size;
    size_t n = (size_t)n_blocks * block_size * Tk;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / Tk), j = (int)(e % Tk);
        int b = i / block_size, a = anchors[b];
        bool keep = a >= 0 && a < n_ctx && (!block_keep || block_keep[b]);
        uint8_t allow = 0;
        if (keep) {
            if (j < n_ctx) {
                int lo = window > 0 && a - window > 0 ? a - window : 0;
                allow = (uint8_t)(j >= lo && j < a && (!doc_ids || doc_ids[j] == doc_ids[a]));
            } else {
                allow = (uint8_t)((j - n_ctx) / block_size == b);
            }
        }
        mask[e] = allow;
    }
}

extern "C" int kc_mask_causal_doc(uint8_t *mask, const int32_t *doc_ids, int T,
                                  cudaStream_t stream)
{
    KC_REQUIRE(T >= 0, "kc_mask_causal_doc: T=%d", T);
    if (T == 0)
        return K_OK;
    KC_REQUIRE(mask, "kc_mask_causal_doc: NULL mask");
    size_t n = (size_t)T * T;
    mask_causal_doc_kernel<<<kc_grid_for(n, 256), 256, 0, stream>>>(mask, doc_ids, T);
    KC_LAUNCH_CHECK(stream, "mask_causal_doc_kernel");
    return K_OK;
}

extern "C" int kc_mask_dflash_block(uint8_t *mask, const int32_t *anchors,
                                    const uint8_t *block_keep, const int32_t *doc_ids, int n_ctx,
                                    int n_blocks, int block_size, int window,
                                    cudaStream_t stream)
{
    KC_REQUIRE(n_ctx >= 0 && n_blocks >= 0 && block_size >= 0,
               "kc_mask_dflash_block: n_ctx=%d n_blocks=%d block_size=%d", n_ctx, n_blocks,
               block_size);
    size_t n = (size_t)n_blocks * block_size * ((size_t)n_ctx + (size_t)n_blocks * block_size);
    if (n == 0)
        return K_OK;
    KC_REQUIRE(mask && anchors, "kc_mask_dflash_block: NULL pointer");
    mask_dflash_block_kernel<<<kc_grid_for(n, 256), 256, 0, stream>>>(
        mask, anchors, block_keep, doc_ids, n_ctx, n_blocks, block_size, window);
    KC_LAUNCH_CHECK(stream, "mask_dflash_block_kernel");
    return K_OK;
}
