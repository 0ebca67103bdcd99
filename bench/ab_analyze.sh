#!/usr/bin/env bash
# A/B of two analyze builds on one machine, in one run: `analyze summary --jobs 1` on the
# generated traces of bench_analyze.sh (tracegen --big: 8 threads, ranges nested one
# deep), A, B, A, B, ... (REPEATS times each, alternating, so that drift on a shared machine
# hits both alike). Prints per size the median and the range (min-max) of each build's wall
# time and CPU time (user + system), the median B/A ratio of the pairs, and checks that both
# builds print the same bytes.
#
#   bash bench/ab_analyze.sh BUILD_A BUILD_B    (env: SIZES="10000000 100000000" REPEATS=7
#                                                JOBS=1 BENCH_DIR=/path: keep the traces there)
set -euo pipefail
A=${1:?usage: bench/ab_analyze.sh BUILD_A BUILD_B}
B=${2:?usage: bench/ab_analyze.sh BUILD_A BUILD_B}
SIZES=${SIZES:-"10000000 100000000"}
REPEATS=${REPEATS:-7}
JOBS=${JOBS:-1}
for b in "$A" "$B"; do [ -x "$b/analyze" ] || { echo "no analyze in $b"; exit 2; }; done
GEN="$B/tests/tracegen"
[ -x "$GEN" ] || GEN="$A/tests/tracegen"
[ -x "$GEN" ] || { echo "ab_analyze: needs tests/tracegen in $B or $A (make tests)"; exit 2; }
[ -x /usr/bin/time ] || { echo "ab_analyze: needs /usr/bin/time"; exit 2; }
KEEP=1
if [ -z "${BENCH_DIR:-}" ]; then
    BENCH_DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/ab_analyze.XXXXXX")
    KEEP=0
fi
mkdir -p "$BENCH_DIR"
trap '[ $KEEP = 1 ] || rm -rf "$BENCH_DIR"' EXIT

echo "machine: $(uname -m), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); A = $A, B = $B"
echo "analyze summary --jobs $JOBS, $REPEATS runs of each, alternating"
printf '%-10s %-2s %8s %15s %8s %15s\n' ranges v wall_s "wall min-max" cpu_s "cpu min-max"
for n in $SIZES; do
    trace="$BENCH_DIR/big_$n.sqlite"
    [ -s "$trace" ] || "$GEN" --big "$trace" "$n" >/dev/null
    "$A/analyze" summary --jobs "$JOBS" "$trace" >"$BENCH_DIR/a.out"
    "$B/analyze" summary --jobs "$JOBS" "$trace" >"$BENCH_DIR/b.out"
    cmp -s "$BENCH_DIR/a.out" "$BENCH_DIR/b.out" || { echo "ab_analyze: A and B print different output at $n ranges"; exit 1; }
    : >"$BENCH_DIR/times"
    for r in $(seq "$REPEATS"); do
        for v in A B; do
            bin=$A; [ $v = B ] && bin=$B
            /usr/bin/time -f "$v $r %e %U %S" -a -o "$BENCH_DIR/times" "$bin/analyze" summary --jobs "$JOBS" "$trace" >/dev/null
        done
    done
    python3 - "$BENCH_DIR/times" "$n" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1] in "AB"]
n = sys.argv[2]
by = {"A": {}, "B": {}}
for v, r, wall, user, sys_ in rows:
    by[v][r] = (float(wall), float(user) + float(sys_))
for v in "AB":
    w = [x[0] for x in by[v].values()]
    c = [x[1] for x in by[v].values()]
    print(f"{n:<10} {v:<2} {statistics.median(w):8.3f} {min(w):7.3f}-{max(w):<7.3f} "
          f"{statistics.median(c):8.3f} {min(c):7.3f}-{max(c):<7.3f}")
pairs = [r for r in by["A"] if r in by["B"]]
rw = statistics.median(by["B"][r][0] / by["A"][r][0] for r in pairs)
rc = statistics.median(by["B"][r][1] / by["A"][r][1] for r in pairs)
print(f"{n:<10} B/A: wall {rw:.3f}, cpu {rc:.3f} (median of {len(pairs)} pairs)")
EOF
done
