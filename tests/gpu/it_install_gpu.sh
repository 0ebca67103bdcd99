#!/usr/bin/env bash
# tests/gpu/it_install_gpu.sh: a CUDA program built against an installed copy with the
# documented line (docs/tracer.md, "Installing"), on a machine with a GPU (run by
# tests/run_gpu.sh). make install into a private prefix; a C program that opens a trace,
# starts GPU capture with st_gpu_start, launches a small kernel (compiled by nvcc into an
# object) three times inside a stage, copies its result back and closes the trace, is linked
# with `cc gpu.c fill.o $(pkg-config --cflags --libs stagetrace-gpu)` plus the CUDA runtime,
# and again with --static; each runs with no LD_LIBRARY_PATH. Checks: st_gpu_start returns
# ST_OK, the trace holds GPU records, and `analyze gpu` counts the 3 kernels on device 0,
# a DtoH copy, and the kernels' launching thread and stage (main / launch).
# Prints "SKIP: ..." and exits 0 without a GPU or without nvcc.
set -euo pipefail
BUILD=${ST_BUILD:-${1:-build}}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU"; exit 0
fi
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "SKIP: no nvcc under $CUDA_HOME"; exit 0; }
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is needed"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 0; }
CUDA_LIB=$(ls -d "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib" 2>/dev/null | head -1)
tmp=$(mktemp -d "${ST_TEST_TMP:-/tmp}/it_install_gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
Q="$tmp/prefix"
make -s install BUILD="$BUILD" PREFIX="$Q" >/dev/null
grep -q -- '-lcupti' "$Q/lib/pkgconfig/stagetrace-gpu.pc" || { echo "FAIL: this build has no CUPTI (stagetrace-gpu.pc links no -lcupti)"; exit 1; }
export PKG_CONFIG_PATH="$Q/lib/pkgconfig"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR LD_LIBRARY_PATH
cd "$tmp"
cat > fill.cu <<'CU'
extern "C" __global__ void st_install_fill(float *x, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v + (float)i;
}
extern "C" int fill(float *x, int n, float v) {
    st_install_fill<<<(n + 255) / 256, 256>>>(x, n, v);
    return (int)cudaGetLastError();
}
CU
cat > gpu.c <<'C'
#include <stdio.h>
#include <cuda_runtime_api.h>
#include <stagetrace.h>
int fill(float *x, int n, float v);
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    st_options o; st_options_init(&o);
    o.path = argv[1]; o.overwrite = 1; o.nvtx = 0;
    st_trace *t;
    if (st_open(&t, &o) != ST_OK) { fprintf(stderr, "%s\n", st_last_error()); return 1; }
    int launch = st_stage_register(t, "launch", ST_WORK);
    if (st_thread_register(t, "main", "main", 0, 0) != 0) return 1;
    if (st_gpu_start(t) != ST_OK) { fprintf(stderr, "st_gpu_start: %s\n", st_last_error()); return 1; }
    enum { N = 1 << 20 };
    float *d, h[4];
    if (cudaMalloc((void **)&d, N * sizeof *d) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    for (int i = 0; i < 3; i++) {
        st_begin(launch);
        if (fill(d, N, (float)i)) { fprintf(stderr, "launch failed\n"); return 1; }
        st_end(launch);
    }
    if (cudaMemcpy(h, d + 1, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess || h[0] != 3.0f) {
        fprintf(stderr, "wrong result %g\n", h[0]); return 1;
    }
    cudaFree(d);
    return st_close(t) == ST_OK ? 0 : 1;
}
C
"$CUDA_HOME/bin/nvcc" -c fill.cu -o fill.o
for form in "" --static; do
    name=gpu${form:+_static}
    cc gpu.c fill.o $(pkg-config --cflags --libs $form stagetrace-gpu) -I"$CUDA_HOME/include" \
        -L"$CUDA_LIB" -Wl,-rpath,"$CUDA_LIB" -lcudart -lstdc++ -o $name ||
        { echo "FAIL: cc gpu.c fill.o \$(pkg-config --cflags --libs $form stagetrace-gpu) does not link"; exit 1; }
    ./$name $name.sqlite > $name.log 2>&1 || { echo "FAIL: $name: $(cat $name.log)"; exit 1; }
    n=$(sqlite3 $name.sqlite "select coalesce(sum(n_records), 0) from gpu_chunks")
    [ "$n" -ge 4 ] || { echo "FAIL: $name: $n GPU records in the trace, wanted the 3 kernels and a copy at least"; exit 1; }
    "$Q/bin/analyze" gpu --format json --top 0 $name.sqlite > $name.json
    python3 - $name $name.json <<'PY'
import json, sys
name, d = sys.argv[1], json.load(open(sys.argv[2]))
k = [r for r in d["kernels"] if "st_install_fill" in json.dumps(r)]
assert len(k) == 1 and k[0]["count"] == 3 and k[0]["device"] == 0, f"{name}: kernels {d['kernels']}"
assert any(c["direction"] == "DtoH" for c in d["copies"]), f"{name}: copies {d['copies']}"
s = [r for r in d["stages"] if r["thread"] == "main" and r["stage"] == "launch"]
assert s and s[0]["kernels"] == 3, f"{name}: stages {d['stages']}"
PY
    echo "$name: $n GPU records; analyze gpu: 3 st_install_fill kernels launched from main / launch, a DtoH copy"
done
echo "a CUDA program built with the documented stagetrace-gpu lines (and --static) against the install records its GPU activity"
