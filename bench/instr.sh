#!/usr/bin/env bash
# Instructions per scalar of the coder's hot functions, counted by
# callgrind: the measure that stays put on a shared machine, where timings
# swing by 15% between identical builds. Runs bench_delta (N_SEQ
# sequences, ROUNDS rounds; the first round builds the tables, which the
# counts include) and prints each function's inclusive instructions
# divided by the scalars one side codes in all rounds; with INSTR_STEADY=1
# (and ROUNDS > 1) a second run of one round is taken off, which leaves
# the steady state of rounds 2..ROUNDS. VERSION is the stream version
# (bench_delta's; 0, the default, is the level's own).
# usage: bench/instr.sh BENCH_DELTA C.cal TEST.safetensors [stat|ctx] [N_SEQ] [ROUNDS] [VERSION]
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
bin=$1 cal=$2 test=$3 lvl=${4:-stat} nseq=${5:-8} rounds=${6:-2} ver=${7:-0}
command -v valgrind >/dev/null || { echo "instr.sh: needs valgrind (apt install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fns="skv_delta_encode skv_encoder_put_n skv_encoder_put_rows skv_encoder_finish skv_delta_decode skv_decoder_get_n skv_decoder_get_rows"
# count R: callgrind over R rounds; prints "scalars" then "function count" lines
count() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg$1" "$bin" "$cal" "$test" "$lvl" "$nseq" "$1" "$ver" \
        > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    # "bench_delta ctx: 8 sequences, 655360 scalars, best of 2: ..."
    sed -n 's/.* \([0-9][0-9]*\) scalars, best of.*/\1/p' "$tmp/out"
    callgrind_annotate --inclusive=yes "$tmp/cg$1" 2>/dev/null | awk -v fns="$fns" '
        BEGIN { split(fns, fs, " "); for (i in fs) want[fs[i]] = 1 }
        match($0, /:[A-Za-z_0-9]+ \[/) {
            f = substr($0, RSTART + 1, RLENGTH - 3)
            c = $1; gsub(",", "", c)
            if ((f in want) && !(f in ir)) ir[f] = c
        }
        END { for (f in want) print f, (f in ir) ? ir[f] : 0 }'
}
count "$rounds" > "$tmp/a"
scalars=$(head -n 1 "$tmp/a")
[ -n "$scalars" ] || { echo "instr.sh: no scalar count in bench_delta's output" >&2; exit 1; }
if [ "${INSTR_STEADY:-0}" = 1 ] && [ "$rounds" -gt 1 ]; then
    # steady state: rounds 2..R alone (the first round builds the tables)
    count 1 > "$tmp/b"
    what="steady state, rounds 2-$rounds"
    n=$((scalars * (rounds - 1)))
else
    : > "$tmp/b"
    what="inclusive"
    n=$((scalars * rounds))
fi
awk -v n="$n" -v lvl="$lvl" -v what="$what" -v fns="$fns" '
    FNR == 1 { next }
    FILENAME == ARGV[1] { a[$1] = $2; next }
    { b[$1] = $2 }
    END {
        printf "%s, %d scalars a side (instructions a scalar, %s):\n", lvl, n, what
        k = split(fns, fs, " ")
        for (i = 1; i <= k; i++)
            printf "  %-20s %7.1f\n", fs[i], (a[fs[i]] - b[fs[i]]) / n
    }' "$tmp/a" "$tmp/b"
