/* model.c: target forward and drafter forward/loss/backward on the CPU kernels (see model.h
 * for the architecture). Every buffer of a forward and backward is carved once, at creation,
 * from one block per workspace, so a step allocates nothing. Backward ops of kernels/ add into
 * their gradients: buffers are zeroed (or overwritten by a non-accumulating matmul) before
 * each use, and residual streams simply keep accumulating. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rng.h"

#define LOGIT_CHUNK_ROWS 256 /* the target's LM head runs over this many rows at a time */

void tr_dims_from_config(tr_dims *dims, const tr_config *cfg)
{
    memset(dims, 0, sizeof *dims);
    dims->vocab = cfg->vocab;
    dims->dim = cfg->dim;
    dims->heads = cfg->heads;
    dims->head_dim = cfg->dim / cfg->heads;
    dims->ffn = cfg->ffn;
    dims->target_layers = cfg->target_layers;
    dims->n_taps = cfg->n_taps;
    memcpy(dims->taps, cfg->taps, sizeof dims->taps);
    dims->drafter_layers = cfg->drafter_layers;
    dims->attention = cfg->drafter_attention;
    dims->block_size = cfg->block_size;
    dims->anchors = cfg->anchors;
    dims->window = cfg->sliding_window;
    dims->seq_len = cfg->seq_len;
    dims->n_seqs = cfg->batch;
    dims->eps = 1e-6f;
    dims->rope_theta = 10000.0f;
}

/* ---- one-block allocation: a layout function runs twice, counting then carving ------------ */
typedef struct carver {
    int counting;
    size_t need;
    k_arena arena;
    void *block;
} carver;

static void *carve(carver *c, size_t bytes)
{
    if (c->counting) {
        c->need += bytes + 64;
        return NULL;
    }
    return k_arena_alloc(&c->arena, bytes ? bytes : 1);
}
#define CARVE_F(c, n) ((float *)carve((c), (size_t)(n) * sizeof(float)))
#define CARVE_I(c, n) ((int32_t *)carve((c), (size_t)(n) * sizeof(int32_t)))

static int carve_run(carver *c, void (*layout)(carver *, void *), void *obj)
{
    memset(c, 0, sizeof *c);
    c->counting = 1;
    layout(c, obj);
    c->block = calloc(1, c->need + 64);
    if (!c->block)
        return -1;
    k_arena_init(&c->arena, c->block, c->need + 64);
    c->counting = 0;
    layout(c, obj);
    return 0;
}

static void fill_normal(float *x, size_t n, float std, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = std * tr_rng_normal(rng);
}

static void fill_ones(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f;
}

/* ---- target ------------------------------------------------------------------------------ */

int tr_target_weights_init(tr_target_weights *w, const tr_dims *dims, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->dims = *dims;
    size_t d = (size_t)dims->dim, F = (size_t)dims->ffn, V = (size_t)dims->vocab;
    size_t per_layer = 2 * d + 4 * d * d + 3 * d * F;
    w->n_floats = V * d + (size_t)dims->target_layers * per_layer + d + d * V;
    w->data = malloc(w->n_floats * sizeof(float));
    w->layers = calloc((size_t)dims->target_layers, sizeof *w->layers);
    if (!w->data || !w->layers) {
        tr_target_weights_free(w);
        return -1;
    }
    uint64_t rng = tr_rng_stream(seed, 0x7A26E7);
    float *p = w->data;
    float in_d = 1.0f / sqrtf((float)d), in_f = 1.0f / sqrtf((float)F);
    w->embed = p, p += V * d;
    fill_normal(w->embed, V * d, 1.0f, &rng);
    for (int l = 0; l < dims->target_layers; l++) {
        tr_block_weights *L = &w->layers[l];
        L->attn_norm = p, p += d;
        L->wq = p, p += d * d;
        L->wk = p, p += d * d;
        L->wv = p, p += d * d;
        L->wo = p, p += d * d;
        L->mlp_norm = p, p += d;
        L->w_gate = p, p += d * F;
        L->w_up = p, p += d * F;
        L->w_down = p, p += F * d;
        fill_ones(L->attn_norm, d);
        fill_ones(L->mlp_norm, d);
        fill_normal(L->wq, d * d, in_d, &rng);
        fill_normal(L->wk, d * d, in_d, &rng);
        fill_normal(L->wv, d * d, in_d, &rng);
        fill_normal(L->wo, d * d, 0.5f * in_d, &rng);
        fill_normal(L->w_gate, d * F, in_d, &rng);
        fill_normal(L->w_up, d * F, in_d, &rng);
        fill_normal(L->w_down, F * d, 0.5f * in_f, &rng);
    }
    w->final_norm = p, p += d;
    fill_ones(w->final_norm, d);
    w->lm_head = p, p += d * V;
    fill_normal(w->lm_head, d * V, in_d, &rng);
    return 0;
}

