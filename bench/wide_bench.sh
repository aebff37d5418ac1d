#!/usr/bin/env bash
# The coder on rows as wide as a real model's: a random-weight llama2.c
# model (bench_randmodel; default dim 512, ffn 1376, 4 layers, 8 heads and
# 8 kv heads of 64, so rows of 512 scalars against stories260K's 32), N
# calibration and N disjoint test sequences of 256 sampled tokens, its bf16
# KV, a calibration, then bench_delta at stat and ctx (with --instr also
# instructions a scalar in steady state: bench/instr.sh with INSTR_STEADY=1
# over 3 rounds of 1 sequence, needs valgrind). Random weights make
# noise-like KV, so its bits say little; the rates and instructions a
# scalar are the point. usage: bench/wide_bench.sh [BUILD_DIR] [N] [--instr]
#   SHAPE="DIM HIDDEN LAYERS HEADS KV_HEADS" overrides the shape.
set -euo pipefail
build=${1:-build}
n=${2:-8}
instr=${3:-}
shape=${SHAPE:-512 1376 4 8 8}
seqkv=$build/cli/seqkv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"$build/bench/bench_randmodel" $shape "$tmp/m.bin"
"$seqkv" model sample --model "$tmp/m.bin" --n-seq "$n" --len 256 --seed 100 > "$tmp/cal.txt"
"$seqkv" model sample --model "$tmp/m.bin" --n-seq "$n" --len 256 --seed 200 > "$tmp/test.txt"
"$seqkv" model kv --model "$tmp/m.bin" --tokens "$tmp/cal.txt" --dtype bf16 --out "$tmp/cal.safetensors" --quiet
"$seqkv" model kv --model "$tmp/m.bin" --tokens "$tmp/test.txt" --dtype bf16 --out "$tmp/test.safetensors" --quiet
"$seqkv" codec calibrate --calib "$tmp/cal.safetensors" --out "$tmp/c.cal"
for lv in stat ctx; do
    "$build/bench/bench_delta" "$tmp/c.cal" "$tmp/test.safetensors" "$lv" 2 5
    if [ "$instr" = --instr ]; then
        INSTR_STEADY=1 "$(dirname "$0")/instr.sh" "$build/bench/bench_delta" "$tmp/c.cal" \
            "$tmp/test.safetensors" "$lv" 1 3
    fi
done
