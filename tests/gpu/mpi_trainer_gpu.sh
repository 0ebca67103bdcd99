#!/usr/bin/env bash
# tests/gpu/mpi_trainer_gpu.sh: the trainer as two processes on GPUs (run by tests/run_gpu.sh;
# needs a GPU, mpirun, and a CUDA build with MPI). One target rank and one drafter rank on GPU 0
# (two ranks on one GPU: NCCL cannot pair them, so the channel is host-staged MPI), the small
# preset, traced with GPU activity. Checks: both ranks finish; two complete traces of one run,
# device 0 in meta, GPU records in each; the loss falls; `analyze info` and `analyze bottleneck`
# read the two files as one rank set; with the drafter slowed on purpose, bottleneck names the
# drafter role. Prints the tokens/s of the two-process run and of the single-process run with
# target and drafter co-located on GPU 0, for the record. Prints "SKIP: ..." and exits 0
# without a GPU, mpirun or MPI in the build.
set -u
BUILD=${ST_BUILD:-${1:-build}}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU"; exit 0
fi
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 0; }
"$BUILD/trainer" --version | grep -q 'multi-process: mpi' || { echo "SKIP: trainer built without MPI"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
TMP=$(mktemp -d /tmp/stagetrace-gpu-mpi.XXXXXX)
fail() { echo "FAILED: $*"; exit 1; }
meta() { "$BUILD/analyze" sql --format csv "$1" "select value from meta where key = '$2'" | tail -n +2; }
args=(--device cuda --preset small --steps 60 --log-every 20 --queue-depth 4)

timeout 300 mpirun --oversubscribe -np 2 "$BUILD/trainer" "${args[@]}" --layout targets=1,drafters=1 \
    --trace "$TMP/two.sqlite" >"$TMP/two.log" 2>&1 || { tail -30 "$TMP/two.log"; fail "2 processes on GPU 0"; }
cat "$TMP/two.log"
run_id=$(meta "$TMP/two.rank0.sqlite" run_id)
for r in 0 1; do
    f=$TMP/two.rank$r.sqlite
    [ "$(meta "$f" status)" = complete ] || fail "$f: status $(meta "$f" status)"
    [ "$(meta "$f" run_id)" = "$run_id" ] || fail "$f: run_id differs from rank 0's"
    [ "$(meta "$f" device)" = 0 ] || fail "$f: device $(meta "$f" device)"
    n=$("$BUILD/analyze" sql "$f" "select count(*) from gpu" | tail -1 | tr -d ' ')
    [ "${n:-0}" -gt 0 ] || fail "$f: no GPU records"
    echo "rank $r: $n GPU records, clock offset $(meta "$f" clock_offset_ns) ns +- $(meta "$f" clock_uncertainty_ns)"
done
read -r first last < <(awk '$1 == "step" { if (!f) f = $4; l = $4 } END { print f, l }' "$TMP/two.log")
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "the loss did not fall: $first -> $last"
"$BUILD/analyze" info "$TMP"/two.rank*.sqlite >"$TMP/info.txt" 2>&1 || { cat "$TMP/info.txt"; fail "analyze info on the set"; }
"$BUILD/analyze" bottleneck "$TMP"/two.rank*.sqlite >"$TMP/bn.txt" 2>&1 || { cat "$TMP/bn.txt"; fail "analyze bottleneck on the set"; }
head -12 "$TMP/bn.txt"

timeout 300 mpirun --oversubscribe -np 2 "$BUILD/trainer" "${args[@]}" --layout targets=1,drafters=1 \
    --drafter-delay-us 20000 --trace "$TMP/slow.sqlite" >"$TMP/slow.log" 2>&1 ||
    { tail -30 "$TMP/slow.log"; fail "2 processes, slow drafter"; }
"$BUILD/analyze" bottleneck "$TMP"/slow.rank*.sqlite >"$TMP/slow.txt" 2>&1 || { cat "$TMP/slow.txt"; fail "bottleneck, slow drafter"; }
grep -m1 '^Bottleneck:' "$TMP/slow.txt"
grep -q '^Bottleneck: drafter' "$TMP/slow.txt" || fail "slow drafter: $(grep -m1 '^Bottleneck' "$TMP/slow.txt")"

"$BUILD/trainer" "${args[@]}" --target-gpus 0, --drafter-gpus 0, >"$TMP/one.log" 2>&1 || { tail "$TMP/one.log"; fail "single process"; }
tps() { awk '$1 == "step" { for (i = 1; i < NF; i++) if ($i == "tok/s") v = $(i + 1) } END { print v }' "$1"; }
echo "tokens/s (last step line): two processes on GPU 0 $(tps "$TMP/two.log"), one process $(tps "$TMP/one.log")"
echo "[  PASSED  ] mpi trainer gpu checks"
rm -rf "$TMP"
