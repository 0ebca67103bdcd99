/* test_cmd_summary.c: the `analyze summary` program with --jobs N prints
 * the same bytes (text, CSV, JSON) and the same error for --jobs 1, 2 and 7,
 * and refuses a bad --jobs with one line and exit status 2 (analyze/
 * cmd_summary.c), on the jobs set of tests/traces.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "traces.h"

static char analyze_path[PATH_MAX];

/* $ST_BUILD/analyze, absolute: the commands run in tmp_dir. */
/* $ST_BUILD/analyze, absolute: the commands run in tmp_dir. */
static int find_analyze(void)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/analyze", build_dir());
    return realpath(rel, analyze_path) && access(analyze_path, X_OK) == 0 ? 0 : -1;
}

typedef struct result {
    int status;
    char *out, *err;
} result;

/* Runs `analyze summary ARGS` in tmp_dir (relative file names: the output
 * does not depend on where the test runs). */
static result summary(const char *args)
{
    char cmd[PATH_MAX * 3 + 512];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' summary %s >summary.out 2>summary.err", tmp_dir, analyze_path, args);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc));
    result r = {WEXITSTATUS(rc), NULL, NULL};
    r.out = read_file(tmp_file("summary.out"), NULL);
    r.err = read_file(tmp_file("summary.err"), NULL);
    return r;
}

static void free_result(result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_cli_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    static const char *const formats[] = {"text", "csv", "json"};
    static const char *const selections[] = {
        "jobs0.sqlite",
        "--steps 3:11 jobs0.sqlite",
        "--time 0.01:0.2 --sort p99 jobs0.sqlite",
        "--role drafter,target --stage forward --stage backward,d2h jobs0.sqlite",
        "--thread loader --thread drafter2,0 --sort count jobs0.sqlite",
        "jobs0.sqlite jobs1.sqlite",
        "--steps 5: --sort name jobs1.sqlite jobs0.sqlite",
        "--separate jobs0.sqlite jobs1.sqlite",
        "--merge --role drafter jobs0.sqlite jobs1.sqlite jobs0.sqlite",
    };
    for (size_t s = 0; s < sizeof selections / sizeof selections[0]; s++) {
        for (size_t f = 0; f < 3; f++) {
            char args[512];
            snprintf(args, sizeof args, "--format %s --jobs 1 %s", formats[f], selections[s]);
            result one = summary(args);
            if (one.status != 0) fail_msg("summary %s: exit %d: %s", args, one.status, one.err);
            assert_true(strlen(one.out) > 200);
            static const char *const jobs[] = {"--jobs 2", "--jobs 7", "--jobs=3", ""};
            for (size_t j = 0; j < 4; j++) {
                snprintf(args, sizeof args, "--format %s %s %s", formats[f], jobs[j], selections[s]);
                result many = summary(args);
                assert_int_equal(many.status, one.status);
                if (strcmp(many.out, one.out) != 0) fail_msg("summary %s: output differs from --jobs 1", args);
                assert_string_equal(many.err, one.err);
                free_result(&many);
            }
            free_result(&one);
        }
    }
}

/* A corrupt chunk: the same single line and status 2 for every --jobs. */
static void test_cli_error_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    result one = summary("--jobs 1 corrupt.sqlite");
    assert_int_equal(one.status, 2);
    assert_int_equal(count_lines(one.err), 1);
    assert_non_null(strstr(one.err, "analyze: corrupt.sqlite: trace table 'range_chunks': chunk "));
    assert_non_null(strstr(one.err, "(thread 11) is corrupt or truncated"));
    assert_string_equal(one.out, "");
    static const char *const jobs[] = {"--jobs 2 corrupt.sqlite", "--jobs 7 corrupt.sqlite",
                                       "--jobs 2 jobs0.sqlite corrupt.sqlite", "--jobs 7 --role drafter,target corrupt.sqlite"};
    for (size_t j = 0; j < 4; j++) {
        result many = summary(jobs[j]);
        assert_int_equal(many.status, 2);
        assert_string_equal(many.err, one.err);
        assert_string_equal(many.out, "");
        free_result(&many);
    }
    free_result(&one);
    /* Without the loader, the first corrupt thread is drafter1 (id 14). */
    one = summary("--jobs 1 --role drafter corrupt.sqlite");
    assert_int_equal(one.status, 2);
    assert_non_null(strstr(one.err, "(thread 14) is corrupt or truncated"));
    result many = summary("--jobs 2 --role drafter corrupt.sqlite");
    assert_int_equal(many.status, 2);
    assert_string_equal(many.err, one.err);
    free_result(&many);
    free_result(&one);
}

static void test_cli_bad_jobs(void **state)
{
    (void)state;
    if (find_analyze()) skip();
    static const char *const bad[] = {"0",   "-1", "-7", "two", "''", "1.5", "3x", "257",
                                      "4096", "99999999999999999999", "18446744073709551617", " 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--jobs %s jobs0.sqlite", bad[i][0] == ' ' ? "' 2'" : bad[i]);
        result r = summary(args);
        if (r.status != 2) fail_msg("summary %s: exit %d, wanted 2", args, r.status);
        assert_int_equal(count_lines(r.err), 1);
        assert_non_null(strstr(r.err, "analyze: summary: --jobs needs a number of threads from 1 to 256, not '"));
        assert_string_equal(r.out, "");
        free_result(&r);
    }
    result r = summary("jobs0.sqlite --jobs");
    assert_int_equal(r.status, 2);
    assert_int_equal(count_lines(r.err), 1);
    assert_non_null(strstr(r.err, "analyze: summary: option '--jobs' needs a value"));
    free_result(&r);
    r = summary("--jobs 256 jobs0.sqlite"); /* the largest: fine, however many CPUs */
    assert_int_equal(r.status, 0);
    free_result(&r);
    r = summary("--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  --jobs N "));
    free_result(&r);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_cmd_summary")) return -1;
    write_jobs_traces(tmp_dir);
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
        cmocka_unit_test(test_cli_jobs),
        cmocka_unit_test(test_cli_error_jobs),
        cmocka_unit_test(test_cli_bad_jobs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
