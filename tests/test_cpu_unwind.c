/* test_cpu_unwind.c: DWARF unwinding of the CPU samples' user stacks
 * (st_options.cpu_user_stack; tracer/cpu_unwind.c, the sample parser of
 * tracer/cpu_perf.c; docs/cpu.md, "DWARF unwinding").
 *
 * The recorder (this program run as `test_cpu_unwind --record PATH BYTES`,
 * a process of its own per trace) opens a trace with opt.cpu = 1, a 1 ms
 * sample period and cpu_user_stack BYTES, and spends 400 ms of stage
 * `spin` in nofp_a -> nofp_b -> nofp_c -> nofp_spin (tests/cpu_nofp.c,
 * built with -fomit-frame-pointer: none of the four keeps a frame record).
 * A sample "in the spin" is one attributed to stage spin whose first frame
 * cpu_symbols names nofp_spin; it has "the whole chain" when nofp_c,
 * nofp_b and nofp_a follow in that order. The expected numbers: with the
 * copies (16 KiB: the test's stack above nofp_spin is a few KiB), CFI
 * finds every caller, so at least 90 % of them have the chain (measured
 * here: 100 %, 8 frames each); without, the kernel's walk starts from
 * whatever the functions without frame pointers left in rbp (nofp_c keeps
 * its deadline there), so none of the three can be in it but by a
 * stray value: at most 10 % (measured: 0 %, and 1 frame each: the walk
 * ends at once or its next frame is cut as outside the mappings), and the
 * difference is at least 80 points. The same chain from a copy of it as a
 * library (libcpu_nofp.so), loaded after the first 150 ms: at least 90 %
 * of its samples have the whole chain too (the modules reported anew;
 * measured: 100 %). With switch records only (no samples), meta says
 * cpu_unwind fp and why. Where perf events are refused, or the build has
 * no libdw (the trace must then say so in meta cpu_unwind_reason), the
 * measured cases print why and skip. The hostile-input case feeds the
 * parser records cut inside each field, sizes larger than the record and
 * a dyn_size larger than the copy, each in a buffer of exactly its size;
 * the bounds case, st_open's refusal of sizes out of range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <libgen.h>
#include <linux/perf_event.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "cpu_nofp.h"
#include "encoding.h"
#include "st_cpu.h"
#include "stagetrace.h"

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum { SPIN };
#define USER_STACK 16384u

static char self[4096];

/* period_ns UINT64_MAX: switch records only, no samples to carry copies.
 * load: after 150 ms in the chain linked into this program, the same
 * chain from libcpu_nofp.so (beside this program), loaded then, for the
 * rest of the 400 ms. */
static int recorder(const char *path, unsigned user_stack, uint64_t period_ns, int load)
{
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.program = "test_cpu_unwind";
    opt.cpu = 1;
    opt.cpu_period_ns = period_ns;
    opt.cpu_user_stack = user_stack;
    st_trace *t;
    if (st_open(&t, &opt) != ST_OK) {
        fprintf(stderr, "st_open: %s\n", st_last_error());
        return 10;
    }
    if (st_stage_register(t, "spin", ST_WORK) != SPIN) return 11;
    if (st_thread_register(t, "main", "worker", -1, 0) < 0) return 12;
    volatile uint64_t sink = 0;
    int64_t until = mono_ns() + 400000000;
    st_begin(SPIN);
    if (load) {
        sink = sink + nofp_a(mono_ns() + 150000000, 1);
        char lib[4200];
        snprintf(lib, sizeof lib, "%s/libcpu_nofp.so", dirname(self));
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 14;
        }
        uint64_t (*lib_a)(int64_t, uint64_t) = (uint64_t (*)(int64_t, uint64_t))dlsym(h, "nofp_a");
        if (!lib_a || (void *)lib_a == (void *)nofp_a) return 15;
        sink = sink + lib_a(until, 1);
    } else {
        sink = sink + nofp_a(until, 1);
    }
    st_end(SPIN);
    __asm__ volatile("" ::: "memory"); /* recorder keeps its frame after the call */
    if (st_close(t) != ST_OK) {
        fprintf(stderr, "st_close: %s\n", st_last_error());
        return 13;
    }
    return 0;
}

