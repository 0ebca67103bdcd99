#!/usr/bin/env bash
# bench_gpu_capture.sh: what each part of the GPU capture costs, as paired ratios with a
# confidence interval. One program (the PyTorch sample or the trainer) runs in several
# variants per round; each round runs every variant once, in an order rotated by one
# place per round and reversed every other round, so that drift on a shared machine
# falls on all variants alike. A variant's figure per round is its steady rate (tokens/s
# after the warm-up: the sample's "steady" line; for the trainer, the step lines after
# the first WARM_LINES, total tokens over total time) divided by the round's `off` run.
# Printed per variant: the geometric mean of the paired ratios, its 95 % confidence
# interval (Student's t on the log ratios over the rounds), the median CPU per step where
# the program reports it, the trace's size, and every round's ratio.
#
# Variants (VARIANTS, space-separated):
#   off              no trace
#   ranges           stagetrace ranges and profile lines, no GPU capture
#   gpu:SPEC         also GPU activity, with STAGETRACE_GPU_RECORDS=SPEC (docs/tracer.md,
#                    "GPU activity"); gpu:default is the default record set
#   torch_profiler   (PROGRAM=torch) torch.profiler, CPU + CUDA activity, record_function
#                    per stage, its Chrome trace written
#
#   PROGRAM=torch PY=/opt/torch/.venv/bin/python bash bench/bench_gpu_capture.sh [BUILD]
#   PROGRAM=trainer bash bench/bench_gpu_capture.sh [BUILD]
#   env: ROUNDS=6 STEPS=300 VARIANTS="off ranges gpu:default gpu:kernel ..." ARGS="..."
#        PIN=2-7 runs every variant under `taskset -c 2-7` (same cores for all; says so)
set -euo pipefail
BUILD=${1:-build}
PROGRAM=${PROGRAM:-torch}
ROUNDS=${ROUNDS:-6}
DEVICE=${BENCH_DEVICE:-cuda}
PY=${PY:-python3}
PIN=${PIN:-}
PIN_CMD=()
[ -n "$PIN" ] && PIN_CMD=(taskset -c "$PIN")
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
case $PROGRAM in
torch)
    STEPS=${STEPS:-300}
    ARGS=${ARGS:-"--batch 8 --seq-len 256 --dim 256 --target-layers 6 --warmup-steps 30"}
    VARIANTS=${VARIANTS:-"off ranges gpu:default gpu:kernel gpu:kernel,memcpy,memset gpu:kernel,memcpy,memset,sync gpu:kernel,memcpy,memset,sync,runtime gpu:kernel,memcpy,memset,sync,runtime-launch,driver-launch torch_profiler"}
    export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c "import torch, stagetrace" || { echo "bench_gpu_capture: needs torch and $BUILD/python (make python)"; exit 1; }
    ;;
trainer)
    STEPS=${STEPS:-300}
    ARGS=${ARGS:-"--preset h200 --queue-depth 8 --postprocess async --log-every 10"}
    WARM_LINES=${WARM_LINES:-3}
    VARIANTS=${VARIANTS:-"off ranges gpu:default gpu:kernel gpu:kernel,memcpy,memset gpu:kernel,memcpy,memset,sync gpu:kernel,memcpy,memset,sync,runtime gpu:kernel,memcpy,memset,sync,runtime-launch,driver-launch"}
    [ -x "$BUILD/trainer" ] || { echo "bench_gpu_capture: no $BUILD/trainer"; exit 1; }
    ;;
*) echo "bench_gpu_capture: PROGRAM must be torch or trainer, not '$PROGRAM'"; exit 2 ;;
esac
read -r -a variants <<<"$VARIANTS"
DIR=$(mktemp -d "${ST_BENCH_TMP:-/tmp}/bench_gpu_capture.XXXXXX")
trap 'rm -rf "$DIR"' EXIT

