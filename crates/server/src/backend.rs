//! Where the counts live: the [`Backend`] trait and the in-memory backend.
//!
//! # Model
//!
//! The server asks a backend one question: "decide these buckets, each under
//! its rule, with this cost" → one [`Decision`] each, in order. A cost of 0
//! only looks. The server has already checked every cost against its rule's
//! capacity, so a backend never sees a request that can never fit, except a
//! budget's charge (cost ≥ 1 under `budget:`, [`crate::config::budget`]):
//! recorded whether or not it fits, into debt, allowed only if it fitted.
//! [`Backend::install`] is told about every new rule set before it goes live
//! (and may refuse it, naming the rule: the server does not start, or a reload
//! keeps the old rules); [`Backend::register_metrics`] and
//! [`Backend::shutdown`] (after the last request) complete the trait.
//!
//! [`MemoryBackend`] (the default) runs one `tollgate::KeyedLimiter` per rule,
//! keyed by bucket; with [`MemoryBackend::with_compact_keys`] a rule keyed by
//! one client address or numeric id under one GCRA or fixed window runs on the
//! core's compact tables (about 14 to 27 bytes a key; `backend/compact.rs`);
//! with [`MemoryBackend::with_lyft_counts`] fixed-window rules count as Lyft
//! does (`backend/lyft_counts.rs`).
//! [`RedisBackend`](crate::redis_backend::RedisBackend) runs one
//! `tollgate_redis::RedisLimiter` per rule behind the same trait.
//!
//! # Guarantee across a reload: never a fresh quota
//!
//! A rule is recognised by its path (`domain.key_value…`). Kept algorithm:
//! its buckets adopt the new quotas with [`Carry::Keep`] (permits taken stay
//! taken). Changed algorithm: the old limiter stays as a *bridge* until every
//! bucket of it is fresh, and a request must fit both. Lists and penalties
//! move to the new limiter; a removed rule's buckets are kept aside until
//! fresh, so a rule that comes back resumes its counts.
//!
//! # Parameters
//!
//! - [`MAX_DYNAMIC_RULES`]: 10,000 override rules (a request's `limit`) at
//!   once; one more is answered as a denial, never as "no limit".
//! - The sweeper runs every second (`SWEEP_EVERY`), dropping fresh bridges,
//!   removed rules and override limiters.
//! - Compact tables: off unless given a capacity (`--compact-keys`, the
//!   file's `server.compact_keys`); Lyft's counts: at most `lyft_counts::MAX_BUCKETS`
//!   (2²⁰) buckets.
//!
//! The reload in full (bridges charged, chained changes, mixed algorithms,
//! overrides, a request racing a reload): `crates/server/docs/configuration.md`,
//! "Inside the server".

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::{Algorithm, AllOf, Carry, ClockSource, Decision, KeyedLimiter};

use crate::config::BuiltAlgorithm;
use crate::rules::{Rule, RuleSet};

pub(crate) mod compact;
pub(crate) mod lyft_counts;

use compact::CompactRule;

/// One bucket to decide.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    /// The rule, which has limits (unlimited rules never reach a backend).
    pub rule: &'a Rule,
    /// The bucket within the rule.
    pub key: &'a str,
    /// Permits to take; 0 only looks.
    pub cost: u64,
}

/// A backend could not decide (a store is down, a deadline passed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    message: String,
}

impl BackendError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> BackendError {
        BackendError {
            message: message.into(),
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend: {}", self.message)
    }
}

impl std::error::Error for BackendError {}

/// An operator's control on one bucket ([`Backend::control`]), with the
/// meaning the core's limiters give it (`reset`, `refund`, `penalize`,
/// `deny`, `allow`, `unlist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control {
    /// Back to full: the bucket's state dropped; cancels a penalty.
    Reset,
    /// Gives back this many permits, never above full.
    Refund(u64),
    /// Denies every request for this long from now (penalties only extend).
    Penalize(Duration),
    /// On the deny list: denied before any limit.
    Deny,
    /// On the allow list: admitted without counting.
    Allow,
    /// Off either list.
    Unlist,
}

impl Control {
    /// Its name, as the admin API's paths say it.
    pub fn name(self) -> &'static str {
        match self {
            Control::Reset => "reset",
            Control::Refund(_) => "refund",
            Control::Penalize(_) => "penalize",
            Control::Deny => "deny",
            Control::Allow => "allow",
            Control::Unlist => "unlist",
        }
    }
}

