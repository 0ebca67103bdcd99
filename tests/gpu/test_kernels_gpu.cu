/* test_kernels_gpu.cu: checks every GPU kernel of kernels_cuda.h against its CPU reference in
 * kernels.h (llm.c dev/cuda style), one cmocka test per op.
 *
 * For each op: fresh random inputs (xorshift, seeded from KC_TEST_SEED or 1234, and a new
 * stream for every tensor so no two inputs are alike; never zero-filled), the inputs that the
 * GPU stores as bf16 are rounded to bf16 first so that both sides see the same numbers, the CPU
 * reference runs on those, the GPU op runs with its outputs poisoned beforehand (all bytes
 * 0xFF: a NaN in fp32 and bf16, -1 in int32), and each output element must satisfy
 *   |gpu - ref| <= atol + rtol * |ref|   (infinities and NaNs must match exactly),
 * with a poisoned element reported as "not written". The first mismatches are printed with
 * their indices, and each check prints its largest error. Gradient outputs (+=) start from
 * random values, which checks that they accumulate.
 *
 * Tolerances (see each test): conversions, copies, masks, argmax and counts exact; fp32
 * outputs of fp32 arithmetic ~1e-5 relative (1e-6 for AdamW and the grad norm, which compute
 * the same expressions); bf16 outputs rounded once from fp32 arithmetic 1e-2 relative (one
 * bf16 ulp is at most 2^-7 = 0.0078 relative), plus a small atol for results near zero.
 *
 * Usage: test_kernels_gpu [--small] [--filter PATTERN]   (--small or KC_TEST_SMALL=1: smaller
 * sizes, for compute-sanitizer; --filter: cmocka's test-name filter, * and ? wildcards).
 * Without a CUDA device it prints "SKIP: ..." and exits 0. Every launch is synchronized and
 * checked (kc_set_debug_sync), so a fault is reported by the op that caused it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_cuda.h"

/* ---- harness -------------------------------------------------------------------------------- */

static cudaStream_t g_stream;
static kc_blas *g_blas;
static int g_small;
static uint64_t g_seed = 1234;
static uint64_t g_draws;

