#!/usr/bin/env bash
# bench_kill_loss.sh: how much a SIGKILLed process loses, on a loaded machine. Each trial runs
# the sample pipeline (samples/pipeline: a producer and two consumers recording ranges
# continuously, default commit_ms 250) while LOAD busy loops keep every core busy, SIGKILLs it
# at a random moment 1 to 2 s in, and measures the loss as the kill's time minus the last
# committed record's time (the largest t1_ns of range_chunks; both on CLOCK_MONOTONIC, the
# trace's clock). Prints one line per trial, then n, percentiles and the maximum, in ms.
#
#   bash bench/bench_kill_loss.sh [BUILD_DIR]   env: TRIALS=60 LOAD=<cores>
set -uo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
TRIALS=${TRIALS:-60}
LOAD=${LOAD:-$(nproc)}
P=$BUILD/samples/pipeline
command -v sqlite3 >/dev/null || { echo "bench_kill_loss: no sqlite3"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/bench_kill_loss.XXXXXX")
busy=()
cleanup() {
    for b in "${busy[@]}"; do kill "$b" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
for _ in $(seq "$LOAD"); do
    (while :; do :; done) &
    busy+=($!)
done

for trial in $(seq "$TRIALS"); do
    f=$T/k$trial.sqlite
    "$P" --steps 1000000 --trace "$f" >/dev/null 2>&1 &
    pid=$!
    sleep "$(python3 -c 'import random; print(1 + random.random())')"
    # the time, then the kill, in one process: no fork between them
    t_kill=$(python3 -c 'import os, sys, time
t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
os.kill(int(sys.argv[1]), 9)
print(t)' "$pid")
    wait "$pid" 2>/dev/null
    last=$(sqlite3 "$f" "SELECT coalesce(max(t1_ns), 0) FROM range_chunks")
    echo "trial $trial loss_ms $(( (t_kill - last) / 1000 ))" | awk '{printf "%s %s %s %.1f\n", $1, $2, $3, $4 / 1000}'
    rm -f "$f" "$f-wal" "$f-shm"
done | tee "$T/trials"
awk '{print $4}' "$T/trials" | python3 -c '
import sys
v = sorted(float(x) for x in sys.stdin)
n = len(v)
q = lambda p: v[min(n - 1, int(p * n))]
print("n %d  p50 %.1f  p90 %.1f  p95 %.1f  p99 %.1f  max %.1f ms" % (n, q(.5), q(.9), q(.95), q(.99), v[-1]))
print("over 250 ms: %d of %d" % (sum(x > 250 for x in v), n))'
