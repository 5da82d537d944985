//! The window-bound checker: slides every window over recorded admissions and checks a guarantee.
//!
//! A test records every admission as `(time_ns, cost)`, where `time_ns` is the
//! `now` the admitting decision used, in any order (from many threads), and
//! asks [`Guarantee::check`] whether the algorithm's documented guarantee
//! holds over them. All arithmetic is exact (`u128`/`i128`); nothing is
//! sampled: every window that could hold the most permits is examined.
//!
//! Which windows suffice:
//!
//! - a window `[s, s + L)` at any start holds the most permits when `s` is an
//!   admission instant (moving `s` forward to the first admission inside only
//!   adds permits at the end), so those are the starts tried;
//! - an aligned window is the one containing each admission;
//! - a slot-aligned window of `n` slots is tried starting at the slot of each
//!   admission, for the same reason as the first point;
//! - the GCRA bound `burst + rate·(t2 − t1)` over a closed interval is
//!   tightest with both ends at admission instants, and the worst pair is found
//!   in one pass (a running minimum), not by trying every pair.

use std::fmt;

use tollgate::{Algorithm, FixedWindow, Gcra, SlidingLog, SlidingWindow};

/// One bound an algorithm promises over its admissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Any closed interval `[t1, t2]` admits at most
    /// `burst + (t2 − t1)·scale / interval_ticks` permits (the GCRA's
    /// effective rate, `scale` ticks per ns and `interval_ticks` per permit).
    Rate {
        /// Permits that may be taken at once.
        burst: u64,
        /// Ticks per nanosecond.
        scale: u64,
        /// Ticks per permit.
        interval_ticks: u64,
    },
    /// Every aligned window `[k·period, (k+1)·period)` admits at most `limit`.
    Aligned {
        /// The window length, ns.
        period: u64,
        /// Permits per window.
        limit: u64,
    },
    /// Every window `[s, s + length)`, at any start `s`, admits at most `limit`.
    AnyStart {
        /// The window length, ns.
        length: u64,
        /// Permits per window.
        limit: u64,
    },
    /// Every window of `slots` consecutive slots admits at most `limit`, where
    /// slot `e` is `[⌈e·period/slots⌉, ⌈(e+1)·period/slots⌉)`.
    SlotAligned {
        /// The length of `slots` slots, ns.
        period: u64,
        /// Slots per period.
        slots: u64,
        /// Permits per `slots` consecutive slots.
        limit: u64,
    },
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Bound::Rate {
                burst,
                scale,
                interval_ticks,
            } => write!(
                f,
                "any [t1, t2] admits ≤ {burst} + (t2 − t1)·{scale}/{interval_ticks}"
            ),
            Bound::Aligned { period, limit } => {
                write!(
                    f,
                    "every aligned [k·{period}, (k+1)·{period}) admits ≤ {limit}"
                )
            }
            Bound::AnyStart { length, limit } => {
                write!(f, "every [s, s + {length}) admits ≤ {limit}")
            }
            Bound::SlotAligned {
                period,
                slots,
                limit,
            } => write!(
                f,
                "every run of {slots} slots of ⌈e·{period}/{slots}⌉ admits ≤ {limit}"
            ),
        }
    }
}

/// An algorithm's whole guarantee: one or more bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guarantee {
    /// The algorithm, for messages.
    pub algorithm: &'static str,
    /// Every bound that must hold.
    pub bounds: Vec<Bound>,
}

/// A window that admitted more than its bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The algorithm whose guarantee failed.
    pub algorithm: &'static str,
    /// The bound that failed.
    pub bound: Bound,
    /// The first instant of the window (ns).
    pub start: u64,
    /// The window's end (ns): exclusive for window bounds, inclusive (`t2`)
    /// for [`Bound::Rate`].
    pub end: u128,
    /// Permits admitted in the window.
    pub admitted: u128,
    /// What the bound allows in it. For [`Bound::Rate`], `allowed` is the bound
    /// rounded down to whole permits; the comparison itself is exact.
    pub allowed: u128,
    /// Admissions (at distinct instants) in the window.
    pub instants: usize,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let close = if matches!(self.bound, Bound::Rate { .. }) {
            ']'
        } else {
            ')'
        };
        write!(
            f,
            "{}: window [{}, {}{close} ({} ns) admitted {} permits at {} instants, \
             more than the {} allowed ({})",
            self.algorithm,
            self.start,
            self.end,
            self.end - u128::from(self.start),
            self.admitted,
            self.instants,
            self.allowed,
            self.bound
        )
    }
}

