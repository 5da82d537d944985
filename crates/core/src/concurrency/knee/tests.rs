//! The unit tests of [`KneeState`]: its transition on hand-made samples.

use super::*;

const MS: u64 = 1_000_000;

/// Feeds `n` requests, one every `gap` ns from `at`, each taking `rtt`
/// ns with `in_flight` in flight; returns the time after.
fn feed(state: &mut KneeState, at: u64, n: u64, gap: u64, rtt: u64, in_flight: u32) -> u64 {
    let mut now = at;
    for _ in 0..n {
        state.update(Nanos::new(now), Nanos::new(now + rtt), in_flight, false);
        now += gap;
    }
    now
}

/// Feeds requests started every ms, alternating `short` and `long` ms,
/// *in the order they answer* (the short ones first), until the probe
/// ends; returns the time after.
fn probe_with(state: &mut KneeState, now: u64, short: u64, long: u64) -> u64 {
    probe_every(state, now, MS, short * MS, long * MS).0
}

/// As [`probe_with`], one request every `gap` ns, times in ns; returns
/// the time after and the answers the probe took.
fn probe_every(state: &mut KneeState, now: u64, gap: u64, short: u64, long: u64) -> (u64, u64) {
    probe_until(state, now, gap, short, long, |state| !state.probing())
}

/// As [`probe_every`], until `done` says so.
fn probe_until(
    state: &mut KneeState,
    mut now: u64,
    gap: u64,
    short: u64,
    long: u64,
    done: impl Fn(&KneeState) -> bool,
) -> (u64, u64) {
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let (mut i, mut answers) = (0, 0);
    while !done(state) {
        let rtt = if i % 2 == 0 { short } else { long };
        pending.push((now, now + rtt));
        pending.sort_by_key(|&(_, end)| std::cmp::Reverse(end));
        while !done(state) && pending.last().is_some_and(|&(_, end)| end <= now) {
            let (started, end) = pending.pop().unwrap();
            state.update(Nanos::new(started), Nanos::new(end), 1, false);
            answers += 1;
        }
        now += gap;
        i += 1;
        assert!(i < 1_000_000, "the probe never ended");
    }
    (now, answers)
}

/// Runs the first probe on a service of mean 10 ms (5 and 15).
fn probed() -> (KneeState, u64) {
    let mut state = Knee::new().start();
    assert!(state.probing());
    assert_eq!(
        state.limit(),
        10,
        "the first probe runs at half the initial 20"
    );
    let now = probe_with(&mut state, 0, 5, 15);
    assert_eq!(state.limit(), 20, "back to the limit before the probe");
    (state, now + 20 * MS)
}

fn assert_service(state: &KneeState, mean_ms: f64) {
    let got = state.service_time().unwrap().as_u64() as f64 / MS as f64;
    assert!(
        (got - mean_ms).abs() < 0.1,
        "service time {got} ms, not {mean_ms}"
    );
}

#[test]
fn the_probe_measures_the_mean_service_time_not_the_fastest() {
    let (state, _) = probed();
    assert_service(&state, 10.0);
}

#[test]
fn a_long_tailed_probe_times_more_requests_for_the_same_precision_up_to_a_second() {
    // 10 ms each, one every ms: the mean is exact after a quarter of the
    // 500 samples (128, the first multiple of 64), whose cohort lags the
    // answers by 20 mean service times (200 answers).
    let mut state = Knee::new().start();
    let (_, answers) = probe_every(&mut state, 0, MS, 10 * MS, 10 * MS);
    assert!(answers <= 340, "{answers}");
    // 1 ms and 19 ms alternately, one every 0.5 ms (a coefficient of
    // variation of 0.9): 500 samples leave a standard error of 4 %; the
    // probe goes on to 3 %, 900 samples of its cohort by start (which
    // lags the answers by 20 mean service times, 400 answers).
    let mut state = Knee::new().start();
    let (_, answers) = probe_every(&mut state, 0, MS / 2, MS, 19 * MS);
    assert!(answers >= 1_250, "{answers}");
    assert_service(&state, 10.0);
    // 1 ms and 99 ms (a coefficient of variation of 0.98), one every
    // ms: 3 % needs 1,070 samples of a cohort that lags by 1 s (2.1 s);
    // the cap ends it at the first 500 after its first second (1.5 s).
    let mut state = Knee::new().start();
    let (now, _) = probe_every(&mut state, 0, MS, MS, 99 * MS);
    assert!(now <= 1_600 * MS, "{now}");
}

