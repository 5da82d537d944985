//! Reference models: each algorithm restated from its definition, with a mutex and i128 arithmetic.
//!
//! A model is what the module docs of an algorithm say, written as plainly as
//! possible and without the implementation's representation: the GCRA is a
//! leaky bucket *meter* (a water level), not a theoretical arrival time; the
//! sliding log keeps one entry per permit, not runs; the wheel keeps every
//! admission, not `n` recycled counters. All arithmetic is in `i128`, so
//! nothing can overflow or wrap; a result is converted to `u64` only at the
//! end. The models are slow and simple on purpose: the property tests and
//! the shared test vectors compare the real algorithms against them.
//!
//! Every model expects the times it is given to be non-decreasing.
//!
//! # Where a convention comes from
//!
//! Most of what a model answers follows from the docs (`Decision` and the
//! algorithm's module). A few corner cases the docs leave open; for those the
//! models follow the implementation, and say so where they do it:
//!
//! - *docs*: `retry_after` is the exact wait (at `now + retry_after` the same
//!   request is admitted, one nanosecond earlier it is not) and 0 for an
//!   admission; `reset_after` is the time until the limiter is as if never
//!   used; `remaining` is what could be taken right after this decision.
//! - *implementation*: a request that can never be admitted (cost above the
//!   capacity, or past the end of the algorithm's representable time) is
//!   denied with `retry_after = u64::MAX`; a denial reports as `remaining`
//!   what is left with nothing taken; a cost of 0 records nothing and, where
//!   it is admitted, reports `reset_after` of the state as it is.
//!
//! # Domain
//!
//! The models compute instants in `i128` and clamp a duration to `u64` only
//! at the end; the implementations count in `u64` nanoseconds and saturate.
//! The two agree as long as every instant they compute (a permit's expiry,
//! the start of a slot) is below 2^64 ns, which the property tests keep to
//! (times below 2^63 ns, periods of at most 2^63 ns). The ends of two
//! algorithms' own counters are part of the models, as their docs state
//! them: the GCRA's ticks (`u64::MAX / scale` ns) and the fixed window's
//! index. The wheel's epoch `⌊t·n/T⌋` is not: the model assumes it stays
//! `n` below `u64::MAX` (only periods of a few ns reach that end before
//! 2^63 ns).

use std::fmt;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tollgate::{Decision, Quota};

pub use super::wheel_model::SlidingWindowModel;

/// `u64::MAX` as an `i128`: the end of every `u64` counter.
pub(super) const U64_MAX: i128 = u64::MAX as i128;

/// From the docs (`algorithm`, "Charges, debt and its cap"): a state never
/// owes more than this many periods of its quota beyond full.
pub(super) const DEBT_PERIODS: i128 = 16;

/// What a model answers: the same five numbers as [`tollgate::Decision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Expected {
    /// Whether the request was admitted.
    pub allowed: bool,
    /// The burst (GCRA) or the limit per window (window algorithms).
    pub limit: u64,
    /// Permits that could be taken right after this decision.
    pub remaining: u64,
    /// For a denial, the exact wait until the same request fits; 0 for an admission.
    pub retry_after_ns: u64,
    /// The wait until the limiter is as if never used.
    pub reset_after_ns: u64,
}

impl Expected {
    pub(super) fn allow(limit: i128, remaining: i128, reset_after: i128) -> Expected {
        Expected {
            allowed: true,
            limit: to_u64(limit),
            remaining: to_u64(remaining),
            retry_after_ns: 0,
            reset_after_ns: to_u64(reset_after),
        }
    }

    pub(super) fn deny(
        limit: i128,
        remaining: i128,
        retry_after: i128,
        reset_after: i128,
    ) -> Expected {
        Expected {
            allowed: false,
            limit: to_u64(limit),
            remaining: to_u64(remaining),
            retry_after_ns: to_u64(retry_after),
            reset_after_ns: to_u64(reset_after),
        }
    }
}

impl From<Decision> for Expected {
    fn from(decision: Decision) -> Expected {
        Expected {
            allowed: decision.is_allowed(),
            limit: decision.limit(),
            remaining: decision.remaining(),
            retry_after_ns: u64::try_from(decision.retry_after().as_nanos()).unwrap_or(u64::MAX),
            reset_after_ns: u64::try_from(decision.reset_after().as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} limit {} remaining {} retry_after {} reset_after {}",
            if self.allowed { "allowed" } else { "denied" },
            self.limit,
            self.remaining,
            self.retry_after_ns,
            self.reset_after_ns
        )
    }
}

