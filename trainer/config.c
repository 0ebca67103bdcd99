/* config.c: flags, presets and validation of the trainer (see config.h). The flag table below
 * is also the --help text, so the two cannot drift apart. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "stagetrace.h"

#define MAX_STEPS 1000000000L
#define MAX_PROFILE_INTERVAL 100000000L /* the tracer's limit */
#define MAX_DELAY_US 10000000L

static void set_error(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

const char *tr_version_extra = "";

const char *tr_device_name(int device)
{
    return device == TR_DEVICE_CUDA ? "cuda" : "cpu";
}

/* Spreads n taps evenly over the layers, first and last included. */
static void default_taps(tr_config *cfg, int n)
{
    if (n > cfg->target_layers)
        n = cfg->target_layers;
    if (n < 1)
        n = 1;
    cfg->n_taps = n;
    for (int i = 0; i < n; i++)
        cfg->taps[i] = n == 1 ? cfg->target_layers - 1 : i * (cfg->target_layers - 1) / (n - 1);
}

int tr_config_preset(tr_config *cfg, const char *name)
{
    int n_taps;
    if (!strcmp(name, "tiny")) {
        cfg->vocab = 256, cfg->dim = 64, cfg->heads = 4, cfg->ffn = 128, cfg->target_layers = 2;
        n_taps = 2;
        cfg->drafter_layers = 1, cfg->block_size = 8, cfg->anchors = 4;
        cfg->seq_len = 128, cfg->batch = 2;
        cfg->lr = 3e-3f;
    } else if (!strcmp(name, "small")) {
        cfg->vocab = 512, cfg->dim = 128, cfg->heads = 4, cfg->ffn = 352, cfg->target_layers = 4;
        n_taps = 3;
        cfg->drafter_layers = 2, cfg->block_size = 8, cfg->anchors = 8;
        cfg->seq_len = 256, cfg->batch = 4;
        cfg->lr = 2e-3f;
    } else if (!strcmp(name, "h200")) {
        cfg->vocab = 32000, cfg->dim = 2048, cfg->heads = 16, cfg->ffn = 5632;
        cfg->target_layers = 24;
        n_taps = 5;
        cfg->drafter_layers = 2, cfg->block_size = 16, cfg->anchors = 64;
        cfg->seq_len = 2048, cfg->batch = 8;
        cfg->lr = 6e-4f;
    } else {
        return -1;
    }
    cfg->preset = name;
    default_taps(cfg, n_taps);
    return 0;
}

static void defaults(tr_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->device = TR_DEVICE_CPU;
    tr_config_preset(cfg, "tiny");
    cfg->drafter_attention = 1;
    cfg->sliding_window = 0;
    cfg->steps = 100;
    cfg->queue_depth = 60;
    cfg->batch_queue_depth = 4;
    cfg->n_targets = 1;
    cfg->n_drafters = 1;
    cfg->seed = 1234;
    cfg->weight_decay = 0.01f;
    cfg->clip = 1.0f;
    cfg->beta1 = 0.9f, cfg->beta2 = 0.95f, cfg->adam_eps = 1e-8f;
    cfg->profile_interval = 0;
    cfg->metrics_every = 10;
    cfg->log_every = 10;
    cfg->alternate_settle = 10;
    cfg->topk = 4;
}

/* ---- value parsers: each returns 0, or -1 with err set ------------------------------------ */

static int parse_long(const char *flag, const char *text, long lo, long hi, long *out, char *err,
                      size_t n)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        set_error(err, n, "%s expects an integer in %ld..%ld, got '%s'", flag, lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *text, long lo, long hi, int *out, char *err,
                     size_t n)
{
    long v;
    if (parse_long(flag, text, lo, hi, &v, err, n))
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char *flag, const char *text, double lo, int lo_open, double hi,
                       float *out, char *err, size_t n)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) {
        set_error(err, n, "%s expects a number in %s%g..%g, got '%s'", flag, lo_open ? "(" : "",
                  lo, hi, text);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_seed(const char *text, uint64_t *out, char *err, size_t n)
{
    char *end;
    errno = 0;
    if (text[0] == '-' || text[0] == '+') {
        set_error(err, n, "--seed expects an unsigned integer, got '%s'", text);
        return -1;
    }
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end) {
        set_error(err, n, "--seed expects an unsigned integer, got '%s'", text);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* A comma list of integers in lo..hi, distinct, at most max entries. */
/* dup: whether a value may appear more than once (a device may hold several threads of a
 * role; a tap may not be taken twice). */
static int parse_list(const char *flag, const char *text, int lo, int hi, int max, int dup,
                      int *out, int *count, char *err, size_t n)
{
    int k = 0;
    const char *p = text;
    if (!*p) {
        set_error(err, n, "%s expects a comma-separated list of integers, got ''", flag);
        return -1;
    }
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || v < lo || v > hi) {
            set_error(err, n, "%s expects a comma-separated list of integers in %d..%d, got '%s'",
                      flag, lo, hi, text);
            return -1;
        }
        if (k == max) {
            set_error(err, n, "%s lists more than %d entries", flag, max);
            return -1;
        }
        for (int i = 0; i < k && !dup; i++)
            if (out[i] == v) {
                set_error(err, n, "%s lists %ld twice", flag, v);
                return -1;
            }
        out[k++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) /* trailing comma: "3," means the list {3} */
            break;
    }
    *count = k;
    return 0;
}

