//! "Defaults against defaults": each library as a user gets it from its
//! constructor, and the like-for-like pairs beside it, measured in
//! interleaved rounds in one process so that every ratio comes from one run.
//!
//! Contenders, one thread, the allow path:
//!
//! - direct: tollgate `Limiter::new(Gcra::new(q)?)` against governor
//!   `RateLimiter::direct(q)` (each on its default clock: both read the TSC
//!   through quanta now), and both on their monotonic clocks; beside them
//!   `clock_read_alone`, the default clock's read and nothing else, the
//!   floor under any check on the TSC;
//! - keyed, u64 keys, uniform over 10^3 and 10^6 keys:
//!   `KeyedLimiter::<u64, Gcra>::new(Gcra::new(q)?)` (its sweeper on, every
//!   second, as a user gets it) against `RateLimiter::keyed(q)` (dashmap,
//!   std's SipHash, quanta); and, like for like, tollgate with its sweeper off
//!   against governor with foldhash (same clock class, same hasher).
//!
//! The quota is 1 permit per minute with a burst of 10^8, in both libraries:
//! no run comes near the burst, so every check is admitted (and checked to
//! be), and no key refills to full during the run, so that tollgate's
//! sweeper, which is on by default, finds nothing to remove and every check
//! takes the known-key path in both libraries.
//!
//! Each round runs every contender of a scenario for [`CHECKS`] checks, in
//! an order rotated every round; a contender's figure is its fastest round
//! (the least disturbed by other work on the machine), with the median
//! beside it. Results go to stdout and, as JSON lines, to the file named by
//! `TOLLGATE_BENCH_DEFAULTS` (`scripts/bench` sets it).
//!
//! `cargo bench -p tollgate --bench defaults` (about a minute). With
//! `--profile` (one short round at the same key counts), under cachegrind:
//! `valgrind --tool=cachegrind --cache-sim=yes target/release/deps/defaults-* --profile keyed_1m`
//! once per contender with `TOLLGATE_BENCH_ONLY=<name>` and once with
//! `TOLLGATE_BENCH_ONLY=none`: the difference of the totals, over the
//! checks, is one contender's instructions and simulated L1 misses per check.

use std::hint::black_box;
use std::io::Write;
use std::num::NonZeroU32;
use std::time::Instant;

use governor::clock::{DefaultClock, MonotonicClock as GovernorMonotonic};
use governor::state::keyed::DashMapStateStore;
use tollgate::{Clock, Gcra, KeyedLimiter, Limiter, MonotonicClock, QuantaClock, Quota};

/// Checks per contender per round: short rounds, so that on a busy machine
/// some of them run undisturbed.
const CHECKS: u64 = 1_000_000;
/// Rounds per scenario.
const ROUNDS: usize = 15;
/// The large key count.
const MANY_KEYS: u64 = 1_000_000;

/// The run's size: the measurement under `cargo bench` (which passes
/// `--bench`), a smoke test of every contender under
/// `cargo test --all-targets`.
#[derive(Clone, Copy)]
struct Size {
    checks: u64,
    rounds: usize,
    many_keys: u64,
}

const MEASURE: Size = Size {
    checks: CHECKS,
    rounds: ROUNDS,
    many_keys: MANY_KEYS,
};

/// One round of 200,000 checks at the measured key counts (`--profile`): a
/// run short enough for `valgrind --tool=cachegrind`, whose simulated cache
/// misses per check do not depend on the load of the machine.
const PROFILE: Size = Size {
    checks: 200_000,
    rounds: 1,
    many_keys: MANY_KEYS,
};

const SMOKE: Size = Size {
    checks: 10_000,
    rounds: 2,
    many_keys: 10_000,
};
/// The burst of every limiter: far above the checks any key gets.
const BURST: u32 = 100_000_000;

fn quota() -> Quota {
    Quota::per_minute(1)
        .and_then(|quota| quota.with_burst(u64::from(BURST)))
        .expect("quota")
}

