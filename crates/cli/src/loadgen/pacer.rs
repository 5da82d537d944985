//! The send loop: every request leaves at its intended time, whatever the
//! earlier ones are doing.
//!
//! One thread, one tokio current-thread runtime and a `LocalSet`: the
//! pacer, the connections and the response handlers share the record and
//! the pool through `Rc<RefCell<…>>`, without atomics or locks.
//!
//! # Holding the schedule
//!
//! Request `i` is due at `start + floor(i·10⁹ / rate)` ns
//! ([`Schedule`](crate::schedule::Schedule)). The pacer sleeps until the
//! next due time on a microsecond timer ([`PreciseTimer`]: a timerfd in
//! tokio's reactor, since tokio's own timer ticks in milliseconds), and on
//! each wake sends, in one batch, every request whose time has passed, so a
//! late wake never loses a request, it only delays it. The send-lag it
//! reports (actual − intended) is measured on every request, not
//! estimated.
//!
//! When to wake and what each wake sends is [`pacing`](super::pacing): two
//! wakes are at least `--quantum` apart, so the requests due within a
//! quantum leave together, each at most a quantum (plus the timer's own
//! lateness) after its time, and measured from that time all the same.
//! By default the quantum is the time 32 requests take at the rate, at
//! most 1 ms; the bound, why, and what it costs are stated there.
//!
//! # Open model
//!
//! A due request takes a free connection; if there is none, another is
//! opened (up to `--max-connections`); if the cap is reached, it waits in a
//! FIFO for the next free connection, but at most `--max-send-lag` after
//! its intended time: past that it is *dropped*, counted and not sent (as
//! k6 drops iterations). With the default lag of 0 nothing waits. A request
//! sent late is still measured from its intended time.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use indicatif::ProgressBar;
use tokio::sync::Notify;

use super::Config;
use super::deadline::Deadlines;
use super::pacing::{Pacing, Timeline, pace};
use super::stats::Recorder;
use super::target::{Sender, Target, hyper_error_kind};
use super::timer::PreciseTimer;

/// How often the progress bar is moved.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How long past the last request's timeout the run waits for it to be
/// recorded.
const SETTLE_MARGIN: Duration = Duration::from_millis(100);
/// How long requests in flight may finish after Ctrl-C.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The record.
    pub recorder: Recorder,
    /// Requests the schedule held.
    pub scheduled: u64,
    /// Requests whose time came before the end (all, unless interrupted).
    pub due: u64,
    /// Requests still unanswered at the end.
    pub unfinished: u64,
    /// Whether Ctrl-C ended the run.
    pub interrupted: bool,
    /// The most connections open at once.
    pub peak_connections: usize,
}

/// A request whose time has come.
#[derive(Clone, Copy, Debug)]
struct Due {
    intended: Instant,
}

/// The connections: free ones, and how many exist.
enum Pool {
    Http1 {
        idle: Vec<hyper::client::conn::http1::SendRequest<super::target::Body>>,
        /// Open or opening.
        count: usize,
    },
    Http2 {
        connections: Vec<Http2Connection>,
        opening: usize,
    },
}

struct Http2Connection {
    sender: hyper::client::conn::http2::SendRequest<super::target::Body>,
    in_flight: Rc<Cell<u64>>,
}

/// A connection lent to one request.
enum Lease {
    Http1(hyper::client::conn::http1::SendRequest<super::target::Body>),
    Http2(
        hyper::client::conn::http2::SendRequest<super::target::Body>,
        Rc<Cell<u64>>,
    ),
}

enum Acquired {
    Lease(Lease),
    /// No free connection, but one may be opened.
    Open,
    /// No free connection and the cap is reached.
    Full,
}

impl Pool {
    fn count(&self) -> usize {
        match self {
            Pool::Http1 { count, .. } => *count,
            Pool::Http2 {
                connections,
                opening,
            } => connections.len() + opening,
        }
    }

