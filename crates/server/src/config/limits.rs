//! The limits of a descriptor as written: `rate_limit:` and each entry of
//! `rate_limits:` (unit or period, algorithm, burst, slots, `replaces`),
//! validated into [`QuotaConfig`]s and the core's algorithm built from
//! them ([`build_algorithm`]). The meaning of each key is in the
//! [`config`](super) module docs.

use std::time::Duration;

use serde::Deserialize;
use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::algorithm::calendar::{CalendarUnit, CalendarWindow};
use tollgate::{AllOf, FixedWindow, Gcra, Quota, SlidingLog, SlidingWindow, WarmUp};

use super::checked::{
    AlgorithmKind, BuiltAlgorithm, LimitConfig, Limits, QuotaConfig, Unit, Warmup,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitYaml {
    #[serde(default)]
    unlimited: bool,
    /// envoyproxy/ratelimit's `replaces`: the names of the limits this
    /// one switches off when both match in one request.
    #[serde(default)]
    replaces: Vec<ReplacesYaml>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u64>,
    #[serde(default)]
    period: Option<String>,
    /// A window aligned to UTC calendar units (an extension).
    #[serde(default)]
    calendar: Option<String>,
    #[serde(default)]
    algorithm: Option<AlgorithmKind>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    slots: Option<u32>,
    /// Guava's warm-up (an extension): `{period: 60s, cold_factor: 3}`.
    #[serde(default)]
    warmup: Option<WarmupYaml>,
}

/// `warmup:` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct WarmupYaml {
    period: String,
    #[serde(default)]
    cold_factor: Option<u32>,
}

impl WarmupYaml {
    fn validate(&self) -> Result<Warmup, String> {
        let period =
            parse_period(&self.period).map_err(|error| format!("warmup.period: {error}"))?;
        let cold_factor = self
            .cold_factor
            .unwrap_or(tollgate::algorithm::warm_up::DEFAULT_COLD_FACTOR);
        if cold_factor == 0 {
            return Err("warmup.cold_factor: must be at least 1".into());
        }
        Ok(Warmup {
            period,
            cold_factor,
        })
    }
}

/// One entry of `replaces:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplacesYaml {
    name: String,
}

impl LimitYaml {
    /// The `replaces` names, checked as envoyproxy/ratelimit does (no
    /// empty name, not the limit's own name).
    pub(super) fn replaces(&self) -> Result<Vec<String>, String> {
        let mut names = Vec::with_capacity(self.replaces.len());
        for (i, entry) in self.replaces.iter().enumerate() {
            if entry.name.is_empty() {
                return Err(format!(
                    "rate_limit.replaces[{i}].name: should not be empty"
                ));
            }
            if self.name.as_deref() == Some(entry.name.as_str()) {
                return Err(format!(
                    "rate_limit.replaces[{i}].name: '{}' is this limit's own name",
                    entry.name
                ));
            }
            names.push(entry.name.clone());
        }
        Ok(names)
    }

