/* test_table.c: the output tables of every command (analyze/table.c): the
 * fixed-point and integer formatting, JSON and CSV escaping, one table
 * rendered as text, CSV and JSON, and --table's selection (an_out_only) of
 * one table among three.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#include "../analyze/analyze.h"

static void test_fmt(void **state)
{
    (void)state;
    char buf[64];
    an_fmt_fixed(buf, 62500000, 6, 3);
    assert_string_equal(buf, "62.500");
    an_fmt_fixed(buf, 1234567, 6, 6);
    assert_string_equal(buf, "1.234567");
    an_fmt_fixed(buf, 1999500, 6, 3); /* half away from zero */
    assert_string_equal(buf, "2.000");
    an_fmt_fixed(buf, -1500, 3, 3);
    assert_string_equal(buf, "-1.500");
    an_fmt_fixed(buf, -400, 6, 3); /* rounds to zero: no sign */
    assert_string_equal(buf, "0.000");
    an_fmt_fixed(buf, INT64_MIN, 9, 9);
    assert_string_equal(buf, "-9223372036.854775808");
    an_fmt_i64(buf, INT64_MIN);
    assert_string_equal(buf, "-9223372036854775808");
    an_fmt_i64(buf, 0);
    assert_string_equal(buf, "0");
}

static char *capture(void (*fn)(FILE *, const char *), const char *in)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    fn(m, in);
    fclose(m);
    return buf;
}

static void test_escaping(void **state)
{
    (void)state;
    char *s = capture(an_json_string, "a\"b\\c\n\x01\xc3\xa9\xff\xed\xa0\x80z");
    /* quote, backslash, newline, control, valid é, invalid byte, a surrogate (3 invalid bytes) */
    assert_string_equal(s, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\\ufffd\\ufffd\\ufffd\\ufffdz\"");
    free(s);
    s = capture(an_csv_field, "plain");
    assert_string_equal(s, "plain");
    free(s);
    s = capture(an_csv_field, "a,\"b\"");
    assert_string_equal(s, "\"a,\"\"b\"\"\"");
    free(s);
    s = capture(an_csv_field, " lead");
    assert_string_equal(s, "\" lead\"");
    free(s);
}

static char *render(an_format fmt)
{
    static const an_col cols[] = {{"name", AN_T_STR, 0}, {"ms", AN_T_MS, 0}, {"pct", AN_T_PCT, 0}, {"n", AN_T_INT, 0}};
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    an_out *o = an_out_new(m, fmt);
    an_table *t = an_table_new(o, "t", cols, 4);
    an_put_str(t, "a\x1b[31m");
    an_put_ns(t, 62500000);
    an_put_pct(t, 62.5);
    an_put_int(t, 8);
    an_row_end(t);
    an_table_gap(t);
    an_put_str(t, "long name");
    an_put_null(t);
    an_put_pct(t, NAN);
    an_put_int(t, -1);
    an_row_end(t);
    an_table_end(t);
    assert_int_equal(an_out_finish(o), 0);
    fclose(m);
    return buf;
}

static void test_tables(void **state)
{
    (void)state;
    char *s = render(AN_FMT_TEXT);
    assert_string_equal(s, "name           ms    pct   n\n"
                           "a?[31m     62.500  62.5%   8\n"
                           "\n"
                           "long name       -      -  -1\n");
    free(s);
    s = render(AN_FMT_CSV);
    assert_string_equal(s, "name,ms,pct,n\na\x1b[31m,62.500000,62.5,8\nlong name,,,-1\n");
    free(s);
    s = render(AN_FMT_JSON);
    assert_string_equal(s, "{\n\"t\": [\n  {\"name\": \"a\\u001b[31m\", \"ms\": 62.500000, \"pct\": 62.5, \"n\": 8},\n"
                           "  {\"name\": \"long name\", \"ms\": null, \"pct\": null, \"n\": -1}\n]\n}\n");
    free(s);
}

/* A table whose first cell is empty: nothing is in the text arena yet when
 * the cell is added (under UBSan, memcpy from an empty cell into a NULL
 * arena was a report). */
static void test_empty_first_cell(void **state)
{
    (void)state;
    static const an_col cols[] = {{"name", AN_T_STR, 0}, {"n", AN_T_INT, 0}};
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    an_out *o = an_out_new(m, AN_FMT_TEXT);
    an_table *t = an_table_new(o, "t", cols, 2);
    an_put_str(t, "");
    an_put_int(t, 1);
    an_row_end(t);
    an_put_str(t, "b");
    an_put_int(t, 22);
    an_row_end(t);
    an_table_end(t);
    assert_int_equal(an_out_finish(o), 0);
    fclose(m);
    assert_string_equal(buf, "name   n\n       1\nb     22\n");
    free(buf);
}

/* Three tables a, b, c of one row each (b twice: a name may repeat), as
 * --table only (NULL: all) prints them. */
static char *render_three(an_format fmt, const char *only, int *missing, char *printed, size_t size)
{
    static const an_col cols[] = {{"name", AN_T_STR, 0}, {"n", AN_T_INT, 0}};
    static const char *const names[] = {"a", "b", "c", "b"};
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    an_out_only(only);
    an_out *o = an_out_new(m, fmt);
    an_out_text(o, "heading\n");
    for (int i = 0; i < 4; i++) {
        an_table *t = an_table_new(o, names[i], cols, 2);
        an_put_str(t, names[i]);
        an_put_int(t, i);
        an_row_end(t);
        an_table_gap(t);
        an_table_end(t);
    }
    assert_int_equal(an_out_finish(o), 0);
    fclose(m);
    *missing = an_out_only_missing(printed, size);
    an_out_only(NULL);
    return buf;
}

static void test_only(void **state)
{
    (void)state;
    char printed[64];
    int missing;
    char *s = render_three(AN_FMT_CSV, NULL, &missing, printed, sizeof printed);
    assert_string_equal(s, "name,n\na,0\n\nname,n\nb,1\n\nname,n\nc,2\n\nname,n\nb,3\n");
    assert_int_equal(missing, 0);
    free(s);
    s = render_three(AN_FMT_CSV, "b", &missing, printed, sizeof printed);
    assert_string_equal(s, "name,n\nb,1\n\nname,n\nb,3\n");
    assert_int_equal(missing, 0);
    free(s);
    s = render_three(AN_FMT_JSON, "c", &missing, printed, sizeof printed);
    assert_string_equal(s, "{\n\"c\": [\n  {\"name\": \"c\", \"n\": 2}\n]\n}\n");
    assert_int_equal(missing, 0);
    free(s);
    /* a name no table has: nothing at all, and the names there were */
    s = render_three(AN_FMT_JSON, "d", &missing, printed, sizeof printed);
    assert_string_equal(s, "");
    assert_int_equal(missing, 1);
    assert_string_equal(printed, "a, b, c");
    free(s);
    s = render_three(AN_FMT_CSV, "d", &missing, printed, sizeof printed);
    assert_string_equal(s, "");
    free(s);
    /* the selection ends with an_out_only(NULL): the next document has every table */
    s = render_three(AN_FMT_JSON, NULL, &missing, printed, sizeof printed);
    assert_non_null(strstr(s, "\"a\": ["));
    assert_non_null(strstr(s, "\"c\": ["));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fmt),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_empty_first_cell),
        cmocka_unit_test(test_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
