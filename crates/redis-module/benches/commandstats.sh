#!/usr/bin/env bash
# What one decision costs the Redis server: tollgate's module
# (`TOLLGATE.LEAN`, what the client sends for one GCRA limit), the lean
# script (`crates/redis/src/gcra.lua`, the fallback without the module) and
# redis-cell (`CL.THROTTLE`), all on one server, interleaved round by round,
# on four workloads (the table). See crates/redis/BENCHMARKS.md.
#
#   REDIS_CELL_SO=/tmp/redis-cell/target/release/libredis_cell.so \
#     bash crates/redis-module/benches/commandstats.sh [ROUNDS]
#   N=50000 PEERS="module-hot cell-hot" REDIS_CELL_SO=… bash crates/redis-module/benches/commandstats.sh 3
#
# REDIS_CELL_SO is the path of redis-cell's module (libredis_cell.so) from
# its latest release, 0.5.0, built in release mode outside this repository:
# nothing of redis-cell (source, binary or build steps) is kept here.
# Without it (or the old second argument) the redis-cell peers are left out.
#
# Workloads (one GCRA limit, the server's clock, the same quotas for all):
#   existing  admit on existing keys: a random key among K (10^5) keys
#             that hold a live state (1 per second, burst 10^6, each key
#             loaded first with a debt of 1,000 s): every call admitted
#             and written in place;
#   deny      one spent key (1 per hour, burst 1): every call denied,
#             nothing written;
#   new       a new key each call (a random key among 10^8; 10^6 per
#             second, burst 10^6, no TTL slack: the key lives as long as
#             its 1 µs debt, as redis-cell's; each peer starts from an
#             empty database so that none pays for expiring another's);
#   hot       one hot key admitted on every call (10^6 per second, burst
#             10^6: the state is in the past at every call).
# Peers: module-<workload> (TOLLGATE.LEAN), script-<workload> (gcra.lua by
# EVALSHA, the client's arguments), cell-<workload> (CL.THROTTLE), and the
# floors empty-script, bare-script (TIME + GET + SET).
#
# Per round and peer, three figures:
#   usec   Redis CPU per call of the command itself (INFO commandstats
#          usec_per_call), `redis-benchmark -c 1 -n N`;
#   cpu16, cpu64
#          the server process's whole CPU time (INFO cpu used_cpu_user +
#          used_cpu_sys deltas: reading and parsing the request, the
#          command, the reply, the socket, expiring keys) per decision
#          during `redis-benchmark -c 1 -P 16` / `-P 64`, in µs. It counts
#          only the time the server ran, so it holds while other processes
#          compete for the cores; 1 / cpu is the pipelined rate the server
#          sustains once it is the bottleneck.
# (and the wall-clock decisions/s of the pipelined runs, for a quiet
# machine). Then the medians per peer, the medians of the per-round ratios
# module / redis-cell and script / redis-cell (same round, same server),
# bytes per key (one admission per random key, 1 per hour: every key kept;
# KEYS_N keys, 10^5 by default) and the load average before and after.
#
# Builds the module in release mode first. Needs redis-server, redis-cli and
# redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
cell=${REDIS_CELL_SO:-${2:-}}
n=${N:-200000}
k=${K:-100000}

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
lean=$(cli SCRIPT LOAD "$(cat crates/redis/src/gcra.lua)")

# The limit's arguments: alg scale interval capacity m x, in ticks of 1 ns,
# m = 9e15 / (1000 µs-units · scale 1); the call's: op now cost slack stamp.
fast=(g 1 1000 1000000000 9000000000000 0)            # 10^6/s, burst 10^6
second=(g 1 1000000000 1000000000000000 9000000000000 0) # 1/s, burst 10^6
hour=(g 1 3600000000000 3600000000000 9000000000000 0)  # 1/hour, burst 1
call=(c '' 1 1000 0)
# No slack: the key lives as long as its debt (1 µs, rounded up to 1 ms),
# as redis-cell's (its TTL is the debt in whole milliseconds, here 0).
call_new=(c '' 1 0 0)