/// Why a [`Control`] was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// This backend cannot apply this control (named).
    Unsupported(&'static str),
    /// A deny or allow list is at its cap (the message says which).
    ListFull(String),
    /// The store failed: nothing is known to be done.
    Backend(BackendError),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Unsupported(control) => {
                write!(f, "{control}: not supported by this backend")
            }
            ControlError::ListFull(message) => f.write_str(message),
            ControlError::Backend(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ControlError {}

/// What [`Backend::control`] returns.
pub type ControlFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ControlError>> + Send + 'a>>;

/// A backend's health, for the status page and the health checks
/// ([`Backend::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendHealth {
    /// `memory`, `redis`, or `custom`.
    pub kind: &'static str,
    /// Decisions so far by who took them, for a backend with a failure
    /// policy (Redis); `None` for one that cannot fail (memory).
    pub policy: Option<PolicyTotals>,
    /// Whether its store answers, for a backend with one (Redis); `None`
    /// for one without (memory).
    pub store: Option<StoreHealth>,
}

impl BackendHealth {
    /// Whether the health checks (`/healthcheck`, `/readyz`) must fail:
    /// the store does not answer and the settings ask the checks to say so
    /// (`health_check: true`, envoyproxy/ratelimit's
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
    pub fn fails_health_check(&self) -> bool {
        self.store
            .as_ref()
            .is_some_and(|store| store.health_check && !store.up)
    }

    /// [`fails_health_check`](Self::fails_health_check) as a health
    /// component's check: `Err` says why.
    ///
    /// # Errors
    ///
    /// The store does not answer and the checks must say so.
    pub fn health_check(&self) -> Result<(), String> {
        match &self.store {
            Some(store) if self.fails_health_check() => Err(format!(
                "{} does not answer: {}",
                self.kind,
                store.last_error.as_deref().unwrap_or("it failed")
            )),
            _ => Ok(()),
        }
    }
}

/// Whether a backend's store (Redis) answers ([`BackendHealth::store`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoreHealth {
    /// It answers: the last probe got its answer, and no decision failed
    /// since.
    pub up: bool,
    /// Why it does not, the last error seen (`NOAUTH Authentication
    /// required.`).
    pub last_error: Option<String>,
    /// For how long it has not, in whole seconds.
    pub down_seconds: Option<u64>,
    /// Whether the health checks fail while it does not.
    pub health_check: bool,
    /// Decisions it did not take since the start (whoever answered them
    /// instead: the failure policy, or an error for the call).
    pub faults: u64,
}

/// Decisions of a backend with a failure policy, cumulative (as
/// `tollgate_redis_decisions_total` and `tollgate_redis_policy_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyTotals {
    /// Decided by the store itself (Redis), a lease or the deny cache.
    pub store: u64,
    /// Taken by the policy after a timeout.
    pub timeout: u64,
    /// Taken by the policy after an error.
    pub error: u64,
    /// Taken by the policy while the breaker was open.
    pub breaker_open: u64,
    /// Taken by the policy because too many calls were waiting.
    pub overloaded: u64,
    /// Taken by the policy because fewer replicas than `wait:` asks for
    /// acknowledged an admission.
    pub unreplicated: u64,
    /// Of the policy's decisions, those that admitted.
    pub allowed: u64,
    /// Of the policy's decisions, those that denied.
    pub denied: u64,
}

/// What [`Backend::decide`] returns.
pub type DecideFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Decision>, BackendError>> + Send + 'a>>;

/// Decides buckets: see the [module docs](self).
pub trait Backend: Send + Sync + 'static {
    /// Prepares for `rules`, which go live right after this returns.
    ///
    /// # Errors
    ///
    /// A rule this backend cannot run; the rules in force stay as they were.
    fn install(&self, rules: &RuleSet) -> Result<(), BackendError>;

    /// Decides every hit, in order: one decision each. Each hit is decided
    /// on its own (a denial of one does not undo another), as
    /// envoyproxy/ratelimit does.
    fn decide<'a>(&'a self, hits: &'a [Hit<'a>]) -> DecideFuture<'a>;

    /// Whether a hit of `rule` is counted even when it is refused (a
    /// refusal writes, as envoyproxy/ratelimit's `INCRBY` does): then the
    /// server sends a hit above the rule's capacity with its cost, to be
    /// counted and refused, instead of a look. By default, false
    /// (tollgate's rule: a refusal writes nothing).
    fn counts_refused(&self, rule: &Rule) -> bool {
        let _ = rule;
        false
    }

    /// Drops idle state; called every second by the server.
    fn sweep(&self) {}

    /// Adds this backend's own metrics to the server's registry (before it
    /// serves). By default, none.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let _ = registry;
    }

    /// Applies an operator's `control` to one bucket of `rule` (the admin
    /// API, [`crate::http::admin`]): atomically, one round trip on a remote
    /// store. By default, [`ControlError::Unsupported`].
    fn control<'a>(&'a self, rule: &'a Rule, key: &'a str, control: Control) -> ControlFuture<'a> {
        let _ = (rule, key);
        Box::pin(std::future::ready(Err(ControlError::Unsupported(
            control.name(),
        ))))
    }

    /// What the status page shows of this backend ([`crate::status`]). By
    /// default, a backend of kind `custom` without a failure policy.
    fn health(&self) -> BackendHealth {
        BackendHealth {
            kind: "custom",
            policy: None,
            store: None,
        }
    }

    /// Called once when the server stops, after the last request was
    /// answered: give back what is held elsewhere (leases). By default,
    /// nothing.
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

