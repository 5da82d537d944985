//! Which bucket a request is counted in: the [`KeyExtractor`] trait and the
//! built-in keys that are not IP addresses (those are in [`ip`](crate::ip)).
//!
//! # Decisions
//!
//! - An extractor sees the request's [`Parts`] (method, URI, headers,
//!   extensions), never the body: a key must be known before the body is
//!   read, and no extractor can be generic over the body type.
//! - An extractor that cannot find its key says why with a [`KeyError`];
//!   the layer then answers as configured by
//!   [`OnMissingKey`](crate::OnMissingKey), by default with a rejection
//!   whose status follows the error's kind: `500` when the server is
//!   misconfigured (no connection info: never the client's fault), `400`
//!   when the client sent no key or a malformed one. No request is ever
//!   counted in a shared bucket because its own key was missing, unless the
//!   user asked for exactly that.
//! - A header key ([`HeaderKey`]) is copied into a `String`: a
//!   `HeaderValue` from hyper may share the whole read buffer, and holding
//!   one per key in a map of millions would hold those buffers too.

use std::borrow::Cow;
use std::fmt;
#[cfg(feature = "axum")]
use std::hash::{Hash, Hasher};

#[cfg(feature = "axum")]
use http::Method;
use http::request::Parts;
use http::{HeaderName, StatusCode};

/// Finds the key a request is limited under.
///
/// Implemented by the built-ins ([`Global`], [`PeerIp`](crate::PeerIp),
/// [`ClientIp`](crate::ClientIp), [`HeaderKey`], `MethodRoute` (with the
/// `axum` feature), [`KeyFn`]), by [`Or`], which tries one and then
/// another, and by pairs `(A, B)`, which key by both (route and client).
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key: what the backend counts by.
    type Key: Clone + Send + Sync + 'static;

    /// The key of `request`, or why there is none.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] when the request carries no usable key.
    fn extract(&self, request: &Parts) -> Result<Self::Key, KeyError>;

    /// This key, or `fallback`'s when this one is *missing* (not when it is
    /// malformed: a client that sends a bad API key is told so, not quietly
    /// limited by its address).
    fn or<F: KeyExtractor>(self, fallback: F) -> Or<Self, F>
    where
        Self: Sized,
    {
        Or {
            first: self,
            fallback,
        }
    }
}

/// Why a request has no key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError {
    kind: KeyErrorKind,
    detail: Cow<'static, str>,
}

/// What kind of [`KeyError`]: whose fault it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyErrorKind {
    /// The server did not attach the connection's address to the request
    /// (for axum: `into_make_service_with_connect_info` is missing). A
    /// configuration error: `500`.
    NoConnectionInfo,
    /// The client sent no key (no API key header): `400`.
    Missing,
    /// The client sent a key that cannot be used (not visible ASCII, too
    /// long): `400`.
    Invalid,
}

impl KeyError {
    /// The server attached no connection address; `detail` names what was
    /// looked for.
    pub fn no_connection_info(detail: impl Into<Cow<'static, str>>) -> KeyError {
        KeyError {
            kind: KeyErrorKind::NoConnectionInfo,
            detail: detail.into(),
        }
    }

    /// The client sent no key; `detail` names what was looked for.
    pub fn missing(detail: impl Into<Cow<'static, str>>) -> KeyError {
        KeyError {
            kind: KeyErrorKind::Missing,
            detail: detail.into(),
        }
    }

    /// The client sent a key that cannot be used; `detail` says why.
    pub fn invalid(detail: impl Into<Cow<'static, str>>) -> KeyError {
        KeyError {
            kind: KeyErrorKind::Invalid,
            detail: detail.into(),
        }
    }

    /// Whose fault it is.
    pub fn kind(&self) -> KeyErrorKind {
        self.kind
    }

    /// What was looked for, or what is wrong with it.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The status a rejection for this error carries: `500` for a server
    /// misconfiguration, `400` for the client's own mistake.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            KeyErrorKind::NoConnectionInfo => StatusCode::INTERNAL_SERVER_ERROR,
            KeyErrorKind::Missing | KeyErrorKind::Invalid => StatusCode::BAD_REQUEST,
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            KeyErrorKind::NoConnectionInfo => {
                write!(f, "no connection address on the request: {}", self.detail)
            }
            KeyErrorKind::Missing => write!(f, "missing rate-limit key: {}", self.detail),
            KeyErrorKind::Invalid => write!(f, "invalid rate-limit key: {}", self.detail),
        }
    }
}

impl std::error::Error for KeyError {}

/// One bucket for every request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract(&self, _: &Parts) -> Result<(), KeyError> {
        Ok(())
    }
}

/// The default longest header key accepted, in bytes.
pub const DEFAULT_MAX_HEADER_KEY_LEN: usize = 256;

