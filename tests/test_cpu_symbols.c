/* test_cpu_symbols.c: the names of frames in memory without a file, from
 * the process's perf map (tracer/cpu_perfmap.c, used by cpu_symbols.c;
 * docs/trace-format.md, "cpu_symbols").
 *
 *  - the parser: a text with good lines (with and without 0x, tabs, CRLF),
 *    hostile ones (not hex, 17 hex digits, size 0, a range that wraps, no
 *    name, a NUL, a line of 5000 bytes) gives exactly the good entries,
 *    sorted, the bad ones counted (8), control bytes of a name as '?'; a
 *    lookup finds the entry holding an address, not one past its end, and
 *    of two overlapping entries the later line;
 *  - the loader: a missing file is no error and not found; a FIFO, a
 *    symlink, a file older than the process and (as root) a file owned by
 *    nobody are refused with their reason;
 *  - the whole path (x86-64, where perf events are allowed): 14 bytes of
 *    machine code (a counting loop with a frame pointer) copied into an
 *    anonymous executable mapping, run for 200 ms inside stage "jit" of a
 *    trace with the CPU capture on and a 1 ms period, with
 *    /tmp/perf-PID.map naming it "py::jit_spin:/fake/x.py" (after a stale
 *    overlapping line, a long line and three hostile ones): the frame
 *    addresses in the code are stored with that name, the sym_offset
 *    addr - start (the loop's 4..8 among them), the map of the anonymous mapping (path
 *    ''), and meta cpu_perf_map "used", cpu_perf_map_entries 2,
 *    cpu_perf_map_ignored_lines 4, cpu_perf_map_frames >= 1;
 *  - the source lines (cpu_lines.c; docs/trace-format.md, "cpu_lines"):
 *    line_burn, built with -g, spins 300 ms in stage "lines" with a 1 ms
 *    period, its work in line_mix, which is always inlined into it. With
 *    libdw (ST_HAVE_LIBDW, as the library was built), every frame address
 *    that cpu_symbols names line_burn has cpu_lines rows: the outermost
 *    names line_burn in this file, at a line of its body (the lines
 *    between the markers around it, taken with __LINE__); an address in
 *    the inlined code has the chain line_mix (depth 0, a line of its body)
 *    <- line_burn (depth 1, at the line of the call), and at least one
 *    sampled address is such; meta cpu_lines 'libdw', cpu_lines_frames at
 *    least the addresses checked, cpu_lines_cut 0. Without libdw
 *    (NO_LIBDW=1): meta cpu_lines 'none' with its reason, no row, and
 *    line_burn still named by cpu_symbols. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "common.h"
#include "st_cpurec.h"
#include "stagetrace.h"
#include "stagetrace_reader.h"

static char dir[64];

static void test_parse(void **state)
{
    (void)state;
    char longline[5200];
    memset(longline, 'a', sizeof longline);
    memcpy(longline, "5000 10 py::", 12);
    longline[5000] = '\n';
    longline[5001] = '\0';
    char text[8192];
    int n = snprintf(text, sizeof text,
                     "7f3529fcf759 b py::bar:/run/t.py\n"
                     "0x1000\t0x20\tpy::with space:/a b/c.py\r\n"
                     "\n"
                     "zzzz 10 not_hex\n"
                     "12345678901234567 10 seventeen_digits\n"
                     "2000 0 size_zero\n"
                     "ffffffffffffff00 200 wraps\n"
                     "3000 10\n"
                     "3000x 10 bad_separator\n"
                     "%s"
                     "4000 100 ctl\x01" "name\x7f\n"
                     "4080 10 later_overlap\n",
                     longline);
    assert_true(n > 0 && (size_t)n < sizeof text);
    /* a NUL inside a line */
    char with_nul[] = "6000 10 a\0b\n";
    st_perfmap m = {0};
    assert_int_equal(st_perfmap_parse(&m, text, (size_t)n), 0);
    assert_int_equal(st_perfmap_parse(&m, with_nul, sizeof with_nul - 1), 0);
    assert_int_equal(m.n, 4);
    assert_int_equal(m.n_bad, 8); /* 6 hostile, the long line, the NUL */
    assert_int_equal(m.v[0].start, 0x1000);
    assert_int_equal(m.v[0].size, 0x20);
    assert_string_equal(m.v[0].name, "py::with space:/a b/c.py");
    assert_int_equal(m.v[1].start, 0x4000);
    assert_string_equal(m.v[1].name, "ctl?name?");
    assert_int_equal(m.v[2].start, 0x4080);
    assert_int_equal(m.v[3].start, 0x7f3529fcf759ull);
    assert_int_equal(m.v[3].size, 0xb);
    assert_string_equal(m.v[3].name, "py::bar:/run/t.py");
    assert_string_equal(st_perfmap_find(&m, 0x7f3529fcf759ull)->name, "py::bar:/run/t.py");
    assert_string_equal(st_perfmap_find(&m, 0x7f3529fcf763ull)->name, "py::bar:/run/t.py");
    assert_null(st_perfmap_find(&m, 0x7f3529fcf764ull)); /* start + size is outside */
    assert_null(st_perfmap_find(&m, 0x0fff));
    assert_string_equal(st_perfmap_find(&m, 0x101f)->name, "py::with space:/a b/c.py");
    assert_null(st_perfmap_find(&m, 0x1020));
    assert_string_equal(st_perfmap_find(&m, 0x4010)->name, "ctl?name?");
    assert_string_equal(st_perfmap_find(&m, 0x4085)->name, "later_overlap"); /* the later line wins */
    assert_string_equal(st_perfmap_find(&m, 0x40f0)->name, "ctl?name?");
    assert_null(st_perfmap_find(&m, 0x6000));
    st_perfmap_free(&m);
    assert_int_equal(m.n, 0);
}

