/* test_kernels.c: tests of the CPU reference kernels (kernels/kernels.h).
 *
 * Forward ops are checked on tiny cases whose answers are written out by hand (or follow from a
 * one-line formula evaluated in double), and on random inputs against naive double-precision
 * loops. Every backward op is checked against fp32 central finite differences of a scalar
 * loss L = sum_i proj_i * y_i (proj random, L accumulated in double):
 *   numeric = (L(x + h) - L(x - h)) / 2h,  h = 1e-2,
 *   pass when |numeric - analytic| <= 2e-4 + 2e-3 * |numeric| for every element.
 * Outputs that do not depend on the perturbed element are bit-identical in both evaluations,
 * so the fp32 rounding noise in L comes only from the few outputs that do; with h = 1e-2 that
 * noise is ~1e-5 and the O(h^2) truncation ~1e-5 on O(1) gradients (measured worst: 8e-5),
 * inside the tolerance. KERNELS_TEST_VERBOSE=1 prints each check's worst error.
 * Gradient buffers start from random values, which checks that backward ops accumulate.
 * Inputs come from a seeded xorshift RNG, so every run sees the same numbers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif

/* ---- helpers ------------------------------------------------------------------------------ */

#define assert_close(actual, expected, tol)                                                    \
    do {                                                                                       \
        double a_ = (double)(actual), e_ = (double)(expected);                                 \
        if (!(fabs(a_ - e_) <= (tol))) {                                                       \
            print_error("%s = %.9g, expected %.9g (tol %g)\n", #actual, a_, e_, (double)(tol)); \
            fail();                                                                            \
        }                                                                                      \
    } while (0)

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
}

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [-scale, scale) */
static float rng_uniform(float scale)
{
    return scale * (float)((double)(rng_next() >> 40) / (double)(1ull << 23) - 1.0);
}

static float *random_floats(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(scale);
    return x;
}

static float *copy_floats(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static double project(const float *y, const float *proj, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)proj[i] * y[i];
    return s;
}

#define FD_STEP 1e-2f
#define FD_ATOL 2e-4
#define FD_RTOL 2e-3

/* Checks analytic[i] against central differences of loss() in param[i], for every i.
 * analytic = grad_after - grad_before (the backward op's contribution). */
static void check_grad(const char *what, float *param, size_t n, const float *grad_after,
                       const float *grad_before, double (*loss)(void *), void *ctx)
{
    double worst_abs = 0.0, worst_ratio = 0.0, analytic_norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        float saved = param[i];
        param[i] = saved + FD_STEP;
        double lp = loss(ctx);
        param[i] = saved - FD_STEP;
        double lm = loss(ctx);
        param[i] = saved;
        /* the step actually taken, in fp32 */
        double h2 = ((double)(saved + FD_STEP) - (double)(saved - FD_STEP));
        double numeric = (lp - lm) / h2;
        double analytic = (double)grad_after[i] - (double)grad_before[i];
        double err = fabs(numeric - analytic);
        analytic_norm += analytic * analytic;
        double ratio = err / (FD_ATOL + FD_RTOL * fabs(numeric));
        if (err > worst_abs)
            worst_abs = err;
        if (ratio > worst_ratio)
            worst_ratio = ratio;
        if (!(err <= FD_ATOL + FD_RTOL * fabs(numeric))) {
            print_error("%s[%zu]: analytic %.7g, finite difference %.7g\n", what, i, analytic,
                        numeric);
            fail();
        }
    }
    if (getenv("KERNELS_TEST_VERBOSE"))
        print_message("  %-34s max |fd - analytic| %.1e, max error / tolerance %.3f\n", what,
                      worst_abs, worst_ratio);
    /* a gradient that is zero everywhere would pass vacuously */
    assert_true(sqrt(analytic_norm) > 1e-3);
}

/* ---- arena, elementwise, embedding, taps, bf16 ------------------------------------------- */

static void test_arena(void **state)
{
    (void)state;
    _Alignas(64) unsigned char buffer[256];
    k_arena arena;
    k_arena_init(&arena, buffer + 1, 255); /* deliberately misaligned buffer */
    unsigned char *a = k_arena_alloc(&arena, 1);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_ptr_equal(a, buffer + 64);
    size_t mark = k_arena_mark(&arena);
    float *f = k_arena_floats_zeroed(&arena, 16);
    assert_non_null(f);
    assert_ptr_equal(f, buffer + 128);
    for (int i = 0; i < 16; i++)
        assert_true(f[i] == 0.0f);
    /* 192 bytes used of buffer[256]: 64 more fit, 65 do not */
    assert_null(k_arena_alloc(&arena, 65));
    assert_null(k_arena_alloc(&arena, SIZE_MAX));
    assert_ptr_equal(k_arena_alloc(&arena, 64), buffer + 192);
    assert_null(k_arena_alloc(&arena, 1));
    k_arena_reset(&arena, mark);
    assert_ptr_equal(k_arena_alloc(&arena, 8), buffer + 128);
    assert_ptr_equal(k_arena_alloc(&arena, 63), buffer + 192); /* 192 .. 254 */
    assert_null(k_arena_alloc(&arena, 1));
}

static void test_add(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 10}, out[3];
    k_add(out, a, b, 3);
    assert_true(out[0] == 1.5f && out[1] == 0.0f && out[2] == 13.0f);
    k_add(a, a, b, 3); /* in place */
    assert_memory_equal(a, out, sizeof out);
}

