//! The request sent, and the connections it is sent on.
//!
//! Connections are hyper 1's own client connections (`hyper::client::conn`),
//! managed here rather than by a pooling client, so that the load generator
//! knows at every instant which connection is free: that is what lets it
//! open another one rather than queue a request behind a slow one.
//! HTTP/1.1 connections are kept alive and carry one request at a time;
//! HTTP/2 (h2c, prior knowledge) carries up to `--streams` at once.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{
    CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, TE, TRANSFER_ENCODING,
    UPGRADE,
};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::stats::ErrorKind;
use crate::messages::UsageError;

/// The body type of every request.
pub type Body = Full<Bytes>;

/// Where to send, and what.
#[derive(Clone, Debug)]
pub struct Target {
    /// The URL as given, for reports.
    pub url: String,
    /// `host:port` to resolve.
    pub authority: String,
    /// The resolved address, once known.
    pub address: Option<SocketAddr>,
    method: Method,
    /// Origin-form for HTTP/1.1, absolute for HTTP/2 (its pseudo-headers
    /// come from the URI).
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// HTTP/2 with prior knowledge.
    pub http2: bool,
}

impl Target {
    /// Validates the URL, method, headers and body.
    pub fn new(
        url: &str,
        method: &str,
        headers: &[String],
        body: Option<&str>,
        http2: bool,
    ) -> Result<Target, UsageError> {
        let bad_url = |reason: &str| UsageError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|error: http::uri::InvalidUri| bad_url(&error.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(bad_url(
                    "https is not supported: loadgen speaks plain HTTP (h2c for HTTP/2)",
                ));
            }
            Some(other) => {
                return Err(bad_url(&format!(
                    "unsupported scheme {other:?}: use http://"
                )));
            }
            None => return Err(bad_url("no scheme: write it as http://host:port/path")),
        }
        let Some(host) = uri.host().filter(|host| !host.is_empty()) else {
            return Err(bad_url("no host"));
        };
        let host = host.to_owned();
        // A port written but not a valid one (`:99999`, `:0`) is refused, not
        // replaced by 80.
        let port = match written_port(uri.authority().map_or("", |a| a.as_str())) {
            None => 80,
            Some(written) => written
                .parse::<u16>()
                .ok()
                .filter(|&port| port > 0)
                .ok_or_else(|| {
                    bad_url(&format!(
                        "invalid port {written:?}: a port is a number from 1 to 65535"
                    ))
                })?,
        };
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let path = uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned();
        let uri = if http2 {
            uri
        } else {
            path.parse()
                .map_err(|error: http::uri::InvalidUri| bad_url(&error.to_string()))?
        };

        let method = Method::from_bytes(method.as_bytes()).map_err(|_| UsageError::BadMethod {
            method: method.to_owned(),
        })?;
        let mut header_map = HeaderMap::new();
        for header in headers {
            let bad = || UsageError::BadHeader {
                header: header.clone(),
            };
            let (name, value) = header.split_once(':').ok_or_else(bad)?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
            let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
            header_map.append(name, value);
        }
        let body = Bytes::from(body.unwrap_or_default().to_owned());
        refuse_conflicts(&header_map, body.len(), http2)?;
        if !http2 && !header_map.contains_key(HOST) {
            let host_header = match uri_port(url) {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            let value = HeaderValue::from_str(&host_header)
                .map_err(|_| bad_url("the host is not a valid header value"))?;
            header_map.insert(HOST, value);
        }
        Ok(Target {
            url: url.to_owned(),
            authority,
            address: None,
            method,
            uri,
            headers: header_map,
            body,
            http2,
        })
    }

