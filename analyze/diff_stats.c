/* diff_stats.c: the statistics `diff` compares per-step samples with (see
 * diff_stats.h): the median, and the two-sided Mann-Whitney U test by the
 * normal approximation; the two-sided binomial test of a count.
 */
#include <math.h>
#include <stdlib.h>

#include "diff_stats.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double an_median(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

typedef struct labelled {
    double v;
    int from_a;
} labelled;

static int cmp_labelled(const void *a, const void *b)
{
    return cmp_double(&((const labelled *)a)->v, &((const labelled *)b)->v);
}

double an_mann_whitney(const double *a, size_t n1, const double *b, size_t n2, double *u_out)
{
    if (!n1 || !n2) return NAN;
    size_t n = n1 + n2;
    labelled *all = malloc(n * sizeof *all);
    if (!all) return NAN;
    for (size_t i = 0; i < n1; i++) all[i] = (labelled){a[i], 1};
    for (size_t i = 0; i < n2; i++) all[n1 + i] = (labelled){b[i], 0};
    qsort(all, n, sizeof *all, cmp_labelled);
    double rank_sum_a = 0, ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && all[j + 1].v == all[i].v) j++;
        double t = (double)(j - i + 1), rank = (double)(i + j) / 2.0 + 1.0; /* average rank, 1-based */
        for (size_t k = i; k <= j; k++)
            if (all[k].from_a) rank_sum_a += rank;
        ties += t * t * t - t;
        i = j + 1;
    }
    free(all);
    double dn1 = (double)n1, dn2 = (double)n2, dn = (double)n;
    double u = rank_sum_a - dn1 * (dn1 + 1.0) / 2.0;
    if (u_out) *u_out = u;
    double mu = dn1 * dn2 / 2.0;
    double var = dn1 * dn2 / 12.0 * ((dn + 1.0) - ties / (dn * (dn - 1.0)));
    if (!(var > 0)) return 1.0;
    double d = fabs(u - mu) - 0.5; /* continuity correction */
    if (d < 0) d = 0;
    return erfc(d / sqrt(var) / sqrt(2.0));
}

/* log P(X = i) for X ~ Bin(n, p), 0 < p < 1 */
static double log_pmf(uint64_t i, uint64_t n, double lp, double lq)
{
    return lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) + (double)i * lp +
           (double)(n - i) * lq;
}

double an_binomial_test(uint64_t k, uint64_t n, double p0)
{
    if (k > n || !(p0 >= 0 && p0 <= 1)) return NAN;
    if (n == 0) return 1;
    if (p0 == 0) return k == 0 ? 1 : 0;
    if (p0 == 1) return k == n ? 1 : 0;
    if (n > AN_BINOMIAL_EXACT_MAX) {
        double mean = (double)n * p0, sd = sqrt((double)n * p0 * (1 - p0));
        double z = (fabs((double)k - mean) - 0.5) / sd;
        if (z <= 0) return 1;
        return fmin(1.0, erfc(z / sqrt(2.0)));
    }
    double lp = log(p0), lq = log1p(-p0);
    /* outcomes within a relative 1e-7 of k's probability count as equally likely (rounding) */
    double lk = log_pmf(k, n, lp, lq) + 1e-7, sum = 0;
    for (uint64_t i = 0; i <= n; i++) {
        double li = log_pmf(i, n, lp, lq);
        if (li <= lk) sum += exp(li);
    }
    return sum > 1 ? 1 : sum;
}