/// Clamps a non-negative value to `u64` (a wait longer than `u64` can say
/// is reported as `u64::MAX`).
fn to_u64(value: i128) -> u64 {
    assert!(value >= 0, "model: negative value {value}");
    u64::try_from(value).unwrap_or(u64::MAX)
}

pub(super) fn ceil_div(a: i128, b: i128) -> i128 {
    assert!(a >= 0 && b > 0, "model: ceil_div({a}, {b})");
    (a + b - 1) / b
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One algorithm's reference model.
pub trait Model: Send + Sync {
    /// Decides `cost` permits at `now_ns` and records them if admitted.
    fn check(&self, now_ns: u64, cost: u64) -> Expected;
    /// Decides `cost` permits at `now_ns` without recording anything.
    fn peek(&self, now_ns: u64, cost: u64) -> Expected;
    /// The most any single request may cost.
    fn capacity(&self) -> u64;

    /// Records `cost` permits whether or not they fit, then answers a peek
    /// of one permit and the permits recorded. The rule from the docs
    /// (`algorithm`, "Charges, debt and its cap"): all of it, as a debt
    /// repaid at the quota's rate, up to the cap.
    fn charge(&self, now_ns: u64, cost: u64) -> (Expected, u64);
}

/// Builds the model named as in the test vectors (`"gcra"`,
/// `"fixed_window"`, `"sliding_log"`, `"sliding_window"`).
///
/// # Panics
///
/// On an unknown name, or `"sliding_window"` without `slots`.
pub fn by_name(algorithm: &str, quota: Quota, slots: Option<u32>) -> Box<dyn Model> {
    match algorithm {
        "gcra" => Box::new(GcraModel::new(quota)),
        "fixed_window" => Box::new(FixedWindowModel::new(quota)),
        "sliding_log" => Box::new(SlidingLogModel::new(quota)),
        "sliding_window" => Box::new(SlidingWindowModel::new(
            quota,
            slots.expect("sliding_window needs slots"),
        )),
        other => panic!("model: unknown algorithm {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// GCRA as a leaky bucket meter
// ---------------------------------------------------------------------------

/// The token bucket as a leaky bucket **meter**: a bucket of `burst·T` ticks
/// of water that drains at one tick per tick. A request of `cost` pours
/// `cost·T`; it is admitted iff the water level, after draining to `now`,
/// plus `cost·T` is at most `burst·T`.
///
/// From the docs (`algorithm::gcra`): time is counted in ticks of
/// `1/scale` ns; with `g = gcd(limit, period_ns)` and `L = limit/g`,
/// `L ≤ 16` gives `scale = L`, `T = period_ns/g`, otherwise `scale = 16`,
/// `T = ⌈period_ns·16/limit⌉`. "A `u64` of ticks lasts `584 / scale` years
/// of clock time ...; past that the limiter fails closed": here, an admission
/// of cost > 0 after which the bucket would be empty again only after tick
/// `u64::MAX` is refused, and as that tick only moves later, such a request
/// gets `retry_after = u64::MAX` (the implementation's value for "never").
/// Cost 0 only looks and is always admitted.
#[derive(Debug)]
pub struct GcraModel {
    limit: i128,
    burst: i128,
    scale: i128,
    /// The emission interval, in ticks.
    interval: i128,
    meter: Mutex<Meter>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Meter {
    /// The water level, in ticks, as of `at`.
    level: i128,
    /// When the level was last written, in ticks.
    at: i128,
}

impl GcraModel {
    /// The model of `Gcra::new(quota)`.
    pub fn new(quota: Quota) -> GcraModel {
        let (scale, interval) = GcraModel::ticks(quota);
        GcraModel {
            limit: i128::from(quota.limit()),
            burst: i128::from(quota.burst()),
            scale,
            interval,
            meter: Mutex::new(Meter::default()),
        }
    }

    /// `(scale, T)`: ticks per nanosecond and the emission interval in ticks,
    /// from the rule in the docs.
    pub fn ticks(quota: Quota) -> (i128, i128) {
        let limit = i128::from(quota.limit());
        let period = i128::from(quota.period_nanos());
        let g = gcd(limit, period);
        if limit / g <= 16 {
            (limit / g, period / g)
        } else {
            (16, ceil_div(period * 16, limit))
        }
    }

    /// Whether `Gcra::new` should accept the quota: at most 16 permits per
    /// nanosecond, and `burst·T` leaving room in a `u64` of ticks for 36
    /// years (of 365 days) of clock time.
    pub fn accepts(quota: Quota) -> bool {
        const LIFETIME_NS: i128 = 36 * 365 * 86_400 * 1_000_000_000;
        let (scale, interval) = GcraModel::ticks(quota);
        i128::from(quota.limit()) <= i128::from(quota.period_nanos()) * 16
            && i128::from(quota.burst())
                .checked_mul(interval)
                .is_some_and(|size| size + LIFETIME_NS * scale <= U64_MAX)
    }

    /// Ticks per nanosecond.
    pub fn scale(&self) -> u64 {
        self.scale as u64
    }

    /// The bucket's size, `burst·T`, in ticks.
    pub fn capacity_ticks(&self) -> u64 {
        (self.burst * self.interval) as u64
    }

    fn size(&self) -> i128 {
        self.burst * self.interval
    }

    /// The level at tick `at`, after draining from `meter`.
    fn level_at(meter: Meter, at: i128) -> i128 {
        (meter.level - (at - meter.at).max(0)).max(0)
    }

    /// Whether `cost` fits at `now_ns` (in ns), given `meter`.
    fn fits(&self, meter: Meter, now_ns: i128, cost: i128) -> bool {
        let now = now_ns * self.scale;
        let level = GcraModel::level_at(meter, now);
        let poured = cost * self.interval;
        level + poured <= self.size() && (cost == 0 || now + level + poured <= U64_MAX)
    }

    /// From the docs ("The end of the ticks"): whether a bucket empty at
    /// tick `tat` can never be full again: at the first whole nanosecond `t`
    /// at or after it, `t·scale + burst·T` is past `u64::MAX` ticks.
    fn never_full_again(&self, tat: i128) -> bool {
        ceil_div(tat, self.scale) * self.scale + self.size() > U64_MAX
    }

    fn decide(&self, meter: Meter, now_ns: u64, cost: u64) -> Expected {
        let now_ns = i128::from(now_ns);
        let cost = i128::from(cost);
        let now = now_ns * self.scale;
        let level = GcraModel::level_at(meter, now);
        let poured = cost * self.interval;
        // What could be taken after `level`: the bucket's room, and no more
        // than ends before the last tick. After a charge the level may be
        // above the size (a debt): none left.
        let remaining_at =
            |level: i128| (self.size() - level).min(U64_MAX - now - level).max(0) / self.interval;
        // Whole nanoseconds, rounded up, until `level` ticks have drained;
        // "never" if the limiter can never be full again by then.
        let drained_in = |level: i128| {
            if self.never_full_again(now + level) {
                U64_MAX
            } else {
                ceil_div(level, self.scale)
            }
        };
        if self.fits(meter, now_ns, cost) {
            let after = level + poured;
            return Expected::allow(self.burst, remaining_at(after), drained_in(after));
        }
        if now + level + self.interval > U64_MAX {
            // Closed: not one permit fits before the last tick, ever again.
            return Expected::deny(self.burst, 0, U64_MAX, U64_MAX);
        }
        let retry_after = if cost > self.burst {
            U64_MAX
        } else {
            // The level must drain to size − poured; it drains `scale` ticks per ns.
            let wait = ceil_div((level + poured - self.size()).max(0), self.scale);
            if self.fits(meter, now_ns + wait, cost) {
                assert!(
                    wait >= 1 && !self.fits(meter, now_ns + wait - 1, cost),
                    "gcra model: wait {wait} at {now_ns} for {cost} is not the first fit"
                );
                wait
            } else {
                // Past the end of the ticks: the tick at which the bucket would
                // be empty again, `max(now, when it empties now) + cost·T`,
                // only moves later, so the request never fits.
                U64_MAX
            }
        };
        Expected::deny(
            self.burst,
            remaining_at(level),
            retry_after,
            drained_in(level),
        )
    }
}

impl Model for GcraModel {
    fn check(&self, now_ns: u64, cost: u64) -> Expected {
        let mut meter = self.meter.lock().unwrap();
        let expected = self.decide(*meter, now_ns, cost);
        if expected.allowed && cost > 0 {
            let now = i128::from(now_ns) * self.scale;
            let level = GcraModel::level_at(*meter, now) + i128::from(cost) * self.interval;
            *meter = Meter { level, at: now };
        }
        expected
    }

    fn peek(&self, now_ns: u64, cost: u64) -> Expected {
        self.decide(*self.meter.lock().unwrap(), now_ns, cost)
    }

    fn capacity(&self) -> u64 {
        self.burst as u64
    }

    /// From the docs: "the TAT moves `cost · T` past `max(tat, now)` ...
    /// even beyond `now + burst · T` ... never past `now + burst·T +
    /// DEBT_PERIODS · limit · T` (nor past the last representable tick)":
    /// the meter overflows by the debt, whole permits of it, up to a level
    /// of `burst·T + 16·limit·T`, and to where `now + level` reaches
    /// `u64::MAX` ticks.
    fn charge(&self, now_ns: u64, cost: u64) -> (Expected, u64) {
        let recorded = {
            let mut meter = self.meter.lock().unwrap();
            let now = i128::from(now_ns) * self.scale;
            let level = GcraModel::level_at(*meter, now);
            let top = (self.size() + DEBT_PERIODS * self.limit * self.interval)
                .min(U64_MAX - now.min(U64_MAX));
            let fits = ((top - level).max(0) / self.interval).min(i128::from(cost));
            if fits > 0 {
                let level = level + fits * self.interval;
                *meter = Meter { level, at: now };
            }
            fits
        };
        (self.peek(now_ns, 1), recorded as u64)
    }
}

// ---------------------------------------------------------------------------
// Fixed window
// ---------------------------------------------------------------------------

/// A count per aligned window `[k·T, (k+1)·T)`, `k = now / T`; admitted iff the
/// window's count plus `cost` is at most `limit`. A denial waits for the next
/// window; `reset_after` is the time to the next window when the current one
/// holds anything, else 0.
///
/// From the docs: "the index has `64 − bits(limit)` bits ... past the last
/// window the limiter fails closed". Here: in a window past the last index
/// everything is denied, even cost 0 (implementation), with `remaining` 0 and
/// `retry_after = reset_after = u64::MAX`; in the last window, or in one
/// whose successor would start after the last instant a `u64` names, every
/// wait for the next window is "never" (docs: "The end of the clock").
#[derive(Debug)]
pub struct FixedWindowModel {
    limit: i128,
    period: i128,
    last_index: i128,
    /// The most the count field holds: `2^count_bits − 1`.
    max_count: i128,
    /// The window last written and its count (admitted, charged and
    /// carried in), which may be above the limit after a charge.
    window: Mutex<(i128, i128)>,
}

impl FixedWindowModel {
    /// The model of `FixedWindow::new(quota)`.
    pub fn new(quota: Quota) -> FixedWindowModel {
        FixedWindowModel {
            limit: i128::from(quota.limit()),
            period: i128::from(quota.period_nanos()),
            last_index: U64_MAX >> FixedWindowModel::count_bits(quota),
            max_count: (1i128 << FixedWindowModel::count_bits(quota)) - 1,
            window: Mutex::new((0, 0)),
        }
    }

    /// From the docs: `max(bits(limit), 64 − bits(⌊(2^64 − 1) / T⌋))`.
    fn count_bits(quota: Quota) -> u32 {
        let limit_bits = u64::BITS - quota.limit().leading_zeros();
        let index_bits = u64::BITS - (u64::MAX / quota.period_nanos()).leading_zeros();
        limit_bits.max(u64::BITS - index_bits)
    }

    /// Whether `FixedWindow::new` should accept the quota: the index beside a
    /// count of `bits(limit)` bits must cover 2^60 ns of windows.
    pub fn accepts(quota: Quota) -> bool {
        let bits = u64::BITS - quota.limit().leading_zeros();
        bits < 64 && (1i128 << (64 - bits)) * i128::from(quota.period_nanos()) >= 1i128 << 60
    }

    /// The count at window `index` (not before the stored one): a window
    /// that ends with `limit + D` starts the next with `D`, the one after
    /// with `D − limit`, floored at 0 (docs: the carry rule).
    fn count_at(&self, window: (i128, i128), index: i128) -> i128 {
        let (stored, count) = window;
        (count - (index - stored).max(0) * self.limit).max(0)
    }

    /// The wait from `now` until the start of window `index` ("never" past
    /// the last index or the last instant).
    fn until(&self, index: i128, now: i128) -> i128 {
        let start = index * self.period;
        if index > self.last_index || start > U64_MAX {
            U64_MAX
        } else {
            start - now
        }
    }

    fn decide(&self, window: (i128, i128), now: u64, cost: u64) -> Expected {
        let now = i128::from(now);
        let cost = i128::from(cost);
        let index = now / self.period;
        if index > self.last_index {
            // Past the last window: closed.
            return Expected::deny(self.limit, 0, U64_MAX, U64_MAX);
        }
        let count = self.count_at(window, index);
        // The first later window in which the carried count is at most
        // `left`: the one after `⌈(count − left) / limit⌉` windows.
        let drained = |left: i128| self.until(index + ceil_div(count - left, self.limit), now);
        if count + cost <= self.limit {
            let used = count + cost;
            let reset_after = if used > 0 {
                self.until(index + 1, now)
            } else {
                0
            };
            return Expected::allow(self.limit, self.limit - used, reset_after);
        }
        let retry_after = if cost > self.limit {
            U64_MAX
        } else {
            drained(self.limit - cost)
        };
        let reset_after = if count > 0 { drained(0) } else { 0 };
        Expected::deny(
            self.limit,
            (self.limit - count).max(0),
            retry_after,
            reset_after,
        )
    }
}

impl Model for FixedWindowModel {
    fn check(&self, now_ns: u64, cost: u64) -> Expected {
        let mut window = self.window.lock().unwrap();
        let expected = self.decide(*window, now_ns, cost);
        if expected.allowed && cost > 0 {
            let index = i128::from(now_ns) / self.period;
            *window = (index, self.count_at(*window, index) + i128::from(cost));
        }
        expected
    }

    fn peek(&self, now_ns: u64, cost: u64) -> Expected {
        self.decide(*self.window.lock().unwrap(), now_ns, cost)
    }

    fn capacity(&self) -> u64 {
        self.limit as u64
    }

    /// From the docs: the count runs past the limit, up to the limit and 16
    /// limits of debt, within the count field; nothing past the last window.
    fn charge(&self, now_ns: u64, cost: u64) -> (Expected, u64) {
        let recorded = {
            let mut window = self.window.lock().unwrap();
            let index = i128::from(now_ns) / self.period;
            let count = self.count_at(*window, index);
            let cap = (self.limit * (DEBT_PERIODS + 1)).min(self.max_count);
            let recorded = (cap - count).clamp(0, i128::from(cost));
            if index <= self.last_index && recorded > 0 {
                *window = (index, count + recorded);
                recorded
            } else {
                0
            }
        };
        (self.peek(now_ns, 1), recorded as u64)
    }
}

// ---------------------------------------------------------------------------
// Sliding log
// ---------------------------------------------------------------------------

/// The time of every admitted permit (one entry per permit). A permit
/// admitted at `t` counts at `now` iff `t + T > now`; a request is admitted
/// iff the permits that count, plus `cost`, are at most `limit`.
///
/// `retry_after` tries the instants at which a permit stops counting, in
/// order, and takes the first at which the request fits. `reset_after` is
/// the time until the newest permit that counts stops counting (0 if none);
/// after an admission of cost > 0 that permit is the one just admitted, so it
/// is the whole period.
#[derive(Debug)]
pub struct SlidingLogModel {
    limit: i128,
    period: i128,
    /// Admission times, one per permit, non-decreasing.
    permits: Mutex<Vec<i128>>,
}

impl SlidingLogModel {
    /// The model of `SlidingLog::new(quota)`.
    pub fn new(quota: Quota) -> SlidingLogModel {
        SlidingLogModel {
            limit: i128::from(quota.limit()),
            period: i128::from(quota.period_nanos()),
            permits: Mutex::new(Vec::new()),
        }
    }

    /// Whether `SlidingLog::new` should accept the quota: limit ≤ 2^20.
    pub fn accepts(quota: Quota) -> bool {
        quota.limit() <= 1 << 20
    }

    /// Permits that count at `now`. The log is sorted, so those are a suffix.
    fn live(&self, permits: &[i128], now: i128) -> i128 {
        let first_live = permits.partition_point(|&t| t + self.period <= now);
        (permits.len() - first_live) as i128
    }

    fn decide(&self, permits: &[i128], now: u64, cost: u64) -> Expected {
        let now = i128::from(now);
        let cost = i128::from(cost);
        let live = self.live(permits, now);
        // The wait until a permit stamped `t` stops counting: "never" when
        // that is past the last instant a `u64` names (a charge's runs are
        // stamped up to 16 periods on).
        let until_gone = |t: i128| {
            if t + self.period > U64_MAX {
                U64_MAX
            } else {
                t + self.period - now
            }
        };
        let reset_after = match permits.last() {
            Some(&newest) if live > 0 => until_gone(newest),
            _ => 0,
        };
        if live + cost <= self.limit {
            // The newest permit is then one admitted now (stamped no earlier
            // than the newest in the log, which a charge may have stamped
            // in the future).
            let stamp = permits.last().map_or(now, |&newest| newest.max(now));
            let reset_after = if cost > 0 {
                until_gone(stamp)
            } else {
                reset_after
            };
            return Expected::allow(self.limit, self.limit - live - cost, reset_after);
        }
        let retry_after = if cost > self.limit {
            U64_MAX
        } else {
            // Candidates: each instant at which a counting permit stops
            // counting, in order (permits admitted together share one).
            let mut candidates = permits[permits.len() - live as usize..]
                .iter()
                .map(|&t| t + self.period)
                .collect::<Vec<_>>();
            candidates.dedup();
            let at = candidates
                .into_iter()
                .find(|&instant| self.live(permits, instant) + cost <= self.limit)
                .expect("sliding log model: a request within the limit fits once the log expires");
            if at > U64_MAX { U64_MAX } else { at - now }
        };
        Expected::deny(
            self.limit,
            (self.limit - live).max(0),
            retry_after,
            reset_after,
        )
    }

    /// Drops the permits that no longer count at `now` (time does not go
    /// back: forgetting them changes no answer).
    fn forget(&self, permits: &mut Vec<i128>, now: i128) {
        let expired = permits.len() - self.live(permits, now) as usize;
        permits.drain(..expired);
    }
}

impl Model for SlidingLogModel {
    fn check(&self, now_ns: u64, cost: u64) -> Expected {
        let mut permits = self.permits.lock().unwrap();
        let expected = self.decide(&permits, now_ns, cost);
        if expected.allowed && cost > 0 {
            let now = i128::from(now_ns);
            self.forget(&mut permits, now);
            // Docs: "An admission is recorded at `max(now, newest)`".
            let stamp = permits.last().map_or(now, |&newest| newest.max(now));
            permits.extend(std::iter::repeat_n(stamp, cost as usize));
        }
        expected
    }

    /// From the docs: what the log has room for is stamped `s = max(now,
    /// newest)`; the rest in runs of at most `limit` at `s + T`, `s + 2T`,
    /// …; the log never holds more than `17 · limit` permits.
    fn charge(&self, now_ns: u64, cost: u64) -> (Expected, u64) {
        let recorded = {
            let mut permits = self.permits.lock().unwrap();
            let now = i128::from(now_ns);
            self.forget(&mut permits, now);
            let held = permits.len() as i128;
            let mut left = (self.limit * (DEBT_PERIODS + 1) - held).clamp(0, i128::from(cost));
            let mut stamp = permits.last().map_or(now, |&newest| newest.max(now));
            let mut run = left.min((self.limit - held).max(0));
            let mut recorded = 0;
            // No run is stamped past the last instant a `u64` names.
            while left > 0 && stamp <= U64_MAX {
                permits.extend(std::iter::repeat_n(stamp, run as usize));
                left -= run;
                recorded += run;
                stamp += self.period;
                run = left.min(self.limit);
            }
            recorded
        };
        (self.peek(now_ns, 1), recorded as u64)
    }

    fn peek(&self, now_ns: u64, cost: u64) -> Expected {
        self.decide(&self.permits.lock().unwrap(), now_ns, cost)
    }

    fn capacity(&self) -> u64 {
        self.limit as u64
    }
}
