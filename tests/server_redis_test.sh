#!/usr/bin/env bash
# The server driven by redis-cli (Debian: redis-tools) over its Unix
# socket: every command of server/README.md's examples, the KV bytes that
# come back compared with the ones put. Skips (exit 77) without redis-cli.
# usage: server_redis_test.sh SEQKV_BINARY
set -u
bin=$1
if ! command -v redis-cli >/dev/null 2>&1; then
    echo "SKIP: redis-cli not installed (Debian package redis-tools)"
    exit 77
fi
tmp=$(mktemp -d)
sock=$tmp/s.sock
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
cli() { redis-cli -s "$sock" "$@"; }

"$bin" serve --db "$tmp/db" --socket "$sock" --threads 2 --quiet &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && cli PING >/dev/null 2>&1 && break; sleep 0.05; done

[ "$(cli PING)" = PONG ] && ok || bad "PING"
[ "$(stat -c %a "$sock")" = 600 ] && ok || bad "socket mode is $(stat -c %a "$sock")"
[ "$(cli KV.PROFILE SET tiny layers 1 kv_heads 1 head_dim 4 dtype fp32 vocab 2147483647)" = OK ] && ok ||
    bad "KV.PROFILE SET"
cli KV.PROFILE GET tiny | grep -qx fp32 && ok || bad "KV.PROFILE GET shows the dtype"
# two tokens, 0x41414141 and 0x42424242 as little-endian u32: "AAAABBBB";
# their KV: 1 layer x (k, v) x 2 tokens x 4 fp32 = 64 bytes
printf 'kkkkkkkkkkkkkkkkKKKKKKKKKKKKKKKKvvvvvvvvvvvvvvvvVVVVVVVVVVVVVVVV' >"$tmp/kv.bin"
out=$(cli -x KV.PUT tiny AAAABBBB <"$tmp/kv.bin")
[ "$out" = 2 ] && ok || bad "KV.PUT stored '$out', wanted 2"
[ "$(cli KV.LOOKUP tiny AAAABBBBCCCC)" = 2 ] && ok || bad "KV.LOOKUP"
cli --raw KV.GET tiny AAAABBBB | head -c 64 >"$tmp/got.bin"
cmp -s "$tmp/kv.bin" "$tmp/got.bin" && ok || bad "KV.GET bytes differ"
cli --raw KV.GET tiny AAAABBBB 1 | head -c 32 >"$tmp/got1.bin"
# one token: k of token 0 then v of token 0
printf 'kkkkkkkkkkkkkkkkvvvvvvvvvvvvvvvv' | cmp -s - "$tmp/got1.bin" && ok || bad "KV.GET n=1"
cli KV.GET tiny CCCC | grep -q '^NOTFOUND' && ok || bad "KV.GET of nothing cached"
printf 'short' | cli -x KV.PUT tiny AAAA | grep -q '^SHAPE' && ok || bad "KV.PUT wrong shape"
cli FROB | grep -q "unknown command" && ok || bad "unknown command"
cli KV.STATS | grep -qx raw_bytes && ok || bad "KV.STATS"
cli INFO tenants | grep -q '^tenant_default:lookups=1' && ok || bad "INFO tenants"
cli INFO latencystats | grep -q '^latency_percentiles_usec_kv.get:' && ok || bad "INFO latencystats"
cli -3 HELLO 3 | grep -q seqkv && ok || bad "HELLO 3"
# token ids as text: TOKENS "<ids>" in place of the binary tokens
# 3 tokens x 32 bytes (1 layer x k, v x 4 fp32)
head -c 96 /dev/zero | tr '\0' t >"$tmp/kv3.bin"
[ "$(cli -x KV.PUT tiny TOKENS "1 403 12" <"$tmp/kv3.bin")" = 3 ] && ok || bad "KV.PUT TOKENS"
[ "$(cli KV.LOOKUP tiny TOKENS "1 403 12 9")" = 3 ] && ok || bad "KV.LOOKUP TOKENS"
[ "$(cli KV.LOOKUP tiny TOKENS "1 403")" = 2 ] && ok || bad "KV.LOOKUP TOKENS of a prefix"
cli --raw KV.GET tiny TOKENS "1 403 12" | head -c 96 | cmp -s - "$tmp/kv3.bin" && ok || bad "KV.GET TOKENS bytes"
# the text and the binary forms name the same tokens: 0x41414141 = 1094795585
[ "$(cli KV.LOOKUP tiny TOKENS "1094795585 1094795585")" = 1 ] && ok || bad "text and binary ids agree"
cli KV.LOOKUP tiny TOKENS "1 two 3" | grep -q '^ERR TOKENS: id 2, "two", is not a token id' && ok || bad "non-number"
cli KV.LOOKUP tiny TOKENS "1 -2" | grep -q '^ERR TOKENS: id 2, "-2"' && ok || bad "negative id"
cli KV.LOOKUP tiny TOKENS "" | grep -q '^ERR TOKENS: no token ids' && ok || bad "no ids"
[ "$(cli KV.DEL tiny TOKENS "1 403 12")" = 3 ] && ok || bad "KV.DEL TOKENS"
[ "$(cli KV.DEL tiny AAAABBBB)" = 2 ] && ok || bad "KV.DEL"
[ "$(cli KV.LOOKUP tiny AAAABBBB)" = 0 ] && ok || bad "KV.LOOKUP after KV.DEL"
[ "$(cli SHUTDOWN)" = OK ] && ok || bad "SHUTDOWN"
wait "$pid"
rc=$?
pid=
[ "$rc" = 0 ] && ok || bad "server exit status $rc"
[ ! -e "$sock" ] && ok || bad "socket left behind"
echo "server_redis_test: $pass passed, $fail failed"
[ "$fail" = 0 ]
