//! Parity: the core's test vectors (`crates/core/tests/vectors/core.json`)
//! replayed through the script in test mode (`now` passed in) give the same
//! decision, limit, remaining, retry_after and reset_after at every step, for
//! GCRA, fixed window and sliding window (sliding log is not on Redis).

mod scenarios;
mod support;
use support::Connect as _;

#[tokio::test]
async fn every_vector_step_matches_the_core() {
    let server = support::Server::start();
    scenarios::vectors::every_vector_step_matches_the_core(&server.connect().await).await;
}

/// The lean GCRA script and the general one, fed the same GCRA vector steps
/// on two keys, give the same reply at every step and leave the same state.
#[tokio::test]
async fn the_lean_and_the_general_script_agree_on_every_gcra_vector() {
    let server = support::Server::start();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut compared = 0;
    for case in scenarios::vectors::cases() {
        let Some(tollgate_redis::Limit::Gcra(g)) = scenarios::vectors::limit_of(&case) else {
            continue;
        };
        let m = 9_000_000_000_000_000 / g.scale();
        for (i, step) in case.steps.iter().enumerate() {
            let args = [
                "c".to_owned(),
                step.now_ns.to_string(),
                step.cost.to_string(),
                "600000".to_owned(),
                "0".to_owned(),
                "g".to_owned(),
                g.scale().to_string(),
                g.interval_ticks().to_string(),
                g.capacity_ticks().to_string(),
                m.to_string(),
                "0".to_owned(),
            ];
            let mut replies = Vec::new();
            for (key, source) in [
                ("lean", tollgate_redis::script::SOURCE_GCRA),
                ("general", tollgate_redis::script::SOURCE),
            ] {
                let key = format!("{}:{key}", case.name);
                let reply: Vec<i64> = redis::cmd("EVAL")
                    .arg(source)
                    .arg(1)
                    .arg(&key)
                    .arg(&args)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let state: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                replies.push((reply, state));
            }
            assert_eq!(replies[0], replies[1], "{} step {i}", case.name);
            compared += 1;
        }
    }
    assert!(compared > 30, "only {compared} steps compared");
}
