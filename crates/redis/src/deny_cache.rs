//! The deny cache: a key denied by Redis is answered locally until its exact
//! `retry_after`, with no round trip.
//!
//! # Why it never denies past the real retry time
//!
//! An entry lasts until `sent + retry_after`, where `sent` is the local time
//! read *before* the script was sent: the script decided at some instant
//! after `sent`, so the request fits at the earliest at that instant plus
//! `retry_after`, which is no earlier than the entry's end. (Other nodes'
//! admissions can only push the real retry time later.)
//!
//! It answers only a request of the **same cost** as the cached denial: a
//! smaller one may fit earlier, a larger one later, and both deserve their
//! own exact `retry_after`. The answer carries the cached `limit` and
//! `remaining`, and `retry_after` / `reset_after` counted down to now.
//!
//! Memory is bounded in entries and in bytes: entries are keyed by the
//! bounded key (at most [`MAX_INLINE_KEY`](crate::key::MAX_INLINE_KEY)
//! bytes, long keys hashed), at most `capacity` of them; when full, expired entries
//! are swept (at most once per millisecond of local time) and a new denial
//! that still finds no room is not cached.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tollgate::{Decision, Nanos};

use crate::key::BoundedKey;

#[derive(Clone, Copy, Debug)]
struct Entry {
    until: Nanos,
    reset_at: Nanos,
    limit: u64,
    remaining: u64,
}

#[derive(Debug)]
pub(crate) struct DenyCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By key and cost: a denial of one cost says nothing exact of another.
    entries: HashMap<(BoundedKey, u64), Entry>,
    last_sweep: Option<Nanos>,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A map of plain values stays valid if a holder panicked.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The standing denial of `cost` permits of `key` at `now`, if any.
    pub(crate) fn get(&self, key: &BoundedKey, cost: u64, now: Nanos) -> Option<Decision> {
        let mut inner = self.lock();
        // The tuple key owns its bytes: one copy of at most 128 bytes per
        // lookup, on a path that saves a network round trip.
        let slot = (key.clone(), cost);
        let entry = *inner.entries.get(&slot)?;
        if now >= entry.until {
            inner.entries.remove(&slot);
            return None;
        }
        Some(Decision::from_parts(
            false,
            entry.limit,
            entry.remaining,
            entry.until.saturating_duration_since(now),
            entry.reset_at.saturating_duration_since(now),
        ))
    }

    /// Records Redis's `denial` of `cost` permits of `key`, asked at `sent`.
    pub(crate) fn put(&self, key: &BoundedKey, cost: u64, sent: Nanos, denial: &Decision) {
        // "Never" (a cost above capacity) is an error earlier; do not cache it.
        if denial.is_allowed() || denial.retry_after() == Duration::from_nanos(u64::MAX) {
            return;
        }
        let entry = Entry {
            until: sent.saturating_add(denial.retry_after()),
            reset_at: sent.saturating_add(denial.reset_after()),
            limit: denial.limit(),
            remaining: denial.remaining(),
        };
        let slot = (key.clone(), cost);
        let mut inner = self.lock();
        if inner.entries.len() >= self.capacity && !inner.entries.contains_key(&slot) {
            let due = inner.last_sweep.is_none_or(|last| {
                sent.saturating_duration_since(last) >= Duration::from_millis(1)
            });
            if due {
                inner.last_sweep = Some(sent);
                inner.entries.retain(|_, e| e.until > sent);
            }
            if inner.entries.len() >= self.capacity {
                return;
            }
        }
        inner.entries.insert(slot, entry);
    }

    /// Forgets every cached denial of `key` (a control changed its state).
    pub(crate) fn remove(&self, key: &BoundedKey) {
        self.lock().entries.retain(|(k, _), _| k != key);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Bytes of key held, over every entry.
    #[cfg(test)]
    pub(crate) fn key_bytes(&self) -> usize {
        self.lock()
            .entries
            .keys()
            .map(|(k, _)| k.as_bytes().len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(key: &[u8]) -> BoundedKey {
        BoundedKey::new(key)
    }

    fn denial(retry_ms: u64) -> Decision {
        Decision::from_parts(
            false,
            10,
            0,
            Duration::from_millis(retry_ms),
            Duration::from_millis(retry_ms * 2),
        )
    }

    #[test]
    fn answers_same_cost_until_exact_retry() {
        let c = DenyCache::new(10);
        c.put(&k(b"k"), 2, Nanos::new(1_000), &denial(5));
        let d = c.get(&k(b"k"), 2, Nanos::new(1_000 + 1_000_000)).unwrap();
        assert!(d.is_denied());
        assert_eq!(d.retry_after(), Duration::from_millis(4));
        assert_eq!(d.reset_after(), Duration::from_millis(9));
        assert!(c.get(&k(b"k"), 1, Nanos::new(2_000)).is_none());
        assert!(c.get(&k(b"k"), 3, Nanos::new(2_000)).is_none());
        assert!(
            c.get(&k(b"k"), 2, Nanos::new(1_000 + 5_000_000 - 1))
                .is_some()
        );
        assert!(c.get(&k(b"k"), 2, Nanos::new(1_000 + 5_000_000)).is_none());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn bounded_and_swept() {
        let c = DenyCache::new(2);
        c.put(&k(b"a"), 1, Nanos::new(0), &denial(1));
        c.put(&k(b"b"), 1, Nanos::new(0), &denial(100));
        c.put(&k(b"c"), 1, Nanos::new(0), &denial(100));
        assert_eq!(c.len(), 2);
        // After "a" expired, a sweep makes room.
        c.put(&k(b"c"), 1, Nanos::new(2_000_000), &denial(100));
        assert_eq!(c.len(), 2);
        assert!(c.get(&k(b"c"), 1, Nanos::new(2_000_001)).is_some());
    }
}
