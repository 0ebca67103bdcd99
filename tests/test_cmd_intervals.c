/* test_cmd_intervals.c: `analyze intervals` prints the reader's windows
 * (st_reader_windows); they equal the interval aggregator fed directly from
 * the generator's events (tests/traces.c, trace_windows_text), without the
 * reader.
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
#include "st_intervals.h"
#include "st_reader.h"
#include "traces.h"

/* An st_window callback appending the window, as st_window_format writes
 * it, to the text *arg (NULL at first). */
static void on_window_append(const st_window *w, void *arg)
{
    char **text = arg;
    size_t len = st_window_format(w, NULL, 0), old = *text ? strlen(*text) : 0;
    *text = realloc(*text, old + len + 1);
    assert_non_null(*text);
    assert_int_equal(st_window_format(w, *text + old, len + 1), len);
}

static void test_intervals_equal(void **state)
{
    (void)state;
    tg_trace *g = trace_main("complete");
    char *want = trace_windows_text(g, 2);
    tg_free(g);
    st_reader *r;
    assert_int_equal(st_reader_open(&r, tmp_file("gen.sqlite")), ST_OK);
    char *got = NULL;
    assert_int_equal(st_reader_windows(r, 2, on_window_append, &got), ST_OK);
    assert_non_null(got);
    assert_string_equal(got, want);
    /* Window 0 splits allreduce at 200 ms: 50 ms in it. */
    assert_non_null(strstr(want, "profile steps 1-2  window 0.200 s  tokens 2000  tokens/s 10000\n"));
    assert_non_null(strstr(want, "allreduce 25.0% 50.0ms"));
    free(want);
    free(got);
    st_reader_close(r);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_cmd_intervals")) return -1;
    write_stats_traces(tmp_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return remove_tmp_dir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intervals_equal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
