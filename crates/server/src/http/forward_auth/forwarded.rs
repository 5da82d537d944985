//! The request a proxy forwards, as the actions read it: the client's
//! headers as sent to tollgate, Envoy's pseudo-headers (`:method`, `:path`,
//! `:authority`, `:scheme`) from the headers the domain believes
//! ([`ForwardedHeaders`]), the query string of the forwarded URI, and the
//! client address behind the trusted proxies.
//!
//! `:path` is the normal form of the forwarded path
//! ([`tollgate_tower::path`]) with its query as sent, so that a rule on
//! `/api` matches `/x/../api` and `/%61pi` as the upstream serves them.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use http::HeaderMap;
use tollgate_tower::path::{self, PathError};

use crate::config::actions::{ForwardAuthConfig, ForwardedHeaders, PathPolicy, TargetHeader};

/// A forwarded request.
#[derive(Debug)]
pub struct Forwarded<'a> {
    headers: &'a HeaderMap,
    method: Cow<'a, str>,
    authority: Option<Cow<'a, str>>,
    scheme: Option<Cow<'a, str>>,
    /// The forwarded path, normalised, and its query.
    path: String,
    /// The client address behind the trusted proxies.
    pub client: IpAddr,
    /// The URL's `source_cluster` parameter (the proxy's own name).
    pub source_cluster: Option<&'a str>,
    /// The URL's `destination_cluster` parameter (the upstream's name).
    pub destination_cluster: Option<&'a str>,
}

/// Why a forwarded request cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A believed header is missing: the proxy's configuration does not
    /// set it.
    Missing(String),
    /// A believed header is sent twice: the proxy appends to the client's
    /// header instead of replacing it.
    Repeated(String),
    /// The whole-URL header is not an `http(s)` URL.
    BadUrl(String),
    /// The path cannot be normalised, or is not normal under `path:
    /// refuse`.
    Path(PathError),
    /// `path: refuse` and the path is not normal.
    NotNormal,
}

impl Unreadable {
    /// Whether the proxy's configuration is at fault (not the client's
    /// request).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Unreadable::Missing(_) | Unreadable::Repeated(_) | Unreadable::BadUrl(_)
        )
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::Missing(name) => write!(
                f,
                "the proxy sent no {name} header: its configuration must set it (see forwarded_headers)"
            ),
            Unreadable::Repeated(name) => write!(
                f,
                "the proxy sent {name} more than once: its configuration must replace the client's header, not append to it"
            ),
            Unreadable::BadUrl(name) => write!(f, "{name} is not an http(s) URL"),
            Unreadable::Path(error) => write!(f, "bad path: {error}"),
            Unreadable::NotNormal => {
                f.write_str("bad path: not in normal form (the domain's path: refuse)")
            }
        }
    }
}

/// A header's value as text; bytes outside UTF-8 are replaced (never
/// dropped: a client must not make a header absent by its bytes).
fn text(value: &http::HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

/// The one value of believed header `name`.
fn believed<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<Cow<'a, str>>, Unreadable> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(Unreadable::Repeated(name.to_owned()));
    }
    Ok(first.map(text))
}

fn required<'a>(headers: &'a HeaderMap, name: &str) -> Result<Cow<'a, str>, Unreadable> {
    believed(headers, name)?.ok_or_else(|| Unreadable::Missing(name.to_owned()))
}

/// `scheme://authority/path?query` split into its three parts.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(end);
    Some((scheme, authority, target))
}

impl<'a> Forwarded<'a> {
    /// The request forwarded by the proxy at `peer` with `headers`.
    ///
    /// # Errors
    ///
    /// [`Unreadable`] when a believed header is missing or repeated, or the
    /// path cannot be matched safely.
    pub fn new(
        config: &ForwardAuthConfig,
        peer: IpAddr,
        headers: &'a HeaderMap,
        source_cluster: Option<&'a str>,
        destination_cluster: Option<&'a str>,
    ) -> Result<Forwarded<'a>, Unreadable> {
        let names: &ForwardedHeaders = &config.forwarded_headers;
        for name in names.believed() {
            believed(headers, name)?;
        }
        let method = required(headers, &names.method)?;
        let mut authority = names
            .host
            .as_deref()
            .map(|name| believed(headers, name))
            .transpose()?
            .flatten();
        let mut scheme = names
            .scheme
            .as_deref()
            .map(|name| believed(headers, name))
            .transpose()?
            .flatten();
        let target: Cow<'_, str> = match &names.target {
            TargetHeader::Uri(name) => {
                let uri = required(headers, name)?;
                match names
                    .prefix
                    .as_deref()
                    .map(|name| believed(headers, name))
                    .transpose()?
                    .flatten()
                {
                    Some(prefix) => Cow::Owned(format!("{}{uri}", prefix.trim_end_matches('/'))),
                    None => uri,
                }
            }
            TargetHeader::Url(name) => {
                let url = required(headers, name)?;
                let (url_scheme, url_authority, url_target) =
                    split_url(&url).ok_or_else(|| Unreadable::BadUrl(name.clone()))?;
                authority.get_or_insert_with(|| Cow::Owned(url_authority.to_owned()));
                scheme.get_or_insert_with(|| Cow::Owned(url_scheme.to_ascii_lowercase()));
                let target = if url_target.starts_with('/') {
                    url_target.to_owned()
                } else {
                    format!("/{url_target}")
                };
                Cow::Owned(target)
            }
        };
        let normal = path::normalize(&target).map_err(Unreadable::Path)?;
        if config.path == PathPolicy::Refuse && normal != target {
            return Err(Unreadable::NotNormal);
        }
        Ok(Forwarded {
            headers,
            method,
            authority,
            scheme,
            path: normal.into_owned(),
            client: config.client_ip.client_of(peer, headers),
            source_cluster,
            destination_cluster,
        })
    }

    /// Every value of header `name` (lower case), in order; a pseudo-header
    /// has at most one.
    pub fn header(&self, name: &str) -> Vec<Cow<'_, str>> {
        let pseudo = match name {
            ":method" => Some(Some(self.method.as_ref())),
            ":path" => Some(Some(self.path.as_str())),
            ":authority" | "host" => Some(self.authority.as_deref()),
            ":scheme" => Some(self.scheme.as_deref()),
            _ => None,
        };
        match pseudo {
            Some(value) => value.map(Cow::Borrowed).into_iter().collect(),
            None => self.headers.get_all(name).iter().map(text).collect(),
        }
    }

    /// The first value of query parameter `name` of the forwarded URI,
    /// decoded; `None` if absent.
    pub fn query(&self, name: &str) -> Option<String> {
        let query = self.path.split_once('?')?.1;
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }
}
