//! Decision observers: a hook that sees every decision a limiter acts on.
//!
//! An [`Observer`] is called once per decision by every layer that decides
//! ([`Limiter`](crate::Limiter), [`KeyedLimiter`](crate::KeyedLimiter), the
//! Redis limiter, the tower layer, the server), with an [`Event`]: the
//! limit's name, the [`Outcome`], the cost and the [`Decision`] itself, and
//! the key only when the observer asked for keys
//! ([`Observer::wants_keys`]).
//!
//! # Guarantees
//!
//! - **Zero cost when absent.** A limiter without an observer pays one
//!   predictable branch on an `Option` per decision (measured in
//!   `benches/observe.rs`).
//! - **Once per decision acted on**: `check`, `check_n` and `charge_n`
//!   report; `peek` and the controls (`reset`, `refund`, …) do not, since
//!   nothing was decided for a request. A request refused before it is
//!   decided (a cost above capacity, a `CostError`) is not reported either.
//! - **Bounded labels.** The shipped observers label by the limit's name and
//!   the outcome only, never by the key: a key chosen by clients cannot grow
//!   a metrics registry.
//! - An observer runs on the caller's thread, inside the call, after the
//!   decision took effect (it cannot change it). It must be quick and must
//!   not call back into the limiter it observes for the same key in a way
//!   that waits on it.
//!
//! # Dry-run
//!
//! In dry-run (shadow) a refusal is not acted on: the request goes through,
//! and the event's outcome is [`Outcome::Shadow`] whatever refused it (the
//! limit, a penalty or the deny list); [`Event::decision`] is still the real
//! decision, so the cause can be told from it (a deny-listed key's
//! `retry_after` is "never").

use std::fmt;
use std::sync::Arc;

use crate::decision::Decision;

#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "tracing")]
pub mod tracing;

/// Sees each decision a limiter acts on.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tollgate::observe::{Event, Observer, Outcome};
/// use tollgate::{Gcra, Limiter, ManualClock, Quota};
///
/// #[derive(Default)]
/// struct Denials(AtomicU64);
///
/// impl Observer for Denials {
///     fn on_decision(&self, event: &Event<'_>) {
///         if event.outcome == Outcome::Denied {
///             // Relaxed: a counter read on its own.
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let denials = Arc::new(Denials::default());
/// let limiter = Limiter::builder(Gcra::new(Quota::per_second(1)?)?)
///     .clock(ManualClock::new())
///     .name("login")
///     .observer(denials.clone())
///     .build();
/// assert!(limiter.check().is_allowed());
/// assert!(limiter.check().is_denied());
/// assert_eq!(denials.0.load(Ordering::Relaxed), 1);
/// # Ok(())
/// # }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// Called once per decision, after it took effect.
    fn on_decision(&self, event: &Event<'_>);

    /// Whether [`Event::key`] should carry the key (for keyed limiters whose
    /// key can be displayed). Formatting a key costs nothing unless the
    /// observer formats it, but a key is client data: ask for it only where
    /// it is not turned into an unbounded label.
    ///
    /// By default, `false`.
    fn wants_keys(&self) -> bool {
        false
    }
}

impl<O: Observer + ?Sized> Observer for Arc<O> {
    fn on_decision(&self, event: &Event<'_>) {
        (**self).on_decision(event);
    }

    fn wants_keys(&self) -> bool {
        (**self).wants_keys()
    }
}

impl<O: Observer + ?Sized> Observer for Box<O> {
    fn on_decision(&self, event: &Event<'_>) {
        (**self).on_decision(event);
    }

    fn wants_keys(&self) -> bool {
        (**self).wants_keys()
    }
}

/// Several observers, called in order; wants keys if any of them does.
#[derive(Clone, Default)]
pub struct Fanout {
    observers: Vec<Arc<dyn Observer>>,
}

impl Fanout {
    /// No observer yet.
    pub fn new() -> Fanout {
        Fanout::default()
    }

    /// Adds `observer` after those already there.
    #[must_use]
    pub fn with(mut self, observer: impl Observer) -> Fanout {
        self.observers.push(Arc::new(observer));
        self
    }
}

impl Observer for Fanout {
    fn on_decision(&self, event: &Event<'_>) {
        for observer in &self.observers {
            if observer.wants_keys() || event.key.is_none() {
                observer.on_decision(event);
            } else {
                // A key was formatted for another observer: this one did not
                // ask for it.
                observer.on_decision(&Event {
                    key: None,
                    ..*event
                });
            }
        }
    }

    fn wants_keys(&self) -> bool {
        self.observers.iter().any(|observer| observer.wants_keys())
    }
}

impl fmt::Debug for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fanout")
            .field("observers", &self.observers.len())
            .finish()
    }
}

/// One decision, as an observer sees it.
#[derive(Clone, Copy)]
pub struct Event<'a> {
    /// The limit's name (`""` when unnamed).
    pub limit: &'a str,
    /// What was done with the request.
    pub outcome: Outcome,
    /// The permits the request asked for (or was charged).
    pub cost: u64,
    /// The decision as the limiter took it (in dry-run, the real one).
    pub decision: &'a Decision,
    /// The key, only when the observer asked for keys
    /// ([`Observer::wants_keys`]) and the limiter can display it.
    pub key: Option<&'a dyn fmt::Display>,
}

impl fmt::Debug for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("limit", &self.limit)
            .field("outcome", &self.outcome)
            .field("cost", &self.cost)
            .field("decision", self.decision)
            .field("key", &self.key.map(|key| key.to_string()))
            .finish()
    }
}

/// What was done with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted by the limit (its permits taken).
    Allowed,
    /// Refused by the limit.
    Denied,
    /// Would have been refused (by the limit, a penalty or the deny list),
    /// let through because the limiter or layer is in dry-run.
    Shadow,
    /// Decided by a list before any limit: admitted without counting
    /// ([`List::Allow`]) or refused ([`List::Deny`]).
    Listed(List),
    /// Refused because the key is in a penalty box.
    Penalized,
}

impl Outcome {
    /// A short, stable label: `allowed`, `denied`, `shadow`, `allow_listed`,
    /// `deny_listed` or `penalized` (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Shadow => "shadow",
            Outcome::Listed(List::Allow) => "allow_listed",
            Outcome::Listed(List::Deny) => "deny_listed",
            Outcome::Penalized => "penalized",
        }
    }

    /// Whether the request went through (allowed, allow-listed, or a shadow
    /// refusal).
    pub const fn is_let_through(self) -> bool {
        matches!(
            self,
            Outcome::Allowed | Outcome::Shadow | Outcome::Listed(List::Allow)
        )
    }

    /// The outcome of `decision` taken by a limit, in or out of dry-run.
    #[inline]
    pub const fn of(decision: &Decision, dry_run: bool) -> Outcome {
        match (decision.is_allowed(), dry_run) {
            (true, _) => Outcome::Allowed,
            (false, false) => Outcome::Denied,
            (false, true) => Outcome::Shadow,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which list decided a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum List {
    /// The allow list: admitted without counting.
    Allow,
    /// The deny list: refused, "never" to retry.
    Deny,
}

impl List {
    /// `allow` or `deny`.
    pub const fn as_str(self) -> &'static str {
        match self {
            List::Allow => "allow",
            List::Deny => "deny",
        }
    }
}

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
