//! Redis as this server sees it — answering, or failing and why — so that
//! a Redis that refuses the server, disappears or errors is never silent,
//! whatever the failure policy does with the decisions meanwhile.
//!
//! # Model
//!
//! Two sources feed one state:
//!
//! - **every decision** ([`Watch::outcome`]): one Redis did not take is a
//!   fault, counted by kind; an error, a timeout or an open breaker marks
//!   Redis *failing* at once (the health check sees it on the next call)
//!   and wakes the probe;
//! - **a probe**: `PING` every [`PROBE_EVERY`], and at once after such a
//!   fault. `PONG` marks Redis *answering*; anything else marks it failing
//!   and keeps the error's text (`NOAUTH Authentication required.`,
//!   `Connection refused`) for the logs and the status page. A probe that
//!   fails also asks for a fresh connection, so that a Redis back after a
//!   restart is found by the probe even when no request comes.
//!
//! Script errors (a key holding what the script cannot read), calls not
//! queued because too many were waiting, and admissions too few replicas
//! acknowledged are faults of a call, not of Redis: counted and logged,
//! they leave Redis answering.
//!
//! # Logs (WARN, never one line per request)
//!
//! The probe's task writes every line: the first failure at once with its
//! error; while Redis keeps failing, at most one line per [`LOG_EVERY`]
//! with the decisions it did not take since the last line; one line when
//! it answers again (after a failure that was logged). Faults while Redis
//! answers (script errors, timeouts under load) are summed into at most
//! one line per [`LOG_EVERY`].
//!
//! # Guarantees
//!
//! - A failure is visible within one probe (at most [`PROBE_EVERY`] plus
//!   the response timeout) with no traffic, at once with traffic.
//! - Memory is fixed: counters and the last error's text.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tollgate_redis::{Fault, Redis, Source};

/// How often the probe `PING`s Redis.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// At most one log line per this long, beside a failure's first line and
/// the line saying Redis answers again.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The kinds of fault counted (the `fault` label), in [`Fault`]'s terms.
pub const FAULTS: [&str; 6] = [
    "error",
    "timeout",
    "breaker_open",
    "overloaded",
    "script",
    "unreplicated",
];

/// The place of `fault` in [`FAULTS`].
pub fn fault_index(fault: Fault) -> usize {
    match fault {
        Fault::Error => 0,
        Fault::Timeout => 1,
        Fault::BreakerOpen => 2,
        Fault::Overloaded => 3,
        Fault::Script => 4,
        // `Unreplicated`, and any fault a later tollgate-redis adds.
        _ => 5,
    }
}

/// Whether `fault` says Redis itself fails (not one call).
fn redis_fails(fault: Fault) -> bool {
    matches!(fault, Fault::Error | Fault::Timeout | Fault::BreakerOpen)
}

/// What the status page and the health checks read ([`Watch::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreState {
    /// Redis answers (the last probe got `PONG`, and no decision failed
    /// since).
    pub up: bool,
    /// The last error seen by the probe, while failing.
    pub last_error: Option<String>,
    /// How long it has been failing.
    pub down_for: Option<Duration>,
    /// Decisions Redis did not take, since the start, by [`FAULTS`].
    pub faults: [u64; 6],
}

struct Log {
    /// When Redis started failing (`None` while it answers).
    down_since: Option<Instant>,
    last_error: Option<String>,
    last_line: Option<Instant>,
    /// Whether this failure's first line was written.
    down_logged: bool,
    /// Faults since the last line, by kind.
    unlogged: [u64; 6],
}

struct Shared {
    /// `host:port`, the cluster or the master's name: for the lines.
    target: String,
    /// What happens to a decision Redis does not take: for the lines.
    meanwhile: &'static str,
    /// Relaxed everywhere: a flag read on its own (the health check); no
    /// other memory is published through it.
    up: AtomicBool,
    /// By [`FAULTS`], since the start. Relaxed: counters.
    totals: [AtomicU64; 6],
    /// By [`FAULTS`], not yet seen by the probe's task. Relaxed: counters.
    pending: [AtomicU64; 6],
    wake: Notify,
    log: Mutex<Log>,
}

/// The watch of one Redis (see the [module docs](self)); clones share it.
#[derive(Clone)]
pub struct Watch {
    shared: Arc<Shared>,
}

/// Stops the probe when the backend goes away.
pub(super) struct ProbeTask(tokio::task::AbortHandle);

impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Watch {
    /// A watch of `target`, answering (Redis answered at start);
    /// `meanwhile` says in the lines what becomes of a decision Redis does
    /// not take.
    pub fn new(target: String, meanwhile: &'static str) -> Watch {
        Watch {
            shared: Arc::new(Shared {
                target,
                meanwhile,
                up: AtomicBool::new(true),
                totals: Default::default(),
                pending: Default::default(),
                wake: Notify::new(),
                log: Mutex::new(Log {
                    down_since: None,
                    last_error: None,
                    last_line: None,
                    down_logged: false,
                    unlogged: [0; 6],
                }),
            }),
        }
    }

    /// Starts the probe of `redis` on the current runtime; `None` outside
    /// one (then only decisions feed the watch).
    pub(super) fn start_probe(&self, redis: Redis, timeout: Duration) -> Option<ProbeTask> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let watch = self.clone();
        let task = runtime.spawn(async move {
            loop {
                let pinged = match tokio::time::timeout(timeout, redis.ping()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err(format!("no answer to PING within {timeout:?}")),
                };
                if pinged.is_err() {
                    // A connection refused every command (a password
                    // changed) or left dead by a restart: the next try
                    // gets a fresh one.
                    redis.reconnect();
                }
                watch.probed(pinged);
                let _ = tokio::time::timeout(PROBE_EVERY, watch.shared.wake.notified()).await;
            }
        });
        Some(ProbeTask(task.abort_handle()))
    }

    /// Feeds one decision's source (see the module docs).
    pub fn outcome(&self, source: Source) {
        let Source::Policy(fault) = source else {
            return;
        };
        let s = &self.shared;
        let i = fault_index(fault);
        s.totals[i].fetch_add(1, Ordering::Relaxed);
        s.pending[i].fetch_add(1, Ordering::Relaxed);
        if redis_fails(fault) && s.up.swap(false, Ordering::Relaxed) {
            s.wake.notify_one();
        }
    }

    /// Whether Redis answers now.
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Relaxed)
    }

    /// What the status page shows.
    pub fn state(&self) -> StoreState {
        let s = &self.shared;
        let log = s.log.lock().unwrap_or_else(PoisonError::into_inner);
        let up = s.up.load(Ordering::Relaxed);
        StoreState {
            up,
            last_error: if up { None } else { log.last_error.clone() },
            down_for: log.down_since.map(|since| since.elapsed()),
            faults: std::array::from_fn(|i| s.totals[i].load(Ordering::Relaxed)),
        }
    }

    /// Takes one probe's result, and writes the lines due (module docs).
    fn probed(&self, pinged: Result<(), String>) {
        let s = &self.shared;
        let now = Instant::now();
        let mut log = s.log.lock().unwrap_or_else(PoisonError::into_inner);
        for (unlogged, pending) in log.unlogged.iter_mut().zip(&s.pending) {
            *unlogged += pending.swap(0, Ordering::Relaxed);
        }
        let may_log = log
            .last_line
            .is_none_or(|last| now.duration_since(last) >= LOG_EVERY);
        match pinged {
            Err(error) => {
                s.up.store(false, Ordering::Relaxed);
                let since = *log.down_since.get_or_insert(now);
                log.last_error = Some(error.clone());
                if !log.down_logged {
                    if may_log || log.last_line.is_none() {
                        tracing::warn!(
                            redis = %s.target,
                            %error,
                            "Redis {} fails: {error}; meanwhile {}",
                            s.target,
                            s.meanwhile
                        );
                        log.down_logged = true;
                        log.last_line = Some(now);
                        log.unlogged = [0; 6];
                    }
                } else if may_log {
                    let faults = summary(&log.unlogged);
                    tracing::warn!(
                        redis = %s.target,
                        %error,
                        "Redis {} still fails after {:.0?}: {error}; since the last line: {faults}",
                        s.target,
                        now.duration_since(since)
                    );
                    log.last_line = Some(now);
                    log.unlogged = [0; 6];
                }
            }
            Ok(()) => {
                s.up.store(true, Ordering::Relaxed);
                if let Some(since) = log.down_since.take() {
                    if log.down_logged {
                        let faults = summary(&log.unlogged);
                        tracing::warn!(
                            redis = %s.target,
                            "Redis {} answers again after {:.0?}; since the last line: {faults}",
                            s.target,
                            now.duration_since(since)
                        );
                        log.last_line = Some(now);
                        log.unlogged = [0; 6];
                    }
                    log.down_logged = false;
                    log.last_error = None;
                } else if may_log && log.unlogged.iter().any(|&n| n > 0) {
                    let faults = summary(&log.unlogged);
                    tracing::warn!(
                        redis = %s.target,
                        "Redis {} answers, but did not take some decisions: {faults}; {}",
                        s.target,
                        s.meanwhile
                    );
                    log.last_line = Some(now);
                    log.unlogged = [0; 6];
                }
            }
        }
    }
}

/// `3 decisions not taken by Redis (error 2, timeout 1)`.
fn summary(faults: &[u64; 6]) -> String {
    let total: u64 = faults.iter().sum();
    if total == 0 {
        return "no decision was left to the failure".to_owned();
    }
    let kinds: Vec<String> = FAULTS
        .iter()
        .zip(faults)
        .filter(|(_, n)| **n > 0)
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    format!(
        "{total} decision{} not taken by Redis ({})",
        if total == 1 { "" } else { "s" },
        kinds.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_of_redis_mark_it_failing_and_faults_of_a_call_do_not() {
        let watch = Watch::new("127.0.0.1:1".into(), "the call fails");
        watch.outcome(Source::Redis);
        watch.outcome(Source::Policy(Fault::Script));
        watch.outcome(Source::Policy(Fault::Overloaded));
        assert!(watch.is_up());
        watch.outcome(Source::Policy(Fault::Error));
        assert!(!watch.is_up());
        let state = watch.state();
        assert_eq!(state.faults, [1, 0, 0, 1, 1, 0]);

        watch.probed(Err("NOAUTH Authentication required.".into()));
        let state = watch.state();
        assert!(!state.up);
        assert_eq!(
            state.last_error.as_deref(),
            Some("NOAUTH Authentication required.")
        );
        watch.probed(Ok(()));
        let state = watch.state();
        assert!(state.up);
        assert_eq!(state.last_error, None);
        assert_eq!(state.down_for, None);
    }

    #[test]
    fn summaries_name_each_kind() {
        assert_eq!(
            summary(&[2, 1, 0, 0, 0, 0]),
            "3 decisions not taken by Redis (error 2, timeout 1)"
        );
    }
}
