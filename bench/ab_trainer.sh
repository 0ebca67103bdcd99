#!/usr/bin/env bash
# A/B of two trainer builds on one H200 machine, in one run: each layout runs A, B, A, B, ...
# (REPEATS times each, alternating, so that drift on a shared machine hits both alike) with
# tracing, profile lines and GPU activity on, and prints per run the tokens/s (the mean of the
# log lines after the first window), the trace's size, and its GPU activity records and API
# calls (from `analyze info --format json` of build B); then per layout the median tokens/s of
# each build and B/A.
#
#   bash bench/ab_trainer.sh BUILD_A BUILD_B      (env: STEPS=30 WARM=10 QUEUE=8 REPEATS=2
#                                                  LAYOUTS="1gpu-async 2x2-async")
set -u
A=${1:?usage: bench/ab_trainer.sh BUILD_A BUILD_B}
B=${2:?usage: bench/ab_trainer.sh BUILD_A BUILD_B}
STEPS=${STEPS:-30}
WARM=${WARM:-10}
QUEUE=${QUEUE:-8}
REPEATS=${REPEATS:-2}
LAYOUTS=${LAYOUTS:-"1gpu-async 2x2-async"}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
OUT=${OUT:-$(mktemp -d /tmp/stagetrace-ab.XXXXXX)}
mkdir -p "$OUT"
for b in "$A" "$B"; do
    [ -x "$b/trainer" ] || { echo "no trainer in $b"; exit 2; }
done
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "${GPUS:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 0; }

flags_of() {
    case $1 in
    1gpu-sync) echo "--target-gpus 0, --drafter-gpus 0, --postprocess sync" ;;
    1gpu-async) echo "--target-gpus 0, --drafter-gpus 0, --postprocess async" ;;
    2x2-sync) echo "--target-gpus 0,1 --drafter-gpus 0,1 --postprocess sync" ;;
    2x2-async) echo "--target-gpus 0,1 --drafter-gpus 0,1 --postprocess async" ;;
    split-async) echo "--target-gpus 0, --drafter-gpus 1, --postprocess async" ;;
    *) echo "unknown layout $1" >&2; return 1 ;;
    esac
}

echo "A = $A, B = $B; $STEPS steps (tokens/s of steps $((WARM + 1))-$STEPS), queue $QUEUE, $REPEATS repeats"
printf '%-12s %-2s %3s %10s %9s %12s %12s\n' layout v rep tok/s trace_MB gpu_records api_calls
declare -A TOKS
for layout in $LAYOUTS; do
    flags=$(flags_of "$layout") || exit 2
    case $layout in 2x2-* | split-*) [ "$GPUS" -ge 2 ] || { echo "$layout: needs 2 GPUs, skipped"; continue; } ;; esac
    for rep in $(seq 1 "$REPEATS"); do
        for v in A B; do
            build=$A
            [ $v = B ] && build=$B
            name="$layout-$v-$rep"
            # shellcheck disable=SC2086
            "$build/trainer" --device cuda --preset h200 --steps "$STEPS" --queue-depth "$QUEUE" \
                --log-every "$WARM" --metrics-every "$WARM" --profile-interval "$WARM" \
                --trace "$OUT/$name.sqlite" --overwrite $flags >"$OUT/$name.log" 2>&1 ||
                { echo "$name: trainer failed: $(tail -2 "$OUT/$name.log")"; continue; }
            toks=$(awk -v warm="$WARM" '$1 == "step" && $2 > warm {
                    for (i = 1; i < NF; i++) if ($i == "tok/s") { s += $(i + 1); n++ } }
                END { if (n) printf "%.0f", s / n; else print "-" }' "$OUT/$name.log")
            TOKS[$layout-$v]="${TOKS[$layout-$v]:-} $toks"
            mb=$(awk -v b="$(stat -c %s "$OUT/$name.sqlite")" 'BEGIN { printf "%.2f", b / 1048576 }')
            info=$("$B/analyze" info --format json "$OUT/$name.sqlite" 2>/dev/null |
                python3 -c 'import json, sys; r = json.load(sys.stdin)["info"][0]; print(r["gpu_records"], r["gpu_api_calls"])' 2>/dev/null)
            printf '%-12s %-2s %3s %10s %9s %12s %12s\n' "$layout" "$v" "$rep" "$toks" "$mb" ${info:-- -}
        done
    done
done
echo
printf '%-12s %12s %12s %8s\n' layout "A tok/s" "B tok/s" "B/A"
for layout in $LAYOUTS; do
    [ -n "${TOKS[$layout-A]:-}" ] || continue
    median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    ma=$(median "${TOKS[$layout-A]}")
    mb=$(median "${TOKS[$layout-B]}")
    printf '%-12s %12.0f %12.0f %8.3f\n' "$layout" "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { print b / a }')"
done
echo "logs and traces in $OUT"