/// The value of one request header, such as an API key.
///
/// The value must be present once, non-empty (surrounding whitespace
/// trimmed), visible ASCII, and at most
/// [`max_len`](HeaderKey::max_len) bytes; otherwise the request has a
/// [`KeyError`] (`Missing` for absent or empty, `Invalid` otherwise, also for
/// a header sent twice: which copy would count is ambiguous).
///
/// The value is not checked against anything: a client that makes up a new
/// key per request gets a new bucket per request. Where keys are issued
/// (API keys), look them up first with a [`KeyFn`] that answers
/// [`KeyError::missing`] for an unknown one, and fall back to the client's
/// address with [`or`](KeyExtractor::or), as `examples/axum.rs` does.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// The value of header `name`.
    pub fn new(name: HeaderName) -> HeaderKey {
        HeaderKey {
            name,
            max_len: DEFAULT_MAX_HEADER_KEY_LEN,
        }
    }

    /// The longest value accepted, in bytes. By default, 256.
    pub fn max_len(mut self, max_len: usize) -> HeaderKey {
        self.max_len = max_len;
        self
    }
}

impl KeyExtractor for HeaderKey {
    type Key = String;

    fn extract(&self, request: &Parts) -> Result<String, KeyError> {
        let mut values = request.headers.get_all(&self.name).iter();
        let Some(value) = values.next() else {
            return Err(KeyError::missing(format!("header {}", self.name)));
        };
        if values.next().is_some() {
            return Err(KeyError::invalid(format!(
                "header {} sent twice",
                self.name
            )));
        }
        let value = value
            .to_str()
            .map_err(|_| KeyError::invalid(format!("header {} is not visible ASCII", self.name)))?
            .trim();
        if value.is_empty() {
            return Err(KeyError::missing(format!("header {} is empty", self.name)));
        }
        if value.len() > self.max_len {
            return Err(KeyError::invalid(format!(
                "header {} is longer than {} bytes",
                self.name, self.max_len
            )));
        }
        Ok(value.to_owned())
    }
}

/// A key computed by a function of the request's parts.
///
/// ```
/// use tollgate_tower::{KeyError, KeyFn};
///
/// // By tenant, from the first path segment: /t/{tenant}/...
/// let tenant = KeyFn::new(|parts: &http::request::Parts| {
///     let mut segments = parts.uri.path().split('/').skip(1);
///     match (segments.next(), segments.next()) {
///         (Some("t"), Some(tenant)) if !tenant.is_empty() => Ok(tenant.to_owned()),
///         _ => Err(KeyError::missing("tenant path segment")),
///     }
/// });
/// # let _ = tenant;
/// ```
#[derive(Clone)]
pub struct KeyFn<F> {
    function: F,
}

impl<F> KeyFn<F> {
    /// A key computed by `function`.
    pub fn new<K>(function: F) -> KeyFn<F>
    where
        F: Fn(&Parts) -> Result<K, KeyError>,
    {
        KeyFn { function }
    }
}

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFn").finish_non_exhaustive()
    }
}

impl<F, K> KeyExtractor for KeyFn<F>
where
    F: Fn(&Parts) -> Result<K, KeyError> + Send + Sync + 'static,
    K: Clone + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, request: &Parts) -> Result<K, KeyError> {
        (self.function)(request)
    }
}

/// One extractor's key, or another's when the first is missing: see
/// [`KeyExtractor::or`].
#[derive(Clone, Debug)]
pub struct Or<A, B> {
    first: A,
    fallback: B,
}

/// The key of an [`Or`]: which extractor found it.
///
/// The two sides never share a bucket, even for equal values: an API key
/// that looks like an address is not that address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrKey<A, B> {
    /// The first extractor's key.
    First(A),
    /// The fallback's key.
    Fallback(B),
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    type Key = OrKey<A::Key, B::Key>;

    fn extract(&self, request: &Parts) -> Result<Self::Key, KeyError> {
        match self.first.extract(request) {
            Ok(key) => Ok(OrKey::First(key)),
            Err(error) if error.kind() == KeyErrorKind::Missing => {
                self.fallback.extract(request).map(OrKey::Fallback)
            }
            Err(error) => Err(error),
        }
    }
}

/// Two keys at once: a request counts in the bucket of the pair, such as
/// (route, client) for a quota per client on each endpoint. Both must be
/// found; the first error is the answer.
///
/// # Examples
///
/// ```
/// use axum::{Router, routing::{get, post}};
/// use tollgate::{Gcra, KeyedLimiter, Quota};
/// use tollgate_tower::{MethodRoute, PeerIp, RateLimitLayer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 5 per second per client on each endpoint: a client busy on
/// // `POST /upload` still has its whole quota on `GET /items`.
/// let per_route_and_client = KeyedLimiter::new(Gcra::new(Quota::per_second(5)?)?);
/// let app: Router = Router::new()
///     .route("/items", get(|| async { "[]" }))
///     .route("/upload", post(|| async { "ok" }))
///     .layer(RateLimitLayer::new((MethodRoute, PeerIp::new()), per_route_and_client));
/// # drop(app);
/// # Ok(())
/// # }
/// ```
impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for (A, B) {
    type Key = (A::Key, B::Key);

    fn extract(&self, request: &Parts) -> Result<Self::Key, KeyError> {
        Ok((self.0.extract(request)?, self.1.extract(request)?))
    }
}

