/* rmsnorm.c: RMSNorm with a learned weight, forward and backward. Used before every attention
 * and MLP block, as the target's final norm, and after the drafter's fc over the taps. */
#include <math.h>

#include "kernels.h"

static float row_rstd(const float *x, int d, float eps)
{
    double sum_sq = 0.0;
    for (int i = 0; i < d; i++)
        sum_sq += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(sum_sq / d + eps));
}

void k_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *weight, int T, int d,
                   float eps)
{
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * d;
        float *yr = out + (size_t)t * d;
        float r = row_rstd(xr, d, eps);
        if (rstd)
            rstd[t] = r;
        for (int i = 0; i < d; i++)
            yr[i] = xr[i] * r * weight[i];
    }
}

/* With y_i = w_i x_i r and r = (mean x^2 + eps)^(-1/2), dr/dx_j = -r^3 x_j / d, so
 *   dx_j = r w_j dy_j - (r^3 / d) x_j sum_i dy_i w_i x_i. */
void k_rmsnorm_bwd(float *dx, float *dweight, const float *dout, const float *x,
                   const float *weight, const float *rstd, int T, int d, float eps)
{
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * d;
        const float *dyr = dout + (size_t)t * d;
        float *dxr = dx + (size_t)t * d;
        float r = rstd ? rstd[t] : row_rstd(xr, d, eps);
        double dot = 0.0;
        for (int i = 0; i < d; i++)
            dot += (double)dyr[i] * weight[i] * xr[i];
        float c = (float)(dot * r * r * r / d);
        for (int i = 0; i < d; i++)
            dxr[i] += r * weight[i] * dyr[i] - c * xr[i];
        if (dweight)
            for (int i = 0; i < d; i++)
                dweight[i] += dyr[i] * xr[i] * r;
    }
}
