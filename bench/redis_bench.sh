#!/usr/bin/env bash
# redis-benchmark against `seqkv serve` and redis-server in the same run:
# SET and GET of one key, 8 clients, values of 1 KiB, 64 KiB, 1 MiB and
# 16 MiB, over each server's Unix socket and over loopback TCP (seqkv's
# TCP peers AUTH with a tenant's token, as LMCache's and NIXL's do).
# Prints requests a second and seqkv / redis-server for each row.
# redis-server runs without persistence (a cache that a restart empties);
# seqkv's every SET is an fsynced LMDB commit, so SET rows also show a
# second redis-server with `appendonly yes, appendfsync always` (durable
# per write, on the same filesystem) and seqkv / that one.
# Each figure is the best of --rounds runs (default 5; the servers take
# turns), as the machine is shared and loopback throughput here has two
# modes about 2x apart for either server; --quick: one round of fewer
# requests. The servers (all their threads) run on CPU 0 and
# redis-benchmark on CPU 1, so each server has one core, as redis-server
# uses, and the client never takes it (--no-pin: the scheduler places them).
# usage: bench/redis_bench.sh [SEQKV] [--quick] [--rounds N] [--no-pin]
#   SEQKV: the seqkv binary (default build-release/cli/seqkv)
set -euo pipefail
seqkv=build-release/cli/seqkv
quick=0 rounds=5 pin=1
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 rounds=1 ;;
    --rounds) rounds=$2; shift ;;
    --no-pin) pin=0 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) seqkv=$1 ;;
    esac
    shift
done
for p in redis-server redis-benchmark; do
    command -v $p >/dev/null || { echo "redis_bench.sh: needs $p (apt install redis-server redis-tools)" >&2; exit 1; }
done
[ -x "$seqkv" ] || { echo "redis_bench.sh: no seqkv binary at $seqkv" >&2; exit 1; }
srv=() cli=()
if [ "$pin" = 1 ]; then
    if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
        srv=(taskset -c 0) cli=(taskset -c 1)
    else
        echo "redis_bench.sh: not pinned (needs taskset and two CPUs)" >&2
        pin=0
    fi
fi
seqkv=$(realpath "$seqkv")
tmp=$(mktemp -d)
spid= rpid= apid=
cleanup() {
    for p in $spid $rpid $apid; do
        kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
# three free loopback ports
read -r rport sport aport < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
token=bench-token-$$
printf 'tenant bench uid %s\ntenant bench token %s\ntenant bench admin\n' "$(id -u)" "$token" > "$tmp/seqkv.conf"
chmod 600 "$tmp/seqkv.conf"
${srv[@]} redis-server --port "$rport" --bind 127.0.0.1 --unixsocket "$tmp/r.sock" --save '' \
    --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
rpid=$!
mkdir "$tmp/aof"
${srv[@]} redis-server --port "$aport" --bind 127.0.0.1 --unixsocket "$tmp/a.sock" --save '' \
    --appendonly yes --appendfsync always --dir "$tmp/aof" --logfile "$tmp/aof.log" &
apid=$!
${srv[@]} "$seqkv" serve --db "$tmp/db" --socket "$tmp/s.sock" --port "$sport" --config "$tmp/seqkv.conf" --quiet &
spid=$!
for _ in $(seq 100); do
    [ -S "$tmp/r.sock" ] && [ -S "$tmp/a.sock" ] && [ -S "$tmp/s.sock" ] && break
    sleep 0.1
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "# redis-benchmark -t set,get -c 8, one key, best of $rounds; $(nproc) cores, $cpu;" \
    "$([ "$pin" = 1 ] && echo "servers on CPU 0, client on CPU 1" || echo "not pinned"); $(date -u +%F)"
printf '%-9s %-5s %-4s %12s %12s %8s %12s %8s\n' size via op redis-server seqkv ratio \
    redis-fsync ratio
# rps of op in redis-benchmark's CSV
rps() { grep "^\"$1\"" | cut -d, -f2 | tr -d '"'; }
ratio() { awk -v b="$1" -v a="$2" 'BEGIN { if (a + 0 > 0) printf "%.2fx", b / a; else print "-" }'; }
declare -A best
# keep the larger of best[$1] and $2
keep() { best[$1]=$(awk -v a="${best[$1]:-0}" -v b="${2:-0}" 'BEGIN { print (b + 0 > a + 0) ? b : a }'); }
sizes="1024 65536 1048576 16777216"
for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    for size in $sizes; do
        case $size in
        1024) n=40000 ;; 65536) n=20000 ;; 1048576) n=2000 ;; *) n=100 ;;
        esac
        [ "$quick" = 1 ] && n=$((n / 8))
        for via in unix tcp; do
            if [ $via = unix ]; then
                r=(-s "$tmp/r.sock") s=(-s "$tmp/s.sock") f=(-s "$tmp/a.sock")
            else
                r=(-h 127.0.0.1 -p "$rport") s=(-h 127.0.0.1 -p "$sport" -a "$token")
                f=(-h 127.0.0.1 -p "$aport")
            fi
            rout=$(${cli[@]} redis-benchmark "${r[@]}" -t set,get -d $size -c 8 -n $n --csv 2>/dev/null)
            sout=$(${cli[@]} redis-benchmark "${s[@]}" -t set,get -d $size -c 8 -n $n --csv 2>/dev/null)
            fout=$(${cli[@]} redis-benchmark "${f[@]}" -t set -d $size -c 8 -n $((n / 4)) --csv 2>/dev/null)
            for op in SET GET; do
                keep "r$size$via$op" "$(rps $op <<<"$rout")"
                keep "s$size$via$op" "$(rps $op <<<"$sout")"
            done
            keep "f${size}${via}SET" "$(rps SET <<<"$fout")"
        done
    done
done
for size in $sizes; do
    for via in unix tcp; do
        for op in SET GET; do
            a=${best[r$size$via$op]} b=${best[s$size$via$op]} c=${best[f$size$via$op]:--}
            printf '%-9s %-5s %-4s %12s %12s %8s %12s %8s\n' $size $via $op "$a" "$b" \
                "$(ratio "$b" "$a")" "$c" "$(ratio "$b" "$c")"
        done
    done
done
