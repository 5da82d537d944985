#!/usr/bin/env bash
# What one decision costs the Redis server, for: the empty script, the bare
# TIME+GET+SET script, tollgate's general and lean scripts, tollgate's module
# and, when given, redis-cell's CL.THROTTLE: all on one server, interleaved
# round by round. See crates/redis-module/BENCHMARKS.md.
#
#   bash crates/redis-module/benches/commandstats.sh [ROUNDS] [path/to/libredis_cell.so]
#   N=50000 PEERS="module-admit cell-admit" bash crates/redis-module/benches/commandstats.sh 5 /tmp/…/libredis_cell.so
#
# Per round and peer, four figures:
#   usec   Redis CPU per call of the command itself (INFO commandstats
#          usec_per_call), `redis-benchmark -c 1 -n N`;
#   rps16, rps64
#          decisions/s, wall clock, `redis-benchmark -c 1 -P 16` / `-P 64`
#          (only meaningful on a quiet machine);
#   cpu16, cpu64
#          the server process's whole CPU time (INFO cpu used_cpu_user +
#          used_cpu_sys deltas: parsing, the command, the reply, the socket)
#          per decision during those pipelined runs, in µs. It counts only
#          the time the server ran, so it holds while other processes
#          compete for the cores; 1/cpu is the pipelined rate the server
#          sustains once it is the bottleneck (the issue's "Redis-bound"
#          decisions/s), and the ratio module/redis-cell of cpu16 and cpu64
#          is the pipelined target read under load.
# Then the medians per peer, the median of the per-round ratios against
# redis-cell (same round, same server), bytes per key (GCRA, 1/hour, random
# keys) and the load average before and after.
#
# Builds the module in release mode first. Needs redis-server, redis-cli and
# redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
cell=${2:-}
n=${N:-200000}

cargo build --release -p tollgate-redis-module >/dev/null 2>&1
module=$PWD/target/release/libtollgate_redis_module.so
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
out=$(mktemp)
args=(--port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --loadmodule "$module")
[[ -n $cell ]] && args+=(--loadmodule "$cell")
redis-server "${args[@]}" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$dir" "$out"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until [[ $(cli PING 2>/dev/null) == PONG ]]; do sleep 0.05; done

empty=$(cli SCRIPT LOAD "return 1")
bare=$(cli SCRIPT LOAD "local t = redis.call('TIME') redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], t[1], 'PX', 60000) return 1")
decide=$(cli SCRIPT LOAD "$(cat crates/redis/src/decide.lua)")
lean=$(cli SCRIPT LOAD "$(cat crates/redis/src/gcra.lua)")

# GCRA, one limit. Admit: 10^6/s with a burst of 10^6 (scale 1, interval
# 1000 ticks, capacity 10^9): every call fits and writes. Deny: 1 per hour,
# burst 1 (interval = capacity = 3.6*10^12 ticks): every call after the
# first is denied and writes nothing. The script's arguments: op now cost
# slack stamp alg a1 a2 a3 a4 x, a4 being the GCRA state's modulus
# m = 9e15 / (1000 * scale) on the server's clock (see tollgate_redis::script).
# redis-cell gets the same quotas.
admit_limit=(g 1 1000 1000000000 9000000000000 0)
deny_limit=(g 1 3600000000000 3600000000000 9000000000000 0)
hour_limit=(g 1 3600000000000 3600000000000 9000000000000 0)
call=(c '' 1 1000 0)
# For the random-key admissions, no slack: the key lives as long as its
# debt (1 µs, rounded up to 1 ms), as redis-cell's (its TTL is the debt in
# whole milliseconds, here 0), so that both leave the same number of live
# keys behind them (the server's CPU includes expiring them and growing the
# key space).
call_new=(c '' 1 0 0)

