//! Redis Cluster while it changes: slots migrating, failovers, nodes added.
//!
//! The cluster client (the redis crate's async `ClusterConnection`, see
//! [`backend`](crate::backend)) routes each call by its keys' hash slot
//! (every key of one user key shares one slot: [`key`](crate::key)),
//! follows `MOVED` (and refreshes its slot map), follows `ASK` with
//! `ASKING`, and waits and retries `TRYAGAIN`, up to
//! [`Options::retries`](crate::Options::retries) times. On top of it, a
//! decision whose call was refused **before it ran** — `MOVED`, `ASK`,
//! `TRYAGAIN` or `CLUSTERDOWN`, which Redis answers without running the
//! script — is sent again after a short pause (1 ms, doubling to 16 ms)
//! until its deadline, because a slot migration can keep a call bouncing
//! longer than the client's few retries (measured: 10 decisions of 3,300
//! lost that way during a 12-slot migration, before this). The controls'
//! calls (reset, refund, penalty, lists), the concurrency limiter's and
//! the Lyft layout's are sent again the same way.
//!
//! # Guarantees
//!
//! Tested under load on a real 3-master + 3-replica cluster
//! (`tests/cluster_chaos.rs`), with an independent count of admissions per
//! key checked against each limit's bound; figures in `BENCHMARKS.md`,
//! "Cluster under change".
//!
//! - **Slot migration** (`CLUSTER SETSLOT … IMPORTING / MIGRATING`, keys
//!   moved by `MIGRATE`, `SETSLOT … NODE`; what `redis-cli --cluster
//!   reshard` does): **exact**. A key is moved atomically with its TTL, and
//!   lives on exactly one node at every instant; a call runs where it is
//!   (on the source while it is there, on the target through `ASK` once it
//!   moved, `TRYAGAIN` while the keys of a several-limit call are split),
//!   so every decision reads the one current state: no over-admission.
//!   Every decision is Redis's as long as its deadline outlasts the
//!   redirects (none lost to an error); a shorter deadline sends the call
//!   to the failure policy, on time, as always.
//! - **Manual failover** (`CLUSTER FAILOVER` on a replica): **exact**. The
//!   master stops writes until the replica has them all; calls wait (within
//!   their deadline) and follow `MOVED` to the new master.
//! - **A master lost** (killed, its replica promoted after the cluster's
//!   node timeout): while no master serves the slots (`CLUSTERDOWN`, or no
//!   answer), decisions go to the failure policy within their deadline.
//!   Replication is asynchronous: the promoted replica may lack the writes
//!   of the last replication lag `L`, and admits those permits again. The
//!   over-admission is at most, **per key and per failover, what the limit
//!   admits within `L`**: `burst + rate·L` for GCRA, `limit` for a fixed or
//!   sliding window (only the current window's admissions can be repeated).
//!   `L` is about a millisecond on a healthy link, but unbounded when the
//!   replica falls behind; the test makes it so (the replica stopped, its
//!   link full) and measures up to `burst` per key (20 of a burst of 20,
//!   for each key that spent its whole burst during the lag). With
//!   [`Durability::Replicas`](crate::Durability::Replicas) an admission is
//!   answered as Redis's only once replicas hold it, and the measured
//!   over-admission is **0**, for one extra replica acknowledgement per
//!   check (see [`durability`](crate::durability)).
//! - **A node added** (`CLUSTER MEET`, then slots migrated to it): the
//!   client follows without a restart (`MOVED` refreshes its slot map and
//!   it connects to the new node; `NOSCRIPT` there is answered by `EVAL`,
//!   see [`script`](crate::script)), exactly, as any migration.

use std::future::Future;
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
    mut call: impl FnMut() -> F,
) -> RedisResult<T> {
    let mut pause = FIRST_PAUSE;
    loop {
        match call().await {
            Err(e) if cluster && refused_before_running(&e) => {
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
            reply => return reply,
        }
    }
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