static void test_embedding(void **state)
{
    (void)state;
    const float table[3 * 2] = {1, 2, 3, 4, 5, 6};
    const int32_t tokens[3] = {2, 0, 2};
    float out[3 * 2];
    assert_int_equal(k_embedding_fwd(out, tokens, table, 3, 2, 3), K_OK);
    const float expected[6] = {5, 6, 1, 2, 5, 6};
    assert_memory_equal(out, expected, sizeof out);
    const int32_t bad[2] = {1, 3};
    assert_int_equal(k_embedding_fwd(out, bad, table, 2, 2, 3), K_EINVAL);
    assert_true(out[0] == 3 && out[1] == 4 && out[2] == 0 && out[3] == 0);
}

static void test_pack_taps(void **state)
{
    (void)state;
    const float tap0[4] = {1, 2, 3, 4}, tap1[4] = {5, 6, 7, 8};
    const float tap2[4] = {1.00390625f /* 1 + 2^-8: a tie, rounds to 1 */, -0.5f, 9, 10};
    const float *taps[3] = {tap0, tap1, tap2};
    float out[2 * 6];
    k_pack_taps(out, taps, 3, 2, 2);
    const float expected[12] = {1, 2, 5, 6, 1.00390625f, -0.5f, 3, 4, 7, 8, 9, 10};
    assert_memory_equal(out, expected, sizeof out);

    uint16_t packed[12];
    k_pack_taps_bf16(packed, taps, 3, 2, 2);
    const uint16_t expected_bf16[12] = {0x3F80, 0x4000, 0x40A0, 0x40C0, 0x3F80, 0xBF00,
                                        0x4040, 0x4080, 0x40E0, 0x4100, 0x4110, 0x4120};
    assert_memory_equal(packed, expected_bf16, sizeof packed);
}

static void test_bf16(void **state)
{
    (void)state;
    /* representable values: exact patterns and exact round trips */
    const struct { float f; uint16_t b; } exact[] = {
        {0.0f, 0x0000},    {-0.0f, 0x8000},  {1.0f, 0x3F80},     {-2.5f, 0xC020},
        {0.15625f, 0x3E20}, {65280.0f, 0x477F}, {INFINITY, 0x7F80}, {-INFINITY, 0xFF80},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        assert_int_equal(k_bf16_from_float(exact[i].f), exact[i].b);
        float back = k_float_from_bf16(exact[i].b);
        assert_memory_equal(&back, &exact[i].f, sizeof back);
    }
    /* every non-NaN bf16 pattern survives bf16 -> float -> bf16 */
    for (uint32_t b = 0; b <= 0xFFFF; b++) {
        float f = k_float_from_bf16((uint16_t)b);
        if (isnan(f))
            continue;
        assert_int_equal(k_bf16_from_float(f), b);
    }
    /* round to nearest, ties to even */
    assert_int_equal(k_bf16_from_float(1.00390625f), 0x3F80);        /* 1 + 2^-8: tie, down */
    assert_int_equal(k_bf16_from_float(1.01171875f), 0x3F82);        /* 1 + 3*2^-8: tie, up */
    assert_int_equal(k_bf16_from_float(-1.00390625f), 0xBF80);       /* negative tie */
    assert_int_equal(k_bf16_from_float(1.00390625f + 0x1p-20f), 0x3F81); /* above half */
    assert_int_equal(k_bf16_from_float(1.0078125f - 0x1p-20f), 0x3F81);  /* below 1+2^-7 */
    assert_int_equal(k_bf16_from_float(FLT_MAX), 0x7F80);            /* overflows to inf */
    assert_int_equal(k_bf16_from_float(0x1p-149f), 0x0000);          /* tiny subnormal -> 0 */
    uint16_t nan_b = k_bf16_from_float(NAN);
    assert_true(isnan(k_float_from_bf16(nan_b)));
    /* a NaN whose payload sits only in the dropped bits must stay NaN, not become inf */
    uint32_t low_nan_bits = 0x7F800001u;
    float low_nan;
    memcpy(&low_nan, &low_nan_bits, sizeof low_nan);
    assert_true(isnan(k_float_from_bf16(k_bf16_from_float(low_nan))));

    const float in[4] = {3.0f, -0.09375f, 1.01171875f, 7.0f};
    uint16_t mid[4];
    float out[4];
    k_float_to_bf16(mid, in, 4);
    k_bf16_to_float(out, mid, 4);
    assert_true(out[0] == 3.0f && out[1] == -0.09375f && out[2] == 1.015625f && out[3] == 7.0f);
}

/* ---- rmsnorm ------------------------------------------------------------------------------ */

static void test_rmsnorm_fwd(void **state)
{
    (void)state;
    /* x = [3, -4, 0, 0]: mean square 25/4, rstd 0.4; y = x * 0.4 * w */
    const float x[8] = {3, -4, 0, 0, 2, 2, 2, 2};
    const float w[4] = {1, 2, 1, 1};
    float y[8], rstd[2];
    k_rmsnorm_fwd(y, rstd, x, w, 2, 4, 0.0f);
    assert_close(rstd[0], 0.4, 1e-7);
    assert_close(rstd[1], 0.5, 1e-7);
    const double expected[8] = {1.2, -3.2, 0, 0, 1, 2, 1, 1};
    for (int i = 0; i < 8; i++)
        assert_close(y[i], expected[i], 1e-6);
    /* eps enters under the root: x = [1, 1], eps = 3 -> rstd = 1/2 */
    const float ones[2] = {1, 1}, w1[2] = {1, 1};
    k_rmsnorm_fwd(y, rstd, ones, w1, 1, 2, 3.0f);
    assert_close(rstd[0], 0.5, 1e-7);
    assert_close(y[0], 0.5, 1e-7);
}

