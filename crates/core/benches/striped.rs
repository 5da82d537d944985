//! Does a striped limiter pay for one very hot key on this machine?
//!
//! Java's `LongAdder` spreads one contended counter over several cache
//! lines; the same idea for a rate limiter splits one hot state over
//! `STRIPES` cache-padded words, each thread working on its own. Measured
//! side by side, interleaved round by round:
//!
//! - `gcra_striped`, `window_striped`: two prototypes written here, a
//!   striped GCRA (never over-admits, under-admits instead) and a
//!   `LongAdder`-style fixed window (admits up to `limit + T − 1` for `T`
//!   threads: proof at [`StripedWindow`]); `*_word`: each on one shared word;
//! - `tollgate_striped_*`, `tollgate_striped_admit_*`: the library's
//!   [`StripedLimiter`] (the first prototype made real), `check` and `admit`;
//! - tollgate's `Limiter<Gcra>` (monotonic and cached clocks), governor's
//!   direct limiter, and `keyed_*`: one hot key among 1,000 in a map
//!   ([`KeyedHot`]).
//!
//! **Throughput**: the allow path (every check admitted) and the deny path,
//! 1 and 2 threads for 100 ms a run, aggregate ns per check; of each case's
//! runs the `KEPT` with the highest parallelism (threads' CPU time ÷ wall
//! time) give the median. **Accuracy**: saturated runs must keep each
//! implementation's bound, or the bench panics.
//!
//! `cargo bench -p tollgate --bench striped` prints one JSON object per
//! measurement; `scripts/bench` puts them in `BENCHMARKS.md`. Without
//! `--bench` (`cargo test --all-targets`) it is a short smoke test. What each
//! prototype does and how each figure is measured, in full:
//! `crates/core/docs/striped.md`, "The bench".

#[path = "shared/mod.rs"]
mod shared;
use shared::thread_cpu_ns;

use std::cell::Cell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use tollgate::{
    CachedClock, Clock, Gcra, KeyedLimiter, Limiter, MonotonicClock, Quota, StripedLimiter,
};

/// Stripes of the prototypes: one per core of this machine's 2.
const STRIPES: usize = 2;
/// Thread counts measured.
const THREADS: [usize; 2] = [1, 2];
/// Throughput: rounds, the length of one run, and how many of a case's
/// runs are kept (those with the highest parallelism).
const ROUNDS: usize = 10;
const KEPT: usize = 5;
const RUN: Duration = Duration::from_millis(100);
/// Accuracy: the length of one saturated run.
const SATURATED_RUN: Duration = Duration::from_millis(300);

/// Allow path: 10^9 per second, burst 10^9 (no run comes near it).
const ALLOW_RATE: u64 = 1_000_000_000;
/// Saturated: 10^6 per second, burst 1,000; the window: 1,000 per 1 ms.
const TIGHT_RATE: u64 = 1_000_000;
const TIGHT_BURST: u64 = 1_000;
const TIGHT_WINDOW: Duration = Duration::from_millis(1);

/// What the bench needs of a limiter.
trait Hot: Sync {
    /// One check of one permit.
    fn check(&self) -> bool;
}

impl<C: Clock> Hot for Limiter<Gcra, C> {
    #[inline]
    fn check(&self) -> bool {
        Limiter::check(self).is_allowed()
    }
}

impl<C: Clock> Hot for StripedLimiter<C> {
    #[inline]
    fn check(&self) -> bool {
        StripedLimiter::check(self).is_allowed()
    }
}

/// [`StripedLimiter::admit`]: the same admission without the `Decision`
/// (no read of the other stripes).
struct Admit<C: Clock>(StripedLimiter<C>);

impl<C: Clock> Hot for Admit<C> {
    #[inline]
    fn check(&self) -> bool {
        self.0.admit()
    }
}

impl Hot for governor::DefaultDirectRateLimiter {
    #[inline]
    fn check(&self) -> bool {
        governor::RateLimiter::check(self).is_ok()
    }
}

/// governor on `std::time::Instant`, the clock tollgate's monotonic rows read.
type GovernorMonotonic = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::MonotonicClock,
    governor::middleware::NoOpMiddleware<std::time::Instant>,
