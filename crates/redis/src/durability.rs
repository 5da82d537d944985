//! Durability of an admission: answered once the master applied it (the
//! default), or once replicas acknowledged it (`WAIT`).
//!
//! # Guarantees
//!
//! Redis replicates asynchronously: a master that dies may take with it the
//! writes its replicas had not received, and the promoted replica admits
//! those permits again.
//!
//! - [`Durability::Master`] (the default): that over-admission is bounded
//!   per key and per failover by what the limit admits within the
//!   replication lag `L` (`burst + rate·L` for GCRA, `limit` for a window;
//!   see [`limiter`](crate::limiter), "Over-admission after a failover").
//!   `L` is a millisecond on a healthy link but any length when the replica
//!   falls behind: whatever `L` is, a whole `limit` (for GCRA, a whole
//!   `burst` plus the rate over the lag).
//! - [`Durability::Replicas`]: each check pipelines `WAIT replicas timeout`
//!   after its decision, on a connection of its own. An **admission** fewer
//!   replicas acknowledged within `timeout` goes to the failure policy as
//!   [`Fault::Unreplicated`](crate::Fault::Unreplicated); a **denial**
//!   stands. With `replicas` equal to each master's replica count a
//!   failover forgets no answered admission: **0** over-admission
//!   (measured: see [`cluster`](crate::cluster)). The cost: a replica's
//!   acknowledgement added to each check's latency, and a master left
//!   without `replicas` replicas admits nothing by Redis.
//!
//! # Parameters and rules
//!
//! - `replicas` at least 1; `timeout` at least 1 ms and shorter than the
//!   limiter's deadline: checked when the limiter is built. No default:
//!   durability is asked for.
//! - Give the deadline at least `timeout` + 100 ms where the reason
//!   matters: Redis ends an unanswered `WAIT` on its cron tick (`hz 10`).
//! - Checks and leases wait; peeks, refunds and controls do not. A waiting
//!   limiter never joins a [`Batcher`](crate::Batcher)'s batches; the
//!   concurrency limiter does not take this setting.
//!
//! Each rule in full, and the measurements behind the dedicated connection
//! and the `WAIT` timer: `crates/redis/docs/durability.md`; the latency:
//! `BENCHMARKS.md`, "Cluster under change".
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::{Gcra, Quota};
//! use tollgate_redis::{Durability, Options, Redis, RedisLimiter};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = Redis::connect("redis://127.0.0.1:6379", &Options::default()).await?;
//! let limiter = RedisLimiter::builder(redis, "api")
//!     .limit(Gcra::new(Quota::per_second(100)?)?)
//!     .durability(Durability::Replicas { replicas: 1, timeout: Duration::from_millis(2) })
//!     .deadline(Duration::from_millis(150)) // the timeout, plus Redis's 100 ms tick
//!     .build()?;
//! # let _ = limiter;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

use crate::limit::ConfigError;

/// When an admission is answered: once the master applied it, or once
/// replicas hold it too (see the [module docs](self)).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::{Gcra, Quota};
/// use tollgate_redis::{Durability, FailurePolicy, Options, Redis, RedisLimiter};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = Redis::connect_cluster(&["redis://10.0.0.1:7000"], &Options::default()).await?;
/// let limiter = RedisLimiter::builder(redis, "api")
///     .limit(Gcra::new(Quota::per_second(100)?)?)
///     .failure_policy(FailurePolicy::FailClosed)
///     .deadline(Duration::from_millis(20))
///     // Answered once one replica holds it, or refused after 5 ms.
///     .durability(Durability::Replicas {
///         replicas: 1,
///         timeout: Duration::from_millis(5),
///     })
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Once the master applied it; replicas receive it asynchronously. The
    /// default.
    #[default]
    Master,
    /// Once `replicas` replicas acknowledged it (`WAIT replicas timeout`);
    /// an admission fewer acknowledged within `timeout` goes to the
    /// failure policy.
    Replicas {
        /// How many replicas must hold it (at least 1).
        replicas: u32,
        /// How long to wait for them (at least 1 ms, whole milliseconds,
        /// and shorter than the limiter's deadline).
        timeout: Duration,
    },
}

