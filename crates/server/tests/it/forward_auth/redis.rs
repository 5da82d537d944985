//! The forward-auth endpoint on the Redis backend, behind nginx: the counts
//! live in Redis (a fleet of tollgates would share them).

use tollgate_testkit::RedisServer;

use crate::forward_auth::checks;
use crate::forward_auth::support::{nginx, shared, start_tollgate};

#[tokio::test]
async fn nginx_with_tollgate_on_redis_enforces_the_limit_in_redis() {
    let redis = RedisServer::start();
    // A deadline no loaded CI machine reaches: Redis decides, not the
    // failure policy.
    let tollgate = start_tollgate(&format!(
        "backend:\n  redis: {}\n  deadline: 2s\n",
        redis.url()
    ));
    let proxy = nginx(tollgate, shared().upstream);
    checks::passes_three_then_429(&proxy.url(""), [127, 0, 0, 20]).await;
    let keys = redis.keys("*");
    assert!(
        keys.iter().any(|key| key.contains("127.0.0.20")),
        "no bucket of the client in Redis: {keys:?}"
    );
}
