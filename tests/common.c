/* common.c: the helpers of tests/common.h, shared by the test programs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* ---- files ---- */

char tmp_dir[PATH_MAX];
static bool tmp_dir_under_system_tmp;

int make_tmp_dir(const char *program)
{
    const char *base = getenv("ST_TEST_TMP");
    tmp_dir_under_system_tmp = !base || !*base;
    if (tmp_dir_under_system_tmp) base = "/tmp";
    snprintf(tmp_dir, sizeof tmp_dir, "%s/%s.XXXXXX", base, program);
    if (!mkdtemp(tmp_dir)) {
        fprintf(stderr, "cannot make a temporary directory under %s: %s\n", base, strerror(errno));
        return -1;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int remove_tmp_dir(void)
{
    return nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

void tidy_tmp_dir(int failed_tests)
{
    if (!failed_tests && tmp_dir_under_system_tmp) remove_tmp_dir();
}

void remove_trace_files(const char *path)
{
    static const char *const sides[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s%s", path, sides[i]);
        unlink(p);
    }
}

void tmp_path(char *out, size_t size, const char *name)
{
    int n = snprintf(out, size, "%s/%s", tmp_dir, name);
    if (n < 0 || (size_t)n >= size) fail_msg("path too long: %s/%s", tmp_dir, name);
    remove_trace_files(out);
}

const char *tmp_file(const char *name)
{
    static char buf[PATH_MAX + 256];
    int n = snprintf(buf, sizeof buf, "%s/%s", tmp_dir, name);
    if (n < 0 || (size_t)n >= sizeof buf) fail_msg("path too long: %s/%s", tmp_dir, name);
    return buf;
}

char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s: %s", path, strerror(errno));
    size_t cap = 4096, used = 0, got;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((got = fread(buf + used, 1, cap - used - 1, f)) > 0) {
        used += got;
        if (cap - used < 2) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[used] = '\0';
    if (len) *len = used;
    return buf;
}

const char *build_dir(void)
{
    const char *b = getenv("ST_BUILD");
    return b && *b ? b : "build";
}

double monotonic_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- reading traces ---- */

st_reader *open_reader(const char *path)
{
    st_reader *r = NULL;
    int rc = st_reader_open(&r, path);
    if (rc) fail_msg("st_reader_open('%s') = %d: %s", path, rc, st_last_error());
    return r;
}

st_reader *open_complete_trace(const char *path)
{
    st_reader *r = open_reader(path);
    assert_meta(r, "status", "complete");
    assert_meta(r, "dropped_events", "0");
    return r;
}

void assert_meta(const st_reader *r, const char *key, const char *want)
{
    const char *v = st_reader_meta(r, key);
    if (!want) {
        if (v) fail_msg("meta %s = '%s', want it absent", key, v);
        return;
    }
    if (!v || strcmp(v, want) != 0) fail_msg("meta %s = '%s', want '%s'", key, v ? v : "(absent)", want);
}

long long meta_ll(const st_reader *r, const char *key)
{
    const char *v = st_reader_meta(r, key);
    if (!v) fail_msg("meta %s is absent", key);
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end) fail_msg("meta %s = '%s' is not an integer", key, v);
    return x;
}

void test_options(st_options *o, const char *path)
{
    st_options_init(o);
    o->path = path;
    o->nvtx = 0;
}

const st_thread_info *thread_named(const st_reader *r, const char *name)
{
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++)
        if (strcmp(st_reader_thread(r, i)->name, name) == 0) return st_reader_thread(r, i);
    return NULL;
}

int stage_id(const st_reader *r, const char *name)
{
    for (uint32_t i = 0; i < st_reader_n_stages(r); i++)
        if (strcmp(st_reader_stage(r, i)->name, name) == 0) return (int)i;
    return -1;
}

int counter_id(const st_reader *r, const char *name)
{
    for (uint32_t i = 0; i < st_reader_n_counters(r); i++)
        if (strcmp(st_reader_counter(r, i)->name, name) == 0) return (int)st_reader_counter(r, i)->id;
    return -1;
}

long count_ranges(st_reader *r, uint32_t thread, int stage)
{
    st_range_iter *it;
    assert_int_equal(st_range_iter_open(&it, r, thread, INT64_MIN, INT64_MAX), ST_OK);
    st_range rg;
    long n = 0;
    int rc;
    while ((rc = st_range_iter_next(it, &rg)) == 1) n += (int)rg.stage == stage;
    assert_int_equal(rc, 0);
    st_range_iter_close(it);
    return n;
}

void append_window(const st_window *w, void *text)
{
    text_buf *t = text;
    size_t need = st_window_format(w, NULL, 0);
    if (t->len + need + 1 > t->cap) {
        t->cap = (t->len + need + 1) * 2;
        t->data = realloc(t->data, t->cap);
    }
    st_window_format(w, t->data + t->len, need + 1);
    t->len += need;
}

/* ---- SQL ---- */

sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    return st;
}

