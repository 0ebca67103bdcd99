/* cuda_check.cu: error reporting for the GPU kernels. Every CUDA / cuBLAS call and every kernel
 * launch goes through one of these (via the macros in cuda_common.cuh): the failure is recorded
 * with file:line and the library's own message, printed to stderr and passed up as a status
 * code; only the caller decides whether to stop. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda_common.cuh"

static thread_local char last_error[512];

/* -1: not read from the environment yet; 0 / 1 afterwards. */
static std::atomic<int> debug_sync{-1};

static int debug_sync_on(void)
{
    int on = debug_sync.load(std::memory_order_relaxed);
    if (on < 0) {
        const char *env = getenv("KC_DEBUG_SYNC");
        on = env && env[0] && strcmp(env, "0") != 0;
        int expected = -1;
        debug_sync.compare_exchange_strong(expected, on);
        on = debug_sync.load(std::memory_order_relaxed);
    }
    return on;
}

extern "C" const char *kc_last_error(void)
{
    return last_error;
}

extern "C" void kc_set_debug_sync(int on)
{
    debug_sync.store(on != 0, std::memory_order_relaxed);
}

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kernels_cuda: %s\n", last_error);
}

/* Strip the directory: messages name kernels/x.cu as x.cu:line. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int kc_fail_cuda(cudaError_t err, const char *what, const char *file, int line)
{
    record("%s:%d: %s: %s (%s)", base_name(file), line, what, cudaGetErrorString(err),
           cudaGetErrorName(err));
    return KC_ECUDA;
}

int kc_fail_blas(int status, const char *status_string, const char *what, const char *file,
                 int line)
{
    record("%s:%d: %s: cuBLAS status %d: %s", base_name(file), line, what, status,
           status_string ? status_string : "?");
    return KC_EBLAS;
}

int kc_fail_arg(const char *file, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record("%s:%d: invalid argument: %s", base_name(file), line, msg);
    return K_EINVAL;
}

int kc_check_launch(cudaStream_t stream, const char *what, const char *file, int line)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kc_fail_cuda(err, what, file, line);
    if (!debug_sync_on())
        return K_OK;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    err = cudaStreamIsCapturing(stream, &capture);
    if (err != cudaSuccess)
        return kc_fail_cuda(err, what, file, line);
    if (capture != cudaStreamCaptureStatusNone)
        return K_OK;
    err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess)
        return kc_fail_cuda(err, what, file, line);
    return K_OK;
}