    pub(super) fn split(self) -> Result<(bool, Option<String>, QuotaYaml), String> {
        let quota = QuotaYaml {
            unit: self.unit,
            requests_per_unit: self.requests_per_unit,
            period: self.period,
            calendar: self.calendar,
            algorithm: self.algorithm,
            burst: self.burst,
            slots: self.slots,
            warmup: self.warmup,
        };
        Ok((self.unlimited, self.name, quota))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct QuotaYaml {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u64>,
    #[serde(default)]
    period: Option<String>,
    /// A window aligned to UTC calendar units (an extension).
    #[serde(default)]
    calendar: Option<String>,
    #[serde(default)]
    algorithm: Option<AlgorithmKind>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    slots: Option<u32>,
    #[serde(default)]
    warmup: Option<WarmupYaml>,
}

impl QuotaYaml {
    fn is_empty(&self) -> bool {
        self.unit.is_none()
            && self.requests_per_unit.is_none()
            && self.period.is_none()
            && self.calendar.is_none()
            && self.algorithm.is_none()
            && self.burst.is_none()
            && self.slots.is_none()
            && self.warmup.is_none()
    }

    pub(crate) fn validate(&self) -> Result<(AlgorithmKind, QuotaConfig), String> {
        let requests_per_unit = match self.requests_per_unit {
            Some(0) => return Err("requests_per_unit: must be at least 1".into()),
            Some(n) => n,
            None => return Err("requests_per_unit: missing".into()),
        };
        if let Some(calendar) = &self.calendar {
            return self.calendar(calendar, requests_per_unit);
        }
        let algorithm = match self.algorithm {
            Some(AlgorithmKind::Calendar) => {
                return Err(
                    "calendar: missing (calendar: minute, hour, day, week or month)".into(),
                );
            }
            Some(algorithm) => algorithm,
            None if self.warmup.is_some() => AlgorithmKind::WarmUp,
            None => DEFAULT_ALGORITHM.with(std::cell::Cell::get),
        };
        let warmup = match (&self.warmup, algorithm) {
            (Some(warmup), AlgorithmKind::WarmUp) => Some(warmup.validate()?),
            (None, AlgorithmKind::WarmUp) => {
                return Err("warmup: missing (warmup: {period: 60s, cold_factor: 3})".into());
            }
            (Some(_), other) => {
                return Err(format!(
                    "warmup: only the warm_up algorithm warms up, not {}",
                    other.name()
                ));
            }
            (None, _) => None,
        };
        let (period, unit) = match (&self.unit, &self.period) {
            (Some(_), Some(_)) => return Err("give either unit or period, not both".into()),
            (None, None) => return Err("unit: missing (or give a period)".into()),
            (Some(unit), None) => {
                let unit = Unit::parse(unit).ok_or_else(|| {
                    format!(
                        "unit: invalid rate limit unit '{unit}' (second, minute, hour, day, week, month, year)"
                    )
                })?;
                (unit.period(), Some(unit))
            }
            (None, Some(period)) => {
                let period = parse_period(period).map_err(|error| format!("period: {error}"))?;
                (period, Unit::of_period(period))
            }
        };
        if self.burst.is_some() && algorithm != AlgorithmKind::Gcra {
            return Err(format!(
                "burst: only the gcra algorithm has a burst, not {}",
                algorithm.name()
            ));
        }
        if self.slots.is_some() && algorithm != AlgorithmKind::SlidingWindow {
            return Err(format!(
                "slots: only the sliding_window algorithm has slots, not {}",
                algorithm.name()
            ));
        }
        let quota = QuotaConfig {
            requests_per_unit,
            period,
            unit,
            burst: self.burst,
            slots: match algorithm {
                AlgorithmKind::SlidingWindow => Some(self.slots.unwrap_or(DEFAULT_SLOTS)),
                _ => None,
            },
            warmup,
        };
        Ok((algorithm, quota))
    }
}

impl QuotaYaml {
    /// A `calendar:` quota: a fixed window aligned to UTC `unit`s; its
    /// period is the unit's longest length (a month: 31 days), its `unit`
    /// names the calendar unit.
    fn calendar(
        &self,
        unit: &str,
        requests_per_unit: u64,
    ) -> Result<(AlgorithmKind, QuotaConfig), String> {
        let others = [
            ("unit", self.unit.is_some()),
            ("period", self.period.is_some()),
            ("burst", self.burst.is_some()),
            ("slots", self.slots.is_some()),
            ("warmup", self.warmup.is_some()),
        ];
        if let Some((key, _)) = others.iter().find(|(_, given)| *given) {
            return Err(format!(
                "{key}: a calendar window has its calendar unit only (no unit, period, burst or slots)"
            ));
        }
        if self.algorithm.is_some_and(|a| a != AlgorithmKind::Calendar) {
            return Err("algorithm: a calendar window is its own algorithm (leave algorithm out, or say calendar)".into());
        }
        let unit = match Unit::parse(unit) {
            Some(unit @ (Unit::Minute | Unit::Hour | Unit::Day | Unit::Week | Unit::Month)) => unit,
            _ => {
                return Err(format!(
                    "calendar: invalid calendar unit '{unit}' (minute, hour, day, week, month)"
                ));
            }
        };
        let period = calendar_unit(unit).map_or(unit.period(), CalendarUnit::longest);
        Ok((
            AlgorithmKind::Calendar,
            QuotaConfig {
                requests_per_unit,
                period,
                unit: Some(unit),
                burst: None,
                slots: None,
                warmup: None,
            },
        ))
    }
}

/// The core's calendar unit of a calendar quota's `unit`.
pub(crate) fn calendar_unit(unit: Unit) -> Option<CalendarUnit> {
    Some(match unit {
        Unit::Minute => CalendarUnit::Minute,
        Unit::Hour => CalendarUnit::Hour,
        Unit::Day => CalendarUnit::Day,
        Unit::Week => CalendarUnit::Week,
        Unit::Month => CalendarUnit::Month,
        Unit::Second | Unit::Year => return None,
    })
}

thread_local! {
    /// The algorithm of a quota that names none: GCRA for the YAML file,
    /// the fixed window for rules read through envoyproxy/ratelimit's
    /// environment (see [`super::lyft_env`]). Set for one read by
    /// [`DefaultAlgorithm::set`].
    static DEFAULT_ALGORITHM: std::cell::Cell<AlgorithmKind> =
        const { std::cell::Cell::new(AlgorithmKind::Gcra) };
}

/// Sets the default algorithm of the current thread's reads until dropped
/// (restoring the previous one).
pub(super) struct DefaultAlgorithm(AlgorithmKind);

impl DefaultAlgorithm {
    pub(super) fn set(kind: AlgorithmKind) -> DefaultAlgorithm {
        DefaultAlgorithm(DEFAULT_ALGORITHM.with(|cell| cell.replace(kind)))
    }
}

impl Drop for DefaultAlgorithm {
    fn drop(&mut self) {
        DEFAULT_ALGORITHM.with(|cell| cell.set(self.0));
    }
}

/// The sliding window's slots when the file does not say.
pub(super) const DEFAULT_SLOTS: u32 = 10;

/// `500ms`, `10s`, `5m`, `2h`, `1d`.
pub(crate) fn parse_period(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit (ms, s, m, h, d)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' does not start with a whole number"))?;
    let millis_per_unit: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("unknown unit '{other}' (ms, s, m, h, d)")),
    };
    let millis = number
        .checked_mul(millis_per_unit)
        .ok_or_else(|| format!("'{text}' is too long"))?;
    if millis == 0 {
        return Err("must be longer than 0".into());
    }
    Ok(Duration::from_millis(millis))
}

