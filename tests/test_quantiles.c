/* test_quantiles.c: the quantile engine (analyze/quantiles.c) that gives
 * summary its exact percentiles: every percentile equals the sorted truth,
 * through every kind of pass (exact groups, histograms, collected and
 * refined buckets), with groups folded into others (summary's roles), and
 * fed through shards on real threads in any split (summary --jobs N).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#include "../analyze/analyze.h"

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs the quantile engine over groups of values, replaying them as often as
 * it asks, and compares every percentile with the sorted truth. */
static void check_quant(int64_t **vals, const size_t *n, uint32_t n_groups, uint32_t exact, uint64_t collect,
                        int min_passes, int max_passes)
{
    static const uint32_t pm[] = {1, 500, 950, 990, 1000};
    an_quant *q = an_quant_new(n_groups, pm + 1, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    int more, passes = 0;
    do {
        passes++;
        for (uint32_t gi = 0; gi < n_groups; gi++)
            for (size_t i = 0; i < n[gi]; i++) an_quant_add(q, gi, vals[gi][i]);
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
    } while (more);
    assert_true(passes >= min_passes);
    if (max_passes) assert_true(passes <= max_passes);
    for (uint32_t gi = 0; gi < n_groups; gi++) {
        int64_t *sorted = malloc((n[gi] + 1) * sizeof *sorted);
        if (n[gi]) memcpy(sorted, vals[gi], n[gi] * sizeof *sorted);
        qsort(sorted, n[gi], sizeof *sorted, cmp64);
        assert_int_equal(an_quant_count(q, gi), n[gi]);
        for (uint32_t p = 0; p < 3; p++) {
            uint64_t rank = (n[gi] * pm[p + 1] + 999) / 1000;
            int64_t want = n[gi] ? sorted[(rank ? rank : 1) - 1] : 0;
            assert_int_equal(an_quant_get(q, gi, p), want);
        }
        free(sorted);
    }
    an_quant_free(q);
}

static void test_quant_exact_small(void **state)
{
    (void)state;
    int64_t a[] = {5, 1, 4, 2, 3}; /* p50 = 3 (rank 3), p95 = p99 = 5 */
    int64_t b[100];
    for (int i = 0; i < 100; i++) b[i] = 100 - i; /* p50 = 50, p95 = 95, p99 = 99 */
    int64_t *vals[] = {a, b, NULL};
    size_t n[] = {5, 100, 0};
    check_quant(vals, n, 3, 512, 1 << 20, 1, 0);
}

static void test_quant_multipass(void **state)
{
    (void)state;
    enum { N = 50000, G = 6 };
    int64_t *vals[G];
    size_t n[G];
    uint64_t seed = 12345;
    for (int gi = 0; gi < G; gi++) {
        vals[gi] = malloc(N * sizeof **vals);
        n[gi] = N - (size_t)gi * 997;
        for (size_t i = 0; i < n[gi]; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            uint64_t r = seed >> 11;
            switch (gi) {
            case 0: vals[gi][i] = (int64_t)(r % 1000000000ULL); break;           /* wide uniform */
            case 1: vals[gi][i] = 4000000; break;                                /* all equal */
            case 2: vals[gi][i] = r & 1 ? 7 : 1000000007; break;                 /* two values */
            case 3: vals[gi][i] = (int64_t)(1000.0 / (1e-6 + (double)(r % 1000000) / 1e6)); break; /* heavy tail */
            case 4: vals[gi][i] = (int64_t)(r % 60); break;                      /* below 64: exact buckets */
            default: vals[gi][i] = INT64_MAX - (int64_t)(r % 3); break;          /* the top of the range */
            }
        }
    }
    /* Tiny limits force histograms, budget exhaustion and refinement passes. */
    check_quant(vals, n, G, 64, 100, 3, 0);
    /* Generous limits: two passes. */
    check_quant(vals, n, G, 512, 1 << 22, 2, 2);
    for (int gi = 0; gi < G; gi++) free(vals[gi]);
}

/* A bucket holding more values than the pass may collect (the group of one
 * stage over many ranks of a run) is counted into bins one nanosecond wide
 * while the bin budget (an eighth of the values') lasts: the value is known
 * after the second pass. With 1024 bins it took a third. Here 2 M values in
 * 65536 ns from 2^20: the bucket of each percentile (16384 ns wide) holds
 * about 500 000 values, over the budget of 400 000; the three targets' bins,
 * 49 152, fit in the bin budget of 50 000. */
static void test_quant_wide_bucket_two_passes(void **state)
{
    (void)state;
    enum { N = 2000000 };
    int64_t *vals = malloc(N * sizeof *vals);
    assert_non_null(vals);
    uint64_t seed = 7;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        vals[i] = 1048576 + (int64_t)((seed >> 20) % 65536);
    }
    size_t n = N;
    check_quant(&vals, &n, 1, 64, 400000, 2, 2);
    free(vals);
}

