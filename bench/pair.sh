#!/usr/bin/env bash
# A/B timing of two bench_delta builds on a shared machine: both run at
# the same time, one per core (swapped each round), so that both see the
# same load (each at the level's default stream version); prints each
# round's M scalars/s and the geometric mean of the
# new/old ratios over an even number of rounds (a core faster than the
# other then favours each build equally often). Absolute rates drop when
# both cores are busy; the ratios are the figure. With --codec, two seqkv
# builds' `codec bench` (one thread's rates; CAL is then the calibration
# KV file, any level; SEQKV_MODEL or ../shared's stories260K the model).
# usage: bench/pair.sh [--codec] OLD NEW CAL TEST.safetensors [LEVEL] [ROUNDS]
#   OLD, NEW: bench_delta builds and C.cal (stat|ctx), or with --codec
#   seqkv builds and CAL.safetensors
set -euo pipefail
codec=0
if [ "${1:-}" = --codec ]; then
    codec=1
    shift
fi
if [ $# -lt 4 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
old=$1 new=$2 cal=$3 test=$4 lvl=${5:-stat} rounds=${6:-6}
model=${SEQKV_MODEL:-../shared/models/stories260K.bin}
rounds=$(((rounds + 1) / 2 * 2))
command -v taskset >/dev/null || { echo "pair.sh: needs taskset (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "pair.sh: needs two cores" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# build $2 on core $1 into file $3
run() {
    if [ "$codec" = 1 ]; then
        taskset -c "$1" "$2" codec bench --calib "$cal" --test "$test" --model "$model" --level "$lvl" --json > "$3"
    else
        taskset -c "$1" "$2" "$cal" "$test" "$lvl" 4 6 0 > "$3"
    fi
}
# "encode decode" M scalars/s of a run's output
rate() {
    if [ "$codec" = 1 ]; then
        grep "\"level\":\"$lvl\"" "$1" | sed -n 's/.*"encode_msps":\([0-9.]*\),"decode_msps":\([0-9.]*\).*/\1 \2/p'
    else
        sed -n 's/.*encode \([0-9.]*\) M\/s, decode \([0-9.]*\) M\/s.*/\1 \2/p' "$1"
    fi
}
: > "$tmp/ratios"
for r in $(seq "$rounds"); do
    co=$((r % 2)) cn=$(((r + 1) % 2))
    run "$co" "$old" "$tmp/o" &
    po=$!
    run "$cn" "$new" "$tmp/n" &
    pn=$!
    wait "$po" "$pn"
    read -r oe od < <(rate "$tmp/o")
    read -r ne nd < <(rate "$tmp/n")
    echo "round $r $lvl: old encode $oe decode $od | new encode $ne decode $nd"
    echo "$oe $od $ne $nd" >> "$tmp/ratios"
done
awk -v lvl="$lvl" '{ e += log($3 / $1); d += log($4 / $2) }
    END { printf "%s new/old, geometric mean of %d rounds: encode %.2fx, decode %.2fx\n", lvl, NR,
                 exp(e / NR), exp(d / NR) }' "$tmp/ratios"
