#!/usr/bin/env bash
# it_gpu_absent.sh: GPU tracing on a machine that has the CUDA toolkit (a CUDA build with
# CUPTI) but no usable GPU: no NVIDIA driver, or no device. CUPTI itself says only
# CUPTI_ERROR_UNKNOWN there; st_gpu_start must say what is wrong in words a user can act on,
# without the file:line of a CUPTI call (kept for genuine failures):
#   trainer: warning: no GPU activity in the trace: GPU tracing needs a usable CUDA device
#   and driver: no CUDA driver (libcuda.so.1 cannot be loaded: ...) (CUPTI: CUPTI_ERROR_UNKNOWN)
# and the trace it was opening stays a readable trace. Skipped where a GPU is present (the GPU
# tests cover that machine), or where the trainer was built without CUDA or CUPTI.
#
#   bash tests/it_gpu_absent.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
TR="$BUILD/trainer"
[ -x "$TR" ] || { echo "SKIP: $TR is not built"; exit 0; }
"$TR" --version | grep -q 'backends: cpu, cuda' ||
    { echo "SKIP: $TR was built without the CUDA backend"; exit 0; }
if [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: this machine has a GPU"; exit 0
fi

it_enter_tmp

run cuda "$TR" --device cuda --steps 1 --trace cuda.sqlite
grep -q 'GPU tracing needs a CUDA build with CUPTI' cuda.err &&
    { echo "SKIP: $TR was built without CUPTI"; exit 0; }
warning=$(grep '^trainer: warning: no GPU activity in the trace: ' cuda.err || true)
[ -n "$warning" ] || fail "no warning about GPU activity: $(cat cuda.err)"
if [ -e /dev/nvidiactl ] || ldconfig -p | grep -q 'libcuda\.so\.1 '; then
    # a driver without a device, or one that does not start
    echo "$warning" | grep -Eq 'GPU tracing needs a usable CUDA device and driver: (the CUDA driver does not start \(cuInit: CUDA_ERROR_[A-Z_]+\)|the CUDA driver sees no device) \(CUPTI: CUPTI_ERROR_[A-Z_]+\)$' ||
        fail "driver present, no device: $warning"
else
    echo "$warning" | grep -Eq '^trainer: warning: no GPU activity in the trace: GPU tracing needs a usable CUDA device and driver: no CUDA driver \(libcuda\.so\.1 cannot be loaded: .*\) \(CUPTI: CUPTI_ERROR_[A-Z_]+\)$' ||
        fail "no driver: $warning"
fi
grep -q 'gpu_cupti\.c:' cuda.err && fail "the message names a source line: $(cat cuda.err)"
ok
# the run itself fails on the backend (exit 1, its own line); the trace it opened is readable
[ $rc -eq 1 ] || fail "trainer --device cuda without a GPU: exit $rc"
grep -q '^trainer: cuda backend: --device cuda: no usable CUDA device' cuda.err ||
    fail "the backend's line: $(cat cuda.err)"
[ -f cuda.sqlite ] || fail "no trace file"
"$BUILD/analyze" info cuda.sqlite >info.out 2>info.err || fail "analyze info: $(cat info.err)"
ok
echo "it_gpu_absent: $n_checks checks passed"
