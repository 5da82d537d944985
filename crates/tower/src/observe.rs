//! The layer's observer and dry-run.
//!
//! # Observer
//!
//! [`Builder::observer`](crate::Builder::observer) is called once per
//! decision the layer acts on (admitted, refused by the limit, or let
//! through in dry-run), with the layer's policy name as the limit's name.
//! The layer sees the backend's [`Decision`] only, so its outcomes are
//! `Allowed`, `Denied` and `Shadow`; for list and penalty outcomes give the
//! observer to the [`KeyedLimiter`](tollgate::KeyedLimiter) instead. Give an
//! observer to the layer or to its limiter, not both, or each decision is
//! seen twice. Requests the layer never decides (skipped methods, a missing
//! key passed on, a backend error) are not reported.
//!
//! # Dry-run
//!
//! [`Builder::dry_run`](crate::Builder::dry_run): the layer decides, counts
//! and reports as usual but **never answers a request itself**: every
//! request reaches the inner service. A request the limit refused goes
//! through with the headers its `429` would have carried (`Retry-After` and
//! the RateLimit headers), and the observer sees [`Outcome::Shadow`]; one
//! that would have been refused for another reason (no key, a cost above
//! the quota, the backend down) goes through without them. In the wait mode
//! ([`max_delay`](crate::Builder::max_delay)) a dry-run request never waits.
//! Same meaning as the server's `shadow_mode`.

use std::fmt;
use std::sync::Arc;

use tollgate::Decision;
use tollgate::observe::{Event, Observer, Outcome};

/// Shows a key, set only where the key type is `Display`.
pub(crate) type ShowKey<K> = fn(&K) -> &dyn fmt::Display;

/// An observer and how to show it the key.
pub(crate) struct Observed<K> {
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) show_key: Option<ShowKey<K>>,
    /// The limit's name in events: the policy name, unquoted.
    pub(crate) name: Box<str>,
}

impl<K> Observed<K> {
    /// Reports `decision`, taken for `key` at `cost`.
    pub(crate) fn report(&self, key: &K, cost: u64, decision: &Decision, dry_run: bool) {
        let event = Event {
            limit: &self.name,
            outcome: Outcome::of(decision, dry_run),
            cost,
            decision,
            key: self.show_key.map(|show| show(key)),
        };
        self.observer.on_decision(&event);
    }
}
