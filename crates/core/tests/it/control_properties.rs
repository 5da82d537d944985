//! Property tests of the controls (`tollgate::control`) against the
//! algorithms' guarantees (`support::window`): **a refund never lets more be
//! admitted in any window than the quota allows counting the refunded
//! permits as never taken**, and a reset or a penalty never breaks a
//! guarantee for the admissions after it.
//!
//! A random sequence of clock advances, checks and refunds runs on a
//! `Limiter` over a `ManualClock`; every admission is recorded as `(now,
//! cost)`. A refund of `n` removes from the record the newest `min(n,
//! counted)` permits, where `counted` is what the limiter counts before it
//! (capacity − `peek_n(0).remaining()`): the permits a refund can give back
//! are the most recent ones still counted, and exactly those are then taken
//! as never admitted. The guarantee is checked over what is left.

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use support::algorithms::{fixed, gcra, log, wheel};
use support::window::Guaranteed;
use tollgate::{Algorithm, Clock, Limiter, ManualClock};

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Check(u64),
    Refund(u64),
    Reset,
}

fn ops(period: u64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0..=period / 2).prop_map(Op::Advance),
            6 => (1u64..=4).prop_map(Op::Check),
            3 => (0u64..=5).prop_map(Op::Refund),
            1 => Just(Op::Reset),
        ],
        1..80,
    )
}

/// Runs `ops` and checks the guarantee over the admissions left after the
/// refunds and resets took theirs back.
fn run<A: Algorithm + Guaranteed>(algorithm: A, ops: &[Op]) -> Result<(), TestCaseError> {
    let guarantee = algorithm.guarantee();
    let capacity = algorithm.capacity();
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    // Permits, one entry each, oldest first: (instant, 1).
    let mut record: Vec<(u64, u64)> = Vec::new();
    // What the guarantee is checked over: admissions never given back,
    // split in segments at each reset (a reset is a fresh limiter).
    let mut segments: Vec<Vec<(u64, u64)>> = Vec::new();
    for op in ops {
        let now = clock.now().as_u64();
        match *op {
            Op::Advance(dt) => clock.advance(Duration::from_nanos(dt)),
            Op::Check(cost) => {
                let cost = cost.min(capacity);
                if limiter.check_n(cost).unwrap().is_allowed() {
                    record.extend(std::iter::repeat_n((now, 1), cost as usize));
                }
            }
            Op::Refund(n) => {
                let counted = capacity - limiter.peek_n(0).unwrap().remaining();
                let given = n.min(counted).min(record.len() as u64);
                let _ = limiter.refund(n);
                record.truncate(record.len() - given as usize);
            }
            Op::Reset => {
                let _ = limiter.reset();
                segments.push(std::mem::take(&mut record));
            }
        }
    }
    segments.push(record);
    for segment in &segments {
        if let Err(violation) = guarantee.check(segment) {
            return Err(TestCaseError::fail(format!("{violation}")));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn gcra_refunds_never_exceed_the_rate(
        limit in 1u64..=6, burst in 1u64..=6, period in 2u64..=1_000, ops in ops(1_000),
    ) {
        run(gcra(limit, period, burst), &ops)?;
    }

    #[test]
    fn fixed_window_refunds_never_exceed_a_window(
        limit in 1u64..=6, period in 2u64..=1_000, ops in ops(1_000),
    ) {
        run(fixed(limit, period), &ops)?;
    }

    #[test]
    fn sliding_log_refunds_never_exceed_any_window(
        limit in 1u64..=6, period in 2u64..=1_000, ops in ops(1_000),
    ) {
        run(log(limit, period), &ops)?;
    }

    #[test]
    fn sliding_window_refunds_never_exceed_its_bounds(
        limit in 1u64..=6, period in 2u64..=1_000, slots in 1u32..=4, ops in ops(1_000),
    ) {
        run(wheel(limit, period, slots), &ops)?;
    }
}