/* "N" (no comma): N threads on devices 0..N-1; "a,b,...": those devices. */
static int parse_devices(const char *flag, const char *text, int *devices, int *count, char *err,
                         size_t n)
{
    if (!strchr(text, ',')) {
        int k;
        if (parse_int(flag, text, 1, TR_MAX_DEVICES, &k, err, n)) {
            if (strcmp(text, "0") == 0) /* meant device 0: a list of one needs its comma */
                set_error(err, n, "%s 0 is a count of no devices; for device 0 alone write '0,'",
                          flag);
            else
                set_error(err, n,
                          "%s expects a count in 1..%d or a comma list of device ids, got '%s'",
                          flag, TR_MAX_DEVICES, text);
            return -1;
        }
        for (int i = 0; i < k; i++)
            devices[i] = i;
        *count = k;
        return 0;
    }
    return parse_list(flag, text, 0, TR_MAX_DEVICES - 1, TR_MAX_DEVICES, 1, devices, count, err,
                      n);
}

/* "targets=T,drafters=D", the two keys in either order, each once. */
static int parse_layout(const char *text, int *targets, int *drafters, char *err, size_t n)
{
    int t = 0, d = 0;
    const char *p = text;
    while (*p) {
        int *slot = NULL;
        if (!strncmp(p, "targets=", 8)) {
            slot = &t;
            p += 8;
        } else if (!strncmp(p, "drafters=", 9)) {
            slot = &d;
            p += 9;
        }
        char *end = (char *)p;
        long v = 0;
        if (slot && !*slot) {
            errno = 0;
            v = strtol(p, &end, 10);
        }
        if (!slot || *slot || errno || end == p || (*end && *end != ',') || v < 1 ||
            v > TR_MAX_RANKS || (*end == ',' && !end[1])) {
            set_error(err, n, "--layout expects targets=T,drafters=D with T and D in 1..%d, got '%s'",
                      TR_MAX_RANKS, text);
            return -1;
        }
        *slot = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!t || !d) {
        set_error(err, n, "--layout expects targets=T,drafters=D with T and D in 1..%d, got '%s'",
                  TR_MAX_RANKS, text);
        return -1;
    }
    *targets = t;
    *drafters = d;
    return 0;
}

/* "RANK:STEP", RANK >= 0, STEP >= 1. */
static int parse_die_at(const char *text, int *rank, long *step, char *err, size_t n)
{
    char *end;
    errno = 0;
    long r = strtol(text, &end, 10);
    int ok = !errno && end != text && *end == ':' && r >= 0 && r < TR_MAX_RANKS;
    long s = 0;
    if (ok) {
        const char *p = end + 1;
        s = strtol(p, &end, 10);
        ok = !errno && end != p && !*end && s >= 1 && s <= MAX_STEPS;
    }
    if (!ok) {
        set_error(err, n, "--test-die-at expects RANK:STEP (rank 0..%d, step >= 1), got '%s'",
                  TR_MAX_RANKS - 1, text);
        return -1;
    }
    *rank = (int)r;
    *step = s;
    return 0;
}