type Keyed<A> = KeyedLimiter<String, AllOf<A>>;

/// Runs `$body` on the keyed limiter inside a [`RuleLimiter`], whatever its
/// algorithm (`each!(rule_limiter, |l| l.is_empty())`).
macro_rules! each {
    ($limiter:expr, |$l:ident| $body:expr) => {
        match $limiter {
            RuleLimiter::Gcra($l) => $body,
            RuleLimiter::FixedWindow($l) => $body,
            RuleLimiter::SlidingLog($l) => $body,
            RuleLimiter::SlidingWindow($l) => $body,
            RuleLimiter::Mixed($l) => $body,
        }
    };
}

/// One rule's buckets.
#[derive(Clone)]
enum RuleLimiter {
    Gcra(Keyed<tollgate::Gcra>),
    FixedWindow(Keyed<tollgate::FixedWindow>),
    SlidingLog(Keyed<tollgate::SlidingLog>),
    SlidingWindow(Keyed<tollgate::SlidingWindow>),
    Mixed(Keyed<AnyAlgorithm>),
}

/// The clock of a rule holding several algorithms (calendar windows read
/// UNIX time): the wall clock, unless the server was given a manual or
/// custom clock (tests: a manual clock reads as UNIX time).
pub(crate) fn wall_clock(clock: &ClockSource) -> ClockSource {
    match clock {
        ClockSource::Manual(_) | ClockSource::Custom(_) => clock.clone(),
        _ => tollgate::SystemClock::new().into(),
    }
}

fn keyed<A: Algorithm>(algorithm: AllOf<A>, clock: &ClockSource) -> Keyed<A>
where
    AllOf<A>: Algorithm,
{
    KeyedLimiter::builder(algorithm)
        .clock(clock.clone())
        // One sweeper for every rule, driven by the server, not a thread each.
        .sweep_every(None)
        .build()
}

impl RuleLimiter {
    fn new(algorithm: &BuiltAlgorithm, clock: &ClockSource) -> RuleLimiter {
        match algorithm.clone() {
            BuiltAlgorithm::Gcra(a) => RuleLimiter::Gcra(keyed(a, clock)),
            BuiltAlgorithm::FixedWindow(a) => RuleLimiter::FixedWindow(keyed(a, clock)),
            BuiltAlgorithm::SlidingLog(a) => RuleLimiter::SlidingLog(keyed(a, clock)),
            BuiltAlgorithm::SlidingWindow(a) => RuleLimiter::SlidingWindow(keyed(a, clock)),
            BuiltAlgorithm::Mixed(a) => RuleLimiter::Mixed(keyed(a, &wall_clock(clock))),
        }
    }

    /// Adopts `algorithm` keeping the buckets' state; `false` if the
    /// algorithm kind differs.
    fn adopt(&self, algorithm: &BuiltAlgorithm) -> bool {
        match (self, algorithm.clone()) {
            (RuleLimiter::Gcra(l), BuiltAlgorithm::Gcra(a)) => l.set_default(a, Carry::Keep),
            (RuleLimiter::FixedWindow(l), BuiltAlgorithm::FixedWindow(a)) => {
                l.set_default(a, Carry::Keep)
            }
            (RuleLimiter::SlidingLog(l), BuiltAlgorithm::SlidingLog(a)) => {
                l.set_default(a, Carry::Keep)
            }
            (RuleLimiter::SlidingWindow(l), BuiltAlgorithm::SlidingWindow(a)) => {
                l.set_default(a, Carry::Keep)
            }
            (RuleLimiter::Mixed(l), BuiltAlgorithm::Mixed(a)) => l.set_default(a, Carry::Keep),
            _ => return false,
        }
        true
    }

    /// Puts this rule's deny and allow list entries and running penalties
    /// on `to` (see [`KeyedLimiter::copy_controls_to`]): a fresh limiter
    /// replacing this one must not admit a listed key.
    fn copy_controls_to(&self, to: &RuleLimiter) -> Result<usize, tollgate::control::ControlError> {
        each!(self, |from| each!(to, |to| from.copy_controls_to(to)))
    }

