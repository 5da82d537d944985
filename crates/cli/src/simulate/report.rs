//! The simulation's result as a table for people and JSON for machines.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::{Config, Outcome};
use crate::messages;

/// The table: one row per algorithm, then what the columns mean.
pub fn table(config: &Config, arrivals: &[u64], outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "quota {} per {:?} (burst {}), {}, {:?}",
        config.quota.limit(),
        config.quota.period(),
        config.quota.burst(),
        config.pattern_label(),
        std::time::Duration::from_nanos(config.duration),
    );
    let _ = writeln!(
        out,
        "{:<28} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "algorithm", "offered", "admitted", "denied", "max/T", "bound", "aligned", "bound"
    );
    for outcome in outcomes {
        let admitted = outcome.admitted.len();
        let (aligned, aligned_bound) =
            match (outcome.max_aligned_window, outcome.bounds.aligned_window) {
                (Some(max), Some(bound)) => (max.to_string(), bound.to_string()),
                _ => ("-".to_owned(), "-".to_owned()),
            };
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
            outcome.title,
            arrivals.len(),
            admitted,
            arrivals.len() - admitted,
            outcome.max_any_window,
            if outcome.bounds.closed {
                format!("{}*", outcome.bounds.any_window)
            } else {
                outcome.bounds.any_window.to_string()
            },
            aligned,
            aligned_bound,
        );
    }
    let _ = writeln!(out, "{}", messages::BOUND_NOTE);
    out
}

#[derive(Serialize)]
struct Json<'a> {
    quota: QuotaJson,
    pattern: String,
    duration_ns: u64,
    offered: usize,
    algorithms: Vec<AlgorithmJson<'a>>,
    pictures: &'a [PathBuf],
}

#[derive(Serialize)]
struct QuotaJson {
    limit: u64,
    period_ns: u64,
    burst: u64,
    slots: u32,
}

#[derive(Serialize)]
struct AlgorithmJson<'a> {
    algorithm: &'static str,
    title: &'a str,
    offered: usize,
    admitted: usize,
    denied: usize,
    max_in_any_window: u64,
    bound_any_window: u64,
    /// The windows `bound_any_window` is over: `"[t, t+T)"` or `"[t, t+T]"`.
    bound_any_window_over: &'static str,
    max_in_aligned_window: Option<u64>,
    bound_aligned_window: Option<u64>,
}

/// The result as one JSON object.
pub fn json(
    config: &Config,
    arrivals: &[u64],
    outcomes: &[Outcome],
    pictures: &[PathBuf],
) -> serde_json::Result<String> {
    let document = Json {
        quota: QuotaJson {
            limit: config.quota.limit(),
            period_ns: config.quota.period_nanos(),
            burst: config.quota.burst(),
            slots: config.slots,
        },
        pattern: config.pattern_label(),
        duration_ns: config.duration,
        offered: arrivals.len(),
        algorithms: outcomes
            .iter()
            .map(|outcome| AlgorithmJson {
                algorithm: super::algorithms::key(outcome.name),
                title: &outcome.title,
                offered: arrivals.len(),
                admitted: outcome.admitted.len(),
                denied: arrivals.len() - outcome.admitted.len(),
                max_in_any_window: outcome.max_any_window,
                bound_any_window: outcome.bounds.any_window,
                bound_any_window_over: if outcome.bounds.closed {
                    "[t, t+T]"
                } else {
                    "[t, t+T)"
                },
                max_in_aligned_window: outcome.max_aligned_window,
                bound_aligned_window: outcome.bounds.aligned_window,
            })
            .collect(),
        pictures,
    };
    serde_json::to_string_pretty(&document)
}
