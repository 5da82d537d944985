//! The concurrent map behind [`KeyedLimiter`](crate::KeyedLimiter), reduced
//! to the four operations it needs, each with the exclusion it relies on:
//!
//! - [`KeyMap::read`]: shared access to one key's entry (concurrent with
//!   other reads of it, exclusive with `update`, `upsert` and `retain` on it);
//! - [`KeyMap::update`] and [`KeyMap::upsert`]: exclusive access to one key;
//! - [`KeyMap::retain`]: exclusive access to each entry while it is judged.
//!
//! Normally [`scc::HashMap`] (bucket-level read/write locks, incremental
//! resizing, shrinking by itself). Under `--cfg loom` it is a loom `RwLock`
//! around a std `HashMap`: the same contract with every interleaving
//! explored, so the keyed limiter's protocol is model-checked on top of it.

use std::borrow::Borrow;
use std::hash::Hash;

type Hasher = foldhash::fast::RandomState;

/// A concurrent map from keys to entries.
pub(crate) struct KeyMap<K, V> {
    #[cfg(not(loom))]
    inner: scc::HashMap<K, V, Hasher>,
    #[cfg(loom)]
    inner: loom::sync::RwLock<std::collections::HashMap<K, V, Hasher>>,
}

/// What [`KeyMap::upsert`] found.
pub(crate) enum Slot<'a, V> {
    /// The key was there.
    Occupied(&'a mut V),
    /// The key was not there; the value passed to `upsert` is now its entry.
    Inserted(&'a V),
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Send + Sync + 'static, V: Send + Sync + 'static> KeyMap<K, V> {
    pub(crate) fn new() -> KeyMap<K, V> {
        KeyMap {
            inner: scc::HashMap::with_hasher(Hasher::default()),
        }
    }

    pub(crate) fn read<Q, R>(&self, key: &Q, reader: impl FnOnce(&K, &V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.read_sync(key, reader)
    }

    pub(crate) fn update<Q, R>(&self, key: &Q, updater: impl FnOnce(&K, &mut V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.update_sync(key, updater)
    }

    /// Inserts `value` under `key` unless the key is there; then runs `then`
    /// on what is there, with the key held exclusively.
    pub(crate) fn upsert<R>(&self, key: K, value: V, then: impl FnOnce(Slot<'_, V>) -> R) -> R {
        match self.inner.entry_sync(key) {
            scc::hash_map::Entry::Occupied(mut occupied) => {
                then(Slot::Occupied(occupied.get_mut()))
            }
            scc::hash_map::Entry::Vacant(vacant) => {
                let occupied = vacant.insert_entry(value);
                then(Slot::Inserted(occupied.get()))
            }
        }
    }

    pub(crate) fn retain(&self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.inner.retain_sync(keep);
    }

    /// Hands back the memory of removed entries and emptied tables now.
    ///
    /// scc frees them through `sdd`'s epochs, which a thread advances only
    /// every 128 guards: without this, a sweep's garbage waits for hundreds
    /// more operations on the sweeping thread.
    pub(crate) fn reclaim(&self) {
        // Three epoch advances retire everything a finished sweep dropped
        // (a guard made after each advance rotates this thread's bags). A
        // round's advance is skipped while another thread scans the
        // collector chain or holds a guard from an older epoch: twice the
        // rounds leave room for that, at the cost of a few guards per sweep.
        for _ in 0..8 {
            let guard = scc::Guard::new();
            guard.accelerate();
        }
    }
}

#[cfg(loom)]
impl<K: Hash + Eq + Send + Sync + 'static, V: Send + Sync + 'static> KeyMap<K, V> {
    pub(crate) fn new() -> KeyMap<K, V> {
        KeyMap {
            inner: loom::sync::RwLock::new(std::collections::HashMap::default()),
        }
    }

    pub(crate) fn read<Q, R>(&self, key: &Q, reader: impl FnOnce(&K, &V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.inner.read().unwrap();
        map.get_key_value(key).map(|(k, v)| reader(k, v))
    }

    pub(crate) fn update<Q, R>(&self, key: &Q, updater: impl FnOnce(&K, &mut V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut map = self.inner.write().unwrap();
        // std's HashMap has no `get_key_value_mut`: remove and reinsert.
        let (k, mut v) = map.remove_entry(key)?;
        let result = updater(&k, &mut v);
        map.insert(k, v);
        Some(result)
    }

    pub(crate) fn upsert<R>(&self, key: K, value: V, then: impl FnOnce(Slot<'_, V>) -> R) -> R {
        let mut map = self.inner.write().unwrap();
        match map.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut occupied) => {
                then(Slot::Occupied(occupied.get_mut()))
            }
            std::collections::hash_map::Entry::Vacant(vacant) => {
                then(Slot::Inserted(vacant.insert(value)))
            }
        }
    }

    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.inner.write().unwrap().retain(|k, v| keep(k, v));
    }

    pub(crate) fn reclaim(&self) {}
}
