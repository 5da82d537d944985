//! The operator's controls on a Redis limiter: [`reset`], [`refund`],
//! [`penalize`], [`deny`], [`allow`] and [`unlist`] (the meaning of
//! each is the workspace's shared contract, the same as the core's).
//!
//! [`reset`]: RedisLimiter::reset
//! [`refund`]: RedisLimiter::refund
//! [`penalize`]: RedisLimiter::penalize
//! [`deny`]: RedisLimiter::deny
//! [`allow`]: RedisLimiter::allow
//! [`unlist`]: RedisLimiter::unlist
//!
//! # Guarantees
//!
//! - **Atomic, one round trip**: each control is one call of
//!   `src/controls.lua` over every limit's key of the user key; those keys
//!   share its hash tag (see [`key`](crate::key)), so on a single server
//!   and on Redis Cluster alike a decision sees the key wholly before or
//!   wholly after a control.
//! - **Never "done" on a fault**: a timeout, a connection error, an open
//!   breaker or a refused call is [`ControlError::Backend`], never `Ok`;
//!   the failure policy answers decisions, never a control. A timed-out
//!   control may still have been applied: every control but
//!   [`refund`](RedisLimiter::refund) is idempotent and can be sent again.
//! - **The server's clock**: a penalty ends at `TIME` + duration, read in
//!   the same script, the same end for every client of the key.
//! - **Registries beside**: listing and penalising also write the key to a
//!   registry in the limiter's own slot (a second call), so that a change
//!   of the limits carries every marker (see
//!   [`carry`](crate::carry#listed-and-penalised-keys-stay-so)).
//!
//! # Markers in place of the state: the hot path is unchanged
//!
//! A list entry or a penalty is written **in place of the key's state**,
//! in each of its limits' keys, as a string starting with `!` (`!d`, `!a`,
//! `!p<end>`, `!pn` for "never"). The scripts and the native module
//! recognise a marker only where they read a value that is not a state, so
//! an ordinary decision pays no extra read. A decision that meets the deny
//! list is denied with `retry_after` "never" (`u64::MAX` ns); the allow
//! list, admitted, reporting a look at the state kept aside (as the core:
//! below); a penalty, denied until it ends. It counts nothing. Lists are checked before the penalty.
//!
//! As the core's controls, in every state (a debt included): a penalty
//! **drops the key's state**; listing **keeps it aside** (at
//! `<key>!held`, with its TTL) with any penalty, and unlisting puts it
//! back; under a list a refund gives back into what is kept, `reset` drops
//! it (the key stays listed), a penalty replaces it. Where the contract is
//! silent: a list entry has **no TTL**; after a change of quota the lists
//! start empty unless the limiter is built with
//! [`carry_from`](crate::RedisLimiterBuilder::carry_from).
//!
//! # Parameters
//!
//! | parameter | default | from |
//! |---|---|---|
//! | [`list_capacity`](crate::RedisLimiterBuilder::list_capacity) | 100,000 keys, both lists together | a bound on the registry; listing past it is [`ControlError::ListFull`], never a silent drop |
//!
//! Each rule in full (the markers' formats, what each decision reports,
//! local copies on other nodes, how the lists' registry counts and is
//! repaired): `crates/redis/docs/controls.md`.

use std::time::Duration;

use crate::RedisLimiter;
use crate::key::BoundedKey;
use crate::policy::Fault;
use crate::script::Script;

/// The largest number the scripts take (`2^53 − 1`).
const MAX_ARG: u64 = (1 << 53) - 1;

/// Why a control was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// Redis did not answer in time, answered an error, or was not asked
    /// (breaker open, too many calls in flight). The control may have been
    /// applied if the fault is a timeout.
    Backend(Fault),
    /// The deny and allow lists hold `capacity` keys already.
    ListFull {
        /// The limiter's list capacity.
        capacity: usize,
    },
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Backend(fault) => write!(f, "Redis did not apply the control: {fault:?}"),
            ControlError::ListFull { capacity } => write!(
                f,
                "the deny and allow lists already hold {capacity} keys (the limiter's list capacity)"
            ),
        }
    }
}

impl std::error::Error for ControlError {}

/// The registries of the keys that carry a marker (see
/// [`carry`](crate::carry)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Registry {
    /// The deny and allow lists' (a set, bounded).
    Lists,
    /// The penalties' (a sorted set by end, pruned as penalties are set).
    Penalties,
}

/// The controls' operation codes (see `controls.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Reset,
    Refund,
    Penalize,
    Deny,
    Allow,
    Unlist,
    /// Moves the markers under the previous limits' keys to the new ones,
    /// and nothing else (see [`carry`](crate::carry)).
    Move,
}

impl Control {
    fn code(self) -> &'static str {
        match self {
            Control::Reset => "z",
            Control::Refund => "n",
            Control::Penalize => "k",
            Control::Deny => "d",
            Control::Allow => "a",
            Control::Unlist => "u",
            Control::Move => "m",
        }
    }
}

