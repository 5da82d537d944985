//! `--timeout` for every request without a timer per request.
//!
//! A tokio timer per request cost a system call per request: registering
//! a timer that may end before the runtime's next planned wake writes to
//! the runtime's eventfd, so that a parked thread recomputes its sleep
//! (`perf stat` at 10,000/s: one `write` per request, a quarter of the
//! client's system calls beyond the request's own `writev` and
//! `recvfrom`).
//!
//! Every request has the same timeout and they are sent one after another
//! on one thread, so their deadlines (send + timeout) come in the order
//! they are registered: a FIFO of deadlines is sorted by construction. One
//! watchdog task sleeps until the oldest deadline still pending, expires
//! every request whose deadline has passed (waking it, so that it gives up
//! its response and records a timeout), and sleeps again. It never wakes
//! later than the oldest pending deadline (a request registered while it
//! sleeps has a later deadline than anything it waits for), so a request
//! times out as it did with its own timer: within tokio's 1 ms timer tick
//! after its deadline. Finished requests leave the front of the queue as
//! they finish, so it holds about the requests in flight.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// The requests waiting for their answer, oldest deadline first.
#[derive(Debug)]
pub struct Deadlines {
    timeout: Duration,
    queue: RefCell<VecDeque<(Instant, Rc<Watch>)>>,
}

/// One request's side of its deadline.
#[derive(Debug, Default)]
pub struct Watch {
    state: Cell<State>,
    waker: RefCell<Option<Waker>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Pending,
    Finished,
    Expired,
}

impl Watch {
    /// The request is over (answered or failed): its deadline no longer
    /// matters.
    pub fn finish(&self) {
        if self.state.get() == State::Pending {
            self.state.set(State::Finished);
        }
        self.waker.borrow_mut().take();
    }

    fn expire(&self) {
        if self.state.get() == State::Pending {
            self.state.set(State::Expired);
            if let Some(waker) = self.waker.borrow_mut().take() {
                waker.wake();
            }
        }
    }
}

/// The outcome of [`Deadlines::within`].
#[derive(Debug)]
pub struct Elapsed;

impl Deadlines {
    /// Requests time out `timeout` after they are registered.
    pub fn new(timeout: Duration) -> Rc<Deadlines> {
        Rc::new(Deadlines {
            timeout,
            queue: RefCell::new(VecDeque::new()),
        })
    }

    /// Registers a request sent at `sent`: its deadline is `sent + timeout`.
    /// `sent` must not be earlier than that of any request registered
    /// before (it is `Instant::now()` on the one pacing thread).
    pub fn watch(&self, sent: Instant) -> Rc<Watch> {
        let watch = Rc::new(Watch::default());
        let deadline = sent.checked_add(self.timeout).unwrap_or(sent);
        let mut queue = self.queue.borrow_mut();
        debug_assert!(
            queue.back().is_none_or(|&(last, _)| last <= deadline),
            "deadlines out of order: {:?} after {deadline:?}",
            queue.back().map(|&(last, _)| last)
        );
        queue.push_back((deadline, Rc::clone(&watch)));
        watch
    }