/* an_quant_fold: a group that gets its values in pass 1 by folding other
 * groups in (summary's roles), and directly in later passes, reports what a
 * group given every value directly reports: for exact groups folded into a
 * small one, an exact one into a histogram, histograms into histograms, and
 * folds that push an exact group over its limit; with limits that force
 * several passes and with generous ones. */
static void check_fold(uint32_t exact, uint64_t collect)
{
    static const uint32_t pm[] = {500, 950, 990};
    enum { SRC = 4, N = 20000 };
    /* groups 0..3: sources; 4: folded from 0 and 1 (small + small);
     * 5: from 1 and 2 (small + large); 6: from 2 and 3 (large + large);
     * 7..9: direct references for 4..6 */
    static const size_t n[SRC] = {40, 300, N, N / 2};
    int64_t *vals[SRC];
    uint64_t seed = 99;
    for (int s = 0; s < SRC; s++) {
        vals[s] = malloc(n[s] * sizeof **vals);
        assert_non_null(vals[s]);
        for (size_t i = 0; i < n[s]; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            vals[s][i] = s == 3 ? 5000 + (int64_t)(seed >> 50) % 7 : (int64_t)((seed >> 20) % 1000000);
        }
    }
    static const int pair[3][2] = {{0, 1}, {1, 2}, {2, 3}};
    an_quant *q = an_quant_new(10, pm, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    assert_int_equal(an_quant_fold(q, 4, 4), -1); /* not into itself */
    int more, passes = 0;
    do {
        passes++;
        for (int s = 0; s < SRC; s++)
            for (size_t i = 0; i < n[s]; i++) an_quant_add(q, (uint32_t)s, vals[s][i]);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 2; j++) {
                int s = pair[k][j];
                for (size_t i = 0; i < n[s]; i++) {
                    an_quant_add(q, (uint32_t)(7 + k), vals[s][i]);
                    if (passes > 1) an_quant_add(q, (uint32_t)(4 + k), vals[s][i]);
                }
                if (passes == 1) assert_int_equal(an_quant_fold(q, (uint32_t)(4 + k), (uint32_t)s), 0);
            }
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
        if (more) assert_int_equal(an_quant_fold(q, 4, 0), -1); /* pass 1 only */
    } while (more);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(an_quant_count(q, (uint32_t)(4 + k)), n[pair[k][0]] + n[pair[k][1]]);
        for (uint32_t p = 0; p < 3; p++)
            assert_int_equal(an_quant_get(q, (uint32_t)(4 + k), p), an_quant_get(q, (uint32_t)(7 + k), p));
    }
    an_quant_free(q);
    for (int s = 0; s < SRC; s++) free(vals[s]);
}

static void test_quant_fold(void **state)
{
    (void)state;
    check_fold(64, 100);      /* histograms everywhere, refinement passes */
    check_fold(512, 1 << 22); /* exact small groups, two passes */
}

static uint64_t next_random(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return *seed >> 17;
}

typedef struct shard_job {
    an_quant *shard;
    int64_t *const *vals;
    const size_t *n;
    uint32_t n_groups, index, n_shards;
    int interleave;
} shard_job;

/* A shard's share of every group: every n_shards-th value, or one
 * contiguous slice of each group. */
static void *add_share(void *arg)
{
    shard_job *j = arg;
    for (uint32_t gi = 0; gi < j->n_groups; gi++) {
        size_t n = j->n[gi];
        if (j->interleave) {
            for (size_t i = j->index; i < n; i += j->n_shards) an_quant_add(j->shard, gi, j->vals[gi][i]);
        } else {
            size_t a = n * j->index / j->n_shards, b = n * (j->index + 1) / j->n_shards;
            uint32_t groups[64];
            int64_t values[64];
            for (size_t i = a; i < b;) {
                size_t k = 0;
                for (; k < 64 && i < b; k++, i++) {
                    groups[k] = gi;
                    values[k] = j->vals[gi][i];
                }
                an_quant_add_many(j->shard, groups, values, k);
            }
        }
    }
    return NULL;
}

