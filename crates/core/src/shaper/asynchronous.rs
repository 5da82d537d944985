//! Waiting without blocking a thread (feature `tokio`): one waiter drives
//! the timer for the queue (see the [module docs](crate::shaper)).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;

impl<C: Clock> Shaper<C> {
    /// Schedules `cost` permits and waits (without blocking the thread)
    /// until they are ready. Returns the scheduled instant. Dropping the
    /// future before then gives the permits back exactly. Feature `tokio`.
    ///
    /// # Errors
    ///
    /// As [`reserve`](Shaper::reserve), at once.
    pub async fn until_ready(&self, cost: u64) -> Result<Nanos, Refusal> {
        let mut reservation = self.reserve(cost)?;
        Ok(reservation.ready().await)
    }
}

impl<C: Clock> Reservation<C> {
    /// Waits until the permits are ready; returns the scheduled instant
    /// and marks the reservation used. Dropping the future before then
    /// leaves the reservation as it was. Feature `tokio`.
    pub fn ready(&mut self) -> Ready<'_, C> {
        Ready {
            reservation: self,
            sleep: None,
        }
    }
}

/// The future of [`Reservation::ready`].
#[must_use = "futures do nothing unless polled"]
pub struct Ready<'a, C: Clock> {
    reservation: &'a mut Reservation<C>,
    /// The driver's timer, with the instant (ns) it is set for.
    sleep: Option<(u64, Pin<Box<tokio::time::Sleep>>)>,
}

impl<C: Clock> fmt::Debug for Ready<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ready")
            .field("reservation", &self.reservation)
            .finish_non_exhaustive()
    }
}

/// What one look at the schedule decided.
enum Step {
    Released,
    Wait,
    Drive(u64),
}

impl<C: Clock> Ready<'_, C> {
    fn look(&mut self, waker: &Waker) -> Step {
        let reservation = &mut *self.reservation;
        let id = reservation.id;
        let shared = &*reservation.shaper.shared;
        let mut schedule = lock(&shared.schedule);
        let mut woken = schedule.release_due(shared.clock.now());
        let step = match schedule.find(id) {
            None => {
                if let Standing::Moved(release) = schedule.standing(id) {
                    reservation.ready_at = Nanos::new(release);
                }
                Step::Released
            }
            Some(at) => {
                let entry = &mut schedule.pending[at];
                reservation.ready_at = Nanos::new(entry.release);
                entry.moved = false;
                match &mut entry.waker {
                    Some(known) if known.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
                if schedule.driver.is_none() {
                    schedule.driver = Some(id);
                }
                if schedule.driver == Some(id) {
                    Step::Drive(schedule.pending[0].release)
                } else {
                    Step::Wait
                }
            }
        };
        if matches!(step, Step::Released) {
            // A released driver was replaced in `release_due`; make sure
            // someone holds the timer.
            if schedule.driver.is_none() {
                woken.extend(schedule.driver_waker());
            }
        }
        drop(schedule);
        wake_all(woken);
        step
    }
}

impl<C: Clock> Future for Ready<'_, C> {
    type Output = Nanos;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Nanos> {
        let this = self.get_mut();
        if this.reservation.state != Held::Pending {
            if this.reservation.state == Held::Released {
                this.reservation.state = Held::Used;
            }
            return Poll::Ready(this.reservation.ready_at);
        }
        loop {
            match this.look(cx.waker()) {
                Step::Released => {
                    this.reservation.shaper.forget(this.reservation.id);
                    this.reservation.state = Held::Used;
                    return Poll::Ready(this.reservation.ready_at);
                }
                Step::Wait => {
                    this.sleep = None;
                    return Poll::Pending;
                }
                Step::Drive(at) => {
                    let clock = &this.reservation.shaper.shared.clock;
                    let armed = matches!(&this.sleep, Some((target, _)) if *target == at);
                    if !armed {
                        // Without real-time instants (a manual clock), re-read
                        // the clock every millisecond.
                        let deadline = clock.instant_at(Nanos::new(at)).map_or_else(
                            || tokio::time::Instant::now() + Duration::from_millis(1),
                            tokio::time::Instant::from_std,
                        );
                        this.sleep = Some((at, Box::pin(tokio::time::sleep_until(deadline))));
                    }
                    let Some((_, sleep)) = this.sleep.as_mut() else {
                        return Poll::Pending;
                    };
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    if clock.now().as_u64() < at {
                        // The timer fired but the clock lags it: look again
                        // in a millisecond rather than spin.
                        let later = tokio::time::Instant::now() + Duration::from_millis(1);
                        this.sleep = Some((at, Box::pin(tokio::time::sleep_until(later))));
                        let Some((_, sleep)) = this.sleep.as_mut() else {
                            return Poll::Pending;
                        };
                        if sleep.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                    }
                    this.sleep = None;
                }
            }
        }
    }
}

impl<C: Clock> Drop for Ready<'_, C> {
    fn drop(&mut self) {
        // A driver that stops waiting hands the timer on.
        let reservation = &*self.reservation;
        if reservation.state != Held::Pending {
            return;
        }
        let shared = &*reservation.shaper.shared;
        let mut schedule = lock(&shared.schedule);
        if schedule.driver == Some(reservation.id) {
            schedule.driver = None;
            if let Some(at) = schedule.find(reservation.id) {
                schedule.pending[at].waker = None;
            }
            let next = schedule.driver_waker();
            drop(schedule);
            if let Some(next) = next {
                next.wake();
            }
        }
    }
}
