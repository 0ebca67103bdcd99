/* backend_cuda.cu: the trainer's CUDA backend (backend.h), one CUDA device per role thread.
 *
 * Devices. --target-gpus and --drafter-gpus name CUDA devices; the sets may overlap (both
 * roles on one GPU). Each device used gets one copy of the frozen target weights (bf16,
 * initialised on the device with model.c's seeded draws): all of them where a target runs,
 * only the embedding and LM head (which the drafter uses) where only drafters run.
 *
 * Streams, events and buffers, per role (every stream non-blocking, named in NVTX):
 *  target[g]  `target<g>.compute`: the forward; `target<g>.post` (--postprocess async): pack +
 *             D2H. One or two staging buffers (sync / async), each with the batch in pinned
 *             host memory and on the device, fp32 taps, predictions, and the events
 *             fwd_start / fwd_done recorded around the forward. A device counter of tokens
 *             outside the vocabulary rides along the copy every --log-every forwards.
 *  drafter[d] `drafter<d>.compute`: forward, loss, backward, NCCL all-reduce, optimizer;
 *             `drafter<d>.h2d`: the copy of the next queue item into the other of two device
 *             input buffers, so the copy of step k+1 overlaps the compute of step k (events
 *             ready[b] on the copy stream, inputs_free[b] after the backward that last read b).
 *  slots      the hidden-state queue's items are pinned host memory (cudaHostAllocPortable:
 *             written by target devices, read by drafter devices).
 *
 * Host waits per step (each its own `sync` stage inside the pipeline's stage, so the trace
 * shows them; everything else only enqueues work and returns, so a stage that launches GPU
 * work ends when the launches are issued):
 *  target, sync postprocess (target thread): postprocess { pack launched on the compute
 *     stream ; event_sync (fwd_done: the rest of the forward's GPU time) ; d2h { copies into
 *     the pinned slot ; stream_sync (pack + copies) } }: the copy is on the critical path.
 *  target, async (post thread): the same on the post stream, which first waits for fwd_done
 *     (cudaStreamWaitEvent); the target thread only launches forwards, into two staging
 *     buffers in turn, so the next forward is queued while the last one is packed and copied.
 *  drafter: h2d { copies ; stream_sync (copy stream: the copy, and the release of the buffer
 *     by the backward two steps back) }; on log steps only (--log-every, and the last step),
 *     optimizer { ... d2h { one copy of the batched scalars: loss sum, metrics, grad norm,
 *     skips ; stream_sync } }. No other device-to-host read.
 * Host waits: the drafters' poll (cudaEventQuery / cudaStreamQuery, then sleeps growing from 20
 * to 100 us) so that they can be abandoned when the run is aborted (a collective whose peer
 * stopped would otherwise never complete); the target's and post threads' block in one
 * cudaEventSynchronize / cudaStreamSynchronize (their streams hold no collective). Each poll is
 * two CUDA API calls in the trace's GPU activity, so a wait polls as few times as it can.
 *
 * Drafter gradients: all-reduced (ncclAvg, in place) over the flat fp32 gradient in buckets of
 * ALLREDUCE_BUCKET_FLOATS, in one NCCL group, on the compute stream. One communicator per
 * drafter thread, all created in-process by ncclCommInitAll at open. A single drafter skips
 * it (the pipeline does not call it). Drafters that all share one GPU (--drafter-gpus 0,0:
 * NCCL cannot pair two ranks on one device) all-reduce without NCCL instead, on that device
 * (shared_allreduce): each records an event after its backward and meets the others at a host
 * barrier; each stream then waits for every drafter's event and averages its slice of the
 * gradient (every drafter's, in rank order, so all get the same bits) into one shared buffer;
 * a second barrier and events later, each stream copies the whole mean into its own gradient.
 * Drafters on several GPUs with two on one are refused at open. At shutdown, when every drafter issued the same number
 * of collectives, the streams are drained and the communicators destroyed; otherwise (a run
 * stopped between two drafters' collectives) they are aborted first.
 *
 * GPU time of the target: fwd_start/fwd_done give each forward's time on the device; after
 * TIMING_WARMUP forwards their sum over the span they cover is the target stream's busy
 * fraction, printed when the target is destroyed and sampled per forward in the counter
 * `target_gpu_ms`. --profile-steps: cudaProfilerStart/Stop on every device used. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define TR_WITH_NCCL 1
#else
#define TR_WITH_NCCL 0
#endif

#include "check_cuda.h"
#include "model_cuda.h"
extern "C" {
#include "queue.h"
}
#include "ops_cuda.h"
#include "stagetrace.h"

#define ALLREDUCE_BUCKET_FLOATS (32u << 20) /* 128 MiB of fp32 gradient per NCCL call */
#define TIMING_WARMUP 2                     /* forwards left out of the busy fraction */
#define POLL_SPINS 200                      /* queries before a host wait starts sleeping */
#define POLL_SLEEP_NS 20000L                /* the first sleep; each next one doubles, */
#define POLL_SLEEP_MAX_NS 100000L           /* up to this: a wait ends at most 100 us late */
#define QUIESCE_TIMEOUT_S 60.0

/* ---- context ------------------------------------------------------------------------------------ */

typedef struct device_slot {
    int device;
    int has_target;
    int ready;
    tm_target_weights w;
} device_slot;

struct tr_context {
    const tr_config *cfg;
    tr_dims D;
    int n_slots;
    device_slot slots[2 * TR_MAX_DEVICES];
    /* trace */
    int tracing;
    st_stage s_stream_sync, s_event_sync, s_d2h;
    st_counter c_target_gpu_ms;
    /* drafters and their communicators */
    int n_drafters;
    tr_drafter **drafters; /* [n_drafters], set by drafter_create */
#if TR_WITH_NCCL
    ncclComm_t *comms;     /* [n_drafters] when n_drafters > 1 on distinct devices */
#endif
    /* drafters all on one device (shared_allreduce): its rendezvous and the mean */
    int shared_device;     /* 1 when n_drafters > 1 all share drafter_devices[0]: barrier made */
    tr_barrier barrier;
    float *mean;           /* device [params.n] on that device, made by the first drafter */
    std::atomic<int> aborted;
    pthread_mutex_t lock;
    int quiesced;
};

struct target_staging {
    float *taps[TR_MAX_TAPS];  /* device fp32 [NT, d] each */
    int32_t *batch_dev;        /* device [3 * NT]: tokens, doc_ids, positions */
    int32_t *predictions;      /* device [NT] */
    int32_t *batch_host;       /* pinned [3 * NT] */
    uint64_t batch_index;
    cudaEvent_t fwd_start, fwd_done;
};

