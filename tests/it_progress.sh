#!/usr/bin/env bash
# it_progress.sh: `analyze intervals` shows progress as the other long
# commands do (docs/analyze.md, "Progress"): a percentage on stderr only when
# stderr is a terminal and only after half a second, erased at the end; with
# stderr a file or a pipe, nothing. On a big trace (tracegen --big, 24 M
# ranges, 60 step marks, --every 1), run once with stderr in a file and once
# under a pseudo-terminal (util-linux `script`); the windows on stdout are the
# same. Progress is required on the terminal when that run took over 1.5 s.
#
#   bash tests/it_progress.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
it_enter_tmp
"$GEN" --big big.sqlite 24000000 >/dev/null

# stderr not a terminal: no progress at all
"$A" intervals big.sqlite --every 1 >file.out 2>file.err || fail "intervals: exit $?: $(cat file.err)"
[ ! -s file.err ] || fail "progress written to a file: $(head -c 200 file.err | od -c | head -3)"
[ "$(grep -c '^profile steps' file.out || true)" -eq 59 ] || fail "not 59 windows (60 marks): $(grep -c '^profile steps' file.out)"
ok

# stderr a terminal: the percentage, then the line erased; stdout unchanged. The
# percentage must show when the run took more than 1.5 s (past the half-second
# quiet time with room to spare); a faster run may show it or not.
if ! command -v script >/dev/null; then
    echo "SKIP: no util-linux script to give stderr a terminal"
else
    t0=$(date +%s%N)
    script -qefc "'$A' intervals big.sqlite --every 1 >tty.out" /dev/null >tty.err </dev/null || fail "intervals under a terminal"
    t1=$(date +%s%N)
    elapsed_ms=$(( (t1 - t0) / 1000000 ))
    cmp -s file.out tty.out || fail "stdout differs with stderr a terminal"
    if [ -s tty.err ]; then
        grep -aq $'\ranalyze: intervals  *[0-9][0-9]*%' tty.err || fail "not a progress line: $(head -c 200 tty.err | od -c | head -3)"
        tail -c 8 tty.err | grep -aq $'\r\033\\[K' || fail "the progress line is not erased at the end: $(tail -c 20 tty.err | od -c)"
    elif [ "$elapsed_ms" -gt 1500 ]; then
        fail "no progress on a terminal in a run of $elapsed_ms ms"
    else
        echo "note: intervals ran in $elapsed_ms ms under the terminal, too fast for progress to be required"
    fi
    ok
fi
echo "it_progress: $n_checks checks passed"
