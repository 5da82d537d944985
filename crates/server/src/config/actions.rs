//! A domain's `forward_auth:` section: how a request forwarded by a reverse
//! proxy becomes descriptors, with **Envoy's route `rate_limits` actions**
//! (`envoy.config.route.v3.RateLimit`), their names, fields and meanings,
//! so that an Envoy route's `rate_limits:` list moves over unchanged.
//!
//! ```yaml
//! domains:
//!   - domain: api
//!     forward_auth:
//!       trusted_proxies: [10.0.0.0/8]      # the proxies that call tollgate
//!       client_address_header: x_forwarded_for
//!       forwarded_headers: x_forwarded     # which headers the proxy writes
//!       path: normalize                    # or refuse a path not normal
//!       deny_status: 429                   # where the auth URL names none
//!       rate_limits:                       # Envoy's list, unchanged
//!         - actions:
//!             - remote_address: {}
//!         - actions:
//!             - header_value_match:
//!                 descriptor_value: login
//!                 headers:
//!                   - name: ":path"
//!                     string_match: {prefix: /login}
//!             - remote_address: {}
//!     descriptors: [...]
//! ```
//!
//! What each action produces is in [`crate::http::forward_auth`]; this module only
//! reads and checks the section. `forwarded_headers:` and `path:` are in
//! [`super::forwarded_request`].
//!
//! # Decisions
//!
//! - Every action Envoy's route API has is read; those with nothing to read
//!   in a forwarded request are refused at their line with what to write
//!   instead: `metadata` and `dynamic_metadata` (no Envoy metadata),
//!   `extension`, and an entry's `limit` (its override comes from dynamic
//!   metadata). `stage` is accepted at 0 only (one filter, one stage);
//!   `disable_key` is refused (no Envoy runtime). `hits_addend: {number: N}`
//!   is the descriptor's cost.
//! - `trusted_proxies` is required as soon as an action reads the client
//!   address (`remote_address`, `masked_remote_address`): the peer of a
//!   forward-auth call is always a proxy, so without it every client would
//!   share the proxy's one bucket.
//! - Header names are matched case-insensitively (HTTP's rule); Envoy's
//!   pseudo-headers `:method`, `:path`, `:authority` and `:scheme` name the
//!   forwarded request's method, URI, host and scheme.
//! - `safe_regex` is a full match (RE2's, as Envoy), compiled at load: a bad
//!   pattern is refused at its line.

use std::net::IpAddr;

use ipnet::IpNet;
use regex::Regex;
use serde::Deserialize;
use tollgate_tower::ClientIp;
pub use tollgate_tower::ProxyHeader;

pub use super::forwarded_request::{ForwardedHeaders, PathPolicy, TargetHeader};
use super::forwarded_request::{ForwardedHeadersYaml, path_policy};
use crate::yaml::checked_mapping;

/// A domain's `forward_auth:` section, validated.
#[derive(Debug, Clone)]
pub struct ForwardAuthConfig {
    /// The networks of the proxies whose address headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The one header the trusted proxies write the client's address in.
    pub client_address_header: ProxyHeader,
    /// The tower layer's trusted-proxy walk over those two.
    pub client_ip: ClientIp,
    /// Which headers describe the forwarded request.
    pub forwarded_headers: ForwardedHeaders,
    /// What a path that is not normal gets.
    pub path: PathPolicy,
    /// The refusal's status (403 or 429) where the auth URL names none.
    pub deny_status: Option<u16>,
    /// Envoy's `rate_limits` entries: each produces at most one descriptor.
    pub rate_limits: Vec<RateLimitEntry>,
}

impl PartialEq for ForwardAuthConfig {
    fn eq(&self, other: &ForwardAuthConfig) -> bool {
        // Compiled regexes have no equality; the text they came from does.
        format!("{self:?}") == format!("{other:?}")
    }
}

/// One entry of Envoy's `rate_limits` list.
#[derive(Debug, Clone)]
pub struct RateLimitEntry {
    /// The actions, in order: each appends one entry to the descriptor.
    pub actions: Vec<Action>,
    /// The descriptor's cost (`hits_addend.number`); `None` is 1.
    pub hits_addend: Option<u64>,
}