void tr_target_weights_free(tr_target_weights *w)
{
    free(w->data);
    free(w->layers);
    memset(w, 0, sizeof *w);
}

struct tr_target_ws {
    tr_dims dims;
    carver mem;
    float *x, *h, *q, *k, *v, *o, *g, *u, *act, *logits;
    uint8_t *masks; /* [n_seqs, T, T] */
};

static void target_ws_layout(carver *c, void *obj)
{
    tr_target_ws *ws = obj;
    const tr_dims *D = &ws->dims;
    size_t NT = (size_t)D->n_seqs * D->seq_len, d = (size_t)D->dim, F = (size_t)D->ffn;
    size_t chunk = NT < LOGIT_CHUNK_ROWS ? NT : LOGIT_CHUNK_ROWS;
    ws->x = CARVE_F(c, NT * d);
    ws->h = CARVE_F(c, NT * d);
    ws->q = CARVE_F(c, NT * d);
    ws->k = CARVE_F(c, NT * d);
    ws->v = CARVE_F(c, NT * d);
    ws->o = CARVE_F(c, NT * d);
    ws->g = CARVE_F(c, NT * F);
    ws->u = CARVE_F(c, NT * F);
    ws->act = CARVE_F(c, NT * F);
    ws->logits = CARVE_F(c, chunk * (size_t)D->vocab);
    ws->masks = carve(c, (size_t)D->n_seqs * D->seq_len * D->seq_len);
}

tr_target_ws *tr_target_ws_create(const tr_dims *dims)
{
    tr_target_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->dims = *dims;
    if (carve_run(&ws->mem, target_ws_layout, ws)) {
        free(ws);
        return NULL;
    }
    return ws;
}

void tr_target_ws_free(tr_target_ws *ws)
{
    if (!ws)
        return;
    free(ws->mem.block);
    free(ws);
}

int tr_target_forward(const tr_target_weights *w, tr_target_ws *ws, const int32_t *tokens,
                      const int32_t *doc_ids, const int32_t *positions, float *const *taps,
                      int32_t *predictions)
{
    const tr_dims *D = &w->dims;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = S * T;
    int rc = k_embedding_fwd(ws->x, tokens, w->embed, NT, d, D->vocab);
    /* one mask per sequence, built once and shared by every layer */
    for (int s = 0; s < S; s++)
        k_mask_causal_doc(ws->masks + (size_t)s * T * T, doc_ids + (size_t)s * T, T);
    for (int l = 0; l < D->target_layers; l++) {
        const tr_block_weights *L = &w->layers[l];
        k_rmsnorm_fwd(ws->h, NULL, ws->x, L->attn_norm, NT, d, D->eps);
        k_matmul(ws->q, ws->h, L->wq, NULL, NT, d, d, 0);
        k_matmul(ws->k, ws->h, L->wk, NULL, NT, d, d, 0);
        k_matmul(ws->v, ws->h, L->wv, NULL, NT, d, d, 0);
        k_rope_fwd(ws->q, ws->q, positions, NT, H, hd, D->rope_theta);
        k_rope_fwd(ws->k, ws->k, positions, NT, H, hd, D->rope_theta);
        for (int s = 0; s < S; s++) {
            size_t off = (size_t)s * T * d;
            k_attention_fwd(ws->o + off, NULL, ws->q + off, ws->k + off, ws->v + off,
                            ws->masks + (size_t)s * T * T, T, T, H, hd);
        }
        k_matmul(ws->x, ws->o, L->wo, NULL, NT, d, d, 1);
        k_rmsnorm_fwd(ws->h, NULL, ws->x, L->mlp_norm, NT, d, D->eps);
        k_matmul(ws->g, ws->h, L->w_gate, NULL, NT, d, F, 0);
        k_matmul(ws->u, ws->h, L->w_up, NULL, NT, d, F, 0);
        k_swiglu_fwd(ws->act, ws->g, ws->u, (size_t)NT * F);
        k_matmul(ws->x, ws->act, L->w_down, NULL, NT, F, d, 1);
        for (int i = 0; i < D->n_taps; i++)
            if (D->taps[i] == l)
                memcpy(taps[i], ws->x, (size_t)NT * d * sizeof(float));
    }
    k_rmsnorm_fwd(ws->h, NULL, ws->x, w->final_norm, NT, d, D->eps);
    for (int r0 = 0; r0 < NT; r0 += LOGIT_CHUNK_ROWS) {
        int rows = NT - r0 < LOGIT_CHUNK_ROWS ? NT - r0 : LOGIT_CHUNK_ROWS;
        k_matmul(ws->logits, ws->h + (size_t)r0 * d, w->lm_head, NULL, rows, d, D->vocab, 0);
        k_argmax(predictions + r0, ws->logits, rows, D->vocab);
    }
    return rc == K_OK ? 0 : -1;
}

