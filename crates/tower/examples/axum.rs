//! Per-IP limits on public pages; per-account limits (with a premium plan
//! and a daily cap) on the API for requests with a valid API key, and a
//! small per-IP quota for the API's anonymous callers.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum
//! curl -i http://127.0.0.1:3000/
//! curl -i -H 'x-api-key: demo-k7Qp2' http://127.0.0.1:3000/api/items
//! ```
//!
//! The plan comes from the key store, never from the key's text, and a key
//! the store does not know counts as no key: the request is limited by its
//! address, so fabricating keys (one per request, or one that looks
//! premium) neither raises the quota nor escapes it.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::get;
use tollgate::{AllOf, ClockSource, Gcra, KeyedLimiter, Quota};
use tollgate_tower::{KeyError, KeyExtractor, KeyFn, OrKey, PeerIp, RateLimitLayer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Plan {
    Standard,
    Premium,
}

/// Who an API key belongs to: the account is the bucket, so an account's
/// keys share one quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Account {
    id: u32,
    plan: Plan,
}

/// The keys issued. A real service looks them up in its database (storing
/// hashes, with a cache in front).
fn key_store() -> HashMap<&'static str, Account> {
    HashMap::from([
        (
            "demo-k7Qp2",
            Account {
                id: 1,
                plan: Plan::Standard,
            },
        ),
        (
            "demo-Zr81x",
            Account {
                id: 2,
                plan: Plan::Premium,
            },
        ),
    ])
}

fn app(clock: ClockSource) -> Result<Router, Box<dyn std::error::Error>> {
    // Public pages: 10 per second per client address, bursts of 20.
    let per_ip = KeyedLimiter::builder(Gcra::new(Quota::per_second(10)?.with_burst(20)?)?)
        .clock(clock.clone())
        .build();

    // The API, per second and per day: anonymous 10 and 1,000 per address,
    // standard 100 and 10,000, premium 1,000 and 1,000,000 per account.
    let tier = |per_second, per_day| -> Result<AllOf<Gcra>, tollgate::QuotaError> {
        AllOf::new(vec![
            Gcra::new(Quota::per_second(per_second)?)?,
            Gcra::new(Quota::per_day(per_day)?)?,
        ])
    };
    let (standard, premium) = (tier(100, 10_000)?, tier(1_000, 1_000_000)?);
    let per_client = KeyedLimiter::builder(tier(10, 1_000)?)
        .clock(clock)
        .override_with(move |client: &OrKey<Account, _>| match client {
            OrKey::First(Account {
                plan: Plan::Standard,
                ..
            }) => Some(standard.clone()),
            OrKey::First(Account {
                plan: Plan::Premium,
                ..
            }) => Some(premium.clone()),
            OrKey::Fallback(_) => None,
        })
        .build();
    // A known key's account; anything else (no key, an unknown one) is
    // "missing", and `or` falls back to the client's address.
    let keys = key_store();
    let account = KeyFn::new(move |parts: &Parts| {
        let key = parts
            .headers
            .get("x-api-key")
            .and_then(|key| key.to_str().ok());
        key.and_then(|key| keys.get(key.trim()).copied())
            .ok_or_else(|| KeyError::missing("a known x-api-key"))
    });

    let public = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(PeerIp::new(), per_ip));
    let api = Router::new()
        .route("/api/items", get(|| async { "[]\n" }))
        .layer(
            RateLimitLayer::builder(account.or(PeerIp::new()), per_client)
                .headers_on_success(true)
                .policy_name("api")
                .build()?,
        );
    Ok(public.merge(api))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = app(ClockSource::default())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The peer address goes with every request: PeerIp reads it.
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::{Request, StatusCode};
    use tollgate::ManualClock;
    use tower::ServiceExt;

    /// How many of 200 API calls from `peer` are admitted, the clock
    /// stopped, the `n`th sent with `key(n)`.
    async fn admitted(app: &axum::Router, peer: &str, key: impl Fn(u32) -> String) -> usize {
        let mut admitted = 0;
        for n in 0..200 {
            let request = Request::get("/api/items")
                .header("x-api-key", key(n))
                .extension(ConnectInfo(
                    format!("{peer}:4000")
                        .parse::<std::net::SocketAddr>()
                        .unwrap(),
                ))
                .body(Body::empty())
                .unwrap();
            let status = app.clone().oneshot(request).await.unwrap().status();
            admitted += usize::from(status == StatusCode::OK);
        }
        admitted
    }

    /// Regression: the plan was read from the key's text (`premium-…`), and
    /// every unknown key had its own bucket.
    #[tokio::test]
    async fn fabricated_keys_get_the_anonymous_quota_of_their_address() {
        let app = super::app(ManualClock::new().into()).unwrap();
        let rotating = admitted(&app, "192.0.2.1", |n| format!("premium-{n}")).await;
        assert_eq!(rotating, 10);
        assert_eq!(
            admitted(&app, "192.0.2.1", |_| "demo-k7Qp3".into()).await,
            0
        );
        // Known keys: their plan, wherever they come from.
        assert_eq!(
            admitted(&app, "192.0.2.1", |_| "demo-k7Qp2".into()).await,
            100
        );
        assert_eq!(
            admitted(&app, "192.0.2.2", |_| "demo-Zr81x".into()).await,
            200
        );
    }
}
