//! The most-denied keys: a Space-Saving heavy-hitter sketch.
//!
//! # Guarantee
//!
//! [`SpaceSaving`] holds at most `k` counters, whatever the number of
//! distinct keys. Each monitored key has a `count` and an `error` such
//! that its true weight (the sum of what [`SpaceSaving::add`] was given
//! for it) obeys
//!
//! ```text
//! count - error <= true <= count
//! ```
//!
//! and a key not monitored has a true weight of at most
//! [`SpaceSaving::min_count`] (0 while fewer than `k` keys were seen). So
//! every key whose true weight exceeds `total / k` is monitored, and the
//! counts sum to the total weight added (Metwally, Agrawal, El Abbadi,
//! "Efficient computation of frequent and top-k elements in data streams",
//! 2005; the weighted form adds `w` where the paper adds 1).
//!
//! # Cost
//!
//! A monitored key is one hash lookup; a new key in a full sketch replaces
//! the smallest counter, found by a scan of the `k` counters (k is small:
//! 64 in the server). Memory is `k` keys and three words each.
//!
//! # Windows
//!
//! "Right now" is two sketches: the current window and the one before
//! ([`Windowed`]); a report merges them so that the bound above still
//! holds over both windows together (a key absent from one sketch counts
//! that sketch's minimum, as its count and as its error).

use std::collections::HashMap;
use std::hash::Hash;

/// One monitored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter<K> {
    /// The key.
    pub key: K,
    /// An upper bound of its true weight.
    pub count: u64,
    /// How much of `count` may belong to keys it replaced:
    /// `count - error` is a lower bound of its true weight.
    pub error: u64,
}

/// Space-Saving with `k` counters (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct SpaceSaving<K> {
    k: usize,
    counters: Vec<Counter<K>>,
    index: HashMap<K, usize>,
    total: u64,
}

impl<K: Hash + Eq + Clone> SpaceSaving<K> {
    /// An empty sketch of `k` counters (at least one).
    pub fn new(k: usize) -> SpaceSaving<K> {
        let k = k.max(1);
        SpaceSaving {
            k,
            counters: Vec::with_capacity(k),
            index: HashMap::with_capacity(k),
            total: 0,
        }
    }

    /// Adds `weight` to `key` (saturating at `u64::MAX`).
    pub fn add(&mut self, key: &K, weight: u64) {
        self.total = self.total.saturating_add(weight);
        if let Some(&i) = self.index.get(key) {
            let counter = &mut self.counters[i];
            counter.count = counter.count.saturating_add(weight);
            return;
        }
        if self.counters.len() < self.k {
            self.index.insert(key.clone(), self.counters.len());
            self.counters.push(Counter {
                key: key.clone(),
                count: weight,
                error: 0,
            });
            return;
        }
        // Full: the smallest counter is taken over; what it counted becomes
        // the new key's error.
        let Some((i, _)) = self
            .counters
            .iter()
            .enumerate()
            .min_by_key(|(_, counter)| counter.count)
        else {
            return;
        };
        let counter = &mut self.counters[i];
        self.index.remove(&counter.key);
        let min = counter.count;
        *counter = Counter {
            key: key.clone(),
            count: min.saturating_add(weight),
            error: min,
        };
        self.index.insert(key.clone(), i);
    }

    /// The bound on the true weight of any key not monitored: the smallest
    /// count when the sketch is full, 0 otherwise.
    pub fn min_count(&self) -> u64 {
        if self.counters.len() < self.k {
            return 0;
        }
        self.counters.iter().map(|c| c.count).min().unwrap_or(0)
    }

    /// The counter of `key`, if monitored.
    pub fn get(&self, key: &K) -> Option<&Counter<K>> {
        self.index.get(key).map(|&i| &self.counters[i])
    }

    /// Every monitored key, in no order.
    pub fn counters(&self) -> &[Counter<K>] {
        &self.counters
    }

    /// The total weight added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The number of counters.
    pub fn capacity(&self) -> usize {
        self.k
    }
}

/// Two consecutive windows of a sketch: the current one and the one
/// before (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Windowed<K> {
    current: SpaceSaving<K>,
    previous: SpaceSaving<K>,
}

impl<K: Hash + Eq + Clone> Windowed<K> {
    /// Two empty windows of `k` counters each.
    pub fn new(k: usize) -> Windowed<K> {
        Windowed {
            current: SpaceSaving::new(k),
            previous: SpaceSaving::new(k),
        }
    }

    /// Adds `weight` to `key` in the current window.
    pub fn add(&mut self, key: &K, weight: u64) {
        self.current.add(key, weight);
    }

    /// Starts a new window: the current one becomes the previous, the
    /// previous is forgotten.
    pub fn rotate(&mut self) {
        let k = self.current.capacity();
        self.previous = std::mem::replace(&mut self.current, SpaceSaving::new(k));
    }

    /// The `n` keys with the largest counts over both windows, largest
    /// first, each with a count and an error for which the sketch's bound
    /// holds over both windows.
    pub fn top(&self, n: usize) -> Vec<Counter<K>> {
        let (cur_min, prev_min) = (self.current.min_count(), self.previous.min_count());
        let mut merged: HashMap<&K, Counter<K>> = HashMap::new();
        for (sketch, other, other_min) in [
            (&self.current, &self.previous, prev_min),
            (&self.previous, &self.current, cur_min),
        ] {
            for counter in sketch.counters() {
                merged.entry(&counter.key).or_insert_with(|| {
                    // Absent from the other window: it counted at most that
                    // window's minimum there, and at least 0.
                    let (count, error) = other
                        .get(&counter.key)
                        .map_or((other_min, other_min), |c| (c.count, c.error));
                    Counter {
                        key: counter.key.clone(),
                        count: counter.count.saturating_add(count),
                        error: counter.error.saturating_add(error),
                    }
                });
            }
        }
        let mut top: Vec<Counter<K>> = merged.into_values().collect();
        top.sort_by(|a, b| b.count.cmp(&a.count).then(a.error.cmp(&b.error)));
        top.truncate(n);
        top
    }

