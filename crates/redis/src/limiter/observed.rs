//! Reporting a decision to the limiter's observer (see
//! [`observe`](crate::observe)).

use std::fmt;

use tollgate::observe::{Event, Outcome};

use crate::limiter::{self, RedisLimiter};
use crate::observe::{KeyBytes, RedisObserver};

impl RedisLimiter {
    /// Calls `observer` for a decision; out of line, so that a limiter
    /// without one pays only the branch on the `Option`.
    #[inline(never)]
    pub(crate) fn report(
        &self,
        observer: &dyn RedisObserver,
        key: &[u8],
        cost: u64,
        outcome: &limiter::Outcome,
    ) {
        let shown = KeyBytes(key);
        let event = Event {
            limit: self.name(),
            outcome: Outcome::of(&outcome.decision, self.shared.is_dry_run()),
            cost,
            decision: &outcome.decision,
            key: observer.wants_keys().then_some(&shown as &dyn fmt::Display),
        };
        observer.on_redis_decision(&event, outcome.source);
    }
}
