#!/usr/bin/env bash
# bench_torch.sh: what recording costs a PyTorch training loop. Runs the
# sample pipeline samples/python/dflash_torch.py in four modes, interleaved
# over BENCH_REPEAT rounds: off (no trace), on (stagetrace ranges, profile
# lines every 10 steps), gpu (also CUPTI GPU activity), and torch.profiler
# (record_function per stage, CPU and CUDA activity; its Chrome trace). Prints
# per mode the median tokens/s, its ratio to off, and the trace's size.
# Needs torch (the GPU machine: /opt/torch/.venv/bin/python).
#
# BENCH_ALTERNATE=N instead runs BENCH_REPEAT processes of BENCH_STEPS steps
# with GPU recording paused and resumed every N steps inside each
# (dflash_torch.py --gpu-alternate N: paired blocks, order alternating) and
# prints each process's paired ratio recorded/paused with its 95 % interval.
# BENCH_RECORDS="SPEC ..." (alternation only): the record sets to measure,
# process r recording with the r-th (cyclically) as STAGETRACE_GPU_RECORDS
# (docs/tracer.md, "GPU activity"; "default" leaves it unset), so that one
# run gives each part's cost against paused; `torch_profiler` in that list
# runs that process with torch.profiler started and stopped in the same blocks
# (dflash_torch.py --torch-profiler PATH --gpu-alternate N), so that its cost
# and stagetrace's come from one command, measured alike.
#
#   PY=/opt/torch/.venv/bin/python bash bench/bench_torch.sh [BUILD_DIR]
#   BENCH_DEVICE=cpu BENCH_STEPS=200 BENCH_REPEAT=5 ...
#   BENCH_ALTERNATE=60 BENCH_STEPS=2000 BENCH_REPEAT=2 ...
set -euo pipefail
BUILD=${1:-build}
PY=${PY:-python3}
DEVICE=${BENCH_DEVICE:-cuda}
STEPS=${BENCH_STEPS:-300}
REPEAT=${BENCH_REPEAT:-3}
EXTRA=${BENCH_ARGS:-"--batch 8 --seq-len 256 --dim 256 --target-layers 6"}
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch, stagetrace" || { echo "bench_torch: needs torch and $BUILD/python (make python)"; exit 1; }
DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/bench_torch.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
if [ -n "${BENCH_ALTERNATE:-}" ]; then
    printf '%s, %d steps, %s, GPU recording paused/resumed every %s steps, %d processes\n' \
        "$DEVICE" "$STEPS" "$EXTRA" "$BENCH_ALTERNATE" "$REPEAT"
    read -r -a specs <<<"${BENCH_RECORDS:-default}"
    for r in $(seq "$REPEAT"); do
        spec=${specs[$(((r - 1) % ${#specs[@]}))]}
        unset STAGETRACE_GPU_RECORDS
        [ "$spec" = default ] || [ "$spec" = torch_profiler ] || export STAGETRACE_GPU_RECORDS=$spec
        recording=(--trace "$DIR/alt.$r.sqlite" --trace-gpu)
        [ "$spec" = torch_profiler ] && recording=(--torch-profiler "$DIR/alt.$r.json")
        # shellcheck disable=SC2086
        "$PY" samples/python/dflash_torch.py --device "$DEVICE" --steps "$STEPS" $EXTRA "${recording[@]}" \
            --gpu-alternate "$BENCH_ALTERNATE" ${BENCH_SETTLE:+--alternate-settle "$BENCH_SETTLE"} \
            >"$DIR/alt.$r.log" 2>&1 || { echo "bench_torch: the alternating run failed:" >&2; tail -20 "$DIR/alt.$r.log" >&2; exit 1; }
        grep -h 'gpu-alternate:' "$DIR/alt.$r.log" | sed "s/^dflash_torch: /process $r (records $spec): /"
        rm -f "$DIR/alt.$r.sqlite"* "$DIR/alt.$r.json"
    done
    exit 0
fi
modes=(off on gpu torch_profiler)
run() { # mode round: appends tokens/s to $DIR/<mode>.rates, the trace's size to $DIR/<mode>.size
    local mode=$1 r=$2 out="$DIR/$1.$2" args=()
    case $mode in
    on) args=(--trace "$out.sqlite" --profile-interval 10) ;;
    gpu) args=(--trace "$out.sqlite" --profile-interval 10 --trace-gpu) ;;
    torch_profiler) args=(--torch-profiler "$out.json") ;;
    esac
    # shellcheck disable=SC2086
    if ! "$PY" samples/python/dflash_torch.py --device "$DEVICE" --steps "$STEPS" $EXTRA "${args[@]}" >"$out.log" 2>&1; then
        echo "bench_torch: the $mode run failed:" >&2
        tail -20 "$out.log" >&2
        exit 1
    fi
    local rate size=0 f
    rate=$(sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p' "$out.log")
    [ -n "$rate" ] || { echo "bench_torch: no tokens/s in the $mode run's output:" >&2; tail -5 "$out.log" >&2; exit 1; }
    for f in "$out.sqlite" "$out.json"; do
        if [ -f "$f" ]; then size=$(stat -c %s "$f"); rm -f "$f" "$f-wal" "$f-shm"; fi
    done
    echo "$rate" >>"$DIR/$mode.rates"
    echo "$size" >"$DIR/$mode.size"
}
for r in $(seq "$REPEAT"); do
    for m in "${modes[@]}"; do run "$m" "$r"; done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
off=$(median <"$DIR/off.rates")
printf '%s, %d steps, %s, %d rounds (interleaved)\n' "$DEVICE" "$STEPS" "$EXTRA" "$REPEAT"
printf '%-15s %12s %8s %12s   %s\n' mode tokens/s ratio trace_MB "each round"
for m in "${modes[@]}"; do
    med=$(median <"$DIR/$m.rates")
    printf '%-15s %12.1f %8.4f %12.2f   %s\n' "$m" "$med" "$(awk -v a="$med" -v b="$off" 'BEGIN { print a / b }')" \
        "$(awk -v s="$(cat "$DIR/$m.size")" 'BEGIN { print s / 1e6 }')" "$(tr '\n' ' ' <"$DIR/$m.rates")"
done