run() { # variant index round: appends "round rate cpu_ms size" to $DIR/<index>.runs
    local v=$1 i=$2 r=$3 out="$DIR/run.$2.$3" spec="" args=()
    case $v in
    off) ;;
    ranges) args=(--trace "$out.sqlite" --profile-interval 10) ;;
    gpu:*) spec=${v#gpu:}; args=(--trace "$out.sqlite" --profile-interval 10) ;;
    torch_profiler) args=(--torch-profiler "$out.json") ;;
    *) echo "bench_gpu_capture: unknown variant '$v'" >&2; exit 2 ;;
    esac
    local rc=0
    if [ "$PROGRAM" = torch ]; then
        [ -n "$spec" ] && args+=(--trace-gpu)
        # shellcheck disable=SC2086
        "${PIN_CMD[@]}" env ${spec:+STAGETRACE_GPU_RECORDS=$spec} "$PY" samples/python/dflash_torch.py --device "$DEVICE" \
            --steps "$STEPS" $ARGS "${args[@]}" >"$out.log" 2>&1 || rc=$?
    else
        if [ -n "$spec" ]; then args+=(--trace-gpu on); elif [ "$v" = ranges ]; then args+=(--trace-gpu off); fi
        # shellcheck disable=SC2086
        "${PIN_CMD[@]}" env ${spec:+STAGETRACE_GPU_RECORDS=$spec} "$BUILD/trainer" --device "$DEVICE" --steps "$STEPS" $ARGS \
            "${args[@]}" >"$out.log" 2>&1 || rc=$?
    fi
    if [ $rc -ne 0 ]; then
        echo "bench_gpu_capture: the $v run failed (exit $rc):" >&2
        tail -20 "$out.log" >&2
        exit 1
    fi
    local rate cpu=nan size=0 f
    if [ "$PROGRAM" = torch ]; then
        rate=$(sed -n 's/.*steady \([0-9.]*\) tokens\/s.*/\1/p' "$out.log")
        cpu=$(sed -n 's/.* \([0-9.]*\) ms CPU (process) per step.*/\1/p' "$out.log")
    else
        # step lines after the warm-up: total tokens over total time = harmonic mean of equal windows
        rate=$(awk -v w="$WARM_LINES" '/^step [0-9]+ loss/ { for (k = 1; k < NF; k++) if ($k == "tok/s") { n++; if (n > w && $(k+1) > 0) { m++; s += 1 / $(k+1) } } }
               END { if (m) printf "%.1f", m / s }' "$out.log")
    fi
    [ -n "$rate" ] || { echo "bench_gpu_capture: no rate in the $v run's output:" >&2; tail -5 "$out.log" >&2; exit 1; }
    for f in "$out.sqlite" "$out.json"; do
        if [ -f "$f" ]; then size=$(stat -c %s "$f"); rm -f "$f" "$f-wal" "$f-shm"; fi
    done
    echo "$r $rate ${cpu:-nan} $size" >>"$DIR/$i.runs"
}

n=${#variants[@]}
start=$(date +%s)
for r in $(seq 0 $((ROUNDS - 1))); do
    order=()
    for k in $(seq 0 $((n - 1))); do order+=($(((k + r) % n))); done
    if [ $((r % 2)) -eq 1 ]; then
        rev=()
        for ((k = n - 1; k >= 0; k--)); do rev+=("${order[k]}"); done
        order=("${rev[@]}")
    fi
    for i in "${order[@]}"; do run "${variants[i]}" "$i" "$r"; done
done
secs=$(($(date +%s) - start))

"${STATS_PY:-python3}" - "$DIR" "$PROGRAM" "$STEPS" "$ROUNDS" "$secs" "$ARGS${PIN:+; pinned to cores $PIN}" "${variants[@]}" <<'EOF'
import math, statistics, sys
d, program, steps, rounds, secs, args = sys.argv[1:7]
variants = sys.argv[7:]
runs = []
for i in range(len(variants)):
    rows = {}
    for line in open("%s/%d.runs" % (d, i)):
        r, rate, cpu, size = line.split()
        rows[int(r)] = (float(rate), float(cpu), int(size))
    runs.append(rows)
off = variants.index("off") if "off" in variants else 0
# Student's t, two-sided 95 %, by degrees of freedom
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
     12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
def t95(df):
    for k in sorted(T):
        if df <= k: return T[k]
    return 1.96
print("%s, %s steps, %s; %s rounds, order rotated and reversed per round; %s s" % (program, steps, args, rounds, secs))
print("%-62s %11s %7s %17s %9s %8s   %s" % ("variant", "tokens/s", "ratio", "95% CI", "CPU ms/st", "trace MB", "each round"))
for i, v in enumerate(variants):
    common = sorted(set(runs[i]) & set(runs[off]))
    logs = [math.log(runs[i][r][0] / runs[off][r][0]) for r in common]
    g = math.exp(statistics.mean(logs))
    if len(logs) > 1:
        h = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        ci = "%.4f-%.4f" % (math.exp(statistics.mean(logs) - h), math.exp(statistics.mean(logs) + h))
    else:
        ci = "-"
    med = statistics.median(x[0] for x in runs[i].values())
    cpus = [x[1] for x in runs[i].values() if not math.isnan(x[1])]
    cpu = "%.3f" % statistics.median(cpus) if cpus else "-"
    size = max(x[2] for x in runs[i].values()) / 1e6
    each = " ".join("%.3f" % math.exp(l) for l in logs)
    print("%-62s %11.1f %7.4f %17s %9s %8.2f   %s" % (v, med, g, ci, cpu, size, each))
EOF
