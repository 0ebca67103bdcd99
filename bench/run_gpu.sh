#!/usr/bin/env bash
# GPU benchmarks of the trainer's CUDA backend, for one H200 machine (1 or 2 GPUs used):
#  1. bench_gpu_gemm: the bf16 GEMM ceiling (8192^3 through cuBLASLt) and the target forward
#     of the h200 preset in model TFLOP/s as a fraction of it, with a breakdown by part;
#  2. tokens/s of the h200 preset, --postprocess sync and async side by side: co-located on
#     1 GPU (target and drafter on GPU 0), and when there are 2 GPUs, split (target on 0,
#     drafter on 1) and co-located on both (targets 0,1, drafters 0,1, NCCL all-reduce);
#  3. profiling off vs on (--trace + NVTX + --profile-interval profile lines), 1 GPU async,
#     and their throughput ratio.
# tokens/s: the mean of the log lines' tok/s after the first window (steps STEPS_WARM+1 ..
# STEPS; the first window holds the start-up: cuBLAS plans, queue filling). Target GPU busy:
# the backend's own line, from CUDA events around every forward (GPU time of the forwards /
# GPU time spanned, after 2 warm-up forwards): the share of time the target's compute stream
# had a forward running. --queue-depth QUEUE (default 8) keeps the pinned host memory small
# (each slot of the h200 preset is 336 MB pinned; the default depth 60 would pin 21 GB and take
# seconds to allocate). Every run is short (STEPS steps) so that the whole script takes about
# 3-5 minutes; logs stay in $OUT.
#
# With ONOFF_REPEATS=N (default 0), section 3 then runs N more pairs of 1 GPU async off and
# on, alternating which goes first, and prints each pair's on/off and their median: one pair is
# good to about +-1 % only.
#
#   bash bench/run_gpu.sh [BUILD]     (env: STEPS=30 STEPS_WARM=10 QUEUE=8 GPUS=auto
#                                      ONOFF_REPEATS=0)
set -u
BUILD=${1:-build}
STEPS=${STEPS:-30}
STEPS_WARM=${STEPS_WARM:-10}
QUEUE=${QUEUE:-8}
ONOFF_REPEATS=${ONOFF_REPEATS:-0}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
OUT=${OUT:-$(mktemp -d /tmp/stagetrace-bench-gpu.XXXXXX)}
mkdir -p "$OUT"
TRAINER=$BUILD/trainer

if [ -z "${GPUS:-}" ] || [ "$GPUS" = auto ]; then
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
GPUS=${GPUS:-0}
if [ "$GPUS" -lt 1 ]; then
    echo "SKIP: no GPU (nvidia-smi -L lists none; set GPUS=N to force)"
    exit 0
fi
echo "GPU benchmarks: $GPUS GPU(s), build $BUILD, logs in $OUT"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
    sed 's/^/  /'
echo "  $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"

# ---- 1. GEMM ceiling and target forward ---------------------------------------------------------
if command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    bash bench/bench_gpu_build.sh "$BUILD" >"$OUT/build.log" 2>&1 ||
        { echo "bench_gpu_build failed:"; cat "$OUT/build.log"; }
fi
echo
echo "== 1. bf16 GEMM ceiling and the target forward (h200 preset, 1 GPU)"
if [ -x "$BUILD/bench/bench_gpu_gemm" ]; then
    start=$EPOCHREALTIME
    "$BUILD/bench/bench_gpu_gemm" --device 0 --repeats 7 2>&1 | tee "$OUT/gemm.log" | sed 's/^/  /'
    printf '  (%.0f s)\n' "$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')"
else
    echo "  $BUILD/bench/bench_gpu_gemm missing (bash bench/bench_gpu_build.sh builds it)"
fi

# ---- 2 and 3. trainer throughput ------------------------------------------------------------------
declare -A TOKS BUSY WALL
run_case() { # name, trainer flags...
    local name=$1; shift
    local log="$OUT/$name.log" start=$EPOCHREALTIME
    "$TRAINER" --device cuda --preset h200 --steps "$STEPS" --log-every "$STEPS_WARM" \
        --metrics-every "$STEPS_WARM" --queue-depth "$QUEUE" "$@" >"$log" 2>&1
    local rc=$?
    WALL[$name]=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
    if [ $rc -ne 0 ]; then
        TOKS[$name]=FAILED
        BUSY[$name]="exit $rc"
        echo "  $name: trainer exited $rc; last lines of $log:"
        tail -5 "$log" | sed 's/^/    | /'
        return
    fi
    TOKS[$name]=$(awk -v warm="$STEPS_WARM" '$1 == "step" && $2 > warm {
            for (i = 1; i < NF; i++) if ($i == "tok/s") { s += $(i + 1); n++ } }
        END { if (n) printf "%.0f", s / n; else print "-" }' "$log")
    BUSY[$name]=$(grep -o 'GPU busy with the forward [0-9.]*%' "$log" |
        awk '{ printf "%s%s", sep, $NF; sep = " / " }')
    [ -n "${BUSY[$name]}" ] || BUSY[$name]="-"
    printf '  %-24s %10s tok/s   target busy %-14s (%s s)\n' "$name" "${TOKS[$name]}" \
        "${BUSY[$name]}" "${WALL[$name]}"
}

