/* test_stragglers.c: how `analyze stragglers` (and an_stragglers_compute,
 * which `bottleneck` and `report` use) matches the parts of a collective
 * across ranks (docs/analyze.md, "stragglers").
 *
 * The rank set, every rank on one clock (offset 0), P = 10 ms, N = 12 steps,
 * t0 = 1 s:
 *   rank 0, target: sends batch k (k = 0..N) and marks step k "batch sent"
 *     at t0 + (k - 3) P + 7 ms (k >= 3; steps 0-2 at t0 + k us): three
 *     batches ahead of the drafters, as a target rank with a queue is;
 *   ranks 1 and 2, drafters: in step k (k = 1..N) an allreduce from
 *     t0 + (k - 1) P + 6 ms (rank 1) or + 8 ms (rank 2) to + 9.5 ms, and
 *     their own step mark k at t0 + k P.
 * So instance k (from 0) is the k-th allreduce of each drafter: N instances
 * of 2 ranks, rank 2 last in each, rank 1 waiting 2 ms; step k + 1 on the
 * drafters' own marks. Rank 0's mark of step k + 3 falls between the two
 * drafters' starts of instance k, so matching by rank 0's steps pairs rank
 * 1's instance k with rank 2's k - 1 (rank 1 then looks last, 8 ms late).
 *
 * The second set is the same without any comm stage (allreduce recorded as
 * `work`): no collective at all, which is a normal case.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analyze/analyze.h"
#include "../analyze/stragglers.h"
#include "common.h"
#include "traces.h"

#define P (10 * MS)
#define N 12

/* Rank `rank` of a 3-rank run: its meta, every rank on one clock (offset 0). */
static tg_trace *rank_trace(const char *program, const char *run_id, int rank)
{
    tg_trace *g = tg_create(program);
    tg_meta(g, "run_id", run_id);
    tg_meta_int(g, "rank", rank);
    tg_meta_int(g, "world_size", 3);
    tg_meta_int(g, "start_ns", BASE_NS - MS);
    tg_meta_int(g, "end_ns", BASE_NS + (N + 1) * P);
    tg_meta_int(g, "clock_sync_ns", BASE_NS);
    tg_meta_int(g, "clock_offset_ns", 0);
    tg_meta_int(g, "clock_uncertainty_ns", 0);
    return g;
}

static void write_set(const char *dir, const char *ar_kind)
{
    mkdir(dir, 0777);
    for (int rank = 0; rank < 3; rank++) {
        tg_trace *g = rank_trace("strag", "1700000000-22", rank);
        uint32_t fwd = tg_stage(g, "forward", "work");
        uint32_t ar = tg_stage(g, "allreduce", ar_kind);
        uint32_t th = tg_thread(g, rank ? "drafter0" : "target0", rank ? "drafter" : "target");
        tg_thread_at(g, th)->rank = rank;
        tg_set_step_thread(g, tg_thread_at(g, th)->id);
        if (rank == 0) {
            for (int k = 0; k <= N; k++) {
                int64_t mark = k >= 3 ? BASE_NS + (k - 3) * P + 7 * MS : BASE_NS + k * US;
                tg_range(g, th, fwd, mark - 500 * US < BASE_NS ? mark : mark - 500 * US, mark);
                tg_step(g, (uint64_t)k, mark, k ? 1000 : 0);
            }
        } else {
            tg_step(g, 0, BASE_NS, 0);
            for (int k = 1; k <= N; k++) {
                int64_t s = BASE_NS + (k - 1) * P;
                tg_range(g, th, fwd, s + 1 * MS, s + 5 * MS);
                tg_range(g, th, ar, s + (rank == 1 ? 6 : 8) * MS, s + 9500 * US);
                tg_step(g, (uint64_t)k, BASE_NS + k * P, 1000);
            }
        }
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/rank%d.sqlite", dir, rank);
        tg_write(g, path);
        tg_free(g);
    }
}

/* A rank set with GPU activity and no comm range: ranks 1 and 2 each launch, per step k
 * (k = 1..N), an NCCL all-reduce kernel from t0 + (k - 1) P + 6 ms (rank 1, its name mangled as
 * CUPTI gives it) or + 9 ms (rank 2, its name plain) to + 9.5 ms, a ReduceScatter kernel after it
 * (rank 2 first this time, 1 ms ahead), and a kernel of their own that is not NCCL's; rank 0 has
 * no GPU record. */
