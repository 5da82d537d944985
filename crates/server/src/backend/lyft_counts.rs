//! envoyproxy/ratelimit's fixed-window counts in this process, for the
//! in-memory backend run from its environment (`BACKEND_TYPE=memory`,
//! tollgate's own value): every hit is counted, over the limit too, as its
//! `INCRBY` counts on Redis, so that its `token-quota.sh` flow (hits 0 on
//! the request, 1 on stream done) answers as it does.
//!
//! # Model
//!
//! A rule is Lyft's when it holds one fixed window whose period is one of
//! Lyft's units ([`lyft_rule`], shared with the Redis backend's layout).
//! Each bucket holds `(window start, count)`; a hit at UNIX second `now`
//! in a window of `d` seconds (Lyft's divider: a month is 30 days) counts
//! in the window starting at `now / d · d`, starting it at 0 if the
//! bucket's window is older. The hit is admitted when the count after it
//! is at most the limit (a hit of 0 too: it only reads), and every hit is
//! counted either way; the answer is Lyft's (remaining the limit minus
//! the count; a refusal reports what remained before its hits, for Lyft's
//! stats, and answers `limit_remaining` 0 on the RLS; reset at the
//! window's end).
//!
//! # Guarantees
//!
//! - One lock makes each hit one linearizable step.
//! - At most [`MAX_BUCKETS`] buckets: a hit of a new bucket while they are
//!   all held is refused (never admitted uncounted); the server's sweep
//!   drops the buckets whose window has ended.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tollgate::{Decision, Nanos};
use tollgate_redis::lyft::{Counted, Window};

use crate::config::{BuiltAlgorithm, Unit};
use crate::rules::Rule;

/// The most buckets held at once.
pub const MAX_BUCKETS: usize = 1 << 20;

/// A rule's one window, when it counts as Lyft's (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LyftRule {
    pub(crate) limit: u64,
    pub(crate) unit: Unit,
}

impl LyftRule {
    /// Hits admitted per window.
    pub(crate) fn limit(self) -> u64 {
        self.limit
    }
}

/// Whether `rule` is one of Lyft's (a fixed window of one of its units).
pub(crate) fn lyft_rule(rule: &Rule) -> Option<LyftRule> {
    let limits = rule.limits.as_ref()?;
    if !matches!(limits.algorithm, BuiltAlgorithm::FixedWindow(_)) {
        return None;
    }
    let [quota] = limits.quotas.as_slice() else {
        return None;
    };
    let unit = quota.unit?;
    (quota.period == unit.period()).then_some(LyftRule {
        limit: quota.requests_per_unit,
        unit,
    })
}

/// One bucket: its window's start and end (UNIX seconds), its count.
#[derive(Clone, Copy)]
struct Bucket {
    start: u64,
    end: u64,
    count: u64,
}

/// The counts (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct LyftCounts {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl LyftCounts {
    /// Counts `cost` hits of `bucket` (the rule's id and bucket key) under
    /// `rule` at `now` (UNIX time), and answers as Lyft.
    pub(crate) fn decide(&self, bucket: &str, rule: LyftRule, cost: u64, now: Nanos) -> Decision {
        let divider = rule.unit.period().as_secs().max(1);
        let second = now.as_u64() / 1_000_000_000;
        let start = second / divider * divider;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let full = buckets.len() >= MAX_BUCKETS;
        let count = match buckets.get_mut(bucket) {
            Some(held) => {
                if held.start != start {
                    *held = Bucket {
                        start,
                        end: start.saturating_add(divider),
                        count: 0,
                    };
                }
                held.count = held.count.saturating_add(cost);
                held.count
            }
            None if full => {
                return Decision::from_parts(false, rule.limit, 0, Duration::MAX, Duration::ZERO);
            }
            None => {
                buckets.insert(
                    bucket.to_owned(),
                    Bucket {
                        start,
                        end: start.saturating_add(divider),
                        count: cost,
                    },
                );
                cost
            }
        };
        drop(buckets);
        let window = Window {
            key: bucket,
            limit: rule.limit,
            divider,
            expire: divider,
        };
        window.decision_counted(
            Counted {
                admitted: count <= rule.limit,
                count,
            },
            cost,
            now,
        )
    }

    /// Drops the buckets whose window ended before `now` (UNIX time).
    pub(crate) fn sweep(&self, now: Nanos) {
        let second = now.as_u64() / 1_000_000_000;
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, bucket| bucket.end > second);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: LyftRule = LyftRule {
        limit: 2,
        unit: Unit::Minute,
    };

    fn at(seconds: u64) -> Nanos {
        Nanos::new(seconds * 1_000_000_000)
    }

    /// Lyft's `token-quota.sh`: hits 0 on the request, 1 on stream done;
    /// the third charge goes over and is counted, so the 4th request is
    /// refused.
    #[test]
    fn refused_hits_are_counted_as_lyft_counts_them() {
        let counts = LyftCounts::default();
        let mut answers = Vec::new();
        let mut charges = Vec::new();
        for _ in 0..4 {
            let look = counts.decide("b", MINUTE, 0, at(600));
            answers.push(look.is_allowed());
            if look.is_allowed() {
                charges.push(counts.decide("b", MINUTE, 1, at(600)).is_allowed());
            }
        }
        assert_eq!(answers, [true, true, true, false]);
        assert_eq!(charges, [true, true, false], "the third charge goes over");
        // Counted 3 already: a refusal says nothing remained before it.
        let over = counts.decide("b", MINUTE, 1, at(610));
        assert_eq!((over.is_denied(), over.remaining()), (true, 0));
        // The next minute starts from 0.
        assert!(counts.decide("b", MINUTE, 2, at(660)).is_allowed());
        counts.sweep(at(720));
        assert!(counts.buckets.lock().expect("lock").is_empty());
    }
}
