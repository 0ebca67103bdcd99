/* test_drafter_grad.c: finite-difference check of the whole drafter (trainer/model.c):
 * forward + loss + backward on a tiny model, for the attention variant (with and without a
 * sliding window) and the MLP-only variant, two drafter layers each.
 *
 * For every parameter tensor, the element with the largest analytic gradient and 5 random
 * elements are perturbed by +-h (h = 1e-2) and the central difference of the mean loss
 *   numeric = (L(p + h) - L(p - h)) / 2h
 * is compared with the analytic gradient: pass when
 *   |numeric - analytic| <= 1e-4 + 1e-2 * |numeric|.
 * The forward runs in fp32 and the loss is reduced in double, so the rounding noise of the
 * difference quotient is a few 1e-6; gradients are up to ~0.3. Measured worst error over all
 * checks: 2.3e-5 (an injected bug, such as dropping the keys' gradient into the context or
 * using the wrong RoPE positions in the backward, gives errors of 4e-3 to 4e-2). Every tensor
 * must also receive a nonzero gradient, so that no part of the drafter is cut off from the loss.
 * The trainer's model is compiled into this test (the test rule links only libkernels and
 * libstagetrace). DRAFTER_GRAD_VERBOSE=1 prints each tensor's worst error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../trainer/model.h"
#include "../trainer/rng.h"
#include "kernels.h"

#define FD_STEP 1e-2f
#define FD_ATOL 1e-4
#define FD_RTOL 1e-2
#define RANDOM_PICKS 5

typedef struct fixture {
    tr_dims dims;
    tr_target_weights target;
    tr_drafter_params params, grads;
    tr_drafter_ws *ws;
    int32_t *anchors;
} fixture;

static void tiny_dims(tr_dims *D, int attention, int window)
{
    memset(D, 0, sizeof *D);
    D->vocab = 32;
    D->dim = 16;
    D->heads = 2;
    D->head_dim = 8;
    D->ffn = 24;
    D->target_layers = 2;
    D->n_taps = 2;
    D->taps[0] = 0;
    D->taps[1] = 1;
    D->drafter_layers = 2;
    D->attention = attention;
    D->block_size = 4;
    D->anchors = 3;
    D->window = window;
    D->seq_len = 24;
    D->n_seqs = 2;
    D->eps = 1e-6f;
    D->rope_theta = 10000.0f;
}

/* Two documents per sequence, positions restarting at each; the target's forward gives the
 * taps and the labels, as in the trainer. */
static void setup_fixture(fixture *f, int attention, int window)
{
    memset(f, 0, sizeof *f);
    tiny_dims(&f->dims, attention, window);
    const tr_dims *D = &f->dims;
    int T = D->seq_len, NT = D->n_seqs * T, d = D->dim;
    assert_int_equal(tr_target_weights_init(&f->target, D, 7), 0);
    assert_int_equal(tr_drafter_params_alloc(&f->params, D, NULL), 0);
    assert_int_equal(tr_drafter_params_alloc(&f->grads, D, NULL), 0);
    tr_drafter_params_init(&f->params, 11);
    /* move norms and embeddings off their initial values so that no gradient is special */
    uint64_t rng = 99;
    for (size_t i = 0; i < f->params.n_floats; i++)
        f->params.data[i] += 0.1f * tr_rng_normal(&rng);
    f->ws = tr_drafter_ws_create(D);
    assert_non_null(f->ws);
    tr_drafter_inputs *in = tr_drafter_ws_inputs(f->ws);
    for (int t = 0; t < NT; t++) {
        int s = t / T, i = t % T, cut = s == 0 ? 10 : 14;
        in->tokens[t] = (int32_t)tr_rng_below(&rng, (uint32_t)D->vocab);
        in->doc_ids[t] = 2 * s + (i >= cut);
        in->positions[t] = i >= cut ? i - cut : i;
    }
    tr_target_ws *tws = tr_target_ws_create(D);
    assert_non_null(tws);
    float *taps[2];
    for (int i = 0; i < 2; i++)
        taps[i] = malloc((size_t)NT * d * sizeof(float));
    assert_int_equal(tr_target_forward(&f->target, tws, in->tokens, in->doc_ids, in->positions,
                                       taps, in->predictions),
                     0);
    k_pack_taps(in->taps, (const float *const *)taps, 2, NT, d);
    for (int i = 0; i < 2; i++)
        free(taps[i]);
    tr_target_ws_free(tws);
    /* anchors: some at a document's start, some inside, one whose block crosses a boundary */
    static const int32_t anchors[6] = {1, 8, 15, 3, 12, 20};
    f->anchors = malloc(sizeof anchors);
    memcpy(f->anchors, anchors, sizeof anchors);
}

static void teardown_fixture(fixture *f)
{
    tr_drafter_ws_free(f->ws);
    tr_drafter_params_free(&f->params);
    tr_drafter_params_free(&f->grads);
    tr_target_weights_free(&f->target);
    free(f->anchors);
}

static double loss_at(fixture *f)
{
    tr_drafter_forward(f->ws, &f->params, &f->target, f->anchors);
    return tr_drafter_loss(f->ws, 4, NULL, NULL, NULL);
}

