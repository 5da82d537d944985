//! What a limiter answers when Redis cannot: the failure policy, its local
//! fallback and the counters.
//!
//! # The policies
//!
//! - [`FailurePolicy::FailOpen`]: admit, reporting `remaining = 0`. For
//!   limits that protect nothing critical (fairness, cost control): an outage
//!   of Redis must not become an outage of the service.
//! - [`FailurePolicy::FailClosed`]: deny, with `retry_after` the time until
//!   the circuit breaker next tries Redis. For limits that protect something
//!   that must never be overrun (logins, payments, a fragile backend).
//! - [`FailurePolicy::Local`]: decide on a local limiter of the same
//!   algorithms holding `share` of each quota (`floor(limit · share)` and
//!   `floor(burst · share)`, at least 1). With `N` nodes and `share = 1/N` the
//!   cluster as a whole stays within the quota while Redis is away; the local
//!   state starts empty and is dropped when Redis is back (the shared state
//!   never learns of the local admissions). The default.
//!
//! The local limiters are keyed by the bounded key (at most
//! [`MAX_INLINE_KEY`](crate::key::MAX_INLINE_KEY) bytes, long keys hashed) and
//! hold at most 2^20 keys each: their memory is bounded in bytes.
//!
//! A request whose cost exceeds a limit's capacity is an error before any
//! policy applies.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{
    ClockSource, Decision, FixedWindow, Gcra, KeyedLimiter, Quota, SlidingWindow, WarmUp,
};

use crate::key::BoundedKey;
use crate::limit::{ConfigError, Limit, binding};

/// What to answer when Redis does not, per limiter.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit every request.
    FailOpen,
    /// Deny every request.
    FailClosed,
    /// Decide on a local limiter holding `share` (0 < share ≤ 1) of each
    /// quota.
    Local {
        /// The fraction of each limit and burst this node may admit alone.
        share: f64,
    },
}

impl Default for FailurePolicy {
    /// [`FailurePolicy::Local`] with a share of 1 / 4.
    fn default() -> FailurePolicy {
        FailurePolicy::Local { share: 0.25 }
    }
}

/// Why a decision was taken by the policy rather than by Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Redis did not answer within the deadline.
    Timeout,
    /// Redis or the connection answered with an error.
    Error,
    /// The circuit breaker is open: Redis was not asked.
    BreakerOpen,
    /// Too many calls already waiting on Redis: this one was not queued.
    Overloaded,
    /// The script answered this call with an error of its own (an argument
    /// it refuses, or a Lua error): a problem of this key or call, not of
    /// Redis, which answered. It does not count towards the breaker. (A
    /// state the script cannot read is not an error: see
    /// [`script`](crate::script), "Foreign values".)
    Script,
    /// With [`Durability::Replicas`](crate::Durability::Replicas): Redis
    /// admitted, but fewer replicas than asked acknowledged the admission
    /// within the `WAIT` timeout, so a failover could forget it. It counts
    /// towards the breaker, like an error.
    Unreplicated,
}

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The script on Redis.
    Redis,
    /// The deny cache: a denial still standing, no round trip.
    DenyCache,
    /// A lease held by this node, no round trip.
    Lease,
    /// The failure policy, for this reason.
    Policy(Fault),
}

/// Counters of a limiter's decisions by source, since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Decided by the script.
    pub redis: u64,
    /// Answered by the deny cache.
    pub deny_cache: u64,
    /// Answered from a lease.
    pub lease: u64,
    /// Taken by the policy after a timeout.
    pub policy_timeout: u64,
    /// Taken by the policy after an error.
    pub policy_error: u64,
    /// Taken by the policy while the breaker was open.
    pub policy_breaker_open: u64,
    /// Taken by the policy because too many calls were in flight.
    pub policy_overloaded: u64,
    /// Taken by the policy because the script answered with an error.
    pub policy_script: u64,
    /// Taken by the policy because too few replicas acknowledged an
    /// admission (see [`Durability`](crate::Durability)).
    pub policy_unreplicated: u64,
    /// Of the policy's decisions, how many admitted.
    pub policy_allowed: u64,
    /// Of the policy's decisions, how many denied.
    pub policy_denied: u64,
}

