//! [`ConcurrencyLimiter`]: one limit's slots, shared by clones.

use std::fmt;
use std::time::Duration;

use super::config::{ConfigError, Denied, Priority, Reason, checked_limit};
use super::permit::{BorrowedPermit, Permit, Ticket};
use super::settings::{Settings, settings_setters};
use super::slots::{Enqueued, Slots};
use crate::sync::Arc;

/// At most `limit` slots in use at once; see the [module docs](super).
///
/// Clones share the same slots.
///
/// # Examples
///
/// ```
/// use tollgate::concurrency::{ConcurrencyLimiter, Priority, Reason};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(10)?;
/// let permit = limiter.try_acquire(5)?;
/// // 5 of 10 in use: sheddable work may use only half the limit.
/// let refused = limiter.try_acquire_as(1, Priority::Sheddable).unwrap_err();
/// assert_eq!(refused.reason(), Reason::Full);
/// assert!(limiter.try_acquire_as(1, Priority::Default).is_ok());
/// drop(permit);
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ConcurrencyLimiter {
    slots: Arc<Slots>,
    max_delay: Duration,
}

/// Builds a [`ConcurrencyLimiter`]; see [`ConcurrencyLimiter::builder`].
#[derive(Debug)]
pub struct ConcurrencyBuilder {
    settings: Settings,
}

impl ConcurrencyBuilder {
    settings_setters!();

    /// The limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a limit of 0 or above
    /// [`MAX_LIMIT`](super::MAX_LIMIT), or bad adaptive bounds.
    pub fn build(self) -> Result<ConcurrencyLimiter, ConfigError> {
        let limit = self.settings.check()?;
        Ok(ConcurrencyLimiter {
            slots: Arc::new(self.settings.slots(limit)),
            max_delay: self.settings.max_delay,
        })
    }
}

impl ConcurrencyLimiter {
    /// At most `limit` slots at once, with the default settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Limit`] unless `1 ≤ limit ≤ MAX_LIMIT`.
    pub fn new(limit: u64) -> Result<ConcurrencyLimiter, ConfigError> {
        ConcurrencyLimiter::builder(limit).build()
    }

    /// Starts building a limiter of `limit` slots.
    pub fn builder(limit: u64) -> ConcurrencyBuilder {
        ConcurrencyBuilder {
            settings: Settings::new(limit),
        }
    }

    /// Takes `cost` slots at [`Priority::Default`] if they fit now.
    ///
    /// # Errors
    ///
    /// [`Denied`] if they do not fit (nothing is taken).
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Permit, Denied> {
        self.try_acquire_as(cost, Priority::Default)
    }

    /// Takes `cost` slots at `priority` if they fit in its share now and
    /// no waiter of the same or a higher priority is queued.
    ///
    /// # Errors
    ///
    /// [`Denied`] if not (nothing is taken).
    #[inline]
    pub fn try_acquire_as(&self, cost: u64, priority: Priority) -> Result<Permit, Denied> {
        let cost = self.cost(cost, priority)?;
        let in_flight = self.slots.try_acquire(cost, priority)?;
        Ok(Permit::new(self.slots.clone(), cost, in_flight))
    }

