/* test_cupti_gpu.cu: GPU activity recording (st_gpu_start, CUPTI) end to end.
 *
 * A program with known GPU work, each piece inside its own stage range on one
 * thread: 3 launches of a 3 ms spin kernel (with CUDA events around each),
 * a 4 MiB pinned HtoD copy, a 1 MiB pageable DtoH copy, a 2 MiB memset, a
 * cudaStreamSynchronize, and a CUDA graph of two 1 ms spin kernels. After
 * st_close the trace must hold exactly those kernels, copies and memset
 * (kinds, bytes, directions, memory kinds, names), each with the launching
 * thread and the stage of the range it was launched in, its launch inside
 * that range, its start after its launch (one clock for CPU and GPU), and
 * the spin kernels' durations within 2% of the CUDA events' timings.
 * Without a CUDA device it prints "SKIP: ..." and exits 0.
 *
 * The record set is STAGETRACE_GPU_RECORDS's (tests/run_gpu.sh runs this
 * program with the default, with the launch subsets of the API and with
 * kernels and copies alone): meta gpu_records must name it; with API records
 * (full or launch subset) every record keeps its thread and stage; with
 * none, activity records have no launching thread (-1) and the trace holds
 * no API record; a kind left out leaves no record of that kind.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "st_gpu_records.h"
#include "st_reader.h"
#include "stagetrace.h"

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) fail_msg("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

__global__ void spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

enum { S_SPIN, S_H2D, S_D2H, S_MEMSET, S_SYNC, S_GRAPH, N_STAGES };
static const char *const stage_names[N_STAGES] = {"spin", "h2d", "d2h", "memset", "sync", "graph"};

typedef struct span {
    int64_t t0, t1;
} span;

static void test_cupti_records(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "/tmp/st-cupti-%d.sqlite", (int)getpid());
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cupti_gpu";
    st_trace *trace;
    assert_int_equal(st_open(&trace, &opt), ST_OK);
    int stage[N_STAGES];
    static const st_kind kinds[N_STAGES] = {ST_WORK, ST_COPY, ST_COPY, ST_WORK, ST_SYNC, ST_WORK};
    for (int i = 0; i < N_STAGES; i++) stage[i] = st_stage_register(trace, stage_names[i], kinds[i]);
    int me = st_thread_register(trace, "main", "main", 0, 0);
    assert_true(me >= 0);
    if (st_gpu_start(trace) != ST_OK) fail_msg("st_gpu_start: %s", st_last_error());

    cudaStream_t s, s2;
    CK(cudaFree(0));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    const size_t h2d_bytes = 4u << 20, d2h_bytes = 1u << 20, set_bytes = 2u << 20;
    void *d, *pinned, *pageable = malloc(d2h_bytes);
    CK(cudaMalloc(&d, h2d_bytes));
    CK(cudaMallocHost(&pinned, h2d_bytes));
    memset(pageable, 1, d2h_bytes);
    memset(pinned, 1, h2d_bytes);
    spin_kernel<<<1, 1, 0, s>>>(1000); /* warm-up, outside every range */
    CK(cudaStreamSynchronize(s));

    span ranges[N_STAGES][3];
    float event_ms[3];
    cudaEvent_t e0[3], e1[3];
    for (int i = 0; i < 3; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
        ranges[S_SPIN][i].t0 = st_now_ns();
        st_begin((st_stage)stage[S_SPIN]);
        CK(cudaEventRecord(e0[i], s));
        spin_kernel<<<1, 1, 0, s>>>(3000000ull);
        CK(cudaEventRecord(e1[i], s));
        st_end((st_stage)stage[S_SPIN]);
        ranges[S_SPIN][i].t1 = st_now_ns();
    }
    ranges[S_SYNC][0].t0 = st_now_ns();
    st_begin((st_stage)stage[S_SYNC]);
    CK(cudaStreamSynchronize(s));
    st_end((st_stage)stage[S_SYNC]);
    ranges[S_SYNC][0].t1 = st_now_ns();
    for (int i = 0; i < 3; i++) CK(cudaEventElapsedTime(&event_ms[i], e0[i], e1[i]));

    ranges[S_H2D][0].t0 = st_now_ns();
    st_begin((st_stage)stage[S_H2D]);
    CK(cudaMemcpyAsync(d, pinned, h2d_bytes, cudaMemcpyHostToDevice, s));
    st_end((st_stage)stage[S_H2D]);
    ranges[S_H2D][0].t1 = st_now_ns();
    ranges[S_MEMSET][0].t0 = st_now_ns();
    st_begin((st_stage)stage[S_MEMSET]);
    CK(cudaMemsetAsync(d, 0, set_bytes, s));
    st_end((st_stage)stage[S_MEMSET]);
    ranges[S_MEMSET][0].t1 = st_now_ns();
    ranges[S_D2H][0].t0 = st_now_ns();
    st_begin((st_stage)stage[S_D2H]);
    CK(cudaMemcpyAsync(pageable, d, d2h_bytes, cudaMemcpyDeviceToHost, s));
    st_end((st_stage)stage[S_D2H]);
    ranges[S_D2H][0].t1 = st_now_ns();
    CK(cudaStreamSynchronize(s));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
    spin_kernel<<<1, 1, 0, s2>>>(1000000ull);
    spin_kernel<<<1, 1, 0, s2>>>(1000000ull);
    CK(cudaStreamEndCapture(s2, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    ranges[S_GRAPH][0].t0 = st_now_ns();
    st_begin((st_stage)stage[S_GRAPH]);
    CK(cudaGraphLaunch(exec, s2));
    st_end((st_stage)stage[S_GRAPH]);
    ranges[S_GRAPH][0].t1 = st_now_ns();
    CK(cudaStreamSynchronize(s2));
    int64_t done_ns = st_now_ns();
    assert_int_equal(st_close(trace), ST_OK);

    st_gpu_config want;
    char err[400], want_text[200];
    const char *spec = getenv("STAGETRACE_GPU_RECORDS");
    if (st_gpu_config_parse(spec && spec[0] ? spec : NULL, &want, err, sizeof err) != 0) fail_msg("%s", err);
    st_gpu_config_format(&want, want_text, sizeof want_text);
    const int with_api = (want.kinds & (ST_GPU_REC_RUNTIME | ST_GPU_REC_DRIVER | ST_GPU_REC_RUNTIME_LAUNCH |
                                        ST_GPU_REC_DRIVER_LAUNCH)) != 0;
    printf("record set %s\n", want_text);
    st_reader *r;
    if (st_reader_open(&r, path) != ST_OK) fail_msg("%s", st_last_error());
    assert_non_null(st_reader_meta(r, "gpu_records"));
    assert_string_equal(st_reader_meta(r, "gpu_records"), want_text);
    /* API records: present exactly when asked; with a launch subset, only
     * of functions in it. */
    st_gpu_iter *api;
    assert_int_equal(st_gpu_api_iter_open(&api, r, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row a;
    int n_api = 0, n_api_launch = 0;
    while (st_gpu_iter_next(api, &a) == 1) {
        n_api++;
        n_api_launch += st_gpu_api_is_launch(a.name);
    }
    st_gpu_iter_close(api);
    printf("API records: %d, of the launch subset %d\n", n_api, n_api_launch);
    if (!with_api) assert_int_equal(n_api, 0);
    if (with_api) assert_true(n_api_launch >= 8);
    if (!(want.kinds & (ST_GPU_REC_RUNTIME | ST_GPU_REC_DRIVER))) assert_int_equal(n_api, n_api_launch);
    const char *dropped = st_reader_meta(r, "gpu_dropped_records");
    assert_non_null(dropped);
    assert_string_equal(dropped, "0");
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row g;
    int n, spins = 0, graph_kernels = 0, h2d = 0, d2h = 0, memsets = 0, syncs_in_stage = 0, warm = 0;
    int64_t spin_dur[8], spin_start[8];
    while ((n = st_gpu_iter_next(it, &g)) == 1) {
        int expect = -1;
        const st_gpu_rec *x = &g.rec;
        if (x->kind == ST_GPU_KERNEL) {
            assert_non_null(g.name);
            assert_non_null(strstr(g.name, "spin_kernel"));
            if (g.stage == stage[S_SPIN]) {
                assert_true(spins < 8);
                spin_dur[spins] = x->dur_ns;
                spin_start[spins] = x->start_ns;
                spins++;
                expect = S_SPIN;
            } else if (g.stage == stage[S_GRAPH]) {
                graph_kernels++;
                expect = S_GRAPH;
            } else if (with_api) {
                assert_int_equal(g.stage, -1); /* the warm-up */
                warm++;
            } else {
                spin_dur[spins < 8 ? spins : 7] = x->dur_ns; /* no stage known: sorted by duration below */
                spin_start[spins < 8 ? spins : 7] = x->start_ns;
                spins++;
            }
        } else if (x->kind == ST_GPU_MEMCPY && x->copy_kind == ST_COPY_H2D) {
            assert_int_equal(x->bytes, h2d_bytes);
            assert_int_equal(x->src_mem, ST_MEM_PINNED);
            assert_int_equal(x->dst_mem, ST_MEM_DEVICE);
            h2d++;
            expect = S_H2D;
        } else if (x->kind == ST_GPU_MEMCPY && x->copy_kind == ST_COPY_D2H) {
            assert_int_equal(x->bytes, d2h_bytes);
            assert_int_equal(x->src_mem, ST_MEM_DEVICE);
            assert_int_equal(x->dst_mem, ST_MEM_PAGEABLE);
            d2h++;
            expect = S_D2H;
        } else if (x->kind == ST_GPU_MEMSET) {
            assert_int_equal(x->bytes, set_bytes);
            memsets++;
            expect = S_MEMSET;
        } else if (x->kind == ST_GPU_SYNC) {
            if (g.stage == stage[S_SYNC]) syncs_in_stage++;
            continue;
        } else {
            fail_msg("unexpected GPU record kind %u (copy kind %u)", x->kind, x->copy_kind);
        }
        if (expect < 0) continue;
        if (!with_api) {
            assert_int_equal(g.thread, -1);
            continue;
        }
        assert_int_equal(g.thread, me);
        assert_int_equal(g.stage, stage[expect]);
        /* launched inside its range (of the 3 spin ranges, one), started after its launch */
        int inside = 0;
        for (int i = 0; i < (expect == S_SPIN ? 3 : 1); i++)
            inside |= g.launch_ns >= ranges[expect][i].t0 && g.launch_ns <= ranges[expect][i].t1;
        if (!inside) fail_msg("%s record launched at %lld, outside its range", stage_names[expect], (long long)g.launch_ns);
        assert_true(x->start_ns >= g.launch_ns);
        assert_true(x->start_ns + x->dur_ns <= done_ns);
    }
    assert_int_equal(n, 0);
    st_gpu_iter_close(it);
    if (!with_api) {
        /* Without launch records the 6 kernels (warm-up, 3 spins, 2 graph
         * kernels) have no stage: keep the three longest, the 3 ms spins. */
        assert_int_equal(spins, 6);
        for (int i = 0; i < spins; i++)
            for (int j = i + 1; j < spins; j++)
                if (spin_dur[j] > spin_dur[i]) {
                    int64_t a0 = spin_start[i], b0 = spin_dur[i];
                    spin_start[i] = spin_start[j], spin_dur[i] = spin_dur[j];
                    spin_start[j] = a0, spin_dur[j] = b0;
                }
        spins = 3;
    } else {
        assert_int_equal(spins, 3);
        assert_int_equal(graph_kernels, 2);
        assert_int_equal(warm, 1);
    }
    assert_int_equal(h2d, (want.kinds & ST_GPU_REC_MEMCPY) ? 1 : 0);
    assert_int_equal(d2h, (want.kinds & ST_GPU_REC_MEMCPY) ? 1 : 0);
    assert_int_equal(memsets, (want.kinds & ST_GPU_REC_MEMSET) ? 1 : 0);
    if ((want.kinds & ST_GPU_REC_SYNC) && with_api) assert_true(syncs_in_stage >= 1);
    /* spin kernels in start order against the events in launch order */
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (spin_start[j] < spin_start[i]) {
                int64_t a = spin_start[i], b = spin_dur[i];
                spin_start[i] = spin_start[j], spin_dur[i] = spin_dur[j];
                spin_start[j] = a, spin_dur[j] = b;
            }
    for (int i = 0; i < 3; i++) {
        double ev_ns = event_ms[i] * 1e6;
        printf("spin %d: trace %.3f ms, events %.3f ms\n", i, spin_dur[i] / 1e6, ev_ns / 1e6);
        if (fabs((double)spin_dur[i] - ev_ns) > 0.02 * ev_ns)
            fail_msg("spin kernel %d: %lld ns in the trace, %.0f ns by CUDA events (over 2%%)", i,
                     (long long)spin_dur[i], ev_ns);
    }
    st_reader_close(r);
    unlink(path);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaFree(d));
    CK(cudaFreeHost(pinned));
    free(pageable);
}

/* st_gpu_pause / st_gpu_resume: 2 kernels recorded, 3 launched while
 * paused, 2 after the resume, and a second pause left open at st_close.
 * The trace holds the 4 recorded kernels and none whose launch or start
 * falls in a pause, gpu_pauses holds the two pauses (the second ended at
 * the close), a pause twice or a resume when not paused is refused with
 * ST_ESTATE, and pausing without GPU tracing too. */
static void test_cupti_pause(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "/tmp/st-cupti-pause-%d.sqlite", (int)getpid());
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cupti_pause";
    st_trace *trace;
    assert_int_equal(st_open(&trace, &opt), ST_OK);
    assert_true(st_thread_register(trace, "main", "main", 0, 0) >= 0);
    assert_int_equal(st_gpu_pause(trace), ST_ESTATE); /* not on yet */
    if (st_gpu_start(trace) != ST_OK) fail_msg("st_gpu_start: %s", st_last_error());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    assert_int_equal(st_gpu_resume(trace), ST_ESTATE); /* not paused */
    for (int i = 0; i < 2; i++) spin_kernel<<<1, 1, 0, s>>>(200000ull);
    CK(cudaStreamSynchronize(s));
    int64_t p0 = st_now_ns();
    assert_int_equal(st_gpu_pause(trace), ST_OK);
    int64_t p0_after = st_now_ns();
    assert_int_equal(st_gpu_pause(trace), ST_ESTATE);
    for (int i = 0; i < 3; i++) spin_kernel<<<1, 1, 0, s>>>(300000ull);
    CK(cudaStreamSynchronize(s));
    int64_t p1 = st_now_ns();
    assert_int_equal(st_gpu_resume(trace), ST_OK);
    int64_t p1_after = st_now_ns();
    for (int i = 0; i < 2; i++) spin_kernel<<<1, 1, 0, s>>>(200000ull);
    CK(cudaStreamSynchronize(s));
    int64_t q0 = st_now_ns();
    assert_int_equal(st_gpu_pause(trace), ST_OK);
    spin_kernel<<<1, 1, 0, s>>>(300000ull);
    CK(cudaStreamSynchronize(s));
    int64_t close_t0 = st_now_ns();
    assert_int_equal(st_close(trace), ST_OK);
    int64_t close_t1 = st_now_ns();
    CK(cudaStreamDestroy(s));

    st_reader *r;
    if (st_reader_open(&r, path) != ST_OK) fail_msg("%s", st_last_error());
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row g;
    int n, kernels = 0, short_kernels = 0;
    while ((n = st_gpu_iter_next(it, &g)) == 1) {
        if (g.rec.kind != ST_GPU_KERNEL) continue;
        kernels++;
        /* the 0.2 ms kernels are the recorded ones; a 0.3 ms one was launched paused */
        if (g.rec.dur_ns < 250000) short_kernels++;
        assert_false(g.rec.start_ns > p0_after && g.rec.start_ns < p1);
        assert_false(g.rec.start_ns > q0);
    }
    assert_int_equal(n, 0);
    st_gpu_iter_close(it);
    printf("kernels recorded: %d (0.2 ms: %d)\n", kernels, short_kernels);
    assert_int_equal(kernels, 4);
    assert_int_equal(short_kernels, 4);
    sqlite3 *db = st_reader_db(r);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT t0_ns, t1_ns FROM gpu_pauses ORDER BY id", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_int64(st, 0) >= p0 && sqlite3_column_int64(st, 0) <= p0_after);
    assert_true(sqlite3_column_int64(st, 1) >= p1 && sqlite3_column_int64(st, 1) <= p1_after);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_int64(st, 0) >= q0);
    assert_true(sqlite3_column_int64(st, 1) >= close_t0 && sqlite3_column_int64(st, 1) <= close_t1);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    st_reader_close(r);
    unlink(path);
}

