//! The settings both concurrency limiters are built from, and their
//! defaults. Kept apart from the limiters so that the builders and the
//! limiters share them without depending on each other.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

use super::adaptive::{Adaptive, Controller};
use super::config::{ConfigError, Shares, checked_limit};
use super::slots::Slots;
use crate::clock::{Clock, MonotonicClock};

/// The default cap on waiters per limit (per key, for a keyed limiter).
pub const DEFAULT_MAX_WAITERS: usize = 1_024;

/// The default longest wait of `acquire().await`.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) limit: u64,
    pub(crate) shares: Shares,
    pub(crate) max_waiters: usize,
    pub(crate) max_delay: Duration,
    pub(crate) adaptive: Option<Controller>,
    pub(crate) clock: StdArc<dyn Clock>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("limit", &self.limit)
            .field("shares", &self.shares)
            .field("max_waiters", &self.max_waiters)
            .field("max_delay", &self.max_delay)
            .field("adaptive", &self.adaptive)
            .finish_non_exhaustive()
    }
}

impl Settings {
    pub(crate) fn new(limit: u64) -> Settings {
        Settings {
            limit,
            shares: Shares::default(),
            max_waiters: DEFAULT_MAX_WAITERS,
            max_delay: DEFAULT_MAX_DELAY,
            adaptive: None,
            clock: StdArc::new(MonotonicClock::new()),
        }
    }

    /// The limit slots start with: the fixed limit, or the adaptive one's
    /// initial value.
    pub(crate) fn check(&self) -> Result<u32, ConfigError> {
        match &self.adaptive {
            Some(controller) => {
                controller.check()?;
                Ok(controller.initial_limit())
            }
            None => checked_limit(self.limit),
        }
    }

    /// Fresh slots for one limit; `limit` from [`Settings::check`].
    pub(crate) fn slots(&self, limit: u32) -> Slots {
        let adaptive = self
            .adaptive
            .as_ref()
            .map(|controller| Box::new(Adaptive::new(controller, self.clock.clone())));
        Slots::new(limit, self.shares, self.max_waiters, adaptive)
    }
}

/// The setters both builders share.
macro_rules! settings_setters {
    () => {
        /// The share of the limit each priority may use. By default,
        /// [`Shares::default`]($crate::concurrency::Shares::default): sheddable 50 %, default 90 %, critical 100 %.
        pub fn shares(mut self, shares: $crate::concurrency::Shares) -> Self {
            self.settings.shares = shares;
            self
        }

        /// The most waiters queued at once (per key for a keyed limiter);
        /// one more is refused at once with
        /// [`Reason::QueueFull`]($crate::concurrency::Reason::QueueFull).
        /// By default, [`DEFAULT_MAX_WAITERS`]($crate::concurrency::DEFAULT_MAX_WAITERS).
        pub fn max_waiters(mut self, max_waiters: usize) -> Self {
            self.settings.max_waiters = max_waiters;
            self
        }

        /// The longest `acquire().await` waits before it gives up with
        /// [`Reason::TimedOut`]($crate::concurrency::Reason::TimedOut)
        /// (measured on tokio's timer). `Duration::ZERO` waits not at all.
        /// By default, [`DEFAULT_MAX_DELAY`]($crate::concurrency::DEFAULT_MAX_DELAY).
        pub fn max_delay(mut self, max_delay: std::time::Duration) -> Self {
            self.settings.max_delay = max_delay;
            self
        }

        /// Makes the limit adaptive: it starts at the controller's initial
        /// limit (the fixed limit given to the builder is then unused) and
        /// follows the permits' lives: give
        /// [`Knee::new()`]($crate::concurrency::Knee) (the recommended
        /// controller, see [`knee`]($crate::concurrency::knee)), or
        /// [`Vegas::new()`]($crate::concurrency::Vegas) by name. By default,
        /// the limit is fixed.
        pub fn adaptive(mut self, controller: impl Into<$crate::concurrency::Controller>) -> Self {
            self.settings.adaptive = Some(controller.into());
            self
        }

        /// The clock an adaptive limit measures latency with. By default,
        /// [`MonotonicClock`]($crate::MonotonicClock).
        pub fn clock(mut self, clock: impl $crate::Clock + 'static) -> Self {
            self.settings.clock = std::sync::Arc::new(clock);
            self
        }
    };
}

pub(crate) use settings_setters;
