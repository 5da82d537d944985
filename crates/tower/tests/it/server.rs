//! A real axum server on 127.0.0.1 and real clients: hyper-util over
//! HTTP/1.1, and tonic over HTTP/2 for the gRPC answer (also with the layer
//! on a real `tonic::transport::Server`, feature `tonic`). The limiter runs
//! on a manual clock, so that the headers are exact whatever the machine's
//! speed; every network wait has a timeout.

use crate::support;

use std::future::IntoFuture;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::NETWORK_TIMEOUT;
use tokio::net::TcpListener;
use tokio::time::timeout;
use tollgate::{Gcra, KeyedLimiter, ManualClock, Quota};
use tollgate_tower::{PeerIp, RateLimitLayer};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

/// Serves `app` on a free loopback port with the peer address attached;
/// the server stops when the test's runtime does.
async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    tokio::spawn(server.into_future());
    addr
}

fn limiter(quota: Quota, clock: &ManualClock) -> KeyedLimiter<IpAddr> {
    KeyedLimiter::builder(Gcra::new(quota).unwrap())
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

#[tokio::test]
async fn a_real_server_answers_429_with_exact_headers() {
    let clock = ManualClock::new();
    let limiter = limiter(Quota::per_minute(2).unwrap(), &clock);
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .headers_on_success(true)
        .policy_quota(Quota::per_minute(2).unwrap())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .layer(layer);
    let addr = serve(app).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri: http::Uri = format!("http://{addr}/hello").parse().unwrap();
    let get = || async {
        let response = timeout(NETWORK_TIMEOUT, client.get(uri.clone()))
            .await
            .expect("no answer in time")
            .expect("request failed");
        let (parts, body) = response.into_parts();
        let body = timeout(NETWORK_TIMEOUT, body.collect())
            .await
            .expect("no body in time")
            .expect("body failed")
            .to_bytes();
        (parts.status, parts.headers, body)
    };
    let text = |headers: &HeaderMap, name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };

    let (status, headers, body) = get().await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
    assert_eq!(text(&headers, "ratelimit-policy"), "\"default\";q=2;w=60");
    // Admissions: no `t` (no decision says when the next permit frees up).
    assert_eq!(text(&headers, "ratelimit"), "\"default\";r=1");
    let (status, headers, _) = get().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text(&headers, "ratelimit"), "\"default\";r=0");
    let (status, headers, body) = get().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "retry-after"), "30");
    // `t`, the effective window, is the wait for the next permit.
    assert_eq!(text(&headers, "ratelimit"), "\"default\";r=0;t=30");
    assert_eq!(&body[..], b"too many requests: retry after 30 s\n");
    // The client was keyed by its loopback address.
    assert_eq!(limiter.len(), 1);
    assert!(
        limiter
            .peek(&"127.0.0.1".parse::<IpAddr>().unwrap())
            .is_denied()
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(get().await.0, StatusCode::OK);
}

/// A tonic codec of raw bytes: no protobuf, no protoc.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A gRPC method that always answers UNIMPLEMENTED (trailers-only): proof
/// that the request got through the limiter.
async fn unimplemented() -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static("12"));
    (StatusCode::OK, headers)
}

/// `status` is the layer's denial of a 1-per-minute quota: the code, the
/// message, and the retry metadata (`grpc-retry-pushback-ms` as given).
fn assert_limited_for_a_minute(status: &Status, pushback_ms: &str) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "too many requests: retry after 60 s");
    let metadata = status.metadata();
    assert_eq!(metadata.get("retry-after").unwrap().to_str().unwrap(), "60");
    assert_eq!(
        metadata
            .get("grpc-retry-pushback-ms")
            .unwrap()
            .to_str()
            .unwrap(),
        pushback_ms
    );
}

/// A raw tonic client connected to `addr`.
async fn grpc_client(addr: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = timeout(
        NETWORK_TIMEOUT,
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect(),
    )
    .await
    .expect("no connection in time")
    .expect("connect");
    tonic::client::Grpc::new(channel)
}

/// One `/test.Echo/Say` call with the body `hi`.
async fn say_hi(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
) -> Result<tonic::Response<Bytes>, tonic::Status> {
    timeout(NETWORK_TIMEOUT, grpc.ready())
        .await
        .expect("not ready in time")
        .expect("ready");
    let request = tonic::Request::new(Bytes::from_static(b"hi"));
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");
    timeout(
        NETWORK_TIMEOUT,
        grpc.unary::<Bytes, Bytes, _>(request, path, RawCodec),
    )
    .await
    .expect("no answer in time")
}

#[tokio::test]
async fn a_tonic_client_sees_resource_exhausted_with_retry_metadata() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        PeerIp::new(),
        limiter(Quota::per_minute(1).unwrap(), &clock),
    );
    let app = Router::new()
        .route("/test.Echo/Say", post(unimplemented))
        .layer(layer);
    let addr = serve(app).await;
    let mut grpc = grpc_client(addr).await;
    let mut call = async || {
        say_hi(&mut grpc)
            .await
            .expect_err("both calls end in a status")
    };
    let first = call().await;
    assert_eq!(first.code(), Code::Unimplemented, "{first:?}");
    let second = call().await;
    assert_limited_for_a_minute(&second, "60000");
    let metadata = second.metadata();
    assert_eq!(
        metadata.get("ratelimit").unwrap().to_str().unwrap(),
        "\"default\";r=0;t=60"
    );
}

