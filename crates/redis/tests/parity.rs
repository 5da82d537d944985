//! Parity: the core's test vectors (`crates/core/tests/vectors/core.json`)
//! replayed through the script in test mode (`now` passed in) give the same
//! decision, limit, remaining, retry_after and reset_after at every step, for
//! GCRA, fixed window and sliding window (sliding log is not on Redis).

mod scenarios;
mod support;
use support::Connect as _;
use tollgate_redis::script::{Lean, expand_lean};

#[tokio::test]
async fn every_vector_step_matches_the_core() {
    let server = support::Server::start();
    scenarios::vectors::every_vector_step_matches_the_core(&server.connect().await).await;
}

/// The lean scripts (GCRA, fixed window) and the general one, fed the same
/// vector steps on two keys, give the same reply at every step (the lean
/// scripts' compact reply read by `expand_lean`, as the client reads it) and
/// leave the same state.
#[tokio::test]
async fn the_lean_and_the_general_scripts_agree_on_every_vector() {
    let server = support::Server::start();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut compared = [0; 2];
    let mut compact = [0; 2];
    for case in scenarios::vectors::cases() {
        let Some(limit) = scenarios::vectors::limit_of(&case) else {
            continue;
        };
        let (lean, params, which, shape) = match &limit {
            tollgate_redis::Limit::Gcra(g) => (
                tollgate_redis::script::SOURCE_GCRA,
                [
                    "g".to_owned(),
                    g.scale().to_string(),
                    g.interval_ticks().to_string(),
                    g.capacity_ticks().to_string(),
                    (9_000_000_000_000_000 / g.scale()).to_string(),
                ],
                0,
                Lean::Gcra {
                    interval: g.interval_ticks(),
                    capacity: g.capacity_ticks(),
                },
            ),
            tollgate_redis::Limit::FixedWindow(_) => (
                tollgate_redis::script::SOURCE_FIXED,
                [
                    "f".to_owned(),
                    limit.quota().period_nanos().to_string(),
                    limit.quota().limit().to_string(),
                    "0".to_owned(),
                    "0".to_owned(),
                ],
                1,
                Lean::Fixed {
                    period: limit.quota().period_nanos(),
                    limit: limit.quota().limit(),
                    unit_nanos: 1,
                },
            ),
            _ => continue,
        };
        for (i, step) in case.steps.iter().enumerate() {
            let mut args = vec![
                "c".to_owned(),
                step.now_ns.to_string(),
                step.cost.to_string(),
                "600000".to_owned(),
                "0".to_owned(),
            ];
            args.extend(params.iter().cloned());
            args.push("0".to_owned());
            let mut replies = Vec::new();
            for (key, source) in [("lean", lean), ("general", tollgate_redis::script::SOURCE)] {
                let key = format!("{}:{key}", case.name);
                let reply: redis::Value = redis::cmd("EVAL")
                    .arg(source)
                    .arg(1)
                    .arg(&key)
                    .arg(&args)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                // The lean scripts answer one number (a marker, the full
                // form): read as the client reads it.
                let reply = match reply {
                    redis::Value::Int(v) => {
                        assert_eq!(source, lean, "{} step {i}: {v}", case.name);
                        compact[which] += 1;
                        expand_lean(&[v], shape, true, step.cost, step.now_ns as i64)
                            .unwrap_or_else(|| panic!("{} step {i}: {v} unreadable", case.name))
                    }
                    other => redis::from_redis_value::<Vec<i64>>(other).unwrap(),
                };
                let state: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                replies.push((reply, state));
            }
            assert_eq!(replies[0], replies[1], "{} step {i}", case.name);
            compared[which] += 1;
        }
    }
    assert!(
        compared.iter().all(|&n| n > 20),
        "steps compared: {compared:?}"
    );
    // Every vector step is a decision from the state: the compact reply.
    assert_eq!(compact, compared, "compact replies");
}

/// Off the vectors' path ([`scenarios::lean_cases`]), the same calls
/// through a lean script and the general one on two keys give the same
/// reply (the lean one read back by `expand_lean`) and leave the same
/// state.
#[tokio::test]
async fn the_lean_replies_read_back_as_the_general_ones_off_the_vectors() {
    use tollgate_redis::script::SOURCE;
    let server = support::Server::start();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut forms = std::collections::BTreeMap::new();
    for scenarios::lean_cases::LeanCase {
        name,
        source: lean,
        limit: params,
        shape,
        steps,
    } in scenarios::lean_cases::cases()
    {
        for (i, &(op, now, cost)) in steps.iter().enumerate() {
            let mut args = vec![op.to_owned(), now.to_string(), cost.to_string()];
            args.extend(["600000", "0"].map(str::to_owned));
            args.extend(params.map(str::to_owned));
            args.push("0".to_owned());
            let mut replies = Vec::new();
            for (key, source) in [("lean", lean), ("general", SOURCE)] {
                let key = format!("off-vectors:{name}:{key}");
                let reply: redis::Value = redis::cmd("EVAL")
                    .arg(source)
                    .arg(1)
                    .arg(&key)
                    .arg(&args)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let reply = match reply {
                    redis::Value::Int(v) => {
                        *forms.entry((name, "compact")).or_insert(0) += 1;
                        expand_lean(&[v], shape, op == "c", cost, now as i64)
                            .unwrap_or_else(|| panic!("{name} step {i}: {v} unreadable"))
                    }
                    other => {
                        let reply: Vec<i64> = redis::from_redis_value(other).unwrap();
                        if source == lean {
                            *forms.entry((name, "general")).or_insert(0) += 1;
                            assert_eq!(
                                expand_lean(&reply, shape, true, cost, 0),
                                Some(reply.clone())
                            );
                        }
                        reply
                    }
                };
                let state: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                replies.push((reply, state));
            }
            assert_eq!(replies[0], replies[1], "{name} step {i}: {op} {now} {cost}");
        }
    }
    // Which form each case answered (every general reply of the lean
    // scripts above is the fixed window's inexact cases).
    let forms: Vec<_> = forms.into_iter().collect();
    assert_eq!(
        forms,
        [
            (("fixed", "compact"), 8),
            (("fixed-clock-back", "compact"), 1),
            (("fixed-clock-back", "general"), 3),
            (("fixed-inexact", "general"), 4),
            (("gcra", "compact"), 10),
        ]
    );
}
