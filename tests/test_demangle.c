/* test_demangle.c: analyze/demangle.c (an_demangle) and the SQL function
 * demangle() of tracer/vtab.c, on kernel names recorded in the sample
 * traces (the gpu_strings of samples/traces/h200-*.sqlite). The expected strings
 * are what binutils' c++filt prints for those names (the demangler both it
 * and libstdc++ carry): a name that is not mangled, or that does not
 * demangle (c++filt then prints it unchanged), stays as it is. Also: the
 * cache returns one string per distinct name, from several threads at once;
 * the CPU views' frame label (an_cpu_frame_label) demangles a symbol.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analyze/cpu_stacks.h"
#include "../analyze/demangle.h"
#include "stagetrace_reader.h"

static const struct {
    const char *raw, *readable;
} names[] = {
    /* h200-2x2-async: the drafters' all-reduce */
    {"_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
    /* h200-async: templates, substitutions, a struct argument */
    {"_Z11rope_kernelILi0EEvP13__nv_bfloat16PKS0_PKiiiif",
     "void rope_kernel<0>(__nv_bfloat16*, __nv_bfloat16 const*, int const*, int, int, int, float)"},
    {"_Z18attn_fwd_tc_kernelILi8EEvP13__nv_bfloat16PfPKS0_S4_S4_PKh9attn_dims",
     "void attn_fwd_tc_kernel<8>(__nv_bfloat16*, float*, __nv_bfloat16 const*, __nv_bfloat16 const*, "
     "__nv_bfloat16 const*, unsigned char const*, attn_dims)"},
    {"_Z17add_staged_kernelP13__nv_bfloat16PKfmi", "add_staged_kernel(__nv_bfloat16*, float const*, unsigned long, int)"},
    /* cuBLAS's kernels and the API calls are C names: unchanged */
    {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"},
    {"cudaLaunchKernel", "cudaLaunchKernel"},
    /* "_Z" but not a valid mangled name: unchanged */
    {"_Z3foo_bad", "_Z3foo_bad"},
    {"_Z", "_Z"},
    {"", ""},
};
#define N_NAMES (sizeof names / sizeof names[0])

static void test_demangle_sample_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_NAMES; i++) {
        const char *got = an_demangle(names[i].raw);
        assert_non_null(got);
        assert_string_equal(got, names[i].readable);
        /* unchanged names come back as the same pointer, not a copy */
        if (strcmp(names[i].raw, names[i].readable) == 0) assert_ptr_equal(got, names[i].raw);
    }
    assert_null(an_demangle(NULL));
    assert_true(an_demangle_is_mangled(names[0].raw));
    assert_false(an_demangle_is_mangled("nvjet_sm90"));
    assert_false(an_demangle_is_mangled("_z3foov"));
    assert_false(an_demangle_is_mangled(NULL));
    an_demangle_reset();
}

/* One cached string per distinct name: the same pointer for a copy of the
 * name, a new one after a reset. */
static void test_demangle_cache(void **state)
{
    (void)state;
    char copy[128];
    snprintf(copy, sizeof copy, "%s", names[1].raw);
    const char *a = an_demangle(names[1].raw), *b = an_demangle(copy);
    assert_ptr_equal(a, b);
    assert_string_equal(a, names[1].readable);
    /* many distinct names (the table grows past its first size) stay right */
    char buf[64], want[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(buf, sizeof buf, "_Z%dk%dv", i < 10 ? 2 : i < 100 ? 3 : i < 1000 ? 4 : 5, i);
        snprintf(want, sizeof want, "k%d()", i);
        assert_string_equal(an_demangle(buf), want);
    }
    assert_ptr_equal(an_demangle(copy), a);
    an_demangle_reset();
    const char *c = an_demangle(copy);
    assert_string_equal(c, names[1].readable);
    an_demangle_reset();
}

static void *demangle_all(void *arg)
{
    int *bad = arg;
    for (int round = 0; round < 200; round++)
        for (size_t i = 0; i < N_NAMES; i++)
            if (strcmp(an_demangle(names[i].raw), names[i].readable) != 0) (*bad)++;
    return NULL;
}

static void test_demangle_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    int bad[4] = {0};
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, demangle_all, &bad[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(bad[i], 0);
    }
    an_demangle_reset();
}

/* The CPU views' name of a frame with a symbol: demangled. */
static void test_demangle_cpu_frame_label(void **state)
{
    (void)state;
    char buf[64];
    st_cpu_frame fr = {.name = "_ZN10stagetrace6writer5drainEPv", .map = -1, .path = "/usr/bin/trainer"};
    assert_string_equal(an_cpu_frame_label(&fr, 0, buf, sizeof buf), "stagetrace::writer::drain(void*)");
    fr.name = "st_writer_main";
    assert_string_equal(an_cpu_frame_label(&fr, 1, buf, sizeof buf), "st_writer_main");
    fr.name = "";
    assert_string_equal(an_cpu_frame_label(&fr, 0, buf, sizeof buf), "[trainer]");
    an_demangle_reset();
}

/* demangle() of the SQL tables (st_sql_register): the same strings; NULL
 * and numbers pass through. */
static void test_demangle_sql(void **state)
{
    (void)state;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(st_sql_register(db), ST_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT demangle(?1)", -1, &st, NULL), SQLITE_OK);
    for (size_t i = 0; i < N_NAMES; i++) {
        sqlite3_bind_text(st, 1, names[i].raw, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(st, 0), names[i].readable);
        sqlite3_reset(st);
    }
    sqlite3_bind_null(st, 1);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_type(st, 0), SQLITE_NULL);
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, 42);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 42);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demangle_sample_names), cmocka_unit_test(test_demangle_cache),
        cmocka_unit_test(test_demangle_threads),      cmocka_unit_test(test_demangle_cpu_frame_label),
        cmocka_unit_test(test_demangle_sql),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
