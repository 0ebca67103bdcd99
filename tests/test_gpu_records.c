/* test_gpu_records.c: the GPU record-set spec (tracer/gpu_records.c;
 * docs/tracer.md, "GPU activity"): what each spec parses to, its canonical
 * form as meta gpu_records shows it, every rejection with its message, and
 * which API functions are in the launch subset. The expected values are the
 * documented ones: the default set is kernels, copies, memsets and the
 * API's launch subsets, 8192 KiB buffers, a 100 ms flush; the full API kinds hold their launch subsets. On a machine
 * without a GPU, st_gpu_start itself is covered by tests/gpu. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "st_gpu_records.h"

static void canonical(const char *spec, const char *want)
{
    st_gpu_config c;
    char err[400] = "", buf[200];
    assert_int_equal(st_gpu_config_parse(spec, &c, err, sizeof err), 0);
    st_gpu_config_format(&c, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void rejected(const char *spec, const char *want_part)
{
    st_gpu_config c;
    char err[400] = "";
    assert_int_equal(st_gpu_config_parse(spec, &c, err, sizeof err), -1);
    if (!strstr(err, want_part)) fail_msg("'%s': message \"%s\" lacks \"%s\"", spec, err, want_part);
    assert_null(strchr(err, '\n'));
}

static void test_default(void **state)
{
    (void)state;
    st_gpu_config c;
    char err[64];
    assert_int_equal(st_gpu_config_parse(NULL, &c, err, sizeof err), 0);
    assert_int_equal(c.kinds, ST_GPU_REC_KERNEL | ST_GPU_REC_MEMCPY | ST_GPU_REC_MEMSET |
                                  ST_GPU_REC_RUNTIME_LAUNCH | ST_GPU_REC_DRIVER_LAUNCH);
    assert_int_equal(c.buffer_kb, 8192);
    assert_int_equal(c.flush_ms, 100);
    assert_int_equal(c.zeroed, 0);
    canonical(NULL, "kernel,memcpy,memset,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100");
    canonical("default", "kernel,memcpy,memset,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100");
    canonical("default,sync", "kernel,memcpy,memset,sync,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100");
    canonical("all", "kernel,memcpy,memset,sync,runtime,driver,buffer_kb=8192,flush_ms=100");
}

static void test_sets(void **state)
{
    (void)state;
    canonical("kernel", "kernel,buffer_kb=8192,flush_ms=100");
    canonical("memset,kernel,kernel", "kernel,memset,buffer_kb=8192,flush_ms=100");
    canonical("kernel,memcpy,memset,runtime-launch", "kernel,memcpy,memset,runtime-launch,buffer_kb=8192,flush_ms=100");
    /* The full API kind holds its launch subset. */
    canonical("runtime,runtime-launch,driver-launch", "runtime,driver-launch,buffer_kb=8192,flush_ms=100");
    canonical("none", "none,buffer_kb=8192,flush_ms=100");
    /* Options alone keep the default kinds. */
    canonical("buffer_kb=32768", "kernel,memcpy,memset,runtime-launch,driver-launch,buffer_kb=32768,flush_ms=100");
    canonical("kernel,flush_ms=0,zeroed,buffer_kb=64", "kernel,buffer_kb=64,flush_ms=0,zeroed");
    canonical("kernel,buffer_kb=262144,flush_ms=60000", "kernel,buffer_kb=262144,flush_ms=60000");
    /* Sampled capture: every_steps=1 is every step, so the canonical form leaves it out. */
    canonical("every_steps=10", "kernel,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100,every_steps=10");
    canonical("kernel,every_steps=1", "kernel,buffer_kb=8192,flush_ms=100");
    canonical("every_steps=1", "kernel,memcpy,memset,runtime-launch,driver-launch,buffer_kb=8192,flush_ms=100");
    canonical("every_steps=1000000,kernel,zeroed", "kernel,buffer_kb=8192,flush_ms=100,zeroed,every_steps=1000000");
    canonical("runtime,every_steps=2", "runtime,buffer_kb=8192,flush_ms=100,every_steps=2");
    st_gpu_config c;
    char err[400];
    assert_int_equal(st_gpu_config_parse("kernel,every_steps=7", &c, err, sizeof err), 0);
    assert_int_equal(c.every_steps, 7);
    assert_int_equal(c.kinds, ST_GPU_REC_KERNEL);
    assert_int_equal(st_gpu_config_parse(NULL, &c, err, sizeof err), 0);
    assert_int_equal(c.every_steps, 1);
}

