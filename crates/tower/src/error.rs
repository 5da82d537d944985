//! [`BuildError`]: a layer configuration that cannot be served.
//!
//! Every setter of the [`Builder`](crate::Builder) is infallible, so that a
//! configuration reads as one chain; what can be invalid is checked once,
//! by [`Builder::build`](crate::Builder::build), never at request time.

use std::fmt;
use std::time::Duration;

/// Why [`Builder::build`](crate::Builder::build) refused a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The policy name has a character outside printable ASCII: a
    /// structured-field string (RFC 9651 §3.3.3) cannot carry it in the
    /// RateLimit headers.
    PolicyName {
        /// The name as given.
        name: String,
    },
    /// The advertised quota's period is not a whole number of seconds (at
    /// least one): the draft's `w` is an integer of seconds, non-zero, with
    /// no sub-second precision, and rounding it would advertise a quota the
    /// client cannot use.
    PolicyWindow {
        /// The quota's period.
        period: Duration,
    },
    /// The advertised quota is not one the backend enforces: a client
    /// pacing itself to it would be refused, or held back for nothing.
    PolicyQuota {
        /// Its limit and period.
        advertised: (u64, Duration),
        /// The limits and periods the backend enforces.
        enforced: Vec<(u64, Duration)>,
    },
    /// A token budget layer was given no budget: it would limit nothing.
    NoBudget,
    /// Two token budgets of one layer have the same name: a client could
    /// not tell their RateLimit items apart.
    DuplicateBudget {
        /// The name.
        name: String,
    },
    /// A token budget's backend cannot keep a budget: it cannot record a
    /// charge that does not fit, so a spent budget would keep admitting.
    UnfitBudget {
        /// The budget's name.
        name: String,
        /// Why, as the backend says.
        reason: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::PolicyName { name } => write!(
                f,
                "policy name {name:?} must be printable ASCII to be sent in RateLimit headers"
            ),
            BuildError::PolicyWindow { period } => write!(
                f,
                "the advertised quota's period ({period:?}) must be a whole number of seconds, at least 1, to be sent as `w` in RateLimit-Policy"
            ),
            BuildError::PolicyQuota {
                advertised: (limit, period),
                enforced,
            } => {
                let enforced: Vec<String> = enforced
                    .iter()
                    .map(|(limit, period)| format!("{limit} per {period:?}"))
                    .collect();
                write!(
                    f,
                    "the advertised quota ({limit} per {period:?}) is not one the backend enforces ({}): RateLimit-Policy would promise what the layer does not do",
                    enforced.join(", ")
                )
            }
            BuildError::NoBudget => f.write_str("a token budget layer needs at least one budget"),
            BuildError::DuplicateBudget { name } => {
                write!(
                    f,
                    "two token budgets are named {name:?}: give each its own name"
                )
            }
            BuildError::UnfitBudget { name, reason } => {
                write!(f, "the token budget {name:?} cannot be kept: {reason}")
            }
        }
    }
}

impl std::error::Error for BuildError {}
