//! The warm-up reference model: Guava's `SmoothWarmingUp` as the module docs
//! of `algorithm::warm_up` state it, in exact big rationals.
//!
//! Nothing of the implementation's representation: idle permits are a
//! rational number of permits (not units), the cost of a request is the
//! area under the interval curve computed as a rectangle below the
//! threshold and a trapezoid above it, and every quantity is derived from
//! the formulas of the docs (`I = period / limit`, `threshold = P / (2·I)`,
//! `max = threshold + 2·P / ((1 + c)·I)`, `slope = (c − 1)·I / (max −
//! threshold)`, idle permits regained at `max / P` per ns). A cost is rounded
//! up to the nanosecond once per request, as the docs say.

use std::cmp::Ordering;
use std::ops::{Add, Div, Mul, Sub};

use num_bigint::BigInt;

use super::model::Expected;

/// An exact rational, always reduced, with a positive denominator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q {
    n: BigInt,
    d: BigInt,
}

fn gcd(mut a: BigInt, mut b: BigInt) -> BigInt {
    let zero = BigInt::from(0);
    if a < zero {
        a = -a;
    }
    if b < zero {
        b = -b;
    }
    while b != zero {
        let r = &a % &b;
        a = b;
        b = r;
    }
    a
}

impl Q {
    pub fn new(n: impl Into<BigInt>, d: impl Into<BigInt>) -> Q {
        let (mut n, mut d) = (n.into(), d.into());
        assert!(d != BigInt::from(0), "a zero denominator");
        if d < BigInt::from(0) {
            (n, d) = (-n, -d);
        }
        let g = gcd(n.clone(), d.clone());
        if g > BigInt::from(1) {
            (n, d) = (n / &g, d / &g);
        }
        Q { n, d }
    }

    pub fn int(n: impl Into<BigInt>) -> Q {
        Q::new(n, 1)
    }

    /// The least integer ≥ self.
    pub fn ceil(&self) -> BigInt {
        let floor = self.n.clone() / &self.d;
        // BigInt division truncates toward zero; every value here is ≥ 0.
        if &floor * &self.d == self.n || self.n < BigInt::from(0) {
            floor
        } else {
            floor + 1
        }
    }

    pub fn min(self, other: Q) -> Q {
        if self <= other { self } else { other }
    }

    pub fn max(self, other: Q) -> Q {
        if self >= other { self } else { other }
    }
}

impl PartialOrd for Q {
    fn partial_cmp(&self, other: &Q) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Q {
    fn cmp(&self, other: &Q) -> Ordering {
        (&self.n * &other.d).cmp(&(&other.n * &self.d))
    }
}

impl Add for Q {
    type Output = Q;
    fn add(self, o: Q) -> Q {
        Q::new(&self.n * &o.d + &o.n * &self.d, &self.d * &o.d)
    }
}

impl Sub for Q {
    type Output = Q;
    fn sub(self, o: Q) -> Q {
        Q::new(&self.n * &o.d - &o.n * &self.d, &self.d * &o.d)
    }
}

impl Mul for Q {
    type Output = Q;
    fn mul(self, o: Q) -> Q {
        Q::new(&self.n * &o.n, &self.d * &o.d)
    }
}

impl Div for Q {
    type Output = Q;
    fn div(self, o: Q) -> Q {
        Q::new(&self.n * &o.d, &self.d * &o.n)
    }
}

fn to_u64(value: BigInt) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Guava's `SmoothWarmingUp`, pay later, refusing.
#[derive(Clone, Debug)]
pub struct WarmUpModel {
    burst: u64,
    interval: Q,
    threshold: Q,
    max: Q,
    slope: Q,
    warmup: Q,
    /// Idle permits at `next_free`.
    stored: Q,
    next_free: u64,
}

impl WarmUpModel {
    /// `limit` per `period_ns`, warm-up `warmup_ns`, cold factor `c`.
    pub fn new(limit: u64, period_ns: u64, burst: u64, warmup_ns: u64, c: u32) -> WarmUpModel {
        let interval = Q::new(period_ns, limit);
        let warmup = Q::int(warmup_ns);
        let c = Q::int(c);
        let threshold = warmup.clone() / (Q::int(2) * interval.clone());
        let ramp = Q::int(2) * warmup.clone() / ((Q::int(1) + c.clone()) * interval.clone());
        let max = threshold.clone() + ramp.clone();
        let slope = (c - Q::int(1)) * interval.clone() / ramp;
        WarmUpModel {
            burst,
            interval,
            threshold,
            stored: max.clone(),
            max,
            slope,
            warmup,
            next_free: 0,
        }
    }

    fn interval_at(&self, x: &Q) -> Q {
        if *x <= self.threshold {
            self.interval.clone()
        } else {
            self.interval.clone() + self.slope.clone() * (x.clone() - self.threshold.clone())
        }
    }

    /// The area under the interval curve from `lo` to `hi` (`lo ≤ hi`).
    fn area(&self, lo: Q, hi: Q) -> Q {
        let mid = self.threshold.clone().max(lo.clone()).min(hi.clone());
        // Below the threshold: a rectangle of height I.
        let flat = (mid.clone() - lo) * self.interval.clone();
        // Above: a trapezoid.
        let heights = self.interval_at(&mid) + self.interval_at(&hi);
        flat + (hi - mid) * heights / Q::int(2)
    }

    /// Idle permits at `now ≥ next_free`.
    fn idle_at(&self, now: u64) -> Q {
        let idle = Q::int(now.saturating_sub(self.next_free));
        (self.stored.clone() + idle * self.max.clone() / self.warmup.clone()).min(self.max.clone())
    }

    /// When the limiter is as cold as a fresh one.
    fn cold_at(&self) -> u64 {
        let missing = self.max.clone() - self.stored.clone();
        let wait = (missing * self.warmup.clone() / self.max.clone()).ceil();
        to_u64(BigInt::from(self.next_free) + wait)
    }

    fn expected(&self, allowed: bool, remaining: u64, retry: u64, now: u64) -> Expected {
        Expected {
            allowed,
            limit: self.burst,
            remaining,
            retry_after_ns: retry,
            reset_after_ns: self.cold_at().saturating_sub(now),
        }
    }

    /// Decides `cost` at `now` and, if admitted, records it (`record`).
    pub fn decide(&mut self, now: u64, cost: u64, record: bool) -> Expected {
        let owed = now < self.next_free;
        if cost == 0 {
            let remaining = if owed { 0 } else { self.burst };
            return self.expected(true, remaining, 0, now);
        }
        if owed {
            return self.expected(false, 0, self.next_free - now, now);
        }
        if cost > self.burst {
            return self.expected(false, self.burst, u64::MAX, now);
        }
        let stored = self.idle_at(now);
        let k = Q::int(cost);
        let taken = k.clone().min(stored.clone());
        let fresh = k - taken.clone();
        let low = stored.clone() - taken.clone();
        let cost_ns = (self.area(low.clone(), stored) + fresh * self.interval.clone()).ceil();
        let next_free = to_u64(BigInt::from(now) + cost_ns);
        let mut after = self.clone();
        after.next_free = next_free;
        after.stored = low;
        let decision = after.expected(true, 0, 0, now);
        if record {
            *self = after;
        }
        decision
    }

    /// The time the next permit would cost from `next_free` on (for tests).
    pub fn next_free(&self) -> u64 {
        self.next_free
    }
}
