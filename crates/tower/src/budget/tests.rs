//! The layer end to end on an in-process service: charged exactly, refused
//! when spent, streamed, cut, reserved and settled. The clock is stopped
//! (a manual clock), so every count is exact.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tollgate::{FixedWindow, Gcra, KeyedLimiter, ManualClock, Quota};
use tower::{Layer, Service, ServiceExt};

use super::*;
use crate::HeaderKey;
use crate::error::BuildError;

type Budget = KeyedLimiter<String, Gcra>;

fn budget(quota: Quota, clock: &ManualClock) -> Budget {
    KeyedLimiter::builder(Gcra::new(quota).unwrap())
        .clock(clock.clone())
        .build()
}

fn per_minute(limit: u64, clock: &ManualClock) -> Budget {
    budget(Quota::per_minute(limit).unwrap(), clock)
}

fn user() -> HeaderKey {
    HeaderKey::new(HeaderName::from_static("x-user"))
}

/// What a budget has left for `key`.
fn left(budget: &Budget, key: &str) -> u64 {
    budget.peek_n(key, 0).unwrap().remaining()
}

fn request(user: &str) -> Request<Full<Bytes>> {
    Request::post("/v1/chat/completions")
        .header("x-user", user)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

fn completion(prompt: u64, completion: u64) -> String {
    format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"hi"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}}}"#,
        prompt + completion
    )
}

type Chunks =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// An upstream answering each request with the next of `bodies`, as an
/// event stream of the given chunks when `sse`.
fn upstream(
    bodies: Vec<(StatusCode, bool, Vec<String>)>,
) -> impl Service<Request<Full<Bytes>>, Response = Response<Chunks>, Error = Infallible, Future: Send>
+ Clone {
    let bodies = Arc::new(Mutex::new(bodies.into_iter()));
    tower::service_fn(move |_: Request<Full<Bytes>>| {
        let (status, sse, chunks) = bodies.lock().unwrap().next().expect("no more answers");
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
            .into_iter()
            .map(|chunk| Ok(Frame::data(Bytes::from(chunk))))
            .collect();
        let content_type = if sse {
            "text/event-stream"
        } else {
            "application/json"
        };
        let response = Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(StreamBody::new(futures_util::stream::iter(frames)))
            .unwrap();
        async move { Ok::<_, Infallible>(response) }
    })
}

fn json(body: String) -> (StatusCode, bool, Vec<String>) {
    (StatusCode::OK, false, vec![body])
}

/// The event stream of a completion of `parts`, its final chunk with the
/// usage, every chunk cut in pieces of `piece` bytes.
fn stream(
    parts: &[&str],
    prompt: u64,
    completion: u64,
    piece: usize,
) -> (StatusCode, bool, Vec<String>) {
    let mut text = String::new();
    for part in parts {
        text += &format!(
            "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{part}\"}}}}],\"usage\":null}}\n\n"
        );
    }
    text += &format!(
        "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
        prompt + completion
    );
    let chunks = text
        .as_bytes()
        .chunks(piece)
        .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
        .collect();
    (StatusCode::OK, true, chunks)
}

async fn send<S>(service: &mut S, user: &str) -> (Response<()>, Bytes)
where
    S: Service<Request<Full<Bytes>>, Response = Response<BudgetBody<Chunks>>, Error = Infallible>,
{
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request(user))
        .await
        .unwrap();
    let (head, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (Response::from_parts(head, ()), bytes)
}