    fn acquire(&mut self, max: usize, streams: u64) -> Acquired {
        match self {
            Pool::Http1 { idle, count } => {
                if let Some(sender) = idle.pop() {
                    return Acquired::Lease(Lease::Http1(sender));
                }
                if *count < max {
                    *count += 1;
                    return Acquired::Open;
                }
                Acquired::Full
            }
            Pool::Http2 {
                connections,
                opening,
            } => {
                connections.retain(|connection| !connection.sender.is_closed());
                let least = connections
                    .iter()
                    .min_by_key(|connection| connection.in_flight.get());
                if let Some(connection) =
                    least.filter(|connection| connection.in_flight.get() < streams)
                {
                    connection.in_flight.set(connection.in_flight.get() + 1);
                    return Acquired::Lease(Lease::Http2(
                        connection.sender.clone(),
                        Rc::clone(&connection.in_flight),
                    ));
                }
                if connections.len() + *opening < max {
                    *opening += 1;
                    return Acquired::Open;
                }
                Acquired::Full
            }
        }
    }

    /// A connection opened for a request (counted when `acquire` said Open).
    fn adopt(&mut self, sender: Sender) -> Lease {
        match (self, sender) {
            (Pool::Http1 { .. }, Sender::Http1(sender)) => Lease::Http1(sender),
            (
                Pool::Http2 {
                    connections,
                    opening,
                },
                Sender::Http2(sender),
            ) => {
                *opening -= 1;
                let in_flight = Rc::new(Cell::new(1));
                connections.push(Http2Connection {
                    sender: sender.clone(),
                    in_flight: Rc::clone(&in_flight),
                });
                Lease::Http2(sender, in_flight)
            }
            // The pool's protocol is the target's: a mismatch is impossible.
            (_, Sender::Http1(_) | Sender::Http2(_)) => {
                unreachable!("a connection of the other protocol")
            }
        }
    }

    /// A connection could not be opened.
    fn failed_to_open(&mut self) {
        match self {
            Pool::Http1 { count, .. } => *count -= 1,
            Pool::Http2 { opening, .. } => *opening -= 1,
        }
    }

    /// A request is done with its connection; `reusable` if it may carry
    /// another.
    fn release(&mut self, lease: Lease, reusable: bool) {
        match (self, lease) {
            (Pool::Http1 { idle, count }, Lease::Http1(sender)) => {
                if reusable {
                    idle.push(sender);
                } else {
                    *count -= 1;
                }
            }
            (Pool::Http2 { .. }, Lease::Http2(_, in_flight)) => in_flight.set(in_flight.get() - 1),
            (_, Lease::Http1(_) | Lease::Http2(..)) => {
                unreachable!("a lease of the other protocol")
            }
        }
    }
}

/// What the tasks share.
struct Shared {
    target: Target,
    max_connections: usize,
    streams: u64,
    max_send_lag: Duration,
    timeout: Duration,
    recorder: RefCell<Recorder>,
    pool: RefCell<Pool>,
    waiting: RefCell<VecDeque<Due>>,
    /// Requests sent or being connected, not yet finished.
    outstanding: Cell<u64>,
    peak_connections: Cell<usize>,
    /// Woken when `outstanding` falls to zero.
    settled: Notify,
    /// Each request's `--timeout`.
    deadlines: Rc<Deadlines>,
}

impl Shared {
    /// Hands a due request to a connection, or queues or drops it.
    fn dispatch(self: &Rc<Self>, due: Due) {
        if !self.waiting.borrow().is_empty() {
            self.expire_waiting(Instant::now());
        }
        if !self.waiting.borrow().is_empty() {
            // Earlier requests are already waiting: first come, first served.
            self.waiting.borrow_mut().push_back(due);
            return;
        }
        let acquired = self
            .pool
            .borrow_mut()
            .acquire(self.max_connections, self.streams);
        match acquired {
            Acquired::Lease(lease) => self.send(lease, due),
            Acquired::Open => self.open_and_send(due),
            Acquired::Full if self.max_send_lag.is_zero() => self.recorder.borrow_mut().dropped(),
            Acquired::Full => self.waiting.borrow_mut().push_back(due),
        }
    }