pub(crate) fn build_algorithm(
    kind: AlgorithmKind,
    quotas: &[QuotaConfig],
) -> Result<BuiltAlgorithm, tollgate::QuotaError> {
    fn all<A: tollgate::Algorithm>(
        quotas: &[QuotaConfig],
        build: impl Fn(&QuotaConfig) -> Result<A, tollgate::QuotaError>,
    ) -> Result<AllOf<A>, tollgate::QuotaError> {
        AllOf::new(quotas.iter().map(build).collect::<Result<Vec<_>, _>>()?)
    }
    Ok(match kind {
        AlgorithmKind::Gcra => BuiltAlgorithm::Gcra(all(quotas, |q| Gcra::new(quota_of(q)?))?),
        AlgorithmKind::FixedWindow => {
            BuiltAlgorithm::FixedWindow(all(quotas, |q| FixedWindow::new(quota_of(q)?))?)
        }
        AlgorithmKind::SlidingLog => {
            BuiltAlgorithm::SlidingLog(all(quotas, |q| SlidingLog::new(quota_of(q)?))?)
        }
        AlgorithmKind::SlidingWindow => BuiltAlgorithm::SlidingWindow(all(quotas, |q| {
            SlidingWindow::new(quota_of(q)?, q.slots.unwrap_or(DEFAULT_SLOTS))
        })?),
        AlgorithmKind::Calendar | AlgorithmKind::WarmUp | AlgorithmKind::Mixed => {
            let kinds = vec![kind; quotas.len()];
            return build_mixed(&kinds, quotas);
        }
    })
}

fn quota_of(q: &QuotaConfig) -> Result<Quota, tollgate::QuotaError> {
    let quota = Quota::new(q.requests_per_unit, q.period)?;
    match q.burst {
        Some(burst) => quota.with_burst(burst),
        None => Ok(quota),
    }
}

