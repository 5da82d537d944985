//! The result for people: the mean limit and in flight per phase, and the
//! refusals per priority.

use std::fmt::Write as _;
use std::time::Duration;

use super::model::Model;
use super::run::{Trace, mean_in_flight, mean_limit};

/// The result for people.
pub(super) fn table(model: &Model, trace: &Trace) -> String {
    let mut out = String::new();
    let third = model.duration / 3;
    let _ = writeln!(
        out,
        "adaptive concurrency limit (Knee, the default) before a service of {} workers taking {:?} each (knee {} over the middle third), Poisson at {:.0} /s for {:?}",
        model.knee,
        Duration::from_nanos(model.service_time),
        model.knee_at(third),
        model.rate,
        Duration::from_nanos(model.duration)
    );
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>12} {:>15}",
        "phase", "knee", "mean limit", "mean in flight"
    );
    for (phase, from, to) in [
        ("before", 0, third),
        ("slowdown", third, 2 * third),
        ("after", 2 * third, model.duration),
    ] {
        let _ = writeln!(
            out,
            "{phase:<12} {:>6} {:>12.1} {:>15.1}",
            model.knee_at(from),
            mean_limit(trace, from, to),
            mean_in_flight(trace, from, to)
        );
    }
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>9}",
        "priority", "offered", "refused", "refused %"
    );
    for (lane, name) in ["critical", "default", "sheddable"].iter().enumerate() {
        let offered = trace.offered[lane];
        let refused = trace.refused[lane].len() as u64;
        let _ = writeln!(
            out,
            "{name:<12} {offered:>9} {refused:>9} {:>9.1}",
            if offered == 0 {
                0.0
            } else {
                refused as f64 * 100.0 / offered as f64
            }
        );
    }
    out
}