struct rmsnorm_case {
    float *x, *w, *y, *proj;
    int T, d;
    float eps;
};

static double rmsnorm_loss(void *p)
{
    struct rmsnorm_case *c = p;
    k_rmsnorm_fwd(c->y, NULL, c->x, c->w, c->T, c->d, c->eps);
    return project(c->y, c->proj, (size_t)c->T * c->d);
}

static void test_rmsnorm_bwd(void **state)
{
    (void)state;
    rng_seed(1);
    const int T = 3, d = 8;
    const size_t n = (size_t)T * d;
    struct rmsnorm_case c = {random_floats(n, 1), random_floats((size_t)d, 1.5f),
                             random_floats(n, 1), random_floats(n, 1), T, d, 1e-5f};
    float rstd[3];
    k_rmsnorm_fwd(c.y, rstd, c.x, c.w, T, d, c.eps);
    float *dx0 = random_floats(n, 1), *dw0 = random_floats((size_t)d, 1);
    float *dx = copy_floats(dx0, n), *dw = copy_floats(dw0, (size_t)d);
    k_rmsnorm_bwd(dx, dw, c.proj, c.x, c.w, rstd, T, d, c.eps);
    check_grad("rmsnorm dx", c.x, n, dx, dx0, rmsnorm_loss, &c);
    check_grad("rmsnorm dweight", c.w, (size_t)d, dw, dw0, rmsnorm_loss, &c);

    /* rstd = NULL recomputes it: same result; dweight = NULL is allowed */
    float *dx_re = copy_floats(dx0, n);
    k_rmsnorm_bwd(dx_re, NULL, c.proj, c.x, c.w, NULL, T, d, c.eps);
    for (size_t i = 0; i < n; i++)
        assert_close(dx_re[i], dx[i], 1e-6);

    free(c.x), free(c.w), free(c.y), free(c.proj);
    free(dx0), free(dw0), free(dx), free(dw), free(dx_re);
}

/* ---- matmul ------------------------------------------------------------------------------- */

static void test_matmul_small(void **state)
{
    (void)state;
    const float A[4] = {1, 2, 3, 4}, B[4] = {5, 6, 7, 8}, bias[2] = {1, -1};
    float C[4];
    k_matmul(C, A, B, NULL, 2, 2, 2, 0);
    const float AB[4] = {19, 22, 43, 50};
    assert_memory_equal(C, AB, sizeof C);
    k_matmul(C, A, B, bias, 2, 2, 2, 0);
    const float ABb[4] = {20, 21, 44, 49};
    assert_memory_equal(C, ABb, sizeof C);
    k_matmul(C, A, B, NULL, 2, 2, 2, 1); /* accumulate: ABb + AB */
    const float acc[4] = {39, 43, 87, 99};
    assert_memory_equal(C, acc, sizeof C);
    /* A^T B with A stored [K=2, M=2]: [[1,3],[2,4]] @ B */
    k_matmul_tn(C, A, B, 2, 2, 2, 0);
    const float AtB[4] = {26, 30, 38, 44};
    assert_memory_equal(C, AtB, sizeof C);
    /* A B^T with B stored [N=2, K=2] */
    k_matmul_nt(C, A, B, 2, 2, 2, 0);
    const float ABt[4] = {17, 23, 39, 53};
    assert_memory_equal(C, ABt, sizeof C);
    float db[2] = {1, 1};
    k_bias_bwd(db, AB, 2, 2);
    assert_true(db[0] == 63 && db[1] == 73);
    /* 1x3 @ 3x1 */
    const float r[3] = {1, 2, 3}, col[3] = {4, 5, 6};
    float s = 0;
    k_matmul(&s, r, col, NULL, 1, 3, 1, 0);
    assert_true(s == 32);
}

/* Random shapes that cross every tile boundary, against a double-precision triple loop. */
static void test_matmul_blocked(void **state)
{
    (void)state;
    rng_seed(2);
    const int M = 70, K = 300, N = 270;
    float *A = random_floats((size_t)M * K, 1), *B = random_floats((size_t)K * N, 1);
    float *At = malloc(sizeof(float) * K * M), *Bt = malloc(sizeof(float) * N * K);
    float *bias = random_floats((size_t)N, 1);
    float *C = random_floats((size_t)M * N, 1), *C0 = copy_floats(C, (size_t)M * N);
    double *ref = malloc(sizeof(double) * M * N);
    assert_true(At && Bt && ref);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            At[(size_t)k * M + i] = A[(size_t)i * K + k];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            Bt[(size_t)j * K + k] = B[(size_t)k * N + j];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)A[(size_t)i * K + k] * B[(size_t)k * N + j];
            ref[(size_t)i * N + j] = s;
        }
    const double tol = 1e-4; /* |entries| ~ sqrt(K)/3 ~ 6; fp32 sums of 300 terms */

    k_matmul(C, A, B, bias, M, K, N, 1);
    for (size_t i = 0; i < (size_t)M * N; i++)
        assert_close(C[i], ref[i] + bias[i % N] + C0[i], tol);
    k_matmul(C, A, B, NULL, M, K, N, 0);
    for (size_t i = 0; i < (size_t)M * N; i++)
        assert_close(C[i], ref[i], tol);
    memcpy(C, C0, sizeof(float) * M * N);
    k_matmul_tn(C, At, B, M, K, N, 1);
    for (size_t i = 0; i < (size_t)M * N; i++)
        assert_close(C[i], ref[i] + C0[i], tol);
    k_matmul_nt(C, A, Bt, M, K, N, 0);
    for (size_t i = 0; i < (size_t)M * N; i++)
        assert_close(C[i], ref[i], tol);

    free(A), free(B), free(At), free(Bt), free(bias), free(C), free(C0), free(ref);
}

