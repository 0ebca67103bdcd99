#!/usr/bin/env bash
# bench_ranks.sh: `analyze summary --jobs 2` over rank sets of 8, 64 and 512
# rank files (docs/analyze.md, "Rank sets"), each file about RANGES ranges
# (default 1 M: `tracegen --ranks DIR N --steps S --extra E`, S * (4 + E)
# ranges per drafter rank). Prints per size the generation time, the disk
# used, the wall time, the CPU time (user + system) and the peak RSS of the
# summary (/usr/bin/time -v) and the 1-minute load average before it, and
# removes each set before the next. Goal: 512 x 1 M under 30 s, memory flat
# in the number of ranks.
#
#   bash bench/bench_ranks.sh [BUILD_DIR]
#   BENCH_RANKS="8 64" BENCH_STEPS=10000 BENCH_EXTRA=96 bash bench/bench_ranks.sh build
#   BENCH_DIR=/path ...   where the sets go (default a temp dir, removed after)
set -euo pipefail
BUILD=${1:-build}
RANKS=${BENCH_RANKS:-"8 64 512"}
STEPS=${BENCH_STEPS:-10000}
EXTRA=${BENCH_EXTRA:-96}
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] && [ -x "$GEN" ] || { echo "build first: make NO_CUDA=1 tests"; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time"; exit 2; }
D=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bench_ranks.XXXXXX")}
trap 'rm -rf "$D"' EXIT
printf '%-6s %-12s %-10s %-10s %-12s %-10s %-10s %-6s\n' ranks ranges/file gen_s disk_MB summary_s cpu_s peak_MB load
for n in $RANKS; do
    rm -rf "$D/set"
    mkdir -p "$D/set"
    t0=$(date +%s.%N)
    "$GEN" --ranks "$D/set" "$n" --steps "$STEPS" --extra "$EXTRA"
    t1=$(date +%s.%N)
    disk=$(du -sm "$D/set" | cut -f1)
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -v "$A" summary --jobs 2 "$D/set" >"$D/out.txt" 2>"$D/time.txt"
    wall=$(grep 'Elapsed (wall clock)' "$D/time.txt" | awk '{print $NF}' | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
    rss=$(grep 'Maximum resident set size' "$D/time.txt" | awk '{print $NF}')
    cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$D/time.txt")
    printf '%-6s %-12s %-10.1f %-10s %-12s %-10s %-10.1f %-6s\n' "$n" "$((STEPS * (4 + EXTRA)))" "$(echo "$t1 - $t0" | bc)" \
        "$disk" "$wall" "$cpu" "$(echo "$rss / 1024" | bc -l)" "$load"
    rm -rf "$D/set"
done
