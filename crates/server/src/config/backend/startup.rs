//! `startup_retry:` — how long the server waits at start for a Redis that
//! does not answer (or refuses it), envoyproxy/ratelimit's
//! `REDIS_STARTUP_*`. The YAML reads
//!
//! ```yaml
//! backend:
//!   redis: redis://10.0.0.1:6379
//!   startup_retry: {initial: 1s, max: 30s, give_up_after: 10m}  # each optional
//! ```
//!
//! # Model
//!
//! The first try is made at once; each failed try is followed by a wait
//! that starts at `initial` and doubles up to `max`, each wait drawn
//! uniformly from `[initial, d]` for the computed `d` (so that pods started
//! together do not retry together; envoyproxy/ratelimit's backoff with its
//! jitter), until Redis answers `PING` with `PONG`
//! or, when `give_up_after` is set, that long has passed since the first
//! try (then the start fails with the last error). Without the section the
//! first failure stops the start (the YAML door's default: a file someone
//! writes is checked at once); from envoyproxy/ratelimit's environment the
//! server waits as its `REDIS_STARTUP_*` say, forever by default.
//!
//! Defaults: `initial` 1 s, `max` 30 s, `give_up_after` none (forever), as
//! envoyproxy/ratelimit's.

use std::time::Duration;

use serde::Deserialize;

/// How the start waits for Redis: the first try at once, then waits from
/// `initial` doubling up to `max`, until `PONG` or `give_up_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRetry {
    /// The first wait. By default, 1 s.
    pub initial: Duration,
    /// The longest wait. By default, 30 s.
    pub max: Duration,
    /// How long to keep trying from the first try; `None` forever. By
    /// default, forever.
    pub give_up_after: Option<Duration>,
}

impl Default for StartupRetry {
    fn default() -> StartupRetry {
        StartupRetry {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            give_up_after: None,
        }
    }
}

impl StartupRetry {
    /// The wait after the `attempt`-th failed try (0 for the first), before
    /// its jitter: `initial · 2^attempt`, at most `max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// [`backoff`](Self::backoff) with its jitter: uniform in `[initial, d]`.
    pub fn wait(&self, attempt: u32) -> Duration {
        let d = self.backoff(attempt);
        let low = self.initial.min(d);
        let spread = u64::try_from((d - low).as_nanos()).unwrap_or(u64::MAX);
        low + Duration::from_nanos(fastrand::u64(0..=spread))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartupYaml {
    #[serde(default)]
    initial: Option<String>,
    #[serde(default)]
    max: Option<String>,
    #[serde(default)]
    give_up_after: Option<String>,
}

impl StartupYaml {
    /// The section, checked.
    pub(super) fn read(self) -> Result<StartupRetry, String> {
        let defaults = StartupRetry::default();
        let duration = |field: &str, text: Option<String>, default: Duration| match text {
            None => Ok(default),
            Some(text) => super::super::parse_period(&text)
                .map_err(|error| format!("startup_retry.{field}: {error}")),
        };
        let initial = duration("initial", self.initial, defaults.initial)?;
        let max = duration("max", self.max, defaults.max.max(initial))?;
        if max < initial {
            return Err(format!(
                "startup_retry.max: must be at least initial ({initial:?})"
            ));
        }
        let give_up_after = match self.give_up_after {
            None => None,
            Some(text) => Some(duration("give_up_after", Some(text), Duration::ZERO)?),
        };
        Ok(StartupRetry {
            initial,
            max,
            give_up_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_max() {
        let retry = StartupRetry::default();
        let seconds: Vec<u64> = (0..7).map(|n| retry.backoff(n).as_secs()).collect();
        assert_eq!(seconds, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry.backoff(u32::MAX), retry.max);
        for attempt in 0..8 {
            let wait = retry.wait(attempt);
            let d = retry.backoff(attempt);
            assert!(
                wait >= retry.initial && wait <= d,
                "{wait:?} outside [{:?}, {d:?}]",
                retry.initial
            );
        }
    }
}