fn governor_quota() -> governor::Quota {
    governor::Quota::per_minute(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(BURST).expect("nonzero"))
}

fn gcra() -> Gcra {
    Gcra::new(quota()).expect("gcra")
}

/// The `i`-th u64 key: distinct for distinct `i`, scattered.
fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A uniform choice among `n` indices (wyrand, then Lemire's reduction).
#[derive(Clone)]
struct Uniform {
    state: u64,
    n: u64,
}

impl Uniform {
    #[inline]
    fn next_index(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0xA076_1D64_78BD_642F);
        let t = u128::from(self.state) * u128::from(self.state ^ 0xE703_7ED1_A0B4_28DB);
        let r = ((t >> 64) as u64) ^ (t as u64);
        ((u128::from(r) * u128::from(self.n)) >> 64) as u64
    }
}

/// One contender: a name and one check (the argument is a key index).
struct Contender<'a> {
    name: &'static str,
    check: Box<dyn FnMut(u64) -> bool + 'a>,
    rounds: Vec<f64>,
}

impl<'a> Contender<'a> {
    fn new(name: &'static str, check: impl FnMut(u64) -> bool + 'a) -> Contender<'a> {
        Contender {
            name,
            check: Box::new(check),
            rounds: Vec::new(),
        }
    }
}

