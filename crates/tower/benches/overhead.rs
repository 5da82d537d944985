//! The layer's overhead per request beside tower_governor, on the same axum
//! app called in-process as a service (no network), in the same run.
//!
//! ```text
//! cargo bench -p tollgate-tower --bench overhead
//! ```
//!
//! Scenarios (both limiters keyed by the peer address from axum's
//! `ConnectInfo<SocketAddr>`, GCRA in both):
//! - `allowed`: one client, a quota it never reaches;
//! - `denied`: one client over its quota, every request answered 429;
//! - `10k_clients`: 10,000 client addresses in turn, a quota none reaches.
//!
//! At the end, the overhead of each layer over the bare router and their
//! ratio are printed (from every timed batch criterion ran).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{Criterion, criterion_group};
use http::{Request, Response};
use tollgate::{Gcra, KeyedLimiter, Quota};
use tollgate_tower::{PeerIp, RateLimitLayer};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// Total time and requests per benchmark id, over every batch.
static TOTALS: Mutex<BTreeMap<String, (Duration, u64)>> = Mutex::new(BTreeMap::new());

fn app() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn tollgate_app(quota: Quota) -> Router {
    let limiter = KeyedLimiter::new(Gcra::new(quota).expect("valid quota"));
    app().layer(RateLimitLayer::new(PeerIp::new(), limiter))
}

fn governor_app(period: Duration, burst: u32) -> Router {
    let config = GovernorConfigBuilder::default()
        .period(period)
        .burst_size(burst)
        .finish()
        .expect("valid governor config");
    app().layer(GovernorLayer::new(Arc::new(config)))
}

fn request(peer: IpAddr) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(peer, 40_000)));
    request
}

fn peers(count: u32) -> Vec<IpAddr> {
    (0..count)
        .map(|i| IpAddr::from((0x0a00_0000u32 + i).to_be_bytes()))
        .collect()
}

async fn call(router: &mut Router, peer: IpAddr) -> Response<Body> {
    let ready: &mut Router = ServiceExt::<Request<Body>>::ready(router)
        .await
        .unwrap_or_else(|error: Infallible| match error {});
    ready
        .call(request(peer))
        .await
        .unwrap_or_else(|error: Infallible| match error {})
}

type Limits = (Quota, Duration, u32);

/// (name, (tollgate quota, governor period and burst), clients).
fn scenarios() -> [(&'static str, Limits, u32); 3] {
    let never = (
        Quota::per_second(1_000_000_000)
            .and_then(|q| q.with_burst(1_000_000_000))
            .expect("quota"),
        Duration::from_nanos(1),
        1_000_000_000u32,
    );
    let once = (
        Quota::per_hour(1).expect("quota"),
        Duration::from_secs(3_600),
        1u32,
    );
    [
        ("allowed", never, 1),
        ("denied", once, 1),
        ("10k_clients", never, 10_000),
    ]
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    for (scenario, (quota, period, burst), clients) in scenarios() {
        let mut group = c.benchmark_group(scenario);
        let peers = peers(clients);
        let routers = [
            ("bare", app()),
            ("tollgate", tollgate_app(quota)),
            ("tower_governor", governor_app(period, burst)),
        ];
        for (name, router) in routers {
            let expected = if scenario == "denied" && name != "bare" {
                429
            } else {
                200
            };
            let mut router = router;
            // Spend the quota of the denied scenario, and check the answers.
            for _ in 0..2 {
                runtime.block_on(call(&mut router, peers[0]));
            }
            let status = runtime.block_on(call(&mut router, peers[0])).status();
            assert_eq!(status.as_u16(), expected, "{scenario}/{name}");
            let id = format!("{scenario}/{name}");
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let elapsed = runtime.block_on(async {
                        let start = Instant::now();
                        for i in 0..iters {
                            let peer = peers[(i % u64::from(clients)) as usize];
                            std::hint::black_box(call(&mut router, peer).await);
                        }
                        start.elapsed()
                    });
                    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
                    let entry = totals.entry(id.clone()).or_default();
                    entry.0 += elapsed;
                    entry.1 += iters;
                    elapsed
                })
            });
        }
        group.finish();
    }
}

/// Prints each layer's overhead over the bare router, and their ratio.
///
/// Besides criterion's separate estimates, the three routers are timed in
/// turn, round after round, so that a change of machine load hits all
/// three alike; the medians over rounds are printed.
fn report(runtime: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 31;
    const PER_ROUND: u64 = 4_000;
    {
        let totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
        println!("\ncriterion batches, mean per request (ns):");
        for (id, (time, n)) in totals.iter() {
            println!(
                "{id:>28}: {:8.1}",
                time.as_nanos() as f64 / (*n).max(1) as f64
            );
        }
    }
    println!("\ninterleaved, median of {ROUNDS} rounds of {PER_ROUND} requests (ns per request):");
    for (scenario, (quota, period, burst), clients) in scenarios() {
        let peers = peers(clients);
        let mut routers = [app(), tollgate_app(quota), governor_app(period, burst)];
        for router in &mut routers {
            for _ in 0..2 {
                runtime.block_on(call(router, peers[0]));
            }
        }
        let mut times: [Vec<f64>; 3] = Default::default();
        let mut ratios = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let mut round = [0.0; 3];
            for (k, router) in routers.iter_mut().enumerate() {
                let elapsed = runtime.block_on(async {
                    let start = Instant::now();
                    for i in 0..PER_ROUND {
                        let peer = peers[(i % u64::from(clients)) as usize];
                        std::hint::black_box(call(router, peer).await);
                    }
                    start.elapsed()
                });
                round[k] = elapsed.as_nanos() as f64 / PER_ROUND as f64;
                times[k].push(round[k]);
            }
            ratios.push((round[1] - round[0]) / (round[2] - round[0]));
        }
        let [bare, ours, theirs] = times.map(median);
        println!(
            "{scenario:>12}: bare {bare:7.1}  tollgate {ours:7.1} (+{:6.1})  tower_governor {theirs:7.1} (+{:6.1})  overhead ratio tollgate/tower_governor {:.2}",
            ours - bare,
            theirs - bare,
            median(ratios)
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    report(&runtime);
}
