//! Concurrent load on a limiter: tasks that check keys in turn until told
//! to stop, each admission recorded with its times (see `admissions`),
//! each decision's source and latency counted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate_redis::{RedisLimiter, Source};

use crate::admissions::{Admission, Admissions, now_us};

/// Tasks calling one limiter.
pub struct Load {
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Tally>>,
}

/// What the tasks saw.
pub struct Tally {
    /// Decisions taken.
    pub calls: u64,
    /// Of them, by the failure policy.
    pub by_policy: u64,
    /// The policy's decisions by fault.
    pub faults: BTreeMap<String, u64>,
    /// The longest call.
    pub slowest: Duration,
    /// When the first and the last decision by the policy returned.
    pub policy_span: Option<(Instant, Instant)>,
    /// Every admission.
    pub admissions: Admissions,
    latencies: Histogram<u64>,
    elapsed: Duration,
}

impl Load {
    /// `tasks` tasks checking `keys` in turn (each from its own offset),
    /// pausing `pause` between calls.
    pub fn start(limiter: RedisLimiter, keys: Vec<String>, tasks: usize, pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let admitted = Arc::new(AtomicU64::new(0));
        let keys = Arc::new(keys);
        let tasks = (0..tasks)
            .map(|task| {
                let (limiter, keys) = (limiter.clone(), Arc::clone(&keys));
                let (stop, admitted) = (Arc::clone(&stop), Arc::clone(&admitted));
                tokio::spawn(async move {
                    let started = Instant::now();
                    let mut tally = Tally::new();
                    let mut i = task * 7;
                    // Relaxed: a flag that only ends the loop; the tally is
                    // handed over by the join.
                    while !stop.load(Ordering::Relaxed) {
                        let key = &keys[i % keys.len()];
                        i += 1;
                        let sent = now_us();
                        let t = Instant::now();
                        let outcome = limiter.check_outcome(key, 1).await.expect("cost 1");
                        let took = t.elapsed();
                        let received = now_us();
                        tally.calls += 1;
                        tally.slowest = tally.slowest.max(took);
                        let _ = tally.latencies.record(took.as_micros() as u64);
                        if let Source::Policy(fault) = outcome.source {
                            let now = Instant::now();
                            tally.policy_span = Some(match tally.policy_span {
                                Some((first, _)) => (first, now),
                                None => (now, now),
                            });
                            tally.by_policy += 1;
                            *tally.faults.entry(format!("{fault:?}")).or_default() += 1;
                        }
                        if outcome.decision.is_allowed() {
                            tally.admissions.add(key, Admission { sent, received });
                            // Relaxed: a progress count, read for polling.
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        if pause.is_zero() {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(pause).await;
                        }
                    }
                    tally.elapsed = started.elapsed();
                    tally
                })
            })
            .collect();
        Load {
            stop,
            admitted,
            tasks,
        }
    }

    /// Admissions so far.
    pub fn admitted(&self) -> u64 {
        // Relaxed: see `start`.
        self.admitted.load(Ordering::Relaxed)
    }

    /// Stops the tasks; what they saw, together.
    pub async fn stop(self) -> Tally {
        // Relaxed: see `start`.
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Tally::new();
        for task in self.tasks {
            let t = task.await.expect("a load task");
            all.calls += t.calls;
            all.by_policy += t.by_policy;
            for (fault, n) in t.faults {
                *all.faults.entry(fault).or_default() += n;
            }
            all.slowest = all.slowest.max(t.slowest);
            all.policy_span = match (all.policy_span, t.policy_span) {
                (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                (x, None) | (None, x) => x,
            };
            all.admissions.merge(t.admissions);
            all.latencies
                .add(&t.latencies)
                .expect("same histogram bounds");
            all.elapsed = all.elapsed.max(t.elapsed);
        }
        all
    }
}

impl Tally {
    fn new() -> Tally {
        Tally {
            calls: 0,
            by_policy: 0,
            faults: BTreeMap::new(),
            slowest: Duration::ZERO,
            policy_span: None,
            admissions: Admissions::default(),
            latencies: Histogram::new(3).expect("a histogram"),
            elapsed: Duration::ZERO,
        }
    }

    /// The share of calls decided by the policy.
    pub fn policy_share(&self) -> f64 {
        self.by_policy as f64 / self.calls.max(1) as f64
    }

    /// Calls per second over the load's time.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency percentiles, in µs.
    pub fn latency(&self) -> String {
        format!(
            "p50 {} µs, p99 {} µs, max {} µs",
            self.latencies.value_at_quantile(0.5),
            self.latencies.value_at_quantile(0.99),
            self.latencies.max()
        )
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} calls ({:.0}/s), {} admitted, {} by the policy {:?}, slowest {:?}, {}",
            self.calls,
            self.rate(),
            self.admissions.total(),
            self.by_policy,
            self.faults,
            self.slowest,
            self.latency()
        )
    }
}

/// One task that checks then refunds keys in turn (a refund is a control
/// script on every key of the limiter, and keeps the keys), counting the
/// controls that failed.
pub struct Controls {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, BTreeMap<String, u64>)>,
}

impl Controls {
    /// Starts the task on `keys`.
    pub fn start(limiter: RedisLimiter, keys: Vec<String>) -> Controls {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = Arc::clone(&stop);
            async move {
                let (mut calls, mut failed) = (0, BTreeMap::new());
                // Relaxed: as in `Load::start`.
                for key in keys.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let _ = limiter.check(key).await;
                    calls += 1;
                    if let Err(e) = limiter.refund(key, 1).await {
                        *failed.entry(format!("{e:?}")).or_default() += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (calls, failed)
            }
        });
        Controls { stop, task }
    }

    /// Stops the task: the controls sent, and the failures by error.
    pub async fn stop(self) -> (u64, BTreeMap<String, u64>) {
        // Relaxed: as in `Load::start`.
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the controls task")
    }
}
