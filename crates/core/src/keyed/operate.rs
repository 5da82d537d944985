//! Operating a [`KeyedLimiter`]: its name, its observer, dry-run, and the
//! path a request takes while any of them (or a list or a penalty, see
//! [`controls`](super::controls)) is engaged.
//!
//! The path of a known key pays one `Relaxed` load and a predictable branch
//! for all of this while nothing is engaged: a limiter without an observer,
//! lists or penalties runs exactly the check path it ran before.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use super::controls::{KeyControls, Verdict, decided};
use super::entry::{Answer, Mode};
use super::{KeyedBuilder, KeyedLimiter};
use crate::algorithm::Algorithm;
use crate::budget::Charge;
use crate::clock::Clock;
use crate::control::DEFAULT_MAX_CONTROLLED;
use crate::decision::{CostError, Decision};
use crate::observe::{Event, List, Observer, Outcome};
use crate::sync::{AtomicBool, Ordering};

/// Shows a key, for observers that asked for keys: set only where `K:
/// Display`.
type ShowKey<K> = fn(&K) -> &dyn fmt::Display;

/// The operating settings of a [`KeyedBuilder`].
pub(super) struct OpsBuilder<K> {
    name: Box<str>,
    observer: Option<Arc<dyn Observer>>,
    show_key: Option<ShowKey<K>>,
    dry_run: bool,
    max_controlled: usize,
}

impl<K> Default for OpsBuilder<K> {
    fn default() -> OpsBuilder<K> {
        OpsBuilder {
            name: Box::from(""),
            observer: None,
            show_key: None,
            dry_run: false,
            max_controlled: DEFAULT_MAX_CONTROLLED,
        }
    }
}

impl<K> OpsBuilder<K> {
    pub(super) fn build(self) -> Ops<K> {
        let observed = self.observer.is_some();
        Ops {
            name: self.name,
            observer: self.observer,
            show_key: self.show_key,
            dry_run: AtomicBool::new(self.dry_run),
            controls: KeyControls::new(self.max_controlled, observed),
        }
    }
}

/// A keyed limiter's name, observer, dry-run flag, lists and penalties.
pub(super) struct Ops<K> {
    name: Box<str>,
    observer: Option<Arc<dyn Observer>>,
    show_key: Option<ShowKey<K>>,
    dry_run: AtomicBool,
    pub(super) controls: KeyControls<K>,
}

impl<K> Ops<K> {
    /// Whether a request must take the operated path: an observer, a list
    /// or a penalty. One `Relaxed` load (see [`KeyControls::engaged`]).
    #[inline(always)]
    pub(super) fn engaged(&self) -> bool {
        self.controls.engaged()
    }

    fn is_dry_run(&self) -> bool {
        // Relaxed: a flag read on its own; a decision racing a change may see
        // either value.
        self.dry_run.load(Ordering::Relaxed)
    }
}

