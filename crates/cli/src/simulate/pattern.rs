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
    /// Mean offered requests per second.
    pub rate: f64,
    /// The quota's period, in nanoseconds.
    pub period: u64,
    /// Seed of the Poisson stream.
    pub seed: u64,
}

impl Synthetic {
    /// The arrivals in `[0, duration)`, sorted.
    pub fn arrivals(&self, duration: u64) -> Vec<u64> {
        let mut times = match self.name {
            PatternName::Steady => evenly(0, duration, self.rate),
            PatternName::Burst => self.burst(duration),
            PatternName::Spike => self.spike(duration),
            PatternName::Sawtooth => self.sawtooth(duration),
            PatternName::Poisson => self.poisson(duration),
        };
        times.sort_unstable();
        times
    }

    /// How many arrivals `duration` holds on average, to refuse a run too
    /// large before generating it (the spike adds 9 periods' worth at most).
    pub fn expected_count(&self, duration: u64) -> f64 {
        let seconds = duration as f64 / NANOS_PER_SECOND;
        let spike = match self.name {
            PatternName::Spike => 9.0 * self.rate * self.period as f64 / NANOS_PER_SECOND,
            _ => 0.0,
        };
        self.rate * seconds + spike
    }

    fn burst(&self, duration: u64) -> Vec<u64> {
        let on = (self.period / 4).max(1);
        let mut times = Vec::new();
        let mut start = 0;
        while start < duration {
            times.extend(evenly(start, (start + on).min(duration), 4.0 * self.rate));
            start = start.saturating_add(self.period);
        }
        times
    }

    fn spike(&self, duration: u64) -> Vec<u64> {
        let mut times = evenly(0, duration, self.rate);
        let boundary = (duration / 2 + self.period / 2) / self.period * self.period;
        let from = boundary.saturating_sub(self.period / 2);
        let to = (from + self.period).min(duration);
        times.extend(evenly(from, to, 9.0 * self.rate));
        times
    }

    fn sawtooth(&self, duration: u64) -> Vec<u64> {
        let cycle = self.period.saturating_mul(4);
        let cycle_seconds = cycle as f64 / NANOS_PER_SECOND;
        let mut times = Vec::new();
        let mut start = 0;
        while start < duration {
            // λ(s) = 2·rate·s/C, so Λ(s) = rate·s²/C and arrival i is at
            // s = √(i·C/rate).
            for i in 0.. {
                let offset =
                    ((i as f64 * cycle_seconds / self.rate).sqrt() * NANOS_PER_SECOND) as u64;
                if offset >= cycle || start + offset >= duration {
                    break;
                }
                times.push(start + offset);
            }
            start = start.saturating_add(cycle);
        }
        times
    }

    fn poisson(&self, duration: u64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut times = Vec::new();
        let mut now = 0.0;
        loop {
            // 1 − U is in (0, 1]: its logarithm is finite.
            let uniform: f64 = rng.random();
            now += -(1.0 - uniform).ln() / self.rate * NANOS_PER_SECOND;
            if now >= duration as f64 {
                return times;
            }
            times.push(now as u64);
        }
    }
}

/// Evenly spaced instants at `rate` per second in `[from, to)`.
fn evenly(from: u64, to: u64, rate: f64) -> Vec<u64> {
    let mut times = Vec::new();
    for i in 0_u64.. {
        // Multiply first: i·10⁹ is exact in an f64 up to 9·10⁶ arrivals.
        let at = from + (i as f64 * NANOS_PER_SECOND / rate) as u64;
        if at >= to {
            break;
        }
        times.push(at);
    }
    times
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
        let times = synthetic(PatternName::Steady, 4.0).arrivals(1_000_000_000);
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
            let count = synthetic(name, 100.0).arrivals(duration).len() as f64;
            assert!((count - 800.0).abs() <= 80.0, "{name:?}: {count}");
        }
        // The spike adds one period at 9× the rate: 900 more.
        let spike = synthetic(PatternName::Spike, 100.0).arrivals(duration);
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
            let times = synthetic(name, 37.0).arrivals(3_300_000_000);
            assert!(times.is_sorted());
            assert!(times.iter().all(|&t| t < 3_300_000_000), "{name:?}");
        }
    }

    #[test]
    fn poisson_is_reproducible_from_its_seed() {
        let a = synthetic(PatternName::Poisson, 50.0).arrivals(2_000_000_000);
        let b = synthetic(PatternName::Poisson, 50.0).arrivals(2_000_000_000);
        let other = Synthetic {
            seed: 2,
            ..synthetic(PatternName::Poisson, 50.0)
        }
        .arrivals(2_000_000_000);
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
}