#[test]
fn the_probe_waits_for_the_slow_half_of_its_cohort() {
    // 1 ms and 99 ms alternately: the first 500 answers are nearly all
    // the 1 ms ones (a mean of a few ms); the cohort by start is 50 ms.
    let mut state = Knee::new().start();
    probe_with(&mut state, 0, 1, 99);
    assert_service(&state, 50.0);
}

#[test]
fn below_the_knee_the_limit_climbs_by_its_headroom() {
    let (mut state, mut now) = probed();
    // 20 in flight of 10 ms each answer at 2 per ms: busy = 20 = in
    // flight, nothing queues: the limit climbs 10 % rounded down (at
    // least 2.5 past busy, and from itself) every window, however far
    // it passes the in flight.
    let mut limits = vec![state.limit()];
    for _ in 0..4 {
        now = feed(&mut state, now, 256, MS / 2, 10 * MS, 20);
        limits.push(state.limit());
    }
    // (The first window opens 20 ms before its first answer: it reads
    // a little under 20 in service.)
    assert!(limits[1..].windows(2).all(|w| w[1] > w[0]), "{limits:?}");
    assert!(limits[4] >= 24, "{limits:?}");
    // Callers that send 10 at most: the limit falls back, and stays
    // within twice what is in flight (it climbs only while at least
    // half of it is used).
    for _ in 0..8 {
        now = feed(&mut state, now, 256, MS, 10 * MS, 10);
        assert!(state.limit() <= 22, "{}", state.limit());
    }
}

#[test]
fn past_the_knee_the_limit_falls_to_it_whatever_the_latency_spread() {
    let (mut state, mut now) = probed();
    // 60 in flight, but completions at the rate of 40 workers of 10 ms
    // (4 per ms): busy = 40, whatever latencies the requests report.
    for _ in 0..6 {
        now = feed(&mut state, now, 400, MS / 4, 15 * MS, 60) + MS;
    }
    let busy = state.busy().unwrap();
    assert!((39.0..=41.0).contains(&busy), "busy {busy}");
    assert!(
        (44..=46).contains(&state.limit()),
        "the knee of 40 and 10 %: {}",
        state.limit()
    );
}

#[test]
fn a_full_limit_keeps_one_request_queued_and_a_gapped_one_two() {
    // A knee of 5 workers of 10 ms (0.5 answers per ms). With the
    // limit always full (in flight = limit), one queued request is
    // enough: the limit settles at 6, 1.2× the knee.
    let (mut state, mut now) = probed();
    for _ in 0..12 {
        let limit = state.limit();
        now = feed(&mut state, now, 256, 2 * MS, 10 * MS, limit);
    }
    assert_eq!(state.limit(), 6, "busy {:?}", state.busy());
    // The same knee with the in flight a whole request under the limit
    // on average (arrivals leave gaps): two and a half queued, a limit
    // of 8.
    for _ in 0..12 {
        let limit = state.limit();
        now = feed(&mut state, now, 256, 2 * MS, 10 * MS, limit - 1);
    }
    assert_eq!(state.limit(), 8, "busy {:?}", state.busy());
}

/// A state whose first probe read exactly 10 ms, at a limit of `initial`.
fn probed_at(initial: u32) -> (KneeState, u64) {
    let mut state = Knee::new().initial(initial).start();
    let now = probe_with(&mut state, 0, 10, 10);
    assert_service(&state, 10.0);
    (state, now + 20 * MS)
}

#[test]
fn a_gapped_limit_at_a_knee_of_ten_leaves_the_queue_that_keeps_its_goodput() {
    // Arrivals at 1.5× a knee of 10 leave the limit a request or so
    // unused: busy 9.7 with two under the limit. By the table's fixed
    // limits, 12 keeps 94–95 % of the goodput of exponential service
    // times and 13 keeps 95.5–97 %: the limit is 13 (busy + 2 made it
    // 12).
    let (mut state, mut now) = probed_at(13);
    for _ in 0..8 {
        let in_flight = state.limit() - 2;
        now = feed(&mut state, now, 256, 1_030_928, 10 * MS, in_flight);
    }
    let busy = state.busy().unwrap();
    assert!((9.6..9.8).contains(&busy), "busy {busy}");
    assert_eq!(state.limit(), 13, "busy {busy}");
}

