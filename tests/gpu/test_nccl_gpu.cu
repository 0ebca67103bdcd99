/* test_nccl_gpu.cu: NCCL all-reduce across 2 GPUs in one process, set up as the trainer's
 * drafters use it (backend_cuda.cu): communicators from ncclCommInitAll, one host thread per
 * rank, each issuing a group of in-place all-reduces over buckets of one flat fp32 buffer on
 * its own non-blocking stream.
 *
 * Inputs are small integers stored as floats, so that every sum and every mean of two of them
 * is exactly representable: the results must equal the host's expected values bit for bit, on
 * both ranks (nccl-tests' approach). Cases: ncclSum and ncclAvg (what the trainer uses) in
 * place over 3.5 buckets; one out-of-place ncclSum; a sequence of 20 back-to-back grouped
 * all-reduces (a training run's rhythm) checked at the end.
 * Prints "SKIP: ..." and exits 0 with fewer than 2 CUDA devices. A watchdog (120 s) turns a
 * hang into a failure with a message. Run with NCCL_NVLS_ENABLE=0 (set here when unset). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define RANKS 2
#define BUCKET (1u << 20)                   /* floats per all-reduce call */
#define N_FLOATS (3 * BUCKET + BUCKET / 2)  /* 3.5 buckets */

static ncclComm_t comms[RANKS];
static int devices[RANKS] = {0, 1};

/* rank r, element i: an integer in [-512, 511] */
static float input_value(int r, size_t i)
{
    return (float)((long)((i * 7 + (size_t)r * 13) % 1024) - 512);
}

typedef struct rank_job {
    int rank;
    ncclRedOp_t op;
    int in_place, repeats;
    float *result; /* host [N_FLOATS] */
    char error[256];
} rank_job;

#define JOB_CUDA(call)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            snprintf(job->error, sizeof job->error, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
                     cudaGetErrorString(e_));                                                  \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

