/* attention_doc.cuh: the device half of kc_attention_fwd_causal_doc (attention_doc.cu): a
 * flash-attention-2 style forward for causal attention confined to documents, with the mask
 * computed on the fly from per-token document ids. Private to attention_doc.cu.
 *
 * Layout: q, k, v, out are bf16 [B*T, H, HD] (token-major, as the trainer's q/k/v buffers);
 * doc_ids int32 [B*T] (optional). Query i of a sequence may attend to key j of the same
 * sequence iff j <= i and j >= docstart(i), where docstart(i) is the first token of the run of
 * equal doc ids that contains i (a document is a maximal run of equal consecutive ids; this
 * equals k_mask_causal_doc's "same id" whenever an id never reappears after another one, as
 * with the trainer's increasing ids). No doc_ids: docstart = 0 (plain causal).
 *
 * One launch covers every (sequence, head, query tile): grid (ceil(T / 64), H, B), 4 warps.
 *  - A CTA owns BQ = 64 queries [i0, i0 + 64) of one (sequence, head); warp w owns rows
 *    16w .. 16w + 15 (one m16 MMA tile).
 *  - Prologue: Q is copied (cp.async) into shared memory; meanwhile the CTA finds
 *    docstart(i0) by scanning the doc ids backwards from i0, 128 ids per step, and every
 *    row's docstart within the tile (runs inside the tile). Keys before docstart(i0) are
 *    never loaded: the CTA's key range is [docstart(i0), last query], walked in tiles of
 *    BK = 64 keys starting exactly at docstart(i0) (not aligned to 64).
 *  - Each warp loads its Q fragments into registers once (ldmatrix), so that Q's shared
 *    memory can be reused as the second K buffer.
 *  - Main loop, K/V double-buffered with cp.async (tile t + 1 is in flight while tile t is
 *    computed; two barriers per tile). A warp skips a tile (no MMA) when none of its 16
 *    queries may see any of its keys; the per-element mask is applied only when the tile
 *    crosses the warp's diagonal, a document start of one of its rows, the end of the
 *    sequence, or padding rows.
 *  - S = Q K^T and O += P V on tensor cores with mma.sync m16n8k16 (bf16 in, fp32
 *    accumulate); the S accumulators are turned into the A operand of P V in registers
 *    (FA2's layout trick); online softmax in fp32 registers (base-2 exponent, scale folded in),
 *    the row max and sum shared by the 4 lanes of a quad.
 *  - Epilogue: O / l rounded to bf16, staged through shared memory (the warp's own rows) and
 *    written with 16-byte stores; lse (natural log) when asked. A row with no allowed key
 *    gets out = 0 and lse = -inf.
 * Shared memory: 4 tiles of [64][HD + 8] bf16 (the 8-element pad makes every ldmatrix
 * conflict-free): 70 KB for HD = 128, 37 KB for HD = 64.
 *
 * The primitives (cp.async, ldmatrix, mma, shuffles) are small inline functions below. A
 * host-side emulator can define KC_ATTN_DOC_EMULATED and provide its own versions, together
 * with threadIdx, blockIdx, gridDim, __syncthreads and __syncwarp, to run this exact kernel
 * body on the CPU; production builds never define it. */
#ifndef STAGETRACE_KERNELS_ATTENTION_DOC_CUH
#define STAGETRACE_KERNELS_ATTENTION_DOC_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

#ifndef KC_ATTN_DOC_EMULATED
#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 ad_bf16;

#define AD_DEVICE __device__ __forceinline__
#define AD_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

AD_DEVICE uint32_t ad_smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; valid == false writes 16 zero bytes and reads
 * nothing (src must still be a valid address: callers clamp it). */
AD_DEVICE void ad_cp_async16(void *smem, const void *gmem, bool valid)
{
    int src_size = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ad_smem_u32(smem)),
                 "l"(gmem), "r"(src_size)
                 : "memory");
}

