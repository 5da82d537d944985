//! The shared test vectors (`tests/vectors/core.json`): hand-picked request
//! sequences with the decisions the reference models give, replayed here
//! through the real limiters, and later by the Redis backend's scripts.
//!
//! The file is generated from the cases below by the models
//! (`support::model`), never by the implementation. `vectors_are_what_the_models_say`
//! fails if the committed file differs from what the models generate now;
//! `TOLLGATE_WRITE_VECTORS=1 cargo test -p tollgate --test it -- vectors::vectors_are`
//! rewrites it.
//! See `tests/vectors/README.md` for the format.

use crate::support;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use support::model::{self, Expected, GcraModel};
use tollgate::{
    Algorithm, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota, SlidingLog, SlidingWindow,
};

/// The largest integer a double holds exactly, plus one: every number in the
/// file (and the intermediate products listed in the README) stays below it.
const EXACT_IN_A_DOUBLE: u128 = 1 << 53;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const MIN: u64 = 60 * SEC;
const DAY: u64 = 86_400 * SEC;
/// A clock reading of about 104 days, just below 2^53 ns.
const LATE: u64 = 9_007_000_000_000_000;

// ---------------------------------------------------------------------------
// The file's format
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    description: String,
    algorithm: String,
    quota: QuotaSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slots: Option<u32>,
    steps: Vec<Step>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaSpec {
    limit: u64,
    period_ns: u64,
    burst: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    now_ns: u64,
    cost: u64,
    expect: Expected,
}

impl QuotaSpec {
    fn quota(self) -> Quota {
        Quota::new(self.limit, Duration::from_nanos(self.period_ns))
            .and_then(|q| q.with_burst(self.burst))
            .expect("a valid quota")
    }
}

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/core.json")
}