/// One algorithm per quota (`kinds[i]` runs `quotas[i]`), all-or-nothing:
/// the core's `AllOf<AnyAlgorithm>`.
pub(crate) fn build_mixed(
    kinds: &[AlgorithmKind],
    quotas: &[QuotaConfig],
) -> Result<BuiltAlgorithm, tollgate::QuotaError> {
    let one = |kind: AlgorithmKind,
               q: &QuotaConfig|
     -> Result<AnyAlgorithm, tollgate::QuotaError> {
        Ok(match kind {
            AlgorithmKind::Gcra => Gcra::new(quota_of(q)?)?.into(),
            AlgorithmKind::FixedWindow => FixedWindow::new(quota_of(q)?)?.into(),
            AlgorithmKind::SlidingLog => SlidingLog::new(quota_of(q)?)?.into(),
            AlgorithmKind::SlidingWindow => {
                SlidingWindow::new(quota_of(q)?, q.slots.unwrap_or(DEFAULT_SLOTS))?.into()
            }
            // Validation gives every warm-up quota its parameters.
            AlgorithmKind::WarmUp => {
                let warmup = q.warmup.ok_or(tollgate::QuotaError::InvalidParameter {
                    algorithm: "warm-up",
                    what: "a warm-up quota without its warmup parameters",
                })?;
                WarmUp::with_cold_factor(quota_of(q)?, warmup.period, warmup.cold_factor)?.into()
            }
            // Validation gives every calendar quota a calendar unit.
            AlgorithmKind::Calendar | AlgorithmKind::Mixed => {
                let unit =
                    q.unit
                        .and_then(calendar_unit)
                        .ok_or(tollgate::QuotaError::Overflow {
                            algorithm: "calendar",
                            what: "a calendar window without a calendar unit",
                        })?;
                CalendarWindow::new(unit, q.requests_per_unit)?.into()
            }
        })
    };
    let limits = kinds
        .iter()
        .zip(quotas)
        .map(|(kind, q)| one(*kind, q))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BuiltAlgorithm::Mixed(AllOf::new(limits)?))
}

/// The algorithm of `quotas`, each run by its own `kinds[i]`: one
/// algorithm type when they share one (and it is not a calendar window),
/// else [`build_mixed`].
pub(crate) fn build_each(
    kinds: &[AlgorithmKind],
    quotas: &[QuotaConfig],
) -> Result<BuiltAlgorithm, tollgate::QuotaError> {
    match kinds.first() {
        Some(&first)
            if first != AlgorithmKind::Calendar && kinds.iter().all(|&kind| kind == first) =>
        {
            build_algorithm(first, quotas)
        }
        _ => build_mixed(kinds, quotas),
    }
}

impl Limits {
    /// Builds `kind` over `quotas` (what a rule of the file does; the
    /// service builds a descriptor's `limit` override with it).
    ///
    /// # Errors
    ///
    /// A quota the core refuses (a limit of 0, an empty list).
    pub fn new(
        kind: AlgorithmKind,
        quotas: Vec<QuotaConfig>,
    ) -> Result<Limits, tollgate::QuotaError> {
        let algorithm = build_algorithm(kind, &quotas)?;
        Ok(Limits { quotas, algorithm })
    }

    /// Builds each quota with its own algorithm (`kinds[i]` runs
    /// `quotas[i]`): one algorithm type when they share one, else the
    /// core's `AllOf<AnyAlgorithm>` (see the [`config`](super) docs).
    ///
    /// # Errors
    ///
    /// A quota the core refuses (a limit of 0, an empty list).
    pub fn each(
        kinds: &[AlgorithmKind],
        quotas: Vec<QuotaConfig>,
    ) -> Result<Limits, tollgate::QuotaError> {
        let algorithm = build_each(kinds, &quotas)?;
        Ok(Limits { quotas, algorithm })
    }
}

/// The limit of a `rate_limit:` block.
pub(super) fn limit_of(
    (unlimited, name, quota): (bool, Option<String>, QuotaYaml),
) -> Result<Option<LimitConfig>, String> {
    if unlimited {
        if !quota.is_empty() {
            return Err(
                "rate_limit: should not specify a unit, period, requests_per_unit or algorithm when unlimited"
                    .into(),
            );
        }
        return Ok(Some(LimitConfig::Unlimited { name }));
    }
    if quota.requests_per_unit == Some(0) {
        // envoyproxy/ratelimit's "block list" entry: always over the limit.
        let (_, mut blocked) = QuotaYaml {
            requests_per_unit: Some(1),
            ..quota
        }
        .validate()
        .map_err(|error| format!("rate_limit.{error}"))?;
        blocked.requests_per_unit = 0;
        return Ok(Some(LimitConfig::Blocked {
            name,
            quota: blocked,
        }));
    }
    let (kind, quota) = quota
        .validate()
        .map_err(|error| format!("rate_limit.{error}"))?;
    let algorithm =
        build_each(&[kind], &[quota]).map_err(|error| format!("rate_limit: {error}"))?;
    Ok(Some(LimitConfig::Limited {
        name,
        limits: Limits {
            quotas: vec![quota],
            algorithm,
        },
    }))
}
