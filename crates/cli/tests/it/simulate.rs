//! `tollgate simulate` against the library it reports on.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::tollgate;
use tollgate::{
    Algorithm, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota, SlidingLog, SlidingWindow,
};

const DEADLINE: Duration = Duration::from_secs(60);

/// What the library's own limiter admits of `arrivals`, one permit each.
fn admitted<A: Algorithm>(algorithm: A, arrivals: &[u64]) -> Vec<u64> {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    arrivals
        .iter()
        .copied()
        .filter(|&at| {
            clock.set(Nanos::new(at));
            limiter.check().is_allowed()
        })
        .collect()
}

/// The definition: the most instants in any half-open window of `period`.
fn max_in_any_window(times: &[u64], period: u64) -> u64 {
    times
        .iter()
        .map(|&s| times.iter().filter(|&&t| t >= s && t < s + period).count() as u64)
        .max()
        .unwrap_or(0)
}

fn expected(quota: Quota, slots: u32, arrivals: &[u64]) -> Vec<(&'static str, Vec<u64>)> {
    vec![
        ("gcra", admitted(Gcra::new(quota).unwrap(), arrivals)),
        (
            "fixed-window",
            admitted(FixedWindow::new(quota).unwrap(), arrivals),
        ),
        (
            "sliding-log",
            admitted(SlidingLog::new(quota).unwrap(), arrivals),
        ),
        (
            "sliding-window",
            admitted(SlidingWindow::new(quota, slots).unwrap(), arrivals),
        ),
    ]
}

fn assert_matches_library(json: &Value, quota: Quota, slots: u32, arrivals: &[u64]) {
    let rows = json["algorithms"]
        .as_array()
        .expect("an array of algorithms");
    let expected = expected(quota, slots, arrivals);
    assert_eq!(rows.len(), expected.len());
    for (row, (name, admitted)) in rows.iter().zip(&expected) {
        assert_eq!(row["algorithm"], *name);
        assert_eq!(row["offered"], arrivals.len() as u64, "{name}");
        assert_eq!(row["admitted"], admitted.len() as u64, "{name}");
        assert_eq!(
            row["denied"],
            (arrivals.len() - admitted.len()) as u64,
            "{name}"
        );
        assert_eq!(
            row["max_in_any_window"],
            max_in_any_window(admitted, quota.period_nanos()),
            "{name}"
        );
    }
    // The bounds stated in the algorithms' docs, and held.
    let bound = |index: usize| rows[index]["bound_any_window"].as_u64().unwrap();
    assert_eq!(bound(0), quota.burst() + quota.limit());
    assert_eq!(bound(1), 2 * quota.limit());
    assert_eq!(bound(2), quota.limit());
    assert_eq!(bound(3), 2 * quota.limit());
    for row in rows {
        assert!(
            row["max_in_any_window"].as_u64() <= row["bound_any_window"].as_u64(),
            "{row}"
        );
    }
}

