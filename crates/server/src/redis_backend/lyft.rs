//! `key_layout: lyft`: fixed-window rules count in envoyproxy/ratelimit's
//! own keys, so that during a rolling upgrade Lyft's old pods and
//! tollgate's new ones, on one Redis, share one count and the limit holds
//! across both fleets. The key format and the atomic transition are
//! `tollgate_redis::lyft`'s; this module picks the rules, builds each
//! descriptor's key, routes it to its Redis and applies Lyft's variables
//! ([`LyftLayout`]).
//!
//! # Model
//!
//! - **Which rules**: a rule of one fixed-window quota whose period is one of
//!   Lyft's units (`second` … `year`), and a request's `limit` override. Every
//!   other rule keeps tollgate's keys and its exact algorithm (Lyft's pods
//!   have no such rules to share).
//! - **The key**: `<key_prefix><domain>_<k1>_<v1>_…_<kn>_<vn>_<window start>`,
//!   the window start in UNIX seconds aligned to the unit (a month 30 days, a
//!   year 365, as Lyft); one script call per key, the clock read once.
//!
//! # Guarantees
//!
//! - Every aligned window admits ≤ limit across both fleets (the fixed
//!   window's weak guarantee, Lyft's: two adjacent windows may admit up to 2 ×
//!   limit across their edge). Neither fleet ever admits above the limit.
//! - With `count_over_limit` a refusal counts as Lyft's pods count it, so a
//!   mixed fleet answers as an all-Lyft one; without it a refusal counts
//!   nothing (tollgate's rule).
//! - Failure policy, deadline, breaker and deny cache are the rule's
//!   limiter's; leases and admin controls do not apply (Lyft's pods could not
//!   see them, its keys hold a bare count).
//! - No request is decided all-or-nothing across descriptors (Lyft's keys
//!   have no hash tag; neither is Lyft).
//!
//! # Parameters (defaults from [`LyftLayout`])
//!
//! - `key_prefix`: `""` (Lyft's `CACHE_KEY_PREFIX` default).
//! - `expiration_jitter_max`: 300 s (`EXPIRATION_JITTER_MAX_SECONDS`); each
//!   write's TTL is the unit plus a uniform `[0, jitter)` whole seconds.
//! - `stop_increment_when_over_limit`: false (Lyft's default).
//! - `count_over_limit`: false in the YAML; true from Lyft's environment.
//! - `per_second`: none; set, keys of unit `second` go to that second Redis
//!   (`REDIS_PERSECOND`).
//!
//! Every decision in full (the `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
//! look-then-count, what a refusal counts with and without
//! `count_over_limit`, overrides' looks, cluster slots):
//! `crates/server/docs/replacing-envoyproxy-ratelimit.md`, "Inside the
//! server".

use std::time::Duration;

use futures_util::future::join_all;
use tollgate::{Clock, ClockSource, Decision};
use tollgate_redis::lyft::{CountOp, Window, cache_key};
use tollgate_redis::{Redis, RedisLimiter, Source};

use crate::backend::Hit;
use crate::config::{LyftLayout, Unit};
use crate::rules::bucket_entries;

/// A rule's one window, and whether a rule counts in Lyft's layout: the
/// rules envoyproxy/ratelimit has (module docs), as the in-memory backend
/// picks them.
pub(super) use crate::backend::lyft_counts::{LyftRule, lyft_rule};

/// One hit to decide in Lyft's layout, with what decides it.
pub(super) struct LyftHit<'a> {
    pub(super) hit: &'a Hit<'a>,
    pub(super) rule: LyftRule,
    /// The rule's limiter: its policy, breaker, deadline and stats.
    pub(super) limiter: RedisLimiter,
}

/// The layout's settings and the Redis of per-second limits.
pub(super) struct Lyft {
    layout: LyftLayout,
    per_second: Option<Redis>,
    /// UNIX time (the window starts in the keys).
    clock: ClockSource,
}

/// One hit's answer: the decision, who took it, and which Redis it went
/// to (0 the backend's, 1 the per-second one).
pub(super) struct LyftDecided {
    pub(super) decision: Decision,
    pub(super) source: Source,
    pub(super) redis: usize,
}

/// A hit made ready: its key, Redis and TTL.
struct Planned<'a> {
    key: String,
    redis: &'a Redis,
    /// 0 the backend's Redis, 1 the per-second one.
    which: usize,
    rule: LyftRule,
    expire: u64,
    cost: u64,
    limiter: &'a RedisLimiter,
}

impl Planned<'_> {
    fn window(&self) -> Window<'_> {
        Window {
            key: &self.key,
            limit: self.rule.limit,
            divider: self.rule.unit.period().as_secs(),
            expire: self.expire,
        }
    }
}

