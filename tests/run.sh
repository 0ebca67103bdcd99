#!/usr/bin/env bash
# Runs every test the machine can run: the cmocka unit tests in
# $BUILD/tests/test_* and the integration scripts tests/it_*.sh. Prints each
# binary's own summary and one closing line "N passed, N failed[, N skipped]".
set -u
BUILD=${1:-build}
export ST_BUILD=$BUILD
export ST_TEST_TMP=${ST_TEST_TMP:-$(mktemp -d /tmp/stagetrace-tests.XXXXXX)}
passed=0 failed=0 skipped=0 failed_names=()
run_one() {
    local name=$1; shift
    local log="$ST_TEST_TMP/$name.log"
    local start=$EPOCHREALTIME
    "$@" >"$log" 2>&1
    local rc=$?
    local secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
    if [ $rc -eq 0 ]; then
        if grep -q '^SKIP:' "$log"; then
            skipped=$((skipped + 1)); printf '  skip %-28s %5ss  %s\n' "$name" "$secs" "$(grep -m1 '^SKIP:' "$log")"
        else
            passed=$((passed + 1)); printf '  ok   %-28s %5ss  %s\n' "$name" "$secs" "$(grep -E '^\[  PASSED  \]' "$log" | tail -1)"
        fi
    else
        failed=$((failed + 1)); failed_names+=("$name")
        printf '  FAIL %-28s %5ss  (exit %d)\n' "$name" "$secs" "$rc"
        sed 's/^/       | /' "$log" | tail -40
    fi
}
echo "running tests from $BUILD (logs in $ST_TEST_TMP)"
if [ ! -d "$BUILD/tests" ] || ! ls "$BUILD"/tests/test_* >/dev/null 2>&1; then
    echo "no test binaries in $BUILD/tests (is libcmocka-dev installed?)"; exit 1
fi
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/it_*.sh; do
    [ -e "$s" ] || continue
    run_one "$(basename "$s" .sh)" bash "$s" "$BUILD"
done
echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
