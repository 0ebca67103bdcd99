#!/usr/bin/env bash
# Runs the GPU tests: every program in $BUILD/tests/gpu/ (each prints its cmocka summary, or a
# "SKIP:" line when the machine has no GPU or too few), then, when compute-sanitizer is found
# (on PATH, or in $CUDA_HOME/bin), the kernel test again under memcheck with its small sizes.
# test_trainer_gpu runs twice, its 1gpu and 2gpu groups (runs of the real trainer on one GPU,
# and split / NCCL runs on two), so that a 1-GPU machine reports the second as skipped.
# Prints one closing line "N passed, N failed" and exits non-zero when anything failed.
# NCCL_NVLS_ENABLE defaults to 0 (NVLink SHARP off).
set -u
BUILD=${1:-build}
export ST_BUILD=${ST_BUILD:-$BUILD}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
LOGS=${ST_TEST_TMP:-$(mktemp -d /tmp/stagetrace-gpu-tests.XXXXXX)}
mkdir -p "$LOGS"
passed=0 failed=0 skipped=0 failed_names=()

run_one() {
    local name=$1; shift
    local log="$LOGS/$name.log"
    local start=$EPOCHREALTIME
    "$@" >"$log" 2>&1
    local rc=$?
    local secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
    if [ $rc -eq 0 ] && grep -q '^SKIP:' "$log"; then
        skipped=$((skipped + 1))
        printf '  skip %-34s %6ss  %s\n' "$name" "$secs" "$(grep -m1 '^SKIP:' "$log")"
    elif [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        printf '  ok   %-34s %6ss  %s\n' "$name" "$secs" \
            "$(grep -E '^\[  PASSED  \]|ERROR SUMMARY' "$log" | tail -1)"
    else
        failed=$((failed + 1)); failed_names+=("$name")
        printf '  FAIL %-34s %6ss  (exit %d)\n' "$name" "$secs" "$rc"
        # the failing checks and cmocka's summary, then the end of the log
        grep -E '^\[  FAILED  \]|^\[  ERROR   \]|FAILED$|not written|out of tolerance' "$log" \
            | head -40 | sed 's/^/       | /'
        grep -E 'kernels_cuda:|=========  ' "$log" | head -20 | sed 's/^/       | /'
        echo '       | ...'
        tail -25 "$log" | sed 's/^/       | /'
    fi
}

echo "running GPU tests from $BUILD (logs in $LOGS)"
if ! ls "$BUILD"/tests/gpu/* >/dev/null 2>&1; then
    echo "no GPU test programs in $BUILD/tests/gpu" \
        "(make gpu-tests builds them; it needs the CUDA toolkit)"
    echo "0 passed, 1 failed"
    exit 1
fi
for t in "$BUILD"/tests/gpu/*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    if [ "$(basename "$t")" = test_trainer_gpu ]; then
        run_one "test_trainer_gpu 1gpu" "$t" 1gpu
        run_one "test_trainer_gpu 2gpu" "$t" 2gpu
    elif [ "$(basename "$t")" = test_cupti_gpu ]; then
        run_one "test_cupti_gpu" env -u STAGETRACE_GPU_RECORDS "$t"
        run_one "test_cupti_gpu all" env STAGETRACE_GPU_RECORDS=all "$t"
        run_one "test_cupti_gpu no-api" env STAGETRACE_GPU_RECORDS=kernel,memcpy,buffer_kb=1024,flush_ms=0,zeroed "$t"
    else
        run_one "$(basename "$t")" "$t"
    fi
done

run_one "trace_trainer_gpu (CUPTI)" bash "$(dirname "$0")/gpu/trace_trainer_gpu.sh" "$BUILD"
run_one "mpi_trainer_gpu (2 ranks)" bash "$(dirname "$0")/gpu/mpi_trainer_gpu.sh" "$BUILD"
run_one "it_install_gpu (pkg-config)" bash "$(dirname "$0")/gpu/it_install_gpu.sh" "$BUILD"

sanitizer=$(command -v compute-sanitizer 2>/dev/null || true)
if [ -z "$sanitizer" ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" ]; then
    sanitizer=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
fi
kernel_test="$BUILD/tests/gpu/test_kernels_gpu"
if [ -n "$sanitizer" ] && [ -x "$kernel_test" ]; then
    if grep -q '^SKIP:' "$LOGS/test_kernels_gpu.log" 2>/dev/null; then
        echo "  (memcheck not run: no GPU)"
    else
        run_one "test_kernels_gpu --small (memcheck)" \
            "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$kernel_test" --small
    fi
else
    echo "  (compute-sanitizer not found: memcheck run skipped)"
fi

echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
if [ $skipped -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ $failed -eq 0 ]