/* "A-B" with 1 <= A <= B (or "A": the one step A). */
static int parse_step_range(const char *flag, const char *text, long *first, long *last,
                            char *err, size_t n)
{
    char *end;
    errno = 0;
    long a = strtol(text, &end, 10), b = a;
    int ok = !errno && end != text && a >= 1 && a <= MAX_STEPS;
    if (ok && *end == '-') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        ok = !errno && end != p && b >= a && b <= MAX_STEPS;
    }
    if (!ok || *end) {
        set_error(err, n, "%s expects a step range A-B with 1 <= A <= B, got '%s'", flag, text);
        return -1;
    }
    *first = a;
    *last = b;
    return 0;
}

static int parse_choice(const char *flag, const char *text, const char *a, const char *b,
                        int *out, char *err, size_t n)
{
    if (!strcmp(text, a))
        *out = 0;
    else if (!strcmp(text, b))
        *out = 1;
    else {
        set_error(err, n, "%s expects %s or %s, got '%s'", flag, a, b, text);
        return -1;
    }
    return 0;
}

/* ---- the flag table ---------------------------------------------------------------------- */

enum {
    F_DEVICE = 256, F_PRESET, F_VOCAB, F_DIM, F_HEADS, F_FFN, F_TARGET_LAYERS, F_TAPS,
    F_DRAFTER_LAYERS, F_DRAFTER_ATTENTION, F_BLOCK_SIZE, F_ANCHORS, F_SLIDING_WINDOW,
    F_STEPS, F_SEQ_LEN, F_BATCH, F_QUEUE_DEPTH, F_TARGET_GPUS, F_DRAFTER_GPUS, F_POSTPROCESS,
    F_DATA, F_SEED, F_LR, F_WEIGHT_DECAY, F_CLIP, F_PROFILE_INTERVAL, F_METRICS_EVERY,
    F_LOG_EVERY, F_TRACE, F_TRACE_GPU, F_OVERWRITE, F_TARGET_DELAY, F_DRAFTER_DELAY, F_HELP, F_VERSION,
    F_PROFILE_STEPS, F_RING_RECORDS, F_BLOCK_WHEN_FULL, F_LAYOUT, F_TARGET_RANKS,
    F_DRAFTER_RANKS, F_TEST_DIE_AT, F_TRACE_CPU, F_TRACE_CPU_USER_STACK, F_GPU_ALTERNATE, F_GPU_EVERY,
    F_ALTERNATE_SETTLE,
};

