//! The upstream behind every proxy: `200 upstream` to anything, and a
//! record of each request that reached it, per client, so that a test
//! counts what got through rather than trusting the status its client saw.
//!
//! A test names its client with an `x-test` header (the proxies pass it on
//! untouched); the upstream keeps, per name, each request's method, path as
//! it arrived, body length and `RateLimit` lines. Its answer tells in
//! `x-upstream-saw-ratelimit` the `RateLimit` lines it was sent, joined by
//! ` | ` (what Caddy's `copy_headers` and Traefik's `authResponseHeaders`
//! copy: one line per limit would show as two joined values).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::routing::any;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

use crate::forward_auth::support::on_background;

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// The request target as the proxy sent it (not normalised).
    pub target: String,
    pub body_len: usize,
    /// Every `RateLimit` line, in order.
    pub ratelimit: Vec<String>,
}

fn record() -> &'static Mutex<HashMap<String, Vec<Seen>>> {
    static RECORD: OnceLock<Mutex<HashMap<String, Vec<Seen>>>> = OnceLock::new();
    RECORD.get_or_init(Mutex::default)
}

/// What reached the upstream from the client named `test`.
pub fn seen(test: &str) -> Vec<Seen> {
    record()
        .lock()
        .expect("record")
        .get(test)
        .cloned()
        .unwrap_or_default()
}

async fn serve(request: Request) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let ratelimit: Vec<String> = parts
        .headers
        .get_all("ratelimit")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let body = axum::body::to_bytes(body, 4 << 20).await;
    let saw = if ratelimit.is_empty() {
        "none".to_owned()
    } else {
        ratelimit.join(" | ")
    };
    if let Some(test) = parts.headers.get("x-test").and_then(|v| v.to_str().ok()) {
        let seen = Seen {
            method: parts.method.to_string(),
            target: parts.uri.to_string(),
            body_len: body.as_ref().map_or(0, |b| b.len()),
            ratelimit,
        };
        record()
            .lock()
            .expect("record")
            .entry(test.to_owned())
            .or_default()
            .push(seen);
    }
    axum::response::Response::builder()
        .header("x-upstream-saw-ratelimit", saw)
        .body(Body::from("upstream\n"))
        .expect("response")
}

/// Starts the upstream on a loopback port; its address. It reads up to
/// 1000 header lines (hyper's default is 100), so that what a proxy lets
/// through is what the tests see, not the upstream's own refusal.
pub fn start() -> SocketAddr {
    on_background(async {
        let app = Router::new().fallback(any(serve));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let service = TowerToHyperService::new(app.clone());
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .max_headers(1000)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    })
}
