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

# golden NAME RC COMMAND...: the command exits RC and prints, on stderr,
# exactly tests/golden/cli_errors/NAME.txt -- one line, the temp dir
# written TMP (SEQKV_UPDATE_GOLDEN=1 rewrites the files)
golden() {
    local name=$1 want=$2; shift 2
    local file=$root/tests/golden/cli_errors/$name.txt
    "$@" >/dev/null 2>"$tmp/gerr"
    local rc=$?
    sed -e "s|$tmp|TMP|g" "$tmp/gerr" > "$tmp/gnorm"
    [ "${SEQKV_UPDATE_GOLDEN:-0}" = 1 ] && cp "$tmp/gnorm" "$file"
    [ "$rc" -eq "$want" ] && ok || bad "golden $name: exit $rc, wanted $want"
    [ "$(wc -l < "$tmp/gnorm")" -eq 1 ] && ok || bad "golden $name: not one line: $(cat "$tmp/gnorm")"
    cmp -s "$tmp/gnorm" "$file" && ok || bad "golden $name: got '$(cat "$tmp/gnorm")', want '$(cat "$file" 2>/dev/null)'"
}

expect_rc 0 "top-level --help" "$bin" --help
grep -q "model kv" "$tmp/out" || bad "top-level help lists model kv"
# error messages (issue 30): one line in the user's terms; the source
# location only with --verbose
printf 'hello, this is a text file and not a model\n' > "$tmp/notes.txt"
golden model_is_text 1 "$bin" model info --model "$tmp/notes.txt"
grep -q '\[' "$tmp/gerr" && bad "no location without --verbose: $(cat "$tmp/gerr")" || ok
expect_rc 1 "--verbose adds the code and location" "$bin" --verbose model info --model "$tmp/notes.txt"
grep -q ' \[SKV_ERR_FORMAT\( at weights\.c:[0-9]*\)\?\]$' "$tmp/err" && ok || bad "--verbose line: $(cat "$tmp/err")"
expect_rc 1 "SEQKV_VERBOSE=1" env SEQKV_VERBOSE=1 "$bin" model info --model "$tmp/notes.txt"
grep -q ' \[SKV_ERR_FORMAT' "$tmp/err" && ok || bad "SEQKV_VERBOSE=1 line: $(cat "$tmp/err")"
: > "$tmp/afile"
golden stats_db_is_a_file 1 "$bin" stats --db "$tmp/afile"
golden stats_no_store 1 "$bin" stats --db "$tmp/nothing-here"
for sub in calibrate encode decode bench; do
    expect_rc 0 "codec $sub --help" "$bin" codec "$sub" --help
    grep -q "usage: seqkv codec $sub" "$tmp/out" || bad "codec $sub --help prints its usage"
done
expect_rc 2 "codec bench without --test" "$bin" codec bench --calib x
expect_rc 2 "codec bench --reps 0" "$bin" codec bench --cal x --test y --reps 0
expect_rc 2 "--reps outside bench" "$bin" codec encode --cal a --kv b --out c --reps 2
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
    golden sample_past_positions 1 "$bin" model sample --model "$m" --n-seq 1 --len 600 --seed 1
    golden greedy_past_positions 1 "$bin" model greedy --model "$m" --steps 512
    { echo "# a comment, then a blank line"; echo; echo "1 2 3"; awk 'BEGIN { for (i = 0; i < 513; i++) printf "%s%d", i ? " " : "", 1 + i % 500; print "" }'; } > "$tmp/long.txt"
    golden kv_past_positions 1 "$bin" model kv --model "$m" --tokens "$tmp/long.txt" --dtype bf16 --out "$tmp/long.kv"
    golden put_past_positions 1 "$bin" put --db "$tmp/db-long" --model "$m" --tokens "$tmp/long.txt"
    printf '1 2 3\n\n1 2 x 4\n' > "$tmp/notnum.txt"
    golden put_bad_token_line 1 "$bin" put --db "$tmp/db-long" --model "$m" --tokens "$tmp/notnum.txt"
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
    expect_rc 0 "codec bench --json" "$bin" codec bench --cal "$tmp/c.cal" --test "$tmp/kv.safetensors" --model "$m" --json --reps 2
    [ "$(grep -c '"roundtrip":"ok"' "$tmp/out")" -eq 4 ] && ok || bad "bench: 4 levels round-trip ok: $(cat "$tmp/out")"
    # the sizes are the same however many passes are timed
    grep '"level":"ctx"' "$tmp/out" | grep -o '"bits_per_scalar":[0-9.]*' | head -1 > "$tmp/b2"
    expect_rc 0 "codec bench --reps 1" "$bin" codec bench --cal "$tmp/c.cal" --test "$tmp/kv.safetensors" --level ctx --json --reps 1
    grep '"level":"ctx"' "$tmp/out" | grep -o '"bits_per_scalar":[0-9.]*' | head -1 > "$tmp/b1"
    [ -s "$tmp/b2" ] && cmp -s "$tmp/b1" "$tmp/b2" && ok || bad "bench: ctx bits at --reps 1 ($(cat "$tmp/b1")) and 2 ($(cat "$tmp/b2"))"
