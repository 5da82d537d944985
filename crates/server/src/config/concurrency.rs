//! A descriptor's `concurrency:`: at most N requests in flight per bucket.
//!
//! ```yaml
//! descriptors:
//!   - key: tenant                 # one bucket per tenant
//!     concurrency: 10             # at most 10 leases at once, 30 s TTL
//!   - key: report
//!     rate_limit: {unit: minute, requests_per_unit: 60}
//!     concurrency: {limit: 2, lease_ttl: 5m}
//! ```
//!
//! `concurrency: N` is `{limit: N}`; `lease_ttl` (`500ms`, `10s`, `5m`,
//! `2h`, `1d`) is how long a lease holds its slot unless released: the
//! longest a caller that dies keeps a slot. By default, 30 s (as
//! `tollgate-redis`'s leases). `limit` is 1 to 2³¹ − 1 (the core's
//! [`MAX_LIMIT`](tollgate::concurrency::MAX_LIMIT)). A descriptor may carry
//! `concurrency` beside `rate_limit` / `rate_limits` (both apply) or
//! alone. What the two APIs do with it is in [`crate::concurrency`].

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use super::parse_period;

/// The lease TTL when the file does not say.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// A descriptor's concurrency limit, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyConfig {
    /// Slots per bucket.
    pub limit: u32,
    /// How long a lease holds its slots unless released.
    pub lease_ttl: Duration,
}

/// `concurrency:` as written: a number, or a mapping.
pub(super) enum ConcurrencyYaml {
    Limit(u64),
    Full(FullYaml),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FullYaml {
    limit: Option<u64>,
    #[serde(default)]
    lease_ttl: Option<String>,
}

impl<'de> Deserialize<'de> for ConcurrencyYaml {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = ConcurrencyYaml;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of slots, or {limit: N, lease_ttl: 30s}")
            }

            fn visit_u64<E: de::Error>(self, limit: u64) -> Result<ConcurrencyYaml, E> {
                Ok(ConcurrencyYaml::Limit(limit))
            }

            fn visit_i64<E: de::Error>(self, limit: i64) -> Result<ConcurrencyYaml, E> {
                u64::try_from(limit)
                    .map(ConcurrencyYaml::Limit)
                    .map_err(|_| E::custom("the limit must be at least 1"))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ConcurrencyYaml, A::Error> {
                FullYaml::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ConcurrencyYaml::Full)
            }
        }
        d.deserialize_any(Either)
    }
}

impl ConcurrencyYaml {
    /// The checked limit; errors start with the field's path.
    pub(super) fn validate(self) -> Result<ConcurrencyConfig, String> {
        let (limit, ttl) = match self {
            ConcurrencyYaml::Limit(limit) => (Some(limit), None),
            ConcurrencyYaml::Full(full) => (full.limit, full.lease_ttl),
        };
        let limit = match limit {
            None => return Err("concurrency.limit: missing".into()),
            Some(limit) => u32::try_from(limit)
                .ok()
                .filter(|l| (1..=tollgate::concurrency::MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    format!(
                        "concurrency.limit: {limit} is not 1 to {}",
                        tollgate::concurrency::MAX_LIMIT
                    )
                })?,
        };
        let lease_ttl = match ttl {
            None => DEFAULT_LEASE_TTL,
            Some(text) => {
                parse_period(&text).map_err(|error| format!("concurrency.lease_ttl: {error}"))?
            }
        };
        Ok(ConcurrencyConfig { limit, lease_ttl })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, ConfigError};

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_yaml(Path::new("rules.yaml"), text)
    }

    fn concurrency(text: &str) -> Option<ConcurrencyConfig> {
        parse(text).unwrap().domains[0].descriptors[0].concurrency
    }

    #[test]
    fn a_number_or_a_mapping_beside_or_instead_of_a_rate_limit() {
        assert_eq!(
            concurrency("domain: d\ndescriptors:\n  - key: a\n    concurrency: 10\n"),
            Some(ConcurrencyConfig {
                limit: 10,
                lease_ttl: DEFAULT_LEASE_TTL
            })
        );
        let both = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    concurrency: {limit: 2, lease_ttl: 500ms}\n";
        assert_eq!(
            concurrency(both),
            Some(ConcurrencyConfig {
                limit: 2,
                lease_ttl: Duration::from_millis(500)
            })
        );
        assert!(
            parse(both).unwrap().domains[0].descriptors[0]
                .limit
                .is_some()
        );
        assert_eq!(
            concurrency(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
            ),
            None
        );
    }

    #[test]
    fn bad_concurrency_is_refused_at_its_descriptor_line() {
        for (text, field) in [
            ("    concurrency: 0\n", "concurrency.limit: 0 is not 1 to"),
            ("    concurrency: -3\n", "the limit must be at least 1"),
            (
                "    concurrency: 2147483648\n",
                "concurrency.limit: 2147483648",
            ),
            (
                "    concurrency: {lease_ttl: 1s}\n",
                "concurrency.limit: missing",
            ),
            (
                "    concurrency: {limit: 1, lease_ttl: 0s}\n",
                "concurrency.lease_ttl: must be longer than 0",
            ),
            (
                "    concurrency: {limit: 1, lease_ttl: soon}\n",
                "concurrency.lease_ttl:",
            ),
            (
                "    concurrency: {limit: 1, ttl: 1s}\n",
                "unknown field `ttl`",
            ),
            ("    concurrency: many\n", "a number of slots"),
        ] {
            let file = format!(
                "domain: d\ndescriptors:\n  - key: ok\n    concurrency: 1\n  - key: a\n{text}"
            );
            let error = parse(&file).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(field), "{text}: {message}");
            // The descriptor's line, or the field's own when serde
            // refuses the value itself.
            assert!(matches!(error.line(), Some(5 | 6)), "{text}: {message}");
        }
    }
}