static const struct option long_options[] = {
    {"device", required_argument, 0, F_DEVICE},
    {"preset", required_argument, 0, F_PRESET},
    {"vocab", required_argument, 0, F_VOCAB},
    {"dim", required_argument, 0, F_DIM},
    {"heads", required_argument, 0, F_HEADS},
    {"ffn", required_argument, 0, F_FFN},
    {"target-layers", required_argument, 0, F_TARGET_LAYERS},
    {"taps", required_argument, 0, F_TAPS},
    {"drafter-layers", required_argument, 0, F_DRAFTER_LAYERS},
    {"drafter-attention", required_argument, 0, F_DRAFTER_ATTENTION},
    {"block-size", required_argument, 0, F_BLOCK_SIZE},
    {"anchors", required_argument, 0, F_ANCHORS},
    {"sliding-window", required_argument, 0, F_SLIDING_WINDOW},
    {"steps", required_argument, 0, F_STEPS},
    {"seq-len", required_argument, 0, F_SEQ_LEN},
    {"batch", required_argument, 0, F_BATCH},
    {"queue-depth", required_argument, 0, F_QUEUE_DEPTH},
    {"target-gpus", required_argument, 0, F_TARGET_GPUS},
    {"drafter-gpus", required_argument, 0, F_DRAFTER_GPUS},
    {"postprocess", required_argument, 0, F_POSTPROCESS},
    {"data", required_argument, 0, F_DATA},
    {"seed", required_argument, 0, F_SEED},
    {"lr", required_argument, 0, F_LR},
    {"weight-decay", required_argument, 0, F_WEIGHT_DECAY},
    {"clip", required_argument, 0, F_CLIP},
    {"profile-interval", required_argument, 0, F_PROFILE_INTERVAL},
    {"profile-steps", required_argument, 0, F_PROFILE_STEPS},
    {"metrics-every", required_argument, 0, F_METRICS_EVERY},
    {"log-every", required_argument, 0, F_LOG_EVERY},
    {"trace", required_argument, 0, F_TRACE},
    {"trace-gpu", required_argument, 0, F_TRACE_GPU},
    {"trace-cpu", no_argument, 0, F_TRACE_CPU},
    {"trace-cpu-user-stack", required_argument, 0, F_TRACE_CPU_USER_STACK},
    {"gpu-alternate", required_argument, 0, F_GPU_ALTERNATE},
    {"gpu-every", required_argument, 0, F_GPU_EVERY},
    {"alternate-settle", required_argument, 0, F_ALTERNATE_SETTLE},
    {"overwrite", no_argument, 0, F_OVERWRITE},
    {"ring-records", required_argument, 0, F_RING_RECORDS},
    {"block-when-full", no_argument, 0, F_BLOCK_WHEN_FULL},
    {"target-delay-us", required_argument, 0, F_TARGET_DELAY},
    {"drafter-delay-us", required_argument, 0, F_DRAFTER_DELAY},
    {"layout", required_argument, 0, F_LAYOUT},
    {"target-ranks", required_argument, 0, F_TARGET_RANKS},
    {"drafter-ranks", required_argument, 0, F_DRAFTER_RANKS},
    {"test-die-at", required_argument, 0, F_TEST_DIE_AT},
    {"help", no_argument, 0, F_HELP},
    {"version", no_argument, 0, F_VERSION},
    {0, 0, 0, 0},
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: trainer [options]\n"
        "Trains a DFlash-style drafter on the hidden states of a frozen target model, with\n"
        "loader -> target threads -> hidden-state queue -> drafter threads, traced by stagetrace.\n"
        "\n"
        "device and sizes\n"
        "  --device cpu|cuda          backend (default cpu)\n"
        "  --preset tiny|small|h200   model and batch dimensions (default tiny); the flags\n"
        "                             below override it, wherever --preset appears\n"
        "  --vocab N --dim N --heads N --ffn N --target-layers N\n"
        "                             target model (dim/heads must be even)\n"
        "  --taps L,L,...             target layers whose outputs the drafter reads (0-based;\n"
        "                             default: spread over the layers, first and last included)\n"
        "  --drafter-layers N         drafter blocks (default 1 tiny, 2 small/h200)\n"
        "  --drafter-attention on|off blocks with DFlash attention + MLP, or MLP only (default on)\n"
        "  --block-size N             tokens per drafted block (default 8, h200 16)\n"
        "  --anchors N                blocks sampled per sequence (default 4/8/64)\n"
        "  --sliding-window N         drafter sees at most N context tokens, 0 = all (default 0)\n"
        "  --seq-len N --batch N      tokens per sequence, sequences per batch\n"
        "\n"
        "pipeline\n"
        "  --steps N                  optimizer steps of the drafters (default 100)\n"
        "  --target-gpus N|I,J,...    target threads: a count, or device ids, one per thread\n"
        "                             (a device may repeat: 0,0 is two on device 0; default 1)\n"
        "  --drafter-gpus N|I,J,...   drafter threads, all-reduced together (default 1); on\n"
        "                             CUDA, all on distinct devices (NCCL) or all on one\n"
        "  --queue-depth N            hidden-state queue capacity (default 60)\n"
        "  --trace-gpu on|off         record kernels, copies and syncs (CUPTI) into the trace\n"
        "                             (default on when tracing with the cuda backend)\n"
        "  --trace-cpu                record each thread's context switches and sampled call\n"
        "                             stacks (Linux perf events, 199 Hz of CPU time) into the\n"
        "                             trace (when tracing; refused perf events leave the\n"
        "                             reason in the trace)\n"
        "  --trace-cpu-user-stack B   with --trace-cpu: copy B bytes of user stack with each\n"
        "                             sample (8192..65536) and unwind it with DWARF CFI, for\n"
        "                             libraries without frame pointers (default 0: off)\n"
        "  --postprocess sync|async   pack and copy taps on the target thread, or on a post\n"
        "                             thread per target (default sync)\n"
        "  --data PATH                train on a text file (byte tokens, paragraphs are\n"
        "                             documents); default: seeded synthetic documents\n"
        "  --seed N                   seed of weights, data and anchors (default 1234)\n"
        "  --lr X                     AdamW learning rate (default 3e-3 tiny, 2e-3 small,\n"
        "                             6e-4 h200)\n"
        "  --weight-decay X --clip X  AdamW decay on matrices (default 0.01), global\n"
        "                             gradient-norm clip (default 1, 0 = off)\n"
        "\n"
        "reporting\n"
        "  --log-every N              a log line every N steps (default 10)\n"
        "  --metrics-every N          accuracy and top-4 every N steps (default 10)\n"
        "  --profile-interval N       profile lines every N steps, 0 = off (default 0)\n"
        "  --trace PATH               trace file (default runs/<time>-<pid>.sqlite when\n"
        "                             --profile-interval > 0; no trace otherwise); DIR/ (made\n"
        "                             when missing) or an existing directory:\n"
        "                             DIR/rank<r>.sqlite, rank0 for one\n"
        "                             process; NAME.sqlite under N processes: NAME.rank<r>.sqlite\n"
        "  --profile-steps A-B        cuda: cudaProfilerStart before step A, Stop after step B\n"
        "                             (nsys profile --capture-range=cudaProfilerApi)\n"
        "  --gpu-alternate N          cuda, one process: what GPU recording costs, measured in\n"
        "                             the run: after N warm-up steps, GPU recording paused and\n"
        "                             resumed in blocks of N steps, in pairs of alternating\n"
        "                             order; prints the rate recorded / paused with its 95 %%\n"
        "                             interval (0 = off, the default)\n"
        "  --alternate-settle K       steps left out at the start of each block (default 10)\n"
        "  --gpu-every N              cuda: sampled GPU capture, recording on from each step\n"
        "                             mark k with k %% N == 0 to the next mark and off between\n"
        "                             (every_steps=N; GPU figures are of the recorded steps)\n"
        "  --overwrite                replace an existing trace file (never one that another\n"
        "                             process is still writing), and remove the rank files of\n"
        "                             an older run with more ranks there (rank<N>.sqlite, N >=\n"
        "                             processes: without it they stop the run)\n"
        "  --ring-records N           per-thread trace ring, a power of two from 64 to\n"
        "                             268435456 slots of 16 bytes (default 262144)\n"
        "  --block-when-full          a thread whose ring is full waits for the writer\n"
        "                             instead of dropping the event (default: drop, count)\n"
        "  --target-delay-us N        test/demo knob: busy-wait N us in each target forward\n"
        "  --drafter-delay-us N       test/demo knob: busy-wait N us in each drafter forward\n"
        "\n"
        "multi-process runs (mpirun -np N build/trainer ...; README, Multi-process runs)\n"
        "  --layout targets=T,drafters=D\n"
        "                             ranks 0..T-1 are targets, T..T+D-1 drafters; T+D must\n"
        "                             be the number of processes (default: the first half,\n"
        "                             rounded down, are targets, the others drafters)\n"
        "  --target-ranks R,R,... --drafter-ranks R,R,...\n"
        "                             the same, rank by rank (one list alone: the other\n"
        "                             role gets every rank it does not name)\n"
        "  --test-die-at RANK:STEP    test knob: rank RANK kills itself (SIGKILL) at step STEP\n"
        "                             These need 2 processes or more: in one process (no\n"
        "                             launcher, mpirun -np 1, no MPI) each is a bad flag.\n"
        "  --help, --version\n"
        "\n"
        "Exit status: 0 done; 1 runtime failure (among them a trace that cannot be created:\n"
        "an unwritable directory, an existing file or older rank files without --overwrite,\n"
        "a file another process is writing); 2 bad flags; 130 stopped by SIGINT/SIGTERM (the\n"
        "trace is then flushed and says status = interrupted). Under mpirun these are each\n"
        "rank's; Open MPI's mpirun returns 137 after a rank is killed, 1 after SIGTERM or\n"
        "SIGINT to mpirun (README, Multi-process runs).\n");
}