fn header<'a>(response: &'a Response<()>, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn a_json_usage_is_charged_and_a_spent_budget_refuses_until_its_debt_is_paid() {
    let clock = ManualClock::new();
    let minute = per_minute(100, &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .build()
        .unwrap();
    let mut service = layer.layer(upstream(vec![
        json(completion(20, 10)),
        json(completion(40, 20)),
        json(completion(60, 50)),
    ]));

    let (response, body) = send(&mut service, "ada").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body, completion(20, 10), "the body is passed on untouched");
    // The headers show the budget before this request's own charge.
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "100");
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "100");
    assert_eq!(header(&response, "x-ratelimit-reset-tokens"), "0s");
    assert_eq!(
        header(&response, "ratelimit-policy"),
        "\"per-minute\";q=100;w=60"
    );
    assert_eq!(header(&response, "ratelimit"), "\"per-minute\";r=100");
    assert_eq!(left(&minute, "ada"), 70);

    let (response, _) = send(&mut service, "ada").await;
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "70");
    // 0.6 s a token: 30 tokens spent are back in 18 s.
    assert_eq!(header(&response, "x-ratelimit-reset-tokens"), "18s");
    assert_eq!(left(&minute, "ada"), 10);
    // 10 left: admitted (check, then charge), and charged all 110 tokens.
    let (response, _) = send(&mut service, "ada").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(left(&minute, "ada"), 0);
    assert_eq!(
        left(&minute, "bob"),
        100,
        "another user's budget is untouched"
    );

    // 100 in debt: the next token is due in (100 + 1) × 0.6 s.
    let (response, body) = send(&mut service, "ada").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), "61");
    assert_eq!(header(&response, "retry-after-ms"), "60600");
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "0");
    assert_eq!(header(&response, "x-ratelimit-reset-tokens"), "2m0s");
    assert_eq!(header(&response, "ratelimit"), "\"per-minute\";r=0;t=61");
    assert_eq!(header(&response, "content-type"), "application/json");
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["type"], "tokens");
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per-minute")
    );

    clock.advance(Duration::from_millis(60_600));
    assert_eq!(left(&minute, "ada"), 1);
}

#[tokio::test]
async fn a_stream_is_passed_on_in_pieces_and_charged_its_final_chunk() {
    let clock = ManualClock::new();
    let minute = per_minute(1_000, &clock);
    let settled = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&settled);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .on_settled(move |settled: &Settled| seen.lock().unwrap().push(*settled))
        .build()
        .unwrap();
    let answer = stream(&["Hel", "lo", " there"], 17, 3, 7);
    let sent: String = answer.2.concat();
    let mut service = layer.layer(upstream(vec![answer]));

    let response = service
        .ready()
        .await
        .unwrap()
        .call(request("ada"))
        .await
        .unwrap();
    let mut body = response.into_body();
    let mut received = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        // One frame out per frame in, unchanged, and nothing charged
        // before the end.
        assert!(data.len() <= 7);
        if received.len() + data.len() < sent.len() {
            assert_eq!(left(&minute, "ada"), 1_000);
        }
        received.extend_from_slice(&data);
    }
    assert_eq!(received, sent.as_bytes());
    assert_eq!(left(&minute, "ada"), 980);
    drop(body);
    let settled = settled.lock().unwrap();
    assert_eq!(settled.len(), 1, "settled once");
    assert_eq!(settled[0].tokens, 20);
    assert!(!settled[0].fallback);
    assert!(settled[0].complete);
}

#[tokio::test]
async fn a_cut_stream_is_charged_what_was_sent() {
    let clock = ManualClock::new();
    let minute = per_minute(1_000, &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .build()
        .unwrap();
    let answer = stream(&["a long answer", "that goes on"], 10, 200, 40);
    let mut service = layer.layer(upstream(vec![answer]));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request("ada"))
        .await
        .unwrap();
    let mut body = response.into_body();
    // The client reads two frames (80 bytes) and goes away.
    for _ in 0..2 {
        body.frame().await.unwrap().unwrap();
    }
    drop(body);
    // No usage seen: one token per started 4 bytes sent.
    assert_eq!(left(&minute, "ada"), 980);
}