impl RedisLimiter {
    /// Puts `key` back to full: its state in every limit is dropped, and a
    /// penalty with it. A listed key stays listed (what the list keeps aside
    /// is dropped: full once unlisted). Idempotent. `Ok(true)` if there was
    /// a state or a penalty to drop.
    ///
    /// # Errors
    ///
    /// [`ControlError::Backend`] if Redis did not apply it.
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<bool, ControlError> {
        self.control(&BoundedKey::new(key.as_ref()), Control::Reset, 0)
            .await
    }

    /// Gives back `n` permits of `key` in every limit, never above full: the
    /// most recent `n` admissions as far as they are still counted, by the
    /// core's `refund` of each algorithm, a state in debt included (GCRA:
    /// `tat = max(now, tat − n·T)`; fixed and calendar windows: the count
    /// current now, carried from an earlier window or past the limit, − `n`,
    /// floored at 0; sliding window: the debt first, then the current slot,
    /// then older ones; warm-up: `WarmUp::refund`). A refund on an absent,
    /// full, listed or penalised key changes nothing. `Ok(true)` if a count
    /// changed.
    ///
    /// # Errors
    ///
    /// [`ControlError::Backend`] if Redis did not answer (a timed-out refund
    /// may have been applied: do not send it again blindly).
    pub async fn refund(&self, key: impl AsRef<[u8]>, n: u64) -> Result<bool, ControlError> {
        if n == 0 {
            return Ok(false);
        }
        self.control(
            &BoundedKey::new(key.as_ref()),
            Control::Refund,
            n.min(MAX_ARG),
        )
        .await
    }

