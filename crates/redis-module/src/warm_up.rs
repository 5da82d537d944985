//! Warm-up (Guava's `SmoothWarmingUp`, the core's `algorithm::warm_up`):
//! the general script's warm-up transition (`decide.lua`'s `warm_module`
//! over `warm_math.lua`), step for step, in `u128`.
//!
//! # Model
//!
//! The state is `"F S"` under the key: `F` the instant (ns) the next request
//! may go, `S` the idle permits at `F` in units of `1 / (2·(c + 1)·t)`
//! permit (`l / t` permits per ns in lowest terms, `c` the cold factor). A
//! request at `now ≥ F` is admitted; its idle permits are brought up to now
//! (`gain` units a ns, at most `max`), its cost (the area under the
//! interval curve, rounded up to the ns) is charged (`F := now + cost`) and
//! its permits taken. A request while something is owed (`now < F`) is
//! denied with `retry = F − now`. An absent or foreign value is cold (`F =
//! 0`, `S = max`). The key's TTL is the time until the state is as cold as a
//! fresh one, plus the slack: expiry forgets nothing.
//!
//! # Guarantee
//!
//! The same answers, stored values and TTLs as the script, to the
//! nanosecond: the script counts in exact naturals (`bignum.lua`); here
//! every value fits `u128` because the parameters are the core's own bounds
//! (`max ≤ 2^62` units, the cost's numerator within 128 bits), which every
//! limit a `tollgate-redis` client sends satisfies. A stored `F` or `S` has
//! at most 20 digits (as the script reads it), below 2^67. Products that
//! could pass 2^128 (idle time × gain, permits × units per permit) saturate
//! where the exact value would be clamped to `max` anyway.
//!
//! # Parameters
//!
//! `w<c> burst l t warmup`: the cold factor `c` in `[1, 2^32)` written
//! without leading zero (`w3`), the burst (the largest cost of one request,
//! what `remaining` reports when nothing is owed), `l` and `t`, the warm-up
//! period in ns; each number in `[1, 2^53)`. The module refuses, with an
//! error reply, parameters the core's `WarmUp` refuses (a `max` above 2^62
//! units, a cost that does not fit 128 bits): the script, counting in
//! bignums, would take them; no client sends them.

use crate::args::{ArgError, number, positive};
use crate::transition::Verdict;

/// The longest duration in a reply: below 2^53 ns, as the script caps it.
const LONGEST: u128 = (1 << 53) - 1;
/// The largest `max`, in units (the core's bound).
const MAX_UNITS: u128 = 1 << 62;

/// A warm-up limit's parameters as sent (`w<cold> burst l t warmup`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmArgs {
    /// The cold factor, at least 1.
    pub cold: u32,
    /// The largest cost of one request.
    pub burst: u64,
    /// The rate is `l / t` permits per ns.
    pub l: u64,
    /// See `l`.
    pub t: u64,
    /// The warm-up period, ns.
    pub period: u64,
}

/// The transition's integer constants (the core's `WarmConstants`).
#[derive(Clone, Copy, Debug)]
struct Constants {
    burst: u128,
    l: u128,
    t: u128,
    permit: u128,
    threshold: u128,
    max: u128,
    gain: u128,
    slope: u128,
    per_remainder: u128,
    denominator: u128,
}

impl WarmArgs {
    /// Parses `w<cold>`'s digits and the four numbers.
    ///
    /// # Errors
    ///
    /// A cold factor that is not `[1-9]` then up to 9 digits below 2^32, a
    /// number that is not a positive integer below 2^53, or parameters past
    /// the core's bounds.
    pub fn parse(
        cold: &[u8],
        burst: &[u8],
        l: &[u8],
        t: &[u8],
        period: &[u8],
    ) -> Result<WarmArgs, ArgError> {
        let bad_cold = || {
            ArgError(format!(
                "ERR tollgate: a warm-up is 'w<cold factor> burst l t warmup', got 'w{}'",
                String::from_utf8_lossy(cold)
            ))
        };
        if cold.is_empty() || cold.len() > 10 || cold[0] == b'0' {
            return Err(bad_cold());
        }
        let cold = number("cold factor", cold)
            .ok()
            .and_then(|c| u32::try_from(c).ok())
            .ok_or_else(bad_cold)?;
        let field = |what, raw| positive(what, raw).map(|v| u64::try_from(v).unwrap_or(u64::MAX));
        let args = WarmArgs {
            cold,
            burst: field("burst", burst)?,
            l: field("l", l)?,
            t: field("t", t)?,
            period: field("warmup", period)?,
        };
        if args.constants().is_none() {
            return Err(ArgError(
                "ERR tollgate: warm-up period × rate × (cold factor + 5) is too large to count \
                 exactly"
                    .to_owned(),
            ));
        }
        Ok(args)
    }

