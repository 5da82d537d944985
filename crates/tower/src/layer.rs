//! [`RateLimitLayer`] and its [`Builder`].
//!
//! # Decisions
//!
//! - Everything the services need (extractor, backend, cost function,
//!   hooks, header policy) lives in one `Arc` built once: cloning a layer or
//!   a service is one reference-count increment, every clone decides on the
//!   same backend, and nothing needs a `'static` lifetime.
//! - Every setting has a default a cautious user would pick: reject at once,
//!   one permit per request, reject a request without a key
//!   ([`OnMissingKey::Reject`]), RateLimit headers on rejections only, gRPC
//!   answers for gRPC requests, the policy named `"default"` without a
//!   window.
//! - Every setter is infallible, so that a configuration reads as one
//!   chain; what can be invalid (the policy name, the advertised quota's
//!   window) is checked once by [`Builder::build`], which returns a
//!   [`BuildError`], never at request time.
//! - Every method is charged by default, `OPTIONS` and `HEAD` included: a
//!   limit that some requests skip unasked is a limit that fails open.
//!   [`Builder::skip_methods`] exempts the ones a service answers cheaply
//!   (CORS preflights, typically), by name, so that a method nobody listed
//!   (`PROPFIND`, a made-up one) is still charged.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response};
use http_body_util::Full;
use tower_layer::Layer;

use crate::backend::{Backend, Charge};
pub use crate::config::OnMissingKey;
use crate::config::{Config, Settler};
use crate::error::BuildError;
use crate::key::KeyExtractor;
use crate::observe::{Observed, ShowKey};
use crate::response::{HeaderPolicy, Rejection, sf_string};
use crate::service::RateLimitService;
use tollgate::Quota;
use tollgate::observe::Observer;

/// A tower layer that rate-limits HTTP requests per key: see the
/// [crate docs](crate).
///
/// Cloning it, and every service it makes, shares one configuration and
/// one backend through an [`Arc`].
pub struct RateLimitLayer<E: KeyExtractor, L> {
    config: Arc<Config<E, L>>,
}

impl<E: KeyExtractor, L: Backend<E::Key>> RateLimitLayer<E, L> {
    /// Limits requests by `extractor`'s key with `backend`, every other
    /// setting at its default.
    pub fn new(extractor: E, backend: L) -> RateLimitLayer<E, L> {
        let builder = RateLimitLayer::builder(extractor, backend);
        RateLimitLayer {
            // The defaults are valid: nothing to check.
            config: Arc::new(builder.config),
        }
    }

    /// Starts building a layer that limits requests by `extractor`'s key
    /// with `backend`.
    pub fn builder(extractor: E, backend: L) -> Builder<E, L> {
        Builder {
            config: Config {
                extractor,
                backend,
                cost: None,
                on_missing_key: OnMissingKey::Reject,
                max_delay: None,
                headers_on_success: false,
                grpc: true,
                policy: Arc::new(HeaderPolicy {
                    name: "\"default\"".to_owned(),
                    quota: None,
                }),
                on_rejection: None,
                settle: None,
                skip_methods: Vec::new(),
                observed: None,
                dry_run: false,
            },
            policy_name: None,
            policy_quota: None,
        }
    }

    /// The backend, to read its state (for example a keyed limiter's
    /// `len()`).
    pub fn backend(&self) -> &L {
        &self.config.backend
    }
}

