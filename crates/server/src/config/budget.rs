//! `budget:` on a descriptor: its limits are a budget of some unit
//! (tokens) that is *charged* what was spent, rather than a gate that
//! refuses what does not fit.
//!
//! ```yaml
//! descriptors:
//!   - key: user
//!     budget: {unit: tokens}
//!     rate_limit: {unit: hour, requests_per_unit: 100000}
//! ```
//!
//! # Model
//!
//! A budget rule answers two questions (see [`crate::service`] for the
//! APIs' side):
//!
//! - **a look** (cost 0, Envoy's `hits_addend: 0` on the request path): is
//!   the budget overspent? OVER_LIMIT only once the bucket is *past* its
//!   limit, as envoyproxy/ratelimit answers a hit of 0 (over when the count
//!   after the hits is above the limit): a budget spent exactly to its
//!   limit still admits a look, which is what Lyft's `token-quota.sh`
//!   expects.
//! - **a charge** (cost ≥ 1: the stream-done call's `hits_addend`, the
//!   forward-auth and HTTP charge endpoints): the cost was incurred and is
//!   recorded whether or not it fits, taking the bucket into debt; the
//!   answer is OK when it fitted and OVER_LIMIT when it went over (the
//!   charge is recorded either way). Later looks are refused until the
//!   debt is repaid at the quota's rate.
//!
//! # Parameters
//!
//! - `unit` (required): what the budget counts, as metrics and the status
//!   page name it (`tokens`, `bytes`, `credits`): 1 to 32 ASCII letters,
//!   digits or `_`, starting with a letter.
//!
//! # Decisions
//!
//! - **On the descriptor, not in `rate_limit`**: a rule is a budget or a
//!   gate as a whole; with `rate_limits:` (a per-minute and a per-day
//!   budget), every limit is charged.
//! - **GCRA, fixed window, sliding window, sliding log, calendar**: each
//!   keeps a charge's excess as a debt, in memory (the core) and on Redis
//!   (the rule scripts read a count or a debt past the limit as state, by
//!   the same arithmetic), so the look after an overdraft is refused until
//!   the debt is repaid at the quota's rate: GCRA's TAT runs past the
//!   burst; a window that ends with `limit + D` starts the next with `D`;
//!   the sliding window's debt fills each slot's room as older slots
//!   leave; the sliding log stamps the excess a period on (memory only:
//!   Redis runs no sliding log, refused at its line there). **Guarantee**:
//!   over any window the algorithm names (any interval of length `t` for
//!   GCRA), charged ≤ limit (GCRA: burst + rate·t) + the debt still owed
//!   at its end, and that debt is at most `DEBT_PERIODS × limit` (the
//!   largest single overshoot), repeated charges included: the stored
//!   debt is capped, not only each charge.
//! - **Not `warmup:`**: the core charges a warm-up's debt in memory, but
//!   the Redis scripts do not, and a rule must mean the same on either
//!   backend: refused at its line.
//! - **The debt a single charge can make is capped** at
//!   [`MAX_CHARGE_PERIODS`] times the rule's capacity: one absurd charge
//!   (`hits_addend: 18446744073709551615`) cannot lock a key out for ever.
//!   The clamp is reported (the HTTP answers say what was charged, a WARN
//!   line is logged); never a silent allow, never a panic.
//! - Not with `unlimited: true` nor `requests_per_unit: 0` (nothing to
//!   charge): refused.

use serde::Deserialize;

use super::AlgorithmKind;

/// The most one charge records: this many times the rule's capacity (its
/// burst), so at most this many quota periods of debt from one charge. The
/// core's own debt cap ([`tollgate::algorithm::DEBT_PERIODS`]), so that a
/// charge on the Redis backend records what one in memory records.
pub const MAX_CHARGE_PERIODS: u64 = tollgate::algorithm::DEBT_PERIODS;

/// `budget:` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetYaml {
    unit: String,
}

/// A rule's budget, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetConfig {
    /// What the budget counts (`tokens`).
    pub unit: String,
}

impl BudgetYaml {
    pub(crate) fn validate(self) -> Result<BudgetConfig, String> {
        let unit = self.unit;
        let well_formed = (1..=32).contains(&unit.len())
            && unit.starts_with(|c: char| c.is_ascii_alphabetic())
            && unit.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed {
            return Err(format!(
                "budget.unit: '{unit}' is not a unit name (1 to 32 ASCII letters, digits or _, starting with a letter)"
            ));
        }
        Ok(BudgetConfig { unit })
    }
}

