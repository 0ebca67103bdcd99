/* main.c: the trainer program. Parses the flags (config.c), opens the trace, builds the
 * pipeline (pipeline.c) on the chosen backend, then runs the main loop: it marks step 0, waits
 * for each drafter step, marks it with the tokens the drafters consumed, prints a log line
 * every --log-every steps and, through the trace's window callback, the profile lines every
 * --profile-interval steps. SIGINT/SIGTERM stop the run cleanly: threads are joined, the trace
 * is closed with status "interrupted", and the exit status is 130.
 *
 *   build/trainer --preset tiny --steps 50 --profile-interval 10
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alternate.h"
#include "backend.h"
#include "config.h"
#include "data.h"
#include "dist.h"
#include "layout.h"
#include "pipeline.h"
#include "stagetrace.h"
#include "trace_path.h"

#define EXIT_RUNTIME 1 /* could not do what well-formed flags asked: the trace, the pipeline */
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

/* Called on the trace's writer thread: one whole window per write, so that the block never
 * interleaves with main's log lines. */
void tr_print_window(const struct st_window *w, void *arg)
{
    (void)arg;
    char small[16384];
    size_t need = st_window_format(w, small, sizeof small);
    char *buf = small;
    if (need >= sizeof small) {
        buf = malloc(need + 1);
        if (!buf)
            return;
        st_window_format(w, buf, need + 1);
    }
    fputs(buf, stdout);
    fflush(stdout);
    if (buf != small)
        free(buf);
}

/* The tracer's messages (a disk that fills up, a failed commit, a call from
 * an unregistered thread) go to stderr, one line each. */
static void print_log(int level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    fprintf(stderr, "stagetrace: %s\n", msg);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The process's CPU time (every thread), for --gpu-alternate's CPU per step. */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* runs/<YYYYmmdd-HHMMSS>-<pid>.sqlite, creating runs/ when needed. */
static int default_trace_path(char *out, size_t size, char *err, size_t err_size)
{
    if (mkdir("runs", 0777) && errno != EEXIST) {
        snprintf(err, err_size, "cannot create the trace directory 'runs': %s", strerror(errno));
        return -1;
    }
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, size, "runs/%s-%ld.sqlite", stamp, (long)getpid());
    return 0;
}

static void print_taps(const tr_config *cfg)
{
    for (int i = 0; i < cfg->n_taps; i++)
        printf("%s%d", i ? "," : "", cfg->taps[i]);
}