>;

impl Hot for GovernorMonotonic {
    #[inline]
    fn check(&self) -> bool {
        governor::RateLimiter::check(self).is_ok()
    }
}

/// The calling thread's stripe: assigned round robin on its first check,
/// as `LongAdder` assigns a probe per thread.
fn my_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|stripe| {
        if stripe.get() == usize::MAX {
            // Relaxed: a counter handing out distinct numbers.
            stripe.set(NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES);
        }
        stripe.get()
    })
}

/// `STRIPES` GCRA words, each with `1 / STRIPES` of the rate and the burst.
///
/// Stripe `i` admits at most `burst / STRIPES + (rate / STRIPES) · t` in any
/// interval of length `t` (it is a GCRA), so all of them together admit at
/// most `burst + rate · t`: the same bound as one word, never more.
struct StripedGcra<C, const N: usize> {
    clock: C,
    /// A stripe's emission interval, ns: `STRIPES` times the quota's.
    interval: u64,
    /// How far a stripe's theoretical arrival time may run ahead of now
    /// after a check: `(burst / STRIPES) · interval`.
    tolerance: u64,
    /// Theoretical arrival times, ns on `clock`; 0 is a full bucket.
    stripes: [CachePadded<AtomicU64>; N],
}

impl<C: Clock, const N: usize> StripedGcra<C, N> {
    fn new(rate_per_second: u64, burst: u64, clock: C) -> StripedGcra<C, N> {
        assert!(
            1_000_000_000 % rate_per_second == 0 && burst % N as u64 == 0,
            "rate {rate_per_second}/s and burst {burst} must divide evenly"
        );
        let interval = 1_000_000_000 / rate_per_second * N as u64;
        StripedGcra {
            clock,
            interval,
            tolerance: burst / N as u64 * interval,
            stripes: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// A limiter with every stripe exhausted for ~146 years.
    fn exhausted(clock: C) -> StripedGcra<C, N> {
        let limiter = StripedGcra::new(1, N as u64, clock);
        for stripe in &limiter.stripes {
            stripe.store(u64::MAX / 4, Ordering::Relaxed);
        }
        limiter
    }

    /// One GCRA step on one stripe; a denial does not write.
    #[inline]
    fn try_stripe(&self, stripe: &AtomicU64, now: u64) -> bool {
        // Relaxed: each stripe is a word of its own that publishes nothing
        // else, as tollgate's GCRA word; its bound needs only the word's
        // own modification order.
        let mut tat = stripe.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now) + self.interval;
            if next - now > self.tolerance {
                return false;
            }
            match stripe.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => tat = actual,
            }
        }
    }
}

impl<C: Clock, const N: usize> StripedGcra<C, N> {
    /// One check at `now` (ns on the clock).
    #[inline]
    fn check_at(&self, now: u64) -> bool {
        let own = my_stripe() % N;
        (0..N).any(|i| self.try_stripe(&self.stripes[(own + i) % N], now))
    }
}

impl<C: Clock, const N: usize> Hot for StripedGcra<C, N> {
    #[inline]
    fn check(&self) -> bool {
        self.check_at(self.clock.now().as_u64())
    }
}

/// A hot key in a map: 1,000 keys in a dashmap (foldhash: the same sharded
/// `RwLock<hashbrown>` design as tollgate's `KeyedLimiter`), each key's
/// state a [`StripedGcra`] of `N` stripes (one: a plain GCRA word); every
/// check is on key 0. A check reads the clock, takes the key's shard lock
/// shared (one atomic read-modify-write on the shard's lock word, and its
/// release) and runs the kernel: striping the state leaves the lock word
/// shared.
struct KeyedHot<const N: usize> {
    clock: MonotonicClock,
    map: DashMap<u64, StripedGcra<NoClock, N>, foldhash::fast::RandomState>,
}

/// The stripes of a [`KeyedHot`] entry read no clock of their own.
struct NoClock;

impl Clock for NoClock {
    fn now(&self) -> tollgate::Nanos {
        unreachable!("a keyed stripe is checked at the map's time")
    }
}

