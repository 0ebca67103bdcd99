/* taps.c: packing of the target's tapped hidden states into the drafter's fc input
 * [T, n_taps*d], as fp32 or directly as bf16 for the hidden-state queue (the `postprocess`
 * stage: one pass that gathers and casts). */
#include <string.h>

#include "kernels.h"

void k_pack_taps(float *out, const float *const *taps, int n_taps, int T, int d)
{
    size_t out_row = (size_t)n_taps * d;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n_taps; i++)
            memcpy(out + t * out_row + (size_t)i * d, taps[i] + (size_t)t * d,
                   (size_t)d * sizeof(float));
}

void k_pack_taps_bf16(uint16_t *out, const float *const *taps, int n_taps, int T, int d)
{
    size_t out_row = (size_t)n_taps * d;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n_taps; i++)
            k_float_to_bf16(out + t * out_row + (size_t)i * d, taps[i] + (size_t)t * d,
                            (size_t)d);
}