int main(int argc, char **argv)
{
    tr_config cfg;
    char err[3072]; /* one line, which may name a few paths */
    tr_version_extra = tr_dist_version_note();
    /* Under an MPI launcher every rank finds the same mistake: rank 0 says it. Any other
     * process (torchrun's RANK=1 too) says it itself: no rank 0 of ours may exist. */
    int quiet = tr_dist_env_rank() > 0;
    int rc = tr_config_parse(&cfg, argc, argv, stdout, err, sizeof err);
    if (rc == TR_CONFIG_EXIT)
        return 0;
    if (rc != TR_CONFIG_OK) {
        if (!quiet)
            fprintf(stderr, "trainer: %s\n", err);
        return EXIT_USAGE;
    }
    const tr_backend *backend = tr_backend_find(cfg.device, err, sizeof err);
    if (!backend) {
        if (!quiet)
            fprintf(stderr, "trainer: %s\n", err);
        return EXIT_USAGE;
    }
    int launch = tr_dist_detect(&argc, &argv, err, sizeof err);
    if (launch == TR_DIST_REFUSED) {
        if (!quiet)
            fprintf(stderr, "trainer: %s\n", err);
        return EXIT_USAGE;
    }
    /* One process plays every role: a layout of ranks is a mistake here, never ignored. */
    if (launch == TR_DIST_SINGLE && tr_layout_check_single(&cfg, err, sizeof err)) {
        if (!quiet)
            fprintf(stderr, "trainer: %s\n", err);
        return EXIT_USAGE;
    }
    tr_data *data;
    if (tr_data_open(&data, &cfg, err, sizeof err)) {
        if (!quiet)
            fprintf(stderr, "trainer: %s\n", err);
        return EXIT_USAGE; /* under MPI too: every rank opens the same file */
    }
    if (launch == TR_DIST_MULTI && cfg.gpu_alternate) {
        if (!quiet)
            fprintf(stderr, "trainer: --gpu-alternate measures one process: run it without mpirun\n");
        tr_data_close(data);
        return EXIT_USAGE;
    }
    if (launch == TR_DIST_MULTI)
        return tr_dist_main(&cfg, backend, data, argc, argv);

    char path_buf[4096];
    const char *path = cfg.trace_path;
    int tracing = path || cfg.profile_interval > 0;
    /* --trace DIR/: DIR/rank0.sqlite, as rank 0 of any run (trace_path.h); rank files of an
     * older, larger run there are removed with --overwrite, else they stop the run */
    char removed[2048] = "";
    if (tracing && (path ? tr_trace_make_dir(path, err, sizeof err) ||
                               tr_trace_single_path(path, path_buf, sizeof path_buf, err, sizeof err) ||
                               tr_trace_clear_stale(path, 1, cfg.overwrite, removed,
                                                    sizeof removed, err, sizeof err)
                         : default_trace_path(path_buf, sizeof path_buf, err, sizeof err))) {
        fprintf(stderr, "trainer: %s\n", err);
        tr_data_close(data);
        return EXIT_RUNTIME;
    }
    if (tracing)
        path = path_buf;
    if (removed[0])
        printf("trainer: --overwrite removed the rank files of an older run: %s\n", removed);

    /* Signals go to main only: every other thread (the trace's writer included) is created
     * with them blocked, so the handler never runs on a thread it waits for. */
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);

    st_options opt;
    st_options_init(&opt);
    opt.enabled = tracing;
    opt.path = path;
    opt.overwrite = cfg.overwrite;
    if (cfg.ring_records) opt.ring_records = (uint32_t)cfg.ring_records;
    opt.block_when_full = cfg.block_when_full;
    opt.cpu = cfg.trace_cpu;
    opt.cpu_user_stack = cfg.trace_cpu_user_stack;
    opt.program = "trainer";
    opt.argc = argc;
    opt.argv = argv;
    opt.profile_interval = (uint32_t)cfg.profile_interval;
    /* the tracer makes windows whenever a callback is set */
    opt.on_window = cfg.profile_interval > 0 ? tr_print_window : NULL;
    opt.log = print_log;
    st_trace *trace;
    if (st_open(&trace, &opt) != ST_OK) {
        fprintf(stderr, "trainer: cannot open the trace: %s\n", st_last_error());
        tr_data_close(data);
        return EXIT_RUNTIME; /* the flags were fine; the file system said no */
    }
    /* GPU activity before the backend makes its first CUDA call, so that
     * nothing it launches is missed. */
    char gpu_records[400];
    if (tracing && !cfg.trace_gpu_off && cfg.device == TR_DEVICE_CUDA &&
        st_gpu_start_with(trace, tr_gpu_records(&cfg, gpu_records, sizeof gpu_records)) != ST_OK)
        fprintf(stderr, "trainer: warning: no GPU activity in the trace: %s\n", st_last_error());
    st_install_signal_handlers(trace, 0);
    st_thread_register(trace, "main", "main", -1, 0);
    st_stage step_wait = (st_stage)st_stage_register(trace, "step_wait", ST_WAIT_INPUT);

    tr_pipeline *pipe = NULL;
    if (tr_pipeline_create(&pipe, &cfg, backend, trace, data, err, sizeof err)) {
        fprintf(stderr, "trainer: %s\n", err);
        tr_pipeline_destroy(pipe);
        st_close(trace);
        return EXIT_RUNTIME;
    }
    printf("trainer: %s backend, preset %s: vocab %d dim %d heads %d ffn %d target-layers %d "
           "taps ",
           backend->name, cfg.preset, cfg.vocab, cfg.dim, cfg.heads, cfg.ffn,
           cfg.target_layers);
    print_taps(&cfg);
    printf(", drafter %d %s layer%s, block %d x %d anchors%s, batch %d x %d tokens\n",
           cfg.drafter_layers, cfg.drafter_attention ? "attention" : "MLP-only",
           cfg.drafter_layers > 1 ? "s" : "", cfg.block_size, cfg.anchors,
           cfg.sliding_window ? ", sliding window" : "", cfg.batch, cfg.seq_len);
    printf("trainer: %d target%s, %d drafter%s, queue depth %d, postprocess %s, %ld steps%s%s\n",
           cfg.n_targets, cfg.n_targets > 1 ? "s" : "", cfg.n_drafters,
           cfg.n_drafters > 1 ? "s" : "", cfg.queue_depth, cfg.postprocess_async ? "async" : "sync",
           cfg.steps, tracing ? ", trace " : "", tracing ? path : "");
    fflush(stdout);

    int failed = 0;
    if (tr_pipeline_start(pipe, err, sizeof err)) {
        fprintf(stderr, "trainer: %s\n", err);
        failed = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);

    double t_start = now_s(), t_log = t_start;
    uint64_t tokens_total = 0, tokens_log = 0;
    double loss_log = 0.0;
    int steps_log = 0, have_accuracy = 0;
    double accuracy = 0.0, topk = 0.0;
    long step = 0;
    int profiler_on = 0; /* --profile-steps A-B: capture from the mark of step A-1 to B's */
    tr_alternate alt;
    tr_alternate_init(&alt, cfg.gpu_alternate, cfg.alternate_settle);
    st_step(0, 0);
    if (cfg.profile_first == 1) {
        tr_pipeline_profiler(pipe, 1);
        profiler_on = 1;
    }
    while (!failed && step < cfg.steps && !st_interrupted()) {
        tr_step_report report;
        int got;
        st_begin(step_wait);
        while ((got = tr_pipeline_wait_step(pipe, (uint64_t)step + 1, 100, &report)) == 0 &&
               !st_interrupted()) {
        }
        st_end(step_wait);
        if (got < 0) {
            fprintf(stderr, "trainer: %s\n", tr_pipeline_error(pipe));
            failed = 1;
            break;
        }
        if (got == 0)
            break; /* interrupted */
        step++;
        st_step((uint64_t)step, report.tokens);
        if (cfg.gpu_alternate) {
            int act = tr_alternate_at_step(&alt, step, now_s(), cpu_s());
            if (act < 0 ||
                (act == TR_ALT_PAUSE && st_gpu_pause(trace) != ST_OK) ||
                (act == TR_ALT_RESUME && st_gpu_resume(trace) != ST_OK)) {
                fprintf(stderr, "trainer: --gpu-alternate: %s\n",
                        act < 0 ? "out of memory for the blocks" : st_last_error());
                failed = 1;
                break;
            }
        }
        if (cfg.profile_first && step == cfg.profile_first - 1 && !profiler_on) {
            tr_pipeline_profiler(pipe, 1);
            profiler_on = 1;
        } else if (profiler_on && step == cfg.profile_last) {
            tr_pipeline_profiler(pipe, 0);
            profiler_on = 0;
        }
        tokens_total += report.tokens;
        tokens_log += report.tokens;
        loss_log += report.loss_sum / cfg.n_drafters;
        steps_log++;
        if (report.n_accuracy) {
            have_accuracy = 1;
            accuracy = report.accuracy_sum / report.n_accuracy;
            topk = report.topk_sum / report.n_accuracy;
        }
        if (step % cfg.log_every == 0 || step == cfg.steps) {
            /* one write per line: the writer thread prints profile blocks meanwhile */
            double t = now_s(), dt = t - t_log;
            char line[256], metrics[64];
            if (have_accuracy)
                snprintf(metrics, sizeof metrics, "acc %.3f top%d %.3f", accuracy, cfg.topk, topk);
            else
                snprintf(metrics, sizeof metrics, "acc - top%d -", cfg.topk);
            snprintf(line, sizeof line, "step %ld loss %.3f %s tok/s %.0f queue %d/%d\n", step,
                     loss_log / steps_log, metrics, dt > 0 ? tokens_log / dt : 0.0,
                     tr_pipeline_queue_depth(pipe), cfg.queue_depth);
            fputs(line, stdout);
            fflush(stdout);
            t_log = t;
            tokens_log = 0;
            loss_log = 0.0;
            steps_log = 0;
        }
    }
    double elapsed = now_s() - t_start;
    int interrupted = st_interrupted();
    if (cfg.gpu_alternate) {
        char line[512];
        tr_alternate_summary(&alt, line, sizeof line);
        printf("trainer: %s\n", line);
        tr_alternate_free(&alt);
    }
    if (profiler_on)
        tr_pipeline_profiler(pipe, 0);
    tr_pipeline_stop(pipe);
    tr_pipeline_destroy(pipe);
    uint64_t dropped = st_dropped(trace);
    if (st_close(trace) != ST_OK) {
        fprintf(stderr, "trainer: writing the trace failed: %s\n", st_last_error());
        failed = 1;
    }
    printf("trainer: %s after %ld step%s, %llu tokens in %.2f s (%.0f tok/s)",
           interrupted ? "interrupted" : failed ? "failed" : "done", step, step == 1 ? "" : "s",
           (unsigned long long)tokens_total, elapsed, elapsed > 0 ? tokens_total / elapsed : 0.0);
    if (tracing)
        printf("; trace %s (%llu events dropped)", path, (unsigned long long)dropped);
    printf("\n");
    if (failed)
        return EXIT_RUNTIME;
    return interrupted ? EXIT_INTERRUPTED : 0;
}
