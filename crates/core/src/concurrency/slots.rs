//! One limit's slots: the state word, the waiting queue and the hand-off
//! between them. Both [`ConcurrencyLimiter`](super::ConcurrencyLimiter) and
//! each key of [`KeyedConcurrencyLimiter`](super::KeyedConcurrencyLimiter)
//! are one [`Slots`].
//!
//! # The word
//!
//! ```text
//!  63      62 ........ 32   31 ......... 0
//! QUEUED | limit (31 bits) | in_flight (32 bits)
//! ```
//!
//! `in_flight` counts the slots of every live [`Permit`](super::Permit) and
//! of every grant not yet picked up by its waiter; `limit` is the limit in
//! force (fixed, or moved by the adaptive controller); `QUEUED` is set
//! exactly while some waiter is queued (it is only set and cleared under the
//! queue's mutex, together with the queue's change).
//!
//! # The protocol
//!
//! - **Acquire, fast path** (`QUEUED` clear): one compare-and-swap adding
//!   `cost` if `in_flight + cost ≤ threshold(limit, priority)`. A request
//!   that does not fit is answered from the load alone and writes nothing;
//!   one whose cost alone passes its threshold is refused as
//!   [`Reason::Cost`] (here and on every path: it is never queued).
//! - **Acquire, slow path** (`QUEUED` set): under the queue's mutex, the
//!   same compare-and-swap, and only if no waiter of the same or a higher
//!   priority is queued (no barging).
//! - **Release**: one `fetch_sub` of `cost`. If the value it replaced had
//!   `QUEUED`, the releaser then takes the mutex and grants queued waiters,
//!   in order, as long as they fit: highest priority first, FIFO within a
//!   priority, and never past a head that does not fit (a lower priority
//!   never overtakes a higher one).
//! - **Enqueue**: under the mutex, `fetch_or(QUEUED)` first, then the
//!   admission check on the value that returned. Every read-modify-write of
//!   the word is totally ordered, so a release either came before the flag
//!   (and the enqueuer's check sees its slots) or after (and the releaser
//!   sees the flag and waits for the mutex, behind the enqueuer): no wake-up
//!   is lost.
//! - **Cancel** (a ticket dropped): under the mutex, a queued waiter leaves
//!   the queue (and the waiters behind it are granted if they now fit); a
//!   granted but unclaimed grant is released like a permit.
//!
//! # Guarantee
//!
//! `in_flight ≤ limit` is checked by every compare-and-swap that raises
//! `in_flight`, on the very word it replaces, so **the slots held by live
//! permits and pending grants never exceed the limit in force when each
//! was taken**. Lowering the limit revokes nothing: no new slot is granted
//! until `in_flight` is back under the new limit.

use std::collections::VecDeque;
use std::task::Waker;

use super::adaptive::{Adaptive, Sample};
use super::config::{Denied, Priority, Reason, Shares};
use crate::clock::Nanos;
use crate::sync::{AtomicU64, Mutex, Ordering, lock};

const IN_FLIGHT: u64 = 0xFFFF_FFFF;
const LIMIT_SHIFT: u32 = 32;
const LIMIT: u64 = 0x7FFF_FFFF << LIMIT_SHIFT;
const QUEUED: u64 = 1 << 63;

#[inline]
const fn in_flight(word: u64) -> u32 {
    (word & IN_FLIGHT) as u32
}

#[inline]
const fn limit(word: u64) -> u32 {
    ((word & LIMIT) >> LIMIT_SHIFT) as u32
}

#[inline]
const fn queued(word: u64) -> bool {
    word & QUEUED != 0
}

#[inline]
const fn with_limit(word: u64, new: u32) -> u64 {
    (word & !LIMIT) | ((new as u64) << LIMIT_SHIFT)
}

/// A snapshot of the word, for observers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) limit: u32,
    pub(crate) in_flight: u32,
    pub(crate) queued: bool,
}

/// One limit's state; see the [module docs](self).
pub(crate) struct Slots {
    word: AtomicU64,
    shares: Shares,
    max_waiters: usize,
    /// Allocated on the first waiter: a key that never queues pays one word.
    queue: Mutex<Option<Box<Queue>>>,
    pub(crate) adaptive: Option<Box<Adaptive>>,
}

