//! `compact_keys`: the capacity of the in-memory backend's compact tables,
//! which turns them on.
//!
//! # Model
//!
//! Off by default. With a capacity of N keys, the in-memory backend serves
//! every rule that qualifies (one value-less entry under one GCRA or fixed
//! window: `backend/compact.rs` says which, and what such a rule gives up)
//! from the core's compact keyed tables, one table per kind of value
//! (IPv4, IPv6, numeric id) per rule, each sized for N live keys when the
//! rule meets its first value of that kind: 13.7 bytes a key for IPv4,
//! 27.4 for IPv6, 18.3 for ids, resident from then on whatever the
//! traffic. The decisions are the keyed map's; only the memory changes.
//!
//! # Where it is set (each door has one place; the flag wins)
//!
//! - the file: `server: {compact_keys: 10000000}`;
//! - envoyproxy/ratelimit's environment (`tollgate serve` without
//!   `--config`): `TOLLGATE_COMPACT_KEYS=10000000`, tollgate's own variable
//!   beside `TOLLGATE_REDIS_FAILURE_POLICY`;
//! - `tollgate serve --compact-keys 10000000`, over either.
//!
//! # Guarantees and decisions
//!
//! - **Refused, loudly, at start:** 0 (a table of no keys: write nothing
//!   to leave it off), anything that is not a whole decimal number, a
//!   capacity above [`MAX`] (2^32, every IPv4 address: the IPv4 table
//!   alone is then 59 GB; a larger figure is a typo, not a plan), and the
//!   setting under a Redis backend (its counts are on Redis: the setting
//!   would do nothing there, and a setting that does nothing is refused,
//!   not ignored).
//! - **A capacity the allocator cannot give** (within [`MAX`], beyond the
//!   machine's memory) is found when a rule builds its first table: that
//!   table is not built, its values stay in the rule's keyed map (decided
//!   exactly as before: never allowed, never lost), and a warning is
//!   logged once per table. It is not refused at start because the tables
//!   are built as the kinds of values arrive (an IPv4-only deployment
//!   never pays for the IPv6 table), so what one table costs is known
//!   only then. Size it within what the host holds: a table is written
//!   whole when built, so an overcommitting kernel cannot hide a size
//!   that does not fit.
//! - **A reload keeps it:** the `server:` section is read at start only
//!   (a change in the file is warned about and takes effect on restart),
//!   so every reload places rules with the capacity the server started
//!   with.

use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;

use serde::Deserialize;

/// The largest capacity accepted: 2^32 keys.
pub const MAX: usize = 1 << 32;

/// A capacity of compact tables, from 1 to [`MAX`] keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactKeys(NonZeroUsize);

impl CompactKeys {
    /// `keys`, if it is a capacity this module accepts (module docs).
    ///
    /// # Errors
    ///
    /// The reason, for 0 or a capacity above [`MAX`].
    pub fn new(keys: u64) -> Result<CompactKeys, String> {
        match usize::try_from(keys).ok().and_then(NonZeroUsize::new) {
            _ if keys > MAX as u64 => Err(format!(
                "{keys} keys is more than {MAX} (every IPv4 address, 59 GB for the IPv4 table alone): refused as a mistake"
            )),
            Some(keys) => Ok(CompactKeys(keys)),
            None => Err(
                "0 keys: a capacity is from 1 key up (leave the setting out to keep the compact tables off)"
                    .into(),
            ),
        }
    }

    /// The capacity of each table, in keys.
    pub fn get(self) -> usize {
        self.0.get()
    }
}

impl fmt::Display for CompactKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for CompactKeys {
    type Err = String;

    /// A whole decimal number of keys (`_` between digits allowed, as in
    /// `10_000_000`).
    fn from_str(text: &str) -> Result<CompactKeys, String> {
        let digits: String = text.chars().filter(|&c| c != '_').collect();
        let valid = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !text.starts_with('_')
            && !text.ends_with('_');
        let keys = valid
            .then(|| digits.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| format!("'{text}' is not a whole number of keys"))?;
        CompactKeys::new(keys)
    }
}

impl<'de> Deserialize<'de> for CompactKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CompactKeys, D::Error> {
        struct Keys;
        impl serde::de::Visitor<'_> for Keys {
            type Value = CompactKeys;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("compact_keys: a whole number of keys")
            }

            fn visit_u64<E: serde::de::Error>(self, keys: u64) -> Result<CompactKeys, E> {
                CompactKeys::new(keys).map_err(|why| E::custom(format!("compact_keys: {why}")))
            }

            fn visit_i64<E: serde::de::Error>(self, keys: i64) -> Result<CompactKeys, E> {
                let keys = u64::try_from(keys).map_err(|_| {
                    E::custom(format!(
                        "compact_keys: {keys} is not a whole number of keys"
                    ))
                })?;
                self.visit_u64(keys)
            }

            fn visit_u128<E: serde::de::Error>(self, keys: u128) -> Result<CompactKeys, E> {
                // Past u64: past MAX too.
                self.visit_u64(u64::try_from(keys).unwrap_or(u64::MAX))
            }
        }
        d.deserialize_any(Keys)
    }
}

