#!/usr/bin/env bash
# bench_analyze.sh: wall time and peak memory of `analyze summary`,
# `intervals` and `bottleneck` on generated traces of 10 M and 100 M ranges,
# side by side with the equivalent GROUP BY run by the sqlite3 CLI over the
# same ranges as a plain row table (`analyze export --rows`). `summary` runs
# once per --jobs value of BENCH_JOBS (default 1 and 2), and the wall-time
# ratio of the first to each other is printed under its rows.
#
# Traces come from `tracegen --big PATH N` (8 threads, ranges nested one
# deep, 60 step marks). Goal: 10 M ranges under 0.5 s and 100 M under 5 s for
# each subcommand, memory flat in the trace length. The SQL equivalents:
#   summary     SELECT thread, stage, count(*), sum(dur_ns), max(dur_ns) ... GROUP BY thread, stage
#               (no self time, no percentiles: less than summary computes)
#   intervals   SELECT step / 10, thread, stage, count(*), sum(dur_ns) ... GROUP BY 1, 2, 3
#               (whole ranges, not split at the window boundaries)
#   bottleneck  SELECT role, kind, sum(dur_ns) FROM ranges_v GROUP BY role, kind
#               (inclusive time, not self time; no step windows)
# Peak memory: /usr/bin/time -v when present, else a getrusage wrapper (python3).
#
#   bash bench/bench_analyze.sh [BUILD_DIR]
#   BENCH_SIZES="10000000" bash bench/bench_analyze.sh build   # sizes (ranges)
#   BENCH_SQL=0 ...          skip the sqlite3 side (and the export it needs)
#   BENCH_JOBS="1 2 4" ...   the --jobs values summary runs with
#   BENCH_REPEAT=3 ...       runs of each analyze command: the fastest wall time
#                            is shown, with the largest peak memory of the runs
#   BENCH_DIR=/path ...      where the traces go (default a temp dir, removed after;
#                            100 M ranges take ~0.6 GB as a trace, ~3.5 GB as rows)
set -euo pipefail
BUILD=${1:-build}
SIZES=${BENCH_SIZES:-"10000000 100000000"}
JOBS=${BENCH_JOBS:-"1 2"}
REPEAT=${BENCH_REPEAT:-1}
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] && [ -x "$GEN" ] || { echo "bench_analyze: build $A and $GEN first (make)"; exit 1; }
KEEP=1
if [ -z "${BENCH_DIR:-}" ]; then
    BENCH_DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/bench_analyze.XXXXXX")
    KEEP=0
fi
mkdir -p "$BENCH_DIR"
cleanup() { [ $KEEP = 1 ] || rm -rf "$BENCH_DIR"; }
trap cleanup EXIT

# measure LABEL CMD...: runs CMD (stdout discarded), prints "wall_s peak_mb"
measure() {
    local out="$BENCH_DIR/measure.txt"
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null
        awk '{printf "%.3f %.1f\n", $1, $2 / 1024}' "$out"
    else
        python3 - "$@" <<'EOF'
import resource, subprocess, sys, time
t = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
wall = time.monotonic() - t
print(f"{wall:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.1f}")
EOF
    fi
}

# best LABEL CMD...: measure, REPEAT times: "fastest_wall_s largest_peak_mb"
best() {
    local w m bw= bm=
    for _ in $(seq "$REPEAT"); do
        read -r w m < <(measure "$@")
        bw=$(awk -v a="$w" -v b="${bw:-$w}" 'BEGIN { print (a < b ? a : b) }')
        bm=$(awk -v a="$m" -v b="${bm:-$m}" 'BEGIN { print (a > b ? a : b) }')
    done
    echo "$bw $bm"
}

echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u +%Y-%m-%d), traces in $BENCH_DIR ($(df -h "$BENCH_DIR" | awk 'NR==2{print $4}') free)"
printf '\n%-11s %-12s %9s %9s %11s   %-10s %9s %9s\n' ranges command wall_s peak_MB M_ranges/s goal sql_s sql_MB
for n in $SIZES; do
    trace="$BENCH_DIR/big_$n.sqlite"
    rows="$BENCH_DIR/rows_$n.sqlite"
    [ -s "$trace" ] || "$GEN" --big "$trace" "$n" >/dev/null
    if [ "${BENCH_SQL:-1}" = 1 ] && [ ! -s "$rows" ]; then
        "$A" export "$trace" --rows "$rows" --overwrite
    fi
    goal=$(awk -v n="$n" 'BEGIN { printf "%.1f", n <= 10000000 ? 0.5 : 5.0 * n / 100000000 }')
    "$A" summary "$trace" >/dev/null # warm the page cache
    first_jobs= first_wall=
    for cmd in $(for j in $JOBS; do echo "summary:$j"; done) intervals bottleneck; do
        case $cmd in
        summary:*) j=${cmd#summary:}; label="summary -j$j"; args=(summary --jobs "$j" "$trace");
            q="SELECT thread, stage, count(*), sum(dur_ns), max(dur_ns) FROM ranges GROUP BY thread, stage" ;;
        intervals) label=$cmd; args=(intervals --every 10 "$trace");
            q="SELECT step / 10, thread, stage, count(*), sum(dur_ns) FROM ranges GROUP BY 1, 2, 3" ;;
        bottleneck) label=$cmd; args=(bottleneck "$trace");
            q="SELECT role, kind, sum(dur_ns) FROM ranges_v GROUP BY role, kind" ;;
        esac
        read -r wall mb < <(best "$A" "${args[@]}")
        sql_wall=- sql_mb=-
        # the SQL side once per command (summary: with its first --jobs)
        if [ "${BENCH_SQL:-1}" = 1 ] && [ -z "$first_jobs" -o "${cmd%%:*}" != summary ]; then
            read -r sql_wall sql_mb < <(measure sqlite3 "$rows" "$q")
        fi
        met=$(awk -v w="$wall" -v g="$goal" 'BEGIN { print w <= g ? "met" : "MISSED" }')
        printf '%-11s %-12s %9s %9s %11.1f   %-10s %9s %9s\n' "$n" "$label" "$wall" "$mb" \
            "$(awk -v n="$n" -v w="$wall" 'BEGIN { print n / w / 1e6 }')" "<${goal}s $met" "$sql_wall" "$sql_mb"
        case $cmd in summary:*)
            if [ -z "$first_jobs" ]; then
                first_jobs=$j first_wall=$wall
            else
                printf '%-11s %-12s %9s\n' "" "  -j$first_jobs/-j$j" \
                    "$(awk -v a="$first_wall" -v b="$wall" 'BEGIN { printf "%.2fx", a / b }')"
            fi ;;
        esac
    done
    [ $KEEP = 1 ] || rm -f "$trace" "$rows"
done
