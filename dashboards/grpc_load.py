#!/usr/bin/env python3
"""Envoy's side of the demo (dashboards/demo.sh): ShouldRateLimit calls over
gRPC at a steady rate, as Envoy's rate-limit filter makes them, so that the
panels that count gRPC calls fill. `tollgate loadgen` speaks HTTP only.

Compiles the server's vendored protos (crates/server/proto) with
grpcio-tools into a temporary directory, then calls for DURATION seconds.

    python3 dashboards/grpc_load.py 127.0.0.1:8081 DOMAIN KEY VALUE RATE DURATION
"""

import importlib
import os
import subprocess
import sys
import tempfile
import time

import grpc

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "server", "proto")


def stubs():
    out = tempfile.mkdtemp(prefix="tollgate-grpc-")
    files = []
    for root, _, names in os.walk(PROTO):
        for name in names:
            if name.endswith(".proto") and "discovery" not in root and "config/ratelimit" not in root:
                files.append(os.path.relpath(os.path.join(root, name), PROTO))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}", f"--python_out={out}",
         f"--grpc_python_out={out}", *files],
        check=True,
    )
    sys.path.insert(0, out)
    rls = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2")
    rls_grpc = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2_grpc")
    common = importlib.import_module("envoy.extensions.common.ratelimit.v3.ratelimit_pb2")
    return rls, rls_grpc, common


def main():
    target, domain, key, value, rate, duration = sys.argv[1:7]
    rate, duration = float(rate), float(duration)
    rls, rls_grpc, common = stubs()
    client = rls_grpc.RateLimitServiceStub(grpc.insecure_channel(target))
    entry = common.RateLimitDescriptor.Entry(key=key, value=value)
    request = rls.RateLimitRequest(domain=domain, descriptors=[common.RateLimitDescriptor(entries=[entry])])
    start = time.monotonic()
    calls = {}
    i = 0
    while True:
        due = start + i / rate
        now = time.monotonic()
        if due - start >= duration:
            break
        if due > now:
            time.sleep(due - now)
        code = rls.RateLimitResponse.Code.Name(client.ShouldRateLimit(request, timeout=5).overall_code)
        calls[code] = calls.get(code, 0) + 1
        i += 1
    print(f"{i} ShouldRateLimit calls: {calls}")


if __name__ == "__main__":
    main()
