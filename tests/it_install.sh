#!/usr/bin/env bash
# it_install.sh: make install honours PREFIX and DESTDIR and installs a
# complete copy: libstagetrace.so.0.1.0 with its SONAME (libstagetrace.so.0)
# and links, libstagetrace.a, libstagetrace_gpu.a, the public headers (and
# no private one), stagetrace.pc and stagetrace-gpu.pc, the SQLite
# extension, bin/analyze and bin/trainer with their --help. Then, outside
# the tree and with only the installed files and pkg-config, a program
# records ranges from two threads, steps from its registered main thread,
# prints its profile lines through on_window and st_window_format, and the
# installed analyze reads its trace back: `analyze intervals` prints the
# same lines byte for byte, `analyze summary` the stages and threads. The
# program also reads its trace back through the installed reader API
# (stagetrace_reader.h): ranges per stage as it recorded them, its threads
# and steps, the windows recomputed by st_reader_windows (the same lines
# again), and a refused open of a file that is not a trace. Built against
# the static archive, and, installed again into a private prefix (no DESTDIR),
# with exactly the lines docs/tracer.md gives: `cc prog.c $(pkg-config
# --cflags --libs stagetrace)` and the same with --static, each run with no
# LD_LIBRARY_PATH (the .pc's rpath finds libstagetrace.so.0). A program calling
# st_gpu_start links with `pkg-config --cflags --libs stagetrace-gpu` (and
# --static), records, and says why there is no GPU activity where there is no
# GPU (tests/gpu/it_install_gpu.sh runs a CUDA program so built on a GPU).
#
#   bash tests/it_install.sh BUILD_DIR
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
tmp=$(mktemp -d "${ST_TEST_TMP:-/tmp}/it_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
make -s install BUILD="$BUILD" DESTDIR="$tmp/root" PREFIX=/opt/st >/dev/null
P="$tmp/root/opt/st"
for f in lib/libstagetrace.a lib/libstagetrace_gpu.a lib/libstagetrace.so.0.1.0 include/stagetrace.h include/stagetrace_reader.h \
         lib/pkgconfig/stagetrace.pc lib/pkgconfig/stagetrace-gpu.pc lib/stagetrace_ext.so bin/analyze bin/trainer; do
    [ -f "$P/$f" ] || fail "missing after install: /opt/st/$f"
    ok
done
[ "$(readlink "$P/lib/libstagetrace.so")" = libstagetrace.so.0 ] || fail "lib/libstagetrace.so does not link to libstagetrace.so.0"
[ "$(readlink "$P/lib/libstagetrace.so.0")" = libstagetrace.so.0.1.0 ] || fail "lib/libstagetrace.so.0 does not link to libstagetrace.so.0.1.0"
ok
readelf -d "$P/lib/libstagetrace.so.0.1.0" | grep -q 'SONAME.*\[libstagetrace.so.0\]' || fail "no SONAME libstagetrace.so.0"
ok
# Only the public API is installed.
[ "$(cd "$P/include" && ls)" = "$(cd tracer/include && ls)" ] || fail "include/ holds $(ls "$P/include"), not tracer/include's headers"
ok
grep -q '^prefix=/opt/st$' "$P/lib/pkgconfig/stagetrace.pc" || fail "pkg-config prefix is not /opt/st"
grep -q '^Libs: -L${libdir} -Wl,-rpath,${libdir} -lstagetrace$' "$P/lib/pkgconfig/stagetrace.pc" || fail "stagetrace.pc: $(grep ^Libs: "$P/lib/pkgconfig/stagetrace.pc")"
grep -qE '^Libs: \$\{libdir\}/libstagetrace_gpu.a \$\{libdir\}/libstagetrace.a .*-lsqlite3 -lpthread -lm -ldl( -ldw -lelf)?$' "$P/lib/pkgconfig/stagetrace-gpu.pc" ||
    fail "stagetrace-gpu.pc does not name both archives: $(grep ^Libs: "$P/lib/pkgconfig/stagetrace-gpu.pc")"
grep -q '^Requires' "$P/lib/pkgconfig/stagetrace-gpu.pc" && fail "stagetrace-gpu.pc requires a package (it would add the shared library)"
ok
for prog in analyze trainer; do
    "$P/bin/$prog" --help > "$tmp/$prog.help" || fail "$prog --help exits $?"
    grep -q "^usage: $prog" "$tmp/$prog.help" || fail "$prog --help has no usage line"
    ok
done
case "$BUILD" in *san-*) echo "sanitizer build: installed files checked, program not linked"; exit 0;; esac
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is needed to build against the installed copy"; exit 0; }