    fn decide(&self, key: &str, cost: u64) -> Result<Decision, tollgate::CostError> {
        each!(self, |l| if cost == 0 {
            l.peek_n(key, 0)
        } else {
            l.check_n(key, cost)
        })
    }

    /// What a request of `cost` would be told now, without taking anything:
    /// a cost above the capacity is looked at as the capacity (a bridge's
    /// old limits count what they can hold).
    fn peek(&self, key: &str, cost: u64) -> Decision {
        each!(self, |l| l
            .peek_n(key, cost)
            .or_else(|error| l.peek_n(key, error.capacity()))
            .unwrap_or_else(|error| never(error.capacity())))
    }

    /// Records `cost` taken from `key`, whether or not it fits.
    fn charge(&self, key: &str, cost: u64) {
        each!(self, |l| drop(l.charge_n(key, cost)));
    }

    /// A budget's charge (see [`crate::config::budget`]): `cost` taken
    /// when it fits (the admission's decision), else recorded anyway into
    /// debt and answered as a denial with the state after it. Each step is
    /// atomic; a check refused writes nothing, so the cost is recorded
    /// exactly once either way.
    fn charge_budget(&self, key: &str, cost: u64) -> Decision {
        each!(self, |l| {
            match l.check_n(key, cost) {
                Ok(decision) if decision.is_allowed() => decision,
                _ => {
                    let after = l.charge_n(key, cost);
                    Decision::from_parts(
                        false,
                        after.limit(),
                        after.remaining(),
                        after.retry_after(),
                        after.reset_after(),
                    )
                }
            }
        })
    }

    /// Applies `control` to `key` (the core's keyed controls).
    fn control(&self, key: &str, control: Control) -> Result<(), ControlError> {
        let full =
            |error: tollgate::control::ControlError| ControlError::ListFull(error.to_string());
        each!(self, |l| match control {
            Control::Reset => {
                let _ = l.reset(key);
                Ok(())
            }
            Control::Refund(n) => {
                let _ = l.refund(key, n);
                Ok(())
            }
            Control::Penalize(duration) => l.penalize(key, duration).map(drop).map_err(full),
            Control::Deny => l.deny(key).map_err(full),
            Control::Allow => l.allow(key).map_err(full),
            Control::Unlist => {
                let _ = l.unlist(key);
                Ok(())
            }
        })
    }

    fn sweep(&self) {
        each!(self, |l| drop(l.sweep()));
    }

    fn is_empty(&self) -> bool {
        each!(self, |l| l.is_empty())
    }
}

struct Installed {
    algorithm: BuiltAlgorithm,
    limiter: RuleLimiter,
    /// The rule's compact tables, where it qualifies (`backend/compact.rs`):
    /// its fixed-size values are decided there, the others by `limiter`.
    compact: Option<Arc<CompactRule>>,
    /// The rule's compact tables from before a change of its limits,
    /// newest first, until the sweep finds them empty: a bridge, as
    /// `bridges` (`backend/compact.rs`, "What such a rule gives up").
    compact_bridges: ArcSwap<Vec<Arc<CompactRule>>>,
    /// The rule's limiters from before a change of its algorithm, newest
    /// first, for as long as they hold a state that counts: a *bridge*
    /// (module docs, "State across a reload").
    bridges: ArcSwap<Vec<RuleLimiter>>,
}

impl Installed {
    fn new(
        algorithm: BuiltAlgorithm,
        limiter: RuleLimiter,
        bridges: Vec<RuleLimiter>,
    ) -> Installed {
        Installed {
            algorithm,
            limiter,
            compact: None,
            compact_bridges: ArcSwap::from_pointee(Vec::new()),
            bridges: ArcSwap::from_pointee(bridges),
        }
    }

    /// Puts the rule's fixed-size values on `compact`, and keeps the
    /// compact tables of `previous` (the rule before this reload) as
    /// bridges.
    fn with_compact(
        mut self,
        compact: Option<CompactRule>,
        previous: Option<&Installed>,
    ) -> Installed {
        self.compact = compact.map(Arc::new);
        if let Some(previous) = previous {
            let mut bridges: Vec<Arc<CompactRule>> = previous.compact.iter().cloned().collect();
            bridges.extend(previous.compact_bridges.load().iter().cloned());
            self.compact_bridges = ArcSwap::from_pointee(bridges);
        }
        self
    }

