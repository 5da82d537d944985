//! A rate-limit server: Envoy's rate limit service (gRPC) and an HTTP JSON
//! API over tollgate's exact limiters.
//!
//! # Glossary
//!
//! - **domain**, **descriptor**, **entry**: Envoy's words. A request names a
//!   domain and a list of descriptors, each a list of `(key, value)`
//!   entries; each descriptor is matched against the domain's rules.
//! - **rule**: a node of the configuration tree with a limit (see
//!   [`config`] for the file, [`rules`] for the matching).
//! - **bucket**: the state a rule keeps per distinct list of values.
//! - **backend**: where buckets live ([`backend`]): in memory by default,
//!   on Redis or Redis Cluster when the file says so ([`redis_backend`]).
//!
//! # Running it
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = tollgate_server::Server::from_config_file("rules.yaml")?;
//! server.run(tollgate_server::shutdown_signal()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`Server::bind`] first to learn the bound addresses (port 0 resolved).
//!
//! # Modules
//!
//! [`config`] (the YAML), [`rules`] (matching), [`backend`] (state),
//! [`concurrency`] (concurrency rules' leases), [`service`] (the decision
//! every door shares), [`grpc`] (Envoy RLS v3), [`http`] (every HTTP door:
//! the JSON API, envoyproxy/ratelimit's endpoints, leases, forward-auth,
//! the admin API; every route in [`http::router`]), [`listen`]
//! (accepting), [`redis_backend`], [`tls`], [`reload`], [`metrics`],
//! [`auth`], [`server`], [`status`] (the status page), [`xds`] (rules from
//! an xDS control plane).

#![forbid(unsafe_code)]

pub mod auth;
pub mod backend;
pub mod concurrency;
pub mod config;
pub mod grpc;
pub mod health;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod redis_backend;
pub mod reload;
pub mod request;
pub mod rules;
pub mod server;
pub mod service;
pub mod status;
pub mod tls;
pub mod traces;
pub mod xds;
mod yaml;

pub use backend::{Backend, BackendError, Hit, MemoryBackend};
pub use config::{Config, ConfigError};
pub use redis_backend::RedisBackend;
pub use server::{BoundServer, ServeError, Server, shutdown_signal};
