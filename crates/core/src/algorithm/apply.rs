//! How the controls (refund, reset) are applied to a stored state: the same
//! storages as [`crate::store`], with writes that a decision never makes.

use crate::store::Locked;
use crate::store::LockedTransition;
use crate::sync::{AtomicU64, Ordering};

/// Applies `next` to the word in `cell` atomically when it has something to
/// write (a refund): a compare-and-swap loop, recomputed from the current
/// value until it succeeds or `next` has nothing to write.
#[inline]
pub(crate) fn word_try_apply(cell: &AtomicU64, mut next: impl FnMut(u64) -> Option<u64>) {
    // Relaxed: the word is the whole state and publishes no other memory
    // (as in `store::word_load`).
    let mut current = cell.load(Ordering::Relaxed);
    while let Some(value) = next(current) {
        // Relaxed on both outcomes, as in `store::word_update`: the
        // modification order of this one word orders every transition.
        match cell.compare_exchange_weak(current, value, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// Replaces a word state (a reset).
#[inline]
pub(crate) fn word_store(cell: &AtomicU64, value: u64) {
    // Relaxed: as above, the word is the whole state.
    cell.store(value, Ordering::Relaxed);
}

/// Moves a word state out, leaving `closed` in its place.
#[inline]
pub(crate) fn word_take(cell: &AtomicU64, closed: u64) -> AtomicU64 {
    // Relaxed: as above; the swap is one step in the word's modification
    // order, so every transition lands either in the state taken or on
    // `closed`.
    AtomicU64::new(cell.swap(closed, Ordering::Relaxed))
}

/// Moves a locked state out under its lock, leaving `closed` (whose hint
/// is published before the lock is released).
pub(crate) fn locked_take<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    closed: T::State,
) -> Locked<T::State> {
    let mut state = cell.lock();
    let taken = std::mem::replace(&mut *state, closed);
    let hint = transition.hint(&state);
    cell.publish(&state, hint);
    let taken_hint = transition.hint(&taken);
    Locked::with_hint(taken, taken_hint)
}

/// Changes a locked state with `change` under its lock and publishes its new
/// hint before the lock is released, so that a lock-free denial never reads
/// a hint older than the state (the hint may move earlier here, unlike after
/// an admission: it is republished in the same critical section).
pub(crate) fn locked_change<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    change: impl FnOnce(&mut T::State),
) {
    let mut state = cell.lock();
    change(&mut state);
    let hint = transition.hint(&state);
    cell.publish(&state, hint);
}

/// Applies a charge to the word in `cell` atomically: `next` returns the
/// word to store (`None`: nothing to write) and the permits it records; a
/// compare-and-swap loop recomputed from the current value until it
/// succeeds. Returns the permits recorded by the transition that landed.
#[inline]
pub(crate) fn word_charge(
    cell: &AtomicU64,
    mut next: impl FnMut(u64) -> (Option<u64>, u64),
) -> u64 {
    // Relaxed: the word is the whole state and publishes no other memory
    // (as in `store::word_load`).
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let (value, recorded) = next(current);
        let Some(value) = value else {
            return recorded;
        };
        // Relaxed on both outcomes, as in `store::word_update`: the
        // modification order of this one word orders every transition, and
        // a failed exchange recomputes the charge from the value it found.
        match cell.compare_exchange_weak(current, value, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return recorded,
            Err(actual) => current = actual,
        }
    }
}

/// Changes a locked state with `change` under its lock, as
/// [`locked_change`], and returns what `change` returns (a charge's
/// recorded permits).
pub(crate) fn locked_charge<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    change: impl FnOnce(&mut T::State) -> u64,
) -> u64 {
    let mut state = cell.lock();
    let recorded = change(&mut state);
    let hint = transition.hint(&state);
    cell.publish(&state, hint);
    recorded
}