# peer -> "stat command..." joined by the unit separator, so that an empty
# argument (the call's `now`) survives.
spec() { local IFS=$'\x1f'; echo "$*"; }
declare -A peer
peer[empty-script]=$(spec evalsha EVALSHA "$empty" 0)
peer[bare-script]=$(spec evalsha EVALSHA "$bare" 1 bare)
peer[module-existing]=$(spec tollgate.lean TOLLGATE.LEAN me:__rand_int__ "${second[@]}" "${call[@]}")
peer[module-deny]=$(spec tollgate.lean TOLLGATE.LEAN md "${hour[@]}" "${call[@]}")
peer[module-new]=$(spec tollgate.lean TOLLGATE.LEAN mn:__rand_int__ "${fast[@]}" "${call_new[@]}")
peer[module-hot]=$(spec tollgate.lean TOLLGATE.LEAN mh "${fast[@]}" "${call[@]}")
peer[script-existing]=$(spec evalsha EVALSHA "$lean" 1 se:__rand_int__ "${call[@]}" "${second[@]}")
peer[script-deny]=$(spec evalsha EVALSHA "$lean" 1 sd "${call[@]}" "${hour[@]}")
peer[script-new]=$(spec evalsha EVALSHA "$lean" 1 sn:__rand_int__ "${call_new[@]}" "${fast[@]}")
peer[script-hot]=$(spec evalsha EVALSHA "$lean" 1 sh "${call[@]}" "${fast[@]}")
order=(empty-script bare-script)
kinds=(existing deny new hot)
if [[ -n $cell ]]; then
  # CL.THROTTLE key max_burst count period [quantity]: the same quotas.
  peer[cell-existing]=$(spec cl.throttle CL.THROTTLE ce:__rand_int__ 1000000 1 1)
  peer[cell-deny]=$(spec cl.throttle CL.THROTTLE cd 0 1 3600)
  peer[cell-new]=$(spec cl.throttle CL.THROTTLE cn:__rand_int__ 1000000 1000000 1)
  peer[cell-hot]=$(spec cl.throttle CL.THROTTLE ch 1000000 1000000 1)
fi
for kind in "${kinds[@]}"; do
  order+=("module-$kind" "script-$kind")
  [[ -n $cell ]] && order+=("cell-$kind")
done
if [[ -n ${PEERS:-} ]]; then read -r -a order <<<"$PEERS"; fi

# The K existing keys of each peer, named as redis-benchmark names them
# (__rand_int__ is 12 digits, zero-padded, below -r), each loaded with a
# debt of 1,000 permits of 1 s, in database 0 with the spent keys (denied
# from their first call). The new-key peers run in database 1, emptied
# before and after each: no peer pays for expiring another's keys.
existing_keys() { # in RESP through redis-cli --pipe (the `now` is empty)
  awk -v k="$k" -v sha="$lean" -v cell="${cell:+1}" -v limit="${second[*]}" '
    function resp(line,   a, m, i) {
      m = split(line, a, "|")
      printf "*%d\r\n", m
      for (i = 1; i <= m; i++) printf "$%d\r\n%s\r\n", length(a[i]), a[i]
    }
    BEGIN {
      gsub(" ", "|", limit)
      for (i = 0; i < k; i++) {
        key = sprintf("%012d", i)
        resp("TOLLGATE.LEAN|me:" key "|" limit "|c||1000|1000|0")
        resp("EVALSHA|" sha "|1|se:" key "|c||1000|1000|0|" limit)
        if (cell) resp("CL.THROTTLE|ce:" key "|1000000|1|1|1000")
      }
    }' | cli --pipe >/dev/null
}
echo "# loading ${k} existing keys per peer" >&2
cli FLUSHALL SYNC >/dev/null
existing_keys
cli TOLLGATE.LEAN md "${hour[@]}" "${call[@]}" >/dev/null
cli EVALSHA "$lean" 1 sd "${call[@]}" "${hour[@]}" >/dev/null
if [[ -n $cell ]]; then cli CL.THROTTLE cd 0 1 3600 >/dev/null; fi