#define JOB_NCCL(call)                                                                         \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) {                                                               \
            snprintf(job->error, sizeof job->error, "%s:%d: %s: %s (%s)", __FILE__, __LINE__,  \
                     #call, ncclGetErrorString(r_), ncclGetLastError(NULL));                   \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

/* One rank: upload its inputs, `repeats` groups of bucketed all-reduces, download. For
 * repeats > 1 the buffer is re-uploaded before each group (so each group sees the inputs). */
static void *rank_main(void *arg)
{
    rank_job *job = (rank_job *)arg;
    float *host = NULL, *send = NULL, *recv = NULL;
    cudaStream_t stream = NULL;
    JOB_CUDA(cudaSetDevice(devices[job->rank]));
    JOB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    JOB_CUDA(cudaMallocHost((void **)&host, N_FLOATS * sizeof(float)));
    for (size_t i = 0; i < N_FLOATS; i++)
        host[i] = input_value(job->rank, i);
    JOB_CUDA(cudaMalloc((void **)&send, N_FLOATS * sizeof(float)));
    if (job->in_place)
        recv = send;
    else
        JOB_CUDA(cudaMalloc((void **)&recv, N_FLOATS * sizeof(float)));
    for (int k = 0; k < job->repeats; k++) {
        JOB_CUDA(cudaMemcpyAsync(send, host, N_FLOATS * sizeof(float), cudaMemcpyHostToDevice,
                                 stream));
        JOB_NCCL(ncclGroupStart());
        {
            ncclResult_t first = ncclSuccess;
            for (size_t off = 0; off < N_FLOATS && first == ncclSuccess; off += BUCKET) {
                size_t count = N_FLOATS - off < BUCKET ? N_FLOATS - off : BUCKET;
                first = ncclAllReduce(send + off, recv + off, count, ncclFloat, job->op,
                                      comms[job->rank], stream);
            }
            ncclResult_t end = ncclGroupEnd();
            JOB_NCCL(first);
            JOB_NCCL(end);
        }
    }
    JOB_CUDA(cudaMemcpyAsync(job->result, recv, N_FLOATS * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
    JOB_CUDA(cudaStreamSynchronize(stream));
done:
    if (recv && recv != send)
        cudaFree(recv);
    if (send)
        cudaFree(send);
    if (host)
        cudaFreeHost(host);
    if (stream)
        cudaStreamDestroy(stream);
    return NULL;
}

static void run_allreduce(ncclRedOp_t op, int in_place, int repeats)
{
    rank_job jobs[RANKS];
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].rank = r;
        jobs[r].op = op;
        jobs[r].in_place = in_place;
        jobs[r].repeats = repeats;
        jobs[r].result = (float *)malloc(N_FLOATS * sizeof(float));
        assert_non_null(jobs[r].result);
        memset(jobs[r].result, 0xFF, N_FLOATS * sizeof(float)); /* NaN until written */
        assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
    int errors = 0;
    for (int r = 0; r < RANKS; r++)
        if (jobs[r].error[0]) {
            print_error("rank %d: %s\n", r, jobs[r].error);
            errors++;
        }
    if (errors)
        fail();
    /* expected, exactly: the sum of small integers, or half of it for 2 ranks */
    float *want = (float *)malloc(N_FLOATS * sizeof(float));
    assert_non_null(want);
    for (size_t i = 0; i < N_FLOATS; i++) {
        float sum = 0.0f;
        for (int r = 0; r < RANKS; r++)
            sum += input_value(r, i);
        want[i] = op == ncclAvg ? sum / (float)RANKS : sum;
    }
    for (int r = 0; r < RANKS; r++) {
        long bad = 0;
        for (size_t i = 0; i < N_FLOATS; i++) {
            if (memcmp(&jobs[r].result[i], &want[i], sizeof(float))) {
                if (bad < 5)
                    print_error("rank %d element %zu: got %.9g (0x%08x), want %.9g\n", r, i,
                                jobs[r].result[i], *(uint32_t *)&jobs[r].result[i], want[i]);
                bad++;
            }
        }
        if (bad) {
            print_error("rank %d: %ld of %u elements differ\n", r, bad, (unsigned)N_FLOATS);
            fail();
        }
    }
    /* and the ranks agree bit for bit (implied, but the trainer relies on it) */
    assert_memory_equal(jobs[0].result, jobs[1].result, N_FLOATS * sizeof(float));
    printf("  %s %s x%d: %u floats in %u-float buckets, bit-exact on %d ranks\n",
           op == ncclAvg ? "avg" : "sum", in_place ? "in place" : "out of place", repeats,
           (unsigned)N_FLOATS, BUCKET, RANKS);
    free(want);
    for (int r = 0; r < RANKS; r++)
        free(jobs[r].result);
}

static void test_sum_in_place(void **state)
{
    (void)state;
    run_allreduce(ncclSum, 1, 1);
}

static void test_avg_in_place(void **state)
{
    (void)state;
    run_allreduce(ncclAvg, 1, 1);
}

static void test_sum_out_of_place(void **state)
{
    (void)state;
    run_allreduce(ncclSum, 0, 1);
}

static void test_avg_repeated(void **state)
{
    (void)state;
    run_allreduce(ncclAvg, 1, 20);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_nccl_gpu: no progress in 120 s (an all-reduce hung?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

int main(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < RANKS) {
        printf("SKIP: needs %d CUDA devices, found %d%s%s\n", RANKS,
               e == cudaSuccess ? count : 0, e != cudaSuccess ? ": " : "",
               e != cudaSuccess ? cudaGetErrorString(e) : "");
        return 0;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    signal(SIGALRM, on_alarm);
    alarm(120);
    int version = 0;
    ncclGetVersion(&version);
    printf("NCCL %d, %d of %d devices\n", version, RANKS, count);
    ncclResult_t r = ncclCommInitAll(comms, RANKS, devices);
    if (r != ncclSuccess) {
        fprintf(stderr, "ncclCommInitAll: %s (%s)\n", ncclGetErrorString(r),
                ncclGetLastError(NULL));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_in_place),
        cmocka_unit_test(test_avg_in_place),
        cmocka_unit_test(test_sum_out_of_place),
        cmocka_unit_test(test_avg_repeated),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < RANKS; i++)
        ncclCommDestroy(comms[i]);
    return failed ? 1 : 0;
}