    /// The weight added over both windows.
    pub fn total(&self) -> u64 {
        self.current.total().saturating_add(self.previous.total())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn exact(stream: &[(u32, u64)]) -> HashMap<u32, u64> {
        let mut counts = HashMap::new();
        for &(key, weight) in stream {
            *counts.entry(key).or_insert(0) += weight;
        }
        counts
    }

    /// A skewed stream: a uniform draw `u` in `0..10_000` mapped through
    /// its fourth power, so that small keys are far more frequent (key 0
    /// takes about a sixth of the draws for `n = 100`).
    fn zipf_key(u: u32, n: u32) -> u32 {
        let x = f64::from(u) / 10_000.0;
        // In [0, n): the cast truncates a value below n.
        (x.powi(4) * f64::from(n)) as u32
    }

    fn check_bounds(sketch: &SpaceSaving<u32>, stream: &[(u32, u64)]) {
        let truth = exact(stream);
        let total: u64 = stream.iter().map(|&(_, w)| w).sum();
        assert_eq!(sketch.total(), total);
        let sum: u64 = sketch.counters().iter().map(|c| c.count).sum();
        assert_eq!(sum, total, "the counts sum to the total weight");
        for counter in sketch.counters() {
            let t = truth.get(&counter.key).copied().unwrap_or(0);
            assert!(
                counter.count - counter.error <= t && t <= counter.count,
                "key {}: count {} error {} true {t}",
                counter.key,
                counter.count,
                counter.error
            );
        }
        let min = sketch.min_count();
        for (key, &t) in &truth {
            if sketch.get(key).is_none() {
                assert!(t <= min, "unmonitored key {key}: true {t} > min {min}");
            }
            if t * sketch.capacity() as u64 > total {
                assert!(
                    sketch.get(key).is_some(),
                    "heavy key {key} ({t}/{total}) lost"
                );
            }
        }
    }

    proptest! {
        /// The bound `count - error <= true <= count`, against exact counts
        /// on a skewed weighted stream.
        #[test]
        fn bounds_hold_on_skewed_streams(
            k in 1usize..24,
            draws in proptest::collection::vec((0u32..10_000, 1u64..5), 0..2_000),
        ) {
            let stream: Vec<(u32, u64)> =
                draws.iter().map(|&(u, w)| (zipf_key(u, 100), w)).collect();
            let mut sketch = SpaceSaving::new(k);
            for (key, weight) in &stream {
                sketch.add(key, *weight);
            }
            check_bounds(&sketch, &stream);
        }

        /// The same bound over two windows merged.
        #[test]
        fn bounds_hold_across_two_windows(
            k in 1usize..16,
            first in proptest::collection::vec((0u32..10_000, 1u64..5), 0..800),
            second in proptest::collection::vec((0u32..10_000, 1u64..5), 0..800),
        ) {
            let first: Vec<(u32, u64)> = first.iter().map(|&(u, w)| (zipf_key(u, 60), w)).collect();
            let second: Vec<(u32, u64)> = second.iter().map(|&(u, w)| (zipf_key(u, 60), w)).collect();
            let mut windows = Windowed::new(k);
            for (key, weight) in &first {
                windows.add(key, *weight);
            }
            windows.rotate();
            for (key, weight) in &second {
                windows.add(key, *weight);
            }
            let both: Vec<(u32, u64)> = first.iter().chain(&second).copied().collect();
            let truth = exact(&both);
            prop_assert_eq!(windows.total(), both.iter().map(|&(_, w)| w).sum::<u64>());
            let top = windows.top(usize::MAX);
            for c in &top {
                let t = truth.get(&c.key).copied().unwrap_or(0);
                prop_assert!(c.count - c.error <= t && t <= c.count,
                    "key {}: count {} error {} true {}", c.key, c.count, c.error, t);
            }
            // Sorted, largest first.
            prop_assert!(top.windows(2).all(|w| w[0].count >= w[1].count));
        }
    }

    #[test]
    fn exact_while_not_full() {
        let mut sketch = SpaceSaving::new(3);
        for key in [1, 2, 1, 3, 1] {
            sketch.add(&key, 1);
        }
        assert_eq!(sketch.get(&1).map(|c| (c.count, c.error)), Some((3, 0)));
        assert_eq!(sketch.min_count(), 1);
        // A fourth key takes over the smallest counter.
        sketch.add(&4, 2);
        let four = sketch.get(&4).expect("monitored");
        assert_eq!((four.count, four.error), (3, 1));
        assert_eq!(sketch.counters().len(), 3);
    }

    #[test]
    fn rotation_forgets_the_window_before_last() {
        let mut windows = Windowed::new(4);
        windows.add(&"old", 10);
        windows.rotate();
        windows.add(&"mid", 5);
        assert_eq!(windows.top(1)[0].key, "old");
        windows.rotate();
        windows.add(&"new", 1);
        let keys: Vec<&str> = windows.top(10).iter().map(|c| c.key).collect();
        assert_eq!(keys, ["mid", "new"]);
    }
}
