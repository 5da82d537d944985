//! `key_layout: lyft`: fixed-window rules count in envoyproxy/ratelimit's
//! own keys, so that during a rolling upgrade Lyft's old pods and
//! tollgate's new ones, on one Redis, share one count and the limit holds
//! across both fleets. The key format and the atomic transition are
//! `tollgate_redis::lyft`'s; this module picks the rules, builds each
//! descriptor's key, routes it to its Redis and applies Lyft's variables
//! ([`LyftLayout`]).
//!
//! # Decisions and guarantees
//!
//! - **Which rules**: a rule of one fixed-window quota whose period is one
//!   of Lyft's units (`unit: second` … `year`, or a `period` of exactly
//!   that length), and a request's `limit` override (always such a
//!   window): these are Lyft's rules, and count in Lyft's keys. Every other
//!   rule (GCRA, tollgate's default for a rule that names no algorithm;
//!   sliding windows; calendar windows; several quotas on one rule; a
//!   period Lyft has no unit for) keeps tollgate's keys and its exact
//!   algorithm: Lyft's pods cannot share those counts, and need not (they
//!   have no such rules). A Lyft deployment's rules run as fixed windows
//!   when the configuration says so (Lyft's environment does).
//! - **The key**: `<key_prefix><domain>_<k1>_<v1>_…_<kn>_<vn>_<window
//!   start>`, the request's entries in order, a `share_threshold` wildcard's
//!   values written as its pattern (as Lyft), the window start in UNIX
//!   seconds aligned to the unit's length (a month is 30 days, a year 365,
//!   as Lyft). Each decision reads the clock once.
//! - **Fixed window, not GCRA**: the guarantee is the fixed window's weak
//!   one: every aligned window admits ≤ limit, across both fleets; two
//!   adjacent windows can admit up to 2 × limit within one unit across
//!   their edge, where tollgate's default GCRA admits at most burst + rate
//!   · t in any interval. That is Lyft's semantics, kept for the count to
//!   be shared.
//! - **What a refusal counts, with `count_over_limit`** (from Lyft's
//!   environment): every hit, as Lyft's pods count — its own `INCRBY` then
//!   `EXPIRE`, pipelined (`tollgate_redis::lyft::increment`), a hit of 0
//!   included, decided on the count after (OVER_LIMIT above the limit,
//!   `limit_remaining` 0). A mixed fleet and Lyft's `token-quota.sh` flow
//!   (hits 0 on the request, 1 on stream done) then answer as an all-Lyft
//!   fleet. The deny cache (`LOCAL_CACHE_SIZE_IN_BYTES`) answers a key it
//!   holds without counting, as Lyft's local cache.
//! - **What a refusal counts, without it** (the YAML's default): nothing
//!   (tollgate's rule). Lyft's pods count their refused hits, so a key
//!   they refused reads above its limit; tollgate reads such a count as
//!   full. With hits of 1 both decide alike; with a larger `hits_addend`
//!   tollgate may admit a small request after a large one was refused
//!   where Lyft would not. Neither ever admits above the limit.
//! - **`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`** (`stop_increment_when_over_limit`):
//!   when on and a request has two or more descriptors counting in Lyft's
//!   keys, each is first looked at (a read, in parallel). With
//!   `count_over_limit`, as Lyft's `getHitsAddend`: if any would go over,
//!   only those count their hits (the others `INCRBY 0`); else all count.
//!   Without it: if one would go over, none is counted: the refused ones
//!   are refused and the others answered by their look (OK, nothing
//!   counted), as Lyft answers them. Otherwise each is checked and counted
//!   atomically on its own. A race between the look and the count can
//!   count the others of a request refused after all, as in Lyft. Off
//!   (Lyft's default), each descriptor is counted on its own.
//! - **Redis Cluster and all-or-nothing**: Lyft's keys have no hash tag,
//!   so each descriptor's key is in its own slot; one call decides one key
//!   atomically and no call spans two, so a request's descriptors are
//!   never decided all-or-nothing (neither are they in Lyft, nor in
//!   tollgate's service, which decides descriptors independently).
//! - **`REDIS_PERSECOND`** (`per_second`): keys of unit `second` go to the
//!   second Redis, the others to the backend's Redis, as Lyft.
//! - **TTL**: each counting write sets the unit's length plus a uniform
//!   `[0, expiration_jitter_max)` whole seconds, as Lyft's `EXPIRE`.
//! - **Failure policy, deadline, breaker, deny cache**: the rule's
//!   limiter's, as for tollgate's keys (`RedisLimiter::check_lyft`), and
//!   its decisions are counted in the same metrics (with
//!   `stop_increment_when_over_limit`, a request's looks are counted too;
//!   while Redis is away a look decided by the local share takes from it,
//!   which is stricter, never looser). Leases do not apply: Lyft's pods
//!   could not see them. Each key is one script call on the multiplexed
//!   connection (pipelined with the others, not batched into one call).
//! - **Admin controls** (reset, refund, penalties, lists) are refused for
//!   these rules: Lyft's keys hold a bare count, with no place for a
//!   marker that Lyft's pods would honour.
//! - **A `limit` override's look at the file rule** (see
//!   [`crate::service`]): where that rule counts in Lyft's keys, the look
//!   reads its count, so a window Lyft's pods pushed over its limit also
//!   refuses the override.

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
