//! Durability of an admission: answered once the master applied it (the
//! default), or once replicas acknowledged it (`WAIT`).
//!
//! # Guarantees
//!
//! Redis replicates asynchronously: a master that dies may take with it the
//! writes its replicas had not received yet, and the replica promoted in
//! its place admits those permits again. With the default,
//! [`Durability::Master`], that over-admission is bounded per key and per
//! failover by what the limit admits within the replication lag `L` (see
//! [`limiter`](crate::limiter), "Over-admission after a failover"):
//! `burst + rate·L` for GCRA, `limit` for a window. `L` is a millisecond on
//! a healthy link, but any length when the replica falls behind (a stalled
//! or slow replica, a full link), which is when a master is most likely to
//! be lost: the bound that holds whatever `L` is, is a whole `limit` (a
//! whole `burst`, plus the rate over the lag, for GCRA).
//!
//! With [`Durability::Replicas`], every check sends `WAIT replicas timeout`
//! in the same pipeline as its decision, on a connection of its own (see
//! `dedicated`), so that Redis answers it once `replicas` replicas hold
//! every write made on that connection so far — the decision's. An **admission** that
//! fewer replicas acknowledged within `timeout` is not answered as Redis's:
//! it goes to the failure policy as [`Fault::Unreplicated`](crate::Fault::Unreplicated) (fail closed
//! refuses it, fail open admits it, a local share decides it), and counts
//! towards the circuit breaker like an error. A **denial** stands as Redis
//! gave it (it wrote nothing). An admission answered as Redis's is then held
//! by `replicas` replicas; Redis Cluster promotes the replica furthest in
//! the replication stream (it ranks them by offset; Sentinel does too, after
//! their configured priority), so with `replicas` equal to each master's
//! count of replicas, a failover forgets no admission that was answered:
//! the over-admission of the failover is **0** (measured: see
//! [`cluster`](crate::cluster)), and what remains is the policy's own
//! (nothing with fail closed). With fewer, the bound holds for the
//! admissions that reached none of the promoted replica: Redis's own
//! caveat, `WAIT` does not make Redis strongly consistent, applies.
//!
//! The cost is availability as well as latency: a master left without
//! `replicas` replicas (its replica promoted elsewhere, or down) admits
//! nothing by Redis; every admission goes to the policy until a replica
//! is back.
//!
//! # Decisions
//!
//! - **A pipelined `WAIT`, not one inside the script**: Redis refuses
//!   `WAIT` in scripts. Pipelined after the decision, it adds no round
//!   trip; it adds the replica's acknowledgement (one more network hop, on
//!   the replica's side) to each check's latency. Measured in
//!   `BENCHMARKS.md`, "Cluster under change".
//! - **On a dedicated connection**: a blocked `WAIT` blocks its
//!   connection, and Redis answers a connection in order. On the shared
//!   one, every call pipelined behind it — other keys, other limiters,
//!   other durable checks — waited for it: on a master left without a
//!   replica, 252–295 durable admissions ended as timeouts queued behind
//!   one another, 4–6 as `Unreplicated`. Each durable check now takes a
//!   connection of its own for its exchange (kept idle for the next, up to
//!   16 per node; one more connection per concurrent durable check):
//!   measured, every refusal on that master `Unreplicated`, and the calls
//!   without `WAIT` on it decided by Redis throughout.
//! - **Checks and leases wait; peeks and refunds do not**: a peek writes
//!   nothing, and a refund lost in a failover leaves fewer permits, never
//!   more. Controls (reset, refund, penalty, lists) do not wait either.
//! - **Per rate limiter**: the concurrency limiter
//!   ([`concurrency`](crate::concurrency)) does not take this setting.
//! - **Not batched**: a limiter that waits never joins a
//!   [`Batcher`](crate::Batcher)'s batches (one `WAIT` per batch would hold
//!   every entry for the slowest replica); its decisions take its own path.
//! - **Redis's timer, not the setting, ends an unanswered `WAIT`**: Redis
//!   checks a blocked client's timeout on its cron tick (`hz 10` by
//!   default: every 100 ms), so `WAIT 1 10` with no replica to answer
//!   returns after up to 100 ms (measured: 100 ms with `redis-cli` on
//!   7.0.15). The dedicated connection has no response timeout of its own
//!   (the deadline bounds the call): with a deadline shorter than the
//!   timeout plus a tick, such an admission reaches the failure policy as
//!   a timeout, not as [`Fault::Unreplicated`](crate::Fault::Unreplicated):
//!   the same decision, counted under another reason. Give the deadline at
//!   least the timeout plus 100 ms (or raise Redis's `hz`) where the
//!   reason matters; the check below does not refuse a shorter one.
//! - **Validated when the limiter is built**: at least one replica, a
//!   timeout of at least a millisecond (`WAIT … 0` would block forever) and
//!   shorter than the limiter's deadline (else every unreplicated admission
//!   would end as a timeout rather than reach the policy as what it is).

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