impl std::error::Error for Violation {}

/// What a successful check saw, per bound: how close the fullest window came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Admissions checked (requests, not permits).
    pub admissions: usize,
    /// Permits admitted in all.
    pub permits: u128,
    /// For each bound of the guarantee, in order: the most permits any one of
    /// its windows held, and what that window was allowed. For
    /// [`Bound::Rate`], the most permits above `rate·(t2 − t1)`, rounded
    /// down, and the burst.
    pub fullest: Vec<(Bound, u128, u128)>,
}

impl Report {
    /// Whether every bound was reached exactly by some window: the load was
    /// heavy enough for the check to mean something.
    pub fn saturated(&self) -> bool {
        self.fullest
            .iter()
            .all(|&(_, fullest, allowed)| fullest == allowed)
    }
}

/// Algorithms that state a guarantee this checker can verify.
pub trait Guaranteed {
    /// The guarantee, from the algorithm's own parameters.
    fn guarantee(&self) -> Guarantee;
}

impl Guaranteed for Gcra {
    fn guarantee(&self) -> Guarantee {
        Guarantee {
            algorithm: "gcra",
            bounds: vec![Bound::Rate {
                burst: self.quota().burst(),
                scale: self.scale(),
                interval_ticks: self.interval_ticks(),
            }],
        }
    }
}

impl Guaranteed for FixedWindow {
    fn guarantee(&self) -> Guarantee {
        Guarantee {
            algorithm: "fixed window",
            bounds: vec![Bound::Aligned {
                period: self.quota().period_nanos(),
                limit: self.quota().limit(),
            }],
        }
    }
}

impl Guaranteed for SlidingLog {
    fn guarantee(&self) -> Guarantee {
        Guarantee {
            algorithm: "sliding log",
            bounds: vec![Bound::AnyStart {
                length: self.quota().period_nanos(),
                limit: self.quota().limit(),
            }],
        }
    }
}

impl Guaranteed for SlidingWindow {
    fn guarantee(&self) -> Guarantee {
        Guarantee::wheel(
            self.quota().limit(),
            self.quota().period_nanos(),
            u64::from(self.slots()),
        )
    }
}

impl Guarantee {
    /// The three bounds of a wheel of `slots` slots over `period` ns.
    pub fn wheel(limit: u64, period: u64, slots: u64) -> Guarantee {
        let mut bounds = vec![Bound::SlotAligned {
            period,
            slots,
            limit,
        }];
        // Any window no longer than the shortest run of n − 1 slots lies in n
        // consecutive slots (a window starting inside slot e ends before slot
        // e + n begins). With one slot that run is empty.
        let shortest = (0..u128::from(slots))
            .map(|e| {
                slot_start(e + u128::from(slots) - 1, period, slots) - slot_start(e, period, slots)
            })
            .min()
            .unwrap_or(0);
        if shortest > 0 {
            bounds.push(Bound::AnyStart {
                length: u64::try_from(shortest).expect("shorter than the period"),
                limit,
            });
        }
        bounds.push(Bound::AnyStart {
            length: period,
            limit: limit.checked_mul(2).expect("2·limit fits in u64"),
        });
        Guarantee {
            algorithm: "sliding window",
            bounds,
        }
    }

    /// Checks every bound over `admissions` (`(time_ns, cost)`, any order).
    ///
    /// # Errors
    ///
    /// The first [`Violation`] found: the first bound that fails, at its
    /// earliest failing window.
    pub fn check(&self, admissions: &[(u64, u64)]) -> Result<Report, Violation> {
        let timeline = Timeline::new(admissions);
        let mut fullest = Vec::with_capacity(self.bounds.len());
        for &bound in &self.bounds {
            let (most, allowed) = match bound {
                Bound::Rate {
                    burst,
                    scale,
                    interval_ticks,
                } => timeline.rate(burst, scale, interval_ticks),
                Bound::Aligned { period, limit } => {
                    let p = u128::from(period);
                    timeline.windows(p, limit, |t| u128::from(t) / p * p)
                }
                Bound::AnyStart { length, limit } => {
                    timeline.windows(u128::from(length), limit, u128::from)
                }
                Bound::SlotAligned {
                    period,
                    slots,
                    limit,
                } => timeline.windows(u128::from(period), limit, |t| {
                    slot_start(epoch(t, period, slots), period, slots)
                }),
            }
            .map_err(|found| found.violation(self.algorithm, bound))?;
            fullest.push((bound, most, allowed));
        }
        Ok(Report {
            admissions: admissions.len(),
            permits: timeline.prefix.last().copied().unwrap_or(0),
            fullest,
        })
    }
}

