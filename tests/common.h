/* common.h: helpers that several test programs share, so that each test file
 * holds only what it tests. The Makefile links tests/common.c, with the
 * trace writer (tests/tracegen.h) and the traces of known contents
 * (tests/traces.h), into every cmocka program written in C, the unit tests
 * and those in tests/gpu; a test includes this header after <cmocka.h>.
 *
 * The helpers fail the running test through cmocka, so they belong on the
 * test's own thread, with one exception said below (append_window).
 */
#ifndef ST_TESTS_COMMON_H
#define ST_TESTS_COMMON_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "st_intervals.h"
#include "st_reader.h"
#include "stagetrace.h"

/* ---- files ---- */

/* The program's own directory for the files it writes, made by make_tmp_dir. */
extern char tmp_dir[PATH_MAX];

/* Makes tmp_dir, a fresh directory "<program>.XXXXXX" under $ST_TEST_TMP
 * (tests/run.sh sets it, and keeps it with the logs), else under /tmp.
 * Returns 0, or prints why not and returns -1. */
int make_tmp_dir(const char *program);

/* Removes tmp_dir and everything in it. Returns 0, or -1 when something
 * stayed. */
int remove_tmp_dir(void);

/* What a program does with tmp_dir when its tests are over: removes it when
 * none failed and it was made under /tmp, where nobody else cleans up; after
 * a failure, or under $ST_TEST_TMP, the files stay for a look. */
void tidy_tmp_dir(int failed_tests);

/* tmp_dir/name, with no file of an earlier test there (nor its SQLite side
 * files). Fails the test when the path does not fit in out. */
void tmp_path(char *out, size_t size, const char *name);

/* tmp_dir/name, leaving any file there (a trace the program's setup wrote),
 * in a buffer that the next call reuses. */
const char *tmp_file(const char *name);

/* Removes a trace and the side files SQLite may leave beside it. */
void remove_trace_files(const char *path);

/* The whole file, NUL-terminated, in memory the caller frees; its length in
 * *len when len is not NULL. Fails the test when the file cannot be read. */
char *read_file(const char *path, size_t *len);

/* The build directory under test: $ST_BUILD, else "build". */
const char *build_dir(void);

/* Seconds on the monotonic clock. */
double monotonic_s(void);

/* ---- reading traces ---- */

/* Fails the test, with the reader's message, when path does not open. */
st_reader *open_reader(const char *path);

/* Opens the trace of a run that ended well: status complete, nothing dropped. */
st_reader *open_complete_trace(const char *path);

/* The trace's meta value for key is want (want NULL: key is absent). */
void assert_meta(const st_reader *r, const char *key, const char *want);

/* The trace's meta value for key as an integer; fails the test when it is
 * absent or not an integer. */
long long meta_ll(const st_reader *r, const char *key);

/* Options for a test trace at path: the library's defaults, NVTX off. */
void test_options(st_options *o, const char *path);

/* Lookups by name; NULL or -1 when the trace has none, so that a test can
 * also assert absence. */
const st_thread_info *thread_named(const st_reader *r, const char *name);
int stage_id(const st_reader *r, const char *name);
int counter_id(const st_reader *r, const char *name);

/* How many ranges of `stage` thread `thread` recorded. */
long count_ranges(st_reader *r, uint32_t thread, int stage);

/* Text that grows as windows are appended; starts as {0}, data is freed by
 * the caller. */
typedef struct text_buf {
    char *data;
    size_t len, cap;
} text_buf;

/* An st_window callback (arg: a text_buf) that appends the window as
 * st_window_format writes it. It never asserts, so the trace's writer thread
 * may call it (options.on_window). */
void append_window(const st_window *w, void *text);

/* ---- SQL ---- */

/* Fail the test with SQLite's message when the statement does not compile,
 * run, or give a row. */
sqlite3_stmt *prepare(sqlite3 *db, const char *sql);
void exec_sql(sqlite3 *db, const char *sql);
int64_t sql_int(sqlite3 *db, const char *sql);
/* sql_int of the query that printf-style format and arguments make. */
int64_t sql_intf(sqlite3 *db, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* ---- running the trainer ---- */

/* The trainer under test, absolute (some runs start in another directory);
 * set by find_trainer. */
extern char trainer_path[PATH_MAX];

/* Finds $ST_BUILD/trainer. Returns 0, or prints why not and returns -1. */
int find_trainer(void);

/* How a run starts; {0}: here, in this environment, however long it takes. */
typedef struct trainer_options {
    const char *cwd;        /* the directory it starts in; NULL: this one */
    const char *const *env; /* NAME=VALUE strings added to its environment, NULL-ended */
    double timeout_s;       /* then SIGTERM, and SIGKILL 15 s later; 0: no limit */
} trainer_options;

/* Starts the trainer with args (NULL-terminated), its stdout and stderr
 * going to files. opt NULL: {0}. */
pid_t spawn_trainer(const char *const *args, const trainer_options *opt, const char *out_path,
                    const char *err_path);

/* Exit status, 128 + signal, or -1 when it ran past timeout_s and was
 * stopped (timeout_s 0: waits as long as it runs). */
int wait_trainer(pid_t pid, double timeout_s);

typedef struct trainer_result {
    int status; /* as wait_trainer returns it */
    char *out, *err;
} trainer_result;

/* Runs the trainer to its end, keeping what it printed (each run's output
 * stays in tmp_dir as runN.out and runN.err). opt NULL: {0}. */
trainer_result run_trainer(const char *const *args, const trainer_options *opt);
void free_trainer_result(trainer_result *r);

/* One log line: "step N loss X acc A top4 B tok/s T queue Q/D"; before any
 * accuracy is measured the trainer prints "acc - top4 -", read as -1. */
typedef struct trainer_log_line {
    long step;
    double loss, acc, topk, tok_s;
    int queue, depth;
} trainer_log_line;

/* The log lines in out, at most max of them; returns how many. */
int parse_trainer_log(const char *out, trainer_log_line *lines, int max);

/* The profile lines in out (window headers and the lines indented under
 * them), in memory the caller frees: what append_window gives for the same
 * windows. */
char *profile_text(const char *out);

#endif