struct linear_case {
    float *x, *W, *b, *y, *proj;
    int M, K, N;
};

static double linear_loss(void *p)
{
    struct linear_case *c = p;
    k_matmul(c->y, c->x, c->W, c->b, c->M, c->K, c->N, 0);
    return project(c->y, c->proj, (size_t)c->M * c->N);
}

/* y = x @ W + b; the backward of a linear layer through k_matmul_nt / k_matmul_tn /
 * k_bias_bwd, exactly as the header prescribes. */
static void test_matmul_bwd(void **state)
{
    (void)state;
    rng_seed(3);
    const int M = 5, K = 7, N = 9; /* N > 8 and K < 8 exercise both vector and tail paths */
    struct linear_case c = {random_floats((size_t)M * K, 1), random_floats((size_t)K * N, 1),
                            random_floats((size_t)N, 1), random_floats((size_t)M * N, 1),
                            random_floats((size_t)M * N, 1), M, K, N};
    float *dx0 = random_floats((size_t)M * K, 1), *dW0 = random_floats((size_t)K * N, 1);
    float *db0 = random_floats((size_t)N, 1);
    float *dx = copy_floats(dx0, (size_t)M * K), *dW = copy_floats(dW0, (size_t)K * N);
    float *db = copy_floats(db0, (size_t)N);
    k_matmul_nt(dx, c.proj, c.W, M, N, K, 1);
    k_matmul_tn(dW, c.x, c.proj, K, M, N, 1);
    k_bias_bwd(db, c.proj, M, N);
    check_grad("linear dx", c.x, (size_t)M * K, dx, dx0, linear_loss, &c);
    check_grad("linear dW", c.W, (size_t)K * N, dW, dW0, linear_loss, &c);
    check_grad("linear db", c.b, (size_t)N, db, db0, linear_loss, &c);
    free(c.x), free(c.W), free(c.b), free(c.y), free(c.proj);
    free(dx0), free(dW0), free(db0), free(dx), free(dW), free(db);
}

/* ---- masks -------------------------------------------------------------------------------- */

static void test_mask_causal_doc(void **state)
{
    (void)state;
    const int32_t docs[5] = {0, 0, 1, 1, 1};
    uint8_t mask[25];
    k_mask_causal_doc(mask, docs, 5);
    const uint8_t expected[25] = {
        1, 0, 0, 0, 0,
        1, 1, 0, 0, 0,
        0, 0, 1, 0, 0,
        0, 0, 1, 1, 0,
        0, 0, 1, 1, 1,
    };
    assert_memory_equal(mask, expected, sizeof mask);
    k_mask_causal_doc(mask, NULL, 4);
    const uint8_t causal[16] = {
        1, 0, 0, 0,
        1, 1, 0, 0,
        1, 1, 1, 0,
        1, 1, 1, 1,
    };
    assert_memory_equal(mask, causal, sizeof causal);
}

static void test_mask_dflash_block(void **state)
{
    (void)state;
    /* n_ctx = 6, three blocks of 2, keys = [ctx 0..5 | block0 6,7 | block1 8,9 | block2 10,11] */
    const int32_t anchors[3] = {2, 5, 4};
    uint8_t mask[6 * 12];

    assert_int_equal(k_mask_dflash_block(mask, anchors, NULL, NULL, 6, 3, 2, 0), K_OK);
    const uint8_t plain[6 * 12] = {
        /* ctx:  0  1  2  3  4  5 | blocks: 6  7  8  9 10 11 */
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, /* block 0, anchor 2 */
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0,
        1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, /* block 1, anchor 5 */
        1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0,
        1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, /* block 2, anchor 4 */
        1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1,
    };
    assert_memory_equal(mask, plain, sizeof plain);

    /* sliding window of 2 context keys, block 2 dropped */
    const uint8_t keep[3] = {1, 1, 0};
    assert_int_equal(k_mask_dflash_block(mask, anchors, keep, NULL, 6, 3, 2, 2), K_OK);
    const uint8_t windowed[6 * 12] = {
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, /* anchor 2: keys 0, 1 */
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0,
        0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, /* anchor 5: keys 3, 4 */
        0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* dropped */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    };
    assert_memory_equal(mask, windowed, sizeof windowed);

    /* documents: ctx docs {0,0,0,1,1,1}; a block sees context of its anchor's document only */
    const int32_t docs[6] = {0, 0, 0, 1, 1, 1};
    assert_int_equal(k_mask_dflash_block(mask, anchors, NULL, docs, 6, 3, 2, 0), K_OK);
    const uint8_t by_doc[6 * 12] = {
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, /* anchor 2 (doc 0) */
        1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0,
        0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, /* anchor 5 (doc 1) */
        0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0,
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, /* anchor 4 (doc 1) */
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1,
    };
    assert_memory_equal(mask, by_doc, sizeof by_doc);

    /* anchor 0 sees no context; an anchor out of range sees nothing and is reported */
    const int32_t edge[2] = {0, 6};
    uint8_t m2[4 * 10];
    assert_int_equal(k_mask_dflash_block(m2, edge, NULL, NULL, 6, 2, 2, 0), K_EINVAL);
    const uint8_t edge_expected[4 * 10] = {
        0, 0, 0, 0, 0, 0, 1, 1, 0, 0,
        0, 0, 0, 0, 0, 0, 1, 1, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    };
    assert_memory_equal(m2, edge_expected, sizeof m2);
}

