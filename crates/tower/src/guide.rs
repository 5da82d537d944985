//! Reference material of the rate-limit layer, one page each, from the
//! crate's `docs/` directory (their examples run as doctests).

#[doc = include_str!("../docs/concepts.md")]
pub mod concepts {}

#[doc = include_str!("../docs/readiness.md")]
pub mod readiness {}

#[doc = include_str!("../docs/modes.md")]
pub mod modes {}

#[doc = include_str!("../docs/routes.md")]
pub mod routes {}

#[doc = include_str!("../docs/configuration.md")]
pub mod configuration {}

#[doc = include_str!("../docs/budgets.md")]
pub mod budgets {}
