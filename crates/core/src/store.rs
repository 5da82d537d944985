//! Where an algorithm's state lives, and how a transition is applied to it.
//!
//! Two storages, one rule: the transition is computed from a consistent
//! view of the state and written in one indivisible step, and a denial writes
//! nothing.
//!
//! - `word_update`: a state of one `u64` (GCRA, fixed window), updated by a
//!   compare-and-swap loop. The decision is linearized at the successful CAS,
//!   or, for a denial, at the load it was computed from.
//! - [`Locked`]: a larger state (sliding log, sliding window counter) behind a
//!   mutex, with a [`DenyHint`] published beside it so that a request of cost
//!   1 that cannot fit is denied from three loads, without touching the lock.

use crate::clock::Nanos;
use crate::decision::Decision;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, lock};

/// A transition over a state too large for one word: decided from a shared
/// view, applied under the lock.
pub(crate) trait LockedTransition {
    type State;
    fn decide(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision;
    fn admit(&self, state: &mut Self::State, now: Nanos, cost: u64);
    fn hint(&self, state: &Self::State) -> DenyHint;
    /// The limit reported in decisions.
    fn limit(&self) -> u64;
}

/// Reads a word state.
#[inline]
pub(crate) fn word_load(cell: &AtomicU64) -> u64 {
    // Relaxed: the word is the whole state and publishes no other memory;
    // coherence orders every access to it.
    cell.load(Ordering::Relaxed)
}

/// Applies a transition to the word in `cell` atomically: recomputed from
/// the current value until a compare-and-swap succeeds; evaluates at once to
/// the decision, without writing, when the transition has nothing to write
/// (a denial). `word_update!(cell, |current| transition_expr)`, where the
/// expression yields `(Decision, Option<u64>)`.
///
/// A macro, so that the transition is expanded in the loop itself and never
/// called through a closure: a 48-byte [`Decision`] built in one frame and
/// copied out of another stalls on store forwarding (a quarter of a keyed
/// check, seen with perf). A closure was inlined by LLVM's choice only, and
/// it stopped being inlined once the limiter's check grew (the
/// controls): the direct check went from ~10 to ~15 ns until this macro.
macro_rules! word_update {
    ($cell:expr, |$current:ident| $transition:expr) => {{
        let cell: &$crate::sync::AtomicU64 = $cell;
        let mut $current = $crate::store::word_load(cell);
        loop {
            let (decision, next) = $transition;
            let Some(next) = next else {
                break decision;
            };
            // Relaxed on both outcomes: as in `word_load`, the word carries
            // no other data, and the modification order of this one location
            // is the linearization order of the decisions.
            match cell.compare_exchange_weak(
                $current,
                next,
                $crate::sync::Ordering::Relaxed,
                $crate::sync::Ordering::Relaxed,
            ) {
                Ok(_) => break decision,
                Err(actual) => $current = actual,
            }
        }
    }};
}
pub(crate) use word_update;

/// [`word_update!`] on a word held exclusively (`&mut AtomicU64`): the
/// transition reads the word and, if it has something to write, stores it,
/// with no read-modify-write instruction (nothing else can write the word
/// meanwhile). Under loom the access goes through loom's checked `with_mut`.
macro_rules! word_update_mut {
    ($cell:expr, |$current:ident| $transition:expr) => {{
        let cell: &mut $crate::sync::AtomicU64 = $cell;
        #[cfg(not(loom))]
        let decision = $crate::store::word_update_mut!(@apply cell.get_mut(), $current, $transition);
        #[cfg(loom)]
        let decision = cell.with_mut(|word: &mut u64| {
            $crate::store::word_update_mut!(@apply word, $current, $transition)
        });
        decision
    }};
    // The transition on the word itself, written back if it has a value.
    (@apply $word:expr, $current:ident, $transition:expr) => {{
        let word: &mut u64 = $word;
        let $current = *word;
        let (decision, next) = $transition;
        if let Some(next) = next {
            *word = next;
        }
        decision
    }};
}
pub(crate) use word_update_mut;

/// What a locked state publishes for lock-free denials of cost 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DenyHint {
    /// Before this instant (ns), a request of cost 1 is denied. 0: no hint.
    pub denied_until: u64,
    /// When the state will be back to full (ns), for `reset_after`.
    pub full_at: u64,
}

