/* test_common.c: the helpers every command shares: the option parser
 * (analyze/args.c) and the parsing of step and time windows (select.c).
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_window_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
