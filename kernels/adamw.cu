/* adamw.cu: the drafter's optimizer on the device (kernels/adamw.c): the AdamW step over fp32
 * master weights and moments (optionally writing the bf16 copy the matmuls use), and the
 * global gradient norm with its clip coefficient. The norm never visits the host: the
 * coefficient stays in a device scalar that the step reads, and a non-finite norm turns the
 * step into a no-op on the device. */
#include <math.h>

#include "cuda_common.cuh"

#define ADAMW_THREADS 256
#define NORM_THREADS 256
#define GRADS_PER_LAUNCH 64

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v,
                             __nv_bfloat16 *param_bf16, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bias1,
                             float bias2, const float *grad_scale)
{
    float scale = grad_scale ? *grad_scale : 1.0f;
    if (!isfinite(scale))
        return;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad_scale ? grad[i] * scale : grad[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float m_hat = mi / bias1;
        float v_hat = vi / bias2;
        float p = param[i];
        p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
        param[i] = p;
        if (param_bf16)
            param_bf16[i] = kc_f2bf(p);
    }
}

extern "C" int kc_adamw_step(float *param, const float *grad, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             int step, const float *grad_scale, kc_bf16 *param_bf16,
                             cudaStream_t stream)
{
    KC_REQUIRE(step >= 1, "kc_adamw_step: step=%d (the first step is 1)", step);
    if (n == 0)
        return K_OK;
    KC_REQUIRE(param && grad && m && v, "kc_adamw_step: NULL pointer");
    /* as the CPU: the bias corrections in double, rounded once */
    float bias1 = (float)(1.0 - pow((double)beta1, step));
    float bias2 = (float)(1.0 - pow((double)beta2, step));
    adamw_kernel<<<kc_grid_for(n, ADAMW_THREADS), ADAMW_THREADS, 0, stream>>>(
        param, grad, m, v, param_bf16, n, lr, beta1, beta2, eps, weight_decay, bias1, bias2,
        grad_scale);
    KC_LAUNCH_CHECK(stream, "adamw_kernel");
    return K_OK;
}

/* ---- gradient norm ----------------------------------------------------------------------------
 * Pass 1 (one launch per GRADS_PER_LAUNCH tensors): KC_GRAD_NORM_PARTIALS blocks, each summing
 * a fixed grid-stride slice of every tensor in double into partials[block] (added to it after
 * the first launch). Pass 2: one block sums the partials in a fixed order. Same inputs, same
 * bits: no atomics. */
struct grad_list {
    float *ptr[GRADS_PER_LAUNCH];
    size_t count[GRADS_PER_LAUNCH];
    int n;
};

__global__ void sum_squares_kernel(grad_list grads, double *partials, int accumulate)
{
    double acc = 0.0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int t = 0; t < grads.n; t++) {
        const float *g = grads.ptr[t];
        size_t count = grads.count[t];
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += stride) {
            double x = (double)g[i];
            acc += x * x;
        }
    }
    acc = kc_block_sum(acc);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = accumulate ? partials[blockIdx.x] + acc : acc;
}

__global__ void norm_finish_kernel(const double *partials, int n_partials, float max_norm,
                                   float *norm_out, float *scale_out)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partials; i += blockDim.x)
        acc += partials[i];
    acc = kc_block_sum(acc);
    if (threadIdx.x == 0) {
        float norm = (float)sqrt(acc);
        float scale = 1.0f;
        if (!isfinite(norm))
            scale = NAN;
        else if (max_norm > 0.0f && norm > max_norm)
            scale = (float)((double)max_norm / ((double)norm + 1e-6));
        *norm_out = norm;
        *scale_out = scale;
    }
}

__global__ void scale_grads_kernel(grad_list grads, const float *scale_ptr)
{
    float scale = *scale_ptr;
    if (!isfinite(scale) || scale == 1.0f)
        return;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int t = 0; t < grads.n; t++) {
        float *g = grads.ptr[t];
        size_t count = grads.count[t];
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += stride)
            g[i] *= scale;
    }
}

static int fill_list(grad_list *list, float *const *grads, const size_t *counts, int first,
                     int n_tensors, size_t *largest)
{
    list->n = n_tensors - first < GRADS_PER_LAUNCH ? n_tensors - first : GRADS_PER_LAUNCH;
    *largest = 0;
    for (int i = 0; i < GRADS_PER_LAUNCH; i++) {
        list->ptr[i] = i < list->n ? grads[first + i] : NULL;
        list->count[i] = i < list->n ? counts[first + i] : 0;
        KC_REQUIRE(i >= list->n || list->count[i] == 0 || list->ptr[i],
                   "kc_clip_grad_norm: grads[%d] is NULL", first + i);
        if (list->count[i] > *largest)
            *largest = list->count[i];
    }
    return K_OK;
}

extern "C" int kc_clip_grad_norm(float *const *grads, const size_t *counts, int n_tensors,
                                 float max_norm, int scale_in_place, float *norm,
                                 float *clip_scale, double *partials, cudaStream_t stream)
{
    KC_REQUIRE(n_tensors >= 0, "kc_clip_grad_norm: n_tensors=%d", n_tensors);
    KC_REQUIRE(norm && clip_scale && partials, "kc_clip_grad_norm: NULL norm/clip_scale/partials");
    KC_REQUIRE(n_tensors == 0 || (grads && counts), "kc_clip_grad_norm: NULL grads/counts");
    /* at least one launch, so that partials are written even with no tensor */
    for (int first = 0; first == 0 || first < n_tensors; first += GRADS_PER_LAUNCH) {
        grad_list list;
        size_t largest;
        int rc = fill_list(&list, grads, counts, first, n_tensors, &largest);
        if (rc != K_OK)
            return rc;
        sum_squares_kernel<<<KC_GRAD_NORM_PARTIALS, NORM_THREADS, 0, stream>>>(list, partials,
                                                                               first > 0);
        KC_LAUNCH_CHECK(stream, "sum_squares_kernel");
    }
    norm_finish_kernel<<<1, NORM_THREADS, 0, stream>>>(partials, KC_GRAD_NORM_PARTIALS, max_norm,
                                                       norm, clip_scale);
    KC_LAUNCH_CHECK(stream, "norm_finish_kernel");
    if (!scale_in_place)
        return K_OK;
    for (int first = 0; first < n_tensors; first += GRADS_PER_LAUNCH) {
        grad_list list;
        size_t largest;
        int rc = fill_list(&list, grads, counts, first, n_tensors, &largest);
        if (rc != K_OK)
            return rc;
        if (largest == 0)
            continue;
        scale_grads_kernel<<<kc_grid_for(largest, NORM_THREADS), NORM_THREADS, 0, stream>>>(
            list, clip_scale);
        KC_LAUNCH_CHECK(stream, "scale_grads_kernel");
    }
    return K_OK;
}