    /// The compact tables' verdict on `key` under the old limits of a
    /// bridge: a denial that ends the request, taking nothing else.
    fn decide_compact_bridges(&self, key: &str, cost: u64) -> Option<Decision> {
        let bridges = self.compact_bridges.load();
        let value = bridges.first()?.value_of(key)?;
        for bridge in bridges.iter() {
            // A fresh state there has nothing to remember (and taking
            // from it would make a state the bridge must outlive).
            if !bridge.holds(value) {
                continue;
            }
            // A cost the old limits can never hold takes their capacity.
            let taken = match bridge.decide(value, cost)? {
                Ok(decision) => decision,
                Err(error) => match bridge.decide(value, error.capacity())? {
                    Ok(decision) => decision,
                    Err(error) => never(error.capacity()),
                },
            };
            if taken.is_denied() {
                return Some(taken);
            }
        }
        None
    }

    /// Decides `cost` for `key` on the rule's own limits: its compact
    /// table for a fixed-size value, else its keyed limiter.
    fn decide_own(&self, key: &str, cost: u64) -> Result<Decision, tollgate::CostError> {
        let compact = self.compact.as_ref().and_then(|compact| {
            let value = compact.value_of(key)?;
            compact.decide(value, cost)
        });
        compact.unwrap_or_else(|| self.limiter.decide(key, cost))
    }

    /// Decides `cost` for `key` under the rule's limiter and, while a
    /// bridge stands, under its old limits too: a key the old limits
    /// refuse is refused (nothing taken anywhere), and an admission is
    /// also charged to every old limiter still holding a state for the key
    /// (a full state there has nothing to remember, and charging it would
    /// make a state the bridge must then outlive).
    fn decide(&self, key: &str, cost: u64) -> Result<Decision, tollgate::CostError> {
        if let Some(denied) = self.decide_compact_bridges(key, cost) {
            return Ok(denied);
        }
        let bridges = self.bridges.load();
        if bridges.is_empty() {
            return self.decide_own(key, cost);
        }
        let mut holding = Vec::with_capacity(bridges.len());
        for bridge in bridges.iter() {
            // A cost of 0 reports the state as it is (denied only by a list
            // or a penalty). A full one admits any cost the old limits can
            // hold and has nothing to remember: the common case, one look.
            let state = bridge.peek(key, 0);
            if state.is_denied() {
                return Ok(state);
            }
            if state.remaining() >= state.limit() {
                continue;
            }
            let looked = bridge.peek(key, cost);
            if looked.is_denied() {
                return Ok(looked);
            }
            holding.push(bridge);
        }
        let decision = self.decide_own(key, cost)?;
        if decision.is_allowed() && cost > 0 {
            for bridge in holding {
                bridge.charge(key, cost);
            }
        }
        Ok(decision)
    }

    /// A budget's charge of `cost` to `key` ([`RuleLimiter::charge_budget`]),
    /// recorded in the old limits too while a bridge still holds a state
    /// for the key (a charge is never refused, by the old limits neither).
    fn charge_budget(&self, key: &str, cost: u64) -> Decision {
        for bridge in self.bridges.load().iter() {
            let state = bridge.peek(key, 0);
            if state.remaining() < state.limit() || state.is_denied() {
                bridge.charge(key, cost);
            }
        }
        self.limiter.charge_budget(key, cost)
    }

    /// Applies `control` to the rule's limiter and to its bridges, so that
    /// a list, a penalty, a reset or a refund means the same under both.
    /// The rule's limiter answers: a bridge that cannot hold a list entry
    /// refuses more, never less, so its error is not the caller's.
    fn control(&self, key: &str, control: Control) -> Result<(), ControlError> {
        if self.compact.is_some() {
            // The tables hold no lists, penalties or overrides: one answer
            // for the whole rule (`backend/compact.rs`).
            return Err(ControlError::Unsupported(control.name()));
        }
        self.limiter.control(key, control)?;
        for bridge in self.bridges.load().iter() {
            let _ = bridge.control(key, control);
        }
        Ok(())
    }

    /// Sweeps the limiter and the bridges, and ends the bridges left empty.
    fn sweep(&self) {
        self.limiter.sweep();
        if let Some(compact) = &self.compact {
            compact.sweep();
        }
        let compact_bridges = self.compact_bridges.load();
        if !compact_bridges.is_empty() {
            for bridge in compact_bridges.iter() {
                bridge.sweep();
            }
            if compact_bridges.iter().any(|b| b.is_empty()) {
                let left: Vec<Arc<CompactRule>> = compact_bridges
                    .iter()
                    .filter(|b| !b.is_empty())
                    .cloned()
                    .collect();
                self.compact_bridges.store(Arc::new(left));
            }
        }
        let bridges = self.bridges.load();
        if bridges.is_empty() {
            return;
        }
        for bridge in bridges.iter() {
            bridge.sweep();
        }
        if bridges.iter().any(RuleLimiter::is_empty) {
            let left: Vec<RuleLimiter> =
                bridges.iter().filter(|b| !b.is_empty()).cloned().collect();
            self.bridges.store(Arc::new(left));
        }
    }

