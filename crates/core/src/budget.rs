//! Budgets: costs learnt after the fact, charged with debt, and
//! reserve-then-settle.
//!
//! # The model
//!
//! A *budget* is a quota counted in a unit whose cost is known only once
//! the work is done (LLM tokens, bytes sent). Two flows:
//!
//! - **check, then charge**: admit the request with a check of what it is
//!   sure to cost (often 0 or 1), then [`Limiter::charge`] the real cost.
//!   A charge is never refused: what does not fit is a **debt**, and later
//!   checks are refused until it is repaid at the quota's rate (per
//!   algorithm, and the debt cap, in
//!   [Charges, debt and its cap](crate::algorithm#charges-debt-and-its-cap)).
//! - **reserve, then settle**: [`Limiter::reserve_estimate`] checks an estimate
//!   (admitted and recorded, or refused, exactly as
//!   [`check_n`](Limiter::check_n)) and returns a [`Reserved`];
//!   [`Reserved::settle`] with the real cost charges the difference (with
//!   debt) or refunds it (never above full).
//!
//! [`KeyedLimiter::reserve_estimate`] returns a [`KeyedReserved`] that owns its
//! key, and the compact table's
//! [`reserve_estimate`](crate::keyed::compact::CompactKeyedLimiter::reserve_estimate) a
//! [`CompactReserved`](crate::keyed::compact::CompactReserved).
//!
//! # Rules
//!
//! - **A charge of 0** records nothing and reports 0 recorded; it is not an
//!   error (a response that used no tokens).
//! - **A charge beyond the debt cap** (`u64::MAX`, say) records up to the
//!   cap and reports the rest as [`Charge::forgiven`]; the state stays at
//!   the cap, so every later request is refused until the capped debt is
//!   repaid. Never a panic, never a silent allow.
//! - **A settle** takes the reservation by value: a second settle does not
//!   compile. The reservation carries its limiter (a clone sharing the
//!   same state) and, when keyed, its key: it cannot be settled on another
//!   limiter or key.
//! - **A refused reservation** reserved nothing: settling it charges the
//!   whole actual cost, so a caller that went ahead anyway still pays.
//! - **A reservation dropped without a settle stands as charged at the
//!   estimate**: nothing happens on drop (no timer, no refund). A caller
//!   that abandons the work should settle with 0, which refunds it.
//! - **A settle below the estimate** refunds the difference by the
//!   algorithm's refund rule (the most recent permits first, never above
//!   full; a permit whose window is over is not credited).
//!
//! # Guarantee
//!
//! That of the algorithm with charges (see the table in
//! [`algorithm`](crate::algorithm#charges-debt-and-its-cap)): every permit
//! admitted or charged is within the quota's bound for its span or still
//! owed at its end. With reserve-then-settle, the overshoot beyond the
//! bound is at most the sum of `actual − estimate` over the reservations
//! admitted before the budget ran out.

use std::fmt;
use std::hash::Hash;

use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, QuantaClock};
use crate::decision::Decision;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;

/// What a charge or a settle did, and the state after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a charge reports permits it could not record"]
pub struct Charge {
    decision: Decision,
    asked: u64,
    recorded: u64,
    refunded: u64,
}

impl Charge {
    pub(crate) fn new(decision: Decision, asked: u64, recorded: u64) -> Charge {
        debug_assert!(
            recorded <= asked,
            "charge: recorded {recorded} of {asked} permits"
        );
        Charge {
            decision,
            asked,
            recorded,
            refunded: 0,
        }
    }

    pub(crate) fn map_decision(self, f: impl FnOnce(Decision) -> Decision) -> Charge {
        Charge {
            decision: f(self.decision),
            ..self
        }
    }

    fn refund(decision: Decision, refunded: u64) -> Charge {
        Charge {
            decision,
            asked: 0,
            recorded: 0,
            refunded,
        }
    }

    /// What a request of one permit would be told right after (as
    /// [`Limiter::peek`]).
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The permits the charge asked to record (for a settle, `actual −
    /// estimate` when above the estimate, else 0).
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// The permits recorded: all those asked, unless the debt cap was
    /// reached, or a list or a penalty decided the key (then 0).
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// The permits asked but not recorded: beyond the debt cap, or under a
    /// list or a penalty. 0 for every charge within the cap.
    pub fn forgiven(&self) -> u64 {
        self.asked - self.recorded
    }