/// One of Envoy's rate-limit actions.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Action {
    /// `("source_cluster", <the URL's source_cluster parameter>)`.
    SourceCluster,
    /// `("destination_cluster", <the URL's destination_cluster parameter>)`.
    DestinationCluster,
    /// `(descriptor_key, <the header's first value>)`.
    RequestHeaders {
        /// The header, lower case.
        header_name: String,
        /// The entry's key.
        descriptor_key: String,
        /// A missing header drops the entry (`true`) or the descriptor.
        skip_if_absent: bool,
    },
    /// `("remote_address", <the client address>)`.
    RemoteAddress,
    /// `("masked_remote_address", <the client's network>/<len>)`.
    MaskedRemoteAddress {
        /// IPv4 prefix length (32 by default).
        v4_prefix_mask_len: u8,
        /// IPv6 prefix length (128 by default).
        v6_prefix_mask_len: u8,
    },
    /// `(descriptor_key, descriptor_value)`, always.
    GenericKey {
        /// The entry's key (`generic_key` by default).
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
    },
    /// `(descriptor_key, descriptor_value)` when the headers match (or not).
    HeaderValueMatch {
        /// The entry's key (`header_match` by default).
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
        /// Append on a match (`true`, the default) or on a mismatch.
        expect_match: bool,
        /// Every matcher must match.
        headers: Vec<HeaderMatcher>,
    },
    /// `(descriptor_key, <the query parameter's value>)`.
    QueryParameters {
        /// The parameter's name.
        query_parameter_name: String,
        /// The entry's key.
        descriptor_key: String,
        /// A missing parameter drops the entry (`true`) or the descriptor.
        skip_if_absent: bool,
    },
    /// `(descriptor_key, descriptor_value)` when the query parameters match.
    QueryParameterValueMatch {
        /// The entry's key (`query_match` by default).
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
        /// Append on a match (`true`, the default) or on a mismatch.
        expect_match: bool,
        /// Every matcher must match.
        query_parameters: Vec<QueryParameterMatcher>,
    },
}

impl Action {
    /// Whether the action reads the client address.
    pub fn reads_client_address(&self) -> bool {
        matches!(
            self,
            Action::RemoteAddress | Action::MaskedRemoteAddress { .. }
        )
    }
}

/// Envoy's `HeaderMatcher`.
#[derive(Debug, Clone)]
pub struct HeaderMatcher {
    /// The header, lower case (a pseudo-header keeps its colon).
    pub name: String,
    /// What its value must be.
    pub rule: HeaderRule,
    /// Match when the rule does not.
    pub invert_match: bool,
    /// A missing header is matched as the empty string.
    pub treat_missing_header_as_empty: bool,
}

/// What a header's value must be.
#[derive(Debug, Clone)]
pub enum HeaderRule {
    /// Present (`true`) or absent (`false`).
    Present(bool),
    /// A string matcher.
    String(StringMatcher),
    /// An integer in `[start, end)`.
    Range {
        /// Inclusive.
        start: i64,
        /// Exclusive.
        end: i64,
    },
}

/// Envoy's `StringMatcher`.
#[derive(Debug, Clone)]
pub struct StringMatcher {
    /// How the value is compared.
    pub pattern: StringPattern,
    /// Compare ASCII case-insensitively (not for `safe_regex`).
    pub ignore_case: bool,
}

/// A string matcher's pattern.
#[derive(Debug, Clone)]
pub enum StringPattern {
    /// The whole value.
    Exact(String),
    /// A prefix.
    Prefix(String),
    /// A suffix.
    Suffix(String),
    /// A substring.
    Contains(String),
    /// A full match of the regex.
    Regex(Regex),
}

impl StringMatcher {
    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let fold = |s: &str| {
            if self.ignore_case {
                s.to_ascii_lowercase()
            } else {
                s.to_owned()
            }
        };
        match &self.pattern {
            StringPattern::Exact(p) => fold(value) == fold(p),
            StringPattern::Prefix(p) => fold(value).starts_with(&fold(p)),
            StringPattern::Suffix(p) => fold(value).ends_with(&fold(p)),
            StringPattern::Contains(p) => fold(value).contains(&fold(p)),
            StringPattern::Regex(regex) => regex.is_match(value),
        }
    }
}

