//! Where time comes from.
//!
//! Every algorithm is a pure function of the time it is given; a [`Clock`]
//! is the one place a limiter reads it. Time is a [`Nanos`]: whole
//! nanoseconds since the clock's own origin, so that a `u64` covers 584 years.
//!
//! | clock | cost of a read | resolution | use it for |
//! |---|---|---|---|
//! | [`QuantaClock`] (default) | one time-stamp counter read and a scaling (~7 ns) | ~1 ns | everything running with real time |
//! | [`MonotonicClock`] | one `Instant::now()` (vDSO: ~20 ns, 30 ns and more on some VMs) | 1 ns | readings that are `Instant`'s exactly, at `Instant`'s price |
//! | [`CachedClock`] | one relaxed load | its refresh interval | the hottest paths, where a stale reading of up to one interval is acceptable |
//! | [`ManualClock`] | one relaxed load | 1 ns | tests and simulation |
//!
//! # The default: the time-stamp counter
//!
//! Every constructor without a clock argument ([`Limiter::new`](crate::Limiter::new),
//! [`KeyedLimiter::new`](crate::KeyedLimiter::new),
//! [`Shaper::new`](crate::Shaper::new),
//! [`StripedLimiter::new`](crate::StripedLimiter::new) and their builders)
//! reads the CPU's time-stamp counter through [quanta](https://docs.rs/quanta),
//! governor's default clock class, where the CPU says the counter is
//! invariant (detected once, at run time), and the monotonic clock
//! everywhere else. Its drift against `Instant` is parts per million
//! (−1.1 ms over an hour, measured), which changes a quota by as many
//! parts per million. The monotonic clock is one line away:
//! `Limiter::with_clock(algorithm, MonotonicClock::new())` (or `.clock(…)`
//! on a builder).
//!
//! # Guarantee: clocks that go backwards
//!
//! Readings on different threads need not be ordered as real time is (a
//! time-stamp counter can differ by a few cycles between cores; a
//! [`ManualClock`] can be set back): every algorithm decides at the later
//! of the reading and the time its state already holds, so **a reading
//! before the latest one is decided no more generously than the latest
//! one** (`tests/it/clock.rs`). A keyed limiter's sweeps take part (see
//! [`keyed`](crate::keyed)). So [`QuantaClock`] keeps no shared maximum.
//!
//! The detection (CPUID bits, the calibration), how the drift was
//! measured, and why the default stops at quanta's reading rather than an
//! inlined `rdtsc`: `crates/core/docs/clock.md`.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Gcra, Limiter, ManualClock, Quota};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new(); // clones share one time
//! let limiter = Limiter::with_clock(Gcra::new(Quota::per_second(1)?)?, clock.clone());
//! assert!(limiter.check().is_allowed());
//! assert!(limiter.check().is_denied());
//! clock.advance(Duration::from_secs(1));
//! assert!(limiter.check().is_allowed());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::OnceLock;
use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Ordering};

/// A point in time: nanoseconds since the origin of the clock that produced it.
///
/// Two `Nanos` are comparable only when they come from the same clock (or from
/// clones of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(u64);

