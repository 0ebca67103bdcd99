/* swiglu.c: SiLU and the SwiGLU gate of the MLP blocks, h = silu(gate) * up, forward and
 * backward, elementwise over flat buffers. */
#include <math.h>

#include "kernels.h"

static inline float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void k_silu_fwd(float *out, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] * sigmoid(x[i]);
}

/* silu'(x) = s + x s (1 - s), with s = sigmoid(x). */
void k_silu_bwd(float *dx, const float *dout, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = sigmoid(x[i]);
        dx[i] += dout[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

void k_swiglu_fwd(float *h, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void k_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                  size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoid(g);
        dgate[i] += dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] += dh[i] * g * s;
    }
}