#[test]
fn a_climb_adds_a_tenth_of_the_limit_rounded_down() {
    // Nothing queued (busy 10.5 of 11 in flight) under a limit of 12:
    // one window climbs to 13, where rounding up went to 14 (and, as a
    // climb past the knee falls back the next window, alternated 12
    // and 14 at a knee of 10).
    // (The first window after the probe opens 20 ms before its first
    // answer and reads a queue: it holds the limit at 12.)
    let (mut state, now) = probed_at(12);
    let now = feed(&mut state, now, 256, 952_381, 10 * MS, 11);
    assert_eq!(state.limit(), 12, "busy {:?}", state.busy());
    feed(&mut state, now, 256, 952_381, 10 * MS, 11);
    assert_eq!(state.limit(), 13, "busy {:?}", state.busy());
}

#[test]
fn requests_served_at_once_between_probes_refine_the_mean_service_time() {
    // The probe read 10 ms (1 and 19: a standard error of 3 %); the
    // service takes 10.6. Between probes, each ms sees one request
    // with 20 in flight and one with 2 (served at once, so timed): a
    // batch of 500 of them agrees with the probe and is averaged in.
    let mut state = Knee::new().start();
    let mut now = probe_with(&mut state, 0, 1, 19) + 20 * MS;
    assert_service(&state, 10.0);
    let step = |state: &mut KneeState, now: u64, rtt: u64, in_flight: u32| {
        state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 20, false);
        state.update(Nanos::new(now), Nanos::new(now + rtt), in_flight, false);
    };
    for _ in 0..1_000 {
        step(&mut state, now, 10_600_000, 2);
        now += MS;
    }
    assert_service(&state, 10.3);
    // Slower ones started with as many in flight as busy are not timed
    // (they may have waited).
    for _ in 0..600 {
        step(&mut state, now, 50 * MS, 20);
        now += MS;
    }
    assert_service(&state, 10.3);
    assert!(!state.probing());
}

/// Feeds each ms one request with 20 in flight (10 ms) and one served
/// at once (`rtt`, 2 in flight), from `now` until `done`; returns when.
fn with_free_probes(
    state: &mut KneeState,
    mut now: u64,
    rtt: u64,
    done: impl Fn(&KneeState) -> bool,
) -> u64 {
    while !done(state) {
        state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 20, false);
        state.update(Nanos::new(now), Nanos::new(now + rtt), 2, false);
        now += MS;
        assert!(now < 200_000 * MS, "never");
    }
    now
}

/// The first probe, reading 10 ms; returns when it ended.
fn first_probe(state: &mut KneeState) -> u64 {
    let ended = probe_with(state, 0, 1, 19);
    assert_service(state, 10.0);
    ended
}

/// The first probe, then free probes of `rtt` (see [`with_free_probes`])
/// until the next probe; returns the state and the ms between the two.
fn next_probe_among_free_probes(rtt: u64) -> (KneeState, u64) {
    let mut state = Knee::new().start();
    let ended = first_probe(&mut state);
    let at = with_free_probes(&mut state, ended + 20 * MS, rtt, KneeState::probing);
    (state, (at - ended) / MS)
}

#[test]
fn a_batch_of_free_probes_far_from_the_mean_brings_the_next_probe_forward() {
    // A batch of 500 at 30 ms is not averaged in (only a probe may say
    // the service changed), but the probe that may say so comes at once
    // rather than up to an interval later.
    let (state, after) = next_probe_among_free_probes(30 * MS);
    assert_service(&state, 10.0);
    assert!(after < 1_000, "the probe came {after} ms after the last");
}

#[test]
fn batches_of_free_probes_that_agree_stand_in_for_two_probes_in_a_row() {
    // One batch of 500 every 500 ms agrees with the probed 10 ms: the
    // probes due 20 and 40 s after the first are not run (each would hold
    // back throughput to measure what the batches measured), the one due
    // at 60 s is.
    let (_, after) = next_probe_among_free_probes(10 * MS);
    assert!(
        (59_900..60_100).contains(&after),
        "the next probe came {after} ms after the first"
    );
}

