/* backend.c: what every backend shares: the lookup by device, the per-thread error message,
 * and the anchor sampler (host-side, so that all backends draft the same blocks). */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>

#include "rng.h"

static _Thread_local char backend_error[256];
static struct st_trace *backend_trace;

void tr_backend_set_trace(struct st_trace *trace)
{
    backend_trace = trace;
}

struct st_trace *tr_backend_trace(void)
{
    return backend_trace;
}

const char *tr_backend_error(void)
{
    return backend_error[0] ? backend_error : "unknown backend error";
}

void tr_backend_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(backend_error, sizeof backend_error, fmt, ap);
    va_end(ap);
}

const tr_backend *tr_backend_find(int device, char *err, size_t err_size)
{
    if (device == TR_DEVICE_CPU)
        return &tr_backend_cpu;
#ifdef TR_HAVE_CUDA_BACKEND
    extern const tr_backend tr_backend_cuda;
    return &tr_backend_cuda;
#else
    snprintf(err, err_size,
             "--device cuda: this trainer was built without its CUDA backend; use --device cpu");
    return NULL;
#endif
}

void tr_sample_anchors(int32_t *anchors, uint64_t seed, uint64_t batch_index, int n_seqs,
                       int n_anchors, int seq_len, int block_size)
{
    uint64_t rng = tr_rng_stream(seed ^ 0xA5C4025ull, batch_index);
    uint32_t span = (uint32_t)(seq_len - block_size); /* anchors in 1..seq_len - block_size */
    for (int i = 0; i < n_seqs * n_anchors; i++)
        anchors[i] = 1 + (int32_t)tr_rng_below(&rng, span);
}