static void test_rejections(void **state)
{
    (void)state;
    rejected("kernels", "unknown item 'kernels'");
    rejected("kernel,,memcpy", "unknown item ''");
    rejected("", "unknown item ''");
    rejected("kernel,", "unknown item ''");
    rejected("Kernel", "unknown item 'Kernel'");
    rejected("buffer_kb=63", "buffer_kb must be a whole number from 64 to 262144");
    rejected("buffer_kb=262145", "buffer_kb must be a whole number from 64 to 262144");
    rejected("buffer_kb=-1", "buffer_kb must be");
    rejected("buffer_kb=1e3", "buffer_kb must be");
    rejected("buffer_kb=99999999999999", "buffer_kb must be");
    rejected("flush_ms=60001", "flush_ms must be a whole number from 0 to 60000");
    rejected("flush_ms=", "unknown item 'flush_ms='");
    rejected("every_steps=0", "every_steps must be a whole number from 1 to 1000000");
    rejected("every_steps=1000001", "every_steps must be a whole number from 1 to 1000000");
    rejected("every_steps=-3", "every_steps must be");
    rejected("every_steps=", "unknown item 'every_steps='");
    rejected("every_steps=10x", "every_steps must be");
    /* the sampled capture cannot record copies, memsets or syncs */
    rejected("default,every_steps=10", "every_steps=10 cannot record memcpy, memset or sync");
    rejected("kernel,memset,every_steps=2", "every_steps=2 cannot record memcpy, memset or sync");
    rejected("all,every_steps=3", "use kernel,runtime-launch,driver-launch,every_steps=3 or every_steps=3 alone");
    rejected("sync,kernel,every_steps=5", "cannot record memcpy, memset or sync");
    /* A long item is quoted cut, the message stays one bounded line. */
    char longspec[300];
    memset(longspec, 'x', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = '\0';
    rejected(longspec, "unknown item 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'");
}

static void test_launch_subset(void **state)
{
    (void)state;
    const char *in[] = {"cudaLaunchKernel", "cudaLaunchKernel_v7000", "cudaLaunchKernelExC", "cudaGraphLaunch",
                        "cudaMemcpyAsync", "cudaMemsetAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                        "cudaEventSynchronize", "cudaStreamWaitEvent", "cuLaunchKernel", "cuLaunchKernelEx",
                        "cuGraphLaunch", "cuMemcpyHtoDAsync_v2", "cuMemsetD32Async", "cuStreamSynchronize",
                        "cuCtxSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
                        "cudaStreamQuery", "cudaEventQuery", "cuStreamQuery", "cuEventQuery_v2"};
    const char *out[] = {"cudaMalloc", "cudaFree", "cudaGetDevice", "cudaEventRecord", "cudaStreamIsCapturing",
                         "cuCtxGetCurrent", "cuMemAlloc_v2", "cuModuleGetFunction", "cuGetProcAddress", "",
                         "cuda", "cuLaunc"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (!st_gpu_api_is_launch(in[i])) fail_msg("%s should be in the launch subset", in[i]);
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        if (st_gpu_api_is_launch(out[i])) fail_msg("%s should not be in the launch subset", out[i]);
    assert_int_equal(st_gpu_api_is_launch(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_sets),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_launch_subset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