#[test]
fn batches_of_free_probes_do_not_stand_in_after_a_probe_past_the_knee() {
    // A probe found past the knee read the service slow, and so `busy`
    // high: the batches' margin may then let queued requests in. Its
    // early successor (an eighth of the interval) runs.
    let mut state = Knee::new().start();
    let ended = first_probe(&mut state);
    let agreed = |state: &KneeState| state.service.is_some_and(|s| s.probes >= 2);
    let now = with_free_probes(&mut state, ended + 20 * MS, 10 * MS, agreed);
    state.verdict = Verdict::PastTheKnee;
    let at = with_free_probes(&mut state, now, 10 * MS, KneeState::probing);
    assert!(
        at - ended < 3_000 * MS,
        "the next probe came {} ms after the first",
        (at - ended) / MS
    );
}

/// Feeds 12 windows of 256 requests of 10 ms, one every `gap` ns, with
/// the limit full; returns `busy` after.
fn full_windows(state: &mut KneeState, mut now: u64, gap: u64) -> f64 {
    for _ in 0..12 {
        let limit = state.limit();
        now = feed(state, now, 256, gap, 10 * MS, limit);
    }
    state.busy().unwrap()
}

#[test]
fn a_full_limit_rounds_the_knee_so_that_busy_a_hair_above_it_queues_one() {
    // A knee of 5 read 3 % high (busy 5.15): still one queued request
    // (⌈5.15⌉ + 1 would be 7, two queued, 1.4× the knee).
    let (mut state, now) = probed();
    let busy = full_windows(&mut state, now, 1_941_748);
    assert!((5.1..5.2).contains(&busy), "busy {busy}");
    assert_eq!(state.limit(), 6);
}

#[test]
fn a_full_limit_at_a_knee_whose_workers_idle_is_not_held_there() {
    // A limit of 5 at a knee of 5 under arrivals at 3× its capacity keeps
    // the workers busy 92 % of the time, and with a mean read 5 % low
    // busy reads 4.35: rounded, the limit stayed at the knee (5), where
    // the workers idle; one queued request (6) is the knee's least queue.
    // (A probe of little spread, so that 4.35 of 5 is not "nothing
    // queued".)
    let mut state = Knee::new().start();
    let now = probe_with(&mut state, 0, 9, 11) + 20 * MS;
    assert_service(&state, 10.0);
    let busy = full_windows(&mut state, now, 2_298_851);
    assert!((4.3..4.4).contains(&busy), "busy {busy}");
    assert_eq!(state.limit(), 6);
}

#[test]
fn an_unqueued_limit_climbs_even_when_the_probe_read_the_service_low() {
    // The probe reads 9 ms (1 ms and 17 ms: a standard error of ~3 %);
    // the service takes 10. 20 in flight answer at 2 per ms: nothing
    // queues, but busy reads 18, 10 % under the in flight. Within three
    // standard errors that is "nothing queued": the limit climbs
    // (a rule of 5 % held it at 20, and a lower reading let it fall).
    let mut state = Knee::new().start();
    let mut now = probe_with(&mut state, 0, 1, 17) + 20 * MS;
    assert_service(&state, 9.0);
    let first = state.limit();
    for _ in 0..8 {
        now = feed(&mut state, now, 256, MS / 2, 10 * MS, first);
    }
    assert!(state.limit() >= first + 4, "{first} → {}", state.limit());
}

#[test]
fn a_probe_runs_every_interval_and_a_changed_service_replaces_the_mean() {
    let (mut state, mut now) = probed();
    let mut before = state.limit();
    while !state.probing() {
        before = state.limit();
        now = feed(&mut state, now, 1, MS / 2, 10 * MS, 20);
    }
    assert!(now >= 20_000 * MS, "not before the interval: {now}");
    assert_eq!(state.limit(), before / 2, "half the limit");
    // The service is now 20 ms: a mean 3 standard errors away is
    // confirmed by a second probe at once, and the two replace the old
    // mean instead of being averaged with it.
    let (_, answers) = probe_every(&mut state, now + 50 * MS, MS, 10 * MS, 30 * MS);
    assert!(answers >= 1_000, "two probes of 500: {answers}");
    assert_service(&state, 20.0);
}

#[test]
fn one_probe_far_from_the_mean_is_confirmed_before_it_replaces_it() {
    // The table's outlier: one probe of a 10 ms service read 7.85 ms.
    // Taken alone, it would have halved the limit until the next probe.
    let (mut state, mut now) = probed();
    while !state.probing() {
        now = feed(&mut state, now, 1, MS / 2, 10 * MS, 20);
    }
    let limit = state.limit();
    now = probe_until(&mut state, now + 50 * MS, MS, 5 * MS, 10_700_000, |state| {
        state.doubted.is_some()
    })
    .0;
    assert!(state.probing(), "a second probe runs at once");
    assert_eq!(state.limit(), limit, "under the same limit");
    assert_service(&state, 10.0);
    // It reads 10 ms again: the outlier is dropped, not averaged in.
    probe_with(&mut state, now + 50 * MS, 5, 15);
    assert_service(&state, 10.0);
    assert!(state.doubted.is_none());
}

