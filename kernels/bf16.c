/* bf16.c: float <-> bf16 conversion (bf16 held as uint16_t: the top half of an fp32). The
 * hidden-state queue carries tapped states as bf16 to halve the copy, as on the GPU. */
#include <string.h>

#include "kernels.h"

uint16_t k_bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it a (quiet) NaN */
    /* Round to nearest, ties to even: add just under half an ulp, plus one when the kept
     * lowest bit is odd. Cannot overflow: the largest input, 0xff7fffff, becomes 0xff807fff. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float k_float_from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void k_float_to_bf16(uint16_t *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = k_bf16_from_float(in[i]);
}

void k_bf16_to_float(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = k_float_from_bf16(in[i]);
}
