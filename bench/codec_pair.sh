#!/usr/bin/env bash
# A/B timing of two seqkv builds' `codec bench` on a shared machine, as
# bench/pair.sh does for bench_delta: both run at the same time, one per
# core (swapped each round), on the same calibration and test sets, so
# that both see the same load; prints each round's one-thread encode and
# decode M scalars/s and the geometric mean of the new/old ratios over an
# even number of rounds. Absolute rates drop when both cores are busy;
# the ratios are the figure.
# usage: bench/codec_pair.sh OLD_SEQKV NEW_SEQKV CAL.safetensors TEST.safetensors [LEVEL] [ROUNDS] [MODEL]
set -euo pipefail
if [ $# -lt 4 ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
old=$1 new=$2 cal=$3 test=$4 lvl=${5:-ctx} rounds=${6:-6}
model=${7:-${SEQKV_MODEL:-../shared/models/stories260K.bin}}
rounds=$(((rounds + 1) / 2 * 2))
command -v taskset >/dev/null || { echo "codec_pair.sh: needs taskset (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "codec_pair.sh: needs two cores" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "encode decode" M/s of the level's line of codec bench --json
rates() {
    grep "\"level\":\"$lvl\"" "$1" | sed -n 's/.*"encode_msps":\([0-9.]*\),"decode_msps":\([0-9.]*\).*/\1 \2/p'
}
run() { taskset -c "$1" "$2" codec bench --calib "$cal" --test "$test" --model "$model" --level "$lvl" --json > "$3"; }
: > "$tmp/ratios"
for r in $(seq "$rounds"); do
    co=$((r % 2)) cn=$(((r + 1) % 2))
    run "$co" "$old" "$tmp/o" &
    po=$!
    run "$cn" "$new" "$tmp/n" &
    pn=$!
    wait "$po" "$pn"
    read -r oe od < <(rates "$tmp/o")
    read -r ne nd < <(rates "$tmp/n")
    echo "round $r $lvl: old encode $oe decode $od | new encode $ne decode $nd"
    echo "$oe $od $ne $nd" >> "$tmp/ratios"
done
awk -v l="$lvl" -v n="$rounds" '{ e += log($3 / $1); d += log($4 / $2) }
    END { printf "%s new/old, geometric mean of %d rounds: encode %.2fx, decode %.2fx\n", l, n, exp(e / NR), exp(d / NR) }' "$tmp/ratios"
