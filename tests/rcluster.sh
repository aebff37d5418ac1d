#!/usr/bin/env bash
# A real Redis Cluster on loopback for the tests of remote/ (the cluster
# client): 3 masters with a replica each, 6 redis-server processes.
#
# usage: rcluster.sh start DIR         start one in DIR; print its seeds
#                                      ("127.0.0.1:P1,...,127.0.0.1:P6") on
#                                      stdout and write them to DIR/seeds
#        rcluster.sh stop DIR          stop every node of DIR (by pidfile) and
#                                      wait for them to exit
#        rcluster.sh wait-ok DIR       wait (30 s) until every live node of
#                                      DIR reports cluster_state:ok and every
#                                      live replica's link to its master is up
#        rcluster.sh restart DIR PORT  start the node of PORT again with its
#                                      own config (nodes.conf), e.g. after a
#                                      kill -9; then wait-ok
#
# With SKV_RCLUSTER_OWNER=PID in the environment, start also leaves a
# watchdog that stops the cluster once process PID is gone (a test runner
# killed by its timeout then leaves no servers behind); stop ends it.
#
# Each node lives in DIR/PORT/ (redis.pid, redis.log, nodes.conf). The
# ports are picked here: a random base in 20000..40000 whose 6 ports and
# their bus ports (+10000) are all free. Exits non-zero with a message and
# the nodes' log tails on stderr when anything fails.
set -u

die() {
    echo "rcluster.sh: $*" >&2
    exit 1
}

[ $# -ge 2 ] || die "usage: rcluster.sh start|stop|wait-ok DIR | restart DIR PORT"
cmd=$1
[ -d "$2" ] || die "$2: no such directory"
dir=$(cd "$2" && pwd) || die "$2: cannot enter"

# pid of the node in $1 (a DIR/PORT folder) when it is alive and a
# redis-server, else nothing
node_pid() {
    local pf=$1/redis.pid pid
    [ -s "$pf" ] || return 1
    pid=$(cat "$pf" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/comm" ] || return 1
    case $(cat "/proc/$pid/comm" 2>/dev/null) in
    redis-server*) echo "$pid" ;;
    *) return 1 ;;
    esac
}

node_dirs() {
    local d
    for d in "$dir"/*/; do
        d=${d%/}
        [[ ${d##*/} =~ ^[0-9]+$ ]] && echo "$d"
    done
}

dump_logs() {
    local d
    for d in $(node_dirs); do
        echo "---- ${d##*/}: redis.log (tail)" >&2
        tail -n 15 "$d/redis.log" >&2 2>/dev/null
    done
    [ -f "$dir/create.log" ] && { echo "---- redis-cli --cluster create" >&2; tail -n 20 "$dir/create.log" >&2; }
}

fail() {
    echo "rcluster.sh: $*" >&2
    dump_logs
    exit 1
}

# a port is free when nothing listens there (bash's /dev/tcp connect
# fails) and ss shows no socket bound to it
port_free() {
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
        return 1
    fi
    if command -v ss >/dev/null 2>&1; then
        ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q . && return 1
    fi
    return 0
}

# --repl-diskless-sync-delay 0: a replica's first sync starts at once
# rather than after Redis' default 5 s wait for other replicas to join it
start_node() {
    local port=$1 d=$dir/$1
    mkdir -p "$d" || return 1
    redis-server --port "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 2000 --bind 127.0.0.1 --protected-mode yes --save '' \
        --appendonly no --repl-diskless-sync-delay 0 --daemonize yes \
        --pidfile "$d/redis.pid" --logfile "$d/redis.log" --dir "$d" >/dev/null 2>>"$d/redis.log"
}