    /// Drops waiting requests that can no longer be sent in time.
    fn expire_waiting(&self, now: Instant) {
        let mut waiting = self.waiting.borrow_mut();
        while let Some(front) = waiting.front() {
            if now.saturating_duration_since(front.intended) <= self.max_send_lag {
                break;
            }
            waiting.pop_front();
            self.recorder.borrow_mut().dropped();
        }
    }

    /// Serves waiting requests while connections are free.
    fn serve_waiting(self: &Rc<Self>) {
        loop {
            if self.waiting.borrow().is_empty() {
                return;
            }
            self.expire_waiting(Instant::now());
            if self.waiting.borrow().is_empty() {
                return;
            }
            let acquired = self
                .pool
                .borrow_mut()
                .acquire(self.max_connections, self.streams);
            let lease = match acquired {
                Acquired::Lease(lease) => Some(lease),
                Acquired::Open => None,
                Acquired::Full => return,
            };
            let Some(due) = self.waiting.borrow_mut().pop_front() else {
                return;
            };
            match lease {
                Some(lease) => self.send(lease, due),
                None => self.open_and_send(due),
            }
        }
    }

    fn open_and_send(self: &Rc<Self>, due: Due) {
        self.begin();
        let count = self.pool.borrow().count();
        self.peak_connections
            .set(self.peak_connections.get().max(count));
        let shared = Rc::clone(self);
        tokio::task::spawn_local(async move {
            match tokio::time::timeout(shared.timeout, shared.target.connect()).await {
                Ok(Ok(sender)) => {
                    shared.recorder.borrow_mut().connections_opened += 1;
                    let lease = shared.pool.borrow_mut().adopt(sender);
                    shared.send(lease, due);
                }
                Ok(Err(kind)) => {
                    shared.pool.borrow_mut().failed_to_open();
                    shared.recorder.borrow_mut().failed(kind);
                }
                Err(_) => {
                    shared.pool.borrow_mut().failed_to_open();
                    shared.recorder.borrow_mut().failed("connect: timed out");
                }
            }
            shared.finish();
        });
    }

    /// Writes the request on `lease` now and handles its response in a task.
    fn send(self: &Rc<Self>, lease: Lease, due: Due) {
        self.begin();
        let request = self.target.request();
        let sent = Instant::now();
        self.recorder.borrow_mut().sent(due.intended, sent);
        let shared = Rc::clone(self);
        match lease {
            Lease::Http1(mut sender) => {
                // `send_request` queues the request on the connection at
                // once; the returned future only waits for the response.
                let response = sender.send_request(request);
                tokio::task::spawn_local(async move {
                    let ok = shared.exchange(response, due, sent).await;
                    // Reusable only once the connection is ready again (the
                    // response was read in full and the server kept it open).
                    // Most often ready at once: no timer to arm then.
                    let reusable = ok
                        && (sender.is_ready()
                            || matches!(
                                tokio::time::timeout(shared.timeout, sender.ready()).await,
                                Ok(Ok(()))
                            ));
                    shared
                        .pool
                        .borrow_mut()
                        .release(Lease::Http1(sender), reusable);
                    shared.serve_waiting();
                    shared.finish();
                });
            }
            Lease::Http2(mut sender, in_flight) => {
                let response = sender.send_request(request);
                tokio::task::spawn_local(async move {
                    shared.exchange(response, due, sent).await;
                    shared
                        .pool
                        .borrow_mut()
                        .release(Lease::Http2(sender, in_flight), true);
                    shared.serve_waiting();
                    shared.finish();
                });
            }
        }
    }

