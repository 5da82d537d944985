//! The check path: a known key under its shard's lock, a new or
//! re-resolved key under the same lock with the shard's tables changed,
//! the overflow state, and the sweep.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use super::entry::{Answer, Entry, Mode, ShardTag, run};
use super::{DEFAULT_SWEEP_EVERY, Shared};
use crate::algorithm::Algorithm;
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::keymap::{Held, HeldMut, ShardMut};
use crate::sync::Ordering;

/// A shard of a keyed limiter's map, locked.
type Shard<'a, K, A> = ShardMut<'a, K, ShardTag<A>, <A as Algorithm>::Cell, Entry<A>>;

impl<K, A> Shared<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// Decides `cost` for `key`: the path of a known key of the current
    /// rules here, inlined into the public methods (and through them into
    /// their callers) so that the decision is built where it is used; the
    /// rest in [`decide_slow`](Self::decide_slow). It answers in the
    /// caller's own type ([`Answer`]) rather than in a `Result` the caller
    /// unwraps: a 48-byte decision built in one slot and copied to another is
    /// read with wider loads than it was written with, which stalled on
    /// store forwarding (seen with perf: a quarter of a keyed check).
    #[inline(always)]
    pub(super) fn decide<Q, R: Answer>(&self, key: &Q, cost: u64, mode: Mode) -> R
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = self.clock.now();
        // Acquire: pairs with the Release of a change, so that an entry of the
        // current generation is decided under the rules that change published.
        let generation = self.generation.load(Ordering::Acquire);
        // A known key of the current generation: its shard's lock, held
        // once. A hot entry runs its shard's default, current if the shard's
        // tag is; any other entry says which generation resolved it. (Either
        // may be newer than the generation read: a request that read a later
        // one brought it up to date; its rules are then the current ones.)
        // The guard is dropped at the end of the arm, before the slow path
        // locks the shard again.
        let known = match self.map.get(key) {
            Some(mut found) => {
                match found.held() {
                    Some(Held::Hot(tag, cell)) if tag.generation >= generation => {
                        return run(&tag.algorithm.algorithm, cell, now, cost, mode);
                    }
                    Some(Held::Other(entry)) if entry.algorithm.generation >= generation => {
                        return entry.run(now, cost, mode);
                    }
                    _ => {}
                }
                true
            }
            None => false,
        };
        self.decide_slow(key, cost, mode, now, generation, known)
    }

    /// A key that is new, or whose quota changed since its last request.
    #[inline(never)]
    fn decide_slow<Q, R: Answer>(
        &self,
        key: &Q,
        cost: u64,
        mode: Mode,
        now: Nanos,
        generation: u64,
        known: bool,
    ) -> R
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if known {
            // Its quota changed: re-resolve and carry its state over.
            let mut shard = self.map.write(key);
            self.bring_up(&mut shard, generation);
            let promote = match shard.find(key) {
                // Brought up by another request meanwhile.
                Some(HeldMut::Hot(tag, cell)) => {
                    return run(&tag.algorithm.algorithm, cell, now, cost, mode);
                }
                Some(HeldMut::Other(tag, key, entry)) => {
                    if entry.algorithm.generation < generation {
                        self.refresh(key, entry, now);
                    }
                    if !Arc::ptr_eq(&entry.algorithm, &tag.algorithm) {
                        return entry.run(now, cost, mode);
                    }
                    true
                }
                // Swept meanwhile: it is new again.
                None => false,
            };
            if promote {
                // Back on its shard's default: a hot entry again.
                if let Some((tag, cell)) = shard.promote(key, |entry| entry.cell) {
                    return run(&tag.algorithm.algorithm, cell, now, cost, mode);
                }
            }
        }
        let owned = K::from(key.to_owned());
        let tier = self.resolve(&owned);
        let mut fresh = Entry {
            cell: tier.algorithm.new_cell(),
            algorithm: Arc::clone(&tier.algorithm),
        };
        // A state that a sweep removed was idle at the sweep's reading and at
        // every later instant, not before: a fresh state answers for it only
        // from there on, so it decides at the later of `now` and the latest
        // sweep's reading (a swept key never re-credits, whether the sweep
        // raced this request or the clock went back since).
        if mode == Mode::Peek || cost == 0 {
            // Looking never creates a state, nor does a charge of nothing: a
            // fresh one answers (a charge answers for one permit).
            let looked = if mode == Mode::Charge { 1 } else { cost };
            let at = self.fresh_time(now);
            return fresh
                .run::<R>(at, looked, Mode::Peek)
                .seen_earlier_by(at.as_u64() - now.as_u64());
        }
        if mode == Mode::Check {
            if let Err(error) = fresh.within_capacity(cost) {
                return R::refused(error);
            }
        }
        // The tier carries the rule of a removed override: it is spent now.
        self.spend(&tier, &owned);
        if !self.reserve_slot() {
            if mode == Mode::Charge {
                let (decision, recorded) = self.charge_overflow(now, cost, generation);
                return R::charged(decision, cost, recorded);
            }
            return R::decided(self.decide_overflow(now, cost, generation));
        }
        let mut shard = self.map.write(key);
        self.bring_up(&mut shard, generation);
        match shard.find(key) {
            // Another request created it first: give back the slot.
            Some(HeldMut::Hot(tag, cell)) => {
                self.live.fetch_sub(1, Ordering::Relaxed);
                return run(&tag.algorithm.algorithm, cell, now, cost, mode);
            }
            Some(HeldMut::Other(_, _, entry)) => {
                self.live.fetch_sub(1, Ordering::Relaxed);
                if entry.algorithm.generation < generation {
                    entry.adopt(&tier, now);
                }
                return entry.run(now, cost, mode);
            }
            None => {}
        }
        let at = self.fresh_time(now);
        let decided: R = if Arc::ptr_eq(&fresh.algorithm, &shard.tag().algorithm) {
            let (tag, cell) = shard.insert_hot(owned, fresh.cell);
            run(&tag.algorithm.algorithm, cell, at, cost, mode)
        } else {
            shard.insert_other(owned, fresh).run(at, cost, mode)
        };
        // Decided at `at`: its waits are reported from the caller's reading.
        decided.seen_earlier_by(at.as_u64() - now.as_u64())
    }

    /// Brings `entry` to the current rules: re-resolves its algorithm and,
    /// if it changed, carries its state over.
    pub(super) fn refresh(&self, key: &K, entry: &mut Entry<A>, now: Nanos) {
        let tier = self.resolve(key);
        entry.adopt(&tier, now);
        self.spend(&tier, key);
    }

    /// Brings `shard`'s tag up to the current rules if it is older than
    /// `generation`: its hot entries, resolved under the old tag, become
    /// other entries that each re-resolve on their next request (so that
    /// a state is carried over at its own key's next request, as before the
    /// change), and the shard's hot table starts again under the current
    /// default.
    fn bring_up(&self, shard: &mut Shard<'_, K, A>, generation: u64) {
        if shard.tag().generation >= generation {
            return;
        }
        let tag = ShardTag::new(&self.read_policies().default.algorithm);
        shard.retag(tag, |old, cell| Entry {
            algorithm: Arc::clone(&old.algorithm),
            cell,
        });
    }

    /// Takes one of the `max_keys` slots, if any is free.
    fn reserve_slot(&self) -> bool {
        // Relaxed: the count is a bound, not a publication of other memory;
        // fetch_update makes "below the cap, then one more" one step.
        let reserved = self
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                (live < self.max_keys).then_some(live + 1)
            })
            .is_ok();
        if !reserved {
            if let Some(sweeper) = self.sweeper.get() {
                sweeper.unpark();
            }
        }
        reserved
    }

    /// Charges a new key while the map is full, on the overflow state:
    /// then what one permit would be told, and the permits recorded.
    fn charge_overflow(&self, now: Nanos, cost: u64, generation: u64) -> (Decision, u64) {
        self.counters.overflowed.fetch_add(1, Ordering::Relaxed);
        let mut overflow = crate::sync::lock(&self.overflow);
        if overflow.algorithm.generation < generation {
            let tier = self.read_policies().default.clone();
            overflow.adopt(&tier, now);
        }
        let recorded = overflow.algorithm.charge_cell(&overflow.cell, now, cost);
        (
            overflow.algorithm.peek_cell(&overflow.cell, now, 1),
            recorded,
        )
    }

    /// Decides a request for a new key while the map is full.
    fn decide_overflow(&self, now: Nanos, cost: u64, generation: u64) -> Decision {
        self.counters.overflowed.fetch_add(1, Ordering::Relaxed);
        let mut overflow = crate::sync::lock(&self.overflow);
        if overflow.algorithm.generation < generation {
            let tier = self.read_policies().default.clone();
            overflow.adopt(&tier, now);
        }
        let capacity = overflow.algorithm.capacity();
        if cost > capacity {
            // The key's own quota allows this cost, the shared default does
            // not: it waits for a slot, which a sweep may free.
            let shared = overflow.algorithm.peek_cell(&overflow.cell, now, capacity);
            let retry_after = self.sweep_every.unwrap_or(DEFAULT_SWEEP_EVERY);
            return Decision::deny(
                shared.limit(),
                shared.remaining(),
                crate::clock::saturating_nanos(retry_after),
                crate::clock::saturating_nanos(shared.reset_after()),
            );
        }
        overflow.algorithm.check_cell(&overflow.cell, now, cost)
    }

    /// When a state created fresh after a miss decides: the later of `now`
    /// and the latest reading a sweep judged idleness at.
    #[inline]
    fn fresh_time(&self, now: Nanos) -> Nanos {
        // Relaxed: a sweep stores its reading before it takes any shard's
        // lock to remove a key, and a request that missed that key did so
        // under the same shard's lock taken after the removal (on the miss,
        // and again on the insert): the lock's
        // release/acquire makes the store visible here. A reading from a
        // sweep that removed nothing this request depends on only makes
        // the decision later, never earlier.
        now.max(Nanos::new(self.swept_at.load(Ordering::Relaxed)))
    }

    pub(super) fn sweep(&self) -> usize {
        let now = self.clock.now();
        // Relaxed: ordered before every removal by the shard locks (see
        // `fresh_time`); `fetch_max` keeps the latest of concurrent sweeps.
        self.swept_at.fetch_max(now.as_u64(), Ordering::Relaxed);
        let mut removed = 0;
        self.map.retain(|held| {
            let idle = match held {
                HeldMut::Hot(tag, cell) => tag.algorithm.is_idle(cell, now),
                HeldMut::Other(_, _, entry) => entry.algorithm.is_idle(&entry.cell, now),
            };
            removed += usize::from(idle);
            !idle
        });
        // Relaxed: see `reserve_slot`.
        self.live.fetch_sub(removed, Ordering::Relaxed);
        self.counters
            .evicted
            .fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }
}
