//! When the pacer wakes, and which requests each wake sends.
//!
//! # The bound
//!
//! Request `i` is due at `d_i = floor(i·10⁹ / rate)` ns after the start
//! ([`Schedule`]). A wake at `w` hands out, in order, every request with
//! `d_i ≤ w` not handed out yet, and asks for the next wake at
//! `max(d_next, w + quantum)`: the next request's time, but never sooner
//! than a quantum after this wake. So, if the timer wakes the pacer `s`
//! after the instant asked for (its *slop*: the kernel's timer, a busy
//! core):
//!
//! - **no request leaves before its time** (`w ≥ d_i`);
//! - **a request leaves at most `quantum + s` after its time**: the wake
//!   before it was at some `w' < d_i` (else it would have left then), so
//!   the next was asked for at `max(d_next, w' + quantum) ≤ d_i + quantum`;
//! - **two wakes are at least a quantum apart**, so a run of `T` wakes at
//!   most `T / quantum + 1` times, whatever the rate.
//!
//! Nothing of this is an estimate: every request's actual send time is
//! measured and reported as its send-lag, and its latency counts from
//! `d_i`. The tests below drive [`pace`] on tokio's paused clock and check
//! the three statements from the recorded wakes and sends.
//!
//! # The quantum
//!
//! Each wake of an idle thread costs far more than a request's own
//! syscalls: the timer's interrupt, the switch back into the thread, the
//! `epoll_wait` and the timer's re-arming, and the responses to a batch
//! then wake it again. Waking once per request made pacing most of the
//! client's CPU at 10,000/s and above (see `BENCHMARKS.md`); oha and wrk2
//! pace on a 1 ms timer tick, so they batch whatever falls in a
//! millisecond, and hide the lateness by timing from the actual send.
//!
//! `--quantum auto` (the default) is the time [`AUTO_BATCH`] requests take
//! at the rate, at most [`MAX_AUTO_QUANTUM`]:
//! `min(1 ms, floor(32·10⁹ / rate) ns)`. It shrinks as the rate grows, so
//! the wakes per request, and the CPU they cost, stay about constant above
//! 32,000/s while the lateness bound gets tighter: 1 ms up to 32,000/s,
//! 533 µs at 60,000/s, 320 µs at 100,000/s. (16 requests' time, 533 µs at
//! 30,000/s, woke twice as often as oha there: 0.09 context switches and
//! 2.44 system calls per request against oha's 0.05 and 2.22; 32 gives
//! 0.04 and 2.22.) Below 1,000/s the requests are
//! more than a millisecond apart and each leaves at its own time.
//! `--quantum 0s` wakes for every request (the tightest timing, the most
//! CPU); any other duration is used as it is.

use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use crate::schedule::Schedule;

/// How many requests' time the automatic quantum spans.
pub const AUTO_BATCH: u64 = 32;
/// The longest automatic quantum: the tick oha and wrk2 pace on.
pub const MAX_AUTO_QUANTUM: Duration = Duration::from_millis(1);

/// The automatic quantum for `schedule`'s rate: the time [`AUTO_BATCH`]
/// requests take, at most [`MAX_AUTO_QUANTUM`].
pub fn auto_quantum(schedule: Schedule) -> Duration {
    schedule.offset(AUTO_BATCH).min(MAX_AUTO_QUANTUM)
}

/// Which requests are due, and when to wake for the next.
#[derive(Clone, Debug)]
pub struct Pacing {
    schedule: Schedule,
    quantum: Duration,
    /// Requests in the schedule.
    scheduled: u64,
    /// The first request not handed out yet.
    next: u64,
}

impl Pacing {
    /// `scheduled` requests on `schedule`, wakes at least `quantum` apart.
    pub fn new(schedule: Schedule, scheduled: u64, quantum: Duration) -> Pacing {
        Pacing {
            schedule,
            quantum,
            scheduled,
            next: 0,
        }
    }

    /// The requests due at `elapsed` (time since the start) and not handed
    /// out yet, in order; they count as handed out from here on.
    pub fn due(&mut self, elapsed: Duration) -> Range<u64> {
        // `d_i ≤ elapsed` ⇔ `d_i < elapsed + 1 ns`.
        let due = self
            .schedule
            .due_before(elapsed.saturating_add(Duration::from_nanos(1)))
            .min(self.scheduled);
        let first = self.next;
        self.next = self.next.max(due);
        first..self.next
    }