static void test_load_refusals(void **state)
{
    (void)state;
    char path[128];
    st_perfmap m;
    snprintf(path, sizeof path, "%s/absent.map", dir);
    assert_int_equal(st_perfmap_load(&m, path), 0);
    assert_int_equal(m.found, 0);
    assert_int_equal(m.n, 0);

    snprintf(path, sizeof path, "%s/fifo.map", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(st_perfmap_load(&m, path), 1);
    assert_string_equal(m.refused, "not a regular file");

    char target[128];
    snprintf(target, sizeof target, "%s/good.map", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fputs("1000 10 py::f:/x.py\n2000 10 py::cut", f); /* the last line has no newline yet */
    fclose(f);
    assert_int_equal(st_perfmap_load(&m, target), 0);
    assert_int_equal(m.found, 1);
    assert_int_equal(m.n, 1);
    assert_int_equal(m.n_bad, 1);
    st_perfmap_free(&m);

    snprintf(path, sizeof path, "%s/link.map", dir);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(st_perfmap_load(&m, path), 1);
    assert_non_null(strstr(m.refused, "cannot be opened"));

    struct utimbuf old = {time(NULL) - 86400 * 400, time(NULL) - 86400 * 400};
    assert_int_equal(utime(target, &old), 0);
    assert_int_equal(st_perfmap_load(&m, target), 1);
    assert_non_null(strstr(m.refused, "older than the process"));

    if (geteuid() == 0) {
        assert_int_equal(utime(target, NULL), 0);
        assert_int_equal(chown(target, 65534, 65534), 0);
        assert_int_equal(st_perfmap_load(&m, target), 1);
        assert_string_equal(m.refused, "owned by uid 65534, not by this process's user 0");
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Opens a trace at DIR/NAME with the CPU capture at a 1 ms period, one
 * stage STAGE (its id in *stage) and this thread registered as main/worker. */
static st_trace *open_cpu_trace(char *path, size_t size, const char *name, const char *stage_name, int *stage)
{
    snprintf(path, size, "%s/%s", dir, name);
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cpu_symbols";
    opt.cpu = 1;
    opt.cpu_period_ns = 1000000;
    st_trace *t;
    assert_int_equal(st_open(&t, &opt), ST_OK);
    *stage = st_stage_register(t, stage_name, ST_WORK);
    assert_true(*stage >= 0);
    assert_true(st_thread_register(t, "main", "worker", -1, 0) >= 0);
    return t;
}

#if defined(__x86_64__)
/* uint64_t f(uint64_t n): push rbp; mov rbp, rsp; 1: dec rdi; jnz 1b;
 * mov rax, rdi; pop rbp; ret */
static const unsigned char jit_code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xff, 0xcf, 0x75,
                                         0xfb, 0x48, 0x89, 0xf8, 0x5d, 0xc3};

static const char *meta(sqlite3 *db, const char *key)
{
    static char buf[256];
    sqlite3_stmt *st;
    buf[0] = '\0';
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) != SQLITE_OK) return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    const char *out = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
        out = buf;
    }
    sqlite3_finalize(st);
    return out;
}