/* ---- drafter parameters ------------------------------------------------------------------ */

static float *add_tensor(tr_drafter_params *p, const char *name, int layer, size_t count,
                         int decay)
{
    tr_param_tensor *t = &p->tensors[p->n_tensors++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "layers.%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = p->n_floats;
    t->count = count;
    t->decay = decay;
    p->n_floats += count;
    return p->data ? p->data + t->offset : NULL;
}

static void drafter_params_layout(tr_drafter_params *p)
{
    const tr_dims *D = &p->dims;
    size_t d = (size_t)D->dim, F = (size_t)D->ffn;
    p->n_floats = 0;
    p->n_tensors = 0;
    p->fc = add_tensor(p, "fc", -1, (size_t)D->n_taps * d * d, 1);
    p->ctx_norm = add_tensor(p, "ctx_norm", -1, d, 0);
    p->mask_embed = add_tensor(p, "mask_embed", -1, d, 0);
    p->pos_embed = add_tensor(p, "pos_embed", -1, (size_t)D->block_size * d, 0);
    for (int l = 0; l < D->drafter_layers; l++) {
        tr_block_weights *L = &p->layers[l];
        memset(L, 0, sizeof *L);
        if (D->attention) {
            L->attn_norm = add_tensor(p, "attn_norm", l, d, 0);
            L->wq = add_tensor(p, "wq", l, d * d, 1);
            L->wk = add_tensor(p, "wk", l, d * d, 1);
            L->wv = add_tensor(p, "wv", l, d * d, 1);
            L->wo = add_tensor(p, "wo", l, d * d, 1);
        }
        L->mlp_norm = add_tensor(p, "mlp_norm", l, d, 0);
        L->w_gate = add_tensor(p, "w_gate", l, d * F, 1);
        L->w_up = add_tensor(p, "w_up", l, d * F, 1);
        L->w_down = add_tensor(p, "w_down", l, F * d, 1);
    }
    p->final_norm = add_tensor(p, "final_norm", -1, d, 0);
}

int tr_drafter_params_alloc(tr_drafter_params *p, const tr_dims *dims, float *data)
{
    memset(p, 0, sizeof *p);
    p->dims = *dims;
    p->layers = calloc((size_t)dims->drafter_layers, sizeof *p->layers);
    if (!p->layers)
        return -1;
    drafter_params_layout(p); /* count */
    size_t n = p->n_floats;
    if (!data) {
        data = calloc(n ? n : 1, sizeof(float));
        if (!data) {
            tr_drafter_params_free(p);
            return -1;
        }
        p->owns_data = 1;
    }
    p->data = data;
    drafter_params_layout(p); /* place */
    return 0;
}

void tr_drafter_params_init(tr_drafter_params *p, uint64_t seed)
{
    const tr_dims *D = &p->dims;
    size_t d = (size_t)D->dim, F = (size_t)D->ffn;
    uint64_t rng = tr_rng_stream(seed, 0xD2AF7E2);
    float in_d = 1.0f / sqrtf((float)d), in_f = 1.0f / sqrtf((float)F);
    fill_normal(p->fc, (size_t)D->n_taps * d * d, 1.0f / sqrtf((float)(D->n_taps * d)), &rng);
    fill_ones(p->ctx_norm, d);
    fill_normal(p->mask_embed, d, 1.0f, &rng);
    fill_normal(p->pos_embed, (size_t)D->block_size * d, 0.5f, &rng);
    for (int l = 0; l < D->drafter_layers; l++) {
        tr_block_weights *L = &p->layers[l];
        if (D->attention) {
            fill_ones(L->attn_norm, d);
            fill_normal(L->wq, d * d, in_d, &rng);
            fill_normal(L->wk, d * d, in_d, &rng);
            fill_normal(L->wv, d * d, in_d, &rng);
            fill_normal(L->wo, d * d, 0.5f * in_d, &rng);
        }
        fill_ones(L->mlp_norm, d);
        fill_normal(L->w_gate, d * F, in_d, &rng);
        fill_normal(L->w_up, d * F, in_d, &rng);
        fill_normal(L->w_down, F * d, 0.5f * in_f, &rng);
    }
    fill_ones(p->final_norm, d);
}

void tr_drafter_params_free(tr_drafter_params *p)
{
    if (p->owns_data)
        free(p->data);
    free(p->layers);
    memset(p, 0, sizeof *p);
}

/* ---- drafter workspace ------------------------------------------------------------------- */

typedef struct drafter_layer_acts {
    float *x_mid;                  /* [NB, d] residual after attention (attention only) */
    float *h_attn, *rstd_attn;     /* normed input of attention */
    float *q, *K, *V, *o, *lse;    /* q, K roped; K, V [S, TK, d] (context rows, block rows) */
    float *h_mlp, *rstd_mlp;
    float *g, *u, *act;            /* [NB, F] */
} drafter_layer_acts;

struct tr_drafter_ws {
    tr_dims dims;
    carver mem;
    int NT, NB, QB, TK;
    tr_drafter_inputs in;
    int32_t *anchors, *labels, *block_pos, *key_pos;
    uint8_t *masks;                /* [S, QB, TK] */
    float *u_ctx, *ctx_rstd, *ctx; /* [NT, d] */
    float **x;                     /* [L+1] x [NB, d]: the residual stream into each layer */
    drafter_layer_acts *layers;
    float *h_final, *rstd_final, *logits;
    /* backward scratch */
    float *dlogits, *dx, *dh, *dact, *dg, *du, *dout, *dq, *dq_pre, *dK, *dV, *dK_pre;
    float *dctx, *du_ctx;
};

static void drafter_ws_layout(carver *c, void *obj)
{
    tr_drafter_ws *ws = obj;
    const tr_dims *D = &ws->dims;
    size_t d = (size_t)D->dim, F = (size_t)D->ffn, V = (size_t)D->vocab, H = (size_t)D->heads;
    size_t NT = (size_t)ws->NT, NB = (size_t)ws->NB, KT = (size_t)D->n_seqs * ws->TK;
    int att = D->attention;
    ws->in.taps = CARVE_F(c, NT * D->n_taps * d);
    ws->in.tokens = CARVE_I(c, NT);
    ws->in.doc_ids = CARVE_I(c, NT);
    ws->in.positions = CARVE_I(c, NT);
    ws->in.predictions = CARVE_I(c, NT);
    ws->anchors = CARVE_I(c, (size_t)D->n_seqs * D->anchors);
    ws->labels = CARVE_I(c, NB);
    ws->block_pos = CARVE_I(c, NB);
    ws->key_pos = att ? CARVE_I(c, KT) : NULL;
    ws->masks = att ? carve(c, (size_t)D->n_seqs * ws->QB * ws->TK) : NULL;
    ws->u_ctx = CARVE_F(c, NT * d);
    ws->ctx_rstd = CARVE_F(c, NT);
    ws->ctx = CARVE_F(c, NT * d);
    for (int l = 0; l <= D->drafter_layers; l++) {
        float *x = CARVE_F(c, NB * d);
        if (!c->counting)
            ws->x[l] = x;
    }
    for (int l = 0; l < D->drafter_layers; l++) {
        drafter_layer_acts A = {0};
        if (att) {
            A.x_mid = CARVE_F(c, NB * d);
            A.h_attn = CARVE_F(c, NB * d);
            A.rstd_attn = CARVE_F(c, NB);
            A.q = CARVE_F(c, NB * d);
            A.K = CARVE_F(c, KT * d);
            A.V = CARVE_F(c, KT * d);
            A.o = CARVE_F(c, NB * d);
            A.lse = CARVE_F(c, NB * H);
        }
        A.h_mlp = CARVE_F(c, NB * d);
        A.rstd_mlp = CARVE_F(c, NB);
        A.g = CARVE_F(c, NB * F);
        A.u = CARVE_F(c, NB * F);
        A.act = CARVE_F(c, NB * F);
        if (!c->counting)
            ws->layers[l] = A;
    }
    ws->h_final = CARVE_F(c, NB * d);
    ws->rstd_final = CARVE_F(c, NB);
    ws->logits = CARVE_F(c, NB * V);
    ws->dlogits = CARVE_F(c, NB * V);
    ws->dx = CARVE_F(c, NB * d);
    ws->dh = CARVE_F(c, NB * d);
    ws->dact = CARVE_F(c, NB * F);
    ws->dg = CARVE_F(c, NB * F);
    ws->du = CARVE_F(c, NB * F);
    if (att) {
        ws->dout = CARVE_F(c, NB * d);
        ws->dq = CARVE_F(c, NB * d);
        ws->dq_pre = CARVE_F(c, NB * d);
        ws->dK = CARVE_F(c, KT * d);
        ws->dV = CARVE_F(c, KT * d);
        ws->dK_pre = CARVE_F(c, KT * d);
    }
    ws->dctx = CARVE_F(c, NT * d);
    ws->du_ctx = CARVE_F(c, NT * d);
}

tr_drafter_ws *tr_drafter_ws_create(const tr_dims *dims)
{
    tr_drafter_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->dims = *dims;
    ws->NT = dims->n_seqs * dims->seq_len;
    ws->QB = dims->anchors * dims->block_size;
    ws->NB = dims->n_seqs * ws->QB;
    ws->TK = dims->seq_len + ws->QB;
    ws->x = calloc((size_t)dims->drafter_layers + 1, sizeof *ws->x);
    ws->layers = calloc((size_t)dims->drafter_layers, sizeof *ws->layers);
    if (!ws->x || !ws->layers || carve_run(&ws->mem, drafter_ws_layout, ws)) {
        free(ws->x);
        free(ws->layers);
        free(ws);
        return NULL;
    }
    return ws;
}

void tr_drafter_ws_free(tr_drafter_ws *ws)
{
    if (!ws)
        return;
    free(ws->mem.block);
    free(ws->x);
    free(ws->layers);
    free(ws);
}

tr_drafter_inputs *tr_drafter_ws_inputs(tr_drafter_ws *ws)
{
    return &ws->in;
}

const float *tr_drafter_ws_residual(const tr_drafter_ws *ws, int layer) { return ws->x[layer]; }
const int32_t *tr_drafter_ws_labels(const tr_drafter_ws *ws) { return ws->labels; }
const int32_t *tr_drafter_ws_block_pos(const tr_drafter_ws *ws) { return ws->block_pos; }

static void axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---- drafter forward --------------------------------------------------------------------- */

/* Block inputs, labels, positions and masks for the sampled anchors. */
static void drafter_blocks(tr_drafter_ws *ws, const tr_drafter_params *p,
                           const tr_target_weights *target, const int32_t *anchors)
{
    const tr_dims *D = &ws->dims;
    const int T = D->seq_len, S = D->n_seqs, A = D->anchors, bs = D->block_size, d = D->dim;
    const tr_drafter_inputs *in = &ws->in;
    float *x0 = ws->x[0];
    memcpy(ws->anchors, anchors, (size_t)S * A * sizeof *anchors);
    for (int s = 0; s < S; s++) {
        const int32_t *doc = in->doc_ids + (size_t)s * T, *pos = in->positions + (size_t)s * T;
        for (int b = 0; b < A; b++) {
            int a = anchors[s * A + b];
            int32_t tok = in->tokens[(size_t)s * T + a];
            if (tok < 0 || tok >= D->vocab)
                tok = 0;
            int ctx_row = D->attention || a < 1 || doc[a - 1] != doc[a] ? -1 : s * T + a - 1;
            for (int r = 0; r < bs; r++) {
                size_t row = ((size_t)s * A + b) * bs + r;
                float *xr = x0 + row * d;
                const float *src = r == 0 ? target->embed + (size_t)tok * d : p->mask_embed;
                k_add(xr, src, p->pos_embed + (size_t)r * d, (size_t)d);
                if (ctx_row >= 0)
                    axpy(xr, 1.0f, ws->ctx + (size_t)ctx_row * d, d);
                ws->block_pos[row] = pos[a] + r;
                ws->labels[row] =
                    doc[a + r] == doc[a] ? in->predictions[(size_t)s * T + a + r] : -1;
            }
        }
        if (D->attention) {
            int32_t *kp = ws->key_pos + (size_t)s * ws->TK;
            memcpy(kp, pos, (size_t)T * sizeof *kp);
            memcpy(kp + T, ws->block_pos + (size_t)s * ws->QB, (size_t)ws->QB * sizeof *kp);
            k_mask_dflash_block(ws->masks + (size_t)s * ws->QB * ws->TK, anchors + s * A, NULL,
                                doc, T, A, bs, D->window);
        }
    }
}

void tr_drafter_forward(tr_drafter_ws *ws, const tr_drafter_params *p,
                        const tr_target_weights *target, const int32_t *anchors)
{
    const tr_dims *D = &ws->dims;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = ws->NT, NB = ws->NB, QB = ws->QB, TK = ws->TK;
    /* context: fc over the concatenated taps, then RMSNorm */
    k_matmul(ws->u_ctx, ws->in.taps, p->fc, NULL, NT, D->n_taps * d, d, 0);
    k_rmsnorm_fwd(ws->ctx, ws->ctx_rstd, ws->u_ctx, p->ctx_norm, NT, d, D->eps);
    drafter_blocks(ws, p, target, anchors);

    for (int l = 0; l < D->drafter_layers; l++) {
        const tr_block_weights *L = &p->layers[l];
        drafter_layer_acts *A = &ws->layers[l];
        const float *x_in = ws->x[l];
        if (D->attention) {
            k_rmsnorm_fwd(A->h_attn, A->rstd_attn, x_in, L->attn_norm, NB, d, D->eps);
            k_matmul(A->q, A->h_attn, L->wq, NULL, NB, d, d, 0);
            for (int s = 0; s < S; s++) {
                float *Ks = A->K + (size_t)s * TK * d, *Vs = A->V + (size_t)s * TK * d;
                const float *cs = ws->ctx + (size_t)s * T * d;
                const float *hs = A->h_attn + (size_t)s * QB * d;
                k_matmul(Ks, cs, L->wk, NULL, T, d, d, 0);
                k_matmul(Ks + (size_t)T * d, hs, L->wk, NULL, QB, d, d, 0);
                k_matmul(Vs, cs, L->wv, NULL, T, d, d, 0);
                k_matmul(Vs + (size_t)T * d, hs, L->wv, NULL, QB, d, d, 0);
            }
            k_rope_fwd(A->q, A->q, ws->block_pos, NB, H, hd, D->rope_theta);
            k_rope_fwd(A->K, A->K, ws->key_pos, S * TK, H, hd, D->rope_theta);
            for (int s = 0; s < S; s++)
                k_attention_fwd(A->o + (size_t)s * QB * d, A->lse + (size_t)s * QB * H,
                                A->q + (size_t)s * QB * d, A->K + (size_t)s * TK * d,
                                A->V + (size_t)s * TK * d, ws->masks + (size_t)s * QB * TK, QB,
                                TK, H, hd);
            memcpy(A->x_mid, x_in, (size_t)NB * d * sizeof(float));
            k_matmul(A->x_mid, A->o, L->wo, NULL, NB, d, d, 1);
            x_in = A->x_mid;
        }
        float *x_out = ws->x[l + 1];
        k_rmsnorm_fwd(A->h_mlp, A->rstd_mlp, x_in, L->mlp_norm, NB, d, D->eps);
        k_matmul(A->g, A->h_mlp, L->w_gate, NULL, NB, d, F, 0);
        k_matmul(A->u, A->h_mlp, L->w_up, NULL, NB, d, F, 0);
        k_swiglu_fwd(A->act, A->g, A->u, (size_t)NB * F);
        memcpy(x_out, x_in, (size_t)NB * d * sizeof(float));
        k_matmul(x_out, A->act, L->w_down, NULL, NB, F, d, 1);
    }
    k_rmsnorm_fwd(ws->h_final, ws->rstd_final, ws->x[D->drafter_layers], p->final_norm, NB, d,
                  D->eps);
    k_matmul(ws->logits, ws->h_final, target->lm_head, NULL, NB, d, D->vocab, 0);
}

float tr_drafter_loss(tr_drafter_ws *ws, int topk, float *accuracy, float *topk_accuracy,
                      int *n_valid)
{
    const int V = ws->dims.vocab, NB = ws->NB;
    float loss = k_cross_entropy_fwd(NULL, ws->logits, ws->labels, NULL, NB, V, -1);
    int valid = 0;
    if (accuracy || topk_accuracy || n_valid) {
        int hits1 = k_topk_hits(ws->logits, ws->labels, NB, V, 1, -1, &valid);
        if (accuracy)
            *accuracy = valid ? (float)hits1 / valid : 0.0f;
        if (topk_accuracy) {
            int hitsk = k_topk_hits(ws->logits, ws->labels, NB, V, topk, -1, NULL);
            *topk_accuracy = valid ? (float)hitsk / valid : 0.0f;
        }
        if (n_valid)
            *n_valid = valid;
    }
    return loss;
}

/* ---- drafter backward -------------------------------------------------------------------- */

void tr_drafter_backward(tr_drafter_ws *ws, const tr_drafter_params *p,
                         const tr_target_weights *target, tr_drafter_params *grads)
{
    const tr_dims *D = &ws->dims;
    const int T = D->seq_len, S = D->n_seqs, d = D->dim, F = D->ffn, H = D->heads;
    const int hd = D->head_dim, NT = ws->NT, NB = ws->NB, QB = ws->QB, TK = ws->TK;
    const int A_n = D->anchors, bs = D->block_size, V = D->vocab;
    const size_t nbd = (size_t)NB * d * sizeof(float);
    memset(grads->data, 0, grads->n_floats * sizeof(float));

    /* loss -> logits -> final norm (the LM head is frozen: no gradient for it) */
    memset(ws->dlogits, 0, (size_t)NB * V * sizeof(float));
    k_cross_entropy_bwd(ws->dlogits, ws->logits, ws->labels, NULL, NB, V, -1, 1.0f);
    k_matmul_nt(ws->dh, ws->dlogits, target->lm_head, NB, V, d, 0);
    memset(ws->dx, 0, nbd);
    k_rmsnorm_bwd(ws->dx, grads->final_norm, ws->dh, ws->x[D->drafter_layers], p->final_norm,
                  ws->rstd_final, NB, d, D->eps);
    memset(ws->dctx, 0, (size_t)NT * d * sizeof(float));

    for (int l = D->drafter_layers - 1; l >= 0; l--) {
        const tr_block_weights *L = &p->layers[l];
        tr_block_weights *G = &grads->layers[l];
        drafter_layer_acts *A = &ws->layers[l];
        const float *x_mlp_in = D->attention ? A->x_mid : ws->x[l];
        /* MLP: x_out = x_mlp_in + act @ W_down; dx holds d(x_out) and becomes d(x_mlp_in) */
        k_matmul_nt(ws->dact, ws->dx, L->w_down, NB, d, F, 0);
        k_matmul_tn(G->w_down, A->act, ws->dx, F, NB, d, 1);
        memset(ws->dg, 0, (size_t)NB * F * sizeof(float));
        memset(ws->du, 0, (size_t)NB * F * sizeof(float));
        k_swiglu_bwd(ws->dg, ws->du, ws->dact, A->g, A->u, (size_t)NB * F);
        k_matmul_nt(ws->dh, ws->dg, L->w_gate, NB, F, d, 0);
        k_matmul_nt(ws->dh, ws->du, L->w_up, NB, F, d, 1);
        k_matmul_tn(G->w_gate, A->h_mlp, ws->dg, d, NB, F, 1);
        k_matmul_tn(G->w_up, A->h_mlp, ws->du, d, NB, F, 1);
        k_rmsnorm_bwd(ws->dx, G->mlp_norm, ws->dh, x_mlp_in, L->mlp_norm, A->rstd_mlp, NB, d,
                      D->eps);
        if (!D->attention)
            continue;
        /* attention: x_mid = x_in + o @ W_o */
        k_matmul_nt(ws->dout, ws->dx, L->wo, NB, d, d, 0);
        k_matmul_tn(G->wo, A->o, ws->dx, d, NB, d, 1);
        memset(ws->dq, 0, nbd);
        memset(ws->dK, 0, (size_t)S * TK * d * sizeof(float));
        memset(ws->dV, 0, (size_t)S * TK * d * sizeof(float));
        for (int s = 0; s < S; s++) {
            size_t qo = (size_t)s * QB * d, ko = (size_t)s * TK * d;
            k_attention_bwd(ws->dq + qo, ws->dK + ko, ws->dV + ko, ws->dout + qo, A->q + qo,
                            A->K + ko, A->V + ko, A->o + qo, A->lse + (size_t)s * QB * H,
                            ws->masks + (size_t)s * QB * TK, QB, TK, H, hd);
        }
        memset(ws->dq_pre, 0, nbd);
        memset(ws->dK_pre, 0, (size_t)S * TK * d * sizeof(float));
        k_rope_bwd(ws->dq_pre, ws->dq, ws->block_pos, NB, H, hd, D->rope_theta);
        k_rope_bwd(ws->dK_pre, ws->dK, ws->key_pos, S * TK, H, hd, D->rope_theta);
        k_matmul_tn(G->wq, A->h_attn, ws->dq_pre, d, NB, d, 1);
        k_matmul_nt(ws->dh, ws->dq_pre, L->wq, NB, d, d, 0);
        for (int s = 0; s < S; s++) {
            /* keys and values: context rows from ctx, block rows from h_attn, shared W_k, W_v */
            const float *cs = ws->ctx + (size_t)s * T * d;
            const float *hs = A->h_attn + (size_t)s * QB * d;
            float *dcs = ws->dctx + (size_t)s * T * d, *dhs = ws->dh + (size_t)s * QB * d;
            const float *dKc = ws->dK_pre + (size_t)s * TK * d, *dKb = dKc + (size_t)T * d;
            const float *dVc = ws->dV + (size_t)s * TK * d, *dVb = dVc + (size_t)T * d;
            k_matmul_tn(G->wk, cs, dKc, d, T, d, 1);
            k_matmul_tn(G->wk, hs, dKb, d, QB, d, 1);
            k_matmul_tn(G->wv, cs, dVc, d, T, d, 1);
            k_matmul_tn(G->wv, hs, dVb, d, QB, d, 1);
            k_matmul_nt(dcs, dKc, L->wk, T, d, d, 1);
            k_matmul_nt(dcs, dVc, L->wv, T, d, d, 1);
            k_matmul_nt(dhs, dKb, L->wk, QB, d, d, 1);
            k_matmul_nt(dhs, dVb, L->wv, QB, d, d, 1);
        }
        k_rmsnorm_bwd(ws->dx, G->attn_norm, ws->dh, ws->x[l], L->attn_norm, A->rstd_attn, NB, d,
                      D->eps);
    }

    /* block inputs: pos_embed, mask_embed, and (MLP-only) the context row before the anchor */
    for (int s = 0; s < S; s++) {
        const int32_t *doc = ws->in.doc_ids + (size_t)s * T;
        for (int b = 0; b < A_n; b++) {
            int a = ws->anchors[s * A_n + b];
            int ctx_row = D->attention || a < 1 || doc[a - 1] != doc[a] ? -1 : s * T + a - 1;
            for (int r = 0; r < bs; r++) {
                const float *dxr = ws->dx + (((size_t)s * A_n + b) * bs + r) * d;
                axpy(grads->pos_embed + (size_t)r * d, 1.0f, dxr, d);
                if (r > 0)
                    axpy(grads->mask_embed, 1.0f, dxr, d);
                if (ctx_row >= 0)
                    axpy(ws->dctx + (size_t)ctx_row * d, 1.0f, dxr, d);
            }
        }
    }
    /* context: ctx = RMSNorm(taps @ W_fc) */
    memset(ws->du_ctx, 0, (size_t)NT * d * sizeof(float));
    k_rmsnorm_bwd(ws->du_ctx, grads->ctx_norm, ws->dctx, ws->u_ctx, p->ctx_norm, ws->ctx_rstd,
                  NT, d, D->eps);
    k_matmul_tn(grads->fc, ws->in.taps, ws->du_ctx, D->n_taps * d, NT, d, 1);
}