impl Durability {
    /// Checks the setting against a limiter's `deadline`, as
    /// [`build`](crate::RedisLimiterBuilder::build) does (for a
    /// configuration read before any limiter is built).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] for no replica, a timeout under a
    /// millisecond or not in whole milliseconds, or one not shorter than
    /// the deadline.
    pub fn check(&self, deadline: Duration) -> Result<(), ConfigError> {
        let Durability::Replicas { replicas, timeout } = *self else {
            return Ok(());
        };
        if replicas == 0 {
            return Err(ConfigError::Invalid(
                "durability: at least one replica must acknowledge (0 is the default, Master)",
            ));
        }
        if timeout < Duration::from_millis(1) || timeout.subsec_nanos() % 1_000_000 != 0 {
            return Err(ConfigError::Invalid(
                "durability: the WAIT timeout must be whole milliseconds, at least 1 (0 would wait forever)",
            ));
        }
        if timeout >= deadline {
            return Err(ConfigError::Invalid(
                "durability: the WAIT timeout must be shorter than the deadline",
            ));
        }
        Ok(())
    }

    /// `(replicas, timeout in ms)` when checks wait.
    pub(crate) fn wait(&self) -> Option<(u32, u64)> {
        match *self {
            Durability::Master => None,
            Durability::Replicas { replicas, timeout } => Some((
                replicas,
                u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            )),
        }
    }
}

/// The description of the error that sends an unreplicated admission to
/// the failure policy.
const UNREPLICATED: &str = "tollgate: the admission was not acknowledged by enough replicas";

/// The error for an admission `acked` replicas of `needed` acknowledged.
pub(crate) fn unreplicated(acked: u64, needed: u32) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        UNREPLICATED,
        format!("WAIT: {acked} of {needed}"),
    ))
}

/// Whether `e` is [`unreplicated`]'s.
pub(crate) fn is_unreplicated(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Client && e.to_string().contains(UNREPLICATED)
}

/// A connection that, when waiting, follows each command by `WAIT` in one
/// pipeline and keeps the count of replicas that acknowledged.
pub(crate) struct Waiting<C> {
    inner: C,
    wait: Option<(u32, u64)>,
    /// Replicas that acknowledged the last command; `None` before any, or
    /// when not waiting.
    acked: Option<u64>,
}

impl<C> Waiting<C> {
    /// `inner`, waiting as `wait` says ([`Durability::wait`]).
    pub(crate) fn new(inner: C, wait: Option<(u32, u64)>) -> Waiting<C> {
        Waiting {
            inner,
            wait,
            acked: None,
        }
    }

    /// `Err` with [`unreplicated`] when waiting and the last command was
    /// acknowledged by fewer replicas than needed.
    pub(crate) fn replicated(&self) -> Result<(), RedisError> {
        match (self.wait, self.acked) {
            (Some((needed, _)), acked) if acked.unwrap_or(0) < u64::from(needed) => {
                Err(unreplicated(acked.unwrap_or(0), needed))
            }
            _ => Ok(()),
        }
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Waiting<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let Some((replicas, timeout_ms)) = self.wait else {
            return self.inner.req_packed_command(cmd);
        };
        Box::pin(async move {
            let mut pipe = Pipeline::with_capacity(2);
            pipe.add_command(cmd.clone());
            pipe.cmd("WAIT").arg(replicas).arg(timeout_ms);
            let mut values = self.inner.req_packed_commands(&pipe, 0, 2).await?;
            let waited = values.pop();
            let reply = values.pop();
            // An error reply to WAIT (a node that is no master any more):
            // nothing acknowledged.
            self.acked = Some(match waited {
                Some(Value::Int(n)) => u64::try_from(n).unwrap_or(0),
                _ => 0,
            });
            reply
                .ok_or_else(|| {
                    RedisError::from((ErrorKind::Parse, "tollgate: a reply missing before WAIT's"))
                })?
                .extract_error()
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // Decisions are single commands; a pipeline is passed as it is.
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_with_a_typed_error() {
        let deadline = Duration::from_millis(50);
        let replicas = |replicas, ms| Durability::Replicas {
            replicas,
            timeout: Duration::from_millis(ms),
        };
        assert_eq!(Durability::Master.check(deadline), Ok(()));
        assert_eq!(replicas(1, 10).check(deadline), Ok(()));
        for bad in [
            replicas(0, 10),
            replicas(1, 0),
            replicas(1, 50),
            replicas(2, 60),
        ] {
            assert!(
                matches!(bad.check(deadline), Err(ConfigError::Invalid(_))),
                "{bad:?}"
            );
        }
        let fraction = Durability::Replicas {
            replicas: 1,
            timeout: Duration::from_micros(1_500),
        };
        assert!(matches!(
            fraction.check(deadline),
            Err(ConfigError::Invalid(_))
        ));
        assert_eq!(replicas(2, 7).wait(), Some((2, 7)));
        assert_eq!(Durability::Master.wait(), None);
    }

    #[test]
    fn the_unreplicated_error_is_recognised() {
        assert!(is_unreplicated(&unreplicated(0, 1)));
        let other = RedisError::from((ErrorKind::Client, "something else"));
        assert!(!is_unreplicated(&other));
    }
}
