#!/usr/bin/env bash
# it_stop.sh: how the programs stop, by their exit status. The sample pipeline,
# sent SIGINT or SIGTERM mid-run, stops as the trainer does: exit 130, its last
# line says it was interrupted and after how many steps, and its trace is
# flushed, with status interrupted and every step mark the program printed;
# the trainer, sent either signal, does the same. A trace that cannot be
# created is a runtime failure: exit 1 and one line, for the trainer and the
# sample, and nothing is created; a bad flag is exit 2. A program started with SIGINT and
# SIGTERM ignored (`trap '' INT TERM`, as nohup or a shell without job control does for
# background jobs) keeps them ignored: sent both, the trainer finishes every step, exits 0,
# and its trace says complete.
#
#   bash tests/it_stop.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
P="$BUILD/samples/pipeline"
TR="$BUILD/trainer"
for x in "$A" "$P" "$TR"; do
    [ -x "$x" ] || { echo "SKIP: $x is not built"; exit 0; }
done

it_enter_tmp

# wait_for_line FILE REGEX: waits (at most 30 s) until FILE has a line matching REGEX
wait_for_line() {
    for _ in $(seq 300); do
        grep -Eq "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "no line matching '$2' in $1: $(tail -3 "$1")"
}

# A non-interactive shell starts background jobs with SIGINT ignored, and the library leaves an
# ignored signal ignored: the programs that must see SIGINT start with its default action.
if env --default-signal=INT true 2>/dev/null; then
    default_signals() { exec env --default-signal=INT,TERM "$@"; }
else
    default_signals() {
        exec python3 -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
    }
fi

# stop_mid_run NAME SIGNAL CMD...: starts CMD in the background, waits until it has printed
# its second profile window, sends SIGNAL, and keeps the exit status in $rc (137: it did
# not stop within 60 s)
stop_mid_run() {
    local name=$1 sig=$2; shift 2
    default_signals "$@" >"$name.out" 2>"$name.err" &
    local pid=$!
    wait_for_line "$name.out" '^profile steps 1[0-9]-'
    kill -s "$sig" "$pid"
    # a program that does not stop is killed after 60 s (exit 137)
    for _ in $(seq 600); do
        [ -d "/proc/$pid" ] && ! grep -q '^State:.*zombie' "/proc/$pid/status" 2>/dev/null || break
        sleep 0.1
    done
    kill -s KILL "$pid" 2>/dev/null || true
    set +e
    wait "$pid"
    rc=$?
    set -e
}

# check_interrupted NAME TRACE: the trace says interrupted, and holds the steps the program did
check_interrupted() {
    local name=$1 trace=$2
    expect_ok "$name.info" "$A" info "$trace"
    grep -Eq '^ +status: interrupted ' "$name.info.out" || fail "$name: $(grep status: "$name.info.out")"
    ok
}

for sig in INT TERM; do
    name=pipeline_$sig
    stop_mid_run "$name" "$sig" "$P" --steps 100000 --profile-interval 5 --trace "$name.sqlite"
    [ $rc -eq 130 ] || fail "$name: exit $rc, wanted 130 (stderr: $(cat "$name.err"))"
    [ ! -s "$name.err" ] || fail "$name: stderr: $(cat "$name.err")"
    last=$(tail -1 "$name.out")
    [[ $last =~ ^trace:\ $name.sqlite\ \(interrupted\ after\ ([0-9]+)\ of\ 100000\ steps,\ 0\ events\ dropped\)$ ]] ||
        fail "$name: last line '$last'"
    steps=${BASH_REMATCH[1]}
    [ "$steps" -ge 10 ] && [ "$steps" -lt 100000 ] || fail "$name: $steps steps"
    ok
    check_interrupted "$name" "$name.sqlite"
    # every step the program finished is in the trace, and no other
    grep -Eq "^  steps: $steps \(marks of steps 0-$steps\)$" "$name.info.out" ||
        fail "$name: $steps steps done, the trace says: $(grep 'steps:' "$name.info.out")"
    ok
    # and what was recorded reads back: intervals reproduces the windows it printed
    expect_ok "$name.intervals" "$A" intervals --every 5 "$name.sqlite"
    grep '^profile ' "$name.out" >"$name.printed" || fail "$name: no profile lines"
    grep '^profile ' "$name.intervals.out" | head -n "$(wc -l <"$name.printed")" >"$name.read"
    cmp -s "$name.printed" "$name.read" || fail "$name: windows differ: $(diff "$name.printed" "$name.read" | head)"
    ok