#endif

static void test_jit_frames_named(void **state)
{
    (void)state;
#if !defined(__x86_64__)
    printf("skipped: the generated code is x86-64\n");
    skip();
#else
    unsigned char *region = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(region != MAP_FAILED);
    unsigned char *code = region + 0x100;
    memcpy(code, jit_code, sizeof jit_code);
    if (mprotect(region, 4096, PROT_READ | PROT_EXEC) != 0) {
        printf("skipped: no executable anonymous memory here (%s)\n", strerror(errno));
        munmap(region, 4096);
        skip();
    }
    uint64_t (*jit)(uint64_t) = (uint64_t(*)(uint64_t))(void *)code;
    uint64_t start = (uint64_t)(uintptr_t)code;

    char map_path[64];
    snprintf(map_path, sizeof map_path, "/tmp/perf-%ld.map", (long)getpid());
    FILE *f = fopen(map_path, "w");
    assert_non_null(f);
    fprintf(f, "%llx 40 py::stale:/old.py\n", (unsigned long long)start); /* overlapped by the next */
    fprintf(f, "%llx e py::jit_spin:/fake/x.py\n", (unsigned long long)start);
    fprintf(f, "nothex 10 bad\n%llx 0 size_zero\n%llx 10\n", (unsigned long long)start,
            (unsigned long long)start);
    for (int i = 0; i < 6000; i++) fputc('x', f); /* a line of 6000 bytes */
    fputc('\n', f);
    fclose(f);

    char path[128];
    int jit_stage;
    st_trace *t = open_cpu_trace(path, sizeof path, "jit.sqlite", "jit", &jit_stage);
    volatile uint64_t sink = 0;
    st_begin((st_stage)jit_stage);
    int64_t until = mono_ns() + 200000000;
    while (mono_ns() < until) sink = sink + jit(2000000);
    st_end((st_stage)jit_stage);
    assert_int_equal(st_close(t), ST_OK);
    unlink(map_path);
    munmap(region, 4096);

    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(db, "cpu_mode");
    if (!mode || strcmp(mode, "perf") != 0) {
        printf("skipped: perf events refused here: %s\n", meta(db, "cpu_reason"));
        sqlite3_close(db);
        skip();
    }
    assert_string_equal(meta(db, "cpu_perf_map"), "used");
    assert_string_equal(meta(db, "cpu_perf_map_entries"), "2");
    assert_string_equal(meta(db, "cpu_perf_map_ignored_lines"), "4");
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT s.addr, s.name, s.sym_offset, m.path, m.start, m.end, s.file_offset "
                                        "FROM cpu_symbols s JOIN cpu_maps m ON m.id = s.map "
                                        "WHERE s.addr >= ? AND s.addr < ?",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)start);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)(start + sizeof jit_code));
    int rows = 0, in_loop = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        uint64_t addr = (uint64_t)sqlite3_column_int64(st, 0);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), "py::jit_spin:/fake/x.py");
        assert_int_equal(sqlite3_column_int64(st, 2), (int64_t)(addr - start));
        in_loop += addr - start >= 4 && addr - start <= 8; /* the loop */
        assert_string_equal((const char *)sqlite3_column_text(st, 3), "");
        assert_true((uint64_t)sqlite3_column_int64(st, 4) <= addr && addr < (uint64_t)sqlite3_column_int64(st, 5));
        assert_int_equal(sqlite3_column_int64(st, 6), (int64_t)(addr - (uint64_t)sqlite3_column_int64(st, 4)));
        rows++;
    }
    sqlite3_finalize(st);
    printf("%d frame addresses in the generated code, named from the perf map\n", rows);
    assert_true(in_loop >= 1);
    assert_true(atoi(meta(db, "cpu_perf_map_frames")) >= rows);
    sqlite3_close(db);