#[test]
fn a_first_probe_short_of_its_precision_is_followed_by_one_at_the_learnt_limit() {
    // The first probe runs at half the initial limit whatever the knee;
    // 1 and 19 ms over 400 requests leave its mean 4.5 % uncertain.
    let mut state = Knee::new().probe_samples(100).start();
    let now = probe_with(&mut state, 0, 1, 19);
    assert_service(&state, 10.0);
    // Half the limit (20) is as many as that probe ran (10): a probe now
    // times at least as many a second, so it runs in 2.5 s, not 20.
    let (ended, mut at) = (state.last_probe, now + 20 * MS);
    while !state.probing() {
        at = feed(&mut state, at, 1, MS / 2, 10 * MS, 20);
    }
    let after = at - ended;
    assert!(
        (2_480 * MS..2_520 * MS).contains(&after),
        "{after} ns after"
    );
}

#[test]
fn an_imprecise_probe_is_not_repeated_early_below_its_own_limit() {
    // The same probe, then a knee of 5 (0.5 answers per ms) brings the
    // limit under twice the probe's 10: a probe now would time fewer
    // requests than the first, and waits for the interval.
    let mut state = Knee::new().probe_samples(100).start();
    let mut now = probe_with(&mut state, 0, 1, 19) + 20 * MS;
    while !state.probing() {
        let limit = state.limit();
        now = feed(&mut state, now, 256, 2 * MS, 10 * MS, limit);
        assert!(now < 30_000 * MS);
    }
    assert!(now >= 20_000 * MS, "probe at {now}");
}

#[test]
fn an_imprecise_probe_is_not_repeated_early_at_its_own_limit() {
    // A first probe at 2 (half an initial 5) short of its precision, then
    // a full limit at a knee of 4 that settles at 5: a probe now would run
    // at 2 again and time no more requests at once. At a knee of 5 the
    // table had probes at 2 repeat each other early, 2.5–3.4 s each, and
    // one fell in a measure (goodput 79 %).
    let mut state = Knee::new().initial(5).probe_samples(100).start();
    let mut now = probe_with(&mut state, 0, 1, 19) + 20 * MS;
    while !state.probing() {
        let limit = state.limit();
        now = feed(&mut state, now, 256, 2_500_000, 10 * MS, limit);
        assert!(now < 30_000 * MS);
    }
    assert!(now >= 20_000 * MS, "probe at {} ms", now / MS);
    assert_eq!(state.limit(), 2, "at half of 5");
}

#[test]
fn requests_started_before_the_probe_or_above_its_limit_are_not_timed() {
    let mut state = Knee::new().probe_samples(64).start();
    // Started before the probe (at 0, the probe started at 0: same
    // instant counts) but above its limit of 10: not timed.
    for i in 0..200 {
        state.update(Nanos::new(i * MS), Nanos::new(i * MS + 90 * MS), 11, false);
    }
    assert!(state.probing());
    let mut now = 200 * MS;
    while state.probing() {
        state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 3, false);
        now += MS;
    }
    assert_service(&state, 10.0);
}

#[test]
fn a_drop_lowers_the_smoothed_busy_by_a_tenth_and_bounds_hold() {
    let (mut state, mut now) = probed();
    for _ in 0..4 {
        now = feed(&mut state, now, 256, MS / 2, 10 * MS, 20);
    }
    let busy = state.busy().unwrap();
    now = feed(&mut state, now, 255, MS / 2, 10 * MS, 20);
    state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 20, true);
    let after = state.busy().unwrap();
    assert!((after - busy * 0.9).abs() < 1.0, "{busy} → {after}");
    let small = Knee::new().initial(5).min(4).max(6).start();
    assert_eq!(small.limit(), 4, "half of 5 is below min");
}