static void write_gpu_set(const char *dir)
{
    mkdir(dir, 0777);
    for (int rank = 0; rank < 3; rank++) {
        tg_trace *g = rank_trace("strag_gpu", "1700000000-23", rank);
        uint32_t fwd = tg_stage(g, "forward", "work");
        uint32_t th = tg_thread(g, rank ? "drafter0" : "target0", rank ? "drafter" : "target");
        tg_thread_at(g, th)->rank = rank;
        tg_set_step_thread(g, tg_thread_at(g, th)->id);
        tg_set_gpu_tables(g, 1);
        tg_step(g, 0, BASE_NS, 0);
        uint32_t ar = tg_gpu_string(g, rank == 1 ? "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
                                                 : "ncclDevKernel_AllReduce_Sum_f32_RING_LL") + 1;
        uint32_t rs = tg_gpu_string(g, "ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float") + 1;
        uint32_t mine = tg_gpu_string(g, "_Z8k_matmulPfS_") + 1;
        st_gpu_rec recs[3 * N];
        size_t n = 0;
        for (int k = 1; k <= N; k++) {
            int64_t s = BASE_NS + (k - 1) * P;
            tg_range(g, th, fwd, s + 1 * MS, s + 5 * MS);
            tg_step(g, (uint64_t)k, BASE_NS + k * P, 1000);
            if (!rank) continue;
            recs[n++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = mine, .start_ns = s + 2 * MS, .dur_ns = 2 * MS};
            int64_t a0 = s + (rank == 1 ? 6 : 9) * MS;
            recs[n++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = ar, .start_ns = a0, .dur_ns = s + 9500 * US - a0};
            int64_t r0 = s + 9600 * US + (rank == 1 ? 1 * MS : 0);
            recs[n++] = (st_gpu_rec){.kind = ST_GPU_KERNEL, .name = rs, .start_ns = r0, .dur_ns = s + 9900 * US + MS - r0};
        }
        if (n) tg_gpu_chunk(g, 0, 7, recs, n);
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/rank%d.sqlite", dir, rank);
        tg_write(g, path);
        tg_free(g);
    }
}