#[tokio::test]
async fn reserve_then_settle_gives_back_or_charges_the_difference() {
    let clock = ManualClock::new();
    let minute = per_minute(1_000, &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .estimate(|parts| {
            parts
                .headers
                .get("x-estimate")
                .and_then(|value| value.to_str().ok()?.parse().ok())
                .unwrap_or(0)
        })
        .build()
        .unwrap();
    let mut service = layer.layer(upstream(vec![
        json(completion(10, 30)),
        json(completion(100, 200)),
    ]));
    let with_estimate = |estimate: u64| {
        let mut request = request("ada");
        request
            .headers_mut()
            .insert("x-estimate", estimate.to_string().parse().unwrap());
        request
    };
    let response = service
        .ready()
        .await
        .unwrap()
        .call(with_estimate(100))
        .await
        .unwrap();
    // Reserved before the response: the headers show it taken.
    assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "900");
    assert_eq!(left(&minute, "ada"), 900);
    response.into_body().collect().await.unwrap();
    // Cost 40: 60 given back.
    assert_eq!(left(&minute, "ada"), 960);

    let response = service
        .ready()
        .await
        .unwrap()
        .call(with_estimate(100))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    // Cost 300: 200 more charged.
    assert_eq!(left(&minute, "ada"), 660);

    // An estimate above what is left is refused, and nothing is taken.
    let response = service
        .ready()
        .await
        .unwrap()
        .call(with_estimate(661))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(left(&minute, "ada"), 660);
    // One above the capacity can never fit: 413.
    let response = service
        .ready()
        .await
        .unwrap()
        .call(with_estimate(1_001))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["code"], "request_too_large");
    assert_eq!(left(&minute, "ada"), 660);
}

#[tokio::test]
async fn every_budget_is_charged_and_the_binding_one_is_shown() {
    let clock = ManualClock::new();
    let minute = per_minute(1_000, &clock);
    let day = budget(Quota::per_day(1_500).unwrap(), &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .budget("per-day", day.clone())
        .build()
        .unwrap();
    let mut service = layer.layer(upstream(vec![
        json(completion(400, 400)),
        json(completion(300, 300)),
        json(completion(100, 100)),
    ]));
    send(&mut service, "ada").await;
    assert_eq!((left(&minute, "ada"), left(&day, "ada")), (200, 700));
    let (response, _) = send(&mut service, "ada").await;
    // The minute has fewer left: it binds.
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "200");
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "1000");
    let policies: Vec<&str> = response
        .headers()
        .get_all("ratelimit-policy")
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    assert_eq!(
        policies,
        ["\"per-minute\";q=1000;w=60", "\"per-day\";q=1500;w=86400"]
    );
    assert_eq!((left(&minute, "ada"), left(&day, "ada")), (0, 100));

    // A minute later the minute has paid its debt of 400 and has 600; the
    // day has earned one token (one per 57.6 s) and binds.
    clock.advance(Duration::from_secs(60));
    let (response, _) = send(&mut service, "ada").await;
    assert_eq!(header(&response, "x-ratelimit-remaining-tokens"), "101");
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "1500");
    assert_eq!((left(&minute, "ada"), left(&day, "ada")), (400, 0));
    // The day is spent: refused by it, though the minute has 400 left.
    let (response, body) = send(&mut service, "ada").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "x-ratelimit-limit-tokens"), "1500");
    let ratelimit: Vec<&str> = response
        .headers()
        .get_all("ratelimit")
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    assert_eq!(ratelimit[0], "\"per-minute\";r=400");
    assert!(ratelimit[1].starts_with("\"per-day\";r=0;t="));
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per-day")
    );
}

