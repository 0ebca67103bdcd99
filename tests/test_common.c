/* test_common.c: the helpers every command shares: the option parser
 * (analyze/args.c) with the values several commands take (--every,
 * --speedup), the parsing of step and time windows (select.c), and the
 * default window length a trace gives (trace.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tracegen.h"

#include "../analyze/analyze.h"

static void test_args(void **state)
{
    (void)state;
    static const an_opt opts[] = {{"every", 1, 1}, {"flag", 0, 2}, {"help", 0, AN_OPT_HELP}, {NULL, 0, 0}};
    char *argv[] = {"cmd", "a", "--every=3", "--flag", "b", "--every", "4", "--", "--flag", "-", NULL};
    an_args a;
    assert_int_equal(an_args_init(&a, "cmd", 10, argv), 0);
    assert_int_equal(an_args_next(&a, opts), 1);
    assert_string_equal(a.value, "3");
    assert_int_equal(an_args_next(&a, opts), 2);
    assert_int_equal(an_args_next(&a, opts), 1);
    assert_string_equal(a.value, "4");
    assert_int_equal(an_args_next(&a, opts), 0);
    assert_int_equal(a.n_pos, 4);
    assert_string_equal(a.pos[0], "a");
    assert_string_equal(a.pos[1], "b");
    assert_string_equal(a.pos[2], "--flag");
    assert_string_equal(a.pos[3], "-");
    an_args_free(&a);
    char *bad1[] = {"cmd", "--nope", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad1), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
    char *bad2[] = {"cmd", "--every", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad2), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
    char *bad3[] = {"cmd", "--flag=1", NULL};
    assert_int_equal(an_args_init(&a, "cmd", 2, bad3), 0);
    assert_int_equal(an_args_next(&a, opts), -1);
    an_args_free(&a);
}

static void test_window_parse(void **state)
{
    (void)state;
    an_window_spec w;
    assert_int_equal(an_window_parse_steps(&w, "2:4"), 0);
    assert_true(w.has_a && w.has_b && w.step_a == 2 && w.step_b == 4);
    assert_int_equal(an_window_parse_steps(&w, "3:"), 0);
    assert_true(w.has_a && !w.has_b);
    assert_int_equal(an_window_parse_steps(&w, "4:2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "x:2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "2"), -1);
    assert_int_equal(an_window_parse_steps(&w, "1:2:3"), -1);
    assert_int_equal(an_window_parse_time(&w, "0.25:0.5"), 0);
    assert_int_equal(w.time_a_ns, 250000000);
    assert_int_equal(w.time_b_ns, 500000000);
    assert_int_equal(an_window_parse_time(&w, ":1e-3"), 0);
    assert_int_equal(w.time_b_ns, 1000000);
    assert_int_equal(an_window_parse_time(&w, "-1:2"), -1);
    assert_int_equal(an_window_parse_time(&w, "nan:2"), -1);
    assert_int_equal(an_window_parse_time(&w, "2:1"), -1);
}

static void test_shared_values(void **state)
{
    (void)state;
    uint64_t every = 0;
    double speedup = 0;
    assert_int_equal(an_opt_every("cmd", "1", &every), AN_EXIT_OK);
    assert_int_equal(every, 1);
    assert_int_equal(an_opt_every("cmd", "4294967295", &every), AN_EXIT_OK);
    assert_int_equal(every, UINT32_MAX);
    assert_int_equal(an_opt_every("cmd", "4294967296", &every), AN_EXIT_USAGE);
    assert_int_equal(an_opt_every("cmd", "0", &every), AN_EXIT_USAGE);
    assert_int_equal(an_opt_every("cmd", "-1", &every), AN_EXIT_USAGE);
    assert_int_equal(an_opt_every("cmd", "3x", &every), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "1", &speedup), AN_EXIT_OK);
    assert_true(speedup == 1.0);
    assert_int_equal(an_opt_speedup("cmd", "2.5", &speedup), AN_EXIT_OK);
    assert_true(speedup == 2.5);
    assert_int_equal(an_opt_speedup("cmd", "1e6", &speedup), AN_EXIT_OK);
    assert_int_equal(an_opt_speedup("cmd", "1.000001e6", &speedup), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "0.99", &speedup), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "inf", &speedup), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "nan", &speedup), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "", &speedup), AN_EXIT_USAGE);
    assert_int_equal(an_opt_speedup("cmd", "2 ", &speedup), AN_EXIT_USAGE);
}

/* The window length without --every: meta profile_interval when it is 1 to
 * UINT32_MAX, otherwise 10 (absent, 0, negative, too large; a value that is not an
 * integer is refused when the trace is opened). */
static void test_trace_every(void **state)
{
    (void)state;
    static const struct {
        const char *value; /* NULL: no profile_interval in meta */
        uint64_t want;
    } cases[] = {{"7", 7}, {"1", 1}, {"4294967295", UINT32_MAX}, {NULL, 10}, {"0", 10},
                 {"-3", 10}, {"4294967296", 10}};
    assert_int_equal(make_tmp_dir("test_common"), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_trace *g = tg_create("gen");
        uint32_t th = tg_thread(g, "main", "main"), st = tg_stage(g, "work", "work");
        tg_range(g, th, st, 1000000000, 1000002000);
        if (cases[i].value) tg_meta(g, "profile_interval", cases[i].value);
        else tg_meta_unset(g, "profile_interval");
        const char *path = tmp_file("every.sqlite");
        tg_write(g, path);
        tg_free(g);
        an_trace t;
        assert_int_equal(an_trace_open(&t, path), 0);
        if (an_trace_every(&t) != cases[i].want)
            fail_msg("profile_interval %s: %llu, want %llu", cases[i].value ? cases[i].value : "(absent)",
                     (unsigned long long)an_trace_every(&t), (unsigned long long)cases[i].want);
        an_trace_close(&t);
    }
    assert_int_equal(remove_tmp_dir(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_window_parse),
        cmocka_unit_test(test_shared_values),
        cmocka_unit_test(test_trace_every),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
