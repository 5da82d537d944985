//! An OpenAI-compatible proxy with per-user token budgets: 10,000 tokens a
//! minute and 200,000 a day per user, charged from each response's `usage`,
//! streamed or not.
//!
//! ```text
//! cargo run -p tollgate-tower --example llm_proxy -- http://127.0.0.1:8000
//! curl -i http://127.0.0.1:3000/v1/chat/completions \
//!   -H 'authorization: Bearer demo-ada' -H 'content-type: application/json' \
//!   -d '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'
//! ```
//!
//! - **Who**: the user is the one the API key was issued to (a fixed table
//!   here, a database in a real service); an unknown key is refused `400`
//!   by the layer and never reaches the upstream.
//! - **Streams report their usage**: a `stream: true` request is sent on
//!   with `stream_options.include_usage` set, so that the final chunk
//!   carries the usage the budgets are charged (a stream without it would
//!   be charged the byte-count fallback).
//! - **Readable bodies**: the upstream is asked for `identity` encoding, so
//!   that the layer can read the `usage` it passes on.
//! - **Bounded requests**: a request body above 1 MiB is refused `413`
//!   before it is sent on.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use axum::routing::post;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tollgate::{ClockSource, Gcra, KeyedLimiter, Quota};
use tollgate_tower::budget::TokenBudgetLayer;
use tollgate_tower::{KeyError, KeyFn};

/// The largest request body sent on.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Tokens per user.
#[derive(Clone, Copy, Debug)]
struct Limits {
    per_minute: u64,
    per_day: u64,
}

/// The budgets, shared with whoever wants to read them.
#[derive(Clone)]
struct Budgets {
    minute: KeyedLimiter<String, Gcra>,
    day: KeyedLimiter<String, Gcra>,
}

#[derive(Clone)]
struct Upstream {
    client: Client<HttpConnector, Body>,
    base: Uri,
}

/// The API keys issued, and to whom.
fn key_store() -> HashMap<&'static str, &'static str> {
    HashMap::from([("demo-ada", "ada"), ("demo-bob", "bob")])
}

fn app(
    upstream: Uri,
    limits: Limits,
    clock: ClockSource,
) -> Result<(Router, Budgets), Box<dyn std::error::Error>> {
    let budget = |quota| -> Result<KeyedLimiter<String, Gcra>, tollgate::QuotaError> {
        Ok(KeyedLimiter::builder(Gcra::new(quota)?)
            .clock(clock.clone())
            .build())
    };
    let budgets = Budgets {
        minute: budget(Quota::per_minute(limits.per_minute)?)?,
        day: budget(Quota::per_day(limits.per_day)?)?,
    };
    let keys = key_store();
    let user = KeyFn::new(move |parts: &Parts| {
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| KeyError::missing("an API key (authorization: Bearer …)"))?;
        keys.get(bearer.trim())
            .map(|user| (*user).to_owned())
            .ok_or_else(|| KeyError::invalid("an API key this proxy issued"))
    });
    let layer = TokenBudgetLayer::builder(user)
        .budget("per-minute", budgets.minute.clone())
        .budget("per-day", budgets.day.clone())
        .build()?;
    let upstream = Upstream {
        client: Client::builder(TokioExecutor::new()).build_http(),
        base: upstream,
    };
    let router = Router::new()
        .route("/v1/chat/completions", post(proxy))
        .with_state(upstream)
        .layer(layer);
    Ok((router, budgets))
}

