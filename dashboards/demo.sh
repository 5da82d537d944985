#!/usr/bin/env bash
# Fills the dashboard from a real run and draws it (dashboards/README.md):
# redis-server, `tollgate serve` on it, Debian's Prometheus scraping its
# /metrics every 2 s, three `tollgate loadgen` streams (one over its limit,
# one within it, one in shadow mode) and gRPC ShouldRateLimit calls as
# Envoy makes them (grpc_load.py), Redis stopped for 20 s in the middle
# (the failure policy answers: faults, redis up 0), then dashboards/render.py
# reads the panels' queries back from Prometheus into dashboards/tollgate.png.
#
#   bash dashboards/demo.sh [path/to/tollgate]   # ~3 minutes
#
# Needs redis-server, prometheus (Debian's package), and matplotlib,
# grpcio and grpcio-tools (PyPI).
# Not run in CI: its result is a picture.
set -euo pipefail
cd "$(dirname "$0")/.."
tollgate=${1:-target/release/tollgate}
[[ -x $tollgate ]] || cargo build --release -q -p tollgate-cli
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
http_port=$(free_port)
grpc_port=$(free_port)
prom_port=$(free_port)

redis-server --port "$redis_port" --save '' --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")

cat >"$work/rules.yaml" <<EOF
server:
  http_listen: 127.0.0.1:$http_port
  grpc_listen: 127.0.0.1:$grpc_port
backend:
  redis: redis://127.0.0.1:$redis_port
  failure_policy: local
  local_share: 0.5
  deadline: 50ms
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: fixed_window}
EOF
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done
"$tollgate" serve --config "$work/rules.yaml" 2>"$work/tollgate.log" &
pids+=($!)
until curl -sf "http://127.0.0.1:$http_port/metrics" >/dev/null; do sleep 0.1; done

cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: tollgate
    static_configs: [{targets: ["127.0.0.1:$http_port"]}]
EOF
prometheus --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/tsdb" \
    --web.listen-address "127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null; do sleep 0.2; done

start=$(date +%s)
load() { # user-or-plan value rate
    "$tollgate" loadgen "http://127.0.0.1:$http_port/v1/check" -X POST -H 'Content-Type: application/json' \
        --body "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"$1\",\"value\":\"$2\"}]}]}" \
        --rate "$3" --duration 150s --json >"$work/loadgen-$2.json" 2>/dev/null &
    pids+=($!)
}
load user alice 150 # over its 100/s
load user bob 90    # within it
load plan free 30   # shadow mode: denied, answered OK
# Envoy's calls: ShouldRateLimit over gRPC (user carol, within her limit).
python3 dashboards/grpc_load.py "127.0.0.1:$grpc_port" api user carol 40 150 >"$work/grpc.log" 2>&1 &
pids+=($!)
sleep 60
kill -STOP "$redis_pid" # 20 s of faults: the local share decides
sleep 20
kill -CONT "$redis_pid"
sleep 75
end=$(date +%s)

python3 dashboards/render.py --prometheus "http://127.0.0.1:$prom_port" \
    --start "$start" --end "$end" --step 2s --rate-interval 8s --out dashboards/tollgate.png
