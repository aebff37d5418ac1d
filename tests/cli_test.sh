#!/usr/bin/env bash
# End-to-end checks of the seqkv binary: --help everywhere, usage errors,
# and (when ../shared/models is present) greedy output byte-exact against
# llama2.c's reference, sample -> kv -> a valid KV file, convert -> the
# converted checkpoint gives the same greedy ids.
# usage: cli_test.sh SEQKV_BINARY SOURCE_ROOT
set -u
bin=$1
root=$2
models=${SEQKV_SHARED_MODELS:-$root/../shared/models}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
expect_rc() { # rc, description, command...
    local want=$1 what=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else bad "$what: exit $rc, wanted $want: $(head -c 300 "$tmp/err")"; fi
}

expect_rc 0 "top-level --help" "$bin" --help
grep -q "model kv" "$tmp/out" || bad "top-level help lists model kv"
for sub in calibrate encode decode bench; do
    expect_rc 0 "codec $sub --help" "$bin" codec "$sub" --help
    grep -q "usage: seqkv codec $sub" "$tmp/out" || bad "codec $sub --help prints its usage"
done
expect_rc 2 "codec bench without --test" "$bin" codec bench --calib x
expect_rc 2 "codec encode with a bad level" "$bin" codec encode --cal a --kv b --out c --level turbo
for sub in info greedy sample kv convert; do
    expect_rc 0 "model $sub --help" "$bin" model "$sub" --help
    grep -q "usage: seqkv model $sub" "$tmp/out" || bad "model $sub --help prints its usage"
done
expect_rc 2 "no command" "$bin"
expect_rc 2 "unknown command" "$bin" frobnicate
expect_rc 2 "unknown subcommand" "$bin" model frobnicate
expect_rc 2 "missing --model" "$bin" model info
expect_rc 2 "unknown option" "$bin" model info --model x --bogus
expect_rc 2 "option of another subcommand" "$bin" model info --model x --steps 3
expect_rc 2 "bad number" "$bin" model greedy --model x --steps 12abc
expect_rc 2 "sample without --seed" "$bin" model sample --model x --n-seq 2 --len 3
expect_rc 2 "bad dtype" "$bin" model kv --model x --tokens y --dtype int4 --out z
expect_rc 1 "missing model file" "$bin" model info --model "$tmp/nope.bin"
grep -q "nope.bin" "$tmp/err" || bad "error names the missing file"

