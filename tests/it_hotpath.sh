#!/usr/bin/env bash
# it_hotpath.sh: the hot path as programs see it through stagetrace.h.
#  - Built normally (GCC/Clang), a program's st_begin & co. are inline: it
#    references the thread's ring pointer (st__thread_hot, initial-exec TLS)
#    and st__ring_* (the general path), not st_begin; on x86-64 the common
#    begin and end write the ring with no call at all. It records the same
#    trace linked with
#    libstagetrace.a, with libstagetrace.so, and as a plugin dlopen()ed by a
#    program that does not link the library (the .so then comes in through
#    dlopen, and its initial-exec TLS must still load).
#  - Built with -DST_NO_INLINE, it calls the exported st_begin & co., and
#    records the same; so does a program built against the header before the
#    inline ring write (it tests st__thread_ring and calls st__ring_*).
#  - Calls from a thread that never registered record nothing.
#  - Built with -DST_DISABLE, no recording symbol is referenced at all: the
#    recording program, st_open and registration included, links with no
#    library, its ST_SCOPE blocks still run once, and it writes no file;
#    every stub returns the value the header documents. The reader
#    (stagetrace_reader.h) stays real under -DST_DISABLE.
#
#   bash tests/it_hotpath.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
[ -f "$BUILD/libstagetrace.a" ] && [ -f "$BUILD/libstagetrace.so" ] || { echo "SKIP: libraries not built"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: the sqlite3 CLI is needed"; exit 0; }
case "$BUILD" in *san-*) echo "SKIP: sanitizer build (programs here are built without sanitizers)"; exit 0;; esac

it_enter_tmp

CC=${CC:-cc}
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -pthread -I$ROOT/tracer/include"
LIBS=$ST_STATIC_LIBS

# The recording program: 1000 ranges with st_begin/st_end, 10 with ST_SCOPE
# (nested inside: 10 more), 10 with ST_SCOPE_AUTO, 3 counters, 2 marks, steps
# 0 and 1; an unregistered thread makes the same calls and stores nothing.
cat > rec.c <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stagetrace.h>
static int s_work, s_inner;
static st_counter c_depth;
static int scope_runs;
static void calls(void) {
    for (int i = 0; i < 1000; i++) { st_begin(s_work); st_end(s_work); }
    for (int i = 0; i < 10; i++) ST_SCOPE(s_work) { ST_SCOPE(s_inner) { scope_runs++; } }
    for (int i = 0; i < 10; i++) { ST_SCOPE_AUTO(s_inner); scope_runs++; }
    for (int i = 0; i < 3; i++) st_counter_set(c_depth, i);
    st_mark("a mark"); st_mark("another");
}
static void *unregistered(void *arg) { (void)arg; calls(); st_step(7, 7); return NULL; }
int run(const char *path) {
    st_options o; st_options_init(&o); o.path = path; o.overwrite = 1; o.nvtx = 0;
    st_trace *t; if (st_open(&t, &o)) { fprintf(stderr, "%s\n", st_last_error()); return 1; }
    s_work = st_stage_register(t, "work", ST_WORK);
    if (st_thread_register(t, "main", "main", -1, 0) != 0) return 1;
    s_inner = st_stage_register(t, "inner", ST_WORK); /* registered after the thread */
    c_depth = (st_counter)st_counter_register(t, "depth", "items");
    st_step(0, 0);
    pthread_t th; pthread_create(&th, NULL, unregistered, NULL); pthread_join(th, NULL);
    calls();
    st_step(1, 100);
    if (scope_runs != 40) { fprintf(stderr, "scope bodies ran %d times, not 40\n", scope_runs); return 1; }
    return st_close(t);
}
#ifndef REC_PLUGIN
int main(int argc, char **argv) { return argc == 2 ? run(argv[1]) : 2; }
#endif
C
# A program that does not link libstagetrace: it dlopen()s a plugin that does.
cat > host.c <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    int (*run)(const char *) = (int (*)(const char *))dlsym(h, "run");
    return run ? run(argv[2]) : 1;
}
C

# check_trace NAME FILE: what rec.c stores when it records.
check_trace() {
    local q="select (select sum(n_ranges) from range_chunks),
                    (select sum(n_samples) from counter_chunks),
                    (select count(*) from marks),
                    (select count(*) from steps),
                    (select value from meta where key = 'dropped_events'),
                    (select count(*) from threads)"
    local got
    got=$(sqlite3 "$2" "$q")
    [ "$got" = "1030|3|2|2|0|1" ] || fail "$1: ranges|counters|marks|steps|dropped|threads = $got, wanted 1030|3|2|2|0|1"
    ok
}
# refs NAME FILE: the undefined st* symbols FILE references, one line
refs() { nm -u "$2" | awk '{print $NF}' | grep -E '^st_' | sort | tr '\n' ' '; }
# must_ref NAME FILE SYMBOL / must_not_ref NAME FILE SYMBOL
must_ref() { nm "$2" | grep -E "[[:space:]]$3\$" >/dev/null || fail "$1: $2 does not reference $3 ($(refs "$1" "$2"))"; ok; }
must_not_ref() { ! nm -u "$2" | grep -E "[[:space:]]$3\$" >/dev/null || fail "$1: $2 references $3"; ok; }

