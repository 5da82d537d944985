#!/usr/bin/env bash
# Redis CPU per decision (INFO commandstats usec_per_call) and pipelined
# decisions per second (redis-benchmark -c 1 -P 16 / -P 64) for: the empty
# script, the bare TIME+GET+SET script, tollgate's script, tollgate's module
# and, when given, redis-cell's CL.THROTTLE: all on one server, interleaved
# round by round. See crates/redis-module/BENCHMARKS.md.
#
#   bash crates/redis-module/benches/commandstats.sh [ROUNDS] [path/to/libredis_cell.so]
#
# Builds the module in release mode first. Prints one line per measure and
# round, then the medians.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
cell=${2:-}
n=${N:-200000}

cargo build --release -p tollgate-redis-module >/dev/null 2>&1
module=$PWD/target/release/libtollgate_redis_module.so
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
args=(--port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --loadmodule "$module")
[[ -n $cell ]] && args+=(--loadmodule "$cell")
redis-server "${args[@]}" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until [[ $(cli PING 2>/dev/null) == PONG ]]; do sleep 0.05; done

empty=$(cli SCRIPT LOAD "return 1")
bare=$(cli SCRIPT LOAD "local t = redis.call('TIME') redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], t[1], 'PX', 60000) return 1")
decide=$(cli SCRIPT LOAD "$(cat crates/redis/src/decide.lua)")
lean=$(cli SCRIPT LOAD "$(cat crates/redis/src/gcra.lua)")

# GCRA, one limit. Admit: 10^6 per second, burst 10^6 (scale 1, interval
# 1000 ticks, capacity 10^9): every call fits. Deny: 1 per hour, burst 1
# (interval = capacity = 3.6*10^12 ticks): every call after the first is
# denied. The script's arguments: op now cost slack stamp alg a1 a2 a3 a4 x,
# a4 being the GCRA state's modulus m = 9e15 / (1000 * scale) on the
# server's clock (see tollgate_redis::script).
admit_limit=(g 1 1000 1000000000 9000000000000 0)
deny_limit=(g 1 3600000000000 3600000000000 9000000000000 0)
call=(c '' 1 1000 0)

# name, stat, kind (admit|deny|floor), command...
peers=()
run() { # kind name stat cmd... -> "usec_per_call rps16 rps64"
    local stat=$1; shift
    cli CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -c 1 -n "$n" -q "$@" >/dev/null 2>&1
    local usec
    usec=$(cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")
    local p16 p64
    p16=$(redis-benchmark -p "$port" -c 1 -P 16 -n "$n" --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
    p64=$(redis-benchmark -p "$port" -c 1 -P 64 -n "$n" --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
    echo "$usec $p16 $p64"
}

measure() { # label stat cmd...
    local label=$1; shift
    local out
    out=$(run "$@")
    echo "$round $label $out"
}

echo "# loadavg before: $(cat /proc/loadavg)"
echo "# round peer usec_per_call rps_P16 rps_P64"
for round in $(seq 1 "$rounds"); do
    measure empty-script evalsha EVALSHA "$empty" 0
    measure bare-script evalsha EVALSHA "$bare" 1 bare
    # Admits: fresh keys would start full; one key under a quota it never reaches.
    measure script-admit evalsha EVALSHA "$decide" 1 sa "${call[@]}" "${admit_limit[@]}"
    measure lean-admit evalsha EVALSHA "$lean" 1 la "${call[@]}" "${admit_limit[@]}"
    measure module-admit tollgate.decide TOLLGATE.DECIDE ma "${admit_limit[@]}" "${call[@]}"
    [[ -n $cell ]] && measure cell-admit cl.throttle CL.THROTTLE ca 1000000 1000000 1
    cli TOLLGATE.DECIDE md "${deny_limit[@]}" "${call[@]}" >/dev/null
    cli EVALSHA "$decide" 1 sd "${call[@]}" "${deny_limit[@]}" >/dev/null
    cli EVALSHA "$lean" 1 ld "${call[@]}" "${deny_limit[@]}" >/dev/null
    measure script-deny evalsha EVALSHA "$decide" 1 sd "${call[@]}" "${deny_limit[@]}"
    measure lean-deny evalsha EVALSHA "$lean" 1 ld "${call[@]}" "${deny_limit[@]}"
    measure module-deny tollgate.decide TOLLGATE.DECIDE md "${deny_limit[@]}" "${call[@]}"
    if [[ -n $cell ]]; then
        cli CL.THROTTLE cd 0 1 3600 >/dev/null
        measure cell-deny cl.throttle CL.THROTTLE cd 0 1 3600
    fi
done
echo "# loadavg after: $(cat /proc/loadavg)"
