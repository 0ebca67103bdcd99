# tests/lib.sh: helpers shared by the integration scripts (tests/it_*.sh),
# sourced after the script has made and entered its temp directory (most do
# both through tests/preamble.sh's it_enter_tmp). Each
# check that passes counts in $n_checks; the first that fails ends the script.
n_checks=0
fail() { echo "FAIL: $*"; exit 1; }
ok() { n_checks=$((n_checks + 1)); }

# run NAME CMD...: runs CMD, keeps stdout in $NAME.out and stderr in $NAME.err, status in $rc
run() {
    local name=$1; shift
    set +e
    "$@" >"$name.out" 2>"$name.err"
    rc=$?
    set -e
}

# expect_ok NAME CMD...: exit 0, nothing on stderr
expect_ok() {
    local name=$1
    run "$@"
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(cat "$name.err")"
    [ ! -s "$name.err" ] || fail "$name: unexpected stderr: $(cat "$name.err")"
    ok
}

# expect_usage NAME CMD...: exit 2 and exactly one line on stderr, starting "analyze: "
expect_usage() {
    local name=$1
    run "$@"
    [ $rc -eq 2 ] || fail "$name: exit $rc, wanted 2 (stderr: $(cat "$name.err"))"
    [ "$(wc -l <"$name.err")" -eq 1 ] || fail "$name: wanted one line on stderr, got: $(cat "$name.err")"
    grep -q '^analyze: ' "$name.err" || fail "$name: stderr does not start with 'analyze: ': $(cat "$name.err")"
    ok
}

# golden NAME FILE: FILE must equal $GOLDEN/NAME (or becomes it with ST_UPDATE_GOLDEN=1)
golden() {
    if [ "${ST_UPDATE_GOLDEN:-0}" = 1 ]; then
        mkdir -p "$GOLDEN"
        cp "$2" "$GOLDEN/$1"
    fi
    diff -u "$GOLDEN/$1" "$2" >"$1.diff" || fail "golden $1 differs:$(echo; head -40 "$1.diff")"
    ok
}

# py NAME: runs the Python check read from stdin with the current directory as cwd
py() {
    python3 - || fail "$1"
    ok
}