static void record(const char *name, unsigned user_stack, const char *how, char *path, size_t size)
{
    tmp_path(path, size, name);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char bytes[16];
        snprintf(bytes, sizeof bytes, "%u", user_stack);
        execl(self, self, how, path, bytes, (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static const char *meta(sqlite3 *db, const char *key)
{
    static char buf[4][1024];
    static int k;
    char *out = buf[k++ % 4];
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int found = sqlite3_step(st) == SQLITE_ROW;
    if (found) snprintf(out, 1024, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return found ? out : NULL;
}

static long long one_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

typedef struct spin_counts {
    long samples;     /* attributed to spin */
    long in_spin;     /* of them, nofp_spin first */
    long whole_chain; /* of those, nofp_c, nofp_b, nofp_a after it in order */
    long frames;      /* the frames of the in_spin samples, summed */
} spin_counts;

/* The name cpu_symbols gives addr, "" when none. */
static void frame_name(sqlite3_stmt *sym, uint64_t addr, char *out, size_t size)
{
    sqlite3_bind_int64(sym, 1, (int64_t)addr);
    out[0] = 0;
    if (sqlite3_step(sym) == SQLITE_ROW && sqlite3_column_text(sym, 0))
        snprintf(out, size, "%s", (const char *)sqlite3_column_text(sym, 0));
    sqlite3_reset(sym);
}

/* lib: only the samples whose first frame lies in the mapping of a file
 * whose path ends so (NULL: any). */
static void count_spin(sqlite3 *db, const char *lib, spin_counts *c)
{
    memset(c, 0, sizeof *c);
    sqlite3_stmt *in_lib;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM cpu_maps WHERE ?1 >= start AND ?1 < end AND "
                                        "path LIKE '%' || ?2", -1, &in_lib, NULL), SQLITE_OK);
    sqlite3_stmt *chunks, *stack, *sym;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n_records, data FROM cpu_chunks ORDER BY id", -1, &chunks, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n_frames, data FROM cpu_stacks WHERE id = ?", -1, &stack, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT name FROM cpu_symbols WHERE addr = ?", -1, &sym, NULL),
                     SQLITE_OK);
    while (sqlite3_step(chunks) == SQLITE_ROW) {
        st_cpu_cursor cur;
        assert_int_equal(st_cpu_cursor_open(&cur, sqlite3_column_blob(chunks, 1), (size_t)sqlite3_column_bytes(chunks, 1),
                                            (uint32_t)sqlite3_column_int64(chunks, 0)), 0);
        st_cpu_rec rec;
        int rc;
        while ((rc = st_cpu_next(&cur, &rec)) == 1) {
            if (rec.kind != ST_CPU_REC_SAMPLE || rec.stage != SPIN) continue;
            c->samples++;
            sqlite3_bind_int64(stack, 1, rec.stack);
            assert_int_equal(sqlite3_step(stack), SQLITE_ROW);
            uint32_t n = (uint32_t)sqlite3_column_int64(stack, 0);
            static uint64_t f[ST_CPU_UNWIND_MAX_FRAMES + 1024];
            assert_true(n <= sizeof f / sizeof f[0]);
            assert_int_equal(st_cpu_stack_get(sqlite3_column_blob(stack, 1), (size_t)sqlite3_column_bytes(stack, 1), n, f), 0);
            sqlite3_reset(stack);
            char name[256];
            if (n == 0) continue;
            frame_name(sym, f[0], name, sizeof name);
            if (strcmp(name, "nofp_spin") != 0) continue;
            if (lib) {
                sqlite3_bind_int64(in_lib, 1, (int64_t)f[0]);
                sqlite3_bind_text(in_lib, 2, lib, -1, SQLITE_STATIC);
                assert_int_equal(sqlite3_step(in_lib), SQLITE_ROW);
                int inside = sqlite3_column_int(in_lib, 0) > 0;
                sqlite3_reset(in_lib);
                if (!inside) continue;
            }
            c->in_spin++;
            c->frames += n;
            static const char *const chain[] = {"nofp_c", "nofp_b", "nofp_a"};
            int next = 0;
            for (uint32_t i = 1; i < n && next < 3; i++) {
                frame_name(sym, f[i], name, sizeof name);
                if (strcmp(name, chain[next]) == 0) next++;
            }
            c->whole_chain += next == 3;
        }
        assert_int_equal(rc, 0);
    }
    sqlite3_finalize(chunks);
    sqlite3_finalize(stack);
    sqlite3_finalize(sym);
    sqlite3_finalize(in_lib);
}

static void test_unwind_finds_nofp_chain(void **state)
{
    (void)state;
    char on_path[512], off_path[512];
    record("dwarf.sqlite", USER_STACK, "--record", on_path, sizeof on_path);
    sqlite3 *on;
    assert_int_equal(sqlite3_open_v2(on_path, &on, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(on, "cpu_mode");
    if (!mode || strcmp(mode, "perf") != 0) {
        printf("skipped: perf events refused here: %s\n", meta(on, "cpu_reason"));
        sqlite3_close(on);
        skip();
    }
    assert_string_equal(meta(on, "cpu_user_stack"), "16384");
#ifndef ST_HAVE_LIBDW
    /* the option refused, the run recorded: frame-pointer stacks, and why */
    assert_string_equal(meta(on, "cpu_unwind"), "fp");
    assert_non_null(strstr(meta(on, "cpu_unwind_reason"), "libdw"));
    assert_string_equal(meta(on, "status"), "complete");
    printf("skipped: this build has no libdw: %s\n", meta(on, "cpu_unwind_reason"));
    sqlite3_close(on);
    skip();
#endif
    assert_string_equal(meta(on, "status"), "complete");
    assert_string_equal(meta(on, "cpu_unwind"), "dwarf");
    assert_null(meta(on, "cpu_unwind_reason"));
    long long dwarf = atoll(meta(on, "cpu_unwind_dwarf_samples")), fp = atoll(meta(on, "cpu_unwind_fp_samples"));
    long long samples = atoll(meta(on, "cpu_samples"));
    assert_true(dwarf + fp <= samples);
    assert_int_equal(one_int(on, "SELECT ring_bytes FROM cpu_threads"), (long long)st_cpu_user_stack_ring(USER_STACK));
    spin_counts c_on;
    count_spin(on, NULL, &c_on);
    printf("with %u-byte copies: %lld samples (%lld unwound by DWARF, %lld kept their chain, %s ns unwinding, %s lost "
           "records); in spin %ld, %ld with nofp_spin first, %ld of them with nofp_c, nofp_b, nofp_a (%.1f frames "
           "each)\n",
           USER_STACK, samples, dwarf, fp, meta(on, "cpu_unwind_ns"), meta(on, "cpu_lost_records"), c_on.samples,
           c_on.in_spin, c_on.whole_chain, c_on.in_spin ? (double)c_on.frames / c_on.in_spin : 0.0);
    assert_true(dwarf >= c_on.whole_chain);
    sqlite3_close(on);

    record("fp.sqlite", 0, "--record", off_path, sizeof off_path);
    sqlite3 *off;
    assert_int_equal(sqlite3_open_v2(off_path, &off, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_null(meta(off, "cpu_unwind")); /* off: the trace as before the option */
    assert_null(meta(off, "cpu_user_stack"));
    spin_counts c_off;
    count_spin(off, NULL, &c_off);
    printf("without: in spin %ld, %ld with nofp_spin first, %ld of them with the chain (%.1f frames each)\n",
           c_off.samples, c_off.in_spin, c_off.whole_chain,
           c_off.in_spin ? (double)c_off.frames / c_off.in_spin : 0.0);
    sqlite3_close(off);

    /* 400 ms at 1 kHz: a loaded VM leaves fewer, never this few */
    assert_true(c_on.in_spin >= 50);
    assert_true(c_off.in_spin >= 50);
    double on_share = (double)c_on.whole_chain / c_on.in_spin, off_share = (double)c_off.whole_chain / c_off.in_spin;
    assert_true(on_share >= 0.90);
    assert_true(off_share <= 0.10);
    assert_true(on_share - off_share >= 0.80);
    /* the unwound stacks are longer: the three frames at least */
    assert_true((double)c_on.frames / c_on.in_spin >= (double)c_off.frames / c_off.in_spin + 2.5);
}

/* A library loaded after the first stacks were unwound: the writer reads
 * the maps again at its first frame there, finds them changed, and the
 * unwinder reports the modules anew, so that its chain is found too. */
static void test_unwind_after_dlopen(void **state)
{
    (void)state;
    char path[512];
    record("dlopen.sqlite", USER_STACK, "--record-load", path, sizeof path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *mode = meta(db, "cpu_mode");
    const char *unwind = meta(db, "cpu_unwind");
    if (!mode || strcmp(mode, "perf") != 0 || !unwind || strcmp(unwind, "dwarf") != 0) {
        printf("skipped: cpu_mode %s, cpu_unwind %s (%s)\n", mode ? mode : "-", unwind ? unwind : "-",
               meta(db, "cpu_unwind_reason") ? meta(db, "cpu_unwind_reason") : meta(db, "cpu_reason"));
        sqlite3_close(db);
        skip();
    }
    spin_counts all, lib;
    count_spin(db, NULL, &all);
    count_spin(db, "/libcpu_nofp.so", &lib);
    printf("loaded after 150 ms: in spin %ld, %ld with nofp_spin first, %ld of them in libcpu_nofp.so, %ld of "
           "those with the whole chain\n", all.samples, all.in_spin, lib.in_spin, lib.whole_chain);
    assert_true(lib.in_spin >= 50);
    assert_true(all.in_spin - lib.in_spin >= 20); /* the program's own chain came first */
    assert_true(lib.whole_chain >= 0.90 * lib.in_spin);
    sqlite3_close(db);
}

/* Switch records only: no sample carries a copy, and the trace says so
 * rather than claim DWARF stacks. */
static void test_unwind_without_samples(void **state)
{
    (void)state;
    char path[512];
    record("switches.sqlite", USER_STACK, "--record-switches", path, sizeof path);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_string_equal(meta(db, "status"), "complete");
    assert_string_equal(meta(db, "cpu_user_stack"), "16384");
    assert_string_equal(meta(db, "cpu_unwind"), "fp");
    const char *why = meta(db, "cpu_unwind_reason");
    printf("switch records only: cpu_unwind fp, \"%s\"\n", why);
#ifdef ST_HAVE_LIBDW
    assert_non_null(strstr(why, "no thread's samples come from its perf event"));
#else
    assert_non_null(strstr(why, "libdw"));
#endif
    assert_null(meta(db, "cpu_unwind_dwarf_samples"));
    const char *samples = meta(db, "cpu_samples"); /* absent where perf events are refused */
    assert_true(!samples || strcmp(samples, "0") == 0);
    sqlite3_close(db);
}

/* ---- the parser on hostile records ---- */

/* A sample as the CPU-clock event with user stacks lays it out: header,
 * ip, pid/tid, time, nr and the chain, abi, bp sp ip, size, data, dyn_size. */
static size_t build_sample(uint64_t *w, uint64_t abi, uint64_t copy, uint64_t dyn)
{
    size_t n = 1;
    w[n++] = 0x401000;                          /* ip */
    w[n++] = (uint64_t)7 | ((uint64_t)9 << 32); /* pid 7, tid 9 */
    w[n++] = 123456789;                         /* time */
    w[n++] = 2;                                 /* nr */
    w[n++] = (uint64_t)PERF_CONTEXT_USER;
    w[n++] = 0x401000;
    w[n++] = abi;
    if (abi) {
        w[n++] = 0x7ffd0100; /* bp */
        w[n++] = 0x7ffd0000; /* sp */
        w[n++] = 0x401000;   /* ip */
    }
    w[n++] = copy;
    for (uint64_t i = 0; i < copy / 8; i++) w[n++] = 0x1111111111111111ull * (i % 15 + 1);
    if (copy) w[n++] = dyn;
    struct perf_event_header h = {PERF_RECORD_SAMPLE, 0, (uint16_t)(n * 8)};
    memcpy(&w[0], &h, sizeof h);
    return n * 8;
}

/* Parses the first size bytes of w from a buffer of exactly that size. */
static int parse_cut(const st_cpu_thread *t, const uint64_t *w, size_t size, st_cpu_sample *s, st_cpu_ustack *us)
{
    static uint64_t frames[64];
    unsigned char *rec = malloc(size ? size : 1);
    assert_non_null(rec);
    memcpy(rec, w, size);
    int rc = st_cpu_sample_parse(t, rec, size, s, frames, 64, us);
    if (rc == 0 && s->ustack) { /* the copy lies inside the record */
        assert_true(s->ustack->data >= rec && s->ustack->data + s->ustack->dyn_size <= rec + size);
        s->ustack = NULL;
    }
    free(rec);
    return rc;
}

static void test_parse_hostile(void **state)
{
    (void)state;
    st_cpu_thread t;
    memset(&t, 0, sizeof t);
    t.callchain = 1;
    t.user_stack = 64;
    uint64_t w[64];
    st_cpu_sample s;
    st_cpu_ustack us;
    static uint64_t frames[64];

    /* a whole record: the registers, the copy and its valid part */
    size_t size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 48);
    assert_int_equal(st_cpu_sample_parse(&t, (const unsigned char *)w, size, &s, frames, 64, &us), 0);
    assert_int_equal(s.tid, 9);
    assert_int_equal(s.n_frames, 1); /* the chain's repeat of the ip is dropped */
    assert_ptr_equal(s.ustack, &us);
    assert_int_equal(us.ip, 0x401000);
    assert_int_equal(us.sp, 0x7ffd0000);
    assert_int_equal(us.bp, 0x7ffd0100);
    assert_int_equal(us.dyn_size, 48);
    assert_ptr_equal(us.data, (const unsigned char *)w + 8 * 12);
    assert_int_equal(us.data[0], 0x11);

    /* every cut inside the record is refused, wherever it falls */
    for (size_t cut = 0; cut < size; cut += 8) assert_int_equal(parse_cut(&t, w, cut, &s, &us), -1);
    assert_int_equal(parse_cut(&t, w, size, &s, &us), 0);

    /* truncated registers: a record that ends after two of the three */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 0, 0);
    assert_int_equal(parse_cut(&t, w, 8 * 10, &s, &us), -1);

    /* the copy's size larger than the record */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 48);
    w[11] = 4096;
    assert_int_equal(parse_cut(&t, w, size, &s, &us), -1);
    w[11] = UINT64_MAX - 7; /* and one that would wrap a pointer */
    assert_int_equal(parse_cut(&t, w, size, &s, &us), -1);

    /* dyn_size larger than the copy */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 72);
    assert_int_equal(parse_cut(&t, w, size, &s, &us), -1);

    /* a callchain longer than the record */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 48);
    w[4] = 1000;
    assert_int_equal(parse_cut(&t, w, size, &s, &us), -1);

    /* no user context (abi NONE, no registers) and an empty copy: a
     * sample without a copy, not a corrupt one */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_NONE, 0, 0);
    assert_int_equal(st_cpu_sample_parse(&t, (const unsigned char *)w, size, &s, frames, 64, &us), 0);
    assert_null(s.ustack);
    assert_int_equal(s.n_frames, 1);

    /* a copy whose valid part is empty: no stack to unwind */
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 0);
    assert_int_equal(st_cpu_sample_parse(&t, (const unsigned char *)w, size, &s, frames, 64, &us), 0);
    assert_null(s.ustack);

    /* without user stacks asked, the same bytes after the chain are not read */
    t.user_stack = 0;
    size = build_sample(w, PERF_SAMPLE_REGS_ABI_64, 64, 48);
    assert_int_equal(parse_cut(&t, w, 8 * 7, &s, &us), 0);
}

