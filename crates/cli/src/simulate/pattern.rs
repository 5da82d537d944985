//! Arrival patterns: sorted instants, in nanoseconds from the start.
//!
//! Each synthetic pattern offers `rate` requests per second on average over
//! whole cycles, shaped against the quota's period `T` so that the picture
//! shows what tells the algorithms apart:
//!
//! - **steady**: request `i` at `floor(i·10⁹ / rate)` ns.
//! - **burst**: on for the first quarter of each period at `4·rate`, then
//!   off: the same mean, delivered in clumps aligned with the windows.
//! - **spike**: steady, plus one period at `9·rate` more (10× in all)
//!   centred on the window boundary nearest the middle of the run: the
//!   fixed window admits a full window on each side of the boundary.
//! - **sawtooth**: over each cycle of `4·T` the rate ramps linearly from 0
//!   to `2·rate`; arrival `i` of a cycle is where the integral of the rate
//!   reaches `i`.
//! - **poisson**: exponential gaps of mean `1/rate`, from a ChaCha8 stream
//!   seeded by `--seed` (the same seed gives the same arrivals on every
//!   platform and version).
//! - **CSV**: one timestamp per line in seconds from the start, in the first
//!   comma-separated column, parsed as an exact decimal (to the nanosecond,
//!   no floating point); blank lines and `#` comments are skipped, and so is
//!   a first line that is not a number (a header). The instants are sorted:
//!   the simulation replays them in time order.
//!
//! Instants at or after the run's duration are left out.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cli::PatternName;
use crate::messages::CsvError;

const NANOS_PER_SECOND: f64 = 1e9;

/// The shape of the offered load.
#[derive(Clone, Copy, Debug)]
pub struct Synthetic {
    /// Which pattern.
    pub name: PatternName,
    /// Mean offered requests per second (finite, above zero).
    pub rate: f64,
    /// The quota's period, in nanoseconds (above zero).
    pub period: u64,
    /// Seed of the Poisson stream.
    pub seed: u64,
}

/// A stretch `[start, start + span)` of arrivals of one shape.
#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u64,
    span: u64,
    shape: Shape,
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Evenly spaced at this rate per second.
    Even(f64),
    /// The sawtooth's ramp: `rate` on average over a cycle of `cycle` ns.
    Ramp { rate: f64, cycle: u64 },
}

impl Shape {
    /// Offset of arrival `i` from the segment's start, in nanoseconds:
    /// non-decreasing in `i`, zero for `i = 0`, saturating at `u64::MAX`
    /// (a float-to-integer `as` saturates, so a tiny rate cannot wrap).
    fn offset(self, i: u64) -> u64 {
        match self {
            // Multiply first: i·10⁹ is exact in an f64 up to 9·10⁶ arrivals.
            Shape::Even(rate) => (i as f64 * NANOS_PER_SECOND / rate) as u64,
            // λ(s) = 2·rate·s/C, so Λ(s) = rate·s²/C and arrival i is at
            // s = √(i·C/rate).
            Shape::Ramp { rate, cycle } => {
                let cycle_seconds = cycle as f64 / NANOS_PER_SECOND;
                ((i as f64 * cycle_seconds / rate).sqrt() * NANOS_PER_SECOND) as u64
            }
        }
    }

    /// About how many arrivals fall within `span` ns (the exact count is
    /// within a few of it).
    fn estimate(self, span: u64) -> f64 {
        let seconds = span as f64 / NANOS_PER_SECOND;
        match self {
            Shape::Even(rate) => rate * seconds,
            Shape::Ramp { rate, cycle } => {
                rate * seconds * seconds / (cycle as f64 / NANOS_PER_SECOND)
            }
        }
    }
}

impl Segment {
    /// Exactly how many arrivals the segment holds (the `i` with
    /// `offset(i) < span`), or `None` if more than `cap`: found from the
    /// estimate and corrected step by step against `offset` itself, so that
    /// it is the count [`Segment::push`] generates.
    fn count(self, cap: u64) -> Option<u64> {
        if self.span == 0 {
            return Some(0);
        }
        let estimate = self.shape.estimate(self.span);
        // Also refuses NaN and infinity.
        if estimate.is_nan() || estimate > cap as f64 + 2.0 {
            return None;
        }
        let mut n = estimate.max(0.0).ceil() as u64;
        while n > 0 && self.shape.offset(n - 1) >= self.span {
            n -= 1;
        }
        while self.shape.offset(n) < self.span {
            n += 1;
            if n > cap {
                return None;
            }
        }
        Some(n)
    }