cpu() { cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
calls() { cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p"; }
bench() { # db range args...
  redis-benchmark -p "$port" --dbnum "$1" -c 1 -r "$2" -n "$n" "${@:3}"
}

pipelined() { # stat db range depth cmd... -> "rps cpu_us_per_call"
  local stat=$1 db=$2 range=$3 depth=$4; shift 4
  cli CONFIG RESETSTAT >/dev/null
  local before after rps calls_made
  before=$(cpu)
  rps=$(bench "$db" "$range" -P "$depth" --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  after=$(cpu)
  calls_made=$(calls "$stat")
  echo "$rps $(awk -v a="$before" -v b="$after" -v k="${calls_made:-0}" 'BEGIN { if (k > 0) printf "%.3f", (b - a) * 1e6 / k; else print "nan" }')"
}

measure() { # name
  local spec db=0 range=100000000
  IFS=$'\x1f' read -r -a spec <<<"${peer[$1]}"
  [[ $1 == *-existing ]] && range=$k
  [[ $1 == *-new ]] && db=1
  cli -n 1 FLUSHDB SYNC >/dev/null
  local stat=${spec[0]} usec
  cli CONFIG RESETSTAT >/dev/null
  bench "$db" "$range" -q "${spec[@]:1}" >/dev/null 2>&1
  usec=$(cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")
  cli -n 1 FLUSHDB SYNC >/dev/null
  local p16 p64 r16 c16 r64 c64
  p16=$(pipelined "$stat" "$db" "$range" 16 "${spec[@]:1}")
  cli -n 1 FLUSHDB SYNC >/dev/null
  p64=$(pipelined "$stat" "$db" "$range" 64 "${spec[@]:1}")
  cli -n 1 FLUSHDB SYNC >/dev/null
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
  { if (!($2 in seen)) { seen[$2] = 1; names[++count] = $2 }
    for (c = 3; c <= 7; c++) v[$2, c] = v[$2, c] " " $c
    for (c = 3; c <= 7; c++) at[$1, $2, c] = $c; rounds[$1] = 1 }
  END {
    for (i = 1; i <= count; i++) {
      line = names[i]
      for (c = 3; c <= 7; c++) line = line " " median(v[names[i], c])
      print line
    }
    print "# ratios to redis-cell, median of the per-round ratios (range): usec cpu_P16 cpu_P64 (CPU: lower is better)"
    split("existing deny new hot", kinds, " ")
    split("module script", sides, " ")
    for (s = 1; s <= 2; s++) for (k = 1; k <= 4; k++) {
      m = sides[s] "-" kinds[k]; c = "cell-" kinds[k]
      if (!((m, 3) in v) || !((c, 3) in v)) continue
      line = m
      split("3 6 7", cols, " ")
      for (j = 1; j <= 3; j++) {
        list = ""; low = ""; high = ""
        for (r in rounds) if (at[r, c, cols[j]] > 0) {
          x = at[r, m, cols[j]] / at[r, c, cols[j]]
          list = list " " x
          if (low == "" || x < low) low = x
          if (high == "" || x > high) high = x
        }
        line = line sprintf(" %.2f (%.2f-%.2f)", median(list), low, high)
      }
      print line
    }
  }' "$out"

# Bytes per key: one admission per random key, 1 per hour (every key kept),
# used_memory delta / keys.
per_key() { # command...
  cli FLUSHALL SYNC >/dev/null
  local before after keys
  before=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  redis-benchmark -p "$port" -c 4 -r 1000000000 -n "${KEYS_N:-100000}" -q "$@" >/dev/null 2>&1
  after=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)/\1/p')
  keys=$(cli DBSIZE)
  awk -v a="$before" -v b="$after" -v k="$keys" 'BEGIN { printf "%.1f bytes per key (%d keys)\n", (b - a) / k, k }'
}
echo "# bytes per key, key u:<12 digits>"
echo "module $(per_key TOLLGATE.LEAN u:__rand_int__ "${hour[@]}" "${call[@]}")"
[[ -n $cell ]] && echo "cell $(per_key CL.THROTTLE u:__rand_int__ 0 1 3600)"
echo "lean-script $(per_key EVALSHA "$lean" 1 u:__rand_int__ "${call[@]}" "${hour[@]}")"