else
    echo "cli_test: SKIP model cases: $models/stories260K.bin not present"
fi

# ---- the store: put, lookup, get, del, stats, calibrate, profile ----------
for sub in put lookup get del stats calibrate; do
    expect_rc 0 "$sub --help" "$bin" "$sub" --help
    grep -q "usage: seqkv $sub" "$tmp/out" || bad "$sub --help prints its usage"
done
for sub in "profile get" "profile set" "tenant set"; do
    expect_rc 0 "$sub --help" "$bin" $sub --help
    grep -q "usage: seqkv $sub" "$tmp/out" || bad "$sub --help prints its usage"
done
expect_rc 0 "top-level --help" "$bin" --help
grep -q "  put " "$tmp/out" && grep -q "  stats " "$tmp/out" && ok || bad "top-level help lists put and stats"
expect_rc 2 "put without --db" "$bin" put --kv x.safetensors
grep -q -- "--db DIR is required" "$tmp/err" && ok || bad "put names the missing --db: $(cat "$tmp/err")"
expect_rc 2 "put with --kv and --tokens" "$bin" put --db "$tmp/db0" --kv x --model m --tokens t
expect_rc 2 "put with neither --kv nor --tokens" "$bin" put --db "$tmp/db0" --model m
expect_rc 2 "put --tokens without --model" "$bin" put --db "$tmp/db0" --tokens t
expect_rc 2 "put with a bad level" "$bin" put --db "$tmp/db0" --kv x --level turbo
expect_rc 2 "put with a bad budget" "$bin" put --db "$tmp/db0" --kv x --budget 12Q
expect_rc 2 "put with a bad chunk" "$bin" put --db "$tmp/db0" --kv x --chunk 0
expect_rc 2 "lookup without a profile" "$bin" lookup --db "$tmp/db0" --tokens t
expect_rc 2 "get without --out" "$bin" get --db "$tmp/db0" --profile p --tokens t
expect_rc 2 "get with an option of put" "$bin" get --db "$tmp/db0" --profile p --tokens t --out o --shared
expect_rc 2 "stats with a stray argument" "$bin" stats --db "$tmp/db0" extra
expect_rc 2 "calibrate without --profile" "$bin" calibrate --db "$tmp/db0"
printf '1 2 3\n' > "$tmp/t3.txt"
expect_rc 1 "stats of no store" "$bin" stats --db "$tmp/nostore"
grep -q "nostore: no store there" "$tmp/err" && ok || bad "stats names the missing store: $(cat "$tmp/err")"
expect_rc 1 "lookup of no store" "$bin" lookup --db "$tmp/nostore" --profile p --tokens "$tmp/t3.txt"
[ ! -e "$tmp/nostore" ] && ok || bad "a lookup must not create a store"
mkdir "$tmp/empty"
expect_rc 1 "get from a directory without a store" "$bin" get --db "$tmp/empty" --profile p --tokens "$tmp/t3.txt" --out "$tmp/x.kv"
[ -z "$(ls "$tmp/empty")" ] && ok || bad "a get must not create a store: $(ls "$tmp/empty")"
expect_rc 1 "put of a missing KV file" "$bin" put --db "$tmp/db0" --kv "$tmp/nope.safetensors"
grep -q "nope.safetensors" "$tmp/err" && ok || bad "put names the missing KV file: $(cat "$tmp/err")"

# Reference values computed here from the token files alone: the number of
# distinct prefixes (unique tokens a deduplicating store holds) and, for a
# query line, its longest common prefix with any stored line.
uniq_prefixes() { awk '{ p = ""; for (i = 1; i <= NF; i++) { p = p " " $i; if (!(p in s)) { s[p] = 1; n++ } } } END { print n + 0 }' "$@"; }
lcp_with() { # STORED_FILES... -- QUERY_FILE: the longest common prefix per query line
    local files=()
    while [ "$1" != "--" ]; do files+=("$1"); shift; done
    cat "${files[@]}" | awk 'NR == FNR { st[NR] = $0; ns = NR; next }
        { nq = split($0, q, " "); best = 0
          for (j = 1; j <= ns; j++) { n = split(st[j], s, " "); k = 0
              while (k < n && k < nq && s[k + 1] == q[k + 1]) k++
              if (k > best) best = k }
          print best }' - "$2"
}
json_first() { grep -o "\"$1\":[0-9]*" | head -1 | cut -d: -f2; } # the first occurrence: top level

