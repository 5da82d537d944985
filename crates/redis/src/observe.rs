//! Observers and dry-run on a [`RedisLimiter`](crate::RedisLimiter): the core's
//! [`tollgate::observe`] hook, with where each decision came from.
//!
//! # Observers
//!
//! [`RedisLimiterBuilder::observer`](crate::RedisLimiterBuilder::observer)
//! takes a [`RedisObserver`]: every core
//! [`Observer`] is one (its [`Event`] is the core's, the source is dropped),
//! so the core's `metrics` and `tracing` observers (the features of the same
//! names, forwarded by this crate) and a [`Fanout`](tollgate::observe::Fanout)
//! work unchanged; an observer that also wants to know whether Redis or the
//! failure policy decided implements [`RedisObserver`] itself and gets the
//! [`Source`] beside the event.
//!
//! ## Guarantees
//!
//! - **Once per decision acted on**: [`check`](crate::RedisLimiter::check),
//!   [`check_n`](crate::RedisLimiter::check_n),
//!   [`check_outcome`](crate::RedisLimiter::check_outcome) and
//!   [`check_batch`](crate::RedisLimiter::check_batch) report each decision once,
//!   whoever took it: the script, the deny cache, a lease or the failure
//!   policy (then [`Source::Policy`] with the fault). [`peek_n`] and the
//!   [`controls`](crate::controls) do not report (nothing was decided for a
//!   request), nor does a request refused before any decision (a
//!   [`CostError`](crate::CostError)), as in the core.
//! - **The limit's name** is the limiter's name (the one given to
//!   [`RedisLimiter::builder`](crate::RedisLimiter::builder)), a bounded label; the key is shown only to
//!   an observer whose [`wants_keys`](RedisObserver::wants_keys) is true,
//!   as the caller's bytes (valid UTF-8 as is, other bytes as `\xNN`).
//! - **Zero cost when absent**: without an observer, a decision pays one
//!   branch on an `Option` (the report is out of line).
//! - The observer runs in the calling task, after the decision took effect
//!   on Redis; it must be quick and must not wait on the limiter it
//!   observes.
//!
//! ## Outcomes
//!
//! [`Outcome::Allowed`](tollgate::observe::Outcome::Allowed),
//! [`Outcome::Denied`](tollgate::observe::Outcome::Denied) or, in dry-run,
//! a denial as [`Outcome::Shadow`](tollgate::observe::Outcome::Shadow). A
//! decision taken by a control's marker (see [`controls`](crate::controls))
//! is reported as the denial or admission it is, not as `Listed` or
//! `Penalized`: the scripts' reply (shared with the native module) does not
//! say which marker decided, and a penalty's is a full fixed window's.
//! Count those with the controls' own return values.
//!
//! # Dry-run
//!
//! [`RedisLimiterBuilder::dry_run`](crate::RedisLimiterBuilder::dry_run) /
//! [`RedisLimiter::set_dry_run`](crate::RedisLimiter::set_dry_run): the same meaning as the core's and the
//! server's `shadow_mode`. The limiter decides, takes and counts exactly as
//! usual (an admission takes its permits on Redis; a denial changes no state,
//! as always, so a shadow refusal never consumes), `check` returns the real
//! [`Decision`](tollgate::Decision), and the observers see a refusal as
//! [`Outcome::Shadow`](tollgate::observe::Outcome::Shadow), whoever refused (the script, a marker, the deny
//! cache or the failure policy). The refusal is not acted on where it is
//! acted on: the caller (the tower layer, the server) asks
//! [`is_dry_run`](crate::RedisLimiter::is_dry_run) and lets the request through.
//!
//! [`peek_n`]: crate::RedisLimiter::peek_n

use std::fmt;

use tollgate::observe::{Event, Observer};

use crate::policy::Source;

/// Sees each decision a [`RedisLimiter`](crate::RedisLimiter) acts on, and where it came from.
///
/// Every core [`Observer`] is a `RedisObserver` that ignores the source;
/// implement this trait (and not [`Observer`]) for an observer that wants
/// it.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tollgate::observe::Event;
/// use tollgate_redis::Source;
/// use tollgate_redis::observe::RedisObserver;
///
/// /// Counts the decisions the failure policy took.
/// #[derive(Default)]
/// struct PolicyDecisions(AtomicU64);
///
/// impl RedisObserver for PolicyDecisions {
///     fn on_redis_decision(&self, _: &Event<'_>, source: Source) {
///         if matches!(source, Source::Policy(_)) {
///             // Relaxed: a counter read on its own.
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// ```
pub trait RedisObserver: Send + Sync + 'static {
    /// Called once per decision, after it took effect.
    fn on_redis_decision(&self, event: &Event<'_>, source: Source);

    /// Whether [`Event::key`] should carry the key (see
    /// [`Observer::wants_keys`]). By default, `false`.
    fn wants_keys(&self) -> bool {
        false
    }
}

impl<O: Observer> RedisObserver for O {
    fn on_redis_decision(&self, event: &Event<'_>, _: Source) {
        self.on_decision(event);
    }

    fn wants_keys(&self) -> bool {
        Observer::wants_keys(self)
    }
}

impl fmt::Debug for dyn RedisObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisObserver")
            .field("wants_keys", &self.wants_keys())
            .finish_non_exhaustive()
    }
}

/// A key's bytes, shown as UTF-8 where they are, `\xNN` elsewhere.
pub(crate) struct KeyBytes<'a>(pub(crate) &'a [u8]);

impl fmt::Display for KeyBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::KeyBytes;

    #[test]
    fn keys_show_utf8_as_is_and_other_bytes_escaped() {
        assert_eq!(KeyBytes(b"user:42").to_string(), "user:42");
        assert_eq!(KeyBytes("café".as_bytes()).to_string(), "café");
        assert_eq!(KeyBytes(b"a\xff\x00b").to_string(), "a\\xff\u{0}b");
        assert_eq!(KeyBytes(b"").to_string(), "");
    }
}
