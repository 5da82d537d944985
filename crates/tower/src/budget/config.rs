//! What every service of one [`TokenBudgetLayer`](super::TokenBudgetLayer)
//! shares: the budgets, the key, the estimate and the meter, assembled by
//! the [`Builder`](super::Builder) and read by the service and the bodies
//! it settles.

use http::request::Parts;

use super::backend::BudgetBackend;
use super::meter::{MeterFn, NoUsage, Settled, Tokens};
use crate::key::KeyExtractor;
use crate::response::HeaderPolicy;

/// A request's estimate in tokens, from its parts.
pub(crate) type EstimateFn = Box<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Told how each response was settled.
pub(crate) type SettledFn = Box<dyn Fn(&Settled) + Send + Sync>;

/// One named budget.
pub(crate) struct Budget<K> {
    /// The name as given, for messages.
    pub(crate) name: String,
    /// Its RateLimit items.
    pub(crate) policy: HeaderPolicy,
    pub(crate) backend: Box<dyn BudgetBackend<K>>,
}

/// Everything a service needs, shared by every clone.
pub(crate) struct Config<E: KeyExtractor> {
    pub(crate) extractor: E,
    pub(crate) budgets: Vec<Budget<E::Key>>,
    pub(crate) estimate: Option<EstimateFn>,
    pub(crate) tokens: Tokens,
    pub(crate) meter: Option<MeterFn>,
    pub(crate) no_usage: NoUsage,
    pub(crate) headers_on_success: bool,
    pub(crate) on_settled: Option<SettledFn>,
}
