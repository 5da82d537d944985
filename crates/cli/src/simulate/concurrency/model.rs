//! The simulated service and its traffic: `knee` workers taking a fixed
//! service time each, whose knee halves over the middle third of the run,
//! before Poisson arrivals of three priorities (see the [parent](super)'s
//! decisions).

use tollgate::concurrency::Priority;

/// The service and the traffic of one run.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// Workers of the service outside the slowdown.
    pub knee: u32,
    /// Nanoseconds a worker spends on a request.
    pub service_time: u64,
    /// Mean arrivals per second.
    pub rate: f64,
    /// Length of the run, nanoseconds.
    pub duration: u64,
    /// Seed of the arrivals and priorities.
    pub seed: u64,
}

/// Per cent of arrivals at each priority: critical, default, sheddable.
pub const MIX: [u32; 3] = [20, 50, 30];
/// The priorities in the order of [`MIX`].
pub const PRIORITIES: [Priority; 3] = [Priority::Critical, Priority::Default, Priority::Sheddable];

impl Model {
    /// The knee at `at`: half the workers (at least one) during the middle
    /// third of the run.
    pub fn knee_at(&self, at: u64) -> u32 {
        if self.in_slowdown(at) {
            (self.knee / 2).max(1)
        } else {
            self.knee
        }
    }

    /// Whether `at` is in the middle third of the run.
    pub fn in_slowdown(&self, at: u64) -> bool {
        let third = self.duration / 3;
        at >= third && at < 2 * third
    }
}
