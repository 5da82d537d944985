//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use tollgate::{Clock, Nanos};
use tower::{Service, ServiceExt};

/// The limiter's time from tokio's (paused) clock, so that `sleep` in the
/// wait mode moves both.
#[derive(Clone, Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        Nanos::from_duration(self.start.elapsed())
    }
}

/// An inner service that answers 200 "ok".
pub fn ok_service()
-> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new("ok".to_owned()))
    })
}

/// A request from `peer`, with axum's connection info attached.
pub fn from_peer(peer: &str) -> http::request::Builder {
    let ip: std::net::IpAddr = peer.parse().expect("test peer address");
    Request::get("/").extension(ConnectInfo(SocketAddr::new(ip, 40_000)))
}

/// Sends `request` through `service` once it is ready.
pub async fn send<S, B>(service: &mut S, request: Request<String>) -> Response<B>
where
    S: Service<Request<String>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    service
        .ready()
        .await
        .expect("service ready")
        .call(request)
        .await
        .expect("service answered")
}

/// A header as a string ("" when absent).
pub fn header<B>(response: &Response<B>, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().expect("ASCII header").to_owned())
        .unwrap_or_default()
}

/// The whole body.
pub async fn body<B>(response: Response<B>) -> Bytes
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
}

/// A bound on anything that waits on the network.
pub const NETWORK_TIMEOUT: Duration = Duration::from_secs(20);
