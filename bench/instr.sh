#!/usr/bin/env bash
# Instructions per scalar of the coder's hot functions, counted by
# callgrind: the measure that stays put on a shared machine, where timings
# swing by 15% between identical builds. Runs bench_delta (N_SEQ
# sequences, ROUNDS rounds; the first round builds the tables, which the
# counts include) and prints each function's inclusive instructions
# divided by the scalars one side codes in all rounds.
# usage: bench/instr.sh BENCH_DELTA C.cal TEST.safetensors [stat|ctx] [N_SEQ] [ROUNDS]
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
bin=$1 cal=$2 test=$3 lvl=${4:-stat} nseq=${5:-8} rounds=${6:-2}
command -v valgrind >/dev/null || { echo "instr.sh: needs valgrind (apt install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$bin" "$cal" "$test" "$lvl" "$nseq" "$rounds" \
    > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
# "bench_delta ctx: 8 sequences, 655360 scalars, best of 2: ..."
scalars=$(sed -n 's/.* \([0-9][0-9]*\) scalars, best of.*/\1/p' "$tmp/out")
[ -n "$scalars" ] || { echo "instr.sh: no scalar count in bench_delta's output" >&2; exit 1; }
callgrind_annotate --inclusive=yes "$tmp/cg" 2>/dev/null |
    awk -v n=$((scalars * rounds)) -v lvl="$lvl" '
        match($0, /:[A-Za-z_0-9]+ \[/) {
            f = substr($0, RSTART + 1, RLENGTH - 3)
            c = $1; gsub(",", "", c)
            if (!(f in ir)) ir[f] = c
        }
        END {
            printf "%s, %d scalars a side (instructions a scalar, inclusive):\n", lvl, n
            split("skv_delta_encode skv_encoder_put_n skv_encoder_finish skv_delta_decode skv_decoder_get_n", fs, " ")
            for (i = 1; i <= 5; i++)
                printf "  %-20s %7.1f\n", fs[i], ir[fs[i]] / n
        }'
