//! Live limit changes on Redis: a limiter built with
//! [`carry_from`](crate::RedisLimiterBuilder::carry_from) carries each key's
//! state from the previous limits by the core's [`Carry`] rule, atomically,
//! on the key's first decision under the new limits.
//!
//! # Why
//!
//! A limit's keys are named by its quota (see [`key`](crate::key)), so a
//! changed quota has new keys: without a carry, every client would find a
//! fresh key and briefly have a whole new quota.
//!
//! # How
//!
//! While the previous limits' keys may still live (until the longest of
//! their reset horizons, plus [`DEBT_PERIODS`] of their periods for a
//! debt, plus the TTL slack has passed on this node's clock, counted from
//! the build), every decision runs `src/carry.lua` before
//! `src/decide.lua`, in one script call: each limit whose new key is absent
//! and whose old key (same hash tag, so the same slot on a cluster) holds a
//! state has it converted by the rule, written under the new key with its
//! TTL, and the old key deleted; then the decision is taken as usual. A key
//! written under the new limits is never carried again, so two clients
//! racing on the first decision carry once. After that period, and once the
//! lists and penalties were carried (below), the limiter decides on the
//! ordinary path (lean scripts or module) again.
//!
//! # The rules (the core's `carry_cell`, per algorithm)
//!
//! Every algorithm the scripts store is carried (`carry.lua` calls each
//! state module's `carry` in `prelude.lua`, reading the old key under the
//! old limit with the same code a decision uses); never afresh but by
//! [`Carry::Reset`]:
//!
//! - **GCRA**: the debt, in the new quota's ticks, scaled by the emission
//!   intervals ([`Carry::Keep`]) or the capacities
//!   ([`Carry::Proportional`]), rounded up, not capped at the burst.
//! - **Fixed and calendar windows**: the count the old limit reads now, in
//!   the window current under the new one; scaled by the limits for
//!   [`Carry::Proportional`], rounded up; above the new limit, a debt.
//! - **Sliding window**: the wheel kept (same geometry) or what still
//!   counts moved into the newest slot (another), with its debt.
//! - **Warm-up**: what is owed and the idle permits, rescaled, colder.
//! - **A change of algorithm**: the permits the old limit counts, charged
//!   into the new one (the core's `AnyAlgorithm` rule).
//! - **Markers** (lists, penalties: see [`controls`](crate::controls)) move
//!   whatever the rule, with their TTL.
//!
//! Every debt carried keeps to the core's one debt cap: at most
//! [`DEBT_PERIODS`] periods of the new quota beyond full, as after the
//! largest charge (a limit lowered more than 17-fold from a spent key
//! gives the rest back, as in memory). The client sends each new limit's
//! cap with the rule.
//!
//! # Listed and penalised keys stay so
//!
//! A list entry has no TTL and a penalty may outlive the carry period, so
//! the lists' and penalties' registries are carried too: building a
//! carrying limiter spawns a task (when a tokio runtime runs) that moves
//! every registered key's markers, one atomic call per key
//! ([`RedisLimiter::carry_controls`](crate::RedisLimiter::carry_controls),
//! retried until done); decisions keep carrying until that is done and the
//! previous keys cannot live any more, so no decision meets a listed or
//! penalised key as free. Controls see the old keys meanwhile.
//!
//! Each rule in full, with its exactness, the controls' behaviour during
//! the carry, and its limits (penalties set before the registries
//! existed, a rolling change): `crates/redis/docs/carry.md`.

use std::sync::atomic::{AtomicBool, Ordering};

use tollgate::algorithm::DEBT_PERIODS;
use tollgate::{Carry, Nanos};

use crate::key::{BoundedKey, KeyCodec};
use crate::limit::{ConfigError, Limit, Unit};

