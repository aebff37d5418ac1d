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
# The archs meson.build lists; exact float ops on both sides, as the
# project builds (no contraction into FMAs).
gencode=""
for sm in 75 80 86 89 90; do
    gencode="$gencode -gencode=arch=compute_$sm,code=sm_$sm"
done
gencode="$gencode -gencode=arch=compute_90,code=compute_90"
cflags="-std=gnu11 -O2 -ffp-contract=off -fno-fast-math"
objs=""
for src in "$root"/base/*.c; do
    f=$(basename "$src" .c)
    [ "$f" = gpu_none ] && continue # the stand-in for builds without CUDA
    $cc $cflags -I"$root/include" -c "$src" -o "$out/$f.o"
    objs="$objs $out/$f.o"
done
$cc $cflags -I"$root/include" -c "$root/tests/gpu/cast_exhaustive.c" -o "$out/check.o"
nvcc -O2 --fmad=false $gencode -I"$root/include" -c "$root/base/gpu_cuda.cu" -o "$out/gpu_cuda.o"
nvcc -o "$out/cast_exhaustive" "$out/check.o" "$out/gpu_cuda.o" $objs -lpthread -lm
exec "$out/cast_exhaustive"