    /// Appends the segment's `count` arrivals (from [`Segment::count`]).
    fn push(self, count: u64, times: &mut Vec<u64>) {
        // offset(i) < span for i < count, and start + span ≤ the duration:
        // no sum overflows.
        times.extend((0..count).map(|i| self.start + self.shape.offset(i)));
    }
}

impl Synthetic {
    /// Exactly how many arrivals `[0, duration)` holds, computed before any
    /// is generated, or `None` if more than `cap`. All arithmetic is checked:
    /// any rate, period and duration gives an answer in time proportional to
    /// at most `cap`.
    pub fn count(&self, duration: u64, cap: u64) -> Option<u64> {
        if let PatternName::Poisson = self.name {
            return self.poisson(duration, cap, |_| {});
        }
        // Each burst or sawtooth cycle holds at least its first arrival:
        // more cycles than `cap` is more arrivals than `cap`.
        if self.cycles(duration) > cap {
            return None;
        }
        let mut total: u64 = 0;
        for segment in self.segments(duration) {
            total = total.checked_add(segment.count(cap - total)?)?;
            if total > cap {
                return None;
            }
        }
        Some(total)
    }

    /// The arrivals in `[0, duration)`, sorted; `count` is what
    /// [`Synthetic::count`] answered for this duration.
    pub fn arrivals(&self, duration: u64, count: u64) -> Vec<u64> {
        let mut times = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        if let PatternName::Poisson = self.name {
            self.poisson(duration, count, |at| times.push(at));
        } else {
            for segment in self.segments(duration) {
                let n = segment.count(count).unwrap_or(0);
                segment.push(n, &mut times);
            }
        }
        debug_assert_eq!(times.len() as u64, count, "{self:?} over {duration} ns");
        times.sort_unstable();
        times
    }

    /// Cycles of the burst or sawtooth in `duration` (1 for the others).
    fn cycles(&self, duration: u64) -> u64 {
        match self.name {
            PatternName::Burst => duration.div_ceil(self.period),
            PatternName::Sawtooth => duration.div_ceil(self.period.saturating_mul(4)),
            _ => 1,
        }
    }

    /// The segments of a non-Poisson pattern; call after [`Synthetic::count`]
    /// (the burst and sawtooth yield one per cycle).
    fn segments(&self, duration: u64) -> impl Iterator<Item = Segment> + '_ {
        let rate = self.rate;
        let (cycle, on, shape) = match self.name {
            PatternName::Burst => (
                self.period,
                (self.period / 4).max(1),
                Shape::Even(4.0 * rate),
            ),
            PatternName::Sawtooth => {
                let cycle = self.period.saturating_mul(4);
                (cycle, cycle, Shape::Ramp { rate, cycle })
            }
            _ => (duration, duration, Shape::Even(rate)),
        };
        let cyclic = (0..self.cycles(duration)).map(move |k| {
            // k < cycles, so k·cycle < duration.
            let start = k * cycle;
            Segment {
                start,
                span: on.min(duration - start),
                shape,
            }
        });
        // The spike: one more period at 9× the rate, centred on the window
        // boundary nearest the middle of the run.
        let spike = matches!(self.name, PatternName::Spike).then(|| {
            let boundary = (duration / 2 + self.period / 2) / self.period * self.period;
            let from = boundary.saturating_sub(self.period / 2).min(duration);
            let to = from.saturating_add(self.period).min(duration);
            Segment {
                start: from,
                span: to - from,
                shape: Shape::Even(9.0 * rate),
            }
        });
        cyclic.chain(spike)
    }

    /// Walks the Poisson arrivals in `[0, duration)`, handing each to
    /// `visit`; their count, or `None` past `cap` (the walk stops there).
    fn poisson(&self, duration: u64, cap: u64, mut visit: impl FnMut(u64)) -> Option<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut count = 0;
        let mut now = 0.0;
        loop {
            // 1 − U is in (0, 1]: its logarithm is finite.
            let uniform: f64 = rng.random();
            now += -(1.0 - uniform).ln() / self.rate * NANOS_PER_SECOND;
            if now >= duration as f64 {
                return Some(count);
            }
            if count == cap {
                return None;
            }
            count += 1;
            visit(now as u64);
        }
    }
}

