//! The server against real clients on 127.0.0.1: tonic's generated gRPC
//! client, reqwest, and raw HTTP/2 for malformed protobuf.

mod accept;
mod auth;
mod backend_errors;
mod bad_input;
mod budget;
mod concurrency;
mod conformance;
mod dashboard;
mod descriptors;
mod envoy_types;
mod health;
mod http_api;
mod lyft;
mod lyft_keys;
mod redis_backend;
mod redis_production;
mod reload;
mod support;
mod tls;
