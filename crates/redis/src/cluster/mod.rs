//! Redis Cluster while it changes: slots migrating, failovers, nodes
//! added, a node lost or stopped — and one node's fault kept that node's.
//!
//! # The router
//!
//! tollgate routes cluster calls itself (`cluster/router.rs`): **one
//! multiplexed connection per node** and a **slot map** read with `CLUSTER
//! SLOTS`. Each call goes to the master of its key's hash slot (every key
//! of one user key shares a slot: [`key`](crate::key)); `MOVED` and `ASK`
//! are followed, and the map is refreshed **in the background**: no call
//! ever waits for a refresh, a reconnection or another node. A call refused
//! **before it ran** (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) is sent
//! again after a short pause until its deadline.
//!
//! | parameter | value | where, and what it serves |
//! |---|---|---|
//! | redirections per attempt | 5 | `router.rs` `MAX_REDIRECTS`: then the call pauses and is sent again within its deadline |
//! | map refresh | at most once per 100 ms | `router.rs` `MIN_REFRESH`: slots follow a promoted replica within about one refresh |
//! | resend pause | 1 ms, doubling to 16 ms | `FIRST_PAUSE`, `MAX_PAUSE`: a migration can keep a call bouncing longer than a few redirections |
//! | deadline | 20 ms (5 ms on one server) | [`CLUSTER_DEADLINE`](crate::limiter::CLUSTER_DEADLINE): room for a redirection or two while slots move (at 5 ms, 3 in 3,790 calls went to the policy during a reshard, none at 20 ms) |
//!
//! **Faults stay with their node**: each node has its own
//! [`breaker`](crate::breaker), so only a failing node's slots go to the
//! failure policy; resharding is not a fault (a deadline passed while the
//! cluster refuses the call is a [`Fault::Timeout`](crate::Fault::Timeout)
//! counted by no breaker); a durable check's `WAIT` runs on a connection of
//! its own. Run the cluster with `cluster-require-full-coverage no`: with
//! Redis's default every node refuses every slot from a master's failure
//! until its replica's promotion.
//!
//! # Guarantees
//!
//! On a real 3-master + 3-replica cluster under load (`tests/cluster_chaos.rs`,
//! node timeout 2 s, an independent count of admissions per key), the keys
//! of the other masters stay Redis's for every fault below (at most 1 % of
//! their calls to the policy), from the first call, with no refresh needed:
//!
//! | fault | the node's keys | for how long | over-admission per key |
//! |---|---|---|---|
//! | slot migration, a node added | Redis, through `ASK` / `MOVED` / `TRYAGAIN`; the policy (timeout, no breaker) for a call whose redirections outlast its deadline | while the slot moves | 0 |
//! | `CLUSTER FAILOVER` | Redis (calls wait within their deadline) | — | 0 |
//! | master stopped (a partition shorter than the node timeout) | the policy (timeouts, then its breaker) | the stop, plus up to one `open_for` (200 ms) | the policy's (0 failing closed) |
//! | master killed | the policy (errors, then its breaker) | until its replica is promoted and the next refresh | `burst + rate·L` for GCRA, `limit` for a window, `L` the replication lag |
//! | a master without a replica, `Durability::Replicas` | admissions to the policy (`Unreplicated`, then its breaker); denials stand | until a replica acknowledges again | the policy's |
//!
//! A migration is **exact** (a key lives on one node at every instant). A
//! lost master's replica may lack the last `L` of writes and admits them
//! again, unless [`Durability::Replicas`](crate::Durability::Replicas)
//! makes it **0** (see [`durability`](crate::durability)). A node added is
//! followed without a restart.
//!
//! Each rule in full, each figure with its run, and why the redis crate's
//! own cluster client was replaced: `crates/redis/docs/cluster.md`; the
//! runs: `BENCHMARKS.md`, "Cluster under change".
//!
//! # Example
//!
//! ```no_run
//! use tollgate::{Gcra, Quota};
//! use tollgate_redis::{Options, Redis, RedisLimiter};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
//! let cluster = Redis::connect_cluster(&nodes, &Options::default()).await?;
//! let limiter = RedisLimiter::builder(cluster, "api") // deadline 20 ms by default here
//!     .limit(Gcra::new(Quota::per_second(100)?)?)
//!     .build()?;
//! let decision = limiter.check(b"user:42").await; // routed to user:42's slot
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(crate) mod router;
pub(crate) mod slots;

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

/// The first pause before a call refused by a changing cluster is sent
/// again.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause between two such attempts.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(16);

/// Whether Redis refused `e`'s call before running it because the cluster
/// is changing (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): sending it again
/// cannot apply it twice.
pub(crate) fn refused_before_running(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

/// Runs `call` until, on a `cluster`, Redis no longer refuses it before
/// running it ([`refused_before_running`]), pausing [`FIRST_PAUSE`],
/// doubling to [`MAX_PAUSE`], between attempts. Unbounded: every caller
/// runs it within its deadline.
pub(crate) async fn resent<T, F: Future<Output = RedisResult<T>>>(
    cluster: bool,
    call: impl FnMut() -> F,
) -> RedisResult<T> {
    resent_flagging(cluster, &AtomicBool::new(false), call).await
}

/// [`resent`], setting `moving` once the cluster refused the call: a
/// deadline that passes then is no fault of the node
/// ([`counts_as_node_fault`]).
pub(crate) async fn resent_flagging<T, F: Future<Output = RedisResult<T>>>(
    cluster: bool,
    moving: &AtomicBool,
    mut call: impl FnMut() -> F,
) -> RedisResult<T> {
    let mut pause = FIRST_PAUSE;
    loop {
        match call().await {
            Err(e) if cluster && refused_before_running(&e) => {
                // Relaxed: read by the caller once this future is dropped
                // or done.
                moving.store(true, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
            reply => return reply,
        }
    }
}

/// Whether a deadline that passed counts towards the node's breaker:
/// not while a changing cluster was refusing the call (`moving`, set by
/// [`resent_flagging`] or a caller's own loop), since resharding is not a
/// fault of the node. Such a call goes to the policy as a timeout, and
/// Redis is worth asking again after [`MAX_PAUSE`].
pub(crate) fn counts_as_node_fault(moving: &AtomicBool) -> bool {
    // Relaxed: set by the call's own future, which the timeout has dropped
    // by now; no other memory depends on it.
    !moving.load(Ordering::Relaxed)
}

/// The pause after `pause`: doubled, at most [`MAX_PAUSE`].
pub(crate) fn next_pause(pause: Duration) -> Duration {
    (pause * 2).min(MAX_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_refusals_of_a_changing_cluster_are_sent_again() {
        let server = |kind: ServerErrorKind| RedisError::from((ErrorKind::Server(kind), "x"));
        for kind in [
            ServerErrorKind::Moved,
            ServerErrorKind::Ask,
            ServerErrorKind::TryAgain,
            ServerErrorKind::ClusterDown,
        ] {
            assert!(refused_before_running(&server(kind)), "{kind:?}");
        }
        for kind in [
            ServerErrorKind::ResponseError,
            ServerErrorKind::NoScript,
            ServerErrorKind::ReadOnly,
        ] {
            assert!(!refused_before_running(&server(kind)), "{kind:?}");
        }
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!refused_before_running(&io));
        let mut pause = FIRST_PAUSE;
        let pauses: Vec<u64> = (0..7)
            .map(|_| {
                pause = next_pause(pause);
                pause.as_millis() as u64
            })
            .collect();
        assert_eq!(pauses, [2, 4, 8, 16, 16, 16, 16]);
    }
}
