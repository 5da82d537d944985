//! What every service of one layer shares: the [`Config`] the
//! [`Builder`](crate::Builder) assembles and each
//! [`RateLimitService`](crate::RateLimitService) reads, in its own module so
//! that the layer (which builds it) and the service (which reads it) both
//! depend on it and not on each other.

use std::time::Duration;

use http::Method;

use crate::cost::CostFn;
use crate::key::KeyExtractor;
use crate::observe::Observed;
use crate::response::{HeaderPolicy, RejectionFn};
use crate::settle::SettleFn;
use std::sync::Arc;

/// What to do with a request whose key cannot be extracted.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum OnMissingKey<K> {
    /// Answer with the key error's status: `500` when the server attached
    /// no connection address, `400` when the client sent no key or a bad
    /// one. The default.
    #[default]
    Reject,
    /// Pass the request on without limiting it.
    Allow,
    /// Count the request under this key (for example one shared bucket for
    /// every anonymous client).
    Use(K),
}

/// Everything a service needs, shared by every clone.
pub(crate) struct Config<E: KeyExtractor, L> {
    pub(crate) extractor: E,
    pub(crate) backend: L,
    pub(crate) cost: Option<CostFn>,
    pub(crate) on_missing_key: OnMissingKey<E::Key>,
    pub(crate) max_delay: Option<Duration>,
    pub(crate) headers_on_success: bool,
    pub(crate) grpc: bool,
    pub(crate) policy: Arc<HeaderPolicy>,
    pub(crate) on_rejection: Option<RejectionFn>,
    pub(crate) settle: Option<Settler<E::Key, L>>,
    /// Methods passed on uncharged.
    pub(crate) skip_methods: Vec<Method>,
    /// Called once per decision (see [`observe`](crate::observe)).
    pub(crate) observed: Option<Observed<E::Key>>,
    /// Dry-run: never answer a request here (see [`observe`](crate::observe)).
    pub(crate) dry_run: bool,
}

/// Settle mode: what a response cost, and how to charge the backend.
pub(crate) struct Settler<K, L> {
    pub(crate) actual: SettleFn,
    /// `Charge::charge` of the backend, taken where the bound is known.
    pub(crate) charge: fn(&L, &K, u64),
}