/* Runs a command in this process with stdout to a file; its text. */
static char *run_cmd(const an_cmd_def *cmd, char **argv, int *status)
{
    int argc = 0;
    while (argv[argc]) argc++;
    fflush(stdout);
    int saved = dup(1);
    int fd = open(tmp_file("cmd.out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    *status = an_command_run(cmd, argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    char *out = read_file(tmp_file("cmd.out"), NULL);
    assert_non_null(out);
    return out;
}

static void test_targets_ahead(void **state)
{
    (void)state;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/ahead", tmp_dir);
    int status;
    char *argv[] = {"stragglers", "--format", "csv", dir, NULL};
    char *out = run_cmd(&an_cmd_stragglers, argv, &status);
    assert_int_equal(status, AN_EXIT_OK);
    /* collectives: 12 instances on 2 ranks, rank 2 last every time, rank 1 waits 2 ms */
    assert_non_null(strstr(out, "stage,instances,ranks,last_rank,times_last,last_pct,every_time,mean_wait_ms,max_wait_ms\n"
                                "allreduce,12,2,2,12,100,yes,2.000000,2.000000\n\n"));
    /* instances: k, the drafters' own step k + 1, 2 ranks, 1 ms after the lower median start */
    char want[4096] = "stage,instance,step,ranks,last_rank,late_vs_median_ms,wait_ms,max_wait_ms\n";
    for (int k = 0; k < N; k++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "allreduce,%d,%d,2,2,2.000000,2.000000,2.000000\n", k,
                 k + 1);
    assert_non_null(strstr(out, want));
    free(out);

    /* the report's and bottleneck's figures: the same matching */
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    an_stragglers s;
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_int_equal(s.n_coll, 1);
    assert_string_equal(s.coll[0].stage, "allreduce");
    assert_int_equal(s.coll[0].instances, N);
    assert_int_equal(s.coll[0].ranks, 2);
    assert_int_equal(s.coll[0].last_rank, 2);
    assert_int_equal(s.coll[0].times_last, N);
    assert_int_equal(s.coll[0].mean_wait_ns, 2 * MS);
    assert_int_equal(s.coll[0].max_wait_ns, 2 * MS);
    an_stragglers_free(&s);
    an_trace_close(&t);
}

static void test_no_collective(void **state)
{
    (void)state;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/nocomm", tmp_dir);
    int status;
    char *argv[] = {"stragglers", dir, NULL};
    char *out = run_cmd(&an_cmd_stragglers, argv, &status);
    assert_int_equal(status, AN_EXIT_OK);
    assert_non_null(strstr(out, "\nNo collective (comm stage) is shared by two ranks.\n"));
    /* the collectives and instances tables: headers only */
    assert_non_null(strstr(out, "every_time  mean_wait_ms  max_wait_ms\n\n"));
    assert_non_null(strstr(out, "wait_ms  max_wait_ms\n\nrole"));
    free(out);
    char *csv[] = {"stragglers", "--format", "csv", dir, NULL};
    out = run_cmd(&an_cmd_stragglers, csv, &status);
    assert_int_equal(status, AN_EXIT_OK);
    assert_non_null(strstr(out, "stage,instances,ranks,last_rank,times_last,last_pct,every_time,mean_wait_ms,max_wait_ms\n\n"
                                "stage,instance,step,ranks,last_rank,late_vs_median_ms,wait_ms,max_wait_ms\n\n"));
    free(out);
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    an_stragglers s;
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_int_equal(s.n_coll, 0);
    assert_int_equal(s.n_ranks, 3);
    an_stragglers_free(&s);
    an_trace_close(&t);
}

/* NCCL's kernels as collectives, from GPU activity alone: the operation from the kernel's
 * name (mangled or not), instance k the k-th kernel of that operation on each rank. */
static void test_nccl_kernels(void **state)
{
    (void)state;
    assert_int_equal(an_nccl_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), 0);
    assert_int_equal(an_nccl_op("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"), 0);
    assert_int_equal(an_nccl_op("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float"), 2);
    assert_int_equal(an_nccl_op("ncclDevKernel_Reduce_Sum_f32_RING_LL"), 4);
    assert_int_equal(an_nccl_op("ncclDevKernel_Generic_1"), AN_NCCL_OTHER);
    assert_int_equal(an_nccl_op("ncclDevKernel_"), AN_NCCL_OTHER);
    assert_int_equal(an_nccl_op("_Z8k_matmulPfS_"), -1);
    assert_int_equal(an_nccl_op("nccl"), -1);
    assert_int_equal(an_nccl_op(""), -1);
    assert_int_equal(an_nccl_op(NULL), -1);

    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/gpu", tmp_dir);
    int status;
    char *argv[] = {"stragglers", "--format", "csv", dir, NULL};
    char *out = run_cmd(&an_cmd_stragglers, argv, &status);
    assert_int_equal(status, AN_EXIT_OK);
    /* rank 2 last at every all-reduce (3 ms), rank 1 at every reduce-scatter (1 ms) */
    assert_non_null(strstr(out, "stage,instances,ranks,last_rank,times_last,last_pct,every_time,mean_wait_ms,max_wait_ms\n"
                                "nccl:AllReduce,12,2,2,12,100,yes,3.000000,3.000000\n"
                                "nccl:ReduceScatter,12,2,1,12,100,yes,1.000000,1.000000\n\n"));
    assert_non_null(strstr(out, "nccl:AllReduce,0,1,2,2,3.000000,3.000000,3.000000\n"));
    free(out);
    const char *paths[] = {dir};
    an_trace t;
    assert_int_equal(an_trace_open_inputs(&t, paths, 1, AN_ALIGN_AUTO), AN_EXIT_OK);
    an_stragglers s;
    assert_int_equal(an_stragglers_compute(&t, &s), AN_EXIT_OK);
    assert_int_equal(s.n_coll, 2);
    assert_string_equal(s.coll[0].stage, "nccl:AllReduce");
    assert_int_equal(s.coll[0].last_rank, 2);
    assert_int_equal(s.coll[0].mean_wait_ns, 3 * MS);
    assert_string_equal(s.coll[1].stage, "nccl:ReduceScatter");
    assert_int_equal(s.coll[1].last_rank, 1);
    an_stragglers_free(&s);
    an_trace_close(&t);
}

int main(void)
{
    if (make_tmp_dir("test_stragglers")) return 1;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/ahead", tmp_dir);
    write_set(dir, "comm");
    snprintf(dir, sizeof dir, "%s/nocomm", tmp_dir);
    write_set(dir, "work");
    snprintf(dir, sizeof dir, "%s/gpu", tmp_dir);
    write_gpu_set(dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets_ahead),
        cmocka_unit_test(test_no_collective),
        cmocka_unit_test(test_nccl_kernels),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
