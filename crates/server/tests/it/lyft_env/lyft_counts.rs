//! Counting as envoyproxy/ratelimit counts, run from its environment: every
//! hit is in the count, over the limit too (`INCRBY` then `EXPIRE`, its
//! `fixed_cache_impl.go`), so that a mixed fleet (Lyft's pods and
//! tollgate's on one Redis) and Lyft's `token-quota.sh` flow answer as an
//! all-Lyft fleet; and `limit_remaining` is 0 on every OVER_LIMIT.
//!
//! The Lyft pod here is a second client sending exactly its commands on
//! its key layout, and deciding as its `base_limiter.go` does: OVER_LIMIT
//! when the count after the `INCRBY` is above the limit, else OK with
//! `limit - count` remaining.

use std::time::{SystemTime, UNIX_EPOCH};

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::lyft_env::support::{
    Counts, LyftServer, RedisServer, config_dir, descriptor, request, start, within, write,
};

const DAY: u64 = 86_400;

/// An answer as both fleets give it: the code and `limit_remaining`.
type Answer = (Code, u32);

/// A Lyft pod: its two commands, pipelined, on its key; its answer.
async fn lyft_pod(
    redis: &mut redis::aio::MultiplexedConnection,
    key: &str,
    hits: u64,
    limit: u64,
) -> Answer {
    let (count,): (u64,) = redis::pipe()
        .cmd("INCRBY")
        .arg(key)
        .arg(hits)
        .cmd("EXPIRE")
        .arg(key)
        .arg(DAY)
        .ignore()
        .query_async(redis)
        .await
        .expect("INCRBY + EXPIRE");
    lyft_answer(count, limit)
}

/// `base_limiter.go`'s answer for the count after the increment.
fn lyft_answer(count: u64, limit: u64) -> Answer {
    if count > limit {
        (Code::OverLimit, 0)
    } else {
        (Code::Ok, u32::try_from(limit - count).expect("small"))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn first(response: &RateLimitResponse) -> Answer {
    let status = &response.statuses[0];
    (status.code(), status.limit_remaining)
}

/// tollgate's answer to `hits` of `entries` in `domain`, the request's own
/// `hits_addend` (as Envoy sends it) or the descriptor's.
async fn tollgate(
    server: &LyftServer,
    domain: &str,
    entries: &[(&str, &str)],
    hits: Hits,
) -> Answer {
    let mut client = server.grpc_client().await;
    let mut descriptor = descriptor(entries);
    let mut call = request(domain, Vec::new());
    match hits {
        Hits::Request(n) => call.hits_addend = n,
        Hits::Descriptor(n) => descriptor.hits_addend = Some(n),
    }
    call.descriptors.push(descriptor);
    let response = within(client.should_rate_limit(call))
        .await
        .expect("decided")
        .into_inner();
    first(&response)
}

#[derive(Clone, Copy, Debug)]
enum Hits {
    Request(u32),
    Descriptor(u64),
}

async fn connect(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A mixed fleet, interleaved on one key of limit 10 a day: Lyft's pod and
/// tollgate, under and over the limit, with hits above what remains and
/// one above the limit itself. Every answer, and the count left in Redis,
/// is an all-Lyft fleet's (the model adds every hit). Before: tollgate did
/// not count its refusals, then admitted a hit of 1 at a count of 10 that
/// Lyft's pods had pushed to 11, and said `limit_remaining` 1 on an
/// OVER_LIMIT.
#[tokio::test]
async fn a_mixed_fleet_answers_and_counts_as_an_all_lyft_fleet() {
    let redis = RedisServer::start();
    let server = start(Counts::Redis(&redis), &[], |root| {
        write(
            &config_dir(root).join("fleet.yaml"),
            "domain: fleet\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 10}\n",
        );
    })
    .await;
    let mut lyft = connect(&redis).await;
    // (tollgate?, hits): a day's window, so no edge falls inside the test
    // unless it runs across midnight UTC (then it runs again).
    let steps: [(bool, u64); 9] = [
        (false, 3),
        (true, 4),
        (false, 2),
        (true, 2),
        (true, 1),
        (false, 1),
        (true, 5),
        (true, 11),
        (false, 1),
    ];
    for attempt in 0..2 {
        let day = unix_now() / DAY * DAY;
        let user = format!("alice{attempt}");
        let key = format!("fleet_user_{user}_{day}");
        let mut model = 0;
        let mut answers = Vec::new();
        let mut expected = Vec::new();
        for (by_tollgate, hits) in steps {
            model += hits;
            expected.push(lyft_answer(model, 10));
            answers.push(if by_tollgate {
                let n = Hits::Request(u32::try_from(hits).expect("small"));
                tollgate(&server, "fleet", &[("user", &user)], n).await
            } else {
                lyft_pod(&mut lyft, &key, hits, 10).await
            });
        }
        if unix_now() / DAY * DAY != day {
            continue; // crossed midnight: the keys changed under the test
        }
        assert_eq!(answers, expected, "{steps:?}");
        let count: u64 = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut lyft)
            .await
            .expect("GET");
        assert_eq!(count, model, "every hit is in Lyft's count");
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut lyft)
            .await
            .expect("TTL");
        assert!(ttl > 0, "every write sets the TTL: {ttl}");
        server.stop().await;
        return;
    }
    panic!("crossed midnight twice");
}

/// envoyproxy/ratelimit's `token-quota.sh`: on `service_2` (2 a minute;
/// an hour here, for no window edge inside the test), each request is
/// checked with `hits_addend` 0 on its way in and charged 1 on stream
/// done; requests 1 to 3 pass, the 4th is refused — on Redis and in
/// memory. Before: the third charge (3 > 2) was refused without counting,
/// so the 4th passed.
#[tokio::test]
async fn the_token_quota_flow_answers_as_lyft() {
    let redis = RedisServer::start();
    for counts in [Counts::Redis(&redis), Counts::Memory] {
        let server = start(counts, &[], |root| {
            write(
                &config_dir(root).join("quota.yaml"),
                "domain: rl\ndescriptors:\n  - key: service\n    value: service_2\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
            );
        })
        .await;
        let service = [("service", "service_2")];
        let mut on_request = Vec::new();
        for _request in 1..=4 {
            let answer = tollgate(&server, "rl", &service, Hits::Descriptor(0)).await;
            on_request.push(answer.0);
            if answer.0 == Code::Ok {
                // Stream done: Envoy's apply_on_stream_done, hits_addend 1.
                tollgate(&server, "rl", &service, Hits::Descriptor(1)).await;
            }
        }
        assert_eq!(
            on_request,
            [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
            "token-quota.sh: only the 4th request is refused"
        );
        server.stop().await;
    }
}

/// `limit_remaining` is 0 on every OVER_LIMIT, as Lyft answers (Envoy
/// shows it in `x-ratelimit-remaining` on the 429), even where a smaller
/// hit would still fit. Before: hits 2 then 2 on 3 a minute said 1.
#[tokio::test]
async fn an_over_limit_answer_has_nothing_remaining() {
    let server = start(Counts::Memory, &[], |root| {
        write(
            &config_dir(root).join("rl.yaml"),
            "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        );
    })
    .await;
    let user = [("user", "bob")];
    assert_eq!(
        tollgate(&server, "rl", &user, Hits::Request(2)).await,
        (Code::Ok, 1)
    );
    assert_eq!(
        tollgate(&server, "rl", &user, Hits::Request(2)).await,
        (Code::OverLimit, 0)
    );
    server.stop().await;
}