impl<const N: usize> KeyedHot<N> {
    fn new(rate_per_second: u64, burst: u64) -> KeyedHot<N> {
        let map = DashMap::with_hasher(foldhash::fast::RandomState::default());
        for key in 0..1_000u64 {
            map.insert(key, StripedGcra::new(rate_per_second, burst, NoClock));
        }
        KeyedHot {
            clock: MonotonicClock::new(),
            map,
        }
    }
}

impl<const N: usize> Hot for KeyedHot<N> {
    #[inline]
    fn check(&self) -> bool {
        let now = self.clock.now().as_u64();
        self.map.get(&0).is_some_and(|state| state.check_at(now))
    }
}

/// tollgate's keyed limiter, every check on key 0 of 1,000.
impl Hot for (KeyedLimiter<u64>, u64) {
    #[inline]
    fn check(&self) -> bool {
        self.0.check(&self.1).is_allowed()
    }
}

/// `LongAdder`-style fixed window: one `(window index, count)` word per
/// stripe; a check sums the counts of the current window over every
/// stripe, and adds one to its own stripe if the sum is below the limit.
///
/// Over-admission bound: with `T` threads, a window admits at most
/// `limit + T − 1`. A check decides in the latest window among its clock
/// reading and every stripe's (as tollgate's windows never move back in
/// time; deciding in an older window would miss the counts a stripe that
/// moved on has overwritten). Every access is `SeqCst`, so all of them take
/// place in one total order. Let thread `i` admit `a_i` checks in window
/// `w`, and let `i` be the thread whose last admission in `w` began reading
/// last in that order. Every other thread `j` completed its `(a_j − 1)`-th
/// increment in `w` before it began reading for its own last admission,
/// hence before `i` read; `i` found `j`'s stripe still in `w` (a later
/// window would have moved `i`'s decision there), so `i` saw at least
/// `a_j − 1` from `j` and exactly `a_i − 1` from itself:
/// `Σ a − T ≤ its sum < limit`. Reading the sum *then* adding is what
/// costs the `T − 1`; adding first and then reading would be exact but
/// would take back its increment on a denial, so that denials write.
struct StripedWindow<C, const N: usize> {
    clock: C,
    window: u64,
    limit: u64,
    /// Window index (high 32 bits, wrapping) and count (low 32 bits).
    stripes: [CachePadded<AtomicU64>; N],
}

