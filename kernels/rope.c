/* rope.c: rotary position embedding on [T, H, hd] queries or keys, forward and backward, with
 * explicit per-token positions (they restart at each document, and the drafter's block tokens
 * continue from their anchor). Angles are computed in double, then rounded once. */
#include <math.h>

#include "kernels.h"

static void rope_angle(int32_t pos, int p, int hd, float theta, float *c, float *s)
{
    double angle = (double)pos * pow((double)theta, -2.0 * p / hd);
    *c = (float)cos(angle);
    *s = (float)sin(angle);
}

void k_rope_fwd(float *out, const float *x, const int32_t *positions, int T, int H, int hd,
                float theta)
{
    int half = hd / 2;
    for (int t = 0; t < T; t++) {
        for (int p = 0; p < half; p++) {
            float c, s;
            rope_angle(positions[t], p, hd, theta, &c, &s);
            for (int h = 0; h < H; h++) {
                size_t off = ((size_t)t * H + h) * hd;
                float x0 = x[off + p], x1 = x[off + p + half];
                out[off + p] = x0 * c - x1 * s;
                out[off + p + half] = x0 * s + x1 * c;
            }
        }
    }
}

void k_rope_bwd(float *dx, const float *dout, const int32_t *positions, int T, int H, int hd,
                float theta)
{
    int half = hd / 2;
    for (int t = 0; t < T; t++) {
        for (int p = 0; p < half; p++) {
            float c, s;
            rope_angle(positions[t], p, hd, theta, &c, &s);
            for (int h = 0; h < H; h++) {
                size_t off = ((size_t)t * H + h) * hd;
                float g0 = dout[off + p], g1 = dout[off + p + half];
                dx[off + p] += g0 * c + g1 * s;
                dx[off + p + half] += -g0 * s + g1 * c;
            }
        }
    }
}
