#!/usr/bin/env bash
# Redis's own cost per decision (INFO commandstats usec_per_call), pipelined
# decisions/s and bytes per key, for tollgate's scripts beside the floors (an
# empty script, a bare TIME+GET+SET script) and, when REDIS_CELL is the path of
# redis-cell's module (.so), CL.THROTTLE in the same server. Every scenario runs
# once per round, rounds interleave the scenarios, and the median over rounds
# is printed (with the load average before and after), then every round's
# usec_per_call with its ratio to that round's bare script: see BENCHMARKS.md.
# BYTES=0 skips the bytes-per-key measure. LIFE_MS (default 11) is how
# long the random keys of the bare script and of the lean script's admits
# live, the same for both (Regression: the bare keys lived 60 s and the lean
# keys 11 ms, which flattered the lean script).
#
#   crates/redis/benches/server_cost.sh                 # 5 rounds
#   ONLY="empty bare lean_admit lean_deny" ROUNDS=7 crates/redis/benches/server_cost.sh
#   ROUNDS=9 REDIS_CELL=/tmp/redis-cell/target/release/libredis_cell.so \
#     crates/redis/benches/server_cost.sh
#
# Needs redis-server, redis-cli and redis-benchmark (redis-tools).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${ROUNDS:-5}"
n="${REQUESTS:-100000}"
port="${PORT:-$((20000 + RANDOM % 20000))}"
cli() { redis-cli -p "$port" "$@"; }

args=(--port "$port" --save "" --appendonly no --daemonize yes
  --pidfile "/tmp/tollgate-bench-$port.pid" --logfile "/tmp/tollgate-bench-$port.log")
if [[ -n "${REDIS_CELL:-}" ]]; then args+=(--loadmodule "$REDIS_CELL"); fi
redis-server "${args[@]}"
trap 'cli shutdown nosave >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

empty=$(cli SCRIPT LOAD "return 1")
life="${LIFE_MS:-11}"
bare=$(cli SCRIPT LOAD "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], t[2], 'PX', $life) return 1")
lean=$(cli -x SCRIPT LOAD < "$here/src/gcra.lua")
general=$( (echo "local OPS = 'cplr'"; cat "$here/src/prelude.lua" "$here/src/decide.lua") | cli -x SCRIPT LOAD)
fixed=$(cli -x SCRIPT LOAD < "$here/src/fixed.lua")

# GCRA 10^9 per second, burst 10^6 (scale 1, interval 1 ns): always admits;
# its key's TTL is the debt (1 ns, rounded up to 1 ms) plus the slack, so
# a slack of LIFE_MS - 1 makes it live as long as the bare script's keys.
# GCRA 1 per hour, burst 1 (interval 3.6e12 ns): one hot key, always denies
# after its first call. m = 9e15 / (1000 µs-units · scale 1).
admit_gcra=(c "" 1 $((life - 1)) 0 g 1 1 1000000 9000000000000 0)
deny_gcra=(c "" 1 10 0 g 1 3600000000000 3600000000000 9000000000000 0)
# Keys as the client names them: prefix "tollgate", limiter "bench", a tag.
admit_key='tollgate{bench|u:__rand_int__}W1t9Xq'
deny_key='tollgate{bench|hot}c4F2e8'

declare -A scenario
scenario[empty]="EVALSHA $empty 0"
scenario[bare]="EVALSHA $bare 1 bare:__rand_int__"
# The bare script on the lean admits' own keys (the client's key shape, 36
# bytes against 17): the same keys on both sides.
scenario[bare_same_keys]="EVALSHA $bare 1 $admit_key"
scenario[lean_admit]="EVALSHA $lean 1 $admit_key ${admit_gcra[*]}"
scenario[lean_deny]="EVALSHA $lean 1 $deny_key ${deny_gcra[*]}"
# The same calls in the short form the client sends them in (interval
# capacity: a check of cost 1 on the server's clock with the default slack
# of 10 ms, so only where LIFE_MS is 11).
scenario[short_admit]="EVALSHA $lean 1 $admit_key 1 1000000"
scenario[short_deny]="EVALSHA $lean 1 $deny_key 3600000000000 3600000000000"
if [[ $life != 11 ]]; then
  scenario[short_admit]=${scenario[lean_admit]}
  echo "LIFE_MS=$life: short_admit is the full form (the short form's slack is 10 ms)" >&2
fi
scenario[general_admit]="EVALSHA $general 1 $admit_key ${admit_gcra[*]}"
scenario[general_deny]="EVALSHA $general 1 $deny_key ${deny_gcra[*]}"
# Fixed window, period in µs: 10^9 per second, and 1 per hour.
admit_fixed=(c "" 1 10 0 f 1000000 1000000000 0 0 0)
deny_fixed=(c "" 1 10 0 f 3600000000 1 0 0 0)
scenario[fixed_admit]="EVALSHA $fixed 1 $admit_key ${admit_fixed[*]}"
scenario[fixed_deny]="EVALSHA $fixed 1 $deny_key ${deny_fixed[*]}"
scenario[general_fixed_admit]="EVALSHA $general 1 $admit_key ${admit_fixed[*]}"
scenario[general_fixed_deny]="EVALSHA $general 1 $deny_key ${deny_fixed[*]}"
order=(empty bare lean_admit lean_deny short_admit short_deny general_admit general_deny
  fixed_admit fixed_deny general_fixed_admit general_fixed_deny)
