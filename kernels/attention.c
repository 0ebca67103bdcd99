/* attention.c: multi-head scaled dot-product attention over an explicit mask, forward and
 * backward, one query row at a time (the shape of a flash-attention kernel, without tiles).
 * The forward keeps a running max and sum (online softmax) so it needs no scratch; it saves
 * the row's log-sum-exp so that the backward can recompute probabilities exactly. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "vec.h"

void k_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                     const uint8_t *mask, int Tq, int Tk, int H, int hd)
{
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t row = (size_t)H * hd; /* stride between tokens */
    for (int i = 0; i < Tq; i++) {
        const uint8_t *allow = mask ? mask + (size_t)i * Tk : NULL;
        for (int h = 0; h < H; h++) {
            const float *qi = q + i * row + (size_t)h * hd;
            float *oi = out + i * row + (size_t)h * hd;
            memset(oi, 0, (size_t)hd * sizeof(float));
            float run_max = -INFINITY, run_sum = 0.0f;
            for (int j = 0; j < Tk; j++) {
                if (allow && !allow[j])
                    continue;
                float s = k_vec_dot(qi, k + j * row + (size_t)h * hd, hd) * scale;
                if (s > run_max) {
                    /* rescale what was summed under the old max (exp(-inf) = 0 at first) */
                    float c = expf(run_max - s);
                    run_sum *= c;
                    k_vec_scale(oi, c, hd);
                    run_max = s;
                }
                float p = expf(s - run_max);
                run_sum += p;
                k_vec_axpy(oi, p, v + j * row + (size_t)h * hd, hd);
            }
            if (run_sum > 0.0f) {
                k_vec_scale(oi, 1.0f / run_sum, hd);
                if (lse)
                    lse[(size_t)i * H + h] = run_max + logf(run_sum);
            } else if (lse) {
                lse[(size_t)i * H + h] = -INFINITY;
            }
        }
    }
}

/* With p_ij = exp(s_ij - lse_i) and D_i = sum_j p_ij (dO_i . v_j) = dO_i . O_i:
 *   dv_j += p_ij dO_i;  ds_ij = p_ij (dO_i . v_j - D_i);
 *   dq_i += scale sum_j ds_ij k_j;  dk_j += scale ds_ij q_i. */
void k_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *out, const float *lse,
                     const uint8_t *mask, int Tq, int Tk, int H, int hd)
{
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t row = (size_t)H * hd;
    for (int i = 0; i < Tq; i++) {
        const uint8_t *allow = mask ? mask + (size_t)i * Tk : NULL;
        for (int h = 0; h < H; h++) {
            float row_lse = lse[(size_t)i * H + h];
            if (row_lse == -INFINITY)
                continue; /* no allowed key: out was 0, nothing flows back */
            size_t off = i * row + (size_t)h * hd;
            const float *qi = q + off, *doi = dout + off;
            float *dqi = dq + off;
            float D = k_vec_dot(doi, out + off, hd);
            for (int j = 0; j < Tk; j++) {
                if (allow && !allow[j])
                    continue;
                size_t koff = j * row + (size_t)h * hd;
                const float *kj = k + koff, *vj = v + koff;
                float p = expf(k_vec_dot(qi, kj, hd) * scale - row_lse);
                float ds = p * (k_vec_dot(doi, vj, hd) - D) * scale;
                float *dkj = dk + koff, *dvj = dv + koff;
                k_vec_axpy(dqi, ds, kj, hd);
                k_vec_axpy(dkj, ds, qi, hd);
                k_vec_axpy(dvj, p, doi, hd);
            }
        }
    }
}