/// The waiting queue: one FIFO lane per priority.
#[derive(Default)]
struct Queue {
    lanes: [VecDeque<Waiter>; 3],
    /// Grants made to waiters that have not yet claimed them.
    granted: Vec<(u64, u32)>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    cost: u32,
    waker: Option<Waker>,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }

    fn waiting(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum()
    }

    /// Whether no waiter of `priority` or higher is queued.
    fn nobody_ahead(&self, priority: Priority) -> bool {
        self.lanes[..=priority.lane()]
            .iter()
            .all(VecDeque::is_empty)
    }
}

/// What [`Slots::enqueue`] did.
pub(crate) enum Enqueued {
    /// Admitted at once: `in_flight` after.
    Now(u32),
    /// Queued under this id.
    Queued(u64),
}

/// What [`Slots::claim`] found.
pub(crate) enum Claim {
    /// Granted: the waiter owns `cost` slots now.
    Granted,
    /// Still queued; the waker was recorded.
    Waiting,
}

impl Slots {
    pub(crate) fn new(
        limit: u32,
        shares: Shares,
        max_waiters: usize,
        adaptive: Option<Box<Adaptive>>,
    ) -> Slots {
        debug_assert!(
            (1..=super::config::MAX_LIMIT).contains(&limit),
            "limit {limit}"
        );
        Slots {
            word: AtomicU64::new(with_limit(0, limit)),
            shares,
            max_waiters,
            queue: Mutex::new(None),
            adaptive,
        }
    }

    pub(crate) fn load(&self) -> Load {
        // Relaxed: a snapshot for observers, ordered with nothing.
        let word = self.word.load(Ordering::Relaxed);
        Load {
            limit: limit(word),
            in_flight: in_flight(word),
            queued: queued(word),
        }
    }

    /// Whether nothing holds or waits for a slot: the state is a fresh one's
    /// (but for an adaptive limit's learnt value).
    pub(crate) fn is_idle(&self) -> bool {
        // Relaxed: called under the keyed map's write lock, which excludes
        // every acquisition of this key (they run under its read lock); a
        // release racing this load only lowers `in_flight` further.
        let word = self.word.load(Ordering::Relaxed);
        in_flight(word) == 0 && !queued(word)
    }

    /// The slots `priority` may see in use, with `limit` in all.
    pub(crate) fn threshold(&self, limit: u32, priority: Priority) -> u32 {
        self.shares.threshold(limit, priority)
    }

    fn denied(&self, word: u64, reason: Reason, priority: Priority) -> Denied {
        let threshold = self.shares.threshold(limit(word), priority);
        Denied {
            reason,
            limit: limit(word),
            in_flight: in_flight(word),
            remaining: threshold.saturating_sub(in_flight(word)),
        }
    }