/// Runs a fluid service of `workers` of `service` ns each, `demand`
/// callers always waiting (as in `tests/it/knee_properties.rs`), from `now`
/// until `done`; returns when.
fn fluid(
    state: &mut KneeState,
    mut now: u64,
    (workers, service, demand): (u32, u64, u32),
    done: impl Fn(&KneeState) -> bool,
) -> u64 {
    let start = now;
    while !done(state) {
        let in_flight = demand.min(state.limit()).max(1);
        let served = in_flight.min(workers);
        now += service / u64::from(served);
        let latency = service * u64::from(in_flight) / u64::from(served);
        state.update(
            Nanos::new(now.saturating_sub(latency)),
            Nanos::new(now),
            in_flight,
            false,
        );
        assert!(now - start < 60_000 * MS, "nothing changed in a minute");
    }
    now
}

/// As [`fluid`], until the next probe starts; returns when, and its limit.
fn until_probe(state: &mut KneeState, now: u64, service: (u32, u64, u32)) -> (u64, u32) {
    let at = fluid(state, now, service, KneeState::probing);
    (at, state.limit())
}

/// As [`fluid`], until the probe in progress ends; returns when.
fn through_probe(state: &mut KneeState, now: u64, service: (u32, u64, u32)) -> u64 {
    fluid(state, now, service, |state| !state.probing())
}

/// A knee of 5 at 10 ms, 30 callers.
const KNEE_5: (u32, u64, u32) = (5, 10 * MS, 30);

#[test]
fn a_full_probe_past_the_knee_is_followed_early_by_a_lower_one() {
    // A knee of 5 at 10 ms, 30 callers: the first probe runs full at 10,
    // twice the knee, and reads 20 ms; `busy` then reads its own 10.
    // From 1 s: every request then spent the full latency in the service.
    let mut state = Knee::new().start();
    let now = through_probe(&mut state, 1_000 * MS, KNEE_5);
    assert_service(&state, 20.0);
    let (at, limit) = until_probe(&mut state, now, KNEE_5);
    assert!(
        at - now <= 2_600 * MS,
        "the next probe came {} ms later",
        (at - now) / MS
    );
    assert!(
        limit < 10,
        "the next probe runs at {limit}, not below the first"
    );
    let now = through_probe(&mut state, at, KNEE_5);
    assert!(state.service_time().unwrap().as_u64() < 20 * MS);
    // One at the knee (5) cannot be told from one past it either; the
    // first below it is believed, and the next waits for the interval.
    let (mut now, mut limit) = (now, limit);
    while limit >= 5 {
        let at;
        (at, limit) = until_probe(&mut state, now, KNEE_5);
        now = through_probe(&mut state, at, KNEE_5);
        assert!(at < 60_000 * MS, "no probe below the knee in a minute");
    }
    assert_service(&state, 10.0);
    let (at, _) = until_probe(&mut state, now, KNEE_5);
    assert!(
        at - now >= 20_000 * MS,
        "a probe below the knee, repeated {} ms later",
        (at - now) / MS
    );
}

#[test]
fn a_probe_that_held_nothing_back_is_not_repeated_early() {
    // 8 callers under the first probe's 10: not full, whatever it read.
    let mut state = Knee::new().start();
    let now = through_probe(&mut state, 1_000 * MS, (5, 10 * MS, 8));
    let (at, _) = until_probe(&mut state, now, (5, 10 * MS, 8));
    assert!(
        at - now >= 20_000 * MS,
        "the next probe came {} ms later",
        (at - now) / MS
    );
}

/// A knee of 20 at 10 ms, 60 callers.
const KNEE_20: (u32, u64, u32) = (20, 10 * MS, 60);

#[test]
fn once_two_probes_agree_the_next_runs_at_the_margin_below_the_knee() {
    // The first probe runs at 10 (half the initial 20), the second at
    // half the learnt limit; the mean then rests on two measures, and the
    // third runs at the margin: `busy` (20) less 5 %, 19. At half the
    // limit (11) it cost a knee of 20 45 % of its throughput for its
    // duration; at 19, 5 %.
    let mut state = Knee::new().start();
    let mut now = through_probe(&mut state, 1_000 * MS, KNEE_20);
    let mut limits = Vec::new();
    for _ in 0..2 {
        let (at, limit) = until_probe(&mut state, now, KNEE_20);
        limits.push(limit);
        now = through_probe(&mut state, at, KNEE_20);
    }
    assert_eq!(limits[1], 19, "probes at {limits:?}");
    assert_service(&state, 10.0);
    let after = fluid(&mut state, now, KNEE_20, |state| {
        state.busy().is_some_and(|b| b > 19.5)
    });
    assert!(
        after - now < 1_000 * MS,
        "back at the knee {} ms later",
        (after - now) / MS
    );
    assert!(
        (20..=23).contains(&state.limit()),
        "limit {}",
        state.limit()
    );
}