AD_DEVICE void ad_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are still pending. */
template <int N> AD_DEVICE void ad_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix (l >> 3) and
 * receives, in r[m], row (l >> 2), columns 2 (l & 3) and 2 (l & 3) + 1 of matrix m. */
AD_DEVICE void ad_ldsm_x4(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ad_smem_u32(smem))
                 : "memory");
}

/* The same, transposed: r[m] holds rows 2 (l & 3) and 2 (l & 3) + 1, column (l >> 2). */
AD_DEVICE void ad_ldsm_x4_t(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ad_smem_u32(smem))
                 : "memory");
}

/* c[16x8] += a[16x16] b[16x8], bf16 inputs, fp32 accumulators (PTX m16n8k16 layouts). */
AD_DEVICE void ad_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> bf16x2 (round to nearest even), lo in the low half. */
AD_DEVICE uint32_t ad_pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

AD_DEVICE float ad_shfl_xor(float x, int mask)
{
    return __shfl_xor_sync(0xffffffffu, x, mask);
}

AD_DEVICE int ad_shfl_xor_int(int x, int mask)
{
    return __shfl_xor_sync(0xffffffffu, x, mask);
}

AD_DEVICE float ad_exp2(float x)
{
    return exp2f(x); /* 0 for -inf */
}
#endif /* !KC_ATTN_DOC_EMULATED */

namespace kc_attn_doc {

constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int BQ = WARPS * 16; /* queries per CTA */
constexpr int BK = 64;         /* keys per tile */
static_assert(BQ == BK, "Q is staged in the second K buffer: BQ must equal BK");

template <int HD> struct shape {
    static constexpr int LD = HD + 8;   /* bf16 per shared-memory row (272 or 144 bytes) */
    static constexpr int CH = HD / 8;   /* 16-byte chunks per row */
    static constexpr int KS = HD / 16;  /* k-steps of Q K^T; n-pairs of P V */
    static constexpr int OB = HD / 8;   /* n8 blocks of O */
    static constexpr int NB = BK / 8;   /* n8 blocks of S */
    static constexpr int TILE = BK * LD; /* bf16 per tile buffer */
    /* K[2], V[2] tiles, then s_doc[BQ], s_ds[BQ], s_red[WARPS] (int32) */
    static constexpr size_t SMEM =
        (size_t)4 * TILE * 2 + (size_t)(2 * BQ + WARPS) * sizeof(int);
    /* CTAs per SM the registers are sized for (ptxas, sm_90): HD 128: 3 (168 registers, 70 KB
     * of shared memory each), HD 64: 4 (128 registers, 37 KB), without spills in the loop */
    static constexpr int MIN_BLOCKS = HD > 64 ? 3 : 4;
};

template <int HD>
__global__ void __launch_bounds__(THREADS, shape<HD>::MIN_BLOCKS)
    fwd_kernel(ad_bf16 *__restrict__ out, float *__restrict__ lse, const ad_bf16 *__restrict__ q,
               const ad_bf16 *__restrict__ k, const ad_bf16 *__restrict__ v,
               const int32_t *__restrict__ doc_ids, int T, int H, float scale_log2)
{
    typedef shape<HD> S;
    constexpr int LD = S::LD, CH = S::CH, KS = S::KS, OB = S::OB, NB = S::NB;
    AD_DYNAMIC_SMEM(smem_raw);
    ad_bf16 *Kbuf = reinterpret_cast<ad_bf16 *>(smem_raw); /* [2][BK][LD] */
    ad_bf16 *Vbuf = Kbuf + 2 * S::TILE;                     /* [2][BK][LD] */
    int *s_doc = reinterpret_cast<int *>(Vbuf + 2 * S::TILE); /* [BQ] doc id of each row */
    int *s_ds = s_doc + BQ;                                   /* [BQ] docstart of each row */
    int *s_red = s_ds + BQ;                                   /* [WARPS] */
    ad_bf16 *Qs = Kbuf + S::TILE; /* Q staged in the second K buffer until it is in registers */

    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    /* the last query tiles (the longest key ranges when documents are long) start first */
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ;
    const int nrows = T - i0 < BQ ? T - i0 : BQ; /* >= 1 */
    const size_t tok0 = (size_t)b * (size_t)T;   /* the sequence's first token */
    const size_t rs = (size_t)H * HD;            /* elements from one token to the next */
    const size_t head0 = tok0 * rs + (size_t)h * HD;
    const ad_bf16 *qh = q + head0, *kh = k + head0, *vh = v + head0;
    ad_bf16 *oh = out + head0;
    const int32_t *doc = doc_ids ? doc_ids + tok0 : nullptr;

    /* ---- Q -> shared memory (rows past T are zeros) ---- */
    for (int e = tid; e < BQ * CH; e += THREADS) {
        const int r = e / CH, c = e % CH;
        const bool ok = r < nrows;
        ad_cp_async16(Qs + r * LD + c * 8, qh + (size_t)(i0 + (ok ? r : 0)) * rs + c * 8, ok);
    }
    ad_cp_async_commit();

    /* ---- docstart(i0): 1 + the last j < i0 whose id differs from doc[i0] (0 if none) ---- */
    int ds0 = 0;
    if (doc) {
        const int d0 = doc[i0];
        for (int hi = i0 - 1; hi >= 0; hi -= THREADS) { /* uniform trip count */
            const int j = hi - tid;
            int cand = (j >= 0 && doc[j] != d0) ? j + 1 : 0;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const int other = ad_shfl_xor_int(cand, o);
                cand = other > cand ? other : cand;
            }
            if (lane == 0)
                s_red[warp] = cand;
            __syncthreads();
            int m = 0;
#pragma unroll
            for (int w = 0; w < WARPS; w++)
                m = s_red[w] > m ? s_red[w] : m;
            __syncthreads(); /* s_red is rewritten by the next step */
            if (m > 0) {     /* uniform */
                ds0 = m;
                break;
            }
        }
    }