impl<E: KeyExtractor, L> Clone for RateLimitLayer<E, L> {
    fn clone(&self) -> RateLimitLayer<E, L> {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<E: KeyExtractor, L> fmt::Debug for RateLimitLayer<E, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<S, E: KeyExtractor, L> Layer<S> for RateLimitLayer<E, L> {
    type Service = RateLimitService<S, E, L>;

    fn layer(&self, inner: S) -> RateLimitService<S, E, L> {
        RateLimitService::new(inner, Arc::clone(&self.config))
    }
}

/// Builds a [`RateLimitLayer`]; every setting has a default, and
/// [`build`](Builder::build) checks them all at once.
pub struct Builder<E: KeyExtractor, L> {
    config: Config<E, L>,
    /// As given, checked by `build`.
    policy_name: Option<String>,
    policy_quota: Option<Quota>,
}

impl<E: KeyExtractor, L: Backend<E::Key>> Builder<E, L> {
    /// What a request costs, in permits, from its parts (see
    /// [`cost`](crate::cost)). By default, 1.
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.config.cost = Some(Box::new(cost));
        self
    }

    /// What to do with a request whose key cannot be extracted. By default,
    /// [`OnMissingKey::Reject`].
    pub fn on_missing_key(mut self, on_missing_key: OnMissingKey<E::Key>) -> Self {
        self.config.on_missing_key = on_missing_key;
        self
    }

    /// Instead of rejecting at once, a denied request waits up to
    /// `max_delay` in all: it sleeps for the decision's `retry_after` and
    /// asks again, as long as the wait fits in what is left, and is
    /// rejected when it no longer does. Needs a tokio runtime.
    ///
    /// Each key waits on its own (a waiting client does not hold up
    /// another), but waiters of one key are not served in order: each
    /// retries on its own schedule, and a newcomer may take the permit a
    /// waiter slept for. For FIFO order use a [`tollgate::Shaper`] backend
    /// instead (one queue for every key, bounded by the shaper's own
    /// `max_delay`; leave this unset with it). See the
    /// [modes](crate::guide::modes) for which to use when. By default, no
    /// waiting.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.config.max_delay = Some(max_delay);
        self
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit`
    /// too. By default, only rejections do.
    pub fn headers_on_success(mut self, enabled: bool) -> Self {
        self.config.headers_on_success = enabled;
        self
    }

    /// The name of the policy in the RateLimit headers: give stacked
    /// layers different names, so that a client can tell their items
    /// apart. Printable ASCII ([`build`](Self::build) refuses anything else
    /// with [`BuildError::PolicyName`]). By default, `"default"`.
    pub fn policy_name(mut self, name: impl Into<String>) -> Self {
        self.policy_name = Some(name.into());
        self
    }

    /// The quota `RateLimit-Policy` advertises: `q` its limit and `w` its
    /// period in seconds, a quota a client pacing itself to it can use
    /// (draft -11 §3.1). Give the quota the backend runs, burst aside:
    /// `Quota::per_second(10)?.with_burst(20)?` advertises `q=10;w=1`, never
    /// `q=20;w=1`, since only 10 per second are sustained. With per-key
    /// overrides or several limits ([`AllOf`](tollgate::AllOf)), give the
    /// one every client can count on (or leave it unset).
    ///
    /// [`build`](Self::build) checks it against the quotas the backend
    /// enforces on a key without an override ([`Backend::enforced_quotas`]):
    /// its limit and period must be one of theirs, burst aside, else
    /// [`BuildError::PolicyQuota`]. A later
    /// [`set_default`](tollgate::KeyedLimiter::set_default) is not seen:
    /// build the layer again when the default changes.
    ///
    /// The period must be a whole number of seconds, at least one (the
    /// draft's `w` is an integer of seconds, never 0):
    /// [`build`](Self::build) refuses others with
    /// [`BuildError::PolicyWindow`]. By default, none: the policy item is
    /// `q` = the decision's `limit` (the most permits at once) without `w`,
    /// since a decision does not carry its quota's period.
    pub fn policy_quota(mut self, quota: Quota) -> Self {
        self.policy_quota = Some(quota);
        self
    }

    /// Methods passed on without being limited or charged, and without
    /// RateLimit headers: for example `[Method::OPTIONS]` for CORS
    /// preflights a service answers without work. By default, none: every
    /// method is charged, `OPTIONS` and `HEAD` included (see
    /// [Methods](crate::guide::modes)).
    pub fn skip_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config.skip_methods = methods.into_iter().collect();
        self
    }

    /// Whether gRPC requests get gRPC statuses rather than HTTP `429`s. By
    /// default, yes.
    pub fn grpc(mut self, enabled: bool) -> Self {
        self.config.grpc = enabled;
        self
    }

    /// Builds the answer to rejected (non-gRPC) requests; `Retry-After` and
    /// the RateLimit headers are added unless the response has them. The
    /// body is anything that converts into bytes (`String`, `&'static str`,
    /// `Vec<u8>`, [`Bytes`]), so no body crate is needed. By default, a
    /// plain-text body with the rejection's status.
    ///
    /// # Examples
    ///
    /// ```
    /// use axum::http::{Response, header};
    /// use tollgate::{Gcra, KeyedLimiter, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer, Rejection};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_ip = KeyedLimiter::new(Gcra::new(Quota::per_second(10)?)?);
    /// let layer = RateLimitLayer::builder(PeerIp::new(), per_ip)
    ///     .on_rejection(|rejection: &Rejection| {
    ///         let mut response = Response::new(format!("{{\"error\":\"{rejection}\"}}\n"));
    ///         *response.status_mut() = rejection.status();
    ///         response.headers_mut().insert(
    ///             header::CONTENT_TYPE,
    ///             header::HeaderValue::from_static("application/json"),
    ///         );
    ///         response
    ///     })
    ///     .build()?;
    /// # drop(layer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_rejection<B>(
        mut self,
        hook: impl Fn(&Rejection) -> Response<B> + Send + Sync + 'static,
    ) -> Self
    where
        B: Into<Bytes>,
    {
        self.config.on_rejection = Some(Box::new(move |rejection| {
            hook(rejection).map(|body| Full::new(body.into()))
        }));
        self
    }

