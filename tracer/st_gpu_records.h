/* st_gpu_records.h: the GPU record set that st_gpu_start asks CUPTI for
 * (tracer/gpu_records.c; docs/tracer.md, "GPU activity"): its bits, its
 * spec's parser and canonical form (meta gpu_records), and the launch
 * subset of the API functions. Plain C, also included by CUDA tests. */
#ifndef ST_GPU_RECORDS_H
#define ST_GPU_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ST_GPU_REC_KERNEL = 1u << 0,
    ST_GPU_REC_MEMCPY = 1u << 1,
    ST_GPU_REC_MEMSET = 1u << 2,
    ST_GPU_REC_SYNC = 1u << 3,
    ST_GPU_REC_RUNTIME = 1u << 4,        /* every runtime API call */
    ST_GPU_REC_DRIVER = 1u << 5,         /* every driver API call */
    ST_GPU_REC_RUNTIME_LAUNCH = 1u << 6, /* runtime calls that launch, copy, set or wait */
    ST_GPU_REC_DRIVER_LAUNCH = 1u << 7,
    ST_GPU_REC_ALL = 0x3fu,
    /* Kernels, copies, memsets and the launch subsets of the API: measured
     * on the H200 (bench/RESULTS.md) at about 1/6 of the CPU cost of every
     * kind, with every kernel and copy still joined to its thread and stage. */
    ST_GPU_REC_DEFAULT = ST_GPU_REC_KERNEL | ST_GPU_REC_MEMCPY | ST_GPU_REC_MEMSET | ST_GPU_REC_RUNTIME_LAUNCH |
                         ST_GPU_REC_DRIVER_LAUNCH,
    /* The sampled capture's (every_steps > 1) kinds when none is named: the kernel records, which
     * it switches, and the launch subsets, which stay on; copies, memsets and syncs cannot be
     * recorded with it (CUPTI crashes when the kernel kind is switched often with them on). */
    ST_GPU_REC_SAMPLED = ST_GPU_REC_KERNEL | ST_GPU_REC_RUNTIME_LAUNCH | ST_GPU_REC_DRIVER_LAUNCH,
};
#define ST_GPU_BUFFER_KB_DEFAULT 8192u
#define ST_GPU_BUFFER_KB_MIN 64u
#define ST_GPU_BUFFER_KB_MAX 262144u
#define ST_GPU_FLUSH_MS_DEFAULT 100u
#define ST_GPU_FLUSH_MS_MAX 60000u
#define ST_GPU_EVERY_STEPS_MAX 1000000u
typedef struct st_gpu_config {
    unsigned kinds;              /* ST_GPU_REC_* */
    uint32_t buffer_kb, flush_ms; /* flush_ms 0: CUPTI's own cadence */
    uint32_t every_steps;        /* 1: every step; N > 1: recording on from a step mark k with k % N == 0
                                    to the next mark, off elsewhere (docs/tracer.md, "Sampled capture") */
    int zeroed;                  /* hand CUPTI zeroed buffers (ZEROED_OUT_ACTIVITY_BUFFER) */
} st_gpu_config;
void st_gpu_config_default(st_gpu_config *c);
/* spec NULL: the default. 0, or -1 with a one-line message in err. */
int st_gpu_config_parse(const char *spec, st_gpu_config *out, char *err, size_t err_size);
void st_gpu_config_format(const st_gpu_config *c, char *buf, size_t size);
int st_gpu_api_is_launch(const char *name);


#ifdef __cplusplus
}
#endif

#endif