/// Whether a budget may run on `kind`: its debt is carried in memory and
/// on Redis (see the module docs).
pub(crate) fn carries_debt(kind: AlgorithmKind) -> bool {
    !matches!(kind, AlgorithmKind::WarmUp)
}

/// Why a budget may not run on `kind` (`carries_debt` is false).
pub(crate) fn why_not(kind: AlgorithmKind) -> &'static str {
    match kind {
        AlgorithmKind::WarmUp => {
            "the Redis scripts do not carry a warm-up's debt, so the budget would not mean the same on both backends"
        }
        _ => "it carries no debt",
    }
}

impl BudgetConfig {
    /// What one charge of `cost` records under a rule of `capacity`: the
    /// cost, clamped at [`MAX_CHARGE_PERIODS`] times the capacity.
    pub fn chargeable(capacity: u64, cost: u64) -> u64 {
        cost.min(capacity.saturating_mul(MAX_CHARGE_PERIODS))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    fn load(descriptor: &str) -> Result<Config, String> {
        let yaml = format!("domain: d\ndescriptors:\n  - key: user\n{descriptor}");
        Config::from_yaml(Path::new("t.yaml"), &yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn a_budget_is_read_onto_its_descriptor() {
        let config = load(
            "    budget: {unit: tokens}\n    rate_limits:\n      - {unit: minute, requests_per_unit: 100}\n      - {unit: day, requests_per_unit: 10000}\n",
        )
        .expect("valid");
        let budget = config.domains[0].descriptors[0].budget.as_ref();
        assert_eq!(budget.map(|b| b.unit.as_str()), Some("tokens"));
    }

    #[test]
    fn a_budget_that_cannot_be_charged_is_refused_at_its_line() {
        for (descriptor, error) in [
            (
                "    budget: {unit: tokens}\n    rate_limit: {unit: minute, requests_per_unit: 100, warmup: {period: 60s}}\n",
                "not warm_up: the Redis scripts",
            ),
            (
                "    budget: {unit: tokens}\n    rate_limit: {unlimited: true}\n",
                "unlimited",
            ),
            (
                "    budget: {unit: tokens}\n    rate_limit: {unit: minute, requests_per_unit: 0}\n",
                "requests_per_unit: 0",
            ),
            ("    budget: {unit: tokens}\n", "needs a rate_limit"),
            (
                "    budget: {unit: 'to kens'}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                "budget.unit",
            ),
            (
                "    budget: {unit: ''}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                "budget.unit",
            ),
            (
                "    budget: {unit: tokens, cap: 3}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                "cap",
            ),
            (
                "    budget: {}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                "unit",
            ),
        ] {
            let message = load(descriptor).expect_err(descriptor);
            assert!(message.contains(error), "{descriptor}: {message}");
            assert!(message.contains("t.yaml:"), "the line is named: {message}");
        }
    }

    /// Every algorithm whose debt both backends carry runs a budget: the
    /// windows too, now that the Redis scripts read a count past the limit
    /// as a debt.
    #[test]
    fn a_budget_runs_on_every_algorithm_that_carries_debt() {
        for limit in [
            "    rate_limit: {unit: minute, requests_per_unit: 100}\n",
            "    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}\n",
            "    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window}\n",
            "    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_log}\n",
            "    rate_limit: {calendar: month, requests_per_unit: 100}\n",
            "    rate_limits:\n      - {unit: minute, requests_per_unit: 100, algorithm: fixed_window}\n      - {calendar: day, requests_per_unit: 10000}\n",
        ] {
            let config = load(&format!("    budget: {{unit: tokens}}\n{limit}"))
                .unwrap_or_else(|e| panic!("{limit}: {e}"));
            assert!(config.domains[0].descriptors[0].budget.is_some(), "{limit}");
        }
    }

    #[test]
    fn a_charge_is_clamped_at_the_cap() {
        use super::{BudgetConfig, MAX_CHARGE_PERIODS};
        assert_eq!(BudgetConfig::chargeable(100, 5), 5);
        assert_eq!(
            BudgetConfig::chargeable(100, u64::MAX),
            100 * MAX_CHARGE_PERIODS
        );
        assert_eq!(BudgetConfig::chargeable(u64::MAX, u64::MAX), u64::MAX);
    }
}
