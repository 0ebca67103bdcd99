#!/usr/bin/env bash
# it_hta.sh: Holistic Trace Analysis (HTA, pip install holistictraceanalysis) on the exports,
# against `analyze gpu`, with the commands of docs/analyze.md, "Comparing with HTA". Exports:
# each H200 sample trace (samples/traces/) with --chrome, and a tracegen rank set (4 ranks,
# --nccl, 130 steps: HTA 0.5 fails on a file whose correlation ids are all below 128) with
# --chrome-dir. tests/hta_check.py then checks:
#  - on each sample's export, as a user runs HTA (default settings): temporal, idle-time and
#    kernel breakdowns, kernel launch statistics and comm/comp overlap run; HTA's window is the
#    first to the last GPU record; its busy time and each kernel's total are analyze gpu's
#    within the bound of HTA's rounding to microseconds (< 2 us per record); one launch row per
#    launching call and record that share a correlation id;
#  - (a) with HTA_DISABLE_NS_ROUNDING=1, per device (hta_check.py cut): busy and idle equal, to
#    the nanosecond, `analyze gpu --time T0:T1` over that device's first to last GPU record;
#  - (b) analyze gpu's default (steady) window: the export cut to it gives HTA the same busy time
#    and busy share; HTA's idle lacks only the window's edges before the first and after the last
#    record;
#  - (c) on the rank set, comm/comp overlap 50 % on the drafters (the all-reduce runs half over
#    the compute kernel) and no overlap (NaN) on the targets, and every breakdown as tracegen
#    constructs it; (d) every rank file read as its own rank; (a) per rank against
#    `analyze gpu SET --time`.
# Plain build only: a sanitizer build writes the same JSON (it_export_gpu checks that), and HTA
# takes most of this test's time.
#
#   bash tests/it_hta.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
S="$ROOT/samples/traces"
for x in "$A" "$GEN"; do [ -x "$x" ] || { echo "SKIP: $x is not built"; exit 0; }; done
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 0; }
case "$BUILD" in */san-*) echo "SKIP: a sanitizer build ($BUILD): HTA reads the plain build's JSON"; exit 0 ;; esac
python3 -c 'import hta.trace_analysis' 2>/dev/null ||
    { echo "SKIP: python3 cannot import hta (python3 -m pip install holistictraceanalysis psutil)"; exit 0; }
ls "$S"/h200-*.sqlite >/dev/null 2>&1 || { echo "SKIP: no sample traces in $S"; exit 0; }

it_enter_tmp
start=$EPOCHREALTIME
CHECK="$ROOT/tests/hta_check.py"

# HTA's window of device D: its first GPU record's start to its last one's end, in seconds from
# the trace start (docs/analyze.md, "Comparing with HTA")
hta_window() {
    "$A" sql --format csv "$1" "SELECT printf('%.9f:%.9f', (min(start_ns) - m.v) / 1e9, (max(start_ns + dur_ns) - m.v) / 1e9)
        FROM gpu, (SELECT CAST(value AS INTEGER) AS v FROM meta WHERE key = 'start_ns') AS m
        WHERE kind != 'sync' AND device = $2" | tail -1
}
# analyze gpu's steady window: step 1's mark (the second) to the last mark
steady_window() {
    "$A" sql --format csv "$1" "SELECT printf('%.9f:%.9f', ((SELECT ts_ns FROM steps ORDER BY step LIMIT 1 OFFSET 1) - m.v) / 1e9,
        (max(ts_ns) - m.v) / 1e9) FROM steps, (SELECT CAST(value AS INTEGER) AS v FROM meta WHERE key = 'start_ns') AS m" | tail -1
}

samples=()
for trace in "$S"/h200-*.sqlite; do
    name=$(basename "$trace" .sqlite)
    samples+=("$name")
    mkdir "$name"
    expect_ok "$name.export" "$A" export "$trace" --chrome "$name/rank0.json"
    expect_ok "$name.steady" "$A" gpu "$trace" --format json --top 0
    mv "$name.steady.out" "$name.steady.json"
    steady=$(steady_window "$trace")
    cuts=()
    [[ "$steady" =~ ^[0-9]+\.[0-9]{9}:[0-9]+\.[0-9]{9}$ ]] || fail "$name: steady window '$steady'"
    for d in $("$A" sql --format csv "$trace" "SELECT DISTINCT device FROM gpu WHERE kind != 'sync' ORDER BY 1" | tail -n +2); do
        w=$(hta_window "$trace" "$d")
        [[ "$w" =~ ^[0-9]+\.[0-9]{9}:[0-9]+\.[0-9]{9}$ ]] || fail "$name: HTA window '$w'"
        echo "$w" >"$name.d$d.all.window"
        echo "$steady" >"$name.d$d.steady.window"
        expect_ok "$name.d$d.gpu" "$A" gpu "$trace" --time "$w" --format json --top 0
        mv "$name.d$d.gpu.out" "$name.d$d.gpu.json"
        cuts+=("$name.d$d.all.cut.json" --device "$d" "$name.d$d.steady.cut.json" --device "$d" --time "$steady")
    done
    expect_ok "$name.cut" python3 "$CHECK" cut "$name/rank0.json" "${cuts[@]}"
done
[ ${#samples[@]} -eq 3 ] || fail "expected the three H200 sample traces in $S, found ${#samples[@]}"

# the rank set: 130 steps, so that every rank has a correlation id past 127
STEPS=130
mkdir set
expect_ok set.gen "$GEN" --ranks set 4 --nccl --steps $STEPS
expect_ok set.export "$A" export set --chrome-dir hta-set
py "the set's windows" <<'PYEOF'
import json
for r in range(4):
    ev = json.load(open(f"hta-set/rank{r}.pt.trace.json"))["traceEvents"]
    g = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    lo = min(round(e["ts"] * 1000) for e in g)
    hi = max(round(e["ts"] * 1000) + round(e["dur"] * 1000) for e in g)
    open(f"set.r{r}.window", "w").write(f"{lo / 1e9:.9f}:{hi / 1e9:.9f}\n")
PYEOF
for r in 0 1 2 3; do
    expect_ok "set.r$r.gpu" "$A" gpu set --time "$(cat set.r$r.window)" --format json
    mv "set.r$r.gpu.out" "set.r$r.gpu.json"
done
prep=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')

run hta python3 "$CHECK" check . "${samples[@]}" --set hta-set $STEPS
cat hta.out
[ $rc -eq 0 ] || fail "HTA checks: $(tail -5 hta.err)"
ok
total=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
echo "it_hta: $n_checks checks passed (exports and analyze ${prep} s, ${total} s in all)"
