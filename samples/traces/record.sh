#!/usr/bin/env bash
# Records the sample traces of samples/traces/ on an H200 machine (1 or 2 GPUs), with GPU
# activity (CUPTI) on: the h200 preset, 10 steps (a short window: CUPTI adds about 1300
# kernel records per step and GPU), profile lines every 5 steps. Each trace gets its log
# beside it, and `analyze bottleneck` and `analyze gpu` outputs in DIR/analysis/.
#   bash samples/traces/record.sh [BUILD] [DIR]     (env: STEPS=10 EVERY=5 QUEUE=8)
set -u
BUILD=${1:-build}
DIR=${2:-samples/traces}
STEPS=${STEPS:-10}
EVERY=${EVERY:-5}
QUEUE=${QUEUE:-8}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${GPUS:-0}" -lt 1 ]; then
    echo "SKIP: no GPU (nvidia-smi -L lists none)"
    exit 0
fi
mkdir -p "$DIR/analysis"
record() { # name, trainer flags...
    local name=$1; shift
    rm -f "$DIR/$name.sqlite"
    "$BUILD/trainer" --device cuda --preset h200 --steps "$STEPS" --queue-depth "$QUEUE" --log-every "$EVERY" \
        --profile-interval "$EVERY" --trace "$DIR/$name.sqlite" "$@" >"$DIR/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc, $(du -k "$DIR/$name.sqlite" 2>/dev/null | cut -f1) KB"
    [ $rc -eq 0 ] || { tail -5 "$DIR/$name.log"; return; }
    "$BUILD/analyze" bottleneck "$DIR/$name.sqlite" >"$DIR/analysis/$name.bottleneck.txt" 2>&1
    "$BUILD/analyze" gpu "$DIR/$name.sqlite" >"$DIR/analysis/$name.gpu.txt" 2>&1
}
record h200-sync --postprocess sync
record h200-async --postprocess async
if [ "$GPUS" -ge 2 ]; then
    record h200-split-async --target-gpus 0, --drafter-gpus 1, --postprocess async
    record h200-2x2-sync --target-gpus 0,1 --drafter-gpus 0,1 --postprocess sync
    record h200-2x2-async --target-gpus 0,1 --drafter-gpus 0,1 --postprocess async
fi