    /// Nothing to remember: every bucket fresh, no bridge left.
    fn is_empty(&self) -> bool {
        self.limiter.is_empty()
            && self.bridges.load().is_empty()
            && self.compact.as_ref().is_none_or(|c| c.is_empty())
            && self.compact_bridges.load().is_empty()
    }
}

/// Counts in this process: one keyed limiter per rule.
pub struct MemoryBackend {
    clock: ClockSource,
    limiters: ArcSwap<HashMap<Arc<str>, Arc<Installed>>>,
    /// Removed rules' buckets, by rule path, until they are all fresh (see
    /// the module docs). The lock serialises installs too (reloads are
    /// rare; decisions never take it).
    retired: std::sync::Mutex<HashMap<Arc<str>, Arc<Installed>>>,
    /// The limiters of `limit` overrides, by rule path (see the module
    /// docs).
    dynamic: std::sync::Mutex<HashMap<Arc<str>, RuleLimiter>>,
    /// Lyft's counts of its fixed-window rules, when asked
    /// ([`with_lyft_counts`](Self::with_lyft_counts)).
    lyft: Option<lyft_counts::LyftCounts>,
    /// The capacity of each compact table, when rules that qualify are
    /// placed on them ([`with_compact_keys`](Self::with_compact_keys)).
    compact_keys: Option<usize>,
}

/// The most override rules (distinct keys and limits) held at once by the
/// in-memory backend.
pub const MAX_DYNAMIC_RULES: usize = 10_000;

/// A denial that no wait turns into an admission.
fn never(capacity: u64) -> Decision {
    Decision::from_parts(false, capacity, 0, Duration::MAX, Duration::ZERO)
}

impl MemoryBackend {
    /// A backend whose limiters read `clock`.
    pub fn new(clock: impl Into<ClockSource>) -> MemoryBackend {
        MemoryBackend {
            clock: clock.into(),
            limiters: ArcSwap::from_pointee(HashMap::new()),
            retired: std::sync::Mutex::new(HashMap::new()),
            dynamic: std::sync::Mutex::new(HashMap::new()),
            lyft: None,
            compact_keys: None,
        }
    }

    /// Places every rule that qualifies (one client address or numeric id
    /// a bucket, one GCRA or fixed window: `backend/compact.rs`) on
    /// compact tables of `max_keys` keys each, one a kind of value, each
    /// built at its first value; `None` (the default) keeps every rule in
    /// its keyed map. Rules installed from then on are placed.
    #[must_use]
    pub fn with_compact_keys(mut self, max_keys: Option<usize>) -> MemoryBackend {
        self.compact_keys = max_keys.filter(|&n| n > 0);
        self
    }

    /// Values held in compact tables, over every rule in force (for tests
    /// and the load example).
    pub fn compact_keys_live(&self) -> usize {
        self.limiters
            .load()
            .values()
            .filter_map(|installed| installed.compact.as_ref())
            .map(|compact| compact.live())
            .sum()
    }

    /// Whether the rule `id` in force is placed on compact tables.
    pub fn is_compact(&self, id: &str) -> bool {
        self.limiters
            .load()
            .get(id)
            .is_some_and(|installed| installed.compact.is_some())
    }

    /// The rule's compact tables for `algorithm`, where it qualifies.
    fn compact_of(&self, rule: &Rule, algorithm: &BuiltAlgorithm) -> Option<CompactRule> {
        if self.lyft_of(rule).is_some() {
            return None;
        }
        CompactRule::new(rule, algorithm, &self.clock, self.compact_keys?)
    }

    /// Counts fixed-window rules of Lyft's units as envoyproxy/ratelimit
    /// does, every hit, refused ones too (see `backend/lyft_counts.rs`), on the
    /// wall clock (or the manual clock given). By default, tollgate's
    /// rule: a refusal writes nothing.
    #[must_use]
    pub fn with_lyft_counts(mut self, on: bool) -> MemoryBackend {
        self.lyft = on.then(lyft_counts::LyftCounts::default);
        self
    }

    /// Lyft's counts and `rule`'s window, where they decide `rule`.
    fn lyft_of(&self, rule: &Rule) -> Option<(&lyft_counts::LyftCounts, lyft_counts::LyftRule)> {
        Some((self.lyft.as_ref()?, lyft_counts::lyft_rule(rule)?))
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("rules", &self.limiters.load().len())
            .finish_non_exhaustive()
    }
}