/// The most permits a state of `limit` may owe beyond full, the core's
/// debt cap that a carry keeps to ([`DEBT_PERIODS`] periods of its quota,
/// within a window's count field), below `2^53 / 3` so that `carry.lua`'s
/// `3 · k + rule` stays an exact natural (a cap that large is past what any
/// state reads back anyway).
fn debt_permits(limit: &Limit) -> u64 {
    const MOST: u64 = ((1 << 53) - 1 - 2) / 3;
    let q = limit.quota();
    let periods = DEBT_PERIODS.saturating_mul(q.limit());
    let k = match limit {
        // The core's count field: the limit's bits, or every bit the
        // window index leaves (FixedWindow::new); the calendar's 32 bits.
        Limit::FixedWindow(_) => {
            let bits = (u64::BITS - q.limit().leading_zeros())
                .max((u64::MAX / q.period_nanos()).leading_zeros());
            let field = u64::MAX >> (u64::BITS - bits);
            periods.min(field - q.limit())
        }
        Limit::Calendar(_) => periods.min(u64::from(u32::MAX) - q.limit().min(u64::from(u32::MAX))),
        Limit::Gcra(_) | Limit::SlidingWindow(_) | Limit::WarmUp(_) => periods,
    };
    k.min(MOST)
}

/// What a carrying limiter sends beside its own keys and arguments.
#[derive(Debug)]
pub(crate) struct CarrySpec {
    /// The previous limits' keys.
    codec: KeyCodec,
    /// Per previous limit: its five script arguments and the rule.
    args: Vec<[String; 6]>,
    /// Local time after which no previous key can live.
    until: Nanos,
    /// Whether every listed or penalised key's markers were moved (see the
    /// module docs).
    controls_carried: AtomicBool,
}

impl CarrySpec {
    /// The carry from `previous` to `limits`, or `None` if no key changes
    /// (every limit kept its quota). `start` is the build's local time plus
    /// the TTL slack.
    pub(crate) fn new(
        prefix: &str,
        name: &str,
        previous: &[Limit],
        limits: &[Limit],
        rule: Carry,
        unit: Unit,
        start: Nanos,
    ) -> Result<Option<CarrySpec>, ConfigError> {
        if previous.len() != limits.len() {
            return Err(ConfigError::Invalid(
                "carry_from needs one previous limit per limit, in the same order",
            ));
        }
        if previous.iter().zip(limits).all(|(p, l)| p.tag() == l.tag()) {
            return Ok(None);
        }
        let mut args = Vec::with_capacity(previous.len());
        let mut horizon = std::time::Duration::ZERO;
        for (old, new) in previous.iter().zip(limits) {
            old.check_exact(unit)?;
            let code = match rule {
                _ if old.tag() == new.tag() => 0,
                Carry::Keep => 1,
                Carry::Proportional => 2,
                _ => 0,
            };
            let [a, b, c, d, e] = old.args(unit);
            // The rule and the new limit's debt cap in one natural (see
            // `carry.lua`).
            let x = if code == 0 {
                0
            } else {
                3 * debt_permits(new) + code
            };
            args.push([a, b, c, d, e, x.to_string()]);
            // A charge's debt (or a lowered limit's excess) keeps a key
            // up to DEBT_PERIODS periods beyond its horizon: carried too.
            let debt = old
                .quota()
                .period()
                .saturating_mul(u32::try_from(DEBT_PERIODS).unwrap_or(u32::MAX));
            horizon = horizon.max(old.horizon().saturating_add(debt));
        }
        let descriptors: Vec<String> = previous.iter().map(Limit::tag).collect();
        let codec = KeyCodec::new(prefix, name, &descriptors).map_err(ConfigError::Name)?;
        Ok(Some(CarrySpec {
            codec,
            args,
            until: start.saturating_add(horizon),
            controls_carried: AtomicBool::new(false),
        }))
    }

    /// Whether decisions must still carry at local time `now`: a previous
    /// key may still live, or a listed key's marker may still be under one.
    pub(crate) fn active(&self, now: Nanos) -> bool {
        // Acquire: pairs with the Release in `controls_were_carried`, so that
        // a decision that sees the flag is sent after every move was
        // answered (the moves happen-before it).
        now < self.until || !self.controls_carried.load(Ordering::Acquire)
    }

    pub(crate) fn controls_were_carried(&self) {
        // Release: see `active`.
        self.controls_carried.store(true, Ordering::Release);
    }

    /// The previous limits' keys of `key`.
    pub(crate) fn keys_of(&self, key: &BoundedKey) -> Vec<Vec<u8>> {
        self.codec.keys_of(key)
    }

    /// Appends the previous limits' arguments.
    pub(crate) fn args(&self, cmd: &mut redis::Cmd) {
        for limit in &self.args {
            for a in limit {
                cmd.arg(a.as_str());
            }
        }
    }
}