impl<C: Clock, const N: usize> StripedWindow<C, N> {
    fn new(limit: u64, window: Duration, clock: C) -> StripedWindow<C, N> {
        assert!(limit < 1 << 32, "limit {limit} fits in the count");
        StripedWindow {
            clock,
            window: u64::try_from(window.as_nanos()).expect("window in ns"),
            limit,
            stripes: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// The window the check fell in (its index since the clock's origin),
    /// and whether it was admitted.
    #[inline]
    fn check_window(&self) -> (u64, bool) {
        let now = self.clock.now().as_u64() / self.window;
        let own = my_stripe() % N;
        loop {
            // SeqCst: the bound above needs one total order of every read and
            // increment (on x86 a SeqCst load is a plain load).
            let words: [u64; N] = std::array::from_fn(|i| self.stripes[i].load(Ordering::SeqCst));
            // A stripe already in a later window (a thread that read the
            // clock after this one) moves the decision to that window, as
            // tollgate's windows never move back in time: a window's counts
            // are overwritten when its stripe moves on, so deciding in the
            // older one would not see them.
            let w = words.iter().fold(now, |w, &word| {
                let ahead = ((word >> 32) as u32).wrapping_sub(w as u32) as i32;
                if ahead > 0 { w + ahead as u64 } else { w }
            });
            let count_in = |word: u64| {
                if word >> 32 == u64::from(w as u32) {
                    word & 0xFFFF_FFFF
                } else {
                    0
                }
            };
            if words.iter().map(|&word| count_in(word)).sum::<u64>() >= self.limit {
                return (w, false);
            }
            let next = u64::from(w as u32) << 32 | (count_in(words[own]) + 1);
            if self.stripes[own]
                .compare_exchange(words[own], next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return (w, true);
            }
        }
    }
}

impl<C: Clock, const N: usize> Hot for StripedWindow<C, N> {
    #[inline]
    fn check(&self) -> bool {
        self.check_window().1
    }
}

/// What one run measured.
struct Run {
    elapsed: Duration,
    checks: u64,
    admitted: u64,
    /// The threads' time on a CPU ÷ the wall time: how many of them really
    /// ran at once (other processes on this machine take CPUs away).
    parallelism: f64,
}

/// Runs `threads` threads checking `hot` for `run_for` (in batches of 256
/// checks between looks at the stop flag); returns the time from their
/// common start to the last one's finish, the checks and the admissions.
fn run<H: Hot>(hot: &H, threads: usize, run_for: Duration) -> Run {
    let start_line = Barrier::new(threads + 1);
    let finish_line = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (start_line, finish_line, stop) = (&start_line, &finish_line, &stop);
                scope.spawn(move || {
                    let (mut checks, mut admitted) = (0u64, 0u64);
                    start_line.wait();
                    let cpu_start = thread_cpu_ns();
                    // Relaxed: the flag only ends the loop.
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            admitted += u64::from(black_box(hot.check()));
                        }
                        checks += 256;
                    }
                    let cpu = thread_cpu_ns()
                        .zip(cpu_start)
                        .map_or(0, |(end, start)| end - start);
                    finish_line.wait();
                    (checks, admitted, cpu)
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        std::thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
        finish_line.wait();
        let elapsed = start.elapsed();
        let (checks, admitted, cpu) = workers
            .into_iter()
            .map(|worker| worker.join().expect("worker thread"))
            .fold((0, 0, 0), |(c, a, u), (wc, wa, wu)| {
                (c + wc, a + wa, u + wu)
            });
        Run {
            elapsed,
            checks,
            admitted,
            parallelism: cpu as f64 / elapsed.as_nanos() as f64,
        }
    })
}

/// One run on the allow path (every check must be admitted) or the deny
/// path (none may be), else a panic. Returns the
/// aggregate ns per check and the run's parallelism.
fn throughput<H: Hot>(
    name: &str,
    hot: &H,
    allow: bool,
    threads: usize,
    run_for: Duration,
) -> (f64, f64) {
    let Run {
        elapsed,
        checks,
        admitted,
        parallelism,
    } = run(hot, threads, run_for);
    let expected = if allow { checks } else { 0 };
    assert_eq!(
        admitted,
        expected,
        "{name} on {threads} threads: admitted {admitted} of {checks} on the {} path",
        if allow { "allow" } else { "deny" }
    );
    (elapsed.as_nanos() as f64 / checks as f64, parallelism)
}

/// One throughput run at the given thread count: ns per check, parallelism.
type Measure<'a> = dyn Fn(usize) -> (f64, f64) + Sync + 'a;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A saturated GCRA-bounded run: panics unless the admissions are within
/// `burst + rate · t`, `t` from before the limiter was built to the end.
fn saturated_gcra<H: Hot>(
    name: &str,
    build: impl FnOnce() -> H,
    threads: usize,
    run_for: Duration,
) {
    let born = Instant::now();
    let hot = build();
    let Run {
        elapsed,
        checks,
        admitted,
        parallelism,
    } = run(&hot, threads, run_for);
    let t = born.elapsed();
    let bound = TIGHT_BURST + (t.as_nanos() as u64 * TIGHT_RATE).div_ceil(1_000_000_000);
    assert!(
        admitted <= bound,
        "{name} on {threads} threads: admitted {admitted} > burst + rate · t = {bound}"
    );
    println!(
        "{{\"kind\":\"accuracy\",\"case\":\"{name}\",\"threads\":{threads},\"checks\":{checks},\
         \"admitted\":{admitted},\"bound\":{bound},\"fill\":{:.4},\"ns_per_check\":{:.1},\
         \"parallelism\":{parallelism:.2}}}",
        admitted as f64 / bound as f64,
        elapsed.as_nanos() as f64 / checks as f64
    );
}