impl MemoryBackend {
    /// Decides a `limit` override's hit on its own limiter.
    fn decide_dynamic(
        &self,
        hit: &Hit<'_>,
        limits: &crate::config::Limits,
    ) -> Result<Decision, tollgate::CostError> {
        let limiter = {
            let mut dynamic = self
                .dynamic
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match dynamic.get(&hit.rule.id) {
                Some(limiter) => limiter.clone(),
                None if dynamic.len() >= MAX_DYNAMIC_RULES => {
                    return Ok(never(limits.algorithm.capacity()));
                }
                None => {
                    let limiter = RuleLimiter::new(&limits.algorithm, &self.clock);
                    dynamic.insert(Arc::clone(&hit.rule.id), limiter.clone());
                    limiter
                }
            }
        };
        limiter.decide(hit.key, hit.cost)
    }
}

impl Backend for MemoryBackend {
    fn counts_refused(&self, rule: &Rule) -> bool {
        self.lyft_of(rule).is_some()
    }

    fn control<'a>(&'a self, rule: &'a Rule, key: &'a str, control: Control) -> ControlFuture<'a> {
        if self.lyft_of(rule).is_some() {
            // Lyft's counts hold a bare count (see `lyft_counts`).
            return Box::pin(std::future::ready(Err(ControlError::Unsupported(
                control.name(),
            ))));
        }
        let result = match self.limiters.load().get(&rule.id) {
            Some(installed) => installed.control(key, control),
            None => Err(ControlError::Backend(BackendError::new(format!(
                "rule {} is not in force (a reload raced)",
                rule.id
            )))),
        };
        Box::pin(std::future::ready(result))
    }

    fn health(&self) -> BackendHealth {
        BackendHealth {
            kind: "memory",
            policy: None,
            store: None,
        }
    }

    fn install(&self, rules: &RuleSet) -> Result<(), BackendError> {
        let mut retired = self
            .retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.limiters.load_full();
        for (id, installed) in old.iter() {
            retired.insert(Arc::clone(id), Arc::clone(installed));
        }
        let mut new = HashMap::with_capacity(rules.rules().len());
        for rule in rules.rules() {
            let Some(limits) = &rule.limits else { continue };
            // The rule's limiter until now (in force, or retired by an
            // earlier reload).
            let previous = retired.remove(&rule.id);
            let placed = self.compact_of(rule, &limits.algorithm).is_some();
            let kept = previous.as_ref().and_then(|installed| {
                // A rule that moves onto or off compact tables (a budget
                // added, one quota become two) gets a new limiter, the old
                // one and its tables kept as bridges (below): the values
                // that change place keep their states.
                if installed.compact.is_some() != placed {
                    return None;
                }
                if installed.algorithm == limits.algorithm {
                    return Some(Arc::clone(installed));
                }
                installed.limiter.adopt(&limits.algorithm).then(|| {
                    // The keyed limiter adopts the new limits; compact
                    // tables cannot, and stay as a bridge.
                    Arc::new(
                        Installed::new(
                            limits.algorithm.clone(),
                            installed.limiter.clone(),
                            installed.bridges.load().to_vec(),
                        )
                        .with_compact(self.compact_of(rule, &limits.algorithm), Some(installed)),
                    )
                })
            });
            let installed = match kept {
                Some(installed) => installed,
                None => {
                    let limiter = RuleLimiter::new(&limits.algorithm, &self.clock);
                    // A change of algorithm or of placement: the lists and penalties move to
                    // the new limiter, and the old one stays beside it as a
                    // bridge until its states are fresh (module docs).
                    let mut bridges = Vec::new();
                    if let Some(previous) = &previous {
                        previous.limiter.copy_controls_to(&limiter).map_err(|e| {
                            BackendError::new(format!(
                                "rule {}: its lists and penalties do not fit the new limiter: {e}",
                                rule.id
                            ))
                        })?;
                        bridges.push(previous.limiter.clone());
                        bridges.extend(previous.bridges.load().iter().cloned());
                    }
                    Arc::new(
                        Installed::new(limits.algorithm.clone(), limiter, bridges).with_compact(
                            self.compact_of(rule, &limits.algorithm),
                            previous.as_deref(),
                        ),
                    )
                }
            };
            new.insert(Arc::clone(&rule.id), installed);
        }
        self.limiters.store(Arc::new(new));
        Ok(())
    }

    fn decide<'a>(&'a self, hits: &'a [Hit<'a>]) -> DecideFuture<'a> {
        let limiters = self.limiters.load();
        let now = || tollgate::Clock::now(&wall_clock(&self.clock));
        let decisions = hits
            .iter()
            .map(|hit| {
                if let Some((counts, rule)) = self.lyft_of(hit.rule) {
                    let bucket = format!("{}|{}", hit.rule.id, hit.key);
                    return counts.decide(&bucket, rule, hit.cost, now());
                }
                let decision = match (limiters.get(&hit.rule.id), &hit.rule.limits) {
                    (_, Some(limits)) if hit.rule.dynamic => self.decide_dynamic(hit, limits),
                    // A budget's charge is recorded, fitting or not.
                    (Some(installed), _) if hit.rule.budget.is_some() && hit.cost > 0 => {
                        Ok(installed.charge_budget(hit.key, hit.cost))
                    }
                    (Some(installed), _) => installed.decide(hit.key, hit.cost),
                    // Raced a reload: decided as a fresh bucket.
                    (None, Some(limits)) => {
                        let fresh = RuleLimiter::new(&limits.algorithm, &self.clock);
                        if hit.rule.budget.is_some() && hit.cost > 0 {
                            Ok(fresh.charge_budget(hit.key, hit.cost))
                        } else {
                            fresh.decide(hit.key, hit.cost)
                        }
                    }
                    // Unlimited rules never reach a backend; if one did, it is unlimited.
                    (None, None) => Ok(Decision::from_parts(
                        true,
                        u64::MAX,
                        u64::MAX,
                        Duration::ZERO,
                        Duration::ZERO,
                    )),
                };
                // The server checks costs first; only a reload that lowered
                // the capacity in between lands here: a denial, never to fit.
                decision.unwrap_or_else(|error| never(error.capacity()))
            })
            .collect();
        Box::pin(std::future::ready(Ok(decisions)))
    }

    fn sweep(&self) {
        if let Some(counts) = &self.lyft {
            counts.sweep(tollgate::Clock::now(&wall_clock(&self.clock)));
        }
        for installed in self.limiters.load().values() {
            installed.sweep();
        }
        let mut retired = self
            .retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        retired.retain(|_, installed| {
            installed.sweep();
            !installed.is_empty()
        });
        drop(retired);
        self.dynamic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, limiter| {
                limiter.sweep();
                !limiter.is_empty()
            });
    }
}

