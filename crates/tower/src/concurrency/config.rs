//! What every clone of a concurrency layer and its services share, in its
//! own module so that the layer (which builds it) and the service and
//! responses (which read it) depend on it and not on each other.

use std::time::Duration;

use http::request::Parts;
use tollgate::concurrency::Priority;

use crate::KeyExtractor;

/// How a request that finds no slot is answered (gRPC requests get
/// `RESOURCE_EXHAUSTED` either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// `503 Service Unavailable`, with `Retry-After` if a hint is given.
    ServiceUnavailable {
        /// The `Retry-After` hint, if any.
        retry_after: Option<Duration>,
    },
    /// `429 Too Many Requests` with `Retry-After`.
    TooManyRequests {
        /// The `Retry-After` hint (whole seconds, rounded up, at least 1).
        retry_after: Duration,
    },
}

type PriorityFn = dyn Fn(&Parts) -> Priority + Send + Sync;

/// What every clone of the layer and its services share.
pub(crate) struct Config<E: KeyExtractor, B> {
    pub(crate) extractor: E,
    pub(crate) limiter: B,
    pub(crate) refusal: Refusal,
    pub(crate) priority: Option<Box<PriorityFn>>,
    pub(crate) wait: bool,
}

impl<E: KeyExtractor, B> Config<E, B> {
    pub(crate) fn priority(&self, parts: &Parts) -> Priority {
        self.priority
            .as_ref()
            .map_or(Priority::Default, |priority| priority(parts))
    }
}