static int apply(tr_config *cfg, int c, const char *arg, char *err, size_t n)
{
    long v;
    int choice;
    switch (c) {
    case F_DEVICE:
        if (parse_choice("--device", arg, "cpu", "cuda", &choice, err, n)) return -1;
        cfg->device = choice ? TR_DEVICE_CUDA : TR_DEVICE_CPU;
        return 0;
    case F_PRESET: return 0; /* applied before every other flag */
    case F_VOCAB: return parse_int("--vocab", arg, 2, 1 << 20, &cfg->vocab, err, n);
    case F_DIM: return parse_int("--dim", arg, 2, 1 << 16, &cfg->dim, err, n);
    case F_HEADS: return parse_int("--heads", arg, 1, 1024, &cfg->heads, err, n);
    case F_FFN: return parse_int("--ffn", arg, 1, 1 << 18, &cfg->ffn, err, n);
    case F_TARGET_LAYERS:
        return parse_int("--target-layers", arg, 1, 1024, &cfg->target_layers, err, n);
    case F_TAPS:
        cfg->taps_given = 1;
        return parse_list("--taps", arg, 0, INT_MAX, TR_MAX_TAPS, 0, cfg->taps, &cfg->n_taps, err, n);
    case F_DRAFTER_LAYERS:
        return parse_int("--drafter-layers", arg, 1, 64, &cfg->drafter_layers, err, n);
    case F_DRAFTER_ATTENTION:
        if (parse_choice("--drafter-attention", arg, "off", "on", &choice, err, n)) return -1;
        cfg->drafter_attention = choice;
        return 0;
    case F_BLOCK_SIZE: return parse_int("--block-size", arg, 1, 1024, &cfg->block_size, err, n);
    case F_ANCHORS: return parse_int("--anchors", arg, 1, 4096, &cfg->anchors, err, n);
    case F_SLIDING_WINDOW:
        return parse_int("--sliding-window", arg, 0, 1 << 20, &cfg->sliding_window, err, n);
    case F_STEPS: return parse_long("--steps", arg, 1, MAX_STEPS, &cfg->steps, err, n);
    case F_SEQ_LEN: return parse_int("--seq-len", arg, 2, 1 << 20, &cfg->seq_len, err, n);
    case F_BATCH: return parse_int("--batch", arg, 1, 4096, &cfg->batch, err, n);
    case F_QUEUE_DEPTH:
        return parse_int("--queue-depth", arg, 1, 100000, &cfg->queue_depth, err, n);
    case F_TARGET_GPUS:
        return parse_devices("--target-gpus", arg, cfg->target_devices, &cfg->n_targets, err, n);
    case F_DRAFTER_GPUS:
        return parse_devices("--drafter-gpus", arg, cfg->drafter_devices, &cfg->n_drafters, err,
                             n);
    case F_POSTPROCESS:
        return parse_choice("--postprocess", arg, "sync", "async", &cfg->postprocess_async, err,
                            n);
    case F_DATA:
        if (!*arg) {
            set_error(err, n, "--data expects a file path, got ''");
            return -1;
        }
        cfg->data_path = arg;
        return 0;
    case F_SEED: return parse_seed(arg, &cfg->seed, err, n);
    case F_LR: return parse_float("--lr", arg, 0.0, 1, 10.0, &cfg->lr, err, n);
    case F_WEIGHT_DECAY:
        return parse_float("--weight-decay", arg, 0.0, 0, 10.0, &cfg->weight_decay, err, n);
    case F_CLIP: return parse_float("--clip", arg, 0.0, 0, 1e6, &cfg->clip, err, n);
    case F_PROFILE_INTERVAL:
        return parse_long("--profile-interval", arg, 0, MAX_PROFILE_INTERVAL,
                          &cfg->profile_interval, err, n);
    case F_METRICS_EVERY:
        return parse_long("--metrics-every", arg, 1, MAX_STEPS, &cfg->metrics_every, err, n);
    case F_LOG_EVERY: return parse_long("--log-every", arg, 1, MAX_STEPS, &cfg->log_every, err, n);
    case F_TRACE:
        if (!*arg) {
            set_error(err, n, "--trace expects a file path, got ''");
            return -1;
        }
        cfg->trace_path = arg;
        return 0;
    case F_TRACE_GPU: return parse_choice("--trace-gpu", arg, "on", "off", &cfg->trace_gpu_off, err, n);
    case F_OVERWRITE: cfg->overwrite = 1; return 0;
    case F_TRACE_CPU: cfg->trace_cpu = 1; return 0;
    case F_TRACE_CPU_USER_STACK: {
        long v;
        if (parse_long("--trace-cpu-user-stack", arg, 0, 65536, &v, err, n)) return -1;
        if (v && v < 8192) {
            set_error(err, n, "--trace-cpu-user-stack expects 0 (off) or 8192..65536 bytes, got '%s'", arg);
            return -1;
        }
        cfg->trace_cpu_user_stack = (uint32_t)v;
        return 0;
    }
    case F_GPU_ALTERNATE: return parse_long("--gpu-alternate", arg, 0, 1000000, &cfg->gpu_alternate, err, n);
    case F_GPU_EVERY: return parse_long("--gpu-every", arg, 1, 1000000, &cfg->gpu_every, err, n);
    case F_ALTERNATE_SETTLE:
        return parse_long("--alternate-settle", arg, 0, 999999, &cfg->alternate_settle, err, n);
    case F_RING_RECORDS:
        if (parse_long("--ring-records", arg, 64, 1L << 28, &v, err, n)) return -1;
        if (v & (v - 1)) {
            set_error(err, n, "--ring-records expects a power of two from 64 to 268435456, got '%s'", arg);
            return -1;
        }
        cfg->ring_records = v;
        return 0;
    case F_BLOCK_WHEN_FULL: cfg->block_when_full = 1; return 0;
    case F_PROFILE_STEPS: return parse_step_range("--profile-steps", arg, &cfg->profile_first,
                                                  &cfg->profile_last, err, n);
    case F_TARGET_DELAY:
        if (parse_long("--target-delay-us", arg, 0, MAX_DELAY_US, &v, err, n)) return -1;
        cfg->target_delay_us = v;
        return 0;
    case F_DRAFTER_DELAY:
        if (parse_long("--drafter-delay-us", arg, 0, MAX_DELAY_US, &v, err, n)) return -1;
        cfg->drafter_delay_us = v;
        return 0;
    case F_LAYOUT:
        return parse_layout(arg, &cfg->layout_targets, &cfg->layout_drafters, err, n);
    case F_TARGET_RANKS:
        return parse_list("--target-ranks", arg, 0, TR_MAX_RANKS - 1, TR_MAX_RANKS, 0,
                          cfg->target_ranks, &cfg->n_target_ranks, err, n);
    case F_DRAFTER_RANKS:
        return parse_list("--drafter-ranks", arg, 0, TR_MAX_RANKS - 1, TR_MAX_RANKS, 0,
                          cfg->drafter_ranks, &cfg->n_drafter_ranks, err, n);
    case F_TEST_DIE_AT: return parse_die_at(arg, &cfg->die_rank, &cfg->die_step, err, n);
    }
    set_error(err, n, "internal: unhandled option %d", c);
    return -1;
}

