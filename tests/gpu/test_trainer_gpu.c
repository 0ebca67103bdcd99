/* test_trainer_gpu.c: the trainer's CUDA backend, end to end: runs the real program
 * ($ST_BUILD/trainer, default build/trainer) with --device cuda and checks what it printed and
 * the trace it wrote (through the reader), like tests/test_trainer.c does for the CPU backend.
 *
 * Usage: test_trainer_gpu [1gpu|2gpu]   (default: every group this machine has the GPUs for)
 *  1gpu  - the CPU and CUDA backends agree on the first step's loss (seed 7, same
 *          initialisation: |cuda - cpu| <= 2% of cpu, i.e. bf16 tolerance) for the tiny and
 *          small presets, for sizes that take the kernels' scalar paths with the MLP-only
 *          drafter, and with a sliding window; run with KC_DEBUG_SYNC=1 so that a faulting
 *          kernel is named by its launch;
 *        - co-located on GPU 0 (target and drafter on one device), tiny preset, seed 1234,
 *          --postprocess async, 50 steps: the loss of the last 10 steps is at least 0.4 below
 *          that of the first 10 (CPU backend, same flags: 4.56 -> 3.71) and the top-1 accuracy
 *          ends above 0.1; the trace is complete, holds every role's thread with its stages
 *          (the backend's own event_sync / d2h / stream_sync inside postprocess and h2d, of kinds
 *          sync / copy / sync), one drafter forward/loss/backward/optimizer/h2d per step, a d2h
 *          (the batched scalar read) on the log steps only, every step marked with its tokens,
 *          the target_gpu_ms counter sampled per forward; the printed profile lines are the
 *          windows recomputed from the trace;
 *        - two targets and two drafters all on GPU 0 (the drafters' all-reduce without NCCL),
 *          tiny, async, 50 steps: the loss falls, the threads are named target0.0, target0.1,
 *          post0.0, ... drafter0.1, each drafter all-reduces once per step;
 *        - co-located on GPU 0, small preset, --postprocess sync, 60 steps, --profile-steps 3-5
 *          (cudaProfilerStart/Stop without a profiler attached): the loss falls by 0.4
 *          (CPU: 5.48 -> 4.59); the target thread itself postprocesses (event_sync, d2h,
 *          stream_sync under target0).
 *  2gpu  - target on GPU 0, drafter on GPU 1, small preset, sync: the loss falls, thread
 *          devices are right;
 *        - co-located on two GPUs: targets on 0 and 1, drafters on 0 and 1 (NCCL all-reduce),
 *          tiny, async, 50 steps: the loss falls, each drafter all-reduces once per step, every
 *          step carries the tokens of both drafters;
 *        - drafters on GPUs 0, 0 and 1: refused with one line (exit 1).
 * Prints "SKIP: ..." and exits 0 without a CUDA device, or with fewer GPUs than the group
 * asked for needs. Every run has a watchdog (TRAINER_TIMEOUT_S, default 300 s): a hung trainer
 * is stopped (SIGTERM, then SIGKILL) and reported with its output. NCCL_NVLS_ENABLE defaults
 * to 0 for the runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "common.h"
#include "st_intervals.h"
#include "st_reader.h"
#include "stagetrace.h"

static int n_gpus;

/* ---- running the trainer ---------------------------------------------------------------- */

/* Runs the trainer with args (NULL-terminated) and extra environment (NAME=VALUE, NULL-ended)
 * under a watchdog, printing the command and how it ended. */
static trainer_result run_watched(const char *const *args, const char *const *env)
{
    printf("  $ ");
    for (int i = 0; env && env[i]; i++)
        printf("%s ", env[i]);
    printf("%s ", trainer_path);
    for (int i = 0; args[i]; i++)
        printf("%s ", args[i]);
    printf("\n");
    const char *limit_text = getenv("TRAINER_TIMEOUT_S");
    double limit = limit_text && atof(limit_text) > 0 ? atof(limit_text) : 300.0;
    const trainer_options opt = {.env = env, .timeout_s = limit};
    double t0 = monotonic_s();
    trainer_result res = run_trainer(args, &opt);
    printf("    exit %d after %.1f s\n", res.status, monotonic_s() - t0);
    if (res.status == -1)
        print_error("the trainer did not finish in %.0f s (hung?): stopped it\n", limit);
    return res;
}

