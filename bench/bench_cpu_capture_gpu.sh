#!/usr/bin/env bash
# bench_cpu_capture_gpu.sh: the CPU capture on a GPU machine, the figures docs/cpu.md and
# bench/RESULTS.md quote. In one go:
#   1. the trainer (--device cuda, PRESET) with --trace-cpu: analyze cpu's stages of the
#      target and drafter threads (on-CPU shares, spinning syncs) and their top libraries;
#   2. samples/python/cpu_check.py under PY: Python frames (py::) and the GIL per stage;
#   3. the PyTorch sample with and without --trace-cpu, ROUNDS interleaved pairs (order
#      alternating), its steady tokens/s and CPU per step, and analyze cpu of the last trace
#      (--loss-item: a .item() host sync inside the loss stage);
#   4. build/bench/bench_cpu_perf ROUNDS_PERF (perf and signal-sampler cost on a busy thread).
#
#   PY=/opt/torch/.venv/bin/python bash bench/bench_cpu_capture_gpu.sh [BUILD]
#   env: PRESET=h200 STEPS=50 TORCH_STEPS=200 ROUNDS=3 ROUNDS_PERF=21
set -uo pipefail
BUILD=${1:-build}
PY=${PY:-python3}
PRESET=${PRESET:-h200}
STEPS=${STEPS:-50}
TORCH_STEPS=${TORCH_STEPS:-200}
ROUNDS=${ROUNDS:-3}
ROUNDS_PERF=${ROUNDS_PERF:-21}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/bench_cpu_capture.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
A="$BUILD/analyze"

echo "== 1. trainer --device cuda --preset $PRESET --steps $STEPS --trace-cpu"
if "$BUILD/trainer" --device cuda --preset "$PRESET" --steps "$STEPS" --trace "$DIR/tr.sqlite" --trace-cpu \
    >"$DIR/tr.log" 2>&1; then
    tail -1 "$DIR/tr.log"
    sqlite3 "$DIR/tr.sqlite" "SELECT key, value FROM meta WHERE key IN ('cpu_mode', 'cpu_sampler',
        'cpu_sample_hz', 'cpu_block_reasons', 'cpu_wait_stacks', 'cpu_lost_records', 'gpu_records')" 2>/dev/null
    "$A" cpu "$DIR/tr.sqlite" --top 3 | sed -n '1,60p'
else
    echo "trainer failed:"; tail -5 "$DIR/tr.log"
fi

echo "== 2. cpu_check.py ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
"$PY" samples/python/cpu_check.py --out "$DIR/py.sqlite" 2>&1 | tail -40

echo "== 3. dflash_torch --device cuda --steps $TORCH_STEPS --loss-item, off / --trace-cpu, $ROUNDS pairs"
ARGS="--device cuda --steps $TORCH_STEPS --batch 8 --seq-len 256 --dim 256 --target-layers 6 --loss-item"
for r in $(seq "$ROUNDS"); do
    for m in $([ $((r % 2)) -eq 1 ] && echo "off on" || echo "on off"); do
        extra=()
        if [ "$m" = on ]; then
            rm -f "$DIR"/torch.sqlite*
            extra=(--trace "$DIR/torch.sqlite" --trace-cpu --profile-interval 10)
        fi
        # shellcheck disable=SC2086
        "$PY" samples/python/dflash_torch.py $ARGS "${extra[@]}" >"$DIR/torch.log" 2>&1 || { tail -5 "$DIR/torch.log"; continue; }
        echo "round $r $m: $(grep steady "$DIR/torch.log" | sed 's/dflash_torch: //')"
    done
done
if [ -f "$DIR/torch.sqlite" ]; then
    sqlite3 "$DIR/torch.sqlite" "SELECT key, value FROM meta WHERE key LIKE 'python_%' OR key IN ('cpu_mode',
        'cpu_sampler', 'cpu_gil_samples', 'cpu_perf_map', 'cpu_perf_map_frames', 'cpu_sample_hz')" 2>/dev/null
    "$A" cpu "$DIR/torch.sqlite" --top 4 | sed -n '1,80p'
    "$PY" samples/python/cpu_check.py --trace "$DIR/torch.sqlite" 2>&1 | tail -30
fi

echo "== 4. bench_cpu_perf $ROUNDS_PERF"
[ -x "$BUILD/bench/bench_cpu_perf" ] && "$BUILD/bench/bench_cpu_perf" "$ROUNDS_PERF" 2>&1 | tail -25
