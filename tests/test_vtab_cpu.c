/* test_vtab_cpu.c: the CPU row tables of tracer/vtab.c (cpu_samples,
 * cpu_switches, cpu_lost, cpu_frames, cpu_stack_text and the view
 * cpu_samples_v; docs/trace-format.md, "Row views"), on a trace of exactly
 * known contents written by tests/tracegen.c. The expected rows are the
 * records put into the trace below, one by one: thread w0's are those of
 * test_reader_cpu.c (three samples the writer stored as "stage unknown",
 * placed by the reader from w0's ranges), w1 adds a blocked switch and a
 * sample of no stage. Checked: every row and column; rowids chunk id * 2^32
 * + the record's index in its chunk; a time window and a thread pushed down
 * give the rows a filter that SQLite applies itself gives, and the plan
 * carries them; a trace without the CPU tables has empty tables; a damaged
 * chunk or stack makes the query fail with the reader's line; the loadable
 * extension in the sqlite3 shell prints what the library's tables print.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "encoding.h"
#include "st_reader.h"
#include "stagetrace.h"
#include "tracegen.h"

static const uint64_t stack0[] = {0x401000, 0x401234, 0x400f00};
static const uint64_t stack2[] = {0x7f0000001000ull};

#define R_SW(k, t) {.kind = (k), .ts_ns = (t)}
#define R_S(t, st, sg) {.kind = ST_CPU_REC_SAMPLE, .ts_ns = (t), .stack = (st), .stage = (sg)}
#define R_U(t, st) {.kind = ST_CPU_REC_SAMPLE_UNKNOWN, .ts_ns = (t), .stack = (st)}

/* w0: work [1000, 11000) holding wait [4000, 6000). Chunk 1 (w0): out
 * blocked 2000, in 3000, sample stack 0 in work 3500, unknown stack 2 at
 * 4000 (-> wait). Chunk 2 (w1): out blocked 2500, in 2600, sample stack 2
 * with no stage at 2700. Chunk 3 (w0): unknown stack 1 at 6000 (-> work),
 * out preempted 7000, in 7500, lost 3 at 8000, unknown stack 0 at 11000
 * (-> none: work ended then), sample stack 0 with no stage at 12000. */
