/* check_cuda.h: error checking for the trainer's CUDA code (backend_cuda.cu, model_cuda.cu,
 * ops_cuda.cu). Every CUDA runtime, kernels_cuda (kc_*), cuBLAS and NCCL call goes through one
 * of these macros, which turn a failure into the backend's one-line error (tr_backend_error():
 * "file:line: call: library message") and make the enclosing function return -1. The pipeline
 * then stops the run and main prints the line.
 *
 * Asynchronous faults (a bad address inside a kernel) surface at the next call that waits for
 * the stream; with KC_DEBUG_SYNC=1 (or TR_DEBUG_SYNC=1) in the environment, every launch of
 * the trainer's own kernels (and, through kc_set_debug_sync, of kernels/) is followed by a
 * stream synchronization, so that the fault is reported by the launch that caused it.
 * C++ only (included by .cu files). */
#ifndef TR_CHECK_CUDA_H
#define TR_CHECK_CUDA_H

#include <cuda_runtime.h>

#include "kernels_cuda.h"
extern "C" {
#include "backend.h"
}

/* Each sets the backend error and returns -1. */
int tr_cuda_fail(cudaError_t err, const char *what, const char *file, int line);
int tr_kc_fail(int rc, const char *what, const char *file, int line);
/* cudaGetLastError() after a launch (plus a stream sync in debug-sync mode); 0 or -1. */
int tr_launch_check(cudaStream_t stream, const char *what, const char *file, int line);
/* Whether KC_DEBUG_SYNC / TR_DEBUG_SYNC asked for a sync after every launch. */
int tr_debug_sync(void);

#define TR_CUDA(call)                                                                          \
    do {                                                                                       \
        cudaError_t tr_err_ = (call);                                                          \
        if (tr_err_ != cudaSuccess)                                                            \
            return tr_cuda_fail(tr_err_, #call, __FILE__, __LINE__);                           \
    } while (0)

#define TR_KC(call)                                                                            \
    do {                                                                                       \
        int tr_rc_ = (call);                                                                   \
        if (tr_rc_ != K_OK)                                                                    \
            return tr_kc_fail(tr_rc_, #call, __FILE__, __LINE__);                              \
    } while (0)

/* Any call returning 0 / -1 that already set the backend error. */
#define TR_TRY(call)                                                                           \
    do {                                                                                       \
        if ((call) != 0)                                                                       \
            return -1;                                                                         \
    } while (0)

#define TR_LAUNCH(stream, name)                                                                \
    do {                                                                                       \
        if (tr_launch_check((stream), (name), __FILE__, __LINE__))                             \
            return -1;                                                                         \
    } while (0)

#endif
