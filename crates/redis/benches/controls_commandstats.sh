#!/usr/bin/env bash
# Regression: Redis CPU per decision (INFO commandstats usec_per_call) before
# and after the controls' markers, for the lean scripts (gcra.lua,
# fixed.lua) and the native module, interleaved round by round on two
# servers: "before" runs the scripts of git revision $BASE (default main)
# and a module built from it, "after" the working tree's.
#
#   BEFORE_SO=path/before.so AFTER_SO=path/after.so \
#     bash crates/redis/benches/controls_commandstats.sh [ROUNDS]
#
# Cases (one key, 200,000 calls each): GCRA admit (10^6/s, burst 10^6: the
# previous TAT is in the past at every call, so the state reads as none:
# the module's worst case, where it looks for a marker), GCRA deny (1 per
# hour: a live state), fixed window admit (10^9 per hour).
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
n=${N:-200000}
base=${BASE:-main}
: "${BEFORE_SO:?a module built from $base}" "${AFTER_SO:?a module built from the working tree}"
BEFORE_SO=$(realpath "$BEFORE_SO")
AFTER_SO=$(realpath "$AFTER_SO")
dirs=()
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "${dirs[@]}"' EXIT
start() { # so port
    local dir
    dir=$(mktemp -d)
    dirs+=("$dir")
    redis-server --port "$2" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --loadmodule "$1" >/dev/null 2>&1 &
    pids+=($!)
    until [[ $(redis-cli -p "$2" PING 2>/dev/null) == PONG ]]; do sleep 0.05; done
}
before=$((20000 + RANDOM % 20000))
after=$((before + 1))
start "$BEFORE_SO" "$before"
start "$AFTER_SO" "$after"
load() { redis-cli -p "$1" SCRIPT LOAD "$2"; }
gb=$(load "$before" "$(git show "$base":crates/redis/src/gcra.lua)")
fb=$(load "$before" "$(git show "$base":crates/redis/src/fixed.lua)")
ga=$(load "$after" "$(cat crates/redis/src/gcra.lua)")
fa=$(load "$after" "$(cat crates/redis/src/fixed.lua)")

admit=(g 1 1000 1000000000 9000000000000 0)
deny=(g 1 3600000000000 3600000000000 9000000000000 0)
fixed=(f 3600000000 1000000000 0 0 0)
call=(c '' 1 1000 0)

usec() { # port stat cmd... -> usec_per_call
    local port=$1 stat=$2; shift 2
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -c 1 -n "$n" -q "$@" >/dev/null 2>&1
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p"
}

declare -A results
measure() { # label port stat cmd...
    local label=$1; shift
    local u
    u=$(usec "$@")
    results[$label]+="$u "
    echo "round $r $label $u"
}

for r in $(seq "$rounds"); do
    for side in before after; do
        port=${!side}
        if [[ $side == before ]]; then g=$gb f=$fb; else g=$ga f=$fa; fi
        measure "$side/lua-gcra-admit" "$port" evalsha EVALSHA "$g" 1 "ga$r" "${call[@]}" "${admit[@]}"
        measure "$side/lua-gcra-deny" "$port" evalsha EVALSHA "$g" 1 "gd" "${call[@]}" "${deny[@]}"
        measure "$side/lua-fixed-admit" "$port" evalsha EVALSHA "$f" 1 "fa" "${call[@]}" "${fixed[@]}"
        measure "$side/mod-gcra-admit" "$port" tollgate.decide TOLLGATE.DECIDE "ma$r" "${admit[@]}" "${call[@]}"
        measure "$side/mod-gcra-deny" "$port" tollgate.decide TOLLGATE.DECIDE "md" "${deny[@]}" "${call[@]}"
        measure "$side/mod-fixed-admit" "$port" tollgate.decide TOLLGATE.DECIDE "mf" "${fixed[@]}" "${call[@]}"
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "load average: $(cat /proc/loadavg)"
printf '%-18s %8s %8s %7s\n' case before after ratio
for case in lua-gcra-admit lua-gcra-deny lua-fixed-admit mod-gcra-admit mod-gcra-deny mod-fixed-admit; do
    b=$(echo "${results[before/$case]}" | median)
    a=$(echo "${results[after/$case]}" | median)
    printf '%-18s %8s %8s %7s\n' "$case" "$b" "$a" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}')"
done