#endif
}

/* The code the source-lines test samples: line_mix's body is the lines
 * from mix_first to mix_last, line_burn's from burn_first to burn_last,
 * and line_burn calls line_mix on the line call_line records. */
static const int mix_first = __LINE__ + 1;
static inline __attribute__((always_inline)) uint64_t line_mix(uint64_t x)
{
    for (int i = 0; i < 4096; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}
static const int mix_last = __LINE__ - 1;

static volatile int call_line;
static const int burn_first = __LINE__ + 1;
__attribute__((noinline, noclone)) static uint64_t line_burn(int64_t until_ns)
{
    uint64_t x = 88172645463325252ull;
    struct timespec ts;
    do {
        x = line_mix(x); call_line = __LINE__;
        clock_gettime(CLOCK_MONOTONIC, &ts);
    } while ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec < until_ns);
    return x;
}
static const int burn_last = __LINE__ - 1;

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static void test_lines(void **state)
{
    (void)state;
    char path[128];
    int stage;
    st_trace *t = open_cpu_trace(path, sizeof path, "lines.sqlite", "lines", &stage);
    volatile uint64_t sink = 0;
    st_begin((st_stage)stage);
    sink = line_burn(mono_ns() + 300000000);
    st_end((st_stage)stage);
    (void)sink;
    assert_int_equal(st_close(t), ST_OK);

    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(db, "cpu_mode");
    if (!mode || strcmp(mode, "perf") != 0) {
        printf("skipped: perf events refused here: %s\n", meta(db, "cpu_reason"));
        sqlite3_close(db);
        skip();
    }
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM cpu_symbols WHERE name = 'line_burn'", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n_burn = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    assert_true(n_burn >= 1);
#ifndef ST_HAVE_LIBDW
    (void)mix_first, (void)mix_last, (void)burn_first, (void)burn_last, (void)ends_with;
    assert_string_equal(meta(db, "cpu_lines"), "none");
    assert_string_equal(meta(db, "cpu_lines_reason"),
                        "the library was built without libdw (apt-get install libdw-dev, then make)");
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM cpu_lines", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    printf("built without libdw: cpu_lines none, %d addresses of line_burn named\n", n_burn);
#else
    assert_string_equal(meta(db, "cpu_lines"), "libdw");
    assert_null(meta(db, "cpu_lines_reason"));
    assert_string_equal(meta(db, "cpu_lines_cut"), "0");
    /* every address of line_burn, its rows innermost first */
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT s.addr, l.depth, l.function, l.file, l.line, "
                                        "  (SELECT max(depth) FROM cpu_lines WHERE addr = s.addr) "
                                        "FROM cpu_symbols s LEFT JOIN cpu_lines l ON l.addr = s.addr "
                                        "WHERE s.name = 'line_burn' ORDER BY s.addr, l.depth",
                                        -1, &st, NULL),
                     SQLITE_OK);
    int n_addrs = 0, n_inlined = 0;
    int64_t prev = -1, inlined_addr = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t addr = sqlite3_column_int64(st, 0);
        assert_int_equal(sqlite3_column_type(st, 1), SQLITE_INTEGER); /* every address has rows */
        int depth = sqlite3_column_int(st, 1), max_depth = sqlite3_column_int(st, 5);
        const char *fn = (const char *)sqlite3_column_text(st, 2);
        const char *file = (const char *)sqlite3_column_text(st, 3);
        int line = sqlite3_column_int(st, 4);
        if (addr != prev) n_addrs++, n_inlined += max_depth == 1;
        if (max_depth == 1) inlined_addr = addr;
        prev = addr;
        if (!ends_with(file, "tests/test_cpu_symbols.c"))
            fail_msg("0x%llx depth %d: file '%s'", (unsigned long long)addr, depth, file);
        assert_true(max_depth <= 1);
        if (depth == max_depth) {
            assert_string_equal(fn, "line_burn");
            if (line < burn_first || line > burn_last)
                fail_msg("0x%llx: line %d outside line_burn (%d-%d)", (unsigned long long)addr, line, burn_first,
                         burn_last);
            if (max_depth == 1) assert_int_equal(line, call_line);
        } else {
            assert_string_equal(fn, "line_mix");
            if (line < mix_first || line > mix_last)
                fail_msg("0x%llx: line %d outside line_mix (%d-%d)", (unsigned long long)addr, line, mix_first,
                         mix_last);
        }
    }
    sqlite3_finalize(st);
    printf("%d addresses of line_burn with lines, %d of them in the inlined line_mix\n", n_addrs, n_inlined);
    assert_int_equal(n_addrs, n_burn);
    assert_true(n_inlined >= 1);
    assert_true(atoi(meta(db, "cpu_lines_frames")) >= n_addrs);