#[tokio::test]
async fn the_count_is_selectable_and_a_missing_one_is_never_free() {
    let clock = ManualClock::new();
    let prompt = per_minute(10_000, &clock);
    let completion_only = per_minute(10_000, &clock);
    let weighted = per_minute(10_000, &clock);
    let answers = || {
        upstream(vec![
            json(completion(100, 7)),
            // No usage at all: 41 bytes, 11 tokens by the fallback.
            json(r#"{"choices":[{"message":{"content":"x"}}]}"#.to_owned()),
            // An upstream error without usage: its estimate (0).
            (
                StatusCode::BAD_REQUEST,
                false,
                vec![r#"{"error":{"message":"bad"}}"#.to_owned()],
            ),
            // Malformed usage: the fallback.
            json(r#"{"usage":{"prompt_tokens":-1,"completion_tokens":"many"}}"#.to_owned()),
        ])
    };
    let by = |tokens: Tokens, budget: &Budget| {
        TokenBudgetLayer::builder(user())
            .budget("b", budget.clone())
            .tokens(tokens)
            .build()
            .unwrap()
    };
    let mut prompt_service = by(Tokens::Prompt, &prompt).layer(answers());
    let mut completion_service = by(Tokens::Completion, &completion_only).layer(answers());
    let mut weighted_service = TokenBudgetLayer::builder(user())
        .budget("b", weighted.clone())
        // Completion tokens cost 4 prompt tokens.
        .meter(|seen: &Seen<'_>| {
            let usage = seen.usage?;
            Some(usage.prompt_tokens? + 4 * usage.completion_tokens?)
        })
        .build()
        .unwrap()
        .layer(answers());
    for (service, budget, first) in [
        (&mut prompt_service, &prompt, 100),
        (&mut completion_service, &completion_only, 7),
        (&mut weighted_service, &weighted, 128),
    ] {
        send(service, "ada").await;
        assert_eq!(left(budget, "ada"), 10_000 - first);
        send(service, "ada").await;
        assert_eq!(left(budget, "ada"), 10_000 - first - 11);
        let (response, _) = send(service, "ada").await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(left(budget, "ada"), 10_000 - first - 11);
        send(service, "ada").await;
        assert_eq!(left(budget, "ada"), 10_000 - first - 11 - 15);
    }
}

#[tokio::test]
async fn concurrent_requests_that_all_passed_are_all_charged() {
    let clock = ManualClock::new();
    let minute = per_minute(100, &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .build()
        .unwrap();
    let mut service = layer.layer(upstream(vec![
        json(completion(40, 40)),
        json(completion(40, 40)),
        json(completion(40, 40)),
    ]));
    // Three requests pass their check before any response has ended.
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request("ada"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        bodies.push(response.into_body());
    }
    for body in bodies {
        body.collect().await.unwrap();
    }
    // 240 charged to a budget of 100: 140 owed, 84.6 s to the next token.
    let refused = minute.peek_n("ada", 1).unwrap();
    assert!(refused.is_denied());
    assert_eq!(refused.retry_after(), Duration::from_millis(84_600));
}

#[tokio::test]
async fn a_request_without_a_key_is_refused_and_counts_nowhere() {
    let clock = ManualClock::new();
    let minute = per_minute(100, &clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("per-minute", minute.clone())
        .build()
        .unwrap();
    let mut service = layer.layer(upstream(vec![]));
    let request = Request::post("/").body(Full::new(Bytes::new())).unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(minute.is_empty());
}

#[test]
fn a_layer_needs_budgets_with_distinct_printable_names() {
    let clock = ManualClock::new();
    let error = TokenBudgetLayer::builder(user()).build().unwrap_err();
    assert_eq!(error, BuildError::NoBudget);
    let error = TokenBudgetLayer::builder(user())
        .budget("a", per_minute(1, &clock))
        .budget("a", per_minute(2, &clock))
        .build()
        .unwrap_err();
    assert_eq!(error, BuildError::DuplicateBudget { name: "a".into() });
    let error = TokenBudgetLayer::builder(user())
        .budget("caf\u{e9}", per_minute(1, &clock))
        .build()
        .unwrap_err();
    assert!(matches!(error, BuildError::PolicyName { .. }));
    // A window budget and a shared one mix with a keyed GCRA one.
    let window = KeyedLimiter::<String, FixedWindow>::builder(
        FixedWindow::new(Quota::per_day(10).unwrap()).unwrap(),
    )
    .clock(clock.clone())
    .build();
    let shared =
        tollgate::Limiter::with_clock(Gcra::new(Quota::per_hour(50).unwrap()).unwrap(), clock);
    let layer = TokenBudgetLayer::builder(user())
        .budget("day", window)
        .budget("everyone", shared)
        .build()
        .unwrap();
    assert!(format!("{layer:?}").contains("everyone"));
}