done

for sig in INT TERM; do
    name=trainer_$sig
    stop_mid_run "$name" "$sig" "$TR" --preset tiny --steps 100000 --profile-interval 5 --log-every 5 \
        --trace "$name.sqlite"
    [ $rc -eq 130 ] || fail "$name: exit $rc, wanted 130 (stderr: $(cat "$name.err"))"
    grep -q '^trainer: interrupted after ' "$name.out" || fail "$name: $(tail -1 "$name.out")"
    ok
    check_interrupted "$name" "$name.sqlite"
done

# SIGINT and SIGTERM ignored when the trainer starts stay ignored: it runs to the end.
name=trainer_ignored
(trap '' INT TERM; exec "$TR" --preset tiny --steps 40 --profile-interval 5 --log-every 5 \
    --trace "$name.sqlite") >"$name.out" 2>"$name.err" &
pid=$!
wait_for_line "$name.out" '^profile steps 1-5'
kill -s INT "$pid" 2>/dev/null || true
kill -s TERM "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
[ $rc -eq 0 ] || fail "$name: exit $rc, wanted 0: the ignored signals stopped it (stderr: $(cat "$name.err"))"
expect_ok "$name.info" "$A" info "$name.sqlite"
grep -Eq '^ +status: complete' "$name.info.out" || fail "$name: $(grep status: "$name.info.out")"
grep -Eq '^  steps: 40 \(marks of steps 0-40\)$' "$name.info.out" || fail "$name: $(grep 'steps:' "$name.info.out")"
ok

# A trace that cannot be created: exit 1, one line naming the path, nothing created.
for prog in trainer pipeline; do
    bin=$TR
    [ $prog = pipeline ] && bin=$P
    run "${prog}_nodir" "$bin" --steps 2 --trace /nonexistent-dir/x.sqlite
    [ $rc -eq 1 ] || fail "${prog}_nodir: exit $rc, wanted 1 (stderr: $(cat "${prog}_nodir.err"))"
    [ "$(wc -l <"${prog}_nodir.err")" -eq 1 ] || fail "${prog}_nodir: stderr: $(cat "${prog}_nodir.err")"
    grep -q "^$prog: .*'/nonexistent-dir/x.sqlite'" "${prog}_nodir.err" || fail "${prog}_nodir: $(cat "${prog}_nodir.err")"
    [ ! -e /nonexistent-dir ] || fail "${prog}_nodir: /nonexistent-dir was created"
    ok
    # an existing trace without --overwrite: a runtime failure too, and the file is kept
    cp pipeline_INT.sqlite "$prog.keep.sqlite"
    run "${prog}_exists" "$bin" --steps 2 --trace "$prog.keep.sqlite"
    [ $rc -eq 1 ] && [ "$(wc -l <"${prog}_exists.err")" -eq 1 ] || fail "${prog}_exists: exit $rc: $(cat "${prog}_exists.err")"
    cmp -s pipeline_INT.sqlite "$prog.keep.sqlite" || fail "${prog}_exists: the existing trace changed"
    ok
    # a bad flag stays exit 2
    run "${prog}_badflag" "$bin" --steps abc --trace "$prog.never.sqlite"
    [ $rc -eq 2 ] && [ "$(wc -l <"${prog}_badflag.err")" -eq 1 ] || fail "${prog}_badflag: exit $rc: $(cat "${prog}_badflag.err")"
    [ ! -e "$prog.never.sqlite" ] || fail "${prog}_badflag: a trace was created"
    ok
done

echo "it_stop: $n_checks checks passed"
