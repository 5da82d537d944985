//! Redis Cluster while it changes: slots migrating, failovers, nodes
//! added, a node lost or stopped — and one node's fault kept that node's.
//!
//! # The router
//!
//! tollgate routes cluster calls itself (`cluster/router.rs`), on the
//! redis crate's single-server connections: **one multiplexed connection
//! per node**, a
//! **slot map** (slot → master) read with `CLUSTER SLOTS` from the masters
//! (the owner most of them name wins, so one stale view does not), and each
//! call sent to the master of its key's hash slot (every key of one user
//! key shares one slot: [`key`](crate::key)). `MOVED` updates that slot at
//! once and schedules a refresh; `ASK` is followed with `ASKING` on the
//! target; up to 5 redirections per attempt. The map is refreshed **in the
//! background**, at most once per 100 ms: after a `MOVED`, after any call
//! that got no answer, and while a node's breaker is open (so that its
//! slots follow a promoted replica). No call ever waits for a refresh, a
//! reconnection or another node. (The redis crate's own cluster client,
//! which this replaces, runs every call through one task that stops
//! dispatching while it refreshes its map, and refreshes while holding
//! the lock every call needs, pinging each node in turn: read in its
//! source, redis 1.8, a node that accepts and never answers holds every
//! other node's calls there for its response timeout.)
//!
//! A decision whose call was refused **before it ran** — `MOVED`, `ASK`,
//! `TRYAGAIN` or `CLUSTERDOWN`, which Redis answers without running the
//! script — is sent again after a short pause (1 ms, doubling to 16 ms)
//! until its deadline (a slot migration can keep a call bouncing longer
//! than a few redirections: a two-key call meets `TRYAGAIN` until both
//! keys moved). The controls' calls, the concurrency limiter's and the
//! Lyft layout's are sent again the same way.
//!
//! # Faults stay with their node
//!
//! - **A breaker per node** (see [`breaker`](crate::breaker)): a call
//!   passes the breaker of the master that owns its slot; a node that
//!   times out, errs or (with [`Durability::Replicas`](crate::Durability::Replicas))
//!   leaves admissions unreplicated opens its own, and only its slots go
//!   to the failure policy.
//! - **Resharding is not a fault**: a deadline that passes while the
//!   cluster refuses the call (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`)
//!   sends that call to the policy as a [`Fault::Timeout`](crate::Fault::Timeout)
//!   and counts towards no breaker: the rate limits' decisions and
//!   controls and the concurrency limiter's calls alike
//!   (`counts_as_node_fault`).
//! - **`WAIT` on a connection of its own** (see `dedicated`): a durable
//!   check never holds back the calls pipelined behind it, and its
//!   refusal says what happened ([`Fault::Unreplicated`](crate::Fault::Unreplicated)
//!   when `WAIT` answered too few, a timeout only when the deadline passed
//!   first).
//! - **The default deadline is 20 ms on a cluster**
//!   ([`CLUSTER_DEADLINE`](crate::limiter::CLUSTER_DEADLINE), 5 ms on a
//!   single server): room for a redirection or two while slots move.
//!   Measured during a reshard under load: calls outside the moving slots
//!   took up to 8 ms on a loaded 2-core host (3 in 3,790 went to the
//!   policy at 5 ms, none at 20 ms).
//! - **Run the cluster with `cluster-require-full-coverage no`.** With
//!   Redis's default, `yes`, every node refuses every slot (`CLUSTERDOWN`)
//!   from the moment a master is marked failed until its replica is
//!   promoted (the replica's election delay: measured 0.9 s): every key
//!   goes to the policy then, whatever its node, as a timeout that opens no
//!   breaker (3 % of the healthy keys' calls in the kill test). With `no`,
//!   the other masters' slots are served throughout.
//!
//! # Guarantees
//!
//! Tested under load on a real 3-master + 3-replica cluster with the
//! client's defaults (`tests/cluster_chaos.rs`, node timeout 2 s), with an
//! independent count of admissions per key checked against each limit's
//! bound; figures in `BENCHMARKS.md`, "Cluster under change". "Healthy
//! keys" are the keys of the other masters: for every fault below they are
//! decided by Redis (at most 1 % of their calls to the policy, measured
//! 0–0.1 %: a loaded host's scheduling), from the first call on, with no
//! refresh needed.
//!
//! | fault | the node's keys | for how long | over-admission per key |
//! |---|---|---|---|
//! | slot migration, a node added | Redis, through `ASK` / `MOVED` / `TRYAGAIN`; the policy (timeout, no breaker) for a call whose redirections outlast its deadline | while the slot moves | 0 |
//! | `CLUSTER FAILOVER` | Redis (calls wait within their deadline) | — | 0 |
//! | master stopped (a partition shorter than the node timeout) | the policy (timeouts, then its breaker) | the stop, plus up to one `open_for` (200 ms) | the policy's (0 failing closed) |
//! | master killed | the policy (errors, then its breaker) | until its replica is promoted (node timeout + election: 3.9 s at 2 s) and the next refresh (≤ 300 ms) | `burst + rate·L` for GCRA, `limit` for a window, `L` the replication lag (a few ms: measured 0) |
//! | master killed while its replica lags | the same | the same | the same bound with a long `L`: measured 20 of 21; **0** with `Durability::Replicas` |
//! | a master without a replica, `Durability::Replicas` | admissions to the policy (`Unreplicated`, then its breaker); denials stand; calls without `WAIT` on that master are Redis's | until a replica acknowledges again | the policy's |
//!
//! - **Slot migration** (`CLUSTER SETSLOT … IMPORTING / MIGRATING`, keys
//!   moved by `MIGRATE`, `SETSLOT … NODE`; what `redis-cli --cluster
//!   reshard` does): **exact**. A key is moved atomically with its TTL, and
//!   lives on exactly one node at every instant; a call runs where it is
//!   (on the source while it is there, on the target through `ASK` once it
//!   moved, `TRYAGAIN` while the keys of a several-limit call are split),
//!   so every decision reads the one current state.
//! - **A master lost**: replication is asynchronous: the promoted replica
//!   may lack the writes of the last replication lag `L`, and admits those
//!   permits again: at most, **per key and per failover, what the limit
//!   admits within `L`** (only the current window's admissions can be
//!   repeated for a window). `L` is about a millisecond on a healthy link,
//!   but unbounded when the replica falls behind; the test makes it so (the
//!   replica stopped, its link full) and measures up to `burst` per key.
//!   With [`Durability::Replicas`](crate::Durability::Replicas) an admission
//!   is answered as Redis's only once replicas hold it: **0**, for one
//!   replica acknowledgement per check (see [`durability`](crate::durability)).
//! - **A node added** (`CLUSTER MEET`, then slots migrated to it): the
//!   client follows without a restart (`MOVED` names it; its connection is
//!   opened on first use; `NOSCRIPT` there is answered by `EVAL`, see
//!   [`script`](crate::script)), exactly, as any migration: **0**
//!   over-admission. With the defaults, the keys of the other slots are
//!   Redis's throughout (measured 0 policy answers in about 5,500 calls);
//!   the moving slots' keys are Redis's but for calls whose keys are split
//!   between the two nodes past the deadline (`TRYAGAIN`: 8–15 of
//!   3,500–3,750, timeouts that open no breaker), and are decided on the new
//!   node once their slot moved.

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