/* The sampled capture (every_steps=3 alone: kernels and the launch subsets):
 * one kernel before the first step mark and one after each of the marks
 * 0..11, each a spin of 100 us + 40 us * (its step + 1), launched once
 * st_flush has seen its mark stored (the writer switches the recording when
 * it stores a mark). Recorded: the kernel before step 0 and those of steps
 * 0, 3 and 9; step 6's is not, as the user paused the recording from after
 * mark 5 to after mark 7 (a resume while the sampler is off stays off).
 * gpu_pauses: three rows, in order, never overlapping: mark 1 to mark 3,
 * mark 4 to mark 9 (the user's pause inside it), mark 10 to the close;
 * meta gpu_every_steps 3 and gpu_records ending in every_steps=3. Each step
 * also sets 4 KiB of device memory, which the sampled capture does not record
 * (no memset kind). A record set with copies or memsets and every_steps is
 * refused (ST_EINVAL). */
static void test_cupti_every(void **state)
{
    (void)state;
    char path[256], spec[300];
    snprintf(path, sizeof path, "/tmp/st-cupti-every-%d.sqlite", (int)getpid());
    snprintf(spec, sizeof spec, "every_steps=3");
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cupti_every";
    st_trace *trace;
    assert_int_equal(st_open(&trace, &opt), ST_OK);
    assert_true(st_thread_register(trace, "main", "main", 0, 0) >= 0);
    assert_int_equal(st_gpu_start_with(trace, "kernel,every_steps=0"), ST_EINVAL);
    assert_int_equal(st_gpu_start_with(trace, "default,every_steps=3"), ST_EINVAL);
    assert_non_null(strstr(st_last_error(), "cannot record memcpy, memset or sync"));
    if (st_gpu_start_with(trace, spec) != ST_OK) fail_msg("st_gpu_start_with(%s): %s", spec, st_last_error());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *dbuf = NULL;
    CK(cudaMalloc(&dbuf, 4096));
    spin_kernel<<<1, 1, 0, s>>>(100000ull);
    CK(cudaStreamSynchronize(s));
    int64_t mark[12];
    for (int k = 0; k < 12; k++) {
        mark[k] = st_now_ns();
        st_step((uint64_t)k, 1);
        assert_int_equal(st_flush(trace), ST_OK);
        if (k == 5) assert_int_equal(st_gpu_pause(trace), ST_OK);
        if (k == 7) assert_int_equal(st_gpu_resume(trace), ST_OK);
        spin_kernel<<<1, 1, 0, s>>>(100000ull + 40000ull * (unsigned long long)(k + 1));
        CK(cudaMemsetAsync(dbuf, k, 4096, s));
        CK(cudaStreamSynchronize(s));
    }
    assert_int_equal(st_close(trace), ST_OK);
    CK(cudaFree(dbuf));
    CK(cudaStreamDestroy(s));

    st_reader *r;
    if (st_reader_open(&r, path) != ST_OK) fail_msg("%s", st_last_error());
    st_gpu_iter *it;
    assert_int_equal(st_gpu_iter_open(&it, r, -1, INT64_MIN, INT64_MAX), ST_OK);
    st_gpu_row g;
    int n, seen[13] = {0}, kernels = 0, memsets = 0;
    while ((n = st_gpu_iter_next(it, &g)) == 1) {
        if (g.rec.kind == ST_GPU_MEMSET && g.rec.bytes == 4096) memsets++;
        if (g.rec.kind != ST_GPU_KERNEL) continue;
        kernels++;
        long k = lround(((double)g.rec.dur_ns - 100000.0) / 40000.0); /* 0: before step 0, else step k - 1 */
        if (k < 0 || k > 12) fail_msg("a kernel of %lld ns", (long long)g.rec.dur_ns);
        seen[k]++;
    }
    assert_int_equal(n, 0);
    st_gpu_iter_close(it);
    printf("sampled capture: %d kernels, %d memsets recorded\n", kernels, memsets);
    assert_int_equal(kernels, 4);
    assert_int_equal(memsets, 0);
    assert_int_equal(seen[0], 1);  /* before the first mark */
    assert_int_equal(seen[1], 1);  /* step 0 */
    assert_int_equal(seen[4], 1);  /* step 3 */
    assert_int_equal(seen[7], 0);  /* step 6: paused by the user */
    assert_int_equal(seen[10], 1); /* step 9 */
    const char *every = st_reader_meta(r, "gpu_every_steps");
    assert_non_null(every);
    assert_string_equal(every, "3");
    const char *records = st_reader_meta(r, "gpu_records");
    assert_non_null(records);
    assert_string_equal(records, "kernel,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100,every_steps=3");
    sqlite3 *db = st_reader_db(r);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT t0_ns, t1_ns FROM gpu_pauses ORDER BY t0_ns", -1, &st, NULL),
                     SQLITE_OK);
    const int from[3] = {1, 4, 10}, to[3] = {3, 9, -1};
    int64_t last_end = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        int64_t t0 = sqlite3_column_int64(st, 0), t1 = sqlite3_column_int64(st, 1);
        assert_true(t0 >= last_end && t1 > t0);
        assert_true(t0 > mark[from[i]] && (from[i] == 11 || t0 < mark[from[i] + 1]));
        if (to[i] >= 0) assert_true(t1 > mark[to[i]] && t1 < mark[to[i] + 1]);
        last_end = t1;
    }
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    st_reader_close(r);
    unlink(path);
}

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cupti_records), cmocka_unit_test(test_cupti_pause),
                                       cmocka_unit_test(test_cupti_every)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
