//! What a domain's `forward_auth:` section believes about the forwarded
//! request: which headers name its method, URI, host and scheme
//! (`forwarded_headers:`), and what a path that is not normal gets (`path:`).
//!
//! ```yaml
//! forward_auth:
//!   forwarded_headers: x_forwarded # the default; or x_original, or a mapping
//!   path: normalize                # the default; or refuse
//! ```
//!
//! # `forwarded_headers`
//!
//! Exactly one header per field, never a chain of fallbacks: a proxy
//! overwrites the headers its recipe sets, and passes the client's other
//! headers on, so a second header tried when the first is absent would be
//! the client's to write.
//!
//! | value | method | path and query | host | scheme | who sends it |
//! |---|---|---|---|---|---|
//! | `x_forwarded` (default) | `X-Forwarded-Method` | `X-Forwarded-Uri` | `X-Forwarded-Host` | `X-Forwarded-Proto` | Caddy, Traefik, the nginx and HAProxy recipes |
//! | `x_original` | `X-Original-Method` | `X-Original-URL`'s | `X-Original-URL`'s | `X-Original-URL`'s | ingress-nginx |
//!
//! A mapping names the headers itself: `{method: x-method, uri: x-uri}`
//! (or `url:` for a whole URL instead of `uri:`), optionally `host:`,
//! `scheme:` and `prefix:` (a path prefix the proxy stripped before it
//! took the URI, such as Traefik's `StripPrefix` writes in
//! `X-Forwarded-Prefix`: believed only when named here).
//!
//! The method and URI headers are required on every call, and every
//! believed header must be sent at most once: a call without them, or with
//! one twice (a proxy that appends to the client's header instead of
//! replacing it), is refused as the proxy's misconfiguration.
//!
//! # `path`
//!
//! The path is normalised before any rule matches
//! ([`tollgate_tower::path`]: dot segments, unreserved percent-encodings,
//! repeated slashes; an ambiguous path is refused). `normalize` (the
//! default) matches rules against the normal form; `refuse` refuses every
//! path that is not already normal, for upstreams that serve paths as
//! sent.

use serde::Deserialize;

/// Which headers describe the forwarded request (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedHeaders {
    /// The method's header, lower case.
    pub method: String,
    /// The header with the path and query, or the whole URL.
    pub target: TargetHeader,
    /// The host's header (`None`: from the URL, or absent).
    pub host: Option<String>,
    /// The scheme's header (`None`: from the URL, or absent).
    pub scheme: Option<String>,
    /// The stripped prefix's header, when believed.
    pub prefix: Option<String>,
}

/// Where the forwarded request's target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetHeader {
    /// A header with the path and query (`X-Forwarded-Uri`).
    Uri(String),
    /// A header with the whole URL (`X-Original-URL`): scheme, host, path
    /// and query.
    Url(String),
}

impl TargetHeader {
    /// The header's name.
    pub fn name(&self) -> &str {
        match self {
            TargetHeader::Uri(name) | TargetHeader::Url(name) => name,
        }
    }
}

impl ForwardedHeaders {
    /// `x_forwarded`: Caddy, Traefik and the nginx and HAProxy recipes.
    pub fn x_forwarded() -> ForwardedHeaders {
        ForwardedHeaders {
            method: "x-forwarded-method".into(),
            target: TargetHeader::Uri("x-forwarded-uri".into()),
            host: Some("x-forwarded-host".into()),
            scheme: Some("x-forwarded-proto".into()),
            prefix: None,
        }
    }

    /// `x_original`: ingress-nginx.
    pub fn x_original() -> ForwardedHeaders {
        ForwardedHeaders {
            method: "x-original-method".into(),
            target: TargetHeader::Url("x-original-url".into()),
            host: None,
            scheme: None,
            prefix: None,
        }
    }

    /// Every header believed, for the once-only check.
    pub fn believed(&self) -> impl Iterator<Item = &str> {
        [Some(self.method.as_str()), Some(self.target.name())]
            .into_iter()
            .chain([
                self.host.as_deref(),
                self.scheme.as_deref(),
                self.prefix.as_deref(),
            ])
            .flatten()
    }
}

impl Default for ForwardedHeaders {
    fn default() -> ForwardedHeaders {
        ForwardedHeaders::x_forwarded()
    }
}

/// What a path that is not normal gets (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PathPolicy {
    /// Rules match the normal form. The default.
    #[default]
    Normalize,
    /// Refused unless already normal.
    Refuse,
}

/// `forwarded_headers:` as written.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum ForwardedHeadersYaml {
    Named(String),
    Mapping(ForwardedHeadersMapping),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ForwardedHeadersMapping {
    method: String,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    scheme: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
}

impl ForwardedHeadersYaml {
    pub(super) fn validate(self) -> Result<ForwardedHeaders, String> {
        let mapping = match self {
            ForwardedHeadersYaml::Named(name) => {
                return match name.as_str() {
                    "x_forwarded" => Ok(ForwardedHeaders::x_forwarded()),
                    "x_original" => Ok(ForwardedHeaders::x_original()),
                    other => Err(format!(
                        "forwarded_headers: '{other}' is not one of x_forwarded, x_original, or a mapping {{method, uri | url, host, scheme, prefix}}"
                    )),
                };
            }
            ForwardedHeadersYaml::Mapping(mapping) => mapping,
        };
        let header = |field: &str, name: String| -> Result<String, String> {
            http::HeaderName::from_bytes(name.as_bytes())
                .map(|header| header.as_str().to_owned())
                .map_err(|_| format!("forwarded_headers.{field}: '{name}' is not a header name"))
        };
        let optional =
            |field: &str, name: Option<String>| name.map(|n| header(field, n)).transpose();
        let target = match (mapping.uri, mapping.url) {
            (Some(uri), None) => TargetHeader::Uri(header("uri", uri)?),
            (None, Some(url)) => TargetHeader::Url(header("url", url)?),
            _ => {
                return Err(
                    "forwarded_headers: name exactly one of uri (path and query) and url (a whole URL)"
                        .into(),
                );
            }
        };
        if matches!(target, TargetHeader::Url(_)) && mapping.prefix.is_some() {
            return Err("forwarded_headers.prefix: only with uri (a url is whole)".into());
        }
        Ok(ForwardedHeaders {
            method: header("method", mapping.method)?,
            target,
            host: optional("host", mapping.host)?,
            scheme: optional("scheme", mapping.scheme)?,
            prefix: optional("prefix", mapping.prefix)?,
        })
    }
}

/// `path:` as written.
pub(super) fn path_policy(value: Option<&str>) -> Result<PathPolicy, String> {
    match value {
        None | Some("normalize") => Ok(PathPolicy::Normalize),
        Some("refuse") => Ok(PathPolicy::Refuse),
        Some(other) => Err(format!("path: '{other}' is not one of normalize, refuse")),
    }
}
