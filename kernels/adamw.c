/* adamw.c: the drafter's optimizer step (AdamW with bias correction) and global-norm gradient
 * clipping, over flat parameter / gradient / moment buffers. */
#include <math.h>

#include "kernels.h"

void k_adamw_step(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step)
{
    float bias1 = (float)(1.0 - pow((double)beta1, step));
    float bias2 = (float)(1.0 - pow((double)beta2, step));
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float m_hat = m[i] / bias1;
        float v_hat = v[i] / bias2;
        param[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * param[i]);
    }
}

float k_grad_norm(const float *const *grads, const size_t *counts, int n_tensors)
{
    double sum_sq = 0.0;
    for (int t = 0; t < n_tensors; t++)
        for (size_t i = 0; i < counts[t]; i++)
            sum_sq += (double)grads[t][i] * grads[t][i];
    return (float)sqrt(sum_sq);
}

float k_clip_grad_norm(float *const *grads, const size_t *counts, int n_tensors, float max_norm)
{
    float norm = k_grad_norm((const float *const *)grads, counts, n_tensors);
    if (!isfinite(norm) || !(max_norm > 0.0f) || norm <= max_norm)
        return norm;
    float coef = (float)((double)max_norm / ((double)norm + 1e-6));
    for (int t = 0; t < n_tensors; t++)
        for (size_t i = 0; i < counts[t]; i++)
            grads[t][i] *= coef;
    return norm;
}
