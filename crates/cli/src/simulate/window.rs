//! Counting admissions in windows, exactly, from the sorted admission
//! instants (nanoseconds).
//!
//! A window of length `T` is half-open, `[s, s + T)`: the same convention as
//! the algorithms' guarantees (the sliding log counts `(now − T, now]`, so
//! two admissions exactly `T` apart are never in one window).

/// The most instants in any window of length `window`, at any start: for
/// each instant, how many lie in the window that ends just after it.
pub fn max_in_any_window(times: &[u64], window: u64) -> u64 {
    debug_assert!(times.is_sorted(), "times must be sorted");
    let mut oldest = 0;
    let mut best = 0;
    for (newest, &t) in times.iter().enumerate() {
        // Drop what is `window` or more before `t`.
        while times[oldest].saturating_add(window) <= t {
            oldest += 1;
        }
        best = best.max(newest - oldest + 1);
    }
    best as u64
}

/// The most instants in a window of `slots` consecutive slots, where slot
/// `e` is `[⌈e·period/slots⌉, ⌈(e+1)·period/slots⌉)` as in the sliding window
/// counter (`slots = 1` gives the fixed window's aligned windows
/// `[k·period, (k+1)·period)`).
pub fn max_in_aligned_windows(times: &[u64], period: u64, slots: u32) -> u64 {
    debug_assert!(times.is_sorted(), "times must be sorted");
    // Instant t is in slot floor(t·slots / period): ⌈e·P/n⌉ ≤ t ⟺ e ≤ t·n/P.
    let slot_of = |t: u64| u128::from(t) * u128::from(slots) / u128::from(period);
    let mut per_slot: Vec<(u128, u64)> = Vec::new();
    for &t in times {
        let slot = slot_of(t);
        match per_slot.last_mut() {
            Some((last, count)) if *last == slot => *count += 1,
            _ => per_slot.push((slot, 1)),
        }
    }
    // Sum over every run of `slots` consecutive slots, two pointers.
    let mut oldest = 0;
    let mut sum = 0;
    let mut best = 0;
    for &(slot, count) in &per_slot {
        sum += count;
        while per_slot[oldest].0 + u128::from(slots) <= slot {
            sum -= per_slot[oldest].1;
            oldest += 1;
        }
        best = best.max(sum);
    }
    best
}

/// The number of instants in the trailing window `(x − window, x]`, as a
/// step function: `(x, count)` at every instant where the count changes.
pub fn trailing_counts(times: &[u64], window: u64) -> Vec<(u64, u64)> {
    debug_assert!(times.is_sorted(), "times must be sorted");
    let mut steps = Vec::with_capacity(2 * times.len() + 1);
    steps.push((0, 0));
    let (mut entering, mut leaving) = (0, 0);
    let mut count: u64 = 0;
    // Merge the instants entering the window (t) with those leaving it
    // (t + window); at a tie, leaving first: (x − window, x] excludes x − window.
    while entering < times.len() {
        let enter_at = times[entering];
        let leave_at = times[leaving].saturating_add(window);
        if leave_at <= enter_at {
            count -= 1;
            leaving += 1;
            push_step(&mut steps, leave_at, count);
        } else {
            count += 1;
            entering += 1;
            push_step(&mut steps, enter_at, count);
        }
    }
    while leaving < times.len() {
        count -= 1;
        let leave_at = times[leaving].saturating_add(window);
        leaving += 1;
        push_step(&mut steps, leave_at, count);
    }
    steps
}

/// Appends a step, merging steps at the same instant into the last one.
fn push_step(steps: &mut Vec<(u64, u64)>, at: u64, count: u64) {
    match steps.last_mut() {
        Some(last) if last.0 == at => last.1 = count,
        _ => steps.push((at, count)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, quadratic: every window that starts at an instant.
    fn brute_max(times: &[u64], window: u64) -> u64 {
        times
            .iter()
            .map(|&s| times.iter().filter(|&&t| t >= s && t < s + window).count() as u64)
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn any_window_is_half_open() {
        assert_eq!(max_in_any_window(&[], 10), 0);
        assert_eq!(max_in_any_window(&[0, 10, 20], 10), 1);
        assert_eq!(max_in_any_window(&[0, 9, 10, 19], 10), 2);
        assert_eq!(max_in_any_window(&[5, 5, 5, 14, 15], 10), 4);
    }

    #[test]
    fn any_window_matches_the_definition() {
        let mut state = 7_u64;
        for _ in 0..200 {
            let mut times: Vec<u64> = (0..40)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    (state >> 33) % 100
                })
                .collect();
            times.sort_unstable();
            for window in [1, 7, 10, 33] {
                assert_eq!(max_in_any_window(&times, window), brute_max(&times, window));
            }
        }
    }

    #[test]
    fn aligned_windows_count_whole_slots() {
        // Fixed windows of 10: [0,10) holds 2, [10,20) holds 3.
        let times = [1, 9, 10, 11, 19, 25];
        assert_eq!(max_in_aligned_windows(&times, 10, 1), 3);
        // Slots of 5, windows of 2 slots: [5,15) holds 9,10,11 = 3; [15,25) holds 19 = 1.
        assert_eq!(max_in_aligned_windows(&times, 10, 2), 3);
        // Slots of 10/3 ns: [⌈10/3⌉, ⌈40/3⌉) = [4, 14) holds 9, 10, 11.
        assert_eq!(max_in_aligned_windows(&times, 10, 3), 3);
        assert_eq!(max_in_aligned_windows(&[], 10, 3), 0);
    }

    #[test]
    fn trailing_counts_step_at_entries_and_exits() {
        let steps = trailing_counts(&[0, 3, 3, 10], 10);
        // 0 enters; the pair at 3; 0 leaves at 10 as 10 enters; 3s leave at 13.
        assert_eq!(steps, vec![(0, 1), (3, 3), (10, 3), (13, 1), (20, 0)]);
        assert_eq!(trailing_counts(&[], 10), vec![(0, 0)]);
    }
}