    /// Awaits the response and its whole body, and records the outcome;
    /// `true` if it was received in full.
    async fn exchange(
        &self,
        response: impl Future<Output = hyper::Result<http::Response<hyper::body::Incoming>>>,
        due: Due,
        sent: Instant,
    ) -> bool {
        let exchange = async {
            let response = response.await?;
            let status = response.status().as_u16();
            response.into_body().collect().await?;
            Ok::<u16, hyper::Error>(status)
        };
        let watch = self.deadlines.watch(sent);
        match self.deadlines.within(&watch, exchange).await {
            Ok(Ok(status)) => {
                self.recorder
                    .borrow_mut()
                    .answered(due.intended, sent, Instant::now(), status);
                true
            }
            Ok(Err(error)) => {
                self.recorder.borrow_mut().failed(hyper_error_kind(&error));
                false
            }
            Err(_) => {
                self.recorder
                    .borrow_mut()
                    .timed_out(due.intended, sent, Instant::now());
                false
            }
        }
    }

    fn begin(&self) {
        self.outstanding.set(self.outstanding.get() + 1);
    }

    fn finish(&self) {
        self.outstanding.set(self.outstanding.get() - 1);
        if self.outstanding.get() == 0 {
            self.settled.notify_waiters();
        }
    }
}

/// The wall clock from the start, on the precise timer; a wait ends early
/// on Ctrl-C.
struct Wall<'a> {
    start: Instant,
    timer: PreciseTimer,
    interrupt: &'a Notify,
}

impl Timeline for Wall<'_> {
    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    async fn wait_until(&mut self, at: Duration) {
        // An instant past what `Instant` can hold never comes: only Ctrl-C
        // ends that wait.
        let Some(deadline) = self.start.checked_add(at) else {
            return self.interrupt.notified().await;
        };
        tokio::select! {
            () = self.timer.sleep_until(deadline) => {}
            () = self.interrupt.notified() => {}
        }
    }
}

/// How often a long warm-up says how far it got.
const WARM_UP_NOTE_EVERY: Duration = Duration::from_secs(1);

