#!/usr/bin/env bash
# How tests/golden/store/current/ was written (once, by the build of the
# commit that added it; tests/test_golden_store.c reads it forever): a
# store of the current formats (store format 2, sealed chunk records of
# version 2, a calibration file of version 3, 1224-byte profile records;
# stat and ctx chunks in codec stream version 2, spec and full in
# version 1, fast chunks in SKVQ streams). rm.bin and the token files
# beside this script are its inputs: tenant t_raw holds raw.txt at raw; a
# calibration from it; tenants t_stat, t_ctx, t_spec, t_full, t_fast hold
# stat.txt ... fast.txt at their level, and t_ctx also near.txt (ctx.txt
# with token 10 changed). Never rerun this to "fix" the test: the files
# are what a store of these formats looks like. (Stores of older formats
# are refused: the test checks that too.)
# usage: make_golden.sh SEQKV OUTDIR   (run in tests/golden/store)
set -euo pipefail
S=$1 out=$2
"$S" put --db "$out" --model rm.bin --tokens raw.txt --level raw --chunk 32 --tenant t_raw
"$S" calibrate --db "$out" --profile rm
for L in stat ctx spec full fast; do
    "$S" put --db "$out" --model rm.bin --tokens $L.txt --level $L --tenant t_$L
done
"$S" put --db "$out" --model rm.bin --tokens near.txt --level ctx --tenant t_ctx
rm -f "$out/lock.mdb" "$out/seqkv.lock"