/* The option's bounds: st_open refuses sizes outside 8192..65536 with one line. */
static void test_option_bounds(void **state)
{
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "bounds.sqlite");
    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.cpu = 1;
    opt.cpu_user_stack = 4096;
    st_trace *t = NULL;
    assert_int_equal(st_open(&t, &opt), ST_EINVAL);
    printf("4096: %s\n", st_last_error());
    assert_non_null(strstr(st_last_error(), "cpu_user_stack 4096 bytes is out of range"));
    assert_null(strchr(st_last_error(), '\n'));
    opt.cpu_user_stack = 65537;
    assert_int_equal(st_open(&t, &opt), ST_EINVAL);
    /* a config the library would give the kernel: a multiple of 8 in range */
    st_cpu_thread ct;
    st_cpu_config cfg = {.user_stack = 8193};
    assert_int_equal(st_cpu_thread_open(&ct, 0, &cfg), ST_CPU_EINVAL);
    assert_non_null(strstr(ct.reason, "multiple of 8"));
    assert_true(st_cpu_user_stack_ring(16384) >= ST_CPU_USER_STACK_RECORDS * (16384 + ST_CPU_USER_STACK_OVERHEAD));
    assert_int_equal(st_cpu_user_stack_ring(8192) & (st_cpu_user_stack_ring(8192) - 1), 0);
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    if (argc == 4 && strcmp(argv[1], "--record") == 0) return recorder(argv[2], (unsigned)atoi(argv[3]), 1000000, 0);
    if (argc == 4 && strcmp(argv[1], "--record-switches") == 0)
        return recorder(argv[2], (unsigned)atoi(argv[3]), UINT64_MAX, 0);
    if (argc == 4 && strcmp(argv[1], "--record-load") == 0) return recorder(argv[2], (unsigned)atoi(argv[3]), 1000000, 1);
    if (make_tmp_dir("test_cpu_unwind") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_hostile),
        cmocka_unit_test(test_option_bounds),
        cmocka_unit_test(test_unwind_finds_nofp_chain),
        cmocka_unit_test(test_unwind_after_dlopen),
        cmocka_unit_test(test_unwind_without_samples),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(rc);
    return rc;
}
