/* cross_entropy.c: the drafter's loss (softmax cross-entropy of the shared LM head's logits
 * against the target's predicted tokens, optionally weighted per position) with its gradient,
 * and the metrics logged beside it: argmax predictions, top-1 and top-k accuracy. */
#include <math.h>

#include "kernels.h"

/* log sum_v exp(row[v]), max-subtracted, summed in double. */
static double row_logsumexp(const float *row, int V)
{
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (row[v] > mx)
            mx = row[v];
    if (mx == -INFINITY || mx == INFINITY)
        return mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        sum += exp((double)row[v] - mx);
    return mx + log(sum);
}

float k_cross_entropy_fwd(float *losses, const float *logits, const int32_t *targets,
                          const float *weights, int T, int V, int32_t ignore_index)
{
    double weighted_sum = 0.0, weight_total = 0.0;
    int bad_target = 0;
    for (int t = 0; t < T; t++) {
        int32_t y = targets[t];
        if (losses)
            losses[t] = 0.0f;
        if (y == ignore_index)
            continue;
        double w = weights ? weights[t] : 1.0;
        weight_total += w;
        if (y < 0 || y >= V) {
            bad_target = 1;
            continue;
        }
        const float *row = logits + (size_t)t * V;
        double loss = row_logsumexp(row, V) - row[y];
        if (losses)
            losses[t] = (float)loss;
        weighted_sum += w * loss;
    }
    if (bad_target)
        return NAN;
    return weight_total > 0.0 ? (float)(weighted_sum / weight_total) : 0.0f;
}

void k_cross_entropy_bwd(float *dlogits, const float *logits, const int32_t *targets,
                         const float *weights, int T, int V, int32_t ignore_index, float dloss)
{
    double weight_total = 0.0;
    for (int t = 0; t < T; t++)
        if (targets[t] != ignore_index)
            weight_total += weights ? weights[t] : 1.0;
    if (!(weight_total > 0.0))
        return;
    for (int t = 0; t < T; t++) {
        int32_t y = targets[t];
        if (y == ignore_index || y < 0 || y >= V)
            continue;
        double coef = dloss * (weights ? weights[t] : 1.0) / weight_total;
        if (coef == 0.0)
            continue;
        const float *row = logits + (size_t)t * V;
        float *drow = dlogits + (size_t)t * V;
        double lse = row_logsumexp(row, V);
        for (int v = 0; v < V; v++)
            drow[v] += (float)(coef * exp((double)row[v] - lse));
        drow[y] -= (float)coef;
    }
}

void k_argmax(int32_t *pred, const float *logits, int T, int V)
{
    for (int t = 0; t < T; t++) {
        const float *row = logits + (size_t)t * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        pred[t] = best;
    }
}

int k_topk_hits(const float *logits, const int32_t *targets, int T, int V, int k,
                int32_t ignore_index, int *n_valid)
{
    int hits = 0, valid = 0;
    for (int t = 0; t < T; t++) {
        int32_t y = targets[t];
        if (y == ignore_index)
            continue;
        valid++;
        if (y < 0 || y >= V)
            continue;
        const float *row = logits + (size_t)t * V;
        float ty = row[y];
        int rank = 0;
        for (int v = 0; v < V && rank < k; v++)
            if (row[v] > ty || (row[v] == ty && v < y))
                rank++;
        if (rank < k)
            hits++;
    }
    if (n_valid)
        *n_valid = valid;
    return hits;
}

float k_topk_accuracy(const float *logits, const int32_t *targets, int T, int V, int k,
                      int32_t ignore_index)
{
    int valid = 0;
    int hits = k_topk_hits(logits, targets, T, V, k, ignore_index, &valid);
    return valid ? (float)hits / (float)valid : 0.0f;
}

float k_accuracy(const float *logits, const int32_t *targets, int T, int V, int32_t ignore_index)
{
    return k_topk_accuracy(logits, targets, T, V, 1, ignore_index);
}
