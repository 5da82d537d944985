#!/usr/bin/env bash
# Redis CPU per TOLLGATE.DECIDE call (usec_per_call, INFO commandstats):
# one GCRA limit beside one warm-up limit, each admitted on every call on
# one key, the server's clock; N calls a peer, R rounds, interleaved.
#
#   cargo build --release -p tollgate-redis-module
#   N=50000 R=5 bash crates/redis-module/benches/warm_up_cost.sh
set -eu
SO=$(realpath "${SO:-target/release/libtollgate_redis_module.so}")
N=${N:-50000}; R=${R:-3}; PORT=${PORT:-$((20000 + RANDOM % 20000))}
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" --loadmodule "$SO" >/dev/null 2>&1 &
PID=$!
trap 'kill $PID; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
cli() { redis-cli -p "$PORT" "$@"; }
# 10^6 per second, burst 10^6 (µs clock: m = 9·10^15 / 1000).
GCRA=(tollgate.decide kg g 1 1000 1000000000 9000000000000 0 c '' 1 10 0)
# 10^6 per second (l/t = 1/1000 per ns), burst 10^6, 1 s warm-up, cold factor 3.
WARM=(tollgate.decide kw w3 1000000 1 1000 1000000000 0 c '' 1 10 0)
per_call() {
  cli config resetstat >/dev/null
  redis-benchmark -p "$PORT" -c 1 -n "$N" "$@" >/dev/null
  cli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_tollgate.decide:.*usec_per_call=\([0-9.]*\).*/\1/p'
}
cli "${WARM[@]}" | head -1 >/dev/null
for r in $(seq "$R"); do
  g=$(per_call "${GCRA[@]}"); w=$(per_call "${WARM[@]}")
  echo "round $r: gcra ${g} us/call, warm-up ${w} us/call"
done
