#!/usr/bin/env bash
# The seqkv main job: build, check the engine against llama2.c's reference
# run, then `seqkv demo` -- a server on a temporary socket and store, a
# multi-tenant chat workload made with the real model driven through the C
# client, every GET checked bit-exact, and a summary table with a chart of
# bits per scalar by layer and level (demo-out/demo_bits.png).
# Model: $SEQKV_MODEL, else ../shared/models/stories260K.bin, else a seeded
# synthetic model (with a warning). Extra arguments go to `seqkv demo`
# (e.g. --tenants 8 --sessions 32 --turns 4 --level spec).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
seqkv_need_packages "${SEQKV_BUILD_PACKAGES[@]}" "${SEQKV_DEMO_PACKAGES[@]}"
if [ ! -f build-release/build.ninja ]; then
    meson setup build-release --buildtype=release -Dtests=false -Dcuda=auto >/dev/null
fi
meson compile -C build-release >/dev/null
seqkv=build-release/cli/seqkv
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
out=${SEQKV_DEMO_OUT:-demo-out}
mkdir -p "$out"

if [ -r "$model" ]; then
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
    export SEQKV_MODEL=$model
fi
"$seqkv" demo --out "$out" "$@"