/// Envoy's `QueryParameterMatcher`.
#[derive(Debug, Clone)]
pub struct QueryParameterMatcher {
    /// The parameter's name.
    pub name: String,
    /// Its value must match this; `None`: it must be present.
    pub string_match: Option<StringMatcher>,
}

// ---- the section as written ----

/// `forward_auth:` as read, checked within its mapping (its errors keep its
/// line).
pub(super) struct ForwardAuthSection(pub(super) ForwardAuthConfig);

impl<'de> Deserialize<'de> for ForwardAuthSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, ForwardAuthYaml, ForwardAuthSection>(d)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForwardAuthYaml {
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    client_address_header: Option<String>,
    #[serde(default)]
    forwarded_headers: Option<ForwardedHeadersYaml>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    deny_status: Option<u16>,
    rate_limits: Vec<RateLimitYaml>,
}

impl TryFrom<ForwardAuthYaml> for ForwardAuthSection {
    type Error = String;

    fn try_from(yaml: ForwardAuthYaml) -> Result<ForwardAuthSection, String> {
        let trusted_proxies = yaml
            .trusted_proxies
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let entry = entry.trim();
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("trusted_proxies[{i}]: '{entry}' is neither a network (10.0.0.0/8) nor an address")
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let client_address_header = match yaml.client_address_header.as_deref() {
            None | Some("x_forwarded_for") => ProxyHeader::XForwardedFor,
            Some("forwarded") => ProxyHeader::Forwarded,
            Some("x_real_ip") => ProxyHeader::XRealIp,
            Some(other) => {
                return Err(format!(
                    "client_address_header: '{other}' is not one of x_forwarded_for, forwarded, x_real_ip"
                ));
            }
        };
        let forwarded_headers = yaml.forwarded_headers.map_or_else(
            || Ok(ForwardedHeaders::default()),
            ForwardedHeadersYaml::validate,
        )?;
        let path = path_policy(yaml.path.as_deref())?;
        if let Some(code) = yaml.deny_status.filter(|code| !matches!(code, 403 | 429)) {
            return Err(format!("deny_status: {code}: 429 or 403"));
        }
        if yaml.rate_limits.is_empty() {
            return Err("rate_limits: needs at least one entry".into());
        }
        let mut rate_limits = Vec::with_capacity(yaml.rate_limits.len());
        for (i, entry) in yaml.rate_limits.into_iter().enumerate() {
            rate_limits.push(
                entry
                    .validate()
                    .map_err(|e| format!("rate_limits[{i}].{e}"))?,
            );
        }
        let reads_address = rate_limits
            .iter()
            .flat_map(|entry| &entry.actions)
            .any(Action::reads_client_address);
        if reads_address && trusted_proxies.is_empty() {
            return Err("trusted_proxies: required by remote_address / masked_remote_address: list the networks of the proxies that call tollgate (without them every client would share the proxy's one bucket)".into());
        }
        let client_ip =
            ClientIp::new(trusted_proxies.iter().copied()).header(client_address_header);
        Ok(ForwardAuthSection(ForwardAuthConfig {
            client_ip,
            trusted_proxies,
            client_address_header,
            forwarded_headers,
            path,
            deny_status: yaml.deny_status,
            rate_limits,
        }))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitYaml {
    #[serde(default)]
    stage: Option<u32>,
    #[serde(default)]
    disable_key: Option<String>,
    actions: Vec<ActionYaml>,
    #[serde(default)]
    limit: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    hits_addend: Option<HitsAddendYaml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HitsAddendYaml {
    number: u64,
}

impl RateLimitYaml {
    fn validate(self) -> Result<RateLimitEntry, String> {
        if self.stage.is_some_and(|stage| stage != 0) {
            return Err("stage: forward-auth has one stage, 0".into());
        }
        if self.disable_key.is_some() {
            return Err("disable_key: there is no Envoy runtime here; remove the entry".into());
        }
        if self.limit.is_some() {
            return Err(
                "limit: its override comes from Envoy's dynamic metadata, which a forwarded request has not"
                    .into(),
            );
        }
        if self.actions.is_empty() {
            return Err("actions: needs at least one action".into());
        }
        let hits_addend = match self.hits_addend {
            Some(HitsAddendYaml { number: 0 }) => {
                return Err("hits_addend.number: must be at least 1".into());
            }
            other => other.map(|h| h.number),
        };
        let actions = self
            .actions
            .into_iter()
            .enumerate()
            .map(|(j, action)| action.validate().map_err(|e| format!("actions[{j}].{e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RateLimitEntry {
            actions,
            hits_addend,
        })
    }
}

/// One action as written: exactly one field set (Envoy's `oneof`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionYaml {
    #[serde(default)]
    source_cluster: Option<Empty>,
    #[serde(default)]
    destination_cluster: Option<Empty>,
    #[serde(default)]
    request_headers: Option<RequestHeadersYaml>,
    #[serde(default)]
    remote_address: Option<Empty>,
    #[serde(default)]
    masked_remote_address: Option<MaskedYaml>,
    #[serde(default)]
    generic_key: Option<GenericKeyYaml>,
    #[serde(default)]
    header_value_match: Option<HeaderValueMatchYaml>,
    #[serde(default)]
    query_parameters: Option<QueryParametersYaml>,
    #[serde(default)]
    query_parameter_value_match: Option<QueryValueMatchYaml>,
    #[serde(default)]
    metadata: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    dynamic_metadata: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    extension: Option<serde::de::IgnoredAny>,
}

/// `{}`: an action without fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestHeadersYaml {
    header_name: String,
    descriptor_key: String,
    #[serde(default)]
    skip_if_absent: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaskedYaml {
    #[serde(default)]
    v4_prefix_mask_len: Option<u8>,
    #[serde(default)]
    v6_prefix_mask_len: Option<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GenericKeyYaml {
    descriptor_value: String,
    #[serde(default)]
    descriptor_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderValueMatchYaml {
    descriptor_value: String,
    #[serde(default)]
    descriptor_key: Option<String>,
    #[serde(default)]
    expect_match: Option<bool>,
    headers: Vec<HeaderMatcherYaml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParametersYaml {
    query_parameter_name: String,
    descriptor_key: String,
    #[serde(default)]
    skip_if_absent: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryValueMatchYaml {
    descriptor_value: String,
    #[serde(default)]
    descriptor_key: Option<String>,
    #[serde(default)]
    expect_match: Option<bool>,
    query_parameters: Vec<QueryParameterMatcherYaml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderMatcherYaml {
    name: String,
    #[serde(default)]
    exact_match: Option<String>,
    #[serde(default)]
    prefix_match: Option<String>,
    #[serde(default)]
    suffix_match: Option<String>,
    #[serde(default)]
    contains_match: Option<String>,
    #[serde(default)]
    safe_regex_match: Option<RegexYaml>,
    #[serde(default)]
    present_match: Option<bool>,
    #[serde(default)]
    range_match: Option<RangeYaml>,
    #[serde(default)]
    string_match: Option<StringMatcherYaml>,
    #[serde(default)]
    invert_match: bool,
    #[serde(default)]
    treat_missing_header_as_empty: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeYaml {
    start: i64,
    end: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegexYaml {
    regex: String,
    #[serde(default)]
    #[serde(rename = "google_re2")]
    _google_re2: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StringMatcherYaml {
    #[serde(default)]
    exact: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    suffix: Option<String>,
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    safe_regex: Option<RegexYaml>,
    #[serde(default)]
    ignore_case: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParameterMatcherYaml {
    name: String,
    #[serde(default)]
    string_match: Option<StringMatcherYaml>,
    #[serde(default)]
    present_match: Option<bool>,
}

fn non_empty(field: &str, value: String) -> Result<String, String> {
    if value.is_empty() {
        Err(format!("{field}: must not be empty"))
    } else {
        Ok(value)
    }
}

fn compile(regex: RegexYaml) -> Result<Regex, String> {
    // RE2's semantics in Envoy: the whole value must match.
    Regex::new(&format!("^(?:{})$", regex.regex))
        .map_err(|error| format!("regex: '{}' is no regex: {error}", regex.regex))
}

impl ActionYaml {
    fn validate(self) -> Result<Action, String> {
        let set = [
            self.source_cluster.is_some(),
            self.destination_cluster.is_some(),
            self.request_headers.is_some(),
            self.remote_address.is_some(),
            self.masked_remote_address.is_some(),
            self.generic_key.is_some(),
            self.header_value_match.is_some(),
            self.query_parameters.is_some(),
            self.query_parameter_value_match.is_some(),
            self.metadata.is_some(),
            self.dynamic_metadata.is_some(),
            self.extension.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count();
        if set != 1 {
            return Err(format!(
                "an action is exactly one of source_cluster, destination_cluster, request_headers, remote_address, masked_remote_address, generic_key, header_value_match, query_parameters, query_parameter_value_match ({set} given)"
            ));
        }
        if self.metadata.is_some() || self.dynamic_metadata.is_some() {
            return Err("metadata: a forwarded request carries no Envoy metadata; read what the proxy forwards with request_headers".into());
        }
        if self.extension.is_some() {
            return Err("extension: Envoy's extensions do not run here; use request_headers or header_value_match".into());
        }
        if self.source_cluster.is_some() {
            return Ok(Action::SourceCluster);
        }
        if self.destination_cluster.is_some() {
            return Ok(Action::DestinationCluster);
        }
        if self.remote_address.is_some() {
            return Ok(Action::RemoteAddress);
        }
        if let Some(r) = self.request_headers {
            return Ok(Action::RequestHeaders {
                header_name: non_empty("request_headers.header_name", r.header_name)?
                    .to_ascii_lowercase(),
                descriptor_key: non_empty("request_headers.descriptor_key", r.descriptor_key)?,
                skip_if_absent: r.skip_if_absent,
            });
        }
        if let Some(m) = self.masked_remote_address {
            let v4 = m.v4_prefix_mask_len.unwrap_or(32);
            let v6 = m.v6_prefix_mask_len.unwrap_or(128);
            if v4 > 32 {
                return Err("masked_remote_address.v4_prefix_mask_len: at most 32".into());
            }
            if v6 > 128 {
                return Err("masked_remote_address.v6_prefix_mask_len: at most 128".into());
            }
            return Ok(Action::MaskedRemoteAddress {
                v4_prefix_mask_len: v4,
                v6_prefix_mask_len: v6,
            });
        }
        if let Some(g) = self.generic_key {
            return Ok(Action::GenericKey {
                descriptor_key: g
                    .descriptor_key
                    .filter(|k| !k.is_empty())
                    .unwrap_or_else(|| "generic_key".into()),
                descriptor_value: non_empty("generic_key.descriptor_value", g.descriptor_value)?,
            });
        }
        if let Some(h) = self.header_value_match {
            let headers = h
                .headers
                .into_iter()
                .enumerate()
                .map(|(k, m)| {
                    m.validate()
                        .map_err(|e| format!("header_value_match.headers[{k}].{e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Action::HeaderValueMatch {
                descriptor_key: h
                    .descriptor_key
                    .filter(|k| !k.is_empty())
                    .unwrap_or_else(|| "header_match".into()),
                descriptor_value: non_empty(
                    "header_value_match.descriptor_value",
                    h.descriptor_value,
                )?,
                expect_match: h.expect_match.unwrap_or(true),
                headers,
            });
        }
        if let Some(q) = self.query_parameters {
            return Ok(Action::QueryParameters {
                query_parameter_name: non_empty(
                    "query_parameters.query_parameter_name",
                    q.query_parameter_name,
                )?,
                descriptor_key: non_empty("query_parameters.descriptor_key", q.descriptor_key)?,
                skip_if_absent: q.skip_if_absent,
            });
        }
        let Some(q) = self.query_parameter_value_match else {
            unreachable!("exactly one action field is set (counted above)");
        };
        let query_parameters = q
            .query_parameters
            .into_iter()
            .enumerate()
            .map(|(k, m)| {
                m.validate()
                    .map_err(|e| format!("query_parameter_value_match.query_parameters[{k}].{e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Action::QueryParameterValueMatch {
            descriptor_key: q
                .descriptor_key
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "query_match".into()),
            descriptor_value: non_empty(
                "query_parameter_value_match.descriptor_value",
                q.descriptor_value,
            )?,
            expect_match: q.expect_match.unwrap_or(true),
            query_parameters,
        })
    }
}

impl QueryParameterMatcherYaml {
    fn validate(self) -> Result<QueryParameterMatcher, String> {
        let name = non_empty("name", self.name)?;
        let string_match = match (self.string_match, self.present_match) {
            (Some(_), Some(_)) => return Err("give string_match or present_match, not both".into()),
            (Some(s), None) => Some(s.validate()?),
            (None, Some(false)) => return Err("present_match: false matches nothing".into()),
            (None, _) => None,
        };
        Ok(QueryParameterMatcher { name, string_match })
    }
}

impl StringMatcherYaml {
    fn validate(self) -> Result<StringMatcher, String> {
        let pattern = match (
            self.exact,
            self.prefix,
            self.suffix,
            self.contains,
            self.safe_regex,
        ) {
            (Some(p), None, None, None, None) => StringPattern::Exact(p),
            (None, Some(p), None, None, None) => StringPattern::Prefix(p),
            (None, None, Some(p), None, None) => StringPattern::Suffix(p),
            (None, None, None, Some(p), None) => StringPattern::Contains(p),
            (None, None, None, None, Some(r)) => {
                if self.ignore_case {
                    return Err("string_match.ignore_case: has no effect on safe_regex (Envoy refuses it too)".into());
                }
                StringPattern::Regex(compile(r)?)
            }
            _ => {
                return Err(
                    "string_match: exactly one of exact, prefix, suffix, contains, safe_regex"
                        .into(),
                );
            }
        };
        Ok(StringMatcher {
            pattern,
            ignore_case: self.ignore_case,
        })
    }
}

impl HeaderMatcherYaml {
    fn validate(self) -> Result<HeaderMatcher, String> {
        let plain = |pattern| {
            HeaderRule::String(StringMatcher {
                pattern,
                ignore_case: false,
            })
        };
        let mut rules = Vec::new();
        if let Some(p) = self.exact_match {
            rules.push(plain(StringPattern::Exact(p)));
        }
        if let Some(p) = self.prefix_match {
            rules.push(plain(StringPattern::Prefix(p)));
        }
        if let Some(p) = self.suffix_match {
            rules.push(plain(StringPattern::Suffix(p)));
        }
        if let Some(p) = self.contains_match {
            rules.push(plain(StringPattern::Contains(p)));
        }
        if let Some(r) = self.safe_regex_match {
            rules.push(plain(StringPattern::Regex(compile(r)?)));
        }
        if let Some(present) = self.present_match {
            rules.push(HeaderRule::Present(present));
        }
        if let Some(range) = self.range_match {
            if range.start >= range.end {
                return Err("range_match: start must be below end".into());
            }
            rules.push(HeaderRule::Range {
                start: range.start,
                end: range.end,
            });
        }
        if let Some(s) = self.string_match {
            rules.push(HeaderRule::String(s.validate()?));
        }
        let rule = match rules.len() {
            // Envoy: a matcher with no rule matches a present header.
            0 => HeaderRule::Present(true),
            1 => rules.remove(0),
            _ => return Err("give one of exact_match, prefix_match, suffix_match, contains_match, safe_regex_match, present_match, range_match, string_match".into()),
        };
        Ok(HeaderMatcher {
            name: non_empty("name", self.name)?.to_ascii_lowercase(),
            rule,
            invert_match: self.invert_match,
            treat_missing_header_as_empty: self.treat_missing_header_as_empty,
        })
    }
}
