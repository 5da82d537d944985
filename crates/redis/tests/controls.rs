//! the controls on a real `redis-server`, through the scripts: every
//! control on every shape of limiter (see `scenarios/controls.rs`), the
//! markers' effect on the lean scripts and the general one, and a backend
//! fault answered as an error, never as "done".

#[path = "controls/parity.rs"]
mod parity;
mod scenarios;
mod support;
use support::Connect as _;

use std::time::Duration;

use tollgate::{ManualClock, Nanos};
use tollgate_redis::{ControlError, Fault};

#[tokio::test]
async fn every_control_on_every_shape() {
    let server = support::Server::start();
    let redis = server.connect().await;
    scenarios::controls::every_control_on_every_shape(&redis, "ctl").await;
}

/// Redis down: every control is an error, never `Ok`.
#[tokio::test]
async fn a_control_redis_does_not_apply_is_an_error() {
    let mut server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000));
    let limits = [scenarios::gcra(5, Duration::from_secs(1), 5)];
    let l = scenarios::controls::limiter(&redis, "down", &limits, &clock);
    assert_eq!(l.deny(b"k").await, Ok(true));
    server.kill();
    let backend = |r: Result<bool, ControlError>| matches!(r, Err(ControlError::Backend(_)));
    assert!(backend(l.reset(b"k").await));
    assert!(backend(l.refund(b"k", 1).await));
    assert!(backend(l.penalize(b"k", Duration::from_secs(1)).await));
    assert!(backend(l.deny(b"k").await));
    assert!(backend(l.allow(b"k").await));
    assert!(backend(l.unlist(b"k").await));
    let _ = Fault::Timeout;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_and_a_deny_racing_checks_are_atomic() {
    let server = support::Server::start();
    let connections = futures_util::future::join_all((0..16).map(|_| server.connect())).await;
    scenarios::controls::refunds_racing_checks_admit_exactly_the_refunds(
        &connections,
        "race",
        b"k",
        20,
    )
    .await;
}
