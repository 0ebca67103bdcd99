#!/usr/bin/env bash
# bench_sql.sh: what the ranges table's ordered scans save. The same GROUP
# BY queries over a generated trace, each in two spellings run alternately:
# `GROUP BY thread, stage`, which the table hands out already grouped (no
# sorter), and `GROUP BY thread+0, stage+0`, which it cannot, so SQLite
# sorts every row as it did before ordered scans; and `analyze summary
# --jobs 1`, which computes more than either. Prints per query the median
# CPU time (user+sys, so that other jobs on a shared machine weigh less
# than in wall time) of each spelling over BENCH_REPEAT interleaved rounds
# and their ratio.
#
#   bash bench/bench_sql.sh [BUILD_DIR]
#   BENCH_RANGES=10000000 BENCH_REPEAT=3 bash bench/bench_sql.sh build
set -euo pipefail
BUILD=${1:-build}
N=${BENCH_RANGES:-10000000}
REPEAT=${BENCH_REPEAT:-3}
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] && [ -x "$GEN" ] || { echo "bench_sql: build $A and $GEN first (make)"; exit 1; }
DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/bench_sql.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
T="$DIR/big.sqlite"
"$GEN" --big "$T" "$N" >/dev/null

cpu() { # CPU seconds of one command, its output discarded
    /usr/bin/time -f '%U %S' -o "$DIR/t" "$@" >/dev/null
    awk '{ printf "%.3f\n", $1 + $2 }' "$DIR/t"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

names=("thread, stage" "stage" "thread" "ranges_v: stage names")
fast=("SELECT thread, stage, count(*), sum(dur_ns), max(dur_ns) FROM ranges GROUP BY thread, stage"
      "SELECT stage, count(*), sum(dur_ns) FROM ranges GROUP BY stage"
      "SELECT thread, count(*), sum(dur_ns) FROM ranges GROUP BY thread"
      "SELECT stage_name, count(*), sum(dur_ns) FROM ranges_v GROUP BY stage")
slow=("SELECT thread, stage, count(*), sum(dur_ns), max(dur_ns) FROM ranges GROUP BY thread+0, stage+0"
      "SELECT stage, count(*), sum(dur_ns) FROM ranges GROUP BY stage+0"
      "SELECT thread, count(*), sum(dur_ns) FROM ranges GROUP BY thread+0"
      "SELECT stage_name, count(*), sum(dur_ns) FROM ranges_v GROUP BY stage_name")
printf 'ranges: %d, rounds: %d, CPU seconds (median)\n' "$N" "$REPEAT"
printf '%-24s %9s %9s %7s\n' "GROUP BY" ordered sorted ratio
for i in "${!names[@]}"; do
    [ "$("$A" sql "$T" "${fast[$i]}" | sort | md5sum)" = "$("$A" sql "$T" "${slow[$i]}" | sed 1d | sort | md5sum)" ] ||
        [ "$("$A" sql "$T" "${fast[$i]}" | sed 1d | sort | md5sum)" = "$("$A" sql "$T" "${slow[$i]}" | sed 1d | sort | md5sum)" ] ||
        { echo "bench_sql: '${fast[$i]}' and '${slow[$i]}' disagree"; exit 1; }
    f=() s=()
    for _ in $(seq "$REPEAT"); do
        f+=("$(cpu "$A" sql "$T" "${fast[$i]}")")
        s+=("$(cpu "$A" sql "$T" "${slow[$i]}")")
    done
    fm=$(printf '%s\n' "${f[@]}" | median)
    sm=$(printf '%s\n' "${s[@]}" | median)
    printf '%-24s %9s %9s %6.2fx\n' "${names[$i]}" "$fm" "$sm" "$(awk -v a="$sm" -v b="$fm" 'BEGIN { print a / b }')"
done
sums=()
for _ in $(seq "$REPEAT"); do sums+=("$(cpu "$A" summary --jobs 1 "$T")"); done
printf '%-24s %9s\n' "summary --jobs 1" "$(printf '%s\n' "${sums[@]}" | median)"
