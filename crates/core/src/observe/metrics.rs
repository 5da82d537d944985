//! [`MetricsObserver`]: decisions as [`metrics`] facade counters and a cost
//! histogram (feature `metrics`).
//!
//! # What it records
//!
//! - `tollgate_decisions_total{limit, outcome}`: a counter per decision;
//!   `outcome` is [`Outcome::as_str`](super::Outcome::as_str) (`allowed`,
//!   `denied`, `shadow`, `allow_listed`, `deny_listed`, `penalized`).
//! - `tollgate_decision_cost{limit}`: a histogram of the permits each
//!   decision asked for.
//!
//! # Bounded labels
//!
//! The labels are the limit's name and the outcome, **never the key**: the
//! set of series is fixed by configuration, not by clients. Should an
//! application name limits from client data anyway, past
//! [`MAX_LIMITS`] distinct names the rest are recorded under the name
//! `other`.
//!
//! # Cost
//!
//! The handles of each limit are looked up in a small map under a read
//! lock (no allocation once a limit was seen), then one counter increment
//! and one histogram record go to the installed recorder. Handles are taken
//! from the recorder installed when a limit is first seen: install the
//! recorder before the first decision, as the `metrics` crate asks.

use std::collections::HashMap;
use std::fmt;
use std::sync::RwLock;

use metrics::{Counter, Histogram};

use super::{Event, List, Observer, Outcome};

/// The counter's name.
pub const DECISIONS: &str = "tollgate_decisions_total";
/// The histogram's name.
pub const COST: &str = "tollgate_decision_cost";
/// The most distinct limit names with their own series; the rest are
/// recorded as `other`.
pub const MAX_LIMITS: usize = 1024;

const OUTCOMES: [Outcome; 6] = [
    Outcome::Allowed,
    Outcome::Denied,
    Outcome::Shadow,
    Outcome::Listed(List::Allow),
    Outcome::Listed(List::Deny),
    Outcome::Penalized,
];

/// Records every decision in the `metrics` facade: see the
/// [module docs](self).
///
/// # Examples
///
/// ```
/// use tollgate::observe::metrics::MetricsObserver;
/// use tollgate::{Gcra, Limiter, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder(Gcra::new(Quota::per_second(100)?)?)
///     .name("api")
///     .observer(MetricsObserver::new())
///     .build();
/// assert!(limiter.check().is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct MetricsObserver {
    limits: RwLock<HashMap<Box<str>, Handles>>,
}

struct Handles {
    /// Indexed as [`OUTCOMES`].
    decisions: [Counter; 6],
    cost: Histogram,
}

impl Handles {
    fn new(limit: &str) -> Handles {
        let decisions = OUTCOMES.map(|outcome| {
            metrics::counter!(DECISIONS, "limit" => limit.to_owned(), "outcome" => outcome.as_str())
        });
        let cost = metrics::histogram!(COST, "limit" => limit.to_owned());
        Handles { decisions, cost }
    }

    fn record(&self, outcome: Outcome, cost: u64) {
        let index = match outcome {
            Outcome::Allowed => 0,
            Outcome::Denied => 1,
            Outcome::Shadow => 2,
            Outcome::Listed(List::Allow) => 3,
            Outcome::Listed(List::Deny) => 4,
            Outcome::Penalized => 5,
        };
        self.decisions[index].increment(1);
        // Exact below 2^53 permits, which every quota is in practice.
        self.cost.record(cost as f64);
    }
}

impl MetricsObserver {
    /// An observer recording to whatever recorder is installed.
    pub fn new() -> MetricsObserver {
        MetricsObserver::default()
    }
}

impl Observer for MetricsObserver {
    fn on_decision(&self, event: &Event<'_>) {
        {
            let limits = self.limits.read().unwrap_or_else(|p| p.into_inner());
            if let Some(handles) = limits.get(event.limit) {
                handles.record(event.outcome, event.cost);
                return;
            }
        }
        let mut limits = self.limits.write().unwrap_or_else(|p| p.into_inner());
        let name: &str = if limits.len() < MAX_LIMITS || limits.contains_key(event.limit) {
            event.limit
        } else {
            "other"
        };
        limits
            .entry(Box::from(name))
            .or_insert_with(|| Handles::new(name))
            .record(event.outcome, event.cost);
    }
}

impl fmt::Debug for MetricsObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limits = self.limits.read().map_or(0, |limits| limits.len());
        f.debug_struct("MetricsObserver")
            .field("limits", &limits)
            .finish()
    }
}
