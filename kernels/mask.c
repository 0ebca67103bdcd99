/* mask.c: builders of the explicit uint8 attention masks [Tq, Tk] that k_attention_* take:
 * the target's causal-within-document mask and the drafter's DFlash block mask. One mask per
 * forward is built and shared by every layer and by the backward. */
#include <string.h>

#include "kernels.h"

void k_mask_causal_doc(uint8_t *mask, const int32_t *doc_ids, int T)
{
    for (int i = 0; i < T; i++) {
        uint8_t *row = mask + (size_t)i * T;
        for (int j = 0; j < T; j++)
            row[j] = (uint8_t)(j <= i && (!doc_ids || doc_ids[j] == doc_ids[i]));
    }
}

int k_mask_dflash_block(uint8_t *mask, const int32_t *anchors, const uint8_t *block_keep,
                        const int32_t *doc_ids, int n_ctx, int n_blocks, int block_size,
                        int window)
{
    int status = K_OK;
    size_t Tk = (size_t)n_ctx + (size_t)n_blocks * block_size;
    for (int b = 0; b < n_blocks; b++) {
        int a = anchors[b];
        int bad = a < 0 || a >= n_ctx;
        if (bad)
            status = K_EINVAL;
        int keep = !bad && (!block_keep || block_keep[b]);
        int lo = window > 0 && a - window > 0 ? a - window : 0;
        for (int r = 0; r < block_size; r++) {
            uint8_t *row = mask + ((size_t)b * block_size + r) * Tk;
            memset(row, 0, Tk);
            if (!keep)
                continue;
            for (int j = lo; j < a; j++)
                row[j] = (uint8_t)(!doc_ids || doc_ids[j] == doc_ids[a]);
            memset(row + n_ctx + (size_t)b * block_size, 1, (size_t)block_size);
        }
    }
    return status;
}
