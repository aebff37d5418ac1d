#!/usr/bin/env bash
# The seqkv main job. Today (model engine + codec milestones): on the real
# model, check the engine against llama2.c's reference, sample token
# sequences, compute their KV caches in bf16 and fp8, calibrate the codec on
# one half and code the other half losslessly at every predictor level,
# against zstd, and print a summary.
# Model: $SEQKV_MODEL, else ../shared/models/stories260K.bin.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
seqkv_need_packages "${SEQKV_BUILD_PACKAGES[@]}"
if [ ! -f build-release/build.ninja ]; then
    meson setup build-release --buildtype=release -Dtests=false -Dcuda=auto >/dev/null
fi
meson compile -C build-release >/dev/null
seqkv=build-release/cli/seqkv
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
if [ ! -r "$model" ]; then
    echo "demo: no model at $model; set SEQKV_MODEL to a llama2.c .bin or a Hugging Face directory" >&2
    exit 1
fi
out=${SEQKV_DEMO_OUT:-demo-out}
mkdir -p "$out"
n_seq=${SEQKV_DEMO_SEQS:-32}
len=${SEQKV_DEMO_LEN:-256}

echo "== model"
"$seqkv" model info --model "$model"
ref=$(dirname "$model")/stories260K.greedy.txt
if [ "$(basename "$model")" = stories260K.bin ] && [ -r "$ref" ]; then
    "$seqkv" model greedy --model "$model" --steps 256 > "$out/greedy.txt"
    if cmp -s "$out/greedy.txt" "$ref"; then
        echo "greedy       256 ids identical to llama2.c's reference run"
    else
        echo "greedy       DIFFERS from llama2.c's reference ($ref)" >&2
        exit 1
    fi
fi

echo
echo "== sample $n_seq sequences x $len tokens (temperature 1.0, top-p 0.9, seed 1)"
t0=$(date +%s.%N)
"$seqkv" model sample --model "$model" --n-seq "$n_seq" --len "$len" --seed 1 --temp 1.0 --top-p 0.9 > "$out/tokens.txt"
t1=$(date +%s.%N)
distinct=$(tr ' ' '\n' < "$out/tokens.txt" | sort -u | wc -l)
printf 'sampled      %s sequences, %s distinct token ids, %.2f s\n' "$(wc -l < "$out/tokens.txt")" "$distinct" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')"

echo
echo "== KV caches"
for dt in bf16 fp8; do
    "$seqkv" model kv --model "$model" --tokens "$out/tokens.txt" --dtype "$dt" --out "$out/kv_$dt.safetensors" 2>&1 | tail -1
done
echo
echo "== codec: calibrate on $n_seq other sequences, code these at every level (bit-exact round trip checked)"
"$seqkv" model sample --model "$model" --n-seq "$n_seq" --len "$len" --seed 2 --temp 1.0 --top-p 0.9 > "$out/calib_tokens.txt"
"$seqkv" model kv --model "$model" --tokens "$out/calib_tokens.txt" --dtype bf16 --out "$out/calib_bf16.safetensors" --quiet
"$seqkv" codec calibrate --calib "$out/calib_bf16.safetensors" --model "$model" --out "$out/stories_bf16.cal" 2>&1 | tail -1
"$seqkv" codec bench --cal "$out/stories_bf16.cal" --test "$out/kv_bf16.safetensors" --model "$model" | tee "$out/codec_bench.txt"
"$seqkv" codec encode --cal "$out/stories_bf16.cal" --kv "$out/kv_bf16.safetensors" --out "$out/kv_bf16.spec.skv" --level spec --model "$model"
"$seqkv" codec decode --cal "$out/stories_bf16.cal" --in "$out/kv_bf16.spec.skv" --out "$out/kv_bf16.decoded.safetensors" --model "$model"

echo
echo "== summary"
tokens=$(awk '{n += NF} END {print n}' "$out/tokens.txt")
per_tok=$("$seqkv" model info --model "$model" --json | sed -n 's/.*"kv_scalars_per_token":\([0-9]*\).*/\1/p')
printf 'tokens       %s in %s sequences\n' "$tokens" "$n_seq"
printf 'KV scalars   %s (%s per token)\n' "$((tokens * per_tok))" "$per_tok"
for dt in bf16 fp8; do
    printf 'kv_%-9s %s bytes (%s)\n' "$dt" "$(stat -c %s "$out/kv_$dt.safetensors")" "$out/kv_$dt.safetensors"
done
printf 'coded (spec)  %s bytes (%s)\n' "$(stat -c %s "$out/kv_bf16.spec.skv")" "$out/kv_bf16.spec.skv"
echo "outputs in $out/ (tokens, KV files, calibration, coded file, codec_bench.txt)"
