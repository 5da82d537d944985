//! Real Redis servers for the tests: started on free loopback ports, killed
//! on drop; a 3-master cluster; a TCP fault proxy.
#![allow(dead_code)]

pub mod proxy;

use std::time::Duration;

use tollgate::ManualClock;
use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter, RedisLimiterBuilder};
pub use tollgate_testkit::{RedisCluster as Cluster, RedisServer as Server};

/// A client on a test server or cluster, with short timeouts.
pub trait Connect {
    /// Connects, or panics after a few seconds.
    async fn connect(&self) -> Redis;
}

impl Connect for Server {
    async fn connect(&self) -> Redis {
        let options = Options {
            response_timeout: Duration::from_millis(200),
            connection_timeout: Duration::from_millis(200),
            retries: 2,
        };
        tokio::time::timeout(
            Duration::from_secs(5),
            Redis::connect(&self.url(), &options),
        )
        .await
        .expect("connect in time")
        .expect("connect")
    }
}

/// A plain connection to the test server at `url`, for commands the tests
/// send themselves (reading keys, loading scripts, `SLOWLOG`).
pub async fn raw(url: impl redis::IntoConnectionInfo) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a test server's URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// `gcra.lua`'s full arguments (`op now cost slack stamp | g scale interval
/// capacity m x`) for a check of cost 1 on the server's clock with the
/// client's default slack (10 ms) and scale 1 (so `m` = 9·10^15 / 1000):
/// the call its short form `interval capacity` stands for.
pub fn gcra_check_args(interval: &str, capacity: &str) -> Vec<String> {
    [
        "c",
        "",
        "1",
        "10",
        "0",
        "g",
        "1",
        interval,
        capacity,
        "9000000000000",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

impl Connect for Cluster {
    async fn connect(&self) -> Redis {
        let urls = self.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let options = Options {
            response_timeout: Duration::from_millis(500),
            connection_timeout: Duration::from_millis(500),
            retries: 3,
        };
        tokio::time::timeout(
            Duration::from_secs(10),
            Redis::connect_cluster(&urls, &options),
        )
        .await
        .expect("cluster connect in time")
        .expect("cluster connect")
    }
}

/// A limiter for a schedule run on a manual clock beside the core's: the
/// clock's time, failing closed (a fault denies, it never decides as if
/// Redis had), a 5 s deadline, and an hour of TTL slack, since TTLs run in
/// real time while the manual clock jumps.
pub fn on_manual_clock(redis: &Redis, name: &str, clock: &ManualClock) -> RedisLimiterBuilder {
    RedisLimiter::builder(redis.clone(), name)
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .ttl_slack(Duration::from_secs(3_600))
        .deadline(Duration::from_secs(5))
}

/// Every field of a decision, to compare one backend's with another's (or
/// the core's) at once.
pub fn fields(d: &tollgate::Decision) -> (bool, u64, u64, Duration, Duration) {
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.retry_after(),
        d.reset_after(),
    )
}