static void check_index(fixture *f, const tr_param_tensor *t, size_t i, double *worst,
                        double *worst_err)
{
    float *p = f->params.data + t->offset + i;
    float saved = *p;
    *p = saved + FD_STEP;
    double up = loss_at(f);
    *p = saved - FD_STEP;
    double down = loss_at(f);
    *p = saved;
    double numeric = (up - down) / (2.0 * FD_STEP);
    double analytic = f->grads.data[t->offset + i];
    double err = fabs(numeric - analytic);
    double excess = err - (FD_ATOL + FD_RTOL * fabs(numeric));
    if (err > *worst_err)
        *worst_err = err;
    if (excess > *worst)
        *worst = excess;
    if (excess > 0) {
        print_error("%s[%zu]: analytic %.6g, numeric %.6g (error %.3g)\n", t->name, i, analytic,
                    numeric, err);
        fail();
    }
}

static void check_drafter(int attention, int window)
{
    fixture f;
    setup_fixture(&f, attention, window);
    int n_valid = 0;
    tr_drafter_forward(f.ws, &f.params, &f.target, f.anchors);
    double loss = tr_drafter_loss(f.ws, 4, NULL, NULL, &n_valid);
    assert_true(isfinite(loss) && loss > 0.0);
    /* 6 blocks of 4 rows; the blocks at 8 (sequence 0, document cut at 10) and at 12
     * (sequence 1, cut at 14) lose their last 2 rows each */
    assert_int_equal(n_valid, 6 * 4 - 4);
    tr_drafter_backward(f.ws, &f.params, &f.target, &f.grads);

    /* backward overwrites (does not accumulate into) the gradient buffer */
    float *first = malloc(f.grads.n_floats * sizeof(float));
    memcpy(first, f.grads.data, f.grads.n_floats * sizeof(float));
    tr_drafter_backward(f.ws, &f.params, &f.target, &f.grads);
    assert_memory_equal(first, f.grads.data, f.grads.n_floats * sizeof(float));
    free(first);

    int expected_tensors = 5 + f.dims.drafter_layers * (attention ? 9 : 4);
    assert_int_equal(f.params.n_tensors, expected_tensors);
    uint64_t rng = 5;
    for (int k = 0; k < f.params.n_tensors; k++) {
        const tr_param_tensor *t = &f.params.tensors[k];
        size_t argmax = 0;
        float max_abs = 0.0f;
        for (size_t i = 0; i < t->count; i++)
            if (fabsf(f.grads.data[t->offset + i]) > max_abs) {
                max_abs = fabsf(f.grads.data[t->offset + i]);
                argmax = i;
            }
        if (!(max_abs > 0.0f)) {
            print_error("%s receives no gradient\n", t->name);
            fail();
        }
        double worst = -INFINITY, worst_err = 0.0;
        check_index(&f, t, argmax, &worst, &worst_err);
        for (int j = 0; j < RANDOM_PICKS; j++)
            check_index(&f, t, tr_rng_below(&rng, (uint32_t)t->count), &worst, &worst_err);
        if (getenv("DRAFTER_GRAD_VERBOSE"))
            printf("  %-20s max|g| %.3g  worst |numeric - analytic| %.2g (margin left %.2g)\n",
                   t->name, max_abs, worst_err, -worst);
    }
    teardown_fixture(&f);
}

static void test_attention_drafter(void **state)
{
    (void)state;
    check_drafter(1, 0);
}

static void test_attention_drafter_sliding_window(void **state)
{
    (void)state;
    check_drafter(1, 5);
}

static void test_mlp_only_drafter(void **state)
{
    (void)state;
    check_drafter(0, 0);
}

/* The layer stack really is layered: changing the second layer's output projection changes
 * the loss, and the first block row (the anchor token) gets the target's own embedding. */
static void test_block_inputs(void **state)
{
    (void)state;
    fixture f;
    setup_fixture(&f, 1, 0);
    loss_at(&f);
    tr_drafter_ws *ws = f.ws;
    const tr_dims *D = &f.dims;
    int d = D->dim;
    /* row 0 of block 0: embed[x[a]] + pos_embed[0]; row 1: mask_embed + pos_embed[1] */
    int a = f.anchors[0];
    int32_t tok = tr_drafter_ws_inputs(ws)->tokens[a];
    for (int i = 0; i < d; i++) {
        assert_float_equal(tr_drafter_ws_residual(ws, 0)[i], f.target.embed[(size_t)tok * d + i] + f.params.pos_embed[i],
                           1e-6);
        assert_float_equal(tr_drafter_ws_residual(ws, 0)[d + i], f.params.mask_embed[i] + f.params.pos_embed[d + i],
                           1e-6);
    }
    /* labels: the target's predictions at a + r, -1 across a document boundary */
    for (int r = 0; r < D->block_size; r++)
        assert_int_equal(tr_drafter_ws_labels(ws)[r], tr_drafter_ws_inputs(ws)->predictions[a + r]);
    assert_int_equal(tr_drafter_ws_labels(ws)[1 * D->block_size + 2], -1); /* anchor 8: 8+2 = 10 is doc 1 */
    /* block positions continue from the anchor's in-document position */
    assert_int_equal(tr_drafter_ws_block_pos(ws)[D->block_size + 3], tr_drafter_ws_inputs(ws)->positions[8] + 3);
    teardown_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_drafter),
        cmocka_unit_test(test_attention_drafter_sliding_window),
        cmocka_unit_test(test_mlp_only_drafter),
        cmocka_unit_test(test_block_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
