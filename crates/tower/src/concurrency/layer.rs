//! [`ConcurrencyLimitLayer`], its builder and configuration.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use tollgate::concurrency::{KeyedConcurrencyLimiter, Priority};
use tower_layer::Layer;

use super::backend::ConcurrencyBackend;
use super::config::Config;
pub use super::config::Refusal;
use super::service::ConcurrencyLimitService;
use crate::KeyExtractor;

/// Holds a slot of a concurrency limit for each request, for the life of
/// its response; see the [module docs](super).
///
/// # Examples
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate::concurrency::KeyedConcurrencyLimiter;
/// use tollgate_tower::Global;
/// use tollgate_tower::concurrency::ConcurrencyLimitLayer;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // At most 100 requests in flight through this router.
/// let limiter = KeyedConcurrencyLimiter::new(100)?;
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(ConcurrencyLimitLayer::new(Global, limiter));
/// # Ok(())
/// # }
/// ```
///
/// On Redis (feature `redis`), pass a
/// `tollgate_redis::concurrency::RedisConcurrencyLimiter` as the limiter:
/// see [`ConcurrencyBackend`].
pub struct ConcurrencyLimitLayer<
    E: KeyExtractor,
    B = KeyedConcurrencyLimiter<<E as KeyExtractor>::Key>,
> {
    config: Arc<Config<E, B>>,
}

impl<E: KeyExtractor, B> Clone for ConcurrencyLimitLayer<E, B> {
    fn clone(&self) -> Self {
        ConcurrencyLimitLayer {
            config: self.config.clone(),
        }
    }
}

impl<E: KeyExtractor, B> fmt::Debug for ConcurrencyLimitLayer<E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("refusal", &self.config.refusal)
            .field("wait", &self.config.wait)
            .finish_non_exhaustive()
    }
}

impl<E, B> ConcurrencyLimitLayer<E, B>
where
    E: KeyExtractor,
    E::Key: Hash + Eq,
    B: ConcurrencyBackend<E::Key>,
{
    /// A layer limiting each key of `extractor` with `limiter` (in memory,
    /// or any [`ConcurrencyBackend`]), with the default answers (`503`, no
    /// waiting).
    pub fn new(extractor: E, limiter: B) -> Self {
        ConcurrencyLimitLayer::builder(extractor, limiter).build()
    }

    /// Starts configuring a layer.
    pub fn builder(extractor: E, limiter: B) -> ConcurrencyBuilder<E, B> {
        ConcurrencyBuilder {
            config: Config {
                extractor,
                limiter,
                refusal: Refusal::ServiceUnavailable { retry_after: None },
                priority: None,
                wait: false,
            },
        }
    }

    /// The limiter, shared with the layer.
    pub fn limiter(&self) -> &B {
        &self.config.limiter
    }
}

impl<S, E: KeyExtractor, B> Layer<S> for ConcurrencyLimitLayer<E, B> {
    type Service = ConcurrencyLimitService<S, E, B>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimitService::new(inner, self.config.clone())
    }
}

/// Configures a [`ConcurrencyLimitLayer`].
pub struct ConcurrencyBuilder<
    E: KeyExtractor,
    B = KeyedConcurrencyLimiter<<E as KeyExtractor>::Key>,
> {
    config: Config<E, B>,
}

impl<E: KeyExtractor, B> fmt::Debug for ConcurrencyBuilder<E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyBuilder")
            .field("refusal", &self.config.refusal)
            .field("wait", &self.config.wait)
            .finish_non_exhaustive()
    }
}

impl<E: KeyExtractor, B> ConcurrencyBuilder<E, B> {
    /// Answers `503 Service Unavailable`, with `Retry-After: hint` if
    /// given. By default, `503` without `Retry-After`.
    pub fn service_unavailable(mut self, retry_after: Option<Duration>) -> Self {
        self.config.refusal = Refusal::ServiceUnavailable { retry_after };
        self
    }

    /// Answers `429 Too Many Requests` with `Retry-After: hint` (whole
    /// seconds, rounded up, at least 1). By default, `503`.
    pub fn too_many_requests(mut self, retry_after: Duration) -> Self {
        self.config.refusal = Refusal::TooManyRequests { retry_after };
        self
    }

    /// The priority of each request, from its parts (a header, the route).
    /// By default, every request is [`Priority::Default`].
    pub fn priority(
        mut self,
        priority: impl Fn(&Parts) -> Priority + Send + Sync + 'static,
    ) -> Self {
        self.config.priority = Some(Box::new(priority));
        self
    }

    /// Whether a request that finds no slot waits for one (FIFO by
    /// priority, at most the limiter's `max_delay`; a backend without a
    /// queue, as Redis, answers at once). By default, `false`: answered at
    /// once.
    pub fn wait(mut self, wait: bool) -> Self {
        self.config.wait = wait;
        self
    }

    /// The layer.
    pub fn build(self) -> ConcurrencyLimitLayer<E, B> {
        ConcurrencyLimitLayer {
            config: Arc::new(self.config),
        }
    }
}