/// The refusal of `compact_keys` under a Redis backend.
pub(crate) const NOT_ON_REDIS: &str = "compact_keys: sizes the in-memory backend's compact tables, and the counts of this backend are on Redis: remove it, or the backend section";

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn read(server: &str) -> Result<Config, String> {
        let text = format!(
            "server:\n  {server}\ndomain: d\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        );
        Config::from_yaml(Path::new("rules.yaml"), &text).map_err(|e| e.to_string())
    }

    #[test]
    fn off_by_default_and_read_from_the_server_section() {
        let config = read("reload_interval_ms: 0").unwrap();
        assert_eq!(config.server.compact_keys, None);
        let config = read("compact_keys: 10000000").unwrap();
        assert_eq!(
            config.server.compact_keys.map(CompactKeys::get),
            Some(10_000_000)
        );
        let config = read("compact_keys: 4294967296").unwrap();
        assert_eq!(config.server.compact_keys.map(CompactKeys::get), Some(MAX));
    }

    #[test]
    fn bad_capacities_are_refused_at_their_line() {
        for (value, needle) in [
            ("0", "0 keys: a capacity is from 1 key up"),
            ("-5", "-5 is not a whole number of keys"),
            ("4294967297", "4294967297 keys is more than 4294967296"),
            ("100000000000000000000", "is more than"),
            ("ten", "expected compact_keys: a whole number of keys"),
            ("1.5", "expected compact_keys: a whole number of keys"),
        ] {
            let error = read(&format!("compact_keys: {value}")).unwrap_err();
            assert!(error.starts_with("rules.yaml:2:"), "{value}: {error}");
            assert!(error.contains("compact_keys"), "{value}: {error}");
            assert!(error.contains(needle), "{value}: {error}");
        }
    }

    #[test]
    fn refused_under_a_redis_backend() {
        let error =
            read("compact_keys: 1000\nbackend:\n  redis: redis://127.0.0.1:6379").unwrap_err();
        assert!(error.contains(NOT_ON_REDIS), "{error}");
    }

    #[test]
    fn tollgate_compact_keys_from_envoyproxy_ratelimit_s_environment() {
        use crate::config::lyft_env::{Env, LyftSettings};
        let env = |pairs: &[(&str, &str)]| -> Env { pairs.iter().copied().collect() };
        let read = |pairs: &[(&str, &str)]| LyftSettings::read(&env(pairs));
        let memory = ("BACKEND_TYPE", "memory");
        let settings = read(&[memory]).expect("read");
        assert_eq!(settings.config.server.compact_keys, None);
        let settings = read(&[memory, ("TOLLGATE_COMPACT_KEYS", "10_000_000")]).expect("read");
        assert_eq!(
            settings.config.server.compact_keys.map(CompactKeys::get),
            Some(10_000_000)
        );
        let error = read(&[memory, ("TOLLGATE_COMPACT_KEYS", "0")]).unwrap_err();
        assert_eq!(error.variable(), "TOLLGATE_COMPACT_KEYS");
        assert!(error.to_string().contains("0 keys"), "{error}");
        // Redis is the environment's default backend.
        let error = read(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("TOLLGATE_COMPACT_KEYS", "1000"),
        ])
        .unwrap_err();
        assert_eq!(error.variable(), "TOLLGATE_COMPACT_KEYS");
        assert!(error.to_string().contains("counts are on Redis"), "{error}");
    }

    #[test]
    fn flags_and_variables_read_a_whole_number() {
        assert_eq!(
            "10_000_000".parse::<CompactKeys>().unwrap().get(),
            10_000_000
        );
        assert_eq!("1".parse::<CompactKeys>().unwrap().get(), 1);
        for (text, needle) in [
            ("0", "0 keys"),
            ("", "is not a whole number"),
            ("_1", "is not a whole number"),
            ("1_", "is not a whole number"),
            ("-1", "is not a whole number"),
            ("+1", "is not a whole number"),
            ("1e7", "is not a whole number"),
            (" 1", "is not a whole number"),
            ("99999999999999999999999", "is not a whole number"),
            ("4294967297", "is more than 4294967296"),
        ] {
            let error = text.parse::<CompactKeys>().unwrap_err();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }
}
