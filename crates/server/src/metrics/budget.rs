//! Budget rules' metrics (`budget:`, see [`crate::config::budget`]), in
//! the budget's own unit, per rule (labels `rule` and `unit`, both bounded
//! by the file):
//!
//! - `tollgate_budget_spent_total`: units charged (every charge, fitting or
//!   not: what was spent);
//! - `tollgate_budget_overdrawn_total`: units of the charges that did not
//!   fit (taken into debt);
//! - `tollgate_budget_refused_looks_total`: looks (cost 0) refused because
//!   the budget was overspent.
//!
//! What remains and what is owed are per bucket (per user), not per rule,
//! and so are not series (a label per user would grow without bound): a
//! charge's answer says what remains (`remaining`, 0 while in debt) and
//! a look's `retry_after` how long until the debt is repaid.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tollgate::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabel {
    rule: String,
    unit: String,
}

/// The families, registered once.
#[derive(Clone, Default)]
pub(super) struct BudgetFamilies {
    spent: Family<BudgetLabel, Counter>,
    overdrawn: Family<BudgetLabel, Counter>,
    refused_looks: Family<BudgetLabel, Counter>,
}

impl BudgetFamilies {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "budget_spent",
            "Units charged to each budget rule, fitting or not",
            self.spent.clone(),
        );
        registry.register(
            "budget_overdrawn",
            "Units of the charges that went over a budget rule's limit (taken into debt)",
            self.overdrawn.clone(),
        );
        registry.register(
            "budget_refused_looks",
            "Looks (cost 0) refused because the budget was overspent",
            self.refused_looks.clone(),
        );
    }

    /// One budget rule's counters.
    pub(super) fn of(&self, rule: &str, unit: &str) -> BudgetCounters {
        let label = BudgetLabel {
            rule: rule.to_owned(),
            unit: unit.to_owned(),
        };
        BudgetCounters {
            unit: unit.into(),
            spent: self.spent.get_or_create(&label).clone(),
            overdrawn: self.overdrawn.get_or_create(&label).clone(),
            refused_looks: self.refused_looks.get_or_create(&label).clone(),
        }
    }
}

/// One budget rule's counters (clones of the registered ones).
#[derive(Clone, Debug)]
pub struct BudgetCounters {
    unit: std::sync::Arc<str>,
    spent: Counter,
    overdrawn: Counter,
    refused_looks: Counter,
}

/// A budget rule's totals so far, as the status page shows them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BudgetTotals {
    /// The budget's unit (`tokens`).
    pub unit: String,
    /// Units charged.
    pub spent: u64,
    /// Units of the charges that went over the limit.
    pub overdrawn: u64,
    /// Looks refused while overspent.
    pub refused_looks: u64,
}

impl BudgetCounters {
    /// Counts one decision of `cost` (0: a look; else a charge).
    pub(super) fn decided(&self, cost: u64, decision: &Decision) {
        if cost == 0 {
            if decision.is_denied() {
                self.refused_looks.inc();
            }
            return;
        }
        self.spent.inc_by(cost);
        if decision.is_denied() {
            self.overdrawn.inc_by(cost);
        }
    }

    /// The totals so far.
    pub fn totals(&self) -> BudgetTotals {
        BudgetTotals {
            unit: self.unit.to_string(),
            spent: self.spent.get(),
            overdrawn: self.overdrawn.get(),
            refused_looks: self.refused_looks.get(),
        }
    }
}
