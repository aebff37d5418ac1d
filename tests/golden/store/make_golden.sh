#!/usr/bin/env bash
# How tests/golden/store/ was written (once, by the build of commit 541d351,
# before the redesign; tests/test_golden_store.c reads it forever):
#   v2/  stat and ctx chunks in stream version 2 (an AVX2 CPU's choice then)
#   v1/  the same puts with SEQKV_SIMD=0: stat and ctx in version 1
# Each: tenant t_raw holds raw.txt at raw; a calibration from it; tenants
# t_stat, t_ctx, t_spec, t_full hold stat.txt ... full.txt at their level,
# and t_ctx also near.txt (ctx.txt with token 10 changed). Never rerun this
# to "fix" the test: the files are what an old store looks like.
# usage: make_golden.sh SEQKV BENCH_RANDMODEL OUTDIR
set -euo pipefail
S=$1 R=$2 out=$3
mkdir -p "$out"
cd "$out"
"$R" 32 64 2 4 2 rm.bin 42
"$S" model sample --model rm.bin --n-seq 6 --len 96 --seed 5 > tokens.txt
sed -n 4p tokens.txt | awk '{ $10 = ($10 + 7) % 500 + 2; print }' > near.txt
head -2 tokens.txt > raw.txt
n=3
for L in stat ctx spec full; do sed -n "${n}p" tokens.txt > $L.txt; n=$((n + 1)); done
rm tokens.txt
for v in v2 v1; do
    simd=$([ $v = v1 ] && echo 0 || echo "")
    export SEQKV_SIMD=$simd
    "$S" put --db $v --model rm.bin --tokens raw.txt --level raw --chunk 32 --tenant t_raw
    "$S" calibrate --db $v --profile rm
    for L in stat ctx spec full; do
        "$S" put --db $v --model rm.bin --tokens $L.txt --level $L --tenant t_$L
    done
    "$S" put --db $v --model rm.bin --tokens near.txt --level ctx --tenant t_ctx
    rm -f $v/lock.mdb $v/seqkv.lock
done