/* ---- attention ---------------------------------------------------------------------------- */

static void test_attention_hand(void **state)
{
    (void)state;
    /* H = 1, hd = 1 (scale 1): s = q*k = [0, ln 2] -> p = [1/3, 2/3]; out = 3/3 + 12/3 = 5 */
    const float q[1] = {(float)M_LN2}, k[2] = {0, 1}, v[2] = {3, 6};
    float out[1], lse[1];
    k_attention_fwd(out, lse, q, k, v, NULL, 1, 2, 1, 1);
    assert_close(out[0], 5.0, 1e-6);
    assert_close(lse[0], log(3.0), 1e-6);

    /* q = 0: uniform weights over the allowed keys; a fully masked row gives 0 and -inf */
    const float q0[2 * 2 * 2] = {0};
    const float k0[3 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const float v0[3 * 2 * 2] = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};
    const uint8_t mask[2 * 3] = {1, 0, 1, 0, 0, 0};
    float o[2 * 2 * 2], l[2 * 2];
    k_attention_fwd(o, l, q0, k0, v0, mask, 2, 3, 2, 2);
    const double expected[8] = {3, 30, 4, 40, 0, 0, 0, 0}; /* mean of keys 0 and 2 */
    for (int i = 0; i < 8; i++)
        assert_close(o[i], expected[i], 1e-5);
    assert_close(l[0], log(2.0), 1e-6);
    assert_true(l[2] == -INFINITY && l[3] == -INFINITY);
}

/* Double-precision, two-pass reference: scores, max, exp, normalize. */
static void attention_naive(double *out, const float *q, const float *k, const float *v,
                            const uint8_t *mask, int Tq, int Tk, int H, int hd)
{
    double *s = malloc(sizeof(double) * Tk);
    assert_non_null(s);
    for (int i = 0; i < Tq; i++)
        for (int h = 0; h < H; h++) {
            double mx = -INFINITY;
            for (int j = 0; j < Tk; j++) {
                s[j] = -INFINITY;
                if (mask && !mask[(size_t)i * Tk + j])
                    continue;
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[((size_t)i * H + h) * hd + e] * k[((size_t)j * H + h) * hd + e];
                s[j] = d / sqrt((double)hd);
                if (s[j] > mx)
                    mx = s[j];
            }
            double *o = out + ((size_t)i * H + h) * hd;
            for (int e = 0; e < hd; e++)
                o[e] = 0;
            if (mx == -INFINITY)
                continue;
            double z = 0;
            for (int j = 0; j < Tk; j++)
                z += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
            for (int j = 0; j < Tk; j++) {
                if (s[j] == -INFINITY)
                    continue;
                double p = exp(s[j] - mx) / z;
                for (int e = 0; e < hd; e++)
                    o[e] += p * v[((size_t)j * H + h) * hd + e];
            }
        }
    free(s);
}

static void test_attention_fwd_random(void **state)
{
    (void)state;
    rng_seed(4);
    const int T = 33, H = 3, hd = 16;
    const size_t n = (size_t)T * H * hd;
    float *q = random_floats(n, 2), *k = random_floats(n, 2), *v = random_floats(n, 1);
    int32_t docs[33];
    for (int t = 0; t < T; t++)
        docs[t] = t < 10 ? 0 : t < 25 ? 1 : 2;
    uint8_t *mask = malloc((size_t)T * T);
    float *out = malloc(sizeof(float) * n), *lse = malloc(sizeof(float) * T * H);
    double *ref = malloc(sizeof(double) * n);
    assert_true(mask && out && lse && ref);
    k_mask_causal_doc(mask, docs, T);
    k_attention_fwd(out, lse, q, k, v, mask, T, T, H, hd);
    attention_naive(ref, q, k, v, mask, T, T, H, hd);
    for (size_t i = 0; i < n; i++)
        assert_close(out[i], ref[i], 1e-5);
    /* no mask = every key allowed */
    k_attention_fwd(out, NULL, q, k, v, NULL, T, T, H, hd);
    attention_naive(ref, q, k, v, NULL, T, T, H, hd);
    for (size_t i = 0; i < n; i++)
        assert_close(out[i], ref[i], 1e-5);
    free(q), free(k), free(v), free(mask), free(out), free(lse), free(ref);
}

struct attention_case {
    float *q, *k, *v, *out, *lse, *proj;
    const uint8_t *mask;
    int Tq, Tk, H, hd;
};

static double attention_loss(void *p)
{
    struct attention_case *c = p;
    k_attention_fwd(c->out, c->lse, c->q, c->k, c->v, c->mask, c->Tq, c->Tk, c->H, c->hd);
    return project(c->out, c->proj, (size_t)c->Tq * c->H * c->hd);
}

