/* test_diff_stats.c: the statistics `analyze diff` uses (analyze/
 * diff_stats.c): the median and the Mann-Whitney U test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#include "../analyze/diff_stats.h"

#define assert_close(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9 * (1.0 + fabs((double)(b))))

static void test_mann_whitney(void **state)
{
    (void)state;
    double a[] = {1, 2, 3, 4, 5}, b[] = {6, 7, 8, 9, 10}, u;
    /* U = 0; mu = 12.5, var = 25/12 * 11; z = 12 / sqrt(22.9167) = 2.5067; p = 0.012186
     * (scipy.stats.mannwhitneyu(a, b, method='asymptotic') gives 0.01219). */
    double p = an_mann_whitney(a, 5, b, 5, &u);
    assert_close(u, 0);
    assert_true(fabs(p - 0.0121857) < 1e-6);
    assert_close(an_mann_whitney(b, 5, a, 5, &u), p);
    assert_close(u, 25);
    /* all tied: p = 1 */
    double c[] = {3, 3, 3}, d[] = {3, 3};
    assert_close(an_mann_whitney(c, 3, d, 2, NULL), 1.0);
    /* ties across the samples: a = {1, 2, 2}, b = {2, 3}: ranks 1, 3, 3 | 3, 5;
     * U = 7 - 6 = 1; tie term 24; var = 6/12 * (6 - 24/20) = 2.4; z = (2 - 0.5)/1.549 */
    double e[] = {1, 2, 2}, f[] = {2, 3};
    p = an_mann_whitney(e, 3, f, 2, &u);
    assert_close(u, 1);
    assert_true(fabs(p - erfc(1.5 / sqrt(2.4) / sqrt(2.0))) < 1e-12);
    double m[] = {5, 1, 3, 2};
    assert_close(an_median(m, 4), 2.5);
    assert_close(an_median(m, 3), 2); /* sorted in place: 1 2 3 */
    assert_true(isnan(an_mann_whitney(a, 0, b, 5, NULL)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mann_whitney),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