/// How often the server calls [`Backend::sweep`].
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use tollgate::ManualClock;

    use super::*;
    use crate::config::Config;

    fn rules(algorithm: &str) -> RuleSet {
        let yaml = format!(
            "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {{period: 1s, requests_per_unit: 2, algorithm: {algorithm}}}\n"
        );
        RuleSet::new(&Config::from_yaml(Path::new("t.yaml"), &yaml).expect("config"))
    }

    fn decide(backend: &MemoryBackend, rules: &RuleSet, key: &str) -> bool {
        let (rule, _) = rules.find_bucket("rl", [("user", key)]).expect("rule");
        let hit = Hit { rule, key, cost: 1 };
        let future = backend.decide(std::slice::from_ref(&hit));
        let decisions = ready(future);
        decisions[0].is_allowed()
    }

    /// The backend's futures are ready at once.
    fn ready(future: DecideFuture<'_>) -> Vec<Decision> {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = future;
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(decisions) => decisions.expect("decided"),
            std::task::Poll::Pending => panic!("the memory backend never waits"),
        }
    }

    fn bridges(backend: &MemoryBackend) -> usize {
        backend
            .limiters
            .load()
            .values()
            .map(|i| i.bridges.load().len())
            .sum()
    }

    #[test]
    fn a_bridge_ends_once_the_sweeper_finds_its_states_fresh() {
        let clock = ManualClock::new();
        let backend = MemoryBackend::new(clock.clone());
        let gcra = rules("gcra");
        backend.install(&gcra).expect("install");
        assert!(decide(&backend, &gcra, "a"));
        assert!(decide(&backend, &gcra, "a"));
        assert!(!decide(&backend, &gcra, "a"));

        let window = rules("fixed_window");
        backend.install(&window).expect("install");
        assert_eq!(bridges(&backend), 1);
        assert!(!decide(&backend, &window, "a"), "the GCRA's state holds");
        backend.sweep();
        assert_eq!(
            bridges(&backend),
            1,
            "a state still counts: the bridge stands"
        );

        // A full second later the GCRA's state is fresh: the sweeper drops
        // it, and with it the bridge.
        clock.advance(Duration::from_secs(1));
        backend.sweep();
        assert_eq!(bridges(&backend), 0);
        assert!(decide(&backend, &window, "a"));
        assert!(decide(&backend, &window, "a"));
        assert!(!decide(&backend, &window, "a"), "the new limits alone");
    }
}
