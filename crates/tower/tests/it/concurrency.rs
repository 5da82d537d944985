//! The concurrency-limit layer on a real axum server with real hyper
//! clients: the slot is held through a streamed body and released at its
//! end or when the client goes away; 503, 429 + Retry-After and gRPC
//! `RESOURCE_EXHAUSTED`; stacked with the rate-limit layer. Every network
//! wait has a timeout.

use crate::support;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::NETWORK_TIMEOUT;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::timeout;
use tollgate::concurrency::{KeyedConcurrencyLimiter, Priority};
use tollgate::{Gcra, KeyedLimiter, ManualClock, Quota};
use tollgate_tower::concurrency::ConcurrencyLimitLayer;
use tollgate_tower::{Global, RateLimitLayer};

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    tokio::spawn(server.into_future());
    addr
}

/// A body that sends "start", then ends only when its gate opens (or its
/// sender is dropped).
struct GateBody {
    started: bool,
    gate: oneshot::Receiver<()>,
}

impl Body for GateBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if !self.started {
            self.started = true;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"start")))));
        }
        match Pin::new(&mut self.gate).poll(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Gates handed out to `/stream` responses, in order.
type Gates = Arc<Mutex<Vec<oneshot::Sender<()>>>>;

fn app(layer: ConcurrencyLimitLayer<Global>, gates: &Gates) -> Router {
    let gates = gates.clone();
    Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route(
            "/stream",
            get(move || {
                let gates = gates.clone();
                async move {
                    let (open, gate) = oneshot::channel();
                    gates.lock().unwrap().push(open);
                    AxumBody::new(GateBody {
                        started: false,
                        gate,
                    })
                }
            }),
        )
        .layer(layer)
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>()
}

async fn fetch(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    grpc: bool,
) -> http::Response<hyper::body::Incoming> {
    let mut request = Request::get(format!("http://{addr}{path}"));
    if grpc {
        request = request.header("content-type", "application/grpc");
    }
    timeout(
        NETWORK_TIMEOUT,
        client.request(request.body(Empty::new()).unwrap()),
    )
    .await
    .expect("no answer in time")
    .expect("request failed")
}

/// Reads the first frame of a streamed body.
async fn first_frame(body: &mut hyper::body::Incoming) -> Bytes {
    let frame = timeout(NETWORK_TIMEOUT, body.frame())
        .await
        .expect("no frame in time")
        .expect("body ended")
        .expect("body failed");
    frame.into_data().expect("a data frame")
}

/// Waits (bounded) until `check` holds: the server side reacts to the
/// client asynchronously.
async fn eventually(mut check: impl FnMut() -> bool) {
    timeout(NETWORK_TIMEOUT, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the condition never held");
}

#[tokio::test]
async fn the_slot_is_held_until_the_streamed_body_ends() {
    let limiter = KeyedConcurrencyLimiter::new(1).unwrap();
    let gates = Gates::default();
    let addr = serve(app(
        ConcurrencyLimitLayer::new(Global, limiter.clone()),
        &gates,
    ))
    .await;
    let client = client();

    let response = fetch(&client, addr, "/stream", false).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    assert_eq!(first_frame(&mut body).await, "start");
    // Headers sent, body still streaming: the slot is still held.
    assert_eq!(limiter.in_flight(&()), 1);
    let refused = fetch(&client, addr, "/hello", false).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().get("retry-after").is_none());

    // The body ends: the slot comes back.
    gates.lock().unwrap().remove(0).send(()).unwrap();
    let rest = timeout(NETWORK_TIMEOUT, body.collect())
        .await
        .unwrap()
        .unwrap();
    assert!(rest.to_bytes().is_empty());
    eventually(|| limiter.in_flight(&()) == 0).await;
    assert_eq!(
        fetch(&client, addr, "/hello", false).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_client_that_goes_away_gives_the_slot_back() {
    let limiter = KeyedConcurrencyLimiter::new(1).unwrap();
    let gates = Gates::default();
    let addr = serve(app(
        ConcurrencyLimitLayer::new(Global, limiter.clone()),
        &gates,
    ))
    .await;
    {
        let client = client();
        let mut body = fetch(&client, addr, "/stream", false).await.into_body();
        assert_eq!(first_frame(&mut body).await, "start");
        assert_eq!(limiter.in_flight(&()), 1);
        // The client drops the response and its connection mid-body.
    }
    eventually(|| limiter.in_flight(&()) == 0).await;
    assert_eq!(
        fetch(&client(), addr, "/hello", false).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn refusals_are_429_with_retry_after_or_grpc_resource_exhausted() {
    let limiter = KeyedConcurrencyLimiter::new(1).unwrap();
    let layer = ConcurrencyLimitLayer::builder(Global, limiter.clone())
        .too_many_requests(Duration::from_millis(2_500))
        .build();
    let gates = Gates::default();
    let addr = serve(app(layer, &gates)).await;
    let client = client();
    let mut body = fetch(&client, addr, "/stream", false).await.into_body();
    first_frame(&mut body).await;

    let refused = fetch(&client, addr, "/hello", false).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "3");

    let grpc = fetch(&client, addr, "/hello", true).await;
    assert_eq!(grpc.status(), StatusCode::OK);
    assert_eq!(grpc.headers()["content-type"], "application/grpc");
    assert_eq!(grpc.headers()["grpc-status"], "8");
    assert_eq!(grpc.headers()["grpc-retry-pushback-ms"], "2500");
    drop(gates);
}

#[tokio::test]
async fn critical_requests_get_the_reserved_slots() {
    // Limit 2, sheddable 50 %: one sheddable request fills its share.
    let limiter = KeyedConcurrencyLimiter::new(2).unwrap();
    let layer = ConcurrencyLimitLayer::builder(Global, limiter.clone())
        .priority(|parts| {
            if parts.uri.path() == "/stream" {
                Priority::Sheddable
            } else {
                Priority::Critical
            }
        })
        .build();
    let gates = Gates::default();
    let addr = serve(app(layer, &gates)).await;
    let client = client();
    let mut body = fetch(&client, addr, "/stream", false).await.into_body();
    first_frame(&mut body).await;
    let second = fetch(&client, addr, "/stream", false).await;
    assert_eq!(
        second.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "sheddable: 1 of 2"
    );
    assert_eq!(
        fetch(&client, addr, "/hello", false).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn waiting_requests_are_served_when_a_slot_frees() {
    let limiter = KeyedConcurrencyLimiter::builder(1)
        .max_delay(NETWORK_TIMEOUT)
        .build()
        .unwrap();
    let layer = ConcurrencyLimitLayer::builder(Global, limiter.clone())
        .wait(true)
        .build();
    let gates = Gates::default();
    let addr = serve(app(layer, &gates)).await;
    let client = client();
    let mut body = fetch(&client, addr, "/stream", false).await.into_body();
    first_frame(&mut body).await;
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { fetch(&client, addr, "/hello", false).await.status() })
    };
    eventually(|| limiter.in_flight(&()) == 1 && gates.lock().unwrap().len() == 1).await;
    gates.lock().unwrap().remove(0).send(()).unwrap();
    drop(body);
    assert_eq!(waiting.await.unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn stacked_under_the_rate_limit_a_rate_limited_request_takes_no_slot() {
    let concurrency = KeyedConcurrencyLimiter::new(1).unwrap();
    let clock = ManualClock::new();
    let rate = KeyedLimiter::builder(Gcra::new(Quota::per_minute(1).unwrap()).unwrap())
        .clock(clock.clone())
        .build();
    let gates = Gates::default();
    let app = app(
        ConcurrencyLimitLayer::new(Global, concurrency.clone()),
        &gates,
    )
    .layer(RateLimitLayer::new(Global, rate));
    let addr = serve(app).await;
    let client = client();
    let mut body = fetch(&client, addr, "/stream", false).await.into_body();
    first_frame(&mut body).await;
    assert_eq!(concurrency.in_flight(&()), 1);
    // The rate limit answers first: 429 from it, not 503 from the slots.
    let limited = fetch(&client, addr, "/hello", false).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(concurrency.in_flight(&()), 1);
    // A new minute: the rate limit admits, the slot is taken: 503.
    clock.advance(Duration::from_secs(60));
    let busy = fetch(&client, addr, "/hello", false).await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    gates.lock().unwrap().remove(0).send(()).unwrap();
    drop(body);
    eventually(|| concurrency.in_flight(&()) == 0).await;
}
