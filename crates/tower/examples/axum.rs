//! Per-IP limits on public pages, per-API-key limits (with a premium tier
//! and a daily cap) on the API.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum
//! curl -i http://127.0.0.1:3000/
//! curl -i -H 'x-api-key: demo' http://127.0.0.1:3000/api/items
//! ```

use std::net::SocketAddr;

use axum::Router;
use axum::http::HeaderName;
use axum::routing::get;
use tollgate::{AllOf, Gcra, KeyedLimiter, Quota};
use tollgate_tower::{HeaderKey, PeerIp, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Public pages: 10 per second per client address, bursts of 20.
    let per_ip = KeyedLimiter::new(Gcra::new(Quota::per_second(10)?.with_burst(20)?)?);

    // The API: 100 per second and 10,000 per day per key; "premium" keys
    // 1,000 per second and 1,000,000 per day.
    let tier = |per_second, per_day| -> Result<AllOf<Gcra>, tollgate::QuotaError> {
        AllOf::new(vec![
            Gcra::new(Quota::per_second(per_second)?)?,
            Gcra::new(Quota::per_day(per_day)?)?,
        ])
    };
    let premium = tier(1_000, 1_000_000)?;
    let per_key: KeyedLimiter<String, AllOf<Gcra>> = KeyedLimiter::builder(tier(100, 10_000)?)
        .override_with(move |key: &String| key.starts_with("premium-").then(|| premium.clone()))
        .build();

    let public = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(PeerIp::new(), per_ip));
    let api = Router::new()
        .route("/api/items", get(|| async { "[]\n" }))
        .layer(
            // A request without `x-api-key` is answered 400.
            RateLimitLayer::builder(
                HeaderKey::new(HeaderName::from_static("x-api-key")),
                per_key,
            )
            .headers_on_success(true)
            .policy_name("api")?
            .build(),
        );
    let app = public.merge(api);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The peer address goes with every request: PeerIp reads it.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