static int cmp_i64_test(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every pass: n_shards shards on as many threads, merged; then the
 * percentiles against the sorted truth. Returns the passes taken. */
static int quant_through_shards(int64_t *const *vals, const size_t *n, uint32_t n_groups, uint32_t exact,
                                uint64_t collect, uint32_t n_shards, int interleave)
{
    static const uint32_t pm[] = {500, 950, 990};
    an_quant *q = an_quant_new(n_groups, pm, 3);
    assert_non_null(q);
    an_quant_limits(q, exact, collect);
    shard_job jobs[16];
    pthread_t tids[16];
    assert_true(n_shards <= 16);
    int more, passes = 0;
    do {
        passes++;
        for (uint32_t s = 0; s < n_shards; s++) {
            jobs[s] = (shard_job){an_quant_shard(q), vals, n, n_groups, s, n_shards, interleave};
            assert_non_null(jobs[s].shard);
        }
        for (uint32_t s = 0; s < n_shards; s++)
            assert_int_equal(pthread_create(&tids[s], NULL, add_share, &jobs[s]), 0);
        for (uint32_t s = 0; s < n_shards; s++) assert_int_equal(pthread_join(tids[s], NULL), 0);
        for (uint32_t s = 0; s < n_shards; s++) assert_int_equal(an_quant_merge(q, jobs[s].shard), 0);
        more = an_quant_end_pass(q);
        assert_true(more >= 0);
    } while (more);
    for (uint32_t gi = 0; gi < n_groups; gi++) {
        int64_t *sorted = malloc((n[gi] + 1) * sizeof *sorted);
        assert_non_null(sorted);
        if (n[gi]) memcpy(sorted, vals[gi], n[gi] * sizeof *sorted);
        qsort(sorted, n[gi], sizeof *sorted, cmp_i64_test);
        assert_int_equal(an_quant_count(q, gi), n[gi]);
        for (uint32_t p = 0; p < 3; p++) {
            uint64_t rank = (n[gi] * pm[p] + 999) / 1000;
            int64_t want = n[gi] ? sorted[(rank ? rank : 1) - 1] : 0;
            if (an_quant_get(q, gi, p) != want)
                fail_msg("group %u p%u: %lld, want %lld (%u shards, exact %u, collect %llu)", gi, pm[p] / 10,
                         (long long)an_quant_get(q, gi, p), (long long)want, n_shards, exact,
                         (unsigned long long)collect);
        }
        free(sorted);
    }
    an_quant_free(q);
    return passes;
}

static void test_quant_shards(void **state)
{
    (void)state;
    enum { G = 9, N = 30000 };
    int64_t *vals[G];
    size_t n[G] = {N, N - 997, N, N - 5, 3000, 40, 100, 1, 0};
    uint64_t seed = 99;
    for (int gi = 0; gi < G; gi++) {
        vals[gi] = malloc((n[gi] + 1) * sizeof **vals);
        assert_non_null(vals[gi]);
        for (size_t i = 0; i < n[gi]; i++) {
            uint64_t r = next_random(&seed);
            switch (gi) {
            case 0: vals[gi][i] = (int64_t)(r % 1000000000ULL); break;       /* wide uniform */
            case 1: vals[gi][i] = 4000000; break;                            /* all equal */
            case 2: vals[gi][i] = r & 1 ? 7 : 1000000007; break;             /* two values */
            case 3: vals[gi][i] = (int64_t)(r % 60); break;                  /* exact buckets */
            case 4: vals[gi][i] = INT64_MAX - (int64_t)(r % 3); break;       /* the top of the range */
            default: vals[gi][i] = (int64_t)(r % 5000); break;               /* small groups */
            }
        }
    }
    /* Tiny limits: groups of 40 stay exact when merged, groups of 100 and
     * up become histograms from exact shards; the budget runs out, so
     * buckets are refined over several passes. */
    for (uint32_t shards = 1; shards <= 7; shards += 3) {
        assert_true(quant_through_shards(vals, n, G, 64, 100, shards, 0) >= 3);
        assert_true(quant_through_shards(vals, n, G, 64, 100, shards, 1) >= 3);
    }
    /* Default-like limits: two passes, values collected through the engine's lock. */
    assert_int_equal(quant_through_shards(vals, n, G, 512, 1 << 22, 2, 1), 2);
    assert_int_equal(quant_through_shards(vals, n, G, 512, 1 << 22, 7, 0), 2);
    for (int gi = 0; gi < G; gi++) free(vals[gi]);
}

/* A shard of a shard, or a shard of another engine, is refused. */
static void test_quant_shard_misuse(void **state)
{
    (void)state;
    static const uint32_t pm[] = {500};
    an_quant *a = an_quant_new(2, pm, 1), *b = an_quant_new(2, pm, 1);
    assert_non_null(a);
    assert_non_null(b);
    an_quant *sa = an_quant_shard(a);
    assert_non_null(sa);
    assert_null(an_quant_shard(sa));
    assert_int_equal(an_quant_end_pass(sa), -1);
    an_quant_add(sa, 0, 5);
    assert_int_equal(an_quant_merge(b, sa), -1); /* not b's shard: b fails */
    assert_int_equal(an_quant_end_pass(b), -1);
    assert_int_equal(an_quant_merge(a, NULL), 0);
    an_quant_free(a);
    an_quant_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_exact_small),
        cmocka_unit_test(test_quant_multipass),
        cmocka_unit_test(test_quant_wide_bucket_two_passes),
        cmocka_unit_test(test_quant_fold),
        cmocka_unit_test(test_quant_shards),
        cmocka_unit_test(test_quant_shard_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