# peer -> "stat command..." (one hot key unless the name ends in -new:
# a random key among 10^8 per call, i.e. a key created by nearly every call).
# Fields joined by the unit separator, so that an empty argument (the
# script's `now`) survives.
spec() { local IFS=$'\x1f'; echo "$*"; }
declare -A peer
peer[empty-script]=$(spec evalsha EVALSHA $empty 0)
peer[bare-script]=$(spec evalsha EVALSHA $bare 1 bare)
peer[script-admit]=$(spec evalsha EVALSHA $decide 1 sa "${call[@]}" "${admit_limit[@]}")
peer[lean-admit]=$(spec evalsha EVALSHA $lean 1 la "${call[@]}" "${admit_limit[@]}")
peer[module-admit]=$(spec tollgate.decide TOLLGATE.DECIDE ma "${admit_limit[@]}" "${call[@]}")
peer[module-admit-new]=$(spec tollgate.decide TOLLGATE.DECIDE mn:__rand_int__ "${admit_limit[@]}" "${call_new[@]}")
peer[script-deny]=$(spec evalsha EVALSHA $decide 1 sd "${call[@]}" "${deny_limit[@]}")
peer[lean-deny]=$(spec evalsha EVALSHA $lean 1 ld "${call[@]}" "${deny_limit[@]}")
peer[module-deny]=$(spec tollgate.decide TOLLGATE.DECIDE md "${deny_limit[@]}" "${call[@]}")
# TOLLGATE.LEAN: the same call, the lean scripts' one-integer reply (what
# tollgate-redis sends for one GCRA or fixed window limit).
peer[module-lean-admit]=$(spec tollgate.lean TOLLGATE.LEAN ma "${admit_limit[@]}" "${call[@]}")
peer[module-lean-admit-new]=$(spec tollgate.lean TOLLGATE.LEAN mn:__rand_int__ "${admit_limit[@]}" "${call_new[@]}")
peer[module-lean-deny]=$(spec tollgate.lean TOLLGATE.LEAN md "${deny_limit[@]}" "${call[@]}")
order=(empty-script bare-script script-admit lean-admit module-admit module-lean-admit
  module-admit-new module-lean-admit-new script-deny lean-deny module-deny module-lean-deny)
if [[ -n $cell ]]; then
  peer[cell-admit]=$(spec cl.throttle CL.THROTTLE ca 1000000 1000000 1)
  peer[cell-admit-new]=$(spec cl.throttle CL.THROTTLE cn:__rand_int__ 1000000 1000000 1)
  peer[cell-deny]=$(spec cl.throttle CL.THROTTLE cd 0 1 3600)
  order=(empty-script bare-script script-admit lean-admit module-admit module-lean-admit
    cell-admit module-admit-new module-lean-admit-new cell-admit-new script-deny lean-deny
    module-deny module-lean-deny cell-deny)
fi
if [[ -n ${PEERS:-} ]]; then read -r -a order <<<"$PEERS"; fi
# An empty database but for the (single-key) denials, which start denied.
fresh() {
  cli FLUSHALL SYNC >/dev/null
  cli TOLLGATE.DECIDE md "${deny_limit[@]}" "${call[@]}" >/dev/null
  cli EVALSHA "$decide" 1 sd "${call[@]}" "${deny_limit[@]}" >/dev/null
  cli EVALSHA "$lean" 1 ld "${call[@]}" "${deny_limit[@]}" >/dev/null
  if [[ -n $cell ]]; then cli CL.THROTTLE cd 0 1 3600 >/dev/null; fi
}
fresh