# Inline hot path, static library.
$CC $CFLAGS rec.c -o rec_static "$BUILD/libstagetrace.a" $LIBS
must_ref static rec_static st__thread_hot
must_ref static rec_static st__ring_begin
must_not_ref static rec_static st__thread_ring
$CC $CFLAGS -c rec.c -o rec.o
must_not_ref static.o rec.o st_begin
must_not_ref static.o rec.o st_end
must_ref static.o rec.o st__ring_end
expect_ok static ./rec_static static.sqlite
check_trace static static.sqlite

# Inline hot path, shared library (TLS variable resolved across objects).
$CC $CFLAGS rec.c -o rec_shared -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
must_not_ref shared rec_shared st_begin
must_ref shared rec_shared st__thread_hot
expect_ok shared ./rec_shared shared.sqlite
check_trace shared shared.sqlite

# Inline hot path at -O0: still inline (no call to st_begin).
$CC ${CFLAGS/-O2/-O0} rec.c -o rec_O0 -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
must_not_ref O0 rec_O0 st_begin
expect_ok O0 ./rec_O0 O0.sqlite
check_trace O0 O0.sqlite

# A plugin that links the shared library, loaded by a program that does not.
$CC $CFLAGS -fPIC -shared -DREC_PLUGIN rec.c -o librec_plugin.so -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
$CC $CFLAGS host.c -o host -ldl
must_not_ref host host st__thread_hot
expect_ok plugin ./host ./librec_plugin.so plugin.sqlite
check_trace plugin plugin.sqlite

# The exported functions, as a binary built against an earlier header calls them.
$CC $CFLAGS -DST_NO_INLINE rec.c -o rec_calls -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
must_ref calls rec_calls st_begin
must_ref calls rec_calls st_end
must_ref calls rec_calls st_counter_set
must_ref calls rec_calls st_mark
must_ref calls rec_calls st_step
must_not_ref calls rec_calls st__thread_hot
expect_ok calls ./rec_calls calls.sqlite
check_trace calls calls.sqlite

# A program built against the header before the inline ring write: its
# inline calls (written out here as that header had them) test
# st__thread_ring and call st__ring_*, which the library still exports.
sed -e 's/#include <stagetrace.h>/#define ST_NO_INLINE 1\n#include <stagetrace.h>\n#include "old_inline.h"/' rec.c > rec_old.c
cat > old_inline.h <<'C'
#define st_begin old_begin
#define st_end old_end
#define st_counter_set old_counter_set
static inline void old_begin(st_stage s) {
    struct st_ring *r = st__thread_ring;
    if (r) st__ring_begin(r, s);
    else if (__atomic_load_n(&st__recording, __ATOMIC_RELAXED)) st__unregistered("st_begin");
}
static inline void old_end(st_stage s) { struct st_ring *r = st__thread_ring; if (r) st__ring_end(r, s); }
static inline void old_counter_set(st_counter c, double v) {
    struct st_ring *r = st__thread_ring;
    if (r) st__ring_counter(r, c, v);
}
C
$CC $CFLAGS -I. rec_old.c -o rec_old -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
must_ref old rec_old st__thread_ring
must_ref old rec_old st__ring_begin
must_not_ref old rec_old st__thread_hot
must_not_ref old rec_old st_begin
expect_ok old ./rec_old old.sqlite
check_trace old old.sqlite
# ... and the library exports all of them, and the inline path's symbols.
for sym in st_begin st_end st_counter_set st_mark st_step st__ring_begin st__ring_end \
           st__ring_counter st__ring_mark st__ring_step st__thread_ring st__thread_hot; do
    nm -D --defined-only "$BUILD/libstagetrace.so" | grep -E "[[:space:]]$sym\$" >/dev/null \
        || fail "libstagetrace.so does not export $sym"
    ok
done

# libstagetrace.so exports what the public headers (stagetrace.h,
# stagetrace_reader.h) mark ST_API, and nothing else (no internal function,
# no mutable global; st_gpu_start, st_gpu_start_with, st_gpu_pause and st_gpu_resume live in
# libstagetrace_gpu.a); the SQLite
# extension exports its entry points only.
api=$(cat "$ROOT"/tracer/include/*.h | grep -E '^ST_API ' | sed -E 's/\(.*//; s/;.*//; s/ __attribute__.*//; s/.*[ *]//' \
      | grep -vE '^st_gpu_(start|start_with|pause|resume)$' | sort -u | tr '\n' ' ')
exported=$(nm -D --defined-only "$BUILD/libstagetrace.so" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort | tr '\n' ' ')
[ "$api" = "$exported" ] || fail "libstagetrace.so exports [$exported], the public headers' ST_API declarations are [$api]"
ok
if [ -f "$BUILD/stagetrace_ext.so" ]; then
    ext=$(nm -D --defined-only "$BUILD/stagetrace_ext.so" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort | tr '\n' ' ')
    [ "$ext" = "sqlite3_extension_init sqlite3_stagetraceext_init " ] || fail "stagetrace_ext.so exports [$ext]"
    ok
