//! envoyproxy/ratelimit's fixed-window counters, in its own key layout:
//! so that its pods and tollgate's, against one Redis, share one count.
//!
//! # The layout (Lyft's `src/limiter/cache_key.go`)
//!
//! The key of a descriptor `[(k1, v1), (k2, v2)]` of `domain` under a limit
//! of unit `u` at UNIX second `now` is
//!
//! ```text
//! <prefix><domain>_<k1>_<v1>_<k2>_<v2>_<window start>
//! ```
//!
//! where the window start is `(now / divider) * divider` and the divider
//! is the unit's length in seconds (second 1, minute 60, hour 3600, day
//! 86400, week 604800, month 2592000 = 30 days, year 31536000 = 365 days,
//! as Lyft's `UnitToDivider`): windows aligned to the UNIX epoch, not to
//! the calendar. The prefix is Lyft's `CACHE_KEY_PREFIX` (empty by
//! default). The value is a plain integer, Lyft's `INCRBY` count.
//! [`cache_key`] builds it byte for byte.
//!
//! # The transition ([`count`])
//!
//! One script call (`lyft.lua`): read the count; a check whose hits fit
//! (`count + hits <= limit`) runs Lyft's two commands, `INCRBY key hits`
//! then `EXPIRE key expire`, in the same atomic step; anything else writes
//! nothing. The check and the increment are therefore one linearizable
//! step for tollgate's callers, and Lyft's pods (which `INCRBY` and decide
//! on the result) see the count tollgate left.
//!
//! # Decisions and guarantees
//!
//! - **Admitted across both fleets ≤ limit, per window**: tollgate admits
//!   only hits that fit under the count it read in the same atomic step,
//!   and Lyft admits a hit only when its `INCRBY` result is ≤ limit. Every
//!   admitted hit of either fleet is in the count before the next decision
//!   of either, so the admitted total of one key never exceeds its limit.
//! - **A refusal writes nothing** with [`CountOp::Check`] (tollgate's
//!   rule): unlike Lyft, whose pods `INCRBY` even when the result is over
//!   the limit. Both agree on every decision of cost 1; with larger costs
//!   tollgate may admit a small request after refusing a large one where
//!   Lyft would not (the refused hits are not in the count). Never more
//!   than the limit. [`CountOp::Increment`] counts as Lyft counts instead
//!   (its own `INCRBY` + `EXPIRE`, see [`increment`]), for a process that
//!   must answer exactly as Lyft's pods beside it: then every hit is in
//!   the count, refused or not, and the answers are Lyft's.
//! - **The key's value must be a count**: anything else is an error (as
//!   Lyft's `INCRBY` answers), for the caller's failure policy.
//! - **Time comes from the caller** (UNIX seconds): the key names the
//!   window, and on Redis Cluster a script may only touch keys named in
//!   the call, so the window must be known before the call, as in Lyft
//!   (whose pods read their own clocks). Clocks of pods that disagree
//!   around a window's edge count in two windows, as Lyft's do.
//! - **Redis Cluster**: Lyft's keys have no hash tag, so each key lives in
//!   its own slot; one call touches one key, which any cluster routes.

use std::sync::LazyLock;
use std::time::Duration;

use redis::RedisResult;
use tollgate::{Decision, Nanos};

use crate::backend::Redis;
use crate::breaker::Pass;
use crate::key::BoundedKey;
use crate::limiter::{Outcome, RedisLimiter};
use crate::policy::{Fault, Source};
use crate::script;

/// The script's source (see the module docs).
pub const SOURCE_LYFT: &str = include_str!("lyft.lua");

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE_LYFT));

/// Lyft's cache key of a descriptor's `entries` in `domain`, for a limit
/// whose unit lasts `divider` seconds, at UNIX second `now` (see the module
/// docs). `divider` of 0 is taken as 1.
pub fn cache_key<'a>(
    prefix: &str,
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    divider: u64,
    now: u64,
) -> String {
    let divider = divider.max(1);
    let mut key = String::with_capacity(prefix.len() + domain.len() + 32);
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (k, v) in entries {
        key.push_str(k);
        key.push('_');
        key.push_str(v);
        key.push('_');
    }
    key.push_str(&(now / divider * divider).to_string());
    key
}

/// What a call to [`count`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Whether the hits fit (and, for a check, were counted).
    pub admitted: bool,
    /// The count at the key after the call.
    pub count: u64,
}

