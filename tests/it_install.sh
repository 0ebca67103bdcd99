#!/usr/bin/env bash
# make install honours PREFIX and DESTDIR, installs the static and shared
# library, stagetrace.h and a pkg-config file, and a program builds and runs
# against the installed copy alone.
set -euo pipefail
BUILD=${1:-build}
tmp=$(mktemp -d /tmp/stagetrace-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
make -s install BUILD="$BUILD" DESTDIR="$tmp/root" PREFIX=/opt/st >/dev/null
for f in lib/libstagetrace.a lib/libstagetrace.so include/stagetrace.h lib/pkgconfig/stagetrace.pc; do
    [ -f "$tmp/root/opt/st/$f" ] || { echo "missing after install: /opt/st/$f"; exit 1; }
done
grep -q '^prefix=/opt/st$' "$tmp/root/opt/st/lib/pkgconfig/stagetrace.pc" || { echo "pkg-config prefix is not /opt/st"; exit 1; }
case "$BUILD" in *san-*) echo "sanitizer build: installed files checked, program not linked"; exit 0;; esac
cat > "$tmp/prog.c" <<'C'
#include <stagetrace.h>
#include <stdio.h>
int main(int argc, char **argv) {
    st_options o; st_options_init(&o); o.path = argv[1]; o.nvtx = 0;
    st_trace *t; if (st_open(&t, &o)) { fprintf(stderr, "%s\n", st_last_error()); return 1; }
    int s = st_stage_register(t, "work", ST_WORK);
    st_thread_register(t, "main", "main", -1, 0);
    for (int i = 0; i < 1000; i++) { st_begin(s); st_end(s); }
    return st_close(t);
}
C
export PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_LIBDIR="$tmp/root/opt/st/lib/pkgconfig"
lib="$tmp/root/opt/st/lib"
if command -v pkg-config >/dev/null; then
    cflags=$(pkg-config --cflags stagetrace); libs=$(pkg-config --libs --static stagetrace)
else
    cflags="-I$tmp/root/opt/st/include"; libs="-L$lib -lstagetrace -lsqlite3 -lpthread -lm -ldl"
fi
# static: the archive alone; shared: through the .so
cc "$tmp/prog.c" -o "$tmp/prog_static" $cflags "$lib/libstagetrace.a" ${libs//-lstagetrace/}
cc "$tmp/prog.c" -o "$tmp/prog_shared" $cflags $libs
"$tmp/prog_static" "$tmp/a.sqlite"
LD_LIBRARY_PATH="$lib" "$tmp/prog_shared" "$tmp/b.sqlite"
for f in a b; do
    n=$(sqlite3 "$tmp/$f.sqlite" "select sum(n_ranges) from range_chunks")
    [ "$n" = 1000 ] || { echo "expected 1000 ranges in $f.sqlite, found $n"; exit 1; }
done
echo "installed under DESTDIR/opt/st; programs built against the static and the shared library each stored 1000 ranges"