#define SZ(normal, small) (g_small ? (small) : (normal))

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            print_error("%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                     \
                        cudaGetErrorString(e_), cudaGetErrorName(e_));                         \
            fail();                                                                            \
        }                                                                                      \
    } while (0)

/* Runs one kc_ call, then waits for the stream and checks for asynchronous errors. */
#define KC(call)                                                                               \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != K_OK) {                                                                     \
            print_error("%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, rc_,         \
                        kc_last_error());                                                      \
            fail();                                                                            \
        }                                                                                      \
        CUDA_CHECK(cudaStreamSynchronize(g_stream));                                           \
        CUDA_CHECK(cudaGetLastError());                                                        \
    } while (0)

/* Allocations of the running test, freed by its teardown (a failed assertion longjmps out). */
#define MAX_ALLOCS 8192
static void *host_allocs[MAX_ALLOCS], *dev_allocs[MAX_ALLOCS];
static int n_host_allocs, n_dev_allocs;

static int free_all(void **state)
{
    (void)state;
    for (int i = 0; i < n_host_allocs; i++)
        free(host_allocs[i]);
    for (int i = 0; i < n_dev_allocs; i++)
        cudaFree(dev_allocs[i]);
    n_host_allocs = n_dev_allocs = 0;
    return 0;
}

static void *hmalloc(size_t bytes)
{
    assert_true(n_host_allocs < MAX_ALLOCS);
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    host_allocs[n_host_allocs++] = p;
    return p;
}

static float *hfloats(size_t n)
{
    return (float *)hmalloc(n * sizeof(float));
}

static void *dmalloc(size_t bytes)
{
    assert_true(n_dev_allocs < MAX_ALLOCS);
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
    dev_allocs[n_dev_allocs++] = p;
    return p;
}

static void upload(void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void download(void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void *dev_copy(const void *src, size_t bytes)
{
    void *d = dmalloc(bytes);
    upload(d, src, bytes);
    return d;
}

/* All bytes 0xFF: NaN in fp32 and bf16, -1 in int32, 255 in uint8. */
static void poison(void *d, size_t bytes)
{
    CUDA_CHECK(cudaMemset(d, 0xFF, bytes));
}

/* ---- random inputs ---------------------------------------------------------------------------
 * Each draw gets its own xorshift stream: seed and draw number mixed by splitmix64. */
static uint64_t rng_state;

static void rng_new_stream(void)
{
    uint64_t z = g_seed + 0x9E3779B97F4A7C15ull * ++g_draws;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    rng_state = (z ^ (z >> 31)) | 1;
}

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, 1) */
static double rng_unit(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static int rng_int(int lo, int hi) /* [lo, hi) */
{
    return lo + (int)(rng_unit() * (hi - lo));
}

/* n values uniform in [-scale, scale), none exactly zero. */
static float *rand_floats(size_t n, float scale)
{
    rng_new_stream();
    float *x = hfloats(n);
    for (size_t i = 0; i < n; i++) {
        float v = (float)((2.0 * rng_unit() - 1.0) * scale);
        x[i] = v != 0.0f ? v : 0.5f * scale;
    }
    return x;
}

/* n values uniform in [lo, hi), lo > 0. */
static float *rand_range(size_t n, float lo, float hi)
{
    rng_new_stream();
    float *x = hfloats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * rng_unit());
    return x;
}

static int32_t *rand_ints(size_t n, int lo, int hi)
{
    rng_new_stream();
    int32_t *x = (int32_t *)hmalloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++)
        x[i] = rng_int(lo, hi);
    return x;
}

static float *copy_floats(const float *x, size_t n)
{
    float *y = hfloats(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static float bf16_round(float x)
{
    return k_float_from_bf16(k_bf16_from_float(x));
}

/* Rounds x to bf16 values in place (the CPU reference then sees what the GPU stores) and
 * returns a device copy in bf16. */
static kc_bf16 *dev_bf16(float *x, size_t n)
{
    uint16_t *bits = (uint16_t *)hmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        bits[i] = k_bf16_from_float(x[i]);
        x[i] = k_float_from_bf16(bits[i]);
    }
    return (kc_bf16 *)dev_copy(bits, n * sizeof(uint16_t));
}

static float *dev_f32(const float *x, size_t n)
{
    return (float *)dev_copy(x, n * sizeof(float));
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
}

/* ---- comparison ------------------------------------------------------------------------------ */
#define SHOW_MISMATCHES 6

/* gpu[i] against ref[i]; unwritten[i] marks elements still holding the poison pattern.
 * cols > 0 prints indices as [row, col]. Returns the number of bad elements. */
static size_t compare(const char *what, const float *gpu, const unsigned char *unwritten,
                      const float *ref, size_t n, size_t cols, double atol, double rtol)
{
    size_t bad = 0, shown = 0;
    double max_abs = 0.0, max_rel = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = gpu[i], r = ref[i];
        const char *why = NULL;
        if (unwritten && unwritten[i]) {
            why = "not written (poison)";
        } else if (isnan(r) || isinf(r) || isnan(g) || isinf(g)) {
            int same = (isnan(r) && isnan(g)) || (!isnan(r) && !isnan(g) && g == r);
            if (!same)
                why = isnan(g) ? "NaN" : "inf/NaN mismatch";
        } else {
            double err = fabs(g - r);
            if (err > max_abs)
                max_abs = err;
            if (r != 0.0 && err / fabs(r) > max_rel)
                max_rel = err / fabs(r);
            if (!(err <= atol + rtol * fabs(r)))
                why = "out of tolerance";
        }
        if (!why)
            continue;
        bad++;
        if (shown++ < SHOW_MISMATCHES) {
            if (cols)
                print_error("    %s[%zu, %zu]: gpu %.9g ref %.9g (|diff| %.3g, allowed %.3g): %s\n",
                            what, i / cols, i % cols, g, r, fabs(g - r), atol + rtol * fabs(r),
                            why);
            else
                print_error("    %s[%zu]: gpu %.9g ref %.9g (|diff| %.3g, allowed %.3g): %s\n",
                            what, i, g, r, fabs(g - r), atol + rtol * fabs(r), why);
        }
    }
    printf("    %-34s n=%-8zu max|err| %-10.3g max rel %-10.3g (atol %.0e, rtol %.0e)%s\n", what,
           n, max_abs, max_rel, atol, rtol, bad ? "  FAILED" : "");
    if (bad)
        print_error("    %s: %zu of %zu elements bad\n", what, bad, n);
    return bad;
}

static void check_f32(const char *what, const float *d_out, const float *ref, size_t n,
                      size_t cols, double atol, double rtol)
{
    float *gpu = hfloats(n);
    download(gpu, d_out, n * sizeof(float));
    unsigned char *unwritten = (unsigned char *)hmalloc(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, gpu + i, sizeof u);
        unwritten[i] = u == 0xFFFFFFFFu;
    }
    assert_int_equal(compare(what, gpu, unwritten, ref, n, cols, atol, rtol), 0);
}

static void check_bf16(const char *what, const kc_bf16 *d_out, const float *ref, size_t n,
                       size_t cols, double atol, double rtol)
{
    uint16_t *bits = (uint16_t *)hmalloc(n * sizeof(uint16_t));
    download(bits, d_out, n * sizeof(uint16_t));
    float *gpu = hfloats(n);
    unsigned char *unwritten = (unsigned char *)hmalloc(n);
    for (size_t i = 0; i < n; i++) {
        gpu[i] = k_float_from_bf16(bits[i]);
        unwritten[i] = bits[i] == 0xFFFFu;
    }
    assert_int_equal(compare(what, gpu, unwritten, ref, n, cols, atol, rtol), 0);
}

/* Exact comparisons of integer-like outputs. */
static void check_i32(const char *what, const int32_t *d_out, const int32_t *ref, size_t n)
{
    int32_t *gpu = (int32_t *)hmalloc(n * sizeof(int32_t));
    download(gpu, d_out, n * sizeof(int32_t));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (gpu[i] != ref[i] && bad++ < SHOW_MISMATCHES)
            print_error("    %s[%zu]: gpu %d ref %d%s\n", what, i, gpu[i], ref[i],
                        gpu[i] == -1 ? " (poison: not written?)" : "");
    printf("    %-34s n=%-8zu exact%s\n", what, n, bad ? "  FAILED" : "");
    assert_int_equal(bad, 0);
}

static void check_u8(const char *what, const uint8_t *d_out, const uint8_t *ref, size_t n,
                     size_t cols)
{
    uint8_t *gpu = (uint8_t *)hmalloc(n);
    download(gpu, d_out, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (gpu[i] != ref[i] && bad++ < SHOW_MISMATCHES)
            print_error("    %s[%zu, %zu]: gpu %u ref %u%s\n", what, i / cols, i % cols, gpu[i],
                        ref[i], gpu[i] == 0xFF ? " (poison: not written)" : "");
    printf("    %-34s n=%-8zu exact%s\n", what, n, bad ? "  FAILED" : "");
    assert_int_equal(bad, 0);
}

static void check_u16(const char *what, const void *d_out, const uint16_t *ref, size_t n)
{
    uint16_t *gpu = (uint16_t *)hmalloc(n * sizeof(uint16_t));
    download(gpu, d_out, n * sizeof(uint16_t));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (gpu[i] != ref[i] && bad++ < SHOW_MISMATCHES)
            print_error("    %s[%zu]: gpu 0x%04x ref 0x%04x\n", what, i, gpu[i], ref[i]);
    printf("    %-34s n=%-8zu bit-exact%s\n", what, n, bad ? "  FAILED" : "");
    assert_int_equal(bad, 0);
}

static void check_u32(const char *what, const void *d_out, const void *ref_bits, size_t n)
{
    uint32_t *gpu = (uint32_t *)hmalloc(n * sizeof(uint32_t));
    const uint32_t *ref = (const uint32_t *)ref_bits;
    download(gpu, d_out, n * sizeof(uint32_t));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (gpu[i] != ref[i] && bad++ < SHOW_MISMATCHES)
            print_error("    %s[%zu]: gpu 0x%08x ref 0x%08x\n", what, i, gpu[i], ref[i]);
    printf("    %-34s n=%-8zu bit-exact%s\n", what, n, bad ? "  FAILED" : "");
    assert_int_equal(bad, 0);
}

static float read_scalar_f32(const float *d)
{
    float x;
    download(&x, d, sizeof x);
    return x;
}

static void check_scalar(const char *what, const float *d, float ref, double atol, double rtol)
{
    float g = read_scalar_f32(d);
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    unsigned char unwritten = u == 0xFFFFFFFFu;
    assert_int_equal(compare(what, &g, &unwritten, &ref, 1, 0, atol, rtol), 0);
}

/* ---- tolerances ------------------------------------------------------------------------------ */
/* bf16 output rounded once from fp32 arithmetic: one bf16 ulp. */
#define BF16_ONE_ROUNDING 1e-5, 1e-2
/* bf16 output of a reduction (dot products, softmax) from bf16 inputs. */
#define BF16_REDUCTION 1e-2, 1e-2
/* fp32 output of fp32 arithmetic, with the summation order differing from the CPU's. */
#define F32_REDUCTION 1e-5, 1e-5

/* ---- bf16 conversion ------------------------------------------------------------------------ */
static void test_bf16_conversion(void **state)
{
    (void)state;
    size_t n = SZ(200003, 20003);
    float *x = rand_floats(n, 1.0f);
    /* spread over the exponent range, then the edge cases */
    rng_new_stream();
    for (size_t i = 0; i < n; i++)
        x[i] = ldexpf(x[i], rng_int(-140, 129));
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00001u, 0x7f800001u, 0x7f7fffffu, 0xff7fffffu, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x00000001u, 0x807fffffu, 0x7f7f8000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        memcpy(x + i, special + i, sizeof(uint32_t));
    uint16_t *ref = (uint16_t *)hmalloc(n * sizeof(uint16_t));
    k_float_to_bf16(ref, x, n);
    float *d_in = dev_f32(x, n);
    kc_bf16 *d_out = (kc_bf16 *)dmalloc(n * sizeof(uint16_t));
    poison(d_out, n * sizeof(uint16_t));
    KC(kc_float_to_bf16(d_out, d_in, n, g_stream));
    check_u16("float_to_bf16", d_out, ref, n);

    /* every bf16 bit pattern back to fp32 */
    size_t m = 65536;
    uint16_t *all = (uint16_t *)hmalloc(m * sizeof(uint16_t));
    for (size_t i = 0; i < m; i++)
        all[i] = (uint16_t)i;
    float *back = hfloats(m);
    k_bf16_to_float(back, all, m);
    kc_bf16 *d_all = (kc_bf16 *)dev_copy(all, m * sizeof(uint16_t));
    float *d_back = (float *)dmalloc(m * sizeof(float));
    poison(d_back, m * sizeof(float));
    KC(kc_bf16_to_float(d_back, d_all, m, g_stream));
    check_u32("bf16_to_float (all 65536)", d_back, back, m);
}

/* ---- elementwise ----------------------------------------------------------------------------- */
static void test_add(void **state)
{
    (void)state;
    size_t n = SZ(100003, 5003);
    float *a = rand_floats(n, 4.0f), *b = rand_floats(n, 4.0f);
    kc_bf16 *da = dev_bf16(a, n), *db = dev_bf16(b, n);
    float *ref = hfloats(n);
    k_add(ref, a, b, n);
    kc_bf16 *dout = (kc_bf16 *)dmalloc(n * 2);
    poison(dout, n * 2);
    KC(kc_add_bf16(dout, da, db, n, g_stream));
    check_bf16("add_bf16", dout, ref, n, 0, BF16_ONE_ROUNDING);
    KC(kc_add_bf16(da, da, db, n, g_stream)); /* in place: x = x + y */
    check_bf16("add_bf16 (in place)", da, ref, n, 0, BF16_ONE_ROUNDING);

    float *fa = rand_floats(n, 4.0f), *fb = rand_floats(n, 4.0f);
    float *dfa = dev_f32(fa, n), *dfb = dev_f32(fb, n), *dfo = (float *)dmalloc(n * 4);
    k_add(ref, fa, fb, n);
    poison(dfo, n * 4);
    KC(kc_add_f32(dfo, dfa, dfb, n, g_stream));
    check_f32("add_f32", dfo, ref, n, 0, 0.0, 1e-7);
    KC(kc_add_f32(dfb, dfa, dfb, n, g_stream));
    check_f32("add_f32 (in place)", dfb, ref, n, 0, 0.0, 1e-7);
}

static void test_silu_swiglu(void **state)
{
    (void)state;
    size_t n = SZ(100003, 5003);
    float *x = rand_floats(n, 6.0f), *up = rand_floats(n, 2.0f), *dout = rand_floats(n, 1.0f);
    kc_bf16 *dx_in = dev_bf16(x, n), *dup_in = dev_bf16(up, n), *ddout = dev_bf16(dout, n);
    float *ref = hfloats(n), *ref2 = hfloats(n);

    k_silu_fwd(ref, x, n);
    kc_bf16 *dy = (kc_bf16 *)dmalloc(n * 2);
    poison(dy, n * 2);
    KC(kc_silu_fwd(dy, dx_in, n, g_stream));
    check_bf16("silu_fwd", dy, ref, n, 0, BF16_ONE_ROUNDING);

    float *gx = rand_floats(n, 1.0f);
    kc_bf16 *dgx = dev_bf16(gx, n);
    k_silu_bwd(gx, dout, x, n);
    KC(kc_silu_bwd(dgx, ddout, dx_in, n, g_stream));
    check_bf16("silu_bwd (dx +=)", dgx, gx, n, 0, BF16_ONE_ROUNDING);

    k_swiglu_fwd(ref, x, up, n);
    poison(dy, n * 2);
    KC(kc_swiglu_fwd(dy, dx_in, dup_in, n, g_stream));
    check_bf16("swiglu_fwd", dy, ref, n, 0, BF16_ONE_ROUNDING);

    float *dgate = rand_floats(n, 1.0f), *dupg = rand_floats(n, 1.0f);
    kc_bf16 *d_dgate = dev_bf16(dgate, n), *d_dup = dev_bf16(dupg, n);
    k_swiglu_bwd(dgate, dupg, dout, x, up, n);
    KC(kc_swiglu_bwd(d_dgate, d_dup, ddout, dx_in, dup_in, n, g_stream));
    check_bf16("swiglu_bwd dgate (+=)", d_dgate, dgate, n, 0, BF16_ONE_ROUNDING);
    check_bf16("swiglu_bwd dup (+=)", d_dup, dupg, n, 0, BF16_ONE_ROUNDING);

    /* silu in place */
    memcpy(ref2, x, n * sizeof(float));
    k_silu_fwd(ref2, ref2, n);
    KC(kc_silu_fwd(dx_in, dx_in, n, g_stream));
    check_bf16("silu_fwd (in place)", dx_in, ref2, n, 0, BF16_ONE_ROUNDING);
}

/* ---- embedding ------------------------------------------------------------------------------- */
static void test_embedding(void **state)
{
    (void)state;
    int T = SZ(301, 37), d = SZ(200, 40), vocab = SZ(1000, 50);
    float *table = rand_floats((size_t)vocab * d, 1.0f);
    int32_t *tokens = rand_ints(T, 0, vocab);
    tokens[3] = -1;
    tokens[T - 1] = vocab;
    tokens[T / 2] = vocab + 7;
    kc_bf16 *dtable = dev_bf16(table, (size_t)vocab * d);
    int32_t *dtok = (int32_t *)dev_copy(tokens, T * sizeof(int32_t));
    float *ref = hfloats((size_t)T * d);
    assert_int_equal(k_embedding_fwd(ref, tokens, table, T, d, vocab), K_EINVAL);
    kc_bf16 *dout = (kc_bf16 *)dmalloc((size_t)T * d * 2);
    poison(dout, (size_t)T * d * 2);
    int32_t n_bad_init = 7, *dbad = (int32_t *)dev_copy(&n_bad_init, sizeof(int32_t));
    KC(kc_embedding_fwd(dout, dtok, dtable, T, d, vocab, dbad, g_stream));
    check_bf16("embedding_fwd", dout, ref, (size_t)T * d, d, 0.0, 0.0);
    int32_t want = 7 + 3;
    check_i32("embedding_fwd n_bad (+=)", dbad, &want, 1);
    poison(dout, (size_t)T * d * 2);
    KC(kc_embedding_fwd(dout, dtok, dtable, T, d, vocab, NULL, g_stream));
    check_bf16("embedding_fwd (no counter)", dout, ref, (size_t)T * d, d, 0.0, 0.0);
}

/* ---- rmsnorm --------------------------------------------------------------------------------- */
static void test_rmsnorm_fwd(void **state)
{
    (void)state;
    const int shapes[][2] = {{SZ(129, 17), SZ(1024, 96)}, {SZ(67, 5), SZ(320, 40)}, {3, 7}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int T = shapes[c][0], d = shapes[c][1];
        size_t n = (size_t)T * d;
        float eps = 1e-6f;
        float *x = rand_floats(n, 2.0f), *w = rand_range(d, 0.5f, 1.5f);
        kc_bf16 *dx = dev_bf16(x, n);
        float *dw = dev_f32(w, d);
        float *ref = hfloats(n), *rstd = hfloats(T);
        k_rmsnorm_fwd(ref, rstd, x, w, T, d, eps);
        kc_bf16 *dout = (kc_bf16 *)dmalloc(n * 2);
        float *drstd = (float *)dmalloc(T * 4);
        poison(dout, n * 2);
        poison(drstd, T * 4);
        printf("  T=%d d=%d\n", T, d);
        KC(kc_rmsnorm_fwd(dout, drstd, dx, dw, T, d, eps, g_stream));
        check_bf16("rmsnorm_fwd out", dout, ref, n, d, BF16_ONE_ROUNDING);
        check_f32("rmsnorm_fwd rstd", drstd, rstd, T, 0, F32_REDUCTION);
        poison(dout, n * 2);
        KC(kc_rmsnorm_fwd(dout, NULL, dx, dw, T, d, eps, g_stream));
        check_bf16("rmsnorm_fwd out (no rstd)", dout, ref, n, d, BF16_ONE_ROUNDING);
    }
}

static void test_rmsnorm_bwd(void **state)
{
    (void)state;
    const int shapes[][2] = {{SZ(129, 17), SZ(1024, 96)}, {SZ(67, 33), SZ(320, 40)}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int T = shapes[c][0], d = shapes[c][1];
        size_t n = (size_t)T * d;
        float eps = 1e-5f;
        float *x = rand_floats(n, 2.0f), *w = rand_range(d, 0.5f, 1.5f);
        float *dy = rand_floats(n, 1.0f);
        kc_bf16 *d_x = dev_bf16(x, n), *d_dy = dev_bf16(dy, n);
        float *d_w = dev_f32(w, d);
        float *tmp = hfloats(n), *rstd = hfloats(T);
        k_rmsnorm_fwd(tmp, rstd, x, w, T, d, eps);
        float *d_rstd = dev_f32(rstd, T);
        printf("  T=%d d=%d\n", T, d);
        for (int use_rstd = 0; use_rstd < 2; use_rstd++) {
            float *gx = rand_floats(n, 1.0f), *gw = rand_floats(d, 1.0f);
            kc_bf16 *d_gx = dev_bf16(gx, n);
            float *d_gw = dev_f32(gw, d);
            k_rmsnorm_bwd(gx, gw, dy, x, w, use_rstd ? rstd : NULL, T, d, eps);
            KC(kc_rmsnorm_bwd(d_gx, d_gw, d_dy, d_x, d_w, use_rstd ? d_rstd : NULL, T, d, eps,
                              g_stream));
            check_bf16(use_rstd ? "rmsnorm_bwd dx (+=)" : "rmsnorm_bwd dx (+=, no rstd)", d_gx,
                       gx, n, d, 1e-3, 1e-2);
            check_f32(use_rstd ? "rmsnorm_bwd dweight (+=)" : "rmsnorm_bwd dweight (no rstd)",
                      d_gw, gw, d, 0, 1e-4, 1e-5);
        }
        /* without dweight */
        float *gx = rand_floats(n, 1.0f);
        kc_bf16 *d_gx = dev_bf16(gx, n);
        k_rmsnorm_bwd(gx, NULL, dy, x, w, rstd, T, d, eps);
        KC(kc_rmsnorm_bwd(d_gx, NULL, d_dy, d_x, d_w, d_rstd, T, d, eps, g_stream));
        check_bf16("rmsnorm_bwd dx (no dweight)", d_gx, gx, n, d, 1e-3, 1e-2);
    }
}

/* ---- matmul ---------------------------------------------------------------------------------- */
static const char *variant_name[] = {"matmul", "matmul_tn", "matmul_nt"};

static void run_matmul_case(int variant, int M, int K, int N, kc_dtype c_dtype, int use_bias,
                            int accumulate, int force_gemmex, int a_offset)
{
    /* operand shapes as stored */
    size_t a_n = (size_t)M * K, b_n = (size_t)K * N, c_n = (size_t)M * N;
    float *A = rand_floats(a_n, 1.0f), *B = rand_floats(b_n, 1.0f);
    float *bias = use_bias ? rand_floats(N, 1.0f) : NULL;
    float *C = rand_floats(c_n, 1.0f);
    if (c_dtype == KC_BF16)
        round_bf16(C, c_n);
    /* A may start a_offset elements into its allocation (2-byte alignment for cuBLASLt) */
    kc_bf16 *dA_base = dev_bf16(A, a_n), *dA = dA_base;
    if (a_offset) {
        uint16_t *bits = (uint16_t *)hmalloc((a_n + a_offset) * 2);
        bits[0] = 0x3f80;
        k_float_to_bf16(bits + a_offset, A, a_n);
        dA_base = (kc_bf16 *)dev_copy(bits, (a_n + a_offset) * 2);
        dA = dA_base + a_offset;
    }
    kc_bf16 *dB = dev_bf16(B, b_n);
    float *dbias = use_bias ? dev_f32(bias, N) : NULL;
    size_t c_bytes = c_n * (c_dtype == KC_BF16 ? 2 : 4);
    void *dC = dmalloc(c_bytes);
    if (accumulate) {
        if (c_dtype == KC_BF16) {
            float *Ccopy = copy_floats(C, c_n);
            kc_bf16 *tmp = dev_bf16(Ccopy, c_n);
            CUDA_CHECK(cudaMemcpy(dC, tmp, c_bytes, cudaMemcpyDeviceToDevice));
        } else {
            upload(dC, C, c_bytes);
        }
    } else {
        poison(dC, c_bytes);
    }
    switch (variant) {
    case 0: k_matmul(C, A, B, bias, M, K, N, accumulate); break;
    case 1: k_matmul_tn(C, A, B, M, K, N, accumulate); break;
    default: k_matmul_nt(C, A, B, M, K, N, accumulate); break;
    }
    kc_blas_force_gemmex(g_blas, force_gemmex);
    switch (variant) {
    case 0: KC(kc_matmul(g_blas, dC, c_dtype, dA, dB, dbias, M, K, N, accumulate, g_stream)); break;
    case 1: KC(kc_matmul_tn(g_blas, dC, c_dtype, dA, dB, M, K, N, accumulate, g_stream)); break;
    default: KC(kc_matmul_nt(g_blas, dC, c_dtype, dA, dB, M, K, N, accumulate, g_stream)); break;
    }
    kc_blas_force_gemmex(g_blas, 0);
    char what[128];
    snprintf(what, sizeof what, "%s %dx%dx%d %s%s%s%s%s", variant_name[variant], M, K, N,
             c_dtype == KC_BF16 ? "bf16" : "f32", use_bias ? " bias" : "", accumulate ? " +=" : "",
             force_gemmex ? " gemmex" : "", a_offset ? " A+1" : "");
    if (c_dtype == KC_BF16)
        check_bf16(what, (const kc_bf16 *)dC, C, c_n, N, 1e-3, 1e-2);
    else
        check_f32(what, (const float *)dC, C, c_n, N, 1e-4, 1e-5);
}

static void test_matmul(void **state)
{
    (void)state;
    const int shapes[][3] = {{SZ(128, 32), SZ(256, 64), SZ(192, 48)},
                             {SZ(77, 13), SZ(131, 21), SZ(53, 11)},
                             {1, SZ(300, 40), 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 3; variant++)
            for (int out = 0; out < 2; out++)
                for (int acc = 0; acc < 2; acc++)
                    for (int gemmex = 0; gemmex < 2; gemmex++)
                        for (int bias = 0; bias < (variant == 0 ? 2 : 1); bias++)
                            run_matmul_case(variant, shapes[s][0], shapes[s][1], shapes[s][2],
                                            out ? KC_BF16 : KC_F32, bias, acc, gemmex, 0);
    /* misaligned A, and K = 0 (C = bias or C += bias) */
    for (int variant = 0; variant < 3; variant++)
        run_matmul_case(variant, 33, 64, 40, KC_BF16, variant == 0, 0, 0, 1);
    run_matmul_case(0, 5, 0, 9, KC_F32, 1, 0, 0, 0);
    run_matmul_case(0, 5, 0, 9, KC_BF16, 1, 1, 0, 0);
    /* a bf16 C larger than the 4M-float staging buffer: staged in two bands of rows */
    if (!g_small)
        for (int variant = 0; variant < 3; variant++)
            run_matmul_case(variant, 4100, 16, 1100, KC_BF16, variant == 0, 1, 0, 0);
}

static void test_bias_bwd(void **state)
{
    (void)state;
    const int shapes[][2] = {{SZ(700, 300), 77}, {50, SZ(256, 64)}, {1, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1];
        float *dC = rand_floats((size_t)M * N, 1.0f), *db = rand_floats(N, 1.0f);
        kc_bf16 *d_dC = dev_bf16(dC, (size_t)M * N);
        float *d_db = dev_f32(db, N);
        k_bias_bwd(db, dC, M, N);
        KC(kc_bias_bwd(d_db, d_dC, M, N, g_stream));
        char what[64];
        snprintf(what, sizeof what, "bias_bwd %dx%d (+=)", M, N);
        check_f32(what, d_db, db, N, 0, 1e-4, 1e-5);
    }
}

/* ---- masks ----------------------------------------------------------------------------------- */
static int32_t *doc_runs(int n, int max_run)
{
    int32_t *ids = (int32_t *)hmalloc(n * sizeof(int32_t));
    rng_new_stream();
    int doc = 0;
    for (int i = 0; i < n;) {
        int run = rng_int(1, max_run);
        for (int r = 0; r < run && i < n; r++)
            ids[i++] = doc;
        doc++;
    }
    return ids;
}

static void test_masks(void **state)
{
    (void)state;
    int T = SZ(333, 45);
    int32_t *docs = doc_runs(T, T / 3);
    int32_t *d_docs = (int32_t *)dev_copy(docs, T * sizeof(int32_t));
    uint8_t *ref = (uint8_t *)hmalloc((size_t)T * T);
    uint8_t *d_mask = (uint8_t *)dmalloc((size_t)T * T);
    k_mask_causal_doc(ref, docs, T);
    poison(d_mask, (size_t)T * T);
    KC(kc_mask_causal_doc(d_mask, d_docs, T, g_stream));
    check_u8("mask_causal_doc", d_mask, ref, (size_t)T * T, T);
    k_mask_causal_doc(ref, NULL, T);
    poison(d_mask, (size_t)T * T);
    KC(kc_mask_causal_doc(d_mask, NULL, T, g_stream));
    check_u8("mask_causal_doc (no docs)", d_mask, ref, (size_t)T * T, T);

    int n_ctx = SZ(300, 40), n_blocks = SZ(9, 4), bs = SZ(16, 4);
    int Tq = n_blocks * bs, Tk = n_ctx + n_blocks * bs;
    int32_t *anchors = rand_ints(n_blocks, 0, n_ctx);
    anchors[1] = n_ctx; /* out of range: zero rows */
    uint8_t *keep = (uint8_t *)hmalloc(n_blocks);
    for (int b = 0; b < n_blocks; b++)
        keep[b] = b != 2;
    int32_t *cdocs = doc_runs(n_ctx, n_ctx / 3);
    int32_t *d_anchors = (int32_t *)dev_copy(anchors, n_blocks * 4);
    uint8_t *d_keep = (uint8_t *)dev_copy(keep, n_blocks);
    int32_t *d_cdocs = (int32_t *)dev_copy(cdocs, n_ctx * 4);
    uint8_t *dref = (uint8_t *)hmalloc((size_t)Tq * Tk);
    uint8_t *d_dm = (uint8_t *)dmalloc((size_t)Tq * Tk);
    for (int variant = 0; variant < 4; variant++) {
        int window = variant & 1 ? SZ(64, 9) : 0;
        int with_opts = variant & 2;
        assert_int_equal(k_mask_dflash_block(dref, anchors, with_opts ? keep : NULL,
                                             with_opts ? cdocs : NULL, n_ctx, n_blocks, bs,
                                             window),
                         K_EINVAL);
        poison(d_dm, (size_t)Tq * Tk);
        KC(kc_mask_dflash_block(d_dm, d_anchors, with_opts ? d_keep : NULL,
                                with_opts ? d_cdocs : NULL, n_ctx, n_blocks, bs, window,
                                g_stream));
        char what[80];
        snprintf(what, sizeof what, "mask_dflash_block window=%d%s", window,
                 with_opts ? " keep+docs" : "");
        check_u8(what, d_dm, dref, (size_t)Tq * Tk, Tk);
    }
}

/* ---- attention ------------------------------------------------------------------------------- */
struct attn_case {
    const char *name;
    int Tq, Tk, H, hd;
    int mask_kind; /* 0: none, 1: causal with documents, 2: DFlash blocks */
};

/* Builds the case's mask on the host (NULL for none); Tq/Tk of DFlash cases are derived. */
static uint8_t *make_mask(attn_case *c)
{
    if (c->mask_kind == 1) {
        uint8_t *m = (uint8_t *)hmalloc((size_t)c->Tq * c->Tk);
        k_mask_causal_doc(m, doc_runs(c->Tq, c->Tq / 2), c->Tq);
        return m;
    }
    if (c->mask_kind == 2) {
        int bs = 16, n_blocks = c->Tq / bs, n_ctx = c->Tk - c->Tq;
        uint8_t *m = (uint8_t *)hmalloc((size_t)c->Tq * c->Tk);
        int32_t *anchors = rand_ints(n_blocks, 1, n_ctx);
        uint8_t *keep = (uint8_t *)hmalloc(n_blocks);
        for (int b = 0; b < n_blocks; b++)
            keep[b] = b != 1; /* block 1 sees nothing: out 0, lse -inf */
        k_mask_dflash_block(m, anchors, keep, doc_runs(n_ctx, n_ctx / 2), n_ctx, n_blocks, bs, 0);
        return m;
    }
    return NULL;
}

static attn_case *attn_cases(int *n)
{
    static attn_case normal[] = {
        {"causal+docs hd=64", 300, 300, 3, 64, 1},
        {"dflash hd=128", 96, 96 + 256, 2, 128, 2}, /* Tk % 16 == 0: 16-byte mask reads */
        {"causal+docs hd=128", 256, 256, 2, 128, 1},
        {"dflash hd=64", 64, 64 + 250, 2, 64, 2},
        {"no mask hd=40", 45, 77, 2, 40, 0},
        {"causal hd=256", 70, 70, 1, 256, 1},
        {"no mask hd=16", 33, 129, 2, 16, 0},
        {"causal hd=96", 65, 65, 2, 96, 1},
        {"no mask hd=2", 5, 3, 1, 2, 0},
        {"causal+docs hd=48", 130, 130, 2, 48, 1},
    };
    static attn_case small[] = {
        {"causal+docs hd=64", 40, 40, 2, 64, 1},
        {"dflash hd=128", 32, 32 + 40, 1, 128, 2},
        {"no mask hd=40", 9, 70, 1, 40, 0},
        {"causal hd=256", 20, 20, 1, 256, 1},
        {"no mask hd=2", 5, 3, 1, 2, 0},
        {"causal+docs hd=64", 48, 48, 1, 64, 1},
    };
    if (g_small) {
        *n = (int)(sizeof small / sizeof small[0]);
        return small;
    }
    *n = (int)(sizeof normal / sizeof normal[0]);
    return normal;
}

static void test_attention_fwd(void **state)
{
    (void)state;
    int n_cases;
    attn_case *cases = attn_cases(&n_cases);
    for (int ci = 0; ci < n_cases; ci++) {
        attn_case c = cases[ci];
        size_t nq = (size_t)c.Tq * c.H * c.hd, nk = (size_t)c.Tk * c.H * c.hd;
        float *q = rand_floats(nq, 2.0f), *k = rand_floats(nk, 2.0f), *v = rand_floats(nk, 1.0f);
        kc_bf16 *dq = dev_bf16(q, nq), *dk = dev_bf16(k, nk), *dv = dev_bf16(v, nk);
        uint8_t *mask = make_mask(&c);
        uint8_t *dmask = mask ? (uint8_t *)dev_copy(mask, (size_t)c.Tq * c.Tk) : NULL;
        float *out = hfloats(nq), *lse = hfloats((size_t)c.Tq * c.H);
        k_attention_fwd(out, lse, q, k, v, mask, c.Tq, c.Tk, c.H, c.hd);
        kc_bf16 *dout = (kc_bf16 *)dmalloc(nq * 2);
        float *dlse = (float *)dmalloc((size_t)c.Tq * c.H * 4);
        /* hd % 16 == 0 runs on tensor cores by default: check the CUDA-core kernel too */
        for (int tc = 1; tc >= (c.hd % 16 == 0 ? 0 : 1); tc--) {
            kc_attention_use_tensor_cores(tc);
            printf("  %s: Tq=%d Tk=%d H=%d hd=%d%s\n", c.name, c.Tq, c.Tk, c.H, c.hd,
                   c.hd % 16 ? "" : tc ? " (tensor cores)" : " (CUDA cores)");
            poison(dout, nq * 2);
            poison(dlse, (size_t)c.Tq * c.H * 4);
            KC(kc_attention_fwd(dout, dlse, dq, dk, dv, dmask, c.Tq, c.Tk, c.H, c.hd, g_stream));
            kc_attention_use_tensor_cores(1);
            check_bf16("attention_fwd out", dout, out, nq, (size_t)c.H * c.hd, BF16_REDUCTION);
            check_f32("attention_fwd lse", dlse, lse, (size_t)c.Tq * c.H, c.H, 1e-4, 1e-5);
        }
        poison(dout, nq * 2);
        KC(kc_attention_fwd(dout, NULL, dq, dk, dv, dmask, c.Tq, c.Tk, c.H, c.hd, g_stream));
        check_bf16("attention_fwd out (no lse)", dout, out, nq, (size_t)c.H * c.hd,
                   BF16_REDUCTION);
    }
}

static void test_attention_bwd(void **state)
{
    (void)state;
    int n_cases;
    attn_case *cases = attn_cases(&n_cases);
    for (int ci = 0; ci < n_cases; ci++) {
        attn_case c = cases[ci];
        size_t nq = (size_t)c.Tq * c.H * c.hd, nk = (size_t)c.Tk * c.H * c.hd;
        size_t nrow = (size_t)c.Tq * c.H;
        float *q = rand_floats(nq, 2.0f), *k = rand_floats(nk, 2.0f), *v = rand_floats(nk, 1.0f);
        float *dout = rand_floats(nq, 1.0f);
        kc_bf16 *d_q = dev_bf16(q, nq), *d_k = dev_bf16(k, nk), *d_v = dev_bf16(v, nk);
        kc_bf16 *d_dout = dev_bf16(dout, nq);
        uint8_t *mask = make_mask(&c);
        uint8_t *dmask = mask ? (uint8_t *)dev_copy(mask, (size_t)c.Tq * c.Tk) : NULL;
        /* both backward passes get the same forward results: out as bf16, the CPU's lse */
        float *out = hfloats(nq), *lse = hfloats(nrow);
        k_attention_fwd(out, lse, q, k, v, mask, c.Tq, c.Tk, c.H, c.hd);
        kc_bf16 *d_out = dev_bf16(out, nq);
        float *d_lse = dev_f32(lse, nrow);
        float *gq = rand_floats(nq, 1.0f), *gk = rand_floats(nk, 1.0f), *gv = rand_floats(nk, 1.0f);
        kc_bf16 *d_gq = dev_bf16(gq, nq), *d_gk = dev_bf16(gk, nk), *d_gv = dev_bf16(gv, nk);
        float *d_delta = (float *)dmalloc(nrow * 4);
        poison(d_delta, nrow * 4);
        k_attention_bwd(gq, gk, gv, dout, q, k, v, out, lse, mask, c.Tq, c.Tk, c.H, c.hd);
        printf("  %s: Tq=%d Tk=%d H=%d hd=%d\n", c.name, c.Tq, c.Tk, c.H, c.hd);
        KC(kc_attention_bwd(d_gq, d_gk, d_gv, d_dout, d_q, d_k, d_v, d_out, d_lse, dmask, d_delta,
                            c.Tq, c.Tk, c.H, c.hd, g_stream));
        size_t cols = (size_t)c.H * c.hd;
        check_bf16("attention_bwd dq (+=)", d_gq, gq, nq, cols, BF16_REDUCTION);
        check_bf16("attention_bwd dk (+=)", d_gk, gk, nk, cols, BF16_REDUCTION);
        check_bf16("attention_bwd dv (+=)", d_gv, gv, nk, cols, BF16_REDUCTION);
    }
}

/* ---- causal-document attention (kc_attention_fwd_causal_doc) ----------------------------------
 * Against the CPU reference per sequence: k_mask_causal_doc + k_attention_fwd. Document
 * layouts (docs_kind):
 *   0 random: sequence 0 starts with a fixed pattern (length-1 documents, runs of them,
 *     documents across the 64-token tile boundaries 64, 128 and 192), then random lengths
 *     (a quarter of them 1, some up to T); the last id of a sequence may continue into the
 *     next one, as the trainer's batches do (attention stays within each sequence);
 *   1 doc_ids = NULL (plain causal);
 *   2 sweep: sequence b's first two documents have lengths 1 + 37b mod 130 and 1 + 53b mod 70,
 *     so that document starts fall at every offset from the query / key tiles and warps' rows;
 *   3 every document is one token (out = v);
 *   4 every token has the same id (plain causal through doc_ids). */
struct doc_attn_case {
    int B, T, H, hd;
    int docs_kind;
    int path; /* 0: whatever the call picks, 1: forced explicit-mask fallback, 2: 8-byte offset
               * tensors (unaligned for the fast path: fallback) */
};

static int32_t *doc_ids_for(int B, int T, int kind)
{
    int32_t *ids = (int32_t *)hmalloc((size_t)B * T * sizeof(int32_t));
    rng_new_stream();
    int id = 0;
    for (int b = 0; b < B; b++) {
        int32_t *row = ids + (size_t)b * T;
        int t = 0;
        if (kind == 0 && b == 0) {
            static const int lens[] = {1, 1, 3, 50, 20, 1, 1, 1, 60, 1, 2, 64, 1};
            for (size_t n = 0; n < sizeof lens / sizeof lens[0]; n++) {
                for (int r = 0; r < lens[n] && t < T; r++)
                    row[t++] = id;
                id++;
            }
        }
        if (kind == 2) {
            int l1 = 1 + (b * 37) % 130, l2 = 1 + (b * 53) % 70;
            for (int r = 0; r < l1 && t < T; r++)
                row[t++] = id;
            id++;
            for (int r = 0; r < l2 && t < T; r++)
                row[t++] = id;
            id++;
        }
        while (t < T) {
            int len;
            double u = rng_unit();
            if (kind == 3)
                len = 1;
            else if (kind == 4)
                len = T;
            else if (u < 0.25)
                len = 1;
            else if (u < 0.4)
                len = rng_int(2, 8);
            else if (u < 0.8)
                len = rng_int(8, 100);
            else
                len = rng_int(100, T + 1);
            for (int r = 0; r < len && t < T; r++)
                row[t++] = id;
            id++;
        }
        if (kind == 4)
            id = 7; /* the same id everywhere */
        else if (b % 2 == 0)
            id--; /* the next sequence continues this one's last id */
    }
    return ids;
}

/* On a mismatch: which (sequence, token, head) rows are wrong, and where they sit relative to
 * their document and to the 64-query / 16-row tiles of the kernel, to locate a bug from one run. */
static void diagnose_doc_attention(const float *gpu, const unsigned char *unwritten,
                                   const float *ref, const int32_t *ids, int B, int T, int H,
                                   int hd)
{
    int shown = 0;
    size_t bad_rows = 0, by_warp[4] = {0, 0, 0, 0}, by_docpos[3] = {0, 0, 0};
    for (int b = 0; b < B; b++) {
        int ds = 0;
        for (int t = 0; t < T; t++) {
            if (ids && t > 0 && ids[(size_t)b * T + t] != ids[(size_t)b * T + t - 1])
                ds = t;
            for (int h = 0; h < H; h++) {
                size_t base = (((size_t)b * T + t) * H + h) * hd;
                int bad = 0, unw = 0;
                double worst = 0.0;
                for (int d = 0; d < hd; d++) {
                    double g = gpu[base + d], r = ref[base + d], err = fabs(g - r);
                    unw |= unwritten[base + d];
                    if (unwritten[base + d] || isnan(g) || !(err <= 1e-2 + 1e-2 * fabs(r))) {
                        bad = 1;
                        if (!(err <= worst))
                            worst = err;
                    }
                }
                if (!bad)
                    continue;
                bad_rows++;
                by_warp[(t % 64) / 16]++;
                by_docpos[ds / 64 == t / 64 ? (ds == t ? 0 : 1) : 2]++;
                if (shown++ < 8)
                    print_error("    bad row: seq %d token %d head %d%s: doc starts at %d (token "
                                "%d of its doc), query tile %d row %d (warp %d), worst |err| "
                                "%.3g\n",
                                b, t, h, unw ? " (NOT WRITTEN)" : "", ds, t - ds, t / 64,
                                t % 64, (t % 64) / 16, worst);
            }
        }
    }
    print_error("    %zu bad (token, head) rows; by warp of the tile: %zu %zu %zu %zu; doc start "
                "= the token: %zu, inside its query tile: %zu, before it: %zu\n",
                bad_rows, by_warp[0], by_warp[1], by_warp[2], by_warp[3], by_docpos[0],
                by_docpos[1], by_docpos[2]);
}

static void run_doc_attention_case(const doc_attn_case &c)
{
    const int B = c.B, T = c.T, H = c.H, hd = c.hd;
    const size_t n = (size_t)B * T * H * hd, nrow = (size_t)B * T * H, seq = (size_t)T * H * hd;
    const size_t off = c.path == 2 ? 4 : 0; /* elements: 8 bytes */
    float *q = rand_floats(n, 2.0f), *k = rand_floats(n, 2.0f), *v = rand_floats(n, 1.0f);
    int32_t *ids = c.docs_kind == 1 ? NULL : doc_ids_for(B, T, c.docs_kind);
    /* device tensors (offset by `off` elements for path 2) */
    kc_bf16 *dq_b = (kc_bf16 *)dmalloc((n + off) * 2), *dk_b = (kc_bf16 *)dmalloc((n + off) * 2);
    kc_bf16 *dv_b = (kc_bf16 *)dmalloc((n + off) * 2), *dout_b = (kc_bf16 *)dmalloc((n + off) * 2);
    kc_bf16 *dq = dq_b + off, *dk = dk_b + off, *dv = dv_b + off, *dout = dout_b + off;
    {
        kc_bf16 *tq = dev_bf16(q, n), *tk = dev_bf16(k, n), *tv = dev_bf16(v, n); /* rounds q/k/v */
        CUDA_CHECK(cudaMemcpy(dq, tq, n * 2, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(dk, tk, n * 2, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(dv, tv, n * 2, cudaMemcpyDeviceToDevice));
    }
    int32_t *d_ids = ids ? (int32_t *)dev_copy(ids, (size_t)B * T * 4) : NULL;
    uint8_t *d_scratch = (uint8_t *)dmalloc((size_t)T * T);
    float *d_lse = (float *)dmalloc(nrow * 4);

    /* reference, per sequence */
    float *out = hfloats(n), *lse = hfloats(nrow);
    uint8_t *mask = (uint8_t *)hmalloc((size_t)T * T);
    for (int b = 0; b < B; b++) {
        k_mask_causal_doc(mask, ids ? ids + (size_t)b * T : NULL, T);
        k_attention_fwd(out + b * seq, lse + (size_t)b * T * H, q + b * seq, k + b * seq,
                        v + b * seq, mask, T, T, H, hd);
    }

    static const char *kinds[] = {"random docs", "no doc_ids", "doc sweep", "1-token docs",
                                  "one id"};
    const bool fast = c.path == 0 && (hd == 64 || hd == 128);
    printf("  B=%d T=%d H=%d hd=%d, %s, %s\n", B, T, H, hd, kinds[c.docs_kind],
           fast ? "fast path" : c.path == 1 ? "forced fallback" : c.path == 2 ? "unaligned: fallback"
                                                                          : "fallback (hd)");
    kc_attention_causal_doc_use_fallback(c.path == 1);
    for (int with_lse = 1; with_lse >= 0; with_lse--) {
        poison(dout, n * 2);
        poison(d_lse, nrow * 4);
        /* the fast path must not need (or touch) the scratch: give it none */
        KC(kc_attention_fwd_causal_doc(dout, with_lse ? d_lse : NULL, dq, dk, dv, d_ids,
                                       fast ? NULL : d_scratch, B, T, H, hd, g_stream));
        uint16_t *bits = (uint16_t *)hmalloc(n * 2);
        download(bits, dout, n * 2);
        float *gpu = hfloats(n);
        unsigned char *unwritten = (unsigned char *)hmalloc(n);
        for (size_t i = 0; i < n; i++) {
            gpu[i] = k_float_from_bf16(bits[i]);
            unwritten[i] = bits[i] == 0xFFFFu;
        }
        size_t bad = compare(with_lse ? "attention_causal_doc out" : "attention_causal_doc out "
                                                                     "(no lse)",
                             gpu, unwritten, out, n, (size_t)H * hd, BF16_REDUCTION);
        if (bad)
            diagnose_doc_attention(gpu, unwritten, out, ids, B, T, H, hd);
        if (with_lse && !bad) {
            check_f32("attention_causal_doc lse", d_lse, lse, nrow, H, 1e-4, 1e-5);
        } else if (!with_lse && !bad) { /* lse = NULL: the poisoned lse stays untouched */
            uint32_t *lbits = (uint32_t *)hmalloc(nrow * 4);
            download(lbits, d_lse, nrow * 4);
            size_t touched = 0;
            for (size_t i = 0; i < nrow; i++)
                touched += lbits[i] != 0xFFFFFFFFu;
            if (touched)
                print_error("    lse = NULL, but %zu lse values were written\n", touched);
            bad += touched;
        }
        kc_attention_causal_doc_use_fallback(0);
        assert_int_equal(bad, 0);
        kc_attention_causal_doc_use_fallback(c.path == 1);
    }
    kc_attention_causal_doc_use_fallback(0);
}

static void test_attention_causal_doc(void **state)
{
    (void)state;
    static const doc_attn_case normal[] = {
        {2, 64, 2, 64, 0, 0},   {2, 64, 3, 128, 0, 0},  {2, 200, 3, 64, 0, 0},
        {2, 200, 2, 128, 0, 0}, {2, 512, 2, 64, 0, 0},  {2, 512, 3, 128, 0, 0},
        {2, 200, 2, 128, 1, 0}, {2, 130, 2, 64, 4, 0},  {3, 77, 2, 128, 3, 0},
        {48, 192, 1, 64, 2, 0}, {16, 256, 1, 128, 2, 0}, {1, 1, 1, 64, 0, 0},
        {2, 17, 2, 128, 0, 0},  {1, 1000, 1, 128, 1, 0},
        /* fallback: odd head dims, forced, unaligned tensors */
        {2, 100, 2, 48, 0, 0},  {2, 70, 3, 96, 2, 0},   {2, 130, 2, 64, 0, 1},
        {2, 90, 2, 128, 0, 2},
    };
    static const doc_attn_case small[] = {
        {2, 64, 2, 64, 0, 0},  {2, 80, 1, 128, 0, 0}, {4, 96, 1, 64, 2, 0},
        {1, 33, 1, 128, 1, 0}, {2, 40, 1, 48, 0, 0},  {2, 40, 1, 64, 0, 1},
    };
    const doc_attn_case *cases = g_small ? small : normal;
    size_t n_cases = g_small ? sizeof small / sizeof small[0] : sizeof normal / sizeof normal[0];
    for (size_t i = 0; i < n_cases; i++)
        run_doc_attention_case(cases[i]);

    /* argument checks: nothing launched, a message naming the problem */
    assert_int_equal(kc_attention_fwd_causal_doc(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 4,
                                                 1, 3, g_stream),
                     K_EINVAL);
    assert_true(strstr(kc_last_error(), "hd=3") != NULL);
    kc_bf16 *buf = (kc_bf16 *)dmalloc(4 * 48 * 2);
    assert_int_equal(kc_attention_fwd_causal_doc(buf, NULL, buf, buf, buf, NULL, NULL, 1, 4, 1,
                                                 48, g_stream),
                     K_EINVAL);
    assert_true(strstr(kc_last_error(), "mask_scratch") != NULL);
    /* empty shapes are no-ops */
    KC(kc_attention_fwd_causal_doc(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 4, 1, 64,
                                   g_stream));
    CUDA_CHECK(cudaGetLastError());
}

/* ---- rope ------------------------------------------------------------------------------------ */
static void test_rope(void **state)
{
    (void)state;
    const int shapes[][3] = {{SZ(129, 9), 3, 64}, {SZ(37, 5), 2, 6}, {SZ(20, 4), 1, 128}};
    const float thetas[] = {10000.0f, 1000000.0f, 500000.0f};
    for (int s = 0; s < 3; s++) {
        int T = shapes[s][0], H = shapes[s][1], hd = shapes[s][2];
        size_t n = (size_t)T * H * hd;
        float theta = thetas[s];
        int32_t *pos = rand_ints(T, 0, 4096);
        pos[0] = 0;
        pos[T - 1] = 131071;
        int32_t *d_pos = (int32_t *)dev_copy(pos, T * 4);
        float *x = rand_floats(n, 2.0f);
        kc_bf16 *d_x = dev_bf16(x, n);
        float *ref = hfloats(n);
        k_rope_fwd(ref, x, pos, T, H, hd, theta);
        kc_bf16 *d_out = (kc_bf16 *)dmalloc(n * 2);
        poison(d_out, n * 2);
        printf("  T=%d H=%d hd=%d theta=%g\n", T, H, hd, theta);
        KC(kc_rope_fwd(d_out, d_x, d_pos, T, H, hd, theta, g_stream));
        check_bf16("rope_fwd", d_out, ref, n, (size_t)H * hd, BF16_ONE_ROUNDING);
        KC(kc_rope_fwd(d_x, d_x, d_pos, T, H, hd, theta, g_stream));
        check_bf16("rope_fwd (in place)", d_x, ref, n, (size_t)H * hd, BF16_ONE_ROUNDING);
        float *g = rand_floats(n, 1.0f), *dy = rand_floats(n, 1.0f);
        kc_bf16 *d_g = dev_bf16(g, n), *d_dy = dev_bf16(dy, n);
        k_rope_bwd(g, dy, pos, T, H, hd, theta);
        KC(kc_rope_bwd(d_g, d_dy, d_pos, T, H, hd, theta, g_stream));
        check_bf16("rope_bwd (dx +=)", d_g, g, n, (size_t)H * hd, BF16_ONE_ROUNDING);
    }
}

/* ---- loss and metrics ------------------------------------------------------------------------ */
#define IGNORE (-100)

/* Logits [T, V] on the device in the given dtype; the host copy holds the stored values. */
static void *dev_logits(float *logits, size_t n, kc_dtype dtype)
{
    if (dtype == KC_BF16)
        return dev_bf16(logits, n);
    return dev_f32(logits, n);
}

static int32_t *make_targets(int T, int V, int n_ignored, int n_bad)
{
    int32_t *y = rand_ints(T, 0, V);
    for (int i = 0; i < n_ignored; i++)
        y[(7 * i + 2) % T] = IGNORE;
    for (int i = 0; i < n_bad; i++)
        y[(11 * i + 5) % T] = i % 2 ? V : -3;
    return y;
}

static void test_cross_entropy_fwd(void **state)
{
    (void)state;
    int T = SZ(67, 13), V = SZ(5003, 301);
    for (int dt = 0; dt < 2; dt++) {
        kc_dtype dtype = dt ? KC_BF16 : KC_F32;
        for (int variant = 0; variant < 4; variant++) {
            /* 0: plain, 1: weights, 2: weights + a bad target (NaN), 3: every row ignored */
            float *logits = rand_floats((size_t)T * V, 4.0f);
            void *d_logits = dev_logits(logits, (size_t)T * V, dtype);
            int32_t *y = make_targets(T, V, variant == 3 ? 0 : 4, variant == 2 ? 1 : 0);
            if (variant == 3)
                for (int t = 0; t < T; t++)
                    y[t] = IGNORE;
            float *w = variant ? rand_range(T, 0.1f, 1.0f) : NULL;
            int32_t *d_y = (int32_t *)dev_copy(y, T * 4);
            float *d_w = w ? dev_f32(w, T) : NULL;
            float *losses = hfloats(T);
            float loss = k_cross_entropy_fwd(losses, logits, y, w, T, V, IGNORE);
            float *d_losses = (float *)dmalloc(T * 4), *d_loss = (float *)dmalloc(4);
            poison(d_losses, T * 4);
            poison(d_loss, 4);
            static const char *const names[] = {"unweighted", "weighted",
                                                "weighted, bad target", "all ignored"};
            printf("  %s logits, T=%d V=%d, %s\n", dt ? "bf16" : "fp32", T, V, names[variant]);
            KC(kc_cross_entropy_fwd(d_loss, d_losses, d_logits, dtype, d_y, d_w, T, V, IGNORE,
                                    g_stream));
            check_f32("cross_entropy_fwd losses", d_losses, losses, T, 0, F32_REDUCTION);
            check_scalar("cross_entropy_fwd loss", d_loss, loss, F32_REDUCTION);
            if (variant == 2)
                assert_true(isnan(read_scalar_f32(d_loss)));
            if (variant == 3)
                assert_true(read_scalar_f32(d_loss) == 0.0f);
        }
    }
}

static void test_cross_entropy_bwd(void **state)
{
    (void)state;
    const int shapes[][2] = {{SZ(67, 13), SZ(5003, 301)}, {SZ(40, 9), 64}};
    for (int s = 0; s < 2; s++) {
        int T = shapes[s][0], V = shapes[s][1];
        size_t n = (size_t)T * V;
        for (int dt = 0; dt < 2; dt++) {
            kc_dtype dtype = dt ? KC_BF16 : KC_F32;
            for (int weighted = 0; weighted < 2; weighted++) {
                float *logits = rand_floats(n, 4.0f);
                void *d_logits = dev_logits(logits, n, dtype);
                int32_t *y = make_targets(T, V, 3, weighted);
                float *w = weighted ? rand_range(T, 0.1f, 1.0f) : NULL;
                int32_t *d_y = (int32_t *)dev_copy(y, T * 4);
                float *d_w = w ? dev_f32(w, T) : NULL;
                /* starting gradients of the same order as the update, so it shows in bf16 */
                float dloss = 0.7f;
                float *g = rand_floats(n, 0.5f / ((float)T * V));
                void *d_g = dev_logits(g, n, dtype);
                k_cross_entropy_bwd(g, logits, y, w, T, V, IGNORE, dloss);
                float *d_total = (float *)dmalloc(4);
                printf("  %s logits, T=%d V=%d%s\n", dt ? "bf16" : "fp32", T, V,
                       weighted ? ", weighted, bad target" : "");
                KC(kc_cross_entropy_bwd(d_g, d_logits, dtype, d_y, d_w, T, V, IGNORE, dloss,
                                        d_total, g_stream));
                /* the largest update is about coef = dloss * w / sum(w) ~ dloss / T (the
                 * target's entry); atol is 1e-5 of that, for entries where the update cancels
                 * the starting value (the GPU's log-sum-exp is fp32, the CPU's double) */
                double atol = 1e-5 * dloss / T;
                if (dtype == KC_BF16)
                    check_bf16("cross_entropy_bwd dlogits (+=)", (const kc_bf16 *)d_g, g, n, V,
                               atol, 1e-2);
                else
                    check_f32("cross_entropy_bwd dlogits (+=)", (const float *)d_g, g, n, V, atol,
                              1e-5);
            }
        }
    }
}

static void test_argmax(void **state)
{
    (void)state;
    int T = SZ(67, 13), V = SZ(5003, 301);
    size_t n = (size_t)T * V;
    for (int dt = 0; dt < 2; dt++) {
        kc_dtype dtype = dt ? KC_BF16 : KC_F32;
        /* bf16 in [-1, 1) has many ties; fp32 rows get explicit ones */
        float *logits = rand_floats(n, 1.0f);
        if (dtype == KC_F32)
            for (int t = 0; t < T; t += 2) {
                float *row = logits + (size_t)t * V;
                int a = rng_int(0, V), b = rng_int(0, V);
                row[a] = row[b] = 2.0f;
            }
        void *d_logits = dev_logits(logits, n, dtype);
        int32_t *pred = (int32_t *)hmalloc(T * 4);
        k_argmax(pred, logits, T, V);
        int32_t *d_pred = (int32_t *)dmalloc(T * 4);
        poison(d_pred, T * 4);
        KC(kc_argmax(d_pred, d_logits, dtype, T, V, g_stream));
        check_i32(dt ? "argmax (bf16, ties)" : "argmax (fp32, ties)", d_pred, pred, T);
    }
}

static void test_topk(void **state)
{
    (void)state;
    int T = SZ(97, 23), V = SZ(5003, 301);
    size_t n = (size_t)T * V;
    for (int dt = 0; dt < 2; dt++) {
        kc_dtype dtype = dt ? KC_BF16 : KC_F32;
        float *logits = rand_floats(n, 1.0f);
        void *d_logits = dev_logits(logits, n, dtype);
        int32_t *y = make_targets(T, V, 5, 2);
        /* some targets at or near the top, so that hits are not all zero */
        int32_t *best = (int32_t *)hmalloc(T * 4);
        k_argmax(best, logits, T, V);
        for (int t = 0; t < T; t += 3)
            if (y[t] != IGNORE && y[t] >= 0 && y[t] < V)
                y[t] = best[t];
        int32_t *d_y = (int32_t *)dev_copy(y, T * 4);
        const int ks[] = {1, 5, 50};
        for (int ki = 0; ki < 3; ki++) {
            int valid = 0;
            int hits = k_topk_hits(logits, y, T, V, ks[ki], IGNORE, &valid);
            int32_t init[2] = {3, 5}, want[2] = {3 + hits, 5 + valid};
            int32_t *d_counts = (int32_t *)dev_copy(init, sizeof init);
            KC(kc_topk_hits(d_counts, d_counts + 1, d_logits, dtype, d_y, T, V, ks[ki], IGNORE,
                            g_stream));
            char what[64];
            snprintf(what, sizeof what, "topk_hits k=%d %s (hits, n_valid +=)", ks[ki],
                     dt ? "bf16" : "fp32");
            check_i32(what, d_counts, want, 2);
            assert_true(hits > 0);
        }
    }
}

/* ---- optimizer ------------------------------------------------------------------------------- */
static void test_adamw(void **state)
{
    (void)state;
    size_t n = SZ(100003, 3001);
    const int steps[] = {1, 7, 1000};
    for (int c = 0; c < 4; c++) {
        int step = steps[c % 3];
        int use_scale = c == 3;
        float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = c == 1 ? 0.0f : 0.1f;
        float *p = rand_floats(n, 1.0f), *g = rand_floats(n, 1.0f), *m = rand_floats(n, 0.1f);
        float *v = rand_range(n, 1e-6f, 1e-2f);
        float *d_p = dev_f32(p, n), *d_g = dev_f32(g, n), *d_m = dev_f32(m, n),
              *d_v = dev_f32(v, n);
        float scale = 0.37f, *d_scale = use_scale ? dev_f32(&scale, 1) : NULL;
        if (use_scale)
            for (size_t i = 0; i < n; i++)
                g[i] *= scale;
        k_adamw_step(p, g, m, v, n, lr, b1, b2, eps, wd, step);
        kc_bf16 *d_pb = (kc_bf16 *)dmalloc(n * 2);
        poison(d_pb, n * 2);
        printf("  n=%zu step=%d wd=%g%s\n", n, step, wd, use_scale ? " grad_scale=0.37" : "");
        KC(kc_adamw_step(d_p, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, step, d_scale, d_pb,
                         g_stream));
        /* same expressions as the CPU, but nvcc contracts a*b + c into FMAs: a couple of fp32
         * ulps of the operands (param ~1, m's terms ~0.1, v's ~0.05), relative 1e-6 */
        check_f32("adamw param", d_p, p, n, 0, 2.5e-7, 1e-6);
        check_f32("adamw m", d_m, m, n, 0, 5e-8, 1e-6);
        check_f32("adamw v", d_v, v, n, 0, 2e-8, 1e-6);
        /* the bf16 copy is exactly bf16(the GPU's param) */
        float *gp = hfloats(n);
        download(gp, d_p, n * 4);
        uint16_t *pb = (uint16_t *)hmalloc(n * 2);
        k_float_to_bf16(pb, gp, n);
        check_u16("adamw param_bf16", d_pb, pb, n);
    }
    /* a non-finite scale: nothing changes */
    float *p = rand_floats(n, 1.0f), *g = rand_floats(n, 1.0f), *m = rand_floats(n, 0.1f);
    float *v = rand_range(n, 1e-6f, 1e-2f);
    float *d_p = dev_f32(p, n), *d_g = dev_f32(g, n), *d_m = dev_f32(m, n), *d_v = dev_f32(v, n);
    float nan_scale = NAN, *d_scale = dev_f32(&nan_scale, 1);
    kc_bf16 *d_pb = (kc_bf16 *)dmalloc(n * 2);
    poison(d_pb, n * 2);
    KC(kc_adamw_step(d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, d_scale, d_pb,
                     g_stream));
    check_u32("adamw NaN scale: param untouched", d_p, p, n);
    check_u32("adamw NaN scale: m untouched", d_m, m, n);
    check_u32("adamw NaN scale: v untouched", d_v, v, n);
}

static void test_clip_grad_norm(void **state)
{
    (void)state;
    int n_tensors = SZ(70, 67); /* more than one launch's worth (64) */
    float **host = (float **)hmalloc(n_tensors * sizeof(float *));
    float **dev = (float **)hmalloc(n_tensors * sizeof(float *));
    size_t *counts = (size_t *)hmalloc(n_tensors * sizeof(size_t));
    rng_new_stream();
    for (int t = 0; t < n_tensors; t++)
        counts[t] = t == 5 ? 0 : (size_t)rng_int(1, SZ(20000, 500));
    double *d_partials = (double *)dmalloc(KC_GRAD_NORM_PARTIALS * sizeof(double));
    float *d_norm = (float *)dmalloc(4), *d_scale = (float *)dmalloc(4);
    for (int c = 0; c < 5; c++) {
        /* 0: clipped in place, 1: below max_norm, 2: clipped, not in place, 3: a NaN gradient,
         * 4: no tensors */
        int n = c == 4 ? 0 : n_tensors;
        for (int t = 0; t < n_tensors; t++) {
            host[t] = rand_floats(counts[t] ? counts[t] : 1, 0.05f);
            dev[t] = dev_f32(host[t], counts[t] ? counts[t] : 1);
        }
        if (c == 3)
            host[7][0] = NAN, upload(dev[7], host[7], 4);
        float norm = k_grad_norm((const float *const *)host, counts, n);
        float max_norm = c == 1 ? 2.0f * norm : 0.5f * norm;
        if (c == 3)
            max_norm = 1.0f;
        float **orig = (float **)hmalloc(n_tensors * sizeof(float *));
        for (int t = 0; t < n_tensors; t++)
            orig[t] = copy_floats(host[t], counts[t] ? counts[t] : 1);
        int in_place = c != 2;
        float ref_norm = in_place ? k_clip_grad_norm(host, counts, n, max_norm) : norm;
        float ref_scale = 1.0f;
        if (!isfinite(ref_norm))
            ref_scale = NAN;
        else if (max_norm > 0.0f && ref_norm > max_norm)
            ref_scale = (float)((double)max_norm / ((double)ref_norm + 1e-6));
        poison(d_norm, 4);
        poison(d_scale, 4);
        poison(d_partials, KC_GRAD_NORM_PARTIALS * sizeof(double));
        static const char *const names[] = {"clip in place", "no clip", "clip, scale only",
                                            "NaN gradient", "empty list"};
        printf("  %d tensors, max_norm %g, %s\n", n, max_norm, names[c]);
        KC(kc_clip_grad_norm(dev, counts, n, max_norm, in_place, d_norm, d_scale, d_partials,
                             g_stream));
        check_scalar("clip_grad_norm norm", d_norm, ref_norm, 0.0, 1e-6);
        check_scalar("clip_grad_norm clip_scale", d_scale, ref_scale, 0.0, 1e-6);
        /* every tensor, concatenated: scaled as the CPU's (case 0) or bit-identical */
        size_t total = 0;
        for (int t = 0; t < n_tensors; t++)
            total += counts[t];
        float *gpu_all = hfloats(total), *ref_all = hfloats(total);
        size_t at = 0;
        for (int t = 0; t < n_tensors; t++) {
            download(gpu_all + at, dev[t], counts[t] * 4);
            memcpy(ref_all + at, c == 0 ? host[t] : orig[t], counts[t] * 4);
            at += counts[t];
        }
        if (c == 0) {
            assert_int_equal(compare("clip_grad_norm grads (scaled)", gpu_all, NULL, ref_all, total,
                                     0, 0.0, 1e-6),
                             0);
        } else {
            int same = memcmp(gpu_all, ref_all, total * 4) == 0;
            printf("    %-34s n=%-8zu %s\n", "clip_grad_norm grads (untouched)", total,
                   same ? "bit-exact" : "CHANGED  FAILED");
            assert_true(same);
        }
    }
}

/* ---- taps ------------------------------------------------------------------------------------ */
static void test_pack_taps(void **state)
{
    (void)state;
    const int tap_counts[] = {3, 35}; /* 35: more than one launch's worth (32) */
    int T = SZ(129, 9), d = SZ(96, 24);
    for (int c = 0; c < 2; c++) {
        int n_taps = tap_counts[c];
        float **taps = (float **)hmalloc(n_taps * sizeof(float *));
        void **d_f32 = (void **)hmalloc(n_taps * sizeof(void *));
        void **d_b16 = (void **)hmalloc(n_taps * sizeof(void *));
        for (int i = 0; i < n_taps; i++) {
            taps[i] = rand_floats((size_t)T * d, 3.0f);
            d_f32[i] = dev_f32(taps[i], (size_t)T * d);
        }
        size_t n = (size_t)T * n_taps * d;
        /* fp32 -> bf16 against k_pack_taps_bf16, bit for bit */
        uint16_t *ref16 = (uint16_t *)hmalloc(n * 2);
        k_pack_taps_bf16(ref16, (const float *const *)taps, n_taps, T, d);
        void *d_out16 = dmalloc(n * 2);
        poison(d_out16, n * 2);
        printf("  %d taps, T=%d d=%d\n", n_taps, T, d);
        KC(kc_pack_taps(d_out16, KC_BF16, (const void *const *)d_f32, KC_F32, n_taps, T, d,
                        g_stream));
        check_u16("pack_taps fp32 -> bf16", d_out16, ref16, n);
        /* fp32 -> fp32 against k_pack_taps */
        float *ref32 = hfloats(n);
        k_pack_taps(ref32, (const float *const *)taps, n_taps, T, d);
        void *d_out32 = dmalloc(n * 4);
        poison(d_out32, n * 4);
        KC(kc_pack_taps(d_out32, KC_F32, (const void *const *)d_f32, KC_F32, n_taps, T, d,
                        g_stream));
        check_u32("pack_taps fp32 -> fp32", d_out32, ref32, n);
        /* bf16 taps (what the target produces): bf16 -> bf16 and bf16 -> fp32 */
        for (int i = 0; i < n_taps; i++)
            d_b16[i] = dev_bf16(taps[i], (size_t)T * d); /* rounds taps[i] in place */
        k_pack_taps_bf16(ref16, (const float *const *)taps, n_taps, T, d);
        poison(d_out16, n * 2);
        KC(kc_pack_taps(d_out16, KC_BF16, (const void *const *)d_b16, KC_BF16, n_taps, T, d,
                        g_stream));
        check_u16("pack_taps bf16 -> bf16", d_out16, ref16, n);
        k_pack_taps(ref32, (const float *const *)taps, n_taps, T, d);
        poison(d_out32, n * 4);
        KC(kc_pack_taps(d_out32, KC_F32, (const void *const *)d_b16, KC_BF16, n_taps, T, d,
                        g_stream));
        check_u32("pack_taps bf16 -> fp32", d_out32, ref32, n);
    }
}

/* ---- argument checks ------------------------------------------------------------------------- */
static void test_bad_arguments(void **state)
{
    (void)state;
    /* rejected before launching anything, with a message */
    assert_int_equal(kc_attention_fwd(NULL, NULL, NULL, NULL, NULL, NULL, 4, 4, 1, 3, g_stream),
                     K_EINVAL);
    assert_true(strstr(kc_last_error(), "hd=3") != NULL);
    assert_int_equal(kc_rope_fwd(NULL, NULL, NULL, 2, 1, 5, 1e4f, g_stream), K_EINVAL);
    assert_int_equal(kc_matmul(NULL, NULL, KC_F32, NULL, NULL, NULL, 1, 1, 1, 0, g_stream),
                     K_EINVAL);
    assert_int_equal(kc_adamw_step(NULL, NULL, NULL, NULL, 1, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.0f, 0,
                                   NULL, NULL, g_stream),
                     K_EINVAL);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- main ------------------------------------------------------------------------------------ */
static int group_setup(void **state)
{
    (void)state;
    if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "cudaStreamCreate failed\n");
        return -1;
    }
    if (kc_blas_create(&g_blas) != K_OK) {
        fprintf(stderr, "kc_blas_create failed: %s\n", kc_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kc_blas_destroy(g_blas);
    cudaStreamDestroy(g_stream);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0) {
            g_small = 1;
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            cmocka_set_test_filter(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--small] [--filter PATTERN]\n"
                            "  --small           smaller sizes (for compute-sanitizer); also "
                            "KC_TEST_SMALL=1\n"
                            "  --filter PATTERN  run only the tests matching PATTERN (* and ?), "
                            "e.g. 'test_attention*'\n"
                            "  KC_TEST_SEED=N    another random seed (default 1234)\n",
                    argv[0]);
            return 2;
        }
    }
    const char *env = getenv("KC_TEST_SMALL");
    if (env && env[0] && strcmp(env, "0") != 0)
        g_small = 1;
    env = getenv("KC_TEST_SEED");
    if (env && env[0])
        g_seed = strtoull(env, NULL, 0);

    int n_devices = 0;
    cudaError_t err = cudaGetDeviceCount(&n_devices);
    if (err != cudaSuccess || n_devices == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0");
        return 0;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device 0: %s (sm_%d%d, %d SMs), sizes %s, seed %llu\n", prop.name, prop.major,
               prop.minor, prop.multiProcessorCount, g_small ? "small" : "normal",
               (unsigned long long)g_seed);
    kc_set_debug_sync(1);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bf16_conversion, free_all),
        cmocka_unit_test_teardown(test_add, free_all),
        cmocka_unit_test_teardown(test_silu_swiglu, free_all),
        cmocka_unit_test_teardown(test_embedding, free_all),
        cmocka_unit_test_teardown(test_rmsnorm_fwd, free_all),
        cmocka_unit_test_teardown(test_rmsnorm_bwd, free_all),
        cmocka_unit_test_teardown(test_matmul, free_all),
        cmocka_unit_test_teardown(test_bias_bwd, free_all),
        cmocka_unit_test_teardown(test_masks, free_all),
        cmocka_unit_test_teardown(test_attention_fwd, free_all),
        cmocka_unit_test_teardown(test_attention_bwd, free_all),
        cmocka_unit_test_teardown(test_attention_causal_doc, free_all),
        cmocka_unit_test_teardown(test_rope, free_all),
        cmocka_unit_test_teardown(test_cross_entropy_fwd, free_all),
        cmocka_unit_test_teardown(test_cross_entropy_bwd, free_all),
        cmocka_unit_test_teardown(test_argmax, free_all),
        cmocka_unit_test_teardown(test_topk, free_all),
        cmocka_unit_test_teardown(test_adamw, free_all),
        cmocka_unit_test_teardown(test_clip_grad_norm, free_all),
        cmocka_unit_test_teardown(test_pack_taps, free_all),
        cmocka_unit_test_teardown(test_bad_arguments, free_all),
    };
    int failed = cmocka_run_group_tests_name("kernels_cuda", tests, group_setup, group_teardown);
    return failed ? 1 : 0;
}