    /// Denies every request on `key` for `duration` from now (a penalty
    /// box), counting nothing; the key's state is dropped, so it is full
    /// when the penalty ends. Penalties only extend: one ending no later
    /// than the current one changes nothing. A `duration` of zero is a
    /// no-op; one past the clock's end denies until "never" (until
    /// [`reset`](Self::reset)). On a listed key the penalty replaces what
    /// the list keeps aside, in force once unlisted. `Ok(true)` if the
    /// penalty was set or extended. A penalty set or extended is also
    /// recorded in the penalties' registry (a second, pipelined call), so
    /// that a change of the limits carries it (see
    /// [`carry`](crate::carry)).
    ///
    /// # Errors
    ///
    /// [`ControlError::Backend`] if Redis did not apply it, or did not
    /// register it (the penalty then holds, but a change of the limits may
    /// not carry it: send it again, penalties only extend).
    pub async fn penalize(
        &self,
        key: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<bool, ControlError> {
        if duration.is_zero() {
            return Ok(false);
        }
        // Clock units, rounded up; anything at or past 2^53 units is "never".
        let unit = u128::from(self.unit_nanos());
        let units = duration.as_nanos().div_ceil(unit);
        let units = u64::try_from(units).unwrap_or(MAX_ARG).min(MAX_ARG);
        let key = BoundedKey::new(key.as_ref());
        let (changed, now) = self.control_at(&key, Control::Penalize, units).await?;
        if changed {
            self.register_penalty(&key, now, units).await?;
        }
        Ok(changed)
    }

    /// Records `key`'s penalty, set at `now` for `units` (clock units;
    /// "never" from 2^53), in the penalties' registry, and drops the entries
    /// that ended before `now` (never the one just added): one pipelined
    /// round trip to the registry's slot.
    async fn register_penalty(
        &self,
        key: &BoundedKey,
        now: u64,
        units: u64,
    ) -> Result<(), ControlError> {
        let registry = self.codec().penalty_registry();
        let end = now.saturating_add(units);
        let score = if end > MAX_ARG {
            "+inf".to_owned()
        } else {
            end.to_string()
        };
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD")
            .arg(&registry)
            .arg(score)
            .arg(key.as_bytes())
            .ignore();
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&registry)
            .arg("-inf")
            .arg(format!("({now}"))
            .ignore();
        let mut connection = self.shared().redis.connection();
        let call = pipe.query_async::<()>(&mut connection);
        match tokio::time::timeout(self.shared().deadline(), call).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ControlError::Backend(Fault::Error)),
            Err(_) => Err(ControlError::Backend(Fault::Timeout)),
        }
    }

    /// Puts `key` on the deny list: every request denied, "never" to
    /// retry, counting nothing, until [`unlist`](Self::unlist). Drops its
    /// state and any penalty. `Ok(true)` if it was not on the deny list.
    ///
    /// # Errors
    ///
    /// [`ControlError::ListFull`] if the lists are full,
    /// [`ControlError::Backend`] if Redis did not apply it.
    pub async fn deny(&self, key: impl AsRef<[u8]>) -> Result<bool, ControlError> {
        self.list(&BoundedKey::new(key.as_ref()), Control::Deny)
            .await
    }

    /// Puts `key` on the allow list: every request admitted without
    /// counting, until [`unlist`](Self::unlist), reporting what a look of
    /// its cost at the key's state would (its remaining, 0 if the look
    /// would be refused, and its `reset_after`), as the core's. Keeps its
    /// state and any penalty aside. `Ok(true)` if it was not on the allow
    /// list.
    ///
    /// # Errors
    ///
    /// [`ControlError::ListFull`] if the lists are full,
    /// [`ControlError::Backend`] if Redis did not apply it.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<bool, ControlError> {
        self.list(&BoundedKey::new(key.as_ref()), Control::Allow)
            .await
    }

    /// Takes `key` off the deny or allow list; it starts full. `Ok(true)`
    /// if it was listed.
    ///
    /// # Errors
    ///
    /// [`ControlError::Backend`] if Redis did not apply it.
    pub async fn unlist(&self, key: impl AsRef<[u8]>) -> Result<bool, ControlError> {
        let key = BoundedKey::new(key.as_ref());
        let changed = self.control(&key, Control::Unlist, 0).await?;
        self.registry(&key, false).await?;
        Ok(changed)
    }

    async fn list(&self, key: &BoundedKey, control: Control) -> Result<bool, ControlError> {
        if !self.registry(key, true).await? {
            return Err(ControlError::ListFull {
                capacity: self.list_capacity(),
            });
        }
        self.control(key, control, 0).await
    }

    /// One page of a registry from `cursor` (`SSCAN` of the lists',
    /// `ZSCAN` of the penalties'): the next cursor (0 at the end) and the
    /// keys in it. Bounded by the deadline, but at least a second (it runs
    /// in the background, see [`carry`](crate::carry)).
    pub(crate) async fn registry_page(
        &self,
        registry: Registry,
        cursor: u64,
    ) -> Result<(u64, Vec<Vec<u8>>), ControlError> {
        let (verb, key) = match registry {
            Registry::Lists => ("SSCAN", self.codec().registry()),
            Registry::Penalties => ("ZSCAN", self.codec().penalty_registry()),
        };
        let mut scan = redis::cmd(verb);
        scan.arg(key).arg(cursor).arg("COUNT").arg(256);
        let mut connection = self.shared().redis.connection();
        let deadline = self.shared().deadline().max(Duration::from_secs(1));
        let page: (u64, Vec<Vec<u8>>) =
            match tokio::time::timeout(deadline, scan.query_async(&mut connection)).await {
                Ok(Ok(page)) => page,
                Ok(Err(_)) => return Err(ControlError::Backend(Fault::Error)),
                Err(_) => return Err(ControlError::Backend(Fault::Timeout)),
            };
        Ok(match registry {
            Registry::Lists => page,
            // Members and scores, interleaved.
            Registry::Penalties => (page.0, page.1.into_iter().step_by(2).collect()),
        })
    }

    /// Reserves (`add`) or releases `key` in the lists' registry; `false`
    /// if a reservation found the registry full.
    async fn registry(&self, key: &BoundedKey, add: bool) -> Result<bool, ControlError> {
        let registry = [self.codec().registry()];
        let capacity = self.list_capacity();
        let reply = self
            .run_control(Script::Lists, &registry, |cmd| {
                cmd.arg(key.as_bytes())
                    .arg(capacity)
                    .arg(if add { "+" } else { "-" });
            })
            .await
            .map_err(ControlError::Backend)?;
        Ok(reply.first() == Some(&1))
    }

    /// One control on `key`, in one atomic call; with the previous limits'
    /// keys while they may live (a carrying limiter), and always for
    /// [`Control::Move`].
    pub(crate) async fn control(
        &self,
        key: &BoundedKey,
        control: Control,
        cost: u64,
    ) -> Result<bool, ControlError> {
        Ok(self.control_at(key, control, cost).await?.0)
    }

    /// [`control`](Self::control), with the script's clock reading (clock
    /// units).
    async fn control_at(
        &self,
        key: &BoundedKey,
        control: Control,
        cost: u64,
    ) -> Result<(bool, u64), ControlError> {
        let mut keys = self.codec().keys_of(key);
        let carry = match control {
            Control::Move => self.shared().carry.as_ref(),
            _ => self.carrying(),
        };
        match carry {
            Some(carry) => keys.extend(carry.keys_of(key)),
            None if control == Control::Move => return Ok((false, 0)),
            None => {}
        }
        let reply = self
            .run_control(Script::Controls, &keys, |cmd| {
                self.control_args(control.code(), cost, carry, cmd);
            })
            .await
            .map_err(ControlError::Backend)?;
        let (changed, now) = match reply.as_slice() {
            &[changed @ (0 | 1), _, now, ..] if now >= 0 => (changed == 1, now.unsigned_abs()),
            // Redis answered something that is not the script's reply.
            _ => return Err(ControlError::Backend(Fault::Error)),
        };
        if changed {
            self.forget_local(key);
        }
        Ok((changed, now))
    }
}