static void attention_grad_check(const uint8_t *mask, int Tq, int Tk, int H, int hd)
{
    const size_t nq = (size_t)Tq * H * hd, nk = (size_t)Tk * H * hd;
    struct attention_case c = {random_floats(nq, 1.5f), random_floats(nk, 1.5f),
                               random_floats(nk, 1), malloc(sizeof(float) * nq),
                               malloc(sizeof(float) * Tq * H), random_floats(nq, 1),
                               mask, Tq, Tk, H, hd};
    assert_true(c.out && c.lse);
    attention_loss(&c);
    float *dq0 = random_floats(nq, 1), *dk0 = random_floats(nk, 1), *dv0 = random_floats(nk, 1);
    float *dq = copy_floats(dq0, nq), *dk = copy_floats(dk0, nk), *dv = copy_floats(dv0, nk);
    k_attention_bwd(dq, dk, dv, c.proj, c.q, c.k, c.v, c.out, c.lse, mask, Tq, Tk, H, hd);
    check_grad("attention dq", c.q, nq, dq, dq0, attention_loss, &c);
    check_grad("attention dk", c.k, nk, dk, dk0, attention_loss, &c);
    check_grad("attention dv", c.v, nk, dv, dv0, attention_loss, &c);
    free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.proj);
    free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv);
}

static void test_attention_bwd_causal_doc(void **state)
{
    (void)state;
    rng_seed(5);
    const int32_t docs[7] = {0, 0, 0, 1, 1, 2, 2};
    uint8_t mask[7 * 7];
    k_mask_causal_doc(mask, docs, 7);
    attention_grad_check(mask, 7, 7, 2, 4);
    attention_grad_check(NULL, 7, 7, 2, 4);
}

static void test_attention_bwd_dflash(void **state)
{
    (void)state;
    rng_seed(6);
    /* 5 context tokens, 3 blocks of 2: window 3, block 2 dropped (its rows are fully masked
     * and must get neither output nor gradient) */
    const int32_t anchors[3] = {1, 4, 3}, docs[5] = {0, 0, 1, 1, 1};
    const uint8_t keep[3] = {1, 1, 0};
    uint8_t mask[6 * 11];
    assert_int_equal(k_mask_dflash_block(mask, anchors, keep, docs, 5, 3, 2, 3), K_OK);
    attention_grad_check(mask, 6, 11, 2, 4);
}

/* ---- rope --------------------------------------------------------------------------------- */

static void test_rope_fwd(void **state)
{
    (void)state;
    /* hd = 4: pair (0, 2) turns by pos * 1 rad, pair (1, 3) by pos * 10000^(-1/2) = pos / 100 */
    float x[2 * 4] = {1, 2, 3, 4, 1, 2, 3, 4};
    const int32_t pos[2] = {0, 1};
    float out[8];
    k_rope_fwd(out, x, pos, 2, 1, 4, 10000.0f);
    assert_memory_equal(out, x, 4 * sizeof(float)); /* position 0: identity */
    const double c1 = cos(1.0), s1 = sin(1.0), c2 = cos(0.01), s2 = sin(0.01);
    const double expected[4] = {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 1 * s1 + 3 * c1, 2 * s2 + 4 * c2};
    for (int i = 0; i < 4; i++)
        assert_close(out[4 + i], expected[i], 1e-6);
    k_rope_fwd(x, x, pos, 2, 1, 4, 10000.0f); /* in place */
    assert_memory_equal(x, out, sizeof out);
}

struct rope_case {
    float *x, *y, *proj;
    const int32_t *pos;
    int T, H, hd;
};

static double rope_loss(void *p)
{
    struct rope_case *c = p;
    k_rope_fwd(c->y, c->x, c->pos, c->T, c->H, c->hd, 10000.0f);
    return project(c->y, c->proj, (size_t)c->T * c->H * c->hd);
}

static void test_rope_bwd(void **state)
{
    (void)state;
    rng_seed(7);
    const int32_t pos[3] = {0, 3, 17};
    const int T = 3, H = 2, hd = 6;
    const size_t n = (size_t)T * H * hd;
    struct rope_case c = {random_floats(n, 1), malloc(sizeof(float) * n), random_floats(n, 1),
                          pos, T, H, hd};
    assert_non_null(c.y);
    float *dx0 = random_floats(n, 1), *dx = copy_floats(dx0, n);
    k_rope_bwd(dx, c.proj, pos, T, H, hd, 10000.0f);
    check_grad("rope dx", c.x, n, dx, dx0, rope_loss, &c);
    free(c.x), free(c.y), free(c.proj), free(dx0), free(dx);
}

/* ---- silu / swiglu ------------------------------------------------------------------------ */

static double silu_ref(double a)
{
    return a / (1.0 + exp(-a));
}

static void test_swiglu_fwd(void **state)
{
    (void)state;
    const float gate[4] = {0, 1, -2, 30}, up[4] = {5, 2, 3, -1};
    float h[4], s[4];
    k_swiglu_fwd(h, gate, up, 4);
    k_silu_fwd(s, gate, 4);
    assert_true(h[0] == 0.0f && s[0] == 0.0f);
    for (int i = 0; i < 4; i++) {
        assert_close(s[i], silu_ref(gate[i]), 1e-6);
        assert_close(h[i], silu_ref(gate[i]) * up[i], 1e-5);
    }
    assert_close(s[1], 0.7310585786, 1e-7); /* 1 / (1 + e^-1) */
    float big[2] = {-200.0f, 200.0f};       /* no NaN at the extremes */
    k_silu_fwd(big, big, 2);
    assert_true(big[0] == 0.0f && big[1] == 200.0f);
}

struct swiglu_case {
    float *gate, *up, *h, *proj;
    size_t n;
};

static double swiglu_loss(void *p)
{
    struct swiglu_case *c = p;
    k_swiglu_fwd(c->h, c->gate, c->up, c->n);
    return project(c->h, c->proj, c->n);
}

