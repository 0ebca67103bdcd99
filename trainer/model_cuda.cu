/* model_cuda.cu: the target forward and the drafter's forward, loss, backward and optimizer
 * on one CUDA device (see model_cuda.h for the layout and precision choices). The drafter code
 * follows model.c line by line, so that the two backends can be compared op for op; the
 * target forward is restructured for throughput (fused projections, fp32 residual updated
 * in the matmul epilogue). Every buffer is carved at creation from one cudaMalloc per object,
 * so a step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_cuda.h"
#include "model_cuda.h"
#include "ops_cuda.h"
#include "rng.h"

#define LOGIT_CHUNK_BYTES (512u << 20) /* fp32 logits of the target's LM head, per chunk */

/* ---- one cudaMalloc per object: a layout function runs twice, counting then placing ------- */
struct carver {
    char *base;
    size_t used;
    template <typename T> T *take(size_t count)
    {
        size_t off = (used + 255) & ~(size_t)255; /* 256-byte alignment: cuBLASLt, vector loads */
        used = off + count * sizeof(T);
        return base ? reinterpret_cast<T *>(base + off) : nullptr;
    }
};

static int device_alloc(void **out, size_t bytes, const char *what)
{
    *out = NULL;
    cudaError_t err = cudaMalloc(out, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        int dev = -1;
        size_t free_b = 0, total_b = 0;
        cudaGetDevice(&dev);
        cudaGetLastError(); /* clear the allocation failure */
        cudaMemGetInfo(&free_b, &total_b);
        tr_backend_set_error("cuda:%d: cudaMalloc of %.2f GiB for %s failed: %s (%.2f of %.2f "
                             "GiB free)",
                             dev, bytes / 1073741824.0, what, cudaGetErrorString(err),
                             free_b / 1073741824.0, total_b / 1073741824.0);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* ---- target weights ------------------------------------------------------------------------- */

static void target_weights_layout(tm_target_weights *w, carver &c)
{
    const tr_dims *D = &w->D;
    size_t d = (size_t)D->dim, F = (size_t)D->ffn, V = (size_t)D->vocab;
    w->embed = c.take<kc_bf16>(V * d);
    w->lm_head = c.take<kc_bf16>(d * V);
    for (int l = 0; w->full && l < D->target_layers; l++) {
        w->wqkv[l] = c.take<kc_bf16>(d * 3 * d);
        w->wo[l] = c.take<kc_bf16>(d * d);
        w->wgu[l] = c.take<kc_bf16>(d * 2 * F);
        w->wdown[l] = c.take<kc_bf16>(F * d);
    }
}

void tm_target_weights_free(tm_target_weights *w)
{
    if (!w)
        return;
    if (w->block)
        cudaFree(w->block);
    free(w->wqkv);
    free(w->wo);
    free(w->wgu);
    free(w->wdown);
    memset(w, 0, sizeof *w);
}

/* tr_target_weights_init's draws, in its order: embed, then per layer wq wk wv wo w_gate w_up
 * w_down (the norms are ones and draw nothing), then lm_head. */
static int target_weights_fill(tm_target_weights *w, uint64_t seed, cudaStream_t s)
{
    const tr_dims *D = &w->D;
    const int d = D->dim, F = D->ffn, V = D->vocab;
    const uint64_t dd = (uint64_t)d * d, dF = (uint64_t)d * F;
    const uint64_t per_layer = 4 * dd + 3 * dF;
    const uint64_t state0 = tr_rng_stream(seed, 0x7A26E7);
    const float in_d = 1.0f / sqrtf((float)d), in_f = 1.0f / sqrtf((float)F);
    TR_TRY(op_fill_normal_bf16(w->embed, V, d, (size_t)d, state0, 0, 1.0f, s));
    for (int l = 0; w->full && l < D->target_layers; l++) {
        uint64_t base = (uint64_t)V * d + (uint64_t)l * per_layer;
        TR_TRY(op_fill_normal_bf16(w->wqkv[l], d, d, 3 * (size_t)d, state0, base, in_d, s));
        TR_TRY(op_fill_normal_bf16(w->wqkv[l] + d, d, d, 3 * (size_t)d, state0, base + dd, in_d,
                                   s));
        TR_TRY(op_fill_normal_bf16(w->wqkv[l] + 2 * d, d, d, 3 * (size_t)d, state0, base + 2 * dd,
                                   in_d, s));
        TR_TRY(op_fill_normal_bf16(w->wo[l], d, d, (size_t)d, state0, base + 3 * dd, 0.5f * in_d,
                                   s));
        TR_TRY(op_fill_normal_bf16(w->wgu[l], d, F, 2 * (size_t)F, state0, base + 4 * dd, in_d,
                                   s));
        TR_TRY(op_fill_normal_bf16(w->wgu[l] + F, d, F, 2 * (size_t)F, state0,
                                   base + 4 * dd + dF, in_d, s));
        TR_TRY(op_fill_normal_bf16(w->wdown[l], F, d, (size_t)d, state0, base + 4 * dd + 2 * dF,
                                   0.5f * in_f, s));
    }
    uint64_t head = (uint64_t)V * d + (uint64_t)D->target_layers * per_layer;
    TR_TRY(op_fill_normal_bf16(w->lm_head, d, V, (size_t)V, state0, head, in_d, s));
    return 0;
}

int tm_target_weights_create(tm_target_weights *w, const tr_dims *D, int full, uint64_t seed,
                             cudaStream_t stream)
{
    memset(w, 0, sizeof *w);
    w->D = *D;
    w->full = full;
    size_t L = (size_t)(D->target_layers > 0 ? D->target_layers : 1);
    w->wqkv = (kc_bf16 **)calloc(L, sizeof *w->wqkv);
    w->wo = (kc_bf16 **)calloc(L, sizeof *w->wo);
    w->wgu = (kc_bf16 **)calloc(L, sizeof *w->wgu);
    w->wdown = (kc_bf16 **)calloc(L, sizeof *w->wdown);
    if (!w->wqkv || !w->wo || !w->wgu || !w->wdown) {
        tm_target_weights_free(w);
        tr_backend_set_error("out of host memory");
        return -1;
    }
    carver c = {nullptr, 0};
    target_weights_layout(w, c);
    w->bytes = c.used;
    if (device_alloc(&w->block, w->bytes, "the target weights")) {
        tm_target_weights_free(w);
        return -1;
    }
    c = carver{(char *)w->block, 0};
    target_weights_layout(w, c);
    if (target_weights_fill(w, seed, stream)) {
        tm_target_weights_free(w);
        return -1;
    }
    return 0;
}

/* ---- target forward ---------------------------------------------------------------------------- */

static void target_ws_layout(tm_target_ws *ws, carver &c)
{
    const tr_dims *D = &ws->D;
    size_t NT = (size_t)D->n_seqs * D->seq_len, d = (size_t)D->dim, F = (size_t)D->ffn;
    ws->x = c.take<float>(NT * d);
    ws->h = c.take<kc_bf16>(NT * d);
    ws->qkv = c.take<kc_bf16>(NT * 3 * d);
    ws->q = c.take<kc_bf16>(NT * d);
    ws->k = c.take<kc_bf16>(NT * d);
    ws->v = c.take<kc_bf16>(NT * d);
    ws->o = c.take<kc_bf16>(NT * d);
    ws->gu = c.take<kc_bf16>(NT * 2 * F);
    ws->act = c.take<kc_bf16>(NT * F);
    ws->masks = c.take<uint8_t>((size_t)D->n_seqs * D->seq_len * D->seq_len);
    ws->rope = c.take<float2>(NT * (size_t)(D->head_dim / 2));
    ws->logits = c.take<float>((size_t)ws->logit_rows * D->vocab);
}

int tm_target_ws_create(tm_target_ws *ws, const tr_dims *D)
{
    memset(ws, 0, sizeof *ws);
    ws->D = *D;
    int NT = D->n_seqs * D->seq_len;
    size_t rows = LOGIT_CHUNK_BYTES / (sizeof(float) * (size_t)D->vocab);
    if (rows >= 64)
        rows &= ~(size_t)63;
    if (rows < 1)
        rows = 1;
    ws->logit_rows = rows < (size_t)NT ? (int)rows : NT;
    carver c = {nullptr, 0};
    target_ws_layout(ws, c);
    ws->bytes = c.used;
    if (device_alloc(&ws->block, ws->bytes, "the target's activations"))
        return -1;
    c = carver{(char *)ws->block, 0};
    target_ws_layout(ws, c);
    return 0;
}

void tm_target_ws_free(tm_target_ws *ws)
{
    if (!ws)
        return;
    if (ws->block)
        cudaFree(ws->block);
    memset(ws, 0, sizeof *ws);
}

/* The target's attention kernel: TR_ATTENTION=masked selects the previous path (a uint8 mask
 * per sequence built each forward, one kc_attention_fwd launch per sequence), for comparison;
 * anything else (the default) kc_attention_fwd_causal_doc. Read once per process. */
static bool target_attention_masked(void)
{
    static const bool masked = [] {
        const char *env = getenv("TR_ATTENTION");
        return env && strcmp(env, "masked") == 0;
    }();
    return masked;
}

int tm_target_forward(const tm_target_weights *w, tm_target_ws *ws, kc_blas *blas,
                      const int32_t *tokens, const int32_t *doc_ids, const int32_t *positions,
                      float *const *taps, int32_t *predictions, int32_t *n_bad,
                      cudaStream_t s)
{
    const tr_dims *D = &w->D;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = S * T, V = D->vocab;
    if (!w->full) {
        tr_backend_set_error("internal: target forward on a device without target weights");
        return -1;
    }
    /* per forward: RoPE angles, and (TR_ATTENTION=masked only) one mask per sequence, shared
     * by every layer */
    const bool masked = target_attention_masked();
    TR_TRY(op_rope_table(ws->rope, positions, NT, hd, D->rope_theta, s));
    for (int q = 0; masked && q < S; q++)
        TR_KC(kc_mask_causal_doc(ws->masks + (size_t)q * T * T, doc_ids + (size_t)q * T, T, s));
    TR_TRY(op_embed_f32(ws->x, tokens, w->embed, NT, d, V, n_bad, s));
    for (int l = 0; l < D->target_layers; l++) {
        /* attention: x += attn(rope(norm(x) Wq), rope(norm(x) Wk), norm(x) Wv) Wo */
        TR_TRY(op_rmsnorm_f32_bf16(ws->h, ws->x, NULL, NT, d, D->eps, s));
        TR_KC(kc_matmul(blas, ws->qkv, KC_BF16, ws->h, w->wqkv[l], NULL, NT, d, 3 * d, 0, s));
        TR_TRY(op_qkv_split_rope(ws->q, ws->k, ws->v, ws->qkv, ws->rope, NT, H, hd, s));
        if (masked) {
            for (int q = 0; q < S; q++) {
                size_t off = (size_t)q * T * d;
                TR_KC(kc_attention_fwd(ws->o + off, NULL, ws->q + off, ws->k + off, ws->v + off,
                                       ws->masks + (size_t)q * T * T, T, T, H, hd, s));
            }
        } else {
            /* every sequence and head in one launch, the mask computed from doc_ids (hd other
             * than 64/128 falls back to explicit masks built in ws->masks) */
            TR_KC(kc_attention_fwd_causal_doc(ws->o, NULL, ws->q, ws->k, ws->v, doc_ids,
                                              ws->masks, S, T, H, hd, s));
        }
        TR_KC(kc_matmul(blas, ws->x, KC_F32, ws->o, w->wo[l], NULL, NT, d, d, 1, s));
        /* MLP: x += swiglu(norm(x) W_gate, norm(x) W_up) W_down */
        TR_TRY(op_rmsnorm_f32_bf16(ws->h, ws->x, NULL, NT, d, D->eps, s));
        TR_KC(kc_matmul(blas, ws->gu, KC_BF16, ws->h, w->wgu[l], NULL, NT, d, 2 * F, 0, s));
        TR_TRY(op_swiglu_rows(ws->act, ws->gu, NT, F, s));
        TR_KC(kc_matmul(blas, ws->x, KC_F32, ws->act, w->wdown[l], NULL, NT, F, d, 1, s));
        for (int i = 0; i < D->n_taps; i++)
            if (D->taps[i] == l)
                TR_CUDA(cudaMemcpyAsync(taps[i], ws->x, (size_t)NT * d * sizeof(float),
                                        cudaMemcpyDeviceToDevice, s));
    }
    TR_TRY(op_rmsnorm_f32_bf16(ws->h, ws->x, NULL, NT, d, D->eps, s));
    for (int r0 = 0; r0 < NT; r0 += ws->logit_rows) {
        int rows = NT - r0 < ws->logit_rows ? NT - r0 : ws->logit_rows;
        TR_KC(kc_matmul(blas, ws->logits, KC_F32, ws->h + (size_t)r0 * d, w->lm_head, NULL, rows,
                        d, V, 0, s));
        TR_KC(kc_argmax(predictions + r0, ws->logits, KC_F32, rows, V, s));
    }
    return 0;
}

double tm_target_forward_flops(const tr_dims *D, const int32_t *doc_ids, double *attention_flops)
{
    const double NT = (double)D->n_seqs * D->seq_len, d = D->dim, F = D->ffn, V = D->vocab;
    const double L = D->target_layers;
    double matmul = 2.0 * NT * (d * 3 * d + d * d + d * 2 * F + F * d) * L + 2.0 * NT * d * V;
    /* allowed (query, key) pairs of the causal-document masks */
    double pairs = 0.0;
    for (int s = 0; s < D->n_seqs; s++) {
        const int32_t *doc = doc_ids + (size_t)s * D->seq_len;
        for (int i = 0; i < D->seq_len; i++)
            for (int j = 0; j <= i; j++)
                pairs += doc[j] == doc[i];
    }
    double attention = 4.0 * d * pairs * L; /* QK^T and PV: 2 * hd * H = 2d each per pair */
    if (attention_flops)
        *attention_flops = attention;
    return matmul + attention;
}

/* ---- drafter parameters -------------------------------------------------------------------------- */

void tm_drafter_params_free(tm_drafter_params *p)
{
    if (!p)
        return;
    if (p->block)
        cudaFree(p->block);
    free(p->tensors);
    free(p->layers);
    memset(p, 0, sizeof *p);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The std of tr_drafter_params_init for a tensor, 0 for the ones-filled norms, -1 when the
 * name is unknown (model.c changed: this table must follow). */
static float init_std(const tr_dims *D, const char *name)
{
    const float in_d = 1.0f / sqrtf((float)D->dim), in_f = 1.0f / sqrtf((float)D->ffn);
    if (!strcmp(name, "fc"))
        return 1.0f / sqrtf((float)(D->n_taps * D->dim));
    if (!strcmp(name, "ctx_norm") || !strcmp(name, "final_norm") ||
        ends_with(name, ".attn_norm") || ends_with(name, ".mlp_norm"))
        return 0.0f;
    if (!strcmp(name, "mask_embed"))
        return 1.0f;
    if (!strcmp(name, "pos_embed"))
        return 0.5f;
    if (ends_with(name, ".wq") || ends_with(name, ".wk") || ends_with(name, ".wv") ||
        ends_with(name, ".w_gate") || ends_with(name, ".w_up"))
        return in_d;
    if (ends_with(name, ".wo"))
        return 0.5f * in_d;
    if (ends_with(name, ".w_down"))
        return 0.5f * in_f;
    return -1.0f;
}

int tm_drafter_params_create(tm_drafter_params *p, const tr_dims *D, uint64_t seed,
                             cudaStream_t s)
{
    memset(p, 0, sizeof *p);
    p->D = *D;
    /* model.c's layout (the host block is calloc'ed and never touched: zero pages) */
    tr_drafter_params host;
    if (tr_drafter_params_alloc(&host, D, NULL)) {
        tr_backend_set_error("out of host memory");
        return -1;
    }
    p->n = host.n_floats;
    p->n_tensors = host.n_tensors;
    p->tensors = (tr_param_tensor *)malloc((size_t)host.n_tensors * sizeof *p->tensors);
    p->layers = (tm_layer_offsets *)calloc((size_t)(D->drafter_layers > 0 ? D->drafter_layers : 1),
                                           sizeof *p->layers);
    if (!p->tensors || !p->layers) {
        tr_drafter_params_free(&host);
        tm_drafter_params_free(p);
        tr_backend_set_error("out of host memory");
        return -1;
    }
    memcpy(p->tensors, host.tensors, (size_t)host.n_tensors * sizeof *p->tensors);
#define OFF(ptr) ((ptr) ? (size_t)((ptr) - host.data) : 0)
    p->fc = OFF(host.fc);
    p->ctx_norm = OFF(host.ctx_norm);
    p->mask_embed = OFF(host.mask_embed);
    p->pos_embed = OFF(host.pos_embed);
    p->final_norm = OFF(host.final_norm);
    for (int l = 0; l < D->drafter_layers; l++) {
        const tr_block_weights *B = &host.layers[l];
        tm_layer_offsets *o = &p->layers[l];
        o->attn_norm = OFF(B->attn_norm);
        o->wq = OFF(B->wq);
        o->wk = OFF(B->wk);
        o->wv = OFF(B->wv);
        o->wo = OFF(B->wo);
        o->mlp_norm = OFF(B->mlp_norm);
        o->w_gate = OFF(B->w_gate);
        o->w_up = OFF(B->w_up);
        o->w_down = OFF(B->w_down);
    }
#undef OFF
    tr_drafter_params_free(&host);

    /* master, grads, m, v fp32 and the bf16 copy, in one block */
    size_t n = p->n, fbytes = ((n * sizeof(float)) + 255) & ~(size_t)255;
    p->bytes = 4 * fbytes + n * sizeof(kc_bf16);
    if (device_alloc(&p->block, p->bytes, "the drafter's parameters and optimizer state")) {
        tm_drafter_params_free(p);
        return -1;
    }
    char *b = (char *)p->block;
    p->master = (float *)b;
    p->grads = (float *)(b + fbytes);
    p->adam_m = (float *)(b + 2 * fbytes);
    p->adam_v = (float *)(b + 3 * fbytes);
    p->pbf = (kc_bf16 *)(b + 4 * fbytes);

    /* tr_drafter_params_init's draws: the tensors in layout order, norms drawing nothing */
    int rc = 0;
    const uint64_t state0 = tr_rng_stream(seed, 0xD2AF7E2);
    uint64_t next_normal = 0;
    for (int i = 0; i < p->n_tensors && !rc; i++) {
        const tr_param_tensor *t = &p->tensors[i];
        float std = init_std(D, t->name);
        if (std < 0.0f) {
            tr_backend_set_error("internal: drafter tensor '%s' has no initialisation rule in "
                                 "model_cuda.cu (model.c changed?)",
                                 t->name);
            rc = -1;
        } else if (std == 0.0f) {
            rc = op_fill_f32(p->master + t->offset, t->count, 1.0f, s);
        } else {
            rc = op_fill_normal_f32(p->master + t->offset, t->count, state0, next_normal, std, s);
            next_normal += t->count;
        }
    }
    if (!rc) {
        cudaError_t e = cudaMemsetAsync(p->grads, 0, 3 * fbytes, s); /* grads, m, v */
        if (e != cudaSuccess)
            rc = tr_cuda_fail(e, "cudaMemsetAsync", __FILE__, __LINE__);
    }
    if (!rc) {
        int k = kc_float_to_bf16(p->pbf, p->master, n, s);
        if (k != K_OK)
            rc = tr_kc_fail(k, "kc_float_to_bf16", __FILE__, __LINE__);
    }
    if (rc) {
        tm_drafter_params_free(p);
        return -1;
    }
    return 0;
}

/* ---- drafter workspace ------------------------------------------------------------------------ */

static void drafter_ws_layout(tm_drafter_ws *ws, carver &c)
{
    const tr_dims *D = &ws->D;
    size_t d = (size_t)D->dim, F = (size_t)D->ffn, V = (size_t)D->vocab, H = (size_t)D->heads;
    size_t NT = (size_t)ws->NT, NB = (size_t)ws->NB, KT = (size_t)D->n_seqs * ws->TK;
    int att = D->attention;
    for (int b = 0; b < 2; b++) {
        ws->in[b].taps = c.take<kc_bf16>(NT * D->n_taps * d);
        ws->in[b].ints = c.take<int32_t>(4 * NT);
        ws->in[b].anchors = c.take<int32_t>((size_t)D->n_seqs * D->anchors);
    }
    ws->labels = c.take<int32_t>(NB);
    ws->block_pos = c.take<int32_t>(NB);
    ws->key_pos = att ? c.take<int32_t>(KT) : nullptr;
    ws->masks = att ? c.take<uint8_t>((size_t)D->n_seqs * ws->QB * ws->TK) : nullptr;
    ws->u_ctx = c.take<kc_bf16>(NT * d);
    ws->ctx = c.take<kc_bf16>(NT * d);
    ws->ctx_rstd = c.take<float>(NT);
    for (int l = 0; l <= D->drafter_layers; l++)
        ws->x[l] = c.take<kc_bf16>(NB * d);
    for (int l = 0; l < D->drafter_layers; l++) {
        tm_drafter_layer A;
        memset(&A, 0, sizeof A);
        if (att) {
            A.x_mid = c.take<kc_bf16>(NB * d);
            A.h_attn = c.take<kc_bf16>(NB * d);
            A.rstd_attn = c.take<float>(NB);
            A.q = c.take<kc_bf16>(NB * d);
            A.K = c.take<kc_bf16>(KT * d);
            A.V = c.take<kc_bf16>(KT * d);
            A.o = c.take<kc_bf16>(NB * d);
            A.lse = c.take<float>(NB * H);
        }
        A.h_mlp = c.take<kc_bf16>(NB * d);
        A.rstd_mlp = c.take<float>(NB);
        A.g = c.take<kc_bf16>(NB * F);
        A.u = c.take<kc_bf16>(NB * F);
        A.act = c.take<kc_bf16>(NB * F);
        ws->layers[l] = A;
    }
    ws->h_final = c.take<kc_bf16>(NB * d);
    ws->rstd_final = c.take<float>(NB);
    ws->logits = c.take<float>(NB * V);
    ws->dlogits = c.take<float>(NB * V);
    ws->dlogits_bf16 = c.take<kc_bf16>(NB * V);
    ws->dx = c.take<kc_bf16>(NB * d);
    ws->dh = c.take<kc_bf16>(NB * d);
    ws->dact = c.take<kc_bf16>(NB * F);
    ws->dg = c.take<kc_bf16>(NB * F);
    ws->du = c.take<kc_bf16>(NB * F);
    if (att) {
        ws->dout = c.take<kc_bf16>(NB * d);
        ws->dq = c.take<kc_bf16>(NB * d);
        ws->dq_pre = c.take<kc_bf16>(NB * d);
        ws->dK = c.take<kc_bf16>(KT * d);
        ws->dV = c.take<kc_bf16>(KT * d);
        ws->dK_pre = c.take<kc_bf16>(KT * d);
        ws->delta = c.take<float>((size_t)ws->QB * H);
    }
    ws->dctx = c.take<kc_bf16>(NT * d);
    ws->du_ctx = c.take<kc_bf16>(NT * d);
    ws->losses = c.take<float>(NB);
    ws->loss_step = c.take<float>(1);
    ws->weight_total = c.take<float>(1);
    ws->clip_scale = c.take<float>(1);
    ws->grad_scratch = c.take<float>((size_t)D->block_size * d);
    ws->partials = c.take<double>(KC_GRAD_NORM_PARTIALS);
    ws->stats = c.take<tm_drafter_stats>(1);
}

int tm_drafter_ws_create(tm_drafter_ws *ws, const tr_dims *D)
{
    memset(ws, 0, sizeof *ws);
    ws->D = *D;
    ws->NT = D->n_seqs * D->seq_len;
    ws->QB = D->anchors * D->block_size;
    ws->NB = D->n_seqs * ws->QB;
    ws->TK = D->seq_len + ws->QB;
    ws->x = (kc_bf16 **)calloc((size_t)D->drafter_layers + 1, sizeof *ws->x);
    ws->layers = (tm_drafter_layer *)calloc((size_t)(D->drafter_layers > 0 ? D->drafter_layers : 1),
                                            sizeof *ws->layers);
    if (!ws->x || !ws->layers) {
        tm_drafter_ws_free(ws);
        tr_backend_set_error("out of host memory");
        return -1;
    }
    carver c = {nullptr, 0};
    drafter_ws_layout(ws, c);
    ws->bytes = c.used;
    if (device_alloc(&ws->block, ws->bytes, "the drafter's activations")) {
        tm_drafter_ws_free(ws);
        return -1;
    }
    c = carver{(char *)ws->block, 0};
    drafter_ws_layout(ws, c);
    return 0;
}

void tm_drafter_ws_free(tm_drafter_ws *ws)
{
    if (!ws)
        return;
    if (ws->block)
        cudaFree(ws->block);
    free(ws->x);
    free(ws->layers);
    memset(ws, 0, sizeof *ws);
}

/* ---- drafter forward (model.c tr_drafter_forward) ----------------------------------------------- */

int tm_drafter_forward(tm_drafter_ws *ws, const tm_drafter_params *p,
                       const tm_target_weights *target, kc_blas *blas, int buf, cudaStream_t s)
{
    const tr_dims *D = &ws->D;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = ws->NT, NB = ws->NB, QB = ws->QB, TK = ws->TK;
    const int A_n = D->anchors, bs = D->block_size, V = D->vocab;
    const tm_drafter_inputs *in = &ws->in[buf];
    const int32_t *predictions = in->ints, *tokens = in->ints + NT, *doc_ids = in->ints + 2 * NT;
    const int32_t *positions = in->ints + 3 * NT;
    const kc_bf16 *W = p->pbf;
    const float *P = p->master;

    /* context: RMSNorm(taps @ W_fc) */
    TR_KC(kc_matmul(blas, ws->u_ctx, KC_BF16, in->taps, W + p->fc, NULL, NT, D->n_taps * d, d, 0,
                    s));
    TR_KC(kc_rmsnorm_fwd(ws->ctx, ws->ctx_rstd, ws->u_ctx, P + p->ctx_norm, NT, d, D->eps, s));
    /* block inputs, labels, positions, masks */
    TR_TRY(op_drafter_blocks(ws->x[0], ws->block_pos, ws->labels, in->anchors, tokens, doc_ids,
                             positions, predictions, target->embed, P + p->mask_embed,
                             P + p->pos_embed, D->attention ? NULL : ws->ctx, S, T, A_n, bs, d,
                             V, s));
    if (D->attention) {
        TR_TRY(op_key_positions(ws->key_pos, positions, in->anchors, S, T, A_n, bs, s));
        for (int q = 0; q < S; q++)
            TR_KC(kc_mask_dflash_block(ws->masks + (size_t)q * QB * TK, in->anchors + q * A_n,
                                       NULL, doc_ids + (size_t)q * T, T, A_n, bs, D->window, s));
    }

    for (int l = 0; l < D->drafter_layers; l++) {
        const tm_layer_offsets *O = &p->layers[l];
        tm_drafter_layer *A = &ws->layers[l];
        const kc_bf16 *x_in = ws->x[l];
        if (D->attention) {
            TR_KC(kc_rmsnorm_fwd(A->h_attn, A->rstd_attn, x_in, P + O->attn_norm, NB, d, D->eps,
                                 s));
            TR_KC(kc_matmul(blas, A->q, KC_BF16, A->h_attn, W + O->wq, NULL, NB, d, d, 0, s));
            for (int q = 0; q < S; q++) {
                kc_bf16 *Ks = A->K + (size_t)q * TK * d, *Vs = A->V + (size_t)q * TK * d;
                const kc_bf16 *cs = ws->ctx + (size_t)q * T * d;
                const kc_bf16 *hs = A->h_attn + (size_t)q * QB * d;
                TR_KC(kc_matmul(blas, Ks, KC_BF16, cs, W + O->wk, NULL, T, d, d, 0, s));
                TR_KC(kc_matmul(blas, Ks + (size_t)T * d, KC_BF16, hs, W + O->wk, NULL, QB, d, d,
                                0, s));
                TR_KC(kc_matmul(blas, Vs, KC_BF16, cs, W + O->wv, NULL, T, d, d, 0, s));
                TR_KC(kc_matmul(blas, Vs + (size_t)T * d, KC_BF16, hs, W + O->wv, NULL, QB, d, d,
                                0, s));
            }
            TR_KC(kc_rope_fwd(A->q, A->q, ws->block_pos, NB, H, hd, D->rope_theta, s));
            TR_KC(kc_rope_fwd(A->K, A->K, ws->key_pos, S * TK, H, hd, D->rope_theta, s));
            for (int q = 0; q < S; q++)
                TR_KC(kc_attention_fwd(A->o + (size_t)q * QB * d, A->lse + (size_t)q * QB * H,
                                       A->q + (size_t)q * QB * d, A->K + (size_t)q * TK * d,
                                       A->V + (size_t)q * TK * d,
                                       ws->masks + (size_t)q * QB * TK, QB, TK, H, hd, s));
            TR_CUDA(cudaMemcpyAsync(A->x_mid, x_in, (size_t)NB * d * sizeof(kc_bf16),
                                    cudaMemcpyDeviceToDevice, s));
            TR_KC(kc_matmul(blas, A->x_mid, KC_BF16, A->o, W + O->wo, NULL, NB, d, d, 1, s));
            x_in = A->x_mid;
        }
        kc_bf16 *x_out = ws->x[l + 1];
        TR_KC(kc_rmsnorm_fwd(A->h_mlp, A->rstd_mlp, x_in, P + O->mlp_norm, NB, d, D->eps, s));
        TR_KC(kc_matmul(blas, A->g, KC_BF16, A->h_mlp, W + O->w_gate, NULL, NB, d, F, 0, s));
        TR_KC(kc_matmul(blas, A->u, KC_BF16, A->h_mlp, W + O->w_up, NULL, NB, d, F, 0, s));
        TR_KC(kc_swiglu_fwd(A->act, A->g, A->u, (size_t)NB * F, s));
        TR_CUDA(cudaMemcpyAsync(x_out, x_in, (size_t)NB * d * sizeof(kc_bf16),
                                cudaMemcpyDeviceToDevice, s));
        TR_KC(kc_matmul(blas, x_out, KC_BF16, A->act, W + O->w_down, NULL, NB, F, d, 1, s));
    }
    TR_KC(kc_rmsnorm_fwd(ws->h_final, ws->rstd_final, ws->x[D->drafter_layers], P + p->final_norm,
                         NB, d, D->eps, s));
    TR_KC(kc_matmul(blas, ws->logits, KC_F32, ws->h_final, target->lm_head, NULL, NB, d, V, 0, s));
    return 0;
}

int tm_drafter_loss(tm_drafter_ws *ws, int want_accuracy, int topk, cudaStream_t s)
{
    const int NB = ws->NB, V = ws->D.vocab;
    TR_KC(kc_cross_entropy_fwd(ws->loss_step, ws->losses, ws->logits, KC_F32, ws->labels, NULL, NB,
                               V, -1, s));
    TR_TRY(op_add_scalar(&ws->stats->loss_sum, ws->loss_step, s));
    if (want_accuracy) {
        /* hits1, n_valid, hitsk are adjacent */
        TR_CUDA(cudaMemsetAsync(&ws->stats->hits1, 0, 3 * sizeof(int32_t), s));
        TR_KC(kc_topk_hits(&ws->stats->hits1, &ws->stats->n_valid, ws->logits, KC_F32, ws->labels,
                           NB, V, 1, -1, s));
        TR_KC(kc_topk_hits(&ws->stats->hitsk, NULL, ws->logits, KC_F32, ws->labels, NB, V, topk,
                           -1, s));
    }
    return 0;
}

/* ---- drafter backward (model.c tr_drafter_backward) ---------------------------------------------- */

int tm_drafter_backward(tm_drafter_ws *ws, tm_drafter_params *p, const tm_target_weights *target,
                        kc_blas *blas, int buf, cudaStream_t s)
{
    const tr_dims *D = &ws->D;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = ws->NT, NB = ws->NB, QB = ws->QB, TK = ws->TK;
    const int A_n = D->anchors, bs = D->block_size, V = D->vocab;
    const tm_drafter_inputs *in = &ws->in[buf];
    const int32_t *doc_ids = in->ints + 2 * NT;
    const kc_bf16 *W = p->pbf;
    const float *P = p->master;
    float *G = p->grads;
    const size_t nbd = (size_t)NB * d * sizeof(kc_bf16);
    const size_t ktd = (size_t)S * TK * d * sizeof(kc_bf16);
    TR_CUDA(cudaMemsetAsync(G, 0, p->n * sizeof(float), s));

    /* loss -> logits -> final norm (the LM head is frozen) */
    TR_CUDA(cudaMemsetAsync(ws->dlogits, 0, (size_t)NB * V * sizeof(float), s));
    TR_KC(kc_cross_entropy_bwd(ws->dlogits, ws->logits, KC_F32, ws->labels, NULL, NB, V, -1, 1.0f,
                               ws->weight_total, s));
    TR_KC(kc_float_to_bf16(ws->dlogits_bf16, ws->dlogits, (size_t)NB * V, s));
    TR_KC(kc_matmul_nt(blas, ws->dh, KC_BF16, ws->dlogits_bf16, target->lm_head, NB, V, d, 0, s));
    TR_CUDA(cudaMemsetAsync(ws->dx, 0, nbd, s));
    TR_KC(kc_rmsnorm_bwd(ws->dx, G + p->final_norm, ws->dh, ws->x[D->drafter_layers],
                         P + p->final_norm, ws->rstd_final, NB, d, D->eps, s));
    TR_CUDA(cudaMemsetAsync(ws->dctx, 0, (size_t)NT * d * sizeof(kc_bf16), s));

    for (int l = D->drafter_layers - 1; l >= 0; l--) {
        const tm_layer_offsets *O = &p->layers[l];
        tm_drafter_layer *A = &ws->layers[l];
        const kc_bf16 *x_mlp_in = D->attention ? A->x_mid : ws->x[l];
        /* MLP: dx holds d(x_out) and becomes d(x_mlp_in) */
        TR_KC(kc_matmul_nt(blas, ws->dact, KC_BF16, ws->dx, W + O->w_down, NB, d, F, 0, s));
        TR_KC(kc_matmul_tn(blas, G + O->w_down, KC_F32, A->act, ws->dx, F, NB, d, 1, s));
        TR_CUDA(cudaMemsetAsync(ws->dg, 0, (size_t)NB * F * sizeof(kc_bf16), s));
        TR_CUDA(cudaMemsetAsync(ws->du, 0, (size_t)NB * F * sizeof(kc_bf16), s));
        TR_KC(kc_swiglu_bwd(ws->dg, ws->du, ws->dact, A->g, A->u, (size_t)NB * F, s));
        TR_KC(kc_matmul_nt(blas, ws->dh, KC_BF16, ws->dg, W + O->w_gate, NB, F, d, 0, s));
        TR_KC(kc_matmul_nt(blas, ws->dh, KC_BF16, ws->du, W + O->w_up, NB, F, d, 1, s));
        TR_KC(kc_matmul_tn(blas, G + O->w_gate, KC_F32, A->h_mlp, ws->dg, d, NB, F, 1, s));
        TR_KC(kc_matmul_tn(blas, G + O->w_up, KC_F32, A->h_mlp, ws->du, d, NB, F, 1, s));
        TR_KC(kc_rmsnorm_bwd(ws->dx, G + O->mlp_norm, ws->dh, x_mlp_in, P + O->mlp_norm,
                             A->rstd_mlp, NB, d, D->eps, s));
        if (!D->attention)
            continue;
        /* attention: x_mid = x_in + o @ W_o */
        TR_KC(kc_matmul_nt(blas, ws->dout, KC_BF16, ws->dx, W + O->wo, NB, d, d, 0, s));
        TR_KC(kc_matmul_tn(blas, G + O->wo, KC_F32, A->o, ws->dx, d, NB, d, 1, s));
        TR_CUDA(cudaMemsetAsync(ws->dq, 0, nbd, s));
        TR_CUDA(cudaMemsetAsync(ws->dK, 0, ktd, s));
        TR_CUDA(cudaMemsetAsync(ws->dV, 0, ktd, s));
        for (int q = 0; q < S; q++) {
            size_t qo = (size_t)q * QB * d, ko = (size_t)q * TK * d;
            TR_KC(kc_attention_bwd(ws->dq + qo, ws->dK + ko, ws->dV + ko, ws->dout + qo, A->q + qo,
                                   A->K + ko, A->V + ko, A->o + qo, A->lse + (size_t)q * QB * H,
                                   ws->masks + (size_t)q * QB * TK, ws->delta, QB, TK, H, hd, s));
        }
        TR_CUDA(cudaMemsetAsync(ws->dq_pre, 0, nbd, s));
        TR_CUDA(cudaMemsetAsync(ws->dK_pre, 0, ktd, s));
        TR_KC(kc_rope_bwd(ws->dq_pre, ws->dq, ws->block_pos, NB, H, hd, D->rope_theta, s));
        TR_KC(kc_rope_bwd(ws->dK_pre, ws->dK, ws->key_pos, S * TK, H, hd, D->rope_theta, s));
        TR_KC(kc_matmul_tn(blas, G + O->wq, KC_F32, A->h_attn, ws->dq_pre, d, NB, d, 1, s));
        TR_KC(kc_matmul_nt(blas, ws->dh, KC_BF16, ws->dq_pre, W + O->wq, NB, d, d, 0, s));
        for (int q = 0; q < S; q++) {
            /* keys and values: context rows from ctx, block rows from h_attn, shared W_k, W_v */
            const kc_bf16 *cs = ws->ctx + (size_t)q * T * d;
            const kc_bf16 *hs = A->h_attn + (size_t)q * QB * d;
            kc_bf16 *dcs = ws->dctx + (size_t)q * T * d, *dhs = ws->dh + (size_t)q * QB * d;
            const kc_bf16 *dKc = ws->dK_pre + (size_t)q * TK * d, *dKb = dKc + (size_t)T * d;
            const kc_bf16 *dVc = ws->dV + (size_t)q * TK * d, *dVb = dVc + (size_t)T * d;
            TR_KC(kc_matmul_tn(blas, G + O->wk, KC_F32, cs, dKc, d, T, d, 1, s));
            TR_KC(kc_matmul_tn(blas, G + O->wk, KC_F32, hs, dKb, d, QB, d, 1, s));
            TR_KC(kc_matmul_tn(blas, G + O->wv, KC_F32, cs, dVc, d, T, d, 1, s));
            TR_KC(kc_matmul_tn(blas, G + O->wv, KC_F32, hs, dVb, d, QB, d, 1, s));
            TR_KC(kc_matmul_nt(blas, dcs, KC_BF16, dKc, W + O->wk, T, d, d, 1, s));
            TR_KC(kc_matmul_nt(blas, dcs, KC_BF16, dVc, W + O->wv, T, d, d, 1, s));
            TR_KC(kc_matmul_nt(blas, dhs, KC_BF16, dKb, W + O->wk, QB, d, d, 1, s));
            TR_KC(kc_matmul_nt(blas, dhs, KC_BF16, dVb, W + O->wv, QB, d, d, 1, s));
        }
        TR_KC(kc_rmsnorm_bwd(ws->dx, G + O->attn_norm, ws->dh, ws->x[l], P + O->attn_norm,
                             A->rstd_attn, NB, d, D->eps, s));
    }

    /* block inputs: pos_embed, mask_embed, and (MLP-only) the context row before the anchor */
    TR_TRY(op_block_input_grads(G + p->pos_embed, G + p->mask_embed, ws->grad_scratch, ws->dx,
                                S * A_n, bs, d, s));
    if (!D->attention)
        TR_TRY(op_ctx_row_grads(ws->dctx, ws->dx, in->anchors, doc_ids, S, T, A_n, bs, d, s));
    /* context: ctx = RMSNorm(taps @ W_fc) */
    TR_CUDA(cudaMemsetAsync(ws->du_ctx, 0, (size_t)NT * d * sizeof(kc_bf16), s));
    TR_KC(kc_rmsnorm_bwd(ws->du_ctx, G + p->ctx_norm, ws->dctx, ws->u_ctx, P + p->ctx_norm,
                         ws->ctx_rstd, NT, d, D->eps, s));
    TR_KC(kc_matmul_tn(blas, G + p->fc, KC_F32, in->taps, ws->du_ctx, D->n_taps * d, NT, d, 1, s));
    return 0;
}

/* ---- optimizer ------------------------------------------------------------------------------------ */

int tm_drafter_optimizer(tm_drafter_params *p, tm_drafter_ws *ws, const tr_config *cfg,
                         int adam_step, cudaStream_t s)
{
    float *grads = p->grads;
    size_t n = p->n;
    /* the norm and the clip coefficient on the device; AdamW applies the coefficient */
    TR_KC(kc_clip_grad_norm(&grads, &n, 1, cfg->clip, 0, &ws->stats->grad_norm, ws->clip_scale,
                            ws->partials, s));
    TR_TRY(op_count_nonfinite(&ws->stats->skipped, ws->clip_scale, s));
    for (int i = 0; i < p->n_tensors; i++) {
        const tr_param_tensor *t = &p->tensors[i];
        TR_KC(kc_adamw_step(p->master + t->offset, p->grads + t->offset, p->adam_m + t->offset,
                            p->adam_v + t->offset, t->count, cfg->lr, cfg->beta1, cfg->beta2,
                            cfg->adam_eps, t->decay ? cfg->weight_decay : 0.0f, adam_step,
                            ws->clip_scale, p->pbf + t->offset, s));
    }
    return 0;
}