/// A state behind a mutex, plus a seqlock-published [`DenyHint`].
///
/// The hint is written only inside the lock, after the state changed; the
/// instant it names never moves earlier while the state holds (admissions
/// only push it later), so a denial read from it is the answer the locked
/// state would have given at the moment of the read.
#[derive(Debug)]
pub struct Locked<S> {
    state: Mutex<S>,
    /// Even: `hint_*` are consistent. Odd: a writer is between its two stores.
    sequence: AtomicU64,
    hint_until: AtomicU64,
    hint_full_at: AtomicU64,
}

impl<S> Locked<S> {
    pub(crate) fn new(state: S) -> Locked<S> {
        Locked::with_hint(state, DenyHint::default())
    }

    /// A state whose hint is already known (a state carried over).
    pub(crate) fn with_hint(state: S, hint: DenyHint) -> Locked<S> {
        Locked {
            state: Mutex::new(state),
            sequence: AtomicU64::new(0),
            hint_until: AtomicU64::new(hint.denied_until),
            hint_full_at: AtomicU64::new(hint.full_at),
        }
    }

    /// Locks the state. The caller must call [`Locked::publish`] before
    /// releasing the guard if it changed the state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        lock(&self.state)
    }

    /// Publishes `hint`. Called with the lock held, so writers never race.
    pub(crate) fn publish(&self, _guard: &MutexGuard<'_, S>, hint: DenyHint) {
        // Relaxed: only writers (serialized by the lock) write `sequence`.
        let sequence = self.sequence.load(Ordering::Relaxed);
        // The classic seqlock writer: mark odd, fence, store, publish even.
        // Relaxed + Release fence: a reader that sees a hint store also sees
        // the odd sequence (or a later one) on its second read.
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        crate::sync::fence(Ordering::Release);
        self.hint_until.store(hint.denied_until, Ordering::Relaxed);
        self.hint_full_at.store(hint.full_at, Ordering::Relaxed);
        // Release: a reader that acquires this even value sees both stores.
        self.sequence.store(sequence + 2, Ordering::Release);
    }

    /// The published hint, or `None` if a writer is publishing right now.
    pub(crate) fn hint(&self) -> Option<DenyHint> {
        // Acquire: pairs with the writer's final Release store.
        let before = self.sequence.load(Ordering::Acquire);
        if before % 2 == 1 {
            return None;
        }
        // Relaxed loads, then an Acquire fence so that the second sequence
        // read cannot be satisfied before them (Boehm, "Can seqlocks get along
        // with programming language memory models?", 2012).
        let denied_until = self.hint_until.load(Ordering::Relaxed);
        let full_at = self.hint_full_at.load(Ordering::Relaxed);
        crate::sync::fence(Ordering::Acquire);
        let after = self.sequence.load(Ordering::Relaxed);
        (before == after).then_some(DenyHint {
            denied_until,
            full_at,
        })
    }
}

/// Decides and records under the lock, or denies a request of cost 1 from the
/// published hint without taking it.
pub(crate) fn locked_check<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    now: Nanos,
    cost: u64,
) -> Decision {
    if let Some(decision) = deny_from_hint(transition, cell, now, cost) {
        return decision;
    }
    let mut state = cell.lock();
    let decision = transition.decide(&state, now, cost);
    if decision.is_allowed() && cost > 0 {
        transition.admit(&mut state, now, cost);
        let hint = transition.hint(&state);
        cell.publish(&state, hint);
    }
    decision
}

/// Decides without recording.
pub(crate) fn locked_peek<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    now: Nanos,
    cost: u64,
) -> Decision {
    if let Some(decision) = deny_from_hint(transition, cell, now, cost) {
        return decision;
    }
    transition.decide(&cell.lock(), now, cost)
}

/// The denial of a request of cost 1 that the hint shows cannot fit: the same
/// numbers the locked state gives (all `limit` permits are in use, so 0
/// remain).
fn deny_from_hint<T: LockedTransition>(
    transition: &T,
    cell: &Locked<T::State>,
    now: Nanos,
    cost: u64,
) -> Option<Decision> {
    if cost != 1 {
        return None;
    }
    let hint = cell.hint()?;
    let now = now.as_u64();
    // `u64::MAX` may stand for "past the end of the clock": let the locked
    // path tell the two apart.
    (now < hint.denied_until && hint.denied_until != u64::MAX).then(|| {
        Decision::deny(
            transition.limit(),
            0,
            hint.denied_until - now,
            hint.full_at.saturating_sub(now),
        )
    })
}