    /// Runs `future` until it ends or its watch expires.
    pub async fn within<F: Future>(&self, watch: &Watch, future: F) -> Result<F::Output, Elapsed> {
        let mut future = pin!(future);
        let output = poll_fn(|cx| {
            if watch.state.get() == State::Expired {
                return Poll::Ready(Err(Elapsed));
            }
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            let mut waker = watch.waker.borrow_mut();
            match &mut *waker {
                Some(old) if old.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await;
        watch.finish();
        self.pop_finished();
        output
    }

    /// Drops finished requests from the front.
    fn pop_finished(&self) {
        let mut queue = self.queue.borrow_mut();
        while queue
            .front()
            .is_some_and(|(_, watch)| watch.state.get() != State::Pending)
        {
            queue.pop_front();
        }
    }

    /// Expires every pending request whose deadline is at or before `now`;
    /// returns when the next one is due (or `None`: nothing pending).
    pub fn expire(&self, now: Instant) -> Option<Instant> {
        let mut expired = Vec::new();
        {
            let mut queue = self.queue.borrow_mut();
            while let Some((deadline, watch)) = queue.front() {
                if watch.state.get() != State::Pending {
                    queue.pop_front();
                } else if *deadline <= now {
                    if let Some((_, watch)) = queue.pop_front() {
                        expired.push(watch);
                    }
                } else {
                    break;
                }
            }
        }
        // Woken outside the borrow: a woken task may register at once.
        for watch in expired {
            watch.expire();
        }
        self.queue.borrow().front().map(|&(deadline, _)| deadline)
    }

    /// The watchdog: expires requests as their deadlines pass, until the
    /// runtime drops it. Sleeps until the oldest pending deadline, or a
    /// whole timeout when nothing is pending (a request registered
    /// meanwhile has a later deadline than that).
    pub async fn watchdog(self: Rc<Self>) {
        loop {
            // tokio's clock (the same as `Instant::now()` unless paused in
            // a test).
            let now = tokio::time::Instant::now().into_std();
            let next = self
                .expire(now)
                .unwrap_or_else(|| now.checked_add(self.timeout).unwrap_or(now));
            tokio::time::sleep_until(next.into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic: tokio's paused clock, and the `Instant`s it reads.
    fn now() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_unanswered_at_its_deadline_is_given_up_then() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let deadlines = Deadlines::new(Duration::from_secs(2));
                tokio::task::spawn_local(Rc::clone(&deadlines).watchdog());
                let start = now();
                let watch = deadlines.watch(now());
                let never = std::future::pending::<()>();
                let result = deadlines.within(&watch, never).await;
                assert!(result.is_err());
                let waited = now() - start;
                // tokio's timer ticks in milliseconds.
                assert!(
                    waited >= Duration::from_secs(2)
                        && waited <= Duration::from_secs(2) + Duration::from_millis(1),
                    "{waited:?}"
                );
                assert!(deadlines.queue.borrow().is_empty());
            })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_kept_and_leaves_the_queue() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let deadlines = Deadlines::new(Duration::from_secs(2));
                tokio::task::spawn_local(Rc::clone(&deadlines).watchdog());
                let watch = deadlines.watch(now());
                let answer = async {
                    tokio::time::sleep(Duration::from_millis(1_999)).await;
                    7
                };
                assert_eq!(deadlines.within(&watch, answer).await.ok(), Some(7));
                assert!(deadlines.queue.borrow().is_empty());
            })
            .await;
    }

    /// Each request keeps its own deadline, and an early expiry of one does
    /// not touch the others: requests registered while the watchdog sleeps
    /// on an older deadline, or on an empty queue, still time out on time.
    #[tokio::test(start_paused = true)]
    async fn requests_registered_while_the_watchdog_sleeps_time_out_on_time() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let timeout = Duration::from_millis(100);
                let deadlines = Deadlines::new(timeout);
                tokio::task::spawn_local(Rc::clone(&deadlines).watchdog());
                let start = now();
                let results = Rc::new(RefCell::new(Vec::new()));
                let mut tasks = Vec::new();
                // Sent at 0, 30, 60, ..., 270 ms; every third one is
                // answered after 50 ms, the others never.
                for i in 0..10_u64 {
                    tokio::time::sleep_until((start + Duration::from_millis(30 * i)).into()).await;
                    let (deadlines, results) = (Rc::clone(&deadlines), Rc::clone(&results));
                    tasks.push(tokio::task::spawn_local(async move {
                        let sent = now();
                        let watch = deadlines.watch(sent);
                        let answer = async move {
                            if i % 3 == 0 {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            } else {
                                std::future::pending::<()>().await;
                            }
                        };
                        let answered = deadlines.within(&watch, answer).await.is_ok();
                        results.borrow_mut().push((i, answered, now() - sent));
                    }));
                }
                for task in tasks {
                    task.await.unwrap();
                }
                let mut results = results.borrow().clone();
                results.sort_unstable();
                for (i, answered, took) in results {
                    if i % 3 == 0 {
                        assert!(answered, "request {i}");
                        assert_eq!(took, Duration::from_millis(50), "request {i}");
                    } else {
                        assert!(!answered, "request {i}");
                        assert!(
                            took >= timeout && took <= timeout + Duration::from_millis(1),
                            "request {i} gave up after {took:?}"
                        );
                    }
                }
                assert!(deadlines.queue.borrow().is_empty());
            })
            .await;
    }
}