/// Timestamps from CSV text, sorted; see the module docs for the format.
pub fn parse_csv(text: &str) -> Result<Vec<u64>, CsvError> {
    let mut times = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let field = line.split(',').next().unwrap_or("").trim();
        if field.is_empty() || field.starts_with('#') {
            continue;
        }
        match parse_seconds(field) {
            Ok(nanos) => times.push(nanos),
            // A header: only on the first line, and only if it is not a number.
            Err(_)
                if index == 0
                    && !field.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.') => {
            }
            Err(reason) => {
                return Err(CsvError::BadTimestamp {
                    line: index + 1,
                    text: field.to_owned(),
                    reason,
                });
            }
        }
    }
    if times.is_empty() {
        return Err(CsvError::Empty);
    }
    times.sort_unstable();
    Ok(times)
}

/// A non-negative decimal number of seconds, exactly, in nanoseconds.
fn parse_seconds(text: &str) -> Result<u64, &'static str> {
    if text.starts_with('-') {
        return Err("negative");
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err("not a number");
    }
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return Err("not a decimal number of seconds");
    }
    if fraction.len() > 9 {
        return Err("more precise than a nanosecond");
    }
    let seconds: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "too large")?
    };
    let nanos: u64 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}")
            .parse()
            .map_err(|_| "not a number")?
    };
    seconds
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nanos))
        .ok_or("too large")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arrivals, counted first as `simulate` does.
    fn arrivals(synthetic: &Synthetic, duration: u64) -> Vec<u64> {
        let count = synthetic.count(duration, u64::MAX >> 1).expect("a count");
        let times = synthetic.arrivals(duration, count);
        assert_eq!(times.len() as u64, count, "{synthetic:?}");
        times
    }

    fn synthetic(name: PatternName, rate: f64) -> Synthetic {
        Synthetic {
            name,
            rate,
            period: 1_000_000_000,
            seed: 1,
        }
    }

    #[test]
    fn steady_is_evenly_spaced() {
        let times = arrivals(&synthetic(PatternName::Steady, 4.0), 1_000_000_000);
        assert_eq!(times, vec![0, 250_000_000, 500_000_000, 750_000_000]);
    }

    #[test]
    fn every_pattern_offers_its_mean_rate_over_whole_cycles() {
        let duration = 8_000_000_000;
        for name in [
            PatternName::Steady,
            PatternName::Burst,
            PatternName::Sawtooth,
            PatternName::Poisson,
        ] {
            let count = arrivals(&synthetic(name, 100.0), duration).len() as f64;
            assert!((count - 800.0).abs() <= 80.0, "{name:?}: {count}");
        }
        // The spike adds one period at 9× the rate: 900 more.
        let spike = arrivals(&synthetic(PatternName::Spike, 100.0), duration);
        assert_eq!(spike.len(), 800 + 900);
        // Centred on the boundary at 4 s.
        let in_spike = spike
            .iter()
            .filter(|&&t| (3_500_000_000..4_500_000_000).contains(&t))
            .count();
        assert_eq!(in_spike, 1_000);
    }

    #[test]
    fn arrivals_are_sorted_and_within_the_run() {
        for name in [
            PatternName::Steady,
            PatternName::Burst,
            PatternName::Spike,
            PatternName::Sawtooth,
            PatternName::Poisson,
        ] {
            let times = arrivals(&synthetic(name, 37.0), 3_300_000_000);
            assert!(times.is_sorted());
            assert!(times.iter().all(|&t| t < 3_300_000_000), "{name:?}");
        }
    }

    #[test]
    fn poisson_is_reproducible_from_its_seed() {
        let a = arrivals(&synthetic(PatternName::Poisson, 50.0), 2_000_000_000);
        let b = arrivals(&synthetic(PatternName::Poisson, 50.0), 2_000_000_000);
        let other = arrivals(
            &Synthetic {
                seed: 2,
                ..synthetic(PatternName::Poisson, 50.0)
            },
            2_000_000_000,
        );
        assert_eq!(a, b);
        assert_ne!(a, other);
    }

    #[test]
    fn csv_timestamps_are_exact_decimals() {
        let text = "time,path\n0.5,/a\n\n# a comment\n1,/b\n0.000000001\n2.25\n";
        assert_eq!(
            parse_csv(text),
            Ok(vec![1, 500_000_000, 1_000_000_000, 2_250_000_000])
        );
        assert_eq!(parse_csv(".5"), Ok(vec![500_000_000]));
    }

    #[test]
    fn csv_errors_name_the_line() {
        assert_eq!(parse_csv(""), Err(CsvError::Empty));
        assert_eq!(parse_csv("time\n"), Err(CsvError::Empty));
        for (text, line) in [
            ("1\n-2\n", 2),
            ("1\nabc\n", 2),
            ("0.0000000001", 1),
            ("1e3", 1),
            ("99999999999999999999", 1),
        ] {
            match parse_csv(text) {
                Err(CsvError::BadTimestamp { line: at, .. }) => assert_eq!(at, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    const ALL: [PatternName; 5] = [
        PatternName::Steady,
        PatternName::Burst,
        PatternName::Spike,
        PatternName::Sawtooth,
        PatternName::Poisson,
    ];

    /// Regression: `evenly()` computed `from + offset` with the offset of a
    /// rate of 1e-12/s saturated to `u64::MAX`: the sum wrapped below the
    /// end, and the loop pushed until memory ran out.
    #[test]
    fn a_tiny_rate_holds_one_arrival_and_never_wraps() {
        for name in ALL {
            let pattern = synthetic(name, 1e-12);
            for duration in [1, 1_000_000_000, u64::MAX] {
                let count = pattern.count(duration, 5_000_000);
                let cyclic = matches!(name, PatternName::Burst | PatternName::Sawtooth);
                if cyclic && duration == u64::MAX {
                    // One arrival per cycle at least: 10¹⁰ cycles of 1 s.
                    assert_eq!(count, None, "{name:?}");
                    continue;
                }
                assert!(
                    matches!(count, Some(0..=2)),
                    "{name:?} {duration}: {count:?}"
                );
                let count = count.unwrap();
                assert_eq!(pattern.arrivals(duration, count).len() as u64, count);
            }
        }
    }

    /// Regression: `--duration 18446744073709551615s` (saturated to
    /// `u64::MAX` ns) looped without end; now it is counted and refused.
    #[test]
    fn the_longest_duration_is_counted_and_refused() {
        for name in ALL {
            assert_eq!(
                synthetic(name, 5.0).count(u64::MAX, 5_000_000),
                None,
                "{name:?}"
            );
        }
        // Cycles of 1 ns: more cycles than the cap, refused before counting.
        let fine = Synthetic {
            period: 1,
            ..synthetic(PatternName::Burst, 5.0)
        };
        assert_eq!(fine.count(u64::MAX, 5_000_000), None);
    }

    /// Regression: the cap was checked against `rate × duration`, but a
    /// burst's partial cycle holds 4× the rate: `--period 4s --duration 1s
    /// --rate 4999999` held 20 M arrivals. And the spike's estimate added a
    /// whole period at 9× the rate to a run of 1 ms: 10⁸/s for 1 ms (1 M
    /// arrivals) was refused.
    #[test]
    fn the_count_is_exact_for_partial_cycles_and_short_spikes() {
        let burst = Synthetic {
            period: 4_000_000_000,
            ..synthetic(PatternName::Burst, 4_999_999.0)
        };
        assert_eq!(burst.count(1_000_000_000, 5_000_000), None);
        assert_eq!(burst.count(1_000_000_000, 20_000_000), Some(19_999_996));
        let spike = synthetic(PatternName::Spike, 100_000_000.0);
        assert_eq!(spike.count(1_000_000, 5_000_000), Some(1_000_000));
        assert_eq!(arrivals(&spike, 1_000_000).len(), 1_000_000);
    }

    #[test]
    fn the_count_is_what_is_generated() {
        let mut state = 7_u64;
        let mut next = |modulo: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % modulo + 1
        };
        for _ in 0..200 {
            for name in ALL {
                let pattern = Synthetic {
                    name,
                    rate: next(100_000) as f64 / next(1_000) as f64,
                    period: next(3_000_000_000),
                    seed: next(100),
                };
                let duration = next(10_000_000_000);
                if let Some(count) = pattern.count(duration, 200_000) {
                    let times = pattern.arrivals(duration, count);
                    assert_eq!(times.len() as u64, count, "{pattern:?} {duration}");
                    assert!(
                        times.iter().all(|&t| t < duration),
                        "{pattern:?} {duration}"
                    );
                }
            }
        }
    }
}