impl Nanos {
    /// The clock's origin.
    pub const ZERO: Nanos = Nanos(0);
    /// The last representable instant, 584 years after the origin.
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn new(nanos: u64) -> Nanos {
        Nanos(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The instant `duration` after the origin, saturating at [`Nanos::MAX`].
    pub fn from_duration(duration: Duration) -> Nanos {
        Nanos(saturating_nanos(duration))
    }

    /// The time elapsed since the origin.
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + duration`, saturating at [`Nanos::MAX`].
    pub fn saturating_add(self, duration: Duration) -> Nanos {
        Nanos(self.0.saturating_add(saturating_nanos(duration)))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_duration())
    }
}

/// `duration` in whole nanoseconds, saturating at `u64::MAX`.
pub(crate) fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of monotonic time for limiters.
///
/// Implementations must be cheap to call and must not go backwards in normal
/// operation; the algorithms stay safe if one does (see the
/// [module docs](self)).
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Nanos;

    /// The [`Instant`] at which this clock will read `at`, if the clock runs
    /// with real time; `None` for a clock that moves only when told to.
    ///
    /// Async waiting uses it to hand one deadline to the runtime's timer
    /// instead of polling the clock.
    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        let _ = at;
        None
    }

    /// Blocks the calling thread until this clock reads `at` or later.
    ///
    /// The default sleeps in real time, rechecking the clock, so that it is
    /// right for any clock that runs with real time; [`ManualClock`] wakes
    /// sleepers when it is moved instead.
    fn sleep_until(&self, at: Nanos) {
        loop {
            let now = self.now();
            if now >= at {
                return;
            }
            std::thread::sleep(at.saturating_duration_since(now));
        }
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }

    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        (**self).instant_at(at)
    }

    fn sleep_until(&self, at: Nanos) {
        (**self).sleep_until(at)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }

    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        (**self).instant_at(at)
    }

    fn sleep_until(&self, at: Nanos) {
        (**self).sleep_until(at)
    }
}

/// The origin shared by every [`MonotonicClock`] in the process, so that two
/// limiters built at different times read comparable instants.
fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// [`std::time::Instant`], counted from the first time any `MonotonicClock`
/// was created in this process: the clock to choose where readings must be
/// `Instant`'s exactly (the default is [`QuantaClock`]).
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock counting from the process-wide origin.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: process_origin(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        Nanos(saturating_nanos(self.origin.elapsed()))
    }

    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        self.origin.checked_add(at.as_duration())
    }
}

/// The default clock: the CPU's time-stamp counter, read through
/// [quanta](https://docs.rs/quanta) (governor's default clock class), where
/// the CPU says it is invariant, and the monotonic clock elsewhere (see the
/// [module docs](self) for the detection, the calibration and the measured
/// drift against `Instant`).
///
/// A reading is one counter read and one scaling: ~7 ns on this project's
/// KVM guest, against ~25-38 ns for `Instant::now()` (`clock_gettime`).
/// Every `QuantaClock` in the process counts from one origin (the first one
/// made), so that two limiters read comparable instants.
///
/// # Readings across threads
///
/// Readings taken on one thread, on one core, never go backwards. Readings
/// taken on different cores may: counters can be a few cycles apart between
/// cores (governor#299), so a later reading on another core, or on the same
/// thread after the scheduler moved it, can be a hair behind an earlier one.
/// Nothing in this crate needs more: every algorithm decides at the later of
/// the reading and its state's own time, so a reading that goes backwards
/// only lengthens a wait (the [module docs](self), "Clocks that go
/// backwards"). Where the counter is not used, the readings are the
/// monotonic clock's, which are ordered.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// // The same thread, most likely the same core: in order here. Across
/// // threads, see "Readings across threads".
/// assert!(b >= a);
/// ```
#[derive(Clone, Debug)]
pub struct QuantaClock {
    clock: quanta::Clock,
    /// The raw counter at the process-wide origin: a reading is one counter
    /// read and one scaling (`delta_as_nanos`), with no `Duration` in
    /// between.
    origin: u64,
    /// `origin` on the standard clock, for [`Clock::instant_at`].
    std_origin: Instant,
}

impl QuantaClock {
    /// A clock counting from the process-wide origin. The first one made in
    /// the process calibrates the counter (see the [module docs](self)).
    pub fn new() -> QuantaClock {
        static ORIGIN: OnceLock<QuantaClock> = OnceLock::new();
        ORIGIN
            .get_or_init(|| {
                let clock = quanta::Clock::new();
                QuantaClock {
                    origin: clock.raw(),
                    std_origin: Instant::now(),
                    clock,
                }
            })
            .clone()
    }
}

impl Default for QuantaClock {
    fn default() -> QuantaClock {
        QuantaClock::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Nanos {
        // 0 for a reading at or before the origin (another core's counter a
        // hair behind): never negative. quanta reads the monotonic clock
        // here instead where the counter is not invariant.
        Nanos(self.clock.delta_as_nanos(self.origin, self.clock.raw()))
    }

    /// The two origins were read back to back: a deadline handed to a timer
    /// is off by that gap and the counter's drift from the standard clock
    /// (quanta's calibration), both far below a timer's resolution.
    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        self.std_origin.checked_add(at.as_duration())
    }
}

impl From<QuantaClock> for ClockSource {
    fn from(clock: QuantaClock) -> ClockSource {
        ClockSource::Quanta(clock)
    }
}

/// A clock whose reading is a word that a background thread refreshes.
///
/// A read is one relaxed load, several times cheaper than `Instant::now()`,
/// at the price of a reading that lags real time by up to one refresh
/// interval. A limiter on a cached clock stays exact *relative to the clock*:
/// `retry_after` is then exact to the interval, not to the nanosecond.
///
/// The thread stops by itself once every clone of the clock is dropped.
///
/// Opt-in: creating one spawns a thread.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{CachedClock, Clock};
///
/// let clock = CachedClock::new(Duration::from_millis(1));
/// let first = clock.now();
/// // The reading moves once the background thread has run again.
/// let mut polls = 0;
/// while clock.now() == first && polls < 10_000 {
///     std::thread::sleep(Duration::from_millis(1));
///     polls += 1;
/// }
/// assert!(clock.now() > first);
/// ```
#[derive(Clone, Debug)]
pub struct CachedClock {
    now: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CachedClock {
    /// A clock refreshed every `interval` (at least 1 µs) by a new thread.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to spawn a thread.
    pub fn new(interval: Duration) -> CachedClock {
        let interval = interval.max(Duration::from_micros(1));
        let source = MonotonicClock::new();
        let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(source.now().as_u64()));
        let weak: Weak<std::sync::atomic::AtomicU64> = std::sync::Arc::downgrade(&now);
        std::thread::Builder::new()
            .name("tollgate-clock".into())
            .spawn(move || {
                while let Some(word) = weak.upgrade() {
                    // Relaxed: the word is the only data published; readers need
                    // a recent value, not ordering with other memory.
                    // `fetch_max` keeps the reading monotonic even if the
                    // source ever returned an earlier instant.
                    word.fetch_max(source.now().as_u64(), std::sync::atomic::Ordering::Relaxed);
                    drop(word);
                    std::thread::sleep(interval);
                }
            })
            .expect("tollgate: failed to spawn the cached clock's thread");
        CachedClock { now }
    }
}

impl Clock for CachedClock {
    #[inline]
    fn now(&self) -> Nanos {
        // Relaxed: see the writer.
        Nanos(self.now.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The instant the *source* reaches `at`; the cached reading gets there
    /// up to one refresh interval later.
    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        process_origin().checked_add(at.as_duration())
    }
}

/// A clock that moves only when told to; clones share one time.
///
/// For tests and simulation: a limiter on a `ManualClock` is fully
/// deterministic.
///
/// # Thread safety
///
/// Clones share one atomic word. A thread that advances the clock makes the
/// new time visible to every clone, but a limiter that read the time just
/// before the change may still decide with the old one, exactly as with a
/// real clock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock, Nanos};
///
/// let clock = ManualClock::new();
/// let view = clock.clone();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(view.now(), Nanos::new(2_000_000_000));
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    /// Where [`Clock::sleep_until`] waits for the time to move. Plain `std`
    /// even under loom: no model sleeps.
    moved: std::sync::Arc<(std::sync::Mutex<()>, std::sync::Condvar)>,
}

impl ManualClock {
    /// A clock at its origin, [`Nanos::ZERO`].
    pub fn new() -> ManualClock {
        ManualClock::starting_at(Nanos::ZERO)
    }

    /// A clock reading `start`.
    pub fn starting_at(start: Nanos) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(start.as_u64())),
            moved: std::sync::Arc::default(),
        }
    }