impl Lyft {
    pub(super) fn new(layout: LyftLayout, clock: ClockSource) -> Lyft {
        Lyft {
            layout,
            per_second: None,
            clock,
        }
    }

    /// Whether every hit counts, refused or not (`count_over_limit`).
    pub(super) fn counts_refused(&self) -> bool {
        self.layout.count_over_limit
    }

    pub(super) fn set_per_second(&mut self, redis: Redis) {
        self.per_second = Some(redis);
    }

    pub(super) fn set_clock(&mut self, clock: ClockSource) {
        self.clock = clock;
    }

    /// The TTL of a write in a window of `divider` seconds.
    fn expire(&self, divider: u64) -> u64 {
        let jitter = self.layout.expiration_jitter_max.as_secs();
        let jitter = if jitter > 0 {
            fastrand::u64(0..jitter)
        } else {
            0
        };
        divider.saturating_add(jitter)
    }

    /// Decides `hits` (see the module docs), in order. A hit whose bucket
    /// does not read back as entries (never, for the server's buckets) is
    /// refused, never let through.
    pub(super) async fn decide(&self, main: &Redis, hits: &[LyftHit<'_>]) -> Vec<LyftDecided> {
        let now = self.clock.now();
        let seconds = now.as_u64() / 1_000_000_000;
        let planned: Vec<Option<Planned<'_>>> = hits
            .iter()
            .map(|h| {
                let entries = bucket_entries(h.hit.key)?;
                let divider = h.rule.unit.period().as_secs();
                let key = cache_key(
                    &self.layout.key_prefix,
                    &h.hit.rule.domain,
                    entries,
                    divider,
                    seconds,
                );
                let (redis, which) = match (&self.per_second, h.rule.unit) {
                    (Some(per_second), Unit::Second) => (per_second, 1),
                    _ => (main, 0),
                };
                Some(Planned {
                    key,
                    redis,
                    which,
                    rule: h.rule,
                    expire: self.expire(divider),
                    cost: h.hit.cost,
                    limiter: &h.limiter,
                })
            })
            .collect();
        let refused_hit = |h: &LyftHit<'_>| LyftDecided {
            decision: refused(h.rule.limit),
            source: Source::Redis,
            redis: 0,
        };
        let counting = planned.iter().flatten().filter(|p| p.cost > 0).count();
        // With `count_over_limit`, the hits each key counts (Lyft's
        // `getHitsAddend`); by default, its cost.
        let mut costs: Vec<u64> = planned
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.cost))
            .collect();
        if self.layout.stop_increment_when_over_limit && counting > 1 {
            let looks = join_all(planned.iter().map(|p| async move {
                let p = p.as_ref()?;
                let outcome = p
                    .limiter
                    .check_lyft(p.redis, &p.window(), CountOp::Peek, p.cost, now)
                    .await;
                Some(LyftDecided {
                    decision: outcome.decision,
                    source: outcome.source,
                    redis: p.which,
                })
            }))
            .await;
            let over: Vec<bool> = looks
                .iter()
                .map(|look| look.as_ref().is_some_and(|l| l.decision.is_denied()))
                .collect();
            let failed = looks
                .iter()
                .flatten()
                .any(|l| matches!(l.source, Source::Policy(_)));
            if over.iter().any(|&over| over) {
                if !self.layout.count_over_limit || failed {
                    return looks
                        .into_iter()
                        .zip(hits)
                        .map(|(look, h)| look.unwrap_or_else(|| refused_hit(h)))
                        .collect();
                }
                for (cost, over) in costs.iter_mut().zip(over) {
                    if !over {
                        *cost = 0;
                    }
                }
            }
        }
        let count_all = self.layout.count_over_limit;
        join_all(
            planned
                .iter()
                .zip(hits)
                .zip(costs)
                .map(|((p, h), cost)| async move {
                    let Some(p) = p else {
                        return refused_hit(h);
                    };
                    let op = match (count_all, p.cost) {
                        (true, _) => CountOp::Increment,
                        (false, 0) => CountOp::Peek,
                        (false, _) => CountOp::Check,
                    };
                    let outcome = p
                        .limiter
                        .check_lyft(p.redis, &p.window(), op, cost, now)
                        .await;
                    // A key counting 0 of its hits (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`)
                    // is answered on the count after, as Lyft answers it.
                    LyftDecided {
                        decision: outcome.decision,
                        source: outcome.source,
                        redis: p.which,
                    }
                }),
        )
        .await
    }
}

/// A denial for a hit whose rule has no limiter (one Redis cannot hold).
pub(super) fn refused(limit: u64) -> Decision {
    Decision::from_parts(false, limit, 0, Duration::MAX, Duration::ZERO)
}
