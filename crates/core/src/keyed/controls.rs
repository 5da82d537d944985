//! The controls of [`crate::control`] per key: reset, refund, penalty, deny
//! and allow lists on a [`KeyedLimiter`].
//!
//! Lists and penalties live in one bounded map beside the key map (a key is
//! listed or penalized whether or not it has a state, and a sweep never
//! drops a control). The map is read only while it is non-empty (or an
//! observer is set): the `engaged` flag, one `Relaxed` load, keeps the path
//! of a known key as it was otherwise. Its size is capped
//! ([`max_controlled`](super::KeyedBuilder::max_controlled)): adding a key
//! past the cap is a [`ControlError`], never a silent drop; ended penalties
//! are dropped first to make room, and by the first request that sees them.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use super::KeyedLimiter;
use super::entry::Mode;
use crate::algorithm::Algorithm;
use crate::clock::{Clock, Nanos, saturating_nanos};
use crate::control::ControlError;
use crate::decision::Decision;
use crate::keymap::Held;
use crate::observe::{List, Outcome};
use crate::sync::{AtomicBool, Ordering, RwLock, read, write};

type Hasher = foldhash::fast::RandomState;

/// One key's list and penalty.
#[derive(Clone, Copy, Debug, Default)]
struct Control {
    list: Option<List>,
    /// The end of the penalty (ns; `u64::MAX`: never); 0: none.
    penalty_until: u64,
}

impl Control {
    fn is_spent(&self, now: u64) -> bool {
        self.list.is_none() && self.penalty_until <= now
    }
}

/// What decides a request, before any limit.
pub(super) enum Verdict {
    /// No list or running penalty: the limit decides.
    Limit,
    /// A list or a penalty (ending at the given instant) decides.
    Decided(Outcome, u64),
}

/// The lists and penalties of a keyed limiter.
pub(super) struct KeyControls<K> {
    /// Whether requests must look here (or report to an observer).
    engaged: AtomicBool,
    observed: bool,
    max: usize,
    entries: RwLock<HashMap<K, Control, Hasher>>,
}

impl<K> KeyControls<K> {
    pub(super) fn new(max: usize, observed: bool) -> KeyControls<K> {
        KeyControls {
            engaged: AtomicBool::new(observed),
            observed,
            max,
            entries: RwLock::new(HashMap::default()),
        }
    }

    #[inline(always)]
    pub(super) fn engaged(&self) -> bool {
        // Relaxed: the flag publishes nothing; the map it guards is read
        // under its own lock. A request that reads `false` just as a key is
        // listed is decided before the listing took effect.
        self.engaged.load(Ordering::Relaxed)
    }
}

impl<K: Hash + Eq> KeyControls<K> {
    /// Re-derives `engaged` after a change, under the write lock.
    fn settle(&self, entries: &HashMap<K, Control, Hasher>) {
        // Relaxed: see `engaged`.
        self.engaged
            .store(self.observed || !entries.is_empty(), Ordering::Relaxed);
    }

    pub(super) fn verdict<Q>(&self, key: &Q, now: Nanos) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = now.as_u64();
        let control = match read(&self.entries).get(key) {
            None => return Verdict::Limit,
            Some(control) => *control,
        };
        match control.list {
            Some(list) => Verdict::Decided(Outcome::Listed(list), 0),
            None if control.penalty_until > now => {
                Verdict::Decided(Outcome::Penalized, control.penalty_until)
            }
            None => {
                // Ended: drop it, unless a new penalty replaced it meanwhile.
                let mut entries = write(&self.entries);
                if entries.get(key).is_some_and(|c| c.is_spent(now)) {
                    entries.remove(key);
                    self.settle(&entries);
                }
                Verdict::Limit
            }
        }
    }

    /// Changes `key`'s control with `change` (inserting it, within the cap,
    /// if absent); drops it if it is left spent. Returns what `change`
    /// returned.
    fn change<Q, R>(
        &self,
        key: &Q,
        now: u64,
        change: impl FnOnce(&mut Control) -> R,
    ) -> Result<R, ControlError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let mut entries = write(&self.entries);
        if !entries.contains_key(key) && entries.len() >= self.max {
            entries.retain(|_, control| !control.is_spent(now));
            if entries.len() >= self.max {
                return Err(ControlError::Full { max: self.max });
            }
        }
        let control = entries.entry(K::from(key.to_owned())).or_default();
        let result = change(control);
        if control.is_spent(now) {
            entries.remove(key);
        }
        self.settle(&entries);
        Ok(result)
    }

    fn list<Q>(&self, key: &Q) -> Option<List>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        read(&self.entries)
            .get(key)
            .and_then(|control| control.list)
    }
}