/// Runs the schedule against the target; call inside a `LocalSet`.
pub async fn run(
    config: &Config,
    target: Target,
    progress: &ProgressBar,
) -> anyhow::Result<Outcome> {
    let pool = if target.http2 {
        Pool::Http2 {
            connections: Vec::new(),
            opening: 0,
        }
    } else {
        Pool::Http1 {
            idle: Vec::new(),
            count: 0,
        }
    };
    let shared = Rc::new(Shared {
        target,
        max_connections: config.max_connections,
        streams: config.streams,
        max_send_lag: config.max_send_lag,
        timeout: config.timeout,
        recorder: RefCell::new(Recorder::new(Instant::now())),
        pool: RefCell::new(pool),
        waiting: RefCell::new(VecDeque::new()),
        outstanding: Cell::new(0),
        peak_connections: Cell::new(0),
        settled: Notify::new(),
        deadlines: Deadlines::new(config.timeout),
    });
    tokio::task::spawn_local(Rc::clone(&shared.deadlines).watchdog());

    // Ctrl-C is heard from here on: during the warm-up too, the run then
    // ends with the (empty) report rather than the default handler's silence.
    let interrupted = Rc::new(Cell::new(false));
    let interrupt = Rc::new(Notify::new());
    {
        let (interrupted, interrupt) = (Rc::clone(&interrupted), Rc::clone(&interrupt));
        tokio::task::spawn_local(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.set(true);
                interrupt.notify_waiters();
            }
        });
    }

    // Warm connections, opened before the clock starts, each within
    // `--timeout` (a listener that never accepts must not hold the run).
    let mut said = Instant::now();
    for opened in 0..config.connections {
        if interrupted.get() {
            break;
        }
        // Never silent for seconds while warming up.
        if said.elapsed() >= WARM_UP_NOTE_EVERY {
            eprintln!(
                "{}",
                crate::messages::warming_up(opened, config.connections)
            );
            said = Instant::now();
        }
        let connect = tokio::time::timeout(config.timeout, shared.target.connect());
        let result = tokio::select! {
            result = connect => result,
            () = interrupt.notified() => break,
        };
        let cannot_reach = crate::messages::cannot_reach(&shared.target.authority);
        let sender = match result {
            Ok(Ok(sender)) => sender,
            Ok(Err(kind)) => anyhow::bail!("{cannot_reach}: {kind}"),
            Err(_) => anyhow::bail!(
                "{cannot_reach}: {}",
                crate::messages::connect_timed_out(config.timeout)
            ),
        };
        let mut pool = shared.pool.borrow_mut();
        match (&mut *pool, sender) {
            (Pool::Http1 { idle, count }, Sender::Http1(sender)) => {
                idle.push(sender);
                *count += 1;
            }
            (Pool::Http2 { connections, .. }, Sender::Http2(sender)) => {
                connections.push(Http2Connection {
                    sender,
                    in_flight: Rc::new(Cell::new(0)),
                });
            }
            _ => unreachable!("the pool's protocol is the target's"),
        }
    }
    shared.peak_connections.set(shared.pool.borrow().count());

    let schedule = config.schedule;
    let scheduled = config.requests;
    let start = Instant::now();
    // The record starts with the schedule, after the warm connections.
    let mut recorder = Recorder::new(start);
    recorder.connections_opened = shared.pool.borrow().count() as u64;
    recorder.schedule_end = schedule.offset(scheduled);
    *shared.recorder.borrow_mut() = recorder;
    let mut pacing = Pacing::new(schedule, scheduled, config.quantum);
    if !interrupted.get() {
        let mut wall = Wall {
            start,
            timer: PreciseTimer::new(),
            interrupt: &interrupt,
        };
        let mut last_progress = start;
        pace(
            &mut pacing,
            &mut wall,
            |index| {
                shared.dispatch(Due {
                    intended: start + schedule.offset(index),
                });
            },
            |handed_out| {
                let now = Instant::now();
                if now.duration_since(last_progress) >= PROGRESS_EVERY {
                    progress.set_position(handed_out);
                    last_progress = now;
                }
                !interrupted.get()
            },
        )
        .await;
    }
    let next = pacing.handed_out();
    progress.set_position(next);
    if interrupted.get() {
        // The schedule ends where the run was stopped: the requests due.
        shared.recorder.borrow_mut().schedule_end = schedule.offset(next);
    }

    // Let what was sent finish: each request is bounded by its timeout,
    // and a waiting request by the send-lag; after Ctrl-C, by a grace.
    // Both options are at most an hour (checked in `Config`), and the sums
    // saturate all the same.
    let grace = if interrupted.get() {
        INTERRUPT_GRACE
    } else {
        // A margin past the last request's own timeout, so that it is
        // recorded as timed out rather than raced by this deadline.
        config
            .timeout
            .saturating_add(config.max_send_lag)
            .saturating_add(SETTLE_MARGIN)
    };
    let now = tokio::time::Instant::now();
    let deadline = now.checked_add(grace).unwrap_or(now + INTERRUPT_GRACE);
    loop {
        shared.expire_waiting(Instant::now());
        if shared.outstanding.get() == 0 && shared.waiting.borrow().is_empty() {
            break;
        }
        let settled = shared.settled.notified();
        tokio::select! {
            () = settled => {}
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
            () = tokio::time::sleep_until(deadline) => break,
            () = interrupt.notified() => break,
        }
    }
    // Whatever still waits for a connection was not sent.
    let never_sent = shared.waiting.borrow_mut().drain(..).count();
    for _ in 0..never_sent {
        shared.recorder.borrow_mut().dropped();
    }
    let unfinished = shared.outstanding.get();
    let peak_connections = shared.peak_connections.get();
    let recorder = std::mem::replace(&mut *shared.recorder.borrow_mut(), Recorder::new(start));
    Ok(Outcome {
        recorder,
        scheduled,
        due: next,
        unfinished,
        interrupted: interrupted.get(),
        peak_connections,
    })
}