/// The slot containing `t`: `⌊t·n/T⌋`.
fn epoch(t: u64, period: u64, slots: u64) -> u128 {
    u128::from(t) * u128::from(slots) / u128::from(period)
}

/// The first nanosecond of slot `e`: `⌈e·T/n⌉`.
fn slot_start(e: u128, period: u64, slots: u64) -> u128 {
    (e * u128::from(period)).div_ceil(u128::from(slots))
}

/// A failing window, before it is named.
struct Found {
    start: u64,
    end: u128,
    admitted: u128,
    allowed: u128,
    instants: usize,
}

impl Found {
    fn violation(self, algorithm: &'static str, bound: Bound) -> Violation {
        Violation {
            algorithm,
            bound,
            start: self.start,
            end: self.end,
            admitted: self.admitted,
            allowed: self.allowed,
            instants: self.instants,
        }
    }
}

/// Admissions merged per instant, sorted, with prefix sums of permits.
struct Timeline {
    /// Distinct admission instants, increasing.
    times: Vec<u64>,
    /// `prefix[i]`: permits admitted before `times[i]`; one more entry than
    /// `times`, the last being the total.
    prefix: Vec<u128>,
}

impl Timeline {
    fn new(admissions: &[(u64, u64)]) -> Timeline {
        let mut sorted = admissions.to_vec();
        sorted.sort_unstable();
        let mut times = Vec::new();
        let mut prefix = vec![0u128];
        for (time, cost) in sorted {
            let total = prefix.last().copied().unwrap_or(0) + u128::from(cost);
            if times.last() == Some(&time) {
                *prefix.last_mut().expect("prefix is never empty") = total;
            } else {
                times.push(time);
                prefix.push(total);
            }
        }
        Timeline { times, prefix }
    }

    /// Every window `[start(t), start(t) + length)` for `t` an admission
    /// instant holds at most `limit` permits. `start` must be non-decreasing
    /// and `start(t) ≤ t`. Returns the most any window held, and `limit`.
    fn windows(
        &self,
        length: u128,
        limit: u64,
        start: impl Fn(u64) -> u128,
    ) -> Result<(u128, u128), Found> {
        let limit = u128::from(limit);
        let mut most = 0;
        let mut first = 0; // first instant ≥ the window's start
        let mut end = 0; // first instant ≥ the window's end
        let mut previous = None;
        for &t in &self.times {
            let s = start(t);
            debug_assert!(s <= u128::from(t), "window start {s} after admission {t}");
            if previous == Some(s) {
                continue;
            }
            previous = Some(s);
            while u128::from(self.times[first]) < s {
                first += 1;
            }
            end = end.max(first);
            while end < self.times.len() && u128::from(self.times[end]) < s + length {
                end += 1;
            }
            let admitted = self.prefix[end] - self.prefix[first];
            most = most.max(admitted);
            if admitted > limit {
                return Err(Found {
                    start: u64::try_from(s).expect("a start is at most an instant"),
                    end: s + length,
                    admitted,
                    allowed: limit,
                    instants: end - first,
                });
            }
        }
        Ok((most, limit))
    }