static void write_cpu_trace(const char *path, int with_cpu)
{
    tg_trace *g = tg_create("cpugen");
    uint32_t work = tg_stage(g, "work", "work");
    uint32_t wait = tg_stage(g, "wait", "wait_input");
    uint32_t w0 = tg_thread(g, "w0", "worker");
    uint32_t w1 = tg_thread(g, "w1", "worker");
    tg_begin(g, w0, work, 1000);
    tg_begin(g, w0, wait, 4000);
    tg_end(g, w0, 6000);
    tg_end(g, w0, 11000);
    if (with_cpu) {
        tg_cpu_thread(g, w0, "perf", 1000000, 500, 9000);
        tg_cpu_thread(g, w1, "perf", 1000000, 500, 1000);
        tg_cpu_stack(g, stack0, 3);
        tg_cpu_stack(g, NULL, 0);
        tg_cpu_stack(g, stack2, 1);
        const st_cpu_rec c1[] = {R_SW(ST_CPU_REC_OUT, 2000), R_SW(ST_CPU_REC_IN, 3000), R_S(3500, 0, work),
                                 R_U(4000, 2)};
        const st_cpu_rec c2[] = {R_SW(ST_CPU_REC_OUT, 2500), R_SW(ST_CPU_REC_IN, 2600),
                                 R_S(2700, 2, ST_CPU_NO_STAGE)};
        const st_cpu_rec c3[] = {R_U(6000, 1),
                                 R_SW(ST_CPU_REC_PREEMPTED, 7000),
                                 R_SW(ST_CPU_REC_IN, 7500),
                                 {.kind = ST_CPU_REC_LOST, .ts_ns = 8000, .n = 3},
                                 R_U(11000, 0),
                                 R_S(12000, 0, ST_CPU_NO_STAGE)};
        tg_cpu_chunk(g, w0, c1, 4);
        tg_cpu_chunk(g, w1, c2, 3);
        tg_cpu_chunk(g, w0, c3, 6);
        tg_cpu_map(g, 0x400000, 0x402000, 0, "/bin/prog", "abcd");
        tg_cpu_map(g, 0x7f0000000000ull, 0x7f0000010000ull, 0x1000, "/lib/libx.so", "");
        tg_cpu_symbol(g, 0x401000, 0, "main", 0);
        tg_cpu_symbol(g, 0x401234, 0, "burn", 0x34);
        tg_cpu_symbol(g, 0x400f00, 0, "", 0);
    }
    tg_write(g, path);
    tg_free(g);
    if (with_cpu) { /* burn's return address: line 30 of burn.c, inside mix inlined there */
        sqlite3 *db;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db,
                                      "INSERT INTO cpu_lines VALUES (4198964, 0, 'mix', '/src/burn.c', 12, 5);"
                                      "INSERT INTO cpu_lines VALUES (4198964, 1, 'burn', '/src/burn.c', 30, 9);",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
}

/* The rows of sql as text: columns joined by '|', rows ended by '\n', NULL
 * as "null". Returns the SQLite code of the last step; the error in msg. */
static int query(sqlite3 *db, const char *sql, char *out, size_t size, char *msg, size_t msg_size)
{
    sqlite3_stmt *st;
    size_t len = 0;
    out[0] = 0;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            for (int i = 0; i < sqlite3_column_count(st); i++) {
                const char *v = (const char *)sqlite3_column_text(st, i);
                len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s", i ? "|" : "", v ? v : "null");
            }
            len += (size_t)snprintf(out + len, len < size ? size - len : 0, "\n");
        }
    }
    if (msg) snprintf(msg, msg_size, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    assert_true(len < size);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void assert_query(sqlite3 *db, const char *sql, const char *want)
{
    static char out[16384];
    char msg[512];
    if (query(db, sql, out, sizeof out, msg, sizeof msg) != SQLITE_OK) fail_msg("%s: %s", sql, msg);
    if (strcmp(out, want) != 0) fail_msg("%s:\n got:\n%s\n want:\n%s", sql, out, want);
}

static sqlite3 *open_registered(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(st_sql_register(db), ST_OK);
    return db;
}

static const char *trace_path(void) { return tmp_file("cpu.sqlite"); }

static void test_rows(void **state)
{
    (void)state;
    sqlite3 *db = open_registered(trace_path());
    assert_query(db, "SELECT * FROM cpu_samples",
                 "0|3500|0|0|0|perf\n0|4000|1|2|1|perf\n0|6000|0|1|1|perf\n0|11000|null|0|1|perf\n"
                 "0|12000|null|0|0|perf\n1|2700|null|2|0|perf\n");
    assert_query(db, "SELECT * FROM cpu_switches",
                 "0|2000|out_blocked\n0|3000|in\n0|7000|out_preempted\n0|7500|in\n1|2500|out_blocked\n1|2600|in\n");
    assert_query(db, "SELECT * FROM cpu_lost", "0|8000|3\n");
    /* rowid: chunk id * 2^32 + the record's index among the chunk's records */
    assert_query(db,
                 "SELECT s.rowid - (c.id << 32), s.ts_ns FROM cpu_samples s, cpu_chunks c "
                 "WHERE c.id = s.rowid >> 32 ORDER BY s.rowid",
                 "2|3500\n3|4000\n2|2700\n0|6000\n4|11000\n5|12000\n");
    assert_query(db, "SELECT count(DISTINCT rowid), count(*) FROM cpu_switches", "6|6\n");
    assert_query(db, "SELECT rowid - ((SELECT max(id) FROM cpu_chunks) << 32) FROM cpu_lost", "3\n");
    /* frames: depth 0 the sampled ip; [file] without a symbol, map and path NULL outside every mapping */
    assert_query(db, "SELECT * FROM cpu_frames",
                 "0|0|4198400|main|main|0|0|/bin/prog|null|null\n"
                 "0|1|4198964|burn|burn|52|0|/bin/prog|/src/burn.c|12\n"
                 "0|2|4198144|[prog]||0|0|/bin/prog|null|null\n"
                 "2|0|139637976731648|[libx.so]||0|1|/lib/libx.so|null|null\n");
    assert_query(db, "SELECT rowid FROM cpu_frames WHERE stack = 0 AND depth = 2", "2\n");
    assert_query(db, "SELECT rowid FROM cpu_frames WHERE stack = 2", "131072\n");
    assert_query(db, "SELECT * FROM cpu_stack_text", "0|3|main|[prog];burn;main\n1|0|null|\n2|1|[libx.so]|[libx.so]\n");
    assert_query(db, "SELECT * FROM cpu_stack_text WHERE stack = 2", "2|1|[libx.so]|[libx.so]\n");
    assert_query(db, "SELECT count(*) FROM cpu_stack_text WHERE stack = 7", "0\n");
    assert_query(db, "SELECT count(*) FROM cpu_frames WHERE stack = 1", "0\n");
    assert_query(db, "SELECT * FROM cpu_samples_v",
                 "0|3500|0|0|0|w0|worker|work|work|main|[prog];burn;main|perf\n"
                 "0|4000|1|2|1|w0|worker|wait|wait_input|[libx.so]|[libx.so]|perf\n"
                 "0|6000|0|1|1|w0|worker|work|work|null||perf\n"
                 "0|11000|null|0|1|w0|worker|null|null|main|[prog];burn;main|perf\n"
                 "0|12000|null|0|0|w0|worker|null|null|main|[prog];burn;main|perf\n"
                 "1|2700|null|2|0|w1|worker|null|null|[libx.so]|[libx.so]|perf\n");
    /* the counts of cpu_threads, which tracegen sums from the chunks */
    assert_query(db,
                 "SELECT t.thread, t.samples = (SELECT count(*) FROM cpu_samples s WHERE s.thread = t.thread), "
                 "t.switches = (SELECT count(*) FROM cpu_switches s WHERE s.thread = t.thread), "
                 "t.lost = (SELECT coalesce(sum(n), 0) FROM cpu_lost s WHERE s.thread = t.thread) "
                 "FROM cpu_threads t ORDER BY 1",
                 "0|1|1|1\n1|1|1|1\n");
    sqlite3_close(db);
}

/* Every window [a, b) over the records' times, with and without thread = 0,
 * gives with the constraints pushed down the rows (by rowid) that SQLite's
 * own filter gives (`+ts_ns` is an expression, never pushed). */
static void test_pushdown(void **state)
{
    (void)state;
    sqlite3 *db = open_registered(trace_path());
    static const int64_t times[] = {0, 2000, 2600, 2700, 3500, 4000, 6000, 7000, 8000, 11000, 12000, 13000};
    static const char *const tables[] = {"cpu_samples", "cpu_switches", "cpu_lost"};
    const size_t n_times = sizeof times / sizeof times[0];
    char sql[512], a[4096], b[4096], msg[256];
    int nonempty = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t i = 0; i < n_times; i++)
            for (size_t j = i; j < n_times; j++)
                for (int th = 0; th < 2; th++) {
                    const char *thread = th ? " AND thread = 0" : "", *plain = th ? " AND +thread = 0" : "";
                    snprintf(sql, sizeof sql,
                             "SELECT group_concat(r) FROM (SELECT rowid AS r FROM %s WHERE ts_ns >= %lld AND "
                             "ts_ns < %lld%s ORDER BY 1)",
                             tables[t], (long long)times[i], (long long)times[j], thread);
                    assert_int_equal(query(db, sql, a, sizeof a, msg, sizeof msg), SQLITE_OK);
                    snprintf(sql, sizeof sql,
                             "SELECT group_concat(r) FROM (SELECT rowid AS r FROM %s WHERE +ts_ns >= %lld AND "
                             "+ts_ns < %lld%s ORDER BY 1)",
                             tables[t], (long long)times[i], (long long)times[j], plain);
                    assert_int_equal(query(db, sql, b, sizeof b, msg, sizeof msg), SQLITE_OK);
                    assert_string_equal(a, b);
                    nonempty += strcmp(a, "null\n") != 0;
                }
    assert_true(nonempty > 50);
    /* the window and the thread reach the table (idxStr: 'b' ts_ns, 'a' thread) */
    assert_query(db, "SELECT count(*), min(ts_ns), max(ts_ns) FROM cpu_samples WHERE ts_ns BETWEEN 3500 AND 6000",
                 "3|3500|6000\n");
    char plan[1024];
    assert_int_equal(query(db,
                           "EXPLAIN QUERY PLAN SELECT * FROM cpu_samples WHERE ts_ns >= 3000 AND ts_ns < 5000 "
                           "AND thread = 0",
                           plan, sizeof plan, msg, sizeof msg),
                     SQLITE_OK);
    assert_non_null(strstr(plan, "VIRTUAL TABLE INDEX 0:"));
    assert_non_null(strstr(plan, "bg"));
    assert_non_null(strstr(plan, "b<"));
    assert_non_null(strstr(plan, "a="));
    /* a contradictory window, a thread with no CPU rows */
    assert_query(db, "SELECT count(*) FROM cpu_samples WHERE ts_ns > 5000 AND ts_ns < 4000", "0\n");
    assert_query(db, "SELECT count(*) FROM cpu_switches WHERE thread = 7", "0\n");
    sqlite3_close(db);
}