struct tr_target {
    tr_context *ctx;
    int index, device, n_staging;
    cudaStream_t stream, post;
    kc_blas *blas;
    const tm_target_weights *w;
    tm_target_ws ws;
    target_staging st[2];
    kc_bf16 *packed;           /* device [NT, n_taps * d]: the packed taps before the D2H */
    int32_t *n_bad;            /* device [1]: tokens outside the vocabulary, all forwards */
    void *dev_block;
    int32_t *pinned;           /* batch_host of both staging buffers + bad_host */
    int32_t *bad_host;
    /* GPU time of the forwards */
    long n_launched, n_done;
    cudaEvent_t timing_ref;    /* recorded after forward TIMING_WARMUP */
    double busy_ms, span_ms;
    long n_timed;
};

struct tr_drafter {
    tr_context *ctx;
    int rank, device;
    cudaStream_t stream, copy;
    kc_blas *blas;
    const tm_target_weights *w;
    tm_drafter_params params;
    tm_drafter_ws ws;
    cudaEvent_t ready[2], inputs_free[2];
    int32_t *anchors_host;     /* pinned [2][S * A] */
    tm_drafter_stats *stats_host; /* pinned */
    long step;                 /* steps begun (1 for the first) */
    int buf;                   /* input buffer of the current step */
    int adam_step, metrics_pending;
    std::atomic<long> n_collectives;
    cudaEvent_t grad_done, mean_done; /* shared_allreduce's, when the drafters share a GPU */
#if TR_WITH_NCCL
    ncclComm_t comm;
#endif
};

static size_t rows_of(const tr_dims *D)
{
    return (size_t)D->n_seqs * D->seq_len;
}

