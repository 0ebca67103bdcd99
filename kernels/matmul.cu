/* matmul.cu: the linear layers' matrix products on the device (kernels/matmul.c) through
 * cuBLASLt: bf16 A and B, fp32 accumulation, fp32 or bf16 C, the bias fused as a cuBLASLt
 * epilogue. Row-major products are computed as the column-major product of the transposes:
 *   C[M,N] row-major is C^T [N,M] column-major, so C = A @ B becomes C^T = B^T @ A^T, i.e. a
 *   column-major GEMM with m = N, n = M, k = K whose first operand is B and second is A.
 * The (expensive) descriptor creation and heuristic query happen once per shape: plans are
 * cached in the handle. When cuBLASLt has no algorithm, cublasGemmEx and a bias kernel do it.
 * A bf16 output that accumulates or has a bias is staged in fp32 (see matmul_bf16_staged). */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda_common.cuh"

#define WORKSPACE_BYTES (32u << 20) /* what cuBLAS recommends for Hopper */
#define STAGING_FLOATS (4u << 20)   /* fp32 staging of a bf16 product with a bias: 16 MiB */
#define PLAN_CACHE 64

#define BLAS_CHECK(call)                                                                       \
    do {                                                                                       \
        cublasStatus_t kc_st_ = (call);                                                        \
        if (kc_st_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return kc_fail_blas((int)kc_st_, cublasGetStatusString(kc_st_), #call, __FILE__,   \
                                __LINE__);                                                     \
    } while (0)

#define LT_CHECK(call)                                                                         \
    do {                                                                                       \
        cublasStatus_t kc_st_ = (call);                                                        \
        if (kc_st_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return kc_fail_blas((int)kc_st_, cublasLtGetStatusString(kc_st_), #call, __FILE__, \
                                __LINE__);                                                     \
    } while (0)

enum variant { V_NN = 0, V_TN = 1, V_NT = 2 }; /* kc_matmul, kc_matmul_tn, kc_matmul_nt */

struct plan_key {
    int variant, M, K, N, lda, c_dtype, has_bias, accumulate;
    int align_a, align_b, align_c, align_bias;
};

struct plan {
    plan_key key;
    int in_use;
    int usable; /* 0: cuBLASLt found no algorithm: take the GemmEx path */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout_a, layout_b, layout_c;
    cublasLtMatmulAlgo_t algo;
};

struct kc_blas {
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    void *workspace;
    float *staging; /* [STAGING_FLOATS]: see matmul_bf16_staged */
    int force_gemmex;
    int next_evict;
    plan plans[PLAN_CACHE];
};

static void plan_release(plan *p)
{
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    if (p->layout_a)
        cublasLtMatrixLayoutDestroy(p->layout_a);
    if (p->layout_b)
        cublasLtMatrixLayoutDestroy(p->layout_b);
    if (p->layout_c)
        cublasLtMatrixLayoutDestroy(p->layout_c);
    memset(p, 0, sizeof *p);
}

extern "C" void kc_blas_destroy(kc_blas *blas)
{
    if (!blas)
        return;
    for (int i = 0; i < PLAN_CACHE; i++)
        plan_release(&blas->plans[i]);
    if (blas->lt)
        cublasLtDestroy(blas->lt);
    if (blas->cublas)
        cublasDestroy(blas->cublas);
    if (blas->workspace)
        cudaFree(blas->workspace);
    if (blas->staging)
        cudaFree(blas->staging);
    free(blas);
}

static int blas_init(kc_blas *blas)
{
    BLAS_CHECK(cublasCreate(&blas->cublas));
    /* split-K partial sums in fp32, never in bf16 (see REDUCTION_SCHEME_MASK below) */
    cublasMath_t math =
        (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    BLAS_CHECK(cublasSetMathMode(blas->cublas, math));
    LT_CHECK(cublasLtCreate(&blas->lt));
    KC_CUDA_CHECK(cudaMalloc(&blas->workspace, WORKSPACE_BYTES));
    KC_CUDA_CHECK(cudaMalloc(&blas->staging, STAGING_FLOATS * sizeof(float)));
    return K_OK;
}

extern "C" int kc_blas_create(kc_blas **out)
{
    KC_REQUIRE(out, "kc_blas_create: NULL out");
    *out = NULL;
    kc_blas *blas = (kc_blas *)calloc(1, sizeof *blas);
    KC_REQUIRE(blas, "kc_blas_create: out of host memory");
    int rc = blas_init(blas);
    if (rc != K_OK) {
        kc_blas_destroy(blas);
        return rc;
    }
    *out = blas;
    return K_OK;
}

extern "C" void kc_blas_force_gemmex(kc_blas *blas, int force)
{
    if (blas)
        blas->force_gemmex = force != 0;
}

/* Largest power of two (<= 256) dividing the address: cuBLASLt filters algorithms by it. */
static int alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int align = 1;
    while (align < 256 && a % (uintptr_t)(align * 2) == 0)
        align *= 2;
    return align;
}

/* The column-major operands of a variant: first = our B, second = our A. */
struct gemm_shape {
    cublasOperation_t op_first, op_second;
    int rows_first, cols_first, ld_first;    /* stored dims of B (column-major view) */
    int rows_second, cols_second, ld_second; /* stored dims of A */
};

/* lda: the row stride of A as stored (K for [M, K], M for [K, M]), which is larger than the
 * natural one for a band of the rows of C in the TN variant. */
static gemm_shape shape_of(int variant, int M, int K, int N, int lda)
{
    gemm_shape s;
    switch (variant) {
    case V_TN: /* A stored [K, M]: column-major M x K, transposed */
        s = {CUBLAS_OP_N, CUBLAS_OP_T, N, K, N, M, K, lda};
        break;
    case V_NT: /* B stored [N, K]: column-major K x N, transposed */
        s = {CUBLAS_OP_T, CUBLAS_OP_N, K, N, K, K, M, lda};
        break;
    default: /* A [M, K]: column-major K x M; B [K, N]: column-major N x K */
        s = {CUBLAS_OP_N, CUBLAS_OP_N, N, K, N, K, M, lda};
        break;
    }
    return s;
}

static cudaDataType_t cuda_type(int c_dtype)
{
    return c_dtype == KC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int plan_build(kc_blas *blas, plan *p, const plan_key *key, const float *bias)
{
    memset(p, 0, sizeof *p);
    p->key = *key;
    p->in_use = 1;
    gemm_shape s = shape_of(key->variant, key->M, key->K, key->N, key->lda);
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &s.op_first,
                                            sizeof s.op_first));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &s.op_second,
                                            sizeof s.op_second));
    if (key->has_bias) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = CUDA_R_32F;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &epilogue, sizeof epilogue));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof bias_type));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    }
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->layout_a, CUDA_R_16BF, (uint64_t)s.rows_first,
                                        (uint64_t)s.cols_first, (int64_t)s.ld_first));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->layout_b, CUDA_R_16BF, (uint64_t)s.rows_second,
                                        (uint64_t)s.cols_second, (int64_t)s.ld_second));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->layout_c, cuda_type(key->c_dtype), (uint64_t)key->N,
                                        (uint64_t)key->M, (int64_t)key->N));

    cublasLtMatmulPreference_t pref = NULL;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = WORKSPACE_BYTES;
    uint32_t align_first = (uint32_t)key->align_b, align_second = (uint32_t)key->align_a;
    uint32_t align_c = (uint32_t)key->align_c;
    /* Split-K algorithms may add their partial sums in the output type (OUTPUT_TYPE, and
     * INPLACE, which reduces in the output buffer): with a bf16 C that rounds every partial sum
     * to bf16 (errors of a bf16 ulp of the partial sums, measured 0.03 on results near 0).
     * Allow only reductions in the fp32 compute type, as PyTorch does by default. */
    uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &reduction_mask, sizeof reduction_mask);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &align_first, sizeof align_first);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &align_second, sizeof align_second);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &align_c, sizeof align_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &align_c, sizeof align_c);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref);
        return kc_fail_blas((int)st, cublasLtGetStatusString(st),
                            "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__);
    }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(blas->lt, p->desc, p->layout_a, p->layout_b, p->layout_c,
                                        p->layout_c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    /* No result, NOT_SUPPORTED or INVALID_VALUE (an unsupported combination): this shape
     * takes the GemmEx path, which is not an error. Anything else is. */
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        p->algo = result.algo;
        p->usable = 1;
    } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
               st != CUBLAS_STATUS_INVALID_VALUE) {
        return kc_fail_blas((int)st, cublasLtGetStatusString(st),
                            "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    }
    return K_OK;
}

static int plan_get(kc_blas *blas, const plan_key *key, const float *bias, plan **out)
{
    for (int i = 0; i < PLAN_CACHE; i++) {
        plan *p = &blas->plans[i];
        if (p->in_use && memcmp(&p->key, key, sizeof *key) == 0) {
            *out = p;
            return K_OK;
        }
    }
    int slot = -1;
    for (int i = 0; i < PLAN_CACHE && slot < 0; i++)
        if (!blas->plans[i].in_use)
            slot = i;
    if (slot < 0) {
        slot = blas->next_evict;
        blas->next_evict = (blas->next_evict + 1) % PLAN_CACHE;
    }
    plan *p = &blas->plans[slot];
    plan_release(p);
    int rc = plan_build(blas, p, key, bias);
    if (rc != K_OK) {
        plan_release(p);
        return rc;
    }
    *out = p;
    return K_OK;
}

/* C[m, n] = (accumulate ? C[m, n] : 0) + bias[n]: the K = 0 product, and the GemmEx path's
 * bias (there with accumulate = 1, after the GEMM). */
template <typename T>
__global__ void bias_rows_kernel(T *C, const float *bias, int M, int N, int accumulate)
{
    size_t n = (size_t)M * N;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        float c = accumulate ? kc_ld(C + e) : 0.0f;
        kc_st(C + e, c + (bias ? bias[e % N] : 0.0f));
    }
}

