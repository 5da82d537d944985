//! The auth URL's parameters, read from its path only:
//! `/v1/forward-auth/{domain};deny_status=403;destination_cluster=web`.
//!
//! # Why in the path
//!
//! The query string of a forward-auth call is not the proxy's alone:
//! Caddy's `forward_auth` carries the client's query into it, so a client
//! could set `deny_status` or a cluster, or make every call with a query a
//! `400`. Parameters are therefore matrix parameters (RFC 3986 §3.3) of the
//! path's last segment, which every proxy's configuration writes whole, and
//! the query is never read: a client's `?deny_status=403` changes nothing
//! and refuses nothing. A query that names a parameter is logged once at
//! WARN, for configurations written for the query form.
//!
//! An unknown or repeated parameter, or a bad value, is a `400`: only the
//! proxy's configuration writes the path, so that is the operator's error,
//! and every proxy turns it into a refusal.

use std::sync::atomic::{AtomicBool, Ordering};

use percent_encoding::percent_decode_str;

use super::answer::DenyStatus;

/// The route's prefix; the domain segment follows it.
const PREFIX: &str = "/v1/forward-auth/";

/// The names a parameter may have.
const NAMES: &str = "deny_status, destination_cluster, source_cluster";

/// A forward-auth call's domain and parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// The domain whose rules decide.
    pub domain: String,
    /// The status a refusal is answered with (`deny_status`), when given.
    pub deny_status: Option<DenyStatus>,
    /// The value of Envoy's `destination_cluster` action.
    pub destination_cluster: Option<String>,
    /// The value of Envoy's `source_cluster` action.
    pub source_cluster: Option<String>,
}

fn decoded(raw: &str, what: &str) -> Result<String, String> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| format!("{what} '{raw}' is not UTF-8 once percent-decoded"))
}

impl Params {
    /// The parameters of the call to `path` (the URL's path, as sent).
    ///
    /// # Errors
    ///
    /// A message naming the parameter at fault.
    pub fn from_path(path: &str) -> Result<Params, String> {
        let segment = path
            .strip_prefix(PREFIX)
            .filter(|segment| !segment.contains('/'))
            .ok_or_else(|| format!("the path is {PREFIX}{{domain}}[;name=value...]"))?;
        let mut parts = segment.split(';');
        let domain = decoded(parts.next().unwrap_or_default(), "the domain")?;
        if domain.is_empty() {
            return Err("the domain is empty".into());
        }
        let mut params = Params {
            domain,
            deny_status: None,
            destination_cluster: None,
            source_cluster: None,
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in parts {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("';{part}' is not name=value ({NAMES})"))?;
            if seen.contains(&name) {
                return Err(format!("{name} is given twice"));
            }
            seen.push(name);
            let value = decoded(value, name)?;
            match name {
                "deny_status" => {
                    params.deny_status = Some(
                        value
                            .parse()
                            .ok()
                            .and_then(DenyStatus::parse)
                            .ok_or_else(|| format!("deny_status={value}: 429 or 403"))?,
                    );
                }
                "destination_cluster" => params.destination_cluster = Some(value),
                "source_cluster" => params.source_cluster = Some(value),
                other => {
                    return Err(format!(
                        "unknown parameter '{other}': the parameters are {NAMES}"
                    ));
                }
            }
        }
        Ok(params)
    }
}

/// Logs once, at WARN, a query that names a parameter: it is ignored.
pub fn warn_of_query_parameters(query: Option<&str>) {
    // Once per process: a reminder for the operator, which a client
    // (whose query Caddy may carry here) must not be able to flood.
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(query) = query else { return };
    let names_one = form_urlencoded::parse(query.as_bytes()).any(|(name, _)| {
        matches!(
            &*name,
            "deny_status" | "destination_cluster" | "source_cluster"
        )
    });
    // Relaxed: a flag with nothing else to order; two first warnings at
    // once would be harmless.
    if names_one && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            query,
            "forward-auth: the auth call's query string is ignored (a proxy may carry the client's own query there); write parameters in the path: /v1/forward-auth/{{domain}};deny_status=403"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_read_from_the_path() {
        assert_eq!(
            Params::from_path("/v1/forward-auth/api").unwrap(),
            Params {
                domain: "api".into(),
                deny_status: None,
                destination_cluster: None,
                source_cluster: None,
            }
        );
        assert_eq!(
            Params::from_path("/v1/forward-auth/a%3Bb;deny_status=403;destination_cluster=web%20one;source_cluster=edge").unwrap(),
            Params {
                domain: "a;b".into(),
                deny_status: Some(DenyStatus::Forbidden),
                destination_cluster: Some("web one".into()),
                source_cluster: Some("edge".into()),
            }
        );
    }

    #[test]
    fn bad_parameters_name_themselves() {
        for (path, needle) in [
            ("/v1/forward-auth/api;deny_status=500", "deny_status=500"),
            (
                "/v1/forward-auth/api;deny_status=403;deny_status=429",
                "twice",
            ),
            (
                "/v1/forward-auth/api;colour=red",
                "unknown parameter 'colour'",
            ),
            ("/v1/forward-auth/api;oops", "not name=value"),
            ("/v1/forward-auth/;deny_status=403", "domain is empty"),
            ("/v1/forward-auth/api;source_cluster=%FF", "not UTF-8"),
        ] {
            let error = Params::from_path(path).unwrap_err();
            assert!(error.contains(needle), "{path}: {error}");
        }
    }
}
