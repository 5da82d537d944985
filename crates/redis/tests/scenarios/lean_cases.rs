//! The lean scripts' calls off the vectors' path: peeks, a cost of 0, a
//! cost above the capacity, denials, and the fixed window's general reply
//! where the compact one would be inexact (a period × limit past 2^53; a
//! stored window ahead of a clock that stepped back, whose time left
//! exceeds a period). Replayed by `parity.rs` (the lean scripts against the
//! general one) and `module.rs` (`TOLLGATE.LEAN` against the lean scripts).

use tollgate_redis::script::{Lean, SOURCE_FIXED, SOURCE_GCRA};

/// `op`, `now` (ns), `cost`.
pub type Step = (&'static str, u64, u64);

/// One limit and its calls.
pub struct LeanCase {
    pub name: &'static str,
    /// The lean script's source.
    pub source: &'static str,
    /// The limit's five arguments.
    pub limit: [&'static str; 5],
    /// Its shape, to read a compact reply back.
    pub shape: Lean,
    pub steps: &'static [Step],
}

/// The calls answered in the compact form, per case in [`cases`] order
/// (the rest answer the general form: the fixed window's inexact cases).
pub const COMPACT: [usize; 4] = [10, 8, 0, 1];

pub fn cases() -> [LeanCase; 4] {
    let fixed = |period: u64, limit: u64| Lean::Fixed {
        period,
        limit,
        unit_nanos: 1,
    };
    [
        LeanCase {
            name: "gcra",
            source: SOURCE_GCRA,
            limit: ["g", "1", "100", "500", "9000000000000000"],
            shape: Lean::Gcra {
                interval: 100,
                capacity: 500,
            },
            steps: &[
                ("c", 1000, 1),
                ("p", 1000, 0),
                ("p", 1000, 3),
                ("c", 1000, 4),
                ("c", 1000, 1),
                ("p", 1000, 1),
                ("c", 1000, 6),
                ("c", 1000, 0),
                ("c", 1150, 1),
                ("c", 9000, 5),
            ],
        },
        LeanCase {
            name: "fixed",
            source: SOURCE_FIXED,
            limit: ["f", "1000", "3", "0", "0"],
            shape: fixed(1000, 3),
            steps: &[
                ("c", 5000, 1),
                ("p", 5000, 2),
                ("c", 5000, 2),
                ("c", 5000, 1),
                ("c", 5000, 4),
                ("p", 5500, 0),
                ("c", 5999, 0),
                ("c", 6000, 3),
            ],
        },
        LeanCase {
            name: "fixed-inexact",
            source: SOURCE_FIXED,
            limit: ["f", "86400000000000", "1000000", "0", "0"],
            shape: fixed(86_400_000_000_000, 1_000_000),
            steps: &[("c", 10, 1), ("c", 10, 999_999), ("c", 20, 1), ("p", 30, 0)],
        },
        LeanCase {
            name: "fixed-clock-back",
            source: SOURCE_FIXED,
            limit: ["f", "1000", "5", "0", "0"],
            shape: fixed(1000, 5),
            steps: &[
                ("c", 5000, 1),
                ("c", 3000, 1),
                ("p", 3000, 0),
                ("c", 3000, 9),
            ],
        },
    ]
}