if [[ -n "${REDIS_CELL:-}" ]]; then
  # CL.THROTTLE key max_burst count period: 10^9 per second, burst 10^6;
  # and 1 per hour, burst 1 (max_burst 0).
  scenario[cell_admit]="CL.THROTTLE u:__rand_int__ 1000000 1000000000 1"
  scenario[cell_deny]="CL.THROTTLE hot 0 1 3600"
  order+=(cell_admit cell_deny)
fi
# ONLY="bare lean_admit" runs those scenarios only.
if [[ -n "${ONLY:-}" ]]; then read -ra order <<<"$ONLY"; fi

# redis-benchmark takes the command as separate words; "" must stay one
# (empty) argument, so build the word list with the empty string explicit.
words() {
  local -n out=$1
  out=()
  local word
  for word in ${scenario[$2]}; do out+=("$word"); done
  # The scripts' second argument (now) is the empty string: put it back.
  if [[ ${out[0]} == EVALSHA && ${#out[@]} -gt 8 ]]; then
    out=("${out[@]:0:5}" "" "${out[@]:5}")
  fi
}

stat_of() { # usec_per_call of the command that ran the scenario
  local cmd
  case "$1" in cell_*) cmd='cl.throttle' ;; *) cmd='evalsha' ;; esac
  cli INFO commandstats | tr -d '\r' | grep "^cmdstat_$cmd:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load before: $(cat /proc/loadavg)"
declare -A usec rps16 rps64
for round in $(seq "$rounds"); do
  for s in "${order[@]}"; do
    words cmd "$s"
    cli FLUSHALL >/dev/null
    cli CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -c 1 -n "$n" -r 100000000 -q "${cmd[@]}" >/dev/null
    usec[$s]+="$(stat_of "$s") "
    for p in 16 64; do
      r=$(redis-benchmark -p "$port" -c 1 -P "$p" -n "$((n * 2))" -r 100000000 --csv "${cmd[@]}" |
        tail -1 | cut -d, -f2 | tr -d '"')
      if [[ $p == 16 ]]; then rps16[$s]+="$r "; else rps64[$s]+="$r "; fi
    done
  done
  echo "round $round done: $(cat /proc/loadavg)" >&2
done
echo "load after: $(cat /proc/loadavg)"
echo
echo "| scenario | usec_per_call (median of $rounds) | -c 1 -P 16 decisions/s | -c 1 -P 64 decisions/s |"
echo "|---|---:|---:|---:|"
for s in "${order[@]}"; do
  u=$(tr ' ' '\n' <<<"${usec[$s]}" | grep . | median)
  a=$(tr ' ' '\n' <<<"${rps16[$s]}" | grep . | median)
  b=$(tr ' ' '\n' <<<"${rps64[$s]}" | grep . | median)
  echo "| $s | $u | $a | $b |"
done

# Every round's usec_per_call, and its ratio to the same round's bare script
# (the lean script's target is its ratio to the bare script in every round,
# not only the median's).
echo
printf '| round |'
for s in "${order[@]}"; do printf ' %s |' "$s"; done
echo
printf '|---|'
for _ in "${order[@]}"; do printf -- '---:|'; done
echo
for round in $(seq "$rounds"); do
  printf '| %d |' "$round"
  bare_u=$(tr ' ' '\n' <<<"${usec[bare]:-}" | grep . | sed -n "${round}p" || true)
  for s in "${order[@]}"; do
    u=$(tr ' ' '\n' <<<"${usec[$s]}" | grep . | sed -n "${round}p")
    if [[ -n $bare_u && $s != bare ]]; then
      awk -v u="$u" -v b="$bare_u" 'BEGIN {printf " %s (%.2f×) |", u, u / b}'
    else
      printf ' %s |' "$u"
    fi
  done
  echo
done

# Bytes per key: 100,000 distinct keys of a 1-per-hour quota (every key
# admitted once and kept for an hour), INFO memory delta / DBSIZE.
bytes_per_key() {
  cli FLUSHALL >/dev/null
  local before after keys
  before=$(cli INFO memory | tr -d '\r' | grep '^used_memory:' | cut -d: -f2)
  redis-benchmark -p "$port" -c 4 -n 100000 -r 1000000000 -q "$@" >/dev/null
  after=$(cli INFO memory | tr -d '\r' | grep '^used_memory:' | cut -d: -f2)
  keys=$(cli DBSIZE)
  awk -v a="$after" -v b="$before" -v k="$keys" 'BEGIN {printf "%.1f B/key over %d keys", (a - b) / k, k}'
}
if [[ ${BYTES:-1} == 0 ]]; then exit 0; fi
echo
echo "| bytes per key (GCRA, 1 per hour) | |"
echo "|---|---:|"
hour=(c "" 1 10 0 g 1 3600000000000 3600000000000 9000000000000 0)
echo "| tollgate lean script, key \`tollgate{bench\\|u:<12 digits>}<6-byte tag>\` | $(bytes_per_key EVALSHA "$lean" 1 'tollgate{bench|u:__rand_int__}c4F2e8' "${hour[@]:0:1}" "" "${hour[@]:2}") |"
echo "| tollgate lean script, key \`u:<12 digits>\` (same key as redis-cell) | $(bytes_per_key EVALSHA "$lean" 1 'u:__rand_int__' "${hour[@]:0:1}" "" "${hour[@]:2}") |"
if [[ -n "${REDIS_CELL:-}" ]]; then
  echo "| redis-cell CL.THROTTLE, key \`u:<12 digits>\` | $(bytes_per_key CL.THROTTLE 'u:__rand_int__' 0 1 3600) |"
fi
