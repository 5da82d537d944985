//! `tollgate serve` started from envoyproxy/ratelimit's environment and
//! config directory, as its own `docker-compose.yml` and a Kubernetes
//! ConfigMap lay them out, against real clients on 127.0.0.1.

mod answers;
mod configmap;
mod endpoints;
mod lyft_counts;
mod redis_failures;
mod replay;
mod support;
mod variables;
