//! Distributed rate limiting on Redis and Redis Cluster: tollgate's
//! algorithms run as one atomic server-side script, on the server's clock.
//!
//! # Glossary
//!
//! - **[`Redis`]**: a shared, multiplexed connection to a server or a
//!   cluster ([`backend`]).
//! - **[`RedisLimiter`]**: one or more core limits ([`Limit`]: GCRA, fixed
//!   window, sliding window counter) per key, decided all-or-nothing in one
//!   round trip; answers a [`tollgate::Decision`] ([`limiter`]; its
//!   settings and their defaults: [`RedisLimiterBuilder`]).
//! - **script**: the Lua transition of every algorithm, its contract, state
//!   and resolution; a lean script per common call (one GCRA limit, one
//!   fixed window) and a general one ([`script`]).
//! - **key encoding**: collision-free, bounded, one hash slot per user key
//!   ([`key`]).
//! - **failure policy**: fail open, fail closed or a local share, with a
//!   deadline, a circuit breaker and counters ([`policy`], [`breaker`]).
//! - **cluster changes**: tollgate's router (a connection and a breaker per
//!   node), what holds while slots migrate, a master fails over, stops or
//!   joins, and the bound on over-admission ([`cluster`], "Guarantees").
//! - **durability**: an admission answered once the master applied it (the
//!   default) or once replicas acknowledged it, `WAIT` ([`durability`]).
//! - **deny cache**: standing denials answered locally ([`deny_cache`]).
//! - **batcher**: the decisions of concurrent callers coalesced into one
//!   script call per batch, each entry decided on its own
//!   ([`limiter::batch`]).
//! - **lease**: a batch of permits taken in one round trip and spent
//!   locally ([`lease`]).
//! - **controls**: reset, refund, penalty, deny and allow lists of one key,
//!   each one atomic script call ([`controls`]).
//! - **carry**: a changed quota carries each key's state by the core's
//!   `Carry` rule ([`carry`]).
//! - **observers and dry-run**: the core's decision observers, told
//!   whether Redis or the failure policy decided; dry-run reports refusals
//!   as shadow ([`observe`]).
//! - **Lyft layout**: envoyproxy/ratelimit's own fixed-window keys and
//!   counts, shared with its pods during a rolling upgrade ([`lyft`]).
//! - **calendar window**: a fixed window aligned to UTC minutes, hours,
//!   days, weeks (Monday) or months (the 1st) ([`calendar`]).
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::{Gcra, Quota};
//! use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = Redis::connect("redis://127.0.0.1:6379", &Options::default()).await?;
//! let limiter = RedisLimiter::builder(redis, "api")
//!     .limit(Gcra::new(Quota::per_second(100)?.with_burst(10)?)?)
//!     .failure_policy(FailurePolicy::FailClosed)
//!     .deadline(Duration::from_millis(5))
//!     .build()?;
//! let decision = limiter.check(b"user:42").await;
//! println!("{decision}");
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item is marked
// with the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod breaker;
pub mod calendar;
pub mod carry;
pub mod cluster;
pub mod concurrency;
pub mod config;
mod connect;
pub mod controls;
mod dedicated;
pub mod deny_cache;
pub mod durability;
pub mod key;
pub mod lease;
pub mod limit;
pub mod limiter;
pub mod lyft;
pub mod module;
pub mod observe;
pub mod policy;
pub mod script;
pub mod warm_up;

pub use backend::Redis;
pub use breaker::BreakerConfig;
pub use calendar::{CalendarUnit, CalendarWindow};
pub use config::{Options, RedisConfig, Secret, SentinelConfig, Target, TlsConfig};
pub use controls::ControlError;
pub use durability::Durability;
pub use lease::LeaseConfig;
pub use limit::{ConfigError, Limit};
pub use limiter::batch::{BatchStats, Batcher};
pub use limiter::{CostError, Outcome, RedisLimiter, RedisLimiterBuilder};
pub use module::ModuleUse;
pub use observe::RedisObserver;
pub use policy::{FailurePolicy, Fault, Source, Stats};

/// The README's example, compiled as a doctest so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
