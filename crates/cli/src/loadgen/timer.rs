//! Waiting until an instant with microsecond precision, without spinning.
//!
//! tokio's timer has a resolution of 1 ms, too coarse for a schedule with
//! a request every 100 µs or less. Spinning (yielding in a loop) is
//! precise on an idle machine but burns the core and, on a busy one, makes
//! the scheduler treat the pacer as a CPU hog: measured on a loaded 2-core
//! machine, it lost 40 % of the rate where sleeping lost 4 %. On Linux the
//! pacer therefore arms a `timerfd` (a high-resolution kernel timer, not
//! subject to timer slack) registered in tokio's reactor: the thread sleeps
//! in `epoll_wait`, handles responses meanwhile, and wakes within
//! microseconds of the due time. Elsewhere it falls back to tokio's timer.

use std::time::{Duration, Instant};

/// Below this, a wait is a yield to the runtime: cheaper than arming a timer.
const YIELD_BELOW: Duration = Duration::from_micros(5);

/// A reusable precise timer.
pub struct PreciseTimer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<timerfd::TimerFd>>,
}

impl PreciseTimer {
    /// A timer; on Linux a timerfd if one can be created, else tokio's.
    /// Call within a tokio runtime.
    pub fn new() -> PreciseTimer {
        PreciseTimer {
            #[cfg(target_os = "linux")]
            fd: timerfd::TimerFd::new_custom(timerfd::ClockId::Monotonic, true, true)
                .and_then(|fd| {
                    // `with_interest` is deprecated because a raw descriptor
                    // could be closed while registered; here the `TimerFd`
                    // owns its `OwnedFd` and the `AsyncFd` owns the
                    // `TimerFd` for its whole life, so that cannot happen
                    // (and the safe-to-call replacement is `unsafe fn`,
                    // which this crate forbids).
                    #[allow(deprecated)]
                    tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)
                })
                .ok(),
        }
    }

    /// Returns at `deadline` or just after.
    pub async fn sleep_until(&mut self, deadline: Instant) {
        let now = Instant::now();
        let Some(wait) = deadline.checked_duration_since(now) else {
            return;
        };
        if wait <= YIELD_BELOW {
            tokio::task::yield_now().await;
            return;
        }
        #[cfg(target_os = "linux")]
        if let Some(fd) = &mut self.fd {
            // Relative to now on CLOCK_MONOTONIC, the clock `Instant` reads.
            fd.get_mut().set_state(
                timerfd::TimerState::Oneshot(wait),
                timerfd::SetTimeFlags::Default,
            );
            loop {
                let Ok(mut guard) = fd.readable_mut().await else {
                    break;
                };
                // Non-blocking: 0 if it has not fired yet (a spurious wake).
                let fired = guard.get_inner().read() > 0;
                // Consumed either way: the next wait must not see this
                // readiness again (that costs a read and a poll per wake).
                guard.clear_ready();
                if fired {
                    return;
                }
            }
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn never_returns_before_the_deadline() {
        let mut timer = PreciseTimer::new();
        for micros in [0, 3, 50, 300, 1_500] {
            let deadline = Instant::now() + Duration::from_micros(micros);
            timer.sleep_until(deadline).await;
            let now = Instant::now();
            assert!(
                now >= deadline || micros <= 5,
                "woke {:?} early",
                deadline - now
            );
        }
    }
}