#endif
    sqlite3_close(db);

    /* the reader: the inlined address's chain, as stored */
    st_reader *r;
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    const st_cpu_line *lines;
    uint32_t n;
#ifdef ST_HAVE_LIBDW
    assert_int_equal(st_reader_cpu_frame_lines(r, 0, (uint64_t)inlined_addr, &lines, &n), 1);
    assert_int_equal(n, 2);
    assert_string_equal(lines[0].function, "line_mix");
    assert_true(lines[0].line >= mix_first && lines[0].line <= mix_last);
    assert_string_equal(lines[1].function, "line_burn");
    assert_int_equal(lines[1].line, call_line);
    assert_true(ends_with(lines[1].file, "tests/test_cpu_symbols.c") && lines[1].file[0] == '/');
    assert_int_equal(st_reader_cpu_frame_lines(r, 0, 1, &lines, &n), 0); /* no such address */
#else
    assert_int_equal(st_reader_cpu_frame_lines(r, 0, 0x1000, &lines, &n), 0);
#endif
    assert_int_equal(n, 0);
    st_reader_close(r);

    /* a trace without the table (recorded before it) has no lines; a gap
     * in an address's depths is refused */
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DELETE FROM cpu_lines; INSERT INTO cpu_lines VALUES (4096, 0, 'f', '/a.c', 3, 1);"
                                      "INSERT INTO cpu_lines VALUES (4096, 2, 'g', '/a.c', 9, 1);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    assert_int_equal(st_reader_cpu_frame_lines(r, 0, 4096, &lines, &n), ST_ECORRUPT);
    assert_string_equal(st_last_error(), "trace table 'cpu_lines': address 0x1000: depth 2 after a gap");
    st_reader_close(r);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE cpu_lines", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    assert_int_equal(st_reader_cpu_frame_lines(r, 0, 4096, &lines, &n), 0);
    st_reader_close(r);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/st_cpu_symbols.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_load_refusals),
        cmocka_unit_test(test_jit_frames_named),
        cmocka_unit_test(test_lines),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