    /// The constants, as the core's `WarmUp::with_cold_factor` makes them;
    /// `None` where it refuses them (overflow).
    fn constants(&self) -> Option<Constants> {
        let c = u128::from(self.cold);
        let (l, t) = (u128::from(self.l), u128::from(self.t));
        let pl = u128::from(self.period) * l;
        let max = pl.checked_mul(c + 5).filter(|&m| m <= MAX_UNITS)?;
        let threshold = pl * (c + 1);
        let per_remainder = 16 * threshold;
        let denominator = per_remainder.checked_mul(l)?;
        let ramp = max - threshold;
        // The cost's numerator: (c − 1)·a·(2A − a) ≤ (c − 1)·A², plus a
        // remainder's share below the denominator.
        (ramp * ramp).checked_mul(c - 1)?.checked_add(denominator)?;
        Some(Constants {
            burst: u128::from(self.burst),
            l,
            t,
            permit: 2 * (c + 1) * t,
            threshold,
            max,
            gain: l * (c + 5),
            slope: c - 1,
            per_remainder,
            denominator,
        })
    }
}

/// One warm-up limit's loaded state.
pub(crate) struct Warm {
    k: Constants,
    /// The call's instant, ns.
    now: u128,
    /// The instant the next request may go, ns.
    f: u128,
    /// The idle permits at `f`, units (at most `max`).
    s: u128,
    /// Whether the key held a state (else cold, and maybe a marker).
    held: bool,
}

impl Warm {
    /// The state in `raw` (or cold) at `now_ns`.
    ///
    /// # Errors
    ///
    /// Parameters [`WarmArgs::parse`] would refuse (it did: never).
    pub(crate) fn load(args: &WarmArgs, raw: Option<&[u8]>, now_ns: u128) -> Result<Warm, String> {
        let k = args
            .constants()
            .ok_or("ERR tollgate: warm-up parameters past the core's bounds")?;
        let (f, s, held) = match raw.and_then(parse) {
            Some((f, s)) => (f, s.min(k.max), true),
            None => (0, k.max, false),
        };
        Ok(Warm {
            k,
            now: now_ns,
            f,
            s,
            held,
        })
    }

    /// Whether the key held no state (where a control's marker may be).
    pub(crate) fn blank(&self) -> bool {
        !self.held
    }

    fn owed(&self) -> bool {
        self.now < self.f
    }

    /// What a lease may take: the burst when nothing is owed.
    pub(crate) fn avail(&self) -> i128 {
        if self.owed() { 0 } else { wide(self.k.burst) }
    }

    /// The reply's four numbers for `take` permits.
    pub(crate) fn decide(&self, take: i128) -> Verdict {
        let burst = wide(self.k.burst);
        let reset = self.reset(self.f, self.s);
        if take <= 0 {
            return [1, if self.owed() { 0 } else { burst }, 0, reset];
        }
        if self.owed() {
            return [0, 0, capped(self.f - self.now), reset];
        }
        if take > burst {
            return [0, burst, -1, reset];
        }
        let (f, s) = self.next(take);
        [1, 0, 0, self.reset(f, s)]
    }

    /// The value to store after `take` permits are admitted, and the time
    /// (ns) until it is cold again; `None` for no permits.
    pub(crate) fn admit(&self, take: i128) -> Option<(String, i128)> {
        (take > 0).then(|| self.stored(self.next(take)))
    }