/// What [`count`] does with hits that fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountOp {
    /// Counts them (`INCRBY` + `EXPIRE`).
    Check,
    /// Only says whether they fit; writes nothing.
    Peek,
    /// Counts them whether or not they fit, as Lyft's pods do: `INCRBY`
    /// then `EXPIRE`, pipelined, not a script (see [`increment`]); they
    /// fit when the count after is at most the limit.
    Increment,
}

/// Decides `hits` against `limit` at `key`, atomically (see the module
/// docs); a check that fits counts them and sets the key's TTL to
/// `expire_secs` (at least 1).
///
/// # Errors
///
/// Redis fails or the key holds something other than a count.
pub async fn count(
    redis: &Redis,
    key: &str,
    op: CountOp,
    hits: u64,
    limit: u64,
    expire_secs: u64,
) -> RedisResult<Counted> {
    let code = match op {
        CountOp::Check => "c",
        CountOp::Peek => "p",
        CountOp::Increment => return increment(redis, key, hits, limit, expire_secs).await,
    };
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(key)
        .arg(code)
        .arg(hits)
        .arg(limit)
        .arg(expire_secs.max(1));
    let mut connection = redis.connection();
    let (admitted, count): (i64, i64) = invocation.invoke_async(&mut connection).await?;
    Ok(Counted {
        admitted: admitted == 1,
        count: u64::try_from(count).unwrap_or(0),
    })
}

/// Lyft's own two commands for `hits` at `key`, exactly as its
/// `fixed_cache_impl.go` sends them: `INCRBY key hits` then `EXPIRE key
/// expire_secs` (at least 1), in one pipeline (not a transaction, as
/// there); the hits fit when the count after is at most `limit`. Every hit
/// is counted, over the limit too, and `hits` of 0 still sends both.
///
/// # Errors
///
/// Redis fails or the key holds something other than a count.
pub async fn increment(
    redis: &Redis,
    key: &str,
    hits: u64,
    limit: u64,
    expire_secs: u64,
) -> RedisResult<Counted> {
    let mut pipe = redis::pipe();
    pipe.cmd("INCRBY")
        .arg(key)
        .arg(hits)
        .cmd("EXPIRE")
        .arg(key)
        .arg(expire_secs.max(1))
        .ignore();
    let mut connection = redis.connection();
    let (count,): (i64,) = pipe.query_async(&mut connection).await?;
    let count = u64::try_from(count).unwrap_or(0);
    Ok(Counted {
        admitted: count <= limit,
        count,
    })
}

/// One of Lyft's windows, as [`RedisLimiter::check_lyft`] decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window<'a> {
    /// The key, from [`cache_key`].
    pub key: &'a str,
    /// Hits admitted per window.
    pub limit: u64,
    /// The window's length in seconds (Lyft's divider), at least 1.
    pub divider: u64,
    /// The TTL a counting write sets, in seconds (the divider plus
    /// Lyft's jitter), at least 1.
    pub expire: u64,
}

impl Window<'_> {
    /// The decision of `counted` for `hits` counted whether or not they
    /// fit ([`CountOp::Increment`]) at `now`: as [`decision`](Self::decision),
    /// but a refusal reports what remained before its hits (the count
    /// less them), as a refusal that wrote nothing does, so that a caller
    /// can split the hits at the limit as Lyft's stats do.
    pub fn decision_counted(&self, counted: Counted, hits: u64, now: Nanos) -> Decision {
        if counted.admitted {
            return self.decision(counted, hits, now);
        }
        let before = Counted {
            admitted: false,
            count: counted.count.saturating_sub(hits),
        };
        self.decision(before, hits, now)
    }

    /// The decision of `counted` for `hits` at `now` (UNIX time): the
    /// window ends at the next multiple of the divider.
    pub fn decision(&self, counted: Counted, hits: u64, now: Nanos) -> Decision {
        let divider = Duration::from_secs(self.divider.max(1));
        let into = Duration::from_nanos(now.as_u64() % divider.as_nanos() as u64);
        let left = divider.saturating_sub(into);
        let remaining = self.limit.saturating_sub(counted.count);
        if counted.admitted {
            let reset = if counted.count > 0 {
                left
            } else {
                Duration::ZERO
            };
            Decision::from_parts(true, self.limit, remaining, Duration::ZERO, reset)
        } else {
            // A cost above the limit never fits, in any window.
            let retry = if hits <= self.limit {
                left
            } else {
                Duration::MAX
            };
            Decision::from_parts(false, self.limit, remaining, retry, left)
        }
    }
}