/// The method and the matched route: one bucket per endpoint, such as
/// `POST /users/{id}` (axum's [`MatchedPath`](axum::extract::MatchedPath)).
///
/// A request that matched no route (axum's fallback, a 404) has no
/// `MatchedPath`; all of them share one bucket per method, with the route
/// `None`, so that a scan of random paths cannot create a key per path.
#[cfg(feature = "axum")]
#[derive(Clone, Copy, Debug, Default)]
pub struct MethodRoute;

/// The key of [`MethodRoute`].
#[cfg(feature = "axum")]
#[derive(Clone, Debug)]
pub struct RouteKey {
    method: Method,
    route: Option<axum::extract::MatchedPath>,
}

#[cfg(feature = "axum")]
impl RouteKey {
    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The route template, `None` for requests that matched no route.
    pub fn route(&self) -> Option<&str> {
        self.route.as_ref().map(axum::extract::MatchedPath::as_str)
    }
}

#[cfg(feature = "axum")]
impl PartialEq for RouteKey {
    fn eq(&self, other: &RouteKey) -> bool {
        self.method == other.method && self.route() == other.route()
    }
}

#[cfg(feature = "axum")]
impl Eq for RouteKey {}

#[cfg(feature = "axum")]
impl Hash for RouteKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.method.hash(state);
        self.route().hash(state);
    }
}

#[cfg(feature = "axum")]
impl KeyExtractor for MethodRoute {
    type Key = RouteKey;

    fn extract(&self, request: &Parts) -> Result<RouteKey, KeyError> {
        Ok(RouteKey {
            method: request.method.clone(),
            route: request
                .extensions
                .get::<axum::extract::MatchedPath>()
                .cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &[u8])]) -> Parts {
        let mut builder = http::Request::builder().uri("/t/acme/items");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_key_is_trimmed_and_checked() {
        let key = HeaderKey::new(HeaderName::from_static("x-api-key")).max_len(8);
        assert_eq!(
            key.extract(&parts(&[("x-api-key", b" abc ")])),
            Ok("abc".into())
        );
        let kind = |h: &[(&str, &[u8])]| key.extract(&parts(h)).unwrap_err().kind();
        assert_eq!(kind(&[]), KeyErrorKind::Missing);
        assert_eq!(kind(&[("x-api-key", b"  ")]), KeyErrorKind::Missing);
        assert_eq!(kind(&[("x-api-key", b"123456789")]), KeyErrorKind::Invalid);
        assert_eq!(
            kind(&[("x-api-key", b"caf\xc3\xa9")]),
            KeyErrorKind::Invalid
        );
        assert_eq!(
            kind(&[("x-api-key", b"a"), ("x-api-key", b"b")]),
            KeyErrorKind::Invalid
        );
    }

    #[test]
    fn or_falls_back_only_when_missing() {
        let key = HeaderKey::new(HeaderName::from_static("x-api-key"))
            .max_len(4)
            .or(KeyFn::new(|_: &Parts| Ok::<_, KeyError>(7u8)));
        assert_eq!(key.extract(&parts(&[])), Ok(OrKey::Fallback(7)));
        assert_eq!(
            key.extract(&parts(&[("x-api-key", b"k1")])),
            Ok(OrKey::First("k1".to_owned()))
        );
        let error = key
            .extract(&parts(&[("x-api-key", b"toolong")]))
            .unwrap_err();
        assert_eq!(error.kind(), KeyErrorKind::Invalid);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn method_route_without_a_match_shares_one_key() {
        let a = MethodRoute.extract(&parts(&[])).unwrap();
        let mut other = parts(&[]);
        other.uri = "/random/404".parse().unwrap();
        let b = MethodRoute.extract(&other).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.route(), None);
        assert_eq!(a.method(), Method::GET);
    }

    #[test]
    fn key_fn_sees_the_parts() {
        let tenant = KeyFn::new(|parts: &Parts| {
            let mut segments = parts.uri.path().split('/').skip(1);
            match (segments.next(), segments.next()) {
                (Some("t"), Some(tenant)) => Ok(tenant.to_owned()),
                _ => Err(KeyError::missing("tenant")),
            }
        });
        assert_eq!(tenant.extract(&parts(&[])), Ok("acme".to_owned()));
    }
}