impl Stats {
    /// Every decision taken by the policy.
    pub fn policy(&self) -> u64 {
        self.policy_allowed + self.policy_denied
    }
}

/// The counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    redis: AtomicU64,
    deny_cache: AtomicU64,
    lease: AtomicU64,
    timeout: AtomicU64,
    error: AtomicU64,
    breaker_open: AtomicU64,
    overloaded: AtomicU64,
    script: AtomicU64,
    unreplicated: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
}

impl Counters {
    pub(crate) fn count(&self, source: Source, decision: &Decision) {
        let counter = match source {
            Source::Redis => &self.redis,
            Source::DenyCache => &self.deny_cache,
            Source::Lease => &self.lease,
            Source::Policy(fault) => {
                let outcome = if decision.is_allowed() {
                    &self.allowed
                } else {
                    &self.denied
                };
                // Relaxed: independent statistics; no other memory depends on them.
                outcome.fetch_add(1, Ordering::Relaxed);
                match fault {
                    Fault::Timeout => &self.timeout,
                    Fault::Error => &self.error,
                    Fault::BreakerOpen => &self.breaker_open,
                    Fault::Overloaded => &self.overloaded,
                    Fault::Script => &self.script,
                    Fault::Unreplicated => &self.unreplicated,
                }
            }
        };
        // Relaxed: as above.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        // Relaxed: each counter is read on its own; a snapshot taken while
        // decisions run is not a single instant, and need not be.
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            redis: load(&self.redis),
            deny_cache: load(&self.deny_cache),
            lease: load(&self.lease),
            policy_timeout: load(&self.timeout),
            policy_error: load(&self.error),
            policy_breaker_open: load(&self.breaker_open),
            policy_overloaded: load(&self.overloaded),
            policy_script: load(&self.script),
            policy_unreplicated: load(&self.unreplicated),
            policy_allowed: load(&self.allowed),
            policy_denied: load(&self.denied),
        }
    }
}

/// One limit of the local fallback.
enum LocalLimit {
    Gcra(KeyedLimiter<Vec<u8>, Gcra>),
    Fixed(KeyedLimiter<Vec<u8>, FixedWindow>),
    Sliding(KeyedLimiter<Vec<u8>, SlidingWindow>),
    WarmUp(KeyedLimiter<Vec<u8>, WarmUp>),
}

impl LocalLimit {
    fn decide(&self, key: &BoundedKey, cost: u64, take: bool) -> Decision {
        let key = key.as_bytes();
        let result = match (self, take) {
            (LocalLimit::Gcra(l), true) => l.check_n(key, cost),
            (LocalLimit::Gcra(l), false) => l.peek_n(key, cost),
            (LocalLimit::Fixed(l), true) => l.check_n(key, cost),
            (LocalLimit::Fixed(l), false) => l.peek_n(key, cost),
            (LocalLimit::Sliding(l), true) => l.check_n(key, cost),
            (LocalLimit::Sliding(l), false) => l.peek_n(key, cost),
            (LocalLimit::WarmUp(l), true) => l.check_n(key, cost),
            (LocalLimit::WarmUp(l), false) => l.peek_n(key, cost),
        };
        // A cost above the local share's capacity can never fit locally.
        result.unwrap_or_else(|e| {
            Decision::from_parts(
                false,
                e.capacity(),
                0,
                Duration::from_nanos(u64::MAX),
                Duration::ZERO,
            )
        })
    }
}

/// The policy of one limiter, ready to decide.
pub(crate) struct Policy {
    kind: FailurePolicy,
    capacity: u64,
    /// The local limits and the lock that makes their AND all-or-nothing.
    local: Option<(Mutex<()>, Vec<LocalLimit>)>,
    /// The longest key the local limits were given (tests of bounded memory).
    #[cfg(test)]
    pub(crate) longest_local_key: AtomicU64,
}

/// Most keys the local fallback holds at once.
const LOCAL_MAX_KEYS: usize = 1 << 20;

fn share_of(value: u64, share: f64) -> u64 {
    // `share` is in (0, 1]: the product is at most `value`.
    ((value as f64 * share).floor() as u64).max(1)
}