static double silu_loss(void *p)
{
    struct swiglu_case *c = p;
    k_silu_fwd(c->h, c->gate, c->n);
    return project(c->h, c->proj, c->n);
}

static void test_swiglu_bwd(void **state)
{
    (void)state;
    rng_seed(8);
    const size_t n = 24;
    struct swiglu_case c = {random_floats(n, 4), random_floats(n, 2), malloc(sizeof(float) * n),
                            random_floats(n, 1), n};
    assert_non_null(c.h);
    float *dg0 = random_floats(n, 1), *du0 = random_floats(n, 1);
    float *dg = copy_floats(dg0, n), *du = copy_floats(du0, n);
    k_swiglu_bwd(dg, du, c.proj, c.gate, c.up, n);
    check_grad("swiglu dgate", c.gate, n, dg, dg0, swiglu_loss, &c);
    check_grad("swiglu dup", c.up, n, du, du0, swiglu_loss, &c);

    float *ds = copy_floats(dg0, n);
    k_silu_bwd(ds, c.proj, c.gate, n);
    check_grad("silu dx", c.gate, n, ds, dg0, silu_loss, &c);
    free(c.gate), free(c.up), free(c.h), free(c.proj), free(dg0), free(du0), free(dg), free(du);
    free(ds);
}

/* ---- cross-entropy and metrics ------------------------------------------------------------ */

static void test_cross_entropy_fwd(void **state)
{
    (void)state;
    const float l3 = (float)log(3.0);
    /* row 0: uniform over 4 -> ln 4; row 1: exp = [3,1,1,1], target 0 -> ln 6 - ln 3 = ln 2;
     * row 2: ignored */
    const float logits[3 * 4] = {0, 0, 0, 0, l3, 0, 0, 0, 9, 9, 9, 9};
    const int32_t targets[3] = {2, 0, -100};
    float losses[3] = {-1, -1, -1};
    float mean = k_cross_entropy_fwd(losses, logits, targets, NULL, 3, 4, -100);
    assert_close(losses[0], 2 * M_LN2, 1e-6);
    assert_close(losses[1], M_LN2, 1e-6);
    assert_true(losses[2] == 0.0f);
    assert_close(mean, 1.5 * M_LN2, 1e-6); /* (ln 4 + ln 2) / 2 */
    /* weights [1, 3, 5]: (ln 4 + 3 ln 2) / 4 = 5/4 ln 2; the ignored row's weight is unused */
    const float w[3] = {1, 3, 5};
    assert_close(k_cross_entropy_fwd(NULL, logits, targets, w, 3, 4, -100), 1.25 * M_LN2, 1e-6);
    /* huge logits stay finite (max-subtracted): [1000, 0] target 1 -> 1000 */
    const float big[2] = {1000, 0};
    const int32_t one = 1;
    assert_close(k_cross_entropy_fwd(NULL, big, &one, NULL, 1, 2, -100), 1000.0, 1e-3);
    /* no valid row -> 0; a target out of range -> NaN */
    const int32_t none[3] = {-100, -100, -100}, bad[3] = {2, 4, -100};
    assert_true(k_cross_entropy_fwd(NULL, logits, none, NULL, 3, 4, -100) == 0.0f);
    assert_true(isnan(k_cross_entropy_fwd(NULL, logits, bad, NULL, 3, 4, -100)));
}

struct ce_case {
    float *logits, *weights;
    const int32_t *targets;
    int T, V;
    float dloss;
};

static double ce_loss(void *p)
{
    struct ce_case *c = p;
    return (double)c->dloss *
           k_cross_entropy_fwd(NULL, c->logits, c->targets, c->weights, c->T, c->V, -1);
}

static void test_cross_entropy_bwd(void **state)
{
    (void)state;
    rng_seed(9);
    const int T = 5, V = 7;
    const int32_t targets[5] = {3, -1, 0, 6, 2};
    const size_t n = (size_t)T * V;
    float weights[5] = {1.0f, 2.0f, 0.5f, 0.25f, 1.5f};
    struct ce_case c = {random_floats(n, 3), weights, targets, T, V, 0.7f};
    float *d0 = random_floats(n, 1), *d = copy_floats(d0, n);
    k_cross_entropy_bwd(d, c.logits, targets, weights, T, V, -1, c.dloss);
    check_grad("cross-entropy dlogits (weighted)", c.logits, n, d, d0, ce_loss, &c);
    /* the ignored row gets nothing */
    for (int v = 0; v < V; v++)
        assert_true(d[V + v] == d0[V + v]);
    /* unweighted: each valid row's gradient sums to 0 (softmax minus one-hot) */
    memcpy(d, d0, n * sizeof *d);
    c.weights = NULL;
    k_cross_entropy_bwd(d, c.logits, targets, NULL, T, V, -1, c.dloss);
    check_grad("cross-entropy dlogits", c.logits, n, d, d0, ce_loss, &c);
    for (int t = 0; t < T; t++) {
        double s = 0;
        for (int v = 0; v < V; v++)
            s += (double)d[t * V + v] - d0[t * V + v];
        assert_close(s, 0.0, 1e-6);
    }
    free(c.logits), free(d0), free(d);
}