    /// A fresh request.
    pub fn request(&self) -> Request<Body> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }

    /// Opens one connection.
    pub async fn connect(&self) -> Result<Sender, ErrorKind> {
        let address = self.address.ok_or("connect: address not resolved")?;
        let stream = TcpStream::connect(address)
            .await
            .map_err(|error| connect_error_kind(&error))?;
        // Requests are small and latency is what is measured: no Nagle delay.
        stream
            .set_nodelay(true)
            .map_err(|error| connect_error_kind(&error))?;
        let io = TokioIo::new(stream);
        if self.http2 {
            let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|error| hyper_error_kind(&error))?;
            tokio::spawn(connection);
            Ok(Sender::Http2(sender))
        } else {
            let (sender, connection) = http1::handshake(io)
                .await
                .map_err(|error| hyper_error_kind(&error))?;
            tokio::task::spawn_local(connection);
            Ok(Sender::Http1(sender))
        }
    }
}

/// Refuses a `-H` header that contradicts what loadgen itself sends, since
/// the target would answer 400 to every request of the run): the body's framing is loadgen's (`Content-Length` from `--body`, no
/// `Transfer-Encoding`), a request has one `Host`, and HTTP/2 forbids the
/// connection-specific headers of HTTP/1.1 (RFC 9113, section 8.2.2).
fn refuse_conflicts(headers: &HeaderMap, body_len: usize, http2: bool) -> Result<(), UsageError> {
    let conflict = |name: &HeaderName, reason: String| UsageError::ConflictingHeader {
        name: name.as_str().to_owned(),
        reason,
    };
    let lengths: Vec<&HeaderValue> = headers.get_all(CONTENT_LENGTH).iter().collect();
    match lengths[..] {
        [] => {}
        [length]
            if length
                .to_str()
                .ok()
                .and_then(|l| l.trim().parse::<usize>().ok())
                == Some(body_len) => {}
        [length] => {
            return Err(conflict(
                &CONTENT_LENGTH,
                format!(
                    "{:?} where the body (--body) is {body_len} bytes; loadgen sets it from the body",
                    length.to_str().unwrap_or("?")
                ),
            ));
        }
        _ => {
            return Err(conflict(
                &CONTENT_LENGTH,
                "given more than once; loadgen sets it from the body".to_owned(),
            ));
        }
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        return Err(conflict(
            &TRANSFER_ENCODING,
            "loadgen sends the body (--body) whole, with a Content-Length".to_owned(),
        ));
    }
    if headers.get_all(HOST).iter().count() > 1 {
        return Err(conflict(
            &HOST,
            "given more than once; a request has one Host".to_owned(),
        ));
    }
    if http2 {
        let connection_specific = [
            CONNECTION,
            UPGRADE,
            HeaderName::from_static(PROXY_CONNECTION_NAME),
            HeaderName::from_static(KEEP_ALIVE_NAME),
        ];
        for name in connection_specific {
            if headers.contains_key(&name) {
                return Err(conflict(
                    &name,
                    "HTTP/2 (--http2) forbids connection-specific headers".to_owned(),
                ));
            }
        }
        if headers
            .get_all(TE)
            .iter()
            .any(|te| !te.as_bytes().eq_ignore_ascii_case(b"trailers"))
        {
            return Err(conflict(
                &TE,
                "HTTP/2 (--http2) allows only `te: trailers`".to_owned(),
            ));
        }
    }
    Ok(())
}

const PROXY_CONNECTION_NAME: &str = "proxy-connection";
const KEEP_ALIVE_NAME: &str = "keep-alive";

/// The port as written in an authority (`user@host:port`, `[::1]:port`),
/// whether or not it is a valid one (`http` reads `:99999` as no port).
fn written_port(authority: &str) -> Option<&str> {
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, rest)| rest);
    let after_host = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port,
    };
    after_host.rsplit_once(':').map(|(_, port)| port)
}

/// The port as written in the URL, if any (for the `Host` header).
fn uri_port(url: &str) -> Option<u16> {
    url.parse::<Uri>().ok()?.port_u16()
}

/// One connection's sending half.
pub enum Sender {
    /// HTTP/1.1: one request at a time.
    Http1(http1::SendRequest<Body>),
    /// HTTP/2: cloneable, many streams.
    Http2(http2::SendRequest<Body>),
}