/// A saturated run of the striped window: panics unless every window
/// admitted at most `limit + threads − 1`.
fn saturated_window(threads: usize, run_for: Duration) {
    let limit = TIGHT_RATE * u64::try_from(TIGHT_WINDOW.as_nanos()).expect("ns") / 1_000_000_000;
    let hot = StripedWindow::<_, STRIPES>::new(limit, TIGHT_WINDOW, MonotonicClock::new());
    let start_line = Barrier::new(threads);
    let stop_at = Instant::now() + run_for + Duration::from_millis(5);
    let per_thread: Vec<(Vec<(u64, u64)>, u64)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (hot, start_line) = (&hot, &start_line);
                scope.spawn(move || {
                    // (window, admissions) in order; checks.
                    let mut windows: Vec<(u64, u64)> = Vec::new();
                    let mut checks = 0u64;
                    start_line.wait();
                    while Instant::now() < stop_at {
                        for _ in 0..256 {
                            let (w, admitted) = hot.check_window();
                            match windows.last_mut() {
                                Some((last, n)) if *last == w => *n += u64::from(admitted),
                                _ => windows.push((w, u64::from(admitted))),
                            }
                        }
                        checks += 256;
                    }
                    (windows, checks)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("worker thread"))
            .collect()
    });
    let mut by_window = std::collections::BTreeMap::<u64, u64>::new();
    for (windows, _) in &per_thread {
        for &(w, n) in windows {
            *by_window.entry(w).or_default() += n;
        }
    }
    let bound = limit + threads as u64 - 1;
    let worst = by_window.values().copied().max().unwrap_or(0);
    assert!(
        worst <= bound,
        "window_striped on {threads} threads: a window admitted {worst} > limit + T − 1 = {bound}"
    );
    let over: u64 = by_window.values().map(|&n| n.saturating_sub(limit)).sum();
    let over_windows = by_window.values().filter(|&&n| n > limit).count();
    // Full windows only (the first and last are partial).
    let inner: Vec<u64> = by_window.values().copied().collect();
    let inner = &inner[1..inner.len().saturating_sub(1).max(1)];
    let fill = inner.iter().sum::<u64>() as f64 / (inner.len() as u64 * limit).max(1) as f64;
    let checks: u64 = per_thread.iter().map(|(_, c)| c).sum();
    println!(
        "{{\"kind\":\"window_accuracy\",\"case\":\"window_striped_monotonic\",\"threads\":{threads},\
         \"checks\":{checks},\"limit\":{limit},\"windows\":{},\"worst_window\":{worst},\"bound\":{bound},\
         \"over_admitted\":{over},\"over_windows\":{over_windows},\"fill\":{fill:.4}}}",
        by_window.len()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not.
    let bench = std::env::args().any(|a| a == "--bench");
    let (rounds, run_for, saturated_for) = if bench {
        (ROUNDS, RUN, SATURATED_RUN)
    } else {
        (1, Duration::from_millis(5), Duration::from_millis(20))
    };

    let cached = CachedClock::new(Duration::from_millis(1));
    let allow = Quota::per_second(ALLOW_RATE)
        .and_then(|q| q.with_burst(ALLOW_RATE))
        .expect("allow quota");
    let tollgate_monotonic =
        Limiter::with_clock(Gcra::new(allow).expect("gcra"), MonotonicClock::new());
    let tollgate_striped_monotonic = StripedLimiter::new(allow, STRIPES).expect("striped");
    let tollgate_striped_admit = Admit(StripedLimiter::new(allow, STRIPES).expect("striped"));
    let tollgate_cached = Limiter::with_clock(Gcra::new(allow).expect("gcra"), cached.clone());
    let gcra_word_monotonic =
        StripedGcra::<_, 1>::new(ALLOW_RATE, ALLOW_RATE, MonotonicClock::new());
    let gcra_word_cached = StripedGcra::<_, 1>::new(ALLOW_RATE, ALLOW_RATE, cached.clone());
    let gcra_striped_monotonic =
        StripedGcra::<_, STRIPES>::new(ALLOW_RATE, ALLOW_RATE, MonotonicClock::new());
    let gcra_striped_cached =
        StripedGcra::<_, STRIPES>::new(ALLOW_RATE, ALLOW_RATE, cached.clone());
    let window_word =
        StripedWindow::<_, 1>::new(ALLOW_RATE, Duration::from_secs(1), MonotonicClock::new());
    let window_striped =
        StripedWindow::<_, STRIPES>::new(ALLOW_RATE, Duration::from_secs(1), MonotonicClock::new());
    let governor_quota =
        governor::Quota::per_second(NonZeroU32::new(ALLOW_RATE as u32).expect("nonzero"));
    let governor_monotonic =
        governor::RateLimiter::direct_with_clock(governor_quota, governor::clock::MonotonicClock);
    // One hot key among 1,000 in a map, on the monotonic clock as its
    // peers here are (the default clock is the TSC since then).
    let keyed_tollgate = (
        KeyedLimiter::builder(Gcra::new(allow).expect("gcra"))
            .clock(MonotonicClock::new())
            .sweep_every(None)
            .build(),
        0u64,
    );
    for key in 0..1_000u64 {
        assert!(keyed_tollgate.0.check(&key).is_allowed());
    }
    let keyed_word = KeyedHot::<1>::new(ALLOW_RATE, ALLOW_RATE);
    let keyed_striped = KeyedHot::<STRIPES>::new(ALLOW_RATE, ALLOW_RATE);
    // Deny path: one permit per hour, taken before the runs (the striped
    // prototype: every stripe's arrival time far in the future).
    let tollgate_deny = Limiter::with_clock(
        Gcra::new(Quota::per_hour(1).expect("quota")).expect("gcra"),
        MonotonicClock::new(),
    );
    assert!(tollgate_deny.check().is_allowed());
    let tollgate_striped_deny =
        StripedLimiter::new(Quota::per_hour(STRIPES as u64).expect("quota"), STRIPES)
            .expect("striped");
    for _ in 0..STRIPES {
        assert!(tollgate_striped_deny.check().is_allowed());
    }
    let gcra_striped_deny = StripedGcra::<_, STRIPES>::exhausted(MonotonicClock::new());
    let governor_deny = governor::RateLimiter::direct(governor::Quota::per_hour(NonZeroU32::MIN));
    assert!(governor_deny.check().is_ok());
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(ALLOW_RATE as u32).expect("nonzero"),
    ));

    // Rounds rotate over every case, each thread count in turn, so that
    // load from the rest of the machine falls on all of them alike.
    let cases: [(&'static str, &Measure<'_>); 19] = [
        ("tollgate_gcra_monotonic", &|t| {
            throughput("tollgate", &tollgate_monotonic, true, t, run_for)
        }),
        ("gcra_word_monotonic", &|t| {
            throughput("word", &gcra_word_monotonic, true, t, run_for)
        }),
        ("gcra_striped_monotonic", &|t| {
            throughput("striped", &gcra_striped_monotonic, true, t, run_for)
        }),
        ("tollgate_striped_monotonic", &|t| {
            throughput(
                "tollgate striped",
                &tollgate_striped_monotonic,
                true,
                t,
                run_for,
            )
        }),
        ("tollgate_striped_admit_monotonic", &|t| {
            throughput(
                "tollgate striped admit",
                &tollgate_striped_admit,
                true,
                t,
                run_for,
            )
        }),
        ("window_word_monotonic", &|t| {
            throughput("window", &window_word, true, t, run_for)
        }),
        ("window_striped_monotonic", &|t| {
            throughput("window", &window_striped, true, t, run_for)
        }),
        ("tollgate_gcra_cached", &|t| {
            throughput("tollgate", &tollgate_cached, true, t, run_for)
        }),
        ("gcra_word_cached", &|t| {
            throughput("word", &gcra_word_cached, true, t, run_for)
        }),
        ("gcra_striped_cached", &|t| {
            throughput("striped", &gcra_striped_cached, true, t, run_for)
        }),
        ("governor_quanta", &|t| {
            throughput("governor", &governor, true, t, run_for)
        }),
        ("keyed_tollgate_monotonic", &|t| {
            throughput("keyed tollgate", &keyed_tollgate, true, t, run_for)
        }),
        ("keyed_word_monotonic", &|t| {
            throughput("keyed word", &keyed_word, true, t, run_for)
        }),
        ("keyed_striped_monotonic", &|t| {
            throughput("keyed striped", &keyed_striped, true, t, run_for)
        }),
        ("tollgate_gcra_monotonic_deny", &|t| {
            throughput("tollgate deny", &tollgate_deny, false, t, run_for)
        }),
        ("gcra_striped_monotonic_deny", &|t| {
            throughput("striped deny", &gcra_striped_deny, false, t, run_for)
        }),
        ("tollgate_striped_monotonic_deny", &|t| {
            throughput(
                "tollgate striped deny",
                &tollgate_striped_deny,
                false,
                t,
                run_for,
            )
        }),
        ("governor_quanta_deny", &|t| {
            throughput("governor deny", &governor_deny, false, t, run_for)
        }),
        ("governor_monotonic", &|t| {
            throughput("governor", &governor_monotonic, true, t, run_for)
        }),
    ];
    // (case, threads) -> every run's (ns per check, parallelism).
    let mut samples: Vec<Vec<Vec<(f64, f64)>>> = vec![vec![Vec::new(); THREADS.len()]; cases.len()];
    for _ in 0..rounds {
        for (i, threads) in THREADS.into_iter().enumerate() {
            for (c, (_, measure)) in cases.iter().enumerate() {
                samples[c][i].push(measure(threads));
            }
        }
    }
    for (c, (name, _)) in cases.iter().enumerate() {
        for (i, threads) in THREADS.into_iter().enumerate() {
            // The `KEPT` runs whose threads were most often on a CPU at once.
            let mut runs = samples[c][i].clone();
            runs.sort_by(|a, b| b.1.total_cmp(&a.1));
            let kept = &runs[..KEPT.min(runs.len())];
            let show = |values: &[(f64, f64)]| {
                values
                    .iter()
                    .map(|(ns, p)| format!("[{ns:.1},{p:.2}]"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            println!(
                "{{\"kind\":\"throughput\",\"case\":\"{name}\",\"threads\":{threads},\"stripes\":{STRIPES},\
                 \"ns_per_check\":{:.2},\"parallelism\":{:.2},\"kept\":{},\"ns_per_check_all\":{:.2},\
                 \"runs\":[{}]}}",
                median(kept.iter().map(|r| r.0).collect()),
                median(kept.iter().map(|r| r.1).collect()),
                kept.len(),
                median(runs.iter().map(|r| r.0).collect()),
                show(&samples[c][i])
            );
        }
    }

    let tight = || {
        Quota::per_second(TIGHT_RATE)
            .and_then(|q| q.with_burst(TIGHT_BURST))
            .expect("tight quota")
    };
    for threads in [2, 1] {
        saturated_gcra(
            "tollgate_gcra_monotonic",
            || Limiter::with_clock(Gcra::new(tight()).expect("gcra"), MonotonicClock::new()),
            threads,
            saturated_for,
        );
        saturated_gcra(
            "gcra_striped_monotonic",
            || StripedGcra::<_, STRIPES>::new(TIGHT_RATE, TIGHT_BURST, MonotonicClock::new()),
            threads,
            saturated_for,
        );
        saturated_gcra(
            "tollgate_striped_monotonic",
            || StripedLimiter::new(tight(), STRIPES).expect("striped"),
            threads,
            saturated_for,
        );
        saturated_gcra(
            "tollgate_striped_admit_monotonic",
            || Admit(StripedLimiter::new(tight(), STRIPES).expect("striped")),
            threads,
            saturated_for,
        );
        saturated_gcra(
            "governor_quanta",
            || {
                governor::RateLimiter::direct(
                    governor::Quota::per_second(NonZeroU32::new(TIGHT_RATE as u32).expect("rate"))
                        .allow_burst(NonZeroU32::new(TIGHT_BURST as u32).expect("burst")),
                )
            },
            threads,
            saturated_for,
        );
        saturated_window(threads, saturated_for);
    }
}