static void test_argmax_topk(void **state)
{
    (void)state;
    const float logits[3 * 5] = {
        1, 3, 3, 0, 2,  /* max 3 at 1 and 2: argmax picks 1 */
        -1, -2, -3, -4, -0.5f,
        0, 0, 0, 0, 0,
    };
    int32_t pred[3];
    k_argmax(pred, logits, 3, 5);
    assert_int_equal(pred[0], 1);
    assert_int_equal(pred[1], 4);
    assert_int_equal(pred[2], 0);

    /* row 0, target 2: rank 1 (tie with index 1 counts ahead); target 4: rank 2;
     * target 3: rank 4 */
    const float *r0 = logits;
    int valid = -1;
    int32_t t2 = 2, t4 = 4, t3 = 3;
    assert_int_equal(k_topk_hits(r0, &t2, 1, 5, 1, -100, &valid), 0);
    assert_int_equal(valid, 1);
    assert_int_equal(k_topk_hits(r0, &t2, 1, 5, 2, -100, NULL), 1);
    assert_int_equal(k_topk_hits(r0, &t4, 1, 5, 2, -100, NULL), 0);
    assert_int_equal(k_topk_hits(r0, &t4, 1, 5, 3, -100, NULL), 1);
    assert_int_equal(k_topk_hits(r0, &t3, 1, 5, 4, -100, NULL), 0);
    assert_int_equal(k_topk_hits(r0, &t3, 1, 5, 5, -100, NULL), 1);

    /* top-1 accuracy is argmax == target */
    const int32_t targets[3] = {1, 0, -100};
    assert_close(k_accuracy(logits, targets, 3, 5, -100), 0.5, 0);
    assert_int_equal(k_topk_hits(logits, targets, 3, 5, 1, -100, &valid), 1);
    assert_int_equal(valid, 2);
    /* row 1 target 0 has rank 1 -> top-2 accuracy 1 */
    assert_close(k_topk_accuracy(logits, targets, 3, 5, 2, -100), 1.0, 0);
    const int32_t none[3] = {-100, -100, -100};
    assert_close(k_accuracy(logits, none, 3, 5, -100), 0.0, 0);
}

/* ---- optimizer ---------------------------------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    /* lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01; p = 1.
     * Step 1, g = 0.5: m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25,
     *   p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000002.
     * Step 2, g = -1: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975,
     *   m_hat = -0.055 / 0.19, v_hat = 0.00124975 / 0.001999,
     *   p = 0.899 - 0.1 * (m_hat / (sqrt(v_hat) + 1e-8) + 0.01 * 0.899) = 0.934711354. */
    float p[2] = {1.0f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
    float g[2] = {0.5f, 0.0f};
    k_adamw_step(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    assert_close(m[0], 0.05, 1e-8 + 0.05 * 1e-6); /* fp32: within a few ulps */
    assert_close(v[0], 0.00025, 0.00025 * 1e-4); /* 1 - 0.999f is off by 1.3e-5 relative */
    assert_close(p[0], 0.899000002, 1e-6);
    assert_close(p[1], -2.0 * (1 - 0.1 * 0.01), 1e-6); /* zero gradient: decay only */
    g[0] = -1.0f;
    k_adamw_step(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2);
    assert_close(m[0], -0.055, 0.055 * 1e-6);
    assert_close(v[0], 0.00124975, 0.00124975 * 1e-4);
    assert_close(p[0], 0.9347113542, 2e-6);
}

static void test_grad_clip(void **state)
{
    (void)state;
    float a[1] = {3}, b[2] = {0, 4};
    float *grads[2] = {a, b};
    const size_t counts[2] = {1, 2};
    assert_close(k_grad_norm((const float *const *)grads, counts, 2), 5.0, 1e-6);
    /* under the limit: untouched */
    assert_close(k_clip_grad_norm(grads, counts, 2, 10.0f), 5.0, 1e-6);
    assert_true(a[0] == 3 && b[1] == 4);
    /* over: scaled by 1 / (5 + 1e-6) */
    assert_close(k_clip_grad_norm(grads, counts, 2, 1.0f), 5.0, 1e-6);
    assert_close(a[0], 0.6, 1e-6);
    assert_close(b[1], 0.8, 1e-6);
    assert_close(k_grad_norm((const float *const *)grads, counts, 2), 1.0, 1e-6);
    /* max_norm <= 0: measure only */
    assert_close(k_clip_grad_norm(grads, counts, 2, 0.0f), 1.0, 1e-6);
    /* non-finite norm: returned, gradients untouched */
    b[0] = NAN;
    assert_true(isnan(k_clip_grad_norm(grads, counts, 2, 0.5f)));
    assert_close(a[0], 0.6, 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_pack_taps),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_rmsnorm_fwd),
        cmocka_unit_test(test_rmsnorm_bwd),
        cmocka_unit_test(test_matmul_small),
        cmocka_unit_test(test_matmul_blocked),
        cmocka_unit_test(test_matmul_bwd),
        cmocka_unit_test(test_mask_causal_doc),
        cmocka_unit_test(test_mask_dflash_block),
        cmocka_unit_test(test_attention_hand),
        cmocka_unit_test(test_attention_fwd_random),
        cmocka_unit_test(test_attention_bwd_causal_doc),
        cmocka_unit_test(test_attention_bwd_dflash),
        cmocka_unit_test(test_rope_fwd),
        cmocka_unit_test(test_rope_bwd),
        cmocka_unit_test(test_swiglu_fwd),
        cmocka_unit_test(test_swiglu_bwd),
        cmocka_unit_test(test_cross_entropy_fwd),
        cmocka_unit_test(test_cross_entropy_bwd),
        cmocka_unit_test(test_argmax_topk),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_grad_clip),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
