//! The environment as envoyproxy/ratelimit reads it (Go's `envconfig`):
//! a lookup of names, and Go's syntax for booleans and durations.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::go_syntax::parse_bool;
pub(super) use crate::config::go_syntax::parse_duration as go_duration;

use super::EnvError;

/// The variables the server is started with: injectable, so that tests
/// never change the process's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// The process's environment (variables that are not UTF-8 are left
    /// out: none of envoyproxy/ratelimit's names or values needs it).
    pub fn from_process() -> Env {
        std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    }

    /// The value of `name`; a variable set to the empty string counts as
    /// unset (its default applies).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    /// Whether `name` is set (to anything but the empty string).
    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// `name` as Go's `strconv.ParseBool` reads it, else `default`.
    pub(super) fn bool(&self, name: &str, default: bool) -> Result<bool, EnvError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => parse_bool(text).ok_or_else(|| {
                EnvError::new(name, format!("'{text}' is not a boolean (true or false)"))
            }),
        }
    }

    /// `name` as a whole number, else `default`.
    pub(super) fn number<T: std::str::FromStr>(
        &self,
        name: &str,
        default: T,
    ) -> Result<T, EnvError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => text
                .trim()
                .parse()
                .map_err(|_| EnvError::new(name, format!("'{text}' is not a valid number"))),
        }
    }

    /// `name` as a Go duration (`300ms`, `10s`, `1h30m`), else `default`.
    pub(super) fn duration(&self, name: &str, default: Duration) -> Result<Duration, EnvError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => go_duration(text).map_err(|error| EnvError::new(name, error)),
        }
    }

    /// `name`'s value, else `default`.
    pub(super) fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_owned()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Env {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Env {
        Env {
            vars: iter
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_as_go_reads_them() {
        assert_eq!(go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(go_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(go_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(go_duration("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(go_duration("150us"), Ok(Duration::from_micros(150)));
        for bad in ["", "10", "-1s", "1d", "s", "1h30"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn booleans_read_as_go_reads_them_and_empty_is_unset() {
        let env: Env = [("A", "True"), ("B", "0"), ("C", ""), ("D", "yes")]
            .into_iter()
            .collect();
        assert_eq!(env.bool("A", false), Ok(true));
        assert_eq!(env.bool("B", true), Ok(false));
        assert_eq!(env.bool("C", true), Ok(true));
        let error = env.bool("D", false).expect_err("yes");
        assert!(error.to_string().starts_with("D: "), "{error}");
    }
}
