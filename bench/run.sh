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
    echo; echo "== $(basename "$b")"
    "$b"
done
rm -rf "$ST_BENCH_TMP"