const char *tr_gpu_records(const tr_config *cfg, char *buf, size_t size)
{
    if (!cfg->gpu_every) return NULL;
    const char *env = getenv("STAGETRACE_GPU_RECORDS");
    if (env && env[0])
        snprintf(buf, size, "%s,every_steps=%ld", env, cfg->gpu_every);
    else
        snprintf(buf, size, "every_steps=%ld", cfg->gpu_every); /* the sampled capture's own kinds */
    return buf;
}

int tr_config_validate(tr_config *cfg, char *err, size_t n)
{
    if (cfg->dim % cfg->heads) {
        set_error(err, n, "--dim %d is not a multiple of --heads %d", cfg->dim, cfg->heads);
        return -1;
    }
    if ((cfg->dim / cfg->heads) % 2) {
        set_error(err, n, "--dim / --heads must be even for rotary embeddings, got %d / %d = %d",
                  cfg->dim, cfg->heads, cfg->dim / cfg->heads);
        return -1;
    }
    if (!cfg->taps_given)
        default_taps(cfg, cfg->n_taps);
    for (int i = 0; i < cfg->n_taps; i++)
        if (cfg->taps[i] >= cfg->target_layers) {
            set_error(err, n, "--taps: layer %d is out of range (the target has %d layers: 0..%d)",
                      cfg->taps[i], cfg->target_layers, cfg->target_layers - 1);
            return -1;
        }
    if (cfg->block_size >= cfg->seq_len) {
        set_error(err, n, "--block-size %d must be smaller than --seq-len %d", cfg->block_size,
                  cfg->seq_len);
        return -1;
    }
    if (cfg->sliding_window > cfg->seq_len) {
        set_error(err, n, "--sliding-window %d exceeds --seq-len %d (0 turns it off)",
                  cfg->sliding_window, cfg->seq_len);
        return -1;
    }
    if (cfg->data_path && cfg->vocab < 256) {
        set_error(err, n, "--data uses byte tokens, so --vocab must be at least 256 (got %d)",
                  cfg->vocab);
        return -1;
    }
    if (cfg->topk > cfg->vocab)
        cfg->topk = cfg->vocab;
    if (cfg->layout_targets && (cfg->n_target_ranks || cfg->n_drafter_ranks)) {
        set_error(err, n, "--layout and --target-ranks/--drafter-ranks say the same thing: give "
                          "one of them");
        return -1;
    }
    for (int i = 0; i < cfg->n_target_ranks; i++)
        for (int k = 0; k < cfg->n_drafter_ranks; k++)
            if (cfg->target_ranks[i] == cfg->drafter_ranks[k]) {
                set_error(err, n, "rank %d is in both --target-ranks and --drafter-ranks: each "
                                  "rank plays one role", cfg->target_ranks[i]);
                return -1;
            }
    if (cfg->trace_cpu_user_stack && !cfg->trace_cpu) {
        set_error(err, n, "--trace-cpu-user-stack needs --trace-cpu (it unwinds the CPU capture's samples)");
        return -1;
    }
    if (cfg->gpu_alternate) {
        if (cfg->device != TR_DEVICE_CUDA || cfg->trace_gpu_off ||
            !(cfg->trace_path || cfg->profile_interval > 0)) {
            set_error(err, n, "--gpu-alternate pauses and resumes GPU recording: it needs --device cuda, "
                              "a trace (--trace or --profile-interval) and --trace-gpu on");
            return -1;
        }
        if (cfg->alternate_settle >= cfg->gpu_alternate) {
            set_error(err, n, "--alternate-settle %ld must be less than --gpu-alternate %ld",
                      cfg->alternate_settle, cfg->gpu_alternate);
            return -1;
        }
    }
    if (cfg->gpu_every && (cfg->device != TR_DEVICE_CUDA || cfg->trace_gpu_off ||
                           !(cfg->trace_path || cfg->profile_interval > 0))) {
        set_error(err, n, "--gpu-every samples the GPU recording by steps: it needs --device cuda, a trace "
                          "(--trace or --profile-interval) and --trace-gpu on");
        return -1;
    }
    if (cfg->device == TR_DEVICE_CPU) {
        /* threads, not devices: ids are only labels, but each role needs distinct ones */
    }
    return 0;
}