impl<K, A> KeyedBuilder<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// Names the limit, for observers (a bounded label: a rule's name, not a
    /// client's). By default, `""`.
    pub fn name(mut self, name: impl Into<Box<str>>) -> Self {
        self.ops.name = name.into();
        self
    }

    /// Calls `observer` once per decision (`check`, `check_n`; not `peek`,
    /// charges or controls), without the key. By default, none.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.ops.observer = Some(Arc::new(observer));
        self.ops.show_key = None;
        self
    }

    /// As [`observer`](Self::observer), and hands it the key when it asks
    /// for keys ([`Observer::wants_keys`]). Showing a key borrowed as
    /// another type (`&str` for a `String` key) makes an owned copy of it
    /// for the event.
    pub fn observer_with_keys(mut self, observer: impl Observer) -> Self
    where
        K: fmt::Display,
    {
        let wants_keys = observer.wants_keys();
        self.ops.observer = Some(Arc::new(observer));
        self.ops.show_key = wants_keys.then_some((|key| key) as ShowKey<K>);
        self
    }

    /// Starts in dry-run (see [`KeyedLimiter::is_dry_run`]). By default,
    /// `false`.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.ops.dry_run = dry_run;
        self
    }

    /// The most keys on the lists and in penalty boxes together; past it,
    /// adding one is an error ([`ControlError`](crate::control::ControlError)),
    /// never a silent drop. By default,
    /// [`DEFAULT_MAX_CONTROLLED`](crate::control::DEFAULT_MAX_CONTROLLED).
    pub fn max_controlled(mut self, max: usize) -> Self {
        self.ops.max_controlled = max;
        self
    }
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// The name given at build time (`""` when unnamed).
    pub fn name(&self) -> &str {
        &self.shared.ops.name
    }

    /// Whether this limiter is in dry-run (shadow): its decisions are the
    /// real ones, counted as usual, but a caller acting on them lets refused
    /// requests through, and observers see [`Outcome::Shadow`] for them.
    pub fn is_dry_run(&self) -> bool {
        self.shared.ops.is_dry_run()
    }

    /// Turns dry-run on or off, for every clone, from the next decision on.
    pub fn set_dry_run(&self, dry_run: bool) {
        // Relaxed: see `Ops::is_dry_run`.
        self.shared.ops.dry_run.store(dry_run, Ordering::Relaxed);
    }

    /// A request while an observer, a list or a penalty is engaged: the
    /// lists, then the penalty, then the limit; then the observer.
    #[cold]
    #[inline(never)]
    pub(super) fn operated<Q, R: Answer>(&self, key: &Q, cost: u64, mode: Mode) -> R
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let ops = &self.shared.ops;
        let mut recorded = 0;
        let (outcome, result) = match ops.controls.verdict(key, self.shared.clock.now()) {
            Verdict::Limit if mode == Mode::Charge => {
                let charge: Charge = self.shared.decide(key, cost, mode);
                recorded = charge.recorded();
                (Outcome::of(&charge.decision(), false), charge.decision())
            }
            Verdict::Limit => {
                let result: Result<Decision, CostError> = self.shared.decide(key, cost, mode);
                match result {
                    Ok(decision) => (Outcome::of(&decision, false), decision),
                    Err(error) => return R::refused(error),
                }
            }
            Verdict::Decided(outcome, until) => {
                // Nothing is counted. An allowed key reports what a peek of
                // the same cost (1 for a charge's "what next") reports; a
                // refusal needs only the limit and the time to full.
                let looked = match (outcome, mode) {
                    (Outcome::Listed(List::Allow), Mode::Charge) => 1,
                    (Outcome::Listed(List::Allow), _) => cost,
                    _ => 0,
                };
                let peek: Result<Decision, CostError> = self.shared.decide(key, looked, Mode::Peek);
                let peek = match peek {
                    Ok(peek) => peek,
                    Err(error) => return R::refused(error),
                };
                let now = self.shared.clock.now();
                (outcome, decided(outcome, until, &peek, now))
            }
        };
        if mode == Mode::Check {
            if let Some(observer) = &ops.observer {
                let outcome = if ops.is_dry_run() && !outcome.is_let_through() {
                    Outcome::Shadow
                } else {
                    outcome
                };
                self.report(&**observer, key, outcome, cost, &result);
            }
        }
        if mode == Mode::Charge {
            // Under a list or a penalty nothing asked is recorded.
            return R::charged(result, cost, recorded);
        }
        R::decided(result)
    }

    fn report<Q>(
        &self,
        observer: &dyn Observer,
        key: &Q,
        outcome: Outcome,
        cost: u64,
        decision: &Decision,
    ) where
        K: From<Q::Owned>,
        Q: ToOwned + ?Sized,
    {
        let ops = &self.shared.ops;
        let mut event = Event {
            limit: &ops.name,
            outcome,
            cost,
            decision,
            key: None,
        };
        match ops.show_key {
            Some(show) => {
                let owned = K::from(key.to_owned());
                event.key = Some(show(&owned));
                observer.on_decision(&event);
            }
            None => observer.on_decision(&event),
        }
    }
}

impl<K> fmt::Debug for Ops<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ops")
            .field("name", &self.name)
            .field("observer", &self.observer.is_some())
            .field("dry_run", &self.is_dry_run())
            .finish_non_exhaustive()
    }
}