cpu() { cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
calls() { cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p"; }
bench() { redis-benchmark -p "$port" -c 1 -r 100000000 -n "$n" "$@"; }

pipelined() { # stat depth cmd... -> "rps cpu_us_per_call"
  local stat=$1 depth=$2; shift 2
  cli CONFIG RESETSTAT >/dev/null
  local before after rps k
  before=$(cpu)
  rps=$(bench -P "$depth" --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  after=$(cpu)
  k=$(calls "$stat")
  echo "$rps $(awk -v a="$before" -v b="$after" -v k="${k:-0}" 'BEGIN { if (k > 0) printf "%.3f", (b - a) * 1e6 / k; else print "nan" }')"
}

measure() { # name
  # A random-key peer starts from an empty database, so that the server
  # does not spend its measured CPU expiring the previous peer's keys.
  if [[ $1 == *-new ]]; then fresh; fi
  local spec
  IFS=$'\x1f' read -r -a spec <<<"${peer[$1]}"
  local stat=${spec[0]} usec
  cli CONFIG RESETSTAT >/dev/null
  bench -q "${spec[@]:1}" >/dev/null 2>&1
  usec=$(cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")
  local p16 p64
  p16=$(pipelined "$stat" 16 "${spec[@]:1}")
  p64=$(pipelined "$stat" 64 "${spec[@]:1}")
  local r16 c16 r64 c64
  read -r r16 c16 <<<"$p16"
  read -r r64 c64 <<<"$p64"
  echo "$round $1 $usec $r16 $r64 $c16 $c64" | tee -a "$out"
}

echo "# loadavg before: $(cat /proc/loadavg)"
echo "# round peer usec_per_call rps_P16 rps_P64 cpu_us_P16 cpu_us_P64"
for round in $(seq 1 "$rounds"); do
  for name in "${order[@]}"; do measure "$name"; done
done
echo "# loadavg after: $(cat /proc/loadavg)"

echo "# medians: peer usec_per_call rps_P16 rps_P64 cpu_us_P16 cpu_us_P64"
awk '
  function median(list,   a, m, i, j, t) {
    m = split(list, a, " ")
    for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  function least(list,   a, m, i, low) {
    m = split(list, a, " ")
    low = a[1]
    for (i = 2; i <= m; i++) if (a[i] + 0 < low + 0) low = a[i]
    return low
  }
  BEGIN { split("admit admit-new deny", kinds0, " ") }
  { if (!($2 in seen)) { seen[$2] = 1; names[++count] = $2 }
    for (c = 3; c <= 7; c++) v[$2, c] = v[$2, c] " " $c
    for (c = 3; c <= 7; c++) at[$1, $2, c] = $c; rounds[$1] = 1 }
  END {
    for (i = 1; i <= count; i++) {
      line = names[i]
      for (c = 3; c <= 7; c++) line = line " " median(v[names[i], c])
      print line
    }
    print "# minimums (the least disturbed round): peer usec_per_call cpu_us_P16 cpu_us_P64"
    for (i = 1; i <= count; i++) {
      line = names[i]
      split("3 6 7", mcols, " ")
      for (j = 1; j <= 3; j++) line = line " " least(v[names[i], mcols[j]])
      print line
    }
    print "# ratios module / redis-cell of the minimums: usec cpu_P16 cpu_P64"
    for (k = 1; k <= 6; k++) {
      m = (k > 3 ? "module-lean-" : "module-") kinds0[(k - 1) % 3 + 1]; c = "cell-" kinds0[(k - 1) % 3 + 1]
      if (!((m, 3) in v) || !((c, 3) in v)) continue
      line = m
      for (j = 1; j <= 3; j++) line = line " " sprintf("%.3f", least(v[m, mcols[j]]) / least(v[c, mcols[j]]))
      print line
    }
    print "# ratios module / redis-cell, median of the per-round ratios: usec cpu_P16 cpu_P64 (CPU: lower is better) rps_P16 rps_P64 (higher is better)"
    split("admit admit-new deny", kinds, " ")
    for (k = 1; k <= 6; k++) {
      m = (k > 3 ? "module-lean-" : "module-") kinds[(k - 1) % 3 + 1]; c = "cell-" kinds[(k - 1) % 3 + 1]
      if (!((m, 3) in v) || !((c, 3) in v)) continue
      line = m
      split("3 6 7 4 5", cols, " ")
      for (j = 1; j <= 5; j++) {
        list = ""
        for (r in rounds) if (at[r, c, cols[j]] > 0) list = list " " sprintf("%.3f", at[r, m, cols[j]] / at[r, c, cols[j]])
        line = line " " median(list)
      }
      print line
    }
  }' "$out"

# Bytes per key: one admission per random key, 1 per hour (every key kept),
# used_memory delta / keys, for the module and, when loaded, redis-cell.
per_key() { # command...
  cli FLUSHALL >/dev/null
  local before after keys
  before=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  redis-benchmark -p "$port" -c 4 -r 1000000000 -n "${KEYS_N:-100000}" -q "$@" >/dev/null 2>&1
  after=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  keys=$(cli DBSIZE)
  awk -v a="$before" -v b="$after" -v k="$keys" 'BEGIN { printf "%.1f bytes per key (%d keys)\n", (b - a) / k, k }'
}
echo "# bytes per key, key u:<12 digits>"
echo "module $(per_key TOLLGATE.DECIDE u:__rand_int__ "${hour_limit[@]}" "${call[@]}")"
echo "module-lean $(per_key TOLLGATE.LEAN u:__rand_int__ "${hour_limit[@]}" "${call[@]}")"
[[ -n $cell ]] && echo "cell $(per_key CL.THROTTLE u:__rand_int__ 0 1 3600)"
echo "lean-script $(per_key EVALSHA "$lean" 1 u:__rand_int__ "${call[@]}" "${hour_limit[@]}")"
