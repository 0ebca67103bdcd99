/* config.h: the trainer's configuration: every flag, the presets, and their validation.
 *
 * tr_config_parse() applies the preset first (wherever --preset appears), then every other
 * flag in order, then checks the whole: each value against its range and the dimensions
 * against each other. A mistake gives one line of text and TR_CONFIG_ERROR; main prints it
 * and exits with status 2.
 */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TR_VERSION "0.1.0"
#define TR_MAX_TAPS 64
#define TR_MAX_DEVICES 64
#define TR_MAX_RANKS 1024 /* processes of one multi-process run */

enum { TR_DEVICE_CPU = 0, TR_DEVICE_CUDA = 1 };

/* The CUDA backend (the trainer's .cu files) is compiled and linked into the trainer whenever the
 * Makefile finds the CUDA toolkit, which is when it passes -DST_HAVE_CUDA_HEADERS (its
 * -DST_WITH_* flags do not reach the C files). */
#if (defined(ST_HAVE_CUDA_HEADERS) || defined(ST_WITH_CUDA)) && !defined(ST_NO_CUDA) && \
    !defined(TR_HAVE_CUDA_BACKEND)
#define TR_HAVE_CUDA_BACKEND 1
#endif

typedef struct tr_config {
    int device;               /* TR_DEVICE_* */
    const char *preset;

    /* model */
    int vocab, dim, heads, ffn, target_layers;
    int n_taps, taps[TR_MAX_TAPS]; /* target layers whose outputs the drafter reads */
    int taps_given;
    int drafter_layers, drafter_attention;
    int block_size, anchors, sliding_window; /* sliding_window 0 = off */

    /* data and pipeline */
    int seq_len, batch;
    long steps;
    int queue_depth, batch_queue_depth;
    int n_targets, target_devices[TR_MAX_DEVICES];
    int n_drafters, drafter_devices[TR_MAX_DEVICES];
    int postprocess_async;
    const char *data_path;    /* NULL: synthetic data */
    uint64_t seed;

    /* optimizer */
    float lr, weight_decay, clip, beta1, beta2, adam_eps;

    /* reporting */
    long profile_interval, metrics_every, log_every;
    int topk;
    const char *trace_path;   /* NULL: default when profiling is on */
    int trace_gpu_off;        /* --trace-gpu off: no CUPTI activity in the trace */
    int trace_cpu;            /* --trace-cpu: perf events per thread (st_options.cpu) */
    uint32_t trace_cpu_user_stack; /* --trace-cpu-user-stack: st_options.cpu_user_stack */
    int overwrite;
    long ring_records;        /* --ring-records; 0: the tracer's default */
    int block_when_full;      /* --block-when-full */
    long profile_first, profile_last; /* --profile-steps A-B: device profiler capture; 0 = off */
    long gpu_alternate, alternate_settle; /* --gpu-alternate N, --alternate-settle K (alternate.h) */
    long gpu_every;           /* --gpu-every N: GPU recording one step in N (every_steps=N); 0 off */

    /* test and demo knobs: busy-wait this long inside each forward */
    long target_delay_us, drafter_delay_us;

    /* multi-process runs (dist.c, layout.c): the role of each rank. --layout
     * targets=T,drafters=D (layout_targets/drafters > 0), or explicit lists
     * (--target-ranks/--drafter-ranks; counts 0 when not given). */
    int layout_targets, layout_drafters;
    int n_target_ranks, target_ranks[TR_MAX_RANKS];
    int n_drafter_ranks, drafter_ranks[TR_MAX_RANKS];
    int die_rank;             /* --test-die-at RANK:STEP: that rank SIGKILLs itself */
    long die_step;            /* at that step; 0 = off */

    /* Set by dist.c in a drafter rank of a multi-process CUDA run with several drafter
     * ranks: the backend's all-reduce joins the comm_ranks drafter processes (NCCL,
     * ncclCommInitRank with nccl_id, this process being comm_rank). comm_ranks 0: the
     * in-process communicator of n_drafters threads, as in a single-process run. */
    int comm_ranks, comm_rank;
    unsigned char nccl_id[128];
} tr_config;

enum { TR_CONFIG_OK = 0, TR_CONFIG_EXIT = 1 /* --help/--version printed */, TR_CONFIG_ERROR = 2 };

/* Parses argv into cfg. On TR_CONFIG_ERROR, err holds one line (no newline). --help and
 * --version print to `out` and return TR_CONFIG_EXIT. Strings point into argv. */
int tr_config_parse(tr_config *cfg, int argc, char **argv, FILE *out, char *err, size_t err_size);

/* Fills cfg with a preset's values ("tiny", "small", "h200"); -1 for an unknown name. */
int tr_config_preset(tr_config *cfg, const char *name);

/* Cross-checks every value (also called by tr_config_parse). 0, or -1 with err set. */
/* The record-set spec for st_gpu_start_with: STAGETRACE_GPU_RECORDS with
 * ",every_steps=N" for --gpu-every N ("every_steps=N" alone without it: the
 * sampled capture's kinds), into buf; NULL without --gpu-every
 * (st_gpu_start's own choice). */
const char *tr_gpu_records(const tr_config *cfg, char *buf, size_t size);
int tr_config_validate(tr_config *cfg, char *err, size_t err_size);

/* Appended to --version's parenthesis (main sets "; multi-process: mpi" in MPI builds). */
extern const char *tr_version_extra;

/* "cpu" or "cuda". */
const char *tr_device_name(int device);

#endif
