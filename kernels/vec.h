/* vec.h: private inner loops shared by the kernels (not part of the public API). Written as
 * fixed-width chunks of 8 so that the compiler vectorizes them at -O2 without -ffast-math,
 * with a fixed, deterministic summation order. */
#ifndef STAGETRACE_KERNELS_VEC_H
#define STAGETRACE_KERNELS_VEC_H

/* y[0..n) += a * x[0..n) */
static inline void k_vec_axpy(float *restrict y, float a, const float *restrict x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            y[i + u] += a * x[i + u];
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* sum_i a[i] * b[i], with eight partial sums */
static inline float k_vec_dot(const float *restrict a, const float *restrict b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += a[i + u] * b[i + u];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* x[0..n) *= a */
static inline void k_vec_scale(float *x, float a, int n)
{
    for (int i = 0; i < n; i++)
        x[i] *= a;
}

#endif /* STAGETRACE_KERNELS_VEC_H */
