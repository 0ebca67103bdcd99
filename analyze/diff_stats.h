/* diff_stats.h: statistics of per-step samples, used by `diff` to compare
 * two traces step by step (diff_stats.c).
 */
#ifndef ANALYZE_DIFF_STATS_H
#define ANALYZE_DIFF_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Median (sorts v in place; the mean of the middle two for an even count;
 * NaN when empty). Two-sided Mann-Whitney U test of a against b: the p-value
 * by the normal approximation, with the variance corrected for ties and a
 * continuity correction of 1/2; 1 when every value is tied; NaN when a side
 * is empty or there is no memory. *u_out (may be NULL) gets U of a. */
double an_median(double *v, size_t n);
double an_mann_whitney(const double *a, size_t n1, const double *b, size_t n2, double *u_out);

/* Two-sided binomial test of k successes in n trials against probability p0
 * (counts: `diff`'s CPU samples): the sum of the probabilities of every
 * outcome no more likely than k (the exact test), for n up to
 * AN_BINOMIAL_EXACT_MAX; above it the normal approximation with a
 * continuity correction of 1/2. 1 when n is 0 or p0 is 0 or 1 and k is
 * what it must be; NaN for k > n or p0 outside [0, 1]. */
#define AN_BINOMIAL_EXACT_MAX 20000
double an_binomial_test(uint64_t k, uint64_t n, double p0);

#endif