    /// The refund of `r` permits (the core's `WarmUp::refund`): what is
    /// owed moves back `r` stable intervals (rounded down), not before now,
    /// and the permits go back to the idle store. `None`: nothing owed.
    pub(crate) fn refund(&self, r: i128) -> Option<(String, i128)> {
        let n = narrow(r);
        if self.f <= self.now || n == 0 {
            return None;
        }
        let k = &self.k;
        let back = n * k.t / k.l;
        let f = if self.f > self.now + back {
            self.f - back
        } else {
            self.now
        };
        let s = k.max.min(self.s.saturating_add(n.saturating_mul(k.permit)));
        Some(self.stored((f, s)))
    }

    /// `(f, s)` as stored, and the time until cold again (the TTL).
    fn stored(&self, (f, s): (u128, u128)) -> (String, i128) {
        let until_cold = self.cold_at(f, s).saturating_sub(self.now);
        (format!("{f} {s}"), wide(until_cold))
    }

    /// The state after `take` permits at now (nothing owed).
    fn next(&self, take: i128) -> (u128, u128) {
        let n = narrow(take);
        let s = self.idle();
        (self.now + self.cost(s, n), self.taken(s, n))
    }

    /// Idle permits at now: those at `f`, plus `gain` a ns since.
    fn idle(&self) -> u128 {
        if self.now <= self.f {
            return self.s;
        }
        let gained = (self.now - self.f).saturating_mul(self.k.gain);
        self.k.max.min(self.s.saturating_add(gained))
    }

    /// When `(f, s)` is as cold as a fresh state.
    fn cold_at(&self, f: u128, s: u128) -> u128 {
        f + (self.k.max - s).div_ceil(self.k.gain)
    }

    /// The time until `(f, s)` is cold, capped as the script caps it.
    fn reset(&self, f: u128, s: u128) -> i128 {
        let cold = self.cold_at(f, s);
        if cold <= self.now {
            0
        } else {
            capped(cold - self.now)
        }
    }

    /// The cost in ns of `n` permits taken at `s` units, rounded up.
    fn cost(&self, s: u128, n: u128) -> u128 {
        let k = &self.k;
        let taken = n.saturating_mul(k.permit).min(s);
        let ramp = s.saturating_sub(k.threshold);
        let a = taken.min(ramp);
        let base = n * k.t;
        let (whole, rest) = (base / k.l, base % k.l);
        // Within the bounds `WarmArgs::constants` checked.
        let area = k.slope * a * (2 * ramp - a);
        whole + (rest * k.per_remainder + area).div_ceil(k.denominator)
    }

    /// The idle permits left after `n` are taken from `s`.
    fn taken(&self, s: u128, n: u128) -> u128 {
        s - n.saturating_mul(self.k.permit).min(s)
    }
}

/// A stored `"F S"`, each 1 to 20 digits (the script's `^(%d+) (%d+)$`).
fn parse(raw: &[u8]) -> Option<(u128, u128)> {
    let space = raw.iter().position(|&b| b == b' ')?;
    let digits = |s: &[u8]| -> Option<u128> {
        if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(s.iter().fold(0, |v, &b| v * 10 + u128::from(b - b'0')))
    };
    Some((digits(&raw[..space])?, digits(&raw[space + 1..])?))
}

fn capped(ns: u128) -> i128 {
    wide(ns.min(LONGEST))
}

fn wide(v: u128) -> i128 {
    i128::try_from(v).unwrap_or(i128::MAX)
}

