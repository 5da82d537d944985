//! [`Reservation`]: the handle of permits scheduled by the shaper, and how
//! waiting, settling, cancelling and dropping it give permits back.

use std::fmt;
use std::time::Duration;

use super::{Shaper, Standing};
use crate::clock::{Clock, Nanos, QuantaClock};

/// Permits scheduled by [`Shaper::reserve`].
///
/// Dropping it unused gives the permits back (see the [module docs](crate::shaper));
/// [`wait`](Reservation::wait), [`ready`](Reservation::ready) and
/// [`consume`](Reservation::consume) mark it used.
#[must_use = "dropping a reservation gives its permits back"]
pub struct Reservation<C: Clock = QuantaClock> {
    pub(super) shaper: Shaper<C>,
    pub(super) id: u64,
    pub(super) cost: u64,
    pub(super) reserved_after: u64,
    /// The release as last seen: it can only move earlier while pending.
    pub(super) ready_at: Nanos,
    pub(super) state: Held,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Held {
    /// In the queue (or released by the schedule since the handle looked).
    Pending,
    /// Due at once when reserved; not yet used.
    Released,
    /// Waited for: kept when dropped, but it can still be settled or
    /// cancelled.
    Used,
    /// Consumed, cancelled or settled: nothing more to do.
    Done,
}

impl<C: Clock> Reservation<C> {
    /// The permits reserved.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// When the permits are ready: the scheduled instant, which can move
    /// earlier (never later) while waiting, when an earlier caller gives up.
    pub fn ready_at(&self) -> Nanos {
        if self.state != Held::Pending {
            return self.ready_at;
        }
        match self.shaper.lookup(self.id) {
            Standing::Pending(release) | Standing::Moved(release) => Nanos::new(release),
            Standing::Released => self.ready_at,
        }
    }

    /// How long until [`ready_at`](Reservation::ready_at).
    pub fn delay(&self) -> Duration {
        self.ready_at()
            .saturating_duration_since(self.shaper.shared.clock.now())
    }

    /// Blocks the thread until the permits are ready; returns the scheduled
    /// instant and marks the reservation used.
    pub fn wait(&mut self) -> Nanos {
        if self.state == Held::Pending {
            self.shaper.wait_blocking(self.id);
            self.ready_at = self.ready_at();
            self.shaper.forget(self.id);
        }
        if self.state != Held::Done {
            self.state = Held::Used;
        }
        self.ready_at
    }

    /// Keeps the permits as charged, ready or not: dropping it afterwards
    /// gives nothing back.
    pub fn consume(mut self) {
        if self.state == Held::Pending {
            self.shaper.forget(self.id);
        }
        self.state = Held::Done;
    }

    /// Gives the permits back: exactly, while still waiting; as far as later
    /// reservations allow once released (see the [module docs](crate::shaper)).
    /// Returns the permits given back.
    pub fn cancel(mut self) -> u64 {
        self.give_back(None)
    }

    /// Sets the charge to what the work really cost, after the fact: less
    /// than reserved gives the difference back as [`cancel`](Self::cancel)
    /// does, more charges the difference to the next callers. Returns the
    /// permits given back.
    pub fn settle(mut self, actual_cost: u64) -> u64 {
        self.give_back(Some(actual_cost))
    }

    fn give_back(&mut self, actual: Option<u64>) -> u64 {
        let state = std::mem::replace(&mut self.state, Held::Done);
        if state == Held::Done {
            return 0;
        }
        if state == Held::Pending {
            self.shaper.forget(self.id);
        }
        self.shaper
            .adjust(self.id, self.cost, self.reserved_after, actual)
    }
}

impl<C: Clock> Drop for Reservation<C> {
    fn drop(&mut self) {
        // Unused permits go back; used ones were spent.
        if matches!(self.state, Held::Pending | Held::Released) {
            self.give_back(None);
        }
    }
}

impl<C: Clock> fmt::Debug for Reservation<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("cost", &self.cost)
            .field("ready_at", &self.ready_at)
            .field("state", &self.state)
            .finish()
    }
}
