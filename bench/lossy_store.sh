#!/usr/bin/env bash
# The lossy tier in the store against the exact ctx level, same run:
# 32 sampled stories260K sequences of 256 tokens stored (raw) and
# calibrated on, then 32 others put and got back; the stored ratio of
# each, and the wall time of the put and the get (one CLI process each:
# open, model load and all). usage: bench/lossy_store.sh [BUILD_DIR] [LEVEL]
set -euo pipefail
build=$(cd "${1:-build-release}" && pwd)
level=${2:-q3}
seqkv=$build/cli/seqkv
model=$(cd "$(dirname "${SEQKV_MODEL:-../shared/models/stories260K.bin}")" && pwd)/$(basename "${SEQKV_MODEL:-stories260K.bin}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
"$seqkv" model sample --model "$model" --n-seq 32 --len 256 --seed 5 > cal.txt
"$seqkv" model sample --model "$model" --n-seq 32 --len 256 --seed 9 > test.txt
"$seqkv" model kv --model "$model" --tokens test.txt --dtype bf16 --out test.st --quiet
for mode in ctx "$level"; do
    rm -rf db
    extra=()
    [ "$mode" != ctx ] && extra=(--lossy "$mode" --lossy-recent -1)
    "$seqkv" profile set --db db p --model "$model" "${extra[@]}" --auto-calibrate 0 > /dev/null 2>&1
    "$seqkv" put --db db --profile p --model "$model" --tokens cal.txt --quiet
    "$seqkv" calibrate --db db --profile p > /dev/null 2>&1
    t0=$(date +%s.%N)
    "$seqkv" put --db db --profile p --kv test.st --quiet
    t1=$(date +%s.%N)
    get=(--out out.st --quiet)
    [ "$mode" != ctx ] && get+=(--lossy on)
    "$seqkv" get --db db --profile p --tokens test.txt "${get[@]}"
    t2=$(date +%s.%N)
    row=$("$seqkv" stats --db db --json | /usr/bin/python3 -c "
import json, sys
s = json.load(sys.stdin)
r = s['lossy'] if '$mode' != 'ctx' else s['levels']['ctx']
print('%.3fx (%.2f bits a scalar)' % (r['raw_bytes'] / r['stored_bytes'], 16.0 * r['stored_bytes'] / r['raw_bytes']))")
    printf '%-6s stored %s; put %.2f s, get %.2f s\n' "$mode" "$row" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
done
