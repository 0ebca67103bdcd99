/* matmul.c: the three fp32 matrix products of a linear layer's forward and backward
 * (A@B, A^T@B, A@B^T) and the bias gradient. Plain loops, blocked so that the tile of B in use
 * stays in cache and the innermost loop runs over contiguous memory; no BLAS. The result is
 * the oracle for cuBLAS, so summation order is fixed (deterministic) but not specified. */
#include <string.h>

#include "kernels.h"
#include "vec.h"

/* Tile sizes (floats). A [KC x NC] tile of B is 256 KiB: it stays in L2 while every row of A
 * streams past it. */
#define NC 256
#define KC 256
#define MC 64

static inline int min_int(int a, int b) { return a < b ? a : b; }

static void init_output(float *C, const float *bias, int M, int N, int accumulate)
{
    for (int i = 0; i < M; i++) {
        float *crow = C + (size_t)i * N;
        if (!accumulate) {
            if (bias)
                memcpy(crow, bias, (size_t)N * sizeof(float));
            else
                memset(crow, 0, (size_t)N * sizeof(float));
        } else if (bias) {
            for (int j = 0; j < N; j++)
                crow[j] += bias[j];
        }
    }
}

void k_matmul(float *C, const float *A, const float *B, const float *bias, int M, int K, int N,
              int accumulate)
{
    init_output(C, bias, M, N, accumulate);
    for (int n0 = 0; n0 < N; n0 += NC) {
        int nb = min_int(NC, N - n0);
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kb = min_int(KC, K - k0);
            for (int i = 0; i < M; i++) {
                float *crow = C + (size_t)i * N + n0;
                const float *arow = A + (size_t)i * K + k0;
                for (int kk = 0; kk < kb; kk++)
                    k_vec_axpy(crow, arow[kk], B + (size_t)(k0 + kk) * N + n0, nb);
            }
        }
    }
}

void k_matmul_tn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate)
{
    init_output(C, NULL, M, N, accumulate);
    for (int n0 = 0; n0 < N; n0 += NC) {
        int nb = min_int(NC, N - n0);
        for (int m0 = 0; m0 < M; m0 += MC) {
            int mb = min_int(MC, M - m0);
            /* C[m0.., n0..] (a [MC x NC] tile) stays in cache over the whole k loop. */
            for (int kk = 0; kk < K; kk++) {
                const float *brow = B + (size_t)kk * N + n0;
                const float *acol = A + (size_t)kk * M + m0;
                for (int m = 0; m < mb; m++)
                    k_vec_axpy(C + (size_t)(m0 + m) * N + n0, acol[m], brow, nb);
            }
        }
    }
}

void k_matmul_nt(float *C, const float *A, const float *B, int M, int K, int N, int accumulate)
{
    const int nc = 64; /* rows of B kept hot while each row of A meets them */
    for (int n0 = 0; n0 < N; n0 += nc) {
        int nb = min_int(nc, N - n0);
        for (int i = 0; i < M; i++) {
            const float *arow = A + (size_t)i * K;
            float *crow = C + (size_t)i * N + n0;
            for (int j = 0; j < nb; j++) {
                float s = k_vec_dot(arow, B + (size_t)(n0 + j) * K, K);
                crow[j] = accumulate ? crow[j] + s : s;
            }
        }
    }
}

void k_bias_bwd(float *dbias, const float *dC, int M, int N)
{
    for (int i = 0; i < M; i++) {
        const float *row = dC + (size_t)i * N;
        for (int j = 0; j < N; j++)
            dbias[j] += row[j];
    }
}