#[test]
fn counts_from_a_csv_equal_the_library_decisions() {
    // Clumps on both sides of the window boundaries, and a quiet stretch.
    let mut arrivals: Vec<u64> = Vec::new();
    let mut state = 12_345_u64;
    for second in 0..4_u64 {
        for _ in 0..40 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Within ±150 ms of the boundary, to the nanosecond.
            let offset = (state >> 20) % 300_000_000;
            arrivals.push((second * 1_000_000_000 + 850_000_000 + offset).min(4_999_999_999));
        }
    }
    arrivals.sort_unstable();
    let dir = std::env::temp_dir().join(format!("tollgate-simulate-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("arrivals.csv");
    let text: String = std::iter::once("seconds,comment\n".to_owned())
        .chain(
            arrivals
                .iter()
                .map(|ns| format!("{}.{:09},x\n", ns / 1_000_000_000, ns % 1_000_000_000)),
        )
        .collect();
    std::fs::write(&csv, text).unwrap();

    let run = tollgate(
        &[
            "simulate",
            "--csv",
            csv.to_str().unwrap(),
            "--limit",
            "6",
            "--period",
            "1s",
            "--burst",
            "3",
            "--slots",
            "4",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let quota = Quota::per_second(6).unwrap().with_burst(3).unwrap();
    assert_matches_library(&run.json(), quota, 4, &arrivals);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_steady_pattern_is_the_documented_schedule() {
    let run = tollgate(
        &[
            "simulate",
            "--pattern",
            "steady",
            "--rate",
            "7",
            "--limit",
            "5",
            "--period",
            "1s",
            "--duration",
            "3s",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // Arrival i at floor(i·10⁹ / 7) ns, before 3 s.
    let arrivals: Vec<u64> = (0..21).map(|i| i * 1_000_000_000 / 7).collect();
    let json = run.json();
    assert_eq!(json["offered"], 21);
    assert_matches_library(&json, Quota::per_second(5).unwrap(), 10, &arrivals);
}

#[test]
fn the_fixed_window_shows_its_boundary_burst_and_the_sliding_log_does_not() {
    let run = tollgate(&["simulate", "--json"], DEADLINE);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    let max = |name: &str| {
        json["algorithms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["algorithm"] == name)
            .unwrap()["max_in_any_window"]
            .as_u64()
            .unwrap()
    };
    assert!(max("fixed-window") > 15, "{json}");
    assert_eq!(max("sliding-log"), 10);
}

#[test]
fn pictures_have_one_panel_per_algorithm() {
    let dir = std::env::temp_dir().join(format!("tollgate-simulate-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (algorithms, panels) in [(None, 4), (Some("gcra,sliding-log"), 2)] {
        let mut args = vec![
            "simulate",
            "--pattern",
            "burst",
            "--out",
            dir.to_str().unwrap(),
        ];
        if let Some(algorithms) = algorithms {
            args.extend(["--algorithm", algorithms]);
        }
        let run = tollgate(&args, DEADLINE);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let svg = std::fs::read_to_string(dir.join("simulate.svg")).expect("the SVG is written");
        // Each panel's caption names what it admitted.
        assert_eq!(
            svg.matches("in any [t, t+1s) (bound").count(),
            panels,
            "{algorithms:?}"
        );
        assert!(svg.contains("sliding log: admitted"));
        assert_eq!(svg.contains("fixed window: admitted"), algorithms.is_none());
        let png = std::fs::read(dir.join("simulate.png")).expect("the PNG is written");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(
            png.len() > 10_000,
            "a PNG of {} bytes has no picture in it",
            png.len()
        );
        assert!(run.stderr.contains("simulate.png"), "{}", run.stderr);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["simulate", "--limit", "0"],
            "--limit must be a whole number above zero, got 0",
        ),
        (
            &["simulate", "--limit", "-3"],
            "--limit must be a whole number above zero, got -3",
        ),
        (
            &["simulate", "--duration", "0s"],
            "--duration must be longer than zero",
        ),
        (
            &["simulate", "--rate", "-5"],
            "--rate must be a number of requests per second above zero, got -5",
        ),
        (&["simulate", "--slots", "0"], "--slots must be"),
        (&["simulate", "--period", "soon"], "is not a duration"),
        (
            &["simulate", "--csv", "/nonexistent/arrivals.csv"],
            "cannot read /nonexistent/arrivals.csv",
        ),
    ];
    for (args, message) in cases {
        let run = tollgate(args, DEADLINE);
        let code = if message.starts_with("cannot read") {
            1
        } else {
            2
        };
        run.assert_refused(code, message);
    }
}

#[test]
fn a_bad_csv_names_its_line() {
    let dir = std::env::temp_dir().join(format!("tollgate-simulate-badcsv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("bad.csv");
    std::fs::write(&csv, "0.5\n1.0\nlater\n").unwrap();
    let run = tollgate(&["simulate", "--csv", csv.to_str().unwrap()], DEADLINE);
    run.assert_refused(2, "line 3: \"later\" is not a timestamp");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression: `--rate 1e-12` never finished and grew ~1.7 GB/s (the
/// spacing of evenly spaced arrivals, saturated to `u64::MAX` ns, wrapped
/// when added to the start). A short deadline: the run must answer at once.
#[test]
fn a_tiny_rate_finishes_at_once() {
    let run = tollgate(
        &["simulate", "--rate", "1e-12", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // The spike pattern: the steady arrival at 0 s and the spike's first at
    // 2.5 s; the next of each is 10¹² s later.
    assert_eq!(run.json()["offered"], 2);
}

/// Regressions: the longest duration looped without end; a burst's partial
/// cycle slipped past the 5-million cap (20 M arrivals); a 1 ms run at
/// 10⁸/s holding 1 M was refused.
#[test]
fn the_arrival_cap_is_exact() {
    let short = Duration::from_secs(20);
    tollgate(&["simulate", "--duration", "18446744073709551615s"], short)
        .assert_refused(2, "--duration must be at most 584 years");
    tollgate(
        &["simulate", "--duration", "585y", "--rate", "1e-12"],
        short,
    )
    .assert_refused(2, "--duration must be at most 584 years");
    for args in [
        &["simulate", "--duration", "500y"][..],
        &[
            "simulate",
            "--pattern",
            "burst",
            "--period",
            "1ns",
            "--duration",
            "1h",
        ],
        &[
            "simulate",
            "--pattern",
            "burst",
            "--period",
            "4s",
            "--duration",
            "1s",
            "--rate",
            "4999999",
            "--limit",
            "100",
        ],
    ] {
        tollgate(args, short).assert_refused(2, "more than the 5000000 arrivals");
    }
    let run = tollgate(
        &[
            "simulate",
            "--rate",
            "100000000",
            "--duration",
            "1ms",
            "--limit",
            "1",
            "--algorithm",
            "fixed-window",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.json()["offered"], 1_000_000);
}

/// Regression: `--duration -1s` got clap's tip "to pass '-1' as a value,
/// use '-- -1'", which does not work either.
#[test]
fn a_negative_duration_gets_a_sentence() {
    for option in ["--duration", "--period"] {
        let run = tollgate(&["simulate", option, "-1s"], DEADLINE);
        run.assert_refused(2, "\"-1s\" is negative");
        assert!(!run.stderr.contains("-- -1"), "{}", run.stderr);
    }
}

/// The texts of an SVG drawn by plotters (each on its own line), with the
/// `x` and anchor of each.
fn svg_texts(svg: &str) -> Vec<(f64, String, String)> {
    let mut texts = Vec::new();
    let mut lines = svg.lines();
    while let Some(line) = lines.next() {
        if let Some(attributes) = line.strip_prefix("<text ") {
            let attribute = |name: &str| {
                attributes
                    .split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or("")
                    .to_owned()
            };
            let x = attribute("x").parse().unwrap_or(0.0);
            let text = lines.next().unwrap_or("").to_owned();
            texts.push((x, attribute("text-anchor"), text));
        }
    }
    texts
}

/// Regressions of the pictures: y labels cut off at `--limit 100000` (and
/// the axis title overlapping them from 1,000); the offered area clipped
/// without a mark; every x tick reading 0.0 at `--period 1ns`; the GCRA
/// bound printed without the windows it is over (it is not reached in the
/// half-open windows measured).
#[test]
fn pictures_keep_their_labels_and_say_what_they_clip() {
    let dir = std::env::temp_dir().join(format!("tollgate-simulate-plots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();

    let run = tollgate(&["simulate", "--limit", "100000", "--out", out], DEADLINE);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let svg = std::fs::read_to_string(dir.join("simulate.svg")).unwrap();
    let labels: Vec<(f64, String)> = svg_texts(&svg)
        .into_iter()
        .filter(|(_, anchor, text)| anchor == "end" && text.parse::<u64>().is_ok())
        .map(|(x, _, text)| (x, text))
        .collect();
    assert!(
        labels.iter().any(|(_, text)| text == "300000"),
        "{labels:?}"
    );
    for (x, text) in &labels {
        // Right-aligned at x, about 6 px a digit: clear of the axis title,
        // which takes the first 14 px.
        assert!(
            x - 6.0 * text.len() as f64 >= 16.0,
            "{text} ends at x = {x}"
        );
    }
    assert!(svg.contains("offered (clipped at the top: peaks at 500000)"));
    assert!(svg.contains("bound 200000 over closed windows [t, t+T]"));
    assert!(svg.contains("bound 100000 over windows [t, t+T)"));

    let run = tollgate(
        &["simulate", "--period", "1ns", "--rate", "1e9", "--out", out],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let svg = std::fs::read_to_string(dir.join("simulate.svg")).unwrap();
    assert!(svg.contains("time (ns)"));
    let texts: Vec<String> = svg_texts(&svg)
        .into_iter()
        .map(|(_, _, text)| text)
        .collect();
    // The x ticks of 6 ns, one a period; the y ticks are 0, 5, 10, …
    for tick in ["1", "2", "3", "4", "6"] {
        assert!(
            texts.iter().any(|text| text == tick),
            "no tick {tick}: {texts:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression: `simulate --concurrency` with a huge duration suggested
/// `--period`, which it does not take; the message names what applies
/// (failed before: the rate simulations' message).
#[test]
fn the_concurrency_arrival_cap_suggests_only_what_applies() {
    let run = tollgate(
        &["simulate", "--concurrency", "--duration", "100y"],
        Duration::from_secs(20),
    );
    run.assert_refused(2, "lower --rate or --duration");
    assert!(!run.stderr.contains("--period"), "{}", run.stderr);
}