    /// Takes `cost` slots if they fit: `Ok(in_flight after)`.
    #[inline]
    pub(crate) fn try_acquire(&self, cost: u32, priority: Priority) -> Result<u32, Denied> {
        // Relaxed: the value is only a guess that the compare-and-swap checks.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if queued(word) {
                return self.try_acquire_queued(cost, priority);
            }
            let threshold = self.shares.threshold(limit(word), priority);
            let now = in_flight(word) as u64 + cost as u64;
            if now > threshold as u64 {
                // A cost above the share can never fit it, whatever is
                // released: refused as a cost, not as a full limit.
                let reason = if cost > threshold {
                    Reason::Cost
                } else {
                    Reason::Full
                };
                return Err(self.denied(word, reason, priority));
            }
            // Acquire on success: pairs with the Release of the `fetch_sub`
            // that freed these slots, so that whatever the previous holder
            // did under its permit happens before this holder's work (a
            // semaphore's contract). Relaxed on failure: the value read is
            // only retried.
            match self.word.compare_exchange_weak(
                word,
                word + cost as u64,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(now as u32),
                Err(actual) => word = actual,
            }
        }
    }

    /// The slow path of `try_acquire`, under the queue's mutex.
    #[cold]
    fn try_acquire_queued(&self, cost: u32, priority: Priority) -> Result<u32, Denied> {
        let guard = lock(&self.queue);
        let ahead = guard.as_ref().is_some_and(|q| !q.nobody_ahead(priority));
        let result = self.admit_locked(cost, priority, ahead);
        drop(guard);
        result
    }

    /// The admission check under the queue's mutex: `ahead` says whether
    /// waiters of the same or a higher priority are queued.
    fn admit_locked(&self, cost: u32, priority: Priority, ahead: bool) -> Result<u32, Denied> {
        // Relaxed: checked by the compare-and-swap below.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let threshold = self.shares.threshold(limit(word), priority);
            let now = in_flight(word) as u64 + cost as u64;
            // Above the priority's share (the whole limit for critical
            // work), it can never be granted: refused at once, never queued
            // (a queued head that cannot fit would block everyone behind).
            if cost > threshold {
                return Err(self.denied(word, Reason::Cost, priority));
            }
            if ahead {
                return Err(self.denied(word, Reason::Queued, priority));
            }
            if now > threshold as u64 {
                return Err(self.denied(word, Reason::Full, priority));
            }
            // Acquire on success: as in `try_acquire`.
            match self.word.compare_exchange_weak(
                word,
                word + cost as u64,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(now as u32),
                Err(actual) => word = actual,
            }
        }
    }

    /// Gives `cost` slots back and grants waiters they now make room for.
    #[inline]
    pub(crate) fn release(&self, cost: u32) {
        // Release: publishes the holder's work to the next acquirer (see
        // `try_acquire`). The flag in the value replaced says whether
        // waiters must be served; the mutex orders what follows.
        let before = self.word.fetch_sub(cost as u64, Ordering::Release);
        debug_assert!(
            in_flight(before) >= cost,
            "released {cost} slots with {} in flight",
            in_flight(before)
        );
        if queued(before) {
            self.serve();
        }
    }

    /// Under the mutex, grants queued waiters while they fit.
    #[cold]
    fn serve(&self) {
        let mut guard = lock(&self.queue);
        let mut woken = Vec::new();
        if let Some(queue) = guard.as_mut() {
            self.grant_locked(queue, &mut woken);
        }
        drop(guard);
        woken.into_iter().for_each(Waker::wake);
    }

    /// Grants heads highest priority first, FIFO within one, stopping at the
    /// first head that does not fit; clears `QUEUED` once the queue is empty.
    fn grant_locked(&self, queue: &mut Queue, woken: &mut Vec<Waker>) {
        'lanes: for priority in Priority::HIGHEST_FIRST {
            let lane = priority.lane();
            while let Some(head) = queue.lanes[lane].front() {
                let cost = head.cost;
                // Relaxed: checked by the compare-and-swap.
                let mut word = self.word.load(Ordering::Relaxed);
                loop {
                    let threshold = self.shares.threshold(limit(word), priority);
                    if in_flight(word) as u64 + cost as u64 > threshold as u64 {
                        break 'lanes;
                    }
                    // Acquire: as in `try_acquire`; the waiter learns of the
                    // grant under this mutex, which carries the ordering on.
                    match self.word.compare_exchange_weak(
                        word,
                        word + cost as u64,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(actual) => word = actual,
                    }
                }
                if let Some(waiter) = queue.lanes[lane].pop_front() {
                    queue.granted.push((waiter.id, waiter.cost));
                    woken.extend(waiter.waker);
                }
            }
            if !queue.lanes[lane].is_empty() {
                break;
            }
        }
        if queue.is_empty() {
            // Relaxed: the flag's meaning is guarded by the mutex we hold;
            // lock-free readers only use it to decide to take the mutex.
            self.word.fetch_and(!QUEUED, Ordering::Relaxed);
        }
    }

    /// Admits `cost` slots at once if no one is ahead and they fit, else
    /// queues a waiter, or refuses (cost above the limit, queue full).
    pub(crate) fn enqueue(&self, cost: u32, priority: Priority) -> Result<Enqueued, Denied> {
        let mut guard = lock(&self.queue);
        let queue = guard.get_or_insert_with(Box::default);
        // Relaxed: the flag is guarded by the mutex; the total order of the
        // word's read-modify-writes does the rest (see the module docs).
        let word = self.word.fetch_or(QUEUED, Ordering::Relaxed);
        let ahead = !queue.nobody_ahead(priority);
        let admitted = self.admit_locked(cost, priority, ahead);
        let result = match admitted {
            Ok(now) => Ok(Enqueued::Now(now)),
            Err(denied) if denied.reason == Reason::Cost => Err(denied),
            Err(_) if queue.waiting() >= self.max_waiters => {
                Err(self.denied(word, Reason::QueueFull, priority))
            }
            Err(_) => {
                let id = queue.next_id;
                queue.next_id += 1;
                queue.lanes[priority.lane()].push_back(Waiter {
                    id,
                    cost,
                    waker: None,
                });
                Ok(Enqueued::Queued(id))
            }
        };
        if queue.is_empty() {
            // Relaxed: as in `grant_locked`.
            self.word.fetch_and(!QUEUED, Ordering::Relaxed);
        }
        drop(guard);
        result
    }

    /// Whether waiter `id` (of `priority`) was granted; records `waker` if not.
    pub(crate) fn claim(&self, id: u64, priority: Priority, waker: &Waker) -> Claim {
        let mut guard = lock(&self.queue);
        let Some(queue) = guard.as_mut() else {
            // Unreachable (a queued ticket allocated the queue); never
            // hand out slots that were not granted: the waiter times out.
            debug_assert!(false, "a ticket without a queue");
            return Claim::Waiting;
        };
        if let Some(at) = queue.granted.iter().position(|&(g, _)| g == id) {
            queue.granted.swap_remove(at);
            return Claim::Granted;
        }
        if let Some(waiter) = queue.lanes[priority.lane()]
            .iter_mut()
            .find(|waiter| waiter.id == id)
        {
            match &mut waiter.waker {
                Some(known) if known.will_wake(waker) => {}
                slot => *slot = Some(waker.clone()),
            }
        } else {
            debug_assert!(false, "ticket {id} neither queued nor granted");
        }
        Claim::Waiting
    }

    /// Withdraws waiter `id`: out of the queue if still queued (serving
    /// those behind it), its slots released if granted but unclaimed.
    pub(crate) fn cancel(&self, id: u64, priority: Priority) {
        let mut guard = lock(&self.queue);
        let Some(queue) = guard.as_mut() else {
            return;
        };
        if let Some(at) = queue.granted.iter().position(|&(g, _)| g == id) {
            let (_, cost) = queue.granted.swap_remove(at);
            drop(guard);
            self.release(cost);
            return;
        }
        let lane = &mut queue.lanes[priority.lane()];
        if let Some(at) = lane.iter().position(|waiter| waiter.id == id) {
            lane.remove(at);
            let mut woken = Vec::new();
            self.grant_locked(queue, &mut woken);
            drop(guard);
            woken.into_iter().for_each(Waker::wake);
        }
    }

    /// Sets the limit in force and grants waiters it makes room for.
    pub(crate) fn set_limit(&self, new: u32) {
        debug_assert!((1..=super::config::MAX_LIMIT).contains(&new), "limit {new}");
        // Relaxed: the limit bits carry no other data; admissions check
        // them on the same word they update.
        let before = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                Some(with_limit(word, new))
            })
            .unwrap_or_else(|word| word);
        if queued(before) && new > limit(before) {
            self.serve();
        }
    }

    /// The sample a permit of `cost` taken with `in_flight` after it should
    /// carry to the adaptive controller, if there is one.
    #[inline]
    pub(crate) fn start_sample(&self, in_flight: u32) -> Option<Sample> {
        self.adaptive.as_ref().map(|adaptive| Sample {
            started: adaptive.now(),
            in_flight,
        })
    }

    /// Feeds a finished permit's sample to the adaptive controller.
    pub(crate) fn finish_sample(&self, sample: Sample, dropped: bool) {
        if let Some(adaptive) = &self.adaptive {
            let now: Nanos = adaptive.now();
            if let Some(new) = adaptive.on_sample(sample, now, dropped) {
                self.set_limit(new);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn slots(limit: u32) -> Slots {
        Slots::new(limit, Shares::default(), 16, None)
    }

    #[test]
    fn the_word_packs_three_fields() {
        let word = with_limit(0, super::super::config::MAX_LIMIT) | QUEUED | 7;
        assert_eq!(in_flight(word), 7);
        assert_eq!(limit(word), super::super::config::MAX_LIMIT);
        assert!(queued(word));
        assert_eq!(limit(with_limit(word, 3)), 3);
        assert_eq!(in_flight(with_limit(word, 3)), 7);
    }

    #[test]
    fn a_denial_writes_nothing_and_says_why() {
        let slots = slots(2);
        assert_eq!(slots.try_acquire(2, Priority::Critical), Ok(2));
        let denied = slots.try_acquire(1, Priority::Critical).unwrap_err();
        assert_eq!(denied.reason(), Reason::Full);
        assert_eq!(
            (denied.limit(), denied.in_flight(), denied.remaining()),
            (2, 2, 0)
        );
        let cost = slots.try_acquire(3, Priority::Critical).unwrap_err();
        assert_eq!(cost.reason(), Reason::Cost);
        slots.release(2);
        assert_eq!(slots.load().in_flight, 0);
    }

    #[test]
    fn release_hands_slots_to_the_queue_before_anyone_else() {
        let slots = slots(1);
        assert_eq!(slots.try_acquire(1, Priority::Default), Ok(1));
        let Ok(Enqueued::Queued(id)) = slots.enqueue(1, Priority::Default) else {
            panic!("the second caller should queue");
        };
        assert!(slots.load().queued);
        // A newcomer may not barge in, even once the slot is free.
        assert_eq!(
            slots
                .try_acquire(1, Priority::Default)
                .unwrap_err()
                .reason(),
            Reason::Queued
        );
        slots.release(1);
        assert_eq!(
            slots.load(),
            Load {
                limit: 1,
                in_flight: 1,
                queued: false
            }
        );
        assert!(matches!(
            slots.claim(id, Priority::Default, std::task::Waker::noop()),
            Claim::Granted
        ));
    }

    #[test]
    fn a_cancelled_grant_goes_to_the_next_waiter() {
        let slots = slots(1);
        slots.try_acquire(1, Priority::Critical).unwrap();
        let Ok(Enqueued::Queued(first)) = slots.enqueue(1, Priority::Critical) else {
            panic!()
        };
        let Ok(Enqueued::Queued(second)) = slots.enqueue(1, Priority::Critical) else {
            panic!()
        };
        slots.release(1);
        // `first` was granted but gives up before claiming: `second` gets it.
        slots.cancel(first, Priority::Critical);
        assert!(matches!(
            slots.claim(second, Priority::Critical, std::task::Waker::noop()),
            Claim::Granted
        ));
        assert_eq!(slots.load().in_flight, 1);
        slots.release(1);
        assert_eq!(
            slots.load(),
            Load {
                limit: 1,
                in_flight: 0,
                queued: false
            }
        );
    }

    #[test]
    fn a_lower_priority_never_overtakes_a_higher_waiter() {
        let slots = slots(10);
        slots.try_acquire(10, Priority::Critical).unwrap();
        let Ok(Enqueued::Queued(big)) = slots.enqueue(3, Priority::Critical) else {
            panic!()
        };
        let Ok(Enqueued::Queued(small)) = slots.enqueue(1, Priority::Sheddable) else {
            panic!()
        };
        slots.release(2);
        // 2 free: the critical head needs 3, so the sheddable one waits too.
        let noop = std::task::Waker::noop();
        assert!(matches!(
            slots.claim(big, Priority::Critical, noop),
            Claim::Waiting
        ));
        assert!(matches!(
            slots.claim(small, Priority::Sheddable, noop),
            Claim::Waiting
        ));
        slots.release(8);
        assert!(matches!(
            slots.claim(big, Priority::Critical, noop),
            Claim::Granted
        ));
        assert!(matches!(
            slots.claim(small, Priority::Sheddable, noop),
            Claim::Granted
        ));
        assert_eq!(slots.load().in_flight, 4);
    }

    #[test]
    fn raising_the_limit_serves_waiters() {
        let slots = slots(1);
        slots.try_acquire(1, Priority::Critical).unwrap();
        let Ok(Enqueued::Queued(id)) = slots.enqueue(1, Priority::Critical) else {
            panic!()
        };
        slots.set_limit(2);
        assert!(matches!(
            slots.claim(id, Priority::Critical, std::task::Waker::noop()),
            Claim::Granted
        ));
        assert_eq!(
            slots.load(),
            Load {
                limit: 2,
                in_flight: 2,
                queued: false
            }
        );
    }

    #[test]
    fn the_queue_cap_refuses_at_once() {
        let slots = Slots::new(1, Shares::default(), 1, None);
        slots.try_acquire(1, Priority::Critical).unwrap();
        assert!(matches!(
            slots.enqueue(1, Priority::Critical),
            Ok(Enqueued::Queued(_))
        ));
        let refused = slots.enqueue(1, Priority::Critical).err().unwrap();
        assert_eq!(refused.reason(), Reason::QueueFull);
    }
}