    /// Takes `cost` slots at [`Priority::Default`] if they fit now, as
    /// [`try_acquire`](Self::try_acquire), in a permit that borrows the
    /// limiter (no reference count: the cheaper call for a permit that
    /// lives inside one scope; see [`BorrowedPermit`]).
    ///
    /// # Errors
    ///
    /// [`Denied`] if they do not fit (nothing is taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// {
    ///     let _permit = limiter.try_acquire_borrowed(1)?;
    ///     assert!(limiter.try_acquire_borrowed(1).is_err());
    /// }
    /// assert_eq!(limiter.in_flight(), 0);
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn try_acquire_borrowed(&self, cost: u64) -> Result<BorrowedPermit<'_>, Denied> {
        self.try_acquire_borrowed_as(cost, Priority::Default)
    }

    /// [`try_acquire_as`](Self::try_acquire_as) in a permit that borrows
    /// the limiter; see [`try_acquire_borrowed`](Self::try_acquire_borrowed).
    ///
    /// # Errors
    ///
    /// [`Denied`] if they do not fit (nothing is taken).
    #[inline]
    pub fn try_acquire_borrowed_as(
        &self,
        cost: u64,
        priority: Priority,
    ) -> Result<BorrowedPermit<'_>, Denied> {
        let cost = self.cost(cost, priority)?;
        let in_flight = self.slots.try_acquire(cost, priority)?;
        Ok(BorrowedPermit::new(&self.slots, cost, in_flight))
    }

    /// Takes `cost` slots at `priority` now if it may, else queues for them:
    /// the returned [`Ticket`] resolves to the permit. Runtime-agnostic
    /// (bring your own timeout); `acquire` (feature `tokio`) adds
    /// `max_delay`.
    ///
    /// # Errors
    ///
    /// [`Denied`] at once if the cost is above the limit or its priority's share
    /// ([`Reason::Cost`]) or the queue is full ([`Reason::QueueFull`]).
    pub fn enqueue(&self, cost: u64, priority: Priority) -> Result<Ticket, Denied> {
        let cost = self.cost(cost, priority)?;
        Ok(match self.slots.enqueue(cost, priority)? {
            Enqueued::Now(in_flight) => {
                Ticket::ready(self.slots.clone(), cost, priority, in_flight)
            }
            Enqueued::Queued(id) => Ticket::queued(self.slots.clone(), cost, priority, id),
        })
    }

    fn cost(&self, cost: u64, priority: Priority) -> Result<u32, Denied> {
        u32::try_from(cost).map_err(|_| {
            let load = self.slots.load();
            Denied {
                reason: Reason::Cost,
                limit: load.limit,
                in_flight: load.in_flight,
                remaining: 0,
            }
            .with_priority_remaining(priority, self)
        })
    }

    /// The limit in force.
    pub fn limit(&self) -> u32 {
        self.slots.load().limit
    }

    /// Slots in use now (permits, and grants not yet claimed).
    pub fn in_flight(&self) -> u32 {
        self.slots.load().in_flight
    }

    /// Whether waiters are queued.
    pub fn has_waiters(&self) -> bool {
        self.slots.load().queued
    }

    /// The longest `acquire().await` waits.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// Changes the limit, live. Raising it serves waiters at once; lowering
    /// it revokes nothing (new slots are granted once `in_flight` is under
    /// the new limit). An adaptive limit overrides it at its next sample.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Limit`] unless `1 ≤ limit ≤ MAX_LIMIT`.
    pub fn set_limit(&self, limit: u64) -> Result<(), ConfigError> {
        self.slots.set_limit(checked_limit(limit)?);
        Ok(())
    }

    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }
}

impl Denied {
    /// Fills `remaining` for `priority` from the limiter's load.
    fn with_priority_remaining(
        mut self,
        priority: Priority,
        limiter: &ConcurrencyLimiter,
    ) -> Denied {
        let threshold = limiter.slots().threshold(self.limit, priority);
        self.remaining = threshold.saturating_sub(self.in_flight);
        self
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let load = self.slots.load();
        f.debug_struct("ConcurrencyLimiter")
            .field("limit", &load.limit)
            .field("in_flight", &load.in_flight)
            .field("queued", &load.queued)
            .finish()
    }
}

#[cfg(feature = "tokio")]
impl ConcurrencyLimiter {
    /// Takes `cost` slots at `priority`, waiting for them in FIFO order
    /// (within a priority; higher priorities first) for at most
    /// `max_delay`. Cancellation-safe: dropping the future at any point
    /// takes no slot and loses none. Feature `tokio`.
    ///
    /// # Errors
    ///
    /// [`Denied`]: at once for [`Reason::Cost`] and [`Reason::QueueFull`],
    /// after `max_delay` with [`Reason::TimedOut`].
    pub async fn acquire(&self, cost: u64, priority: Priority) -> Result<Permit, Denied> {
        let ticket = self.enqueue(cost, priority)?;
        super::wait::within(ticket, self.max_delay, || {
            let load = self.slots.load();
            let threshold = self.slots.threshold(load.limit, priority);
            Denied {
                reason: Reason::TimedOut,
                limit: load.limit,
                in_flight: load.in_flight,
                remaining: threshold.saturating_sub(load.in_flight),
            }
        })
        .await
    }
}