/// Sends the request on, a stream with `include_usage` set.
async fn proxy(State(upstream): State<Upstream>, request: Request<Body>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return status(StatusCode::PAYLOAD_TOO_LARGE);
    };
    let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return status(StatusCode::BAD_REQUEST);
    };
    if json["stream"] == serde_json::Value::Bool(true) {
        json["stream_options"]["include_usage"] = serde_json::Value::Bool(true);
    }
    let mut uri = upstream.base.clone().into_parts();
    uri.path_and_query = Some("/v1/chat/completions".parse().expect("a valid path"));
    let Ok(uri) = Uri::from_parts(uri) else {
        return status(StatusCode::INTERNAL_SERVER_ERROR);
    };
    let mut forward = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT_ENCODING, "identity");
    if let Some(auth) = parts.headers.get("x-upstream-authorization") {
        forward = forward.header(header::AUTHORIZATION, auth);
    }
    let Ok(forward) = forward.body(Body::from(json.to_string())) else {
        return status(StatusCode::BAD_REQUEST);
    };
    match upstream.client.request(forward).await {
        Ok(response) => response.map(Body::new),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let upstream: Uri = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8000".to_owned())
        .parse()?;
    let limits = Limits {
        per_minute: 10_000,
        per_day: 200_000,
    };
    let (app, _budgets) = app(upstream, limits, ClockSource::default())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::body::Bytes;
    use axum::http::StatusCode;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use tollgate::ManualClock;

    use super::*;

    /// What the fake upstream was asked: `(stream, include_usage)`.
    type Asked = Arc<Mutex<Vec<(bool, bool)>>>;

    /// An OpenAI-compatible upstream on a free loopback port: 5 prompt
    /// tokens, `max_tokens` completion tokens, streamed in three chunks
    /// with the usage last when asked to include it.
    async fn fake_upstream() -> (SocketAddr, Asked) {
        let asked: Asked = Arc::default();
        let seen = Arc::clone(&asked);
        let router = Router::new().route(
            "/v1/chat/completions",
            post(move |body: Bytes| {
                let seen = Arc::clone(&seen);
                async move {
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    let stream = request["stream"] == json!(true);
                    let include = request["stream_options"]["include_usage"] == json!(true);
                    seen.lock().unwrap().push((stream, include));
                    let completion = request["max_tokens"].as_u64().unwrap_or(10);
                    let usage = json!({
                        "prompt_tokens": 5,
                        "completion_tokens": completion,
                        "total_tokens": 5 + completion,
                    });
                    if !stream {
                        let body = json!({
                            "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                            "usage": usage,
                        });
                        return Response::builder()
                            .header("content-type", "application/json")
                            .body(Body::from(body.to_string()))
                            .unwrap();
                    }
                    let chunk = |content: &str| {
                        let chunk = json!({
                            "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"content": content}}],
                            "usage": null,
                        });
                        Ok::<_, Infallible>(format!("data: {chunk}\n\n"))
                    };
                    let mut events = vec![chunk("Hel"), chunk("lo")];
                    if include {
                        let last = json!({"object": "chat.completion.chunk", "choices": [], "usage": usage});
                        events.push(Ok(format!("data: {last}\n\n")));
                    }
                    events.push(Ok("data: [DONE]\n\n".to_owned()));
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(futures_util::stream::iter(events)))
                        .unwrap()
                }
            }),
        );
        (serve(router).await, asked)
    }

    async fn serve(router: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        address
    }

    struct Proxy {
        address: SocketAddr,
        client: Client<HttpConnector, Body>,
    }

    impl Proxy {
        /// A completion for `key` of `max_tokens`, streamed or not: the
        /// status, the headers and the body.
        async fn ask(&self, key: &str, max_tokens: u64, stream: bool) -> (Response<()>, Bytes) {
            let body = json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": max_tokens,
                "stream": stream,
            });
            let request = Request::post(format!("http://{}/v1/chat/completions", self.address))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            let response = self.client.request(request).await.unwrap();
            let (head, body) = response.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            (Response::from_parts(head, ()), bytes)
        }
    }

    fn left(budget: &KeyedLimiter<String, Gcra>, user: &str) -> u64 {
        budget.peek_n(user, 0).unwrap().remaining()
    }

    #[tokio::test]
    async fn budgets_are_charged_exactly_and_refuse_when_spent() {
        let (upstream, asked) = fake_upstream().await;
        let clock = ManualClock::new();
        let limits = Limits {
            per_minute: 1_000,
            per_day: 1_500,
        };
        let (router, budgets) = app(
            format!("http://{upstream}").parse().unwrap(),
            limits,
            clock.clone().into(),
        )
        .unwrap();
        let proxy = Proxy {
            address: serve(router).await,
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        let both = |user| (left(&budgets.minute, user), left(&budgets.day, user));

        // Not streamed: 5 + 300 tokens.
        let (response, body) = proxy.ask("demo-ada", 300, false).await;
        assert_eq!(response.status(), StatusCode::OK);
        let completion: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(completion["usage"]["total_tokens"], 305);
        assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "1000");
        assert_eq!(both("ada"), (695, 1_195));

        // Streamed: the proxy asks for the usage, the final chunk has it.
        let (response, body) = proxy.ask("demo-ada", 400, true).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).ends_with("data: [DONE]\n\n"));
        assert_eq!(asked.lock().unwrap()[1], (true, true));
        assert_eq!(both("ada"), (290, 790));
        assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "695");

        // 290 left is enough to start: charged all 605, the minute owes 315.
        let (response, _) = proxy.ask("demo-ada", 600, false).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(both("ada"), (0, 185));

        // Spent: refused here, the upstream not asked.
        let (response, body) = proxy.ask("demo-ada", 1, false).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(asked.lock().unwrap().len(), 3);
        let headers = response.headers();
        assert_eq!(headers["x-ratelimit-limit-tokens"], "1000");
        assert_eq!(headers["x-ratelimit-remaining-tokens"], "0");
        // (315 + 1) tokens at 0.06 s each.
        assert_eq!(headers["retry-after-ms"], "18960");
        assert_eq!(headers["retry-after"], "19");
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["error"]["code"], "rate_limit_exceeded");
        // Another user has the whole of both.
        let (response, _) = proxy.ask("demo-bob", 10, true).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(both("bob"), (985, 1_485));

        // A minute on, the minute has 685 and the day 186: the day binds,
        // and a request of 305 takes it into debt; the next is refused by it.
        clock.advance(Duration::from_secs(60));
        let (response, _) = proxy.ask("demo-ada", 300, false).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "186");
        assert_eq!(response.headers()["x-ratelimit-limit-tokens"], "1500");
        assert_eq!(both("ada"), (380, 0));
        let (response, body) = proxy.ask("demo-ada", 1, false).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["x-ratelimit-limit-tokens"], "1500");
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("per-day")
        );

        // An unknown key never reaches the upstream.
        let (response, _) = proxy.ask("made-up", 1, false).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(asked.lock().unwrap().len(), 5);
    }
}