mkdir "$tmp/outside"
cat > "$tmp/outside/prog.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stagetrace.h>
#include <stagetrace_reader.h>
static int s_produce, s_consume, s_wait;
static FILE *lines;
static void print_window(const st_window *w, void *arg) {
    (void)arg;
    size_t need = st_window_format(w, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf || st_window_format(w, buf, need + 1) != need) exit(3);
    fputs(buf, lines);
    free(buf);
}
static void print_log(int level, const char *msg, void *arg) { (void)arg; fprintf(stderr, "log %d: %s\n", level, msg); }
static void *worker(void *arg) {
    st_trace *t = arg;
    static _Atomic int n_workers;
    char name[16];
    snprintf(name, sizeof name, "worker%d", n_workers++);
    int id = st_thread_register(t, name, "worker", -1, 0);
    if (id < 0) { fprintf(stderr, "%s\n", st_last_error()); exit(1); }
    for (int i = 0; i < 400; i++) {
        ST_SCOPE(s_produce) { for (volatile int k = 0; k < 2000; k++) {} }
        st_begin(s_consume); for (volatile int k = 0; k < 1000; k++) {} st_end(s_consume);
    }
    st_thread_unregister();
    return NULL;
}
/* Reads path back: ranges per stage, threads, steps, the windows (to out). */
static int read_back(const char *path, const char *not_a_trace, FILE *out) {
    st_reader *r;
    if (st_reader_open(&r, not_a_trace) == ST_OK || !strcmp(st_last_error(), "no error")) {
        fprintf(stderr, "read: %s opened as a trace\n", not_a_trace);
        return 1;
    }
    if (st_reader_open(&r, path) != ST_OK) { fprintf(stderr, "read: %s\n", st_last_error()); return 1; }
    long per_stage[3] = {0, 0, 0}, want[3] = {800, 800, 20};
    const char *names[3] = {"produce", "consume", "step_wait"};
    st_range_iter *it;
    if (st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX) != ST_OK) { fprintf(stderr, "read: %s\n", st_last_error()); return 1; }
    st_range rg;
    int rc;
    while ((rc = st_range_iter_next(it, &rg)) == 1) {
        if (rg.stage >= st_reader_n_stages(r) || rg.dur_ns < 0) { fprintf(stderr, "read: bad range\n"); return 1; }
        const char *name = st_reader_stage(r, rg.stage)->name;
        for (int i = 0; i < 3; i++) if (!strcmp(name, names[i])) per_stage[i]++;
    }
    st_range_iter_close(it);
    if (rc != 0) { fprintf(stderr, "read: %s\n", st_last_error()); return 1; }
    for (int i = 0; i < 3; i++)
        if (per_stage[i] != want[i]) { fprintf(stderr, "read: %ld %s ranges, recorded %ld\n", per_stage[i], names[i], want[i]); return 1; }
    if (st_reader_n_threads(r) != 3 || st_reader_n_steps(r) != 21 || st_reader_step(r, 20)->step != 20) {
        fprintf(stderr, "read: %u threads, %u steps\n", st_reader_n_threads(r), st_reader_n_steps(r));
        return 1;
    }
    lines = out;
    if (st_reader_windows(r, 5, print_window, NULL) != ST_OK) { fprintf(stderr, "read: %s\n", st_last_error()); return 1; }
    st_reader_close(r);
    return 0;
}
int main(int argc, char **argv) {
    if (argc == 4) { /* read TRACE WINDOWS_OUT */
        FILE *out = fopen(argv[3], "w");
        int rc = out ? read_back(argv[2], argv[0], out) : 1;
        if (out) fclose(out);
        return rc;
    }
    if (argc != 3) return 2;
    lines = fopen(argv[2], "w");
    st_options o; st_options_init(&o);
    o.path = argv[1]; o.overwrite = 1; o.nvtx = 0; o.profile_interval = 5;
    o.on_window = print_window; o.log = print_log;
    st_trace *t;
    if (st_open(&t, &o) != ST_OK) { fprintf(stderr, "%s\n", st_last_error()); return 1; }
    s_produce = st_stage_register(t, "produce", ST_WORK);
    s_consume = st_stage_register(t, "consume", ST_WORK);
    s_wait = st_stage_register(t, "step_wait", ST_WAIT_INPUT);
    if (st_thread_register(t, "main", "main", -1, 0) != 0) return 1;
    st_step(0, 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, t);
    for (int step = 1; step <= 20; step++) {
        st_begin(s_wait); for (volatile int k = 0; k < 50000; k++) {} st_end(s_wait);
        st_step(step, 100);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int rc = st_close(t);
    fclose(lines);
    return rc;
}
C
# a private prefix, installed for real (no DESTDIR): the documented lines, nothing added
Q="$tmp/prefix"
make -s install BUILD="$BUILD" PREFIX="$Q" >/dev/null
export PKG_CONFIG_PATH="$Q/lib/pkgconfig"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR LD_LIBRARY_PATH
lib="$Q/lib"
cd "$tmp/outside"
# static: the archive alone, with the libraries it needs (docs/tracer.md's table)
dw=; grep -q '^Libs.private:.* -ldw -lelf' "$lib/pkgconfig/stagetrace.pc" && dw="-ldw -lelf"
cc prog.c -o prog_static -I"$Q/include" "$lib/libstagetrace.a" -lsqlite3 -lpthread -lm -ldl $dw
cc prog.c $(pkg-config --cflags --libs stagetrace) -o prog_shared
cc prog.c $(pkg-config --cflags --libs --static stagetrace) -o prog_shared_static
for p in prog_shared prog_shared_static; do
    readelf -d $p | grep -q 'NEEDED.*\[libstagetrace.so.0\]' || fail "$p does not need libstagetrace.so.0"
    readelf -d $p | grep -Eq "(RUNPATH|RPATH).*\[$lib\]" || fail "$p has no rpath to $lib: $(readelf -d $p | grep -E 'RUNPATH|RPATH')"
    ok
done
readelf -d prog_static | grep -q 'NEEDED.*libstagetrace' && fail "prog_static needs the shared library"
ok
expect_ok static ./prog_static a.sqlite a.lines
expect_ok shared ./prog_shared b.sqlite b.lines
expect_ok shared-static ./prog_shared_static c.sqlite c.lines
for f in a b c; do
    [ "$(grep -c '^profile steps' $f.lines)" = 4 ] || fail "$f: $(grep -c '^profile steps' $f.lines) profile windows printed, wanted 4"
    ok
    n=$(sqlite3 "$f.sqlite" "select sum(n_ranges) from range_chunks")
    [ "$n" = 1620 ] || fail "expected 1620 ranges in $f.sqlite, found $n"
    ok
    case $f in a) p=prog_static;; b) p=prog_shared;; c) p=prog_shared_static;; esac
    expect_ok read-$f ./$p read $f.sqlite $f.read
    cmp -s "$f.lines" "$f.read" || fail "$f: st_reader_windows differs from the on_window lines: $(diff "$f.lines" "$f.read" | head -5)"
    ok
    "$P/bin/analyze" intervals --every 5 "$f.sqlite" > "$f.intervals" || fail "analyze intervals exits $?"
    cmp -s "$f.lines" "$f.intervals" || fail "$f: analyze intervals differs from the on_window lines: $(diff "$f.lines" "$f.intervals" | head -5)"
    ok
    "$P/bin/analyze" summary "$f.sqlite" > "$f.summary" || fail "analyze summary exits $?"
    for word in produce consume step_wait worker0 worker1 main; do
        grep -q "$word" "$f.summary" || fail "$f: analyze summary does not name $word"
    done
    ok