if [ -r "$models/stories260K.bin" ]; then
    m=$models/stories260K.bin
    db=$tmp/store
    "$bin" model sample --model "$m" --n-seq 4 --len 300 --seed 1 > "$tmp/s.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/s.txt" --dtype bf16 --out "$tmp/s.kv" --quiet
    uniq0=$(uniq_prefixes "$tmp/s.txt")
    expect_rc 0 "put --model --tokens" "$bin" put --db "$db" --model "$m" --tokens "$tmp/s.txt"
    grep -q "created profile stories260K: BF16 \[5 layers, 4 kv heads, head_dim 8\]" "$tmp/err" && ok || bad "put creates the profile named after the model: $(cat "$tmp/err")"
    # a short shared start of a chunk (here the BOS) is coded again, so the
    # put stores between the unique count and all 1200; stats counts unique
    newt=$(sed -n 's/.*tokens given, \([0-9]*\) new tokens stored.*/\1/p' "$tmp/err")
    [ "${newt:-0}" -ge "$uniq0" ] && [ "${newt:-0}" -le 1200 ] && ok || bad "put stores each shared prefix about once ($uniq0 unique tokens): $(cat "$tmp/err")"
    "$bin" stats --db "$db" --json > "$tmp/st0.json" 2>/dev/null
    [ "$(json_first tokens < "$tmp/st0.json")" = "$uniq0" ] && ok || bad "stats tokens = $uniq0 unique: $(cat "$tmp/st0.json")"
    [ -e "$db/master.key" ] && [ "$(stat -c %a "$db/master.key")" = 600 ] && ok || bad "master key created with mode 0600"
    expect_rc 0 "stats of a raw store" "$bin" stats --db "$db"
    grep -q "tokens are stored raw; profile stories260K calibrates itself once it holds 8192 tokens ('seqkv calibrate --db $db --profile stories260K' now)" "$tmp/err" && ok || bad "stats of a raw store says what happens and what to run: $(cat "$tmp/err")"
    expect_rc 0 "lookup the stored lines" "$bin" lookup --db "$db" --profile stories260K --tokens "$tmp/s.txt"
    [ "$(tr '\n' ' ' < "$tmp/out")" = "300 300 300 300 " ] && ok || bad "lookup of stored lines: $(cat "$tmp/out")"
    # reads beside a server that holds the store; writes name its pid
    "$bin" serve --db "$db" --socket "$tmp/srv.sock" > "$tmp/srv.log" 2>&1 &
    srv=$!
    for _ in $(seq 100); do [ -S "$tmp/srv.sock" ] && break; sleep 0.05; done
    [ -S "$tmp/srv.sock" ] && ok || bad "seqkv serve came up: $(cat "$tmp/srv.log")"
    expect_rc 0 "lookup while the server holds the store" "$bin" lookup --db "$db" --profile stories260K --tokens "$tmp/s.txt"
    [ "$(tr '\n' ' ' < "$tmp/out")" = "300 300 300 300 " ] && ok || bad "lookup beside the server: $(cat "$tmp/out")"
    expect_rc 0 "get while the server holds the store" "$bin" get --db "$db" --model "$m" --tokens "$tmp/s.txt" --out "$tmp/gsrv.kv"
    "$bin" model kv --model "$m" --tokens "$tmp/s.txt" --dtype bf16 --out "$tmp/s_srv.kv" --quiet
    cmp -s "$tmp/gsrv.kv" "$tmp/s_srv.kv" && ok || bad "get beside the server is bit-exact"
    expect_rc 0 "stats while the server holds the store" "$bin" stats --db "$db"
    grep -q "^tokens        $uniq0 unique" "$tmp/out" && ok || bad "stats beside the server: $(cat "$tmp/out")"
    expect_rc 0 "profile list while the server holds the store" "$bin" profile list --db "$db"
    grep -q "^stories260K " "$tmp/out" && ok || bad "profile list beside the server: $(cat "$tmp/out")"
    expect_rc 0 "profile get while the server holds the store" "$bin" profile get --db "$db" stories260K
    expect_rc 1 "put while the server holds the store" "$bin" put --db "$db" --model "$m" --tokens "$tmp/s.txt"
    grep -q "open for writing by process $srv (seqkv serve?)" "$tmp/err" && ok || bad "a refused write names the holder: $(cat "$tmp/err")"
    kill "$srv"; wait "$srv" 2>/dev/null
    expect_rc 1 "put with a missing token file" "$bin" put --db "$tmp/store-none" --model "$m" --tokens "$tmp/nope.txt"
    [ ! -e "$tmp/store-none" ] && ok || bad "a failed put must not leave a new store behind"
    # queries: a prefix, an extension, a divergence inside a chunk, no BOS
    q0=$(head -1 "$tmp/s.txt")
    {
        echo "$q0" | cut -d' ' -f1-100
        echo "$q0 5 6 7"
        echo "$(echo "$q0" | cut -d' ' -f1-150) 511 $(echo "$q0" | cut -d' ' -f152-200)"
        echo "2 3 4"
        echo "$q0" | cut -d' ' -f1-37
    } > "$tmp/q.txt"
    expect_rc 0 "lookup the queries" "$bin" lookup --db "$db" --model "$m" --tokens "$tmp/q.txt"
    want=$(lcp_with "$tmp/s.txt" -- "$tmp/q.txt" | tr '\n' ' ')
    got=$(tr '\n' ' ' < "$tmp/out")
    [ "$got" = "$want" ] && ok || bad "lookup gives the longest cached prefix at token granularity: got '$got', want '$want'"
    case "$want" in "100 300 "*" 0 37 ") ok ;; *) bad "query expectations: $want" ;; esac
    # get == model kv, byte for byte (same metadata with --model)
    expect_rc 0 "get the stored lines" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/s.txt" --out "$tmp/g.kv" --model "$m"
    cmp -s "$tmp/g.kv" "$tmp/s.kv" && ok || bad "get output differs from model kv output"
    grep -q "get: wrote 4 sequences, 1200 tokens" "$tmp/err" && ok || bad "get summary: $(cat "$tmp/err")"
    # prefixes: --n and the longest cached prefix of a diverging line
    sed -n 1p "$tmp/q.txt" > "$tmp/q100.txt"
    sed -n 3p "$tmp/q.txt" > "$tmp/qdiv.txt"
    cut -d' ' -f1-150 "$tmp/qdiv.txt" > "$tmp/q150.txt"
    head -2 "$tmp/s.txt" | cut -d' ' -f1-100 > "$tmp/q2x100.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/q100.txt" --dtype bf16 --out "$tmp/q100.kv" --quiet
    "$bin" model kv --model "$m" --tokens "$tmp/q150.txt" --dtype bf16 --out "$tmp/q150.kv" --quiet
    "$bin" model kv --model "$m" --tokens "$tmp/q2x100.txt" --dtype bf16 --out "$tmp/q2x100.kv" --quiet
    expect_rc 0 "get a cached prefix" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/q100.txt" --out "$tmp/g100.kv" --model "$m"
    cmp -s "$tmp/g100.kv" "$tmp/q100.kv" && ok || bad "get of a 100-token prefix differs from its model kv"
    expect_rc 0 "get the longest cached prefix of a diverging line" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/qdiv.txt" --out "$tmp/gdiv.kv" --model "$m"
    cmp -s "$tmp/gdiv.kv" "$tmp/q150.kv" && ok || bad "get of a diverging line is not its 150-token cached prefix"
    expect_rc 0 "get --n 100" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/s.txt" --n 100 --out "$tmp/gn.kv" --model "$m"
    "$bin" model sample --model "$m" --n-seq 4 --len 300 --seed 1 | cut -d' ' -f1-100 > "$tmp/q4x100.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/q4x100.txt" --dtype bf16 --out "$tmp/q4x100.kv" --quiet
    cmp -s "$tmp/gn.kv" "$tmp/q4x100.kv" && ok || bad "get --n 100 differs from model kv of the 100-token prefixes"
    expect_rc 1 "get of a line with nothing cached" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/q.txt" --out "$tmp/gx.kv"
    grep -q "line 4: nothing cached" "$tmp/err" && ok || bad "get names the uncached line: $(cat "$tmp/err")"
    golden get_nothing_cached 1 "$bin" get --db "$db" --profile stories260K --tokens "$tmp/q.txt" --out "$tmp/gx.kv"
    [ ! -e "$tmp/gx.kv" ] && ok || bad "no output file when a line is not cached"
    expect_rc 1 "get --n past the cached prefix" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/qdiv.txt" --n 160 --out "$tmp/gx.kv"
    grep -q "line 1: only 150 of the 160" "$tmp/err" && ok || bad "get --n names what is cached: $(cat "$tmp/err")"
    expect_rc 1 "lookup of an unknown profile" "$bin" lookup --db "$db" --profile nosuch --tokens "$tmp/s.txt"
    grep -q "no profile 'nosuch' (the store has stories260K)" "$tmp/err" && ok || bad "unknown profile error lists the profiles: $(cat "$tmp/err")"
    # the same KV again, from the KV file: nothing new is stored
    expect_rc 0 "put --kv of stored sequences" "$bin" put --db "$db" --profile stories260K --kv "$tmp/s.kv"
    grep -q "put: 4 sequences, 1200 tokens given, 0 new tokens stored in 0 chunks" "$tmp/err" && ok || bad "a repeated put stores nothing: $(cat "$tmp/err")"
    # an extension stores only the tail
    echo "$q0 5 6 7 8 9" > "$tmp/ext.txt"
    expect_rc 0 "put an extension" "$bin" put --db "$db" --model "$m" --tokens "$tmp/ext.txt" --verbose
    grep -q "put: 1 sequences, 305 tokens given, 5 new tokens stored" "$tmp/err" && ok || bad "an extension stores its 5-token tail: $(cat "$tmp/err")"
    [ "$(cut -d' ' -f1-3 "$tmp/out")" = "0 305 5" ] && ok || bad "put --verbose line: $(cat "$tmp/out")"
    "$bin" model kv --model "$m" --tokens "$tmp/ext.txt" --dtype bf16 --out "$tmp/ext.kv" --quiet
    expect_rc 0 "get the extension" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/ext.txt" --out "$tmp/gext.kv" --model "$m"
    cmp -s "$tmp/gext.kv" "$tmp/ext.kv" && ok || bad "get of the extension differs from its model kv"
    uniq1=$(uniq_prefixes "$tmp/s.txt" "$tmp/ext.txt")
    expect_rc 0 "stats --json" "$bin" stats --db "$db" --json
    st=$(cat "$tmp/out")
    [ "$(echo "$st" | json_first tokens)" = "$uniq1" ] && ok || bad "stats tokens = $uniq1 unique tokens: $st"
    [ "$(echo "$st" | json_first raw_bytes)" = "$((uniq1 * 640))" ] && ok || bad "stats raw_bytes = $uniq1 x 640 (bf16): $st"
    chunks=$(echo "$st" | json_first chunks); stored=$(echo "$st" | json_first stored_bytes)
    [ "${chunks:-0}" -ge 5 ] && [ "${stored:-0}" -gt 0 ] && ok || bad "stats chunks and stored_bytes: $st"
    echo "$st" | grep -q '"profiles":1' && ok || bad "stats counts 1 profile: $st"
    ten0=$(echo "$st" | json_first tenants) # the default tenant (and the @shared namespace, if counted)
    case "$ten0" in 1|2) ok ;; *) bad "stats tenants: $st" ;; esac
    expect_rc 0 "stats --json of the default tenant" "$bin" stats --db "$db" --tenant default --json
    [ "$(json_first tokens < "$tmp/out")" = "$uniq1" ] && ok || bad "per-tenant stats: $(cat "$tmp/out")"
    expect_rc 0 "stats as a table" "$bin" stats --db "$db"
    grep -q "^tokens  *$uniq1 unique" "$tmp/out" && ok || bad "stats table: $(cat "$tmp/out")"
    # tenants: B does not see A's sequences
    expect_rc 0 "put as tenant B" "$bin" put --db "$db" --tenant B --model "$m" --tokens "$tmp/q150.txt"
    grep -q "150 new tokens stored" "$tmp/err" && ok || bad "tenant B shares nothing with A: $(cat "$tmp/err")"
    expect_rc 0 "lookup as tenant B" "$bin" lookup --db "$db" --tenant B --profile stories260K --tokens "$tmp/s.txt"
    want=$(lcp_with "$tmp/q150.txt" -- "$tmp/s.txt" | tr '\n' ' ')
    [ "$(tr '\n' ' ' < "$tmp/out")" = "$want" ] && ok || bad "tenant B sees only its own: got '$(tr '\n' ' ' < "$tmp/out")', want '$want'"
    expect_rc 1 "lookup as an unknown tenant" "$bin" lookup --db "$db" --tenant nobody --profile stories260K --tokens "$tmp/s.txt"
    expect_rc 0 "stats --json of tenant B" "$bin" stats --db "$db" --tenant B --json
    [ "$(json_first tokens < "$tmp/out")" = 150 ] && ok || bad "tenant B stats: $(cat "$tmp/out")"
    expect_rc 0 "stats --json with tenant B" "$bin" stats --db "$db" --json
    [ "$(json_first tenants < "$tmp/out")" = "$((ten0 + 1))" ] && ok || bad "tenant B counts as one more tenant: $(cat "$tmp/out")"
    [ "$(json_first tokens < "$tmp/out")" = "$((uniq1 + 150))" ] && ok || bad "store-wide tokens = both tenants': $(cat "$tmp/out")"
    # del: removes what no other sequence needs
    sed -n 4p "$tmp/s.txt" > "$tmp/d.txt"
    head -3 "$tmp/s.txt" > "$tmp/keep.txt"
    keep=$(lcp_with "$tmp/keep.txt" "$tmp/ext.txt" -- "$tmp/d.txt")
    expect_rc 0 "del" "$bin" del --db "$db" --profile stories260K --tokens "$tmp/d.txt"
    # a shared start under 16 tokens was coded again in this line's own
    # record, which goes with it; a longer one is the other line's
    kept=$keep; [ "$keep" -lt 16 ] && kept=0
    [ "$(cat "$tmp/out")" = "$((300 - kept))" ] && ok || bad "del removes $((300 - kept)) tokens: $(cat "$tmp/out")"
    expect_rc 0 "lookup after del" "$bin" lookup --db "$db" --profile stories260K --tokens "$tmp/d.txt"
    [ "$(cat "$tmp/out")" = "$keep" ] && ok || bad "after del the line's cached prefix is $keep: $(cat "$tmp/out")"
    expect_rc 0 "stats after del" "$bin" stats --db "$db" --tenant default --json
    [ "$(json_first tokens < "$tmp/out")" = "$(uniq_prefixes "$tmp/keep.txt" "$tmp/ext.txt")" ] && ok || bad "stats after del: $(cat "$tmp/out")"
    expect_rc 0 "get the kept lines after del" "$bin" get --db "$db" --profile stories260K --tokens "$tmp/q2x100.txt" --n 100 --out "$tmp/gk.kv" --model "$m"
    cmp -s "$tmp/gk.kv" "$tmp/q2x100.kv" && ok || bad "kept lines changed after del"
    # del of the first sequence, whose first chunk the others' records may
    # use as their base: what del reports is what lookup then misses, and
    # the others still decode bit-exact
    expect_rc 0 "put for del-first" "$bin" put --db "$tmp/store-del" --model "$m" --tokens "$tmp/s.txt" --quiet
    sed -n 1p "$tmp/s.txt" > "$tmp/first.txt"
    expect_rc 0 "del the first sequence" "$bin" del --db "$tmp/store-del" --model "$m" --tokens "$tmp/first.txt"
    rem=$(cat "$tmp/out")
    sed -n 2,4p "$tmp/s.txt" > "$tmp/others.txt"
    k0=$(lcp_with "$tmp/others.txt" -- "$tmp/first.txt")
    [ "${rem:-0}" -ge 44 ] && [ "${rem:-0}" -le 300 ] && ok || bad "del of the first sequence removes 44 to 300 tokens: $rem"
    expect_rc 0 "lookup after del-first" "$bin" lookup --db "$tmp/store-del" --model "$m" --tokens "$tmp/s.txt"
    left=$((300 - ${rem:-0})); [ "$left" -lt "$k0" ] && left=$k0
    [ "$(tr '\n' ' ' < "$tmp/out")" = "$left 300 300 300 " ] && ok || bad "after removing $rem tokens of line 0 (shared with others: $k0): $(tr '\n' ' ' < "$tmp/out")"
    sed -n 2,4p "$tmp/s.txt" > "$tmp/rest.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/rest.txt" --dtype bf16 --out "$tmp/rest.kv" --quiet
    expect_rc 0 "get the others after del-first" "$bin" get --db "$tmp/store-del" --model "$m" --tokens "$tmp/rest.txt" --out "$tmp/grest.kv"
    cmp -s "$tmp/grest.kv" "$tmp/rest.kv" && ok || bad "the other sequences changed when the first was deleted"
    # calibrate from the stored sequences, then coded puts round-trip
    expect_rc 0 "calibrate" "$bin" calibrate --db "$db" --profile stories260K
    # the raw records coded again at the profile's level, on two threads:
    # what a get returns is the same before and after
    expect_rc 0 "get before compact" "$bin" get --db "$db" --model "$m" --tokens "$tmp/s.txt" --out "$tmp/gb.kv"
    expect_rc 2 "compact --threads 0" "$bin" compact --db "$db" --threads 0
    expect_rc 0 "compact on two threads" "$bin" compact --db "$db" --threads 2
    grep -q "^compact: [1-9][0-9]* of [0-9]* records coded again" "$tmp/err" && ok || bad "compact codes the raw records again: $(cat "$tmp/err")"
    expect_rc 0 "get after compact" "$bin" get --db "$db" --model "$m" --tokens "$tmp/s.txt" --out "$tmp/gc.kv"
    [ -s "$tmp/gb.kv" ] && cmp -s "$tmp/gc.kv" "$tmp/gb.kv" && ok || bad "get after compact differs from the get before it"
    expect_rc 0 "profile get --json" "$bin" profile get --db "$db" stories260K --json
    grep -q '"calibration":"[0-9a-f]\{32\}"' "$tmp/out" && ok || bad "profile has a calibration: $(cat "$tmp/out")"
    grep -q '"layers":5,"kv_heads":4,"head_dim":8,"dtype":"bf16"' "$tmp/out" && ok || bad "profile shape: $(cat "$tmp/out")"
    "$bin" model sample --model "$m" --n-seq 3 --len 200 --seed 2 > "$tmp/c.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/c.txt" --dtype bf16 --out "$tmp/c.kv" --quiet
    for lvl in stat ctx; do
        d2=$tmp/store-$lvl
        expect_rc 0 "put --level $lvl after calibrate" "$bin" put --db "$db" --tenant "T$lvl" --model "$m" --tokens "$tmp/c.txt" --level "$lvl"
        expect_rc 0 "get at $lvl" "$bin" get --db "$db" --tenant "T$lvl" --profile stories260K --tokens "$tmp/c.txt" --out "$tmp/c.$lvl.kv" --model "$m"
        cmp -s "$tmp/c.$lvl.kv" "$tmp/c.kv" && ok || bad "$lvl-coded put does not get back bit-exact"
        expect_rc 0 "stats of the $lvl tenant" "$bin" stats --db "$db" --tenant "T$lvl" --json
        sl=$(sed -n "s/.*\"$lvl\":{\"tokens\":\([0-9]*\),\"raw_bytes\":\([0-9]*\),\"stored_bytes\":\([0-9]*\).*/\1 \2 \3/p" "$tmp/out")
        set -- $sl
        [ "${1:-0}" -ge "$(uniq_prefixes "$tmp/c.txt")" ] && [ "${1:-0}" -le 600 ] && [ "${3:-0}" -gt 0 ] && [ "${3:-0}" -lt "${2:-0}" ] && ok || bad "$lvl level codes smaller than raw: $(cat "$tmp/out")"
    done
    # a KV file into its own profile, named after the model the file records;
    # (one that records none is named after itself); a mismatching profile is refused
    expect_rc 0 "put --kv into a new profile" "$bin" put --db "$tmp/store2k" --kv "$tmp/s.kv" --chunk 64
    grep -q "created profile stories260K: BF16" "$tmp/err" && ok || bad "put --kv names the profile after the model in the file: $(cat "$tmp/err")"
    expect_rc 0 "put --kv --profile s" "$bin" put --db "$tmp/store2" --kv "$tmp/s.kv" --chunk 64 --profile s
    grep -q "created profile s: BF16" "$tmp/err" && ok || bad "put --kv --profile names the profile: $(cat "$tmp/err")"
    expect_rc 0 "get from the KV-file profile" "$bin" get --db "$tmp/store2" --profile s --tokens "$tmp/s.txt" --out "$tmp/g2.kv" --model "$m"
    cmp -s "$tmp/g2.kv" "$tmp/s.kv" && ok || bad "get after put --kv differs"
    expect_rc 0 "profile get" "$bin" profile get --db "$tmp/store2" s
    grep -q "^chunk  *64 tokens" "$tmp/out" && grep -q "^level  *ctx" "$tmp/out" && grep -q "^auto-calib.  at 8192 tokens" "$tmp/out" && ok || bad "profile s: chunk 64, level ctx (raw until it calibrates itself): $(cat "$tmp/out")"
    expect_rc 0 "profile set --level" "$bin" profile set --db "$tmp/store2" s --level ctx --model "$m"
    expect_rc 0 "profile get after set" "$bin" profile get --db "$tmp/store2" s --json
    grep -q '"level":"ctx",' "$tmp/out" && grep -q '"chunk":64,' "$tmp/out" && grep -q '"model":"/[^"]*stories260K.bin"' "$tmp/out" && ok || bad "profile set changes level and model only: $(cat "$tmp/out")"
    expect_rc 1 "profile set of a new profile without a shape" "$bin" profile set --db "$tmp/store2" fresh --level raw
    expect_rc 1 "profile set with another dtype" "$bin" profile set --db "$tmp/store2" s --dtype fp16
    expect_rc 1 "profile get of an unknown profile" "$bin" profile get --db "$tmp/store2" fresh
    "$bin" model kv --model "$m" --tokens "$tmp/q100.txt" --dtype fp16 --out "$tmp/f16.kv" --quiet
    expect_rc 1 "put of fp16 KV into a bf16 profile" "$bin" put --db "$tmp/store2" --profile s --kv "$tmp/f16.kv"
    grep -q "profile s is BF16" "$tmp/err" && ok || bad "dtype mismatch error: $(cat "$tmp/err")"
    expect_rc 1 "put with another chunk length" "$bin" put --db "$tmp/store2" --profile s --kv "$tmp/s.kv" --chunk 32
    # a budget keeps the store under it and what remains decodable
    expect_rc 0 "put under a budget" "$bin" put --db "$tmp/store3" --model "$m" --tokens "$tmp/s.txt" --chunk 32 --budget 256K
    expect_rc 0 "stats under a budget" "$bin" stats --db "$tmp/store3" --json
    [ "$(json_first stored_bytes < "$tmp/out")" -le 262144 ] && ok || bad "stored bytes within the budget: $(cat "$tmp/out")"
    [ "$(json_first evictions < "$tmp/out")" -gt 0 ] && ok || bad "the budget evicted records: $(cat "$tmp/out")"
    expect_rc 0 "lookup under a budget" "$bin" lookup --db "$tmp/store3" --profile stories260K --tokens "$tmp/s.txt"
    paste -d' ' "$tmp/out" "$tmp/s.txt" | while read -r n rest; do
        [ "$n" -gt 0 ] || continue
        echo "$rest" | cut -d' ' -f1-"$n"
    done > "$tmp/left.txt"
    if [ -s "$tmp/left.txt" ]; then
        "$bin" model kv --model "$m" --tokens "$tmp/left.txt" --dtype bf16 --out "$tmp/left.kv" --quiet
        expect_rc 0 "get what the budget left" "$bin" get --db "$tmp/store3" --profile stories260K --tokens "$tmp/left.txt" --out "$tmp/gleft.kv" --model "$m"
        cmp -s "$tmp/gleft.kv" "$tmp/left.kv" && ok || bad "what eviction left does not decode bit-exact"
    fi
    # a calibration file given to put: the new profile codes at ctx (as a calibration raises raw to)
    expect_rc 0 "put --calib" "$bin" put --db "$tmp/store4" --model "$m" --tokens "$tmp/c.txt" --calib "$tmp/c.cal"
    grep -q "created profile stories260K: .*level ctx, calibrated" "$tmp/err" && ok || bad "put --calib makes a ctx profile: $(cat "$tmp/err")"
    expect_rc 0 "get after put --calib" "$bin" get --db "$tmp/store4" --model "$m" --tokens "$tmp/c.txt" --out "$tmp/c4.kv"
    cmp -s "$tmp/c4.kv" "$tmp/c.kv" && ok || bad "ctx-coded KV (imported calibration) does not get back bit-exact"
    expect_rc 0 "stats after put --calib" "$bin" stats --db "$tmp/store4" --json
    grep -q '"raw":{"tokens":0,' "$tmp/out" && grep -q '"ctx":{"tokens":[1-9]' "$tmp/out" && ok || bad "every token coded at ctx: $(cat "$tmp/out")"
    # the shared namespace: written only with --shared, read only after opting in
    expect_rc 0 "put --shared" "$bin" put --db "$tmp/store4" --tenant A --model "$m" --tokens "$tmp/q100.txt" --shared
    want=$(lcp_with "$tmp/c.txt" -- "$tmp/q100.txt")
    expect_rc 0 "lookup of a shared line before opting in" "$bin" lookup --db "$tmp/store4" --model "$m" --tokens "$tmp/q100.txt"
    [ "$(cat "$tmp/out")" = "$want" ] && ok || bad "shared entries are not read by default: $(cat "$tmp/out"), want $want"
    expect_rc 0 "tenant set --read-shared" "$bin" tenant set --db "$tmp/store4" default --read-shared
    expect_rc 0 "lookup of a shared line after opting in" "$bin" lookup --db "$tmp/store4" --model "$m" --tokens "$tmp/q100.txt"
    [ "$(cat "$tmp/out")" = 100 ] && ok || bad "an opted-in tenant reads @shared: $(cat "$tmp/out")"
    expect_rc 0 "get of a shared line" "$bin" get --db "$tmp/store4" --model "$m" --tokens "$tmp/q100.txt" --out "$tmp/gsh.kv"
    cmp -s "$tmp/gsh.kv" "$tmp/q100.kv" && ok || bad "get of a shared line differs from its model kv"
    # near-duplicates (one early token changed) are coded against their
    # cluster's centroid: smaller than coded alone, and still bit-exact
    head -2 "$tmp/s.txt" | awk '{ $12 = ($12 + 1) % 512; print }' > "$tmp/nd.txt"
    "$bin" model kv --model "$m" --tokens "$tmp/nd.txt" --dtype bf16 --out "$tmp/nd.kv" --quiet
    for mode in centroids no-centroids; do
        flag=; [ "$mode" = no-centroids ] && flag=--no-centroids
        expect_rc 0 "put the originals ($mode)" "$bin" put --db "$tmp/store-$mode" --model "$m" --tokens "$tmp/s.txt" --calib "$tmp/c.cal" --level ctx --quiet $flag
        expect_rc 0 "put near-duplicates ($mode)" "$bin" put --db "$tmp/store-$mode" --model "$m" --tokens "$tmp/nd.txt" --level ctx $flag
        grep -o "stored in [0-9]* chunks, [0-9]* bytes" "$tmp/err" | awk '{ print $5 }' > "$tmp/bytes-$mode"
        if [ "$mode" = centroids ]; then
            grep -q "[1-9][0-9]* tokens coded against a centroid" "$tmp/err" && ok || bad "near-duplicates coded against a centroid: $(cat "$tmp/err")"
            expect_rc 0 "stats with centroids" "$bin" stats --db "$tmp/store-$mode" --json
            [ "$(json_first centroid_chunks < "$tmp/out")" -gt 0 ] && ok || bad "stats counts centroid-coded chunks: $(cat "$tmp/out")"
        else
            grep -q "against a centroid" "$tmp/err" && bad "--no-centroids still coded against a centroid: $(cat "$tmp/err")" || ok
        fi
        expect_rc 0 "get near-duplicates ($mode)" "$bin" get --db "$tmp/store-$mode" --model "$m" --tokens "$tmp/nd.txt" --out "$tmp/nd.$mode.kv"
        cmp -s "$tmp/nd.$mode.kv" "$tmp/nd.kv" && ok || bad "near-duplicates ($mode) do not get back bit-exact"
    done
    bc=$(cat "$tmp/bytes-centroids"); bn=$(cat "$tmp/bytes-no-centroids")
    [ "${bc:-0}" -gt 0 ] && [ "${bc:-0}" -lt "${bn:-0}" ] && ok || bad "centroid coding ($bc bytes) smaller than coding alone ($bn)"
    # eviction follows recency, and a get or lookup counts as a use: A, then
    # B, then C under a budget for about two; touching A first makes B go
    for touch in no yes; do
        d=$tmp/store-lru-$touch
        sed -n 1p "$tmp/s.txt" > "$tmp/A.txt"; sed -n 2p "$tmp/s.txt" > "$tmp/B.txt"; sed -n 3p "$tmp/s.txt" > "$tmp/C.txt"
        "$bin" put --db "$d" --model "$m" --tokens "$tmp/A.txt" --chunk 32 --budget 450K --quiet
        "$bin" put --db "$d" --model "$m" --tokens "$tmp/B.txt" --budget 450K --quiet
        [ $touch = yes ] && "$bin" get --db "$d" --model "$m" --tokens "$tmp/A.txt" --out "$tmp/touch.kv" --quiet
        expect_rc 0 "put C under a budget (touch A: $touch)" "$bin" put --db "$d" --model "$m" --tokens "$tmp/C.txt" --budget 450K
        grep -q "[1-9][0-9]* records evicted" "$tmp/err" && ok || bad "put C evicted records: $(cat "$tmp/err")"
        expect_rc 0 "lookup after eviction (touch A: $touch)" "$bin" lookup --db "$d" --model "$m" --tokens "$tmp/s.txt"
        set -- $(cat "$tmp/out")
        if [ $touch = yes ]; then
            [ "$1" = 300 ] && [ "$2" -lt 300 ] && [ "$3" = 300 ] && ok || bad "a used A outlives B: $*"
        else
            [ "$1" -lt 300 ] && [ "$2" = 300 ] && [ "$3" = 300 ] && ok || bad "the least recent A goes first: $*"
        fi
    done
    mknod "$tmp/dev" c 1 3 2>/dev/null || mkfifo "$tmp/dev"
    expect_rc 2 "get --out refuses a non-file" "$bin" get --db "$db" --model "$m" --tokens "$tmp/s.txt" --out "$tmp/dev"
    [ ! -f "$tmp/dev" ] && ok || bad "get replaced a device or fifo with a file"
else
    echo "cli_test: SKIP store model cases: $models/stories260K.bin not present"
fi
echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
