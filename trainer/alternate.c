/* alternate.c: --gpu-alternate's blocks and their paired figure (alternate.h). */
#include "alternate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom; 1.96 beyond. */
static const double t975[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};

int tr_alternate_on(long k)
{
    if (k <= 0) return 1;
    long j = k - 1; /* the measured blocks: pairs (1, 2), (3, 4), ... */
    int first_on = (j / 2) % 2 == 0;
    return j % 2 == 0 ? first_on : !first_on;
}

void tr_alternate_init(tr_alternate *a, long block, long settle)
{
    *a = (tr_alternate){.block = block, .settle = settle};
}

int tr_alternate_at_step(tr_alternate *a, long step, double now_s, double cpu_s)
{
    if (a->block <= 0 || step <= 0) return TR_ALT_NONE;
    long k = step / a->block, i = step % a->block; /* step k*block ends block k-1 */
    if (i == 0 && a->have_mark) {
        if (a->n_blocks == a->cap) {
            size_t cap = a->cap ? 2 * a->cap : 64;
            tr_alt_block *b = realloc(a->blocks, cap * sizeof *b);
            if (!b) return -1;
            a->blocks = b;
            a->cap = cap;
        }
        double n = (double)(a->block - a->settle);
        a->blocks[a->n_blocks++] = (tr_alt_block){tr_alternate_on(k - 1), (now_s - a->mark_s) / n,
                                                   (cpu_s - a->mark_cpu) / n};
        a->have_mark = 0;
    }
    int action = TR_ALT_NONE;
    if (i == 0) {
        int on = tr_alternate_on(k);
        if (on && a->paused) action = TR_ALT_RESUME;
        else if (!on && !a->paused) action = TR_ALT_PAUSE;
        a->paused = !on;
    }
    /* the warm-up block (k 0) is not timed */
    if (k >= 1 && i == a->settle) {
        a->mark_s = now_s;
        a->mark_cpu = cpu_s;
        a->have_mark = 1;
    }
    return action;
}

int tr_alternate_summary(const tr_alternate *a, char *buf, size_t size)
{
    size_t pairs = a->n_blocks / 2;
    if (pairs < 2) {
        snprintf(buf, size, "gpu-alternate: %zu block pair%s: too few for an interval (run more steps)", pairs,
                 pairs == 1 ? "" : "s");
        return (int)pairs;
    }
    double sum = 0, sum_on = 0, sum_off = 0;
    double *r = malloc(pairs * sizeof *r);
    if (!r) {
        snprintf(buf, size, "gpu-alternate: out of memory for the summary");
        return (int)pairs;
    }
    for (size_t j = 0; j < pairs; j++) {
        const tr_alt_block *x = &a->blocks[2 * j], *y = &a->blocks[2 * j + 1];
        const tr_alt_block *on = x->on ? x : y, *off = x->on ? y : x;
        r[j] = off->s_per_step / on->s_per_step; /* rate recorded / rate paused */
        sum += r[j];
        sum_on += on->cpu_per_step;
        sum_off += off->cpu_per_step;
    }
    double mean = sum / (double)pairs, ss = 0;
    for (size_t j = 0; j < pairs; j++) ss += (r[j] - mean) * (r[j] - mean);
    double sd = sqrt(ss / (double)(pairs - 1));
    double t = pairs - 1 <= 30 ? t975[pairs - 2] : 1.96;
    double half = t * sd / sqrt((double)pairs);
    /* the median, by insertion sort: pairs are few */
    for (size_t j = 1; j < pairs; j++)
        for (size_t k = j; k > 0 && r[k - 1] > r[k]; k--) {
            double v = r[k];
            r[k] = r[k - 1];
            r[k - 1] = v;
        }
    double med = pairs % 2 ? r[pairs / 2] : (r[pairs / 2 - 1] + r[pairs / 2]) / 2;
    free(r);
    snprintf(buf, size,
             "gpu-alternate: %zu block pairs of %ld steps (%ld timed): rate recorded / paused mean %.4f, "
             "95%% interval [%.4f, %.4f], median %.4f; CPU ms per step recorded %.3f, paused %.3f",
             pairs, a->block, a->block - a->settle, mean, mean - half, mean + half, med,
             1e3 * sum_on / (double)pairs, 1e3 * sum_off / (double)pairs);
    return (int)pairs;
}

void tr_alternate_free(tr_alternate *a)
{
    free(a->blocks);
    *a = (tr_alternate){0};
}
