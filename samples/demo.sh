#!/usr/bin/env bash
# make demo: a short profiled run and its analysis. Runs the trainer when it
# is built (CUDA backend when a GPU and the CUDA build exist, else CPU, tiny
# preset), otherwise the pipeline sample; then shows the analysis with
# `analyze` when it is built.
set -euo pipefail
BUILD=${1:-build}
mkdir -p runs
trace=runs/demo-$(date +%Y%m%d-%H%M%S)-$$.sqlite
if [ -x "$BUILD/trainer" ]; then
    device=cpu
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && "$BUILD/trainer" --version | grep -q cuda; then
        device=cuda
    fi
    echo "== trainer, $device backend, tiny preset, profile every 10 steps"
    "$BUILD/trainer" --device "$device" --preset tiny --steps 40 --profile-interval 10 --trace "$trace"
else
    echo "== pipeline sample, profile every 10 steps"
    "$BUILD/samples/pipeline" --steps 40 --profile-interval 10 --trace "$trace"
fi
if [ -x "$BUILD/analyze" ]; then
    echo; echo "== analyze summary $trace"
    "$BUILD/analyze" summary "$trace"
    echo; echo "== analyze bottleneck $trace"
    "$BUILD/analyze" bottleneck "$trace"
else
    echo; echo "trace written to $trace (open it with: sqlite3 $trace, then .load $BUILD/stagetrace_ext)"
fi
