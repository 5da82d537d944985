//! A clock that tells each thread the reading its last decision used.

use std::cell::Cell;
use std::thread;

use tollgate::{Clock, ManualClock, Nanos};

thread_local! {
    /// The last reading this thread's [`RecordingClock`] returned.
    static READING: Cell<Option<u64>> = const { Cell::new(None) };
    /// Readings this thread has taken, to yield after some of them.
    static READINGS: Cell<u64> = const { Cell::new(0) };
}

/// A [`ManualClock`] that remembers, per thread, the reading it gave: the
/// `now` of the decision the limiter is about to take on this thread.
///
/// With `yield_every = k > 0`, every `k`-th reading on a thread yields the
/// processor before returning, as a preemption between the limiter's clock
/// reading and its decision would: other threads then decide, and the clock
/// moves, while this reading waits.
#[derive(Clone, Debug)]
pub struct RecordingClock {
    pub clock: ManualClock,
    pub yield_every: u64,
}

impl RecordingClock {
    /// Records `clock`'s readings without yielding.
    pub fn new(clock: ManualClock) -> RecordingClock {
        RecordingClock {
            clock,
            yield_every: 0,
        }
    }
}

impl Clock for RecordingClock {
    fn now(&self) -> Nanos {
        let now = self.clock.now();
        READING.set(Some(now.as_u64()));
        let readings = READINGS.get() + 1;
        READINGS.set(readings);
        if self.yield_every > 0 && readings % self.yield_every == 0 {
            thread::yield_now();
        }
        now
    }
}

/// The reading the last decision on this thread used.
pub fn take_reading() -> u64 {
    READING
        .take()
        .expect("the limiter reads the clock once per decision")
}
