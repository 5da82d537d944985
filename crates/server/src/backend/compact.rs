//! Rules served from the core's compact keyed table
//! (`tollgate::keyed::compact`): about 14 bytes a client IPv4 address, 27
//! an IPv6 one and 18 a numeric id, where the keyed map takes a `String`
//! bucket and its entry (the server's resident growth at 10^7 client
//! addresses through the RLS: 72.5–119.2 bytes an address in the keyed
//! map, 13.8–13.9 on the tables; `BENCHMARKS.md`).
//!
//! # Which rules qualify
//!
//! Only when the in-memory backend was given a capacity
//! ([`MemoryBackend::with_compact_keys`](super::MemoryBackend::with_compact_keys),
//! which the server calls with `server.compact_keys`, `tollgate serve
//! --compact-keys` or `TOLLGATE_COMPACT_KEYS`: `config/compact_keys.rs`;
//! off by default), a rule is placed on compact tables when all of these
//! hold:
//!
//! - its path is **one value-less entry** (`- key: remote_address`, or
//!   any key whose values are ids): every value is its own bucket, and
//!   the bucket is the value alone;
//! - its limit is **one quota, GCRA or fixed window** (no sliding window
//!   or log, calendar window, warm-up, or several quotas: the table keeps
//!   one 8-byte state a key);
//! - it is not a **budget** (`budget: {unit: tokens}`: a charge is
//!   recorded into debt by the keyed limiter, which the table cannot do,
//!   and a look must read the state the charges wrote);
//! - it is not a request's `limit` override, nor counted as Lyft counts
//!   (those never reach this module).
//!
//! So a `remote_address` or numeric-id rule with a **named value**
//! (`value: 10.0.0.1`), several quotas (`rate_limits:`), a sliding window,
//! log, calendar window or warm-up, a path of several entries, a budget or
//! an override stays in the keyed map.
//!
//! Such a rule keeps its keyed map beside the tables. A value goes to a
//! table when it is one fixed-size value written as the type prints it: an
//! IPv4 address (`10.0.0.1`), an IPv6 address (`2001:db8::1`) or a decimal
//! `u64` (`42`); any other value (a name, `042`, `0::1`, an address with
//! a port) stays in the keyed map. Because only the printed form is taken,
//! two distinct bucket strings are never one table key, and every bucket
//! has exactly one state in one place: **the decisions are the keyed
//! map's** (the compact table decides exactly as the keyed limiter under
//! the same quota).
//!
//! # Memory
//!
//! A table per kind of value, each built at the rule's first value of
//! that kind and sized once for the capacity (`max_keys`): 13.7 bytes a
//! key for IPv4, 27.4 for IPv6, 18.3 for ids, whatever the traffic. A
//! table whose memory the allocator refuses is not built: its values stay
//! in the keyed map (logged once), decided exactly as before. When a
//! table holds `max_keys` live values, a new value is decided on the
//! table's one shared overflow state until the sweep frees slots (the
//! compact table's rule: no live key is evicted); the keyed map has no
//! such cap. Size the capacity above the distinct values a sweep period
//! can bring.
//!
//! # What such a rule gives up
//!
//! - **Admin controls** (lists, penalties, reset, refund): the table
//!   keeps no lists, penalties or per-key overrides, so every control on a
//!   compact rule is refused as unsupported, loudly, for its keyed values
//!   too (one rule, one answer).
//! - **Carrying state across a change of its limits.** The table cannot
//!   adopt a new quota in place: a reload that changes the rule's limits
//!   builds new tables and keeps the old ones as a *bridge* until the sweep
//!   finds them empty. A value with a state there (not a full one) is
//!   decided by the old limits first, taking the permits: if they refuse,
//!   the request is refused with nothing taken under the new limits; if
//!   they admit and the new limits refuse, the old limits stay charged
//!   (counted, never handed out: a bridge errs towards refusing, never
//!   towards a fresh quota).

use std::fmt;
use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use tollgate::keyed::compact::{CompactKeyedLimiter, FixedKey};
use tollgate::{Algorithm, ClockSource, CostError, Decision, FixedWindow, Gcra};