/* Fails the test with the run's output when it did not exit 0. */
static void expect_success(const trainer_result *r)
{
    if (r->status != 0) {
        print_error("trainer exited %d\n--- stdout ---\n%s--- stderr ---\n%s--------------\n",
                    r->status, r->out, r->err);
        fail();
    }
}

/* ---- reading the trace -------------------------------------------------------------------- */

static long counter_samples(st_reader *r, const char *name)
{
    int id = counter_id(r, name);
    if (id < 0)
        return 0;
    st_sample_iter *it;
    assert_int_equal(st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_sample_row row;
    long n = 0;
    while (st_sample_iter_next(it, &row) == 1)
        n += (int)row.counter == id;
    st_sample_iter_close(it);
    return n;
}

typedef struct expect_thread {
    const char *thread, *role;
    int device;
    const char *stages[12];
} expect_thread;

/* Every expected thread with its role, device and at least one range of each stage. */
static void expect_threads(st_reader *r, const expect_thread *expect, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const st_thread_info *t = thread_named(r, expect[i].thread);
        if (!t) {
            print_error("no thread %s in the trace\n", expect[i].thread);
            fail();
        }
        assert_string_equal(t->role, expect[i].role);
        if (t->device != expect[i].device) {
            print_error("thread %s: device %d, expected %d\n", t->name, t->device,
                        expect[i].device);
            fail();
        }
        for (int k = 0; k < 12 && expect[i].stages[k]; k++) {
            int id = stage_id(r, expect[i].stages[k]);
            if (id < 0 || count_ranges(r, t->id, id) < 1) {
                print_error("thread %s has no %s range\n", t->name, expect[i].stages[k]);
                fail();
            }
        }
    }
}

static long thread_stage_count(st_reader *r, const char *thread, const char *stage)
{
    const st_thread_info *t = thread_named(r, thread);
    int id = stage_id(r, stage);
    assert_non_null(t);
    assert_true(id >= 0);
    return count_ranges(r, t->id, id);
}

/* Each postprocess of `thread` waits for its forward (event_sync) and copies (d2h holding a
 * stream_sync); one postprocess range may lack them: the one that found the run stopping. */
static void expect_postprocess_waits(st_reader *r, const char *thread, long at_least)
{
    long post = thread_stage_count(r, thread, "postprocess");
    long events = thread_stage_count(r, thread, "event_sync");
    long copies = thread_stage_count(r, thread, "d2h");
    long syncs = thread_stage_count(r, thread, "stream_sync");
    printf("    %s: %ld postprocess, %ld event_sync, %ld d2h, %ld stream_sync\n", thread, post,
           events, copies, syncs);
    assert_true(post >= at_least);
    assert_true(events >= post - 1 && events <= post);
    assert_int_equal(copies, events);
    assert_int_equal(syncs, copies);
}

static void expect_kinds(st_reader *r)
{
    static const struct {
        const char *name;
        st_kind kind;
    } kinds[] = {
        {"forward", ST_WORK}, {"postprocess", ST_WORK}, {"loss", ST_WORK},
        {"backward", ST_WORK}, {"optimizer", ST_WORK}, {"queue_wait", ST_WAIT_INPUT},
        {"h2d", ST_COPY}, {"d2h", ST_COPY}, {"stream_sync", ST_SYNC}, {"event_sync", ST_SYNC},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int id = stage_id(r, kinds[i].name);
        if (id < 0) {
            print_error("no stage %s in the trace\n", kinds[i].name);
            fail();
        }
        assert_int_equal(st_reader_stage(r, (uint32_t)id)->kind, kinds[i].kind);
    }
}

static void expect_steps(st_reader *r, uint32_t steps, uint64_t tokens_per_step)
{
    assert_int_equal(st_reader_n_steps(r), steps + 1);
    for (uint32_t i = 0; i <= steps; i++) {
        assert_int_equal(st_reader_step(r, i)->step, i);
        assert_int_equal(st_reader_step(r, i)->tokens, i ? tokens_per_step : 0);
    }
}