/// The decision a list or a penalty gives, from a peek of the limit (of the
/// request's cost for an allowed key, of 0 otherwise).
pub(super) fn decided(outcome: Outcome, until: u64, peek: &Decision, now: Nanos) -> Decision {
    match outcome {
        Outcome::Listed(List::Allow) => {
            let remaining = if peek.is_allowed() {
                peek.remaining()
            } else {
                0
            };
            Decision::allow(
                peek.limit(),
                remaining,
                saturating_nanos(peek.reset_after()),
            )
        }
        Outcome::Penalized if until != u64::MAX => {
            let left = until.saturating_sub(now.as_u64());
            let reset = left.saturating_add(saturating_nanos(peek.reset_after()));
            Decision::deny(peek.limit(), 0, left, reset)
        }
        _ => Decision::deny(peek.limit(), 0, u64::MAX, u64::MAX),
    }
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// Back to full: `key`'s state is dropped, as if never used, and its
    /// penalty cancelled (its list stays). Returns the state after: what a
    /// request of cost 0 would be told now.
    pub fn reset<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = self.shared.clock.now().as_u64();
        if self.shared.ops.controls.list(key).is_some()
            || read(&self.shared.ops.controls.entries).contains_key(key)
        {
            // Within the cap: the key is there already.
            let _ = self
                .shared
                .ops
                .controls
                .change(key, now, |control| control.penalty_until = 0);
        }
        self.on_cell(key, |algorithm, cell| algorithm.reset_cell(cell));
        self.state_of(key)
    }

    /// Gives back `permits` permits to `key`, never above full (a key
    /// without a state is full: nothing changes). Returns the state after.
    pub fn refund<Q>(&self, key: &Q, permits: u64) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = self.shared.clock.now();
        self.on_cell(key, |algorithm, cell| {
            algorithm.refund_cell(cell, now, permits)
        });
        self.state_of(key)
    }

    /// Denies every request for `key` for `duration` from now, counting
    /// nothing; its state is dropped, so it is full when the penalty ends.
    /// Only extends: a penalty ending before the current one changes
    /// nothing. A zero `duration` is a no-op. Returns the state after.
    ///
    /// # Errors
    ///
    /// [`ControlError::Full`] if `key` has no list or penalty yet and the
    /// cap on controlled keys is reached.
    pub fn penalize<Q>(&self, key: &Q, duration: Duration) -> Result<Decision, ControlError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if duration.is_zero() {
            return Ok(self.state_of(key));
        }
        let now = self.shared.clock.now().as_u64();
        let until = now.saturating_add(saturating_nanos(duration));
        let extended = self.shared.ops.controls.change(key, now, |control| {
            let extends = until > control.penalty_until;
            if extends {
                control.penalty_until = until;
            }
            extends
        })?;
        if extended {
            self.on_cell(key, |algorithm, cell| algorithm.reset_cell(cell));
        }
        Ok(self.state_of(key))
    }

    /// Puts `key` on the deny list: its requests are refused, "never" to
    /// retry, counting nothing, until [`unlist`](Self::unlist). Moves it
    /// off the allow list.
    ///
    /// # Errors
    ///
    /// [`ControlError::Full`] past the cap on controlled keys.
    pub fn deny<Q>(&self, key: &Q) -> Result<(), ControlError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.set_list(key, Some(List::Deny)).map(drop)
    }

    /// Puts `key` on the allow list: its requests are admitted, counting
    /// nothing, until [`unlist`](Self::unlist). Moves it off the deny list.
    ///
    /// # Errors
    ///
    /// [`ControlError::Full`] past the cap on controlled keys.
    pub fn allow<Q>(&self, key: &Q) -> Result<(), ControlError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.set_list(key, Some(List::Allow)).map(drop)
    }

    /// Takes `key` off either list; returns the list it was on.
    pub fn unlist<Q>(&self, key: &Q) -> Option<List>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.shared.ops.controls.list(key)?;
        // Never over the cap: the key is there.
        self.set_list(key, None).ok().flatten()
    }

    /// The list `key` is on, if any.
    pub fn listed<Q>(&self, key: &Q) -> Option<List>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shared.ops.controls.list(key)
    }

    /// Puts every list entry and running penalty of this limiter on `to`,
    /// another limiter of the same keys whatever its algorithm: what a
    /// service that replaces a limiter (a change of algorithm, whose states
    /// cannot be carried) must keep, or a deny-listed key would be admitted
    /// by the new one. A penalty keeps the time it has left (measured on
    /// this limiter's clock, applied on `to`'s), and drops the key's state
    /// on `to` as [`penalize`](Self::penalize) does. Returns how many keys
    /// were copied.
    ///
    /// # Errors
    ///
    /// [`ControlError::Full`] if `to`'s cap on controlled keys is reached;
    /// the keys copied before stay.
    pub fn copy_controls_to<B: Algorithm>(
        &self,
        to: &KeyedLimiter<K, B>,
    ) -> Result<usize, ControlError>
    where
        K: Clone,
    {
        let now = self.shared.clock.now().as_u64();
        let controls: Vec<(K, Control)> = read(&self.shared.ops.controls.entries)
            .iter()
            .filter(|(_, control)| !control.is_spent(now))
            .map(|(key, control)| (key.clone(), *control))
            .collect();
        for (key, control) in &controls {
            if control.list.is_some() {
                to.set_list(key, control.list)?;
            }
            if control.penalty_until > now {
                let left = if control.penalty_until == u64::MAX {
                    Duration::MAX
                } else {
                    Duration::from_nanos(control.penalty_until - now)
                };
                to.penalize(key, left).map(drop)?;
            }
        }
        Ok(controls.len())
    }

    fn set_list<Q>(&self, key: &Q, list: Option<List>) -> Result<Option<List>, ControlError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = self.shared.clock.now().as_u64();
        self.shared.ops.controls.change(key, now, |control| {
            std::mem::replace(&mut control.list, list)
        })
    }

    /// Runs `change` on `key`'s cell, if it has one (a key without a state
    /// is full).
    fn on_cell<Q>(&self, key: &Q, change: impl FnOnce(&A, &A::Cell))
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(mut found) = self.shared.map.get(key) {
            match found.held() {
                Some(Held::Hot(tag, cell)) => change(&tag.algorithm.algorithm, &*cell),
                Some(Held::Other(entry)) => change(&entry.algorithm.algorithm, &entry.cell),
                None => {}
            }
        }
    }

    /// What a request of cost 0 would be told for `key` now, through the
    /// lists and the penalty; not reported to the observer.
    fn state_of<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.operated(key, 0, Mode::Peek)
    }
}