use crate::config::BuiltAlgorithm;
use crate::rules::Rule;

/// A bucket's value as a fixed-size key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    Id(u64),
}

impl Value {
    /// `value` as a fixed-size key, if it is one written as its type
    /// prints it (module docs, "Which rules qualify").
    pub(crate) fn parse(value: &str) -> Option<Value> {
        let parsed = if value.contains(':') {
            Value::V6(value.parse().ok()?)
        } else if value.contains('.') {
            Value::V4(value.parse().ok()?)
        } else {
            Value::Id(value.parse().ok()?)
        };
        // The printed form, on the stack: an IPv6 address prints in at
        // most 45 bytes, a u64 in 20.
        let mut printed = [0u8; 48];
        let len = {
            let mut out = &mut printed[..];
            let room = out.len();
            match parsed {
                Value::V4(a) => write!(out, "{a}"),
                Value::V6(a) => write!(out, "{a}"),
                Value::Id(n) => write!(out, "{n}"),
            }
            .ok()?;
            room - out.len()
        };
        (printed[..len] == *value.as_bytes()).then_some(parsed)
    }
}

/// A rule's compact tables, for one algorithm.
struct Tables<A> {
    algorithm: A,
    clock: ClockSource,
    max_keys: usize,
    v4: OnceLock<Option<CompactKeyedLimiter<Ipv4Addr, A>>>,
    v6: OnceLock<Option<CompactKeyedLimiter<Ipv6Addr, A>>>,
    id: OnceLock<Option<CompactKeyedLimiter<u64, A>>>,
}

impl<A> Tables<A>
where
    A: Algorithm<Cell = std::sync::atomic::AtomicU64> + Clone,
{
    fn new(algorithm: A, clock: &ClockSource, max_keys: usize) -> Tables<A> {
        Tables {
            algorithm,
            clock: clock.clone(),
            max_keys,
            v4: OnceLock::new(),
            v6: OnceLock::new(),
            id: OnceLock::new(),
        }
    }

    /// The table of `K`, built at its first use (`None`: its memory was
    /// refused, and its values stay in the keyed map).
    fn table<'a, K: FixedKey>(
        &self,
        cell: &'a OnceLock<Option<CompactKeyedLimiter<K, A>>>,
        kind: &str,
    ) -> Option<&'a CompactKeyedLimiter<K, A>> {
        cell.get_or_init(|| {
            CompactKeyedLimiter::builder(self.algorithm.clone(), self.max_keys)
                .clock(self.clock.clone())
                // One sweeper for every rule, driven by the server.
                .sweep_every(None)
                .build()
                .inspect_err(|error| {
                    tracing::warn!(%error, kind, "compact table not built: these values stay in the keyed map");
                })
                .ok()
        })
        .as_ref()
    }

    fn decide(&self, value: Value, cost: u64) -> Option<Result<Decision, CostError>> {
        Some(match value {
            Value::V4(a) => self.table(&self.v4, "ipv4")?.check_n(&a, cost),
            Value::V6(a) => self.table(&self.v6, "ipv6")?.check_n(&a, cost),
            Value::Id(n) => self.table(&self.id, "id")?.check_n(&n, cost),
        })
    }

    /// Whether `value` has a state here, without creating one.
    fn holds(&self, value: Value) -> bool {
        let look = |decision: Result<Decision, CostError>| {
            decision.is_ok_and(|d| d.is_denied() || d.remaining() < d.limit())
        };
        match value {
            Value::V4(a) => self
                .v4
                .get()
                .and_then(Option::as_ref)
                .is_some_and(|t| look(t.check_n(&a, 0))),
            Value::V6(a) => self
                .v6
                .get()
                .and_then(Option::as_ref)
                .is_some_and(|t| look(t.check_n(&a, 0))),
            Value::Id(n) => self
                .id
                .get()
                .and_then(Option::as_ref)
                .is_some_and(|t| look(t.check_n(&n, 0))),
        }
    }

    fn sweep(&self) {
        for swept in [
            self.v4.get().and_then(Option::as_ref).map(|t| t.sweep()),
            self.v6.get().and_then(Option::as_ref).map(|t| t.sweep()),
            self.id.get().and_then(Option::as_ref).map(|t| t.sweep()),
        ] {
            let _ = swept;
        }
    }

    fn is_empty(&self) -> bool {
        self.v4
            .get()
            .and_then(Option::as_ref)
            .is_none_or(|t| t.is_empty())
            && self
                .v6
                .get()
                .and_then(Option::as_ref)
                .is_none_or(|t| t.is_empty())
            && self
                .id
                .get()
                .and_then(Option::as_ref)
                .is_none_or(|t| t.is_empty())
    }

    fn live(&self) -> usize {
        self.v4
            .get()
            .and_then(Option::as_ref)
            .map_or(0, |t| t.len())
            + self
                .v6
                .get()
                .and_then(Option::as_ref)
                .map_or(0, |t| t.len())
            + self
                .id
                .get()
                .and_then(Option::as_ref)
                .map_or(0, |t| t.len())
    }
}

