#!/usr/bin/env bash
# The codec's figures on stories260K: a calibration set of 32 sampled
# sequences and a disjoint test set of 32 x 256 tokens (temperature 1.0,
# top-p 0.9, seeds 100 and 200), every level, against zstd -3/-19 on raw
# bytes and byte planes in the same run. usage:
# bench/codec_bench.sh [BUILD_DIR] [DTYPE] [--json]
set -euo pipefail
build=${1:-build}
dt=${2:-bf16}
shift $(( $# > 2 ? 2 : $# )) || true
seqkv=$build/cli/seqkv
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$seqkv" model sample --model "$model" --n-seq 32 --len 256 --seed 100 > "$tmp/cal.txt"
"$seqkv" model sample --model "$model" --n-seq 32 --len 256 --seed 200 > "$tmp/test.txt"
"$seqkv" model kv --model "$model" --tokens "$tmp/cal.txt" --dtype "$dt" --out "$tmp/cal.safetensors" --quiet
"$seqkv" model kv --model "$model" --tokens "$tmp/test.txt" --dtype "$dt" --out "$tmp/test.safetensors" --quiet
"$seqkv" codec bench --calib "$tmp/cal.safetensors" --test "$tmp/test.safetensors" --model "$model" "$@"