    /// The requests handed out so far.
    pub fn handed_out(&self) -> u64 {
        self.next
    }

    /// After a wake at `elapsed`: when to wake next (time since the start),
    /// or `None` when every request was handed out.
    pub fn next_wake(&self, elapsed: Duration) -> Option<Duration> {
        (self.next < self.scheduled).then(|| {
            self.schedule
                .offset(self.next)
                .max(elapsed.saturating_add(self.quantum))
        })
    }
}

/// The pacer's time: how long since the start, and a wait.
pub trait Timeline {
    /// Time since the start.
    fn elapsed(&self) -> Duration;
    /// Returns at `elapsed() ≥ at`, or just after (or earlier, if the run
    /// is being stopped: [`pace`] then asks `between` whether to go on).
    fn wait_until(&mut self, at: Duration) -> impl Future<Output = ()>;
}

/// Hands every request of `pacing` to `send` (its index) at its time, as
/// the [module docs](self) state; after each wake's batch, `between` is
/// told how many were handed out in all and returns whether to go on.
pub async fn pace<T: Timeline>(
    pacing: &mut Pacing,
    timeline: &mut T,
    mut send: impl FnMut(u64),
    mut between: impl FnMut(u64) -> bool,
) {
    loop {
        let now = timeline.elapsed();
        for index in pacing.due(now) {
            send(index);
        }
        if !between(pacing.handed_out()) {
            return;
        }
        let Some(wake) = pacing.next_wake(now) else {
            return;
        };
        timeline.wait_until(wake).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn schedule(rate: u64) -> Schedule {
        Schedule::per_second(rate).unwrap()
    }

    #[test]
    fn the_automatic_quantum_shrinks_as_the_rate_grows_from_1_ms() {
        let auto = |rate| auto_quantum(schedule(rate));
        assert_eq!(auto(1), MAX_AUTO_QUANTUM);
        assert_eq!(auto(10_000), MAX_AUTO_QUANTUM);
        assert_eq!(auto(32_000), MAX_AUTO_QUANTUM);
        assert_eq!(auto(60_000), Duration::from_nanos(533_333));
        assert_eq!(auto(100_000), Duration::from_micros(320));
        assert_eq!(auto(10_000_000), Duration::from_nanos(3_200));
    }

    #[test]
    fn due_hands_out_each_request_once_in_order_up_to_the_schedule() {
        let mut pacing = Pacing::new(schedule(1_000), 5, Duration::ZERO);
        assert_eq!(pacing.due(Duration::ZERO), 0..1);
        assert_eq!(pacing.due(Duration::from_micros(999)), 1..1);
        assert_eq!(pacing.due(Duration::from_millis(1)), 1..2);
        // A late wake hands out everything due meanwhile, and no more than
        // the schedule holds.
        assert_eq!(pacing.due(Duration::from_secs(9)), 2..5);
        assert_eq!(pacing.next_wake(Duration::from_secs(9)), None);
        // A clock read earlier than the last one hands out nothing again.
        assert_eq!(pacing.due(Duration::ZERO), 5..5);
    }

    #[test]
    fn the_next_wake_is_the_next_due_time_but_at_least_a_quantum_away() {
        let mut pacing = Pacing::new(schedule(10_000), 100, Duration::from_micros(250));
        assert_eq!(pacing.due(Duration::ZERO), 0..1);
        // The next request is due at 100 µs, but the quantum is 250 µs.
        assert_eq!(
            pacing.next_wake(Duration::ZERO),
            Some(Duration::from_micros(250))
        );
        assert_eq!(pacing.due(Duration::from_micros(250)), 1..3);
        // Far apart: the next request's own time.
        let mut slow = Pacing::new(schedule(10), 3, Duration::from_micros(250));
        assert_eq!(slow.due(Duration::ZERO), 0..1);
        assert_eq!(
            slow.next_wake(Duration::ZERO),
            Some(Duration::from_millis(100))
        );
    }

    /// tokio's paused clock, with a slop added to some wakes (a thread
    /// woken late), recording what was asked and what happened.
    struct Paused {
        start: tokio::time::Instant,
        /// Extra lateness of wake `k`.
        slop: fn(usize) -> Duration,
        /// (asked for, woke at), since the start.
        wakes: Vec<(Duration, Duration)>,
    }

    impl Timeline for Paused {
        fn elapsed(&self) -> Duration {
            self.start.elapsed()
        }

        async fn wait_until(&mut self, at: Duration) {
            // tokio's timer rounds up to its 1 ms tick: that rounding is
            // slop too, and measured as such.
            tokio::time::sleep_until(self.start + at).await;
            tokio::time::sleep((self.slop)(self.wakes.len())).await;
            self.wakes.push((at, self.elapsed()));
        }
    }

    /// Runs the pacer and checks the module's three statements.
    async fn check_bound(
        rate: u64,
        scheduled: u64,
        quantum: Duration,
        slop: fn(usize) -> Duration,
    ) {
        let schedule = schedule(rate);
        let mut pacing = Pacing::new(schedule, scheduled, quantum);
        let mut timeline = Paused {
            start: tokio::time::Instant::now(),
            slop,
            wakes: Vec::new(),
        };
        // (index, sent at, the wake that sent it: 0 before any)
        let sends = RefCell::new(Vec::new());
        let wakes_so_far = RefCell::new(0_usize);
        let start = timeline.start;
        pace(
            &mut pacing,
            &mut timeline,
            |index| {
                sends
                    .borrow_mut()
                    .push((index, start.elapsed(), *wakes_so_far.borrow()))
            },
            |_| {
                *wakes_so_far.borrow_mut() += 1;
                true
            },
        )
        .await;
        let sends = sends.into_inner();
        let wakes = timeline.wakes;

        let indices: Vec<u64> = sends.iter().map(|&(index, ..)| index).collect();
        assert_eq!(
            indices,
            (0..scheduled).collect::<Vec<_>>(),
            "each once, in order"
        );
        for &(index, sent, wake) in &sends {
            let due = schedule.offset(index);
            assert!(sent >= due, "request {index} left {:?} early", due - sent);
            // The slop of the wake that sent it (none for the first batch).
            let slop = wake
                .checked_sub(1)
                .map_or(Duration::ZERO, |k| wakes[k].1 - wakes[k].0);
            assert!(
                sent - due <= quantum + slop,
                "request {index} left {:?} late, quantum {quantum:?}, slop {slop:?}",
                sent - due
            );
        }
        let mut previous = Duration::ZERO;
        for &(_, woke) in &wakes {
            assert!(
                woke - previous >= quantum,
                "wakes {:?} apart, quantum {quantum:?}",
                woke - previous
            );
            previous = woke;
        }
        let run = sends.last().map_or(Duration::ZERO, |&(_, sent, _)| sent);
        let most = (run.as_nanos() / quantum.as_nanos().max(1)) as usize + 1;
        assert!(wakes.len() <= most, "{} wakes, at most {most}", wakes.len());
    }

    #[tokio::test(start_paused = true)]
    async fn on_the_paused_clock_no_request_is_early_or_later_than_quantum_plus_slop() {
        let none: fn(usize) -> Duration = |_| Duration::ZERO;
        // Every 7th wake is 3 ms late, as a descheduled thread would be.
        let late: fn(usize) -> Duration = |k| {
            if k % 7 == 3 {
                Duration::from_millis(3)
            } else {
                Duration::ZERO
            }
        };
        for slop in [none, late] {
            // The automatic quantum at a rate where it is the full 1 ms...
            check_bound(10_000, 5_000, auto_quantum(schedule(10_000)), slop).await;
            // ... and where it is shorter (32 requests' time: 533 µs).
            check_bound(60_000, 10_000, auto_quantum(schedule(60_000)), slop).await;
            // Slow enough that every request leaves at its own time.
            check_bound(500, 200, auto_quantum(schedule(500)), slop).await;
            // An explicit quantum that is not a whole number of ticks.
            check_bound(7_919, 3_000, Duration::from_micros(2_300), slop).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_between_wakes_stops_handing_out() {
        let mut pacing = Pacing::new(schedule(1_000), 1_000, Duration::ZERO);
        let mut timeline = Paused {
            start: tokio::time::Instant::now(),
            slop: |_| Duration::ZERO,
            wakes: Vec::new(),
        };
        let mut sent = 0;
        pace(
            &mut pacing,
            &mut timeline,
            |_| sent += 1,
            |handed_out| handed_out < 10,
        )
        .await;
        assert_eq!(sent, 10);
        assert_eq!(pacing.handed_out(), 10);
    }
}