done

# GPU: a program calling st_gpu_start, built with each documented stagetrace-gpu line
cat > gpu.c <<'C'
#include <stdio.h>
#include <string.h>
#include <stagetrace.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    st_options o; st_options_init(&o);
    o.path = argv[1]; o.overwrite = 1; o.nvtx = 0;
    st_trace *t;
    if (st_open(&t, &o) != ST_OK) { fprintf(stderr, "%s\n", st_last_error()); return 1; }
    int s = st_stage_register(t, "work", ST_WORK);
    if (st_thread_register(t, "main", "main", 0, 0) != 0) return 1;
    int rc = st_gpu_start(t);
    printf("st_gpu_start: %s\n", rc == ST_OK ? "ok" : st_last_error());
    for (int i = 0; i < 10; i++) { st_begin(s); st_end(s); }
    return st_close(t) == ST_OK ? 0 : 1;
}
C
no_gpu=1
if [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; then no_gpu=0; fi
for form in "" --static; do
    name=gpu${form:+_static}
    cc gpu.c $(pkg-config --cflags --libs $form stagetrace-gpu) -o $name ||
        fail "cc gpu.c \$(pkg-config --cflags --libs $form stagetrace-gpu) does not link"
    readelf -d $name | grep -q 'NEEDED.*libstagetrace' && fail "$name needs the shared library"
    ok
    expect_ok $name ./$name $name.sqlite
    line=$(cat $name.out)
    case "$line" in
        "st_gpu_start: ok") [ $no_gpu = 0 ] || fail "$name: st_gpu_start succeeded on a machine without a GPU";;
        "st_gpu_start: GPU tracing needs a CUDA build with CUPTI"*) ;;
        "st_gpu_start: GPU tracing needs a usable CUDA device and driver: "*) [ $no_gpu = 1 ] || fail "$name: $line";;
        *) fail "$name: $line";;
    esac
    ok
    [ "$(sqlite3 $name.sqlite "select sum(n_ranges) from range_chunks")" = 10 ] || fail "$name: the trace does not hold its 10 ranges"
    ok
done
echo "installed under DESTDIR/opt/st and into a private prefix; programs built with the documented pkg-config lines (stagetrace, --static, stagetrace-gpu, --static) run with no LD_LIBRARY_PATH and printed the profile lines that the installed analyze prints from its trace; $line ($n_checks checks)"