#[tokio::test]
async fn a_real_server_settles_the_bytes_each_response_sent() {
    let clock = ManualClock::new();
    // 1 KiB permits: 60 per minute, bursts of 16.
    let limiter = limiter(
        Quota::per_minute(60).unwrap().with_burst(16).unwrap(),
        &clock,
    );
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .settle(tollgate_tower::settle::by_body_bytes(
            std::num::NonZeroU64::new(1024).unwrap(),
        ))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/file", get(|| async { vec![b'x'; 10 * 1024] }))
        .layer(layer);
    let addr = serve(app).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri: http::Uri = format!("http://{addr}/file").parse().unwrap();
    let get = || async {
        let response = timeout(NETWORK_TIMEOUT, client.get(uri.clone()))
            .await
            .expect("no answer in time")
            .expect("request failed");
        let status = response.status();
        let body = timeout(NETWORK_TIMEOUT, response.into_body().collect())
            .await
            .expect("no body in time")
            .expect("body failed")
            .to_bytes();
        (status, body.len())
    };
    let me: IpAddr = "127.0.0.1".parse().unwrap();

    // Admitted on 1 KiB, settled at 10 KiB once the body has been sent.
    assert_eq!(get().await, (StatusCode::OK, 10 * 1024));
    let settled = async {
        while limiter.peek(&me).remaining() != 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    timeout(NETWORK_TIMEOUT, settled)
        .await
        .expect("the response was never settled");
    // 6 KiB left: the next download is admitted and leaves a debt of 4 KiB,
    // which the client waits out at 1 KiB per second.
    assert_eq!(get().await, (StatusCode::OK, 10 * 1024));
    let in_debt = async {
        while limiter.peek(&me).retry_after() != Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    timeout(NETWORK_TIMEOUT, in_debt)
        .await
        .expect("the second response was never settled");
    assert_eq!(get().await.0, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(5));
    assert_eq!(get().await.0, StatusCode::OK);
}

/// A gRPC service whose one unary method echoes its request, through
/// tonic's own server machinery (served for every path: no router).
#[cfg(feature = "tonic")]
#[derive(Clone, Copy)]
struct Echo;

#[cfg(feature = "tonic")]
impl tower::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            Ok(grpc.unary(Say, request).await)
        })
    }
}

#[cfg(feature = "tonic")]
struct Say;

#[cfg(feature = "tonic")]
impl tonic::server::UnaryService<Bytes> for Say {
    type Response = Bytes;
    type Future = std::future::Ready<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

/// The layer on a real `tonic::transport::Server`, keyed by tonic's own
/// `TcpConnectInfo`, called by a real tonic client.
#[cfg(feature = "tonic")]
#[tokio::test]
async fn a_tonic_server_answers_resource_exhausted_with_retry_metadata() {
    use tonic::transport::server::{TcpConnectInfo, TcpIncoming};

    let clock = ManualClock::new();
    let limiter = limiter(Quota::per_minute(1).unwrap(), &clock);
    let layer = RateLimitLayer::new(
        PeerIp::new().with_extension::<TcpConnectInfo>(),
        limiter.clone(),
    );
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let server = tonic::transport::Server::builder()
        .layer(layer)
        .serve_with_incoming(Echo, TcpIncoming::from(listener));
    tokio::spawn(server);
    let mut grpc = grpc_client(addr).await;
    let first = say_hi(&mut grpc).await.expect("the first call is admitted");
    assert_eq!(first.into_inner(), Bytes::from_static(b"hi"));
    clock.advance(Duration::from_millis(500));
    let second = say_hi(&mut grpc)
        .await
        .expect_err("the second call is limited");
    assert_limited_for_a_minute(&second, "59500");
    // Keyed by the peer tonic attached: the loopback client.
    assert!(
        limiter
            .peek(&"127.0.0.1".parse::<IpAddr>().unwrap())
            .is_denied()
    );
    clock.advance(Duration::from_millis(59_500));
    let third = say_hi(&mut grpc)
        .await
        .expect("admitted again a minute later");
    assert_eq!(third.into_inner(), Bytes::from_static(b"hi"));
}

/// The budgets a user's streamed completion is charged against, and what
/// each response was settled at.
struct Streamed {
    budget: KeyedLimiter<String>,
    settled: std::sync::Arc<std::sync::Mutex<Vec<tollgate_tower::budget::Settled>>>,
    /// Body bytes the endless stream handed to the server.
    yielded: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A token budget (10,000 a minute, 50 reserved per request) in front of
/// `/stream`, an event stream of chunks every 5 ms that never ends (its
/// final `usage` chunk never comes), and `/done`, a completion of 300
/// tokens.
async fn serve_streams(clock: &ManualClock) -> (SocketAddr, Streamed) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use tollgate_tower::HeaderKey;
    use tollgate_tower::budget::TokenBudgetLayer;