/// Runs `size.rounds` interleaved rounds of every contender over `keys` keys
/// (0: a direct limiter, no key) and reports each one's fastest round.
fn scenario(
    size: Size,
    scenario: &str,
    keys: u64,
    contenders: &mut [Contender<'_>],
    out: &mut Vec<String>,
) {
    let Size { checks, rounds, .. } = size;
    // For a profile of one contender: `TOLLGATE_BENCH_ONLY=name` runs only
    // that one (`none`: the rest of the program alone, to subtract).
    let only = std::env::var("TOLLGATE_BENCH_ONLY").ok();
    for round in 0..rounds {
        for offset in 0..contenders.len() {
            let contender = &mut contenders[(round + offset) % contenders.len()];
            if only.as_ref().is_some_and(|only| *only != contender.name) {
                continue;
            }
            let mut picker = Uniform {
                state: 0x5EED ^ round as u64,
                n: keys.max(1),
            };
            let check = &mut contender.check;
            let start = Instant::now();
            let mut admitted = 0u64;
            for _ in 0..checks {
                admitted += u64::from(black_box(check(picker.next_index())));
            }
            let elapsed = start.elapsed();
            assert_eq!(
                admitted, checks,
                "{scenario}/{}: a check was denied",
                contender.name
            );
            contender
                .rounds
                .push(elapsed.as_nanos() as f64 / checks as f64);
        }
    }
    for contender in contenders.iter_mut().filter(|c| !c.rounds.is_empty()) {
        contender.rounds.sort_by(f64::total_cmp);
        let min = contender.rounds[0];
        let median = contender.rounds[rounds / 2];
        println!(
            "{scenario:<12} {:<28} min {min:7.2} ns  median {median:7.2} ns",
            contender.name
        );
        out.push(format!(
            "{{\"scenario\":\"{scenario}\",\"impl\":\"{}\",\"min_ns\":{min:.3},\"median_ns\":{median:.3},\"rounds\":{rounds},\"checks\":{checks}}}",
            contender.name
        ));
    }
}

/// Checks keys `0..n` once each, outside the timed rounds.
fn populate(n: u64, mut check: impl FnMut(u64) -> bool) {
    let admitted = (0..n).filter(|&i| check(key_of(i))).count() as u64;
    assert_eq!(admitted, n, "populating: a first check was denied");
}

type GovernorFoldhash =
    governor::RateLimiter<u64, DashMapStateStore<u64, foldhash::fast::RandomState>, DefaultClock>;

fn keyed(size: Size, n: u64, out: &mut Vec<String>) {
    // Under a one-contender profile, the default limiter's background
    // sweeps would be counted in every run: its sweeper is off unless it is
    // the one profiled.
    let tollgate_default = match std::env::var("TOLLGATE_BENCH_ONLY") {
        Ok(only) if only != "tollgate_default" => {
            KeyedLimiter::builder(gcra()).sweep_every(None).build()
        }
        _ => KeyedLimiter::<u64, Gcra>::new(gcra()),
    };
    let tollgate_no_sweeper: KeyedLimiter<u64> =
        KeyedLimiter::builder(gcra()).sweep_every(None).build();
    let governor_default = governor::RateLimiter::keyed(governor_quota());
    let governor_foldhash: GovernorFoldhash = governor::RateLimiter::dashmap_with_hasher(
        governor_quota(),
        foldhash::fast::RandomState::default(),
    );
    populate(n, |k| tollgate_default.check(&k).is_allowed());
    populate(n, |k| tollgate_no_sweeper.check(&k).is_allowed());
    populate(n, |k| governor_default.check_key(&k).is_ok());
    populate(n, |k| governor_foldhash.check_key(&k).is_ok());
    let mut contenders = [
        Contender::new("tollgate_default", |i| {
            tollgate_default.check(&key_of(i)).is_allowed()
        }),
        Contender::new("governor_default", |i| {
            governor_default.check_key(&key_of(i)).is_ok()
        }),
        Contender::new("tollgate_no_sweeper", |i| {
            tollgate_no_sweeper.check(&key_of(i)).is_allowed()
        }),
        Contender::new("governor_foldhash", |i| {
            governor_foldhash.check_key(&key_of(i)).is_ok()
        }),
    ];
    let name = if n > 1_000 { "keyed_1m" } else { "keyed_1k" };
    scenario(size, name, n, &mut contenders, out);
}

fn direct(size: Size, out: &mut Vec<String>) {
    let tollgate_default = Limiter::new(gcra());
    let governor_default = governor::RateLimiter::direct(governor_quota());
    let tollgate_monotonic = Limiter::with_clock(gcra(), MonotonicClock::new());
    let governor_monotonic =
        governor::RateLimiter::direct_with_clock(governor_quota(), GovernorMonotonic);
    let clock = QuantaClock::new();
    let mut contenders = [
        Contender::new("tollgate_default", |_| {
            tollgate_default.check().is_allowed()
        }),
        Contender::new("governor_default", |_| governor_default.check().is_ok()),
        Contender::new("tollgate_monotonic", |_| {
            tollgate_monotonic.check().is_allowed()
        }),
        Contender::new("governor_monotonic", |_| governor_monotonic.check().is_ok()),
        // The floor of a check on the TSC: the clock read alone, which
        // every check of either library makes once (`true`: "admitted").
        Contender::new("clock_read_alone", |_| {
            black_box(clock.now());
            true
        }),
    ];
    scenario(size, "direct", 0, &mut contenders, out);
}

fn main() {
    // A filter word picks scenarios: `direct`, `keyed_1k`, `keyed_1m`.
    let size = if std::env::args().any(|a| a == "--profile") {
        PROFILE
    } else if std::env::args().any(|a| a == "--bench") {
        MEASURE
    } else {
        SMOKE
    };
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let load = |when: &str| {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load average {when}: {}", load.trim());
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let before = load("before");
    let started = Instant::now();
    let mut out = Vec::new();
    if wanted("direct") {
        direct(size, &mut out);
    }
    if wanted("keyed_1k") {
        keyed(size, 1_000, &mut out);
    }
    if wanted("keyed_1m") {
        keyed(size, size.many_keys, &mut out);
    }
    let after = load("after");
    out.push(format!(
        "{{\"load_before\":\"{before}\",\"load_after\":\"{after}\",\"seconds\":{:.0}}}",
        started.elapsed().as_secs_f64()
    ));
    if let Some(path) = std::env::var_os("TOLLGATE_BENCH_DEFAULTS") {
        let mut file = std::fs::File::create(path).expect("results file");
        for line in &out {
            writeln!(file, "{line}").expect("results file");
        }
    }
}