    /* ---- every row's docstart; padding rows (past T) get INT_MAX: no key allowed ---- */
    if (tid < BQ)
        s_doc[tid] = (doc && tid < nrows) ? doc[i0 + tid] : 0;
    __syncthreads();
    if (tid < BQ) {
        int ds = INT_MAX;
        if (tid < nrows) {
            const int d = s_doc[tid];
            int r = tid;
            while (r > 0 && s_doc[r - 1] == d)
                r--;
            ds = r == 0 ? ds0 : i0 + r;
        }
        s_ds[tid] = ds;
    }
    __syncthreads();

    /* ---- key ranges ---- */
    const int kmin = ds0, kmax = i0 + nrows - 1; /* the CTA's keys */
    const int n_tiles = (kmax - kmin) / BK + 1;
    const int wr0 = warp * 16;
    const bool w_any = wr0 < nrows;              /* the warp has a real query */
    const int w_first = i0 + wr0;                /* its first query */
    const int w_last = i0 + (wr0 + 15 < nrows ? wr0 + 15 : nrows - 1); /* its last real one */
    const int w_kmin = w_any ? s_ds[wr0] : INT_MAX;          /* its first allowed key */
    const int w_dsmax = w_any ? s_ds[w_last - i0] : INT_MAX; /* the latest docstart */
    const bool w_padded = wr0 + 15 >= nrows;                 /* has rows past T */
    /* this lane's two rows (A: row g, B: row g + 8 of the warp's MMA tile) */
    const int rA = wr0 + (lane >> 2), rB = rA + 8;
    const int posA = i0 + rA, posB = i0 + rB;
    const int dsA = s_ds[rA], dsB = s_ds[rB];

    /* K/V tile t -> buffer `stage`; keys past the CTA's last query are zeros */
    auto load_kv = [&](int t, int stage) {
        const int j0 = kmin + t * BK;
        ad_bf16 *Kd = Kbuf + stage * S::TILE, *Vd = Vbuf + stage * S::TILE;
        for (int e = tid; e < BK * CH; e += THREADS) {
            const int r = e / CH, c = e % CH;
            const int j = j0 + r;
            const bool ok = j <= kmax;
            const size_t off = (size_t)(ok ? j : kmax) * rs + c * 8;
            ad_cp_async16(Kd + r * LD + c * 8, kh + off, ok);
            ad_cp_async16(Vd + r * LD + c * 8, vh + off, ok);
        }
    };