echo
echo "== 2. tokens/s, h200 preset, $STEPS steps, tok/s of steps $((STEPS_WARM + 1))-$STEPS"
run_case 1gpu-sync --target-gpus 0, --drafter-gpus 0, --postprocess sync
run_case 1gpu-async --target-gpus 0, --drafter-gpus 0, --postprocess async
if [ "$GPUS" -ge 2 ]; then
    run_case 2gpu-split-sync --target-gpus 0, --drafter-gpus 1, --postprocess sync
    run_case 2gpu-split-async --target-gpus 0, --drafter-gpus 1, --postprocess async
    run_case 2gpu-colo-async --target-gpus 0,1 --drafter-gpus 0,1 --postprocess async
fi

echo
echo "== 3. profiling off vs on (1 GPU, async): --trace + NVTX + --profile-interval $STEPS_WARM,"
echo "   with GPU activity (CUPTI, the default) and without (--trace-gpu off)"
run_case 1gpu-async-profiled --target-gpus 0, --drafter-gpus 0, --postprocess async \
    --trace "$OUT/profiled.sqlite" --overwrite --profile-interval "$STEPS_WARM"
run_case 1gpu-async-profiled-nocupti --target-gpus 0, --drafter-gpus 0, --postprocess async \
    --trace "$OUT/profiled-nocupti.sqlite" --overwrite --profile-interval "$STEPS_WARM" --trace-gpu off

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }'; }
ONOFF_MEDIAN=
if [ "$ONOFF_REPEATS" -gt 0 ]; then
    echo
    echo "== 3b. profiling on / off, $ONOFF_REPEATS interleaved pairs (1 GPU, async, CUPTI on)"
    pair_ratios=()
    for i in $(seq "$ONOFF_REPEATS"); do
        off=(--target-gpus 0, --drafter-gpus 0, --postprocess async)
        on=("${off[@]}" --trace "$OUT/on-$i.sqlite" --overwrite --profile-interval "$STEPS_WARM")
        if [ $((i % 2)) -eq 1 ]; then
            run_case "off-$i" "${off[@]}"
            run_case "on-$i" "${on[@]}"
        else
            run_case "on-$i" "${on[@]}"
            run_case "off-$i" "${off[@]}"
        fi
        rm -f "$OUT/on-$i.sqlite"
        pair_ratios+=("$(ratio "${TOKS[on-$i]}" "${TOKS[off-$i]}")")
    done
    ONOFF_MEDIAN=$(printf '%s\n' "${pair_ratios[@]}" | grep -v '^-$' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "-" }')
    echo "  on / off per pair: ${pair_ratios[*]}"
fi
echo
echo "== summary"
printf '  %-28s %s\n' "async / sync, 1 GPU" "$(ratio "${TOKS[1gpu-async]}" "${TOKS[1gpu-sync]}")"
if [ "$GPUS" -ge 2 ]; then
    printf '  %-28s %s\n' "async / sync, 2 GPUs split" \
        "$(ratio "${TOKS[2gpu-split-async]}" "${TOKS[2gpu-split-sync]}")"
    printf '  %-28s %s\n' "2 GPUs split / 1 GPU (async)" \
        "$(ratio "${TOKS[2gpu-split-async]}" "${TOKS[1gpu-async]}")"
    printf '  %-28s %s\n' "2 GPUs colocated / 1 GPU" \
        "$(ratio "${TOKS[2gpu-colo-async]}" "${TOKS[1gpu-async]}")"
fi
printf '  %-28s %s\n' "profiling on / off" \
    "$(ratio "${TOKS[1gpu-async-profiled]}" "${TOKS[1gpu-async]}")"
[ -z "$ONOFF_MEDIAN" ] ||
    printf '  %-28s %s\n' "profiling on / off, median" "$ONOFF_MEDIAN (of $ONOFF_REPEATS pairs)"
printf '  %-28s %s  (goal >= 0.97)\n' "CUPTI on / off (profiled)" \
    "$(ratio "${TOKS[1gpu-async-profiled]}" "${TOKS[1gpu-async-profiled-nocupti]}")"
printf '  %-28s %s\n' "CUPTI dropped records" \
    "$("$BUILD/analyze" sql --format csv "$OUT/profiled.sqlite" \
        "SELECT value FROM meta WHERE key = 'gpu_dropped_records'" 2>/dev/null | tail -1)"
if [ -f "$OUT/gemm.log" ]; then
    grep '^RESULT' "$OUT/gemm.log" | sed 's/^RESULT/  forward vs ceiling:/'
fi
echo "  (record the figures in bench/RESULTS.md with the date, machine and command)"