if [ -r "$models/stories260K.bin" ]; then
    m=$models/stories260K.bin
    expect_rc 0 "greedy" "$bin" model greedy --model "$m" --steps 256
    cmp -s "$tmp/out" "$models/stories260K.greedy.txt" && ok || bad "greedy output differs from stories260K.greedy.txt"
    expect_rc 0 "sample" "$bin" model sample --model "$m" --n-seq 3 --len 40 --seed 7
    cp "$tmp/out" "$tmp/toks.txt"
    [ "$(wc -l < "$tmp/toks.txt")" -eq 3 ] && ok || bad "sample prints 3 lines"
    [ "$(awk '{print NF}' "$tmp/toks.txt" | sort -u)" = "40" ] && ok || bad "sample lines have 40 ids"
    [ "$(awk '{print $1}' "$tmp/toks.txt" | sort -u)" = "1" ] && ok || bad "sample lines start with BOS"
    expect_rc 0 "sample again" "$bin" model sample --model "$m" --n-seq 1 --len 40 --seed 7 --threads 1
    [ "$(head -1 "$tmp/toks.txt")" = "$(cat "$tmp/out")" ] && ok || bad "sequence 0 does not depend on --n-seq or threads"
    expect_rc 0 "kv" "$bin" model kv --model "$m" --tokens "$tmp/toks.txt" --dtype bf16 --out "$tmp/kv.safetensors"
    # 3 sequences x 40 tokens x 320 scalars x 2 bytes, plus header and tokens
    size=$(stat -c %s "$tmp/kv.safetensors")
    [ "$size" -gt 76800 ] && [ "$size" -lt 90000 ] && ok || bad "kv file size $size"
    grep -q "wrote 3 sequences, 120 tokens" "$tmp/err" && ok || bad "kv summary: $(cat "$tmp/err")"
    expect_rc 0 "kv fp8 from stdin" sh -c "\"$bin\" model kv --model \"$m\" --tokens - --dtype fp8 --out \"$tmp/kv8.safetensors\" < \"$tmp/toks.txt\""
    printf '1 2 3\n1 999\n' > "$tmp/badtoks.txt"
    expect_rc 1 "kv rejects out-of-vocabulary ids" "$bin" model kv --model "$m" --tokens "$tmp/badtoks.txt" --dtype bf16 --out "$tmp/x.safetensors"
    grep -q ":2: token id 999" "$tmp/err" && ok || bad "error names line 2: $(cat "$tmp/err")"
    [ ! -e "$tmp/x.safetensors" ] && ok || bad "no output file on error"
    expect_rc 0 "convert" "$bin" model convert --model "$m" --out "$tmp/hf"
    expect_rc 0 "info of converted" "$bin" model info --model "$tmp/hf" --json
    grep -q '"rope_layout":"half"' "$tmp/out" && ok || bad "converted model uses the half layout"
    expect_rc 0 "greedy of converted" "$bin" model greedy --model "$tmp/hf" --steps 256
    cmp -s "$tmp/out" "$models/stories260K.greedy.txt" && ok || bad "converted greedy differs"
    # codec: calibrate, encode, decode; re-encoding the decoded file gives the
    # same bytes (the coder is deterministic and injective, so the decoded
    # KV is the original)
    "$bin" model sample --model "$m" --n-seq 4 --len 48 --seed 3 > "$tmp/cal.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/cal.txt" --dtype bf16 --out "$tmp/cal.safetensors" --quiet
    expect_rc 0 "codec calibrate" "$bin" codec calibrate --calib "$tmp/cal.safetensors" --model "$m" --out "$tmp/c.cal"
    for lvl in stat ctx spec full; do
        expect_rc 0 "codec encode $lvl" "$bin" codec encode --cal "$tmp/c.cal" --kv "$tmp/kv.safetensors" --out "$tmp/kv.$lvl.skv" --level "$lvl" --model "$m" --chunk 16
        expect_rc 0 "codec decode $lvl" "$bin" codec decode --cal "$tmp/c.cal" --in "$tmp/kv.$lvl.skv" --out "$tmp/kv.$lvl.dec" --model "$m"
        expect_rc 0 "codec re-encode $lvl" "$bin" codec encode --cal "$tmp/c.cal" --kv "$tmp/kv.$lvl.dec" --out "$tmp/kv.$lvl.skv2" --level "$lvl" --model "$m" --chunk 16
        cmp -s "$tmp/kv.$lvl.skv" "$tmp/kv.$lvl.skv2" && ok || bad "$lvl: decode(encode(kv)) re-encodes differently"
    done
    s_full=$(stat -c %s "$tmp/kv.full.skv"); s_stat=$(stat -c %s "$tmp/kv.stat.skv")
    [ "$s_full" -lt "$s_stat" ] && ok || bad "full ($s_full bytes) smaller than stat ($s_stat)"
    expect_rc 1 "decode needs the model for spec" "$bin" codec decode --cal "$tmp/c.cal" --in "$tmp/kv.spec.skv" --out "$tmp/x.dec"
    head -c 200 "$tmp/kv.ctx.skv" > "$tmp/trunc.skv"
    expect_rc 1 "decode rejects a truncated file" "$bin" codec decode --cal "$tmp/c.cal" --in "$tmp/trunc.skv" --out "$tmp/x.dec"
    expect_rc 0 "codec bench --json" "$bin" codec bench --cal "$tmp/c.cal" --test "$tmp/kv.safetensors" --model "$m" --json
    [ "$(grep -c '"roundtrip":"ok"' "$tmp/out")" -eq 4 ] && ok || bad "bench: 4 levels round-trip ok: $(cat "$tmp/out")"
else
    echo "cli_test: SKIP model cases: $models/stories260K.bin not present"
fi
echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
