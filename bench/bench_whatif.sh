#!/usr/bin/env bash
# Validation of `analyze whatif`: records a base configuration of the trainer, predicts
# changes from its trace (hidden-state queue 2 -> 8 -> 60, drafters 1 -> 2, postprocess sync ->
# async), runs each change for real in the same script, and prints predicted against measured
# steady-state tokens/s with the error. Every configuration runs REPEATS times, the
# configurations alternating (base, q8, q60, ..., base, q8, ...) so that drift on a shared
# machine hits all alike; each figure is the median over the repeats (a prediction: the
# median of the predictions from the REPEATS base traces). Measured tokens/s is what
# `analyze whatif` prints as measured (the steady window: a tenth of the steps skipped).
#
#   bash bench/bench_whatif.sh [--device cpu|cuda] [--build DIR] [--steps N] [--repeats N]
#                              [--preset P] [--cases "q8 q60 d2 async"] [--out DIR]
#                              [-- extra trainer flags...]
#
# cpu (default): tiny preset, 300 steps; every thread shares the machine's cores, which
# whatif models as one pool of `nproc` processors (--cores). cuda: small preset, 200 steps;
# d2 puts the second drafter on GPU 1 where there are two GPUs (the target on 0), else on GPU 0
# beside the first (`--drafter-gpus 0,0`, predicted with the same flag: GPU 0 shared by all).
set -u
DEVICE=cpu BUILD=build STEPS= REPEATS=3 PRESET= CASES= OUT=
EXTRA=()
while [ $# -gt 0 ]; do
    case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --preset) PRESET=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "bench_whatif: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case $DEVICE in cpu|cuda) ;; *) echo "bench_whatif: --device must be cpu or cuda" >&2; exit 2 ;; esac
[ -x "$BUILD/trainer" ] && [ -x "$BUILD/analyze" ] || { echo "bench_whatif: no trainer/analyze in $BUILD (make first)" >&2; exit 2; }
if [ "$DEVICE" = cpu ]; then
    STEPS=${STEPS:-300} PRESET=${PRESET:-tiny} CASES=${CASES:-"q8 q60 d2 async"}
else
    STEPS=${STEPS:-200} PRESET=${PRESET:-small} CASES=${CASES:-"q8 q60 d2 async"}
    export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${GPUS:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 0; }
    D2_GPUS=0,1
    [ "$GPUS" -lt 2 ] && D2_GPUS=0,0
fi
OUT=${OUT:-$(mktemp -d /tmp/stagetrace-whatif.XXXXXX)}
mkdir -p "$OUT"

# the trainer flags of a case, and the whatif flags that predict it from the base
trainer_flags() {
    local base="--device $DEVICE --preset $PRESET --steps $STEPS --queue-depth 2"
    [ "$DEVICE" = cuda ] && base="$base --target-gpus 0, --drafter-gpus 0,"
    case $1 in
    base) echo "$base" ;;
    q8) echo "$base --queue-depth 8" ;;
    q60) echo "$base --queue-depth 60" ;;
    d2) if [ "$DEVICE" = cuda ]; then echo "$base --drafter-gpus $D2_GPUS"; else echo "$base --drafter-gpus 2"; fi ;;
    async) echo "$base --postprocess async" ;;
    esac
}
whatif_flags() {
    case $1 in
    base) echo "" ;;
    q8) echo "--queue-depth 8" ;;
    q60) echo "--queue-depth 60" ;;
    d2) if [ "$DEVICE" = cuda ]; then echo "--drafter-gpus $D2_GPUS"; else echo "--drafters 2"; fi ;;
    async) echo "--postprocess async" ;;
    esac
}
describe() {
    case $1 in
    base) echo "replay (queue 2, 1 drafter, sync)" ;;
    q8) echo "queue depth 2 -> 8" ;;
    q60) echo "queue depth 2 -> 60" ;;
    d2) echo "drafters 1 -> 2" ;;
    async) echo "postprocess sync -> async" ;;
    esac
}
json_field() { # FILE CONFIG FIELD: a field of the whatif table's row
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for row in d["whatif"]:
    if row["config"] == sys.argv[2]:
        v = row[sys.argv[3]]
        print("nan" if v is None else v)
        break
' "$@"
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{if (NR%2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2}'; }

echo "bench_whatif: $DEVICE, preset $PRESET, $STEPS steps, $REPEATS repeats, cases: base $CASES"
echo "machine: $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); traces in $OUT"
for r in $(seq 1 "$REPEATS"); do
    # base first (the predictions need it), then the cases in an order rotated by one each repeat,
    # so that no case always runs right after the base
    read -r -a cases <<<"$CASES"
    order=base
    for i in "${!cases[@]}"; do order="$order ${cases[$(( (i + r - 1) % ${#cases[@]} ))]}"; done
    for c in $order; do
        t="$OUT/$c.$r.sqlite"
        # shellcheck disable=SC2046
        if ! "$BUILD/trainer" $(trainer_flags "$c") "${EXTRA[@]}" --trace "$t" --overwrite >"$OUT/$c.$r.log" 2>&1; then
            echo "bench_whatif: the trainer failed on $c (see $OUT/$c.$r.log)" >&2; exit 1
        fi
        "$BUILD/analyze" whatif --json "$t" >"$OUT/$c.$r.measured.json" || exit 1
        if [ "$c" = base ]; then
            for p in base $CASES; do
                # shellcheck disable=SC2046
                "$BUILD/analyze" whatif --json $(whatif_flags "$p") "$t" >"$OUT/pred.$p.$r.json" || exit 1
            done
        fi
    done
done

printf '\n%-34s %12s %25s %12s %25s %8s\n' case predicted "5-95% (median run)" measured "measured min-max" error
worst=0
for c in base $CASES; do
    preds=() p5s=() p95s=() meas=()
    row=changed; [ "$c" = base ] && row=replay
    for r in $(seq 1 "$REPEATS"); do
        preds+=("$(json_field "$OUT/pred.$c.$r.json" $row tokens_per_s)")
        p5s+=("$(json_field "$OUT/pred.$c.$r.json" $row p5_tokens_per_s)")
        p95s+=("$(json_field "$OUT/pred.$c.$r.json" $row p95_tokens_per_s)")
        meas+=("$(json_field "$OUT/$c.$r.measured.json" measured tokens_per_s)")
    done
    p=$(median "${preds[@]}") m=$(median "${meas[@]}")
    err=$(awk -v p="$p" -v m="$m" 'BEGIN{printf "%+.1f", (p-m)/m*100}')
    lo=$(printf '%s\n' "${meas[@]}" | sort -g | head -1) hi=$(printf '%s\n' "${meas[@]}" | sort -g | tail -1)
    printf '%-34s %12.1f %12.1f-%-12.1f %12.1f %12.1f-%-12.1f %7s%%\n' "$(describe "$c")" "$p" "$(median "${p5s[@]}")" \
        "$(median "${p95s[@]}")" "$m" "$lo" "$hi" "$err"
    echo "    predicted per base run: ${preds[*]}; measured per run: ${meas[*]}" >>"$OUT/detail.txt"
    worst=$(awk -v w="$worst" -v e="$err" 'BEGIN{e = e < 0 ? -e : e; print (e > w ? e : w)}')
done
echo "worst error: ${worst}% (per-run figures in $OUT/detail.txt)"
