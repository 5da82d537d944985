//! How a rule's Redis limits follow a change (see the
//! [`redis_backend`](super) module docs): which previous limit each new one
//! carries its keys' state from, and which previous limits a bridge keeps.

use std::time::Duration;

use tollgate::algorithm::any::AnyAlgorithm;
use tollgate_redis::Limit;

use crate::config::BuiltAlgorithm;

/// Added to a bridge's length: the previous keys' TTL slack, and the
/// clocks of this node and of Redis apart.
pub(super) const BRIDGE_SLACK: Duration = Duration::from_secs(1);

const SLIDING_LOG: &str = "sliding_log does not run on Redis (use sliding_window)";

/// Whether a key's state is carried from `from` to `to` rather than
/// bridged: a limit of the same algorithm (`tollgate_redis::carry`
/// converts each as the core's `carry_cell`). A change of algorithm is
/// bridged, as the in-memory backend bridges it, so that both backends
/// answer a reload alike.
pub(super) fn carried(from: &Limit, to: &Limit) -> bool {
    std::mem::discriminant(from) == std::mem::discriminant(to)
}

/// The `tollgate-redis` limits of `algorithm`.
pub(super) fn limits_of(algorithm: &BuiltAlgorithm) -> Result<Vec<Limit>, String> {
    Ok(match algorithm {
        BuiltAlgorithm::Gcra(a) => a.limits().iter().cloned().map(Limit::from).collect(),
        BuiltAlgorithm::FixedWindow(a) => a.limits().iter().cloned().map(Limit::from).collect(),
        BuiltAlgorithm::SlidingWindow(a) => a.limits().iter().cloned().map(Limit::from).collect(),
        BuiltAlgorithm::Mixed(a) => a
            .limits()
            .iter()
            .map(|limit| match limit {
                AnyAlgorithm::Gcra(l) => Ok(Limit::from(l.clone())),
                AnyAlgorithm::FixedWindow(l) => Ok(Limit::from(l.clone())),
                AnyAlgorithm::SlidingWindow(l) => Ok(Limit::from(l.clone())),
                AnyAlgorithm::Calendar(l) => Ok(Limit::from(l.clone())),
                AnyAlgorithm::WarmUp(l) => Ok(Limit::from(l.clone())),
                _ => Err(String::from(SLIDING_LOG)),
            })
            .collect::<Result<_, _>>()?,
        BuiltAlgorithm::SlidingLog(_) => return Err(SLIDING_LOG.into()),
    })
}

/// For each limit of `new`, the limit of `old` it carries its state from
/// (what `carry_from` takes: one per limit, in order): the same limit if
/// it stayed, else one of the same period (its number changed), else the
/// next one left in file order; a limit added has nothing to carry (it is
/// paired with itself: its own keys, which hold nothing to convert).
pub(super) fn carry_pairs(old: &[Limit], new: &[Limit]) -> Vec<Limit> {
    let mut left: Vec<Option<&Limit>> = old.iter().map(Some).collect();
    let mut take = |found: &dyn Fn(&Limit) -> bool| {
        let slot = left.iter_mut().find(|slot| slot.is_some_and(found))?;
        slot.take().cloned()
    };
    let mut pairs: Vec<Option<Limit>> = new.iter().map(|n| take(&|o| o == n)).collect();
    for (pair, n) in pairs.iter_mut().zip(new) {
        if pair.is_none() {
            *pair = take(&|o| o.quota().period() == n.quota().period());
        }
    }
    for pair in &mut pairs {
        if pair.is_none() {
            *pair = take(&|_| true);
        }
    }
    pairs
        .into_iter()
        .zip(new)
        .map(|(pair, n)| pair.unwrap_or_else(|| n.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use tollgate::{FixedWindow, Gcra, Quota};

    use super::*;

    fn gcra(n: u64, secs: u64) -> Limit {
        Limit::from(
            Gcra::new(Quota::new(n, Duration::from_secs(secs)).expect("quota")).expect("gcra"),
        )
    }

    fn window(n: u64, secs: u64) -> Limit {
        Limit::from(
            FixedWindow::new(Quota::new(n, Duration::from_secs(secs)).expect("quota"))
                .expect("window"),
        )
    }

    fn sliding(n: u64, secs: u64) -> Limit {
        Limit::from(
            tollgate::SlidingWindow::new(
                Quota::new(n, Duration::from_secs(secs)).expect("quota"),
                10,
            )
            .expect("sliding"),
        )
    }

    #[test]
    fn limits_of_one_algorithm_are_carried_and_a_change_of_algorithm_bridged() {
        assert!(carried(&gcra(5, 1), &gcra(8, 2)));
        assert!(carried(&window(5, 1), &window(8, 1)));
        assert!(carried(&sliding(2, 3600), &sliding(4, 3600)));
        assert!(!carried(&window(5, 1), &gcra(5, 1)));
        assert!(!carried(&sliding(5, 1), &window(5, 1)));
    }

    #[test]
    fn limits_pair_by_equality_then_period_then_order() {
        // A changed number: paired with the limit of the same period.
        assert_eq!(
            carry_pairs(&[gcra(5, 1), gcra(100, 60)], &[gcra(100, 60), gcra(8, 1)]),
            vec![gcra(100, 60), gcra(5, 1)]
        );
        // A limit added first: the old one is paired with its successor
        // of the same period, the added one with itself.
        assert_eq!(
            carry_pairs(&[window(5, 1)], &[window(1000, 86_400), window(8, 1)]),
            vec![window(1000, 86_400), window(5, 1)]
        );
        // A changed period: paired in order.
        assert_eq!(
            carry_pairs(&[gcra(5, 1), gcra(50, 60)], &[gcra(5, 2), gcra(50, 120)]),
            vec![gcra(5, 1), gcra(50, 60)]
        );
        // A limit removed: dropped.
        assert_eq!(
            carry_pairs(&[gcra(5, 1), gcra(50, 60)], &[gcra(50, 60)]),
            vec![gcra(50, 60)]
        );
    }
}
