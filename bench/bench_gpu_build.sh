#!/usr/bin/env bash
# Builds the GPU benchmark programs bench/bench_gpu_*.cu into $BUILD/bench/ with nvcc, linked
# with the trainer's objects (everything of build/trainer but main.o and pipeline.o) and the
# kernels. Needs `make` to have built the CUDA objects first (it says so otherwise). Rebuilds
# only what is older than its source or the trainer. bench/run_gpu.sh calls it when nvcc is
# available; the binaries can also be built on one machine and carried with build/.
set -eu
BUILD=${1:-build}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
NVCC=$CUDA_HOME/bin/nvcc
if [ ! -x "$NVCC" ]; then
    echo "bench_gpu_build: no nvcc under CUDA_HOME=$CUDA_HOME" >&2
    exit 1
fi
LIBDIR=$CUDA_HOME/lib64
[ -d "$LIBDIR" ] || LIBDIR=$CUDA_HOME/targets/x86_64-linux/lib
objs=()
for o in backend backend_cpu config data model queue; do
    objs+=("$BUILD/obj/trainer/$o.o")
done
for o in "$BUILD"/obj/trainer/*.cu.o; do
    [ -e "$o" ] && objs+=("$o")
done
for f in "${objs[@]}" "$BUILD/libkernels_cuda.a" "$BUILD/libkernels.a" "$BUILD/libstagetrace.a"; do
    if [ ! -e "$f" ]; then
        echo "bench_gpu_build: $f is missing: run make first (with the CUDA toolkit)" >&2
        exit 1
    fi
done
mkdir -p "$BUILD/bench"
for src in bench/bench_gpu_*.cu; do
    [ -e "$src" ] || continue
    bin=$BUILD/bench/$(basename "$src" .cu)
    if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$BUILD/trainer" ]; then
        continue
    fi
    echo "$NVCC -O3 -arch=sm_90 ... $src -> $bin"
    "$NVCC" -O3 -arch=sm_90 -std=c++17 -Xcompiler -Wall -lineinfo -Itracer/include -Itracer -Ikernels -Itrainer \
        "$src" -o "$bin" "${objs[@]}" "$BUILD/libkernels_cuda.a" "$BUILD/libkernels.a" \
        "$BUILD/libstagetrace.a" -L"$LIBDIR" -Xlinker -rpath="$LIBDIR" -lcublas -lcublasLt \
        -lnccl $(sed -n 's/^Libs.private: //p' "$BUILD/stagetrace.pc")
done