#[test]
fn a_probe_at_the_margin_that_reads_a_slower_service_is_confirmed_at_half() {
    // Two probes agree on 10 ms; the service slows to 15 ms (20 workers)
    // as the third starts. That probe, at the margin (19), reads 15: not
    // averaged in, but asked again at once, at half the limit, where
    // nothing can queue; the two agree and replace the mean.
    let mut state = Knee::new().start();
    let mut now = through_probe(&mut state, 1_000 * MS, KNEE_20);
    let (at, _) = until_probe(&mut state, now, KNEE_20);
    now = through_probe(&mut state, at, KNEE_20);
    let (at, limit) = until_probe(&mut state, now, KNEE_20);
    let before = state.limit;
    assert_eq!(limit, 19, "at the margin, of {before}");
    let slower = (20, 15 * MS, 60);
    fluid(&mut state, at, slower, |state| state.doubted.is_some());
    assert!(state.probing(), "a second probe at once");
    assert_eq!(state.limit(), before / 2, "at half the limit");
    through_probe(&mut state, at, slower);
    assert_service(&state, 15.0);
}

#[test]
fn the_probe_after_one_past_the_knee_replaces_its_mean() {
    // A probe past the knee read its requests' queueing as service time
    // (20 ms, 10 and 30). The next probe reads 19 ms, which agrees with it
    // within three standard errors: averaged, the mean would stay at 19.5,
    // still read slow; it replaces it.
    let mut state = Knee::new().start();
    let mut now = probe_with(&mut state, 0, 10, 30);
    assert_service(&state, 20.0);
    state.verdict = Verdict::PastTheKnee;
    while !state.probing() {
        now = feed(&mut state, now, 1, MS, 20 * MS, 1);
    }
    probe_with(&mut state, now, 9, 29);
    assert_service(&state, 19.0);
}

#[test]
fn a_uniform_slowdown_between_probes_lowers_the_limit_to_a_floor_not_to_zero() {
    // A knee of 20 at 10 ms slows to 15 ms right after a probe: `busy`
    // reads two thirds of the in flight, and with the limit full each
    // window lowers it to where busy rounded up (plus one) meets it, 4 or
    // 5; the next probe reads 15 ms (and its confirmation), and the limit
    // climbs back to the knee.
    let mut state = Knee::new().start();
    let now = through_probe(&mut state, 1_000 * MS, KNEE_20);
    let slower = (20, 15 * MS, 60);
    let (at, _) = until_probe(&mut state, now, slower);
    let lowest = state.limit;
    assert!((4..=5).contains(&lowest), "limit {lowest} before the probe");
    let read = |state: &KneeState| state.service_time().is_some_and(|s| s.as_u64() > 14 * MS);
    let now = fluid(&mut state, at, slower, |state| {
        !state.probing() && read(state)
    });
    let back = fluid(&mut state, now, slower, |state| state.limit() >= 20);
    assert!(
        back - now < 10_000 * MS,
        "back at the knee {} ms later",
        (back - now) / MS
    );
}

#[test]
fn a_full_probe_below_a_knee_whose_workers_idle_is_believed() {
    // A full probe at 3 (half an initial 6) reads 10 ms; then `busy` reads
    // 3.6, 1.2× the probe's limit: a knee of 5 whose workers idle a
    // fifth of the time under arrivals at 1.5× its capacity, read a little
    // low by one short window. The probe was below the knee: believed,
    // and the next waits for the interval (judged past the knee under
    // 1.25×, it was repeated early and replaced).
    let mut state = Knee::new().initial(6).start();
    let mut now = 0;
    while state.probing() {
        now = feed(&mut state, now, 1, 3_333_333, 10 * MS, 3);
    }
    assert_service(&state, 10.0);
    let ended = now;
    while !state.probing() {
        let limit = state.limit();
        now = feed(&mut state, now, 64, 2_777_778, 10 * MS, limit);
        assert!(now < 30_000 * MS);
    }
    assert!(
        now - ended >= 20_000 * MS,
        "the next probe {} ms later",
        (now - ended) / MS
    );
}