static size_t align_up(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

#if TR_WITH_NCCL
static int nccl_fail(ncclResult_t r, const char *what, const char *file, int line)
{
    const char *last = ncclGetLastError(NULL);
    tr_backend_set_error("%s:%d: %.*s: %s%s%s", file, line, (int)strcspn(what, "("), what,
                         ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return -1;
}
#define TR_NCCL(call)                                                                          \
    do {                                                                                       \
        ncclResult_t tr_nr_ = (call);                                                          \
        if (tr_nr_ != ncclSuccess)                                                             \
            return nccl_fail(tr_nr_, #call, __FILE__, __LINE__);                               \
    } while (0)
#endif

/* For the void functions (destroy paths): report and go on. */
#define TR_WARN(call)                                                                          \
    do {                                                                                       \
        cudaError_t tr_err_ = (call);                                                          \
        if (tr_err_ != cudaSuccess)                                                            \
            fprintf(stderr, "trainer: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(tr_err_));                                              \
    } while (0)

static void stage_begin(const tr_context *ctx, st_stage s)
{
    if (ctx->tracing)
        st_begin(s);
}

static void stage_end(const tr_context *ctx, st_stage s)
{
    if (ctx->tracing)
        st_end(s);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void poll_pause(int spins)
{
    if (spins < POLL_SPINS)
        return;
    long ns = POLL_SLEEP_NS;
    for (int i = POLL_SPINS; i < spins && ns < POLL_SLEEP_MAX_NS; i++)
        ns *= 2;
    struct timespec ts = {0, ns < POLL_SLEEP_MAX_NS ? ns : POLL_SLEEP_MAX_NS};
    nanosleep(&ts, NULL);
}

/* Host waits. abortable: give up (-1) once the run is aborted (drafters only: their streams
 * hold collectives that a stopped peer never joins). */
static int wait_event(tr_context *ctx, cudaEvent_t ev, int abortable)
{
    if (!abortable) {
        cudaError_t e = cudaEventSynchronize(ev);
        return e == cudaSuccess ? 0 : tr_cuda_fail(e, "cudaEventSynchronize", __FILE__, __LINE__);
    }
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return 0;
        if (e == cudaErrorNotReady)
            (void)cudaGetLastError(); /* not an error: do not leave it for a launch check */
        else
            return tr_cuda_fail(e, "cudaEventQuery", __FILE__, __LINE__);
        if (abortable && ctx->aborted.load()) {
            tr_backend_set_error("aborted while waiting for the device");
            return -1;
        }
        poll_pause(spins);
    }
}

static int wait_stream(tr_context *ctx, cudaStream_t s, int abortable)
{
    if (!abortable) {
        cudaError_t e = cudaStreamSynchronize(s);
        return e == cudaSuccess ? 0 : tr_cuda_fail(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    }
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return 0;
        if (e == cudaErrorNotReady)
            (void)cudaGetLastError(); /* not an error: do not leave it for a launch check */
        else
            return tr_cuda_fail(e, "cudaStreamQuery", __FILE__, __LINE__);
        if (abortable && ctx->aborted.load()) {
            tr_backend_set_error("aborted while waiting for the device");
            return -1;
        }
        poll_pause(spins);
    }
}

/* A stream sync as its own `stream_sync` stage. */
static int stream_sync_stage(tr_context *ctx, cudaStream_t s, int abortable)
{
    stage_begin(ctx, ctx->s_stream_sync);
    int rc = wait_stream(ctx, s, abortable);
    stage_end(ctx, ctx->s_stream_sync);
    return rc;
}

static const tm_target_weights *weights_on(tr_context *ctx, int device)
{
    for (int i = 0; i < ctx->n_slots; i++)
        if (ctx->slots[i].device == device && ctx->slots[i].ready)
            return &ctx->slots[i].w;
    return NULL;
}

/* ---- shutdown: drain the streams, retire the communicators (before any cudaFree) ---------- */

static void quiesce(tr_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    if (ctx->quiesced) {
        pthread_mutex_unlock(&ctx->lock);
        return;
    }
    ctx->quiesced = 1;
    long first = -1;
    int matched = 1;
    for (int r = 0; r < ctx->n_drafters; r++) {
        tr_drafter *d = ctx->drafters ? ctx->drafters[r] : NULL;
        long n = d ? d->n_collectives.load() : 0;
        if (first < 0)
            first = n;
        else if (n != first)
            matched = 0;
    }
#if TR_WITH_NCCL
    int aborted_comms = 0;
    if (ctx->comms && !matched) {
        /* a drafter stopped before the others' last collective: that one never completes */
        for (int r = 0; r < ctx->n_drafters; r++)
            if (ctx->comms[r])
                ncclCommAbort(ctx->comms[r]);
        aborted_comms = 1;
    }
#endif
    for (int r = 0; ctx->drafters && r < ctx->n_drafters; r++) {
        tr_drafter *d = ctx->drafters[r];
        if (!d)
            continue;
        cudaSetDevice(d->device);
        double t0 = now_s();
        for (int k = 0; k < 2; k++) {
            cudaStream_t s = k ? d->copy : d->stream;
            while (s) {
                cudaError_t e = cudaStreamQuery(s);
                if (e != cudaErrorNotReady)
                    break;
                (void)cudaGetLastError();
                if (now_s() - t0 > QUIESCE_TIMEOUT_S) {
#if TR_WITH_NCCL
                    if (ctx->comms && !aborted_comms) {
                        fprintf(stderr, "trainer: drafter%d's stream did not drain in %.0f s: "
                                        "aborting the NCCL communicators\n",
                                d->device, QUIESCE_TIMEOUT_S);
                        for (int q = 0; q < ctx->n_drafters; q++)
                            if (ctx->comms[q])
                                ncclCommAbort(ctx->comms[q]);
                        aborted_comms = 1;
                        t0 = now_s();
                        continue;
                    }
#endif
                    fprintf(stderr, "trainer: drafter%d's stream did not drain\n", d->device);
                    break;
                }
                poll_pause(POLL_SPINS);
            }
        }
    }
#if TR_WITH_NCCL
    if (ctx->comms) {
        for (int r = 0; r < ctx->n_drafters; r++) {
            if (ctx->comms[r] && !aborted_comms) {
                ncclResult_t nr = ncclCommDestroy(ctx->comms[r]);
                if (nr != ncclSuccess)
                    fprintf(stderr, "trainer: ncclCommDestroy: %s\n", ncclGetErrorString(nr));
            }
            ctx->comms[r] = NULL;
            if (ctx->drafters && ctx->drafters[r])
                ctx->drafters[r]->comm = NULL;
        }
    }
#endif
    pthread_mutex_unlock(&ctx->lock);
}

/* ---- context ---------------------------------------------------------------------------------- */

static void cuda_close(tr_context *ctx)
{
    if (!ctx)
        return;
    quiesce(ctx);
    for (int i = 0; i < ctx->n_slots; i++) {
        if (cudaSetDevice(ctx->slots[i].device) == cudaSuccess)
            tm_target_weights_free(&ctx->slots[i].w);
    }
#if TR_WITH_NCCL
    free(ctx->comms);
#endif
    if (ctx->mean && cudaSetDevice(ctx->cfg->drafter_devices[0]) == cudaSuccess)
        TR_WARN(cudaFree(ctx->mean));
    if (ctx->shared_device)
        tr_barrier_destroy(&ctx->barrier);
    free(ctx->drafters);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

static int check_devices(const char *flag, const int *devices, int n, int count)
{
    for (int i = 0; i < n; i++)
        if (devices[i] >= count) {
            tr_backend_set_error("%s lists device %d, but this machine has %d CUDA device%s "
                                 "(0..%d)",
                                 flag, devices[i], count, count == 1 ? "" : "s", count - 1);
            return -1;
        }
    return 0;
}

static int add_slot(tr_context *ctx, int device, int has_target)
{
    for (int i = 0; i < ctx->n_slots; i++)
        if (ctx->slots[i].device == device) {
            ctx->slots[i].has_target |= has_target;
            return 0;
        }
    device_slot *s = &ctx->slots[ctx->n_slots++];
    s->device = device;
    s->has_target = has_target;
    return 0;
}

static int open_devices(tr_context *ctx)
{
    const tr_config *cfg = ctx->cfg;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        tr_backend_set_error("--device cuda: no usable CUDA device (%s)",
                             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return -1;
    }
    TR_TRY(check_devices("--target-gpus", cfg->target_devices, cfg->n_targets, count));
    TR_TRY(check_devices("--drafter-gpus", cfg->drafter_devices, cfg->n_drafters, count));
    for (int i = 0; i < cfg->n_targets; i++)
        add_slot(ctx, cfg->target_devices[i], 1);
    for (int i = 0; i < cfg->n_drafters; i++)
        add_slot(ctx, cfg->drafter_devices[i], 0);
    /* the frozen weights, on every device in parallel, then wait for all */
    cudaStream_t init[2 * TR_MAX_DEVICES] = {0};
    int rc = 0;
    for (int i = 0; i < ctx->n_slots && !rc; i++) {
        device_slot *s = &ctx->slots[i];
        e = cudaSetDevice(s->device);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&init[i], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            rc = tr_cuda_fail(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
            break;
        }
        rc = tm_target_weights_create(&s->w, &ctx->D, s->has_target, cfg->seed, init[i]);
        if (!rc)
            s->ready = 1;
    }
    for (int i = 0; i < ctx->n_slots; i++) {
        if (!init[i])
            continue;
        cudaSetDevice(ctx->slots[i].device);
        e = cudaStreamSynchronize(init[i]);
        if (e != cudaSuccess && !rc)
            rc = tr_cuda_fail(e, "cudaStreamSynchronize", __FILE__, __LINE__);
        cudaStreamDestroy(init[i]);
    }
    return rc;
}

static int open_comms(tr_context *ctx)
{
    const tr_config *cfg = ctx->cfg;
#if TR_WITH_NCCL
    if (cfg->comm_ranks > 1) {
        /* a drafter rank of a multi-process run (dist.c): this process's one drafter joins
         * the others over the id the first drafter rank made */
        ctx->comms = (ncclComm_t *)calloc(1, sizeof *ctx->comms);
        if (!ctx->comms) {
            tr_backend_set_error("out of host memory");
            return -1;
        }
        ncclUniqueId id;
        memcpy(&id, cfg->nccl_id, sizeof id);
        TR_CUDA(cudaSetDevice(cfg->drafter_devices[0]));
        ncclResult_t r = ncclCommInitRank(&ctx->comms[0], cfg->comm_ranks, id, cfg->comm_rank);
        if (r != ncclSuccess) {
            free(ctx->comms);
            ctx->comms = NULL;
            return nccl_fail(r, "ncclCommInitRank", __FILE__, __LINE__);
        }
        return 0;
    }
#endif
    if (cfg->n_drafters < 2)
        return 0;
    int same = 0, distinct = 1;
    for (int i = 0; i < cfg->n_drafters; i++)
        for (int j = 0; j < i; j++) {
            if (cfg->drafter_devices[i] == cfg->drafter_devices[j])
                same++;
            else
                distinct = 0;
        }
    if (same && !distinct) {
        tr_backend_set_error("--drafter-gpus: drafters go on distinct GPUs (all-reduced with "
                             "NCCL) or all on one GPU, not two on one GPU and others elsewhere");
        return -1;
    }
    if (same) {
        /* all on one GPU: NCCL cannot pair two ranks on one device; shared_allreduce */
        if (tr_barrier_init(&ctx->barrier, cfg->n_drafters)) {
            tr_backend_set_error("cannot create the drafters' barrier");
            return -1;
        }
        ctx->shared_device = 1;
        return 0;
    }
#if TR_WITH_NCCL
    ctx->comms = (ncclComm_t *)calloc((size_t)cfg->n_drafters, sizeof *ctx->comms);
    if (!ctx->comms) {
        tr_backend_set_error("out of host memory");
        return -1;
    }
    /* one communicator per drafter thread, made together in this process */
    ncclResult_t r = ncclCommInitAll(ctx->comms, cfg->n_drafters, cfg->drafter_devices);
    if (r != ncclSuccess) {
        free(ctx->comms); /* what a failed init left there is not ours to destroy */
        ctx->comms = NULL;
        return nccl_fail(r, "ncclCommInitAll", __FILE__, __LINE__);
    }
    return 0;
#else
    tr_backend_set_error("--drafter-gpus: more than one drafter needs NCCL, and this trainer "
                         "was built without it");
    return -1;
#endif
}

static int cuda_open(tr_context **out, const tr_config *cfg)
{
    *out = NULL;
    tr_context *ctx = (tr_context *)calloc(1, sizeof *ctx);
    if (!ctx) {
        tr_backend_set_error("out of host memory");
        return -1;
    }
    ctx->cfg = cfg;
    tr_dims_from_config(&ctx->D, cfg);
    ctx->n_drafters = cfg->n_drafters;
    ctx->aborted.store(0);
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->drafters = (tr_drafter **)calloc((size_t)cfg->n_drafters, sizeof *ctx->drafters);
    if (!ctx->drafters) {
        cuda_close(ctx);
        tr_backend_set_error("out of host memory");
        return -1;
    }
    if (tr_debug_sync())
        kc_set_debug_sync(1);

    st_trace *trace = tr_backend_trace();
    if (trace) {
        int a = st_stage_register(trace, "stream_sync", ST_SYNC);
        int b = st_stage_register(trace, "event_sync", ST_SYNC);
        int c = st_stage_register(trace, "d2h", ST_COPY);
        int k = st_counter_register(trace, "target_gpu_ms", "ms");
        if (a < 0 || b < 0 || c < 0 || k < 0) {
            tr_backend_set_error("cannot register the backend's stages: %s", st_last_error());
            cuda_close(ctx);
            return -1;
        }
        ctx->s_stream_sync = (st_stage)a;
        ctx->s_event_sync = (st_stage)b;
        ctx->s_d2h = (st_stage)c;
        ctx->c_target_gpu_ms = (st_counter)k;
        ctx->tracing = 1;
    }
    if (open_devices(ctx) || open_comms(ctx)) {
        char saved[256];
        snprintf(saved, sizeof saved, "%s", tr_backend_error());
        cuda_close(ctx);
        tr_backend_set_error("%s", saved);
        return -1;
    }
    *out = ctx;
    return 0;
}

static void cuda_abort(tr_context *ctx)
{
    ctx->aborted.store(1);
    if (ctx->shared_device)
        tr_barrier_abort(&ctx->barrier);
}

static void cuda_profiler(tr_context *ctx, int on)
{
    for (int i = 0; i < ctx->n_slots; i++) {
        if (cudaSetDevice(ctx->slots[i].device) != cudaSuccess)
            continue;
        cudaError_t e = on ? cudaProfilerStart() : cudaProfilerStop();
        if (e != cudaSuccess)
            fprintf(stderr, "trainer: cuda:%d: %s: %s\n", ctx->slots[i].device,
                    on ? "cudaProfilerStart" : "cudaProfilerStop", cudaGetErrorString(e));
    }
    if (ctx->tracing)
        st_mark(on ? "cuda_profiler_start" : "cuda_profiler_stop");
}

/* ---- hidden-state slots: pinned host memory ------------------------------------------------ */

static int cuda_hidden_alloc(tr_context *ctx, tr_hidden *h)
{
    const tr_dims *D = &ctx->D;
    size_t n = rows_of(D);
    size_t taps_bytes = align_up(n * D->n_taps * D->dim * sizeof(uint16_t));
    memset(h, 0, sizeof *h);
    h->n_seqs = D->n_seqs;
    h->seq_len = D->seq_len;
    h->n_taps = D->n_taps;
    h->dim = D->dim;
    TR_CUDA(cudaSetDevice(ctx->cfg->target_devices[0]));
    void *block = NULL;
    cudaError_t e = cudaHostAlloc(&block, taps_bytes + 4 * n * sizeof(int32_t),
                                  cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        tr_backend_set_error("cudaHostAlloc of %.1f MiB of pinned memory for a hidden-state slot "
                             "failed: %s (lower --queue-depth?)",
                             (taps_bytes + 4 * n * sizeof(int32_t)) / 1048576.0,
                             cudaGetErrorString(e));
        return -1;
    }
    h->taps_bf16 = (uint16_t *)block;
    h->predictions = (int32_t *)((char *)block + taps_bytes);
    h->tokens = h->predictions + n;
    h->doc_ids = h->tokens + n;
    h->positions = h->doc_ids + n;
    return 0;
}

static void cuda_hidden_free(tr_context *ctx, tr_hidden *h)
{
    quiesce(ctx);
    if (h->taps_bf16)
        TR_WARN(cudaFreeHost(h->taps_bf16));
    memset(h, 0, sizeof *h);
}

/* ---- target ------------------------------------------------------------------------------------- */

/* Frees everything of t (no drain: the caller made sure nothing of it runs). */
static void target_release(tr_target *t)
{
    if (!t)
        return;
    if (cudaSetDevice(t->device) == cudaSuccess) {
        if (t->stream)
            TR_WARN(cudaStreamSynchronize(t->stream));
        if (t->post)
            TR_WARN(cudaStreamSynchronize(t->post));
        for (int i = 0; i < 2; i++) {
            if (t->st[i].fwd_start)
                cudaEventDestroy(t->st[i].fwd_start);
            if (t->st[i].fwd_done)
                cudaEventDestroy(t->st[i].fwd_done);
        }
        if (t->timing_ref)
            cudaEventDestroy(t->timing_ref);
        tm_target_ws_free(&t->ws);
        kc_blas_destroy(t->blas);
        if (t->dev_block)
            TR_WARN(cudaFree(t->dev_block));
        if (t->pinned)
            TR_WARN(cudaFreeHost(t->pinned));
        if (t->stream)
            cudaStreamDestroy(t->stream);
        if (t->post)
            cudaStreamDestroy(t->post);
    }
    free(t);
}

static void cuda_target_destroy(tr_target *t)
{
    if (!t)
        return;
    quiesce(t->ctx);
    if (t->n_timed > 0 && t->span_ms > 0.0) {
        printf("trainer: target%d (cuda:%d): GPU busy with the forward %.1f%% of the time "
               "(%.2f ms per forward, %ld forwards after %d warm-up; from CUDA events)\n",
               t->index, t->device, 100.0 * t->busy_ms / t->span_ms,
               t->busy_ms / (double)t->n_timed, t->n_timed, TIMING_WARMUP);
        fflush(stdout);
    }
    target_release(t);
}

static int target_setup(tr_context *ctx, tr_target *t)
{
    const tr_dims *D = &ctx->D;
    const size_t NT = rows_of(D), d = (size_t)D->dim;
    char name[64];
    TR_CUDA(cudaSetDevice(t->device));
    TR_CUDA(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    snprintf(name, sizeof name, "target%d.compute", t->index);
    st_name_stream((void *)t->stream, name);
    if (t->n_staging > 1) {
        TR_CUDA(cudaStreamCreateWithFlags(&t->post, cudaStreamNonBlocking));
        snprintf(name, sizeof name, "target%d.post", t->index);
        st_name_stream((void *)t->post, name);
    }
    TR_KC(kc_blas_create(&t->blas));
    t->w = weights_on(ctx, t->device);
    if (!t->w || !t->w->full) {
        tr_backend_set_error("internal: no target weights on cuda:%d", t->device);
        return -1;
    }
    TR_TRY(tm_target_ws_create(&t->ws, D));

    /* staging (device): taps, batch, predictions, bad-token counter; then the packed taps */
    size_t taps_b = align_up(NT * d * sizeof(float)), ints_b = align_up(4 * NT * sizeof(int32_t));
    size_t per_staging = (size_t)D->n_taps * taps_b + ints_b;
    size_t packed_b = align_up(NT * D->n_taps * d * sizeof(kc_bf16));
    size_t bytes = (size_t)t->n_staging * per_staging + packed_b + 256;
    cudaError_t e = cudaMalloc(&t->dev_block, bytes);
    if (e != cudaSuccess) {
        t->dev_block = NULL;
        cudaGetLastError();
        tr_backend_set_error("cuda:%d: cudaMalloc of %.2f GiB for the staging buffers failed: %s",
                             t->device, bytes / 1073741824.0, cudaGetErrorString(e));
        return -1;
    }
    char *p = (char *)t->dev_block;
    for (int k = 0; k < t->n_staging; k++) {
        target_staging *st = &t->st[k];
        for (int i = 0; i < D->n_taps; i++, p += taps_b)
            st->taps[i] = (float *)p;
        st->batch_dev = (int32_t *)p;
        st->predictions = st->batch_dev + 3 * NT;
        p += ints_b;
    }
    t->packed = (kc_bf16 *)p;
    p += packed_b;
    t->n_bad = (int32_t *)p;
    TR_CUDA(cudaMemsetAsync(t->n_bad, 0, sizeof(int32_t), t->stream));

    /* pinned: each staging buffer's batch, and the bad-token count */
    const size_t batch_ints = 3 * NT;
    TR_CUDA(cudaHostAlloc((void **)&t->pinned, (2 * batch_ints + 64) * sizeof(int32_t),
                          cudaHostAllocDefault));
    for (int k = 0; k < t->n_staging; k++)
        t->st[k].batch_host = t->pinned + (size_t)k * batch_ints;
    t->bad_host = t->pinned + 2 * batch_ints;
    for (int k = 0; k < t->n_staging; k++) {
        TR_CUDA(cudaEventCreate(&t->st[k].fwd_start));
        TR_CUDA(cudaEventCreate(&t->st[k].fwd_done));
    }
    TR_CUDA(cudaEventCreate(&t->timing_ref));

    size_t free_b = 0, total_b = 0;
    TR_CUDA(cudaMemGetInfo(&free_b, &total_b));
    printf("trainer: target%d on cuda:%d: weights %.2f GiB (one copy per device), activations "
           "%.2f GiB, staging %.2f GiB; device memory in use %.1f of %.1f GiB\n",
           t->index, t->device, t->w->bytes / 1073741824.0, t->ws.bytes / 1073741824.0,
           bytes / 1073741824.0, (total_b - free_b) / 1073741824.0, total_b / 1073741824.0);
    fflush(stdout);
    return 0;
}

static int cuda_target_create(tr_context *ctx, int index, int device, int n_staging,
                              tr_target **out)
{
    *out = NULL;
    tr_target *t = (tr_target *)calloc(1, sizeof *t);
    if (!t) {
        tr_backend_set_error("out of host memory");
        return -1;
    }
    t->ctx = ctx;
    t->index = index;
    t->device = device;
    t->n_staging = n_staging < 1 ? 1 : n_staging > 2 ? 2 : n_staging;
    if (target_setup(ctx, t)) {
        char saved[256];
        snprintf(saved, sizeof saved, "%s", tr_backend_error());
        target_release(t);
        tr_backend_set_error("target %d on cuda:%d: %s", index, device, saved);
        return -1;
    }
    *out = t;
    return 0;
}

static int cuda_target_forward(tr_target *t, const tr_batch *b, int which)
{
    const tr_dims *D = &t->ctx->D;
    const size_t NT = rows_of(D);
    target_staging *st = &t->st[which];
    if ((size_t)b->n_seqs * b->seq_len != NT || which < 0 || which >= t->n_staging) {
        tr_backend_set_error("internal: batch of %d x %d, staging %d", b->n_seqs, b->seq_len,
                             which);
        return -1;
    }
    TR_CUDA(cudaSetDevice(t->device));
    /* the batch into this staging buffer's pinned copy (its last upload is done: that
     * forward was waited for by its postprocess), then up with the forward */
    memcpy(st->batch_host, b->tokens, NT * sizeof(int32_t));
    memcpy(st->batch_host + NT, b->doc_ids, NT * sizeof(int32_t));
    memcpy(st->batch_host + 2 * NT, b->positions, NT * sizeof(int32_t));
    st->batch_index = b->index;
    TR_CUDA(cudaEventRecord(st->fwd_start, t->stream));
    TR_CUDA(cudaMemcpyAsync(st->batch_dev, st->batch_host, 3 * NT * sizeof(int32_t),
                            cudaMemcpyHostToDevice, t->stream));
    TR_TRY(tm_target_forward(t->w, &t->ws, t->blas, st->batch_dev, st->batch_dev + NT,
                             st->batch_dev + 2 * NT, st->taps, st->predictions, t->n_bad,
                             t->stream));
    TR_CUDA(cudaEventRecord(st->fwd_done, t->stream));
    if (++t->n_launched == TIMING_WARMUP)
        TR_CUDA(cudaEventRecord(t->timing_ref, t->stream));
    return 0;
}

/* After the host saw fwd_done: this forward's GPU time (counter), and the busy fraction. */
static void record_timing(tr_target *t, const target_staging *st)
{
    float ms = 0.0f, span = 0.0f;
    t->n_done++;
    if (cudaEventElapsedTime(&ms, st->fwd_start, st->fwd_done) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (t->ctx->tracing)
        st_counter_set(t->ctx->c_target_gpu_ms, ms);
    if (t->n_done <= TIMING_WARMUP)
        return;
    if (cudaEventElapsedTime(&span, t->timing_ref, st->fwd_done) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    t->busy_ms += ms;
    t->span_ms = span;
    t->n_timed++;
}

/* read_bad: also the bad-token count (every --log-every forwards: no per-step scalar read) */
static int postprocess_copies(tr_target *t, const target_staging *st, tr_hidden *h,
                              cudaStream_t ps, int read_bad)
{
    const tr_dims *D = &t->ctx->D;
    const size_t NT = rows_of(D);
    TR_CUDA(cudaMemcpyAsync(h->taps_bf16, t->packed,
                            NT * D->n_taps * D->dim * sizeof(kc_bf16), cudaMemcpyDeviceToHost,
                            ps));
    TR_CUDA(cudaMemcpyAsync(h->predictions, st->predictions, NT * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, ps));
    if (read_bad)
        TR_CUDA(cudaMemcpyAsync(t->bad_host, t->n_bad, sizeof(int32_t), cudaMemcpyDeviceToHost,
                                ps));
    return stream_sync_stage(t->ctx, ps, 0);
}

static int cuda_target_postprocess(tr_target *t, int which, tr_hidden *h)
{
    tr_context *ctx = t->ctx;
    const tr_dims *D = &ctx->D;
    const size_t NT = rows_of(D);
    target_staging *st = &t->st[which];
    cudaStream_t ps = t->post ? t->post : t->stream;
    TR_CUDA(cudaSetDevice(t->device));
    /* pack behind the forward (on the post stream: after its event), launched before any
     * host wait so that the device goes on from the forward to the pack at once */
    if (ps != t->stream)
        TR_CUDA(cudaStreamWaitEvent(ps, st->fwd_done, 0));
    const void *taps[TR_MAX_TAPS];
    for (int i = 0; i < D->n_taps; i++)
        taps[i] = st->taps[i];
    TR_KC(kc_pack_taps(t->packed, KC_BF16, taps, KC_F32, D->n_taps, (int)NT, D->dim, ps));
    /* the host waits for the forward (its remaining GPU time) ... */
    stage_begin(ctx, ctx->s_event_sync);
    int rc = wait_event(ctx, st->fwd_done, 0);
    stage_end(ctx, ctx->s_event_sync);
    if (rc)
        return -1;
    record_timing(t, st);
    /* ... then for the pack and the copies into the pinned slot */
    int read_bad = t->n_done % ctx->cfg->log_every == 0;
    stage_begin(ctx, ctx->s_d2h);
    rc = postprocess_copies(t, st, h, ps, read_bad);
    stage_end(ctx, ctx->s_d2h);
    if (rc)
        return -1;
    if (read_bad && *t->bad_host) {
        tr_backend_set_error("a batch up to %llu holds %d token%s outside the vocabulary "
                             "(--vocab %d)",
                             (unsigned long long)st->batch_index, (int)*t->bad_host,
                             *t->bad_host == 1 ? "" : "s", D->vocab);
        return -1;
    }
    memcpy(h->tokens, st->batch_host, NT * sizeof(int32_t));
    memcpy(h->doc_ids, st->batch_host + NT, NT * sizeof(int32_t));
    memcpy(h->positions, st->batch_host + 2 * NT, NT * sizeof(int32_t));
    h->batch_index = st->batch_index;
    h->n_tokens = NT;
    h->producer = t->index;
    return 0;
}

/* ---- drafter ------------------------------------------------------------------------------------- */

static void drafter_release(tr_drafter *d)
{
    if (!d)
        return;
    if (cudaSetDevice(d->device) == cudaSuccess) {
        if (d->stream)
            TR_WARN(cudaStreamSynchronize(d->stream));
        if (d->copy)
            TR_WARN(cudaStreamSynchronize(d->copy));
        for (int b = 0; b < 2; b++) {
            if (d->ready[b])
                cudaEventDestroy(d->ready[b]);
            if (d->inputs_free[b])
                cudaEventDestroy(d->inputs_free[b]);
        }
        if (d->grad_done)
            cudaEventDestroy(d->grad_done);
        if (d->mean_done)
            cudaEventDestroy(d->mean_done);
        tm_drafter_ws_free(&d->ws);
        tm_drafter_params_free(&d->params);
        kc_blas_destroy(d->blas);
        if (d->anchors_host)
            TR_WARN(cudaFreeHost(d->anchors_host));
        if (d->stats_host)
            TR_WARN(cudaFreeHost(d->stats_host));
        if (d->stream)
            cudaStreamDestroy(d->stream);
        if (d->copy)
            cudaStreamDestroy(d->copy);
    }
    free(d);
}

static void cuda_drafter_destroy(tr_drafter *d)
{
    if (!d)
        return;
    tr_context *ctx = d->ctx;
    quiesce(ctx); /* the communicators go first: nothing may wait on a peer any more */
    if (ctx->drafters && d->rank >= 0 && d->rank < ctx->n_drafters)
        ctx->drafters[d->rank] = NULL;
    drafter_release(d);
}

static int drafter_setup(tr_context *ctx, tr_drafter *d)
{
    const tr_dims *D = &ctx->D;
    char name[64];
    TR_CUDA(cudaSetDevice(d->device));
    TR_CUDA(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    TR_CUDA(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking));
    snprintf(name, sizeof name, "drafter%d.compute", d->rank);
    st_name_stream((void *)d->stream, name);
    snprintf(name, sizeof name, "drafter%d.h2d", d->rank);
    st_name_stream((void *)d->copy, name);
    TR_KC(kc_blas_create(&d->blas));
    d->w = weights_on(ctx, d->device);
    if (!d->w) {
        tr_backend_set_error("internal: no target weights on cuda:%d", d->device);
        return -1;
    }
    /* the same seed on every rank: all drafters start from the same weights */
    TR_TRY(tm_drafter_params_create(&d->params, D, ctx->cfg->seed, d->stream));
    TR_TRY(tm_drafter_ws_create(&d->ws, D));
    TR_CUDA(cudaMemsetAsync(d->ws.stats, 0, sizeof *d->ws.stats, d->stream));
    for (int b = 0; b < 2; b++) {
        TR_CUDA(cudaEventCreateWithFlags(&d->ready[b], cudaEventDisableTiming));
        TR_CUDA(cudaEventCreateWithFlags(&d->inputs_free[b], cudaEventDisableTiming));
    }
    size_t n_anchors = (size_t)D->n_seqs * D->anchors;
    TR_CUDA(cudaHostAlloc((void **)&d->anchors_host, 2 * n_anchors * sizeof(int32_t),
                          cudaHostAllocDefault));
    TR_CUDA(cudaHostAlloc((void **)&d->stats_host, sizeof *d->stats_host, cudaHostAllocDefault));
    memset(d->stats_host, 0, sizeof *d->stats_host);
    if (ctx->shared_device) {
        TR_CUDA(cudaEventCreateWithFlags(&d->grad_done, cudaEventDisableTiming));
        TR_CUDA(cudaEventCreateWithFlags(&d->mean_done, cudaEventDisableTiming));
        pthread_mutex_lock(&ctx->lock);
        cudaError_t e = cudaSuccess;
        if (!ctx->mean)
            e = cudaMalloc((void **)&ctx->mean, d->params.n * sizeof(float));
        pthread_mutex_unlock(&ctx->lock);
        TR_CUDA(e);
    }
    TR_CUDA(cudaStreamSynchronize(d->stream)); /* the initialisation */
#if TR_WITH_NCCL
    d->comm = ctx->comms ? ctx->comms[d->rank] : NULL;
#endif
    size_t free_b = 0, total_b = 0;
    TR_CUDA(cudaMemGetInfo(&free_b, &total_b));
    printf("trainer: drafter%d on cuda:%d: parameters + optimizer %.2f GiB, activations %.2f "
           "GiB; device memory in use %.1f of %.1f GiB\n",
           d->rank, d->device, d->params.bytes / 1073741824.0, d->ws.bytes / 1073741824.0,
           (total_b - free_b) / 1073741824.0, total_b / 1073741824.0);
    fflush(stdout);
    return 0;
}

static int cuda_drafter_create(tr_context *ctx, int rank, int device, tr_drafter **out)
{
    *out = NULL;
    tr_drafter *d = (tr_drafter *)calloc(1, sizeof *d);
    if (!d) {
        tr_backend_set_error("out of host memory");
        return -1;
    }
    d->ctx = ctx;
    d->rank = rank;
    d->device = device;
    d->n_collectives.store(0);
    if (drafter_setup(ctx, d)) {
        char saved[256];
        snprintf(saved, sizeof saved, "%s", tr_backend_error());
        drafter_release(d);
        tr_backend_set_error("drafter %d on cuda:%d: %s", rank, device, saved);
        return -1;
    }
    ctx->drafters[rank] = d;
    *out = d;
    return 0;
}

static int h2d_copies(tr_drafter *d, const tr_hidden *h, int b)
{
    const tr_dims *D = &d->ctx->D;
    const size_t NT = rows_of(D);
    tm_drafter_inputs *in = &d->ws.in[b];
    /* buffer b was last read by the backward two steps back */
    TR_CUDA(cudaStreamWaitEvent(d->copy, d->inputs_free[b], 0));
    TR_CUDA(cudaMemcpyAsync(in->taps, h->taps_bf16, NT * D->n_taps * D->dim * sizeof(kc_bf16),
                            cudaMemcpyHostToDevice, d->copy));
    /* predictions, tokens, doc_ids, positions: adjacent in the slot and in the buffer */
    TR_CUDA(cudaMemcpyAsync(in->ints, h->predictions, 4 * NT * sizeof(int32_t),
                            cudaMemcpyHostToDevice, d->copy));
    TR_CUDA(cudaEventRecord(d->ready[b], d->copy));
    /* the slot goes back to the targets when this returns: the copy must be done */
    return stream_sync_stage(d->ctx, d->copy, 1);
}

static int cuda_drafter_h2d(tr_drafter *d, const tr_hidden *h)
{
    TR_CUDA(cudaSetDevice(d->device));
    d->step++;
    d->buf = (int)(d->step & 1);
    return h2d_copies(d, h, d->buf);
}

static int cuda_drafter_forward(tr_drafter *d, const int32_t *anchors)
{
    const tr_dims *D = &d->ctx->D;
    const size_t n_anchors = (size_t)D->n_seqs * D->anchors;
    const int b = d->buf;
    TR_CUDA(cudaSetDevice(d->device));
    /* anchors_host[b]'s last upload (two steps back) finished before this step's h2d wait */
    int32_t *pinned = d->anchors_host + (size_t)b * n_anchors;
    memcpy(pinned, anchors, n_anchors * sizeof(int32_t));
    TR_CUDA(cudaStreamWaitEvent(d->stream, d->ready[b], 0));
    TR_CUDA(cudaMemcpyAsync(d->ws.in[b].anchors, pinned, n_anchors * sizeof(int32_t),
                            cudaMemcpyHostToDevice, d->stream));
    return tm_drafter_forward(&d->ws, &d->params, d->w, d->blas, b, d->stream);
}

static int cuda_drafter_loss(tr_drafter *d, int want_accuracy, tr_step_metrics *m)
{
    TR_CUDA(cudaSetDevice(d->device));
    TR_TRY(tm_drafter_loss(&d->ws, want_accuracy, d->ctx->cfg->topk, d->stream));
    if (want_accuracy)
        d->metrics_pending = 1;
    /* reported at the next log step (drafter_optimizer), batched with the other scalars */
    m->loss = 0.0f;
    m->have_accuracy = 0;
    return 0;
}

static int cuda_drafter_backward(tr_drafter *d)
{
    TR_CUDA(cudaSetDevice(d->device));
    TR_TRY(tm_drafter_backward(&d->ws, &d->params, d->w, d->blas, d->buf, d->stream));
    TR_CUDA(cudaEventRecord(d->inputs_free[d->buf], d->stream));
    return 0;
}

/* Every drafter's gradient pointer, by value: TR_MAX_DEVICES of them fit a kernel's
 * parameters. */
struct grad_ptrs {
    const float *p[TR_MAX_DEVICES];
};

/* out[i] = the mean of in.p[0..n_in-1][i] for i in lo..hi-1, summed in rank order */
__global__ void mean_of_grads(float *out, grad_ptrs in, int n_in, size_t lo, size_t hi,
                              float inv)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += stride) {
        float sum = 0.0f;
        for (int r = 0; r < n_in; r++)
            sum += in.p[r][i];
        out[i] = sum * inv;
    }
}

/* The all-reduce of drafters that share one GPU (the file's header comment). */
static int shared_allreduce(tr_drafter *d)
{
    tr_context *ctx = d->ctx;
    const int n = ctx->n_drafters;
    const size_t count = d->params.n;
    TR_CUDA(cudaEventRecord(d->grad_done, d->stream));
    if (tr_barrier_wait(&ctx->barrier)) {
        tr_backend_set_error("all-reduce aborted");
        return -1;
    }
    /* every drafter recorded grad_done before the barrier: the waits see this step's */
    grad_ptrs in;
    for (int r = 0; r < n; r++) {
        tr_drafter *o = ctx->drafters[r];
        in.p[r] = o->params.grads;
        if (o != d)
            TR_CUDA(cudaStreamWaitEvent(d->stream, o->grad_done, 0));
    }
    size_t per = (count + (size_t)n - 1) / (size_t)n;
    size_t lo = per * (size_t)d->rank, hi = lo + per < count ? lo + per : count;
    if (lo < hi) {
        size_t blocks = (hi - lo + 255) / 256;
        mean_of_grads<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, d->stream>>>(
            ctx->mean, in, n, lo, hi, 1.0f / (float)n);
        TR_CUDA(cudaGetLastError());
    }
    TR_CUDA(cudaEventRecord(d->mean_done, d->stream));
    if (tr_barrier_wait(&ctx->barrier)) {
        tr_backend_set_error("all-reduce aborted");
        return -1;
    }
    for (int r = 0; r < n; r++)
        if (ctx->drafters[r] != d)
            TR_CUDA(cudaStreamWaitEvent(d->stream, ctx->drafters[r]->mean_done, 0));
    /* the next step's averaging waits for every grad_done, so for this copy too */
    TR_CUDA(cudaMemcpyAsync(d->params.grads, ctx->mean, count * sizeof(float),
                            cudaMemcpyDeviceToDevice, d->stream));
    d->n_collectives.fetch_add(1);
    return 0;
}

static int cuda_drafter_allreduce(tr_drafter *d)
{
    TR_CUDA(cudaSetDevice(d->device));
    if (d->ctx->shared_device)
        return shared_allreduce(d);
#if TR_WITH_NCCL
    if (!d->comm) {
        tr_backend_set_error("internal: drafter %d has no communicator", d->rank);
        return -1;
    }
    /* the mean gradient, in place, bucketed over the flat fp32 gradient, one NCCL group */
    float *g = d->params.grads;
    const size_t n = d->params.n;
    TR_NCCL(ncclGroupStart());
    ncclResult_t first_error = ncclSuccess;
    const char *what = "ncclAllReduce";
    for (size_t off = 0; off < n && first_error == ncclSuccess; off += ALLREDUCE_BUCKET_FLOATS) {
        size_t count = n - off < ALLREDUCE_BUCKET_FLOATS ? n - off : ALLREDUCE_BUCKET_FLOATS;
        first_error = ncclAllReduce(g + off, g + off, count, ncclFloat, ncclAvg, d->comm,
                                    d->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (first_error == ncclSuccess && end != ncclSuccess) {
        first_error = end;
        what = "ncclGroupEnd";
    }
    if (first_error != ncclSuccess)
        return nccl_fail(first_error, what, __FILE__, __LINE__);
    d->n_collectives.fetch_add(1);
    return 0;
#else
    tr_backend_set_error("this trainer was built without NCCL");
    return -1;
#endif
}

static int read_stats(tr_drafter *d)
{
    TR_CUDA(cudaMemcpyAsync(d->stats_host, d->ws.stats, sizeof *d->stats_host,
                            cudaMemcpyDeviceToHost, d->stream));
    return stream_sync_stage(d->ctx, d->stream, 1);
}

static int cuda_drafter_optimizer(tr_drafter *d, tr_step_metrics *m)
{
    tr_context *ctx = d->ctx;
    const tr_config *cfg = ctx->cfg;
    TR_CUDA(cudaSetDevice(d->device));
    d->adam_step++;
    TR_TRY(tm_drafter_optimizer(&d->params, &d->ws, cfg, d->adam_step, d->stream));
    m->grad_norm = 0.0f;
    m->skipped = 0;
    if (d->step % cfg->log_every != 0 && d->step != cfg->steps)
        return 0;
    /* a log step: the scalars since the last one, in one copy, one wait */
    stage_begin(ctx, ctx->s_d2h);
    int rc = read_stats(d);
    stage_end(ctx, ctx->s_d2h);
    if (rc)
        return -1;
    const tm_drafter_stats *s = d->stats_host;
    m->loss = s->loss_sum;
    m->grad_norm = s->grad_norm;
    m->skipped = s->skipped > 0;
    if (d->metrics_pending) {
        m->have_accuracy = 1;
        m->n_valid = s->n_valid;
        m->accuracy = s->n_valid ? (float)s->hits1 / (float)s->n_valid : 0.0f;
        m->topk_accuracy = s->n_valid ? (float)s->hitsk / (float)s->n_valid : 0.0f;
        d->metrics_pending = 0;
    }
    /* restart the sums (after the copy, in stream order) */
    TR_CUDA(cudaMemsetAsync(&d->ws.stats->loss_sum, 0, sizeof(float), d->stream));
    TR_CUDA(cudaMemsetAsync(&d->ws.stats->skipped, 0, sizeof(int32_t), d->stream));
    return 0;
}

static int cuda_device_count(void)
{
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

extern "C" const tr_backend tr_backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .abort = cuda_abort,
    .hidden_alloc = cuda_hidden_alloc,
    .hidden_free = cuda_hidden_free,
    .target_create = cuda_target_create,
    .target_forward = cuda_target_forward,
    .target_postprocess = cuda_target_postprocess,
    .target_destroy = cuda_target_destroy,
    .drafter_create = cuda_drafter_create,
    .drafter_h2d = cuda_drafter_h2d,
    .drafter_forward = cuda_drafter_forward,
    .drafter_loss = cuda_drafter_loss,
    .drafter_backward = cuda_drafter_backward,
    .drafter_allreduce = cuda_drafter_allreduce,
    .drafter_optimizer = cuda_drafter_optimizer,
    .drafter_destroy = cuda_drafter_destroy,
    .profiler = cuda_profiler,
    .drafter_grads = NULL,
    .device_count = cuda_device_count,
};
