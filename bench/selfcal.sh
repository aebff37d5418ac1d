#!/usr/bin/env bash
# Compression out of the box (issue 25), stories260K, chunks of 256:
# 1. a fresh store, 64 sampled 256-token sequences put with no calibrate
#    command: the whole store's ratio (raw bf16 / stored) after the put
#    that calibrates the profile itself and re-codes what it stored raw;
# 2. an agent appending 2 tokens a put (50 puts, 200 -> 298 tokens) to that
#    calibrated profile: records and ratio before and after seqkv compact,
#    against one put of the whole sequence into the same store.
# usage: bench/selfcal.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
seqkv=$build/cli/seqkv
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stat() { "$seqkv" stats --db "$1" ${2:+--tenant "$2"} --json |
    "$py" -c 'import json,sys; d=json.load(sys.stdin); print(d["chunks"], d["stored_bytes"], "%.3f" % d["ratio"], d["levels"]["raw"]["tokens"])'; }
"$seqkv" model sample --model "$model" --n-seq 64 --len 256 --seed 300 > "$tmp/s64.txt"
t0=$(date +%s.%N)
"$seqkv" put --db "$tmp/db" --model "$model" --tokens "$tmp/s64.txt" 2> "$tmp/put.log"
t1=$(date +%s.%N)
grep -E "calibrated itself|coded again" "$tmp/put.log" | sed 's/^/  /'
read -r ch by ra rawt <<< "$(stat "$tmp/db")"
echo "fresh store, 64 x 256 tokens, no calibrate command: ratio ${ra}x over the whole store ($ch records, $by bytes, $rawt tokens left raw; put took $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s)"
"$seqkv" model sample --model "$model" --n-seq 1 --len 298 --seed 77 > "$tmp/one.txt"
"$py" -c "
import sys
t = open('$tmp/one.txt').read().split()
open('$tmp/app.txt', 'w').write(''.join(' '.join(t[:200 + 2 * k]) + '\n' for k in range(50)))
open('$tmp/whole.txt', 'w').write(' '.join(t[:298]) + '\n')"
cp -r "$tmp/db" "$tmp/one"
"$seqkv" put --db "$tmp/db" --tenant agent --model "$model" --tokens "$tmp/app.txt" --quiet
read -r ch0 by0 ra0 _ <<< "$(stat "$tmp/db" agent)"
"$seqkv" compact --db "$tmp/db" 2>&1 | tail -1 | sed 's/^/  /'
read -r ch1 by1 ra1 _ <<< "$(stat "$tmp/db" agent)"
"$seqkv" put --db "$tmp/one" --tenant agent --model "$model" --tokens "$tmp/whole.txt" --quiet
read -r ch2 by2 ra2 _ <<< "$(stat "$tmp/one" agent)"
echo "appends (50 puts of +2 tokens): $ch0 records, ${ra0}x; after compact: $ch1 records, ${ra1}x, $by1 bytes; one put of the whole: $ch2 records, ${ra2}x, $by2 bytes ($(awk "BEGIN { printf \"%.3f\", $by1 / $by2 }")x its bytes)"