    load_kv(0, 0);
    ad_cp_async_commit();
    ad_cp_async_wait<1>(); /* Q has landed (tile 0 may still be in flight) */
    __syncthreads();
    uint32_t qf[KS][4]; /* the warp's 16 x HD slice of Q as A fragments */
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        ad_ldsm_x4(qf[ks], Qs + (wr0 + (lane & 15)) * LD + ks * 16 + ((lane >> 4) << 3));
    __syncthreads(); /* Q's buffer becomes K/V stage 1 */

    float o[OB][4];
#pragma unroll
    for (int ob = 0; ob < OB; ob++)
        o[ob][0] = o[ob][1] = o[ob][2] = o[ob][3] = 0.0f;
    float mA = -INFINITY, mB = -INFINITY; /* running max of the raw scores */
    float lA = 0.0f, lB = 0.0f;           /* this lane's part of the running sums */

    for (int t = 0; t < n_tiles; t++) {
        if (t + 1 < n_tiles) {
            load_kv(t + 1, (t + 1) & 1);
            ad_cp_async_commit();
            ad_cp_async_wait<1>();
        } else {
            ad_cp_async_wait<0>();
        }
        __syncthreads(); /* tile t is visible to every warp */
        const int j0 = kmin + t * BK;
        const bool active = w_any && j0 <= w_last && j0 + BK - 1 >= w_kmin; /* warp-uniform */
        if (active) {
            const ad_bf16 *Ks = Kbuf + (t & 1) * S::TILE, *Vs = Vbuf + (t & 1) * S::TILE;
            /* S = Q K^T: s[nb] is keys j0 + 8 nb .. + 7 */
            float s[NB][4];
#pragma unroll
            for (int nb = 0; nb < NB; nb++)
                s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
#pragma unroll
                for (int np = 0; np < NB / 2; np++) {
                    /* matrices: keys +0..7 | dims +0..7, +8..15; keys +8..15 | same */
                    uint32_t kb[4];
                    ad_ldsm_x4(kb, Ks + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD +
                                       ks * 16 + (((lane >> 3) & 1) << 3));
                    ad_mma(s[2 * np], qf[ks], kb[0], kb[1]);
                    ad_mma(s[2 * np + 1], qf[ks], kb[2], kb[3]);
                }
            }
            /* mask: only tiles that cross the diagonal, a docstart or padding rows */
            const bool need_mask = w_padded || j0 + BK - 1 > w_first || w_dsmax > j0;
            if (need_mask) {
#pragma unroll
                for (int nb = 0; nb < NB; nb++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = j0 + nb * 8 + ((lane & 3) << 1) + (e & 1);
                        const bool ok = e < 2 ? (j >= dsA && j <= posA) : (j >= dsB && j <= posB);
                        if (!ok)
                            s[nb][e] = -INFINITY;
                    }
                }
            }
            /* online softmax (rows A and B; a row's 4 lanes hold 16 keys each) */
            float tA = -INFINITY, tB = -INFINITY;
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                tA = fmaxf(tA, fmaxf(s[nb][0], s[nb][1]));
                tB = fmaxf(tB, fmaxf(s[nb][2], s[nb][3]));
            }
            tA = fmaxf(tA, ad_shfl_xor(tA, 1));
            tA = fmaxf(tA, ad_shfl_xor(tA, 2));
            tB = fmaxf(tB, ad_shfl_xor(tB, 1));
            tB = fmaxf(tB, ad_shfl_xor(tB, 2));
            const float nA = fmaxf(mA, tA), nB = fmaxf(mB, tB);
            /* exponent base; 0 while a row has seen no allowed key (avoids -inf - -inf) */
            const float baseA = nA == -INFINITY ? 0.0f : nA * scale_log2;
            const float baseB = nB == -INFINITY ? 0.0f : nB * scale_log2;
            const float corrA = ad_exp2(mA * scale_log2 - baseA); /* 0 when mA = -inf */
            const float corrB = ad_exp2(mB * scale_log2 - baseB);
            mA = nA;
            mB = nB;
            float sumA = 0.0f, sumB = 0.0f;
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                s[nb][0] = ad_exp2(fmaf(s[nb][0], scale_log2, -baseA)); /* 0 when masked */
                s[nb][1] = ad_exp2(fmaf(s[nb][1], scale_log2, -baseA));
                s[nb][2] = ad_exp2(fmaf(s[nb][2], scale_log2, -baseB));
                s[nb][3] = ad_exp2(fmaf(s[nb][3], scale_log2, -baseB));
                sumA += s[nb][0] + s[nb][1];
                sumB += s[nb][2] + s[nb][3];
            }
            lA = lA * corrA + sumA;
            lB = lB * corrB + sumB;
