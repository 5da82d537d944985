//! One limiter, one thread: `check()` on the allow path and the deny path.
//!
//! Groups `direct_allow` and `direct_deny`, one benchmark per
//! implementation and clock:
//!
//! - `tollgate_<algorithm>_monotonic` / `_cached`: [`Limiter`] running each
//!   algorithm on `MonotonicClock` (`Instant`) and on `CachedClock` (1 ms);
//!   `tollgate_warm_up_monotonic` on `Instant` only;
//! - `governor_quanta` (its default clock), `governor_monotonic`
//!   (`Instant`), `governor_upkeep` (`QuantaUpkeepClock`, 1 ms);
//! - `ratelimit_std` (iopsystems `ratelimit` 2, `Instant`);
//! - `floor_instant` / `floor_cached`: the floor kernel (a clock read, one
//!   load, one compare-and-swap) on the two clocks.

use std::sync::OnceLock;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use governor::clock::{MonotonicClock as GovernorMonotonic, QuantaUpkeepClock};
use ratelimit::Ratelimiter;
use tollgate::{
    Algorithm, CachedClock, Clock, FixedWindow, Gcra, Limiter, MonotonicClock, SlidingLog,
    SlidingWindow, WarmUp,
};

use crate::support::{
    self, COARSE_INTERVAL, Expect, FloorClock, FloorWord, InstantClock, time_ops,
};

/// Slots of every sliding window counter in the suite.
pub const SLIDING_WINDOW_SLOTS: u32 = 10;

/// Governor's coarse clock: quanta allows one upkeep thread per process.
pub fn upkeep_clock() -> QuantaUpkeepClock {
    static CLOCK: OnceLock<QuantaUpkeepClock> = OnceLock::new();
    CLOCK
        .get_or_init(|| {
            QuantaUpkeepClock::from_interval(COARSE_INTERVAL).expect("quanta upkeep thread")
        })
        .clone()
}

/// The cached clock shared by every tollgate limiter and floor of the suite.
pub fn cached_clock() -> CachedClock {
    static CLOCK: OnceLock<CachedClock> = OnceLock::new();
    CLOCK
        .get_or_init(|| CachedClock::new(COARSE_INTERVAL))
        .clone()
}

/// Both paths.
pub fn benches(c: &mut Criterion) {
    for expect in [Expect::All, Expect::None] {
        let name = match expect {
            Expect::All => "direct_allow",
            Expect::None => "direct_deny",
        };
        let mut group = c.benchmark_group(name);
        tollgate_algorithms(&mut group, expect, "monotonic", MonotonicClock::new());
        warm_up(&mut group, expect);
        tollgate_algorithms(&mut group, expect, "cached", cached_clock());
        // The same clock class as governor's default (scripts/bench enables
        // the feature).
        #[cfg(feature = "quanta")]
        tollgate_algorithms(&mut group, expect, "quanta", tollgate::QuantaClock::new());
        governor(&mut group, expect);
        ratelimit(&mut group, expect);
        floor(&mut group, expect, "floor_instant", InstantClock::new());
        floor(&mut group, expect, "floor_cached", cached_clock());
        group.finish();
    }
}

fn tollgate_algorithms<C: Clock + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    expect: Expect,
    clock_name: &str,
    clock: C,
) {
    let (quota, log_quota) = match expect {
        Expect::All => (support::allow_quota(), support::allow_log_quota()),
        Expect::None => (support::deny_quota(), support::deny_quota()),
    };
    let gcra = Gcra::new(quota).expect("gcra");
    let fixed = FixedWindow::new(quota).expect("fixed window");
    let log = SlidingLog::new(log_quota).expect("sliding log");
    let wheel = SlidingWindow::new(quota, SLIDING_WINDOW_SLOTS).expect("sliding window");
    tollgate(
        group,
        expect,
        &format!("tollgate_gcra_{clock_name}"),
        gcra,
        clock.clone(),
    );
    tollgate(
        group,
        expect,
        &format!("tollgate_fixed_window_{clock_name}"),
        fixed,
        clock.clone(),
    );
    tollgate(
        group,
        expect,
        &format!("tollgate_sliding_log_{clock_name}"),
        log,
        clock.clone(),
    );
    tollgate(
        group,
        expect,
        &format!("tollgate_sliding_window_{clock_name}"),
        wheel,
        clock,
    );
}

/// `tollgate_warm_up_monotonic`: pay later, so at the allow quota's rate a
/// permit owes a few ns, less than a check takes, and every check on a
/// clock that moves is admitted (on the cached clock, frozen for 1 ms, the
/// second check would wait: not measured there).
fn warm_up(group: &mut BenchmarkGroup<'_, WallTime>, expect: Expect) {
    let quota = match expect {
        Expect::All => support::allow_quota(),
        Expect::None => support::deny_quota(),
    };
    let warm = WarmUp::new(quota, Duration::from_secs(1)).expect("warm-up");
    tollgate(
        group,
        expect,
        "tollgate_warm_up_monotonic",
        warm,
        MonotonicClock::new(),
    );
}

/// Panics unless `check` starts denying within a few calls.
pub fn exhaust(label: &str, mut check: impl FnMut() -> bool) {
    let mut admitted = 0;
    while check() {
        admitted += 1;
        assert!(admitted < 1_000, "{label}: the deny quota never denies");
    }
}

fn tollgate<A: Algorithm, C: Clock>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    expect: Expect,
    name: &str,
    algorithm: A,
    clock: C,
) {
    let limiter = Limiter::with_clock(algorithm, clock);
    run(group, expect, name, || limiter.check().is_allowed());
}

fn governor(group: &mut BenchmarkGroup<'_, WallTime>, expect: Expect) {
    let quota = match expect {
        Expect::All => support::governor_allow(),
        Expect::None => support::governor_deny(),
    };
    let quanta = governor::RateLimiter::direct(quota);
    run(group, expect, "governor_quanta", || quanta.check().is_ok());
    let monotonic = governor::RateLimiter::direct_with_clock(quota, GovernorMonotonic);
    run(group, expect, "governor_monotonic", || {
        monotonic.check().is_ok()
    });
    let upkeep = governor::RateLimiter::direct_with_clock(quota, upkeep_clock());
    run(group, expect, "governor_upkeep", || upkeep.check().is_ok());
}

fn ratelimit(group: &mut BenchmarkGroup<'_, WallTime>, expect: Expect) {
    let allow = u64::from(support::ALLOW_PER_SECOND);
    let limiter = match expect {
        Expect::All => Ratelimiter::builder(allow)
            .max_tokens(allow)
            .initial_available(allow)
            .build(),
        Expect::None => Ratelimiter::builder(1)
            .period(Duration::from_secs(3_600))
            .max_tokens(1)
            .initial_available(1)
            .build(),
    }
    .expect("ratelimit");
    run(group, expect, "ratelimit_std", || {
        limiter.try_wait().is_ok()
    });
}

fn floor<C: FloorClock>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    expect: Expect,
    name: &str,
    clock: C,
) {
    let word = match expect {
        Expect::All => FloorWord::open(clock),
        Expect::None => FloorWord::exhausted(clock),
    };
    run(group, expect, name, || word.check());
}

/// Benchmarks `check`, after exhausting it for the deny path.
fn run(
    group: &mut BenchmarkGroup<'_, WallTime>,
    expect: Expect,
    name: &str,
    mut check: impl FnMut() -> bool,
) {
    if expect == Expect::None {
        exhaust(name, &mut check);
    }
    group.bench_function(name, |b| {
        b.iter_custom(|iters| time_ops(name, expect, iters, &mut check));
    });
}