/// A count of permits (non-negative: below 2^53 from the parser).
fn narrow(v: i128) -> u128 {
    u128::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u128 = 1_000_000;

    /// 2 per second (`l / t` = 1 / 5·10^8), burst 2, 4 s, cold factor 3.
    fn guava() -> WarmArgs {
        WarmArgs::parse(b"3", b"2", b"1", b"500000000", b"4000000000").unwrap()
    }

    /// The core's table: from cold the permits cost 1.375, 1.125, 0.875,
    /// 0.625, then 0.5 s; the stored value is `"F S"` with its TTL until
    /// cold again.
    #[test]
    fn guava_costs_from_cold() {
        let args = guava();
        let mut raw: Option<String> = None;
        let mut now = 0;
        let mut gaps = Vec::new();
        for _ in 0..6 {
            let warm = Warm::load(&args, raw.as_deref().map(str::as_bytes), now).unwrap();
            assert_eq!(warm.decide(1)[0], 1);
            let (value, _) = warm.admit(1).unwrap();
            let f: u128 = value.split(' ').next().unwrap().parse().unwrap();
            gaps.push(f - now);
            let later = Warm::load(&args, Some(value.as_bytes()), now).unwrap();
            assert_eq!(later.decide(1)[..3], [0, 0, (f - now) as i128]);
            (now, raw) = (f, Some(value));
        }
        assert_eq!(gaps, [1375, 1125, 875, 625, 500, 500].map(|g| g * MS));
    }

    /// The constants and every cost are the core's (`WarmUp::constants`,
    /// `WarmUp::cost`), for Guava's limits and a slow, wide one.
    #[test]
    fn constants_and_costs_are_the_cores() {
        use std::time::Duration;
        for (limit, period_s, burst, warm_s, cold) in [
            (2, 1, 2, 4, 3),
            (5, 1, 1, 4, 10),
            (1_000, 60, 50, 30, 1),
            (7, 3, 7, 11, 4),
        ] {
            let quota = tollgate::Quota::new(limit, Duration::from_secs(period_s))
                .and_then(|q| q.with_burst(burst))
                .unwrap();
            let core = tollgate::WarmUp::with_cold_factor(quota, Duration::from_secs(warm_s), cold)
                .unwrap();
            let c = core.constants();
            let args = WarmArgs {
                cold,
                burst,
                l: c.l,
                t: c.t,
                period: warm_s * 1_000_000_000,
            };
            let k = args.constants().unwrap();
            assert_eq!(
                (k.permit, k.threshold, k.max, k.gain, k.slope),
                (
                    c.permit,
                    u128::from(c.threshold),
                    u128::from(c.max),
                    u128::from(c.gain),
                    u128::from(c.slope)
                )
            );
            assert_eq!(
                (k.per_remainder, k.denominator),
                (c.per_remainder, c.denominator)
            );
            let warm = Warm::load(&args, None, 0).unwrap();
            for step in 0..=64u64 {
                let stored = c.max / 64 * step + step % 3;
                for permits in [1, 2, burst] {
                    assert_eq!(
                        warm.cost(u128::from(stored), u128::from(permits)),
                        u128::from(core.cost(stored, permits).unwrap()),
                        "{limit}/{period_s}s: {permits} at {stored}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        for (cold, period) in [
            (&b"0"[..], &b"1"[..]),
            (b"03", b"1"),
            (b"", b"1"),
            (b"4294967296", b"1"),
            (b"3x", b"1"),
            (b"3", b"0"),
        ] {
            assert!(
                WarmArgs::parse(cold, b"2", b"1", b"5", period).is_err(),
                "{cold:?} {period:?}"
            );
        }
        // max = P·l·(c + 5) above 2^62 units.
        assert!(WarmArgs::parse(b"3", b"1", b"1000003", b"1", b"1099511627776000000").is_err());
        assert!(WarmArgs::parse(b"4294967295", b"1", b"1", b"1", b"1").is_ok());
    }

    #[test]
    fn stored_values_read_as_the_script_reads_them() {
        assert_eq!(parse(b"12 34"), Some((12, 34)));
        assert_eq!(parse(b"00012 0"), Some((12, 0)));
        let twenty = b"99999999999999999999 1";
        assert_eq!(parse(twenty), Some((99_999_999_999_999_999_999, 1)));
        for foreign in [
            &b"1"[..],
            b"1 2 ",
            b" 1 2",
            b"1  2",
            b"-1 2",
            b"1 x",
            b"123456789012345678901 1",
        ] {
            assert_eq!(parse(foreign), None, "{foreign:?}");
        }
    }
}