/// The kind of a failed connect, for the error counts.
pub fn connect_error_kind(error: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as Io;
    match error.kind() {
        Io::ConnectionRefused => "connect: refused",
        Io::ConnectionReset => "connect: reset",
        Io::TimedOut => "connect: timed out",
        Io::AddrNotAvailable => "connect: no local port available",
        _ => "connect: other",
    }
}

/// The kind of a failed exchange, for the error counts.
pub fn hyper_error_kind(error: &hyper::Error) -> ErrorKind {
    if error.is_incomplete_message() {
        "connection closed mid-response"
    } else if error.is_closed() {
        "connection closed"
    } else if error.is_canceled() {
        "canceled"
    } else if error.is_parse() || error.is_parse_status() {
        "invalid response"
    } else if error.is_timeout() {
        "timeout"
    } else if let Some(io) =
        std::error::Error::source(error).and_then(|source| source.downcast_ref::<std::io::Error>())
    {
        match io.kind() {
            std::io::ErrorKind::ConnectionReset => "connection reset",
            std::io::ErrorKind::BrokenPipe => "broken pipe",
            _ => "i/o error",
        }
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http1_requests_are_origin_form_with_a_host() {
        let target = Target::new(
            "http://example.test:8080/a?b=1",
            "POST",
            &["X-Id: 7".to_owned()],
            Some("hi"),
            false,
        )
        .unwrap();
        assert_eq!(target.authority, "example.test:8080");
        let request = target.request();
        assert_eq!(request.uri(), "/a?b=1");
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.headers()[HOST], "example.test:8080");
        assert_eq!(request.headers()["x-id"], "7");
    }

    /// Regression: `http://127.0.0.1:99999/` loaded port 80.
    #[test]
    fn a_port_written_invalid_is_refused_not_replaced_by_80() {
        for url in [
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:0/",
            "http://[::1]:65536/",
            "http://user@example.test:70000/",
        ] {
            assert!(
                matches!(
                    Target::new(url, "GET", &[], None, false),
                    Err(UsageError::BadUrl { .. })
                ),
                "{url}"
            );
        }
        for (url, authority) in [
            ("http://[::1]:8080/", "[::1]:8080"),
            ("http://[::1]/", "[::1]:80"),
            ("http://example.test:65535/", "example.test:65535"),
        ] {
            let target = Target::new(url, "GET", &[], None, false).unwrap();
            assert_eq!(target.authority, authority, "{url}");
        }
    }

    #[test]
    fn http2_requests_keep_the_absolute_uri() {
        let target = Target::new("http://127.0.0.1/", "GET", &[], None, true).unwrap();
        assert_eq!(target.authority, "127.0.0.1:80");
        assert_eq!(target.request().uri(), "http://127.0.0.1/");
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        let new = |url: &str, method: &str, header: &str| {
            let headers: Vec<String> = if header.is_empty() {
                vec![]
            } else {
                vec![header.to_owned()]
            };
            Target::new(url, method, &headers, None, false)
        };
        assert!(matches!(
            new("not a url", "GET", ""),
            Err(UsageError::BadUrl { .. })
        ));
        assert!(matches!(
            new("https://example.test/", "GET", ""),
            Err(UsageError::BadUrl { .. })
        ));
        assert!(matches!(
            new("ftp://example.test/", "GET", ""),
            Err(UsageError::BadUrl { .. })
        ));
        assert!(matches!(
            new("example.test/", "GET", ""),
            Err(UsageError::BadUrl { .. })
        ));
        assert!(matches!(
            new("http://x/", "G T", ""),
            Err(UsageError::BadMethod { .. })
        ));
        assert!(matches!(
            new("http://x/", "GET", "no colon"),
            Err(UsageError::BadHeader { .. })
        ));
        assert!(matches!(
            new("http://x/", "GET", "bad name: v"),
            Err(UsageError::BadHeader { .. })
        ));
    }
}