    /// Moves the time forward by `by`, saturating at [`Nanos::MAX`].
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        // Relaxed: the clock word carries no other data; see "Thread safety".
        let _ = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
        self.wake_sleepers();
    }

    /// Sets the time, forwards or backwards.
    pub fn set(&self, now: Nanos) {
        // Relaxed: as in `advance`.
        self.now.store(now.as_u64(), Ordering::Relaxed);
        self.wake_sleepers();
    }

    fn wake_sleepers(&self) {
        let (lock, moved) = &*self.moved;
        // Taking the lock orders this wake-up after any sleeper's check of
        // the time: a sleeper either saw the new time or is already waiting.
        drop(lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        moved.notify_all();
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Nanos {
        // Relaxed: as in `advance`.
        Nanos(self.now.load(Ordering::Relaxed))
    }

    /// Waits until another thread moves the clock to `at` or later.
    fn sleep_until(&self, at: Nanos) {
        let (lock, moved) = &*self.moved;
        let mut guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while self.now() < at {
            guard = moved
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// Any clock, chosen at run time: what a [`KeyedLimiter`](crate::KeyedLimiter)
/// holds, so that its type names only the key and the algorithm.
///
/// The built-in clocks are matched directly (no virtual call); a clock of
/// your own goes behind an `Arc<dyn Clock>` through [`ClockSource::custom`].
#[derive(Clone)]
#[non_exhaustive]
pub enum ClockSource {
    /// [`MonotonicClock`].
    Monotonic(MonotonicClock),
    /// [`CachedClock`].
    Cached(CachedClock),
    /// [`ManualClock`].
    Manual(ManualClock),
    /// [`QuantaClock`], the default.
    Quanta(QuantaClock),
    /// Any other clock.
    Custom(std::sync::Arc<dyn Clock>),
}

impl ClockSource {
    /// A clock of your own.
    pub fn custom(clock: impl Clock + 'static) -> ClockSource {
        ClockSource::Custom(std::sync::Arc::new(clock))
    }
}

/// The default clock, [`QuantaClock`].
impl Default for ClockSource {
    fn default() -> ClockSource {
        ClockSource::Quanta(QuantaClock::new())
    }
}

impl fmt::Debug for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClockSource::Monotonic(clock) => clock.fmt(f),
            ClockSource::Cached(clock) => clock.fmt(f),
            ClockSource::Manual(clock) => clock.fmt(f),
            ClockSource::Quanta(clock) => clock.fmt(f),
            ClockSource::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Clock for ClockSource {
    #[inline]
    fn now(&self) -> Nanos {
        match self {
            ClockSource::Monotonic(clock) => clock.now(),
            ClockSource::Cached(clock) => clock.now(),
            ClockSource::Manual(clock) => clock.now(),
            ClockSource::Quanta(clock) => clock.now(),
            ClockSource::Custom(clock) => clock.now(),
        }
    }

    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        match self {
            ClockSource::Monotonic(clock) => clock.instant_at(at),
            ClockSource::Cached(clock) => clock.instant_at(at),
            ClockSource::Manual(clock) => clock.instant_at(at),
            ClockSource::Quanta(clock) => clock.instant_at(at),
            ClockSource::Custom(clock) => clock.instant_at(at),
        }
    }

    fn sleep_until(&self, at: Nanos) {
        match self {
            ClockSource::Monotonic(clock) => clock.sleep_until(at),
            ClockSource::Cached(clock) => clock.sleep_until(at),
            ClockSource::Manual(clock) => clock.sleep_until(at),
            ClockSource::Quanta(clock) => clock.sleep_until(at),
            ClockSource::Custom(clock) => clock.sleep_until(at),
        }
    }
}

impl From<MonotonicClock> for ClockSource {
    fn from(clock: MonotonicClock) -> ClockSource {
        ClockSource::Monotonic(clock)
    }
}

impl From<CachedClock> for ClockSource {
    fn from(clock: CachedClock) -> ClockSource {
        ClockSource::Cached(clock)
    }
}

impl From<ManualClock> for ClockSource {
    fn from(clock: ManualClock) -> ClockSource {
        ClockSource::Manual(clock)
    }
}

#[cfg(feature = "tokio")]
pub use self::tokio_clock::TokioClock;

#[cfg(feature = "tokio")]
mod tokio_clock {
    use super::*;

    /// tokio's clock: follows `tokio::time::pause` and `advance`, so that a
    /// test on tokio's paused clock drives limiters, waiting and the shaper
    /// deterministically. Feature `tokio`.
    ///
    /// Threads must not block on it ([`Clock::sleep_until`] sleeps in real
    /// time); tasks wait on tokio's timer.
    #[derive(Clone, Copy, Debug)]
    pub struct TokioClock {
        origin: tokio::time::Instant,
    }

    impl TokioClock {
        /// A clock counting from tokio's present instant.
        pub fn new() -> TokioClock {
            TokioClock {
                origin: tokio::time::Instant::now(),
            }
        }
    }

    impl Default for TokioClock {
        fn default() -> TokioClock {
            TokioClock::new()
        }
    }

    impl Clock for TokioClock {
        fn now(&self) -> Nanos {
            Nanos(saturating_nanos(
                tokio::time::Instant::now().saturating_duration_since(self.origin),
            ))
        }

        fn instant_at(&self, at: Nanos) -> Option<Instant> {
            self.origin.into_std().checked_add(at.as_duration())
        }
    }

    impl From<TokioClock> for ClockSource {
        fn from(clock: TokioClock) -> ClockSource {
            ClockSource::custom(clock)
        }
    }
}
