#!/usr/bin/env bash
# README.md's quick start, walked as a new user would: the shell block
# after the "quickstart" marker runs line by line in a fresh directory
# with `seqkv` being this build; the store it leaves must hold every
# sequence (lookup 256 a line, get bit-exact against the model's KV) and
# be compressed: stored bytes at most raw / 1.8 over the whole store, with
# no calibrate command (the profile calibrates itself).
# usage: quickstart_test.sh SEQKV SOURCE_ROOT   (exit 77: no model, skipped)
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$2" && pwd)
model=${SEQKV_MODEL:-$root/../shared/models/stories260K.bin}
if [ ! -f "$model" ]; then
    echo "quickstart: $model not present: skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/run"
ln -s "$bin" "$tmp/bin/seqkv"
# the block: from the marker's ```sh to its closing ```
awk '/<!-- quickstart:/ { on = 1; next } on && /^```sh/ { inblk = 1; next } inblk && /^```/ { exit } inblk' \
    "$root/README.md" > "$tmp/quickstart.sh"
[ -s "$tmp/quickstart.sh" ] || { echo "quickstart: no block after the marker in README.md"; exit 1; }
# the README's model path, as the user's checkout has it, is this machine's
sed -i "s|^M=.*|M=$model|" "$tmp/quickstart.sh"
cd "$tmp/run"
PATH="$tmp/bin:$PATH" bash -euo pipefail "$tmp/quickstart.sh" > "$tmp/out" 2> "$tmp/err" ||
    { echo "quickstart: a README command failed:"; tail -5 "$tmp/err"; exit 1; }
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); fi; }
check "the put says the profile calibrated itself" "grep -q 'put: profile stories260K calibrated itself after 32 sequences' '$tmp/err'"
check "and that it re-coded what it stored raw" "grep -q 'put: 32 of 64 records coded again' '$tmp/err'"
check "lookup finds every line whole" "[ \$(grep -c '^256\$' '$tmp/out') = 64 ]"
"$bin" model kv --model "$model" --tokens more.txt --dtype bf16 --out want.kv --quiet
check "get gives the model's KV bit for bit" "cmp -s more.kv want.kv"
"$bin" stats --db db --json > stats.json
ratio=$(sed -n 's/^{"tenant":null,"tokens":[0-9]*,"chunks":[0-9]*,"raw_bytes":\([0-9]*\),"stored_bytes":\([0-9]*\),.*/\1 \2/p' stats.json)
check "the store is compressed: raw/stored = $(echo "$ratio" | awk '{ printf "%.3f", $1 / $2 }') >= 1.8" \
    "echo '$ratio' | awk '{ exit !(\$1 >= 1.8 * \$2) }'"
check "profile list shows the profile at ctx, calibrated" "grep -q '^stories260K  *ctx  *calibrated' '$tmp/out'"
# the serve block, where redis-cli is installed
if command -v redis-cli >/dev/null; then
    awk '/<!-- quickstart-serve:/ { on = 1; next } on && /^```sh/ { inblk = 1; next } inblk && /^```/ { exit } inblk' \
        "$root/README.md" | sed "s|/tmp/seqkv.sock|$tmp/seqkv.sock|g; s|^seqkv serve \(.*\) &$|seqkv serve \1 \& echo \$! > $tmp/srv.pid; for _ in \$(seq 100); do [ -S $tmp/seqkv.sock ] \&\& break; sleep 0.05; done|" \
        > "$tmp/serve.sh"
    PATH="$tmp/bin:$PATH" bash "$tmp/serve.sh" > "$tmp/sout" 2> "$tmp/serr"
    [ -s "$tmp/srv.pid" ] && kill "$(cat "$tmp/srv.pid")" 2>/dev/null || true
    check "redis-cli KV.LOOKUP with text token ids finds the whole line" "[ \"\$(head -1 '$tmp/sout')\" = 256 ]"
    check "redis-cli KV.STATS answers" "grep -q tokens '$tmp/sout'"
else
    echo "quickstart: redis-cli not installed: the serve block not run"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