    /// Reserve, then settle (see [`settle`](crate::settle)): a request is
    /// admitted on its [`cost`](Self::cost) (the least it can cost), and
    /// once its response body has been sent the backend is charged
    /// whatever `actual` says it cost above that, from the response head
    /// and the body bytes sent. Needs a backend that can be charged
    /// ([`Charge`]: the keyed and plain limiters). By default, off.
    pub fn settle(
        mut self,
        actual: impl Fn(&http::response::Parts, u64) -> u64 + Send + Sync + 'static,
    ) -> Self
    where
        L: Charge<E::Key>,
    {
        self.config.settle = Some(Settler {
            actual: Box::new(actual),
            charge: <L as Charge<E::Key>>::charge,
        });
        self
    }

    /// Calls `observer` once per decision the layer acts on, without the
    /// key, naming the limit by the [`policy_name`](Self::policy_name) (see
    /// [`observe`](crate::observe)). By default, none.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.config.observed = Some(Observed {
            observer: Arc::new(observer),
            show_key: None,
            name: Box::from(""),
        });
        self
    }

    /// As [`observer`](Self::observer), and hands it the key when it asks
    /// for keys ([`Observer::wants_keys`]).
    pub fn observer_with_keys(mut self, observer: impl Observer) -> Self
    where
        E::Key: fmt::Display,
    {
        let show_key = observer
            .wants_keys()
            .then_some((|key| key) as ShowKey<E::Key>);
        self.config.observed = Some(Observed {
            observer: Arc::new(observer),
            show_key,
            name: Box::from(""),
        });
        self
    }

    /// Dry-run (shadow): decide, count and report as usual, but let every
    /// request through, a refused one with the headers its `429` would
    /// have carried; observers see [`Outcome::Shadow`](tollgate::observe::Outcome::Shadow)
    /// (see [`observe`](crate::observe)). By default, `false`.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.config.dry_run = dry_run;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::PolicyName`] for a [`policy_name`](Self::policy_name)
    /// outside printable ASCII, [`BuildError::PolicyWindow`] for a
    /// [`policy_quota`](Self::policy_quota) whose period is not a whole
    /// number of seconds, [`BuildError::PolicyQuota`] for one whose limit
    /// and period are not those of a quota the backend enforces (when the
    /// backend says: every backend of this crate does).
    pub fn build(mut self) -> Result<RateLimitLayer<E, L>, BuildError> {
        let raw_name = self.policy_name.as_deref().unwrap_or("default");
        if let Some(observed) = &mut self.config.observed {
            observed.name = Box::from(raw_name);
        }
        if let Some(name) = self.policy_name.take() {
            let quoted = sf_string(&name).ok_or(BuildError::PolicyName { name })?;
            self.policy_mut().name = quoted;
        }
        if let Some(quota) = self.policy_quota.take() {
            let period = quota.period();
            if period.subsec_nanos() != 0 || period.as_secs() == 0 {
                return Err(BuildError::PolicyWindow { period });
            }
            // Advertise only what the layer enforces.
            if let Some(enforced) = self.config.backend.enforced_quotas() {
                let same = |q: &Quota| q.limit() == quota.limit() && q.period() == period;
                if !enforced.iter().any(same) {
                    return Err(BuildError::PolicyQuota {
                        advertised: (quota.limit(), period),
                        enforced: enforced.iter().map(|q| (q.limit(), q.period())).collect(),
                    });
                }
            }
            self.policy_mut().quota = Some((quota.limit(), period.as_secs()));
        }
        Ok(RateLimitLayer {
            config: Arc::new(self.config),
        })
    }

    fn policy_mut(&mut self) -> &mut HeaderPolicy {
        // Not shared before `build`: never a copy.
        Arc::make_mut(&mut self.config.policy)
    }
}