/* The loss of the last log line is at least `drop` below the first's. */
static void expect_loss_falls(const trainer_result *res, int n_lines_expected, double drop,
                              double min_accuracy)
{
    trainer_log_line lines[64];
    int n = parse_trainer_log(res->out, lines, 64);
    if (n != n_lines_expected) {
        print_error("%d log lines, expected %d:\n%s", n, n_lines_expected, res->out);
        fail();
    }
    for (int i = 0; i < n; i++) {
        assert_true(isfinite(lines[i].loss));
        assert_true(lines[i].tok_s > 0);
    }
    printf("    loss %.3f -> %.3f, accuracy %.3f -> %.3f\n", lines[0].loss, lines[n - 1].loss,
           lines[0].acc, lines[n - 1].acc);
    if (!(lines[n - 1].loss < lines[0].loss - drop)) {
        print_error("the loss did not fall by %.2f: %.3f -> %.3f\n%s", drop, lines[0].loss,
                    lines[n - 1].loss, res->out);
        fail();
    }
    if (min_accuracy > 0 && !(lines[n - 1].acc > min_accuracy)) {
        print_error("final top-1 accuracy %.3f <= %.3f\n", lines[n - 1].acc, min_accuracy);
        fail();
    }
}

/* ---- 1 GPU ------------------------------------------------------------------------------------ */

/* The loss of step 1 (seed 7, one target and one drafter, each on device 0) with the given
 * extra flags. */