impl RedisLimiter {
    /// Decides `hits` of Lyft's `window` on `redis` (this limiter's Redis,
    /// or another: Lyft's per-second Redis) at `now` (UNIX time, the time
    /// `window.key` was built for): [`count`] through this limiter's deny
    /// cache (checks only, keyed by Lyft's key), circuit breaker, in-flight
    /// bound, deadline and failure policy, as one of its own decisions is,
    /// and counted in its [`stats`](Self::stats). Leases do not apply
    /// (Lyft's pods could not see them). The limiter's own limits play no
    /// part but in the failure policy (its local share, its capacity).
    pub async fn check_lyft(
        &self,
        redis: &Redis,
        window: &Window<'_>,
        op: CountOp,
        hits: u64,
        now: Nanos,
    ) -> Outcome {
        let s = self.shared();
        let bounded = BoundedKey::new(window.key.as_bytes());
        let counts = matches!(op, CountOp::Check | CountOp::Increment);
        if let (Some(cache), true) = (&s.deny_cache, counts) {
            if let Some(decision) = cache.get(&bounded, hits, self.now()) {
                return self.counted(decision, Source::DenyCache);
            }
        }
        let sent = self.now();
        match self.ask_lyft(redis, window, op, hits).await {
            Ok(counted) => {
                let decision = if op == CountOp::Increment {
                    window.decision_counted(counted, hits, now)
                } else {
                    window.decision(counted, hits, now)
                };
                if let (Some(cache), true) = (&s.deny_cache, counts) {
                    if decision.is_denied() {
                        cache.put(&bounded, hits, sent, &decision);
                    }
                }
                self.counted(decision, Source::Redis)
            }
            Err((fault, retry)) => self.fallback(&bounded, hits, fault, retry),
        }
    }

    /// [`count`] through the breaker, the in-flight bound and the deadline
    /// (as `guarded` does for the limiter's own scripts).
    async fn ask_lyft(
        &self,
        redis: &Redis,
        window: &Window<'_>,
        op: CountOp,
        hits: u64,
    ) -> Result<Counted, (Fault, Duration)> {
        let s = self.shared();
        // The breaker of the node that holds the key (see `breaker`).
        let node = redis.node_of(window.key.as_bytes());
        let breaker = s.breakers.of(node.as_ref());
        if let Pass::Refuse(retry) = breaker.pass() {
            redis.refresh_topology();
            return Err((Fault::BreakerOpen, retry));
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err((Fault::Overloaded, s.deadline()));
        };
        // Sent again while a changing cluster refuses it (see `cluster`).
        let call = crate::cluster::resent(redis.is_cluster(), || {
            count(redis, window.key, op, hits, window.limit, window.expire)
        });
        let fault = match tokio::time::timeout(s.deadline(), call).await {
            Ok(Ok(counted)) => {
                breaker.success();
                return Ok(counted);
            }
            // The key's value is not a count: Redis is up, the key is bad.
            Ok(Err(e)) if script::is_call_error(&e) => {
                breaker.success();
                return Err((Fault::Script, Duration::ZERO));
            }
            Ok(Err(_)) => Fault::Error,
            Err(_) => Fault::Timeout,
        };
        if breaker.failure() {
            redis.node_failing(node.as_deref());
        } else {
            redis.refresh_topology();
        }
        Err((fault, s.open_for))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lyft's own example shape: `domain_key_value_` per entry, then the
    /// window start.
    #[test]
    fn keys_are_lyfts() {
        assert_eq!(
            cache_key("", "domain", [("key", "value")], 1, 1234),
            "domain_key_value_1234"
        );
        assert_eq!(
            cache_key(
                "prefix:",
                "domain",
                [("key", "value"), ("key2", "value2")],
                60,
                1234
            ),
            "prefix:domain_key_value_key2_value2_1200"
        );
        assert_eq!(cache_key("", "d", [("k", "")], 86_400, 86_399), "d_k__0");
        assert_eq!(
            cache_key("", "d", [("k", "v")], 30 * 86_400, 2_592_000 * 3 + 5),
            "d_k_v_7776000"
        );
    }
}