static void test_no_cpu(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "nocpu.sqlite");
    write_cpu_trace(path, 0);
    sqlite3 *db = open_registered(path);
    assert_query(db,
                 "SELECT (SELECT count(*) FROM cpu_samples), (SELECT count(*) FROM cpu_switches), "
                 "(SELECT count(*) FROM cpu_lost), (SELECT count(*) FROM cpu_frames), "
                 "(SELECT count(*) FROM cpu_stack_text), (SELECT count(*) FROM cpu_samples_v), "
                 "(SELECT count(*) FROM ranges)",
                 "0|0|0|0|0|0|2\n");
    sqlite3_close(db);
}

/* A copy of the trace damaged by sql (on its own writable connection). */
static void damaged(const char *path, const char *sql)
{
    remove_trace_files(path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(trace_path(), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char *vac = sqlite3_mprintf("VACUUM INTO %Q", path);
    assert_int_equal(sqlite3_exec(db, vac, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_free(vac);
    sqlite3_close(db);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static void assert_fails(const char *path, const char *sql, const char *want)
{
    sqlite3 *db = open_registered(path);
    char out[4096], msg[512];
    int rc = query(db, sql, out, sizeof out, msg, sizeof msg);
    if (rc == SQLITE_OK) fail_msg("%s on a damaged trace: no error, rows:\n%s", sql, out);
    if (!strstr(msg, want)) fail_msg("%s: message '%s' does not say '%s'", sql, msg, want);
    sqlite3_close(db);
}

static void test_damaged(void **state)
{
    (void)state;
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bad.sqlite");
    /* a kind above 5, a record count the data does not hold, a sample naming no stack */
    damaged(path, "UPDATE cpu_chunks SET data = x'5009' WHERE id = (SELECT min(id) FROM cpu_chunks)");
    assert_fails(path, "SELECT * FROM cpu_samples", "trace table 'cpu_chunks'");
    assert_fails(path, "SELECT count(*) FROM cpu_switches WHERE thread = 0", "trace table 'cpu_chunks'");
    damaged(path, "UPDATE cpu_chunks SET n_records = n_records + 1 WHERE id = (SELECT max(id) FROM cpu_chunks)");
    assert_fails(path, "SELECT * FROM cpu_lost", "trace table 'cpu_chunks'");
    damaged(path, "DELETE FROM cpu_stacks WHERE id = 2");
    assert_fails(path, "SELECT * FROM cpu_samples_v", "trace table 'cpu_chunks'");
    damaged(path, "UPDATE cpu_stacks SET data = x'ff' WHERE id = 0");
    assert_fails(path, "SELECT * FROM cpu_frames", "trace table 'cpu_stacks'");
    assert_fails(path, "SELECT * FROM cpu_stack_text WHERE stack = 2", "trace table 'cpu_stacks'");
    damaged(path, "UPDATE cpu_symbols SET map = 77 WHERE addr = 4198400");
    assert_fails(path, "SELECT * FROM cpu_stack_text", "trace table 'cpu_symbols'");
    damaged(path, "DROP TABLE cpu_maps");
    assert_fails(path, "SELECT * FROM cpu_samples", "cpu_maps");
    remove_trace_files(path);
}

/* The extension build in the sqlite3 shell prints what the library's tables print. */
static void test_extension_shell(void **state)
{
    (void)state;
    if (system("command -v sqlite3 >/dev/null 2>&1") != 0) {
        print_message("sqlite3 shell not installed: skipped\n");
        skip();
    }
    char ext[512], cmd[2 * PATH_MAX + 64], script[PATH_MAX], out[4096], want[4096];
    snprintf(ext, sizeof ext, "%s/stagetrace_ext.so", build_dir());
    if (access(ext, R_OK) != 0) fail_msg("%s is missing (run make first)", ext);
    static const char sql[] = "SELECT count(*), group_concat(frames, ',') FROM cpu_samples_v WHERE ts_ns < 7000;\n"
                              "SELECT group_concat(kind) FROM cpu_switches WHERE thread = 1;\n"
                              "SELECT n FROM cpu_lost;\n";
    sqlite3 *db = open_registered(trace_path());
    size_t len = 0;
    for (const char *p = sql; *p;) {
        const char *e = strchr(p, '\n');
        char one[512];
        snprintf(one, sizeof one, "%.*s", (int)(e - p), p);
        char part[1024], msg[256];
        assert_int_equal(query(db, one, part, sizeof part, msg, sizeof msg), SQLITE_OK);
        len += (size_t)snprintf(want + len, sizeof want - len, "%s", part);
        p = e + 1;
    }
    sqlite3_close(db);
    assert_string_equal(want, "4|[prog];burn;main,[libx.so],,[libx.so]\nout_blocked,in\n3\n");
    tmp_path(script, sizeof script, "script.sql");
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    snprintf(ext, sizeof ext, "%s/stagetrace_ext", build_dir());
    fprintf(f, ".load %s\n%s", ext, sql);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sqlite3 -batch -bail '%s' < '%s' 2>&1", trace_path(), script);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        /* a sanitizer build's extension needs its runtime loaded first, which the shell has not */
        if (strstr(out, "runtime does not come first") || strstr(out, "libtsan") || strstr(out, "libasan")) {
            print_message("the sanitizer build's extension cannot load into the sqlite3 shell: skipped\n");
            skip();
        }
        fail_msg("sqlite3 shell: %s", out);
    }
    assert_string_equal(out, want);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_vtab_cpu")) return -1;
    write_cpu_trace(tmp_file("cpu.sqlite"), 1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),    cmocka_unit_test(test_pushdown),        cmocka_unit_test(test_no_cpu),
        cmocka_unit_test(test_damaged), cmocka_unit_test(test_extension_shell),
    };
    int failed = cmocka_run_group_tests(tests, setup, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