static double first_step_loss(const char *device, const char *const *extra)
{
    const char *args[40] = {"--device", device, "--seed", "7", "--steps", "1", "--log-every",
                            "1", "--metrics-every", "1", "--target-gpus", "0,",
                            "--drafter-gpus", "0,"};
    int n = 14;
    for (int i = 0; extra[i] && n < 39; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    const char *env[] = {"KC_DEBUG_SYNC=1", NULL};
    trainer_result res = run_watched(args, strcmp(device, "cuda") ? NULL : env);
    expect_success(&res);
    trainer_log_line l;
    if (parse_trainer_log(res.out, &l, 1) != 1) {
        print_error("no log line for step 1:\n%s%s", res.out, res.err);
        fail();
    }
    printf("    %s: step 1 loss %.3f acc %.3f top4 %.3f\n", device, l.loss, l.acc, l.topk);
    free_trainer_result(&res);
    return l.loss;
}

static void compare_first_loss(const char *what, const char *const *extra)
{
    double cpu = first_step_loss("cpu", extra);
    double cuda = first_step_loss("cuda", extra);
    assert_true(isfinite(cpu) && isfinite(cuda) && cpu > 0);
    double rel = fabs(cuda - cpu) / cpu;
    printf("    %s: |cuda - cpu| / cpu = %.4f (tolerance 0.02)\n", what, rel);
    if (rel > 0.02) {
        print_error("%s: first-step loss cpu %.4f vs cuda %.4f differ by %.2f%%\n", what, cpu,
                    cuda, 100 * rel);
        fail();
    }
}

static void test_cpu_cuda_agree_tiny(void **state)
{
    (void)state;
    const char *extra[] = {"--preset", "tiny", NULL};
    compare_first_loss("tiny", extra);
}

static void test_cpu_cuda_agree_small(void **state)
{
    (void)state;
    const char *extra[] = {"--preset", "small", NULL};
    compare_first_loss("small", extra);
}

/* Sizes that take the kernels' scalar paths (d % 4 != 0, odd hd/2 and ffn, hd not a multiple
 * of 16: attention on CUDA cores), with the MLP-only drafter (context row added to the block
 * inputs); and the DFlash sliding window. */
static void test_cpu_cuda_agree_odd_sizes(void **state)
{
    (void)state;
    const char *odd[] = {"--preset", "tiny", "--dim", "42", "--heads", "3", "--ffn", "45",
                         "--vocab", "250", "--drafter-attention", "off", NULL};
    compare_first_loss("odd sizes, MLP-only drafter", odd);
    const char *window[] = {"--preset", "tiny", "--sliding-window", "24", NULL};
    compare_first_loss("tiny, sliding window 24", window);
}

static void test_colocated_1gpu_async(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "colocated1.sqlite");
    const char *args[] = {"--device", "cuda", "--preset", "tiny", "--seed", "1234", "--steps",
                          "50", "--log-every", "10", "--metrics-every", "10",
                          "--profile-interval", "10", "--postprocess", "async", "--target-gpus",
                          "0,", "--drafter-gpus", "0,", "--trace", trace, "--overwrite", NULL};
    trainer_result res = run_watched(args, NULL);
    expect_success(&res);
    expect_loss_falls(&res, 5, 0.4, 0.1);

    st_reader *r = open_complete_trace(trace);
    static const expect_thread expect[] = {
        {"main", "main", -1, {"step_wait"}},
        {"loader", "loader", -1, {"load", "queue_put"}},
        {"target0", "target", 0, {"batch_wait", "handoff", "forward"}},
        {"post0", "post", 0,
         {"handoff_wait", "postprocess", "event_sync", "d2h", "stream_sync", "queue_put"}},
        {"drafter0", "drafter", 0,
         {"queue_wait", "h2d", "stream_sync", "forward", "loss", "backward", "optimizer",
          "d2h"}},
    };
    expect_threads(r, expect, sizeof expect / sizeof expect[0]);
    assert_int_equal(st_reader_n_threads(r), sizeof expect / sizeof expect[0]);
    expect_kinds(r);
    /* the drafter: one of each stage per step; the scalar read on the 5 log steps only */
    static const char *per_step[] = {"h2d", "forward", "loss", "backward", "optimizer"};
    for (size_t i = 0; i < sizeof per_step / sizeof per_step[0]; i++)
        assert_int_equal(thread_stage_count(r, "drafter0", per_step[i]), 50);
    assert_int_equal(thread_stage_count(r, "drafter0", "d2h"), 5);
    assert_int_equal(thread_stage_count(r, "drafter0", "stream_sync"), 50 + 5);
    assert_int_equal(thread_stage_count(r, "drafter0", "allreduce"), 0);
    /* async: the target only launches; its postprocess runs on post0, with its waits */
    assert_int_equal(thread_stage_count(r, "target0", "postprocess"), 0);
    expect_postprocess_waits(r, "post0", 50);
    assert_true(counter_samples(r, "target_gpu_ms") >= 50);
    expect_steps(r, 50, 2 * 128);

    /* the printed profile lines are exactly the windows recomputed from the trace */
    text_buf recomputed = {0};
    assert_int_equal(st_reader_windows(r, 10, append_window, &recomputed), ST_OK);
    char *printed = profile_text(res.out);
    assert_non_null(recomputed.data);
    assert_string_equal(printed, recomputed.data);
    free(printed);
    free(recomputed.data);
    st_reader_close(r);
    assert_non_null(strstr(res.out, "GPU busy with the forward"));
    free_trainer_result(&res);
}

static void test_colocated_1gpu_sync_small(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "colocated1_sync.sqlite");
    const char *args[] = {"--device", "cuda", "--preset", "small", "--seed", "1234", "--steps",
                          "60", "--log-every", "10", "--metrics-every", "10",
                          "--postprocess", "sync", "--target-gpus", "0,", "--drafter-gpus",
                          "0,", "--profile-steps", "3-5", "--trace", trace, "--overwrite", NULL};
    trainer_result res = run_watched(args, NULL);
    expect_success(&res);
    expect_loss_falls(&res, 6, 0.4, 0.0);
    st_reader *r = open_complete_trace(trace);
    static const expect_thread expect[] = {
        {"target0", "target", 0,
         {"batch_wait", "forward", "postprocess", "event_sync", "d2h", "stream_sync",
          "queue_put"}},
        {"drafter0", "drafter", 0,
         {"queue_wait", "h2d", "stream_sync", "forward", "loss", "backward", "optimizer",
          "d2h"}},
    };
    expect_threads(r, expect, sizeof expect / sizeof expect[0]);
    assert_null(thread_named(r, "post0"));
    expect_postprocess_waits(r, "target0", 60);
    assert_int_equal(thread_stage_count(r, "drafter0", "d2h"), 6);
    expect_steps(r, 60, 4 * 256);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* Two targets and two drafters all on GPU 0: the drafters all-reduce on the device without
 * NCCL (NCCL cannot pair two ranks on one GPU). */