#pragma unroll
            for (int ob = 0; ob < OB; ob++) {
                o[ob][0] *= corrA;
                o[ob][1] *= corrA;
                o[ob][2] *= corrB;
                o[ob][3] *= corrB;
            }
            /* O += P V: P (bf16) straight from the S accumulators */
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t pa[4];
                pa[0] = ad_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
                pa[1] = ad_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
                pa[2] = ad_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[3] = ad_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < KS; dp++) {
                    /* matrices (transposed): keys +0..7, +8..15 | dims +0..7; same | +8..15 */
                    uint32_t vb[4];
                    ad_ldsm_x4_t(vb, Vs + (kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * LD +
                                         dp * 16 + ((lane >> 4) << 3));
                    ad_mma(o[2 * dp], pa, vb[0], vb[1]);
                    ad_mma(o[2 * dp + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); /* buffer t & 1 is free for tile t + 2 */
    }

    /* ---- epilogue ---- */
    lA += ad_shfl_xor(lA, 1);
    lA += ad_shfl_xor(lA, 2);
    lB += ad_shfl_xor(lB, 1);
    lB += ad_shfl_xor(lB, 2);
    const float invA = lA > 0.0f ? 1.0f / lA : 0.0f;
    const float invB = lB > 0.0f ? 1.0f / lB : 0.0f;
    /* the warp's rows of K buffer 0 (free after the loop's last barrier) as a bf16 staging tile */
    ad_bf16 *Os = Kbuf;
#pragma unroll
    for (int ob = 0; ob < OB; ob++) {
        const int col = ob * 8 + ((lane & 3) << 1);
        *reinterpret_cast<uint32_t *>(Os + rA * LD + col) =
            ad_pack_bf16x2(o[ob][0] * invA, o[ob][1] * invA);
        *reinterpret_cast<uint32_t *>(Os + rB * LD + col) =
            ad_pack_bf16x2(o[ob][2] * invB, o[ob][3] * invB);
    }
    __syncwarp();
    for (int e = lane; e < 16 * CH; e += 32) {
        const int r = wr0 + e / CH, c = e % CH;
        if (r < nrows)
            *reinterpret_cast<uint4 *>(oh + (size_t)(i0 + r) * rs + c * 8) =
                *reinterpret_cast<const uint4 *>(Os + r * LD + c * 8);
    }
    if (lse && (lane & 3) == 0) {
        const float LN2 = 0.6931471805599453f;
        if (rA < nrows)
            lse[(tok0 + (size_t)posA) * H + h] =
                lA > 0.0f ? (mA * scale_log2 + log2f(lA)) * LN2 : -INFINITY;
        if (rB < nrows)
            lse[(tok0 + (size_t)posB) * H + h] =
                lB > 0.0f ? (mB * scale_log2 + log2f(lB)) * LN2 : -INFINITY;
    }
}

} /* namespace kc_attn_doc */

#endif /* STAGETRACE_KERNELS_ATTENTION_DOC_CUH */
