#!/bin/sh
# gpu_check.sh [OUTDIR]: build the CUDA path without Meson (a GPU machine may
# lack LMDB, libsodium and Criterion; only nvcc and a C compiler are needed)
# and run tests/gpu/cast_exhaustive, which compares the GPU casts with the
# CPU's on all 2^32 float32 bit patterns. Exit 77 when there is no device.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/seqkv-gpu-check}
cc=${CC:-cc}
mkdir -p "$out"
# Same archs as meson.build; exact float ops on both sides.
gencode="-gencode=arch=compute_75,code=sm_75 -gencode=arch=compute_80,code=sm_80
 -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
objs=""
for f in error alloc dtype pool rng file dmath; do
    $cc -std=gnu11 -O2 -I"$root/include" -c "$root/base/$f.c" -o "$out/$f.o"
    objs="$objs $out/$f.o"
done
$cc -std=gnu11 -O2 -I"$root/include" -c "$root/tests/gpu/cast_exhaustive.c" -o "$out/check.o"
nvcc -O2 --fmad=false $gencode -I"$root/include" -c "$root/base/gpu_cuda.cu" -o "$out/gpu_cuda.o"
nvcc -o "$out/cast_exhaustive" "$out/check.o" "$out/gpu_cuda.o" $objs -lpthread -lm
exec "$out/cast_exhaustive"