static void test_shared_1gpu_two_drafters(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "shared1.sqlite");
    const char *args[] = {"--device", "cuda", "--preset", "tiny", "--seed", "1234", "--steps",
                          "50", "--log-every", "10", "--metrics-every", "10",
                          "--postprocess", "async", "--target-gpus", "0,0", "--drafter-gpus",
                          "0,0", "--trace", trace, "--overwrite", NULL};
    trainer_result res = run_watched(args, NULL);
    expect_success(&res);
    expect_loss_falls(&res, 5, 0.4, 0.1);
    st_reader *r = open_complete_trace(trace);
    static const expect_thread expect[] = {
        {"target0.0", "target", 0, {"batch_wait", "handoff", "forward"}},
        {"target0.1", "target", 0, {"batch_wait", "handoff", "forward"}},
        {"post0.0", "post", 0, {"handoff_wait", "postprocess", "d2h", "queue_put"}},
        {"post0.1", "post", 0, {"handoff_wait", "postprocess", "d2h", "queue_put"}},
        {"drafter0.0", "drafter", 0,
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer", "d2h"}},
        {"drafter0.1", "drafter", 0,
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer", "d2h"}},
    };
    expect_threads(r, expect, sizeof expect / sizeof expect[0]);
    assert_int_equal(thread_stage_count(r, "drafter0.0", "allreduce"), 50);
    assert_int_equal(thread_stage_count(r, "drafter0.1", "allreduce"), 50);
    expect_steps(r, 50, 2 * 2 * 128);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* ---- 2 GPUs ----------------------------------------------------------------------------------- */

/* Two drafters on one GPU and a third on another: neither NCCL nor the shared all-reduce;
 * refused with one line before any step. */
static void test_mixed_drafters_refused(void **state)
{
    (void)state;
    const char *args[] = {"--device", "cuda", "--preset", "tiny", "--steps", "5",
                          "--drafter-gpus", "0,0,1", NULL};
    trainer_result res = run_watched(args, NULL);
    assert_int_equal(res.status, 1);
    assert_non_null(strstr(res.err, "drafters go on distinct GPUs"));
    free_trainer_result(&res);
}


static void test_split_2gpu_sync(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "split2.sqlite");
    const char *args[] = {"--device", "cuda", "--preset", "small", "--seed", "1234", "--steps",
                          "60", "--log-every", "10", "--metrics-every", "10", "--postprocess",
                          "sync", "--target-gpus", "0,", "--drafter-gpus", "1,", "--trace",
                          trace, "--overwrite", NULL};
    trainer_result res = run_watched(args, NULL);
    expect_success(&res);
    expect_loss_falls(&res, 6, 0.4, 0.0);
    st_reader *r = open_complete_trace(trace);
    static const expect_thread expect[] = {
        {"main", "main", -1, {"step_wait"}},
        {"loader", "loader", -1, {"load", "queue_put"}},
        {"target0", "target", 0,
         {"batch_wait", "forward", "postprocess", "event_sync", "d2h", "stream_sync",
          "queue_put"}},
        {"drafter1", "drafter", 1,
         {"queue_wait", "h2d", "stream_sync", "forward", "loss", "backward", "optimizer",
          "d2h"}},
    };
    expect_threads(r, expect, sizeof expect / sizeof expect[0]);
    assert_int_equal(st_reader_n_threads(r), sizeof expect / sizeof expect[0]);
    expect_kinds(r);
    assert_int_equal(thread_stage_count(r, "drafter1", "forward"), 60);
    expect_steps(r, 60, 4 * 256);
    st_reader_close(r);
    free_trainer_result(&res);
}

static void test_colocated_2gpu_nccl(void **state)
{
    (void)state;
    char trace[PATH_MAX];
    tmp_path(trace, sizeof trace, "colocated2.sqlite");
    const char *args[] = {"--device", "cuda", "--preset", "tiny", "--seed", "1234", "--steps",
                          "50", "--log-every", "10", "--metrics-every", "10",
                          "--profile-interval", "10", "--postprocess", "async", "--target-gpus",
                          "0,1", "--drafter-gpus", "0,1", "--trace", trace, "--overwrite", NULL};
    trainer_result res = run_watched(args, NULL);
    expect_success(&res);
    expect_loss_falls(&res, 5, 0.4, 0.1);
    st_reader *r = open_complete_trace(trace);
    static const expect_thread expect[] = {
        {"main", "main", -1, {"step_wait"}},
        {"loader", "loader", -1, {"load", "queue_put"}},
        {"target0", "target", 0, {"batch_wait", "handoff", "forward"}},
        {"target1", "target", 1, {"batch_wait", "handoff", "forward"}},
        {"post0", "post", 0, {"handoff_wait", "postprocess", "event_sync", "d2h", "queue_put"}},
        {"post1", "post", 1, {"handoff_wait", "postprocess", "event_sync", "d2h", "queue_put"}},
        {"drafter0", "drafter", 0,
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer", "d2h"}},
        {"drafter1", "drafter", 1,
         {"queue_wait", "h2d", "forward", "loss", "backward", "allreduce", "optimizer", "d2h"}},
    };
    expect_threads(r, expect, sizeof expect / sizeof expect[0]);
    assert_int_equal(st_reader_n_threads(r), sizeof expect / sizeof expect[0]);
    expect_kinds(r);
    int allreduce = stage_id(r, "allreduce");
    assert_true(allreduce >= 0);
    assert_int_equal(st_reader_stage(r, (uint32_t)allreduce)->kind, ST_COMM);
    assert_int_equal(thread_stage_count(r, "drafter0", "allreduce"), 50);
    assert_int_equal(thread_stage_count(r, "drafter1", "allreduce"), 50);
    expect_steps(r, 50, 2 * 2 * 128);
    st_reader_close(r);
    free_trainer_result(&res);
}

/* ---- main ------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *group = argc > 1 ? argv[1] : "all";
    if (strcmp(group, "all") && strcmp(group, "1gpu") && strcmp(group, "2gpu")) {
        fprintf(stderr, "usage: test_trainer_gpu [1gpu|2gpu]\n");
        return 2;
    }
    cudaError_t e = cudaGetDeviceCount(&n_gpus);
    if (e != cudaSuccess || n_gpus == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    if (!strcmp(group, "2gpu") && n_gpus < 2) {
        printf("SKIP: the 2gpu group needs 2 GPUs, this machine has %d\n", n_gpus);
        return 0;
    }
    if (find_trainer() || make_tmp_dir("test_trainer_gpu"))
        return 1;
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* a default the runs inherit */
    printf("test_trainer_gpu: %s, %d GPU%s, trainer %s\n", group, n_gpus, n_gpus > 1 ? "s" : "",
           trainer_path);
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_cpu_cuda_agree_tiny),
        cmocka_unit_test(test_cpu_cuda_agree_small),
        cmocka_unit_test(test_cpu_cuda_agree_odd_sizes),
        cmocka_unit_test(test_colocated_1gpu_async),
        cmocka_unit_test(test_colocated_1gpu_sync_small),
        cmocka_unit_test(test_shared_1gpu_two_drafters),
    };
    const struct CMUnitTest two[] = {
        cmocka_unit_test(test_split_2gpu_sync),
        cmocka_unit_test(test_colocated_2gpu_nccl),
        cmocka_unit_test(test_mixed_drafters_refused),
    };
    int failed = 0;
    if (strcmp(group, "2gpu"))
        failed += cmocka_run_group_tests_name("trainer_gpu_1gpu", one, NULL, NULL);
    if (strcmp(group, "1gpu")) {
        if (n_gpus >= 2)
            failed += cmocka_run_group_tests_name("trainer_gpu_2gpu", two, NULL, NULL);
        else
            printf("(2gpu group not run: this machine has 1 GPU)\n");
    }
    return failed ? 1 : 0;
}
