//! The request a proxy forwards, as the actions read it: the client's
//! headers as sent to tollgate, Envoy's pseudo-headers (`:method`, `:path`,
//! `:authority`, `:scheme`) from the proxy's `X-Forwarded-*` /
//! `X-Original-*` headers, the query string of the forwarded URI, and the
//! client address behind the trusted proxies.

use std::borrow::Cow;
use std::net::IpAddr;

use http::HeaderMap;

use crate::config::actions::ForwardAuthConfig;

/// Where each pseudo-header is read, first present wins (each proxy sends
/// its own: see the module docs of [`super`]).
const METHOD: &[&str] = &["x-forwarded-method", "x-original-method"];
const HOST: &[&str] = &["x-forwarded-host", "x-original-host"];
const URI: &[&str] = &["x-forwarded-uri", "x-original-uri"];
const SCHEME: &[&str] = &["x-forwarded-proto", "x-forwarded-scheme"];

/// A forwarded request.
#[derive(Debug)]
pub struct Forwarded<'a> {
    headers: &'a HeaderMap,
    method: Option<Cow<'a, str>>,
    authority: Option<Cow<'a, str>>,
    scheme: Option<Cow<'a, str>>,
    /// The forwarded URI: path and query.
    path: Option<String>,
    /// The client address behind the trusted proxies.
    pub client: IpAddr,
    /// The URL's `source_cluster` parameter (the proxy's own name).
    pub source_cluster: Option<&'a str>,
    /// The URL's `destination_cluster` parameter (the upstream's name).
    pub destination_cluster: Option<&'a str>,
}

/// A header's value as text; bytes outside UTF-8 are replaced (never
/// dropped: a client must not make a header absent by its bytes).
fn text(value: &http::HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

fn first<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<Cow<'a, str>> {
    names.iter().find_map(|name| headers.get(*name)).map(text)
}

impl<'a> Forwarded<'a> {
    /// The request forwarded by the proxy at `peer` with `headers`.
    pub fn new(
        config: &ForwardAuthConfig,
        peer: IpAddr,
        headers: &'a HeaderMap,
        source_cluster: Option<&'a str>,
        destination_cluster: Option<&'a str>,
    ) -> Forwarded<'a> {
        // ingress-nginx sends the whole URL: `scheme://host/path?query`.
        let original_url = headers.get("x-original-url").map(text);
        let (url_host, url_path) = match original_url
            .as_deref()
            .and_then(|url| url.split_once("://"))
        {
            Some((_, rest)) => match rest.find('/') {
                Some(at) => (Some(&rest[..at]), Some(&rest[at..])),
                None => (Some(rest), Some("/")),
            },
            None => (None, None),
        };
        let uri = first(headers, URI).or_else(|| url_path.map(|path| Cow::Owned(path.to_owned())));
        let authority =
            first(headers, HOST).or_else(|| url_host.map(|host| Cow::Owned(host.to_owned())));
        let prefix = headers
            .get("x-forwarded-prefix")
            .map(text)
            .map(|prefix| prefix.trim_end_matches('/').to_owned());
        let path = match (prefix, uri) {
            (Some(prefix), Some(uri)) => Some(format!("{prefix}{uri}")),
            (Some(prefix), None) => Some(prefix),
            (None, uri) => uri.map(Cow::into_owned),
        };
        Forwarded {
            headers,
            method: first(headers, METHOD),
            authority,
            scheme: first(headers, SCHEME),
            path,
            client: config.client_ip.client_of(peer, headers),
            source_cluster,
            destination_cluster,
        }
    }

    /// Every value of header `name` (lower case), in order; a pseudo-header
    /// has at most one.
    pub fn header(&self, name: &str) -> Vec<Cow<'_, str>> {
        let pseudo = match name {
            ":method" => Some(self.method.as_deref()),
            ":path" => Some(self.path.as_deref()),
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
        let query = self.path.as_deref()?.split_once('?')?.1;
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }
}