int tr_config_parse(tr_config *cfg, int argc, char **argv, FILE *out, char *err, size_t n)
{
    defaults(cfg);
    opterr = 0;
    /* Pass 1: the preset, so that every other flag overrides it wherever it appears. */
    optind = 0;
    int c;
    const char *preset = NULL;
    while ((c = getopt_long(argc, argv, ":", long_options, NULL)) != -1)
        if (c == F_PRESET)
            preset = optarg;
    if (preset && tr_config_preset(cfg, preset)) {
        set_error(err, n, "--preset expects tiny, small or h200, got '%s'", preset);
        return TR_CONFIG_ERROR;
    }
    /* Pass 2: everything, in order. */
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (c == ':') {
            set_error(err, n, "option '%s' needs a value (see --help)", flag);
            return TR_CONFIG_ERROR;
        }
        if (c == '?') {
            set_error(err, n, "unknown option '%s' (see --help)", flag);
            return TR_CONFIG_ERROR;
        }
        if (c == F_HELP) {
            usage(out);
            return TR_CONFIG_EXIT;
        }
        if (c == F_VERSION) {
            fprintf(out, "trainer %s (stagetrace %s; backends: cpu%s%s)\n", TR_VERSION,
                    ST_VERSION_STRING,
#ifdef TR_HAVE_CUDA_BACKEND
                    ", cuda",
#else
                    "",
#endif
                    tr_version_extra);
            return TR_CONFIG_EXIT;
        }
        if (apply(cfg, c, optarg, err, n))
            return TR_CONFIG_ERROR;
    }
    if (optind < argc) {
        set_error(err, n, "unexpected argument '%s' (see --help)", argv[optind]);
        return TR_CONFIG_ERROR;
    }
    if (tr_config_validate(cfg, err, n))
        return TR_CONFIG_ERROR;
    return TR_CONFIG_OK;
}
