//! The background sweeper thread of a keyed limiter (the hash-map one and
//! the compact table alike): it sweeps every interval, or at once when
//! woken, and stops when the limiter is dropped.

use std::sync::Weak;
use std::thread::Thread;
use std::time::Duration;

/// Starts a thread named `name` that calls `sweep` on the limiter's shared
/// state every `interval` (at least 1 ms) or when unparked, until the last
/// strong reference to it is gone.
pub(super) fn spawn<S>(
    name: &str,
    shared: Weak<S>,
    interval: Duration,
    sweep: fn(&S) -> usize,
) -> Thread
where
    S: Send + Sync + 'static,
{
    let interval = interval.max(Duration::from_millis(1));
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                sweep(&shared);
            }
        })
        .expect("tollgate: failed to spawn a keyed limiter's sweeper thread")
        .thread()
        .clone()
}
