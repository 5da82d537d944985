//! [`TracingObserver`]: decisions as [`tracing`] events and span fields
//! (feature `tracing`).
//!
//! # What it emits
//!
//! - **An event per refusal** (denied, deny-listed, penalized, or a shadow
//!   refusal in dry-run) at `DEBUG`, target `tollgate`, with the fields
//!   `limit`, `outcome`, `cost`, `retry_after_ms` and, when the observer was
//!   built [`with_keys`](TracingObserver::with_keys) and the limiter can
//!   display its keys, `key`.
//! - **Span fields on every decision**: `tollgate.limit` and
//!   `tollgate.outcome` are recorded on the current span. `tracing` records
//!   only fields a span declared, so declare them (as
//!   `tracing::field::Empty`) on the request span you want them on; other
//!   spans are left alone.
//!
//! Allowed decisions emit no event: at tens of millions of checks per
//! second an event each would cost more than the limiter.

use super::{Event, Observer, Outcome};

/// Emits `tracing` events for refusals and span fields for every decision:
/// see the [module docs](self).
///
/// # Examples
///
/// ```
/// use tollgate::observe::tracing::TracingObserver;
/// use tollgate::{Gcra, Limiter, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder(Gcra::new(Quota::per_second(100)?)?)
///     .name("api")
///     .observer(TracingObserver::new())
///     .build();
/// let span = tracing::info_span!("request", tollgate.limit = tracing::field::Empty, tollgate.outcome = tracing::field::Empty);
/// let _entered = span.enter();
/// assert!(limiter.check().is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingObserver {
    keys: bool,
}

impl TracingObserver {
    /// An observer that never logs keys.
    pub fn new() -> TracingObserver {
        TracingObserver::default()
    }

    /// Adds the key to refusal events (keys are client data: a log is not a
    /// metrics label, but mind what it stores). By default, `false`.
    #[must_use]
    pub fn with_keys(mut self, keys: bool) -> TracingObserver {
        self.keys = keys;
        self
    }
}

impl Observer for TracingObserver {
    fn on_decision(&self, event: &Event<'_>) {
        let span = tracing::Span::current();
        if !span.is_disabled() {
            span.record("tollgate.limit", event.limit);
            span.record("tollgate.outcome", event.outcome.as_str());
        }
        if event.outcome.is_let_through() && event.outcome != Outcome::Shadow {
            return;
        }
        let retry_after_ms =
            u64::try_from(event.decision.retry_after().as_millis()).unwrap_or(u64::MAX);
        match event.key {
            Some(key) => tracing::debug!(
                target: "tollgate",
                limit = event.limit,
                outcome = event.outcome.as_str(),
                cost = event.cost,
                retry_after_ms,
                key = %key,
                "request refused"
            ),
            None => tracing::debug!(
                target: "tollgate",
                limit = event.limit,
                outcome = event.outcome.as_str(),
                cost = event.cost,
                retry_after_ms,
                "request refused"
            ),
        }
    }

    fn wants_keys(&self) -> bool {
        self.keys
    }
}