    let budget = KeyedLimiter::builder(Gcra::new(Quota::per_minute(10_000).unwrap()).unwrap())
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    let settled = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&settled);
    let layer = TokenBudgetLayer::builder(HeaderKey::new(http::HeaderName::from_static("x-user")))
        .budget("per-minute", budget.clone())
        .estimate(|_| 50)
        .on_settled(move |settled| seen.lock().unwrap().push(*settled))
        .build()
        .unwrap();
    let yielded = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&yielded);
    let stream = move || {
        let counter = Arc::clone(&counter);
        let chunks = futures_util::stream::unfold(0_u64, move |n| {
            let counter = Arc::clone(&counter);
            async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let chunk = format!(
                    "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token {n}\"}}}}],\"usage\":null}}\n\n"
                );
                counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                Some((Ok::<_, std::convert::Infallible>(Bytes::from(chunk)), n + 1))
            }
        });
        async move {
            (
                [(http::header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(chunks),
            )
        }
    };
    let done = || async {
        (
            [(http::header::CONTENT_TYPE, "application/json")],
            r#"{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":200,"total_tokens":300}}"#,
        )
    };
    let app = Router::new()
        .route("/stream", post(stream))
        .route("/done", post(done))
        .layer(layer);
    let addr = serve(app).await;
    let streamed = Streamed {
        budget,
        settled,
        yielded,
    };
    (addr, streamed)
}

/// Waits until `n` responses have been settled.
async fn settled(streamed: &Streamed, n: usize) -> Vec<tollgate_tower::budget::Settled> {
    let wait = async {
        loop {
            let settled = streamed.settled.lock().unwrap().clone();
            if settled.len() >= n {
                return settled;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    timeout(NETWORK_TIMEOUT, wait)
        .await
        .expect("the response was never settled")
}

#[tokio::test]
async fn a_client_gone_mid_stream_pays_for_what_was_streamed_and_nothing_leaks() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let clock = ManualClock::new();
    let (addr, streamed) = serve_streams(&clock).await;
    // A real client: asks for a stream, reads three of its chunks, and
    // goes away (the connection closed mid-stream).
    let mut client = timeout(NETWORK_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .expect("no connection in time")
        .expect("connects");
    client
        .write_all(b"POST /stream HTTP/1.1\r\nhost: tollgate\r\nx-user: ada\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut read = Vec::new();
    let three_chunks = async {
        let mut buffer = [0_u8; 4096];
        while String::from_utf8_lossy(&read).matches("data: ").count() < 3 {
            let n = client.read(&mut buffer).await.expect("reads");
            assert!(n > 0, "the server closed the stream");
            read.extend_from_slice(&buffer[..n]);
        }
    };
    timeout(NETWORK_TIMEOUT, three_chunks)
        .await
        .expect("no chunks in time");
    let head = String::from_utf8_lossy(&read).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // Reserved before the response: its headers show the estimate taken.
    assert!(
        head.contains("x-ratelimit-remaining-tokens: 9950"),
        "{head}"
    );
    drop(client);

    // The server notices at its next write and drops the body: settled
    // once, cut, on the fallback (no usage came): one token per started 4
    // bytes the stream handed over, at least the reservation.
    let cut = settled(&streamed, 1).await[0];
    let yielded = streamed.yielded.load(std::sync::atomic::Ordering::SeqCst);
    assert!(!cut.complete);
    assert!(cut.fallback);
    assert_eq!(cut.usage, None);
    assert_eq!(cut.reserved, 50);
    assert_eq!(cut.tokens, yielded.div_ceil(4).max(50));
    // At least what the client read of the body (three chunks of 109
    // bytes or more), above the 50 reserved.
    assert!(cut.tokens >= (3 * 109_u64).div_ceil(4), "{cut:?}");
    assert_eq!(cut.unrecorded, 0);
    // Nothing more than the charge is held: no reservation is left over.
    let left = |budget: &KeyedLimiter<String>| budget.peek_n("ada", 0).unwrap().remaining();
    assert_eq!(left(&streamed.budget), 10_000 - cut.tokens);

    // The server lives on: the next request is admitted and charged its
    // usage exactly.
    let client = Client::builder(TokioExecutor::new()).build_http::<http_body_util::Full<Bytes>>();
    let request = http::Request::post(format!("http://{addr}/done"))
        .header("x-user", "ada")
        .body(http_body_util::Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = timeout(NETWORK_TIMEOUT, client.request(request))
        .await
        .expect("no answer in time")
        .expect("request failed");
    assert_eq!(response.status(), StatusCode::OK);
    timeout(NETWORK_TIMEOUT, response.into_body().collect())
        .await
        .expect("no body in time")
        .expect("body failed");
    let done = settled(&streamed, 2).await[1];
    assert!(done.complete && !done.fallback);
    assert_eq!(done.tokens, 300);
    assert_eq!(left(&streamed.budget), 10_000 - cut.tokens - 300);
}
