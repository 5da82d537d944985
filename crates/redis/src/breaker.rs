//! The circuit breaker: while Redis is unhealthy, decisions go straight to
//! the failure policy instead of each waiting out its deadline.
//!
//! Closed → (`threshold` consecutive failures) → open for `open_for` →
//! half-open: one call (the probe) goes to Redis, every other goes to the
//! policy; the probe's success closes the breaker, its failure opens it
//! again. A probe that neither succeeds nor fails (its caller dropped it) is
//! replaced after `open_for`. A small mutex holds the state: it is taken once
//! per call, for a few instructions, never across an await.
//!
//! # One breaker per node
//!
//! A limiter keeps one breaker per node it calls (`Breakers`): on a
//! single server one, on a cluster one per master, found by the master
//! that owns the key's slot as the cluster was last read (see
//! [`cluster`](crate::cluster)). A dead, stopped or replica-less master
//! opens its own breaker and sends its own slots to the failure policy;
//! the keys of every other master are still decided by Redis. When the
//! slots move (a failover, a migration, a node added), their keys follow
//! them to the new owner's breaker at the next refresh of the slot map.
//! The map of breakers holds one entry per address that ever owned a slot
//! this limiter called (a few per cluster node).
//!
//! The rest of a limiter's state needs no such split: the deny cache and
//! the leases are per key (a key lives on one node), the local fallback is
//! per key, and the in-flight bound (`max_in_flight`) is shared on purpose
//! — a node at fault holds at most the calls of `threshold` failures plus
//! those already sent, each for at most the deadline, before its breaker
//! answers for it without taking a slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Circuit-breaker settings. Every setting has a default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker. By default, 3.
    pub threshold: u32,
    /// How long the breaker stays open before a probe. By default, 200 ms.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> BreakerConfig {
        BreakerConfig {
            threshold: 3,
            open_for: Duration::from_millis(200),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probe_since: Instant },
}

/// What the breaker lets a call do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Ask Redis.
    Go,
    /// Ask Redis as the probe.
    Probe,
    /// Do not ask; Redis will be tried again in this long.
    Refuse(Duration),
}

#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a plain value, valid even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn pass(&self) -> Pass {
        let now = Instant::now();
        let mut state = self.lock();
        match *state {
            State::Closed { .. } => Pass::Go,
            State::Open { until } if now < until => Pass::Refuse(until - now),
            State::HalfOpen { probe_since } if now < probe_since + self.config.open_for => {
                Pass::Refuse(probe_since + self.config.open_for - now)
            }
            State::Open { .. } | State::HalfOpen { .. } => {
                *state = State::HalfOpen { probe_since: now };
                Pass::Probe
            }
        }
    }

    pub(crate) fn success(&self) {
        *self.lock() = State::Closed { failures: 0 };
    }

    /// Records a failure; `true` when it opened the breaker.
    pub(crate) fn failure(&self) -> bool {
        let mut state = self.lock();
        let failures = match *state {
            State::Closed { failures } => failures + 1,
            State::HalfOpen { .. } => self.config.threshold,
            // A call that started before the breaker opened.
            State::Open { .. } => return false,
        };
        if failures >= self.config.threshold {
            *state = State::Open {
                until: Instant::now() + self.config.open_for,
            };
            true
        } else {
            *state = State::Closed { failures };
            false
        }
    }
}

/// A limiter's breakers, one per node (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    /// The breaker of a single server (and of calls with no node known).
    single: Arc<Breaker>,
    by_node: Mutex<HashMap<Arc<str>, Arc<Breaker>>>,
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig) -> Breakers {
        Breakers {
            config,
            single: Arc::new(Breaker::new(config)),
            by_node: Mutex::new(HashMap::new()),
        }
    }

    /// The breaker of `node` (`None`: the single server's).
    pub(crate) fn of(&self, node: Option<&Arc<str>>) -> Arc<Breaker> {
        let Some(node) = node else {
            return Arc::clone(&self.single);
        };
        // Plain values: valid even if a holder panicked.
        let mut by_node = self.by_node.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            by_node
                .entry(Arc::clone(node))
                .or_insert_with(|| Arc::new(Breaker::new(self.config))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_then_probes_once() {
        let b = Breaker::new(BreakerConfig {
            threshold: 2,
            open_for: Duration::from_millis(100),
        });
        assert_eq!(b.pass(), Pass::Go);
        assert!(!b.failure());
        assert!(b.failure());
        assert_eq!(b.pass(), Pass::Refuse(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(b.pass(), Pass::Probe);
        assert!(matches!(b.pass(), Pass::Refuse(_)));
        b.success();
        assert_eq!(b.pass(), Pass::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn each_node_has_its_own_breaker() {
        let breakers = Breakers::new(BreakerConfig {
            threshold: 1,
            open_for: Duration::from_millis(10),
        });
        let (a, b): (Arc<str>, Arc<str>) = ("10.0.0.1:7000".into(), "10.0.0.2:7000".into());
        assert!(breakers.of(Some(&a)).failure());
        assert!(matches!(breakers.of(Some(&a)).pass(), Pass::Refuse(_)));
        assert_eq!(breakers.of(Some(&b)).pass(), Pass::Go);
        assert_eq!(breakers.of(None).pass(), Pass::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_and_a_lost_probe_is_replaced() {
        let b = Breaker::new(BreakerConfig {
            threshold: 1,
            open_for: Duration::from_millis(10),
        });
        assert!(b.failure());
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(b.pass(), Pass::Probe);
        assert!(b.failure());
        assert!(matches!(b.pass(), Pass::Refuse(_)));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(b.pass(), Pass::Probe);
        // The probe's caller gave up: after `open_for`, another probe.
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(b.pass(), Pass::Probe);
    }
}