    /// The permits a settle below its estimate gave back (asked back: the
    /// algorithm gives back at most what still counts).
    pub fn refunded(&self) -> u64 {
        self.refunded
    }
}

impl fmt::Display for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "charged {} of {} (refunded {}); then {}",
            self.recorded, self.asked, self.refunded, self.decision
        )
    }
}

/// An estimate reserved on a [`Limiter`], to be settled with the real cost:
/// see the [module docs](self).
#[must_use = "a reservation stands as charged at its estimate until settled"]
pub struct Reserved<A: Algorithm = Gcra, C: Clock = QuantaClock> {
    limiter: Limiter<A, C>,
    decision: Decision,
    reserved: u64,
}

impl<A: Algorithm, C: Clock> Reserved<A, C> {
    pub(crate) fn new(limiter: Limiter<A, C>, decision: Decision, estimate: u64) -> Self {
        let reserved = if decision.is_allowed() { estimate } else { 0 };
        Reserved {
            limiter,
            decision,
            reserved,
        }
    }

    /// The check of the estimate: admitted (and recorded) or refused.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the estimate was admitted.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// The permits held: the estimate if admitted, 0 if refused.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Settles with the real cost: charges `actual − reserved` (with debt)
    /// or refunds `reserved − actual` (never above full).
    pub fn settle(self, actual: u64) -> Charge {
        settle(
            self.reserved,
            actual,
            |extra| self.limiter.charge(extra),
            |back| self.limiter.refund(back),
            || self.limiter.peek(),
        )
    }
}

impl<A: Algorithm, C: Clock> fmt::Debug for Reserved<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved")
            .field("decision", &self.decision)
            .field("reserved", &self.reserved)
            .finish_non_exhaustive()
    }
}

/// An estimate reserved for one key of a [`KeyedLimiter`], to be settled
/// with the real cost: see the [module docs](self). It owns the key.
#[must_use = "a reservation stands as charged at its estimate until settled"]
pub struct KeyedReserved<K, A: Algorithm = Gcra> {
    limiter: KeyedLimiter<K, A>,
    key: K,
    decision: Decision,
    reserved: u64,
}

impl<K, A> KeyedReserved<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    pub(crate) fn new(
        limiter: KeyedLimiter<K, A>,
        key: K,
        decision: Decision,
        estimate: u64,
    ) -> Self {
        let reserved = if decision.is_allowed() { estimate } else { 0 };
        KeyedReserved {
            limiter,
            key,
            decision,
            reserved,
        }
    }

    /// The key the estimate was reserved for.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The check of the estimate: admitted (and recorded) or refused.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the estimate was admitted.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// The permits held: the estimate if admitted, 0 if refused.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Settles with the real cost, on the reservation's own key: charges
    /// `actual − reserved` (with debt) or refunds `reserved − actual`
    /// (never above full).
    pub fn settle(self, actual: u64) -> Charge {
        let (limiter, key) = (&self.limiter, &self.key);
        settle(
            self.reserved,
            actual,
            |extra| limiter.charge(key, extra),
            |back| limiter.refund(key, back),
            || limiter.peek(key),
        )
    }
}

impl<K: fmt::Debug, A: Algorithm> fmt::Debug for KeyedReserved<K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedReserved")
            .field("key", &self.key)
            .field("decision", &self.decision)
            .field("reserved", &self.reserved)
            .finish_non_exhaustive()
    }
}

/// The settle rule, on any storage: charge the excess, refund the rest, or
/// only look.
pub(crate) fn settle(
    reserved: u64,
    actual: u64,
    charge: impl FnOnce(u64) -> Charge,
    refund: impl FnOnce(u64) -> Decision,
    peek: impl FnOnce() -> Decision,
) -> Charge {
    if actual > reserved {
        charge(actual - reserved)
    } else if actual < reserved {
        let back = reserved - actual;
        Charge::refund(refund(back), back)
    } else {
        Charge::new(peek(), 0, 0)
    }
}
