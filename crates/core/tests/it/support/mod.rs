//! Shared by the integration tests: reference models and the window-bound checker.
#![allow(dead_code)]

pub mod model;
pub mod recording;
pub mod warm_model;
pub mod wheel_model;
pub mod window;

pub mod algorithms {
    //! Short constructors for the algorithms under test, with periods in ns.

    use std::time::Duration;

    use tollgate::{FixedWindow, Gcra, Quota, SlidingLog, SlidingWindow};

    pub fn quota(limit: u64, period_ns: u64) -> Quota {
        Quota::new(limit, Duration::from_nanos(period_ns)).expect("valid quota")
    }

    pub fn gcra(limit: u64, period_ns: u64, burst: u64) -> Gcra {
        let quota = quota(limit, period_ns)
            .with_burst(burst)
            .expect("valid burst");
        Gcra::new(quota).expect("valid gcra")
    }

    pub fn fixed(limit: u64, period_ns: u64) -> FixedWindow {
        FixedWindow::new(quota(limit, period_ns)).expect("valid fixed window")
    }

    pub fn log(limit: u64, period_ns: u64) -> SlidingLog {
        SlidingLog::new(quota(limit, period_ns)).expect("valid sliding log")
    }

    pub fn wheel(limit: u64, period_ns: u64, slots: u32) -> SlidingWindow {
        SlidingWindow::new(quota(limit, period_ns), slots).expect("valid sliding window")
    }
}