impl Policy {
    pub(crate) fn new(
        kind: FailurePolicy,
        limits: &[Limit],
        clock: &ClockSource,
    ) -> Result<Policy, ConfigError> {
        let capacity = limits.iter().map(Limit::capacity).min().unwrap_or(0);
        let local = match kind {
            FailurePolicy::Local { share } => {
                if !(share > 0.0 && share <= 1.0) {
                    return Err(ConfigError::Invalid(
                        "the local share must be above 0 and at most 1",
                    ));
                }
                let mut locals = Vec::with_capacity(limits.len());
                for limit in limits {
                    let q = limit.quota();
                    let scaled = Quota::new(share_of(q.limit(), share), q.period())
                        .and_then(|s| s.with_burst(share_of(q.burst(), share)))
                        .map_err(ConfigError::Quota)?;
                    let local = match limit {
                        Limit::Gcra(_) => LocalLimit::Gcra(
                            KeyedLimiter::builder(Gcra::new(scaled).map_err(ConfigError::Quota)?)
                                .clock(clock.clone())
                                .max_keys(LOCAL_MAX_KEYS)
                                .build(),
                        ),
                        // A calendar window: a fixed window of the unit's
                        // longest length (no wall clock here).
                        Limit::FixedWindow(_) | Limit::Calendar(_) => LocalLimit::Fixed(
                            KeyedLimiter::builder(
                                FixedWindow::new(scaled).map_err(ConfigError::Quota)?,
                            )
                            .clock(clock.clone())
                            .max_keys(LOCAL_MAX_KEYS)
                            .build(),
                        ),
                        // The share of the rate, warming up as Redis's did:
                        // a key the fallback has not seen starts cold.
                        Limit::WarmUp(w) => LocalLimit::WarmUp(
                            KeyedLimiter::builder(
                                WarmUp::with_cold_factor(scaled, w.warmup(), w.cold_factor())
                                    .map_err(ConfigError::Quota)?,
                            )
                            .clock(clock.clone())
                            .max_keys(LOCAL_MAX_KEYS)
                            .build(),
                        ),
                        Limit::SlidingWindow(w) => LocalLimit::Sliding(
                            KeyedLimiter::builder(
                                SlidingWindow::new(scaled, w.slots())
                                    .map_err(ConfigError::Quota)?,
                            )
                            .clock(clock.clone())
                            .max_keys(LOCAL_MAX_KEYS)
                            .build(),
                        ),
                    };
                    locals.push(local);
                }
                Some((Mutex::new(()), locals))
            }
            FailurePolicy::FailOpen | FailurePolicy::FailClosed => None,
        };
        Ok(Policy {
            kind,
            capacity,
            local,
            #[cfg(test)]
            longest_local_key: AtomicU64::new(0),
        })
    }

    /// The policy's answer for `cost` permits of `key`; `retry` is when Redis
    /// will next be tried.
    pub(crate) fn decide(&self, key: &BoundedKey, cost: u64, retry: Duration) -> Decision {
        match (&self.kind, &self.local) {
            (FailurePolicy::FailOpen, _) => {
                Decision::from_parts(true, self.capacity, 0, Duration::ZERO, Duration::ZERO)
            }
            (_, Some((lock, locals))) => {
                // Peek then take, under one lock: all-or-nothing across limits.
                let _all = lock.lock().unwrap_or_else(|e| e.into_inner());
                #[cfg(test)]
                self.longest_local_key
                    // Relaxed: a statistic read by the test after the calls.
                    .fetch_max(key.as_bytes().len() as u64, Ordering::Relaxed);
                let peeked = binding(locals.iter().map(|l| l.decide(key, cost, false)));
                match peeked {
                    Some(d) if d.is_denied() => d,
                    _ => binding(locals.iter().map(|l| l.decide(key, cost, true)))
                        .unwrap_or_else(|| self.closed(retry)),
                }
            }
            _ => self.closed(retry),
        }
    }

    fn closed(&self, retry: Duration) -> Decision {
        let retry = retry.max(Duration::from_millis(1));
        Decision::from_parts(false, self.capacity, 0, retry, retry)
    }
}