fi

# -DST_DISABLE: only the hot path and the scopes, no library at all.
cat > off_only.c <<'C'
#include <stdio.h>
#include <stagetrace.h>
static int calls_made(int *n) { ++*n; return 3; }
int main(void) {
    int runs = 0, evaluated = 0;
    st_begin((st_stage)calls_made(&evaluated)); st_end(1);
    st_counter_set(0, 1.5); st_mark("m"); st_step(0, 0);
    for (int i = 0; i < 5; i++) ST_SCOPE(2) { ST_SCOPE(3) runs++; }
    { ST_SCOPE_AUTO(4); runs++; }
    if (runs != 6 || evaluated != 1) { printf("runs %d evaluated %d\n", runs, evaluated); return 1; }
    return 0;
}
C
$CC $CFLAGS -DST_DISABLE off_only.c -o off_only
[ -z "$(nm -u off_only | awk '{print $NF}' | grep -E '^st_' || true)" ] || fail "ST_DISABLE: off_only references $(refs x off_only)"
ok
expect_ok off_only ./off_only

# -DST_DISABLE in the recording program: every call (st_open, registration,
# st_close, ...) is an inline stub, so it links with no stagetrace library,
# references no st_ symbol, runs its scopes, and writes no file.
$CC $CFLAGS -DST_DISABLE rec.c -o rec_off $LIBS
[ -z "$(nm -u rec_off | awk '{print $NF}' | grep -E '^st_' || true)" ] || fail "ST_DISABLE: rec_off references $(refs x rec_off)"
ok
expect_ok disable ./rec_off off.sqlite
[ ! -e off.sqlite ] || fail "ST_DISABLE: rec_off wrote off.sqlite"
ok

# -DST_DISABLE: each stub's documented value (stagetrace.h), with -Werror.
cat > stubs.c <<'C'
#include <stdio.h>
#include <string.h>
#include <stagetrace.h>
#define CHECK(c) do { if (!(c)) { printf("failed: %s\n", #c); return 1; } } while (0)
int main(void) {
    st_options o; st_options_init(&o);
    CHECK(o.enabled == 1 && o.ring_records == 262144 && o.commit_ms == 250 && o.nvtx == -1 && o.world_size == 1);
    st_trace *t = (st_trace *)&o;
    CHECK(st_open(&t, &o) == ST_OK && t == NULL);
    CHECK(st_stage_register(t, "a", ST_WORK) == 0 && st_counter_register(t, "c", "u") == 0);
    CHECK(st_thread_register(t, "main", "main", -1, 0) == 0);
    st_thread_unregister();
    CHECK(st_install_signal_handlers(t, 1) == ST_OK && st_interrupted() == 0);
    CHECK(st_flush(t) == ST_OK && st_signal_flush(10) == ST_OK && st_gpu_start(t) == ST_OK);
    CHECK(st_enabled(t) == 0 && st_dropped(t) == 0 && st_now_ns() == 0);
    CHECK(strcmp(st_path(t), "") == 0 && strcmp(st_last_error(), "no error") == 0);
    CHECK(strcmp(st_kind_name(ST_COPY), "copy") == 0 && st_kind_parse("wait_output") == ST_WAIT_OUTPUT);
    CHECK(st_kind_parse("nope") == -1 && strcmp(st_kind_name((st_kind)99), "unknown") == 0);
    char buf[8] = "x";
    CHECK(st_window_format(NULL, buf, sizeof buf) == 0 && buf[0] == 0);
    st_name_stream(NULL, "s");
    CHECK(st_close(t) == ST_OK);
    return 0;
}
C
$CC $CFLAGS -DST_DISABLE stubs.c -o stubs
[ -z "$(nm -u stubs | awk '{print $NF}' | grep -E '^st_' || true)" ] || fail "ST_DISABLE: stubs references $(refs x stubs)"
ok
expect_ok stubs ./stubs

# -DST_DISABLE turns recording off, not reading: stagetrace_reader.h's
# functions stay real calls into the library (and it still compiles with
# -Werror, stagetrace.h's ST_API stubs left as they were).
cat > off_reader.c <<'C'
#include <stdio.h>
#include <stagetrace.h>
#include <stagetrace_reader.h>
int main(int argc, char **argv) {
    st_reader *r;
    if (argc != 2 || st_reader_open(&r, argv[1]) != ST_OK) { printf("%s\n", st_last_error()); return 1; }
    unsigned n = st_reader_n_stages(r);
    st_reader_close(r);
    st_begin(0); st_end(0); /* still a stub */
    return n == 2 ? 0 : 1;
}
C
$CC $CFLAGS -DST_DISABLE off_reader.c -o off_reader -L"$BUILD" -lstagetrace -Wl,-rpath,"$BUILD" $LIBS
must_ref off_reader off_reader st_reader_open
must_not_ref off_reader off_reader st__thread_hot
must_not_ref off_reader off_reader st__thread_ring
expect_ok off_reader ./off_reader static.sqlite

echo "hot path: inline with .a, .so, -O0 and a dlopen()ed plugin; exported calls; ST_DISABLE removes every call ($n_checks checks)"
