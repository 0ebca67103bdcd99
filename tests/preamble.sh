# tests/preamble.sh: the start that the integration scripts (tests/it_*.sh)
# share. Sourced first, after `set -euo pipefail`, with the script's own
# arguments ($1: the build directory, default build):
#     . "$(dirname "$0")/preamble.sh"
# It sets ROOT (the repository), BUILD (made absolute against ROOT) and
# ST_STATIC_LIBS (what a static link of $BUILD/libstagetrace.a needs: the
# Libs.private of the build's stagetrace.pc, libdw's included when the build
# has it; with the sanitizer's -fsanitize= in a sanitizer build). The
# script then names its programs and prints its own SKIP lines, and calls
# it_enter_tmp: a fresh directory $T under $ST_TEST_TMP (default /tmp), named
# after the script and removed at exit, becomes the current directory, and
# tests/lib.sh's helpers are sourced.
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ST_STATIC_LIBS=$(sed -n 's/^Libs.private: //p' "$BUILD/stagetrace.pc" 2>/dev/null || true)
[ -n "$ST_STATIC_LIBS" ] || ST_STATIC_LIBS="-lsqlite3 -lpthread -lm -ldl"
# a sanitizer build's archive (make SAN=a,b builds into build/san-a-b) links with its runtime
case "$BUILD" in */san-*) san=${BUILD##*/san-}; ST_STATIC_LIBS="-fsanitize=${san//-/,} $ST_STATIC_LIBS" ;; esac

it_enter_tmp() {
    T=$(mktemp -d "${ST_TEST_TMP:-/tmp}/$(basename "$0" .sh).XXXXXX")
    trap 'rm -rf "$T"' EXIT
    cd "$T"
    # shellcheck source=tests/lib.sh
    . "$ROOT/tests/lib.sh"
}
