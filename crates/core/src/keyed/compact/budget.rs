//! Charges, refunds and reserve-then-settle on the compact table: the
//! rules of [`budget`](crate::budget), on one key's word under its shard's
//! lock.
//!
//! A charge is never refused: a key without a state gets one (decided at
//! the later of now and the latest sweep's reading, as a check's), and
//! while the table or the key's shard is full the charge goes to the
//! shared overflow state. A state that the charge or refund leaves fresh
//! is removed, as after a check. A cost of 0 records nothing and creates
//! no state.

use std::fmt;
use std::hash::BuildHasher;

use super::table::{Locked, Probe};
use super::{CompactKeyedLimiter, FixedKey, Shared, word_of};
use crate::algorithm::Algorithm;
use crate::budget::{Charge, settle};
use crate::clock::{Clock, Nanos};
use crate::decision::{CostError, Decision};
use crate::sync::{AtomicU64, Ordering};

impl<K, A> CompactKeyedLimiter<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// Records `cost` permits used by `key` now, whether or not they fit,
    /// taking the key into debt as
    /// [`Limiter::charge`](crate::Limiter::charge) describes (same debt
    /// cap), and reports what was recorded and what one permit would be
    /// told right after.
    pub fn charge(&self, key: &K, cost: u64) -> Charge {
        self.shared.charge(key, cost, self.shared.clock.now())
    }

    /// [`charge`](Self::charge), returning only the decision.
    pub fn charge_n(&self, key: &K, cost: u64) -> Decision {
        self.charge(key, cost).decision()
    }

    /// Gives back `permits` permits to `key`, never above full (a key
    /// without a state is full: nothing changes). Returns what a request of
    /// one permit would be told right after.
    pub fn refund(&self, key: &K, permits: u64) -> Decision {
        self.shared.refund(key, permits, self.shared.clock.now())
    }

    /// Reserves `estimate` permits for `key`: a [`check_n`](Self::check_n)
    /// of the estimate, returned as a [`CompactReserved`] that holds the
    /// key, to [`settle`](CompactReserved::settle) with the real cost (see
    /// [`budget`](crate::budget)).
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    pub fn reserve_estimate(
        &self,
        key: &K,
        estimate: u64,
    ) -> Result<CompactReserved<K, A>, CostError> {
        let decision = self.check_n(key, estimate)?;
        let reserved = if decision.is_allowed() { estimate } else { 0 };
        Ok(CompactReserved {
            limiter: self.clone(),
            key: *key,
            decision,
            reserved,
        })
    }
}

/// An estimate reserved for one key of a [`CompactKeyedLimiter`], to be
/// settled with the real cost: see [`budget`](crate::budget).
#[must_use = "a reservation stands as charged at its estimate until settled"]
pub struct CompactReserved<K, A> {
    limiter: CompactKeyedLimiter<K, A>,
    key: K,
    decision: Decision,
    reserved: u64,
}

impl<K, A> CompactReserved<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
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
    /// `actual − reserved` (with debt) or refunds `reserved − actual`.
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

impl<K: fmt::Debug, A> fmt::Debug for CompactReserved<K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactReserved")
            .field("key", &self.key)
            .field("decision", &self.decision)
            .field("reserved", &self.reserved)
            .finish_non_exhaustive()
    }
}

impl<K, A> Shared<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// Runs `change` on `key`'s state under its shard's lock, writing the
    /// word back (or removing a state left fresh); `None` for a key
    /// without a state, whose lock and vacant slot are handed back.
    fn on_word<R>(
        &self,
        key: &K,
        change: impl FnOnce(&AtomicU64) -> R,
    ) -> Result<R, (Locked<'_, K>, usize)> {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let mut locked = shard.lock(&self.words);
        match locked.find(key, shard.home(hash)) {
            Probe::Found(slot) => {
                let stored = locked.stored(slot);
                let mut cell = AtomicU64::new(stored ^ self.fresh);
                let result = change(&cell);
                self.write_back(&mut locked, slot, stored, &mut cell);
                Ok(result)
            }
            Probe::Vacant(slot) => Err((locked, slot)),
        }
    }

    fn charge(&self, key: &K, cost: u64, now: Nanos) -> Charge {
        let charged = |cell: &AtomicU64, at: Nanos| {
            let recorded = self.algorithm.charge_cell(cell, at, cost);
            let decision = self.algorithm.peek_cell(cell, at, 1);
            Charge::new(decision, cost, recorded)
        };
        let (mut locked, slot) = match self.on_word(key, |cell| charged(cell, now)) {
            Ok(charge) => return charge,
            Err(vacant) => vacant,
        };
        let at = self.fresh_time(now);
        let later_by = at.as_u64() - now.as_u64();
        let cell = self.algorithm.new_cell();
        if cost == 0 {
            // Nothing to record: a fresh state answers.
            return charged(&cell, at).map_decision(|d| d.seen_earlier_by(later_by));
        }
        if locked.is_full() || !self.reserve_slot() {
            drop(locked);
            self.wake_sweeper();
            // Relaxed: a counter.
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            return charged(&self.overflow, now);
        }
        let charge = charged(&cell, at);
        let mut cell = cell;
        let stored = word_of(&mut cell) ^ self.fresh;
        if stored == 0 {
            // Nothing recorded (past the end of representable time).
            self.live.fetch_sub(1, Ordering::Relaxed);
        } else {
            locked.insert(slot, key, stored);
        }
        charge.map_decision(|d| d.seen_earlier_by(later_by))
    }

    fn refund(&self, key: &K, permits: u64, now: Nanos) -> Decision {
        let refunded = self.on_word(key, |cell| {
            self.algorithm.refund_cell(cell, now, permits);
            self.algorithm.peek_cell(cell, now, 1)
        });
        match refunded {
            Ok(decision) => decision,
            // No state: full, nothing to give back.
            Err((locked, _)) => {
                drop(locked);
                self.algorithm.peek_cell(&self.algorithm.new_cell(), now, 1)
            }
        }
    }
}