enum ByAlgorithm {
    Gcra(Tables<Gcra>),
    FixedWindow(Tables<FixedWindow>),
}

/// A qualifying rule's compact tables (module docs).
pub(crate) struct CompactRule {
    /// What precedes the value in the rule's bucket keys: the entry's key,
    /// length-prefixed (`rules.rs`, "Buckets").
    prefix: String,
    tables: ByAlgorithm,
}

impl fmt::Debug for CompactRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactRule")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl CompactRule {
    /// `rule`'s compact tables for `algorithm`, with room for `max_keys`
    /// values of each kind, if the rule qualifies (module docs).
    pub(crate) fn new(
        rule: &Rule,
        algorithm: &BuiltAlgorithm,
        clock: &ClockSource,
        max_keys: usize,
    ) -> Option<CompactRule> {
        let [(key, None)] = rule.path.as_slice() else {
            return None;
        };
        // A budget's charges are recorded by the keyed limiter, into debt
        // (`config/budget.rs`): its looks must read the same state.
        if rule.dynamic || rule.budget.is_some() {
            return None;
        }
        let tables = match algorithm {
            BuiltAlgorithm::Gcra(all) => match all.limits() {
                [one] => ByAlgorithm::Gcra(Tables::new(one.clone(), clock, max_keys)),
                _ => return None,
            },
            BuiltAlgorithm::FixedWindow(all) => match all.limits() {
                [one] => ByAlgorithm::FixedWindow(Tables::new(one.clone(), clock, max_keys)),
                _ => return None,
            },
            _ => return None,
        };
        Some(CompactRule {
            prefix: format!("{}:{key}", key.len()),
            tables,
        })
    }

    /// The value of a bucket key of this rule, if it is a fixed-size one.
    pub(crate) fn value_of(&self, bucket: &str) -> Option<Value> {
        let (len, value) = bucket.strip_prefix(&self.prefix)?.split_once(':')?;
        if len.parse::<usize>().ok()? != value.len() {
            return None;
        }
        Value::parse(value)
    }

    /// Decides `cost` for `value` (a cost of 0 only looks); `None` if its
    /// table could not be built (the keyed map decides it).
    pub(crate) fn decide(&self, value: Value, cost: u64) -> Option<Result<Decision, CostError>> {
        match &self.tables {
            ByAlgorithm::Gcra(t) => t.decide(value, cost),
            ByAlgorithm::FixedWindow(t) => t.decide(value, cost),
        }
    }

    /// Whether `value` has a state that is not fresh (a bridge decides only
    /// those: module docs).
    pub(crate) fn holds(&self, value: Value) -> bool {
        match &self.tables {
            ByAlgorithm::Gcra(t) => t.holds(value),
            ByAlgorithm::FixedWindow(t) => t.holds(value),
        }
    }

    pub(crate) fn sweep(&self) {
        match &self.tables {
            ByAlgorithm::Gcra(t) => t.sweep(),
            ByAlgorithm::FixedWindow(t) => t.sweep(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match &self.tables {
            ByAlgorithm::Gcra(t) => t.is_empty(),
            ByAlgorithm::FixedWindow(t) => t.is_empty(),
        }
    }

    /// Values with a state in the tables.
    pub(crate) fn live(&self) -> usize {
        match &self.tables {
            ByAlgorithm::Gcra(t) => t.live(),
            ByAlgorithm::FixedWindow(t) => t.live(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use tollgate::ManualClock;

    use super::*;
    use crate::backend::{Backend, Control, ControlError, DecideFuture, Hit, MemoryBackend};
    use crate::config::Config;
    use crate::rules::RuleSet;

    #[test]
    fn only_the_printed_form_of_a_fixed_size_value_is_one() {
        assert_eq!(
            Value::parse("10.0.0.1"),
            Some(Value::V4(Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert_eq!(
            Value::parse("2001:db8::1"),
            Some(Value::V6("2001:db8::1".parse().unwrap()))
        );
        assert_eq!(Value::parse("0"), Some(Value::Id(0)));
        assert_eq!(
            Value::parse("18446744073709551615"),
            Some(Value::Id(u64::MAX))
        );
        for other in [
            "",
            "010.0.0.1",
            "10.0.0.01",
            "0::1",
            "2001:DB8::1",
            "2001:0db8::1",
            "::ffff:10.0.0.1x",
            "042",
            "+42",
            "-1",
            "18446744073709551616",
            "10.0.0.1:80",
            "user",
            "1e3",
            " 1",
        ] {
            assert_eq!(Value::parse(other), None, "{other:?}");
        }
    }

    const RULES: &str = "domain: rl
descriptors:
  - key: remote_address
    rate_limit: {period: 1s, requests_per_unit: 3, algorithm: gcra}
  - key: account
    rate_limit: {period: 1s, requests_per_unit: 2, algorithm: fixed_window}
  - key: sliding
    rate_limit: {period: 1s, requests_per_unit: 3, algorithm: sliding_window}
  - key: tenant
    descriptors:
      - key: remote_address
        rate_limit: {period: 1s, requests_per_unit: 3, algorithm: gcra}
  - key: remote_address
    value: 10.9.9.9
    rate_limit: {period: 1s, requests_per_unit: 2, algorithm: gcra}
  - key: several
    rate_limits:
      - {period: 1s, requests_per_unit: 3, algorithm: gcra}
      - {period: 1m, requests_per_unit: 20, algorithm: gcra}
  - key: spend
    budget: {unit: tokens}
    rate_limit: {period: 1s, requests_per_unit: 3, algorithm: gcra}
";

    fn rules(yaml: &str) -> RuleSet {
        RuleSet::new(&Config::from_yaml(Path::new("t.yaml"), yaml).expect("config"))
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

    /// What a decision tells, for comparing two backends' answers.
    fn told(d: &Decision) -> (bool, u64, u64, Duration, Duration) {
        (
            d.is_allowed(),
            d.limit(),
            d.remaining(),
            d.retry_after(),
            d.reset_after(),
        )
    }

    fn decide(
        backend: &MemoryBackend,
        rules: &RuleSet,
        entries: &[(&str, &str)],
        cost: u64,
    ) -> Decision {
        let (rule, key) = rules
            .find_bucket("rl", entries.iter().copied())
            .expect("a rule");
        let hit = Hit {
            rule,
            key: &key,
            cost,
        };
        ready(backend.decide(std::slice::from_ref(&hit)))[0]
    }

    #[test]
    fn a_qualifying_rule_is_placed_on_compact_tables_and_decides_as_the_keyed_map() {
        let clock = ManualClock::new();
        let compact = MemoryBackend::new(clock.clone()).with_compact_keys(Some(1_000));
        let keyed = MemoryBackend::new(clock.clone());
        let set = rules(RULES);
        compact.install(&set).expect("install");
        keyed.install(&set).expect("install");

        let placed = |backend: &MemoryBackend, entries: &[(&str, &str)]| {
            let (rule, _) = set
                .find_bucket("rl", entries.iter().copied())
                .expect("a rule");
            backend.is_compact(&rule.id)
        };
        // One value-less entry under one GCRA or fixed window: placed.
        assert!(placed(&compact, &[("remote_address", "10.0.0.1")]));
        assert!(placed(&compact, &[("account", "42")]));
        // A sliding window, a path of two entries, a named value, several
        // quotas, a budget: not placed.
        assert!(!placed(&compact, &[("sliding", "42")]));
        assert!(!placed(
            &compact,
            &[("tenant", "t"), ("remote_address", "10.0.0.1")]
        ));
        assert!(!placed(&compact, &[("remote_address", "10.9.9.9")]));
        assert!(!placed(&compact, &[("several", "42")]));
        assert!(!placed(&compact, &[("spend", "42")]));
        // Without a capacity, nothing is.
        assert!(!placed(&keyed, &[("remote_address", "10.0.0.1")]));

        let values = [
            "10.0.0.1",
            "2001:db8::7",
            "42",
            // The named value's own rule.
            "10.9.9.9",
            // Not the printed form of a fixed-size value: the keyed map.
            "010.0.0.1",
            "alice",
        ];
        let mut requests: Vec<Vec<(&str, &str)>> = Vec::new();
        for value in values {
            for key in ["remote_address", "account", "sliding", "several", "spend"] {
                requests.push(vec![(key, value)]);
            }
            requests.push(vec![("tenant", "t"), ("remote_address", value)]);
        }
        for step in 0..12u64 {
            for entries in &requests {
                // Costs of 1 and 2, and a look, in turn.
                let cost = (step + entries.len() as u64) % 3;
                let a = decide(&compact, &set, entries, cost);
                let b = decide(&keyed, &set, entries, cost);
                assert_eq!(told(&a), told(&b), "step {step}, {entries:?}, cost {cost}");
            }
            clock.advance(Duration::from_millis(150));
        }
        // The fixed-size values of the two placed rules live in tables
        // (10.9.9.9 only in `account`'s: it has its own rule as an
        // address); the others in the keyed maps.
        assert_eq!(compact.compact_keys_live(), 7);
        assert_eq!(keyed.compact_keys_live(), 0);
    }

    #[test]
    fn an_override_is_never_placed_and_decides_as_the_keyed_map() {
        let clock = ManualClock::new();
        let compact = MemoryBackend::new(clock.clone()).with_compact_keys(Some(1_000));
        let keyed = MemoryBackend::new(clock.clone());
        let set = rules(RULES);
        compact.install(&set).expect("install");
        keyed.install(&set).expect("install");
        // A request's `limit` on `account` (one fixed window, one
        // value-less entry: the file's rule is placed).
        let (rule, key) = set.find_bucket("rl", [("account", "42")]).expect("a rule");
        let mut over = (**rule).clone();
        over.dynamic = true;
        over.id = format!("{}|2/second", rule.id).into();
        let limits = over.limits.as_ref().expect("limits");
        assert!(
            CompactRule::new(&over, &limits.algorithm, &ManualClock::new().into(), 10).is_none()
        );
        for step in 0..8u64 {
            let hit = Hit {
                rule: &over,
                key: &key,
                cost: step % 3,
            };
            let a = ready(compact.decide(std::slice::from_ref(&hit)))[0];
            let b = ready(keyed.decide(std::slice::from_ref(&hit)))[0];
            assert_eq!(told(&a), told(&b), "step {step}");
            clock.advance(Duration::from_millis(200));
        }
        assert_eq!(compact.compact_keys_live(), 0);
    }

    /// Regression: a reload that put a rule on compact tables (two quotas
    /// become one) kept its keyed limiter as the rule's own and sent its
    /// fixed-size values to fresh tables: a spent address got a fresh
    /// quota. The values that change place keep their states, both ways.
    #[test]
    fn a_reload_that_moves_a_rule_onto_or_off_the_tables_keeps_every_state() {
        const TWO: &str = "domain: rl
descriptors:
  - key: remote_address
    rate_limits:
      - {period: 1s, requests_per_unit: 3, algorithm: gcra}
      - {period: 1m, requests_per_unit: 30, algorithm: gcra}
";
        const ONE: &str = "domain: rl
descriptors:
  - key: remote_address
    rate_limit: {period: 1s, requests_per_unit: 3, algorithm: gcra}
";
        let clock = ManualClock::new();
        let backend = MemoryBackend::new(clock.clone()).with_compact_keys(Some(1_000));
        for (step, (from, to, placed)) in [(TWO, ONE, true), (ONE, TWO, false)]
            .into_iter()
            .enumerate()
        {
            let (from, to) = (rules(from), rules(to));
            backend.install(&from).expect("install");
            assert_eq!(
                backend.is_compact("rl.remote_address"),
                !placed,
                "step {step}"
            );
            for value in ["10.0.0.1", "alice"] {
                let address = [("remote_address", value)];
                for _ in 0..3 {
                    assert!(decide(&backend, &from, &address, 1).is_allowed());
                }
                assert!(decide(&backend, &from, &address, 1).is_denied());
            }
            backend.install(&to).expect("reload");
            assert_eq!(
                backend.is_compact("rl.remote_address"),
                placed,
                "step {step}"
            );
            for value in ["10.0.0.1", "alice"] {
                let address = [("remote_address", value)];
                assert!(
                    decide(&backend, &to, &address, 1).is_denied(),
                    "step {step}, {value}: a spent bucket got a fresh quota"
                );
            }
            // Every state fresh again, every bridge ended.
            clock.advance(Duration::from_secs(70));
            backend.sweep();
        }
    }

    #[test]
    fn controls_are_refused_on_a_compact_rule_and_a_change_of_limits_hands_out_no_fresh_quota() {
        let clock = ManualClock::new();
        let backend = MemoryBackend::new(clock.clone()).with_compact_keys(Some(1_000));
        let set = rules(RULES);
        backend.install(&set).expect("install");
        let (rule, key) = set
            .find_bucket("rl", [("remote_address", "10.0.0.9")])
            .expect("rule");
        let refused = ready_control(backend.control(rule, &key, Control::Reset));
        assert_eq!(refused, Err(ControlError::Unsupported("reset")));

        let address = [("remote_address", "10.0.0.9")];
        for _ in 0..3 {
            assert!(decide(&backend, &set, &address, 1).is_allowed());
        }
        assert!(decide(&backend, &set, &address, 1).is_denied());

        // Raised from 3 to 5 a second: the spent address stays refused
        // (the old tables bridge), a new one gets the new limits.
        let raised = rules(&RULES.replacen(
            "requests_per_unit: 3, algorithm: gcra}",
            "requests_per_unit: 5, algorithm: gcra}",
            1,
        ));
        backend.install(&raised).expect("reload");
        assert!(backend.is_compact("rl.remote_address"));
        assert!(decide(&backend, &raised, &address, 1).is_denied());
        let fresh = [("remote_address", "10.0.0.10")];
        for _ in 0..5 {
            assert!(decide(&backend, &raised, &fresh, 1).is_allowed());
        }
        assert!(decide(&backend, &raised, &fresh, 1).is_denied());

        // Once the old state is fresh, the sweep ends the bridge.
        clock.advance(Duration::from_secs(1));
        backend.sweep();
        let bridges: usize = backend
            .limiters
            .load()
            .values()
            .map(|i| i.compact_bridges.load().len())
            .sum();
        assert_eq!(bridges, 0);
        for _ in 0..5 {
            assert!(decide(&backend, &raised, &address, 1).is_allowed());
        }
    }

    fn ready_control(future: crate::backend::ControlFuture<'_>) -> Result<(), ControlError> {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = future;
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(result) => result,
            std::task::Poll::Pending => panic!("the memory backend never waits"),
        }
    }
}