void exec_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("SQL failed: %s: %s", sql, err ? err : "?");
}

int64_t sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    if (sqlite3_step(st) != SQLITE_ROW) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int64_t sql_intf(sqlite3 *db, const char *format, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(sql, sizeof sql, format, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql) fail_msg("query too long: %s", format);
    return sql_int(db, sql);
}

/* ---- running the trainer ---- */

char trainer_path[PATH_MAX];

int find_trainer(void)
{
    char relative[PATH_MAX];
    snprintf(relative, sizeof relative, "%s/trainer", build_dir());
    if (!realpath(relative, trainer_path) || access(trainer_path, X_OK)) {
        fprintf(stderr, "no trainer at %s (build it, or set ST_BUILD)\n", relative);
        return -1;
    }
    return 0;
}

pid_t spawn_trainer(const char *const *args, const trainer_options *opt, const char *out_path,
                    const char *err_path)
{
    static const trainer_options defaults;
    if (!opt) opt = &defaults;
    const char *argv[80];
    int n = 0;
    argv[n++] = trainer_path;
    for (int i = 0; args[i] && n < 79; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || (opt->cwd && chdir(opt->cwd)))
            _exit(127);
        for (int i = 0; opt->env && opt->env[i]; i++) putenv((char *)opt->env[i]);
        execv(trainer_path, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int wait_trainer(pid_t pid, double timeout_s)
{
    double start = monotonic_s();
    int status = 0, stopped = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
        if (r == pid) break;
        if (r < 0) assert_int_equal(errno, EINTR);
        if (timeout_s <= 0) continue;
        double waited = monotonic_s() - start;
        if (waited > timeout_s && !stopped) {
            kill(pid, SIGTERM);
            stopped = 1;
        } else if (waited > timeout_s + 15.0) {
            kill(pid, SIGKILL);
        }
        usleep(20000);
    }
    if (stopped) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

trainer_result run_trainer(const char *const *args, const trainer_options *opt)
{
    static int serial;
    char out_path[PATH_MAX], err_path[PATH_MAX], name[64];
    snprintf(name, sizeof name, "run%d.out", serial);
    tmp_path(out_path, sizeof out_path, name);
    snprintf(name, sizeof name, "run%d.err", serial++);
    tmp_path(err_path, sizeof err_path, name);
    trainer_result r;
    r.status = wait_trainer(spawn_trainer(args, opt, out_path, err_path), opt ? opt->timeout_s : 0);
    r.out = read_file(out_path, NULL);
    r.err = read_file(err_path, NULL);
    return r;
}

void free_trainer_result(trainer_result *r)
{
    free(r->out);
    free(r->err);
}

int parse_trainer_log(const char *out, trainer_log_line *lines, int max)
{
    int n = 0;
    for (const char *p = out; *p && n < max; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "") {
        trainer_log_line l = {0, 0, -1, -1, 0, 0, 0};
        if (sscanf(p, "step %ld loss %lf acc %lf top4 %lf tok/s %lf queue %d/%d", &l.step, &l.loss, &l.acc,
                   &l.topk, &l.tok_s, &l.queue, &l.depth) == 7 ||
            sscanf(p, "step %ld loss %lf acc - top4 - tok/s %lf queue %d/%d", &l.step, &l.loss, &l.tok_s,
                   &l.queue, &l.depth) == 5)
            lines[n++] = l;
    }
    return n;
}

char *profile_text(const char *out)
{
    size_t len = strlen(out), at = 0;
    char *text = calloc(1, len + 1);
    assert_non_null(text);
    int in_window = 0;
    for (const char *p = out; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) + 1 : strlen(p);
        if (!strncmp(p, "profile ", 8))
            in_window = 1;
        else if (strncmp(p, "  ", 2))
            in_window = 0;
        if (in_window) {
            memcpy(text + at, p, n);
            at += n;
        }
        p += n;
    }
    return text;
}
