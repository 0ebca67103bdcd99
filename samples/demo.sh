#!/usr/bin/env bash
# make demo: a short profiled run and its analysis. Runs the trainer when it
# is built (CUDA backend when a GPU and the CUDA build exist, else CPU; tiny
# preset, one target, two drafters, async postprocess, so that every role and
# the all-reduce show; with the CPU capture, --trace-cpu), otherwise the
# pipeline sample; it prints a log line and the profile lines every 10 steps. Then shows the analysis with those
# `analyze` commands that exist in this build, or the trace's path.
set -euo pipefail
BUILD=${1:-build}
mkdir -p runs
trace=runs/demo-$(date +%Y%m%d-%H%M%S)-$$.sqlite
if [ -x "$BUILD/trainer" ]; then
    device=cpu
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && "$BUILD/trainer" --version | grep -q cuda; then
        device=cuda
    fi
    echo "== trainer, $device backend, tiny preset, profile every 10 steps, CPU capture"
    "$BUILD/trainer" --device "$device" --preset tiny --steps 40 --log-every 10 \
        --profile-interval 10 --postprocess async --drafter-gpus 2 --trace "$trace" --trace-cpu
else
    echo "== pipeline sample, profile every 10 steps"
    "$BUILD/samples/pipeline" --steps 40 --profile-interval 10 --trace "$trace"
fi
shown=0
if [ -x "$BUILD/analyze" ]; then
    commands=$("$BUILD/analyze" --help 2>&1 | awk '/^  [a-z]+ /{print $1}')
    for cmd in info summary bottleneck cpu; do
        if grep -qx "$cmd" <<<"$commands"; then
            args=()
            [ "$cmd" = cpu ] && args=(--top 3)
            echo; echo "== analyze $cmd ${args[*]} $trace"
            "$BUILD/analyze" "$cmd" "${args[@]}" "$trace"
            shown=1
        fi
    done
fi
if [ $shown = 0 ]; then
    echo; echo "trace written to $trace (open it with: sqlite3 $trace, then .load $BUILD/stagetrace_ext)"
fi
