#!/usr/bin/env bash
# make bench: runs every benchmark in bench/ and prints its table. Figures
# worth keeping go to bench/RESULTS.md with date, machine and command.
set -euo pipefail
BUILD=${1:-build}
export ST_BENCH_TMP=${ST_BENCH_TMP:-$(mktemp -d /tmp/stagetrace-bench.XXXXXX)}
export ST_NVTX_INJECT=${ST_NVTX_INJECT:-$BUILD/tests/libnvtx_inject.so}
echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] || continue
    case "$(basename "$b")" in bench_gpu_*) continue;; esac
    echo; echo "== $(basename "$b")"
    "$b"
done
echo; echo "== bench_analyze.sh (BENCH_SIZES=${BENCH_SIZES:-10000000 100000000})"
bash bench/bench_analyze.sh "$BUILD"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo; echo "== run_gpu.sh"
    bash bench/run_gpu.sh "$BUILD"
fi
rm -rf "$ST_BENCH_TMP"