/// The file's text: a JSON array of cases, one step per line.
fn render(cases: &[Case]) -> String {
    let json = |s: &str| serde_json::to_string(s).unwrap();
    let mut out = String::from("[\n");
    for (i, case) in cases.iter().enumerate() {
        let q = case.quota;
        out += "  {\n";
        writeln!(out, "    \"name\": {},", json(&case.name)).unwrap();
        writeln!(out, "    \"description\": {},", json(&case.description)).unwrap();
        writeln!(out, "    \"algorithm\": {},", json(&case.algorithm)).unwrap();
        writeln!(
            out,
            "    \"quota\": {{\"limit\": {}, \"period_ns\": {}, \"burst\": {}}},",
            q.limit, q.period_ns, q.burst
        )
        .unwrap();
        if let Some(slots) = case.slots {
            writeln!(out, "    \"slots\": {slots},").unwrap();
        }
        out += "    \"steps\": [\n";
        for (j, step) in case.steps.iter().enumerate() {
            let e = step.expect;
            write!(
                out,
                "      {{\"now_ns\": {}, \"cost\": {}, \"expect\": {{\"allowed\": {}, \"limit\": {}, \
                 \"remaining\": {}, \"retry_after_ns\": {}, \"reset_after_ns\": {}}}}}",
                step.now_ns,
                step.cost,
                e.allowed,
                e.limit,
                e.remaining,
                e.retry_after_ns,
                e.reset_after_ns
            )
            .unwrap();
            out += if j + 1 < case.steps.len() {
                ",\n"
            } else {
                "\n"
            };
        }
        out += "    ]\n";
        out += if i + 1 < cases.len() {
            "  },\n"
        } else {
            "  }\n"
        };
    }
    out += "]\n";
    out
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// When a step happens.
#[derive(Clone, Copy, Debug)]
enum At {
    /// At this instant.
    Abs(u64),
    /// This long after the previous step.
    After(u64),
    /// At the previous step's `now + retry_after`, plus this offset (ns).
    Retry(i64),
    /// At the previous step's `now + reset_after`, plus this offset (ns).
    Reset(i64),
}

struct Spec {
    name: &'static str,
    description: &'static str,
    algorithm: &'static str,
    limit: u64,
    period_ns: u64,
    /// `None`: the default, equal to the limit.
    burst: Option<u64>,
    slots: Option<u32>,
    steps: Vec<(At, u64)>,
}

fn spec(
    name: &'static str,
    algorithm: &'static str,
    (limit, period_ns, burst): (u64, u64, Option<u64>),
    description: &'static str,
    steps: Vec<(At, u64)>,
) -> Spec {
    Spec {
        name,
        description,
        algorithm,
        limit,
        period_ns,
        burst,
        slots: None,
        steps,
    }
}

fn wheel(
    name: &'static str,
    (limit, period_ns, slots): (u64, u64, u32),
    description: &'static str,
    steps: Vec<(At, u64)>,
) -> Spec {
    Spec {
        slots: Some(slots),
        ..spec(
            name,
            "sliding_window",
            (limit, period_ns, None),
            description,
            steps,
        )
    }
}

/// `count` steps of `cost` at the same instant as the previous one.
fn again(count: usize, cost: u64) -> impl Iterator<Item = (At, u64)> {
    std::iter::repeat_n((At::After(0), cost), count)
}

fn specs() -> Vec<Spec> {
    use At::{Abs, After, Reset, Retry};
    vec![
        // --- GCRA --------------------------------------------------------
        spec(
            "gcra_burst_then_one_per_interval",
            "gcra",
            (10, SEC, Some(3)),
            "10/s with a burst of 3: three at once, the fourth waits exactly one interval (100 ms); \
             one nanosecond early is still denied; then one per interval",
            [(Abs(0), 1)]
                .into_iter()
                .chain(again(3, 1))
                .chain([
                    (Retry(-1), 1),
                    (After(1), 1),
                    (After(0), 1),
                    (After(100 * MS), 1),
                ])
                .collect(),
        ),
        spec(
            "gcra_default_burst_is_the_limit",
            "gcra",
            (5, SEC, None),
            "5/s with the default burst: five at once, the sixth waits 200 ms",
            [(Abs(0), 1)]
                .into_iter()
                .chain(again(5, 1))
                .chain([(Retry(0), 1), (After(0), 1)])
                .collect(),
        ),
        spec(
            "gcra_idle_refills_to_the_burst_not_beyond",
            "gcra",
            (10, SEC, Some(3)),
            "after ten idle seconds the bucket holds the burst (3), not 100",
            [(Abs(0), 3), (After(10 * SEC), 0)]
                .into_iter()
                .chain(again(4, 1))
                .collect(),
        ),
        spec(
            "gcra_partial_refill_rounds_remaining_down",
            "gcra",
            (10, SEC, Some(5)),
            "150 ms after emptying, 1.5 permits have dripped back: 1 remains, and a cost of 2 \
             waits the other 50 ms",
            vec![
                (Abs(0), 5),
                (Abs(150 * MS), 0),
                (After(0), 2),
                (Retry(-1), 2),
                (Retry(0), 2),
            ],
        ),
        spec(
            "gcra_cost_above_one",
            "gcra",
            (100, SEC, Some(10)),
            "100/s, burst 10: costs of 4 take 4 intervals each; a denied cost waits until exactly \
             enough has drained; a cost of the whole burst waits for an empty bucket",
            vec![
                (Abs(0), 4),
                (After(0), 4),
                (After(0), 4),
                (Retry(0), 4),
                (After(0), 10),
                (Retry(-1), 10),
                (Retry(0), 10),
            ],
        ),
        spec(
            "gcra_cost_zero_looks_without_taking",
            "gcra",
            (2, SEC, None),
            "a cost of 0 is admitted and reports the state: fresh (reset 0), then empty, then half \
             refilled; it never takes anything",
            vec![
                (Abs(0), 0),
                (After(0), 2),
                (After(0), 0),
                (After(0), 1),
                (After(250 * MS), 0),
                (After(250 * MS), 0),
                (After(0), 1),
                (Reset(0), 0),
            ],
        ),
        spec(
            "gcra_fractional_interval_3_per_second",
            "gcra",
            (3, SEC, None),
            "3/s is an interval of 333,333,333.3 ns, exact in ticks of 1/3 ns: kept busy, the \
             bucket admits at exactly 333,333,334, 666,666,667 and 1,000,000,000 ns (the first \
             whole nanosecond at or after k/3 s), and denies one nanosecond before each",
            vec![
                (Abs(0), 3),
                (After(0), 1),
                (Retry(-1), 1),
                (After(1), 1),
                (After(0), 1),
                (Retry(-1), 1),
                (After(1), 1),
                (After(0), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        spec(
            "gcra_burst_one_counts_from_each_admission",
            "gcra",
            (3, SEC, Some(1)),
            "3/s with a burst of 1: each permit waits a full interval after the previous \
             admission, so a request that comes late loses the fraction: admitted at 0, \
             333,333,334 and 666,666,668, each denied one nanosecond before",
            vec![
                (Abs(0), 1),
                (Abs(1), 1),
                (Retry(-1), 1),
                (After(1), 1),
                (After(1), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        spec(
            "gcra_999_per_minute",
            "gcra",
            (999, MIN, Some(5)),
            "999/min (60,060,060.06 ns per permit) in ticks of 1/16 ns, the interval rounded up to \
             a whole tick: never faster than asked",
            [(Abs(0), 5)]
                .into_iter()
                .chain([
                    (After(0), 1),
                    (Retry(-1), 1),
                    (After(1), 1),
                    (After(0), 1),
                    (Retry(0), 1),
                    (After(0), 5),
                    (Retry(0), 5),
                ])
                .collect(),
        ),
        spec(
            "gcra_very_fast_1e10_per_second",
            "gcra",
            (10_000_000_000, SEC, Some(10)),
            "10^10/s is 0.1 ns per permit, exact in ticks of 1/10 ns: a burst of 10 refills in \
             one nanosecond",
            vec![
                (Abs(1_000), 10),
                (After(0), 1),
                (After(1), 10),
                (After(0), 1),
                (After(1), 5),
                (After(0), 5),
                (After(0), 1),
            ],
        ),
        spec(
            "gcra_slow_1_per_50_days",
            "gcra",
            (1, 50 * DAY, None),
            "one permit per 50 days (the slowest that keeps the file below 2^53 ns): the wait is \
             exact to the nanosecond",
            vec![
                (Abs(0), 1),
                (Abs(DAY), 1),
                (Retry(-1), 1),
                (After(1), 1),
                (After(7 * DAY), 0),
            ],
        ),
        spec(
            "gcra_burst_above_the_limit",
            "gcra",
            (1, SEC, Some(5)),
            "1/s with a burst of 5: five at once, then one per second; 2.5 s later 2 are back",
            [(Abs(0), 1)]
                .into_iter()
                .chain(again(5, 1))
                .chain([(Retry(0), 1), (After(2_500 * MS), 0), (After(0), 3)])
                .collect(),
        ),
        spec(
            "gcra_clock_at_a_large_value",
            "gcra",
            (100, SEC, Some(5)),
            "a clock reading about 104 days (just below 2^53 ns) changes nothing",
            [(Abs(LATE + 123), 1)]
                .into_iter()
                .chain(again(5, 1))
                .chain([(Retry(-1), 1), (After(1), 1), (After(SEC), 0)])
                .collect(),
        ),
        // --- Fixed window --------------------------------------------------
        spec(
            "fixed_window_limit_per_aligned_window",
            "fixed_window",
            (3, SEC, None),
            "3/s: three in window [0, 1 s); the last nanosecond of it is denied; the next window \
             starts at exactly 1 s",
            vec![
                (Abs(0), 1),
                (Abs(1), 1),
                (Abs(2), 1),
                (Abs(SEC - 1), 1),
                (Abs(SEC), 1),
                (After(0), 2),
                (After(0), 1),
            ],
        ),
        spec(
            "fixed_window_retry_is_the_next_window",
            "fixed_window",
            (1, SEC, None),
            "a denial waits exactly until the next window; reset_after is the same instant",
            vec![
                (Abs(250 * MS), 1),
                (Abs(400 * MS), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        spec(
            "fixed_window_edges_admit_twice_the_limit",
            "fixed_window",
            (5, MIN, None),
            "the weak statement: 5 in the last nanosecond of one minute and 5 in the first of the \
             next are both admitted",
            vec![
                (Abs(MIN - 1), 5),
                (After(0), 1),
                (After(1), 5),
                (After(0), 1),
            ],
        ),
        spec(
            "fixed_window_cost_above_one",
            "fixed_window",
            (10, MIN, None),
            "10/min: costs of 4, 4, then 4 is denied but 2 fits; then nothing until the next minute",
            vec![
                (Abs(5 * SEC), 4),
                (After(SEC), 4),
                (After(SEC), 4),
                (After(0), 2),
                (After(0), 1),
                (Retry(0), 10),
            ],
        ),
        spec(
            "fixed_window_cost_zero",
            "fixed_window",
            (2, SEC, None),
            "a cost of 0 is admitted and takes nothing; reset_after is 0 while the window is empty",
            vec![
                (Abs(100 * MS), 0),
                (After(0), 1),
                (After(0), 0),
                (After(0), 1),
                (After(0), 0),
                (After(0), 1),
                (Abs(SEC), 0),
            ],
        ),
        spec(
            "fixed_window_idle_windows_are_empty",
            "fixed_window",
            (2, SEC, None),
            "windows skipped while idle start empty",
            vec![
                (Abs(0), 2),
                (After(0), 1),
                (Abs(10 * SEC + 500 * MS), 2),
                (After(0), 1),
            ],
        ),
        spec(
            "fixed_window_999_per_minute",
            "fixed_window",
            (999, MIN, None),
            "999/min in one window: the whole limit at once, then nothing until the minute ends",
            vec![
                (Abs(30 * SEC), 999),
                (Abs(MIN - 1), 1),
                (Abs(MIN), 998),
                (After(0), 2),
            ],
        ),
        spec(
            "fixed_window_very_fast_1e10_per_second",
            "fixed_window",
            (1_000, 100, None),
            "1,000 per 100 ns (10^10/s): windows of 100 ns",
            vec![
                (Abs(0), 1_000),
                (Abs(99), 1),
                (Abs(100), 600),
                (After(0), 401),
                (After(0), 400),
            ],
        ),
        spec(
            "fixed_window_slow_1_per_50_days",
            "fixed_window",
            (1, 50 * DAY, None),
            "one per 50-day window",
            vec![
                (Abs(DAY), 1),
                (Abs(2 * DAY), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        spec(
            "fixed_window_clock_at_a_large_value",
            "fixed_window",
            (100, SEC, None),
            "windows stay aligned to the clock's origin at about 104 days",
            vec![
                (Abs(LATE + SEC - 2), 100),
                (After(1), 1),
                (After(1), 100),
                (After(0), 1),
            ],
        ),
        // --- Sliding log -----------------------------------------------------
        spec(
            "sliding_log_every_window_at_any_start",
            "sliding_log",
            (2, SEC, None),
            "the strong statement: a new second does not reset anything; a permit counts for \
             exactly one period after it was admitted",
            vec![
                (Abs(900 * MS), 1),
                (Abs(1_000 * MS), 1),
                (Abs(1_100 * MS), 1),
                (Abs(1_900 * MS - 1), 1),
                (Abs(1_900 * MS), 1),
                (After(0), 1),
            ],
        ),
        spec(
            "sliding_log_costs_wait_for_enough_expiries",
            "sliding_log",
            (5, SEC, None),
            "cost 3 then 2; a cost of 4 needs 4 of the 5 gone, so it waits for the second \
             admission to expire, not the first",
            vec![
                (Abs(0), 3),
                (Abs(100 * MS), 2),
                (Abs(200 * MS), 4),
                (Retry(-1), 4),
                (After(1), 4),
                (After(0), 1),
                (After(0), 1),
            ],
        ),
        spec(
            "sliding_log_exact_retry",
            "sliding_log",
            (1, 1_000, None),
            "1 per microsecond: admitted at 0, denied until exactly 1,000 ns",
            vec![
                (Abs(0), 1),
                (Abs(1), 1),
                (Retry(-1), 1),
                (After(1), 1),
                (After(0), 1),
            ],
        ),
        spec(
            "sliding_log_cost_zero_and_reset",
            "sliding_log",
            (3, SEC, None),
            "reset_after is when the newest counting permit stops counting; a cost of 0 reports it \
             and takes nothing",
            vec![
                (Abs(0), 0),
                (After(0), 1),
                (Abs(400 * MS), 1),
                (Abs(700 * MS), 0),
                (Abs(1_200 * MS), 0),
                (Reset(-1), 0),
                (After(1), 0),
            ],
        ),
        spec(
            "sliding_log_999_per_minute",
            "sliding_log",
            (999, MIN, None),
            "999/min: 500 then 499; one more waits for the first 500 to expire",
            vec![
                (Abs(0), 500),
                (Abs(30 * SEC), 499),
                (Abs(45 * SEC), 1),
                (Retry(-1), 500),
                (After(1), 500),
                (After(0), 1),
            ],
        ),
        spec(
            "sliding_log_very_fast_1e10_per_second",
            "sliding_log",
            (10, 1, None),
            "10 per nanosecond: a permit counts only during the nanosecond it was admitted in",
            vec![(Abs(5), 10), (After(0), 1), (After(1), 10), (After(0), 1)],
        ),
        spec(
            "sliding_log_slow_1_per_50_days",
            "sliding_log",
            (1, 50 * DAY, None),
            "one per any 50 days",
            vec![
                (Abs(DAY), 1),
                (Abs(50 * DAY), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        spec(
            "sliding_log_clock_at_a_large_value",
            "sliding_log",
            (3, SEC, None),
            "nothing changes at about 104 days",
            vec![
                (Abs(LATE), 1),
                (Abs(LATE + 10 * MS), 2),
                (After(0), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        // --- Sliding window counter ----------------------------------------
        wheel(
            "sliding_window_slots_leave_one_at_a_time",
            (4, SEC, 4),
            "4/s in 4 slots of 250 ms: the slot holding the first two leaves the window at 1 s",
            vec![
                (Abs(0), 2),
                (Abs(300 * MS), 2),
                (Abs(600 * MS), 1),
                (Abs(SEC - 1), 1),
                (Abs(SEC), 2),
                (After(0), 1),
                (Retry(0), 1),
            ],
        ),
        wheel(
            "sliding_window_uneven_slots",
            (1, 10, 3),
            "1 per 10 ns in 3 slots: slots start at 0, 4, 7, 10, 14, 17, 20, ...; every run of 3 \
             slots is exactly 10 ns",
            vec![
                (Abs(3), 1),
                (Abs(9), 1),
                (Abs(10), 1),
                (Abs(13), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        wheel(
            "sliding_window_one_slot_is_a_fixed_window",
            (2, SEC, 1),
            "with one slot the wheel is a fixed window",
            vec![(Abs(SEC - 1), 2), (After(0), 1), (After(1), 2)],
        ),
        wheel(
            "sliding_window_unaligned_window_can_hold_twice_the_limit",
            (3, SEC, 4),
            "the tight bound: 3 at the end of slot 0 and 3 at the start of slot 4, 750 ms + 1 ns \
             apart",
            vec![
                (Abs(250 * MS - 1), 3),
                (After(1), 1),
                (Abs(SEC), 3),
                (After(0), 1),
            ],
        ),
        wheel(
            "sliding_window_retry_skips_slots_until_enough_left",
            (6, 600 * MS, 6),
            "6 per 600 ms in slots of 100 ms holding 1, 2 and 3: a cost of 4 waits for all three \
             slots to leave",
            vec![
                (Abs(0), 1),
                (Abs(150 * MS), 2),
                (Abs(250 * MS), 3),
                (Abs(300 * MS), 4),
                (Retry(-1), 4),
                (After(1), 4),
                (After(0), 3),
            ],
        ),
        wheel(
            "sliding_window_cost_zero_and_reset",
            (3, SEC, 10),
            "reset_after runs until the newest non-empty slot has left the window (the start of \
             the slot n after it); a cost of 0 reports it and takes nothing",
            vec![
                (Abs(0), 0),
                (Abs(50 * MS), 1),
                (Abs(420 * MS), 1),
                (Abs(900 * MS), 0),
                (Abs(1_050 * MS), 0),
                (Reset(-1), 0),
                (After(1), 0),
            ],
        ),
        wheel(
            "sliding_window_999_per_minute_in_60_slots",
            (999, MIN, 60),
            "999/min in one-second slots",
            vec![
                (Abs(500 * MS), 500),
                (Abs(30 * SEC), 499),
                (Abs(59 * SEC), 1),
                (Retry(-1), 1),
                (After(1), 500),
                (After(0), 1),
            ],
        ),
        wheel(
            "sliding_window_very_fast_1e10_per_second",
            (10_000_000_000, SEC, 10),
            "10^10/s in 10 slots of 100 ms: large costs",
            vec![
                (Abs(0), 6_000_000_000),
                (Abs(100 * MS), 4_000_000_000),
                (After(0), 1),
                (Retry(0), 6_000_000_000),
                (After(0), 1),
                (Retry(0), 10_000_000_000),
            ],
        ),
        wheel(
            "sliding_window_slow_1_per_12_days",
            (1, 12 * DAY, 2),
            "one per 12 days in two slots of 6 days (slow, and below 2^53 even for now·n)",
            vec![
                (Abs(DAY), 1),
                (Abs(11 * DAY), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
        wheel(
            "sliding_window_clock_at_a_large_value",
            (4, SEC, 4),
            "slots stay aligned to the clock's origin at about 26 days",
            vec![
                (Abs(2_250_000_000_100_000), 4),
                (After(0), 1),
                (Retry(-1), 1),
                (After(1), 1),
            ],
        ),
    ]
}

/// Runs every spec through its model.
fn generate() -> Vec<Case> {
    specs()
        .into_iter()
        .map(|spec| {
            let quota = Quota::new(spec.limit, Duration::from_nanos(spec.period_ns))
                .and_then(|q| q.with_burst(spec.burst.unwrap_or(spec.limit)))
                .expect("a valid quota");
            let model = model::by_name(spec.algorithm, quota, spec.slots);
            let mut now = 0u64;
            let mut last: Option<Expected> = None;
            let steps = spec
                .steps
                .iter()
                .map(|&(at, cost)| {
                    let previous =
                        || last.unwrap_or_else(|| panic!("{}: no previous step", spec.name));
                    let from = |base: u64, offset: i64| {
                        now.checked_add(base)
                            .and_then(|t| t.checked_add_signed(offset))
                            .unwrap()
                    };
                    let next = match at {
                        At::Abs(t) => t,
                        At::After(d) => now + d,
                        At::Retry(o) => {
                            let p = previous();
                            assert!(!p.allowed, "{}: Retry after an admission", spec.name);
                            from(p.retry_after_ns, o)
                        }
                        At::Reset(o) => from(previous().reset_after_ns, o),
                    };
                    assert!(next >= now, "{}: time goes back to {next}", spec.name);
                    now = next;
                    let expect = model.check(now, cost);
                    last = Some(expect);
                    Step {
                        now_ns: now,
                        cost,
                        expect,
                    }
                })
                .collect();
            Case {
                name: spec.name.into(),
                description: spec.description.into(),
                algorithm: spec.algorithm.into(),
                quota: QuotaSpec {
                    limit: quota.limit(),
                    period_ns: quota.period_nanos(),
                    burst: quota.burst(),
                },
                slots: spec.slots,
                steps,
            }
        })
        .collect()
}

/// Every number a double-based replay (Lua) would compute stays exact.
fn assert_fits_in_a_double(case: &Case) {
    let q = case.quota;
    let small = |what: &str, value: u128| {
        assert!(
            value < EXACT_IN_A_DOUBLE,
            "{}: {what} = {value} is not below 2^53",
            case.name
        );
    };
    small("limit", q.limit.into());
    small("period_ns", q.period_ns.into());
    small("burst", q.burst.into());
    for step in &case.steps {
        let e = step.expect;
        for (what, value) in [
            ("now_ns", step.now_ns),
            ("cost", step.cost),
            ("limit", e.limit),
            ("remaining", e.remaining),
            ("retry_after_ns", e.retry_after_ns),
            ("reset_after_ns", e.reset_after_ns),
        ] {
            small(what, value.into());
        }
        let now = u128::from(step.now_ns);
        let period = u128::from(q.period_ns);
        match case.algorithm.as_str() {
            "gcra" => {
                // The TAT in ticks is at most (now + reset_after)·scale; a
                // denied request would need cost·T more.
                let (scale, interval) = GcraModel::ticks(q.quota());
                let reset = u128::from(e.reset_after_ns);
                let wanted = if e.allowed {
                    0
                } else {
                    u128::from(step.cost) * interval as u128
                };
                small("the TAT in ticks", (now + reset) * scale as u128 + wanted);
            }
            "sliding_window" => {
                // epoch = ⌊now·n/T⌋; slot starts ⌈e·T/n⌉ up to the epoch n later.
                let n = u128::from(case.slots.unwrap());
                small("now·n + n·T", now * n + n * period);
            }
            _ => small("now + T", now + period),
        }
    }
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

#[test]
fn vectors_are_what_the_models_say() {
    let cases = generate();
    let mut names: Vec<_> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    for case in &cases {
        assert_fits_in_a_double(case);
    }
    let text = render(&cases);
    assert_eq!(
        serde_json::from_str::<Vec<Case>>(&text).unwrap(),
        cases,
        "the rendering must parse back to the cases"
    );
    if std::env::var_os("TOLLGATE_WRITE_VECTORS").is_some_and(|v| v == "1") {
        std::fs::write(path(), &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(path()).unwrap_or_default();
    assert!(
        committed == text,
        "tests/vectors/core.json is not what the models generate now; if the change is \
         intended, rerun with TOLLGATE_WRITE_VECTORS=1 and review the diff"
    );
}

fn replay<A: Algorithm>(algorithm: A, case: &Case) {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    for (i, step) in case.steps.iter().enumerate() {
        clock.set(Nanos::new(step.now_ns));
        let decision = limiter
            .check_n(step.cost)
            .unwrap_or_else(|e| panic!("{} step {i}: {e}", case.name));
        assert_eq!(
            Expected::from(decision),
            step.expect,
            "{} step {i} at {} ns, cost {}",
            case.name,
            step.now_ns,
            step.cost
        );
    }
}

#[test]
fn limiters_replay_every_vector() {
    let text = std::fs::read_to_string(path()).expect("tests/vectors/core.json");
    let cases: Vec<Case> = serde_json::from_str(&text).expect("valid vectors");
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    for case in &cases {
        let quota = case.quota.quota();
        match case.algorithm.as_str() {
            "gcra" => replay(Gcra::new(quota).unwrap(), case),
            "fixed_window" => replay(FixedWindow::new(quota).unwrap(), case),
            "sliding_log" => replay(SlidingLog::new(quota).unwrap(), case),
            "sliding_window" => replay(
                SlidingWindow::new(quota, case.slots.expect("slots")).unwrap(),
                case,
            ),
            other => panic!("{}: unknown algorithm {other:?}", case.name),
        }
    }
}