# wait (5 s) until the node of $1 has written its pidfile and answers PING
wait_up() {
    local i
    for i in $(seq 100); do
        if node_pid "$dir/$1" >/dev/null &&
            [ "$(redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null)" = PONG ]; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# the watchdog of DIR, if any, ends (unless it is the one stopping DIR)
stop_watchdog() {
    local pf=$dir/watchdog.pid pid
    [ -s "$pf" ] || return 0
    pid=$(cat "$pf" 2>/dev/null)
    if [ -z "${SKV_RCLUSTER_WATCHDOG:-}" ] && [[ $pid =~ ^[0-9]+$ ]] &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q rcluster-watchdog; then
        kill -TERM "$pid" 2>/dev/null
    fi
    rm -f "$pf"
}

start_watchdog() {
    local owner=$1 self
    [[ $owner =~ ^[0-9]+$ ]] || die "SKV_RCLUSTER_OWNER='$owner' is not a pid"
    self=$(readlink -f "$0")
    # polls once a second; quits when DIR is removed
    nohup bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done
        [ -d "$2" ] && SKV_RCLUSTER_WATCHDOG=1 "$3" stop "$2"' rcluster-watchdog \
        "$owner" "$dir" "$self" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
}

stop_all() {
    local d pid pids=()
    for d in $(node_dirs); do
        pid=$(node_pid "$d") && { kill -TERM "$pid" 2>/dev/null; pids+=("$pid"); }
    done
    local i p left
    for i in $(seq 100); do
        left=0
        for p in "${pids[@]}"; do
            kill -0 "$p" 2>/dev/null && left=1
        done
        [ $left = 0 ] && return 0
        sleep 0.1
    done
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    for i in $(seq 50); do
        left=0
        for p in "${pids[@]}"; do
            kill -0 "$p" 2>/dev/null && left=1
        done
        [ $left = 0 ] && return 0
        sleep 0.1
    done
    echo "rcluster.sh: some nodes of $dir did not exit" >&2
    return 1
}

# every live node reports cluster_state:ok (and, with $1 = 6, knows 6
# nodes), and every live replica has its replication link up: until then
# WAIT counts no replica and a failover may find none fit to take over
all_ok() {
    local d pid info n=0
    for d in $(node_dirs); do
        pid=$(node_pid "$d") || continue
        n=$((n + 1))
        info=$(redis-cli -h 127.0.0.1 -p "${d##*/}" CLUSTER INFO 2>/dev/null | tr -d '\r')
        grep -qx 'cluster_state:ok' <<<"$info" || return 1
        if [ -n "${1:-}" ]; then
            grep -qx "cluster_known_nodes:$1" <<<"$info" || return 1
        fi
        info=$(redis-cli -h 127.0.0.1 -p "${d##*/}" INFO replication 2>/dev/null | tr -d '\r')
        if grep -qx 'role:slave' <<<"$info"; then
            grep -qx 'master_link_status:up' <<<"$info" || return 1
        fi
    done
    [ $n -gt 0 ]
}

wait_ok() {
    local i
    for i in $(seq 300); do
        all_ok "${1:-}" && return 0
        sleep 0.1
    done
    return 1
}

case $cmd in
start)
    command -v redis-server >/dev/null 2>&1 || die "redis-server not on the PATH (Debian: redis-server)"
    command -v redis-cli >/dev/null 2>&1 || die "redis-cli not on the PATH (Debian: redis-tools)"
    [ -z "$(node_dirs)" ] || die "$dir already holds nodes; stop them and use an empty directory"
    ports=()
    for attempt in 1 2 3 4 5; do
        ports=()
        base=$((20000 + RANDOM % 19995))
        for p in $(seq "$base" $((base + 5))); do
            port_free "$p" && port_free $((p + 10000)) || { ports=(); break; }
            ports+=("$p")
        done
        [ ${#ports[@]} -eq 6 ] || continue
        ok=1
        for p in "${ports[@]}"; do
            start_node "$p" || { ok=0; break; }
        done
        if [ $ok = 1 ]; then
            for p in "${ports[@]}"; do
                wait_up "$p" || { ok=0; break; }
            done
        fi
        [ $ok = 1 ] && break
        # a port was taken after all (a race with another process): stop
        # what started, forget it, and try another base
        echo "rcluster.sh: nodes on ports ${ports[0]}.. did not start, trying other ports" >&2
        dump_logs
        stop_all
        for p in "${ports[@]}"; do rm -rf "${dir:?}/$p"; done
        ports=()
    done
    [ ${#ports[@]} -eq 6 ] || fail "no 6 free ports (and bus ports) found after 5 tries"
    addrs=()
    for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
    if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
        >"$dir/create.log" 2>&1; then
        stop_all
        fail "redis-cli --cluster create failed"
    fi
    if ! wait_ok 6; then
        stop_all
        fail "the cluster did not reach cluster_state:ok with 6 known nodes in 30 s"
    fi
    seeds=$(IFS=,; echo "${addrs[*]}")
    echo "$seeds" >"$dir/seeds"
    [ -n "${SKV_RCLUSTER_OWNER:-}" ] && start_watchdog "$SKV_RCLUSTER_OWNER"
    echo "$seeds"
    ;;
stop)
    stop_watchdog
    stop_all || exit 1
    ;;
wait-ok)
    wait_ok || fail "not every live node of $dir reports cluster_state:ok after 30 s"
    ;;
restart)
    [ $# -ge 3 ] || die "usage: rcluster.sh restart DIR PORT"
    port=$3
    [[ $port =~ ^[0-9]+$ ]] && [ -d "$dir/$port" ] || die "$dir has no node on port $port"
    node_pid "$dir/$port" >/dev/null && die "the node on port $port is still running"
    start_node "$port" || fail "redis-server on port $port did not start"
    wait_up "$port" || fail "the node on port $port does not answer"
    wait_ok || fail "not every live node of $dir reports cluster_state:ok 30 s after the restart"
    ;;
*)
    die "unknown command '$cmd' (start, stop, wait-ok, restart)"
    ;;
esac