    /// Any closed interval `[t_i, t_j]` between admission instants holds at most
    /// `burst + (t_j − t_i)·scale/interval` permits, i.e.
    /// `permits·interval ≤ burst·interval + (t_j − t_i)·scale`.
    ///
    /// With `P` the prefix sums, that is `A_j − B_i ≤ burst·interval` where
    /// `A_j = P[j+1]·interval − t_j·scale` and `B_i = P[i]·interval − t_i·scale`,
    /// so the worst `i ≤ j` for each `j` is the running minimum of `B`.
    fn rate(&self, burst: u64, scale: u64, interval: u64) -> Result<(u128, u128), Found> {
        assert!(
            interval > 0 && scale > 0,
            "a rate needs a positive interval and scale"
        );
        let interval = i128::from(interval);
        let scale = i128::from(scale);
        let capacity = i128::from(burst) * interval;
        let signed = |p: u128| i128::try_from(p).expect("permits fit in i128");
        let mut worst_excess = i128::MIN;
        let mut min_b = i128::MAX;
        let mut min_at = 0;
        for (j, &t) in self.times.iter().enumerate() {
            let b = signed(self.prefix[j]) * interval - i128::from(t) * scale;
            if b < min_b {
                (min_b, min_at) = (b, j);
            }
            let a = signed(self.prefix[j + 1]) * interval - i128::from(t) * scale;
            let excess = a - min_b;
            worst_excess = worst_excess.max(excess);
            if excess > capacity {
                let start = self.times[min_at];
                let span = i128::from(t - start);
                let allowed = (capacity + span * scale) / interval;
                return Err(Found {
                    start,
                    end: u128::from(t),
                    admitted: self.prefix[j + 1] - self.prefix[min_at],
                    allowed: u128::try_from(allowed).expect("non-negative"),
                    instants: j + 1 - min_at,
                });
            }
        }
        // In permits: the most admitted above rate·(t2 − t1), rounded down.
        let most = u128::try_from(worst_excess.max(0) / interval).expect("non-negative");
        Ok((most, u128::from(burst)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::Quota;

    use super::*;

    fn rate(burst: u64, scale: u64, interval_ticks: u64) -> Guarantee {
        Guarantee {
            algorithm: "gcra",
            bounds: vec![Bound::Rate {
                burst,
                scale,
                interval_ticks,
            }],
        }
    }

    fn only(bound: Bound) -> Guarantee {
        Guarantee {
            algorithm: "test",
            bounds: vec![bound],
        }
    }

    #[test]
    fn rate_accepts_burst_then_exact_spacing_and_refuses_one_ns_less() {
        // 1 per 10 ns (scale 1, interval 10), burst 2.
        let g = rate(2, 1, 10);
        let ok = [(0, 2), (10, 1), (20, 1), (30, 1)];
        let report = g.check(&ok).unwrap();
        assert_eq!(report.permits, 5);
        assert!(report.saturated(), "{report:?}");
        // Unordered input, the same set.
        assert!(
            g.check(&[(30, 1), (0, 1), (20, 1), (0, 1), (10, 1)])
                .is_ok()
        );

        let bad = [(0, 2), (10, 1), (19, 1)];
        let v = g.check(&bad).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted, v.instants), (0, 19, 4, 3));
        // 2 + 19/10, rounded down.
        assert_eq!(v.allowed, 3);
        let message = v.to_string();
        assert!(
            message.contains("[0, 19]") && message.contains("4 permits"),
            "{message}"
        );
    }

    #[test]
    fn rate_finds_a_violation_in_the_middle_of_a_long_run() {
        // 3 per 10 ns (scale 3, interval 10): one permit per 3.33 ns. Burst 1.
        let g = rate(1, 3, 10);
        // One per 4 ns is within the rate, then two at 1000 and 1003 (3 ns < 3.33).
        let mut admissions: Vec<(u64, u64)> = (0..250).map(|k| (4 * k, 1)).collect();
        assert!(g.check(&admissions).is_ok());
        admissions.extend([(1_000, 1), (1_003, 1)]);
        let v = g.check(&admissions).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted), (1_000, 1_003, 2));
        // Exactly 3.33..: 1_000 and 1_004 are fine (2·10 ≤ 1·10 + 4·3).
        admissions.pop();
        admissions.push((1_004, 1));
        assert!(g.check(&admissions).is_ok());
    }

    #[test]
    fn rate_uses_the_effective_interval_exactly() {
        // Interval 7 ticks at scale 2: 2/7 permits per ns, burst 1. Two permits
        // need 7·2 ≤ 7 + span·2, i.e. span ≥ 3.5 → 4 ns.
        let g = rate(1, 2, 7);
        assert!(g.check(&[(5, 1), (9, 1)]).is_ok());
        assert!(g.check(&[(5, 1), (8, 1)]).is_err());
    }

    #[test]
    fn aligned_windows_count_per_window_and_straddling_is_allowed() {
        let g = only(Bound::Aligned {
            period: 100,
            limit: 3,
        });
        // 3 at the end of [0, 100) and 3 at the start of [100, 200): allowed.
        let ok = [(97, 1), (98, 1), (99, 1), (100, 3)];
        assert!(g.check(&ok).unwrap().saturated());
        let v = g.check(&[(0, 1), (150, 2), (199, 2)]).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted, v.allowed), (100, 200, 4, 3));
        assert!(v.to_string().contains("[100, 200)"), "{v}");
    }

    #[test]
    fn any_start_windows_catch_what_aligned_ones_miss() {
        let g = only(Bound::AnyStart {
            length: 100,
            limit: 3,
        });
        let straddling = [(97, 1), (98, 1), (99, 1), (100, 3)];
        let v = g.check(&straddling).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted, v.instants), (97, 197, 6, 4));
        // Exactly one period apart is two windows.
        assert!(g.check(&[(0, 3), (100, 3), (200, 3)]).is_ok());
        assert!(g.check(&[(0, 3), (99, 1)]).is_err());
    }

    #[test]
    fn slot_aligned_windows_use_uneven_slots() {
        // Period 10 ns, 3 slots: 0, 4, 7, 10, 14, 17, 20, ...
        let g = only(Bound::SlotAligned {
            period: 10,
            slots: 3,
            limit: 2,
        });
        // Slots 1..=3 are [4, 14): 4 and 13 are in it, 3 and 14 are not.
        assert!(g.check(&[(4, 1), (13, 2)]).is_err());
        assert!(g.check(&[(4, 1), (14, 2)]).is_ok());
        assert!(g.check(&[(3, 1), (13, 2)]).is_ok());
        // 6 is in slot 1 = [4, 7); the window of slots 1..=3 is [4, 14).
        let v = g.check(&[(6, 1), (7, 1), (13, 1)]).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted), (4, 14, 3));
    }

    #[test]
    fn wheel_bounds_are_slot_aligned_then_shortest_run_then_twice_the_limit() {
        let g = Guarantee::wheel(5, 10, 3);
        // Runs of 2 slots: 7 − 0, 10 − 4, 14 − 7 → the shortest is 6.
        assert_eq!(
            g.bounds,
            [
                Bound::SlotAligned {
                    period: 10,
                    slots: 3,
                    limit: 5
                },
                Bound::AnyStart {
                    length: 6,
                    limit: 5
                },
                Bound::AnyStart {
                    length: 10,
                    limit: 10
                },
            ]
        );
        // One slot: no short window, just aligned and 2·limit.
        assert_eq!(Guarantee::wheel(5, 10, 1).bounds.len(), 2);
        // A sliding window limiter's own guarantee.
        let w = SlidingWindow::new(Quota::new(5, Duration::from_nanos(10)).unwrap(), 3).unwrap();
        assert_eq!(w.guarantee(), g);
        // The second and third bounds follow from the first (a short window
        // lies in n slots, a window of T in two runs of n slots), so a
        // violation of any of them is reported against the first.
        let v = g.check(&[(3, 3), (8, 3)]).unwrap_err();
        assert_eq!(v.bound, g.bounds[0]);
        assert_eq!((v.start, v.end, v.admitted), (0, 10, 6));
        let v = only(g.bounds[1]).check(&[(3, 3), (8, 3)]).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted), (3, 9, 6));
        assert!(only(g.bounds[1]).check(&[(3, 3), (9, 3)]).is_ok());
    }

    #[test]
    fn twice_the_limit_is_the_last_bound_that_can_fail() {
        let g = only(Bound::AnyStart {
            length: 10,
            limit: 10,
        });
        assert!(g.check(&[(6, 5), (13, 5)]).is_ok());
        let v = g.check(&[(6, 5), (13, 5), (15, 1)]).unwrap_err();
        assert_eq!((v.start, v.end, v.admitted), (6, 16, 11));
    }

    #[test]
    fn guarantees_come_from_the_algorithms_parameters() {
        let q = Quota::new(3, Duration::from_millis(10))
            .unwrap()
            .with_burst(2)
            .unwrap();
        let gcra = Gcra::new(q).unwrap();
        assert_eq!(
            gcra.guarantee().bounds,
            [Bound::Rate {
                burst: 2,
                scale: 3,
                interval_ticks: 10_000_000
            }]
        );
        assert_eq!(
            FixedWindow::new(q).unwrap().guarantee().bounds,
            [Bound::Aligned {
                period: 10_000_000,
                limit: 3
            }]
        );
        assert_eq!(
            SlidingLog::new(q).unwrap().guarantee().bounds,
            [Bound::AnyStart {
                length: 10_000_000,
                limit: 3
            }]
        );
    }

    #[test]
    fn empty_and_extreme_inputs() {
        for g in [
            rate(1, 1, 10),
            Guarantee::wheel(1, u64::MAX, 7),
            only(Bound::Aligned {
                period: u64::MAX,
                limit: 1,
            }),
        ] {
            let report = g.check(&[]).unwrap();
            assert_eq!((report.admissions, report.permits), (0, 0));
            // The very last instant, with a window reaching past 2^64.
            assert!(g.check(&[(u64::MAX, 1)]).is_ok(), "{g:?}");
            let v = g
                .check(&[(u64::MAX - 2, 1), (u64::MAX - 1, 1)])
                .unwrap_err();
            assert_eq!(v.admitted, 2, "{v}");
        }
    }
}
