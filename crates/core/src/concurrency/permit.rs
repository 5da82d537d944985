//! What a caller holds: a [`Permit`] (slots taken, released on drop), its
//! borrowing twin [`BorrowedPermit`], and a [`Ticket`] (a place in the
//! waiting queue, that becomes a permit).
//!
//! # Owned or borrowed (decision)
//!
//! As tokio's `OwnedSemaphorePermit` and `SemaphorePermit`: a [`Permit`]
//! owns a reference to its limit (an `Arc`), so that it can outlive the
//! caller's borrow of the limiter (move it into a task, a response body:
//! what the tower layer needs); a [`BorrowedPermit`] borrows the limiter
//! and saves the reference count's increment and decrement, for a caller
//! whose permit lives inside one scope. Both release exactly once on drop.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::adaptive::Sample;
use super::config::Priority;
use super::slots::{Claim, Slots};
use crate::sync::Arc;

/// `cost` slots of a concurrency limit, held until the permit is dropped.
///
/// Dropping it gives the slots back exactly once: on any path out of the
/// scope that holds it, a panic's unwinding included, and when the future
/// that holds it is dropped. With an adaptive limit, the drop is also the
/// end of the request's latency sample.
#[must_use = "the slots are released as soon as the permit is dropped"]
pub struct Permit {
    slots: Arc<Slots>,
    cost: u32,
    sample: Option<Sample>,
    dropped: bool,
}

impl Permit {
    pub(crate) fn new(slots: Arc<Slots>, cost: u32, in_flight: u32) -> Permit {
        let sample = slots.start_sample(in_flight);
        Permit {
            slots,
            cost,
            sample,
            dropped: false,
        }
    }

    /// The slots this permit holds.
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// Marks the request as failed by overload (a timeout, a 503 from
    /// upstream): an adaptive limit backs off when the permit is dropped, as
    /// Netflix's `onDropped`. No effect on a fixed limit.
    pub fn overloaded(&mut self) {
        self.dropped = true;
    }

    /// Leaves the request out of the adaptive limit's samples (it failed
    /// for a reason unrelated to load, as Netflix's `onIgnore`).
    pub fn ignore_sample(&mut self) {
        self.sample = None;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // `Drop` runs once per value: the slots go back exactly once.
        self.slots.release(self.cost);
        if let Some(sample) = self.sample.take() {
            self.slots.finish_sample(sample, self.dropped);
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("cost", &self.cost).finish()
    }
}

/// `cost` slots of a [`ConcurrencyLimiter`](super::ConcurrencyLimiter),
/// held until dropped, borrowing the limiter; see
/// [`ConcurrencyLimiter::try_acquire_borrowed`](super::ConcurrencyLimiter::try_acquire_borrowed).
///
/// The same as a [`Permit`] (released exactly once on drop, unwinding
/// included; an adaptive limit's sample) but for the lifetime: it cannot
/// outlive the limiter it borrows, and costs no reference count.
#[must_use = "the slots are released as soon as the permit is dropped"]
pub struct BorrowedPermit<'a> {
    slots: &'a Slots,
    cost: u32,
    sample: Option<Sample>,
    dropped: bool,
}

impl<'a> BorrowedPermit<'a> {
    #[inline]
    pub(crate) fn new(slots: &'a Slots, cost: u32, in_flight: u32) -> BorrowedPermit<'a> {
        let sample = slots.start_sample(in_flight);
        BorrowedPermit {
            slots,
            cost,
            sample,
            dropped: false,
        }
    }

    /// The slots this permit holds.
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// As [`Permit::overloaded`].
    pub fn overloaded(&mut self) {
        self.dropped = true;
    }

    /// As [`Permit::ignore_sample`].
    pub fn ignore_sample(&mut self) {
        self.sample = None;
    }
}

impl Drop for BorrowedPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        // `Drop` runs once per value: the slots go back exactly once.
        self.slots.release(self.cost);
        if let Some(sample) = self.sample.take() {
            self.slots.finish_sample(sample, self.dropped);
        }
    }
}

impl fmt::Debug for BorrowedPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BorrowedPermit")
            .field("cost", &self.cost)
            .finish()
    }
}

/// A place in a limit's waiting queue: a future that resolves to the
/// [`Permit`] once the slots are handed to it.
///
/// Dropping the ticket leaves the queue (those behind it move up); if the
/// slots were already handed over but not yet claimed, they are released.
/// So dropping a waiting future at any point loses no slot and takes none.
///
/// # Panics
///
/// Polling a ticket again after it returned its permit panics, as most
/// futures do.
#[must_use = "futures do nothing unless polled; dropping a ticket leaves the queue"]
pub struct Ticket {
    slots: Arc<Slots>,
    cost: u32,
    priority: Priority,
    state: TicketState,
}

enum TicketState {
    /// Admitted when enqueued, with this many in flight after.
    Ready(u32),
    /// Queued under this id.
    Queued(u64),
    /// The permit was handed out.
    Done,
}

impl Ticket {
    pub(crate) fn ready(
        slots: Arc<Slots>,
        cost: u32,
        priority: Priority,
        in_flight: u32,
    ) -> Ticket {
        Ticket {
            slots,
            cost,
            priority,
            state: TicketState::Ready(in_flight),
        }
    }

    pub(crate) fn queued(slots: Arc<Slots>, cost: u32, priority: Priority, id: u64) -> Ticket {
        Ticket {
            slots,
            cost,
            priority,
            state: TicketState::Queued(id),
        }
    }

    /// Whether the ticket is waiting in the queue (rather than admitted at
    /// once or already used).
    pub fn is_queued(&self) -> bool {
        matches!(self.state, TicketState::Queued(_))
    }
}

impl Future for Ticket {
    type Output = Permit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = self.get_mut();
        let in_flight = match this.state {
            TicketState::Ready(in_flight) => in_flight,
            TicketState::Queued(id) => match this.slots.claim(id, this.priority, cx.waker()) {
                Claim::Granted => this.slots.load().in_flight,
                Claim::Waiting => return Poll::Pending,
            },
            TicketState::Done => panic!("a Ticket polled after it completed"),
        };
        this.state = TicketState::Done;
        Poll::Ready(Permit::new(this.slots.clone(), this.cost, in_flight))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        match self.state {
            TicketState::Ready(_) => self.slots.release(self.cost),
            TicketState::Queued(id) => self.slots.cancel(id, self.priority),
            TicketState::Done => {}
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("cost", &self.cost)
            .field("priority", &self.priority)
            .field("queued", &self.is_queued())
            .finish()
    }
}