static int bias_rows(void *C, int c_dtype, const float *bias, int M, int N, int accumulate,
                     cudaStream_t stream)
{
    size_t n = (size_t)M * N;
    if (c_dtype == KC_BF16)
        bias_rows_kernel<__nv_bfloat16><<<kc_grid_for(n, 256), 256, 0, stream>>>(
            (__nv_bfloat16 *)C, bias, M, N, accumulate);
    else
        bias_rows_kernel<float><<<kc_grid_for(n, 256), 256, 0, stream>>>((float *)C, bias, M, N,
                                                                         accumulate);
    KC_LAUNCH_CHECK(stream, "bias_rows_kernel");
    return K_OK;
}

static int gemmex(kc_blas *blas, int variant, void *C, int c_dtype, const kc_bf16 *A, int lda,
                  const kc_bf16 *B, const float *bias, int M, int K, int N, int accumulate,
                  cudaStream_t stream)
{
    gemm_shape s = shape_of(variant, M, K, N, lda);
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    BLAS_CHECK(cublasSetStream(blas->cublas, stream));
    /* cublasSetStream resets the workspace to cuBLAS's own pool: give it ours again. */
    BLAS_CHECK(cublasSetWorkspace(blas->cublas, blas->workspace, WORKSPACE_BYTES));
    BLAS_CHECK(cublasGemmEx(blas->cublas, s.op_first, s.op_second, N, M, K, &alpha, B,
                            CUDA_R_16BF, s.ld_first, A, CUDA_R_16BF, s.ld_second, &beta, C,
                            cuda_type(c_dtype), N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    KC_LAUNCH_CHECK(stream, "cublasGemmEx");
    if (bias)
        return bias_rows(C, c_dtype, bias, M, N, 1, stream);
    return K_OK;
}

/* One cuBLASLt call (or the GemmEx fallback) for C (=|+=) op(A) op(B) (+ bias), written in
 * place. Used directly for an fp32 C, and for a bf16 C that neither accumulates nor has a
 * bias (one rounding either way). */
static int gemm_direct(kc_blas *blas, int variant, void *C, kc_dtype c_dtype, const kc_bf16 *A,
                       int lda, const kc_bf16 *B, const float *bias, int M, int K, int N,
                       int accumulate, cudaStream_t stream)
{
    if (!blas->force_gemmex) {
        plan_key key;
        memset(&key, 0, sizeof key); /* the key is compared with memcmp */
        key.variant = variant;
        key.M = M;
        key.K = K;
        key.N = N;
        key.lda = lda;
        key.c_dtype = (int)c_dtype;
        key.has_bias = bias != NULL;
        key.accumulate = accumulate;
        key.align_a = alignment_of(A);
        key.align_b = alignment_of(B);
        key.align_c = alignment_of(C);
        key.align_bias = bias ? alignment_of(bias) : 0;
        plan *p = NULL;
        int rc = plan_get(blas, &key, bias, &p);
        if (rc != K_OK)
            return rc;
        if (p->usable) {
            float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
            if (bias)
                LT_CHECK(cublasLtMatmulDescSetAttribute(
                    p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
            LT_CHECK(cublasLtMatmul(blas->lt, p->desc, &alpha, B, p->layout_a, A, p->layout_b,
                                    &beta, C, p->layout_c, C, p->layout_c, &p->algo,
                                    blas->workspace, WORKSPACE_BYTES, stream));
            KC_LAUNCH_CHECK(stream, "cublasLtMatmul");
            return K_OK;
        }
    }
    return gemmex(blas, variant, C, c_dtype, A, lda, B, bias, M, K, N, accumulate, stream);
}

/* C = bf16((accumulate ? C : 0) + staged) */
__global__ void add_staged_kernel(__nv_bfloat16 *C, const float *staged, size_t n,
                                  int accumulate)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x)
        kc_st(C + e, (accumulate ? kc_ld(C + e) : 0.0f) + staged[e]);
}

/* A bf16 C that accumulates or has a bias. Measured on H200 / cuBLAS 13: an in-place cuBLASLt
 * GEMM with beta = 1 on a bf16 C rounds the product to bf16 before adding C (the error of a
 * bf16 ulp of the product, not of the result: 0.03 on results near 0), and cuBLASLt's bias
 * epilogue refuses an fp32 bias with a bf16 output ("unsupported config of bias pointer
 * type"); adding the bias afterwards would round twice too. So product + bias is computed in
 * fp32 into the handle's staging buffer, a band of rows of C at a time, and C + staged is
 * rounded to bf16 once, as the CPU's fp32 result would be. One more pass over C. */
static int matmul_bf16_staged(kc_blas *blas, int variant, __nv_bfloat16 *C, const kc_bf16 *A,
                              const kc_bf16 *B, const float *bias, int M, int K, int N,
                              int accumulate, cudaStream_t stream)
{
    int band = (int)(STAGING_FLOATS / (unsigned)N);
    if (band >= 16)
        band &= ~15; /* keeps A + m0 16-byte aligned in the TN variant */
    int lda = variant == V_TN ? M : K;
    for (int m0 = 0; m0 < M; m0 += band) {
        int rows = M - m0 < band ? M - m0 : band;
        const kc_bf16 *A_band = variant == V_TN ? A + m0 : A + (size_t)m0 * K;
        int rc = gemm_direct(blas, variant, blas->staging, KC_F32, A_band, lda, B, bias, rows, K,
                             N, 0, stream);
        if (rc != K_OK)
            return rc;
        size_t n = (size_t)rows * N;
        add_staged_kernel<<<kc_grid_for(n, 256), 256, 0, stream>>>(C + (size_t)m0 * N,
                                                                   blas->staging, n, accumulate);
        KC_LAUNCH_CHECK(stream, "add_staged_kernel");
    }
    return K_OK;
}

static int matmul_any(kc_blas *blas, int variant, void *C, kc_dtype c_dtype, const kc_bf16 *A,
                      const kc_bf16 *B, const float *bias, int M, int K, int N, int accumulate,
                      cudaStream_t stream)
{
    KC_REQUIRE(blas, "kc_matmul: NULL kc_blas (kc_blas_create first)");
    KC_REQUIRE(M >= 0 && K >= 0 && N >= 0, "kc_matmul: M=%d K=%d N=%d", M, K, N);
    KC_REQUIRE(c_dtype == KC_F32 || c_dtype == KC_BF16, "kc_matmul: unknown c_dtype %d",
               (int)c_dtype);
    if (M == 0 || N == 0)
        return K_OK;
    KC_REQUIRE(C, "kc_matmul: NULL C");
    if (K == 0)
        return bias_rows(C, c_dtype, bias, M, N, accumulate, stream);
    KC_REQUIRE(A && B, "kc_matmul: NULL A or B");
    accumulate = accumulate != 0;
    if (c_dtype == KC_BF16 && (bias || accumulate)) {
        if (N <= (int)STAGING_FLOATS)
            return matmul_bf16_staged(blas, variant, (__nv_bfloat16 *)C, A, B, bias, M, K, N,
                                      accumulate, stream);
        /* N beyond 4M columns: in place, rounding twice, bias added afterwards */
        int rc = gemm_direct(blas, variant, C, c_dtype, A, variant == V_TN ? M : K, B, NULL, M,
                             K, N, accumulate, stream);
        if (rc != K_OK || !bias)
            return rc;
        return bias_rows(C, c_dtype, bias, M, N, 1, stream);
    }
    return gemm_direct(blas, variant, C, c_dtype, A, variant == V_TN ? M : K, B, bias, M, K, N,
                       accumulate, stream);
}

extern "C" int kc_matmul(kc_blas *blas, void *C, kc_dtype c_dtype, const kc_bf16 *A,
                         const kc_bf16 *B, const float *bias, int M, int K, int N,
                         int accumulate, cudaStream_t stream)
{
    return matmul_any(blas, V_NN, C, c_dtype, A, B, bias, M, K, N, accumulate, stream);
}

extern "C" int kc_matmul_tn(kc_blas *blas, void *C, kc_dtype c_dtype, const kc_bf16 *A,
                            const kc_bf16 *B, int M, int K, int N, int accumulate,
                            cudaStream_t stream)
{
    return matmul_any(blas, V_TN, C, c_dtype, A, B, NULL, M, K, N, accumulate, stream);
}

extern "C" int kc_matmul_nt(kc_blas *blas, void *C, kc_dtype c_dtype, const kc_bf16 *A,
                            const kc_bf16 *B, int M, int K, int N, int accumulate,
                            cudaStream_t stream)
{
    return matmul_any(blas, V_NT, C, c_dtype, A, B, NULL, M, K, N, accumulate, stream);
}

/* ---- bias gradient ---------------------------------------------------------------------------
 * Block (32, 8): threadIdx.x walks 32 adjacent columns (coalesced rows), threadIdx.y a slice of
 * the rows; a column's partial sums meet in shared memory. grid.y splits long columns, then
 * the blocks of a column meet in an atomicAdd. */
#define BIAS_ROWS_PER_SLICE 256

__global__ void bias_bwd_kernel(float *dbias, const __nv_bfloat16 *dC, int M, int N)
{
    __shared__ float partial[8][33];
    int n = blockIdx.x * 32 + threadIdx.x;
    int rows_per_block = (M + gridDim.y - 1) / gridDim.y;
    int m_begin = blockIdx.y * rows_per_block;
    int m_end = min(M, m_begin + rows_per_block);
    float acc = 0.0f;
    if (n < N)
        for (int m = m_begin + threadIdx.y; m < m_end; m += 8)
            acc += kc_ld(dC + (size_t)m * N + n);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && n < N) {
        float sum = 0.0f;
        for (int y = 0; y < 8; y++)
            sum += partial[y][threadIdx.x];
        if (gridDim.y == 1)
            dbias[n] += sum;
        else
            atomicAdd(dbias + n, sum);
    }
}

extern "C" int kc_bias_bwd(float *dbias, const kc_bf16 *dC, int M, int N, cudaStream_t stream)
{
    KC_REQUIRE(M >= 0 && N >= 0, "kc_bias_bwd: M=%d N=%d", M, N);
    if (M == 0 || N == 0)
        return K_OK;
    KC_REQUIRE(dbias && dC, "kc_bias_bwd: NULL pointer");
    unsigned slices = (unsigned)((M + BIAS_ROWS_PER_SLICE - 1) / BIAS_ROWS_PER_SLICE);
    if (slices > 64)
        slices = 64;
    dim3 grid((unsigned)((N + 31) / 32), slices), block(32, 8);
    bias_bwd_kernel<<<grid, block, 0, stream>>>(dbias, dC, M, N);
    KC_LAUNCH_CHECK(stream, "bias_bwd_kernel");
    return K_OK;
}
